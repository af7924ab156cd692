//! Wire envelopes: requests, responses, error bodies, stream records and cursors.
//!
//! Shapes match DeepChat's zod schemas in `src/shared/contracts/localControl.ts` exactly: camelCase field names,
//! unknown fields refused (`.strict()`), optional fields omitted when absent.
//!
//! ```json
//! {"protocolVersion":1,"surfaceVersion":2,"id":"r1","method":"cli.status","params":{}}
//! {"protocolVersion":1,"surfaceVersion":2,"id":"r1","ok":true,"result":{"running":true}}
//! {"protocolVersion":1,"surfaceVersion":2,"id":"r1","ok":false,"error":{"code":"not_found","message":"…","retriable":false}}
//! {"protocolVersion":1,"surfaceVersion":2,"sequence":0,"timestamp":1764583200000,"requestId":"r1","event":"text","data":"hi"}
//! ```

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::limits::{MAX_ERROR_MESSAGE_BYTES, PROTOCOL_VERSION, SURFACE_VERSION};

/// The `id` used in failures when the request's own id is unknown or invalid.
pub const UNKNOWN_REQUEST_ID: &str = "unknown";

/// The 15 stable error codes of the protocol, with their CLI exit codes.
///
/// Source: `LOCAL_CONTROL_ERROR_CODES` (DeepChat, surface 2 adds `result_too_large`) and `src/cli/errors.ts`
/// (`exitCodeForRemoteError`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ErrorCode {
    /// Malformed request, header, envelope or params. Exit 2.
    InvalidRequest,
    /// Protocol or surface version mismatch. Exit 3.
    UnsupportedVersion,
    /// Absent, malformed or unknown token. Exit 4.
    AuthenticationFailed,
    /// Caller or scope not allowed. Exit 4.
    PermissionDenied,
    /// The renderer refused (or no renderer was there). Exit 5.
    ApprovalDenied,
    /// Nobody decided in time. Exit 5.
    ApprovalTimeout,
    /// Unknown path, method, artifact or record. Exit 6.
    NotFound,
    /// State conflict. Exit 6.
    Conflict,
    /// Quota or concurrency limit. Exit 6.
    RateLimited,
    /// A request body over its limit. Exit 6.
    BodyTooLarge,
    /// A result over its limit. Exit 6.
    ResultTooLarge,
    /// The host is not running, stopping, or the connection died. Exit 3.
    Unavailable,
    /// Cancelled by the caller or the connection. Exit 7.
    Cancelled,
    /// A deadline passed. Exit 7.
    Timeout,
    /// A bug or protocol violation. Exit 8.
    InternalError,
}

impl ErrorCode {
    /// Every code, in the protocol's order.
    pub const ALL: [ErrorCode; 15] = [
        ErrorCode::InvalidRequest,
        ErrorCode::UnsupportedVersion,
        ErrorCode::AuthenticationFailed,
        ErrorCode::PermissionDenied,
        ErrorCode::ApprovalDenied,
        ErrorCode::ApprovalTimeout,
        ErrorCode::NotFound,
        ErrorCode::Conflict,
        ErrorCode::RateLimited,
        ErrorCode::BodyTooLarge,
        ErrorCode::ResultTooLarge,
        ErrorCode::Unavailable,
        ErrorCode::Cancelled,
        ErrorCode::Timeout,
        ErrorCode::InternalError,
    ];

