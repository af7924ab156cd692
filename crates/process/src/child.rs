//! `Child`: a running supervised process — exit-based completion, the stop ladder, and kill-on-drop of its group.

use std::fmt;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::{Notify, OnceCell, mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::command::StdoutMode;
use crate::signal::{GroupSignal, signal_group};
use crate::stdio::{self, StderrTail, Stdin, Stdout};

/// Supervision settings of a child. Every field is a bound; see each for its default and what happens past it.
///
/// Construct with `ChildConfig { drain_window: Duration::from_millis(500), ..ChildConfig::default() }`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChildConfig {
    /// After the direct child exits, how long stdout/stderr readers keep waiting for output already in flight.
    ///
    /// Default 2 s. When it elapses with a pipe still open (a grandchild holds it), the reader takes what the pipe
    /// holds at that moment without waiting (see `late_drain_max_bytes`) and ends
    /// ([`crate::StdoutEnd::DrainWindowElapsed`]).
    ///
    /// A window whose end lies past what the clock can represent (`Duration::MAX`) never ends: the readers wait
    /// for EOF, and orphans are not killed at its end (only by [`Child::stop`] or the drop of the [`Child`]).
    pub drain_window: Duration,
    /// How many bytes of stderr are kept (the tail). Default 128 KiB (131 072 bytes).
    ///
    /// Older bytes are dropped from the front; [`StderrTail::snapshot`] reports the total, so truncation is visible.
    pub stderr_tail_bytes: usize,
    /// How many stdout items may wait unconsumed in [`Stdout`]. Default 16 (minimum 1).
    ///
    /// When full, the reader stops reading and the child blocks on its writes (backpressure). Memory held is at most
    /// this many items (each at most the JSONL `max_line_bytes`, or `read_chunk_bytes` in byte mode).
    pub stdout_queue_items: usize,
    /// Size of one read from a pipe, in bytes. Default 64 KiB (minimum 1).
    pub read_chunk_bytes: usize,
    /// After the drain window, at most this many more bytes are taken from a pipe, and only while reads complete
    /// without waiting. Default 1 MiB (Linux's largest pipe buffer). Past it the stream ends; the rest is not read.
    pub late_drain_max_bytes: usize,
    /// When the drain window after the direct child's exit ends, send SIGKILL to whatever is left of its process
    /// group (orphaned grandchildren such as MCP servers or a `sleep` holding a pipe). Default `true`.
    ///
    /// Besides ending orphans with the run, this retires the group id early: the id is the direct child's pid, and
    /// once the group is empty the OS may hand that pid to an unrelated process, so a group signal sent much later
    /// (a late [`Child::stop`] or drop) could reach a stranger. After this kill, later stops and drops signal only
    /// what is still ours. With `false`, orphans live until [`Child::stop`] or the drop of the [`Child`].
    pub kill_orphans_after_drain: bool,
    /// Linux: the direct child gets SIGKILL when the thread that spawned it ends — in practice when this process
    /// dies, even by SIGKILL (`prctl(PR_SET_PDEATHSIG, SIGKILL)`, set between fork and exec; a parent that died
    /// before that point is detected and the spawn fails). Default `false`. Ignored on other platforms.
    ///
    /// SIGKILL rather than SIGTERM: nothing is left to run the stop ladder, and a child that ignores SIGTERM (or a
    /// slow graceful exit) would keep writing to its session while a new host starts the next turn on it. Only the
    /// direct child is reached: grandchildren that it does not end are reparented and live on. Caveats, why it is
    /// off by default: the signal follows the spawning *thread*, so spawn from a thread that lives as long as the
    /// child (a runtime worker, not a short-lived blocking-pool thread); and the pre-exec hook makes the standard
    /// library spawn with fork + `execvp` instead of `posix_spawn`, so a file the kernel cannot execute
    /// (`ENOEXEC`: no `#!` line, an unknown format) is run by `/bin/sh` instead of failing with `not_executable`.
    /// Turn it on for programs that were validated as executables (the host's agents).
    pub kill_on_parent_death: bool,
}

