//! A connect-per-request client of the local control server (DeepChat `src/cli/transport.ts`).
//!
//! Every call opens a fresh Unix-socket connection (`Connection: close`, no pooling), sends one request and reads
//! one bounded response under an overall timeout. Responses are checked as DeepChat's CLI checks them: JSON
//! content type, no compression, Content-Length matching, body ≤ 16 MiB, strict envelope, HTTP status agreeing
//! with `ok`, response id equal to the request's (or `"unknown"` on a failure). Streams additionally require
//! NDJSON, records ≤ 20 MiB, `sequence` 0, 1, 2, … and `requestId` equal to ours, exactly one terminal line and
//! nothing after it.
//!
//! Failure mapping: connect refused / socket missing / connection dropped → `unavailable` (exit 3); no answer in
//! time → `timeout` (exit 7); a remote error envelope → its own code; a malformed answer → `internal_error`
//! (exit 8). Unlike DeepChat's CLI, a stream cut before its terminal line is `unavailable` (the host went away),
//! not a protocol error.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};

use crate::descriptor::{Descriptor, Endpoint, Token};
use crate::envelope::{
    ErrorBody, ErrorCode, RequestEnvelope, ResponseEnvelope, StreamLine, StreamRecord,
    UNKNOWN_REQUEST_ID, UploadBinding, UploadRequestEnvelope,
};
use crate::limits::{
    ARTIFACT_ID_HEADER, ARTIFACT_PATH_PREFIX, CONTENT_SHA256_HEADER, MAX_JSON_RESPONSE_BYTES,
    MAX_STREAM_RECORD_BYTES, MAX_UPLOAD_REQUEST_HEADER_BYTES, METHOD_HEADER, PROTOCOL_VERSION,
    RPC_PATH, STREAM_PATH, SURFACE_VERSION, UPLOAD_PATH, UPLOAD_REQUEST_HEADER,
};
use crate::server::ChannelBody;

/// Why a call failed. [`ClientError::code`] gives the protocol code, [`ClientError::exit_code`] the CLI exit.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The server answered with an error envelope.
    #[error("{}: {}", error.code, error.message)]
    Remote {
        /// HTTP status of the answer.
        status: u16,
        /// The envelope's error.
        error: ErrorBody,
    },
    /// The server is not reachable or went away mid-answer.
    #[error("the local control server is unavailable: {0}")]
    Unavailable(String),
    /// No complete answer within the timeout.
    #[error("the local control request timed out after {0:?}")]
    Timeout(Duration),
    /// The answer broke the protocol.
    #[error("the local control server broke the protocol: {0}")]
    Protocol(String),
    /// A local problem with the request (e.g. the upload file).
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// `DEEPCHAT_CLI_AGENT_TOKEN` is set but is not a token; the descriptor's token is not used instead.
    #[error(
        "DEEPCHAT_CLI_AGENT_TOKEN is present but invalid; refusing to fall back to the human token"
    )]
    InvalidAgentToken,
    /// A local limit (e.g. the upload file is over the caller's limit).
    #[error("request body too large: {0}")]
    BodyTooLarge(String),
}

impl ClientError {
    /// The protocol error code.
    pub fn code(&self) -> ErrorCode {
        match self {
            ClientError::Remote { error, .. } => error.code,
            ClientError::Unavailable(_) => ErrorCode::Unavailable,
            ClientError::Timeout(_) => ErrorCode::Timeout,
            ClientError::Protocol(_) => ErrorCode::InternalError,
            ClientError::InvalidRequest(_) => ErrorCode::InvalidRequest,
            ClientError::BodyTooLarge(_) => ErrorCode::BodyTooLarge,
            ClientError::InvalidAgentToken => ErrorCode::AuthenticationFailed,
        }
    }

    /// The CLI exit code (2..=8).
    pub fn exit_code(&self) -> u8 {
        self.code().exit_code()
    }
}

