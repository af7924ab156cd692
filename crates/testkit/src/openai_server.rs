//! A loopback OpenAI-compatible test server: fixed answers per endpoint, failures on request, and a record of
//! every request and of every response the client abandoned.
//!
//! Plain HTTP/1.1 over tokio, one request per connection (`Connection: close`), so a test sees exactly when a
//! client went away: while the server is stalling (before or in the middle of a response) it waits for the
//! client's end of the connection to close and counts that as an abort ([`OpenAiTestServer::aborted`],
//! [`OpenAiTestServer::wait_aborted`]).
//!
//! Endpoints (under `/v1`):
//! - `POST /chat/completions`: SSE; one `reasoning_content` delta ([`CHAT_REASONING`]), the text in
//!   [`CHAT_DELTAS`], a `finish_reason` of `stop` (or [`OpenAiTestServer::set_finish_reason`]'s, preceded by one `tool_calls` delta when it is `tool_calls`), a usage chunk ([`CHAT_USAGE`]) and `[DONE]`;
//! - `GET /models`: [`MODEL_IDS`];
//! - `POST /images/generations`: one [`PNG_1X1`] as `b64_json`, or as a `url` served by this server when the
//!   request's prompt contains `as-url`;
//! - `POST /audio/speech`: [`speech_wav`] as `audio/wav`;
//! - `POST /audio/transcriptions`: `{"text": TRANSCRIPTION_TEXT}`;
//! - `POST /videos` → `queued`; `GET /videos/{id}`: `in_progress` (50) on the first poll, then `completed`;
//!   `GET /videos/{id}/content`: [`VIDEO_BYTES`] as `video/mp4`.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

/// Reasoning text sent before the answer.
pub const CHAT_REASONING: &str = "thinking about it";
/// The answer, one SSE event each.
pub const CHAT_DELTAS: &[&str] = &["Hello", " from", " the", " test", " server."];
/// `(prompt_tokens, completion_tokens)` of the usage chunk.
pub const CHAT_USAGE: (u64, u64) = (7, 5);
/// Model ids `GET /v1/models` lists.
pub const MODEL_IDS: &[&str] = &["test-chat", "test-image", "test-speech", "test-video"];
/// The transcription's text.
pub const TRANSCRIPTION_TEXT: &str = "hello from the test server";
/// The video content's bytes.
pub const VIDEO_BYTES: &[u8] = b"\x00\x00\x00\x18ftypmp42test-server-video";
/// The video job's id.
pub const VIDEO_ID: &str = "video_test1";
/// A valid 1x1 RGB PNG (a standard image decoder accepts it).
pub const PNG_1X1: &[u8] = &[
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x02, 0x00, 0x00, 0x00, 0x90, 0x77, 0x53,
    0xde, 0x00, 0x00, 0x00, 0x0c, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0xf8, 0xdf, 0xc0, 0x00,
    0x00, 0x04, 0x01, 0x01, 0x80, 0xc5, 0x2a, 0x18, 0x5d, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e,
    0x44, 0xae, 0x42, 0x60, 0x82,
];
/// Largest request head the server reads.
const MAX_HEAD_BYTES: usize = 64 * 1024;
/// Largest request body the server reads.
const MAX_BODY_BYTES: usize = 128 * 1024 * 1024;

/// A short 16 kHz mono PCM16 WAV (100 samples of silence) — the speech answer.
pub fn speech_wav() -> Vec<u8> {
    let samples = 100u32;
    let mut out = Vec::new();
    out.extend_from_slice(b"RIFF");
    out.extend_from_slice(&(36 + samples * 2).to_le_bytes());
    out.extend_from_slice(b"WAVEfmt ");
    out.extend_from_slice(&16u32.to_le_bytes());
    out.extend_from_slice(&[1, 0, 1, 0]);
    out.extend_from_slice(&16_000u32.to_le_bytes());
    out.extend_from_slice(&32_000u32.to_le_bytes());
    out.extend_from_slice(&[2, 0, 16, 0]);
    out.extend_from_slice(b"data");
    out.extend_from_slice(&(samples * 2).to_le_bytes());
    out.resize(out.len() + samples as usize * 2, 0);
    out
}

