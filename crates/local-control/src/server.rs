//! The HTTP/1.1 server on the Unix socket (hyper 1.x), dispatching to a host-implemented [`Service`].
//!
//! Routes (DeepChat `src/main/cli/server.ts`): `POST /v1/rpc`, `POST /v1/stream` (NDJSON: stream records, then one
//! terminal response envelope), `POST /v1/upload` (envelope in `x-deepchat-upload-request`, raw body), `GET
//! /v1/artifacts/<id>`. Anything else is 404 `not_found`. DeepChat serves event subscriptions as the stream method
//! `events.subscribe` on `/v1/stream`, not on a path of their own, so there is no `GET /v1/events` route here either.
//!
//! Order of checks for every request: route → `Expect` (only `100-continue` on uploads; else 417) → bearer token
//! (SHA-256 of both sides compared with `subtle`; the descriptor token is the human principal, anything else
//! well-formed is offered to [`Service::authenticate_agent`]) → content type → pending limits → method header /
//! upload header → [`Service::route`] → body (rpc/stream: `Content-Length` required and ≤ the route's
//! `max_body_bytes` before a byte is read) → JSON shape limits → versions → envelope → header/body method match →
//! [`Service::authorize`] → dispatch. An upload's body is read only after `authorize` returned `Ok`: hyper sends
//! `100 Continue` the first time the body is polled, so a refused upload never gets it. Upload bytes go to a 0600
//! file in `<control_dir>/tmp`, bounded while reading whatever the framing (chunked included) and removed on every
//! exit path.
//!
//! Shutdown ([`Server::shutdown`]): stop accepting, ask every connection to close after its current response,
//! give in-flight streams a terminal `unavailable` envelope, wait up to `shutdown_grace`, then drop every
//! connection; finally remove the descriptor (only if it still holds our token) and the socket.
//!
//! Not built: spilling rpc bodies above 256 KiB to a file (they are held in memory, bounded by the route limit),
//! Windows named pipes.

use std::convert::Infallible;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, Incoming};
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use serde_json::Value;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::sync::{Semaphore, mpsc};
use tokio_util::sync::CancellationToken;

use crate::descriptor::{Descriptor, Endpoint, Token, remove_descriptor_if_ours, write_descriptor};
use crate::endpoint::{EndpointError, EndpointLock, Layout, bind_endpoint};
use crate::envelope::{
    ErrorBody, ErrorCode, RequestEnvelope, ResponseEnvelope, StreamRecord, UNKNOWN_REQUEST_ID,
    UploadRequestEnvelope, is_valid_method, is_valid_request_id,
};
use crate::json_limits;
use crate::limits::{
    ARTIFACT_ID_HEADER, ARTIFACT_PATH_PREFIX, CONTENT_SHA256_HEADER, MAX_JSON_RESPONSE_BYTES,
    MAX_STREAM_RECORD_BYTES, MAX_UPLOAD_REQUEST_HEADER_BYTES, METHOD_HEADER, PROTOCOL_VERSION,
    RPC_PATH, STREAM_PATH, SURFACE_VERSION, ServerLimits, UPLOAD_PATH, UPLOAD_REQUEST_HEADER,
};

/// How a method is carried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Transport {
    /// `POST /v1/rpc`.
    Rpc,
    /// `POST /v1/stream`.
    Stream,
    /// `POST /v1/upload`.
    Upload,
}

/// What the server needs to know about a method before reading its body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Route {
    /// The only transport the method is served on; another one gets 404 `not_found`.
    pub transport: Transport,
    /// Largest request body (rpc/stream JSON, or upload bytes), bytes. Over → 413 `body_too_large`.
    pub max_body_bytes: u64,
    /// Time the dispatch may take (capped at 30 min). Over → `timeout`.
    pub timeout: Duration,
}

impl Route {
    /// A route.
    pub fn new(transport: Transport, max_body_bytes: u64, timeout: Duration) -> Self {
        Route {
            transport,
            max_body_bytes,
            timeout: timeout.min(crate::limits::MAX_REQUEST_TIMEOUT),
        }
    }
}

/// A well-formed bearer token other than the descriptor's, as presented; the [`Service`] decides what it is
/// (the same type the token authority issues). `Debug` hides it.
pub use crate::tokens::AgentToken;

/// Which token the request presented.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum PresentedToken {
    /// The descriptor's token.
    Human,
    /// Something else, accepted by [`Service::authenticate_agent`].
    Agent(AgentToken),
}

/// Facts about one request that come from the transport, never from the request.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RequestContext {
    /// Server-unique connection number.
    pub connection_id: u64,
    /// Peer uid from `SO_PEERCRED` (always ours: other uids are dropped at accept).
    pub peer_uid: u32,
    /// Peer pid from `SO_PEERCRED`, when the OS reports one.
    pub peer_pid: Option<i32>,
    /// The presented token.
    pub token: PresentedToken,
    /// Fires when the request is abandoned: the connection went away, the request timed out, or the server is
    /// shutting down.
    pub cancel: CancellationToken,
}

/// What is being authorized.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum AuthorizeTarget<'a> {
    /// An rpc or stream request, body parsed.
    Request(&'a RequestEnvelope, Transport),
    /// An upload, before any body byte is read.
    Upload(&'a UploadRequestEnvelope),
    /// An artifact download.
    Download {
        /// The artifact id, `[A-Za-z0-9_-]{1,128}`.
        artifact_id: &'a str,
    },
}

/// A received upload body, already checked against its binding. The file is removed after
/// [`Service::upload`] returns; hard-link it elsewhere to keep it.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct UploadedFile {
    /// A 0600 file in the control dir's `tmp/`.
    pub path: PathBuf,
    /// Its size, equal to the binding's.
    pub size: u64,
    /// Its lowercase hex SHA-256, equal to the binding's.
    pub sha256: String,
}