/// Chooses the token a CLI presents (DeepChat `selectLocalControlToken`): when the `DEEPCHAT_CLI_AGENT_TOKEN`
/// variable is present at all (`agent_token_env` is its value), that token and nothing else; otherwise the
/// descriptor's human token.
///
/// # Errors
/// [`ClientError::InvalidAgentToken`] (`authentication_failed`, exit 4) when the variable is present but is not a
/// well-formed token (empty, not UTF-8, wrong alphabet or length).
pub fn select_token(
    descriptor: &Descriptor,
    agent_token_env: Option<&std::ffi::OsStr>,
) -> Result<Token, ClientError> {
    match agent_token_env {
        None => Ok(descriptor.token.clone()),
        Some(value) => value
            .to_str()
            .and_then(Token::parse)
            .ok_or(ClientError::InvalidAgentToken),
    }
}

/// Aborts the connection task (closing the socket) when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn protocol(message: &str) -> ClientError {
    ClientError::Protocol(message.to_owned())
}

/// Metadata of a finished download.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DownloadInfo {
    /// `x-deepchat-artifact-id`.
    pub id: String,
    /// `Content-Type`.
    pub mime_type: String,
    /// Bytes written, equal to `Content-Length`.
    pub size: u64,
    /// `x-content-sha256`, verified against the bytes.
    pub sha256: String,
}

/// A client bound to one endpoint and one token. Cheap to clone; holds no connection.
#[derive(Clone)]
pub struct Client {
    socket_path: PathBuf,
    token: Token,
    user_agent: String,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("socket_path", &self.socket_path)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// A client of the socket at `socket_path`, presenting `token`.
    pub fn new(socket_path: impl Into<PathBuf>, token: Token) -> Self {
        Client {
            socket_path: socket_path.into(),
            token,
            user_agent: "DeepChat-CLI/agentwire".to_owned(),
        }
    }

    /// A client of a discovered descriptor, presenting `token` (the descriptor's own for a human caller, or the
    /// agent token from `DEEPCHAT_CLI_AGENT_TOKEN` — never the descriptor's as a fallback for a bad agent token).
    ///
    /// # Errors
    /// `unavailable` for a named-pipe endpoint (not supported here).
    pub fn from_descriptor(descriptor: &Descriptor, token: Token) -> Result<Self, ClientError> {
        match &descriptor.endpoint {
            Endpoint::Unix { path } => Ok(Client::new(path, token)),
            _ => Err(ClientError::Unavailable(
                "named-pipe endpoints are not supported".to_owned(),
            )),
        }
    }

    /// Sets the `User-Agent` (default `DeepChat-CLI/agentwire`).
    #[must_use]
    pub fn user_agent(mut self, user_agent: impl Into<String>) -> Self {
        self.user_agent = user_agent.into();
        self
    }

    /// Connects, sends `request`, returns the response head and the connection task's guard: dropping the guard
    /// closes the connection, which is how a timed-out or abandoned call tells the server to cancel.
    async fn send(
        &self,
        request: Request<ChannelBody>,
    ) -> Result<(Response<Incoming>, AbortOnDrop), ClientError> {
        let stream = tokio::net::UnixStream::connect(&self.socket_path)
            .await
            .map_err(|error| {
                ClientError::Unavailable(format!(
                    "cannot connect to {}: {error}",
                    self.socket_path.display()
                ))
            })?;
        let (mut sender, connection) = hyper::client::conn::http1::Builder::new()
            .handshake::<_, ChannelBody>(TokioIo::new(stream))
            .await
            .map_err(|error| ClientError::Unavailable(format!("handshake failed: {error}")))?;
        let guard = AbortOnDrop(tokio::spawn(async move {
            let _ = connection.await;
        }));
        let response = sender.send_request(request).await.map_err(|error| {
            ClientError::Unavailable(format!("the connection failed before an answer: {error}"))
        })?;
        Ok((response, guard))
    }

    fn base_request(&self, method: Method, path: &str) -> hyper::http::request::Builder {
        Request::builder()
            .method(method)
            .uri(path)
            .header(header::HOST, "localhost")
            .header(
                header::AUTHORIZATION,
                format!("Bearer {}", self.token.expose()),
            )
            .header(header::CONNECTION, "close")
            .header(header::USER_AGENT, self.user_agent.as_str())
    }

