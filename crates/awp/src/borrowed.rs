//! The fast path of [`OutputEvent::parse`]: one pass over a stdout line into borrowed typed structs.
//!
//! Strings borrow from the line when they have no escapes ([`Str`]); fields no event needs are checked, not kept
//! ([`Checked`]); nothing is built as a `serde_json::Value` except a tool use's `input`. The result must equal what
//! the `Value` path ([`OutputEvent::from_value`]) gives for the same line, so this path gives up (`None`) instead of
//! deciding anything the `Value` path decides leniently, and the caller then runs the `Value` path:
//! - a field it reads has an unexpected JSON type (`"index":"x"`, `"usage":[]`, `"text":7`, a non-object block, …);
//! - a field it reads appears twice in one object (the `Value` path keeps the last, serde's derive would fail);
//! - the `type` is one the crate does not know (`OutputEvent::Unknown` keeps the whole line as a `Value`);
//! - the line is not one JSON object, or any part of it is something `serde_json::Value` refuses.
//!
//! The last point is why skipped fields go through [`Checked`] and not `serde::de::IgnoredAny`: serde_json skips an
//! ignored value without checking the UTF-8 of its strings, lone surrogate escapes (`"\ud800"`), numbers outside
//! `f64` (`1e400`) or the nesting limit (128), all of which make the `Value` path reject the line.
//! [`Checked`] visits every value like `Value`'s own deserializer does (the same serde_json entry points, so the same
//! checks) but allocates nothing.
//!
//! Source: the field rules of [`OutputEvent::from_value`]; stream-json as Claude Code 2.1.197 writes it
//! (`fixtures/recordings/claude-stream-json-*.jsonl`).

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use crate::event::{
    Delta, MessageBlock, OutputEvent, ReportedSessionId, ResultEvent, StreamEvent, ToolResultBlock,
};
use crate::{SessionId, Usage};

/// Parses `line` on the fast path; `None` means "ask the `Value` path" (see the module docs).
///
/// The line's UTF-8 is checked once, with SIMD, and serde_json then reads it as a `&str` (it checks no string
/// again); invalid UTF-8 anywhere gives up, and the `Value` path reports the line as not JSON.
pub(crate) fn parse(line: &[u8]) -> Option<OutputEvent> {
    let text = simdutf8::basic::from_utf8(line).ok()?;
    let mut de = serde_json::Deserializer::from_str(text);
    // Filled in place: the line struct is a few hundred bytes, and returning it by value through serde's layers
    // copied it several times per line (7% of the normalize profile).
    let mut object = Object::default();
    de.deserialize_map(FillObject(&mut object)).ok()?;
    de.end().ok()?;
    object.take_event()
}

/// The `event` of a `stream_event` wrapper, filled in place on the heap (see [`parse`]).
struct BoxedObject<'a>(Box<Object<'a>>);

impl<'de> Deserialize<'de> for BoxedObject<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let mut object = Box::<Object<'de>>::default();
        deserializer.deserialize_map(FillObject(&mut object))?;
        Ok(BoxedObject(object))
    }
}

/// Reads an object into a caller's [`Object`].
struct FillObject<'s, 'de>(&'s mut Object<'de>);

impl<'de> Visitor<'de> for FillObject<'_, 'de> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<(), A::Error> {
        self.0.fill(map)
    }
}

/// A JSON string, borrowed from the line when it has no escapes.
struct Str<'a>(Cow<'a, str>);

impl Str<'_> {
    fn into_string(self) -> String {
        self.0.into_owned()
    }
}

impl<'de> Deserialize<'de> for Str<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct StrVisitor;
        impl<'de> Visitor<'de> for StrVisitor {
            type Value = Str<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Str(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Str(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(Str(Cow::Owned(v)))
            }
        }
        deserializer.deserialize_str(StrVisitor)
    }
}

/// Any JSON value, checked exactly as `serde_json::Value` would be (UTF-8, escapes, number range, nesting depth)
/// and then dropped. Allocates nothing.
struct Checked;

impl<'de> Deserialize<'de> for Checked {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(CheckedVisitor)
    }
}

struct CheckedVisitor;

