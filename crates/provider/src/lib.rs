//! Model providers for agentwire: an OpenAI-compatible HTTP client and a deterministic built-in provider, behind
//! one [`Provider`] type with one method per capability.
//!
//! Capabilities: streamed chat completions ([`Provider::chat`] → [`ReplyStream`] of text, reasoning, tool
//! calls, finish reason and usage), the model list ([`Provider::list_models`], also the connection test),
//! images, speech, transcription and videos. Binary results are bytes with a media type; storing them (the
//! host's artifact spool) is the caller's job.
//!
//! What it is not: no retries (a [`ProviderError`] says whether a retry can help), no credential storage (an
//! [`ApiKey`] is handed in), no process spawning. All IO is reqwest over rustls in [`OpenAiProvider`]; the
//! chat-chunk decoder and the SSE decoder are sans-IO; the built-in provider does no IO at all.
//!
//! Invariants: every call is bounded ([`Limits`]: connect, idle and total time; response bytes per kind; SSE
//! event size; upload and prompt sizes). Upstream error bodies, messages and headers are never read into this
//! crate's values, so they cannot reach `Display`, `Debug`, logs or callers. Keys print as `***`.
//!
//! Moved here from `bins/awp-agent` (`provider.rs`, `sse.rs`), which now uses this crate.

mod builtin;
mod chat;
mod error;
mod limits;
mod media;
mod openai;
mod sse;

pub use builtin::{
    BUILTIN_IMAGE_MODEL, BUILTIN_MODEL, BUILTIN_SPEECH_MODEL, BUILTIN_TRANSCRIPTION_MODEL,
    BUILTIN_VIDEO_MODEL, BuiltinProvider,
};
pub use chat::{
    ChatMessage, ChatRequest, ContentPart, FinishReason, MAX_TOOL_ARGUMENT_BYTES,
    MAX_TOOL_CALLS_PER_REPLY, ReplyStream, Role, StreamItem, ToolCall, Usage,
};
pub use error::{ApiKey, ApiKeyError, ProviderError, StatusClass};
pub use limits::Limits;
pub use media::{
    GeneratedAudio, GeneratedImage, GeneratedVideo, ImageRequest, MAX_IMAGES_PER_REQUEST,
    ModelInfo, SPEECH_FORMATS, SpeechRequest, Transcription, TranscriptionRequest, VideoJob,
    VideoRequest, VideoStatus,
};
pub use openai::{OpenAiConfig, OpenAiProvider, validate_base_url};
pub use sse::{SseDecoder, SseError};

/// This crate's version (the workspace version), reported with [`Provider::adapter`] as the provider adapter
/// version of a benchmark record.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Where answers come from.
#[derive(Debug)]
pub enum Provider {
    /// The deterministic built-in provider (the default: no network, no key).
    Builtin(BuiltinProvider),
    /// An OpenAI-compatible endpoint.
    OpenAi(OpenAiProvider),
}

impl Default for Provider {
    fn default() -> Self {
        Provider::Builtin(BuiltinProvider::default())
    }
}

impl Provider {
    /// The built-in provider bounded by `limits`.
    pub fn builtin(limits: Limits) -> Self {
        Provider::Builtin(BuiltinProvider::new(limits))
    }

    /// An OpenAI-compatible provider.
    ///
    /// # Errors
    /// See [`OpenAiProvider::new`].
    pub fn openai(config: OpenAiConfig) -> Result<Self, ProviderError> {
        OpenAiProvider::new(config).map(Provider::OpenAi)
    }

    /// The provider an agent's environment selects: OpenAI-compatible when `OPENAI_BASE_URL` is set (key from
    /// `OPENAI_API_KEY`, model from `model` or else `OPENAI_MODEL`), else built-in. Empty values count as unset.
    ///
    /// # Errors
    /// [`ProviderError::UrlInvalid`], [`ProviderError::UrlRejected`], [`ProviderError::MissingModel`],
    /// [`ProviderError::Client`]; an `OPENAI_API_KEY` that is not a valid key is [`ProviderError::Client`].
    pub fn from_vars(
        lookup: impl Fn(&str) -> Option<String>,
        model: Option<&str>,
        limits: Limits,
    ) -> Result<Self, ProviderError> {
        let var = |name: &str| lookup(name).filter(|v| !v.is_empty());
        let Some(base_url) = var("OPENAI_BASE_URL") else {
            return Ok(Provider::builtin(limits));
        };
        validate_base_url(&base_url)?;
        let default_model = model
            .map(str::to_owned)
            .filter(|m| !m.is_empty())
            .or_else(|| var("OPENAI_MODEL"))
            .ok_or(ProviderError::MissingModel)?;
        let api_key = var("OPENAI_API_KEY")
            .map(|key| ApiKey::new(&key).map_err(|_| ProviderError::Client))
            .transpose()?;
        Provider::openai(OpenAiConfig {
            base_url,
            api_key,
            default_model: Some(default_model),
            limits,
        })
    }

