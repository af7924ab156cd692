//! Model and media compute through the real socket: `models.*`, `images/speech/videos.generate`,
//! `audio.transcribe*` against the built-in provider and the loopback OpenAI-compatible test server
//! (`agentwire_testkit::openai_server`): streaming order, cancellation that aborts the upstream request, a stalled
//! provider, a 500 whose planted secret never shows, oversized responses, uploads over the limit, and agent tokens
//! that get artifact ids and metadata only. Every result's `benchmark` record is checked field by field against
//! the request and the rest of the result (`check_benchmark`).

use std::sync::Arc;
use std::time::Duration;

use agentwire_host::agents::AgentRegistry;
use agentwire_host::control::{ControlConfig, ControlPlane};
use agentwire_host::providers::{NewProvider, ProviderRegistry};
use agentwire_local_control::client::{Client, ClientError};
use agentwire_local_control::contract::providers::ApiType;
use agentwire_local_control::descriptor::{Token, discover};
use agentwire_local_control::envelope::{ErrorBody, ErrorCode, RequestEnvelope, StreamRecord};
use agentwire_local_control::server::{Server, ServerConfig};
use agentwire_testkit::openai_server::{
    CHAT_DELTAS, CHAT_REASONING, CHAT_USAGE, Failure, OpenAiTestServer,
};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(60);
const SECRET: &str = "UPSTREAM-PLANTED-SECRET-77";
const KEY: &str = "sk-planted-provider-key-0123456789";

struct Host {
    tmp: tempfile::TempDir,
    plane: ControlPlane,
    _server: Server,
    human: Client,
    data: std::path::PathBuf,
}

async fn host(limits: agentwire_provider::Limits) -> Host {
    let tmp = tempfile::tempdir().expect("temp dir");
    let data = tmp.path().join("data");
    let registry = Arc::new(AgentRegistry::load(tmp.path(), &|_| None, None).expect("agents"));
    let mut config = ControlConfig::new(&data, "9.9.9");
    config.provider_limits = limits;
    let plane = ControlPlane::open(config, registry).await.expect("plane");
    let server = Server::start(ServerConfig::new(&data, "9.9.9"), plane.clone())
        .await
        .expect("server");
    let descriptor = discover(&data).expect("descriptor");
    let token = descriptor.token.clone();
    let human = Client::from_descriptor(&descriptor, token).expect("client");
    Host {
        tmp,
        plane,
        _server: server,
        human,
        data,
    }
}

impl Host {
    /// Registers the test server as provider `local-llm` with the planted key and model `test-chat`; returns its id.
    fn add_test_provider(&self, server: &OpenAiTestServer) -> String {
        let mut registry = ProviderRegistry::open(&self.data).expect("registry");
        let provider = registry
            .add(NewProvider {
                name: "local-llm".into(),
                api_type: ApiType::Openai,
                base_url: server.base_url(),
                enabled: true,
            })
            .expect("add provider");
        registry
            .set_api_key(
                &provider.id,
                &agentwire_host::ApiKey::new(KEY).expect("key"),
            )
            .expect("key");
        for model in ["test-chat", "test-speech", "test-video"] {
            registry
                .set_model_status(&provider.id, model, true)
                .expect("model");
        }
        provider.id
    }

    fn agent(&self) -> Client {
        let token = self
            .plane
            .issue_agent_token("thread-1")
            .expect("agent token");
        let descriptor = discover(&self.data).expect("descriptor");
        Client::from_descriptor(&descriptor, Token::parse(&token).expect("token shape"))
            .expect("agent client")
    }

    /// Everything the host wrote under its data dir (audit log, store, spool), as lossy text.
    fn all_files_text(&self) -> String {
        let mut text = String::new();
        let mut stack = vec![self.tmp.path().to_path_buf()];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                let path = entry.path();
                if path.is_dir() {
                    stack.push(path);
                } else if let Ok(bytes) = std::fs::read(&path) {
                    text.push_str(&String::from_utf8_lossy(&bytes));
                }
            }
        }
        text
    }
}

async fn stream(
    client: &Client,
    method: &str,
    params: Value,
) -> (Vec<StreamRecord>, Result<Value, ClientError>) {
    let mut records = Vec::new();
    let outcome = client
        .stream(&RequestEnvelope::new("req-1", method, params), WAIT, |r| {
            records.push(r)
        })
        .await;
    (records, outcome)
}

