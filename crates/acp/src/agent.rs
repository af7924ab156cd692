//! The agent role: serve ACP on a stream pair (stdin/stdout) with an [`Agent`] implementation, and call the client
//! back through a [`ClientHandle`] (`session/update`, `session/request_permission`, `fs/*`, `terminal/*`,
//! `elicitation/create`, `elicitation/complete`).
//!
//! Every request runs on its own task, so a `session/cancel` notification reaches [`Agent::cancel`] while the
//! prompt is still running. A `$/cancel_request {"requestId":…}` for a request still running drops its future and
//! answers it -32800 (ACP "Cancellation"; the receiver still answers every request). When the client closes the
//! connection (stdin EOF), the tasks still running are aborted and the output is flushed.
//!
//! Methods an [`Agent`] does not implement answer -32601; the capabilities it advertises in its `initialize` answer
//! are its own business (advertise `sessionCapabilities.list` only with [`Agent::list_sessions`], …).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use agent_client_protocol_schema::v1::{
    AuthenticateRequest, AuthenticateResponse, CancelNotification, CloseSessionRequest,
    CloseSessionResponse, CompleteElicitationNotification, CreateElicitationRequest,
    CreateElicitationResponse, CreateTerminalRequest, CreateTerminalResponse, DeleteSessionRequest,
    DeleteSessionResponse, InitializeRequest, InitializeResponse, KillTerminalRequest,
    KillTerminalResponse, ListSessionsRequest, ListSessionsResponse, LoadSessionRequest,
    LoadSessionResponse, LogoutRequest, LogoutResponse, NewSessionRequest, NewSessionResponse,
    PromptRequest, PromptResponse, ReadTextFileRequest, ReadTextFileResponse,
    ReleaseTerminalRequest, ReleaseTerminalResponse, RequestPermissionRequest,
    RequestPermissionResponse, ResumeSessionRequest, ResumeSessionResponse, SessionId,
    SessionNotification, SessionUpdate, SetSessionConfigOptionRequest,
    SetSessionConfigOptionResponse, SetSessionModeRequest, SetSessionModeResponse,
    TerminalOutputRequest, TerminalOutputResponse, WaitForTerminalExitRequest,
    WaitForTerminalExitResponse, WriteTextFileRequest, WriteTextFileResponse,
};
use agentwire_jsonrpc::{
    Connection, ErrorObject, Incoming, IncomingMessage, IncomingRequest, RequestId,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::task::JoinSet;

use crate::error::AcpError;

/// What an ACP agent does. Implement the required methods; the others answer -32601 (method not found).
///
/// Errors are JSON-RPC error objects sent to the client as is.
pub trait Agent: Send + Sync + 'static {
    /// `initialize`: answer the protocol version (echo 1) and capabilities.
    /// A request without `protocolVersion` never reaches this method (the runtime answers -32602).
    fn initialize(
        &self,
        request: InitializeRequest,
    ) -> impl Future<Output = Result<InitializeResponse, ErrorObject>> + Send;

    /// `authenticate {"methodId":…}`.
    fn authenticate(
        &self,
        request: AuthenticateRequest,
    ) -> impl Future<Output = Result<AuthenticateResponse, ErrorObject>> + Send {
        let _ = request;
        std::future::ready(Err(ErrorObject::method_not_found("authenticate")))
    }

    /// `session/new {"cwd":…,"mcpServers":[…]}` → `{"sessionId":…}`.
    fn new_session(
        &self,
        request: NewSessionRequest,
    ) -> impl Future<Output = Result<NewSessionResponse, ErrorObject>> + Send;

    /// `session/load`: replay the history with `client.session_update(…)` before answering.
    fn load_session(
        &self,
        request: LoadSessionRequest,
        client: ClientHandle,
    ) -> impl Future<Output = Result<LoadSessionResponse, ErrorObject>> + Send {
        let _ = (request, client);
        std::future::ready(Err(ErrorObject::method_not_found("session/load")))
    }

    /// `logout {}` (advertise `agentCapabilities.auth.logout`).
    fn logout(
        &self,
        request: LogoutRequest,
    ) -> impl Future<Output = Result<LogoutResponse, ErrorObject>> + Send {
        let _ = request;
        std::future::ready(Err(ErrorObject::method_not_found("logout")))
    }

    /// `session/list {"cwd"?,"cursor"?}` → `{"sessions":[{sessionId,cwd,title?,updatedAt?}],"nextCursor"?}`
    /// (advertise `sessionCapabilities.list`).
    fn list_sessions(
        &self,
        request: ListSessionsRequest,
    ) -> impl Future<Output = Result<ListSessionsResponse, ErrorObject>> + Send {
        let _ = request;
        std::future::ready(Err(ErrorObject::method_not_found("session/list")))
    }

    /// `session/resume {"sessionId":…,"cwd":…,"mcpServers":[…]}`: reopen a session **without** replaying its
    /// history (advertise `sessionCapabilities.resume`). `client` is for updates that are not history (e.g.
    /// `available_commands_update`).
    fn resume_session(
        &self,
        request: ResumeSessionRequest,
        client: ClientHandle,
    ) -> impl Future<Output = Result<ResumeSessionResponse, ErrorObject>> + Send {
        let _ = (request, client);
        std::future::ready(Err(ErrorObject::method_not_found("session/resume")))
    }

    /// `session/close {"sessionId":…}`: free the session's resources (advertise `sessionCapabilities.close`).
    fn close_session(
        &self,
        request: CloseSessionRequest,
    ) -> impl Future<Output = Result<CloseSessionResponse, ErrorObject>> + Send {
        let _ = request;
        std::future::ready(Err(ErrorObject::method_not_found("session/close")))
    }

    /// `session/delete {"sessionId":…}`: forget a stored session (advertise `sessionCapabilities.delete`).
    fn delete_session(
        &self,
        request: DeleteSessionRequest,
    ) -> impl Future<Output = Result<DeleteSessionResponse, ErrorObject>> + Send {
        let _ = request;
        std::future::ready(Err(ErrorObject::method_not_found("session/delete")))
    }

    /// `session/set_config_option {"sessionId":…,"configId":…,"value":…}` → every option's new state.
    fn set_session_config_option(
        &self,
        request: SetSessionConfigOptionRequest,
    ) -> impl Future<Output = Result<SetSessionConfigOptionResponse, ErrorObject>> + Send {
        let _ = request;
        std::future::ready(Err(ErrorObject::method_not_found(
            "session/set_config_option",
        )))
    }

    /// Any other request (extension methods, names starting with `_`): default -32601, as the spec requires of
    /// methods an agent does not know.
    fn ext_method(
        &self,
        method: &str,
        params: Option<Value>,
    ) -> impl Future<Output = Result<Value, ErrorObject>> + Send {
        let _ = params;
        std::future::ready(Err(ErrorObject::method_not_found(method)))
    }

    /// `session/set_mode {"sessionId":…,"modeId":…}`.
    fn set_session_mode(
        &self,
        request: SetSessionModeRequest,
    ) -> impl Future<Output = Result<SetSessionModeResponse, ErrorObject>> + Send {
        let _ = request;
        std::future::ready(Err(ErrorObject::method_not_found("session/set_mode")))
    }

    /// `session/prompt`: report progress with `client.session_update(…)`, ask with `client.request_permission(…)`,
    /// and answer the stop reason (`cancelled` after a cancel, as the spec requires).
    fn prompt(
        &self,
        request: PromptRequest,
        client: ClientHandle,
    ) -> impl Future<Output = Result<PromptResponse, ErrorObject>> + Send;

    /// `session/cancel {"sessionId":…}` (a notification): stop the session's turn.
    fn cancel(&self, notification: CancelNotification) -> impl Future<Output = ()> + Send;

    /// Called after the answer to a client request was queued for writing: anything sent from here goes out after
    /// it (updates after a `session/load` or `session/prompt` answer). Default: nothing.
    fn answered(
        &self,
        answered: Answered,
        client: ClientHandle,
    ) -> impl Future<Output = ()> + Send {
        let _ = (answered, client);
        std::future::ready(())
    }
}