    fn json_request(
        &self,
        path: &str,
        envelope: &RequestEnvelope,
    ) -> Result<Request<ChannelBody>, ClientError> {
        envelope
            .validate()
            .map_err(|error| ClientError::InvalidRequest(error.message))?;
        let body =
            serde_json::to_vec(envelope).map_err(|_| protocol("request is not serializable"))?;
        self.base_request(Method::POST, path)
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::CONTENT_LENGTH, body.len())
            .header(METHOD_HEADER, envelope.method.as_str())
            .body(ChannelBody::Full(Some(Bytes::from(body))))
            .map_err(|_| ClientError::InvalidRequest("request headers are invalid".to_owned()))
    }

    /// `POST /v1/rpc`: returns the `result`.
    ///
    /// # Errors
    /// See [`ClientError`]; a remote failure is [`ClientError::Remote`] with the envelope's code.
    pub async fn rpc(
        &self,
        envelope: &RequestEnvelope,
        timeout: Duration,
    ) -> Result<Value, ClientError> {
        let request = self.json_request(RPC_PATH, envelope)?;
        within(timeout, async {
            let (response, _connection) = self.send(request).await?;
            read_json_response(response, &envelope.id).await
        })
        .await
    }

    /// `POST /v1/stream`: calls `on_event` for each record in order, returns the terminal `result`.
    ///
    /// # Errors
    /// As [`Client::rpc`]; plus `internal_error` for an out-of-order `sequence`, a foreign `requestId`, an oversized
    /// or malformed record, or lines after the terminal one; `unavailable` if the stream ends without a terminal
    /// line.
    pub async fn stream(
        &self,
        envelope: &RequestEnvelope,
        timeout: Duration,
        mut on_event: impl FnMut(StreamRecord) + Send,
    ) -> Result<Value, ClientError> {
        let request = self.json_request(STREAM_PATH, envelope)?;
        within(timeout, async {
            let (response, _connection) = self.send(request).await?;
            if !response.status().is_success() {
                return read_json_response(response, &envelope.id).await;
            }
            if !media_type_is(&response, "application/x-ndjson") {
                return Err(protocol("the server returned a non-ndjson stream"));
            }
            if response.headers().contains_key(header::CONTENT_ENCODING) {
                return Err(protocol("compressed local responses are not supported"));
            }
            let mut parser = StreamParser::new(&envelope.id);
            let mut body = response.into_body();
            while let Some(frame) = body.frame().await {
                let frame = frame.map_err(|error| {
                    ClientError::Unavailable(format!("the stream was cut: {error}"))
                })?;
                if let Ok(data) = frame.into_data() {
                    for record in parser.push(&data)? {
                        on_event(record);
                    }
                }
            }
            parser.finish()
        })
        .await
    }

    /// `POST /v1/upload` of the regular file at `path` (not a symlink, 1..=`max_bytes` bytes), with
    /// `Expect: 100-continue`: the bytes are sent only after the server's `100 Continue`.
    ///
    /// # Errors
    /// `invalid_request` for an unusable file, `body_too_large` over `max_bytes`, else as [`Client::rpc`].
    pub async fn upload(
        &self,
        envelope: &RequestEnvelope,
        path: &Path,
        max_bytes: u64,
        timeout: Duration,
    ) -> Result<Value, ClientError> {
        envelope
            .validate()
            .map_err(|error| ClientError::InvalidRequest(error.message))?;
        let (mut file, binding) = open_upload(path, max_bytes).await?;
        let upload = UploadRequestEnvelope::new(envelope.clone(), binding.clone());
        let header_value = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(
            serde_json::to_vec(&upload).map_err(|_| protocol("request is not serializable"))?,
        );
        if header_value.len() > MAX_UPLOAD_REQUEST_HEADER_BYTES {
            return Err(ClientError::InvalidRequest(
                "upload metadata exceeds 4 KiB".to_owned(),
            ));
        }
        let (tx, rx) = mpsc::channel::<Bytes>(4);
        let (continue_tx, continue_rx) = oneshot::channel::<()>();
        let continue_tx = Arc::new(Mutex::new(Some(continue_tx)));
        let mut request = self
            .base_request(Method::POST, UPLOAD_PATH)
            .header(header::CONTENT_TYPE, "application/octet-stream")
            .header(header::CONTENT_LENGTH, binding.size)
            .header(header::EXPECT, "100-continue")
            .header(UPLOAD_REQUEST_HEADER, header_value)
            .body(ChannelBody::Channel(rx))
            .map_err(|_| ClientError::InvalidRequest("request headers are invalid".to_owned()))?;
        hyper::ext::on_informational(&mut request, move |response| {
            if response.status() == hyper::StatusCode::CONTINUE
                && let Some(sender) = continue_tx.lock().ok().and_then(|mut slot| slot.take())
            {
                let _ = sender.send(());
            }
        });
        let size = binding.size;
        let feeder = tokio::spawn(async move {
            if continue_rx.await.is_err() {
                return;
            }
            let mut left = size;
            let mut buffer = vec![0u8; 64 * 1024];
            while left > 0 {
                let want = usize::try_from(left)
                    .unwrap_or(usize::MAX)
                    .min(buffer.len());
                match file.read(&mut buffer[..want]).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => {
                        left -= n as u64;
                        if tx.send(Bytes::copy_from_slice(&buffer[..n])).await.is_err() {
                            return;
                        }
                    }
                }
            }
        });
        let outcome = within(timeout, async {
            let (response, _connection) = self.send(request).await?;
            read_json_response(response, &envelope.id).await
        })
        .await;
        feeder.abort();
        outcome
    }

    /// `GET /v1/artifacts/<id>`, writing the bytes to `out`; verifies length and SHA-256.
    ///
    /// # Errors
    /// As [`Client::rpc`]; `internal_error` when the bytes do not match the headers.
    pub async fn download(
        &self,
        artifact_id: &str,
        out: &mut (impl AsyncWrite + Unpin + Send),
        timeout: Duration,
    ) -> Result<DownloadInfo, ClientError> {
        let valid = (1..=128).contains(&artifact_id.len())
            && artifact_id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if !valid {
            return Err(ClientError::InvalidRequest(
                "artifact id is invalid".to_owned(),
            ));
        }
        let request = self
            .base_request(Method::GET, &format!("{ARTIFACT_PATH_PREFIX}{artifact_id}"))
            .body(ChannelBody::Full(None))
            .map_err(|_| ClientError::InvalidRequest("request headers are invalid".to_owned()))?;
        within(timeout, async {
            let (response, _connection) = self.send(request).await?;
            if !response.status().is_success() {
                return Err(
                    match read_json_response(response, UNKNOWN_REQUEST_ID).await {
                        Err(error) => error,
                        Ok(_) => protocol("http status and response envelope disagree"),
                    },
                );
            }
            let text = |name: &str| {
                response
                    .headers()
                    .get(name)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned)
            };
            let size: u64 = text("content-length")
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| protocol("download has no valid content-length"))?;
            let sha256 = text(CONTENT_SHA256_HEADER)
                .ok_or_else(|| protocol("download has no sha256 header"))?;
            let id = text(ARTIFACT_ID_HEADER)
                .ok_or_else(|| protocol("download has no artifact id header"))?;
            let mime_type = text("content-type").unwrap_or_default();
            let mut hasher = Sha256::new();
            let mut written = 0u64;
            let mut body = response.into_body();
            while let Some(frame) = body.frame().await {
                let frame = frame.map_err(|error| {
                    ClientError::Unavailable(format!("the download was cut: {error}"))
                })?;
                if let Ok(data) = frame.into_data() {
                    written += data.len() as u64;
                    if written > size {
                        return Err(protocol("download is longer than its content-length"));
                    }
                    hasher.update(&data);
                    out.write_all(&data).await.map_err(|error| {
                        ClientError::InvalidRequest(format!("cannot write: {error}"))
                    })?;
                }
            }
            let actual: String = hasher
                .finalize()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            if written != size || actual != sha256 {
                return Err(protocol("download does not match its length or sha256"));
            }
            out.flush()
                .await
                .map_err(|error| ClientError::InvalidRequest(format!("cannot write: {error}")))?;
            Ok(DownloadInfo {
                id,
                mime_type,
                size,
                sha256,
            })
        })
        .await
    }
}