impl Default for ChildConfig {
    fn default() -> Self {
        Self {
            drain_window: Duration::from_secs(2),
            stderr_tail_bytes: 128 * 1024,
            stdout_queue_items: 16,
            read_chunk_bytes: 64 * 1024,
            late_drain_max_bytes: 1024 * 1024,
            kill_orphans_after_drain: true,
            kill_on_parent_death: false,
        }
    }
}

/// How the direct child ended: an exit code, or the signal that killed it.
///
/// Both are `None` only when the OS could not report the status (the wait itself failed).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ExitStatus {
    /// The exit code, when the child exited normally.
    pub code: Option<i32>,
    /// The signal number, when a signal ended the child (Unix).
    pub signal: Option<i32>,
}

impl ExitStatus {
    /// Exit code 0.
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }

    /// The code as a shell reports it: the exit code, or 128 + the signal number (`SIGKILL` → 137), or -1 when
    /// the status is unknown. Source: the shell convention (POSIX Shell Command Language, 2.8.2 "Exit Status for
    /// Commands": a command ended by a signal reports a status above 128; `sh` uses 128 + n), the form in which the
    /// agentproto `driver-cli` docs ("exit-code → semantic error mapping") see a CLI's exit.
    pub fn code_or_signal(&self) -> i32 {
        match (self.code, self.signal) {
            (Some(code), _) => code,
            (None, Some(signal)) => 128 + signal,
            (None, None) => -1,
        }
    }

    fn unknown() -> Self {
        Self {
            code: None,
            signal: None,
        }
    }
}

impl From<std::process::ExitStatus> for ExitStatus {
    fn from(status: std::process::ExitStatus) -> Self {
        #[cfg(unix)]
        let signal = std::os::unix::process::ExitStatusExt::signal(&status);
        #[cfg(not(unix))]
        let signal = None;
        Self {
            code: status.code(),
            signal,
        }
    }
}

impl fmt::Display for ExitStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.code, self.signal) {
            (Some(code), _) => write!(f, "exit code {code}"),
            (None, Some(signal)) => write!(f, "killed by signal {signal}"),
            (None, None) => f.write_str("unknown exit status"),
        }
    }
}

/// The stop ladder: (optional final stdin line) → close stdin → grace → SIGTERM to the group → grace → SIGKILL.
///
/// Source: the AWP agent CLI protocol (`agent-cli-protocol.md`, section "Input JSONL": graceful shutdown can arrive
/// as `{"type":"shutdown"}`, and "the process must also handle ordinary termination"); invariant 4 of this
/// repository's `docs/architecture.md`. Default: no final line, 5 s, 3 s.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StopPlan {
    /// A line written to stdin before closing it (e.g. `{"type":"shutdown"}`); `\n` is appended. Default none.
    pub final_stdin_line: Option<Vec<u8>>,
    /// How long the child gets to exit after the final line and stdin EOF, before SIGTERM. Default 5 s
    /// (Claude Code flushes its session file after stdin EOF). Writing the final line counts against it.
    /// `Duration::MAX` (any grace past what the clock can represent) waits for the exit without a deadline.
    pub stdin_grace: Duration,
    /// How long the group gets to exit after SIGTERM, before SIGKILL. Default 3 s.
    /// `Duration::MAX` (any grace past what the clock can represent) waits for the exit without a deadline.
    pub term_grace: Duration,
}

impl Default for StopPlan {
    fn default() -> Self {
        Self {
            final_stdin_line: None,
            stdin_grace: Duration::from_secs(5),
            term_grace: Duration::from_secs(3),
        }
    }
}

impl StopPlan {
    /// The default ladder (5 s after stdin EOF, 3 s after SIGTERM).
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets [`StopPlan::final_stdin_line`].
    pub fn final_stdin_line(mut self, line: impl Into<Vec<u8>>) -> Self {
        self.final_stdin_line = Some(line.into());
        self
    }

    /// Sets [`StopPlan::stdin_grace`].
    pub fn stdin_grace(mut self, grace: Duration) -> Self {
        self.stdin_grace = grace;
        self
    }

    /// Sets [`StopPlan::term_grace`].
    pub fn term_grace(mut self, grace: Duration) -> Self {
        self.term_grace = grace;
        self
    }
}

