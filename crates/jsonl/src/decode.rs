//! The sans-IO JSON Lines decoder: bytes in, [`Frame`]s out, bounded memory, linear time.

use bytes::{Buf, Bytes, BytesMut};
use serde::de::DeserializeOwned;

use crate::error::ParseError;

/// Default for [`Limits::max_line_bytes`]: 4 MiB (4 194 304 bytes).
///
/// Source: the AWP agent CLI protocol (`agent-cli-protocol.md`, section "Output JSONL"): "an unbroken stdout
/// buffer over 4 MiB terminates the runtime"; invariant 1 of this repository's `docs/architecture.md`.
pub const DEFAULT_MAX_LINE_BYTES: usize = 4 * 1024 * 1024;

/// Default for [`Limits::max_preview_bytes`]: 256 bytes.
pub const DEFAULT_MAX_PREVIEW_BYTES: usize = 256;

/// The bounds a [`JsonlDecoder`] enforces. Bounded by default; there is no unbounded mode.
///
/// Construct with `Limits { max_line_bytes: 1 << 20, ..Limits::default() }`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest accepted line, in bytes, **not counting its terminator** (`\n` or `\r\n`):
    /// a line of exactly `max_line_bytes` bytes followed by `\r\n` is accepted, one byte more is not.
    ///
    /// Default [`DEFAULT_MAX_LINE_BYTES`] (4 MiB).
    /// On overflow the decoder yields exactly one [`Frame::TooLong`] for the line, discards its bytes
    /// through the next `\n` (or EOF) without buffering them, and then decodes the following lines normally.
    /// A blank line (only spaces, tabs and `\r`) yields no frame whatever its length: past the limit it is
    /// discarded the same way (the decoder only remembers whether every byte so far was blank) and then skipped.
    /// The decoder never holds more than `max_line_bytes + 1` bytes of one line in the buffer
    /// (plus whatever a single read appended).
    pub max_line_bytes: usize,
    /// Largest [`InvalidLine::preview`], in bytes of UTF-8.
    ///
    /// Default [`DEFAULT_MAX_PREVIEW_BYTES`] (256).
    /// Longer lines are cut at the last char boundary that fits; [`InvalidLine::len`] keeps the full length.
    pub max_preview_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_line_bytes: DEFAULT_MAX_LINE_BYTES,
            max_preview_bytes: DEFAULT_MAX_PREVIEW_BYTES,
        }
    }
}

/// One item of a JSON Lines stream.
///
/// Blank lines (empty, or only spaces, tabs and `\r`) produce no frame, whatever their length.
/// Nothing a peer sends makes the decoder fail: every line becomes exactly one frame or is skipped as blank.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame {
    /// One complete line holding one JSON value, e.g. `{"jsonrpc":"2.0","method":"ping"}`.
    ///
    /// The bytes are the line verbatim **without** its `\n` / `\r\n` terminator (surrounding spaces kept),
    /// split from the read buffer without copying, so relays can forward them as they came.
    /// Being a view, a frame keeps the read buffer's allocation alive while it lives: copy it
    /// (`Bytes::copy_from_slice`) before storing small frames for long.
    /// They are valid UTF-8 and hold exactly one JSON value by the grammar of RFC 8259 (whitespace around it
    /// allowed), unless the decoder was built with [`JsonlDecoder::framing_only`].
    /// Grammar only: a typed parse ([`Frame::parse`]) can still reject what the grammar allows — numbers
    /// outside `f64` such as `1e400`, lone surrogate escapes such as `"\ud800"`, and nesting of 128 or more
    /// arrays/objects (serde_json's recursion limit: 127 levels parse, 128 fail with "recursion limit exceeded").
    /// Validation itself does not recurse, so deep nesting cannot overflow the stack.
    Json(Bytes),
    /// A non-blank line that is not one JSON value: a banner, log text, invalid UTF-8, trailing garbage,
    /// or JSON truncated by EOF. Never fatal; the next line decodes normally.
    Invalid(InvalidLine),
    /// A non-blank line longer than [`Limits::max_line_bytes`]. Yielded once per over-long line, after its
    /// bytes were discarded through the next `\n` (or EOF).
    TooLong {
        /// Length of the discarded line in bytes, not counting its `\n` / `\r\n` terminator — measured like
        /// [`InvalidLine::len`] (the two names differ for history; both exclude the line ending).
        bytes_discarded: u64,
    },
}

