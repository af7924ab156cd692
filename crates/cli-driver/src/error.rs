//! Errors: [`LoadError`] for manifests and bundles, [`ToolError`] with a semantic [`ErrorCode`] for calls.
//!
//! Source: `protocols/cli-driver.md`, "Error mapping" (AIP-14 semantic codes plus the driver's own).

use std::fmt;
use std::path::{Path, PathBuf};

/// What kind of load failure a [`LoadError`] is; [`LoadErrorKind::code`] is its stable snake_case code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LoadErrorKind {
    /// The file or directory could not be read (`io_error`).
    Io,
    /// The manifest is larger than [`crate::Limits::max_manifest_bytes`] (`manifest_too_large`).
    TooLarge,
    /// No YAML front matter between `---` lines at the start of the file (`front_matter_missing`).
    FrontMatterMissing,
    /// The front matter is not valid YAML or a field has the wrong type or is missing (`manifest_invalid`).
    Invalid,
    /// A driver's `cwd` resolves outside the app root, or does not exist (`cwd_outside_app`).
    CwdOutsideApp,
    /// Two manifests declare the same id, or the id does not match its directory (`duplicate_id`).
    DuplicateId,
    /// A driver implements a tool the bundle does not declare, or a version range it does not match
    /// (`unknown_tool`).
    UnknownTool,
}

impl LoadErrorKind {
    /// The stable snake_case code.
    pub fn code(self) -> &'static str {
        match self {
            LoadErrorKind::Io => "io_error",
            LoadErrorKind::TooLarge => "manifest_too_large",
            LoadErrorKind::FrontMatterMissing => "front_matter_missing",
            LoadErrorKind::Invalid => "manifest_invalid",
            LoadErrorKind::CwdOutsideApp => "cwd_outside_app",
            LoadErrorKind::DuplicateId => "duplicate_id",
            LoadErrorKind::UnknownTool => "unknown_tool",
        }
    }
}

/// A manifest or bundle that cannot be loaded: the file, the line (1-based, in the whole file, when known), the
/// field (a dotted path such as `implements.0.version`, when known) and what is wrong.
///
/// Display: `.agentproto/drivers/gh/DRIVER.md:7: implements.0.version: invalid semver range: …`.
/// Manifests hold no secret values (only the names of environment variables), so nothing is redacted here.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadError {
    /// The file (or directory) at fault.
    pub path: PathBuf,
    /// 1-based line in `path`, when known.
    pub line: Option<usize>,
    /// Dotted path of the field at fault, when known.
    pub field: Option<String>,
    /// The kind, whose [`LoadErrorKind::code`] is stable.
    pub kind: LoadErrorKind,
    /// What is wrong (lowercase, no trailing period).
    pub message: String,
}

impl LoadError {
    pub(crate) fn new(kind: LoadErrorKind, path: &Path, message: impl Into<String>) -> Self {
        Self {
            path: path.to_owned(),
            line: None,
            field: None,
            kind,
            message: message.into(),
        }
    }

    pub(crate) fn at(mut self, line: Option<usize>, field: Option<String>) -> Self {
        self.line = line;
        self.field = field;
        self
    }

    /// The stable snake_case code of [`LoadError::kind`].
    pub fn code(&self) -> &'static str {
        self.kind.code()
    }
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.path.display())?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        f.write_str(": ")?;
        if let Some(field) = &self.field {
            write!(f, "{field}: ")?;
        }
        f.write_str(&self.message)
    }
}

impl std::error::Error for LoadError {}

/// The semantic code of a failed tool call (AIP-14 codes, AIP-29's reserved exit codes, and the driver's own).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum ErrorCode {
    /// The input does not match the tool's `inputs` schema, or is not JSON (`input_invalid`).
    InputInvalid,
    /// The output does not match the tool's contract (`output_invalid`; manifest mappings only).
    OutputInvalid,
    /// The upstream refused the credentials (`unauthorised`).
    Unauthorised,
    /// The upstream has no such thing (`not_found`).
    NotFound,
    /// The upstream throttled the call (`rate_limited`, retryable).
    RateLimited,
    /// The call ran out of time, ours or the tool's exit 124 (`timeout`, retryable).
    Timeout,
    /// The tool failed: exit 1 and any other unmapped non-zero exit (`upstream_error`).
    UpstreamError,
    /// Something in the driver itself failed (`internal`).
    Internal,
    /// The tool needs credentials: exit 4 (`auth_required`).
    AuthRequired,
    /// The tool rejected its arguments: exit 2 (`usage_error`).
    UsageError,
    /// The tool was killed by SIGKILL not sent by the driver: exit 137 (`killed`).
    Killed,
    /// `outputFormat: json` and stdout is not JSON (`output_parse_failed`).
    OutputParseFailed,
    /// The binary could not be started (`spawn_failed`).
    SpawnFailed,
    /// The caller cancelled the call; the process group was stopped (`cancelled`).
    Cancelled,
    /// A secret named in `auth.state.env` is not set in the host environment (`missing_secret`).
    MissingSecret,
    /// No tool with this id in the bundle (`tool_not_found`).
    ToolNotFound,
    /// The tool is declared but no driver implements it (`no_driver`).
    NoDriver,
    /// The expanded argv is over [`crate::Limits::max_args`] or [`crate::Limits::max_argv_bytes`]
    /// (`argv_too_large`).
    ArgvTooLarge,
}

