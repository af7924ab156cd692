//! The compute commands: `model list|invoke`, `image generate`, `video generate`, `audio speak|transcribe`.
//!
//! Source: DeepChat `src/cli/args.ts` (`COMMAND_DOMAIN_OPTIONS` for these commands, `AUDIO_MIME_BY_EXTENSION`,
//! option ranges), `src/shared/contracts/cliCommands.ts` (compute commands are `long-running`: 30 min) and
//! `src/main/cli/computeService.ts` (the stream records). Output: text mode prints answer text as it streams
//! and then one summary line with usage and timings (media: progress lines, then one line per artifact);
//! `--json` buffers the stream in the CLI and prints one envelope; `--jsonl` prints every stream record, then
//! the terminal envelope, whose result carries the benchmark fields (resolved provider/model, usage, finish
//! reason, queue/first-event/first-text/total latency; artifact MIME, size, SHA-256 and id, never a path) in
//! its `benchmark` object, printed unchanged. The CLI adds no `cliVersion`: it is built from the same workspace
//! as the host, with the same version (`deepchat system version`).
//!
//! Where we differ: `--provider` and `--model` may be left out (DeepChat requires both); the CLI then sends no id
//! and the host uses `builtin` and its model of the command's kind, so every command works with no
//! configuration, and the result's `benchmark.requested` says `null` for what was defaulted. The
//! image and video flags are the subset an OpenAI-compatible provider takes (`--size`; `--seconds`, `--size`).

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use agentwire_local_control::client::Client;
use agentwire_local_control::contract::media::{self, MediaEvent};
use agentwire_local_control::contract::models::InvokeEvent;
use agentwire_local_control::envelope::{ErrorCode, RequestEnvelope, StreamRecord};
use clap::{Args, Subcommand};
use serde_json::{Map, Value, json};
use tokio::sync::Notify;

use crate::Failure;
use crate::command::{Globals, Invocation, Operation, OutputMode, TimeoutClass};

/// The built-in provider's id.
const BUILTIN: &str = "builtin";

#[derive(Debug, Subcommand)]
pub(crate) enum ModelVerb {
    /// List models of every provider, or of one (models.listPublic).
    List(ModelListArgs),
    /// Invoke a model once, streaming its answer (models.invoke; no tools, session or memory).
    Invoke(ModelInvokeArgs),
    /// The administration verbs (`enable`, `disable`, `config-get`, `config-set`, `config-reset`).
    #[command(flatten)]
    Admin(crate::providers::ModelAdminVerb),
}

#[derive(Debug, Args)]
pub(crate) struct ModelListArgs {
    /// Only this provider's models.
    #[arg(long, value_name = "ID")]
    provider: Option<String>,
    #[command(flatten)]
    globals: Globals,
}

#[derive(Debug, Args)]
pub(crate) struct ModelInvokeArgs {
    /// Provider id (default: builtin).
    #[arg(long, value_name = "ID")]
    provider: Option<String>,
    /// Model id (default with the built-in provider: builtin-demo).
    #[arg(long, value_name = "ID")]
    model: Option<String>,
    /// The user message.
    #[arg(
        long,
        value_name = "TEXT",
        allow_hyphen_values = true,
        required_unless_present = "stdin",
        conflicts_with = "stdin"
    )]
    prompt: Option<String>,
    /// Read the user message from standard input (≤ 4 MiB).
    #[arg(long)]
    stdin: bool,
    /// A system message before it.
    #[arg(long, value_name = "TEXT", allow_hyphen_values = true)]
    system: Option<String>,
    /// Sampling temperature (0..=2).
    #[arg(long, value_name = "T")]
    temperature: Option<f64>,
    /// Most answer tokens (1..=1000000).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    max_tokens: Option<u32>,
    #[command(flatten)]
    globals: Globals,
}

#[derive(Debug, Subcommand)]
pub(crate) enum ImageVerb {
    /// Generate images into owned artifacts (images.generate).
    Generate(ImageGenerateArgs),
}

