//! The turn runner: one chat turn from prompt to persisted outcome — resolve the thread, plan the launch (with
//! `--resume <latest session id>`), persist the user message, start the agent, write the turn, stream its
//! normalized events to an observer while persisting session ids, text and tool summaries, and record the run's end.
//!
//! The agent side sits behind [`AgentRunner`], an enum with one variant per wire protocol family: AWP over
//! `agentwire-awp`'s session, ACP over [`crate::acp_turn`] (whose session id is stored as soon as `session/new` or
//! `session/load` answers, before the prompt is sent).

use std::future::Future;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use agentwire_awp::control::{self, ControlMessage};
use agentwire_awp::session::ControlError;
use agentwire_awp::{
    AgentSession, ContentBlock, LaunchPlan, NormalizedEvent, SessionId, SessionItem,
    SessionOptions, TurnOutcome, TurnStatus, Usage, codes,
};

use crate::acp_turn::{AcpPermissions, AcpRunner, SESSION_NOT_RESUMED};
use crate::agents::{AgentProtocol, AgentSpec, CONTROL_INTERRUPT_GRACE};
use crate::attachments::Attachment;
use crate::ids::{RunId, ThreadId};
use crate::store::{
    NewRun, PendingText, RunEnd, RunGuard, RunStatus, RunUsage, Store, StoreError, ThreadChoice,
    bounded_line, escape_controls,
};
use crate::tool_permissions::{ToolPermissionRequest, ToolPermissions};

/// Code of a run whose agent reported an invalid session id: the thread could not be resumed, so the host treats
/// the turn as a protocol violation even when the agent reported success.
pub const INVALID_SESSION_ID: &str = codes::INVALID_SESSION_ID;

/// How turns run. Every field documents its default.
#[derive(Clone, Debug)]
pub struct TurnOptions {
    /// Fail the turn after this long without agent output (`agent_idle_timeout`). Default `None` (off).
    pub idle_timeout: Option<Duration>,
    /// Overrides the agent's [`AgentSpec::first_output_timeout`] for this turn: `Some(Duration::ZERO)` turns
    /// it off. Default `None` (the agent's).
    pub first_output_timeout: Option<Duration>,
    /// Working directory of the agent in a new thread, recorded on the thread (absolute, UTF-8). A thread that
    /// recorded a directory always runs there instead (checked before the run is recorded:
    /// [`TurnSetupError::ThreadCwdMissing`], [`TurnSetupError::ThreadCwdReplaced`]); a thread without one (created before schema 3, or with this
    /// `None`) runs here. Default `None` (the host's working directory, nothing recorded).
    pub cwd: Option<PathBuf>,
    /// Assistant text is written to the store whenever this many bytes are pending, at each tool use and at the
    /// end of the turn. Default 4096 bytes. A host killed mid-turn loses at most this much streamed text.
    pub text_flush_bytes: usize,
    /// Maximum length of a stored/rendered tool summary line in characters (cut with `…`). Default 120.
    pub max_tool_summary_chars: usize,
    /// How ACP agents' permission requests are answered. Default [`AcpPermissions::reject`] (fail closed).
    pub acp_permissions: AcpPermissions,
    /// How `can_use_tool` control requests of a stream-json agent with
    /// [`AgentSpec::control_protocol`] on are answered. Default [`ToolPermissions::deny`] (fail closed).
    pub tool_permissions: ToolPermissions,
    /// Aborts the turn at once when the value becomes `true` (a second Ctrl-C): the agent's process group is
    /// killed with SIGKILL (no stdin EOF, no grace) and the run is recorded `cancelled` with error code
    /// [`ABORTED_CODE`] and detail [`ABORTED`].
    /// Default `None` (never aborts).
    pub abort: Option<tokio::sync::watch::Receiver<bool>>,
    /// Called once, right after the run (and the user message) were committed and before the agent is started,
    /// with the thread and run ids: a detached caller returns the durable run id from here. The variables it
    /// returns are added to the agent's environment for this launch (e.g. a run-scoped `DEEPCHAT_CLI_AGENT_TOKEN`
    /// and a `PATH` with the `deepchat` binary's directory first); they win over the agent's configured ones.
    /// Default `None`.
    pub on_run_recorded: Option<RunRecordedHook>,
}

/// See [`TurnOptions::on_run_recorded`]: called with the thread and run ids of the recorded run; returns
/// environment variables to add to the agent's launch.
#[derive(Clone)]
pub struct RunRecordedHook(pub std::sync::Arc<RunRecordedFn>);

/// The function inside a [`RunRecordedHook`].
pub type RunRecordedFn = dyn Fn(&ThreadId, &RunId) -> AgentEnvFuture + Send + Sync;

/// What a [`RunRecordedHook`] returns: the variables, possibly after asking another process (e.g. `chat` asking a
/// running `serve` for a run-scoped agent token).
pub type AgentEnvFuture =
    std::pin::Pin<Box<dyn Future<Output = Vec<(String, String)>> + Send + 'static>>;

impl std::fmt::Debug for RunRecordedHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RunRecordedHook(..)")
    }
}

/// `AgentSession::send_turn` code of a failed stdin write (reported as `agent_exited_mid_turn`).
const STDIN_WRITE_FAILED: &str = "stdin_write_failed";
/// `AgentSession::send_turn` code of an agent already exited (reported as `agent_exited_mid_turn`).
const AGENT_EXITED: &str = "agent_exited";

/// Code of a turn whose `awp-jsonl`/`stream-json` agent produced no protocol event within its first-output
/// timeout after the turn was written ([`AgentSpec::first_output_timeout`]).
pub const FIRST_OUTPUT_TIMEOUT: &str = "agent_first_output_timeout";

/// The first-output timeout of a turn: [`TurnOptions::first_output_timeout`] (zero: off), else the agent's.
fn first_output_timeout(agent: &AgentSpec, options: &TurnOptions) -> Option<Duration> {
    match options.first_output_timeout {
        Some(t) if t.is_zero() => None,
        Some(t) => Some(t),
        None => agent.first_output_timeout,
    }
}

/// Resolves at `deadline`; never when it is `None`.
async fn first_output_due(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending::<()>().await,
    }
}

/// Detail of a run ended by [`TurnOptions::abort`].
pub const ABORTED: &str = "the agent's process group was killed";

/// Error code of a run ended by [`TurnOptions::abort`] (a second Ctrl-C); its status is
/// [`RunStatus::Cancelled`].
pub const ABORTED_CODE: &str = "aborted";

/// Code of a run whose stream-json agent refused the host's `initialize` control request or exited (or closed
/// its stdin) before answering it; the detail says which, with the exit status. No answer within the
/// first-output timeout is [`FIRST_OUTPUT_TIMEOUT`] instead; a cancel while waiting is `cancelled`.
pub const CONTROL_INITIALIZE_FAILED: &str = "control_initialize_failed";

/// Detail of a run cancelled while its agent had not answered the `initialize` control request.
pub const CANCELLED_AT_INITIALIZE: &str =
    "cancelled before the agent answered the `initialize` control request";

/// Detail of a run cancelled with the control protocol's `interrupt` and ended by the agent's own `result`.
pub const INTERRUPTED: &str = "interrupted: the agent ended the turn and stays usable";

/// Resolves once `abort` holds `true`; never when it is `None` or its sender is gone without aborting.
async fn abort_requested(abort: Option<tokio::sync::watch::Receiver<bool>>) {
    if let Some(mut abort) = abort
        && abort.wait_for(|aborted| *aborted).await.is_ok()
    {
        return;
    }
    std::future::pending::<()>().await;
}

