//! `sessions.runDetached`, `runs.get`, `runs.cancel`, `events.subscribe` and the run stream events.
//!
//! Source: DeepChat `src/shared/contracts/routes/runs.routes.ts` (params/results),
//! `src/shared/contracts/events/runs.events.ts` (stream record `data`), `src/shared/contracts/common.ts`
//! (`EntityIdSchema` = non-empty string, `SessionStatusSchema`, `MessagePageCursorSchema`).
//! In agentwire a DeepChat session is a thread, `agentId` names a configured agent, `projectDir` is the
//! agent's working directory and `modelId` is passed as the agent's model.

use serde::{Deserialize, Serialize};

use super::serde_util::{double_option, nullable, present, trim_js, trimmed_list_opt, trimmed_opt};
use super::{ContractError, Method, Problem, Validate, check_len, check_range, js_len};

/// Longest prompt, UTF-16 code units (`RUN_PROMPT_MAX_CHARACTERS`, 256 Ki).
pub const RUN_PROMPT_MAX_CHARACTERS: usize = 256 * 1024;
/// Longest system prompt, UTF-16 code units (`RUN_SYSTEM_PROMPT_MAX_CHARACTERS`).
pub const RUN_SYSTEM_PROMPT_MAX_CHARACTERS: usize = 256 * 1024;
/// Longest message text in a snapshot, UTF-8 bytes (`RUN_MESSAGE_MAX_TEXT_BYTES`, 128 KiB); longer text is
/// cut by the server and flagged `textTruncated`.
pub const RUN_MESSAGE_MAX_TEXT_BYTES: usize = 128 * 1024;
/// Most messages per page (`RUN_MAX_MESSAGE_PAGE_SIZE`).
pub const RUN_MAX_MESSAGE_PAGE_SIZE: u32 = 100;
/// Longest run id, characters (`RunIdSchema` = `EntityIdSchema.max(128)`).
pub const RUN_ID_MAX_CHARACTERS: usize = 128;
/// Longest event cursor we accept, characters (DeepChat's CLI bounds `--cursor` at 4096).
pub const EVENT_CURSOR_MAX_CHARACTERS: usize = 4096;

/// `RunIdSchema`: 1..=128 characters.
///
/// # Errors
/// [`Problem::TooShort`]/[`Problem::TooLong`] on `field`.
pub fn check_run_id(field: &'static str, id: &str) -> Result<(), ContractError> {
    check_len(field, id, 1, RUN_ID_MAX_CHARACTERS)
}

/// Event cursor `^[A-Za-z0-9_-]+:(0|[1-9][0-9]*)$` (stream incarnation : offset, offset a `u64`, as
/// [`crate::envelope::Cursor::parse`] reads it), ≤ 4096 characters.
pub fn is_event_cursor(cursor: &str) -> bool {
    cursor.len() <= EVENT_CURSOR_MAX_CHARACTERS && crate::envelope::Cursor::parse(cursor).is_some()
}

/// Session state (`SessionStatusSchema`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SessionStatus {
    /// No turn running.
    Idle,
    /// A turn is running.
    Generating,
    /// The last turn failed.
    Error,
}

/// Coarse run phase (`PublicRunPhaseSchema`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunPhase {
    /// Working.
    Running,
    /// Waiting for a renderer decision or answer.
    AwaitingInteraction,
    /// Finished (success, failure or cancel).
    Terminal,
}

/// Keyset cursor of message pages (`MessagePageCursorSchema`, plain object): `{"orderSeq":12,"id":"m-12"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MessagePageCursor {
    /// Order sequence of the last message seen.
    pub order_seq: i64,
    /// Its id (non-empty).
    pub id: String,
}

fn check_entity(field: &'static str, id: &str) -> Result<(), ContractError> {
    check_len(field, id, 1, usize::MAX)
}

fn check_bounded_identifier(field: &'static str, id: &str) -> Result<(), ContractError> {
    check_len(field, id, 1, 256)
}

fn check_identifier_list(field: &'static str, list: &[String]) -> Result<(), ContractError> {
    if list.len() > 128 {
        return Err(ContractError::field(field, Problem::TooLong));
    }
    let mut seen = std::collections::HashSet::with_capacity(list.len());
    for item in list {
        check_bounded_identifier(field, item)?;
        if !seen.insert(item.as_str()) {
            return Err(ContractError::field(field, Problem::Duplicate));
        }
    }
    Ok(())
}

