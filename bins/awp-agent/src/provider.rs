//! Providers: an OpenAI-compatible chat-completions endpoint streamed over SSE, or the built-in demo provider.
//!
//! The OpenAI-compatible provider is used when `OPENAI_BASE_URL` is set (`POST <base>/chat/completions` with
//! `"stream":true` and `"stream_options":{"include_usage":true}`; `Authorization: Bearer $OPENAI_API_KEY`
//! when that is set). Plain `http://` is accepted only for loopback hosts (`localhost`, `127.0.0.0/8`, `::1`);
//! remote endpoints must use `https://` (the launcher's `AWP_AGENT_REMOTE_API_OPT_IN=1` governs whether a
//! remote URL may reach this agent at all).
//!
//! The built-in provider is a deterministic demo, not a model: it answers
//! `You said: <text> (turn <n> of this session; before that you said: <previous text>)`, reports the model
//! name `builtin-demo`, and counts usage in whitespace-separated words, not model tokens. When tools are offered
//! (managed tasks enabled), a prompt `run-task: <json>` makes it call `awp_run_managed_task` with `<json>` (an argv
//! array, or an object `{"argv":[…],"timeout_seconds":n}`), and its follow-up answer reports the tool result.
//!
//! Failures become stable codes ([`ProviderError::code`]); upstream bodies and messages are never passed on.

use std::collections::VecDeque;
use std::net::IpAddr;
use std::time::Duration;

use serde_json::{Value, json};

use crate::input::UserTurn;
use crate::session::{Message, Role};
use crate::sse::SseDecoder;

/// Model name the built-in demo provider reports.
pub const BUILTIN_MODEL: &str = "builtin-demo";

/// Bounds and timeouts of a provider call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProviderLimits {
    /// Longest wait for the TCP/TLS connection. Default 10 s; on overflow `provider_unreachable`.
    pub connect_timeout: Duration,
    /// Longest wait for the response head and then for each next chunk of the body. Default 120 s;
    /// on overflow `provider_timeout`.
    pub idle_timeout: Duration,
    /// Largest single server-sent event, in bytes. Default 1 MiB; on overflow `provider_bad_response`.
    pub max_event_bytes: usize,
    /// Largest reply text, in bytes of UTF-8. Default 4 MiB; on overflow `provider_reply_too_long`
    /// (the text streamed so far stays streamed; the turn fails).
    pub max_reply_bytes: usize,
}

impl Default for ProviderLimits {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(120),
            max_event_bytes: 1024 * 1024,
            max_reply_bytes: 4 * 1024 * 1024,
        }
    }
}

/// Token usage of one reply, reported in the turn's `result` as
/// `"usage":{"input_tokens":12,"output_tokens":8}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Usage {
    /// Prompt tokens (OpenAI `prompt_tokens`; built-in: words of the history).
    pub input_tokens: u64,
    /// Reply tokens (OpenAI `completion_tokens`; built-in: words of the reply).
    pub output_tokens: u64,
}

/// Why a provider could not be configured or did not answer. Crosses the process boundary as a code.
#[non_exhaustive]
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ProviderError {
    /// `OPENAI_BASE_URL` is not an absolute `http(s)` URL without credentials.
    #[error("OPENAI_BASE_URL is not a valid http(s) url")]
    UrlInvalid,
    /// `OPENAI_BASE_URL` is plain `http://` to a host that is not loopback.
    #[error("OPENAI_BASE_URL uses plain http to a non-loopback host")]
    UrlRejected,
    /// `OPENAI_BASE_URL` is set but neither `--model` nor `OPENAI_MODEL` names a model.
    #[error("no model: pass --model or set OPENAI_MODEL")]
    MissingModel,
    /// The HTTP client could not be built (TLS backend).
    #[error("http client could not be built")]
    Client,
    /// Connecting failed or timed out.
    #[error("provider unreachable")]
    Unreachable,
    /// The response head or a body chunk did not arrive within the idle timeout.
    #[error("provider timed out")]
    Timeout,
    /// HTTP 401 or 403.
    #[error("provider refused the credentials")]
    AuthFailed,
    /// HTTP 429.
    #[error("provider rate limited the request")]
    RateLimited,
    /// Any other non-2xx status.
    #[error("provider returned http status {status}")]
    Http {
        /// The status code (diagnostics only; not part of the stable code).
        status: u16,
    },
    /// Not an event stream of chat-completion chunks, an `error` object in the stream, or a stream cut
    /// before it finished.
    #[error("provider sent a malformed response")]
    BadResponse,
    /// The reply grew past [`ProviderLimits::max_reply_bytes`].
    #[error("provider reply too long")]
    ReplyTooLong,
}

