//! The OpenAI-compatible client against the loopback test server (`agentwire_testkit::openai_server`):
//! every endpoint's happy path, request shapes, and each failure mode.

use std::time::Duration;

use agentwire_provider::{
    ApiKey, ChatMessage, ChatRequest, FinishReason, ImageRequest, Limits, OpenAiConfig, Provider,
    ProviderError, Role, SpeechRequest, StreamItem, TranscriptionRequest, Usage, VideoRequest,
    VideoStatus,
};
use agentwire_testkit::openai_server::{
    CHAT_DELTAS, CHAT_REASONING, CHAT_USAGE, Failure, MODEL_IDS, OpenAiTestServer, PNG_1X1,
    TRANSCRIPTION_TEXT, VIDEO_BYTES, speech_wav,
};
use serde_json::Value;

const KEY: &str = "sk-test-planted-key-0123456789";
const SECRET: &str = "UPSTREAM-PLANTED-SECRET-42";
/// Bound on every wait for the server's side of a test (never reached when the code is right).
const WAIT: Duration = Duration::from_secs(20);

fn provider(server: &OpenAiTestServer, limits: Limits) -> Provider {
    Provider::openai(OpenAiConfig {
        base_url: server.base_url(),
        api_key: Some(ApiKey::new(KEY).expect("key")),
        default_model: Some("test-chat".into()),
        limits,
    })
    .expect("provider")
}

fn hello() -> ChatRequest {
    ChatRequest {
        messages: vec![
            ChatMessage::text(Role::System, "be brief"),
            ChatMessage::text(Role::User, "hi"),
        ],
        temperature: Some(0.2),
        max_tokens: Some(50),
        ..ChatRequest::default()
    }
}

fn json_body(body: &[u8]) -> Value {
    serde_json::from_slice(body).expect("json request body")
}

#[tokio::test]
async fn chat_streams_reasoning_text_finish_and_usage_in_order() {
    let server = OpenAiTestServer::start().await.expect("server");
    let provider = provider(&server, Limits::default());
    let mut stream = provider.chat(&hello()).await.expect("stream");
    let mut items = Vec::new();
    while let Some(item) = stream.next().await.expect("item") {
        items.push(item);
    }
    let mut want = vec![StreamItem::Reasoning(CHAT_REASONING.into())];
    want.extend(CHAT_DELTAS.iter().map(|t| StreamItem::Text((*t).into())));
    want.push(StreamItem::Finish(FinishReason("stop".into())));
    want.push(StreamItem::Usage(Usage {
        input_tokens: CHAT_USAGE.0,
        output_tokens: CHAT_USAGE.1,
    }));
    assert_eq!(items, want);
    let request = &server.requests()[0];
    assert_eq!(request.path, "/v1/chat/completions");
    assert_eq!(
        request.authorization.as_deref(),
        Some(format!("Bearer {KEY}").as_str())
    );
    let body = json_body(&request.body);
    assert_eq!(body["model"], "test-chat");
    assert_eq!(body["stream"], true);
    assert_eq!(body["temperature"], 0.2);
    assert_eq!(body["max_tokens"], 50);
    assert_eq!(body["messages"][0]["role"], "system");
    // A per-call model wins and leaves the default alone.
    let mut other = hello();
    other.model = Some("test-other".into());
    drop(provider.chat(&other).await.expect("stream"));
    server.wait_requests(2).await;
    assert_eq!(json_body(&server.requests()[1].body)["model"], "test-other");
    assert_eq!(provider.default_model(), Some("test-chat"));
}

