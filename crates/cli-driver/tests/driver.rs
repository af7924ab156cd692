//! End-to-end calls with real binaries: the example bundle `fixtures/tool-app` and temporary bundles for the
//! process behaviours (a lingering grandchild, a timeout, cancellation, the env sandbox, limits, cwd escapes).

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use agentwire_cli_driver::{
    AppBundle, CallContext, ErrorCode, Limits, Output, ToolError, ToolOutput,
};
use serde_json::{Value, json};

fn example_app() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/tool-app")
}

/// The host environment a test call sees: this process's PATH only, plus `extra`.
fn ctx(extra: &[(&str, &str)]) -> CallContext {
    let mut ctx = CallContext::default();
    if let Ok(path) = std::env::var("PATH") {
        ctx.env.insert("PATH".to_owned(), path);
    }
    for (k, v) in extra {
        ctx.env.insert((*k).to_owned(), (*v).to_owned());
    }
    ctx
}

/// A guard against a hang: a call must end long before this.
const HANG_GUARD: Duration = Duration::from_secs(60);

async fn call(
    bundle: &AppBundle,
    tool: &str,
    input: Value,
    ctx: &CallContext,
) -> Result<ToolOutput, ToolError> {
    tokio::time::timeout(HANG_GUARD, bundle.call(tool, &input, ctx))
        .await
        .expect("the call ended")
}

fn text(out: &ToolOutput) -> &str {
    match &out.output {
        Output::Text(text) => text,
        Output::Json(value) => panic!("expected text, got {value}"),
    }
}

/// A temporary app bundle written file by file.
struct TempApp {
    dir: tempfile::TempDir,
}

impl TempApp {
    fn new() -> Self {
        Self {
            dir: tempfile::tempdir().expect("tempdir"),
        }
    }

    fn root(&self) -> &Path {
        self.dir.path()
    }

    fn write(&self, rel: &str, text: &str) -> &Self {
        let path = self.root().join(rel);
        fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        fs::write(&path, text).expect("write");
        self
    }

    fn tool(&self, id: &str, extra: &str) -> &Self {
        self.write(
            &format!(".agentproto/tools/{id}/TOOL.md"),
            &format!("---\nid: {id}\ndescription: test tool\nversion: 1.0.0\n{extra}---\n"),
        )
    }

    fn driver(&self, id: &str, yaml: &str) -> &Self {
        self.write(
            &format!(".agentproto/drivers/{id}/DRIVER.md"),
            &format!("---\nid: {id}\nkind: cli\n{yaml}---\n"),
        )
    }

    /// An executable script `bin/<name>` (the scenario itself is about a script file).
    fn script(&self, name: &str, body: &str) -> &Self {
        let rel = format!("bin/{name}");
        self.write(&rel, &format!("#!/bin/sh\n{body}"));
        let path = self.root().join(rel);
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).expect("chmod");
        self
    }

    fn load(&self) -> AppBundle {
        AppBundle::load(self.root()).unwrap_or_else(|e| panic!("{e}"))
    }

    fn load_with(&self, limits: Limits) -> AppBundle {
        AppBundle::load_with(self.root(), limits).unwrap_or_else(|e| panic!("{e}"))
    }
}

/// Waits (bounded) until process `pid` is gone (portable probe, see `agentwire_testkit::proc`); the kill itself is
/// what is being checked.
async fn wait_gone(pid: u32) {
    assert!(
        agentwire_testkit::proc::wait_gone(pid, Duration::from_secs(20)).await,
        "process {pid} is still running"
    );
}

