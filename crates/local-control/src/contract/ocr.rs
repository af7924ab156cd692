//! `ocr.getRuntimeStatus`, `ocr.extractUpload`, `ocr.extractArtifact`, `ocr.clearCache`: offline OCR.
//!
//! Source: DeepChat `src/shared/contracts/routes/ocr.routes.ts` (schemas and limits) and the constants it imports
//! from `src/shared/types/attachment.ts` (`ATTACHMENT_OCR_MAX_TEXT_CHARACTERS` 128 000,
//! `ATTACHMENT_PDF_OCR_MAX_TOKENS` 16 000, `ATTACHMENT_PDF_OCR_MAX_PAGE_SPANS` 100); the spec's "Offline OCR" and
//! "OCR benchmark semantics". Extraction inputs and outputs, the engine and the benchmark are `.strict()`
//! (unknown keys refused); the runtime status and cache objects are plain (unknown keys ignored).
//!
//! One deliberate difference: DeepChat's `strategy` names its own LightOCR pipelines (`bounded-960`,
//! `tiled-v1`); a host running Tesseract reports `tesseract-lstm` ([`Strategy::TesseractLstm`]), which DeepChat
//! itself would not accept.

use serde::{Deserialize, Serialize};

use super::artifacts::check_artifact_id;
use super::serde_util::{nullable, present};
use super::settings::OcrBackend;
use super::{
    ContractError, Method, NoParams, PROTOCOL_VERSION, Problem, SURFACE_VERSION, Validate,
    check_len, check_range,
};

/// Largest OCR input, bytes (`OCR_EXTRACTION_MAX_INPUT_BYTES`, 50 MiB): the upload body limit.
pub const MAX_INPUT_BYTES: u64 = 50 * 1024 * 1024;
/// Longest extracted text, JavaScript characters (`ATTACHMENT_OCR_MAX_TEXT_CHARACTERS`).
pub const MAX_TEXT_CHARACTERS: usize = 128_000;
/// Largest token count and `generationTokenLimit` (`ATTACHMENT_PDF_OCR_MAX_TOKENS`).
pub const MAX_TOKENS: u32 = 16_000;
/// Token bound of an image's text (`ATTACHMENT_OCR_MAX_TOKENS`).
pub const MAX_IMAGE_TOKENS: u32 = 8_000;
/// Most page spans of a document result (`ATTACHMENT_PDF_OCR_MAX_PAGE_SPANS`).
pub const MAX_PAGE_SPANS: usize = 100;
/// Largest page number or page-count hint (`PDF_PAGE_COUNT_SANITY_LIMIT`; its value is not in the sources we
/// read, 100 000 is ours).
pub const PAGE_COUNT_SANITY_LIMIT: u32 = 100_000;
/// Largest image side, pixels.
pub const MAX_IMAGE_SIDE: u32 = 16_384;
/// Largest public timing, milliseconds (24 h).
pub const MAX_TIMING_MS: f64 = 24.0 * 60.0 * 60_000.0;

/// An accepted input type (`OcrInputMimeTypeSchema`), e.g. `"image/png"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[allow(missing_docs)]
pub enum MimeType {
    #[serde(rename = "application/pdf")]
    Pdf,
    #[serde(rename = "image/bmp")]
    Bmp,
    #[serde(rename = "image/gif")]
    Gif,
    #[serde(rename = "image/jpeg")]
    Jpeg,
    #[serde(rename = "image/png")]
    Png,
    #[serde(rename = "image/tiff")]
    Tiff,
    #[serde(rename = "image/webp")]
    Webp,
}

