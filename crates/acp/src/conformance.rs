//! ACP conformance checks: run a short scripted session against any ACP agent command and judge each rule.
//!
//! This is the engine behind `awp-host check --protocol acp -- CMD ARGS…`. The report has the shape of the AWP
//! check (`agentwire_awp::conformance`): one [`RuleResult`] per [`Rule`], pass / fail with bounded evidence / skipped.
//!
//! # The script
//!
//! 1. Spawn the command (agentwire-process: no shell, own process group, allowlisted environment); every stdout
//!    line is inspected on its way to the client.
//! 2. `initialize` (protocol version 1), `session/new`, one prompt turn ([`CheckPlan::prompt`]).
//! 3. A second turn ([`CheckPlan::cancel_prompt`]): at its first update the check sends `session/cancel` and
//!    watches the answer, and any permission request the agent still asks after it (answered `cancelled`).
//! 4. An unknown method (`agentwire/conformance_probe`), waited for at most [`CheckLimits::probe_timeout`] (then
//!    `$/cancel_request` is sent for it).
//! 5. What the agent advertised, each on the first session: `session/list`, `session/set_config_option` (its first
//!    select option set to its current value: no change), `session/resume`, `session/load`, `session/close`,
//!    `session/delete` (of the check's own session), and `logout` only when [`CheckPlan::logout`] says so (it would
//!    end the user's real login). Methods not advertised are skipped.
//! 6. stdin EOF and [`CheckLimits::exit_grace`] for the exit (then the stop ladder kills the process group).
//!
//! The cancel rule is judged only when the agent demonstrably kept working after the cancel (it sent an update
//! after it): a turn that ended before the cancel reached the agent is `skipped`, not failed — a black-box check
//! cannot tell otherwise. Replays are judged on the wire, in the order the agent wrote: the pipe inspector watches the
//! client's `session/resume` and `session/load` requests and counts the `user_message_chunk`s of their session
//! before and after each answer (a live turn never sends user messages; a replay does).
//!
//! Every rule names the spec section it checks ([`Rule::spec`]); the interop faults seen in public bug reports each
//! have one: `end_turn` or an error answered after `session/cancel` (`cancel_yields_cancelled`; `end_turn` fails only
//! when the agent answered [`CANCEL_PROBE_METHOD`], sent after the cancel, before the turn, else the turn and the
//! cancel may have crossed in flight and the rule is skipped), permission requests
//! after the cancel (`no_permission_request_after_cancel`), updates replayed by a resume
//! (`session_resume_does_not_replay`), a load answered before its replay (`session_load_replays_before_answer`), an
//! unknown request never answered (`unknown_request_answered`), a string `protocolVersion`
//! (`initialize_answers_integer_version`). The check advertises no client capability, so any `fs/*`, `terminal/*`
//! or `elicitation/create` request fails `client_capabilities_respected`. The verdicts are kept by [`RuleBook`] (pure); [`run_check`] is the IO
//! shell.

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentwire_jsonl::{Frame, JsonlDecoder, Limits};
use agentwire_jsonrpc::{CallError, ErrorCode};
use agentwire_process::{Command, StdoutItem, StopPlan};
use bytes::BytesMut;
use serde_json::Value;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::client::{Client, ClientBuilder, Session};
use crate::handlers::{PermissionHandler, RejectPermissions};
use crate::schema::{
    ListSessionsRequest, PromptRequest, RequestPermissionOutcome, RequestPermissionRequest,
    SessionConfigKind, SessionConfigOptionValue, StopReason,
};
use crate::update::Update;

pub use agentwire_conformance::{
    CheckReport, Counts, Outcome, Rule, RuleResult, Severity, SkipPolicy, Summary,
};

const fn must(id: &'static str, description: &'static str, spec: &'static str) -> Rule {
    Rule::must(id, description).with_spec(spec)
}

const fn should(id: &'static str, description: &'static str, spec: &'static str) -> Rule {
    Rule::should(id, description).with_spec(spec)
}

const TRANSPORT: &str = "Transports § stdio <https://agentclientprotocol.com/protocol/transports>";
const CANCELLATION: &str = "Prompt Turn § Cancellation <https://agentclientprotocol.com/protocol/prompt-turn#cancellation>";

/// Every rule, in report order.
pub const RULES: &[Rule] = &[
    must("spawns", "the agent process starts", TRANSPORT),
    must(
        "initialize_answers_integer_version",
        "initialize is answered with protocolVersion 1 (an integer, not a string like \"1\" or \"1.0\") and valid capabilities",
        "Initialization § Protocol version <https://agentclientprotocol.com/protocol/initialization#protocol-version>",
    ),
    must(
        "session_new_returns_id",
        "session/new {cwd, mcpServers: []} is answered with a string sessionId",
        "Session Setup § Creating a Session <https://agentclientprotocol.com/protocol/session-setup#creating-a-session>",
    ),
    must(
        "prompt_returns_stop_reason",
        "session/prompt is answered with a valid stopReason",
        "Prompt Turn § Stop Reasons <https://agentclientprotocol.com/protocol/prompt-turn#stop-reasons>",
    ),
    must(
        "updates_reference_session",
        "every session/update is {sessionId, update} naming the session in use",
        "Prompt Turn § Agent Reports Output <https://agentclientprotocol.com/protocol/prompt-turn#3-agent-reports-output>",
    ),
    must(
        "cancel_yields_cancelled",
        "a turn still running when session/cancel arrives is answered with stopReason cancelled (not end_turn, not an error)",
        CANCELLATION,
    ),
    should(
        "no_permission_request_after_cancel",
        "after session/cancel the agent stops its tool calls: no new session/request_permission for the cancelled turn",
        CANCELLATION,
    ),
    must(
        "stdout_only_jsonrpc",
        "every stdout line is one JSON-RPC 2.0 message",
        TRANSPORT,
    ),
    must(
        "exits_on_stdin_eof",
        "the process exits within the grace period after stdin is closed",
        TRANSPORT,
    ),
    should(
        "updates_parse",
        "every session/update kind and shape is one of the v1 schema's",
        "Schema `$defs/SessionUpdate` <https://agentclientprotocol.com/protocol/schema#sessionupdate>",
    ),
    must(
        "client_capabilities_respected",
        "the agent calls fs/*, terminal/* and elicitation/create only when the client advertised them (this check advertises none)",
        "Initialization § Client Capabilities <https://agentclientprotocol.com/protocol/initialization#client-capabilities>",
    ),
    must(
        "unknown_request_answered",
        "a request for an unknown method is answered (a peer left waiting hangs)",
        "Overview § Communication Model (JSON-RPC 2.0: every request gets a response) <https://agentclientprotocol.com/protocol/overview#communication-model>",
    ),
    should(
        "cancel_request_answered",
        "a request cancelled with $/cancel_request is still answered (a result or error -32800)",
        "Cancellation <https://agentclientprotocol.com/protocol/cancellation>",
    ),
    should(
        "unknown_method_not_found",
        "an unknown method is answered with error -32601",
        "Extensibility § Custom Requests <https://agentclientprotocol.com/protocol/extensibility#custom-requests>",
    ),
    must(
        "session_list_answers",
        "with sessionCapabilities.list, session/list is answered with a valid sessions page",
        "Session List <https://agentclientprotocol.com/protocol/session-list>",
    ),
    must(
        "set_config_option_answers",
        "with configOptions, session/set_config_option is answered with every option's state",
        "Session Config Options <https://agentclientprotocol.com/protocol/session-config-options>",
    ),
    must(
        "session_resume_answers",
        "with sessionCapabilities.resume, session/resume of an existing session is answered",
        "Session Setup § Resuming Sessions <https://agentclientprotocol.com/protocol/session-setup#resuming-sessions>",
    ),
    must(
        "session_resume_does_not_replay",
        "session/resume does not replay the conversation (no user_message_chunk for it)",
        "Session Setup § Resuming Sessions <https://agentclientprotocol.com/protocol/session-setup#resuming-sessions>",
    ),
    must(
        "session_load_replays_before_answer",
        "with loadSession, session/load replays the whole conversation before its answer, none after",
        "Session Setup § Loading Sessions <https://agentclientprotocol.com/protocol/session-setup#loading-sessions>",
    ),
    must(
        "session_close_answers",
        "with sessionCapabilities.close, session/close is answered",
        "Session Setup § Closing Active Sessions <https://agentclientprotocol.com/protocol/session-setup#closing-active-sessions>",
    ),
    must(
        "session_delete_answers",
        "with sessionCapabilities.delete, session/delete is answered",
        "Session Delete <https://agentclientprotocol.com/protocol/v1/session-delete>",
    ),
    must(
        "logout_answers",
        "with auth.logout, logout is answered (exercised only on request: it ends the user's login)",
        "Authentication § Logout <https://agentclientprotocol.com/protocol/initialization#authentication>",
    ),
];

