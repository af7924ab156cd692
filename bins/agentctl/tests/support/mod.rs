//! Test harness: runs the real `agentctl` binary on 127.0.0.1 port 0 and talks to it over real HTTP and WebSocket.

#![allow(dead_code, reason = "each test binary uses a different subset")]

use std::path::{Path, PathBuf};
use std::time::Duration;

use agentwire_process::{Child, Command, ExitStatus, StdoutItem, StopOutcome, StopPlan};
use futures_util::StreamExt;
use serde_json::Value;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;

/// Generous bound for any single wait in a test.
pub const WAIT: Duration = Duration::from_secs(30);

pub type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// The command line running the fixture agent `acp-fixture` in `mode`.
pub fn acp_fixture(mode: &str) -> String {
    let path = agentwire_testkit::bin_path("acp-fixture");
    format!("{} --mode {mode}", quote(&path))
}

/// A shell-quoted path.
pub fn quote(path: &Path) -> String {
    shlex::try_quote(path.to_str().expect("utf-8 path"))
        .expect("quotable")
        .into_owned()
}

/// A running agentctl.
pub struct Agentctl {
    pub child: Child,
    pub base: String,
    pub addr: String,
    pub token: Option<String>,
    pub workdir: tempfile::TempDir,
    pub http: reqwest::Client,
}

/// How to start agentctl.
#[derive(Default)]
pub struct Options {
    pub agent_command: String,
    pub env: Vec<(String, String)>,
    pub token: Option<String>,
}

impl Options {
    pub fn agent(command: impl Into<String>) -> Self {
        Self {
            agent_command: command.into(),
            ..Self::default()
        }
    }

    pub fn env(mut self, key: &str, value: impl Into<String>) -> Self {
        self.env.push((key.to_owned(), value.into()));
        self
    }

    pub fn token(mut self, token: &str) -> Self {
        self.token = Some(token.to_owned());
        self
    }
}

impl Agentctl {
    /// Starts agentctl running the fixture agent `acp-fixture --mode MODE`.
    pub async fn acp(mode: &str) -> Self {
        Self::start(Options::agent(acp_fixture(mode))).await
    }

    /// Starts agentctl with `options` and waits for its listening line.
    pub async fn start(options: Options) -> Self {
        let workdir = tempfile::tempdir().expect("temp workdir");
        let mut command = Command::new(env!("CARGO_BIN_EXE_agentctl"));
        command
            .inherit_os_env()
            .env("AGENTCTL_PORT", "0")
            .env("AGENTCTL_LOG_LEVEL", "debug")
            .env("AGENTCTL_AGENT_COMMAND", &options.agent_command)
            .env("AGENTCTL_WORKDIR", workdir.path());
        for (key, value) in &options.env {
            command.env(key, value);
        }
        if let Some(token) = &options.token {
            command.env("AGENTCTL_TOKEN", token);
        }
        let mut child = command.spawn().expect("spawn agentctl");
        let mut stdout = child.take_stdout().expect("stdout");
        let mut seen = Vec::new();
        let addr = tokio::time::timeout(WAIT, async {
            loop {
                match stdout.next().await {
                    Some(StdoutItem::Bytes(bytes)) => seen.extend_from_slice(&bytes),
                    Some(_) => {}
                    None => panic!(
                        "agentctl exited before listening: {}",
                        child.stderr_tail().tail_lossy()
                    ),
                }
                let text = String::from_utf8_lossy(&seen);
                if let Some((line, _rest)) = text.split_once('\n')
                    && let Some(addr) = line.strip_prefix("agentctl listening on ")
                {
                    return addr.trim().to_owned();
                }
            }
        })
        .await
        .expect("agentctl prints its listening line");
        // Keep draining stdout so agentctl never blocks on it.
        tokio::spawn(async move { while stdout.next().await.is_some() {} });
        Self {
            child,
            base: format!("http://{addr}"),
            addr,
            token: options.token,
            workdir,
            http: reqwest::Client::new(),
        }
    }

