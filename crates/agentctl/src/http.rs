//! The HTTP + WebSocket surface: routes, handlers, the token check, and axum's rejections mapped to the error
//! shape of `protocols/agentctl.md`.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{DefaultBodyLimit, Query, Request, State};
use axum::http::header::{
    AUTHORIZATION, CONTENT_LENGTH, CONTENT_TYPE, HOST, ORIGIN, TRANSFER_ENCODING,
};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use serde::Deserialize;
use serde_json::value::RawValue;
use tokio::sync::broadcast;

use crate::App;
use crate::error::{ApiError, ErrorKind};
use crate::hub::{CLOSE_GOING_AWAY, CLOSE_NORMAL, CLOSE_POLICY, SubscriberRx};
use crate::relay::Relay;

/// How long a closing WebSocket gets to take its last frames and the close frame.
pub const CLOSE_GRACE: Duration = Duration::from_secs(10);

/// After our close frame went out, how long we wait for the client's close frame before dropping the connection
/// (RFC 6455 §7.1.1: the server should close the TCP connection after the closing handshake).
pub const CLOSE_REPLY_WAIT: Duration = Duration::from_secs(2);

/// The complete router, with the token check and the body limit.
pub fn router(app: Arc<App>) -> Router {
    let body_limit = app.config.max_message_bytes;
    Router::new()
        .route("/health", get(health))
        .route("/api/v1/status", get(status))
        .route("/api/v1/info", get(info))
        .route("/api/v1/start", post(start))
        .route("/api/v1/stop", post(stop))
        .route("/api/v1/acp/call", post(call))
        .route("/api/v1/acp/send", post(send))
        .route("/api/v1/acp/stream", get(acp_stream))
        .route("/api/v1/output", get(output))
        .route("/api/v1/output/stream", get(output_stream))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(
            app.clone(),
            read_body_with_idle_timeout,
        ))
        .layer(middleware::from_fn_with_state(
            app.clone(),
            refuse_oversized_content_length,
        ))
        .layer(middleware::from_fn_with_state(app.clone(), require_token))
        .layer(middleware::from_fn_with_state(
            app.clone(),
            refuse_cross_site,
        ))
        .layer(DefaultBodyLimit::max(body_limit))
        .with_state(app)
}

/// Refuses two `Host`, `Origin` or `Content-Type` headers with 400 `bad_request`, then refuses what a web page
/// could send to a loopback agentctl (issue 12, "Cross-site requests"), WebSocket upgrades
/// included, before the token check:
/// - an `Origin` header that is not a loopback origin (`http(s)://localhost`, `127.0.0.0/8`, `[::1]`, any port)
///   → 403 `forbidden`;
/// - when listening on a loopback address: a `Host` whose name is not `localhost`, a loopback IP or the listen
///   address (DNS rebinding) → 403 `forbidden`; behind a non-loopback address a token is required instead;
/// - a body (`Content-Length` > 0 or chunked) or a `Content-Type` that is not `application/json` → 415
///   `unsupported_media_type` (browsers send `text/plain` and form types without a preflight). A POST without
///   a body and without a content type (`curl -X POST …/start`) passes.
async fn refuse_cross_site(State(app): State<Arc<App>>, request: Request, next: Next) -> Response {
    let headers = request.headers();
    // Checking only the first of two would let the second decide elsewhere (RFC 9112 §3.2: two `Host` fields
    // get 400).
    for name in [HOST, ORIGIN, CONTENT_TYPE] {
        if headers.get_all(&name).iter().nth(1).is_some() {
            let mut response =
                ApiError::new(ErrorKind::BadRequest, format!("duplicate {name} header"))
                    .with_details(serde_json::json!({"header": name.as_str()}))
                    .into_response();
            response.headers_mut().insert(
                axum::http::header::CONNECTION,
                axum::http::HeaderValue::from_static("close"),
            );
            return response;
        }
    }
    if let Some(origin) = headers.get(ORIGIN)
        && !is_loopback_origin(origin.as_bytes())
    {
        return ApiError::new(ErrorKind::Forbidden, "cross-site request refused")
            .with_details(serde_json::json!({"reason": "origin", "origin": String::from_utf8_lossy(origin.as_bytes())}))
            .into_response();
    }
    if app.config.listen_host.is_loopback()
        && let Some(host) = headers.get(HOST)
        && !is_allowed_host(host.as_bytes(), app.config.listen_host)
    {
        return ApiError::new(
            ErrorKind::Forbidden,
            "request for another host refused (dns rebinding)",
        )
        .with_details(
            serde_json::json!({"reason": "host", "host": String::from_utf8_lossy(host.as_bytes())}),
        )
        .into_response();
    }
    let content_type = headers.get(CONTENT_TYPE);
    let has_body = headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim() != "0")
        || headers.contains_key(TRANSFER_ENCODING);
    if (content_type.is_some() || has_body)
        && !content_type.is_some_and(|v| is_json_media_type(v.as_bytes()))
    {
        return ApiError::new(
            ErrorKind::UnsupportedMediaType,
            "request bodies must be sent as content-type application/json",
        )
        .with_details(serde_json::json!({
            "content_type": content_type.map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned()),
        }))
        .into_response();
    }
    next.run(request).await
}

