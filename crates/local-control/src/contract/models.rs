//! `models.listPublic`, `models.getCapabilities` and `models.invoke` (raw model invocation, streamed).
//!
//! Source: DeepChat `src/shared/contracts/routes/models.routes.ts` (`modelsInvokeRoute`: input, output,
//! `ModelInvokeEventSchema`, `ModelInvokeUsageSchema`, `ModelInvokeLatencySchema`,
//! `MODEL_INVOKE_MAX_TOTAL_INPUT_CHARACTERS`, `MODEL_INVOKE_MAX_OUTPUT_CHARACTERS`) and
//! `src/main/cli/computeService.ts` (`invokeModel`: event order, latency fields, the `unavailable` error with
//! `details.providerFailure`). `models.listPublic` and `models.getCapabilities` have no public DeepChat
//! contract in the version we read (DeepChat lists models inside `providers.listPublic` and takes a capability
//! snapshot query); ours are small, strict, read-only shapes documented here.

use serde::{Deserialize, Serialize};

use super::artifacts::{ArtifactMetadata, check_artifact_id};
use super::serde_util::{nullable, present};
use super::{
    ContractError, Method, PROTOCOL_VERSION, Problem, SURFACE_VERSION, Validate, check_len,
    check_range, js_len,
};

/// Most characters of all messages together (`MODEL_INVOKE_MAX_TOTAL_INPUT_CHARACTERS`, 4 Mi).
pub const MODEL_INVOKE_MAX_TOTAL_INPUT_CHARACTERS: usize = 4 * 1024 * 1024;
/// Most characters of text plus reasoning in the result (`MODEL_INVOKE_MAX_OUTPUT_CHARACTERS`, 3 Mi).
pub const MODEL_INVOKE_MAX_OUTPUT_CHARACTERS: usize = 3 * 1024 * 1024;
/// Most characters of one message (1 Mi).
pub const MODEL_INVOKE_MAX_MESSAGE_CHARACTERS: usize = 1024 * 1024;
/// Most characters of one streamed delta (1 Mi); longer deltas are split.
pub const MODEL_INVOKE_MAX_DELTA_CHARACTERS: usize = 1024 * 1024;
/// Most messages per call.
pub const MODEL_INVOKE_MAX_MESSAGES: usize = 128;
/// Most models `models.listPublic` returns (DeepChat's `MAX_PUBLIC_MODELS`).
pub const MAX_PUBLIC_MODELS: usize = 10_000;

fn check_provider_id(field: &'static str, id: &str) -> Result<(), ContractError> {
    check_len(field, id, 1, 128)
}

fn check_model_id(field: &'static str, id: &str) -> Result<(), ContractError> {
    check_len(field, id, 1, 256)
}

/// The id of the built-in provider, the default when a compute call names none.
pub const BUILTIN_PROVIDER_ID: &str = "builtin";

/// Checks the optional ids of a compute call: lengths, and no default model for a provider other than
/// [`BUILTIN_PROVIDER_ID`] (`modelId` `inconsistent`).
pub(crate) fn check_requested_ids(
    provider_id: Option<&str>,
    model_id: Option<&str>,
) -> Result<(), ContractError> {
    if let Some(id) = provider_id {
        check_provider_id("providerId", id)?;
    }
    match model_id {
        Some(id) => check_model_id("modelId", id),
        None if provider_id.is_some_and(|p| p != BUILTIN_PROVIDER_ID) => {
            Err(ContractError::field("modelId", Problem::Inconsistent))
        }
        None => Ok(()),
    }
}

/// What a model is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ModelKind {
    /// Chat completions (`models.invoke`).
    Chat,
    /// `images.generate`.
    ImageGeneration,
    /// `speech.generate`.
    Speech,
    /// `audio.transcribe*`.
    Transcription,
    /// `videos.generate`.
    VideoGeneration,
    /// Embeddings (listed, not invocable here).
    Embedding,
    /// Reranking (listed, not invocable here).
    Rerank,
}

/// Params of `models.listPublic` (strict): `{"providerId":"builtin","enabledOnly":true}`; both optional.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ListPublicParams {
    /// Only this provider's models.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub provider_id: Option<String>,
    /// Only enabled models of enabled providers.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub enabled_only: Option<bool>,
}

