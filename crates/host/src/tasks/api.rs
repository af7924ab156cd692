//! The managed-task HTTP API: `POST /v1/tasks`, `GET /v1/tasks/{id}`, over HTTP/1.1 on a TCP listener that is
//! loopback unless the caller explicitly allows otherwise.
//!
//! Every request passes, in order: the `Host` check (the listener's own address, or `localhost:<port>` on
//! loopback; 403 `host_forbidden`, a DNS-rebinding defence), the `Origin` check (absent, or `http://` + an
//! accepted host; 403 `origin_forbidden`), then the bearer key (`Authorization: Bearer <key>`, SHA-256 of both
//! sides compared in constant time with `subtle`; 401 `unauthorized`). Connections are capped (one past the cap is
//! closed at once), request heads must arrive within the header-read timeout, bodies are bounded in bytes (chunked
//! bodies too) and in time. Errors are `{"error":{"code":"…","message":"…"}}` with a stable snake_case code.
//!
//! Source: issue 9 ("Managed tasks"); the shapes follow the AWP control plane's task API as the reference CLI
//! (`examples/openai-compatible-agent-cli/awp-agent-cli.mjs`) uses it, with the request body of issue 9.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use agentwire_process::CancellationToken;
use axum::Router;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures_util::StreamExt;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tokio::net::TcpListener;
use tokio::task::JoinSet;

use crate::ids::TaskId;
use crate::tasks::model::{TaskRequest, validate_idempotency_key};
use crate::tasks::service::TaskService;
use crate::tasks::store::{Submission, SubmitError};

/// Name of the environment variable holding the API key, for the server and for agents.
pub const API_KEY_VAR: &str = "AWP_CONTROL_PLANE_API_KEY";

/// The bearer key of the task API. Only its SHA-256 is kept; `Debug` never shows it.
#[derive(Clone)]
pub struct ApiKey {
    digest: [u8; 32],
}

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiKey(***)")
    }
}

/// Why the API key cannot be used; the task API does not start without a usable key.
#[non_exhaustive]
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ApiKeyError {
    /// No key (unset or empty).
    #[error("no api key: set AWP_CONTROL_PLANE_API_KEY")]
    Missing,
    /// Shorter than [`ApiKey::MIN_BYTES`], longer than [`ApiKey::MAX_BYTES`], or holding whitespace or controls.
    #[error("the api key must be 16 to 4096 bytes without whitespace or control characters")]
    Invalid,
}

impl ApiKeyError {
    /// Stable machine-readable code: `tasks_api_key_missing` or `tasks_api_key_invalid`.
    pub fn code(&self) -> &'static str {
        match self {
            ApiKeyError::Missing => "tasks_api_key_missing",
            ApiKeyError::Invalid => "tasks_api_key_invalid",
        }
    }
}

impl ApiKey {
    /// Shortest key accepted, in bytes (16).
    pub const MIN_BYTES: usize = 16;
    /// Longest key accepted, in bytes (4096).
    pub const MAX_BYTES: usize = 4096;

    /// A key from its text (e.g. `AWP_CONTROL_PLANE_API_KEY`).
    ///
    /// # Errors
    /// [`ApiKeyError::Missing`] for `None` or empty, [`ApiKeyError::Invalid`] otherwise when the rules are broken.
    pub fn new(key: Option<&str>) -> Result<Self, ApiKeyError> {
        let key = key.filter(|k| !k.is_empty()).ok_or(ApiKeyError::Missing)?;
        if key.len() < Self::MIN_BYTES
            || key.len() > Self::MAX_BYTES
            || key.chars().any(|c| c.is_whitespace() || c.is_control())
        {
            return Err(ApiKeyError::Invalid);
        }
        Ok(Self {
            digest: Sha256::digest(key.as_bytes()).into(),
        })
    }

    /// Whether `presented` is the key (hash both, compare in constant time).
    pub fn matches(&self, presented: &[u8]) -> bool {
        let digest: [u8; 32] = Sha256::digest(presented).into();
        digest.ct_eq(&self.digest).into()
    }
}

