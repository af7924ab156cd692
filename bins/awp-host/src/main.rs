//! `awp-host`: the headless AWP host — chat with agent CLIs, persisted threads, resumable sessions.
//!
//! This binary is argument parsing, wiring and rendering only; the domain (store, agents, turn runner,
//! attachments) lives in `agentwire-host`. Exit codes: see [`exit::Exit`] and `docs/awp-host.md`.

mod acp;
mod cli;
mod commands;
mod exit;
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
}

impl Failure {
    /// A failure with an explicit message.
    pub fn new(exit: Exit, code: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            exit,
            code: code.into(),
            message: message.into(),
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
    let cli = cli::Cli::parse();
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
            eprintln!("awp-host: error: cannot start the async runtime: {e} (internal)");
            return Exit::Protocol.into();
        }
    };
    match runtime.block_on(commands::run(cli)) {
        Ok(exit) => exit.into(),
        Err(failure) => {
            // Messages may quote peer or file data: controls are made visible.
            eprintln!(
                "awp-host: error: {} ({})",
                agentwire_host::store::escape_controls(&failure.message, true),
                failure.code
            );
            failure.exit.into()
        }
    }
}
