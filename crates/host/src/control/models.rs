//! Model and media compute: `models.listPublic`, `models.getCapabilities`, `models.invoke` (stream),
//! `images.generate` / `speech.generate` / `videos.generate` (stream), `audio.transcribeUpload` (upload) and
//! `audio.transcribeArtifact` (rpc), served with `agentwire-provider`.
//!
//! Source: DeepChat `src/main/cli/computeService.ts` (`invokeModel`, `generateImages`, `generateVideos`,
//! `generateSpeech`, `persistMedia`, `normalizeMediaFailure`): the event order (`started`, deltas, `usage`,
//! `stop`; media `started` then one `artifact` per output), latency fields, `unavailable` with
//! `details.providerFailure: {statusCode?, retryable}` for upstream failures, `cancelled` when the caller goes
//! away. Binary results go to the artifact spool owned by the caller; callers get ids and metadata only.
//!
//! Providers come from the host's [`ProviderRegistry`](crate::providers::ProviderRegistry): `builtin` is the
//! deterministic built-in provider (models `builtin-demo`, `builtin-image`, `builtin-speech`, `builtin-transcribe`,
//! `builtin-video`, enabled or disabled like any other), other ids are custom OpenAI-compatible providers whose key
//! the registry reads from its 0600 file. Compute admission
//! (`admission`) has already run in `authorize`; its wait is `latency.queueMs`.
//!
//! Ids may be absent: the provider defaults to `builtin` and, with it, the model to the built-in model of the
//! method's kind. Every result carries a `benchmark` record ([`ComputeBenchmark`], the spec's "Benchmark
//! Contract") filled from the call: requested (as given, `null` when defaulted) and resolved ids, redacted
//! settings, byte counts, usage, latencies, finish reason, retries (always 0: nothing here retries),
//! cancellation (`false`: a cancelled call ends with an error), artifact id/MIME/size/SHA-256 (never a path),
//! and the app, protocol, surface and provider adapter versions.
//!
//! Upstream error text, headers and bodies never reach a caller, the audit log or the host log: the provider
//! crate never reads them, and this module logs only the stable code.

use std::time::Instant;

use agentwire_local_control::caller::Caller;
use agentwire_local_control::contract::Method;
use agentwire_local_control::contract::artifacts::ArtifactMetadata;
use agentwire_local_control::contract::media::{
    self as wire_media, GenerateResult, ImagesGenerate, MediaEvent, SpeechGenerate,
    TranscribeArtifact, TranscribeUpload, TranscriptionResult, VideosGenerate,
};
use agentwire_local_control::contract::models::{
    self as wire, BenchmarkArtifact, Capabilities, CapabilitiesResult, ComputeBenchmark,
    FinishReason, GenerationSettings, GetCapabilities, Invoke, InvokeEvent, InvokeLatency,
    InvokeResult, InvokeRole, InvokeUsage, ListPublic, ListPublicResult, ModelKind, ModelRef,
    PublicModel, RequestedModel,
};
use agentwire_local_control::contract::{PROTOCOL_VERSION, SURFACE_VERSION};
use agentwire_local_control::envelope::{
    ErrorBody, ErrorCode, RequestEnvelope, UploadRequestEnvelope,
};
use agentwire_local_control::server::{RequestContext, StreamSink, UploadedFile};
use agentwire_provider::{
    ChatMessage, ChatRequest, ImageRequest, OpenAiConfig, Provider, ProviderError, Role,
    SpeechRequest, StreamItem, TranscriptionRequest, VideoRequest,
};
use agentwire_spool::{ArtifactSpec, Scope as SpoolScope};
use serde_json::{Value, json};
use tokio::io::AsyncReadExt;

use super::runs::{spool_error, spool_owner, wire_artifact};
use super::{ControlPlane, Grant, error, params, result};
use crate::providers::{BUILTIN_PROVIDER_ID, ProviderRegistry};

/// What each model of the built-in provider is for. The registry lists them all (DeepChat's public model types
/// have no speech, transcription or video, so it records those as `chat`); this table is the authority on kind.
const BUILTIN_KINDS: &[(&str, ModelKind)] = &[
    (agentwire_provider::BUILTIN_MODEL, ModelKind::Chat),
    (
        agentwire_provider::BUILTIN_IMAGE_MODEL,
        ModelKind::ImageGeneration,
    ),
    (agentwire_provider::BUILTIN_SPEECH_MODEL, ModelKind::Speech),
    (
        agentwire_provider::BUILTIN_TRANSCRIPTION_MODEL,
        ModelKind::Transcription,
    ),
    (
        agentwire_provider::BUILTIN_VIDEO_MODEL,
        ModelKind::VideoGeneration,
    ),
];

fn builtin_kind(model_id: &str) -> Option<ModelKind> {
    BUILTIN_KINDS
        .iter()
        .find(|(id, _)| *id == model_id)
        .map(|(_, kind)| *kind)
}

/// Whether `method` is served by [`dispatch`] on `/v1/rpc`.
pub(super) fn handles(method: &str) -> bool {
    matches!(
        method,
        ListPublic::NAME | GetCapabilities::NAME | TranscribeArtifact::NAME
    )
}

/// Whether `method` is served by [`stream`] on `/v1/stream`.
pub(super) fn streams(method: &str) -> bool {
    matches!(
        method,
        Invoke::NAME | ImagesGenerate::NAME | SpeechGenerate::NAME | VideosGenerate::NAME
    )
}

/// Whether `method` is served by [`upload`] on `/v1/upload`.
pub(super) fn uploads(method: &str) -> bool {
    method == TranscribeUpload::NAME
}

