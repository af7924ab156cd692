//! Chat completions: the request ([`ChatRequest`]), the streamed reply ([`ReplyStream`] of [`StreamItem`]s) and
//! the sans-IO decoder of OpenAI chat-completion chunks.
//!
//! Source: OpenAI "Create chat completion" with `stream: true` (`data: {chunk}` events, `data: [DONE]` last;
//! `choices[0].delta.content`, `choices[0].delta.tool_calls[]` streamed in fragments by `index`,
//! `choices[0].finish_reason`, `usage` in the last chunk when `stream_options.include_usage` is set).
//! `delta.reasoning_content` is the field DeepSeek-style OpenAI-compatible servers (and DeepChat's
//! `openAICompatibleProvider.ts`) use for reasoning text.

use std::collections::{BTreeMap, VecDeque};

use serde_json::{Value, json};

use crate::error::ProviderError;

/// Most tool calls one reply may carry; more is `provider_bad_response`.
pub const MAX_TOOL_CALLS_PER_REPLY: usize = 8;
/// Most bytes of one tool call's arguments; more is `provider_bad_response`.
pub const MAX_TOOL_ARGUMENT_BYTES: usize = 64 * 1024;

/// Token usage of one reply.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// Prompt tokens (OpenAI `prompt_tokens`; built-in: whitespace-separated words of the messages).
    pub input_tokens: u64,
    /// Reply tokens (OpenAI `completion_tokens`; built-in: words of the reply).
    pub output_tokens: u64,
}

/// Who wrote a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Instructions (`"system"`).
    System,
    /// The human (`"user"`).
    User,
    /// The model (`"assistant"`).
    Assistant,
    /// A tool result (`"tool"`, with [`ChatMessage::tool_call_id`]).
    Tool,
}

impl Role {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }
}

/// One part of a message's content.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ContentPart {
    /// `{"type":"text","text":…}`.
    Text(String),
    /// `{"type":"image_url","image_url":{"url":"data:<media_type>;base64,<data>"}}`.
    Image {
        /// `image/png`, `image/jpeg`, …
        media_type: String,
        /// The base64 payload.
        data_base64: String,
    },
}

/// One message of a chat request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChatMessage {
    /// Who wrote it.
    pub role: Role,
    /// Text and images; a message of text only is sent as a plain string.
    pub content: Vec<ContentPart>,
    /// The assistant's tool calls (assistant messages only).
    pub tool_calls: Vec<ToolCall>,
    /// The call this message answers (tool messages only).
    pub tool_call_id: Option<String>,
}

impl ChatMessage {
    /// A text-only message.
    pub fn text(role: Role, text: impl Into<String>) -> Self {
        Self {
            role,
            content: vec![ContentPart::Text(text.into())],
            tool_calls: Vec::new(),
            tool_call_id: None,
        }
    }

    /// The text parts joined with `\n`.
    pub fn joined_text(&self) -> String {
        let mut out = String::new();
        for part in &self.content {
            if let ContentPart::Text(text) = part {
                if !out.is_empty() {
                    out.push('\n');
                }
                out.push_str(text);
            }
        }
        out
    }

    fn to_json(&self) -> Value {
        let only_text = self
            .content
            .iter()
            .all(|part| matches!(part, ContentPart::Text(_)));
        let content = if self.content.is_empty() {
            Value::Null
        } else if only_text {
            Value::String(self.joined_text())
        } else {
            Value::Array(
                self.content
                    .iter()
                    .map(|part| match part {
                        ContentPart::Text(text) => json!({"type":"text","text":text}),
                        ContentPart::Image {
                            media_type,
                            data_base64,
                        } => json!({"type":"image_url","image_url":{
                            "url": format!("data:{media_type};base64,{data_base64}")}}),
                    })
                    .collect(),
            )
        };
        let mut message = json!({"role": self.role.as_str(), "content": content});
        if !self.tool_calls.is_empty() {
            message["tool_calls"] = self
                .tool_calls
                .iter()
                .map(|call| {
                    json!({"id": call.id, "type": "function",
                           "function": {"name": call.name, "arguments": call.arguments}})
                })
                .collect();
        }
        if let Some(id) = &self.tool_call_id {
            message["tool_call_id"] = Value::String(id.clone());
        }
        message
    }
}