/// Which request was just answered (see [`Agent::answered`]).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Answered {
    /// The method, e.g. `session/prompt`.
    pub method: String,
    /// The client's id of the request.
    pub request_id: RequestId,
    /// The session the request named (`sessionId` of `session/load`, `session/prompt`, `session/set_mode`).
    pub session_id: Option<SessionId>,
    /// What was answered (the result object or the error object), as sent.
    pub answer: Result<Value, ErrorObject>,
}

/// The agent's handle on the client: notifications and requests towards it. Cheap to clone.
#[derive(Clone, Debug)]
pub struct ClientHandle {
    connection: Connection,
}

async fn call<Req: Serialize, Resp: DeserializeOwned>(
    connection: &Connection,
    method: &str,
    request: &Req,
) -> Result<Resp, AcpError> {
    let params =
        serde_json::to_value(request).map_err(|error| AcpError::Encode(error.to_string()))?;
    let answer = connection
        .call(method, Some(params))
        .await
        .map_err(|error| AcpError::from_call(method, error))?;
    serde_json::from_value(answer).map_err(|error| AcpError::invalid_response(method, error))
}

/// Like [`call`], reading a `null` answer as `{}` (methods whose answer carries nothing but `_meta`).
async fn call_null_as_empty<Req: Serialize, Resp: DeserializeOwned>(
    connection: &Connection,
    method: &str,
    request: &Req,
) -> Result<Resp, AcpError> {
    let params =
        serde_json::to_value(request).map_err(|error| AcpError::Encode(error.to_string()))?;
    let answer = connection
        .call(method, Some(params))
        .await
        .map_err(|error| AcpError::from_call(method, error))?;
    let answer = if answer.is_null() {
        Value::Object(serde_json::Map::new())
    } else {
        answer
    };
    serde_json::from_value(answer).map_err(|error| AcpError::invalid_response(method, error))
}