impl Validate for ListPublicParams {
    fn validate(&self) -> Result<(), ContractError> {
        if let Some(id) = &self.provider_id {
            check_provider_id("providerId", id)?;
        }
        Ok(())
    }
}

/// One model: `{"providerId":"builtin","id":"builtin-demo","name":"builtin-demo","kind":"chat","enabled":true,
/// "providerEnabled":true,"builtin":true}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PublicModel {
    /// Provider id, 1..=128.
    pub provider_id: String,
    /// Model id, 1..=256.
    pub id: String,
    /// Display name, 1..=256.
    pub name: String,
    /// What it is for.
    pub kind: ModelKind,
    /// The model is enabled.
    pub enabled: bool,
    /// Its provider is enabled.
    pub provider_enabled: bool,
    /// It belongs to the built-in deterministic provider.
    pub builtin: bool,
}

impl Validate for PublicModel {
    fn validate(&self) -> Result<(), ContractError> {
        check_provider_id("models[].providerId", &self.provider_id)?;
        check_model_id("models[].id", &self.id)?;
        check_len("models[].name", &self.name, 1, 256)
    }
}

/// Result of `models.listPublic`: `{"models":[…]}`, at most [`MAX_PUBLIC_MODELS`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ListPublicResult {
    /// The models, by provider then model id.
    pub models: Vec<PublicModel>,
}

impl Validate for ListPublicResult {
    fn validate(&self) -> Result<(), ContractError> {
        if self.models.len() > MAX_PUBLIC_MODELS {
            return Err(ContractError::field("models", Problem::TooLong));
        }
        self.models.iter().try_for_each(Validate::validate)
    }
}

/// `models.listPublic`.
#[derive(Debug, Clone, Copy)]
pub struct ListPublic;

impl Method for ListPublic {
    const NAME: &'static str = "models.listPublic";
    type Params = ListPublicParams;
    type Result = ListPublicResult;
}

/// Params of `models.getCapabilities` (strict): `{"providerId":"builtin","modelId":"builtin-demo"}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ModelRef {
    /// Provider id, 1..=128.
    pub provider_id: String,
    /// Model id, 1..=256.
    pub model_id: String,
}

impl Validate for ModelRef {
    fn validate(&self) -> Result<(), ContractError> {
        check_provider_id("providerId", &self.provider_id)?;
        check_model_id("modelId", &self.model_id)
    }
}

/// What a model can do (a subset of DeepChat's `ModelCapabilitiesSchema` flags, plus the media methods).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Capabilities {
    /// What it is for.
    pub kind: Option<ModelKind>,
    /// `models.invoke` streams from it.
    pub streaming: bool,
    /// It may send reasoning deltas.
    pub reasoning: bool,
    /// It accepts images in messages.
    pub vision: bool,
    /// It may call tools (never through `models.invoke`).
    pub function_call: bool,
    /// The methods that accept it, e.g. `["models.invoke"]`.
    pub methods: Vec<String>,
}

/// Result of `models.getCapabilities`: `{"providerId":…,"modelId":…,"capabilities":{…}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CapabilitiesResult {
    /// Provider id.
    pub provider_id: String,
    /// Model id.
    pub model_id: String,
    /// Its capabilities.
    pub capabilities: Capabilities,
}

impl Validate for CapabilitiesResult {
    fn validate(&self) -> Result<(), ContractError> {
        check_provider_id("providerId", &self.provider_id)?;
        check_model_id("modelId", &self.model_id)?;
        if self.capabilities.methods.len() > 16 {
            return Err(ContractError::field(
                "capabilities.methods",
                Problem::TooLong,
            ));
        }
        Ok(())
    }
}

/// `models.getCapabilities`.
#[derive(Debug, Clone, Copy)]
pub struct GetCapabilities;

impl Method for GetCapabilities {
    const NAME: &'static str = "models.getCapabilities";
    type Params = ModelRef;
    type Result = CapabilitiesResult;
}

/// Role of an invoke message (`system`, `user`, `assistant`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum InvokeRole {
    /// Instructions.
    System,
    /// The human.
    User,
    /// An earlier model answer.
    Assistant,
}

