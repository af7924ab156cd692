//! Offline OCR: `ocr.getRuntimeStatus`, `ocr.extractUpload`, `ocr.extractArtifact`, `ocr.clearCache`.
//!
//! The engine is Tesseract from the OS packages, run through `agentwire-process` as a supervised helper (argv only,
//! an allowlisted environment, its own process group, bounded stdout, a time limit, the group stopped on
//! cancellation); PDF pages are rasterized with poppler's `pdftoppm` (page count and resolution bounded, pages
//! counted with `pdfinfo`). Each recognition is one helper run: `tesseract <page> stdout -l <lang> tsv`.
//!
//! Runtime states (DeepChat's names, `OcrProcessSchema.state`), defined by what this process has seen:
//! - `idle`: the engine has not been verified in this process;
//! - `starting`: it is being verified (`tesseract --version`, `tesseract --list-langs`, the language data hashed);
//! - `ready`: verified by those real runs, no recognition running; `busy`: verified, a recognition running;
//! - `stopping`/`closed`: the host is shutting down (or shut down), or the engine is unavailable (`closed` with
//!   `availability.status = unavailable`). An unavailable engine is verified again at the next extraction.
//!
//! `ocr.getRuntimeStatus` never starts the engine: availability before the first extraction comes from finding
//! the executable (on `PATH` or at the configured path), readiness only from a real run.
//!
//! Derived text is cached under `<data_dir>/ocr-cache/` keyed by SHA-256 over the input bytes, the engine identity
//! (version and language data hash) and the options that change the text; entries are bounded in total bytes
//! (oldest evicted). Text is normalized ([`normalize`]) and bounded in characters and approximate tokens.
//!
//! Benchmark classification (spec "OCR benchmark semantics", DeepChat `OcrBenchmarkSchema`), always from the
//! runtime state captured when the request reaches the runtime, before anything is started: a cache hit is
//! `hit` (spec: `cache-hit`); a miss with the runtime `ready` or `busy` is `miss-warm`
//! (`cache-miss-warm-runtime`); any other miss is `cold-runtime`. The spec's fourth, `offline-availability`, is
//! an extraction that could not run because the offline engine is unavailable: it fails with `unavailable` and
//! its error details carry `benchmark.classification = "offline-availability"` with the same facts.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentwire_local_control::contract::ocr::{
    self as wire, Availability, BenchmarkState, CacheMode, CacheStatus, Engine, EngineStage,
    Extraction, MimeType, ProcessState, StateBefore, Strategy, Termination, UnavailableReason,
};
use agentwire_local_control::contract::settings::OcrBackend;
use agentwire_local_control::contract::{Method, PROTOCOL_VERSION, SURFACE_VERSION};
use agentwire_local_control::envelope::{ErrorBody, ErrorCode, UploadRequestEnvelope};
use agentwire_local_control::server::{RequestContext, UploadedFile};
use agentwire_process::{
    CancellationToken, Command, SpawnError, StdoutItem, StopPlan, WaitOutcome,
};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use tokio::io::AsyncReadExt;

use super::{ControlPlane, Grant, error, lock, params, result};

/// Where the OCR helpers are and how far they may go. Every field documents its default.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct OcrConfig {
    /// The Tesseract executable: a bare name looked up on `PATH`, or a path. Default `tesseract`.
    pub tesseract: OsString,
    /// poppler's `pdftoppm`. Default `pdftoppm`.
    pub pdftoppm: OsString,
    /// poppler's `pdfinfo`. Default `pdfinfo`.
    pub pdfinfo: OsString,
    /// Tesseract language. Default `eng`.
    pub language: String,
    /// PDF pages read at most; later pages end the result with `artifactTermination: resource_limited`.
    /// Default 32.
    pub max_pages: u32,
    /// Rasterization resolution of PDF pages, dots per inch (1..=600). Default 150 (DeepChat `PDF_OCR_DPI`).
    /// Lowered for a document whose pages would exceed [`OcrConfig::max_page_pixels`] on a side.
    pub dpi: u32,
    /// Longest side of a rasterized page, and of an image input, pixels. Default 10 000. An image whose header
    /// declares a longer side is refused (`invalid_request`) before the engine runs.
    pub max_page_pixels: u32,
    /// Most pixels (width × height) of an image input, as its header declares them; past it the image is refused
    /// (`invalid_request`) before the engine runs. Default 50 000 000.
    pub max_image_pixels: u64,
    /// Time one helper run may take before its process group is stopped (`timeout`). Default 2 min.
    pub helper_timeout: Duration,
    /// Largest stdout of one helper run, bytes; past it the run is stopped (`result_too_large`). Default 8 MiB.
    pub max_helper_output_bytes: usize,
    /// Bound of the derived-text cache, bytes of entries; the oldest entries are evicted past it. Default 64 MiB.
    pub cache_max_bytes: u64,
}

impl Default for OcrConfig {
    fn default() -> Self {
        OcrConfig {
            tesseract: "tesseract".into(),
            pdftoppm: "pdftoppm".into(),
            pdfinfo: "pdfinfo".into(),
            language: "eng".to_owned(),
            max_pages: 32,
            dpi: 150,
            max_page_pixels: 10_000,
            max_image_pixels: 50_000_000,
            helper_timeout: Duration::from_secs(120),
            max_helper_output_bytes: 8 * 1024 * 1024,
            cache_max_bytes: 64 * 1024 * 1024,
        }
    }
}

/// What `tesseract` says it is, verified by real runs in this process.
#[derive(Debug, Clone, PartialEq, Eq)]
struct EngineInfo {
    /// `tesseract 5.3.0`.
    core_version: String,
    /// `5.3.0`.
    version: String,
    /// `eng@<16 hex of the traineddata's SHA-256>`.
    bundle_id: String,
}

#[derive(Debug, Default)]
struct RuntimeState {
    engine: Option<Arc<EngineInfo>>,
    unavailable: Option<UnavailableReason>,
    starting: bool,
    active: usize,
    waiting: usize,
    pending_bytes: u64,
    closing: bool,
}

impl RuntimeState {
    fn state(&self) -> ProcessState {
        if self.closing {
            return if self.active > 0 {
                ProcessState::Stopping
            } else {
                ProcessState::Closed
            };
        }
        if self.starting {
            return ProcessState::Starting;
        }
        match (&self.engine, self.unavailable) {
            (Some(_), _) if self.active > 0 => ProcessState::Busy,
            (Some(_), _) => ProcessState::Ready,
            (None, Some(_)) => ProcessState::Closed,
            (None, None) => ProcessState::Idle,
        }
    }
}

/// The OCR runtime and cache of one control plane.
#[derive(Debug)]
pub(crate) struct OcrService {
    config: OcrConfig,
    cache_dir: PathBuf,
    work_dir: PathBuf,
    state: Mutex<RuntimeState>,
    start: tokio::sync::Mutex<()>,
}

