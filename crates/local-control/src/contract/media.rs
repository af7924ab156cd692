//! `images.generate`, `speech.generate`, `videos.generate` (streamed: `started`, our `progress`, then one
//! `artifact` record per output) and `audio.transcribeUpload` / `audio.transcribeArtifact`.
//!
//! Source: DeepChat `src/shared/contracts/routes/media.routes.ts` (`MediaProviderIdSchema`,
//! `MediaModelIdSchema`, `MediaPromptSchema`, the public option schemas, `MediaGenerationEventSchema`, the three
//! routes) and `src/shared/contracts/routes/audio.routes.ts` (`AUDIO_TRANSCRIPTION_MAX_INPUT_BYTES`,
//! `AudioInputMimeTypeSchema`, `AudioInputFilenameSchema`, the two transcription routes). Where we differ:
//! `videos.generate` also streams `{"type":"progress","status":"in_progress","progress":50}` records (DeepChat's
//! CLI shows none; the issue asks for progress), and image options accept `n` only through `size` (one image per
//! call unless the provider returns more). As with `models.invoke`, `providerId` may be absent (`builtin`) and
//! `modelId` may be absent with the built-in provider (its model of the method's kind); every result carries a
//! [`ComputeBenchmark`] whose `requested` says what was given.

use serde::{Deserialize, Serialize};

use super::artifacts::{ArtifactMetadata, check_artifact_id};
use super::models::{ComputeBenchmark, check_requested_ids};
use super::serde_util::{present, trim_js};
use super::{ContractError, Method, Problem, Validate, check_len, check_range, js_len};

/// Largest audio input (`AUDIO_TRANSCRIPTION_MAX_INPUT_BYTES`, 25 MiB).
pub const AUDIO_TRANSCRIPTION_MAX_INPUT_BYTES: u64 = 25 * 1024 * 1024;
/// Longest transcription text (`AUDIO_TRANSCRIPTION_MAX_TEXT_CHARACTERS`); longer text is cut and flagged.
pub const AUDIO_TRANSCRIPTION_MAX_TEXT_CHARACTERS: usize = 1_000_000;
/// Longest prompt or text to speak (`MediaPromptSchema`, 64 Ki characters).
pub const MEDIA_PROMPT_MAX_CHARACTERS: usize = 64 * 1024;
/// TTS formats (`TTS_RESPONSE_FORMAT_VALUES`).
pub const TTS_RESPONSE_FORMATS: &[&str] = &["mp3", "opus", "aac", "flac", "wav", "pcm"];

fn check_ids(provider: &str, model: &str) -> Result<(), ContractError> {
    check_len("providerId", provider, 1, 128)?;
    check_len("modelId", model, 1, 256)
}

fn check_prompt(field: &'static str, prompt: &str) -> Result<(), ContractError> {
    check_len(field, prompt, 1, MEDIA_PROMPT_MAX_CHARACTERS)?;
    if trim_js(prompt).is_empty() {
        return Err(ContractError::field(field, Problem::Blank));
    }
    Ok(())
}

fn check_option_text(field: &'static str, value: &Option<String>) -> Result<(), ContractError> {
    match value {
        Some(v) => check_len(field, v, 1, 32),
        None => Ok(()),
    }
}

/// `PublicImageGenerationOptionsSchema` (strict), the subset an OpenAI-compatible provider takes:
/// `{"size":"1024x1024"}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ImageOptions {
    /// `<width>x<height>`, 1..=32 characters.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub size: Option<String>,
}

/// `PublicVideoGenerationOptionsSchema` (strict), the subset an OpenAI-compatible provider takes:
/// `{"seconds":"4","size":"1280x720"}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct VideoOptions {
    /// Length in seconds as text, 1..=32 characters.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub seconds: Option<String>,
    /// `<width>x<height>`, 1..=32 characters.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub size: Option<String>,
}

/// `PublicSpeechGenerationOptionsSchema` (strict): `{"voice":"alloy","responseFormat":"wav"}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SpeechOptions {
    /// 1..=128 characters.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub voice: Option<String>,
    /// One of [`TTS_RESPONSE_FORMATS`].
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub response_format: Option<String>,
    /// 0.25..=4.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub speed: Option<f64>,
}

/// Params of `images.generate` and `videos.generate` (strict): `{"providerId","modelId","prompt","options"?}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(
    rename_all = "camelCase",
    deny_unknown_fields,
    bound(deserialize = "O: Deserialize<'de>")
)]
pub struct GenerateParams<O> {
    /// Provider id, 1..=128; absent = `builtin`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub provider_id: Option<String>,
    /// Model id, 1..=256; absent = the built-in model of the method's kind (built-in provider only).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub model_id: Option<String>,
    /// 1..=65536 characters, not blank.
    pub prompt: String,
    /// Provider options.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub options: Option<O>,
}