/// An artifact to send.
#[non_exhaustive]
pub struct Download {
    /// Artifact id (`x-deepchat-artifact-id`).
    pub id: String,
    /// `Content-Type`.
    pub mime_type: String,
    /// `Content-Length`; exactly this many bytes are read from `reader`.
    pub size: u64,
    /// Lowercase hex SHA-256 (`x-content-sha256`).
    pub sha256: String,
    /// File name for `Content-Disposition`.
    pub filename: String,
    /// The bytes.
    pub reader: Pin<Box<dyn AsyncRead + Send>>,
}

impl Download {
    /// A download.
    pub fn new(
        id: impl Into<String>,
        mime_type: impl Into<String>,
        size: u64,
        sha256: impl Into<String>,
        filename: impl Into<String>,
        reader: Pin<Box<dyn AsyncRead + Send>>,
    ) -> Self {
        Download {
            id: id.into(),
            mime_type: mime_type.into(),
            size,
            sha256: sha256.into(),
            filename: filename.into(),
            reader,
        }
    }
}

impl std::fmt::Debug for Download {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Download")
            .field("id", &self.id)
            .field("size", &self.size)
            .finish_non_exhaustive()
    }
}

/// The host's side: method table, authorization and dispatch. The server owns transport, auth and limits.
pub trait Service: Send + Sync + 'static {
    /// What `authorize` returns and dispatch receives (e.g. an admission slot released on drop).
    type Grant: Send + 'static;

    /// The route of `method`, or `None` if it is not exposed (→ 404 `not_found`).
    fn route(&self, method: &str) -> Option<Route>;

    /// Accepts or refuses a token that is not the descriptor's, before any body byte is read.
    ///
    /// # Errors
    /// Usually `authentication_failed` (401) or `rate_limited` (429).
    fn authenticate_agent(&self, token: &AgentToken) -> Result<(), ErrorBody>;

    /// Policy, scopes and approval. Runs before dispatch and, for uploads, before the body is read.
    fn authorize(
        &self,
        ctx: &RequestContext,
        target: AuthorizeTarget<'_>,
    ) -> impl Future<Output = Result<Self::Grant, ErrorBody>> + Send;

    /// A unary call; the `Ok` value is the envelope's `result`.
    fn call(
        &self,
        ctx: &RequestContext,
        grant: Self::Grant,
        request: RequestEnvelope,
    ) -> impl Future<Output = Result<Value, ErrorBody>> + Send;

    /// A streamed call: emit records through `sink`, return the terminal `result`.
    fn stream(
        &self,
        ctx: &RequestContext,
        grant: Self::Grant,
        request: RequestEnvelope,
        sink: StreamSink,
    ) -> impl Future<Output = Result<Value, ErrorBody>> + Send;

    /// An upload whose body is in `file`.
    fn upload(
        &self,
        ctx: &RequestContext,
        grant: Self::Grant,
        request: UploadRequestEnvelope,
        file: UploadedFile,
    ) -> impl Future<Output = Result<Value, ErrorBody>> + Send;

    /// An artifact download.
    fn download(
        &self,
        ctx: &RequestContext,
        grant: Self::Grant,
        artifact_id: String,
    ) -> impl Future<Output = Result<Download, ErrorBody>> + Send;
}

/// Where a streamed call writes its records. Numbers them 0, 1, 2, … and stamps time and request id.
#[derive(Debug)]
pub struct StreamSink {
    tx: mpsc::Sender<Bytes>,
    request_id: String,
    sequence: u64,
}

impl StreamSink {
    /// Sends `{…, sequence, timestamp, requestId, event, data}`.
    ///
    /// # Errors
    /// `cancelled` when the client is gone; `internal_error` for an invalid event name or a record over 20 MiB.
    pub async fn emit(&mut self, event: &str, data: Value) -> Result<(), ErrorBody> {
        self.emit_with(event, data, None, None).await
    }

    /// As [`StreamSink::emit`], with `runId` and `cursor`.
    ///
    /// # Errors
    /// As [`StreamSink::emit`].
    pub async fn emit_with(
        &mut self,
        event: &str,
        data: Value,
        run_id: Option<String>,
        cursor: Option<crate::envelope::Cursor>,
    ) -> Result<(), ErrorBody> {
        let record = StreamRecord {
            protocol_version: PROTOCOL_VERSION,
            surface_version: SURFACE_VERSION,
            sequence: self.sequence,
            timestamp: unix_millis(),
            request_id: Some(self.request_id.clone()),
            run_id,
            cursor,
            event: event.to_owned(),
            data,
        };
        if !record.is_valid() {
            return Err(ErrorBody::new(
                ErrorCode::InternalError,
                "stream emitted an invalid event",
            ));
        }
        let mut line = serde_json::to_vec(&record).map_err(|_| {
            ErrorBody::new(
                ErrorCode::InternalError,
                "stream record is not serializable",
            )
        })?;
        line.push(b'\n');
        if line.len() > MAX_STREAM_RECORD_BYTES {
            return Err(ErrorBody::new(
                ErrorCode::InternalError,
                "stream record exceeds its byte limit",
            ));
        }
        self.tx.send(Bytes::from(line)).await.map_err(|_| {
            ErrorBody::new(ErrorCode::Cancelled, "stream connection is closed").retriable(true)
        })?;
        self.sequence += 1;
        Ok(())
    }
}

fn unix_millis() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// A response (or request) body: all at once, or chunks from a channel.
#[derive(Debug)]
pub(crate) enum ChannelBody {
    Full(Option<Bytes>),
    Channel(mpsc::Receiver<Bytes>),
}