#[derive(Debug, Args)]
pub(crate) struct ImageGenerateArgs {
    /// Provider id (default: builtin).
    #[arg(long, value_name = "ID")]
    provider: Option<String>,
    /// Model id (default with the built-in provider: builtin-image).
    #[arg(long, value_name = "ID")]
    model: Option<String>,
    /// What to draw.
    #[arg(
        long,
        value_name = "TEXT",
        allow_hyphen_values = true,
        required_unless_present = "stdin",
        conflicts_with = "stdin"
    )]
    prompt: Option<String>,
    /// Read the prompt from standard input.
    #[arg(long)]
    stdin: bool,
    /// `<width>x<height>`.
    #[arg(long, value_name = "WxH")]
    size: Option<String>,
    #[command(flatten)]
    globals: Globals,
}

#[derive(Debug, Subcommand)]
pub(crate) enum VideoVerb {
    /// Generate a video into an owned artifact, with progress (videos.generate).
    Generate(VideoGenerateArgs),
}

#[derive(Debug, Args)]
pub(crate) struct VideoGenerateArgs {
    /// Provider id (default: builtin).
    #[arg(long, value_name = "ID")]
    provider: Option<String>,
    /// Model id (default with the built-in provider: builtin-video).
    #[arg(long, value_name = "ID")]
    model: Option<String>,
    /// What to show.
    #[arg(
        long,
        value_name = "TEXT",
        allow_hyphen_values = true,
        required_unless_present = "stdin",
        conflicts_with = "stdin"
    )]
    prompt: Option<String>,
    /// Read the prompt from standard input.
    #[arg(long)]
    stdin: bool,
    /// Length in seconds.
    #[arg(long, value_name = "N")]
    seconds: Option<String>,
    /// `<width>x<height>`.
    #[arg(long, value_name = "WxH")]
    size: Option<String>,
    #[command(flatten)]
    globals: Globals,
}

#[derive(Debug, Subcommand)]
pub(crate) enum AudioVerb {
    /// Speak text into an owned audio artifact (speech.generate).
    Speak(AudioSpeakArgs),
    /// Transcribe a local file (audio.transcribeUpload, human callers) or an owned artifact
    /// (audio.transcribeArtifact).
    Transcribe(AudioTranscribeArgs),
}

#[derive(Debug, Args)]
pub(crate) struct AudioSpeakArgs {
    /// Provider id (default: builtin).
    #[arg(long, value_name = "ID")]
    provider: Option<String>,
    /// Model id (default with the built-in provider: builtin-speech).
    #[arg(long, value_name = "ID")]
    model: Option<String>,
    /// The text to speak.
    #[arg(
        long,
        value_name = "TEXT",
        allow_hyphen_values = true,
        required_unless_present = "stdin",
        conflicts_with = "stdin"
    )]
    text: Option<String>,
    /// Read the text from standard input.
    #[arg(long)]
    stdin: bool,
    /// Voice.
    #[arg(long, value_name = "NAME")]
    voice: Option<String>,
    /// mp3, opus, aac, flac, wav or pcm.
    #[arg(long, value_name = "FORMAT")]
    format: Option<String>,
    /// 0.25..=4.
    #[arg(long, value_name = "X")]
    speed: Option<f64>,
    #[command(flatten)]
    globals: Globals,
}

#[derive(Debug, Args)]
pub(crate) struct AudioTranscribeArgs {
    /// Provider id (default: builtin).
    #[arg(long, value_name = "ID")]
    provider: Option<String>,
    /// Model id (default with the built-in provider: builtin-transcribe).
    #[arg(long, value_name = "ID")]
    model: Option<String>,
    /// A local audio file (≤ 25 MiB), uploaded.
    #[arg(
        long,
        value_name = "PATH",
        required_unless_present = "artifact",
        conflicts_with = "artifact"
    )]
    file: Option<PathBuf>,
    /// An owned audio artifact id.
    #[arg(long, value_name = "ARTIFACT_ID")]
    artifact: Option<String>,
    /// The file's media type (inferred from its extension when absent).
    #[arg(long, value_name = "TYPE")]
    mime: Option<String>,
    #[command(flatten)]
    globals: Globals,
}

/// `AUDIO_MIME_BY_EXTENSION`.
const AUDIO_MIME_BY_EXTENSION: &[(&str, &str)] = &[
    ("aac", "audio/aac"),
    ("amr", "audio/amr"),
    ("flac", "audio/flac"),
    ("m4a", "audio/mp4"),
    ("mp3", "audio/mpeg"),
    ("mp4", "audio/mp4"),
    ("ogg", "audio/ogg"),
    ("opus", "audio/ogg"),
    ("wav", "audio/wav"),
    ("webm", "audio/webm"),
];

