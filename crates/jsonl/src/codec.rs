//! The tokio-util shell: `Decoder` / `Encoder` impls that delegate to the sans-IO core.

use bytes::BytesMut;
use serde::Serialize;
use tokio_util::codec::{Decoder, Encoder};

use crate::decode::{Frame, JsonlDecoder};
use crate::encode::append_line;
use crate::error::EncodeError;

/// Decodes [`Frame`]s; never returns an error of its own (peer bytes cannot make it fail),
/// so the only errors a `FramedRead` yields are read errors.
impl Decoder for JsonlDecoder {
    type Item = Frame;
    type Error = std::io::Error;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Frame>, std::io::Error> {
        Ok(JsonlDecoder::decode(self, src))
    }

    fn decode_eof(&mut self, src: &mut BytesMut) -> Result<Option<Frame>, std::io::Error> {
        Ok(JsonlDecoder::decode_eof(self, src))
    }
}

/// A tokio-util encoder writing each item as compact JSON followed by `\n` (see [`to_line`](crate::to_line)).
///
/// Use with `FramedWrite::new(writer, JsonlEncoder)`; any `T: Serialize` (including `&T`) can be sent.
/// A value that fails to encode leaves the write buffer untouched.
#[derive(Clone, Copy, Debug, Default)]
pub struct JsonlEncoder;

impl<T: Serialize> Encoder<T> for JsonlEncoder {
    type Error = EncodeError;

    fn encode(&mut self, item: T, dst: &mut BytesMut) -> Result<(), EncodeError> {
        append_line(&item, dst)
    }
}