impl ClientHandle {
    /// A handle over an existing connection.
    pub fn new(connection: Connection) -> ClientHandle {
        ClientHandle { connection }
    }

    /// The underlying JSON-RPC connection: the escape hatch for extension methods and for test fixtures that must
    /// send what a well-behaved agent never would (`Connection::send_message` writes any message as is).
    pub fn connection(&self) -> &Connection {
        &self.connection
    }

    /// Sends `session/update {"sessionId":…,"update":{"sessionUpdate":…}}`.
    ///
    /// # Errors
    ///
    /// [`AcpError::ConnectionClosed`], [`AcpError::Encode`].
    pub async fn session_update(
        &self,
        session_id: &SessionId,
        update: SessionUpdate,
    ) -> Result<(), AcpError> {
        let notification = SessionNotification::new(session_id.clone(), update);
        let params = serde_json::to_value(&notification)
            .map_err(|error| AcpError::Encode(error.to_string()))?;
        self.connection
            .notify("session/update", Some(params))
            .await?;
        Ok(())
    }

    /// Asks `session/request_permission` and waits for the outcome.
    ///
    /// # Errors
    ///
    /// [`AcpError::Rpc`], [`AcpError::InvalidResponse`], [`AcpError::ConnectionClosed`].
    pub async fn request_permission(
        &self,
        request: &RequestPermissionRequest,
    ) -> Result<RequestPermissionResponse, AcpError> {
        call(&self.connection, "session/request_permission", request).await
    }

    /// Asks `fs/read_text_file` (only if the client advertised `fs.readTextFile`).
    ///
    /// # Errors
    ///
    /// As [`ClientHandle::request_permission`].
    pub async fn read_text_file(
        &self,
        request: &ReadTextFileRequest,
    ) -> Result<ReadTextFileResponse, AcpError> {
        call(&self.connection, "fs/read_text_file", request).await
    }

    /// Asks `fs/write_text_file` (only if the client advertised `fs.writeTextFile`).
    ///
    /// # Errors
    ///
    /// As [`ClientHandle::request_permission`]. The answer may be `null` (older clients); it is read as `{}`.
    pub async fn write_text_file(
        &self,
        request: &WriteTextFileRequest,
    ) -> Result<WriteTextFileResponse, AcpError> {
        call_null_as_empty(&self.connection, "fs/write_text_file", request).await
    }

    /// Asks `elicitation/create` (only if the client advertised `elicitation`) and waits for the user's answer
    /// (`accept` with content, `decline`, `cancel`).
    ///
    /// # Errors
    ///
    /// As [`ClientHandle::request_permission`].
    pub async fn create_elicitation(
        &self,
        request: &CreateElicitationRequest,
    ) -> Result<CreateElicitationResponse, AcpError> {
        call(&self.connection, "elicitation/create", request).await
    }

    /// Sends `elicitation/complete {"elicitationId":…}` (a URL-mode elicitation finished out of band).
    ///
    /// # Errors
    ///
    /// [`AcpError::ConnectionClosed`], [`AcpError::Encode`].
    pub async fn complete_elicitation(
        &self,
        notification: &CompleteElicitationNotification,
    ) -> Result<(), AcpError> {
        let params = serde_json::to_value(notification)
            .map_err(|error| AcpError::Encode(error.to_string()))?;
        self.connection
            .notify("elicitation/complete", Some(params))
            .await?;
        Ok(())
    }