/// Params of `sessions.runDetached` (strict).
///
/// `{"prompt":"Summarize the repo","agentId":"awp-agent","projectDir":"/src/app","modelId":"gpt-4o","maxTurns":4}`
///
/// Identifiers, `title` and `projectDir` are trimmed on decode (zod `.trim()`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RunDetachedParams {
    /// 1..=262144 UTF-16 units, not blank.
    pub prompt: String,
    /// Agent name, 1..=256 after trim.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "trimmed_opt"
    )]
    pub agent_id: Option<String>,
    /// Thread title, 1..=512 after trim.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "trimmed_opt"
    )]
    pub title: Option<String>,
    /// Working directory, 1..=4096 after trim, no NUL.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "trimmed_opt"
    )]
    pub project_dir: Option<String>,
    /// Provider id, 1..=256 after trim.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "trimmed_opt"
    )]
    pub provider_id: Option<String>,
    /// Model id, 1..=256 after trim.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "trimmed_opt"
    )]
    pub model_id: Option<String>,
    /// System prompt override, ≤ 262144 UTF-16 units (may be empty).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub system_prompt: Option<String>,
    /// Skills to activate: ≤ 128 unique identifiers.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "trimmed_list_opt"
    )]
    pub active_skills: Option<Vec<String>>,
    /// Tools to disable: ≤ 128 unique identifiers.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "trimmed_list_opt"
    )]
    pub disabled_agent_tools: Option<Vec<String>>,
    /// Provider rounds, 1..=100.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub max_turns: Option<u32>,
}

impl Validate for RunDetachedParams {
    fn validate(&self) -> Result<(), ContractError> {
        check_len("prompt", &self.prompt, 1, RUN_PROMPT_MAX_CHARACTERS)?;
        if trim_js(&self.prompt).is_empty() {
            return Err(ContractError::field("prompt", Problem::Blank));
        }
        if let Some(v) = &self.agent_id {
            check_bounded_identifier("agentId", v)?;
        }
        if let Some(v) = &self.title {
            check_len("title", v, 1, 512)?;
        }
        if let Some(v) = &self.project_dir {
            check_len("projectDir", v, 1, 4096)?;
            if v.contains('\0') {
                return Err(ContractError::field("projectDir", Problem::BadFormat));
            }
        }
        if let Some(v) = &self.provider_id {
            check_bounded_identifier("providerId", v)?;
        }
        if let Some(v) = &self.model_id {
            check_bounded_identifier("modelId", v)?;
        }
        if let Some(v) = &self.system_prompt {
            check_len("systemPrompt", v, 0, RUN_SYSTEM_PROMPT_MAX_CHARACTERS)?;
        }
        if let Some(v) = &self.active_skills {
            check_identifier_list("activeSkills", v)?;
        }
        if let Some(v) = &self.disabled_agent_tools {
            check_identifier_list("disabledAgentTools", v)?;
        }
        if let Some(v) = self.max_turns {
            check_range("maxTurns", v, 1, 100)?;
        }
        Ok(())
    }
}

/// Result of `sessions.runDetached` (strict): the durable run, returned before the turn ends.
///
/// `{"runId":"run-1","sessionId":"thr-1","status":"generating","requestId":null,"messageId":null,"createdAt":1767225600000}`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RunDetachedResult {
    /// Durable run id.
    pub run_id: String,
    /// The thread (DeepChat session) it runs in.
    pub session_id: String,
    /// Session state.
    pub status: SessionStatus,
    /// Turn request id once accepted, else `null`.
    #[serde(deserialize_with = "nullable")]
    pub request_id: Option<String>,
    /// User message id once stored, else `null`.
    #[serde(deserialize_with = "nullable")]
    pub message_id: Option<String>,
    /// Creation, Unix ms.
    pub created_at: u64,
}

impl Validate for RunDetachedResult {
    fn validate(&self) -> Result<(), ContractError> {
        check_run_id("runId", &self.run_id)?;
        check_entity("sessionId", &self.session_id)?;
        if let Some(v) = &self.request_id {
            check_entity("requestId", v)?;
        }
        if let Some(v) = &self.message_id {
            check_entity("messageId", v)?;
        }
        Ok(())
    }
}

/// Params of `runs.get` (strict): `{"runId":"run-1","cursor":null,"limit":20}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RunGetParams {
    /// Run id.
    pub run_id: String,
    /// Page cursor: absent, `null` (newest page) or a cursor.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "double_option"
    )]
    pub cursor: Option<Option<MessagePageCursor>>,
    /// Page size, 1..=100.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub limit: Option<u32>,
}

