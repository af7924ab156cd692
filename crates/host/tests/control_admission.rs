//! Background compute admission through the real socket: a full compute pool never delays a detached run (the
//! interactive path), tool calls have a pool of their own, and a refusal is a retriable `rate_limited` envelope
//! naming the limit.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use agentwire_host::agents::AgentRegistry;
use agentwire_host::control::admission::{ComputeDomain, ComputeRequest};
use agentwire_host::control::{ControlConfig, ControlPlane};
use agentwire_local_control::caller::Caller;
use agentwire_local_control::client::{Client, ClientError};
use agentwire_local_control::descriptor::discover;
use agentwire_local_control::envelope::{ErrorCode, RequestEnvelope};
use agentwire_local_control::server::{Server, ServerConfig};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(60);

struct Host {
    _tmp: tempfile::TempDir,
    plane: ControlPlane,
    _server: Server,
    human: Client,
}

/// A host with one compute slot per domain and no queue, the `fx` fixture agent and a read-only `say` tool.
async fn host() -> Host {
    let tmp = tempfile::tempdir().expect("temp dir");
    let data = tmp.path().join("data");
    let fixture = agentwire_testkit::bin_path("awp-fixture");
    std::fs::write(
        tmp.path().join("agents.toml"),
        format!(
            "[[agents]]\nname = \"fx\"\nprotocol = \"awp-jsonl\"\nexecutable = \"{}\"\nargs = [\"--mode\", \"normal\"]\n",
            fixture.display()
        ),
    )
    .expect("write agents.toml");
    let registry = Arc::new(AgentRegistry::load(tmp.path(), &|_| None, None).expect("agents"));
    let mut config = ControlConfig::new(&data, "9.9.9");
    config.app = Some(tool_app(tmp.path()));
    config.admission.global_concurrency = 1;
    config.admission.max_queued = 0;
    let plane = ControlPlane::open(config, registry).await.expect("plane");
    let server = Server::start(ServerConfig::new(&data, "9.9.9"), plane.clone())
        .await
        .expect("server");
    let descriptor = discover(&data).expect("descriptor");
    let token = descriptor.token.clone();
    let human = Client::from_descriptor(&descriptor, token).expect("client");
    Host {
        _tmp: tmp,
        plane,
        _server: server,
        human,
    }
}

fn tool_app(dir: &Path) -> std::path::PathBuf {
    let app = dir.join("app");
    let write = |path: &str, text: &str| {
        let path = app.join(".agentproto").join(path);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("create dir");
        std::fs::write(path, text).expect("write manifest");
    };
    write(
        "tools/say/TOOL.md",
        "---\nschema: agentproto/tool/v1\nid: say\nname: Say\ndescription: Says its message.\nversion: 1.0.0\n\
         inputs:\n  type: object\n  properties:\n    msg: { type: string, maxLength: 100 }\n  required: [msg]\n\
         mutates: false\n---\n# Say\n",
    );
    write(
        "drivers/say-cli/DRIVER.md",
        "---\nschema: agentproto/driver/v1\nid: say-cli\nname: say-cli\ndescription: say-cli\nkind: cli\n\
         implements:\n  - tool: ./tools/say/TOOL.md\n    version: ^1\n    metadata:\n      cli:\n\
         \x20       argv: [\"${input.msg}\"]\n        outputFormat: text\nmetadata:\n  cli:\n    bin: echo\n---\n",
    );
    app
}

async fn call(client: &Client, method: &str, params: Value) -> Result<Value, ClientError> {
    client
        .rpc(&RequestEnvelope::new("req-1", method, params), WAIT)
        .await
}

fn held(domain: ComputeDomain) -> ComputeRequest {
    ComputeRequest::new("test.hold", domain, &Caller::human("test"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_compute_pool_never_delays_a_detached_run() {
    let host = host().await;
    let admission = host.plane.compute_admission();
    let _general = admission.admit(held(ComputeDomain::General)).await.unwrap();
    let _tools = admission
        .admit(held(ComputeDomain::ToolCall))
        .await
        .unwrap();
    let started = call(
        &host.human,
        "sessions.runDetached",
        json!({"prompt": "hello", "agentId": "fx"}),
    )
    .await
    .expect("a detached run starts while compute is full");
    assert!(started["runId"].is_string());
    // Reads are not compute either.
    call(&host.human, "cli.status", json!({})).await.unwrap();
    assert_eq!(admission.running(ComputeDomain::General), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_calls_have_their_own_pool_and_a_refusal_is_a_retriable_rate_limited() {
    let host = host().await;
    let admission = host.plane.compute_admission();
    let general = admission.admit(held(ComputeDomain::General)).await.unwrap();
    // Model/media/OCR compute being full does not take the tool pool's slot.
    let said = call(
        &host.human,
        "tools.call",
        json!({"toolId": "say", "input": {"msg": "hi"}}),
    )
    .await
    .expect("tool call while the general pool is full");
    assert!(said.to_string().contains("hi"), "{said}");
    drop(general);
    let tools = admission
        .admit(held(ComputeDomain::ToolCall))
        .await
        .unwrap();
    let refused = call(
        &host.human,
        "tools.call",
        json!({"toolId": "say", "input": {"msg": "hi"}}),
    )
    .await
    .expect_err("the tool pool is full and has no queue");
    let ClientError::Remote { error, .. } = refused else {
        panic!("not an error envelope: {refused}");
    };
    assert_eq!(error.code, ErrorCode::RateLimited);
    assert!(error.retriable);
    assert_eq!(
        error.details.and_then(|d| d.get("reason").cloned()),
        Some(json!("queue_full"))
    );
    // The slot freed, the same call passes.
    drop(tools);
    call(
        &host.human,
        "tools.call",
        json!({"toolId": "say", "input": {"msg": "hi"}}),
    )
    .await
    .expect("tool call after the slot freed");
}
