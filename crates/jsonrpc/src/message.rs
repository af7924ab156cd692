//! JSON-RPC 2.0 wire types: ids, error objects, requests, notifications, responses, strict parsing.
//!
//! Source: <https://www.jsonrpc.org/specification> sections 4 (Request object), 4.1 (Notification), 5 (Response
//! object) and 5.1 (Error object); the request-cancelled code -32800 is LSP's, adopted by ACP (`$/cancel_request`).

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, Deserializer, Visitor};
use serde::ser::{SerializeStruct, Serializer};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The value of every message's `"jsonrpc"` member.
pub const JSONRPC_VERSION: &str = "2.0";

/// A request id: a JSON number (integer) or string.
///
/// JSON: `1` or `"req-1"`.
/// `null` is not a `RequestId`: it appears only as the id of a response to a message whose id could not be read
/// (see [`Response::id`]).
/// Only integers written as plain JSON integers in the `i64` range are accepted as numbers: fractions (`1.5`),
/// exponent forms (`1e2`, even when integral), `-0` and integers outside the `i64` range are rejected with
/// -32600 and the reason "request id must be an integer in the i64 range or a string" (spec section 4 says
/// numbers SHOULD NOT contain fractional parts; we make it a MUST so that ids compare exactly, and `-0` is
/// rejected rather than read as `0` because a peer comparing ids by their text would not match `0` to it).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RequestId {
    /// `1`
    Number(i64),
    /// `"abc"`
    String(String),
}

impl fmt::Display for RequestId {
    /// The JSON form: `7` or `"abc"` (quoted, escaped).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RequestId::Number(n) => write!(f, "{n}"),
            RequestId::String(s) => write!(f, "{}", Value::String(s.clone())),
        }
    }
}

impl From<i64> for RequestId {
    fn from(n: i64) -> Self {
        RequestId::Number(n)
    }
}

impl From<String> for RequestId {
    fn from(s: String) -> Self {
        RequestId::String(s)
    }
}

impl From<&str> for RequestId {
    fn from(s: &str) -> Self {
        RequestId::String(s.to_owned())
    }
}

impl Serialize for RequestId {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            RequestId::Number(n) => serializer.serialize_i64(*n),
            RequestId::String(s) => serializer.serialize_str(s),
        }
    }
}

