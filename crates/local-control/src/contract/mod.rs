//! Typed params/result DTOs of the local-control methods, shaped as DeepChat's zod route contracts.
//!
//! Every DeepChat method is one zero-sized marker type implementing [`Method`] (its wire name plus its
//! params and result types); [`decode_params`] and [`decode_result`] turn a JSON value into the typed DTO
//! and check the limits zod checks (lengths, ranges, patterns), so a server and a client agree on what is
//! valid without a second schema.
//!
//! Shape rules, taken from zod as DeepChat writes it (`src/shared/contracts/routes/*.routes.ts`):
//! - `.strict()` objects reject unknown keys (`#[serde(deny_unknown_fields)]`); plain `z.object` strips
//!   them (our types ignore unknown keys there).
//! - `.optional()` means the key may be absent (never `null`); `.nullable()` means the key is present and
//!   may be `null`; `.nullable().optional()` accepts both (a double `Option`).
//! - `z.string().max(n)` counts UTF-16 code units (JavaScript string length); we count the same way.
//! - `.trim()` is a transform: the stored value is the trimmed one, so our deserializers trim too.
//!
//! Methods of our own (not in DeepChat) live in [`ours`] and say so.

pub mod artifacts;
pub mod cli;
pub mod model_config;
pub mod ocr;
pub mod ours;
pub mod providers;
pub mod runs;
pub mod settings;

use serde::Serialize;
use serde::de::DeserializeOwned;

/// Protocol (1) and surface (2) versions that `cli.version`/`cli.capabilities` must report: the transport's.
pub use crate::limits::{PROTOCOL_VERSION, SURFACE_VERSION};

/// Wire names of the DeepChat methods typed here (issue 7's CLI surface).
pub const DEEPCHAT_METHODS: [&str; 13] = [
    "cli.status",
    "cli.version",
    "cli.capabilities",
    "cli.doctor",
    "sessions.runDetached",
    "runs.get",
    "runs.cancel",
    "events.subscribe",
    "artifacts.describe",
    "artifacts.read",
    "artifacts.delete",
    "settings.getPublic",
    "settings.updatePublic",
];

/// Wire names of agentwire's additive methods ([`ours`]).
pub const OUR_METHODS: [&str; 6] = [
    "threads.list",
    "threads.get",
    "approvals.listPending",
    "runs.exportTranscript",
    "agentTokens.issue",
    "agentTokens.revoke",
];

/// Largest integer JavaScript represents exactly (`Number.MAX_SAFE_INTEGER`); DeepChat bounds sizes by it.
pub const MAX_SAFE_INTEGER: u64 = 9_007_199_254_740_991;

/// A value that does not satisfy its DeepChat contract.
///
/// The code of every variant maps to the envelope error code `invalid_request` on the wire (exit 2 in the CLI).
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ContractError {
    /// The JSON does not have the contract's shape (missing or unknown key, wrong type, unknown enum value).
    #[error("params or result do not match the contract: {detail}")]
    Shape {
        /// serde's description, cut to 256 characters.
        detail: String,
    },
    /// A field has the right type but breaks a limit or pattern.
    #[error("field {field} is invalid: {problem}")]
    Field {
        /// The field's wire name (`prompt`, `changes[0].value`, …).
        field: &'static str,
        /// What is wrong.
        problem: Problem,
    },
}

/// What is wrong with a field ([`ContractError::Field`]).
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Problem {
    /// Shorter than the minimum length (or empty after trimming).
    TooShort,
    /// Longer than the maximum length or more items than allowed.
    TooLong,
    /// Only whitespace where text is required.
    Blank,
    /// A number outside its allowed range.
    OutOfRange,
    /// Does not match the required pattern.
    BadFormat,
    /// A list holds the same value twice.
    Duplicate,
    /// Two fields contradict each other (e.g. expiry not after creation).
    Inconsistent,
}