impl ErrorCode {
    /// Every code, for tables and tests.
    pub const ALL: [ErrorCode; 18] = [
        ErrorCode::InputInvalid,
        ErrorCode::OutputInvalid,
        ErrorCode::Unauthorised,
        ErrorCode::NotFound,
        ErrorCode::RateLimited,
        ErrorCode::Timeout,
        ErrorCode::UpstreamError,
        ErrorCode::Internal,
        ErrorCode::AuthRequired,
        ErrorCode::UsageError,
        ErrorCode::Killed,
        ErrorCode::OutputParseFailed,
        ErrorCode::SpawnFailed,
        ErrorCode::Cancelled,
        ErrorCode::MissingSecret,
        ErrorCode::ToolNotFound,
        ErrorCode::NoDriver,
        ErrorCode::ArgvTooLarge,
    ];

    /// The stable snake_case code.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::InputInvalid => "input_invalid",
            ErrorCode::OutputInvalid => "output_invalid",
            ErrorCode::Unauthorised => "unauthorised",
            ErrorCode::NotFound => "not_found",
            ErrorCode::RateLimited => "rate_limited",
            ErrorCode::Timeout => "timeout",
            ErrorCode::UpstreamError => "upstream_error",
            ErrorCode::Internal => "internal",
            ErrorCode::AuthRequired => "auth_required",
            ErrorCode::UsageError => "usage_error",
            ErrorCode::Killed => "killed",
            ErrorCode::OutputParseFailed => "output_parse_failed",
            ErrorCode::SpawnFailed => "spawn_failed",
            ErrorCode::Cancelled => "cancelled",
            ErrorCode::MissingSecret => "missing_secret",
            ErrorCode::ToolNotFound => "tool_not_found",
            ErrorCode::NoDriver => "no_driver",
            ErrorCode::ArgvTooLarge => "argv_too_large",
        }
    }

    /// The code named `text` (as in a manifest's `exitCodes`), if any.
    pub fn parse(text: &str) -> Option<ErrorCode> {
        Self::ALL.into_iter().find(|c| c.as_str() == text)
    }

    /// Whether trying the same call again may succeed: `rate_limited` and `timeout`.
    pub fn retryable(self) -> bool {
        matches!(self, ErrorCode::RateLimited | ErrorCode::Timeout)
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A failed tool call. Every text in it has been redacted (secret values are `***`) when it was built, so
/// `Display` and `Debug` are safe to log.
///
/// Display: `auth_required: gh: not logged in` (the code, then the message).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolError {
    /// The semantic code.
    pub code: ErrorCode,
    /// What happened: the tool's stderr trimmed (bounded, redacted), or `exit code N`, or the driver's reason.
    pub message: String,
    /// For `input_invalid`: the JSON pointer of the offending instance (`/title`, or empty for the root).
    pub field: Option<String>,
    /// The tool's exit code (or 128 + signal) when it ran to an exit.
    pub exit_code: Option<i32>,
    /// Whether stdout went past [`crate::Limits::max_stdout_bytes`] (the rest was discarded).
    pub stdout_truncated: bool,
    /// Whether stderr went past [`crate::Limits::max_stderr_bytes`] (the oldest bytes were dropped).
    pub stderr_truncated: bool,
}

impl ToolError {
    pub(crate) fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            field: None,
            exit_code: None,
            stdout_truncated: false,
            stderr_truncated: false,
        }
    }

    /// Whether trying again may succeed (see [`ErrorCode::retryable`]).
    pub fn retryable(&self) -> bool {
        self.code.retryable()
    }
}

impl fmt::Display for ToolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for ToolError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_stable_and_round_trip() {
        let expect = [
            "input_invalid",
            "output_invalid",
            "unauthorised",
            "not_found",
            "rate_limited",
            "timeout",
            "upstream_error",
            "internal",
            "auth_required",
            "usage_error",
            "killed",
            "output_parse_failed",
            "spawn_failed",
            "cancelled",
            "missing_secret",
            "tool_not_found",
            "no_driver",
            "argv_too_large",
        ];
        let got: Vec<&str> = ErrorCode::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(got, expect);
        for code in ErrorCode::ALL {
            assert_eq!(ErrorCode::parse(code.as_str()), Some(code));
            assert_eq!(
                code.retryable(),
                matches!(code, ErrorCode::RateLimited | ErrorCode::Timeout)
            );
        }
        assert_eq!(ErrorCode::parse("ok"), None);
    }

    #[test]
    fn load_error_display_names_file_line_and_field() {
        let e = LoadError::new(LoadErrorKind::Invalid, Path::new("a/TOOL.md"), "bad")
            .at(Some(3), Some("id".to_owned()));
        assert_eq!(e.to_string(), "a/TOOL.md:3: id: bad");
        assert_eq!(e.code(), "manifest_invalid");
    }
}