fn millis(since: Instant) -> u64 {
    u64::try_from(since.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// When the host accepted the request (before any wait in the compute queue) and that wait in milliseconds:
/// `firstEventMs`, `firstTextMs` and `totalMs` count from the former, so they include `queueMs` (spec: queue
/// duration plus request-relative latencies; a request admitted without a permit counts from now).
fn accepted(grant: &Grant) -> (Instant, u64) {
    grant
        .compute_permit()
        .map_or_else(|| (Instant::now(), 0), |p| (p.accepted_at(), p.queue_ms()))
}

fn cancelled() -> ErrorBody {
    error(ErrorCode::Cancelled, "compute request was cancelled").retriable(true)
}

/// A provider failure as the caller sees it: our stable code, never upstream text.
fn provider_failure(e: &ProviderError, what: &str) -> ErrorBody {
    tracing::warn!(code = e.code(), status = ?e.status(), "{what} failed at the provider");
    match e {
        ProviderError::InvalidInput { reason } => {
            error(ErrorCode::InvalidRequest, format!("{what}: {reason}"))
        }
        ProviderError::InputTooLarge => error(
            ErrorCode::BodyTooLarge,
            format!("{what}: input over the provider limit"),
        ),
        ProviderError::ReplyTooLong | ProviderError::ResponseTooLarge => error(
            ErrorCode::ResultTooLarge,
            format!("{what}: provider output over its limit ({})", e.code()),
        ),
        _ => {
            let mut failure = serde_json::Map::new();
            if let Some(status) = e.status() {
                failure.insert("statusCode".to_owned(), json!(status));
            }
            failure.insert("retryable".to_owned(), json!(e.retryable()));
            let mut details = serde_json::Map::new();
            details.insert("providerFailure".to_owned(), Value::Object(failure));
            let mut body = error(
                ErrorCode::Unavailable,
                format!("model provider request failed ({})", e.code()),
            )
            .retriable(e.retryable());
            body.details = Some(details);
            body
        }
    }
}

/// Most provider clients kept between calls (an HTTP client holds a connection pool and TLS setup).
const MAX_CACHED_PROVIDERS: usize = 64;

/// State the compute methods keep between calls: one open provider registry (opening one runs the store's
/// migrations and seeds the built-in provider in a write transaction) and one client per custom provider,
/// rebuilt when its base URL or key changes. Keys are re-read from the 0600 credential file on every call.
#[derive(Default)]
pub(crate) struct ComputeState {
    registry: std::sync::Mutex<Option<ProviderRegistry>>,
    providers: std::sync::Mutex<std::collections::HashMap<String, CachedProvider>>,
}

struct CachedProvider {
    base_url: String,
    api_key: Option<String>,
    provider: std::sync::Arc<Provider>,
}

/// Runs `f` on the shared registry, opening it on first use (and again after a failure).
fn with_registry<T>(
    plane: &ControlPlane,
    f: impl FnOnce(&ProviderRegistry) -> Result<T, crate::providers::ProviderError>,
) -> Result<T, ErrorBody> {
    let mut slot = super::lock(&plane.inner.compute.registry);
    if slot.is_none() {
        let opened = ProviderRegistry::open(&plane.inner.data_dir).map_err(|e| {
            error(
                ErrorCode::Unavailable,
                format!("provider registry unavailable ({})", e.code()),
            )
            .retriable(true)
        })?;
        *slot = Some(opened);
    }
    let Some(registry) = slot.as_ref() else {
        return Err(error(ErrorCode::Unavailable, "provider registry unavailable").retriable(true));
    };
    let outcome = f(registry);
    if let Err(crate::providers::ProviderError::Store(_)) = &outcome {
        // A broken connection is reopened by the next call.
        *slot = None;
    }
    outcome.map_err(|e| registry_error(&e))
}

/// The client of custom provider `id` at `base_url` with `api_key`, reused while both stay the same.
fn custom_provider(
    plane: &ControlPlane,
    id: &str,
    base_url: &str,
    api_key: Option<&str>,
) -> Result<std::sync::Arc<Provider>, ErrorBody> {
    let mut cache = super::lock(&plane.inner.compute.providers);
    if let Some(cached) = cache.get(id)
        && cached.base_url == base_url
        && cached.api_key.as_deref() == api_key
    {
        return Ok(std::sync::Arc::clone(&cached.provider));
    }
    let key = api_key
        .map(agentwire_provider::ApiKey::new)
        .transpose()
        .map_err(|_| {
            error(
                ErrorCode::Conflict,
                "the provider's stored key is not usable",
            )
        })?;
    let provider = Provider::openai(OpenAiConfig {
        base_url: base_url.to_owned(),
        api_key: key,
        default_model: None,
        limits: plane.inner.provider_limits.clone(),
    })
    .map_err(|e| {
        error(
            ErrorCode::Conflict,
            format!("provider not usable ({})", e.code()),
        )
    })?;
    let provider = std::sync::Arc::new(provider);
    if cache.len() >= MAX_CACHED_PROVIDERS {
        cache.clear();
    }
    cache.insert(
        id.to_owned(),
        CachedProvider {
            base_url: base_url.to_owned(),
            api_key: api_key.map(str::to_owned),
            provider: std::sync::Arc::clone(&provider),
        },
    );
    Ok(provider)
}

fn registry_error(e: &crate::providers::ProviderError) -> ErrorBody {
    use crate::providers::ProviderError as E;
    match e {
        E::ProviderNotFound(_) | E::ModelNotFound { .. } | E::NoEnabledModel(_) => {
            error(ErrorCode::NotFound, e.to_string())
        }
        E::ProviderDisabled(_) | E::ModelDisabled { .. } => {
            error(ErrorCode::Conflict, e.to_string())
        }
        _ => error(
            ErrorCode::Unavailable,
            format!("provider registry: {}", e.code()),
        )
        .retriable(true),
    }
}

fn kind_of(model_type: agentwire_local_control::contract::model_config::ModelType) -> ModelKind {
    use agentwire_local_control::contract::model_config::ModelType;
    match model_type {
        ModelType::Chat => ModelKind::Chat,
        ModelType::Embedding => ModelKind::Embedding,
        ModelType::Rerank => ModelKind::Rerank,
        ModelType::ImageGeneration => ModelKind::ImageGeneration,
    }
}

/// A resolved, enabled model and the provider that serves it.
struct Target {
    provider_id: String,
    model_id: String,
    provider: std::sync::Arc<Provider>,
}

/// The built-in model for calls of `kind` that name no model.
fn builtin_model_for(kind: ModelKind) -> Option<&'static str> {
    BUILTIN_KINDS
        .iter()
        .find(|(_, k)| *k == kind)
        .map(|(id, _)| *id)
}

/// Resolves `provider_id`/`model_id` for a call that needs a model of `kind`: an absent provider is
/// `builtin`, an absent model with it is the built-in model of `kind` (absent with another provider is
/// `invalid_request`; the contract refuses it first).
///
/// Built-in models are checked against [`BUILTIN_KINDS`]; custom providers' models against their configured
/// type where it can say (chat and image generation); speech, transcription and video calls take a `chat`-typed
/// custom model as named (the type has no such kinds) and refuse an `imageGeneration`, `embedding` or `rerank` one.
fn resolve(
    plane: &ControlPlane,
    requested: &RequestedModel,
    kind: ModelKind,
) -> Result<Target, ErrorBody> {
    let limits = plane.inner.provider_limits.clone();
    let provider_id = requested
        .provider_id
        .as_deref()
        .unwrap_or(BUILTIN_PROVIDER_ID);
    let model_id = match (requested.model_id.as_deref(), provider_id) {
        (Some(model), _) => model,
        (None, BUILTIN_PROVIDER_ID) => builtin_model_for(kind).ok_or_else(|| not_for(kind))?,
        (None, _) => {
            return Err(error(
                ErrorCode::InvalidRequest,
                "modelId is required with a provider other than builtin",
            ));
        }
    };
    let resolved = with_registry(plane, |registry| {
        registry
            .resolve(Some(provider_id), Some(model_id))
            .and_then(crate::providers::ResolvedModel::require_enabled)
    })?;
    if resolved.builtin {
        if builtin_kind(&resolved.model_id) != Some(kind) {
            return Err(not_for(kind));
        }
    } else {
        // DeepChat's `ModelType` (chat, embedding, rerank, imageGeneration) cannot say speech, transcription or
        // video, so a custom model of those kinds keeps the default `chat` type: those methods take a `chat`
        // model as named and refuse only a type that is certainly another kind.
        let configured = kind_of(resolved.config.model_type);
        let refused = match kind {
            ModelKind::Chat | ModelKind::ImageGeneration => configured != kind,
            ModelKind::Speech | ModelKind::Transcription | ModelKind::VideoGeneration => {
                configured != ModelKind::Chat
            }
            ModelKind::Embedding | ModelKind::Rerank => configured != kind,
        };
        if refused {
            return Err(not_for(kind));
        }
    }
    let provider = if resolved.builtin {
        std::sync::Arc::new(Provider::builtin(limits))
    } else {
        let base_url = resolved
            .base_url
            .clone()
            .ok_or_else(|| error(ErrorCode::Conflict, "the provider has no base url"))?;
        custom_provider(
            plane,
            &resolved.provider_id,
            &base_url,
            resolved.api_key.as_ref().map(|k| k.expose()),
        )?
    };
    Ok(Target {
        provider_id: resolved.provider_id,
        model_id: resolved.model_id,
        provider,
    })
}

fn not_for(kind: ModelKind) -> ErrorBody {
    let what = match kind {
        ModelKind::Chat => "raw text invocation",
        ModelKind::ImageGeneration => "image generation",
        ModelKind::Speech => "speech generation",
        ModelKind::Transcription => "transcription",
        ModelKind::VideoGeneration => "video generation",
        ModelKind::Embedding | ModelKind::Rerank => "this method",
    };
    error(
        ErrorCode::Conflict,
        format!("model is not configured for {what}"),
    )
}

/// The benchmark record of `method` served by `target`, with what every method shares; handlers fill in the
/// rest with struct update syntax.
fn benchmark(
    plane: &ControlPlane,
    method: &str,
    requested: RequestedModel,
    target: &Target,
    latency: InvokeLatency,
) -> ComputeBenchmark {
    ComputeBenchmark {
        method: method.to_owned(),
        requested,
        resolved: ModelRef {
            provider_id: target.provider_id.clone(),
            model_id: target.model_id.clone(),
        },
        settings: GenerationSettings::default(),
        input_bytes: 0,
        output_bytes: 0,
        usage: None,
        latency,
        finish_reason: FinishReason::Complete,
        retries: 0,
        cancelled: false,
        input_artifact: None,
        artifacts: Vec::new(),
        app_version: plane.inner.app_version.clone(),
        protocol_version: PROTOCOL_VERSION,
        surface_version: SURFACE_VERSION,
        provider_adapter: target.provider.adapter().to_owned(),
        provider_adapter_version: agentwire_provider::VERSION.to_owned(),
    }
}

/// JavaScript characters (UTF-16 units) of `text`.
fn js_chars(text: &str) -> u64 {
    text.encode_utf16().count() as u64
}

/// `/v1/rpc` methods of this module.
pub(super) async fn dispatch(
    plane: &ControlPlane,
    ctx: &RequestContext,
    grant: &Grant,
    request: RequestEnvelope,
) -> Result<Value, ErrorBody> {
    match grant.method {
        ListPublic::NAME => {
            let p = params::<ListPublic>(request.params)?;
            list_public(plane, &p)
        }
        GetCapabilities::NAME => {
            let p = params::<GetCapabilities>(request.params)?;
            capabilities(plane, &p)
        }
        TranscribeArtifact::NAME => {
            let p = params::<TranscribeArtifact>(request.params)?;
            transcribe_artifact(plane, ctx, grant, p).await
        }
        other => Err(error(
            ErrorCode::NotFound,
            format!("{other} is not served here"),
        )),
    }
}

fn list_public(plane: &ControlPlane, p: &wire::ListPublicParams) -> Result<Value, ErrorBody> {
    let enabled_only = p.enabled_only.unwrap_or(false);
    let listed = with_registry(plane, |registry| {
        // The provider filter names a provider like every other method (id or name); an unknown one is not_found.
        let only = match p.provider_id.as_deref() {
            Some(reference) => Some(registry.find(reference)?.id),
            None => None,
        };
        let mut listed = Vec::new();
        for provider in registry.list(false)? {
            if only.as_deref().is_some_and(|id| id != provider.id) {
                continue;
            }
            let models = registry.models(&provider.id)?;
            listed.push((provider, models));
        }
        Ok(listed)
    })?;
    let mut models = Vec::new();
    for (provider, provider_models) in listed {
        for model in provider_models {
            let kind = match provider.is_builtin() {
                true => builtin_kind(&model.model_id),
                false => None,
            }
            .unwrap_or_else(|| kind_of(model.config.model_type));
            models.push(PublicModel {
                provider_id: provider.id.clone(),
                name: model.name.clone(),
                id: model.model_id,
                kind,
                enabled: model.enabled,
                provider_enabled: provider.enabled,
                builtin: provider.is_builtin(),
            });
        }
    }
    if enabled_only {
        models.retain(|m| m.enabled && m.provider_enabled);
    }
    if models.len() > wire::MAX_PUBLIC_MODELS {
        return Err(error(
            ErrorCode::ResultTooLarge,
            "model list exceeds the public limit",
        ));
    }
    result::<ListPublic>(&ListPublicResult { models })
}

fn capabilities(plane: &ControlPlane, p: &wire::ModelRef) -> Result<Value, ErrorBody> {
    let model = with_registry(plane, |registry| {
        registry.model(&p.provider_id, &p.model_id)
    })?;
    // The provider may be named by id or name; the answer carries the id, as every other method's does.
    let kind = match model.provider_id == BUILTIN_PROVIDER_ID {
        true => builtin_kind(&p.model_id),
        false => None,
    }
    .unwrap_or_else(|| kind_of(model.config.model_type));
    let methods: &[&str] = match kind {
        ModelKind::Chat => &[Invoke::NAME],
        ModelKind::ImageGeneration => &[ImagesGenerate::NAME],
        ModelKind::Speech => &[SpeechGenerate::NAME],
        ModelKind::Transcription => &[TranscribeUpload::NAME, TranscribeArtifact::NAME],
        ModelKind::VideoGeneration => &[VideosGenerate::NAME],
        ModelKind::Embedding | ModelKind::Rerank => &[],
    };
    result::<GetCapabilities>(&CapabilitiesResult {
        provider_id: model.provider_id.clone(),
        model_id: model.model_id.clone(),
        capabilities: Capabilities {
            kind: Some(kind),
            streaming: kind == ModelKind::Chat,
            // The model's config's flags (the same `reasoning`/`vision`/`functionCall` that
            // `models.getPublicConfig` and `providers.listPublic` show), for a chat model only.
            reasoning: kind == ModelKind::Chat && model.config.reasoning,
            vision: kind == ModelKind::Chat && model.config.vision,
            function_call: kind == ModelKind::Chat && model.config.function_call,
            methods: methods.iter().map(|m| (*m).to_owned()).collect(),
        },
    })
}

/// `/v1/stream` methods of this module.
pub(super) async fn stream(
    plane: &ControlPlane,
    ctx: &RequestContext,
    grant: &Grant,
    request: RequestEnvelope,
    sink: StreamSink,
) -> Result<Value, ErrorBody> {
    match grant.method {
        Invoke::NAME => {
            let p = params::<Invoke>(request.params)?;
            invoke(plane, ctx, p, accepted(grant), sink).await
        }
        ImagesGenerate::NAME | SpeechGenerate::NAME | VideosGenerate::NAME => {
            generate(plane, ctx, grant, &request, sink).await
        }
        other => Err(error(
            ErrorCode::NotFound,
            format!("{other} is not a stream method"),
        )),
    }
}

async fn emit(sink: &mut StreamSink, event: &str, data: Value) -> Result<(), ErrorBody> {
    sink.emit(event, data).await
}

/// Splits `text` into pieces of at most [`wire::MODEL_INVOKE_MAX_DELTA_CHARACTERS`] UTF-16 units.
fn split_delta(text: &str) -> Vec<&str> {
    let mut pieces = Vec::new();
    let mut start = 0;
    let mut units = 0;
    for (index, c) in text.char_indices() {
        if units + c.len_utf16() > wire::MODEL_INVOKE_MAX_DELTA_CHARACTERS {
            pieces.push(&text[start..index]);
            start = index;
            units = 0;
        }
        units += c.len_utf16();
    }
    if start < text.len() {
        pieces.push(&text[start..]);
    }
    pieces
}

async fn invoke(
    plane: &ControlPlane,
    ctx: &RequestContext,
    p: wire::InvokeParams,
    (started, queue_ms): (Instant, u64),
    mut sink: StreamSink,
) -> Result<Value, ErrorBody> {
    let requested = RequestedModel {
        provider_id: p.provider_id.clone(),
        model_id: p.model_id.clone(),
    };
    let target = resolve(plane, &requested, ModelKind::Chat)?;
    let system: Vec<&str> = p
        .messages
        .iter()
        .filter(|m| m.role == InvokeRole::System)
        .map(|m| m.content.as_str())
        .collect();
    let settings = GenerationSettings {
        temperature: p.temperature,
        max_tokens: p.max_tokens,
        system_prompt: !system.is_empty(),
        system_prompt_chars: system.iter().map(|s| js_chars(s)).sum(),
        message_count: u32::try_from(p.messages.len()).unwrap_or(u32::MAX),
        ..GenerationSettings::default()
    };
    let input_bytes: u64 = p.messages.iter().map(|m| m.content.len() as u64).sum();
    let chat = ChatRequest {
        model: Some(target.model_id.clone()),
        messages: p
            .messages
            .iter()
            .map(|m| {
                let role = match m.role {
                    InvokeRole::System => Role::System,
                    InvokeRole::User => Role::User,
                    InvokeRole::Assistant => Role::Assistant,
                };
                ChatMessage::text(role, m.content.clone())
            })
            .collect(),
        tools: Vec::new(),
        temperature: p.temperature,
        max_tokens: p.max_tokens,
    };
    let mut reply = tokio::select! {
        reply = target.provider.chat(&chat) => reply.map_err(|e| provider_failure(&e, "model invocation"))?,
        () = ctx.cancel.cancelled() => return Err(cancelled()),
    };
    let mut text = String::new();
    let mut reasoning = String::new();
    let mut output_units = 0usize;
    let mut usage = None;
    let mut finish = None;
    let mut first_event_ms = None;
    let mut first_text_ms = None;
    loop {
        // Dropping `reply` (on cancel or error) closes the upstream connection.
        let item = tokio::select! {
            item = reply.next() => item.map_err(|e| provider_failure(&e, "model invocation"))?,
            () = ctx.cancel.cancelled() => return Err(cancelled()),
        };
        let Some(item) = item else { break };
        if first_event_ms.is_none() {
            first_event_ms = Some(millis(started));
        }
        match item {
            StreamItem::Text(delta) | StreamItem::Reasoning(delta) if delta.is_empty() => {}
            StreamItem::Text(delta) => {
                if first_text_ms.is_none() {
                    first_text_ms = Some(millis(started));
                }
                output_units += delta.encode_utf16().count();
                if output_units > wire::MODEL_INVOKE_MAX_OUTPUT_CHARACTERS {
                    return Err(error(
                        ErrorCode::ResultTooLarge,
                        "model output exceeds the text limit",
                    ));
                }
                for piece in split_delta(&delta) {
                    let event = InvokeEvent::TextDelta {
                        text: piece.to_owned(),
                    };
                    emit(&mut sink, Invoke::NAME, to_value(&event)?).await?;
                }
                text.push_str(&delta);
            }
            StreamItem::Reasoning(delta) => {
                output_units += delta.encode_utf16().count();
                if output_units > wire::MODEL_INVOKE_MAX_OUTPUT_CHARACTERS {
                    return Err(error(
                        ErrorCode::ResultTooLarge,
                        "model output exceeds the text limit",
                    ));
                }
                for piece in split_delta(&delta) {
                    let event = InvokeEvent::ReasoningDelta {
                        text: piece.to_owned(),
                    };
                    emit(&mut sink, Invoke::NAME, to_value(&event)?).await?;
                }
                reasoning.push_str(&delta);
            }
            StreamItem::Usage(u) => {
                let wire_usage = InvokeUsage {
                    prompt_tokens: u.input_tokens,
                    completion_tokens: u.output_tokens,
                    total_tokens: u.input_tokens.saturating_add(u.output_tokens),
                };
                usage = Some(wire_usage);
                emit(
                    &mut sink,
                    Invoke::NAME,
                    to_value(&InvokeEvent::Usage { usage: wire_usage })?,
                )
                .await?;
            }
            StreamItem::Finish(reason) => {
                let reason = match reason.0.as_str() {
                    "length" => FinishReason::MaxTokens,
                    "tool_calls" | "function_call" => FinishReason::ToolUse,
                    "content_filter" => FinishReason::Error,
                    _ => FinishReason::Complete,
                };
                // A refused answer fails here, before any stop record; a tool-call finish (no tools were
                // offered, so nothing was called) completes with `tool_use` like any other finish.
                if reason == FinishReason::Error {
                    return Err(provider_failure(
                        &ProviderError::BadResponse,
                        "model invocation",
                    ));
                }
                if finish.is_none() {
                    finish = Some(reason);
                    emit(
                        &mut sink,
                        Invoke::NAME,
                        to_value(&InvokeEvent::Stop { reason })?,
                    )
                    .await?;
                }
            }
            // No tools were offered, so a call the model asks for anyway is not part of a raw invocation's
            // answer: it is dropped, and the finish says `tool_use`.
            StreamItem::ToolCall(_) => {}
        }
    }
    let finish_reason = finish.unwrap_or(FinishReason::Complete);
    let latency = InvokeLatency {
        queue_ms,
        first_event_ms,
        first_text_ms,
        total_ms: millis(started),
    };
    let benchmark = ComputeBenchmark {
        settings,
        input_bytes,
        output_bytes: (text.len() + reasoning.len()) as u64,
        usage,
        finish_reason,
        ..benchmark(plane, Invoke::NAME, requested, &target, latency)
    };
    result::<Invoke>(&InvokeResult {
        provider_id: target.provider_id,
        model_id: target.model_id,
        text,
        reasoning: (!reasoning.is_empty()).then_some(reasoning),
        usage,
        finish_reason,
        latency,
        benchmark,
    })
}

fn to_value<T: serde::Serialize>(value: &T) -> Result<Value, ErrorBody> {
    serde_json::to_value(value).map_err(|e| {
        error(
            ErrorCode::InternalError,
            format!("event not serializable: {e}"),
        )
    })
}

fn extension(mime: &str) -> &'static str {
    match mime {
        "image/png" => ".png",
        "image/jpeg" => ".jpg",
        "image/webp" => ".webp",
        "image/gif" => ".gif",
        "audio/wav" => ".wav",
        "audio/mpeg" => ".mp3",
        "audio/ogg" => ".opus",
        "audio/aac" => ".aac",
        "audio/flac" => ".flac",
        "video/mp4" => ".mp4",
        "video/x-msvideo" => ".avi",
        "video/webm" => ".webm",
        _ => ".bin",
    }
}

