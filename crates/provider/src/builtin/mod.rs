//! The built-in provider: deterministic, offline, keyless; every capability makes real output.
//!
//! It is a demo, not a model. Same input, same bytes:
//! - **chat** (`builtin-demo`): `You said: <last user text> (turn <n> of this session; before that you said:
//!   <previous user text>)`, streamed word by word, then the finish reason (`stop`, or `length` when
//!   `max_tokens` words cut it) and usage counted in whitespace-separated words (an image counts 2);
//! - **images** (`builtin-image`): an RGB PNG (default 256x256, at most 1024 per side) whose pattern and
//!   colours come from SHA-256 of the prompt and the image's index;
//! - **speech** (`builtin-speech`): a 16 kHz mono PCM16 WAV carrying the text as tones (see `wav.rs`);
//! - **transcription** (`builtin-transcribe`): decodes that tone code from the samples with Goertzel, so its
//!   own speech comes back as the spoken text and other audio as an empty text;
//! - **video** (`builtin-video`): an uncompressed AVI (default 160x120, 2 s, at 8 frames per second; at most
//!   640x480 and 10 s) of a bar moving over a gradient coloured from the prompt's hash, reported through
//!   `queued` → `in_progress` (50) → `completed` (100).

mod avi;
mod png;
mod wav;

use sha2::{Digest, Sha256};

use crate::chat::{ChatRequest, ContentPart, FinishReason, ReplyStream, Role, StreamItem, Usage};
use crate::error::ProviderError;
use crate::limits::Limits;
use crate::media::{
    GeneratedAudio, GeneratedImage, GeneratedVideo, ImageRequest, MAX_IMAGES_PER_REQUEST,
    ModelInfo, SpeechRequest, Transcription, TranscriptionRequest, VideoJob, VideoRequest,
    VideoStatus, parse_size,
};
use crate::openai::{check_audio_upload, check_speech_text};

/// The built-in chat model.
pub const BUILTIN_MODEL: &str = "builtin-demo";
/// The built-in image model.
pub const BUILTIN_IMAGE_MODEL: &str = "builtin-image";
/// The built-in speech model.
pub const BUILTIN_SPEECH_MODEL: &str = "builtin-speech";
/// The built-in transcription model.
pub const BUILTIN_TRANSCRIPTION_MODEL: &str = "builtin-transcribe";
/// The built-in video model.
pub const BUILTIN_VIDEO_MODEL: &str = "builtin-video";

const VIDEO_FPS: u32 = 8;

/// The built-in provider (see the module docs). Holds only its [`Limits`].
#[derive(Clone, Debug, Default)]
pub struct BuiltinProvider {
    limits: Limits,
}

fn word_count(text: &str) -> u64 {
    text.split_whitespace().count() as u64
}

fn seed(parts: &[&[u8]]) -> [u8; 32] {
    let mut hash = Sha256::new();
    for part in parts {
        hash.update((part.len() as u64).to_le_bytes());
        hash.update(part);
    }
    hash.finalize().into()
}

impl BuiltinProvider {
    /// A built-in provider bounded by `limits` (prompt, speech and upload sizes).
    pub fn new(limits: Limits) -> Self {
        Self { limits }
    }

    /// The models it offers, one per capability.
    pub fn models() -> Vec<ModelInfo> {
        [
            BUILTIN_MODEL,
            BUILTIN_IMAGE_MODEL,
            BUILTIN_SPEECH_MODEL,
            BUILTIN_TRANSCRIPTION_MODEL,
            BUILTIN_VIDEO_MODEL,
        ]
        .into_iter()
        .map(|id| ModelInfo {
            id: id.to_owned(),
            owned_by: Some("agentwire".to_owned()),
        })
        .collect()
    }

    fn check_prompt(&self, prompt: &str) -> Result<(), ProviderError> {
        if prompt.trim().is_empty() {
            return Err(ProviderError::InvalidInput {
                reason: "empty prompt",
            });
        }
        if prompt.len() > self.limits.max_prompt_bytes {
            return Err(ProviderError::InputTooLarge);
        }
        Ok(())
    }

