//! `awp-host`: the headless AWP host — chat with agent CLIs, persisted threads, resumable sessions.
//!
//! This binary is argument parsing, wiring and rendering only; the domain (store, agents, turn runner,
//! attachments) lives in `agentwire-host`. Exit codes: see [`exit::Exit`] and `docs/awp-host.md`.

mod acp;
mod cli;
mod commands;
mod exit;
mod interactive;
mod render;
mod serve;
mod tools;

use std::process::ExitCode;

use clap::Parser;

use crate::exit::Exit;

/// A failure to report: `awp-host: error: <message> (<code>)` on stderr, then exit with `exit`.
#[derive(Debug)]
pub struct Failure {
    /// Exit status.
    pub exit: Exit,
    /// Stable snake_case code.
    pub code: String,
    /// Human message (lowercase, no trailing period).
    pub message: String,
    /// The JSON object of this failure was already printed on stdout (a failed turn's result record): `--json`
    /// must not print a second one.
    pub json_printed: bool,
}

impl Failure {
    /// A failure with an explicit message.
    pub fn new(exit: Exit, code: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            exit,
            code: code.into(),
            message: message.into(),
            json_printed: false,
        }
    }

    /// A failure whose message is `err` and its source chain joined with `: `.
    pub fn from_error(
        exit: Exit,
        code: impl Into<String>,
        err: &(dyn std::error::Error + 'static),
    ) -> Self {
        Self::new(exit, code, error_chain(err))
    }

    /// The same failure, marked as already printed as JSON ([`Failure::json_printed`]).
    pub fn printed_as_json(mut self) -> Self {
        self.json_printed = true;
        self
    }

    /// The one JSON object `--json`/`--jsonl` print for a failure that has no result record:
    /// `{"type":"error","error":{"code","message"},"exit_code":N}`.
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "type": "error",
            "error": {"code": self.code, "message": self.message},
            "exit_code": self.exit.code(),
        })
    }
}

/// Whether the command line asks for JSON output: a `--json` or `--jsonl` before any `--` (after it come an
/// agent's own arguments, `check -- CMD ARGS…`). Read before parsing, so that usage errors are JSON too.
fn wants_json(argv: &[std::ffi::OsString]) -> bool {
    argv.iter()
        .skip(1)
        .take_while(|a| a.as_os_str() != "--")
        .any(|a| a == "--json" || a == "--jsonl")
}

/// The stable code of a clap usage error.
fn clap_code(kind: clap::error::ErrorKind) -> &'static str {
    use clap::error::ErrorKind as K;
    match kind {
        K::InvalidValue | K::ValueValidation | K::InvalidUtf8 => "invalid_value",
        K::UnknownArgument => "unknown_argument",
        K::InvalidSubcommand => "unknown_command",
        K::MissingRequiredArgument | K::MissingSubcommand => "missing_argument",
        K::ArgumentConflict => "argument_conflict",
        K::TooManyValues | K::TooFewValues | K::WrongNumberOfValues | K::NoEquals => {
            "wrong_number_of_values"
        }
        _ => "usage_error",
    }
}

/// clap's message up to its usage block, on one line, without the `error: ` prefix.
fn clap_message(error: &clap::Error) -> String {
    let text = error.render().to_string();
    let message = text
        .lines()
        .take_while(|line| !line.starts_with("Usage:") && !line.starts_with("For more"))
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    let message = message.trim_start_matches("error: ");
    if message.is_empty() {
        "invalid arguments".to_owned()
    } else {
        message.to_owned()
    }
}

/// clap's rendered error split for the human form: the message (as [`clap_message`], without its `tip:` lines)
/// and the lines to print after it (the `tip:` lines, then the `Usage:` block and `For more information…`).
fn clap_human(error: &clap::Error) -> (String, String) {
    let text = error.render().to_string();
    let mut message = Vec::new();
    let mut tips = Vec::new();
    let mut rest = Vec::new();
    for line in text.lines() {
        if !rest.is_empty() || line.starts_with("Usage:") || line.starts_with("For more") {
            rest.push(line);
        } else if line.trim_start().starts_with("tip:") {
            tips.push(line);
        } else if !line.trim().is_empty() {
            message.push(line.trim());
        }
    }
    let message = message.join(" ");
    let message = message.trim_start_matches("error: ");
    let message = if message.is_empty() {
        "invalid arguments"
    } else {
        message
    };
    let mut after = String::new();
    for block in [tips.join("\n"), rest.join("\n")] {
        let block = block.trim_end();
        if !block.is_empty() {
            after.push('\n');
            after.push_str(block);
            after.push('\n');
        }
    }
    (message.to_owned(), after)
}

/// Prints a failure: the JSON object on stdout when `json` (unless it was printed already, or stdout is the
/// thing that broke), and always `awp-host: error: <message> (<code>)` on stderr.
fn report(failure: &Failure, json: bool) {
    if json
        && !failure.json_printed
        && failure.code != "output_write_failed"
        && commands::print_out(&format!("{}\n", failure.json())).is_err()
    {
        // Stdout is gone as well: the stderr line below still says it.
    }
    // Messages may quote peer or file data: controls are made visible.
    eprintln!(
        "awp-host: error: {} ({})",
        agentwire_host::store::escape_controls(&failure.message, true),
        failure.code
    );
}

/// `err` followed by each of its sources, joined with `: `.
pub fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut message = err.to_string();
    let mut source = err.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !message.contains(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
        source = s.source();
    }
    message
}

fn main() -> ExitCode {
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let json = wants_json(&argv);
    let cli = match cli::Cli::try_parse_from(&argv) {
        Ok(cli) => cli,
        Err(e) if json && e.use_stderr() => {
            report(
                &Failure::new(Exit::Usage, clap_code(e.kind()), clap_message(&e)),
                true,
            );
            return Exit::Usage.into();
        }
        // Usage errors read like every other error: `awp-host: error: <message> (<code>)`, then clap's tips and
        // usage lines; the exit code stays clap's 2 (= Exit::Usage). Help and version (and help shown for a
        // missing subcommand) are clap's own.
        Err(e)
            if e.use_stderr()
                && e.kind() != clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand =>
        {
            let (message, after) = clap_human(&e);
            report(
                &Failure::new(Exit::Usage, clap_code(e.kind()), message),
                false,
            );
            eprint!("{after}");
            return Exit::Usage.into();
        }
        Err(e) => e.exit(),
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("AWP_HOST_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("error"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            let failure = Failure::new(
                Exit::Protocol,
                "internal",
                format!("cannot start the async runtime: {e}"),
            );
            report(&failure, json);
            return Exit::Protocol.into();
        }
    };
    match runtime.block_on(commands::run(cli)) {
        Ok(exit) => exit.into(),
        Err(failure) => {
            report(&failure, json);
            failure.exit.into()
        }
    }
}