/// Waits (bounded) for a file to hold `lines` lines; returns them.
async fn wait_lines(path: &Path, lines: usize) -> Vec<String> {
    let read = async {
        loop {
            if let Ok(text) = fs::read_to_string(path) {
                let got: Vec<String> = text.lines().map(str::to_owned).collect();
                if got.len() >= lines && text.ends_with('\n') {
                    return got;
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(20), read)
        .await
        .expect("the script wrote its pids")
}

// ------------------------------------------------------------------------------------------------------------
// the example bundle

#[tokio::test]
async fn the_example_bundle_loads_both_spellings() {
    let bundle = AppBundle::load(&example_app()).unwrap_or_else(|e| panic!("{e}"));
    let tools: Vec<&str> = bundle.tools().map(|t| t.id.as_str()).collect();
    assert_eq!(
        tools,
        ["echo", "greet", "notes-list", "notes-show", "notes-whoami"]
    );
    let drivers: Vec<(&str, &str)> = bundle
        .drivers()
        .map(|d| (d.manifest.id.as_str(), d.manifest.bin.as_str()))
        .collect();
    assert_eq!(
        drivers,
        [
            ("echo-cli", "echo"),
            ("notes-auth", "./bin/notes"),
            ("notes-cli", "./bin/notes"),
            ("printf-cli", "printf")
        ]
    );
    let notes = bundle
        .drivers()
        .find(|d| d.manifest.id == "notes-cli")
        .unwrap();
    assert_eq!(notes.cwd, bundle.root().join("data"));
    let binaries = bundle.driver_binaries();
    assert!(
        binaries.contains(&bundle.root().join("bin/notes")),
        "{binaries:?}"
    );
    assert!(
        binaries
            .iter()
            .any(|b| b.file_name().is_some_and(|n| n == "echo")),
        "{binaries:?}"
    );
    assert!(
        binaries
            .iter()
            .any(|b| b.file_name().is_some_and(|n| n == "printf")),
        "{binaries:?}"
    );
}

#[tokio::test]
async fn echo_and_printf_tools_run_the_real_binaries() {
    let bundle = AppBundle::load(&example_app()).unwrap();
    let out = call(
        &bundle,
        "echo",
        json!({"msg": "hello", "words": ["a b", "c"]}),
        &ctx(&[]),
    )
    .await
    .unwrap();
    assert_eq!(text(&out), "hello a b c\n");
    assert_eq!(out.exit_code, 0);
    assert!(!out.stdout_truncated && !out.stderr_truncated);
    let out = call(&bundle, "greet", json!({"name": "Ada"}), &ctx(&[]))
        .await
        .unwrap();
    assert_eq!(text(&out), "Hello, Ada!\n");
    let out = call(
        &bundle,
        "greet",
        json!({"name": "Ada", "greeting": "Hi"}),
        &ctx(&[]),
    )
    .await
    .unwrap();
    assert_eq!(text(&out), "Hi, Ada!\n");
}

#[tokio::test]
async fn a_json_tool_parses_stdout_and_runs_in_its_cwd() {
    let bundle = AppBundle::load(&example_app()).unwrap();
    let out = call(&bundle, "notes-list", json!({}), &ctx(&[]))
        .await
        .unwrap();
    assert_eq!(
        out.output,
        Output::Json(json!([{"id": 1, "title": "buy milk"}, {"id": 2, "title": "write docs"}]))
    );
    let out = call(&bundle, "notes-show", json!({"id": 2}), &ctx(&[]))
        .await
        .unwrap();
    assert_eq!(
        out.output,
        Output::Json(json!({"id": 2, "title": "write docs"}))
    );
}

#[tokio::test]
async fn output_that_is_not_json_is_output_parse_failed() {
    let bundle = AppBundle::load(&example_app()).unwrap();
    let err = call(&bundle, "notes-list", json!({"format": "text"}), &ctx(&[]))
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::OutputParseFailed, "{err}");
    assert!(err.message.starts_with("stdout is not JSON"), "{err}");
    assert!(!err.retryable());
}

#[tokio::test]
async fn manifest_exit_codes_override_and_exit_4_is_auth_required() {
    let bundle = AppBundle::load(&example_app()).unwrap();
    let err = call(&bundle, "notes-show", json!({"id": 9}), &ctx(&[]))
        .await
        .unwrap_err();
    assert_eq!(
        (err.code, err.message.as_str(), err.exit_code),
        (ErrorCode::NotFound, "notes: no note 9", Some(5))
    );
    let err = call(
        &bundle,
        "notes-whoami",
        json!({}),
        &ctx(&[("NOTES_TOKEN", "wrong-token-77")]),
    )
    .await
    .unwrap_err();
    assert_eq!(err.code, ErrorCode::AuthRequired, "{err}");
    assert_eq!(err.message, "notes: token *** was rejected");
    assert_eq!(err.exit_code, Some(4));
    let out = call(
        &bundle,
        "notes-whoami",
        json!({}),
        &ctx(&[("NOTES_TOKEN", "letmein")]),
    )
    .await
    .unwrap();
    assert_eq!(text(&out), "alice\n");
}

#[tokio::test]
async fn a_missing_secret_fails_before_the_spawn() {
    let app = TempApp::new();
    let marker = app.root().join("spawned");
    app.tool("tt", "")
        .script("mark", &format!("printf x > '{}'\n", marker.display()))
        .driver(
            "dd",
            "bin: ./bin/mark\nimplements:\n  - tool: tt\n    version: ^1\n    argv: [\"${secrets.API_KEY}\"]\nauth:\n  state:\n    env: [API_KEY]\n",
        );
    let bundle = app.load();
    let err = call(&bundle, "tt", json!({}), &ctx(&[])).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::MissingSecret);
    assert!(err.message.contains("'API_KEY'"), "{err}");
    assert!(!marker.exists(), "nothing may be spawned");
    // The same call with the secret set spawns.
    call(&bundle, "tt", json!({}), &ctx(&[("API_KEY", "k")]))
        .await
        .unwrap();
    assert!(marker.exists());
}

#[tokio::test]
async fn an_input_failing_its_schema_is_refused_before_the_spawn() {
    let bundle = AppBundle::load(&example_app()).unwrap();
    let err = call(&bundle, "echo", json!({"msg": 12}), &ctx(&[]))
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::InputInvalid, "{err}");
    assert_eq!(err.field.as_deref(), Some("/msg"));
    assert!(err.message.starts_with("input /msg: "), "{err}");
    let err = call(&bundle, "echo", json!({}), &ctx(&[]))
        .await
        .unwrap_err();
    assert_eq!(
        (err.code, err.field.as_deref()),
        (ErrorCode::InputInvalid, Some(""))
    );
    assert!(
        err.message.contains("(root)") && err.message.contains("msg"),
        "{err}"
    );
    let err = call(&bundle, "notes-show", json!({"id": 0}), &ctx(&[]))
        .await
        .unwrap_err();
    assert_eq!(
        (err.code, err.field.as_deref()),
        (ErrorCode::InputInvalid, Some("/id"))
    );
    let err = call(&bundle, "nope", json!({}), &ctx(&[]))
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::ToolNotFound);
}