    /// The echo reply of the module docs.
    ///
    /// # Errors
    /// [`ProviderError::InputTooLarge`] when the messages' text is over [`Limits::max_prompt_bytes`].
    pub fn chat(&self, request: &ChatRequest) -> Result<ReplyStream, ProviderError> {
        if request.text_bytes() > self.limits.max_prompt_bytes.max(32 * 1024 * 1024) {
            return Err(ProviderError::InputTooLarge);
        }
        let users: Vec<_> = request
            .messages
            .iter()
            .filter(|m| m.role == Role::User)
            .collect();
        let last = users.last();
        let current = last.map(|m| m.joined_text()).unwrap_or_default();
        let current = if current.is_empty() {
            "(no text)".to_owned()
        } else {
            current
        };
        let images = last.map_or(0, |m| {
            m.content
                .iter()
                .filter(|p| matches!(p, ContentPart::Image { .. }))
                .count()
        });
        let mut reply = format!("You said: {current} (turn {} of this session", users.len());
        if users.len() >= 2 {
            let previous = users[users.len() - 2].joined_text();
            reply.push_str(&format!("; before that you said: {previous}"));
        }
        reply.push(')');
        if images > 0 {
            reply.push_str(&format!(
                " [{images} image(s) received; the built-in demo provider does not look at images]"
            ));
        }
        let input_tokens = request
            .messages
            .iter()
            .map(|m| {
                word_count(&m.joined_text())
                    + 2 * m
                        .content
                        .iter()
                        .filter(|p| matches!(p, ContentPart::Image { .. }))
                        .count() as u64
            })
            .sum();
        // Stream word by word, keeping the whitespace with the preceding word.
        let mut words = Vec::new();
        let mut start = 0;
        for (index, ch) in reply.char_indices() {
            if ch == ' ' {
                words.push(reply[start..=index].to_owned());
                start = index + 1;
            }
        }
        if start < reply.len() {
            words.push(reply[start..].to_owned());
        }
        let mut finish = "stop";
        if let Some(max) = request.max_tokens {
            let max = max as usize;
            if words.len() > max {
                words.truncate(max);
                finish = "length";
            }
        }
        let output_tokens = words.iter().map(|w| word_count(w)).sum();
        let mut items: Vec<StreamItem> = words.into_iter().map(StreamItem::Text).collect();
        items.push(StreamItem::Finish(FinishReason(finish.to_owned())));
        items.push(StreamItem::Usage(Usage {
            input_tokens,
            output_tokens,
        }));
        Ok(ReplyStream::scripted(items))
    }

    /// PNG images (module docs).
    ///
    /// # Errors
    /// [`ProviderError::InvalidInput`] for an empty prompt, a bad size or too many images;
    /// [`ProviderError::InputTooLarge`] for a prompt over the limit.
    pub fn generate_images(
        &self,
        request: &ImageRequest,
    ) -> Result<Vec<GeneratedImage>, ProviderError> {
        self.check_prompt(&request.prompt)?;
        let n = request.n.max(1);
        if n > MAX_IMAGES_PER_REQUEST {
            return Err(ProviderError::InvalidInput {
                reason: "too many images",
            });
        }
        let (width, height) = match &request.size {
            None => (256, 256),
            Some(size) => parse_size(size, 1024).ok_or(ProviderError::InvalidInput {
                reason: "size is not <width>x<height> within 1024x1024",
            })?,
        };
        Ok((0..n)
            .map(|index| {
                let seed = seed(&[request.prompt.as_bytes(), &index.to_le_bytes()]);
                let cells = u32::from(seed[3] % 8) + 2;
                let bytes = png::encode_rgb(width, height, |x, y| {
                    let cx = x * cells / width;
                    let cy = y * cells / height;
                    let base = if (cx + cy) % 2 == 0 { 0 } else { 3 };
                    let shade = ((x + y) * 64 / (width + height)) as u8;
                    [
                        seed[base].wrapping_add(shade),
                        seed[base + 1].wrapping_add(shade),
                        seed[base + 2].wrapping_add(shade),
                    ]
                });
                GeneratedImage {
                    bytes,
                    mime: "image/png".to_owned(),
                    revised_prompt: None,
                }
            })
            .collect())
    }