/// `application/json`, case-insensitive, with or without parameters (`; charset=utf-8`).
fn is_json_media_type(value: &[u8]) -> bool {
    let essence = value.split(|&b| b == b';').next().unwrap_or_default();
    essence
        .trim_ascii()
        .eq_ignore_ascii_case(b"application/json")
}

/// `http(s)://HOST[:PORT]` where HOST is loopback (see [`is_loopback_name`]).
fn is_loopback_origin(origin: &[u8]) -> bool {
    let Ok(origin) = std::str::from_utf8(origin) else {
        return false;
    };
    let Some(rest) = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
    else {
        return false;
    };
    is_loopback_name(strip_port(rest))
}

/// A `Host` header naming this server: a loopback name, or the listen address itself; the port is not checked
/// (a tunnel or port forward may change it).
fn is_allowed_host(host: &[u8], listen: std::net::IpAddr) -> bool {
    let Ok(host) = std::str::from_utf8(host) else {
        return false;
    };
    let name = strip_port(host.trim());
    is_loopback_name(name)
        || name
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip == listen)
}

/// `localhost` (or a name under `.localhost`, which resolvers keep on the loopback interface, RFC 6761 §6.3) or a
/// loopback IP literal (`127.0.0.0/8`, `[::1]`).
fn is_loopback_name(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    let lower = lower.strip_suffix('.').unwrap_or(&lower);
    if lower == "localhost" || lower.ends_with(".localhost") {
        return true;
    }
    let literal = lower
        .strip_prefix('[')
        .and_then(|l| l.strip_suffix(']'))
        .unwrap_or(lower);
    literal
        .parse::<std::net::IpAddr>()
        .is_ok_and(|ip| ip.is_loopback())
}

/// `name:port` → `name`; `[v6]:port` → `[v6]`; a bare name or `[v6]` unchanged.
fn strip_port(authority: &str) -> &str {
    if authority.starts_with('[') {
        return authority
            .find(']')
            .map_or(authority, |end| &authority[..=end]);
    }
    match authority.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => authority,
    }
}

/// The routes whose handlers read a body (`POST` only); every other request's body is never read.
const BODY_ROUTES: [&str; 3] = ["/api/v1/stop", "/api/v1/acp/call", "/api/v1/acp/send"];

