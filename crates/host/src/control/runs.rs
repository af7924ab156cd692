//! Runs, threads, run events and artifacts of the control plane, in DeepChat's shapes.
//!
//! A detached run's events reach the event hub through [`on_signal`]: `runs.created` and `runs.turn.accepted` when
//! the run is recorded, `chat.stream.updated` snapshots (DeepChat's assistant message blocks: `content`,
//! `reasoning_content`, `tool_call`) as the agent streams, then `chat.stream.completed` or `chat.stream.failed`
//! (with `runs.turn.failed`), and the run's terminal `sessions.status.changed`. `events.subscribe` replays them from
//! a cursor or starts with a `runs.snapshot` of the stored run.

use std::collections::HashMap;
use std::sync::Mutex;

use agentwire_awp::NormalizedEvent;
use agentwire_local_control::caller::Caller;
use agentwire_local_control::contract::artifacts::{self as wire_artifacts, ArtifactOwner};
use agentwire_local_control::contract::ours;
use agentwire_local_control::contract::runs::{
    self as wire, MessagePageCursor, RecoveryReason, RunMessage, RunPhase, RunSnapshot,
    SessionStatus,
};
use agentwire_local_control::envelope::{Cursor as WireCursor, ErrorBody, ErrorCode};
use agentwire_local_control::hub::{HubError, NewEvent, SubscriptionItem};
use agentwire_local_control::policy;
use agentwire_local_control::server::{Download, RequestContext, StreamSink};
use agentwire_spool::{ArtifactSpec, Scope as SpoolScope};
use serde_json::{Value, json};

use super::{ControlPlane, Inner, error, lock, now_ms, result};
use crate::detached::{CancelOutcome, DetachedRequest, RunSignal};
use crate::ids::{RunId, ThreadId};
use crate::store::{MessageRecord, Role, RunRecord, RunStatus, Store, ThreadRecord};

/// Largest text of one block in a `chat.stream.updated` snapshot (DeepChat's run message text limit, 128 KiB);
/// longer text is cut in the snapshot (the stored message keeps all of it).
const MAX_BLOCK_TEXT_BYTES: usize = wire::RUN_MESSAGE_MAX_TEXT_BYTES;
/// Default page of messages in `runs.get` / `threads.get`.
const DEFAULT_PAGE: u32 = 50;

/// Per-run state of live runs: the thread, the agent token to revoke, the assistant message blocks so far.
#[derive(Debug, Default)]
pub struct RunBridge {
    runs: Mutex<HashMap<String, LiveRun>>,
}

#[derive(Debug, Default)]
struct LiveRun {
    thread: String,
    token_id: Option<String>,
    blocks: Vec<Block>,
}

#[derive(Debug)]
struct Block {
    kind: &'static str,
    text: String,
    status: &'static str,
    timestamp: u64,
    tool: Option<(String, String, String, Option<String>)>,
}

impl Block {
    fn to_json(&self) -> Value {
        let (text, _) = wire::truncate_message_text(&self.text);
        let mut block =
            json!({"type": self.kind, "status": self.status, "timestamp": self.timestamp});
        match &self.tool {
            Some((id, name, params, response)) => {
                let mut call = json!({"id": id, "name": name, "params": params});
                if let Some(response) = response {
                    let (response, _) = wire::truncate_message_text(response);
                    call["response"] = Value::String(response.to_owned());
                }
                block["tool_call"] = call;
            }
            None => block["content"] = Value::String(text.to_owned()),
        }
        block
    }
}

impl RunBridge {
    pub(super) fn remember_token(&self, run: &str, token_id: &str) {
        lock(&self.runs).entry(run.to_owned()).or_default().token_id = Some(token_id.to_owned());
    }
}

fn message_id(run: &str) -> String {
    format!("{run}:assistant")
}

