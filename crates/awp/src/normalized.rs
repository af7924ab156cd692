//! [`NormalizedEvent`]: what hosts render and persist, and the serde DTO of the host's `--jsonl` output.
//!
//! The DTO is stable: a `type` tag in snake_case, fields named as below, absent optional fields omitted.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::SessionId;

/// Stable failure codes of [`TurnStatus::Failed`] and kinds of [`NormalizedEvent::Notice`].
pub mod codes {
    /// The agent's `result` reported failure (`is_error: true` or `subtype != "success"`).
    pub const AGENT_ERROR: &str = "agent_error";
    /// The agent process exited before the turn's terminal event.
    pub const AGENT_EXITED_MID_TURN: &str = "agent_exited_mid_turn";
    /// No stdout line for the configured idle window.
    pub const AGENT_IDLE_TIMEOUT: &str = "agent_idle_timeout";
    /// A stdout line exceeded the per-line limit (default 4 MiB); the runtime is terminated.
    pub const STDOUT_LINE_TOO_LONG: &str = "stdout_line_too_long";
    /// The host cancelled the turn (the process is stopped).
    pub const CANCELLED: &str = "cancelled";
    /// The agent process could not be started.
    pub const SPAWN_FAILED: &str = "spawn_failed";
    /// Notice: a reported `session_id` did not match `[A-Za-z0-9._:-]{1,256}` and was dropped.
    pub const INVALID_SESSION_ID: &str = "invalid_session_id";
    /// Notice: the agent reported a session id other than the one it was resumed with (persist the new one).
    pub const SESSION_ID_CHANGED: &str = "session_id_changed";
    /// Notice: a tool call's accumulated `input_json_delta` text is not valid JSON (the tool use has `input: null`).
    pub const INVALID_TOOL_INPUT_JSON: &str = "invalid_tool_input_json";
    /// Notice: a tool call's accumulated input exceeded `Limits::max_tool_input_bytes` (the tool use has `input: null`).
    pub const TOOL_INPUT_TOO_LARGE: &str = "tool_input_too_large";
    /// Notice: output arrived before the first input line (it is discarded and counted).
    pub const OUTPUT_BEFORE_INPUT: &str = "output_before_input";
}

/// One normalized event of a turn, in order; [`NormalizedEvent::TurnCompleted`] comes exactly once per turn, last.
///
/// JSON shapes (one line each, as written by the host's `--jsonl` output):
/// ```text
/// {"type":"session_started","session_id":"876cf434-8513-47bd-a1fe-30bed7186e2f","model":"claude-sonnet-4-5"}
/// {"type":"text_delta","text":"echo: fi"}
/// {"type":"thinking_delta","text":"Let me think"}
/// {"type":"tool_use","id":"toolu_01","name":"Bash","input":{"command":"echo hi"}}
/// {"type":"tool_result","tool_use_id":"toolu_01","is_error":false,"summary":"hi","truncated":false}
/// {"type":"notice","kind":"system","detail":"status"}
/// {"type":"turn_completed","status":"success","session_id":"abc","usage":{"input_tokens":5,"output_tokens":3},"result_text":"echo: hi","duration_ms":58}
/// {"type":"turn_completed","status":"failed","code":"agent_exited_mid_turn","detail":"exit code 1"}
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum NormalizedEvent {
    /// A valid `session_id` from `system/init` (Claude Code sends one per turn): persist the latest.
    SessionStarted {
        /// The agent's native session id (validated).
        session_id: SessionId,
        /// The model the agent reported, if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        model: Option<String>,
    },
    /// Assistant text: a streamed delta, or a complete assistant text block when no deltas came for that message.
    TextDelta {
        /// The text fragment.
        text: String,
    },
    /// Assistant thinking text (delta or complete block, same rule as text).
    ThinkingDelta {
        /// The thinking fragment.
        text: String,
    },
    /// A tool call the agent made (it runs the tool itself); `input` is the parsed JSON, `null` when invalid.
    ToolUse {
        /// The tool use id, e.g. `toolu_01`.
        id: String,
        /// The tool name, e.g. `Bash`.
        name: String,
        /// The tool input (accumulated `input_json_delta` parsed at `content_block_stop`).
        input: Value,
    },
    /// The result of a tool call, from a `user` line's `tool_result` block.
    ToolResult {
        /// The tool use this answers.
        tool_use_id: String,
        /// The block's `is_error` (false when absent).
        is_error: bool,
        /// The result's text content, at most `Limits::max_summary_bytes` bytes (cut at a char boundary).
        summary: String,
        /// True when `summary` was cut short.
        truncated: bool,
    },
    /// Something informational or a tolerated protocol violation; `kind` is a stable snake_case word
    /// (see [`codes`], `system` with the subtype as `detail`, `rate_limit_event`, `control_request`, …).
    Notice {
        /// Stable kind.
        kind: String,
        /// Optional human-readable detail (never a secret: session ids, subtypes, error kinds).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        detail: Option<String>,
    },
    /// The turn is over (terminal event, exit, timeout, line limit or cancel). Exactly once per turn, last.
    TurnCompleted(TurnOutcome),
}

/// How a turn ended. Serialized flattened into `turn_completed`: `"status":"success"` or
/// `"status":"failed","code":"agent_error","detail":"error_max_turns"`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum TurnStatus {
    /// `result` with `subtype:"success"` and `is_error` not true, or a terminal `message_stop` (awp-jsonl).
    Success,
    /// Anything else; `code` is one of [`codes`].
    Failed {
        /// Stable snake_case failure code.
        code: String,
        /// Optional detail: the agent's stable `result` code or `subtype`, the exit status, ….
        #[serde(default, skip_serializing_if = "Option::is_none")]
        detail: Option<String>,
    },
}

