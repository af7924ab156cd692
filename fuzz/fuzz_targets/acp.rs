//! Fuzz target `acp`: ACP `session/update` mapping, the Kandev dialect mapping and dialect detection on
//! arbitrary JSON.
//!
//! Invariants (source: `protocols/acp.md` "Unknown variants: keep as raw, never fail the connection",
//! "Kandev simplified dialect", "Initialization"):
//! - `Update::from_value` never fails; a known update serializes and parses back to the same known update; a raw
//!   one keeps the value verbatim and its `sessionUpdate` string as the kind;
//! - the Kandev mapper, fed a sequence of `{type, data}` updates, maps `complete`/`error` to a turn end and every
//!   other kind to an update (unknown kinds raw, with their kind); every synthesized tool call id is new, and a
//!   `tool_call_update` only ever names a call that is still open, and closes it;
//! - `Dialect::from_initialize_answer` says `AcpV1` exactly for the integer 1 and `Kandev` exactly for a string.
#![no_main]

use std::collections::BTreeSet;

use agentwire_acp::kandev::{KandevEvent, KandevMapper};
use agentwire_acp::schema::{SessionUpdate, ToolCallStatus};
use agentwire_acp::{Dialect, Update};
use serde_json::Value;

fn update_case(value: &Value) {
    let update = Update::from_value(value.clone());
    let _ = (update.message_id(), update.agent_text());
    match &update {
        Update::Known(known) => {
            let json = serde_json::to_value(known.as_ref()).expect("a known update serializes");
            let again = Update::from_value(json);
            assert_eq!(again, update, "known update does not round-trip");
            assert!(update.kind().is_some());
        }
        Update::Raw {
            kind, update: raw, ..
        } => {
            assert_eq!(raw, value, "raw update kept verbatim");
            assert_eq!(
                kind.as_deref(),
                value.get("sessionUpdate").and_then(Value::as_str)
            );
        }
    }
}

fn kandev_case(items: &[Value]) {
    let mut mapper = KandevMapper::new();
    let mut seen = BTreeSet::new();
    let mut open = BTreeSet::new();
    for item in items {
        let Some(kind) = item.get("type").and_then(Value::as_str) else {
            continue;
        };
        let data = item.get("data").cloned().unwrap_or(Value::Null);
        let _ = KandevMapper::session_id(&data);
        let event = mapper.map(kind, data);
        match (kind, event) {
            ("complete" | "error", KandevEvent::TurnEnd(_)) => {}
            ("complete" | "error", other) => panic!("{kind} must end the turn: {other:?}"),
            (_, KandevEvent::TurnEnd(end)) => panic!("{kind} ended the turn: {end:?}"),
            (_, KandevEvent::Update(Update::Raw { kind: raw, .. })) => {
                assert!(kind != "toolCall", "tool calls always map");
                assert_eq!(raw.as_deref(), Some(kind));
            }
            (_, KandevEvent::Update(Update::Known(known))) => match *known {
                SessionUpdate::ToolCall(call) => {
                    let id = call.tool_call_id.0.to_string();
                    assert!(seen.insert(id.clone()), "tool call id {id} reused");
                    let finished = matches!(
                        call.status,
                        ToolCallStatus::Completed | ToolCallStatus::Failed
                    );
                    if !finished {
                        open.insert(id);
                    }
                }
                SessionUpdate::ToolCallUpdate(update) => {
                    let id = update.tool_call_id.0.to_string();
                    assert!(
                        open.remove(&id),
                        "update of tool call {id} that is not open"
                    );
                }
                SessionUpdate::AgentMessageChunk(_) => assert_eq!(kind, "content"),
                other => panic!("unexpected mapping of {kind}: {other:?}"),
            },
        }
    }
}

fn dialect_case(value: &Value) {
    let dialect = Dialect::from_initialize_answer(value);
    let version = value.get("protocolVersion");
    assert_eq!(
        dialect == Some(Dialect::AcpV1),
        version.and_then(Value::as_u64) == Some(1)
    );
    assert_eq!(
        dialect == Some(Dialect::Kandev),
        version.is_some_and(Value::is_string)
    );
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Ok(value) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    update_case(&value);
    if let Some(update) = value.get("update") {
        update_case(update);
    }
    match &value {
        Value::Array(items) => kandev_case(items),
        single => kandev_case(std::slice::from_ref(single)),
    }
    dialect_case(&value);
});