impl Validate for GenerateParams<ImageOptions> {
    fn validate(&self) -> Result<(), ContractError> {
        check_requested_ids(self.provider_id.as_deref(), self.model_id.as_deref())?;
        check_prompt("prompt", &self.prompt)?;
        if let Some(o) = &self.options {
            check_option_text("options.size", &o.size)?;
        }
        Ok(())
    }
}

impl Validate for GenerateParams<VideoOptions> {
    fn validate(&self) -> Result<(), ContractError> {
        check_requested_ids(self.provider_id.as_deref(), self.model_id.as_deref())?;
        check_prompt("prompt", &self.prompt)?;
        if let Some(o) = &self.options {
            check_option_text("options.seconds", &o.seconds)?;
            check_option_text("options.size", &o.size)?;
        }
        Ok(())
    }
}

/// Params of `speech.generate` (strict): `{"providerId","modelId","text","options"?}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SpeechParams {
    /// Provider id, 1..=128; absent = `builtin`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub provider_id: Option<String>,
    /// Model id, 1..=256; absent = the built-in model of the method's kind (built-in provider only).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub model_id: Option<String>,
    /// 1..=65536 characters, not blank.
    pub text: String,
    /// Provider options.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub options: Option<SpeechOptions>,
}

impl Validate for SpeechParams {
    fn validate(&self) -> Result<(), ContractError> {
        check_requested_ids(self.provider_id.as_deref(), self.model_id.as_deref())?;
        check_prompt("text", &self.text)?;
        if let Some(o) = &self.options {
            if let Some(voice) = &o.voice {
                check_len("options.voice", voice, 1, 128)?;
            }
            if let Some(format) = &o.response_format
                && !TTS_RESPONSE_FORMATS.contains(&format.as_str())
            {
                return Err(ContractError::field(
                    "options.responseFormat",
                    Problem::BadFormat,
                ));
            }
            if let Some(speed) = o.speed {
                if !speed.is_finite() {
                    return Err(ContractError::field("options.speed", Problem::OutOfRange));
                }
                check_range("options.speed", speed, 0.25, 4.0)?;
            }
        }
        Ok(())
    }
}

/// Result of the three generate methods (strict): `{"providerId","modelId","artifacts":[…],
/// "requestedOptions"?,"durationMs","benchmark"}`; images 1..=8 artifacts, videos 1..=4, speech exactly 1.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(
    rename_all = "camelCase",
    deny_unknown_fields,
    bound(deserialize = "O: Deserialize<'de>")
)]
pub struct GenerateResult<O> {
    /// Provider id.
    pub provider_id: String,
    /// Model id.
    pub model_id: String,
    /// The outputs, as spool artifacts (ids and metadata; bytes through `GET /v1/artifacts/:id`).
    pub artifacts: Vec<ArtifactMetadata>,
    /// The options asked for.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub requested_options: Option<O>,
    /// Whole call, milliseconds (equals `benchmark.latency.totalMs`).
    pub duration_ms: u64,
    /// Benchmark facts.
    pub benchmark: ComputeBenchmark,
}

fn check_artifacts(list: &[ArtifactMetadata], min: usize, max: usize) -> Result<(), ContractError> {
    if list.len() < min {
        return Err(ContractError::field("artifacts", Problem::TooShort));
    }
    if list.len() > max {
        return Err(ContractError::field("artifacts", Problem::TooLong));
    }
    list.iter().try_for_each(Validate::validate)
}

impl Validate for GenerateResult<ImageOptions> {
    fn validate(&self) -> Result<(), ContractError> {
        check_ids(&self.provider_id, &self.model_id)?;
        self.benchmark.validate()?;
        check_artifacts(&self.artifacts, 1, 8)
    }
}

impl Validate for GenerateResult<VideoOptions> {
    fn validate(&self) -> Result<(), ContractError> {
        check_ids(&self.provider_id, &self.model_id)?;
        self.benchmark.validate()?;
        check_artifacts(&self.artifacts, 1, 4)
    }
}

impl Validate for GenerateResult<SpeechOptions> {
    fn validate(&self) -> Result<(), ContractError> {
        check_ids(&self.provider_id, &self.model_id)?;
        self.benchmark.validate()?;
        check_artifacts(&self.artifacts, 1, 1)
    }
}

