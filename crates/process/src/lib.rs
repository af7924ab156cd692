//! Supervised child processes for agentwire: the one way the workspace starts a program.
//!
//! `agentwire-process` runs a program from an argv array (never through a shell) with an environment built from an
//! allowlist plus explicit entries, in its own process group, with piped stdin/stdout/stderr. It decides when a
//! child is *done* (its exit, plus a bounded drain window for output), and how it is *stopped* (a ladder from stdin
//! EOF to SIGKILL of the whole group). It is not a protocol crate: it knows JSON Lines only as a framing of stdout
//! (via `agentwire-jsonl`), and nothing about AWP, ACP or JSON-RPC. All IO lives here, in tokio tasks; the only
//! sans-IO piece is the stderr tail ring. Unix is the supported platform (process groups, signals via `rustix`).
//!
//! # How it behaves (invariants 4–6 of this repository's `docs/architecture.md`)
//!
//! - **No shell.** [`Command::new`] takes a program and [`Command::arg`]s; nothing is split, quoted or globbed.
//!   Clippy forbids `std`/`tokio` `process::Command::new` everywhere else in the workspace.
//! - **Allowlisted environment.** A [`Command`] starts with an *empty* environment. [`Command::inherit_os_env`]
//!   copies only [`OS_ENV_ALLOWLIST`] names (PATH, HOME, USER, LANG, `LC_*`, TERM, TMPDIR, …);
//!   [`Command::inherit_env`] copies named variables; [`Command::env`] sets explicit entries, which always win.
//!   `CLAUDECODE` ([`ENV_DENYLIST`]) never passes through an inherit helper, and [`Command::env_remove`] wins
//!   over the inherit helpers in any call order. Names must be non-empty without `=` or NUL, else the spawn
//!   fails with [`SpawnError::InvalidEnvName`]. `Debug` shows variable names only (an invalid name only up to its
//!   `=`), and arguments added with [`Command::arg_redacted`] as `***`; [`SpawnError`] messages name only the
//!   program (and the working directory or a redacted variable name where that is the fault).
//! - **Own process group.** The child is spawned with `process_group(0)`: its pid is its group id, and its
//!   descendants (MCP servers, `npx` children) share it unless they leave it with `setsid` — such escapees are out
//!   of reach without cgroups. Dropping a [`Child`] sends SIGKILL to the whole group, and by default whatever is
//!   left of the group when the drain window after the exit ends is killed too
//!   ([`ChildConfig::kill_orphans_after_drain`]), so no process of a run outlives it and the group id (the child's
//!   pid) is retired before the OS can recycle it.
//! - **Dies with its parent (Linux, opt-in).** With [`ChildConfig::kill_on_parent_death`] the direct child gets
//!   `PR_SET_PDEATHSIG` = SIGKILL before exec, so a parent killed with `kill -9` does not leave it running (off by
//!   default: see its caveats).
//! - **Completion is the exit, never pipe close.** [`Child::wait`] resolves when the direct child exits. Stdout and
//!   stderr are read until EOF or until exit + [`ChildConfig::drain_window`] (default 2 s), whichever comes first,
//!   so a grandchild holding a pipe cannot hang anyone; output already in the pipe at the deadline is still
//!   delivered ([`ChildConfig::late_drain_max_bytes`]). Every duration (graces, window, timeout) may be
//!   `Duration::MAX`, meaning no deadline.
//! - **Stop ladder.** [`Child::stop`] with a [`StopPlan`]: optional final stdin line → stdin EOF → `stdin_grace`
//!   (5 s) → SIGTERM to the group → `term_grace` (3 s) → SIGKILL to the group. It is idempotent and reports the
//!   [`StopStep`] that ended the child. Whatever ended it, the remaining group members get SIGKILL.
//!   [`Child::wait_or_stop`] runs the same ladder on cancellation (a `CancellationToken`) or a timeout.
//! - **Stdio.** [`Stdin`] is a clonable writer (one write attempt per call, typed [`StdinError`]s, never a
//!   `SIGPIPE` crash); [`Stdout`] yields [`StdoutItem::Frame`]s (JSONL, bounded by `agentwire_jsonl::Limits`) or
//!   [`StdoutItem::Bytes`]; [`StderrTail`] keeps the last [`ChildConfig::stderr_tail_bytes`] (128 KiB), counts
//!   the total, and wakes followers when new bytes arrive ([`StderrTail::changed`]).
//! - **Exit status.** [`ExitStatus`] has the code or the signal; [`ExitStatus::code_or_signal`] gives 128 + n for
//!   a signal.
//!
//! # What is deliberately absent
//!
//! - No shell helper, no string command lines, no `inherit everything` environment mode.
//! - Children that leave the group with `setsid`/`setpgid` are not tracked (no cgroups, no `PR_SET_CHILD_SUBREAPER`).
//! - Non-Unix platforms: the code has `cfg` fallbacks (no process groups; the ladder ends by killing the direct
//!   child) but is neither built nor tested there.
//!
//! # Code map
//!
//! - `command`: [`Command`], the environment allowlist and the one `tokio::process::Command::new` call site.
//! - `child`: [`Child`]/[`ChildHandle`], the exit supervisor task, the stop ladder, [`ChildConfig`].
//! - `stdio`: [`Stdin`], [`Stdout`] and [`StderrTail`], and the pipe readers with the drain-window rule.
//! - `signal`: group signals via `rustix`. `tail`: the sans-IO stderr ring. `error`: [`SpawnError`], [`StdinError`].
//!
//! Spawning needs a tokio runtime with the IO and time drivers (`#[tokio::main]`, or `Builder::enable_all`);
//! the supervisor and the two pipe readers run as tasks on it.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use agentwire_process::{Command, StdoutItem, StopPlan};
//! let mut child = Command::new("awp-agent")
//!     .inherit_os_env()
//!     .stdout_jsonl(agentwire_jsonl::Limits::default())
//!     .spawn()?;
//! let stdin = child.stdin();
//! let mut stdout = child.take_stdout().ok_or("stdout is taken once")?;
//! stdin.write_line(br#"{"type":"user","message":{"role":"user","content":"hi"}}"#).await?;
//! while let Some(StdoutItem::Frame(frame)) = stdout.next().await {
//!     println!("{frame:?}");
//! }
//! let outcome = child.stop(StopPlan::default()).await;
//! println!("ended by {} with {}", outcome.ended_by.as_str(), outcome.status);
//! # Ok(()) }
//! ```

#![warn(missing_docs)]

mod child;
mod command;
mod error;
mod signal;
mod stdio;
mod tail;

pub use child::{
    Child, ChildConfig, ChildHandle, ExitStatus, StopOutcome, StopPlan, StopStep, WaitOutcome,
};
pub use command::{Command, ENV_DENYLIST, OS_ENV_ALLOWLIST, OS_ENV_ALLOWLIST_PREFIXES};
pub use error::{SpawnError, StdinError};
pub use stdio::{StderrTail, Stdin, Stdout, StdoutEnd, StdoutItem};
pub use tokio_util::sync::CancellationToken;