impl RunGetParams {
    /// First page of `run_id`.
    pub fn new(run_id: impl Into<String>) -> Self {
        RunGetParams {
            run_id: run_id.into(),
            cursor: None,
            limit: None,
        }
    }
}

fn check_cursor(cursor: &MessagePageCursor) -> Result<(), ContractError> {
    check_entity("cursor.id", &cursor.id)
}

impl Validate for RunGetParams {
    fn validate(&self) -> Result<(), ContractError> {
        check_run_id("runId", &self.run_id)?;
        if let Some(Some(c)) = &self.cursor {
            check_cursor(c)?;
        }
        if let Some(v) = self.limit {
            check_range("limit", v, 1, RUN_MAX_MESSAGE_PAGE_SIZE)?;
        }
        Ok(())
    }
}

/// Author of a run message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MessageRole {
    /// The prompt.
    User,
    /// The agent's answer.
    Assistant,
}

/// Delivery state of a run message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MessageStatus {
    /// Still streaming.
    Pending,
    /// Complete.
    Sent,
    /// Failed.
    Error,
}

/// One message of a run snapshot (`PublicRunMessageSchema`, strict).
///
/// `{"id":"m-1","role":"assistant","status":"sent","text":"Done.","textTruncated":false,"createdAt":1,"updatedAt":2}`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RunMessage {
    /// Message id.
    pub id: String,
    /// Author.
    pub role: MessageRole,
    /// Delivery state.
    pub status: MessageStatus,
    /// Text, ≤ 128 KiB UTF-8.
    pub text: String,
    /// True when `text` was cut to the limit.
    pub text_truncated: bool,
    /// Unix ms.
    pub created_at: u64,
    /// Unix ms.
    pub updated_at: u64,
}

impl Validate for RunMessage {
    fn validate(&self) -> Result<(), ContractError> {
        check_entity("messages[].id", &self.id)?;
        if self.text.len() > RUN_MESSAGE_MAX_TEXT_BYTES {
            return Err(ContractError::field("messages[].text", Problem::TooLong));
        }
        Ok(())
    }
}

/// `text` cut to at most [`RUN_MESSAGE_MAX_TEXT_BYTES`] on a character boundary, and whether it was cut.
pub fn truncate_message_text(text: &str) -> (&str, bool) {
    if text.len() <= RUN_MESSAGE_MAX_TEXT_BYTES {
        return (text, false);
    }
    let mut end = RUN_MESSAGE_MAX_TEXT_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    (&text[..end], true)
}

/// Result of `runs.get` (`PublicRunSnapshotSchema`, strict).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RunSnapshot {
    /// Run id.
    pub run_id: String,
    /// Thread (session) id.
    pub session_id: String,
    /// Agent name.
    pub agent_id: String,
    /// Thread title.
    pub title: String,
    /// Session state.
    pub status: SessionStatus,
    /// Run phase.
    pub phase: RunPhase,
    /// Provider id (empty when the agent chooses).
    pub provider_id: String,
    /// Model id (empty when the agent chooses).
    pub model_id: String,
    /// Unix ms.
    pub created_at: u64,
    /// Unix ms.
    pub updated_at: u64,
    /// Newest-first page, ≤ 100 messages.
    pub messages: Vec<RunMessage>,
    /// Cursor of the next older page, `null` when none.
    #[serde(deserialize_with = "nullable")]
    pub next_cursor: Option<MessagePageCursor>,
    /// True when older messages exist.
    pub has_more: bool,
    /// Why a terminal run stopped (`PublicRunStopReasonSchema`, 1..=128 characters), absent while it runs.
    /// This host says `completed`, `cancelled`, or the failure's code (`agent_exited_mid_turn`, `host_interrupted`…).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub stop_reason: Option<String>,
}

impl Validate for RunSnapshot {
    fn validate(&self) -> Result<(), ContractError> {
        if let Some(reason) = &self.stop_reason {
            check_len("stopReason", reason, 1, 128)?;
        }
        check_run_id("runId", &self.run_id)?;
        check_entity("sessionId", &self.session_id)?;
        check_entity("agentId", &self.agent_id)?;
        if self.messages.len() > RUN_MAX_MESSAGE_PAGE_SIZE as usize {
            return Err(ContractError::field("messages", Problem::TooLong));
        }
        self.messages.iter().try_for_each(Validate::validate)?;
        if let Some(c) = &self.next_cursor {
            check_cursor(c)?;
        }
        Ok(())
    }
}