/// One stream record's `data` of the generate methods (`MediaGenerationEventSchema` plus `progress`):
/// `{"type":"started","providerId":…,"modelId":…}`, `{"type":"progress","status":"in_progress","progress":50}`,
/// `{"type":"artifact","index":0,"artifact":{…}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum MediaEvent {
    /// The provider call starts.
    Started {
        /// Provider id.
        #[serde(rename = "providerId")]
        provider_id: String,
        /// Model id.
        #[serde(rename = "modelId")]
        model_id: String,
    },
    /// A video job's state (ours).
    Progress {
        /// `queued`, `in_progress`, `completed`.
        status: String,
        /// Percent, 0..=100.
        progress: u8,
    },
    /// One stored output.
    Artifact {
        /// Its position in `artifacts`.
        index: u32,
        /// Its metadata.
        artifact: ArtifactMetadata,
    },
}

/// `images.generate` (stream).
#[derive(Debug, Clone, Copy)]
pub struct ImagesGenerate;

impl Method for ImagesGenerate {
    const NAME: &'static str = "images.generate";
    type Params = GenerateParams<ImageOptions>;
    type Result = GenerateResult<ImageOptions>;
}

/// `videos.generate` (stream).
#[derive(Debug, Clone, Copy)]
pub struct VideosGenerate;

impl Method for VideosGenerate {
    const NAME: &'static str = "videos.generate";
    type Params = GenerateParams<VideoOptions>;
    type Result = GenerateResult<VideoOptions>;
}

/// `speech.generate` (stream).
#[derive(Debug, Clone, Copy)]
pub struct SpeechGenerate;

impl Method for SpeechGenerate {
    const NAME: &'static str = "speech.generate";
    type Params = SpeechParams;
    type Result = GenerateResult<SpeechOptions>;
}

/// `AudioInputMimeTypeSchema`: trimmed, lowercased, 7..=255 characters, `audio/<token>(;k=v)*`.
pub fn is_audio_mime(value: &str) -> bool {
    let len = js_len(value);
    if !(7..=255).contains(&len) {
        return false;
    }
    let token = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "!#$&^_.+-".contains(c))
    };
    let mut parts = value.split(';');
    let Some(subtype) = parts.next().and_then(|t| t.strip_prefix("audio/")) else {
        return false;
    };
    token(subtype)
        && parts.all(|p| {
            p.trim_start()
                .split_once('=')
                .is_some_and(|(k, v)| token(k) && token(v))
        })
}

fn check_audio_mime(value: &str) -> Result<(), ContractError> {
    if is_audio_mime(value) {
        Ok(())
    } else {
        Err(ContractError::field("mimeType", Problem::BadFormat))
    }
}

/// Params of `audio.transcribeUpload` (strict; the envelope of the upload, the body is the audio):
/// `{"providerId":"builtin","modelId":"builtin-transcribe","mimeType":"audio/wav","filename":"a.wav"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TranscribeUploadParams {
    /// Provider id, 1..=128; absent = `builtin`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub provider_id: Option<String>,
    /// Model id, 1..=256; absent = the built-in model of the method's kind (built-in provider only).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub model_id: Option<String>,
    /// Lowercased on decode; see [`is_audio_mime`].
    #[serde(deserialize_with = "lowercase_trimmed")]
    pub mime_type: String,
    /// A file name (no `/`, `\`, controls, not `.`/`..`), 1..=255 after trim.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "super::serde_util::trimmed_opt"
    )]
    pub filename: Option<String>,
}

fn lowercase_trimmed<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let s = String::deserialize(d)?;
    Ok(trim_js(&s).to_lowercase())
}

impl Validate for TranscribeUploadParams {
    fn validate(&self) -> Result<(), ContractError> {
        check_requested_ids(self.provider_id.as_deref(), self.model_id.as_deref())?;
        check_audio_mime(&self.mime_type)?;
        if let Some(name) = &self.filename {
            check_len("filename", name, 1, 255)?;
            if name == "."
                || name == ".."
                || name
                    .chars()
                    .any(|c| c == '/' || c == '\\' || c.is_control())
            {
                return Err(ContractError::field("filename", Problem::BadFormat));
            }
        }
        Ok(())
    }
}

/// Params of `audio.transcribeArtifact` (strict): `{"providerId","modelId","artifactId"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TranscribeArtifactParams {
    /// Provider id, 1..=128; absent = `builtin`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub provider_id: Option<String>,
    /// Model id, 1..=256; absent = the built-in model of the method's kind (built-in provider only).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub model_id: Option<String>,
    /// An artifact the caller owns.
    pub artifact_id: String,
}

impl Validate for TranscribeArtifactParams {
    fn validate(&self) -> Result<(), ContractError> {
        check_requested_ids(self.provider_id.as_deref(), self.model_id.as_deref())?;
        check_artifact_id("artifactId", &self.artifact_id)
    }
}

