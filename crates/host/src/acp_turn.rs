//! ACP agents in the turn runner: spawn the agent, `initialize`, load or create its session, send the prompt and
//! map ACP session updates onto the same [`NormalizedEvent`]s the AWP runner yields.
//!
//! Mapping (pure, unit-tested in [`map_update`], [`stop_status`], [`error_status`]):
//! - `agent_message_chunk` text → [`NormalizedEvent::TextDelta`]; `agent_thought_chunk` text →
//!   [`NormalizedEvent::ThinkingDelta`];
//! - `tool_call` → [`NormalizedEvent::ToolUse`] (name = title, input = `rawInput`, else `{"kind":…}`), and a
//!   [`NormalizedEvent::ToolResult`] too when it arrives already `completed`/`failed`; a `tool_call` for an id
//!   already announced in the turn is an update, never a second tool use ([`ToolCallsSeen`]);
//! - `tool_call_update` with status `completed`/`failed` → [`NormalizedEvent::ToolResult`] (summary: the text
//!   content, else the title, else the status; `failed` is an error);
//! - `usage_update` → a [`NormalizedEvent::Notice`] `usage_update` (`used N of SIZE tokens[, cost A CUR]`); the
//!   turn's last one becomes the run's usage (see below);
//! - `session_info_update` with a title → a notice `session_info_update` with the title;
//! - anything else → [`NormalizedEvent::Notice`] with the update kind.
//!
//! Session setup: a thread's session is reopened with `session/resume` when the agent advertises
//! `sessionCapabilities.resume` (no replay; an agent that replays anyway has it dropped), else `session/load` when it
//! advertises `loadSession` (the replay is dropped), else — or when those fail — a new session is started and
//! noted in the thread ([`SESSION_NOT_RESUMED`]). A requested model is selected with `session/set_config_option` on
//! the agent's `model` config option (ACP v1 "Session Config Options"); an agent that offers none gets a
//! [`MODEL_NOT_APPLIED`] notice, an agent that refuses the value fails the turn (`agent_error`).
//!
//! Usage: ACP reports context-window occupancy, not per-turn token counts (`usage_update {used, size, cost}`, ACP
//! v1 "Session Usage"). The run records the turn's last `used` as its input tokens and 0 output tokens, and its
//! `cost` (the session's cumulative cost) as the outcome's total cost when the currency is USD; the recorded run
//! keeps only its own share (`crate::turn::acp_run_cost`: cumulative minus the session's earlier runs). The notice
//! keeps `size` and the cumulative cost in any currency.
//!
//! Stop reasons: `end_turn` succeeds; `cancelled` is code `cancelled`; `refusal`, `max_tokens` and
//! `max_turn_requests` fail with that reason as the code (the answer is incomplete: scripts must notice; the text
//! streamed so far is kept). Source: ACP v1 "Prompt Turn"; protocols/acp.md.
//!
//! Startup: each answer of the setup (`initialize`; `session/resume`, `session/load` or `session/new`; the model's
//! `session/set_config_option`) must come within the agent's first-output timeout, else the turn fails with
//! [`crate::turn::FIRST_OUTPUT_TIMEOUT`]; a cancel during the setup ends it at once (`cancelled`). Either way, or when
//! the setup fails, the agent is stopped with the stop ladder and what it left (its stderr tail, how many stdout
//! lines were not JSON, its exit status) goes into [`StartFailure`], from which the run's reason is built
//! ([`crate::turn::failure_reason`]) as for the other protocols.
//!
//! Cancel: [`AcpRunner::cancel`] sends `session/cancel`; an agent that has not ended the turn [`CANCEL_GRACE`]
//! later is stopped with the stop ladder and the turn ends `cancelled` all the same.
//!
//! IO: the agent process (through `agentwire-acp`'s client, which spawns with `agentwire-process`) and one tokio task
//! per turn that owns the ACP session.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use agentwire_acp::schema::{
    ContentBlock as AcpBlock, EmbeddedResource, EmbeddedResourceResource, ImageContent,
    PermissionOption, PermissionOptionKind, RequestPermissionOutcome, RequestPermissionRequest,
    SelectedPermissionOutcome, SessionUpdate, StopReason, TextContent, ToolCallContent,
    ToolCallStatus, ToolCallUpdateFields, UsageUpdate,
};
use agentwire_acp::{
    AcpError, Canceller, Client, ClientBuilder, ClientConfig, PermissionHandler, RootedFs,
    RoutedCount, Session, TurnEvent, Update,
};
use agentwire_awp::{
    ContentBlock, LaunchPlan, NormalizedEvent, SessionId, TurnOutcome, TurnStatus, Usage, codes,
};
use agentwire_process::StopPlan;
use serde_json::json;
use tokio::sync::{mpsc, oneshot, watch};

use crate::store::bounded_line;

/// Notice kind (and stored tool-role note) when a thread's session could not be resumed and a new one was started.
pub const SESSION_NOT_RESUMED: &str = "session_not_resumed";

/// Notice kind when a model was asked for but the agent offers no `model` config option.
pub const MODEL_NOT_APPLIED: &str = "model_not_applied";

/// How long after `session/cancel` the agent may take to end the turn before it is stopped with the stop ladder
/// (the turn ends `cancelled` either way): the grace Claude Code gets after `interrupt`
/// ([`crate::agents::CONTROL_INTERRUPT_GRACE`], 10 s).
pub const CANCEL_GRACE: Duration = crate::agents::CONTROL_INTERRUPT_GRACE;

/// Detail of a turn whose agent did not end it within [`CANCEL_GRACE`] after `session/cancel`.
pub const CANCEL_NOT_ANSWERED: &str =
    "the agent did not end the turn within 10 s of session/cancel; it was stopped";

/// Why an ACP agent did not get through its setup, and what it left.
#[derive(Debug)]
pub(crate) struct StartFailure {
    /// Stable code: `spawn_failed`, `agent_first_output_timeout`, `cancelled`, or the [`error_status`] code.
    pub code: String,
    /// The host's own words: which request went unanswered, the exit status, the agent's error answer.
    pub detail: String,
    /// Last bytes of its stderr.
    pub stderr_tail: String,
    /// Stdout lines that were not JSON.
    pub invalid_lines: u64,
    /// The first of them (bounded by the connection).
    pub first_invalid_line: Option<String>,
}