impl Body for ChannelBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.get_mut() {
            ChannelBody::Full(bytes) => {
                Poll::Ready(bytes.take().map(|bytes| Ok(Frame::data(bytes))))
            }
            ChannelBody::Channel(rx) => rx
                .poll_recv(cx)
                .map(|chunk| chunk.map(|bytes| Ok(Frame::data(bytes)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self, ChannelBody::Full(None))
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        match self {
            ChannelBody::Full(Some(bytes)) => hyper::body::SizeHint::with_exact(bytes.len() as u64),
            ChannelBody::Full(None) => hyper::body::SizeHint::with_exact(0),
            ChannelBody::Channel(_) => hyper::body::SizeHint::default(),
        }
    }
}

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    /// The endpoint could not be set up (includes `already_running`).
    #[error(transparent)]
    Endpoint(#[from] EndpointError),
    /// Token generation or descriptor writing failed.
    #[error("local-control server io failed: {0}")]
    Io(#[from] std::io::Error),
}

impl ServerError {
    /// Stable snake_case code: the endpoint's code, or `io`.
    pub fn code(&self) -> &'static str {
        match self {
            ServerError::Endpoint(error) => error.code(),
            ServerError::Io(_) => "io",
        }
    }
}

/// Startup settings.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ServerConfig {
    /// The host's data dir; everything lives in `<data_dir>/local-control/`.
    pub data_dir: PathBuf,
    /// Name used for the runtime-dir fallback directory. Default `"deepchat"`.
    pub app_name: String,
    /// Written to the descriptor's `appVersion`.
    pub app_version: String,
    /// Resource limits.
    pub limits: ServerLimits,
}

impl ServerConfig {
    /// Defaults for `data_dir`.
    pub fn new(data_dir: impl Into<PathBuf>, app_version: impl Into<String>) -> Self {
        ServerConfig {
            data_dir: data_dir.into(),
            app_name: "deepchat".to_owned(),
            app_version: app_version.into(),
            limits: ServerLimits::default(),
        }
    }
}

struct Shared<S> {
    service: S,
    human_token_hash: [u8; 32],
    limits: ServerLimits,
    temp_dir: PathBuf,
    pending: Arc<AtomicUsize>,
    next_connection: AtomicU64,
    next_upload: AtomicU64,
    shutdown: CancellationToken,
    hard_stop: CancellationToken,
}

struct ConnectionState {
    id: u64,
    peer_uid: u32,
    peer_pid: Option<i32>,
    pending: Arc<AtomicUsize>,
    cancel: CancellationToken,
}

/// A running server. Dropping it without [`Server::shutdown`] stops the accept loop but leaves the descriptor.
#[derive(Debug)]
pub struct Server {
    descriptor: Descriptor,
    layout: Layout,
    shutdown: CancellationToken,
    hard_stop: CancellationToken,
    grace: Duration,
    accept_task: Option<tokio::task::JoinHandle<tokio::task::JoinSet<()>>>,
    endpoint: Arc<EndpointLock>,
}

impl Server {
    /// Binds the endpoint ([`bind_endpoint`]), generates a fresh token, starts serving, then writes the
    /// descriptor — so a client that finds the descriptor finds a verified socket.
    ///
    /// # Errors
    /// [`ServerError::Endpoint`] (e.g. `already_running`) or IO.
    pub async fn start<S: Service>(
        config: ServerConfig,
        service: S,
    ) -> Result<Server, ServerError> {
        let layout = Layout::new(&config.data_dir, &config.app_name)?;
        let bound = {
            let layout = layout.clone();
            tokio::task::spawn_blocking(move || bind_endpoint(&layout))
                .await
                .map_err(|error| std::io::Error::other(error.to_string()))??
        };
        let token = Token::generate()?;
        let (listener, lock) = bound.into_parts();
        let listener = tokio::net::UnixListener::from_std(listener)?;
        let endpoint = Arc::new(lock);
        let shutdown = CancellationToken::new();
        let hard_stop = CancellationToken::new();
        let shared = Arc::new(Shared {
            service,
            human_token_hash: Sha256::digest(token.expose().as_bytes()).into(),
            temp_dir: layout.temp_dir.clone(),
            pending: Arc::new(AtomicUsize::new(0)),
            next_connection: AtomicU64::new(1),
            next_upload: AtomicU64::new(1),
            shutdown: shutdown.clone(),
            hard_stop: hard_stop.clone(),
            limits: config.limits.clone(),
        });
        let accept_task = tokio::spawn(accept_loop(listener, shared));
        let descriptor = Descriptor::new(
            config.app_version,
            Endpoint::Unix {
                path: layout.socket_path.to_string_lossy().into_owned(),
            },
            std::process::id(),
            token,
            unix_millis(),
        );
        let written = {
            let path = layout.descriptor_path.clone();
            let descriptor = descriptor.clone();
            tokio::task::spawn_blocking(move || write_descriptor(&path, &descriptor))
                .await
                .map_err(|error| std::io::Error::other(error.to_string()))
                .and_then(|result| result)
        };
        let server = Server {
            descriptor,
            layout,
            shutdown,
            hard_stop,
            grace: config.limits.shutdown_grace,
            accept_task: Some(accept_task),
            endpoint,
        };
        if let Err(error) = written {
            server.shutdown().await;
            return Err(error.into());
        }
        Ok(server)
    }

    /// The descriptor as written (its token is the human token).
    pub fn descriptor(&self) -> &Descriptor {
        &self.descriptor
    }

