//! The host's local control plane over a real Unix socket: `ControlPlane` behind `agentwire_local_control`'s
//! server, called with its client as the `deepchat` CLI would (human descriptor token, or an agent token).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use agentwire_approval::{ApprovalEvent, RendererEvent, Resolution};
use agentwire_host::agents::AgentRegistry;
use agentwire_host::control::{ControlConfig, ControlPlane};
use agentwire_host::{RunId, RunStatus, Store};
use agentwire_local_control::client::{Client, ClientError};
use agentwire_local_control::contract;
use agentwire_local_control::descriptor::{Token, discover};
use agentwire_local_control::envelope::{ErrorCode, RequestEnvelope, StreamRecord};
use agentwire_local_control::server::{Server, ServerConfig};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(60);

struct Host {
    _tmp: tempfile::TempDir,
    data: std::path::PathBuf,
    plane: ControlPlane,
    server: Option<Server>,
    human: Client,
}

fn registry(dir: &Path) -> Arc<AgentRegistry> {
    let fixture = agentwire_testkit::bin_path("awp-fixture");
    let mut text = String::new();
    for (name, mode) in [("fx", "normal"), ("silent", "silence")] {
        text.push_str(&format!(
            "[[agents]]\nname = \"{name}\"\nprotocol = \"awp-jsonl\"\nexecutable = \"{}\"\nargs = [\"--mode\", \"{mode}\"]\n",
            fixture.display()
        ));
    }
    std::fs::write(dir.join("agents.toml"), text).expect("write agents.toml");
    Arc::new(AgentRegistry::load(dir, &|_| None, None).expect("load agents"))
}

async fn host() -> Host {
    host_with(|_| None).await
}

/// A host whose control plane loads the app bundle `app(temp dir)` returns, if any.
async fn host_with(app: impl FnOnce(&Path) -> Option<std::path::PathBuf>) -> Host {
    let tmp = tempfile::tempdir().expect("temp dir");
    let data = tmp.path().join("data");
    let mut config = ControlConfig::new(&data, "9.9.9");
    config.app = app(tmp.path());
    let plane = ControlPlane::open(config, registry(tmp.path()))
        .await
        .expect("control plane");
    let server = Server::start(ServerConfig::new(&data, "9.9.9"), plane.clone())
        .await
        .expect("server");
    let descriptor = discover(&data).expect("descriptor");
    let token = descriptor.token.clone();
    let human = Client::from_descriptor(&descriptor, token).expect("client");
    Host {
        _tmp: tmp,
        data,
        plane,
        server: Some(server),
        human,
    }
}

impl Host {
    fn agent(&self, token: &str) -> Client {
        let descriptor = discover(&self.data).expect("descriptor");
        Client::from_descriptor(&descriptor, Token::parse(token).expect("token shape"))
            .expect("client")
    }
}

fn envelope(method: &str, params: Value) -> RequestEnvelope {
    RequestEnvelope::new("req-1", method, params)
}

async fn call(client: &Client, method: &str, params: Value) -> Result<Value, ClientError> {
    client.rpc(&envelope(method, params), WAIT).await
}

fn code(result: Result<Value, ClientError>) -> ErrorCode {
    result.expect_err("an error").code()
}

/// The records of `events.subscribe` for `run` and its terminal result.
async fn watch(client: &Client, run: &str) -> (Vec<StreamRecord>, Value) {
    let mut records = Vec::new();
    let result = client
        .stream(
            &envelope("events.subscribe", json!({"runId": run})),
            WAIT,
            |record| records.push(record),
        )
        .await
        .expect("stream");
    (records, result)
}

