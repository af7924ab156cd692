//! Shared test pieces: a recording [`Service`], server start-up in a temp dir, and a raw HTTP/1.1 client for
//! requests the real client would never send.

#![allow(dead_code, clippy::unwrap_used)] // test helpers: a failed unwrap is a failed test

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentwire_local_control::client::Client;
use agentwire_local_control::envelope::{
    ErrorBody, ErrorCode, RequestEnvelope, UploadRequestEnvelope,
};
use agentwire_local_control::server::{
    AgentToken, AuthorizeTarget, Download, PresentedToken, RequestContext, Route, Server,
    ServerConfig, Service, StreamSink, Transport, UploadedFile,
};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Notify;

/// The agent token [`TestService`] accepts.
pub const AGENT_TOKEN: &str = "agent-token-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";

#[derive(Debug, Default)]
pub struct TestService {
    /// What happened, in order: `authorize:<what>`, `call:<method>`, `upload:<bytes as text>`.
    pub log: Mutex<Vec<String>>,
    /// Notified when `test.forever` has emitted its first record.
    pub streaming: Notify,
    /// Notified when `test.hang` is being served.
    pub hanging: Notify,
    /// Notified when `test.hang` saw its request's cancellation signal.
    pub hang_cancelled: Notify,
}

impl TestService {
    pub fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }

    fn push(&self, entry: String) {
        self.log.lock().unwrap().push(entry);
    }
}

/// `Arc` so that tests can look at the log while the server owns the service.
#[derive(Debug, Clone, Default)]
pub struct Shared(pub Arc<TestService>);

impl Service for Shared {
    type Grant = ();

    fn route(&self, method: &str) -> Option<Route> {
        let minute = Duration::from_secs(60);
        match method {
            "test.echo" | "test.hang" | "test.denied" | "test.big" => {
                Some(Route::new(Transport::Rpc, 1024, minute))
            }
            "test.count" | "test.forever" => Some(Route::new(Transport::Stream, 1024, minute)),
            "test.put" => Some(Route::new(Transport::Upload, 64, minute)),
            _ => None,
        }
    }

    fn authenticate_agent(&self, token: &AgentToken) -> Result<(), ErrorBody> {
        if token.expose() == AGENT_TOKEN {
            Ok(())
        } else {
            Err(ErrorBody::new(
                ErrorCode::AuthenticationFailed,
                "authentication failed",
            ))
        }
    }

    async fn authorize(
        &self,
        _ctx: &RequestContext,
        target: AuthorizeTarget<'_>,
    ) -> Result<(), ErrorBody> {
        let (what, deny) = match target {
            AuthorizeTarget::Request(request, _) => {
                (request.method.clone(), request.method == "test.denied")
            }
            AuthorizeTarget::Upload(upload) => {
                (upload.method.clone(), upload.params.get("deny").is_some())
            }
            AuthorizeTarget::Download { artifact_id } => (format!("download {artifact_id}"), false),
            _ => ("other".to_owned(), true),
        };
        self.0.push(format!("authorize:{what}"));
        if deny {
            return Err(ErrorBody::new(
                ErrorCode::PermissionDenied,
                "denied by test policy",
            ));
        }
        Ok(())
    }

    async fn call(
        &self,
        ctx: &RequestContext,
        (): (),
        request: RequestEnvelope,
    ) -> Result<Value, ErrorBody> {
        self.0.push(format!("call:{}", request.method));
        if request.method == "test.hang" {
            // Background work holds a clone of the signal: the call's own future is simply dropped.
            let cancel = ctx.cancel.clone();
            let service = self.0.clone();
            tokio::spawn(async move {
                cancel.cancelled().await;
                service.push("cancelled:test.hang".to_owned());
                service.hang_cancelled.notify_one();
            });
            self.0.hanging.notify_one();
            std::future::pending::<()>().await;
        }
        if request.method == "test.big" {
            return Ok(json!("b".repeat(16 * 1024 * 1024)));
        }
        let principal = match &ctx.token {
            PresentedToken::Human => "human",
            _ => "agent",
        };
        Ok(json!({"echo": request.params, "principal": principal}))
    }

