//! Canonical JSON for approval arguments: sorted keys, bounded depth/keys/bytes, JS-compatible numbers, SHA-256.
//!
//! Checked against DeepChat's `src/main/approval/approvalBroker.ts` (`canonicalize`, `serializeArguments`):
//! keys sorted by UTF-16 code units (JavaScript's `<` on strings), output equal to `JSON.stringify` of the sorted
//! value, limits depth 64, 10 000 keys and 1 MiB, finite numbers only. Cycles cannot occur in a
//! [`serde_json::Value`] (it is a tree), so there is no cycle check.

use std::cmp::Ordering;
use std::fmt;
use std::fmt::Write as _;

use serde_json::{Map, Number, Value};
use sha2::{Digest, Sha256};

use crate::error::CanonicalError;

/// Default for [`CanonicalLimits::max_depth`]: 64 (DeepChat `MAX_ARGUMENT_DEPTH`).
pub const DEFAULT_MAX_DEPTH: usize = 64;
/// Default for [`CanonicalLimits::max_keys`]: 10 000 (DeepChat `MAX_ARGUMENT_KEYS`).
pub const DEFAULT_MAX_KEYS: usize = 10_000;
/// Default for [`CanonicalLimits::max_bytes`]: 1 MiB = 1 048 576 bytes (DeepChat `MAX_ARGUMENT_BYTES`).
pub const DEFAULT_MAX_BYTES: usize = 1024 * 1024;

/// The bounds [`canonical_json`] enforces. Bounded by default; there is no unbounded mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CanonicalLimits {
    /// Deepest accepted value, counted as the number of arrays/objects enclosing it (the root is at depth 0).
    ///
    /// Default [`DEFAULT_MAX_DEPTH`] (64): `[[…[1]…]]` with 64 arrays (the `1` at depth 64) is accepted, with 65
    /// arrays it is not. Overflow: [`CanonicalError::TooDeep`].
    pub max_depth: usize,
    /// Most object keys in the whole value (summed over every object, however nested).
    ///
    /// Default [`DEFAULT_MAX_KEYS`] (10 000). Overflow: [`CanonicalError::TooManyKeys`].
    pub max_keys: usize,
    /// Longest accepted canonical serialization, in bytes of UTF-8.
    ///
    /// Default [`DEFAULT_MAX_BYTES`] (1 MiB). Overflow: [`CanonicalError::TooLarge`]; output stops growing at the
    /// limit (plus at most one escaped string), so an oversized value is not serialized in full.
    pub max_bytes: usize,
}

impl Default for CanonicalLimits {
    fn default() -> Self {
        Self {
            max_depth: DEFAULT_MAX_DEPTH,
            max_keys: DEFAULT_MAX_KEYS,
            max_bytes: DEFAULT_MAX_BYTES,
        }
    }
}

/// SHA-256 of the canonical JSON of an approval's arguments: the argument half of an approval's binding.
///
/// `Display` prints 64 lowercase hex digits (DeepChat's `argumentsHash`).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct ArgsHash([u8; 32]);

impl ArgsHash {
    /// Canonicalizes `args` under `limits` and hashes the result.
    ///
    /// # Errors
    /// Any [`CanonicalError`] from [`canonical_json`].
    pub fn of(args: &Value, limits: &CanonicalLimits) -> Result<Self, CanonicalError> {
        let canonical = canonical_json(args, limits)?;
        Ok(Self::of_canonical(&canonical))
    }

    /// Hashes bytes that are already canonical JSON (as returned by [`canonical_json`]).
    pub fn of_canonical(canonical: &[u8]) -> Self {
        Self(Sha256::digest(canonical).into())
    }

    /// The 32 raw digest bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

impl fmt::Display for ArgsHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for byte in self.0 {
            write!(f, "{byte:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for ArgsHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ArgsHash({self})")
    }
}