/// Params of `runs.cancel` (strict): `{"runId":"run-1"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RunIdParams {
    /// Run id.
    pub run_id: String,
}

impl Validate for RunIdParams {
    fn validate(&self) -> Result<(), ContractError> {
        check_run_id("runId", &self.run_id)
    }
}

/// Result of `runs.cancel` (strict): `{"runId":"run-1","cancelRequested":true,"status":"generating"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RunCancelResult {
    /// Run id.
    pub run_id: String,
    /// False when the run had already ended.
    pub cancel_requested: bool,
    /// Session state after the request.
    pub status: SessionStatus,
}

impl Validate for RunCancelResult {
    fn validate(&self) -> Result<(), ContractError> {
        check_run_id("runId", &self.run_id)
    }
}

/// Params of `events.subscribe` (strict): `{"runId":"run-1","cursor":"k3x:17","messageLimit":20}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SubscribeParams {
    /// Run id.
    pub run_id: String,
    /// Resume after this event cursor.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub cursor: Option<String>,
    /// Messages in a recovery snapshot, 1..=100.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub message_limit: Option<u32>,
}

impl Validate for SubscribeParams {
    fn validate(&self) -> Result<(), ContractError> {
        check_run_id("runId", &self.run_id)?;
        if let Some(c) = &self.cursor
            && !is_event_cursor(c)
        {
            return Err(ContractError::field("cursor", Problem::BadFormat));
        }
        if let Some(v) = self.message_limit {
            check_range("messageLimit", v, 1, RUN_MAX_MESSAGE_PAGE_SIZE)?;
        }
        Ok(())
    }
}

/// Terminal result of `events.subscribe` (strict): `{"runId":"run-1","lastCursor":"k3x:42"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SubscribeResult {
    /// Run id.
    pub run_id: String,
    /// Cursor of the last event sent; resume from it.
    pub last_cursor: String,
    /// The run's state when the stream ended (DeepChat: optional).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub status: Option<SessionStatus>,
    /// Why the run stopped, when it is terminal (DeepChat: optional).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub stop_reason: Option<String>,
}

impl Validate for SubscribeResult {
    fn validate(&self) -> Result<(), ContractError> {
        check_run_id("runId", &self.run_id)?;
        if !is_event_cursor(&self.last_cursor) {
            return Err(ContractError::field("lastCursor", Problem::BadFormat));
        }
        Ok(())
    }
}

/// `sessions.runDetached`: [`RunDetachedParams`] → [`RunDetachedResult`].
#[derive(Debug, Clone, Copy)]
pub struct RunDetached;
impl Method for RunDetached {
    const NAME: &'static str = "sessions.runDetached";
    type Params = RunDetachedParams;
    type Result = RunDetachedResult;
}

/// `runs.get`: [`RunGetParams`] → [`RunSnapshot`].
#[derive(Debug, Clone, Copy)]
pub struct Get;
impl Method for Get {
    const NAME: &'static str = "runs.get";
    type Params = RunGetParams;
    type Result = RunSnapshot;
}

/// `runs.cancel`: [`RunIdParams`] → [`RunCancelResult`].
#[derive(Debug, Clone, Copy)]
pub struct Cancel;
impl Method for Cancel {
    const NAME: &'static str = "runs.cancel";
    type Params = RunIdParams;
    type Result = RunCancelResult;
}

/// `events.subscribe` (stream): [`SubscribeParams`] → records ([`RunEvent`]) then [`SubscribeResult`].
#[derive(Debug, Clone, Copy)]
pub struct Subscribe;
impl Method for Subscribe {
    const NAME: &'static str = "events.subscribe";
    type Params = SubscribeParams;
    type Result = SubscribeResult;
}

/// `data` of `runs.created` (strict).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RunCreated {
    /// Run id.
    pub run_id: String,
    /// Thread id.
    pub session_id: String,
    /// Session state.
    pub status: SessionStatus,
    /// Unix ms.
    pub created_at: u64,
}

/// `data` of `runs.turn.accepted` (strict).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TurnAccepted {
    /// Run id.
    pub run_id: String,
    /// Thread id.
    pub session_id: String,
    /// Turn request id or `null`.
    #[serde(deserialize_with = "nullable")]
    pub request_id: Option<String>,
    /// User message id or `null`.
    #[serde(deserialize_with = "nullable")]
    pub message_id: Option<String>,
    /// Unix ms.
    pub accepted_at: u64,
}