impl MimeType {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            MimeType::Pdf => "application/pdf",
            MimeType::Bmp => "image/bmp",
            MimeType::Gif => "image/gif",
            MimeType::Jpeg => "image/jpeg",
            MimeType::Png => "image/png",
            MimeType::Tiff => "image/tiff",
            MimeType::Webp => "image/webp",
        }
    }

    /// Parses a wire name.
    pub fn parse(name: &str) -> Option<MimeType> {
        [
            MimeType::Pdf,
            MimeType::Bmp,
            MimeType::Gif,
            MimeType::Jpeg,
            MimeType::Png,
            MimeType::Tiff,
            MimeType::Webp,
        ]
        .into_iter()
        .find(|m| m.as_str() == name)
    }

    /// The type of a file name's extension (DeepChat's `OCR_MIME_BY_EXTENSION`), case-insensitive.
    pub fn from_extension(extension: &str) -> Option<MimeType> {
        Some(match extension.to_ascii_lowercase().as_str() {
            "bmp" => MimeType::Bmp,
            "gif" => MimeType::Gif,
            "jpeg" | "jpg" => MimeType::Jpeg,
            "pdf" => MimeType::Pdf,
            "png" => MimeType::Png,
            "tif" | "tiff" => MimeType::Tiff,
            "webp" => MimeType::Webp,
            _ => return None,
        })
    }
}

fn check_options(hint: Option<u32>, token_limit: Option<u32>) -> Result<(), ContractError> {
    if let Some(hint) = hint {
        check_range("sourcePageCountHint", hint, 1, PAGE_COUNT_SANITY_LIMIT)?;
    }
    if let Some(limit) = token_limit {
        check_range("generationTokenLimit", limit, 1, MAX_TOKENS)?;
    }
    Ok(())
}

/// Params of `ocr.extractUpload` (strict): `{"mimeType":"image/png","backend":"auto"}`; the bytes are the
/// upload body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExtractUploadParams {
    /// `auto` (default) or `cpu`; Tesseract runs on the CPU either way.
    #[serde(default = "auto")]
    pub backend: OcrBackend,
    /// The caller's page count for a PDF (1..=[`PAGE_COUNT_SANITY_LIMIT`]).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub source_page_count_hint: Option<u32>,
    /// Token bound of a PDF's text (1..=[`MAX_TOKENS`]; default [`MAX_TOKENS`]).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub generation_token_limit: Option<u32>,
    /// The input type.
    pub mime_type: MimeType,
}

fn auto() -> OcrBackend {
    OcrBackend::Auto
}

impl Validate for ExtractUploadParams {
    fn validate(&self) -> Result<(), ContractError> {
        check_options(self.source_page_count_hint, self.generation_token_limit)
    }
}

/// Params of `ocr.extractArtifact` (strict): `{"artifactId":"…","backend":"auto"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExtractArtifactParams {
    /// As [`ExtractUploadParams::backend`].
    #[serde(default = "auto")]
    pub backend: OcrBackend,
    /// As [`ExtractUploadParams::source_page_count_hint`].
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub source_page_count_hint: Option<u32>,
    /// As [`ExtractUploadParams::generation_token_limit`].
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub generation_token_limit: Option<u32>,
    /// An owned artifact's id; its MIME type must be one of [`MimeType`].
    pub artifact_id: String,
}

impl Validate for ExtractArtifactParams {
    fn validate(&self) -> Result<(), ContractError> {
        check_artifact_id("artifactId", &self.artifact_id)?;
        check_options(self.source_page_count_hint, self.generation_token_limit)
    }
}

/// Why the runtime is unavailable (`OcrRuntimeUnavailableReasonSchema`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UnavailableReason {
    /// The engine's identity changed under us.
    AssetIdentityMismatch,
    /// The language data is missing.
    AssetsMissing,
    /// The runtime's manifest is invalid.
    RuntimeManifestInvalid,
    /// The host is shutting down.
    ServiceClosed,
    /// Not supported on this OS.
    UnsupportedPlatform,
    /// The engine executable is missing or does not run.
    ToolchainUnavailable,
}

impl UnavailableReason {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            UnavailableReason::AssetIdentityMismatch => "asset_identity_mismatch",
            UnavailableReason::AssetsMissing => "assets_missing",
            UnavailableReason::RuntimeManifestInvalid => "runtime_manifest_invalid",
            UnavailableReason::ServiceClosed => "service_closed",
            UnavailableReason::UnsupportedPlatform => "unsupported_platform",
            UnavailableReason::ToolchainUnavailable => "toolchain_unavailable",
        }
    }
}