/// Registers a recorded run with the hub: `runs.created`, `runs.turn.accepted`.
pub(super) fn run_recorded(inner: &Inner, thread: &str, run: &RunId) {
    lock(&inner.bridge.runs)
        .entry(run.as_str().to_owned())
        .or_default()
        .thread = thread.to_owned();
    if let Err(e) = inner.hub.start_run(run.as_str()) {
        tracing::warn!(code = e.code(), "run not registered with the event hub");
        return;
    }
    let at = now_ms();
    let created = wire::RunCreated {
        run_id: run.as_str().to_owned(),
        session_id: thread.to_owned(),
        status: SessionStatus::Generating,
        created_at: at,
    };
    let accepted = wire::TurnAccepted {
        run_id: run.as_str().to_owned(),
        session_id: thread.to_owned(),
        request_id: None,
        message_id: None,
        accepted_at: at,
    };
    publish(inner, run.as_str(), wire::RunEvent::Created(created));
    publish(inner, run.as_str(), wire::RunEvent::TurnAccepted(accepted));
}

fn publish(inner: &Inner, run: &str, event: wire::RunEvent) {
    let new = NewEvent::new(run, event.name(), event.data());
    if let Err(e) = inner.hub.publish(new) {
        tracing::debug!(code = e.code(), "run event not published");
    }
}

/// Passes one signal of a detached run to the event hub.
pub(super) fn on_signal(inner: &Inner, run: &RunId, signal: RunSignal) {
    let run_id = run.as_str();
    match signal {
        RunSignal::Event(event) => {
            let snapshot = {
                let mut runs = lock(&inner.bridge.runs);
                let Some(live) = runs.get_mut(run_id) else {
                    return;
                };
                if !apply(&mut live.blocks, &event) {
                    return;
                }
                (live.thread.clone(), blocks_json(&live.blocks))
            };
            let (thread, blocks) = snapshot;
            let updated = wire::ChatStreamUpdated {
                kind: wire::SnapshotKind::Snapshot,
                request_id: run_id.to_owned(),
                session_id: thread,
                message_id: message_id(run_id),
                provider_id: None,
                model_id: None,
                updated_at: now_ms(),
                blocks,
            };
            publish(inner, run_id, wire::RunEvent::ChatUpdated(updated));
        }
        RunSignal::Ended(report) => {
            let failure = match report.status {
                RunStatus::Succeeded | RunStatus::Cancelled => None,
                _ => Some(
                    report
                        .error_code
                        .clone()
                        .unwrap_or_else(|| "turn_failed".to_owned()),
                ),
            };
            end_run(inner, run_id, failure);
        }
        RunSignal::StoreFailed { code, .. } => end_run(inner, run_id, Some(code.to_owned())),
    }
}

/// Folds one event into the message blocks; `false` when nothing visible changed.
fn apply(blocks: &mut Vec<Block>, event: &NormalizedEvent) -> bool {
    let now = now_ms();
    let mut append = |kind: &'static str, text: &str| match blocks.last_mut() {
        Some(last) if last.kind == kind && last.status == "loading" => {
            if last.text.len() < MAX_BLOCK_TEXT_BYTES {
                last.text.push_str(text);
            }
            last.timestamp = now;
        }
        _ => {
            for block in blocks.iter_mut() {
                if block.tool.is_none() {
                    block.status = "success";
                }
            }
            blocks.push(Block {
                kind,
                text: text.to_owned(),
                status: "loading",
                timestamp: now,
                tool: None,
            });
        }
    };
    match event {
        NormalizedEvent::TextDelta { text } => append("content", text),
        NormalizedEvent::ThinkingDelta { text } => append("reasoning_content", text),
        NormalizedEvent::ToolUse { id, name, input } => {
            blocks.push(Block {
                kind: "tool_call",
                text: String::new(),
                status: "loading",
                timestamp: now,
                tool: Some((id.clone(), name.clone(), input.to_string(), None)),
            });
        }
        NormalizedEvent::ToolResult {
            tool_use_id,
            is_error,
            summary,
            ..
        } => {
            let Some(block) = blocks.iter_mut().find(|b| {
                b.tool
                    .as_ref()
                    .is_some_and(|(id, _, _, response)| id == tool_use_id && response.is_none())
            }) else {
                return false;
            };
            block.status = if *is_error { "error" } else { "success" };
            block.timestamp = now;
            if let Some(tool) = block.tool.as_mut() {
                tool.3 = Some(summary.clone());
            }
        }
        _ => return false,
    }
    true
}

