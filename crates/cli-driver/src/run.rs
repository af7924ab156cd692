//! Running a prepared call on `agentwire-process`, and the sans-IO mapping of how it ended to a result.
//!
//! Source: `protocols/cli-driver.md`, "Execution" and "Error mapping"; the seed `agentproto-driver-cli.txt`,
//! "Completion, timeouts, and orphaned children".

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use agentwire_process::{
    CancellationToken, ChildConfig, Command, StdoutItem, StopPlan, WaitOutcome,
};
use serde_json::Value;

use crate::Limits;
use crate::error::{ErrorCode, ToolError};
use crate::manifest::OutputFormat;
use crate::redact::{REDACTED, Redactor, bounded};
use crate::template::Arg;

/// A call ready to run: the program, the expanded argv, the sandbox environment and where and how long it runs.
///
/// `Debug` shows the argv with secret-bearing arguments as `***` and the environment as names only.
pub struct Invocation {
    pub(crate) tool: String,
    pub(crate) driver: String,
    pub(crate) program: PathBuf,
    pub(crate) argv: Vec<Arg>,
    pub(crate) env: BTreeMap<String, String>,
    pub(crate) cwd: PathBuf,
    pub(crate) timeout: Duration,
    pub(crate) output_format: OutputFormat,
    pub(crate) exit_codes: BTreeMap<i32, Option<ErrorCode>>,
    pub(crate) redactor: Redactor,
    pub(crate) limits: Limits,
}

/// A successful call's result.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct ToolOutput {
    /// stdout as text or parsed JSON, secrets redacted.
    pub output: Output,
    /// The exit code (0, or a code the manifest maps to `ok`).
    pub exit_code: i32,
    /// Whether stdout went past [`Limits::max_stdout_bytes`] (the rest was discarded).
    pub stdout_truncated: bool,
    /// The stderr tail (lossy UTF-8, secrets redacted).
    pub stderr: String,
    /// Whether stderr went past [`Limits::max_stderr_bytes`] (the oldest bytes were dropped).
    pub stderr_truncated: bool,
}

/// What a successful call produced.
#[derive(Clone, Debug, PartialEq)]
pub enum Output {
    /// `outputFormat: text`: stdout, lossy UTF-8.
    Text(String),
    /// `outputFormat: json`: stdout parsed.
    Json(Value),
}

impl Output {
    /// As a JSON value: the text as a string, or the parsed document.
    pub fn to_value(&self) -> Value {
        match self {
            Output::Text(text) => Value::String(text.clone()),
            Output::Json(value) => value.clone(),
        }
    }
}

impl Invocation {
    /// The tool id.
    pub fn tool(&self) -> &str {
        &self.tool
    }

    /// The driver id.
    pub fn driver(&self) -> &str {
        &self.driver
    }

    /// The resolved program.
    pub fn program(&self) -> &std::path::Path {
        &self.program
    }

    /// The argv after the program, each secret-bearing argument as `***`, for logs and echoes.
    pub fn redacted_argv(&self) -> Vec<String> {
        self.argv
            .iter()
            .map(|a| {
                if a.secret {
                    REDACTED.to_owned()
                } else {
                    self.redactor.redact(&a.text)
                }
            })
            .collect()
    }

    /// The names of the environment variables the child gets (values are never shown).
    pub fn env_names(&self) -> impl Iterator<Item = &str> {
        self.env.keys().map(String::as_str)
    }

    /// The working directory.
    pub fn cwd(&self) -> &std::path::Path {
        &self.cwd
    }