/// `availability`: `{"status":"available","lightOcrVersion":"5.3.0","bundleId":"eng@…"}` or
/// `{"status":"unavailable","reason":"toolchain_unavailable",…}`. `lightOcrVersion` carries the engine version
/// (DeepChat's field name kept), `bundleId` the language data identity (`""` when unknown).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "lowercase")]
pub enum Availability {
    /// The engine ran in this process.
    #[serde(rename_all = "camelCase")]
    Available {
        /// Engine version.
        light_ocr_version: String,
        /// Language data identity.
        bundle_id: String,
    },
    /// The engine cannot run.
    #[serde(rename_all = "camelCase")]
    Unavailable {
        /// Why.
        reason: UnavailableReason,
        /// Engine version, `""` when unknown.
        light_ocr_version: String,
        /// Language data identity, `""` when unknown.
        bundle_id: String,
    },
}

/// One engine stage (`OcrEngineStageSchema`, strict).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EngineStage {
    /// Components, 0..=16 names of 1..=256 characters.
    pub provider_chain: Vec<String>,
    /// 1..=128 characters.
    pub precision: String,
}

impl Validate for EngineStage {
    fn validate(&self) -> Result<(), ContractError> {
        if self.provider_chain.len() > 16 {
            return Err(ContractError::field(
                "engine.providerChain",
                Problem::TooLong,
            ));
        }
        for name in &self.provider_chain {
            check_len("engine.providerChain", name, 1, 256)?;
        }
        check_len("engine.precision", &self.precision, 1, 128)
    }
}

/// Recognition strategy (`OcrRecognitionStrategySchema`, plus ours).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Strategy {
    /// DeepChat LightOCR's bounded 960-pixel pass.
    #[serde(rename = "bounded-960")]
    Bounded960,
    /// DeepChat LightOCR's tiled pass.
    TiledV1,
    /// Tesseract's LSTM recognizer with automatic page segmentation (ours).
    TesseractLstm,
}

/// Engine identity (`OcrEngineSchema`, strict):
/// `{"coreVersion":"tesseract 5.3.0","modelBundleId":"eng@9a…","requestedBackend":"auto","strategy":"tesseract-lstm",
/// "detection":{…},"recognition":{…}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Engine {
    /// 1..=128 characters.
    pub core_version: String,
    /// 1..=256 characters.
    pub model_bundle_id: String,
    /// The backend asked for.
    pub requested_backend: OcrBackend,
    /// How text was recognized.
    pub strategy: Strategy,
    /// Layout analysis.
    pub detection: EngineStage,
    /// Recognition.
    pub recognition: EngineStage,
}

impl Validate for Engine {
    fn validate(&self) -> Result<(), ContractError> {
        check_len("engine.coreVersion", &self.core_version, 1, 128)?;
        check_len("engine.modelBundleId", &self.model_bundle_id, 1, 256)?;
        self.detection.validate()?;
        self.recognition.validate()
    }
}

/// Runtime state (`OcrProcessSchema.state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProcessState {
    /// Nothing verified in this process yet.
    Idle,
    /// The engine is being verified.
    Starting,
    /// Verified, no extraction running.
    Ready,
    /// Verified, extraction running.
    Busy,
    /// Shutting down.
    Stopping,
    /// Shut down, or the engine is unavailable.
    Closed,
}

/// `process`: the runtime (`OcrProcessSchema`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Process {
    /// State.
    pub state: ProcessState,
    /// DeepChat's helper runs on Node; ours has no Node: always `null`.
    #[serde(deserialize_with = "nullable")]
    pub node_version: Option<String>,
    /// Extractions waiting for the engine.
    pub queued_requests: u64,
    /// Input bytes of running and waiting extractions.
    pub pending_input_bytes: u64,
    /// The engine, once verified.
    #[serde(deserialize_with = "nullable")]
    pub engine: Option<Engine>,
}

/// Cache mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CacheMode {
    /// In memory only.
    Memory,
    /// On disk.
    Persistent,
}