/// How the agent side of a turn ended.
enum Driven {
    /// The turn never started (spawn or stdin write failed): code, detail, what the agent left.
    Early(String, String, Leftovers),
    /// The turn ran: its outcome (if the runner produced one), what the agent left, and the runner when it
    /// stays alive for the next turn ([`LiveAgent`]).
    Done(Option<TurnOutcome>, Leftovers, Option<AgentRunner>),
}

/// What a stopped agent left behind for diagnostics.
#[derive(Debug, Default)]
struct Leftovers {
    /// Last bytes of its stderr.
    stderr_tail: String,
    /// Stdout lines that were not protocol (AWP agents only).
    malformed_lines: u64,
    /// The first of them, bounded.
    first_malformed_line: Option<String>,
}

/// At most this many last stderr lines make a [`failure_reason`].
pub const MAX_REASON_STDERR_LINES: usize = 5;
/// Each line of a [`failure_reason`] is cut at this many characters (with `…`).
pub const MAX_REASON_LINE_CHARS: usize = 200;
/// A whole [`failure_reason`] is cut at this many characters (with `…`).
pub const MAX_REASON_CHARS: usize = 1000;

/// Why a turn failed, in the agent's own words, first found of:
/// 1. `result_text`: the `result` text (or Claude Code's `errors`) of its result, unless it only repeats
///    `detail` (the stable code already reported);
/// 2. the last [`MAX_REASON_STDERR_LINES`] non-blank lines of its stderr, joined with ` | `;
/// 3. what it printed on stdout that was not protocol: `the agent printed N lines that are not JSON; first: …`.
///
/// Every line is escaped ([`crate::store::escape_controls`], one-line) and cut at [`MAX_REASON_LINE_CHARS`],
/// the whole at [`MAX_REASON_CHARS`]. `None` when the agent left nothing.
pub fn failure_reason(
    result_text: Option<&str>,
    detail: Option<&str>,
    stderr_tail: &str,
    malformed_lines: u64,
    first_malformed_line: Option<&str>,
) -> Option<String> {
    let one_line = |text: &str, max: usize| bounded_line(&escape_controls(text.trim(), true), max);
    if let Some(text) = result_text.map(str::trim).filter(|t| !t.is_empty())
        && Some(text) != detail
    {
        return Some(one_line(text, MAX_REASON_CHARS));
    }
    let lines: Vec<&str> = stderr_tail
        .lines()
        .filter(|l| !l.trim().is_empty())
        .collect();
    if !lines.is_empty() {
        let last = lines.get(lines.len().saturating_sub(MAX_REASON_STDERR_LINES)..)?;
        let joined = last
            .iter()
            .map(|l| one_line(l, MAX_REASON_LINE_CHARS))
            .collect::<Vec<_>>()
            .join(" | ");
        return Some(bounded_line(&joined, MAX_REASON_CHARS));
    }
    if malformed_lines > 0 {
        let plural = if malformed_lines == 1 {
            "line"
        } else {
            "lines"
        };
        let verb = if malformed_lines == 1 { "is" } else { "are" };
        let first = first_malformed_line
            .map(|l| format!("; first: {}", one_line(l, MAX_REASON_LINE_CHARS)))
            .unwrap_or_default();
        return Some(format!(
            "the agent printed {malformed_lines} {plural} that {verb} not JSON{first}"
        ));
    }
    None
}

impl Default for TurnOptions {
    fn default() -> Self {
        Self {
            idle_timeout: None,
            first_output_timeout: None,
            cwd: None,
            text_flush_bytes: 4096,
            max_tool_summary_chars: 120,
            acp_permissions: AcpPermissions::default(),
            tool_permissions: ToolPermissions::default(),
            abort: None,
            on_run_recorded: None,
        }
    }
}

/// One turn to run.
#[derive(Clone, Debug)]
pub struct TurnRequest {
    /// The thread to continue; `None` starts a new one.
    pub thread: Option<ThreadId>,
    /// Model override (else the agent's configured model).
    pub model: Option<String>,
    /// The prompt text.
    pub prompt: String,
    /// Attachments, sent after the prompt's text block.
    pub attachments: Vec<Attachment>,
    /// Title of a new thread; `None` derives it from the prompt's first line.
    pub title: Option<String>,
}

/// Why a turn could not start; no run was recorded.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum TurnSetupError {
    /// The thread belongs to another agent.
    #[error("thread {thread} belongs to agent `{thread_agent}`, not `{agent}`")]
    ThreadAgentMismatch {
        /// The thread.
        thread: ThreadId,
        /// Its agent.
        thread_agent: String,
        /// The agent asked for.
        agent: String,
    },
    /// The launch configuration failed validation.
    #[error("agent `{agent}` cannot be launched")]
    Launch {
        /// The agent.
        agent: String,
        /// The failed rule, phrased for where the agent is defined ([`crate::agents::ConfigError::from_launch`]);
        /// always [`crate::agents::ConfigError::Launch`].
        #[source]
        source: crate::agents::ConfigError,
    },
    /// The prompt is empty and there are no attachments.
    #[error("the prompt is empty")]
    EmptyPrompt,
    /// The thread's recorded working directory is gone (or is no longer a directory): the agent would run
    /// somewhere else and lose its per-directory session.
    #[error("thread {thread} runs in {}, which is not a directory any more (restore it, or start a new thread)", .cwd.display())]
    ThreadCwdMissing {
        /// The thread.
        thread: ThreadId,
        /// Its recorded directory.
        cwd: PathBuf,
    },
    /// The thread's recorded working directory now leads elsewhere: the path is a symbolic link now, or names
    /// another directory (device and inode differ from those recorded with the thread, schema 6). The agent
    /// would run somewhere else than the thread's earlier turns (and lose its per-directory session).
    #[error("thread {thread} runs in {}, which {what}; the agent would run somewhere else (restore the directory, or start a new thread)", .cwd.display())]
    ThreadCwdReplaced {
        /// The thread.
        thread: ThreadId,
        /// Its recorded directory.
        cwd: PathBuf,
        /// What the path is now: `is now a symbolic link to …` or `is now another directory than when the
        /// thread was created`.
        what: String,
    },
    /// [`TurnOptions::cwd`] is not valid UTF-8, so it cannot be recorded on the thread.
    #[error("the working directory {} is not valid UTF-8", .0.display())]
    CwdNotUtf8(PathBuf),
    /// The agent's host provider (`agents.toml` `provider`) cannot be used: unknown, disabled, no enabled model,
    /// a remote URL without `remote_api_opt_in`, or its store failed.
    #[error("agent `{agent}` cannot use its provider: {source}")]
    Provider {
        /// The agent.
        agent: String,
        /// Why.
        #[source]
        source: crate::providers::ProviderError,
    },
    /// The store failed (includes an unknown thread: [`StoreError::ThreadNotFound`]).
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl TurnSetupError {
    /// Stable machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            TurnSetupError::ThreadAgentMismatch { .. } => "thread_agent_mismatch",
            TurnSetupError::Launch { source, .. } => source.code(),
            TurnSetupError::EmptyPrompt => "empty_prompt",
            TurnSetupError::ThreadCwdMissing { .. } => "thread_cwd_missing",
            TurnSetupError::ThreadCwdReplaced { .. } => "thread_cwd_replaced",
            TurnSetupError::CwdNotUtf8(_) => "cwd_not_utf8",
            TurnSetupError::Provider { source, .. } => source.code(),
            TurnSetupError::Store(e) => e.code(),
        }
    }
}

