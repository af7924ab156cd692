//! Offline OCR through the real socket: Tesseract and poppler from the OS packages (installed by `cargo xtask ci`),
//! images and PDFs the tests render, every benchmark classification, the cache, clear-cache policy, the upload
//! bound and a missing engine.

use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use agentwire_host::agents::AgentRegistry;
use agentwire_host::control::{ControlConfig, ControlPlane};
use agentwire_local_control::client::{Client, ClientError};
use agentwire_local_control::contract::{self, ocr};
use agentwire_local_control::descriptor::{Token, discover};
use agentwire_local_control::envelope::{ErrorCode, RequestEnvelope};
use agentwire_local_control::server::{Server, ServerConfig};
use agentwire_spool::{ArtifactSpec, Scope as SpoolScope};
use agentwire_testkit::text_image;
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(120);
/// Text the 5×7 test font renders and Tesseract 5 reads back exactly.
const LINE: &str = "AGENT WIRE TEXT 42";

struct Host {
    tmp: tempfile::TempDir,
    data: PathBuf,
    plane: ControlPlane,
    _server: Server,
    human: Client,
}

async fn host_with(configure: impl FnOnce(&mut ControlConfig, &Path)) -> Host {
    let tmp = tempfile::tempdir().expect("temp dir");
    let data = tmp.path().join("data");
    std::fs::write(tmp.path().join("agents.toml"), "").expect("agents.toml");
    let registry = Arc::new(AgentRegistry::load(tmp.path(), &|_| None, None).expect("agents"));
    let mut config = ControlConfig::new(&data, "9.9.9");
    configure(&mut config, tmp.path());
    let plane = ControlPlane::open(config, registry).await.expect("plane");
    let server = Server::start(ServerConfig::new(&data, "9.9.9"), plane.clone())
        .await
        .expect("server");
    let descriptor = discover(&data).expect("descriptor");
    let token = descriptor.token.clone();
    let human = Client::from_descriptor(&descriptor, token).expect("client");
    Host {
        tmp,
        data,
        plane,
        _server: server,
        human,
    }
}

async fn host() -> Host {
    host_with(|_, _| {}).await
}

impl Host {
    fn agent(&self, conversation: &str) -> Client {
        let token = self.plane.issue_agent_token(conversation).expect("token");
        let descriptor = discover(&self.data).expect("descriptor");
        Client::from_descriptor(&descriptor, Token::parse(&token).expect("shape")).expect("client")
    }

    fn file(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let path = self.tmp.path().join(name);
        std::fs::write(&path, bytes).expect("write input");
        path
    }

    async fn upload(&self, name: &str, bytes: &[u8], params: Value) -> Result<Value, ClientError> {
        let path = self.file(name, bytes);
        let envelope = RequestEnvelope::new("req-ocr", "ocr.extractUpload", params);
        self.human
            .upload(&envelope, &path, ocr::MAX_INPUT_BYTES + 1, WAIT)
            .await
    }

    async fn rpc(
        &self,
        client: &Client,
        method: &str,
        params: Value,
    ) -> Result<Value, ClientError> {
        client
            .rpc(&RequestEnvelope::new("req-ocr", method, params), WAIT)
            .await
    }

    async fn status(&self) -> ocr::RuntimeStatus {
        let value = self
            .rpc(&self.human, "ocr.getRuntimeStatus", json!({}))
            .await
            .expect("status");
        contract::decode_result::<ocr::GetRuntimeStatus>(value).expect("strict status")
    }

    /// An artifact owned by `owner` (`human` or `agent:<conversation>`).
    async fn artifact(&self, owner: &str, mime: &str, bytes: &[u8]) -> String {
        let scope = SpoolScope::new(owner, "test-connection", "test-request");
        let mut writer = self
            .plane
            .spool()
            .create(ArtifactSpec::new(scope, mime, "input"))
            .await
            .expect("artifact");
        writer.write(bytes).await.expect("write");
        writer.publish().await.expect("publish").id
    }
}

