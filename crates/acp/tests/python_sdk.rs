//! Interop with an implementation we did not write: the official ACP Python SDK (`agent-client-protocol` on PyPI,
//! version [`SDK_VERSION`]), installed by the test into the target directory
//! ([`agentwire_testkit::acp_python::install`]; needs python3 and PyPI — without them the tests fail, saying so).
//!
//! - Our client drives the SDK's own example agents (`examples/echo_agent.py`, `examples/agent.py` from the SDK's
//!   source distribution, run unchanged), through a tap that validates every message of both sides against the
//!   official schema (`fixtures/recordings/acp-schema-v1.json`).
//! - The SDK's own example client (`examples/client.py`, run unchanged: it spawns the agent and sends the lines typed
//!   on its stdin as prompts) drives our agent role (the `acp-fixture` binary, built on `AgentSide`), which records
//!   both directions (`ACP_FIXTURE_TRACE`) for the same schema validation.

mod support;

use std::path::Path;
use std::sync::OnceLock;

use agentwire_acp::schema::StopReason;
use agentwire_acp::{Client, ClientBuilder};
use agentwire_process::{Child, StdoutItem, StopPlan};
use agentwire_testkit::acp_python::{AcpPythonSdk, SDK_VERSION, default_dir, install};
use support::{Side, Tap, within};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// The SDK, installed once per test binary.
fn sdk() -> &'static AcpPythonSdk {
    static SDK: OnceLock<AcpPythonSdk> = OnceLock::new();
    SDK.get_or_init(|| match install(&default_dir()) {
        Ok(sdk) => sdk,
        Err(error) => panic!(
            "the ACP Python SDK {SDK_VERSION} could not be installed; these interop tests need python3 (with venv) \
             and access to PyPI:\n{error}"
        ),
    })
}

/// Our client, joined to `python examples/<example>` through a validating tap.
fn python_agent(example: &str) -> (Client, Tap, Child) {
    let sdk = sdk();
    let mut command = agentwire_process::Command::new(&sdk.python);
    command.arg(sdk.example(example)).stdout_bytes();
    let mut child = command.spawn().expect("spawn the SDK's example agent");
    let mut stdout = child.take_stdout().expect("stdout");
    let stdin = child.stdin();
    let tap = Tap::default();
    // The agent's stdout → tap → our client.
    let (mut stdout_sink, stdout_source) = tokio::io::duplex(1 << 20);
    tokio::spawn(async move {
        while let Some(StdoutItem::Bytes(bytes)) = stdout.next().await {
            if stdout_sink.write_all(&bytes).await.is_err() {
                break;
            }
        }
    });
    let (to_client, client_in) = tokio::io::duplex(1 << 20);
    tap.relay(Side::Agent, stdout_source, to_client);
    // Our client → tap → the agent's stdin.
    let (client_out, from_client) = tokio::io::duplex(1 << 20);
    let (to_agent, mut stdin_source) = tokio::io::duplex(1 << 20);
    tap.relay(Side::Client, from_client, to_agent);
    tokio::spawn(async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match stdin_source.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if stdin.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
            }
        }
        stdin.close().await;
    });
    (
        ClientBuilder::new().connect(client_in, client_out),
        tap,
        child,
    )
}

/// Panics unless the tap validated messages of each of these schema envelopes (`AgentResponse`, …).
fn assert_validated(tap: &Tap, envelopes: &[&str]) {
    let log = tap.log.lock().expect("tap");
    for envelope in envelopes {
        assert!(
            log.validated.get(envelope).copied().unwrap_or(0) > 0,
            "no {envelope} validated: {:?}",
            log.validated
        );
    }
}