/// `data` of `runs.turn.failed` (strict); `error` is 1..=4096 characters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TurnFailed {
    /// Run id.
    pub run_id: String,
    /// Thread id.
    pub session_id: String,
    /// Unix ms.
    pub failed_at: u64,
    /// Redacted reason.
    pub error: String,
}

/// `data` of `runs.cancel.requested` (strict).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CancelRequested {
    /// Run id.
    pub run_id: String,
    /// Thread id.
    pub session_id: String,
    /// Unix ms.
    pub requested_at: u64,
}

/// Why a `runs.snapshot` was sent instead of replayed events (`RunEventRecoveryReasonSchema`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecoveryReason {
    /// No cursor given.
    CursorMissing,
    /// The cursor's events are gone.
    CursorExpired,
    /// The cursor is beyond the stream.
    CursorAhead,
    /// The cursor belongs to an earlier server incarnation.
    ServerRestarted,
}

/// `data` of `runs.snapshot` (strict); `cursor` must equal the record's `cursor`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RunSnapshotEvent {
    /// Cursor this snapshot stands for.
    pub cursor: String,
    /// Why it was sent.
    pub recovery_reason: RecoveryReason,
    /// The run.
    pub run: RunSnapshot,
}

/// `data` of `chat.stream.updated` (DeepChat `src/shared/contracts/events/chat.events.ts`; plain object,
/// unknown keys dropped). `blocks` are DeepChat's assistant message blocks, passed through untyped.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChatStreamUpdated {
    /// Always `snapshot`.
    pub kind: SnapshotKind,
    /// Turn request id.
    pub request_id: String,
    /// Thread id.
    pub session_id: String,
    /// Assistant message id.
    pub message_id: String,
    /// Provider id.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub provider_id: Option<String>,
    /// Model id.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub model_id: Option<String>,
    /// Unix ms.
    pub updated_at: u64,
    /// The message blocks so far (DeepChat `AssistantMessageBlockSchema`, not typed here).
    pub blocks: Vec<serde_json::Value>,
}

/// The literal `snapshot`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SnapshotKind {
    /// `snapshot`
    Snapshot,
}

/// `data` of `chat.stream.completed` (plain object).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChatStreamCompleted {
    /// Turn request id.
    pub request_id: String,
    /// Thread id.
    pub session_id: String,
    /// Assistant message id.
    pub message_id: String,
    /// Unix ms.
    pub completed_at: u64,
}

/// `data` of `chat.stream.failed` (plain object).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChatStreamFailed {
    /// Turn request id.
    pub request_id: String,
    /// Thread id.
    pub session_id: String,
    /// Assistant message id.
    pub message_id: String,
    /// Unix ms.
    pub failed_at: u64,
    /// Redacted reason.
    pub error: String,
}

/// `data` of `sessions.status.changed` (DeepChat `src/shared/contracts/events/sessions.events.ts`; plain object).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionStatusChanged {
    /// Thread id.
    pub session_id: String,
    /// New state.
    pub status: SessionStatus,
    /// Monotonic version.
    pub version: i64,
}

/// Compaction state of a thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CompactionStatus {
    /// Nothing compacted.
    Idle,
    /// Compacting now.
    Compacting,
    /// Compacted.
    Compacted,
}

/// `data` of `sessions.compaction.changed` (plain object).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionCompactionChanged {
    /// State.
    pub status: CompactionStatus,
    /// First order sequence kept (positive).
    pub cursor_order_seq: i64,
    /// Unix ms of the summary, `null` when none.
    #[serde(deserialize_with = "nullable")]
    pub summary_updated_at: Option<u64>,
    /// Thread id.
    pub session_id: String,
    /// Monotonic version.
    pub version: i64,
}

/// Names of the ACP session events DeepChat forwards on a run stream; their payloads are DeepChat's ACP
/// contracts and pass through untyped ([`RunEvent::Acp`]).
pub const ACP_RUN_STREAM_EVENT_NAMES: [&str; 3] = [
    "sessions.acp.modes.ready",
    "sessions.acp.commands.ready",
    "sessions.acp.configOptions.ready",
];