impl<'de> Visitor<'de> for CheckedVisitor {
    type Value = Checked;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Checked, A::Error> {
        while seq.next_element::<Checked>()?.is_some() {}
        Ok(Checked)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Checked, A::Error> {
        while map.next_key::<Checked>()?.is_some() {
            map.next_value::<Checked>()?;
        }
        Ok(Checked)
    }
}

/// Stores the value of a field seen once; a second occurrence is an error (the caller falls back).
/// `null` is stored as `None`, like an absent field: every field read here treats the two alike.
fn set_once<T, E: de::Error>(slot: &mut Option<Option<T>>, value: Option<T>) -> Result<(), E> {
    if slot.is_some() {
        return Err(E::custom("duplicate field"));
    }
    *slot = Some(value);
    Ok(())
}

/// Declares a JSON object read field by field: listed keys into typed slots (each at most once), every other key's
/// value through [`Checked`]. A non-object is an error.
macro_rules! object {
    ($(#[$doc:meta])* $name:ident { $($field:ident: $ty:ty = $key:literal,)* }) => {
        $(#[$doc])*
        #[derive(Default)]
        struct $name<'a> {
            $($field: Option<Option<$ty>>,)*
            line: PhantomData<&'a str>,
        }

        impl<'de> $name<'de> {
            /// Reads the object's entries into `self`.
            fn fill<A: MapAccess<'de>>(&mut self, mut map: A) -> Result<(), A::Error> {
                while let Some(key) = map.next_key::<Str<'de>>()? {
                    match &*key.0 {
                        $($key => set_once(&mut self.$field, map.next_value()?)?,)*
                        _ => {
                            map.next_value::<Checked>()?;
                        }
                    }
                }
                let _ = &self.line;
                Ok(())
            }
        }

        impl<'de> Deserialize<'de> for $name<'de> {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                struct ObjectVisitor;
                impl<'de> Visitor<'de> for ObjectVisitor {
                    type Value = $name<'de>;
                    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                        f.write_str(concat!("a JSON object (", stringify!($name), ")"))
                    }
                    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                        let mut out = $name::default();
                        out.fill(map)?;
                        Ok(out)
                    }
                }
                deserializer.deserialize_map(ObjectVisitor)
            }
        }
    };
}

object! {
    /// A line, or the `event` of a `stream_event` wrapper: the union of the fields every known type reads.
    Object {
        kind: Str<'a> = "type",
        subtype: Str<'a> = "subtype",
        session_id: Str<'a> = "session_id",
        model: Str<'a> = "model",
        message: Box<Message<'a>> = "message",
        event: BoxedObject<'a> = "event",
        is_error: bool = "is_error",
        usage: UsageObject<'a> = "usage",
        result: Str<'a> = "result",
        errors: Checked = "errors",
        duration_ms: u64 = "duration_ms",
        total_cost_usd: f64 = "total_cost_usd",
        request: SubtypeObject<'a> = "request",
        response: SubtypeObject<'a> = "response",
        index: u64 = "index",
        delta: Box<DeltaObject<'a>> = "delta",
        content_block: Box<Block<'a>> = "content_block",
        error: TypeObject<'a> = "error",
    }
}

object! {
    /// `message` of `assistant`, `user` and `message_start`.
    Message {
        id: Str<'a> = "id",
        content: Content<'a> = "content",
        usage: UsageObject<'a> = "usage",
    }
}

object! {
    /// A content block (`text`, `thinking`, `tool_use`, `tool_result`, or another type), or a part of a
    /// `tool_result`'s `content` array.
    Block {
        kind: Str<'a> = "type",
        text: Str<'a> = "text",
        thinking: Str<'a> = "thinking",
        id: Str<'a> = "id",
        name: Str<'a> = "name",
        input: Value = "input",
        tool_use_id: Str<'a> = "tool_use_id",
        is_error: bool = "is_error",
        content: Content<'a> = "content",
    }
}

object! {
    /// `delta` of `content_block_delta` and `message_delta`.
    DeltaObject {
        kind: Str<'a> = "type",
        text: Str<'a> = "text",
        thinking: Str<'a> = "thinking",
        partial_json: Str<'a> = "partial_json",
        stop_reason: Str<'a> = "stop_reason",
    }
}

object! {
    /// `usage`: the four counters [`Usage`] keeps.
    UsageObject {
        input_tokens: u64 = "input_tokens",
        output_tokens: u64 = "output_tokens",
        cache_read_input_tokens: u64 = "cache_read_input_tokens",
        cache_creation_input_tokens: u64 = "cache_creation_input_tokens",
    }
}

