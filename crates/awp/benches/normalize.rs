//! Normalization throughput: stdout bytes → frames → turn machine → `NormalizedEvent`s, against a naive host
//! (split lines, parse each into a `serde_json::Value`, no rules, no dedup, no limits) and against our own
//! previous parse (each line into a `serde_json::Value`, then `OutputEvent::from_value`).
//!
//! Groups (input bytes per second; criterion prints MiB/s):
//! - `normalize_claude_recordings`: the two real Claude Code stream-json recordings
//!   `claude-stream-json-partial-two-turns.jsonl` (stream_event wrappers, big `init` lines, duplicate complete
//!   messages) and `claude-stream-json-tool-use.jsonl` (a `tool_use`, its `user` `tool_result`), concatenated
//!   and repeated to ~1 MiB (`claude-stream-json-single-turn.jsonl` holds no line kind the two lack);
//! - `normalize_text_deltas`: an awp-jsonl stream of 20 000 small `content_block_delta` lines per turn.
//!
//! Functions:
//! - `agentwire_stdout_decoder_machine`: ours, `StdoutDecoder` + `TurnMachine`, 64 KiB chunks; each line is
//!   parsed once, into borrowed typed structs (`OutputEvent::parse`);
//! - `baseline_value_event_parse`: frames + `serde_json::from_slice::<Value>` + `OutputEvent::from_value` per
//!   line (the parse this crate used before, an owned `Value` tree per line), no turn machine;
//! - `baseline_serde_value_per_line`: split on `\n` + `serde_json::from_slice::<Value>` per line, nothing else.
//!
//! Goal (issue 10): ≥ 370 MiB/s on `normalize_claude_recordings`, 5× the 74 MiB/s that the Claude Agent SDK's
//! Python `parse_message` reaches on the same two recordings concatenated, measured on this machine type.
//!
//! Status (2026-12-01, `cargo bench -p agentwire-awp --bench normalize -- --quick`, 2 cores shared with ~8
//! builders, load average 8–10, so absolute numbers are 1.5–2.5× lower than on a quiet machine; compare ratios):
//! ours 138–168 MiB/s against 47–52 MiB/s for `baseline_value_event_parse` in the same runs, i.e. 2.7–3.4× our
//! previous parse, which is itself as fast as `baseline_serde_value_per_line` (the old
//! `agentwire_stdout_decoder_machine` measured 137 MB/s beside 132 MB/s for the per-line `Value` parse on a quiet
//! run, docs/benchmarks.md of 2026-11-30). Scaled by that quiet `Value` figure (126 MiB/s), ours would be about
//! 340–430 MiB/s: **the 370 MiB/s goal is not shown on this loaded machine**; it is at best just met, and at the
//! low end of the range missed by about 8%. `normalize_text_deltas` (~90-byte lines) is 1.7–2× the baseline.
//! Where the time goes now (`perf record` on `normalize_claude_recordings/agentwire`): serde_json's string
//! scanning (`skip_to_escape` 18%, `parse_str` 9%) and map/sequence stepping (~15%) — the JSON grammar walk over
//! every byte, most of it inside the big `init` and `result` lines whose fields are only checked, not kept
//! (55% of the input bytes); malloc/free of the emitted events' strings ~7%; moves ~7%; the framing, the UTF-8
//! check (simdutf8, 2%) and the turn machine (~3%) are small. Skipped fields must still be checked as
//! `serde_json::Value` would check them (lone surrogates, numbers beyond `f64`, nesting 128), so
//! `IgnoredAny`'s cheaper skip is not usable without changing which lines count as malformed.
//!
//! Run with `cargo bench -p agentwire-awp --bench normalize` (add `-- --quick` for a short run).

use std::hint::black_box;
use std::time::{Duration, Instant};

use agentwire_awp::{
    MachineConfig, NormalizedEvent, OutputEvent, Protocol, StdoutDecoder, TurnMachine,
};
use agentwire_jsonl::{Frame, JsonlDecoder, Limits};
use bytes::BytesMut;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

const RECORDINGS: [&str; 2] = [
    include_str!("../../../fixtures/recordings/claude-stream-json-partial-two-turns.jsonl"),
    include_str!("../../../fixtures/recordings/claude-stream-json-tool-use.jsonl"),
];

