//! The server and client against each other on a real Unix socket in a temp dir.

#![allow(clippy::unwrap_used)] // test helpers: a failed unwrap is a failed test

mod support;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::time::Duration;

use agentwire_local_control::client::{Client, ClientError};
use agentwire_local_control::descriptor::{Token, discover};
use agentwire_local_control::envelope::ErrorCode;
use agentwire_local_control::server::{Server, ServerConfig};
use serde_json::json;
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn mode(path: &std::path::Path) -> u32 {
    std::fs::symlink_metadata(path)
        .unwrap()
        .permissions()
        .mode()
        & 0o7777
}

#[tokio::test]
async fn directories_socket_and_descriptor_are_private_and_discoverable() {
    let running = start().await;
    let layout = running.server.layout().clone();
    assert_eq!(mode(&layout.control_dir), 0o700);
    assert_eq!(mode(&layout.temp_dir), 0o700);
    assert_eq!(mode(&layout.socket_path), 0o600);
    assert_eq!(mode(&layout.descriptor_path), 0o600);
    let descriptor = discover(running.dir.path()).unwrap();
    assert_eq!(&descriptor, running.server.descriptor());
    assert_eq!(descriptor.token.expose().len(), 43);
    assert!(
        !format!("{descriptor:?}").contains(descriptor.token.expose()),
        "Debug must not show the token"
    );
    running.server.shutdown().await;
    assert!(
        !layout.descriptor_path.exists(),
        "a clean shutdown removes our descriptor"
    );
    assert!(!layout.socket_path.exists(), "and the socket");
}

#[tokio::test]
async fn a_private_dir_with_loose_mode_is_tightened() {
    let dir = tempfile::tempdir().unwrap();
    let control = dir.path().join("local-control");
    std::fs::create_dir(&control).unwrap();
    std::fs::set_permissions(&control, std::fs::Permissions::from_mode(0o755)).unwrap();
    let server = Server::start(ServerConfig::new(dir.path(), "t"), Shared::default())
        .await
        .unwrap();
    assert_eq!(mode(&control), 0o700);
    server.shutdown().await;
}

#[tokio::test]
async fn rpc_round_trip_for_human_and_agent_tokens() {
    let running = start().await;
    let result = running
        .client()
        .rpc(&request("r1", "test.echo", json!({"a": 1})), TIMEOUT)
        .await
        .unwrap();
    assert_eq!(result, json!({"echo": {"a": 1}, "principal": "human"}));
    let agent = Client::new(running.socket(), Token::parse(AGENT_TOKEN).unwrap());
    let result = agent
        .rpc(&request("r2", "test.echo", json!(null)), TIMEOUT)
        .await
        .unwrap();
    assert_eq!(result["principal"], "agent");
    running.server.shutdown().await;
}

#[tokio::test]
async fn wrong_or_absent_token_is_authentication_failed_before_the_body_is_read() {
    let running = start().await;
    let presented = Token::generate().unwrap();
    let wrong = Client::new(running.socket(), presented.clone());
    assert!(
        !format!("{:?} {wrong:?}", running.server)
            .contains(running.server.descriptor().token.expose())
    );
    let error = wrong
        .rpc(&request("r1", "test.echo", json!({})), TIMEOUT)
        .await
        .unwrap_err();
    assert_eq!(error.code(), ErrorCode::AuthenticationFailed);
    assert_eq!(error.exit_code(), 4);
    assert!(matches!(error, ClientError::Remote { status: 401, .. }));
    let body =
        r#"{"protocolVersion":1,"surfaceVersion":2,"id":"r1","method":"test.echo","params":{}}"#;
    let response = raw(
        &running.socket(),
        &rpc_bytes(presented.expose(), "test.echo", body),
    )
    .await;
    assert!(
        !response.contains(presented.expose()),
        "the presented token is not echoed: {response}"
    );

    let body =
        r#"{"protocolVersion":1,"surfaceVersion":2,"id":"r1","method":"test.echo","params":{}}"#;
    let no_auth = format!(
        "POST /v1/rpc HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nx-deepchat-method: test.echo\r\n\
         content-length: {}\r\n\r\n{body}",
        body.len()
    );
    let response = raw(&running.socket(), no_auth.as_bytes()).await;
    assert_eq!(status(&response), 401);
    assert_eq!(error_code(&response), "authentication_failed");
    assert_eq!(body_json(&response)["id"], "unknown");
    // Two Authorization headers are refused too, even if one is right.
    let token = running.server.descriptor().token.expose().to_owned();
    let doubled = String::from_utf8(rpc_bytes(&token, "test.echo", body))
        .unwrap()
        .replacen(
            "authorization:",
            "authorization: Bearer x\r\nauthorization:",
            1,
        );
    assert_eq!(
        status(&raw(&running.socket(), doubled.as_bytes()).await),
        401
    );
    assert!(
        running.service.log().is_empty(),
        "nothing reached the service: {:?}",
        running.service.log()
    );
    running.server.shutdown().await;
}