impl Problem {
    /// Stable snake_case code.
    pub fn code(self) -> &'static str {
        match self {
            Problem::TooShort => "too_short",
            Problem::TooLong => "too_long",
            Problem::Blank => "blank",
            Problem::OutOfRange => "out_of_range",
            Problem::BadFormat => "bad_format",
            Problem::Duplicate => "duplicate",
            Problem::Inconsistent => "inconsistent",
        }
    }
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.code())
    }
}

impl ContractError {
    /// Stable machine-readable code: `invalid_shape` or the field problem's code.
    pub fn code(&self) -> &'static str {
        match self {
            ContractError::Shape { .. } => "invalid_shape",
            ContractError::Field { problem, .. } => problem.code(),
        }
    }

    /// The envelope error code this maps to (always `invalid_request`).
    pub fn wire_code(&self) -> &'static str {
        "invalid_request"
    }

    pub(crate) fn field(field: &'static str, problem: Problem) -> Self {
        ContractError::Field { field, problem }
    }

    fn shape(error: &serde_json::Error) -> Self {
        let mut detail = error.to_string();
        if let Some((cut, _)) = detail.char_indices().nth(256) {
            detail.truncate(cut);
        }
        ContractError::Shape { detail }
    }
}

/// The limits of a value that serde alone cannot express.
pub trait Validate {
    /// Checks every limit of the contract.
    ///
    /// # Errors
    /// The first [`ContractError::Field`] found.
    fn validate(&self) -> Result<(), ContractError>;
}

/// One local-control method: its wire name and its params and result DTOs.
pub trait Method {
    /// The wire name (`x-deepchat-method` header and envelope `method`), e.g. `runs.get`.
    const NAME: &'static str;
    /// The `params` DTO.
    type Params: Serialize + DeserializeOwned + Validate;
    /// The `result` DTO.
    type Result: Serialize + DeserializeOwned + Validate;
}

/// Decodes and validates a request's `params` for method `M`.
///
/// # Errors
/// [`ContractError::Shape`] when the JSON does not deserialize, [`ContractError::Field`] when a limit is broken.
pub fn decode_params<M: Method>(params: serde_json::Value) -> Result<M::Params, ContractError> {
    let value: M::Params = serde_json::from_value(params).map_err(|e| ContractError::shape(&e))?;
    value.validate()?;
    Ok(value)
}

/// Decodes and validates a response's `result` for method `M` (what DeepChat's client does with
/// `contract.output.safeParse`).
///
/// # Errors
/// As [`decode_params`].
pub fn decode_result<M: Method>(result: serde_json::Value) -> Result<M::Result, ContractError> {
    let value: M::Result = serde_json::from_value(result).map_err(|e| ContractError::shape(&e))?;
    value.validate()?;
    Ok(value)
}

/// Params of methods whose input is `z.object({}).default({})`: an object whose keys are ignored
/// (`null`, arrays and scalars are refused).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(from = "serde_json::Map<String, serde_json::Value>")]
pub struct NoParams {}

impl From<serde_json::Map<String, serde_json::Value>> for NoParams {
    fn from(_: serde_json::Map<String, serde_json::Value>) -> Self {
        NoParams {}
    }
}

impl Validate for NoParams {
    fn validate(&self) -> Result<(), ContractError> {
        Ok(())
    }
}

/// JavaScript string length (UTF-16 code units), the unit of zod's `.min`/`.max` on strings.
pub(crate) fn js_len(s: &str) -> usize {
    s.encode_utf16().count()
}

/// `z.string().min(min).max(max)` on `value`.
pub(crate) fn check_len(
    field: &'static str,
    value: &str,
    min: usize,
    max: usize,
) -> Result<(), ContractError> {
    let len = js_len(value);
    if len < min {
        return Err(ContractError::field(field, Problem::TooShort));
    }
    if len > max {
        return Err(ContractError::field(field, Problem::TooLong));
    }
    Ok(())
}

/// `value` made only of the characters `allowed` accepts.
pub(crate) fn check_chars(
    field: &'static str,
    value: &str,
    allowed: impl Fn(char) -> bool,
) -> Result<(), ContractError> {
    if value.chars().all(allowed) {
        Ok(())
    } else {
        Err(ContractError::field(field, Problem::BadFormat))
    }
}

