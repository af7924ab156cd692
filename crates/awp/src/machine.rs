//! The sans-IO turn machine: stdout frames, input/exit/timeout/cancel notifications and `now` in;
//! [`NormalizedEvent`]s, [`Action`]s and the next deadline out. No clock, no IO (quinn-proto style).
//!
//! # Turn rules (source: AWP agent CLI protocol "Output JSONL"; `protocols/awp.md` "Rules the host enforces")
//!
//! - A turn is *accepted* by [`TurnMachine::handle_input_sent`] (after the one stdin write succeeded). Every
//!   accepted turn ends with exactly one [`NormalizedEvent::TurnCompleted`], the last event of the turn.
//! - **Terminal events.** `result` ends the turn in both protocols. In `stream-json` mode *only* `result` does:
//!   Claude Code wraps a `message_stop` in `stream_event` for *every* assistant message of a multi-step tool
//!   turn and sends `result` after the last one (`fixtures/recordings/claude-stream-json-partial-two-turns.jsonl`).
//!   In `awp-jsonl` mode a **top-level** (unwrapped) `message_stop` also ends the turn (success), unless the
//!   message's last `message_delta` said `stop_reason: "tool_use"` (the agent continues with another message in
//!   the same turn). A wrapped `stream_event` `message_stop` never ends a turn in either mode.
//!   A second terminal (e.g. a `result` after a terminal `message_stop`) arrives outside any turn: it is counted
//!   in [`Counters::output_outside_turn`] and dropped.
//! - **Failure** = `result.is_error == true` OR `result.subtype != "success"` (so `subtype:"success"` with
//!   `is_error:true` fails; `result.result` may be absent). Code [`codes::AGENT_ERROR`]; detail = a specific
//!   error subtype (`error_max_turns`, …), else the agent's `result` when it looks like a stable code
//!   (`[a-z0-9_]{1,64}`, the seed's `"subtype":"error","result":"stable_machine_readable_error"`), else the
//!   subtype, else `is_error` (success subtype with `is_error: true`) or `no_subtype`.
//! - **Exit before the terminal** fails the turn with [`codes::AGENT_EXITED_MID_TURN`]. The shell reports the
//!   exit only after stdout is drained, so a `result` still in the pipe wins.
//! - **Output before the first input** is a protocol violation: it fails nothing. The line is discarded (never
//!   rendered), counted in [`Counters::output_before_input`] and logged at `warn` by the shell; the process
//!   keeps running and the first turn proceeds normally; its first event is a [`codes::OUTPUT_BEFORE_INPUT`]
//!   notice saying how many lines were discarded. Rationale: the rule exists so that the first event
//!   belongs to the host's session; discarding restores that without killing an agent that printed a banner.
//!   Output between turns is handled the same way ([`Counters::output_outside_turn`]).
//! - **Session ids** must match `[A-Za-z0-9._:-]{1,256}`. An invalid one (in `init` or `result`) is dropped,
//!   counted in [`Counters::invalid_session_ids`] and reported as a [`codes::INVALID_SESSION_ID`] notice; it
//!   never becomes [`NormalizedEvent::SessionStarted`] nor [`TurnOutcome::session_id`]. A valid id different
//!   from the one resumed with (or reported before) also yields a [`codes::SESSION_ID_CHANGED`] notice.
//! - **Line limit.** A stdout line over [`Limits::max_line_bytes`] terminates the runtime: the current turn (if
//!   any) fails with [`codes::STDOUT_LINE_TOO_LONG`], [`Action::StopProcess`] is emitted and no further turn is
//!   accepted.
//! - **Idle timeout** (off by default): no stdout line for [`MachineConfig::idle_timeout`] during a turn fails
//!   it with [`codes::AGENT_IDLE_TIMEOUT`] and terminates the runtime like the line limit.
//! - **Cancel** fails the turn with [`codes::CANCELLED`] and terminates the runtime.
//! - **Dedup.** "Render deltas when any arrived for that message id; otherwise render the complete message":
//!   a complete `assistant` line is suppressed when a `content_block_start`/`content_block_delta` of a streamed
//!   message with the same `message.id` arrived in this turn (the id is forgotten when a new `message_start`
//!   reuses it; ids repeat across turns: `msg_1` in both turns of the recording). This holds for text, thinking
//!   and tool use alike, so a tool use is never emitted twice.
//!   Agents other than Claude Code that claim stream-json compatibility stream deltas without a `message_start`
//!   id, then send the complete `assistant` message: duplicates are then decided by what was streamed in this
//!   turn. Text (and thinking) streamed outside an identified message since the last complete `assistant` line is
//!   remembered (up to [`Limits::max_line_bytes`]); a complete message whose text equals it is suppressed, one that
//!   extends it emits only the part not yet streamed, and a tool use whose id was already streamed is not emitted
//!   again. A complete message that shares nothing with the stream is rendered as usual.
//! - **Text blocks.** Text deltas of one block are passed on as they come. When a new text block
//!   (`content_block_start` of type `text`) or a new complete `assistant` message begins after text was emitted in
//!   the turn, its first text is prefixed with [`TEXT_BLOCK_SEPARATOR`] (a blank line), and the text blocks of one
//!   complete message are joined with it, so separate blocks and messages are never glued together (issue 11).
//!   A tool use or tool result in between resets this: hosts put tool lines on their own line and start a new
//!   stored message after them.
//! - Each stdout line is counted in at most one of: too long, before input, outside turn, malformed, unknown.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use agentwire_jsonl::{Frame, JsonlDecoder};
use bytes::BytesMut;
use serde_json::Value;

use crate::control::ControlMessage;
use crate::event::{Delta, MessageBlock, OutputEvent, ReportedSessionId, ResultEvent, StreamEvent};
use crate::normalized::codes;
use crate::{NormalizedEvent, Protocol, SessionId, TurnOutcome, TurnStatus, Usage};

/// Bounds of the machine. Every field is enforced and tested at the limit and one past it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Longest stdout line in bytes (without its newline). Default 4 MiB (AWP's limit). A longer line
    /// terminates the runtime with [`codes::STDOUT_LINE_TOO_LONG`]. The shell's decoder uses the same value.
    pub max_line_bytes: usize,
    /// Most bytes of accumulated `input_json_delta` text per tool use. Default 4 MiB. Past it the
    /// accumulation is dropped; the tool use is emitted with `input: null` plus a
    /// [`codes::TOOL_INPUT_TOO_LARGE`] notice.
    pub max_tool_input_bytes: usize,
    /// Most bytes of a [`NormalizedEvent::ToolResult`] `summary`. Default 2048. Longer text is cut at a char
    /// boundary and the event says `truncated: true`.
    pub max_summary_bytes: usize,
    /// Most content blocks open at once within one streamed message. Default 256. A `content_block_start`
    /// past it is ignored and counted in [`Counters::blocks_over_limit`].
    pub max_open_blocks: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_line_bytes: agentwire_jsonl::DEFAULT_MAX_LINE_BYTES,
            max_tool_input_bytes: 4 * 1024 * 1024,
            max_summary_bytes: 2048,
            max_open_blocks: 256,
        }
    }
}

/// How the machine interprets a stream.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MachineConfig {
    /// The agent's dialect (decides whether a top-level `message_stop` is terminal). Default `awp-jsonl`.
    pub protocol: Protocol,
    /// Bounds; see [`Limits`].
    pub limits: Limits,
    /// Fail a turn after this long without a stdout line. Default `None` (off).
    pub idle_timeout: Option<Duration>,
    /// The id passed with `--resume`, if any: a different reported id yields a `session_id_changed` notice.
    pub resumed_from: Option<SessionId>,
    /// Claude Code's control protocol is spoken ([`crate::control`]): `control_request` / `control_response` /
    /// `control_cancel_request` lines are queued for [`TurnMachine::poll_control`] at any time (inside a turn
    /// or not) instead of becoming notices, and they count as no output of a turn. Default `false`.
    pub control_protocol: bool,
}

impl MachineConfig {
    /// Defaults for `protocol`.
    pub fn new(protocol: Protocol) -> Self {
        Self {
            protocol,
            ..Self::default()
        }
    }
}

/// What the shell must do besides forwarding events.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Action {
    /// Terminate the agent process (stop ladder). `code` says why (a [`codes`] value).
    StopProcess {
        /// Why: `stdout_line_too_long`, `agent_idle_timeout` or `cancelled`.
        code: &'static str,
    },
}

/// How the agent process ended, as the shell observed it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExitInfo {
    /// Exit code, when it exited normally.
    pub code: Option<i32>,
    /// Signal number, when a signal ended it (Unix).
    pub signal: Option<i32>,
}

