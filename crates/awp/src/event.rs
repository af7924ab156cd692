//! Output events (agent → host): one parsed stdout line, `stream_event` wrappers unwrapped.
//!
//! Pure parsing, no state: dedup, accumulation and turn rules live in [`crate::machine`].
//! Source: AWP agent CLI protocol "Output JSONL", `protocols/awp.md` "Output"; stream-json checked against
//! Claude Code 2.1.197 (`fixtures/recordings/claude-stream-json-*.jsonl`).

use serde_json::{Map, Value};

use crate::{InvalidSessionId, SessionId, Usage};

/// A `session_id` field as reported: validated, or rejected (the rejected value is not kept).
pub type ReportedSessionId = Result<SessionId, InvalidSessionId>;

/// One parsed agent stdout line.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum OutputEvent {
    /// `{"type":"system","subtype":"init","session_id":"…","model":"…",…}`.
    SystemInit {
        /// `session_id`, validated; `None` when absent.
        session_id: Option<ReportedSessionId>,
        /// `model`, when a string.
        model: Option<String>,
    },
    /// `{"type":"system","subtype":"status",…}` and every other informational subtype.
    System {
        /// `subtype`, when a string.
        subtype: Option<String>,
    },
    /// `{"type":"assistant","message":{"id":"msg_1","content":[…]}}`: a complete message (Claude Code: one line per
    /// content block, sharing `message.id`).
    Assistant {
        /// `message.id`, when present.
        message_id: Option<String>,
        /// `message.content`, in order.
        content: Vec<MessageBlock>,
    },
    /// `{"type":"user","message":{"content":[{"type":"tool_result",…}]}}`: the tool results it carries.
    User {
        /// The `tool_result` blocks (other blocks are ignored).
        tool_results: Vec<ToolResultBlock>,
    },
    /// A raw Anthropic streaming event, at top level (`wrapped: false`) or unwrapped from
    /// `{"type":"stream_event","event":{…}}` (`wrapped: true`).
    Stream {
        /// The event.
        event: StreamEvent,
        /// True when it came inside a `stream_event` wrapper.
        wrapped: bool,
    },
    /// `{"type":"result","subtype":"success","is_error":false,"session_id":"…","usage":{…},"result":"…",…}`.
    Result(ResultEvent),
    /// `control_request`, `control_response`, `control_cancel_request` (Claude Code control protocol).
    Control {
        /// The `type`.
        event_type: String,
        /// `request.subtype` / `response.subtype`, when present.
        subtype: Option<String>,
    },
    /// `rate_limit_event`, `keep_alive`, `tool_progress`: informational.
    Informational {
        /// The `type`.
        event_type: String,
    },
    /// A JSON object with a `type` this crate does not know: skipped and counted, never fatal.
    Unknown {
        /// The `type` value.
        event_type: String,
        /// The whole line as parsed, kept for logs and relays.
        raw: Value,
    },
}

/// A block of a complete `assistant` message.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum MessageBlock {
    /// `{"type":"text","text":"…"}`.
    Text(String),
    /// `{"type":"thinking","thinking":"…"}`.
    Thinking(String),
    /// `{"type":"tool_use","id":"toolu_01","name":"Bash","input":{…}}`.
    ToolUse {
        /// `id`.
        id: String,
        /// `name`.
        name: String,
        /// `input` (`null` when absent).
        input: Value,
    },
    /// Any other block type (`redacted_thinking`, `server_tool_use`, …): not rendered.
    Other,
}

/// A `tool_result` block of a `user` line.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolResultBlock {
    /// `tool_use_id`.
    pub tool_use_id: String,
    /// `is_error` (false when absent).
    pub is_error: bool,
    /// The text of `content`: the string itself, or the `text` blocks of an array joined with `\n`.
    pub text: String,
}