fn png(lines: &[&str]) -> Vec<u8> {
    text_image::png(&text_image::render(lines, 5))
}

fn extraction(value: Value) -> ocr::Extraction {
    contract::decode_result::<ocr::ExtractUpload>(value).expect("strict extraction")
}

fn failure(result: Result<Value, ClientError>) -> (ErrorCode, Value) {
    match result.expect_err("an error") {
        ClientError::Remote { error, .. } => {
            (error.code, Value::Object(error.details.unwrap_or_default()))
        }
        other => panic!("not an error envelope: {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_classification_from_the_real_runtime_state() {
    let host = host().await;
    let status = host.status().await;
    assert_eq!(
        status.process.as_ref().map(|p| p.state),
        Some(ocr::ProcessState::Idle)
    );
    assert!(matches!(
        status.availability,
        ocr::Availability::Available { .. }
    ));
    let image = png(&[LINE]);

    // A fresh host: the engine is verified first, so the miss is cold.
    let cold = extraction(
        host.upload("a.png", &image, json!({"mimeType": "image/png"}))
            .await
            .unwrap(),
    );
    let ocr::Extraction::Image(first) = &cold else {
        panic!("an image result");
    };
    assert!(first.text.contains(LINE), "{:?}", first.text);
    assert_eq!(first.benchmark.state, ocr::BenchmarkState::ColdRuntime);
    assert_eq!(first.benchmark.runtime_state_before, ocr::StateBefore::Idle);
    assert!(!first.cache_hit && !first.benchmark.runtime_was_ready);
    assert_eq!(first.benchmark.input_bytes, image.len() as u64);
    assert_eq!(first.benchmark.app_version, "9.9.9");
    assert!(first.engine.core_version.starts_with("tesseract "));
    assert!(first.engine.model_bundle_id.starts_with("eng@"));
    assert_eq!(
        (first.image_width, first.image_height),
        (
            text_image::render(&[LINE], 5).width as u32,
            text_image::render(&[LINE], 5).height as u32,
        )
    );
    assert_eq!(
        first.token_count,
        first.text.chars().count().div_ceil(4) as u32
    );
    let status = host.status().await;
    assert_eq!(
        status.process.as_ref().map(|p| p.state),
        Some(ocr::ProcessState::Ready)
    );
    assert_eq!(status.cache.as_ref().map(|c| c.entry_count), Some(1));

    // The same bytes again: a hit, same text.
    let hit = extraction(
        host.upload("b.png", &image, json!({"mimeType": "image/png"}))
            .await
            .unwrap(),
    );
    assert_eq!(hit.benchmark().state, ocr::BenchmarkState::Hit);
    assert_eq!(
        hit.benchmark().runtime_state_before,
        ocr::StateBefore::Ready
    );
    assert_eq!(hit.text(), cold.text());

    // Cleared, then the same bytes: a miss with the runtime already ready.
    let cleared = host
        .rpc(&host.human, "ocr.clearCache", json!({}))
        .await
        .unwrap();
    assert_eq!(cleared["cache"]["entryCount"], 0);
    let warm = extraction(
        host.upload("c.png", &image, json!({"mimeType": "image/png"}))
            .await
            .unwrap(),
    );
    assert_eq!(warm.benchmark().state, ocr::BenchmarkState::MissWarm);
    assert!(warm.benchmark().runtime_was_ready);
    assert_eq!(warm.text(), cold.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_generated_pdf_is_rasterized_page_by_page_with_spans() {
    let host = host().await;
    let pdf = text_image::pdf(&[
        text_image::render(&[LINE], 5),
        text_image::render(&["PAGE TWO"], 5),
    ]);
    let result = host
        .upload(
            "doc.pdf",
            &pdf,
            json!({"mimeType": "application/pdf", "sourcePageCountHint": 2}),
        )
        .await
        .unwrap();
    let ocr::Extraction::Document(document) = extraction(result) else {
        panic!("a document result");
    };
    assert!(document.text.contains(LINE), "{:?}", document.text);
    assert!(document.text.contains("PAGE TWO"), "{:?}", document.text);
    assert_eq!(document.emitted_pages, 2);
    assert_eq!(
        document.artifact_termination,
        ocr::Termination::RequestComplete
    );
    assert_eq!(document.source_page_count_hint, Some(2));
    let spans = &document.page_spans;
    assert_eq!(spans.len(), 2);
    let units: Vec<u16> = document.text.encode_utf16().collect();
    let page =
        |i: usize| String::from_utf16_lossy(&units[spans[i].start as usize..spans[i].end as usize]);
    assert!(page(0).contains(LINE) && page(1).contains("PAGE TWO"));

    // A token bound of 2 (8 characters) stops in the first page.
    let limited = host
        .upload(
            "doc2.pdf",
            &pdf,
            json!({"mimeType": "application/pdf", "generationTokenLimit": 2}),
        )
        .await
        .unwrap();
    let ocr::Extraction::Document(limited) = extraction(limited) else {
        panic!("a document result");
    };
    assert!(limited.truncated && limited.generation_output_limit_reached);
    assert_eq!(
        limited.artifact_termination,
        ocr::Termination::StoppedByOutputLimit
    );
    assert_eq!(limited.text.chars().count(), 8);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_past_the_page_bound_end_the_result_as_resource_limited() {
    let host = host_with(|config, _| config.ocr.max_pages = 1).await;
    let pdf = text_image::pdf(&[
        text_image::render(&[LINE], 5),
        text_image::render(&["PAGE TWO"], 5),
    ]);
    let result = host
        .upload("doc.pdf", &pdf, json!({"mimeType": "application/pdf"}))
        .await
        .unwrap();
    let ocr::Extraction::Document(document) = extraction(result) else {
        panic!("a document result");
    };
    assert_eq!(document.emitted_pages, 1);
    assert_eq!(
        document.artifact_termination,
        ocr::Termination::ResourceLimited
    );
    assert!(document.resource_limit.is_some());
    assert!(!document.text.contains("PAGE TWO"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_extract_only_owned_artifacts_and_never_clear_or_upload() {
    let host = host().await;
    let agent = host.agent("thread-a");
    let own = host
        .artifact("agent:thread-a", "image/png", &png(&[LINE]))
        .await;
    let other = host
        .artifact("agent:thread-b", "image/png", &png(&[LINE]))
        .await;
    let result = host
        .rpc(&agent, "ocr.extractArtifact", json!({"artifactId": own}))
        .await
        .expect("own artifact");
    assert!(extraction(result).text().contains(LINE));
    let (code, _) = failure(
        host.rpc(&agent, "ocr.extractArtifact", json!({"artifactId": other}))
            .await,
    );
    assert_eq!(code, ErrorCode::NotFound);
    let (code, _) = failure(host.rpc(&agent, "ocr.clearCache", json!({})).await);
    assert_eq!(code, ErrorCode::PermissionDenied);
    host.rpc(&agent, "ocr.getRuntimeStatus", json!({}))
        .await
        .expect("agents read status");
    // A non-image artifact is refused by type.
    let text = host.artifact("human", "text/plain", b"hello").await;
    let (code, _) = failure(
        host.rpc(
            &host.human,
            "ocr.extractArtifact",
            json!({"artifactId": text}),
        )
        .await,
    );
    assert_eq!(code, ErrorCode::InvalidRequest);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uploads_at_the_limit_reach_the_engine_and_one_byte_past_are_refused() {
    let host = host().await;
    let mut at_limit = png_header(100, 100, 0);
    at_limit.resize(ocr::MAX_INPUT_BYTES as usize, 0);
    // At the limit the bytes are accepted and read: garbage after a PNG header is the engine's refusal.
    let (code, _) = failure(
        host.upload("big.png", &at_limit, json!({"mimeType": "image/png"}))
            .await,
    );
    assert_eq!(code, ErrorCode::InvalidRequest);
    at_limit.push(0);
    let (code, _) = failure(
        host.upload("bigger.png", &at_limit, json!({"mimeType": "image/png"}))
            .await,
    );
    assert_eq!(code, ErrorCode::BodyTooLarge);
    // A mislabelled input is refused before the engine runs.
    let (code, _) = failure(
        host.upload(
            "x.png",
            b"%PDF-1.4 not an image",
            json!({"mimeType": "image/png"}),
        )
        .await,
    );
    assert_eq!(code, ErrorCode::InvalidRequest);
}

/// A PNG signature and IHDR claiming `width`×`height`, then `rest` zero bytes: never a decodable raster.
fn png_header(width: u32, height: u32, rest: usize) -> Vec<u8> {
    let mut bytes = b"\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR".to_vec();
    bytes.extend_from_slice(&width.to_be_bytes());
    bytes.extend_from_slice(&height.to_be_bytes());
    bytes.extend_from_slice(&[8, 0, 0, 0, 0]);
    bytes.resize(bytes.len() + rest, 0);
    bytes
}

fn message(result: Result<Value, ClientError>) -> (ErrorCode, String) {
    match result.expect_err("an error") {
        ClientError::Remote { error, .. } => (error.code, error.message),
        other => panic!("not an error envelope: {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn image_dimensions_past_the_bound_are_refused_before_the_engine_runs() {
    let host = host().await;
    for (width, height) in [(10_001, 1), (1, 10_001), (10_000, 5_001), (40_000, 40_000)] {
        let (code, text) = message(
            host.upload(
                "huge.png",
                &png_header(width, height, 4096),
                json!({"mimeType": "image/png"}),
            )
            .await,
        );
        assert_eq!(code, ErrorCode::InvalidRequest);
        assert!(text.contains(&format!("{width}x{height} pixels")), "{text}");
    }
    // The engine never started for any of them.
    assert_eq!(
        host.status().await.process.expect("process").state,
        ocr::ProcessState::Idle
    );
    // At the bound the header passes and the engine reads (and refuses) the bytes.
    let (code, text) = message(
        host.upload(
            "edge.png",
            &png_header(10_000, 5_000, 4096),
            json!({"mimeType": "image/png"}),
        )
        .await,
    );
    assert_eq!(code, ErrorCode::InvalidRequest);
    assert!(!text.contains("pixels"), "{text}");
    assert_ne!(
        host.status().await.process.expect("process").state,
        ocr::ProcessState::Idle
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_engine_is_reported_and_extraction_is_unavailable_with_offline_availability() {
    let host = host_with(|config, dir| {
        config.ocr.tesseract = dir.join("no-such-tesseract").into_os_string();
    })
    .await;
    let status = host.status().await;
    assert!(matches!(
        status.availability,
        ocr::Availability::Unavailable {
            reason: ocr::UnavailableReason::ToolchainUnavailable,
            ..
        }
    ));
    assert_eq!(
        status.process.as_ref().map(|p| p.state),
        Some(ocr::ProcessState::Idle)
    );
    let (code, details) = failure(
        host.upload("a.png", &png(&["HI"]), json!({"mimeType": "image/png"}))
            .await,
    );
    assert_eq!(code, ErrorCode::Unavailable);
    assert_eq!(details["reason"], "toolchain_unavailable");
    assert_eq!(
        details["benchmark"]["classification"],
        "offline-availability"
    );
    assert_eq!(details["benchmark"]["runtimeStateBefore"], "idle");
    assert_eq!(details["benchmark"]["availability"], "unavailable");
    let status = host.status().await;
    assert_eq!(
        status.process.as_ref().map(|p| p.state),
        Some(ocr::ProcessState::Closed)
    );
}

/// A `tesseract` that answers `--version`/`--list-langs` at once but holds each recognition until a line arrives
/// on `gate` (a FIFO), so a test can act while an extraction is in flight.
async fn gated_engine(dir: &Path) -> (PathBuf, PathBuf) {
    let gate = dir.join("gate");
    let mut command = agentwire_process::Command::new("mkfifo");
    command.arg(&gate).inherit_os_env();
    let child = command.spawn().expect("spawn mkfifo");
    assert!(child.wait().await.success(), "mkfifo");
    let script = dir.join("gated-tesseract");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\ncase \"$1\" in --*) exec tesseract \"$@\";; esac\nread line < '{}'\nexec tesseract \"$@\"\n",
            gate.display()
        ),
    )
    .expect("script");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    (script, gate)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clear_cache_is_refused_while_an_extraction_runs() {
    let gate_dir = tempfile::tempdir().expect("temp dir");
    let (script, gate) = gated_engine(gate_dir.path()).await;
    let host = host_with(|config, _| config.ocr.tesseract = script.into_os_string()).await;
    let image = png(&[LINE]);
    let path = host.file("held.png", &image);
    let envelope = RequestEnvelope::new(
        "req-held",
        "ocr.extractUpload",
        json!({"mimeType": "image/png"}),
    );
    let client = host.human.clone();
    let extraction_task = tokio::spawn(async move {
        client
            .upload(&envelope, &path, ocr::MAX_INPUT_BYTES, WAIT)
            .await
    });
    // Busy as soon as the recognition helper is running (it waits on the gate).
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let state = host.status().await.process.map(|p| p.state);
        if state == Some(ocr::ProcessState::Busy) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never busy: {state:?}"
        );
        tokio::task::yield_now().await;
    }
    let (code, _) = failure(host.rpc(&host.human, "ocr.clearCache", json!({})).await);
    assert_eq!(code, ErrorCode::Conflict);
    // Release the recognition; the extraction completes and clearing works again.
    let release = tokio::task::spawn_blocking(move || std::fs::write(gate, b"go\n"));
    release.await.expect("join").expect("write gate");
    let done = extraction_task.await.expect("join").expect("extraction");
    assert!(extraction(done).text().contains(LINE));
    host.rpc(&host.human, "ocr.clearCache", json!({}))
        .await
        .expect("clear when idle");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_extraction_stops_the_engine_and_the_runtime_is_ready_again() {
    let gate_dir = tempfile::tempdir().expect("temp dir");
    let (script, gate) = gated_engine(gate_dir.path()).await;
    let host = host_with(|config, _| config.ocr.tesseract = script.into_os_string()).await;
    let path = host.file("held.png", &png(&[LINE]));
    let envelope = RequestEnvelope::new(
        "req-held",
        "ocr.extractUpload",
        json!({"mimeType": "image/png"}),
    );
    let client = host.human.clone();
    let extraction_task = tokio::spawn(async move {
        client
            .upload(&envelope, &path, ocr::MAX_INPUT_BYTES, WAIT)
            .await
    });
    let wait_for = |wanted: ocr::ProcessState| {
        let host = &host;
        async move {
            let deadline = tokio::time::Instant::now() + WAIT;
            loop {
                let state = host.status().await.process.map(|p| p.state);
                if state == Some(wanted) {
                    return;
                }
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "never {wanted:?}: {state:?}"
                );
                tokio::task::yield_now().await;
            }
        }
    };
    wait_for(ocr::ProcessState::Busy).await;
    // The client goes away: the server cancels the request, which stops the helper's process group.
    extraction_task.abort();
    let _ = extraction_task.await;
    wait_for(ocr::ProcessState::Ready).await;
    // No process holds the gate open for reading any more: a non-blocking writer finds no reader (ENXIO).
    let opened = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
        .open(&gate);
    assert!(opened.is_err(), "the gated engine is still running");
}
