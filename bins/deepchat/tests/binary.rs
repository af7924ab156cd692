//! The real `deepchat` binary: its process exit code and stdout match the in-process runner's contract.

mod support;

use agentwire_process::{Command, StdoutItem};
use serde_json::Value;

async fn run_binary(args: &[&str], env: &[(&str, &str)]) -> (i32, String) {
    let mut cmd = Command::new(agentwire_testkit::bin_path("deepchat"));
    cmd.args(args.iter().copied()).envs(env.iter().copied());
    let mut child = cmd.spawn().expect("spawn deepchat");
    child.stdin().close().await;
    let mut stdout = child.take_stdout().expect("stdout");
    let mut bytes = Vec::new();
    while let Some(item) = stdout.next().await {
        if let StdoutItem::Bytes(b) = item {
            bytes.extend_from_slice(&b);
        }
    }
    let status = child.wait().await;
    (
        status.code_or_signal(),
        String::from_utf8(bytes).expect("utf-8"),
    )
}

#[tokio::test]
async fn binary_exit_codes_and_envelopes() {
    let host = support::Host::start(support::Script {
        results: [(
            "cli.version".to_owned(),
            support::ok(support::version_result()),
        )]
        .into(),
        ..Default::default()
    })
    .await;
    let data = host.data.display().to_string();
    let env = [("DEEPCHAT_E2E_USER_DATA_DIR", data.as_str())];

    let (code, stdout) = run_binary(&["system", "version", "--json"], &env).await;
    assert_eq!(code, 0, "{stdout}");
    let envelope: Value = serde_json::from_str(stdout.trim()).expect("one envelope");
    assert_eq!(envelope["result"]["appVersion"], "9.8.7");

    let (code, stdout) = run_binary(&["--json", "system", "version"], &env).await;
    assert_eq!(code, 2);
    assert_eq!(stdout, "");

    let (code, stdout) = run_binary(&["system", "nope", "--json"], &env).await;
    assert_eq!(code, 2);
    let envelope: Value = serde_json::from_str(stdout.trim()).expect("one envelope");
    assert_eq!(envelope["error"]["code"], "invalid_request");
    host.stop().await;
}

#[tokio::test]
async fn sigterm_cancels_the_request_and_exits_7() {
    use agentwire_process::{StopPlan, StopStep};
    use std::time::Duration;

    let host = support::Host::start(support::Script {
        hang: vec!["cli.status".to_owned()],
        ..Default::default()
    })
    .await;
    let data = host.data.display().to_string();
    let mut cmd = Command::new(agentwire_testkit::bin_path("deepchat"));
    cmd.args(["system", "status", "--json"])
        .envs([("DEEPCHAT_E2E_USER_DATA_DIR", data.as_str())]);
    let mut child = cmd.spawn().expect("spawn deepchat");
    let mut stdout = child.take_stdout().expect("stdout");
    let reader = tokio::spawn(async move {
        let mut bytes = Vec::new();
        while let Some(item) = stdout.next().await {
            if let StdoutItem::Bytes(b) = item {
                bytes.extend_from_slice(&b);
            }
        }
        bytes
    });
    // The signal arrives once the host is inside the call.
    host.state.entered.notified().await;
    let plan = StopPlan {
        final_stdin_line: None,
        stdin_grace: Duration::ZERO,
        term_grace: Duration::from_secs(60),
    };
    let outcome = child.stop(plan).await;
    assert_eq!(outcome.ended_by, StopStep::Sigterm);
    assert_eq!(outcome.status.code_or_signal(), 7);
    let stdout = String::from_utf8(reader.await.expect("reader")).expect("utf-8");
    let envelope: Value = serde_json::from_str(stdout.trim()).expect("one envelope");
    assert_eq!(envelope["error"]["code"], "cancelled");
    host.stop().await;
}