/// Reads a request body completely before the handler runs (after the token check), refusing a body that pauses
/// longer than `AGENTCTL_IDLE_TIMEOUT_MS` between two pieces or is not complete `AGENTCTL_BODY_READ_TIMEOUT_MS`
/// after its head was read (408 and the connection closes), or grows past `AGENTCTL_MAX_MESSAGE_BYTES` (413).
/// Requests without a body pass untouched. A body sent to a route that takes none (`/health`, the `GET` routes,
/// unknown routes) is not read at all: the handler sees an empty body and the answer closes the connection, so an
/// unread body cannot hold it.
async fn read_body_with_idle_timeout(
    State(app): State<Arc<App>>,
    request: Request,
    next: Next,
) -> Response {
    let headers = request.headers();
    let has_body = headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim() != "0")
        || headers.contains_key(TRANSFER_ENCODING);
    if !has_body {
        return next.run(request).await;
    }
    if request.method() != axum::http::Method::POST || !BODY_ROUTES.contains(&request.uri().path())
    {
        let (parts, _unread) = request.into_parts();
        let mut response = next
            .run(Request::from_parts(parts, axum::body::Body::empty()))
            .await;
        response.headers_mut().insert(
            axum::http::header::CONNECTION,
            axum::http::HeaderValue::from_static("close"),
        );
        return response;
    }
    let idle = Duration::from_millis(app.config.idle_timeout_ms);
    let total = Duration::from_millis(app.config.body_read_timeout_ms);
    let deadline = tokio::time::Instant::now() + total;
    let limit = app.config.max_message_bytes;
    let (parts, body) = request.into_parts();
    let mut stream = body.into_data_stream();
    let mut collected = bytes::BytesMut::new();
    loop {
        let idle_deadline = tokio::time::Instant::now() + idle;
        match tokio::time::timeout_at(idle_deadline.min(deadline), stream.next()).await {
            Err(_) if idle_deadline < deadline => {
                return ApiError::new(
                    ErrorKind::RequestTimeout,
                    "the request body stalled longer than AGENTCTL_IDLE_TIMEOUT_MS",
                )
                .with_details(serde_json::json!({"idle_timeout_ms": app.config.idle_timeout_ms, "received_bytes": collected.len()}))
                .into_response();
            }
            Err(_) => {
                return ApiError::new(
                    ErrorKind::RequestTimeout,
                    "the request body was not complete within AGENTCTL_BODY_READ_TIMEOUT_MS",
                )
                .with_details(serde_json::json!({"body_read_timeout_ms": app.config.body_read_timeout_ms, "received_bytes": collected.len()}))
                .into_response();
            }
            Ok(None) => break,
            Ok(Some(Err(error))) => {
                return ApiError::new(
                    ErrorKind::BadRequest,
                    format!("reading the body failed: {error}"),
                )
                .into_response();
            }
            Ok(Some(Ok(chunk))) => {
                if collected.len().saturating_add(chunk.len()) > limit {
                    return ApiError::new(
                        ErrorKind::PayloadTooLarge,
                        "body is larger than AGENTCTL_MAX_MESSAGE_BYTES",
                    )
                    .with_details(serde_json::json!({"limit": limit}))
                    .into_response();
                }
                if collected.is_empty() {
                    collected.reserve(chunk.len());
                }
                collected.extend_from_slice(&chunk);
            }
        }
    }
    let request = Request::from_parts(parts, axum::body::Body::from(collected.freeze()));
    next.run(request).await
}

async fn require_token(State(app): State<Arc<App>>, request: Request, next: Next) -> Response {
    if let Some(token) = &app.token
        && request.uri().path() != "/health"
        && !token.allows(request.headers().get(AUTHORIZATION).map(|v| v.as_bytes()))
    {
        // Answered before the body is read; the unread body must not keep the connection.
        let mut response =
            ApiError::new(ErrorKind::Unauthorized, "missing or wrong bearer token").into_response();
        response.headers_mut().insert(
            axum::http::header::CONNECTION,
            axum::http::HeaderValue::from_static("close"),
        );
        return response;
    }
    next.run(request).await
}

/// Answers 413 from the `Content-Length` header alone when it announces more than `AGENTCTL_MAX_MESSAGE_BYTES`,
/// without waiting for a body that may never come. Bodies without the header are still cut at the limit while
/// they are read.
async fn refuse_oversized_content_length(
    State(app): State<Arc<App>>,
    request: Request,
    next: Next,
) -> Response {
    let announced = request
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|text| text.trim().parse::<u64>().ok());
    let limit = u64::try_from(app.config.max_message_bytes).unwrap_or(u64::MAX);
    if let Some(length) = announced
        && length > limit
    {
        return ApiError::new(
            ErrorKind::PayloadTooLarge,
            "body is larger than AGENTCTL_MAX_MESSAGE_BYTES",
        )
        .with_details(serde_json::json!({"content_length": length, "limit": limit}))
        .into_response();
    }
    next.run(request).await
}

