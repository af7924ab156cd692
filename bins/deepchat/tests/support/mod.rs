//! A real local-control server (agentwire-local-control's hyper server on a Unix socket in a temp dir) with a
//! scripted service, for driving the `deepchat` CLI end to end.

#![allow(dead_code)]
// Test harness code: a failed setup step should panic the test.
#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentwire_local_control::envelope::{
    Cursor, ErrorBody, ErrorCode, RequestEnvelope, UploadRequestEnvelope,
};
use agentwire_local_control::server::{
    AgentToken, AuthorizeTarget, Download, RequestContext, Route, Server, ServerConfig, Service,
    StreamSink, Transport, UploadedFile,
};
use serde_json::{Value, json};
use tokio::sync::Notify;

/// An agent token the test service accepts (43 base64url characters).
pub const AGENT_TOKEN: &str = "agentagentagentagentagentagentagentagent123";

/// One scripted stream record: event, data, record runId, record cursor.
#[derive(Debug, Clone)]
pub struct Record {
    pub event: String,
    pub data: Value,
    pub run_id: Option<String>,
    pub cursor: Option<String>,
}

/// What the service answers.
#[derive(Debug, Default)]
pub struct Script {
    /// Method → result (or error).
    pub results: HashMap<String, Result<Value, ErrorBody>>,
    /// Methods that never answer.
    pub hang: Vec<String>,
    /// Records of `events.subscribe`.
    pub records: Vec<Record>,
    /// Artifact bytes by id.
    pub artifacts: HashMap<String, Vec<u8>>,
}

#[derive(Debug, Default)]
pub struct State {
    /// Every dispatched call: method, params, whether an agent token was presented.
    pub calls: Mutex<Vec<(String, Value, bool)>>,
    /// Notified whenever a call starts.
    pub entered: Notify,
}

#[derive(Clone)]
pub struct TestService {
    script: Arc<Script>,
    state: Arc<State>,
}

impl TestService {
    fn record(&self, ctx: &RequestContext, request: &RequestEnvelope) {
        let agent = matches!(
            ctx.token,
            agentwire_local_control::server::PresentedToken::Agent(_)
        );
        self.state.calls.lock().unwrap().push((
            request.method.clone(),
            request.params.clone(),
            agent,
        ));
        self.state.entered.notify_one();
    }

    async fn answer(&self, method: &str) -> Result<Value, ErrorBody> {
        if self.script.hang.iter().any(|m| m == method) {
            std::future::pending::<()>().await;
        }
        self.script
            .results
            .get(method)
            .cloned()
            .unwrap_or_else(|| Err(ErrorBody::new(ErrorCode::NotFound, "no scripted result")))
    }
}

impl Service for TestService {
    type Grant = ();

    fn route(&self, method: &str) -> Option<Route> {
        let transport = if method == "events.subscribe" {
            Transport::Stream
        } else {
            Transport::Rpc
        };
        Some(Route::new(
            transport,
            8 * 1024 * 1024,
            Duration::from_secs(600),
        ))
    }

    fn authenticate_agent(&self, token: &AgentToken) -> Result<(), ErrorBody> {
        if token.expose() == AGENT_TOKEN {
            Ok(())
        } else {
            Err(ErrorBody::new(
                ErrorCode::AuthenticationFailed,
                "unknown token",
            ))
        }
    }

    async fn authorize(&self, _: &RequestContext, _: AuthorizeTarget<'_>) -> Result<(), ErrorBody> {
        Ok(())
    }

    async fn call(
        &self,
        ctx: &RequestContext,
        _: (),
        request: RequestEnvelope,
    ) -> Result<Value, ErrorBody> {
        self.record(ctx, &request);
        self.answer(&request.method).await
    }

    async fn stream(
        &self,
        ctx: &RequestContext,
        _: (),
        request: RequestEnvelope,
        mut sink: StreamSink,
    ) -> Result<Value, ErrorBody> {
        self.record(ctx, &request);
        for r in &self.script.records {
            let cursor = r.cursor.as_deref().and_then(Cursor::parse);
            sink.emit_with(&r.event, r.data.clone(), r.run_id.clone(), cursor)
                .await?;
        }
        self.answer(&request.method).await
    }

    async fn upload(
        &self,
        _: &RequestContext,
        _: (),
        _: UploadRequestEnvelope,
        _: UploadedFile,
    ) -> Result<Value, ErrorBody> {
        Err(ErrorBody::new(ErrorCode::NotFound, "no uploads"))
    }

