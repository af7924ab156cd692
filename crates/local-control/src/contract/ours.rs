//! agentwire's additive methods: `threads.list`, `threads.get`, `approvals.listPending`,
//! `runs.exportTranscript`, `tools.list`, `tools.call`.
//!
//! These are **ours**, not DeepChat's: DeepChat has no such routes, so no DeepChat client calls them.
//! They follow the same conventions (camelCase, strict params, `null` for "known absent", limits checked
//! by [`Validate`]) and reuse DeepChat's shapes where one exists ([`RunMessage`], [`MessagePageCursor`],
//! [`ArtifactMetadata`]). A thread is what DeepChat calls a session; `threadId` is the same value as a
//! run's `sessionId`. Approvals are listed, never resolved: resolution is renderer-only.

use serde::{Deserialize, Serialize};

use super::artifacts::ArtifactMetadata;
use super::runs::{
    MessagePageCursor, RUN_MAX_MESSAGE_PAGE_SIZE, RunMessage, SessionStatus, check_run_id,
};
use super::serde_util::{double_option, nullable, present};
use super::{ContractError, Method, NoParams, Problem, Validate, check_len, check_range};

/// Longest opaque thread-list cursor, characters.
pub const THREAD_CURSOR_MAX_CHARACTERS: usize = 512;

/// Params of `threads.list` (strict): `{"limit":20,"agentId":"awp-agent","cursor":"opaque"}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ThreadListParams {
    /// Page size, 1..=100 (server default 20).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub limit: Option<u32>,
    /// Only threads of this agent, 1..=256 characters.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub agent_id: Option<String>,
    /// Opaque cursor from a previous page's `nextCursor`, 1..=512 characters.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub cursor: Option<String>,
}

impl Validate for ThreadListParams {
    fn validate(&self) -> Result<(), ContractError> {
        if let Some(v) = self.limit {
            check_range("limit", v, 1, RUN_MAX_MESSAGE_PAGE_SIZE)?;
        }
        if let Some(v) = &self.agent_id {
            check_len("agentId", v, 1, 256)?;
        }
        if let Some(v) = &self.cursor {
            check_len("cursor", v, 1, THREAD_CURSOR_MAX_CHARACTERS)?;
        }
        Ok(())
    }
}

/// One thread (strict).
///
/// `{"threadId":"thr-1","agentId":"awp-agent","title":"Fix the build","projectDir":"/src/app","status":"idle","runCount":3,"createdAt":1,"updatedAt":2}`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ThreadSummary {
    /// Thread id (= DeepChat `sessionId`).
    pub thread_id: String,
    /// Agent name.
    pub agent_id: String,
    /// Title (may be empty).
    pub title: String,
    /// Agent working directory, `null` when the host default was used.
    #[serde(deserialize_with = "nullable")]
    pub project_dir: Option<String>,
    /// State.
    pub status: SessionStatus,
    /// Runs (turns) so far.
    pub run_count: u64,
    /// Unix ms.
    pub created_at: u64,
    /// Unix ms.
    pub updated_at: u64,
}

impl Validate for ThreadSummary {
    fn validate(&self) -> Result<(), ContractError> {
        check_len("threadId", &self.thread_id, 1, 128)?;
        check_len("agentId", &self.agent_id, 1, 256)
    }
}

/// Result of `threads.list` (strict): newest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ThreadListResult {
    /// ≤ 100 threads.
    pub threads: Vec<ThreadSummary>,
    /// Cursor of the next page, `null` at the end.
    #[serde(deserialize_with = "nullable")]
    pub next_cursor: Option<String>,
}

impl Validate for ThreadListResult {
    fn validate(&self) -> Result<(), ContractError> {
        if self.threads.len() > RUN_MAX_MESSAGE_PAGE_SIZE as usize {
            return Err(ContractError::field("threads", Problem::TooLong));
        }
        self.threads.iter().try_for_each(Validate::validate)
    }
}

/// Params of `threads.get` (strict): `{"threadId":"thr-1","cursor":null,"limit":20}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ThreadGetParams {
    /// Thread id, 1..=128 characters.
    pub thread_id: String,
    /// Message page cursor as in `runs.get`: absent, `null` or a cursor.
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

impl Validate for ThreadGetParams {
    fn validate(&self) -> Result<(), ContractError> {
        check_len("threadId", &self.thread_id, 1, 128)?;
        if let Some(Some(c)) = &self.cursor {
            check_len("cursor.id", &c.id, 1, usize::MAX)?;
        }
        if let Some(v) = self.limit {
            check_range("limit", v, 1, RUN_MAX_MESSAGE_PAGE_SIZE)?;
        }
        Ok(())
    }
}