impl ExitInfo {
    fn describe(self) -> String {
        match (self.code, self.signal) {
            (Some(code), _) => format!("exit code {code}"),
            (None, Some(signal)) => format!("signal {signal}"),
            (None, None) => "exit status unknown".to_owned(),
        }
    }
}

/// Why [`TurnMachine::handle_input_sent`] refused to start a turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TurnRejected {
    /// A turn is still running (one turn at a time).
    #[error("a turn is already in progress")]
    TurnInProgress,
    /// The agent process has exited.
    #[error("the agent process has exited")]
    Exited,
    /// The runtime was terminated (line limit, idle timeout, cancel).
    #[error("the agent runtime was terminated")]
    Terminated,
}

impl TurnRejected {
    /// Stable snake_case code.
    pub fn code(&self) -> &'static str {
        match self {
            TurnRejected::TurnInProgress => "turn_in_progress",
            TurnRejected::Exited => "agent_exited",
            TurnRejected::Terminated => "agent_terminated",
        }
    }
}

/// Counts of everything the machine tolerated. Diagnostics, never rendered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Lines that are not a JSON object with a string `type` (banners, garbage, bad shapes), also those
    /// discarded before the first input or between turns (which count in `output_before_input` /
    /// `output_outside_turn` as well).
    pub malformed_lines: u64,
    /// Events with a `type` this crate does not know (skipped).
    pub unknown_events: u64,
    /// Lines before the first input line (discarded).
    pub output_before_input: u64,
    /// Lines between turns or after the runtime ended (discarded).
    pub output_outside_turn: u64,
    /// Lines over [`Limits::max_line_bytes`].
    pub lines_too_long: u64,
    /// Reported session ids that failed validation.
    pub invalid_session_ids: u64,
    /// Tool inputs whose accumulated JSON did not parse or exceeded the limit.
    pub invalid_tool_inputs: u64,
    /// Complete `assistant` lines suppressed because their message was streamed.
    pub duplicate_messages_suppressed: u64,
    /// `content_block_start` events ignored because of [`Limits::max_open_blocks`].
    pub blocks_over_limit: u64,
    /// Turns accepted.
    pub turns_started: u64,
    /// Turns completed (equals `turns_started`, or one less while a turn runs).
    pub turns_completed: u64,
}

/// Streamed message ids remembered per turn for dedup (a small ring; the complete `assistant` line follows
/// its deltas closely).
const REMEMBERED_STREAMED_IDS: usize = 16;

/// Put between two text blocks (or two assistant messages) of one turn that no tool event separates: a blank
/// line, so that streamed text is never glued together.
pub const TEXT_BLOCK_SEPARATOR: &str = "\n\n";

#[derive(Debug)]
enum OpenBlock {
    ToolUse {
        id: String,
        name: String,
        start_input: Value,
        json: String,
        too_large: bool,
    },
    Other,
}

/// Text streamed outside an identified message and not yet matched by a complete `assistant` line.
#[derive(Debug, Default)]
struct Unconfirmed {
    text: String,
    thinking: String,
    /// More was streamed than [`Limits::max_line_bytes`]: no complete line could repeat it.
    overflow: bool,
}

impl Unconfirmed {
    fn push(buffer: &mut String, overflow: &mut bool, part: &str, max: usize) {
        if buffer.len().saturating_add(part.len()) > max {
            *overflow = true;
        } else {
            buffer.push_str(part);
        }
    }

    /// What of the complete `full` text still has to be emitted, given `streamed` (consumed).
    fn remainder(streamed: &mut String, overflow: bool, full: String) -> Option<String> {
        let streamed = std::mem::take(streamed);
        if overflow || streamed.is_empty() && full.is_empty() {
            return None;
        }
        if streamed.is_empty() {
            return Some(full);
        }
        if full == streamed || streamed.starts_with(&full) {
            return None;
        }
        match full.strip_prefix(&streamed) {
            Some(rest) => Some(rest.to_owned()),
            // Nothing in common with the stream: a separate message.
            None => Some(full),
        }
    }
}

#[derive(Debug)]
struct Turn {
    last_activity: Instant,
    streamed_ids: VecDeque<String>,
    unconfirmed: Unconfirmed,
    streamed_tool_ids: VecDeque<String>,
    current_message_id: Option<String>,
    blocks: HashMap<u64, OpenBlock>,
    last_stop_reason: Option<String>,
    session_id: Option<SessionId>,
    finished_usage: Option<Usage>,
    message_usage: Option<Usage>,
    /// Text was emitted since the turn started or since the last tool event.
    text_seen: bool,
    /// A new text block or message began after `text_seen` text: its first text gets [`TEXT_BLOCK_SEPARATOR`].
    text_break: bool,
}

impl Turn {
    fn new(now: Instant) -> Self {
        Self {
            last_activity: now,
            streamed_ids: VecDeque::new(),
            unconfirmed: Unconfirmed::default(),
            streamed_tool_ids: VecDeque::new(),
            current_message_id: None,
            blocks: HashMap::new(),
            last_stop_reason: None,
            session_id: None,
            finished_usage: None,
            message_usage: None,
            text_seen: false,
            text_break: false,
        }
    }

    /// Keeps separate text blocks and messages apart (see the module docs, "Text blocks"): the first text of a
    /// block that began after earlier text gets [`TEXT_BLOCK_SEPARATOR`] in front; a tool event resets (the host
    /// renders and stores tool lines on their own).
    fn join_text(&mut self, event: &mut NormalizedEvent) {
        match event {
            NormalizedEvent::TextDelta { text } => {
                if std::mem::take(&mut self.text_break) {
                    text.insert_str(0, TEXT_BLOCK_SEPARATOR);
                }
                self.text_seen = true;
            }
            NormalizedEvent::ToolUse { .. } | NormalizedEvent::ToolResult { .. } => {
                self.text_seen = false;
                self.text_break = false;
            }
            _ => {}
        }
    }

    fn mark_streamed(&mut self) {
        let Some(id) = &self.current_message_id else {
            return;
        };
        if self.streamed_ids.iter().any(|s| s == id) {
            return;
        }
        if self.streamed_ids.len() == REMEMBERED_STREAMED_IDS {
            self.streamed_ids.pop_front();
        }
        self.streamed_ids.push_back(id.clone());
    }

    fn stream_usage(&self) -> Option<Usage> {
        match (self.finished_usage, self.message_usage) {
            (None, None) => None,
            (a, b) => {
                let (a, b) = (a.unwrap_or_default(), b.unwrap_or_default());
                Some(add_usage(a, b))
            }
        }
    }
}

fn add_usage(a: Usage, b: Usage) -> Usage {
    let opt = |x: Option<u64>, y: Option<u64>| match (x, y) {
        (None, None) => None,
        (x, y) => Some(x.unwrap_or(0).saturating_add(y.unwrap_or(0))),
    };
    Usage {
        input_tokens: a.input_tokens.saturating_add(b.input_tokens),
        output_tokens: a.output_tokens.saturating_add(b.output_tokens),
        cache_read_input_tokens: opt(a.cache_read_input_tokens, b.cache_read_input_tokens),
        cache_creation_input_tokens: opt(
            a.cache_creation_input_tokens,
            b.cache_creation_input_tokens,
        ),
    }
}

#[derive(Debug)]
enum Phase {
    /// No turn running; the process may take the next input.
    Idle,
    /// A turn is running.
    InTurn(Box<Turn>),
    /// The runtime was terminated by a rule (line limit, idle timeout, cancel); no more turns.
    Terminated,
    /// The process exited; no more turns.
    Exited,
}

/// The AWP turn state machine for one agent process. See the module docs for the rules.
#[derive(Debug)]
pub struct TurnMachine {
    config: MachineConfig,
    phase: Phase,
    first_input_sent: bool,
    exited: bool,
    latest_session_id: Option<SessionId>,
    events: VecDeque<NormalizedEvent>,
    actions: VecDeque<Action>,
    counters: Counters,
    first_malformed_line: Option<String>,
    control: VecDeque<ControlMessage>,
}

/// Longest [`TurnMachine::first_malformed_line`] kept, in characters (longer lines are cut with `…`).
pub const MAX_MALFORMED_LINE_CHARS: usize = 200;

impl TurnMachine {
    /// A machine for a freshly spawned process.
    pub fn new(config: MachineConfig) -> Self {
        let latest_session_id = config.resumed_from.clone();
        Self {
            config,
            phase: Phase::Idle,
            first_input_sent: false,
            exited: false,
            latest_session_id,
            events: VecDeque::new(),
            actions: VecDeque::new(),
            counters: Counters::default(),
            first_malformed_line: None,
            control: VecDeque::new(),
        }
    }

