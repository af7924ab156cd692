//! The agent's side of the provider: turns a session's history and the current turn into an
//! `agentwire_provider` chat request, and scripts the built-in provider's managed-task tool use.
//!
//! The HTTP client, the SSE decoder, the built-in echo reply and the error codes live in `agentwire-provider`
//! (moved there from this file). With `OPENAI_BASE_URL` set the agent uses the OpenAI-compatible provider
//! (`POST <base>/chat/completions`, `"stream":true`, `Authorization: Bearer $OPENAI_API_KEY` when set; plain
//! `http://` only for loopback hosts), else the built-in demo. With tools offered, the built-in provider calls
//! `awp_run_managed_task` for a prompt `run-task: <json>` and reports the tool result in its next answer.

use agentwire_provider::{
    ChatMessage, ChatRequest, ContentPart, Limits, ProviderError, ReplyStream, Role as ChatRole,
    StreamItem, ToolCall, Usage,
};
use serde_json::{Value, json};

use crate::input::UserTurn;
use crate::session::{Message, Role};

pub use agentwire_provider::BUILTIN_MODEL;

/// Prompt prefix that makes the built-in provider call the managed-task tool.
pub const BUILTIN_TASK_PREFIX: &str = "run-task:";

/// One round of tool use within a turn: what the model said, the calls it made, and each call's result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolRound {
    /// Text the model streamed before calling.
    pub text: String,
    /// The calls, each with its result (a JSON text given to the model as the `tool` message).
    pub calls: Vec<(ToolCall, String)>,
}

/// Where replies come from (an `agentwire_provider::Provider` chosen by the environment).
#[derive(Debug)]
pub struct Provider {
    inner: agentwire_provider::Provider,
}

impl Provider {
    /// The provider the environment selects: OpenAI-compatible when `OPENAI_BASE_URL` is set, else built-in.
    ///
    /// # Errors
    /// See `agentwire_provider::Provider::from_vars`.
    pub fn from_vars(
        lookup: impl Fn(&str) -> Option<String>,
        model: Option<&str>,
        limits: Limits,
    ) -> Result<Self, ProviderError> {
        agentwire_provider::Provider::from_vars(lookup, model, limits).map(|inner| Self { inner })
    }

    /// The model name reported in `init`: the configured model, or [`BUILTIN_MODEL`].
    pub fn model(&self) -> &str {
        self.inner.default_model().unwrap_or(BUILTIN_MODEL)
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
        if self.inner.is_builtin()
            && !tools.is_empty()
            && let Some(step) = builtin_tool_step(history, current, rounds)
        {
            return Ok(step);
        }
        self.inner
            .chat(&chat_request(history, current, tools, rounds))
            .await
    }
}

fn chat_request(
    history: &[Message],
    current: &UserTurn,
    tools: &[Value],
    rounds: &[ToolRound],
) -> ChatRequest {
    let last = history.len().saturating_sub(1);
    let mut messages: Vec<ChatMessage> = history
        .iter()
        .enumerate()
        .map(|(index, message)| {
            let role = match message.role {
                Role::User => ChatRole::User,
                Role::Assistant => ChatRole::Assistant,
            };
            if index == last && message.role == Role::User && !current.images.is_empty() {
                let mut content = Vec::new();
                if !current.text.is_empty() {
                    content.push(ContentPart::Text(current.text.clone()));
                }
                content.extend(current.images.iter().map(|image| ContentPart::Image {
                    media_type: image.media_type.clone(),
                    data_base64: image.data_base64.clone(),
                }));
                ChatMessage {
                    role,
                    content,
                    tool_calls: Vec::new(),
                    tool_call_id: None,
                }
            } else {
                ChatMessage::text(role, message.content.clone())
            }
        })
        .collect();
    for round in rounds {
        messages.push(ChatMessage {
            role: ChatRole::Assistant,
            content: if round.text.is_empty() {
                Vec::new()
            } else {
                vec![ContentPart::Text(round.text.clone())]
            },
            tool_calls: round.calls.iter().map(|(call, _)| call.clone()).collect(),
            tool_call_id: None,
        });
        for (call, result) in &round.calls {
            messages.push(ChatMessage {
                tool_call_id: Some(call.id.clone()),
                ..ChatMessage::text(ChatRole::Tool, result.clone())
            });
        }
    }
    ChatRequest {
        messages,
        tools: tools.to_vec(),
        ..ChatRequest::default()
    }
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
        return Some(ReplyStream::scripted([
            StreamItem::Text(reply),
            StreamItem::Usage(usage),
        ]));
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
    Some(ReplyStream::scripted([
        StreamItem::ToolCall(call),
        StreamItem::Usage(usage),
    ]))
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

#[cfg(test)]
mod tests {
    use super::*;

    async fn items(stream: ReplyStream) -> Vec<StreamItem> {
        let mut stream = stream;
        let mut items = Vec::new();
        while let Some(item) = stream.next().await.expect("item") {
            items.push(item);
        }
        items
    }

    fn builtin() -> Provider {
        Provider::from_vars(|_| None, None, Limits::default()).expect("builtin")
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
        let all = items(
            builtin()
                .start(&history, &current, &[], &[])
                .await
                .expect("stream"),
        )
        .await;
        let text: String = all
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
        assert_eq!(
            all.last(),
            Some(&StreamItem::Usage(Usage {
                input_tokens: 11,
                output_tokens: 14
            }))
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
        let provider = builtin();
        let tool = json!({"type":"function"});
        let current = turn("run-task: [\"echo\",\"hi\"]");
        let first = items(
            provider
                .start(&history, &current, std::slice::from_ref(&tool), &[])
                .await
                .expect("stream"),
        )
        .await;
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
            provider
                .start(&history, &current, &[tool], &[round])
                .await
                .expect("stream"),
        )
        .await;
        assert_eq!(
            second.first(),
            Some(&StreamItem::Text(
                "Managed task task_1 succeeded, exit code 0.\nstdout:\nhi\n".into()
            ))
        );
        // Without tools the prompt is just text.
        let plain = items(
            provider
                .start(&history, &current, &[], &[])
                .await
                .expect("stream"),
        )
        .await;
        assert!(matches!(plain.first(), Some(StreamItem::Text(t)) if t.starts_with("You ")));
    }
}
