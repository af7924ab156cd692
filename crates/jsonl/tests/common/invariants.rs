//! Decoder invariants checked against a reference model; shared by the proptests and `fuzz/fuzz_targets/jsonl.rs`.
//!
//! The reference model is the obvious, unbounded, non-incremental reading of the rules: split the whole input
//! on `\n`, drop one trailing `\r` per line, then classify each line. The real decoder must agree with it
//! for every split of the input into chunks.

use agentwire_jsonl::{Frame, InvalidLine, JsonlDecoder, Limits};
use bytes::{Bytes, BytesMut};

/// Feeds `chunks` to `decoder` in order, then signals EOF; checks the buffer bound along the way.
pub fn decode_chunks<'a>(
    mut decoder: JsonlDecoder,
    chunks: impl IntoIterator<Item = &'a [u8]>,
) -> Vec<Frame> {
    let mut buf = BytesMut::new();
    let mut frames = Vec::new();
    for chunk in chunks {
        buf.extend_from_slice(chunk);
        while let Some(frame) = decoder.decode(&mut buf) {
            frames.push(frame);
        }
        let bound = decoder.limits().max_line_bytes.saturating_add(1);
        assert!(
            buf.len() <= bound,
            "buffer holds {} bytes, bound {bound}",
            buf.len()
        );
    }
    while let Some(frame) = decoder.decode_eof(&mut buf) {
        frames.push(frame);
    }
    assert!(buf.is_empty(), "bytes left after EOF: {buf:?}");
    frames
}

/// What the frames of `input` must be, computed the slow and obvious way.
pub fn reference(limits: &Limits, input: &[u8], validate_json: bool) -> Vec<Frame> {
    let mut frames = Vec::new();
    let mut pieces: Vec<&[u8]> = input.split(|&byte| byte == b'\n').collect();
    let last = pieces.pop().unwrap_or_default();
    let lines = pieces
        .into_iter()
        .map(|line| (line, false))
        .chain([(last, true)]);
    for (line, unterminated) in lines {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.iter().all(|byte| b" \t\r".contains(byte)) {
            continue; // blank, whatever its length
        } else if line.len() > limits.max_line_bytes {
            frames.push(Frame::TooLong {
                bytes_discarded: line.len() as u64,
            });
        } else if !validate_json || is_one_json_value(line) {
            frames.push(Frame::Json(Bytes::copy_from_slice(line)));
        } else {
            let mut preview = String::from_utf8_lossy(line).into_owned();
            let mut cut = limits.max_preview_bytes.min(preview.len());
            while !preview.is_char_boundary(cut) {
                cut -= 1;
            }
            preview.truncate(cut);
            frames.push(Frame::Invalid(InvalidLine {
                preview,
                len: line.len(),
                unterminated,
                error: String::new(),
            }));
        }
    }
    frames
}

/// RFC 8259 grammar: UTF-8, one value, whitespace around it (serde_json skips UTF-8 checks when ignoring).
fn is_one_json_value(line: &[u8]) -> bool {
    std::str::from_utf8(line).is_ok()
        && serde_json::from_slice::<serde::de::IgnoredAny>(line).is_ok()
}

/// Checks what every frame promises on its own, then blanks `Invalid::error` so frames compare by content.
pub fn check_frames(limits: &Limits, frames: &mut [Frame], validated: bool) {
    for frame in frames {
        match frame {
            Frame::Json(bytes) => {
                assert!(bytes.len() <= limits.max_line_bytes);
                assert!(!bytes.contains(&b'\n'));
                if validated {
                    assert!(
                        serde_json::from_slice::<serde::de::IgnoredAny>(bytes).is_ok(),
                        "json frame does not parse: {bytes:?}"
                    );
                }
            }
            Frame::Invalid(line) => {
                assert!(validated, "framing-only decoder produced {line:?}");
                assert!(line.preview.len() <= limits.max_preview_bytes);
                assert!(line.len <= limits.max_line_bytes && line.len > 0);
                assert!(!line.error.is_empty());
                line.error.clear();
            }
            Frame::TooLong { bytes_discarded } => {
                assert!(*bytes_discarded > limits.max_line_bytes as u64);
            }
            other => panic!("unknown frame {other:?}"),
        }
    }
}

/// Decodes `input` split at each of `cuts` (sorted or not; out-of-range cuts are clamped) and checks it
/// against the reference model, for both the validating and the framing-only decoder.
pub fn check_split(limits: &Limits, input: &[u8], cuts: &[usize]) {
    let mut cuts: Vec<usize> = cuts.iter().map(|&cut| cut.min(input.len())).collect();
    cuts.sort_unstable();
    let mut chunks = Vec::with_capacity(cuts.len() + 1);
    let mut start = 0;
    for cut in cuts {
        chunks.push(input.get(start..cut).unwrap_or_default());
        start = cut;
    }
    chunks.push(input.get(start..).unwrap_or_default());

    for validate_json in [true, false] {
        let decoder = if validate_json {
            JsonlDecoder::new(limits.clone())
        } else {
            JsonlDecoder::framing_only(limits.clone())
        };
        let mut frames = decode_chunks(decoder, chunks.iter().copied());
        check_frames(limits, &mut frames, validate_json);
        let expect = reference(limits, input, validate_json);
        assert_eq!(frames, expect, "input {input:?} in chunks {chunks:?}");
    }
}

/// The fuzz target's body: the first three bytes choose the limits and a chunk size, the rest is the
/// stream. Checks the whole input, byte-by-byte, fixed-size chunks and a data-driven split.
pub fn check_fuzz_input(data: &[u8]) {
    let [max_line, max_preview, chunk, input @ ..] = data else {
        return;
    };
    let limits = Limits {
        // Small limits most of the time, so over-long lines are common; the default otherwise.
        max_line_bytes: if *max_line < 0xf0 {
            usize::from(*max_line % 40)
        } else {
            agentwire_jsonl::DEFAULT_MAX_LINE_BYTES
        },
        max_preview_bytes: usize::from(*max_preview % 24),
    };
    check_split(&limits, input, &[]);
    let every_byte: Vec<usize> = (1..input.len()).collect();
    check_split(&limits, input, &every_byte);
    let size = usize::from(*chunk % 16) + 1;
    let fixed: Vec<usize> = (size..input.len()).step_by(size).collect();
    check_split(&limits, input, &fixed);
    let driven: Vec<usize> = input.iter().map(|&byte| usize::from(byte)).collect();
    check_split(&limits, input, &driven);
}