    /// The next queued control-protocol message ([`MachineConfig::control_protocol`]).
    pub fn poll_control(&mut self) -> Option<ControlMessage> {
        self.control.pop_front()
    }

    /// True while a control-protocol message is queued.
    pub fn has_control(&self) -> bool {
        !self.control.is_empty()
    }

    /// The configuration.
    pub fn config(&self) -> &MachineConfig {
        &self.config
    }

    /// The input line of a turn was written: accept the turn.
    ///
    /// # Errors
    /// [`TurnRejected`] when a turn is running or the runtime is over (no turn is started).
    pub fn handle_input_sent(&mut self, now: Instant) -> Result<(), TurnRejected> {
        self.can_accept_turn()?;
        let first = !self.first_input_sent;
        self.first_input_sent = true;
        self.counters.turns_started += 1;
        self.phase = Phase::InTurn(Box::new(Turn::new(now)));
        if first && self.counters.output_before_input > 0 {
            let detail = format!(
                "{} stdout lines before the first input were discarded",
                self.counters.output_before_input
            );
            self.notice(codes::OUTPUT_BEFORE_INPUT, Some(detail));
        }
        Ok(())
    }

    /// Whether [`handle_input_sent`](Self::handle_input_sent) would accept a turn now (check before writing).
    ///
    /// # Errors
    /// [`TurnRejected`]: a turn is running, the runtime was terminated (line limit, idle timeout, cancel — even
    /// when the process has exited since), or the process exited.
    pub fn can_accept_turn(&self) -> Result<(), TurnRejected> {
        match self.phase {
            Phase::Idle => Ok(()),
            Phase::InTurn(_) => Err(TurnRejected::TurnInProgress),
            Phase::Terminated => Err(TurnRejected::Terminated),
            Phase::Exited => Err(TurnRejected::Exited),
        }
    }

    /// One decoded stdout frame.
    pub fn handle_frame(&mut self, frame: &Frame, now: Instant) {
        match frame {
            Frame::Json(bytes) => self.handle_line(bytes, now),
            Frame::TooLong { bytes_discarded } => self.handle_line_too_long(*bytes_discarded, now),
            // `Frame` is non-exhaustive: anything else is a line we cannot use.
            _ => self.handle_malformed_line(now),
        }
    }

    /// One complete stdout line (without its newline). Lines over [`Limits::max_line_bytes`] are treated
    /// exactly like [`handle_line_too_long`](Self::handle_line_too_long).
    pub fn handle_line(&mut self, line: &[u8], now: Instant) {
        if line.len() > self.config.limits.max_line_bytes {
            self.handle_line_too_long(line.len() as u64, now);
            return;
        }
        if self.config.control_protocol
            && let Some(message) = ControlMessage::parse(line)
        {
            self.control.push_back(message);
            return;
        }
        // A line that is not protocol is counted (and the first one kept) even when it is discarded: before
        // the first input it is often all an agent says (a login prompt) before it exits or waits.
        let accepted = self.accept_output(now);
        match OutputEvent::parse(line) {
            Ok(event) if accepted => self.handle_event(event, now),
            Ok(_) => {}
            Err(err) => {
                tracing::debug!(code = err.code(), "malformed agent stdout line: {err}");
                self.counters.malformed_lines += 1;
                if self.first_malformed_line.is_none() {
                    let text = String::from_utf8_lossy(line);
                    let mut kept: String = text.chars().take(MAX_MALFORMED_LINE_CHARS).collect();
                    if kept.len() < text.len() {
                        kept.push('…');
                    }
                    self.first_malformed_line = Some(kept);
                }
            }
        }
    }

    /// A stdout line that is not JSON (banner, invalid UTF-8, …).
    pub fn handle_malformed_line(&mut self, now: Instant) {
        if self.accept_output(now) {
            self.counters.malformed_lines += 1;
        }
    }

    /// A stdout line over the limit (`bytes` long) was discarded: terminate the runtime.
    pub fn handle_line_too_long(&mut self, bytes: u64, _now: Instant) {
        tracing::warn!(bytes, "agent stdout line over the limit");
        self.counters.lines_too_long += 1;
        match self.phase {
            Phase::Exited | Phase::Terminated => {}
            Phase::Idle | Phase::InTurn(_) => {
                let detail = format!(
                    "stdout line over {} bytes",
                    self.config.limits.max_line_bytes
                );
                self.terminate(codes::STDOUT_LINE_TOO_LONG, Some(detail));
            }
        }
    }

    /// The process exited (call after stdout was drained).
    pub fn handle_exit(&mut self, exit: ExitInfo, _now: Instant) {
        if matches!(self.phase, Phase::InTurn(_)) {
            self.complete(TurnStatus::Failed {
                code: codes::AGENT_EXITED_MID_TURN.to_owned(),
                detail: Some(exit.describe()),
            });
        }
        self.exited = true;
        if !matches!(self.phase, Phase::Terminated) {
            self.phase = Phase::Exited;
        }
    }