/// One `events.subscribe` stream record's `event` + `data`, typed (`RUN_STREAM_EVENT_NAMES` of DeepChat
/// `src/shared/contracts/events/runs.events.ts`). Decoding drops keys the contract does not name, so a
/// server-internal field never reaches the CLI's output.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum RunEvent {
    /// `runs.created`
    Created(RunCreated),
    /// `runs.turn.accepted`
    TurnAccepted(TurnAccepted),
    /// `runs.turn.failed`
    TurnFailed(TurnFailed),
    /// `runs.cancel.requested`
    CancelRequested(CancelRequested),
    /// `runs.snapshot`
    Snapshot(Box<RunSnapshotEvent>),
    /// `chat.stream.updated`
    ChatUpdated(ChatStreamUpdated),
    /// `chat.stream.completed`
    ChatCompleted(ChatStreamCompleted),
    /// `chat.stream.failed`
    ChatFailed(ChatStreamFailed),
    /// `sessions.status.changed`
    StatusChanged(SessionStatusChanged),
    /// `sessions.compaction.changed`
    CompactionChanged(SessionCompactionChanged),
    /// One of [`ACP_RUN_STREAM_EVENT_NAMES`], payload untyped.
    Acp {
        /// Event name.
        name: &'static str,
        /// Payload as sent.
        data: serde_json::Value,
    },
}

impl RunEvent {
    /// Decodes a record's `event` and `data`.
    ///
    /// # Errors
    /// [`ContractError::Shape`] for an unknown event name or a payload of the wrong shape,
    /// [`ContractError::Field`] for a broken limit.
    pub fn decode(event: &str, data: serde_json::Value) -> Result<RunEvent, ContractError> {
        fn de<T: serde::de::DeserializeOwned>(data: serde_json::Value) -> Result<T, ContractError> {
            serde_json::from_value(data).map_err(|e| ContractError::shape(&e))
        }
        let decoded = match event {
            "runs.created" => RunEvent::Created(de(data)?),
            "runs.turn.accepted" => RunEvent::TurnAccepted(de(data)?),
            "runs.turn.failed" => {
                let failed: TurnFailed = de(data)?;
                check_len("error", &failed.error, 1, 4096)?;
                RunEvent::TurnFailed(failed)
            }
            "runs.cancel.requested" => RunEvent::CancelRequested(de(data)?),
            "runs.snapshot" => {
                let snapshot: RunSnapshotEvent = de(data)?;
                if !is_event_cursor(&snapshot.cursor) {
                    return Err(ContractError::field("cursor", Problem::BadFormat));
                }
                snapshot.run.validate()?;
                RunEvent::Snapshot(Box::new(snapshot))
            }
            "chat.stream.updated" => RunEvent::ChatUpdated(de(data)?),
            "chat.stream.completed" => RunEvent::ChatCompleted(de(data)?),
            "chat.stream.failed" => RunEvent::ChatFailed(de(data)?),
            "sessions.status.changed" => RunEvent::StatusChanged(de(data)?),
            "sessions.compaction.changed" => RunEvent::CompactionChanged(de(data)?),
            other => match ACP_RUN_STREAM_EVENT_NAMES.iter().find(|n| **n == other) {
                Some(name) => RunEvent::Acp { name, data },
                None => {
                    return Err(ContractError::Shape {
                        detail: "unknown run stream event".into(),
                    });
                }
            },
        };
        Ok(decoded)
    }