impl StartFailure {
    fn new(code: &str, detail: String) -> Self {
        StartFailure {
            code: code.to_owned(),
            detail,
            stderr_tail: String::new(),
            invalid_lines: 0,
            first_invalid_line: None,
        }
    }
}

/// How the setup ended without a session: the request it waited for (`step`) and why.
enum SetupEnd {
    Failed(&'static str, AcpError),
    NoAnswer(&'static str, Duration),
    Cancelled(&'static str),
}

/// `call`, the setup request `step`, answered within `limit` (`None`: no limit); `current` names the request
/// waited for (a cancel says which).
async fn answered<T>(
    current: &std::sync::Mutex<&'static str>,
    step: &'static str,
    limit: Option<Duration>,
    call: impl Future<Output = Result<T, AcpError>>,
) -> Result<T, SetupEnd> {
    if let Ok(mut current) = current.lock() {
        *current = step;
    }
    let answer = match limit {
        None => call.await,
        Some(limit) => match tokio::time::timeout(limit, call).await {
            Ok(answer) => answer,
            Err(_) => return Err(SetupEnd::NoAnswer(step, limit)),
        },
    };
    answer.map_err(|e| SetupEnd::Failed(step, e))
}

/// A boxed permission decision.
pub type PermissionFuture = Pin<Box<dyn Future<Output = RequestPermissionOutcome> + Send>>;

/// How the turn answers the agent's `session/request_permission` requests. Default: [`AcpPermissions::reject`]
/// (fail closed). The binary installs a terminal prompt or `--yes`.
#[derive(Clone)]
pub struct AcpPermissions(Arc<dyn Fn(RequestPermissionRequest) -> PermissionFuture + Send + Sync>);

impl AcpPermissions {
    /// A policy from a function.
    pub fn new(
        decide: impl Fn(RequestPermissionRequest) -> PermissionFuture + Send + Sync + 'static,
    ) -> Self {
        AcpPermissions(Arc::new(decide))
    }

    /// Fail closed: the first `reject_once` (else `reject_always`) option, `cancelled` when there is none.
    pub fn reject() -> Self {
        AcpPermissions::new(|request| {
            let outcome = reject_outcome(&request.options);
            Box::pin(std::future::ready(outcome))
        })
    }

    /// Allow this once: [`allow_outcome`] (an `allow_once` option, `allow_always` only when it is the only kind of
    /// allow offered), else rejected as [`AcpPermissions::reject`].
    pub fn allow_once() -> Self {
        AcpPermissions::new(|request| {
            let outcome =
                allow_outcome(&request.options).unwrap_or_else(|| reject_outcome(&request.options));
            Box::pin(std::future::ready(outcome))
        })
    }
}

impl Default for AcpPermissions {
    fn default() -> Self {
        AcpPermissions::reject()
    }
}

impl std::fmt::Debug for AcpPermissions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AcpPermissions(..)")
    }
}

fn select(option: &PermissionOption) -> RequestPermissionOutcome {
    RequestPermissionOutcome::Selected(SelectedPermissionOutcome::new(option.option_id.clone()))
}

fn first_of(
    options: &[PermissionOption],
    kinds: &[PermissionOptionKind],
) -> Option<RequestPermissionOutcome> {
    kinds
        .iter()
        .find_map(|kind| options.iter().find(|option| option.kind == *kind))
        .map(select)
}

/// The allowing choice for `--yes`: the first `allow_once` option; the first `allow_always` only when no
/// `allow_once` is offered; `None` when nothing allows.
pub fn allow_outcome(options: &[PermissionOption]) -> Option<RequestPermissionOutcome> {
    first_of(
        options,
        &[
            PermissionOptionKind::AllowOnce,
            PermissionOptionKind::AllowAlways,
        ],
    )
}

/// The fail-closed choice: the first `reject_once`, else `reject_always`, else `cancelled`.
pub fn reject_outcome(options: &[PermissionOption]) -> RequestPermissionOutcome {
    first_of(
        options,
        &[
            PermissionOptionKind::RejectOnce,
            PermissionOptionKind::RejectAlways,
        ],
    )
    .unwrap_or(RequestPermissionOutcome::Cancelled)
}

/// What the agent announced of its tool calls in this process (`tool_call`, then `tool_call_update`s), by id, at
/// most [`MAX_TRACKED_TOOL_CALLS`]: a `session/request_permission` whose `toolCall` omits the kind, title or input
/// gets them from here ([`AnnouncedToolCalls::complete`]), so the question names what is asked for.
#[derive(Clone, Debug, Default)]
pub struct AnnouncedToolCalls(
    Arc<std::sync::Mutex<std::collections::HashMap<String, ToolCallUpdateFields>>>,
);

impl AnnouncedToolCalls {
    /// Records the kind, title and raw input of a `tool_call` or `tool_call_update` (later values win).
    pub fn observe(&self, update: &SessionUpdate) {
        let (id, kind, title, raw_input) = match update {
            SessionUpdate::ToolCall(call) => (
                call.tool_call_id.to_string(),
                Some(call.kind),
                Some(call.title.clone()),
                call.raw_input.clone(),
            ),
            SessionUpdate::ToolCallUpdate(update) => (
                update.tool_call_id.to_string(),
                update.fields.kind,
                update.fields.title.clone(),
                update.fields.raw_input.clone(),
            ),
            _ => return,
        };
        let Ok(mut map) = self.0.lock() else { return };
        if !map.contains_key(&id) && map.len() >= MAX_TRACKED_TOOL_CALLS {
            return;
        }
        let entry = map.entry(id).or_default();
        if kind.is_some() {
            entry.kind = kind;
        }
        if title.is_some() {
            entry.title = title;
        }
        if raw_input.is_some() {
            entry.raw_input = raw_input;
        }
    }

