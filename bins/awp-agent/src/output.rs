//! Output events (agent → host), serialized with `type` first, one compact JSON object per line.
//!
//! Source: AWP agent CLI protocol, "Output JSONL" (`protocols/awp.md`).

use serde::Serialize;

/// One stdout line of the reference agent.
///
/// ```text
/// {"type":"system","subtype":"init","session_id":"awp-…","model":"builtin-demo","cwd":"/work","tools":[]}
/// {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}
/// {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"You "}}
/// {"type":"content_block_stop","index":0}
/// {"type":"result","subtype":"success","is_error":false,"session_id":"awp-…","result":"…","usage":{…},…}
/// ```
#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event<'a> {
    /// `system` / `init`: the session id to resume with and the model.
    System {
        /// Always `init` for this agent.
        subtype: &'static str,
        /// The native session id.
        session_id: &'a str,
        /// The provider's model, or `builtin-demo`.
        model: &'a str,
        /// The working directory.
        cwd: &'a str,
        /// Tools offered: `["awp_run_managed_task"]` with managed tasks enabled, else none.
        tools: &'a [&'a str],
    },
    /// A text block opens.
    ContentBlockStart {
        /// Block index within the reply (always 0: one text block).
        index: u32,
        /// `{"type":"text","text":""}`.
        content_block: TextBlock,
    },
    /// A piece of text.
    ContentBlockDelta {
        /// Block index.
        index: u32,
        /// `{"type":"text_delta","text":"…"}`.
        delta: TextDelta<'a>,
    },
    /// The block closes.
    ContentBlockStop {
        /// Block index.
        index: u32,
    },
    /// The turn's terminal event.
    Result(TurnResult<'a>),
}

/// `{"type":"text","text":""}`.
#[derive(Debug, Serialize)]
#[serde(tag = "type", rename = "text")]
pub struct TextBlock {
    /// Always empty: the text follows as deltas.
    pub text: &'static str,
}

/// `{"type":"text_delta","text":"…"}`.
#[derive(Debug, Serialize)]
#[serde(tag = "type", rename = "text_delta")]
pub struct TextDelta<'a> {
    /// The piece of text.
    pub text: &'a str,
}

/// The fields of a `result` line.
#[derive(Debug, Serialize)]
pub struct TurnResult<'a> {
    /// `success`, `error` (a failed turn) or `startup_error` (refused before any input).
    pub subtype: &'static str,
    /// `true` unless `subtype` is `success`.
    pub is_error: bool,
    /// The session id, once known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_id: Option<&'a str>,
    /// The reply text on success, the stable error code otherwise.
    pub result: &'a str,
    /// Token usage, when the provider reported it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<UsageDto>,
    /// Wall time of the turn in milliseconds (success only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
    /// Provider round trips of the turn (success only; always 1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub num_turns: Option<u32>,
    /// Human-readable reasons of a failed turn (Claude Code's `errors` field), when the code alone does not say
    /// enough (for example the sizes of `message_too_large`); omitted when empty.
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    pub errors: &'a [String],
}

impl<'a> TurnResult<'a> {
    /// `{"type":"result","subtype":<subtype>,"is_error":true,"result":<code>}` (+ `session_id` when known).
    pub fn error(subtype: &'static str, session_id: Option<&'a str>, code: &'a str) -> Event<'a> {
        Event::Result(TurnResult {
            subtype,
            is_error: true,
            session_id,
            result: code,
            usage: None,
            duration_ms: None,
            num_turns: None,
            errors: &[],
        })
    }

    /// As [`TurnResult::error`] with a human-readable `errors` array.
    pub fn error_with(
        subtype: &'static str,
        session_id: Option<&'a str>,
        code: &'a str,
        errors: &'a [String],
    ) -> Event<'a> {
        Event::Result(TurnResult {
            subtype,
            is_error: true,
            session_id,
            result: code,
            usage: None,
            duration_ms: None,
            num_turns: None,
            errors,
        })
    }
}

/// `{"input_tokens":12,"output_tokens":8}`.
#[derive(Debug, Serialize)]
pub struct UsageDto {
    /// Prompt tokens.
    pub input_tokens: u64,
    /// Reply tokens.
    pub output_tokens: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(event: Event<'_>, expect: &str) {
        assert_eq!(serde_json::to_string(&event).expect("json"), expect);
    }

    #[test]
    fn shapes() {
        check(
            Event::System {
                subtype: "init",
                session_id: "s",
                model: "m",
                cwd: "/",
                tools: &[],
            },
            r#"{"type":"system","subtype":"init","session_id":"s","model":"m","cwd":"/","tools":[]}"#,
        );
        check(
            Event::ContentBlockStart {
                index: 0,
                content_block: TextBlock { text: "" },
            },
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
        );
        check(
            Event::ContentBlockDelta {
                index: 0,
                delta: TextDelta { text: "hi\u{2028}" },
            },
            "{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"hi\u{2028}\"}}",
        );
        check(
            Event::ContentBlockStop { index: 0 },
            r#"{"type":"content_block_stop","index":0}"#,
        );
        check(
            TurnResult::error("startup_error", None, "unsupported_argument"),
            r#"{"type":"result","subtype":"startup_error","is_error":true,"result":"unsupported_argument"}"#,
        );
        check(
            TurnResult::error_with("error", Some("s"), "message_too_large", &["why".to_owned()]),
            r#"{"type":"result","subtype":"error","is_error":true,"session_id":"s","result":"message_too_large","errors":["why"]}"#,
        );
        check(
            Event::Result(TurnResult {
                subtype: "success",
                is_error: false,
                session_id: Some("s"),
                result: "ok",
                usage: Some(UsageDto {
                    input_tokens: 1,
                    output_tokens: 2,
                }),
                duration_ms: Some(3),
                num_turns: Some(1),
                errors: &[],
            }),
            r#"{"type":"result","subtype":"success","is_error":false,"session_id":"s","result":"ok","usage":{"input_tokens":1,"output_tokens":2},"duration_ms":3,"num_turns":1}"#,
        );
    }
}