/// Why a persistent cache is not available.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PersistenceUnavailableReason {
    /// The store failed.
    DatabaseError,
    /// No safe storage.
    SafeStorageUnavailable,
}

/// `cache` (`OcrCacheSchema`): `{"mode":"persistent","entryCount":2,"logicalBytes":812,"maxBytes":67108864}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CacheStatus {
    /// Mode.
    pub mode: CacheMode,
    /// Present when a persistent cache fell back to memory.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub persistence_unavailable_reason: Option<PersistenceUnavailableReason>,
    /// Entries.
    pub entry_count: u64,
    /// Bytes of the entries.
    pub logical_bytes: u64,
    /// Bound of `logicalBytes` (positive).
    pub max_bytes: u64,
}

impl Validate for CacheStatus {
    fn validate(&self) -> Result<(), ContractError> {
        if self.max_bytes == 0 {
            return Err(ContractError::field("cache.maxBytes", Problem::OutOfRange));
        }
        Ok(())
    }
}

/// Result of `ocr.getRuntimeStatus` (`OcrRuntimeStatusSchema`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeStatus {
    /// `std::env::consts::OS`, e.g. `linux`.
    pub platform: String,
    /// `std::env::consts::ARCH`, e.g. `x86_64`.
    pub arch: String,
    /// Whether the engine can run.
    pub availability: Availability,
    /// The runtime.
    #[serde(deserialize_with = "nullable")]
    pub process: Option<Process>,
    /// The derived-text cache.
    #[serde(deserialize_with = "nullable")]
    pub cache: Option<CacheStatus>,
    /// Whether PDFs can be read (our addition: DeepChat's helper reads PDFs itself, this host rasterizes them with
    /// poppler). Absent from a peer that does not send it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pdf: Option<PdfSupport>,
}

/// `pdf` of [`RuntimeStatus`]: `{"available":true,"missing":[]}`, or `{"available":false,"missing":["pdftoppm"]}`
/// when poppler's helpers are not found (images stay available: they need only the engine). `available` is also
/// `false` when the engine itself is unavailable (then `missing` may be empty and `availability.reason` says why).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PdfSupport {
    /// Whether `application/pdf` inputs can be extracted.
    pub available: bool,
    /// The helpers not found, by their default names (`pdfinfo`, `pdftoppm`); at most 2.
    pub missing: Vec<String>,
}

impl Validate for RuntimeStatus {
    fn validate(&self) -> Result<(), ContractError> {
        if let Some(engine) = self.process.as_ref().and_then(|p| p.engine.as_ref()) {
            engine.validate()?;
        }
        if let Some(cache) = &self.cache {
            cache.validate()?;
        }
        if let Some(pdf) = &self.pdf
            && (pdf.missing.len() > 2 || (pdf.available && !pdf.missing.is_empty()))
        {
            return Err(ContractError::field("pdf.missing", Problem::OutOfRange));
        }
        Ok(())
    }
}

/// Result of `ocr.clearCache`: `{"cache":{…}}` after clearing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClearCacheResult {
    /// The cache after clearing.
    pub cache: CacheStatus,
}

impl Validate for ClearCacheResult {
    fn validate(&self) -> Result<(), ContractError> {
        self.cache.validate()
    }
}

/// Benchmark classification (`OcrBenchmarkSchema.state`). The spec names them `cache-hit`,
/// `cache-miss-warm-runtime` and `cold-runtime`; [`BenchmarkState::spec_name`] gives those.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BenchmarkState {
    /// Served from the derived-text cache.
    Hit,
    /// A miss with the engine already verified (`ready` or `busy` before).
    MissWarm,
    /// A miss that had to verify the engine first.
    ColdRuntime,
}

impl BenchmarkState {
    /// The spec's name: `cache-hit`, `cache-miss-warm-runtime` or `cold-runtime`.
    pub fn spec_name(self) -> &'static str {
        match self {
            BenchmarkState::Hit => "cache-hit",
            BenchmarkState::MissWarm => "cache-miss-warm-runtime",
            BenchmarkState::ColdRuntime => "cold-runtime",
        }
    }
}