    /// Time passed: fails the turn with `agent_idle_timeout` once [`poll_timeout`](Self::poll_timeout) is due.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.poll_timeout().is_some_and(|deadline| now >= deadline) {
            self.terminate(codes::AGENT_IDLE_TIMEOUT, None);
        }
    }

    /// The host cancels: the running turn (if any) fails with `cancelled`; the runtime is terminated.
    /// Returns true when a turn was running.
    pub fn handle_cancel(&mut self, _now: Instant) -> bool {
        match self.phase {
            Phase::InTurn(_) | Phase::Idle => {
                let was_in_turn = matches!(self.phase, Phase::InTurn(_));
                self.terminate(codes::CANCELLED, None);
                was_in_turn
            }
            Phase::Terminated | Phase::Exited => false,
        }
    }

    /// The next normalized event, in order; drain until `None` after every `handle_*` call.
    pub fn poll_event(&mut self) -> Option<NormalizedEvent> {
        self.events.pop_front()
    }

    /// The next action for the shell.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// When [`handle_timeout`](Self::handle_timeout) must be called next (idle deadline of the running turn).
    pub fn poll_timeout(&self) -> Option<Instant> {
        match (&self.phase, self.config.idle_timeout) {
            (Phase::InTurn(turn), Some(idle)) => turn.last_activity.checked_add(idle),
            _ => None,
        }
    }

    /// True while a turn is running.
    pub fn in_turn(&self) -> bool {
        matches!(self.phase, Phase::InTurn(_))
    }

    /// True once the process exited or the runtime was terminated (no more turns).
    pub fn is_finished(&self) -> bool {
        matches!(self.phase, Phase::Exited | Phase::Terminated)
    }

    /// True once the process exit was handled.
    pub fn has_exited(&self) -> bool {
        self.exited
    }

    /// The latest valid session id reported (or resumed from).
    pub fn session_id(&self) -> Option<&SessionId> {
        self.latest_session_id.as_ref()
    }

    /// The counters.
    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// The first stdout line that was not a usable event (a banner, a login prompt, another protocol's output),
    /// lossy UTF-8, at most [`MAX_MALFORMED_LINE_CHARS`] characters (then `…`); raw, not escaped. Lets a host
    /// say what a failing agent printed instead of protocol.
    pub fn first_malformed_line(&self) -> Option<&str> {
        self.first_malformed_line.as_deref()
    }

    /// Checks the phase for an incoming line; false when the line is discarded (and counted).
    fn accept_output(&mut self, now: Instant) -> bool {
        match &mut self.phase {
            Phase::InTurn(turn) => {
                turn.last_activity = now;
                true
            }
            Phase::Idle if !self.first_input_sent => {
                self.counters.output_before_input += 1;
                tracing::warn!("agent wrote to stdout before the first input line (discarded)");
                false
            }
            _ => {
                self.counters.output_outside_turn += 1;
                tracing::debug!("agent wrote to stdout outside a turn (discarded)");
                false
            }
        }
    }

    fn terminate(&mut self, code: &'static str, detail: Option<String>) {
        if matches!(self.phase, Phase::InTurn(_)) {
            self.complete(TurnStatus::Failed {
                code: code.to_owned(),
                detail,
            });
        }
        self.phase = Phase::Terminated;
        self.actions.push_back(Action::StopProcess { code });
    }

    fn emit(&mut self, mut event: NormalizedEvent) {
        if let Phase::InTurn(turn) = &mut self.phase {
            turn.join_text(&mut event);
        }
        self.events.push_back(event);
    }

    fn notice(&mut self, kind: &str, detail: Option<String>) {
        self.emit(NormalizedEvent::Notice {
            kind: kind.to_owned(),
            detail,
        });
    }

    fn turn(&mut self) -> Option<&mut Turn> {
        match &mut self.phase {
            Phase::InTurn(turn) => Some(turn),
            _ => None,
        }
    }

    /// Emits `TurnCompleted` for the running turn and returns to idle.
    fn complete(&mut self, status: TurnStatus) {
        self.complete_with(status, None);
    }

    fn complete_with(&mut self, status: TurnStatus, result: Option<ResultEvent>) {
        let Phase::InTurn(turn) = std::mem::replace(&mut self.phase, Phase::Idle) else {
            return;
        };
        let mut outcome = TurnOutcome::new(status);
        outcome.session_id = turn
            .session_id
            .clone()
            .or_else(|| self.latest_session_id.clone());
        outcome.usage = turn.stream_usage();
        if let Some(result) = result {
            if result.usage.is_some() {
                outcome.usage = result.usage;
            }
            outcome.result_text = result.result;
            outcome.duration_ms = result.duration_ms;
            outcome.total_cost_usd = result.total_cost_usd;
        }
        self.counters.turns_completed += 1;
        self.emit(NormalizedEvent::TurnCompleted(outcome));
    }

    fn report_session_id(
        &mut self,
        reported: Option<ReportedSessionId>,
        model: Option<String>,
        started: bool,
    ) {
        match reported {
            None => {}
            Some(Err(err)) => {
                self.counters.invalid_session_ids += 1;
                tracing::warn!("agent reported an invalid session id: {err}");
                self.notice(codes::INVALID_SESSION_ID, Some(err.to_string()));
            }
            Some(Ok(id)) => {
                if let Some(previous) = self.latest_session_id.as_ref().filter(|p| **p != id) {
                    let detail = format!("{previous} -> {id}");
                    self.notice(codes::SESSION_ID_CHANGED, Some(detail));
                }
                self.latest_session_id = Some(id.clone());
                if let Some(turn) = self.turn() {
                    turn.session_id = Some(id.clone());
                }
                if started {
                    self.emit(NormalizedEvent::SessionStarted {
                        session_id: id,
                        model,
                    });
                }
            }
        }
    }

    fn handle_event(&mut self, event: OutputEvent, now: Instant) {
        match event {
            OutputEvent::SystemInit { session_id, model } => {
                self.report_session_id(session_id, model, true)
            }
            OutputEvent::System { subtype } => self.notice("system", subtype),
            OutputEvent::Assistant {
                message_id,
                content,
            } => self.handle_assistant(message_id, content),
            OutputEvent::User { tool_results } => {
                let max = self.config.limits.max_summary_bytes;
                for result in tool_results {
                    let (summary, truncated) = summarize(&result.text, max);
                    self.emit(NormalizedEvent::ToolResult {
                        tool_use_id: result.tool_use_id,
                        is_error: result.is_error,
                        summary,
                        truncated,
                    });
                }
            }
            OutputEvent::Stream { event, wrapped } => self.handle_stream(event, wrapped, now),
            OutputEvent::Result(result) => self.handle_result(result),
            OutputEvent::Control {
                event_type,
                subtype,
            } => self.notice(&event_type, subtype),
            OutputEvent::Informational { event_type } => {
                if event_type != "keep_alive" {
                    self.notice(&event_type, None);
                }
            }
            OutputEvent::Unknown { event_type, .. } => {
                tracing::debug!(event_type, "unknown agent event type (skipped)");
                self.counters.unknown_events += 1;
            }
            // `OutputEvent` is non-exhaustive within this crate's future versions.
            #[allow(unreachable_patterns)]
            _ => self.counters.unknown_events += 1,
        }
    }

    fn handle_assistant(&mut self, message_id: Option<String>, content: Vec<MessageBlock>) {
        let streamed = match (self.turn(), &message_id) {
            (Some(turn), Some(id)) => turn.streamed_ids.iter().any(|s| s == id),
            _ => false,
        };
        if streamed {
            self.counters.duplicate_messages_suppressed += 1;
            return;
        }
        let Some(turn) = self.turn() else {
            return;
        };
        // Decide by what was streamed without an id in this turn (see the module docs, "Dedup").
        let mut unconfirmed = std::mem::take(&mut turn.unconfirmed);
        let streamed_tools = std::mem::take(&mut turn.streamed_tool_ids);
        // A message whose text was not streamed anonymously is a new message: a break after earlier text.
        if unconfirmed.text.is_empty() && !unconfirmed.overflow {
            turn.text_break = turn.text_seen;
        }
        let (mut text, mut thinking) = (String::new(), String::new());
        let mut out = Vec::new();
        for block in content {
            match block {
                MessageBlock::Text(part) => {
                    if !text.is_empty() && !part.is_empty() {
                        text.push_str(TEXT_BLOCK_SEPARATOR);
                    }
                    text.push_str(&part);
                }
                MessageBlock::Thinking(part) => thinking.push_str(&part),
                MessageBlock::ToolUse { id, name, input } if !streamed_tools.contains(&id) => {
                    out.push(NormalizedEvent::ToolUse { id, name, input });
                }
                _ => {}
            }
        }
        let was_streamed = !unconfirmed.text.is_empty()
            || !unconfirmed.thinking.is_empty()
            || unconfirmed.overflow
            || !streamed_tools.is_empty();
        let thinking =
            Unconfirmed::remainder(&mut unconfirmed.thinking, unconfirmed.overflow, thinking);
        let text = Unconfirmed::remainder(&mut unconfirmed.text, unconfirmed.overflow, text);
        if was_streamed && text.is_none() && thinking.is_none() && out.is_empty() {
            self.counters.duplicate_messages_suppressed += 1;
        }
        if let Some(thinking) = thinking.filter(|t| !t.is_empty()) {
            self.emit(NormalizedEvent::ThinkingDelta { text: thinking });
        }
        if let Some(text) = text.filter(|t| !t.is_empty()) {
            self.emit(NormalizedEvent::TextDelta { text });
        }
        for event in out {
            self.emit(event);
        }
    }

    fn handle_result(&mut self, result: ResultEvent) {
        let session_id = result.session_id.clone();
        self.report_session_id(session_id, None, false);
        let status = if result.is_failure() {
            let detail = match (result.subtype.as_deref(), result.result.as_deref()) {
                (Some(subtype), _) if subtype != "success" && subtype != "error" => {
                    subtype.to_owned()
                }
                (_, Some(code)) if is_stable_code(code) => code.to_owned(),
                (Some(subtype), _) if subtype != "success" => subtype.to_owned(),
                (Some(_), _) => "is_error".to_owned(),
                (None, _) => "no_subtype".to_owned(),
            };
            let detail = Some(detail);
            TurnStatus::Failed {
                code: codes::AGENT_ERROR.to_owned(),
                detail,
            }
        } else {
            TurnStatus::Success
        };
        self.complete_with(status, Some(result));
    }

    fn handle_stream(&mut self, event: StreamEvent, wrapped: bool, _now: Instant) {
        let protocol = self.config.protocol;
        let limits = self.config.limits.clone();
        let mut out: Vec<NormalizedEvent> = Vec::new();
        let mut terminal = false;
        let mut notices: Vec<(&'static str, Option<String>)> = Vec::new();
        let mut over_limit = false;
        let mut invalid_input = false;
        let mut unknown = false;
        {
            let Some(turn) = self.turn() else { return };
            match event {
                StreamEvent::MessageStart { message_id, usage } => {
                    if let Some(id) = &message_id {
                        turn.streamed_ids.retain(|s| s != id);
                    }
                    turn.current_message_id = message_id;
                    turn.blocks.clear();
                    turn.last_stop_reason = None;
                    if let Some(previous) = turn.message_usage.take() {
                        turn.finished_usage =
                            Some(add_usage(turn.finished_usage.unwrap_or_default(), previous));
                    }
                    turn.message_usage = usage;
                }
                StreamEvent::MessageDelta { stop_reason, usage } => {
                    if stop_reason.is_some() {
                        turn.last_stop_reason = stop_reason;
                    }
                    if let Some(delta) = usage {
                        let current = turn.message_usage.get_or_insert_with(Usage::default);
                        current.output_tokens = delta.output_tokens;
                        if delta.input_tokens > 0 {
                            current.input_tokens = delta.input_tokens;
                        }
                        current.cache_read_input_tokens = delta
                            .cache_read_input_tokens
                            .or(current.cache_read_input_tokens);
                        current.cache_creation_input_tokens = delta
                            .cache_creation_input_tokens
                            .or(current.cache_creation_input_tokens);
                    }
                }
                StreamEvent::MessageStop => {
                    terminal = protocol == Protocol::AwpJsonl
                        && !wrapped
                        && turn.last_stop_reason.as_deref() != Some("tool_use");
                    turn.current_message_id = None;
                    turn.blocks.clear();
                }
                StreamEvent::ContentBlockStart { index, block } => {
                    if !turn.blocks.contains_key(&index)
                        && turn.blocks.len() >= limits.max_open_blocks
                    {
                        over_limit = true;
                    } else {
                        turn.mark_streamed();
                        let open = match block {
                            MessageBlock::Text(text) => {
                                turn.text_break = turn.text_seen;
                                if !text.is_empty() {
                                    out.push(NormalizedEvent::TextDelta { text });
                                }
                                OpenBlock::Other
                            }
                            MessageBlock::Thinking(text) => {
                                if !text.is_empty() {
                                    out.push(NormalizedEvent::ThinkingDelta { text });
                                }
                                OpenBlock::Other
                            }
                            MessageBlock::ToolUse { id, name, input } => OpenBlock::ToolUse {
                                id,
                                name,
                                start_input: input,
                                json: String::new(),
                                too_large: false,
                            },
                            MessageBlock::Other => OpenBlock::Other,
                        };
                        turn.blocks.insert(index, open);
                    }
                }
                StreamEvent::ContentBlockDelta { index, delta } => {
                    turn.mark_streamed();
                    match delta {
                        Delta::Text(text) if !text.is_empty() => {
                            out.push(NormalizedEvent::TextDelta { text })
                        }
                        Delta::Thinking(text) if !text.is_empty() => {
                            out.push(NormalizedEvent::ThinkingDelta { text });
                        }
                        Delta::InputJson(part) => {
                            if let Some(OpenBlock::ToolUse {
                                json,
                                too_large: too_large @ false,
                                ..
                            }) = turn.blocks.get_mut(&index)
                            {
                                if json.len().saturating_add(part.len())
                                    > limits.max_tool_input_bytes
                                {
                                    *too_large = true;
                                    *json = String::new();
                                } else {
                                    json.push_str(&part);
                                }
                            }
                        }
                        _ => {}
                    }
                }
                StreamEvent::ContentBlockStop { index } => {
                    if let Some(OpenBlock::ToolUse {
                        id,
                        name,
                        start_input,
                        json,
                        too_large,
                    }) = turn.blocks.remove(&index)
                    {
                        let input = if too_large {
                            invalid_input = true;
                            notices.push((
                                codes::TOOL_INPUT_TOO_LARGE,
                                Some(format!("tool use {id}")),
                            ));
                            Value::Null
                        } else if json.trim().is_empty() {
                            start_input
                        } else {
                            match serde_json::from_str::<Value>(&json) {
                                Ok(value) => value,
                                Err(err) => {
                                    invalid_input = true;
                                    notices.push((
                                        codes::INVALID_TOOL_INPUT_JSON,
                                        Some(format!("tool use {id}: {err}")),
                                    ));
                                    Value::Null
                                }
                            }
                        };
                        out.push(NormalizedEvent::ToolUse { id, name, input });
                    }
                }
                StreamEvent::Ping => {}
                StreamEvent::Error { error_type } => notices.push(("stream_error", error_type)),
                StreamEvent::Unknown { .. } => unknown = true,
                #[allow(unreachable_patterns)]
                _ => unknown = true,
            }
        }
        if over_limit {
            self.counters.blocks_over_limit += 1;
        }
        if invalid_input {
            self.counters.invalid_tool_inputs += 1;
        }
        if unknown {
            self.counters.unknown_events += 1;
        }
        if let Some(turn) = self.turn() {
            let max = limits.max_line_bytes;
            let anonymous = turn.current_message_id.is_none();
            for event in &mut out {
                turn.join_text(event);
                match event {
                    NormalizedEvent::TextDelta { text } if anonymous => {
                        let u = &mut turn.unconfirmed;
                        Unconfirmed::push(&mut u.text, &mut u.overflow, text, max);
                    }
                    NormalizedEvent::ThinkingDelta { text } if anonymous => {
                        let u = &mut turn.unconfirmed;
                        Unconfirmed::push(&mut u.thinking, &mut u.overflow, text, max);
                    }
                    NormalizedEvent::ToolUse { id, .. } => {
                        if turn.streamed_tool_ids.len() == REMEMBERED_STREAMED_IDS {
                            turn.streamed_tool_ids.pop_front();
                        }
                        turn.streamed_tool_ids.push_back(id.clone());
                    }
                    _ => {}
                }
            }
        }
        for (kind, detail) in notices {
            self.notice(kind, detail);
        }
        self.events.extend(out);
        if terminal {
            self.complete(TurnStatus::Success);
        }
    }
}

