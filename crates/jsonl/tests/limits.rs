//! The line limit on large inputs: a 20 MB line streamed in 64 KiB chunks, EOF while discarding, linear scanning.

mod common;

use agentwire_jsonl::{DEFAULT_MAX_LINE_BYTES, Frame, JsonlDecoder, Limits};
use common::invariants::decode_chunks;

const CHUNK: usize = 64 * 1024;
const HUGE: usize = 20_000_000;

/// A JSON string line of exactly `len` bytes: `"xxx…"`.
fn json_string_line(len: usize) -> Vec<u8> {
    let mut line = vec![b'x'; len];
    line[0] = b'"';
    line[len - 1] = b'"';
    line
}

fn check(limits: Limits, input: &[u8], expect: &[Frame]) {
    let frames = decode_chunks(JsonlDecoder::new(limits), input.chunks(CHUNK));
    assert_eq!(frames, expect);
}

#[test]
fn twenty_mb_line_in_64_kib_chunks_is_one_too_long_then_decoding_resumes() {
    for ending in [&b"\n"[..], b"\r\n"] {
        let mut input = json_string_line(HUGE);
        input.extend_from_slice(ending);
        input.extend_from_slice(b"{\"after\":true}");
        input.extend_from_slice(ending);
        check(
            Limits::default(),
            &input,
            &[
                Frame::TooLong {
                    bytes_discarded: HUGE as u64,
                },
                Frame::Json(bytes::Bytes::from_static(b"{\"after\":true}")),
            ],
        );
    }
}

#[test]
fn eof_while_discarding_reports_too_long() {
    let mut input = b"1\n".to_vec();
    input.extend_from_slice(&json_string_line(HUGE));
    check(
        Limits::default(),
        &input,
        &[
            Frame::Json(bytes::Bytes::from_static(b"1")),
            Frame::TooLong {
                bytes_discarded: HUGE as u64,
            },
        ],
    );
}

#[test]
fn default_limit_exactly_and_one_over() {
    for ending in [&b"\n"[..], b"\r\n"] {
        let at_limit = json_string_line(DEFAULT_MAX_LINE_BYTES);
        let over = json_string_line(DEFAULT_MAX_LINE_BYTES + 1);
        let input = [&at_limit[..], ending, &over, ending, b"2", ending].concat();
        check(
            Limits::default(),
            &input,
            &[
                Frame::Json(bytes::Bytes::from(at_limit.clone())),
                Frame::TooLong {
                    bytes_discarded: DEFAULT_MAX_LINE_BYTES as u64 + 1,
                },
                Frame::Json(bytes::Bytes::from_static(b"2")),
            ],
        );
    }
}

/// A decoder that rescanned its buffer on every call would do ~5·10¹¹ byte comparisons here and never
/// finish; a linear one does 2²⁰.
#[test]
fn one_mib_line_fed_byte_by_byte_decodes() {
    let line = json_string_line(1 << 20);
    let input = [&line[..], b"\n"].concat();
    let frames = decode_chunks(JsonlDecoder::new(Limits::default()), input.chunks(1));
    assert_eq!(frames, [Frame::Json(bytes::Bytes::from(line))]);
}

#[test]
fn whitespace_only_line_of_any_length_yields_no_frame() {
    let after = Frame::Json(bytes::Bytes::from_static(b"{\"after\":true}"));
    // At the default limit, one past it, and 5 MiB (the user report): skipped, then decoding resumes.
    for len in [
        DEFAULT_MAX_LINE_BYTES,
        DEFAULT_MAX_LINE_BYTES + 1,
        5 * 1024 * 1024,
    ] {
        for ending in [&b"\n"[..], b"\r\n"] {
            let mut input = vec![b' '; len];
            input.extend_from_slice(ending);
            input.extend_from_slice(b"{\"after\":true}\n");
            check(Limits::default(), &input, std::slice::from_ref(&after));
        }
        // Cut by EOF.
        check(Limits::default(), &vec![b'\t'; len], &[]);
    }
    // One non-blank byte at the very end of 5 MiB of spaces: the line is too long.
    let mut input = vec![b' '; 5 * 1024 * 1024];
    input.extend_from_slice(b"x\n");
    check(
        Limits::default(),
        &input,
        &[Frame::TooLong {
            bytes_discarded: 5 * 1024 * 1024 + 1,
        }],
    );
}