impl TurnStatus {
    /// A failure with `code` and no detail.
    pub fn failed(code: &str) -> Self {
        TurnStatus::Failed {
            code: code.to_owned(),
            detail: None,
        }
    }

    /// True for [`TurnStatus::Success`].
    pub fn is_success(&self) -> bool {
        matches!(self, TurnStatus::Success)
    }

    /// The failure code, `None` on success.
    pub fn code(&self) -> Option<&str> {
        match self {
            TurnStatus::Success => None,
            TurnStatus::Failed { code, .. } => Some(code),
        }
    }
}

/// The outcome carried by [`NormalizedEvent::TurnCompleted`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TurnOutcome {
    /// Success or failure with a stable code.
    #[serde(flatten)]
    pub status: TurnStatus,
    /// The session id in use at the end of the turn: the latest valid id reported in this turn (`result` wins
    /// over `init`), else the latest reported earlier in this process, else the one resumed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<SessionId>,
    /// Token usage from `result.usage` (or the raw stream's `message_start`/`message_delta` usage).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// `result.result` (final text, or the agent's machine-readable error); when absent, the strings of the
    /// result's `errors` array (Claude Code's error results) joined with `; `.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_text: Option<String>,
    /// `result.duration_ms`, milliseconds as reported by the agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
    /// `result.total_cost_usd`, US dollars as reported by the agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_cost_usd: Option<f64>,
}

impl TurnOutcome {
    /// An outcome with `status` and nothing else.
    pub fn new(status: TurnStatus) -> Self {
        Self {
            status,
            session_id: None,
            usage: None,
            result_text: None,
            duration_ms: None,
            total_cost_usd: None,
        }
    }
}

/// Token usage, Anthropic Messages API field names: `{"input_tokens":5,"output_tokens":3}`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Input tokens (0 when the agent omitted it).
    pub input_tokens: u64,
    /// Output tokens (0 when the agent omitted it).
    pub output_tokens: u64,
    /// Tokens read from the prompt cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read_input_tokens: Option<u64>,
    /// Tokens written to the prompt cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_creation_input_tokens: Option<u64>,
}

impl Usage {
    /// Reads a `usage` object leniently: missing or non-integer fields are 0 / `None`.
    /// Returns `None` when `value` is not an object.
    pub fn from_json(value: &Value) -> Option<Usage> {
        let obj = value.as_object()?;
        let get = |k: &str| obj.get(k).and_then(Value::as_u64);
        Some(Usage {
            input_tokens: get("input_tokens").unwrap_or(0),
            output_tokens: get("output_tokens").unwrap_or(0),
            cache_read_input_tokens: get("cache_read_input_tokens"),
            cache_creation_input_tokens: get("cache_creation_input_tokens"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(event: NormalizedEvent, line: &str) {
        assert_eq!(serde_json::to_string(&event).unwrap(), line);
        let back: NormalizedEvent = serde_json::from_str(line).unwrap();
        assert_eq!(back, event);
    }

    #[test]
    fn dto_lines_are_stable() {
        let id = SessionId::new("abc").unwrap();
        check(
            NormalizedEvent::SessionStarted {
                session_id: id.clone(),
                model: Some("m".into()),
            },
            r#"{"type":"session_started","session_id":"abc","model":"m"}"#,
        );
        check(
            NormalizedEvent::TextDelta { text: "hi".into() },
            r#"{"type":"text_delta","text":"hi"}"#,
        );
        check(
            NormalizedEvent::ThinkingDelta { text: "hm".into() },
            r#"{"type":"thinking_delta","text":"hm"}"#,
        );
        check(
            NormalizedEvent::ToolUse {
                id: "t1".into(),
                name: "Bash".into(),
                input: serde_json::json!({"command":"ls"}),
            },
            r#"{"type":"tool_use","id":"t1","name":"Bash","input":{"command":"ls"}}"#,
        );
        check(
            NormalizedEvent::ToolResult {
                tool_use_id: "t1".into(),
                is_error: false,
                summary: "ok".into(),
                truncated: false,
            },
            r#"{"type":"tool_result","tool_use_id":"t1","is_error":false,"summary":"ok","truncated":false}"#,
        );
        check(
            NormalizedEvent::Notice {
                kind: "system".into(),
                detail: Some("status".into()),
            },
            r#"{"type":"notice","kind":"system","detail":"status"}"#,
        );
        let mut outcome = TurnOutcome::new(TurnStatus::Success);
        outcome.session_id = Some(id);
        outcome.usage = Some(Usage {
            input_tokens: 5,
            output_tokens: 3,
            ..Usage::default()
        });
        outcome.duration_ms = Some(58);
        outcome.total_cost_usd = Some(0.5);
        check(
            NormalizedEvent::TurnCompleted(outcome),
            r#"{"type":"turn_completed","status":"success","session_id":"abc","usage":{"input_tokens":5,"output_tokens":3},"duration_ms":58,"total_cost_usd":0.5}"#,
        );
        check(
            NormalizedEvent::TurnCompleted(TurnOutcome::new(TurnStatus::Failed {
                code: codes::AGENT_EXITED_MID_TURN.into(),
                detail: Some("exit code 1".into()),
            })),
            r#"{"type":"turn_completed","status":"failed","code":"agent_exited_mid_turn","detail":"exit code 1"}"#,
        );
    }

    #[test]
    fn usage_is_lenient() {
        let u =
            Usage::from_json(&serde_json::json!({"output_tokens":3,"cache_read_input_tokens":1}))
                .unwrap();
        assert_eq!(
            u,
            Usage {
                input_tokens: 0,
                output_tokens: 3,
                cache_read_input_tokens: Some(1),
                cache_creation_input_tokens: None
            }
        );
        assert_eq!(Usage::from_json(&serde_json::json!("x")), None);
    }
}
