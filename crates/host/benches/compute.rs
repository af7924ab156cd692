//! Custom bench (harness = false) of the compute methods (issue 8), each row against a baseline measured in the
//! same run, interleaved with ours:
//!
//! - `models.invoke` through the local socket (client → `ControlPlane` → provider registry → admission →
//!   `agentwire-provider` → the loopback OpenAI-compatible test server) vs `agentwire-provider` calling the same
//!   loopback server directly: time to first text and total time, medians, and their ratio (goal ≤ 1.2×);
//! - media artifact write + read MB/s (the spool path every generated image, speech and video takes: create,
//!   write, hash, publish, then read back) vs `cp` of a file of the same size (goal ≥ 0.5× `cp`'s speed);
//! - `videos.generate` of the built-in provider (640x480, 4 s) through the socket plus its download, MB/s
//!   (informational: generation included).
//!
//! Writes `$AGENTWIRE_BENCH_OUT/host-compute.md` (default `target/bench-results/`); `AGENTWIRE_BENCH_QUICK=1`
//! uses smaller counts. Without `--bench` (`cargo test --bench compute`) it is a smoke run: a few iterations, every
//! check kept, nothing written.

#![allow(clippy::unwrap_used)] // A bench aborts on any setup failure; there is no caller to report to.

use std::fmt::Write as _;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentwire_host::agents::AgentRegistry;
use agentwire_host::control::{ControlConfig, ControlPlane};
use agentwire_host::providers::{NewProvider, ProviderRegistry};
use agentwire_local_control::client::Client;
use agentwire_local_control::contract::providers::ApiType;
use agentwire_local_control::descriptor::discover;
use agentwire_local_control::envelope::RequestEnvelope;
use agentwire_local_control::server::{Server, ServerConfig};
use agentwire_provider::{ChatMessage, ChatRequest, OpenAiConfig, Provider, Role, StreamItem};
use agentwire_spool::{ArtifactSpec, ArtifactSpool, Limits as SpoolLimits, Scope};
use agentwire_testkit::openai_server::OpenAiTestServer;
use serde_json::json;
use tokio::io::AsyncReadExt;

const TIMEOUT: Duration = Duration::from_secs(120);

struct Sizes {
    invokes: usize,
    media_mib: usize,
    media_reps: usize,
    videos: usize,
}

impl Sizes {
    fn pick(smoke: bool) -> Sizes {
        if smoke {
            Sizes {
                invokes: 3,
                media_mib: 1,
                media_reps: 1,
                videos: 1,
            }
        } else if std::env::var_os("AGENTWIRE_BENCH_QUICK").is_some() {
            Sizes {
                invokes: 100,
                media_mib: 32,
                media_reps: 3,
                videos: 2,
            }
        } else {
            Sizes {
                invokes: 400,
                media_mib: 64,
                media_reps: 7,
                videos: 3,
            }
        }
    }
}

fn median(mut values: Vec<Duration>) -> Duration {
    values.sort();
    values[values.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1000.0)
}

fn verdict(ratio: f64, goal: f64) -> String {
    if ratio <= goal {
        "met".to_owned()
    } else {
        format!("missed by {:.2}×", ratio / goal)
    }
}

/// `(first text, total)` of one direct provider call.
async fn direct(provider: &Provider, request: &ChatRequest) -> (Duration, Duration) {
    let started = Instant::now();
    let mut stream = provider.chat(request).await.unwrap();
    let mut first = None;
    let mut text = String::new();
    while let Some(item) = stream.next().await.unwrap() {
        if let StreamItem::Text(t) = item {
            first.get_or_insert_with(|| started.elapsed());
            text.push_str(&t);
        }
    }
    assert_eq!(text, "Hello from the test server.");
    (first.unwrap(), started.elapsed())
}

/// `(first text, total)` of one `models.invoke` through the socket.
async fn through_socket(client: &Client, provider_id: &str) -> (Duration, Duration) {
    let envelope = RequestEnvelope::new(
        "bench",
        "models.invoke",
        json!({"providerId": provider_id, "modelId": "test-chat",
               "messages": [{"role":"user","content":"hi"}]}),
    );
    let started = Instant::now();
    let mut first = None;
    let result = client
        .stream(&envelope, TIMEOUT, |record| {
            if record.data["type"] == "text_delta" {
                first.get_or_insert_with(|| started.elapsed());
            }
        })
        .await
        .unwrap();
    let total = started.elapsed();
    assert_eq!(result["text"], "Hello from the test server.");
    (first.unwrap(), total)
}