#[tokio::test]
async fn models_images_speech_transcription_and_video() {
    let server = OpenAiTestServer::start().await.expect("server");
    let limits = Limits {
        video_poll_interval: Duration::from_millis(5),
        ..Limits::default()
    };
    let provider = provider(&server, limits);

    let models: Vec<String> = provider
        .list_models()
        .await
        .expect("models")
        .into_iter()
        .map(|m| m.id)
        .collect();
    assert_eq!(models, MODEL_IDS);

    let images = provider
        .generate_images(&ImageRequest {
            prompt: "a cat".into(),
            size: Some("256x256".into()),
            ..ImageRequest::default()
        })
        .await
        .expect("b64 image");
    assert_eq!(images[0].bytes, PNG_1X1);
    assert_eq!(images[0].mime, "image/png");
    assert_eq!(
        images[0].revised_prompt.as_deref(),
        Some("a revised prompt")
    );
    let decoder = png::Decoder::new(std::io::Cursor::new(PNG_1X1));
    assert!(decoder.read_info().is_ok(), "the fixture PNG is valid");
    let by_url = provider
        .generate_images(&ImageRequest {
            prompt: "send it as-url please".into(),
            ..ImageRequest::default()
        })
        .await
        .expect("url image");
    assert_eq!(by_url[0].bytes, PNG_1X1);
    let download = server.requests().pop().expect("download request");
    assert_eq!(download.path, "/files/image.png");
    assert_eq!(download.authorization, None, "no key sent to image urls");

    let speech = provider
        .generate_speech(&SpeechRequest {
            input: "say this".into(),
            ..SpeechRequest::default()
        })
        .await
        .expect("speech");
    assert_eq!(
        (speech.bytes, speech.mime.as_str()),
        (speech_wav(), "audio/wav")
    );
    let body = json_body(&server.requests().pop().expect("speech request").body);
    assert_eq!(
        (
            body["input"].as_str(),
            body["voice"].as_str(),
            body["response_format"].as_str()
        ),
        (Some("say this"), Some("alloy"), Some("wav"))
    );

    let audio = b"RIFF-the-uploaded-audio".to_vec();
    let text = provider
        .transcribe(&TranscriptionRequest {
            model: Some("test-whisper".into()),
            audio: audio.clone(),
            file_name: "clip.wav".into(),
            mime: "audio/wav".into(),
            language: Some("en".into()),
        })
        .await
        .expect("transcription");
    assert_eq!(text.text, TRANSCRIPTION_TEXT);
    let upload = server.requests().pop().expect("upload");
    let content_type = upload.content_type.expect("content type");
    let boundary = content_type
        .strip_prefix("multipart/form-data; boundary=")
        .expect("multipart");
    let body = String::from_utf8_lossy(&upload.body);
    assert!(body.contains("name=\"model\"\r\n\r\ntest-whisper\r\n"));
    assert!(body.contains("name=\"language\"\r\n\r\nen\r\n"));
    assert!(body.contains(
        "name=\"file\"; filename=\"clip.wav\"\r\nContent-Type: audio/wav\r\n\r\nRIFF-the-uploaded-audio\r\n"
    ));
    assert!(body.ends_with(&format!("--{boundary}--\r\n")));

    let mut progress = Vec::new();
    let video = provider
        .generate_video(
            &VideoRequest {
                prompt: "waves".into(),
                seconds: Some(4),
                ..VideoRequest::default()
            },
            &mut |job| progress.push((job.status, job.progress)),
        )
        .await
        .expect("video");
    assert_eq!(
        progress,
        [
            (VideoStatus::Queued, 0),
            (VideoStatus::InProgress, 50),
            (VideoStatus::Completed, 100)
        ]
    );
    assert_eq!(
        (video.bytes.as_slice(), video.mime.as_str()),
        (VIDEO_BYTES, "video/mp4")
    );
    let paths: Vec<String> = server
        .requests()
        .iter()
        .rev()
        .take(4)
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    assert_eq!(
        paths,
        [
            "GET /v1/videos/video_test1/content",
            "GET /v1/videos/video_test1",
            "GET /v1/videos/video_test1",
            "POST /v1/videos"
        ]
    );
}

#[tokio::test]
async fn failures_are_normalized_and_never_carry_upstream_text() {
    let server = OpenAiTestServer::start().await.expect("server");
    let provider = provider(&server, Limits::default());
    for (status, code, retryable, class) in [
        (500, "provider_http_error", true, "5xx"),
        (503, "provider_http_error", true, "5xx"),
        (400, "provider_http_error", false, "4xx"),
        (401, "provider_auth_failed", false, "4xx"),
        (429, "provider_rate_limited", true, "4xx"),
    ] {
        server.set_failure(Some(Failure::Status {
            status,
            secret: SECRET.into(),
        }));
        let errors = [
            provider.chat(&hello()).await.map(|_| ()).expect_err("chat"),
            provider
                .list_models()
                .await
                .map(|_| ())
                .expect_err("models"),
            provider
                .generate_speech(&SpeechRequest {
                    input: "x".into(),
                    ..SpeechRequest::default()
                })
                .await
                .map(|_| ())
                .expect_err("speech"),
        ];
        for error in errors {
            assert_eq!(error.code(), code);
            assert_eq!(error.status(), Some(status));
            assert_eq!(error.retryable(), retryable, "{status}");
            assert_eq!(error.status_class().map(|c| c.as_str()), Some(class));
            let shown = format!("{error} {error:?}");
            assert!(!shown.contains(SECRET), "{shown}");
            assert!(!shown.contains(KEY), "{shown}");
        }
    }
}

