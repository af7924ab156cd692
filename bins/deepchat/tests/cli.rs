//! The `deepchat` CLI against a real local-control server on a Unix socket (scripted service): output modes,
//! exit codes, agent-token handling, timeout and interrupt, stdin, run streams and `--out` publication.
//! Expected texts follow DeepChat's own client tests (`test/main/cli/client.test.ts`).

mod support;

use std::collections::HashMap;
use std::sync::Arc;

use agentwire_local_control::envelope::{ErrorBody, ErrorCode};
use serde_json::json;
use support::{Host, Record, Script, ok, run, run_with, version_result};

fn script(results: &[(&str, serde_json::Value)]) -> Script {
    Script {
        results: results
            .iter()
            .map(|(m, v)| ((*m).to_owned(), ok(v.clone())))
            .collect::<HashMap<_, _>>(),
        ..Script::default()
    }
}

#[tokio::test]
async fn version_in_human_text() {
    let host = Host::start(script(&[("cli.version", version_result())])).await;
    let out = run(&host, &["system", "version"]).await;
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.contains("DeepChat 9.8.7"), "{out:?}");
    assert!(out.stdout.contains("Protocol 1, surface 2"));
    assert_eq!(out.stderr, "");
    assert_eq!(host.calls().len(), 1);
    host.stop().await;
}

#[tokio::test]
async fn json_mode_prints_exactly_one_envelope() {
    let status = json!({"running":true,"pid":42,"startedAt":1,"uptimeMs":2,"endpointKind":"unix",
                        "activeConnections":1,"pendingRequests":0,"internal":"dropped"});
    let host = Host::start(script(&[("cli.status", status)])).await;
    let out = run(&host, &["system", "status", "--json"]).await;
    assert_eq!(out.code, 0, "{out:?}");
    let envelope = out.envelope();
    assert_eq!(envelope["ok"], true);
    assert_eq!(envelope["protocolVersion"], 1);
    assert_eq!(envelope["surfaceVersion"], 2);
    assert_eq!(envelope["result"]["running"], true);
    assert!(envelope["result"].get("internal").is_none());
    assert!(envelope["id"].as_str().unwrap().starts_with("cli-"));
    host.stop().await;
}

#[tokio::test]
async fn usage_errors_keep_the_machine_contract() {
    let out = run_with(
        &["system", "status", "--json", "--unknown"],
        &[],
        b"",
        std::future::pending(),
    )
    .await;
    assert_eq!(out.code, 2);
    let envelope = out.envelope();
    assert_eq!(envelope["ok"], false);
    assert_eq!(envelope["error"]["code"], "invalid_request");
    assert_eq!(out.stderr, "");

    // A missing required argument is named in the message (clap puts the name on the line after the colon).
    let out = run_with(&["run", "get", "--json"], &[], b"", std::future::pending()).await;
    assert_eq!(out.code, 2);
    let message = out.envelope()["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(message.contains("--run"), "{message}");

    let out = run_with(
        &["--json", "system", "status"],
        &[],
        b"",
        std::future::pending(),
    )
    .await;
    assert_eq!(out.code, 2);
    assert_eq!(out.stdout, "");
    assert!(out.stderr.contains("Run: deepchat help"), "{out:?}");

    // A params contract violation is a usage error found before any connection.
    let out = run_with(
        &[
            "settings",
            "set",
            "--key",
            "fontSizeLevel",
            "--value",
            "9",
            "--jsonl",
        ],
        &[],
        b"",
        std::future::pending(),
    )
    .await;
    assert_eq!(out.code, 2, "{out:?}");
    assert_eq!(out.envelope()["error"]["code"], "invalid_request");
}

#[tokio::test]
async fn help_needs_no_host() {
    let out = run_with(&["help"], &[], b"", std::future::pending()).await;
    assert_eq!(out.code, 0);
    assert!(
        out.stdout
            .contains("Usage: deepchat <domain> <verb> [options]")
    );
    let out = run_with(
        &["run", "watch", "--help"],
        &[],
        b"",
        std::future::pending(),
    )
    .await;
    assert_eq!(out.code, 0);
    assert!(out.stdout.contains("--cursor"), "{out:?}");
}

#[tokio::test]
async fn no_host_is_unavailable() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().display().to_string();
    let out = run_with(
        &["system", "status", "--json"],
        &[("DEEPCHAT_E2E_USER_DATA_DIR", &data)],
        b"",
        std::future::pending(),
    )
    .await;
    assert_eq!(out.code, 3, "{out:?}");
    assert_eq!(out.envelope()["error"]["code"], "unavailable");
}

