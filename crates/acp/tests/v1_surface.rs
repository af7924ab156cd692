//! The rest of the stable ACP v1 surface, client role against the fixture agent role in memory, every message
//! validated against the official schema: `session/list|resume|close|delete`, `session/set_config_option` (the
//! `model` category), `logout`, `elicitation/create|complete`, `$/cancel_request` both ways, `usage_update`,
//! `session_info_update`, `config_option_update` and message ids. Capabilities the agent did not advertise are
//! refused before anything is sent; the client advertises only what is installed.

mod support;

use std::path::Path;

use agentwire_acp::schema::{
    AgentCapabilities, CancelNotification, CreateElicitationRequest, CreateElicitationResponse,
    ElicitationAcceptAction, ElicitationAction, InitializeRequest, InitializeResponse,
    ListSessionsRequest, NewSessionRequest, NewSessionResponse, PromptRequest, PromptResponse,
    ProtocolVersion, SessionConfigKind, SessionId, StopReason,
};
use agentwire_acp::{
    AcpError, Agent, AgentSide, ClientBuilder, ClientHandle, ElicitationHandler, Session,
    TurnEvent, Update,
};
use agentwire_fixture_agents::acp_fixture::Mode;
use agentwire_jsonrpc::ErrorObject;
use serde_json::{Value, json};
use support::{memory_pair, memory_pair_with, validate_def, within};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::sync::mpsc;

/// The `currentValue` of the session's `model` option.
fn current_model(session: &Session) -> Option<String> {
    match &session.model_option()?.kind {
        SessionConfigKind::Select(select) => Some(select.current_value.to_string()),
        _ => None,
    }
}

fn rpc_code(error: &AcpError) -> Option<i64> {
    error.rpc().map(|rpc| i64::from(rpc.code.0))
}

async fn prompt(session: &mut Session, text: &str) -> (Vec<Update>, Result<StopReason, AcpError>) {
    let turn = within(session.prompt_text(text))
        .await
        .expect("prompt sent");
    within(turn.finish()).await
}

#[tokio::test]
async fn list_resume_close_and_delete_round_trip() {
    let (client, tap) = memory_pair(Mode::Echo, ClientBuilder::new());
    within(client.initialize()).await.expect("initialize");
    let capabilities = client.session_capabilities();
    assert!(capabilities.list.is_some() && capabilities.resume.is_some());
    assert!(capabilities.close.is_some() && capabilities.delete.is_some());
    let mut first = within(client.new_session(Path::new("/work")))
        .await
        .expect("session/new");
    let _second = within(client.new_session(Path::new("/elsewhere")))
        .await
        .expect("session/new");
    let (_, end) = prompt(&mut first, "hello").await;
    assert_eq!(end.expect("turn"), StopReason::EndTurn);

    let all = within(client.list_sessions(ListSessionsRequest::new()))
        .await
        .expect("session/list");
    let ids: Vec<String> = all
        .sessions
        .iter()
        .map(|s| s.session_id.to_string())
        .collect();
    assert_eq!(ids, ["sess-1", "sess-2"]);
    let here = within(
        client.list_sessions(ListSessionsRequest::new().cwd(Path::new("/work").to_path_buf())),
    )
    .await
    .expect("session/list with cwd");
    assert_eq!(here.sessions.len(), 1);

    // Resume while the old handle is alive: the new registration takes over; no history is replayed.
    let mut resumed = within(client.resume_session(SessionId::new("sess-1"), Path::new("/work")))
        .await
        .expect("session/resume");
    within(client.routed()).await;
    assert_eq!(
        resumed.try_next_update(),
        None,
        "session/resume must not replay"
    );
    assert_eq!(current_model(&resumed).as_deref(), Some("fast"));
    drop(first); // Dropping the old handle must not unregister the resumed session.
    let (updates, end) = prompt(&mut resumed, "again").await;
    assert_eq!(
        updates
            .iter()
            .filter_map(Update::agent_text)
            .collect::<Vec<_>>(),
        ["again"]
    );
    assert_eq!(end.expect("turn"), StopReason::EndTurn);

    within(resumed.close()).await.expect("session/close");
    within(client.delete_session(&SessionId::new("sess-1")))
        .await
        .expect("session/delete");
    // "Deleting an already-deleted session … SHOULD succeed silently" (ACP v1 "Session Delete").
    within(client.delete_session(&SessionId::new("sess-1")))
        .await
        .expect("deleted twice");
    let unknown = within(client.resume_session(SessionId::new("sess-1"), Path::new("/work")))
        .await
        .expect_err("a deleted session");
    assert_eq!(rpc_code(&unknown), Some(-32002));
    let left = within(client.list_sessions(ListSessionsRequest::new()))
        .await
        .expect("session/list");
    assert_eq!(left.sessions.len(), 1);
    tap.assert_clean(true);
    let log = tap.log.lock().expect("tap");
    for method in [
        "session/list",
        "session/resume",
        "session/close",
        "session/delete",
    ] {
        assert!(
            log.client_methods.iter().any(|m| m == method),
            "{method} not sent"
        );
    }
}

