//! A raw peer on a real Unix socket sends what a well-behaved `Connection` never would: garbage lines, invalid
//! requests, batches, wrong versions, broken responses, over-long lines. The connection answers each as the spec
//! says and keeps working.

mod support;

use agentwire_jsonrpc::{CallError, Config, IncomingMessage, Stats};
use serde_json::{Value, json};
use support::{RawPeer, within};

/// Serves `incoming`: answers `ping` with `"pong"`, forwards notifications' methods to `seen`.
fn serve(
    mut incoming: agentwire_jsonrpc::Incoming,
) -> (
    tokio::task::JoinHandle<()>,
    tokio::sync::mpsc::UnboundedReceiver<String>,
) {
    let (seen_tx, seen_rx) = tokio::sync::mpsc::unbounded_channel();
    let task = tokio::spawn(async move {
        while let Some(message) = incoming.next().await {
            match message {
                IncomingMessage::Request(request) => {
                    let answer = if request.method == "ping" {
                        Ok(json!("pong"))
                    } else {
                        Err(agentwire_jsonrpc::ErrorObject::method_not_found(
                            &request.method,
                        ))
                    };
                    if request.respond(answer).await.is_err() {
                        return;
                    }
                }
                IncomingMessage::Notification(n) => {
                    let _ = seen_tx.send(n.method);
                }
            }
        }
    });
    (task, seen_rx)
}

/// Sends `input` (one line, or raw bytes when it does not end in a newline it gets one), then a `ping` request with
/// a fresh id as a sentinel, and checks that what comes back is `expect` (the answer to `input`, if any) followed by
/// the sentinel's `"pong"`. The sentinel proves that an input expecting no answer got none.
async fn check(peer: &mut RawPeer, sentinel: &mut i64, input: &[u8], expect: Option<Value>) {
    let mut bytes = input.to_vec();
    if bytes.last() != Some(&b'\n') {
        bytes.push(b'\n');
    }
    peer.send_raw(&bytes).await;
    *sentinel += 1;
    let id = format!("sentinel-{sentinel}");
    peer.send(&json!({"jsonrpc": "2.0", "id": id, "method": "ping"}).to_string())
        .await;
    if let Some(expect) = expect {
        let got = peer.recv().await;
        assert_eq!(
            strip_data(got),
            expect,
            "answer to {}",
            String::from_utf8_lossy(input)
        );
    }
    let got = peer.recv().await;
    assert_eq!(
        got,
        json!({"jsonrpc": "2.0", "id": id, "result": "pong"}),
        "after {}",
        String::from_utf8_lossy(input)
    );
}

/// Error `data` carries parser detail that is not part of the contract; the code, message and id are.
fn strip_data(mut value: Value) -> Value {
    if let Some(error) = value.get_mut("error").and_then(Value::as_object_mut) {
        error.remove("data");
    }
    value
}