/// How a recorded run ended.
#[derive(Clone, Debug, PartialEq)]
pub struct TurnReport {
    /// Thread.
    pub thread_id: ThreadId,
    /// Run.
    pub run_id: RunId,
    /// The thread's session id after the turn.
    pub session_id: Option<String>,
    /// Final status (`succeeded | failed | cancelled`).
    pub status: RunStatus,
    /// Stable failure code (`agent_error`, `agent_exited_mid_turn`, `cancelled`, `spawn_failed`, …).
    pub error_code: Option<String>,
    /// Detail of the failure (the agent's stable code, exit status, …), never a secret.
    pub error_detail: Option<String>,
    /// Why the turn failed in the agent's own words ([`failure_reason`]); stored on the run. `None` on success,
    /// on cancel, or when the agent left nothing to say.
    pub error_reason: Option<String>,
    /// Usage.
    pub usage: Option<Usage>,
    /// Agent-reported cost.
    pub total_cost_usd: Option<f64>,
    /// Wall time from the user message being stored to the run being finished.
    pub duration: Duration,
    /// The full assistant text of the turn.
    pub assistant_text: String,
    /// Last bytes of the agent's stderr (bounded by the process crate's tail), for diagnostics.
    pub stderr_tail: String,
}

/// The one-line summary of a tool use: `⚙ Bash {"command":"ls"}`, at most `max_chars` characters (cut with `…`).
pub fn tool_use_summary(name: &str, input: &serde_json::Value, max_chars: usize) -> String {
    let input = if input.is_null() {
        String::new()
    } else {
        format!(" {input}")
    };
    bounded_line(&format!("⚙ {name}{input}"), max_chars)
}

/// The one-line summary of a tool result: `↳ error: <text>` or `↳ <text>`, at most `max_chars` characters.
pub fn tool_result_summary(is_error: bool, summary: &str, max_chars: usize) -> String {
    let first = summary.lines().next().unwrap_or("");
    let text = if is_error {
        format!("↳ error: {first}")
    } else {
        format!("↳ {first}")
    };
    bounded_line(&text, max_chars)
}

/// The agent side of a turn, one variant per protocol family.
#[derive(Debug)]
enum AgentRunner {
    /// `awp-jsonl` / `stream-json` over [`AgentSession`].
    Awp(Box<AgentSession>),
    /// `acp` over [`AcpRunner`].
    Acp(Box<AcpRunner>),
}

impl AgentRunner {
    /// Starts the agent; `cancel` resolving ends an ACP agent's setup (`cancelled`).
    async fn start<C: Future<Output = ()>>(
        agent: &AgentSpec,
        plan: &LaunchPlan,
        resume: Option<SessionId>,
        model: Option<&str>,
        cwd: Option<&std::path::Path>,
        options: &TurnOptions,
        cancel: std::pin::Pin<&mut C>,
    ) -> Result<Self, (String, String, Leftovers)> {
        if agent.protocol == AgentProtocol::Acp {
            return AcpRunner::start(
                plan,
                agent.max_line_bytes,
                resume.as_ref(),
                model,
                cwd,
                options.idle_timeout,
                first_output_timeout(agent, options),
                cancel,
                options.acp_permissions.clone(),
                options.max_tool_summary_chars,
            )
            .await
            .map(|runner| AgentRunner::Acp(Box::new(runner)))
            .map_err(|f| {
                let left = Leftovers {
                    stderr_tail: f.stderr_tail,
                    malformed_lines: f.invalid_lines,
                    first_malformed_line: f.first_invalid_line,
                };
                (f.code, f.detail, left)
            });
        }
        let early = |(code, detail): (String, String)| (code, detail, Leftovers::default());
        let mut session_options = SessionOptions::default();
        session_options.idle_timeout = options.idle_timeout;
        session_options.cwd = cwd.map(std::path::Path::to_path_buf);
        session_options.resumed_from = resume;
        session_options.limits.max_line_bytes = agent.max_line_bytes;
        // The agent dies with the host (Linux): see `ChildConfig::kill_on_parent_death`.
        session_options.child.kill_on_parent_death = true;
        let control = agent.protocol == AgentProtocol::StreamJson && agent.control_protocol;
        session_options.control_protocol = control;
        let session = match AgentSession::spawn(plan, session_options).await {
            Ok(session) => session,
            Err(e) => {
                return Err(early((
                    codes::SPAWN_FAILED.to_owned(),
                    e.cause_code().to_owned(),
                )));
            }
        };
        Ok(AgentRunner::Awp(Box::new(session)))
    }

    /// Sends Claude Code's `initialize` control request and waits for its answer, at most `timeout` (`None`:
    /// until the answer or the agent's exit). Only for a freshly started agent with the control protocol on;
    /// a no-op otherwise. Cancel-safe while waiting (the caller stops the agent then).
    async fn initialize(&mut self, timeout: Option<Duration>) -> Result<(), ControlError> {
        match self {
            AgentRunner::Awp(session) if session.control_protocol() => {
                session.initialize(timeout).await.map(drop)
            }
            _ => Ok(()),
        }
    }

    /// True when the agent speaks Claude Code's control protocol.
    fn control(&self) -> bool {
        matches!(self, AgentRunner::Awp(session) if session.control_protocol())
    }

    /// Sends `interrupt`; `false` when it could not be written (the caller falls back to the stop ladder).
    async fn interrupt(&mut self) -> bool {
        match self {
            AgentRunner::Awp(session) => session.interrupt().await.is_ok(),
            AgentRunner::Acp(_) => false,
        }
    }

    /// Answers one control message of the agent: `can_use_tool` through `permissions`, any other request with
    /// an error response; answers to the host's own requests and withdrawn requests need nothing.
    async fn answer_control(&mut self, message: ControlMessage, permissions: &ToolPermissions) {
        let AgentRunner::Awp(session) = self else {
            return;
        };
        let ControlMessage::Request {
            request_id,
            subtype,
            request,
        } = message
        else {
            return;
        };
        let line = if subtype == "can_use_tool" {
            let input = request.get("input").cloned().unwrap_or_default();
            let tool_name = request
                .get("tool_name")
                .and_then(serde_json::Value::as_str)
                .unwrap_or("")
                .to_owned();
            let answer = permissions
                .decide(ToolPermissionRequest {
                    tool_name,
                    input: input.clone(),
                })
                .await;
            control::permission_line(&request_id, &input, &answer)
        } else {
            control::error_line(
                &request_id,
                &format!(
                    "awp-host does not support the `{}` control request",
                    bounded_line(&subtype, 64)
                ),
            )
        };
        if let Err(e) = session.write_control(&line).await {
            tracing::warn!(%e, "answering a control request failed");
        }
    }

    /// The agent's pid (its process group id) while it runs; `None` once its exit was seen.
    fn pid(&self) -> Option<u32> {
        match self {
            AgentRunner::Awp(session) => session.id(),
            AgentRunner::Acp(runner) => runner.pid(),
        }
    }

    /// Events of the agent's setup, recorded before the prompt is sent (ACP: the session id, a not-resumed note).
    fn take_startup_events(&mut self) -> Vec<NormalizedEvent> {
        match self {
            AgentRunner::Awp(_) => Vec::new(),
            AgentRunner::Acp(runner) => runner.take_startup_events(),
        }
    }