fn remote(error: ClientError) -> ErrorBody {
    match error {
        ClientError::Remote { error, .. } => error,
        other => panic!("not an error envelope: {other}"),
    }
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The redacted settings a call should report: the defaults with `given` laid over them.
fn settings(given: Value) -> Value {
    let mut all = json!({"temperature":null,"maxTokens":null,"systemPrompt":false,"systemPromptChars":0,
        "messageCount":0,"size":null,"seconds":null,"voice":null,"responseFormat":null,"speed":null});
    for (k, v) in given.as_object().expect("object") {
        assert!(all.get(k).is_some(), "unknown setting {k}");
        all[k] = v.clone();
    }
    all
}

/// What a test knows about a call from its request.
struct Expect<'a> {
    method: &'a str,
    requested: Value,
    adapter: &'a str,
    settings: Value,
    input_bytes: usize,
    input_artifact: Value,
}

const BENCHMARK_FIELDS: &[&str] = &[
    "appVersion",
    "artifacts",
    "cancelled",
    "finishReason",
    "inputArtifact",
    "inputBytes",
    "latency",
    "method",
    "outputBytes",
    "protocolVersion",
    "providerAdapter",
    "providerAdapterVersion",
    "requested",
    "resolved",
    "retries",
    "settings",
    "surfaceVersion",
    "usage",
];

/// Checks every field of `result.benchmark` against `expect` and the rest of `result`.
fn check_benchmark(result: &Value, expect: &Expect<'_>, data_dir: &std::path::Path) {
    let b = &result["benchmark"];
    let mut keys: Vec<&str> = b
        .as_object()
        .expect("benchmark object")
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    assert_eq!(keys, BENCHMARK_FIELDS, "{b}");
    assert_eq!(b["method"], expect.method);
    assert_eq!(b["requested"], expect.requested);
    assert_eq!(
        b["resolved"],
        json!({"providerId": result["providerId"], "modelId": result["modelId"]})
    );
    assert_eq!(b["settings"], expect.settings);
    assert_eq!(b["inputBytes"], expect.input_bytes as u64);
    let text_bytes = |field: &str| result[field].as_str().map_or(0, str::len) as u64;
    let artifacts: Vec<Value> = result["artifacts"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|a| json!({"id":a["id"],"mimeType":a["mimeType"],"size":a["size"],"sha256":a["sha256"]}))
        .collect();
    let latency = &b["latency"];
    assert!(latency["queueMs"].is_u64(), "{latency}");
    let first_event = latency["firstEventMs"].as_u64().expect("firstEventMs");
    let total = latency["totalMs"].as_u64().expect("totalMs");
    assert!(first_event <= total, "{latency}");
    match expect.method {
        "models.invoke" => {
            assert_eq!(
                b["outputBytes"],
                text_bytes("text") + text_bytes("reasoning")
            );
            assert_eq!(
                b["usage"],
                result.get("usage").cloned().unwrap_or(Value::Null)
            );
            assert_eq!(b["latency"], result["latency"]);
            assert_eq!(b["finishReason"], result["finishReason"]);
            assert_eq!(b["artifacts"], json!([]));
        }
        "audio.transcribeUpload" | "audio.transcribeArtifact" => {
            assert_eq!(b["outputBytes"], text_bytes("text"));
            assert_eq!(b["inputBytes"], result["inputBytes"]);
            assert_eq!(b["usage"], Value::Null);
            assert_eq!(latency["firstTextMs"], latency["firstEventMs"]);
            let duration = result["durationMs"].as_f64().expect("durationMs");
            assert_eq!(total, duration as u64);
            assert_eq!(b["finishReason"], "complete");
            assert_eq!(b["artifacts"], json!([]));
        }
        _ => {
            let sizes: u64 = artifacts
                .iter()
                .map(|a| a["size"].as_u64().expect("size"))
                .sum();
            assert_eq!(b["outputBytes"], sizes);
            assert_eq!(b["usage"], Value::Null);
            assert_eq!(latency["firstTextMs"], Value::Null);
            assert_eq!(latency["totalMs"], result["durationMs"]);
            assert_eq!(b["finishReason"], "complete");
            assert_eq!(b["artifacts"], Value::Array(artifacts));
        }
    }
    assert_eq!(b["retries"], 0);
    assert_eq!(b["cancelled"], false);
    assert_eq!(b["inputArtifact"], expect.input_artifact);
    assert_eq!(b["appVersion"], "9.9.9");
    assert_eq!(
        b["protocolVersion"],
        agentwire_local_control::contract::PROTOCOL_VERSION
    );
    assert_eq!(
        b["surfaceVersion"],
        agentwire_local_control::contract::SURFACE_VERSION
    );
    assert_eq!(b["providerAdapter"], expect.adapter);
    assert_eq!(b["providerAdapterVersion"], agentwire_provider::VERSION);
    let shown = b.to_string();
    let dir = data_dir.to_str().expect("utf-8");
    assert!(!shown.contains(dir), "a local path in {shown}");
}