/// Why an extraction failed, before it becomes an [`ErrorBody`].
#[derive(Debug)]
enum OcrError {
    Unavailable(UnavailableReason, &'static str),
    Invalid(String),
    Cancelled,
    TimedOut,
    TooLarge(&'static str),
    Internal(String),
}

impl OcrError {
    fn body(&self) -> ErrorBody {
        match self {
            OcrError::Unavailable(reason, what) => {
                let mut details = Map::new();
                details.insert("reason".into(), reason.as_str().into());
                error(
                    ErrorCode::Unavailable,
                    format!("offline OCR is unavailable: {what}"),
                )
                .with_details(details)
            }
            OcrError::Invalid(message) => error(ErrorCode::InvalidRequest, message.clone()),
            OcrError::Cancelled => error(ErrorCode::Cancelled, "OCR extraction was cancelled"),
            OcrError::TimedOut => {
                error(ErrorCode::Timeout, "the OCR engine ran past its time limit").retriable(true)
            }
            OcrError::TooLarge(what) => error(ErrorCode::ResultTooLarge, *what),
            OcrError::Internal(message) => error(ErrorCode::InternalError, message.clone()),
        }
    }
}

/// Decrements the active count (and pending bytes) when a recognition ends, however it ends.
struct ActiveGuard<'a> {
    service: &'a OcrService,
    bytes: u64,
}

impl Drop for ActiveGuard<'_> {
    fn drop(&mut self) {
        let mut state = lock(&self.service.state);
        state.active = state.active.saturating_sub(1);
        state.pending_bytes = state.pending_bytes.saturating_sub(self.bytes);
    }
}

impl OcrService {
    /// The service for `data_dir`; work directories an earlier start left behind (`ocr-work/ocr-*`, a crash
    /// mid-extraction) are removed, by their own name pattern only.
    pub(crate) fn new(config: OcrConfig, data_dir: &Path) -> OcrService {
        let work_dir = data_dir.join("local-control").join("ocr-work");
        if let Ok(entries) = std::fs::read_dir(&work_dir) {
            for entry in entries.filter_map(Result::ok) {
                if entry.file_name().to_string_lossy().starts_with("ocr-") {
                    let _ = std::fs::remove_dir_all(entry.path());
                }
            }
        }
        OcrService {
            config,
            cache_dir: data_dir.join("ocr-cache"),
            work_dir,
            state: Mutex::new(RuntimeState::default()),
            start: tokio::sync::Mutex::new(()),
        }
    }

    /// Refuses new extractions from now on (host shutdown).
    pub(crate) fn close(&self) {
        lock(&self.state).closing = true;
    }

    fn state(&self) -> ProcessState {
        lock(&self.state).state()
    }

    /// The engine, verifying it first unless this process already did.
    async fn ensure_started(
        &self,
        cancel: &CancellationToken,
    ) -> Result<Arc<EngineInfo>, OcrError> {
        {
            let mut state = lock(&self.state);
            if state.closing {
                return Err(OcrError::Unavailable(
                    UnavailableReason::ServiceClosed,
                    "the host is shutting down",
                ));
            }
            if let Some(engine) = &state.engine {
                return Ok(Arc::clone(engine));
            }
            state.waiting += 1;
        }
        let _serial = self.start.lock().await;
        {
            let mut state = lock(&self.state);
            state.waiting = state.waiting.saturating_sub(1);
            if let Some(engine) = &state.engine {
                return Ok(Arc::clone(engine));
            }
            state.starting = true;
        }
        let verified = self.verify(cancel).await;
        let mut state = lock(&self.state);
        state.starting = false;
        match verified {
            Ok(engine) => {
                let engine = Arc::new(engine);
                state.engine = Some(Arc::clone(&engine));
                state.unavailable = None;
                Ok(engine)
            }
            Err(OcrError::Unavailable(reason, what)) => {
                state.unavailable = Some(reason);
                Err(OcrError::Unavailable(reason, what))
            }
            Err(other) => Err(other),
        }
    }

    async fn verify(&self, cancel: &CancellationToken) -> Result<EngineInfo, OcrError> {
        if !cfg!(unix) {
            return Err(OcrError::Unavailable(
                UnavailableReason::UnsupportedPlatform,
                "only Unix hosts run the OCR helper",
            ));
        }
        let version = self
            .run_helper(&self.config.tesseract, &["--version".into()], cancel)
            .await?;
        let version = String::from_utf8_lossy(&version);
        let core_version = version
            .lines()
            .next()
            .map(str::trim)
            .filter(|line| line.starts_with("tesseract "))
            .ok_or(OcrError::Unavailable(
                UnavailableReason::ToolchainUnavailable,
                "the engine did not report its version",
            ))?
            .chars()
            .take(128)
            .collect::<String>();
        let version = core_version
            .trim_start_matches("tesseract ")
            .trim()
            .to_owned();
        let langs = self
            .run_helper(&self.config.tesseract, &["--list-langs".into()], cancel)
            .await?;
        let langs = String::from_utf8_lossy(&langs);
        let dir = langs
            .lines()
            .next()
            .and_then(|line| line.split('"').nth(1))
            .map(PathBuf::from);
        let language = &self.config.language;
        if !langs.lines().skip(1).any(|line| line.trim() == language) {
            return Err(OcrError::Unavailable(
                UnavailableReason::AssetsMissing,
                "the engine's language data is not installed",
            ));
        }
        let data = dir
            .map(|dir| dir.join(format!("{language}.traineddata")))
            .ok_or(OcrError::Unavailable(
                UnavailableReason::AssetsMissing,
                "the engine did not name its language data directory",
            ))?;
        let digest = tokio::task::spawn_blocking(move || -> std::io::Result<String> {
            let mut file = std::fs::File::open(data)?;
            let mut hasher = Sha256::new();
            let mut buffer = vec![0u8; 64 * 1024];
            loop {
                let n = std::io::Read::read(&mut file, &mut buffer)?;
                if n == 0 {
                    break;
                }
                hasher.update(&buffer[..n]);
            }
            Ok(hex(&hasher.finalize()))
        })
        .await
        .map_err(|e| OcrError::Internal(e.to_string()))?
        .map_err(|_| {
            OcrError::Unavailable(
                UnavailableReason::AssetsMissing,
                "the engine's language data cannot be read",
            )
        })?;
        Ok(EngineInfo {
            core_version,
            version,
            bundle_id: format!("{language}@{}", &digest[..16]),
        })
    }

    /// Runs one helper with a bounded stdout and the configured time limit; stops its group on `cancel`.
    async fn run_helper(
        &self,
        program: &OsString,
        args: &[OsString],
        cancel: &CancellationToken,
    ) -> Result<Vec<u8>, OcrError> {
        let mut command = Command::new(program);
        command
            .args(args)
            .inherit_os_env()
            .inherit_env(["TESSDATA_PREFIX"])
            // One thread per helper: the host's cores are shared with chat turns.
            .env("OMP_THREAD_LIMIT", "1")
            .stdout_bytes();
        let mut child = command.spawn().map_err(|e| match e {
            SpawnError::NotFound { .. }
            | SpawnError::NotExecutable { .. }
            | SpawnError::PermissionDenied { .. }
            | SpawnError::InterpreterNotFound { .. } => OcrError::Unavailable(
                UnavailableReason::ToolchainUnavailable,
                "an OCR helper executable is not installed",
            ),
            other => OcrError::Internal(format!("OCR helper not started: {}", other.code())),
        })?;
        let mut stdout = child
            .take_stdout()
            .ok_or_else(|| OcrError::Internal("OCR helper has no stdout".to_owned()))?;
        let handle = child.handle();
        let limit = self.config.max_helper_output_bytes;
        let stop = StopPlan::new()
            .stdin_grace(Duration::ZERO)
            .term_grace(Duration::from_secs(1));
        let overflow = CancellationToken::new();
        let read = async {
            let mut out = Vec::new();
            while let Some(item) = stdout.next().await {
                if let StdoutItem::Bytes(bytes) = item {
                    if out.len() + bytes.len() > limit {
                        overflow.cancel();
                        return None;
                    }
                    out.extend_from_slice(&bytes);
                }
            }
            Some(out)
        };
        let stop_on = {
            let either = CancellationToken::new();
            let (a, b, c) = (cancel.clone(), overflow.clone(), either.clone());
            tokio::spawn(async move {
                tokio::select! {
                    () = a.cancelled() => {}
                    () = b.cancelled() => {}
                    () = c.cancelled() => return,
                }
                c.cancel();
            });
            either
        };
        let (output, outcome) = tokio::join!(
            read,
            handle.wait_or_stop(&stop_on, Some(self.config.helper_timeout), stop)
        );
        // Ends the watcher task when neither fired.
        stop_on.cancel();
        drop(child);
        match outcome {
            WaitOutcome::Exited(status) => {
                let output =
                    output.ok_or(OcrError::TooLarge("OCR helper output exceeds its bound"))?;
                if status.success() {
                    Ok(output)
                } else {
                    Err(OcrError::Invalid(
                        "the OCR engine could not read the input".to_owned(),
                    ))
                }
            }
            WaitOutcome::TimedOut(_) => Err(OcrError::TimedOut),
            _ if overflow.is_cancelled() => {
                Err(OcrError::TooLarge("OCR helper output exceeds its bound"))
            }
            _ => Err(OcrError::Cancelled),
        }
    }

