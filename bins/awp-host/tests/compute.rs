//! `awp-host serve` with the real `deepchat` binary for the compute commands: `model list|invoke`,
//! `image generate`, `video generate`, `audio speak|transcribe`, against the built-in provider (no
//! configuration) and the loopback OpenAI-compatible test server: streaming order in every output mode,
//! Ctrl-C mid-stream (exit 7, upstream aborted), a stalled provider, a 500 whose planted secret shows nowhere
//! (stdout, stderr, audit log, host log), uploads over the limit, and agent tokens that get ids and metadata only.
//! Every `--json`/`--jsonl` result's `benchmark` record is checked field by field (`check_benchmark`): requested
//! `null` when a flag was left out, the SHA-256 of downloaded artifacts, and the versions against
//! `deepchat system version` and this workspace's version.

mod support;

use std::time::Duration;

use agentwire_host::providers::{NewProvider, ProviderRegistry};
use agentwire_local_control::contract::providers::ApiType;
use agentwire_process::{Child, StopPlan};
use agentwire_testkit::openai_server::{CHAT_DELTAS, CHAT_REASONING, Failure, OpenAiTestServer};
use serde_json::{Value, json};
use support::{Host, Output, RUN_TIMEOUT, collect, collect_from, read_until};

const SECRET: &str = "UPSTREAM-PLANTED-SECRET-4242";
const KEY: &str = "sk-planted-cli-key-0123456789abcdef";

struct Serve {
    child: Child,
    stdout: agentwire_process::Stdout,
}

async fn serve(host: &Host) -> Serve {
    host.agents_toml("");
    let mut child = host.spawn(&["serve"]);
    let mut stdout = child.take_stdout().expect("stdout");
    let line = read_until(&mut stdout, "\n").await;
    assert!(
        line.starts_with("awp-host: local control listening on "),
        "{line:?}"
    );
    Serve { child, stdout }
}

impl Serve {
    /// SIGTERM, wait, and return everything it printed (the host log is its stderr).
    async fn stop(mut self) -> Output {
        let plan = StopPlan::new()
            .stdin_grace(Duration::ZERO)
            .term_grace(Duration::from_secs(30));
        tokio::time::timeout(RUN_TIMEOUT, self.child.stop(plan))
            .await
            .expect("serve stops");
        collect_from(&mut self.child, &mut self.stdout).await
    }
}

async fn deepchat_env(host: &Host, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut child = host.deepchat(args, env).spawn().expect("spawn deepchat");
    child.stdin().close().await;
    collect(&mut child).await
}

async fn deepchat(host: &Host, args: &[&str]) -> Output {
    deepchat_env(host, args, &[]).await
}

fn ok_result(out: &Output) -> Value {
    assert_eq!(out.code, 0, "{out:?}");
    let envelope = out.json();
    assert_eq!(envelope["ok"], true, "{out:?}");
    envelope["result"].clone()
}

/// Registers the test server as provider `local-llm` (with the planted key) and returns its id.
fn add_test_provider(host: &Host, server: &OpenAiTestServer) -> String {
    let mut registry = ProviderRegistry::open(&host.data).expect("registry");
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
    registry
        .set_model_status(&provider.id, "test-chat", true)
        .expect("model");
    provider.id
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

/// What a test knows about a call from its command line.
struct Expect<'a> {
    method: &'a str,
    requested: Value,
    adapter: &'a str,
    settings: Value,
    input_bytes: u64,
    input_artifact: Value,
}

