//! Two `Connection`s talking to each other over memory, a Unix socket pair and OS pipes: calls, notifications,
//! cancellation, timeouts, limits, closing.

mod support;

use std::time::Duration;

use agentwire_jsonrpc::{
    CallError, CloseReason, Config, ErrorCode, ErrorObject, IncomingMessage, RequestId,
};
use serde_json::{Value, json};
use support::{
    TRANSPORTS, Transport, next, next_notification, next_request, pair, spawn_echo, within,
};

fn config() -> Config {
    Config::default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn call_round_trip_on_every_transport() {
    for transport in TRANSPORTS {
        let ((client, _client_in), (_server, server_in)) = pair(transport, config(), config());
        spawn_echo(server_in);
        let got = within(client.call("ping", Some(json!({"n": 1}))))
            .await
            .unwrap();
        assert_eq!(
            got,
            json!({"method": "ping", "params": {"n": 1}}),
            "{transport:?}"
        );
        let got = within(client.call("no_params", None)).await.unwrap();
        assert_eq!(
            got,
            json!({"method": "no_params", "params": null}),
            "{transport:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_calls_answered_out_of_order() {
    const CALLS: usize = 32;
    for transport in TRANSPORTS {
        let ((client, _client_in), (_server, mut server_in)) = pair(transport, config(), config());
        let server = tokio::spawn(async move {
            let mut requests = Vec::new();
            for _ in 0..CALLS {
                requests.push(next_request(&mut server_in).await);
            }
            // Answer in reverse order of arrival.
            while let Some(request) = requests.pop() {
                let n = request.params.as_ref().and_then(|p| p.get("n")).cloned();
                request.respond(Ok(json!({ "n": n }))).await.unwrap();
            }
            server_in
        });
        let calls = (0..CALLS).map(|n| {
            let client = client.clone();
            tokio::spawn(async move { client.call("work", Some(json!({ "n": n }))).await })
        });
        let calls: Vec<_> = calls.collect();
        for (n, call) in calls.into_iter().enumerate() {
            let got = within(call).await.unwrap().unwrap();
            assert_eq!(got, json!({ "n": n }), "{transport:?}");
        }
        within(server).await.unwrap();
        assert_eq!(client.pending_calls(), 0);
        assert_eq!(
            client.stats().unknown_responses + client.stats().late_responses,
            0
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_sides_call_each_other_with_separate_id_spaces() {
    for transport in TRANSPORTS {
        let ((a, mut a_in), (b, mut b_in)) = pair(transport, config(), config());
        // Both sides' first request has id 0; each must get its own answer.
        let a_call = tokio::spawn({
            let a = a.clone();
            async move { a.call("from_a", None).await }
        });
        let b_call = tokio::spawn({
            let b = b.clone();
            async move { b.call("from_b", None).await }
        });
        let request_at_b = next_request(&mut b_in).await;
        let request_at_a = next_request(&mut a_in).await;
        assert_eq!(request_at_b.id, RequestId::Number(0));
        assert_eq!(request_at_a.id, RequestId::Number(0));
        request_at_a.respond(Ok(json!("a answers"))).await.unwrap();
        request_at_b.respond(Ok(json!("b answers"))).await.unwrap();
        assert_eq!(
            within(a_call).await.unwrap().unwrap(),
            json!("b answers"),
            "{transport:?}"
        );
        assert_eq!(
            within(b_call).await.unwrap().unwrap(),
            json!("a answers"),
            "{transport:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_params_both_ways() {
    let big = "x".repeat(10 * 1024 * 1024);
    for transport in TRANSPORTS {
        let ((client, _client_in), (_server, server_in)) = pair(transport, config(), config());
        spawn_echo(server_in);
        let got = within(client.call("big", Some(json!({ "blob": big }))))
            .await
            .unwrap();
        assert_eq!(
            got["params"]["blob"].as_str().map(str::len),
            Some(big.len()),
            "{transport:?}"
        );
        assert!(got["params"]["blob"] == big.as_str());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notification_storm_while_a_call_is_pending() {
    const STORM: u64 = 5_000;
    for transport in TRANSPORTS {
        let ((client, mut client_in), (server, mut server_in)) =
            pair(transport, config(), config());
        let server_task = tokio::spawn(async move {
            let request = next_request(&mut server_in).await;
            for seq in 0..STORM {
                server
                    .notify("session/update", Some(json!({ "seq": seq })))
                    .await
                    .unwrap();
            }
            request.respond(Ok(json!("done"))).await.unwrap();
            (server, server_in)
        });
        let drain = tokio::spawn(async move {
            for expect in 0..STORM {
                let n = next_notification(&mut client_in).await;
                assert_eq!(n.method, "session/update");
                assert_eq!(
                    n.params,
                    Some(json!({ "seq": expect })),
                    "notifications out of order"
                );
            }
            client_in
        });
        let got = within(client.call("session/prompt", None)).await.unwrap();
        assert_eq!(got, json!("done"), "{transport:?}");
        within(drain).await.unwrap();
        within(server_task).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_responder_answers_internal_error() {
    for transport in TRANSPORTS {
        let ((client, _client_in), (server, mut server_in)) = pair(transport, config(), config());
        let call = tokio::spawn({
            let client = client.clone();
            async move { client.call("ignored", None).await }
        });
        drop(next_request(&mut server_in).await);
        let error = within(call).await.unwrap().unwrap_err();
        let rpc = error.rpc().expect("an rpc error");
        assert_eq!(rpc.code, ErrorCode::INTERNAL_ERROR, "{transport:?}");
        assert_eq!(server.stats().dropped_responders, 1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_responder_split_from_its_request_answers_once() {
    let ((client, _client_in), (_server, mut server_in)) =
        pair(Transport::Memory, config(), config());
    let call = tokio::spawn({
        let client = client.clone();
        async move { client.call("split", Some(json!([1, 2]))).await }
    });
    let (request, responder) = next_request(&mut server_in).await.into_parts();
    assert_eq!(responder.id(), &request.id);
    responder
        .respond(Ok(request.params.unwrap_or(Value::Null)))
        .await
        .unwrap();
    assert_eq!(within(call).await.unwrap().unwrap(), json!([1, 2]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_both_ways() {
    for transport in TRANSPORTS {
        let ((client, _client_in), (server, mut server_in)) = pair(transport, config(), config());
        let mut call = within(client.start_call("session/prompt", None))
            .await
            .unwrap();
        let id = call.id();
        let request = next_request(&mut server_in).await;
        assert!(!request.is_cancelled());

        // Outgoing side: the call resolves at once with a typed error.
        assert!(within(client.cancel(&id)).await.unwrap());
        assert!(
            matches!(within(&mut call).await, Err(CallError::Cancelled)),
            "{transport:?}"
        );
        assert!(
            !within(client.cancel(&id)).await.unwrap(),
            "a second cancel finds nothing pending"
        );

        // Incoming side: the request is marked; the receiver still answers.
        within(request.cancelled()).await;
        assert!(request.is_cancelled());
        request
            .respond(Err(ErrorObject::request_cancelled()))
            .await
            .unwrap();

        // The late answer is dropped and counted, and does not disturb the next call.
        let follow_up = tokio::spawn({
            let client = client.clone();
            async move { client.call("ping", None).await }
        });
        next_request(&mut server_in)
            .await
            .respond(Ok(json!("pong")))
            .await
            .unwrap();
        assert_eq!(within(follow_up).await.unwrap().unwrap(), json!("pong"));
        let stats = client.stats();
        assert_eq!(
            (
                stats.cancelled_calls,
                stats.late_responses,
                stats.unknown_responses
            ),
            (1, 1, 0)
        );
        assert_eq!(server.stats().cancel_requests_received, 1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_for_a_request_no_longer_in_flight_is_counted() {
    let ((client, _client_in), (server, mut server_in)) =
        pair(Transport::Memory, config(), config());
    client
        .notify("$/cancel_request", Some(json!({"requestId": 999})))
        .await
        .unwrap();
    // A call after the cancel is processed after it (one reader, in order).
    let call = tokio::spawn({
        let client = client.clone();
        async move { client.call("ping", None).await }
    });
    next_request(&mut server_in)
        .await
        .respond(Ok(json!(1)))
        .await
        .unwrap();
    within(call).await.unwrap().unwrap();
    assert_eq!(server.stats().cancel_requests_unmatched, 1);
    assert_eq!(server.stats().cancel_requests_received, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeout_then_late_response_is_dropped_and_counted() {
    for transport in TRANSPORTS {
        let ((client, _client_in), (_server, mut server_in)) = pair(transport, config(), config());
        let call = tokio::spawn({
            let client = client.clone();
            async move {
                client
                    .call_with_timeout("slow", None, Duration::from_millis(50))
                    .await
            }
        });
        let request = next_request(&mut server_in).await;
        assert!(
            matches!(within(call).await.unwrap(), Err(CallError::Timeout)),
            "{transport:?}"
        );
        assert_eq!(client.pending_calls(), 0);
        request.respond(Ok(json!("too late"))).await.unwrap();
        let follow_up = tokio::spawn({
            let client = client.clone();
            async move { client.call("ping", None).await }
        });
        next_request(&mut server_in)
            .await
            .respond(Ok(json!("pong")))
            .await
            .unwrap();
        assert_eq!(within(follow_up).await.unwrap().unwrap(), json!("pong"));
        let stats = client.stats();
        assert_eq!(
            (stats.timeouts, stats.late_responses),
            (1, 1),
            "{transport:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_call_timeout_applies_to_call() {
    let client_config = Config {
        default_call_timeout: Some(Duration::from_millis(20)),
        ..config()
    };
    let ((client, _client_in), (_server, mut server_in)) =
        pair(Transport::Memory, client_config, config());
    let call = tokio::spawn({
        let client = client.clone();
        async move { client.call("slow", None).await }
    });
    let _held = next_request(&mut server_in).await;
    let error = within(call).await.unwrap().unwrap_err();
    assert_eq!(error.code(), "timeout");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_pending_calls_at_the_limit_and_one_past() {
    const LIMIT: usize = 4;
    let client_config = Config {
        max_pending_calls: LIMIT,
        ..config()
    };
    let ((client, _client_in), (_server, mut server_in)) =
        pair(Transport::Memory, client_config, config());
    let mut calls = Vec::new();
    for _ in 0..LIMIT {
        calls.push(
            within(client.start_call("hold", None))
                .await
                .expect("within the limit"),
        );
    }
    assert_eq!(client.pending_calls(), LIMIT);
    let past = within(client.start_call("one_past", None)).await;
    assert!(
        matches!(past, Err(CallError::TooManyPendingCalls)),
        "{past:?}"
    );
    // Nothing was sent for the refused call: the peer sees exactly LIMIT requests.
    let mut held = Vec::new();
    for _ in 0..LIMIT {
        held.push(next_request(&mut server_in).await);
    }
    assert!(held.iter().all(|r| r.method == "hold"));
    // Answering one frees one slot.
    held.pop().unwrap().respond(Ok(json!(null))).await.unwrap();
    within(calls.pop().unwrap()).await.unwrap();
    let again = within(client.start_call("fits_again", None)).await;
    assert!(again.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_incoming_in_flight_at_the_limit_and_one_past() {
    const LIMIT: usize = 2;
    let server_config = Config {
        max_incoming_in_flight: LIMIT,
        ..config()
    };
    let ((client, _client_in), (server, mut server_in)) =
        pair(Transport::UnixSocket, config(), server_config);
    let mut calls = Vec::new();
    for _ in 0..LIMIT {
        calls.push(within(client.start_call("hold", None)).await.unwrap());
    }
    let mut held = Vec::new();
    for _ in 0..LIMIT {
        held.push(next_request(&mut server_in).await);
    }
    // One past: answered at once with -32603 "server busy", never delivered.
    let busy = within(client.call("one_past", None)).await.unwrap_err();
    let rpc = busy.rpc().expect("rpc error");
    assert_eq!(rpc.code, ErrorCode::INTERNAL_ERROR);
    assert_eq!(rpc.data, Some(json!({"maxInFlight": LIMIT})));
    assert_eq!(server.stats().busy_rejections, 1);
    // Answering one makes room again.
    held.pop().unwrap().respond(Ok(json!("ok"))).await.unwrap();
    let retry = tokio::spawn({
        let client = client.clone();
        async move { client.call("fits_again", None).await }
    });
    let request = next_request(&mut server_in).await;
    assert_eq!(request.method, "fits_again");
    request.respond(Ok(json!("ok"))).await.unwrap();
    assert_eq!(within(retry).await.unwrap().unwrap(), json!("ok"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_incoming_queue_loses_nothing() {
    const SENT: u64 = 2_000;
    let server_config = Config {
        incoming_queue: 2,
        ..config()
    };
    for transport in TRANSPORTS {
        let ((client, _client_in), (_server, mut server_in)) =
            pair(transport, config(), server_config.clone());
        let sender = tokio::spawn(async move {
            for seq in 0..SENT {
                client.notify("n", Some(json!([seq]))).await.unwrap();
            }
            client
        });
        // Nobody reads until the sender is blocked or done; then everything arrives, in order.
        for seq in 0..SENT {
            assert_eq!(
                next_notification(&mut server_in).await.params,
                Some(json!([seq])),
                "{transport:?}"
            );
        }
        within(sender).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peer_gone_mid_call_fails_every_pending_call() {
    for transport in TRANSPORTS {
        let ((client, _client_in), (server, mut server_in)) = pair(transport, config(), config());
        let mut calls = Vec::new();
        for _ in 0..3 {
            calls.push(
                within(client.start_call("never_answered", None))
                    .await
                    .unwrap(),
            );
        }
        let mut held = Vec::new();
        for _ in 0..3 {
            held.push(next_request(&mut server_in).await.into_parts().1);
        }
        // The peer closes its output (as a dying process would); its responders are kept, so nothing is answered.
        within(server.close()).await;
        for call in calls {
            assert!(
                matches!(within(call).await, Err(CallError::ConnectionClosed)),
                "{transport:?}"
            );
        }
        within(client.closed()).await;
        assert_eq!(client.close_reason(), Some(CloseReason::Eof));
        assert!(matches!(
            within(client.call("after", None)).await,
            Err(CallError::ConnectionClosed)
        ));
        drop(held);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_flushes_and_the_peer_sees_the_end() {
    for transport in TRANSPORTS {
        let ((client, client_in), (server, mut server_in)) = pair(transport, config(), config());
        client.notify("last_words", None).await.unwrap();
        within(client.close()).await;
        assert_eq!(client.close_reason(), Some(CloseReason::Closed));
        assert_eq!(next_notification(&mut server_in).await.method, "last_words");
        assert!(within(server_in.next()).await.is_none(), "{transport:?}");
        within(server.closed()).await;
        assert_eq!(server.close_reason(), Some(CloseReason::Eof));
        assert!(client.notify("after_close", None).await.is_err());
        drop(client_in);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_every_handle_closes_the_output() {
    for transport in TRANSPORTS {
        let ((client, client_in), (server, mut server_in)) = pair(transport, config(), config());
        client.notify("bye", None).await.unwrap();
        drop(client);
        drop(client_in);
        assert_eq!(next_notification(&mut server_in).await.method, "bye");
        assert!(within(server_in.next()).await.is_none(), "{transport:?}");
        assert_eq!(server.close_reason(), Some(CloseReason::Eof));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_failure_fails_pending_calls_and_later_sends() {
    let frames = futures_util::stream::pending();
    let (client, _client_in) = agentwire_jsonrpc::Connection::from_frames(
        frames,
        |_lines| async { Err(std::io::Error::other("disk on fire")) },
        config(),
    );
    let error = within(client.call("doomed", None)).await.unwrap_err();
    assert!(matches!(error, CallError::ConnectionClosed), "{error:?}");
    assert_eq!(
        client.close_reason(),
        Some(CloseReason::WriteFailed("disk on fire".into()))
    );
    assert!(client.notify("after", None).await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn message_and_relay_sends_are_delivered() {
    let ((client, _client_in), (_server, mut server_in)) =
        pair(Transport::Memory, config(), config());
    let message = agentwire_jsonrpc::Message::Notification(agentwire_jsonrpc::Notification::new(
        "relayed",
        Some(json!({"k": "v"})),
    ));
    client.send_message(&message).await.unwrap();
    match next(&mut server_in).await {
        IncomingMessage::Notification(n) => {
            assert_eq!(
                (n.method.as_str(), n.params),
                ("relayed", Some(json!({"k": "v"})))
            );
        }
        other => panic!("{other:?}"),
    }
}

/// A request line far larger than the transport's buffer is written partly by its sender (as much as the stream takes
/// without waiting) and finished by the writer task; lines sent after it, while nothing is being read, still arrive
/// after it and whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lines_keep_their_order_when_a_direct_write_blocks_half_way() {
    for transport in TRANSPORTS {
        let ((client, _client_in), (_server, mut server_in)) = pair(transport, config(), config());
        let big = "x".repeat(1024 * 1024);
        let first = within(client.start_call("big", Some(json!({"text": big}))))
            .await
            .unwrap();
        let second = within(client.start_call("small", Some(json!({"n": 2}))))
            .await
            .unwrap();
        within(client.notify("after", Some(json!({"n": 3}))))
            .await
            .unwrap();
        let request = next_request(&mut server_in).await;
        assert_eq!(request.id, first.id(), "{transport:?}");
        assert_eq!(request.method, "big");
        assert_eq!(request.params, Some(json!({"text": big})));
        let request = next_request(&mut server_in).await;
        assert_eq!(request.id, second.id(), "{transport:?}");
        assert_eq!(request.params, Some(json!({"n": 2})));
        let notification = next_notification(&mut server_in).await;
        assert_eq!(notification.method, "after");
        assert_eq!(notification.params, Some(json!({"n": 3})));
    }
}
