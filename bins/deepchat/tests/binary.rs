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
