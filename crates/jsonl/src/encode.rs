//! Encoding values as JSON lines: compact JSON followed by one `\n`.

use serde::Serialize;

use crate::error::EncodeError;

/// Serializes `value` as compact JSON followed by `\n`, e.g. `{"jsonrpc":"2.0","method":"ping"}\n`.
///
/// # Errors
/// [`EncodeError::Serialize`] when serde_json rejects the value;
/// [`EncodeError::RawNewline`] when the serialization would contain a raw `\n` (only possible through
/// `serde_json::value::RawValue`), since that would split the line.
pub fn to_line<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, EncodeError> {
    let mut line = serde_json::to_vec(value)?;
    check_no_raw_newline(&line)?;
    line.push(b'\n');
    Ok(line)
}

#[cfg(feature = "codec")]
/// Appends `value` as one JSON line to `out`; on error `out` is left unchanged.
pub(crate) fn append_line<T: Serialize + ?Sized>(
    value: &T,
    out: &mut bytes::BytesMut,
) -> Result<(), EncodeError> {
    use bytes::BufMut;
    let start = out.len();
    let written = serde_json::to_writer((&mut *out).writer(), value)
        .map_err(EncodeError::from)
        .and_then(|()| check_no_raw_newline(out.get(start..).unwrap_or_default()));
    match written {
        Ok(()) => {
            out.put_u8(b'\n');
            Ok(())
        }
        Err(error) => {
            out.truncate(start);
            Err(error)
        }
    }
}

/// One SIMD `memchr` pass: cheap next to serialization.
pub(crate) fn check_no_raw_newline(json: &[u8]) -> Result<(), EncodeError> {
    match memchr::memchr(b'\n', json) {
        Some(offset) => Err(EncodeError::RawNewline { offset }),
        None => Ok(()),
    }
}