async fn start(client: &Client, agent: &str, prompt: &str) -> String {
    let result = call(
        client,
        "sessions.runDetached",
        json!({"prompt": prompt, "agentId": agent}),
    )
    .await
    .expect("run started");
    let decoded = contract::decode_result::<contract::runs::RunDetached>(result).expect("strict");
    decoded.run_id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn diagnostics_answer_in_deepchats_strict_shapes() {
    let host = host().await;
    let status = call(&host.human, "cli.status", json!({})).await.unwrap();
    let status = contract::decode_result::<contract::cli::Status>(status).expect("strict");
    assert_eq!(status.pid, std::process::id());
    let version = call(&host.human, "cli.version", json!({})).await.unwrap();
    assert_eq!(version["appVersion"], "9.9.9");
    let capabilities = call(&host.human, "cli.capabilities", json!({}))
        .await
        .unwrap();
    let capabilities =
        contract::decode_result::<contract::cli::Capabilities>(capabilities).expect("strict");
    let methods: Vec<&str> = capabilities
        .capabilities
        .iter()
        .map(|c| c.method.as_str())
        .collect();
    for method in [
        "sessions.runDetached",
        "events.subscribe",
        "runs.get",
        "threads.list",
    ] {
        assert!(methods.contains(&method), "{method} in {methods:?}");
    }
    let doctor = call(&host.human, "cli.doctor", json!({})).await.unwrap();
    contract::decode_result::<contract::cli::Doctor>(doctor).expect("strict");
    assert_eq!(
        code(call(&host.human, "nothing.here", json!({})).await),
        ErrorCode::NotFound
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_detached_run_streams_its_events_to_the_end_and_is_stored() {
    let host = host().await;
    let run = start(&host.human, "fx", "hello").await;
    let (records, result) = watch(&host.human, &run).await;
    let events: Vec<&str> = records.iter().map(|r| r.event.as_str()).collect();
    assert_eq!(events.first(), Some(&"runs.created"), "{events:?}");
    assert!(events.contains(&"chat.stream.updated"), "{events:?}");
    assert!(events.contains(&"chat.stream.completed"), "{events:?}");
    assert_eq!(
        events.last(),
        Some(&"sessions.status.changed"),
        "{events:?}"
    );
    for record in &records {
        contract::runs::RunEvent::decode(&record.event, record.data.clone())
            .unwrap_or_else(|e| panic!("{} decodes strictly: {e}", record.event));
        assert_eq!(record.run_id.as_deref(), Some(run.as_str()));
    }
    let last = records.last().unwrap();
    assert_eq!(last.data["status"], "idle");
    let result = contract::decode_result::<contract::runs::Subscribe>(result).expect("strict");
    assert_eq!(result.stop_reason.as_deref(), Some("completed"));
    assert_eq!(
        Some(result.last_cursor.as_str()),
        last.cursor.as_ref().map(|c| c.as_str())
    );

    let snapshot = call(&host.human, "runs.get", json!({"runId": run}))
        .await
        .unwrap();
    let snapshot = contract::decode_result::<contract::runs::Get>(snapshot).expect("strict");
    assert_eq!(snapshot.phase, contract::runs::RunPhase::Terminal);
    let texts: Vec<&str> = snapshot.messages.iter().map(|m| m.text.as_str()).collect();
    assert_eq!(texts, ["hello", "echo: hello"]);

    // Watching a finished run again replays it (the hub still holds it).
    let (again, _) = watch(&host.human, &run).await;
    assert_eq!(again.len(), records.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_is_idempotent_and_ends_a_live_run_cancelled() {
    let host = host().await;
    let run = start(&host.human, "silent", "hello").await;
    let first = call(&host.human, "runs.cancel", json!({"runId": run}))
        .await
        .unwrap();
    assert_eq!(first["cancelRequested"], true);
    let (records, _) = watch(&host.human, &run).await;
    assert_eq!(records.last().unwrap().data["status"], "idle");
    let again = call(&host.human, "runs.cancel", json!({"runId": run}))
        .await
        .unwrap();
    assert_eq!(again["cancelRequested"], false);
    assert_eq!(again["status"], "idle");
    let store = Store::open(&host.data).unwrap();
    let stored = store.run(&RunId::parse(&run).unwrap()).unwrap().unwrap();
    assert_eq!(stored.status, RunStatus::Cancelled);
    let snapshot = call(&host.human, "runs.get", json!({"runId": run}))
        .await
        .unwrap();
    assert_eq!(
        snapshot["stopReason"], "cancelled",
        "a cancelled run says so: {snapshot}"
    );
    assert_eq!(
        code(
            call(
                &host.human,
                "runs.cancel",
                json!({"runId": "run_0000000000000000"})
            )
            .await
        ),
        ErrorCode::NotFound
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_of_a_run_gets_a_token_that_dies_with_the_run() {
    let host = host().await;
    let run = start(&host.human, "fx", "env:DEEPCHAT_CLI_AGENT_TOKEN").await;
    watch(&host.human, &run).await;
    let snapshot = call(&host.human, "runs.get", json!({"runId": run}))
        .await
        .unwrap();
    let echoed = snapshot["messages"][1]["text"].as_str().unwrap().to_owned();
    let token = echoed
        .strip_prefix("echo: env:DEEPCHAT_CLI_AGENT_TOKEN=")
        .expect("the agent saw a token");
    assert_eq!(token.len(), 43, "32 random bytes, base64url");
    let agent = host.agent(token);
    assert_eq!(
        code(call(&agent, "cli.status", json!({})).await),
        ErrorCode::AuthenticationFailed,
        "revoked when the run ended"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_token_reads_only_its_own_conversation_and_cannot_start_runs() {
    let host = host().await;
    let mine = start(&host.human, "fx", "mine").await;
    let (records, _) = watch(&host.human, &mine).await;
    let thread = records[0].data["sessionId"].as_str().unwrap().to_owned();
    let other = start(&host.human, "fx", "other").await;
    watch(&host.human, &other).await;

    let token = host.plane.issue_agent_token(&thread).expect("token");
    let agent = host.agent(&token);
    call(&agent, "cli.status", json!({}))
        .await
        .expect("status is allowed");
    let own = call(&agent, "runs.get", json!({"runId": mine})).await;
    assert!(own.is_ok(), "{own:?}");
    assert_eq!(
        code(call(&agent, "runs.get", json!({"runId": other})).await),
        ErrorCode::NotFound,
        "another conversation's run is not even confirmed to exist"
    );
    assert_eq!(
        code(
            call(
                &agent,
                "sessions.runDetached",
                json!({"prompt": "more", "agentId": "fx"})
            )
            .await
        ),
        ErrorCode::PermissionDenied
    );
    let mut sink = Vec::new();
    let read = agent
        .download("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", &mut sink, WAIT)
        .await;
    assert_eq!(
        read.expect_err("agents cannot read bytes").code(),
        ErrorCode::PermissionDenied
    );
    let bad = host.agent("x".repeat(43).as_str());
    assert_eq!(
        code(call(&bad, "cli.status", json!({})).await),
        ErrorCode::AuthenticationFailed
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sensitive_mutation_fails_closed_without_a_renderer_and_waits_for_one_otherwise() {
    let host = host().await;
    let change = json!({"changes": [{"key": "autoCompactionEnabled", "value": false}]});
    assert_eq!(
        code(call(&host.human, "settings.updatePublic", change.clone()).await),
        ErrorCode::ApprovalDenied,
        "no renderer: denied at once"
    );
    // A preference write needs no approval.
    let pref = call(
        &host.human,
        "settings.updatePublic",
        json!({"changes": [{"key": "fontSizeLevel", "value": 2}]}),
    )
    .await
    .expect("preference write");
    assert_eq!(pref["values"]["fontSizeLevel"], 2);

    let mut console = host.plane.approvals().attach_renderer();
    let one = call(&host.human, "settings.updatePublic", change.clone());
    let two = call(&host.human, "settings.updatePublic", change.clone());
    let renderer = async {
        let mut seen = Vec::new();
        while seen.len() < 2 {
            if let Some(RendererEvent::Approval(ApprovalEvent::Created(a))) =
                console.next_event().await
            {
                seen.push(a);
            }
        }
        // One allow resumes exactly one mutation; the other is denied.
        console
            .resolve(seen[0].id, &seen[0].scope, Resolution::Approve)
            .unwrap();
        console
            .resolve(seen[1].id, &seen[1].scope, Resolution::Deny)
            .unwrap();
    };
    let (one, two, ()) = tokio::join!(one, two, renderer);
    let outcomes = [one.is_ok(), two.is_ok()];
    assert_eq!(
        outcomes.iter().filter(|ok| **ok).count(),
        1,
        "{one:?} {two:?}"
    );
    let denied = if one.is_err() { one } else { two };
    assert_eq!(code(denied), ErrorCode::ApprovalDenied);
    let settings = call(
        &host.human,
        "settings.getPublic",
        json!({"keys": ["autoCompactionEnabled"]}),
    )
    .await
    .unwrap();
    assert_eq!(settings["values"], json!({"autoCompactionEnabled": false}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transcript_is_an_owned_artifact_that_can_be_read_and_deleted() {
    let host = host().await;
    let run = start(&host.human, "fx", "hello").await;
    watch(&host.human, &run).await;
    let exported = call(&host.human, "runs.exportTranscript", json!({"runId": run}))
        .await
        .unwrap();
    let exported =
        contract::decode_result::<contract::ours::RunsExportTranscript>(exported).expect("strict");
    let id = exported.artifact.id.clone();
    let described = call(&host.human, "artifacts.describe", json!({"id": id}))
        .await
        .unwrap();
    assert_eq!(described["artifact"]["size"], exported.artifact.size);
    let mut bytes = Vec::new();
    host.human
        .download(&id, &mut bytes, WAIT)
        .await
        .expect("download");
    let text = String::from_utf8(bytes).unwrap();
    assert!(text.contains("\"echo: hello\""), "{text}");
    assert_eq!(text.lines().count(), 2);
    let deleted = call(&host.human, "artifacts.delete", json!({"id": id}))
        .await
        .unwrap();
    assert_eq!(deleted, json!({"deleted": true}));
    assert_eq!(
        code(call(&host.human, "artifacts.describe", json!({"id": id})).await),
        ErrorCode::NotFound
    );
    for hostile in [
        "..%2F..%2Fetc%2Fpasswd0000000000",
        "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
        "AAAA/AAAAAAAAAAAAAAAAAAAAAAAAAAA",
    ] {
        let answer = call(&host.human, "artifacts.describe", json!({"id": hostile})).await;
        let code = code(answer);
        assert!(
            matches!(code, ErrorCode::NotFound | ErrorCode::InvalidRequest),
            "{hostile}: {code:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn threads_are_listed_newest_first_with_a_cursor() {
    let host = host().await;
    for prompt in ["one", "two", "three"] {
        let run = start(&host.human, "fx", prompt).await;
        watch(&host.human, &run).await;
    }
    let first = call(&host.human, "threads.list", json!({"limit": 2}))
        .await
        .unwrap();
    let first = contract::decode_result::<contract::ours::ThreadsList>(first).expect("strict");
    assert_eq!(first.threads.len(), 2);
    assert_eq!(first.threads[0].title, "three");
    let cursor = first.next_cursor.expect("more");
    let rest = call(
        &host.human,
        "threads.list",
        json!({"limit": 2, "cursor": cursor}),
    )
    .await
    .unwrap();
    let rest = contract::decode_result::<contract::ours::ThreadsList>(rest).expect("strict");
    assert_eq!(rest.threads.len(), 1);
    assert_eq!(rest.threads[0].title, "one");
    assert!(rest.next_cursor.is_none());
    let thread = &rest.threads[0].thread_id;
    let detail = call(&host.human, "threads.get", json!({"threadId": thread}))
        .await
        .unwrap();
    assert_eq!(detail["messages"][1]["text"], "echo: one");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_ends_an_open_watch_with_unavailable_and_the_run_is_recorded() {
    let mut host = host().await;
    let run = start(&host.human, "silent", "hello").await;
    let human = host.human.clone();
    let run_id = run.clone();
    let watching = tokio::spawn(async move {
        human
            .stream(
                &envelope("events.subscribe", json!({"runId": run_id})),
                WAIT,
                |_| {},
            )
            .await
    });
    // Whether the watch is already being served or not yet connected, it ends typed, never hangs.
    let server = host.server.take().unwrap();
    server.shutdown().await;
    host.plane.shutdown(WAIT).await;
    let answer = watching.await.unwrap();
    let code = answer.expect_err("cut off").code();
    assert!(
        matches!(code, ErrorCode::Unavailable | ErrorCode::Cancelled),
        "{code:?}"
    );
    let store = Store::open(&host.data).unwrap();
    let stored = store.run(&RunId::parse(&run).unwrap()).unwrap().unwrap();
    assert_ne!(stored.status, RunStatus::Running);
    assert!(!host.data.join("local-control/local-control.json").exists());
}

/// An app bundle under `dir/app` with two tools: `say` (`mutates: false`, `echo MSG`) and `touch`
/// (`mutates: true`, `touch PATH`: its effect is visible on disk).
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
        "tools/touch/TOOL.md",
        "---\nschema: agentproto/tool/v1\nid: touch\nname: Touch\ndescription: Creates a file.\nversion: 1.0.0\n\
         inputs:\n  type: object\n  properties:\n    path: { type: string }\n  required: [path]\n\
         mutates: true\n---\n# Touch\n",
    );
    for (driver, tool, bin, argv) in [
        ("say-cli", "say", "echo", r#"["${input.msg}"]"#),
        ("touch-cli", "touch", "touch", r#"["${input.path}"]"#),
    ] {
        write(
            &format!("drivers/{driver}/DRIVER.md"),
            &format!(
                "---\nschema: agentproto/driver/v1\nid: {driver}\nname: {driver}\ndescription: {driver}\nkind: cli\n\
                 implements:\n  - tool: ./tools/{tool}/TOOL.md\n    version: ^1\n    metadata:\n      cli:\n\
                 \x20       argv: {argv}\n        outputFormat: text\nmetadata:\n  cli:\n    bin: {bin}\n---\n"
            ),
        );
    }
    app
}

fn failure(result: Result<Value, ClientError>) -> (ErrorCode, Value) {
    match result.expect_err("an error") {
        ClientError::Remote { error, .. } => {
            (error.code, Value::Object(error.details.unwrap_or_default()))
        }
        other => panic!("not an error envelope: {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_app_tools_list_is_empty_and_tools_call_is_not_found() {
    let host = host().await;
    let listed = call(&host.human, "tools.list", json!({})).await.unwrap();
    assert_eq!(listed, json!({"tools": []}));
    let (kind, details) = failure(
        call(
            &host.human,
            "tools.call",
            json!({"toolId": "say", "input": {"msg": "x"}}),
        )
        .await,
    );
    assert_eq!(kind, ErrorCode::NotFound);
    assert_eq!(details["code"], "tool_not_found");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_human_calls_a_read_only_tool_at_once_and_a_mutating_one_only_after_approval() {
    let host = host_with(|dir| Some(tool_app(dir))).await;
    let listed = call(&host.human, "tools.list", json!({})).await.unwrap();
    let listed =
        contract::decode_result::<contract::ours::ToolsList>(listed).expect("strict shape");
    let ids: Vec<(&str, bool)> = listed
        .tools
        .iter()
        .map(|t| (t.id.as_str(), t.mutates))
        .collect();
    assert_eq!(ids, [("say", false), ("touch", true)]);
    assert_eq!(listed.tools[0].input_schema["required"], json!(["msg"]));

    let said = call(
        &host.human,
        "tools.call",
        json!({"toolId": "say", "input": {"msg": "hello"}}),
    )
    .await
    .expect("read-only tool runs");
    let said = contract::decode_result::<contract::ours::ToolsCall>(said).expect("strict shape");
    assert_eq!(said.output, json!("hello\n"));
    assert_eq!(said.exit_code, 0);
    assert!(!said.stdout_truncated);

    // The tool's schema is checked before anything runs; its semantic code is in `details`.
    let (kind, details) = failure(
        call(
            &host.human,
            "tools.call",
            json!({"toolId": "say", "input": {"msg": 7}}),
        )
        .await,
    );
    assert_eq!(kind, ErrorCode::InvalidRequest);
    assert_eq!(details["code"], "input_invalid");
    assert_eq!(details["field"], "/msg");
    assert_eq!(details["retryable"], false);

    // `mutates: true` with no console: denied at once, nothing ran.
    let target = host.data.join("touched");
    let touch = json!({"toolId": "touch", "input": {"path": target.display().to_string()}});
    assert_eq!(
        code(call(&host.human, "tools.call", touch.clone()).await),
        ErrorCode::ApprovalDenied
    );
    assert!(!target.exists());

    // With a console: a denial leaves the disk alone, an approval runs the tool.
    let mut console = host.plane.approvals().attach_renderer();
    for resolution in [Resolution::Deny, Resolution::Approve] {
        let request = call(&host.human, "tools.call", touch.clone());
        let renderer = async {
            loop {
                if let Some(RendererEvent::Approval(ApprovalEvent::Created(a))) =
                    console.next_event().await
                {
                    assert_eq!(a.method, "tools.call");
                    assert_eq!(a.display["effect"], "destructive");
                    assert_eq!(a.display["summary"], json!({"toolId": "touch"}));
                    console.resolve(a.id, &a.scope, resolution).unwrap();
                    return;
                }
            }
        };
        let (answer, ()) = tokio::join!(request, renderer);
        match resolution {
            Resolution::Deny => {
                assert_eq!(code(answer), ErrorCode::ApprovalDenied);
                assert!(!target.exists());
            }
            _ => {
                answer.expect("approved tool runs");
                assert!(target.exists());
            }
        }
    }

    // Every decision is audited with the resolved effect and never the input.
    let audit = std::fs::read_dir(host.data.join("local-control/audit"))
        .unwrap()
        .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
        .collect::<String>();
    assert!(audit.contains("\"operation\":\"tools.call\""), "{audit}");
    assert!(audit.contains("\"effect\":\"destructive\""), "{audit}");
    assert!(audit.contains("\"effect\":\"compute\""), "{audit}");
    assert!(
        !audit.contains("hello"),
        "the input is not in the audit log"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_token_calls_only_tools_that_do_not_mutate() {
    let host = host_with(|dir| Some(tool_app(dir))).await;
    let agent = host.agent(&host.plane.issue_agent_token("conv-1").unwrap());
    let listed = call(&agent, "tools.list", json!({})).await.unwrap();
    assert_eq!(listed["tools"].as_array().map(Vec::len), Some(2));
    let said = call(
        &agent,
        "tools.call",
        json!({"toolId": "say", "input": {"msg": "from an agent"}}),
    )
    .await
    .expect("read-only tool");
    assert_eq!(said["output"], "from an agent\n");

    // A console is attached, yet no approval is even asked for: agents are denied mutating tools outright.
    let console = host.plane.approvals().attach_renderer();
    let target = host.data.join("touched-by-agent");
    let touch = json!({"toolId": "touch", "input": {"path": target.display().to_string()}});
    assert_eq!(
        code(call(&agent, "tools.call", touch).await),
        ErrorCode::PermissionDenied
    );
    assert!(console.pending().is_empty());
    assert!(!target.exists());
    assert_eq!(
        code(call(&agent, "tools.call", json!({"toolId": "nope"})).await),
        ErrorCode::NotFound
    );
}