fn claude_input() -> Vec<u8> {
    let mut out = Vec::new();
    while out.len() < 1024 * 1024 {
        for recording in RECORDINGS {
            out.extend_from_slice(recording.as_bytes());
        }
    }
    out
}

fn delta_input() -> Vec<u8> {
    let mut out = Vec::new();
    for turn in 0..4 {
        out.extend_from_slice(b"{\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n");
        for i in 0..20_000 {
            out.extend_from_slice(
                format!("{{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":\"word {i} of turn {turn} \"}}}}\n")
                    .as_bytes(),
            );
        }
        out.extend_from_slice(b"{\"type\":\"content_block_stop\",\"index\":0}\n");
        out.extend_from_slice(
            b"{\"type\":\"result\",\"subtype\":\"success\",\"is_error\":false,\"session_id\":\"s\",\"usage\":{\"input_tokens\":1,\"output_tokens\":2}}\n",
        );
    }
    out
}

/// Splits `input` into turns: each ends after a `result` line (what a host writes one input line for).
fn turns(input: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut pos = 0;
    for line in input.split_inclusive(|b| *b == b'\n') {
        pos += line.len();
        if line.starts_with(b"{\"type\":\"result\"") {
            out.push(&input[start..pos]);
            start = pos;
        }
    }
    out
}

/// Ours: one accepted turn per segment, fed in 64 KiB chunks. Returns the turns completed.
fn agentwire(turns: &[&[u8]], protocol: Protocol) -> usize {
    let mut machine = TurnMachine::new(MachineConfig::new(protocol));
    let mut decoder = StdoutDecoder::new(4 * 1024 * 1024);
    let now = Instant::now();
    let mut completed = 0;
    for turn in turns {
        machine.handle_input_sent(now).expect("accepted");
        for chunk in turn.chunks(64 * 1024) {
            decoder.feed(&mut machine, chunk, now);
            while let Some(event) = machine.poll_event() {
                if matches!(event, NormalizedEvent::TurnCompleted(_)) {
                    completed += 1;
                }
                black_box(event);
            }
        }
    }
    completed
}

/// Our previous parse: frames, then an owned `Value` per line interpreted by `OutputEvent::from_value`.
/// Returns the `result` events seen.
fn value_event_parse(input: &[u8]) -> usize {
    let mut decoder = JsonlDecoder::framing_only(Limits::default());
    let mut results = 0;
    let mut buf = BytesMut::new();
    for chunk in input.chunks(64 * 1024) {
        buf.extend_from_slice(chunk);
        while let Some(frame) = decoder.decode(&mut buf) {
            let Frame::Json(line) = frame else {
                continue;
            };
            let value: serde_json::Value = serde_json::from_slice(&line).expect("valid json");
            let event = OutputEvent::from_value(&value).expect("known event");
            if matches!(event, OutputEvent::Result(_)) {
                results += 1;
            }
            black_box(event);
        }
    }
    assert!(buf.is_empty(), "the input ends with a newline");
    results
}

fn baseline(input: &[u8]) -> usize {
    let mut results = 0;
    for line in input.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        let value: serde_json::Value = serde_json::from_slice(line).expect("valid json");
        if value.get("type").and_then(|t| t.as_str()) == Some("result") {
            results += 1;
        }
        black_box(value);
    }
    results
}

fn bench_normalize(c: &mut Criterion) {
    for (name, input, protocol) in [
        (
            "normalize_claude_recordings",
            claude_input(),
            Protocol::StreamJson,
        ),
        ("normalize_text_deltas", delta_input(), Protocol::AwpJsonl),
    ] {
        let expected = baseline(&input);
        let turns = turns(&input);
        assert!(expected > 0 && turns.len() == expected);
        let mut group = c.benchmark_group(name);
        group.throughput(Throughput::Bytes(input.len() as u64));
        group.bench_function("agentwire_stdout_decoder_machine", |b| {
            b.iter(|| assert_eq!(agentwire(&turns, protocol), expected))
        });
        group.bench_function("baseline_value_event_parse", |b| {
            b.iter(|| assert_eq!(value_event_parse(&input), expected))
        });
        group.bench_function("baseline_serde_value_per_line", |b| {
            b.iter(|| assert_eq!(baseline(&input), expected))
        });
        group.finish();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(20);
    targets = bench_normalize
}
criterion_main!(benches);