/// The runtime state before an extraction (`runtimeStateBefore`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StateBefore {
    /// No runtime object yet.
    NotStarted,
    /// See [`ProcessState::Idle`].
    Idle,
    /// See [`ProcessState::Starting`].
    Starting,
    /// See [`ProcessState::Ready`].
    Ready,
    /// See [`ProcessState::Busy`].
    Busy,
    /// See [`ProcessState::Stopping`].
    Stopping,
    /// See [`ProcessState::Closed`].
    Closed,
}

impl From<ProcessState> for StateBefore {
    fn from(state: ProcessState) -> StateBefore {
        match state {
            ProcessState::Idle => StateBefore::Idle,
            ProcessState::Starting => StateBefore::Starting,
            ProcessState::Ready => StateBefore::Ready,
            ProcessState::Busy => StateBefore::Busy,
            ProcessState::Stopping => StateBefore::Stopping,
            ProcessState::Closed => StateBefore::Closed,
        }
    }
}

/// `benchmark` (`OcrBenchmarkSchema`, strict):
/// `{"state":"miss-warm","runtimeStateBefore":"ready","runtimeWasReady":true,"inputBytes":5638,"durationMs":231.4,
/// "appVersion":"0.1.0","protocolVersion":1,"surfaceVersion":2}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Benchmark {
    /// Classification.
    pub state: BenchmarkState,
    /// The real runtime state when the request reached the runtime.
    pub runtime_state_before: StateBefore,
    /// `runtimeStateBefore == ready`.
    pub runtime_was_ready: bool,
    /// Input bytes (1..=[`MAX_INPUT_BYTES`]).
    pub input_bytes: u64,
    /// Extraction time, milliseconds.
    pub duration_ms: f64,
    /// 1..=128 characters.
    pub app_version: String,
    /// Always 1.
    pub protocol_version: u32,
    /// Always 2.
    pub surface_version: u32,
}

impl Validate for Benchmark {
    fn validate(&self) -> Result<(), ContractError> {
        check_range("benchmark.inputBytes", self.input_bytes, 1, MAX_INPUT_BYTES)?;
        check_timing("benchmark.durationMs", self.duration_ms)?;
        check_len("benchmark.appVersion", &self.app_version, 1, 128)?;
        if self.protocol_version != PROTOCOL_VERSION || self.surface_version != SURFACE_VERSION {
            return Err(ContractError::field(
                "benchmark.protocolVersion",
                Problem::OutOfRange,
            ));
        }
        if self.runtime_was_ready != (self.runtime_state_before == StateBefore::Ready) {
            return Err(ContractError::field(
                "benchmark.runtimeWasReady",
                Problem::Inconsistent,
            ));
        }
        let warm = matches!(
            self.runtime_state_before,
            StateBefore::Ready | StateBefore::Busy
        );
        if (self.state == BenchmarkState::MissWarm && !warm)
            || (self.state == BenchmarkState::ColdRuntime && warm)
        {
            return Err(ContractError::field(
                "benchmark.state",
                Problem::Inconsistent,
            ));
        }
        Ok(())
    }
}

fn check_timing(field: &'static str, value: f64) -> Result<(), ContractError> {
    if value.is_finite() && (0.0..=MAX_TIMING_MS).contains(&value) {
        Ok(())
    } else {
        Err(ContractError::field(field, Problem::OutOfRange))
    }
}

/// Timings of an image extraction, milliseconds (strict).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImageTiming {
    /// Reading the input.
    pub snapshot: f64,
    /// Engine verification (0 when warm).
    pub preprocessing: f64,
    /// Recognition.
    pub recognition: f64,
    /// Everything.
    pub total: f64,
}

/// Timings of a document extraction, milliseconds (strict).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DocumentTiming {
    /// Reading the input and rasterizing the pages.
    pub snapshot: f64,
    /// Recognition.
    pub recognition: f64,
    /// Everything.
    pub total: f64,
}

