//! The tokio IO shell: one live agent CLI process driven through [`TurnMachine`].
//!
//! A thin loop: read a stdout frame → [`TurnMachine::handle_frame`] → drain [`TurnMachine::poll_event`] /
//! [`TurnMachine::poll_action`]. Every protocol decision lives in the machine; this module only spawns (through
//! `agentwire-process`), writes the one stdin line per turn, waits for frames/exit/deadlines and runs the stop
//! ladder (`protocols/awp.md` "Stop": close stdin → 5 s → SIGTERM group → 3 s → SIGKILL group).

use std::collections::VecDeque;
use std::path::PathBuf;
use std::time::Duration;

use agentwire_process::{
    Child, ChildConfig, Command, ExitStatus, StdinError, Stdout, StdoutItem, StopOutcome, StopPlan,
};
use futures_util::FutureExt;
use tokio::time::Instant;

use crate::control::{self, ControlMessage};
use crate::machine::{
    Action, Counters, ExitInfo, Limits, MachineConfig, StdoutDecoder, TurnMachine, TurnRejected,
};
use crate::{ContentBlock, LaunchPlan, NormalizedEvent, SessionId, user_line};

/// How [`AgentSession::spawn`] runs the agent. Every field documents its default.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct SessionOptions {
    /// Working directory of the agent. Default `None` (the host's current directory).
    pub cwd: Option<PathBuf>,
    /// Fail a turn after this long without a stdout line (`agent_idle_timeout`). Default `None` (off).
    pub idle_timeout: Option<Duration>,
    /// Machine limits (stdout line limit 4 MiB, …); `limits.max_line_bytes` also configures the stdout decoder.
    pub limits: Limits,
    /// Supervision settings (drain window 2 s, stderr tail 128 KiB, …), see [`ChildConfig`].
    pub child: ChildConfig,
    /// The stop ladder. Default: stdin EOF → 5 s → SIGTERM → 3 s → SIGKILL (on Windows the shutdown line first).
    pub stop_plan: StopPlan,
    /// The session id passed with `--resume`, if any (a different reported id yields a `session_id_changed`
    /// notice). Default `None`.
    pub resumed_from: Option<SessionId>,
    /// Speak Claude Code's control protocol ([`crate::control`]): control lines are read with
    /// [`AgentSession::next_item`] and requests sent with [`AgentSession::initialize`] /
    /// [`AgentSession::interrupt`]. Default `false`.
    pub control_protocol: bool,
}

impl Default for SessionOptions {
    fn default() -> Self {
        let stop_plan = StopPlan::default();
        #[cfg(windows)]
        let stop_plan = stop_plan.final_stdin_line(crate::shutdown_line());
        Self {
            cwd: None,
            idle_timeout: None,
            limits: Limits::default(),
            child: ChildConfig::default(),
            stop_plan,
            resumed_from: None,
            control_protocol: false,
        }
    }
}

/// Why [`AgentSession::spawn`] failed. Code `spawn_failed` (the process crate's code in [`cause_code`](Self::cause_code)).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SpawnError {
    /// The process could not be started.
    #[error("agent process could not be started: {0}")]
    Process(#[from] agentwire_process::SpawnError),
}

impl SpawnError {
    /// Stable code: `spawn_failed`.
    pub fn code(&self) -> &'static str {
        crate::codes::SPAWN_FAILED
    }

    /// The underlying stable code (`executable_not_found`, `permission_denied`, …).
    pub fn cause_code(&self) -> &'static str {
        match self {
            SpawnError::Process(err) => err.code(),
        }
    }
}

/// Why [`AgentSession::send_turn`] did not start a turn. No turn was accepted; no `TurnCompleted` follows.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TurnError {
    /// The turn has no content blocks.
    #[error("a turn needs at least one content block")]
    EmptyTurn,
    /// The machine refused (turn in progress, process exited, runtime terminated).
    #[error(transparent)]
    Rejected(#[from] TurnRejected),
    /// The one stdin write attempt failed (the line may be partially written; it is never retried).
    #[error("writing the turn to the agent's stdin failed: {0}")]
    Write(#[from] StdinError),
}

impl TurnError {
    /// Stable code: `empty_turn`, `turn_in_progress`, `agent_exited`, `agent_terminated`, `stdin_write_failed`.
    pub fn code(&self) -> &'static str {
        match self {
            TurnError::EmptyTurn => "empty_turn",
            TurnError::Rejected(rejected) => rejected.code(),
            TurnError::Write(_) => "stdin_write_failed",
        }
    }
}