/// DeepChat's `readOptionValue` only refuses values starting with `--`: an id starting with a single `-` (base64url
/// ids do, 1 in 64) is the option's value and reaches the host, for every option taking a value.
#[tokio::test]
async fn option_values_may_start_with_a_single_hyphen() {
    let host = support::Host::start(support::Script {
        results: [
            (
                "artifacts.describe".to_owned(),
                Err(agentwire_local_control::envelope::ErrorBody::new(
                    agentwire_local_control::envelope::ErrorCode::NotFound,
                    "no such artifact",
                )),
            ),
            (
                "runs.get".to_owned(),
                Err(agentwire_local_control::envelope::ErrorBody::new(
                    agentwire_local_control::envelope::ErrorCode::NotFound,
                    "no such run",
                )),
            ),
        ]
        .into(),
        ..Default::default()
    })
    .await;
    let data = host.data.display().to_string();
    let env = [("DEEPCHAT_E2E_USER_DATA_DIR", data.as_str())];

    let id = "-ZK6E27abcdefghijklmnopqrstuvwxyz012345678";
    let (code, stdout) = run_binary(&["artifact", "describe", "--id", id, "--json"], &env).await;
    assert_eq!(code, 6, "{stdout}");
    let envelope: Value = serde_json::from_str(stdout.trim()).expect("one envelope");
    assert_eq!(envelope["error"]["code"], "not_found");
    let (code, stdout) = run_binary(&["run", "get", "--run", "-r1", "--json"], &env).await;
    assert_eq!(code, 6, "{stdout}");
    let calls = host.calls();
    assert_eq!(calls[0].1["id"], id);
    assert_eq!(calls[1].1["runId"], "-r1");

    // A value starting with `--` is still a missing value, as in DeepChat.
    let (code, stdout) = run_binary(&["artifact", "describe", "--id", "--json"], &env).await;
    assert_eq!(code, 2, "{stdout}");
    assert_eq!(host.calls().len(), 2);
    host.stop().await;
}

/// Runs the real binary with its stdout on `stdout`; returns the exit code and stderr. Test tooling like
/// testkit's `proc.rs`: `agentwire_process::Command` always pipes stdout, and these tests need it to be a pipe
/// whose reader is gone or `/dev/full`, so std's spawner is used here (no shell, fixed argv).
#[allow(clippy::disallowed_methods)]
async fn run_binary_to(
    args: &[&str],
    env: &[(&str, &str)],
    stdout: std::process::Stdio,
) -> (i32, String) {
    let mut cmd = std::process::Command::new(agentwire_testkit::bin_path("deepchat"));
    cmd.args(args)
        .envs(env.iter().copied())
        .stdin(std::process::Stdio::null())
        .stdout(stdout)
        .stderr(std::process::Stdio::piped());
    let out = tokio::task::spawn_blocking(move || cmd.output())
        .await
        .expect("join")
        .expect("run deepchat");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stderr).expect("utf-8"),
    )
}

/// A closed stdout ends quietly with 141 (128 + SIGPIPE); a full disk is one line on stderr and exit 8.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_write_errors_are_quiet_for_a_closed_pipe_and_one_line_otherwise() {
    let host = support::Host::start(support::Script {
        results: [(
            "cli.version".to_owned(),
            support::ok(support::version_result()),
        )]
        .into(),
        ..Default::default()
    })
    .await;
    let data = host.data.display().to_string();
    let env = [("DEEPCHAT_E2E_USER_DATA_DIR", data.as_str())];
    for args in [
        &["system", "version", "--json"][..],
        &["system", "version"][..],
        &["system", "version", "--help"][..],
    ] {
        // The read end is closed before the child starts: its first write meets EPIPE.
        let (reader, writer) = std::io::pipe().expect("pipe");
        drop(reader);
        let (code, stderr) = run_binary_to(args, &env, writer.into()).await;
        assert_eq!(code, 141, "{args:?}: {stderr}");
        assert_eq!(stderr, "", "{args:?}");

        let full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .expect("/dev/full");
        let (code, stderr) = run_binary_to(args, &env, full.into()).await;
        assert_eq!(code, 8, "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(
            stderr.starts_with("internal_error: cannot write the output"),
            "{args:?}: {stderr}"
        );
    }
    host.stop().await;
}
