//! Input lines (host → agent): one user message per turn, or the Windows shutdown line.
//!
//! Source: AWP agent CLI protocol, "Input JSONL" (`protocols/awp.md`).

use serde_json::Value;

/// Image media types the reference agent forwards to an OpenAI-compatible provider.
pub const IMAGE_MEDIA_TYPES: &[&str] = &["image/png", "image/jpeg", "image/gif", "image/webp"];

/// An image block, forwarded to the provider of the current turn only (history keeps a placeholder).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Image {
    /// One of [`IMAGE_MEDIA_TYPES`].
    pub media_type: String,
    /// The base64 payload exactly as the host sent it.
    pub data_base64: String,
}

/// One accepted user turn.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserTurn {
    /// The `text` blocks joined with `\n`.
    pub text: String,
    /// The `image` blocks, in order.
    pub images: Vec<Image>,
}

/// What one input line asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Input {
    /// `{"type":"user","message":{"role":"user","content":[…]}}`.
    User(UserTurn),
    /// `{"type":"shutdown"}`: exit 0 after the current turn.
    Shutdown,
}

/// Why an input line was refused; the turn ends with a `result` error carrying [`InputError::code`].
#[non_exhaustive]
#[derive(Clone, Copy, Debug, thiserror::Error, PartialEq, Eq)]
pub enum InputError {
    /// Not a JSON object, or a `user` line without `message.content`.
    #[error("invalid input line")]
    InvalidLine,
    /// A JSON object whose `type` is neither `user` nor `shutdown`.
    #[error("unsupported input type")]
    UnsupportedType,
    /// A block other than `text` or a base64 `image` of a supported media type (for example `document`).
    #[error("unsupported content block")]
    UnsupportedBlock,
    /// No text and no image.
    #[error("empty message")]
    Empty,
    /// The line was longer than the input line limit (32 MiB).
    #[error("input line too long")]
    TooLong,
}

impl InputError {
    /// Stable machine-readable code, the `result` of the turn's error line.
    pub fn code(&self) -> &'static str {
        match self {
            InputError::InvalidLine => "invalid_input_line",
            InputError::UnsupportedType => "unsupported_input_type",
            InputError::UnsupportedBlock => "unsupported_content_block",
            InputError::Empty => "empty_message",
            InputError::TooLong => "input_line_too_long",
        }
    }
}

/// Parses one input line (already known to be one JSON value).
///
/// Extra fields (`session_id`, `parent_tool_use_id`, …) are tolerated. `message.content` may be an array of
/// blocks or, as Claude Code accepts, a plain string.
///
/// # Errors
/// See [`InputError`].
pub fn parse(line: &[u8]) -> Result<Input, InputError> {
    let value: Value = serde_json::from_slice(line).map_err(|_| InputError::InvalidLine)?;
    let object = value.as_object().ok_or(InputError::InvalidLine)?;
    match object.get("type").and_then(Value::as_str) {
        Some("shutdown") => return Ok(Input::Shutdown),
        Some("user") => {}
        Some(_) => return Err(InputError::UnsupportedType),
        None => return Err(InputError::InvalidLine),
    }
    let content = value
        .pointer("/message/content")
        .ok_or(InputError::InvalidLine)?;
    let mut texts = Vec::new();
    let mut images = Vec::new();
    match content {
        Value::String(text) => texts.push(text.as_str()),
        Value::Array(blocks) => {
            for block in blocks {
                match block.get("type").and_then(Value::as_str) {
                    Some("text") => texts.push(
                        block
                            .get("text")
                            .and_then(Value::as_str)
                            .ok_or(InputError::InvalidLine)?,
                    ),
                    Some("image") => images.push(parse_image(block)?),
                    _ => return Err(InputError::UnsupportedBlock),
                }
            }
        }
        _ => return Err(InputError::InvalidLine),
    }
    let text = texts.join("\n");
    if text.trim().is_empty() && images.is_empty() {
        return Err(InputError::Empty);
    }
    Ok(Input::User(UserTurn { text, images }))
}

fn parse_image(block: &Value) -> Result<Image, InputError> {
    let source = block.get("source").ok_or(InputError::UnsupportedBlock)?;
    let kind = source.get("type").and_then(Value::as_str);
    let media_type = source.get("media_type").and_then(Value::as_str);
    let data = source.get("data").and_then(Value::as_str);
    match (kind, media_type, data) {
        (Some("base64"), Some(media_type), Some(data))
            if IMAGE_MEDIA_TYPES.contains(&media_type)
                && !data.is_empty()
                && data
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'=')) =>
        {
            Ok(Image {
                media_type: media_type.to_owned(),
                data_base64: data.to_owned(),
            })
        }
        _ => Err(InputError::UnsupportedBlock),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(line: &str, expect: Result<Input, InputError>) {
        assert_eq!(parse(line.as_bytes()), expect, "{line}");
    }

    fn user(text: &str) -> Result<Input, InputError> {
        Ok(Input::User(UserTurn {
            text: text.to_owned(),
            images: Vec::new(),
        }))
    }

    #[test]
    fn user_lines() {
        check(
            r#"{"type":"user","message":{"role":"user","content":[{"type":"text","text":"hi"}]}}"#,
            user("hi"),
        );
        check(
            r#"{"type":"user","session_id":"x","parent_tool_use_id":null,"message":{"role":"user","content":"plain"}}"#,
            user("plain"),
        );
        check(
            r#"{"type":"user","message":{"content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}}"#,
            user("a\nb"),
        );
        check(
            r#"{"type":"user","message":{"content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBORw=="}}]}}"#,
            Ok(Input::User(UserTurn {
                text: String::new(),
                images: vec![Image {
                    media_type: "image/png".into(),
                    data_base64: "iVBORw==".into(),
                }],
            })),
        );
        check(r#"{"type":"shutdown"}"#, Ok(Input::Shutdown));
    }

    #[test]
    fn refused_lines_have_stable_codes() {
        let cases = [
            ("[1,2]", "invalid_input_line"),
            (r#"{"message":{}}"#, "invalid_input_line"),
            (r#"{"type":"user"}"#, "invalid_input_line"),
            (
                r#"{"type":"user","message":{"content":[{"type":"text"}]}}"#,
                "invalid_input_line",
            ),
            (r#"{"type":"control_request"}"#, "unsupported_input_type"),
            (
                r#"{"type":"user","message":{"content":[{"type":"document","source":{"type":"base64","media_type":"application/pdf","data":"AA=="}}]}}"#,
                "unsupported_content_block",
            ),
            (
                r#"{"type":"user","message":{"content":[{"type":"image","source":{"type":"url","url":"file:///etc/passwd"}}]}}"#,
                "unsupported_content_block",
            ),
            (
                r#"{"type":"user","message":{"content":[{"type":"image","source":{"type":"base64","media_type":"image/svg+xml","data":"AA=="}}]}}"#,
                "unsupported_content_block",
            ),
            (
                r#"{"type":"user","message":{"content":[{"type":"tool_result"}]}}"#,
                "unsupported_content_block",
            ),
            (
                r#"{"type":"user","message":{"content":[]}}"#,
                "empty_message",
            ),
            (
                r#"{"type":"user","message":{"content":"  "}}"#,
                "empty_message",
            ),
        ];
        for (line, code) in cases {
            match parse(line.as_bytes()) {
                Err(error) => assert_eq!(error.code(), code, "{line}"),
                Ok(input) => panic!("{line} was accepted as {input:?}"),
            }
        }
        assert_eq!(InputError::TooLong.code(), "input_line_too_long");
    }
}
