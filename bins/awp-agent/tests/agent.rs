//! End-to-end tests of the `awp-agent` binary: a real child process over real pipes, and for the
//! OpenAI-compatible provider a real HTTP server on 127.0.0.1 (port 0) speaking SSE.

use std::path::Path;
use std::time::Duration;

use agentwire_jsonl::{Frame, Limits};
use agentwire_process::{Child, Command, Stdout, StdoutItem, StopPlan};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

/// Generous bound for anything a test waits on (never a sleep).
const WAIT: Duration = Duration::from_secs(30);

struct Agent {
    child: Child,
    stdout: Stdout,
}

fn user_line(text: &str) -> String {
    json!({"type":"user","message":{"role":"user","content":[{"type":"text","text":text}]}})
        .to_string()
}

impl Agent {
    fn spawn(args: &[&str], env: &[(&str, &str)]) -> Agent {
        let mut command = Command::new(agentwire_testkit::bin_path("awp-agent"));
        command
            .args(args)
            .envs(env.iter().copied())
            .stdout_jsonl(Limits::default());
        let mut child = command.spawn().expect("spawn awp-agent");
        let stdout = child.take_stdout().expect("stdout");
        Agent { child, stdout }
    }

    async fn send(&self, line: &str) {
        self.child
            .stdin()
            .write_line(line.as_bytes())
            .await
            .expect("write stdin");
    }

    /// The next stdout line as JSON, `None` at the end of stdout.
    async fn next(&mut self) -> Option<Value> {
        let item = tokio::time::timeout(WAIT, self.stdout.next())
            .await
            .expect("stdout item in time")?;
        match item {
            StdoutItem::Frame(Frame::Json(bytes)) => {
                Some(serde_json::from_slice(&bytes).expect("json"))
            }
            other => panic!("stdout is protocol-only, got {other:?}"),
        }
    }

    /// Lines up to and including the next `result`.
    async fn turn(&mut self, line: &str) -> Vec<Value> {
        self.send(line).await;
        let mut events = Vec::new();
        loop {
            let event = self.next().await.expect("stdout ended before a result");
            let done = event["type"] == "result";
            events.push(event);
            if done {
                return events;
            }
        }
    }

    async fn exit_code(mut self) -> Option<i32> {
        self.child.stdin().close().await;
        assert_eq!(self.next().await, None, "no output after the last turn");
        tokio::time::timeout(WAIT, self.child.wait())
            .await
            .expect("exit in time")
            .code
    }
}

fn session_env(dir: &Path) -> [(&'static str, String); 1] {
    [(
        "AWP_AGENT_SESSION_DIR",
        dir.join("sessions").display().to_string(),
    )]
}

fn env_refs<'a>(env: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    env.iter().map(|(k, v)| (*k, v.as_str())).collect()
}

/// Checks one successful turn: optional init, one text block whose deltas make the result text, one result.
fn check_turn(events: &[Value], expect_init: bool, expect_text: &str) -> Value {
    let mut rest = events;
    if expect_init {
        let (init, tail) = rest.split_first().expect("init");
        assert_eq!(
            (init["type"].as_str(), init["subtype"].as_str()),
            (Some("system"), Some("init")),
            "{init}"
        );
        rest = tail;
    }
    let (result, body) = rest.split_last().expect("result");
    assert_eq!(result["type"], "result");
    assert_eq!(result["subtype"], "success", "{result}");
    assert_eq!(result["is_error"], false);
    assert_eq!(
        body.first().map(|e| e["type"].clone()),
        Some(json!("content_block_start"))
    );
    assert_eq!(
        body.last().map(|e| e["type"].clone()),
        Some(json!("content_block_stop"))
    );
    let streamed: String = body[1..body.len() - 1]
        .iter()
        .map(|e| {
            assert_eq!(e["type"], "content_block_delta");
            e["delta"]["text"].as_str().expect("text delta").to_owned()
        })
        .collect();
    assert_eq!(streamed, expect_text);
    assert_eq!(result["result"], expect_text);
    result.clone()
}

#[tokio::test]
async fn no_output_without_input_and_exit_zero_on_stdin_eof() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let env = session_env(tmp.path());
    let agent = Agent::spawn(&[], &env_refs(&env));
    assert_eq!(agent.exit_code().await, Some(0));
}