#[tokio::test]
async fn an_invalid_agent_token_never_falls_back_to_the_descriptor() {
    let host = Host::start(script(&[("cli.status", json!({}))])).await;
    let data = host.data.display().to_string();
    for bad in [
        "",
        "short",
        "not a token at all but long enough to pass length ....",
    ] {
        let out = run_with(
            &["system", "status", "--json"],
            &[
                ("DEEPCHAT_E2E_USER_DATA_DIR", &data),
                ("DEEPCHAT_CLI_AGENT_TOKEN", bad),
            ],
            b"",
            std::future::pending(),
        )
        .await;
        assert_eq!(out.code, 4, "{bad:?}: {out:?}");
        assert_eq!(out.envelope()["error"]["code"], "authentication_failed");
    }
    assert!(host.calls().is_empty(), "the server was never called");

    // A well-formed but unknown agent token is refused by the server: still exit 4, still no fallback.
    let out = run_with(
        &["system", "status", "--json"],
        &[
            ("DEEPCHAT_E2E_USER_DATA_DIR", &data),
            (
                "DEEPCHAT_CLI_AGENT_TOKEN",
                "unknownunknownunknownunknownunknownunknown1",
            ),
        ],
        b"",
        std::future::pending(),
    )
    .await;
    assert_eq!(out.code, 4, "{out:?}");
    assert!(host.calls().is_empty());
    host.stop().await;
}

#[tokio::test]
async fn the_agent_token_is_presented_when_valid() {
    let host = Host::start(script(&[("cli.version", version_result())])).await;
    let data = host.data.display().to_string();
    let out = run_with(
        &["system", "version", "--json"],
        &[
            ("DEEPCHAT_E2E_USER_DATA_DIR", &data),
            ("DEEPCHAT_CLI_AGENT_TOKEN", support::AGENT_TOKEN),
        ],
        b"",
        std::future::pending(),
    )
    .await;
    assert_eq!(out.code, 0, "{out:?}");
    assert!(host.calls()[0].2, "presented as an agent");
    host.stop().await;
}

#[tokio::test]
async fn a_hanging_host_times_out_with_exit_7() {
    let host = Host::start(Script {
        hang: vec!["cli.status".to_owned()],
        ..Script::default()
    })
    .await;
    let out = run(&host, &["system", "status", "--json", "--timeout", "50"]).await;
    assert_eq!(out.code, 7, "{out:?}");
    assert_eq!(out.envelope()["error"]["code"], "timeout");
    host.stop().await;
}

#[tokio::test]
async fn an_interrupt_cancels_the_request_with_exit_7() {
    let host = Host::start(Script {
        hang: vec!["cli.status".to_owned()],
        ..Script::default()
    })
    .await;
    let data = host.data.display().to_string();
    let state = Arc::clone(&host.state);
    // The interrupt arrives once the server is inside the call.
    let interrupt = async move { state.entered.notified().await };
    let out = run_with(
        &["system", "status", "--jsonl"],
        &[("DEEPCHAT_E2E_USER_DATA_DIR", &data)],
        b"",
        interrupt,
    )
    .await;
    assert_eq!(out.code, 7, "{out:?}");
    assert_eq!(out.envelope()["error"]["code"], "cancelled");
    host.stop().await;
}

#[tokio::test]
async fn agent_run_reads_the_prompt_from_stdin_and_prints_the_run_id() {
    let result = json!({"runId":"run-1","sessionId":"run-1","status":"generating",
                        "requestId":"agent-request-1","messageId":"message-1","createdAt":1000});
    let host = Host::start(script(&[("sessions.runDetached", result)])).await;
    let data = host.data.display().to_string();
    let out = run_with(
        &[
            "agent",
            "run",
            "--stdin",
            "--provider",
            "provider-1",
            "--model",
            "model-1",
        ],
        &[("DEEPCHAT_E2E_USER_DATA_DIR", &data)],
        b"Run the benchmark",
        std::future::pending(),
    )
    .await;
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(
        host.calls()[0].1,
        json!({"prompt":"Run the benchmark","providerId":"provider-1","modelId":"model-1"})
    );
    assert!(
        out.stdout.contains("Run run-1 started (generating)"),
        "{out:?}"
    );
    assert!(out.stdout.contains("deepchat run watch --run run-1"));
    host.stop().await;
}