    /// The canonical workdir.
    pub fn workdir(&self) -> PathBuf {
        self.workdir
            .path()
            .canonicalize()
            .expect("canonical workdir")
    }

    fn authorize(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    }

    /// `GET path` → (status, JSON body).
    pub async fn get(&self, path: &str) -> (u16, Value) {
        let request = self.authorize(self.http.get(format!("{}{path}", self.base)));
        respond(request).await
    }

    /// `POST path` with a JSON body → (status, JSON body).
    pub async fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        let request = self
            .authorize(self.http.post(format!("{}{path}", self.base)))
            .json(body);
        respond(request).await
    }

    /// `POST path` with raw bytes, declared `application/json`.
    pub async fn post_raw(&self, path: &str, body: impl Into<reqwest::Body>) -> (u16, Value) {
        let request = self
            .authorize(self.http.post(format!("{}{path}", self.base)))
            .header("content-type", "application/json")
            .body(body);
        respond(request).await
    }

    /// `POST path` with raw bytes and extra headers (no content type unless given).
    pub async fn post_with(
        &self,
        path: &str,
        headers: &[(&str, &str)],
        body: impl Into<reqwest::Body>,
    ) -> (u16, Value) {
        let mut request = self
            .authorize(self.http.post(format!("{}{path}", self.base)))
            .body(body);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        respond(request).await
    }

    /// `GET path` with extra headers.
    pub async fn get_with(&self, path: &str, headers: &[(&str, &str)]) -> (u16, Value) {
        let mut request = self.authorize(self.http.get(format!("{}{path}", self.base)));
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        respond(request).await
    }

    /// Sends `bytes` on a new raw TCP connection and reads until the server closes it (bounded by [`WAIT`]).
    pub async fn raw_exchange(&self, bytes: &[u8]) -> String {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let mut tcp = tokio::net::TcpStream::connect(&self.addr)
            .await
            .expect("connect");
        tcp.write_all(bytes).await.expect("write");
        let mut answer = Vec::new();
        tokio::time::timeout(WAIT, tcp.read_to_end(&mut answer))
            .await
            .expect("the server closes the connection in time")
            .expect("read");
        String::from_utf8_lossy(&answer).into_owned()
    }

    /// `POST /api/v1/start`, expecting 200.
    pub async fn start_agent(&self) -> Value {
        let (status, body) = self.post("/api/v1/start", &Value::Null).await;
        assert_eq!(status, 200, "{body}");
        body
    }

    /// `POST /api/v1/acp/call` → (status, body).
    pub async fn call(&self, method: &str, params: Value) -> (u16, Value) {
        self.post(
            "/api/v1/acp/call",
            &serde_json::json!({"method": method, "params": params}),
        )
        .await
    }

    /// A call that must succeed with a `result`.
    pub async fn call_ok(&self, method: &str, params: Value) -> Value {
        let (status, body) = self.call(method, params).await;
        assert_eq!(status, 200, "{method}: {body}");
        body.get("result")
            .cloned()
            .unwrap_or_else(|| panic!("{method}: no result in {body}"))
    }

    /// `initialize` (with fs capability) + `session/new`; returns the session id.
    pub async fn open_session(&self) -> String {
        self.call_ok(
            "initialize",
            serde_json::json!({
                "protocolVersion": 1,
                "clientCapabilities": {"fs": {"readTextFile": true, "writeTextFile": true}},
            }),
        )
        .await;
        let session = self
            .call_ok(
                "session/new",
                serde_json::json!({"cwd": self.workdir(), "mcpServers": []}),
            )
            .await;
        session["sessionId"].as_str().expect("sessionId").to_owned()
    }

    /// Opens a WebSocket on `path`.
    pub async fn ws(&self, path: &str) -> Ws {
        let mut request = format!("ws://{}{path}", self.addr)
            .into_client_request()
            .expect("request");
        if let Some(token) = &self.token {
            request.headers_mut().insert(
                "authorization",
                format!("Bearer {token}").parse().expect("header"),
            );
        }
        let config = WebSocketConfig::default()
            .max_message_size(Some(64 << 20))
            .max_frame_size(Some(64 << 20));
        let (ws, _) = tokio::time::timeout(
            WAIT,
            tokio_tungstenite::connect_async_with_config(request, Some(config), true),
        )
        .await
        .expect("websocket connect in time")
        .expect("websocket connect");
        ws
    }

    /// The `/api/v1/status` body.
    pub async fn status(&self) -> Value {
        let (status, body) = self.get("/api/v1/status").await;
        assert_eq!(status, 200, "{body}");
        body
    }

    /// Waits until `/api/v1/status` satisfies `done` (re-checked on every agentctl state change we can observe).
    pub async fn wait_status(&self, what: &str, done: impl Fn(&Value) -> bool) -> Value {
        tokio::time::timeout(WAIT, async {
            loop {
                let status = self.status().await;
                if done(&status) {
                    return status;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("status never reached: {what}"))
    }

    /// SIGTERM (after closing stdin) and wait: agentctl's own stop.
    pub async fn terminate(&self) -> StopOutcome {
        self.child
            .stop(StopPlan::new().stdin_grace(Duration::ZERO).term_grace(WAIT))
            .await
    }

    /// agentctl's exit status once it exited.
    pub async fn wait(&self) -> ExitStatus {
        tokio::time::timeout(WAIT, self.child.wait())
            .await
            .expect("agentctl exits")
    }
}

async fn respond(request: reqwest::RequestBuilder) -> (u16, Value) {
    let response = tokio::time::timeout(WAIT, request.send())
        .await
        .expect("http in time")
        .expect("http");
    let status = response.status().as_u16();
    let bytes = response.bytes().await.expect("body");
    let body = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes)
            .unwrap_or_else(|e| panic!("non-json body ({e}): {}", String::from_utf8_lossy(&bytes)))
    };
    (status, body)
}