#[tokio::test]
async fn init_after_first_input_then_one_result_per_turn() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let env = session_env(tmp.path());
    let mut agent = Agent::spawn(
        &[
            "--output-format",
            "stream-json",
            "--input-format",
            "stream-json",
            "--print",
            "--verbose",
            "--model",
            "m",
        ],
        &env_refs(&env),
    );
    let first = agent.turn(&user_line("hello")).await;
    assert_eq!(first[0]["model"], "builtin-demo");
    let session_id = first[0]["session_id"].as_str().expect("id").to_owned();
    assert!(
        session_id.starts_with("awp-") && session_id.len() == 36,
        "{session_id}"
    );
    let result = check_turn(&first, true, "You said: hello (turn 1 of this session)");
    assert_eq!(result["session_id"], session_id.as_str());
    assert_eq!(
        result["usage"],
        json!({"input_tokens": 1, "output_tokens": 8})
    );
    let second = agent.turn(&user_line("again")).await;
    check_turn(
        &second,
        false,
        "You said: again (turn 2 of this session; before that you said: hello)",
    );
    assert_eq!(agent.exit_code().await, Some(0));
}

#[tokio::test]
async fn resume_continues_the_stored_history_and_unknown_ids_start_empty() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let env = session_env(tmp.path());
    let mut agent = Agent::spawn(&[], &env_refs(&env));
    let events = agent.turn(&user_line("alpha")).await;
    let id = events[0]["session_id"].as_str().expect("id").to_owned();
    assert_eq!(agent.exit_code().await, Some(0));

    let mut resumed = Agent::spawn(&["--resume", &id], &env_refs(&env));
    let events = resumed.turn(&user_line("beta")).await;
    assert_eq!(events[0]["session_id"], id.as_str());
    check_turn(
        &events,
        true,
        "You said: beta (turn 2 of this session; before that you said: alpha)",
    );
    assert_eq!(resumed.exit_code().await, Some(0));

    let mut fresh = Agent::spawn(&["--resume=-new:id.1"], &env_refs(&env));
    let events = fresh.turn(&user_line("gamma")).await;
    assert_eq!(events[0]["session_id"], "-new:id.1");
    check_turn(&events, true, "You said: gamma (turn 1 of this session)");
    assert_eq!(fresh.exit_code().await, Some(0));
}

#[cfg(unix)]
#[tokio::test]
async fn session_files_are_private() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().expect("tempdir");
    let env = session_env(tmp.path());
    let mut agent = Agent::spawn(&["--resume", "private"], &env_refs(&env));
    agent.turn(&user_line("secret")).await;
    assert_eq!(agent.exit_code().await, Some(0));
    let dir = tmp.path().join("sessions");
    let mode = |p: &Path| std::fs::metadata(p).expect("metadata").permissions().mode() & 0o777;
    assert_eq!(mode(&dir), 0o700);
    let file = dir.join("private.json");
    assert_eq!(mode(&file), 0o600);
    let stored: Value = serde_json::from_slice(&std::fs::read(&file).expect("read")).expect("json");
    assert_eq!(
        stored["messages"][0],
        json!({"role":"user","content":"secret"})
    );
    assert_eq!(
        std::fs::read_dir(&dir).expect("dir").count(),
        1,
        "no temp files left"
    );
}

#[tokio::test]
async fn unknown_arguments_and_bad_ids_are_startup_errors() {
    for (args, code) in [
        (vec!["--frobnicate"], "unsupported_argument"),
        (vec!["a prompt"], "unsupported_argument"),
        (vec!["--model"], "missing_argument_value"),
        (vec!["--resume", "bad id"], "invalid_session_id"),
    ] {
        let mut agent = Agent::spawn(&args, &[]);
        let line = agent.next().await.expect("startup error line");
        assert_eq!(
            line,
            json!({"type":"result","subtype":"startup_error","is_error":true,"result":code}),
            "{args:?}"
        );
        assert_eq!(agent.exit_code().await, Some(1), "{args:?}");
    }
}

#[tokio::test]
async fn refused_input_lines_end_their_turn_with_a_stable_code() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let env = session_env(tmp.path());
    let mut agent = Agent::spawn(&[], &env_refs(&env));
    let document = json!({"type":"user","message":{"role":"user","content":[
        {"type":"document","source":{"type":"base64","media_type":"application/pdf","data":"JVBERi0="}}]}});
    // Refused lines come before the first valid one: no init yet, no session id.
    for (line, code) in [
        (document.to_string(), "unsupported_content_block"),
        ("not json at all".to_owned(), "invalid_input_line"),
        (
            r#"{"type":"control_request"}"#.to_owned(),
            "unsupported_input_type",
        ),
    ] {
        let events = agent.turn(&line).await;
        assert_eq!(
            events,
            vec![json!({"type":"result","subtype":"error","is_error":true,"result":code})]
        );
    }
    let events = agent.turn(&user_line("fine")).await;
    let id = events[0]["session_id"].clone();
    check_turn(&events, true, "You said: fine (turn 1 of this session)");
    let events = agent.turn(&document.to_string()).await;
    assert_eq!(
        events,
        vec![
            json!({"type":"result","subtype":"error","is_error":true,"session_id":id,"result":"unsupported_content_block"})
        ]
    );
    assert_eq!(agent.exit_code().await, Some(0));
}