/// One output to store.
struct Output {
    bytes: Vec<u8>,
    mime: String,
}

#[allow(clippy::too_many_arguments)]
/// Writes `outputs` to the spool as the caller's artifacts and emits one `artifact` record each; on any failure
/// the ones already stored are discarded.
async fn persist(
    plane: &ControlPlane,
    ctx: &RequestContext,
    caller: &Caller,
    request_id: &str,
    method: &'static str,
    kind: &str,
    outputs: Vec<Output>,
    sink: &mut StreamSink,
) -> Result<Vec<ArtifactMetadata>, ErrorBody> {
    let mut stored = Vec::new();
    let outcome: Result<(), ErrorBody> = async {
        for (index, output) in outputs.into_iter().enumerate() {
            let scope = SpoolScope::new(
                spool_owner(caller),
                ctx.connection_id.to_string(),
                request_id,
            );
            let filename = format!("generated-{kind}-{}{}", index + 1, extension(&output.mime));
            let mut writer = plane
                .inner
                .spool
                .create(ArtifactSpec::new(scope, output.mime, filename))
                .await
                .map_err(|e| spool_error(&e))?;
            writer
                .write(&output.bytes)
                .await
                .map_err(|e| spool_error(&e))?;
            let meta = writer.publish().await.map_err(|e| spool_error(&e))?;
            stored.push(wire_artifact(meta));
        }
        Ok(())
    }
    .await;
    if let Err(e) = outcome {
        discard(plane, &stored).await;
        return Err(e);
    }
    for (index, artifact) in stored.iter().enumerate() {
        let event = MediaEvent::Artifact {
            index: u32::try_from(index).unwrap_or(u32::MAX),
            artifact: artifact.clone(),
        };
        if let Err(e) = emit(sink, method, to_value(&event)?).await {
            discard(plane, &stored).await;
            return Err(e);
        }
    }
    Ok(stored)
}