/// Serializes `value` as canonical JSON: object keys sorted, no whitespace, the bytes `JSON.stringify` would give.
///
/// `{"b":[1.0,-0.0,1e21],"a":"\u0007"}` becomes `{"a":"\u0007","b":[1,0,1e+21]}`:
/// keys sorted by UTF-16 code units; strings escaped as `JSON.stringify` does (`\"`, `\\`, `\b \f \n \r \t`,
/// other controls as `\u00xx`, everything else literal); integers printed exactly; other numbers printed as
/// ECMAScript's `Number::toString` (shortest round-trip digits, `1.0` → `1`, `-0.0` → `0`, exponent from 1e21 and
/// below 1e-6). Integers beyond 2^53 keep every digit (JavaScript would round them).
///
/// # Errors
/// [`CanonicalError::TooDeep`], [`CanonicalError::TooManyKeys`], [`CanonicalError::TooLarge`] past the
/// `limits`; [`CanonicalError::NonFiniteNumber`] for a number that is neither an integer nor a finite `f64`
/// (possible only with serde_json's `arbitrary_precision`). All have code `invalid_request`.
pub fn canonical_json(value: &Value, limits: &CanonicalLimits) -> Result<Vec<u8>, CanonicalError> {
    let mut writer = Writer {
        out: Vec::new(),
        keys: 0,
        limits,
    };
    writer.value(value, 0)?;
    Ok(writer.out)
}

struct Writer<'a> {
    out: Vec<u8>,
    keys: usize,
    limits: &'a CanonicalLimits,
}

impl Writer<'_> {
    fn value(&mut self, value: &Value, depth: usize) -> Result<(), CanonicalError> {
        if depth > self.limits.max_depth {
            return Err(CanonicalError::TooDeep {
                limit: self.limits.max_depth,
            });
        }
        match value {
            Value::Null => self.push(b"null"),
            Value::Bool(true) => self.push(b"true"),
            Value::Bool(false) => self.push(b"false"),
            Value::Number(number) => self.number(number),
            Value::String(text) => self.string(text),
            Value::Array(items) => {
                self.push(b"[")?;
                for (index, item) in items.iter().enumerate() {
                    if index > 0 {
                        self.push(b",")?;
                    }
                    self.value(item, depth + 1)?;
                }
                self.push(b"]")
            }
            Value::Object(map) => self.object(map, depth),
        }
    }

    fn object(&mut self, map: &Map<String, Value>, depth: usize) -> Result<(), CanonicalError> {
        self.keys = self.keys.saturating_add(map.len());
        if self.keys > self.limits.max_keys {
            return Err(CanonicalError::TooManyKeys {
                limit: self.limits.max_keys,
            });
        }
        let mut entries: Vec<(&String, &Value)> = map.iter().collect();
        entries.sort_by(|(left, _), (right, _)| utf16_order(left, right));
        self.push(b"{")?;
        for (index, (key, item)) in entries.into_iter().enumerate() {
            if index > 0 {
                self.push(b",")?;
            }
            self.string(key)?;
            self.push(b":")?;
            self.value(item, depth + 1)?;
        }
        self.push(b"}")
    }

    fn number(&mut self, number: &Number) -> Result<(), CanonicalError> {
        let mut text = String::new();
        if let Some(int) = number.as_i64() {
            let _ = write!(text, "{int}");
        } else if let Some(int) = number.as_u64() {
            let _ = write!(text, "{int}");
        } else {
            match number.as_f64() {
                Some(float) if float.is_finite() => js_number(float, &mut text),
                _ => return Err(CanonicalError::NonFiniteNumber),
            }
        }
        self.push(text.as_bytes())
    }

    fn string(&mut self, text: &str) -> Result<(), CanonicalError> {
        // Escaping never shortens a string: refuse before copying a string that cannot fit.
        if self.out.len().saturating_add(text.len()).saturating_add(2) > self.limits.max_bytes {
            return Err(self.too_large());
        }
        self.out.push(b'"');
        let mut start = 0;
        for (index, byte) in text.bytes().enumerate() {
            let escape: &[u8] = match byte {
                b'"' => b"\\\"",
                b'\\' => b"\\\\",
                0x08 => b"\\b",
                0x0c => b"\\f",
                b'\n' => b"\\n",
                b'\r' => b"\\r",
                b'\t' => b"\\t",
                0x00..=0x1f => b"",
                _ => continue,
            };
            self.out.extend_from_slice(&text.as_bytes()[start..index]);
            if escape.is_empty() {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                self.out.extend_from_slice(b"\\u00");
                self.out.push(HEX[usize::from(byte >> 4)]);
                self.out.push(HEX[usize::from(byte & 0x0f)]);
            } else {
                self.out.extend_from_slice(escape);
            }
            start = index + 1;
        }
        self.out.extend_from_slice(&text.as_bytes()[start..]);
        self.push(b"\"")
    }

    fn push(&mut self, bytes: &[u8]) -> Result<(), CanonicalError> {
        self.out.extend_from_slice(bytes);
        if self.out.len() > self.limits.max_bytes {
            return Err(self.too_large());
        }
        Ok(())
    }

    fn too_large(&self) -> CanonicalError {
        CanonicalError::TooLarge {
            limit: self.limits.max_bytes,
        }
    }
}