/// How the server fails every request until [`OpenAiTestServer::set_failure`] clears it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Failure {
    /// Answer with this status and a JSON error body whose message is `secret`.
    Status {
        /// The HTTP status.
        status: u16,
        /// Planted in the body (`{"error":{"message":secret}}`) and in an `X-Upstream-Detail` header.
        secret: String,
    },
    /// Read the request, never answer; wait for the client to close (an abort).
    Stall,
    /// Send the head and the first part of the body (chat: the reasoning and first two text deltas), then wait
    /// for the client to close (an abort).
    StallMidStream,
    /// Answer 200 with a body of `bytes` bytes and no `Content-Length` (chat: one SSE event that large).
    Oversized {
        /// The body size.
        bytes: usize,
    },
}

/// A request the server received.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordedRequest {
    /// `GET`, `POST`, …
    pub method: String,
    /// The path, e.g. `/v1/chat/completions`.
    pub path: String,
    /// The `Authorization` header, when sent.
    pub authorization: Option<String>,
    /// The `Content-Type` header, when sent.
    pub content_type: Option<String>,
    /// The body.
    pub body: Vec<u8>,
}

#[derive(Debug, Default)]
struct Shared {
    failure: Mutex<Option<Failure>>,
    first_event_delay: Mutex<std::time::Duration>,
    finish_reason: Mutex<Option<String>>,
    requests: Mutex<Vec<RecordedRequest>>,
    video_polls: AtomicUsize,
    aborted: AtomicUsize,
    changed: Notify,
}