#[tokio::test]
async fn method_header_must_match_the_body() {
    let running = start().await;
    let token = running.server.descriptor().token.expose().to_owned();
    let body =
        r#"{"protocolVersion":1,"surfaceVersion":2,"id":"r1","method":"test.denied","params":{}}"#;
    let response = raw(&running.socket(), &rpc_bytes(&token, "test.echo", body)).await;
    assert_eq!(status(&response), 400);
    assert_eq!(error_code(&response), "invalid_request");
    assert_eq!(body_json(&response)["id"], "r1");
    assert!(running.service.log().is_empty());
    running.server.shutdown().await;
}

#[tokio::test]
async fn unknown_method_version_mismatch_and_bad_envelopes_are_typed() {
    let running = start().await;
    let token = running.server.descriptor().token.expose().to_owned();
    let cases = [
        (
            "test.nope",
            r#"{"protocolVersion":1,"surfaceVersion":2,"id":"r1","method":"test.nope"}"#,
            404,
            "not_found",
        ),
        (
            "test.count",
            r#"{"protocolVersion":1,"surfaceVersion":2,"id":"r1","method":"test.count"}"#,
            404,
            "not_found",
        ),
        (
            "test.echo",
            r#"{"protocolVersion":1,"surfaceVersion":1,"id":"r1","method":"test.echo"}"#,
            409,
            "unsupported_version",
        ),
        (
            "test.echo",
            r#"{"protocolVersion":1,"surfaceVersion":2,"id":"r1","method":"test.echo","x":1}"#,
            400,
            "invalid_request",
        ),
        (
            "test.echo",
            r#"{"protocolVersion":1,"surfaceVersion":2,"id":"bad id","method":"test.echo"}"#,
            400,
            "invalid_request",
        ),
        ("test.echo", "not json", 400, "invalid_request"),
        ("Bad", r#"{}"#, 400, "invalid_request"),
    ];
    for (header, body, expected_status, expected_code) in cases {
        let response = raw(&running.socket(), &rpc_bytes(&token, header, body)).await;
        assert_eq!(
            (status(&response), error_code(&response).as_str()),
            (expected_status, expected_code),
            "{body}"
        );
    }
    let deep = format!(
        r#"{{"protocolVersion":1,"surfaceVersion":2,"id":"r1","method":"test.echo","params":{}1{}}}"#,
        "[".repeat(64),
        "]".repeat(64)
    );
    let response = raw(&running.socket(), &rpc_bytes(&token, "test.echo", &deep)).await;
    assert_eq!(
        error_code(&response),
        "invalid_request",
        "depth 65 is over the json shape limit"
    );
    let response = raw(
        &running.socket(),
        b"GET /v1/nothing HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(
        (status(&response), error_code(&response).as_str()),
        (404, "not_found")
    );
    running.server.shutdown().await;
}

#[tokio::test]
async fn rpc_body_limits_hold_at_the_limit_and_one_past_it_whatever_the_framing() {
    let running = start().await;
    let token = running.server.descriptor().token.expose().to_owned();
    let body_of = |len: usize| {
        let base = r#"{"protocolVersion":1,"surfaceVersion":2,"id":"r1","method":"test.echo","params":""}"#;
        let pad = "x".repeat(len - base.len());
        format!(
            r#"{{"protocolVersion":1,"surfaceVersion":2,"id":"r1","method":"test.echo","params":"{pad}"}}"#
        )
    };
    let at_limit = raw(
        &running.socket(),
        &rpc_bytes(&token, "test.echo", &body_of(1024)),
    )
    .await;
    assert_eq!(status(&at_limit), 200, "{at_limit}");
    let over = raw(
        &running.socket(),
        &rpc_bytes(&token, "test.echo", &body_of(1025)),
    )
    .await;
    assert_eq!(
        (status(&over), error_code(&over).as_str()),
        (413, "body_too_large")
    );
    // A huge declared length is refused from the header alone.
    let huge = format!(
        "POST /v1/rpc HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {token}\r\ncontent-type: application/json\r\n\
         x-deepchat-method: test.echo\r\ncontent-length: 99999999999\r\n\r\n"
    );
    let response = raw(&running.socket(), huge.as_bytes()).await;
    assert_eq!(
        (status(&response), error_code(&response).as_str()),
        (413, "body_too_large")
    );
    // Chunked without Content-Length is refused before reading (411).
    let chunked = format!(
        "POST /v1/rpc HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {token}\r\ncontent-type: application/json\r\n\
         x-deepchat-method: test.echo\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
    );
    let response = raw(&running.socket(), chunked.as_bytes()).await;
    assert_eq!(
        (status(&response), error_code(&response).as_str()),
        (411, "invalid_request")
    );
    running.server.shutdown().await;
}

#[tokio::test]
async fn request_head_of_8_kib_passes_and_one_byte_more_is_refused() {
    let running = start().await;
    let token = running.server.descriptor().token.expose().to_owned();
    let head = |total: usize| {
        let base = format!(
            "GET /v1/artifacts/art1 HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {token}\r\nx-pad: \r\n\
             connection: close\r\n\r\n"
        );
        base.replacen(
            "x-pad: ",
            &format!("x-pad: {}", "p".repeat(total - base.len())),
            1,
        )
    };
    assert_eq!(head(8192).len(), 8192);
    let response = raw(&running.socket(), head(8192).as_bytes()).await;
    assert_eq!(status(&response), 200, "{response}");
    let response = raw(&running.socket(), head(8193).as_bytes()).await;
    assert_eq!(status(&response), 431, "{response}");
    running.server.shutdown().await;
}

fn upload_head(
    token: &str,
    method: &str,
    params: serde_json::Value,
    content: &[u8],
    framing: &str,
) -> String {
    use base64::Engine;
    let envelope = json!({"protocolVersion":1,"surfaceVersion":2,"id":"u1","method":method,"params":params,
                          "upload":{"size":content.len(),"sha256":sha_hex(content)}});
    let header = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(serde_json::to_vec(&envelope).unwrap());
    format!(
        "POST /v1/upload HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {token}\r\ncontent-type: application/octet-stream\r\n\
         x-deepchat-upload-request: {header}\r\n{framing}connection: close\r\n\r\n"
    )
}

#[tokio::test]
async fn refused_upload_never_gets_100_continue_and_its_body_is_never_read() {
    let running = start().await;
    let token = running.server.descriptor().token.expose().to_owned();
    let content = b"secret bytes";
    let head = upload_head(
        &token,
        "test.put",
        json!({"deny": true}),
        content,
        &format!(
            "content-length: {}\r\nexpect: 100-continue\r\n",
            content.len()
        ),
    );
    let mut stream = tokio::net::UnixStream::connect(running.socket())
        .await
        .unwrap();
    stream.write_all(head.as_bytes()).await.unwrap();
    // The body is withheld: a server that waited for it would never answer.
    let response = read_to_close(&mut stream).await;
    assert!(
        response.starts_with("HTTP/1.1 403"),
        "no 100 Continue before the refusal: {response}"
    );
    assert_eq!(error_code(&response), "permission_denied");
    assert_eq!(
        running.service.log(),
        vec!["authorize:test.put".to_owned()],
        "the hook ran, the upload did not"
    );
    assert!(running.temp_files().is_empty());
    running.server.shutdown().await;
}

#[tokio::test]
async fn accepted_upload_gets_100_continue_only_after_authorize() {
    let running = start().await;
    let token = running.server.descriptor().token.expose().to_owned();
    let content = b"hello upload";
    let head = upload_head(
        &token,
        "test.put",
        json!({}),
        content,
        &format!(
            "content-length: {}\r\nexpect: 100-continue\r\n",
            content.len()
        ),
    );
    let mut stream = tokio::net::UnixStream::connect(running.socket())
        .await
        .unwrap();
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut interim = vec![0u8; 25];
    tokio::time::timeout(TIMEOUT, stream.read_exact(&mut interim))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&interim, b"HTTP/1.1 100 Continue\r\n\r\n");
    assert_eq!(running.service.log(), vec!["authorize:test.put".to_owned()]);
    stream.write_all(content).await.unwrap();
    let response = read_to_close(&mut stream).await;
    assert_eq!(status(&response), 200, "{response}");
    assert_eq!(body_json(&response)["result"]["size"], content.len());
    assert_eq!(running.service.log()[1], "upload:hello upload");
    assert!(
        running.temp_files().is_empty(),
        "the spill file is removed after dispatch"
    );
    running.server.shutdown().await;
}