#[tokio::test]
async fn shutdown_line_exits_zero() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let env = session_env(tmp.path());
    let mut agent = Agent::spawn(&[], &env_refs(&env));
    agent.send(r#"{"type":"shutdown"}"#).await;
    assert_eq!(agent.next().await, None);
    let status = tokio::time::timeout(WAIT, agent.child.wait())
        .await
        .expect("exit");
    assert_eq!(status.code, Some(0));
}

// ---------------------------------------------------------------------------------------------------------------
// OpenAI-compatible provider against a loopback HTTP server

/// One canned HTTP response.
struct Reply {
    status: u16,
    content_type: &'static str,
    body: String,
}

/// One request the server received: head (lowercased header names kept as sent) and body.
struct Received {
    head: String,
    body: Value,
}

/// Serves `replies` in order, one connection each, on 127.0.0.1:0; returns the base URL and the requests.
async fn provider_server(replies: Vec<Reply>) -> (String, mpsc::UnboundedReceiver<Received>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let address = listener.local_addr().expect("address");
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        for reply in replies {
            let (mut socket, _) = listener.accept().await.expect("accept");
            let mut buf = Vec::new();
            let head_end = loop {
                let mut chunk = [0u8; 4096];
                let n = socket.read(&mut chunk).await.expect("read");
                assert!(n > 0, "client closed before the request head");
                buf.extend_from_slice(&chunk[..n]);
                if let Some(pos) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                    break pos + 4;
                }
            };
            let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
            let length: usize = head
                .lines()
                .find_map(|l| {
                    let (name, value) = l.split_once(':')?;
                    name.eq_ignore_ascii_case("content-length")
                        .then(|| value.trim().parse().ok())?
                })
                .expect("content-length");
            while buf.len() < head_end + length {
                let mut chunk = [0u8; 4096];
                let n = socket.read(&mut chunk).await.expect("read body");
                assert!(n > 0, "client closed before the request body");
                buf.extend_from_slice(&chunk[..n]);
            }
            let body =
                serde_json::from_slice(&buf[head_end..head_end + length]).expect("json body");
            tx.send(Received { head, body }).expect("test alive");
            let response = format!(
                "HTTP/1.1 {} X\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{}",
                reply.status,
                reply.content_type,
                reply.body.len(),
                reply.body
            );
            socket
                .write_all(response.as_bytes())
                .await
                .expect("write response");
            socket.shutdown().await.expect("shutdown");
        }
    });
    (format!("http://{address}/v1"), rx)
}

fn sse(chunks: &[Value]) -> String {
    let mut body: String = chunks.iter().map(|c| format!("data: {c}\n\n")).collect();
    body.push_str("data: [DONE]\n\n");
    body
}