impl ProviderError {
    /// Stable machine-readable code, e.g. `provider_auth_failed`.
    pub fn code(&self) -> &'static str {
        match self {
            ProviderError::UrlInvalid => "provider_url_invalid",
            ProviderError::UrlRejected => "provider_url_rejected",
            ProviderError::MissingModel => "missing_model",
            ProviderError::Client => "provider_client_failed",
            ProviderError::Unreachable => "provider_unreachable",
            ProviderError::Timeout => "provider_timeout",
            ProviderError::AuthFailed => "provider_auth_failed",
            ProviderError::RateLimited => "provider_rate_limited",
            ProviderError::Http { .. } => "provider_http_error",
            ProviderError::BadResponse => "provider_bad_response",
            ProviderError::ReplyTooLong => "provider_reply_too_long",
        }
    }
}

/// One item of a streamed reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StreamItem {
    /// A piece of reply text, to be sent as a `text_delta`.
    Text(String),
    /// The reply's usage (OpenAI sends it in the last chunk).
    Usage(Usage),
    /// The model calls a tool (complete: OpenAI's streamed fragments are joined before this is yielded).
    ToolCall(ToolCall),
}

/// A tool call of the model, OpenAI `tool_calls` shape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolCall {
    /// The call id (`call_…`), echoed as `tool_call_id` in the result message.
    pub id: String,
    /// The function name.
    pub name: String,
    /// The arguments as the model wrote them (a JSON object text).
    pub arguments: String,
}

/// One round of tool use within a turn: what the model said, the calls it made, and each call's result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolRound {
    /// Text the model streamed before calling.
    pub text: String,
    /// The calls, each with its result (a JSON text given to the model as the `tool` message).
    pub calls: Vec<(ToolCall, String)>,
}

/// Most tool calls one reply may carry; more is `provider_bad_response`.
pub const MAX_TOOL_CALLS_PER_REPLY: usize = 8;
/// Most bytes of one tool call's arguments; more is `provider_bad_response`.
pub const MAX_TOOL_ARGUMENT_BYTES: usize = 64 * 1024;
/// Prompt prefix that makes the built-in provider call the managed-task tool.
pub const BUILTIN_TASK_PREFIX: &str = "run-task:";

/// Where replies come from.
#[derive(Debug)]
pub enum Provider {
    /// The deterministic demo provider.
    Builtin,
    /// An OpenAI-compatible endpoint.
    OpenAi(OpenAiProvider),
}

/// Configuration of the OpenAI-compatible provider.
pub struct OpenAiProvider {
    client: reqwest::Client,
    endpoint: reqwest::Url,
    api_key: Option<String>,
    model: String,
    limits: ProviderLimits,
}

impl std::fmt::Debug for OpenAiProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiProvider")
            .field("endpoint", &self.endpoint.as_str())
            .field("api_key", &self.api_key.as_ref().map(|_| "***"))
            .field("model", &self.model)
            .finish()
    }
}

