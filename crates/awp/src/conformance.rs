//! AWP conformance checks: run a short scripted conversation against any agent CLI and judge each protocol rule.
//!
//! This is the engine behind `awp-host check [--protocol awp-jsonl|stream-json] -- CMD ARGS…` and
//! `cargo xtask conformance`; protocol authors run it against their own agents.
//!
//! # The script
//!
//! 1. Build the launch plan from a [`LaunchConfig`] (the same argv/env rules the host uses) and spawn it.
//! 2. Watch stdout for [`CheckLimits::quiet_window`] (1 s) **before** writing anything.
//! 3. Turn 1 and turn 2 in the same process (one user line each, [`CheckPlan::prompts`]).
//! 4. Close stdin and wait [`CheckLimits::exit_grace`] (5 s) for the exit (then the stop ladder).
//! 5. When turn 1 reported a valid session id: relaunch with `--resume <id>`, watch the quiet window again,
//!    one turn, close stdin.
//!
//! Every stdout frame goes through the same [`TurnMachine`] the host uses, so "terminal", "success" and
//! "mid-turn exit" mean exactly what they mean in production. The rule checks themselves are in
//! [`RuleBook`], which is pure (frames and turn outcomes in, verdicts out); [`run_check`] is the IO shell.
//!
//! # The rules ([`RULES`])
//!
//! Derived from the MUSTs of the AWP agent CLI protocol (`protocols/awp.md`): no output before the first input;
//! stdout protocol-only, every line one JSON object with a string `type`, none over 4 MiB; a session id
//! reported and every reported id valid (`[A-Za-z0-9._:-]{1,256}`); exactly one terminal event per accepted
//! turn, the process staying alive for the next turn; exit on stdin EOF; `--resume <id>` accepted.
//! Two rules are recommendations (severity [`Severity::Should`], labelled `optional`: reported, never fail the
//! check): `init` as the first event of the first turn, and `usage` on every terminal event.
//!
//! A rule passes only when the script exercised it ([`RuleBook::observations_complete`], [`RuleBook::finish`]):
//! `valid_session_id` without any reported id, the per-line rules without any stdout line, and `turn_succeeds` when
//! any turn did not end on its own are `skipped`; a skipped required rule fails the check
//! ([`SkipPolicy::RequiredSkipFails`]).
//!
//! Deliberately not checked: how unsupported content blocks are handled (the protocol allows rejecting them
//! *or* a documented fallback, which a black-box check cannot tell apart), stderr content, and the Windows
//! shutdown line. An extra terminal event is only detected when it arrives before the next input is written
//! or after the last turn (a check cannot tell which turn a late line belongs to).
//!
//! Output looks like:
//!
//! ```text
//! PASS  no_output_before_input    required  the agent writes nothing to stdout before its first input line
//! FAIL  stdout_only_json          required  every stdout line is one JSON object with a string "type"
//!       evidence: turn 1, stdout line 1: Welcome to fixture-agent v0.0.0 (not JSON) (not a JSON line)
//! …
//! not conformant: required rules 11 passed, 1 failed, 0 skipped; optional rules 2 passed, 0 failed, 0 skipped
//! ```

use std::collections::VecDeque;
use std::path::PathBuf;
use std::time::Duration;

use agentwire_jsonl::{Frame, JsonlDecoder};
use agentwire_process::{Child, Command, ExitStatus, Stdout, StdoutItem, StopPlan};
use bytes::BytesMut;
use serde_json::Value;
use tokio::time::Instant;

use crate::event::StreamEvent;
use crate::machine::{Action, ExitInfo, MachineConfig, TurnMachine};
use crate::{
    ContentBlock, LaunchConfig, NormalizedEvent, OutputEvent, Protocol, SessionId, TurnOutcome,
    codes, user_line,
};

pub use agentwire_conformance::{
    CheckReport, Counts, Outcome, Rule, RuleResult, Severity, SkipPolicy, Summary,
};

const fn must(id: &'static str, description: &'static str) -> Rule {
    Rule::must(id, description)
}

const fn should(id: &'static str, description: &'static str) -> Rule {
    Rule::should(id, description)
}

/// Every rule, in report order.
pub const RULES: &[Rule] = &[
    must(
        "launch_contract",
        "the command passes the launch contract (absolute, regular, non-symlink executable; no remote URL without opt-in)",
    ),
    must("spawns", "the agent process starts"),
    must(
        "no_output_before_input",
        "the agent writes nothing to stdout before its first input line",
    ),
    must(
        "stdout_only_json",
        "every stdout line is one JSON object with a string \"type\"",
    ),
    must(
        "line_within_limit",
        "no stdout line is longer than 4 MiB (4194304 bytes)",
    ),
    must(
        "session_id_reported",
        "the first turn reports a session_id (in system/init or result)",
    ),
    must(
        "valid_session_id",
        "every reported session_id matches [A-Za-z0-9._:-]{1,256}",
    ),
    must(
        "one_terminal_per_turn",
        "every accepted turn ends with exactly one terminal event (result; or a top-level message_stop in awp-jsonl)",
    ),
    must("turn_succeeds", "the scripted turns end in success"),
    must(
        "second_turn_same_process",
        "the process stays alive after a turn and answers the next input line",
    ),
    must(
        "exits_on_stdin_eof",
        "the process exits within the grace period after stdin is closed",
    ),
    must(
        "resume_accepted",
        "a new process started with --resume <id> completes a turn and reports a valid session_id",
    ),
    should(
        "init_first",
        "the first event of the first turn is system/init with the session_id",
    ),
    should("terminal_has_usage", "every terminal event carries usage"),
];