impl Frame {
    /// Deserializes a [`Frame::Json`] into `T`.
    ///
    /// # Errors
    /// [`ParseError::NotJson`] for [`Frame::Invalid`] and [`Frame::TooLong`];
    /// [`ParseError::Json`] when the JSON does not match `T`.
    pub fn parse<T: DeserializeOwned>(&self) -> Result<T, ParseError> {
        match self {
            Frame::Json(bytes) => Ok(serde_json::from_slice(bytes)?),
            other => Err(ParseError::NotJson {
                frame: other.kind(),
            }),
        }
    }

    /// The raw JSON bytes of a [`Frame::Json`] (no terminator), `None` for other frames.
    pub fn as_json(&self) -> Option<&Bytes> {
        match self {
            Frame::Json(bytes) => Some(bytes),
            _ => None,
        }
    }

    /// A stable snake_case name of the variant: `"json"`, `"invalid"` or `"too_long"`.
    pub fn kind(&self) -> &'static str {
        match self {
            Frame::Json(_) => "json",
            Frame::Invalid(_) => "invalid",
            Frame::TooLong { .. } => "too_long",
        }
    }
}

/// What is known about a line that is not one JSON value (see [`Frame::Invalid`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidLine {
    /// The start of the line as lossy UTF-8 (invalid sequences become U+FFFD), at most
    /// [`Limits::max_preview_bytes`] bytes, cut at a char boundary. Not escaped: escape it before printing
    /// it to a terminal.
    pub preview: String,
    /// Length of the whole line in bytes, not counting its `\n` / `\r\n` terminator — measured like
    /// [`Frame::TooLong`]'s `bytes_discarded` (both exclude the line ending).
    pub len: usize,
    /// `true` when the line was the final one of the stream and had no `\n` (it was cut by EOF).
    pub unterminated: bool,
    /// Why the line is not JSON, e.g. `invalid utf-8 at byte 3` or serde_json's
    /// `expected value at line 1 column 1`.
    pub error: String,
}

/// Bytes dropped so far of a line that went over [`Limits::max_line_bytes`] before its `\n` arrived.
#[derive(Clone, Copy, Debug)]
struct Discard {
    bytes: u64,
    /// The last byte dropped was `\r`: if the next byte is `\n`, that `\r` was part of the terminator.
    last_was_cr: bool,
    /// Every byte dropped so far was blank (space, tab, `\r`): if the line ends so, it yields no frame.
    blank: bool,
}

/// Whether every byte is a space, tab or `\r`: the bytes of a blank line.
fn is_blank(bytes: &[u8]) -> bool {
    bytes
        .iter()
        .all(|&byte| matches!(byte, b' ' | b'\t' | b'\r'))
}

/// The sans-IO JSON Lines decoder.
///
/// Feed it one [`BytesMut`] that you only append reads to (it remembers how far it has scanned); call [`decode`](Self::decode) until it returns `None`
/// (it needs more bytes), and at EOF call [`decode_eof`](Self::decode_eof) until it returns `None`.
/// With the `codec` feature it is also a [`tokio_util::codec::Decoder`] (use it with `FramedRead`).
///
/// Rules (invariant 1 of this repository's `docs/architecture.md`):
/// - Lines are split only on `\n`; one `\r` before it is part of the terminator.
///   U+2028/U+2029 and lone `\r` are ordinary bytes.
/// - Blank lines (empty, or only spaces, tabs and `\r`) are skipped, whatever their length.
/// - Each byte is scanned for `\n` once: the decoder remembers where its search stopped, so decoding is
///   linear in the input however it is split.
/// - A non-blank line over [`Limits::max_line_bytes`] is reported as one [`Frame::TooLong`]; no line is
///   buffered beyond `max_line_bytes + 1` bytes.
/// - Lines are validated as JSON with serde_json (into `IgnoredAny`, no allocation per value) after a UTF-8 check.
#[derive(Clone, Debug)]
pub struct JsonlDecoder {
    limits: Limits,
    validate_json: bool,
    /// `buf[..next_index]` is known to contain no `\n`.
    next_index: usize,
    discard: Option<Discard>,
}