    /// The layout in use.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Graceful shutdown, as described in the module docs. Returns when every connection is gone.
    pub async fn shutdown(mut self) {
        self.shutdown.cancel();
        if let Some(task) = self.accept_task.take() {
            let mut connections = task.await.unwrap_or_default();
            let drained = tokio::time::timeout(self.grace, async {
                while connections.join_next().await.is_some() {}
            })
            .await;
            if drained.is_err() {
                self.hard_stop.cancel();
                connections.abort_all();
                while connections.join_next().await.is_some() {}
            }
        }
        let path = self.layout.descriptor_path.clone();
        let token = self.descriptor.token.clone();
        let endpoint = self.endpoint.clone();
        let _ = tokio::task::spawn_blocking(move || {
            let _ = remove_descriptor_if_ours(&path, &token);
            endpoint.remove_socket();
        })
        .await;
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.shutdown.cancel();
        self.hard_stop.cancel();
    }
}

async fn accept_loop<S: Service>(
    listener: tokio::net::UnixListener,
    shared: Arc<Shared<S>>,
) -> tokio::task::JoinSet<()> {
    let mut connections = tokio::task::JoinSet::new();
    let slots = Arc::new(Semaphore::new(shared.limits.max_connections));
    let me = rustix::process::getuid().as_raw();
    loop {
        let accepted = tokio::select! {
            () = shared.shutdown.cancelled() => break,
            accepted = listener.accept() => accepted,
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(error) => {
                // Out of descriptors and the like: back off instead of spinning on the same error.
                tracing::warn!(%error, "local-control: accept failed");
                tokio::select! {
                    () = shared.shutdown.cancelled() => break,
                    () = tokio::time::sleep(Duration::from_millis(100)) => continue,
                }
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            tracing::warn!("local-control: connection limit reached, closing a new connection");
            continue;
        };
        let Ok(cred) = stream.peer_cred() else {
            continue;
        };
        if cred.uid() != me {
            tracing::warn!(
                peer_uid = cred.uid(),
                "local-control: refusing a connection from another user"
            );
            continue;
        }
        let state = Arc::new(ConnectionState {
            id: shared.next_connection.fetch_add(1, Ordering::Relaxed),
            peer_uid: cred.uid(),
            peer_pid: cred.pid(),
            pending: Arc::new(AtomicUsize::new(0)),
            cancel: CancellationToken::new(),
        });
        let shared = shared.clone();
        connections.spawn(async move {
            serve_connection(stream, shared, state).await;
            drop(slot);
        });
    }
    connections
}

async fn serve_connection<S: Service>(
    stream: tokio::net::UnixStream,
    shared: Arc<Shared<S>>,
    state: Arc<ConnectionState>,
) {
    let service = {
        let shared = shared.clone();
        let state = state.clone();
        hyper::service::service_fn(move |request: Request<Incoming>| {
            let shared = shared.clone();
            let state = state.clone();
            async move { Ok::<_, Infallible>(handle(request, &shared, &state).await) }
        })
    };
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(shared.limits.header_read_timeout)
        .max_buf_size(shared.limits.max_header_bytes.max(8192))
        .max_headers(100);
    let connection = builder.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(connection);
    tokio::select! {
        _ = connection.as_mut() => {}
        () = shared.shutdown.cancelled() => {
            connection.as_mut().graceful_shutdown();
            tokio::select! {
                _ = connection.as_mut() => {}
                () = shared.hard_stop.cancelled() => {}
            }
        }
    }
    state.cancel.cancel();
}

/// A failure on its way to becoming an HTTP response.
struct Failure {
    status: u16,
    id: String,
    // Boxed: with serde_json's `preserve_order` (switched on by other workspace members) `ErrorBody` is large.
    error: Box<ErrorBody>,
}

impl Failure {
    fn new(code: ErrorCode, message: &str) -> Failure {
        Failure {
            status: code.http_status(),
            id: UNKNOWN_REQUEST_ID.to_owned(),
            error: Box::new(ErrorBody::new(code, message)),
        }
    }

    fn status(mut self, status: u16) -> Failure {
        self.status = status;
        self
    }

    fn from_body(id: &str, error: ErrorBody) -> Failure {
        Failure {
            status: error.code.http_status(),
            id: id.to_owned(),
            error: Box::new(error),
        }
    }
}

/// Counts one request as pending, globally and on its connection, until dropped (for streamed responses: until
/// the producing task ends).
struct PendingGuard {
    global: Arc<AtomicUsize>,
    connection: Arc<AtomicUsize>,
}

impl Drop for PendingGuard {
    fn drop(&mut self) {
        self.global.fetch_sub(1, Ordering::AcqRel);
        self.connection.fetch_sub(1, Ordering::AcqRel);
    }
}

fn json_response(status: u16, envelope: &ResponseEnvelope) -> Response<ChannelBody> {
    let (status, bytes) = match serde_json::to_vec(envelope) {
        Ok(bytes) if bytes.len() <= MAX_JSON_RESPONSE_BYTES => (status, bytes),
        Ok(_) => {
            let failure = ResponseEnvelope::failure(
                envelope.id.clone(),
                ErrorBody::new(
                    ErrorCode::ResultTooLarge,
                    "local-control response exceeds its byte limit",
                ),
            );
            (500, serde_json::to_vec(&failure).unwrap_or_default())
        }
        Err(_) => (500, Vec::new()),
    };
    let mut response = Response::new(ChannelBody::Full(Some(Bytes::from(bytes))));
    *response.status_mut() =
        StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json; charset=utf-8"),
    );
    common_headers(headers);
    if status >= 400 {
        headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    response
}

fn common_headers(headers: &mut HeaderMap) {
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
}

fn failure_response(failure: Failure) -> Response<ChannelBody> {
    json_response(
        failure.status,
        &ResponseEnvelope::failure(failure.id, *failure.error),
    )
}

/// The value of a header that must appear at most once; `Err` if repeated or not visible ASCII.
fn singular<'a>(headers: &'a HeaderMap, name: &str) -> Result<Option<&'a str>, Failure> {
    let mut values = headers.get_all(name).iter();
    let Some(first) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(Failure::new(
            ErrorCode::InvalidRequest,
            "a header that must be singular is repeated",
        ));
    }
    first.to_str().map(Some).map_err(|_| {
        Failure::new(
            ErrorCode::InvalidRequest,
            "a header value is not visible ascii",
        )
    })
}