/// The `providerId`/`modelId` params: what was given, nothing for a default (the host fills in `builtin` and
/// its model of the method's kind, and the result's `benchmark.requested` says `null`). `--provider` other
/// than builtin needs `--model`.
fn ids(
    params: &mut Map<String, Value>,
    provider: Option<String>,
    model: Option<String>,
) -> Result<(), String> {
    if model.is_none() && provider.as_deref().is_some_and(|p| p != BUILTIN) {
        return Err("--model is required with a provider other than builtin".to_owned());
    }
    if let Some(provider) = provider {
        params.insert("providerId".into(), provider.into());
    }
    if let Some(model) = model {
        params.insert("modelId".into(), model.into());
    }
    Ok(())
}

fn text(name: &str, value: Option<String>) -> Result<Option<String>, String> {
    match value {
        Some(v) if v.starts_with("--") => Err(format!("missing value for --{name}")),
        other => Ok(other),
    }
}

fn stream_invocation(
    command: &'static str,
    method: &'static str,
    params: Map<String, Value>,
    stdin_field: Option<&'static str>,
) -> Invocation {
    Invocation {
        command,
        method,
        params: Value::Object(params),
        stdin_field,
        operation: Operation::ComputeStream,
    }
}

/// `model …`.
pub(crate) fn build_model(verb: ModelVerb) -> Result<(Globals, Invocation, TimeoutClass), String> {
    match verb {
        ModelVerb::Admin(verb) => crate::providers::model(verb),
        ModelVerb::List(a) => {
            let mut params = Map::new();
            if let Some(p) = a.provider {
                params.insert("providerId".into(), p.into());
            }
            Ok((
                a.globals,
                Invocation {
                    command: "model list",
                    method: "models.listPublic",
                    params: Value::Object(params),
                    stdin_field: None,
                    operation: Operation::Rpc,
                },
                TimeoutClass::Standard,
            ))
        }
        ModelVerb::Invoke(a) => {
            if let Some(t) = a.temperature
                && !(0.0..=2.0).contains(&t)
            {
                return Err("--temperature must be a number between 0 and 2".to_owned());
            }
            let mut params = Map::new();
            ids(&mut params, a.provider, a.model)?;
            if let Some(prompt) = text("prompt", a.prompt)? {
                params.insert("prompt".into(), prompt.into());
            }
            if let Some(system) = text("system", a.system)? {
                params.insert("system".into(), system.into());
            }
            if let Some(t) = a.temperature {
                params.insert("temperature".into(), json!(t));
            }
            if let Some(m) = a.max_tokens {
                params.insert("maxTokens".into(), json!(m));
            }
            let stdin = a.stdin.then_some("prompt");
            Ok((
                a.globals,
                stream_invocation("model invoke", "models.invoke", params, stdin),
                TimeoutClass::LongRunning,
            ))
        }
    }
}

/// `image generate`.
pub(crate) fn build_image(verb: ImageVerb) -> Result<(Globals, Invocation, TimeoutClass), String> {
    let ImageVerb::Generate(a) = verb;
    let mut params = Map::new();
    ids(&mut params, a.provider, a.model)?;
    if let Some(prompt) = text("prompt", a.prompt)? {
        params.insert("prompt".into(), prompt.into());
    }
    if let Some(size) = a.size {
        params.insert("options".into(), json!({ "size": size }));
    }
    let stdin = a.stdin.then_some("prompt");
    Ok((
        a.globals,
        stream_invocation("image generate", "images.generate", params, stdin),
        TimeoutClass::LongRunning,
    ))
}

/// `video generate`.
pub(crate) fn build_video(verb: VideoVerb) -> Result<(Globals, Invocation, TimeoutClass), String> {
    let VideoVerb::Generate(a) = verb;
    let mut params = Map::new();
    ids(&mut params, a.provider, a.model)?;
    if let Some(prompt) = text("prompt", a.prompt)? {
        params.insert("prompt".into(), prompt.into());
    }
    let mut options = Map::new();
    if let Some(seconds) = a.seconds {
        options.insert("seconds".into(), seconds.into());
    }
    if let Some(size) = a.size {
        options.insert("size".into(), size.into());
    }
    if !options.is_empty() {
        params.insert("options".into(), Value::Object(options));
    }
    let stdin = a.stdin.then_some("prompt");
    Ok((
        a.globals,
        stream_invocation("video generate", "videos.generate", params, stdin),
        TimeoutClass::LongRunning,
    ))
}