/// Bounds and timeouts of a check.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct CheckLimits {
    /// Longest wait for any one answer or update. Default 60 s; on overflow the rule waiting fails and the process
    /// is stopped.
    pub step_timeout: Duration,
    /// How long the process gets to exit after stdin EOF. Default 5 s; on overflow `exits_on_stdin_eof` fails and
    /// the process group is stopped (SIGTERM, SIGKILL after 3 s).
    pub exit_grace: Duration,
    /// Longest stdout line, in bytes. Default 64 MiB (`agentwire_jsonrpc::DEFAULT_MAX_LINE_BYTES`); a longer line
    /// fails `stdout_only_jsonrpc`.
    pub max_line_bytes: usize,
    /// Most bytes of agent output quoted in one piece of evidence. Default 240; longer output is cut at a char
    /// boundary and marked with its full length.
    pub max_evidence_bytes: usize,
    /// How long the unknown-method probe waits for its answer. Default 5 s; on overflow
    /// `unknown_request_answered` fails and `$/cancel_request` is sent for the probe.
    pub probe_timeout: Duration,
}

impl Default for CheckLimits {
    fn default() -> Self {
        CheckLimits {
            step_timeout: Duration::from_secs(60),
            exit_grace: Duration::from_secs(5),
            max_line_bytes: agentwire_jsonrpc::DEFAULT_MAX_LINE_BYTES,
            max_evidence_bytes: 240,
            probe_timeout: Duration::from_secs(5),
        }
    }
}

/// What to check.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct CheckPlan {
    /// The program.
    pub program: OsString,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// Extra environment entries (on top of the OS allowlist).
    pub env: Vec<(OsString, OsString)>,
    /// The session's `cwd` (absolute) and the process's working directory. Default: the current directory.
    pub cwd: PathBuf,
    /// The first turn's text.
    pub prompt: String,
    /// The text of the turn that is cancelled.
    pub cancel_prompt: String,
    /// Bounds and timeouts.
    pub limits: CheckLimits,
    /// Whether to call `logout` when the agent advertises it. Default false: on a real agent it ends the user's
    /// login; `logout_answers` is then skipped.
    pub logout: bool,
}

impl CheckPlan {
    /// A plan for `program args…` with the default prompts and limits.
    pub fn new(
        program: impl Into<OsString>,
        args: impl IntoIterator<Item = impl Into<OsString>>,
    ) -> CheckPlan {
        CheckPlan {
            program: program.into(),
            args: args.into_iter().map(Into::into).collect(),
            env: Vec::new(),
            cwd: std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/")),
            prompt: "This is an ACP conformance check. Reply with one short sentence.".to_owned(),
            cancel_prompt: "Second turn of the ACP conformance check: this turn will be cancelled."
                .to_owned(),
            limits: CheckLimits::default(),
            logout: false,
        }
    }
}

/// Quotes `text` for evidence: control characters escaped, at most `max` bytes, cut at a char boundary.
pub fn quote(text: &str, max: usize) -> String {
    let escaped: String = text.chars().flat_map(char::escape_debug).collect();
    if escaped.len() <= max {
        return escaped;
    }
    let mut end = max;
    while !escaped.is_char_boundary(end) {
        end -= 1;
    }
    format!(
        "{}… ({} bytes)",
        escaped.get(..end).unwrap_or_default(),
        text.len()
    )
}

/// The verdicts collected so far. Pure: observations in, verdicts out; the first verdict of a rule wins (a pass
/// can be overridden by a later failure).
#[derive(Debug)]
pub struct RuleBook {
    outcomes: Vec<Option<Outcome>>,
    max_evidence_bytes: usize,
    /// `session/update` notifications observed (the update rules are exercised only when there was one).
    updates_seen: u64,
    /// Stdout lines observed (`stdout_only_jsonrpc` is exercised only when there was one).
    lines_seen: u64,
    /// The line limit in force (bytes), named in the evidence of a line over it.
    max_line_bytes: Option<usize>,
}

impl RuleBook {
    /// An empty book.
    pub fn new(max_evidence_bytes: usize) -> RuleBook {
        RuleBook {
            outcomes: vec![None; RULES.len()],
            max_evidence_bytes,
            updates_seen: 0,
            lines_seen: 0,
            max_line_bytes: None,
        }
    }

    /// The same book, naming `limit` (the agent's `max_line_bytes`) when a line is over it.
    pub fn with_max_line_bytes(mut self, limit: usize) -> RuleBook {
        self.max_line_bytes = Some(limit);
        self
    }

    fn slot(&mut self, id: &str) -> Option<&mut Option<Outcome>> {
        let index = RULES.iter().position(|rule| rule.id == id)?;
        self.outcomes.get_mut(index)
    }

    /// Records a failure (replaces a pass or a skip; the first failure is kept).
    pub fn fail(&mut self, id: &str, evidence: String) {
        if let Some(slot) = self.slot(id)
            && !matches!(slot, Some(Outcome::Fail { .. }))
        {
            *slot = Some(Outcome::Fail { evidence });
        }
    }

