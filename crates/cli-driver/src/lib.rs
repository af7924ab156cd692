//! agentproto CLI drivers: wrap a binary as a tool provider, as `@agentproto/driver-cli` does (AIP-29/AIP-30).
//!
//! An app bundle declares tools (`.agentproto/tools/<id>/TOOL.md`: id, description, version, an `inputs` JSON
//! Schema) and drivers (`.agentproto/drivers/<id>/DRIVER.md` of `kind: cli`: a `bin`, and for each tool it
//! implements an argv template such as `["pr", "create", "--title", "${input.title}"]`). [`AppBundle::call`]
//! validates the input against the schema, reads the driver's secrets from the host environment, expands the
//! argv, runs the binary through `agentwire-process` and maps its exit code and output to a [`ToolOutput`] or a
//! [`ToolError`] with a semantic [`ErrorCode`].
//!
//! What it deliberately is not: not a shell (argv arrays only, nothing is split or globbed), not a registry of
//! remote drivers (only app-bundled manifests), not an HTTP driver, and not a sandbox beyond the environment,
//! working directory and process group: the binary runs with the host user's rights.
//!
//! # Shape
//!
//! - Sans-IO: [`manifest`] (parse and validate manifests from text), [`template`] (parse and expand argv
//!   tokens), [`run::finish`] and [`run::classify_exit`] (how a run ended → result), [`redact`].
//! - IO: [`AppBundle::load`] reads the manifests and resolves each driver's `cwd` (canonicalized, symlinks
//!   resolved, refused when outside the app root); [`Invocation::run`] spawns and waits.
//!
//! # Invariants
//!
//! - Inputs are validated against the tool's schema before anything is spawned (`input_invalid`).
//! - The child's environment is exactly `sandbox.env.pass` (from the host; a secret of the same name wins) plus
//!   `sandbox.env.set`. `PATH` and `HOME` are not implicit (the binary itself is found on the host's `PATH`).
//! - Completion is the direct child's exit plus the drain window (2 s), never pipe close; timeout and cancel
//!   stop the whole process group (SIGTERM, then SIGKILL after 2 s). A process that left the group with `setsid`
//!   is not reached (no cgroups or subreaper): this is documented, not handled.
//! - Secret values are `***` in every error, log line, echoed argv and `Debug` output; [`ToolError`] texts are
//!   redacted when built. Secrets reach argv only through `${secrets.NAME}` with `NAME` in `auth.state.env`.
//! - stdout is kept up to 16 MiB and stderr's last 1 MiB; truncation is reported on the result or error.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use agentwire_cli_driver::{AppBundle, CallContext};
//! let bundle = AppBundle::load(std::path::Path::new("."))?;
//! let out = bundle
//!     .call("echo", &serde_json::json!({"msg": "hi"}), &CallContext::from_process_env())
//!     .await?;
//! println!("{:?}", out.output);
//! # Ok(()) }
//! ```

#![warn(missing_docs)]

mod bundle;
mod error;
pub mod manifest;
pub mod redact;
pub mod run;
pub mod template;

use std::collections::BTreeMap;
use std::time::Duration;

pub use agentwire_process::CancellationToken;
pub use bundle::{AppBundle, Driver};
pub use error::{ErrorCode, LoadError, LoadErrorKind, ToolError};
pub use manifest::{DriverManifest, Implementation, OutputFormat, ToolManifest};
pub use run::{Invocation, Output, ToolOutput};

/// Bounds of manifests and calls. Every field documents its default and what happens past it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest TOOL.md/DRIVER.md file, in bytes. Default 256 KiB; larger files fail with `manifest_too_large`.
    pub max_manifest_bytes: usize,
    /// stdout kept per call, in bytes. Default 16 MiB; the rest is read and discarded, `stdout_truncated` set.
    pub max_stdout_bytes: usize,
    /// stderr kept per call (the last bytes), in bytes. Default 1 MiB; older bytes are dropped,
    /// `stderr_truncated` set.
    pub max_stderr_bytes: usize,
    /// Longest error message, in bytes. Default 4 KiB; longer ones are cut at a character boundary with `…`.
    pub max_message_bytes: usize,
    /// Most arguments after expansion (including `binArgs`). Default 1024; more fail with `argv_too_large`.
    pub max_args: usize,
    /// Most argv bytes after expansion (each argument's length + 1). Default 256 KiB; more fail with
    /// `argv_too_large`.
    pub max_argv_bytes: usize,
    /// Timeout of a call when neither `timeout_override_ms` nor the tool's `timeout_ms` is set. Default 120 s.
    pub default_timeout: Duration,
    /// After SIGTERM to the group (timeout, cancel), how long before SIGKILL. Default 2 s.
    pub kill_grace: Duration,
    /// After the direct child's exit, how long output already written may still arrive. Default 2 s.
    pub drain_window: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_manifest_bytes: 256 * 1024,
            max_stdout_bytes: 16 * 1024 * 1024,
            max_stderr_bytes: 1024 * 1024,
            max_message_bytes: 4 * 1024,
            max_args: 1024,
            max_argv_bytes: 256 * 1024,
            default_timeout: Duration::from_secs(120),
            kill_grace: Duration::from_secs(2),
            drain_window: Duration::from_secs(2),
        }
    }
}

/// What a call may read from its host: the host environment (for `sandbox.env.pass`, secrets and `PATH`),
/// explicit secrets (win over the environment), and a cancellation token.
///
/// `Debug` shows variable names only.
#[derive(Clone, Default)]
pub struct CallContext {
    /// The host environment.
    pub env: BTreeMap<String, String>,
    /// Secrets by name; looked up before `env`.
    pub secrets: BTreeMap<String, String>,
    /// Cancelling it stops the call's process group (`cancelled`).
    pub cancel: CancellationToken,
}

impl CallContext {
    /// This process's environment (variables that are not UTF-8 are skipped) and a fresh token.
    pub fn from_process_env() -> Self {
        Self {
            env: std::env::vars_os()
                .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
                .collect(),
            ..Self::default()
        }
    }
}

impl std::fmt::Debug for CallContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallContext")
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .field("secrets", &self.secrets.keys().collect::<Vec<_>>())
            .field("cancelled", &self.cancel.is_cancelled())
            .finish()
    }
}
