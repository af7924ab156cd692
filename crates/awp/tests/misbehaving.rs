//! Misbehaving agent streams (`protocols/awp.md` "Hazards"), as sans-IO tests: raw stdout bytes go through the
//! shell's sans-IO `StdoutDecoder` (the real bounded JSON Lines decoder, 4 MiB per line) and the turn machine on
//! virtual time.

use std::time::{Duration, Instant};

use agentwire_awp::machine::StdoutDecoder;
use agentwire_awp::{
    Action, ExitInfo, MachineConfig, NormalizedEvent, Protocol, SessionId, TurnMachine,
};

/// One step of a scripted agent.
enum Step {
    /// The host wrote the turn's input line.
    Input,
    /// The agent wrote these stdout bytes.
    Out(Vec<u8>),
    /// The agent exited with this code (stdout EOF first).
    Exit(i32),
    /// Virtual time passes; the shell calls `handle_timeout`.
    Wait(Duration),
}
use Step::*;

fn out(text: &str) -> Step {
    Out(text.as_bytes().to_vec())
}

/// Renders an event compactly; long texts become `<N bytes>` so that multi-megabyte lines stay readable.
fn render(event: &NormalizedEvent) -> String {
    match event {
        NormalizedEvent::TextDelta { text } if text.len() > 64 => {
            format!("text_delta <{} bytes>", text.len())
        }
        other => serde_json::to_string(other).expect("serializable"),
    }
}

struct Run {
    events: Vec<String>,
    machine: TurnMachine,
}

fn run(config: MachineConfig, steps: Vec<Step>) -> Run {
    let mut decoder = StdoutDecoder::new(config.limits.max_line_bytes);
    let mut machine = TurnMachine::new(config);
    let mut now = Instant::now();
    let mut events = Vec::new();
    for step in steps {
        match step {
            Input => {
                if let Err(e) = machine.handle_input_sent(now) {
                    events.push(format!("rejected:{}", e.code()));
                }
            }
            Out(bytes) => decoder.feed(&mut machine, &bytes, now),
            Exit(code) => {
                decoder.finish(&mut machine, now);
                machine.handle_exit(
                    ExitInfo {
                        code: Some(code),
                        signal: None,
                    },
                    now,
                );
            }
            Wait(d) => {
                now += d;
                machine.handle_timeout(now);
            }
        }
        while let Some(event) = machine.poll_event() {
            events.push(render(&event));
        }
        while let Some(Action::StopProcess { code }) = machine.poll_action() {
            events.push(format!("stop:{code}"));
        }
    }
    Run { events, machine }
}

fn check(config: MachineConfig, steps: Vec<Step>, expect: &[&str]) -> TurnMachine {
    let Run { events, machine } = run(config, steps);
    assert_eq!(events, expect);
    machine
}

fn awp() -> MachineConfig {
    MachineConfig::new(Protocol::AwpJsonl)
}

const INIT: &str =
    "{\"type\":\"system\",\"subtype\":\"init\",\"session_id\":\"s1\",\"model\":\"m\"}\n";
const RESULT: &str = "{\"type\":\"result\",\"subtype\":\"success\",\"is_error\":false,\"session_id\":\"s1\",\"usage\":{\"input_tokens\":2,\"output_tokens\":3}}\n";
const STARTED: &str = r#"{"type":"session_started","session_id":"s1","model":"m"}"#;
const DONE: &str = r#"{"type":"turn_completed","status":"success","session_id":"s1","usage":{"input_tokens":2,"output_tokens":3}}"#;

fn delta_line(text: &str) -> String {
    format!(
        "{{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":{}}}}}\n",
        serde_json::Value::String(text.to_owned())
    )
}

