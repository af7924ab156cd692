//! The agent supervisor: start, stop (the ladder), status, and the per-run tasks (stdout reader, stderr pump, exit
//! watcher). The only place agentctl spawns a process, through `agentwire_process::Command`.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use agentwire_jsonl::Frame;
use agentwire_process::{ChildConfig, ChildHandle, Command, StderrTail, StdoutItem, StopPlan};
use serde::Serialize;
use tokio::sync::watch;

use crate::error::{ApiError, ErrorKind};
use crate::output::{LineSplitter, OutputBuffer, OutputLine, OutputStream, bound_line};
use crate::relay::{Relay, RelayStats};

/// When the agent's stdout ends while it still runs, how long agentctl waits for its exit before failing pending
/// calls as `stdout_closed` (an agent that exits closes stdout a moment before its exit is seen; this lets the
/// error name the exit instead). Pending calls fail within this bound either way.
pub const STDOUT_CLOSED_EXIT_GRACE: Duration = Duration::from_millis(500);

/// The agent's lifecycle state, as in `/api/v1/status`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AgentStatus {
    /// Never started.
    Stopped,
    /// Being spawned.
    Starting,
    /// Running.
    Running,
    /// The stop ladder is running.
    Stopping,
    /// Exited (see `exit_code`).
    Exited,
    /// Spawning failed (see `error`).
    Error,
}

/// The agent's environment (`AGENTCTL_AGENT_ENV_MODE`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AgentEnv {
    /// agentctl's whole environment, read at each start, minus every `AGENTCTL_*` variable.
    Inherit,
    /// `agentwire-process`'s OS allowlist plus these names (never `AGENTCTL_*` ones).
    Allowlist(Vec<String>),
}

/// What the supervisor needs from the configuration.
#[derive(Clone, Debug)]
pub struct AgentSettings {
    /// The agent's argv (already split).
    pub argv: Vec<String>,
    /// Its working directory.
    pub workdir: PathBuf,
    /// How the agent's environment is built.
    pub env: AgentEnv,
    /// Largest stdout line (JSON-RPC message) in bytes.
    pub max_message_bytes: usize,
    /// Longest output-buffer line in bytes.
    pub max_output_line_bytes: usize,
    /// Stop ladder: grace after stdin EOF.
    pub stop_grace: Duration,
    /// Stop ladder: grace after SIGTERM.
    pub term_grace: Duration,
}

#[derive(Debug)]
struct State {
    status: AgentStatus,
    pid: Option<u32>,
    exit_code: Option<i32>,
    exit_signal: Option<i32>,
    ended_by: Option<&'static str>,
    started_at: Option<SystemTime>,
    started: Option<Instant>,
    error: Option<String>,
    handle: Option<ChildHandle>,
    done: Option<watch::Receiver<bool>>,
}

/// `/api/v1/status`: `{"agent_status":"running","pid":42,"exit_code":null,"started_at":"…","uptime_ms":12,
/// "pending_calls":0,"subscribers":1,…}`.
#[derive(Clone, Debug, Serialize)]
pub struct StatusView {
    /// Lifecycle state.
    pub agent_status: AgentStatus,
    /// The agent's pid while it runs.
    pub pid: Option<u32>,
    /// Exit code after exit (128 + n when killed by signal n).
    pub exit_code: Option<i32>,
    /// The signal that ended the agent, if one did.
    pub exit_signal: Option<i32>,
    /// Which stop-ladder step ended it (`stdin_closed`, `sigterm`, `sigkill`) after a stop; `already_exited` when
    /// the agent ended on its own. `null` while it runs and before its first exit.
    pub ended_by: Option<&'static str>,
    /// When the current or last run started, RFC 3339.
    pub started_at: Option<String>,
    /// Milliseconds since it started, while it runs.
    pub uptime_ms: Option<u64>,
    /// Why spawning failed (`error` status).
    pub error: Option<String>,
    /// Relay counters (pending calls, subscribers, …).
    #[serde(flatten)]
    pub relay: RelayStats,
    /// Output lines dropped from the buffer so far.
    pub output_dropped_lines: u64,
}