    /// `request` with the kind, title and raw input its `toolCall` lacks filled from the announced call of the
    /// same `toolCallId`; what the request carries itself is kept.
    pub fn complete(&self, mut request: RequestPermissionRequest) -> RequestPermissionRequest {
        let id = request.tool_call.tool_call_id.to_string();
        let Ok(map) = self.0.lock() else {
            return request;
        };
        if let Some(seen) = map.get(&id) {
            let fields = &mut request.tool_call.fields;
            if fields.kind.is_none() {
                fields.kind = seen.kind;
            }
            if fields.title.is_none() {
                fields.title = seen.title.clone();
            }
            if fields.raw_input.is_none() {
                fields.raw_input = seen.raw_input.clone();
            }
        }
        request
    }
}

/// Holds a permission question back until the turn's observer has been given every event of the updates the
/// agent wrote before the request (a `tool_call` announced just before its `session/request_permission` is
/// rendered above the question, not after it). Set once the session exists; open (never waits) before that,
/// after the turn's end and once the runner is gone.
#[derive(Clone, Default)]
struct RenderGate(Arc<std::sync::Mutex<Option<GateState>>>);

/// The session's routed-update count, and how many of its updates the observer has been given.
type GateState = (RoutedCount, watch::Receiver<u64>);

impl RenderGate {
    /// Waits until the session's updates routed so far have all been taken by the session task and their events
    /// handed to the observer ([`AcpRunner::next_event`] publishes how far that is).
    async fn wait(&self) {
        let gate = self.0.lock().ok().and_then(|gate| gate.clone());
        let Some((routed, mut observed)) = gate else {
            return;
        };
        let target = routed.get();
        // An error: the runner is gone, nothing will be rendered any more.
        let _ = observed.wait_for(|taken| *taken >= target).await;
    }
}

struct Permissions(AcpPermissions, AnnouncedToolCalls, RenderGate);

impl PermissionHandler for Permissions {
    async fn request_permission(
        &self,
        request: RequestPermissionRequest,
    ) -> RequestPermissionOutcome {
        self.2.wait().await;
        (self.0.0)(self.1.complete(request)).await
    }
}

/// The run status of a `session/prompt` stop reason (see the module doc).
pub fn stop_status(reason: &StopReason) -> TurnStatus {
    match reason {
        StopReason::EndTurn => TurnStatus::Success,
        StopReason::Cancelled => TurnStatus::failed(codes::CANCELLED),
        StopReason::Refusal => TurnStatus::failed("refusal"),
        StopReason::MaxTokens => TurnStatus::failed("max_tokens"),
        StopReason::MaxTurnRequests => TurnStatus::failed("max_turn_requests"),
        other => TurnStatus::Failed {
            code: codes::AGENT_ERROR.to_owned(),
            detail: Some(format!("stop reason {other:?}")),
        },
    }
}

/// The run status of an ACP failure: the agent went away → `agent_exited_mid_turn`; an error answer →
/// `agent_error` (detail: its message); anything else → the error's own code (detail: its message).
pub fn error_status(error: &AcpError) -> TurnStatus {
    let code = match error {
        AcpError::ConnectionClosed => codes::AGENT_EXITED_MID_TURN,
        AcpError::Rpc { .. } | AcpError::TurnFailed { .. } => codes::AGENT_ERROR,
        other => other.code(),
    };
    TurnStatus::Failed {
        code: code.to_owned(),
        detail: Some(error.to_string()),
    }
}

fn notice(kind: impl Into<String>, detail: Option<String>) -> NormalizedEvent {
    NormalizedEvent::Notice {
        kind: kind.into(),
        detail,
    }
}

fn content_text(content: &[ToolCallContent]) -> String {
    let mut text = String::new();
    for item in content {
        if let ToolCallContent::Content(c) = item
            && let AcpBlock::Text(t) = &c.content
        {
            if !text.is_empty() {
                text.push('\n');
            }
            text.push_str(&t.text);
        }
    }
    text
}

fn tool_result(
    id: String,
    status: &ToolCallStatus,
    text: String,
    max_chars: usize,
) -> NormalizedEvent {
    let summary = bounded_line(&text, max_chars);
    let truncated = summary != text;
    NormalizedEvent::ToolResult {
        tool_use_id: id,
        is_error: matches!(status, ToolCallStatus::Failed),
        summary,
        truncated,
    }
}

fn status_word(status: &ToolCallStatus) -> String {
    serde_json::to_value(status)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_else(|| "unknown".to_owned())
}

fn ended(status: &ToolCallStatus) -> bool {
    matches!(status, ToolCallStatus::Completed | ToolCallStatus::Failed)
}

/// Most tool call ids a turn remembers to recognise a repeated announcement; past it, new ids are not tracked
/// (a repeat of one of those would be shown again, never lost).
pub const MAX_TRACKED_TOOL_CALLS: usize = 4096;

/// The tool call ids announced in one turn: some agents announce a call (`tool_call`, `pending`) and announce it
/// again with its input (`tool_call` with the same `toolCallId`) instead of sending `tool_call_update`.
#[derive(Debug, Default)]
pub struct ToolCallsSeen(std::collections::HashSet<String>);

impl ToolCallsSeen {
    /// `events` with each [`NormalizedEvent::ToolUse`] of an id already announced replaced by a notice
    /// `tool_call_repeated` (detail: the id), so a call is rendered and stored once, then its results.
    pub fn dedupe(&mut self, events: Vec<NormalizedEvent>) -> Vec<NormalizedEvent> {
        events
            .into_iter()
            .map(|event| match event {
                NormalizedEvent::ToolUse { id, .. } if self.0.contains(&id) => {
                    notice("tool_call_repeated", Some(id))
                }
                NormalizedEvent::ToolUse { id, name, input } => {
                    if self.0.len() < MAX_TRACKED_TOOL_CALLS {
                        self.0.insert(id.clone());
                    }
                    NormalizedEvent::ToolUse { id, name, input }
                }
                other => other,
            })
            .collect()
    }
}

/// Maps one ACP session update onto normalized events (see the module doc). Tool result summaries are the first
/// line of the result text, at most `max_summary_chars` characters (`truncated` says when cut).
pub fn map_update(update: Update, max_summary_chars: usize) -> Vec<NormalizedEvent> {
    let known = match update {
        Update::Known(known) => *known,
        Update::Raw { kind, .. } => {
            // serde's message lists every known variant: too long for a notice; the kind says enough.
            return vec![notice(
                kind.unwrap_or_else(|| "unknown_update".to_owned()),
                Some("not understood by the ACP v1 types".to_owned()),
            )];
        }
    };
    match known {
        SessionUpdate::AgentMessageChunk(chunk) => match chunk.content {
            AcpBlock::Text(t) => vec![NormalizedEvent::TextDelta { text: t.text }],
            _ => vec![notice(
                "agent_message_chunk",
                Some("non-text content".to_owned()),
            )],
        },
        SessionUpdate::AgentThoughtChunk(chunk) => match chunk.content {
            AcpBlock::Text(t) => vec![NormalizedEvent::ThinkingDelta { text: t.text }],
            _ => vec![notice(
                "agent_thought_chunk",
                Some("non-text content".to_owned()),
            )],
        },
        SessionUpdate::ToolCall(call) => {
            let id = call.tool_call_id.to_string();
            let input = match call.raw_input {
                Some(raw) => raw,
                None => json!({ "kind": call.kind }),
            };
            let mut events = vec![NormalizedEvent::ToolUse {
                id: id.clone(),
                name: call.title.clone(),
                input,
            }];
            if ended(&call.status) {
                let mut text = content_text(&call.content);
                if text.is_empty() {
                    text = status_word(&call.status);
                }
                events.push(tool_result(id, &call.status, text, max_summary_chars));
            }
            events
        }
        SessionUpdate::ToolCallUpdate(update) => {
            let id = update.tool_call_id.to_string();
            match &update.fields.status {
                Some(status) if ended(status) => {
                    let mut text = update
                        .fields
                        .content
                        .as_deref()
                        .map(content_text)
                        .unwrap_or_default();
                    if text.is_empty() {
                        text = update
                            .fields
                            .title
                            .clone()
                            .unwrap_or_else(|| status_word(status));
                    }
                    vec![tool_result(id, status, text, max_summary_chars)]
                }
                Some(status) => vec![notice(
                    "tool_call_update",
                    Some(format!("{id} {}", status_word(status))),
                )],
                None => vec![notice("tool_call_update", Some(id))],
            }
        }
        SessionUpdate::UsageUpdate(usage) => {
            let mut detail = format!("used {} of {} tokens", usage.used, usage.size);
            if let Some(cost) = &usage.cost {
                detail.push_str(&format!(", cost {} {}", cost.amount, cost.currency));
            }
            vec![notice("usage_update", Some(detail))]
        }
        SessionUpdate::SessionInfoUpdate(info) => {
            let title = match &info.title {
                agentwire_acp::schema::MaybeUndefined::Value(title) => {
                    Some(bounded_line(title, max_summary_chars))
                }
                _ => None,
            };
            vec![notice("session_info_update", title)]
        }
        other => {
            let kind = Update::Known(Box::new(other)).kind();
            vec![notice(
                kind.unwrap_or_else(|| "session_update".to_owned()),
                None,
            )]
        }
    }
}

/// The ACP prompt of a turn's blocks: text as text, images as `image`, documents as an embedded blob resource.
fn prompt_blocks(blocks: &[ContentBlock]) -> Vec<AcpBlock> {
    blocks
        .iter()
        .map(|block| match block {
            ContentBlock::Text { text } => AcpBlock::Text(TextContent::new(text.clone())),
            ContentBlock::Image {
                media_type,
                data_base64,
            } => AcpBlock::Image(ImageContent::new(data_base64.clone(), media_type.clone())),
            ContentBlock::Document {
                media_type,
                data_base64,
            } => AcpBlock::Resource(EmbeddedResource::new(
                EmbeddedResourceResource::BlobResourceContents(
                    agentwire_acp::schema::BlobResourceContents::new(
                        data_base64.clone(),
                        "attachment:document",
                    )
                    .mime_type(media_type.clone()),
                ),
            )),
            // A block kind added to AWP later: say so rather than drop it silently.
            _ => AcpBlock::Text(TextContent::new(
                "[an attachment of a kind ACP agents are not sent]",
            )),
        })
        .collect()
}

/// The run usage of an ACP `usage_update` (see the module doc): `used` as input tokens.
pub fn usage_of(update: &UsageUpdate) -> Usage {
    Usage {
        input_tokens: update.used,
        output_tokens: 0,
        cache_read_input_tokens: None,
        cache_creation_input_tokens: None,
    }
}

/// Reopens the thread's session `id`: `session/resume` when advertised, else `session/load`, else (or when those
/// fail) a new session with a [`SESSION_NOT_RESUMED`] notice pushed to `startup`. Whatever the agent sent while
/// reopening (a load's replay, a resume that replays anyway) is dropped: it is not part of the turn.
async fn reopen(
    client: &Client,
    id: &SessionId,
    cwd: &Path,
    startup: &mut Vec<NormalizedEvent>,
) -> Result<Session, AcpError> {
    let agent = client.agent();
    let can_resume = client.session_capabilities().resume.is_some();
    let can_load = agent.is_some_and(|agent| agent.agent_capabilities.load_session);
    let acp_id = agentwire_acp::schema::SessionId::new(id.as_str());
    let mut failures = Vec::new();
    if can_resume {
        match client.resume_session(acp_id.clone(), cwd).await {
            Ok(session) => return Ok(drained(client, session).await),
            Err(e) => failures.push(format!("session/resume failed: {e}")),
        }
    }
    if can_load {
        match client.load_session(acp_id, cwd).await {
            Ok(session) => return Ok(drained(client, session).await),
            Err(e) => failures.push(format!("session/load failed: {e}")),
        }
    }
    let session = client.new_session(cwd).await?;
    let why = if failures.is_empty() {
        "the agent can neither resume nor load sessions (no sessionCapabilities.resume, no loadSession)".to_owned()
    } else {
        failures.join("; ")
    };
    startup.push(notice(
        SESSION_NOT_RESUMED,
        Some(format!(
            "{why}; session {id} was not resumed, started new session {}",
            session.id()
        )),
    ));
    Ok(session)
}

/// Drops every update routed to `session` so far.
async fn drained(client: &Client, mut session: Session) -> Session {
    client.routed().await;
    while session.try_next_update().is_some() {}
    session
}

/// What the session task is asked to send, and where it says whether it was sent.
type PromptRequest = (Vec<AcpBlock>, oneshot::Sender<Result<(), AcpError>>);

/// What the session task hands the runner: an event, or how many routed updates the session has taken once the
/// events of one update were all sent ([`Session::received`](agentwire_acp::Session::received)).
enum Delivered {
    Event(NormalizedEvent),
    Taken(u64),
}

/// An ACP agent driven for one turn.
pub(crate) struct AcpRunner {
    client: Client,
    canceller: Canceller,
    startup: Vec<NormalizedEvent>,
    session_id: Option<SessionId>,
    prompt: Option<oneshot::Sender<PromptRequest>>,
    events: mpsc::Receiver<Delivered>,
    /// How many routed updates have had their events handed to the caller of [`AcpRunner::next_event`] (which
    /// gives them to the observer before it asks for the next): what [`RenderGate`] waits for.
    observed: watch::Sender<u64>,
    idle_timeout: Option<Duration>,
    /// Set by [`AcpRunner::cancel`]: when the agent is stopped if the turn has not ended ([`CANCEL_GRACE`]).
    cancel_due: Option<tokio::time::Instant>,
    max_line_bytes: usize,
    task: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for AcpRunner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AcpRunner")
            .field("session_id", &self.session_id)
            .finish_non_exhaustive()
    }
}

