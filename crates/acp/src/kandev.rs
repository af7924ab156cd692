//! The Kandev simplified dialect (an early ACP variant) mapped onto the v1 session-update model. Sans-IO.
//!
//! Source: protocols/acp.md ("Kandev simplified dialect"), seeds/kandev-agent-protocol.txt ("Message Specifications").
//! Wire shapes: `initialize` answers `{"protocolVersion":"1.0",…}` (a string); `session/new {}` → `{sessionId}`;
//! `session/prompt {"message":"…"}` → `{"accepted":true}` at once; progress arrives as
//! `session/update {"type":"content"|"toolCall"|"complete"|"error","data":{…}}`; `session/cancel {"reason":"…"}`.
//! Mapping: `content` → `agent_message_chunk` text, `toolCall` → `tool_call` / `tool_call_update`,
//! `complete` → end of turn (`end_turn`, or a failure when `data.success` is `false`), `error` → turn failure.

use agent_client_protocol_schema::ProtocolVersion;
use agent_client_protocol_schema::v1::{
    ContentBlock, ContentChunk, SessionId, SessionUpdate, StopReason, TextContent, ToolCall,
    ToolCallId, ToolCallStatus, ToolCallUpdate, ToolCallUpdateFields,
};
use serde_json::Value;

use crate::update::Update;

/// Which protocol an agent speaks, decided by its `initialize` answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dialect {
    /// ACP v1: integer `protocolVersion` 1.
    AcpV1,
    /// The Kandev simplified dialect: `protocolVersion` is a string such as `"1.0"`.
    Kandev,
}

impl Dialect {
    /// The dialect an `initialize` answer speaks: [`Dialect::AcpV1`] when `protocolVersion` is the JSON integer 1,
    /// [`Dialect::Kandev`] when it is a string (e.g. `"1.0"`), `None` for anything else (absent, another number,
    /// another type: the client then refuses the agent with `unsupported_protocol_version`).
    ///
    /// Source: protocols/acp.md ("Initialization", "Kandev simplified dialect").
    pub fn from_initialize_answer(answer: &Value) -> Option<Dialect> {
        match answer.get("protocolVersion") {
            Some(Value::Number(number))
                if number.as_u64() == Some(u64::from(ProtocolVersion::V1.as_u16())) =>
            {
                Some(Dialect::AcpV1)
            }
            Some(Value::String(_)) => Some(Dialect::Kandev),
            _ => None,
        }
    }
}

/// What one Kandev `session/update` means.
#[derive(Debug, PartialEq)]
pub enum KandevEvent {
    /// Progress of the turn, as a v1 update.
    Update(Update),
    /// The turn ended: `Ok(end_turn)` or `Err(message)` for `error` / `complete` with `success: false`.
    TurnEnd(Result<StopReason, String>),
}

/// Maps Kandev updates to v1 updates; keeps the synthesized tool call ids (`kandev-tool-N`).
#[derive(Debug, Default)]
pub struct KandevMapper {
    next_tool_call: u64,
    /// Tool calls not yet completed or failed: (tool name, id), oldest first.
    open_tool_calls: Vec<(String, ToolCallId)>,
}

impl KandevMapper {
    /// A mapper with no open tool calls.
    pub fn new() -> Self {
        KandevMapper::default()
    }

    /// The session id a Kandev update names (`data.sessionId`, sent with `complete`), if any.
    pub fn session_id(data: &Value) -> Option<SessionId> {
        data.get("sessionId")
            .and_then(Value::as_str)
            .map(SessionId::new)
    }

    /// Maps one update `{"type": kind, "data": data}`. Unknown kinds become [`Update::Raw`].
    pub fn map(&mut self, kind: &str, data: Value) -> KandevEvent {
        match kind {
            "content" => match data.get("text").and_then(Value::as_str) {
                Some(text) => {
                    let chunk = ContentChunk::new(ContentBlock::Text(TextContent::new(text)));
                    KandevEvent::Update(Update::Known(Box::new(SessionUpdate::AgentMessageChunk(
                        chunk,
                    ))))
                }
                None => raw(kind, data, "content without a string data.text"),
            },
            "toolCall" => self.tool_call(data),
            "complete" => match data.get("success").and_then(Value::as_bool) {
                Some(false) => {
                    let message = text_field(&data, &["summary", "message"])
                        .unwrap_or("agent reported failure");
                    KandevEvent::TurnEnd(Err(message.to_owned()))
                }
                _ => KandevEvent::TurnEnd(Ok(StopReason::EndTurn)),
            },
            "error" => {
                let message = text_field(&data, &["message"]).unwrap_or("agent reported an error");
                let message = match text_field(&data, &["details"]) {
                    Some(details) => format!("{message}: {details}"),
                    None => message.to_owned(),
                };
                KandevEvent::TurnEnd(Err(message))
            }
            _ => raw(kind, data, "unknown Kandev update type"),
        }
    }

