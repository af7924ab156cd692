//! Bounded JSON Lines framing: a sans-IO decoder and encoder, with a tokio-util codec shell.
//!
//! `agentwire-jsonl` turns a byte stream into [`Frame`]s, one per line — [`Frame::Json`] (the line's raw
//! bytes, zero-copy, validated as one JSON value), [`Frame::Invalid`] (banner text, invalid UTF-8, JSON cut
//! by EOF) or [`Frame::TooLong`] (a line over [`Limits::max_line_bytes`], default 4 MiB) — and values into
//! compact JSON lines ([`to_line`], `JsonlEncoder`).
//! It is **not** a JSON-RPC or protocol layer: it knows lines and JSON values, not messages
//! (that is `agentwire-jsonrpc` and the protocol crates).
//! It does no IO: [`JsonlDecoder`] works on a [`bytes::BytesMut`] the caller fills; the optional `codec`
//! feature (on by default) implements [`tokio_util::codec::Decoder`]/`Encoder` so `FramedRead`/`FramedWrite`
//! can drive it. There is no clock, no task and no file descriptor in this crate.
//!
//! # Guarantees (invariant 1 of this repository's `docs/architecture.md`)
//!
//! - **Bounded.** No allocation on a peer's say-so: at most `max_line_bytes + 1` bytes of a line are held
//!   (plus the last read chunk); an over-long line is dropped as it streams in and reported once.
//!   Source: the AWP agent CLI protocol (`agent-cli-protocol.md`, section "Output JSONL": "an unbroken stdout
//!   buffer over 4 MiB terminates the runtime").
//! - **Never fatal.** No peer input makes decoding fail or panic; every non-blank line is one frame.
//! - **Split only on `\n`.** `\r\n` is accepted (the `\r` is part of the terminator and does not count toward
//!   the limit); U+2028/U+2029 are ordinary characters; blank and whitespace-only lines are skipped, however
//!   long (an over-long one is discarded without buffering, like any over-long line, and yields no frame).
//! - **EOF is explicit.** A final line without `\n` is still returned; if it is not JSON (truncated) it is a
//!   [`Frame::Invalid`] with `unterminated: true`, never silently dropped.
//! - **Linear time.** Every byte is searched for `\n` once, however the input is split; any split of the
//!   input yields the same frames.
//!
//! Two constructors: [`JsonlDecoder::new`] validates every line as JSON (UTF-8 + RFC 8259 grammar, via
//! serde_json, roughly 1–1.6 GiB/s, 1.6–3.9× tokio-util `LinesCodec` followed by
//! `serde_json::from_slice::<Value>` in `benches/decode.rs`); [`JsonlDecoder::framing_only`] only frames (about
//! a memchr split's speed, 10–25 GiB/s, no UTF-8 check), for relays that forward lines verbatim. A shell that must act the moment a line crosses the limit, before its newline
//! arrives, polls [`JsonlDecoder::discarding_bytes`].
//!
//! ```
//! use agentwire_jsonl::{Frame, JsonlDecoder, Limits};
//! use bytes::BytesMut;
//!
//! let mut decoder = JsonlDecoder::new(Limits::default());
//! let mut buf = BytesMut::from(&b"starting agent...\r\n{\"id\":1}\n{\"id\":"[..]);
//! assert!(matches!(decoder.decode(&mut buf), Some(Frame::Invalid(_))));
//! let frame = decoder.decode(&mut buf).unwrap();
//! assert_eq!(frame.as_json().unwrap().as_ref(), br#"{"id":1}"#);
//! assert_eq!(decoder.decode(&mut buf), None); // `{"id":` waits for more bytes
//! match decoder.decode_eof(&mut buf) {
//!     Some(Frame::Invalid(line)) => assert!(line.unterminated),
//!     other => panic!("{other:?}"),
//! }
//! ```

#![warn(missing_docs)]

mod decode;
mod encode;
mod error;

#[cfg(feature = "codec")]
mod codec;

#[cfg(feature = "codec")]
pub use codec::JsonlEncoder;
pub use decode::{
    DEFAULT_MAX_LINE_BYTES, DEFAULT_MAX_PREVIEW_BYTES, Frame, InvalidLine, JsonlDecoder, Limits,
};
pub use encode::to_line;
pub use error::{EncodeError, ParseError};