fn hello(provider: &str, model: &str) -> Value {
    json!({"providerId": provider, "modelId": model,
           "messages": [{"role":"system","content":"be brief"},{"role":"user","content":"hello there"}],
           "temperature": 0.3, "maxTokens": 64})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_builtin_provider_needs_no_configuration() {
    let host = host(agentwire_provider::Limits::default()).await;
    let listed = host
        .human
        .rpc(
            &RequestEnvelope::new("l", "models.listPublic", json!({"providerId":"builtin"})),
            WAIT,
        )
        .await
        .expect("list");
    let ids: Vec<&str> = listed["models"]
        .as_array()
        .expect("models")
        .iter()
        .filter_map(|m| m["id"].as_str())
        .collect();
    for id in [
        "builtin-demo",
        "builtin-image",
        "builtin-speech",
        "builtin-transcribe",
        "builtin-video",
    ] {
        assert!(ids.contains(&id), "{id} in {ids:?}");
    }
    let caps = host
        .human
        .rpc(
            &RequestEnvelope::new(
                "c",
                "models.getCapabilities",
                json!({"providerId":"builtin","modelId":"builtin-demo"}),
            ),
            WAIT,
        )
        .await
        .expect("capabilities");
    assert_eq!(caps["capabilities"]["methods"], json!(["models.invoke"]));

    let (records, outcome) = stream(
        &host.human,
        "models.invoke",
        hello("builtin", "builtin-demo"),
    )
    .await;
    let result = outcome.expect("invoke");
    let types: Vec<&str> = records
        .iter()
        .map(|r| {
            assert_eq!(r.event, "models.invoke");
            r.data["type"].as_str().unwrap_or_default()
        })
        .collect();
    let texts = types.iter().filter(|t| **t == "text_delta").count();
    assert!(texts >= 3, "{types:?}");
    assert_eq!(&types[types.len() - 2..], ["stop", "usage"]);
    assert!(types[..texts].iter().all(|t| *t == "text_delta"));
    let streamed: String = records
        .iter()
        .filter_map(|r| r.data["text"].as_str())
        .collect();
    assert_eq!(result["text"], streamed.as_str());
    assert_eq!(streamed, "You said: hello there (turn 1 of this session)");
    assert_eq!(result["finishReason"], "complete");
    assert_eq!(result["providerId"], "builtin");
    assert_eq!(result["modelId"], "builtin-demo");
    let latency = &result["latency"];
    for field in ["queueMs", "firstEventMs", "firstTextMs", "totalMs"] {
        assert!(latency[field].is_u64(), "{field}: {latency}");
    }
    assert!(latency["firstTextMs"].as_u64() <= latency["totalMs"].as_u64());
    let hello_settings = settings(json!({"temperature":0.3,"maxTokens":64,"systemPrompt":true,
        "systemPromptChars":"be brief".len(),"messageCount":2}));
    check_benchmark(
        &result,
        &Expect {
            method: "models.invoke",
            requested: json!({"providerId":"builtin","modelId":"builtin-demo"}),
            adapter: "builtin",
            settings: hello_settings,
            input_bytes: "be brief".len() + "hello there".len(),
            input_artifact: Value::Null,
        },
        &host.data,
    );
    // Ids left out: the host uses the built-in provider and model, and the record says what was asked: nothing.
    let (_, defaulted) = stream(
        &host.human,
        "models.invoke",
        json!({"messages":[{"role":"user","content":"héllo"}]}),
    )
    .await;
    let defaulted = defaulted.expect("defaulted invoke");
    assert_eq!(defaulted["modelId"], "builtin-demo");
    check_benchmark(
        &defaulted,
        &Expect {
            method: "models.invoke",
            requested: json!({"providerId":null,"modelId":null}),
            adapter: "builtin",
            settings: settings(json!({"messageCount":1})),
            input_bytes: "héllo".len(),
            input_artifact: Value::Null,
        },
        &host.data,
    );
    // A custom provider needs a model id: refused by the contract before any lookup.
    let (_, refused) = stream(
        &host.human,
        "models.invoke",
        json!({"providerId":"local-llm","messages":[{"role":"user","content":"x"}]}),
    )
    .await;
    assert_eq!(
        remote(refused.expect_err("no model")).code,
        ErrorCode::InvalidRequest
    );
    // A model of another kind is refused before any provider call.
    let (_, refused) = stream(
        &host.human,
        "models.invoke",
        hello("builtin", "builtin-image"),
    )
    .await;
    assert_eq!(
        remote(refused.expect_err("not chat")).code,
        ErrorCode::Conflict
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_custom_provider_streams_reasoning_text_usage_and_stop_in_order() {
    let host = host(agentwire_provider::Limits::default()).await;
    let server = OpenAiTestServer::start().await.expect("test server");
    let provider = host.add_test_provider(&server);
    let (records, outcome) =
        stream(&host.human, "models.invoke", hello(&provider, "test-chat")).await;
    let result = outcome.expect("invoke");
    let mut want = vec![json!({"type":"reasoning_delta","text":CHAT_REASONING})];
    want.extend(
        CHAT_DELTAS
            .iter()
            .map(|t| json!({"type":"text_delta","text":t})),
    );
    want.push(json!({"type":"stop","reason":"complete"}));
    want.push(json!({"type":"usage","usage":{"promptTokens":CHAT_USAGE.0,
        "completionTokens":CHAT_USAGE.1,"totalTokens":CHAT_USAGE.0 + CHAT_USAGE.1}}));
    let got: Vec<Value> = records.into_iter().map(|r| r.data).collect();
    assert_eq!(got, want);
    assert_eq!(result["text"], CHAT_DELTAS.concat());
    assert_eq!(result["reasoning"], CHAT_REASONING);
    check_benchmark(
        &result,
        &Expect {
            method: "models.invoke",
            requested: json!({"providerId":provider,"modelId":"test-chat"}),
            adapter: "openai-compatible",
            settings: settings(json!({"temperature":0.3,"maxTokens":64,"systemPrompt":true,
                "systemPromptChars":8,"messageCount":2})),
            input_bytes: "be brief".len() + "hello there".len(),
            input_artifact: Value::Null,
        },
        &host.data,
    );
    assert_eq!(
        result["benchmark"]["usage"]["completionTokens"],
        CHAT_USAGE.1
    );
    let sent = &server.requests()[0];
    assert_eq!(
        sent.authorization.as_deref(),
        Some(format!("Bearer {KEY}").as_str())
    );
    let body: Value = serde_json::from_slice(&sent.body).expect("json");
    assert_eq!(body["model"], "test-chat");
    assert_eq!(body["temperature"], 0.3);
    assert_eq!(body["max_tokens"], 64);
    assert_eq!(
        body["messages"][0],
        json!({"role":"system","content":"be brief"})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_failures_never_show_the_planted_secret() {
    let host = host(agentwire_provider::Limits::default()).await;
    let server = OpenAiTestServer::start().await.expect("test server");
    let provider = host.add_test_provider(&server);
    server.set_failure(Some(Failure::Status {
        status: 500,
        secret: SECRET.into(),
    }));
    let (records, outcome) =
        stream(&host.human, "models.invoke", hello(&provider, "test-chat")).await;
    assert!(records.is_empty());
    let error = remote(outcome.expect_err("500"));
    assert_eq!(error.code, ErrorCode::Unavailable);
    assert!(error.retriable);
    assert_eq!(
        error
            .details
            .as_ref()
            .and_then(|d| d.get("providerFailure")),
        Some(&json!({"statusCode":500,"retryable":true}))
    );
    let shown = serde_json::to_string(&error).expect("json");
    assert!(!shown.contains(SECRET) && !shown.contains(KEY), "{shown}");
    let (_, speech) = stream(
        &host.human,
        "speech.generate",
        json!({"providerId":provider,"modelId":"test-speech","text":"hi"}),
    )
    .await;
    let shown = serde_json::to_string(&remote(speech.expect_err("500"))).expect("json");
    assert!(!shown.contains(SECRET), "{shown}");
    let files = host.all_files_text();
    assert!(!files.contains(SECRET), "the secret reached a file");
    assert!(
        files.contains("models.invoke"),
        "the audit log recorded the call"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_provider_times_out_and_its_request_is_aborted() {
    let limits = agentwire_provider::Limits {
        idle_timeout: Duration::from_millis(300),
        ..agentwire_provider::Limits::default()
    };
    let host = host(limits).await;
    let server = OpenAiTestServer::start().await.expect("test server");
    let provider = host.add_test_provider(&server);
    server.set_failure(Some(Failure::StallMidStream));
    let (records, outcome) =
        stream(&host.human, "models.invoke", hello(&provider, "test-chat")).await;
    assert_eq!(records.len(), 3, "what came before the stall was streamed");
    let error = remote(outcome.expect_err("stalled"));
    assert_eq!(error.code, ErrorCode::Unavailable);
    assert_eq!(
        error
            .details
            .as_ref()
            .and_then(|d| d.get("providerFailure")),
        Some(&json!({"retryable":true}))
    );
    tokio::time::timeout(WAIT, server.wait_aborted(1))
        .await
        .expect("the upstream request was closed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_goes_away_mid_stream_aborts_the_upstream_request() {
    let host = host(agentwire_provider::Limits::default()).await;
    let server = OpenAiTestServer::start().await.expect("test server");
    let provider = host.add_test_provider(&server);
    server.set_failure(Some(Failure::StallMidStream));
    let (first_tx, first_rx) = tokio::sync::oneshot::channel::<()>();
    let client = host.human.clone();
    let call = tokio::spawn(async move {
        let mut first = Some(first_tx);
        let envelope =
            RequestEnvelope::new("req-1", "models.invoke", hello(&provider, "test-chat"));
        client
            .stream(&envelope, WAIT, |_| {
                if let Some(tx) = first.take() {
                    let _ = tx.send(());
                }
            })
            .await
    });
    tokio::time::timeout(WAIT, first_rx)
        .await
        .expect("a record arrived")
        .expect("sender kept");
    assert_eq!(server.aborted(), 0);
    call.abort();
    tokio::time::timeout(WAIT, server.wait_aborted(1))
        .await
        .expect("cancelling the caller closed the upstream request");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_provider_output_is_result_too_large() {
    let limits = agentwire_provider::Limits {
        max_event_bytes: 4096,
        max_audio_bytes: 10_000,
        ..agentwire_provider::Limits::default()
    };
    let host = host(limits).await;
    let server = OpenAiTestServer::start().await.expect("test server");
    let provider = host.add_test_provider(&server);
    server.set_failure(Some(Failure::Oversized { bytes: 64 * 1024 }));
    let (_, outcome) = stream(&host.human, "models.invoke", hello(&provider, "test-chat")).await;
    assert_eq!(
        remote(outcome.expect_err("big")).code,
        ErrorCode::ResultTooLarge
    );
    server.set_failure(Some(Failure::Oversized { bytes: 10_001 }));
    let (_, outcome) = stream(
        &host.human,
        "speech.generate",
        json!({"providerId":provider,"modelId":"test-speech","text":"hi"}),
    )
    .await;
    assert_eq!(
        remote(outcome.expect_err("big")).code,
        ErrorCode::ResultTooLarge
    );
}

async fn download(client: &Client, id: &str) -> Vec<u8> {
    let mut bytes = Vec::new();
    client
        .download(id, &mut bytes, WAIT)
        .await
        .expect("download");
    bytes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn media_results_are_owned_artifacts_and_agents_get_ids_only() {
    let host = host(agentwire_provider::Limits::default()).await;
    let (records, image) = stream(
        &host.human,
        "images.generate",
        json!({"providerId":"builtin","modelId":"builtin-image","prompt":"a lighthouse","options":{"size":"32x16"}}),
    )
    .await;
    let image = image.expect("image");
    assert_eq!(records[0].data["type"], "started");
    assert_eq!(records[1].data["type"], "artifact");
    let artifact = &image["artifacts"][0];
    assert_eq!(artifact["mimeType"], "image/png");
    assert_eq!(artifact["owner"], "human");
    let png = download(&host.human, artifact["id"].as_str().expect("id")).await;
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"));
    assert_eq!(png.len() as u64, artifact["size"].as_u64().expect("size"));
    check_benchmark(
        &image,
        &Expect {
            method: "images.generate",
            requested: json!({"providerId":"builtin","modelId":"builtin-image"}),
            adapter: "builtin",
            settings: settings(json!({"size":"32x16"})),
            input_bytes: "a lighthouse".len(),
            input_artifact: Value::Null,
        },
        &host.data,
    );
    assert_eq!(
        image["benchmark"]["artifacts"][0]["sha256"],
        sha256_hex(&png)
    );

    let (records, video) = stream(
        &host.human,
        "videos.generate",
        json!({"prompt":"waves","options":{"seconds":"1","size":"16x16"}}),
    )
    .await;
    let video = video.expect("video");
    let kinds: Vec<String> = records
        .iter()
        .map(|r| {
            format!(
                "{}{}",
                r.data["type"].as_str().unwrap_or_default(),
                r.data["progress"]
                    .as_u64()
                    .map(|p| format!(":{p}"))
                    .unwrap_or_default()
            )
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "started",
            "progress:0",
            "progress:50",
            "progress:100",
            "artifact"
        ]
    );
    assert_eq!(video["artifacts"][0]["mimeType"], "video/x-msvideo");
    check_benchmark(
        &video,
        &Expect {
            method: "videos.generate",
            requested: json!({"providerId":null,"modelId":null}),
            adapter: "builtin",
            settings: settings(json!({"seconds":"1","size":"16x16"})),
            input_bytes: "waves".len(),
            input_artifact: Value::Null,
        },
        &host.data,
    );
    let avi = download(
        &host.human,
        video["artifacts"][0]["id"].as_str().expect("id"),
    )
    .await;
    assert_eq!(
        video["benchmark"]["artifacts"][0]["sha256"],
        sha256_hex(&avi)
    );
    assert_eq!(video["benchmark"]["outputBytes"], avi.len() as u64);

    // An agent generates speech, gets an id and metadata, cannot download the bytes, but can transcribe its own
    // artifact (the agent path) and gets back the spoken text.
    let agent = host.agent();
    let (_, speech) = stream(
        &agent,
        "speech.generate",
        json!({"providerId":"builtin","modelId":"builtin-speech","text":"open the pod bay doors"}),
    )
    .await;
    let speech = speech.expect("speech");
    let id = speech["artifacts"][0]["id"]
        .as_str()
        .expect("id")
        .to_owned();
    assert_eq!(speech["artifacts"][0]["owner"], "agent");
    check_benchmark(
        &speech,
        &Expect {
            method: "speech.generate",
            requested: json!({"providerId":"builtin","modelId":"builtin-speech"}),
            adapter: "builtin",
            settings: settings(json!({})),
            input_bytes: "open the pod bay doors".len(),
            input_artifact: Value::Null,
        },
        &host.data,
    );
    let mut sink = Vec::new();
    let refused = agent
        .download(&id, &mut sink, WAIT)
        .await
        .expect_err("agents get no bytes");
    assert_eq!(refused.code(), ErrorCode::PermissionDenied);
    let text = agent
        .rpc(
            &RequestEnvelope::new(
                "t",
                "audio.transcribeArtifact",
                json!({"providerId":"builtin","modelId":"builtin-transcribe","artifactId":id}),
            ),
            WAIT,
        )
        .await
        .expect("transcribe own artifact");
    assert_eq!(text["text"], "open the pod bay doors");
    assert_eq!(text["mimeType"], "audio/wav");
    assert_eq!(text["truncated"], false);
    check_benchmark(
        &text,
        &Expect {
            method: "audio.transcribeArtifact",
            requested: json!({"providerId":"builtin","modelId":"builtin-transcribe"}),
            adapter: "builtin",
            settings: settings(json!({})),
            input_bytes: usize::try_from(speech["artifacts"][0]["size"].as_u64().expect("size"))
                .expect("size"),
            input_artifact: speech["benchmark"]["artifacts"][0].clone(),
        },
        &host.data,
    );
    // The human's image is not the agent's: not found, exactly like a missing id.
    let foreign = agent
        .rpc(
            &RequestEnvelope::new(
                "t",
                "audio.transcribeArtifact",
                json!({"providerId":"builtin","modelId":"builtin-transcribe",
                       "artifactId": artifact["id"]}),
            ),
            WAIT,
        )
        .await
        .expect_err("another owner's artifact");
    assert_eq!(remote(foreign).code, ErrorCode::NotFound);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uploads_are_transcribed_and_bounded() {
    let host = host(agentwire_provider::Limits::default()).await;
    let (_, speech) = stream(
        &host.human,
        "speech.generate",
        json!({"text":"hello upload","options":{"voice":"alloy","responseFormat":"wav","speed":1.5}}),
    )
    .await;
    let speech = speech.expect("speech");
    let id = speech["artifacts"][0]["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let wav = download(&host.human, &id).await;
    check_benchmark(
        &speech,
        &Expect {
            method: "speech.generate",
            requested: json!({"providerId":null,"modelId":null}),
            adapter: "builtin",
            settings: settings(json!({"voice":"alloy","responseFormat":"wav","speed":1.5})),
            input_bytes: "hello upload".len(),
            input_artifact: Value::Null,
        },
        &host.data,
    );
    assert_eq!(
        speech["benchmark"]["artifacts"][0]["sha256"],
        sha256_hex(&wav)
    );
    // The human transcribes the artifact with ids left out: the record names the input by id and hash.
    let heard = host
        .human
        .rpc(
            &RequestEnvelope::new("t", "audio.transcribeArtifact", json!({"artifactId": id})),
            WAIT,
        )
        .await
        .expect("transcribe artifact");
    assert_eq!(heard["text"], "hello upload");
    check_benchmark(
        &heard,
        &Expect {
            method: "audio.transcribeArtifact",
            requested: json!({"providerId":null,"modelId":null}),
            adapter: "builtin",
            settings: settings(json!({})),
            input_bytes: wav.len(),
            input_artifact: json!({"id":id,"mimeType":"audio/wav","size":wav.len(),"sha256":sha256_hex(&wav)}),
        },
        &host.data,
    );
    let path = host.tmp.path().join("speech.wav");
    std::fs::write(&path, &wav).expect("write wav");
    let params =
        json!({"modelId":"builtin-transcribe","mimeType":"audio/wav","filename":"speech.wav"});
    let text = host
        .human
        .upload(
            &RequestEnvelope::new("u", "audio.transcribeUpload", params.clone()),
            &path,
            64 * 1024 * 1024,
            WAIT,
        )
        .await
        .expect("upload");
    assert_eq!(text["text"], "hello upload");
    assert_eq!(
        text["inputBytes"].as_u64(),
        Some(std::fs::metadata(&path).expect("meta").len())
    );
    check_benchmark(
        &text,
        &Expect {
            method: "audio.transcribeUpload",
            requested: json!({"providerId":null,"modelId":"builtin-transcribe"}),
            adapter: "builtin",
            settings: settings(json!({})),
            input_bytes: wav.len(),
            input_artifact: Value::Null,
        },
        &host.data,
    );
    // One byte over 25 MiB is refused by the server before the provider sees it.
    let big = host.tmp.path().join("big.wav");
    let file = std::fs::File::create(&big).expect("create");
    file.set_len(25 * 1024 * 1024 + 1).expect("size");
    let refused = host
        .human
        .upload(
            &RequestEnvelope::new("u", "audio.transcribeUpload", params.clone()),
            &big,
            64 * 1024 * 1024,
            WAIT,
        )
        .await
        .expect_err("over the limit");
    assert_eq!(refused.code(), ErrorCode::BodyTooLarge);
    // Agents cannot upload.
    let agent = host.agent();
    let refused = agent
        .upload(
            &RequestEnvelope::new("u", "audio.transcribeUpload", params),
            &path,
            64 * 1024 * 1024,
            WAIT,
        )
        .await
        .expect_err("agent upload");
    assert_eq!(refused.code(), ErrorCode::PermissionDenied);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latencies_count_from_acceptance_and_include_the_queue_wait() {
    use agentwire_host::control::admission::{ComputeDomain, ComputeRequest};
    use agentwire_local_control::caller::Caller;
    let host = host(agentwire_provider::Limits::default()).await;
    let admission = host.plane.compute_admission();
    // Fill every general slot so the invocation queues (a request that would queue is dropped at once).
    let mut held = Vec::new();
    loop {
        let caller = Caller::human(format!("holder-{}", held.len()));
        let request = ComputeRequest::new("test.hold", ComputeDomain::General, &caller);
        match tokio::time::timeout(Duration::from_millis(0), admission.admit(request)).await {
            Ok(permit) => held.push(permit.expect("a free slot")),
            Err(_) => break,
        }
    }
    assert!(admission.queued(ComputeDomain::General) == 0 && !held.is_empty());
    let human = host.human.clone();
    let invocation = tokio::spawn(async move {
        stream(&human, "models.invoke", hello("builtin", "builtin-demo")).await
    });
    while admission.queued(ComputeDomain::General) == 0 {
        tokio::task::yield_now().await;
    }
    // Not synchronization: the request is known to be queued; this only makes its wait measurable.
    tokio::time::sleep(Duration::from_millis(50)).await;
    drop(held);
    let (_, outcome) = invocation.await.expect("join");
    let result = outcome.expect("invoke");
    let latency = &result["latency"];
    let queue = latency["queueMs"].as_u64().expect("queueMs");
    assert!(queue >= 50, "{latency}");
    for field in ["firstEventMs", "firstTextMs", "totalMs"] {
        assert!(
            latency[field].as_u64().expect(field) >= queue,
            "{field} counts from acceptance: {latency}"
        );
    }
    assert_eq!(result["benchmark"]["latency"], *latency);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_calls_finish_completes_as_tool_use_and_a_filtered_answer_fails_without_a_stop() {
    let host = host(agentwire_provider::Limits::default()).await;
    let server = OpenAiTestServer::start().await.expect("test server");
    let provider = host.add_test_provider(&server);
    // No tools are offered, so a `tool_calls` finish called nothing: the answer completes as `tool_use`.
    server.set_finish_reason(Some("tool_calls"));
    let (records, outcome) =
        stream(&host.human, "models.invoke", hello(&provider, "test-chat")).await;
    let result = outcome.expect("a tool_calls finish completes");
    assert_eq!(result["finishReason"], "tool_use");
    assert_eq!(result["text"], CHAT_DELTAS.concat().as_str());
    assert_eq!(result["benchmark"]["finishReason"], "tool_use");
    let stops: Vec<&Value> = records
        .iter()
        .filter(|r| r.data["type"] == "stop")
        .map(|r| &r.data)
        .collect();
    assert_eq!(stops, [&json!({"type":"stop","reason":"tool_use"})]);
    // A filtered answer fails, and no stop record came before the error.
    server.set_finish_reason(Some("content_filter"));
    let (records, outcome) =
        stream(&host.human, "models.invoke", hello(&provider, "test-chat")).await;
    outcome.expect_err("a filtered answer fails");
    assert!(
        records.iter().all(|r| r.data["type"] != "stop"),
        "{records:?}"
    );
    assert!(
        !records.is_empty(),
        "the text before the finish was streamed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn media_methods_refuse_a_model_configured_as_another_kind_and_capabilities_follow_the_config()
 {
    use agentwire_local_control::contract::model_config::PublicModelConfigInput;
    let host = host(agentwire_provider::Limits::default()).await;
    let server = OpenAiTestServer::start().await.expect("test server");
    let provider = host.add_test_provider(&server);
    let config = |value: Value| -> PublicModelConfigInput {
        serde_json::from_value(value).expect("config input")
    };
    {
        let mut registry = ProviderRegistry::open(&host.data).expect("registry");
        let image = json!({"maxTokens": 100, "contextLength": 200, "vision": false,
                           "functionCall": false, "reasoning": false, "type": "imageGeneration"});
        registry
            .set_model_config(&provider, "test-speech", config(image))
            .expect("config");
        let embedding = json!({"maxTokens": 100, "contextLength": 200, "vision": false,
                               "functionCall": false, "reasoning": false, "type": "embedding"});
        registry
            .set_model_config(&provider, "test-video", config(embedding))
            .expect("config");
        let chat = json!({"maxTokens": 100, "contextLength": 200, "vision": true,
                          "functionCall": true, "reasoning": false, "type": "chat"});
        registry
            .set_model_config(&provider, "test-chat", config(chat))
            .expect("config");
    }
    let requests_before = server.requests().len();
    for (method, params) in [
        (
            "speech.generate",
            json!({"providerId":provider,"modelId":"test-speech","text":"hi"}),
        ),
        (
            "videos.generate",
            json!({"providerId":provider,"modelId":"test-video","prompt":"a cat"}),
        ),
    ] {
        let (records, outcome) = stream(&host.human, method, params).await;
        let error = remote(outcome.expect_err("another kind"));
        assert_eq!(error.code, ErrorCode::Conflict, "{method}: {error:?}");
        assert!(records.is_empty());
    }
    assert_eq!(
        server.requests().len(),
        requests_before,
        "nothing reached the provider"
    );
    let caps = host
        .human
        .rpc(
            &RequestEnvelope::new(
                "c",
                "models.getCapabilities",
                json!({"providerId": provider, "modelId": "test-chat"}),
            ),
            WAIT,
        )
        .await
        .expect("capabilities");
    // Named by its name instead of its id: the answer names the id, as every other method's does.
    let by_name = host
        .human
        .rpc(
            &RequestEnvelope::new(
                "c",
                "models.getCapabilities",
                json!({"providerId": "local-llm", "modelId": "test-chat"}),
            ),
            WAIT,
        )
        .await
        .expect("capabilities by provider name");
    assert_eq!(by_name["providerId"], json!(provider), "{by_name}");
    assert_eq!(by_name["capabilities"], caps["capabilities"]);
    let caps = &caps["capabilities"];
    assert_eq!(caps["reasoning"], false, "{caps}");
    assert_eq!(caps["functionCall"], true, "{caps}");
    assert_eq!(caps["vision"], true, "{caps}");
    // Built-in media models take no tools, in their config and in their capabilities alike.
    for model in [
        "builtin-speech",
        "builtin-transcribe",
        "builtin-video",
        "builtin-image",
    ] {
        let caps = host
            .human
            .rpc(
                &RequestEnvelope::new(
                    "c",
                    "models.getCapabilities",
                    json!({"providerId": "builtin", "modelId": model}),
                ),
                WAIT,
            )
            .await
            .expect("capabilities");
        assert_eq!(caps["capabilities"]["functionCall"], false, "{caps}");
        let registry = ProviderRegistry::open(&host.data).expect("registry");
        let config = registry.model("builtin", model).expect("model").config;
        assert!(!config.function_call, "{model}");
    }
}