async fn within<T>(
    timeout: Duration,
    work: impl Future<Output = Result<T, ClientError>>,
) -> Result<T, ClientError> {
    tokio::time::timeout(timeout, work)
        .await
        .unwrap_or(Err(ClientError::Timeout(timeout)))
}

use std::future::Future;

fn media_type_is(response: &Response<Incoming>, expected: &str) -> bool {
    let mut values = response.headers().get_all(header::CONTENT_TYPE).iter();
    let (Some(value), None) = (values.next(), values.next()) else {
        return false;
    };
    let Ok(value) = value.to_str() else {
        return false;
    };
    let mut parts = value
        .split(';')
        .map(|part| part.trim().to_ascii_lowercase());
    parts.next().as_deref() == Some(expected) && parts.all(|p| p == "charset=utf-8")
}

async fn read_json_response(
    response: Response<Incoming>,
    expected_id: &str,
) -> Result<Value, ClientError> {
    if !media_type_is(&response, "application/json") {
        return Err(protocol("the server returned a non-json response"));
    }
    if response.headers().contains_key(header::CONTENT_ENCODING) {
        return Err(protocol("compressed local responses are not supported"));
    }
    let declared: Option<u64> = match response
        .headers()
        .get(header::CONTENT_LENGTH)
        .map(HeaderValue::to_str)
    {
        None => None,
        Some(Ok(text)) => Some(
            text.parse()
                .map_err(|_| protocol("the server returned an invalid content-length"))?,
        ),
        Some(Err(_)) => return Err(protocol("the server returned an invalid content-length")),
    };
    if declared.is_some_and(|length| length > MAX_JSON_RESPONSE_BYTES as u64) {
        return Err(protocol("the response exceeds the client's byte limit"));
    }
    let status = response.status();
    let mut bytes = Vec::new();
    let mut body = response.into_body();
    while let Some(frame) = body.frame().await {
        let frame = frame
            .map_err(|error| ClientError::Unavailable(format!("the response was cut: {error}")))?;
        if let Ok(data) = frame.into_data() {
            if bytes.len() + data.len() > MAX_JSON_RESPONSE_BYTES {
                return Err(protocol("the response exceeds the client's byte limit"));
            }
            bytes.extend_from_slice(&data);
        }
    }
    if declared.is_some_and(|length| length != bytes.len() as u64) {
        return Err(protocol("the response length did not match"));
    }
    let envelope: ResponseEnvelope = serde_json::from_slice(&bytes)
        .map_err(|_| protocol("the server returned an invalid response envelope"))?;
    if !versions_match(envelope.protocol_version, envelope.surface_version) {
        return Err(protocol(
            "the response envelope has another protocol or surface version",
        ));
    }
    if envelope.outcome.is_ok() != status.is_success() {
        return Err(protocol("http status and response envelope disagree"));
    }
    let id_ok = envelope.id == expected_id
        || (envelope.outcome.is_err() && envelope.id == UNKNOWN_REQUEST_ID);
    if !id_ok {
        return Err(protocol("the response id did not match the request"));
    }
    envelope.outcome.map_err(|error| ClientError::Remote {
        status: status.as_u16(),
        error,
    })
}