/// Result of `threads.get` (strict): the thread and a newest-first page of its messages.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ThreadGetResult {
    /// The thread.
    pub thread: ThreadSummary,
    /// ≤ 100 messages (DeepChat's run message shape).
    pub messages: Vec<RunMessage>,
    /// Cursor of the next older page, `null` when none.
    #[serde(deserialize_with = "nullable")]
    pub next_cursor: Option<MessagePageCursor>,
    /// True when older messages exist.
    pub has_more: bool,
}

impl Validate for ThreadGetResult {
    fn validate(&self) -> Result<(), ContractError> {
        self.thread.validate()?;
        if self.messages.len() > RUN_MAX_MESSAGE_PAGE_SIZE as usize {
            return Err(ContractError::field("messages", Problem::TooLong));
        }
        self.messages.iter().try_for_each(Validate::validate)
    }
}

/// One pending approval as the CLI may see it (strict): status only, no way to resolve it.
///
/// `{"approvalId":"apr-1","method":"settings.updatePublic","summary":"set fontSizeLevel","requestedAt":1,"expiresAt":2}`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PendingApproval {
    /// Approval id, 1..=128 characters.
    pub approval_id: String,
    /// The method waiting for a decision.
    pub method: String,
    /// Redacted one-line description, ≤ 1024 characters.
    pub summary: String,
    /// Unix ms.
    pub requested_at: u64,
    /// Unix ms; after it the request fails with `approval_timeout`.
    pub expires_at: u64,
}

impl Validate for PendingApproval {
    fn validate(&self) -> Result<(), ContractError> {
        check_len("approvalId", &self.approval_id, 1, 128)?;
        if !crate::envelope::is_valid_method(&self.method) {
            return Err(ContractError::field("method", Problem::BadFormat));
        }
        check_len("summary", &self.summary, 0, 1024)
    }
}

/// Result of `approvals.listPending` (strict): the caller's pending approvals, oldest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PendingApprovalsResult {
    /// Pending approvals.
    pub approvals: Vec<PendingApproval>,
    /// True when an approval renderer is attached (without one, sensitive mutations fail at once).
    pub renderer_attached: bool,
}

impl Validate for PendingApprovalsResult {
    fn validate(&self) -> Result<(), ContractError> {
        self.approvals.iter().try_for_each(Validate::validate)
    }
}

/// Transcript format.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TranscriptFormat {
    /// One JSON object per message (`application/x-ndjson`), the default.
    #[default]
    Jsonl,
    /// Human-readable Markdown (`text/markdown`).
    Markdown,
}

/// Params of `runs.exportTranscript` (strict): `{"runId":"run-1","format":"markdown"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExportTranscriptParams {
    /// Run id.
    pub run_id: String,
    /// Format (default `jsonl`).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub format: Option<TranscriptFormat>,
}

impl Validate for ExportTranscriptParams {
    fn validate(&self) -> Result<(), ContractError> {
        check_run_id("runId", &self.run_id)
    }
}

/// Result of `runs.exportTranscript` (strict): the transcript as an owned artifact, fetched with
/// `deepchat artifact get --id … --out …`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExportTranscriptResult {
    /// The artifact holding the transcript.
    pub artifact: ArtifactMetadata,
}

impl Validate for ExportTranscriptResult {
    fn validate(&self) -> Result<(), ContractError> {
        self.artifact.validate()
    }
}

/// Longest tool id, characters (agentproto ids are short kebab-case names).
pub const TOOL_ID_MAX_CHARACTERS: usize = 128;

/// One tool of the loaded app bundle (strict), from its TOOL.md.
///
/// `{"id":"echo","name":"Echo","description":"Prints its message back.","mutates":false,"inputSchema":{"type":"object"}}`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ToolSummary {
    /// Tool id (`id:` of TOOL.md), 1..=128 characters.
    pub id: String,
    /// Display name.
    pub name: String,
    /// One-line description.
    pub description: String,
    /// Whether the tool changes something (`mutates:`); `true` needs a console approval for humans and is
    /// refused to agents.
    pub mutates: bool,
    /// The tool's input JSON Schema (`inputs:`), `{}` when it declares none.
    pub input_schema: serde_json::Value,
}

impl Validate for ToolSummary {
    fn validate(&self) -> Result<(), ContractError> {
        check_len("id", &self.id, 1, TOOL_ID_MAX_CHARACTERS)
    }
}

/// Result of `tools.list` (strict): the loaded bundle's tools in id order; empty when the host loaded no app.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolListResult {
    /// The tools.
    pub tools: Vec<ToolSummary>,
}

impl Validate for ToolListResult {
    fn validate(&self) -> Result<(), ContractError> {
        self.tools.iter().try_for_each(Validate::validate)
    }
}