/// Bounds and timeouts of a check. Every field documents its default and what happens on overflow.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct CheckLimits {
    /// How long stdout is watched before the first input line. Default 1 s. Output that comes later than this
    /// is not attributed to "before input" (a black-box check can only observe a window).
    pub quiet_window: Duration,
    /// Longest wait for a turn's terminal event. Default 120 s; on overflow the turn fails
    /// `one_terminal_per_turn` and the process is stopped.
    pub turn_timeout: Duration,
    /// How long the process gets to exit after stdin EOF. Default 5 s (the host's stop ladder grace); on
    /// overflow `exits_on_stdin_eof` fails and the process is stopped (SIGTERM, then SIGKILL after 3 s).
    pub exit_grace: Duration,
    /// Longest stdout line, in bytes without the newline. Default 4 MiB (the protocol's limit); a longer line
    /// fails `line_within_limit` and ends the turn like in the host.
    pub max_line_bytes: usize,
    /// Most bytes of agent output quoted in one piece of evidence. Default 240; longer output is cut at a
    /// char boundary and marked with its full length.
    pub max_evidence_bytes: usize,
}

impl Default for CheckLimits {
    fn default() -> Self {
        Self {
            quiet_window: Duration::from_secs(1),
            turn_timeout: Duration::from_secs(120),
            exit_grace: Duration::from_secs(5),
            max_line_bytes: agentwire_jsonl::DEFAULT_MAX_LINE_BYTES,
            max_evidence_bytes: 240,
        }
    }
}

/// What to check: the agent (as a launch configuration), the model and the scripted prompts.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct CheckPlan {
    /// The agent: executable, prefix args, env entries, protocol (as from the `AWP_AGENT_CLI_*` variables).
    pub launch: LaunchConfig,
    /// `--model` for every launch; `None` uses `launch.default_model` (and passes none when that is unset).
    pub model: Option<String>,
    /// Working directory of the agent. Default `None` (the caller's).
    pub cwd: Option<PathBuf>,
    /// The texts of turn 1, turn 2 and the resumed turn.
    pub prompts: [String; 3],
    /// Bounds and timeouts.
    pub limits: CheckLimits,
}

impl CheckPlan {
    /// A plan with the default prompts and limits.
    pub fn new(launch: LaunchConfig) -> Self {
        Self {
            launch,
            model: None,
            cwd: None,
            prompts: [
                "This is an AWP conformance check. Reply with one short sentence.".to_owned(),
                "Second turn of the conformance check. Reply with one word.".to_owned(),
                "Resumed conversation of the conformance check. Reply with one word.".to_owned(),
            ],
            limits: CheckLimits::default(),
        }
    }
}

// ---------------------------------------------------------------------------------------------------------------
// The pure rule book

/// Where in the script a stdout line arrived.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Before the first input line of the first process.
    BeforeInput,
    /// During turn `n` (1 or 2) of the first process.
    Turn(u8),
    /// During the turn of the process started with `--resume`.
    ResumedTurn,
    /// After the last turn of a process (between its terminal event and its exit).
    AfterLastTurn,
}

impl Stage {
    fn label(self) -> String {
        match self {
            Stage::BeforeInput => "before any input".to_owned(),
            Stage::Turn(n) => format!("turn {n}"),
            Stage::ResumedTurn => "resumed turn".to_owned(),
            Stage::AfterLastTurn => "after the last turn".to_owned(),
        }
    }
}

/// The rule checks, fed with what the IO shell observed. Pure: no clock, no IO.
///
/// Use: [`observe_frame`](Self::observe_frame) for every stdout frame, [`turn_completed`](Self::turn_completed)
/// / [`turn_unanswered`](Self::turn_unanswered) per turn, [`pass`](Self::pass) / [`fail`](Self::fail) /
/// [`skip`](Self::skip) for process-level facts, then [`finish`](Self::finish).
/// A failure replaces an earlier pass or skip of the same rule; a pass or skip never replaces a verdict.
#[derive(Debug)]
pub struct RuleBook {
    protocol: Protocol,
    max_evidence_bytes: usize,
    outcomes: Vec<Option<Outcome>>,
    /// Stdout line number within the current process (1-based).
    line_number: u64,
    /// Label of the current process in evidence (`""` or `"resumed process, "`).
    process_label: &'static str,
    saw_event_in_turn_1: bool,
    reported_id_in_turn_1: bool,
    /// Stdout lines observed over all processes (the per-line rules are exercised only when there was one).
    lines_seen: u64,
    /// Session ids observed over all processes (`valid_session_id` is exercised only when there was one).
    ids_seen: u64,
    /// The first turn that did not end on its own (its success could not be judged), for `turn_succeeds`.
    unfinished_turn: Option<String>,
}

impl RuleBook {
    /// A book for an agent speaking `protocol`, quoting at most `max_evidence_bytes` of output per evidence.
    pub fn new(protocol: Protocol, max_evidence_bytes: usize) -> Self {
        Self {
            protocol,
            max_evidence_bytes,
            outcomes: vec![None; RULES.len()],
            line_number: 0,
            process_label: "",
            saw_event_in_turn_1: false,
            reported_id_in_turn_1: false,
            lines_seen: 0,
            ids_seen: 0,
            unfinished_turn: None,
        }
    }

    fn slot(&mut self, id: &str) -> Option<&mut Option<Outcome>> {
        let index = RULES.iter().position(|r| r.id == id)?;
        self.outcomes.get_mut(index)
    }

    /// Records a failure of rule `id`; the first failure of a rule is kept (later ones are dropped), and it
    /// replaces an earlier pass or skip.
    pub fn fail(&mut self, id: &str, evidence: String) {
        if let Some(slot) = self.slot(id)
            && !matches!(slot, Some(Outcome::Fail { .. }))
        {
            *slot = Some(Outcome::Fail { evidence });
        }
    }

    /// Records that rule `id` was judged and held (unless it already failed).
    pub fn pass(&mut self, id: &str) {
        if let Some(slot) = self.slot(id)
            && slot.is_none()
        {
            *slot = Some(Outcome::Pass);
        }
    }

    /// Marks rule `id` as not judged (unless it already has a verdict).
    pub fn skip(&mut self, id: &str, why: &str) {
        if let Some(slot) = self.slot(id)
            && slot.is_none()
        {
            *slot = Some(Outcome::Skipped {
                why: why.to_owned(),
            });
        }
    }