fn versions_match(protocol_version: u32, surface_version: u32) -> bool {
    protocol_version == PROTOCOL_VERSION && surface_version == SURFACE_VERSION
}

async fn open_upload(
    path: &Path,
    max_bytes: u64,
) -> Result<(tokio::fs::File, UploadBinding), ClientError> {
    let invalid = |message: &str| ClientError::InvalidRequest(message.to_owned());
    let meta = tokio::fs::symlink_metadata(path)
        .await
        .map_err(|_| invalid("upload source is unavailable"))?;
    if !meta.file_type().is_file() {
        return Err(invalid("upload source must be a regular non-symlink file"));
    }
    if meta.len() == 0 {
        return Err(invalid("upload source is empty"));
    }
    if meta.len() > max_bytes {
        return Err(ClientError::BodyTooLarge(
            "upload source exceeds the command byte limit".to_owned(),
        ));
    }
    let mut file = tokio::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(path)
        .await
        .map_err(|_| invalid("upload source could not be opened safely"))?;
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; 64 * 1024];
    let mut size = 0u64;
    loop {
        let n = file
            .read(&mut buffer)
            .await
            .map_err(|_| invalid("upload source could not be read"))?;
        if n == 0 {
            break;
        }
        size += n as u64;
        hasher.update(&buffer[..n]);
    }
    if size != meta.len() {
        return Err(invalid("upload source changed while it was being read"));
    }
    use tokio::io::AsyncSeekExt;
    file.seek(std::io::SeekFrom::Start(0))
        .await
        .map_err(|_| invalid("upload source could not be read"))?;
    let sha256: String = hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    Ok((file, UploadBinding::new(size, sha256)))
}

