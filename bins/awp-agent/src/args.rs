//! Command-line parsing: exactly the AWP launch arguments, everything else is rejected by a stable code.
//!
//! Hand-written rather than clap-derived so the rule "an unknown argument is a
//! `{"type":"result","subtype":"startup_error","is_error":true,"result":"unsupported_argument"}` line and exit 1"
//! holds for every input, including values that look like flags.

use std::path::PathBuf;

/// The parsed command line.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Args {
    /// `--model <m>`: the provider model id (ignored by the built-in demo provider).
    pub model: Option<String>,
    /// `--resume <id>` / `--resume=<id>`: the native session id to continue.
    pub resume: Option<String>,
    /// `--mcp-config <path>`: consumed and ignored (this agent is not an MCP host).
    pub mcp_config: Option<PathBuf>,
    /// `-h` / `--help`.
    pub help: bool,
    /// `-V` / `--version`.
    pub version: bool,
}

/// Why the command line was refused. Crosses the process boundary as the `result` of a `startup_error` line.
#[non_exhaustive]
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ArgsError {
    /// An argument this agent does not know, or a compatibility flag with an unexpected value.
    #[error("unsupported argument")]
    Unsupported,
    /// A flag that takes a value came last, without its value.
    #[error("missing value for {flag}")]
    MissingValue {
        /// The flag, e.g. `--model`.
        flag: &'static str,
    },
}

impl ArgsError {
    /// Stable machine-readable code: `unsupported_argument` or `missing_argument_value`.
    pub fn code(&self) -> &'static str {
        match self {
            ArgsError::Unsupported => "unsupported_argument",
            ArgsError::MissingValue { .. } => "missing_argument_value",
        }
    }
}

/// Parses the arguments after the program name.
///
/// Accepted: `--model M`, `--resume ID`, `--mcp-config PATH` (each also as `--flag=value`), the stream-json
/// compatibility flags `--output-format stream-json`, `--input-format stream-json`, `--print`, `--verbose`
/// (no-ops), `-h`/`--help`, `-V`/`--version`.
///
/// # Errors
/// [`ArgsError::Unsupported`] for anything else (including a positional prompt, and `--output-format` or
/// `--input-format` with a value other than `stream-json`); [`ArgsError::MissingValue`] for a trailing flag.
pub fn parse(args: &[String]) -> Result<Args, ArgsError> {
    let mut parsed = Args::default();
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((flag, value)) if flag.starts_with("--") => (flag, Some(value.to_owned())),
            _ => (arg.as_str(), None),
        };
        let mut take = |name: &'static str| -> Result<String, ArgsError> {
            match &inline {
                Some(value) => Ok(value.clone()),
                None => iter
                    .next()
                    .cloned()
                    .ok_or(ArgsError::MissingValue { flag: name }),
            }
        };
        match flag {
            "--model" => parsed.model = Some(take("--model")?),
            "--resume" => parsed.resume = Some(take("--resume")?),
            "--mcp-config" => parsed.mcp_config = Some(PathBuf::from(take("--mcp-config")?)),
            "--output-format" => expect_stream_json(&take("--output-format")?)?,
            "--input-format" => expect_stream_json(&take("--input-format")?)?,
            "--print" | "--verbose" if inline.is_none() => {}
            "-h" | "--help" if inline.is_none() => parsed.help = true,
            "-V" | "--version" if inline.is_none() => parsed.version = true,
            _ => return Err(ArgsError::Unsupported),
        }
    }
    Ok(parsed)
}

fn expect_stream_json(value: &str) -> Result<(), ArgsError> {
    if value == "stream-json" {
        Ok(())
    } else {
        Err(ArgsError::Unsupported)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(argv: &[&str], expect: Result<Args, ArgsError>) {
        let argv: Vec<String> = argv.iter().map(|s| (*s).to_owned()).collect();
        assert_eq!(parse(&argv), expect, "{argv:?}");
    }

    #[test]
    fn launch_arguments_are_accepted() {
        check(&[], Ok(Args::default()));
        check(
            &[
                "--output-format",
                "stream-json",
                "--input-format",
                "stream-json",
                "--print",
                "--verbose",
                "--model",
                "m",
                "--resume",
                "abc",
                "--mcp-config",
                "/tmp/mcp.json",
            ],
            Ok(Args {
                model: Some("m".into()),
                resume: Some("abc".into()),
                mcp_config: Some(PathBuf::from("/tmp/mcp.json")),
                ..Args::default()
            }),
        );
        check(
            &["--resume=-dash-id", "--model=a=b"],
            Ok(Args {
                model: Some("a=b".into()),
                resume: Some("-dash-id".into()),
                ..Args::default()
            }),
        );
        check(
            &["--help"],
            Ok(Args {
                help: true,
                ..Args::default()
            }),
        );
    }

    #[test]
    fn everything_else_is_refused_with_a_stable_code() {
        check(&["hello"], Err(ArgsError::Unsupported));
        check(
            &["--dangerously-skip-permissions"],
            Err(ArgsError::Unsupported),
        );
        check(&["--output-format", "text"], Err(ArgsError::Unsupported));
        check(&["--print=yes"], Err(ArgsError::Unsupported));
        check(
            &["--model"],
            Err(ArgsError::MissingValue { flag: "--model" }),
        );
        assert_eq!(ArgsError::Unsupported.code(), "unsupported_argument");
        assert_eq!(
            ArgsError::MissingValue { flag: "--resume" }.code(),
            "missing_argument_value"
        );
    }
}