    /// The timeout: `timeout_override_ms`, else the tool's `timeout_ms`, else [`Limits::default_timeout`].
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Spawns the program (no shell, its own process group, exactly the sandbox environment, stdin closed) and
    /// waits for its exit, plus the drain window for output already written.
    ///
    /// On `cancel` or the timeout, the whole process group gets SIGTERM, then SIGKILL after
    /// [`Limits::kill_grace`]. A grandchild that keeps stdout open does not delay completion past the drain
    /// window; whatever is left of the group then is killed. A process that left the group with `setsid` is out
    /// of reach (no cgroups).
    ///
    /// # Errors
    ///
    /// [`ToolError`]: `spawn_failed`, `timeout`, `cancelled`, the exit code's semantic code (see
    /// [`classify_exit`]), `output_parse_failed`.
    pub async fn run(self, cancel: &CancellationToken) -> Result<ToolOutput, ToolError> {
        tracing::debug!(
            tool = %self.tool,
            driver = %self.driver,
            program = %self.program.display(),
            argv = ?self.redacted_argv(),
            "tool call"
        );
        let mut command = Command::new(&self.program);
        for arg in &self.argv {
            if arg.secret {
                command.arg_redacted(&arg.text);
            } else {
                command.arg(&arg.text);
            }
        }
        command
            .envs(&self.env)
            .current_dir(&self.cwd)
            .stdout_bytes()
            .config(ChildConfig {
                drain_window: self.limits.drain_window,
                stderr_tail_bytes: self.limits.max_stderr_bytes,
                ..ChildConfig::default()
            });
        let mut child = match command.spawn() {
            Ok(child) => child,
            Err(e) => {
                let message = bounded(
                    &self.redactor.redact(&e.to_string()),
                    self.limits.max_message_bytes,
                );
                return Err(ToolError::new(ErrorCode::SpawnFailed, message));
            }
        };
        child.stdin().close().await;
        let stdout = child.take_stdout();
        let max_stdout = self.limits.max_stdout_bytes;
        let collect = async move {
            let mut kept = Vec::new();
            let mut truncated = false;
            if let Some(mut stdout) = stdout {
                while let Some(item) = stdout.next().await {
                    if let StdoutItem::Bytes(bytes) = item {
                        let room = max_stdout.saturating_sub(kept.len());
                        if bytes.len() > room {
                            truncated = true;
                        }
                        kept.extend_from_slice(&bytes[..bytes.len().min(room)]);
                    }
                }
            }
            (kept, truncated)
        };
        let plan = StopPlan::new()
            .stdin_grace(Duration::ZERO)
            .term_grace(self.limits.kill_grace);
        let wait = child.wait_or_stop(cancel, Some(self.timeout), plan);
        let (outcome, (stdout, stdout_truncated)) = tokio::join!(wait, collect);
        let stderr_tail = child.stderr_tail();
        stderr_tail.finished().await;
        let (stderr_bytes, stderr_total) = stderr_tail.snapshot();
        let ended = match outcome {
            WaitOutcome::Exited(status) => Ended::Exited(status.code_or_signal()),
            WaitOutcome::TimedOut(_) => Ended::TimedOut(self.timeout),
            WaitOutcome::Cancelled(_) => Ended::Cancelled,
            other => Ended::Exited(other.status().code_or_signal()),
        };
        let result = finish(
            ended,
            Captured {
                stdout: &stdout,
                stdout_truncated,
                stderr: &stderr_bytes,
                stderr_truncated: stderr_total > stderr_bytes.len() as u64,
            },
            self.output_format,
            &self.exit_codes,
            &self.redactor,
            &self.limits,
        );
        match &result {
            Ok(out) => {
                tracing::debug!(tool = %self.tool, exit_code = out.exit_code, "tool call succeeded")
            }
            Err(err) => tracing::debug!(tool = %self.tool, error = %err, "tool call failed"),
        }
        result
    }
}

impl fmt::Debug for Invocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Invocation")
            .field("tool", &self.tool)
            .field("driver", &self.driver)
            .field("program", &self.program)
            .field("argv", &self.redacted_argv())
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .field("cwd", &self.cwd)
            .field("timeout", &self.timeout)
            .field("output_format", &self.output_format)
            .finish_non_exhaustive()
    }
}

/// How a run ended, as [`finish`] sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ended {
    /// The program exited with this code (or 128 + the signal that killed it).
    Exited(i32),
    /// The driver's timeout elapsed and the group was stopped.
    TimedOut(Duration),
    /// The caller cancelled and the group was stopped.
    Cancelled,
}