    /// Records a pass unless a verdict exists.
    pub fn pass(&mut self, id: &str) {
        if let Some(slot) = self.slot(id)
            && slot.is_none()
        {
            *slot = Some(Outcome::Pass);
        }
    }

    /// Records a skip unless a verdict exists.
    pub fn skip(&mut self, id: &str, why: &str) {
        if let Some(slot) = self.slot(id)
            && slot.is_none()
        {
            *slot = Some(Outcome::Skipped {
                why: why.to_owned(),
            });
        }
    }

    /// Judges one stdout line (`Frame` from agentwire-jsonl): `stdout_only_jsonrpc` fails on the first line that
    /// is not a JSON-RPC 2.0 message.
    pub fn observe_line(&mut self, line_number: u64, frame: &Frame) {
        self.lines_seen += 1;
        let problem = match frame {
            Frame::Json(bytes) => match serde_json::from_slice::<Value>(bytes) {
                Ok(Value::Object(object)) if object.get("jsonrpc") == Some(&Value::from("2.0")) => {
                    None
                }
                _ => Some(format!(
                    "{} (not a JSON-RPC 2.0 object)",
                    quote(&String::from_utf8_lossy(bytes), self.max_evidence_bytes)
                )),
            },
            Frame::Invalid(line) => Some(format!(
                "{} (not JSON)",
                quote(&line.preview, self.max_evidence_bytes)
            )),
            Frame::TooLong { bytes_discarded } => Some(match self.max_line_bytes {
                Some(limit) => format!(
                    "a line of {bytes_discarded} bytes, over the {limit}-byte limit (the agent's \
                     max_line_bytes = {limit})"
                ),
                None => format!("a line of {bytes_discarded} bytes, over the line limit"),
            }),
            _ => Some("an unreadable line".to_owned()),
        };
        if let Some(problem) = problem {
            self.fail(
                "stdout_only_jsonrpc",
                format!("stdout line {line_number}: {problem}"),
            );
        }
    }

    /// Judges one message the agent wrote, parsed: a request for a client method the check did not advertise
    /// (`fs/*`, `terminal/*`, `elicitation/create`) fails `client_capabilities_respected`.
    pub fn observe_agent_message(&mut self, message: &Value) {
        let Some(method) = message.get("method").and_then(Value::as_str) else {
            return;
        };
        let unadvertised = method.starts_with("fs/")
            || method.starts_with("terminal/")
            || method == "elicitation/create";
        if unadvertised && message.get("id").is_some() {
            self.fail(
                "client_capabilities_respected",
                format!("the agent called {method} though the client did not advertise it"),
            );
        }
    }

    /// Judges one update of `session`.
    pub fn observe_update(&mut self, update: &Update) {
        self.updates_seen += 1;
        if let Update::Raw { kind, error, .. } = update {
            let kind = kind
                .clone()
                .unwrap_or_else(|| "(no sessionUpdate)".to_owned());
            self.fail(
                "updates_parse",
                quote(&format!("{kind}: {error}"), self.max_evidence_bytes),
            );
        }
    }

    /// The report: rules without a verdict are skipped with `why`.
    pub fn finish(self, why: &str) -> CheckReport {
        let rules = RULES
            .iter()
            .zip(self.outcomes)
            .map(|(rule, outcome)| {
                let outcome = outcome.unwrap_or_else(|| Outcome::Skipped {
                    why: why.to_owned(),
                });
                RuleResult::new(rule, outcome)
            })
            .collect();
        CheckReport::new(rules, SkipPolicy::RequiredSkipAllowed)
    }
}

/// Replays around `session/resume` and `session/load`, judged from the wire in the order each side wrote (pure:
/// messages in, verdicts out). A replay is recognised by `user_message_chunk` updates of the watched session: a live
/// turn never sends the user's own message back, a history replay does.
///
/// It also follows the unknown-method probe: when the check cancels it (`$/cancel_request`), whether an answer
/// still comes is judged at the end (`cancel_request_answered`).
#[derive(Debug, Default)]
pub struct ReplayWatch {
    resume: Option<Watched>,
    load: Option<Watched>,
    /// The probe's id (JSON text) and whether it was answered.
    probe: Option<(String, bool)>,
    probe_cancelled: bool,
}

#[derive(Debug)]
struct Watched {
    /// The request id as JSON text.
    id: String,
    session: String,
    answered: bool,
    before: u64,
    after: u64,
}

impl Watched {
    fn new(message: &Value) -> Option<Watched> {
        Some(Watched {
            id: message.get("id")?.to_string(),
            session: message.pointer("/params/sessionId")?.as_str()?.to_owned(),
            answered: false,
            before: 0,
            after: 0,
        })
    }
}

impl ReplayWatch {
    /// A message the client wrote: `session/resume` and `session/load` requests start a watch on their session; the
    /// probe request (`agentwire/conformance_probe`) is followed; a `$/cancel_request` for it is noted.
    pub fn client_message(&mut self, message: &Value) {
        match message.get("method").and_then(Value::as_str) {
            Some("session/resume") => self.resume = Watched::new(message),
            Some("session/load") => self.load = Watched::new(message),
            Some(PROBE) => {
                self.probe = message.get("id").map(|id| (id.to_string(), false));
            }
            Some("$/cancel_request") => {
                let id = message.pointer("/params/requestId").map(Value::to_string);
                if let (Some(id), Some((probe, _))) = (id, &self.probe)
                    && id == *probe
                {
                    self.probe_cancelled = true;
                }
            }
            _ => {}
        }
    }

    /// A message the agent wrote: answers to watched requests, and user message chunks of watched sessions (the
    /// newest watch of the session counts them).
    pub fn agent_message(&mut self, message: &Value) {
        match message.get("method").and_then(Value::as_str) {
            None => {
                let Some(id) = message.get("id").map(Value::to_string) else {
                    return;
                };
                for watched in [&mut self.resume, &mut self.load].into_iter().flatten() {
                    if watched.id == id {
                        watched.answered = true;
                    }
                }
                if let Some((probe, answered)) = &mut self.probe
                    && *probe == id
                {
                    *answered = true;
                }
            }
            Some("session/update") => {
                if message.pointer("/params/update/sessionUpdate")
                    != Some(&Value::from("user_message_chunk"))
                {
                    return;
                }
                let Some(session) = message.pointer("/params/sessionId").and_then(Value::as_str)
                else {
                    return;
                };
                let target = [&mut self.load, &mut self.resume]
                    .into_iter()
                    .flatten()
                    .find(|watched| watched.session == session);
                if let Some(watched) = target {
                    if watched.answered {
                        watched.after += 1;
                    } else {
                        watched.before += 1;
                    }
                }
            }
            Some(_) => {}
        }
    }