/// `audio …`.
pub(crate) fn build_audio(verb: AudioVerb) -> Result<(Globals, Invocation, TimeoutClass), String> {
    match verb {
        AudioVerb::Speak(a) => {
            let mut params = Map::new();
            ids(&mut params, a.provider, a.model)?;
            if let Some(t) = text("text", a.text)? {
                params.insert("text".into(), t.into());
            }
            if let Some(s) = a.speed
                && !(0.25..=4.0).contains(&s)
            {
                return Err("--speed must be a number between 0.25 and 4".to_owned());
            }
            let mut options = Map::new();
            if let Some(v) = a.voice {
                options.insert("voice".into(), v.into());
            }
            if let Some(f) = a.format {
                options.insert("responseFormat".into(), f.into());
            }
            if let Some(s) = a.speed {
                options.insert("speed".into(), json!(s));
            }
            if !options.is_empty() {
                params.insert("options".into(), Value::Object(options));
            }
            let stdin = a.stdin.then_some("text");
            Ok((
                a.globals,
                stream_invocation("audio speak", "speech.generate", params, stdin),
                TimeoutClass::LongRunning,
            ))
        }
        AudioVerb::Transcribe(a) => {
            let mut params = Map::new();
            ids(&mut params, a.provider, a.model)?;
            if let Some(artifact) = a.artifact {
                params.insert("artifactId".into(), artifact.into());
                return Ok((
                    a.globals,
                    Invocation {
                        command: "audio transcribe",
                        method: "audio.transcribeArtifact",
                        params: Value::Object(params),
                        stdin_field: None,
                        operation: Operation::Rpc,
                    },
                    TimeoutClass::LongRunning,
                ));
            }
            let Some(file) = a.file else {
                return Err("one of --file or --artifact is required".to_owned());
            };
            let mime = match a.mime {
                Some(mime) if !mime.trim().is_empty() => mime.trim().to_ascii_lowercase(),
                Some(_) => return Err("--mime must not be empty".to_owned()),
                None => {
                    let extension = file
                        .extension()
                        .and_then(|e| e.to_str())
                        .map(str::to_ascii_lowercase)
                        .unwrap_or_default();
                    AUDIO_MIME_BY_EXTENSION
                        .iter()
                        .find(|(ext, _)| *ext == extension)
                        .map(|(_, mime)| (*mime).to_owned())
                        .ok_or("cannot infer input MIME type; provide --mime <type>")?
                }
            };
            params.insert("mimeType".into(), mime.into());
            if let Some(name) = file.file_name().and_then(|n| n.to_str()) {
                params.insert("filename".into(), name.into());
            }
            Ok((
                a.globals,
                Invocation {
                    command: "audio transcribe",
                    method: "audio.transcribeUpload",
                    params: Value::Object(params),
                    stdin_field: None,
                    operation: Operation::Upload {
                        path: file,
                        max_bytes: media::AUDIO_TRANSCRIPTION_MAX_INPUT_BYTES,
                    },
                },
                TimeoutClass::LongRunning,
            ))
        }
    }
}

/// Turns the command's flat params into the method's (`model invoke`'s `prompt`/`system` become `messages`).
pub(crate) fn finish_params(method: &str, params: Value) -> Value {
    if method != "models.invoke" {
        return params;
    }
    let Value::Object(mut map) = params else {
        return params;
    };
    let mut messages = Vec::new();
    if let Some(system) = map.remove("system") {
        messages.push(json!({"role": "system", "content": system}));
    }
    if let Some(prompt) = map.remove("prompt") {
        messages.push(json!({"role": "user", "content": prompt}));
    }
    map.insert("messages".into(), Value::Array(messages));
    Value::Object(map)
}