/// The step of the stop ladder that ended the direct child.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StopStep {
    /// The child had already exited when the stop began.
    AlreadyExited,
    /// It exited after the final line / stdin EOF, within `stdin_grace`.
    StdinClosed,
    /// It exited after SIGTERM to its group, within `term_grace`.
    Sigterm,
    /// SIGKILL to its group ended it.
    Sigkill,
}

impl StopStep {
    /// Stable snake_case name: `already_exited`, `stdin_closed`, `sigterm`, `sigkill`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::AlreadyExited => "already_exited",
            Self::StdinClosed => "stdin_closed",
            Self::Sigterm => "sigterm",
            Self::Sigkill => "sigkill",
        }
    }
}

/// The result of [`Child::stop`]: how the child ended and which step ended it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StopOutcome {
    /// The direct child's exit status.
    pub status: ExitStatus,
    /// The ladder step that ended it.
    pub ended_by: StopStep,
}

/// The result of [`Child::wait_or_stop`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum WaitOutcome {
    /// The child exited by itself.
    Exited(ExitStatus),
    /// The token was cancelled; the child was stopped with the plan.
    Cancelled(StopOutcome),
    /// The timeout elapsed; the child was stopped with the plan.
    TimedOut(StopOutcome),
}

impl WaitOutcome {
    /// The direct child's exit status, however it ended.
    pub fn status(&self) -> ExitStatus {
        match self {
            Self::Exited(status) => *status,
            Self::Cancelled(outcome) | Self::TimedOut(outcome) => outcome.status,
        }
    }
}

/// The direct child's exit as observed by the supervisor: its status and when it was seen.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Exit {
    pub(crate) status: ExitStatus,
    pub(crate) at: Instant,
}

/// The instant `duration` after `now`, or `None` ("never") when it lies past what the clock can represent.
///
/// Every deadline of this crate goes through here, so `Duration::MAX` (or any huge grace, window or timeout)
/// means "wait without a deadline" instead of panicking on `Instant` overflow.
pub(crate) fn deadline_after(now: Instant, duration: Duration) -> Option<Instant> {
    now.checked_add(duration)
}

/// Runs `fut` until `deadline` (forever when `None`); `None` when the deadline came first.
async fn until<F: std::future::Future>(deadline: Option<Instant>, fut: F) -> Option<F::Output> {
    match deadline {
        Some(deadline) => tokio::time::timeout_at(deadline, fut).await.ok(),
        None => Some(fut.await),
    }
}

/// State shared by [`Child`] and every [`ChildHandle`].
struct Shared {
    pid: u32,
    exit: watch::Receiver<Option<Exit>>,
    /// Asks the supervisor task to kill the direct child (it owns the tokio child, which knows whether it was reaped).
    kill_direct: Notify,
    stdin: Stdin,
    stderr: StderrTail,
    stop: OnceCell<StopOutcome>,
    /// A SIGKILL went to the whole group: nothing of it is left, so the group id is never signalled again.
    group_killed: AtomicBool,
}

impl Shared {
    /// The state for `Debug`: `running`, `exited (exit code 0)` or `exited (killed by signal 9)`.
    fn state(&self) -> String {
        match self.exited() {
            None => "running".to_owned(),
            Some(status) => format!("exited ({status})"),
        }
    }

    fn exited(&self) -> Option<ExitStatus> {
        self.exit.borrow().as_ref().map(|e| e.status)
    }

    async fn wait(&self) -> ExitStatus {
        let mut exit = self.exit.clone();
        match exit.wait_for(Option::is_some).await {
            Ok(exit) => exit.as_ref().map_or_else(ExitStatus::unknown, |e| e.status),
            // The supervisor is gone without a status: the runtime is shutting down.
            Err(_) => ExitStatus::unknown(),
        }
    }

    fn signal(&self, signal: GroupSignal) {
        if let Err(err) = signal_group(self.pid, signal) {
            tracing::warn!(pgid = self.pid, ?signal, %err, "signalling the child's process group failed");
        }
    }

    /// SIGKILL to the whole group (unless one was sent before) and to the direct child.
    fn kill_all(&self) {
        if !self.group_killed.swap(true, Ordering::SeqCst) {
            self.signal(GroupSignal::Kill);
        }
        self.kill_direct.notify_one();
    }