#[tokio::test]
async fn client_upload_round_trip() {
    let running = start().await;
    let file = running.dir.path().join("input.bin");
    std::fs::write(&file, b"via the client").unwrap();
    let result = running
        .client()
        .upload(&request("u1", "test.put", json!({})), &file, 64, TIMEOUT)
        .await
        .unwrap();
    assert_eq!(result["sha256"], sha_hex(b"via the client"));
    assert_eq!(
        running.service.log(),
        vec![
            "authorize:test.put".to_owned(),
            "upload:via the client".to_owned()
        ]
    );
    let error = running
        .client()
        .upload(&request("u2", "test.put", json!({})), &file, 3, TIMEOUT)
        .await
        .unwrap_err();
    assert_eq!(error.code(), ErrorCode::BodyTooLarge);
    running.server.shutdown().await;
}

#[tokio::test]
async fn chunked_upload_over_the_limit_is_body_too_large_with_nothing_left_on_disk() {
    let running = start().await;
    let token = running.server.descriptor().token.expose().to_owned();
    // The binding claims 64 bytes (the limit) but the chunked body sends 65.
    let declared = vec![b'a'; 64];
    let head = upload_head(
        &token,
        "test.put",
        json!({}),
        &declared,
        "transfer-encoding: chunked\r\n",
    );
    let mut request = head.into_bytes();
    request.extend_from_slice(b"41\r\n");
    request.extend_from_slice(&[b'a'; 65]);
    request.extend_from_slice(b"\r\n0\r\n\r\n");
    let response = raw(&running.socket(), &request).await;
    assert_eq!(
        (status(&response), error_code(&response).as_str()),
        (413, "body_too_large"),
        "{response}"
    );
    assert!(running.temp_files().is_empty());
    // A binding over the method's limit is refused before any byte is read.
    let over = vec![b'a'; 65];
    let head = upload_head(
        &token,
        "test.put",
        json!({}),
        &over,
        "transfer-encoding: chunked\r\n",
    );
    let response = raw(&running.socket(), head.as_bytes()).await;
    assert_eq!(error_code(&response), "body_too_large");
    // Exactly at the limit, chunked, works.
    let head = upload_head(
        &token,
        "test.put",
        json!({}),
        &declared,
        "transfer-encoding: chunked\r\n",
    );
    let mut request = head.into_bytes();
    request.extend_from_slice(b"40\r\n");
    request.extend_from_slice(&declared);
    request.extend_from_slice(b"\r\n0\r\n\r\n");
    assert_eq!(status(&raw(&running.socket(), &request).await), 200);
    assert!(running.temp_files().is_empty());
    running.server.shutdown().await;
}