    /// A WAV carrying the text as tones (module docs).
    ///
    /// # Errors
    /// [`ProviderError::InvalidInput`] for empty text or a format other than `wav`;
    /// [`ProviderError::InputTooLarge`] for text over [`Limits::max_speech_chars`].
    pub fn generate_speech(
        &self,
        request: &SpeechRequest,
    ) -> Result<GeneratedAudio, ProviderError> {
        check_speech_text(&request.input, &self.limits)?;
        if request.format.as_deref().is_some_and(|f| f != "wav") {
            return Err(ProviderError::InvalidInput {
                reason: "the built-in provider speaks wav only",
            });
        }
        let bytes = wav::encode_pcm16_mono(&wav::speak(&request.input), wav::SAMPLE_RATE);
        if bytes.len() > self.limits.max_audio_bytes {
            return Err(ProviderError::ResponseTooLarge);
        }
        Ok(GeneratedAudio {
            bytes,
            mime: "audio/wav".to_owned(),
        })
    }

    /// The text a WAV's tone code carries; empty for audio without it.
    ///
    /// # Errors
    /// [`ProviderError::InputTooLarge`] over [`Limits::max_upload_bytes`]; [`ProviderError::InvalidInput`]
    /// for empty audio or audio that is not a PCM16 WAV file.
    pub fn transcribe(
        &self,
        request: &TranscriptionRequest,
    ) -> Result<Transcription, ProviderError> {
        check_audio_upload(&request.audio, &self.limits)?;
        let (samples, rate) =
            wav::decode_pcm16(&request.audio).ok_or(ProviderError::InvalidInput {
                reason: "the built-in provider transcribes 16-bit pcm wav only",
            })?;
        Ok(Transcription {
            text: wav::hear(&samples, rate),
        })
    }