/// JavaScript's `<` on strings: lexicographic over UTF-16 code units (differs from byte order only when a
/// supplementary-plane character meets one in U+E000..=U+FFFF).
fn utf16_order(left: &str, right: &str) -> Ordering {
    left.encode_utf16().cmp(right.encode_utf16())
}

/// ECMAScript `Number::toString(x)` (ECMA-262, "Number::toString", radix 10) for a finite `x`.
///
/// Rust's `{:e}` gives the shortest digits that round-trip, which is the `s`/`k`/`n` the spec asks for.
fn js_number(x: f64, out: &mut String) {
    if x == 0.0 {
        out.push('0');
        return;
    }
    if x < 0.0 {
        out.push('-');
    }
    let scientific = format!("{:e}", x.abs());
    let (mantissa, exponent) = scientific
        .split_once('e')
        .unwrap_or((scientific.as_str(), "0"));
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let exponent: i64 = exponent.parse().unwrap_or(0);
    let k = digits.len() as i64;
    let n = exponent + 1;
    if k <= n && n <= 21 {
        out.push_str(&digits);
        out.extend(std::iter::repeat_n('0', (n - k) as usize));
    } else if 0 < n && n <= 21 {
        let (whole, fraction) = digits.split_at(n as usize);
        out.push_str(whole);
        out.push('.');
        out.push_str(fraction);
    } else if -6 < n && n <= 0 {
        out.push_str("0.");
        out.extend(std::iter::repeat_n('0', (-n) as usize));
        out.push_str(&digits);
    } else {
        let (first, rest) = digits.split_at(1);
        out.push_str(first);
        if !rest.is_empty() {
            out.push('.');
            out.push_str(rest);
        }
        out.push('e');
        out.push(if n > 0 { '+' } else { '-' });
        let _ = write!(out, "{}", (n - 1).abs());
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn canonical(value: &Value) -> String {
        String::from_utf8(canonical_json(value, &CanonicalLimits::default()).unwrap()).unwrap()
    }

    fn check(input: Value, expect: &str) {
        assert_eq!(canonical(&input), expect, "input {input}");
    }

    fn nested_arrays(levels: usize, innermost: Value) -> Value {
        (0..levels).fold(innermost, |inner, _| Value::Array(vec![inner]))
    }

    #[test]
    fn sorts_keys_at_every_level_and_drops_whitespace() {
        check(
            json!({"b": {"z": 1, "y": [ {"d": null, "c": true} ]}, "a": "x"}),
            r#"{"a":"x","b":{"y":[{"c":true,"d":null}],"z":1}}"#,
        );
    }

    #[test]
    fn key_order_is_utf16_code_units_like_javascript() {
        // U+FF61 is one UTF-16 unit 0xFF61; U+1F600 is the surrogate pair 0xD83D 0xDE00, which sorts first in
        // JavaScript although its UTF-8 bytes sort after.
        let value = json!({"\u{ff61}": 1, "\u{1f600}": 2, "a": 3});
        assert_eq!(
            canonical(&value),
            "{\"a\":3,\"\u{1f600}\":2,\"\u{ff61}\":1}"
        );
    }

    #[test]
    fn escapes_strings_like_json_stringify() {
        check(
            json!("q\"b\\\u{8}\u{c}\n\r\t\u{0}\u{1f}\u{7f}\u{2028}é"),
            "\"q\\\"b\\\\\\b\\f\\n\\r\\t\\u0000\\u001f\u{7f}\u{2028}é\"",
        );
    }

    #[test]
    fn numbers_print_as_javascript_does() {
        // Expected strings are what `String(x)` gives in JavaScript (ECMA-262 Number::toString).
        let cases: &[(f64, &str)] = &[
            (1.0, "1"),
            (-0.0, "0"),
            (1.5, "1.5"),
            (-2.25, "-2.25"),
            (0.1, "0.1"),
            (1e21, "1e+21"),
            (1.5e21, "1.5e+21"),
            (1e20, "100000000000000000000"),
            (123456789012345680000.0, "123456789012345680000"),
            (0.000001, "0.000001"),
            (1e-7, "1e-7"),
            (1.25e-7, "1.25e-7"),
            (5e-324, "5e-324"),
            (f64::MAX, "1.7976931348623157e+308"),
            (0.1 + 0.2, "0.30000000000000004"),
        ];
        for (float, expect) in cases {
            check(json!(float), expect);
        }
        check(json!(u64::MAX), "18446744073709551615");
        check(json!(i64::MIN), "-9223372036854775808");
        check(json!(3), "3");
    }

    #[test]
    fn equal_values_hash_equal_whatever_the_key_order() {
        let limits = CanonicalLimits::default();
        let first: Value = serde_json::from_str(r#"{"a":1,"b":{"c":2.0,"d":[3]}}"#).unwrap();
        let second: Value = serde_json::from_str(r#"{"b":{"d":[3],"c":2},"a":1}"#).unwrap();
        assert_eq!(
            ArgsHash::of(&first, &limits).unwrap(),
            ArgsHash::of(&second, &limits).unwrap()
        );
        let other = json!({"a": 1, "b": {"c": 2, "d": [4]}});
        assert_ne!(
            ArgsHash::of(&first, &limits).unwrap(),
            ArgsHash::of(&other, &limits).unwrap()
        );
    }

    #[test]
    fn hash_is_sha256_of_the_canonical_bytes_in_hex() {
        // sha256("{}") — a published test vector for the two bytes `{}`.
        let hash = ArgsHash::of(&json!({}), &CanonicalLimits::default()).unwrap();
        assert_eq!(
            hash.to_string(),
            "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
        );
        assert_eq!(format!("{hash:?}"), format!("ArgsHash({hash})"));
    }

    #[test]
    fn depth_limit_holds_at_the_limit_and_fails_one_past() {
        let limits = CanonicalLimits::default();
        assert!(canonical_json(&nested_arrays(64, json!(1)), &limits).is_ok());
        assert!(canonical_json(&nested_arrays(64, json!([])), &limits).is_ok());
        assert!(canonical_json(&nested_arrays(65, json!([])), &limits).is_err());
        assert_eq!(
            canonical_json(&nested_arrays(65, json!(1)), &limits),
            Err(CanonicalError::TooDeep { limit: 64 })
        );
        let objects = (0..65).fold(json!(1), |inner, _| json!({ "k": inner }));
        assert_eq!(
            canonical_json(&objects, &limits),
            Err(CanonicalError::TooDeep { limit: 64 })
        );
    }

    #[test]
    fn key_limit_counts_keys_across_nested_objects() {
        let limits = CanonicalLimits::default();
        let flat =
            |count: usize| Value::Object((0..count).map(|i| (format!("k{i}"), json!(0))).collect());
        assert!(canonical_json(&flat(10_000), &limits).is_ok());
        assert_eq!(
            canonical_json(&flat(10_001), &limits),
            Err(CanonicalError::TooManyKeys { limit: 10_000 })
        );
        // 9 999 keys in an inner object plus its outer key plus one more: 10 001 in all.
        let nested = json!({"outer": flat(9_999), "x": 1});
        assert_eq!(
            canonical_json(&nested, &limits),
            Err(CanonicalError::TooManyKeys { limit: 10_000 })
        );
        assert!(canonical_json(&json!({"outer": flat(9_999)}), &limits).is_ok());
    }

    #[test]
    fn byte_limit_holds_at_exactly_one_mib_and_fails_one_byte_past() {
        let limits = CanonicalLimits::default();
        // A string of n bytes serializes to n + 2 bytes with its quotes.
        let exact = Value::String("a".repeat(DEFAULT_MAX_BYTES - 2));
        assert_eq!(
            canonical_json(&exact, &limits).unwrap().len(),
            DEFAULT_MAX_BYTES
        );
        let over = Value::String("a".repeat(DEFAULT_MAX_BYTES - 1));
        assert_eq!(
            canonical_json(&over, &limits),
            Err(CanonicalError::TooLarge {
                limit: DEFAULT_MAX_BYTES
            })
        );
        // Escapes count as their serialized length: a 1-byte control char costs 6.
        let escaped = Value::String("\u{1}".repeat(DEFAULT_MAX_BYTES / 6 + 1));
        assert_eq!(
            canonical_json(&escaped, &limits),
            Err(CanonicalError::TooLarge {
                limit: DEFAULT_MAX_BYTES
            })
        );
        // Many small values cross the limit too, not only one big string.
        let many = Value::Array(vec![json!(1); DEFAULT_MAX_BYTES / 2]);
        assert_eq!(
            canonical_json(&many, &limits),
            Err(CanonicalError::TooLarge {
                limit: DEFAULT_MAX_BYTES
            })
        );
    }

    #[test]
    fn limits_are_configurable_and_checked_exactly() {
        let limits = CanonicalLimits {
            max_depth: 1,
            max_keys: 2,
            max_bytes: 14,
        };
        assert_eq!(canonical(&json!({"a":[1]})), r#"{"a":[1]}"#);
        assert!(canonical_json(&json!({"a":[]}), &limits).is_ok());
        assert_eq!(
            canonical_json(&json!({"a":[1]}), &limits),
            Err(CanonicalError::TooDeep { limit: 1 })
        );
        assert_eq!(
            canonical_json(&json!({"a":1,"b":2,"c":3}), &limits),
            Err(CanonicalError::TooManyKeys { limit: 2 })
        );
        assert!(canonical_json(&json!({"a":1,"b":22}), &limits).is_ok()); // 14 bytes
        assert_eq!(
            canonical_json(&json!({"a":1,"b":222}), &limits),
            Err(CanonicalError::TooLarge { limit: 14 })
        );
    }

    #[test]
    fn every_canonical_error_has_code_invalid_request() {
        let errors = [
            CanonicalError::TooDeep { limit: 1 },
            CanonicalError::TooManyKeys { limit: 1 },
            CanonicalError::TooLarge { limit: 1 },
            CanonicalError::NonFiniteNumber,
        ];
        let reasons: Vec<_> = errors.iter().map(CanonicalError::reason).collect();
        assert_eq!(
            reasons,
            [
                "too_deep",
                "too_many_keys",
                "too_large",
                "non_finite_number"
            ]
        );
        assert!(errors.iter().all(|error| error.code() == "invalid_request"));
    }
}