/// Sans-IO stdout framing for the machine: bytes in, JSON Lines frames into [`TurnMachine::handle_frame`].
///
/// An over-long line is reported ([`TurnMachine::handle_line_too_long`]) as soon as the unbroken buffer crosses
/// the limit, not when its newline finally arrives (the decoder's `Frame::TooLong` then is skipped): an agent that
/// floods stdout without a newline must not hang the turn (`protocols/awp.md`: "an unbroken stdout buffer over
/// 4 MiB terminates the runtime"; the limit is per line, not per read chunk). Memory held is at most one line.
/// Lines are only framed here (`JsonlDecoder::framing_only`): [`TurnMachine::handle_line`] parses each line once
/// and counts what is not a JSON object (invalid UTF-8 included) as malformed.
#[derive(Debug)]
pub struct StdoutDecoder {
    decoder: JsonlDecoder,
    buf: BytesMut,
    /// The current over-long line was already reported.
    reported_discard: bool,
}

impl StdoutDecoder {
    /// A decoder for lines of at most `max_line_bytes` (use [`Limits::max_line_bytes`]).
    pub fn new(max_line_bytes: usize) -> Self {
        let limits = agentwire_jsonl::Limits {
            max_line_bytes,
            ..agentwire_jsonl::Limits::default()
        };
        Self {
            decoder: JsonlDecoder::framing_only(limits),
            buf: BytesMut::new(),
            reported_discard: false,
        }
    }

    /// Feeds a chunk of stdout (any split) and hands every complete frame to `machine`.
    pub fn feed(&mut self, machine: &mut TurnMachine, bytes: &[u8], now: Instant) {
        self.buf.extend_from_slice(bytes);
        while let Some(frame) = self.decoder.decode(&mut self.buf) {
            self.handle(machine, &frame, now);
        }
        if let Some(discarded) = self
            .decoder
            .discarding_bytes()
            .filter(|_| !self.reported_discard)
        {
            self.reported_discard = true;
            machine.handle_line_too_long(discarded, now);
        }
    }

    /// Stdout ended: hands over the final unterminated line, if any.
    pub fn finish(&mut self, machine: &mut TurnMachine, now: Instant) {
        while let Some(frame) = self.decoder.decode_eof(&mut self.buf) {
            self.handle(machine, &frame, now);
        }
    }

    fn handle(&mut self, machine: &mut TurnMachine, frame: &Frame, now: Instant) {
        if matches!(frame, Frame::TooLong { .. }) && std::mem::take(&mut self.reported_discard) {
            return;
        }
        machine.handle_frame(frame, now);
    }
}