    /// Marks rule `id` as not exercised: a pass becomes a skip with `why` (a failure stays). For a rule whose
    /// earlier pass no longer holds for the whole script (e.g. `turn_succeeds` when a later turn died).
    pub fn unexercised(&mut self, id: &str, why: &str) {
        if let Some(slot) = self.slot(id)
            && !matches!(slot, Some(Outcome::Fail { .. }))
        {
            *slot = Some(Outcome::Skipped {
                why: why.to_owned(),
            });
        }
    }

    /// Judges the rules that need all output (call once all output was observed): the per-line rules pass when
    /// lines were seen without a violation and are skipped when the agent wrote no line; `valid_session_id` passes
    /// only when an id was reported.
    pub fn observations_complete(&mut self) {
        for id in ["stdout_only_json", "line_within_limit"] {
            if self.lines_seen == 0 {
                self.skip(id, "the agent wrote no stdout line");
            } else {
                self.pass(id);
            }
        }
        if self.ids_seen == 0 {
            self.skip("valid_session_id", "no session id was reported");
        } else {
            self.pass("valid_session_id");
        }
    }

    fn turn_unfinished(&mut self, at: &str) {
        if self.unfinished_turn.is_none() {
            self.unfinished_turn = Some(at.to_owned());
        }
    }

    /// Starts counting stdout lines of the process started with `--resume`.
    pub fn start_resumed_process(&mut self) {
        self.line_number = 0;
        self.process_label = "resumed process, ";
    }

    fn location(&self, stage: Stage) -> String {
        format!(
            "{}{}, stdout line {}",
            self.process_label,
            stage.label(),
            self.line_number
        )
    }

    /// Judges one stdout frame that arrived at `stage`.
    pub fn observe_frame(&mut self, stage: Stage, frame: &Frame) {
        self.line_number += 1;
        self.lines_seen += 1;
        let at = self.location(stage);
        if stage == Stage::BeforeInput {
            let shown = self.show_frame(frame);
            self.fail("no_output_before_input", format!("{at}: {shown}"));
        }
        let bytes = match frame {
            Frame::Json(bytes) => bytes,
            Frame::TooLong { bytes_discarded } => {
                self.fail(
                    "line_within_limit",
                    format!("{at}: a line of at least {bytes_discarded} bytes"),
                );
                return;
            }
            other => {
                let shown = self.show_frame(other);
                self.fail(
                    "stdout_only_json",
                    format!("{at}: {shown} (not a JSON line)"),
                );
                return;
            }
        };
        let value: Value = match serde_json::from_slice(bytes) {
            Ok(value) => value,
            Err(_) => {
                let shown = self.show(bytes);
                self.fail(
                    "stdout_only_json",
                    format!("{at}: {shown} (not a JSON line)"),
                );
                return;
            }
        };
        let Some(event_type) = value.get("type").and_then(Value::as_str) else {
            let shown = self.show(bytes);
            self.fail(
                "stdout_only_json",
                format!("{at}: {shown} (not an object with a string type)"),
            );
            return;
        };
        let is_init =
            event_type == "system" && value.get("subtype").and_then(Value::as_str) == Some("init");
        if (is_init || event_type == "result")
            && let Some(id) = value.get("session_id").filter(|v| !v.is_null())
        {
            self.ids_seen += 1;
            let valid = id.as_str().is_some_and(|s| SessionId::new(s).is_ok());
            if !valid {
                let shown = self.show(bytes);
                self.fail("valid_session_id", format!("{at}: {shown}"));
            }
            if stage == Stage::Turn(1) {
                self.reported_id_in_turn_1 = true;
            }
        }
        if stage == Stage::Turn(1) && !self.saw_event_in_turn_1 {
            self.saw_event_in_turn_1 = true;
            let has_id = value.get("session_id").and_then(Value::as_str).is_some();
            if !(is_init && has_id) {
                let shown = self.show(bytes);
                self.fail("init_first", format!("{at}: {shown}"));
            }
        }
        if stage == Stage::AfterLastTurn && self.is_terminal(&value) {
            let shown = self.show(bytes);
            self.fail(
                "one_terminal_per_turn",
                format!("{at}: a terminal event after the turn had completed: {shown}"),
            );
        }
    }

    fn is_terminal(&self, value: &Value) -> bool {
        match OutputEvent::from_value(value) {
            Ok(OutputEvent::Result(_)) => true,
            Ok(OutputEvent::Stream {
                event: StreamEvent::MessageStop,
                wrapped: false,
            }) => self.protocol == Protocol::AwpJsonl,
            _ => false,
        }
    }

    /// Judges a turn that ended with [`NormalizedEvent::TurnCompleted`]; `terminal` is the last stdout line of
    /// the turn, for evidence.
    pub fn turn_completed(&mut self, stage: Stage, outcome: &TurnOutcome, terminal: Option<&[u8]>) {
        let at = format!("{}{}", self.process_label, stage.label());
        let shown = terminal.map(|t| self.show(t)).unwrap_or_default();
        match outcome.status.code() {
            None => {
                self.pass("turn_succeeds");
            }
            Some(codes::AGENT_EXITED_MID_TURN | codes::AGENT_IDLE_TIMEOUT) => {
                self.turn_unfinished(&at);
                let detail = status_detail(outcome);
                self.fail(
                    "one_terminal_per_turn",
                    format!("{at}: the process exited before a terminal event ({detail}); last line: {shown}"),
                );
                return;
            }
            // The line itself fails `line_within_limit`; the turn had no chance to end on its own.
            Some(codes::STDOUT_LINE_TOO_LONG) => {
                self.turn_unfinished(&at);
                return;
            }
            Some(code) => {
                let detail = status_detail(outcome);
                self.fail(
                    "turn_succeeds",
                    format!("{at}: failed with {code} ({detail}): {shown}"),
                );
            }
        }
        self.pass("one_terminal_per_turn");
        if outcome.usage.is_none() {
            self.fail(
                "terminal_has_usage",
                format!("{at}: terminal event without usage: {shown}"),
            );
        } else {
            self.pass("terminal_has_usage");
        }
    }