/// Where one page's text lies in `text` (strict): `{"pageNumber":1,"start":0,"end":18,"complete":true}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PageSpan {
    /// 1-based page number.
    pub page_number: u32,
    /// Start offset in `text` (JavaScript characters).
    pub start: u64,
    /// End offset (exclusive).
    pub end: u64,
    /// Whether the page's whole text is in `text` (not cut by a bound).
    pub complete: bool,
}

/// Why a document extraction stopped (`artifactTermination`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Termination {
    /// Every page was read.
    RequestComplete,
    /// The token or character bound was reached.
    StoppedByOutputLimit,
    /// The page bound was reached.
    ResourceLimited,
}

/// `resourceLimit` (strict): `{"code":"resource_limit_exceeded","message":"…"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResourceLimit {
    /// Always `resource_limit_exceeded`.
    pub code: String,
    /// At most 2048 characters.
    pub message: String,
}

/// An image result (strict).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ImageExtraction {
    /// Normalized text (at most [`MAX_TEXT_CHARACTERS`]).
    pub text: String,
    /// Approximate tokens of `text`.
    pub token_count: u32,
    /// Whether `text` was cut by a bound.
    pub truncated: bool,
    /// Engine identity.
    pub engine: Engine,
    /// Served from the cache.
    pub cache_hit: bool,
    /// Benchmark facts.
    pub benchmark: Benchmark,
    /// Any image type.
    pub mime_type: MimeType,
    /// Pixels.
    pub image_width: u32,
    /// Pixels.
    pub image_height: u32,
    /// Strategy (same as `engine.strategy`).
    pub strategy: Strategy,
    /// Timings.
    pub timing_ms: ImageTiming,
}

/// A PDF result (strict).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DocumentExtraction {
    /// Normalized text of the pages, separated by a blank line.
    pub text: String,
    /// Approximate tokens of `text`.
    pub token_count: u32,
    /// Whether `text` was cut by a bound.
    pub truncated: bool,
    /// Engine identity.
    pub engine: Engine,
    /// Served from the cache.
    pub cache_hit: bool,
    /// Benchmark facts.
    pub benchmark: Benchmark,
    /// Always `application/pdf`.
    pub mime_type: MimeType,
    /// Where each page's text lies.
    pub page_spans: Vec<PageSpan>,
    /// Why extraction stopped.
    pub artifact_termination: Termination,
    /// The token bound was reached.
    pub generation_output_limit_reached: bool,
    /// The token bound used.
    pub generation_token_limit: u32,
    /// Pages with text in `text`.
    pub emitted_pages: u32,
    /// Echo of the request's hint.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub source_page_count_hint: Option<u32>,
    /// Present when the page bound stopped extraction.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub resource_limit: Option<ResourceLimit>,
    /// Timings.
    pub timing_ms: DocumentTiming,
}

/// Result of `ocr.extractUpload` and `ocr.extractArtifact` (`OcrExtractionOutputSchema`), tagged by `kind`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Extraction {
    /// An image.
    Image(ImageExtraction),
    /// A PDF.
    Document(DocumentExtraction),
}

impl Extraction {
    /// The text.
    pub fn text(&self) -> &str {
        match self {
            Extraction::Image(e) => &e.text,
            Extraction::Document(e) => &e.text,
        }
    }

    /// The benchmark facts.
    pub fn benchmark(&self) -> &Benchmark {
        match self {
            Extraction::Image(e) => &e.benchmark,
            Extraction::Document(e) => &e.benchmark,
        }
    }
}

fn check_common(
    text: &str,
    tokens: u32,
    engine: &Engine,
    cache_hit: bool,
    benchmark: &Benchmark,
) -> Result<(), ContractError> {
    check_len("text", text, 0, MAX_TEXT_CHARACTERS)?;
    check_range("tokenCount", tokens, 0, MAX_TOKENS)?;
    engine.validate()?;
    benchmark.validate()?;
    if cache_hit != (benchmark.state == BenchmarkState::Hit) {
        return Err(ContractError::field(
            "benchmark.state",
            Problem::Inconsistent,
        ));
    }
    Ok(())
}

