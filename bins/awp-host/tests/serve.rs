//! `awp-host serve` with the real `deepchat` binary, as an operator runs them: discovery through the data dir,
//! detached runs, watching, approvals (console and approver socket), shutdown, restart after SIGKILL.

mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use agentwire_process::{Child, StopPlan};
use serde_json::{Value, json};
use support::{Host, Output, RUN_TIMEOUT, collect, read_until};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

const AGENTS: &str = "[[agents]]\nname = \"fx\"\nprotocol = \"awp-jsonl\"\nexecutable = \"$FIXTURE\"\nargs = [\"--mode\", \"normal\"]\n\
[[agents]]\nname = \"silent\"\nprotocol = \"awp-jsonl\"\nexecutable = \"$FIXTURE\"\nargs = [\"--mode\", \"silence\"]\n";

struct Serve {
    child: Child,
    stdout: agentwire_process::Stdout,
    /// What the first read took from stdout: the listening line, and whatever came in the same chunk.
    first: String,
}

async fn serve(host: &Host, extra: &[&str]) -> Serve {
    let mut args = vec!["serve"];
    args.extend_from_slice(extra);
    let mut child = host.spawn(&args);
    let mut stdout = child.take_stdout().expect("stdout");
    let line = read_until(&mut stdout, "\n").await;
    assert!(
        line.starts_with("awp-host: local control listening on "),
        "unexpected first line {line:?}"
    );
    Serve {
        child,
        stdout,
        first: line,
    }
}

impl Serve {
    /// SIGTERM and wait; returns the exit code.
    async fn stop(self) -> i32 {
        let plan = StopPlan::new()
            .stdin_grace(Duration::ZERO)
            .term_grace(Duration::from_secs(30));
        let outcome = tokio::time::timeout(RUN_TIMEOUT, self.child.stop(plan))
            .await
            .expect("serve stops");
        outcome.status.code_or_signal()
    }
}

async fn deepchat(host: &Host, args: &[&str]) -> Output {
    deepchat_env(host, args, &[]).await
}

async fn deepchat_env(host: &Host, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut child = host.deepchat(args, env).spawn().expect("spawn deepchat");
    child.stdin().close().await;
    collect(&mut child).await
}

fn ok_result(out: &Output) -> Value {
    assert_eq!(out.code, 0, "{out:?}");
    let envelope = out.json();
    assert_eq!(envelope["ok"], true, "{out:?}");
    envelope["result"].clone()
}

async fn start_run(host: &Host, agent: &str, prompt: &str) -> String {
    let out = deepchat(
        host,
        &[
            "agent", "run", "--agent", agent, "--prompt", prompt, "--json",
        ],
    )
    .await;
    ok_result(&out)["runId"]
        .as_str()
        .expect("run id")
        .to_owned()
}

/// `deepchat settings set` of an execution-config key: a sensitive mutation that needs an approval.
const EXECUTION_CHANGE: &[&str] = &[
    "settings",
    "set",
    "--key",
    "autoCompactionEnabled",
    "--value",
    "false",
    "--json",
];

/// Starts [`EXECUTION_CHANGE`] in the background (stdin closed); collect it with `collect`.
async fn spawn_execution_change(host: &Host) -> Child {
    let change = host
        .deepchat(EXECUTION_CHANGE, &[])
        .spawn()
        .expect("spawn deepchat");
    change.stdin().close().await;
    change
}