impl<'de> Deserialize<'de> for RequestId {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct IdVisitor;
        impl Visitor<'_> for IdVisitor {
            type Value = RequestId;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(ID_RULE)
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<RequestId, E> {
                Ok(RequestId::Number(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<RequestId, E> {
                i64::try_from(v)
                    .map(RequestId::Number)
                    .map_err(|_| E::custom(ID_RULE))
            }
            // serde_json reads fractions, exponent forms and `-0` as floats.
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<RequestId, E> {
                Err(E::custom(ID_RULE))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<RequestId, E> {
                Ok(RequestId::String(v.to_owned()))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<RequestId, E> {
                Ok(RequestId::String(v))
            }
        }
        deserializer.deserialize_any(IdVisitor)
    }
}

/// Why a request id was rejected.
const ID_RULE: &str =
    "request id must be an integer in the i64 range (no fraction, exponent or -0) or a string";

/// A JSON-RPC error code. Open: any `i32` round-trips, the constants name the ones we act on.
///
/// JSON: `-32601`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ErrorCode(pub i32);

impl ErrorCode {
    /// -32700: the line is not JSON (spec 5.1).
    pub const PARSE_ERROR: ErrorCode = ErrorCode(-32700);
    /// -32600: the JSON is not a valid request object (spec 5.1); also our answer to batches.
    pub const INVALID_REQUEST: ErrorCode = ErrorCode(-32600);
    /// -32601: the method does not exist or is not available (spec 5.1).
    pub const METHOD_NOT_FOUND: ErrorCode = ErrorCode(-32601);
    /// -32602: invalid method parameters (spec 5.1).
    pub const INVALID_PARAMS: ErrorCode = ErrorCode(-32602);
    /// -32603: internal error (spec 5.1); also the answer of a dropped responder and of a busy connection.
    pub const INTERNAL_ERROR: ErrorCode = ErrorCode(-32603);
    /// -32800: the request was cancelled (LSP / ACP `$/cancel_request`).
    pub const REQUEST_CANCELLED: ErrorCode = ErrorCode(-32800);

    /// A stable snake_case name for the known codes (`"method_not_found"`), `None` for others.
    pub fn name(self) -> Option<&'static str> {
        Some(match self {
            ErrorCode::PARSE_ERROR => "parse_error",
            ErrorCode::INVALID_REQUEST => "invalid_request",
            ErrorCode::METHOD_NOT_FOUND => "method_not_found",
            ErrorCode::INVALID_PARAMS => "invalid_params",
            ErrorCode::INTERNAL_ERROR => "internal_error",
            ErrorCode::REQUEST_CANCELLED => "request_cancelled",
            _ => return None,
        })
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// The `error` member of an error response (spec 5.1).
///
/// JSON: `{"code":-32601,"message":"method not found","data":{"method":"x"}}` (`data` optional).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, thiserror::Error)]
#[error("json-rpc error {code}: {message}")]
pub struct ErrorObject {
    /// The error code; unknown codes are kept as they are.
    pub code: ErrorCode,
    /// A short description.
    pub message: String,
    /// Extra information, omitted from the JSON when `None`; `"data": null` is kept as `Some(Value::Null)`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub data: Option<Value>,
}

impl ErrorObject {
    /// An error object without `data`.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ErrorObject {
            code,
            message: message.into(),
            data: None,
        }
    }

    /// Sets `data`.
    #[must_use]
    pub fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }

    /// -32700 with the given message.
    pub fn parse_error(message: impl Into<String>) -> Self {
        ErrorObject::new(ErrorCode::PARSE_ERROR, message)
    }

    /// -32600 with the given message.
    pub fn invalid_request(message: impl Into<String>) -> Self {
        ErrorObject::new(ErrorCode::INVALID_REQUEST, message)
    }

    /// -32601 `"method not found"` with `data: {"method": …}`.
    pub fn method_not_found(method: &str) -> Self {
        ErrorObject::new(ErrorCode::METHOD_NOT_FOUND, "method not found")
            .with_data(serde_json::json!({ "method": method }))
    }

    /// -32602 with the given message.
    pub fn invalid_params(message: impl Into<String>) -> Self {
        ErrorObject::new(ErrorCode::INVALID_PARAMS, message)
    }

    /// -32603 with the given message.
    pub fn internal_error(message: impl Into<String>) -> Self {
        ErrorObject::new(ErrorCode::INTERNAL_ERROR, message)
    }

    /// -32800 `"request cancelled"`.
    pub fn request_cancelled() -> Self {
        ErrorObject::new(ErrorCode::REQUEST_CANCELLED, "request cancelled")
    }
}

/// A request: a call that expects exactly one response with the same id (spec 4).
///
/// JSON: `{"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"/w","mcpServers":[]}}`.
#[derive(Clone, Debug, PartialEq)]
pub struct Request {
    /// The id the response must carry.
    pub id: RequestId,
    /// The method name.
    pub method: String,
    /// The parameters (an object or an array); `None` when absent (or `null`, which we tolerate as absent).
    pub params: Option<Value>,
}

impl Request {
    /// A request.
    pub fn new(id: impl Into<RequestId>, method: impl Into<String>, params: Option<Value>) -> Self {
        Request {
            id: id.into(),
            method: method.into(),
            params,
        }
    }
}

/// A notification: a request without an id, never answered (spec 4.1).
///
/// JSON: `{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{}}}`.
#[derive(Clone, Debug, PartialEq)]
pub struct Notification {
    /// The method name.
    pub method: String,
    /// The parameters (an object or an array); `None` when absent (or `null`).
    pub params: Option<Value>,
}

impl Notification {
    /// A notification.
    pub fn new(method: impl Into<String>, params: Option<Value>) -> Self {
        Notification {
            method: method.into(),
            params,
        }
    }
}

/// A response: exactly one of `result` and `error` (spec 5).
///
/// JSON: `{"jsonrpc":"2.0","id":1,"result":{}}` or
/// `{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error"}}`.
#[derive(Clone, Debug, PartialEq)]
pub struct Response {
    /// The id of the request answered; `None` is JSON `null`, allowed only with an error (the request's id could not
    /// be read: parse error or invalid request).
    pub id: Option<RequestId>,
    /// `Ok` is the `result` member (any JSON value, `null` included), `Err` the `error` member.
    pub result: Result<Value, ErrorObject>,
}

impl Response {
    /// A success response.
    pub fn ok(id: RequestId, result: Value) -> Self {
        Response {
            id: Some(id),
            result: Ok(result),
        }
    }

