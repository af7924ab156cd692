//! Real agent output (Claude Code stream-json captures in `fixtures/recordings/`) decodes to one verbatim
//! `Frame::Json` per line, however it is chunked, with `\n` or `\r\n` endings.

mod common;

use agentwire_jsonl::{Frame, JsonlDecoder, Limits};
use common::invariants::decode_chunks;

const RECORDINGS: [&[u8]; 3] = [
    include_bytes!("../../../fixtures/recordings/claude-stream-json-single-turn.jsonl"),
    include_bytes!("../../../fixtures/recordings/claude-stream-json-partial-two-turns.jsonl"),
    include_bytes!("../../../fixtures/recordings/claude-stream-json-tool-use.jsonl"),
];

fn check(input: &[u8], lines: &[&[u8]]) {
    let expect: Vec<Frame> = lines
        .iter()
        .map(|line| Frame::Json(bytes::Bytes::copy_from_slice(line)))
        .collect();
    for chunk_len in [1, 7, 64, 4096, input.len().max(1)] {
        let frames = decode_chunks(
            JsonlDecoder::new(Limits::default()),
            input.chunks(chunk_len),
        );
        assert_eq!(frames, expect, "chunks of {chunk_len} bytes");
    }
}

#[test]
fn recordings_decode_line_for_line() {
    for recording in RECORDINGS {
        let lines: Vec<&[u8]> = recording
            .split(|&byte| byte == b'\n')
            .filter(|line| !line.is_empty())
            .collect();
        assert!(lines.len() >= 3);
        check(recording, &lines);
        let crlf: Vec<u8> = lines
            .iter()
            .flat_map(|line| [*line, b"\r\n"].concat())
            .collect();
        check(&crlf, &lines);
    }
}
