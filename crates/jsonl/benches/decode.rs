//! Decode throughput of `JsonlDecoder` against tokio-util's `LinesCodec` and `BufRead::lines()`.
//!
//! Each group decodes a 4 MiB buffer of JSON lines (agent-event-shaped objects: nested fields, numbers,
//! an array of small objects and a text field) of one size, 1 KiB or 64 KiB:
//! - `agentwire`: `JsonlDecoder::new` — frames **and validates every line as JSON** (UTF-8 + grammar),
//!   yielding zero-copy `Bytes`;
//! - `agentwire_framing_only`: `JsonlDecoder::framing_only` — frames only, as a relay would use it;
//! - `baseline_lines_codec`: `LinesCodec::new_with_max_length(4 MiB)` — frames, checks UTF-8, copies each
//!   line into a `String`; no JSON validation;
//! - `baseline_bufread_lines`: `BufRead::lines()` over a `Cursor` — unbounded, checks UTF-8, copies each
//!   line; no JSON validation.
//!
//! Throughput is input bytes per second. Run with `cargo bench -p agentwire-jsonl`.

use std::hint::black_box;
use std::io::{BufRead, Cursor};
use std::time::Duration;

use agentwire_jsonl::{JsonlDecoder, Limits};
use bytes::BytesMut;
use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use tokio_util::codec::{Decoder, LinesCodec};

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
        group.bench_function("baseline_lines_codec", |b| {
            b.iter_batched(
                fresh_buf,
                |mut buf| {
                    let mut codec = LinesCodec::new_with_max_length(4 * 1024 * 1024);
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
        group.bench_function("baseline_bufread_lines", |b| {
            b.iter(|| {
                let mut count = 0;
                for line in Cursor::new(&input[..]).lines() {
                    black_box(line.expect("valid input"));
                    count += 1;
                }
                assert_eq!(count, lines);
            })
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