    /// An error response; `id: None` serializes as `"id":null`.
    pub fn error(id: Option<RequestId>, error: ErrorObject) -> Self {
        Response {
            id,
            result: Err(error),
        }
    }
}

/// Any JSON-RPC 2.0 message. Serializes with `"jsonrpc":"2.0"`; deserializing is strict (see [`Message::from_slice`]).
#[derive(Clone, Debug, PartialEq)]
pub enum Message {
    /// `{"jsonrpc":"2.0","id":1,"method":"m","params":{}}`
    Request(Request),
    /// `{"jsonrpc":"2.0","method":"m","params":{}}`
    Notification(Notification),
    /// `{"jsonrpc":"2.0","id":1,"result":{}}`
    Response(Response),
}

impl From<Request> for Message {
    fn from(r: Request) -> Self {
        Message::Request(r)
    }
}

impl From<Notification> for Message {
    fn from(n: Notification) -> Self {
        Message::Notification(n)
    }
}

impl From<Response> for Message {
    fn from(r: Response) -> Self {
        Message::Response(r)
    }
}

/// Why a JSON text is not a valid JSON-RPC 2.0 message, with what the answer to it must be.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
#[error("invalid json-rpc message: {reason}")]
pub struct InvalidMessage {
    /// [`ErrorCode::PARSE_ERROR`] (not JSON) or [`ErrorCode::INVALID_REQUEST`] (JSON, but not a valid message).
    pub code: ErrorCode,
    /// The message's id when it could be read, for the error answer (`None` answers with `"id":null`).
    pub id: Option<RequestId>,
    /// `true` when the text looks like a response (no `method`, has `result` or `error`). Such a message is never
    /// answered: answering an invalid response could make two peers exchange error responses forever.
    pub response_like: bool,
    /// `true` for a batch (a JSON array). Batches are not supported (see the crate docs).
    pub batch: bool,
    /// `true` when the message has a `method` and also `result` or `error`: a broken request or a broken
    /// response. It is answered as an invalid request, and a [`Connection`](crate::Connection) also fails its own
    /// pending call with this id, if any, with [`CallError::InvalidResponse`](crate::CallError::InvalidResponse).
    pub ambiguous: bool,
    /// What is wrong, lowercase.
    pub reason: String,
}

impl InvalidMessage {
    /// The error response this message deserves, or `None` when it must not be answered (response-like).
    pub fn answer(&self) -> Option<Response> {
        if self.response_like {
            return None;
        }
        let message = match self.code {
            ErrorCode::PARSE_ERROR => "parse error",
            _ if self.batch => "batch requests are not supported",
            _ => "invalid request",
        };
        let error = ErrorObject::new(self.code, message)
            .with_data(serde_json::json!({ "reason": self.reason }));
        Some(Response::error(self.id.clone(), error))
    }
}

/// The fast path: one pass of serde over the line into borrowed/owned fields, validated after.
#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(borrow, default)]
    jsonrpc: Option<Cow<'a, str>>,
    /// `Some(None)` is `"id": null`.
    #[serde(default, deserialize_with = "present")]
    id: Option<Option<RequestId>>,
    #[serde(default)]
    method: Option<String>,
    /// `Some(Value::Null)` is `"params": null`.
    #[serde(default, deserialize_with = "present")]
    params: Option<Value>,
    /// `Some(Value::Null)` is `"result": null` (a valid result).
    #[serde(default, deserialize_with = "present")]
    result: Option<Value>,
    /// Present-aware so that `"error": null` is invalid rather than absent.
    #[serde(default, deserialize_with = "present")]
    error: Option<ErrorObject>,
}

fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

impl Message {
    /// Parses one JSON text (one line, without the newline) strictly.
    ///
    /// Rules: the text is one JSON object (an array is a batch: rejected); `"jsonrpc"` is exactly `"2.0"`;
    /// a request has a string `method` and a non-null id; a notification has a `method` and no `id`; a response has
    /// an `id` and exactly one of `result`/`error`, and `"id": null` only with an `error`; `params`, when present,
    /// is an object or an array (`"params": null` is tolerated as absent: some peers emit it for "no params").
    /// Unknown members are ignored. A member of the wrong kind for the message (`params` on a response, `result` on
    /// a request) is invalid.
    ///
    /// # Errors
    ///
    /// [`InvalidMessage`] with code -32700 when the text is not JSON, -32600 otherwise, carrying the id when it could
    /// be read.
    pub fn from_slice(text: &[u8]) -> Result<Message, InvalidMessage> {
        // serde's derived struct visitor also accepts a JSON array (fields by position): rule arrays out first.
        if text.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[') {
            return Err(diagnose(text, None));
        }
        match serde_json::from_slice::<Envelope<'_>>(text) {
            Ok(envelope) => envelope.validate(),
            Err(error) => Err(diagnose(text, Some(&error))),
        }
    }

    /// Serializes as one compact JSON line terminated by `"\n"` (agentwire-jsonl's encoder).
    ///
    /// # Errors
    ///
    /// [`agentwire_jsonl::EncodeError`] when serde_json fails, which our types never make it do.
    pub fn to_line(&self) -> Result<Vec<u8>, agentwire_jsonl::EncodeError> {
        agentwire_jsonl::to_line(self)
    }
}