    /// The wire string, e.g. `"body_too_large"`.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::InvalidRequest => "invalid_request",
            ErrorCode::UnsupportedVersion => "unsupported_version",
            ErrorCode::AuthenticationFailed => "authentication_failed",
            ErrorCode::PermissionDenied => "permission_denied",
            ErrorCode::ApprovalDenied => "approval_denied",
            ErrorCode::ApprovalTimeout => "approval_timeout",
            ErrorCode::NotFound => "not_found",
            ErrorCode::Conflict => "conflict",
            ErrorCode::RateLimited => "rate_limited",
            ErrorCode::BodyTooLarge => "body_too_large",
            ErrorCode::ResultTooLarge => "result_too_large",
            ErrorCode::Unavailable => "unavailable",
            ErrorCode::Cancelled => "cancelled",
            ErrorCode::Timeout => "timeout",
            ErrorCode::InternalError => "internal_error",
        }
    }

    /// The code for a wire string, `None` for anything else.
    pub fn parse(code: &str) -> Option<ErrorCode> {
        ErrorCode::ALL
            .into_iter()
            .find(|candidate| candidate.as_str() == code)
    }

    /// The CLI exit code: 2 usage, 3 unavailable/version, 4 auth, 5 approval, 6 domain, 7 timeout/cancel,
    /// 8 internal.
    pub fn exit_code(self) -> u8 {
        match self {
            ErrorCode::InvalidRequest => 2,
            ErrorCode::UnsupportedVersion | ErrorCode::Unavailable => 3,
            ErrorCode::AuthenticationFailed | ErrorCode::PermissionDenied => 4,
            ErrorCode::ApprovalDenied | ErrorCode::ApprovalTimeout => 5,
            ErrorCode::Cancelled | ErrorCode::Timeout => 7,
            ErrorCode::InternalError => 8,
            ErrorCode::NotFound
            | ErrorCode::Conflict
            | ErrorCode::RateLimited
            | ErrorCode::BodyTooLarge
            | ErrorCode::ResultTooLarge => 6,
        }
    }

    /// The HTTP status the server answers with for this code (DeepChat's `server.ts` choices; 400 where it sets none).
    pub fn http_status(self) -> u16 {
        match self {
            ErrorCode::InvalidRequest => 400,
            ErrorCode::AuthenticationFailed => 401,
            ErrorCode::PermissionDenied | ErrorCode::ApprovalDenied => 403,
            ErrorCode::NotFound => 404,
            ErrorCode::ApprovalTimeout | ErrorCode::Timeout => 504,
            ErrorCode::Conflict | ErrorCode::UnsupportedVersion => 409,
            ErrorCode::BodyTooLarge => 413,
            ErrorCode::RateLimited => 429,
            ErrorCode::Cancelled => 400,
            ErrorCode::Unavailable => 503,
            ErrorCode::ResultTooLarge | ErrorCode::InternalError => 500,
        }
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The `error` object of a failed response: `{code, message (1..=4096), retriable, details?}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct ErrorBody {
    /// Stable code.
    pub code: ErrorCode,
    /// Human-readable, never containing a secret; at most 4096 bytes.
    pub message: String,
    /// Whether the same request may succeed later.
    pub retriable: bool,
    /// Extra machine-readable facts (keys ≤ 128 chars).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<Map<String, Value>>,
}

impl ErrorBody {
    /// A non-retriable error; `message` is cut to 4096 bytes and replaced by the code when empty.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        let mut message = message.into();
        if message.is_empty() {
            message = code.as_str().to_owned();
        }
        truncate_on_char_boundary(&mut message, MAX_ERROR_MESSAGE_BYTES);
        ErrorBody {
            code,
            message,
            retriable: false,
            details: None,
        }
    }

    /// Sets `retriable`.
    #[must_use]
    pub fn retriable(mut self, retriable: bool) -> Self {
        self.retriable = retriable;
        self
    }

    /// Sets `details`.
    #[must_use]
    pub fn with_details(mut self, details: Map<String, Value>) -> Self {
        self.details = Some(details);
        self
    }
}

fn truncate_on_char_boundary(text: &mut String, max: usize) {
    if text.len() <= max {
        return;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
}

/// True if `id` matches `^[A-Za-z0-9._:-]{1,128}$`.
pub fn is_valid_request_id(id: &str) -> bool {
    (1..=128).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
}

/// True if `method` matches `^[a-z][A-Za-z0-9]*(\.[a-z][A-Za-z0-9]*)+$` and is 3..=128 bytes long.
pub fn is_valid_method(method: &str) -> bool {
    if !(3..=128).contains(&method.len()) {
        return false;
    }
    let mut segments = 0;
    for segment in method.split('.') {
        let mut bytes = segment.bytes();
        match bytes.next() {
            Some(first) if first.is_ascii_lowercase() => {}
            _ => return false,
        }
        if !bytes.all(|b| b.is_ascii_alphanumeric()) {
            return false;
        }
        segments += 1;
    }
    segments >= 2
}

/// A request envelope (rpc and stream bodies): `{protocolVersion, surfaceVersion, id, method, params}`.
///
/// `params` defaults to `{}` when absent, as DeepChat's schema does.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[non_exhaustive]
pub struct RequestEnvelope {
    /// Always [`PROTOCOL_VERSION`].
    pub protocol_version: u32,
    /// Always [`SURFACE_VERSION`].
    pub surface_version: u32,
    /// Caller-chosen id, see [`is_valid_request_id`].
    pub id: String,
    /// Dotted method name, see [`is_valid_method`].
    pub method: String,
    /// Method input.
    #[serde(default = "empty_object")]
    pub params: Value,
}

fn empty_object() -> Value {
    Value::Object(Map::new())
}

impl RequestEnvelope {
    /// An envelope of this build's versions.
    pub fn new(id: impl Into<String>, method: impl Into<String>, params: Value) -> Self {
        RequestEnvelope {
            protocol_version: PROTOCOL_VERSION,
            surface_version: SURFACE_VERSION,
            id: id.into(),
            method: method.into(),
            params,
        }
    }

    /// Checks the id and method patterns.
    ///
    /// # Errors
    /// `invalid_request` naming the bad field.
    pub fn validate(&self) -> Result<(), ErrorBody> {
        if !is_valid_request_id(&self.id) {
            return Err(ErrorBody::new(
                ErrorCode::InvalidRequest,
                "request id is invalid",
            ));
        }
        if !is_valid_method(&self.method) {
            return Err(ErrorBody::new(
                ErrorCode::InvalidRequest,
                "method name is invalid",
            ));
        }
        Ok(())
    }
}

/// An upload's byte binding: `{size, sha256}` (lowercase hex), checked against the received body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct UploadBinding {
    /// Body size in bytes, > 0.
    pub size: u64,
    /// Lowercase hex SHA-256 of the body.
    pub sha256: String,
}

impl UploadBinding {
    /// A binding.
    pub fn new(size: u64, sha256: impl Into<String>) -> Self {
        UploadBinding {
            size,
            sha256: sha256.into(),
        }
    }

    fn is_valid(&self) -> bool {
        self.size > 0
            && self.sha256.len() == 64
            && self
                .sha256
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    }
}

/// The envelope of an upload, sent base64url-encoded in `x-deepchat-upload-request`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[non_exhaustive]
pub struct UploadRequestEnvelope {
    /// Always [`PROTOCOL_VERSION`].
    pub protocol_version: u32,
    /// Always [`SURFACE_VERSION`].
    pub surface_version: u32,
    /// Caller-chosen id.
    pub id: String,
    /// Dotted method name.
    pub method: String,
    /// Method input.
    #[serde(default = "empty_object")]
    pub params: Value,
    /// What the body must be.
    pub upload: UploadBinding,
}

impl UploadRequestEnvelope {
    /// An envelope of this build's versions.
    pub fn new(request: RequestEnvelope, upload: UploadBinding) -> Self {
        UploadRequestEnvelope {
            protocol_version: request.protocol_version,
            surface_version: request.surface_version,
            id: request.id,
            method: request.method,
            params: request.params,
            upload,
        }
    }

    /// The request part, without the binding.
    pub fn request(&self) -> RequestEnvelope {
        RequestEnvelope {
            protocol_version: self.protocol_version,
            surface_version: self.surface_version,
            id: self.id.clone(),
            method: self.method.clone(),
            params: self.params.clone(),
        }
    }

    /// Checks id, method and binding.
    ///
    /// # Errors
    /// `invalid_request`.
    pub fn validate(&self) -> Result<(), ErrorBody> {
        self.request().validate()?;
        if !self.upload.is_valid() {
            return Err(ErrorBody::new(
                ErrorCode::InvalidRequest,
                "upload binding is invalid",
            ));
        }
        Ok(())
    }
}

/// A response envelope: success with `result`, or failure with `error`.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ResponseEnvelope {
    /// Always [`PROTOCOL_VERSION`] when sent by us.
    pub protocol_version: u32,
    /// Always [`SURFACE_VERSION`] when sent by us.
    pub surface_version: u32,
    /// The request's id, or [`UNKNOWN_REQUEST_ID`] on failures before it was known.
    pub id: String,
    /// `ok:true` + `result`, or `ok:false` + `error`.
    pub outcome: Result<Value, ErrorBody>,
}

impl ResponseEnvelope {
    /// A success of this build's versions.
    pub fn success(id: impl Into<String>, result: Value) -> Self {
        ResponseEnvelope {
            protocol_version: PROTOCOL_VERSION,
            surface_version: SURFACE_VERSION,
            id: id.into(),
            outcome: Ok(result),
        }
    }

    /// A failure of this build's versions.
    pub fn failure(id: impl Into<String>, error: ErrorBody) -> Self {
        ResponseEnvelope {
            protocol_version: PROTOCOL_VERSION,
            surface_version: SURFACE_VERSION,
            id: id.into(),
            outcome: Err(error),
        }
    }
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ResponseWire {
    protocol_version: u32,
    surface_version: u32,
    id: String,
    ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    result: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error: Option<ErrorBody>,
}

impl Serialize for ResponseEnvelope {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let (ok, result, error) = match &self.outcome {
            Ok(result) => (true, Some(result.clone()), None),
            Err(error) => (false, None, Some(error.clone())),
        };
        ResponseWire {
            protocol_version: self.protocol_version,
            surface_version: self.surface_version,
            id: self.id.clone(),
            ok,
            result,
            error,
        }
        .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for ResponseEnvelope {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        // `result` may legitimately be `null`, so its presence is read from the raw map.
        let raw = Map::<String, Value>::deserialize(deserializer)?;
        let has_result = raw.contains_key("result");
        let wire: ResponseWire =
            serde_json::from_value(Value::Object(raw)).map_err(D::Error::custom)?;
        let outcome = match (wire.ok, has_result, wire.error) {
            (true, true, None) => Ok(wire.result.unwrap_or(Value::Null)),
            (false, false, Some(error)) => Err(error),
            _ => {
                return Err(D::Error::custom(
                    "response must have ok:true+result or ok:false+error",
                ));
            }
        };
        if !is_valid_request_id(&wire.id) {
            return Err(D::Error::custom("response id is invalid"));
        }
        Ok(ResponseEnvelope {
            protocol_version: wire.protocol_version,
            surface_version: wire.surface_version,
            id: wire.id,
            outcome,
        })
    }
}

/// A stream position `<incarnation>:<offset>`, `^[A-Za-z0-9_-]+:(0|[1-9][0-9]*)$`: the offset of the last event
/// seen (0 = none). The one cursor type: the event hub hands these out and parses clients' with
/// [`crate::hub::parse_cursor`] (which adds its 256-byte bound).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Cursor {
    text: String,
    split: usize,
}

impl Cursor {
    /// A cursor from its parts; `incarnation` must be non-empty base64url characters.
    pub fn new(incarnation: &str, offset: u64) -> Option<Cursor> {
        Cursor::parse(&format!("{incarnation}:{offset}"))
    }

    /// Parses the wire form.
    pub fn parse(text: &str) -> Option<Cursor> {
        let (incarnation, offset) = text.split_once(':')?;
        let incarnation_ok = !incarnation.is_empty()
            && incarnation
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        let offset_ok = offset == "0"
            || (!offset.is_empty()
                && !offset.starts_with('0')
                && offset.bytes().all(|b| b.is_ascii_digit())
                && offset.parse::<u64>().is_ok());
        (incarnation_ok && offset_ok).then(|| Cursor {
            text: text.to_owned(),
            split: incarnation.len(),
        })
    }

    /// The stream incarnation.
    pub fn incarnation(&self) -> &str {
        &self.text[..self.split]
    }

    /// The offset within the incarnation.
    pub fn offset(&self) -> u64 {
        self.text[self.split + 1..].parse().unwrap_or(0)
    }

    /// The wire form.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// A cursor from parts the caller has already validated (the event hub checks its incarnation when it is
    /// built); no parsing.
    pub(crate) fn from_valid_parts(incarnation: &str, offset: u64) -> Cursor {
        Cursor {
            text: format!("{incarnation}:{offset}"),
            split: incarnation.len(),
        }
    }
}

impl std::fmt::Display for Cursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

impl TryFrom<String> for Cursor {
    type Error = String;
    fn try_from(text: String) -> Result<Self, Self::Error> {
        Cursor::parse(&text).ok_or_else(|| "cursor is invalid".to_owned())
    }
}

impl From<Cursor> for String {
    fn from(cursor: Cursor) -> String {
        cursor.text
    }
}

/// One event line of a stream:
/// `{protocolVersion, surfaceVersion, sequence, timestamp, requestId?, runId?, cursor?, event, data}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[non_exhaustive]
pub struct StreamRecord {
    /// Always [`PROTOCOL_VERSION`].
    pub protocol_version: u32,
    /// Always [`SURFACE_VERSION`].
    pub surface_version: u32,
    /// 0, 1, 2, … within one response.
    pub sequence: u64,
    /// Unix time in milliseconds.
    pub timestamp: u64,
    /// The request this record answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// The run it belongs to (1..=128 chars).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// Resume position.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<Cursor>,
    /// Event name (1..=128 chars).
    pub event: String,
    /// Event payload.
    pub data: Value,
}

impl StreamRecord {
    /// Checks the string bounds of the schema.
    pub fn is_valid(&self) -> bool {
        (1..=128).contains(&self.event.len())
            && self.request_id.as_deref().is_none_or(is_valid_request_id)
            && self
                .run_id
                .as_deref()
                .is_none_or(|run| (1..=128).contains(&run.len()))
    }
}

/// One NDJSON line of a `/v1/stream` response: an event, or the terminal response (the line with `ok`).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum StreamLine {
    /// An event record.
    Event(StreamRecord),
    /// The last line.
    Terminal(ResponseEnvelope),
}