/// One message (strict): `{"role":"user","content":"hi"}`; content 1..=1 Mi characters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InvokeMessage {
    /// Who wrote it.
    pub role: InvokeRole,
    /// The text.
    pub content: String,
}

/// Params of `models.invoke` (strict):
/// `{"providerId":"builtin","modelId":"builtin-demo","messages":[{"role":"user","content":"hi"}],
/// "temperature":0.2,"maxTokens":64}`.
///
/// Where we differ from DeepChat (which requires both ids): `providerId` may be absent (the host uses
/// `builtin`), and `modelId` may be absent with the built-in provider (the host uses the built-in model of the
/// method's kind); the result's [`ComputeBenchmark::requested`] then says `null`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InvokeParams {
    /// Provider id, 1..=128; absent = `builtin`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub provider_id: Option<String>,
    /// Model id, 1..=256; absent = the built-in default (only with the built-in provider).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub model_id: Option<String>,
    /// 1..=128 messages, at most 4 Mi characters together.
    pub messages: Vec<InvokeMessage>,
    /// 0..=2.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub temperature: Option<f64>,
    /// 1..=1 000 000.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub max_tokens: Option<u32>,
}

impl Validate for InvokeParams {
    fn validate(&self) -> Result<(), ContractError> {
        check_requested_ids(self.provider_id.as_deref(), self.model_id.as_deref())?;
        if self.messages.is_empty() {
            return Err(ContractError::field("messages", Problem::TooShort));
        }
        if self.messages.len() > MODEL_INVOKE_MAX_MESSAGES {
            return Err(ContractError::field("messages", Problem::TooLong));
        }
        let mut total = 0;
        for message in &self.messages {
            check_len(
                "messages[].content",
                &message.content,
                1,
                MODEL_INVOKE_MAX_MESSAGE_CHARACTERS,
            )?;
            total += js_len(&message.content);
        }
        if total > MODEL_INVOKE_MAX_TOTAL_INPUT_CHARACTERS {
            return Err(ContractError::field("messages", Problem::TooLong));
        }
        if let Some(t) = self.temperature {
            if !t.is_finite() {
                return Err(ContractError::field("temperature", Problem::OutOfRange));
            }
            check_range("temperature", t, 0.0, 2.0)?;
        }
        if let Some(m) = self.max_tokens {
            check_range("maxTokens", m, 1, 1_000_000)?;
        }
        Ok(())
    }
}

/// `ModelInvokeUsageSchema` (strict).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InvokeUsage {
    /// Prompt tokens.
    pub prompt_tokens: u64,
    /// Completion tokens.
    pub completion_tokens: u64,
    /// Their sum.
    pub total_tokens: u64,
}

/// Why the model stopped (DeepChat's `ProviderRoundStopReason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// The model finished to call a tool; `models.invoke` offers none, so this only ends an answer whose provider
    /// said `tool_calls` without calling anything.
    ToolUse,
    /// The token limit cut the answer.
    MaxTokens,
    /// Too many provider rounds.
    MaxTurnRequests,
    /// The provider failed.
    Error,
    /// The answer is complete.
    Complete,
}

/// `ModelInvokeLatencySchema` (strict), milliseconds since the handler started (after compute admission;
/// `queueMs` is the admission wait before it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InvokeLatency {
    /// Time waiting for compute admission.
    pub queue_ms: u64,
    /// Until the first provider event (`null` when none came).
    pub first_event_ms: Option<u64>,
    /// Until the first non-empty text delta (`null` when none came).
    pub first_text_ms: Option<u64>,
    /// Until the result.
    pub total_ms: u64,
}

/// One stream record's `data` (`ModelInvokeEventSchema`), event name `models.invoke`:
/// `{"type":"text_delta","text":"Hel"}`, `{"type":"reasoning_delta","text":"…"}`,
/// `{"type":"usage","usage":{…}}`, `{"type":"stop","reason":"complete"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum InvokeEvent {
    /// Answer text.
    TextDelta {
        /// ≤ 1 Mi characters.
        text: String,
    },
    /// Reasoning text.
    ReasoningDelta {
        /// ≤ 1 Mi characters.
        text: String,
    },
    /// Token usage.
    Usage {
        /// The usage.
        usage: InvokeUsage,
    },
    /// The model stopped.
    Stop {
        /// Why.
        reason: FinishReason,
    },
}