/// Checks every field of `result.benchmark` against `expect` and the rest of `result`; versions are the host's
/// (`deepchat system version`), which is this workspace's version, as is the provider adapter's.
fn check_benchmark(result: &Value, expect: &Expect<'_>, host: &Versioned<'_>) {
    let b = &result["benchmark"];
    let mut keys: Vec<&str> = b
        .as_object()
        .expect("benchmark object")
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
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
            "usage"
        ],
        "{b}"
    );
    assert_eq!(b["method"], expect.method);
    assert_eq!(b["requested"], expect.requested);
    assert_eq!(
        b["resolved"],
        json!({"providerId": result["providerId"], "modelId": result["modelId"]})
    );
    assert_eq!(b["settings"], expect.settings);
    assert_eq!(b["inputBytes"], expect.input_bytes);
    let text_bytes = |field: &str| result[field].as_str().map_or(0, str::len) as u64;
    let latency = &b["latency"];
    assert!(latency["queueMs"].is_u64(), "{latency}");
    assert!(
        latency["firstEventMs"].as_u64() <= latency["totalMs"].as_u64(),
        "{latency}"
    );
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
            assert_eq!(b["finishReason"], "complete");
            assert_eq!(b["artifacts"], json!([]));
        }
        _ => {
            let artifacts: Vec<Value> = result["artifacts"]
                .as_array()
                .expect("artifacts")
                .iter()
                .map(|a| json!({"id":a["id"],"mimeType":a["mimeType"],"size":a["size"],"sha256":a["sha256"]}))
                .collect();
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
    assert_eq!(b["appVersion"], host.app_version.as_str());
    assert_eq!(b["appVersion"], env!("CARGO_PKG_VERSION"));
    assert_eq!(b["protocolVersion"], 1);
    assert_eq!(b["surfaceVersion"], 2);
    assert_eq!(b["providerAdapter"], expect.adapter);
    assert_eq!(b["providerAdapterVersion"], env!("CARGO_PKG_VERSION"));
    let shown = b.to_string();
    assert!(
        !shown.contains(host.host.data.to_str().expect("utf-8")),
        "a local path in {shown}"
    );
}

/// A host and what `deepchat system version` says about it.
struct Versioned<'a> {
    host: &'a Host,
    app_version: String,
}

async fn versioned(host: &Host) -> Versioned<'_> {
    let version = ok_result(&deepchat(host, &["system", "version", "--json"]).await);
    Versioned {
        host,
        app_version: version["appVersion"]
            .as_str()
            .expect("appVersion")
            .to_owned(),
    }
}

