//! `awp-host tools list|call` with the real binary against the example bundle `fixtures/tool-app` (real `echo`,
//! `printf` and a script CLI) and temporary bundles: output shapes, the exit-code table, `--json` printing one
//! object on every path, the default `--app`, secrets redacted, and cancellation by signal.

mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use agentwire_process::Command;
use serde_json::{Value, json};
use support::{Host, Output, collect};

fn example_app() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/tool-app")
        .canonicalize()
        .expect("fixtures/tool-app exists")
}

fn app_arg() -> String {
    example_app().display().to_string()
}

/// `--json` output: exactly one line holding one JSON object.
fn one_object(out: &Output) -> Value {
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 1, "{out:?}");
    let value: Value = serde_json::from_str(lines[0]).unwrap_or_else(|e| panic!("{e}: {out:?}"));
    assert!(value.is_object(), "{out:?}");
    value
}

/// A failed `--json` call: the exit status and the error code.
fn check_failure(out: &Output, exit: i32, code: &str) -> Value {
    let value = one_object(out);
    assert_eq!(out.code, exit, "{out:?}");
    assert_eq!(value["error"]["code"], code, "{out:?}");
    if value.get("ok").is_some() {
        assert_eq!(value["ok"], false, "{out:?}");
    }
    value
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_list_shows_every_tool_with_its_driver() {
    let host = Host::new();
    let out = host.run(&["tools", "list", "--app", &app_arg()]).await;
    assert_eq!(out.code, 0, "{out:?}");
    let rows: Vec<Vec<&str>> = out
        .stdout
        .lines()
        .map(|l| l.split_whitespace().take(4).collect())
        .collect();
    assert_eq!(rows[0], ["ID", "VERSION", "DRIVER", "MUTATES"]);
    assert_eq!(rows[1], ["echo", "1.0.0", "echo-cli", "no"]);
    assert_eq!(rows[5], ["notes-whoami", "2.0.0", "notes-auth", "no"]);

    let out = host
        .run(&["tools", "list", "--app", &app_arg(), "--json"])
        .await;
    assert_eq!(out.code, 0, "{out:?}");
    let value = one_object(&out);
    assert_eq!(value["app"], app_arg());
    let ids: Vec<&str> = value["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        ["echo", "greet", "notes-list", "notes-show", "notes-whoami"]
    );
    assert_eq!(value["tools"][2]["driver"], "notes-cli");
    assert_eq!(value["tools"][2]["output_format"], "json");
    let notes = &value["drivers"][2];
    assert_eq!(notes["id"], "notes-cli");
    assert_eq!(notes["binary"], format!("{}/bin/notes", app_arg()));
    assert_eq!(notes["cwd"], format!("{}/data", app_arg()));
    assert_eq!(value["drivers"][1]["secrets"], json!(["NOTES_TOKEN"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_call_prints_text_and_json_outputs() {
    let host = Host::new();
    let app = app_arg();
    let out = host
        .run(&[
            "tools",
            "call",
            "echo",
            "--input",
            r#"{"msg":"hello","words":["a","b"]}"#,
            "--app",
            &app,
        ])
        .await;
    assert_eq!(
        (out.code, out.stdout.as_str()),
        (0, "hello a b\n"),
        "{out:?}"
    );

    let out = host
        .run(&[
            "tools",
            "call",
            "notes-show",
            "--input",
            r#"{"id":1}"#,
            "--app",
            &app,
        ])
        .await;
    assert_eq!(out.code, 0, "{out:?}");
    let shown: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(shown, json!({"id": 1, "title": "buy milk"}));

    let out = host
        .run(&[
            "tools",
            "call",
            "notes-list",
            "--input",
            "{}",
            "--app",
            &app,
            "--json",
        ])
        .await;
    assert_eq!(out.code, 0, "{out:?}");
    let value = one_object(&out);
    assert_eq!(value["ok"], true);
    assert_eq!(value["tool"], "notes-list");
    assert_eq!(value["driver"], "notes-cli");
    assert_eq!(value["output_format"], "json");
    assert_eq!(value["exit_code"], 0);
    assert_eq!(value["output"][1]["title"], "write docs");
    assert_eq!(value["stdout_truncated"], false);

    let out = host
        .run(&[
            "tools",
            "call",
            "greet",
            "--input",
            r#"{"name":"Ada"}"#,
            "--app",
            &app,
            "--json",
        ])
        .await;
    assert_eq!(one_object(&out)["output"], "Hello, Ada!\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_call_reads_the_input_from_stdin() {
    let host = Host::new();
    let out = host
        .run_with_stdin(
            &[
                "tools",
                "call",
                "greet",
                "--input",
                "-",
                "--app",
                &app_arg(),
            ],
            br#"{"name":"Bob","greeting":"Hey"}"#,
        )
        .await;
    assert_eq!(
        (out.code, out.stdout.as_str()),
        (0, "Hey, Bob!\n"),
        "{out:?}"
    );
    let out = host
        .run_with_stdin(
            &[
                "tools",
                "call",
                "greet",
                "--input",
                "-",
                "--app",
                &app_arg(),
                "--json",
            ],
            b"{nope",
        )
        .await;
    check_failure(&out, 2, "input_not_json");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_app_is_the_current_directory() {
    let mut cmd = Command::new(agentwire_testkit::bin_path("awp-host"));
    cmd.args(["tools", "call", "echo", "--input", r#"{"msg":"from cwd"}"#])
        .current_dir(example_app())
        .inherit_os_env();
    let mut child = cmd.spawn().expect("spawn awp-host");
    let out = collect(&mut child).await;
    assert_eq!(
        (out.code, out.stdout.as_str()),
        (0, "from cwd\n"),
        "{out:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_follow_the_exit_code_table_with_one_json_object() {
    let host = Host::new();
    let app = app_arg();
    let call = |tool: &'static str, input: &'static str| {
        vec!["tools", "call", tool, "--input", input, "--json"]
    };
    let with_app = |mut args: Vec<&'static str>, app: &str| {
        let mut owned: Vec<String> = args.drain(..).map(str::to_owned).collect();
        owned.push("--app".to_owned());
        owned.push(app.to_owned());
        owned
    };
    let run = |args: Vec<String>| {
        let host = &host;
        async move {
            let refs: Vec<&str> = args.iter().map(String::as_str).collect();
            host.run(&refs).await
        }
    };
    // 2: the input fails the schema (nothing runs), an unknown tool, input that is not JSON.
    let out = run(with_app(call("echo", r#"{"msg":1}"#), &app)).await;
    let value = check_failure(&out, 2, "input_invalid");
    assert_eq!(value["error"]["field"], "/msg");
    check_failure(
        &run(with_app(call("nope", "{}"), &app)).await,
        2,
        "tool_not_found",
    );
    check_failure(
        &run(with_app(call("echo", "{"), &app)).await,
        2,
        "input_not_json",
    );
    // 3: a secret is missing (the host's environment has no NOTES_TOKEN).
    check_failure(
        &run(with_app(call("notes-whoami", "{}"), &app)).await,
        3,
        "missing_secret",
    );
    // 6: the tool failed: a manifest override (exit 5 → not_found), output that is not JSON.
    let out = run(with_app(call("notes-show", r#"{"id":7}"#), &app)).await;
    let value = check_failure(&out, 6, "not_found");
    assert_eq!(value["error"]["exit_code"], 5);
    assert_eq!(value["error"]["message"], "notes: no note 7");
    assert_eq!(value["error"]["retryable"], false);
    check_failure(
        &run(with_app(call("notes-list", r#"{"format":"text"}"#), &app)).await,
        6,
        "output_parse_failed",
    );
    // 2: a bundle that does not load names the file, line and field.
    let bad = tempfile::tempdir().unwrap();
    let driver_dir = bad.path().join(".agentproto/drivers/dd");
    std::fs::create_dir_all(&driver_dir).unwrap();
    std::fs::create_dir_all(bad.path().join(".agentproto/tools/tt")).unwrap();
    std::fs::write(
        bad.path().join(".agentproto/tools/tt/TOOL.md"),
        "---\nid: tt\ndescription: d\nversion: 1.0.0\n---\n",
    )
    .unwrap();
    std::fs::write(
        driver_dir.join("DRIVER.md"),
        "---\nid: dd\nkind: cli\nbin: echo\ncwd: ..\nimplements:\n  - tool: tt\n    version: ^1\n---\n",
    )
    .unwrap();
    let bad_app = bad.path().display().to_string();
    let value = check_failure(
        &run(with_app(call("tt", "{}"), &bad_app)).await,
        2,
        "cwd_outside_app",
    );
    assert_eq!(value["error"]["line"], 5);
    assert_eq!(value["error"]["field"], "cwd");
    assert!(
        value["error"]["file"]
            .as_str()
            .unwrap()
            .ends_with("drivers/dd/DRIVER.md"),
        "{value}"
    );
    let out = host
        .run(&["tools", "list", "--json", "--app", &bad_app])
        .await;
    check_failure(&out, 2, "cwd_outside_app");
    // Human output: the usual stderr line, nothing on stdout.
    let out = host
        .run(&["tools", "call", "nope", "--input", "{}", "--app", &app])
        .await;
    assert_eq!((out.code, out.stdout.as_str()), (2, ""), "{out:?}");
    assert!(
        out.stderr
            .contains("awp-host: error: no tool 'nope' (tool_not_found)"),
        "{out:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_4_is_auth_required_and_the_secret_is_redacted_everywhere() {
    const TOKEN: &str = "wrong-TOKEN-9d1c";
    let host = Host::new();
    for json in [true, false] {
        let mut args = vec!["tools", "call", "notes-whoami", "--input", "{}"];
        let app = app_arg();
        args.extend(["--app", &app]);
        if json {
            args.push("--json");
        }
        let mut child =
            host.spawn_with_env(&args, &[("NOTES_TOKEN", TOKEN), ("AWP_HOST_LOG", "debug")]);
        child.stdin().close().await;
        let out = collect(&mut child).await;
        assert_eq!(out.code, 6, "{out:?}");
        assert!(
            !out.stdout.contains(TOKEN) && !out.stderr.contains(TOKEN),
            "leaked: {out:?}"
        );
        if json {
            let value = check_failure(&out, 6, "auth_required");
            assert_eq!(value["error"]["message"], "notes: token *** was rejected");
        } else {
            assert!(
                out.stderr
                    .contains("notes: token *** was rejected (auth_required)"),
                "{out:?}"
            );
            // The debug log echoes the argv, redacted.
            assert!(out.stderr.contains(r#"argv=["whoami", "***"]"#), "{out:?}");
        }
    }
    let mut child = host.spawn_with_env(
        &[
            "tools",
            "call",
            "notes-whoami",
            "--input",
            "{}",
            "--app",
            &app_arg(),
            "--json",
        ],
        &[("NOTES_TOKEN", "letmein")],
    );
    child.stdin().close().await;
    let out = collect(&mut child).await;
    assert_eq!(
        (out.code, &one_object(&out)["output"]),
        (0, &json!("alice\n")),
        "{out:?}"
    );
}

/// A bundle whose tool hangs after writing its pid; `timeout_ms` as given.
fn hanging_app(timeout_ms: u64) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("write the bundle");
    let root = dir.path();
    let pid_file = root.join("pid");
    std::fs::create_dir_all(root.join(".agentproto/tools/hang")).expect("write the bundle");
    std::fs::create_dir_all(root.join(".agentproto/drivers/hang-cli")).expect("write the bundle");
    std::fs::create_dir_all(root.join("bin")).expect("write the bundle");
    std::fs::write(
        root.join(".agentproto/tools/hang/TOOL.md"),
        format!(
            "---\nid: hang\ndescription: hangs\nversion: 1.0.0\ntimeout_ms: {timeout_ms}\n---\n"
        ),
    )
    .expect("write the bundle");
    std::fs::write(
        root.join(".agentproto/drivers/hang-cli/DRIVER.md"),
        "---\nid: hang-cli\nkind: cli\nbin: ./bin/hang\nsandbox:\n  env:\n    pass: [PATH]\nimplements:\n  - tool: hang\n    version: ^1\n---\n",
    )
    .expect("write the bundle");
    let script = root.join("bin/hang");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nprintf '%s\\n' $$ > '{}'\nexec sleep 300\n",
            pid_file.display()
        ),
    )
    .expect("write the bundle");
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("write the bundle");
    (dir, pid_file)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_exits_7() {
    let host = Host::new();
    let (dir, _) = hanging_app(300);
    let app = dir.path().display().to_string();
    let out = host
        .run(&[
            "tools", "call", "hang", "--input", "{}", "--app", &app, "--json",
        ])
        .await;
    let value = check_failure(&out, 7, "timeout");
    assert_eq!(value["error"]["retryable"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_cancels_the_call_and_exits_7() {
    let host = Host::new();
    let (dir, pid_file) = hanging_app(600_000);
    let app = dir.path().display().to_string();
    let mut child = host.spawn(&[
        "tools", "call", "hang", "--input", "{}", "--app", &app, "--json",
    ]);
    child.stdin().close().await;
    let tool_pid = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            if let Ok(text) = std::fs::read_to_string(&pid_file)
                && text.ends_with('\n')
            {
                return text.trim().parse::<u32>().unwrap();
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the tool started");
    let pid = rustix::process::Pid::from_raw(i32::try_from(child.id().unwrap()).unwrap()).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).expect("send SIGTERM");
    let out = collect(&mut child).await;
    check_failure(&out, 7, "cancelled");
    // The tool's group was stopped: its process is gone (or a zombie awaiting its reaper).
    // Gone (or a zombie awaiting its reaper where /proc can tell): a portable probe, never vacuous.
    assert!(
        agentwire_testkit::proc::wait_gone(tool_pid, Duration::from_secs(20)).await,
        "the tool was stopped"
    );
}