/// What a WebSocket delivered next.
#[derive(Debug)]
pub enum Frame {
    Text(String),
    Close(u16, String),
    End,
}

/// The next text or close frame (pings skipped).
pub async fn next_frame(ws: &mut Ws) -> Frame {
    tokio::time::timeout(WAIT, async {
        loop {
            match ws.next().await {
                Some(Ok(Message::Text(text))) => return Frame::Text(text.to_string()),
                Some(Ok(Message::Close(frame))) => {
                    // Polling once more sends our close reply, completing the closing handshake.
                    let _ = ws.next().await;
                    return frame.map_or(Frame::Close(1005, String::new()), |f| {
                        Frame::Close(f.code.into(), f.reason.to_string())
                    });
                }
                Some(Ok(_)) => {}
                Some(Err(_)) | None => return Frame::End,
            }
        }
    })
    .await
    .expect("a websocket frame in time")
}

/// The next text frame as JSON.
pub async fn next_json(ws: &mut Ws) -> Value {
    match next_frame(ws).await {
        Frame::Text(text) => serde_json::from_str(&text).expect("json frame"),
        other => panic!("expected a text frame, got {other:?}"),
    }
}

/// Reads JSON frames until one satisfies `want`; returns it.
pub async fn json_until(ws: &mut Ws, want: impl Fn(&Value) -> bool) -> Value {
    loop {
        let value = next_json(ws).await;
        if want(&value) {
            return value;
        }
    }
}

/// The text of an `agent_message_chunk` update, if `value` is one.
pub fn chunk_text(value: &Value) -> Option<&str> {
    (value["method"] == "session/update"
        && value["params"]["update"]["sessionUpdate"] == "agent_message_chunk")
        .then(|| value["params"]["update"]["content"]["text"].as_str())
        .flatten()
}

/// Closes a WebSocket politely.
pub async fn close(mut ws: Ws) {
    let _ = ws.close(None).await;
}