impl Validate for Extraction {
    fn validate(&self) -> Result<(), ContractError> {
        match self {
            Extraction::Image(e) => {
                check_common(&e.text, e.token_count, &e.engine, e.cache_hit, &e.benchmark)?;
                if e.mime_type == MimeType::Pdf {
                    return Err(ContractError::field("mimeType", Problem::BadFormat));
                }
                check_range("imageWidth", e.image_width, 1, MAX_IMAGE_SIDE)?;
                check_range("imageHeight", e.image_height, 1, MAX_IMAGE_SIDE)?;
                for t in [
                    e.timing_ms.snapshot,
                    e.timing_ms.preprocessing,
                    e.timing_ms.recognition,
                    e.timing_ms.total,
                ] {
                    check_timing("timingMs", t)?;
                }
                Ok(())
            }
            Extraction::Document(e) => {
                check_common(&e.text, e.token_count, &e.engine, e.cache_hit, &e.benchmark)?;
                if e.mime_type != MimeType::Pdf {
                    return Err(ContractError::field("mimeType", Problem::BadFormat));
                }
                if e.page_spans.len() > MAX_PAGE_SPANS {
                    return Err(ContractError::field("pageSpans", Problem::TooLong));
                }
                let text_len = super::js_len(&e.text) as u64;
                for span in &e.page_spans {
                    check_range(
                        "pageSpans.pageNumber",
                        span.page_number,
                        1,
                        PAGE_COUNT_SANITY_LIMIT,
                    )?;
                    if span.start > span.end || span.end > text_len {
                        return Err(ContractError::field("pageSpans", Problem::Inconsistent));
                    }
                }
                check_range(
                    "generationTokenLimit",
                    e.generation_token_limit,
                    1,
                    MAX_TOKENS,
                )?;
                check_range("emittedPages", e.emitted_pages as usize, 0, MAX_PAGE_SPANS)?;
                if let Some(limit) = &e.resource_limit {
                    if limit.code != "resource_limit_exceeded" {
                        return Err(ContractError::field(
                            "resourceLimit.code",
                            Problem::BadFormat,
                        ));
                    }
                    check_len("resourceLimit.message", &limit.message, 0, 2048)?;
                }
                for t in [
                    e.timing_ms.snapshot,
                    e.timing_ms.recognition,
                    e.timing_ms.total,
                ] {
                    check_timing("timingMs", t)?;
                }
                Ok(())
            }
        }
    }
}

/// `ocr.getRuntimeStatus`: `{}` → [`RuntimeStatus`].
#[derive(Debug, Clone, Copy)]
pub struct GetRuntimeStatus;
impl Method for GetRuntimeStatus {
    const NAME: &'static str = "ocr.getRuntimeStatus";
    type Params = NoParams;
    type Result = RuntimeStatus;
}

/// `ocr.clearCache`: `{}` → [`ClearCacheResult`].
#[derive(Debug, Clone, Copy)]
pub struct ClearCache;
impl Method for ClearCache {
    const NAME: &'static str = "ocr.clearCache";
    type Params = NoParams;
    type Result = ClearCacheResult;
}

/// `ocr.extractUpload` (upload): [`ExtractUploadParams`] → [`Extraction`].
#[derive(Debug, Clone, Copy)]
pub struct ExtractUpload;
impl Method for ExtractUpload {
    const NAME: &'static str = "ocr.extractUpload";
    type Params = ExtractUploadParams;
    type Result = Extraction;
}

/// `ocr.extractArtifact`: [`ExtractArtifactParams`] → [`Extraction`].
#[derive(Debug, Clone, Copy)]
pub struct ExtractArtifact;
impl Method for ExtractArtifact {
    const NAME: &'static str = "ocr.extractArtifact";
    type Params = ExtractArtifactParams;
    type Result = Extraction;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::{decode_params, decode_result};
    use serde_json::json;