/// `[a-z0-9_]{1,64}`: the agent's `result` is a machine-readable code, not prose.
fn is_stable_code(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 64
        && text
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// At most `max` bytes of `text`, cut at a char boundary; true when cut.
fn summarize(text: &str, max: usize) -> (String, bool) {
    if text.len() <= max {
        return (text.to_owned(), false);
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    (text.get(..end).unwrap_or_default().to_owned(), true)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One step of a scripted stream, on virtual time.
    #[derive(Clone, Debug)]
    enum Step<'a> {
        Input,
        Line(&'a str),
        TooLong(u64),
        Advance(u64),
        Timeout,
        Exit(i32),
        Cancel,
    }
    use Step::*;

    /// Runs `steps` through a machine built from `config`; returns the events as compact JSON lines, each
    /// `TurnCompleted` followed by nothing else of its turn, plus rejected inputs as `rejected:<code>` and
    /// actions as `action:<code>`.
    fn run(config: MachineConfig, steps: &[Step<'_>]) -> (Vec<String>, TurnMachine) {
        let mut machine = TurnMachine::new(config);
        let mut now = Instant::now();
        let mut out = Vec::new();
        for step in steps {
            match step {
                Input => {
                    if let Err(e) = machine.handle_input_sent(now) {
                        out.push(format!("rejected:{}", e.code()));
                    }
                }
                Line(line) => machine.handle_line(line.as_bytes(), now),
                TooLong(n) => machine.handle_line_too_long(*n, now),
                Advance(secs) => now += Duration::from_secs(*secs),
                Timeout => machine.handle_timeout(now),
                Exit(code) => machine.handle_exit(
                    ExitInfo {
                        code: Some(*code),
                        signal: None,
                    },
                    now,
                ),
                Cancel => {
                    machine.handle_cancel(now);
                }
            }
            while let Some(event) = machine.poll_event() {
                out.push(serde_json::to_string(&event).unwrap());
            }
            while let Some(Action::StopProcess { code }) = machine.poll_action() {
                out.push(format!("action:{code}"));
            }
        }
        (out, machine)
    }

    fn check(config: MachineConfig, steps: &[Step<'_>], expect: &[&str]) -> TurnMachine {
        let (got, machine) = run(config, steps);
        assert_eq!(got, expect, "steps {steps:?}");
        machine
    }

    fn awp() -> MachineConfig {
        MachineConfig::new(Protocol::AwpJsonl)
    }

    fn stream_json() -> MachineConfig {
        MachineConfig::new(Protocol::StreamJson)
    }

    const OK: &str = r#"{"type":"result","subtype":"success","is_error":false,"session_id":"s1","usage":{"input_tokens":1,"output_tokens":2}}"#;
    const DONE_OK: &str = r#"{"type":"turn_completed","status":"success","session_id":"s1","usage":{"input_tokens":1,"output_tokens":2}}"#;

    #[test]
    fn result_completes_the_turn_and_the_process_is_reusable() {
        let m = check(
            awp(),
            &[
                Input,
                Line(r#"{"type":"system","subtype":"init","session_id":"s1","model":"m"}"#),
                Line(
                    r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
                ),
                Line(
                    r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"hi"}}"#,
                ),
                Line(r#"{"type":"content_block_stop","index":0}"#),
                Line(OK),
                Input,
                Line(OK),
            ],
            &[
                r#"{"type":"session_started","session_id":"s1","model":"m"}"#,
                r#"{"type":"text_delta","text":"hi"}"#,
                DONE_OK,
                DONE_OK,
            ],
        );
        assert_eq!(m.counters().turns_completed, 2);
        assert_eq!(m.session_id().map(SessionId::as_str), Some("s1"));
    }

    #[test]
    fn separate_text_blocks_and_messages_are_separated_by_a_blank_line() {
        let start = |i: u64, id: &str| {
            format!(
                r#"{{"type":"stream_event","event":{{"type":"message_start","message":{{"id":"{id}"}}}}}}
{{"type":"stream_event","event":{{"type":"content_block_start","index":{i},"content_block":{{"type":"text","text":""}}}}}}"#
            )
        };
        let delta = |i: u64, t: &str| {
            format!(
                r#"{{"type":"stream_event","event":{{"type":"content_block_delta","index":{i},"delta":{{"type":"text_delta","text":"{t}"}}}}}}"#
            )
        };
        let block = |i: u64| {
            format!(
                r#"{{"type":"stream_event","event":{{"type":"content_block_start","index":{i},"content_block":{{"type":"text","text":""}}}}}}"#
            )
        };
        let first = start(0, "msg_1");
        let mut lines: Vec<String> = vec![];
        for part in first.lines() {
            lines.push(part.to_owned());
        }
        lines.push(delta(0, "one"));
        lines.push(delta(0, " a"));
        lines.push(block(1));
        lines.push(delta(1, "two"));
        for part in start(0, "msg_2").lines() {
            lines.push(part.to_owned());
        }
        lines.push(delta(0, "three"));
        // A complete message that was not streamed: its two blocks are joined, and it is a new message.
        lines.push(
            r#"{"type":"assistant","message":{"id":"msg_3","content":[{"type":"text","text":"four"},{"type":"text","text":"five"}]}}"#
                .to_owned(),
        );
        // After a tool use, no separator (the tool line is in between).
        lines.push(r#"{"type":"assistant","message":{"id":"msg_4","content":[{"type":"tool_use","id":"t1","name":"Bash","input":{}}]}}"#.to_owned());
        lines.push(
            r#"{"type":"assistant","message":{"id":"msg_5","content":[{"type":"text","text":"six"}]}}"#
                .to_owned(),
        );
        lines.push(OK.to_owned());
        let mut steps = vec![Input];
        steps.extend(lines.iter().map(|l| Line(l)));
        let (got, _) = run(stream_json(), &steps);
        let text: String = got
            .iter()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v["type"] == "text_delta")
            .map(|v| v["text"].as_str().unwrap_or_default().to_owned())
            .collect();
        assert_eq!(text, "one a\n\ntwo\n\nthree\n\nfour\n\nfivesix");
    }

    #[test]
    fn only_one_turn_at_a_time() {
        check(
            awp(),
            &[Input, Input, Line(OK)],
            &["rejected:turn_in_progress", DONE_OK],
        );
    }

    /// A stream-json `stream_event` text delta of block 0, outside any identified message.
    const ANON_DELTA_HEL: &str = r#"{"type":"stream_event","event":{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hel"}}}"#;
    const ANON_DELTA_LO: &str = r#"{"type":"stream_event","event":{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"lo"}}}"#;

    #[test]
    fn stream_json_text_streamed_without_a_message_id_is_rendered_once() {
        check(
            stream_json(),
            &[
                Input,
                Line(ANON_DELTA_HEL),
                Line(ANON_DELTA_LO),
                Line(
                    r#"{"type":"assistant","message":{"content":[{"type":"text","text":"Hello"}]}}"#,
                ),
                Line(OK),
            ],
            &[
                r#"{"type":"text_delta","text":"Hel"}"#,
                r#"{"type":"text_delta","text":"lo"}"#,
                DONE_OK,
            ],
        );
    }

    #[test]
    fn stream_json_complete_message_extending_an_id_less_stream_emits_only_the_rest() {
        check(
            stream_json(),
            &[
                Input,
                Line(ANON_DELTA_HEL),
                Line(
                    r#"{"type":"assistant","message":{"content":[{"type":"text","text":"Hello"}]}}"#,
                ),
                Line(
                    r#"{"type":"assistant","message":{"content":[{"type":"text","text":"Second"}]}}"#,
                ),
                Line(OK),
            ],
            &[
                r#"{"type":"text_delta","text":"Hel"}"#,
                r#"{"type":"text_delta","text":"lo"}"#,
                r#"{"type":"text_delta","text":"\n\nSecond"}"#,
                DONE_OK,
            ],
        );
    }

    #[test]
    fn stream_json_tool_use_streamed_without_a_message_id_is_emitted_once() {
        check(
            stream_json(),
            &[
                Input,
                Line(
                    r#"{"type":"stream_event","event":{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"t1","name":"Bash","input":{}}}}"#,
                ),
                Line(
                    r#"{"type":"stream_event","event":{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"c\":1}"}}}"#,
                ),
                Line(r#"{"type":"stream_event","event":{"type":"content_block_stop","index":1}}"#),
                Line(
                    r#"{"type":"assistant","message":{"content":[{"type":"tool_use","id":"t1","name":"Bash","input":{"c":1}}]}}"#,
                ),
                Line(OK),
            ],
            &[
                r#"{"type":"tool_use","id":"t1","name":"Bash","input":{"c":1}}"#,
                DONE_OK,
            ],
        );
    }

    #[test]
    fn stream_json_terminal_is_result_only() {
        check(
            stream_json(),
            &[
                Input,
                Line(
                    r#"{"type":"stream_event","event":{"type":"message_start","message":{"id":"msg_a"}}}"#,
                ),
                Line(
                    r#"{"type":"stream_event","event":{"type":"message_delta","delta":{"stop_reason":"end_turn"}}}"#,
                ),
                Line(r#"{"type":"stream_event","event":{"type":"message_stop"}}"#),
                Line(r#"{"type":"message_stop"}"#),
                Line(OK),
            ],
            &[DONE_OK],
        );
    }

    #[test]
    fn awp_jsonl_top_level_message_stop_is_terminal_with_stream_usage() {
        check(
            awp(),
            &[
                Input,
                Line(
                    r#"{"type":"message_start","message":{"id":"m1","usage":{"input_tokens":7,"output_tokens":1}}}"#,
                ),
                Line(
                    r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"a"}}"#,
                ),
                Line(
                    r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":4}}"#,
                ),
                Line(r#"{"type":"message_stop"}"#),
                Line(OK),
            ],
            &[
                r#"{"type":"text_delta","text":"a"}"#,
                r#"{"type":"turn_completed","status":"success","usage":{"input_tokens":7,"output_tokens":4}}"#,
            ],
        );
    }

    #[test]
    fn awp_jsonl_wrapped_message_stop_and_tool_use_stop_reason_are_not_terminal() {
        let m = check(
            awp(),
            &[
                Input,
                Line(r#"{"type":"stream_event","event":{"type":"message_stop"}}"#),
                Line(r#"{"type":"message_start","message":{"id":"m1"}}"#),
                Line(r#"{"type":"message_delta","delta":{"stop_reason":"tool_use"}}"#),
                Line(r#"{"type":"message_stop"}"#),
                Line(r#"{"type":"message_start","message":{"id":"m2"}}"#),
                Line(r#"{"type":"message_stop"}"#),
                Line(OK),
            ],
            &[r#"{"type":"turn_completed","status":"success"}"#],
        );
        assert_eq!(
            m.counters().output_outside_turn,
            1,
            "the late result is counted"
        );
    }

    #[test]
    fn failure_rule_and_details() {
        let cases = [
            (
                r#"{"type":"result","subtype":"error","is_error":true,"result":"stable_machine_readable_error"}"#,
                r#"{"type":"turn_completed","status":"failed","code":"agent_error","detail":"stable_machine_readable_error","result_text":"stable_machine_readable_error"}"#,
            ),
            (
                r#"{"type":"result","subtype":"success","is_error":true,"result":"Something broke."}"#,
                r#"{"type":"turn_completed","status":"failed","code":"agent_error","detail":"is_error","result_text":"Something broke."}"#,
            ),
            (
                r#"{"type":"result","subtype":"error_during_execution","is_error":true}"#,
                r#"{"type":"turn_completed","status":"failed","code":"agent_error","detail":"error_during_execution"}"#,
            ),
            (
                r#"{"type":"result","subtype":"error_max_turns","is_error":false,"result":"done"}"#,
                r#"{"type":"turn_completed","status":"failed","code":"agent_error","detail":"error_max_turns","result_text":"done"}"#,
            ),
            (
                r#"{"type":"result","is_error":false}"#,
                r#"{"type":"turn_completed","status":"failed","code":"agent_error","detail":"no_subtype"}"#,
            ),
            (
                r#"{"type":"result","subtype":"success","duration_ms":9,"total_cost_usd":0.5}"#,
                r#"{"type":"turn_completed","status":"success","duration_ms":9,"total_cost_usd":0.5}"#,
            ),
        ];
        for (line, expect) in cases {
            check(awp(), &[Input, Line(line)], &[expect]);
        }
    }

    #[test]
    fn exit_before_terminal_fails_mid_turn_and_exit_after_is_quiet() {
        check(
            awp(),
            &[
                Input,
                Line(
                    r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"a"}}"#,
                ),
                Exit(3),
                Input,
            ],
            &[
                r#"{"type":"text_delta","text":"a"}"#,
                r#"{"type":"turn_completed","status":"failed","code":"agent_exited_mid_turn","detail":"exit code 3"}"#,
                "rejected:agent_exited",
            ],
        );
        check(awp(), &[Input, Line(OK), Exit(0)], &[DONE_OK]);
    }

    #[test]
    fn output_before_input_is_discarded_and_counted() {
        let m = check(
            awp(),
            &[
                Line(r#"{"type":"system","subtype":"init","session_id":"early"}"#),
                Line("Welcome banner"),
                Input,
                Line(OK),
                Line(r#"{"type":"system","subtype":"status"}"#),
            ],
            &[
                r#"{"type":"notice","kind":"output_before_input","detail":"2 stdout lines before the first input were discarded"}"#,
                DONE_OK,
            ],
        );
        let c = m.counters();
        assert_eq!(
            (
                c.output_before_input,
                c.output_outside_turn,
                c.malformed_lines
            ),
            // The banner is not JSON: counted (and kept) as a malformed line too.
            (2, 1, 1)
        );
        assert_eq!(m.first_malformed_line(), Some("Welcome banner"));
        assert_eq!(m.session_id().map(SessionId::as_str), Some("s1"));
    }

    #[test]
    fn invalid_session_ids_are_rejected_and_noticed() {
        let m = check(
            awp(),
            &[
                Input,
                Line(r#"{"type":"system","subtype":"init","session_id":"bad id/with spaces!"}"#),
                Line(r#"{"type":"result","subtype":"success","session_id":"bad id/with spaces!"}"#),
            ],
            &[
                r#"{"type":"notice","kind":"invalid_session_id","detail":"session id contains a character outside [A-Za-z0-9._:-] at byte 3"}"#,
                r#"{"type":"notice","kind":"invalid_session_id","detail":"session id contains a character outside [A-Za-z0-9._:-] at byte 3"}"#,
                r#"{"type":"turn_completed","status":"success"}"#,
            ],
        );
        assert_eq!(m.counters().invalid_session_ids, 2);
        assert_eq!(m.session_id(), None);
    }

    #[test]
    fn resume_reporting_a_different_id_is_noticed_and_the_new_id_wins() {
        let mut config = awp();
        config.resumed_from = Some(SessionId::new("A").unwrap());
        let m = check(
            config,
            &[
                Input,
                Line(r#"{"type":"system","subtype":"init","session_id":"B"}"#),
                Line(r#"{"type":"result","subtype":"success","session_id":"B"}"#),
            ],
            &[
                r#"{"type":"notice","kind":"session_id_changed","detail":"A -> B"}"#,
                r#"{"type":"session_started","session_id":"B"}"#,
                r#"{"type":"turn_completed","status":"success","session_id":"B"}"#,
            ],
        );
        assert_eq!(m.session_id().map(SessionId::as_str), Some("B"));
    }

    #[test]
    fn deltas_win_over_the_complete_message_of_the_same_id() {
        let streamed = [
            Input,
            Line(
                r#"{"type":"stream_event","event":{"type":"message_start","message":{"id":"msg_1"}}}"#,
            ),
            Line(
                r#"{"type":"stream_event","event":{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"ec"}}}"#,
            ),
            Line(
                r#"{"type":"stream_event","event":{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"ho"}}}"#,
            ),
            Line(
                r#"{"type":"assistant","message":{"id":"msg_1","content":[{"type":"text","text":"echo"}]}}"#,
            ),
            Line(
                r#"{"type":"assistant","message":{"id":"msg_2","content":[{"type":"text","text":"other"}]}}"#,
            ),
            Line(r#"{"type":"assistant","message":{"content":[{"type":"text","text":"no id"}]}}"#),
            Line(OK),
        ];
        let m = check(
            stream_json(),
            &streamed,
            &[
                r#"{"type":"text_delta","text":"ec"}"#,
                r#"{"type":"text_delta","text":"ho"}"#,
                r#"{"type":"text_delta","text":"\n\nother"}"#,
                r#"{"type":"text_delta","text":"\n\nno id"}"#,
                DONE_OK,
            ],
        );
        assert_eq!(m.counters().duplicate_messages_suppressed, 1);
        // The same id in the next turn without deltas renders the complete message.
        let mut steps = streamed.to_vec();
        steps.extend([
            Input,
            Line(r#"{"type":"assistant","message":{"id":"msg_1","content":[{"type":"text","text":"again"}]}}"#),
            Line(OK),
        ]);
        let (got, _) = run(stream_json(), &steps);
        assert_eq!(
            got[got.len() - 2],
            r#"{"type":"text_delta","text":"again"}"#
        );
    }

    const TOOL_START: &str = r#"{"type":"stream_event","event":{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_1","name":"Bash","input":{}}}}"#;
    const TOOL_STOP: &str =
        r#"{"type":"stream_event","event":{"type":"content_block_stop","index":1}}"#;

    #[test]
    fn input_json_deltas_accumulate_and_the_tool_use_is_emitted_once() {
        check(
            stream_json(),
            &[
                Input,
                Line(
                    r#"{"type":"stream_event","event":{"type":"message_start","message":{"id":"msg_t"}}}"#,
                ),
                Line(TOOL_START),
                Line(
                    r#"{"type":"stream_event","event":{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"comm"}}}"#,
                ),
                Line(
                    r#"{"type":"stream_event","event":{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"and\":\"ls\"}"}}}"#,
                ),
                Line(
                    r#"{"type":"assistant","message":{"id":"msg_t","content":[{"type":"tool_use","id":"toolu_1","name":"Bash","input":{"command":"ls"}}]}}"#,
                ),
                Line(TOOL_STOP),
                Line(
                    r#"{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"file"}]}}"#,
                ),
                Line(OK),
            ],
            &[
                r#"{"type":"tool_use","id":"toolu_1","name":"Bash","input":{"command":"ls"}}"#,
                r#"{"type":"tool_result","tool_use_id":"toolu_1","is_error":false,"summary":"file","truncated":false}"#,
                DONE_OK,
            ],
        );
    }

    #[test]
    fn invalid_tool_input_json_is_a_counted_notice_not_a_panic() {
        let m = check(
            stream_json(),
            &[
                Input,
                Line(TOOL_START),
                Line(
                    r#"{"type":"stream_event","event":{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"a\":"}}}"#,
                ),
                Line(TOOL_STOP),
                Line(OK),
            ],
            &[
                r#"{"type":"notice","kind":"invalid_tool_input_json","detail":"tool use toolu_1: EOF while parsing a value at line 1 column 5"}"#,
                r#"{"type":"tool_use","id":"toolu_1","name":"Bash","input":null}"#,
                DONE_OK,
            ],
        );
        assert_eq!(m.counters().invalid_tool_inputs, 1);
    }

    #[test]
    fn tool_input_limit_at_and_one_past() {
        let mut config = stream_json();
        config.limits.max_tool_input_bytes = 8;
        let delta = |json: &str| {
            format!(
                r#"{{"type":"stream_event","event":{{"type":"content_block_delta","index":1,"delta":{{"type":"input_json_delta","partial_json":{}}}}}}}"#,
                serde_json::Value::String(json.into())
            )
        };
        let at = delta(r#"{"a":"b"}"#.get(..8).unwrap());
        let at_rest = delta("}");
        // 8 bytes then 1 more: 9 > 8 → too large.
        let (got, m) = run(
            config.clone(),
            &[
                Input,
                Line(TOOL_START),
                Line(&at),
                Line(&at_rest),
                Line(TOOL_STOP),
                Line(OK),
            ],
        );
        assert_eq!(
            got[0],
            r#"{"type":"notice","kind":"tool_input_too_large","detail":"tool use toolu_1"}"#
        );
        assert_eq!(
            got[1],
            r#"{"type":"tool_use","id":"toolu_1","name":"Bash","input":null}"#
        );
        assert_eq!(m.counters().invalid_tool_inputs, 1);
        // Exactly 8 bytes: accepted.
        let exact = delta(r#"{"a":12}"#);
        let (got, _) = run(
            config,
            &[
                Input,
                Line(TOOL_START),
                Line(&exact),
                Line(TOOL_STOP),
                Line(OK),
            ],
        );
        assert_eq!(
            got[0],
            r#"{"type":"tool_use","id":"toolu_1","name":"Bash","input":{"a":12}}"#
        );
    }

    #[test]
    fn line_limit_at_and_one_past_terminates_the_runtime() {
        let mut config = awp();
        let ok = r#"{"type":"result","subtype":"success"}"#;
        config.limits.max_line_bytes = ok.len();
        check(
            config.clone(),
            &[Input, Line(ok)],
            &[r#"{"type":"turn_completed","status":"success"}"#],
        );
        config.limits.max_line_bytes = ok.len() - 1;
        let m = check(
            config,
            &[Input, Line(ok), Input, Line(ok)],
            &[
                r#"{"type":"turn_completed","status":"failed","code":"stdout_line_too_long","detail":"stdout line over 36 bytes"}"#,
                "action:stdout_line_too_long",
                "rejected:agent_terminated",
            ],
        );
        assert_eq!(m.counters().lines_too_long, 2);
        // Between turns it also terminates.
        check(
            awp(),
            &[Input, Line(OK), TooLong(5_000_000), Input],
            &[
                DONE_OK,
                "action:stdout_line_too_long",
                "rejected:agent_terminated",
            ],
        );
    }

    #[test]
    fn idle_timeout_is_off_by_default_and_fires_at_the_deadline() {
        let (got, m) = run(awp(), &[Input, Advance(100_000), Timeout]);
        assert!(got.is_empty());
        assert_eq!(m.poll_timeout(), None);
        let mut config = awp();
        config.idle_timeout = Some(Duration::from_secs(10));
        check(
            config,
            &[
                Input,
                Advance(9),
                Timeout,
                Line(r#"{"type":"keep_alive"}"#),
                Advance(9),
                Timeout,
                Advance(1),
                Timeout,
            ],
            &[
                r#"{"type":"turn_completed","status":"failed","code":"agent_idle_timeout"}"#,
                "action:agent_idle_timeout",
            ],
        );
    }

    #[test]
    fn cancel_completes_the_turn_as_cancelled() {
        check(
            awp(),
            &[Input, Cancel, Line(OK), Input],
            &[
                r#"{"type":"turn_completed","status":"failed","code":"cancelled"}"#,
                "action:cancelled",
                "rejected:agent_terminated",
            ],
        );
    }

    #[test]
    fn the_first_malformed_line_is_kept_bounded() {
        for len in [MAX_MALFORMED_LINE_CHARS, MAX_MALFORMED_LINE_CHARS + 1] {
            let line = "é".repeat(len);
            let (_, m) = run(awp(), &[Input, Line(&line), Line("second")]);
            let first = m.first_malformed_line().unwrap();
            let cut = len > MAX_MALFORMED_LINE_CHARS;
            assert_eq!(
                first.chars().count(),
                len.min(MAX_MALFORMED_LINE_CHARS) + usize::from(cut)
            );
            assert_eq!(first.ends_with('…'), cut);
        }
    }

    #[test]
    fn malformed_and_unknown_lines_are_counted_never_rendered() {
        let m = check(
            awp(),
            &[
                Input,
                Line("DEBUG: warming up"),
                Line("[1,2,3]"),
                Line(r#"{"type":"assistant"}"#),
                Line(r#"{"type":"future_event","x":1}"#),
                Line(r#"{"type":"stream_event","event":{"type":"future_delta"}}"#),
                Line(
                    r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"a\u2028b"}}"#,
                ),
                Line(
                    "{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"c\u{2028}d\u{2029}\"}}",
                ),
                Line(OK),
            ],
            &[
                "{\"type\":\"text_delta\",\"text\":\"a\u{2028}b\"}",
                "{\"type\":\"text_delta\",\"text\":\"c\u{2028}d\u{2029}\"}",
                DONE_OK,
            ],
        );
        let c = m.counters();
        assert_eq!((c.malformed_lines, c.unknown_events), (3, 2));
        assert_eq!(m.first_malformed_line(), Some("DEBUG: warming up"));
    }

    #[test]
    fn informational_events_become_notices() {
        check(
            awp(),
            &[
                Input,
                Line(r#"{"type":"system","subtype":"status","status":"requesting"}"#),
                Line(r#"{"type":"rate_limit_event"}"#),
                Line(r#"{"type":"keep_alive"}"#),
                Line(
                    r#"{"type":"control_request","request_id":"1","request":{"subtype":"can_use_tool"}}"#,
                ),
                Line(r#"{"type":"error","error":{"type":"overloaded_error"}}"#),
                Line(OK),
            ],
            &[
                r#"{"type":"notice","kind":"system","detail":"status"}"#,
                r#"{"type":"notice","kind":"rate_limit_event"}"#,
                r#"{"type":"notice","kind":"control_request","detail":"can_use_tool"}"#,
                r#"{"type":"notice","kind":"stream_error","detail":"overloaded_error"}"#,
                DONE_OK,
            ],
        );
    }

    #[test]
    fn tool_result_summary_limit_at_and_one_past() {
        let mut config = awp();
        config.limits.max_summary_bytes = 4;
        let line = |text: &str| {
            format!(
                r#"{{"type":"user","message":{{"content":[{{"type":"tool_result","tool_use_id":"t","content":"{text}","is_error":true}}]}}}}"#
            )
        };
        let (at, past, split) = (line("abcd"), line("abcde"), line("abcé"));
        check(
            config,
            &[Input, Line(&at), Line(&past), Line(&split), Line(OK)],
            &[
                r#"{"type":"tool_result","tool_use_id":"t","is_error":true,"summary":"abcd","truncated":false}"#,
                r#"{"type":"tool_result","tool_use_id":"t","is_error":true,"summary":"abcd","truncated":true}"#,
                r#"{"type":"tool_result","tool_use_id":"t","is_error":true,"summary":"abc","truncated":true}"#,
                DONE_OK,
            ],
        );
    }

    #[test]
    fn open_block_limit_at_and_one_past() {
        let mut config = stream_json();
        config.limits.max_open_blocks = 2;
        let start = |i: u32| {
            format!(
                r#"{{"type":"content_block_start","index":{i},"content_block":{{"type":"tool_use","id":"t{i}","name":"X","input":{{}}}}}}"#
            )
        };
        let stop = |i: u32| format!(r#"{{"type":"content_block_stop","index":{i}}}"#);
        let (s0, s1, s2, e0, e1, e2) = (start(0), start(1), start(2), stop(0), stop(1), stop(2));
        let m = check(
            config,
            &[
                Input,
                Line(&s0),
                Line(&s1),
                Line(&s2),
                Line(&e0),
                Line(&e1),
                Line(&e2),
                Line(OK),
            ],
            &[
                r#"{"type":"tool_use","id":"t0","name":"X","input":{}}"#,
                r#"{"type":"tool_use","id":"t1","name":"X","input":{}}"#,
                DONE_OK,
            ],
        );
        assert_eq!(m.counters().blocks_over_limit, 1);
    }
}