async fn invoke_overhead(out: &mut String, sizes: &Sizes, tmp: &Path) {
    let server = OpenAiTestServer::start().await.unwrap();
    let data = tmp.join("data");
    std::fs::create_dir_all(&data).unwrap();
    let provider_id = {
        let mut registry = ProviderRegistry::open(&data).unwrap();
        let provider = registry
            .add(NewProvider {
                name: "bench".into(),
                api_type: ApiType::Openai,
                base_url: server.base_url(),
                enabled: true,
            })
            .unwrap();
        registry
            .set_model_status(&provider.id, "test-chat", true)
            .unwrap();
        provider.id
    };
    let agents = Arc::new(AgentRegistry::load(tmp, &|_| None, None).unwrap());
    let mut config = ControlConfig::new(&data, "bench");
    config.admission.method_starts_per_window = usize::MAX / 2;
    let plane = ControlPlane::open(config, agents).await.unwrap();
    let host = Server::start(ServerConfig::new(&data, "bench"), plane.clone())
        .await
        .unwrap();
    let descriptor = discover(&data).unwrap();
    let client = Client::from_descriptor(&descriptor, descriptor.token.clone()).unwrap();
    let provider = Provider::openai(OpenAiConfig {
        base_url: server.base_url(),
        api_key: None,
        default_model: Some("test-chat".into()),
        limits: agentwire_provider::Limits::default(),
    })
    .unwrap();
    let request = ChatRequest {
        messages: vec![ChatMessage::text(Role::User, "hi")],
        ..ChatRequest::default()
    };
    // Warm both paths (connections, the registry's first open, page cache).
    for _ in 0..3 {
        direct(&provider, &request).await;
        through_socket(&client, &provider_id).await;
    }
    let measure = |count: usize| {
        let (provider, request, client, provider_id) = (&provider, &request, &client, &provider_id);
        async move {
            let (mut direct_first, mut direct_total) = (Vec::new(), Vec::new());
            let (mut ours_first, mut ours_total) = (Vec::new(), Vec::new());
            for _ in 0..count {
                let (first, total) = direct(provider, request).await;
                direct_first.push(first);
                direct_total.push(total);
                let (first, total) = through_socket(client, provider_id).await;
                ours_first.push(first);
                ours_total.push(total);
            }
            (
                median(direct_first),
                median(direct_total),
                median(ours_first),
                median(ours_total),
            )
        }
    };
    let (df, dt, of, ot) = measure(sizes.invokes).await;
    let first_ratio = of.as_secs_f64() / df.as_secs_f64();
    let total_ratio = ot.as_secs_f64() / dt.as_secs_f64();
    // The same with a simulated model: 20 ms from the response head to the first token (informational).
    server.set_first_event_delay(Duration::from_millis(20));
    let (sdf, sdt, sof, sot) = measure(sizes.invokes.div_ceil(10)).await;
    server.set_first_event_delay(Duration::ZERO);
    let _ = write!(
        out,
        "\n### `models.invoke` overhead ({} calls each, interleaved)\n\n\
         | path | first text (median) | total (median) |\n|---|---|---|\n\
         | `agentwire-provider` → loopback server (baseline) | {} | {} |\n\
         | `deepchat`'s client → socket → host → provider → loopback server | {} | {} |\n\n\
         - Time to first text: {first_ratio:.2}× the direct call, goal ≤ 1.20× — {}.\n\
         - Total: {total_ratio:.2}× the direct call, goal ≤ 1.20× — {}.\n\
         - The loopback server answers at once, so the ratio is the host's fixed cost per call (an HTTP request over\n\
           the Unix socket, token and policy checks, an audit record, the provider registry lookup in SQLite and the\n\
           admission) over a sub-millisecond baseline.\n\
         - Informational, the same server with a simulated 20 ms time to first token ({} calls each): first text\n\
           {} direct vs {} through the socket ({:.2}×), total {} vs {} ({:.2}×).\n",
        sizes.invokes,
        ms(df),
        ms(dt),
        ms(of),
        ms(ot),
        verdict(first_ratio, 1.2),
        verdict(total_ratio, 1.2),
        sizes.invokes.div_ceil(10),
        ms(sdf),
        ms(sof),
        sof.as_secs_f64() / sdf.as_secs_f64(),
        ms(sdt),
        ms(sot),
        sot.as_secs_f64() / sdt.as_secs_f64(),
    );

    // Built-in video generation + download through the socket (informational).
    let mut times = Vec::new();
    let mut bytes = 0u64;
    for _ in 0..sizes.videos {
        let started = Instant::now();
        let envelope = RequestEnvelope::new(
            "bench",
            "videos.generate",
            json!({"providerId":"builtin","modelId":"builtin-video","prompt":"bench",
                   "options":{"seconds":"4","size":"640x480"}}),
        );
        let result = client.stream(&envelope, TIMEOUT, |_| {}).await.unwrap();
        let id = result["artifacts"][0]["id"].as_str().unwrap().to_owned();
        let mut sink = tokio::io::sink();
        let info = client.download(&id, &mut sink, TIMEOUT).await.unwrap();
        bytes = info.size;
        times.push(started.elapsed());
    }
    let t = median(times);
    let _ = write!(
        out,
        "\n### `videos.generate` (built-in, 640x480, 4 s) + download through the socket\n\n\
         {:.1} MiB in {} (median of {}): {:.0} MiB/s including generation.\n",
        bytes as f64 / (1024.0 * 1024.0),
        ms(t),
        sizes.videos,
        bytes as f64 / (1024.0 * 1024.0) / t.as_secs_f64(),
    );
    host.shutdown().await;
    plane.shutdown(Duration::from_secs(5)).await;
}

