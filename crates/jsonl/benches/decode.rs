//! Decode throughput of `JsonlDecoder`, each mode against what a user of tokio-util must do to get the same
//! answer (issue 12: compare like with like).
//!
//! Each group decodes a 4 MiB buffer of JSON lines (agent-event-shaped objects: nested fields, numbers,
//! an array of small objects and a text field with escapes and non-ASCII) of one size, 1 KiB or 64 KiB.
//!
//! Validated (`decode_1kib_lines`, `decode_64kib_lines`): every line checked to be UTF-8 holding one JSON value.
//! - `agentwire`: `JsonlDecoder::new` — frames, checks UTF-8 and the JSON grammar, yields zero-copy `Bytes`;
//! - `baseline_lines_codec_serde_value`: `LinesCodec::new_with_max_length(4 MiB)` (frames, checks UTF-8, copies
//!   each line into a `String`) then `serde_json::from_slice::<serde_json::Value>` on it — what a LinesCodec
//!   user writes to learn whether a line is JSON (goal, issue 10: ours ≥ 1× this);
//! - `baseline_lines_codec_serde_ignored`: the same with `serde::de::IgnoredAny` instead of `Value` (no tree
//!   built): the strictest like-for-like, isolating framing and copying from the tree allocation.
//!
//! Framing only (`frame_1kib_lines`, `frame_64kib_lines`): no UTF-8 or JSON check, lines as `Bytes`.
//! - `agentwire_framing_only`: `JsonlDecoder::framing_only` — what a relay uses;
//! - `baseline_memchr_split`: `memchr` for `\n` + `BytesMut::split_to` + `freeze`, no limit, no blank-line or
//!   `\r` handling — the floor;
//! - `baseline_any_delimiter_codec`: tokio-util `AnyDelimiterCodec` on `\n` with a 4 MiB limit — the codec a
//!   tokio-util user picks for byte lines (yields `Bytes`, no UTF-8 check).
//!
//! Status (2026-12-01, `cargo bench -p agentwire-jsonl --bench decode -- --quick`, 2 cores shared with ~8 builders,
//! load average 9–10; absolute numbers swing 3× between runs, compare ratios within one run):
//! - validated: ours is 1.6–3.9× `LinesCodec` + `Value` (goal ≥ 1× met on both sizes) and 0.95–1.7×
//!   `LinesCodec` + `IgnoredAny` (1 KiB: 1.1–1.7×; 64 KiB: 0.95–1.4×);
//! - framing only: ours is 1.2–1.7× the memchr split on 1 KiB lines and 0.4–1.0× on 64 KiB lines (both are a
//!   `memchr` per line plus a `BytesMut::split_to`; the spread is the machine's noise, a profile shows no cost of
//!   ours beyond the `memchr`), and 8–19× `AnyDelimiterCodec`.
//!
//! Throughput is input bytes per second. Run with `cargo bench -p agentwire-jsonl --bench decode`
//! (add `-- --quick` for a short run).

use std::hint::black_box;
use std::time::Duration;

use agentwire_jsonl::{JsonlDecoder, Limits};
use bytes::BytesMut;
use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use tokio_util::codec::{AnyDelimiterCodec, Decoder, LinesCodec};

const TOTAL_BYTES: usize = 4 * 1024 * 1024;

/// One JSON line of exactly `len` bytes (without its `\n`), shaped like an agent stream event.
fn line(len: usize, seq: usize) -> String {
    let head = format!(
        "{{\"type\":\"assistant\",\"seq\":{seq},\"session_id\":\"c18953ea-5ff9-4cb7-9e09-8e070643b47f\",\
         \"usage\":{{\"input_tokens\":1234,\"output_tokens\":56,\"cost\":0.00125}},\
         \"blocks\":[{{\"type\":\"tool_use\",\"id\":\"toolu_01\",\"input\":{{\"path\":\"src/main.rs\",\"limit\":null,\"recursive\":true}}}},\
         {{\"type\":\"text\",\"index\":[1,2,3,4,5,6,7,8]}}],\"text\":\""
    );
    let tail = "\"}";
    let words =
        "The quick brown fox jumps over the lazy dog, \\\"quoted\\\" \\u00e9t\u{e9} \u{2014} ";
    let mut text = String::new();
    while head.len() + text.len() + tail.len() < len {
        text.push_str(words);
    }
    let mut cut = len - head.len() - tail.len();
    // Cut after a space (never inside an escape or a char), then pad, so the line is valid JSON of `len` bytes.
    while !text.is_char_boundary(cut) || !text[..cut].ends_with(' ') {
        cut -= 1;
    }
    text.truncate(cut);
    let padding = " ".repeat(len - head.len() - text.len() - tail.len());
    format!("{head}{text}{tail}{padding}")
}