    async fn run_stop(&self, plan: StopPlan) -> StopOutcome {
        if let Some(status) = self.exited() {
            self.kill_all();
            self.stdin.close().await;
            return StopOutcome {
                status,
                ended_by: StopStep::AlreadyExited,
            };
        }
        let stdin_deadline = deadline_after(Instant::now(), plan.stdin_grace);
        if let Some(line) = &plan.final_stdin_line {
            match until(stdin_deadline, self.stdin.write_line(line)).await {
                Some(Ok(())) => {}
                Some(Err(err)) => {
                    tracing::debug!(code = err.code(), %err, "final stdin line not written")
                }
                None => tracing::debug!("final stdin line not written within the grace"),
            }
        }
        self.stdin.close().await;
        if let Some(status) = until(stdin_deadline, self.wait()).await {
            self.kill_all();
            return StopOutcome {
                status,
                ended_by: StopStep::StdinClosed,
            };
        }
        if !self.group_killed.load(Ordering::SeqCst) {
            self.signal(GroupSignal::Term);
        }
        let term_deadline = deadline_after(Instant::now(), plan.term_grace);
        if let Some(status) = until(term_deadline, self.wait()).await {
            self.kill_all();
            return StopOutcome {
                status,
                ended_by: StopStep::Sigterm,
            };
        }
        self.kill_all();
        let status = self.wait().await;
        StopOutcome {
            status,
            ended_by: StopStep::Sigkill,
        }
    }
}

/// A running child started by [`crate::Command::spawn`]. It owns the process: dropping it kills the group.
///
/// - The child is the leader of its own process group; signals of the stop ladder go to the whole group.
/// - [`Child::wait`] resolves at the direct child's exit, never at pipe close.
/// - Dropping a `Child` sends SIGKILL to the direct child and to its whole process group (grandchildren
///   included), unless the group was already killed (by a stop, or at the end of the drain window with
///   [`ChildConfig::kill_orphans_after_drain`]). [`ChildHandle`]s do not keep the process alive.
/// - Until stdout is taken with [`Child::take_stdout`], its items queue up to
///   [`ChildConfig::stdout_queue_items`] and then the child blocks writing; take it and drop it to discard output.
///
/// `Debug` is concise: the pid, the state (`running`, `exited (exit code 0)`) and whether stdout was taken.
pub struct Child {
    handle: ChildHandle,
    stdout: Option<Stdout>,
}

/// A clonable handle to a [`Child`]: wait, stop, stdin and stderr from other tasks.
///
/// It does not own the process: when the [`Child`] is dropped the group is killed regardless of handles.
/// `Debug` shows the pid and the state only.
#[derive(Clone)]
pub struct ChildHandle {
    shared: Arc<Shared>,
}

impl ChildHandle {
    /// The direct child's pid (also its process group id) until its exit has been observed, then `None`.
    pub fn id(&self) -> Option<u32> {
        if self.shared.exited().is_some() {
            None
        } else {
            Some(self.shared.pid)
        }
    }

    /// A clonable handle to the child's stdin.
    pub fn stdin(&self) -> Stdin {
        self.shared.stdin.clone()
    }

    /// A clonable view of the child's stderr tail.
    pub fn stderr_tail(&self) -> StderrTail {
        self.shared.stderr.clone()
    }

    /// The direct child's exit status, if it has exited.
    pub fn try_wait(&self) -> Option<ExitStatus> {
        self.shared.exited()
    }

    /// Resolves at the direct child's exit (not at pipe close). Cancel-safe; any number of callers.
    pub async fn wait(&self) -> ExitStatus {
        self.shared.wait().await
    }

    /// Runs the stop ladder of `plan` and reports which step ended the child.
    ///
    /// Idempotent: once a stop has completed, later calls return the same outcome (their plan is ignored);
    /// concurrent calls wait for the first. If the child had already exited, the outcome is
    /// [`StopStep::AlreadyExited`]. However the child ended, the rest of its process group (grandchildren such as
    /// MCP servers) is sent SIGKILL.
    pub async fn stop(&self, plan: StopPlan) -> StopOutcome {
        *self
            .shared
            .stop
            .get_or_init(|| self.shared.run_stop(plan))
            .await
    }