    /// Records `session_resume_does_not_replay` and `session_load_replays_before_answer` for the watches whose
    /// request was answered, and `cancel_request_answered` when the probe was cancelled.
    pub fn judge(&self, book: &mut RuleBook) {
        match (&self.probe, self.probe_cancelled) {
            (Some((_, true)), true) => book.pass("cancel_request_answered"),
            (Some((id, false)), true) => book.fail(
                "cancel_request_answered",
                format!("the probe (id {id}) was never answered, even after $/cancel_request"),
            ),
            _ => book.skip(
                "cancel_request_answered",
                "not exercised: the probe was answered before any $/cancel_request",
            ),
        }
        if let Some(resume) = &self.resume
            && resume.answered
        {
            if resume.before + resume.after > 0 {
                book.fail(
                    "session_resume_does_not_replay",
                    format!(
                        "session/resume of {} replayed {} user_message_chunk updates ({} before its answer, {} after)",
                        resume.session,
                        resume.before + resume.after,
                        resume.before,
                        resume.after
                    ),
                );
            } else {
                book.pass("session_resume_does_not_replay");
            }
        }
        if let Some(load) = &self.load
            && load.answered
        {
            if load.after > 0 {
                book.fail(
                    "session_load_replays_before_answer",
                    format!(
                        "session/load of {} was answered before its replay: {} user_message_chunk updates after the answer ({} before)",
                        load.session, load.after, load.before
                    ),
                );
            } else {
                book.pass("session_load_replays_before_answer");
            }
        }
    }
}

type SharedWatch = Arc<Mutex<ReplayWatch>>;

/// Longest agent line parsed a second time for [`RuleBook::observe_agent_message`] and [`ReplayWatch`]: 1 MiB.
/// Longer lines are judged only by [`RuleBook::observe_line`] (requests, answers and replayed user messages are far
/// smaller; a multi-megabyte line is a tool output).
pub const MAX_INSPECTED_BYTES: usize = 1 << 20;

fn watch(shared: &SharedWatch) -> std::sync::MutexGuard<'_, ReplayWatch> {
    shared
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The check's permission answers: rejected (fail closed) before the cancel; after it, `cancelled` as the spec
/// requires of a client, and counted when the request is for a tool call not announced before the cancel (the agent
/// started new work after it; a request for an announced call may have crossed the cancel on the wire).
#[derive(Clone, Default)]
struct CheckPermissions {
    cancel_sent: Arc<AtomicBool>,
    announced: Arc<Mutex<Vec<String>>>,
    after_cancel: Arc<AtomicU64>,
    evidence: Arc<Mutex<Option<String>>>,
}

impl PermissionHandler for CheckPermissions {
    async fn request_permission(
        &self,
        request: RequestPermissionRequest,
    ) -> RequestPermissionOutcome {
        if !self.cancel_sent.load(Ordering::SeqCst) {
            return RejectPermissions.request_permission(request).await;
        }
        let id = request.tool_call.tool_call_id.to_string();
        let announced = self
            .announced
            .lock()
            .map(|announced| announced.contains(&id))
            .unwrap_or(false);
        if !announced {
            self.after_cancel.fetch_add(1, Ordering::SeqCst);
            if let Ok(mut evidence) = self.evidence.lock() {
                evidence.get_or_insert_with(|| {
                    format!("session/request_permission for tool call {id} after session/cancel")
                });
            }
        }
        RequestPermissionOutcome::Cancelled
    }
}

/// Parses one agent JSON line of at most [`MAX_INSPECTED_BYTES`] for [`RuleBook::observe_agent_message`] and
/// [`ReplayWatch::agent_message`]; returns whether it was looked into.
fn inspect_agent_json(book: &mut RuleBook, watch: &mut ReplayWatch, bytes: &[u8]) -> bool {
    if bytes.len() > MAX_INSPECTED_BYTES {
        return false;
    }
    match serde_json::from_slice::<Value>(bytes) {
        Ok(message) => {
            book.observe_agent_message(&message);
            watch.agent_message(&message);
            true
        }
        Err(_) => false,
    }
}

type SharedBook = Arc<Mutex<RuleBook>>;

fn book(shared: &SharedBook) -> std::sync::MutexGuard<'_, RuleBook> {
    shared
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Runs the check. Never panics on agent behavior; every failure is a verdict.
pub async fn run_check(plan: CheckPlan) -> CheckReport {
    let shared: SharedBook = Arc::new(Mutex::new(
        RuleBook::new(plan.limits.max_evidence_bytes)
            .with_max_line_bytes(plan.limits.max_line_bytes),
    ));
    let mut command = Command::new(&plan.program);
    command
        .args(&plan.args)
        .inherit_os_env()
        .current_dir(&plan.cwd)
        .stdout_bytes();
    for (key, value) in &plan.env {
        command.env(key, value);
    }
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(error) => {
            let mut book = RuleBook::new(plan.limits.max_evidence_bytes);
            book.fail("spawns", error.to_string());
            return book.finish("the agent did not start");
        }
    };
    book(&shared).pass("spawns");
    let replay: SharedWatch = Arc::default();
    let (reader, writer, inspector) = inspecting_pipes(
        &mut child,
        shared.clone(),
        replay.clone(),
        plan.limits.max_line_bytes,
    );
    let mut config = crate::client::ClientConfig::default();
    config.rpc.max_line_bytes = plan.limits.max_line_bytes;
    let permissions = CheckPermissions::default();
    let client = ClientBuilder::new()
        .config(config)
        .permission_handler(permissions.clone())
        .connect(reader, writer);
    let why = script(&client, &plan, &shared, &permissions).await;
    let handle = child.handle();
    client.close().await;
    match tokio::time::timeout(plan.limits.exit_grace, handle.wait()).await {
        Ok(_) => book(&shared).pass("exits_on_stdin_eof"),
        Err(_) => book(&shared).fail(
            "exits_on_stdin_eof",
            format!(
                "still running {} ms after stdin EOF",
                plan.limits.exit_grace.as_millis()
            ),
        ),
    }
    child
        .stop(StopPlan::new().stdin_grace(Duration::ZERO))
        .await;
    // The inspector ends with stdout (EOF, or exit + drain window): every line has been judged then.
    if tokio::time::timeout(plan.limits.exit_grace, inspector)
        .await
        .is_err()
    {
        tracing::debug!("stdout inspector did not finish");
    }
    let mut book = book(&shared);
    watch(&replay).judge(&mut book);
    // Unless a violation was seen on the wire (RuleBook::observe_agent_message).
    book.pass("client_capabilities_respected");
    if book.lines_seen == 0 {
        book.skip("stdout_only_jsonrpc", "the agent wrote no stdout line");
    } else {
        book.pass("stdout_only_jsonrpc");
    }
    std::mem::replace(&mut *book, RuleBook::new(0)).finish(why.as_deref().unwrap_or("not reached"))
}