    fn cache_status(&self) -> CacheStatus {
        let entries = cache_entries(&self.cache_dir);
        CacheStatus {
            mode: CacheMode::Persistent,
            persistence_unavailable_reason: None,
            entry_count: entries.len() as u64,
            logical_bytes: entries.iter().map(|e| e.1).sum(),
            max_bytes: self.config.cache_max_bytes.max(1),
        }
    }

    fn status(&self) -> wire::RuntimeStatus {
        let state = lock(&self.state);
        let process_state = state.state();
        let engine_info = state.engine.clone();
        let availability = match (&engine_info, state.unavailable) {
            (Some(engine), _) => Availability::Available {
                light_ocr_version: engine.version.clone(),
                bundle_id: engine.bundle_id.clone(),
            },
            (None, Some(reason)) => Availability::Unavailable {
                reason,
                light_ocr_version: String::new(),
                bundle_id: String::new(),
            },
            (None, None) if state.closing => Availability::Unavailable {
                reason: UnavailableReason::ServiceClosed,
                light_ocr_version: String::new(),
                bundle_id: String::new(),
            },
            (None, None) => match find_executable(&self.config.tesseract) {
                Some(_) => Availability::Available {
                    light_ocr_version: String::new(),
                    bundle_id: String::new(),
                },
                None => Availability::Unavailable {
                    reason: UnavailableReason::ToolchainUnavailable,
                    light_ocr_version: String::new(),
                    bundle_id: String::new(),
                },
            },
        };
        let process = wire::Process {
            state: process_state,
            node_version: None,
            queued_requests: state.waiting as u64,
            pending_input_bytes: state.pending_bytes,
            engine: engine_info.map(|e| wire_engine(&e, OcrBackend::Auto)),
        };
        drop(state);
        let missing: Vec<String> = [
            ("pdfinfo", &self.config.pdfinfo),
            ("pdftoppm", &self.config.pdftoppm),
        ]
        .into_iter()
        .filter(|(_, program)| find_executable(program).is_none())
        .map(|(name, _)| name.to_owned())
        .collect();
        let pdf = wire::PdfSupport {
            available: missing.is_empty() && matches!(availability, Availability::Available { .. }),
            missing,
        };
        wire::RuntimeStatus {
            platform: std::env::consts::OS.to_owned(),
            arch: std::env::consts::ARCH.to_owned(),
            availability,
            process: Some(process),
            cache: Some(self.cache_status()),
            pdf: Some(pdf),
        }
    }

    fn clear_cache(&self) -> Result<CacheStatus, ErrorBody> {
        let state = self.state();
        if matches!(
            state,
            ProcessState::Busy | ProcessState::Starting | ProcessState::Stopping
        ) {
            return Err(error(
                ErrorCode::Conflict,
                format!(
                    "the OCR runtime is {}; clear the cache when no extraction runs",
                    state_name(state)
                ),
            )
            .retriable(true));
        }
        for (path, _, _) in cache_entries(&self.cache_dir) {
            if let Err(e) = std::fs::remove_file(&path)
                && e.kind() != std::io::ErrorKind::NotFound
            {
                return Err(error(
                    ErrorCode::InternalError,
                    "an OCR cache entry could not be removed",
                ));
            }
        }
        Ok(self.cache_status())
    }

