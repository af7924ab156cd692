//! The connection loop: accepts TCP connections under a cap, serves each with hyper's HTTP/1 server (WebSocket
//! upgrades included) under a header-read timeout, and shuts down gracefully.
//!
//! Replaces `axum::serve`, which has neither a connection cap nor a header-read timeout (issue 12, "Slow
//! clients"). Limits: [`ServerLimits`].

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// How long agentctl waits before accepting again after `accept` failed (for example `EMFILE`: out of file
/// descriptors), so a persistent failure does not spin.
pub const ACCEPT_ERROR_BACKOFF: Duration = Duration::from_millis(50);

/// How long the 503 answer to a connection over the cap may take to write, and then how long agentctl reads (and
/// discards) what the client sent, so closing does not reset the connection before the answer is read.
pub const REFUSAL_WRITE_TIMEOUT: Duration = Duration::from_secs(1);

/// Most bytes read and discarded from a refused connection before it is closed.
pub const REFUSAL_DRAIN_BYTES: u64 = 64 * 1024;

/// The connection limits (`AGENTCTL_HEADER_READ_TIMEOUT_MS`, `AGENTCTL_MAX_CONNECTIONS`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServerLimits {
    /// Time for a complete request head, counted from when the connection starts waiting for one (hyper's
    /// `header_read_timeout`): bounds slow headers and idle keep-alive connections. Default 30 s.
    pub header_read_timeout: Duration,
    /// Open connections at once, upgraded WebSockets included (the permit lives as long as the socket). One more
    /// is answered 503 and closed. Default 512.
    pub max_connections: usize,
}

impl Default for ServerLimits {
    fn default() -> Self {
        Self {
            header_read_timeout: Duration::from_secs(30),
            max_connections: 512,
        }
    }
}

/// Serves `router` on `listener` until `shutdown` is cancelled; then stops accepting, asks every connection to
/// finish its current request, and returns once they are closed (the caller bounds the wait).
pub async fn serve(
    listener: TcpListener,
    router: axum::Router,
    limits: ServerLimits,
    shutdown: CancellationToken,
) {
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let connections = TaskTracker::new();
    loop {
        let accepted = tokio::select! {
            () = shutdown.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        let tcp = match accepted {
            Ok((tcp, _peer)) => tcp,
            Err(error) => {
                tracing::warn!(%error, "accepting a connection failed");
                tokio::select! {
                    () = shutdown.cancelled() => break,
                    () = tokio::time::sleep(ACCEPT_ERROR_BACKOFF) => continue,
                }
            }
        };
        // Small request/response exchanges and stream frames must not wait for Nagle's algorithm.
        if let Err(error) = tcp.set_nodelay(true) {
            tracing::debug!(%error, "setting TCP_NODELAY failed");
        }
        match permits.clone().try_acquire_owned() {
            Ok(permit) => {
                connections.spawn(serve_connection(
                    CountedIo {
                        tcp,
                        _permit: permit,
                    },
                    router.clone(),
                    limits,
                    shutdown.clone(),
                ));
            }
            Err(_) => {
                connections.spawn(refuse(tcp, limits.max_connections));
            }
        }
    }
    connections.close();
    connections.wait().await;
}

async fn serve_connection(
    io: CountedIo,
    router: axum::Router,
    limits: ServerLimits,
    shutdown: CancellationToken,
) {
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    let connection = builder
        .serve_connection(TokioIo::new(io), TowerToHyperService::new(router))
        .with_upgrades();
    tokio::pin!(connection);
    let outcome = tokio::select! {
        outcome = connection.as_mut() => outcome,
        () = shutdown.cancelled() => {
            connection.as_mut().graceful_shutdown();
            connection.await
        }
    };
    if let Err(error) = outcome {
        tracing::debug!(%error, "connection ended with an error");
    }
}

/// Answers a connection over the cap with 503 and closes it, without reading its request.
async fn refuse(mut tcp: TcpStream, limit: usize) {
    tracing::warn!(
        limit,
        "refusing a connection: AGENTCTL_MAX_CONNECTIONS reached"
    );
    let body = serde_json::json!({
        "error": "unavailable",
        "message": "too many connections",
        "details": {"limit": limit},
        "http_status": 503,
    })
    .to_string();
    let response = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
         connection: close\r\n\r\n{body}",
        body.len()
    );
    let write = async {
        tcp.write_all(response.as_bytes()).await?;
        tcp.shutdown().await
    };
    // The client may be gone or not reading; the connection closes either way.
    if let Ok(Ok(())) = tokio::time::timeout(REFUSAL_WRITE_TIMEOUT, write).await {
        // Unread request bytes at close would make the kernel reset the connection, and the client could lose
        // the answer: read (bounded) until the client closes.
        let mut rest = (&mut tcp).take(REFUSAL_DRAIN_BYTES);
        let mut sink = tokio::io::sink();
        let drain = tokio::io::copy(&mut rest, &mut sink);
        let _ = tokio::time::timeout(REFUSAL_WRITE_TIMEOUT, drain).await;
    }
}

/// A TCP stream holding one connection permit: the permit is released when the stream is dropped, which for an
/// upgraded WebSocket is when the socket closes.
#[derive(Debug)]
struct CountedIo {
    tcp: TcpStream,
    _permit: OwnedSemaphorePermit,
}

impl AsyncRead for CountedIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_read(cx, buf)
    }
}

impl AsyncWrite for CountedIo {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.tcp).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.tcp).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_shutdown(cx)
    }
}