    /// An AVI (module docs), reporting `queued`, `in_progress` and `completed` to `on_progress`.
    ///
    /// # Errors
    /// [`ProviderError::InvalidInput`] for an empty prompt, a bad size or length;
    /// [`ProviderError::ResponseTooLarge`] if the video would be over [`Limits::max_video_bytes`].
    pub fn generate_video(
        &self,
        request: &VideoRequest,
        on_progress: &mut (dyn FnMut(&VideoJob) + Send),
    ) -> Result<GeneratedVideo, ProviderError> {
        self.check_prompt(&request.prompt)?;
        let (width, height) = match &request.size {
            None => (160, 120),
            Some(size) => parse_size(size, 640).filter(|(_, h)| *h <= 480).ok_or(
                ProviderError::InvalidInput {
                    reason: "size is not <width>x<height> within 640x480",
                },
            )?,
        };
        let seconds = request.seconds.unwrap_or(2);
        if !(1..=10).contains(&seconds) {
            return Err(ProviderError::InvalidInput {
                reason: "seconds must be 1 to 10",
            });
        }
        let frames = seconds * VIDEO_FPS;
        let stride = ((width * 3 + 3) & !3) as usize;
        if (stride * height as usize + 24) * frames as usize > self.limits.max_video_bytes {
            return Err(ProviderError::ResponseTooLarge);
        }
        let seed = seed(&[
            request.prompt.as_bytes(),
            &width.to_le_bytes(),
            &height.to_le_bytes(),
            &seconds.to_le_bytes(),
        ]);
        let id: String = seed[..8].iter().map(|b| format!("{b:02x}")).collect();
        let id = format!("video_{id}");
        let mut job = VideoJob {
            id: id.clone(),
            status: VideoStatus::Queued,
            progress: 0,
        };
        on_progress(&job);
        job.status = VideoStatus::InProgress;
        job.progress = 50;
        on_progress(&job);
        let bytes = avi::encode_rgb(width, height, VIDEO_FPS, frames, |frame, x, y| {
            let bar = (frame * width / frames.max(1) + x) % width < width / 8 + 1;
            if bar {
                [seed[6], seed[7], seed[8]]
            } else {
                [
                    seed[0].wrapping_add((x * 128 / width) as u8),
                    seed[1].wrapping_add((y * 128 / height) as u8),
                    seed[2],
                ]
            }
        });
        job.status = VideoStatus::Completed;
        job.progress = 100;
        on_progress(&job);
        Ok(GeneratedVideo {
            id,
            bytes,
            mime: "video/x-msvideo".to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chat::ChatMessage;

    async fn collect(stream: &mut ReplyStream) -> Vec<StreamItem> {
        let mut items = Vec::new();
        while let Some(item) = stream.next().await.expect("item") {
            items.push(item);
        }
        items
    }

    #[tokio::test]
    async fn chat_replies_continue_the_history_and_honour_max_tokens() {
        let provider = BuiltinProvider::default();
        let mut request = ChatRequest {
            messages: vec![
                ChatMessage::text(Role::User, "first"),
                ChatMessage::text(Role::Assistant, "You said: first (turn 1 of this session)"),
                ChatMessage::text(Role::User, "second one"),
            ],
            ..ChatRequest::default()
        };
        let items = collect(&mut provider.chat(&request).expect("stream")).await;
        let text: String = items
            .iter()
            .filter_map(|i| match i {
                StreamItem::Text(t) => Some(t.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(
            text,
            "You said: second one (turn 2 of this session; before that you said: first)"
        );
        assert!(items.len() > 4, "streamed in several deltas");
        assert_eq!(
            &items[items.len() - 2..],
            &[
                StreamItem::Finish(FinishReason("stop".into())),
                StreamItem::Usage(Usage {
                    input_tokens: 11,
                    output_tokens: 14
                })
            ]
        );
        request.max_tokens = Some(3);
        let items = collect(&mut provider.chat(&request).expect("stream")).await;
        assert_eq!(
            items,
            [
                StreamItem::Text("You ".into()),
                StreamItem::Text("said: ".into()),
                StreamItem::Text("second ".into()),
                StreamItem::Finish(FinishReason("length".into())),
                StreamItem::Usage(Usage {
                    input_tokens: 11,
                    output_tokens: 3
                })
            ]
        );
    }

    #[test]
    fn media_is_deterministic_and_bounded() {
        let provider = BuiltinProvider::default();
        let image = |prompt: &str| {
            provider
                .generate_images(&ImageRequest {
                    prompt: prompt.into(),
                    size: Some("8x4".into()),
                    ..ImageRequest::default()
                })
                .expect("image")
                .remove(0)
                .bytes
        };
        assert_eq!(image("a cat"), image("a cat"));
        assert_ne!(image("a cat"), image("a dog"));
        let bad = |size: &str| {
            provider
                .generate_images(&ImageRequest {
                    prompt: "x".into(),
                    size: Some(size.into()),
                    ..ImageRequest::default()
                })
                .map(|_| ())
                .map_err(|e| e.code())
        };
        assert_eq!(bad("1024x1024"), Ok(()));
        assert_eq!(bad("1025x1"), Err("provider_invalid_input"));
        assert_eq!(bad("ax1"), Err("provider_invalid_input"));
        let limits = Limits {
            max_speech_chars: 3,
            ..Limits::default()
        };
        let small = BuiltinProvider::new(limits);
        let speak = |text: &str| {
            small
                .generate_speech(&SpeechRequest {
                    input: text.into(),
                    ..SpeechRequest::default()
                })
                .map(|_| ())
                .map_err(|e| e.code())
        };
        assert_eq!(speak("abc"), Ok(()));
        assert_eq!(speak("abcd"), Err("provider_input_too_large"));
        assert_eq!(speak(" "), Err("provider_invalid_input"));
    }
}