#[tokio::test]
async fn the_model_is_a_config_option_and_updates_are_tracked() {
    let (client, tap) = memory_pair(Mode::Echo, ClientBuilder::new());
    within(client.initialize()).await.expect("initialize");
    let mut session = within(client.new_session(Path::new("/work")))
        .await
        .expect("session/new");
    assert_eq!(current_model(&session).as_deref(), Some("fast"));
    within(session.set_model("smart")).await.expect("set model");
    assert_eq!(current_model(&session).as_deref(), Some("smart"));
    // The agent also announces the change as a config_option_update after its answer.
    let update = within(session.next_update()).await.expect("update");
    assert_eq!(update.kind().as_deref(), Some("config_option_update"));
    assert_eq!(current_model(&session).as_deref(), Some("smart"));
    let unknown = within(session.set_model("huge"))
        .await
        .expect_err("unknown model");
    assert_eq!(rpc_code(&unknown), Some(-32602));
    let boolean = within(session.set_config_option(
        "model",
        agentwire_acp::schema::SessionConfigOptionValue::boolean(true),
    ))
    .await
    .expect_err("a boolean for a select");
    assert_eq!(rpc_code(&boolean), Some(-32602));
    tap.assert_clean(true);
}

#[tokio::test]
async fn logout_ends_the_authentication() {
    let (client, tap) = memory_pair(Mode::Auth, ClientBuilder::new());
    within(client.initialize()).await.expect("initialize");
    within(client.authenticate("fixture-token"))
        .await
        .expect("authenticate");
    within(client.new_session(Path::new("/work")))
        .await
        .expect("authenticated");
    within(client.logout()).await.expect("logout");
    let refused = within(client.new_session(Path::new("/work")))
        .await
        .expect_err("logged out");
    assert_eq!(rpc_code(&refused), Some(-32000));
    tap.assert_clean(true);
}

#[tokio::test]
async fn a_rich_turn_carries_message_ids_usage_and_title() {
    let (client, tap) = memory_pair(Mode::Rich, ClientBuilder::new());
    within(client.initialize()).await.expect("initialize");
    let mut session = within(client.new_session(Path::new("/work")))
        .await
        .expect("session/new");
    let (updates, end) = prompt(&mut session, "first question").await;
    assert_eq!(end.expect("turn"), StopReason::EndTurn);
    let kinds: Vec<String> = updates.iter().filter_map(Update::kind).collect();
    assert_eq!(
        kinds,
        ["agent_message_chunk", "session_info_update", "usage_update"]
    );
    assert_eq!(updates[0].message_id(), Some("msg-1"));
    assert_eq!(session.title(), Some("first question"));
    let usage = session.usage().expect("usage");
    assert_eq!((usage.used, usage.size), (100, 200_000));
    let (updates, _) = prompt(&mut session, "second").await;
    assert_eq!(updates[0].message_id(), Some("msg-2"));
    assert_eq!(session.usage().map(|u| u.used), Some(200));
    let cost = session.usage().and_then(|u| u.cost.clone()).expect("cost");
    assert_eq!(cost.currency, "USD");
    assert_eq!(session.title(), Some("first question"));
    tap.assert_clean(true);
}

/// Accepts forms with `{"name":"Ada"}`, declines URLs; records completions.
struct Answers(mpsc::UnboundedSender<String>);

impl ElicitationHandler for Answers {
    async fn create_elicitation(
        &self,
        request: CreateElicitationRequest,
    ) -> CreateElicitationResponse {
        let value = serde_json::to_value(&request).unwrap_or_default();
        let _ = self
            .0
            .send(format!("asked {}", value["mode"].as_str().unwrap_or("?")));
        if value["mode"] == "form" {
            let content: std::collections::BTreeMap<
                String,
                agentwire_acp::schema::ElicitationContentValue,
            > = serde_json::from_value(json!({"name": "Ada"})).expect("content");
            CreateElicitationResponse::new(ElicitationAction::Accept(
                ElicitationAcceptAction::new().content(content),
            ))
        } else {
            CreateElicitationResponse::new(ElicitationAction::Decline)
        }
    }

    async fn complete_elicitation(
        &self,
        notification: agentwire_acp::schema::CompleteElicitationNotification,
    ) {
        let _ = self
            .0
            .send(format!("completed {}", notification.elicitation_id));
    }
}

/// Never answers (a user who walked away).
struct Never;