impl Drop for AcpRunner {
    /// The session task holds a client handle: ending it lets a dropped runner release the agent process (its
    /// process group is killed when the last handle goes).
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Capacity, in events, of the channel from the session task to the runner (back-pressure to the agent).
const EVENT_QUEUE: usize = 256;

impl AcpRunner {
    /// The agent's pid (its process group id) while it runs.
    pub(crate) fn pid(&self) -> Option<u32> {
        self.client.child().and_then(|child| child.id())
    }

    /// Spawns the agent in `cwd` (also the root of its `fs/*` access), initializes it, reopens `resume` (see the
    /// module doc) or creates a new session, and selects `model` through the agent's `model` config option. Each
    /// answer must come within `first_output_timeout` (`None`: no limit); `cancel` resolving ends the setup.
    ///
    /// # Errors
    /// [`StartFailure`]: `spawn_failed`, [`crate::turn::FIRST_OUTPUT_TIMEOUT`], `cancelled`, or the
    /// [`error_status`] code of the failed request; the agent is stopped (stop ladder) first.
    #[allow(clippy::too_many_arguments)] // One call site; a struct would only rename these.
    pub(crate) async fn start<C: Future<Output = ()>>(
        plan: &LaunchPlan,
        max_line_bytes: usize,
        resume: Option<&SessionId>,
        model: Option<&str>,
        cwd: Option<&Path>,
        idle_timeout: Option<Duration>,
        first_output_timeout: Option<Duration>,
        cancel: Pin<&mut C>,
        permissions: AcpPermissions,
        max_summary_chars: usize,
    ) -> Result<AcpRunner, StartFailure> {
        let cwd: PathBuf = match cwd {
            Some(dir) => dir.to_path_buf(),
            None => std::env::current_dir().map_err(|e| {
                StartFailure::new(codes::SPAWN_FAILED, format!("no working directory: {e}"))
            })?,
        };
        let fs = RootedFs::new(&cwd).map_err(|e| {
            StartFailure::new(
                codes::SPAWN_FAILED,
                format!("working directory {}: {e}", cwd.display()),
            )
        })?;
        let cwd = fs.root().to_path_buf();
        let mut command = agentwire_process::Command::new(&plan.program);
        command
            .args(&plan.args)
            .inherit_os_env()
            .envs(plan.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .current_dir(&cwd)
            // The agent dies with the host (Linux): see `ChildConfig::kill_on_parent_death`.
            .config(agentwire_process::ChildConfig {
                kill_on_parent_death: true,
                ..agentwire_process::ChildConfig::default()
            });
        let mut config = ClientConfig::default();
        config.rpc.max_line_bytes = max_line_bytes;
        let announced = AnnouncedToolCalls::default();
        let gate = RenderGate::default();
        let client = ClientBuilder::new()
            .config(config)
            .permission_handler(Permissions(permissions, announced.clone(), gate.clone()))
            .fs_handler(fs)
            .spawn(&mut command)
            .map_err(|e| StartFailure::new(codes::SPAWN_FAILED, e.to_string()))?;
        let limit = first_output_timeout.filter(|t| !t.is_zero());
        let current = std::sync::Mutex::new("initialize");
        let setup = async {
            answered(&current, "initialize", limit, client.initialize()).await?;
            let mut startup = Vec::new();
            let mut session = match resume {
                None => answered(&current, "session/new", limit, client.new_session(&cwd)).await?,
                Some(id) => {
                    let reopened = reopen(&client, id, &cwd, &mut startup);
                    answered(
                        &current,
                        "session/resume, session/load or session/new",
                        limit,
                        reopened,
                    )
                    .await?
                }
            };
            let mut applied = None;
            if let Some(model) = model {
                if session.model_option().is_some() {
                    answered(
                        &current,
                        "session/set_config_option",
                        limit,
                        session.set_model(model),
                    )
                    .await?;
                    applied = Some(model.to_owned());
                } else {
                    startup.push(notice(
                        MODEL_NOT_APPLIED,
                        Some(format!(
                            "the agent offers no `model` config option; model {model} was not applied"
                        )),
                    ));
                }
            }
            Ok::<_, SetupEnd>((session, startup, applied))
        };
        let ended = tokio::select! {
            ended = setup => ended,
            () = cancel => {
                let step = current.lock().map_or("initialize", |step| *step);
                Err(SetupEnd::Cancelled(step))
            }
        };
        let (mut session, notices, model) = match ended {
            Ok(done) => done,
            Err(end) => return Err(failed_start(&client, end).await),
        };
        let mut startup = Vec::new();
        let session_id = match SessionId::new(session.id().to_string()) {
            Ok(id) => {
                startup.push(NormalizedEvent::SessionStarted {
                    session_id: id.clone(),
                    model,
                });
                Some(id)
            }
            Err(e) => {
                startup.push(notice(codes::INVALID_SESSION_ID, Some(e.to_string())));
                None
            }
        };
        startup.extend(notices);
        let canceller = session.canceller();
        // What the setup read (a replayed history, dropped) counts as handled.
        let (observed, observed_rx) = watch::channel(session.received());
        if let Ok(mut slot) = gate.0.lock() {
            *slot = Some((session.routed_count(), observed_rx));
        }
        let (prompt_tx, prompt_rx) = oneshot::channel::<PromptRequest>();
        let (events_tx, events_rx) = mpsc::channel(EVENT_QUEUE);
        let outcome_session = session_id.clone();
        let task = tokio::spawn(async move {
            let Ok((blocks, sent)) = prompt_rx.await else {
                return;
            };
            let mut turn = match session.prompt(blocks).await {
                Ok(turn) => {
                    let _ = sent.send(Ok(()));
                    turn
                }
                Err(e) => {
                    let _ = sent.send(Err(e));
                    return;
                }
            };
            let mut usage = None;
            let mut tool_calls = ToolCallsSeen::default();
            while let Some(event) = turn.next().await {
                match event {
                    TurnEvent::Update(update) => {
                        if let Update::Known(known) = &update {
                            announced.observe(known);
                            if let SessionUpdate::UsageUpdate(update) = known.as_ref() {
                                usage = Some(update.clone());
                            }
                        }
                        for event in tool_calls.dedupe(map_update(update, max_summary_chars)) {
                            if events_tx.send(Delivered::Event(event)).await.is_err() {
                                return;
                            }
                        }
                        if events_tx
                            .send(Delivered::Taken(turn.received()))
                            .await
                            .is_err()
                        {
                            return;
                        }
                    }
                    TurnEvent::End(end) => {
                        let status = match &end {
                            Ok(reason) => stop_status(reason),
                            Err(e) => error_status(e),
                        };
                        let mut outcome = TurnOutcome::new(status);
                        outcome.session_id = outcome_session.clone();
                        if let Some(usage) = usage.take() {
                            outcome.usage = Some(usage_of(&usage));
                            outcome.total_cost_usd = usage
                                .cost
                                .filter(|cost| cost.currency.eq_ignore_ascii_case("USD"))
                                .map(|cost| cost.amount);
                        }
                        // The runner may be gone (store failure); nothing else to tell.
                        let _ = events_tx
                            .send(Delivered::Event(NormalizedEvent::TurnCompleted(outcome)))
                            .await;
                        return;
                    }
                }
            }
        });
        Ok(AcpRunner {
            client,
            canceller,
            startup,
            session_id,
            prompt: Some(prompt_tx),
            events: events_rx,
            observed,
            idle_timeout,
            cancel_due: None,
            max_line_bytes,
            task,
        })
    }

    /// The events of the setup (session started, not resumed), to record before the prompt is sent.
    pub(crate) fn take_startup_events(&mut self) -> Vec<NormalizedEvent> {
        std::mem::take(&mut self.startup)
    }

    /// Sends `session/prompt`.
    pub(crate) async fn send(&mut self, blocks: &[ContentBlock]) -> Result<(), (String, String)> {
        let failed = |detail: String| (codes::AGENT_EXITED_MID_TURN.to_owned(), detail);
        let Some(prompt) = self.prompt.take() else {
            return Err(failed("a prompt was already sent".to_owned()));
        };
        let (sent_tx, sent_rx) = oneshot::channel();
        if prompt.send((prompt_blocks(blocks), sent_tx)).is_err() {
            return Err(failed("the session task ended".to_owned()));
        }
        match sent_rx.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => match error_status(&e) {
                TurnStatus::Failed { code, detail } => Err((code, detail.unwrap_or_default())),
                TurnStatus::Success => Err(failed(e.to_string())),
            },
            Err(_) => Err(failed("the session task ended".to_owned())),
        }
    }