fn declared_length(headers: &HeaderMap) -> Result<Option<u64>, Failure> {
    let Some(raw) = singular(headers, "content-length")? else {
        return Ok(None);
    };
    let valid = raw == "0"
        || (!raw.starts_with('0') && !raw.is_empty() && raw.bytes().all(|b| b.is_ascii_digit()));
    let parsed = raw.parse::<u64>().ok().filter(|_| valid);
    parsed
        .map(Some)
        .ok_or_else(|| Failure::new(ErrorCode::InvalidRequest, "content-length is invalid"))
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Rpc,
    Stream,
    Upload,
    Download,
}

async fn handle<S: Service>(
    request: Request<Incoming>,
    shared: &Arc<Shared<S>>,
    state: &ConnectionState,
) -> Response<ChannelBody> {
    match handle_inner(request, shared, state).await {
        Ok(response) => response,
        Err(failure) => failure_response(failure),
    }
}

async fn handle_inner<S: Service>(
    request: Request<Incoming>,
    shared: &Arc<Shared<S>>,
    state: &ConnectionState,
) -> Result<Response<ChannelBody>, Failure> {
    let target = request.uri().path_and_query().map_or("", |p| p.as_str());
    let kind = match (request.method(), target) {
        (&Method::POST, RPC_PATH) => Kind::Rpc,
        (&Method::POST, STREAM_PATH) => Kind::Stream,
        (&Method::POST, UPLOAD_PATH) => Kind::Upload,
        (&Method::GET, path) if path.starts_with(ARTIFACT_PATH_PREFIX) => Kind::Download,
        _ => {
            return Err(Failure::new(
                ErrorCode::NotFound,
                "local-control endpoint was not found",
            ));
        }
    };
    let headers = request.headers();
    if headers.contains_key(header::EXPECT) {
        let expects_continue = singular(headers, "expect")
            .ok()
            .flatten()
            .is_some_and(|value| value.trim().eq_ignore_ascii_case("100-continue"));
        if kind != Kind::Upload || !expects_continue {
            return Err(
                Failure::new(ErrorCode::InvalidRequest, "expect is not supported").status(417),
            );
        }
    }
    let token = authenticate(shared, headers)?;
    if headers.contains_key(header::CONTENT_ENCODING) {
        return Err(Failure::new(
            ErrorCode::InvalidRequest,
            "content-encoding is not supported",
        ));
    }
    let content_type_ok = match kind {
        Kind::Rpc | Kind::Stream => singular(headers, "content-type")?.is_some_and(|value| {
            let mut parts = value
                .split(';')
                .map(|part| part.trim().to_ascii_lowercase());
            parts.next().as_deref() == Some("application/json")
                && parts.all(|p| p == "charset=utf-8")
        }),
        Kind::Upload => singular(headers, "content-type")?.is_some_and(|value| {
            value
                .trim()
                .eq_ignore_ascii_case("application/octet-stream")
        }),
        Kind::Download => true,
    };
    if !content_type_ok {
        let message = if kind == Kind::Upload {
            "content-type must be application/octet-stream"
        } else {
            "content-type must be application/json"
        };
        return Err(Failure::new(ErrorCode::InvalidRequest, message).status(415));
    }
    let global = shared.pending.fetch_add(1, Ordering::AcqRel);
    let mine = state.pending.fetch_add(1, Ordering::AcqRel);
    let pending = PendingGuard {
        global: shared.pending.clone(),
        connection: state.pending.clone(),
    };
    if global >= shared.limits.max_pending_requests
        || mine >= shared.limits.max_pending_per_connection
    {
        let mut failure = Failure::new(
            ErrorCode::RateLimited,
            "too many pending local-control requests",
        );
        failure.error.retriable = true;
        return Err(failure);
    }
    // Cancelled with the connection; rpc and upload handlers also cancel it when hyper drops them, streamed
    // responses when their producing task ends.
    let cancel = state.cancel.child_token();
    let ctx = RequestContext {
        connection_id: state.id,
        peer_uid: state.peer_uid,
        peer_pid: state.peer_pid,
        token,
        cancel,
    };
    match kind {
        Kind::Rpc | Kind::Stream => handle_json(request, shared, ctx, kind, pending).await,
        Kind::Upload => handle_upload(request, shared, ctx).await,
        Kind::Download => handle_download(request, shared, ctx, pending).await,
    }
}

fn authenticate<S: Service>(
    shared: &Shared<S>,
    headers: &HeaderMap,
) -> Result<PresentedToken, Failure> {
    let refused = || Failure::new(ErrorCode::AuthenticationFailed, "authentication failed");
    let value = singular(headers, "authorization")
        .map_err(|_| refused())?
        .ok_or_else(refused)?;
    let presented = value
        .strip_prefix("Bearer ")
        .and_then(Token::parse)
        .ok_or_else(refused)?;
    let presented_hash: [u8; 32] = Sha256::digest(presented.expose().as_bytes()).into();
    if bool::from(presented_hash.ct_eq(&shared.human_token_hash)) {
        return Ok(PresentedToken::Human);
    }
    let agent = AgentToken::presented(presented.expose().to_owned());
    shared
        .service
        .authenticate_agent(&agent)
        .map_err(|error| Failure::from_body(UNKNOWN_REQUEST_ID, error))?;
    Ok(PresentedToken::Agent(agent))
}