impl Validate for InvokeEvent {
    fn validate(&self) -> Result<(), ContractError> {
        match self {
            InvokeEvent::TextDelta { text } | InvokeEvent::ReasoningDelta { text } => {
                check_len("text", text, 0, MODEL_INVOKE_MAX_DELTA_CHARACTERS)
            }
            InvokeEvent::Usage { .. } | InvokeEvent::Stop { .. } => Ok(()),
        }
    }
}

/// The six compute methods whose results carry a [`ComputeBenchmark`].
pub const COMPUTE_METHODS: &[&str] = &[
    "models.invoke",
    "images.generate",
    "speech.generate",
    "videos.generate",
    "audio.transcribeUpload",
    "audio.transcribeArtifact",
];

/// What the caller asked for (strict): `{"providerId":null,"modelId":null}`; `null` where the caller named
/// nothing and the host used its default.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RequestedModel {
    /// The `providerId` param, or `null` when absent.
    #[serde(deserialize_with = "nullable")]
    pub provider_id: Option<String>,
    /// The `modelId` param, or `null` when absent.
    #[serde(deserialize_with = "nullable")]
    pub model_id: Option<String>,
}

/// Generation settings with the text taken out (strict); every field is always present, `null` (or `false`,
/// `0`) when the method has no such setting or the caller gave none:
/// `{"temperature":0.3,"maxTokens":64,"systemPrompt":true,"systemPromptChars":8,"messageCount":2,"size":null,
/// "seconds":null,"voice":null,"responseFormat":null,"speed":null}`.
///
/// Prompts, messages and the system prompt's text are never here: only whether a system prompt was given and
/// its length.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GenerationSettings {
    /// `models.invoke`'s `temperature` (0..=2) as given; `null` when absent (the provider's default).
    #[serde(deserialize_with = "nullable")]
    pub temperature: Option<f64>,
    /// `models.invoke`'s `maxTokens` as given; `null` when absent.
    #[serde(deserialize_with = "nullable")]
    pub max_tokens: Option<u32>,
    /// Whether any `system` message was given.
    pub system_prompt: bool,
    /// JavaScript characters (UTF-16 units) of all `system` messages together; 0 when none.
    pub system_prompt_chars: u64,
    /// Messages of `models.invoke`; 0 for the other methods.
    pub message_count: u32,
    /// Image or video `options.size` as given.
    #[serde(deserialize_with = "nullable")]
    pub size: Option<String>,
    /// Video `options.seconds` as given.
    #[serde(deserialize_with = "nullable")]
    pub seconds: Option<String>,
    /// Speech `options.voice` as given.
    #[serde(deserialize_with = "nullable")]
    pub voice: Option<String>,
    /// Speech `options.responseFormat` as given.
    #[serde(deserialize_with = "nullable")]
    pub response_format: Option<String>,
    /// Speech `options.speed` as given.
    #[serde(deserialize_with = "nullable")]
    pub speed: Option<f64>,
}

/// One artifact of a benchmark record (strict), never a local path:
/// `{"id":"AbCdEfGhIjKlMnOpQrStUvWx","mimeType":"image/png","size":1234,"sha256":"<64 hex>"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BenchmarkArtifact {
    /// Artifact id (bytes through `GET /v1/artifacts/:id`).
    pub id: String,
    /// MIME type.
    pub mime_type: String,
    /// Bytes.
    pub size: u64,
    /// Lowercase hex SHA-256 of the bytes.
    pub sha256: String,
}

impl From<&ArtifactMetadata> for BenchmarkArtifact {
    fn from(meta: &ArtifactMetadata) -> BenchmarkArtifact {
        BenchmarkArtifact {
            id: meta.id.clone(),
            mime_type: meta.mime_type.clone(),
            size: meta.size,
            sha256: meta.sha256.clone(),
        }
    }
}

