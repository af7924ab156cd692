//! A peer that stops reading (a real Unix socket pair whose other end never reads): every call, cancel and close
//! stays bounded, and the socket is released.

mod support;

use std::time::Duration;

use agentwire_jsonrpc::{CallError, CloseReason, Config, Connection, Incoming, SendError};
use serde_json::{Value, json};
use support::within;
use tokio::io::AsyncReadExt;
use tokio::net::UnixStream;

/// A connection whose peer (returned) never reads, with an outgoing queue of 2 that is already full: the next send
/// blocks.
async fn stalled(config: Config) -> (Connection, Incoming, UnixStream) {
    let (ours, peer) = UnixStream::pair().expect("socket pair");
    let (read, write) = ours.into_split();
    let (connection, incoming) = Connection::new(
        read,
        write,
        Config {
            outgoing_queue: 2,
            ..config
        },
    );
    let big = Value::String("x".repeat(1024 * 1024));
    let mut blocked = false;
    // Socket buffers are far smaller than 64 MiB, so the queue fills long before the loop ends.
    for _ in 0..64 {
        let send = connection.notify("fill", Some(json!({ "data": big })));
        match tokio::time::timeout(Duration::from_millis(500), send).await {
            Ok(sent) => sent.expect("queued"),
            Err(_) => {
                blocked = true;
                break;
            }
        }
    }
    assert!(blocked, "the outgoing queue never filled");
    (connection, incoming, peer)
}

/// Waits (on socket readiness, no sleeps) until our end of the socket is gone: the peer's writes then fail.
async fn wait_until_released(peer: &UnixStream) {
    loop {
        peer.writable().await.expect("writable");
        match peer.try_write(b"\n") {
            Ok(_) => {}
            Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => return,
        }
    }
}

fn quick_close() -> Config {
    Config {
        close_flush_timeout: Duration::from_millis(200),
        ..Config::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn call_with_timeout_is_bounded_when_the_peer_stops_reading() {
    let (connection, _incoming, _peer) = stalled(Config::default()).await;
    let call = connection.call_with_timeout("x", None, Duration::from_millis(100));
    // The 100 ms timeout must elapse; only the hang guard (`within`, tens of seconds) bounds it from above.
    let got = within(call).await;
    assert!(matches!(got, Err(CallError::Timeout)), "{got:?}");
    assert_eq!(connection.pending_calls(), 0);
    assert_eq!(connection.stats().timeouts, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_call_timeout_covers_queueing_when_the_peer_stops_reading() {
    let config = Config {
        default_call_timeout: Some(Duration::from_millis(100)),
        ..Config::default()
    };
    let (connection, _incoming, _peer) = stalled(config).await;
    let got = within(connection.call("x", None)).await;
    assert!(matches!(got, Err(CallError::Timeout)), "{got:?}");
    assert_eq!(connection.pending_calls(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_does_not_block_when_the_peer_stops_reading() {
    let (ours, _peer) = UnixStream::pair().expect("socket pair");
    let (read, write) = ours.into_split();
    let config = Config {
        outgoing_queue: 2,
        ..Config::default()
    };
    let (connection, _incoming) = Connection::new(read, write, config);
    let mut call = within(connection.start_call("slow", None)).await.unwrap();
    let big = Value::String("x".repeat(1024 * 1024));
    loop {
        let send = connection.notify("fill", Some(json!({ "data": big })));
        if tokio::time::timeout(Duration::from_millis(500), send)
            .await
            .is_err()
        {
            break;
        }
    }
    // Not blocking is checked by the hang guard (`within`), not by a tight wall-clock bound.
    let cancelled = within(connection.cancel(&call.id())).await;
    assert!(matches!(cancelled, Ok(true)), "{cancelled:?}");
    assert!(matches!(within(&mut call).await, Err(CallError::Cancelled)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_with_a_stalled_peer_closes_at_once_and_releases_the_socket() {
    let (connection, _incoming, peer) = stalled(quick_close()).await;
    // A call that waits for room in the queue; close must fail it rather than leave it waiting.
    let mut waiting = Box::pin(connection.call("never_queued", None));
    assert!(futures_poll_once(waiting.as_mut()).await.is_none());
    let close = connection.close();
    tokio::pin!(close);
    // Polled once, then dropped as a caller's timeout would: the close goes on regardless.
    assert!(futures_poll_once(close.as_mut()).await.is_none());
    assert!(connection.is_closed());
    assert_eq!(connection.close_reason(), Some(CloseReason::Closed));
    assert!(matches!(
        within(connection.notify("after", None)).await,
        Err(SendError::ConnectionClosed)
    ));
    assert!(matches!(
        within(connection.call("after", None)).await,
        Err(CallError::ConnectionClosed)
    ));
    assert!(matches!(
        within(waiting).await,
        Err(CallError::ConnectionClosed)
    ));
    // The flush deadline passes without the peer reading: the writer drops the socket.
    within(wait_until_released(&peer)).await;
    within(close).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_call_fails_at_once_when_close_begins() {
    let (ours, _peer) = UnixStream::pair().expect("socket pair");
    let (read, write) = ours.into_split();
    let (connection, _incoming) = Connection::new(read, write, quick_close());
    let call = within(connection.start_call("slow", None)).await.unwrap();
    let closer = connection.clone();
    let close = tokio::spawn(async move { closer.close().await });
    assert!(matches!(
        within(call).await,
        Err(CallError::ConnectionClosed)
    ));
    within(close).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_releases_the_socket_of_a_stalled_peer_at_once() {
    // A flush deadline far beyond the test's bound: only abort can release the socket in time.
    let config = Config {
        close_flush_timeout: Duration::from_secs(3600),
        ..Config::default()
    };
    let (connection, _incoming, peer) = stalled(config).await;
    connection.abort();
    assert!(connection.is_closed());
    assert!(matches!(
        within(connection.notify("after", None)).await,
        Err(SendError::ConnectionClosed)
    ));
    within(wait_until_released(&peer)).await;
    // Waits for the writer task, which has already dropped the stream.
    within(connection.close()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_every_handle_releases_the_socket_of_a_stalled_peer() {
    let (connection, incoming, peer) = stalled(quick_close()).await;
    drop(connection);
    drop(incoming);
    within(wait_until_released(&peer)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_still_flushes_to_a_reading_peer() {
    let (ours, peer) = UnixStream::pair().expect("socket pair");
    let (read, write) = ours.into_split();
    let (connection, _incoming) = Connection::new(read, write, Config::default());
    for n in 0..100 {
        within(connection.notify("n", Some(json!({ "n": n }))))
            .await
            .unwrap();
    }
    let (mut peer_read, _peer_write) = peer.into_split();
    let reading = tokio::spawn(async move {
        let mut all = Vec::new();
        peer_read.read_to_end(&mut all).await.map(|_| all)
    });
    within(connection.close()).await;
    let all = within(reading).await.unwrap().unwrap();
    assert_eq!(all.iter().filter(|&&b| b == b'\n').count(), 100);
}

/// Polls `future` once: `Some(output)` when it finished at once.
async fn futures_poll_once<F: std::future::Future + Unpin>(future: F) -> Option<F::Output> {
    let mut future = future;
    std::future::poll_fn(|cx| {
        std::task::Poll::Ready(match std::pin::Pin::new(&mut future).poll(cx) {
            std::task::Poll::Ready(output) => Some(output),
            std::task::Poll::Pending => None,
        })
    })
    .await
}