impl Envelope<'_> {
    fn validate(self) -> Result<Message, InvalidMessage> {
        let response_like =
            self.method.is_none() && (self.result.is_some() || self.error.is_some());
        let ambiguous = self.method.is_some() && (self.result.is_some() || self.error.is_some());
        // The id is cloned only on the error paths.
        let invalid = |id: Option<&RequestId>, reason: &str| InvalidMessage {
            code: ErrorCode::INVALID_REQUEST,
            id: id.cloned(),
            response_like,
            batch: false,
            ambiguous,
            reason: reason.to_owned(),
        };
        let id = self.id;
        match self.jsonrpc.as_deref() {
            Some(JSONRPC_VERSION) => {}
            Some(_) => return Err(invalid(flat_id(&id), "\"jsonrpc\" must be \"2.0\"")),
            None => return Err(invalid(flat_id(&id), "missing \"jsonrpc\":\"2.0\"")),
        }
        let params = match self.params {
            None | Some(Value::Null) => None,
            Some(p @ (Value::Object(_) | Value::Array(_))) => Some(p),
            Some(_) => {
                return Err(invalid(
                    flat_id(&id),
                    "\"params\" must be an object or an array",
                ));
            }
        };
        if let Some(method) = self.method {
            if self.result.is_some() || self.error.is_some() {
                return Err(invalid(
                    flat_id(&id),
                    "a request must not carry \"result\" or \"error\"",
                ));
            }
            return match id {
                None => Ok(Message::Notification(Notification { method, params })),
                Some(None) => Err(invalid(None, "a request id must not be null")),
                Some(Some(id)) => Ok(Message::Request(Request { id, method, params })),
            };
        }
        let Some(id) = id else {
            return Err(invalid(None, "neither \"method\" nor \"id\""));
        };
        if params.is_some() {
            return Err(invalid(id.as_ref(), "a response must not carry \"params\""));
        }
        let result = match (self.result, self.error) {
            (Some(_), Some(_)) => {
                return Err(invalid(
                    id.as_ref(),
                    "a response must not carry both \"result\" and \"error\"",
                ));
            }
            (None, None) => {
                return Err(invalid(
                    id.as_ref(),
                    "a response needs \"result\" or \"error\"",
                ));
            }
            (Some(result), None) => Ok(result),
            (None, Some(error)) => Err(error),
        };
        if id.is_none() && result.is_ok() {
            return Err(invalid(None, "a success response must not have a null id"));
        }
        Ok(Message::Response(Response { id, result }))
    }
}

fn flat_id(id: &Option<Option<RequestId>>) -> Option<&RequestId> {
    id.as_ref().and_then(Option::as_ref)
}

/// The slow path, only for text that failed the fast path: find out what the text was and recover its id.
fn diagnose(text: &[u8], error: Option<&serde_json::Error>) -> InvalidMessage {
    let first = text.iter().find(|b| !b.is_ascii_whitespace()).copied();
    let value: Value = match serde_json::from_slice(text) {
        Ok(value) => value,
        Err(parse) => return diagnose_unreadable(text, &parse),
    };
    if first == Some(b'[') {
        return InvalidMessage {
            code: ErrorCode::INVALID_REQUEST,
            id: None,
            response_like: false,
            batch: true,
            ambiguous: false,
            reason: "batch requests are not supported".to_owned(),
        };
    }
    let Value::Object(map) = value else {
        return InvalidMessage {
            code: ErrorCode::INVALID_REQUEST,
            id: None,
            response_like: false,
            batch: false,
            ambiguous: false,
            reason: "a message must be a json object".to_owned(),
        };
    };
    let id = map.get("id").and_then(|id| RequestId::deserialize(id).ok());
    let answer_like = map.contains_key("result") || map.contains_key("error");
    InvalidMessage {
        code: ErrorCode::INVALID_REQUEST,
        id,
        response_like: !map.contains_key("method") && answer_like,
        batch: false,
        ambiguous: map.contains_key("method") && answer_like,
        reason: error.map_or_else(
            || "invalid request".to_owned(),
            |e| lowercase_first(&e.to_string()),
        ),
    }
}

/// The members of a message that decide how it is answered, read without building values: skipping a value
/// (`IgnoredAny`) has no nesting limit and does not decode strings.
#[derive(Deserialize)]
struct Probe {
    #[serde(default)]
    id: Option<RequestId>,
    #[serde(default, deserialize_with = "present")]
    method: Option<de::IgnoredAny>,
    #[serde(default, deserialize_with = "present")]
    result: Option<de::IgnoredAny>,
    #[serde(default, deserialize_with = "present")]
    error: Option<de::IgnoredAny>,
}