/// The scripted session; returns why the remaining rules were not reached, if it stopped early.
async fn script(
    client: &Client,
    plan: &CheckPlan,
    shared: &SharedBook,
    permissions: &CheckPermissions,
) -> Option<String> {
    let step = plan.limits.step_timeout;
    let max = plan.limits.max_evidence_bytes;
    // initialize: judged on the raw answer (the client closes on versions it does not speak).
    match tokio::time::timeout(step, client.initialize()).await {
        Ok(Ok(_)) if client.dialect() == Some(crate::kandev::Dialect::AcpV1) => {
            book(shared).pass("initialize_answers_integer_version");
        }
        Ok(Ok(_)) => {
            book(shared).fail(
                "initialize_answers_integer_version",
                "protocolVersion is a string (Kandev dialect)".to_owned(),
            );
            return Some("initialize did not select ACP v1".to_owned());
        }
        Ok(Err(error)) => {
            book(shared).fail(
                "initialize_answers_integer_version",
                quote(&error.to_string(), max),
            );
            return Some("initialize failed".to_owned());
        }
        Err(_) => {
            book(shared).fail(
                "initialize_answers_integer_version",
                format!("no answer within {} s", step.as_secs()),
            );
            return Some("initialize timed out".to_owned());
        }
    }
    let mut session = match tokio::time::timeout(step, client.new_session(&plan.cwd)).await {
        Ok(Ok(session)) => {
            book(shared).pass("session_new_returns_id");
            session
        }
        Ok(Err(error)) => {
            book(shared).fail("session_new_returns_id", quote(&error.to_string(), max));
            return Some("session/new failed".to_owned());
        }
        Err(_) => {
            book(shared).fail(
                "session_new_returns_id",
                format!("no answer within {} s", step.as_secs()),
            );
            return Some("session/new timed out".to_owned());
        }
    };
    // Turn 1.
    let turn = match tokio::time::timeout(step, session.prompt_text(&plan.prompt)).await {
        Ok(Ok(turn)) => turn,
        Ok(Err(error)) => {
            book(shared).fail("prompt_returns_stop_reason", quote(&error.to_string(), max));
            return Some("session/prompt could not be sent".to_owned());
        }
        Err(_) => return Some("session/prompt could not be sent in time".to_owned()),
    };
    match tokio::time::timeout(step, turn.finish()).await {
        Ok((updates, outcome)) => {
            for update in &updates {
                book(shared).observe_update(update);
            }
            match outcome {
                Ok(_) => book(shared).pass("prompt_returns_stop_reason"),
                Err(error) => {
                    book(shared).fail("prompt_returns_stop_reason", quote(&error.to_string(), max))
                }
            }
        }
        Err(_) => {
            book(shared).fail(
                "prompt_returns_stop_reason",
                format!("no answer within {} s", step.as_secs()),
            );
            return Some("the first turn did not end".to_owned());
        }
    }
    // Updates after the answer, if any, are still judged.
    while let Some(update) = session.try_next_update() {
        book(shared).observe_update(&update);
    }
    if let Some(why) = cancel_turn(client, &mut session, plan, shared, permissions).await {
        return Some(why);
    }
    probe(client, plan, shared).await;
    let stats = client.stats();
    if stats.invalid_updates > 0 {
        book(shared).fail(
            "updates_reference_session",
            format!(
                "{} session/update notifications without {{sessionId, update}}",
                stats.invalid_updates
            ),
        );
    } else if stats.unrouted_updates_dropped > 0 || stats.updates_for_dropped_sessions > 0 {
        book(shared).fail(
            "updates_reference_session",
            "updates named a session that was not created".to_owned(),
        );
    } else if book(shared).updates_seen == 0 {
        // Nothing to judge: a pass would claim what was never exercised.
        book(shared).skip(
            "updates_reference_session",
            "the agent sent no session/update",
        );
    } else {
        book(shared).pass("updates_reference_session");
    }
    if book(shared).updates_seen == 0 {
        book(shared).skip("updates_parse", "the agent sent no session/update");
    } else {
        book(shared).pass("updates_parse");
    }
    session_methods(client, session, plan, shared).await;
    None
}

/// The unknown-method probe: answered at all (`unknown_request_answered`), and with -32601.
async fn probe(client: &Client, plan: &CheckPlan, shared: &SharedBook) {
    let max = plan.limits.max_evidence_bytes;
    let mut call = match client.connection().start_call(PROBE, None).await {
        Ok(call) => call,
        Err(error) => {
            book(shared).fail("unknown_request_answered", quote(&error.to_string(), max));
            return;
        }
    };
    let id = call.id();
    // By reference: the call must still be pending when it is cancelled (dropping it forgets it, sending nothing).
    match tokio::time::timeout(plan.limits.probe_timeout, &mut call).await {
        Ok(answer) => {
            book(shared).pass("unknown_request_answered");
            match answer {
                Err(CallError::Rpc(error)) if error.code == ErrorCode::METHOD_NOT_FOUND => {
                    book(shared).pass("unknown_method_not_found");
                }
                other => book(shared).fail(
                    "unknown_method_not_found",
                    quote(&format!("{other:?}"), max),
                ),
            }
        }
        Err(_) => {
            book(shared).fail(
                "unknown_request_answered",
                format!(
                    "agentwire/conformance_probe not answered within {} ms ($/cancel_request sent)",
                    plan.limits.probe_timeout.as_millis()
                ),
            );
            book(shared).skip("unknown_method_not_found", "the probe was never answered");
            // The peer must still answer (-32800 or a result); whatever comes is dropped and counted.
            let _ = client.connection().cancel(&id).await;
            drop(call);
        }
    }
}

/// The unknown method the check probes with.
const PROBE: &str = "agentwire/conformance_probe";

/// Records `rule` from a step's outcome: pass, the error as evidence, or a timeout.
fn judge_step<T>(
    shared: &SharedBook,
    rule: &str,
    outcome: Result<Result<T, crate::AcpError>, tokio::time::error::Elapsed>,
    step: Duration,
    max: usize,
) -> Option<T> {
    match outcome {
        Ok(Ok(value)) => {
            book(shared).pass(rule);
            Some(value)
        }
        Ok(Err(error)) => {
            book(shared).fail(rule, quote(&error.to_string(), max));
            None
        }
        Err(_) => {
            book(shared).fail(rule, format!("no answer within {} s", step.as_secs()));
            None
        }
    }
}