async fn read_bounded(
    body: Incoming,
    max: u64,
    cancel: &CancellationToken,
) -> Result<Vec<u8>, Failure> {
    let mut body = body;
    let mut bytes = Vec::new();
    loop {
        let frame = tokio::select! {
            frame = body.frame() => frame,
            () = cancel.cancelled() => return Err(Failure::new(ErrorCode::Cancelled, "request was cancelled")),
        };
        let Some(frame) = frame else { return Ok(bytes) };
        let frame = frame.map_err(|_| {
            Failure::new(ErrorCode::InvalidRequest, "request body could not be read")
        })?;
        if let Ok(data) = frame.into_data() {
            if bytes.len() as u64 + data.len() as u64 > max {
                return Err(Failure::new(
                    ErrorCode::BodyTooLarge,
                    "request body exceeds its byte limit",
                ));
            }
            bytes.extend_from_slice(&data);
        }
    }
}

async fn handle_json<S: Service>(
    request: Request<Incoming>,
    shared: &Arc<Shared<S>>,
    ctx: RequestContext,
    kind: Kind,
    pending: PendingGuard,
) -> Result<Response<ChannelBody>, Failure> {
    let headers = request.headers();
    let declared_method = singular(headers, METHOD_HEADER)?
        .filter(|method| is_valid_method(method))
        .ok_or_else(|| {
            Failure::new(
                ErrorCode::InvalidRequest,
                "method header is missing or invalid",
            )
        })?
        .to_owned();
    let transport = if kind == Kind::Stream {
        Transport::Stream
    } else {
        Transport::Rpc
    };
    let route = shared
        .service
        .route(&declared_method)
        .filter(|route| route.transport == transport)
        .ok_or_else(|| {
            Failure::new(
                ErrorCode::NotFound,
                "method is not exposed by the cli surface",
            )
        })?;
    let Some(length) = declared_length(headers)? else {
        return Err(
            Failure::new(ErrorCode::InvalidRequest, "content-length is required").status(411),
        );
    };
    if length > route.max_body_bytes {
        return Err(Failure::new(
            ErrorCode::BodyTooLarge,
            "request body exceeds its byte limit",
        ));
    }
    let body = read_bounded(request.into_body(), route.max_body_bytes, &ctx.cancel).await?;
    let value = json_limits::parse(&body, shared.limits.json)
        .map_err(|error| Failure::new(ErrorCode::InvalidRequest, &error.to_string()))?;
    let (envelope, id) =
        decode_envelope::<RequestEnvelope>(value, "rpc", RequestEnvelope::validate)?;
    if envelope.method != declared_method {
        return Err(Failure::from_body(
            &id,
            ErrorBody::new(
                ErrorCode::InvalidRequest,
                "method header does not match the request body",
            ),
        ));
    }
    if kind == Kind::Rpc {
        let _cancel_on_drop = ctx.cancel.clone().drop_guard();
        let run = async {
            let grant = shared
                .service
                .authorize(&ctx, AuthorizeTarget::Request(&envelope, transport))
                .await?;
            shared.service.call(&ctx, grant, envelope.clone()).await
        };
        let outcome = guarded(run, route.timeout, &ctx.cancel, &shared.shutdown).await;
        return Ok(match outcome {
            Ok(result) => json_response(200, &ResponseEnvelope::success(id, result)),
            Err(error) => failure_response(Failure::from_body(&id, error)),
        });
    }
    // Stream: authorize first (a refusal is a plain JSON error), then hand the rest to a task.
    let grant = guarded(
        shared
            .service
            .authorize(&ctx, AuthorizeTarget::Request(&envelope, transport)),
        route.timeout,
        &ctx.cancel,
        &shared.shutdown,
    )
    .await
    .map_err(|error| Failure::from_body(&id, error))?;
    Ok(start_stream(shared, ctx, grant, envelope, route, pending))
}

/// The request id (or [`UNKNOWN_REQUEST_ID`] when it is missing or invalid, for the error's envelope), the
/// versions, the `contract`'s shape and its `validate` check of a parsed request envelope, in that order.
fn decode_envelope<T: serde::de::DeserializeOwned>(
    value: Value,
    contract: &str,
    validate: fn(&T) -> Result<(), ErrorBody>,
) -> Result<(T, String), Failure> {
    let id = value
        .get("id")
        .and_then(Value::as_str)
        .filter(|id| is_valid_request_id(id))
        .unwrap_or(UNKNOWN_REQUEST_ID)
        .to_owned();
    check_versions(&value, &id)?;
    let envelope: T = serde_json::from_value(value).map_err(|_| {
        Failure::from_body(
            &id,
            ErrorBody::new(
                ErrorCode::InvalidRequest,
                format!("request does not match the {contract} contract"),
            ),
        )
    })?;
    validate(&envelope).map_err(|error| Failure::from_body(&id, error))?;
    Ok((envelope, id))
}

fn check_versions(value: &Value, id: &str) -> Result<(), Failure> {
    let protocol = value.get("protocolVersion").and_then(Value::as_u64);
    let surface = value.get("surfaceVersion").and_then(Value::as_u64);
    if value.is_object()
        && (protocol != Some(u64::from(PROTOCOL_VERSION))
            || surface != Some(u64::from(SURFACE_VERSION)))
    {
        return Err(Failure::from_body(
            id,
            ErrorBody::new(
                ErrorCode::UnsupportedVersion,
                format!("expected protocol {PROTOCOL_VERSION} and surface {SURFACE_VERSION}"),
            ),
        ));
    }
    Ok(())
}