fn error(id: Value, code: i32, message: &str) -> Option<Value> {
    Some(json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_is_answered_per_spec_and_the_connection_survives() {
    let ((connection, incoming), mut peer) = RawPeer::pair(Config::default());
    let (_server, mut seen) = serve(incoming);
    let mut s = 0;
    let p = &mut peer;
    // Not JSON: -32700 with id null.
    check(
        p,
        &mut s,
        b"Starting agent v1.2 ...",
        error(json!(null), -32700, "parse error"),
    )
    .await;
    check(
        p,
        &mut s,
        b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":",
        error(json!(null), -32700, "parse error"),
    )
    .await;
    check(
        p,
        &mut s,
        b"\xff\xfe binary \x00",
        error(json!(null), -32700, "parse error"),
    )
    .await;
    // Valid JSON, invalid request: -32600, with the id when it can be read.
    let invalid = "invalid request";
    check(
        p,
        &mut s,
        br#"{"jsonrpc":"1.0","id":7,"method":"m"}"#,
        error(json!(7), -32600, invalid),
    )
    .await;
    check(
        p,
        &mut s,
        br#"{"id":"x","method":"m"}"#,
        error(json!("x"), -32600, invalid),
    )
    .await;
    check(
        p,
        &mut s,
        br#"{"jsonrpc":"2.0","id":8,"method":42}"#,
        error(json!(8), -32600, invalid),
    )
    .await;
    check(
        p,
        &mut s,
        br#"{"jsonrpc":"2.0","id":9,"method":"m","params":"scalar"}"#,
        error(json!(9), -32600, invalid),
    )
    .await;
    check(
        p,
        &mut s,
        br#"{"jsonrpc":"2.0","id":1.5,"method":"m"}"#,
        error(json!(null), -32600, invalid),
    )
    .await;
    check(
        p,
        &mut s,
        br#"{"jsonrpc":"2.0","id":null,"method":"m"}"#,
        error(json!(null), -32600, invalid),
    )
    .await;
    check(
        p,
        &mut s,
        br#""just a string""#,
        error(json!(null), -32600, invalid),
    )
    .await;
    check(
        p,
        &mut s,
        br#"{"jsonrpc":"2.0"}"#,
        error(json!(null), -32600, invalid),
    )
    .await;
    // Batches: one -32600 for the whole batch.
    let batch = "batch requests are not supported";
    check(
        p,
        &mut s,
        br#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#,
        error(json!(null), -32600, batch),
    )
    .await;
    check(p, &mut s, b"[]", error(json!(null), -32600, batch)).await;
    // Response-like garbage is never answered (no error ping-pong) and matches no call.
    check(
        p,
        &mut s,
        br#"{"jsonrpc":"2.0","id":77,"result":1,"error":{"code":1,"message":"x"}}"#,
        None,
    )
    .await;
    check(
        p,
        &mut s,
        br#"{"jsonrpc":"2.0","id":null,"result":1}"#,
        None,
    )
    .await;
    // Responses to ids we never issued: dropped and counted; an error with id null: counted.
    check(
        p,
        &mut s,
        br#"{"jsonrpc":"2.0","id":12345,"result":{}}"#,
        None,
    )
    .await;
    check(
        p,
        &mut s,
        br#"{"jsonrpc":"2.0","id":"theirs","result":{}}"#,
        None,
    )
    .await;
    check(
        p,
        &mut s,
        br#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error"}}"#,
        None,
    )
    .await;
    // Blank lines are skipped; CRLF is accepted.
    check(p, &mut s, b"\n   \n", None).await;
    check(
        p,
        &mut s,
        b"{\"jsonrpc\":\"2.0\",\"method\":\"crlf\"}\r\n",
        None,
    )
    .await;
    // An unknown method is the application's business: here -32601.
    let unknown =
        Some(json!({"jsonrpc":"2.0","id":3,"error":{"code":-32601,"message":"method not found"}}));
    check(
        p,
        &mut s,
        br#"{"jsonrpc":"2.0","id":3,"method":"nope"}"#,
        unknown,
    )
    .await;

    assert_eq!(within(seen.recv()).await.as_deref(), Some("crlf"));
    let stats = connection.stats();
    let mut want = Stats::default();
    want.invalid_lines = 3;
    want.invalid_messages = 10;
    want.batches_rejected = 2;
    // Two valid responses to unknown ids, and the broken one with id 77 (also an invalid message).
    want.unknown_responses = 3;
    want.null_id_errors = 1;
    assert_eq!(stats, want);
    // And the connection still calls out.
    let call = tokio::spawn(async move { connection.call("still_alive", None).await });
    let request = peer.recv().await;
    assert_eq!(request["method"], "still_alive");
    peer.send(&json!({"jsonrpc":"2.0","id": request["id"], "result": "yes"}).to_string())
        .await;
    assert_eq!(within(call).await.unwrap().unwrap(), json!("yes"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_response_fails_its_call_instead_of_hanging() {
    let ((connection, _incoming), mut peer) = RawPeer::pair(Config::default());
    let call = tokio::spawn({
        let connection = connection.clone();
        async move { connection.call("m", None).await }
    });
    let request = peer.recv().await;
    let id = request["id"].clone();
    peer.send(
        &json!({"jsonrpc":"2.0","id": id, "result": 1, "error": {"code": 1, "message": "x"}})
            .to_string(),
    )
    .await;
    let error = within(call).await.unwrap().unwrap_err();
    assert!(matches!(error, CallError::InvalidResponse(_)), "{error:?}");
    assert_eq!(error.code(), "invalid_response");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_error_codes_reach_the_caller_unchanged() {
    let ((connection, _incoming), mut peer) = RawPeer::pair(Config::default());
    let call = tokio::spawn({
        let connection = connection.clone();
        async move { connection.call("m", None).await }
    });
    let id = peer.recv().await["id"].clone();
    let answer = json!({"jsonrpc":"2.0","id": id, "error": {"code": -32000, "message": "auth required", "data": [1]}});
    peer.send(&answer.to_string()).await;
    let error = within(call).await.unwrap().unwrap_err();
    let rpc = error.rpc().expect("rpc error");
    assert_eq!(
        (rpc.code.0, rpc.message.as_str(), rpc.data.clone()),
        (-32000, "auth required", Some(json!([1])))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_request_id_in_flight_is_rejected() {
    let ((connection, mut incoming), mut peer) = RawPeer::pair(Config::default());
    peer.send(r#"{"jsonrpc":"2.0","id":5,"method":"first"}"#)
        .await;
    let first = match within(incoming.next()).await {
        Some(IncomingMessage::Request(r)) => r,
        other => panic!("{other:?}"),
    };
    peer.send(r#"{"jsonrpc":"2.0","id":5,"method":"second"}"#)
        .await;
    let rejected = peer.recv().await;
    assert_eq!(rejected["id"], 5);
    assert_eq!(rejected["error"]["code"], -32600);
    assert_eq!(connection.stats().duplicate_request_ids, 1);
    first.respond(Ok(json!("first"))).await.unwrap();
    assert_eq!(
        peer.recv().await,
        json!({"jsonrpc":"2.0","id":5,"result":"first"})
    );
    // Once answered, the id may be used again.
    peer.send(r#"{"jsonrpc":"2.0","id":5,"method":"third"}"#)
        .await;
    match within(incoming.next()).await {
        Some(IncomingMessage::Request(r)) => assert_eq!(r.method, "third"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn line_length_at_the_limit_and_one_past() {
    const LIMIT: usize = 4096;
    let ((connection, incoming), mut peer) = RawPeer::pair(Config {
        max_line_bytes: LIMIT,
        ..Config::default()
    });
    let (_server, mut seen) = serve(incoming);
    let line_of = |len: usize, method: &str| {
        let skeleton =
            json!({"jsonrpc": "2.0", "method": method, "params": {"pad": ""}}).to_string();
        let padded = json!({"jsonrpc": "2.0", "method": method, "params": {"pad": "p".repeat(len - skeleton.len())}});
        let line = padded.to_string();
        assert_eq!(line.len(), len);
        line
    };
    let mut s = 0;
    check(
        &mut peer,
        &mut s,
        line_of(LIMIT, "at_limit").as_bytes(),
        None,
    )
    .await;
    assert_eq!(within(seen.recv()).await.as_deref(), Some("at_limit"));
    // One past: discarded, counted, nothing answered (its id is unknown), and the next line works.
    check(
        &mut peer,
        &mut s,
        line_of(LIMIT + 1, "one_past").as_bytes(),
        None,
    )
    .await;
    check(&mut peer, &mut s, line_of(LIMIT, "after").as_bytes(), None).await;
    assert_eq!(within(seen.recv()).await.as_deref(), Some("after"));
    assert_eq!(connection.stats().too_long_lines, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lines_split_across_writes_and_several_per_write_are_framed() {
    let ((_connection, mut incoming), mut peer) = RawPeer::pair(Config::default());
    let two = b"{\"jsonrpc\":\"2.0\",\"method\":\"a\"}\n{\"jsonrpc\":\"2.0\",\"met";
    peer.send_raw(two).await;
    peer.send_raw(b"hod\":\"b\"}\n").await;
    for want in ["a", "b"] {
        match within(incoming.next()).await {
            Some(IncomingMessage::Notification(n)) => assert_eq!(n.method, want),
            other => panic!("{other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_final_line_without_newline_is_read_at_eof() {
    let ((connection, mut incoming), peer) = RawPeer::pair(Config::default());
    let (reader, mut writer) = peer.into_parts();
    tokio::io::AsyncWriteExt::write_all(&mut writer, br#"{"jsonrpc":"2.0","method":"last"}"#)
        .await
        .unwrap();
    drop(writer);
    match within(incoming.next()).await {
        Some(IncomingMessage::Notification(n)) => assert_eq!(n.method, "last"),
        other => panic!("{other:?}"),
    }
    assert!(within(incoming.next()).await.is_none());
    within(connection.closed()).await;
    drop(reader);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peer_dies_mid_call_fails_every_pending_call() {
    let ((connection, _incoming), mut peer) = RawPeer::pair(Config::default());
    let mut calls = Vec::new();
    for n in 0..3 {
        let connection = connection.clone();
        calls.push(tokio::spawn(async move {
            connection.call("work", Some(json!([n]))).await
        }));
    }
    for _ in 0..3 {
        peer.recv().await;
    }
    drop(peer);
    for call in calls {
        let result = within(call).await.unwrap();
        assert!(
            matches!(result, Err(CallError::ConnectionClosed)),
            "{result:?}"
        );
    }
    assert_eq!(connection.pending_calls(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_we_write_is_strict_json_rpc() {
    let ((connection, mut incoming), mut peer) = RawPeer::pair(Config::default());
    connection.notify("n", Some(json!({"a": 1}))).await.unwrap();
    assert_eq!(
        peer.recv().await,
        json!({"jsonrpc":"2.0","method":"n","params":{"a":1}})
    );
    connection.notify("bare", None).await.unwrap();
    assert_eq!(peer.recv().await, json!({"jsonrpc":"2.0","method":"bare"}));
    let call = tokio::spawn({
        let connection = connection.clone();
        async move { connection.call("c", Some(json!(["x"]))).await }
    });
    assert_eq!(
        peer.recv().await,
        json!({"jsonrpc":"2.0","id":0,"method":"c","params":["x"]})
    );
    peer.send(r#"{"jsonrpc":"2.0","id":0,"result":null}"#).await;
    assert_eq!(within(call).await.unwrap().unwrap(), Value::Null);
    peer.send(r#"{"jsonrpc":"2.0","id":"q","method":"m"}"#)
        .await;
    let Some(IncomingMessage::Request(request)) = within(incoming.next()).await else {
        panic!("no request")
    };
    request
        .respond(Err(agentwire_jsonrpc::ErrorObject::request_cancelled()))
        .await
        .unwrap();
    assert_eq!(
        peer.recv().await,
        json!({"jsonrpc":"2.0","id":"q","error":{"code":-32800,"message":"request cancelled"}})
    );
    let mut call = connection.start_call("to_cancel", None).await.unwrap();
    peer.recv().await;
    assert!(connection.cancel(&call.id()).await.unwrap());
    assert_eq!(
        peer.recv().await,
        json!({"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":1}})
    );
    assert!(matches!(within(&mut call).await, Err(CallError::Cancelled)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn valid_json_that_cannot_be_read_is_an_invalid_request_not_a_parse_error() {
    let ((connection, incoming), mut peer) = RawPeer::pair(Config::default());
    let (_server, _seen) = serve(incoming);
    let mut s = 0;
    // A lone surrogate escape is valid JSON grammar (RFC 8259 section 8.2) that no Rust string can hold.
    check(
        &mut peer,
        &mut s,
        br#"{"jsonrpc":"2.0","id":"\ud800","method":"m"}"#,
        error(json!(null), -32600, "invalid request"),
    )
    .await;
    // Nesting past serde_json's recursion limit: the id is still recovered.
    let deep = format!(
        r#"{{"jsonrpc":"2.0","id":7,"method":"m","params":{}{}}}"#,
        "[".repeat(300),
        "]".repeat(300)
    );
    check(
        &mut peer,
        &mut s,
        deep.as_bytes(),
        error(json!(7), -32600, "invalid request"),
    )
    .await;
    let stats = connection.stats();
    assert_eq!((stats.invalid_lines, stats.invalid_messages), (0, 2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_request_sent_as_a_request_is_rejected_not_delivered() {
    let ((connection, incoming), mut peer) = RawPeer::pair(Config::default());
    // `serve` would answer a delivered request with -32601; -32600 proves the connection answered it.
    let (_server, _seen) = serve(incoming);
    let mut s = 0;
    check(
        &mut peer,
        &mut s,
        br#"{"jsonrpc":"2.0","id":9,"method":"$/cancel_request","params":{"requestId":1}}"#,
        error(json!(9), -32600, "invalid request"),
    )
    .await;
    let stats = connection.stats();
    assert_eq!(
        (
            stats.invalid_messages,
            stats.cancel_requests_received,
            stats.cancel_requests_unmatched
        ),
        (1, 0, 0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_carrying_a_method_fails_our_pending_call() {
    let ((connection, _incoming), mut peer) = RawPeer::pair(Config::default());
    let call = tokio::spawn({
        let connection = connection.clone();
        async move { connection.call("m", None).await }
    });
    let id = peer.recv().await["id"].clone();
    peer.send(&json!({"jsonrpc":"2.0","id": id, "method": "m", "result": 1}).to_string())
        .await;
    let error = within(call).await.unwrap().unwrap_err();
    assert!(matches!(error, CallError::InvalidResponse(_)), "{error:?}");
    // It is also answered, as the broken request it may be.
    assert_eq!(
        strip_data(peer.recv().await),
        error_line(id, -32600, "invalid request")
    );
    assert_eq!(connection.pending_calls(), 0);
}

fn error_line(id: Value, code: i32, message: &str) -> Value {
    error(id, code, message).unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_incoming_answers_every_request_internal_error() {
    let ((connection, incoming), mut peer) = RawPeer::pair(Config::default());
    drop(incoming);
    for id in 0..3 {
        peer.send(&json!({"jsonrpc":"2.0","id": id, "method": "m"}).to_string())
            .await;
        assert_eq!(
            strip_data(peer.recv().await),
            error_line(json!(id), -32603, "request dropped without a response")
        );
    }
    assert_eq!(connection.stats().dropped_responders, 3);
    // Our own calls still work.
    let call = tokio::spawn({
        let connection = connection.clone();
        async move { connection.call("still", None).await }
    });
    let request = peer.recv().await;
    peer.send(&json!({"jsonrpc":"2.0","id": request["id"], "result": 1}).to_string())
        .await;
    assert_eq!(within(call).await.unwrap().unwrap(), json!(1));
}