#[tokio::test]
async fn upload_body_not_matching_its_binding_is_refused_and_removed() {
    let running = start().await;
    let token = running.server.descriptor().token.expose().to_owned();
    let head = upload_head(
        &token,
        "test.put",
        json!({}),
        b"expected",
        "content-length: 8\r\n",
    );
    let mut request = head.into_bytes();
    request.extend_from_slice(b"tampered");
    let response = raw(&running.socket(), &request).await;
    assert_eq!(
        (status(&response), error_code(&response).as_str()),
        (400, "invalid_request")
    );
    assert!(running.temp_files().is_empty());
    running.server.shutdown().await;
}

#[tokio::test]
async fn expect_on_other_paths_is_417() {
    let running = start().await;
    let token = running.server.descriptor().token.expose().to_owned();
    let body = r#"{"protocolVersion":1,"surfaceVersion":2,"id":"r1","method":"test.echo"}"#;
    let request = String::from_utf8(rpc_bytes(&token, "test.echo", body))
        .unwrap()
        .replacen(
            "connection: close",
            "expect: 100-continue\r\nconnection: close",
            1,
        );
    let response = raw(&running.socket(), request.as_bytes()).await;
    assert_eq!(
        (status(&response), error_code(&response).as_str()),
        (417, "invalid_request")
    );
    assert!(running.service.log().is_empty());
    running.server.shutdown().await;
}