impl Validate for BenchmarkArtifact {
    fn validate(&self) -> Result<(), ContractError> {
        check_artifact_id("benchmark.artifacts[].id", &self.id)?;
        check_len("benchmark.artifacts[].mimeType", &self.mime_type, 3, 255)?;
        if self.sha256.len() != 64
            || !self
                .sha256
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        {
            return Err(ContractError::field(
                "benchmark.artifacts[].sha256",
                Problem::BadFormat,
            ));
        }
        Ok(())
    }
}

/// `benchmark` of every compute result (strict; the spec's "Benchmark Contract"), filled by the host from the
/// call it served. Every field is always present:
/// `{"method":"models.invoke","requested":{"providerId":null,"modelId":null},
/// "resolved":{"providerId":"builtin","modelId":"builtin-demo"},"settings":{…},"inputBytes":19,"outputBytes":46,
/// "usage":{…},"latency":{"queueMs":0,"firstEventMs":1,"firstTextMs":1,"totalMs":3},"finishReason":"complete",
/// "retries":0,"cancelled":false,"inputArtifact":null,"artifacts":[],"appVersion":"0.1.0","protocolVersion":1,
/// "surfaceVersion":2,"providerAdapter":"builtin","providerAdapterVersion":"0.1.0"}`.
///
/// Latencies are milliseconds from the moment the handler started (after admission; `queueMs` is the admission
/// wait before it). The CLI's version is not a field: `deepchat` is built from the same workspace as the host
/// and carries the same version, which `deepchat system version` prints.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ComputeBenchmark {
    /// Capability identity: the method served, one of [`COMPUTE_METHODS`].
    pub method: String,
    /// The ids the caller asked for (`null` = defaulted).
    pub requested: RequestedModel,
    /// The provider and model that served the call.
    pub resolved: ModelRef,
    /// Redacted generation settings.
    pub settings: GenerationSettings,
    /// Input bytes: UTF-8 bytes of the message contents (`models.invoke`), of the prompt or text (generate
    /// methods), or of the audio (transcriptions).
    pub input_bytes: u64,
    /// Output bytes: UTF-8 bytes of answer plus reasoning (`models.invoke`), the artifacts' sizes together
    /// (generate methods), or UTF-8 bytes of the returned transcript.
    pub output_bytes: u64,
    /// Token usage as the provider reported it (input = `promptTokens`, output = `completionTokens`); `null`
    /// when it reported none (media and transcription providers report none).
    #[serde(deserialize_with = "nullable")]
    pub usage: Option<InvokeUsage>,
    /// Queue, first provider event, first non-empty text (`models.invoke`'s first text delta, a
    /// transcription's text; `null` for media) and total time, milliseconds.
    pub latency: InvokeLatency,
    /// Why generation stopped; `complete` for media and transcriptions (a cut transcript says `truncated`).
    pub finish_reason: FinishReason,
    /// Provider retries: always 0, the host never retries (a failed call ends with an error whose `retriable`
    /// says whether the caller may).
    pub retries: u32,
    /// Cancellation outcome: always `false` in a result (a cancelled call ends with error `cancelled` instead).
    pub cancelled: bool,
    /// The input artifact of `audio.transcribeArtifact`; `null` otherwise.
    #[serde(deserialize_with = "nullable")]
    pub input_artifact: Option<BenchmarkArtifact>,
    /// The output artifacts (generate methods), in `artifacts` order; empty otherwise.
    pub artifacts: Vec<BenchmarkArtifact>,
    /// The host application's version, 1..=128 characters.
    pub app_version: String,
    /// Always [`PROTOCOL_VERSION`].
    pub protocol_version: u32,
    /// Always [`SURFACE_VERSION`].
    pub surface_version: u32,
    /// The provider adapter: `builtin` or `openai-compatible`.
    pub provider_adapter: String,
    /// The provider adapter's version (the `agentwire-provider` crate's), 1..=64 characters.
    pub provider_adapter_version: String,
}