    /// The wire event name.
    pub fn name(&self) -> &'static str {
        match self {
            RunEvent::Created(_) => "runs.created",
            RunEvent::TurnAccepted(_) => "runs.turn.accepted",
            RunEvent::TurnFailed(_) => "runs.turn.failed",
            RunEvent::CancelRequested(_) => "runs.cancel.requested",
            RunEvent::Snapshot(_) => "runs.snapshot",
            RunEvent::ChatUpdated(_) => "chat.stream.updated",
            RunEvent::ChatCompleted(_) => "chat.stream.completed",
            RunEvent::ChatFailed(_) => "chat.stream.failed",
            RunEvent::StatusChanged(_) => "sessions.status.changed",
            RunEvent::CompactionChanged(_) => "sessions.compaction.changed",
            RunEvent::Acp { name, .. } => name,
        }
    }

    /// The run a `runs.*` event names in its payload (`None` for forwarded chat/session events, whose
    /// payload carries no run id; the record's `runId` targets them).
    pub fn run_id(&self) -> Option<&str> {
        match self {
            RunEvent::Created(e) => Some(&e.run_id),
            RunEvent::TurnAccepted(e) => Some(&e.run_id),
            RunEvent::TurnFailed(e) => Some(&e.run_id),
            RunEvent::CancelRequested(e) => Some(&e.run_id),
            RunEvent::Snapshot(e) => Some(&e.run.run_id),
            _ => None,
        }
    }

    /// The `data` JSON of this event.
    pub fn data(&self) -> serde_json::Value {
        let value = match self {
            RunEvent::Created(e) => serde_json::to_value(e),
            RunEvent::TurnAccepted(e) => serde_json::to_value(e),
            RunEvent::TurnFailed(e) => serde_json::to_value(e),
            RunEvent::CancelRequested(e) => serde_json::to_value(e),
            RunEvent::Snapshot(e) => serde_json::to_value(e),
            RunEvent::ChatUpdated(e) => serde_json::to_value(e),
            RunEvent::ChatCompleted(e) => serde_json::to_value(e),
            RunEvent::ChatFailed(e) => serde_json::to_value(e),
            RunEvent::StatusChanged(e) => serde_json::to_value(e),
            RunEvent::CompactionChanged(e) => serde_json::to_value(e),
            RunEvent::Acp { data, .. } => return data.clone(),
        };
        // Serializing these plain structs cannot fail (string keys, no maps with non-string keys).
        value.unwrap_or(serde_json::Value::Null)
    }
}

/// Characters of `prompt` as DeepChat counts them (UTF-16 code units).
pub fn prompt_len(prompt: &str) -> usize {
    js_len(prompt)
}

/// Trims `value` as zod's `.trim()` would, for builders that construct params directly.
pub fn trim(value: &str) -> &str {
    trim_js(value)
}

#[cfg(test)]
mod tests {
    use super::super::decode_params;
    use super::*;
    use serde_json::json;

    #[test]
    fn prompt_limits() {
        let run = |p: String| decode_params::<RunDetached>(json!({ "prompt": p }));
        assert!(run("x".repeat(RUN_PROMPT_MAX_CHARACTERS)).is_ok());
        assert_eq!(
            run("x".repeat(RUN_PROMPT_MAX_CHARACTERS + 1))
                .unwrap_err()
                .code(),
            "too_long"
        );
        // An astral character is two UTF-16 units, as in JavaScript.
        assert_eq!(
            run("😀".repeat(RUN_PROMPT_MAX_CHARACTERS / 2 + 1))
                .unwrap_err()
                .code(),
            "too_long"
        );
        assert_eq!(run(String::new()).unwrap_err().code(), "too_short");
        assert_eq!(run(" \n\t".into()).unwrap_err().code(), "blank");
    }

    #[test]
    fn identifiers_are_trimmed_and_bounded() {
        let p = decode_params::<RunDetached>(
            json!({"prompt":"hi","agentId":"  awp-agent ","title":" t ","projectDir":" /w "}),
        )
        .unwrap();
        assert_eq!(p.agent_id.as_deref(), Some("awp-agent"));
        assert_eq!(p.title.as_deref(), Some("t"));
        assert_eq!(p.project_dir.as_deref(), Some("/w"));
        let bad = |v: serde_json::Value| decode_params::<RunDetached>(v).unwrap_err().code();
        assert_eq!(bad(json!({"prompt":"hi","agentId":"   "})), "too_short");
        assert!(
            decode_params::<RunDetached>(json!({"prompt":"hi","agentId":"a".repeat(256)})).is_ok()
        );
        assert_eq!(
            bad(json!({"prompt":"hi","agentId":"a".repeat(257)})),
            "too_long"
        );
        assert_eq!(
            bad(json!({"prompt":"hi","projectDir":"/a\u{0}b"})),
            "bad_format"
        );
        assert_eq!(bad(json!({"prompt":"hi","maxTurns":0})), "out_of_range");
        assert_eq!(bad(json!({"prompt":"hi","maxTurns":101})), "out_of_range");
        assert!(decode_params::<RunDetached>(json!({"prompt":"hi","maxTurns":100})).is_ok());
        assert_eq!(
            bad(json!({"prompt":"hi","activeSkills":["a","a"]})),
            "duplicate"
        );
        let many: Vec<String> = (0..129).map(|i| format!("s{i}")).collect();
        assert_eq!(bad(json!({"prompt":"hi","activeSkills":many})), "too_long");
        assert_eq!(bad(json!({"prompt":"hi","agentId":null})), "invalid_shape");
        assert_eq!(bad(json!({"prompt":"hi","unknown":1})), "invalid_shape");
    }

