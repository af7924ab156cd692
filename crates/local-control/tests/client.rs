//! The client against misbehaving servers: hung, dying mid-stream, out-of-order or foreign records, lying
//! status codes, nobody listening.

#![allow(clippy::unwrap_used)] // test helpers: a failed unwrap is a failed test

use std::path::PathBuf;
use std::time::Duration;

use agentwire_local_control::client::{Client, ClientError};
use agentwire_local_control::descriptor::Token;
use agentwire_local_control::envelope::{ErrorCode, RequestEnvelope};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixListener;

struct Fake {
    _dir: tempfile::TempDir,
    socket: PathBuf,
    listener: UnixListener,
}

impl Fake {
    fn new() -> Fake {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("fake.sock");
        let listener = UnixListener::bind(&socket).unwrap();
        Fake {
            _dir: dir,
            socket,
            listener,
        }
    }

    fn client(&self) -> Client {
        Client::new(&self.socket, Token::generate().unwrap())
    }

    /// Accepts one connection, reads the request head, writes `response` and, if `close`, closes.
    fn answer(
        self,
        response: Vec<u8>,
        close: bool,
    ) -> (
        PathBuf,
        Client,
        tokio::task::JoinHandle<()>,
        tempfile::TempDir,
    ) {
        let client = self.client();
        let socket = self.socket.clone();
        let listener = self.listener;
        let task = tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") {
                if stream.read(&mut byte).await.unwrap() == 0 {
                    return;
                }
                head.push(byte[0]);
            }
            // Read the body too: closing with unread bytes would reset the connection instead of ending it.
            let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
            let length = head
                .lines()
                .find_map(|line| line.strip_prefix("content-length: "))
                .and_then(|value| value.trim().parse::<usize>().ok())
                .unwrap_or(0);
            let mut body = vec![0u8; length];
            stream.read_exact(&mut body).await.unwrap();
            stream.write_all(&response).await.unwrap();
            if close {
                drop(stream);
            } else {
                std::future::pending::<()>().await;
            }
        });
        (socket, client, task, self._dir)
    }
}

fn envelope() -> RequestEnvelope {
    RequestEnvelope::new("r1", "test.count", json!({}))
}

fn record(sequence: u64, request_id: &str) -> String {
    format!(
        r#"{{"protocolVersion":1,"surfaceVersion":2,"sequence":{sequence},"timestamp":1,"requestId":"{request_id}","event":"e","data":null}}"#
    ) + "\n"
}

const TERMINAL: &str =
    "{\"protocolVersion\":1,\"surfaceVersion\":2,\"id\":\"r1\",\"ok\":true,\"result\":1}\n";

fn ndjson(body: &str) -> Vec<u8> {
    format!("HTTP/1.1 200 OK\r\ncontent-type: application/x-ndjson; charset=utf-8\r\nconnection: close\r\n\r\n{body}")
        .into_bytes()
}

async fn stream_error(response: Vec<u8>, close: bool, timeout: Duration) -> ClientError {
    let (_socket, client, _task, _dir) = Fake::new().answer(response, close);
    client
        .stream(&envelope(), timeout, |_| {})
        .await
        .unwrap_err()
}

#[tokio::test]
async fn a_server_that_accepts_and_never_answers_is_a_timeout() {
    let fake = Fake::new();
    let client = fake.client();
    let listener = fake.listener;
    let _hold = tokio::spawn(async move {
        let _connection = listener.accept().await.unwrap();
        std::future::pending::<()>().await;
    });
    let error = client
        .rpc(&envelope(), Duration::from_millis(200))
        .await
        .unwrap_err();
    assert!(matches!(error, ClientError::Timeout(_)), "{error}");
    assert_eq!(error.exit_code(), 7);
}

#[tokio::test]
async fn a_stream_that_stops_without_closing_is_a_timeout() {
    let error = stream_error(ndjson(&record(0, "r1")), false, Duration::from_millis(200)).await;
    assert_eq!(error.code(), ErrorCode::Timeout);
}

#[tokio::test]
async fn a_server_that_dies_mid_stream_is_unavailable() {
    // Close-delimited body: EOF after one record, no terminal line.
    let error = stream_error(ndjson(&record(0, "r1")), true, Duration::from_secs(20)).await;
    assert_eq!(error.code(), ErrorCode::Unavailable, "{error}");
    assert_eq!(error.exit_code(), 3);
    // Chunked body cut inside a chunk.
    let chunk = record(0, "r1");
    let cut = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/x-ndjson; charset=utf-8\r\ntransfer-encoding: chunked\r\n\r\n\
         {:x}\r\n{chunk}\r\n100\r\npartial",
        chunk.len()
    );
    let error = stream_error(cut.into_bytes(), true, Duration::from_secs(20)).await;
    assert_eq!(error.code(), ErrorCode::Unavailable, "{error}");
}