    fn tool_call(&mut self, data: Value) -> KandevEvent {
        let name = text_field(&data, &["toolName"])
            .unwrap_or("tool")
            .to_owned();
        let status = data.get("status").and_then(Value::as_str).map(tool_status);
        let raw_input = data.get("args").cloned();
        let finished = matches!(
            status,
            Some(ToolCallStatus::Completed | ToolCallStatus::Failed)
        );
        if finished
            && let Some(position) = self
                .open_tool_calls
                .iter()
                .rposition(|(open, _)| *open == name)
        {
            let (_, id) = self.open_tool_calls.remove(position);
            let fields = ToolCallUpdateFields::new()
                .status(status)
                .raw_input(raw_input);
            let update = SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(id, fields));
            return KandevEvent::Update(Update::Known(Box::new(update)));
        }
        self.next_tool_call += 1;
        let id = ToolCallId::new(format!("kandev-tool-{}", self.next_tool_call));
        if !finished {
            self.open_tool_calls.push((name.clone(), id.clone()));
        }
        let mut call = ToolCall::new(id, name).raw_input(raw_input);
        if let Some(status) = status {
            call = call.status(status);
        }
        KandevEvent::Update(Update::Known(Box::new(SessionUpdate::ToolCall(call))))
    }
}

fn tool_status(status: &str) -> ToolCallStatus {
    match status {
        "completed" | "complete" | "success" | "done" => ToolCallStatus::Completed,
        "failed" | "error" => ToolCallStatus::Failed,
        "pending" => ToolCallStatus::Pending,
        _ => ToolCallStatus::InProgress,
    }
}

fn text_field<'a>(data: &'a Value, names: &[&str]) -> Option<&'a str> {
    names
        .iter()
        .find_map(|name| data.get(*name).and_then(Value::as_str))
}

fn raw(kind: &str, data: Value, why: &str) -> KandevEvent {
    let update = serde_json::json!({"type": kind, "data": data});
    KandevEvent::Update(Update::Raw {
        kind: Some(kind.to_owned()),
        update,
        error: why.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn dialect_is_decided_by_the_type_of_protocol_version() {
        let cases = [
            (json!({"protocolVersion": 1}), Some(Dialect::AcpV1)),
            (json!({"protocolVersion": "1.0"}), Some(Dialect::Kandev)),
            (json!({"protocolVersion": ""}), Some(Dialect::Kandev)),
            (json!({"protocolVersion": 2}), None),
            (json!({"protocolVersion": 0}), None),
            (json!({"protocolVersion": 1.0}), None),
            (json!({"protocolVersion": -1}), None),
            (json!({"protocolVersion": null}), None),
            (json!({}), None),
            (json!([1]), None),
        ];
        for (answer, expect) in cases {
            assert_eq!(Dialect::from_initialize_answer(&answer), expect, "{answer}");
        }
    }

    /// Feeds `(type, data)` pairs through one mapper and compares a compact rendering of each event.
    fn check(input: &[(&str, Value)], expect: &[&str]) {
        let mut mapper = KandevMapper::new();
        let got: Vec<String> = input
            .iter()
            .map(|(kind, data)| match mapper.map(kind, data.clone()) {
                KandevEvent::Update(Update::Known(update)) => {
                    serde_json::to_string(&update).unwrap_or_default()
                }
                KandevEvent::Update(Update::Raw { kind, error, .. }) => {
                    format!("raw {} ({error})", kind.unwrap_or_default())
                }
                KandevEvent::TurnEnd(end) => format!("end {end:?}"),
            })
            .collect();
        assert_eq!(got, expect);
    }

    #[test]
    fn seed_examples_map_onto_v1_updates() {
        check(
            &[
                (
                    "content",
                    json!({"text": "I'm analyzing the code in auth/login.go..."}),
                ),
                (
                    "toolCall",
                    json!({"toolName": "file_edit", "status": "running", "args": {"file": "auth/login.go", "line": 42}}),
                ),
                (
                    "toolCall",
                    json!({"toolName": "file_edit", "status": "completed"}),
                ),
                (
                    "complete",
                    json!({"sessionId": "abc123def456", "success": true, "summary": "Fixed"}),
                ),
            ],
            &[
                r#"{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"I'm analyzing the code in auth/login.go..."}}"#,
                r#"{"sessionUpdate":"tool_call","toolCallId":"kandev-tool-1","title":"file_edit","status":"in_progress","rawInput":{"file":"auth/login.go","line":42}}"#,
                r#"{"sessionUpdate":"tool_call_update","toolCallId":"kandev-tool-1","status":"completed"}"#,
                "end Ok(EndTurn)",
            ],
        );
    }

    #[test]
    fn failures_and_unknown_types() {
        check(
            &[
                (
                    "error",
                    json!({"message": "Failed to compile after changes", "details": "syntax error on line 45"}),
                ),
                ("complete", json!({"success": false, "summary": "gave up"})),
                ("progress", json!({"progress": 50})),
                ("content", json!({"nope": 1})),
            ],
            &[
                r#"end Err("Failed to compile after changes: syntax error on line 45")"#,
                r#"end Err("gave up")"#,
                "raw progress (unknown Kandev update type)",
                "raw content (content without a string data.text)",
            ],
        );
    }

    #[test]
    fn complete_names_its_session() {
        assert_eq!(
            KandevMapper::session_id(&json!({"sessionId": "abc"})),
            Some(SessionId::new("abc"))
        );
        assert_eq!(KandevMapper::session_id(&json!({})), None);
    }
}