async fn discard(plane: &ControlPlane, stored: &[ArtifactMetadata]) {
    for artifact in stored {
        if let Ok(id) = agentwire_spool::ArtifactId::parse(&artifact.id)
            && let Err(e) = plane.inner.spool.discard(id).await
        {
            tracing::warn!(code = e.code(), "a generated artifact was not discarded");
        }
    }
}

fn parse_seconds(seconds: Option<&str>) -> Result<Option<u32>, ErrorBody> {
    seconds
        .map(|s| {
            s.trim().parse::<u32>().map_err(|_| {
                error(
                    ErrorCode::InvalidRequest,
                    "options.seconds is not a whole number",
                )
            })
        })
        .transpose()
}

/// The typed params of the generate method called.
enum MediaParams {
    Image(wire_media::GenerateParams<wire_media::ImageOptions>),
    Speech(wire_media::SpeechParams),
    Video(wire_media::GenerateParams<wire_media::VideoOptions>),
}

async fn generate(
    plane: &ControlPlane,
    ctx: &RequestContext,
    grant: &Grant,
    request: &RequestEnvelope,
    mut sink: StreamSink,
) -> Result<Value, ErrorBody> {
    let (started, queue_ms) = accepted(grant);
    let method = grant.method;
    let (called, requested, kind, settings, input_bytes) = match method {
        ImagesGenerate::NAME => {
            let p = params::<ImagesGenerate>(request.params.clone())?;
            let requested = RequestedModel {
                provider_id: p.provider_id.clone(),
                model_id: p.model_id.clone(),
            };
            let settings = GenerationSettings {
                size: p.options.as_ref().and_then(|o| o.size.clone()),
                ..GenerationSettings::default()
            };
            let bytes = p.prompt.len() as u64;
            let kind = ModelKind::ImageGeneration;
            (MediaParams::Image(p), requested, kind, settings, bytes)
        }
        SpeechGenerate::NAME => {
            let p = params::<SpeechGenerate>(request.params.clone())?;
            let requested = RequestedModel {
                provider_id: p.provider_id.clone(),
                model_id: p.model_id.clone(),
            };
            let options = p.options.clone().unwrap_or_default();
            let settings = GenerationSettings {
                voice: options.voice,
                response_format: options.response_format,
                speed: options.speed,
                ..GenerationSettings::default()
            };
            let bytes = p.text.len() as u64;
            (
                MediaParams::Speech(p),
                requested,
                ModelKind::Speech,
                settings,
                bytes,
            )
        }
        _ => {
            let p = params::<VideosGenerate>(request.params.clone())?;
            let requested = RequestedModel {
                provider_id: p.provider_id.clone(),
                model_id: p.model_id.clone(),
            };
            let options = p.options.clone().unwrap_or_default();
            let settings = GenerationSettings {
                seconds: options.seconds,
                size: options.size,
                ..GenerationSettings::default()
            };
            let bytes = p.prompt.len() as u64;
            let kind = ModelKind::VideoGeneration;
            (MediaParams::Video(p), requested, kind, settings, bytes)
        }
    };
    let target = resolve(plane, &requested, kind)?;
    let started_event = MediaEvent::Started {
        provider_id: target.provider_id.clone(),
        model_id: target.model_id.clone(),
    };
    emit(&mut sink, method, to_value(&started_event)?).await?;
    let model = Some(target.model_id.clone());
    let what = match kind {
        ModelKind::ImageGeneration => "image generation",
        ModelKind::Speech => "speech generation",
        _ => "video generation",
    };
    let fail = |e: ProviderError| provider_failure(&e, what);
    let mut first_event_ms = None;
    let (outputs, label): (Vec<Output>, &str) = match &called {
        MediaParams::Image(p) => {
            let image_request = ImageRequest {
                model,
                prompt: p.prompt.clone(),
                size: p.options.as_ref().and_then(|o| o.size.clone()),
                n: 1,
            };
            let images = tokio::select! {
                images = target.provider.generate_images(&image_request) => images.map_err(fail)?,
                () = ctx.cancel.cancelled() => return Err(cancelled()),
            };
            first_event_ms = Some(millis(started));
            if images.len() > 8 {
                return Err(error(
                    ErrorCode::ResultTooLarge,
                    "provider returned too many images",
                ));
            }
            (
                images
                    .into_iter()
                    .map(|i| Output {
                        bytes: i.bytes,
                        mime: i.mime,
                    })
                    .collect(),
                "image",
            )
        }
        MediaParams::Speech(p) => {
            let options = p.options.clone().unwrap_or_default();
            let speech_request = SpeechRequest {
                model,
                input: p.text.clone(),
                voice: options.voice,
                format: options.response_format,
            };
            let audio = tokio::select! {
                audio = target.provider.generate_speech(&speech_request) => audio.map_err(fail)?,
                () = ctx.cancel.cancelled() => return Err(cancelled()),
            };
            first_event_ms = Some(millis(started));
            (
                vec![Output {
                    bytes: audio.bytes,
                    mime: audio.mime,
                }],
                "audio",
            )
        }
        MediaParams::Video(p) => {
            let options = p.options.clone().unwrap_or_default();
            let video_request = VideoRequest {
                model,
                prompt: p.prompt.clone(),
                seconds: parse_seconds(options.seconds.as_deref())?,
                size: options.size,
            };
            let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
            let mut on_progress = move |job: &agentwire_provider::VideoJob| {
                let _ = tx.send((job.status.as_str(), job.progress));
            };
            let generated = {
                let generating = target
                    .provider
                    .generate_video(&video_request, &mut on_progress);
                tokio::pin!(generating);
                loop {
                    tokio::select! {
                        Some((status, progress)) = rx.recv() => {
                            first_event_ms.get_or_insert_with(|| millis(started));
                            let event = MediaEvent::Progress { status: status.to_owned(), progress };
                            emit(&mut sink, method, to_value(&event)?).await?;
                        }
                        video = &mut generating => break video.map_err(fail)?,
                        () = ctx.cancel.cancelled() => return Err(cancelled()),
                    }
                }
            };
            first_event_ms.get_or_insert_with(|| millis(started));
            while let Ok((status, progress)) = rx.try_recv() {
                let event = MediaEvent::Progress {
                    status: status.to_owned(),
                    progress,
                };
                emit(&mut sink, method, to_value(&event)?).await?;
            }
            (
                vec![Output {
                    bytes: generated.bytes,
                    mime: generated.mime,
                }],
                "video",
            )
        }
    };
    if outputs.is_empty() {
        return Err(error(
            ErrorCode::Unavailable,
            format!("provider returned no {label} output"),
        )
        .retriable(true));
    }
    let artifacts = persist(
        plane,
        ctx,
        &grant.caller,
        &request.id,
        method,
        label,
        outputs,
        &mut sink,
    )
    .await?;
    let duration_ms = millis(started);
    let latency = InvokeLatency {
        queue_ms,
        first_event_ms,
        first_text_ms: None,
        total_ms: duration_ms,
    };
    let benchmark = ComputeBenchmark {
        settings,
        input_bytes,
        output_bytes: artifacts.iter().map(|a| a.size).sum(),
        artifacts: artifacts.iter().map(BenchmarkArtifact::from).collect(),
        ..benchmark(plane, method, requested, &target, latency)
    };
    let (provider_id, model_id) = (target.provider_id, target.model_id);
    match called {
        MediaParams::Image(p) => result::<ImagesGenerate>(&GenerateResult {
            provider_id,
            model_id,
            artifacts,
            requested_options: p.options,
            duration_ms,
            benchmark,
        }),
        MediaParams::Speech(p) => result::<SpeechGenerate>(&GenerateResult {
            provider_id,
            model_id,
            artifacts,
            requested_options: p.options,
            duration_ms,
            benchmark,
        }),
        MediaParams::Video(p) => result::<VideosGenerate>(&GenerateResult {
            provider_id,
            model_id,
            artifacts,
            requested_options: p.options,
            duration_ms,
            benchmark,
        }),
    }
}

