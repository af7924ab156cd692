//! Secret redaction: every known secret value is replaced by `***` in text that leaves the driver.
//!
//! Source: `protocols/cli-driver.md`, "argv templating" (secrets are redacted in every error, log and `Debug`
//! output, including the echoed argv) and invariant 6 of this repository's `docs/architecture.md`.

use std::fmt;

use serde_json::Value;

/// The replacement text for a secret.
pub const REDACTED: &str = "***";

/// The set of secret values of one call. `Debug` shows only how many there are.
#[derive(Clone, Default)]
pub struct Redactor {
    /// Longest first, so that a secret containing another is replaced whole.
    secrets: Vec<String>,
}

impl Redactor {
    /// A redactor for `secrets`; empty values are ignored (they would match everywhere).
    pub fn new<I, S>(secrets: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut secrets: Vec<String> = secrets
            .into_iter()
            .map(Into::into)
            .filter(|s| !s.is_empty())
            .collect();
        secrets.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        secrets.dedup();
        Self { secrets }
    }

    /// `text` with every occurrence of every secret replaced by [`REDACTED`].
    pub fn redact(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for secret in &self.secrets {
            if out.contains(secret.as_str()) {
                out = out.replace(secret.as_str(), REDACTED);
            }
        }
        out
    }

    /// `value` with every string (keys included) redacted.
    pub fn redact_json(&self, value: Value) -> Value {
        if self.secrets.is_empty() {
            return value;
        }
        match value {
            Value::String(s) => Value::String(self.redact(&s)),
            Value::Array(items) => {
                Value::Array(items.into_iter().map(|v| self.redact_json(v)).collect())
            }
            Value::Object(map) => Value::Object(
                map.into_iter()
                    .map(|(k, v)| (self.redact(&k), self.redact_json(v)))
                    .collect(),
            ),
            other => other,
        }
    }
}

impl fmt::Debug for Redactor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Redactor")
            .field("secrets", &self.secrets.len())
            .finish()
    }
}

/// `text` cut to at most `max_bytes` bytes at a character boundary, with `…` appended when cut.
pub fn bounded(text: &str, max_bytes: usize) -> String {
    if text.len() <= max_bytes {
        return text.to_owned();
    }
    let mut end = max_bytes;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn replaces_every_occurrence_longest_first() {
        let r = Redactor::new(["abc", "abcdef", ""]);
        assert_eq!(r.redact("x abcdef y abc z"), "x *** y *** z");
        assert_eq!(
            r.redact_json(json!({"abc": ["abcdef", 1]})),
            json!({"***": ["***", 1]})
        );
        assert_eq!(format!("{r:?}"), "Redactor { secrets: 2 }");
    }

    #[test]
    fn bounded_cuts_at_a_char_boundary() {
        assert_eq!(bounded("abc", 3), "abc");
        assert_eq!(bounded("abcd", 3), "abc…");
        assert_eq!(bounded("aé", 2), "a…");
    }
}