    /// The adapter's stable name: `builtin` or `openai-compatible` (with [`VERSION`], the provider adapter of a
    /// benchmark record).
    pub fn adapter(&self) -> &'static str {
        match self {
            Provider::Builtin(_) => "builtin",
            Provider::OpenAi(_) => "openai-compatible",
        }
    }

    /// Whether this is the built-in provider.
    pub fn is_builtin(&self) -> bool {
        matches!(self, Provider::Builtin(_))
    }

    /// The chat model used when a request names none: [`BUILTIN_MODEL`] or the configured default.
    pub fn default_model(&self) -> Option<&str> {
        match self {
            Provider::Builtin(_) => Some(BUILTIN_MODEL),
            Provider::OpenAi(openai) => openai.default_model(),
        }
    }

    /// Starts a streamed chat completion.
    ///
    /// # Errors
    /// A [`ProviderError`] for a failed request or a non-2xx status; later failures come from
    /// [`ReplyStream::next`].
    pub async fn chat(&self, request: &ChatRequest) -> Result<ReplyStream, ProviderError> {
        match self {
            Provider::Builtin(builtin) => builtin.chat(request),
            Provider::OpenAi(openai) => openai.chat(request).await,
        }
    }

    /// The models the provider offers.
    ///
    /// # Errors
    /// See [`OpenAiProvider::list_models`].
    pub async fn list_models(&self) -> Result<Vec<ModelInfo>, ProviderError> {
        match self {
            Provider::Builtin(_) => Ok(BuiltinProvider::models()),
            Provider::OpenAi(openai) => openai.list_models().await,
        }
    }

    /// Generates images.
    ///
    /// # Errors
    /// See [`OpenAiProvider::generate_images`] and [`BuiltinProvider::generate_images`].
    pub async fn generate_images(
        &self,
        request: &ImageRequest,
    ) -> Result<Vec<GeneratedImage>, ProviderError> {
        match self {
            Provider::Builtin(builtin) => builtin.generate_images(request),
            Provider::OpenAi(openai) => openai.generate_images(request).await,
        }
    }

    /// Speaks text.
    ///
    /// # Errors
    /// See [`OpenAiProvider::generate_speech`] and [`BuiltinProvider::generate_speech`].
    pub async fn generate_speech(
        &self,
        request: &SpeechRequest,
    ) -> Result<GeneratedAudio, ProviderError> {
        match self {
            Provider::Builtin(builtin) => builtin.generate_speech(request),
            Provider::OpenAi(openai) => openai.generate_speech(request).await,
        }
    }

    /// Transcribes audio.
    ///
    /// # Errors
    /// See [`OpenAiProvider::transcribe`] and [`BuiltinProvider::transcribe`].
    pub async fn transcribe(
        &self,
        request: &TranscriptionRequest,
    ) -> Result<Transcription, ProviderError> {
        match self {
            Provider::Builtin(builtin) => builtin.transcribe(request),
            Provider::OpenAi(openai) => openai.transcribe(request).await,
        }
    }

    /// Generates a video, reporting each job state to `on_progress`.
    ///
    /// # Errors
    /// See [`OpenAiProvider::generate_video`] and [`BuiltinProvider::generate_video`].
    pub async fn generate_video(
        &self,
        request: &VideoRequest,
        on_progress: &mut (dyn FnMut(&VideoJob) + Send),
    ) -> Result<GeneratedVideo, ProviderError> {
        match self {
            Provider::Builtin(builtin) => builtin.generate_video(request, on_progress),
            Provider::OpenAi(openai) => openai.generate_video(request, on_progress).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from(vars: &[(&str, &str)], model: Option<&str>) -> Result<Provider, ProviderError> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        Provider::from_vars(
            |name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()),
            model,
            Limits::default(),
        )
    }

    #[test]
    fn selection_and_model() {
        let builtin = from(&[], Some("m")).expect("builtin");
        assert!(builtin.is_builtin());
        assert_eq!(builtin.default_model(), Some(BUILTIN_MODEL));
        assert_eq!(builtin.adapter(), "builtin");
        let openai = from(
            &[
                ("OPENAI_BASE_URL", "http://127.0.0.1:1/v1"),
                ("OPENAI_MODEL", "fallback"),
            ],
            None,
        )
        .expect("openai");
        assert_eq!(openai.default_model(), Some("fallback"));
        assert_eq!(openai.adapter(), "openai-compatible");
        assert_eq!(VERSION, env!("CARGO_PKG_VERSION"));
        let openai = from(
            &[
                ("OPENAI_BASE_URL", "http://127.0.0.1:1/v1"),
                ("OPENAI_API_KEY", "sk-secret"),
            ],
            Some("m"),
        )
        .expect("openai");
        assert_eq!(openai.default_model(), Some("m"));
        assert!(!format!("{openai:?}").contains("sk-secret"));
        assert_eq!(
            from(&[("OPENAI_BASE_URL", "http://127.0.0.1:1/v1")], None).map(|_| ()),
            Err(ProviderError::MissingModel)
        );
    }
}