fn sse_reply(texts: &[&str], usage: (u64, u64)) -> Reply {
    let mut chunks: Vec<Value> = texts
        .iter()
        .map(|t| json!({"choices":[{"index":0,"delta":{"content":t},"finish_reason":null}]}))
        .collect();
    chunks.push(json!({"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}));
    chunks.push(json!({"choices":[],"usage":{"prompt_tokens":usage.0,"completion_tokens":usage.1,"total_tokens":usage.0 + usage.1}}));
    Reply {
        status: 200,
        content_type: "text/event-stream",
        body: sse(&chunks),
    }
}

fn provider_env(dir: &Path, base: &str) -> Vec<(&'static str, String)> {
    let mut env = session_env(dir).to_vec();
    env.push(("OPENAI_BASE_URL", base.to_owned()));
    env.push(("OPENAI_API_KEY", "sk-test-key".to_owned()));
    env
}

#[tokio::test]
async fn provider_text_is_streamed_with_usage_and_history_is_sent_on_resume() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (base, mut requests) = provider_server(vec![
        sse_reply(&["Hel", "lo", " there"], (7, 3)),
        sse_reply(&["Second"], (12, 1)),
    ])
    .await;
    let env = provider_env(tmp.path(), &base);
    let mut agent = Agent::spawn(&["--model", "gpt-test"], &env_refs(&env));
    let events = agent.turn(&user_line("hi")).await;
    assert_eq!(events[0]["model"], "gpt-test");
    let id = events[0]["session_id"].as_str().expect("id").to_owned();
    let result = check_turn(&events, true, "Hello there");
    assert_eq!(events.len(), 1 + 1 + 3 + 1 + 1, "one delta per SSE chunk");
    assert_eq!(
        result["usage"],
        json!({"input_tokens": 7, "output_tokens": 3})
    );
    let request = requests.recv().await.expect("request");
    assert!(
        request
            .head
            .starts_with("POST /v1/chat/completions HTTP/1.1\r\n"),
        "{}",
        request.head
    );
    assert!(
        request
            .head
            .to_ascii_lowercase()
            .contains("authorization: bearer sk-test-key\r\n")
    );
    assert_eq!(request.body["model"], "gpt-test");
    assert_eq!(request.body["stream"], true);
    assert_eq!(
        request.body["messages"],
        json!([{"role":"user","content":"hi"}])
    );
    assert_eq!(agent.exit_code().await, Some(0));

    let mut resumed = Agent::spawn(&["--model", "gpt-test", "--resume", &id], &env_refs(&env));
    let events = resumed.turn(&user_line("more")).await;
    check_turn(&events, true, "Second");
    let request = requests.recv().await.expect("request");
    assert_eq!(
        request.body["messages"],
        json!([
            {"role":"user","content":"hi"},
            {"role":"assistant","content":"Hello there"},
            {"role":"user","content":"more"}
        ])
    );
    assert_eq!(resumed.exit_code().await, Some(0));
}

#[tokio::test]
async fn provider_failures_become_stable_codes_without_upstream_text() {
    const UPSTREAM: &str = "UPSTREAM-SECRET-DETAIL";
    let error_body = json!({"error":{"message":UPSTREAM}}).to_string();
    let cases = [
        (
            401,
            "application/json",
            error_body.clone(),
            "provider_auth_failed",
        ),
        (
            403,
            "application/json",
            error_body.clone(),
            "provider_auth_failed",
        ),
        (
            429,
            "application/json",
            error_body.clone(),
            "provider_rate_limited",
        ),
        (
            500,
            "application/json",
            error_body.clone(),
            "provider_http_error",
        ),
        (
            200,
            "text/event-stream",
            format!("data: {{{UPSTREAM}\n\n"),
            "provider_bad_response",
        ),
        (
            200,
            "text/event-stream",
            format!("data: {error_body}\n\n"),
            "provider_bad_response",
        ),
        (
            200,
            "application/json",
            error_body.clone(),
            "provider_bad_response",
        ),
        (
            200,
            "text/event-stream",
            format!(
                "data: {}\n\n",
                json!({"choices":[{"index":0,"delta":{"content":"cut"}}]})
            ),
            "provider_bad_response",
        ),
    ];
    let replies = cases
        .iter()
        .map(|(status, content_type, body, _)| Reply {
            status: *status,
            content_type,
            body: body.clone(),
        })
        .collect();
    let tmp = tempfile::tempdir().expect("tempdir");
    let (base, _requests) = provider_server(replies).await;
    let env = provider_env(tmp.path(), &base);
    let mut agent = Agent::spawn(&["--model", "m"], &env_refs(&env));
    for (index, (status, _, _, code)) in cases.iter().enumerate() {
        let events = agent.turn(&user_line("hi")).await;
        let result = events.last().expect("result");
        assert_eq!(result["result"], *code, "case {index} (http {status})");
        assert_eq!(
            (result["subtype"].as_str(), result["is_error"].as_bool()),
            (Some("error"), Some(true))
        );
        for event in &events {
            assert!(
                !event.to_string().contains(UPSTREAM),
                "upstream text leaked: {event}"
            );
        }
    }
    assert_eq!(agent.exit_code().await, Some(0));
}

#[tokio::test]
async fn unreachable_provider_and_insecure_urls() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let address = listener.local_addr().expect("address");
    drop(listener);
    let tmp = tempfile::tempdir().expect("tempdir");
    let env = provider_env(tmp.path(), &format!("http://{address}/v1"));
    let mut agent = Agent::spawn(&["--model", "m"], &env_refs(&env));
    let events = agent.turn(&user_line("hi")).await;
    assert_eq!(
        events.last().expect("result")["result"],
        "provider_unreachable"
    );
    assert_eq!(agent.exit_code().await, Some(0));

    for (url, code) in [
        ("http://198.51.100.7/v1", "provider_url_rejected"),
        ("file:///etc/passwd", "provider_url_invalid"),
    ] {
        let env = provider_env(tmp.path(), url);
        let mut agent = Agent::spawn(&["--model", "m"], &env_refs(&env));
        let line = agent.next().await.expect("startup error");
        assert_eq!(line["result"], code);
        assert_eq!(line["subtype"], "startup_error");
        assert_eq!(agent.exit_code().await, Some(1));
    }
}

#[tokio::test]
async fn stop_ladder_ends_an_idle_agent_at_stdin_eof() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let env = session_env(tmp.path());
    let mut agent = Agent::spawn(&[], &env_refs(&env));
    agent.turn(&user_line("x")).await;
    let outcome = agent.child.stop(StopPlan::default()).await;
    assert_eq!(outcome.ended_by.as_str(), "stdin_closed");
    assert_eq!(outcome.status.code, Some(0));
}