fn all_files_text(dir: &std::path::Path) -> String {
    let mut text = String::new();
    let mut stack = vec![dir.to_path_buf()];
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn model_commands_work_with_no_configuration_in_every_output_mode() {
    let host = Host::new();
    let serve = serve(&host).await;

    let listed = ok_result(&deepchat(&host, &["model", "list", "--json"]).await);
    let ids: Vec<&str> = listed["models"]
        .as_array()
        .expect("models")
        .iter()
        .filter_map(|m| m["id"].as_str())
        .collect();
    assert!(
        ids.contains(&"builtin-demo") && ids.contains(&"builtin-video"),
        "{ids:?}"
    );

    let text = deepchat(&host, &["model", "invoke", "--prompt", "hello there"]).await;
    assert_eq!(text.code, 0, "{text:?}");
    assert!(
        text.stdout.starts_with(
            "You said: hello there (turn 1 of this session)\n[builtin/builtin-demo · complete · "
        ),
        "{}",
        text.stdout
    );
    assert!(text.stdout.contains("first text ") && text.stdout.contains("total "));

    let json_out = deepchat(
        &host,
        &[
            "model",
            "invoke",
            "--prompt",
            "hello",
            "--max-tokens",
            "2",
            "--json",
        ],
    )
    .await;
    assert_eq!(
        json_out.stdout.lines().count(),
        1,
        "one envelope: {json_out:?}"
    );
    let result = ok_result(&json_out);
    assert_eq!(result["text"], "You said: ");
    assert_eq!(result["finishReason"], "max_tokens");
    let v = versioned(&host).await;
    check_benchmark(
        &result,
        &Expect {
            method: "models.invoke",
            requested: json!({"providerId":null,"modelId":null}),
            adapter: "builtin",
            settings: settings(json!({"maxTokens":2,"messageCount":1})),
            input_bytes: "hello".len() as u64,
            input_artifact: Value::Null,
        },
        &v,
    );

    let jsonl = deepchat(
        &host,
        &[
            "model", "invoke", "--system", "be brief", "--prompt", "x", "--jsonl",
        ],
    )
    .await;
    assert_eq!(jsonl.code, 0, "{jsonl:?}");
    let mut lines = jsonl.jsonl();
    let terminal = lines.pop().expect("terminal envelope");
    assert_eq!(terminal["ok"], true);
    let types: Vec<String> = lines
        .iter()
        .map(|l| {
            assert_eq!(l["event"], "models.invoke");
            l["data"]["type"].as_str().unwrap_or_default().to_owned()
        })
        .collect();
    assert_eq!(types.last().map(String::as_str), Some("usage"));
    assert!(types.iter().filter(|t| *t == "text_delta").count() >= 3);
    let latency = &terminal["result"]["latency"];
    for field in ["queueMs", "firstEventMs", "firstTextMs", "totalMs"] {
        assert!(latency[field].is_u64(), "{field}: {terminal}");
    }
    assert!(
        terminal["result"]["usage"]["totalTokens"].is_u64(),
        "{terminal}"
    );
    // The system prompt is counted, never shown.
    check_benchmark(
        &terminal["result"],
        &Expect {
            method: "models.invoke",
            requested: json!({"providerId":null,"modelId":null}),
            adapter: "builtin",
            settings: settings(json!({"systemPrompt":true,"systemPromptChars":8,"messageCount":2})),
            input_bytes: ("be brief".len() + "x".len()) as u64,
            input_artifact: Value::Null,
        },
        &v,
    );
    assert!(
        !terminal["result"]["benchmark"]
            .to_string()
            .contains("be brief")
    );
    // `--provider builtin` alone: the provider is as given, the model defaulted.
    let half = ok_result(
        &deepchat(
            &host,
            &[
                "model",
                "invoke",
                "--provider",
                "builtin",
                "--prompt",
                "hi",
                "--temperature",
                "0.5",
                "--json",
            ],
        )
        .await,
    );
    check_benchmark(
        &half,
        &Expect {
            method: "models.invoke",
            requested: json!({"providerId":"builtin","modelId":null}),
            adapter: "builtin",
            settings: settings(json!({"temperature":0.5,"messageCount":1})),
            input_bytes: 2,
            input_artifact: Value::Null,
        },
        &v,
    );
    serve.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_custom_provider_streams_in_order_and_its_failures_never_leak_the_secret() {
    let host = Host::new();
    let server = OpenAiTestServer::start().await.expect("test server");
    std::fs::create_dir_all(&host.data).expect("data dir");
    let provider = add_test_provider(&host, &server);
    let serve = serve(&host).await;

    let out = deepchat(
        &host,
        &[
            "model",
            "invoke",
            "--provider",
            &provider,
            "--model",
            "test-chat",
            "--prompt",
            "hi",
            "--jsonl",
        ],
    )
    .await;
    assert_eq!(out.code, 0, "{out:?}");
    let mut lines = out.jsonl();
    let terminal = lines.pop().expect("terminal");
    let data: Vec<Value> = lines.into_iter().map(|l| l["data"].clone()).collect();
    assert_eq!(
        data[0],
        json!({"type":"reasoning_delta","text":CHAT_REASONING})
    );
    let texts: Vec<&str> = data
        .iter()
        .filter(|d| d["type"] == "text_delta")
        .filter_map(|d| d["text"].as_str())
        .collect();
    assert_eq!(texts, CHAT_DELTAS);
    assert_eq!(data[data.len() - 2]["type"], "stop");
    assert_eq!(data[data.len() - 1]["type"], "usage");
    assert_eq!(terminal["result"]["providerId"], provider.as_str());
    assert_eq!(terminal["result"]["modelId"], "test-chat");
    check_benchmark(
        &terminal["result"],
        &Expect {
            method: "models.invoke",
            requested: json!({"providerId":provider,"modelId":"test-chat"}),
            adapter: "openai-compatible",
            settings: settings(json!({"messageCount":1})),
            input_bytes: 2,
            input_artifact: Value::Null,
        },
        &versioned(&host).await,
    );
    assert!(terminal["result"]["benchmark"]["usage"]["promptTokens"].is_u64());

    server.set_failure(Some(Failure::Status {
        status: 500,
        secret: SECRET.into(),
    }));
    for mode in ["--json", "--jsonl", "--timeout=60000"] {
        let failed = deepchat(
            &host,
            &[
                "model",
                "invoke",
                "--provider",
                &provider,
                "--model",
                "test-chat",
                "--prompt",
                "hi",
                mode,
            ],
        )
        .await;
        assert_eq!(failed.code, 3, "unavailable: {failed:?}");
        for text in [&failed.stdout, &failed.stderr] {
            assert!(!text.contains(SECRET) && !text.contains(KEY), "{failed:?}");
        }
    }
    let host_log = serve.stop().await;
    assert!(!host_log.stderr.contains(SECRET) && !host_log.stdout.contains(SECRET));
    assert!(!host_log.stderr.contains(KEY));
    let files = all_files_text(&host.data);
    assert!(
        !files.contains(SECRET),
        "the secret reached a file under the data dir"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_mid_stream_exits_7_and_aborts_the_upstream_request() {
    let host = Host::new();
    let server = OpenAiTestServer::start().await.expect("test server");
    std::fs::create_dir_all(&host.data).expect("data dir");
    let provider = add_test_provider(&host, &server);
    let serve = serve(&host).await;
    server.set_failure(Some(Failure::StallMidStream));
    let mut child = host
        .deepchat(
            &[
                "model",
                "invoke",
                "--provider",
                &provider,
                "--model",
                "test-chat",
                "--prompt",
                "hi",
            ],
            &[],
        )
        .spawn()
        .expect("spawn deepchat");
    child.stdin().close().await;
    let mut stdout = child.take_stdout().expect("stdout");
    let seen = read_until(&mut stdout, "Hello from").await;
    assert!(seen.starts_with("Hello from"), "{seen:?}");
    assert_eq!(server.aborted(), 0);
    let pid = rustix::process::Pid::from_raw(i32::try_from(child.id().expect("pid")).expect("pid"))
        .expect("pid");
    rustix::process::kill_process(pid, rustix::process::Signal::INT).expect("SIGINT");
    let out = collect_from(&mut child, &mut stdout).await;
    assert_eq!(out.code, 7, "{out:?}");
    assert!(out.stderr.contains("cancelled"), "{out:?}");
    tokio::time::timeout(RUN_TIMEOUT, server.wait_aborted(1))
        .await
        .expect("the upstream request was closed");

    // A provider that never answers: the CLI's timeout ends it (exit 7) and the upstream request is closed too.
    server.set_failure(Some(Failure::Stall));
    let out = deepchat(
        &host,
        &[
            "model",
            "invoke",
            "--provider",
            &provider,
            "--model",
            "test-chat",
            "--prompt",
            "hi",
            "--timeout",
            "1500",
            "--json",
        ],
    )
    .await;
    assert_eq!(out.code, 7, "{out:?}");
    assert_eq!(out.json()["error"]["code"], "timeout");
    tokio::time::timeout(RUN_TIMEOUT, server.wait_aborted(2))
        .await
        .expect("the stalled upstream request was closed");
    serve.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn media_commands_make_artifacts_and_transcription_hears_the_speech() {
    let host = Host::new();
    let serve = serve(&host).await;

    let image = deepchat(
        &host,
        &[
            "image",
            "generate",
            "--prompt",
            "a red fox",
            "--size",
            "24x24",
        ],
    )
    .await;
    assert_eq!(image.code, 0, "{image:?}");
    assert!(image.stdout.starts_with("artifact "), "{}", image.stdout);
    let id = image
        .stdout
        .split_whitespace()
        .nth(1)
        .expect("id")
        .to_owned();
    let png = host.path("fox.png");
    let got = deepchat(
        &host,
        &[
            "artifact",
            "get",
            "--id",
            &id,
            "--out",
            png.to_str().expect("utf-8"),
        ],
    )
    .await;
    assert_eq!(got.code, 0, "{got:?}");
    assert!(
        std::fs::read(&png)
            .expect("png")
            .starts_with(b"\x89PNG\r\n\x1a\n")
    );
    let v = versioned(&host).await;
    let image = ok_result(
        &deepchat(
            &host,
            &[
                "image",
                "generate",
                "--model",
                "builtin-image",
                "--prompt",
                "a red fox",
                "--size",
                "24x24",
                "--json",
            ],
        )
        .await,
    );
    check_benchmark(
        &image,
        &Expect {
            method: "images.generate",
            requested: json!({"providerId":null,"modelId":"builtin-image"}),
            adapter: "builtin",
            settings: settings(json!({"size":"24x24"})),
            input_bytes: "a red fox".len() as u64,
            input_artifact: Value::Null,
        },
        &v,
    );
    let image_id = image["artifacts"][0]["id"].as_str().expect("id");
    let png2 = host.path("fox2.png");
    let got = deepchat(
        &host,
        &[
            "artifact",
            "get",
            "--id",
            image_id,
            "--out",
            png2.to_str().expect("utf-8"),
        ],
    )
    .await;
    assert_eq!(got.code, 0, "{got:?}");
    assert_eq!(
        image["benchmark"]["artifacts"][0]["sha256"],
        sha256_hex(&std::fs::read(&png2).expect("png"))
    );

    let video = deepchat(
        &host,
        &[
            "video",
            "generate",
            "--prompt",
            "waves",
            "--seconds",
            "1",
            "--size",
            "16x16",
            "--jsonl",
        ],
    )
    .await;
    assert_eq!(video.code, 0, "{video:?}");
    let lines = video.jsonl();
    let types: Vec<&str> = lines
        .iter()
        .take(lines.len() - 1)
        .filter_map(|l| l["data"]["type"].as_str())
        .collect();
    assert_eq!(
        types,
        ["started", "progress", "progress", "progress", "artifact"]
    );
    let artifact = &lines[lines.len() - 1]["result"]["artifacts"][0];
    assert_eq!(artifact["mimeType"], "video/x-msvideo");
    assert_eq!(artifact["sha256"].as_str().map(str::len), Some(64));
    check_benchmark(
        &lines[lines.len() - 1]["result"],
        &Expect {
            method: "videos.generate",
            requested: json!({"providerId":null,"modelId":null}),
            adapter: "builtin",
            settings: settings(json!({"seconds":"1","size":"16x16"})),
            input_bytes: "waves".len() as u64,
            input_artifact: Value::Null,
        },
        &v,
    );

    let speech = ok_result(
        &deepchat(
            &host,
            &[
                "audio",
                "speak",
                "--text",
                "meet me at noon",
                "--voice",
                "alloy",
                "--json",
            ],
        )
        .await,
    );
    check_benchmark(
        &speech,
        &Expect {
            method: "speech.generate",
            requested: json!({"providerId":null,"modelId":null}),
            adapter: "builtin",
            settings: settings(json!({"voice":"alloy"})),
            input_bytes: "meet me at noon".len() as u64,
            input_artifact: Value::Null,
        },
        &v,
    );
    let speech_id = speech["artifacts"][0]["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let by_artifact = deepchat(&host, &["audio", "transcribe", "--artifact", &speech_id]).await;
    assert_eq!(by_artifact.code, 0, "{by_artifact:?}");
    assert_eq!(by_artifact.stdout, "meet me at noon\n");
    let wav = host.path("speech.wav");
    let got = deepchat(
        &host,
        &[
            "artifact",
            "get",
            "--id",
            &speech_id,
            "--out",
            wav.to_str().expect("utf-8"),
        ],
    )
    .await;
    assert_eq!(got.code, 0, "{got:?}");
    let wav_bytes = std::fs::read(&wav).expect("wav");
    assert_eq!(
        speech["benchmark"]["artifacts"][0]["sha256"],
        sha256_hex(&wav_bytes)
    );
    let by_artifact = ok_result(
        &deepchat(
            &host,
            &[
                "audio",
                "transcribe",
                "--provider",
                "builtin",
                "--model",
                "builtin-transcribe",
                "--artifact",
                &speech_id,
                "--jsonl",
            ],
        )
        .await,
    );
    check_benchmark(
        &by_artifact,
        &Expect {
            method: "audio.transcribeArtifact",
            requested: json!({"providerId":"builtin","modelId":"builtin-transcribe"}),
            adapter: "builtin",
            settings: settings(json!({})),
            input_bytes: wav_bytes.len() as u64,
            input_artifact: json!({"id":speech_id,"mimeType":"audio/wav","size":wav_bytes.len(),
                "sha256":sha256_hex(&wav_bytes)}),
        },
        &v,
    );
    let by_file = ok_result(
        &deepchat(
            &host,
            &[
                "audio",
                "transcribe",
                "--file",
                wav.to_str().expect("utf-8"),
                "--json",
            ],
        )
        .await,
    );
    assert_eq!(by_file["text"], "meet me at noon");
    assert_eq!(by_file["mimeType"], "audio/wav");
    check_benchmark(
        &by_file,
        &Expect {
            method: "audio.transcribeUpload",
            requested: json!({"providerId":null,"modelId":null}),
            adapter: "builtin",
            settings: settings(json!({})),
            input_bytes: wav_bytes.len() as u64,
            input_artifact: Value::Null,
        },
        &v,
    );

    // One byte over 25 MiB is refused, and nothing is transcribed.
    let big = host.path("big.wav");
    std::fs::File::create(&big)
        .and_then(|f| f.set_len(25 * 1024 * 1024 + 1))
        .expect("big file");
    let refused = deepchat(
        &host,
        &[
            "audio",
            "transcribe",
            "--file",
            big.to_str().expect("utf-8"),
            "--json",
        ],
    )
    .await;
    assert_eq!(refused.code, 6, "{refused:?}");
    assert_eq!(refused.json()["error"]["code"], "body_too_large");
    serve.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_token_gets_artifact_ids_and_metadata_only() {
    let host = Host::new();
    let serve = serve(&host).await;
    let descriptor = agentwire_local_control::descriptor::discover(&host.data).expect("descriptor");
    let token = descriptor.token.clone();
    let client = agentwire_local_control::client::Client::from_descriptor(&descriptor, token)
        .expect("client");
    let issued = client
        .rpc(
            &agentwire_local_control::envelope::RequestEnvelope::new(
                "t",
                "agentTokens.issue",
                json!({"conversationId":"thread-7"}),
            ),
            RUN_TIMEOUT,
        )
        .await
        .expect("agent token");
    let agent_token = issued["token"].as_str().expect("token").to_owned();
    let env = [("DEEPCHAT_CLI_AGENT_TOKEN", agent_token.as_str())];
    let speech = deepchat_env(
        &host,
        &["audio", "speak", "--text", "agent speaking", "--json"],
        &env,
    )
    .await;
    let speech = ok_result(&speech);
    let artifact = &speech["artifacts"][0];
    assert_eq!(artifact["owner"], "agent");
    let id = artifact["id"].as_str().expect("id").to_owned();
    let out = host.path("agent.wav");
    let refused = deepchat_env(
        &host,
        &[
            "artifact",
            "get",
            "--id",
            &id,
            "--out",
            out.to_str().expect("utf-8"),
            "--json",
        ],
        &env,
    )
    .await;
    assert_eq!(refused.code, 4, "{refused:?}");
    assert!(!out.exists());
    let heard = ok_result(
        &deepchat_env(
            &host,
            &["audio", "transcribe", "--artifact", &id, "--json"],
            &env,
        )
        .await,
    );
    assert_eq!(heard["text"], "agent speaking");
    let upload = deepchat_env(
        &host,
        &[
            "audio",
            "transcribe",
            "--file",
            out.to_str().expect("utf-8"),
            "--mime",
            "audio/wav",
            "--json",
        ],
        &env,
    )
    .await;
    assert_ne!(upload.code, 0, "agents cannot upload: {upload:?}");
    serve.stop().await;
}