    /// Asks `terminal/create` (only if the client advertised `terminal`).
    ///
    /// # Errors
    ///
    /// As [`ClientHandle::request_permission`].
    pub async fn create_terminal(
        &self,
        request: &CreateTerminalRequest,
    ) -> Result<CreateTerminalResponse, AcpError> {
        call(&self.connection, "terminal/create", request).await
    }

    /// Asks `terminal/output`.
    ///
    /// # Errors
    ///
    /// As [`ClientHandle::request_permission`].
    pub async fn terminal_output(
        &self,
        request: &TerminalOutputRequest,
    ) -> Result<TerminalOutputResponse, AcpError> {
        call(&self.connection, "terminal/output", request).await
    }

    /// Asks `terminal/wait_for_exit`.
    ///
    /// # Errors
    ///
    /// As [`ClientHandle::request_permission`].
    pub async fn wait_for_terminal_exit(
        &self,
        request: &WaitForTerminalExitRequest,
    ) -> Result<WaitForTerminalExitResponse, AcpError> {
        call(&self.connection, "terminal/wait_for_exit", request).await
    }

    /// Asks `terminal/kill` (a `null` answer is read as `{}`).
    ///
    /// # Errors
    ///
    /// As [`ClientHandle::request_permission`].
    pub async fn kill_terminal(
        &self,
        request: &KillTerminalRequest,
    ) -> Result<KillTerminalResponse, AcpError> {
        call_null_as_empty(&self.connection, "terminal/kill", request).await
    }

    /// Asks `terminal/release` (a `null` answer is read as `{}`).
    ///
    /// # Errors
    ///
    /// As [`ClientHandle::request_permission`].
    pub async fn release_terminal(
        &self,
        request: &ReleaseTerminalRequest,
    ) -> Result<ReleaseTerminalResponse, AcpError> {
        call_null_as_empty(&self.connection, "terminal/release", request).await
    }
}

/// Serves one ACP connection with an [`Agent`].
pub struct AgentSide<A> {
    agent: Arc<A>,
    connection: Connection,
    incoming: Incoming,
    close_timeout: Duration,
}

impl<A> std::fmt::Debug for AgentSide<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentSide")
            .field("connection", &self.connection)
            .finish_non_exhaustive()
    }
}

fn parse<T: DeserializeOwned>(params: Option<Value>) -> Result<T, ErrorObject> {
    serde_json::from_value(params.unwrap_or(Value::Null))
        .map_err(|error| ErrorObject::invalid_params(error.to_string()))
}

fn encode<T: Serialize>(result: Result<T, ErrorObject>) -> Result<Value, ErrorObject> {
    result.and_then(|value| {
        serde_json::to_value(value).map_err(|error| ErrorObject::internal_error(error.to_string()))
    })
}

impl<A: Agent> AgentSide<A> {
    /// Serves `agent` over `reader` (the client's output, e.g. stdin) and `writer` (e.g. stdout).
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime.
    pub fn new<R, W>(
        agent: A,
        reader: R,
        writer: W,
        config: agentwire_jsonrpc::Config,
    ) -> AgentSide<A>
    where
        R: tokio::io::AsyncRead + Send + Unpin + 'static,
        W: tokio::io::AsyncWrite + Send + Unpin + 'static,
    {
        let (connection, incoming) = Connection::new(reader, writer, config);
        AgentSide::over(agent, connection, incoming)
    }

    /// Serves `agent` on this process's stdin and stdout.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime.
    pub fn stdio(agent: A, config: agentwire_jsonrpc::Config) -> AgentSide<A> {
        AgentSide::new(agent, tokio::io::stdin(), tokio::io::stdout(), config)
    }

    /// Serves `agent` over an existing connection (e.g. one end of [`Connection::memory`]).
    pub fn over(agent: A, connection: Connection, incoming: Incoming) -> AgentSide<A> {
        AgentSide {
            agent: Arc::new(agent),
            connection,
            incoming,
            close_timeout: Duration::from_secs(2),
        }
    }

    /// The handle on the client (to send updates outside a request, e.g. from a background task).
    pub fn client(&self) -> ClientHandle {
        ClientHandle::new(self.connection.clone())
    }