impl Validate for ComputeBenchmark {
    fn validate(&self) -> Result<(), ContractError> {
        if !COMPUTE_METHODS.contains(&self.method.as_str()) {
            return Err(ContractError::field("benchmark.method", Problem::BadFormat));
        }
        check_requested_ids(
            self.requested.provider_id.as_deref(),
            self.requested.model_id.as_deref(),
        )?;
        check_provider_id("benchmark.resolved.providerId", &self.resolved.provider_id)?;
        check_model_id("benchmark.resolved.modelId", &self.resolved.model_id)?;
        if self.artifacts.len() > 8 {
            return Err(ContractError::field(
                "benchmark.artifacts",
                Problem::TooLong,
            ));
        }
        self.artifacts.iter().try_for_each(Validate::validate)?;
        if let Some(input) = &self.input_artifact {
            input.validate()?;
        }
        check_len("benchmark.appVersion", &self.app_version, 1, 128)?;
        if self.protocol_version != PROTOCOL_VERSION || self.surface_version != SURFACE_VERSION {
            return Err(ContractError::field(
                "benchmark.protocolVersion",
                Problem::OutOfRange,
            ));
        }
        check_len("benchmark.providerAdapter", &self.provider_adapter, 1, 64)?;
        check_len(
            "benchmark.providerAdapterVersion",
            &self.provider_adapter_version,
            1,
            64,
        )
    }
}

/// Result of `models.invoke` (strict): the resolved identity, the whole text, usage, finish reason, latency
/// and the benchmark record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InvokeResult {
    /// Provider id.
    pub provider_id: String,
    /// Model id.
    pub model_id: String,
    /// The answer.
    pub text: String,
    /// The reasoning, when any came.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub reasoning: Option<String>,
    /// Usage, when the provider reported it.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub usage: Option<InvokeUsage>,
    /// Why it stopped.
    pub finish_reason: FinishReason,
    /// Timings.
    pub latency: InvokeLatency,
    /// Benchmark facts.
    pub benchmark: ComputeBenchmark,
}

impl Validate for InvokeResult {
    fn validate(&self) -> Result<(), ContractError> {
        check_provider_id("providerId", &self.provider_id)?;
        check_model_id("modelId", &self.model_id)?;
        self.benchmark.validate()?;
        let total = js_len(&self.text) + self.reasoning.as_deref().map_or(0, js_len);
        if total > MODEL_INVOKE_MAX_OUTPUT_CHARACTERS {
            return Err(ContractError::field("text", Problem::TooLong));
        }
        Ok(())
    }
}

/// `models.invoke` (stream; records carry [`InvokeEvent`]s under the event name `models.invoke`).
#[derive(Debug, Clone, Copy)]
pub struct Invoke;

impl Method for Invoke {
    const NAME: &'static str = "models.invoke";
    type Params = InvokeParams;
    type Result = InvokeResult;
}