/// The advertised session methods, on the check's first session (see the module doc, step 5).
async fn session_methods(
    client: &Client,
    mut session: Session,
    plan: &CheckPlan,
    shared: &SharedBook,
) {
    let step = plan.limits.step_timeout;
    let max = plan.limits.max_evidence_bytes;
    let capabilities = client.session_capabilities();
    let agent = client.agent();
    let id = session.id().clone();
    let not = |what: &str| format!("the agent does not advertise {what}");

    if capabilities.list.is_some() {
        let listed =
            tokio::time::timeout(step, client.list_sessions(ListSessionsRequest::new())).await;
        judge_step(shared, "session_list_answers", listed, step, max);
    } else {
        book(shared).skip("session_list_answers", &not("sessionCapabilities.list"));
    }

    // The first select option, set to its current value: a real agent's settings are left as they were.
    let select = session.config_options().and_then(|options| {
        options.iter().find_map(|option| match &option.kind {
            SessionConfigKind::Select(select) => {
                Some((option.id.clone(), select.current_value.clone()))
            }
            _ => None,
        })
    });
    match select {
        Some((config_id, value)) => {
            let set = tokio::time::timeout(
                step,
                session.set_config_option(config_id, SessionConfigOptionValue::value_id(value)),
            )
            .await
            .map(|answer| answer.map(|_| ()));
            judge_step(shared, "set_config_option_answers", set, step, max);
        }
        None => book(shared).skip(
            "set_config_option_answers",
            "session/new answered no select configOptions",
        ),
    }

    if capabilities.resume.is_some() {
        let resumed =
            tokio::time::timeout(step, client.resume_session(id.clone(), &plan.cwd)).await;
        if let Some(resumed) = judge_step(shared, "session_resume_answers", resumed, step, max) {
            session = resumed;
        }
    } else {
        book(shared).skip("session_resume_answers", &not("sessionCapabilities.resume"));
        book(shared).skip(
            "session_resume_does_not_replay",
            &not("sessionCapabilities.resume"),
        );
    }

    if agent
        .as_ref()
        .is_some_and(|agent| agent.agent_capabilities.load_session)
    {
        let loaded = tokio::time::timeout(step, client.load_session(id.clone(), &plan.cwd)).await;
        if let Some(loaded) = judge_step(
            shared,
            "session_load_replays_before_answer",
            loaded,
            step,
            max,
        ) {
            session = loaded;
        }
    } else {
        book(shared).skip("session_load_replays_before_answer", &not("loadSession"));
    }

    if capabilities.close.is_some() {
        let closed = tokio::time::timeout(step, client.close_session(&id)).await;
        judge_step(shared, "session_close_answers", closed, step, max);
    } else {
        book(shared).skip("session_close_answers", &not("sessionCapabilities.close"));
    }
    if capabilities.delete.is_some() {
        let deleted = tokio::time::timeout(step, client.delete_session(&id)).await;
        judge_step(shared, "session_delete_answers", deleted, step, max);
    } else {
        book(shared).skip("session_delete_answers", &not("sessionCapabilities.delete"));
    }
    drop(session);

    let can_logout = agent.is_some_and(|agent| agent.agent_capabilities.auth.logout.is_some());
    match (can_logout, plan.logout) {
        (false, _) => book(shared).skip("logout_answers", &not("agentCapabilities.auth.logout")),
        (true, false) => book(shared).skip(
            "logout_answers",
            "not exercised: logout would end the user's login (CheckPlan::logout)",
        ),
        (true, true) => {
            let out = tokio::time::timeout(step, client.logout()).await;
            judge_step(shared, "logout_answers", out, step, max);
        }
    }
}

/// Request sent right after `session/cancel` in the cancelled turn (an extension method, `_` prefix: agents answer
/// it, usually with `-32601`). Its answer arriving before the turn's answer proves the agent had read the cancel while
/// the turn was still running, so an `end_turn` then is not a crossing in flight.
pub const CANCEL_PROBE_METHOD: &str = "_agentwire/cancel_probe";

/// Most [`CANCEL_PROBE_METHOD`] requests sent in the cancelled turn: the next is sent when the previous one was
/// answered and the turn still runs.
const CANCEL_PROBES: u32 = 3;

/// Turn 2: cancel at its first update, then send [`CANCEL_PROBE_METHOD`]; judge the raw answer. `end_turn` fails
/// only when the probe was answered first; otherwise the turn may have ended before the cancel reached the agent
/// (messages crossing in flight) and the rule is skipped.
async fn cancel_turn(
    client: &Client,
    session: &mut Session,
    plan: &CheckPlan,
    shared: &SharedBook,
    permissions: &CheckPermissions,
) -> Option<String> {
    let step = plan.limits.step_timeout;
    let max = plan.limits.max_evidence_bytes;
    let request = PromptRequest::new(
        session.id().clone(),
        vec![crate::schema::ContentBlock::Text(
            crate::schema::TextContent::new(plan.cancel_prompt.as_str()),
        )],
    );
    let params = serde_json::to_value(&request).ok();
    let mut call = match client
        .connection()
        .start_call("session/prompt", params)
        .await
    {
        Ok(call) => call,
        Err(error) => {
            book(shared).fail("cancel_yields_cancelled", quote(&error.to_string(), max));
            return Some("the cancelled turn could not be sent".to_owned());
        }
    };
    let mut cancel_sent = false;
    let mut updates_after_cancel = 0u32;
    // Sent right after `session/cancel`: an agent reads its input in order, so an answer to the probe proves it had
    // read the cancel. A turn still running then cannot have crossed the cancel in flight (see `judge_cancel`).
    let mut probe: Option<agentwire_jsonrpc::PendingCall> = None;
    let mut probe_answered = false;
    let mut updates_after_probe = 0u32;
    let mut probes_sent = 1u32;
    let answer = loop {
        let next = tokio::time::timeout(step, async {
            tokio::select! {
                biased;
                update = session.next_update() => Err(Some(update)),
                answer = &mut call => Ok(answer),
                _ = async {
                    match probe.as_mut() {
                        Some(pending) => { let _ = pending.await; }
                        None => std::future::pending::<()>().await,
                    }
                } => Err(None),
            }
        })
        .await;
        let next = match next {
            Ok(Err(None)) => {
                probe = None;
                probe_answered = true;
                // Probe again while the turn runs (bounded): each answer is more evidence the turn outlived the
                // cancel.
                if probes_sent < CANCEL_PROBES {
                    probes_sent += 1;
                    probe = client
                        .connection()
                        .start_call(CANCEL_PROBE_METHOD, Some(serde_json::json!({})))
                        .await
                        .ok();
                }
                continue;
            }
            Ok(Err(Some(update))) => Ok(Err(update)),
            Ok(Ok(answer)) => Ok(Ok(answer)),
            Err(elapsed) => Err(elapsed),
        };
        match next {
            Err(_) => {
                book(shared).fail(
                    "cancel_yields_cancelled",
                    format!("no answer within {} s after session/cancel", step.as_secs()),
                );
                return Some("the cancelled turn did not end".to_owned());
            }
            Ok(Ok(answer)) => break answer,
            Ok(Err(None)) => break Err(CallError::ConnectionClosed),
            Ok(Err(Some(update))) => {
                book(shared).observe_update(&update);
                if cancel_sent {
                    updates_after_cancel += 1;
                    if probe_answered {
                        updates_after_probe += 1;
                    }
                } else {
                    if let Update::Known(known) = &update
                        && let crate::schema::SessionUpdate::ToolCall(call) = known.as_ref()
                        && let Ok(mut announced) = permissions.announced.lock()
                    {
                        announced.push(call.tool_call_id.to_string());
                    }
                    permissions.cancel_sent.store(true, Ordering::SeqCst);
                    let params = serde_json::json!({"sessionId": session.id()});
                    if client
                        .connection()
                        .notify("session/cancel", Some(params))
                        .await
                        .is_err()
                    {
                        return Some("session/cancel could not be sent".to_owned());
                    }
                    cancel_sent = true;
                    probe = client
                        .connection()
                        .start_call(CANCEL_PROBE_METHOD, Some(serde_json::json!({})))
                        .await
                        .ok();
                }
            }
        }
    };
    if cancel_sent {
        let late = permissions.after_cancel.load(Ordering::SeqCst);
        match permissions.evidence.lock().ok().and_then(|e| e.clone()) {
            Some(evidence) if late > 0 => book(shared).fail(
                "no_permission_request_after_cancel",
                format!("{evidence} ({late} in all; answered cancelled)"),
            ),
            _ => book(shared).pass("no_permission_request_after_cancel"),
        }
    } else {
        book(shared).skip(
            "no_permission_request_after_cancel",
            "the turn ended before its first update",
        );
    }
    let stop_reason = answer
        .as_ref()
        .ok()
        .and_then(|value| value.get("stopReason"))
        .and_then(|value| serde_json::from_value::<StopReason>(value.clone()).ok());
    match (cancel_sent, &answer, stop_reason) {
        (_, _, Some(StopReason::Cancelled)) => book(shared).pass("cancel_yields_cancelled"),
        (false, _, _) => book(shared).skip("cancel_yields_cancelled", "the turn ended before its first update"),
        (true, Err(error), _) => book(shared).fail(
            "cancel_yields_cancelled",
            quote(&format!("answered the cancelled turn with an error: {error}"), max),
        ),
        (true, Ok(value), _) if probe_answered => book(shared).fail(
            "cancel_yields_cancelled",
            quote(
                &format!(
                    "the turn was still running after the agent had read session/cancel (it answered {} sent \
                     after the cancel first; {updates_after_cancel} updates after the cancel, \
                     {updates_after_probe} after that answer), then answered {value}",
                    CANCEL_PROBE_METHOD
                ),
                max,
            ),
        ),
        (true, Ok(_), _) => book(shared).skip(
            "cancel_yields_cancelled",
            "cancellation not exercised: the turn ended before the cancel could reach the agent",
        ),
    }
    None
}

