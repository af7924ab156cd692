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
/// descriptors), so a persistent failure does not spin. Doubles with each failure in a row, up to
/// [`ACCEPT_ERROR_BACKOFF_MAX`].
pub const ACCEPT_ERROR_BACKOFF: Duration = Duration::from_millis(50);

/// The longest wait between two accepts while `accept` keeps failing.
pub const ACCEPT_ERROR_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// File descriptors agentctl keeps for itself besides connections: the listener, the agent's three pipes, files
/// served by `fs/*`, logs, the runtime. `AGENTCTL_MAX_CONNECTIONS` plus this above the `RLIMIT_NOFILE` soft limit is
/// warned about at boot.
pub const FD_RESERVE: u64 = 64;

/// The warning for a connection cap the process's file-descriptor limit cannot hold: `Some` when
/// `max_connections + FD_RESERVE` exceeds `soft_limit` (`None`: unlimited or unknown).
pub fn fd_limit_warning(max_connections: usize, soft_limit: Option<u64>) -> Option<String> {
    let soft = soft_limit?;
    let needed = u64::try_from(max_connections)
        .unwrap_or(u64::MAX)
        .saturating_add(FD_RESERVE);
    (needed > soft).then(|| {
        format!(
            "AGENTCTL_MAX_CONNECTIONS ({max_connections}) plus {FD_RESERVE} reserved descriptors exceeds the \
             open-file limit (RLIMIT_NOFILE soft limit {soft}): connections past it fail to be accepted (EMFILE); \
             raise the limit (ulimit -n) or lower AGENTCTL_MAX_CONNECTIONS"
        )
    })
}

/// Paces a run of failing `accept` calls: the wait doubles from [`ACCEPT_ERROR_BACKOFF`] to
/// [`ACCEPT_ERROR_BACKOFF_MAX`], and only the first failure of a run is logged (a WARN every 50 ms while out of
/// descriptors helps no one); the next success reports how many failed.
#[derive(Debug, Default)]
pub struct AcceptBackoff {
    failures: u64,
}

impl AcceptBackoff {
    /// After a failed accept: how long to wait, and whether this failure starts a run (log it).
    pub fn failed(&mut self) -> (Duration, bool) {
        self.failures = self.failures.saturating_add(1);
        let shift = u32::try_from(self.failures - 1).unwrap_or(u32::MAX).min(16);
        let wait = ACCEPT_ERROR_BACKOFF
            .saturating_mul(1 << shift)
            .min(ACCEPT_ERROR_BACKOFF_MAX);
        (wait, self.failures == 1)
    }

    /// After a successful accept: how many accepts failed in the run that just ended (`None`: no run).
    pub fn succeeded(&mut self) -> Option<u64> {
        let failures = std::mem::take(&mut self.failures);
        (failures > 0).then_some(failures)
    }
}

/// The `RLIMIT_NOFILE` soft limit, `None` when unlimited.
fn nofile_soft_limit() -> Option<u64> {
    rustix::process::getrlimit(rustix::process::Resource::Nofile).current
}

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
    if let Some(warning) = fd_limit_warning(limits.max_connections, nofile_soft_limit()) {
        tracing::warn!("{warning}");
    }
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let connections = TaskTracker::new();
    let mut backoff = AcceptBackoff::default();
    loop {
        let accepted = tokio::select! {
            () = shutdown.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        let tcp = match accepted {
            Ok((tcp, _peer)) => {
                if let Some(failures) = backoff.succeeded() {
                    tracing::info!(failures, "accepting connections again");
                }
                tcp
            }
            Err(error) => {
                let (wait, first) = backoff.failed();
                if first {
                    tracing::warn!(%error, "accepting a connection failed; retrying with backoff (logged once per run)");
                }
                tokio::select! {
                    () = shutdown.cancelled() => break,
                    () = tokio::time::sleep(wait) => continue,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fd_limit_warning_fires_one_past_the_boundary() {
        assert_eq!(fd_limit_warning(512, None), None);
        assert_eq!(fd_limit_warning(512, Some(512 + FD_RESERVE)), None);
        let warning = fd_limit_warning(512, Some(512 + FD_RESERVE - 1)).expect("warned");
        assert!(warning.contains("RLIMIT_NOFILE"), "{warning}");
        assert!(fd_limit_warning(usize::MAX, Some(u64::MAX - 1)).is_some());
    }

    #[test]
    fn accept_failures_back_off_and_log_once_per_run() {
        let mut backoff = AcceptBackoff::default();
        assert_eq!(backoff.succeeded(), None);
        assert_eq!(backoff.failed(), (ACCEPT_ERROR_BACKOFF, true));
        assert_eq!(backoff.failed(), (ACCEPT_ERROR_BACKOFF * 2, false));
        let mut last = Duration::ZERO;
        for _ in 0..100 {
            let (wait, log) = backoff.failed();
            assert!(!log);
            assert!(wait >= last && wait <= ACCEPT_ERROR_BACKOFF_MAX);
            last = wait;
        }
        assert_eq!(last, ACCEPT_ERROR_BACKOFF_MAX);
        assert_eq!(backoff.succeeded(), Some(102));
        assert_eq!(backoff.failed(), (ACCEPT_ERROR_BACKOFF, true));
    }
}