/// A raw Anthropic Messages streaming event.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum StreamEvent {
    /// `{"type":"message_start","message":{"id":"msg_1","usage":{…}}}`.
    MessageStart {
        /// `message.id`.
        message_id: Option<String>,
        /// `message.usage`.
        usage: Option<Usage>,
    },
    /// `{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":3}}`.
    MessageDelta {
        /// `delta.stop_reason`.
        stop_reason: Option<String>,
        /// `usage`.
        usage: Option<Usage>,
    },
    /// `{"type":"message_stop"}`.
    MessageStop,
    /// `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`.
    ContentBlockStart {
        /// `index` (0 when absent).
        index: u64,
        /// `content_block`.
        block: MessageBlock,
    },
    /// `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"…"}}`.
    ContentBlockDelta {
        /// `index` (0 when absent).
        index: u64,
        /// `delta`.
        delta: Delta,
    },
    /// `{"type":"content_block_stop","index":0}`.
    ContentBlockStop {
        /// `index` (0 when absent).
        index: u64,
    },
    /// `{"type":"ping"}`.
    Ping,
    /// `{"type":"error","error":{"type":"overloaded_error","message":"…"}}`.
    Error {
        /// `error.type`.
        error_type: Option<String>,
    },
    /// Any other streaming event type.
    Unknown {
        /// The `type`.
        event_type: String,
    },
}

/// A `content_block_delta` payload.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Delta {
    /// `{"type":"text_delta","text":"…"}`.
    Text(String),
    /// `{"type":"thinking_delta","thinking":"…"}`.
    Thinking(String),
    /// `{"type":"input_json_delta","partial_json":"…"}`: concatenate, parse at `content_block_stop`.
    InputJson(String),
    /// `{"type":"signature_delta",…}`: not rendered.
    Signature,
    /// Any other delta type.
    Other,
}

/// The terminal `result` line.
#[derive(Clone, Debug, PartialEq)]
pub struct ResultEvent {
    /// `subtype`: `success`, `error`, `error_during_execution`, `error_max_turns`, ….
    pub subtype: Option<String>,
    /// `is_error`.
    pub is_error: Option<bool>,
    /// `session_id`, validated.
    pub session_id: Option<ReportedSessionId>,
    /// `usage`.
    pub usage: Option<Usage>,
    /// `result` (absent after an interrupt); when absent, the strings of an `errors` array (Claude Code's error
    /// results, e.g. `error_during_execution`) joined with `; `, so the agent's own reason is kept.
    pub result: Option<String>,
    /// `duration_ms`.
    pub duration_ms: Option<u64>,
    /// `total_cost_usd`.
    pub total_cost_usd: Option<f64>,
}

impl ResultEvent {
    /// Failure = `is_error == true` OR `subtype != "success"` (an absent subtype is a failure).
    pub fn is_failure(&self) -> bool {
        self.is_error == Some(true) || self.subtype.as_deref() != Some("success")
    }
}

/// Why a stdout line is not a usable event (counted as malformed, never rendered).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EventError {
    /// The line is not JSON.
    #[error("line is not valid JSON (column {column})")]
    NotJson {
        /// 1-based column of the syntax error.
        column: usize,
    },
    /// The line is JSON but not an object.
    #[error("line is not a JSON object")]
    NotObject,
    /// The object has no string `type`.
    #[error("event has no string type field")]
    MissingType,
    /// A known event type with a required field missing or of the wrong JSON type.
    #[error("{event_type} event has an invalid {field} field")]
    InvalidField {
        /// The event `type`.
        event_type: &'static str,
        /// The offending field.
        field: &'static str,
    },
}

impl EventError {
    /// Stable snake_case code.
    pub fn code(&self) -> &'static str {
        match self {
            EventError::NotJson { .. } => "not_json",
            EventError::NotObject => "not_object",
            EventError::MissingType => "missing_type",
            EventError::InvalidField { .. } => "invalid_field",
        }
    }
}

impl OutputEvent {
    /// Parses one stdout line (without its newline).
    ///
    /// # Errors
    /// [`EventError`] when the line is not a JSON object with a string `type`, or a known event lacks a
    /// required field (`assistant.message`, `stream_event.event`, …).
    ///
    /// One pass into borrowed typed structs (no `serde_json::Value`) for the lines the crate knows; a line that
    /// pass cannot decide exactly as [`from_value`](Self::from_value) would (an unknown `type`, a field of an
    /// unexpected JSON type, a duplicate field, anything that is not a JSON object) is parsed again as a `Value`,
    /// so the result is always that of `from_value` on the parsed line.
    pub fn parse(line: &[u8]) -> Result<OutputEvent, EventError> {
        if let Some(event) = crate::borrowed::parse(line) {
            return Ok(event);
        }
        OutputEvent::parse_value(line)
    }