    /// Serves until the client closes the connection; then aborts what is still running and flushes the output
    /// (waiting at most 2 s for a client that does not read).
    pub async fn run(mut self) {
        let mut tasks = JoinSet::new();
        loop {
            tokio::select! {
                message = self.incoming.next() => match message {
                    Some(IncomingMessage::Request(request)) => {
                        let agent = self.agent.clone();
                        let client = self.client();
                        tasks.spawn(serve_request(agent, client, request));
                    }
                    Some(IncomingMessage::Notification(notification)) => {
                        if notification.method == "session/cancel" {
                            match parse::<CancelNotification>(notification.params) {
                                Ok(cancel) => {
                                    let agent = self.agent.clone();
                                    tasks.spawn(async move { agent.cancel(cancel).await });
                                }
                                Err(error) => tracing::debug!(?error, "invalid session/cancel"),
                            }
                        } else {
                            tracing::debug!(method = %notification.method, "ignoring client notification");
                        }
                    }
                    None => break,
                },
                Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            }
        }
        tasks.abort_all();
        // Bounded: a client that stopped reading must not keep the agent alive.
        let _ = tokio::time::timeout(self.close_timeout, self.connection.close()).await;
    }
}

async fn serve_request<A: Agent>(
    agent: Arc<A>,
    client: ClientHandle,
    mut request: IncomingRequest,
) {
    let params = request.params.take();
    let method = request.method.clone();
    let session_id = params
        .as_ref()
        .and_then(|p| p.get("sessionId"))
        .and_then(Value::as_str)
        .map(SessionId::new);
    let work = async {
        match method.as_str() {
            "initialize" => match parse::<InitializeRequest>(params) {
                Ok(params) => encode(agent.initialize(params).await),
                Err(error) => Err(error),
            },
            "authenticate" => match parse::<AuthenticateRequest>(params) {
                Ok(params) => encode(agent.authenticate(params).await),
                Err(error) => Err(error),
            },
            "session/new" => match parse::<NewSessionRequest>(params) {
                Ok(params) => encode(agent.new_session(params).await),
                Err(error) => Err(error),
            },
            "session/load" => match parse::<LoadSessionRequest>(params) {
                Ok(params) => encode(agent.load_session(params, client.clone()).await),
                Err(error) => Err(error),
            },
            "session/set_mode" => match parse::<SetSessionModeRequest>(params) {
                Ok(params) => encode(agent.set_session_mode(params).await),
                Err(error) => Err(error),
            },
            "session/prompt" => match parse::<PromptRequest>(params) {
                Ok(params) => encode(agent.prompt(params, client.clone()).await),
                Err(error) => Err(error),
            },
            "logout" => match parse::<LogoutRequest>(params) {
                Ok(params) => encode(agent.logout(params).await),
                Err(error) => Err(error),
            },
            "session/list" => match parse::<ListSessionsRequest>(params) {
                Ok(params) => encode(agent.list_sessions(params).await),
                Err(error) => Err(error),
            },
            "session/resume" => match parse::<ResumeSessionRequest>(params) {
                Ok(params) => encode(agent.resume_session(params, client.clone()).await),
                Err(error) => Err(error),
            },
            "session/close" => match parse::<CloseSessionRequest>(params) {
                Ok(params) => encode(agent.close_session(params).await),
                Err(error) => Err(error),
            },
            "session/delete" => match parse::<DeleteSessionRequest>(params) {
                Ok(params) => encode(agent.delete_session(params).await),
                Err(error) => Err(error),
            },
            "session/set_config_option" => match parse::<SetSessionConfigOptionRequest>(params) {
                Ok(params) => encode(agent.set_session_config_option(params).await),
                Err(error) => Err(error),
            },
            other => agent.ext_method(other, params).await,
        }
    };
    // `$/cancel_request` for this request: drop the work, answer -32800 (ACP "Cancellation").
    let result = tokio::select! {
        result = work => result,
        () = request.cancelled() => Err(ErrorObject::request_cancelled()),
    };
    let request_id = request.id.clone();
    let answer = result.clone();
    if let Err(error) = request.respond(result).await {
        tracing::debug!(%error, %method, "could not answer the client's request");
        return;
    }
    agent
        .answered(
            Answered {
                method,
                request_id,
                session_id,
                answer,
            },
            client,
        )
        .await;
}
