//! Conformance: replay the real Claude Code 2.1.197 stream-json recordings through the turn machine and pin the
//! normalized events (insta snapshots) plus the properties that matter: `SessionStarted`, text exactly once,
//! tool use + tool result, exactly one `TurnCompleted` per turn with usage and the session id.
//!
//! Recordings: `fixtures/recordings/claude-stream-json-*.jsonl` (provenance in that folder's README.md).

use std::time::Instant;

use agentwire_awp::{MachineConfig, NormalizedEvent, Protocol, TurnMachine, TurnStatus};

fn recording(name: &str) -> String {
    let path = format!(
        "{}/../../fixtures/recordings/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Feeds the recording line by line in stream-json mode; a new turn is accepted whenever a line arrives while no
/// turn runs (the recordings hold only post-input output). Returns the events of each turn.
fn replay(name: &str) -> Vec<Vec<NormalizedEvent>> {
    let mut machine = TurnMachine::new(MachineConfig::new(Protocol::StreamJson));
    let now = Instant::now();
    let mut turns: Vec<Vec<NormalizedEvent>> = Vec::new();
    for line in recording(name).lines().filter(|l| !l.trim().is_empty()) {
        if !machine.in_turn() {
            machine.handle_input_sent(now).expect("turn accepted");
            turns.push(Vec::new());
        }
        machine.handle_line(line.as_bytes(), now);
        while let Some(event) = machine.poll_event() {
            turns.last_mut().expect("a turn is open").push(event);
        }
    }
    let counters = machine.counters();
    assert_eq!(counters.malformed_lines, 0, "{name}");
    assert_eq!(counters.unknown_events, 0, "{name}");
    assert!(!machine.in_turn(), "{name}: every turn ended");
    turns
}

fn snapshot(turns: &[Vec<NormalizedEvent>]) -> String {
    let mut out = String::new();
    for (i, events) in turns.iter().enumerate() {
        out.push_str(&format!("# turn {}\n", i + 1));
        for event in events {
            out.push_str(&serde_json::to_string(event).expect("serializable"));
            out.push('\n');
        }
    }
    out
}

/// Checks one turn: starts with `SessionStarted` for `session_id`, the concatenated text is `text`, and it ends
/// with exactly one successful `TurnCompleted` carrying usage and the session id.
fn check_turn(events: &[NormalizedEvent], session_id: &str, text: &str) {
    assert!(
        matches!(events.first(), Some(NormalizedEvent::SessionStarted { session_id: id, .. }) if id.as_str() == session_id),
        "{events:?}"
    );
    let rendered: String = events
        .iter()
        .filter_map(|e| match e {
            NormalizedEvent::TextDelta { text } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(rendered, text);
    let completed: Vec<_> = events
        .iter()
        .filter(|e| matches!(e, NormalizedEvent::TurnCompleted(_)))
        .collect();
    assert_eq!(completed.len(), 1);
    let Some(NormalizedEvent::TurnCompleted(outcome)) = events.last() else {
        panic!("TurnCompleted is not last: {events:?}");
    };
    assert_eq!(outcome.status, TurnStatus::Success);
    assert_eq!(
        outcome.session_id.as_ref().map(|s| s.as_str()),
        Some(session_id)
    );
    assert!(outcome.usage.is_some_and(|u| u.output_tokens > 0));
    assert_eq!(outcome.result_text.as_deref(), Some(text));
}

#[test]
fn single_turn_recording() {
    let turns = replay("claude-stream-json-single-turn.jsonl");
    assert_eq!(turns.len(), 1);
    check_turn(
        &turns[0],
        "c18953ea-5ff9-4cb7-9e09-8e070643b47f",
        "echo: Say ping",
    );
    insta::assert_snapshot!("single_turn", snapshot(&turns));
}

#[test]
fn partial_two_turns_render_each_echo_once() {
    let turns = replay("claude-stream-json-partial-two-turns.jsonl");
    assert_eq!(turns.len(), 2);
    let id = "876cf434-8513-47bd-a1fe-30bed7186e2f";
    check_turn(&turns[0], id, "echo: first turn");
    check_turn(&turns[1], id, "echo: second turn");
    insta::assert_snapshot!("partial_two_turns", snapshot(&turns));
}

#[test]
fn tool_use_recording_has_tool_use_then_result_then_text() {
    let turns = replay("claude-stream-json-tool-use.jsonl");
    assert_eq!(turns.len(), 1);
    check_turn(
        &turns[0],
        "2e539c20-7810-47f6-95fe-bad378b0a082",
        "tool said: \"hi-from-tool\"",
    );
    let tool_events: Vec<_> = turns[0]
        .iter()
        .filter(|e| {
            matches!(
                e,
                NormalizedEvent::ToolUse { .. } | NormalizedEvent::ToolResult { .. }
            )
        })
        .collect();
    assert_eq!(
        tool_events,
        [
            &NormalizedEvent::ToolUse {
                id: "toolu_01".into(),
                name: "Bash".into(),
                input: serde_json::json!({"command": "echo hi-from-tool", "description": "say hi"}),
            },
            &NormalizedEvent::ToolResult {
                tool_use_id: "toolu_01".into(),
                is_error: false,
                summary: "hi-from-tool".into(),
                truncated: false,
            },
        ]
    );
    insta::assert_snapshot!("tool_use", snapshot(&turns));
}

#[test]
fn recordings_in_awp_jsonl_mode_give_the_same_turns() {
    // Claude Code's `message_stop` is always wrapped in `stream_event`, so it never ends a turn in either mode.
    for name in [
        "claude-stream-json-single-turn.jsonl",
        "claude-stream-json-partial-two-turns.jsonl",
        "claude-stream-json-tool-use.jsonl",
    ] {
        let mut machine = TurnMachine::new(MachineConfig::new(Protocol::AwpJsonl));
        let now = Instant::now();
        let mut events = Vec::new();
        for line in recording(name).lines() {
            if !machine.in_turn() {
                machine.handle_input_sent(now).expect("turn accepted");
            }
            machine.handle_line(line.as_bytes(), now);
            events.extend(std::iter::from_fn(|| machine.poll_event()));
        }
        let stream_json: Vec<NormalizedEvent> = replay(name).into_iter().flatten().collect();
        assert_eq!(events, stream_json, "{name}");
    }
}