/// Cuts `text` to the transcription limit; returns whether it was cut.
fn bound_transcript(mut text: String) -> (String, bool) {
    let mut units = 0;
    for (index, c) in text.char_indices() {
        units += c.len_utf16();
        if units > wire_media::AUDIO_TRANSCRIPTION_MAX_TEXT_CHARACTERS {
            text.truncate(index);
            return (text, true);
        }
    }
    (text, false)
}

/// One transcription's input: the audio and what the benchmark record says about it.
struct AudioInput {
    audio: Vec<u8>,
    mime: String,
    file_name: String,
    /// The spool artifact it came from (`audio.transcribeArtifact`).
    artifact: Option<BenchmarkArtifact>,
}

async fn transcribe(
    plane: &ControlPlane,
    ctx: &RequestContext,
    grant: &Grant,
    requested: RequestedModel,
    input: AudioInput,
) -> Result<Value, ErrorBody> {
    let (started, queue_ms) = accepted(grant);
    let target = resolve(plane, &requested, ModelKind::Transcription)?;
    let input_bytes = input.audio.len() as u64;
    let request = TranscriptionRequest {
        model: Some(target.model_id.clone()),
        audio: input.audio,
        file_name: input.file_name,
        mime: input.mime.clone(),
        language: None,
    };
    let transcription = tokio::select! {
        t = target.provider.transcribe(&request) => t.map_err(|e| provider_failure(&e, "transcription"))?,
        () = ctx.cancel.cancelled() => return Err(cancelled()),
    };
    let first_event_ms = millis(started);
    let (text, truncated) = bound_transcript(transcription.text);
    let elapsed = started.elapsed();
    let latency = InvokeLatency {
        queue_ms,
        first_event_ms: Some(first_event_ms),
        first_text_ms: (!text.is_empty()).then_some(first_event_ms),
        total_ms: u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX),
    };
    let benchmark = ComputeBenchmark {
        input_bytes,
        output_bytes: text.len() as u64,
        input_artifact: input.artifact,
        ..benchmark(plane, grant.method, requested, &target, latency)
    };
    result::<TranscribeArtifact>(&TranscriptionResult {
        provider_id: target.provider_id,
        model_id: target.model_id,
        text,
        truncated,
        input_bytes,
        mime_type: input.mime,
        duration_ms: elapsed.as_secs_f64() * 1000.0,
        benchmark,
    })
}