    /// The next event; `None` when the session task ended without an outcome.
    pub(crate) async fn next_event(&mut self) -> Option<NormalizedEvent> {
        let event = self.next_event_inner().await;
        // A message over the line limit was discarded by the connection (the agent broke the limit): the turn
        // fails with the AWP code, whatever the agent answered after it.
        match event {
            Some(NormalizedEvent::TurnCompleted(mut outcome))
                if self.client.stats().rpc.too_long_lines > 0 =>
            {
                outcome.status = TurnStatus::Failed {
                    code: codes::STDOUT_LINE_TOO_LONG.to_owned(),
                    detail: Some(format!(
                        "a JSON-RPC message over {} bytes was discarded",
                        self.max_line_bytes
                    )),
                };
                Some(NormalizedEvent::TurnCompleted(outcome))
            }
            other => other,
        }
    }

    async fn next_event_inner(&mut self) -> Option<NormalizedEvent> {
        let event = self.next_delivered_event().await;
        if matches!(event, None | Some(NormalizedEvent::TurnCompleted(_))) {
            // The turn is over: a later permission question has nothing left to wait for.
            self.observed.send_replace(u64::MAX);
        }
        event
    }

    /// The next event from the session task. Being asked for it means every event returned before was handed to
    /// the observer: each `Taken` mark passed on the way is published to [`RenderGate`].
    async fn next_delivered_event(&mut self) -> Option<NormalizedEvent> {
        loop {
            let idle_due = self
                .idle_timeout
                .map(|idle| tokio::time::Instant::now() + idle);
            let delivered = tokio::select! {
                delivered = self.events.recv() => delivered,
                () = due(idle_due) => {
                    self.cancel().await;
                    let mut outcome =
                        TurnOutcome::new(TurnStatus::failed(codes::AGENT_IDLE_TIMEOUT));
                    outcome.session_id = self.session_id.clone();
                    self.idle_timeout = None;
                    return Some(NormalizedEvent::TurnCompleted(outcome));
                }
                () = due(self.cancel_due) => {
                    // The agent ignored session/cancel: the stop ladder ends it (and the turn).
                    self.cancel_due = None;
                    self.client.stop(StopPlan::default()).await;
                    let mut outcome = TurnOutcome::new(TurnStatus::Failed {
                        code: codes::CANCELLED.to_owned(),
                        detail: Some(CANCEL_NOT_ANSWERED.to_owned()),
                    });
                    outcome.session_id = self.session_id.clone();
                    return Some(NormalizedEvent::TurnCompleted(outcome));
                }
            };
            match delivered? {
                Delivered::Event(event) => return Some(event),
                Delivered::Taken(taken) => {
                    self.observed.send_replace(taken);
                }
            }
        }
    }