// ------------------------------------------------------------------------------------------------------------
// process behaviour

#[tokio::test]
async fn a_grandchild_holding_stdout_does_not_hang_the_call() {
    let app = TempApp::new();
    let pids = app.root().join("pids");
    app.tool("tt", "")
        .script("linger", &format!("sleep 300 &\nprintf '%s\\n' $! > '{}'\nprintf done\n", pids.display()))
        .driver(
            "dd",
            "bin: ./bin/linger\nsandbox:\n  env:\n    pass: [PATH]\nimplements:\n  - tool: tt\n    version: ^1\n",
        );
    let bundle = app.load_with(Limits {
        drain_window: Duration::from_millis(300),
        ..Limits::default()
    });
    let out = call(&bundle, "tt", json!({}), &ctx(&[])).await.unwrap();
    assert_eq!(text(&out), "done");
    let grandchild: u32 = wait_lines(&pids, 1).await[0].parse().unwrap();
    // Whatever was left of the group at the end of the drain window is killed.
    wait_gone(grandchild).await;
}

#[tokio::test]
async fn a_timeout_kills_the_whole_group() {
    let app = TempApp::new();
    let pids = app.root().join("pids");
    // The script must write both pids before the timeout kills it: a margin a loaded machine cannot use up.
    app.tool("tt", "timeout_ms: 5000\n")
        .script("hang", &format!("sleep 300 &\nprintf '%s\\n%s\\n' $$ $! > '{}'\nwait\n", pids.display()))
        .driver(
            "dd",
            "bin: ./bin/hang\nsandbox:\n  env:\n    pass: [PATH]\nimplements:\n  - tool: tt\n    version: ^1\n",
        );
    let bundle = app.load();
    let err = call(&bundle, "tt", json!({}), &ctx(&[])).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::Timeout, "{err}");
    assert!(err.retryable());
    assert_eq!(
        err.message,
        "timed out after 5000 ms; the process group was stopped"
    );
    for pid in wait_lines(&pids, 2).await {
        wait_gone(pid.parse().unwrap()).await;
    }
}