/// Bounds of the HTTP server. Every field documents its default and what happens past it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiConfig {
    /// Open connections at once. Default 64; a connection past it is closed as soon as it is accepted.
    pub max_connections: usize,
    /// Time for a request's head (request line and headers) to arrive, also between keep-alive requests.
    /// Default 10 s; past it the connection is closed.
    pub header_read_timeout: Duration,
    /// Time for a request body to arrive. Default 10 s; past it 408 `body_timeout`.
    pub body_read_timeout: Duration,
    /// Largest request body, in bytes, with or without `Content-Length`. Default 256 KiB (262 144); past it
    /// 413 `body_too_large`.
    pub max_body_bytes: usize,
    /// How long a stopping server waits for open connections to finish. Default 5 s.
    pub shutdown_grace: Duration,
}

impl Default for ApiConfig {
    fn default() -> Self {
        Self {
            max_connections: 64,
            header_read_timeout: Duration::from_secs(10),
            body_read_timeout: Duration::from_secs(10),
            max_body_bytes: 256 * 1024,
            shutdown_grace: Duration::from_secs(5),
        }
    }
}

/// Why the task API could not start listening.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum ListenError {
    /// The address is not loopback and non-loopback listening was not allowed.
    #[error("{0} is not a loopback address")]
    NotLoopback(SocketAddr),
    /// Binding failed.
    #[error("cannot listen on {addr}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The failure.
        #[source]
        source: std::io::Error,
    },
}

impl ListenError {
    /// Stable machine-readable code: `tasks_listen_not_loopback` or `tasks_listen_failed`.
    pub fn code(&self) -> &'static str {
        match self {
            ListenError::NotLoopback(_) => "tasks_listen_not_loopback",
            ListenError::Bind { .. } => "tasks_listen_failed",
        }
    }
}

/// A bound task API listener; [`TaskServer::serve`] runs it.
#[derive(Debug)]
pub struct TaskServer {
    listener: TcpListener,
    local_addr: SocketAddr,
}