/// Incremental NDJSON stream checker (sans-IO): feed bytes with [`StreamParser::push`], end with
/// [`StreamParser::finish`].
#[derive(Debug)]
pub struct StreamParser {
    request_id: String,
    pending: Vec<u8>,
    expected_sequence: u64,
    terminal: Option<ResponseEnvelope>,
}

impl StreamParser {
    /// A parser for the answer to request `request_id`.
    pub fn new(request_id: &str) -> Self {
        StreamParser {
            request_id: request_id.to_owned(),
            pending: Vec::new(),
            expected_sequence: 0,
            terminal: None,
        }
    }

    /// Consumes `bytes`, returning the complete event records in them.
    ///
    /// # Errors
    /// `internal_error` (as [`ClientError::Protocol`]) for a record over 20 MiB, a malformed or empty line, a
    /// wrong `sequence` or `requestId`, a second terminal line, or anything after the terminal line.
    pub fn push(&mut self, mut bytes: &[u8]) -> Result<Vec<StreamRecord>, ClientError> {
        let mut records = Vec::new();
        while let Some(newline) = bytes.iter().position(|&b| b == b'\n') {
            let (head, rest) = bytes.split_at(newline);
            if self.pending.len() + head.len() > MAX_STREAM_RECORD_BYTES {
                return Err(protocol("a stream record exceeds the client's byte limit"));
            }
            self.pending.extend_from_slice(head);
            let line = std::mem::take(&mut self.pending);
            if let Some(record) = self.line(&line)? {
                records.push(record);
            }
            bytes = &rest[1..];
        }
        if self.pending.len() + bytes.len() > MAX_STREAM_RECORD_BYTES {
            return Err(protocol("a stream record exceeds the client's byte limit"));
        }
        self.pending.extend_from_slice(bytes);
        Ok(records)
    }

    fn line(&mut self, line: &[u8]) -> Result<Option<StreamRecord>, ClientError> {
        if line.is_empty() {
            return Err(protocol("the server returned an empty stream record"));
        }
        if self.terminal.is_some() {
            return Err(protocol(
                "the server returned a record after the terminal record",
            ));
        }
        match StreamLine::parse(line).map_err(ClientError::Protocol)? {
            StreamLine::Terminal(envelope) => {
                if !versions_match(envelope.protocol_version, envelope.surface_version) {
                    return Err(protocol(
                        "the stream result has another protocol or surface version",
                    ));
                }
                if envelope.id != self.request_id {
                    return Err(protocol("the stream result id did not match the request"));
                }
                self.terminal = Some(envelope);
                Ok(None)
            }
            StreamLine::Event(record) => {
                if !versions_match(record.protocol_version, record.surface_version) {
                    return Err(protocol(
                        "a stream record has another protocol or surface version",
                    ));
                }
                if record.request_id.as_deref() != Some(self.request_id.as_str()) {
                    return Err(protocol("a stream record belongs to another request"));
                }
                if record.sequence != self.expected_sequence {
                    return Err(protocol("stream records arrived out of order"));
                }
                self.expected_sequence += 1;
                Ok(Some(record))
            }
        }
    }