    fn engine() -> serde_json::Value {
        json!({"coreVersion":"tesseract 5.3.0","modelBundleId":"eng@abc","requestedBackend":"auto",
            "strategy":"tesseract-lstm","detection":{"providerChain":["tesseract"],"precision":"n/a"},
            "recognition":{"providerChain":["tesseract-lstm"],"precision":"int"}})
    }

    fn image(state: &str, before: &str, ready: bool, hit: bool) -> serde_json::Value {
        json!({"kind":"image","text":"HELLO","tokenCount":2,"truncated":false,"engine":engine(),"cacheHit":hit,
            "benchmark":{"state":state,"runtimeStateBefore":before,"runtimeWasReady":ready,"inputBytes":10,
                "durationMs":1.5,"appVersion":"1.0.0","protocolVersion":1,"surfaceVersion":2},
            "mimeType":"image/png","imageWidth":10,"imageHeight":10,"strategy":"tesseract-lstm",
            "timingMs":{"snapshot":0,"preprocessing":0,"recognition":1,"total":1.5}})
    }

    #[test]
    fn params_are_strict_and_bounded() {
        let ok = decode_params::<ExtractUpload>(json!({"mimeType":"image/png"})).unwrap();
        assert_eq!(ok.backend, OcrBackend::Auto);
        assert!(decode_params::<ExtractUpload>(json!({"mimeType":"image/png","x":1})).is_err());
        assert!(decode_params::<ExtractUpload>(json!({"mimeType":"text/plain"})).is_err());
        let at = json!({"mimeType":"application/pdf","generationTokenLimit":16000});
        assert!(decode_params::<ExtractUpload>(at).is_ok());
        let past = json!({"mimeType":"application/pdf","generationTokenLimit":16001});
        assert!(decode_params::<ExtractUpload>(past).is_err());
        assert!(decode_params::<ExtractArtifact>(json!({"artifactId":"short"})).is_err());
        let id = "a".repeat(32);
        assert!(decode_params::<ExtractArtifact>(json!({ "artifactId": id })).is_ok());
    }

    #[test]
    fn benchmark_classification_must_match_the_state_before() {
        assert!(decode_result::<ExtractUpload>(image("miss-warm", "ready", true, false)).is_ok());
        assert!(decode_result::<ExtractUpload>(image("miss-warm", "busy", false, false)).is_ok());
        assert!(
            decode_result::<ExtractUpload>(image("cold-runtime", "idle", false, false)).is_ok()
        );
        assert!(decode_result::<ExtractUpload>(image("hit", "idle", false, true)).is_ok());
        // Inconsistent: warm miss from idle, cold from ready, readiness flag, cacheHit vs state.
        assert!(decode_result::<ExtractUpload>(image("miss-warm", "idle", false, false)).is_err());
        assert!(
            decode_result::<ExtractUpload>(image("cold-runtime", "ready", true, false)).is_err()
        );
        assert!(decode_result::<ExtractUpload>(image("miss-warm", "ready", false, false)).is_err());
        assert!(decode_result::<ExtractUpload>(image("hit", "ready", true, false)).is_err());
    }

    #[test]
    fn spec_names_of_the_classifications() {
        assert_eq!(BenchmarkState::Hit.spec_name(), "cache-hit");
        assert_eq!(
            BenchmarkState::MissWarm.spec_name(),
            "cache-miss-warm-runtime"
        );
        assert_eq!(BenchmarkState::ColdRuntime.spec_name(), "cold-runtime");
    }

    #[test]
    fn status_shape_round_trips() {
        let status = json!({"platform":"linux","arch":"x86_64",
            "availability":{"status":"unavailable","reason":"toolchain_unavailable","lightOcrVersion":"","bundleId":""},
            "process":{"state":"closed","nodeVersion":null,"queuedRequests":0,"pendingInputBytes":0,"engine":null},
            "cache":{"mode":"persistent","entryCount":0,"logicalBytes":0,"maxBytes":1}});
        let decoded = decode_result::<GetRuntimeStatus>(status.clone()).unwrap();
        assert_eq!(serde_json::to_value(decoded).unwrap(), status);
    }
}