impl Provider {
    /// The provider the environment selects: OpenAI-compatible when `OPENAI_BASE_URL` is set, else built-in.
    ///
    /// # Errors
    /// [`ProviderError::UrlInvalid`], [`ProviderError::UrlRejected`], [`ProviderError::MissingModel`],
    /// [`ProviderError::Client`].
    pub fn from_vars(
        lookup: impl Fn(&str) -> Option<String>,
        model: Option<&str>,
        limits: ProviderLimits,
    ) -> Result<Self, ProviderError> {
        let var = |name: &str| lookup(name).filter(|v| !v.is_empty());
        let Some(base) = var("OPENAI_BASE_URL") else {
            return Ok(Provider::Builtin);
        };
        let endpoint = chat_completions_url(&base)?;
        let model = model
            .map(str::to_owned)
            .filter(|m| !m.is_empty())
            .or_else(|| var("OPENAI_MODEL"))
            .ok_or(ProviderError::MissingModel)?;
        let client = reqwest::Client::builder()
            .connect_timeout(limits.connect_timeout)
            .read_timeout(limits.idle_timeout)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|_| ProviderError::Client)?;
        Ok(Provider::OpenAi(OpenAiProvider {
            client,
            endpoint,
            api_key: var("OPENAI_API_KEY"),
            model,
            limits,
        }))
    }

    /// The model name reported in `init`: the configured model, or [`BUILTIN_MODEL`].
    pub fn model(&self) -> &str {
        match self {
            Provider::Builtin => BUILTIN_MODEL,
            Provider::OpenAi(openai) => &openai.model,
        }
    }

    /// Starts a reply to `history`, whose last message is `current` as stored (images as placeholders);
    /// the provider gets `current` itself (its text and images) in place of that last message, then the tool
    /// `rounds` of this turn so far. `tools` (OpenAI format) are offered when not empty.
    ///
    /// # Errors
    /// A [`ProviderError`] for a failed request or a non-2xx status.
    pub async fn start(
        &self,
        history: &[Message],
        current: &UserTurn,
        tools: &[Value],
        rounds: &[ToolRound],
    ) -> Result<ReplyStream, ProviderError> {
        match self {
            Provider::Builtin => Ok(builtin_reply(history, current, !tools.is_empty(), rounds)),
            Provider::OpenAi(openai) => openai.start(history, current, tools, rounds).await,
        }
    }
}

/// `<base>/chat/completions`, after the URL rules of the module docs.
fn chat_completions_url(base: &str) -> Result<reqwest::Url, ProviderError> {
    let url = reqwest::Url::parse(base).map_err(|_| ProviderError::UrlInvalid)?;
    if !url.username().is_empty() || url.password().is_some() || url.query().is_some() {
        return Err(ProviderError::UrlInvalid);
    }
    let host = url.host_str().ok_or(ProviderError::UrlInvalid)?;
    match url.scheme() {
        "https" => {}
        "http" if is_loopback(host) => {}
        "http" => return Err(ProviderError::UrlRejected),
        _ => return Err(ProviderError::UrlInvalid),
    }
    let joined = format!("{}/chat/completions", url.as_str().trim_end_matches('/'));
    reqwest::Url::parse(&joined).map_err(|_| ProviderError::UrlInvalid)
}

