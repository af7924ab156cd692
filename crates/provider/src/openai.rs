//! The OpenAI-compatible HTTP client (reqwest with rustls): chat completions over SSE, models, images, speech,
//! transcriptions (multipart), videos (create, poll, download).
//!
//! URL rules: the base URL is an absolute `http(s)` URL without credentials, query or fragment; plain `http://`
//! only to loopback hosts (`localhost`, `127.0.0.0/8`, `::1`). Endpoints are `<base>/<path>` (base
//! `http://127.0.0.1:8080/v1` gives `http://127.0.0.1:8080/v1/chat/completions`). Redirects are not followed.
//! Image URLs a provider returns are downloaded under the same rules and without the `Authorization` header.
//!
//! Every call has a deadline (`Limits::total_timeout`) and an idle bound per awaited step; non-2xx bodies are
//! dropped unread (see [`crate::ProviderError`]).

use std::net::IpAddr;
use std::time::Duration;

use base64::Engine as _;
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::chat::{ChatRequest, ChunkState, ReplyStream, StreamItem};
use crate::error::{ApiKey, ProviderError};
use crate::limits::Limits;
use crate::media::{
    GeneratedAudio, GeneratedImage, GeneratedVideo, ImageRequest, MAX_IMAGES_PER_REQUEST,
    ModelInfo, SPEECH_FORMATS, SpeechRequest, Transcription, TranscriptionRequest, VideoJob,
    VideoRequest, VideoStatus, sniff_image,
};
use crate::sse::{SseDecoder, SseError};

/// Configuration of an OpenAI-compatible provider.
#[derive(Clone, Debug)]
pub struct OpenAiConfig {
    /// The base URL, e.g. `https://api.openai.com/v1` or `http://127.0.0.1:8080/v1`.
    pub base_url: String,
    /// The bearer credential, when the provider needs one.
    pub api_key: Option<ApiKey>,
    /// The model used when a request names none.
    pub default_model: Option<String>,
    /// Bounds of every call.
    pub limits: Limits,
}

/// An OpenAI-compatible provider. `Debug` shows the base URL and model, never the key.
pub struct OpenAiProvider {
    client: reqwest::Client,
    base: reqwest::Url,
    api_key: Option<ApiKey>,
    default_model: Option<String>,
    limits: Limits,
}

impl std::fmt::Debug for OpenAiProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiProvider")
            .field("base", &self.base.as_str())
            .field("api_key", &self.api_key)
            .field("default_model", &self.default_model)
            .finish()
    }
}

/// Checks `base` against the URL rules of the module docs and returns it with a trailing `/`.
///
/// # Errors
/// [`ProviderError::UrlInvalid`] or [`ProviderError::UrlRejected`].
pub fn validate_base_url(base: &str) -> Result<reqwest::Url, ProviderError> {
    let url = check_url(base)?;
    let text = format!("{}/", url.as_str().trim_end_matches('/'));
    reqwest::Url::parse(&text).map_err(|_| ProviderError::UrlInvalid)
}

fn check_url(text: &str) -> Result<reqwest::Url, ProviderError> {
    let url = reqwest::Url::parse(text).map_err(|_| ProviderError::UrlInvalid)?;
    if !url.username().is_empty()
        || url.password().is_some()
        || url.query().is_some()
        || url.fragment().is_some()
    {
        return Err(ProviderError::UrlInvalid);
    }
    let host = url.host_str().ok_or(ProviderError::UrlInvalid)?;
    match url.scheme() {
        "https" => Ok(url),
        "http" if is_loopback(host) => Ok(url),
        "http" => Err(ProviderError::UrlRejected),
        _ => Err(ProviderError::UrlInvalid),
    }
}