object! {
    /// `request` / `response` of the control protocol.
    SubtypeObject {
        subtype: Str<'a> = "subtype",
    }
}

object! {
    /// `error` of a streaming `error` event.
    TypeObject {
        kind: Str<'a> = "type",
    }
}

/// `content`: a string, or an array whose elements are objects or `null` (anything else gives up).
enum Content<'a> {
    Text(Str<'a>),
    Blocks(Vec<Option<Block<'a>>>),
}

impl<'de> Deserialize<'de> for Content<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ContentVisitor;
        impl<'de> Visitor<'de> for ContentVisitor {
            type Value = Content<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string or an array")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Content::Text(Str(Cow::Borrowed(v))))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Content::Text(Str(Cow::Owned(v.to_owned()))))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut blocks = Vec::new();
                while let Some(block) = seq.next_element()? {
                    blocks.push(block);
                }
                Ok(Content::Blocks(blocks))
            }
        }
        deserializer.deserialize_any(ContentVisitor)
    }
}

/// The value of an optional field: absent and `null` are both `None`.
fn get<T>(slot: Option<Option<T>>) -> Option<T> {
    slot.flatten()
}

fn string(slot: Option<Option<Str<'_>>>) -> Option<String> {
    get(slot).map(Str::into_string)
}

fn session_id(slot: Option<Option<Str<'_>>>) -> Option<ReportedSessionId> {
    string(slot).map(SessionId::new)
}

fn usage(slot: Option<Option<UsageObject<'_>>>) -> Option<Usage> {
    let usage = get(slot)?;
    Some(Usage {
        input_tokens: get(usage.input_tokens).unwrap_or(0),
        output_tokens: get(usage.output_tokens).unwrap_or(0),
        cache_read_input_tokens: get(usage.cache_read_input_tokens),
        cache_creation_input_tokens: get(usage.cache_creation_input_tokens),
    })
}

fn message_block(block: Option<Block<'_>>) -> MessageBlock {
    let Some(block) = block else {
        return MessageBlock::Other;
    };
    message_block_of(block)
}

fn message_block_of(block: Block<'_>) -> MessageBlock {
    match get(block.kind).as_ref().map(|kind| &*kind.0) {
        Some("text") => MessageBlock::Text(string(block.text).unwrap_or_default()),
        Some("thinking") => MessageBlock::Thinking(string(block.thinking).unwrap_or_default()),
        Some("tool_use") => MessageBlock::ToolUse {
            id: string(block.id).unwrap_or_default(),
            name: string(block.name).unwrap_or_default(),
            input: get(block.input).unwrap_or(Value::Null),
        },
        _ => MessageBlock::Other,
    }
}

fn tool_result_block(block: Option<Block<'_>>) -> Option<ToolResultBlock> {
    let block = block?;
    if get(block.kind).as_ref().map(|kind| &*kind.0) != Some("tool_result") {
        return None;
    }
    let text = match get(block.content) {
        Some(Content::Text(text)) => text.into_string(),
        Some(Content::Blocks(parts)) => parts
            .into_iter()
            .flatten()
            .filter(|part| get_kind(part) == Some("text"))
            .filter_map(|part| string(part.text))
            .collect::<Vec<_>>()
            .join("\n"),
        None => String::new(),
    };
    Some(ToolResultBlock {
        tool_use_id: string(block.tool_use_id).unwrap_or_default(),
        is_error: get(block.is_error).unwrap_or(false),
        text,
    })
}

fn get_kind<'b>(part: &'b Block<'_>) -> Option<&'b str> {
    match &part.kind {
        Some(Some(kind)) => Some(&kind.0),
        _ => None,
    }
}