fn is_loopback(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

fn word_count(text: &str) -> u64 {
    text.split_whitespace().count() as u64
}

/// The built-in provider's scripted tool use: a tool call for a `run-task:` prompt, then a report of its result.
fn builtin_tool_step(
    history: &[Message],
    current: &UserTurn,
    rounds: &[ToolRound],
) -> Option<ReplyStream> {
    let input_tokens = history.iter().map(|m| word_count(&m.content)).sum();
    if let Some(round) = rounds.last() {
        let mut reply = String::new();
        for (_, result) in &round.calls {
            if !reply.is_empty() {
                reply.push('\n');
            }
            reply.push_str(&describe_task_result(result));
        }
        let usage = Usage {
            input_tokens,
            output_tokens: word_count(&reply),
        };
        return Some(ReplyStream {
            inner: Inner::Builtin {
                items: VecDeque::from([StreamItem::Text(reply), StreamItem::Usage(usage)]),
            },
        });
    }
    let spec = current
        .text
        .trim()
        .strip_prefix(BUILTIN_TASK_PREFIX)?
        .trim();
    let arguments = match serde_json::from_str::<Value>(spec) {
        Ok(argv @ Value::Array(_)) => json!({ "argv": argv }).to_string(),
        _ => spec.to_owned(),
    };
    let call = ToolCall {
        id: "call_1".to_owned(),
        name: crate::tasks::TOOL_NAME.to_owned(),
        arguments,
    };
    let usage = Usage {
        input_tokens,
        output_tokens: 0,
    };
    Some(ReplyStream {
        inner: Inner::Builtin {
            items: VecDeque::from([StreamItem::ToolCall(call), StreamItem::Usage(usage)]),
        },
    })
}

/// The built-in provider's report of a managed-task result (the JSON of `crate::tasks::ManagedTasks::run`).
fn describe_task_result(result: &str) -> String {
    let value: Value = serde_json::from_str(result).unwrap_or(Value::Null);
    let text = |name: &str| value.get(name).and_then(Value::as_str).unwrap_or_default();
    let mut out = format!("Managed task {}", text("status"));
    if !text("task_id").is_empty() {
        out = format!("Managed task {} {}", text("task_id"), text("status"));
    }
    if let Some(code) = value.get("exit_code").and_then(Value::as_i64) {
        out.push_str(&format!(", exit code {code}"));
    }
    if !text("error").is_empty() {
        out.push_str(&format!(", error {}", text("error")));
    }
    out.push('.');
    for (name, label) in [("stdout", "stdout"), ("stderr", "stderr")] {
        if !text(name).is_empty() {
            out.push_str(&format!("\n{label}:\n{}", text(name)));
            if value.get(format!("{name}_truncated")) == Some(&Value::Bool(true)) {
                out.push_str("\n[truncated]");
            }
        }
    }
    if !text("note").is_empty() {
        out.push_str(&format!("\n{}", text("note")));
    }
    out
}

fn builtin_reply(
    history: &[Message],
    current_turn: &UserTurn,
    tools: bool,
    rounds: &[ToolRound],
) -> ReplyStream {
    if tools && let Some(step) = builtin_tool_step(history, current_turn, rounds) {
        return step;
    }
    let images = current_turn.images.len();
    let current = match current_turn.text.as_str() {
        "" => "(no text)",
        text => text,
    };
    // The history ends with the current message; the one before it is the previous user message.
    let previous = history
        .iter()
        .rev()
        .filter(|m| m.role == Role::User)
        .nth(1)
        .map(|m| m.content.as_str());
    let turn = history.iter().filter(|m| m.role == Role::User).count();
    let mut reply = format!("You said: {current} (turn {turn} of this session");
    if let Some(previous) = previous {
        reply.push_str(&format!("; before that you said: {previous}"));
    }
    reply.push(')');
    if images > 0 {
        reply.push_str(&format!(
            " [{images} image(s) received; the built-in demo provider does not look at images]"
        ));
    }
    let usage = Usage {
        input_tokens: history.iter().map(|m| word_count(&m.content)).sum(),
        output_tokens: word_count(&reply),
    };
    // Stream word by word, keeping the whitespace with the preceding word.
    let mut items = VecDeque::new();
    let mut start = 0;
    for (index, ch) in reply.char_indices() {
        if ch == ' ' {
            items.push_back(StreamItem::Text(reply[start..=index].to_owned()));
            start = index + 1;
        }
    }
    if start < reply.len() {
        items.push_back(StreamItem::Text(reply[start..].to_owned()));
    }
    items.push_back(StreamItem::Usage(usage));
    ReplyStream {
        inner: Inner::Builtin { items },
    }
}

impl OpenAiProvider {
    async fn start(
        &self,
        history: &[Message],
        current: &UserTurn,
        tools: &[Value],
        rounds: &[ToolRound],
    ) -> Result<ReplyStream, ProviderError> {
        let images = &current.images;
        let last = history.len().saturating_sub(1);
        let messages: Vec<Value> = history
            .iter()
            .enumerate()
            .map(|(index, message)| {
                let role = match message.role {
                    Role::User => "user",
                    Role::Assistant => "assistant",
                };
                if index == last && message.role == Role::User && !images.is_empty() {
                    let mut parts = Vec::new();
                    if !current.text.is_empty() {
                        parts.push(json!({"type":"text","text":current.text}));
                    }
                    parts.extend(images.iter().map(|image| {
                        json!({"type":"image_url","image_url":{"url":format!("data:{};base64,{}", image.media_type, image.data_base64)}})
                    }));
                    json!({"role": role, "content": parts})
                } else {
                    json!({"role": role, "content": message.content})
                }
            })
            .collect();
        let mut messages = messages;
        for round in rounds {
            let calls: Vec<Value> = round
                .calls
                .iter()
                .map(|(call, _)| {
                    json!({"id": call.id, "type": "function",
                           "function": {"name": call.name, "arguments": call.arguments}})
                })
                .collect();
            let content = if round.text.is_empty() {
                Value::Null
            } else {
                Value::String(round.text.clone())
            };
            messages.push(json!({"role": "assistant", "content": content, "tool_calls": calls}));
            for (call, result) in &round.calls {
                messages.push(json!({"role": "tool", "tool_call_id": call.id, "content": result}));
            }
        }
        let mut body = json!({
            "model": self.model,
            "messages": messages,
            "stream": true,
            "stream_options": {"include_usage": true},
        });
        if !tools.is_empty() {
            body["tools"] = Value::Array(tools.to_vec());
        }
        let mut request = self
            .client
            .post(self.endpoint.clone())
            .header(reqwest::header::ACCEPT, "text/event-stream")
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.to_string());
        if let Some(key) = &self.api_key {
            request = request.bearer_auth(key);
        }
        let response = tokio::time::timeout(self.limits.idle_timeout, request.send())
            .await
            .map_err(|_| ProviderError::Timeout)?
            .map_err(map_reqwest_error)?;
        let status = response.status();
        if !status.is_success() {
            eprintln!("awp-agent: provider answered http {}", status.as_u16());
            return Err(match status.as_u16() {
                401 | 403 => ProviderError::AuthFailed,
                429 => ProviderError::RateLimited,
                code => ProviderError::Http { status: code },
            });
        }
        let is_event_stream = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| {
                v.trim_start()
                    .to_ascii_lowercase()
                    .starts_with("text/event-stream")
            });
        if !is_event_stream {
            return Err(ProviderError::BadResponse);
        }
        Ok(ReplyStream {
            inner: Inner::OpenAi(Box::new(OpenAiStream {
                response,
                decoder: SseDecoder::new(self.limits.max_event_bytes),
                idle_timeout: self.limits.idle_timeout,
                state: ChunkState::new(self.limits.max_reply_bytes),
            })),
        })
    }
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