fn is_loopback(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

fn map_reqwest_error(error: reqwest::Error) -> ProviderError {
    if error.is_timeout() {
        ProviderError::Timeout
    } else if error.is_connect() {
        ProviderError::Unreachable
    } else if error.is_body() || error.is_decode() {
        ProviderError::BadResponse
    } else {
        ProviderError::Unreachable
    }
}

/// Awaits `future` for at most the idle timeout and never past `deadline`.
async fn within<T>(
    deadline: Instant,
    idle: Duration,
    future: impl Future<Output = T>,
) -> Result<T, ProviderError> {
    let until = deadline.min(Instant::now() + idle);
    tokio::time::timeout_at(until, future)
        .await
        .map_err(|_| ProviderError::Timeout)
}

fn status_error(status: u16) -> ProviderError {
    match status {
        401 | 403 => ProviderError::AuthFailed { status },
        429 => ProviderError::RateLimited,
        status => ProviderError::Http { status },
    }
}

fn content_type(response: &reqwest::Response) -> Option<String> {
    response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            v.split(';')
                .next()
                .unwrap_or_default()
                .trim()
                .to_ascii_lowercase()
        })
}

fn is_simple_mime(mime: &str) -> bool {
    let ok = |part: &str| {
        !part.is_empty()
            && part.len() <= 64
            && part
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b))
    };
    mime.split_once('/').is_some_and(|(a, b)| ok(a) && ok(b))
}

/// A video id this client will put in a URL path, else [`ProviderError::InvalidInput`].
fn check_job_id(id: &str) -> Result<(), ProviderError> {
    if is_job_id(id) {
        Ok(())
    } else {
        Err(ProviderError::InvalidInput {
            reason: "bad video id",
        })
    }
}

fn is_job_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