/// What went wrong around the protocol, for logs and `awp-host check`. Bounded.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Diagnostics {
    /// The machine's counters (malformed lines, unknown events, output before input, …).
    pub counters: Counters,
    /// The last bytes of stderr (lossy UTF-8), at most `ChildConfig::stderr_tail_bytes`.
    pub stderr_tail: String,
    /// Total stderr bytes seen (more than the tail when older bytes were dropped).
    pub stderr_total_bytes: u64,
    /// The exit status, once the process exited.
    pub exit: Option<ExitStatus>,
    /// The first stdout line that was not a usable event ([`TurnMachine::first_malformed_line`]); with
    /// `counters.malformed_lines` it says what an agent printed instead of protocol.
    pub first_malformed_line: Option<String>,
}

/// One live agent CLI process for one conversation.
///
/// Use: [`spawn`](Self::spawn) → ([`send_turn`](Self::send_turn) → [`next_event`](Self::next_event) until
/// `None`)* → [`stop`](Self::stop). A process that stays alive after its terminal event is reused for the next
/// turn. Persisting the user message is the caller's job, before `send_turn` (which makes exactly one write).
#[derive(Debug)]
pub struct AgentSession {
    child: Child,
    stdout: Option<Stdout>,
    reader: StdoutDecoder,
    machine: TurnMachine,
    stop_plan: StopPlan,
    exit: Option<ExitStatus>,
    stop_pending: bool,
    /// Control requests written so far (numbers the request ids).
    requests_sent: u64,
    /// Control messages read while waiting for another one's answer, handed out by `next_item` first.
    deferred: VecDeque<ControlMessage>,
}

/// What [`AgentSession::next_item`] yields.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum SessionItem {
    /// An event of the running turn.
    Event(NormalizedEvent),
    /// A control-protocol message (only with [`SessionOptions::control_protocol`]).
    Control(ControlMessage),
}

/// Why a control request of the host failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ControlError {
    /// The request could not be written to the agent's stdin.
    #[error("writing the control request to the agent's stdin failed: {0}")]
    Write(#[from] StdinError),
    /// The agent answered with an error `control_response`.
    #[error("the agent refused the `{subtype}` control request: {error}")]
    Refused {
        /// The request's subtype.
        subtype: &'static str,
        /// The agent's error text (bounded to 200 characters).
        error: String,
    },
    /// No `control_response` within the bound.
    #[error("no answer to the `{subtype}` control request within {} s", .timeout.as_secs())]
    Timeout {
        /// The request's subtype.
        subtype: &'static str,
        /// The bound.
        timeout: Duration,
    },
    /// The agent exited before answering.
    #[error("the agent exited before answering the `{subtype}` control request")]
    Exited {
        /// The request's subtype.
        subtype: &'static str,
    },
}

impl ControlError {
    /// Stable code: `control_write_failed`, `control_request_refused`, `control_timeout`, `agent_exited`.
    pub fn code(&self) -> &'static str {
        match self {
            ControlError::Write(_) => "control_write_failed",
            ControlError::Refused { .. } => "control_request_refused",
            ControlError::Timeout { .. } => "control_timeout",
            ControlError::Exited { .. } => "agent_exited",
        }
    }
}

fn now() -> std::time::Instant {
    Instant::now().into_std()
}

fn exit_info(status: ExitStatus) -> ExitInfo {
    ExitInfo {
        code: status.code,
        signal: status.signal,
    }
}

