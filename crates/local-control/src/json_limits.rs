//! Shape limits for untrusted JSON: nesting depth, object keys and total nodes.
//!
//! DeepChat bounds every parsed request (`parseBoundedJsonBytes` in its kernel contracts): depth 64, 10 000 keys,
//! 50 000 nodes, and no `__proto__`/`constructor`/`prototype` keys. Same counting rules here.
//! The walk is iterative, so a deep value cannot overflow the stack here; `serde_json`'s own recursion limit (128)
//! protects the parse that comes before it.

use serde_json::Value;

/// Limits on the shape of one JSON value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct JsonLimits {
    /// Deepest value: the top-level value has depth 0, each array element or object member one more than its
    /// container. Default 64.
    pub max_depth: usize,
    /// Object keys summed over the whole value. Default 10 000.
    pub max_keys: usize,
    /// Values of any kind (scalars, arrays, objects) summed over the whole value. Default 50 000.
    pub max_nodes: usize,
}

impl Default for JsonLimits {
    fn default() -> Self {
        JsonLimits {
            max_depth: 64,
            max_keys: 10_000,
            max_nodes: 50_000,
        }
    }
}

/// A JSON value outside its limits, or not JSON at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum JsonShapeError {
    /// The bytes are not one JSON value (or nest past `serde_json`'s 128 levels).
    #[error("body is not valid json")]
    Syntax,
    /// An object key JavaScript treats specially (`__proto__`, `constructor`, `prototype`), refused as DeepChat
    /// refuses it.
    #[error("json key is not allowed: {key}")]
    UnsafeKey {
        /// The key.
        key: &'static str,
    },
    /// Nesting deeper than `max_depth`.
    #[error("json nesting is deeper than {max}")]
    TooDeep {
        /// The limit.
        max: usize,
    },
    /// More object keys than `max_keys`.
    #[error("json has more than {max} object keys")]
    TooManyKeys {
        /// The limit.
        max: usize,
    },
    /// More values than `max_nodes`.
    #[error("json has more than {max} values")]
    TooManyNodes {
        /// The limit.
        max: usize,
    },
}

/// Checks `value` against `limits`.
///
/// # Errors
/// The first limit found exceeded.
pub fn check(value: &Value, limits: JsonLimits) -> Result<(), JsonShapeError> {
    let mut stack: Vec<(&Value, usize)> = vec![(value, 0)];
    let mut keys = 0usize;
    let mut nodes = 0usize;
    while let Some((value, depth)) = stack.pop() {
        nodes += 1;
        if nodes > limits.max_nodes {
            return Err(JsonShapeError::TooManyNodes {
                max: limits.max_nodes,
            });
        }
        if depth > limits.max_depth {
            return Err(JsonShapeError::TooDeep {
                max: limits.max_depth,
            });
        }
        match value {
            Value::Array(items) => stack.extend(items.iter().map(|item| (item, depth + 1))),
            Value::Object(map) => {
                for (key, item) in map {
                    keys += 1;
                    if keys > limits.max_keys {
                        return Err(JsonShapeError::TooManyKeys {
                            max: limits.max_keys,
                        });
                    }
                    if let Some(unsafe_key) =
                        UNSAFE_KEYS.iter().find(|candidate| **candidate == key)
                    {
                        return Err(JsonShapeError::UnsafeKey { key: unsafe_key });
                    }
                    stack.push((item, depth + 1));
                }
            }
            _ => {}
        }
    }
    Ok(())
}

const UNSAFE_KEYS: [&str; 3] = ["__proto__", "constructor", "prototype"];

/// Parses `bytes` as one JSON value and checks it against `limits`.
///
/// # Errors
/// [`JsonShapeError::Syntax`] for anything `serde_json` refuses, else as [`check`].
pub fn parse(bytes: &[u8], limits: JsonLimits) -> Result<Value, JsonShapeError> {
    let value: Value = serde_json::from_slice(bytes).map_err(|_| JsonShapeError::Syntax)?;
    check(&value, limits)?;
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn nested(depth: usize) -> Value {
        let mut value = json!(1);
        for _ in 0..depth {
            value = json!([value]);
        }
        value
    }

    #[test]
    fn depth_at_the_limit_passes_and_one_past_fails() {
        let limits = JsonLimits::default();
        assert_eq!(check(&nested(64), limits), Ok(()));
        assert_eq!(
            check(&nested(65), limits),
            Err(JsonShapeError::TooDeep { max: 64 })
        );
    }

    #[test]
    fn keys_at_the_limit_pass_and_one_past_fails() {
        let limits = JsonLimits {
            max_nodes: usize::MAX,
            ..JsonLimits::default()
        };
        let object =
            |n: usize| Value::Object((0..n).map(|i| (format!("k{i}"), json!(0))).collect());
        assert_eq!(check(&object(10_000), limits), Ok(()));
        assert_eq!(
            check(&object(10_001), limits),
            Err(JsonShapeError::TooManyKeys { max: 10_000 })
        );
    }

    #[test]
    fn nodes_at_the_limit_pass_and_one_past_fails() {
        let limits = JsonLimits::default();
        // The array itself is one node.
        assert_eq!(check(&Value::Array(vec![json!(0); 49_999]), limits), Ok(()));
        assert_eq!(
            check(&Value::Array(vec![json!(0); 50_000]), limits),
            Err(JsonShapeError::TooManyNodes { max: 50_000 })
        );
    }

    #[test]
    fn an_empty_container_at_the_depth_limit_passes() {
        let mut value = json!([]);
        for _ in 0..64 {
            value = json!([value]);
        }
        // The innermost `[]` is at depth 64.
        assert_eq!(check(&value, JsonLimits::default()), Ok(()));
        assert_eq!(
            check(&json!([value]), JsonLimits::default()),
            Err(JsonShapeError::TooDeep { max: 64 })
        );
    }

    #[test]
    fn prototype_keys_are_refused_anywhere() {
        for key in UNSAFE_KEYS {
            let value = json!({"a": [{key: 1}]});
            assert_eq!(
                check(&value, JsonLimits::default()),
                Err(JsonShapeError::UnsafeKey { key })
            );
        }
        assert_eq!(
            check(
                &json!({"proto": 1, "constructors": 2}),
                JsonLimits::default()
            ),
            Ok(())
        );
    }

    #[test]
    fn parse_refuses_non_json_and_very_deep_input_without_panicking() {
        assert_eq!(
            parse(b"{", JsonLimits::default()),
            Err(JsonShapeError::Syntax)
        );
        let deep = "[".repeat(100_000);
        assert_eq!(
            parse(deep.as_bytes(), JsonLimits::default()),
            Err(JsonShapeError::Syntax)
        );
    }
}