impl Default for JsonlDecoder {
    fn default() -> Self {
        Self::new(Limits::default())
    }
}

impl JsonlDecoder {
    /// A decoder that validates every line as JSON ([`Frame::Json`] or [`Frame::Invalid`]).
    pub fn new(limits: Limits) -> Self {
        Self {
            limits,
            validate_json: true,
            next_index: 0,
            discard: None,
        }
    }

    /// A decoder that only frames: every non-blank line within the limit becomes a [`Frame::Json`]
    /// **without** checking that it is UTF-8 or JSON, and [`Frame::Invalid`] is never produced.
    ///
    /// For relays that forward lines verbatim and leave parsing to the far end. Limits, blank-line
    /// skipping and [`Frame::TooLong`] work exactly as with [`new`](Self::new).
    pub fn framing_only(limits: Limits) -> Self {
        Self {
            validate_json: false,
            ..Self::new(limits)
        }
    }

    /// The limits this decoder enforces.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Bytes discarded so far of an over-long line whose `\n` has not arrived yet; `None` when not discarding.
    ///
    /// [`Frame::TooLong`] is yielded only once the line ends; a shell that must react as soon as the
    /// limit is crossed (AWP terminates the runtime on an unbroken stdout buffer over 4 MiB) checks this
    /// after `decode` returns `None`.
    ///
    /// An over-long *blank* line counts here too while it streams in (whether it is blank is known only at its
    /// end); it then ends with no frame instead of a [`Frame::TooLong`].
    pub fn discarding_bytes(&self) -> Option<u64> {
        self.discard.map(|discard| discard.bytes)
    }

    /// Decodes the next frame from `buf`, or returns `None` when `buf` holds no complete line yet.
    ///
    /// Consumed bytes are removed from the front of `buf`; bytes of an over-long line are dropped as they
    /// arrive. Call again until it returns `None`, then append more input.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Option<Frame> {
        loop {
            if let Some(discard) = self.discard.as_mut() {
                let Some(newline) = memchr::memchr(b'\n', buf) else {
                    discard.bytes += buf.len() as u64;
                    discard.blank = discard.blank && is_blank(buf);
                    if let Some(&last) = buf.last() {
                        discard.last_was_cr = last == b'\r';
                    }
                    buf.clear();
                    self.next_index = 0;
                    return None;
                };
                let ends_with_cr = match newline.checked_sub(1) {
                    Some(before) => buf.get(before) == Some(&b'\r'),
                    None => discard.last_was_cr,
                };
                let bytes_discarded = discard.bytes + newline as u64 - u64::from(ends_with_cr);
                let blank = discard.blank && buf.get(..newline).is_some_and(is_blank);
                buf.advance(newline + 1);
                self.discard = None;
                self.next_index = 0;
                if blank {
                    continue; // a blank line yields no frame, however long
                }
                return Some(Frame::TooLong { bytes_discarded });
            }

            // A buffer shorter than where the search stopped was not only appended to: rescan it.
            let start = if self.next_index > buf.len() {
                0
            } else {
                self.next_index
            };
            let found = buf
                .get(start..)
                .and_then(|unscanned| memchr::memchr(b'\n', unscanned));
            match found {
                Some(offset) => {
                    let newline = start + offset;
                    self.next_index = 0;
                    let mut line = buf.split_to(newline + 1);
                    line.truncate(newline);
                    strip_cr(&mut line);
                    if let Some(frame) = self.classify(line, false) {
                        return Some(frame);
                    }
                }
                None => {
                    // The line is at least this long; a trailing `\r` may still turn out to be a terminator.
                    let ends_with_cr = buf.last() == Some(&b'\r');
                    let at_least = buf.len() - usize::from(ends_with_cr);
                    if at_least > self.limits.max_line_bytes {
                        self.discard = Some(Discard {
                            bytes: buf.len() as u64,
                            last_was_cr: ends_with_cr,
                            blank: is_blank(buf),
                        });
                        buf.clear();
                        self.next_index = 0;
                    } else {
                        self.next_index = buf.len();
                    }
                    return None;
                }
            }
        }
    }

    /// Like [`decode`](Self::decode), for when the input has ended: after the complete lines, yields the
    /// final unterminated line (a trailing `\r` is dropped, as if `\n` followed), or the [`Frame::TooLong`] of
    /// a line that was being discarded. Call until it returns `None`; `buf` is then empty.
    ///
    /// A final line that is JSON is a [`Frame::Json`]; one that is not (for example JSON truncated by the
    /// end of the stream) is a [`Frame::Invalid`] with `unterminated: true`.
    pub fn decode_eof(&mut self, buf: &mut BytesMut) -> Option<Frame> {
        if let Some(frame) = self.decode(buf) {
            return Some(frame);
        }
        self.next_index = 0;
        if let Some(discard) = self.discard.take() {
            buf.clear();
            if discard.blank {
                return None;
            }
            return Some(Frame::TooLong {
                bytes_discarded: discard.bytes - u64::from(discard.last_was_cr),
            });
        }
        if buf.is_empty() {
            return None;
        }
        let mut line = buf.split();
        strip_cr(&mut line);
        self.classify(line, true)
    }

    /// Turns one line (terminator removed) into a frame; `None` for a blank line.
    fn classify(&self, line: BytesMut, unterminated: bool) -> Option<Frame> {
        let len = line.len();
        if is_blank(&line) {
            return None; // blank lines yield no frame, whatever their length
        }
        if len > self.limits.max_line_bytes {
            return Some(Frame::TooLong {
                bytes_discarded: len as u64,
            });
        }
        if !self.validate_json {
            return Some(Frame::Json(line.freeze()));
        }
        match validate_json(&line) {
            Ok(()) => Some(Frame::Json(line.freeze())),
            Err(error) => Some(Frame::Invalid(InvalidLine {
                preview: preview(&line, self.limits.max_preview_bytes),
                len,
                unterminated,
                error,
            })),
        }
    }
}