/// Params of `tools.call` (strict): `{"toolId":"echo","input":{"msg":"hi"}}`; `input` defaults to `{}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ToolCallParams {
    /// Tool id, 1..=128 characters.
    pub tool_id: String,
    /// The tool's input, checked against its schema by the driver (`input_invalid` in `details.code`).
    #[serde(default = "empty_object")]
    pub input: serde_json::Value,
}

fn empty_object() -> serde_json::Value {
    serde_json::Value::Object(serde_json::Map::new())
}

impl Validate for ToolCallParams {
    fn validate(&self) -> Result<(), ContractError> {
        check_len("toolId", &self.tool_id, 1, TOOL_ID_MAX_CHARACTERS)
    }
}

/// How a tool's stdout was read: parsed JSON or text (the driver's `outputFormat`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolOutputFormat {
    /// `output` is the parsed JSON value.
    Json,
    /// `output` is a string.
    Text,
}

/// Result of `tools.call` (strict): the tool ran and exited 0 (or with a code its manifest maps to success).
///
/// `{"toolId":"echo","outputFormat":"text","output":"hi\n","exitCode":0,"stdoutTruncated":false,"stderr":"","stderrTruncated":false}`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ToolCallResult {
    /// The tool that ran.
    pub tool_id: String,
    /// `json` or `text`.
    pub output_format: ToolOutputFormat,
    /// The output: a JSON value, or the text (redacted).
    pub output: serde_json::Value,
    /// The tool's exit code.
    pub exit_code: i32,
    /// Whether stdout went past the host's bound (the rest was discarded).
    pub stdout_truncated: bool,
    /// The tail of stderr (redacted).
    pub stderr: String,
    /// Whether older stderr bytes were dropped.
    pub stderr_truncated: bool,
}

impl Validate for ToolCallResult {
    fn validate(&self) -> Result<(), ContractError> {
        check_len("toolId", &self.tool_id, 1, TOOL_ID_MAX_CHARACTERS)?;
        if self.output_format == ToolOutputFormat::Text && !self.output.is_string() {
            return Err(ContractError::field("output", Problem::Inconsistent));
        }
        Ok(())
    }
}

/// `tools.list` (ours): `{}` → [`ToolListResult`].
#[derive(Debug, Clone, Copy)]
pub struct ToolsList;
impl Method for ToolsList {
    const NAME: &'static str = "tools.list";
    type Params = NoParams;
    type Result = ToolListResult;
}

/// `tools.call` (ours): [`ToolCallParams`] → [`ToolCallResult`]. A failed call is an error envelope whose
/// `details` carry the tool's semantic code (`{"code":"auth_required","retryable":false,"exitCode":4,…}`).
#[derive(Debug, Clone, Copy)]
pub struct ToolsCall;
impl Method for ToolsCall {
    const NAME: &'static str = "tools.call";
    type Params = ToolCallParams;
    type Result = ToolCallResult;
}

/// `threads.list` (ours): [`ThreadListParams`] → [`ThreadListResult`].
#[derive(Debug, Clone, Copy)]
pub struct ThreadsList;
impl Method for ThreadsList {
    const NAME: &'static str = "threads.list";
    type Params = ThreadListParams;
    type Result = ThreadListResult;
}

/// `threads.get` (ours): [`ThreadGetParams`] → [`ThreadGetResult`].
#[derive(Debug, Clone, Copy)]
pub struct ThreadsGet;
impl Method for ThreadsGet {
    const NAME: &'static str = "threads.get";
    type Params = ThreadGetParams;
    type Result = ThreadGetResult;
}

/// `approvals.listPending` (ours): `{}` → [`PendingApprovalsResult`].
#[derive(Debug, Clone, Copy)]
pub struct ApprovalsListPending;
impl Method for ApprovalsListPending {
    const NAME: &'static str = "approvals.listPending";
    type Params = NoParams;
    type Result = PendingApprovalsResult;
}

/// `runs.exportTranscript` (ours): [`ExportTranscriptParams`] → [`ExportTranscriptResult`].
#[derive(Debug, Clone, Copy)]
pub struct RunsExportTranscript;
impl Method for RunsExportTranscript {
    const NAME: &'static str = "runs.exportTranscript";
    type Params = ExportTranscriptParams;
    type Result = ExportTranscriptResult;
}

/// Params of `agentTokens.issue` (ours): `{"conversationId":"th_3f9a0c1d2b4e5f60"}` — the thread whose agent gets the
/// token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct IssueAgentTokenParams {
    /// The conversation (thread) the token is scoped to, 1..=128 characters.
    pub conversation_id: String,
}