#[tokio::test]
async fn input_line_limit_at_the_limit_and_one_past() {
    // The agent's documented input line limit (32 MiB: a 10 MiB attachment is about 13.4 MiB in base64).
    const LIMIT: usize = 32 * 1024 * 1024;
    let tmp = tempfile::tempdir().expect("tempdir");
    let env = session_env(tmp.path());
    let mut agent = Agent::spawn(&[], &env_refs(&env));
    // A document block padded so that the line is exactly LIMIT bytes: parsed (and refused for its block).
    let line_of = |len: usize| {
        let skeleton = |pad: &str| {
            json!({"type":"user","message":{"role":"user","content":[{"type":"document","source":{"type":"base64","media_type":"application/pdf","data":pad}}]}})
                .to_string()
        };
        let overhead = skeleton("").len();
        skeleton(&"A".repeat(len - overhead))
    };
    let at_limit = line_of(LIMIT);
    assert_eq!(at_limit.len(), LIMIT);
    let events = agent.turn(&at_limit).await;
    assert_eq!(
        events.last().expect("result")["result"],
        "unsupported_content_block"
    );
    let events = agent.turn(&line_of(LIMIT + 1)).await;
    assert_eq!(
        events.last().expect("result")["result"],
        "input_line_too_long"
    );
    // The agent keeps going after an over-long line.
    let events = agent.turn(&user_line("still here")).await;
    check_turn(
        &events,
        true,
        "You said: still here (turn 1 of this session)",
    );
    assert_eq!(agent.exit_code().await, Some(0));
}

#[tokio::test]
async fn images_reach_the_provider_for_their_turn_and_history_keeps_a_placeholder() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (base, mut requests) = provider_server(vec![
        sse_reply(&["A cat."], (20, 2)),
        sse_reply(&["Yes."], (9, 1)),
    ])
    .await;
    let env = provider_env(tmp.path(), &base);
    let mut agent = Agent::spawn(&["--model", "vision", "--resume", "img"], &env_refs(&env));
    let line = json!({"type":"user","message":{"role":"user","content":[
        {"type":"text","text":"What is this?"},
        {"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBORw0KGgo="}}]}});
    check_turn(&agent.turn(&line.to_string()).await, true, "A cat.");
    let request = requests.recv().await.expect("request");
    assert_eq!(
        request.body["messages"],
        json!([{"role":"user","content":[
            {"type":"text","text":"What is this?"},
            {"type":"image_url","image_url":{"url":"data:image/png;base64,iVBORw0KGgo="}}]}])
    );
    check_turn(&agent.turn(&user_line("Sure?")).await, false, "Yes.");
    let request = requests.recv().await.expect("request");
    assert_eq!(
        request.body["messages"],
        json!([
            {"role":"user","content":"What is this?\n[image: image/png]"},
            {"role":"assistant","content":"A cat."},
            {"role":"user","content":"Sure?"}
        ])
    );
    assert_eq!(agent.exit_code().await, Some(0));
}

// ---------------------------------------------------------------------------------------------------------------
// Managed tasks against a scripted control plane (the real one is exercised by awp-host's managed_tasks tests).

const CONTROL_PLANE_KEY: &str = "cp-key-0123456789abcdef";

/// One request the control plane received: the head and the raw body.
struct CpRequest {
    head: String,
    body: String,
}

/// Answers each connection with the next reply (the last one repeats); with `close_after`, stops listening after
/// that many connections (later connections are refused).
async fn control_plane(
    replies: Vec<(u16, Value)>,
    close_after: Option<usize>,
) -> (String, mpsc::UnboundedReceiver<CpRequest>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let address = listener.local_addr().expect("address");
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut served = 0usize;
        while close_after.is_none_or(|n| served < n) {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            let (status, body) = replies
                .get(served)
                .or(replies.last())
                .cloned()
                .expect("a reply");
            served += 1;
            let mut buf = Vec::new();
            let head_end = loop {
                let mut chunk = [0u8; 4096];
                let n = socket.read(&mut chunk).await.expect("read");
                if n == 0 {
                    break None;
                }
                buf.extend_from_slice(&chunk[..n]);
                if let Some(pos) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                    break Some(pos + 4);
                }
            };
            let Some(head_end) = head_end else { continue };
            let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
            let length: usize = head
                .lines()
                .find_map(|l| {
                    let (name, value) = l.split_once(':')?;
                    name.eq_ignore_ascii_case("content-length")
                        .then(|| value.trim().parse().ok())?
                })
                .unwrap_or(0);
            while buf.len() < head_end + length {
                let mut chunk = [0u8; 4096];
                let n = socket.read(&mut chunk).await.expect("read body");
                assert!(n > 0, "client closed before the request body");
                buf.extend_from_slice(&chunk[..n]);
            }
            let body_text = String::from_utf8_lossy(&buf[head_end..head_end + length]).into_owned();
            let _ = tx.send(CpRequest {
                head,
                body: body_text,
            });
            let text = body.to_string();
            let response = format!(
                "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
                text.len()
            );
            let _ = socket.write_all(response.as_bytes()).await;
            let _ = socket.shutdown().await;
        }
    });
    (format!("http://{address}"), rx)
}

