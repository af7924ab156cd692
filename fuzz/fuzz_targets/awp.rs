//! Fuzz target `awp`: the AWP event parser and turn machine fed arbitrary line sequences, interleaved with
//! turn starts, exits, cancels, timeouts and over-long lines.
//!
//! Invariants (source: `protocols/awp.md` "Turns", `normalized.rs` `TurnCompleted`: "exactly once per turn,
//! last"): exactly one `TurnCompleted` per accepted turn, and it is the last event of its turn; no content or
//! terminal event outside a turn; a turn is accepted exactly when `can_accept_turn` says so; tool result
//! summaries stay within `max_summary_bytes`; after an exit or a cancel no turn runs. The same stream also goes
//! through `StdoutDecoder` in arbitrary chunks (framing, the line limit), under the same turn invariant.
//!
//! Input layout: byte 0 = protocol (bit 0), idle timeout on (bit 1), small line limit (bit 2); byte 1 = chunk
//! size for the decoder run; the rest is split at `\n` into lines. A line `0xFF c [n]` is a control: `S` input
//! sent, `X` exit, `C` cancel, `T` time passes by `n` seconds, `L` an over-long line; any other line is stdout.
#![no_main]

use std::time::{Duration, Instant};

use agentwire_awp::{
    ExitInfo, MachineConfig, NormalizedEvent, Protocol, StdoutDecoder, TurnMachine,
};

struct Tally {
    accepted: u64,
    completed: u64,
    max_summary: usize,
}

impl Tally {
    /// Drains the events of one step and checks them; `was_in_turn` is the phase before the step.
    fn drain(&mut self, machine: &mut TurnMachine, was_in_turn: bool) {
        let mut completed_in_step = false;
        while let Some(event) = machine.poll_event() {
            assert!(
                !completed_in_step,
                "event after TurnCompleted in the same step: {event:?}"
            );
            match &event {
                NormalizedEvent::TurnCompleted(_) => {
                    assert!(was_in_turn, "TurnCompleted outside a turn");
                    self.completed += 1;
                    completed_in_step = true;
                }
                NormalizedEvent::TextDelta { .. }
                | NormalizedEvent::ThinkingDelta { .. }
                | NormalizedEvent::ToolUse { .. } => {
                    assert!(was_in_turn, "content outside a turn: {event:?}");
                }
                NormalizedEvent::ToolResult { summary, .. } => {
                    assert!(was_in_turn, "tool result outside a turn");
                    assert!(summary.len() <= self.max_summary, "summary over the limit");
                }
                _ => {}
            }
        }
        while machine.poll_action().is_some() {}
        let running = u64::from(machine.in_turn());
        assert_eq!(
            self.completed + running,
            self.accepted,
            "every accepted turn completes exactly once"
        );
        assert_eq!(machine.counters().turns_started, self.accepted);
        if machine.is_finished() {
            assert!(!machine.in_turn());
        }
    }
}

fn config(flags: u8) -> MachineConfig {
    let protocol = if flags & 1 == 0 {
        Protocol::AwpJsonl
    } else {
        Protocol::StreamJson
    };
    let mut config = MachineConfig::new(protocol);
    if flags & 2 != 0 {
        config.idle_timeout = Some(Duration::from_secs(5));
    }
    if flags & 4 != 0 {
        config.limits.max_line_bytes = 64;
        config.limits.max_summary_bytes = 16;
        config.limits.max_tool_input_bytes = 32;
        config.limits.max_open_blocks = 2;
    }
    config
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let [flags, chunk, rest @ ..] = data else {
        return;
    };
    let mut now = Instant::now();

    // Line by line, with controls.
    let config = config(*flags);
    let max_line = config.limits.max_line_bytes;
    let mut tally = Tally {
        accepted: 0,
        completed: 0,
        max_summary: config.limits.max_summary_bytes,
    };
    let mut machine = TurnMachine::new(config.clone());
    let mut stdout = Vec::new();
    for line in rest.split(|b| *b == b'\n') {
        let was_in_turn = machine.in_turn();
        match line {
            [0xFF, b'S', ..] => {
                let allowed = machine.can_accept_turn().is_ok();
                let result = machine.handle_input_sent(now);
                assert_eq!(
                    result.is_ok(),
                    allowed,
                    "turn accepted against can_accept_turn"
                );
                if result.is_ok() {
                    tally.accepted += 1;
                    assert!(machine.in_turn());
                }
            }
            [0xFF, b'X', ..] => {
                machine.handle_exit(
                    ExitInfo {
                        code: Some(0),
                        signal: None,
                    },
                    now,
                );
                assert!(machine.has_exited() && machine.is_finished());
            }
            [0xFF, b'C', ..] => {
                machine.handle_cancel(now);
                assert!(machine.is_finished());
            }
            [0xFF, b'T', n, ..] => {
                now += Duration::from_secs(u64::from(*n));
                machine.handle_timeout(now);
            }
            [0xFF, b'L', ..] => machine.handle_line_too_long(max_line as u64 + 1, now),
            _ => {
                machine.handle_line(line, now);
                stdout.extend_from_slice(line);
                stdout.push(b'\n');
            }
        }
        tally.drain(&mut machine, was_in_turn);
    }
    let was_in_turn = machine.in_turn();
    machine.handle_exit(
        ExitInfo {
            code: None,
            signal: Some(9),
        },
        now,
    );
    tally.drain(&mut machine, was_in_turn);
    assert!(!machine.in_turn());

    // The stdout lines as a byte stream through the shell's decoder, in chunks, within one turn.
    let mut machine = TurnMachine::new(config);
    let mut tally = Tally {
        accepted: 1,
        completed: 0,
        max_summary: tally.max_summary,
    };
    machine
        .handle_input_sent(now)
        .expect("a fresh machine accepts a turn");
    let mut decoder = StdoutDecoder::new(max_line);
    let size = usize::from(*chunk).max(1);
    for piece in stdout.chunks(size) {
        let was_in_turn = machine.in_turn();
        decoder.feed(&mut machine, piece, now);
        tally.drain(&mut machine, was_in_turn);
    }
    let was_in_turn = machine.in_turn();
    decoder.finish(&mut machine, now);
    tally.drain(&mut machine, was_in_turn);
    let was_in_turn = machine.in_turn();
    machine.handle_exit(
        ExitInfo {
            code: Some(1),
            signal: None,
        },
        now,
    );
    tally.drain(&mut machine, was_in_turn);
    assert_eq!(
        tally.completed, 1,
        "the decoder's turn completes exactly once"
    );
});
