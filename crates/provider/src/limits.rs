//! Bounds of provider calls: time, response bytes per kind, SSE event size, request payloads.

use std::time::Duration;

/// Bounds and timeouts of provider calls. Every call is bounded by default.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Longest wait for the TCP/TLS connection. Default 10 s; on overflow `provider_unreachable`.
    pub connect_timeout: Duration,
    /// Longest wait for the response head and then for each next chunk of the body. Default 120 s;
    /// on overflow `provider_timeout`.
    pub idle_timeout: Duration,
    /// Longest whole call, from sending the request to the last body byte (a video: from create to the end of
    /// the download, polls included). Default 10 min; on overflow `provider_timeout`.
    pub total_timeout: Duration,
    /// Largest single server-sent event, in bytes. Default 1 MiB; on overflow `provider_response_too_large`
    /// (`provider_bad_response` through awp-agent's older mapping is not used any more).
    pub max_event_bytes: usize,
    /// Largest streamed reply text (text plus reasoning), in bytes of UTF-8. Default 4 MiB; on overflow
    /// `provider_reply_too_long` (what was streamed stays streamed; the call fails).
    pub max_reply_bytes: usize,
    /// Largest JSON response (model list, transcription, video status, image JSON without the image bytes
    /// is counted together with them: see `max_image_bytes`). Default 4 MiB; on overflow
    /// `provider_response_too_large`.
    pub max_json_bytes: usize,
    /// Largest image response (the JSON with base64 images, or one downloaded image). Default 48 MiB;
    /// on overflow `provider_response_too_large`.
    pub max_image_bytes: usize,
    /// Largest speech response body. Default 32 MiB; on overflow `provider_response_too_large`.
    pub max_audio_bytes: usize,
    /// Largest video download. Default 256 MiB; on overflow `provider_response_too_large`.
    pub max_video_bytes: usize,
    /// Largest audio upload for transcription. Default 25 MiB (OpenAI's documented limit); over it
    /// `provider_input_too_large` before anything is sent.
    pub max_upload_bytes: usize,
    /// Largest prompt or text to speak, in bytes. Default 1 MiB for prompts; speech text is further bounded
    /// by [`Limits::max_speech_chars`]. Over it `provider_input_too_large`.
    pub max_prompt_bytes: usize,
    /// Most characters of text to speak. Default 4096 (OpenAI's `input` limit); over it
    /// `provider_input_too_large`.
    pub max_speech_chars: usize,
    /// Pause between two polls of a video job. Default 2 s.
    pub video_poll_interval: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(120),
            total_timeout: Duration::from_secs(600),
            max_event_bytes: 1024 * 1024,
            max_reply_bytes: 4 * 1024 * 1024,
            max_json_bytes: 4 * 1024 * 1024,
            max_image_bytes: 48 * 1024 * 1024,
            max_audio_bytes: 32 * 1024 * 1024,
            max_video_bytes: 256 * 1024 * 1024,
            max_upload_bytes: 25 * 1024 * 1024,
            max_prompt_bytes: 1024 * 1024,
            max_speech_chars: 4096,
            video_poll_interval: Duration::from_secs(2),
        }
    }
}