    /// Extracts the text of `bytes`.
    async fn extract(
        &self,
        input: Input<'_>,
        app_version: &str,
        cancel: &CancellationToken,
    ) -> Result<Extraction, (OcrError, Option<Value>)> {
        let started = Instant::now();
        let before = StateBefore::from(self.state());
        let input_bytes = input.bytes.len() as u64;
        let availability_failure = |e: OcrError| {
            let facts = matches!(e, OcrError::Unavailable(..)).then(|| {
                json!({
                    "classification": "offline-availability",
                    "availability": "unavailable",
                    "runtimeStateBefore": before,
                    "runtimeWasReady": before == StateBefore::Ready,
                    "inputBytes": input_bytes,
                    "mimeType": input.mime.as_str(),
                    "durationMs": ms(started.elapsed()),
                    "appVersion": app_version,
                    "protocolVersion": PROTOCOL_VERSION,
                    "surfaceVersion": SURFACE_VERSION,
                })
            });
            (e, facts)
        };
        check_magic(input.mime, input.bytes).map_err(|e| (e, None))?;
        if input.mime != MimeType::Pdf {
            check_image_size(
                input.mime,
                input.bytes,
                self.config.max_page_pixels,
                self.config.max_image_pixels,
            )
            .map_err(|e| (e, None))?;
        }
        let engine = self
            .ensure_started(cancel)
            .await
            .map_err(availability_failure)?;
        let start_ms = ms(started.elapsed());
        let key = self.cache_key(&engine, &input);
        let benchmark = |state: BenchmarkState, duration: Duration| wire::Benchmark {
            state,
            runtime_state_before: before,
            runtime_was_ready: before == StateBefore::Ready,
            input_bytes,
            duration_ms: ms(duration),
            app_version: app_version.to_owned(),
            protocol_version: PROTOCOL_VERSION,
            surface_version: SURFACE_VERSION,
        };
        if let Some(mut cached) = self.cache_get(&key) {
            let total = started.elapsed();
            match &mut cached {
                Extraction::Image(e) => {
                    e.cache_hit = true;
                    e.engine.requested_backend = input.backend;
                    e.benchmark = benchmark(BenchmarkState::Hit, total);
                    e.timing_ms = wire::ImageTiming {
                        snapshot: 0.0,
                        preprocessing: start_ms,
                        recognition: 0.0,
                        total: ms(total),
                    };
                }
                Extraction::Document(e) => {
                    e.cache_hit = true;
                    e.engine.requested_backend = input.backend;
                    e.benchmark = benchmark(BenchmarkState::Hit, total);
                    e.source_page_count_hint = input.page_count_hint;
                    e.timing_ms = wire::DocumentTiming {
                        snapshot: 0.0,
                        recognition: 0.0,
                        total: ms(total),
                    };
                }
            }
            return Ok(cached);
        }
        let miss = if matches!(before, StateBefore::Ready | StateBefore::Busy) {
            BenchmarkState::MissWarm
        } else {
            BenchmarkState::ColdRuntime
        };
        let _active = {
            let mut state = lock(&self.state);
            state.active += 1;
            state.pending_bytes += input_bytes;
            ActiveGuard {
                service: self,
                bytes: input_bytes,
            }
        };
        let work = self.work_dir_for().map_err(|e| (e, None))?;
        let path = work.path().join("input");
        tokio::fs::write(&path, input.bytes).await.map_err(|e| {
            (
                OcrError::Internal(format!("OCR input not staged: {e}")),
                None,
            )
        })?;
        let engine_wire = wire_engine(&engine, input.backend);
        let extraction = if input.mime == MimeType::Pdf {
            let snapshot_started = Instant::now();
            let pages = self
                .rasterize(&path, work.path(), cancel)
                .await
                .map_err(availability_failure)?;
            let snapshot = snapshot_started.elapsed();
            let recognition_started = Instant::now();
            let limit = input.token_limit.unwrap_or(wire::MAX_TOKENS);
            let mut document = DocumentBuilder::new(limit);
            for page in &pages.files {
                if document.full() {
                    break;
                }
                let tsv = self
                    .recognize(page, cancel)
                    .await
                    .map_err(availability_failure)?;
                document.push(&normalize(&parse_tsv(&tsv).text));
            }
            let recognition = recognition_started.elapsed();
            let (termination, resource_limit) = if document.output_limited {
                (Termination::StoppedByOutputLimit, None)
            } else if pages.total > pages.files.len() as u32 {
                (
                    Termination::ResourceLimited,
                    Some(wire::ResourceLimit {
                        code: "resource_limit_exceeded".to_owned(),
                        message: format!(
                            "the document has {} pages; the first {} were read",
                            pages.total,
                            pages.files.len()
                        ),
                    }),
                )
            } else {
                (Termination::RequestComplete, None)
            };
            let total = started.elapsed();
            Extraction::Document(wire::DocumentExtraction {
                token_count: approx_tokens(&document.text),
                truncated: document.output_limited,
                emitted_pages: u32::try_from(document.spans.len()).unwrap_or(u32::MAX),
                text: document.text,
                engine: engine_wire,
                cache_hit: false,
                benchmark: benchmark(miss, total),
                mime_type: MimeType::Pdf,
                page_spans: document.spans,
                artifact_termination: termination,
                generation_output_limit_reached: document.output_limited,
                generation_token_limit: limit,
                source_page_count_hint: input.page_count_hint,
                resource_limit,
                timing_ms: wire::DocumentTiming {
                    snapshot: ms(snapshot),
                    recognition: ms(recognition),
                    total: ms(total),
                },
            })
        } else {
            let recognition_started = Instant::now();
            let tsv = self
                .recognize(&path, cancel)
                .await
                .map_err(availability_failure)?;
            let recognition = recognition_started.elapsed();
            let parsed = parse_tsv(&tsv);
            let (width, height) = parsed.size.ok_or((
                OcrError::Invalid("the OCR engine could not read the image".to_owned()),
                None,
            ))?;
            if width == 0
                || height == 0
                || width > wire::MAX_IMAGE_SIDE
                || height > wire::MAX_IMAGE_SIDE
            {
                return Err((
                    OcrError::Invalid(format!(
                        "images must be 1..={} pixels on each side",
                        wire::MAX_IMAGE_SIDE
                    )),
                    None,
                ));
            }
            let char_cap = wire::MAX_TEXT_CHARACTERS.min(wire::MAX_IMAGE_TOKENS as usize * 4);
            let (text, truncated) = bound_text(&normalize(&parsed.text), char_cap);
            let total = started.elapsed();
            Extraction::Image(wire::ImageExtraction {
                token_count: approx_tokens(&text),
                text,
                truncated,
                engine: engine_wire,
                cache_hit: false,
                benchmark: benchmark(miss, total),
                mime_type: input.mime,
                image_width: width,
                image_height: height,
                strategy: Strategy::TesseractLstm,
                timing_ms: wire::ImageTiming {
                    snapshot: 0.0,
                    preprocessing: start_ms,
                    recognition: ms(recognition),
                    total: ms(total),
                },
            })
        };
        self.cache_put(&key, &extraction);
        Ok(extraction)
    }

    fn work_dir_for(&self) -> Result<tempfile::TempDir, OcrError> {
        crate::paths::create_private_dir(&self.work_dir)
            .map_err(|e| OcrError::Internal(format!("OCR work directory: {e}")))?;
        tempfile::Builder::new()
            .prefix("ocr-")
            .tempdir_in(&self.work_dir)
            .map_err(|e| OcrError::Internal(format!("OCR work directory: {e}")))
    }

    async fn recognize(
        &self,
        image: &Path,
        cancel: &CancellationToken,
    ) -> Result<Vec<u8>, OcrError> {
        let args: Vec<OsString> = vec![
            image.as_os_str().to_owned(),
            "stdout".into(),
            "-l".into(),
            self.config.language.clone().into(),
            "tsv".into(),
        ];
        self.run_helper(&self.config.tesseract, &args, cancel).await
    }

    async fn rasterize(
        &self,
        pdf: &Path,
        work: &Path,
        cancel: &CancellationToken,
    ) -> Result<Pages, OcrError> {
        let info = self
            .run_helper(&self.config.pdfinfo, &[pdf.as_os_str().to_owned()], cancel)
            .await?;
        let info = String::from_utf8_lossy(&info);
        let total = info
            .lines()
            .find_map(|line| line.strip_prefix("Pages:"))
            .and_then(|n| n.trim().parse::<u32>().ok())
            .filter(|n| *n >= 1)
            .ok_or_else(|| OcrError::Invalid("the PDF has no readable pages".to_owned()))?;
        let read = total.min(self.config.max_pages.max(1));
        // Page sizes of the pages to read, to keep each raster under max_page_pixels.
        let sizes = self
            .run_helper(
                &self.config.pdfinfo,
                &[
                    "-f".into(),
                    "1".into(),
                    "-l".into(),
                    read.to_string().into(),
                    pdf.as_os_str().to_owned(),
                ],
                cancel,
            )
            .await?;
        let largest_points = String::from_utf8_lossy(&sizes)
            .lines()
            .filter(|line| line.starts_with("Page") && line.contains("size:"))
            .filter_map(|line| {
                let dims = line.split("size:").nth(1)?;
                let mut numbers = dims
                    .split_whitespace()
                    .filter_map(|t| t.parse::<f64>().ok());
                Some(numbers.next()?.max(numbers.next()?))
            })
            .fold(0.0f64, f64::max);
        let mut dpi = self.config.dpi.clamp(1, 600);
        if largest_points > 0.0 {
            let fit = (f64::from(self.config.max_page_pixels) * 72.0 / largest_points).floor();
            if fit < f64::from(dpi) {
                dpi = (fit as u32).max(1);
            }
        }
        let prefix = work.join("page");
        self.run_helper(
            &self.config.pdftoppm,
            &[
                "-r".into(),
                dpi.to_string().into(),
                "-f".into(),
                "1".into(),
                "-l".into(),
                read.to_string().into(),
                "-gray".into(),
                "-png".into(),
                pdf.as_os_str().to_owned(),
                prefix.as_os_str().to_owned(),
            ],
            cancel,
        )
        .await?;
        let mut files: Vec<(u32, PathBuf)> = std::fs::read_dir(work)
            .map_err(|e| OcrError::Internal(format!("rasterized pages: {e}")))?
            .filter_map(Result::ok)
            .filter_map(|entry| {
                let name = entry.file_name().to_string_lossy().into_owned();
                let number = name
                    .strip_prefix("page-")?
                    .strip_suffix(".png")?
                    .parse::<u32>()
                    .ok()?;
                Some((number, entry.path()))
            })
            .collect();
        files.sort();
        Ok(Pages {
            total,
            files: files.into_iter().map(|(_, path)| path).collect(),
        })
    }