    async fn send(&mut self, blocks: &[ContentBlock]) -> Result<(), (String, String)> {
        match self {
            AgentRunner::Awp(session) => session
                .send_turn(blocks)
                .await
                .map_err(|e| (e.code().to_owned(), e.to_string())),
            AgentRunner::Acp(runner) => runner.send(blocks).await,
        }
    }

    async fn next_item(&mut self) -> Option<SessionItem> {
        match self {
            AgentRunner::Awp(session) => session.next_item().await,
            AgentRunner::Acp(runner) => runner.next_event().await.map(SessionItem::Event),
        }
    }

    async fn cancel(&mut self) {
        match self {
            AgentRunner::Awp(session) => {
                session.cancel_turn().await;
            }
            AgentRunner::Acp(runner) => runner.cancel().await,
        }
    }

    /// True when the process can take another turn: an AWP session whose process is alive and between turns.
    /// ACP runners are never kept (each turn reopens the session with `session/load`).
    fn reusable(&self) -> bool {
        match self {
            AgentRunner::Awp(session) => session.is_alive() && !session.in_turn(),
            AgentRunner::Acp(_) => false,
        }
    }

    /// What the agent left so far, without stopping it (AWP only; see [`reusable`](Self::reusable)).
    fn leftovers(&self) -> Leftovers {
        match self {
            AgentRunner::Awp(session) => leftovers_of(&session.diagnostics()),
            AgentRunner::Acp(_) => Leftovers::default(),
        }
    }

    /// Ends the agent process with the stop ladder; returns what it left (stderr tail, non-protocol lines).
    async fn finish(self) -> Leftovers {
        match self {
            AgentRunner::Awp(mut session) => {
                session.stop().await;
                leftovers_of(&session.diagnostics())
            }
            AgentRunner::Acp(runner) => Leftovers {
                stderr_tail: runner.finish().await,
                ..Leftovers::default()
            },
        }
    }

    /// [`finish`](Self::finish), also returning how the agent exited (`exit code 1`, `killed by signal 9`; AWP
    /// agents only).
    async fn finish_with_exit(self) -> (Leftovers, Option<String>) {
        match self {
            AgentRunner::Awp(mut session) => {
                session.stop().await;
                let d = session.diagnostics();
                (leftovers_of(&d), d.exit.map(|status| status.to_string()))
            }
            runner => (runner.finish().await, None),
        }
    }
}

fn leftovers_of(d: &agentwire_awp::session::Diagnostics) -> Leftovers {
    Leftovers {
        stderr_tail: d.stderr_tail.clone(),
        malformed_lines: d.counters.malformed_lines,
        first_malformed_line: d.first_malformed_line.clone(),
    }
}

/// The code and detail of a run whose agent failed the `initialize` control request with `error`, given how the
/// stopped agent exited (`exit`): no answer in time is the first-output timeout (`secs`, the bound); an exit (or a
/// closed stdin, which is how an exited agent shows when the request is written) says the exit status; a
/// refusal quotes the agent.
fn initialize_failure(error: &ControlError, exit: Option<&str>, secs: u64) -> (String, String) {
    let exit = exit.unwrap_or("exit status unknown");
    match error {
        ControlError::Timeout { .. } => (
            FIRST_OUTPUT_TIMEOUT.to_owned(),
            format!("no answer to the `initialize` control request {secs} s after launch"),
        ),
        ControlError::Exited { .. } => (
            CONTROL_INITIALIZE_FAILED.to_owned(),
            format!("{error}: {exit} ({})", error.code()),
        ),
        ControlError::Write(_) => (
            CONTROL_INITIALIZE_FAILED.to_owned(),
            format!(
                "the agent exited before reading the `initialize` control request: {exit} ({})",
                error.code()
            ),
        ),
        _ => (
            CONTROL_INITIALIZE_FAILED.to_owned(),
            format!("{error} ({})", error.code()),
        ),
    }
}

/// The content blocks of a turn: the prompt as a text block (when non-empty), then each attachment's block.
pub fn turn_blocks(prompt: &str, attachments: &[Attachment]) -> Vec<ContentBlock> {
    let mut blocks = Vec::with_capacity(1 + attachments.len());
    if !prompt.is_empty() {
        blocks.push(ContentBlock::text(prompt));
    }
    blocks.extend(attachments.iter().map(|a| a.block.clone()));
    blocks
}

/// The stored user message: the prompt, then one `[attachment: …]` line per attachment.
fn stored_user_message(prompt: &str, attachments: &[Attachment]) -> String {
    let mut text = prompt.to_owned();
    for a in attachments {
        if !text.is_empty() {
            text.push('\n');
        }
        text.push_str(&a.describe());
    }
    text
}

/// Persists what streams in: session ids, batched assistant text, tool summaries.
struct Recorder<'a> {
    store: &'a mut Store,
    guard: RunGuard,
    options: &'a TurnOptions,
    message: Option<i64>,
    pending: String,
    full_text: String,
    session_id: Option<String>,
    invalid_session_id: bool,
    /// A tool line was stored since the last text.
    after_tool: bool,
}

impl Recorder<'_> {
    fn flush(&mut self) -> Result<(), StoreError> {
        if !self.pending.is_empty() {
            self.message = Some(self.store.append_assistant_text(
                &self.guard,
                self.message,
                &self.pending,
            )?);
            self.pending.clear();
        }
        Ok(())
    }

    fn session(&mut self, id: &SessionId) -> Result<(), StoreError> {
        if self.session_id.as_deref() != Some(id.as_str()) {
            self.store.record_session_id(&self.guard, id.as_str())?;
            self.session_id = Some(id.as_str().to_owned());
        }
        Ok(())
    }

    fn record(&mut self, event: &NormalizedEvent) -> Result<(), StoreError> {
        match event {
            NormalizedEvent::SessionStarted { session_id, .. } => self.session(session_id)?,
            NormalizedEvent::TextDelta { text } => {
                // Text after a tool line starts a new stored message; the whole-turn text keeps them apart too.
                if self.message.is_none()
                    && self.pending.is_empty()
                    && self.after_tool
                    && !self.full_text.is_empty()
                {
                    self.full_text
                        .push_str(agentwire_awp::machine::TEXT_BLOCK_SEPARATOR);
                }
                self.after_tool = false;
                self.pending.push_str(text);
                self.full_text.push_str(text);
                if self.pending.len() >= self.options.text_flush_bytes {
                    self.flush()?;
                }
            }
            NormalizedEvent::ToolUse { name, input, .. } => {
                self.flush()?;
                self.message = None;
                self.after_tool = true;
                self.store.add_tool_summary(
                    &self.guard,
                    &tool_use_summary(name, input, self.options.max_tool_summary_chars),
                )?;
            }
            NormalizedEvent::ToolResult {
                is_error, summary, ..
            } => {
                self.flush()?;
                self.message = None;
                self.after_tool = true;
                self.store.add_tool_summary(
                    &self.guard,
                    &tool_result_summary(*is_error, summary, self.options.max_tool_summary_chars),
                )?;
            }
            NormalizedEvent::Notice { kind, .. } if kind == codes::INVALID_SESSION_ID => {
                self.invalid_session_id = true;
            }
            NormalizedEvent::Notice {
                kind,
                detail: Some(detail),
            } if kind == SESSION_NOT_RESUMED => {
                // Noted in the thread, so a reader sees why the agent lost the earlier context.
                self.store
                    .add_tool_summary(&self.guard, &format!("ℹ {detail}"))?;
            }
            NormalizedEvent::TurnCompleted(outcome) => {
                // Pending text is stored with the run's end (one commit fewer per turn).
                if let Some(id) = &outcome.session_id {
                    self.session(id)?;
                }
            }
            _ => {}
        }
        Ok(())
    }
}