async fn transcribe_artifact(
    plane: &ControlPlane,
    ctx: &RequestContext,
    grant: &Grant,
    p: wire_media::TranscribeArtifactParams,
) -> Result<Value, ErrorBody> {
    let owner = spool_owner(&grant.caller);
    let (meta, mut reader) = plane
        .inner
        .spool
        .read(&owner, &p.artifact_id)
        .await
        .map_err(|e| spool_error(&e))?;
    if meta.size > wire_media::AUDIO_TRANSCRIPTION_MAX_INPUT_BYTES {
        return Err(error(
            ErrorCode::BodyTooLarge,
            "artifact is over the transcription input limit",
        ));
    }
    let mime = meta.mime_type.to_ascii_lowercase();
    if !wire_media::is_audio_mime(&mime) {
        return Err(error(ErrorCode::InvalidRequest, "artifact is not audio"));
    }
    let mut audio = Vec::with_capacity(usize::try_from(meta.size).unwrap_or(0));
    reader.read_to_end(&mut audio).await.map_err(|e| {
        error(
            ErrorCode::Unavailable,
            format!("artifact not readable: {e}"),
        )
        .retriable(true)
    })?;
    let artifact = BenchmarkArtifact {
        id: meta.id,
        mime_type: meta.mime_type,
        size: meta.size,
        sha256: meta.sha256,
    };
    let requested = RequestedModel {
        provider_id: p.provider_id,
        model_id: p.model_id,
    };
    let input = AudioInput {
        audio,
        mime,
        file_name: meta.filename,
        artifact: Some(artifact),
    };
    transcribe(plane, ctx, grant, requested, input).await
}

/// `/v1/upload` methods of this module (`audio.transcribeUpload`).
pub(super) async fn upload(
    plane: &ControlPlane,
    ctx: &RequestContext,
    grant: &Grant,
    request: UploadRequestEnvelope,
    file: UploadedFile,
) -> Result<Value, ErrorBody> {
    let p = params::<TranscribeUpload>(request.request().params.clone())?;
    if file.size == 0 {
        return Err(error(ErrorCode::InvalidRequest, "the upload is empty"));
    }
    if file.size > wire_media::AUDIO_TRANSCRIPTION_MAX_INPUT_BYTES {
        return Err(error(
            ErrorCode::BodyTooLarge,
            "the upload is over the transcription input limit",
        ));
    }
    let audio = tokio::fs::read(&file.path).await.map_err(|e| {
        error(ErrorCode::Unavailable, format!("upload not readable: {e}")).retriable(true)
    })?;
    let requested = RequestedModel {
        provider_id: p.provider_id,
        model_id: p.model_id,
    };
    let input = AudioInput {
        audio,
        mime: p.mime_type,
        file_name: p.filename.unwrap_or_else(|| "audio".to_owned()),
        artifact: None,
    };
    transcribe(plane, ctx, grant, requested, input).await
}