    /// Cancels the turn: `session/cancel`, pending permission requests answered `cancelled`; the turn then ends
    /// `cancelled` whatever the agent answers, and at the latest [`CANCEL_GRACE`] later (the agent is stopped).
    pub(crate) async fn cancel(&mut self) {
        if self.cancel_due.is_none() {
            self.cancel_due = Some(tokio::time::Instant::now() + CANCEL_GRACE);
        }
        // Bounded: an agent that reads nothing can keep the notification from being queued.
        match tokio::time::timeout(CANCEL_GRACE, self.canceller.cancel()).await {
            Ok(Ok(_)) => {}
            // The agent is gone; the turn ends (cancelled) when its connection closes.
            Ok(Err(e)) => tracing::debug!("session/cancel not sent: {e}"),
            Err(_) => tracing::debug!("session/cancel not queued within the cancel grace"),
        }
    }

    /// Stops the agent (stdin EOF → grace → SIGTERM → SIGKILL to its process group); returns its stderr tail.
    pub(crate) async fn finish(self) -> String {
        self.client.stop(StopPlan::default()).await;
        self.task.abort();
        match self.client.child() {
            Some(child) => {
                let (bytes, _) = child.stderr_tail().snapshot();
                String::from_utf8_lossy(&bytes).into_owned()
            }
            None => String::new(),
        }
    }
}

/// Resolves at `deadline`; never when it is `None`.
async fn due(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending::<()>().await,
    }
}