/// `base64url` alphabet (`[A-Za-z0-9_-]`).
pub(crate) fn is_base64url(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

/// A number in `min..=max`.
pub(crate) fn check_range<T: PartialOrd>(
    field: &'static str,
    value: T,
    min: T,
    max: T,
) -> Result<(), ContractError> {
    if value < min || value > max {
        Err(ContractError::field(field, Problem::OutOfRange))
    } else {
        Ok(())
    }
}

/// Serde helpers for zod's `.trim()` strings and `.nullable().optional()` fields.
pub(crate) mod serde_util {
    use serde::{Deserialize, Deserializer};

    /// A zod `.optional()` field: absent (via `#[serde(default)]`) or a value, never `null`.
    pub fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
        d: D,
    ) -> Result<Option<T>, D::Error> {
        T::deserialize(d).map(Some)
    }

    /// Deserializes an optional (never `null`) string and trims it (zod `.trim()` is a transform).
    pub fn trimmed_opt<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
        let s = String::deserialize(d)?;
        Ok(Some(trim_js(&s).to_owned()))
    }

    /// As [`trimmed_opt`] for each item of an optional list.
    pub fn trimmed_list_opt<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Vec<String>>, D::Error> {
        let list = Vec::<String>::deserialize(d)?;
        Ok(Some(list.iter().map(|s| trim_js(s).to_owned()).collect()))
    }

    /// A zod `.nullable()` field: must be present, may be `null` (serde would otherwise treat a missing
    /// `Option` field as `None`).
    pub fn nullable<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
        d: D,
    ) -> Result<Option<T>, D::Error> {
        Option::<T>::deserialize(d)
    }

    /// `Some(None)` for an explicit `null`, `Some(Some(v))` for a value; absence is `None` via `#[serde(default)]`.
    pub fn double_option<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
        d: D,
    ) -> Result<Option<Option<T>>, D::Error> {
        Option::<T>::deserialize(d).map(Some)
    }

    /// JavaScript `String.prototype.trim`: strips whitespace and line terminators (Unicode White_Space
    /// plus U+FEFF).
    pub fn trim_js(s: &str) -> &str {
        s.trim_matches(|c: char| c.is_whitespace() || c == '\u{feff}')
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn js_len_counts_utf16_units() {
        assert_eq!(js_len("abc"), 3);
        assert_eq!(js_len("é"), 1);
        assert_eq!(js_len("😀"), 2);
    }

    #[test]
    fn error_codes_are_stable() {
        let shape = serde_json::from_str::<u8>("x").unwrap_err();
        assert_eq!(ContractError::shape(&shape).code(), "invalid_shape");
        let field = ContractError::field("prompt", Problem::Blank);
        assert_eq!(field.code(), "blank");
        assert_eq!(field.wire_code(), "invalid_request");
        assert_eq!(field.to_string(), "field prompt is invalid: blank");
        for (p, c) in [
            (Problem::TooShort, "too_short"),
            (Problem::TooLong, "too_long"),
            (Problem::OutOfRange, "out_of_range"),
            (Problem::BadFormat, "bad_format"),
            (Problem::Duplicate, "duplicate"),
            (Problem::Inconsistent, "inconsistent"),
        ] {
            assert_eq!(p.code(), c);
        }
    }

    #[test]
    fn shape_detail_is_bounded() {
        let long = format!("\"{}\"", "x".repeat(1000));
        let err = serde_json::from_str::<u8>(&long).unwrap_err();
        match ContractError::shape(&err) {
            ContractError::Shape { detail } => assert!(detail.chars().count() <= 256),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn no_params_ignores_keys_but_rejects_null() {
        assert!(serde_json::from_value::<NoParams>(serde_json::json!({"x": 1})).is_ok());
        assert!(serde_json::from_value::<NoParams>(serde_json::json!(null)).is_err());
        assert!(serde_json::from_value::<NoParams>(serde_json::json!([])).is_err());
        assert_eq!(
            serde_json::to_value(NoParams {}).unwrap(),
            serde_json::json!({})
        );
    }
}