fn blocks_json(blocks: &[Block]) -> Vec<Value> {
    blocks.iter().map(Block::to_json).collect()
}

fn end_run(inner: &Inner, run: &str, failure: Option<String>) {
    let live = lock(&inner.bridge.runs).remove(run).unwrap_or_default();
    if let Some(token_id) = &live.token_id {
        lock(&inner.tokens).revoke(token_id);
    }
    let at = now_ms();
    let thread = live.thread;
    match &failure {
        None => publish(
            inner,
            run,
            wire::RunEvent::ChatCompleted(wire::ChatStreamCompleted {
                request_id: run.to_owned(),
                session_id: thread.clone(),
                message_id: message_id(run),
                completed_at: at,
            }),
        ),
        Some(code) => {
            publish(
                inner,
                run,
                wire::RunEvent::ChatFailed(wire::ChatStreamFailed {
                    request_id: run.to_owned(),
                    session_id: thread.clone(),
                    message_id: message_id(run),
                    failed_at: at,
                    error: code.clone(),
                }),
            );
            publish(
                inner,
                run,
                wire::RunEvent::TurnFailed(wire::TurnFailed {
                    run_id: run.to_owned(),
                    session_id: thread.clone(),
                    failed_at: at,
                    error: code.clone(),
                }),
            );
        }
    }
    let status = wire::RunEvent::StatusChanged(wire::SessionStatusChanged {
        session_id: thread,
        status: if failure.is_some() {
            SessionStatus::Error
        } else {
            SessionStatus::Idle
        },
        version: i64::try_from(at).unwrap_or(i64::MAX),
    });
    if let Err(e) = inner
        .hub
        .finish_run(NewEvent::new(run, status.name(), status.data()))
    {
        tracing::debug!(code = e.code(), "run end not published");
    }
}

fn store_error(e: &crate::store::StoreError) -> ErrorBody {
    match e {
        crate::store::StoreError::ThreadNotFound(_) => {
            error(ErrorCode::NotFound, "no such session")
        }
        crate::store::StoreError::ThreadBusy { .. } => error(ErrorCode::Conflict, e.to_string()),
        _ => error(
            ErrorCode::Unavailable,
            format!("the store failed: {}", e.code()),
        ),
    }
}

fn open_store(plane: &ControlPlane) -> Result<Store, ErrorBody> {
    Store::open(&plane.inner.data_dir).map_err(|e| store_error(&e))
}

fn not_found(what: &str) -> ErrorBody {
    error(ErrorCode::NotFound, format!("no such {what}"))
}