#[tokio::test]
async fn cancel_stops_the_whole_group() {
    let app = TempApp::new();
    let pids = app.root().join("pids");
    app.tool("tt", "")
        .script("hang", &format!("sleep 300 &\nprintf '%s\\n%s\\n' $$ $! > '{}'\nwait\n", pids.display()))
        .driver(
            "dd",
            "bin: ./bin/hang\nsandbox:\n  env:\n    pass: [PATH]\nimplements:\n  - tool: tt\n    version: ^1\n",
        );
    let bundle = app.load();
    let context = ctx(&[]);
    let cancel = context.cancel.clone();
    let running = call(&bundle, "tt", json!({}), &context);
    let canceller = async {
        let lines = wait_lines(&pids, 2).await;
        cancel.cancel();
        lines
    };
    let (result, lines) = tokio::join!(running, canceller);
    let err = result.unwrap_err();
    assert_eq!(err.code, ErrorCode::Cancelled, "{err}");
    for pid in lines {
        wait_gone(pid.parse().unwrap()).await;
    }
}

#[tokio::test]
async fn the_environment_is_exactly_pass_plus_set() {
    let app = TempApp::new();
    app.tool("tt", "").driver(
        "dd",
        "bin: env\nsandbox:\n  env:\n    pass: [KEEP, ABSENT, TOKEN]\n    set: {FIXED: \"1\"}\nimplements:\n  - tool: tt\n    version: ^1\nauth:\n  state:\n    env: [TOKEN]\n",
    );
    let bundle = app.load();
    let mut context = ctx(&[
        ("KEEP", "k"),
        ("DROP", "d"),
        ("HOME", "/root"),
        ("TOKEN", "from-env"),
    ]);
    context
        .secrets
        .insert("TOKEN".to_owned(), "from-secrets".to_owned());
    let out = call(&bundle, "tt", json!({}), &context).await.unwrap();
    let mut lines: Vec<&str> = text(&out).lines().collect();
    lines.sort_unstable();
    // The secret wins over the host variable of the same name, and is redacted in the output.
    assert_eq!(lines, ["FIXED=1", "KEEP=k", "TOKEN=***"]);
}

#[tokio::test]
async fn a_signal_is_reported_as_128_plus_its_number() {
    let app = TempApp::new();
    app.tool("tt", "")
        .script("die", "kill -\"$1\" $$\n")
        .driver(
            "dd",
            "bin: ./bin/die\nimplements:\n  - tool: tt\n    version: ^1\n    argv: [\"${input.signal}\"]\n",
        );
    let bundle = app.load();
    let err = call(&bundle, "tt", json!({"signal": "KILL"}), &ctx(&[]))
        .await
        .unwrap_err();
    assert_eq!(
        (err.code, err.exit_code),
        (ErrorCode::Killed, Some(137)),
        "{err}"
    );
    assert_eq!(err.message, "exit code 137");
    let err = call(&bundle, "tt", json!({"signal": "TERM"}), &ctx(&[]))
        .await
        .unwrap_err();
    assert_eq!(
        (err.code, err.exit_code),
        (ErrorCode::UpstreamError, Some(143)),
        "{err}"
    );
}

#[tokio::test]
async fn a_missing_binary_is_spawn_failed() {
    let app = TempApp::new();
    app.tool("tt", "").driver(
        "dd",
        "bin: agentwire-no-such-binary\nimplements:\n  - tool: tt\n    version: ^1\n",
    );
    let err = call(&app.load(), "tt", json!({}), &ctx(&[]))
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::SpawnFailed);
    assert!(err.message.contains("agentwire-no-such-binary"), "{err}");
}

// ------------------------------------------------------------------------------------------------------------
// limits, at the boundary and one past it

fn printf_app() -> TempApp {
    let app = TempApp::new();
    app.tool("tt", "").script("err", "printf '%s' \"$1\" >&2\nexit 1\n").driver(
        "out",
        "bin: printf\nimplements:\n  - tool: tt\n    version: ^1\n    argv: [\"%s\", \"${input.s}\"]\n",
    );
    app.tool("ee", "").driver(
        "err",
        "bin: ./bin/err\nimplements:\n  - tool: ee\n    version: ^1\n    argv: [\"${input.s}\"]\n",
    );
    app.tool("many", "").driver(
        "many",
        "bin: echo\nimplements:\n  - tool: many\n    version: ^1\n    argv: [\"${input.a}\"]\n",
    );
    app
}