/// `ModelInvokeProviderFailureSchema`: the only upstream detail an error carries,
/// `{"statusCode":503,"retryable":true}` under `details.providerFailure`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProviderFailure {
    /// The upstream HTTP status, 100..=599, when there was one.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub status_code: Option<u16>,
    /// Whether retrying may help.
    pub retryable: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::{decode_params, decode_result};
    use serde_json::json;

    #[test]
    fn invoke_params_follow_the_zod_limits() {
        let ok = json!({"providerId":"builtin","modelId":"m","messages":[{"role":"user","content":"hi"}]});
        assert!(decode_params::<Invoke>(ok.clone()).is_ok());
        let bad = |patch: serde_json::Value| {
            let mut value = ok.clone();
            for (k, v) in patch.as_object().expect("object") {
                value[k] = v.clone();
            }
            decode_params::<Invoke>(value)
                .map(|_| ())
                .map_err(|e| e.code())
        };
        assert_eq!(bad(json!({"messages":[]})), Err("too_short"));
        assert_eq!(
            bad(json!({"messages":[{"role":"user","content":""}]})),
            Err("too_short")
        );
        assert_eq!(
            bad(json!({"messages":[{"role":"tool","content":"x"}]})),
            Err("invalid_shape")
        );
        assert_eq!(bad(json!({"temperature":2.0})), Ok(()));
        assert_eq!(bad(json!({"temperature":2.01})), Err("out_of_range"));
        assert_eq!(bad(json!({"maxTokens":0})), Err("out_of_range"));
        assert_eq!(bad(json!({"extra":1})), Err("invalid_shape"));
        assert_eq!(bad(json!({"providerId":"p".repeat(129)})), Err("too_long"));
        let many: Vec<_> = (0..=MODEL_INVOKE_MAX_MESSAGES)
            .map(|_| json!({"role":"user","content":"x"}))
            .collect();
        assert_eq!(bad(json!({ "messages": many })), Err("too_long"));
    }

    #[test]
    fn events_and_results_round_trip() {
        for event in [
            json!({"type":"text_delta","text":"a"}),
            json!({"type":"reasoning_delta","text":"b"}),
            json!({"type":"usage","usage":{"promptTokens":1,"completionTokens":2,"totalTokens":3}}),
            json!({"type":"stop","reason":"complete"}),
        ] {
            let typed: InvokeEvent = serde_json::from_value(event.clone()).expect("event");
            assert_eq!(serde_json::to_value(typed).expect("json"), event);
        }
        let latency = json!({"queueMs":0,"firstEventMs":1,"firstTextMs":null,"totalMs":2});
        let result = json!({"providerId":"builtin","modelId":"m","text":"hi","finishReason":"max_tokens",
            "latency":latency, "benchmark": benchmark()});
        let typed = decode_result::<Invoke>(result.clone()).expect("result");
        assert_eq!(serde_json::to_value(typed).expect("json"), result);
        // Every benchmark field is required, even when null.
        let mut missing = result.clone();
        missing["benchmark"]
            .as_object_mut()
            .expect("object")
            .remove("usage");
        assert!(decode_result::<Invoke>(missing).is_err());
        let mut bad = result.clone();
        bad["benchmark"]["method"] = json!("sessions.send");
        assert_eq!(
            decode_result::<Invoke>(bad)
                .map(|_| ())
                .map_err(|e| e.code()),
            Err("bad_format")
        );
        let mut bad = result;
        bad["benchmark"]["artifacts"] = json!([{"id":"AbCdEfGhIjKlMnOpQrStUvWx","mimeType":"image/png","size":1,"sha256":"AB"}]);
        assert_eq!(
            decode_result::<Invoke>(bad)
                .map(|_| ())
                .map_err(|e| e.code()),
            Err("bad_format")
        );
    }

    fn benchmark() -> serde_json::Value {
        json!({"method":"models.invoke","requested":{"providerId":null,"modelId":null},
            "resolved":{"providerId":"builtin","modelId":"m"},
            "settings":{"temperature":null,"maxTokens":1,"systemPrompt":false,"systemPromptChars":0,
                "messageCount":1,"size":null,"seconds":null,"voice":null,"responseFormat":null,"speed":null},
            "inputBytes":2,"outputBytes":2,"usage":null,
            "latency":{"queueMs":0,"firstEventMs":1,"firstTextMs":null,"totalMs":2},
            "finishReason":"max_tokens","retries":0,"cancelled":false,"inputArtifact":null,"artifacts":[],
            "appVersion":"1.0.0","protocolVersion":PROTOCOL_VERSION,"surfaceVersion":SURFACE_VERSION,
            "providerAdapter":"builtin","providerAdapterVersion":"0.1.0"})
    }

    #[test]
    fn ids_may_be_defaulted_but_a_custom_provider_needs_a_model() {
        let params = |ids: serde_json::Value| {
            let mut value = json!({"messages":[{"role":"user","content":"hi"}]});
            for (k, v) in ids.as_object().expect("object") {
                value[k] = v.clone();
            }
            decode_params::<Invoke>(value)
                .map(|p| (p.provider_id, p.model_id))
                .map_err(|e| e.code())
        };
        assert_eq!(params(json!({})), Ok((None, None)));
        assert_eq!(
            params(json!({"providerId":"builtin"})),
            Ok((Some("builtin".to_owned()), None))
        );
        assert_eq!(params(json!({"providerId":"local"})), Err("inconsistent"));
        assert_eq!(params(json!({"providerId":null})), Err("invalid_shape"));
        assert_eq!(params(json!({"modelId":""})), Err("too_short"));
    }
}