    fn cache_key(&self, engine: &EngineInfo, input: &Input<'_>) -> String {
        let mut hasher = Sha256::new();
        hasher.update(input.bytes);
        for part in [
            engine.core_version.as_str(),
            engine.bundle_id.as_str(),
            input.mime.as_str(),
            &self.config.language,
            &input.token_limit.unwrap_or(wire::MAX_TOKENS).to_string(),
            &self.config.max_pages.to_string(),
            &self.config.dpi.to_string(),
            &self.config.max_page_pixels.to_string(),
        ] {
            hasher.update([0u8]);
            hasher.update(part.as_bytes());
        }
        hex(&hasher.finalize())
    }

    fn cache_get(&self, key: &str) -> Option<Extraction> {
        let bytes = std::fs::read(self.cache_dir.join(format!("{key}.json"))).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// Stores `extraction` (atomically: a temp file renamed into place) and evicts the oldest entries past the
    /// byte bound. A cache that cannot be written only costs the next hit.
    fn cache_put(&self, key: &str, extraction: &Extraction) {
        let Ok(bytes) = serde_json::to_vec(extraction) else {
            return;
        };
        if bytes.len() as u64 > self.config.cache_max_bytes
            || crate::paths::create_private_dir(&self.cache_dir).is_err()
        {
            return;
        }
        let written = tempfile::NamedTempFile::new_in(&self.cache_dir).and_then(|mut file| {
            std::io::Write::write_all(&mut file, &bytes)?;
            file.persist(self.cache_dir.join(format!("{key}.json")))
                .map_err(|e| e.error)?;
            Ok(())
        });
        if let Err(e) = written {
            tracing::warn!(error = %e, "OCR cache entry not written");
            return;
        }
        let mut entries = cache_entries(&self.cache_dir);
        let mut total: u64 = entries.iter().map(|e| e.1).sum();
        entries.sort_by_key(|e| e.2);
        for (path, size, _) in entries {
            if total <= self.config.cache_max_bytes {
                break;
            }
            if std::fs::remove_file(path).is_ok() {
                total = total.saturating_sub(size);
            }
        }
    }
}

/// Cache files (`<64 hex>.json`, nothing else is touched): path, size, modification time.
fn cache_entries(dir: &Path) -> Vec<(PathBuf, u64, std::time::SystemTime)> {
    let Ok(read) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    read.filter_map(Result::ok)
        .filter(|entry| {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            name.len() == 64 + 5
                && name.ends_with(".json")
                && name[..64].bytes().all(|b| b.is_ascii_hexdigit())
        })
        .filter_map(|entry| {
            let meta = entry.metadata().ok()?;
            meta.is_file().then(|| {
                (
                    entry.path(),
                    meta.len(),
                    meta.modified().unwrap_or(std::time::UNIX_EPOCH),
                )
            })
        })
        .collect()
}

struct Pages {
    total: u32,
    files: Vec<PathBuf>,
}

/// One extraction's input.
struct Input<'a> {
    bytes: &'a [u8],
    mime: MimeType,
    backend: OcrBackend,
    page_count_hint: Option<u32>,
    token_limit: Option<u32>,
}

fn wire_engine(engine: &EngineInfo, backend: OcrBackend) -> Engine {
    Engine {
        core_version: engine.core_version.clone(),
        model_bundle_id: engine.bundle_id.clone(),
        requested_backend: backend,
        strategy: Strategy::TesseractLstm,
        detection: EngineStage {
            provider_chain: vec!["tesseract-layout".to_owned()],
            precision: "cpu".to_owned(),
        },
        recognition: EngineStage {
            provider_chain: vec!["tesseract-lstm".to_owned()],
            precision: "cpu".to_owned(),
        },
    }
}

fn state_name(state: ProcessState) -> &'static str {
    match state {
        ProcessState::Idle => "idle",
        ProcessState::Starting => "starting",
        ProcessState::Ready => "ready",
        ProcessState::Busy => "busy",
        ProcessState::Stopping => "stopping",
        ProcessState::Closed => "closed",
    }
}