/// Stops the agent of a setup that ended without a session (stop ladder) and says why, with what it left.
async fn failed_start(client: &Client, end: SetupEnd) -> StartFailure {
    let stopped = client.stop(StopPlan::default()).await;
    let exit = stopped.map(
        |stopped| match (stopped.status.code, stopped.status.signal) {
            (Some(code), _) => format!("exit code {code}"),
            (None, Some(signal)) => format!("signal {signal}"),
            (None, None) => "exit status unknown".to_owned(),
        },
    );
    let mut failure = match end {
        SetupEnd::NoAnswer(step, limit) => StartFailure::new(
            crate::turn::FIRST_OUTPUT_TIMEOUT,
            format!(
                "no answer to `{step}` {} s after it was sent",
                limit.as_secs()
            ),
        ),
        SetupEnd::Cancelled(step) => StartFailure::new(
            codes::CANCELLED,
            format!("cancelled while the agent was starting (no answer to `{step}` yet)"),
        ),
        SetupEnd::Failed(step, AcpError::ConnectionClosed) => StartFailure::new(
            codes::AGENT_EXITED_MID_TURN,
            match &exit {
                Some(exit) => format!("the agent exited before answering `{step}` ({exit})"),
                None => format!("the agent closed the connection before answering `{step}`"),
            },
        ),
        SetupEnd::Failed(_, e) => match error_status(&e) {
            TurnStatus::Failed { code, detail } => {
                StartFailure::new(&code, detail.unwrap_or_default())
            }
            TurnStatus::Success => StartFailure::new(codes::AGENT_ERROR, e.to_string()),
        },
    };
    if let Some(child) = client.child() {
        let (bytes, _) = child.stderr_tail().snapshot();
        failure.stderr_tail = String::from_utf8_lossy(&bytes).into_owned();
    }
    failure.invalid_lines = client.stats().rpc.invalid_lines;
    failure.first_invalid_line = client.connection().first_invalid_line();
    failure
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn tool_use(id: &str) -> NormalizedEvent {
        NormalizedEvent::ToolUse {
            id: id.to_owned(),
            name: "t".to_owned(),
            input: Value::Null,
        }
    }

    #[test]
    fn a_permission_request_takes_kind_title_and_input_from_the_announced_tool_call() {
        use agentwire_acp::schema::{ToolCall, ToolCallUpdate, ToolKind};
        let announced = AnnouncedToolCalls::default();
        announced.observe(&SessionUpdate::ToolCall(
            ToolCall::new("call-1", "write hello.txt")
                .kind(ToolKind::Edit)
                .raw_input(json!({"path": "hello.txt"})),
        ));
        let bare = RequestPermissionRequest::new(
            "s1",
            ToolCallUpdate::new("call-1", ToolCallUpdateFields::new()),
            vec![],
        );
        let fields = announced.complete(bare).tool_call.fields;
        assert_eq!(fields.kind, Some(ToolKind::Edit));
        assert_eq!(fields.title.as_deref(), Some("write hello.txt"));
        assert_eq!(fields.raw_input, Some(json!({"path": "hello.txt"})));
        // What the request says itself wins; another id is left alone.
        let own = RequestPermissionRequest::new(
            "s1",
            ToolCallUpdate::new(
                "call-1",
                ToolCallUpdateFields::new().title("own title".to_owned()),
            ),
            vec![],
        );
        assert_eq!(
            announced.complete(own).tool_call.fields.title.as_deref(),
            Some("own title")
        );
        let other = RequestPermissionRequest::new(
            "s1",
            ToolCallUpdate::new("call-2", ToolCallUpdateFields::new()),
            vec![],
        );
        assert_eq!(announced.complete(other).tool_call.fields.kind, None);
    }

    #[test]
    fn a_repeated_tool_call_is_one_tool_use_up_to_the_tracking_limit() {
        let mut seen = ToolCallsSeen::default();
        assert_eq!(seen.dedupe(vec![tool_use("a")]), vec![tool_use("a")]);
        assert_eq!(
            seen.dedupe(vec![tool_use("a"), tool_use("b")]),
            vec![
                notice("tool_call_repeated", Some("a".into())),
                tool_use("b")
            ]
        );
        // Ids up to the limit are tracked; one past it is not (a repeat of it is shown again).
        for i in 2..MAX_TRACKED_TOOL_CALLS {
            seen.dedupe(vec![tool_use(&i.to_string())]);
        }
        let last = (MAX_TRACKED_TOOL_CALLS - 1).to_string();
        assert_eq!(
            seen.dedupe(vec![tool_use(&last)]),
            vec![notice("tool_call_repeated", Some(last.clone()))]
        );
        let past = "past".to_owned();
        assert_eq!(seen.dedupe(vec![tool_use(&past)]), vec![tool_use(&past)]);
        assert_eq!(seen.dedupe(vec![tool_use(&past)]), vec![tool_use(&past)]);
    }

    fn check(update: Value, expect: &[Value]) {
        let events = map_update(Update::from_value(update), 20);
        let got: Vec<Value> = events
            .iter()
            .map(|e| serde_json::to_value(e).unwrap_or(Value::Null))
            .collect();
        assert_eq!(got, expect);
    }

    #[test]
    fn updates_map_onto_normalized_events() {
        check(
            json!({"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"hi"}}),
            &[json!({"type":"text_delta","text":"hi"})],
        );
        check(
            json!({"sessionUpdate":"agent_thought_chunk","content":{"type":"text","text":"hm"}}),
            &[json!({"type":"thinking_delta","text":"hm"})],
        );
        check(
            json!({"sessionUpdate":"tool_call","toolCallId":"c1","title":"write a","kind":"edit","status":"pending"}),
            &[json!({"type":"tool_use","id":"c1","name":"write a","input":{"kind":"edit"}})],
        );
        check(
            json!({"sessionUpdate":"tool_call","toolCallId":"c1","title":"ls","rawInput":{"cmd":"ls"},"status":"completed"}),
            &[
                json!({"type":"tool_use","id":"c1","name":"ls","input":{"cmd":"ls"}}),
                json!({"type":"tool_result","tool_use_id":"c1","is_error":false,"summary":"completed","truncated":false}),
            ],
        );
        check(
            json!({"sessionUpdate":"tool_call_update","toolCallId":"c1","status":"failed","content":[{"type":"content","content":{"type":"text","text":"selected reject"}}]}),
            &[
                json!({"type":"tool_result","tool_use_id":"c1","is_error":true,"summary":"selected reject","truncated":false}),
            ],
        );
        // At the limit (20 chars) and one past it.
        check(
            json!({"sessionUpdate":"tool_call_update","toolCallId":"c1","status":"completed","content":[{"type":"content","content":{"type":"text","text":"x".repeat(20)}}]}),
            &[
                json!({"type":"tool_result","tool_use_id":"c1","is_error":false,"summary":"x".repeat(20),"truncated":false}),
            ],
        );
        check(
            json!({"sessionUpdate":"tool_call_update","toolCallId":"c1","status":"completed","content":[{"type":"content","content":{"type":"text","text":"x".repeat(21)}}]}),
            &[
                json!({"type":"tool_result","tool_use_id":"c1","is_error":false,"summary":format!("{}…", "x".repeat(19)),"truncated":true}),
            ],
        );
        check(
            json!({"sessionUpdate":"tool_call_update","toolCallId":"c1","status":"in_progress"}),
            &[json!({"type":"notice","kind":"tool_call_update","detail":"c1 in_progress"})],
        );
        check(
            json!({"sessionUpdate":"plan","entries":[]}),
            &[json!({"type":"notice","kind":"plan"})],
        );
        check(
            json!({"sessionUpdate":"usage_update","used":1200,"size":200000}),
            &[json!({"type":"notice","kind":"usage_update","detail":"used 1200 of 200000 tokens"})],
        );
        check(
            json!({"sessionUpdate":"usage_update","used":5,"size":9,"cost":{"amount":0.25,"currency":"EUR"}}),
            &[
                json!({"type":"notice","kind":"usage_update","detail":"used 5 of 9 tokens, cost 0.25 EUR"}),
            ],
        );
        // Titles are bounded like summaries; a cleared title (null) has no detail.
        check(
            json!({"sessionUpdate":"session_info_update","title":"x".repeat(21)}),
            &[
                json!({"type":"notice","kind":"session_info_update","detail":format!("{}…", "x".repeat(19))}),
            ],
        );
        check(
            json!({"sessionUpdate":"session_info_update","title":null}),
            &[json!({"type":"notice","kind":"session_info_update"})],
        );
        check(
            json!({"sessionUpdate":"future_thing"}),
            &[
                json!({"type":"notice","kind":"future_thing","detail":"not understood by the ACP v1 types"}),
            ],
        );
    }

    #[test]
    fn usage_updates_become_input_tokens() {
        let update: UsageUpdate =
            serde_json::from_value(json!({"used": 4096, "size": 200000})).expect("usage");
        let usage = usage_of(&update);
        assert_eq!((usage.input_tokens, usage.output_tokens), (4096, 0));
        assert_eq!(usage.cache_read_input_tokens, None);
    }

    fn code(status: TurnStatus) -> String {
        match status {
            TurnStatus::Success => "success".to_owned(),
            TurnStatus::Failed { code, .. } => code,
        }
    }

    #[test]
    fn stop_reasons_and_errors_map_to_run_statuses() {
        assert_eq!(code(stop_status(&StopReason::EndTurn)), "success");
        assert_eq!(code(stop_status(&StopReason::Cancelled)), "cancelled");
        assert_eq!(code(stop_status(&StopReason::Refusal)), "refusal");
        assert_eq!(code(stop_status(&StopReason::MaxTokens)), "max_tokens");
        assert_eq!(
            code(stop_status(&StopReason::MaxTurnRequests)),
            "max_turn_requests"
        );
        assert_eq!(
            code(error_status(&AcpError::ConnectionClosed)),
            "agent_exited_mid_turn"
        );
        assert_eq!(
            code(error_status(&AcpError::TurnFailed {
                message: "x".to_owned()
            })),
            "agent_error"
        );
    }

    fn choose(kinds: &[PermissionOptionKind], allow: bool) -> String {
        let options: Vec<PermissionOption> = kinds
            .iter()
            .enumerate()
            .map(|(i, kind)| PermissionOption::new(format!("o{i}"), format!("option {i}"), *kind))
            .collect();
        let outcome = if allow {
            allow_outcome(&options).unwrap_or_else(|| reject_outcome(&options))
        } else {
            reject_outcome(&options)
        };
        match outcome {
            RequestPermissionOutcome::Selected(s) => s.option_id.to_string(),
            _ => "cancelled".to_owned(),
        }
    }

    #[test]
    fn permission_choices() {
        use PermissionOptionKind::*;
        assert_eq!(choose(&[AllowAlways, AllowOnce, RejectOnce], true), "o1");
        assert_eq!(choose(&[RejectOnce, AllowAlways], true), "o1");
        assert_eq!(choose(&[RejectAlways, RejectOnce], true), "o1");
        assert_eq!(choose(&[], true), "cancelled");
        assert_eq!(choose(&[AllowOnce, RejectAlways], false), "o1");
        assert_eq!(choose(&[AllowOnce, AllowAlways], false), "cancelled");
    }
}