fn task_json(status: &str) -> Value {
    json!({"id":"task_00000000000000aa","status":status,"argv":["echo","hi"],"exit_code":null,"signal":null,
           "stdout":"","stderr":"","stdout_truncated":false,"stderr_truncated":false,"error":null})
}

fn managed_env(dir: &Path, control_plane: &str) -> Vec<(&'static str, String)> {
    let mut env = session_env(dir).to_vec();
    env.push(("AWP_AGENT_MANAGED_TASKS_OPT_IN", "1".to_owned()));
    env.push(("AWP_CONTROL_PLANE_URL", control_plane.to_owned()));
    env.push(("AWP_CONTROL_PLANE_API_KEY", CONTROL_PLANE_KEY.to_owned()));
    env
}

#[tokio::test]
async fn openai_tool_calls_run_a_managed_task_and_the_result_goes_back_to_the_provider() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut done = task_json("succeeded");
    done["exit_code"] = json!(0);
    done["stdout"] = json!("hi\n");
    let (cp, mut cp_requests) = control_plane(vec![(201, done)], None).await;
    let call = |delta: Value| json!({"choices":[{"index":0,"delta":{"tool_calls":[delta]}}]});
    let tool_reply = Reply {
        status: 200,
        content_type: "text/event-stream",
        body: sse(&[
            call(
                json!({"index":0,"id":"call_x","type":"function","function":{"name":"awp_run_managed_task","arguments":""}}),
            ),
            call(json!({"index":0,"function":{"arguments":"{\"argv\":[\"echo\","}})),
            call(json!({"index":0,"function":{"arguments":"\"hi\"]}"}})),
            json!({"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}),
            json!({"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}),
        ]),
    };
    let (base, mut requests) =
        provider_server(vec![tool_reply, sse_reply(&["It printed hi."], (5, 1))]).await;
    let mut env = managed_env(tmp.path(), &cp);
    env.extend(provider_env(tmp.path(), &base).into_iter().skip(1));
    let mut agent = Agent::spawn(&["--model", "gpt-test"], &env_refs(&env));
    let events = agent.turn(&user_line("run echo hi")).await;
    assert_eq!(events[0]["tools"], json!(["awp_run_managed_task"]));
    assert_eq!(events[1]["type"], "assistant");
    assert_eq!(
        events[1]["message"]["content"][0],
        json!({"type":"tool_use","id":"call_x","name":"awp_run_managed_task","input":{"argv":["echo","hi"]}})
    );
    assert_eq!(events[2]["type"], "user");
    let tool_result = &events[2]["message"]["content"][0];
    assert_eq!(tool_result["tool_use_id"], "call_x");
    assert_eq!(tool_result["is_error"], false);
    let result = check_turn(&events[3..], false, "It printed hi.");
    assert_eq!(
        result["usage"],
        json!({"input_tokens": 8, "output_tokens": 3})
    );
    assert_eq!(result["num_turns"], 2);

    let first = requests.recv().await.expect("first provider request");
    assert_eq!(first.body["tools"][0]["type"], "function");
    assert_eq!(
        first.body["tools"][0]["function"]["name"],
        "awp_run_managed_task"
    );
    let second = requests.recv().await.expect("second provider request");
    let messages = second.body["messages"].as_array().expect("messages");
    let n = messages.len();
    assert_eq!(messages[n - 2]["role"], "assistant");
    assert_eq!(messages[n - 2]["tool_calls"][0]["id"], "call_x");
    assert_eq!(
        messages[n - 2]["tool_calls"][0]["function"]["arguments"],
        r#"{"argv":["echo","hi"]}"#
    );
    assert_eq!(messages[n - 1]["role"], "tool");
    assert_eq!(messages[n - 1]["tool_call_id"], "call_x");
    let content: Value =
        serde_json::from_str(messages[n - 1]["content"].as_str().expect("content")).expect("json");
    assert_eq!(content["status"], "succeeded");
    assert_eq!(content["stdout"], "hi\n");
    assert_eq!(content["task_id"], "task_00000000000000aa");

    let submitted = cp_requests.recv().await.expect("submission");
    let head = submitted.head.to_ascii_lowercase();
    assert!(head.starts_with("post /v1/tasks http/1.1\r\n"), "{head}");
    assert!(head.contains(&format!(
        "authorization: bearer {}\r\n",
        CONTROL_PLANE_KEY.to_ascii_lowercase()
    )));
    assert!(head.contains("idempotency-key: awp-agent:"), "{head}");
    assert_eq!(
        serde_json::from_str::<Value>(&submitted.body).expect("json"),
        json!({"argv":["echo","hi"],"timeout_seconds":60})
    );
    assert_eq!(agent.exit_code().await, Some(0));
}

#[tokio::test]
async fn a_wait_that_runs_out_says_the_task_may_still_be_running() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (cp, _requests) = control_plane(vec![(201, task_json("running"))], None).await;
    let env = managed_env(tmp.path(), &cp);
    let mut agent = Agent::spawn(&[], &env_refs(&env));
    let events = agent
        .turn(&user_line(
            r#"run-task: {"argv":["sleep","600"],"timeout_seconds":1}"#,
        ))
        .await;
    let result = events.last().expect("result");
    assert_eq!(result["subtype"], "success", "{result}");
    let text = result["result"].as_str().expect("text");
    assert!(
        text.contains("task_00000000000000aa wait_timed_out"),
        "{text}"
    );
    assert!(text.contains("may still be running"), "{text}");
    assert!(text.contains("not cancelled"), "{text}");
    assert_eq!(agent.exit_code().await, Some(0));
}

#[tokio::test]
async fn a_lost_control_plane_after_submission_leaves_the_outcome_unknown() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (cp, _requests) = control_plane(vec![(201, task_json("queued"))], Some(1)).await;
    let env = managed_env(tmp.path(), &cp);
    let mut agent = Agent::spawn(&[], &env_refs(&env));
    let events = agent.turn(&user_line(r#"run-task: ["echo","hi"]"#)).await;
    let text = events.last().expect("result")["result"]
        .as_str()
        .expect("text")
        .to_owned();
    assert!(text.contains("outcome_unknown"), "{text}");
    assert!(text.contains("its outcome is unknown"), "{text}");
    assert_eq!(agent.exit_code().await, Some(0));

    // Refused before anything was submitted: the control plane's stable code reaches the model.
    let (cp, _requests) = control_plane(
        vec![(
            409,
            json!({"error":{"code":"idempotency_key_conflict","message":"x"}}),
        )],
        None,
    )
    .await;
    let env = managed_env(tmp.path(), &cp);
    let mut agent = Agent::spawn(&[], &env_refs(&env));
    let events = agent.turn(&user_line(r#"run-task: ["echo","hi"]"#)).await;
    let text = events.last().expect("result")["result"]
        .as_str()
        .expect("text");
    assert_eq!(
        text,
        "Managed task not_submitted, error idempotency_key_conflict."
    );
    assert_eq!(agent.exit_code().await, Some(0));
}

#[tokio::test]
async fn insecure_control_plane_urls_are_startup_errors() {
    let tmp = tempfile::tempdir().expect("tempdir");
    for (url, opt_in, code) in [
        (
            "http://198.51.100.7:8100",
            false,
            "control_plane_url_rejected",
        ),
        (
            "http://198.51.100.7:8100",
            true,
            "control_plane_url_rejected",
        ),
        (
            "https://cp.example.com",
            false,
            "control_plane_remote_not_allowed",
        ),
        (
            "http://127.0.0.1:8100/v1",
            false,
            "control_plane_url_invalid",
        ),
    ] {
        let mut env = managed_env(tmp.path(), url);
        if opt_in {
            env.push(("AWP_AGENT_REMOTE_API_OPT_IN", "1".to_owned()));
        }
        let mut agent = Agent::spawn(&[], &env_refs(&env));
        let line = agent.next().await.expect("startup error");
        assert_eq!(
            (line["subtype"].as_str(), line["result"].as_str()),
            (Some("startup_error"), Some(code)),
            "{url}"
        );
        assert_eq!(agent.exit_code().await, Some(1));
    }
}

/// An SSE reply with `n` complete calls of the managed-task tool.
fn tool_calls_reply(n: usize) -> Reply {
    let calls: Vec<Value> = (0..n)
        .map(|i| json!({"index":i,"id":format!("call_{i}"),"type":"function","function":{"name":"awp_run_managed_task","arguments":"{\"argv\":[\"true\"]}"}}))
        .collect();
    Reply {
        status: 200,
        content_type: "text/event-stream",
        body: sse(&[
            json!({"choices":[{"index":0,"delta":{"tool_calls":calls}}]}),
            json!({"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}),
        ]),
    }
}

#[tokio::test]
async fn tool_calls_per_turn_are_bounded_at_the_limit_and_one_past_it() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut done = task_json("succeeded");
    done["exit_code"] = json!(0);
    let (cp, mut cp_requests) = control_plane(vec![(201, done)], None).await;
    let (base, _requests) = provider_server(vec![
        tool_calls_reply(4),
        sse_reply(&["four ran"], (1, 1)),
        tool_calls_reply(5),
    ])
    .await;
    let mut env = managed_env(tmp.path(), &cp);
    env.extend(provider_env(tmp.path(), &base).into_iter().skip(1));
    let mut agent = Agent::spawn(&["--model", "m"], &env_refs(&env));
    let events = agent.turn(&user_line("run four")).await;
    let result = events.last().expect("result");
    assert_eq!(
        (result["subtype"].as_str(), result["result"].as_str()),
        (Some("success"), Some("four ran"))
    );
    for _ in 0..4 {
        cp_requests.recv().await.expect("a submission per call");
    }
    let events = agent.turn(&user_line("run five")).await;
    let result = events.last().expect("result");
    assert_eq!(result["result"], "managed_tool_call_limit", "{result}");
    assert!(
        cp_requests.try_recv().is_err(),
        "nothing is submitted past the limit"
    );
    assert_eq!(agent.exit_code().await, Some(0));
}

#[tokio::test]
async fn a_tool_call_without_managed_tasks_fails_the_turn() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (base, mut requests) = provider_server(vec![tool_calls_reply(1)]).await;
    let env = provider_env(tmp.path(), &base);
    let mut agent = Agent::spawn(&["--model", "m"], &env_refs(&env));
    let events = agent.turn(&user_line("hi")).await;
    assert_eq!(events[0]["tools"], json!([]), "chat-only");
    assert_eq!(
        events.last().expect("result")["result"],
        "provider_requested_unavailable_tool"
    );
    let request = requests.recv().await.expect("request");
    assert!(request.body.get("tools").is_none(), "no tools offered");
    assert_eq!(agent.exit_code().await, Some(0));
}

#[tokio::test]
async fn a_message_over_the_session_limit_fails_its_turn_and_is_not_stored() {
    // The documented per-session file limit (4 MiB). A new message must fit in a session file on its own:
    // the file `{"version":1,"session_id":<id>,"messages":[{"role":"user","content":<text>}],"turns":1}`.
    const LIMIT: usize = 4 * 1024 * 1024;
    let envelope = |id: &str| {
        format!(r#"{{"version":1,"session_id":"{id}","messages":[{{"role":"user","content":""}}],"turns":1}}"#)
            .len()
    };
    let tmp = tempfile::tempdir().expect("tempdir");
    let (base, mut requests) = provider_server(vec![
        sse_reply(&["ok"], (1, 1)),
        sse_reply(&["small"], (1, 1)),
    ])
    .await;
    let env = provider_env(tmp.path(), &base);

    // At the limit: sent whole to the provider.
    let mut agent = Agent::spawn(&["--model", "m", "--resume", "s-at"], &env_refs(&env));
    let text = "a".repeat(LIMIT - envelope("s-at"));
    let events = agent.turn(&user_line(&text)).await;
    check_turn(&events, true, "ok");
    let request = requests.recv().await.expect("request");
    assert_eq!(
        request.body["messages"],
        json!([{"role":"user","content":text}])
    );
    assert_eq!(agent.exit_code().await, Some(0));

    // One byte past: the turn fails with the sizes, the provider never sees it, nothing is stored.
    let mut agent = Agent::spawn(&["--model", "m", "--resume", "s-past"], &env_refs(&env));
    let text = "a".repeat(LIMIT - envelope("s-past") + 1);
    let events = agent.turn(&user_line(&text)).await;
    assert_eq!(events.len(), 2, "init and the result");
    let result = &events[1];
    assert_eq!(
        (&result["subtype"], &result["is_error"], &result["result"]),
        (&json!("error"), &json!(true), &json!("message_too_large")),
        "{result}"
    );
    assert_eq!(result["session_id"], "s-past");
    let reason = result["errors"][0].as_str().expect("a reason");
    assert!(
        reason.contains(&format!("{} bytes", LIMIT + 1))
            && reason.contains(&format!("{LIMIT} bytes")),
        "{reason}"
    );
    assert!(
        !tmp.path().join("sessions").join("s-past.json").exists(),
        "the refused message was stored"
    );
    // The next message is turn 1 of an empty history: the refused one is neither stored nor sent.
    let events = agent.turn(&user_line("small")).await;
    check_turn(&events, false, "small");
    let request = requests.recv().await.expect("request");
    assert_eq!(
        request.body["messages"],
        json!([{"role":"user","content":"small"}])
    );
    assert_eq!(agent.exit_code().await, Some(0));
}

#[tokio::test]
async fn the_demo_provider_refuses_a_message_over_the_session_limit() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let env = session_env(tmp.path());
    let mut agent = Agent::spawn(&[], &env_refs(&env));
    let events = agent
        .turn(&user_line(&"word ".repeat(2 * 1024 * 1024)))
        .await;
    let result = events.last().expect("result");
    assert_eq!(result["result"], "message_too_large", "{result}");
    let events = agent.turn(&user_line("hi")).await;
    check_turn(&events, false, "You said: hi (turn 1 of this session)");
    assert_eq!(agent.exit_code().await, Some(0));
}