#[tokio::test]
async fn stdout_is_bounded_and_truncation_reported() {
    let app = printf_app();
    let bundle = app.load_with(Limits {
        max_stdout_bytes: 5,
        ..Limits::default()
    });
    let at = call(&bundle, "tt", json!({"s": "12345"}), &ctx(&[]))
        .await
        .unwrap();
    assert_eq!((text(&at), at.stdout_truncated), ("12345", false));
    let over = call(&bundle, "tt", json!({"s": "123456"}), &ctx(&[]))
        .await
        .unwrap();
    assert_eq!((text(&over), over.stdout_truncated), ("12345", true));
}

#[tokio::test]
async fn stderr_is_bounded_and_truncation_reported() {
    let app = printf_app();
    let bundle = app.load_with(Limits {
        max_stderr_bytes: 5,
        ..Limits::default()
    });
    let at = call(&bundle, "ee", json!({"s": "abcde"}), &ctx(&[]))
        .await
        .unwrap_err();
    assert_eq!((at.message.as_str(), at.stderr_truncated), ("abcde", false));
    let over = call(&bundle, "ee", json!({"s": "abcdef"}), &ctx(&[]))
        .await
        .unwrap_err();
    assert_eq!(
        (over.message.as_str(), over.stderr_truncated),
        ("bcdef", true)
    );
}

#[tokio::test]
async fn argv_count_and_bytes_are_bounded() {
    let app = printf_app();
    let bundle = app.load_with(Limits {
        max_args: 3,
        max_argv_bytes: 8,
        ..Limits::default()
    });
    call(&bundle, "many", json!({"a": ["a", "b", "c"]}), &ctx(&[]))
        .await
        .unwrap();
    let err = call(
        &bundle,
        "many",
        json!({"a": ["a", "b", "c", "d"]}),
        &ctx(&[]),
    )
    .await
    .unwrap_err();
    assert_eq!(err.code, ErrorCode::ArgvTooLarge);
    // Bytes: each argument plus one; "abc" + "defg" = 4 + 5 = 9 > 8, "abc" + "def" = 8.
    call(&bundle, "many", json!({"a": ["abc", "def"]}), &ctx(&[]))
        .await
        .unwrap();
    let err = call(&bundle, "many", json!({"a": ["abc", "defg"]}), &ctx(&[]))
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::ArgvTooLarge);
}

#[test]
fn manifest_size_is_bounded() {
    let app = TempApp::new();
    app.tool("tt", "");
    let size = fs::metadata(app.root().join(".agentproto/tools/tt/TOOL.md"))
        .unwrap()
        .len() as usize;
    AppBundle::load_with(
        app.root(),
        Limits {
            max_manifest_bytes: size,
            ..Limits::default()
        },
    )
    .unwrap();
    let err = AppBundle::load_with(
        app.root(),
        Limits {
            max_manifest_bytes: size - 1,
            ..Limits::default()
        },
    )
    .unwrap_err();
    assert_eq!(err.code(), "manifest_too_large");
}

// ------------------------------------------------------------------------------------------------------------
// load-time checks

fn cwd_app(cwd: &str) -> TempApp {
    let app = TempApp::new();
    app.tool("tt", "").driver(
        "dd",
        &format!("bin: echo\ncwd: \"{cwd}\"\nimplements:\n  - tool: tt\n    version: ^1\n"),
    );
    fs::create_dir_all(app.root().join("inside/deeper")).expect("mkdir");
    app
}

#[test]
fn a_cwd_escaping_the_app_root_is_refused_at_load() {
    let outside = tempfile::tempdir().unwrap();
    for cwd in ["..", "inside/../..", "/"] {
        let app = cwd_app(cwd);
        let err = AppBundle::load(app.root()).unwrap_err();
        assert_eq!(err.code(), "cwd_outside_app", "{cwd}: {err}");
        assert_eq!(
            (err.field.as_deref(), err.line),
            (Some("cwd"), Some(5)),
            "{err}"
        );
        assert!(
            err.path.ends_with(".agentproto/drivers/dd/DRIVER.md"),
            "{err}"
        );
    }
    // A symlink inside the app pointing outside it is followed, then refused.
    let app = cwd_app("escape");
    std::os::unix::fs::symlink(outside.path(), app.root().join("escape")).unwrap();
    let err = AppBundle::load(app.root()).unwrap_err();
    assert_eq!(err.code(), "cwd_outside_app", "{err}");
    // A symlink pointing inside is fine, and the cwd is the resolved directory.
    let app = cwd_app("link");
    std::os::unix::fs::symlink(app.root().join("inside/deeper"), app.root().join("link")).unwrap();
    let bundle = app.load();
    let driver = bundle.drivers().next().unwrap();
    assert_eq!(driver.cwd, bundle.root().join("inside/deeper"));
    // A cwd that does not exist cannot be checked, so it is refused too.
    let err = AppBundle::load(cwd_app("missing").root()).unwrap_err();
    assert_eq!(err.code(), "cwd_outside_app");
}