fn texts(updates: &[agentwire_acp::Update]) -> Vec<String> {
    updates
        .iter()
        .filter_map(|u| u.agent_text().map(str::to_owned))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_client_drives_the_sdk_echo_agent() {
    let (client, tap, child) = python_agent("echo_agent.py");
    let agent = within(client.initialize()).await.expect("initialize");
    assert_eq!(agent.protocol_version.as_u16(), 1);
    let mut session = within(client.new_session(Path::new("/tmp")))
        .await
        .expect("session/new");
    let turn = within(session.prompt_text("hello from agentwire"))
        .await
        .expect("prompt");
    let (updates, result) = within(turn.finish()).await;
    assert_eq!(result.expect("stop reason"), StopReason::EndTurn);
    assert_eq!(texts(&updates), ["hello from agentwire"]);
    tap.assert_clean(true);
    assert_validated(
        &tap,
        &["ClientRequest", "AgentResponse", "AgentNotification"],
    );
    assert_eq!(client.stats().unrouted_updates_dropped, 0);
    client.close().await;
    within(child.stop(StopPlan::default())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_client_drives_the_sdk_example_agent() {
    let (client, tap, child) = python_agent("agent.py");
    let agent = within(client.initialize()).await.expect("initialize");
    let info = agent.agent_info.expect("agentInfo");
    assert_eq!(info.name, "example-agent");
    within(client.authenticate("any-method"))
        .await
        .expect("authenticate");
    let mut session = within(client.new_session(Path::new("/tmp")))
        .await
        .expect("session/new");
    within(session.set_mode("code")).await.expect("set_mode");
    for prompt in ["first", "second"] {
        let turn = within(session.prompt_text(prompt)).await.expect("prompt");
        let (updates, result) = within(turn.finish()).await;
        assert_eq!(result.expect("stop reason"), StopReason::EndTurn);
        assert_eq!(texts(&updates), ["Client sent:", prompt]);
    }
    tap.assert_clean(true);
    assert_validated(
        &tap,
        &["ClientRequest", "AgentResponse", "AgentNotification"],
    );
    let log = tap.log.lock().expect("tap").client_methods.clone();
    assert_eq!(
        log,
        [
            "initialize",
            "authenticate",
            "session/new",
            "session/set_mode",
            "session/prompt",
            "session/prompt"
        ]
    );
    client.close().await;
    within(child.stop(StopPlan::default())).await;
}

/// Runs the SDK's `examples/client.py` against `acp-fixture --mode MODE`, typing `prompts` (one per line, then EOF);
/// returns its stdout, the tap that validated the recorded conversation, and the recording (`client …`/`agent …`).
async fn python_client(mode: &str, prompts: &[&str]) -> (String, Tap, String) {
    let sdk = sdk();
    let trace_dir = tempfile::tempdir().expect("tempdir");
    let trace = trace_dir.path().join("trace.txt");
    let mut command = agentwire_process::Command::new(&sdk.python);
    command
        .arg(sdk.example("client.py"))
        .arg(agentwire_testkit::bin_path("acp-fixture"))
        .args(["--mode", mode])
        .env("ACP_FIXTURE_TRACE", &trace)
        .current_dir(trace_dir.path())
        .stdout_bytes();
    let mut child = command.spawn().expect("spawn the SDK's example client");
    let mut stdout = child.take_stdout().expect("stdout");
    let stdin = child.stdin();
    let typed: String = prompts.iter().map(|p| format!("{p}\n")).collect();
    stdin.write_all(typed.as_bytes()).await.expect("type");
    stdin.close().await;
    let output = within(async {
        let mut output = Vec::new();
        while let Some(item) = stdout.next().await {
            if let StdoutItem::Bytes(bytes) = item {
                output.extend_from_slice(&bytes);
            }
        }
        output
    })
    .await;
    let status = within(child.wait()).await;
    assert!(status.success(), "client.py exited with {status:?}");
    let tap = Tap::default();
    let recorded = std::fs::read_to_string(&trace).expect("the agent recorded its conversation");
    for line in recorded.lines() {
        match line.split_once(' ') {
            Some(("client", message)) => tap.check_recorded(Side::Client, message),
            Some(("agent", message)) => tap.check_recorded(Side::Agent, message),
            _ => panic!("unexpected trace line {line:?}"),
        }
    }
    (String::from_utf8_lossy(&output).into_owned(), tap, recorded)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_example_client_drives_our_agent_role() {
    let (output, tap, _) = python_client("echo", &["hello from python", "second line"]).await;
    assert!(
        output.contains("| Agent: hello from python") && output.contains("| Agent: second line"),
        "{output}"
    );
    tap.assert_clean(true);
    assert_validated(
        &tap,
        &["ClientRequest", "AgentResponse", "AgentNotification"],
    );
    let log = tap.log.lock().expect("tap");
    assert_eq!(
        log.client_methods,
        [
            "initialize",
            "session/new",
            "session/prompt",
            "session/prompt"
        ]
    );
}

/// The example client answers `session/request_permission` with a -32601 error; our agent role takes that as a
/// rejection and still ends the turn, and everything both sides sent is schema-valid.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_example_client_refusing_permissions_still_gets_a_turn_end() {
    let (_output, tap, recorded) = python_client("tools", &["use a tool"]).await;
    tap.assert_clean(true);
    // The client's error answer to the permission request, then the turn's end (as a rejection: the tool failed).
    assert!(recorded.contains(r#""code":-32601"#), "{recorded}");
    assert!(
        recorded.contains(r#""stopReason":"end_turn""#),
        "{recorded}"
    );
    assert!(recorded.contains(r#""status":"failed""#), "{recorded}");
    assert_validated(
        &tap,
        &[
            "ClientRequest",
            "ClientResponse",
            "AgentRequest",
            "AgentResponse",
        ],
    );
    let log = tap.log.lock().expect("tap");
    assert!(
        log.agent_methods
            .iter()
            .any(|m| m == "session/request_permission"),
        "{:?}",
        log.agent_methods
    );
    assert_eq!(
        log.client_methods,
        ["initialize", "session/new", "session/prompt"]
    );
}
