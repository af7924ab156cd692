//! Input lines (host → agent): one `user` line per turn, and the Windows graceful `shutdown` line.
//!
//! Source: AWP agent CLI protocol, "Input JSONL".

use serde_json::Value;

/// One content block of a user turn.
///
/// Wire shapes: `{"type":"text","text":"hi"}`,
/// `{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBOR…"}}`,
/// `{"type":"document","source":{"type":"base64","media_type":"application/pdf","data":"JVBE…"}}`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ContentBlock {
    /// Plain text.
    Text {
        /// The text, any Unicode (escaped on the wire as needed).
        text: String,
    },
    /// An image, base64-encoded.
    Image {
        /// MIME type, e.g. `image/png`.
        media_type: String,
        /// Standard base64 of the image bytes.
        data_base64: String,
    },
    /// A document (PDF, …), base64-encoded.
    Document {
        /// MIME type, e.g. `application/pdf`.
        media_type: String,
        /// Standard base64 of the document bytes.
        data_base64: String,
    },
}

impl ContentBlock {
    /// A text block.
    pub fn text(text: impl Into<String>) -> Self {
        ContentBlock::Text { text: text.into() }
    }

    /// Appends the block's compact JSON (keys in contract order) to `out`.
    fn write_json(&self, out: &mut String) {
        match self {
            ContentBlock::Text { text } => {
                out.push_str("{\"type\":\"text\",\"text\":");
                out.push_str(&json_string(text));
                out.push('}');
            }
            ContentBlock::Image {
                media_type,
                data_base64,
            } => write_source(out, "image", media_type, data_base64),
            ContentBlock::Document {
                media_type,
                data_base64,
            } => {
                write_source(out, "document", media_type, data_base64);
            }
        }
    }
}

fn write_source(out: &mut String, block_type: &str, media_type: &str, data: &str) {
    out.push_str("{\"type\":\"");
    out.push_str(block_type);
    out.push_str("\",\"source\":{\"type\":\"base64\",\"media_type\":");
    out.push_str(&json_string(media_type));
    out.push_str(",\"data\":");
    out.push_str(&json_string(data));
    out.push_str("}}");
}

/// `text` as a JSON string literal (serde_json's escaping; infallible).
fn json_string(text: &str) -> String {
    Value::String(text.to_owned()).to_string()
}

/// The line for one user turn, newline-terminated:
/// `{"type":"user","message":{"role":"user","content":[{"type":"text","text":"hi"}]}}\n`.
///
/// The line never contains a raw newline, U+2028 or U+2029 (those are written as `\u2028` / `\u2029`, so that
/// agents whose line reader splits on them still see one line).
pub fn user_line(blocks: &[ContentBlock]) -> Vec<u8> {
    let mut json = String::from("{\"type\":\"user\",\"message\":{\"role\":\"user\",\"content\":[");
    for (i, block) in blocks.iter().enumerate() {
        if i > 0 {
            json.push(',');
        }
        block.write_json(&mut json);
    }
    json.push_str("]}}");
    to_safe_line(&json)
}

/// The Windows graceful-stop line: `{"type":"shutdown"}\n`.
pub fn shutdown_line() -> Vec<u8> {
    b"{\"type\":\"shutdown\"}\n".to_vec()
}

/// Compact JSON + `\n`, with U+2028/U+2029 escaped (they can only occur inside JSON strings, so the escape is exact).
fn to_safe_line(text: &str) -> Vec<u8> {
    let mut line = String::with_capacity(text.len() + 1);
    for c in text.chars() {
        match c {
            '\u{2028}' => line.push_str("\\u2028"),
            '\u{2029}' => line.push_str("\\u2029"),
            c => line.push(c),
        }
    }
    line.push('\n');
    line.into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(blocks: &[ContentBlock], expect: &str) {
        assert_eq!(String::from_utf8(user_line(blocks)).unwrap(), expect);
    }

    #[test]
    fn user_lines_match_the_contract() {
        check(
            &[ContentBlock::text("Explain this failure")],
            "{\"type\":\"user\",\"message\":{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"Explain this failure\"}]}}\n",
        );
        check(
            &[ContentBlock::Image {
                media_type: "image/png".into(),
                data_base64: "AAAA".into(),
            }],
            "{\"type\":\"user\",\"message\":{\"role\":\"user\",\"content\":[{\"type\":\"image\",\"source\":{\"type\":\"base64\",\"media_type\":\"image/png\",\"data\":\"AAAA\"}}]}}\n",
        );
        check(
            &[ContentBlock::Document {
                media_type: "application/pdf".into(),
                data_base64: "JVBE".into(),
            }],
            "{\"type\":\"user\",\"message\":{\"role\":\"user\",\"content\":[{\"type\":\"document\",\"source\":{\"type\":\"base64\",\"media_type\":\"application/pdf\",\"data\":\"JVBE\"}}]}}\n",
        );
    }

    #[test]
    fn line_separators_and_newlines_are_escaped() {
        let line = user_line(&[ContentBlock::text("a\nb\u{2028}c\u{2029}d")]);
        let text = String::from_utf8(line.clone()).unwrap();
        assert_eq!(text.matches('\n').count(), 1);
        assert!(!text.contains('\u{2028}') && !text.contains('\u{2029}'));
        let value: Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(
            value["message"]["content"][0]["text"],
            "a\nb\u{2028}c\u{2029}d"
        );
    }

    #[test]
    fn shutdown_line_is_exact() {
        assert_eq!(shutdown_line(), b"{\"type\":\"shutdown\"}\n");
    }
}