    async fn download(
        &self,
        _: &RequestContext,
        _: (),
        artifact_id: String,
    ) -> Result<Download, ErrorBody> {
        let bytes = self
            .script
            .artifacts
            .get(&artifact_id)
            .cloned()
            .ok_or_else(|| ErrorBody::new(ErrorCode::NotFound, "no such artifact"))?;
        let sha = sha256_hex(&bytes);
        let size = bytes.len() as u64;
        Ok(Download::new(
            artifact_id,
            "text/plain",
            size,
            sha,
            "a.txt",
            Box::pin(std::io::Cursor::new(bytes)),
        ))
    }
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A running test host: its data dir (point `DEEPCHAT_E2E_USER_DATA_DIR` at it) and its call log.
pub struct Host {
    pub dir: tempfile::TempDir,
    pub data: PathBuf,
    pub state: Arc<State>,
    server: Option<Server>,
}

impl Host {
    pub async fn start(script: Script) -> Host {
        let dir = tempfile::Builder::new()
            .prefix("dc")
            .tempdir_in("/tmp")
            .expect("tempdir");
        let data = dir.path().join("d");
        let state = Arc::new(State::default());
        let service = TestService {
            script: Arc::new(script),
            state: Arc::clone(&state),
        };
        let server = Server::start(ServerConfig::new(&data, "9.8.7"), service)
            .await
            .expect("server starts");
        Host {
            dir,
            data,
            state,
            server: Some(server),
        }
    }

    pub fn calls(&self) -> Vec<(String, Value, bool)> {
        self.state.calls.lock().unwrap().clone()
    }

    pub async fn stop(mut self) {
        if let Some(server) = self.server.take() {
            server.shutdown().await;
        }
    }
}

/// A finished in-process CLI run.
#[derive(Debug)]
pub struct Outcome {
    pub code: u8,
    pub stdout: String,
    pub stderr: String,
}

impl Outcome {
    pub fn lines(&self) -> Vec<Value> {
        self.stdout
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect()
    }

    pub fn envelope(&self) -> Value {
        let lines = self.lines();
        assert_eq!(lines.len(), 1, "exactly one envelope: {self:?}");
        lines.into_iter().next().unwrap()
    }
}

/// Runs `deepchat ARGS` in-process with `env`, `stdin`, and an interrupt future.
pub async fn run_with(
    args: &[&str],
    env: &[(&str, &str)],
    stdin: &[u8],
    interrupt: impl std::future::Future<Output = ()>,
) -> Outcome {
    let argv: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
    let env: Vec<(String, String)> = env
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    let lookup = move |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    let mut stdout = Vec::new();
    let mut stderr = Vec::new();
    let mut input = stdin;
    let code = deepchat::run(
        &argv,
        &lookup,
        &mut input,
        deepchat::Output {
            stdout: &mut stdout,
            stderr: &mut stderr,
        },
        interrupt,
    )
    .await;
    Outcome {
        code,
        stdout: String::from_utf8(stdout).expect("utf-8 stdout"),
        stderr: String::from_utf8(stderr).expect("utf-8 stderr"),
    }
}

/// Runs `deepchat ARGS` against `host` (no stdin, never interrupted).
pub async fn run(host: &Host, args: &[&str]) -> Outcome {
    let data = host.data.display().to_string();
    run_with(
        args,
        &[("DEEPCHAT_E2E_USER_DATA_DIR", &data)],
        b"",
        std::future::pending(),
    )
    .await
}

pub fn ok(value: Value) -> Result<Value, ErrorBody> {
    Ok(value)
}

pub fn version_result() -> Value {
    json!({"appVersion":"9.8.7","protocolVersion":1,"surfaceVersion":2})
}

/// What [`RawHost`] saw of a request.
#[derive(Debug, Clone)]
pub struct RawRequest {
    /// `POST /v1/rpc`, `GET /v1/artifacts/…`.
    pub method: String,
    /// Request path.
    pub path: String,
    /// Envelope id from the JSON body (`unknown` without one).
    pub id: String,
}

/// A raw answer: status, extra header lines, body.
#[derive(Debug, Clone)]
pub struct RawResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl RawResponse {
    /// `200` NDJSON body of `lines`.
    pub fn ndjson(lines: Vec<String>) -> RawResponse {
        RawResponse {
            status: 200,
            headers: vec![("content-type".into(), "application/x-ndjson".into())],
            body: lines
                .into_iter()
                .map(|l| l + "\n")
                .collect::<String>()
                .into_bytes(),
        }
    }

