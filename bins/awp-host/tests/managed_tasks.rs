//! Managed tasks end to end with the real binaries: `awp-host serve --tasks-listen 127.0.0.1:0` (the task API
//! and its workers), `awp-host chat` driving `awp-agent`, whose built-in provider calls `awp_run_managed_task`
//! for a `run-task:` prompt, and allow-listed programs (`/bin/echo`, `/bin/sh`) run by the worker.

mod support;

use std::net::SocketAddr;
use std::time::Duration;

use agentwire_jsonl::{Frame, Limits};
use agentwire_process::{Child, Command, StdoutItem, StopPlan};
use serde_json::{Value, json};
use support::{Host, RUN_TIMEOUT, collect, read_until};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const KEY: &str = "e2e-key-0123456789abcdef";

struct Serve {
    child: Child,
    addr: SocketAddr,
}

impl Serve {
    async fn start(host: &Host, allow: &[&str]) -> Serve {
        let mut args = Vec::new();
        for path in allow {
            args.extend(["--tasks-allow", path]);
        }
        Serve::start_with(host, &args).await
    }

    /// `serve --tasks-listen 127.0.0.1:0` with `extra` arguments.
    async fn start_with(host: &Host, extra: &[&str]) -> Serve {
        let mut args = vec!["serve", "--tasks-listen", "127.0.0.1:0"];
        args.extend_from_slice(extra);
        // Debug logging on, so that the check for the key in serve's output covers every log line.
        let mut child = host.spawn_with_env(
            &args,
            &[
                ("AWP_CONTROL_PLANE_API_KEY", KEY),
                ("AWP_HOST_LOG", "debug"),
            ],
        );
        let mut stdout = child.take_stdout().expect("stdout");
        // The local control plane's line comes first, then the task API's.
        let mut lines = read_until(&mut stdout, "tasks api listening on http://").await;
        while !lines
            .split("tasks api listening on http://")
            .nth(1)
            .is_some_and(|rest| rest.contains('\n'))
        {
            lines.push_str(&read_until(&mut stdout, "\n").await);
        }
        let line = lines
            .lines()
            .find(|l| l.contains("tasks api listening"))
            .unwrap_or_else(|| panic!("no task API line in {lines:?}"));
        let addr = line
            .trim()
            .strip_prefix("awp-host: tasks api listening on http://")
            .unwrap_or_else(|| panic!("unexpected line {line:?}"))
            .parse()
            .expect("socket address");
        Serve { child, addr }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// SIGTERM; returns the exit code. Checks that the key never appeared in serve's stderr.
    async fn stop(self) -> Option<i32> {
        let plan = StopPlan::new()
            .stdin_grace(Duration::ZERO)
            .term_grace(Duration::from_secs(30));
        let outcome = tokio::time::timeout(RUN_TIMEOUT, self.child.stop(plan))
            .await
            .expect("serve stops");
        let tail = self.child.stderr_tail();
        tail.finished().await;
        let stderr = tail.tail_lossy();
        assert!(!stderr.contains(KEY), "the key leaked: {stderr}");
        outcome.status.code
    }

    /// One raw HTTP/1.1 exchange with the key; (status, JSON body).
    async fn request(&self, method: &str, path: &str, extra: &str, body: &str) -> (u16, Value) {
        let mut stream = tokio::net::TcpStream::connect(self.addr)
            .await
            .expect("connect");
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {KEY}\r\nConnection: close\r\n{extra}Content-Length: {}\r\n\r\n{body}",
            self.addr,
            body.len()
        );
        stream.write_all(request.as_bytes()).await.expect("write");
        let mut response = String::new();
        stream.read_to_string(&mut response).await.expect("read");
        let status = response
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .expect("status");
        let body = response.split_once("\r\n\r\n").map_or("", |(_, b)| b);
        (status, serde_json::from_str(body).unwrap_or(Value::Null))
    }

    async fn task(&self, id: &str) -> Value {
        let (status, body) = self
            .request("GET", &format!("/v1/tasks/{id}"), "", "")
            .await;
        assert_eq!(status, 200, "{body}");
        body
    }
}