/// The running server; dropping it stops accepting connections.
#[derive(Debug)]
pub struct OpenAiTestServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for OpenAiTestServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl OpenAiTestServer {
    /// Binds `127.0.0.1:0` and starts serving on the current tokio runtime.
    ///
    /// # Errors
    /// The bind error.
    pub async fn start() -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared::default());
        let accept_shared = Arc::clone(&shared);
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let shared = Arc::clone(&accept_shared);
                tokio::spawn(async move {
                    let _ = serve(stream, addr, &shared).await;
                });
            }
        });
        Ok(Self { addr, shared, task })
    }

    /// `http://127.0.0.1:<port>/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// The listening address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Fails every following request this way (`None`: answer normally again).
    pub fn set_failure(&self, failure: Option<Failure>) {
        *lock(&self.shared.failure) = failure;
    }

    /// Waits this long between the chat response's head and its first event (a model's time to first token,
    /// for benches; zero by default).
    pub fn set_first_event_delay(&self, delay: std::time::Duration) {
        *lock(&self.shared.first_event_delay) = delay;
    }

    /// The chat stream's `finish_reason` from now on (`None`: `stop`), e.g. `tool_calls` from a model that was
    /// offered no tools, or `content_filter`.
    pub fn set_finish_reason(&self, reason: Option<&str>) {
        *lock(&self.shared.finish_reason) = reason.map(str::to_owned);
    }

    /// Every request received so far, in arrival order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        lock(&self.shared.requests).clone()
    }

    /// How many stalled responses the client abandoned (closed its end before the response ended).
    pub fn aborted(&self) -> usize {
        self.shared.aborted.load(Ordering::SeqCst)
    }

    /// Waits until at least `count` requests have been received (wrap it in a timeout).
    pub async fn wait_requests(&self, count: usize) {
        loop {
            let changed = self.shared.changed.notified();
            if lock(&self.shared.requests).len() >= count {
                return;
            }
            changed.await;
        }
    }

    /// Waits until at least `count` responses were abandoned by the client (wrap it in a timeout).
    pub async fn wait_aborted(&self, count: usize) {
        loop {
            let changed = self.shared.changed.notified();
            if self.aborted() >= count {
                return;
            }
            changed.await;
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

async fn read_request(stream: &mut TcpStream) -> std::io::Result<Option<RecordedRequest>> {
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    let head_end = loop {
        if let Some(end) = find(&buf, b"\r\n\r\n") {
            break end;
        }
        if buf.len() > MAX_HEAD_BYTES {
            return Ok(None);
        }
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(None);
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut request_line = lines.next().unwrap_or_default().split(' ');
    let method = request_line.next().unwrap_or_default().to_owned();
    let path = request_line.next().unwrap_or_default().to_owned();
    let mut headers = Vec::new();
    for line in lines {
        if let Some((name, value)) = line.split_once(':') {
            headers.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
        }
    }
    let header = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    };
    let mut body = buf[head_end + 4..].to_vec();
    if let Some(length) = header("content-length").and_then(|v| v.parse::<usize>().ok()) {
        if length > MAX_BODY_BYTES {
            return Ok(None);
        }
        while body.len() < length {
            let n = stream.read(&mut chunk).await?;
            if n == 0 {
                return Ok(None);
            }
            body.extend_from_slice(&chunk[..n]);
        }
        body.truncate(length);
    } else if header("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        let mut raw = body;
        body = Vec::new();
        loop {
            if let Some(line_end) = find(&raw, b"\r\n") {
                let size_text = String::from_utf8_lossy(&raw[..line_end]).into_owned();
                let size =
                    usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
                        .unwrap_or(0);
                if raw.len() >= line_end + 2 + size + 2 {
                    body.extend_from_slice(&raw[line_end + 2..line_end + 2 + size]);
                    raw.drain(..line_end + 2 + size + 2);
                    if size == 0 {
                        break;
                    }
                    continue;
                }
            }
            if raw.len() + body.len() > MAX_BODY_BYTES {
                return Ok(None);
            }
            let n = stream.read(&mut chunk).await?;
            if n == 0 {
                return Ok(None);
            }
            raw.extend_from_slice(&chunk[..n]);
        }
    }
    Ok(Some(RecordedRequest {
        method,
        path,
        authorization: header("authorization"),
        content_type: header("content-type"),
        body,
    }))
}

/// Reads until the client closes its end; then counts an abort.
async fn wait_for_close(stream: &mut TcpStream, shared: &Shared) {
    let mut sink = [0u8; 1024];
    while let Ok(n) = stream.read(&mut sink).await {
        if n == 0 {
            break;
        }
    }
    shared.aborted.fetch_add(1, Ordering::SeqCst);
    shared.changed.notify_waiters();
}

fn head(status: u16, content_type: &str, length: Option<usize>, extra: &str) -> Vec<u8> {
    let reason = match status {
        200 => "OK",
        401 => "Unauthorized",
        404 => "Not Found",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        _ => "Status",
    };
    let mut text = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nConnection: close\r\n{extra}"
    );
    if let Some(length) = length {
        text.push_str(&format!("Content-Length: {length}\r\n"));
    }
    text.push_str("\r\n");
    text.into_bytes()
}

fn sse(value: &serde_json::Value) -> Vec<u8> {
    format!("data: {value}\n\n").into_bytes()
}

fn chat_events(finish_reason: &str) -> Vec<Vec<u8>> {
    use serde_json::json;
    let mut events = vec![sse(
        &json!({"choices":[{"index":0,"delta":{"reasoning_content":CHAT_REASONING}}]}),
    )];
    events.extend(
        CHAT_DELTAS
            .iter()
            .map(|text| sse(&json!({"choices":[{"index":0,"delta":{"content":text}}]}))),
    );
    if finish_reason == "tool_calls" {
        // As a real upstream does: the call itself, then the finish.
        events.push(sse(
            &json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1",
            "type":"function","function":{"name":"lookup","arguments":"{\"q\":\"x\"}"}}]}}]}),
        ));
    }
    events.push(sse(
        &json!({"choices":[{"index":0,"delta":{},"finish_reason":finish_reason}]}),
    ));
    events.push(sse(
        &json!({"choices":[],"usage":{"prompt_tokens":CHAT_USAGE.0,"completion_tokens":CHAT_USAGE.1}}),
    ));
    events.push(b"data: [DONE]\n\n".to_vec());
    events
}

