//! Shared helpers of the integration tests: transports (memory, Unix socket, OS pipes), a raw line peer, waits.

#![allow(dead_code)]

use std::future::Future;
use std::time::Duration;

use agentwire_jsonrpc::{
    Config, Connection, Incoming, IncomingMessage, IncomingRequest, Notification,
};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};

/// Generous bound on every wait: a test that needs it has hung.
pub const WAIT: Duration = Duration::from_secs(30);

/// Awaits `future`, failing the test if it takes longer than [`WAIT`].
pub async fn within<F: Future>(future: F) -> F::Output {
    match tokio::time::timeout(WAIT, future).await {
        Ok(output) => output,
        Err(_) => panic!("timed out after {WAIT:?}"),
    }
}

/// The byte streams a connection pair can run over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// `Connection::memory` (tokio duplex).
    Memory,
    /// A real socket pair (`UnixStream::pair`).
    UnixSocket,
    /// Two real OS pipes, one per direction.
    OsPipes,
}

pub const TRANSPORTS: [Transport; 3] =
    [Transport::Memory, Transport::UnixSocket, Transport::OsPipes];

pub type End = (Connection, Incoming);

/// A connected pair over `transport`: side `a` with `a_config`, side `b` with `b_config`.
pub fn pair(transport: Transport, a_config: Config, b_config: Config) -> (End, End) {
    match transport {
        Transport::Memory if a_config == b_config => Connection::memory(a_config),
        Transport::Memory => {
            let (a, b) = tokio::io::duplex(64 * 1024);
            let (ar, aw) = tokio::io::split(a);
            let (br, bw) = tokio::io::split(b);
            (
                Connection::new(ar, aw, a_config),
                Connection::new(br, bw, b_config),
            )
        }
        Transport::UnixSocket => {
            let (a, b) = UnixStream::pair().expect("socket pair");
            let (ar, aw) = a.into_split();
            let (br, bw) = b.into_split();
            (
                Connection::new(ar, aw, a_config),
                Connection::new(br, bw, b_config),
            )
        }
        Transport::OsPipes => {
            let (a_to_b_tx, a_to_b_rx) = tokio::net::unix::pipe::pipe().expect("pipe");
            let (b_to_a_tx, b_to_a_rx) = tokio::net::unix::pipe::pipe().expect("pipe");
            (
                Connection::new(b_to_a_rx, a_to_b_tx, a_config),
                Connection::new(a_to_b_rx, b_to_a_tx, b_config),
            )
        }
    }
}

/// The next message, failing the test when the stream ends or nothing comes within [`WAIT`].
pub async fn next(incoming: &mut Incoming) -> IncomingMessage {
    within(incoming.next()).await.expect("incoming ended")
}

/// The next message, which must be a request.
pub async fn next_request(incoming: &mut Incoming) -> IncomingRequest {
    match next(incoming).await {
        IncomingMessage::Request(request) => request,
        IncomingMessage::Notification(n) => panic!("expected a request, got notification {n:?}"),
    }
}

/// The next message, which must be a notification.
pub async fn next_notification(incoming: &mut Incoming) -> Notification {
    match next(incoming).await {
        IncomingMessage::Notification(notification) => notification,
        IncomingMessage::Request(r) => panic!("expected a notification, got request {r:?}"),
    }
}

/// Answers every request with `{"method": …, "params": …}` until the stream ends; notifications are ignored.
pub fn spawn_echo(mut incoming: Incoming) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        while let Some(message) = incoming.next().await {
            if let IncomingMessage::Request(mut request) = message {
                let answer = serde_json::json!({ "method": request.method, "params": request.params.take() });
                if request.respond(Ok(answer)).await.is_err() {
                    return;
                }
            }
        }
    })
}

/// The far end of a Unix socket, speaking raw lines: for sending what a `Connection` never would.
pub struct RawPeer {
    reader: BufReader<OwnedReadHalf>,
    writer: OwnedWriteHalf,
}

impl RawPeer {
    /// A connection with `config` and a raw peer on the other end of a socket pair.
    pub fn pair(config: Config) -> (End, RawPeer) {
        let (a, b) = UnixStream::pair().expect("socket pair");
        let (ar, aw) = a.into_split();
        let (br, bw) = b.into_split();
        (
            Connection::new(ar, aw, config),
            RawPeer {
                reader: BufReader::new(br),
                writer: bw,
            },
        )
    }

    /// Writes `bytes` as they are.
    pub async fn send_raw(&mut self, bytes: &[u8]) {
        within(self.writer.write_all(bytes))
            .await
            .expect("raw write");
    }

    /// Writes `line` and a `\n`.
    pub async fn send(&mut self, line: &str) {
        let mut bytes = line.as_bytes().to_vec();
        bytes.push(b'\n');
        self.send_raw(&bytes).await;
    }

    /// Reads one line and parses it as JSON.
    pub async fn recv(&mut self) -> Value {
        let mut line = String::new();
        let n = within(self.reader.read_line(&mut line))
            .await
            .expect("raw read");
        assert!(n > 0, "raw peer: unexpected EOF");
        assert!(line.ends_with('\n'), "raw peer: line without newline");
        serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("raw peer got non-JSON {line:?}: {e}"))
    }

    /// Reads until EOF and returns the number of bytes read.
    pub async fn read_to_eof(&mut self) -> usize {
        let mut rest = Vec::new();
        within(tokio::io::AsyncReadExt::read_to_end(
            &mut self.reader,
            &mut rest,
        ))
        .await
        .expect("raw read")
    }

    /// Splits back into the halves (to drop one).
    pub fn into_parts(self) -> (BufReader<OwnedReadHalf>, OwnedWriteHalf) {
        (self.reader, self.writer)
    }
}
