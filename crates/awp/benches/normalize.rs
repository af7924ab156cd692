//! Normalization throughput: stdout bytes → frames → turn machine → `NormalizedEvent`s, against the minimum a
//! naive host does (split lines, parse each into a `serde_json::Value`, no rules, no dedup, no limits).
//!
//! Groups (input bytes per second):
//! - `normalize_claude_partial`: the real Claude Code recording `claude-stream-json-partial-two-turns.jsonl`
//!   repeated to ~1 MiB (stream_event wrappers, big `init` lines, duplicate complete messages);
//! - `normalize_text_deltas`: an awp-jsonl stream of 20 000 small `content_block_delta` lines per turn.
//!
//! Functions: `agentwire_stdout_decoder_machine` (ours: `StdoutDecoder` + `TurnMachine`, 64 KiB chunks) and
//! `baseline_serde_value_per_line`. Run with `cargo bench -p agentwire-awp`.

use std::hint::black_box;
use std::time::{Duration, Instant};

use agentwire_awp::{MachineConfig, NormalizedEvent, Protocol, StdoutDecoder, TurnMachine};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

const RECORDING: &str =
    include_str!("../../../fixtures/recordings/claude-stream-json-partial-two-turns.jsonl");

fn claude_input() -> Vec<u8> {
    let mut out = Vec::new();
    while out.len() < 1024 * 1024 {
        out.extend_from_slice(RECORDING.as_bytes());
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
            "normalize_claude_partial",
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