#[tokio::test]
async fn stdin_over_4_mib_is_refused_before_connecting() {
    let big = vec![b'a'; 4 * 1024 * 1024 + 1];
    let out = run_with(
        &["agent", "run", "--stdin", "--json"],
        &[],
        &big,
        std::future::pending(),
    )
    .await;
    assert_eq!(out.code, 6, "{out:?}");
    assert_eq!(out.envelope()["error"]["code"], "body_too_large");
}

#[tokio::test]
async fn an_invalid_result_is_a_protocol_error() {
    let host = Host::start(script(&[(
        "runs.cancel",
        json!({"runId":"r","cancelRequested":true,"status":"idle","x":1}),
    )]))
    .await;
    let out = run(&host, &["run", "cancel", "--run", "r", "--json"]).await;
    assert_eq!(out.code, 8, "{out:?}");
    assert_eq!(out.envelope()["error"]["code"], "internal_error");
    host.stop().await;
}

#[tokio::test]
async fn remote_errors_map_to_exit_codes() {
    for (code, exit) in [
        (ErrorCode::ApprovalDenied, 5),
        (ErrorCode::NotFound, 6),
        (ErrorCode::PermissionDenied, 4),
    ] {
        let host = Host::start(Script {
            results: HashMap::from([(
                "settings.updatePublic".to_owned(),
                Err(ErrorBody::new(code, "refused")),
            )]),
            ..Script::default()
        })
        .await;
        let out = run(
            &host,
            &["settings", "set", "--key", "fontFamily", "--value", "Inter"],
        )
        .await;
        assert_eq!(out.code, exit, "{code}: {out:?}");
        assert!(
            out.stderr.starts_with(&format!("{code}: refused")),
            "{out:?}"
        );
        assert_eq!(
            host.calls()[0].1,
            json!({"changes":[{"key":"fontFamily","value":"Inter"}]})
        );
        host.stop().await;
    }
}

async fn watch(
    records: Vec<(
        &'static str,
        serde_json::Value,
        Option<&'static str>,
        Option<&'static str>,
    )>,
) -> support::Outcome {
    let host = support::RawHost::stream(move |id| {
        let mut lines: Vec<String> = records
            .iter()
            .enumerate()
            .map(|(i, (event, data, run, cursor))| {
                support::record_line(id, i as u64, event, data.clone(), *run, *cursor)
            })
            .collect();
        lines.push(support::terminal_line(
            id,
            json!({"runId":"run-1","lastCursor":"epoch-1:7"}),
        ));
        lines
    })
    .await;
    let data = host.data.display().to_string();
    let out = run_with(
        &["run", "watch", "--run", "run-1", "--jsonl"],
        &[("DEEPCHAT_E2E_USER_DATA_DIR", &data)],
        b"",
        std::future::pending(),
    )
    .await;
    drop(host);
    out
}

#[tokio::test]
async fn run_watch_jsonl_writes_canonical_records_then_the_terminal_envelope() {
    let out = watch(vec![
        (
            "runs.created",
            json!({"runId":"run-1","sessionId":"run-1","status":"generating","createdAt":1}),
            Some("run-1"),
            Some("epoch-1:6"),
        ),
        (
            "sessions.status.changed",
            json!({"sessionId":"run-1","status":"idle","version":2,"internalSecret":"do-not-publish"}),
            Some("run-1"),
            Some("epoch-1:7"),
        ),
    ])
    .await;
    assert_eq!(out.code, 0, "{out:?}");
    let lines = out.lines();
    assert_eq!(lines.len(), 3);
    assert_eq!(lines[0]["event"], "runs.created");
    assert_eq!(lines[1]["event"], "sessions.status.changed");
    assert_eq!(lines[1]["cursor"], "epoch-1:7");
    assert_eq!(lines[1]["sequence"], 1);
    assert_eq!(
        lines[1]["data"],
        json!({"sessionId":"run-1","status":"idle","version":2})
    );
    assert_eq!(lines[2]["ok"], true);
    assert_eq!(lines[2]["result"]["lastCursor"], "epoch-1:7");
    assert!(!out.stdout.contains("do-not-publish"));
}

#[tokio::test]
async fn run_watch_refuses_records_for_another_run() {
    let out = watch(vec![(
        "chat.stream.failed",
        json!({"requestId":"r","sessionId":"other-run","messageId":"m","failedAt":1,"error":"untrusted"}),
        None,
        None,
    )])
    .await;
    assert_eq!(out.code, 8, "{out:?}");
    assert_eq!(out.envelope()["error"]["code"], "internal_error");
    assert!(!out.stdout.contains("untrusted"));
}