/// Runs `work` until it ends, times out, is cancelled, or the server shuts down.
async fn guarded<T>(
    work: impl Future<Output = Result<T, ErrorBody>>,
    timeout: Duration,
    cancel: &CancellationToken,
    shutdown: &CancellationToken,
) -> Result<T, ErrorBody> {
    tokio::select! {
        outcome = work => outcome,
        () = tokio::time::sleep(timeout) => Err(ErrorBody::new(ErrorCode::Timeout, "request timed out").retriable(true)),
        () = cancel.cancelled() => Err(ErrorBody::new(ErrorCode::Cancelled, "request was cancelled").retriable(true)),
        () = shutdown.cancelled() => Err(ErrorBody::new(ErrorCode::Unavailable, "local-control server is stopping").retriable(true)),
    }
}

fn start_stream<S: Service>(
    shared: &Arc<Shared<S>>,
    ctx: RequestContext,
    grant: S::Grant,
    envelope: RequestEnvelope,
    route: Route,
    pending: PendingGuard,
) -> Response<ChannelBody> {
    let (tx, rx) = mpsc::channel::<Bytes>(16);
    let id = envelope.id.clone();
    let sink = StreamSink {
        tx: tx.clone(),
        request_id: id.clone(),
        sequence: 0,
    };
    let shared = shared.clone();
    tokio::spawn(async move {
        let _pending = pending;
        let _cancel_on_drop = ctx.cancel.clone().drop_guard();
        let work = shared.service.stream(&ctx, grant, envelope, sink);
        let outcome = guarded(work, route.timeout, &ctx.cancel, &shared.shutdown).await;
        let terminal = match outcome {
            Ok(result) => ResponseEnvelope::success(id.clone(), result),
            Err(error) => ResponseEnvelope::failure(id.clone(), error),
        };
        let mut line = serde_json::to_vec(&terminal).unwrap_or_default();
        if line.len() + 1 > MAX_STREAM_RECORD_BYTES {
            let failure = ErrorBody::new(
                ErrorCode::ResultTooLarge,
                "stream result exceeds its byte limit",
            );
            line = serde_json::to_vec(&ResponseEnvelope::failure(id, failure)).unwrap_or_default();
        }
        line.push(b'\n');
        let _ = tx.send(Bytes::from(line)).await;
    });
    let mut response = Response::new(ChannelBody::Channel(rx));
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-ndjson; charset=utf-8"),
    );
    headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    common_headers(headers);
    response
}

fn parse_upload_header(
    headers: &HeaderMap,
    json: json_limits::JsonLimits,
) -> Result<UploadRequestEnvelope, Failure> {
    let invalid = |message: &str| Failure::new(ErrorCode::InvalidRequest, message);
    let raw = singular(headers, UPLOAD_REQUEST_HEADER)?
        .ok_or_else(|| invalid("upload request header is missing"))?;
    if raw.is_empty()
        || raw.len() > MAX_UPLOAD_REQUEST_HEADER_BYTES
        || !raw
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        return Err(invalid("upload request header is invalid"));
    }
    let engine = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let decoded = engine
        .decode(raw)
        .map_err(|_| invalid("upload request header is not canonical base64url"))?;
    if engine.encode(&decoded) != raw {
        return Err(invalid("upload request header is not canonical base64url"));
    }
    let value = json_limits::parse(&decoded, json).map_err(|error| invalid(&error.to_string()))?;
    let (envelope, _) =
        decode_envelope::<UploadRequestEnvelope>(value, "upload", UploadRequestEnvelope::validate)?;
    Ok(envelope)
}

async fn handle_upload<S: Service>(
    request: Request<Incoming>,
    shared: &Arc<Shared<S>>,
    ctx: RequestContext,
) -> Result<Response<ChannelBody>, Failure> {
    let _cancel_on_drop = ctx.cancel.clone().drop_guard();
    let envelope = parse_upload_header(request.headers(), shared.limits.json)?;
    let id = envelope.id.clone();
    let fail =
        |code: ErrorCode, message: &str| Failure::from_body(&id, ErrorBody::new(code, message));
    let route = shared
        .service
        .route(&envelope.method)
        .filter(|route| route.transport == Transport::Upload)
        .ok_or_else(|| {
            fail(
                ErrorCode::NotFound,
                "method is not exposed by the cli surface",
            )
        })?;
    if envelope.upload.size > route.max_body_bytes {
        return Err(fail(
            ErrorCode::BodyTooLarge,
            "upload body exceeds the method's byte limit",
        ));
    }
    if let Some(length) = declared_length(request.headers())?
        && length != envelope.upload.size
    {
        {
            return Err(fail(
                ErrorCode::InvalidRequest,
                "content-length does not match the upload binding",
            ));
        }
    }
    let outcome = guarded(
        async {
            let grant = shared
                .service
                .authorize(&ctx, AuthorizeTarget::Upload(&envelope))
                .await?;
            // Only now is the body polled, which makes hyper send `100 Continue`.
            let file = receive_upload(request.into_body(), shared, &envelope, route.max_body_bytes)
                .await?;
            let path = file.path.clone();
            let result = shared
                .service
                .upload(&ctx, grant, envelope.clone(), file)
                .await;
            let _ = tokio::fs::remove_file(&path).await;
            result
        },
        route.timeout,
        &ctx.cancel,
        &shared.shutdown,
    )
    .await;
    Ok(match outcome {
        Ok(result) => json_response(200, &ResponseEnvelope::success(id, result)),
        Err(error) => failure_response(Failure::from_body(&id, error)),
    })
}

/// Removes the file when dropped unless disarmed: covers errors, timeouts, cancellation and shutdown alike.
struct TempFileGuard(Option<PathBuf>);

impl Drop for TempFileGuard {
    fn drop(&mut self) {
        if let Some(path) = self.0.take() {
            let _ = std::fs::remove_file(path);
        }
    }
}

