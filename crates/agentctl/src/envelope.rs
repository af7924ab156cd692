//! A minimal JSON-RPC envelope peek (id / method / result / error) and builders of JSON-RPC lines from raw parts.
//!
//! agentctl relays two dialects (ACP v1 and Kandev's simplified one), so it never parses a message into typed
//! protocol structs: it looks at the envelope only and forwards the bytes it was given. Raw parts
//! (`serde_json::value::RawValue`) keep ids, params and results byte-for-byte.

use std::borrow::Cow;

use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

/// What a JSON text is, as far as routing needs to know.
///
/// Source: JSON-RPC 2.0 §4 (request/notification) and §5 (response).
#[derive(Debug, Clone)]
pub enum Envelope<'a> {
    /// `{"id":…,"method":…}`: a request (the `id` may be any JSON value, `null` included).
    Request {
        /// The id, verbatim.
        id: &'a RawValue,
        /// The method name.
        method: Cow<'a, str>,
        /// The params, verbatim, if present.
        params: Option<&'a RawValue>,
    },
    /// `{"method":…}` without an id.
    Notification {
        /// The method name.
        method: Cow<'a, str>,
        /// The params, verbatim, if present.
        params: Option<&'a RawValue>,
    },
    /// `{"id":…,"result":…}` or `{"id":…,"error":…}`.
    Response {
        /// The id, verbatim (`null` for a parse-error response).
        id: &'a RawValue,
        /// `result` or `error`, verbatim.
        outcome: Outcome<'a>,
    },
    /// Valid JSON that is not a JSON-RPC message (a batch array, a bare value, missing fields, both `result`
    /// and `error`, …).
    Other,
}

/// A response's `result` or `error` member, verbatim.
#[derive(Debug, Clone)]
pub enum Outcome<'a> {
    /// `"result": …` (may be `null`).
    Result(&'a RawValue),
    /// `"error": {code, message, data?}`.
    Error(&'a RawValue),
}

/// The members routing looks at; every other member is skipped (but still validated by the parser).
#[derive(Deserialize)]
struct RawEnvelope<'a> {
    #[serde(borrow, default, deserialize_with = "present")]
    id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    method: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "present")]
    params: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    result: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    error: Option<&'a RawValue>,
}

/// `Some(raw)` whenever the member is present, `null` included (plain `Option` would turn `null` into `None`).
fn present<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue>::deserialize(deserializer).map(Some)
}

/// Classifies one JSON text (e.g. a line from the agent, without its newline).
///
/// Linear in the input; allocates only for a method name that contains escapes.
/// Anything that is not a JSON object with a recognizable shape is [`Envelope::Other`].
pub fn peek(json: &[u8]) -> Envelope<'_> {
    let Ok(raw) = serde_json::from_slice::<RawEnvelope<'_>>(json) else {
        return Envelope::Other;
    };
    match (raw.id, raw.method, raw.result, raw.error) {
        (Some(id), Some(method), None, None) => Envelope::Request {
            id,
            method,
            params: raw.params,
        },
        (None, Some(method), None, None) => Envelope::Notification {
            method,
            params: raw.params,
        },
        (Some(id), None, Some(result), None) => Envelope::Response {
            id,
            outcome: Outcome::Result(result),
        },
        (Some(id), None, None, Some(error)) => Envelope::Response {
            id,
            outcome: Outcome::Error(error),
        },
        _ => Envelope::Other,
    }
}

/// Appends `raw` (a valid JSON text) to `out` with the insignificant whitespace between tokens removed.
///
/// Everything else is kept byte-for-byte (number spelling, string escapes, member order). Used for bytes that
/// come from HTTP bodies, which may be pretty-printed: a JSON Lines message must not contain a raw newline, and
/// a newline outside a string is always insignificant whitespace.
pub fn push_compact(out: &mut Vec<u8>, raw: &str) {
    if !raw
        .bytes()
        .any(|b| matches!(b, b'\n' | b'\r' | b' ' | b'\t'))
    {
        out.extend_from_slice(raw.as_bytes());
        return;
    }
    let mut in_string = false;
    let mut escaped = false;
    for &byte in raw.as_bytes() {
        if in_string {
            out.push(byte);
            if escaped {
                escaped = false;
            } else if byte == b'\\' {
                escaped = true;
            } else if byte == b'"' {
                in_string = false;
            }
        } else if byte == b'"' {
            in_string = true;
            out.push(byte);
        } else if !matches!(byte, b'\n' | b'\r' | b' ' | b'\t') {
            out.push(byte);
        }
    }
}