#[tokio::test]
async fn run_watch_refuses_events_outside_the_public_allowlist() {
    let out = watch(vec![(
        "approvals.closed",
        json!({"requestId":"approval-request-1234","reason":"approved"}),
        Some("run-1"),
        Some("epoch-1:8"),
    )])
    .await;
    assert_eq!(out.code, 8, "{out:?}");
    assert!(!out.stdout.contains("approvals.closed"));
}

#[tokio::test]
async fn run_watch_in_text_prints_one_line_per_event() {
    let host = support::RawHost::stream(|id| {
        vec![
            support::record_line(
                id,
                0,
                "runs.turn.failed",
                json!({"runId":"run-1","sessionId":"run-1","failedAt":1,"error":"agent exited \u{1b}[31m"}),
                Some("run-1"),
                Some("e:1"),
            ),
            support::terminal_line(id, json!({"runId":"run-1","lastCursor":"e:1"})),
        ]
    })
    .await;
    let data = host.data.display().to_string();
    let out = run_with(
        &["run", "watch", "--run", "run-1"],
        &[("DEEPCHAT_E2E_USER_DATA_DIR", &data)],
        b"",
        std::future::pending(),
    )
    .await;
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(
        out.stdout,
        "run run-1 failed: agent exited [31m\nResume with: --cursor e:1\n"
    );
}

fn artifact_metadata(id: &str, bytes: &[u8]) -> serde_json::Value {
    json!({"artifact": {"id": id, "requestId": "request-1", "owner": "human", "mimeType": "text/plain",
        "size": bytes.len(), "sha256": support::sha256_hex(bytes), "filename": "a.txt",
        "createdAt": 1000, "expiresAt": 2000}})
}

fn artifact_script(id: &str, bytes: &[u8]) -> Script {
    Script {
        results: HashMap::from([(
            "artifacts.describe".to_owned(),
            ok(artifact_metadata(id, bytes)),
        )]),
        artifacts: HashMap::from([(id.to_owned(), bytes.to_vec())]),
        ..Script::default()
    }
}

/// Answers `artifacts.describe` and the download of `id` with `bytes`.
async fn artifact_host(id: &'static str, bytes: &'static [u8]) -> support::RawHost {
    support::RawHost::start(move |request: &support::RawRequest| {
        if request.method == "GET" {
            assert_eq!(request.path, format!("/v1/artifacts/{id}"));
            support::RawResponse {
                status: 200,
                headers: vec![
                    ("content-type".into(), "text/plain".into()),
                    ("x-deepchat-artifact-id".into(), id.into()),
                    ("x-content-sha256".into(), support::sha256_hex(bytes)),
                ],
                body: bytes.to_vec(),
            }
        } else {
            support::RawResponse::json(
                json!({"protocolVersion":1,"surfaceVersion":2,"id":request.id,
                "ok":true,"result":artifact_metadata(id, bytes)}),
            )
        }
    })
    .await
}

#[tokio::test]
async fn artifact_get_publishes_without_overwriting() {
    let id = "AbCdEfGhIjKlMnOpQrStUvWx";
    let host = artifact_host(id, b"hello").await;
    let data = host.data.display().to_string();
    let env = [("DEEPCHAT_E2E_USER_DATA_DIR", data.as_str())];
    let out_path = host.dir.path().join("saved.txt");
    let target = out_path.display().to_string();
    let get = |extra: &'static [&'static str]| {
        let mut args = vec!["artifact", "get", "--id", id, "--out", target.as_str()];
        args.extend_from_slice(extra);
        let args: Vec<String> = args.into_iter().map(str::to_owned).collect();
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            run_with(&args, &env, b"", std::future::pending()).await
        }
    };
    let out = get(&[]).await;
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(std::fs::read(&out_path).unwrap(), b"hello");
    assert!(out.stdout.contains("Saved to"), "{out:?}");

    std::fs::write(&out_path, b"keep me").unwrap();
    let out = get(&["--json"]).await;
    assert_eq!(out.code, 6, "{out:?}");
    assert_eq!(out.envelope()["error"]["code"], "conflict");
    assert_eq!(std::fs::read(&out_path).unwrap(), b"keep me");

    let out = get(&["--overwrite"]).await;
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(std::fs::read(&out_path).unwrap(), b"hello");
    let parts: Vec<_> = std::fs::read_dir(host.dir.path())
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().ends_with(".deepchat-part"))
        .collect();
    assert!(parts.is_empty());
}

