//! ACP client prompt turn overhead vs raw JSON-RPC: one echo turn (`session/prompt` → one `session/update` →
//! `{"stopReason":"end_turn"}`) over `agentwire_jsonrpc::Connection::memory`.
//!
//! - `agentwire_client_turn`: `Session::prompt_text` + `Turn::finish` against an `AgentSide` echo agent (typed
//!   schema values both ways, routing through the dispatcher, the end-of-turn barrier);
//! - `baseline_raw_jsonrpc`: the same exchange with raw `Connection` calls: the peer's `Incoming` loop sends the
//!   notification and answers; the caller reads the notification from its `Incoming` and awaits the call.
//!
//! Run with `cargo bench -p agentwire-acp --bench prompt_turn`.

use std::path::Path;
use std::time::Duration;

use agentwire_acp::schema::{
    AgentCapabilities, CancelNotification, ContentBlock, ContentChunk, InitializeRequest,
    InitializeResponse, NewSessionRequest, NewSessionResponse, PromptRequest, PromptResponse,
    ProtocolVersion, SessionUpdate, StopReason, TextContent,
};
use agentwire_acp::{Agent, AgentSide, ClientBuilder, ClientHandle, Session};
use agentwire_jsonrpc::{Config, Connection, ErrorObject, Incoming, IncomingMessage};
use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::{Value, json};

struct Echo;

impl Agent for Echo {
    async fn initialize(&self, _: InitializeRequest) -> Result<InitializeResponse, ErrorObject> {
        Ok(InitializeResponse::new(ProtocolVersion::V1)
            .agent_capabilities(AgentCapabilities::new()))
    }
    async fn new_session(&self, _: NewSessionRequest) -> Result<NewSessionResponse, ErrorObject> {
        Ok(NewSessionResponse::new("bench"))
    }
    async fn prompt(
        &self,
        request: PromptRequest,
        client: ClientHandle,
    ) -> Result<PromptResponse, ErrorObject> {
        let text: String = request
            .prompt
            .iter()
            .filter_map(|block| match block {
                ContentBlock::Text(text) => Some(text.text.as_str()),
                _ => None,
            })
            .collect();
        let chunk = SessionUpdate::AgentMessageChunk(ContentChunk::new(ContentBlock::Text(
            TextContent::new(text),
        )));
        client
            .session_update(&request.session_id, chunk)
            .await
            .map_err(|e| ErrorObject::internal_error(e.to_string()))?;
        Ok(PromptResponse::new(StopReason::EndTurn))
    }
    async fn cancel(&self, _: CancelNotification) {}
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

fn agentwire_session(rt: &tokio::runtime::Runtime) -> Session {
    rt.block_on(async {
        let ((client, client_in), (agent, agent_in)) = Connection::memory(Config::default());
        tokio::spawn(AgentSide::over(Echo, agent, agent_in).run());
        let client = ClientBuilder::new().connect_connection(client, client_in);
        client.initialize().await.expect("initialize");
        client
            .new_session(Path::new("/bench"))
            .await
            .expect("session")
    })
}

fn raw_pair(rt: &tokio::runtime::Runtime) -> (Connection, Incoming) {
    rt.block_on(async {
        let ((client, client_in), (agent, mut agent_in)) = Connection::memory(Config::default());
        tokio::spawn(async move {
            while let Some(message) = agent_in.next().await {
                if let IncomingMessage::Request(mut request) = message {
                    let params = request.params.take().unwrap_or(Value::Null);
                    let text = params["prompt"][0]["text"].clone();
                    let update = json!({"sessionId": params["sessionId"], "update": {
                        "sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}});
                    if agent.notify("session/update", Some(update)).await.is_err()
                        || request.respond(Ok(json!({"stopReason": "end_turn"}))).await.is_err()
                    {
                        return;
                    }
                }
            }
        });
        (client, client_in)
    })
}

fn bench(c: &mut Criterion) {
    let rt = runtime();
    let mut group = c.benchmark_group("acp_prompt_turn");
    group
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(30);
    let mut session = agentwire_session(&rt);
    group.bench_function("agentwire_client_turn", |b| {
        b.iter(|| {
            rt.block_on(async {
                let turn = session.prompt_text("hello").await.expect("prompt");
                let (updates, outcome) = turn.finish().await;
                assert_eq!(updates.len(), 1);
                assert!(outcome.is_ok());
            })
        })
    });
    let (client, mut client_in) = raw_pair(&rt);
    group.bench_function("baseline_raw_jsonrpc", |b| {
        b.iter(|| {
            rt.block_on(async {
                let params =
                    json!({"sessionId": "bench", "prompt": [{"type": "text", "text": "hello"}]});
                let call = client
                    .start_call("session/prompt", Some(params))
                    .await
                    .expect("call");
                let update = client_in.next().await.expect("update");
                assert!(matches!(update, IncomingMessage::Notification(_)));
                let answer = call.await.expect("answer");
                assert_eq!(answer["stopReason"], "end_turn");
            })
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