/// Checks one record of a compute stream: our request, the method's event name, a payload of the method's
/// event contract. Returns the canonical data.
fn check_record(method: &str, record: &StreamRecord) -> Result<Value, Failure> {
    let invalid = || {
        Failure::new(
            ErrorCode::InternalError,
            "the host emitted an invalid stream event",
        )
    };
    if record.event != method || record.run_id.is_some() {
        return Err(invalid());
    }
    let canonical = if method == "models.invoke" {
        let event: InvokeEvent =
            serde_json::from_value(record.data.clone()).map_err(|_| invalid())?;
        serde_json::to_value(event)
    } else {
        let event: MediaEvent =
            serde_json::from_value(record.data.clone()).map_err(|_| invalid())?;
        serde_json::to_value(event)
    };
    canonical.map_err(|_| invalid())
}

/// Human text of one record: answer text as it comes, media progress and artifacts as lines.
fn record_text(data: &Value) -> Option<String> {
    match data["type"].as_str()? {
        "text_delta" => Some(crate::render::sanitize(data["text"].as_str()?)),
        "progress" => Some(format!(
            "progress: {} {}%\n",
            data["status"].as_str()?,
            data["progress"].as_u64()?
        )),
        _ => None,
    }
}

/// Calls a compute stream method; prints per `mode` as records arrive; returns the result.
pub(crate) async fn stream(
    client: &Client,
    envelope: &RequestEnvelope,
    timeout: Duration,
    mode: OutputMode,
    stdout: &mut (dyn Write + Send),
) -> Result<Value, Failure> {
    let abort = Arc::new(Notify::new());
    let mut failed: Option<Failure> = None;
    let method = envelope.method.clone();
    let outcome = {
        let abort_signal = Arc::clone(&abort);
        let failed = &mut failed;
        let stdout = &mut *stdout;
        let on_record = move |record: StreamRecord| {
            if failed.is_some() {
                return;
            }
            let written = check_record(&method, &record).and_then(|data| {
                let text = match mode {
                    OutputMode::Jsonl => {
                        let mut canonical = record;
                        canonical.data = data;
                        serde_json::to_string(&canonical)
                            .map(|line| Some(format!("{line}\n")))
                            .map_err(|e| Failure::new(ErrorCode::InternalError, e.to_string()))?
                    }
                    OutputMode::Text => record_text(&data),
                    OutputMode::Json => None,
                };
                match text {
                    Some(text) => stdout
                        .write_all(text.as_bytes())
                        .and_then(|()| stdout.flush())
                        .map_err(|e| crate::output_failure(&e)),
                    None => Ok(()),
                }
            });
            if let Err(failure) = written {
                *failed = Some(failure);
                abort_signal.notify_one();
            }
        };
        tokio::select! {
            outcome = client.stream(envelope, timeout, on_record) => outcome.map_err(Failure::from),
            () = abort.notified() => Err(Failure::new(ErrorCode::InternalError, "stream aborted")),
        }
    };
    if let Some(failure) = failed {
        return Err(failure);
    }
    outcome
}

/// Whether [`render_result`] renders `method`.
pub(crate) fn renders(method: &str) -> bool {
    matches!(
        method,
        "models.listPublic"
            | "models.invoke"
            | "images.generate"
            | "speech.generate"
            | "videos.generate"
            | "audio.transcribeUpload"
            | "audio.transcribeArtifact"
    )
}

fn ms(value: &Value) -> String {
    value
        .as_u64()
        .map_or_else(|| "-".to_owned(), |v| format!("{v} ms"))
}