    /// [`parse`](Self::parse) through a `serde_json::Value` only: the reference the fast path is checked against.
    fn parse_value(line: &[u8]) -> Result<OutputEvent, EventError> {
        let value: Value =
            serde_json::from_slice(line).map_err(|e| EventError::NotJson { column: e.column() })?;
        OutputEvent::from_value(&value)
    }

    /// Interprets an already parsed JSON value.
    ///
    /// # Errors
    /// As [`parse`](Self::parse), minus syntax errors.
    pub fn from_value(value: &Value) -> Result<OutputEvent, EventError> {
        let obj = value.as_object().ok_or(EventError::NotObject)?;
        let event_type = str_field(obj, "type").ok_or(EventError::MissingType)?;
        Ok(match event_type {
            "system" => {
                let subtype = str_field(obj, "subtype");
                if subtype == Some("init") {
                    OutputEvent::SystemInit {
                        session_id: session_id_field(obj),
                        model: str_field(obj, "model").map(str::to_owned),
                    }
                } else {
                    OutputEvent::System {
                        subtype: subtype.map(str::to_owned),
                    }
                }
            }
            "assistant" => {
                let message = obj.get("message").and_then(Value::as_object).ok_or(
                    EventError::InvalidField {
                        event_type: "assistant",
                        field: "message",
                    },
                )?;
                let content = match message.get("content") {
                    Some(Value::Array(blocks)) => blocks.iter().map(message_block).collect(),
                    Some(Value::String(text)) => vec![MessageBlock::Text(text.clone())],
                    _ => {
                        return Err(EventError::InvalidField {
                            event_type: "assistant",
                            field: "message.content",
                        });
                    }
                };
                OutputEvent::Assistant {
                    message_id: str_field(message, "id").map(str::to_owned),
                    content,
                }
            }
            "user" => {
                let message = obj.get("message").and_then(Value::as_object).ok_or(
                    EventError::InvalidField {
                        event_type: "user",
                        field: "message",
                    },
                )?;
                let tool_results = match message.get("content") {
                    Some(Value::Array(blocks)) => {
                        blocks.iter().filter_map(tool_result_block).collect()
                    }
                    _ => Vec::new(),
                };
                OutputEvent::User { tool_results }
            }
            "stream_event" => {
                let inner = obj.get("event").and_then(Value::as_object).ok_or(
                    EventError::InvalidField {
                        event_type: "stream_event",
                        field: "event",
                    },
                )?;
                let inner_type = str_field(inner, "type").ok_or(EventError::InvalidField {
                    event_type: "stream_event",
                    field: "event.type",
                })?;
                OutputEvent::Stream {
                    event: stream_event(inner_type, inner),
                    wrapped: true,
                }
            }
            "message_start"
            | "message_delta"
            | "message_stop"
            | "content_block_start"
            | "content_block_delta"
            | "content_block_stop"
            | "ping"
            | "error" => OutputEvent::Stream {
                event: stream_event(event_type, obj),
                wrapped: false,
            },
            "result" => OutputEvent::Result(ResultEvent {
                subtype: str_field(obj, "subtype").map(str::to_owned),
                is_error: obj.get("is_error").and_then(Value::as_bool),
                session_id: session_id_field(obj),
                usage: obj.get("usage").and_then(Usage::from_json),
                result: str_field(obj, "result")
                    .map(str::to_owned)
                    .or_else(|| errors_field(obj)),
                duration_ms: obj.get("duration_ms").and_then(Value::as_u64),
                total_cost_usd: obj.get("total_cost_usd").and_then(Value::as_f64),
            }),
            "control_request" | "control_response" | "control_cancel_request" => {
                let subtype = ["request", "response"]
                    .iter()
                    .filter_map(|k| obj.get(*k).and_then(Value::as_object))
                    .find_map(|inner| str_field(inner, "subtype"))
                    .map(str::to_owned);
                OutputEvent::Control {
                    event_type: event_type.to_owned(),
                    subtype,
                }
            }
            "rate_limit_event" | "keep_alive" | "tool_progress" => OutputEvent::Informational {
                event_type: event_type.to_owned(),
            },
            other => OutputEvent::Unknown {
                event_type: other.to_owned(),
                raw: value.clone(),
            },
        })
    }
}

