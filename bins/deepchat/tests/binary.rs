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