fn run_usage(u: &Usage) -> RunUsage {
    RunUsage {
        input_tokens: u.input_tokens,
        output_tokens: u.output_tokens,
        cache_read_input_tokens: u.cache_read_input_tokens,
        cache_creation_input_tokens: u.cache_creation_input_tokens,
    }
}

fn status_of(code: &str) -> RunStatus {
    if code == codes::CANCELLED || code == ABORTED_CODE {
        RunStatus::Cancelled
    } else {
        RunStatus::Failed
    }
}

/// One agent process kept alive across the turns of a conversation (an interactive session), as the AWP
/// protocol intends: each turn is one more user line on the same process's stdin, without `--resume`.
///
/// Use [`run_turn_live`] for every turn, then [`stop`](Self::stop). The process is kept after a turn only when it
/// is an `awp-jsonl`/`stream-json` agent that is alive and between turns (also after a turn cancelled with
/// the control protocol's `interrupt`); after a cancelled turn the stop ladder ended, a timeout, a line-limit violation, an exit, or for ACP agents, the next turn starts a new
/// process that resumes the thread's session (`--resume`, ACP `session/load`): [`restarts`](Self::restarts)
/// counts those. A new thread (or another agent) also starts a new process, and so does a thread on which
/// another host recorded runs since the last turn here (the kept process has not seen them).
/// [`TurnOptions::on_run_recorded`] is called only for turns that start a process (its variables go into the
/// launch).
#[derive(Debug, Default)]
pub struct LiveAgent {
    runner: Option<AgentRunner>,
    /// The thread and agent the kept process serves.
    thread: Option<(ThreadId, String)>,
    /// Processes started after the first one of the same thread.
    restarts: u64,
    /// Processes started in all.
    spawned: u64,
    /// The thread's run count after the last turn here.
    runs_seen: u64,
}

impl LiveAgent {
    /// No process yet; the first [`run_turn_live`] starts one.
    pub fn new() -> Self {
        Self::default()
    }

    /// True while a process is kept for the next turn.
    pub fn is_alive(&self) -> bool {
        self.runner.as_ref().is_some_and(AgentRunner::reusable)
    }

    /// The kept process's id, if any.
    pub fn pid(&self) -> Option<u32> {
        match &self.runner {
            Some(AgentRunner::Awp(session)) => session.id(),
            _ => None,
        }
    }

    /// How many processes were started for a thread that already had one (after a cancel, a crash, …).
    pub fn restarts(&self) -> u64 {
        self.restarts
    }

    /// How many agent processes were started in all.
    pub fn spawned(&self) -> u64 {
        self.spawned
    }

    /// Stops the kept process with the stop ladder (stdin EOF first, so an AWP agent exits on its own).
    pub async fn stop(&mut self) {
        if let Some(runner) = self.runner.take() {
            runner.finish().await;
        }
    }

    /// Forgets the thread: the next turn (with `thread: None`) starts a new process for a new thread.
    pub async fn new_thread(&mut self) {
        self.stop().await;
        self.thread = None;
    }
}

/// Runs one turn of `agent` and records it in `store`.
///
/// Order (invariant 10): the user message and a `running` run are committed before the agent is even started;
/// each session id is stored as soon as it is reported; text is stored in batches of
/// [`TurnOptions::text_flush_bytes`]; the run's end is committed last. Every event is passed to `observer`
/// (including the final `TurnCompleted`) after it was recorded (text deltas into the pending batch, everything
/// else committed). When `cancel` resolves the turn is cancelled and recorded `cancelled`: a stream-json agent
/// with [`AgentSpec::control_protocol`] on gets an `interrupt` control request and ends the turn with its own
/// `result` (the stop ladder after [`CONTROL_INTERRUPT_GRACE`] without one); any other agent is stopped with
/// the stop ladder. With the control protocol on, the agent is `initialize`d right after launch
/// ([`CONTROL_INITIALIZE_FAILED`] when it refuses or exits, [`FIRST_OUTPUT_TIMEOUT`] without an answer within the
/// first-output timeout; a cancel while it waits stops the agent with the stop ladder and records the run
/// `cancelled` with detail [`CANCELLED_AT_INITIALIZE`]) and its `can_use_tool` requests are answered with
/// [`TurnOptions::tool_permissions`]. After the turn the agent process is stopped (stdin EOF → grace → SIGTERM →
/// SIGKILL to its process group).
///
/// Failures after the run was recorded (spawn failure, stdin write failure, agent error, exit mid-turn, idle
/// timeout, line limit, cancel) are reported in the [`TurnReport`], not as `Err`.
///
/// # Errors
/// [`TurnSetupError`] when no run could be recorded; [`TurnSetupError::Store`] also when the store fails mid-turn
/// (the agent is stopped, the run is left `running` and becomes `interrupted` at the next open).
pub async fn run_turn(
    store: &mut Store,
    agent: &AgentSpec,
    request: TurnRequest,
    options: &TurnOptions,
    observer: &mut dyn FnMut(&NormalizedEvent),
    cancel: impl Future<Output = ()>,
) -> Result<TurnReport, TurnSetupError> {
    run_turn_inner(store, agent, request, options, observer, cancel, None).await
}

/// [`run_turn`] on the process `live` keeps between turns: the same recording, order and errors; the process
/// is reused when `live` holds one for this thread and agent, and kept afterwards when it can take another turn
/// (see [`LiveAgent`]). Cancelling a turn stops the process (the stop ladder) and the next turn restarts it with
/// `--resume`, except for an agent with [`AgentSpec::control_protocol`] that ended the interrupted turn with its
/// `result`: its process is kept.
///
/// # Errors
/// As [`run_turn`].
pub async fn run_turn_live(
    store: &mut Store,
    agent: &AgentSpec,
    request: TurnRequest,
    options: &TurnOptions,
    observer: &mut dyn FnMut(&NormalizedEvent),
    cancel: impl Future<Output = ()>,
    live: &mut LiveAgent,
) -> Result<TurnReport, TurnSetupError> {
    run_turn_inner(store, agent, request, options, observer, cancel, Some(live)).await
}

/// The recorded directory `dir` of `thread`, checked: still a directory ([`TurnSetupError::ThreadCwdMissing`]),
/// not a symbolic link now, and the same directory as recorded when `identity` (device, inode) is known
/// ([`TurnSetupError::ThreadCwdReplaced`]). A turn of the thread runs there only when this passes.
///
/// # Errors
/// [`TurnSetupError::ThreadCwdMissing`], [`TurnSetupError::ThreadCwdReplaced`].
pub fn check_thread_cwd(
    thread: &ThreadId,
    dir: PathBuf,
    identity: Option<(u64, u64)>,
) -> Result<PathBuf, TurnSetupError> {
    use std::os::unix::fs::MetadataExt as _;
    let replaced = |dir: PathBuf, what: String| TurnSetupError::ThreadCwdReplaced {
        thread: thread.clone(),
        cwd: dir,
        what,
    };
    if std::fs::symlink_metadata(&dir).is_ok_and(|m| m.file_type().is_symlink()) {
        let target = std::fs::read_link(&dir)
            .map(|t| t.display().to_string())
            .unwrap_or_else(|_| "?".to_owned());
        return Err(replaced(dir, format!("is now a symbolic link to {target}")));
    }
    let Some(meta) = std::fs::metadata(&dir)
        .ok()
        .filter(std::fs::Metadata::is_dir)
    else {
        return Err(TurnSetupError::ThreadCwdMissing {
            thread: thread.clone(),
            cwd: dir,
        });
    };
    if identity.is_some_and(|recorded| recorded != (meta.dev(), meta.ino())) {
        return Err(replaced(
            dir,
            "is now another directory than when the thread was created".to_owned(),
        ));
    }
    Ok(dir)
}