/// A chat-completion request. Per-call settings never change the provider's defaults.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ChatRequest {
    /// The model; `None` uses the provider's default model.
    pub model: Option<String>,
    /// The conversation, oldest first (a system prompt is a [`Role::System`] message).
    pub messages: Vec<ChatMessage>,
    /// Tools in OpenAI format (`{"type":"function","function":{…}}`); offered when not empty.
    pub tools: Vec<Value>,
    /// Sampling temperature, sent when set.
    pub temperature: Option<f64>,
    /// Most reply tokens, sent as `max_tokens` when set (the built-in provider counts words).
    pub max_tokens: Option<u32>,
}

impl ChatRequest {
    /// The request body for `POST <base>/chat/completions`.
    pub(crate) fn to_body(&self, model: &str) -> Value {
        let mut body = json!({
            "model": model,
            "messages": self.messages.iter().map(ChatMessage::to_json).collect::<Vec<_>>(),
            "stream": true,
            "stream_options": {"include_usage": true},
        });
        if !self.tools.is_empty() {
            body["tools"] = Value::Array(self.tools.clone());
        }
        if let Some(temperature) = self.temperature {
            body["temperature"] = json!(temperature);
        }
        if let Some(max_tokens) = self.max_tokens {
            body["max_tokens"] = json!(max_tokens);
        }
        body
    }

    /// Bytes of text in the messages (the prompt-size bound).
    pub(crate) fn text_bytes(&self) -> usize {
        self.messages
            .iter()
            .flat_map(|m| &m.content)
            .map(|part| match part {
                ContentPart::Text(text) => text.len(),
                ContentPart::Image { data_base64, .. } => data_base64.len(),
            })
            .sum()
    }
}

/// Why the model stopped (OpenAI `finish_reason`: `stop`, `length`, `tool_calls`, `content_filter`, …;
/// other values are kept as sent, at most 64 bytes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FinishReason(pub String);

/// One item of a streamed reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StreamItem {
    /// A piece of reply text.
    Text(String),
    /// A piece of reasoning text (`delta.reasoning_content`).
    Reasoning(String),
    /// The reply's usage (OpenAI sends it in the last chunk).
    Usage(Usage),
    /// The model calls a tool (complete: streamed fragments are joined before this is yielded).
    ToolCall(ToolCall),
    /// Why the model stopped.
    Finish(FinishReason),
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

/// A reply being streamed. Dropping it closes the upstream connection (the request is aborted).
#[derive(Debug)]
pub struct ReplyStream {
    inner: Inner,
}

#[derive(Debug)]
enum Inner {
    Scripted(VecDeque<StreamItem>),
    OpenAi(Box<crate::openai::ChatStream>),
}

impl ReplyStream {
    /// A stream of fixed items (the built-in provider's replies, or a caller's scripted reply).
    pub fn scripted(items: impl IntoIterator<Item = StreamItem>) -> Self {
        Self {
            inner: Inner::Scripted(items.into_iter().collect()),
        }
    }

    pub(crate) fn openai(stream: crate::openai::ChatStream) -> Self {
        Self {
            inner: Inner::OpenAi(Box::new(stream)),
        }
    }

    /// The next piece of the reply; `Ok(None)` once it is complete.
    ///
    /// # Errors
    /// A [`ProviderError`] when the stream breaks, is malformed, stalls, or exceeds a limit.
    pub async fn next(&mut self) -> Result<Option<StreamItem>, ProviderError> {
        match &mut self.inner {
            Inner::Scripted(items) => Ok(items.pop_front()),
            Inner::OpenAi(stream) => stream.next().await,
        }
    }
}

/// The sans-IO part of an OpenAI stream: chat-completion chunks (SSE `data`) in, [`StreamItem`]s out.
#[derive(Debug)]
pub(crate) struct ChunkState {
    max_reply_bytes: usize,
    reply_bytes: usize,
    /// A choice carried a `finish_reason`.
    pub(crate) finished: bool,
    /// `[DONE]` or end of body seen.
    pub(crate) done: bool,
    pub(crate) pending: VecDeque<StreamItem>,
    /// Tool calls being streamed, by their `index`: id, name, argument fragments joined.
    pub(crate) calls: BTreeMap<u64, ToolCall>,
}

