//! The client role's handler traits for agent-initiated requests, and the fail-closed default permission handler.
//!
//! Source: ACP v1 "Tool Calls" (`session/request_permission`), "File System" (`fs/read_text_file`,
//! `fs/write_text_file`) and "Elicitation" (`elicitation/create`, `elicitation/complete`); schema
//! `$defs/RequestPermissionRequest`, `$defs/ReadTextFileRequest`, `$defs/WriteTextFileRequest`,
//! `$defs/CreateElicitationRequest`, `$defs/CompleteElicitationNotification`.

use std::future::Future;
use std::pin::Pin;

use agent_client_protocol_schema::v1::{
    CompleteElicitationNotification, CreateElicitationRequest, CreateElicitationResponse,
    ElicitationAction, ElicitationCapabilities, ElicitationFormCapabilities, PermissionOptionKind,
    ReadTextFileRequest, ReadTextFileResponse, RequestPermissionOutcome, RequestPermissionRequest,
    SelectedPermissionOutcome, WriteTextFileRequest, WriteTextFileResponse,
};
use agentwire_jsonrpc::ErrorObject;

/// Decides the agent's `session/request_permission` requests.
///
/// JSON received: `{"sessionId":"s1","toolCall":{"toolCallId":"t1"},"options":[{"optionId":"allow","name":"Allow","kind":"allow_once"}]}`;
/// the answer is `{"outcome":{"outcome":"selected","optionId":"allow"}}` or `{"outcome":{"outcome":"cancelled"}}`.
/// When the client cancels the turn, the runtime answers every pending request `cancelled` itself (the handler's
/// future is dropped), as the spec requires.
pub trait PermissionHandler: Send + Sync + 'static {
    /// The outcome of one request. Implementations wait for a human, a policy, …
    fn request_permission(
        &self,
        request: RequestPermissionRequest,
    ) -> impl Future<Output = RequestPermissionOutcome> + Send;
}

/// The default permission handler: fails closed. It selects the first `reject_once` (else `reject_always`) option
/// the agent offers, and answers `cancelled` when there is none.
#[derive(Clone, Copy, Debug, Default)]
pub struct RejectPermissions;

impl PermissionHandler for RejectPermissions {
    async fn request_permission(
        &self,
        request: RequestPermissionRequest,
    ) -> RequestPermissionOutcome {
        let reject = [
            PermissionOptionKind::RejectOnce,
            PermissionOptionKind::RejectAlways,
        ]
        .into_iter()
        .find_map(|kind| request.options.iter().find(|option| option.kind == kind));
        match reject {
            Some(option) => RequestPermissionOutcome::Selected(SelectedPermissionOutcome::new(
                option.option_id.clone(),
            )),
            None => RequestPermissionOutcome::Cancelled,
        }
    }
}

/// Serves the agent's `fs/read_text_file` and `fs/write_text_file` requests. Installing one makes the client
/// advertise `clientCapabilities.fs.readTextFile` and `writeTextFile`. [`crate::RootedFs`] is the provided
/// implementation (confined to one directory).
pub trait FsHandler: Send + Sync + 'static {
    /// Reads a text file. JSON received: `{"sessionId":"s1","path":"/abs/file.rs","line":10,"limit":5}`.
    ///
    /// # Errors
    ///
    /// A JSON-RPC error object sent to the agent as is (e.g. -32002 resource not found).
    fn read_text_file(
        &self,
        request: ReadTextFileRequest,
    ) -> impl Future<Output = Result<ReadTextFileResponse, ErrorObject>> + Send;

    /// Writes (creates or replaces) a text file. JSON received: `{"sessionId":"s1","path":"/abs/f","content":"…"}`.
    ///
    /// # Errors
    ///
    /// A JSON-RPC error object sent to the agent as is.
    fn write_text_file(
        &self,
        request: WriteTextFileRequest,
    ) -> impl Future<Output = Result<WriteTextFileResponse, ErrorObject>> + Send;
}

/// Answers the agent's `elicitation/create` requests (structured input from the user: a form, or a URL to visit).
///
/// Installing one makes the client advertise `clientCapabilities.elicitation` as [`ElicitationHandler::capabilities`]
/// says (default: form mode only). Without one, nothing is advertised and an `elicitation/create` the agent sends
/// anyway is answered `{"action":"decline"}` ([`DeclineElicitations`]: fail closed). When the client cancels the turn
/// of the elicitation's session, the runtime answers `{"action":"cancel"}` itself (the handler's future is dropped);
/// a `$/cancel_request` for it is answered -32800.
///
/// JSON received: `{"mode":"form","sessionId":"s1","message":"Your name?","requestedSchema":{"type":"object","properties":{"name":{"type":"string"}}}}`;
/// answers: `{"action":"accept","content":{"name":"Ada"}}`, `{"action":"decline"}`, `{"action":"cancel"}`.
pub trait ElicitationHandler: Send + Sync + 'static {
    /// The `clientCapabilities.elicitation` advertised. Default `{"form":{}}`.
    fn capabilities(&self) -> ElicitationCapabilities {
        ElicitationCapabilities::new().form(ElicitationFormCapabilities::new())
    }

    /// The user's answer to one request.
    fn create_elicitation(
        &self,
        request: CreateElicitationRequest,
    ) -> impl Future<Output = CreateElicitationResponse> + Send;

    /// `elicitation/complete {"elicitationId":…}` (a notification): a URL-mode elicitation finished out of band.
    /// Default: nothing.
    fn complete_elicitation(
        &self,
        notification: CompleteElicitationNotification,
    ) -> impl Future<Output = ()> + Send {
        let _ = notification;
        std::future::ready(())
    }
}