fn input(line_len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(TOTAL_BYTES + line_len);
    let mut seq = 0;
    while out.len() < TOTAL_BYTES {
        out.extend_from_slice(line(line_len, seq).as_bytes());
        out.push(b'\n');
        seq += 1;
    }
    out
}

fn decode_all(mut decoder: JsonlDecoder, mut buf: BytesMut) -> usize {
    let mut frames = 0;
    while let Some(frame) = decoder.decode_eof(&mut buf) {
        assert!(frame.as_json().is_some(), "{frame:?}");
        black_box(frame);
        frames += 1;
    }
    frames
}

fn bench_decode(c: &mut Criterion) {
    for (name, line_len) in [
        ("decode_1kib_lines", 1024),
        ("decode_64kib_lines", 64 * 1024),
    ] {
        let input = input(line_len);
        let lines = input.len() / (line_len + 1);
        let mut group = c.benchmark_group(name);
        group.throughput(Throughput::Bytes(input.len() as u64));

        let fresh_buf = || BytesMut::from(&input[..]);
        group.bench_function("agentwire", |b| {
            b.iter_batched(
                fresh_buf,
                |buf| assert_eq!(decode_all(JsonlDecoder::new(Limits::default()), buf), lines),
                BatchSize::LargeInput,
            )
        });
        group.bench_function("baseline_lines_codec_serde_value", |b| {
            b.iter_batched(
                fresh_buf,
                |mut buf| {
                    let mut codec = LinesCodec::new_with_max_length(4 * 1024 * 1024);
                    let mut count = 0;
                    while let Some(line) = codec.decode_eof(&mut buf).expect("valid input") {
                        let value: serde_json::Value =
                            serde_json::from_slice(line.as_bytes()).expect("valid json");
                        black_box(value);
                        count += 1;
                    }
                    assert_eq!(count, lines);
                },
                BatchSize::LargeInput,
            )
        });
        group.bench_function("baseline_lines_codec_serde_ignored", |b| {
            b.iter_batched(
                fresh_buf,
                |mut buf| {
                    let mut codec = LinesCodec::new_with_max_length(4 * 1024 * 1024);
                    let mut count = 0;
                    while let Some(line) = codec.decode_eof(&mut buf).expect("valid input") {
                        serde_json::from_slice::<serde::de::IgnoredAny>(line.as_bytes())
                            .expect("valid json");
                        black_box(line);
                        count += 1;
                    }
                    assert_eq!(count, lines);
                },
                BatchSize::LargeInput,
            )
        });
        group.finish();

        let mut group = c.benchmark_group(name.replace("decode_", "frame_"));
        group.throughput(Throughput::Bytes(input.len() as u64));
        group.bench_function("agentwire_framing_only", |b| {
            b.iter_batched(
                fresh_buf,
                |buf| {
                    let decoder = JsonlDecoder::framing_only(Limits::default());
                    assert_eq!(decode_all(decoder, buf), lines)
                },
                BatchSize::LargeInput,
            )
        });
        group.bench_function("baseline_memchr_split", |b| {
            b.iter_batched(
                fresh_buf,
                |mut buf| {
                    let mut count = 0;
                    while let Some(newline) = memchr::memchr(b'\n', &buf) {
                        let line = buf.split_to(newline + 1).freeze();
                        black_box(line.slice(..newline));
                        count += 1;
                    }
                    assert_eq!(count, lines);
                },
                BatchSize::LargeInput,
            )
        });
        group.bench_function("baseline_any_delimiter_codec", |b| {
            b.iter_batched(
                fresh_buf,
                |mut buf| {
                    let mut codec = AnyDelimiterCodec::new_with_max_length(
                        b"\n".to_vec(),
                        Vec::new(),
                        4 * 1024 * 1024,
                    );
                    let mut count = 0;
                    while let Some(line) = codec.decode_eof(&mut buf).expect("valid input") {
                        black_box(line);
                        count += 1;
                    }
                    assert_eq!(count, lines);
                },
                BatchSize::LargeInput,
            )
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
    targets = bench_decode
}
criterion_main!(benches);
