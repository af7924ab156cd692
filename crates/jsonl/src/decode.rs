//! The sans-IO JSON Lines decoder: bytes in, [`Frame`]s out, bounded memory, linear time.

use bytes::{Buf, Bytes, BytesMut};
use serde::de::DeserializeOwned;

use crate::error::ParseError;

/// Default for [`Limits::max_line_bytes`]: 4 MiB (4 194 304 bytes).
///
/// Source: AWP agent CLI protocol, "an unbroken stdout buffer over 4 MiB terminates the runtime"
/// (`stdout_line_too_long`); DESIGN.md invariant 1.
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
/// Blank lines (empty, or only spaces, tabs and `\r`) produce no frame.
/// Nothing a peer sends makes the decoder fail: every line becomes exactly one frame or is skipped as blank.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame {
    /// One complete line holding one JSON value, e.g. `{"jsonrpc":"2.0","method":"ping"}`.
    ///
    /// The bytes are the line verbatim **without** its `\n` / `\r\n` terminator (surrounding spaces kept),
    /// split from the read buffer without copying, so relays can forward them as they came.
    /// They are valid UTF-8 and parse as exactly one JSON value (nesting depth at most 128, serde_json's
    /// recursion limit), unless the decoder was built with [`JsonlDecoder::framing_only`].
    Json(Bytes),
    /// A non-blank line that is not one JSON value: a banner, log text, invalid UTF-8, trailing garbage,
    /// or JSON truncated by EOF. Never fatal; the next line decodes normally.
    Invalid(InvalidLine),
    /// A line longer than [`Limits::max_line_bytes`]. Yielded once per over-long line, after its bytes
    /// were discarded through the next `\n` (or EOF).
    TooLong {
        /// Length of the discarded line in bytes, not counting its `\n` / `\r\n` terminator.
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
    /// Length of the whole line in bytes, not counting its `\n` / `\r\n` terminator.
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
}

/// The sans-IO JSON Lines decoder.
///
/// Feed it a [`BytesMut`] that you append reads to; call [`decode`](Self::decode) until it returns `None`
/// (it needs more bytes), and at EOF call [`decode_eof`](Self::decode_eof) until it returns `None`.
/// With the `codec` feature it is also a [`tokio_util::codec::Decoder`] (use it with `FramedRead`).
///
/// Rules (DESIGN.md invariant 1):
/// - Lines are split only on `\n`; one `\r` before it is part of the terminator.
///   U+2028/U+2029 and lone `\r` are ordinary bytes.
/// - Blank lines (empty, or only spaces, tabs and `\r`) are skipped.
/// - Each byte is scanned for `\n` once: the decoder remembers where its search stopped, so decoding is
///   linear in the input however it is split.
/// - A line over [`Limits::max_line_bytes`] is reported as one [`Frame::TooLong`] and never buffered
///   beyond `max_line_bytes + 1` bytes.
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
                buf.advance(newline + 1);
                self.discard = None;
                self.next_index = 0;
                return Some(Frame::TooLong { bytes_discarded });
            }

            let start = self.next_index.min(buf.len());
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
        if len > self.limits.max_line_bytes {
            return Some(Frame::TooLong {
                bytes_discarded: len as u64,
            });
        }
        if line
            .iter()
            .all(|&byte| matches!(byte, b' ' | b'\t' | b'\r'))
        {
            return None;
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
/// serde_json does not check UTF-8 inside strings it ignores, hence the explicit check first.
fn validate_json(line: &[u8]) -> Result<(), String> {
    let text = std::str::from_utf8(line)
        .map_err(|error| format!("invalid utf-8 at byte {}", error.valid_up_to()))?;
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