/// A reply being streamed.
#[derive(Debug)]
pub struct ReplyStream {
    inner: Inner,
}

#[derive(Debug)]
enum Inner {
    Builtin { items: VecDeque<StreamItem> },
    OpenAi(Box<OpenAiStream>),
}

#[derive(Debug)]
struct OpenAiStream {
    response: reqwest::Response,
    decoder: SseDecoder,
    idle_timeout: Duration,
    state: ChunkState,
}

/// The sans-IO part of an OpenAI stream: chat-completion chunks (SSE `data`) in, [`StreamItem`]s out.
#[derive(Debug)]
struct ChunkState {
    max_reply_bytes: usize,
    reply_bytes: usize,
    /// A choice carried a `finish_reason`.
    finished: bool,
    /// `[DONE]` or end of body seen.
    done: bool,
    pending: VecDeque<StreamItem>,
    /// Tool calls being streamed, by their `index`: id, name, argument fragments joined.
    calls: std::collections::BTreeMap<u64, ToolCall>,
}

impl ReplyStream {
    /// The next piece of the reply; `Ok(None)` once it is complete.
    ///
    /// # Errors
    /// A [`ProviderError`] when the stream breaks, is malformed, or exceeds a limit.
    pub async fn next(&mut self) -> Result<Option<StreamItem>, ProviderError> {
        match &mut self.inner {
            Inner::Builtin { items } => Ok(items.pop_front()),
            Inner::OpenAi(stream) => stream.next().await,
        }
    }
}

impl OpenAiStream {
    async fn next(&mut self) -> Result<Option<StreamItem>, ProviderError> {
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
                    let chunk = tokio::time::timeout(self.idle_timeout, self.response.chunk())
                        .await
                        .map_err(|_| ProviderError::Timeout)?
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
                Err(_) => return Err(ProviderError::BadResponse),
            }
        }
    }
}

impl ChunkState {
    fn new(max_reply_bytes: usize) -> Self {
        Self {
            max_reply_bytes,
            reply_bytes: 0,
            finished: false,
            done: false,
            pending: VecDeque::new(),
            calls: std::collections::BTreeMap::new(),
        }
    }

    /// Moves the complete tool calls to `pending`, in index order.
    fn flush_calls(&mut self) -> Result<(), ProviderError> {
        for (_, call) in std::mem::take(&mut self.calls) {
            if call.id.is_empty() || call.name.is_empty() {
                return Err(ProviderError::BadResponse);
            }
            self.pending.push_back(StreamItem::ToolCall(call));
        }
        Ok(())
    }