/// `ms` as the wire's non-negative integer.
fn ms(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

/// Why a stored run stopped: `completed`, `cancelled`, or its failure code; `None` while it runs.
fn stop_reason(run: &RunRecord) -> Option<String> {
    match run.status {
        RunStatus::Running => None,
        RunStatus::Succeeded => Some("completed".to_owned()),
        RunStatus::Cancelled => Some("cancelled".to_owned()),
        RunStatus::Failed | RunStatus::Interrupted => Some(
            run.error_code
                .clone()
                .filter(|code| !code.is_empty() && code.len() <= 128)
                .unwrap_or_else(|| run.status.as_str().to_owned()),
        ),
    }
}

/// DeepChat's session status and phase of a stored run.
fn status_of(run: &RunRecord) -> (SessionStatus, RunPhase) {
    match run.status {
        RunStatus::Running => (SessionStatus::Generating, RunPhase::Running),
        RunStatus::Succeeded | RunStatus::Cancelled => (SessionStatus::Idle, RunPhase::Terminal),
        RunStatus::Failed | RunStatus::Interrupted => (SessionStatus::Error, RunPhase::Terminal),
    }
}

fn wire_message(message: &MessageRecord, status: MessageStatus) -> Option<RunMessage> {
    let role = match message.role {
        Role::User => wire::MessageRole::User,
        Role::Assistant => wire::MessageRole::Assistant,
        Role::Tool => return None,
    };
    let (text, truncated) = wire::truncate_message_text(&message.content);
    Some(RunMessage {
        id: message.id.to_string(),
        role,
        status: status.0,
        text: text.to_owned(),
        text_truncated: truncated,
        created_at: ms(message.created_at_ms),
        updated_at: ms(message.created_at_ms),
    })
}

#[derive(Clone, Copy)]
struct MessageStatus(wire::MessageStatus);

/// One page of `messages` (oldest first) after `cursor`: `(page, next cursor, has more)`.
fn page(
    messages: &[MessageRecord],
    cursor: Option<&MessagePageCursor>,
    limit: u32,
    status: MessageStatus,
) -> (Vec<RunMessage>, Option<MessagePageCursor>, bool) {
    let start = cursor.map_or(0, |c| {
        messages
            .iter()
            .position(|m| m.id > c.order_seq)
            .unwrap_or(messages.len())
    });
    let visible: Vec<&MessageRecord> = messages[start..]
        .iter()
        .filter(|m| m.role != Role::Tool)
        .collect();
    let limit = limit as usize;
    let has_more = visible.len() > limit;
    let shown = &visible[..visible.len().min(limit)];
    let next = if has_more {
        shown.last().map(|m| MessagePageCursor {
            order_seq: m.id,
            id: m.id.to_string(),
        })
    } else {
        None
    };
    let page = shown
        .iter()
        .filter_map(|m| wire_message(m, status))
        .collect();
    (page, next, has_more)
}

fn parse_run(id: &str) -> Result<RunId, ErrorBody> {
    RunId::parse(id).map_err(|_| not_found("run"))
}

fn parse_thread(id: &str) -> Result<ThreadId, ErrorBody> {
    ThreadId::parse(id).map_err(|_| not_found("session"))
}

/// The run `id` with its thread, if `caller` may see it (an agent: only its own conversation).
fn owned_run(
    store: &Store,
    caller: &Caller,
    id: &str,
) -> Result<(RunRecord, ThreadRecord), ErrorBody> {
    let run_id = parse_run(id)?;
    let run = store
        .run(&run_id)
        .map_err(|e| store_error(&e))?
        .ok_or_else(|| not_found("run"))?;
    policy::check_owner(caller, Some(run.thread_id.as_str())).map_err(|_| not_found("run"))?;
    let thread = store
        .thread(&run.thread_id)
        .map_err(|e| store_error(&e))?
        .ok_or_else(|| not_found("run"))?;
    Ok((run, thread))
}

fn snapshot(
    store: &Store,
    run: &RunRecord,
    thread: &ThreadRecord,
    cursor: Option<&MessagePageCursor>,
    limit: u32,
) -> Result<RunSnapshot, ErrorBody> {
    let detail = store
        .thread_detail(&thread.id)
        .map_err(|e| store_error(&e))?;
    let messages: Vec<MessageRecord> = detail
        .messages
        .into_iter()
        .filter(|m| m.run_id == run.id)
        .collect();
    let (status, phase) = status_of(run);
    let message_status = MessageStatus(match run.status {
        RunStatus::Running => wire::MessageStatus::Pending,
        RunStatus::Failed | RunStatus::Interrupted => wire::MessageStatus::Error,
        _ => wire::MessageStatus::Sent,
    });
    let (messages, next_cursor, has_more) = page(&messages, cursor, limit, message_status);
    Ok(RunSnapshot {
        run_id: run.id.as_str().to_owned(),
        session_id: thread.id.as_str().to_owned(),
        agent_id: run.agent.clone(),
        title: thread.title.clone(),
        status,
        phase,
        provider_id: String::new(),
        model_id: run.model.clone().unwrap_or_default(),
        created_at: ms(run.started_at_ms),
        updated_at: ms(run.ended_at_ms.unwrap_or(thread.updated_at_ms)),
        messages,
        next_cursor,
        has_more,
        stop_reason: stop_reason(run),
    })
}

/// `sessions.runDetached`.
pub(super) async fn run_detached(
    plane: &ControlPlane,
    _request_id: &str,
    params: wire::RunDetachedParams,
) -> Result<Value, ErrorBody> {
    let unsupported = [
        ("systemPrompt", params.system_prompt.is_some()),
        ("maxTurns", params.max_turns.is_some()),
        (
            "activeSkills",
            params.active_skills.as_ref().is_some_and(|s| !s.is_empty()),
        ),
        (
            "disabledAgentTools",
            params
                .disabled_agent_tools
                .as_ref()
                .is_some_and(|s| !s.is_empty()),
        ),
    ];
    if let Some((field, _)) = unsupported.iter().find(|(_, set)| *set) {
        return Err(error(
            ErrorCode::InvalidRequest,
            format!("{field} is not supported by this host (agents take their own configuration)"),
        ));
    }
    if let Some(provider) = &params.provider_id {
        return Err(error(
            ErrorCode::InvalidRequest,
            format!(
                "providerId {provider:?} is not supported: this host runs agents, and an agent's provider is part of its configuration (agents.toml)"
            ),
        ));
    }
    let request = DetachedRequest {
        agent: params.agent_id.clone(),
        thread: None,
        prompt: params.prompt.clone(),
        model: params.model_id.clone(),
        cwd: params.project_dir.as_ref().map(std::path::PathBuf::from),
        title: params.title.clone(),
    };
    let started = plane.runs().start(request).await.map_err(|e| {
        // The agent's host provider cannot be used (unknown, disabled, no enabled model, remote without opt-in):
        // a configuration problem of this host, as `awp-host chat` reports it (exit 3), with the registry's
        // stable code in `details.code`; never internal_error.
        if let crate::detached::StartError::Setup(crate::turn::TurnSetupError::Provider {
            source,
            ..
        }) = &e
        {
            let mut details = serde_json::Map::new();
            details.insert("code".into(), Value::String(source.code().to_owned()));
            return error(ErrorCode::Unavailable, e.to_string()).with_details(details);
        }
        let code = match e.code() {
            "agent_not_found" | "invalid_project_dir" | "empty_prompt" => ErrorCode::InvalidRequest,
            "thread_busy" => ErrorCode::Conflict,
            "shutting_down" => ErrorCode::Unavailable,
            c if c.starts_with("agent_") || c.starts_with("launch_") => ErrorCode::InvalidRequest,
            _ => ErrorCode::InternalError,
        };
        error(code, e.to_string())
    })?;
    result::<wire::RunDetached>(&wire::RunDetachedResult {
        run_id: started.run_id.as_str().to_owned(),
        session_id: started.thread_id.as_str().to_owned(),
        status: SessionStatus::Generating,
        request_id: None,
        message_id: None,
        created_at: now_ms(),
    })
}

/// `runs.get`.
pub(super) fn get(
    plane: &ControlPlane,
    caller: &Caller,
    params: &wire::RunGetParams,
) -> Result<Value, ErrorBody> {
    let store = open_store(plane)?;
    let (run, thread) = owned_run(&store, caller, &params.run_id)?;
    let cursor = params.cursor.as_ref().and_then(Option::as_ref);
    let snapshot = snapshot(
        &store,
        &run,
        &thread,
        cursor,
        params.limit.unwrap_or(DEFAULT_PAGE),
    )?;
    result::<wire::Get>(&snapshot)
}

/// `runs.cancel`: idempotent; a run not live in this host (ended, or another process's) is reported as is.
pub(super) fn cancel(
    plane: &ControlPlane,
    caller: &Caller,
    run_id: &str,
) -> Result<Value, ErrorBody> {
    let store = open_store(plane)?;
    let (run, thread) = owned_run(&store, caller, run_id)?;
    let requested = plane.runs().cancel(&run.id) == CancelOutcome::Requested;
    if requested {
        publish(
            &plane.inner,
            run.id.as_str(),
            wire::RunEvent::CancelRequested(wire::CancelRequested {
                run_id: run.id.as_str().to_owned(),
                session_id: thread.id.as_str().to_owned(),
                requested_at: now_ms(),
            }),
        );
    }
    let (status, _) = status_of(&run);
    result::<wire::Cancel>(&wire::RunCancelResult {
        run_id: run.id.as_str().to_owned(),
        cancel_requested: requested,
        status,
    })
}

fn thread_summary(store: &Store, thread: &ThreadRecord) -> Result<ours::ThreadSummary, ErrorBody> {
    let detail = store
        .thread_detail(&thread.id)
        .map_err(|e| store_error(&e))?;
    let status = detail
        .runs
        .last()
        .map_or(SessionStatus::Idle, |run| status_of(run).0);
    Ok(ours::ThreadSummary {
        thread_id: thread.id.as_str().to_owned(),
        agent_id: thread.agent.clone(),
        title: thread.title.clone(),
        project_dir: None,
        status,
        run_count: thread.run_count,
        created_at: ms(thread.created_at_ms),
        updated_at: ms(thread.updated_at_ms),
    })
}

/// `threads.list`; the cursor is `<updatedAt>:<threadId>` of the last thread of the previous page.
pub(super) fn threads_list(
    plane: &ControlPlane,
    params: &ours::ThreadListParams,
) -> Result<Value, ErrorBody> {
    let store = open_store(plane)?;
    let limit = params.limit.unwrap_or(DEFAULT_PAGE) as usize;
    let before = match &params.cursor {
        None => None,
        Some(cursor) => {
            let (at, id) = cursor
                .split_once(':')
                .and_then(|(at, id)| Some((at.parse::<i64>().ok()?, id)))
                .ok_or_else(|| {
                    error(
                        ErrorCode::InvalidRequest,
                        "cursor is not one this host gave",
                    )
                })?;
            Some((at, id.to_owned()))
        }
    };
    let rows = store
        .list_threads_page(
            limit + 1,
            before.as_ref().map(|(at, id)| (*at, id.as_str())),
            params.agent_id.as_deref(),
        )
        .map_err(|e| store_error(&e))?;
    let has_more = rows.len() > limit;
    let rows = &rows[..rows.len().min(limit)];
    let threads = rows
        .iter()
        .map(|t| thread_summary(&store, t))
        .collect::<Result<Vec<_>, _>>()?;
    let next_cursor = if has_more {
        rows.last()
            .map(|t| format!("{}:{}", t.updated_at_ms, t.id.as_str()))
    } else {
        None
    };
    result::<ours::ThreadsList>(&ours::ThreadListResult {
        threads,
        next_cursor,
    })
}

/// `threads.get`.
pub(super) fn thread_get(
    plane: &ControlPlane,
    caller: &Caller,
    params: &ours::ThreadGetParams,
) -> Result<Value, ErrorBody> {
    let store = open_store(plane)?;
    let id = parse_thread(&params.thread_id)?;
    policy::check_owner(caller, Some(id.as_str())).map_err(|_| not_found("session"))?;
    let thread = store
        .thread(&id)
        .map_err(|e| store_error(&e))?
        .ok_or_else(|| not_found("session"))?;
    let detail = store.thread_detail(&id).map_err(|e| store_error(&e))?;
    let cursor = params.cursor.as_ref().and_then(Option::as_ref);
    let (messages, next_cursor, has_more) = page(
        &detail.messages,
        cursor,
        params.limit.unwrap_or(DEFAULT_PAGE),
        MessageStatus(wire::MessageStatus::Sent),
    );
    result::<ours::ThreadsGet>(&ours::ThreadGetResult {
        thread: thread_summary(&store, &thread)?,
        messages,
        next_cursor,
        has_more,
    })
}

pub(super) fn spool_owner(caller: &Caller) -> String {
    match caller.conversation_id() {
        Some(conversation) => format!("agent:{conversation}"),
        None => "human".to_owned(),
    }
}

pub(super) fn wire_artifact(
    meta: agentwire_spool::ArtifactMetadata,
) -> wire_artifacts::ArtifactMetadata {
    wire_artifacts::ArtifactMetadata {
        owner: if meta.owner.starts_with("agent:") {
            ArtifactOwner::Agent
        } else {
            ArtifactOwner::Human
        },
        id: meta.id,
        request_id: meta.request_id,
        mime_type: meta.mime_type,
        size: meta.size,
        sha256: meta.sha256,
        filename: meta.filename,
        created_at: meta.created_at,
        expires_at: meta.expires_at,
    }
}

pub(super) fn spool_error(e: &agentwire_spool::SpoolError) -> ErrorBody {
    let code = ErrorCode::parse(e.code()).unwrap_or(ErrorCode::InternalError);
    error(code, e.to_string()).retriable(e.is_retriable())
}

/// `runs.exportTranscript`: the run's messages as a JSONL or Markdown artifact owned by the caller.
pub(super) async fn export_transcript(
    plane: &ControlPlane,
    ctx: &RequestContext,
    caller: &Caller,
    request_id: &str,
    params: &ours::ExportTranscriptParams,
) -> Result<Value, ErrorBody> {
    let (bytes, mime, filename) = {
        let store = open_store(plane)?;
        let (run, thread) = owned_run(&store, caller, &params.run_id)?;
        let detail = store
            .thread_detail(&thread.id)
            .map_err(|e| store_error(&e))?;
        let messages = detail.messages.iter().filter(|m| m.run_id == run.id);
        match params.format.unwrap_or_default() {
            ours::TranscriptFormat::Jsonl => {
                let mut out = Vec::new();
                for m in messages {
                    let line = json!({"role": m.role.as_str(), "content": m.content, "createdAt": ms(m.created_at_ms)});
                    out.extend_from_slice(line.to_string().as_bytes());
                    out.push(b'\n');
                }
                (out, "application/x-ndjson", format!("{}.jsonl", run.id))
            }
            ours::TranscriptFormat::Markdown => {
                let mut out = format!("# {}\n\n", thread.title);
                for m in messages {
                    out.push_str(&format!("## {}\n\n{}\n\n", m.role.as_str(), m.content));
                }
                (out.into_bytes(), "text/markdown", format!("{}.md", run.id))
            }
        }
    };
    let scope = SpoolScope::new(
        spool_owner(caller),
        ctx.connection_id.to_string(),
        request_id,
    );
    let mut writer = plane
        .inner
        .spool
        .create(ArtifactSpec::new(scope, mime, filename))
        .await
        .map_err(|e| spool_error(&e))?;
    writer.write(&bytes).await.map_err(|e| spool_error(&e))?;
    let meta = writer.publish().await.map_err(|e| spool_error(&e))?;
    result::<ours::RunsExportTranscript>(&ours::ExportTranscriptResult {
        artifact: wire_artifact(meta),
    })
}

/// `artifacts.describe`.
pub(super) fn artifact_describe(
    plane: &ControlPlane,
    caller: &Caller,
    id: &str,
) -> Result<Value, ErrorBody> {
    let meta = plane
        .inner
        .spool
        .describe(&spool_owner(caller), id)
        .map_err(|e| spool_error(&e))?;
    result::<wire_artifacts::Describe>(&wire_artifacts::ArtifactResult {
        artifact: wire_artifact(meta),
    })
}

/// `artifacts.delete`.
pub(super) async fn artifact_delete(
    plane: &ControlPlane,
    caller: &Caller,
    id: &str,
) -> Result<Value, ErrorBody> {
    plane
        .inner
        .spool
        .delete(&spool_owner(caller), id)
        .await
        .map_err(|e| spool_error(&e))?;
    result::<wire_artifacts::Delete>(&wire_artifacts::DeleteResult::DELETED)
}

/// `GET /v1/artifacts/:id` (`artifacts.read`).
pub(super) async fn download(
    plane: &ControlPlane,
    caller: &Caller,
    id: &str,
) -> Result<Download, ErrorBody> {
    let (meta, reader) = plane
        .inner
        .spool
        .read(&spool_owner(caller), id)
        .await
        .map_err(|e| spool_error(&e))?;
    Ok(Download::new(
        meta.id,
        meta.mime_type,
        meta.size,
        meta.sha256,
        meta.filename,
        Box::pin(reader),
    ))
}

/// `events.subscribe`: the run's events from `cursor` (or a `runs.snapshot` first), until the run's terminal
/// event; then the last cursor as the result.
pub(super) async fn subscribe(
    plane: &ControlPlane,
    ctx: &RequestContext,
    caller: &Caller,
    request: agentwire_local_control::envelope::RequestEnvelope,
    mut sink: StreamSink,
) -> Result<Value, ErrorBody> {
    let params = super::params::<wire::Subscribe>(request.params)?;
    let (run, thread) = {
        let store = open_store(plane)?;
        owned_run(&store, caller, &params.run_id)?
    };
    let hub = &plane.inner.hub;
    let run_id = run.id.as_str().to_owned();
    // A run this hub tracks replays its retained events (all of them without a cursor); otherwise the stored run
    // is sent as a `runs.snapshot` first, with why (DeepChat's recovery reasons).
    let (subscription, recovery) = match hub.subscribe(Some(&run_id), params.cursor.as_deref()) {
        Ok(subscription) => (Some(subscription), None),
        Err(e) => {
            let (reason, resume) = match e {
                HubError::ForeignCursor => (RecoveryReason::ServerRestarted, None),
                HubError::CursorExpired => (RecoveryReason::CursorExpired, Some(hub.head())),
                HubError::InvalidCursor if params.cursor.is_some() => {
                    (RecoveryReason::CursorAhead, Some(hub.head()))
                }
                HubError::RunNotFound => (RecoveryReason::CursorMissing, None),
                other => return Err(error(ErrorCode::Unavailable, other.to_string())),
            };
            let resume = resume.map(|c| c.to_string());
            (
                hub.subscribe(Some(&run_id), resume.as_deref()).ok(),
                Some(reason),
            )
        }
    };
    let mut subscription = subscription;
    let head = hub.head();
    let mut last_cursor = params
        .cursor
        .as_deref()
        .and_then(WireCursor::parse)
        .filter(|_| recovery.is_none())
        .unwrap_or_else(|| head.clone());
    if let Some(reason) = recovery {
        let store = open_store(plane)?;
        let run_now = store
            .run(&run.id)
            .map_err(|e| store_error(&e))?
            .unwrap_or(run.clone());
        let limit = params.message_limit.unwrap_or(DEFAULT_PAGE);
        let snap = snapshot(&store, &run_now, &thread, None, limit)?;
        let event = wire::RunEvent::Snapshot(Box::new(wire::RunSnapshotEvent {
            cursor: head.as_str().to_owned(),
            recovery_reason: reason,
            run: snap,
        }));
        sink.emit_with(
            event.name(),
            event.data(),
            Some(run_id.clone()),
            Some(head.clone()),
        )
        .await?;
        if subscription.is_none() {
            // Ended, or run by another process: the snapshot is all this host can say.
            let (status, _) = status_of(&run_now);
            return result::<wire::Subscribe>(&wire::SubscribeResult {
                run_id,
                last_cursor: last_cursor.as_str().to_owned(),
                status: Some(status),
                stop_reason: stop_reason(&run_now),
            });
        }
    }
    let Some(subscription) = subscription.as_mut() else {
        return Err(not_found("run"));
    };
    loop {
        let item = tokio::select! {
            item = subscription.next() => item,
            () = ctx.cancel.cancelled() => return Err(error(ErrorCode::Cancelled, "the client went away")),
        };
        match item {
            None => break,
            Some(SubscriptionItem::Event(event)) => {
                let cursor = hub.cursor_of(&event);
                sink.emit_with(
                    event.event(),
                    event.data().clone(),
                    Some(run_id.clone()),
                    Some(cursor.clone()),
                )
                .await?;
                last_cursor = cursor;
                if event.is_terminal() {
                    break;
                }
            }
            Some(item) => {
                return Err(error(
                    ErrorCode::Unavailable,
                    "the event stream ended (host shutting down or the subscriber fell behind); resume from the last cursor",
                )
                .retriable(item.error_code().is_some()));
            }
        }
    }
    // The run's end is recorded before its terminal event is published, so the store has it now.
    let ended = open_store(plane)?
        .run(&run.id)
        .map_err(|e| store_error(&e))?
        .unwrap_or(run);
    let (status, _) = status_of(&ended);
    result::<wire::Subscribe>(&wire::SubscribeResult {
        run_id,
        last_cursor: last_cursor.as_str().to_owned(),
        status: Some(status),
        stop_reason: stop_reason(&ended),
    })
}