impl OpenAiProvider {
    /// A provider after the URL rules of the module docs.
    ///
    /// # Errors
    /// [`ProviderError::UrlInvalid`], [`ProviderError::UrlRejected`], [`ProviderError::Client`].
    pub fn new(config: OpenAiConfig) -> Result<Self, ProviderError> {
        let base = validate_base_url(&config.base_url)?;
        let client = reqwest::Client::builder()
            .connect_timeout(config.limits.connect_timeout)
            .read_timeout(config.limits.idle_timeout)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|_| ProviderError::Client)?;
        Ok(Self {
            client,
            base,
            api_key: config.api_key,
            default_model: config.default_model.filter(|m| !m.is_empty()),
            limits: config.limits,
        })
    }

    /// The model used when a request names none.
    pub fn default_model(&self) -> Option<&str> {
        self.default_model.as_deref()
    }

    /// The base URL (with a trailing `/`).
    pub fn base_url(&self) -> &str {
        self.base.as_str()
    }

    fn endpoint(&self, path: &str) -> Result<reqwest::Url, ProviderError> {
        self.base.join(path).map_err(|_| ProviderError::UrlInvalid)
    }

    fn model<'a>(&'a self, requested: Option<&'a str>) -> Result<&'a str, ProviderError> {
        requested
            .filter(|m| !m.is_empty())
            .or(self.default_model.as_deref())
            .ok_or(ProviderError::MissingModel)
    }

    fn deadline(&self) -> Instant {
        Instant::now() + self.limits.total_timeout
    }

    async fn send(
        &self,
        request: reqwest::RequestBuilder,
        deadline: Instant,
    ) -> Result<reqwest::Response, ProviderError> {
        let request = match &self.api_key {
            Some(key) => request.bearer_auth(key.expose()),
            None => request,
        };
        let response = within(deadline, self.limits.idle_timeout, request.send())
            .await?
            .map_err(map_reqwest_error)?;
        let status = response.status();
        if !status.is_success() {
            // The body is dropped unread: upstream error text never enters this process's output.
            return Err(status_error(status.as_u16()));
        }
        Ok(response)
    }

    async fn read_body(
        &self,
        mut response: reqwest::Response,
        max_bytes: usize,
        deadline: Instant,
    ) -> Result<Vec<u8>, ProviderError> {
        if response
            .content_length()
            .is_some_and(|len| len > max_bytes as u64)
        {
            return Err(ProviderError::ResponseTooLarge);
        }
        let mut body = Vec::new();
        while let Some(chunk) = within(deadline, self.limits.idle_timeout, response.chunk())
            .await?
            .map_err(map_reqwest_error)?
        {
            if body.len() + chunk.len() > max_bytes {
                return Err(ProviderError::ResponseTooLarge);
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }

    async fn read_json(
        &self,
        response: reqwest::Response,
        max_bytes: usize,
        deadline: Instant,
    ) -> Result<Value, ProviderError> {
        let body = self.read_body(response, max_bytes, deadline).await?;
        serde_json::from_slice(&body).map_err(|_| ProviderError::BadResponse)
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

    /// Starts a streamed chat completion (`POST <base>/chat/completions`, `stream: true`).
    ///
    /// # Errors
    /// A [`ProviderError`] for a failed request, a non-2xx status or a response that is not an event stream.
    pub async fn chat(&self, request: &ChatRequest) -> Result<ReplyStream, ProviderError> {
        let model = self.model(request.model.as_deref())?;
        if request.text_bytes() > self.limits.max_prompt_bytes.max(32 * 1024 * 1024) {
            return Err(ProviderError::InputTooLarge);
        }
        let deadline = self.deadline();
        let body = request.to_body(model);
        let http = self
            .client
            .post(self.endpoint("chat/completions")?)
            .header(reqwest::header::ACCEPT, "text/event-stream")
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.to_string());
        let response = self.send(http, deadline).await?;
        if content_type(&response).as_deref() != Some("text/event-stream") {
            return Err(ProviderError::BadResponse);
        }
        Ok(ReplyStream::openai(ChatStream {
            response,
            decoder: SseDecoder::new(self.limits.max_event_bytes),
            idle_timeout: self.limits.idle_timeout,
            deadline,
            state: ChunkState::new(self.limits.max_reply_bytes),
        }))
    }

    /// The provider's models (`GET <base>/models`); also the connection test.
    ///
    /// # Errors
    /// A [`ProviderError`]; a body over [`Limits::max_json_bytes`] is `provider_response_too_large`.
    pub async fn list_models(&self) -> Result<Vec<ModelInfo>, ProviderError> {
        let deadline = self.deadline();
        let response = self
            .send(self.client.get(self.endpoint("models")?), deadline)
            .await?;
        let body = self
            .read_json(response, self.limits.max_json_bytes, deadline)
            .await?;
        let Some(Value::Array(data)) = body.get("data") else {
            return Err(ProviderError::BadResponse);
        };
        data.iter()
            .map(|model| {
                let id = model
                    .get("id")
                    .and_then(Value::as_str)
                    .filter(|id| !id.is_empty() && id.len() <= 256)
                    .ok_or(ProviderError::BadResponse)?;
                Ok(ModelInfo {
                    id: id.to_owned(),
                    owned_by: model
                        .get("owned_by")
                        .and_then(Value::as_str)
                        .map(|o| o.chars().take(256).collect()),
                })
            })
            .collect()
    }

    /// Generates images (`POST <base>/images/generations`); `b64_json` items are decoded, `url` items downloaded.
    ///
    /// # Errors
    /// A [`ProviderError`]; the JSON response and each download are bounded by [`Limits::max_image_bytes`].
    pub async fn generate_images(
        &self,
        request: &ImageRequest,
    ) -> Result<Vec<GeneratedImage>, ProviderError> {
        let model = self.model(request.model.as_deref())?;
        self.check_prompt(&request.prompt)?;
        let n = request.n.max(1);
        if n > MAX_IMAGES_PER_REQUEST {
            return Err(ProviderError::InvalidInput {
                reason: "too many images",
            });
        }
        let mut body = json!({"model": model, "prompt": request.prompt, "n": n});
        if let Some(size) = &request.size {
            if crate::media::parse_size(size, 8192).is_none() {
                return Err(ProviderError::InvalidInput {
                    reason: "size is not <width>x<height>",
                });
            }
            body["size"] = Value::String(size.clone());
        }
        let deadline = self.deadline();
        let response = self
            .send(
                self.client
                    .post(self.endpoint("images/generations")?)
                    .header(reqwest::header::CONTENT_TYPE, "application/json")
                    .body(body.to_string()),
                deadline,
            )
            .await?;
        let body = self
            .read_json(response, self.limits.max_image_bytes, deadline)
            .await?;
        let Some(Value::Array(data)) = body.get("data") else {
            return Err(ProviderError::BadResponse);
        };
        if data.is_empty() || data.len() > n as usize {
            return Err(ProviderError::BadResponse);
        }
        let mut images = Vec::with_capacity(data.len());
        for item in data {
            let revised_prompt = item
                .get("revised_prompt")
                .and_then(Value::as_str)
                .map(|p| p.chars().take(4096).collect());
            let (bytes, mime) = if let Some(b64) = item.get("b64_json").and_then(Value::as_str) {
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(b64)
                    .map_err(|_| ProviderError::BadResponse)?;
                let mime = sniff_image(&bytes).ok_or(ProviderError::BadResponse)?;
                (bytes, mime.to_owned())
            } else if let Some(url) = item.get("url").and_then(Value::as_str) {
                self.download_image(url, deadline).await?
            } else {
                return Err(ProviderError::BadResponse);
            };
            images.push(GeneratedImage {
                bytes,
                mime,
                revised_prompt,
            });
        }
        Ok(images)
    }

    async fn download_image(
        &self,
        url: &str,
        deadline: Instant,
    ) -> Result<(Vec<u8>, String), ProviderError> {
        let url = check_url(url)?;
        // No credential: the URL may point at another host (a CDN).
        let response = within(
            deadline,
            self.limits.idle_timeout,
            self.client.get(url).send(),
        )
        .await?
        .map_err(map_reqwest_error)?;
        if !response.status().is_success() {
            return Err(status_error(response.status().as_u16()));
        }
        let declared = content_type(&response).filter(|m| m.starts_with("image/"));
        let bytes = self
            .read_body(response, self.limits.max_image_bytes, deadline)
            .await?;
        let mime = match sniff_image(&bytes) {
            Some(mime) => mime.to_owned(),
            None => declared
                .filter(|m| is_simple_mime(m))
                .ok_or(ProviderError::BadResponse)?,
        };
        Ok((bytes, mime))
    }

    /// Speech from text (`POST <base>/audio/speech`); the body is the audio.
    ///
    /// # Errors
    /// A [`ProviderError`]; the body is bounded by [`Limits::max_audio_bytes`].
    pub async fn generate_speech(
        &self,
        request: &SpeechRequest,
    ) -> Result<GeneratedAudio, ProviderError> {
        let model = self.model(request.model.as_deref())?;
        check_speech_text(&request.input, &self.limits)?;
        let format = request.format.as_deref().unwrap_or("wav");
        let Some((_, mime)) = SPEECH_FORMATS.iter().find(|(name, _)| *name == format) else {
            return Err(ProviderError::InvalidInput {
                reason: "unknown speech format",
            });
        };
        let body = json!({
            "model": model,
            "input": request.input,
            "voice": request.voice.as_deref().unwrap_or("alloy"),
            "response_format": format,
        });
        let deadline = self.deadline();
        let response = self
            .send(
                self.client
                    .post(self.endpoint("audio/speech")?)
                    .header(reqwest::header::CONTENT_TYPE, "application/json")
                    .body(body.to_string()),
                deadline,
            )
            .await?;
        let bytes = self
            .read_body(response, self.limits.max_audio_bytes, deadline)
            .await?;
        if bytes.is_empty() {
            return Err(ProviderError::BadResponse);
        }
        Ok(GeneratedAudio {
            bytes,
            mime: (*mime).to_owned(),
        })
    }

    /// Text from audio (`POST <base>/audio/transcriptions`, multipart `file`, `model`, `response_format=json`).
    ///
    /// # Errors
    /// [`ProviderError::InputTooLarge`] for audio over [`Limits::max_upload_bytes`] (nothing is sent), else a
    /// [`ProviderError`] of the call.
    pub async fn transcribe(
        &self,
        request: &TranscriptionRequest,
    ) -> Result<Transcription, ProviderError> {
        let model = self.model(request.model.as_deref())?;
        check_audio_upload(&request.audio, &self.limits)?;
        let mime = if is_simple_mime(&request.mime) {
            request.mime.as_str()
        } else {
            "application/octet-stream"
        };
        let mut fields = vec![("model", model), ("response_format", "json")];
        if let Some(language) = request.language.as_deref().filter(|l| {
            !l.is_empty()
                && l.len() <= 16
                && l.bytes().all(|b| b.is_ascii_alphabetic() || b == b'-')
        }) {
            fields.push(("language", language));
        }
        let (boundary, body) = multipart(&fields, &request.file_name, mime, &request.audio);
        let deadline = self.deadline();
        let response = self
            .send(
                self.client
                    .post(self.endpoint("audio/transcriptions")?)
                    .header(
                        reqwest::header::CONTENT_TYPE,
                        format!("multipart/form-data; boundary={boundary}"),
                    )
                    .body(body),
                deadline,
            )
            .await?;
        let body = self
            .read_json(response, self.limits.max_json_bytes, deadline)
            .await?;
        let text = body
            .get("text")
            .and_then(Value::as_str)
            .ok_or(ProviderError::BadResponse)?;
        Ok(Transcription {
            text: text.to_owned(),
        })
    }

    /// Creates a video job (`POST <base>/videos`, JSON `{model, prompt, seconds?, size?}`).
    ///
    /// # Errors
    /// A [`ProviderError`].
    pub async fn create_video(&self, request: &VideoRequest) -> Result<VideoJob, ProviderError> {
        let model = self.model(request.model.as_deref())?;
        self.check_prompt(&request.prompt)?;
        let mut body = json!({"model": model, "prompt": request.prompt});
        if let Some(seconds) = request.seconds {
            // OpenAI documents `seconds` as a string ("4", "8", "12").
            body["seconds"] = Value::String(seconds.to_string());
        }
        if let Some(size) = &request.size {
            if crate::media::parse_size(size, 8192).is_none() {
                return Err(ProviderError::InvalidInput {
                    reason: "size is not <width>x<height>",
                });
            }
            body["size"] = Value::String(size.clone());
        }
        let deadline = self.deadline();
        let response = self
            .send(
                self.client
                    .post(self.endpoint("videos")?)
                    .header(reqwest::header::CONTENT_TYPE, "application/json")
                    .body(body.to_string()),
                deadline,
            )
            .await?;
        parse_job(
            &self
                .read_json(response, self.limits.max_json_bytes, deadline)
                .await?,
        )
    }

    /// The job's state (`GET <base>/videos/{id}`).
    ///
    /// # Errors
    /// [`ProviderError::InvalidInput`] for an id outside `[A-Za-z0-9_-]{1,128}`, else a [`ProviderError`].
    pub async fn poll_video(&self, id: &str) -> Result<VideoJob, ProviderError> {
        check_job_id(id)?;
        let deadline = self.deadline();
        let response = self
            .send(
                self.client.get(self.endpoint(&format!("videos/{id}"))?),
                deadline,
            )
            .await?;
        parse_job(
            &self
                .read_json(response, self.limits.max_json_bytes, deadline)
                .await?,
        )
    }

    /// The finished video's bytes (`GET <base>/videos/{id}/content`).
    ///
    /// # Errors
    /// A [`ProviderError`]; the body is bounded by [`Limits::max_video_bytes`].
    pub async fn download_video(&self, id: &str) -> Result<GeneratedVideo, ProviderError> {
        check_job_id(id)?;
        let deadline = self.deadline();
        let response = self
            .send(
                self.client
                    .get(self.endpoint(&format!("videos/{id}/content"))?),
                deadline,
            )
            .await?;
        let mime = content_type(&response)
            .filter(|m| m.starts_with("video/") && is_simple_mime(m))
            .unwrap_or_else(|| "video/mp4".to_owned());
        let bytes = self
            .read_body(response, self.limits.max_video_bytes, deadline)
            .await?;
        if bytes.is_empty() {
            return Err(ProviderError::BadResponse);
        }
        Ok(GeneratedVideo {
            id: id.to_owned(),
            bytes,
            mime,
        })
    }

    /// Create, poll every [`Limits::video_poll_interval`] (reporting each state to `on_progress`) until
    /// `completed`, then download; all within [`Limits::total_timeout`].
    ///
    /// # Errors
    /// [`ProviderError::JobFailed`] when the job fails, [`ProviderError::Timeout`] past the total timeout, else
    /// a [`ProviderError`] of a step.
    pub async fn generate_video(
        &self,
        request: &VideoRequest,
        on_progress: &mut (dyn FnMut(&VideoJob) + Send),
    ) -> Result<GeneratedVideo, ProviderError> {
        let deadline = self.deadline();
        let mut job = self.create_video(request).await?;
        loop {
            on_progress(&job);
            match job.status {
                VideoStatus::Completed => break,
                VideoStatus::Failed => return Err(ProviderError::JobFailed),
                VideoStatus::Queued | VideoStatus::InProgress => {}
            }
            if Instant::now() + self.limits.video_poll_interval >= deadline {
                return Err(ProviderError::Timeout);
            }
            tokio::time::sleep(self.limits.video_poll_interval).await;
            let id = job.id.clone();
            job = tokio::time::timeout_at(deadline, self.poll_video(&id))
                .await
                .map_err(|_| ProviderError::Timeout)??;
            if job.id != id {
                return Err(ProviderError::BadResponse);
            }
        }
        tokio::time::timeout_at(deadline, self.download_video(&job.id))
            .await
            .map_err(|_| ProviderError::Timeout)?
    }
}

fn parse_job(body: &Value) -> Result<VideoJob, ProviderError> {
    let id = body
        .get("id")
        .and_then(Value::as_str)
        .filter(|id| is_job_id(id))
        .ok_or(ProviderError::BadResponse)?;
    let status = body
        .get("status")
        .and_then(Value::as_str)
        .and_then(VideoStatus::parse)
        .ok_or(ProviderError::BadResponse)?;
    let progress = match body.get("progress") {
        None | Some(Value::Null) => 0,
        Some(value) => value
            .as_f64()
            .filter(|p| (0.0..=100.0).contains(p))
            .ok_or(ProviderError::BadResponse)? as u8,
    };
    Ok(VideoJob {
        id: id.to_owned(),
        status,
        progress,
    })
}

pub(crate) fn check_speech_text(text: &str, limits: &Limits) -> Result<(), ProviderError> {
    if text.trim().is_empty() {
        return Err(ProviderError::InvalidInput {
            reason: "empty text",
        });
    }
    if text.chars().count() > limits.max_speech_chars {
        return Err(ProviderError::InputTooLarge);
    }
    Ok(())
}

pub(crate) fn check_audio_upload(audio: &[u8], limits: &Limits) -> Result<(), ProviderError> {
    if audio.is_empty() {
        return Err(ProviderError::InvalidInput {
            reason: "empty audio",
        });
    }
    if audio.len() > limits.max_upload_bytes {
        return Err(ProviderError::InputTooLarge);
    }
    Ok(())
}

/// A `multipart/form-data` body (RFC 7578): text `fields`, then the file. Returns `(boundary, body)`; the
/// boundary is chosen so that it does not occur in the file.
fn multipart(
    fields: &[(&str, &str)],
    file_name: &str,
    mime: &str,
    file: &[u8],
) -> (String, Vec<u8>) {
    use sha2::Digest as _;
    let digest = sha2::Sha256::digest(file);
    let mut boundary: String = digest.iter().take(12).map(|b| format!("{b:02x}")).collect();
    boundary.insert_str(0, "agentwire-");
    while file
        .windows(boundary.len())
        .any(|window| window == boundary.as_bytes())
    {
        boundary.push('x');
    }
    let mut name: String = file_name
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || "._-".contains(*c))
        .take(64)
        .collect();
    if name.is_empty() || name.starts_with('.') {
        name = "audio.wav".to_owned();
    }
    let mut body = Vec::with_capacity(file.len() + 512);
    for (key, value) in fields {
        body.extend_from_slice(
            format!(
                "--{boundary}\r\nContent-Disposition: form-data; name=\"{key}\"\r\n\r\n{value}\r\n"
            )
            .as_bytes(),
        );
    }
    body.extend_from_slice(
        format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{name}\"\r\nContent-Type: {mime}\r\n\r\n"
        )
        .as_bytes(),
    );
    body.extend_from_slice(file);
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    (boundary, body)
}