fn strip_cr(line: &mut BytesMut) {
    if line.last() == Some(&b'\r') {
        line.truncate(line.len() - 1);
    }
}

/// Checks that `line` is UTF-8 holding exactly one JSON value (whitespace around it allowed).
///
/// serde_json does not check UTF-8 inside strings it ignores, hence the explicit check first, with SIMD
/// (`simdutf8`, about a third of the validation time with `std`); the slower `std` check runs only on failure,
/// to locate the bad byte.
fn validate_json(line: &[u8]) -> Result<(), String> {
    let text = simdutf8::basic::from_utf8(line).map_err(|_| match std::str::from_utf8(line) {
        Err(error) => format!("invalid utf-8 at byte {}", error.valid_up_to()),
        Ok(_) => "invalid utf-8".to_owned(),
    })?;
    serde_json::from_str::<serde::de::IgnoredAny>(text)
        .map(|_| ())
        .map_err(|error| error.to_string())
}

/// The start of `line` as lossy UTF-8, at most `max_bytes` bytes, cut at a char boundary.
pub(crate) fn preview(line: &[u8], max_bytes: usize) -> String {
    let mut out = String::with_capacity(max_bytes.min(line.len()));
    for chunk in line.utf8_chunks() {
        let valid = chunk.valid();
        let room = max_bytes - out.len();
        if valid.len() > room {
            let cut = (0..=room)
                .rev()
                .find(|&index| valid.is_char_boundary(index))
                .unwrap_or(0);
            out.push_str(valid.get(..cut).unwrap_or_default());
            return out;
        }
        out.push_str(valid);
        if !chunk.invalid().is_empty() {
            if max_bytes - out.len() < char::REPLACEMENT_CHARACTER.len_utf8() {
                return out;
            }
            out.push(char::REPLACEMENT_CHARACTER);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(max_line_bytes: usize) -> Limits {
        Limits {
            max_line_bytes,
            ..Limits::default()
        }
    }

    fn json(text: &str) -> Frame {
        Frame::Json(Bytes::copy_from_slice(text.as_bytes()))
    }

    fn invalid(preview: &str, len: usize, unterminated: bool) -> Frame {
        Frame::Invalid(InvalidLine {
            preview: preview.to_owned(),
            len,
            unterminated,
            error: String::new(),
        })
    }

    fn too_long(bytes_discarded: u64) -> Frame {
        Frame::TooLong { bytes_discarded }
    }

    /// Feeds `chunks` in order, then EOF; errors are checked non-empty and blanked for comparison.
    fn run(decoder: &mut JsonlDecoder, chunks: &[&[u8]]) -> Vec<Frame> {
        let mut buf = BytesMut::new();
        let mut frames = Vec::new();
        for chunk in chunks {
            buf.extend_from_slice(chunk);
            while let Some(frame) = decoder.decode(&mut buf) {
                frames.push(frame);
            }
            assert!(buf.len() <= decoder.limits().max_line_bytes.saturating_add(1));
        }
        while let Some(frame) = decoder.decode_eof(&mut buf) {
            frames.push(frame);
        }
        assert!(buf.is_empty());
        for frame in &mut frames {
            if let Frame::Invalid(line) = frame {
                assert!(!line.error.is_empty(), "{line:?}");
                line.error.clear();
            }
        }
        frames
    }

    /// Decodes `input` whole, cut once at every byte boundary, and byte by byte: all must give `expect`.
    fn check(limits: Limits, input: &[u8], expect: &[Frame]) {
        let fresh = || JsonlDecoder::new(limits.clone());
        assert_eq!(run(&mut fresh(), &[input]), expect, "whole input");
        for cut in 0..=input.len() {
            let (head, tail) = input.split_at(cut);
            assert_eq!(run(&mut fresh(), &[head, tail]), expect, "cut at {cut}");
        }
        let bytes: Vec<&[u8]> = input.chunks(1).collect();
        assert_eq!(run(&mut fresh(), &bytes), expect, "byte by byte");
    }

    #[test]
    fn defaults_are_the_documented_values() {
        assert_eq!(DEFAULT_MAX_LINE_BYTES, 4_194_304);
        assert_eq!(
            Limits::default(),
            Limits {
                max_line_bytes: 4 * 1024 * 1024,
                max_preview_bytes: 256
            }
        );
        assert_eq!(JsonlDecoder::default().limits(), &Limits::default());
        let kinds = [
            json("1").kind(),
            invalid("x", 1, false).kind(),
            too_long(1).kind(),
        ];
        assert_eq!(kinds, ["json", "invalid", "too_long"]);
    }

    #[test]
    fn splits_on_newline_and_accepts_crlf() {
        check(
            Limits::default(),
            b"{\"a\":1}\n[2]\r\n\"three\"\n",
            &[json("{\"a\":1}"), json("[2]"), json("\"three\"")],
        );
    }

    #[test]
    fn skips_blank_and_whitespace_only_lines() {
        check(
            Limits::default(),
            b"\n\r\n  \t \n\r\r\n1\n \r\n2",
            &[json("1"), json("2")],
        );
    }

    #[test]
    fn keeps_surrounding_spaces_verbatim() {
        check(
            Limits::default(),
            b"  {\"a\": 1}  \r\n",
            &[json("  {\"a\": 1}  ")],
        );
    }

    #[test]
    fn line_separators_inside_strings_do_not_split() {
        let line = "{\"text\":\"a\u{2028}b\u{2029}c\"}";
        let input = format!("{line}\n{line}");
        check(
            Limits::default(),
            input.as_bytes(),
            &[json(line), json(line)],
        );
    }

    #[test]
    fn lone_carriage_return_is_an_ordinary_byte() {
        check(
            Limits::default(),
            b"[1,\r2]\nbanner\rtext\n",
            &[json("[1,\r2]"), invalid("banner\rtext", 11, false)],
        );
    }

    #[test]
    fn banner_lines_between_frames_are_invalid_items() {
        check(
            Limits::default(),
            b"Starting agent v1.2...\n{\"id\":1}\nWARN: something\n{\"id\":2}\n",
            &[
                invalid("Starting agent v1.2...", 22, false),
                json("{\"id\":1}"),
                invalid("WARN: something", 15, false),
                json("{\"id\":2}"),
            ],
        );
    }

    #[test]
    fn two_values_on_one_line_are_invalid() {
        check(
            Limits::default(),
            b"{} {}\n1 2\n",
            &[invalid("{} {}", 5, false), invalid("1 2", 3, false)],
        );
    }

    #[test]
    fn invalid_utf8_is_an_invalid_item() {
        let mut input = b"\"caf\xff\"\n".to_vec();
        input.extend_from_slice(b"\xe2\x80\n1\n");
        check(
            Limits::default(),
            &input,
            &[
                invalid("\"caf\u{fffd}\"", 6, false),
                invalid("\u{fffd}", 2, false),
                json("1"),
            ],
        );
        let mut decoder = JsonlDecoder::new(Limits::default());
        let mut buf = BytesMut::from(&b"\"caf\xff\"\n"[..]);
        let Some(Frame::Invalid(line)) = decoder.decode(&mut buf) else {
            panic!("expected an invalid frame");
        };
        assert_eq!(line.error, "invalid utf-8 at byte 4");
    }

    #[test]
    fn limit_exactly_is_accepted_and_one_over_is_too_long() {
        // 10-byte values: `"12345678"` and an 11-byte one.
        let at_limit = "\"12345678\"";
        let over = "\"123456789\"";
        for ending in ["\n", "\r\n"] {
            let input = format!("{at_limit}{ending}{over}{ending}1{ending}");
            check(
                limits(10),
                input.as_bytes(),
                &[json(at_limit), too_long(11), json("1")],
            );
            // The same at EOF, without a terminator (a trailing `\r` still does not count).
            let input = format!(
                "{at_limit}{ending}{at_limit}{}",
                ending.trim_end_matches('\n')
            );
            check(
                limits(10),
                input.as_bytes(),
                &[json(at_limit), json(at_limit)],
            );
            let input = format!("{over}{}", ending.trim_end_matches('\n'));
            check(limits(10), input.as_bytes(), &[too_long(11)]);
        }
    }

    #[test]
    fn carriage_return_before_newline_does_not_count_but_other_ones_do() {
        // `1\r` is 2 bytes of content when followed by `\r\n`.
        check(limits(2), b"1\r\r\n", &[json("1\r")]);
        check(limits(1), b"1\r\r\n2\n", &[too_long(2), json("2")]);
    }

    #[test]
    fn whitespace_only_lines_at_the_limit_and_past_it_are_skipped() {
        // At the limit (3), one past it, and far past it: no frame, and the next line decodes.
        for blank in ["   ", " \t ", "    ", " \t\r ", "          "] {
            for ending in ["\n", "\r\n"] {
                let input = format!("{blank}{ending}1\n");
                check(limits(3), input.as_bytes(), &[json("1")]);
            }
            // The final line, cut by EOF.
            let input = format!("1\n{blank}");
            check(limits(3), input.as_bytes(), &[json("1")]);
        }
        // One non-blank byte anywhere in an over-long line makes it too long.
        check(limits(3), b"  x \n1\n", &[too_long(4), json("1")]);
        check(limits(3), b"    x\n1\n", &[too_long(5), json("1")]);
        check(limits(3), b"x    \n1\n", &[too_long(5), json("1")]);
        check(limits(3), b"     x", &[too_long(6)]);
        // A blank line at the limit with a non-blank one past it.
        check(limits(3), b"   \n    x\n", &[too_long(5)]);
    }

    #[test]
    fn zero_limit_rejects_every_non_empty_line() {
        check(limits(0), b"\n1\n\r\n22", &[too_long(1), too_long(2)]);
    }

    #[test]
    fn eof_cases() {
        check(Limits::default(), b"", &[]);
        check(Limits::default(), b"1\n", &[json("1")]);
        check(Limits::default(), b"{\"a\":[1]}", &[json("{\"a\":[1]}")]);
        check(Limits::default(), b"{\"a\":[1]}\r", &[json("{\"a\":[1]}")]);
        check(
            Limits::default(),
            b"1\n{\"a\":[1",
            &[json("1"), invalid("{\"a\":[1", 7, true)],
        );
        check(Limits::default(), b"1\n   ", &[json("1")]);
        check(limits(4), b"1\n123456", &[json("1"), too_long(6)]);
    }

    #[test]
    fn truncated_json_at_eof_names_the_error() {
        let mut decoder = JsonlDecoder::new(Limits::default());
        let mut buf = BytesMut::from(&b"{\"a\":"[..]);
        assert_eq!(decoder.decode(&mut buf), None);
        let Some(Frame::Invalid(line)) = decoder.decode_eof(&mut buf) else {
            panic!("expected an invalid frame");
        };
        assert!(line.unterminated);
        assert_eq!(line.error, "EOF while parsing a value at line 1 column 5");
        assert_eq!(decoder.decode_eof(&mut buf), None);
    }

    #[test]
    fn validation_follows_the_json_grammar_only() {
        check(
            Limits::default(),
            b"1e400\n\"\\ud800\"\n01\n[1,]\n\"\x01\"\n",
            &[
                json("1e400"),
                json("\"\\ud800\""),
                invalid("01", 2, false),
                invalid("[1,]", 4, false),
                invalid("\"\u{1}\"", 3, false),
            ],
        );
    }

    #[test]
    fn deep_nesting_validates_without_recursion() {
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        let mut decoder = JsonlDecoder::new(Limits::default());
        let mut buf = BytesMut::from(format!("{deep}\n{}\n", &deep[1..]).as_bytes());
        let frame = decoder.decode(&mut buf).unwrap();
        assert_eq!(frame, json(&deep));
        // A typed parse applies serde_json's recursion limit and reports it as an error.
        let error = frame.parse::<serde_json::Value>().unwrap_err();
        assert!(error.to_string().contains("recursion limit"), "{error}");
        assert!(matches!(decoder.decode(&mut buf), Some(Frame::Invalid(_))));
    }

    #[test]
    fn nesting_of_127_parses_and_128_hits_serde_jsons_recursion_limit() {
        let nested = |depth: usize| json(&format!("{}{}", "[".repeat(depth), "]".repeat(depth)));
        assert!(nested(127).parse::<serde_json::Value>().is_ok());
        let error = nested(128).parse::<serde_json::Value>().unwrap_err();
        assert!(error.to_string().contains("recursion limit"), "{error}");
        // The decoder itself accepts both as JSON: the limit belongs to the typed parse only.
        for depth in [127, 128] {
            let line = format!(
                "{}{{}}{}\n",
                "{\"a\":".repeat(depth - 1),
                "}".repeat(depth - 1)
            );
            let mut buf = BytesMut::from(line.as_bytes());
            let frame = JsonlDecoder::default().decode(&mut buf);
            assert_eq!(frame.as_ref().map(Frame::kind), Some("json"), "{depth}");
            let parsed = frame.unwrap().parse::<serde_json::Value>();
            assert_eq!(parsed.is_ok(), depth == 127, "{depth}");
        }
    }

    #[test]
    fn over_long_blank_line_counts_as_discarding_then_yields_no_frame() {
        let mut decoder = JsonlDecoder::new(limits(4));
        let mut buf = BytesMut::from(&b" \t \r "[..]);
        assert_eq!(decoder.decode(&mut buf), None);
        assert_eq!(decoder.discarding_bytes(), Some(5));
        buf.extend_from_slice(b"  \r\n7\n");
        assert_eq!(decoder.decode(&mut buf), Some(json("7")));
        assert_eq!(decoder.discarding_bytes(), None);
    }

    #[test]
    fn discarding_reports_progress_and_then_one_too_long() {
        let mut decoder = JsonlDecoder::new(limits(4));
        let mut buf = BytesMut::from(&b"123"[..]);
        assert_eq!(decoder.decode(&mut buf), None);
        assert_eq!(decoder.discarding_bytes(), None);
        buf.extend_from_slice(b"45678");
        assert_eq!(decoder.decode(&mut buf), None);
        assert_eq!(decoder.discarding_bytes(), Some(8));
        assert!(buf.is_empty());
        buf.extend_from_slice(b"9\r\n7\n");
        assert_eq!(decoder.decode(&mut buf), Some(too_long(9)));
        assert_eq!(decoder.discarding_bytes(), None);
        assert_eq!(decoder.decode(&mut buf), Some(json("7")));
    }

    #[test]
    fn caller_shrinking_the_buffer_does_not_panic() {
        let mut decoder = JsonlDecoder::new(Limits::default());
        let mut buf = BytesMut::from(&b"{\"partial\":"[..]);
        assert_eq!(decoder.decode(&mut buf), None);
        buf.clear();
        buf.extend_from_slice(b"2\n");
        assert_eq!(decoder.decode(&mut buf), Some(json("2")));
    }

    #[test]
    fn json_frames_share_the_read_buffer() {
        let mut decoder = JsonlDecoder::new(Limits::default());
        let mut buf = BytesMut::from(&b"[1,2,3]\n"[..]);
        let start = buf.as_ptr();
        let frame = decoder.decode(&mut buf);
        assert_eq!(
            frame
                .as_ref()
                .and_then(Frame::as_json)
                .map(|bytes| bytes.as_ptr()),
            Some(start)
        );
    }

    #[test]
    fn framing_only_skips_validation_but_keeps_limits() {
        let mut decoder = JsonlDecoder::framing_only(limits(5));
        assert_eq!(
            run(&mut decoder, &[b"banner\nhello\r\n \nnot {json\n\xff\n"]),
            [
                too_long(6),
                json("hello"),
                too_long(9),
                Frame::Json(Bytes::from_static(b"\xff"))
            ]
        );
    }

    #[test]
    fn preview_is_bounded_at_a_char_boundary() {
        let check_preview = |line: &[u8], max: usize, expect: &str| {
            let got = preview(line, max);
            assert!(got.len() <= max);
            assert_eq!(got, expect, "preview({line:?}, {max})");
        };
        check_preview(b"hello", 10, "hello");
        check_preview(b"hello", 3, "hel");
        check_preview(b"hello", 0, "");
        // "é" is 2 bytes, "€" 3 bytes: never cut inside a char.
        check_preview("aé€".as_bytes(), 2, "a");
        check_preview("aé€".as_bytes(), 3, "aé");
        check_preview("aé€".as_bytes(), 5, "aé");
        check_preview("aé€".as_bytes(), 6, "aé€");
        // Invalid bytes become U+FFFD (3 bytes) only when it fits.
        check_preview(b"ab\xffcd", 4, "ab");
        check_preview(b"ab\xffcd", 5, "ab\u{fffd}");
        check_preview(b"ab\xffcd", 6, "ab\u{fffd}c");
        check_preview(b"\xe2\x80", 8, "\u{fffd}");
    }

    #[test]
    fn preview_limit_applies_to_invalid_frames() {
        let limits = Limits {
            max_preview_bytes: 4,
            ..Limits::default()
        };
        check(limits, "ab€cdef\n".as_bytes(), &[invalid("ab", 9, false)]);
    }

    #[test]
    fn frame_parse_decodes_json_and_rejects_other_frames() {
        #[derive(Debug, PartialEq, serde::Deserialize)]
        struct Ping {
            id: u32,
        }
        assert_eq!(json("{\"id\":7}").parse::<Ping>().unwrap(), Ping { id: 7 });
        let error = json("{\"id\":\"x\"}").parse::<Ping>().unwrap_err();
        assert!(matches!(error, ParseError::Json(_)));
        assert_eq!(error.code(), "type_mismatch");
        let error = too_long(9).parse::<Ping>().unwrap_err();
        assert_eq!(error.code(), "not_json");
        assert_eq!(error.to_string(), "frame is not json but too_long");
        let error = invalid("x", 1, false).parse::<Ping>().unwrap_err();
        assert_eq!(error.to_string(), "frame is not json but invalid");
        assert_eq!(invalid("x", 1, false).as_json(), None);
    }
}