impl Validate for IssueAgentTokenParams {
    fn validate(&self) -> Result<(), ContractError> {
        check_len("conversationId", &self.conversation_id, 1, 128)
    }
}

/// Result of `agentTokens.issue`: `{"token":"<43 chars>","tokenId":"…","expiresAt":1764583200000,"scopes":[…]}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct IssueAgentTokenResult {
    /// The secret, for the agent's `DEEPCHAT_CLI_AGENT_TOKEN`.
    pub token: String,
    /// Its public id, for `agentTokens.revoke`.
    pub token_id: String,
    /// Expiry, Unix ms.
    pub expires_at: u64,
    /// The scopes it carries (wire names).
    pub scopes: Vec<String>,
}

impl Validate for IssueAgentTokenResult {
    fn validate(&self) -> Result<(), ContractError> {
        check_len("token", &self.token, 1, 256)?;
        check_len("tokenId", &self.token_id, 1, 128)
    }
}

/// Params of `agentTokens.revoke` (ours): `{"tokenId":"…"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RevokeAgentTokenParams {
    /// The id `agentTokens.issue` returned.
    pub token_id: String,
}

impl Validate for RevokeAgentTokenParams {
    fn validate(&self) -> Result<(), ContractError> {
        check_len("tokenId", &self.token_id, 1, 128)
    }
}

/// Result of `agentTokens.revoke`: `{"revoked":true}` (`false`: already gone or expired).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RevokeAgentTokenResult {
    /// Whether a live token was revoked.
    pub revoked: bool,
}

impl Validate for RevokeAgentTokenResult {
    fn validate(&self) -> Result<(), ContractError> {
        Ok(())
    }
}

/// `agentTokens.issue` (ours): [`IssueAgentTokenParams`] → [`IssueAgentTokenResult`].
#[derive(Debug, Clone, Copy)]
pub struct AgentTokensIssue;
impl Method for AgentTokensIssue {
    const NAME: &'static str = "agentTokens.issue";
    type Params = IssueAgentTokenParams;
    type Result = IssueAgentTokenResult;
}

/// `agentTokens.revoke` (ours): [`RevokeAgentTokenParams`] → [`RevokeAgentTokenResult`].
#[derive(Debug, Clone, Copy)]
pub struct AgentTokensRevoke;
impl Method for AgentTokensRevoke {
    const NAME: &'static str = "agentTokens.revoke";
    type Params = RevokeAgentTokenParams;
    type Result = RevokeAgentTokenResult;
}

#[cfg(test)]
mod tests {
    use super::super::decode_params;
    use super::*;
    use serde_json::json;

    #[test]
    fn thread_list_limits() {
        assert!(decode_params::<ThreadsList>(json!({})).is_ok());
        assert!(decode_params::<ThreadsList>(json!({"limit":100})).is_ok());
        assert!(decode_params::<ThreadsList>(json!({"limit":101})).is_err());
        assert!(decode_params::<ThreadsList>(json!({"cursor":"c".repeat(512)})).is_ok());
        assert!(decode_params::<ThreadsList>(json!({"cursor":"c".repeat(513)})).is_err());
        assert!(decode_params::<ThreadsList>(json!({"other":1})).is_err());
    }

    #[test]
    fn tool_call_params_bounds_and_default_input() {
        let p = decode_params::<ToolsCall>(json!({"toolId":"echo"})).unwrap();
        assert_eq!(p.input, json!({}));
        assert!(decode_params::<ToolsCall>(json!({"toolId":"t".repeat(128)})).is_ok());
        assert!(decode_params::<ToolsCall>(json!({"toolId":"t".repeat(129)})).is_err());
        assert!(decode_params::<ToolsCall>(json!({"toolId":""})).is_err());
        assert!(decode_params::<ToolsCall>(json!({"toolId":"a","other":1})).is_err());
        let text = ToolCallResult {
            tool_id: "echo".into(),
            output_format: ToolOutputFormat::Text,
            output: json!({"not":"text"}),
            exit_code: 0,
            stdout_truncated: false,
            stderr: String::new(),
            stderr_truncated: false,
        };
        assert!(text.validate().is_err());
    }

    #[test]
    fn export_format_default_and_names() {
        let p = decode_params::<RunsExportTranscript>(json!({"runId":"r"})).unwrap();
        assert_eq!(p.format, None);
        let p = decode_params::<RunsExportTranscript>(json!({"runId":"r","format":"markdown"}))
            .unwrap();
        assert_eq!(p.format, Some(TranscriptFormat::Markdown));
        assert!(
            decode_params::<RunsExportTranscript>(json!({"runId":"r","format":"html"})).is_err()
        );
    }
}