/// A chat reply streamed from an OpenAI-compatible server. Dropping it drops the response, which closes the
/// connection (the upstream request is aborted).
#[derive(Debug)]
pub(crate) struct ChatStream {
    response: reqwest::Response,
    decoder: SseDecoder,
    idle_timeout: Duration,
    deadline: Instant,
    state: ChunkState,
}

impl ChatStream {
    pub(crate) async fn next(&mut self) -> Result<Option<StreamItem>, ProviderError> {
        loop {
            if let Some(item) = self.state.pending.pop_front() {
                return Ok(Some(item));
            }
            if self.state.done {
                if self.state.calls.is_empty() {
                    return Ok(None);
                }
                self.state.flush_calls()?;
                continue;
            }
            match self.decoder.next_event() {
                Ok(Some(data)) => self.state.handle_event(&data)?,
                Ok(None) => {
                    let chunk = within(self.deadline, self.idle_timeout, self.response.chunk())
                        .await?
                        .map_err(map_reqwest_error)?;
                    match chunk {
                        Some(bytes) => self.decoder.feed(&bytes),
                        None => {
                            if let Some(data) = self.decoder.finish() {
                                self.state.handle_event(&data)?;
                            }
                            if !self.state.done {
                                // The body ended without `[DONE]`: complete only if the model said it finished.
                                if !self.state.finished {
                                    return Err(ProviderError::BadResponse);
                                }
                                self.state.done = true;
                            }
                        }
                    }
                }
                Err(SseError::EventTooLong { .. }) => return Err(ProviderError::ResponseTooLarge),
                Err(_) => return Err(ProviderError::BadResponse),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_url_rules() {
        let check = |url: &str, expect: Result<&str, &str>| {
            let got = validate_base_url(url)
                .and_then(|base| {
                    base.join("chat/completions")
                        .map_err(|_| ProviderError::UrlInvalid)
                })
                .map(|u| u.to_string())
                .map_err(|e| e.code());
            assert_eq!(got.as_deref().map_err(|e| *e), expect, "{url}");
        };
        check(
            "http://127.0.0.1:8080/v1",
            Ok("http://127.0.0.1:8080/v1/chat/completions"),
        );
        check(
            "http://localhost:1/v1/",
            Ok("http://localhost:1/v1/chat/completions"),
        );
        check("http://[::1]:9/", Ok("http://[::1]:9/chat/completions"));
        check(
            "https://api.example.com/v1",
            Ok("https://api.example.com/v1/chat/completions"),
        );
        check("http://api.example.com/v1", Err("provider_url_rejected"));
        check("http://10.0.0.1/v1", Err("provider_url_rejected"));
        check("ftp://127.0.0.1/", Err("provider_url_invalid"));
        check(
            "https://user:pw@api.example.com/",
            Err("provider_url_invalid"),
        );
        check(
            "https://api.example.com/v1?x=1",
            Err("provider_url_invalid"),
        );
        check("not a url", Err("provider_url_invalid"));
    }

    #[test]
    fn multipart_bodies_carry_fields_and_the_file() {
        let (boundary, body) = multipart(
            &[("model", "whisper-1")],
            "../x y.wav",
            "audio/wav",
            b"RIFFdata",
        );
        let text = String::from_utf8(body).expect("ascii");
        assert_eq!(
            text,
            format!(
                "--{boundary}\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nwhisper-1\r\n\
                 --{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"..xy.wav\"\r\n\
                 Content-Type: audio/wav\r\n\r\nRIFFdata\r\n--{boundary}--\r\n"
            )
            .replace("filename=\"..xy.wav\"", "filename=\"audio.wav\"")
        );
    }

    #[test]
    fn video_jobs_parse_strictly() {
        assert_eq!(
            parse_job(&json!({"id":"video_1","status":"in_progress","progress":40})),
            Ok(VideoJob {
                id: "video_1".into(),
                status: VideoStatus::InProgress,
                progress: 40
            })
        );
        for bad in [
            json!({"id":"../x","status":"queued"}),
            json!({"id":"v","status":"weird"}),
            json!({"id":"v","status":"queued","progress":101}),
        ] {
            assert_eq!(parse_job(&bad), Err(ProviderError::BadResponse), "{bad}");
        }
    }
}