#[tokio::test]
async fn stream_records_arrive_in_order_then_the_terminal_result() {
    let running = start().await;
    let mut seen = Vec::new();
    let result = running
        .client()
        .stream(&request("s1", "test.count", json!({})), TIMEOUT, |record| {
            seen.push((record.sequence, record.data))
        })
        .await
        .unwrap();
    assert_eq!(seen, vec![(0, json!(0)), (1, json!(1)), (2, json!(2))]);
    assert_eq!(result, json!({"ticks": 3}));
    running.server.shutdown().await;
}

#[tokio::test]
async fn shutdown_mid_stream_gives_the_client_a_typed_unavailable() {
    let running = start().await;
    let client = running.client();
    let streaming = tokio::spawn(async move {
        let mut seen = 0;
        let outcome = client
            .stream(&request("s1", "test.forever", json!({})), TIMEOUT, |_| {
                seen += 1
            })
            .await;
        (seen, outcome)
    });
    running.service.streaming.notified().await;
    running.server.shutdown().await;
    let (seen, outcome) = streaming.await.unwrap();
    assert_eq!(seen, 1);
    let error = outcome.unwrap_err();
    assert_eq!(error.code(), ErrorCode::Unavailable, "{error}");
    assert_eq!(error.exit_code(), 3);
}

#[tokio::test]
async fn shutdown_does_not_wait_for_idle_connections() {
    let running = start().await;
    let mut idle = tokio::net::UnixStream::connect(running.socket())
        .await
        .unwrap();
    // Make sure the connection is being served before shutting down: one full request on it.
    let token = running.server.descriptor().token.expose().to_owned();
    let first = format!(
        "GET /v1/artifacts/art1 HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {token}\r\n\r\n"
    );
    idle.write_all(first.as_bytes()).await.unwrap();
    let mut buffer = vec![0u8; 4096];
    let n = idle.read(&mut buffer).await.unwrap();
    assert!(String::from_utf8_lossy(&buffer[..n]).starts_with("HTTP/1.1 200"));
    tokio::time::timeout(TIMEOUT, running.server.shutdown())
        .await
        .expect("shutdown finished");
}

#[tokio::test]
async fn a_hung_rpc_is_ended_by_the_client_timeout() {
    let running = start().await;
    let error = running
        .client()
        .rpc(
            &request("r1", "test.hang", json!({})),
            Duration::from_millis(200),
        )
        .await
        .unwrap_err();
    assert_eq!(error.code(), ErrorCode::Timeout);
    assert_eq!(error.exit_code(), 7);
    running.server.shutdown().await;
}

#[tokio::test]
async fn download_verifies_length_and_hash_and_odd_ids_never_reach_the_service() {
    let running = start().await;
    let mut out = Vec::new();
    let info = running
        .client()
        .download("art1", &mut out, TIMEOUT)
        .await
        .unwrap();
    assert_eq!(out, b"artifact bytes");
    assert_eq!(
        (info.id.as_str(), info.mime_type.as_str(), info.size),
        ("art1", "text/plain", 14)
    );
    let error = running
        .client()
        .download("nope", &mut Vec::new(), TIMEOUT)
        .await
        .unwrap_err();
    assert_eq!(error.code(), ErrorCode::NotFound);
    let token = running.server.descriptor().token.expose().to_owned();
    for id in ["..%2F..", "a/b", "%00", &"a".repeat(129), "a.b", ""] {
        let request = format!(
            "GET /v1/artifacts/{id} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {token}\r\nconnection: close\r\n\r\n"
        );
        let response = raw(&running.socket(), request.as_bytes()).await;
        assert_eq!(
            (status(&response), error_code(&response).as_str()),
            (404, "not_found"),
            "{id}"
        );
    }
    assert_eq!(
        running.service.log(),
        vec![
            "authorize:download art1".to_owned(),
            "authorize:download nope".to_owned()
        ]
    );
    running.server.shutdown().await;
}