    #[test]
    fn run_get_cursor_absent_null_or_value() {
        let absent = decode_params::<Get>(json!({"runId":"r"})).unwrap();
        assert_eq!(absent.cursor, None);
        let null = decode_params::<Get>(json!({"runId":"r","cursor":null})).unwrap();
        assert_eq!(null.cursor, Some(None));
        assert_eq!(
            serde_json::to_value(&null).unwrap(),
            json!({"runId":"r","cursor":null})
        );
        let some =
            decode_params::<Get>(json!({"runId":"r","cursor":{"orderSeq":3,"id":"m"}})).unwrap();
        assert!(matches!(some.cursor, Some(Some(_))));
        assert!(decode_params::<Get>(json!({"runId":"r","limit":100})).is_ok());
        assert!(decode_params::<Get>(json!({"runId":"r","limit":101})).is_err());
        assert!(decode_params::<Get>(json!({"runId":"r","limit":0})).is_err());
        assert!(decode_params::<Get>(json!({"runId":"r".repeat(128)})).is_ok());
        assert!(decode_params::<Get>(json!({"runId":"r".repeat(129)})).is_err());
        assert!(decode_params::<Get>(json!({"runId":""})).is_err());
    }

    #[test]
    fn event_cursor_pattern() {
        for ok in ["a:0", "k3x_-:17", "Z:1234567890"] {
            assert!(is_event_cursor(ok), "{ok}");
        }
        assert!(is_event_cursor("a:18446744073709551615"));
        for bad in [
            "",
            ":1",
            "a:",
            "a:01",
            "a:-1",
            "a:1:2",
            "a b:1",
            "a:1x",
            "a:18446744073709551616",
        ] {
            assert!(!is_event_cursor(bad), "{bad}");
        }
        let at_limit = format!("{}:1", "a".repeat(EVENT_CURSOR_MAX_CHARACTERS - 2));
        assert!(is_event_cursor(&at_limit));
        let over = format!("{}:1", "a".repeat(EVENT_CURSOR_MAX_CHARACTERS - 1));
        assert!(!is_event_cursor(&over));
    }

    #[test]
    fn message_text_truncation_on_char_boundary() {
        let text = "é".repeat(RUN_MESSAGE_MAX_TEXT_BYTES);
        let (cut, truncated) = truncate_message_text(&text);
        assert!(truncated);
        assert!(cut.len() <= RUN_MESSAGE_MAX_TEXT_BYTES);
        let exact = "a".repeat(RUN_MESSAGE_MAX_TEXT_BYTES);
        assert_eq!(truncate_message_text(&exact), (exact.as_str(), false));
    }

    #[test]
    fn events_decode_by_name() {
        let created = RunEvent::decode(
            "runs.created",
            json!({"runId":"r","sessionId":"s","status":"generating","createdAt":1}),
        )
        .unwrap();
        assert_eq!(created.name(), "runs.created");
        assert_eq!(created.run_id(), Some("r"));
        let failed = RunEvent::decode(
            "runs.turn.failed",
            json!({"runId":"r","sessionId":"s","failedAt":1,"error":""}),
        );
        assert_eq!(failed.unwrap_err().code(), "too_short");
        let extra = RunEvent::decode(
            "runs.cancel.requested",
            json!({"runId":"r","sessionId":"s","requestedAt":1,"x":1}),
        );
        assert_eq!(extra.unwrap_err().code(), "invalid_shape");
        // A plain-object payload drops keys the contract does not name (DeepChat client test
        // "validates targeted run events": `internalSecret` must not be published).
        let status = RunEvent::decode(
            "sessions.status.changed",
            json!({"sessionId":"run-1","status":"idle","version":2,"internalSecret":"do-not-publish"}),
        )
        .unwrap();
        assert_eq!(
            status.data(),
            json!({"sessionId":"run-1","status":"idle","version":2})
        );
        let acp = RunEvent::decode("sessions.acp.modes.ready", json!({"any":"thing"})).unwrap();
        assert_eq!(acp.name(), "sessions.acp.modes.ready");
        assert_eq!(acp.data(), json!({"any":"thing"}));
        assert!(RunEvent::decode("approvals.closed", json!({})).is_err());
        assert!(RunEvent::decode("runs.unknown", json!({})).is_err());
    }
}