    /// Judges a turn that got no terminal event within the turn timeout.
    pub fn turn_unanswered(&mut self, stage: Stage, timeout: Duration, last_line: Option<&[u8]>) {
        let at = format!("{}{}", self.process_label, stage.label());
        self.turn_unfinished(&at);
        let shown = last_line
            .map(|l| self.show(l))
            .unwrap_or_else(|| "no output".to_owned());
        self.fail(
            "one_terminal_per_turn",
            format!(
                "{at}: no terminal event within {} s; last line: {shown}",
                timeout.as_secs()
            ),
        );
    }

    /// Judges the end of the first turn's observation: was a session id reported?
    pub fn first_turn_done(&mut self) {
        if self.reported_id_in_turn_1 {
            self.pass("session_id_reported");
        } else {
            self.fail(
                "session_id_reported",
                "turn 1: no system/init or result line carried a session_id".to_owned(),
            );
        }
        if self.saw_event_in_turn_1 {
            self.pass("init_first");
        }
    }

    /// Quotes a frame for evidence.
    fn show_frame(&self, frame: &Frame) -> String {
        match frame {
            Frame::Json(bytes) => self.show(bytes),
            Frame::Invalid(line) => {
                let mut shown = escape(&line.preview, self.max_evidence_bytes);
                if line.len > line.preview.len() {
                    shown.push_str(&format!("… ({} bytes)", line.len));
                }
                shown
            }
            Frame::TooLong { bytes_discarded } => format!("a line of {bytes_discarded} bytes"),
            other => format!("a {} frame", other.kind()),
        }
    }

    /// Quotes raw output for evidence: lossy UTF-8, control characters escaped, cut at the evidence limit.
    fn show(&self, bytes: &[u8]) -> String {
        let text = String::from_utf8_lossy(bytes);
        let mut shown = escape(&text, self.max_evidence_bytes);
        if text.len() > self.max_evidence_bytes {
            shown.push_str(&format!("… ({} bytes)", bytes.len()));
        }
        shown
    }

    /// The report: every rule keeps its verdict; rules never judged are reported as skipped with
    /// `why_unjudged`.
    ///
    /// `turn_succeeds` is reported skipped when any turn did not end on its own (a pass of another turn does not
    /// stand for it).
    pub fn finish(mut self, why_unjudged: &str) -> CheckReport {
        if let Some(turn) = self.unfinished_turn.take() {
            self.unexercised(
                "turn_succeeds",
                &format!("{turn} did not end (see one_terminal_per_turn)"),
            );
        }
        let rules = RULES
            .iter()
            .zip(self.outcomes)
            .map(|(rule, outcome)| {
                let outcome = outcome.unwrap_or_else(|| Outcome::Skipped {
                    why: why_unjudged.to_owned(),
                });
                RuleResult::new(rule, outcome)
            })
            .collect();
        CheckReport::new(rules, SkipPolicy::RequiredSkipFails)
    }
}

fn status_detail(outcome: &TurnOutcome) -> String {
    match &outcome.status {
        crate::TurnStatus::Failed {
            detail: Some(detail),
            ..
        } => detail.clone(),
        _ => "no detail".to_owned(),
    }
}