    /// Waits for the child's exit, but stops it with `plan` when `cancel` is cancelled or `timeout` elapses.
    ///
    /// A `timeout` of `None`, or one past what the clock can represent (`Duration::MAX`), never elapses.
    pub async fn wait_or_stop(
        &self,
        cancel: &CancellationToken,
        timeout: Option<Duration>,
        plan: StopPlan,
    ) -> WaitOutcome {
        let deadline = timeout.and_then(|timeout| deadline_after(Instant::now(), timeout));
        let timeout = async {
            match deadline {
                Some(deadline) => tokio::time::sleep_until(deadline).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            status = self.wait() => WaitOutcome::Exited(status),
            () = cancel.cancelled() => WaitOutcome::Cancelled(self.stop(plan.clone()).await),
            () = timeout => WaitOutcome::TimedOut(self.stop(plan).await),
        }
    }
}

impl Child {
    /// A clonable handle for other tasks (wait, stop, stdin, stderr).
    pub fn handle(&self) -> ChildHandle {
        self.handle.clone()
    }

    /// See [`ChildHandle::id`].
    pub fn id(&self) -> Option<u32> {
        self.handle.id()
    }

    /// See [`ChildHandle::stdin`].
    pub fn stdin(&self) -> Stdin {
        self.handle.stdin()
    }

    /// Takes the stdout stream (once; later calls return `None`).
    pub fn take_stdout(&mut self) -> Option<Stdout> {
        self.stdout.take()
    }

    /// See [`ChildHandle::stderr_tail`].
    pub fn stderr_tail(&self) -> StderrTail {
        self.handle.stderr_tail()
    }

    /// See [`ChildHandle::try_wait`].
    pub fn try_wait(&self) -> Option<ExitStatus> {
        self.handle.try_wait()
    }

    /// See [`ChildHandle::wait`].
    pub async fn wait(&self) -> ExitStatus {
        self.handle.wait().await
    }

    /// See [`ChildHandle::stop`].
    pub async fn stop(&self, plan: StopPlan) -> StopOutcome {
        self.handle.stop(plan).await
    }

    /// See [`ChildHandle::wait_or_stop`].
    pub async fn wait_or_stop(
        &self,
        cancel: &CancellationToken,
        timeout: Option<Duration>,
        plan: StopPlan,
    ) -> WaitOutcome {
        self.handle.wait_or_stop(cancel, timeout, plan).await
    }
}

impl fmt::Debug for ChildHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChildHandle")
            .field("pid", &self.shared.pid)
            .field("state", &self.shared.state())
            .finish()
    }
}

impl fmt::Debug for Child {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Child")
            .field("pid", &self.handle.shared.pid)
            .field("state", &self.handle.shared.state())
            .field("stdout_taken", &self.stdout.is_none())
            .finish()
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        self.handle.shared.kill_all();
    }
}

/// Wires a freshly spawned tokio child into supervision: the exit watcher and the stdout/stderr readers.
pub(crate) fn start(
    mut child: tokio::process::Child,
    mode: StdoutMode,
    config: ChildConfig,
) -> io::Result<Child> {
    let missing = |what: &str| io::Error::other(format!("child {what} is not piped"));
    let pid = child
        .id()
        .ok_or_else(|| io::Error::other("child has no pid"))?;
    let stdin = child.stdin.take().ok_or_else(|| missing("stdin"))?;
    let stdout = child.stdout.take().ok_or_else(|| missing("stdout"))?;
    let stderr = child.stderr.take().ok_or_else(|| missing("stderr"))?;

    let (exit_tx, exit_rx) = watch::channel(None);
    let shared = Arc::new(Shared {
        pid,
        exit: exit_rx.clone(),
        kill_direct: Notify::new(),
        stdin: Stdin::new(stdin),
        stderr: StderrTail::new(config.stderr_tail_bytes),
        stop: OnceCell::new(),
        group_killed: AtomicBool::new(false),
    });

    tokio::spawn(supervise(
        child,
        exit_tx,
        Arc::clone(&shared),
        config.clone(),
    ));
    let (tx, rx) = mpsc::channel(config.stdout_queue_items.max(1));
    tokio::spawn(stdio::pump_stdout(
        stdout,
        mode,
        tx,
        exit_rx.clone(),
        config.clone(),
    ));
    tokio::spawn(stdio::pump_stderr(
        stderr,
        shared.stderr.clone(),
        exit_rx,
        config,
    ));

    Ok(Child {
        handle: ChildHandle { shared },
        stdout: Some(Stdout::new(rx)),
    })
}

