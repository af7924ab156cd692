//! Property tests of the sans-IO turn machine: random event sequences always give exactly one `TurnCompleted`
//! per accepted turn, and nothing is emitted outside a turn; any split of the stdout bytes gives the same events.

use std::time::{Duration, Instant};

use agentwire_awp::{
    ExitInfo, MachineConfig, NormalizedEvent, Protocol, StdoutDecoder, TurnMachine,
};
use proptest::prelude::*;

const LINES: &[&str] = &[
    r#"{"type":"system","subtype":"init","session_id":"s1","model":"m"}"#,
    r#"{"type":"system","subtype":"init","session_id":"bad id"}"#,
    r#"{"type":"system","subtype":"status"}"#,
    r#"{"type":"message_start","message":{"id":"msg_1"}}"#,
    r#"{"type":"stream_event","event":{"type":"message_start","message":{"id":"msg_1"}}}"#,
    r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
    r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"hi"}}"#,
    r#"{"type":"stream_event","event":{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"hi"}}}"#,
    r#"{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"t","name":"Bash","input":{}}}"#,
    r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"a\":"}}"#,
    r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"1}"}}"#,
    r#"{"type":"content_block_stop","index":1}"#,
    r#"{"type":"content_block_stop","index":0}"#,
    r#"{"type":"assistant","message":{"id":"msg_1","content":[{"type":"text","text":"hi"}]}}"#,
    r#"{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t","content":"ok"}]}}"#,
    r#"{"type":"message_delta","delta":{"stop_reason":"tool_use"}}"#,
    r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"}}"#,
    r#"{"type":"message_stop"}"#,
    r#"{"type":"stream_event","event":{"type":"message_stop"}}"#,
    r#"{"type":"result","subtype":"success","is_error":false,"session_id":"s1"}"#,
    r#"{"type":"result","subtype":"error","is_error":true}"#,
    r#"{"type":"keep_alive"}"#,
    r#"{"type":"mystery"}"#,
    "banner text",
    "",
];

#[derive(Clone, Debug)]
enum Op {
    Input,
    Line(usize),
    TooLong,
    Advance(u64),
    Exit,
    Cancel,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => Just(Op::Input),
        12 => (0..LINES.len()).prop_map(Op::Line),
        1 => Just(Op::TooLong),
        2 => (0u64..15).prop_map(Op::Advance),
        1 => Just(Op::Exit),
        1 => Just(Op::Cancel),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn exactly_one_turn_completed_per_accepted_turn(
        ops in proptest::collection::vec(op(), 0..80),
        stream_json in any::<bool>(),
        idle in any::<bool>(),
    ) {
        let protocol = if stream_json { Protocol::StreamJson } else { Protocol::AwpJsonl };
        let mut config = MachineConfig::new(protocol);
        config.idle_timeout = idle.then(|| Duration::from_secs(10));
        let mut machine = TurnMachine::new(config);
        let mut now = Instant::now();
        let (mut accepted, mut completed, mut open) = (0u64, 0u64, false);
        let drain = |machine: &mut TurnMachine, open: &mut bool, completed: &mut u64| -> Result<(), TestCaseError> {
            while let Some(event) = machine.poll_event() {
                prop_assert!(*open, "event outside a turn: {event:?}");
                if matches!(event, NormalizedEvent::TurnCompleted(_)) {
                    *completed += 1;
                    *open = false;
                }
            }
            while machine.poll_action().is_some() {}
            Ok(())
        };
        for op in ops {
            match op {
                Op::Input => {
                    if machine.handle_input_sent(now).is_ok() {
                        prop_assert!(!open);
                        accepted += 1;
                        open = true;
                    }
                }
                Op::Line(i) => machine.handle_line(LINES[i].as_bytes(), now),
                Op::TooLong => machine.handle_line_too_long(5_000_000, now),
                Op::Advance(secs) => {
                    now += Duration::from_secs(secs);
                    machine.handle_timeout(now);
                }
                Op::Exit => machine.handle_exit(ExitInfo { code: Some(1), signal: None }, now),
                Op::Cancel => {
                    machine.handle_cancel(now);
                }
            }
            drain(&mut machine, &mut open, &mut completed)?;
            prop_assert_eq!(open, machine.in_turn());
            prop_assert!(completed <= accepted && accepted <= completed + 1);
            prop_assert_eq!(machine.counters().turns_started, accepted);
            prop_assert_eq!(machine.counters().turns_completed, completed);
        }
        machine.handle_exit(ExitInfo { code: None, signal: Some(9) }, now);
        drain(&mut machine, &mut open, &mut completed)?;
        prop_assert_eq!(completed, accepted);
        prop_assert!(machine.handle_input_sent(now).is_err());
    }
}

const RECORDING: &str =
    include_str!("../../../fixtures/recordings/claude-stream-json-partial-two-turns.jsonl");

/// Feeds `chunks` of one turn's stdout through the shell's decoder and the machine; returns the events.
fn feed_turn(chunks: &[&[u8]]) -> Vec<NormalizedEvent> {
    let mut machine = TurnMachine::new(MachineConfig::new(Protocol::StreamJson));
    let mut decoder = StdoutDecoder::new(4 * 1024 * 1024);
    let now = Instant::now();
    machine.handle_input_sent(now).expect("accepted");
    let mut events = Vec::new();
    for chunk in chunks {
        decoder.feed(&mut machine, chunk, now);
        events.extend(std::iter::from_fn(|| machine.poll_event()));
    }
    decoder.finish(&mut machine, now);
    machine.handle_exit(
        ExitInfo {
            code: Some(0),
            signal: None,
        },
        now,
    );
    events.extend(std::iter::from_fn(|| machine.poll_event()));
    events
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn any_split_of_stdout_gives_the_same_events(mut cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..40)) {
        // The first turn of the real recording (up to and including its result line).
        let end = RECORDING.find("\n{\"type\":\"system\",\"subtype\":\"init\"").expect("two turns");
        let turn = &RECORDING.as_bytes()[..=end];
        let whole = feed_turn(&[turn]);
        prop_assert!(matches!(whole.last(), Some(NormalizedEvent::TurnCompleted(_))));
        let mut points: Vec<usize> = cuts.drain(..).map(|i| i.index(turn.len() + 1)).collect();
        points.sort_unstable();
        let mut chunks = Vec::new();
        let mut start = 0;
        for p in points {
            chunks.push(&turn[start..p]);
            start = p;
        }
        chunks.push(&turn[start..]);
        prop_assert_eq!(feed_turn(&chunks), whole);
    }
}