/// What a run wrote.
#[derive(Clone, Copy, Debug)]
pub struct Captured<'a> {
    /// stdout, at most [`Limits::max_stdout_bytes`].
    pub stdout: &'a [u8],
    /// Whether more stdout was written than kept.
    pub stdout_truncated: bool,
    /// The stderr tail.
    pub stderr: &'a [u8],
    /// Whether stderr was longer than the tail.
    pub stderr_truncated: bool,
}

/// The semantic outcome of exit code `code`: `None` for success, else the error code.
///
/// The manifest's `exitCodes` win; then AIP-29's reserved codes: 0 ok, 2 `usage_error`, 4 `auth_required`,
/// 124 `timeout`, 137 `killed`; 1 and every other code `upstream_error`.
pub fn classify_exit(code: i32, overrides: &BTreeMap<i32, Option<ErrorCode>>) -> Option<ErrorCode> {
    if let Some(mapped) = overrides.get(&code) {
        return *mapped;
    }
    match code {
        0 => None,
        2 => Some(ErrorCode::UsageError),
        4 => Some(ErrorCode::AuthRequired),
        124 => Some(ErrorCode::Timeout),
        137 => Some(ErrorCode::Killed),
        _ => Some(ErrorCode::UpstreamError),
    }
}

/// Sans-IO: the result of a run from how it ended and what it wrote. Every text is redacted and bounded.
///
/// # Errors
///
/// `timeout`, `cancelled`, the code of [`classify_exit`] (message: stderr trimmed, else `exit code N`),
/// `output_parse_failed` (JSON format and stdout is not one JSON document).
pub fn finish(
    ended: Ended,
    captured: Captured<'_>,
    format: OutputFormat,
    exit_codes: &BTreeMap<i32, Option<ErrorCode>>,
    redactor: &Redactor,
    limits: &Limits,
) -> Result<ToolOutput, ToolError> {
    let stderr = redactor.redact(&String::from_utf8_lossy(captured.stderr));
    let fail = |code: ErrorCode, message: String, exit_code: Option<i32>| {
        let mut err = ToolError::new(
            code,
            bounded(&redactor.redact(&message), limits.max_message_bytes),
        );
        err.exit_code = exit_code;
        err.stdout_truncated = captured.stdout_truncated;
        err.stderr_truncated = captured.stderr_truncated;
        err
    };
    let code = match ended {
        Ended::TimedOut(after) => {
            return Err(fail(
                ErrorCode::Timeout,
                format!(
                    "timed out after {} ms; the process group was stopped",
                    after.as_millis()
                ),
                None,
            ));
        }
        Ended::Cancelled => {
            return Err(fail(
                ErrorCode::Cancelled,
                "cancelled; the process group was stopped".to_owned(),
                None,
            ));
        }
        Ended::Exited(code) => code,
    };
    if let Some(error) = classify_exit(code, exit_codes) {
        let trimmed = stderr.trim();
        let message = if trimmed.is_empty() {
            format!("exit code {code}")
        } else {
            trimmed.to_owned()
        };
        return Err(fail(error, message, Some(code)));
    }
    let text = String::from_utf8_lossy(captured.stdout);
    let output = match format {
        OutputFormat::Text => Output::Text(redactor.redact(&text)),
        OutputFormat::Json => match serde_json::from_str::<Value>(&text) {
            Ok(value) => Output::Json(redactor.redact_json(value)),
            Err(e) => {
                let hint = if captured.stdout_truncated {
                    " (stdout was truncated)"
                } else {
                    ""
                };
                return Err(fail(
                    ErrorCode::OutputParseFailed,
                    format!("stdout is not JSON: {e}{hint}"),
                    Some(code),
                ));
            }
        },
    };
    Ok(ToolOutput {
        output,
        exit_code: code,
        stdout_truncated: captured.stdout_truncated,
        stderr: bounded(&stderr, limits.max_stderr_bytes),
        stderr_truncated: captured.stderr_truncated,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn captured<'a>(stdout: &'a str, stderr: &'a str) -> Captured<'a> {
        Captured {
            stdout: stdout.as_bytes(),
            stdout_truncated: false,
            stderr: stderr.as_bytes(),
            stderr_truncated: false,
        }
    }

    fn check(
        ended: Ended,
        stdout: &str,
        stderr: &str,
        format: OutputFormat,
        expect: Result<Value, (&str, &str)>,
    ) {
        let overrides = BTreeMap::from([(9, Some(ErrorCode::RateLimited)), (3, None)]);
        let redactor = Redactor::new(["hunter2"]);
        let got = finish(
            ended,
            captured(stdout, stderr),
            format,
            &overrides,
            &redactor,
            &Limits::default(),
        );
        match (got, expect) {
            (Ok(out), Ok(value)) => assert_eq!(out.output.to_value(), value),
            (Err(err), Err((code, message))) => {
                assert_eq!((err.code.as_str(), err.message.as_str()), (code, message));
            }
            (got, expect) => panic!("{got:?} vs {expect:?}"),
        }
    }

    #[test]
    fn exit_codes_map_to_semantic_errors() {
        use OutputFormat::{Json, Text};
        check(Ended::Exited(0), "hi\n", "", Text, Ok(json!("hi\n")));
        check(Ended::Exited(3), "ok", "", Text, Ok(json!("ok")));
        check(
            Ended::Exited(1),
            "",
            "  boom\n",
            Text,
            Err(("upstream_error", "boom")),
        );
        check(
            Ended::Exited(2),
            "",
            "",
            Text,
            Err(("usage_error", "exit code 2")),
        );
        check(
            Ended::Exited(4),
            "",
            "login with hunter2",
            Text,
            Err(("auth_required", "login with ***")),
        );
        check(
            Ended::Exited(9),
            "",
            "",
            Text,
            Err(("rate_limited", "exit code 9")),
        );
        check(
            Ended::Exited(124),
            "",
            "",
            Text,
            Err(("timeout", "exit code 124")),
        );
        check(
            Ended::Exited(137),
            "",
            "",
            Text,
            Err(("killed", "exit code 137")),
        );
        check(
            Ended::Exited(77),
            "",
            "",
            Text,
            Err(("upstream_error", "exit code 77")),
        );
        check(
            Ended::Exited(0),
            r#"{"a":"hunter2"}"#,
            "",
            Json,
            Ok(json!({"a": "***"})),
        );
        check(
            Ended::Exited(0),
            "not json",
            "",
            Json,
            Err((
                "output_parse_failed",
                "stdout is not JSON: expected ident at line 1 column 2",
            )),
        );
        check(Ended::Exited(0), "hunter2", "", Text, Ok(json!("***")));
        check(
            Ended::TimedOut(Duration::from_millis(50)),
            "",
            "",
            Text,
            Err((
                "timeout",
                "timed out after 50 ms; the process group was stopped",
            )),
        );
        check(
            Ended::Cancelled,
            "",
            "",
            Text,
            Err(("cancelled", "cancelled; the process group was stopped")),
        );
        assert!(
            classify_exit(9, &BTreeMap::from([(9, Some(ErrorCode::RateLimited))]))
                .is_some_and(ErrorCode::retryable)
        );
    }

    #[test]
    fn the_error_message_is_bounded() {
        let limits = Limits {
            max_message_bytes: 10,
            ..Limits::default()
        };
        let at = finish(
            Ended::Exited(1),
            captured("", "0123456789"),
            OutputFormat::Text,
            &BTreeMap::new(),
            &Redactor::default(),
            &limits,
        );
        assert_eq!(at.unwrap_err().message, "0123456789");
        let over = finish(
            Ended::Exited(1),
            captured("", "0123456789a"),
            OutputFormat::Text,
            &BTreeMap::new(),
            &Redactor::default(),
            &limits,
        );
        assert_eq!(over.unwrap_err().message, "0123456789…");
    }
}