#[test]
fn banner_and_debug_text_on_stdout_are_counted_not_rendered() {
    let m = check(
        awp(),
        vec![
            Input,
            out("Agent v1.2 starting...\n"),
            out(INIT),
            out("DEBUG tokens=3\n"),
            out(&delta_line("hi")),
            out(RESULT),
        ],
        &[STARTED, r#"{"type":"text_delta","text":"hi"}"#, DONE],
    );
    assert_eq!(m.counters().malformed_lines, 2);
}

#[test]
fn u2028_inside_a_string_does_not_split_the_line() {
    let raw = "{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"a\u{2028}b\u{2029}c\"}}\n";
    check(
        awp(),
        vec![Input, out(raw), out(RESULT)],
        &[
            "{\"type\":\"text_delta\",\"text\":\"a\u{2028}b\u{2029}c\"}",
            DONE,
        ],
    );
}

#[test]
fn a_5_mb_line_is_stdout_line_too_long_and_a_3_mb_line_passes() {
    let three = delta_line(&"x".repeat(3_000_000));
    check(
        awp(),
        vec![Input, Out(three.into_bytes()), out(RESULT)],
        &["text_delta <3000000 bytes>", DONE],
    );

    let five = delta_line(&"x".repeat(5_000_000));
    let m = check(
        awp(),
        vec![Input, out(INIT), Out(five.into_bytes()), out(RESULT), Input],
        &[
            STARTED,
            r#"{"type":"turn_completed","status":"failed","code":"stdout_line_too_long","detail":"stdout line over 4194304 bytes","session_id":"s1"}"#,
            "stop:stdout_line_too_long",
            "rejected:agent_terminated",
        ],
    );
    assert_eq!(m.counters().lines_too_long, 1);
}

#[test]
fn line_limit_is_exact_at_4_mib() {
    let prefix = "{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"";
    let suffix = "\"}}";
    let limit = 4 * 1024 * 1024;
    let line_of = |len: usize| {
        format!(
            "{prefix}{}{suffix}\n",
            "y".repeat(len - prefix.len() - suffix.len())
        )
    };
    let at = line_of(limit);
    assert_eq!(at.len(), limit + 1);
    let text_len = limit - prefix.len() - suffix.len();
    let expect = format!("text_delta <{text_len} bytes>");
    check(
        awp(),
        vec![Input, Out(at.into_bytes()), out(RESULT)],
        &[&expect, DONE],
    );
    let past = line_of(limit + 1);
    let Run { events, .. } = run(awp(), vec![Input, Out(past.into_bytes())]);
    assert_eq!(events[1], "stop:stdout_line_too_long");
}

#[test]
fn result_then_silence_completes_the_turn_and_needs_no_exit() {
    let mut config = awp();
    config.idle_timeout = Some(Duration::from_secs(30));
    let m = check(
        config,
        vec![
            Input,
            out(INIT),
            out(RESULT),
            Wait(Duration::from_secs(3600)),
        ],
        &[STARTED, DONE],
    );
    assert!(!m.in_turn() && !m.is_finished());
    assert_eq!(m.poll_timeout(), None);
}

#[test]
fn silence_mid_turn_hits_the_idle_timeout() {
    let mut config = awp();
    config.idle_timeout = Some(Duration::from_secs(30));
    check(
        config,
        vec![
            Input,
            out(INIT),
            Wait(Duration::from_secs(29)),
            out(&delta_line("a")),
            Wait(Duration::from_secs(30)),
        ],
        &[
            STARTED,
            r#"{"type":"text_delta","text":"a"}"#,
            r#"{"type":"turn_completed","status":"failed","code":"agent_idle_timeout","session_id":"s1"}"#,
            "stop:agent_idle_timeout",
        ],
    );
}

#[test]
fn exit_mid_turn_fails_the_turn_but_a_result_in_the_pipe_wins() {
    check(
        awp(),
        vec![Input, out(INIT), out(&delta_line("a")), Exit(3)],
        &[
            STARTED,
            r#"{"type":"text_delta","text":"a"}"#,
            r#"{"type":"turn_completed","status":"failed","code":"agent_exited_mid_turn","detail":"exit code 3","session_id":"s1"}"#,
        ],
    );
    // The final result line has no newline: the decoder hands it over at EOF, before the exit is handled.
    check(
        awp(),
        vec![Input, out(INIT), out(RESULT.trim_end()), Exit(0)],
        &[STARTED, DONE],
    );
}

#[test]
fn invalid_session_id_is_rejected_and_not_reported() {
    let bad = "{\"type\":\"system\",\"subtype\":\"init\",\"session_id\":\"bad id/with spaces!\"}\n";
    let bad_result = "{\"type\":\"result\",\"subtype\":\"success\",\"is_error\":false,\"session_id\":\"bad id/with spaces!\"}\n";
    let m = check(
        awp(),
        vec![Input, out(bad), out(bad_result)],
        &[
            r#"{"type":"notice","kind":"invalid_session_id","detail":"session id contains a character outside [A-Za-z0-9._:-] at byte 3"}"#,
            r#"{"type":"notice","kind":"invalid_session_id","detail":"session id contains a character outside [A-Za-z0-9._:-] at byte 3"}"#,
            r#"{"type":"turn_completed","status":"success"}"#,
        ],
    );
    assert_eq!(m.session_id(), None);
    assert_eq!(m.counters().invalid_session_ids, 2);
}

#[test]
fn output_before_input_is_a_counted_violation_that_fails_nothing() {
    let m = check(
        awp(),
        vec![out(INIT), out("hello\n"), Input, out(INIT), out(RESULT)],
        &[
            r#"{"type":"notice","kind":"output_before_input","detail":"2 stdout lines before the first input were discarded"}"#,
            STARTED,
            DONE,
        ],
    );
    assert_eq!(m.counters().output_before_input, 2);
}

#[test]
fn resume_reporting_a_different_session_id() {
    let mut config = awp();
    config.resumed_from = Some(SessionId::new("old-id").expect("valid"));
    let m = check(
        config,
        vec![Input, out(INIT), out(RESULT)],
        &[
            r#"{"type":"notice","kind":"session_id_changed","detail":"old-id -> s1"}"#,
            STARTED,
            DONE,
        ],
    );
    assert_eq!(m.session_id().map(SessionId::as_str), Some("s1"));
}

#[test]
fn result_without_result_field_after_an_interrupt() {
    check(
        awp(),
        vec![
            Input,
            out("{\"type\":\"result\",\"subtype\":\"error_during_execution\",\"is_error\":true}\n"),
        ],
        &[
            r#"{"type":"turn_completed","status":"failed","code":"agent_error","detail":"error_during_execution"}"#,
        ],
    );
}

#[test]
fn success_subtype_with_is_error_true_is_a_failure() {
    check(
        awp(),
        vec![
            Input,
            out(
                "{\"type\":\"result\",\"subtype\":\"success\",\"is_error\":true,\"result\":\"fixture_failure\"}\n",
            ),
        ],
        &[
            r#"{"type":"turn_completed","status":"failed","code":"agent_error","detail":"fixture_failure","result_text":"fixture_failure"}"#,
        ],
    );
}

#[test]
fn invalid_utf8_and_truncated_json_are_malformed() {
    let m = check(
        awp(),
        vec![
            Input,
            Out(b"\xff\xfe garbage\n".to_vec()),
            out("{\"type\":\"resu"),
            Exit(0),
        ],
        &[
            r#"{"type":"turn_completed","status":"failed","code":"agent_exited_mid_turn","detail":"exit code 0"}"#,
        ],
    );
    assert_eq!(m.counters().malformed_lines, 2);
}

#[test]
fn a_flood_without_newline_terminates_as_soon_as_it_crosses_the_limit() {
    let chunk = vec![b'x'; 64 * 1024];
    let mut steps = vec![Input, out(INIT)];
    // 64 chunks of 64 KiB = exactly 4 MiB: still within the limit, nothing happens.
    steps.extend((0..64).map(|_| Out(chunk.clone())));
    let Run { events, .. } = run(awp(), steps);
    assert_eq!(events, [STARTED]);
    let mut steps = vec![Input, out(INIT)];
    steps.extend((0..64).map(|_| Out(chunk.clone())));
    steps.push(out("x"));
    check(
        awp(),
        steps,
        &[
            STARTED,
            r#"{"type":"turn_completed","status":"failed","code":"stdout_line_too_long","detail":"stdout line over 4194304 bytes","session_id":"s1"}"#,
            "stop:stdout_line_too_long",
        ],
    );
}

#[test]
fn many_small_lines_never_add_up_to_the_line_limit() {
    // Hazard: an SDK that never reset its byte counter hung after many small lines. 70 000 lines, ~6 MB in all.
    let mut stream = Vec::new();
    for i in 0..70_000 {
        stream.extend_from_slice(delta_line(&format!("{i:05} ")).as_bytes());
    }
    let total = stream.len();
    assert!(total > 5_000_000);
    let Run { events, machine } = run(awp(), vec![Input, Out(stream), out(RESULT)]);
    assert_eq!(events.len(), 70_001);
    assert_eq!(events.last().map(String::as_str), Some(DONE));
    assert_eq!(machine.counters().lines_too_long, 0);
}