    async fn stream(
        &self,
        _ctx: &RequestContext,
        (): (),
        request: RequestEnvelope,
        mut sink: StreamSink,
    ) -> Result<Value, ErrorBody> {
        for index in 0..3 {
            sink.emit("tick", json!(index)).await?;
            if request.method == "test.forever" {
                self.0.streaming.notify_one();
                std::future::pending::<()>().await;
            }
        }
        Ok(json!({"ticks": 3}))
    }

    async fn upload(
        &self,
        _ctx: &RequestContext,
        (): (),
        _request: UploadRequestEnvelope,
        file: UploadedFile,
    ) -> Result<Value, ErrorBody> {
        let bytes = tokio::fs::read(&file.path).await.unwrap_or_default();
        self.0
            .push(format!("upload:{}", String::from_utf8_lossy(&bytes)));
        Ok(json!({"size": file.size, "sha256": file.sha256}))
    }

    async fn download(
        &self,
        _ctx: &RequestContext,
        (): (),
        artifact_id: String,
    ) -> Result<Download, ErrorBody> {
        if artifact_id != "art1" {
            return Err(ErrorBody::new(ErrorCode::NotFound, "no such artifact"));
        }
        let bytes: &'static [u8] = b"artifact bytes";
        let sha = sha_hex(bytes);
        Ok(Download::new(
            "art1",
            "text/plain",
            bytes.len() as u64,
            sha,
            "a \"b\".txt",
            Box::pin(bytes),
        ))
    }
}

pub fn sha_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[derive(Debug)]
pub struct Running {
    pub server: Server,
    pub service: Arc<TestService>,
    pub dir: tempfile::TempDir,
}

/// Client timeout for calls that are expected to finish.
pub const TIMEOUT: std::time::Duration = std::time::Duration::from_secs(20);

impl Running {
    /// A human client of `server`.
    pub fn client_for(server: &Server) -> Client {
        Client::new(
            server.layout().socket_path.clone(),
            server.descriptor().token.clone(),
        )
    }

    pub fn socket(&self) -> PathBuf {
        self.server.layout().socket_path.clone()
    }

    pub fn client(&self) -> Client {
        Client::new(self.socket(), self.server.descriptor().token.clone())
    }

    pub fn temp_files(&self) -> Vec<PathBuf> {
        std::fs::read_dir(&self.server.layout().temp_dir)
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .collect()
    }
}

pub async fn start() -> Running {
    start_with(|_| {}).await
}

pub async fn start_with(configure: impl FnOnce(&mut ServerConfig)) -> Running {
    let dir = tempfile::tempdir().unwrap();
    let mut config = ServerConfig::new(dir.path(), "0.1.0-test");
    configure(&mut config);
    let service = Shared::default();
    let inner = service.0.clone();
    let server = Server::start(config, service).await.unwrap();
    Running {
        server,
        service: inner,
        dir,
    }
}

pub fn request(id: &str, method: &str, params: Value) -> RequestEnvelope {
    RequestEnvelope::new(id, method, params)
}

/// Sends `head` then `body` on a fresh connection and reads until the server closes it.
pub async fn raw(socket: &Path, bytes: &[u8]) -> String {
    let mut stream = tokio::net::UnixStream::connect(socket).await.unwrap();
    stream.write_all(bytes).await.unwrap();
    read_to_close(&mut stream).await
}

pub async fn read_to_close(stream: &mut tokio::net::UnixStream) -> String {
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(20), stream.read_to_end(&mut out))
        .await
        .expect("server closed the connection")
        .ok();
    String::from_utf8_lossy(&out).into_owned()
}

/// The status code of the first response line.
pub fn status(response: &str) -> u16 {
    response
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0)
}

/// The JSON body of a raw response (after the blank line).
pub fn body_json(response: &str) -> Value {
    let body = response.split_once("\r\n\r\n").map_or("", |(_, body)| body);
    serde_json::from_str(body).unwrap_or(Value::Null)
}

pub fn error_code(response: &str) -> String {
    body_json(response)["error"]["code"]
        .as_str()
        .unwrap_or("")
        .to_owned()
}

pub fn rpc_bytes(token: &str, header_method: &str, body: &str) -> Vec<u8> {
    format!(
        "POST /v1/rpc HTTP/1.1\r\nhost: localhost\r\nauthorization: Bearer {token}\r\ncontent-type: application/json\r\n\
         x-deepchat-method: {header_method}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}