/// Text-mode rendering of a compute result (the streamed text was already printed).
pub(crate) fn render_result(method: &str, result: &Value) -> String {
    let s = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    match method {
        "models.listPublic" => {
            let mut out = String::new();
            for m in result["models"].as_array().into_iter().flatten() {
                out.push_str(&format!(
                    "{}/{}  {}  {}\n",
                    s(&m["providerId"]),
                    s(&m["id"]),
                    s(&m["kind"]),
                    if m["enabled"] == true {
                        "enabled"
                    } else {
                        "disabled"
                    }
                ));
            }
            out
        }
        "models.invoke" => {
            let latency = &result["latency"];
            let usage = match result.get("usage") {
                Some(u) => format!(
                    "{} in / {} out tokens",
                    u["promptTokens"], u["completionTokens"]
                ),
                None => "no usage".to_owned(),
            };
            format!(
                "\n[{}/{} · {} · {} · queue {} · first text {} · total {}]\n",
                s(&result["providerId"]),
                s(&result["modelId"]),
                s(&result["finishReason"]),
                usage,
                ms(&latency["queueMs"]),
                ms(&latency["firstTextMs"]),
                ms(&latency["totalMs"]),
            )
        }
        "audio.transcribeUpload" | "audio.transcribeArtifact" => {
            let mut out = s(&result["text"]);
            out.push('\n');
            if result["truncated"] == true {
                out.push_str("[transcript truncated]\n");
            }
            out
        }
        _ => {
            let mut out = String::new();
            for a in result["artifacts"].as_array().into_iter().flatten() {
                out.push_str(&format!(
                    "artifact {}  {}  {} bytes  sha256 {}  {}\n",
                    s(&a["id"]),
                    s(&a["mimeType"]),
                    a["size"],
                    s(&a["sha256"]),
                    s(&a["filename"]),
                ));
            }
            out.push_str(&format!(
                "[{}/{} · {} ms] Fetch bytes with: deepchat artifact get --id <id> --out <path>\n",
                s(&result["providerId"]),
                s(&result["modelId"]),
                result["durationMs"]
            ));
            out
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invoke_params_become_messages() {
        assert_eq!(
            finish_params(
                "models.invoke",
                json!({"providerId":"builtin","modelId":"m","system":"s","prompt":"p","maxTokens":3})
            ),
            json!({"providerId":"builtin","modelId":"m","maxTokens":3,
                   "messages":[{"role":"system","content":"s"},{"role":"user","content":"p"}]})
        );
        assert_eq!(
            finish_params("images.generate", json!({"x":1})),
            json!({"x":1})
        );
    }

    fn parse(line: &str) -> Result<crate::command::Parsed, String> {
        let argv: Vec<String> = line.split_whitespace().map(str::to_owned).collect();
        crate::command::parse(&argv, &|_| None).map_err(|e| e.message)
    }

    #[test]
    fn compute_commands_parse_with_deepchat_usage_rules() {
        use crate::command::Parsed;
        let Ok(Parsed::Call {
            invocation,
            timeout,
            ..
        }) = parse("model invoke --prompt hi --max-tokens 5")
        else {
            panic!("model invoke parses");
        };
        assert_eq!(invocation.method, "models.invoke");
        assert_eq!(invocation.operation, Operation::ComputeStream);
        assert_eq!(timeout, crate::command::LONG_RUNNING_TIMEOUT);
        assert_eq!(invocation.params, json!({"prompt":"hi","maxTokens":5}));
        let Ok(Parsed::Call { invocation, .. }) = parse("audio transcribe --file talk.WAV") else {
            panic!("transcribe parses");
        };
        assert_eq!(invocation.method, "audio.transcribeUpload");
        assert_eq!(invocation.params["mimeType"], "audio/wav");
        assert_eq!(invocation.params["filename"], "talk.WAV");
        let Ok(Parsed::Call { invocation, .. }) =
            parse("audio transcribe --artifact AbCdEfGhIjKlMnOpQrStUvWxYz012345")
        else {
            panic!("transcribe --artifact parses");
        };
        assert_eq!(invocation.method, "audio.transcribeArtifact");
        for bad in [
            "model invoke",
            "model invoke --prompt x --stdin",
            "model invoke --prompt x --temperature 2.5",
            "model invoke --prompt x --max-tokens 0",
            "model invoke --provider local --prompt x",
            "audio transcribe",
            "audio transcribe --file a.xyz",
            "audio transcribe --file a.wav --artifact x",
            "audio speak --text hi --speed 5",
            "image generate --prompt x --quality hd",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn defaults_need_no_configuration_but_custom_providers_need_a_model() {
        let given = |provider: Option<&str>, model: Option<&str>| {
            let mut params = Map::new();
            ids(
                &mut params,
                provider.map(str::to_owned),
                model.map(str::to_owned),
            )
            .map(|()| Value::Object(params))
        };
        assert_eq!(given(None, None), Ok(json!({})));
        assert_eq!(
            given(Some("builtin"), None),
            Ok(json!({"providerId":"builtin"}))
        );
        assert_eq!(
            given(Some("local-llm"), Some("m")),
            Ok(json!({"providerId":"local-llm","modelId":"m"}))
        );
        assert!(given(Some("local-llm"), None).is_err());
    }
}