/// agents.toml with one `awp-agent` entry named `tasks` whose env carries the managed-task variables.
fn tasks_agent(host: &Host, env: &[(&str, &str)]) {
    let sessions = host.path("sessions");
    let mut entries = vec![format!(
        "AWP_AGENT_SESSION_DIR = {}",
        json!(sessions.display().to_string())
    )];
    entries.extend(env.iter().map(|(k, v)| format!("{k} = {}", json!(v))));
    host.agents_toml(&format!(
        "[[agents]]\nname = \"tasks\"\nprotocol = \"awp-jsonl\"\nexecutable = {}\nenv = {{ {} }}\n",
        json!(
            agentwire_testkit::bin_path("awp-agent")
                .display()
                .to_string()
        ),
        entries.join(", ")
    ));
}

fn managed_env(serve: &Serve) -> Vec<(&'static str, String)> {
    vec![
        ("AWP_AGENT_MANAGED_TASKS_OPT_IN", "1".to_owned()),
        ("AWP_CONTROL_PLANE_URL", serve.url()),
        ("AWP_CONTROL_PLANE_API_KEY", KEY.to_owned()),
    ]
}

fn refs<'a>(env: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    env.iter().map(|(k, v)| (*k, v.as_str())).collect()
}

/// The task id in the built-in provider's report "Managed task task_… <status>…".
fn task_id(text: &str) -> String {
    text.split_whitespace()
        .find(|w| w.starts_with("task_"))
        .unwrap_or_else(|| panic!("no task id in {text:?}"))
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_runs_a_managed_task_through_serve_and_its_output_reaches_the_answer() {
    let host = Host::new();
    let serve = Serve::start(&host, &["/bin/echo"]).await;
    let env = managed_env(&serve);
    tasks_agent(&host, &refs(&env));
    let out = host
        .run(&[
            "chat",
            "--agent",
            "tasks",
            "--json",
            r#"run-task: ["echo","hello-from-a-managed-task"]"#,
        ])
        .await;
    assert_eq!(out.code, 0, "{out:?}");
    assert!(
        !out.stdout.contains(KEY) && !out.stderr.contains(KEY),
        "the key leaked: {out:?}"
    );
    let record = out.json();
    let text = record["text"].as_str().expect("text");
    assert!(text.contains("succeeded, exit code 0"), "{text}");
    assert!(text.contains("hello-from-a-managed-task"), "{text}");
    // The control plane has the task, run once, with the output the answer quoted.
    let task = serve.task(&task_id(text)).await;
    assert_eq!(task["status"], "succeeded");
    assert_eq!(task["argv"], json!(["echo", "hello-from-a-managed-task"]));
    assert_eq!(task["stdout"], "hello-from-a-managed-task\n");
    // The thread records the tool use and its result.
    let thread = host
        .thread(record["thread_id"].as_str().expect("thread id"))
        .await;
    let tool_lines: Vec<&str> = thread["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter(|m| m["role"] == "tool")
        .filter_map(|m| m["content"].as_str())
        .collect();
    assert!(
        tool_lines
            .iter()
            .any(|l| l.contains("awp_run_managed_task")),
        "{tool_lines:?}"
    );

    // Off the allow-list: the API accepts the task, the worker refuses it, the answer says so.
    let out = host
        .run(&[
            "chat",
            "--agent",
            "tasks",
            "--json",
            r#"run-task: ["cat","/etc/hostname"]"#,
        ])
        .await;
    assert_eq!(out.code, 0, "{out:?}");
    let text = out.json()["text"].as_str().expect("text").to_owned();
    assert!(
        text.contains("failed, error executable_not_allowed"),
        "{text}"
    );
    let task = serve.task(&task_id(&text)).await;
    assert_eq!(
        (task["status"].as_str(), task["error"].as_str()),
        (Some("failed"), Some("executable_not_allowed"))
    );
    assert_eq!(serve.stop().await, Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_all_three_variables_the_agent_is_chat_only() {
    let host = Host::new();
    let serve = Serve::start(&host, &["/bin/echo"]).await;
    let mut env = managed_env(&serve);
    env.retain(|(k, _)| *k != "AWP_CONTROL_PLANE_API_KEY");
    tasks_agent(&host, &refs(&env));
    let out = host
        .run(&[
            "chat",
            "--agent",
            "tasks",
            "--json",
            r#"run-task: ["echo","x"]"#,
        ])
        .await;
    assert_eq!(out.code, 0, "{out:?}");
    let text = out.json()["text"].as_str().expect("text").to_owned();
    assert!(text.starts_with("You said: run-task:"), "{text}");
    assert_eq!(serve.stop().await, Some(0));
}

/// Runs one turn of `awp-agent --resume <id>` directly and returns the result text.
async fn agent_turn(env: &[(&str, &str)], resume: &str, prompt: &str) -> String {
    let mut command = Command::new(agentwire_testkit::bin_path("awp-agent"));
    command
        .args(["--resume", resume])
        .envs(env.iter().copied())
        .stdout_jsonl(Limits::default());
    let mut child = command.spawn().expect("spawn awp-agent");
    let mut stdout = child.take_stdout().expect("stdout");
    let line =
        json!({"type":"user","message":{"role":"user","content":[{"type":"text","text":prompt}]}});
    child
        .stdin()
        .write_line(line.to_string().as_bytes())
        .await
        .expect("write");
    let result = async {
        while let Some(item) = stdout.next().await {
            if let StdoutItem::Frame(Frame::Json(bytes)) = item {
                let event: Value = serde_json::from_slice(&bytes).expect("json");
                if event["type"] == "result" {
                    return event;
                }
            }
        }
        panic!("no result");
    };
    let event = tokio::time::timeout(RUN_TIMEOUT, result)
        .await
        .expect("result in time");
    child.stdin().close().await;
    assert_eq!(event["subtype"], "success", "{event}");
    event["result"].as_str().expect("result text").to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_drivers_of_the_app_are_on_the_allow_list_with_tasks_allow() {
    let host = Host::new();
    let app = concat!(env!("CARGO_MANIFEST_DIR"), "/../../fixtures/tool-app");
    // fixtures/tool-app declares drivers for `echo`, `printf` and `./bin/notes`; `/bin/sh` comes from --tasks-allow.
    let serve = Serve::start_with(&host, &["--app", app, "--tasks-allow", "/bin/sh"]).await;
    let mut env = managed_env(&serve);
    env.push((
        "AWP_AGENT_SESSION_DIR",
        host.path("sessions").display().to_string(),
    ));
    for (turn, argv, expect) in [
        ("a", json!(["echo", "from-a-driver"]), "from-a-driver"),
        (
            "b",
            json!(["printf", "%s-%s", "printf", "too"]),
            "printf-too",
        ),
        (
            "c",
            json!(["sh", "-c", "echo from-tasks-allow"]),
            "from-tasks-allow",
        ),
    ] {
        let text = agent_turn(&refs(&env), turn, &format!("run-task: {argv}")).await;
        assert!(text.contains("succeeded, exit code 0"), "{text}");
        assert!(text.contains(expect), "{text}");
    }
    // Neither a driver's binary nor listed: refused by the worker.
    let text = agent_turn(&refs(&env), "d", r#"run-task: ["cat","/etc/hostname"]"#).await;
    assert!(
        text.contains("failed, error executable_not_allowed"),
        "{text}"
    );
    assert_eq!(serve.stop().await, Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_submission_of_the_same_call_does_not_run_twice() {
    let host = Host::new();
    let serve = Serve::start(&host, &["/bin/sh"]).await;
    let marker = host.path("runs.txt");
    let prompt = format!(
        "run-task: {}",
        json!([
            "sh",
            "-c",
            format!("echo ran >> {}; echo done", marker.display())
        ])
    );
    // The same session and turn replayed (its history was lost, say): the same tool call, the same key.
    let mut first_text = None;
    for attempt in ["a", "b"] {
        let sessions = host.path(&format!("sessions-{attempt}"));
        let mut env = managed_env(&serve);
        env.push(("AWP_AGENT_SESSION_DIR", sessions.display().to_string()));
        let text = agent_turn(&refs(&env), "replayed-session", &prompt).await;
        assert!(text.contains("succeeded, exit code 0"), "{text}");
        match &first_text {
            None => first_text = Some(text),
            Some(first) => assert_eq!(task_id(first), task_id(&text), "the same task"),
        }
    }
    assert_eq!(std::fs::read_to_string(&marker).expect("marker"), "ran\n");
    // The next turn of that session asks again with the same words: a new turn, a new task.
    let mut env = managed_env(&serve);
    env.push((
        "AWP_AGENT_SESSION_DIR",
        host.path("sessions-b").display().to_string(),
    ));
    let text = agent_turn(&refs(&env), "replayed-session", &prompt).await;
    assert_ne!(
        task_id(&text),
        task_id(first_text.as_deref().expect("first")),
        "{text}"
    );
    assert_eq!(
        std::fs::read_to_string(&marker).expect("marker"),
        "ran\nran\n"
    );
    assert_eq!(serve.stop().await, Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_running_when_serve_stops_is_lost_after_the_restart_and_never_rerun() {
    let host = Host::new();
    let serve = Serve::start(&host, &["/bin/sh"]).await;
    let marker = host.path("starts.txt");
    let script = format!("echo started >> {}; exec sleep 300", marker.display());
    let body = json!({"argv": ["sh", "-c", script], "timeout_seconds": 600}).to_string();
    let (status, created) = serve
        .request(
            "POST",
            "/v1/tasks",
            "Content-Type: application/json\r\nIdempotency-Key: long-1\r\n",
            &body,
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_str().expect("id").to_owned();
    let started = async {
        while !std::fs::read_to_string(&marker).is_ok_and(|s| s == "started\n") {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(RUN_TIMEOUT, started)
        .await
        .expect("the task starts");
    assert_eq!(serve.task(&id).await["status"], "running");
    assert_eq!(serve.stop().await, Some(0));

    let serve = Serve::start(&host, &["/bin/sh"]).await;
    let task = serve.task(&id).await;
    assert_eq!(task["status"], "lost", "{task}");
    assert!(
        matches!(
            task["error"].as_str(),
            Some("host_stopped" | "host_interrupted")
        ),
        "{task}"
    );
    // The same key replays the lost task; nothing runs again.
    let (status, replay) = serve
        .request(
            "POST",
            "/v1/tasks",
            "Content-Type: application/json\r\nIdempotency-Key: long-1\r\n",
            &body,
        )
        .await;
    assert_eq!((status, replay["id"].as_str()), (200, Some(id.as_str())));
    assert_eq!(serve.stop().await, Some(0));
    assert_eq!(
        std::fs::read_to_string(&marker).expect("marker"),
        "started\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_refuses_to_start_without_a_key_off_loopback_or_twice_on_one_data_dir() {
    let host = Host::new();
    let help = host.run(&["serve", "--help"]).await;
    assert_eq!(help.code, 0, "{help:?}");
    for needle in [
        "--tasks-listen <ADDR>",
        "--tasks-allow <PATH>",
        "--approvals-socket <PATH>",
        "AWP_CONTROL_PLANE_API_KEY",
    ] {
        assert!(help.stdout.contains(needle), "{needle}: {}", help.stdout);
    }
    let out = host.run(&["serve", "--tasks-listen", "127.0.0.1:0"]).await;
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("(tasks_api_key_missing)"), "{out:?}");
    let mut child = host.spawn_with_env(
        &["serve", "--tasks-listen", "0.0.0.0:0"],
        &[("AWP_CONTROL_PLANE_API_KEY", KEY)],
    );
    let out = collect(&mut child).await;
    assert_eq!(out.code, 2, "{out:?}");
    assert!(
        out.stderr.contains("(tasks_listen_not_loopback)"),
        "{out:?}"
    );
    let mut child = host.spawn_with_env(
        &[
            "serve",
            "--tasks-listen",
            "127.0.0.1:0",
            "--tasks-allow",
            "/nonexistent/tool",
        ],
        &[("AWP_CONTROL_PLANE_API_KEY", KEY)],
    );
    let out = collect(&mut child).await;
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("(tasks_allow_invalid)"), "{out:?}");
    let serve = Serve::start(&host, &["/bin/echo"]).await;
    let mut child = host.spawn_with_env(
        &["serve", "--tasks-listen", "127.0.0.1:0"],
        &[("AWP_CONTROL_PLANE_API_KEY", KEY)],
    );
    let out = collect(&mut child).await;
    assert_eq!(out.code, 3, "{out:?}");
    assert!(out.stderr.contains("(tasks_busy)"), "{out:?}");
    assert_eq!(serve.stop().await, Some(0));
}