/// The non-empty strings of an `errors` array, joined with `; ` (`None` when there are none).
fn errors_field(obj: &Map<String, Value>) -> Option<String> {
    let errors: Vec<&str> = obj
        .get("errors")?
        .as_array()?
        .iter()
        .filter_map(Value::as_str)
        .filter(|e| !e.trim().is_empty())
        .collect();
    (!errors.is_empty()).then(|| errors.join("; "))
}

fn str_field<'a>(obj: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    obj.get(key).and_then(Value::as_str)
}

fn session_id_field(obj: &Map<String, Value>) -> Option<ReportedSessionId> {
    match obj.get("session_id")? {
        Value::Null => None,
        Value::String(s) => Some(SessionId::new(s.as_str())),
        _ => Some(Err(InvalidSessionId::NotAString)),
    }
}

fn message_block(block: &Value) -> MessageBlock {
    let Some(obj) = block.as_object() else {
        return MessageBlock::Other;
    };
    match str_field(obj, "type") {
        Some("text") => MessageBlock::Text(str_field(obj, "text").unwrap_or_default().to_owned()),
        Some("thinking") => {
            MessageBlock::Thinking(str_field(obj, "thinking").unwrap_or_default().to_owned())
        }
        Some("tool_use") => MessageBlock::ToolUse {
            id: str_field(obj, "id").unwrap_or_default().to_owned(),
            name: str_field(obj, "name").unwrap_or_default().to_owned(),
            input: obj.get("input").cloned().unwrap_or(Value::Null),
        },
        _ => MessageBlock::Other,
    }
}

fn tool_result_block(block: &Value) -> Option<ToolResultBlock> {
    let obj = block.as_object()?;
    if str_field(obj, "type") != Some("tool_result") {
        return None;
    }
    let text = match obj.get("content") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.as_object())
            .filter(|p| str_field(p, "type") == Some("text"))
            .filter_map(|p| str_field(p, "text"))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    };
    Some(ToolResultBlock {
        tool_use_id: str_field(obj, "tool_use_id").unwrap_or_default().to_owned(),
        is_error: obj
            .get("is_error")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        text,
    })
}