impl TaskServer {
    /// Binds `addr` (port 0 picks a free port; see [`TaskServer::local_addr`]).
    ///
    /// # Errors
    /// [`ListenError::NotLoopback`] unless `addr` is loopback or `allow_non_loopback`; [`ListenError::Bind`].
    pub async fn bind(addr: SocketAddr, allow_non_loopback: bool) -> Result<Self, ListenError> {
        if !addr.ip().is_loopback() && !allow_non_loopback {
            return Err(ListenError::NotLoopback(addr));
        }
        let bind = |source| ListenError::Bind { addr, source };
        let listener = TcpListener::bind(addr).await.map_err(bind)?;
        let local_addr = listener.local_addr().map_err(bind)?;
        Ok(Self {
            listener,
            local_addr,
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Serves until `shutdown` is cancelled, then lets open connections finish (up to
    /// [`ApiConfig::shutdown_grace`]).
    pub async fn serve(
        self,
        service: TaskService,
        key: ApiKey,
        config: ApiConfig,
        shutdown: CancellationToken,
    ) {
        let app = App {
            service,
            key,
            hosts: accepted_hosts(self.local_addr),
            config: config.clone(),
        };
        let router = router(Arc::new(app));
        let permits = Arc::new(tokio::sync::Semaphore::new(config.max_connections));
        let mut connections = JoinSet::new();
        loop {
            while connections.try_join_next().is_some() {}
            let accepted = tokio::select! {
                () = shutdown.cancelled() => break,
                accepted = self.listener.accept() => accepted,
            };
            let stream = match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    // EMFILE and friends: pause briefly instead of spinning.
                    tracing::warn!(%error, "accepting a task api connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let Ok(permit) = Arc::clone(&permits).try_acquire_owned() else {
                tracing::warn!("task api connection cap reached; closing a new connection");
                drop(stream);
                continue;
            };
            let service = hyper_util::service::TowerToHyperService::new(router.clone());
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(config.header_read_timeout)
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
            let shutdown = shutdown.clone();
            connections.spawn(async move {
                let mut connection = std::pin::pin!(connection);
                let result = tokio::select! {
                    result = connection.as_mut() => result,
                    () = shutdown.cancelled() => {
                        connection.as_mut().graceful_shutdown();
                        connection.await
                    }
                };
                if let Err(error) = result {
                    tracing::debug!(%error, "task api connection ended with an error");
                }
                drop(permit);
            });
        }
        let drain = async { while connections.join_next().await.is_some() {} };
        if tokio::time::timeout(config.shutdown_grace, drain)
            .await
            .is_err()
        {
            connections.abort_all();
        }
    }
}

/// `Host` values accepted for a listener on `addr`.
fn accepted_hosts(addr: SocketAddr) -> Vec<String> {
    let mut hosts = vec![addr.to_string()];
    if addr.ip().is_loopback() {
        hosts.push(format!("localhost:{}", addr.port()));
    }
    hosts
}

#[derive(Debug)]
struct App {
    service: TaskService,
    key: ApiKey,
    hosts: Vec<String>,
    config: ApiConfig,
}

fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/v1/tasks", post(create_task))
        .route("/v1/tasks/{id}", get(show_task))
        .fallback(not_found)
        .with_state(app)
}

fn error(status: StatusCode, code: &str, message: impl std::fmt::Display) -> Response {
    let body = json!({"error": {"code": code, "message": message.to_string()}});
    let mut response = json_response(status, &body);
    if status == StatusCode::UNAUTHORIZED {
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    }
    response
}

fn json_response(status: StatusCode, body: &Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// A refusal before the handler's work: status, stable code, message (small, so `Result`s stay cheap).
#[derive(Debug)]
struct Failure {
    status: StatusCode,
    code: &'static str,
    message: String,
}

impl Failure {
    fn new(status: StatusCode, code: &'static str, message: impl std::fmt::Display) -> Self {
        Self {
            status,
            code,
            message: message.to_string(),
        }
    }
}

impl IntoResponse for Failure {
    fn into_response(self) -> Response {
        error(self.status, self.code, self.message)
    }
}

impl App {
    /// Host, then Origin, then the bearer key.
    fn guard(&self, headers: &HeaderMap) -> Result<(), Failure> {
        let host = headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .map(str::to_ascii_lowercase);
        if !host.is_some_and(|h| self.hosts.contains(&h)) {
            return Err(Failure::new(
                StatusCode::FORBIDDEN,
                "host_forbidden",
                "the host header does not name this server",
            ));
        }
        if let Some(origin) = headers.get(header::ORIGIN) {
            let allowed = origin.to_str().ok().is_some_and(|o| {
                let o = o.to_ascii_lowercase();
                self.hosts.iter().any(|h| o == format!("http://{h}"))
            });
            if !allowed {
                return Err(Failure::new(
                    StatusCode::FORBIDDEN,
                    "origin_forbidden",
                    "cross-origin requests are refused",
                ));
            }
        }
        let presented = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.as_bytes().strip_prefix(b"Bearer "));
        if !presented.is_some_and(|key| self.key.matches(key)) {
            return Err(Failure::new(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "a valid bearer key is required",
            ));
        }
        Ok(())
    }

    async fn read_body(&self, headers: &HeaderMap, body: Body) -> Result<Vec<u8>, Failure> {
        let max = self.config.max_body_bytes;
        let too_large = || {
            Failure::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "body_too_large",
                format!("the body is larger than {max} bytes"),
            )
        };
        let declared = headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|n| n > max as u64) {
            return Err(too_large());
        }
        let read = async {
            let mut stream = body.into_data_stream();
            let mut bytes = Vec::new();
            while let Some(chunk) = stream.next().await {
                let chunk = chunk.map_err(|_| {
                    Failure::new(
                        StatusCode::BAD_REQUEST,
                        "body_unreadable",
                        "the body could not be read",
                    )
                })?;
                if bytes.len() + chunk.len() > max {
                    return Err(too_large());
                }
                bytes.extend_from_slice(&chunk);
            }
            Ok(bytes)
        };
        tokio::time::timeout(self.config.body_read_timeout, read)
            .await
            .unwrap_or_else(|_| {
                Err(Failure::new(
                    StatusCode::REQUEST_TIMEOUT,
                    "body_timeout",
                    "the body did not arrive in time",
                ))
            })
    }
}

fn store_error(code: &str) -> Response {
    error(
        StatusCode::INTERNAL_SERVER_ERROR,
        code,
        "the task store failed",
    )
}

async fn create_task(State(app): State<Arc<App>>, headers: HeaderMap, body: Body) -> Response {
    if let Err(failure) = app.guard(&headers) {
        return failure.into_response();
    }
    let json_body = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.split(';')
                .next()
                .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"))
        });
    if !json_body {
        return error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "the body must be application/json",
        );
    }
    let limits = app.service.limits();
    let key = match validate_idempotency_key(
        headers.get("idempotency-key").map(HeaderValue::as_bytes),
        limits,
    ) {
        Ok(key) => key.to_owned(),
        Err(e) => return error(StatusCode::BAD_REQUEST, e.code(), &e),
    };
    let bytes = match app.read_body(&headers, body).await {
        Ok(bytes) => bytes,
        Err(failure) => return failure.into_response(),
    };
    let request = match TaskRequest::parse(&bytes, limits) {
        Ok(request) => request,
        Err(e) => return error(StatusCode::BAD_REQUEST, e.code(), &e),
    };
    match app.service.submit(key, request).await {
        Ok(Submission::Created(task)) => {
            let mut response = json_response(StatusCode::CREATED, &task.to_json());
            if let Ok(location) = HeaderValue::from_str(&format!("/v1/tasks/{}", task.id)) {
                response.headers_mut().insert(header::LOCATION, location);
            }
            response
        }
        Ok(Submission::Replayed(task)) => json_response(StatusCode::OK, &task.to_json()),
        Err(e @ SubmitError::Conflict { .. }) => error(StatusCode::CONFLICT, e.code(), &e),
        Err(e @ SubmitError::QueueFull { .. }) => {
            error(StatusCode::SERVICE_UNAVAILABLE, e.code(), &e)
        }
        Err(e) => {
            tracing::error!(code = e.code(), error = %e, "storing a task failed");
            store_error(e.code())
        }
    }
}