async fn not_found(request: Request) -> ApiError {
    ApiError::new(
        ErrorKind::NotFound,
        format!("no route {}", request.uri().path()),
    )
}

async fn method_not_allowed(request: Request) -> ApiError {
    ApiError::new(
        ErrorKind::MethodNotAllowed,
        format!(
            "method {} not allowed on {}",
            request.method(),
            request.uri().path()
        ),
    )
}

fn now_rfc3339() -> String {
    humantime::format_rfc3339_millis(SystemTime::now()).to_string()
}

/// `GET /health` → `{"status":"ok","timestamp":"2026-01-01T00:00:00.000Z"}`.
async fn health() -> Json<serde_json::Value> {
    Json(serde_json::json!({"status": "ok", "timestamp": now_rfc3339()}))
}

/// `GET /api/v1/status`.
async fn status(State(app): State<Arc<App>>) -> Json<crate::agent::StatusView> {
    Json(app.supervisor.status())
}

/// `GET /api/v1/info` → version, agent command, workdir, port.
async fn info(State(app): State<Arc<App>>) -> Json<serde_json::Value> {
    Json(serde_json::json!({
        "name": "agentctl",
        "version": env!("CARGO_PKG_VERSION"),
        "agent_command": app.config.agent_command,
        "agent_argv": app.argv,
        "workdir": app.workdir,
        "listen_host": app.config.listen_host,
        "port": app.port,
        "auth": app.token.is_some(),
        "auto_approve_permissions": app.config.auto_approve_permissions,
        "request_timeout_ms": app.config.request_timeout_ms,
        "max_message_bytes": app.config.max_message_bytes,
    }))
}