impl ChunkState {
    pub(crate) fn new(max_reply_bytes: usize) -> Self {
        Self {
            max_reply_bytes,
            reply_bytes: 0,
            finished: false,
            done: false,
            pending: VecDeque::new(),
            calls: BTreeMap::new(),
        }
    }

    /// Moves the complete tool calls to `pending`, in index order.
    pub(crate) fn flush_calls(&mut self) -> Result<(), ProviderError> {
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

    fn push_text(&mut self, text: &str, reasoning: bool) -> Result<(), ProviderError> {
        if text.is_empty() {
            return Ok(());
        }
        self.reply_bytes += text.len();
        if self.reply_bytes > self.max_reply_bytes {
            return Err(ProviderError::ReplyTooLong);
        }
        self.pending.push_back(if reasoning {
            StreamItem::Reasoning(text.to_owned())
        } else {
            StreamItem::Text(text.to_owned())
        });
        Ok(())
    }

    pub(crate) fn handle_event(&mut self, data: &str) -> Result<(), ProviderError> {
        if data.trim() == "[DONE]" {
            self.done = true;
            return Ok(());
        }
        let chunk: Value = serde_json::from_str(data).map_err(|_| ProviderError::BadResponse)?;
        if chunk.get("error").is_some() {
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
            if let Some(text) = choice
                .pointer("/delta/reasoning_content")
                .and_then(Value::as_str)
            {
                self.push_text(text, true)?;
            }
            if let Some(text) = choice.pointer("/delta/content").and_then(Value::as_str) {
                self.push_text(text, false)?;
            }
            if let Some(calls) = choice.pointer("/delta/tool_calls").filter(|c| !c.is_null()) {
                self.handle_tool_calls(calls)?;
            }
            match choice.get("finish_reason") {
                None | Some(Value::Null) => {}
                Some(Value::String(reason)) if !self.finished => {
                    self.finished = true;
                    let reason: String = reason.chars().take(64).collect();
                    self.pending
                        .push_back(StreamItem::Finish(FinishReason(reason)));
                }
                Some(Value::String(_)) => {}
                Some(_) => return Err(ProviderError::BadResponse),
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
                    &json!({"choices":[{"index":0,"delta":{"reasoning_content":"hm"}}]})
                        .to_string(),
                    &delta("ab"),
                    &json!({"choices":[{"index":1,"delta":{"content":"other choice"}}]})
                        .to_string(),
                    &json!({"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}).to_string(),
                    &json!({"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}})
                        .to_string(),
                    "[DONE]"
                ]
            ),
            Ok((
                vec![
                    StreamItem::Reasoning("hm".into()),
                    text("ab"),
                    StreamItem::Finish(FinishReason("stop".into())),
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

    #[test]
    fn request_bodies_follow_the_openai_shape() {
        let request = ChatRequest {
            model: None,
            messages: vec![
                ChatMessage::text(Role::System, "be brief"),
                ChatMessage {
                    role: Role::User,
                    content: vec![
                        ContentPart::Text("look".into()),
                        ContentPart::Image {
                            media_type: "image/png".into(),
                            data_base64: "AAAA".into(),
                        },
                    ],
                    tool_calls: Vec::new(),
                    tool_call_id: None,
                },
                ChatMessage {
                    role: Role::Assistant,
                    content: Vec::new(),
                    tool_calls: vec![ToolCall {
                        id: "c1".into(),
                        name: "f".into(),
                        arguments: "{}".into(),
                    }],
                    tool_call_id: None,
                },
                ChatMessage {
                    tool_call_id: Some("c1".into()),
                    ..ChatMessage::text(Role::Tool, "{\"ok\":true}")
                },
            ],
            tools: Vec::new(),
            temperature: Some(0.5),
            max_tokens: Some(7),
        };
        assert_eq!(
            request.to_body("m"),
            json!({
                "model": "m",
                "messages": [
                    {"role":"system","content":"be brief"},
                    {"role":"user","content":[{"type":"text","text":"look"},
                        {"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}}]},
                    {"role":"assistant","content":null,"tool_calls":[
                        {"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},
                    {"role":"tool","content":"{\"ok\":true}","tool_call_id":"c1"}
                ],
                "stream": true,
                "stream_options": {"include_usage": true},
                "temperature": 0.5,
                "max_tokens": 7
            })
        );
    }
}