async fn show_task(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    if let Err(failure) = app.guard(&headers) {
        return failure.into_response();
    }
    let not_found = || error(StatusCode::NOT_FOUND, "task_not_found", "no such task");
    let Ok(id) = TaskId::parse(&id) else {
        return not_found();
    };
    match app.service.get(id).await {
        Ok(Some(task)) => json_response(StatusCode::OK, &task.to_json()),
        Ok(None) => not_found(),
        Err(e) => {
            tracing::error!(code = e.code(), error = %e, "reading a task failed");
            store_error(e.code())
        }
    }
}

async fn not_found(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    if let Err(failure) = app.guard(&headers) {
        return failure.into_response();
    }
    error(StatusCode::NOT_FOUND, "not_found", "no such endpoint")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_keys_are_bounded_and_compared_by_hash() {
        let check = |key: Option<&str>, expect: Result<(), &str>| {
            assert_eq!(
                ApiKey::new(key).map(|_| ()).map_err(|e| e.code()),
                expect,
                "{key:?}"
            );
        };
        check(None, Err("tasks_api_key_missing"));
        check(Some(""), Err("tasks_api_key_missing"));
        check(Some(&"k".repeat(15)), Err("tasks_api_key_invalid"));
        check(Some(&"k".repeat(16)), Ok(()));
        check(Some(&"k".repeat(4096)), Ok(()));
        check(Some(&"k".repeat(4097)), Err("tasks_api_key_invalid"));
        check(Some("0123456789abcdef "), Err("tasks_api_key_invalid"));
        let key = ApiKey::new(Some("0123456789abcdef-secret")).unwrap();
        assert!(key.matches(b"0123456789abcdef-secret"));
        assert!(!key.matches(b"0123456789abcdef-secreT"));
        assert!(!format!("{key:?}").contains("secret"));
    }

    #[test]
    fn accepted_hosts_name_the_listener() {
        let loopback: SocketAddr = "127.0.0.1:8100".parse().unwrap();
        assert_eq!(
            accepted_hosts(loopback),
            ["127.0.0.1:8100", "localhost:8100"]
        );
        let v6: SocketAddr = "[::1]:9".parse().unwrap();
        assert_eq!(accepted_hosts(v6), ["[::1]:9", "localhost:9"]);
        let other: SocketAddr = "10.0.0.2:80".parse().unwrap();
        assert_eq!(accepted_hosts(other), ["10.0.0.2:80"]);
    }
}
