//! Requests and results of the non-chat capabilities: model lists, images, speech, transcription, videos.
//!
//! Shapes follow the OpenAI endpoints they map to (`GET /v1/models`, `POST /v1/images/generations`,
//! `POST /v1/audio/speech`, `POST /v1/audio/transcriptions`, `POST /v1/videos` + `GET /v1/videos/{id}` +
//! `GET /v1/videos/{id}/content`); binary results are plain bytes with a media type.

/// One model a provider offers (`GET /v1/models` `data[]`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelInfo {
    /// The model id, e.g. `gpt-4o-mini` or `builtin-demo`.
    pub id: String,
    /// `owned_by`, when the provider sent one.
    pub owned_by: Option<String>,
}

/// `POST /v1/images/generations`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ImageRequest {
    /// The model; `None` uses the provider's default.
    pub model: Option<String>,
    /// What to draw (bounded by [`crate::Limits::max_prompt_bytes`]).
    pub prompt: String,
    /// `<width>x<height>`, e.g. `256x256`; `None` lets the provider choose (built-in: 256x256).
    pub size: Option<String>,
    /// How many images, 1..=[`MAX_IMAGES_PER_REQUEST`]; 0 means 1.
    pub n: u32,
}

/// Most images one request may ask for.
pub const MAX_IMAGES_PER_REQUEST: u32 = 4;

/// An image a provider made.
#[derive(Clone, PartialEq, Eq)]
pub struct GeneratedImage {
    /// The encoded image.
    pub bytes: Vec<u8>,
    /// Its media type (`image/png`, …), from the download's `Content-Type` or sniffed from the bytes.
    pub mime: String,
    /// `revised_prompt`, when the provider sent one.
    pub revised_prompt: Option<String>,
}

/// `POST /v1/audio/speech`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SpeechRequest {
    /// The model; `None` uses the provider's default.
    pub model: Option<String>,
    /// The text to speak (at most [`crate::Limits::max_speech_chars`] characters).
    pub input: String,
    /// The voice; `None` is `alloy` (OpenAI's first voice; the built-in provider has one voice).
    pub voice: Option<String>,
    /// `response_format`: one of [`SPEECH_FORMATS`]; `None` is `wav` (the built-in provider makes only `wav`).
    pub format: Option<String>,
}

/// The speech formats OpenAI documents, with their media types.
pub const SPEECH_FORMATS: &[(&str, &str)] = &[
    ("wav", "audio/wav"),
    ("mp3", "audio/mpeg"),
    ("opus", "audio/ogg"),
    ("aac", "audio/aac"),
    ("flac", "audio/flac"),
    ("pcm", "audio/L16"),
];

/// Audio a provider made.
#[derive(Clone, PartialEq, Eq)]
pub struct GeneratedAudio {
    /// The encoded audio.
    pub bytes: Vec<u8>,
    /// Its media type (`audio/wav`, …).
    pub mime: String,
}

/// `POST /v1/audio/transcriptions` (multipart).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct TranscriptionRequest {
    /// The model; `None` uses the provider's default.
    pub model: Option<String>,
    /// The audio file (at most [`crate::Limits::max_upload_bytes`]).
    pub audio: Vec<u8>,
    /// The file name sent in the multipart part (reduced to `[A-Za-z0-9._-]`, at most 64 bytes).
    pub file_name: String,
    /// The file's media type, e.g. `audio/wav`.
    pub mime: String,
    /// An ISO-639-1 language hint, when known.
    pub language: Option<String>,
}

/// A transcription.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transcription {
    /// The text (the provider's `text`).
    pub text: String,
}

/// `POST /v1/videos`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VideoRequest {
    /// The model; `None` uses the provider's default.
    pub model: Option<String>,
    /// What to show.
    pub prompt: String,
    /// Length in seconds; `None` lets the provider choose (built-in: 2, at most 10).
    pub seconds: Option<u32>,
    /// `<width>x<height>`; `None` lets the provider choose (built-in: 160x120, at most 640x480).
    pub size: Option<String>,
}

/// The state of a video job (`status` of the OpenAI video object).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VideoStatus {
    /// `queued`.
    Queued,
    /// `in_progress`.
    InProgress,
    /// `completed`.
    Completed,
    /// `failed`.
    Failed,
}

impl VideoStatus {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            VideoStatus::Queued => "queued",
            VideoStatus::InProgress => "in_progress",
            VideoStatus::Completed => "completed",
            VideoStatus::Failed => "failed",
        }
    }

    pub(crate) fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "queued" => VideoStatus::Queued,
            "in_progress" => VideoStatus::InProgress,
            "completed" => VideoStatus::Completed,
            "failed" => VideoStatus::Failed,
            _ => return None,
        })
    }
}

/// A video job as last seen (`{"id":"video_…","status":"in_progress","progress":40}`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VideoJob {
    /// The job id (`[A-Za-z0-9_-]`, at most 128 bytes).
    pub id: String,
    /// Its state.
    pub status: VideoStatus,
    /// Percent done, 0..=100.
    pub progress: u8,
}

/// A finished video.
#[derive(Clone, PartialEq, Eq)]
pub struct GeneratedVideo {
    /// The job id it came from.
    pub id: String,
    /// The encoded video.
    pub bytes: Vec<u8>,
    /// Its media type (`video/mp4`, `video/x-msvideo`, …).
    pub mime: String,
}

macro_rules! debug_without_bytes {
    ($type:ty, $($field:ident),*) => {
        impl std::fmt::Debug for $type {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($type))
                    $(.field(stringify!($field), &self.$field))*
                    .finish_non_exhaustive()
            }
        }
    };
}

debug_without_bytes!(GeneratedImage, mime, revised_prompt);
debug_without_bytes!(GeneratedAudio, mime);
debug_without_bytes!(GeneratedVideo, id, mime);
debug_without_bytes!(TranscriptionRequest, model, file_name, mime, language);

/// `(width, height)` of a `<width>x<height>` size, each 1..=`max_side`.
pub(crate) fn parse_size(size: &str, max_side: u32) -> Option<(u32, u32)> {
    let (width, height) = size.split_once('x')?;
    let width: u32 = width.parse().ok()?;
    let height: u32 = height.parse().ok()?;
    ((1..=max_side).contains(&width) && (1..=max_side).contains(&height)).then_some((width, height))
}

/// The media type of an image by its magic bytes.
pub(crate) fn sniff_image(bytes: &[u8]) -> Option<&'static str> {
    if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some("image/png")
    } else if bytes.starts_with(&[0xff, 0xd8, 0xff]) {
        Some("image/jpeg")
    } else if bytes.starts_with(b"GIF87a") || bytes.starts_with(b"GIF89a") {
        Some("image/gif")
    } else if bytes.len() >= 12 && bytes.starts_with(b"RIFF") && &bytes[8..12] == b"WEBP" {
        Some("image/webp")
    } else {
        None
    }
}
