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
///
/// A typed error rather than a `debug_assert!`: compact serde_json output never holds a raw `\n`, but a
/// `serde_json::value::RawValue` is written verbatim and may, so this is reachable from caller values and must
/// not panic in debug builds.
pub(crate) fn check_no_raw_newline(json: &[u8]) -> Result<(), EncodeError> {
    match memchr::memchr(b'\n', json) {
        Some(offset) => Err(EncodeError::RawNewline { offset }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn check(value: &serde_json::Value, expect: &str) {
        let line = to_line(value).unwrap();
        assert_eq!(String::from_utf8(line).unwrap(), expect);
    }

    #[test]
    fn writes_compact_json_and_one_newline() {
        check(
            &serde_json::json!({"jsonrpc": "2.0", "method": "ping", "params": [1, "a\nb"]}),
            "{\"jsonrpc\":\"2.0\",\"method\":\"ping\",\"params\":[1,\"a\\nb\"]}\n",
        );
        // U+2028/U+2029 stay raw: they are not line separators in JSON Lines.
        check(
            &serde_json::json!("a\u{2028}b\u{2029}"),
            "\"a\u{2028}b\u{2029}\"\n",
        );
    }

    #[test]
    fn serialize_failure_is_typed() {
        let mut map = BTreeMap::new();
        map.insert(vec![1u8], 2u8);
        let error = to_line(&map).unwrap_err();
        assert!(matches!(error, EncodeError::Serialize(_)));
        assert_eq!(error.code(), "serialize_failed");
    }

    #[test]
    fn raw_newline_is_refused_with_its_offset() {
        let error = check_no_raw_newline(b"{\"a\":\n1}").unwrap_err();
        assert!(matches!(error, EncodeError::RawNewline { offset: 5 }));
        assert_eq!(error.code(), "raw_newline");
        assert_eq!(
            error.to_string(),
            "serialized json contains a raw newline at byte 5"
        );
        assert!(check_no_raw_newline(b"{\"a\":\"\\n\"}").is_ok());
    }

    #[test]
    fn io_error_code() {
        let error = EncodeError::from(std::io::Error::from(std::io::ErrorKind::BrokenPipe));
        assert_eq!(error.code(), "io");
    }

    #[cfg(feature = "codec")]
    #[test]
    fn failed_append_leaves_the_buffer_unchanged() {
        let mut out = bytes::BytesMut::from(&b"1\n"[..]);
        let mut map = BTreeMap::new();
        map.insert((1, 2), 3);
        assert!(append_line(&map, &mut out).is_err());
        assert_eq!(&out[..], b"1\n");
        append_line(&serde_json::json!({"a": [true, null]}), &mut out).unwrap();
        assert_eq!(&out[..], b"1\n{\"a\":[true,null]}\n");
    }
}