/// Owns the tokio child: reaps it, publishes its exit, and kills it on request.
async fn supervise(
    mut child: tokio::process::Child,
    exit_tx: watch::Sender<Option<Exit>>,
    shared: Arc<Shared>,
    config: ChildConfig,
) {
    let waited = loop {
        tokio::select! {
            waited = child.wait() => break waited,
            () = shared.kill_direct.notified() => {
                if let Err(err) = child.start_kill() {
                    tracing::debug!(pid = shared.pid, %err, "killing the direct child failed");
                }
            }
        }
    };
    let status = match waited {
        Ok(status) => ExitStatus::from(status),
        Err(err) => {
            tracing::warn!(pid = shared.pid, %err, "waiting for the child failed");
            ExitStatus::unknown()
        }
    };
    let at = Instant::now();
    exit_tx.send_replace(Some(Exit { status, at }));
    if config.kill_orphans_after_drain {
        let Some(drain_end) = deadline_after(at, config.drain_window) else {
            return; // a window past the end of the clock never ends: orphans live until stop or drop
        };
        tokio::time::sleep_until(drain_end).await;
        if !shared.group_killed.swap(true, Ordering::SeqCst) {
            shared.signal(GroupSignal::Kill);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_the_documented_values() {
        let config = ChildConfig::default();
        assert_eq!(config.drain_window, Duration::from_secs(2));
        assert_eq!(config.stderr_tail_bytes, 131_072);
        assert_eq!(config.stdout_queue_items, 16);
        assert_eq!(config.read_chunk_bytes, 65_536);
        assert_eq!(config.late_drain_max_bytes, 1_048_576);
        assert!(config.kill_orphans_after_drain);
        let plan = StopPlan::default();
        assert_eq!(plan, StopPlan::new());
        assert_eq!(
            (plan.final_stdin_line, plan.stdin_grace, plan.term_grace),
            (None, Duration::from_secs(5), Duration::from_secs(3))
        );
    }

    /// Checks the status's 128+n number and its display.
    fn check(status: ExitStatus, number: i32, text: &str) {
        assert_eq!(
            (status.code_or_signal(), status.to_string().as_str()),
            (number, text)
        );
    }

    #[test]
    fn exit_status_numbers_and_texts() {
        check(
            ExitStatus {
                code: Some(0),
                signal: None,
            },
            0,
            "exit code 0",
        );
        check(
            ExitStatus {
                code: Some(255),
                signal: None,
            },
            255,
            "exit code 255",
        );
        check(
            ExitStatus {
                code: None,
                signal: Some(9),
            },
            137,
            "killed by signal 9",
        );
        check(
            ExitStatus {
                code: None,
                signal: Some(15),
            },
            143,
            "killed by signal 15",
        );
        check(ExitStatus::unknown(), -1, "unknown exit status");
    }

    #[test]
    fn deadline_after_overflow_means_never() {
        let now = Instant::now();
        assert_eq!(deadline_after(now, Duration::MAX), None);
        assert_eq!(
            deadline_after(now, Duration::from_secs(1)),
            Some(now + Duration::from_secs(1))
        );
        assert_eq!(deadline_after(now, Duration::ZERO), Some(now));
    }

    #[test]
    fn stop_steps_have_stable_names() {
        let names = [
            StopStep::AlreadyExited,
            StopStep::StdinClosed,
            StopStep::Sigterm,
            StopStep::Sigkill,
        ]
        .map(|s| s.as_str());
        assert_eq!(
            names,
            ["already_exited", "stdin_closed", "sigterm", "sigkill"]
        );
    }
}