/// `{"jsonrpc":"2.0","id":ID,"method":METHOD,"params":PARAMS}` (no `params` member when `None`; no `id` member when
/// `id` is `None`, i.e. a notification). No trailing newline.
pub fn request_line(id: Option<&str>, method: &str, params: Option<&RawValue>) -> Vec<u8> {
    let params_len = params.map_or(0, |p| p.get().len());
    let mut out = Vec::with_capacity(64 + method.len() + params_len);
    out.extend_from_slice(br#"{"jsonrpc":"2.0""#);
    if let Some(id) = id {
        out.extend_from_slice(br#","id":"#);
        push_compact(&mut out, id);
    }
    out.extend_from_slice(br#","method":"#);
    push_json_string(&mut out, method);
    if let Some(params) = params {
        out.extend_from_slice(br#","params":"#);
        push_compact(&mut out, params.get());
    }
    out.push(b'}');
    out
}

/// `{"jsonrpc":"2.0","id":ID,"result":RESULT}` or `…"error":ERROR}` with both parts verbatim (compacted).
pub fn response_line(id: &str, outcome: &Outcome<'_>) -> Vec<u8> {
    let (member, raw) = match outcome {
        Outcome::Result(raw) => ("result", raw.get()),
        Outcome::Error(raw) => ("error", raw.get()),
    };
    let mut out = Vec::with_capacity(48 + id.len() + raw.len());
    out.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
    push_compact(&mut out, id);
    out.extend_from_slice(b",\"");
    out.extend_from_slice(member.as_bytes());
    out.extend_from_slice(b"\":");
    push_compact(&mut out, raw);
    out.push(b'}');
    out
}

/// `{"jsonrpc":"2.0","id":ID,"result":RESULT}` for a result agentctl computed itself.
pub fn result_line(id: &str, result: &serde_json::Value) -> Vec<u8> {
    let result = serde_json::to_string(result).unwrap_or_else(|_| "null".to_owned());
    let mut out = Vec::with_capacity(48 + id.len() + result.len());
    out.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
    push_compact(&mut out, id);
    out.extend_from_slice(br#","result":"#);
    out.extend_from_slice(result.as_bytes());
    out.push(b'}');
    out
}

/// `{"jsonrpc":"2.0","id":ID,"error":{"code":CODE,"message":MESSAGE,"data":DATA}}` (no `data` when `None`).
pub fn error_line(id: &str, code: i64, message: &str, data: Option<&serde_json::Value>) -> Vec<u8> {
    #[derive(serde::Serialize)]
    struct ErrorObject<'a> {
        code: i64,
        message: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        data: Option<&'a serde_json::Value>,
    }
    let error = serde_json::to_string(&ErrorObject {
        code,
        message,
        data,
    })
    .unwrap_or_else(|_| "{}".to_owned());
    let mut out = Vec::with_capacity(48 + id.len() + error.len());
    out.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
    push_compact(&mut out, id);
    out.extend_from_slice(br#","error":"#);
    out.extend_from_slice(error.as_bytes());
    out.push(b'}');
    out
}

fn push_json_string(out: &mut Vec<u8>, value: &str) {
    // Serializing a &str cannot fail.
    if let Ok(text) = serde_json::to_string(value) {
        out.extend_from_slice(text.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A readable summary of `peek(json)`.
    fn summary(json: &str) -> String {
        match peek(json.as_bytes()) {
            Envelope::Request { id, method, params } => {
                format!(
                    "request {} {method} {}",
                    id.get(),
                    params.map_or("-", RawValue::get)
                )
            }
            Envelope::Notification { method, params } => {
                format!(
                    "notification {method} {}",
                    params.map_or("-", RawValue::get)
                )
            }
            Envelope::Response {
                id,
                outcome: Outcome::Result(r),
            } => format!("result {} {}", id.get(), r.get()),
            Envelope::Response {
                id,
                outcome: Outcome::Error(e),
            } => format!("error {} {}", id.get(), e.get()),
            Envelope::Other => "other".to_owned(),
        }
    }

    fn check(json: &str, expect: &str) {
        assert_eq!(summary(json), expect, "{json}");
    }

    #[test]
    fn peek_classifies_every_envelope_shape() {
        check(
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"a":1}}"#,
            r#"request 1 initialize {"a":1}"#,
        );
        check(r#"{"id":"x","method":"m"}"#, r#"request "x" m -"#);
        check(r#"{"id":null,"method":"m"}"#, "request null m -");
        check(
            r#"{"method":"session/update","params":[1, 2]}"#,
            "notification session/update [1, 2]",
        );
        check(r#"{"method":"a\/b"}"#, "notification a/b -");
        check(r#"{"id":7,"result":null}"#, "result 7 null");
        check(
            r#"{"id":7,"result":{"x":[1.50]}}"#,
            r#"result 7 {"x":[1.50]}"#,
        );
        check(
            r#"{"id":null,"error":{"code":-32700,"message":"parse"}}"#,
            r#"error null {"code":-32700,"message":"parse"}"#,
        );
        check(r#"{"id":1,"result":1,"error":{}}"#, "other");
        check(r#"{"result":1}"#, "other");
        check(r#"[{"id":1,"method":"m"}]"#, "other");
        check(r#""text""#, "other");
        check(
            r#"{"id":1,"method":"m","extra":{"deep":[true]}}"#,
            "request 1 m -",
        );
        check(r#"{"method":5}"#, "other");
        check(r#"{"id":1,"id":2,"method":"m"}"#, "other");
    }

    fn compact(raw: &str) -> String {
        let mut out = Vec::new();
        push_compact(&mut out, raw);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn compaction_drops_whitespace_outside_strings_only() {
        assert_eq!(
            compact("{\n  \"a\" : [1, 2.50e3],\r\n\t\"b\": \"x y\\\" \\n z\"\n}"),
            r#"{"a":[1,2.50e3],"b":"x y\" \n z"}"#
        );
        assert_eq!(compact(r#"{"k":"\\"," s":1}"#), r#"{"k":"\\"," s":1}"#);
        assert_eq!(
            compact("12345678901234567890123"),
            "12345678901234567890123"
        );
    }

    #[test]
    fn lines_are_built_from_verbatim_parts() {
        let params: Box<RawValue> = serde_json::from_str("{\n \"n\": 1.0\n}").unwrap();
        let line = request_line(Some(r#""agentctl-1""#), "session/new", Some(&params));
        assert_eq!(
            String::from_utf8(line).unwrap(),
            r#"{"jsonrpc":"2.0","id":"agentctl-1","method":"session/new","params":{"n":1.0}}"#
        );
        let line = request_line(None, "session/cancel", None);
        assert_eq!(
            String::from_utf8(line).unwrap(),
            r#"{"jsonrpc":"2.0","method":"session/cancel"}"#
        );
        let result: Box<RawValue> =
            serde_json::from_str(r#"{"outcome": {"outcome": "cancelled"}}"#).unwrap();
        let line = response_line("0", &Outcome::Result(&result));
        assert_eq!(
            String::from_utf8(line).unwrap(),
            r#"{"jsonrpc":"2.0","id":0,"result":{"outcome":{"outcome":"cancelled"}}}"#
        );
        let line = error_line(
            r#""a""#,
            -32601,
            "method not found",
            Some(&serde_json::json!({"method":"x"})),
        );
        assert_eq!(
            String::from_utf8(line).unwrap(),
            r#"{"jsonrpc":"2.0","id":"a","error":{"code":-32601,"message":"method not found","data":{"method":"x"}}}"#
        );
        let line = result_line("3", &serde_json::json!({"content":"a\nb"}));
        assert_eq!(
            String::from_utf8(line).unwrap(),
            r#"{"jsonrpc":"2.0","id":3,"result":{"content":"a\nb"}}"#
        );
    }
}