impl Object<'_> {
    /// The event this object is, by the rules of [`OutputEvent::from_value`]; `None` to fall back.
    fn take_event(&mut self) -> Option<OutputEvent> {
        let kind = get(self.kind.take())?;
        Some(match &*kind.0 {
            "system" => {
                let subtype = string(self.subtype.take());
                if subtype.as_deref() == Some("init") {
                    OutputEvent::SystemInit {
                        session_id: session_id(self.session_id.take()),
                        model: string(self.model.take()),
                    }
                } else {
                    OutputEvent::System { subtype }
                }
            }
            "assistant" => {
                let message = get(self.message.take())?;
                let content = match get(message.content)? {
                    Content::Blocks(blocks) => blocks.into_iter().map(message_block).collect(),
                    Content::Text(text) => vec![MessageBlock::Text(text.into_string())],
                };
                OutputEvent::Assistant {
                    message_id: string(message.id),
                    content,
                }
            }
            "user" => {
                let message = get(self.message.take())?;
                let tool_results = match get(message.content) {
                    Some(Content::Blocks(blocks)) => {
                        blocks.into_iter().filter_map(tool_result_block).collect()
                    }
                    _ => Vec::new(),
                };
                OutputEvent::User { tool_results }
            }
            "stream_event" => {
                let mut inner = get(self.event.take())?;
                let inner_kind = get(inner.0.kind.take())?;
                OutputEvent::Stream {
                    event: inner.0.take_stream_event(&inner_kind.0),
                    wrapped: true,
                }
            }
            kind @ ("message_start"
            | "message_delta"
            | "message_stop"
            | "content_block_start"
            | "content_block_delta"
            | "content_block_stop"
            | "ping"
            | "error") => OutputEvent::Stream {
                event: self.take_stream_event(kind),
                wrapped: false,
            },
            "result" => {
                let result = string(self.result.take());
                // Without `result`, the reason is in `errors` (Claude Code's error results): the `Value` path
                // joins its strings, so leave such lines to it.
                if result.is_none() && self.errors.is_some() {
                    return None;
                }
                OutputEvent::Result(ResultEvent {
                    subtype: string(self.subtype.take()),
                    is_error: get(self.is_error.take()),
                    session_id: session_id(self.session_id.take()),
                    usage: usage(self.usage.take()),
                    result,
                    duration_ms: get(self.duration_ms.take()),
                    total_cost_usd: get(self.total_cost_usd.take()),
                })
            }
            kind @ ("control_request" | "control_response" | "control_cancel_request") => {
                let subtype = [self.request.take(), self.response.take()]
                    .into_iter()
                    .filter_map(get)
                    .find_map(|inner| string(inner.subtype));
                OutputEvent::Control {
                    event_type: kind.to_owned(),
                    subtype,
                }
            }
            kind @ ("rate_limit_event" | "keep_alive" | "tool_progress") => {
                OutputEvent::Informational {
                    event_type: kind.to_owned(),
                }
            }
            _ => return None,
        })
    }

    fn take_stream_event(&mut self, kind: &str) -> StreamEvent {
        let index = get(self.index.take()).unwrap_or(0);
        match kind {
            "message_start" => {
                let message = get(self.message.take());
                let (message_id, usage_field) = match message {
                    Some(message) => (string(message.id), message.usage),
                    None => (None, None),
                };
                StreamEvent::MessageStart {
                    message_id,
                    usage: usage(usage_field),
                }
            }
            "message_delta" => StreamEvent::MessageDelta {
                stop_reason: get(self.delta.take()).and_then(|delta| string(delta.stop_reason)),
                usage: usage(self.usage.take()),
            },
            "message_stop" => StreamEvent::MessageStop,
            "content_block_start" => StreamEvent::ContentBlockStart {
                index,
                block: get(self.content_block.take())
                    .map_or(MessageBlock::Other, |block| message_block_of(*block)),
            },
            "content_block_delta" => {
                let delta = match get(self.delta.take()) {
                    Some(delta) => match get(delta.kind).as_ref().map(|kind| &*kind.0) {
                        Some("text_delta") => Delta::Text(string(delta.text).unwrap_or_default()),
                        Some("thinking_delta") => {
                            Delta::Thinking(string(delta.thinking).unwrap_or_default())
                        }
                        Some("input_json_delta") => {
                            Delta::InputJson(string(delta.partial_json).unwrap_or_default())
                        }
                        Some("signature_delta") => Delta::Signature,
                        _ => Delta::Other,
                    },
                    None => Delta::Other,
                };
                StreamEvent::ContentBlockDelta { index, delta }
            }
            "content_block_stop" => StreamEvent::ContentBlockStop { index },
            "ping" => StreamEvent::Ping,
            "error" => StreamEvent::Error {
                error_type: get(self.error.take()).and_then(|error| string(error.kind)),
            },
            other => StreamEvent::Unknown {
                event_type: other.to_owned(),
            },
        }
    }
}