/// Text that `Value` cannot hold. When it is still valid JSON grammar (a lone surrogate escape such as
/// `"\ud800"`, or nesting past serde_json's recursion limit of 128) it is an invalid request (-32600), with its id
/// when readable; otherwise it is not JSON (-32700).
fn diagnose_unreadable(text: &[u8], parse: &serde_json::Error) -> InvalidMessage {
    let reason = lowercase_first(&parse.to_string());
    if serde_json::from_slice::<de::IgnoredAny>(text).is_err() {
        return InvalidMessage {
            code: ErrorCode::PARSE_ERROR,
            id: None,
            response_like: false,
            batch: false,
            ambiguous: false,
            reason,
        };
    }
    let probe = serde_json::from_slice::<Probe>(text).ok();
    let has = |member: fn(&Probe) -> bool| probe.as_ref().is_some_and(member);
    let answer_like = has(|p| p.result.is_some() || p.error.is_some());
    let batch = text.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[');
    InvalidMessage {
        code: ErrorCode::INVALID_REQUEST,
        id: probe.as_ref().and_then(|p| p.id.clone()),
        response_like: !batch && !has(|p| p.method.is_some()) && answer_like,
        batch,
        ambiguous: has(|p| p.method.is_some()) && answer_like,
        reason: if batch {
            "batch requests are not supported".to_owned()
        } else {
            format!("valid json that cannot be read as a message: {reason}")
        },
    }
}

/// Lowercases the first letter of an error text from serde_json, unless it starts an acronym (`EOF while…`).
fn lowercase_first(s: &str) -> String {
    let mut chars = s.chars();
    match (chars.next(), chars.next()) {
        (Some(first), second) if !second.is_some_and(char::is_uppercase) => {
            first.to_lowercase().chain(s.chars().skip(1)).collect()
        }
        _ => s.to_owned(),
    }
}

// ---- serialization (borrowing, so that outgoing messages are written without cloning params) ----

/// `{"jsonrpc":"2.0","id":…,"method":…,"params":…}` borrowing its parts.
pub(crate) struct RequestRef<'a> {
    pub(crate) id: &'a RequestId,
    pub(crate) method: &'a str,
    pub(crate) params: Option<&'a Value>,
}

impl Serialize for RequestRef<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut st = s.serialize_struct("Request", 4)?;
        st.serialize_field("jsonrpc", JSONRPC_VERSION)?;
        st.serialize_field("id", self.id)?;
        st.serialize_field("method", self.method)?;
        if let Some(params) = self.params {
            st.serialize_field("params", params)?;
        }
        st.end()
    }
}

/// `{"jsonrpc":"2.0","method":…,"params":…}` borrowing its parts.
pub(crate) struct NotificationRef<'a> {
    pub(crate) method: &'a str,
    pub(crate) params: Option<&'a Value>,
}

impl Serialize for NotificationRef<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut st = s.serialize_struct("Notification", 3)?;
        st.serialize_field("jsonrpc", JSONRPC_VERSION)?;
        st.serialize_field("method", self.method)?;
        if let Some(params) = self.params {
            st.serialize_field("params", params)?;
        }
        st.end()
    }
}

/// `{"jsonrpc":"2.0","id":…,"result":…}` / `{…,"error":…}` borrowing its parts.
pub(crate) struct ResponseRef<'a> {
    pub(crate) id: Option<&'a RequestId>,
    pub(crate) result: Result<&'a Value, &'a ErrorObject>,
}

impl Serialize for ResponseRef<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut st = s.serialize_struct("Response", 3)?;
        st.serialize_field("jsonrpc", JSONRPC_VERSION)?;
        st.serialize_field("id", &self.id)?;
        match self.result {
            Ok(result) => st.serialize_field("result", result)?,
            Err(error) => st.serialize_field("error", error)?,
        }
        st.end()
    }
}

impl Serialize for Request {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        RequestRef {
            id: &self.id,
            method: &self.method,
            params: self.params.as_ref(),
        }
        .serialize(s)
    }
}

impl Serialize for Notification {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        NotificationRef {
            method: &self.method,
            params: self.params.as_ref(),
        }
        .serialize(s)
    }
}

impl Serialize for Response {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        ResponseRef {
            id: self.id.as_ref(),
            result: self.result.as_ref(),
        }
        .serialize(s)
    }
}