fn stream_event(event_type: &str, obj: &Map<String, Value>) -> StreamEvent {
    let index = || obj.get("index").and_then(Value::as_u64).unwrap_or(0);
    match event_type {
        "message_start" => {
            let message = obj.get("message").and_then(Value::as_object);
            StreamEvent::MessageStart {
                message_id: message.and_then(|m| str_field(m, "id")).map(str::to_owned),
                usage: message
                    .and_then(|m| m.get("usage"))
                    .and_then(Usage::from_json),
            }
        }
        "message_delta" => StreamEvent::MessageDelta {
            stop_reason: obj
                .get("delta")
                .and_then(Value::as_object)
                .and_then(|d| str_field(d, "stop_reason"))
                .map(str::to_owned),
            usage: obj.get("usage").and_then(Usage::from_json),
        },
        "message_stop" => StreamEvent::MessageStop,
        "content_block_start" => StreamEvent::ContentBlockStart {
            index: index(),
            block: obj
                .get("content_block")
                .map_or(MessageBlock::Other, message_block),
        },
        "content_block_delta" => {
            let delta = obj.get("delta").and_then(Value::as_object);
            let delta = match delta.and_then(|d| str_field(d, "type")) {
                Some("text_delta") => Delta::Text(
                    delta
                        .and_then(|d| str_field(d, "text"))
                        .unwrap_or_default()
                        .to_owned(),
                ),
                Some("thinking_delta") => Delta::Thinking(
                    delta
                        .and_then(|d| str_field(d, "thinking"))
                        .unwrap_or_default()
                        .to_owned(),
                ),
                Some("input_json_delta") => Delta::InputJson(
                    delta
                        .and_then(|d| str_field(d, "partial_json"))
                        .unwrap_or_default()
                        .to_owned(),
                ),
                Some("signature_delta") => Delta::Signature,
                _ => Delta::Other,
            };
            StreamEvent::ContentBlockDelta {
                index: index(),
                delta,
            }
        }
        "content_block_stop" => StreamEvent::ContentBlockStop { index: index() },
        "ping" => StreamEvent::Ping,
        "error" => StreamEvent::Error {
            error_type: obj
                .get("error")
                .and_then(Value::as_object)
                .and_then(|e| str_field(e, "type"))
                .map(str::to_owned),
        },
        other => StreamEvent::Unknown {
            event_type: other.to_owned(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(line: &str, expect: Result<OutputEvent, EventError>) {
        assert_eq!(OutputEvent::parse(line.as_bytes()), expect, "line {line}");
    }

    #[test]
    fn parses_every_protocol_type() {
        check(
            r#"{"type":"system","subtype":"init","session_id":"s1","model":"m"}"#,
            Ok(OutputEvent::SystemInit {
                session_id: Some(Ok(SessionId::new("s1").unwrap())),
                model: Some("m".into()),
            }),
        );
        check(
            r#"{"type":"system","subtype":"init","session_id":"bad id"}"#,
            Ok(OutputEvent::SystemInit {
                session_id: Some(Err(InvalidSessionId::InvalidCharacter { position: 3 })),
                model: None,
            }),
        );
        check(
            r#"{"type":"system","subtype":"init","session_id":42}"#,
            Ok(OutputEvent::SystemInit {
                session_id: Some(Err(InvalidSessionId::NotAString)),
                model: None,
            }),
        );
        check(
            r#"{"type":"system","subtype":"status"}"#,
            Ok(OutputEvent::System {
                subtype: Some("status".into()),
            }),
        );
        check(
            r#"{"type":"assistant","message":{"id":"msg_1","content":[{"type":"text","text":"hi"},{"type":"thinking","thinking":"hm"},{"type":"tool_use","id":"t","name":"Bash","input":{"a":1}},{"type":"redacted_thinking"}]}}"#,
            Ok(OutputEvent::Assistant {
                message_id: Some("msg_1".into()),
                content: vec![
                    MessageBlock::Text("hi".into()),
                    MessageBlock::Thinking("hm".into()),
                    MessageBlock::ToolUse {
                        id: "t".into(),
                        name: "Bash".into(),
                        input: serde_json::json!({"a":1}),
                    },
                    MessageBlock::Other,
                ],
            }),
        );
        check(
            r#"{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"text","text":"a"},{"type":"image"},{"type":"text","text":"b"}],"is_error":true},{"type":"text","text":"x"}]}}"#,
            Ok(OutputEvent::User {
                tool_results: vec![ToolResultBlock {
                    tool_use_id: "t".into(),
                    is_error: true,
                    text: "a\nb".into(),
                }],
            }),
        );
        check(
            r#"{"type":"stream_event","event":{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"a\""}}}"#,
            Ok(OutputEvent::Stream {
                event: StreamEvent::ContentBlockDelta {
                    index: 2,
                    delta: Delta::InputJson("{\"a\"".into()),
                },
                wrapped: true,
            }),
        );
        check(
            r#"{"type":"message_stop"}"#,
            Ok(OutputEvent::Stream {
                event: StreamEvent::MessageStop,
                wrapped: false,
            }),
        );
        check(
            r#"{"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":3}}"#,
            Ok(OutputEvent::Stream {
                event: StreamEvent::MessageDelta {
                    stop_reason: Some("tool_use".into()),
                    usage: Some(Usage {
                        output_tokens: 3,
                        ..Usage::default()
                    }),
                },
                wrapped: false,
            }),
        );
        check(
            r#"{"type":"result","subtype":"success","is_error":true,"session_id":"s","duration_ms":5,"total_cost_usd":0.25}"#,
            Ok(OutputEvent::Result(ResultEvent {
                subtype: Some("success".into()),
                is_error: Some(true),
                session_id: Some(Ok(SessionId::new("s").unwrap())),
                usage: None,
                result: None,
                duration_ms: Some(5),
                total_cost_usd: Some(0.25),
            })),
        );
        check(
            r#"{"type":"control_request","request_id":"r","request":{"subtype":"can_use_tool"}}"#,
            Ok(OutputEvent::Control {
                event_type: "control_request".into(),
                subtype: Some("can_use_tool".into()),
            }),
        );
        check(
            r#"{"type":"keep_alive"}"#,
            Ok(OutputEvent::Informational {
                event_type: "keep_alive".into(),
            }),
        );
        check(
            r#"{"type":"brand_new"}"#,
            Ok(OutputEvent::Unknown {
                event_type: "brand_new".into(),
                raw: serde_json::json!({"type": "brand_new"}),
            }),
        );
    }

    #[test]
    fn malformed_lines_are_typed_errors() {
        check(
            "Welcome to the agent!",
            Err(EventError::NotJson { column: 1 }),
        );
        check("[1,2]", Err(EventError::NotObject));
        check(r#"{"no":"type"}"#, Err(EventError::MissingType));
        check(r#"{"type":7}"#, Err(EventError::MissingType));
        check(
            r#"{"type":"assistant"}"#,
            Err(EventError::InvalidField {
                event_type: "assistant",
                field: "message",
            }),
        );
        check(
            r#"{"type":"stream_event","event":"x"}"#,
            Err(EventError::InvalidField {
                event_type: "stream_event",
                field: "event",
            }),
        );
    }

    #[test]
    fn an_error_result_without_result_keeps_its_errors_as_the_reason() {
        let parse = |line: &str| match OutputEvent::parse(line.as_bytes()) {
            Ok(OutputEvent::Result(r)) => r.result,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            parse(
                r#"{"type":"result","subtype":"error_during_execution","is_error":true,"errors":["No conversation found", 3, " ", "try again"]}"#
            ),
            Some("No conversation found; try again".to_owned())
        );
        assert_eq!(
            parse(r#"{"type":"result","subtype":"error","result":"code_x","errors":["ignored"]}"#),
            Some("code_x".to_owned())
        );
        assert_eq!(
            parse(r#"{"type":"result","subtype":"error","errors":[]}"#),
            None
        );
    }

    #[test]
    fn result_failure_rule() {
        let result = |subtype: Option<&str>, is_error: Option<bool>| ResultEvent {
            subtype: subtype.map(str::to_owned),
            is_error,
            session_id: None,
            usage: None,
            result: None,
            duration_ms: None,
            total_cost_usd: None,
        };
        assert!(!result(Some("success"), Some(false)).is_failure());
        assert!(!result(Some("success"), None).is_failure());
        assert!(result(Some("success"), Some(true)).is_failure());
        assert!(result(Some("error_max_turns"), Some(false)).is_failure());
        assert!(result(None, Some(false)).is_failure());
    }

    /// Every line of the three Claude Code recordings takes the borrowed fast path and gives what the `Value`
    /// path gives.
    #[test]
    fn recordings_take_the_fast_path_with_the_same_result() {
        let recordings = [
            include_str!("../../../fixtures/recordings/claude-stream-json-partial-two-turns.jsonl"),
            include_str!("../../../fixtures/recordings/claude-stream-json-single-turn.jsonl"),
            include_str!("../../../fixtures/recordings/claude-stream-json-tool-use.jsonl"),
        ];
        let mut lines = 0;
        for line in recordings.iter().flat_map(|text| text.lines()) {
            let fast = crate::borrowed::parse(line.as_bytes());
            assert!(fast.is_some(), "fast path gave up on {line}");
            assert_eq!(
                fast.map(Ok),
                Some(OutputEvent::parse_value(line.as_bytes()))
            );
            lines += 1;
        }
        assert_eq!(lines, 30);
    }

    /// Lines the fast path must hand to the `Value` path, because only that path decides them (leniently, or by
    /// refusing what serde_json skips unchecked), and the result is the `Value` path's.
    #[test]
    fn fast_path_gives_up_where_the_value_path_decides() {
        let lines: [&[u8]; 16] = [
            br#"{"type":"result","subtype":"success","x":1e400}"#,
            br#"{"type":"result","subtype":"success","x":"\ud800"}"#,
            b"{\"type\":\"result\",\"subtype\":\"success\",\"x\":\"caf\xff\"}",
            br#"{"type":"content_block_delta","index":"1","delta":{"type":"text_delta","text":"a"}}"#,
            br#"{"type":"content_block_delta","index":1.0,"delta":{"type":"text_delta","text":"a"}}"#,
            br#"{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":7}}"#,
            br#"{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"a","text":"b"}}"#,
            br#"{"type":"system","type":"result","subtype":"success"}"#,
            br#"{"type":"result","usage":[],"subtype":"success"}"#,
            br#"{"type":"result","usage":{"input_tokens":-1},"subtype":"success"}"#,
            br#"{"type":"assistant","message":{"content":[1,{"type":"text","text":"a"}]}}"#,
            br#"{"type":"assistant","message":{"content":7}}"#,
            br#"{"type":"user","message":{"content":[{"type":"tool_result","content":[{"type":"text","text":"a"},"b"]}]}}"#,
            br#"{"type":"brand_new","x":[1,2]}"#,
            br#"{"type":"stream_event","event":{"type":"ping"}} x"#,
            br#"[{"type":"ping"}]"#,
        ];
        for line in lines {
            assert!(
                crate::borrowed::parse(line).is_none(),
                "{}",
                String::from_utf8_lossy(line)
            );
            assert_eq!(OutputEvent::parse(line), OutputEvent::parse_value(line));
        }
        let deep = format!(
            r#"{{"type":"result","subtype":"success","x":{}1{}}}"#,
            "[".repeat(130),
            "]".repeat(130)
        );
        assert!(crate::borrowed::parse(deep.as_bytes()).is_none());
        assert!(matches!(
            OutputEvent::parse(deep.as_bytes()),
            Err(EventError::NotJson { .. })
        ));
    }

    mod fast_path_agrees {
        use super::*;
        use proptest::prelude::*;

        /// Keys the parser reads somewhere, plus one it never reads.
        const KEYS: &[&str] = &[
            "type",
            "subtype",
            "session_id",
            "model",
            "message",
            "event",
            "is_error",
            "usage",
            "result",
            "duration_ms",
            "total_cost_usd",
            "request",
            "response",
            "index",
            "delta",
            "content_block",
            "error",
            "id",
            "content",
            "text",
            "thinking",
            "name",
            "input",
            "tool_use_id",
            "partial_json",
            "stop_reason",
            "input_tokens",
            "output_tokens",
            "cache_read_input_tokens",
            "cache_creation_input_tokens",
            "other",
        ];
        /// Every `type` (and block / delta type) the parser knows, plus unknown ones.
        const TYPES: &[&str] = &[
            "system",
            "init",
            "status",
            "assistant",
            "user",
            "stream_event",
            "message_start",
            "message_delta",
            "message_stop",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "ping",
            "error",
            "result",
            "success",
            "control_request",
            "control_response",
            "control_cancel_request",
            "rate_limit_event",
            "keep_alive",
            "tool_progress",
            "text",
            "thinking",
            "tool_use",
            "tool_result",
            "text_delta",
            "thinking_delta",
            "input_json_delta",
            "signature_delta",
            "brand_new",
        ];

        /// JSON text (not a `Value`, so that duplicate keys and odd numbers survive).
        fn json() -> impl Strategy<Value = String> {
            let leaf = prop_oneof![
                Just("null".to_owned()),
                Just("true".to_owned()),
                Just("false".to_owned()),
                Just("-1".to_owned()),
                Just("1.5".to_owned()),
                Just("1e400".to_owned()),
                Just(r#""\ud800""#.to_owned()),
                Just(r#""a\"b\u00e9""#.to_owned()),
                (0u64..4).prop_map(|n| n.to_string()),
                prop::sample::select(TYPES).prop_map(|t| format!("\"{t}\"")),
                prop::sample::select(KEYS).prop_map(|k| format!("\"{k}\"")),
            ];
            leaf.prop_recursive(4, 48, 6, |inner| {
                prop_oneof![
                    prop::collection::vec(inner.clone(), 0..4)
                        .prop_map(|items| format!("[{}]", items.join(","))),
                    prop::collection::vec((prop::sample::select(KEYS), inner), 0..6).prop_map(
                        |fields| {
                            let fields: Vec<String> =
                                fields.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
                            format!("{{{}}}", fields.join(","))
                        }
                    ),
                ]
            })
        }

        /// A value of the JSON type the parser expects for `key` (so the fast path mostly succeeds), with a
        /// nested object of such fields where an object is expected; now and then any value instead.
        fn typed_object(depth: u32) -> BoxedStrategy<String> {
            let field = (prop::sample::select(KEYS), 0..10u8).prop_flat_map(move |(key, pick)| {
                let value: BoxedStrategy<String> = if pick == 0 {
                    json().boxed()
                } else {
                    match key {
                        "type" | "subtype" | "stop_reason" => prop::sample::select(TYPES)
                            .prop_map(|t| format!("\"{t}\""))
                            .boxed(),
                        "session_id" | "model" | "id" | "text" | "thinking" | "name"
                        | "tool_use_id" | "partial_json" | "result" => prop_oneof![
                            Just(r#""s1""#.to_owned()),
                            Just(r#""bad id""#.to_owned()),
                            Just(r#""a\"b\u00e9\n""#.to_owned()),
                            Just("null".to_owned()),
                        ]
                        .boxed(),
                        "index"
                        | "duration_ms"
                        | "input_tokens"
                        | "output_tokens"
                        | "cache_read_input_tokens"
                        | "cache_creation_input_tokens" => {
                            (0u64..3).prop_map(|n| n.to_string()).boxed()
                        }
                        "is_error" => any::<bool>().prop_map(|b| b.to_string()).boxed(),
                        "total_cost_usd" => Just("0.25".to_owned()).boxed(),
                        "content" if depth > 0 => prop_oneof![
                            Just(r#""plain""#.to_owned()),
                            prop::collection::vec(typed_object(depth - 1), 0..3)
                                .prop_map(|items| format!("[{}]", items.join(","))),
                        ]
                        .boxed(),
                        _ if depth > 0 => typed_object(depth - 1),
                        _ => json().boxed(),
                    }
                };
                value.prop_map(move |value| format!("\"{key}\":{value}"))
            });
            prop::collection::vec(field, 0..7)
                .prop_map(|fields| format!("{{{}}}", fields.join(",")))
                .boxed()
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(4096))]

            /// Lines shaped like the events (mostly well-typed fields, so the fast path decides most of them).
            #[test]
            fn parse_of_event_shaped_lines_equals_the_value_path(
                kind in prop::sample::select(TYPES),
                body in typed_object(3),
            ) {
                let line = format!("{{\"type\":\"{kind}\",{}", &body[1..]).replace(",}", "}");
                prop_assert_eq!(
                    OutputEvent::parse(line.as_bytes()),
                    OutputEvent::parse_value(line.as_bytes()),
                    "{}", line
                );
            }

            /// Whatever the line, `parse` (borrowed fast path, then `Value` fallback) equals the `Value` path.
            #[test]
            fn parse_equals_the_value_path(
                kind in prop::sample::select(TYPES),
                fields in prop::collection::vec((prop::sample::select(KEYS), json()), 0..6),
                type_first in any::<bool>(),
            ) {
                let mut parts: Vec<String> =
                    fields.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
                let kind = format!("\"type\":\"{kind}\"");
                if type_first { parts.insert(0, kind) } else { parts.push(kind) }
                let line = format!("{{{}}}", parts.join(","));
                prop_assert_eq!(
                    OutputEvent::parse(line.as_bytes()),
                    OutputEvent::parse_value(line.as_bytes()),
                    "{}", line
                );
            }
        }
    }
}