impl StreamLine {
    /// Parses one line (without its newline).
    ///
    /// # Errors
    /// A message saying what is wrong with the line.
    pub fn parse(line: &[u8]) -> Result<StreamLine, String> {
        let value: Value =
            serde_json::from_slice(line).map_err(|_| "stream line is not json".to_owned())?;
        let is_terminal = value
            .as_object()
            .is_some_and(|object| object.contains_key("ok"));
        if is_terminal {
            serde_json::from_value(value)
                .map(StreamLine::Terminal)
                .map_err(|_| "stream terminal record is not a response envelope".to_owned())
        } else {
            let record: StreamRecord = serde_json::from_value(value)
                .map_err(|_| "stream record has an invalid shape".to_owned())?;
            if !record.is_valid() {
                return Err("stream record has an invalid field".to_owned());
            }
            Ok(StreamLine::Event(record))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_request_with_a_long_float_round_trips_exactly() {
        // Found by the `local_control` fuzz target: without serde_json's `float_roundtrip`, a 103-digit number
        // parsed to one double and its re-serialization parsed to the neighbouring one.
        let line = format!(
            r#"{{"protocolVersion":1,"surfaceVersion":2,"id":"r1","method":"cli.status","params":{{"x":{}}}}}"#,
            "1".to_owned() + &"3".repeat(102)
        );
        let first: RequestEnvelope = serde_json::from_str(&line).expect("parses");
        let again: RequestEnvelope =
            serde_json::from_slice(&serde_json::to_vec(&first).expect("serializes"))
                .expect("parses");
        assert_eq!(first, again);
    }

    #[test]
    fn error_codes_round_trip_and_map_to_the_cli_exit_table() {
        let expected = [
            ("invalid_request", 2),
            ("unsupported_version", 3),
            ("authentication_failed", 4),
            ("permission_denied", 4),
            ("approval_denied", 5),
            ("approval_timeout", 5),
            ("not_found", 6),
            ("conflict", 6),
            ("rate_limited", 6),
            ("body_too_large", 6),
            ("result_too_large", 6),
            ("unavailable", 3),
            ("cancelled", 7),
            ("timeout", 7),
            ("internal_error", 8),
        ];
        for (code, (text, exit)) in ErrorCode::ALL.iter().zip(expected) {
            assert_eq!(code.as_str(), text);
            assert_eq!(code.exit_code(), exit, "{text}");
            assert_eq!(ErrorCode::parse(text), Some(*code));
            assert_eq!(serde_json::to_value(code).unwrap(), json!(text));
        }
        assert_eq!(ErrorCode::parse("nope"), None);
    }

    #[test]
    fn request_id_and_method_patterns() {
        for id in ["a", "r-1.x:y_z", &"a".repeat(128)] {
            assert!(is_valid_request_id(id), "{id}");
        }
        for id in ["", "a b", "a/b", &"a".repeat(129)] {
            assert!(!is_valid_request_id(id), "{id}");
        }
        for method in ["cli.status", "models.listPublic", "a.b.c1"] {
            assert!(is_valid_method(method), "{method}");
        }
        for method in [
            "cli",
            "Cli.status",
            "cli.",
            ".cli",
            "cli.Status",
            "cli..x",
            "cli.st-atus",
        ] {
            assert!(!is_valid_method(method), "{method}");
        }
    }

    #[test]
    fn request_envelope_defaults_params_and_refuses_unknown_fields() {
        let parsed: RequestEnvelope = serde_json::from_value(
            json!({"protocolVersion":1,"surfaceVersion":2,"id":"r","method":"cli.status"}),
        )
        .unwrap();
        assert_eq!(parsed.params, json!({}));
        let extra = json!({"protocolVersion":1,"surfaceVersion":2,"id":"r","method":"a.b","params":{},"x":1});
        assert!(serde_json::from_value::<RequestEnvelope>(extra).is_err());
    }

    #[test]
    fn response_envelope_wire_shapes() {
        let ok = ResponseEnvelope::success("r1", json!(null));
        let text = serde_json::to_value(&ok).unwrap();
        assert_eq!(
            text,
            json!({"protocolVersion":1,"surfaceVersion":2,"id":"r1","ok":true,"result":null})
        );
        assert_eq!(
            serde_json::from_value::<ResponseEnvelope>(text).unwrap(),
            ok
        );

        let failed =
            ResponseEnvelope::failure("r1", ErrorBody::new(ErrorCode::NotFound, "no such method"));
        let text = serde_json::to_value(&failed).unwrap();
        assert_eq!(
            text,
            json!({"protocolVersion":1,"surfaceVersion":2,"id":"r1","ok":false,
                   "error":{"code":"not_found","message":"no such method","retriable":false}})
        );
        assert_eq!(
            serde_json::from_value::<ResponseEnvelope>(text).unwrap(),
            failed
        );

        let mixed = json!({"protocolVersion":1,"surfaceVersion":2,"id":"r1","ok":true,"error":{"code":"timeout","message":"m","retriable":true}});
        assert!(serde_json::from_value::<ResponseEnvelope>(mixed).is_err());
    }

    #[test]
    fn error_message_is_cut_to_4096_bytes_on_a_char_boundary() {
        let body = ErrorBody::new(ErrorCode::InternalError, "é".repeat(3000));
        assert!(body.message.len() <= 4096);
        assert!(body.message.len() >= 4095);
        assert_eq!(ErrorBody::new(ErrorCode::Timeout, "").message, "timeout");
    }

    #[test]
    fn cursor_pattern() {
        let cursor = Cursor::parse("abc_-1:42").unwrap();
        assert_eq!((cursor.incarnation(), cursor.offset()), ("abc_-1", 42));
        assert!(Cursor::parse("a:0").is_some());
        for bad in [
            "a:01",
            ":1",
            "a:",
            "a:-1",
            "a b:1",
            "a:1:2",
            "a:99999999999999999999999",
        ] {
            assert!(Cursor::parse(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn stream_lines_split_into_events_and_terminal() {
        let event = br#"{"protocolVersion":1,"surfaceVersion":2,"sequence":0,"timestamp":5,"requestId":"r","cursor":"s:0","event":"text","data":"hi"}"#;
        match StreamLine::parse(event).unwrap() {
            StreamLine::Event(record) => assert_eq!(record.cursor.unwrap().as_str(), "s:0"),
            StreamLine::Terminal(_) => panic!("not terminal"),
        }
        let terminal = br#"{"protocolVersion":1,"surfaceVersion":2,"id":"r","ok":true,"result":1}"#;
        assert!(matches!(
            StreamLine::parse(terminal).unwrap(),
            StreamLine::Terminal(_)
        ));
        assert!(StreamLine::parse(br#"{"protocolVersion":1,"surfaceVersion":2,"sequence":0,"timestamp":5,"event":"","data":1}"#).is_err());
    }
}