/// Starts, stops and watches the one agent process.
#[derive(Debug)]
pub struct Supervisor {
    settings: AgentSettings,
    relay: Arc<Relay>,
    output: OutputBuffer,
    state: Mutex<State>,
}

impl Supervisor {
    /// A supervisor with no agent running.
    pub fn new(settings: AgentSettings, relay: Arc<Relay>, output: OutputBuffer) -> Arc<Self> {
        Arc::new(Self {
            settings,
            relay,
            output,
            state: Mutex::new(State {
                status: AgentStatus::Stopped,
                pid: None,
                exit_code: None,
                exit_signal: None,
                ended_by: None,
                started_at: None,
                started: None,
                error: None,
                handle: None,
                done: None,
            }),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The current status.
    pub fn status(&self) -> StatusView {
        let state = self.lock();
        let relay = self.relay.stats();
        let running = matches!(state.status, AgentStatus::Running | AgentStatus::Stopping);
        StatusView {
            agent_status: state.status,
            pid: state.pid,
            exit_code: state.exit_code,
            exit_signal: state.exit_signal,
            ended_by: state.ended_by,
            started_at: state
                .started_at
                .map(|t| humantime::format_rfc3339_millis(t).to_string()),
            uptime_ms: state
                .started
                .filter(|_| running)
                .map(|t| u64::try_from(t.elapsed().as_millis()).unwrap_or(u64::MAX)),
            error: state.error.clone(),
            relay,
            output_dropped_lines: self.output.dropped(),
        }
    }

    /// Spawns the agent.
    ///
    /// # Errors
    /// 409 when it is already starting, running or stopping; 500 when spawning fails (status becomes `error`).
    pub fn start(self: &Arc<Self>) -> Result<StatusView, ApiError> {
        {
            let mut state = self.lock();
            if matches!(
                state.status,
                AgentStatus::Starting | AgentStatus::Running | AgentStatus::Stopping
            ) {
                return Err(
                    ApiError::new(ErrorKind::Conflict, "agent is already running")
                        .with_details(serde_json::json!({"agent_status": state.status})),
                );
            }
            state.status = AgentStatus::Starting;
        }
        let settings = &self.settings;
        let (program, args) = match settings.argv.split_first() {
            Some(split) => split,
            None => {
                return Err(
                    self.spawn_failed("agent command is empty".to_owned(), "agent_command_empty")
                );
            }
        };
        // `ChildConfig` is `#[non_exhaustive]`: it cannot be built with a struct literal here.
        #[allow(
            clippy::field_reassign_with_default,
            reason = "ChildConfig is non_exhaustive"
        )]
        let config = {
            let mut config = ChildConfig::default();
            config.stdout_queue_items = 64;
            config
        };
        let mut command = Command::new(program);
        command
            .args(args)
            .current_dir(&settings.workdir)
            .stdout_jsonl(agentwire_jsonl::Limits {
                max_line_bytes: settings.max_message_bytes,
                max_preview_bytes: settings.max_output_line_bytes,
            })
            .config(config);
        match &settings.env {
            // An explicit full environment: `Command` starts empty and takes every entry given.
            AgentEnv::Inherit => command.envs(
                std::env::vars_os().filter(|(name, _)| !crate::config::is_agentctl_variable(name)),
            ),
            AgentEnv::Allowlist(names) => command.inherit_os_env().inherit_env(names),
        };
        let mut child = match command.spawn() {
            Ok(child) => child,
            Err(error) => return Err(self.spawn_failed(error.to_string(), error.code())),
        };
        let handle = child.handle();
        let stdout = child.take_stdout();
        self.relay.agent_started(handle.stdin());
        let (done_tx, done_rx) = watch::channel(false);
        {
            let mut state = self.lock();
            state.status = AgentStatus::Running;
            state.pid = handle.id();
            state.exit_code = None;
            state.exit_signal = None;
            state.ended_by = None;
            state.error = None;
            state.started_at = Some(SystemTime::now());
            state.started = Some(Instant::now());
            state.handle = Some(handle.clone());
            state.done = Some(done_rx);
        }
        tracing::info!(pid = ?handle.id(), program = %program, "agent started");
        let supervisor = self.clone();
        tokio::spawn(async move {
            let mut reader = tokio::spawn(read_stdout(
                stdout,
                supervisor.relay.clone(),
                supervisor.output.clone(),
            ));
            let stderr = tokio::spawn(pump_stderr(
                handle.stderr_tail(),
                supervisor.output.clone(),
                supervisor.settings.max_output_line_bytes,
            ));
            let mut reader_done = false;
            let status = tokio::select! {
                status = child.wait() => status,
                joined = &mut reader => {
                    reader_done = true;
                    if let Err(error) = joined {
                        tracing::warn!(%error, "stdout reader task failed");
                    }
                    // Stdout ended first. An exiting agent's exit follows at once: wait a moment so the error names
                    // the exit; otherwise the agent lives on without a stdout and can never answer.
                    match tokio::time::timeout(STDOUT_CLOSED_EXIT_GRACE, child.wait()).await {
                        Ok(status) => status,
                        Err(_) => {
                            tracing::warn!("the agent closed its stdout but still runs: failing pending calls");
                            supervisor.relay.agent_stdout_closed();
                            child.wait().await
                        }
                    }
                }
            };
            // Let output already in flight land before pending calls fail (bounded by the drain window).
            if !reader_done && let Err(error) = reader.await {
                tracing::warn!(%error, "stdout reader task failed");
            }
            if let Err(error) = stderr.await {
                tracing::warn!(%error, "stderr pump task failed");
            }
            // Reap what is left of the process group (grandchildren that outlived the agent).
            let outcome = handle.stop(StopPlan::new()).await;
            let code = status.code_or_signal();
            tracing::info!(%status, ended_by = outcome.ended_by.as_str(), "agent exited");
            let frame = serde_json::json!({
                "jsonrpc": "2.0",
                "method": "agentctl/status",
                "params": {"agent_status": "exited", "exit_code": code, "exit_signal": status.signal},
            })
            .to_string();
            {
                // Under the supervisor lock: a client that sees a 502 or the final frame then sees `exited`, and
                // a new start cannot slip in between (lock order: supervisor, then relay; never the reverse).
                let mut state = supervisor.lock();
                state.status = AgentStatus::Exited;
                state.pid = None;
                state.exit_code = Some(code);
                state.exit_signal = status.signal;
                state.handle = None;
                // `already_exited` for an agent that ended on its own; a stop in progress overwrites it with the
                // ladder step that ended the agent.
                state.ended_by = Some(outcome.ended_by.as_str());
                supervisor.relay.agent_exited(&frame);
            }
            drop(child);
            // Receivers may be gone; the state above is what counts.
            let _ = done_tx.send(true);
        });
        Ok(self.status())
    }

    fn spawn_failed(&self, message: String, code: &str) -> ApiError {
        tracing::error!(%message, "spawning the agent failed");
        let mut state = self.lock();
        state.status = AgentStatus::Error;
        state.error = Some(message.clone());
        ApiError::new(
            ErrorKind::InternalError,
            format!("spawning the agent failed: {message}"),
        )
        .with_details(serde_json::json!({"code": code}))
    }

    /// Stops the agent with the ladder (stdin EOF → grace → SIGTERM to its group → grace → SIGKILL); `force` skips
    /// the stdin grace. Returns once the agent has exited and its exit is processed.
    ///
    /// # Errors
    /// 409 when the agent is not running.
    pub async fn stop(&self, force: bool) -> Result<StatusView, ApiError> {
        let (handle, mut done) = {
            let mut state = self.lock();
            match (state.status, state.handle.clone(), state.done.clone()) {
                (AgentStatus::Running | AgentStatus::Stopping, Some(handle), Some(done)) => {
                    state.status = AgentStatus::Stopping;
                    self.relay.agent_stopping();
                    (handle, done)
                }
                (status, _, _) => {
                    return Err(ApiError::new(ErrorKind::Conflict, "agent is not running")
                        .with_details(serde_json::json!({"agent_status": status})));
                }
            }
        };
        let stdin_grace = if force {
            Duration::ZERO
        } else {
            self.settings.stop_grace
        };
        let plan = StopPlan::new()
            .stdin_grace(stdin_grace)
            .term_grace(self.settings.term_grace);
        let outcome = handle.stop(plan).await;
        // The run task sets the final state; the sender lives until then.
        let _ = done.wait_for(|done| *done).await;
        self.lock().ended_by = Some(outcome.ended_by.as_str());
        Ok(self.status())
    }

    /// Stops the agent if it runs (shutdown); waits for a stop in progress.
    pub async fn shutdown(&self) {
        let running = matches!(
            self.lock().status,
            AgentStatus::Running | AgentStatus::Stopping
        );
        if running && let Err(error) = self.stop(false).await {
            tracing::debug!(message = %error.message, "nothing to stop at shutdown");
        }
    }
}

/// Relays the agent's stdout: JSON lines to the relay, anything else to the output buffer.
async fn read_stdout(
    stdout: Option<agentwire_process::Stdout>,
    relay: Arc<Relay>,
    output: OutputBuffer,
) {
    let Some(mut stdout) = stdout else { return };
    while let Some(item) = stdout.next().await {
        match item {
            StdoutItem::Frame(Frame::Json(line)) => relay.on_agent_message(line),
            StdoutItem::Frame(Frame::Invalid(line)) => {
                let mut content = line.preview.clone();
                let shown = content.len();
                if line.len > shown {
                    content = format!("{content}… [{} bytes cut]", line.len - shown);
                }
                output.push(OutputLine::new(
                    SystemTime::now(),
                    OutputStream::Stdout,
                    content,
                ));
            }
            StdoutItem::Frame(Frame::TooLong { bytes_discarded }) => {
                tracing::warn!(
                    bytes_discarded,
                    "agent stdout line over AGENTCTL_MAX_MESSAGE_BYTES discarded"
                );
                let content = format!(
                    "[agentctl] discarded a stdout line of {bytes_discarded} bytes (over AGENTCTL_MAX_MESSAGE_BYTES)"
                );
                output.push(OutputLine::new(
                    SystemTime::now(),
                    OutputStream::Stdout,
                    content,
                ));
            }
            other => tracing::debug!(?other, "ignoring an unexpected stdout item"),
        }
    }
    if let Some(end) = stdout.end() {
        tracing::debug!(?end, "agent stdout ended");
    }
}

/// Copies new stderr bytes into the output buffer, line by line, until stderr collection ends. It wakes when new
/// bytes arrive ([`StderrTail::changed`]); bytes that overran the tail (128 KiB) before this task read them are
/// reported as lost in the output, never silently.
async fn pump_stderr(tail: StderrTail, output: OutputBuffer, max_line_bytes: usize) {
    let mut splitter = LineSplitter::new(max_line_bytes);
    let mut seen: u64 = 0;
    loop {
        let finished = tail.is_finished();
        let (kept, total) = tail.snapshot();
        if total > seen {
            let new = total - seen;
            let kept_len = kept.len() as u64;
            let start = if new > kept_len {
                let content = format!(
                    "[agentctl] {} bytes of agent stderr were lost",
                    new - kept_len
                );
                output.push(OutputLine::new(
                    SystemTime::now(),
                    OutputStream::Stderr,
                    content,
                ));
                0
            } else {
                usize::try_from(kept_len - new).unwrap_or(0)
            };
            for line in splitter.push(kept.get(start..).unwrap_or_default()) {
                output.push(OutputLine::new(
                    SystemTime::now(),
                    OutputStream::Stderr,
                    bound_line(&line, max_line_bytes),
                ));
            }
            seen = total;
        }
        if finished {
            if let Some(line) = splitter.finish() {
                output.push(OutputLine::new(
                    SystemTime::now(),
                    OutputStream::Stderr,
                    line,
                ));
            }
            return;
        }
        tail.changed(seen).await;
    }
}