#[test]
fn drivers_must_implement_declared_tools_in_range() {
    let app = TempApp::new();
    app.tool("tt", "").driver(
        "dd",
        "bin: echo\nimplements:\n  - tool: other\n    version: ^1\n",
    );
    assert_eq!(
        AppBundle::load(app.root()).unwrap_err().code(),
        "unknown_tool"
    );
    let app = TempApp::new();
    app.tool("tt", "").driver(
        "dd",
        "bin: echo\nimplements:\n  - tool: tt\n    version: ^2\n",
    );
    let err = AppBundle::load(app.root()).unwrap_err();
    assert_eq!(err.code(), "unknown_tool");
    assert!(err.message.contains("outside the range ^2"), "{err}");
    let app = TempApp::new();
    app.write(
        ".agentproto/tools/tt/TOOL.md",
        "---\nid: uu\ndescription: d\nversion: 1.0.0\n---\n",
    );
    assert_eq!(
        AppBundle::load(app.root()).unwrap_err().code(),
        "duplicate_id"
    );
    let app = TempApp::new();
    app.tool("tt", "");
    let bundle = app.load();
    assert!(bundle.driver_binaries().is_empty());
    let err = bundle.prepare("tt", &json!({}), &ctx(&[])).unwrap_err();
    assert_eq!(err.code, ErrorCode::NoDriver);
}

// ------------------------------------------------------------------------------------------------------------
// redaction

const PLANTED: &str = "PLANTED-s3cret-4f2a";

/// A `tracing` writer into memory.
#[derive(Clone, Default)]
struct LogBuffer(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl LogBuffer {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().expect("log buffer")).into_owned()
    }
}

impl std::io::Write for LogBuffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("log buffer").extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogBuffer {
    type Writer = LogBuffer;
    fn make_writer(&'a self) -> LogBuffer {
        self.clone()
    }
}