async fn receive_upload<S: Service>(
    mut body: Incoming,
    shared: &Shared<S>,
    envelope: &UploadRequestEnvelope,
    max: u64,
) -> Result<UploadedFile, ErrorBody> {
    let internal = |_| ErrorBody::new(ErrorCode::InternalError, "upload body could not be stored");
    let mut suffix = [0u8; 16];
    getrandom::fill(&mut suffix)
        .map_err(|_| ErrorBody::new(ErrorCode::InternalError, "no randomness"))?;
    let name = format!(
        "upload-{}-{}.tmp",
        shared.next_upload.fetch_add(1, Ordering::Relaxed),
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(suffix)
    );
    let path = shared.temp_dir.join(name);
    let mut guard = TempFileGuard(Some(path.clone()));
    let mut file = tokio::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .await
        .map_err(internal)?;
    let mut hasher = Sha256::new();
    let mut size = 0u64;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|_| {
            ErrorBody::new(ErrorCode::InvalidRequest, "upload body could not be read")
        })?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        size += data.len() as u64;
        if size > max {
            return Err(ErrorBody::new(
                ErrorCode::BodyTooLarge,
                "upload body exceeds the method's byte limit",
            ));
        }
        if size > envelope.upload.size {
            return Err(ErrorBody::new(
                ErrorCode::InvalidRequest,
                "upload body does not match its binding",
            ));
        }
        hasher.update(&data);
        file.write_all(&data).await.map_err(internal)?;
    }
    file.sync_all().await.map_err(internal)?;
    drop(file);
    let sha256: String = hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    if size != envelope.upload.size || sha256 != envelope.upload.sha256 {
        return Err(ErrorBody::new(
            ErrorCode::InvalidRequest,
            "upload body does not match its binding",
        ));
    }
    guard.0 = None;
    Ok(UploadedFile { path, size, sha256 })
}

fn is_valid_artifact_id(id: &str) -> bool {
    (1..=128).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

async fn handle_download<S: Service>(
    request: Request<Incoming>,
    shared: &Arc<Shared<S>>,
    ctx: RequestContext,
    pending: PendingGuard,
) -> Result<Response<ChannelBody>, Failure> {
    let raw_id = request
        .uri()
        .path()
        .strip_prefix(ARTIFACT_PATH_PREFIX)
        .unwrap_or("");
    if !is_valid_artifact_id(raw_id) || request.uri().query().is_some() {
        return Err(Failure::new(
            ErrorCode::NotFound,
            "artifact endpoint was not found",
        ));
    }
    let artifact_id = raw_id.to_owned();
    let headers = request.headers();
    if headers.contains_key(header::TRANSFER_ENCODING)
        || declared_length(headers)?.is_some_and(|length| length != 0)
    {
        return Err(Failure::new(
            ErrorCode::InvalidRequest,
            "artifact downloads do not accept a request body",
        ));
    }
    let timeout = crate::limits::MAX_REQUEST_TIMEOUT;
    let download = guarded(
        async {
            let grant = shared
                .service
                .authorize(
                    &ctx,
                    AuthorizeTarget::Download {
                        artifact_id: &artifact_id,
                    },
                )
                .await?;
            shared
                .service
                .download(&ctx, grant, artifact_id.clone())
                .await
        },
        timeout,
        &ctx.cancel,
        &shared.shutdown,
    )
    .await
    .map_err(|error| Failure::from_body(UNKNOWN_REQUEST_ID, error))?;
    let invalid_header = || {
        Failure::new(
            ErrorCode::InternalError,
            "artifact metadata is not a valid header",
        )
    };
    let mut response_headers = HeaderMap::new();
    response_headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_str(&download.mime_type).map_err(|_| invalid_header())?,
    );
    response_headers.insert(header::CONTENT_LENGTH, HeaderValue::from(download.size));
    response_headers.insert(
        header::CONTENT_DISPOSITION,
        HeaderValue::from_str(&content_disposition(&download.filename))
            .map_err(|_| invalid_header())?,
    );
    response_headers.insert(
        ARTIFACT_ID_HEADER,
        HeaderValue::from_str(&download.id).map_err(|_| invalid_header())?,
    );
    response_headers.insert(
        CONTENT_SHA256_HEADER,
        HeaderValue::from_str(&download.sha256).map_err(|_| invalid_header())?,
    );
    common_headers(&mut response_headers);
    let (tx, rx) = mpsc::channel::<Bytes>(8);
    let mut reader = download.reader.take(download.size);
    let cancel = ctx.cancel.clone();
    let shutdown = shared.shutdown.clone();
    tokio::spawn(async move {
        let _pending = pending;
        let _cancel_on_drop = ctx.cancel.clone().drop_guard();
        let mut buffer = vec![0u8; 64 * 1024];
        loop {
            let read = tokio::select! {
                read = reader.read(&mut buffer) => read,
                () = cancel.cancelled() => break,
                () = shutdown.cancelled() => break,
            };
            match read {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if tx.send(Bytes::copy_from_slice(&buffer[..n])).await.is_err() {
                        break;
                    }
                }
            }
        }
    });
    let mut response = Response::new(ChannelBody::Channel(rx));
    *response.headers_mut() = response_headers;
    Ok(response)
}

/// `attachment; filename="<ascii>"; filename*=UTF-8''<percent-encoded>`, as DeepChat's `artifactContentDisposition`.
fn content_disposition(filename: &str) -> String {
    let ascii: String = filename
        .chars()
        .map(|c| {
            if (' '..='~').contains(&c) && c != '"' && c != '\\' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let mut encoded = String::new();
    for byte in filename.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~') {
            encoded.push(byte as char);
        } else {
            encoded.push_str(&format!("%{byte:02X}"));
        }
    }
    format!("attachment; filename=\"{ascii}\"; filename*=UTF-8''{encoded}")
}