    /// `200` JSON body.
    pub fn json(value: Value) -> RawResponse {
        RawResponse {
            status: 200,
            headers: vec![(
                "content-type".into(),
                "application/json; charset=utf-8".into(),
            )],
            body: value.to_string().into_bytes(),
        }
    }
}

/// A raw HTTP/1.1 responder on a real Unix socket with a real descriptor, answering each request with what
/// `handler` returns, then closing. It pins exactly which bytes the CLI receives.
pub struct RawHost {
    pub dir: tempfile::TempDir,
    pub data: PathBuf,
    task: tokio::task::JoinHandle<()>,
}

type Handler = dyn Fn(&RawRequest) -> RawResponse + Send + Sync;

impl RawHost {
    /// Answers `/v1/stream` with the NDJSON `lines(request_id)`.
    pub async fn stream(lines: impl Fn(&str) -> Vec<String> + Send + Sync + 'static) -> RawHost {
        RawHost::start(move |request: &RawRequest| RawResponse::ndjson(lines(&request.id))).await
    }

    pub async fn start(
        handler: impl Fn(&RawRequest) -> RawResponse + Send + Sync + 'static,
    ) -> RawHost {
        use agentwire_local_control::descriptor::{self, Descriptor, Endpoint, Token};
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::Builder::new()
            .prefix("dr")
            .tempdir_in("/tmp")
            .expect("tempdir");
        let data = dir.path().join("d");
        let control = data.join("local-control");
        std::fs::create_dir_all(&control).unwrap();
        std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::fs::set_permissions(&control, std::fs::Permissions::from_mode(0o700)).unwrap();
        let socket = control.join("control.sock");
        let listener = tokio::net::UnixListener::bind(&socket).unwrap();
        std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o600)).unwrap();
        let endpoint = Endpoint::Unix {
            path: socket.display().to_string(),
        };
        let descriptor = Descriptor::new(
            "9.8.7",
            endpoint,
            std::process::id(),
            Token::generate().unwrap(),
            1,
        );
        descriptor::write_descriptor(&descriptor::descriptor_path(&data), &descriptor).unwrap();
        let handler: Arc<Handler> = Arc::new(handler);
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let handler = Arc::clone(&handler);
                tokio::spawn(async move { respond(stream, &*handler).await });
            }
        });
        RawHost { dir, data, task }
    }
}

impl Drop for RawHost {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn respond(mut stream: tokio::net::UnixStream, handler: &Handler) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        let n = stream.read(&mut chunk).await.unwrap_or(0);
        if n == 0 {
            return;
        }
        buffer.extend_from_slice(&chunk[..n]);
        if let Some(at) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
    };
    let head = String::from_utf8_lossy(&buffer[..head_end]).into_owned();
    let mut request_line = head.lines().next().unwrap_or("").split_whitespace();
    let method = request_line.next().unwrap_or("").to_owned();
    let path = request_line.next().unwrap_or("").to_owned();
    let length: usize = head
        .to_ascii_lowercase()
        .lines()
        .find_map(|l| {
            l.strip_prefix("content-length:")
                .map(|v| v.trim().to_owned())
        })
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    while buffer.len() < head_end + length {
        let n = stream.read(&mut chunk).await.unwrap_or(0);
        if n == 0 {
            return;
        }
        buffer.extend_from_slice(&chunk[..n]);
    }
    let body: Value =
        serde_json::from_slice(&buffer[head_end..head_end + length]).unwrap_or(Value::Null);
    let id = body["id"].as_str().unwrap_or("unknown").to_owned();
    let answer = handler(&RawRequest { method, path, id });
    let mut response = format!(
        "HTTP/1.1 {} X\r\nconnection: close\r\ncontent-length: {}\r\n",
        answer.status,
        answer.body.len()
    );
    for (k, v) in &answer.headers {
        response.push_str(&format!("{k}: {v}\r\n"));
    }
    response.push_str("\r\n");
    let mut bytes = response.into_bytes();
    bytes.extend_from_slice(&answer.body);
    let _ = stream.write_all(&bytes).await;
    let _ = stream.shutdown().await;
}

/// One stream record line for request `id`.
pub fn record_line(
    id: &str,
    sequence: u64,
    event: &str,
    data: Value,
    run_id: Option<&str>,
    cursor: Option<&str>,
) -> String {
    let mut record = json!({"protocolVersion":1,"surfaceVersion":2,"sequence":sequence,"timestamp":1,
                            "requestId":id,"event":event,"data":data});
    if let Some(r) = run_id {
        record["runId"] = json!(r);
    }
    if let Some(c) = cursor {
        record["cursor"] = json!(c);
    }
    record.to_string()
}

/// The terminal success line for request `id`.
pub fn terminal_line(id: &str, result: Value) -> String {
    json!({"protocolVersion":1,"surfaceVersion":2,"id":id,"ok":true,"result":result}).to_string()
}
