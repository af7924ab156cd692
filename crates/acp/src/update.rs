//! `session/update` payloads: the v1 `SessionUpdate` when this crate's schema types know it, the raw JSON when not.
//!
//! Source: protocols/acp.md ("Unknown variants: keep as raw, never fail the connection"), schema `$defs/SessionUpdate`.

use agent_client_protocol_schema::v1::{SessionId, SessionUpdate};
use serde_json::Value;

/// One update of a session, in arrival order.
///
/// JSON received (v1): `{"sessionId":"s1","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"hi"}}}`;
/// the `update` object becomes [`Update::Known`], or [`Update::Raw`] when its `sessionUpdate` kind is unknown to the
/// v1 types (a newer agent) or its fields do not match them. Kandev-dialect updates are mapped onto the same model
/// (see [`crate::kandev`]).
#[derive(Clone, Debug, PartialEq)]
pub enum Update {
    /// An update the v1 schema types parse.
    Known(Box<SessionUpdate>),
    /// An update kept verbatim: unknown kind, or fields that do not match the v1 types.
    Raw {
        /// The `sessionUpdate` discriminator (or the Kandev `type`), when it is a string.
        kind: Option<String>,
        /// The update object as received.
        update: Value,
        /// Why the v1 types did not take it (serde's message).
        error: String,
    },
}

impl Update {
    /// Parses an `update` object; never fails (see [`Update::Raw`]).
    pub fn from_value(update: Value) -> Update {
        // Deserialize from a reference: a multi-megabyte update is not copied.
        match <SessionUpdate as serde::Deserialize>::deserialize(&update) {
            Ok(known) => Update::Known(Box::new(known)),
            Err(error) => Update::Raw {
                kind: update
                    .get("sessionUpdate")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
                update,
                error: error.to_string(),
            },
        }
    }

    /// The update's kind: `agent_message_chunk`, `tool_call`, … (the `sessionUpdate` value), or the raw kind.
    /// For a known update this serializes it (cost proportional to its size): meant for diagnostics and tests.
    pub fn kind(&self) -> Option<String> {
        match self {
            Update::Known(update) => serde_json::to_value(update.as_ref())
                .ok()
                .and_then(|value| {
                    value
                        .get("sessionUpdate")
                        .and_then(Value::as_str)
                        .map(str::to_owned)
                }),
            Update::Raw { kind, .. } => kind.clone(),
        }
    }

    /// The `messageId` of a `user_message_chunk`, `agent_message_chunk` or `agent_thought_chunk` (ACP v1 "Message
    /// IDs", schema `$defs/ContentChunk`): chunks of one message share it, so a client can group or de-duplicate
    /// them. `None` for other updates and for agents that send none.
    pub fn message_id(&self) -> Option<&str> {
        match self {
            Update::Known(update) => match update.as_ref() {
                SessionUpdate::UserMessageChunk(chunk)
                | SessionUpdate::AgentMessageChunk(chunk)
                | SessionUpdate::AgentThoughtChunk(chunk) => {
                    chunk.message_id.as_ref().map(|id| id.0.as_ref())
                }
                _ => None,
            },
            Update::Raw { .. } => None,
        }
    }

    /// The text of an `agent_message_chunk` with a text content block, if this is one.
    pub fn agent_text(&self) -> Option<&str> {
        use agent_client_protocol_schema::v1::ContentBlock;
        match self {
            Update::Known(update) => match update.as_ref() {
                SessionUpdate::AgentMessageChunk(chunk) => match &chunk.content {
                    ContentBlock::Text(text) => Some(text.text.as_str()),
                    _ => None,
                },
                _ => None,
            },
            Update::Raw { .. } => None,
        }
    }
}

/// What a `session/update` notification's params hold.
#[derive(Debug)]
pub(crate) enum UpdateParams {
    /// ACP v1: `{sessionId, update}`.
    V1 {
        session_id: SessionId,
        update: Update,
    },
    /// Kandev simplified dialect: `{type, data}`.
    Kandev { kind: String, data: Value },
    /// Neither shape; the text says why.
    Invalid(String),
}

pub(crate) fn parse_update_params(params: Option<Value>) -> UpdateParams {
    let Some(Value::Object(mut params)) = params else {
        return UpdateParams::Invalid("params is not an object".to_owned());
    };
    if let Some(update) = params.remove("update") {
        return match params.get("sessionId").and_then(Value::as_str) {
            Some(session_id) => UpdateParams::V1 {
                session_id: SessionId::new(session_id),
                update: Update::from_value(update),
            },
            None => UpdateParams::Invalid("update without a string sessionId".to_owned()),
        };
    }
    match params.remove("type") {
        Some(Value::String(kind)) => {
            let data = params.remove("data").unwrap_or(Value::Null);
            UpdateParams::Kandev { kind, data }
        }
        _ => UpdateParams::Invalid("neither `update` nor a string `type`".to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check(params: Value, expect: &str) {
        let got = match parse_update_params(Some(params)) {
            UpdateParams::V1 { session_id, update } => {
                format!("v1 {session_id} {}", update.kind().unwrap_or_default())
                    + if matches!(update, Update::Raw { .. }) {
                        " raw"
                    } else {
                        ""
                    }
            }
            UpdateParams::Kandev { kind, .. } => format!("kandev {kind}"),
            UpdateParams::Invalid(why) => format!("invalid: {why}"),
        };
        assert_eq!(got, expect);
    }

    #[test]
    fn update_params_are_classified() {
        let chunk =
            json!({"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"hi"}});
        check(
            json!({"sessionId":"s1","update":chunk}),
            "v1 s1 agent_message_chunk",
        );
        check(
            json!({"sessionId":"s1","update":{"sessionUpdate":"future_thing","x":1}}),
            "v1 s1 future_thing raw",
        );
        check(
            json!({"sessionId":"s1","update":{"sessionUpdate":"tool_call"}}),
            "v1 s1 tool_call raw",
        );
        check(
            json!({"update":chunk}),
            "invalid: update without a string sessionId",
        );
        check(
            json!({"type":"content","data":{"text":"x"}}),
            "kandev content",
        );
        check(
            json!({"nothing":1}),
            "invalid: neither `update` nor a string `type`",
        );
        check(json!([1]), "invalid: params is not an object");
    }

    #[test]
    fn message_ids_are_read_from_chunks() {
        let with = Update::from_value(
            json!({"sessionUpdate":"agent_message_chunk","messageId":"m1","content":{"type":"text","text":"hi"}}),
        );
        assert_eq!(with.message_id(), Some("m1"));
        let without = Update::from_value(
            json!({"sessionUpdate":"user_message_chunk","content":{"type":"text","text":"hi"}}),
        );
        assert_eq!(without.message_id(), None);
        let usage = Update::from_value(json!({"sessionUpdate":"usage_update","used":5,"size":10}));
        assert_eq!(usage.message_id(), None);
        assert_eq!(usage.kind().as_deref(), Some("usage_update"));
    }

    #[test]
    fn agent_text_reads_text_chunks() {
        let update = Update::from_value(
            json!({"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"hi"}}),
        );
        assert_eq!(update.agent_text(), Some("hi"));
    }
}