#[tokio::test]
async fn a_download_that_does_not_match_its_hash_is_not_published() {
    let id = "AbCdEfGhIjKlMnOpQrStUvWx";
    let host = support::RawHost::start(move |request: &support::RawRequest| {
        if request.method == "GET" {
            support::RawResponse {
                status: 200,
                headers: vec![
                    ("content-type".into(), "text/plain".into()),
                    ("x-deepchat-artifact-id".into(), id.into()),
                    ("x-content-sha256".into(), support::sha256_hex(b"other")),
                ],
                body: b"hello".to_vec(),
            }
        } else {
            support::RawResponse::json(
                json!({"protocolVersion":1,"surfaceVersion":2,"id":request.id,
                "ok":true,"result":artifact_metadata(id, b"hello")}),
            )
        }
    })
    .await;
    let data = host.data.display().to_string();
    let out_path = host.dir.path().join("bad.txt");
    let target = out_path.display().to_string();
    let out = run_with(
        &["artifact", "get", "--id", id, "--out", &target, "--json"],
        &[("DEEPCHAT_E2E_USER_DATA_DIR", &data)],
        b"",
        std::future::pending(),
    )
    .await;
    assert_eq!(out.code, 8, "{out:?}");
    assert!(!out_path.exists());
    let parts = std::fs::read_dir(host.dir.path())
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().ends_with(".deepchat-part"))
        .count();
    assert_eq!(parts, 0);
}

#[tokio::test]
async fn agent_callers_cannot_use_out() {
    let id = "AbCdEfGhIjKlMnOpQrStUvWx";
    let host = Host::start(artifact_script(id, b"hello")).await;
    let data = host.data.display().to_string();
    let target = host.dir.path().join("x.txt").display().to_string();
    let out = run_with(
        &["artifact", "get", "--id", id, "--out", &target, "--json"],
        &[
            ("DEEPCHAT_E2E_USER_DATA_DIR", &data),
            ("DEEPCHAT_CLI_AGENT_TOKEN", support::AGENT_TOKEN),
        ],
        b"",
        std::future::pending(),
    )
    .await;
    assert_eq!(out.code, 4, "{out:?}");
    assert_eq!(out.envelope()["error"]["code"], "permission_denied");
    assert!(host.calls().is_empty());
    assert!(!host.dir.path().join("x.txt").exists());
    host.stop().await;
}

#[tokio::test]
async fn run_watch_and_artifact_get_through_the_real_server() {
    let id = "AbCdEfGhIjKlMnOpQrStUvWx";
    let mut script = artifact_script(id, b"hello");
    script.results.insert(
        "events.subscribe".to_owned(),
        ok(json!({"runId":"run-1","lastCursor":"epoch-1:2"})),
    );
    script.records = vec![
        Record {
            event: "runs.turn.accepted".into(),
            data: json!({"runId":"run-1","sessionId":"run-1","requestId":null,"messageId":"m-1","acceptedAt":5}),
            run_id: Some("run-1".into()),
            cursor: Some("epoch-1:1".into()),
        },
        Record {
            event: "chat.stream.completed".into(),
            data: json!({"requestId":"q","sessionId":"run-1","messageId":"m-2","completedAt":9}),
            run_id: Some("run-1".into()),
            cursor: Some("epoch-1:2".into()),
        },
    ];
    let host = Host::start(script).await;
    let out = run(
        &host,
        &["run", "watch", "--run", "run-1", "--jsonl", "--limit", "5"],
    )
    .await;
    assert_eq!(out.code, 0, "{out:?}");
    let lines = out.lines();
    assert_eq!(lines.len(), 3, "{out:?}");
    assert_eq!(lines[0]["event"], "runs.turn.accepted");
    assert_eq!(lines[1]["event"], "chat.stream.completed");
    assert_eq!(lines[2]["result"]["lastCursor"], "epoch-1:2");
    assert_eq!(host.calls()[0].1, json!({"runId":"run-1","messageLimit":5}));

    let target = host.dir.path().join("real.txt");
    let out = run(
        &host,
        &[
            "artifact",
            "get",
            "--id",
            id,
            "--out",
            &target.display().to_string(),
        ],
    )
    .await;
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(std::fs::read(&target).unwrap(), b"hello");
    host.stop().await;
}
