//! Error types of the crate: one enum per failure area (typed parse of a frame, encoding a line).

/// Why [`Frame::parse`](crate::Frame::parse) failed.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum ParseError {
    /// The frame is not a [`Frame::Json`](crate::Frame::Json); `frame` is its
    /// [`Frame::kind`](crate::Frame::kind) (`"invalid"` or `"too_long"`).
    #[error("frame is not json but {frame}")]
    NotJson {
        /// The frame's kind.
        frame: &'static str,
    },
    /// The line is JSON but does not match the requested type.
    #[error("json does not match the expected type: {0}")]
    Json(#[from] serde_json::Error),
}

impl ParseError {
    /// A stable snake_case code: `not_json` or `type_mismatch`.
    pub fn code(&self) -> &'static str {
        match self {
            ParseError::NotJson { .. } => "not_json",
            ParseError::Json(_) => "type_mismatch",
        }
    }
}

/// Why a value could not be written as one JSON line ([`to_line`](crate::to_line) and `JsonlEncoder`).
///
/// Nothing is written when encoding fails: the output buffer is left as it was.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum EncodeError {
    /// serde_json could not serialize the value (for example a map with non-string keys).
    #[error("cannot serialize value as json: {0}")]
    Serialize(#[from] serde_json::Error),
    /// The serialization contains a raw `\n` byte at `offset`, which would split the line.
    /// Compact serde_json output never does; a `serde_json::value::RawValue` holding pretty JSON can.
    #[error("serialized json contains a raw newline at byte {offset}")]
    RawNewline {
        /// Byte offset of the newline in the serialized value.
        offset: usize,
    },
    /// Writing the encoded line failed (reported by the tokio `FramedWrite` shell).
    #[error("cannot write json line: {0}")]
    Io(#[from] std::io::Error),
}

impl EncodeError {
    /// A stable snake_case code: `serialize_failed`, `raw_newline` or `io`.
    pub fn code(&self) -> &'static str {
        match self {
            EncodeError::Serialize(_) => "serialize_failed",
            EncodeError::RawNewline { .. } => "raw_newline",
            EncodeError::Io(_) => "io",
        }
    }
}