    fn handle_tool_calls(&mut self, calls: &Value) -> Result<(), ProviderError> {
        let Value::Array(calls) = calls else {
            return Err(ProviderError::BadResponse);
        };
        for (position, call) in calls.iter().enumerate() {
            let index = call
                .get("index")
                .and_then(Value::as_u64)
                .unwrap_or(position as u64);
            if !self.calls.contains_key(&index) && self.calls.len() >= MAX_TOOL_CALLS_PER_REPLY {
                return Err(ProviderError::BadResponse);
            }
            let entry = self.calls.entry(index).or_insert_with(|| ToolCall {
                id: String::new(),
                name: String::new(),
                arguments: String::new(),
            });
            if let Some(id) = call.get("id").and_then(Value::as_str)
                && !id.is_empty()
            {
                entry.id = id.chars().take(256).collect();
            }
            if let Some(name) = call.pointer("/function/name").and_then(Value::as_str) {
                entry.name.push_str(name);
            }
            if let Some(arguments) = call.pointer("/function/arguments").and_then(Value::as_str) {
                entry.arguments.push_str(arguments);
            }
            if entry.name.len() > 128 || entry.arguments.len() > MAX_TOOL_ARGUMENT_BYTES {
                return Err(ProviderError::BadResponse);
            }
        }
        Ok(())
    }