impl ElicitationHandler for Never {
    async fn create_elicitation(
        &self,
        _request: CreateElicitationRequest,
    ) -> CreateElicitationResponse {
        std::future::pending().await
    }
}

#[tokio::test]
async fn elicitation_without_a_handler_is_declined_and_not_advertised() {
    let builder = ClientBuilder::new();
    assert_eq!(builder.capabilities().elicitation, None);
    let (client, tap) = memory_pair(Mode::Elicit, builder);
    within(client.initialize()).await.expect("initialize");
    let mut session = within(client.new_session(Path::new("/work")))
        .await
        .expect("session");
    let (updates, _) = prompt(&mut session, "form").await;
    assert_eq!(
        updates
            .iter()
            .filter_map(Update::agent_text)
            .collect::<Vec<_>>(),
        ["decline"]
    );
    assert_eq!(client.stats().elicitations_refused, 1);
    tap.assert_clean(true);
}

#[tokio::test]
async fn an_elicitation_handler_answers_forms_and_hears_url_completions() {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let builder = ClientBuilder::new().elicitation_handler(Answers(tx));
    let advertised = serde_json::to_value(builder.capabilities()).expect("json");
    assert_eq!(advertised["elicitation"], json!({"form": {}}));
    let (client, tap) = memory_pair(Mode::Elicit, builder);
    within(client.initialize()).await.expect("initialize");
    let mut session = within(client.new_session(Path::new("/work")))
        .await
        .expect("session");
    let (updates, _) = prompt(&mut session, "form").await;
    assert_eq!(
        updates
            .iter()
            .filter_map(Update::agent_text)
            .collect::<Vec<_>>(),
        [r#"accept {"name":"Ada"}"#]
    );
    let (updates, _) = prompt(&mut session, "url").await;
    assert_eq!(
        updates
            .iter()
            .filter_map(Update::agent_text)
            .collect::<Vec<_>>(),
        ["decline; completed"]
    );
    assert_eq!(within(rx.recv()).await.as_deref(), Some("asked form"));
    assert_eq!(within(rx.recv()).await.as_deref(), Some("asked url"));
    assert_eq!(within(rx.recv()).await.as_deref(), Some("completed el-1"));
    assert_eq!(client.stats().elicitations_refused, 0);
    tap.assert_clean(true);
}

#[tokio::test]
async fn cancelling_the_turn_answers_its_elicitation_cancel() {
    let (client, tap) = memory_pair(
        Mode::Elicit,
        ClientBuilder::new().elicitation_handler(Never),
    );
    within(client.initialize()).await.expect("initialize");
    let mut session = within(client.new_session(Path::new("/work")))
        .await
        .expect("session");
    let mut turn = within(session.prompt_text("form")).await.expect("prompt");
    let canceller = turn.canceller();
    // The elicitation is pending (Never answers); cancel from the side, then drain.
    let cancel = tokio::spawn(async move {
        // The cancel flag is set at once; the pending elicitation is answered `cancel` by the runtime.
        canceller.cancel().await
    });
    let mut texts = Vec::new();
    let mut end = None;
    while let Some(event) = within(turn.next()).await {
        match event {
            TurnEvent::Update(update) => texts.extend(update.agent_text().map(str::to_owned)),
            TurnEvent::End(outcome) => end = Some(outcome),
        }
    }
    assert!(within(cancel).await.expect("join").expect("cancel sent"));
    assert_eq!(texts, ["cancel"]);
    assert_eq!(end.expect("end").expect("cancelled"), StopReason::Cancelled);
    assert_eq!(client.stats().elicitations_refused, 1);
    tap.assert_clean(true);
}

#[tokio::test]
async fn the_agent_cancels_its_elicitation_with_cancel_request() {
    let (client, tap) = memory_pair(
        Mode::Elicit,
        ClientBuilder::new().elicitation_handler(Never),
    );
    within(client.initialize()).await.expect("initialize");
    let mut session = within(client.new_session(Path::new("/work")))
        .await
        .expect("session");
    let (updates, _) = prompt(&mut session, "cancel-request").await;
    assert_eq!(
        updates
            .iter()
            .filter_map(Update::agent_text)
            .collect::<Vec<_>>(),
        ["cancelled"]
    );
    // The client matched the `$/cancel_request` to the elicitation in flight (and answered it -32800, which the
    // agent's connection drops as the answer to a call it cancelled).
    assert_eq!(client.stats().rpc.cancel_requests_received, 1);
    assert_eq!(client.stats().rpc.cancel_requests_unmatched, 0);
    tap.assert_clean(true);
}

#[tokio::test]
async fn the_agent_role_answers_a_cancelled_request_32800() {
    let (to_agent, agent_in) = tokio::io::duplex(1 << 16);
    let (agent_out, from_agent) = tokio::io::duplex(1 << 16);
    let agent = AgentSide::new(
        agentwire_fixture_agents::acp_fixture::FixtureAgent::new(Mode::IgnoreUnknown),
        agent_in,
        agent_out,
        agentwire_jsonrpc::Config::default(),
    );
    tokio::spawn(agent.run());
    let mut to_agent = to_agent;
    let mut lines = BufReader::new(from_agent).lines();
    let request = json!({"jsonrpc":"2.0","id":7,"method":"_fixture/hang","params":{}});
    let cancel = json!({"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":7}});
    validate_def("ClientNotification", &cancel).expect("valid $/cancel_request");
    for message in [request, cancel] {
        to_agent
            .write_all(format!("{message}\n").as_bytes())
            .await
            .expect("write");
    }
    let line = within(lines.next_line())
        .await
        .expect("read")
        .expect("a line");
    let answer: Value = serde_json::from_str(&line).expect("json");
    assert_eq!(answer["id"], 7);
    assert_eq!(answer["error"]["code"], -32800);
    validate_def("AgentResponse", &answer).expect("valid answer");
}