/// `text` with control characters escaped, at most `max` bytes of it (cut at a char boundary).
fn escape(text: &str, max: usize) -> String {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let mut out = String::with_capacity(end);
    for ch in text.get(..end).unwrap_or_default().chars() {
        if ch.is_control() || matches!(ch, '\u{2028}' | '\u{2029}') {
            out.extend(ch.escape_default());
        } else {
            out.push(ch);
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------------------------
// The IO shell

/// One spawned agent process under observation.
struct Observed {
    child: Child,
    stdout: Stdout,
    machine: TurnMachine,
    /// Stdout is read as raw bytes and framed here, so that an over-long line is noticed as soon as the
    /// unbroken buffer crosses the limit (a flood without a newline must not wait for the turn timeout).
    decoder: JsonlDecoder,
    buf: BytesMut,
    /// The over-long line being discarded was already reported (its `Frame::TooLong` is then skipped).
    reported_discard: bool,
    frames: VecDeque<Frame>,
    /// The stdout stream ended (EOF or exit + drain window).
    stdout_ended: bool,
    /// The machine asked to stop the process (line limit).
    stop_requested: Option<&'static str>,
}

/// What reading one stdout item gave.
enum Read {
    Frame(Frame),
    Ended,
    TimedOut,
}

impl Observed {
    fn spawn(
        plan: &crate::LaunchPlan,
        check: &CheckPlan,
    ) -> Result<Observed, agentwire_process::SpawnError> {
        let mut command = Command::new(&plan.program);
        command
            .args(&plan.args)
            .inherit_os_env()
            .envs(plan.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdout_bytes();
        if let Some(cwd) = &check.cwd {
            command.current_dir(cwd);
        }
        let mut child = command.spawn()?;
        let stdout = child
            .take_stdout()
            .ok_or_else(|| agentwire_process::SpawnError::Io {
                program: plan.program.display().to_string(),
                source: std::io::Error::other("stdout is not piped"),
            })?;
        let mut config = MachineConfig::new(plan.protocol);
        config.limits.max_line_bytes = check.limits.max_line_bytes;
        Ok(Observed {
            child,
            stdout,
            machine: TurnMachine::new(config),
            decoder: JsonlDecoder::new(agentwire_jsonl::Limits {
                max_line_bytes: check.limits.max_line_bytes,
                ..agentwire_jsonl::Limits::default()
            }),
            buf: BytesMut::new(),
            reported_discard: false,
            frames: VecDeque::new(),
            stdout_ended: false,
            stop_requested: None,
        })
    }

    async fn read(&mut self, deadline: Instant) -> Read {
        loop {
            if let Some(frame) = self.frames.pop_front() {
                return Read::Frame(frame);
            }
            if self.stdout_ended {
                return Read::Ended;
            }
            match tokio::time::timeout_at(deadline, self.stdout.next()).await {
                Err(_) => return Read::TimedOut,
                Ok(None) => {
                    self.stdout_ended = true;
                    while let Some(frame) = self.decoder.decode_eof(&mut self.buf) {
                        self.push_frame(frame);
                    }
                }
                Ok(Some(StdoutItem::Bytes(bytes))) => {
                    self.buf.extend_from_slice(&bytes);
                    while let Some(frame) = self.decoder.decode(&mut self.buf) {
                        self.push_frame(frame);
                    }
                    if let Some(discarded) = self.decoder.discarding_bytes()
                        && !self.reported_discard
                    {
                        self.reported_discard = true;
                        self.frames.push_back(Frame::TooLong {
                            bytes_discarded: discarded,
                        });
                    }
                }
                // Frames only appear with `stdout_jsonl`, which is never set here.
                Ok(Some(_)) => {}
            }
        }
    }

    fn push_frame(&mut self, frame: Frame) {
        if matches!(frame, Frame::TooLong { .. }) && std::mem::take(&mut self.reported_discard) {
            return;
        }
        self.frames.push_back(frame);
    }

    /// Feeds a frame to the machine and the book; returns the turn's outcome when this frame completed it.
    fn handle(&mut self, book: &mut RuleBook, stage: Stage, frame: &Frame) -> Option<TurnOutcome> {
        book.observe_frame(stage, frame);
        self.machine.handle_frame(frame, Instant::now().into_std());
        self.drain_outcome()
    }

    fn drain_outcome(&mut self) -> Option<TurnOutcome> {
        let mut outcome = None;
        while let Some(event) = self.machine.poll_event() {
            if let NormalizedEvent::TurnCompleted(done) = event {
                outcome = Some(done);
            }
        }
        while let Some(action) = self.machine.poll_action() {
            let Action::StopProcess { code } = action;
            self.stop_requested = Some(code);
        }
        outcome
    }

    /// Watches stdout for `window` without writing anything.
    async fn quiet_window(&mut self, book: &mut RuleBook, window: Duration) {
        let deadline = Instant::now() + window;
        while let Read::Frame(frame) = self.read(deadline).await {
            self.handle(book, Stage::BeforeInput, &frame);
        }
        book.pass("no_output_before_input");
    }

    /// Runs one turn; returns its outcome, `None` when it got no terminal event in time (the process is then
    /// stopped).
    async fn turn(
        &mut self,
        book: &mut RuleBook,
        stage: Stage,
        text: &str,
        limits: &CheckLimits,
    ) -> Option<TurnOutcome> {
        let line = user_line(&[ContentBlock::text(text)]);
        if let Err(error) = self.child.stdin().write_line(&line).await {
            book.fail(
                "second_turn_same_process",
                format!(
                    "{}: the input line could not be written, the process has exited or closed its stdin ({})",
                    stage.label(),
                    error.code()
                ),
            );
            return None;
        }
        if self
            .machine
            .handle_input_sent(Instant::now().into_std())
            .is_err()
        {
            return None;
        }
        let deadline = Instant::now() + limits.turn_timeout;
        let mut last_line: Option<Vec<u8>> = None;
        loop {
            match self.read(deadline).await {
                Read::Frame(frame) => {
                    if let Some(bytes) = frame.as_json() {
                        last_line = Some(bytes.to_vec());
                    } else if let Frame::Invalid(invalid) = &frame {
                        last_line = Some(invalid.preview.clone().into_bytes());
                    }
                    if let Some(outcome) = self.handle(book, stage, &frame) {
                        book.turn_completed(stage, &outcome, last_line.as_deref());
                        return Some(outcome);
                    }
                }
                Read::Ended => {
                    let status = self.wait_exit(limits.exit_grace).await;
                    let exit = status.map_or(
                        ExitInfo {
                            code: None,
                            signal: None,
                        },
                        |s| ExitInfo {
                            code: s.code,
                            signal: s.signal,
                        },
                    );
                    self.machine.handle_exit(exit, Instant::now().into_std());
                    let outcome = self.drain_outcome()?;
                    book.turn_completed(stage, &outcome, last_line.as_deref());
                    return Some(outcome);
                }
                Read::TimedOut => {
                    book.turn_unanswered(stage, limits.turn_timeout, last_line.as_deref());
                    self.stop().await;
                    return None;
                }
            }
        }
    }

    /// The exit status when the process has exited (or its stdout ended and it exits within `grace`).
    async fn exited_after_turn(&mut self, grace: Duration) -> Option<ExitStatus> {
        if let Some(status) = self.child.try_wait() {
            return Some(status);
        }
        if self.stdout_ended {
            return self.wait_exit(grace).await;
        }
        None
    }

    /// The stop ladder without the stdin grace (the check already waited where waiting was due).
    async fn stop(&mut self) {
        self.child
            .stop(StopPlan::default().stdin_grace(Duration::ZERO))
            .await;
    }

    async fn wait_exit(&mut self, grace: Duration) -> Option<ExitStatus> {
        tokio::time::timeout(grace, self.child.wait()).await.ok()
    }

    /// Closes stdin, observes the remaining output and judges `exits_on_stdin_eof`.
    async fn close(&mut self, book: &mut RuleBook, limits: &CheckLimits) {
        if let Some(status) = self.child.try_wait() {
            book.skip(
                "exits_on_stdin_eof",
                &format!("the process had already exited ({status})"),
            );
            return;
        }
        self.child.stdin().close().await;
        let deadline = Instant::now() + limits.exit_grace;
        while let Read::Frame(frame) = self.read(deadline).await {
            self.handle(book, Stage::AfterLastTurn, &frame);
        }
        let remaining = deadline.saturating_duration_since(Instant::now());
        if self.wait_exit(remaining).await.is_some() {
            book.pass("exits_on_stdin_eof");
            return;
        }
        let outcome = self
            .child
            .stop(StopPlan::default().stdin_grace(Duration::ZERO))
            .await;
        book.fail(
            "exits_on_stdin_eof",
            format!(
                "{}still running {} s after stdin was closed; stopped by {} ({})",
                book.process_label,
                limits.exit_grace.as_secs(),
                outcome.ended_by.as_str(),
                outcome.status
            ),
        );
    }
}

/// Runs the scripted conversation of the module docs against `plan.launch` and judges every rule.
///
/// Never fails: a launch or spawn failure is reported as the `launch_contract` / `spawns` rule and the
/// remaining rules are skipped. Needs a tokio runtime with time enabled.
pub async fn run_check(plan: CheckPlan) -> CheckReport {
    let protocol = plan.launch.protocol;
    let mut book = RuleBook::new(protocol, plan.limits.max_evidence_bytes);
    let launch = match plan.launch.plan(plan.model.as_deref(), None, None) {
        Ok(launch) => launch,
        Err(error) => {
            book.fail("launch_contract", format!("{}: {error}", error.code()));
            return book.finish("the agent could not be launched");
        }
    };
    book.pass("launch_contract");
    let mut agent = match Observed::spawn(&launch, &plan) {
        Ok(agent) => agent,
        Err(error) => {
            book.fail("spawns", format!("{}: {error}", error.code()));
            return book.finish("the agent could not be started");
        }
    };
    book.pass("spawns");
    let limits = plan.limits.clone();
    let [first, second, resumed_prompt] = &plan.prompts;

    agent.quiet_window(&mut book, limits.quiet_window).await;
    let turn_1 = agent.turn(&mut book, Stage::Turn(1), first, &limits).await;
    book.first_turn_done();
    let session_id = agent.machine.session_id().cloned();
    let turn_1_completed = turn_1
        .as_ref()
        .is_some_and(|o| o.status.code() != Some(codes::AGENT_EXITED_MID_TURN));
    if let Some(code) = agent.stop_requested {
        // Like the host: the runtime is terminated, no further turn is accepted.
        let why = format!("the runtime was terminated in turn 1 ({code})");
        book.skip("second_turn_same_process", &why);
        book.skip("exits_on_stdin_eof", &why);
        agent.stop().await;
    } else if !turn_1_completed {
        book.skip("second_turn_same_process", "turn 1 did not complete");
    } else if let Some(status) = agent.exited_after_turn(limits.exit_grace).await {
        book.fail(
            "second_turn_same_process",
            format!("the process exited after turn 1 ({status})"),
        );
    } else {
        match agent.turn(&mut book, Stage::Turn(2), second, &limits).await {
            Some(outcome) if outcome.status.code() != Some(codes::AGENT_EXITED_MID_TURN) => {
                book.pass("second_turn_same_process");
            }
            Some(outcome) => book.fail(
                "second_turn_same_process",
                format!(
                    "turn 2: the process exited before answering ({})",
                    status_detail(&outcome)
                ),
            ),
            None => book.fail(
                "second_turn_same_process",
                "turn 2: no terminal event (see one_terminal_per_turn)".to_owned(),
            ),
        }
        if let Some(code) = agent.stop_requested {
            book.skip(
                "exits_on_stdin_eof",
                &format!("the runtime was terminated in turn 2 ({code})"),
            );
            agent.stop().await;
        }
    }
    agent.close(&mut book, &limits).await;
    // Make sure nothing of the first process is left (idempotent when it already exited).
    agent.stop().await;

    book.observations_complete();
    let Some(session_id) = session_id else {
        book.skip("resume_accepted", "turn 1 reported no valid session id");
        return book.finish("an earlier step failed");
    };
    let resume_plan = match plan
        .launch
        .plan(plan.model.as_deref(), Some(&session_id), None)
    {
        Ok(resume_plan) => resume_plan,
        Err(error) => {
            book.fail(
                "resume_accepted",
                format!("the resume launch plan failed: {}", error.code()),
            );
            return book.finish("an earlier step failed");
        }
    };
    book.start_resumed_process();
    let mut resumed = match Observed::spawn(&resume_plan, &plan) {
        Ok(resumed) => resumed,
        Err(error) => {
            book.fail(
                "resume_accepted",
                format!("the resumed process did not start: {}", error.code()),
            );
            return book.finish("an earlier step failed");
        }
    };
    resumed.quiet_window(&mut book, limits.quiet_window).await;
    match resumed
        .turn(&mut book, Stage::ResumedTurn, resumed_prompt, &limits)
        .await
    {
        Some(outcome) if outcome.status.is_success() => {
            if resumed.machine.session_id().is_some() {
                book.pass("resume_accepted");
            } else {
                book.fail(
                    "resume_accepted",
                    "resumed turn: no valid session_id was reported".to_owned(),
                );
            }
        }
        Some(outcome) => book.fail(
            "resume_accepted",
            format!(
                "resumed turn (--resume {}): {} ({})",
                session_id.as_str(),
                outcome.status.code().unwrap_or("failed"),
                status_detail(&outcome)
            ),
        ),
        None => book.fail(
            "resume_accepted",
            format!(
                "resumed turn (--resume {}): no terminal event",
                session_id.as_str()
            ),
        ),
    }
    if let Some(code) = resumed.stop_requested {
        book.skip(
            "exits_on_stdin_eof",
            &format!("the runtime was terminated in the resumed turn ({code})"),
        );
        resumed.stop().await;
    }
    resumed.close(&mut book, &limits).await;
    resumed.stop().await;
    book.finish("an earlier step failed")
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn json(line: &str) -> Frame {
        Frame::Json(Bytes::copy_from_slice(line.as_bytes()))
    }

    fn verdict(book: RuleBook, id: &str) -> Outcome {
        book.finish("unjudged")
            .get(id)
            .map(|r| r.outcome.clone())
            .expect("rule exists")
    }

    /// Feeds `lines` at `stage` and returns the verdict of rule `id`.
    fn check(protocol: Protocol, stage: Stage, lines: &[Frame], id: &str, expect: Option<&str>) {
        let mut book = RuleBook::new(protocol, 200);
        for line in lines {
            book.observe_frame(stage, line);
        }
        if stage == Stage::Turn(1) {
            book.first_turn_done();
        }
        book.pass(id);
        match (verdict(book, id), expect) {
            (Outcome::Pass, None) => {}
            (Outcome::Fail { evidence }, Some(want)) => {
                assert!(evidence.contains(want), "{id}: {evidence:?} lacks {want:?}")
            }
            (got, want) => panic!("{id}: got {got:?}, want {want:?}"),
        }
    }

    const INIT: &str = r#"{"type":"system","subtype":"init","session_id":"abc"}"#;
    const RESULT: &str = r#"{"type":"result","subtype":"success","is_error":false,"session_id":"abc","usage":{"input_tokens":1,"output_tokens":1}}"#;

    #[test]
    fn rule_ids_are_unique_snake_case() {
        for rule in RULES {
            assert_eq!(RULES.iter().filter(|r| r.id == rule.id).count(), 1);
            assert!(rule.id.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'));
        }
    }

    #[test]
    fn output_before_input_fails_with_the_line() {
        let p = Protocol::AwpJsonl;
        check(
            p,
            Stage::BeforeInput,
            &[json(INIT)],
            "no_output_before_input",
            Some("before any input, stdout line 1: {\"type\":\"system\""),
        );
        check(
            p,
            Stage::Turn(1),
            &[json(INIT)],
            "no_output_before_input",
            None,
        );
    }

    #[test]
    fn stdout_must_be_json_objects_with_a_type() {
        let p = Protocol::AwpJsonl;
        let banner = Frame::Invalid(agentwire_jsonl::InvalidLine {
            preview: "Welcome\u{1b}[0m banner".into(),
            len: 17,
            unterminated: false,
            error: "expected value".into(),
        });
        check(
            p,
            Stage::Turn(1),
            &[json(INIT), banner],
            "stdout_only_json",
            Some("turn 1, stdout line 2: Welcome\\u{1b}[0m banner (not a JSON line)"),
        );
        check(
            p,
            Stage::Turn(2),
            &[json("[1,2]")],
            "stdout_only_json",
            Some("(not an object with a string type)"),
        );
        check(
            p,
            Stage::Turn(2),
            &[json(r#"{"type":"brand_new_event"}"#)],
            "stdout_only_json",
            None,
        );
        check(
            p,
            Stage::Turn(2),
            &[Frame::TooLong {
                bytes_discarded: 5_000_000,
            }],
            "line_within_limit",
            Some("a line of at least 5000000 bytes"),
        );
    }

    #[test]
    fn session_ids_are_validated_and_required_in_turn_one() {
        let p = Protocol::StreamJson;
        let bad = r#"{"type":"system","subtype":"init","session_id":"bad id/with spaces!"}"#;
        check(
            p,
            Stage::Turn(1),
            &[json(bad)],
            "valid_session_id",
            Some("bad id/with spaces!"),
        );
        check(
            p,
            Stage::Turn(1),
            &[json(
                r#"{"type":"result","subtype":"success","session_id":7}"#,
            )],
            "valid_session_id",
            Some("\"session_id\":7"),
        );
        check(
            p,
            Stage::Turn(1),
            &[json(INIT), json(RESULT)],
            "valid_session_id",
            None,
        );
        check(
            p,
            Stage::Turn(1),
            &[json(r#"{"type":"result","subtype":"success"}"#)],
            "session_id_reported",
            Some("no system/init or result line"),
        );
        check(
            p,
            Stage::Turn(1),
            &[json(RESULT)],
            "session_id_reported",
            None,
        );
        check(
            p,
            Stage::Turn(1),
            &[json(RESULT)],
            "init_first",
            Some("turn 1, stdout line 1"),
        );
        check(
            p,
            Stage::Turn(1),
            &[json(INIT), json(RESULT)],
            "init_first",
            None,
        );
    }

    #[test]
    fn rules_that_could_not_be_exercised_are_skipped_not_passed() {
        // No session id anywhere: valid_session_id is skipped (session_id_reported fails).
        let mut book = RuleBook::new(Protocol::AwpJsonl, 80);
        book.observe_frame(
            Stage::Turn(1),
            &json(r#"{"type":"result","subtype":"success"}"#),
        );
        book.first_turn_done();
        book.observations_complete();
        assert_eq!(
            verdict(book, "valid_session_id"),
            Outcome::Skipped {
                why: "no session id was reported".into()
            }
        );
        // One id seen: exercised and held.
        let mut book = RuleBook::new(Protocol::AwpJsonl, 80);
        book.observe_frame(Stage::Turn(1), &json(RESULT));
        book.observations_complete();
        assert_eq!(verdict(book, "valid_session_id"), Outcome::Pass);
        // No stdout at all: the per-line rules are skipped.
        let mut book = RuleBook::new(Protocol::AwpJsonl, 80);
        book.observations_complete();
        let report = book.finish("x");
        for id in ["stdout_only_json", "line_within_limit"] {
            assert_eq!(
                report.get(id).map(|r| r.outcome.clone()),
                Some(Outcome::Skipped {
                    why: "the agent wrote no stdout line".into()
                }),
                "{id}"
            );
        }
    }

    #[test]
    fn turn_succeeds_is_skipped_when_a_later_turn_died() {
        let success = TurnOutcome::new(crate::TurnStatus::Success);
        let died = TurnOutcome::new(crate::TurnStatus::Failed {
            code: codes::AGENT_EXITED_MID_TURN.into(),
            detail: Some("exit code 3".into()),
        });
        let mut book = RuleBook::new(Protocol::AwpJsonl, 80);
        book.turn_completed(Stage::Turn(1), &success, None);
        book.turn_completed(Stage::Turn(2), &died, None);
        book.turn_completed(Stage::ResumedTurn, &success, None);
        assert_eq!(
            verdict(book, "turn_succeeds"),
            Outcome::Skipped {
                why: "turn 2 did not end (see one_terminal_per_turn)".into()
            }
        );
        // An unanswered turn counts the same; a failure already seen stays a failure.
        let mut book = RuleBook::new(Protocol::AwpJsonl, 80);
        book.turn_completed(Stage::Turn(1), &success, None);
        book.turn_unanswered(Stage::Turn(2), Duration::from_secs(1), None);
        assert!(matches!(
            verdict(book, "turn_succeeds"),
            Outcome::Skipped { .. }
        ));
        let mut book = RuleBook::new(Protocol::AwpJsonl, 80);
        book.fail("turn_succeeds", "turn 1: failed".into());
        book.turn_unanswered(Stage::Turn(2), Duration::from_secs(1), None);
        assert!(matches!(
            verdict(book, "turn_succeeds"),
            Outcome::Fail { .. }
        ));
        // Every turn ended: the pass stands.
        let mut book = RuleBook::new(Protocol::AwpJsonl, 80);
        book.turn_completed(Stage::Turn(1), &success, None);
        book.turn_completed(Stage::Turn(2), &success, None);
        assert_eq!(verdict(book, "turn_succeeds"), Outcome::Pass);
    }

    #[test]
    fn a_terminal_after_the_last_turn_is_an_extra_terminal() {
        check(
            Protocol::AwpJsonl,
            Stage::AfterLastTurn,
            &[json(RESULT)],
            "one_terminal_per_turn",
            Some("after the turn had completed"),
        );
        check(
            Protocol::AwpJsonl,
            Stage::AfterLastTurn,
            &[json(r#"{"type":"message_stop"}"#)],
            "one_terminal_per_turn",
            Some("message_stop"),
        );
        // In stream-json only `result` is terminal; wrapped message_stop never is.
        check(
            Protocol::StreamJson,
            Stage::AfterLastTurn,
            &[json(r#"{"type":"message_stop"}"#)],
            "one_terminal_per_turn",
            None,
        );
        check(
            Protocol::AwpJsonl,
            Stage::AfterLastTurn,
            &[json(
                r#"{"type":"stream_event","event":{"type":"message_stop"}}"#,
            )],
            "one_terminal_per_turn",
            None,
        );
    }

    #[test]
    fn evidence_is_bounded_and_escaped() {
        let mut book = RuleBook::new(Protocol::AwpJsonl, 10);
        let long = format!(
            "{{\"type\":\"result\",\"session_id\":\"{}\"}}",
            "é".repeat(300)
        );
        book.observe_frame(Stage::Turn(1), &json(&long));
        let Outcome::Fail { evidence } = verdict(book, "valid_session_id") else {
            panic!("invalid id accepted");
        };
        assert!(
            evidence.ends_with(&format!("… ({} bytes)", long.len())),
            "{evidence}"
        );
        assert!(evidence.len() < 100, "{evidence}");
        assert_eq!(escape("a\nb\u{2028}", 100), "a\\nb\\u{2028}");
        assert_eq!(escape("ééé", 3), "é");
    }

    #[test]
    fn turn_outcomes_map_to_rules() {
        let outcome = |status: crate::TurnStatus, usage: bool| {
            let mut outcome = TurnOutcome::new(status);
            if usage {
                outcome.usage = Some(crate::Usage {
                    input_tokens: 1,
                    output_tokens: 1,
                    cache_read_input_tokens: None,
                    cache_creation_input_tokens: None,
                });
            }
            outcome
        };
        let mut book = RuleBook::new(Protocol::AwpJsonl, 80);
        book.turn_completed(
            Stage::Turn(1),
            &outcome(crate::TurnStatus::Success, false),
            Some(RESULT.as_bytes()),
        );
        let report = book.finish("x");
        assert_eq!(report.failed_ids(), vec!["terminal_has_usage"]);
        assert_eq!(
            report.get("one_terminal_per_turn").map(|r| &r.outcome),
            Some(&Outcome::Pass)
        );

        let mut book = RuleBook::new(Protocol::AwpJsonl, 80);
        book.turn_completed(
            Stage::Turn(1),
            &outcome(
                crate::TurnStatus::Failed {
                    code: codes::AGENT_EXITED_MID_TURN.into(),
                    detail: Some("exit code 3".into()),
                },
                false,
            ),
            Some(br#"{"type":"content_block_delta"}"#),
        );
        let report = book.finish("x");
        let Some(Outcome::Fail { evidence }) = report
            .get("one_terminal_per_turn")
            .map(|r| r.outcome.clone())
        else {
            panic!("mid-turn exit passed");
        };
        assert!(
            evidence.contains("exited before a terminal event (exit code 3)"),
            "{evidence}"
        );
        assert!(!report.passed());

        let mut book = RuleBook::new(Protocol::AwpJsonl, 80);
        book.turn_completed(
            Stage::Turn(2),
            &outcome(
                crate::TurnStatus::Failed {
                    code: codes::AGENT_ERROR.into(),
                    detail: Some("fixture_failure".into()),
                },
                true,
            ),
            None,
        );
        assert_eq!(book.finish("x").failed_ids(), vec!["turn_succeeds"]);
    }

    #[test]
    fn report_passes_only_without_must_failures_and_renders_every_rule() {
        let mut book = RuleBook::new(Protocol::AwpJsonl, 80);
        for rule in RULES {
            book.pass(rule.id);
        }
        book.fail("init_first", "turn 1, stdout line 1: x".into());
        let report = book.finish("x");
        assert!(report.passed());
        let text = report.render_text();
        assert!(text.contains("WARN  init_first"), "{text}");
        assert!(
            text.contains(
                "conformant: required rules 12 passed, 0 failed, 0 skipped; optional rules 1 passed, 1 failed, 0 skipped"
            ),
            "{text}"
        );
        assert_eq!(
            text.lines().filter(|l| l.starts_with("PASS")).count(),
            RULES.len() - 1
        );

        let report = RuleBook::new(Protocol::AwpJsonl, 80).finish("never ran");
        assert!(!report.passed());
        assert!(report.render_text().contains("SKIP  launch_contract"));
        let json = serde_json::to_value(&report.rules[0]).expect("json");
        assert_eq!(json["outcome"], "skipped");
        assert_eq!(json["why"], "never ran");
    }
}