/// Pumps the child's stdout through a line inspector (every line judged by [`RuleBook::observe_line`]) to the
/// client, and the client's output to the child's stdin.
fn inspecting_pipes(
    child: &mut agentwire_process::Child,
    shared: SharedBook,
    replay: SharedWatch,
    max_line_bytes: usize,
) -> (
    tokio::io::DuplexStream,
    tokio::io::DuplexStream,
    tokio::task::JoinHandle<()>,
) {
    let stdin = child.stdin();
    let stdout = child.take_stdout();
    let (mut sink, reader) = tokio::io::duplex(256 * 1024);
    let agent_replay = replay.clone();
    let inspector = tokio::spawn(async move {
        let Some(mut stdout) = stdout else { return };
        let mut decoder = JsonlDecoder::new(Limits {
            max_line_bytes,
            ..Limits::default()
        });
        let mut buf = BytesMut::new();
        let mut line_number = 0u64;
        let mut forward = true;
        while let Some(item) = stdout.next().await {
            let StdoutItem::Bytes(bytes) = item else {
                continue;
            };
            buf.extend_from_slice(&bytes);
            while let Some(frame) = decoder.decode(&mut buf) {
                line_number += 1;
                book(&shared).observe_line(line_number, &frame);
                if let Frame::Json(bytes) = &frame {
                    inspect_agent_json(&mut book(&shared), &mut watch(&agent_replay), bytes);
                }
            }
            if forward && sink.write_all(&bytes).await.is_err() {
                forward = false; // The client is gone; keep judging the output.
            }
        }
        while let Some(frame) = decoder.decode_eof(&mut buf) {
            line_number += 1;
            book(&shared).observe_line(line_number, &frame);
        }
    });
    let (writer, mut source) = tokio::io::duplex(256 * 1024);
    tokio::spawn(async move {
        let mut chunk = vec![0u8; 64 * 1024];
        let mut decoder = JsonlDecoder::new(Limits {
            max_line_bytes,
            ..Limits::default()
        });
        let mut buf = BytesMut::new();
        loop {
            match source.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => match chunk.get(..n) {
                    Some(bytes) => {
                        // Watches start before the agent can see the request: judged in wire order.
                        buf.extend_from_slice(bytes);
                        while let Some(frame) = decoder.decode(&mut buf) {
                            if let Frame::Json(line) = &frame
                                && let Ok(message) = serde_json::from_slice::<Value>(line)
                            {
                                watch(&replay).client_message(&message);
                            }
                        }
                        if stdin.write_all(bytes).await.is_err() {
                            break;
                        }
                    }
                    None => break,
                },
            }
        }
        stdin.close().await;
    });
    (reader, writer, inspector)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(frames: &[Frame], expect: Option<&str>) {
        let mut book = RuleBook::new(40);
        for (i, frame) in frames.iter().enumerate() {
            book.observe_line(i as u64 + 1, frame);
        }
        book.pass("stdout_only_jsonrpc");
        let report = book.finish("test");
        let got = match &report.get("stdout_only_jsonrpc").expect("rule").outcome {
            Outcome::Fail { evidence } => Some(evidence.clone()),
            _ => None,
        };
        assert_eq!(got.as_deref(), expect);
    }

    fn json(text: &str) -> Frame {
        Frame::Json(bytes::Bytes::copy_from_slice(text.as_bytes()))
    }

    #[test]
    fn stdout_lines_are_judged() {
        check(&[json(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#)], None);
        check(
            &[
                json(r#"{"jsonrpc":"2.0","method":"x"}"#),
                json(r#"{"type":"text"}"#),
            ],
            Some(r#"stdout line 2: {\"type\":\"text\"} (not a JSON-RPC 2.0 object)"#),
        );
        check(
            &[Frame::TooLong { bytes_discarded: 9 }],
            Some("stdout line 1: a line of 9 bytes, over the line limit"),
        );
    }

    #[test]
    fn a_line_over_the_limit_names_the_limit_and_the_setting() {
        let mut book = RuleBook::new(200).with_max_line_bytes(1000);
        book.observe_line(
            1,
            &Frame::TooLong {
                bytes_discarded: 1001,
            },
        );
        let report = book.finish("test");
        match &report.get("stdout_only_jsonrpc").expect("rule").outcome {
            Outcome::Fail { evidence } => assert_eq!(
                evidence,
                "stdout line 1: a line of 1001 bytes, over the 1000-byte limit (the agent's max_line_bytes = 1000)"
            ),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn evidence_is_bounded_and_escaped() {
        assert_eq!(quote("a\u{1b}[31m", 100), "a\\u{1b}[31m");
        assert_eq!(quote(&"é".repeat(10), 5), "éé… (20 bytes)");
    }

    fn outcome_of(book: RuleBook, id: &str) -> String {
        match &book.finish("unjudged").get(id).expect("rule").outcome {
            Outcome::Pass => "pass".to_owned(),
            Outcome::Fail { evidence } => format!("fail: {evidence}"),
            Outcome::Skipped { why } => format!("skip: {why}"),
        }
    }

    fn user_chunk(session: &str) -> Value {
        serde_json::json!({"jsonrpc":"2.0","method":"session/update","params":{"sessionId":session,
            "update":{"sessionUpdate":"user_message_chunk","content":{"type":"text","text":"q"}}}})
    }

    #[test]
    fn replays_are_judged_in_wire_order() {
        let resume = serde_json::json!({"jsonrpc":"2.0","id":7,"method":"session/resume","params":{"sessionId":"s1","cwd":"/w"}});
        let load = serde_json::json!({"jsonrpc":"2.0","id":8,"method":"session/load","params":{"sessionId":"s1","cwd":"/w","mcpServers":[]}});
        let answer = |id: i64| serde_json::json!({"jsonrpc":"2.0","id":id,"result":{}});
        // A clean resume and a load that replays before its answer.
        let mut watch = ReplayWatch::default();
        watch.agent_message(&user_chunk("s1")); // before any watch: a live turn's business
        watch.client_message(&resume);
        watch.agent_message(&user_chunk("other"));
        watch.agent_message(&answer(7));
        watch.client_message(&load);
        watch.agent_message(&user_chunk("s1"));
        watch.agent_message(&answer(8));
        let mut book = RuleBook::new(200);
        watch.judge(&mut book);
        assert_eq!(outcome_of(book, "session_resume_does_not_replay"), "pass");
        let mut book = RuleBook::new(200);
        watch.judge(&mut book);
        assert_eq!(
            outcome_of(book, "session_load_replays_before_answer"),
            "pass"
        );
        // A resume that replays, and a load answered before its replay.
        let mut watch = ReplayWatch::default();
        watch.client_message(&resume);
        watch.agent_message(&user_chunk("s1"));
        watch.agent_message(&answer(7));
        watch.client_message(&load);
        watch.agent_message(&answer(8));
        watch.agent_message(&user_chunk("s1"));
        watch.agent_message(&user_chunk("s1"));
        let mut book = RuleBook::new(200);
        watch.judge(&mut book);
        assert_eq!(
            outcome_of(book, "session_resume_does_not_replay"),
            "fail: session/resume of s1 replayed 1 user_message_chunk updates (1 before its answer, 0 after)"
        );
        let mut book = RuleBook::new(200);
        watch.judge(&mut book);
        assert_eq!(
            outcome_of(book, "session_load_replays_before_answer"),
            "fail: session/load of s1 was answered before its replay: 2 user_message_chunk updates after the answer (0 before)"
        );
        // The probe: cancelled and answered, cancelled and never answered, answered in time.
        let probe =
            serde_json::json!({"jsonrpc":"2.0","id":3,"method":"agentwire/conformance_probe"});
        let cancel = serde_json::json!({"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":3}});
        let cancel_other = serde_json::json!({"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":4}});
        for (messages, expect) in [
            (
                vec![("c", &probe), ("c", &cancel), ("a", &answer(3))],
                "pass",
            ),
            (
                vec![("c", &probe), ("c", &cancel)],
                "fail: the probe (id 3) was never answered, even after $/cancel_request",
            ),
            (
                vec![("c", &probe), ("a", &answer(3)), ("c", &cancel_other)],
                "skip: not exercised: the probe was answered before any $/cancel_request",
            ),
        ] {
            let mut watch = ReplayWatch::default();
            for (side, message) in messages {
                if side == "c" {
                    watch.client_message(message);
                } else {
                    watch.agent_message(message);
                }
            }
            let mut book = RuleBook::new(200);
            watch.judge(&mut book);
            assert_eq!(outcome_of(book, "cancel_request_answered"), expect);
        }
        // Unanswered requests are not judged here (the script reports the missing answer).
        let mut watch = ReplayWatch::default();
        watch.client_message(&load);
        let mut book = RuleBook::new(200);
        watch.judge(&mut book);
        assert_eq!(
            outcome_of(book, "session_load_replays_before_answer"),
            "skip: unjudged"
        );
    }

    /// A `fs/read_text_file` request line of exactly `len` bytes (padded in its path).
    fn request_line(len: usize) -> Vec<u8> {
        let head = r#"{"jsonrpc":"2.0","id":0,"method":"fs/read_text_file","params":{"sessionId":"s","path":"/"#;
        let tail = r#""}}"#;
        let mut line = head.as_bytes().to_vec();
        line.resize(len - tail.len(), b'a');
        line.extend_from_slice(tail.as_bytes());
        line
    }

    #[test]
    fn unadvertised_client_methods_are_caught_up_to_the_inspection_limit() {
        for (len, inspected) in [
            (200, true),
            (MAX_INSPECTED_BYTES, true),
            (MAX_INSPECTED_BYTES + 1, false),
        ] {
            let mut book = RuleBook::new(200);
            let mut watch = ReplayWatch::default();
            let line = request_line(len);
            assert_eq!(line.len(), len);
            assert_eq!(inspect_agent_json(&mut book, &mut watch, &line), inspected);
            let got = outcome_of(book, "client_capabilities_respected");
            let expect = if inspected {
                "fail: the agent called fs/read_text_file though the client did not advertise it"
            } else {
                "skip: unjudged"
            };
            assert_eq!(got, expect, "{len} bytes");
        }
        // Notifications and answers are not calls.
        let mut book = RuleBook::new(200);
        book.observe_agent_message(
            &serde_json::json!({"jsonrpc":"2.0","method":"terminal/output"}),
        );
        book.observe_agent_message(
            &serde_json::json!({"jsonrpc":"2.0","id":1,"method":"session/request_permission"}),
        );
        assert_eq!(
            outcome_of(book, "client_capabilities_respected"),
            "skip: unjudged"
        );
    }

    #[test]
    fn updates_seen_are_counted_for_the_update_rules() {
        let mut book = RuleBook::new(10);
        assert_eq!(book.updates_seen, 0);
        let update = Update::from_value(serde_json::json!({
            "sessionUpdate": "agent_message_chunk",
            "content": {"type": "text", "text": "hi"}
        }));
        book.observe_update(&update);
        assert_eq!(book.updates_seen, 1);
        assert_eq!(book.lines_seen, 0);
        book.observe_line(1, &json(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#));
        assert_eq!(book.lines_seen, 1);
    }

    #[test]
    fn a_failure_wins_over_a_pass_and_skips_fill_the_rest() {
        let mut book = RuleBook::new(10);
        book.pass("spawns");
        book.fail("spawns", "late".to_owned());
        book.fail("spawns", "later".to_owned());
        book.skip("exits_on_stdin_eof", "x");
        book.pass("exits_on_stdin_eof");
        let report = book.finish("not reached");
        assert_eq!(
            report.get("spawns").map(|r| &r.outcome),
            Some(&Outcome::Fail {
                evidence: "late".to_owned()
            })
        );
        assert_eq!(
            report.get("exits_on_stdin_eof").map(|r| &r.outcome),
            Some(&Outcome::Skipped {
                why: "x".to_owned()
            })
        );
        assert_eq!(report.failed_ids(), ["spawns"]);
        assert!(!report.passed());
        assert!(report.render_text().contains("FAIL  spawns"));
    }
}