fn ms(duration: Duration) -> f64 {
    (duration.as_secs_f64() * 1000.0).min(wire::MAX_TIMING_MS)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether `bytes` start like a file of type `mime` (so a mislabelled upload is `invalid_request`, not an engine
/// failure).
fn check_magic(mime: MimeType, bytes: &[u8]) -> Result<(), OcrError> {
    let ok = match mime {
        MimeType::Pdf => bytes.starts_with(b"%PDF-"),
        MimeType::Png => bytes.starts_with(b"\x89PNG\r\n\x1a\n"),
        MimeType::Jpeg => bytes.starts_with(&[0xFF, 0xD8, 0xFF]),
        MimeType::Gif => bytes.starts_with(b"GIF87a") || bytes.starts_with(b"GIF89a"),
        MimeType::Bmp => bytes.starts_with(b"BM"),
        MimeType::Tiff => bytes.starts_with(b"II*\0") || bytes.starts_with(b"MM\0*"),
        MimeType::Webp => bytes.len() >= 12 && &bytes[..4] == b"RIFF" && &bytes[8..12] == b"WEBP",
    };
    if ok {
        Ok(())
    } else {
        Err(OcrError::Invalid(format!(
            "the input is not a {} file",
            mime.as_str()
        )))
    }
}

/// Refuses an image whose header declares a size over `max_side` pixels on a side or `max_pixels` in total, or
/// whose header gives no size, so the engine never decodes a bomb (Tesseract holds the whole raster in memory;
/// a 40 000 × 40 000 PNG of a few MB takes GBs). Formats: PNG, JPEG, GIF, BMP, TIFF, WebP headers.
fn check_image_size(
    mime: MimeType,
    bytes: &[u8],
    max_side: u32,
    max_pixels: u64,
) -> Result<(u32, u32), OcrError> {
    let (width, height) = image_size(mime, bytes).ok_or_else(|| {
        OcrError::Invalid(format!(
            "the {} header does not give the image's size",
            mime.as_str()
        ))
    })?;
    if width == 0
        || height == 0
        || width > max_side
        || height > max_side
        || u64::from(width) * u64::from(height) > max_pixels
    {
        return Err(OcrError::Invalid(format!(
            "the image is {width}x{height} pixels; images must be 1..={max_side} pixels on each side and at most \
             {max_pixels} pixels in total"
        )));
    }
    Ok((width, height))
}

fn be16(bytes: &[u8], at: usize) -> Option<u32> {
    Some(u32::from(u16::from_be_bytes(
        bytes.get(at..at + 2)?.try_into().ok()?,
    )))
}

fn le16(bytes: &[u8], at: usize) -> Option<u32> {
    Some(u32::from(u16::from_le_bytes(
        bytes.get(at..at + 2)?.try_into().ok()?,
    )))
}

fn be32(bytes: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
}

fn le32(bytes: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
}

fn le24(bytes: &[u8], at: usize) -> Option<u32> {
    let b = bytes.get(at..at + 3)?;
    Some(u32::from(b[0]) | u32::from(b[1]) << 8 | u32::from(b[2]) << 16)
}

/// Width and height as the image's header declares them (PNG IHDR, JPEG SOFn, GIF logical screen, BMP info
/// header, TIFF first IFD, WebP VP8/VP8L/VP8X); `None` when the header is cut short or gives none.
fn image_size(mime: MimeType, bytes: &[u8]) -> Option<(u32, u32)> {
    match mime {
        MimeType::Png => (bytes.get(12..16)? == b"IHDR")
            .then_some(())
            .and_then(|()| Some((be32(bytes, 16)?, be32(bytes, 20)?))),
        MimeType::Gif => Some((le16(bytes, 6)?, le16(bytes, 8)?)),
        MimeType::Bmp => {
            let header = le32(bytes, 14)?;
            if header == 12 {
                Some((le16(bytes, 18)?, le16(bytes, 20)?))
            } else {
                let width = i32::from_le_bytes(bytes.get(18..22)?.try_into().ok()?);
                let height = i32::from_le_bytes(bytes.get(22..26)?.try_into().ok()?);
                Some((width.unsigned_abs(), height.unsigned_abs()))
            }
        }
        MimeType::Jpeg => {
            let mut at = 2;
            loop {
                while *bytes.get(at)? != 0xFF {
                    at += 1;
                }
                while *bytes.get(at)? == 0xFF {
                    at += 1;
                }
                let marker = *bytes.get(at)?;
                at += 1;
                if matches!(marker, 0x01 | 0xD0..=0xD9) {
                    continue;
                }
                let length = be16(bytes, at)? as usize;
                if matches!(marker, 0xC0..=0xCF) && !matches!(marker, 0xC4 | 0xC8 | 0xCC) {
                    return Some((be16(bytes, at + 5)?, be16(bytes, at + 3)?));
                }
                at += length.max(2);
            }
        }
        MimeType::Tiff => {
            let little = bytes.starts_with(b"II");
            let u16_at = |at| {
                if little {
                    le16(bytes, at)
                } else {
                    be16(bytes, at)
                }
            };
            let u32_at = |at| {
                if little {
                    le32(bytes, at)
                } else {
                    be32(bytes, at)
                }
            };
            let ifd = u32_at(4)? as usize;
            let count = u16_at(ifd)? as usize;
            let (mut width, mut height) = (None, None);
            for entry in 0..count.min(4096) {
                let at = ifd.checked_add(2 + entry * 12)?;
                let tag = u16_at(at)?;
                let value = match u16_at(at + 2)? {
                    3 => u16_at(at + 8)?,
                    4 => u32_at(at + 8)?,
                    _ => continue,
                };
                match tag {
                    256 => width = Some(value),
                    257 => height = Some(value),
                    _ => {}
                }
            }
            Some((width?, height?))
        }
        MimeType::Webp => match bytes.get(12..16)? {
            b"VP8 " => Some((le16(bytes, 26)? & 0x3FFF, le16(bytes, 28)? & 0x3FFF)),
            b"VP8L" => {
                let bits = le32(bytes, 21)?;
                Some(((bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1))
            }
            b"VP8X" => Some((le24(bytes, 24)? + 1, le24(bytes, 27)? + 1)),
            _ => None,
        },
        MimeType::Pdf => None,
    }
}

/// Text and page size from Tesseract's TSV output: words joined by spaces, lines by `\n`, paragraphs and
/// blocks by a blank line.
#[derive(Debug, Default, PartialEq, Eq)]
struct Parsed {
    text: String,
    size: Option<(u32, u32)>,
}

fn parse_tsv(tsv: &[u8]) -> Parsed {
    let tsv = String::from_utf8_lossy(tsv);
    let mut parsed = Parsed::default();
    let mut last: Option<(u32, u32, u32, u32)> = None;
    for line in tsv.lines().skip(1) {
        let fields: Vec<&str> = line.split('\t').collect();
        if fields.len() < 12 {
            continue;
        }
        let number = |i: usize| fields.get(i).and_then(|f| f.parse::<u32>().ok());
        match number(0) {
            Some(1) => {
                if let (Some(w), Some(h)) = (number(8), number(9)) {
                    parsed.size.get_or_insert((w, h));
                }
            }
            Some(5) => {
                let word = fields[11..].join("\t");
                let word = word.trim();
                if word.is_empty() {
                    continue;
                }
                let at = (
                    number(1).unwrap_or(0),
                    number(2).unwrap_or(0),
                    number(3).unwrap_or(0),
                    number(4).unwrap_or(0),
                );
                match last {
                    Some(prev) if prev == at => parsed.text.push(' '),
                    Some(prev) if (prev.0, prev.1, prev.2) == (at.0, at.1, at.2) => {
                        parsed.text.push('\n');
                    }
                    Some(_) => parsed.text.push_str("\n\n"),
                    None => {}
                }
                parsed.text.push_str(word);
                last = Some(at);
            }
            _ => {}
        }
    }
    parsed
}

/// Normalizes recognized text: `\r\n` and `\r` to `\n`; Unicode spaces to a space; zero-width characters, BOMs
/// and other controls removed; the Latin ligatures U+FB00..U+FB06 (which Tesseract emits) expanded; runs of
/// spaces collapsed; lines trimmed; more than one blank line collapsed to one; the whole trimmed. Full Unicode
/// normalization (NFKC) is not applied: it would need a Unicode table dependency.
pub fn normalize(text: &str) -> String {
    let mut mapped = String::with_capacity(text.len());
    for c in text.replace("\r\n", "\n").chars() {
        match c {
            '\r' => mapped.push('\n'),
            '\n' => mapped.push('\n'),
            '\t' | '\u{a0}' | '\u{2000}'..='\u{200a}' | '\u{202f}' | '\u{205f}' | '\u{3000}' => {
                mapped.push(' ');
            }
            '\u{200b}'..='\u{200d}' | '\u{2060}' | '\u{feff}' => {}
            '\u{fb00}' => mapped.push_str("ff"),
            '\u{fb01}' => mapped.push_str("fi"),
            '\u{fb02}' => mapped.push_str("fl"),
            '\u{fb03}' => mapped.push_str("ffi"),
            '\u{fb04}' => mapped.push_str("ffl"),
            '\u{fb05}' | '\u{fb06}' => mapped.push_str("st"),
            c if c.is_control() => {}
            c => mapped.push(c),
        }
    }
    let mut out = String::with_capacity(mapped.len());
    let mut blank_run = 0usize;
    for line in mapped.split('\n') {
        let collapsed = line
            .split(' ')
            .filter(|w| !w.is_empty())
            .collect::<Vec<_>>()
            .join(" ");
        if collapsed.is_empty() {
            blank_run += 1;
            continue;
        }
        if !out.is_empty() {
            out.push_str(if blank_run > 0 { "\n\n" } else { "\n" });
        }
        blank_run = 0;
        out.push_str(&collapsed);
    }
    out
}

/// An approximate token count: one token per four characters, rounded up (bounded by [`wire::MAX_TOKENS`]).
pub fn approx_tokens(text: &str) -> u32 {
    u32::try_from(text.chars().count().div_ceil(4))
        .unwrap_or(u32::MAX)
        .min(wire::MAX_TOKENS)
}

/// `text` cut to at most `max_units` UTF-16 code units (JavaScript length) on a char boundary; `true` if cut.
fn bound_text(text: &str, max_units: usize) -> (String, bool) {
    let mut units = 0usize;
    for (at, c) in text.char_indices() {
        units += c.len_utf16();
        if units > max_units {
            return (text[..at].to_owned(), true);
        }
    }
    (text.to_owned(), false)
}

fn js_len(text: &str) -> u64 {
    text.encode_utf16().count() as u64
}

/// Pages' text joined by blank lines, with spans, bounded by a token limit (four characters a token) and
/// [`wire::MAX_TEXT_CHARACTERS`].
struct DocumentBuilder {
    text: String,
    spans: Vec<wire::PageSpan>,
    max_units: usize,
    output_limited: bool,
}

impl DocumentBuilder {
    fn new(token_limit: u32) -> DocumentBuilder {
        DocumentBuilder {
            text: String::new(),
            spans: Vec::new(),
            max_units: wire::MAX_TEXT_CHARACTERS.min(token_limit as usize * 4),
            output_limited: false,
        }
    }

    fn full(&self) -> bool {
        self.output_limited || self.spans.len() >= wire::MAX_PAGE_SPANS
    }

    fn push(&mut self, page: &str) {
        let page_number = u32::try_from(self.spans.len() + 1).unwrap_or(u32::MAX);
        if !self.text.is_empty() && !page.is_empty() {
            let with_separator = js_len(&self.text) as usize + 2;
            if with_separator >= self.max_units {
                self.output_limited = true;
                return;
            }
            self.text.push_str("\n\n");
        }
        let start = js_len(&self.text);
        let room = self.max_units.saturating_sub(start as usize);
        let (kept, cut) = bound_text(page, room);
        self.text.push_str(&kept);
        self.spans.push(wire::PageSpan {
            page_number,
            start,
            end: js_len(&self.text),
            complete: !cut,
        });
        if cut {
            self.output_limited = true;
        }
    }
}

/// Finds `program` as `Command` would: a path with a `/` as is, a bare name on `PATH`; `None` when there is no
/// executable file.
fn find_executable(program: &OsString) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let executable = |path: &Path| {
        std::fs::metadata(path)
            .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            .unwrap_or(false)
    };
    let path = Path::new(program);
    if program.to_string_lossy().contains('/') {
        return executable(path).then(|| path.to_path_buf());
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(program))
        .find(|candidate| executable(candidate))
}

/// Whether `method` is served here.
pub(super) fn handles(method: &str) -> bool {
    matches!(
        method,
        wire::GetRuntimeStatus::NAME
            | wire::ClearCache::NAME
            | wire::ExtractArtifact::NAME
            | wire::ExtractUpload::NAME
    )
}

fn failure((e, facts): (OcrError, Option<Value>)) -> ErrorBody {
    let mut body = e.body();
    if let Some(facts) = facts {
        let mut details = body.details.take().unwrap_or_default();
        details.insert("benchmark".into(), facts);
        body = body.with_details(details);
    }
    body
}

/// `/v1/rpc` methods: status, clear, extract from an owned artifact.
pub(super) async fn dispatch(
    plane: &ControlPlane,
    ctx: &RequestContext,
    grant: &Grant,
    p: Value,
) -> Result<Value, ErrorBody> {
    let service = &plane.inner.ocr;
    match grant.method {
        wire::GetRuntimeStatus::NAME => {
            params::<wire::GetRuntimeStatus>(p)?;
            result::<wire::GetRuntimeStatus>(&service.status())
        }
        wire::ClearCache::NAME => {
            params::<wire::ClearCache>(p)?;
            let cache = service.clear_cache()?;
            result::<wire::ClearCache>(&wire::ClearCacheResult { cache })
        }
        wire::ExtractArtifact::NAME => {
            let params = params::<wire::ExtractArtifact>(p)?;
            let (meta, mut reader) = plane
                .inner
                .spool
                .read(
                    &super::runs::spool_owner(&grant.caller),
                    &params.artifact_id,
                )
                .await
                .map_err(|e| super::runs::spool_error(&e))?;
            let mime = MimeType::parse(&meta.mime_type).ok_or_else(|| {
                error(
                    ErrorCode::InvalidRequest,
                    "the artifact's type is not an image or PDF that OCR reads",
                )
            })?;
            if meta.size == 0 || meta.size > wire::MAX_INPUT_BYTES {
                return Err(error(
                    ErrorCode::BodyTooLarge,
                    format!("OCR inputs are 1..={} bytes", wire::MAX_INPUT_BYTES),
                ));
            }
            let mut bytes = Vec::with_capacity(usize::try_from(meta.size).unwrap_or(0));
            (&mut reader)
                .take(wire::MAX_INPUT_BYTES)
                .read_to_end(&mut bytes)
                .await
                .map_err(|_| error(ErrorCode::InternalError, "the artifact could not be read"))?;
            let input = Input {
                bytes: &bytes,
                mime,
                backend: params.backend,
                page_count_hint: params.source_page_count_hint,
                token_limit: params.generation_token_limit,
            };
            let extraction = service
                .extract(input, &plane.inner.app_version, &ctx.cancel)
                .await
                .map_err(failure)?;
            result::<wire::ExtractArtifact>(&extraction)
        }
        other => Err(error(
            ErrorCode::NotFound,
            format!("{other} is not served on /v1/rpc"),
        )),
    }
}

/// `/v1/upload`: `ocr.extractUpload`.
pub(super) async fn upload(
    plane: &ControlPlane,
    ctx: &RequestContext,
    grant: &Grant,
    request: UploadRequestEnvelope,
    file: UploadedFile,
) -> Result<Value, ErrorBody> {
    if grant.method != wire::ExtractUpload::NAME {
        return Err(error(
            ErrorCode::NotFound,
            format!("{} takes no upload", grant.method),
        ));
    }
    let params = params::<wire::ExtractUpload>(request.request().params)?;
    let bytes = tokio::fs::read(&file.path)
        .await
        .map_err(|_| error(ErrorCode::InternalError, "the upload could not be read"))?;
    let input = Input {
        bytes: &bytes,
        mime: params.mime_type,
        backend: params.backend,
        page_count_hint: params.source_page_count_hint,
        token_limit: params.generation_token_limit,
    };
    let extraction = plane
        .inner
        .ocr
        .extract(input, &plane.inner.app_version, &ctx.cancel)
        .await
        .map_err(failure)?;
    result::<wire::ExtractUpload>(&extraction)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalize_collapses_whitespace_and_expands_ligatures() {
        let check = |input: &str, expect: &str| assert_eq!(normalize(input), expect, "{input:?}");
        check("  HELLO\u{a0}\u{a0}WORLD  \r\n", "HELLO WORLD");
        check("a\n\n\n\nb", "a\n\nb");
        check("\u{fb01}ne \u{200b}x\u{feff}", "fine x");
        check("tab\there\u{7}", "tab here");
        check("", "");
    }

    proptest::proptest! {
        /// Normalizing twice changes nothing, and bounded text never passes its bound.
        #[test]
        fn normalize_is_idempotent_and_bounds_hold(text in "(?s).{0,200}|[ \t\r\na\u{a0}\u{fb01}\u{200b}\u{7}]{0,60}", max in 0usize..64) {
            let once = normalize(&text);
            proptest::prop_assert_eq!(normalize(&once), once.clone());
            let (kept, cut) = bound_text(&once, max);
            proptest::prop_assert!(js_len(&kept) as usize <= max);
            proptest::prop_assert_eq!(cut, js_len(&once) as usize > max);
            proptest::prop_assert!(once.starts_with(&kept));
        }
    }

    #[test]
    fn tsv_lines_and_paragraphs_and_page_size() {
        let tsv = "level\tpage_num\tblock_num\tpar_num\tline_num\tword_num\tleft\ttop\twidth\theight\tconf\ttext\n\
                   1\t1\t0\t0\t0\t0\t0\t0\t640\t480\t-1\t\n\
                   5\t1\t1\t1\t1\t1\t0\t0\t1\t1\t90\tHELLO\n\
                   5\t1\t1\t1\t1\t2\t0\t0\t1\t1\t90\tOCR\n\
                   5\t1\t1\t1\t2\t1\t0\t0\t1\t1\t90\tNEXT\n\
                   5\t1\t2\t1\t1\t1\t0\t0\t1\t1\t90\tBLOCK\n\
                   5\t1\t2\t1\t1\t2\t0\t0\t1\t1\t-1\t \n";
        let parsed = parse_tsv(tsv.as_bytes());
        assert_eq!(parsed.size, Some((640, 480)));
        assert_eq!(parsed.text, "HELLO OCR\nNEXT\n\nBLOCK");
        assert_eq!(parse_tsv(b"garbage"), Parsed::default());
    }

    #[test]
    fn text_bounds_at_the_limit_and_one_past() {
        assert_eq!(bound_text("abcd", 4), ("abcd".to_owned(), false));
        assert_eq!(bound_text("abcde", 4), ("abcd".to_owned(), true));
        // UTF-16 units: an astral char counts two and is never split.
        assert_eq!(bound_text("ab😀", 3), ("ab".to_owned(), true));
        assert_eq!(approx_tokens("abcd"), 1);
        assert_eq!(approx_tokens("abcde"), 2);
    }

    #[test]
    fn documents_stop_at_the_token_limit_with_spans() {
        let mut document = DocumentBuilder::new(2); // 8 characters
        document.push("ABC");
        document.push("DEFGHIJ");
        assert!(document.output_limited);
        assert_eq!(document.text, "ABC\n\nDEF");
        assert_eq!(document.spans.len(), 2);
        assert_eq!((document.spans[1].start, document.spans[1].end), (5, 8));
        assert!(document.spans[0].complete && !document.spans[1].complete);
        assert!(document.full());
    }

    #[test]
    fn magic_bytes_must_match_the_declared_type() {
        assert!(check_magic(MimeType::Png, b"\x89PNG\r\n\x1a\nrest").is_ok());
        assert!(check_magic(MimeType::Png, b"%PDF-1.4").is_err());
        assert!(check_magic(MimeType::Pdf, b"%PDF-1.4").is_ok());
        assert!(check_magic(MimeType::Webp, b"RIFF\0\0\0\0WEBPVP8 ").is_ok());
    }

    /// A PNG signature and IHDR claiming `width`×`height`: a header only, never a raster.
    fn png_header(width: u32, height: u32) -> Vec<u8> {
        let mut bytes = b"\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR".to_vec();
        bytes.extend_from_slice(&width.to_be_bytes());
        bytes.extend_from_slice(&height.to_be_bytes());
        bytes.extend_from_slice(&[8, 0, 0, 0, 0]);
        bytes
    }

    #[test]
    fn image_headers_bound_sides_and_pixels_at_the_limit_and_one_past() {
        let ok = |w, h| check_image_size(MimeType::Png, &png_header(w, h), 10_000, 50_000_000);
        assert_eq!(ok(10_000, 5_000).ok(), Some((10_000, 5_000)));
        assert!(matches!(ok(10_001, 1), Err(OcrError::Invalid(_))));
        assert!(matches!(ok(1, 10_001), Err(OcrError::Invalid(_))));
        assert!(matches!(ok(10_000, 5_001), Err(OcrError::Invalid(_))));
        assert!(matches!(ok(40_000, 40_000), Err(OcrError::Invalid(_))));
        assert!(matches!(ok(0, 1), Err(OcrError::Invalid(_))));
        // A header cut short gives no size.
        assert!(check_image_size(MimeType::Png, b"\x89PNG\r\n\x1a\n", 10, 10).is_err());
    }

    #[test]
    fn every_accepted_format_header_gives_its_size() {
        let gif = b"GIF89a\x10\x27\x11\x27";
        assert_eq!(image_size(MimeType::Gif, gif), Some((10_000, 10_001)));
        let mut bmp = b"BM".to_vec();
        bmp.resize(14, 0);
        bmp.extend_from_slice(&40u32.to_le_bytes());
        bmp.extend_from_slice(&300i32.to_le_bytes());
        bmp.extend_from_slice(&(-200i32).to_le_bytes());
        assert_eq!(image_size(MimeType::Bmp, &bmp), Some((300, 200)));
        // JPEG: SOI, an APP0 segment to skip, then SOF0 (height 480, width 640).
        let jpeg = [
            0xFF, 0xD8, 0xFF, 0xE0, 0x00, 0x04, 0x00, 0x00, 0xFF, 0xC0, 0x00, 0x11, 0x08, 0x01,
            0xE0, 0x02, 0x80, 0x03,
        ];
        assert_eq!(image_size(MimeType::Jpeg, &jpeg), Some((640, 480)));
        assert_eq!(image_size(MimeType::Jpeg, &jpeg[..14]), None);
        // TIFF little-endian, IFD at 8 with ImageWidth (SHORT) and ImageLength (LONG).
        let mut tiff = b"II*\0\x08\0\0\0\x02\0".to_vec();
        tiff.extend_from_slice(&[0x00, 0x01, 3, 0, 1, 0, 0, 0, 0x20, 0x4E, 0, 0]);
        tiff.extend_from_slice(&[0x01, 0x01, 4, 0, 1, 0, 0, 0, 0x21, 0x4E, 0, 0]);
        assert_eq!(image_size(MimeType::Tiff, &tiff), Some((20_000, 20_001)));
        let mut vp8x = b"RIFF\0\0\0\0WEBPVP8X\0\0\0\0\0\0\0\0".to_vec();
        vp8x.extend_from_slice(&[0x0F, 0x27, 0x00, 0x10, 0x27, 0x00]);
        assert_eq!(image_size(MimeType::Webp, &vp8x), Some((10_000, 10_001)));
        let mut vp8l = b"RIFF\0\0\0\0WEBPVP8L\0\0\0\0\x2f".to_vec();
        vp8l.extend_from_slice(&(99u32 | 49 << 14).to_le_bytes());
        assert_eq!(image_size(MimeType::Webp, &vp8l), Some((100, 50)));
    }

    #[test]
    fn runtime_states_follow_what_was_seen() {
        let mut state = RuntimeState::default();
        assert_eq!(state.state(), ProcessState::Idle);
        state.starting = true;
        assert_eq!(state.state(), ProcessState::Starting);
        state.starting = false;
        state.unavailable = Some(UnavailableReason::ToolchainUnavailable);
        assert_eq!(state.state(), ProcessState::Closed);
        state.engine = Some(Arc::new(EngineInfo {
            core_version: "tesseract 5".into(),
            version: "5".into(),
            bundle_id: "eng@0".into(),
        }));
        assert_eq!(state.state(), ProcessState::Ready);
        state.active = 1;
        assert_eq!(state.state(), ProcessState::Busy);
        state.closing = true;
        assert_eq!(state.state(), ProcessState::Stopping);
    }

    #[test]
    fn a_missing_executable_is_not_found() {
        assert!(find_executable(&"/nonexistent/tesseract".into()).is_none());
        assert!(find_executable(&"sh".into()).is_some());
    }
}