async fn media_rate(out: &mut String, sizes: &Sizes, tmp: &Path) {
    let spool = ArtifactSpool::open(tmp.join("spool"), SpoolLimits::default())
        .await
        .unwrap();
    let len = sizes.media_mib * 1024 * 1024;
    let media: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
    let source = tmp.join("media.bin");
    std::fs::write(&source, &media).unwrap();
    let (mut ours, mut cps) = (Vec::new(), Vec::new());
    for rep in 0..sizes.media_reps {
        let started = Instant::now();
        let mut writer = spool
            .create(ArtifactSpec::new(
                Scope::new("human", "bench", format!("rep-{rep}")),
                "video/mp4",
                "bench.mp4",
            ))
            .await
            .unwrap();
        for chunk in media.chunks(1024 * 1024) {
            writer.write(chunk).await.unwrap();
        }
        let meta = writer.publish().await.unwrap();
        let (_, mut reader) = spool.read("human", &meta.id).await.unwrap();
        let mut back = Vec::with_capacity(len);
        reader.read_to_end(&mut back).await.unwrap();
        ours.push(started.elapsed());
        assert_eq!(back.len(), len);
        spool.delete("human", &meta.id).await.unwrap();

        let target = tmp.join(format!("copy-{rep}.bin"));
        let started = Instant::now();
        let mut cp = agentwire_process::Command::new("cp");
        cp.arg(&source).arg(&target).inherit_os_env();
        let child = cp.spawn().unwrap();
        assert!(child.wait().await.success());
        cps.push(started.elapsed());
        std::fs::remove_file(&target).unwrap();
    }
    let mib = sizes.media_mib as f64;
    let ours_rate = mib / median(ours).as_secs_f64();
    let cp_rate = mib / median(cps).as_secs_f64();
    let speed = ours_rate / cp_rate;
    let _ = write!(
        out,
        "\n### Media artifact write + read ({} MiB, median of {})\n\n\
         | path | MiB/s |\n|---|---|\n| spool create + write + SHA-256 + publish + read back | {ours_rate:.0} |\n\
         | `cp` of the same file (baseline; copies once, hashes nothing) | {cp_rate:.0} |\n\n\
         - Ours runs at {speed:.2}× `cp`'s speed, goal ≥ 0.50× — {}.\n\
         - Ours passes the bytes twice (written, then read back) and hashes every byte with SHA-256 on the way in\n\
           (the artifact's `sha256`), all in user space; `cp` copies once and may copy inside the kernel.\n",
        sizes.media_mib,
        sizes.media_reps,
        if speed >= 0.5 {
            "met".to_owned()
        } else {
            format!("missed by {:.2}×", 0.5 / speed)
        }
    );
}

fn main() {
    let smoke = agentwire_testkit::bench::smoke_mode();
    let sizes = Sizes::pick(smoke);
    let tmp = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut out = String::from(
        "## Model and media compute (`crates/host/benches/compute.rs`)\n\n\
         In-process `ControlPlane` behind the real Unix-socket server, release build; the provider is the loopback\n\
         OpenAI-compatible test server of `agentwire-testkit`. Ratios are against a baseline measured in the same run.\n",
    );
    rt.block_on(async {
        invoke_overhead(&mut out, &sizes, tmp.path()).await;
        media_rate(&mut out, &sizes, tmp.path()).await;
    });
    if smoke {
        print!("smoke run (no --bench), not written:\n{out}");
        return;
    }
    agentwire_testkit::bench::write_result("host-compute.md", &out).unwrap();
    print!("{out}");
}