#[tokio::test]
async fn stalls_time_out_and_abort_the_upstream_request() {
    let server = OpenAiTestServer::start().await.expect("server");
    let limits = Limits {
        idle_timeout: Duration::from_millis(300),
        ..Limits::default()
    };
    let provider = provider(&server, limits);

    server.set_failure(Some(Failure::Stall));
    let error = provider.list_models().await.expect_err("stalled");
    assert_eq!(error, ProviderError::Timeout);
    assert!(error.retryable());
    tokio::time::timeout(WAIT, server.wait_aborted(1))
        .await
        .expect("the stalled request was closed by the client");

    server.set_failure(Some(Failure::StallMidStream));
    let mut stream = provider.chat(&hello()).await.expect("head arrives");
    assert_eq!(
        stream.next().await,
        Ok(Some(StreamItem::Reasoning(CHAT_REASONING.into())))
    );
    assert_eq!(
        stream.next().await,
        Ok(Some(StreamItem::Text(CHAT_DELTAS[0].into())))
    );
    assert_eq!(
        stream.next().await,
        Ok(Some(StreamItem::Text(CHAT_DELTAS[1].into())))
    );
    assert_eq!(stream.next().await, Err(ProviderError::Timeout));
    drop(stream);
    tokio::time::timeout(WAIT, server.wait_aborted(2))
        .await
        .expect("the stalled stream was closed by the client");
}

#[tokio::test]
async fn dropping_a_reply_stream_aborts_the_upstream_request() {
    let server = OpenAiTestServer::start().await.expect("server");
    let provider = provider(&server, Limits::default());
    server.set_failure(Some(Failure::StallMidStream));
    let mut stream = provider.chat(&hello()).await.expect("stream");
    assert!(matches!(
        stream.next().await,
        Ok(Some(StreamItem::Reasoning(_)))
    ));
    assert_eq!(server.aborted(), 0);
    drop(stream);
    tokio::time::timeout(WAIT, server.wait_aborted(1))
        .await
        .expect("cancellation closed the connection");
}

#[tokio::test]
async fn oversized_responses_are_refused_at_one_byte_past_the_limit() {
    let server = OpenAiTestServer::start().await.expect("server");
    let limits = Limits {
        max_audio_bytes: 100_000,
        max_json_bytes: 5_000,
        max_event_bytes: 4_096,
        ..Limits::default()
    };
    let provider = provider(&server, limits);
    let speak = || async {
        provider
            .generate_speech(&SpeechRequest {
                input: "x".into(),
                ..SpeechRequest::default()
            })
            .await
    };
    server.set_failure(Some(Failure::Oversized { bytes: 100_000 }));
    assert_eq!(speak().await.expect("at the limit").bytes.len(), 100_000);
    server.set_failure(Some(Failure::Oversized { bytes: 100_001 }));
    assert_eq!(
        speak().await.map(|_| ()),
        Err(ProviderError::ResponseTooLarge)
    );
    server.set_failure(Some(Failure::Oversized { bytes: 5_001 }));
    assert_eq!(
        provider.list_models().await.map(|_| ()),
        Err(ProviderError::ResponseTooLarge)
    );
    server.set_failure(Some(Failure::Oversized { bytes: 64 * 1024 }));
    let mut stream = provider.chat(&hello()).await.expect("head");
    assert_eq!(stream.next().await, Err(ProviderError::ResponseTooLarge));
}

#[tokio::test]
async fn uploads_over_the_limit_are_refused_before_sending() {
    let server = OpenAiTestServer::start().await.expect("server");
    let limits = Limits {
        max_upload_bytes: 10,
        ..Limits::default()
    };
    let provider = provider(&server, limits);
    let request = |len| TranscriptionRequest {
        audio: vec![1; len],
        file_name: "a.wav".into(),
        mime: "audio/wav".into(),
        ..TranscriptionRequest::default()
    };
    assert_eq!(
        provider.transcribe(&request(11)).await,
        Err(ProviderError::InputTooLarge)
    );
    assert!(server.requests().is_empty());
    assert!(provider.transcribe(&request(10)).await.is_ok());
}

#[tokio::test]
async fn an_unreachable_provider_is_a_retryable_error() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    drop(listener);
    let provider = Provider::openai(OpenAiConfig {
        base_url: format!("http://{addr}/v1"),
        api_key: None,
        default_model: Some("m".into()),
        limits: Limits::default(),
    })
    .expect("provider");
    let error = provider.list_models().await.expect_err("nobody listens");
    assert_eq!(error, ProviderError::Unreachable);
    assert!(error.retryable());
    assert_eq!(error.status(), None);
}