impl Serialize for Message {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Message::Request(r) => r.serialize(s),
            Message::Notification(n) => n.serialize(s),
            Message::Response(r) => r.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for Message {
    /// Strict, as [`Message::from_slice`]; goes through [`Value`] when the deserializer is not serde_json's slice one.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(d)?;
        let text = serde_json::to_vec(&value).map_err(de::Error::custom)?;
        Message::from_slice(&text).map_err(de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Parses `input` and compares with `expect`: `Ok(message JSON)` re-serialized, or `Err((code, id, answered))`.
    fn check(input: &str, expect: Result<Value, (i32, Option<RequestId>, bool)>) {
        match (Message::from_slice(input.as_bytes()), expect) {
            (Ok(message), Ok(want)) => {
                let line = message.to_line().unwrap();
                assert_eq!(line.last(), Some(&b'\n'));
                let got: Value = serde_json::from_slice(&line).unwrap();
                assert_eq!(got, want, "input {input}");
            }
            (Err(invalid), Err((code, id, answered))) => {
                assert_eq!(invalid.code, ErrorCode(code), "input {input}: {invalid:?}");
                assert_eq!(invalid.id, id, "input {input}");
                assert_eq!(invalid.answer().is_some(), answered, "input {input}");
            }
            (got, want) => panic!("input {input}: got {got:?}, want {want:?}"),
        }
    }

    #[test]
    fn valid_messages_round_trip() {
        for line in [
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}"#,
            r#"{"jsonrpc":"2.0","id":"a\nb","method":"m","params":[1,2]}"#,
            r#"{"jsonrpc":"2.0","id":0,"method":"m"}"#,
            r#"{"jsonrpc":"2.0","method":"session/update","params":{"x":1}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":null}"#,
            r#"{"jsonrpc":"2.0","id":-5,"result":{"a":[1]}}"#,
            r#"{"jsonrpc":"2.0","id":"x","error":{"code":-32800,"message":"request cancelled"}}"#,
            r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error","data":"x"}}"#,
            r#"{"jsonrpc":"2.0","id":3,"error":{"code":12345,"message":"custom"}}"#,
            r#"{"jsonrpc":"2.0","id":9223372036854775807,"result":1}"#,
        ] {
            check(line, Ok(serde_json::from_str(line).unwrap()));
        }
    }

    #[test]
    fn tolerated_forms_normalize() {
        check(
            r#"{"jsonrpc":"2.0","id":1,"method":"m","params":null}"#,
            Ok(json!({"jsonrpc":"2.0","id":1,"method":"m"})),
        );
        check(
            r#"{"jsonrpc":"2.0","method":"m","extra":true}"#,
            Ok(json!({"jsonrpc":"2.0","method":"m"})),
        );
    }

    #[test]
    fn invalid_messages_are_classified() {
        let id1 = Some(RequestId::Number(1));
        check("not json", Err((-32700, None, true)));
        check(
            r#"{"jsonrpc":"2.0","id":1,"method":"m""#,
            Err((-32700, None, true)),
        );
        check("[]", Err((-32600, None, true)));
        check(r#"["2.0", 1, "m"]"#, Err((-32600, None, true)));
        check(" [1", Err((-32700, None, true)));
        check(
            r#"[{"jsonrpc":"2.0","id":1,"method":"m"}]"#,
            Err((-32600, None, true)),
        );
        check("42", Err((-32600, None, true)));
        check(r#"{"id":1,"method":"m"}"#, Err((-32600, id1.clone(), true)));
        check(
            r#"{"jsonrpc":"1.0","id":1,"method":"m"}"#,
            Err((-32600, id1.clone(), true)),
        );
        check(
            r#"{"jsonrpc":2.0,"id":1,"method":"m"}"#,
            Err((-32600, id1.clone(), true)),
        );
        check(
            r#"{"jsonrpc":"2.0","id":1,"method":5}"#,
            Err((-32600, id1.clone(), true)),
        );
        check(
            r#"{"jsonrpc":"2.0","id":null,"method":"m"}"#,
            Err((-32600, None, true)),
        );
        check(
            r#"{"jsonrpc":"2.0","id":1.5,"method":"m"}"#,
            Err((-32600, None, true)),
        );
        check(
            r#"{"jsonrpc":"2.0","id":true,"method":"m"}"#,
            Err((-32600, None, true)),
        );
        check(
            r#"{"jsonrpc":"2.0","id":18446744073709551615,"method":"m"}"#,
            Err((-32600, None, true)),
        );
        check(
            r#"{"jsonrpc":"2.0","id":1,"method":"m","params":3}"#,
            Err((-32600, id1.clone(), true)),
        );
        check(
            r#"{"jsonrpc":"2.0","id":1,"method":"m","result":3}"#,
            Err((-32600, id1.clone(), true)),
        );
        check(
            r#"{"jsonrpc":"2.0","id":1,"method":"m","id":2}"#,
            Err((-32600, Some(RequestId::Number(2)), true)),
        );
        check(r#"{"jsonrpc":"2.0"}"#, Err((-32600, None, true)));
        // Response-like messages are never answered.
        check(
            r#"{"jsonrpc":"2.0","id":1,"result":1,"error":{"code":1,"message":"x"}}"#,
            Err((-32600, id1.clone(), false)),
        );
        check(
            r#"{"jsonrpc":"2.0","id":1}"#,
            Err((-32600, id1.clone(), true)),
        );
        check(
            r#"{"jsonrpc":"2.0","id":null,"result":1}"#,
            Err((-32600, None, false)),
        );
        check(
            r#"{"jsonrpc":"2.0","id":1,"error":null}"#,
            Err((-32600, id1.clone(), false)),
        );
        check(
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":"x","message":"m"}}"#,
            Err((-32600, id1.clone(), false)),
        );
        check(
            r#"{"jsonrpc":"2.0","id":1,"result":1,"params":{}}"#,
            Err((-32600, id1, false)),
        );
    }

    /// Parses `input`, expecting it to be rejected with `code` and a reason starting with `reason`.
    fn check_reason(input: &str, code: ErrorCode, reason: &str) {
        let invalid = Message::from_slice(input.as_bytes()).unwrap_err();
        assert_eq!(invalid.code, code, "input {input}");
        assert!(
            invalid.reason.starts_with(reason),
            "input {input}: reason {:?}",
            invalid.reason
        );
    }

    #[test]
    fn request_ids_in_exponent_fraction_or_negative_zero_form_are_rejected_with_an_accurate_reason()
    {
        for id in ["-0", "1e2", "1.0", "1.5", "-0.0", "9223372036854775808"] {
            let line = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"m"}}"#);
            check_reason(&line, ErrorCode::INVALID_REQUEST, ID_RULE);
            check(&line, Err((-32600, None, true)));
        }
        assert_eq!(
            ID_RULE,
            "request id must be an integer in the i64 range (no fraction, exponent or -0) or a string"
        );
        check(
            r#"{"jsonrpc":"2.0","id":-9223372036854775808,"method":"m"}"#,
            Ok(json!({"jsonrpc":"2.0","id":i64::MIN,"method":"m"})),
        );
    }

    #[test]
    fn parse_error_reasons_keep_acronyms_and_lowercase_words() {
        check_reason(
            r#"{"a":""#,
            ErrorCode::PARSE_ERROR,
            "EOF while parsing a string",
        );
        check_reason("nope", ErrorCode::PARSE_ERROR, "expected ident");
        assert_eq!(lowercase_first("Invalid type"), "invalid type");
        assert_eq!(lowercase_first("EOF while"), "EOF while");
        assert_eq!(lowercase_first("X"), "x");
        assert_eq!(lowercase_first(""), "");
    }

    #[test]
    fn valid_json_that_cannot_be_held_is_an_invalid_request() {
        check(
            r#"{"jsonrpc":"2.0","id":"\ud800","method":"m"}"#,
            Err((-32600, None, true)),
        );
        let nest = |inner: &str| format!("{}{inner}{}", "[".repeat(300), "]".repeat(300));
        let deep = format!(
            r#"{{"jsonrpc":"2.0","id":7,"method":"m","params":{}}}"#,
            nest("")
        );
        check(&deep, Err((-32600, Some(RequestId::Number(7)), true)));
        check_reason(
            &deep,
            ErrorCode::INVALID_REQUEST,
            "valid json that cannot be read as a message: recursion limit exceeded",
        );
        let deep_result = format!(r#"{{"jsonrpc":"2.0","id":7,"result":{}}}"#, nest(""));
        check(
            &deep_result,
            Err((-32600, Some(RequestId::Number(7)), false)),
        );
        check(&nest(""), Err((-32600, None, true)));
        // Broken grammar stays a parse error.
        check(r#"{"id":"\ud8"}"#, Err((-32700, None, true)));
    }

    #[test]
    fn answers_carry_code_and_recovered_id() {
        let invalid =
            Message::from_slice(br#"{"jsonrpc":"1.0","id":"q","method":"m"}"#).unwrap_err();
        let answer = Message::Response(invalid.answer().unwrap());
        let got: Value = serde_json::from_slice(&answer.to_line().unwrap()).unwrap();
        assert_eq!(got["id"], json!("q"));
        assert_eq!(got["error"]["code"], json!(-32600));
        let batch = Message::from_slice(b"[1]").unwrap_err();
        let got: Value = serde_json::from_slice(
            &Message::Response(batch.answer().unwrap())
                .to_line()
                .unwrap(),
        )
        .unwrap();
        assert_eq!(
            got,
            json!({"jsonrpc":"2.0","id":null,"error":{"code":-32600,
            "message":"batch requests are not supported","data":{"reason":"batch requests are not supported"}}})
        );
    }

    #[test]
    fn unknown_error_codes_survive_a_round_trip() {
        let line = r#"{"jsonrpc":"2.0","id":1,"error":{"code":-31999,"message":"odd","data":[1]}}"#;
        let Message::Response(Response {
            result: Err(error), ..
        }) = Message::from_slice(line.as_bytes()).unwrap()
        else {
            panic!("not an error response")
        };
        assert_eq!(error.code, ErrorCode(-31999));
        assert_eq!(error.code.name(), None);
        check(line, Ok(serde_json::from_str(line).unwrap()));
    }

    #[test]
    fn error_code_names_are_stable() {
        let names: Vec<_> = [
            ErrorCode::PARSE_ERROR,
            ErrorCode::INVALID_REQUEST,
            ErrorCode::METHOD_NOT_FOUND,
            ErrorCode::INVALID_PARAMS,
            ErrorCode::INTERNAL_ERROR,
            ErrorCode::REQUEST_CANCELLED,
        ]
        .iter()
        .map(|c| (c.0, c.name().unwrap()))
        .collect();
        assert_eq!(
            names,
            [
                (-32700, "parse_error"),
                (-32600, "invalid_request"),
                (-32601, "method_not_found"),
                (-32602, "invalid_params"),
                (-32603, "internal_error"),
                (-32800, "request_cancelled"),
            ]
        );
    }

    #[test]
    fn request_id_display_is_json() {
        assert_eq!(RequestId::Number(-3).to_string(), "-3");
        assert_eq!(RequestId::from("a\"b").to_string(), r#""a\"b""#);
    }

    #[test]
    fn message_deserialize_impl_is_strict() {
        let ok: Message = serde_json::from_value(json!({"jsonrpc":"2.0","method":"m"})).unwrap();
        assert_eq!(ok, Message::Notification(Notification::new("m", None)));
        assert!(serde_json::from_value::<Message>(json!({"method":"m"})).is_err());
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        fn json_value() -> impl Strategy<Value = Value> {
            let leaf = prop_oneof![
                Just(Value::Null),
                any::<bool>().prop_map(Value::from),
                any::<i64>().prop_map(Value::from),
                ".{0,12}".prop_map(Value::from),
            ];
            leaf.prop_recursive(3, 24, 4, |inner| {
                prop_oneof![
                    prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                    prop::collection::btree_map(".{0,6}", inner, 0..4)
                        .prop_map(|m| Value::Object(m.into_iter().collect())),
                ]
            })
        }

        fn params() -> impl Strategy<Value = Option<Value>> {
            prop_oneof![
                Just(None),
                prop::collection::vec(json_value(), 0..3).prop_map(|v| Some(Value::Array(v))),
                prop::collection::btree_map(".{0,6}", json_value(), 0..3)
                    .prop_map(|m| Some(Value::Object(m.into_iter().collect()))),
            ]
        }

        fn request_id() -> impl Strategy<Value = RequestId> {
            prop_oneof![
                any::<i64>().prop_map(RequestId::Number),
                ".{0,10}".prop_map(RequestId::String)
            ]
        }

        fn message() -> impl Strategy<Value = Message> {
            let error = (any::<i32>(), ".{0,10}", prop::option::of(json_value())).prop_map(
                |(code, message, data)| ErrorObject {
                    code: ErrorCode(code),
                    message,
                    data,
                },
            );
            prop_oneof![
                (request_id(), ".{1,12}", params())
                    .prop_map(|(id, m, p)| Message::Request(Request::new(id, m, p))),
                (".{1,12}", params())
                    .prop_map(|(m, p)| Message::Notification(Notification::new(m, p))),
                (request_id(), json_value())
                    .prop_map(|(id, r)| Message::Response(Response::ok(id, r))),
                (prop::option::of(request_id()), error)
                    .prop_map(|(id, e)| Message::Response(Response::error(id, e))),
            ]
        }

        proptest! {
            #[test]
            fn every_message_round_trips_through_one_line(message in message()) {
                let line = message.to_line().unwrap();
                prop_assert_eq!(line.iter().filter(|&&b| b == b'\n').count(), 1);
                let body = &line[..line.len() - 1];
                prop_assert_eq!(Message::from_slice(body).unwrap(), message);
            }

            #[test]
            fn arbitrary_bytes_never_panic_and_answers_encode(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
                let answer = match Message::from_slice(&bytes) {
                    Ok(_) => None,
                    Err(invalid) => invalid.answer(),
                };
                if let Some(answer) = answer {
                    let line = Message::Response(answer).to_line().unwrap();
                    prop_assert!(Message::from_slice(&line[..line.len() - 1]).is_ok());
                }
            }

            #[test]
            fn arbitrary_json_is_a_message_or_an_invalid_request(value in json_value()) {
                let text = serde_json::to_vec(&value).unwrap();
                match Message::from_slice(&text) {
                    Ok(message) => {
                        let line = message.to_line().unwrap();
                        prop_assert_eq!(Message::from_slice(&line[..line.len() - 1]).unwrap(), message);
                    }
                    Err(invalid) => prop_assert_eq!(invalid.code, ErrorCode::INVALID_REQUEST),
                }
            }
        }
    }
}