/// Every failure path, and a success, with the secret planted where it could leak: argv, stderr, stdout, input.
#[tokio::test]
async fn a_planted_secret_never_appears_in_any_output() {
    // Every log line of this (current-thread) test, at debug level, is captured and grepped too.
    let logs = LogBuffer::default();
    let _subscriber = tracing::subscriber::set_default(
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_writer(logs.clone())
            .with_ansi(false)
            .finish(),
    );
    let app = TempApp::new();
    let pids = app.root().join("pids");
    let secret_driver = |tool: &str, bin: &str, format: &str| {
        format!(
            "bin: {bin}\nsandbox:\n  env:\n    pass: [PATH, TOKEN]\noutput:\n  exit_codes: {{7: rate_limited}}\n\
implements:\n  - tool: {tool}\n    version: ^1\n    output_format: {format}\n    argv: [\"--token=${{secrets.TOKEN}}\", \"${{secrets.TOKEN}}\", \"${{input.mode}}\"]\n\
auth:\n  state:\n    env: [TOKEN]\n"
        )
    };
    app.script(
        "leak",
        &format!(
            "case \"$3\" in\n\
  stderr) printf 'failed for %s and %s\\n' \"$1\" \"$TOKEN\" >&2; exit 1 ;;\n\
  auth) printf 'bad token %s\\n' \"$2\" >&2; exit 4 ;;\n\
  rate) printf '%s' \"$2\" >&2; exit 7 ;;\n\
  json) printf '{{\"token\":\"%s\"}}\\n' \"$2\" ;;\n\
  notjson) printf 'token %s\\n' \"$2\" ;;\n\
  text) printf 'token %s\\n' \"$2\"; printf 'warn %s\\n' \"$2\" >&2 ;;\n\
  hang) sleep 300 & printf '%s\\n' $! > '{}'; wait ;;\n\
  *) exit 3 ;;\n\
esac\n",
            pids.display()
        ),
    );
    app.tool("text", "inputs:\n  type: object\n  properties:\n    mode: {enum: [stderr, auth, rate, text, notjson, hang, x]}\n")
        .driver("d-text", &secret_driver("text", "./bin/leak", "text"));
    // `hang` must hit the timeout (a lower bound); `json`/`notjson` must finish inside it even on a loaded machine.
    app.tool("json", "timeout_ms: 5000\n")
        .driver("d-json", &secret_driver("json", "./bin/leak", "json"));
    app.tool("gone", "")
        .driver("d-gone", &secret_driver("gone", "./bin/not-there", "text"));
    app.tool("needs", "").driver(
        "d-needs",
        "bin: echo\nimplements:\n  - tool: needs\n    version: ^1\n    argv: [\"${secrets.TOKEN}\", \"${secrets.OTHER}\"]\nauth:\n  state:\n    env: [TOKEN, OTHER]\n",
    );
    let bundle = app.load();
    let context = ctx(&[("TOKEN", PLANTED)]);
    let mut seen = Vec::new();
    let mut record = |what: &str, result: &Result<ToolOutput, ToolError>| match result {
        Ok(out) => seen.push(format!("{what}: ok {out:?} {}", out.output.to_value())),
        Err(err) => seen.push(format!("{what}: {err} | {err:?}")),
    };
    for mode in ["stderr", "auth", "rate", "text", "notjson", "x"] {
        let result = call(&bundle, "text", json!({"mode": mode}), &context).await;
        record(mode, &result);
    }
    let result = call(&bundle, "text", json!({"mode": PLANTED}), &context).await;
    assert_eq!(
        result.as_ref().map_err(|e| e.code).unwrap_err(),
        ErrorCode::InputInvalid
    );
    record("input_invalid", &result);
    for mode in ["json", "notjson", "hang"] {
        let result = call(&bundle, "json", json!({"mode": mode}), &context).await;
        record(mode, &result);
    }
    record(
        "spawn_failed",
        &call(&bundle, "gone", json!({"mode": "x"}), &context).await,
    );
    record(
        "missing_secret",
        &call(&bundle, "needs", json!({}), &context).await,
    );
    // Cancellation, with the secret in argv.
    let cancelled = ctx(&[("TOKEN", PLANTED)]);
    cancelled.cancel.cancel();
    record(
        "cancelled",
        &call(&bundle, "text", json!({"mode": "hang"}), &cancelled).await,
    );
    // The prepared invocation's Debug and echoed argv.
    let invocation = bundle
        .prepare("text", &json!({"mode": "text"}), &context)
        .unwrap();
    seen.push(format!("{invocation:?} {:?}", invocation.redacted_argv()));
    seen.push(format!("{context:?} {bundle:?}"));
    let log_text = logs.text();
    assert!(log_text.contains("tool call failed"), "{log_text}");
    assert!(
        log_text.contains(r#"argv=["***", "***", "stderr"]"#),
        "{log_text}"
    );
    seen.push(log_text);
    let all = seen.join("\n");
    assert!(!all.contains(PLANTED), "the secret leaked:\n{all}");
    // Every path ran and produced what it should (so the grep above saw real output).
    let codes = [
        "stderr: upstream_error: failed for --token=*** and ***",
        "auth: auth_required: bad token ***",
        "rate: rate_limited: ***",
        "notjson: ok",
        "x: upstream_error: exit code 3",
        "json: ok",
        "notjson: output_parse_failed",
        "hang: timeout",
        "spawn_failed: spawn_failed",
        "missing_secret: missing_secret",
        "cancelled: cancelled",
        "input_invalid: input_invalid: input /mode: \"***\"",
    ];
    for code in codes {
        assert!(all.contains(code), "missing {code:?} in:\n{all}");
    }
    assert!(all.contains(r#""token":"***""#), "{all}");
    assert!(all.contains("argv: [\"***\", \"***\", \"text\"]"), "{all}");
}

#[test]
fn tool_errors_report_codes_as_documented() {
    let codes: BTreeMap<&str, bool> = ErrorCode::ALL
        .iter()
        .map(|c| (c.as_str(), c.retryable()))
        .collect();
    assert_eq!(codes.get("timeout"), Some(&true));
    assert_eq!(codes.get("auth_required"), Some(&false));
}