/// An agent that advertises nothing beyond the required methods.
struct Minimal;

impl Agent for Minimal {
    async fn initialize(
        &self,
        _request: InitializeRequest,
    ) -> Result<InitializeResponse, ErrorObject> {
        Ok(InitializeResponse::new(ProtocolVersion::V1)
            .agent_capabilities(AgentCapabilities::new()))
    }
    async fn new_session(
        &self,
        _request: NewSessionRequest,
    ) -> Result<NewSessionResponse, ErrorObject> {
        Ok(NewSessionResponse::new("only"))
    }
    async fn prompt(
        &self,
        _request: PromptRequest,
        _client: ClientHandle,
    ) -> Result<PromptResponse, ErrorObject> {
        Ok(PromptResponse::new(StopReason::EndTurn))
    }
    async fn cancel(&self, _notification: CancelNotification) {}
}

#[tokio::test]
async fn methods_the_agent_did_not_advertise_are_refused_before_sending() {
    let (client, tap) = memory_pair_with(Minimal, ClientBuilder::new());
    let early = within(client.list_sessions(ListSessionsRequest::new()))
        .await
        .expect_err("before initialize");
    assert!(matches!(early, AcpError::NotInitialized));
    within(client.initialize()).await.expect("initialize");
    let mut session = within(client.new_session(Path::new("/w")))
        .await
        .expect("session");
    let id = SessionId::new("only");
    let refusals = [
        within(client.list_sessions(ListSessionsRequest::new()))
            .await
            .err(),
        within(client.resume_session(id.clone(), Path::new("/w")))
            .await
            .err(),
        within(client.close_session(&id)).await.err(),
        within(client.delete_session(&id)).await.err(),
        within(client.logout()).await.err(),
        within(session.set_model("x")).await.err(),
    ];
    let capabilities: Vec<String> = refusals
        .iter()
        .map(|error| match error {
            Some(AcpError::CapabilityMissing { capability }) => (*capability).to_owned(),
            other => format!("{other:?}"),
        })
        .collect();
    assert_eq!(
        capabilities,
        [
            "agentCapabilities.sessionCapabilities.list",
            "agentCapabilities.sessionCapabilities.resume",
            "agentCapabilities.sessionCapabilities.close",
            "agentCapabilities.sessionCapabilities.delete",
            "agentCapabilities.auth.logout",
            "configOptions[category=model]",
        ]
    );
    tap.assert_clean(true);
    let log = tap.log.lock().expect("tap");
    assert_eq!(log.client_methods, ["initialize", "session/new"]);
}

#[tokio::test]
async fn a_failed_resume_leaves_the_live_handle_working() {
    let (client, tap) = memory_pair(Mode::Echo, ClientBuilder::new());
    within(client.initialize()).await.expect("initialize");
    let mut session = within(client.new_session(Path::new("/work")))
        .await
        .expect("session/new");
    within(client.delete_session(session.id()))
        .await
        .expect("session/delete");
    let refused = within(client.resume_session(session.id().clone(), Path::new("/work")))
        .await
        .expect_err("a deleted session");
    assert_eq!(rpc_code(&refused), Some(-32002));
    // The failed resume's registration went away and gave the id back to the live handle.
    let (updates, end) = prompt(&mut session, "still here").await;
    assert_eq!(
        updates
            .iter()
            .filter_map(Update::agent_text)
            .collect::<Vec<_>>(),
        ["still here"]
    );
    assert_eq!(end.expect("turn"), StopReason::EndTurn);
    assert_eq!(client.stats().unrouted_updates_dropped, 0);
    tap.assert_clean(true);
}