async fn run_turn_inner(
    store: &mut Store,
    agent: &AgentSpec,
    request: TurnRequest,
    options: &TurnOptions,
    observer: &mut dyn FnMut(&NormalizedEvent),
    cancel: impl Future<Output = ()>,
    mut live: Option<&mut LiveAgent>,
) -> Result<TurnReport, TurnSetupError> {
    if request.prompt.trim().is_empty() && request.attachments.is_empty() {
        return Err(TurnSetupError::EmptyPrompt);
    }
    let new_cwd = match &options.cwd {
        Some(dir) => Some(
            dir.to_str()
                .ok_or_else(|| TurnSetupError::CwdNotUtf8(dir.clone()))?,
        ),
        None => None,
    };
    let mut run_count = 0;
    let (thread_choice, resume, cwd) = match &request.thread {
        None => (
            ThreadChoice::New {
                agent: agent.name.clone(),
            },
            None,
            options.cwd.clone(),
        ),
        Some(id) => {
            let thread = store
                .thread(id)?
                .ok_or_else(|| StoreError::ThreadNotFound(id.clone()))?;
            run_count = thread.run_count;
            if thread.agent != agent.name {
                return Err(TurnSetupError::ThreadAgentMismatch {
                    thread: id.clone(),
                    thread_agent: thread.agent,
                    agent: agent.name.clone(),
                });
            }
            // Stored ids were validated before they were persisted; a bad one means a corrupt row.
            let resume = match thread.session_id {
                Some(s) => Some(SessionId::new(s).map_err(|e| {
                    StoreError::Corrupt(format!("stored session id is invalid: {e}"))
                })?),
                None => None,
            };
            let cwd = match thread.cwd {
                Some(dir) => Some(check_thread_cwd(
                    id,
                    PathBuf::from(dir),
                    thread.cwd_identity,
                )?),
                None => options.cwd.clone(),
            };
            (ThreadChoice::Existing(id.clone()), resume, cwd)
        }
    };
    let model = request
        .model
        .as_deref()
        .or(agent.launch.default_model.as_deref());
    // ACP agents get no `--model`/`--resume` flags: the session is reopened with `session/resume` or `session/load`
    // and the model selected with `session/set_config_option` (crate::acp_turn).
    let mut plan = if agent.protocol == AgentProtocol::Acp {
        agent.launch.plan(None, None, None)
    } else {
        agent
            .launch
            .plan(request.model.as_deref(), resume.as_ref(), None)
    }
    .map_err(|e| TurnSetupError::Launch {
        agent: agent.name.clone(),
        source: crate::agents::ConfigError::from_launch(&e, agent.source),
    })?;
    plan.args
        .extend(agent.extra_args().into_iter().map(str::to_owned));
    if let Some(provider) = &agent.provider {
        let env = crate::providers::agent_env(
            store.data_dir(),
            provider,
            model,
            agent.launch.remote_api_opt_in,
        )
        .map_err(|source| TurnSetupError::Provider {
            agent: agent.name.clone(),
            source,
        })?;
        for (key, value) in env {
            plan.env.retain(|(k, _)| *k != key);
            plan.env.push((key, value));
        }
    }

    // The process kept for this thread and agent, if any; a process for anything else is stopped.
    let mut kept = None;
    if let Some(live) = live.as_deref_mut() {
        let same = match (&live.thread, &request.thread) {
            (Some((thread, name)), Some(wanted)) => thread == wanted && *name == agent.name,
            _ => false,
        };
        // Runs recorded on the thread by someone else since our last turn: the kept process has not seen
        // them, so a new one resumes the session instead.
        if same && live.is_alive() && live.runs_seen == run_count {
            kept = live.runner.take();
        } else {
            live.stop().await;
            if same {
                live.restarts += 1;
            }
        }
    }
    let reused = kept.is_some();

    let started = Instant::now();
    let stored_prompt = stored_user_message(&request.prompt, &request.attachments);
    let guard = store.begin_run(NewRun {
        thread: thread_choice,
        agent: &agent.name,
        model,
        prompt: &stored_prompt,
        resumed_session_id: resume.as_ref().filter(|_| !reused).map(SessionId::as_str),
        title: request.title.as_deref(),
        cwd: new_cwd,
    })?;
    let thread_id = guard.thread_id.clone();
    let run_id = guard.run_id.clone();
    // A kept process has its environment already: the hook (a run-scoped token) is for a launch.
    if let Some(hook) = options.on_run_recorded.as_ref().filter(|_| !reused) {
        for (key, value) in (hook.0)(&thread_id, &run_id).await {
            plan.env.retain(|(k, _)| *k != key);
            plan.env.push((key, value));
        }
    }
    let mut recorder = Recorder {
        store,
        guard,
        options,
        message: None,
        pending: String::new(),
        full_text: String::new(),
        session_id: resume.as_ref().map(|s| s.as_str().to_owned()),
        invalid_session_id: false,
        after_tool: false,
    };

    let fail_early = |recorder: Recorder<'_>, code: &str, detail: String, left: Leftovers| {
        // A cancel before the turn was written (while the agent was being initialized) is recorded `cancelled`.
        let error_reason = (status_of(code) == RunStatus::Failed)
            .then(|| {
                failure_reason(
                    None,
                    None,
                    &left.stderr_tail,
                    left.malformed_lines,
                    left.first_malformed_line.as_deref(),
                )
            })
            .flatten();
        let end = RunEnd {
            status: status_of(code),
            usage: None,
            error_code: Some(code.to_owned()),
            // Stored: the agent's reason, else the host's own detail, so `threads show` can say why any run failed.
            error_reason: error_reason.clone().or_else(|| Some(detail.clone())),
            total_cost_usd: None,
            pending_text: None,
        };
        let Recorder {
            store,
            guard,
            session_id,
            ..
        } = recorder;
        store.finish_run(guard, &end)?;
        Ok::<_, TurnSetupError>(TurnReport {
            thread_id: thread_id.clone(),
            run_id: run_id.clone(),
            session_id,
            status: status_of(code),
            error_code: Some(code.to_owned()),
            error_detail: Some(detail),
            error_reason,
            usage: None,
            total_cost_usd: None,
            duration: started.elapsed(),
            assistant_text: String::new(),
            stderr_tail: left.stderr_tail,
        })
    };

    let blocks = turn_blocks(&request.prompt, &request.attachments);
    let keep = live.is_some();
    let mut spawned = false;
    // With the control protocol on, the `initialize` answer is awaited as long as the first output (the turn is
    // written after it): a silent agent speaks another protocol or waits for a login.
    let initialize_timeout = first_output_timeout(agent, options);
    let drive = async {
        let mut cancel = std::pin::pin!(cancel);
        let mut runner = match kept {
            Some(runner) => runner,
            None => {
                spawned = true;
                match AgentRunner::start(
                    agent,
                    &plan,
                    resume.clone(),
                    model,
                    cwd.as_deref(),
                    options,
                    cancel.as_mut(),
                )
                .await
                {
                    Ok(runner) => runner,
                    Err((code, cause, left)) => {
                        return Ok(Driven::Early(code, cause, left));
                    }
                }
            }
        };
        // A host killed mid-turn leaves this pid behind: the next turn refuses the thread while its group lives.
        if let Some(Err(e)) = runner
            .pid()
            .map(|pid| recorder.store.record_agent_pid(&recorder.guard, pid))
        {
            runner.finish().await;
            return Err(e);
        }
        if spawned {
            // Claude Code's control protocol: `initialize` before the first turn; a Ctrl-C while the agent has
            // not answered stops it at once (nothing to interrupt yet).
            let initialized = tokio::select! {
                result = runner.initialize(initialize_timeout) => Some(result),
                () = &mut cancel => None,
            };
            match initialized {
                Some(Ok(())) => {}
                Some(Err(e)) => {
                    let (left, exit) = runner.finish_with_exit().await;
                    let secs = initialize_timeout.map_or(0, |t| t.as_secs());
                    let (code, detail) = initialize_failure(&e, exit.as_deref(), secs);
                    return Ok(Driven::Early(code, detail, left));
                }
                None => {
                    let left = runner.finish().await;
                    return Ok(Driven::Early(
                        codes::CANCELLED.to_owned(),
                        CANCELLED_AT_INITIALIZE.to_owned(),
                        left,
                    ));
                }
            }
        }
        for event in runner.take_startup_events() {
            if let Err(e) = recorder.record(&event) {
                runner.finish().await;
                return Err(e);
            }
            observer(&event);
        }
        if let Err((code, detail)) = runner.send(&blocks).await {
            // Stops the agent, waiting for its exit and draining its stderr.
            let left = runner.finish().await;
            // An agent that died before reading the turn (a broken stdin pipe, or its exit seen first) is one
            // failure whichever way the race went: reported like an exit mid-turn, with its stderr tail.
            if code == STDIN_WRITE_FAILED || code == AGENT_EXITED {
                let detail = format!("the agent exited before reading the turn ({code}: {detail})");
                return Ok(Driven::Early(
                    codes::AGENT_EXITED_MID_TURN.to_owned(),
                    detail,
                    left,
                ));
            }
            return Ok(Driven::Early(code, detail, left));
        }
        let mut cancelled = false;
        // Set while an `interrupt` control request waits for the agent's `result`: the stop ladder's start.
        let mut interrupt_due: Option<tokio::time::Instant> = None;
        let mut interrupted = false;
        let mut outcome: Option<TurnOutcome> = None;
        // Until the agent's first event: a silent agent speaks another protocol or waits for a login.
        // (ACP agents: their setup answers were bounded instead, see crate::acp_turn.)
        let mut first_output = match agent.protocol {
            AgentProtocol::Acp => None,
            _ => first_output_timeout(agent, options),
        }
        .map(|t| (t, tokio::time::Instant::now() + t));
        loop {
            let item = if cancelled {
                tokio::select! {
                    item = runner.next_item() => item,
                    () = first_output_due(interrupt_due) => {
                        // No `result` within the grace: the stop ladder after all.
                        interrupt_due = None;
                        interrupted = false;
                        runner.cancel().await;
                        continue;
                    }
                }
            } else {
                tokio::select! {
                    item = runner.next_item() => item,
                    () = &mut cancel => {
                        cancelled = true;
                        if runner.control() && runner.interrupt().await {
                            interrupted = true;
                            interrupt_due = Some(tokio::time::Instant::now() + CONTROL_INTERRUPT_GRACE);
                        } else {
                            runner.cancel().await;
                        }
                        continue;
                    }
                    () = first_output_due(first_output.map(|(_, at)| at)) => {
                        let secs = first_output.map_or(0, |(t, _)| t.as_secs());
                        outcome = Some(TurnOutcome::new(TurnStatus::Failed {
                            code: FIRST_OUTPUT_TIMEOUT.to_owned(),
                            detail: Some(format!("no protocol event {secs} s after the turn was written")),
                        }));
                        break;
                    }
                }
            };
            // The notice that lines came before the turn was written is no output of the turn: an agent that
            // printed a login prompt at start and then waits must still meet the first-output timeout.
            let before_input = matches!(
                &item,
                Some(SessionItem::Event(NormalizedEvent::Notice { kind, .. }))
                    if kind == codes::OUTPUT_BEFORE_INPUT
            );
            if !before_input {
                first_output = None;
            }
            let event = match item {
                Some(SessionItem::Event(event)) => event,
                Some(SessionItem::Control(message)) => {
                    runner
                        .answer_control(message, &options.tool_permissions)
                        .await;
                    continue;
                }
                Some(_) => continue,
                None => break,
            };
            if let Err(e) = recorder.record(&event) {
                runner.cancel().await;
                runner.finish().await;
                return Err(e);
            }
            observer(&event);
            if let NormalizedEvent::TurnCompleted(o) = event {
                outcome = Some(o);
                break;
            }
        }
        // The agent ended an interrupted turn with its own `result`: a cancel, whatever its subtype says.
        if interrupted && let Some(o) = outcome.as_mut() {
            o.status = TurnStatus::Failed {
                code: codes::CANCELLED.to_owned(),
                detail: Some(INTERRUPTED.to_owned()),
            };
        }
        if keep && runner.reusable() {
            let left = runner.leftovers();
            return Ok(Driven::Done(outcome, left, Some(runner)));
        }
        let left = runner.finish().await;
        Ok(Driven::Done(outcome, left, None))
    };
    // Dropping `drive` drops the runner, whose child kills the agent's process group with SIGKILL.
    let driven = tokio::select! {
        biased;
        () = abort_requested(options.abort.clone()) => None,
        driven = drive => Some(driven),
    };
    if let Some(live) = live.as_deref_mut()
        && spawned
    {
        live.spawned += 1;
    }
    let mut keep_runner = None;
    let (outcome, left) = match driven {
        Some(Ok(Driven::Done(outcome, left, runner))) => {
            keep_runner = runner;
            (outcome, left)
        }
        Some(Ok(Driven::Early(code, detail, left))) => {
            if let Some(live) = live {
                live.thread = Some((thread_id.clone(), agent.name.clone()));
            }
            return fail_early(recorder, &code, detail, left);
        }
        Some(Err(e)) => return Err(e.into()),
        None => {
            let outcome = TurnOutcome::new(TurnStatus::Failed {
                code: ABORTED_CODE.to_owned(),
                detail: Some(ABORTED.to_owned()),
            });
            (Some(outcome), Leftovers::default())
        }
    };
    // `next_event` ends every accepted turn with TurnCompleted; a missing one would be a runner bug, recorded as
    // an exit mid-turn rather than lost.
    let outcome = outcome
        .unwrap_or_else(|| TurnOutcome::new(TurnStatus::failed(codes::AGENT_EXITED_MID_TURN)));
    let (mut status, mut error_code, mut error_detail) = match &outcome.status {
        TurnStatus::Success => (RunStatus::Succeeded, None, None),
        TurnStatus::Failed { code, detail } => {
            (status_of(code), Some(code.clone()), detail.clone())
        }
    };
    if error_code.as_deref() == Some(codes::STDOUT_LINE_TOO_LONG) {
        let detail = error_detail.take().unwrap_or_default();
        error_detail = Some(format!(
            "{detail} (the limit is agent `{}`'s max_line_bytes = {} in agents.toml)",
            agent.name, agent.max_line_bytes
        ));
    }
    // The agent's `result` text explains a failure only when the agent itself failed the turn.
    let mut result_text = outcome.result_text.as_deref();
    if recorder.invalid_session_id && status == RunStatus::Succeeded {
        result_text = None;
        status = RunStatus::Failed;
        error_code = Some(INVALID_SESSION_ID.to_owned());
        error_detail =
            Some("the agent reported a session id outside [A-Za-z0-9._:-]{1,256}".to_owned());
    }
    let error_reason = match status {
        RunStatus::Failed => failure_reason(
            result_text,
            error_detail.as_deref(),
            &left.stderr_tail,
            left.malformed_lines,
            left.first_malformed_line.as_deref(),
        ),
        _ => None,
    };
    let pending_text = (!recorder.pending.is_empty()).then(|| PendingText {
        message: recorder.message,
        text: std::mem::take(&mut recorder.pending),
    });
    let total_cost_usd = match (&agent.protocol, outcome.total_cost_usd) {
        (AgentProtocol::Acp, Some(cumulative)) => {
            let session = recorder
                .session_id
                .clone()
                .or_else(|| outcome.session_id.as_ref().map(|s| s.to_string()));
            let earlier = match (&session, recorder.store.thread_detail(&thread_id)) {
                (Some(session), Ok(detail)) => earlier_session_cost(&detail.runs, session),
                _ => 0.0,
            };
            Some(acp_run_cost(cumulative, earlier))
        }
        (_, cost) => cost,
    };
    let end = RunEnd {
        status,
        usage: outcome.usage.as_ref().map(run_usage),
        error_code: error_code.clone(),
        // Stored: the agent's reason, else the host's own detail, so `threads show` can say why any run failed.
        error_reason: error_reason.clone().or_else(|| error_detail.clone()),
        total_cost_usd,
        pending_text,
    };
    let Recorder {
        store,
        guard,
        full_text,
        session_id,
        ..
    } = recorder;
    store.finish_run(guard, &end)?;
    if let Some(live) = live {
        live.thread = Some((thread_id.clone(), agent.name.clone()));
        live.runner = keep_runner;
        // A failed read only costs a restart at the next turn.
        live.runs_seen = store
            .thread(&thread_id)
            .ok()
            .flatten()
            .map_or(u64::MAX, |t| t.run_count);
    }
    Ok(TurnReport {
        thread_id,
        run_id,
        session_id,
        status,
        error_code,
        error_detail,
        error_reason,
        usage: outcome.usage,
        total_cost_usd: outcome.total_cost_usd,
        duration: started.elapsed(),
        assistant_text: full_text,
        stderr_tail: left.stderr_tail,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_summaries_are_bounded_one_liners() {
        let input = serde_json::json!({"command": "ls"});
        assert_eq!(
            tool_use_summary("Bash", &input, 120),
            r#"⚙ Bash {"command":"ls"}"#
        );
        let long = serde_json::json!({"command": "x".repeat(300)});
        let s = tool_use_summary("Bash", &long, 120);
        assert_eq!(s.chars().count(), 120);
        assert!(s.ends_with('…'));
        let exact = tool_use_summary("B", &serde_json::Value::Null, 3);
        assert_eq!(exact, "⚙ B");
        assert_eq!(tool_use_summary("Bash", &serde_json::Value::Null, 3), "⚙ …");
        assert_eq!(
            tool_result_summary(true, "boom\nmore", 120),
            "↳ error: boom"
        );
        assert_eq!(tool_result_summary(false, "a\tb", 120), "↳ a b");
    }

    #[test]
    fn a_failure_reason_is_the_agents_own_words_bounded() {
        // The result text, unless it only repeats the reported code.
        assert_eq!(
            failure_reason(
                Some("No conversation found"),
                Some("error_during_execution"),
                "x",
                0,
                None
            ),
            Some("No conversation found".to_owned())
        );
        assert_eq!(
            failure_reason(
                Some("fixture_failure"),
                Some("fixture_failure"),
                "",
                0,
                None
            ),
            None
        );
        // Else the last stderr lines, escaped, at most five, each bounded.
        let tail = "one\n\ntwo\nthree\nfour\nfive\nsix\u{1b}[31m\n";
        assert_eq!(
            failure_reason(None, None, tail, 2, Some("banner")).as_deref(),
            Some("two | three | four | five | six\\u{1b}[31m")
        );
        let long = "é".repeat(MAX_REASON_LINE_CHARS + 1);
        let reason = failure_reason(None, None, &long, 0, None).unwrap();
        assert_eq!(reason.chars().count(), MAX_REASON_LINE_CHARS);
        let exact = "é".repeat(MAX_REASON_LINE_CHARS);
        assert_eq!(failure_reason(None, None, &exact, 0, None), Some(exact));
        let huge = "x".repeat(MAX_REASON_CHARS + 1);
        let reason = failure_reason(Some(&huge), None, "", 0, None).unwrap();
        assert_eq!(reason.chars().count(), MAX_REASON_CHARS);
        // Else what it printed that was not protocol.
        assert_eq!(
            failure_reason(None, None, " \n", 3, Some("Please log in")).as_deref(),
            Some("the agent printed 3 lines that are not JSON; first: Please log in")
        );
        assert_eq!(
            failure_reason(None, None, "", 1, None).as_deref(),
            Some("the agent printed 1 line that is not JSON")
        );
        assert_eq!(failure_reason(None, None, "", 0, None), None);
    }

    #[test]
    fn stored_user_message_lists_attachments() {
        assert_eq!(stored_user_message("hi", &[]), "hi");
        assert!(turn_blocks("", &[]).is_empty());
        assert_eq!(turn_blocks("hi", &[]), vec![ContentBlock::text("hi")]);
    }
}

/// The cost recorded for the runs of `session` so far (USD; each an ACP per-run cost, see [`acp_run_cost`]).
pub fn earlier_session_cost(runs: &[crate::store::RunRecord], session: &str) -> f64 {
    runs.iter()
        .filter(|r| r.session_id.as_deref() == Some(session))
        .filter_map(|r| r.total_cost_usd)
        .sum()
}

/// The cost of one ACP run: ACP `usage_update.cost` is the session's cumulative cost (ACP schema
/// `UsageUpdate.cost`), so a run records `cumulative` minus what the session's earlier runs recorded (`earlier`),
/// never below 0 (an agent whose count went back is charged nothing for the run). The runs' costs then add up to
/// the session's cumulative cost, as the thread's total cost sums runs.
pub fn acp_run_cost(cumulative: f64, earlier: f64) -> f64 {
    (cumulative - earlier).max(0.0)
}

#[cfg(test)]
mod acp_cost_tests {
    use super::*;

    #[test]
    fn acp_cumulative_costs_are_recorded_as_per_run_deltas() {
        // $1, $2, $3 cumulative over three runs of one session: runs record 1, 1, 1; the thread totals $3.
        let mut earlier = 0.0;
        let mut recorded = Vec::new();
        for cumulative in [1.0, 2.0, 3.0] {
            let cost = acp_run_cost(cumulative, earlier);
            earlier += cost;
            recorded.push(cost);
        }
        assert_eq!(recorded, [1.0, 1.0, 1.0]);
        assert_eq!(earlier, 3.0);
        assert_eq!(acp_run_cost(0.5, 3.0), 0.0);
    }
}