/// Result of both transcription methods (strict):
/// `{"providerId","modelId","text","truncated":false,"inputBytes":1234,"mimeType":"audio/wav","durationMs":12,
/// "benchmark":{…}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TranscriptionResult {
    /// Provider id.
    pub provider_id: String,
    /// Model id.
    pub model_id: String,
    /// The text, at most 1 000 000 characters.
    pub text: String,
    /// The provider's text was longer and was cut.
    pub truncated: bool,
    /// Bytes of audio, 1..=25 MiB.
    pub input_bytes: u64,
    /// The audio's media type.
    pub mime_type: String,
    /// Whole call, milliseconds (≤ 24 h).
    pub duration_ms: f64,
    /// Benchmark facts.
    pub benchmark: ComputeBenchmark,
}

impl Validate for TranscriptionResult {
    fn validate(&self) -> Result<(), ContractError> {
        check_ids(&self.provider_id, &self.model_id)?;
        self.benchmark.validate()?;
        check_len(
            "text",
            &self.text,
            0,
            AUDIO_TRANSCRIPTION_MAX_TEXT_CHARACTERS,
        )?;
        check_range(
            "inputBytes",
            self.input_bytes,
            1,
            AUDIO_TRANSCRIPTION_MAX_INPUT_BYTES,
        )?;
        check_audio_mime(&self.mime_type)?;
        if !self.duration_ms.is_finite() {
            return Err(ContractError::field("durationMs", Problem::OutOfRange));
        }
        check_range("durationMs", self.duration_ms, 0.0, 24.0 * 60.0 * 60_000.0)
    }
}

/// `audio.transcribeUpload` (upload: the envelope in a header, the audio as the body).
#[derive(Debug, Clone, Copy)]
pub struct TranscribeUpload;

impl Method for TranscribeUpload {
    const NAME: &'static str = "audio.transcribeUpload";
    type Params = TranscribeUploadParams;
    type Result = TranscriptionResult;
}

/// `audio.transcribeArtifact` (rpc; the agent path: an artifact id, never bytes).
#[derive(Debug, Clone, Copy)]
pub struct TranscribeArtifact;

impl Method for TranscribeArtifact {
    const NAME: &'static str = "audio.transcribeArtifact";
    type Params = TranscribeArtifactParams;
    type Result = TranscriptionResult;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::decode_params;
    use serde_json::json;

    #[test]
    fn media_params_follow_the_zod_limits() {
        let image = |v: serde_json::Value| {
            decode_params::<ImagesGenerate>(v)
                .map(|_| ())
                .map_err(|e| e.code())
        };
        assert_eq!(
            image(json!({"providerId":"builtin","modelId":"m","prompt":"a cat"})),
            Ok(())
        );
        assert_eq!(
            image(json!({"providerId":"builtin","modelId":"m","prompt":"  "})),
            Err("blank")
        );
        assert_eq!(
            image(json!({"providerId":"b","modelId":"m","prompt":"x","options":{"quality":"hd"}})),
            Err("invalid_shape")
        );
        let speech = |v: serde_json::Value| {
            decode_params::<SpeechGenerate>(v)
                .map(|_| ())
                .map_err(|e| e.code())
        };
        assert_eq!(
            speech(
                json!({"providerId":"b","modelId":"m","text":"hi","options":{"responseFormat":"wav","speed":4}})
            ),
            Ok(())
        );
        assert_eq!(
            speech(
                json!({"providerId":"b","modelId":"m","text":"hi","options":{"responseFormat":"ogg"}})
            ),
            Err("bad_format")
        );
        let upload = |v: serde_json::Value| {
            decode_params::<TranscribeUpload>(v)
                .map(|p| p.mime_type)
                .map_err(|e| e.code())
        };
        assert_eq!(
            upload(json!({"providerId":"b","modelId":"m","mimeType":" Audio/WAV "})),
            Ok("audio/wav".to_owned())
        );
        assert_eq!(
            upload(json!({"providerId":"b","modelId":"m","mimeType":"video/mp4"})),
            Err("bad_format")
        );
        assert_eq!(
            upload(
                json!({"providerId":"b","modelId":"m","mimeType":"audio/wav","filename":"../a"})
            ),
            Err("bad_format")
        );
    }

    #[test]
    fn media_events_round_trip() {
        for event in [
            json!({"type":"started","providerId":"b","modelId":"m"}),
            json!({"type":"progress","status":"in_progress","progress":50}),
        ] {
            let typed: MediaEvent = serde_json::from_value(event.clone()).expect("event");
            assert_eq!(serde_json::to_value(typed).expect("json"), event);
        }
    }
}