async fn serve(mut stream: TcpStream, addr: SocketAddr, shared: &Shared) -> std::io::Result<()> {
    use base64::Engine as _;
    use serde_json::json;
    let Some(request) = read_request(&mut stream).await? else {
        return Ok(());
    };
    let failure = lock(&shared.failure).clone();
    let path = request.path.clone();
    let method = request.method.clone();
    let prompt_as_url = find(&request.body, b"as-url").is_some();
    lock(&shared.requests).push(request);
    shared.changed.notify_waiters();

    let is_chat = path == "/v1/chat/completions";
    match failure {
        Some(Failure::Status { status, secret }) => {
            let body = json!({"error":{"message":secret,"type":"server_error"}}).to_string();
            stream
                .write_all(&head(
                    status,
                    "application/json",
                    Some(body.len()),
                    &format!("X-Upstream-Detail: {secret}\r\n"),
                ))
                .await?;
            stream.write_all(body.as_bytes()).await?;
            return stream.shutdown().await;
        }
        Some(Failure::Stall) => {
            wait_for_close(&mut stream, shared).await;
            return Ok(());
        }
        Some(Failure::StallMidStream) => {
            if is_chat {
                stream
                    .write_all(&head(200, "text/event-stream", None, ""))
                    .await?;
                for event in chat_events("stop").iter().take(3) {
                    stream.write_all(event).await?;
                }
            } else {
                stream
                    .write_all(&head(200, "application/octet-stream", Some(1 << 20), ""))
                    .await?;
                stream.write_all(&[0u8; 1024]).await?;
            }
            stream.flush().await?;
            wait_for_close(&mut stream, shared).await;
            return Ok(());
        }
        Some(Failure::Oversized { bytes }) => {
            if is_chat {
                stream
                    .write_all(&head(200, "text/event-stream", None, ""))
                    .await?;
                stream.write_all(b"data: ").await?;
            } else {
                stream
                    .write_all(&head(200, "application/octet-stream", None, ""))
                    .await?;
            }
            let block = vec![b'a'; 64 * 1024];
            let mut left = bytes;
            while left > 0 {
                let n = left.min(block.len());
                if stream.write_all(&block[..n]).await.is_err() {
                    return Ok(());
                }
                left -= n;
            }
            return stream.shutdown().await;
        }
        None => {}
    }

    let (status, content_type, body): (u16, &str, Vec<u8>) = match (method.as_str(), path.as_str())
    {
        ("POST", "/v1/chat/completions") => {
            stream
                .write_all(&head(200, "text/event-stream", None, ""))
                .await?;
            stream.flush().await?;
            let delay = *lock(&shared.first_event_delay);
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            let finish_reason = lock(&shared.finish_reason)
                .clone()
                .unwrap_or_else(|| "stop".to_owned());
            for event in chat_events(&finish_reason) {
                stream.write_all(&event).await?;
                stream.flush().await?;
            }
            return stream.shutdown().await;
        }
        ("GET", "/v1/models") => (
            200,
            "application/json",
            json!({"object":"list","data": MODEL_IDS.iter()
                .map(|id| json!({"id":id,"object":"model","owned_by":"testkit"}))
                .collect::<Vec<_>>()})
            .to_string()
            .into_bytes(),
        ),
        ("POST", "/v1/images/generations") => {
            let item = if prompt_as_url {
                json!({"url": format!("http://{addr}/files/image.png")})
            } else {
                json!({"b64_json": base64::engine::general_purpose::STANDARD.encode(PNG_1X1),
                       "revised_prompt": "a revised prompt"})
            };
            (
                200,
                "application/json",
                json!({"created": 0, "data": [item]})
                    .to_string()
                    .into_bytes(),
            )
        }
        ("GET", "/files/image.png") => (200, "image/png", PNG_1X1.to_vec()),
        ("POST", "/v1/audio/speech") => (200, "audio/wav", speech_wav()),
        ("POST", "/v1/audio/transcriptions") => (
            200,
            "application/json",
            json!({"text": TRANSCRIPTION_TEXT}).to_string().into_bytes(),
        ),
        ("POST", "/v1/videos") => (
            200,
            "application/json",
            json!({"id":VIDEO_ID,"object":"video","status":"queued","progress":0})
                .to_string()
                .into_bytes(),
        ),
        ("GET", p) if p == format!("/v1/videos/{VIDEO_ID}") => {
            let poll = shared.video_polls.fetch_add(1, Ordering::SeqCst);
            let (status, progress) = if poll == 0 {
                ("in_progress", 50)
            } else {
                ("completed", 100)
            };
            (
                200,
                "application/json",
                json!({"id":VIDEO_ID,"object":"video","status":status,"progress":progress})
                    .to_string()
                    .into_bytes(),
            )
        }
        ("GET", p) if p == format!("/v1/videos/{VIDEO_ID}/content") => {
            (200, "video/mp4", VIDEO_BYTES.to_vec())
        }
        _ => (
            404,
            "application/json",
            br#"{"error":{"message":"not found"}}"#.to_vec(),
        ),
    };
    stream
        .write_all(&head(status, content_type, Some(body.len()), ""))
        .await?;
    stream.write_all(&body).await?;
    stream.shutdown().await
}