#[tokio::test]
async fn connections_past_the_limit_are_closed() {
    let running = start_with(|config| config.limits.max_connections = 1).await;
    let token = running.server.descriptor().token.expose().to_owned();
    let mut first = tokio::net::UnixStream::connect(running.socket())
        .await
        .unwrap();
    let request = format!(
        "GET /v1/artifacts/art1 HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {token}\r\n\r\n"
    );
    first.write_all(request.as_bytes()).await.unwrap();
    let mut buffer = vec![0u8; 4096];
    let n = first.read(&mut buffer).await.unwrap();
    assert!(String::from_utf8_lossy(&buffer[..n]).starts_with("HTTP/1.1 200"));
    // The first connection is alive (keep-alive) and holds the only slot.
    let mut second = tokio::net::UnixStream::connect(running.socket())
        .await
        .unwrap();
    let _ = second.write_all(request.as_bytes()).await;
    assert_eq!(
        read_to_close(&mut second).await,
        "",
        "closed without an answer"
    );
    drop(first);
    running.server.shutdown().await;
}

#[tokio::test]
async fn socket_owner_is_us_and_peer_check_passes_for_our_uid() {
    let running = start().await;
    let meta = std::fs::symlink_metadata(running.socket()).unwrap();
    assert_eq!(meta.uid(), rustix::process::getuid().as_raw());
    running.server.shutdown().await;
}

#[tokio::test]
async fn requests_past_the_pending_limit_are_rate_limited() {
    let running = start_with(|config| config.limits.max_pending_requests = 1).await;
    let client = running.client();
    let hung = tokio::spawn(async move {
        client
            .rpc(&request("r1", "test.hang", json!({})), TIMEOUT)
            .await
    });
    running.service.hanging.notified().await;
    let error = running
        .client()
        .rpc(&request("r2", "test.echo", json!({})), TIMEOUT)
        .await
        .unwrap_err();
    assert_eq!(error.code(), ErrorCode::RateLimited);
    assert!(matches!(error, ClientError::Remote { status: 429, ref error } if error.retriable));
    hung.abort();
    running.server.shutdown().await;
}

#[tokio::test]
async fn a_dropped_connection_fires_the_request_cancellation_signal() {
    let running = start().await;
    let client = running.client();
    let hung = tokio::spawn(async move {
        client
            .rpc(&request("r1", "test.hang", json!({})), TIMEOUT)
            .await
    });
    running.service.hanging.notified().await;
    hung.abort();
    let _ = hung.await;
    tokio::time::timeout(TIMEOUT, running.service.hang_cancelled.notified())
        .await
        .expect("cancellation seen");
    assert!(
        running
            .service
            .log()
            .contains(&"cancelled:test.hang".to_owned())
    );
    running.server.shutdown().await;
}

#[tokio::test]
async fn a_result_over_16_mib_is_result_too_large() {
    let running = start().await;
    let error = running
        .client()
        .rpc(&request("r1", "test.big", json!({})), TIMEOUT)
        .await
        .unwrap_err();
    assert_eq!(error.code(), ErrorCode::ResultTooLarge);
    assert_eq!(error.exit_code(), 6);
    running.server.shutdown().await;
}

#[tokio::test]
async fn a_client_that_never_finishes_its_head_is_disconnected() {
    let running =
        start_with(|config| config.limits.header_read_timeout = Duration::from_millis(100)).await;
    let mut stream = tokio::net::UnixStream::connect(running.socket())
        .await
        .unwrap();
    stream
        .write_all(b"POST /v1/rpc HTTP/1.1\r\nhost: x\r\n")
        .await
        .unwrap();
    let response = read_to_close(&mut stream).await;
    assert!(!response.starts_with("HTTP/1.1 2"), "{response}");
    running.server.shutdown().await;
}

#[tokio::test]
async fn a_refused_client_upload_sends_no_bytes() {
    let running = start().await;
    let file = running.dir.path().join("input.bin");
    std::fs::write(&file, b"never sent").unwrap();
    let envelope = request("u1", "test.put", json!({"deny": true}));
    let error = running
        .client()
        .upload(&envelope, &file, 64, TIMEOUT)
        .await
        .unwrap_err();
    assert_eq!(error.code(), ErrorCode::PermissionDenied);
    assert_eq!(running.service.log(), vec!["authorize:test.put".to_owned()]);
    assert!(running.temp_files().is_empty());
    running.server.shutdown().await;
}

#[tokio::test]
async fn the_client_sees_body_too_large_even_while_it_is_still_sending() {
    let running = start().await;
    for size in [2 * 1024, 4 * 1024 * 1024] {
        let params = json!("x".repeat(size));
        let error = running
            .client()
            .rpc(&request("r1", "test.echo", params), TIMEOUT)
            .await
            .unwrap_err();
        assert_eq!(error.code(), ErrorCode::BodyTooLarge, "{size}: {error}");
    }
    running.server.shutdown().await;
}