/// `POST /api/v1/start` → the status after the spawn; 409 if it is already running.
async fn start(State(app): State<Arc<App>>) -> Result<Json<crate::agent::StatusView>, ApiError> {
    app.supervisor.start().map(Json)
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct StopBody {
    #[serde(default)]
    force: bool,
}

/// `POST /api/v1/stop {force?}` → the status after the exit; 409 if it is not running.
async fn stop(
    State(app): State<Arc<App>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<crate::agent::StatusView>, ApiError> {
    let body = body.map_err(body_rejection)?;
    let stop: StopBody = if body.iter().all(u8::is_ascii_whitespace) {
        StopBody::default()
    } else {
        parse_json(&body)?
    };
    app.supervisor.stop(stop.force).await.map(Json)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CallBody<'a> {
    method: String,
    #[serde(borrow, default)]
    params: Option<&'a RawValue>,
    #[serde(default)]
    timeout_ms: Option<u64>,
}

/// `POST /api/v1/acp/call {method, params, timeout_ms?}` → `{"result":…}` or `{"error":…}` as the agent sent it.
async fn call(
    State(app): State<Arc<App>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = body.map_err(body_rejection)?;
    reject_lone_surrogates(&body)?;
    let request: CallBody<'_> = parse_json(&body)?;
    if request.method.is_empty() {
        return Err(ApiError::new(
            ErrorKind::ValidationError,
            "method must not be empty",
        ));
    }
    let timeout = match request.timeout_ms {
        Some(0) => {
            return Err(ApiError::new(
                ErrorKind::ValidationError,
                "timeout_ms must be at least 1",
            ));
        }
        Some(ms) if ms > crate::config::MAX_DURATION_MS => {
            return Err(ApiError::new(
                ErrorKind::ValidationError,
                "timeout_ms must be at most 604800000 (7 days)",
            )
            .with_details(
                serde_json::json!({"timeout_ms": ms, "max": crate::config::MAX_DURATION_MS}),
            ));
        }
        Some(ms) => Duration::from_millis(ms),
        None => app.config.request_timeout(),
    };
    let pending = app.relay.begin_call(&request.method, request.params)?;
    drop(request);
    let reply = pending.wait(timeout).await?;
    Ok(([(CONTENT_TYPE, "application/json")], reply).into_response())
}

/// `POST /api/v1/acp/send` → `{"status":"sent"}` once queued for the agent.
async fn send(
    State(app): State<Arc<App>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let body = body.map_err(body_rejection)?;
    reject_lone_surrogates(&body)?;
    app.relay.send(&body)?;
    Ok(Json(serde_json::json!({"status": "sent"})))
}

/// `GET /api/v1/acp/stream` (WebSocket): every message from the agent, verbatim, one text frame each, written
/// from the one shared buffer the agent's line arrived in (see `ws.rs`).
async fn acp_stream(State(app): State<Arc<App>>, request: Request) -> Result<Response, ApiError> {
    let accept = crate::ws::accept_key(request.method(), request.headers()).map_err(|error| {
        ApiError::new(
            ErrorKind::BadRequest,
            format!("websocket upgrade required: {error}"),
        )
        .with_details(serde_json::json!({"code": error.code()}))
    })?;
    let rx = app.relay.subscribe()?;
    let relay = app.relay.clone();
    let max = app.config.max_message_bytes;
    let upgrade = hyper::upgrade::on(request);
    app.tracker.spawn(async move {
        match upgrade.await {
            Ok(upgraded) => {
                serve_acp_stream(hyper_util::rt::TokioIo::new(upgraded), rx, relay, max).await;
            }
            Err(error) => {
                tracing::debug!(%error, "websocket upgrade failed");
                relay.unsubscribe(rx.id);
            }
        }
    });
    axum::http::Response::builder()
        .status(axum::http::StatusCode::SWITCHING_PROTOCOLS)
        .header(axum::http::header::UPGRADE, "websocket")
        .header(axum::http::header::CONNECTION, "upgrade")
        .header(axum::http::header::SEC_WEBSOCKET_ACCEPT, accept)
        .body(axum::body::Body::empty())
        .map_err(|error| ApiError::new(ErrorKind::InternalError, error.to_string()))
}

async fn serve_acp_stream<S>(socket: S, mut rx: SubscriberRx, relay: Arc<Relay>, max: usize)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + 'static,
{
    use tokio::io::AsyncWriteExt as _;
    let (mut read, mut write) = tokio::io::split(socket);
    let (events_tx, mut events) = tokio::sync::mpsc::channel::<Option<crate::ws::ClientFrame>>(8);
    let reader = tokio::spawn(async move {
        loop {
            match crate::ws::read_client_frame(&mut read, max).await {
                Ok(crate::ws::ClientFrame::Ignored) => {}
                Ok(frame) => {
                    let close = frame == crate::ws::ClientFrame::Close;
                    if events_tx.send(Some(frame)).await.is_err() || close {
                        return;
                    }
                }
                Err(error) => {
                    tracing::debug!(%error, "acp stream: client connection ended");
                    // The stream task may be gone already.
                    let _ = events_tx.send(None).await;
                    return;
                }
            }
        }
    });
    let mut scratch = Vec::with_capacity(SMALL_FRAME_BYTES * 4);
    let mut client_gone = false;
    let mut client_closed = false;
    let abort = rx.abort_token();
    loop {
        tokio::select! {
            biased;
            () = abort.cancelled() => break,
            message = rx.recv() => {
                let Some(first) = message else { break };
                let send = send_batch(&mut write, &mut rx, first, &mut scratch);
                tokio::pin!(send);
                let sent = tokio::select! {
                    sent = &mut send => sent,
                    () = abort.cancelled() => matches!(tokio::time::timeout(CLOSE_GRACE, &mut send).await, Ok(true)),
                };
                if !sent {
                    client_gone = true;
                    break;
                }
            }
            event = events.recv() => match event {
                Some(Some(crate::ws::ClientFrame::Ping(payload))) => {
                    let pong = crate::ws::pong_frame(&payload);
                    if write.write_all(&pong).await.is_err() || write.flush().await.is_err() {
                        client_gone = true;
                        break;
                    }
                }
                Some(Some(crate::ws::ClientFrame::Close)) => {
                    client_closed = true;
                    break;
                }
                Some(Some(crate::ws::ClientFrame::Ignored)) => {}
                Some(None) | None => {
                    client_gone = true;
                    break;
                }
            },
        }
    }
    relay.unsubscribe(rx.id);
    if !client_gone {
        let (code, reason) = if client_closed {
            (CLOSE_NORMAL, "closed".to_owned())
        } else {
            rx.close_reason()
                .map_or((CLOSE_NORMAL, "closed".to_owned()), |r| (r.code, r.reason))
        };
        let frame = crate::ws::close_frame(code, &reason);
        let sent = tokio::time::timeout(CLOSE_GRACE, async {
            write.write_all(&frame).await?;
            write.flush().await
        })
        .await;
        if matches!(sent, Ok(Ok(()))) && !client_closed {
            // Wait (bounded) for the client's close so our frame is not lost to a reset (RFC 6455 §7.1.1).
            let _ = tokio::time::timeout(CLOSE_REPLY_WAIT, async {
                while let Some(Some(event)) = events.recv().await {
                    if event == crate::ws::ClientFrame::Close {
                        break;
                    }
                }
            })
            .await;
        }
    }
    // The peer may be gone; the socket closes when dropped either way.
    let _ = tokio::time::timeout(CLOSE_REPLY_WAIT, write.shutdown()).await;
    reader.abort();
}

/// Most messages written to a socket before one flush: queued messages go out in one write instead of one
/// syscall each.
pub const MAX_BATCH_MESSAGES: usize = 256;

/// Messages up to this size are copied into the batch buffer; larger ones are written straight from the shared
/// buffer (never copied per subscriber).
pub const SMALL_FRAME_BYTES: usize = 16 * 1024;

/// Writes `first` and whatever else is queued right now (up to [`MAX_BATCH_MESSAGES`]), then flushes once.
/// Returns whether the socket took them.
async fn send_batch<W: tokio::io::AsyncWrite + Unpin>(
    write: &mut W,
    rx: &mut SubscriberRx,
    first: axum::extract::ws::Utf8Bytes,
    scratch: &mut Vec<u8>,
) -> bool {
    use tokio::io::AsyncWriteExt as _;
    scratch.clear();
    let mut next = Some(first);
    let mut count = 0;
    while let Some(message) = next {
        let payload = message.as_str().as_bytes();
        crate::ws::frame_header(crate::ws::OP_TEXT, payload.len(), scratch);
        if payload.len() <= SMALL_FRAME_BYTES {
            scratch.extend_from_slice(payload);
        } else {
            if write.write_all(scratch).await.is_err() || write.write_all(payload).await.is_err() {
                return false;
            }
            scratch.clear();
        }
        count += 1;
        next = if count < MAX_BATCH_MESSAGES {
            rx.try_recv()
        } else {
            None
        };
    }
    if scratch.capacity() > SMALL_FRAME_BYTES * 64 {
        // A burst of small frames grew the buffer; do not keep it.
        let keep = std::mem::take(scratch);
        let ok = write.write_all(&keep).await.is_ok();
        *scratch = Vec::with_capacity(SMALL_FRAME_BYTES * 4);
        return ok && write.flush().await.is_ok();
    }
    write.write_all(scratch).await.is_ok() && write.flush().await.is_ok()
}

/// Sends a close frame, then waits (bounded) for the client's close so the frame is not lost to a reset.
async fn close(
    mut sink: futures_util::stream::SplitSink<WebSocket, Message>,
    mut stream: futures_util::stream::SplitStream<WebSocket>,
    code: u16,
    reason: &str,
) {
    let mut reason = reason.to_owned();
    while reason.len() > 123 {
        reason.pop();
    }
    let frame = CloseFrame {
        code,
        reason: reason.into(),
    };
    match tokio::time::timeout(CLOSE_GRACE, sink.send(Message::Close(Some(frame)))).await {
        Ok(Ok(())) => {}
        Ok(Err(_)) | Err(_) => return,
    }
    // The client may not answer; the frame is out either way.
    let _ = tokio::time::timeout(CLOSE_REPLY_WAIT, async {
        while let Some(Ok(message)) = stream.next().await {
            if matches!(message, Message::Close(_)) {
                break;
            }
        }
    })
    .await;
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct OutputQuery {
    #[serde(default)]
    last: Option<usize>,
}

/// `GET /api/v1/output?last=N` → `{"lines":[…],"total":K,"dropped":D}` (`total`: lines kept; `dropped`: lines
/// evicted since start).
async fn output(
    State(app): State<Arc<App>>,
    query: Result<Query<OutputQuery>, QueryRejection>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let Query(query) = query.map_err(query_rejection)?;
    let (lines, total) = app.output.snapshot(query.last);
    Ok(Json(
        serde_json::json!({"lines": lines, "total": total, "dropped": app.output.dropped()}),
    ))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct OutputStreamQuery {
    #[serde(default)]
    history: bool,
    #[serde(default)]
    history_count: Option<usize>,
}

/// `GET /api/v1/output/stream?history=true&history_count=N` (WebSocket): output lines as JSON text frames.
async fn output_stream(
    State(app): State<Arc<App>>,
    query: Result<Query<OutputStreamQuery>, QueryRejection>,
    upgrade: Result<WebSocketUpgrade, axum::extract::ws::rejection::WebSocketUpgradeRejection>,
) -> Result<Response, ApiError> {
    let Query(query) = query.map_err(query_rejection)?;
    let upgrade = upgrade.map_err(upgrade_rejection)?;
    if app.output.subscribers() >= app.config.max_subscribers {
        return Err(
            ApiError::new(ErrorKind::Unavailable, "too many output subscribers")
                .with_details(serde_json::json!({"limit": app.config.max_subscribers})),
        );
    }
    let history = if query.history {
        query.history_count.unwrap_or(usize::MAX)
    } else {
        0
    };
    let (lines, rx) = app.output.subscribe(history);
    let shutdown = app.shutdown.clone();
    let tracker = app.tracker.clone();
    Ok(upgrade.on_upgrade(move |socket| {
        tracker.track_future(serve_output_stream(socket, lines, rx, shutdown))
    }))
}

async fn serve_output_stream(
    socket: WebSocket,
    history: Vec<crate::output::OutputLine>,
    mut rx: broadcast::Receiver<crate::output::OutputLine>,
    shutdown: tokio_util::sync::CancellationToken,
) {
    let (mut sink, mut stream) = socket.split();
    for line in history {
        if sink
            .send(Message::Text(line_text(&line).into()))
            .await
            .is_err()
        {
            return;
        }
    }
    let (code, reason) = loop {
        tokio::select! {
            biased;
            () = shutdown.cancelled() => break (CLOSE_GOING_AWAY, "agentctl shutting down".to_owned()),
            line = rx.recv() => match line {
                Ok(line) => {
                    if sink.send(Message::Text(line_text(&line).into())).await.is_err() {
                        return;
                    }
                }
                Err(broadcast::error::RecvError::Lagged(missed)) => {
                    break (CLOSE_POLICY, format!("slow subscriber: fell {missed} lines behind"));
                }
                Err(broadcast::error::RecvError::Closed) => break (CLOSE_GOING_AWAY, "agentctl shutting down".to_owned()),
            },
            incoming = stream.next() => {
                if !matches!(incoming, Some(Ok(Message::Text(_) | Message::Binary(_) | Message::Ping(_) | Message::Pong(_)))) {
                    return;
                }
            }
        }
    };
    close(sink, stream, code, &reason).await;
}

fn line_text(line: &crate::output::OutputLine) -> String {
    serde_json::to_string(line).unwrap_or_default()
}

fn parse_json<'a, T: Deserialize<'a>>(body: &'a [u8]) -> Result<T, ApiError> {
    serde_json::from_slice(body).map_err(|error| match error.classify() {
        serde_json::error::Category::Data => {
            ApiError::new(ErrorKind::ValidationError, format!("invalid body: {error}"))
        }
        _ => ApiError::new(ErrorKind::BadRequest, format!("malformed json: {error}")),
    })
}

/// Refuses a body whose JSON strings contain an unpaired surrogate escape (`"\ud800"`) with 400 `bad_request`.
///
/// Such text is not valid Unicode (RFC 8259 §8.2): forwarded verbatim, the agent answers a parse error with id
/// `null` and the call would wait for its whole timeout. Bodies without any `\u` escape skip the full parse.
fn reject_lone_surrogates(body: &[u8]) -> Result<(), ApiError> {
    if !body.windows(2).any(|pair| pair == b"\\u") {
        return Ok(());
    }
    match serde_json::from_slice::<serde_json::Value>(body) {
        Err(error) if error.classify() == serde_json::error::Category::Syntax => Err(
            ApiError::new(ErrorKind::BadRequest, format!("malformed json: {error}")),
        ),
        // Other failures are reported (with the usual codes) by the parse that follows.
        Ok(_) | Err(_) => Ok(()),
    }
}

fn body_rejection(rejection: BytesRejection) -> ApiError {
    if rejection.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
        ApiError::new(
            ErrorKind::PayloadTooLarge,
            "body is larger than AGENTCTL_MAX_MESSAGE_BYTES",
        )
    } else {
        ApiError::new(
            ErrorKind::BadRequest,
            format!("reading the body failed: {}", rejection.body_text()),
        )
    }
}

fn query_rejection(rejection: QueryRejection) -> ApiError {
    ApiError::new(
        ErrorKind::BadRequest,
        format!("bad query string: {}", rejection.body_text()),
    )
}

fn upgrade_rejection(
    rejection: axum::extract::ws::rejection::WebSocketUpgradeRejection,
) -> ApiError {
    ApiError::new(
        ErrorKind::BadRequest,
        format!("websocket upgrade required: {}", rejection.body_text()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_origins_pass_foreign_ones_do_not() {
        for origin in [
            "http://localhost",
            "http://localhost:3000",
            "https://LOCALHOST:443",
            "http://127.0.0.1:9999",
            "http://127.1.2.3",
            "http://[::1]:8080",
            "http://app.localhost:5173",
        ] {
            assert!(is_loopback_origin(origin.as_bytes()), "{origin}");
        }
        for origin in [
            "null",
            "http://evil.example",
            "http://localhost.evil.example",
            "http://127.0.0.1.evil.example",
            "file://",
            "http://10.0.0.1",
            "http://[::2]",
            "ws://localhost",
            "",
        ] {
            assert!(!is_loopback_origin(origin.as_bytes()), "{origin}");
        }
    }

    #[test]
    fn hosts_must_name_this_loopback_server() {
        let listen: std::net::IpAddr = "127.0.0.1".parse().unwrap();
        for host in [
            "localhost:9999",
            "127.0.0.1:9999",
            "127.0.0.1",
            "[::1]:9999",
            "localhost",
        ] {
            assert!(is_allowed_host(host.as_bytes(), listen), "{host}");
        }
        for host in [
            "evil.example:9999",
            "evil.example",
            "192.168.1.1:9999",
            "localhost.evil:9999",
        ] {
            assert!(!is_allowed_host(host.as_bytes(), listen), "{host}");
        }
    }

    #[test]
    fn only_json_media_types_pass() {
        for value in [
            "application/json",
            "Application/JSON; charset=utf-8",
            " application/json ",
        ] {
            assert!(is_json_media_type(value.as_bytes()), "{value}");
        }
        for value in [
            "text/plain",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
            "application/jsonx",
            "",
        ] {
            assert!(!is_json_media_type(value.as_bytes()), "{value}");
        }
    }
}