/// The default elicitation answer: fails closed, declining every request.
#[derive(Clone, Copy, Debug, Default)]
pub struct DeclineElicitations;

impl ElicitationHandler for DeclineElicitations {
    async fn create_elicitation(
        &self,
        request: CreateElicitationRequest,
    ) -> CreateElicitationResponse {
        let _ = request;
        CreateElicitationResponse::new(ElicitationAction::Decline)
    }
}

pub(crate) type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Object-safe forms of the handler traits, so the client stores `Arc<dyn …>` while users write `async fn`.
pub(crate) trait DynPermissionHandler: Send + Sync {
    fn request_permission(
        &self,
        request: RequestPermissionRequest,
    ) -> BoxFuture<'_, RequestPermissionOutcome>;
}

impl<T: PermissionHandler> DynPermissionHandler for T {
    fn request_permission(
        &self,
        request: RequestPermissionRequest,
    ) -> BoxFuture<'_, RequestPermissionOutcome> {
        Box::pin(PermissionHandler::request_permission(self, request))
    }
}

pub(crate) trait DynFsHandler: Send + Sync {
    fn read_text_file(
        &self,
        request: ReadTextFileRequest,
    ) -> BoxFuture<'_, Result<ReadTextFileResponse, ErrorObject>>;
    fn write_text_file(
        &self,
        request: WriteTextFileRequest,
    ) -> BoxFuture<'_, Result<WriteTextFileResponse, ErrorObject>>;
}

impl<T: FsHandler> DynFsHandler for T {
    fn read_text_file(
        &self,
        request: ReadTextFileRequest,
    ) -> BoxFuture<'_, Result<ReadTextFileResponse, ErrorObject>> {
        Box::pin(FsHandler::read_text_file(self, request))
    }
    fn write_text_file(
        &self,
        request: WriteTextFileRequest,
    ) -> BoxFuture<'_, Result<WriteTextFileResponse, ErrorObject>> {
        Box::pin(FsHandler::write_text_file(self, request))
    }
}

pub(crate) trait DynElicitationHandler: Send + Sync {
    fn capabilities(&self) -> ElicitationCapabilities;
    fn create_elicitation(
        &self,
        request: CreateElicitationRequest,
    ) -> BoxFuture<'_, CreateElicitationResponse>;
    fn complete_elicitation(
        &self,
        notification: CompleteElicitationNotification,
    ) -> BoxFuture<'_, ()>;
}

impl<T: ElicitationHandler> DynElicitationHandler for T {
    fn capabilities(&self) -> ElicitationCapabilities {
        ElicitationHandler::capabilities(self)
    }
    fn create_elicitation(
        &self,
        request: CreateElicitationRequest,
    ) -> BoxFuture<'_, CreateElicitationResponse> {
        Box::pin(ElicitationHandler::create_elicitation(self, request))
    }
    fn complete_elicitation(
        &self,
        notification: CompleteElicitationNotification,
    ) -> BoxFuture<'_, ()> {
        Box::pin(ElicitationHandler::complete_elicitation(self, notification))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_client_protocol_schema::v1::{
        PermissionOption, ToolCallUpdate, ToolCallUpdateFields,
    };

    fn check(kinds: &[PermissionOptionKind], expect: Option<&str>) {
        let options = kinds
            .iter()
            .enumerate()
            .map(|(i, kind)| PermissionOption::new(format!("o{i}"), format!("option {i}"), *kind))
            .collect();
        let tool_call = ToolCallUpdate::new("t1", ToolCallUpdateFields::new());
        let request = RequestPermissionRequest::new("s1", tool_call, options);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        let outcome = runtime.block_on(PermissionHandler::request_permission(
            &RejectPermissions,
            request,
        ));
        let got = match outcome {
            RequestPermissionOutcome::Selected(selected) => Some(selected.option_id.to_string()),
            _ => None,
        };
        assert_eq!(got.as_deref(), expect);
    }

    #[test]
    fn the_default_elicitation_answer_declines_and_advertises_forms_only() {
        let schema = serde_json::from_value(serde_json::json!({"type":"object","properties":{}}))
            .expect("schema");
        let request = CreateElicitationRequest::new(
            agent_client_protocol_schema::v1::ElicitationFormMode::new(
                agent_client_protocol_schema::v1::ElicitationSessionScope::new("s1"),
                schema,
            ),
            "Your name?",
        );
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        let response = runtime.block_on(ElicitationHandler::create_elicitation(
            &DeclineElicitations,
            request,
        ));
        assert_eq!(
            serde_json::to_value(response).expect("json"),
            serde_json::json!({"action": "decline"})
        );
        assert_eq!(
            serde_json::to_value(ElicitationHandler::capabilities(&DeclineElicitations))
                .expect("json"),
            serde_json::json!({"form": {}})
        );
    }

    #[test]
    fn default_handler_fails_closed() {
        use PermissionOptionKind::*;
        check(&[AllowOnce, RejectOnce], Some("o1"));
        check(&[AllowAlways, RejectAlways, RejectOnce], Some("o2"));
        check(&[AllowOnce, RejectAlways], Some("o1"));
        check(&[AllowOnce, AllowAlways], None);
        check(&[], None);
    }
}