impl AgentSession {
    /// Starts the agent: `plan.program` with `plan.args` (no shell), env = OS allowlist + `plan.env`, own process
    /// group, stdout decoded as JSON Lines bounded by `options.limits.max_line_bytes`.
    ///
    /// # Errors
    /// [`SpawnError`] when the process cannot be started.
    pub async fn spawn(
        plan: &LaunchPlan,
        options: SessionOptions,
    ) -> Result<AgentSession, SpawnError> {
        let reader = StdoutDecoder::new(options.limits.max_line_bytes);
        let mut command = Command::new(&plan.program);
        command
            .args(&plan.args)
            .inherit_os_env()
            .envs(plan.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdout_bytes()
            .config(options.child.clone());
        if let Some(cwd) = &options.cwd {
            command.current_dir(cwd);
        }
        let mut child = command.spawn()?;
        let stdout = child.take_stdout();
        let machine = TurnMachine::new(MachineConfig {
            protocol: plan.protocol,
            limits: options.limits,
            idle_timeout: options.idle_timeout,
            resumed_from: options.resumed_from,
            control_protocol: options.control_protocol,
        });
        Ok(AgentSession {
            child,
            stdout,
            reader,
            machine,
            stop_plan: options.stop_plan,
            exit: None,
            stop_pending: false,
            requests_sent: 0,
            deferred: VecDeque::new(),
        })
    }

    /// Writes one user turn (exactly one stdin write attempt) and accepts the turn; then read its events with
    /// [`next_event`](Self::next_event). Output already waiting before the write is attributed to no turn.
    ///
    /// Not cancel-safe: dropping the future during the write may leave a partial line in the pipe (never
    /// retried); stop the session then.
    ///
    /// # Errors
    /// [`TurnError`]; no turn was accepted and no `TurnCompleted` will follow.
    pub async fn send_turn(&mut self, blocks: &[ContentBlock]) -> Result<(), TurnError> {
        if blocks.is_empty() {
            return Err(TurnError::EmptyTurn);
        }
        self.machine.can_accept_turn()?;
        if self.stop_pending {
            return Err(TurnRejected::Terminated.into());
        }
        self.drain_ready_output();
        if let Err(rejected) = self.machine.can_accept_turn() {
            // Output waiting since the last turn ended the runtime (an over-long line): stop, write nothing.
            self.run_actions().await;
            return Err(rejected.into());
        }
        if self.child.try_wait().is_some() {
            return Err(TurnRejected::Exited.into());
        }
        let line = user_line(blocks);
        self.child.stdin().write_line(&line).await?;
        self.machine.handle_input_sent(now())?;
        Ok(())
    }

    /// The next event of the current turn; `None` when no turn is running (the last event of a turn is
    /// `TurnCompleted`). Cancel-safe, except that a stop in progress (line limit, idle timeout) restarts on the
    /// next call.
    pub async fn next_event(&mut self) -> Option<NormalizedEvent> {
        loop {
            self.run_actions().await;
            if let Some(event) = self.machine.poll_event() {
                return Some(event);
            }
            if !self.machine.in_turn() {
                return None;
            }
            self.wait_and_handle().await;
        }
    }

    /// The next event of the current turn or control message ([`SessionOptions::control_protocol`]); `None`
    /// when no turn is running and no control message is queued. Control messages that arrive outside a turn
    /// are handed out at the next call. Cancel-safe like [`next_event`](Self::next_event).
    pub async fn next_item(&mut self) -> Option<SessionItem> {
        loop {
            self.run_actions().await;
            if let Some(message) = self
                .deferred
                .pop_front()
                .or_else(|| self.machine.poll_control())
            {
                return Some(SessionItem::Control(message));
            }
            if let Some(event) = self.machine.poll_event() {
                return Some(SessionItem::Event(event));
            }
            if !self.machine.in_turn() {
                return None;
            }
            self.wait_and_handle().await;
        }
    }

    /// True when the session speaks the control protocol ([`SessionOptions::control_protocol`]).
    pub fn control_protocol(&self) -> bool {
        self.machine.config().control_protocol
    }

    /// Writes one control-protocol line (built with [`crate::control`]) to the agent's stdin.
    ///
    /// # Errors
    /// [`StdinError`] when the write fails.
    pub async fn write_control(&mut self, line: &str) -> Result<(), StdinError> {
        self.child.stdin().write_line(line.as_bytes()).await
    }

    fn next_request_id(&mut self) -> String {
        self.requests_sent += 1;
        control::request_id(self.requests_sent, self.child.id().unwrap_or(0))
    }

    /// Sends `initialize` and waits at most `timeout` (`None`: until an answer or the agent's exit) for its
    /// `control_response` (other control messages read meanwhile are kept for [`next_item`](Self::next_item)).
    /// Returns the agent's `response` object (its commands, models, account…). Call before the first turn.
    /// Cancel-safe once the request was written (dropping the future while it waits loses nothing); what the
    /// agent printed that was not protocol meanwhile is in [`diagnostics`](Self::diagnostics).
    ///
    /// # Errors
    /// [`ControlError`]: write failure, an error answer, the timeout, or the agent's exit.
    pub async fn initialize(
        &mut self,
        timeout: Option<Duration>,
    ) -> Result<serde_json::Value, ControlError> {
        const SUBTYPE: &str = "initialize";
        let id = self.next_request_id();
        self.write_control(&control::initialize_line(&id)).await?;
        let deadline = timeout.map(|t| (t, Instant::now() + t));
        loop {
            while let Some(message) = self.machine.poll_control() {
                match message {
                    ControlMessage::Response { request_id, result } if request_id == id => {
                        return result.map_err(|error| ControlError::Refused {
                            subtype: SUBTYPE,
                            error: error.chars().take(200).collect(),
                        });
                    }
                    other => self.deferred.push_back(other),
                }
            }
            if self.exit.is_some() || self.machine.has_exited() {
                return Err(ControlError::Exited { subtype: SUBTYPE });
            }
            let due = async {
                match deadline {
                    Some((_, at)) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = self.wait_and_handle() => {}
                () = due => {
                    let timeout = deadline.map_or(Duration::ZERO, |(t, _)| t);
                    return Err(ControlError::Timeout { subtype: SUBTYPE, timeout });
                }
            }
        }
    }

    /// Sends `interrupt` (the running turn should end with the agent's own `result`; read it with
    /// [`next_item`](Self::next_item), whose `control_response` to this request comes as a control message).
    /// Returns the request id.
    ///
    /// # Errors
    /// [`StdinError`] when the write fails.
    pub async fn interrupt(&mut self) -> Result<String, StdinError> {
        let id = self.next_request_id();
        self.write_control(&control::interrupt_line(&id)).await?;
        Ok(id)
    }

    /// Cancels the running turn: it completes with `Failed { code: "cancelled" }` (read it with
    /// [`next_event`](Self::next_event)) and the process is stopped with the stop ladder. The session cannot take
    /// another turn afterwards. Returns the stop outcome.
    pub async fn cancel_turn(&mut self) -> StopOutcome {
        self.machine.handle_cancel(now());
        while self.machine.poll_action().is_some() {}
        self.stop().await
    }

    /// Stops the process with the stop ladder (idempotent) and ends the session; a running turn completes with
    /// `cancelled`. Returns once stderr collection ended too (bounded by the drain window), so that
    /// [`diagnostics`](Self::diagnostics) holds the complete tail.
    pub async fn stop(&mut self) -> StopOutcome {
        if !self.machine.is_finished() {
            self.machine.handle_cancel(now());
            while self.machine.poll_action().is_some() {}
        }
        let outcome = self.stop_draining().await;
        self.stop_pending = false;
        // Stderr collection ends at EOF or exit + drain window: afterwards `diagnostics()` has the whole tail.
        self.child.stderr_tail().finished().await;
        outcome
    }

    /// Counters, stderr tail and exit status.
    pub fn diagnostics(&self) -> Diagnostics {
        let tail = self.child.stderr_tail();
        let (bytes, total) = tail.snapshot();
        Diagnostics {
            counters: self.machine.counters(),
            stderr_tail: String::from_utf8_lossy(&bytes).into_owned(),
            stderr_total_bytes: total,
            exit: self.exit.or_else(|| self.child.try_wait()),
            first_malformed_line: self.machine.first_malformed_line().map(str::to_owned),
        }
    }

    /// True until the process has exited.
    pub fn is_alive(&self) -> bool {
        self.child.try_wait().is_none()
    }

    /// True while a turn is running.
    pub fn in_turn(&self) -> bool {
        self.machine.in_turn()
    }

    /// The latest valid session id the agent reported (or the one resumed from).
    pub fn session_id(&self) -> Option<&SessionId> {
        self.machine.session_id()
    }

    /// The process id, until the exit was observed.
    pub fn id(&self) -> Option<u32> {
        self.child.id()
    }

    /// Feeds stdout frames that are already queued (non-blocking) to the machine, before a turn starts.
    fn drain_ready_output(&mut self) {
        let Some(stdout) = self.stdout.as_mut() else {
            return;
        };
        loop {
            match stdout.next().now_or_never() {
                Some(Some(item)) => feed(&mut self.reader, &mut self.machine, item),
                Some(None) => {
                    self.reader.finish(&mut self.machine, now());
                    self.stdout = None;
                    return;
                }
                None => return,
            }
        }
    }

    async fn run_actions(&mut self) {
        while let Some(action) = self.machine.poll_action() {
            let Action::StopProcess { code } = action;
            tracing::warn!(code, "stopping the agent process");
            self.stop_pending = true;
        }
        if self.stop_pending {
            self.stop_draining().await;
            self.stop_pending = false;
        }
    }

    /// Runs the stop ladder while draining stdout (so a chatty agent is not blocked on a full pipe).
    async fn stop_draining(&mut self) -> StopOutcome {
        let stop = self.child.stop(self.stop_plan.clone());
        tokio::pin!(stop);
        let outcome = loop {
            match self.stdout.as_mut() {
                Some(stdout) => {
                    tokio::select! {
                        outcome = &mut stop => break outcome,
                        item = stdout.next() => match item {
                            Some(item) => feed(&mut self.reader, &mut self.machine, item),
                            None => {
                                self.reader.finish(&mut self.machine, now());
                                self.stdout = None;
                            }
                        },
                    }
                }
                None => break stop.await,
            }
        };
        // What the agent printed before it exited is still in the pipe when the stop returns first (an agent that
        // had exited already): feed it, so its diagnostics hold it. Stdout ends at EOF, or with the drain window
        // after the exit (a grandchild holding the pipe).
        if let Some(stdout) = self.stdout.as_mut() {
            while let Some(item) = stdout.next().await {
                feed(&mut self.reader, &mut self.machine, item);
            }
            self.reader.finish(&mut self.machine, now());
            self.stdout = None;
        }
        self.exit = Some(outcome.status);
        self.machine.handle_exit(exit_info(outcome.status), now());
        outcome
    }

    /// Waits for the next input of a running turn: a stdout frame, the exit (after stdout ended), or the idle
    /// deadline.
    async fn wait_and_handle(&mut self) {
        let deadline = self.machine.poll_timeout().map(Instant::from_std);
        let sleep = async {
            match deadline {
                Some(deadline) => tokio::time::sleep_until(deadline).await,
                None => std::future::pending().await,
            }
        };
        match self.stdout.as_mut() {
            Some(stdout) => {
                tokio::select! {
                    item = stdout.next() => match item {
                        Some(item) => feed(&mut self.reader, &mut self.machine, item),
                        None => {
                            self.reader.finish(&mut self.machine, now());
                            if let Some(end) = stdout.end() {
                                tracing::debug!(?end, "agent stdout ended");
                            }
                            self.stdout = None;
                        }
                    },
                    () = sleep => self.machine.handle_timeout(now()),
                }
            }
            None => {
                tokio::select! {
                    status = self.child.wait() => {
                        self.exit = Some(status);
                        self.machine.handle_exit(exit_info(status), now());
                    }
                    () = sleep => self.machine.handle_timeout(now()),
                }
            }
        }
    }
}

fn feed(reader: &mut StdoutDecoder, machine: &mut TurnMachine, item: StdoutItem) {
    match item {
        StdoutItem::Bytes(bytes) => reader.feed(machine, &bytes, now()),
        // Byte mode is configured, so frames do not come; still, hand one over as it came.
        StdoutItem::Frame(frame) => machine.handle_frame(&frame, now()),
        _ => machine.handle_malformed_line(now()),
    }
}