    /// Ends the stream: the terminal `result`, or its error.
    ///
    /// # Errors
    /// [`ClientError::Remote`] for a failure envelope; `unavailable` when the stream ended without a terminal line
    /// (the host went away mid-stream).
    pub fn finish(self) -> Result<Value, ClientError> {
        if !self.pending.is_empty() || self.terminal.is_none() {
            return Err(ClientError::Unavailable(
                "the stream ended without a terminal record".to_owned(),
            ));
        }
        match self.terminal {
            Some(envelope) => envelope
                .outcome
                .map_err(|error| ClientError::Remote { status: 200, error }),
            None => Err(ClientError::Unavailable(
                "the stream ended without a terminal record".to_owned(),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(sequence: u64, request_id: &str) -> String {
        format!(
            r#"{{"protocolVersion":1,"surfaceVersion":2,"sequence":{sequence},"timestamp":1,"requestId":"{request_id}","event":"e","data":null}}"#
        ) + "\n"
    }

    const TERMINAL: &str =
        "{\"protocolVersion\":1,\"surfaceVersion\":2,\"id\":\"r1\",\"ok\":true,\"result\":7}\n";

    #[test]
    fn any_split_of_a_good_stream_gives_the_same_records_and_result() {
        let text = record(0, "r1") + &record(1, "r1") + TERMINAL;
        for split in 0..=text.len() {
            let mut parser = StreamParser::new("r1");
            let mut records = parser.push(&text.as_bytes()[..split]).unwrap();
            records.extend(parser.push(&text.as_bytes()[split..]).unwrap());
            assert_eq!(
                records.iter().map(|r| r.sequence).collect::<Vec<_>>(),
                vec![0, 1]
            );
            assert_eq!(parser.finish().unwrap(), serde_json::json!(7));
        }
    }

    #[test]
    fn out_of_order_foreign_and_trailing_records_are_refused() {
        let check = |text: String| {
            let mut parser = StreamParser::new("r1");
            parser.push(text.as_bytes()).map(|_| ()).unwrap_err().code()
        };
        assert_eq!(check(record(1, "r1")), ErrorCode::InternalError);
        assert_eq!(
            check(record(0, "r1") + &record(0, "r1")),
            ErrorCode::InternalError
        );
        assert_eq!(check(record(0, "other")), ErrorCode::InternalError);
        assert_eq!(
            check(TERMINAL.to_owned() + &record(0, "r1")),
            ErrorCode::InternalError
        );
        assert_eq!(check("\n".to_owned()), ErrorCode::InternalError);
    }

    #[test]
    fn an_agent_token_variable_never_falls_back_to_the_human_token() {
        use std::ffi::OsStr;
        let human = Token::generate().unwrap();
        let descriptor = Descriptor::new(
            "1",
            Endpoint::Unix { path: "/s".into() },
            1,
            human.clone(),
            0,
        );
        assert_eq!(select_token(&descriptor, None).unwrap(), human);
        let agent = "b".repeat(43);
        assert_eq!(
            select_token(&descriptor, Some(OsStr::new(&agent)))
                .unwrap()
                .expose(),
            agent
        );
        for bad in [
            "",
            "short",
            "has space aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
        ] {
            let error = select_token(&descriptor, Some(OsStr::new(bad))).unwrap_err();
            assert_eq!(error.exit_code(), 4, "{bad:?}");
        }
    }

    #[test]
    fn a_stream_without_terminal_is_unavailable() {
        let mut parser = StreamParser::new("r1");
        parser.push(record(0, "r1").as_bytes()).unwrap();
        assert_eq!(parser.finish().unwrap_err().code(), ErrorCode::Unavailable);
    }
}