    fn handle_event(&mut self, data: &str) -> Result<(), ProviderError> {
        if data.trim() == "[DONE]" {
            self.done = true;
            return Ok(());
        }
        let chunk: Value = serde_json::from_str(data).map_err(|_| ProviderError::BadResponse)?;
        if chunk.get("error").is_some() {
            eprintln!("awp-agent: provider sent an error event");
            return Err(ProviderError::BadResponse);
        }
        let choices = match chunk.get("choices") {
            Some(Value::Array(choices)) => choices.as_slice(),
            None | Some(Value::Null) => &[],
            Some(_) => return Err(ProviderError::BadResponse),
        };
        for choice in choices
            .iter()
            .filter(|c| c.get("index").and_then(Value::as_u64).unwrap_or(0) == 0)
        {
            if let Some(text) = choice.pointer("/delta/content").and_then(Value::as_str)
                && !text.is_empty()
            {
                self.reply_bytes += text.len();
                if self.reply_bytes > self.max_reply_bytes {
                    return Err(ProviderError::ReplyTooLong);
                }
                self.pending.push_back(StreamItem::Text(text.to_owned()));
            }
            if let Some(calls) = choice.pointer("/delta/tool_calls").filter(|c| !c.is_null()) {
                self.handle_tool_calls(calls)?;
            }
            if choice.get("finish_reason").is_some_and(|r| !r.is_null()) {
                self.finished = true;
            }
        }
        if let Some(usage) = chunk.get("usage").filter(|u| !u.is_null()) {
            let field = |name: &str| usage.get(name).and_then(Value::as_u64);
            match (field("prompt_tokens"), field("completion_tokens")) {
                (Some(input_tokens), Some(output_tokens)) => {
                    self.pending.push_back(StreamItem::Usage(Usage {
                        input_tokens,
                        output_tokens,
                    }))
                }
                _ => return Err(ProviderError::BadResponse),
            }
        }
        Ok(())
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
            ProviderLimits::default(),
        )
    }

    #[test]
    fn base_url_rules() {
        let check = |url: &str, expect: Result<&str, &str>| {
            let got = chat_completions_url(url)
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
        check("not a url", Err("provider_url_invalid"));
    }

    #[test]
    fn selection_and_model() {
        assert!(matches!(from(&[], Some("m")), Ok(Provider::Builtin)));
        assert_eq!(
            from(&[], Some("m")).expect("builtin").model(),
            BUILTIN_MODEL
        );
        let openai = from(
            &[
                ("OPENAI_BASE_URL", "http://127.0.0.1:1/v1"),
                ("OPENAI_MODEL", "fallback"),
            ],
            None,
        )
        .expect("openai");
        assert_eq!(openai.model(), "fallback");
        let openai = from(
            &[
                ("OPENAI_BASE_URL", "http://127.0.0.1:1/v1"),
                ("OPENAI_API_KEY", "sk-secret"),
            ],
            Some("m"),
        )
        .expect("openai");
        assert_eq!(openai.model(), "m");
        assert!(!format!("{openai:?}").contains("sk-secret"));
        assert_eq!(
            from(&[("OPENAI_BASE_URL", "http://127.0.0.1:1/v1")], None).map(|_| ()),
            Err(ProviderError::MissingModel)
        );
    }

    #[tokio::test]
    async fn builtin_reply_continues_the_history() {
        let history = vec![
            Message {
                role: Role::User,
                content: "first".into(),
            },
            Message {
                role: Role::Assistant,
                content: "You said: first (turn 1 of this session)".into(),
            },
            Message {
                role: Role::User,
                content: "second one".into(),
            },
        ];
        let current = UserTurn {
            text: "second one".into(),
            images: Vec::new(),
        };
        let mut stream = Provider::Builtin
            .start(&history, &current, &[], &[])
            .await
            .expect("stream");
        let mut text = String::new();
        let mut usage = None;
        while let Some(item) = stream.next().await.expect("item") {
            match item {
                StreamItem::Text(t) => text.push_str(&t),
                StreamItem::Usage(u) => usage = Some(u),
                StreamItem::ToolCall(call) => panic!("no tools were offered: {call:?}"),
            }
        }
        assert_eq!(
            text,
            "You said: second one (turn 2 of this session; before that you said: first)"
        );
        assert_eq!(
            usage,
            Some(Usage {
                input_tokens: 11,
                output_tokens: 14
            })
        );
    }

    fn chunks(
        max_reply_bytes: usize,
        events: &[&str],
    ) -> Result<(Vec<StreamItem>, bool), ProviderError> {
        let mut state = ChunkState::new(max_reply_bytes);
        for event in events {
            state.handle_event(event)?;
        }
        Ok((state.pending.into_iter().collect(), state.done))
    }

    #[test]
    fn chat_completion_chunks() {
        let text = |t: &str| StreamItem::Text(t.to_owned());
        let delta = |t: &str| json!({"choices":[{"index":0,"delta":{"content":t}}]}).to_string();
        assert_eq!(
            chunks(
                10,
                &[
                    &delta("ab"),
                    &json!({"choices":[{"index":1,"delta":{"content":"other choice"}}]})
                        .to_string(),
                    &json!({"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}})
                        .to_string(),
                    "[DONE]"
                ]
            ),
            Ok((
                vec![
                    text("ab"),
                    StreamItem::Usage(Usage {
                        input_tokens: 3,
                        output_tokens: 2
                    })
                ],
                true
            ))
        );
        // Reply limit: exactly at the limit is fine, one byte past fails.
        assert_eq!(
            chunks(4, &[&delta("ab"), &delta("cd")]),
            Ok((vec![text("ab"), text("cd")], false))
        );
        assert_eq!(
            chunks(4, &[&delta("ab"), &delta("cde")]),
            Err(ProviderError::ReplyTooLong)
        );
        assert_eq!(chunks(4, &["{not json"]), Err(ProviderError::BadResponse));
        assert_eq!(
            chunks(4, &[r#"{"error":{"message":"x"}}"#]),
            Err(ProviderError::BadResponse)
        );
        assert_eq!(
            chunks(4, &[r#"{"choices":{}}"#]),
            Err(ProviderError::BadResponse)
        );
        assert_eq!(
            chunks(4, &[r#"{"usage":{"prompt_tokens":"x"}}"#]),
            Err(ProviderError::BadResponse)
        );
    }

    #[test]
    fn streamed_tool_calls_are_joined_and_yielded_at_the_end() {
        let call =
            |c: Value| json!({"choices":[{"index":0,"delta":{"tool_calls":[c]}}]}).to_string();
        let mut state = ChunkState::new(100);
        for event in [
            call(
                json!({"index":0,"id":"call_a","type":"function","function":{"name":"awp_run_managed_task","arguments":"{\"argv\":"}}),
            ),
            call(json!({"index":1,"id":"call_b","function":{"name":"other","arguments":"{}"}})),
            call(json!({"index":0,"function":{"arguments":"[\"echo\"]}"}})),
            json!({"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}).to_string(),
        ] {
            state.handle_event(&event).expect("chunk");
        }
        assert!(
            state.pending.is_empty(),
            "calls wait for the end of the reply"
        );
        state.flush_calls().expect("complete calls");
        let calls: Vec<StreamItem> = state.pending.into_iter().collect();
        assert_eq!(
            calls,
            [
                StreamItem::ToolCall(ToolCall {
                    id: "call_a".into(),
                    name: "awp_run_managed_task".into(),
                    arguments: r#"{"argv":["echo"]}"#.into()
                }),
                StreamItem::ToolCall(ToolCall {
                    id: "call_b".into(),
                    name: "other".into(),
                    arguments: "{}".into()
                }),
            ]
        );
        // A call without an id, or too many calls, is a malformed reply.
        let mut state = ChunkState::new(100);
        state
            .handle_event(&call(json!({"index":0,"function":{"name":"x"}})))
            .expect("chunk");
        assert_eq!(state.flush_calls(), Err(ProviderError::BadResponse));
        let mut state = ChunkState::new(100);
        for index in 0..MAX_TOOL_CALLS_PER_REPLY {
            state
                .handle_event(&call(
                    json!({"index":index,"id":"c","function":{"name":"x"}}),
                ))
                .expect("within the limit");
        }
        assert_eq!(
            state.handle_event(&call(json!({"index":99,"id":"c","function":{"name":"x"}}))),
            Err(ProviderError::BadResponse)
        );
    }

    #[tokio::test]
    async fn the_builtin_provider_calls_the_tool_for_run_task_prompts_when_offered() {
        let turn = |text: &str| UserTurn {
            text: text.into(),
            images: Vec::new(),
        };
        let history = vec![Message {
            role: Role::User,
            content: "run-task: [\"echo\",\"hi\"]".into(),
        }];
        let items = |stream: ReplyStream| match stream.inner {
            Inner::Builtin { items } => items.into_iter().collect::<Vec<_>>(),
            Inner::OpenAi(_) => panic!("builtin"),
        };
        let tool = json!({"type":"function"});
        let current = turn("run-task: [\"echo\",\"hi\"]");
        let first = items(
            Provider::Builtin
                .start(&history, &current, std::slice::from_ref(&tool), &[])
                .await
                .expect("stream"),
        );
        let Some(StreamItem::ToolCall(call)) = first.first().cloned() else {
            panic!("{first:?}");
        };
        assert_eq!(call.name, crate::tasks::TOOL_NAME);
        assert_eq!(call.arguments, r#"{"argv":["echo","hi"]}"#);
        let round = ToolRound {
            text: String::new(),
            calls: vec![(
                call,
                json!({"task_id":"task_1","status":"succeeded","exit_code":0,"stdout":"hi\n","stderr":""})
                    .to_string(),
            )],
        };
        let second = items(
            Provider::Builtin
                .start(&history, &current, &[tool], &[round])
                .await
                .expect("stream"),
        );
        assert_eq!(
            second.first(),
            Some(&StreamItem::Text(
                "Managed task task_1 succeeded, exit code 0.\nstdout:\nhi\n".into()
            ))
        );
        // Without tools the prompt is just text.
        let plain = items(
            Provider::Builtin
                .start(&history, &current, &[], &[])
                .await
                .expect("stream"),
        );
        assert!(matches!(plain.first(), Some(StreamItem::Text(t)) if t.starts_with("You ")));
    }

    #[test]
    fn every_error_has_a_distinct_stable_code() {
        let all = [
            ProviderError::UrlInvalid,
            ProviderError::UrlRejected,
            ProviderError::MissingModel,
            ProviderError::Client,
            ProviderError::Unreachable,
            ProviderError::Timeout,
            ProviderError::AuthFailed,
            ProviderError::RateLimited,
            ProviderError::Http { status: 500 },
            ProviderError::BadResponse,
            ProviderError::ReplyTooLong,
        ];
        let codes: std::collections::BTreeSet<&str> = all.iter().map(ProviderError::code).collect();
        assert_eq!(codes.len(), all.len());
        assert_eq!(
            ProviderError::Http { status: 503 }.code(),
            "provider_http_error"
        );
    }
}