#[tokio::test]
async fn out_of_order_and_foreign_records_are_protocol_errors() {
    for body in [
        record(1, "r1") + TERMINAL,
        record(0, "r1") + &record(2, "r1") + TERMINAL,
        record(0, "someone-else") + TERMINAL,
        TERMINAL.to_owned() + &record(0, "r1"),
        TERMINAL.replace("\"r1\"", "\"r2\""),
    ] {
        let error = stream_error(ndjson(&body), true, Duration::from_secs(20)).await;
        assert!(matches!(error, ClientError::Protocol(_)), "{body}: {error}");
        assert_eq!(error.exit_code(), 8);
    }
    let (_socket, client, _task, _dir) =
        Fake::new().answer(ndjson(&(record(0, "r1") + TERMINAL)), true);
    let mut seen = 0;
    assert_eq!(
        client
            .stream(&envelope(), Duration::from_secs(20), |_| seen += 1)
            .await
            .unwrap(),
        json!(1)
    );
    assert_eq!(seen, 1);
}

#[tokio::test]
async fn a_remote_failure_terminal_carries_its_code() {
    let terminal = "{\"protocolVersion\":1,\"surfaceVersion\":2,\"id\":\"r1\",\"ok\":false,\
                    \"error\":{\"code\":\"unavailable\",\"message\":\"host is stopping\",\"retriable\":true}}\n";
    let error = stream_error(
        ndjson(&(record(0, "r1") + terminal)),
        true,
        Duration::from_secs(20),
    )
    .await;
    match error {
        ClientError::Remote { error, .. } => {
            assert_eq!(error.code, ErrorCode::Unavailable);
            assert!(error.retriable);
        }
        other => panic!("{other}"),
    }
}

fn json_response(status: &str, body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {status}\r\ncontent-type: application/json; charset=utf-8\r\ncontent-length: {}\r\n\
         connection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

#[tokio::test]
async fn rpc_answers_are_checked_against_status_and_id() {
    let failure = r#"{"protocolVersion":1,"surfaceVersion":2,"id":"unknown","ok":false,"error":{"code":"rate_limited","message":"busy","retriable":true}}"#;
    let cases: [(&str, String, ErrorCode); 5] = [
        (
            "200 OK",
            TERMINAL.trim().replace("\"r1\"", "\"r9\""),
            ErrorCode::InternalError,
        ),
        (
            "500 Internal Server Error",
            TERMINAL.trim().to_owned(),
            ErrorCode::InternalError,
        ),
        ("200 OK", failure.to_owned(), ErrorCode::InternalError),
        (
            "429 Too Many Requests",
            failure.to_owned(),
            ErrorCode::RateLimited,
        ),
        (
            "200 OK",
            "{\"ok\":true}".to_owned(),
            ErrorCode::InternalError,
        ),
    ];
    for (status, body, expected) in cases {
        let (_socket, client, _task, _dir) = Fake::new().answer(json_response(status, &body), true);
        let error = client
            .rpc(&envelope(), Duration::from_secs(20))
            .await
            .unwrap_err();
        assert_eq!(error.code(), expected, "{status} {body}: {error}");
    }
    let (_socket, client, _task, _dir) =
        Fake::new().answer(json_response("200 OK", TERMINAL.trim()), true);
    assert_eq!(
        client
            .rpc(&envelope(), Duration::from_secs(20))
            .await
            .unwrap(),
        json!(1)
    );
}

#[tokio::test]
async fn nobody_listening_is_unavailable() {
    let dir = tempfile::tempdir().unwrap();
    let client = Client::new(dir.path().join("missing.sock"), Token::generate().unwrap());
    let error = client
        .rpc(&envelope(), Duration::from_secs(20))
        .await
        .unwrap_err();
    assert_eq!(error.code(), ErrorCode::Unavailable);
    // A socket file whose listener is gone: connection refused.
    let path = dir.path().join("stale.sock");
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    let error = Client::new(&path, Token::generate().unwrap())
        .rpc(&envelope(), Duration::from_secs(20))
        .await
        .unwrap_err();
    assert_eq!(error.exit_code(), 3);
}

#[tokio::test]
async fn invalid_requests_are_refused_locally() {
    let fake = Fake::new();
    let error = fake
        .client()
        .rpc(
            &RequestEnvelope::new("bad id", "test.count", json!({})),
            Duration::from_secs(20),
        )
        .await
        .unwrap_err();
    assert_eq!(error.code(), ErrorCode::InvalidRequest);
    assert_eq!(error.exit_code(), 2);
}