fn descriptor(host: &Host) -> PathBuf {
    host.data.join("local-control").join("local-control.json")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deepchat_drives_a_detached_run_through_serve_and_reports_a_stopped_host() {
    let host = Host::new();
    host.agents_toml(AGENTS);
    let server = serve(&host, &["--console", "off"]).await;

    let status = ok_result(&deepchat(&host, &["system", "status", "--json"]).await);
    assert_eq!(status["running"], true);

    let run = start_run(&host, "fx", "hello").await;
    let watch = deepchat(&host, &["run", "watch", "--run", &run, "--jsonl"]).await;
    assert_eq!(watch.code, 0, "{watch:?}");
    let lines = watch.jsonl();
    let events: Vec<&str> = lines.iter().filter_map(|l| l["event"].as_str()).collect();
    assert_eq!(events.first(), Some(&"runs.created"), "{events:?}");
    assert!(events.contains(&"chat.stream.completed"), "{events:?}");
    assert_eq!(
        lines.last().unwrap()["ok"],
        true,
        "a terminal envelope ends the stream"
    );

    let snapshot = ok_result(&deepchat(&host, &["run", "get", "--run", &run, "--json"]).await);
    assert_eq!(snapshot["phase"], "terminal");
    assert_eq!(snapshot["messages"][1]["text"], "echo: hello");

    let threads = ok_result(&deepchat(&host, &["thread", "list", "--json"]).await);
    assert_eq!(threads["threads"][0]["title"], "hello");

    // An execution-config change needs an approval; with no console and no approver it fails closed at once.
    let denied = deepchat(&host, EXECUTION_CHANGE).await;
    assert_eq!(denied.code, 5, "{denied:?}");
    assert_eq!(denied.json()["error"]["code"], "approval_denied");

    assert_eq!(server.stop().await, 0);
    assert!(!descriptor(&host).exists(), "the descriptor is removed");
    let gone = deepchat(&host, &["system", "status", "--json"]).await;
    assert_eq!(gone.code, 3, "{gone:?}");
    assert_eq!(gone.json()["ok"], false);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_serve_is_refused_and_a_stale_socket_after_sigkill_is_replaced() {
    let host = Host::new();
    host.agents_toml(AGENTS);
    let first = serve(&host, &["--console", "off"]).await;
    let second = host.run(&["serve", "--console", "off"]).await;
    assert_eq!(second.code, 3, "{second:?}");
    assert!(second.stderr.contains("already"), "{second:?}");

    let pid = rustix::process::Pid::from_raw(first.child.id().expect("pid") as i32).expect("pid");
    rustix::process::kill_process(pid, rustix::process::Signal::KILL).expect("send SIGKILL");
    let _ = tokio::time::timeout(RUN_TIMEOUT, first.child.wait()).await;
    assert!(
        descriptor(&host).exists(),
        "a killed host leaves its descriptor"
    );
    let stale = deepchat(&host, &["system", "status", "--json"]).await;
    assert_eq!(stale.code, 3, "dead pid / refused socket: {stale:?}");

    let again = serve(&host, &["--console", "off"]).await;
    ok_result(&deepchat(&host, &["system", "status", "--json"]).await);
    assert_eq!(again.stop().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_serve_mid_watch_ends_it_unavailable_and_the_run_is_readable_after_a_restart() {
    let host = Host::new();
    host.agents_toml(AGENTS);
    let server = serve(&host, &["--console", "off"]).await;
    let run = start_run(&host, "silent", "wait").await;
    let mut watch = host
        .deepchat(&["run", "watch", "--run", &run, "--jsonl"], &[])
        .spawn()
        .expect("spawn watch");
    watch.stdin().close().await;
    let mut watch_out = watch.take_stdout().expect("stdout");
    // The first record proves the watch is being served.
    let first = read_until(&mut watch_out, "\n").await;
    assert!(first.contains("runs.created"), "{first}");
    assert_eq!(server.stop().await, 0);
    let rest = read_until(&mut watch_out, "\"ok\":false").await;
    let status = tokio::time::timeout(RUN_TIMEOUT, watch.wait())
        .await
        .expect("watch ends");
    assert_eq!(status.code_or_signal(), 3, "{first}{rest}");
    assert!(rest.contains("unavailable"), "{rest}");

    let again = serve(&host, &["--console", "off"]).await;
    let snapshot = ok_result(&deepchat(&host, &["run", "get", "--run", &run, "--json"]).await);
    assert_eq!(snapshot["phase"], "terminal", "{snapshot}");
    assert_eq!(snapshot["messages"][0]["text"], "wait");
    assert_eq!(again.stop().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_approvals_console_allows_one_pending_mutation() {
    let host = Host::new();
    host.agents_toml(AGENTS);
    let mut server = serve(&host, &["--console", "on"]).await;
    // The console line may have come in the same chunk as the listening line.
    if !server.first.contains("approvals console") {
        read_until(&mut server.stdout, "approvals console").await;
    }
    let mut change = spawn_execution_change(&host).await;
    let prompt = read_until(&mut server.stdout, "allow? [y/N]").await;
    assert!(prompt.contains("settings.updatePublic"), "{prompt}");
    let console = server.child.stdin();
    console.write_all(b"y\n").await.expect("answer");
    let out = collect(&mut change).await;
    let result = ok_result(&out);
    assert_eq!(result["values"], json!({"autoCompactionEnabled": false}));
    assert_eq!(server.stop().await, 0);
}

/// Connects to the approver socket and says hello with `token`; returns the line reader and writer.
async fn approver(
    path: &Path,
    token: &str,
) -> (
    tokio::io::Lines<BufReader<tokio::net::unix::OwnedReadHalf>>,
    tokio::net::unix::OwnedWriteHalf,
) {
    let stream = tokio::net::UnixStream::connect(path)
        .await
        .expect("connect");
    let (read, mut write) = stream.into_split();
    let hello = format!("{}\n", json!({"type": "hello", "token": token}));
    write.write_all(hello.as_bytes()).await.expect("hello");
    (BufReader::new(read).lines(), write)
}

async fn next_line(
    lines: &mut tokio::io::Lines<BufReader<tokio::net::unix::OwnedReadHalf>>,
) -> Value {
    let line = tokio::time::timeout(RUN_TIMEOUT, lines.next_line())
        .await
        .expect("a line in time")
        .expect("read")
        .expect("not at EOF");
    serde_json::from_str(&line).expect("json line")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_approver_socket_resolves_with_its_own_token_and_refuses_a_wrong_one() {
    let host = Host::new();
    host.agents_toml(AGENTS);
    let socket = host.path("approver.sock");
    let socket_arg = socket.display().to_string();
    let server = serve(
        &host,
        &["--console", "off", "--approvals-socket", &socket_arg],
    )
    .await;
    let token_path = PathBuf::from(format!("{socket_arg}.token"));
    let token = std::fs::read_to_string(&token_path).expect("token file");
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&token_path).unwrap().permissions().mode();
        assert_eq!(mode & 0o077, 0, "the token file is private");
    }
    let (mut wrong, _w) = approver(&socket, "not-the-token").await;
    assert_eq!(next_line(&mut wrong).await["code"], "authentication_failed");

    let (mut lines, mut write) = approver(&socket, &token).await;
    assert_eq!(next_line(&mut lines).await["type"], "ready");
    let mut change = spawn_execution_change(&host).await;
    let approval = next_line(&mut lines).await;
    assert_eq!(approval["type"], "approval");
    assert_eq!(approval["method"], "settings.updatePublic");
    let resolve = format!(
        "{}\n",
        json!({"type": "resolve", "id": approval["id"], "decision": "allow"})
    );
    write.write_all(resolve.as_bytes()).await.expect("resolve");
    let out = collect(&mut change).await;
    ok_result(&out);
    assert_eq!(server.stop().await, 0);
    assert!(
        !socket.exists() && !token_path.exists(),
        "removed at shutdown"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_launched_by_serve_find_deepchat_first_on_path_and_a_bad_agent_token_never_falls_back()
 {
    let host = Host::new();
    host.agents_toml(AGENTS);
    let server = serve(&host, &["--console", "off"]).await;
    let run = start_run(&host, "fx", "env:PATH").await;
    deepchat(&host, &["run", "watch", "--run", &run, "--jsonl"]).await;
    let snapshot = ok_result(&deepchat(&host, &["run", "get", "--run", &run, "--json"]).await);
    let echoed = snapshot["messages"][1]["text"].as_str().unwrap().to_owned();
    let deepchat_dir = agentwire_testkit::bin_path("deepchat")
        .parent()
        .unwrap()
        .display()
        .to_string();
    assert!(
        echoed.starts_with(&format!("echo: env:PATH={deepchat_dir}:")),
        "{echoed}"
    );

    let run = start_run(&host, "fx", "env:AWP_HOST_DATA_DIR").await;
    deepchat(&host, &["run", "watch", "--run", &run, "--jsonl"]).await;
    let snapshot = ok_result(&deepchat(&host, &["run", "get", "--run", &run, "--json"]).await);
    assert_eq!(
        snapshot["messages"][1]["text"],
        format!("echo: env:AWP_HOST_DATA_DIR={}", host.data.display()),
        "the agent's deepchat finds this host whatever its data dir"
    );

    let bad = deepchat_env(
        &host,
        &["system", "status", "--json"],
        &[(
            "DEEPCHAT_CLI_AGENT_TOKEN",
            "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
        )],
    )
    .await;
    assert_eq!(bad.code, 4, "{bad:?}");
    assert_eq!(server.stop().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_with_an_app_answers_tools_list_and_tools_call_over_the_socket() {
    use agentwire_local_control::client::{Client, ClientError};
    use agentwire_local_control::descriptor::discover;
    use agentwire_local_control::envelope::{ErrorCode, RequestEnvelope};

    let host = Host::new();
    host.agents_toml(AGENTS);
    let app = concat!(env!("CARGO_MANIFEST_DIR"), "/../../fixtures/tool-app");
    let server = serve(&host, &["--console", "off", "--app", app]).await;
    let descriptor = discover(&host.data).expect("descriptor");
    let client = Client::from_descriptor(&descriptor, descriptor.token.clone()).expect("client");
    let rpc = |method: &str, params: Value| {
        let envelope = RequestEnvelope::new("req-1", method, params);
        let client = &client;
        async move { client.rpc(&envelope, RUN_TIMEOUT).await }
    };

    let listed = rpc("tools.list", json!({})).await.expect("tools.list");
    let ids: Vec<&str> = listed["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["id"].as_str())
        .collect();
    assert_eq!(
        ids,
        ["echo", "greet", "notes-list", "notes-show", "notes-whoami"]
    );
    assert_eq!(listed["tools"][0]["mutates"], false);
    assert_eq!(
        listed["tools"][0]["inputSchema"]["required"],
        json!(["msg"])
    );

    let echoed = rpc(
        "tools.call",
        json!({"toolId": "echo", "input": {"msg": "hi", "words": ["a", "b"]}}),
    )
    .await
    .expect("echo");
    assert_eq!(
        (echoed["outputFormat"].as_str(), echoed["output"].as_str()),
        (Some("text"), Some("hi a b\n"))
    );
    let notes = rpc("tools.call", json!({"toolId": "notes-list"}))
        .await
        .expect("notes-list");
    assert_eq!(notes["outputFormat"], "json");
    assert!(notes["output"].is_array(), "{notes}");

    // serve's environment has no NOTES_TOKEN: the driver's code travels in `details`.
    match rpc("tools.call", json!({"toolId": "notes-whoami"})).await {
        Err(ClientError::Remote { error, .. }) => {
            assert_eq!(error.code, ErrorCode::Unavailable);
            let details = error.details.expect("details");
            assert_eq!(details["code"], "missing_secret");
        }
        other => panic!("expected missing_secret, got {other:?}"),
    }
    assert_eq!(server.stop().await, 0);

    // A bundle that does not load stops serve before it listens: usage (2).
    let out = host
        .run(&[
            "serve",
            "--console",
            "off",
            "--app",
            &host.path("no-app").display().to_string(),
        ])
        .await;
    assert_eq!(out.code, 2, "{out:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_turn_gets_a_token_from_a_running_serve_that_is_revoked_when_the_turn_ends() {
    let host = Host::new();
    host.agents_toml(AGENTS);
    let alone = host
        .run(&[
            "chat",
            "--agent",
            "fx",
            "--json",
            "env:DEEPCHAT_CLI_AGENT_TOKEN",
        ])
        .await;
    assert_eq!(alone.code, 0, "{alone:?}");
    assert!(
        alone.stdout.contains("DEEPCHAT_CLI_AGENT_TOKEN=<unset>"),
        "no serve, no token: {alone:?}"
    );

    let server = serve(&host, &["--console", "off"]).await;
    let out = host
        .run(&[
            "chat",
            "--agent",
            "fx",
            "--json",
            "env:DEEPCHAT_CLI_AGENT_TOKEN",
        ])
        .await;
    assert_eq!(out.code, 0, "{out:?}");
    let text = out.json()["text"].as_str().unwrap_or_default().to_owned();
    let token = text
        .strip_prefix("echo: env:DEEPCHAT_CLI_AGENT_TOKEN=")
        .unwrap_or_else(|| panic!("{out:?}"));
    assert_eq!(token.len(), 43, "{text}");
    let revoked = deepchat_env(
        &host,
        &["system", "status", "--json"],
        &[("DEEPCHAT_CLI_AGENT_TOKEN", token)],
    )
    .await;
    assert_eq!(
        revoked.code, 4,
        "revoked when the chat turn ended: {revoked:?}"
    );
    assert_eq!(server.stop().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_serve_while_the_approvals_console_waits_on_an_open_stdin() {
    let host = Host::new();
    host.agents_toml(AGENTS);
    let server = serve(&host, &["--console", "on"]).await;
    // stdin stays open (nothing typed): the console's read must not keep the process alive.
    let pid = rustix::process::Pid::from_raw(server.child.id().expect("pid") as i32).expect("pid");
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).expect("send SIGTERM");
    let status = tokio::time::timeout(RUN_TIMEOUT, server.child.wait())
        .await
        .expect("serve exits without input on the console");
    assert_eq!(status.code_or_signal(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mutation_waiting_for_its_approval_at_shutdown_ends_unavailable_not_denied() {
    let host = Host::new();
    host.agents_toml(AGENTS);
    let socket = host.path("approver.sock");
    let socket_arg = socket.display().to_string();
    let server = serve(
        &host,
        &["--console", "off", "--approvals-socket", &socket_arg],
    )
    .await;
    let token = std::fs::read_to_string(format!("{socket_arg}.token")).expect("token file");
    let (mut lines, _write) = approver(&socket, &token).await;
    assert_eq!(next_line(&mut lines).await["type"], "ready");
    let mut change = spawn_execution_change(&host).await;
    assert_eq!(next_line(&mut lines).await["type"], "approval");

    // The approver stays attached while serve ends the request: the waiting deepchat always sees the host
    // going away (unavailable, exit 3), never a denial caused by its approver being disconnected first.
    assert_eq!(server.stop().await, 0);
    let out = collect(&mut change).await;
    assert_eq!(out.code, 3, "{out:?}");
    assert!(out.stdout.contains("\"code\":\"unavailable\""), "{out:?}");
}
