//! The relay's routing core (sans-IO): decides where every message goes; no IO, no clock, no tasks.
//!
//! Inputs: a line from the agent ([`Router::handle_agent_message`]), an `/acp/call` ([`Router::begin_call`]), an
//! `/acp/send` body ([`Router::handle_client_message`]), the subscriber count, the agent's start and exit, and the
//! passage of time ([`Router::handle_timeout`] with `now`). Outputs: [`Action`]s drained with
//! [`Router::poll_action`], executed by the shell in `relay.rs`.
//!
//! Source: `protocols/agentctl.md` ("HTTP API", "Agent-initiated requests", "Properties"); ACP cancellation rules
//! from `protocols/acp.md` ("Cancellation").

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::envelope::{self, Envelope, Outcome};

/// JSON-RPC error code "method not found" (JSON-RPC 2.0 §5.1).
pub const METHOD_NOT_FOUND: i64 = -32601;
/// JSON-RPC error code "internal error" (JSON-RPC 2.0 §5.1).
pub const INTERNAL_ERROR: i64 = -32603;

/// The ACP method whose unanswered requests fail closed with `{"outcome":{"outcome":"cancelled"}}`.
pub const REQUEST_PERMISSION: &str = "session/request_permission";

/// Number of an `/acp/call`; its JSON-RPC id on the wire is the JSON integer `n` (1, 2, 3, …), as Kandev's relay
/// (the ACP Go SDK's connection) numbers its requests. The seed's example `agent.sh` splices the id into its reply
/// unquoted, so a string id would break it.
///
/// Id spaces (they cannot collide):
/// - requests agentctl writes to the agent (`/acp/call`): integers, from this counter only;
/// - requests a subscriber writes through `/acp/send`: strings only (an integer id there is refused with
///   [`RouterError::ReservedId`]), so the agent's responses are told apart by the id's JSON type;
/// - requests the agent sends: the agent's own ids, in the other direction; JSON-RPC matches a response to a
///   request of the same sender only, and agentctl routes `/acp/send` answers to them by the agent's id verbatim.
pub type CallId = u64;

/// The router's bounds. Every field has a default; see each field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RouterLimits {
    /// Largest number of `/acp/call` requests waiting for the agent's response.
    /// Default 1024. One more is refused with [`RouterError::TooManyPendingCalls`] (HTTP 503); nothing is written.
    pub max_pending_calls: usize,
    /// Largest number of agent-initiated requests waiting for a subscriber's answer.
    /// Default 1024. One more is answered at once with JSON-RPC error -32603 (fail closed) and not relayed.
    pub max_pending_agent_requests: usize,
    /// How long an agent-initiated request waits for a subscriber's answer.
    /// Default 600 s. Then agentctl answers it itself: `{"outcome":{"outcome":"cancelled"}}` for
    /// `session/request_permission`, error -32601 for any other method.
    pub agent_request_timeout: Duration,
}

impl Default for RouterLimits {
    fn default() -> Self {
        Self {
            max_pending_calls: 1024,
            max_pending_agent_requests: 1024,
            agent_request_timeout: Duration::from_secs(600),
        }
    }
}

/// What the shell must do next.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// Send this agent message, verbatim, to every `/acp/stream` subscriber.
    Broadcast(Bytes),
    /// Finish the `/acp/call` number `call`.
    CompleteCall {
        /// The call.
        call: CallId,
        /// Its outcome.
        reply: CallReply,
    },
    /// Write this JSON-RPC message (one line, no newline) to the agent's stdin.
    WriteToAgent(Bytes),
    /// Write the request of `/acp/call` number `call` to the agent's stdin; when the write fails, the call can never
    /// be answered: fail it with [`Router::fail_call`] and [`Unreachable::StdinClosed`].
    WriteCall {
        /// The call.
        call: CallId,
        /// The request line (no newline).
        line: Bytes,
    },
    /// Serve this `fs/*` request inside the workdir and answer it (`fs.rs`).
    ServeFs(FsRequest),
}

/// How an `/acp/call` ends.
#[derive(Clone, Debug, PartialEq)]
pub enum CallReply {
    /// The agent answered: the HTTP body `{"result":…}` or `{"error":{…}}` with the agent's member verbatim.
    Response(Bytes),
    /// The agent can no longer answer (HTTP 502): it exited, or closed the pipe the request or its answer needs.
    Unreachable(Unreachable),
}

/// Why the agent can no longer answer a call; reported in `/api/v1/status` as `unreachable` and in a 502's
/// `details.reason`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Unreachable {
    /// The agent process exited.
    Exited,
    /// The agent closed its stdout (or a grandchild holding it let go) while it still runs: no answer can arrive.
    StdoutClosed,
    /// Writing to the agent's stdin failed (it closed stdin or stopped reading for good): the request never
    /// arrived.
    StdinClosed,
}

impl Unreachable {
    /// Stable snake_case code.
    pub fn as_str(self) -> &'static str {
        match self {
            Unreachable::Exited => "exited",
            Unreachable::StdoutClosed => "stdout_closed",
            Unreachable::StdinClosed => "stdin_closed",
        }
    }
}

/// An `fs/*` request agentctl serves itself.
#[derive(Clone, Debug, PartialEq)]
pub struct FsRequest {
    /// The request's id, verbatim JSON text (echo it in the answer).
    pub id: String,
    /// Which method.
    pub method: FsMethod,
    /// The params, verbatim JSON text (`null` when absent).
    pub params: String,
}

/// The ACP client file-system methods (ACP schema: `fs/read_text_file`, `fs/write_text_file`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FsMethod {
    /// `fs/read_text_file {sessionId, path, line?, limit?}` → `{content}`.
    ReadTextFile,
    /// `fs/write_text_file {sessionId, path, content}` → `{}`.
    WriteTextFile,
}

impl FsMethod {
    /// The JSON-RPC method name.
    pub fn as_str(self) -> &'static str {
        match self {
            FsMethod::ReadTextFile => "fs/read_text_file",
            FsMethod::WriteTextFile => "fs/write_text_file",
        }
    }
}

/// Counters, reported by `/api/v1/status`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct RouterStats {
    /// Responses to `/acp/call` requests that had already timed out (or whose HTTP client left): dropped.
    pub late_responses: u64,
    /// JSON lines from the agent that are not JSON-RPC messages; relayed anyway.
    pub non_rpc_messages: u64,
    /// Agent requests agentctl answered itself because no subscriber did (fail closed).
    pub fail_closed_requests: u64,
    /// `session/request_permission` requests answered by `AGENTCTL_AUTO_APPROVE_PERMISSIONS`.
    pub auto_approved_permissions: u64,
    /// `fs/*` requests served inside the workdir.
    pub fs_requests_served: u64,
}

/// Why a call or a send is refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum RouterError {
    /// [`RouterLimits::max_pending_calls`] calls are already waiting.
    #[error("too many pending calls (limit {limit})")]
    TooManyPendingCalls {
        /// The limit.
        limit: usize,
    },
    /// A request sent on `/acp/send` uses an integer id: integers are agentctl's own `/acp/call` id space.
    #[error(
        "request id {id} is reserved for /api/v1/acp/call (integer ids); use a string id on /api/v1/acp/send"
    )]
    ReservedId {
        /// The id, as JSON text.
        id: String,
    },
    /// An answer on `/acp/send` names no agent request that is waiting for one.
    #[error(
        "no agent request with id {id} is waiting for an answer (answered, timed out, or never sent)"
    )]
    NoPendingRequest {
        /// The id, as JSON text.
        id: String,
    },
    /// The body is not a JSON-RPC notification, request or response.
    #[error(
        "not a JSON-RPC message: expected {{method, params}}, {{id, method, params}}, {{id, result}} or {{id, error}}"
    )]
    NotAMessage,
    /// An answer's `error` is not `{code: integer, message: string, data?}`.
    #[error("error must be an object with an integer code and a string message")]
    InvalidErrorObject,
    /// A request's id is neither an integer nor a string (`null`, `1.5`, an object, …).
    #[error("request id {id} must be an integer or a string")]
    InvalidId {
        /// The id, as JSON text.
        id: String,
    },
    /// `params` is present but neither an object nor an array (JSON-RPC 2.0 §4.2).
    #[error("params must be an object or an array when present")]
    InvalidParams,
    /// The method name is empty.
    #[error("method must not be empty")]
    EmptyMethod,
}

impl RouterError {
    /// Stable snake_case code.
    pub fn code(&self) -> &'static str {
        match self {
            RouterError::TooManyPendingCalls { .. } => "too_many_pending_calls",
            RouterError::ReservedId { .. } => "reserved_id",
            RouterError::NoPendingRequest { .. } => "no_pending_request",
            RouterError::NotAMessage => "not_a_message",
            RouterError::InvalidErrorObject => "invalid_error_object",
            RouterError::InvalidId { .. } => "invalid_id",
            RouterError::InvalidParams => "invalid_params",
            RouterError::EmptyMethod => "empty_method",
        }
    }
}

/// Why agentctl answered an agent request itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FailClosed {
    NoSubscriber,
    Timeout,
    TooManyPending,
    SessionCancelled,
}

impl FailClosed {
    fn as_str(self) -> &'static str {
        match self {
            FailClosed::NoSubscriber => "no_subscriber",
            FailClosed::Timeout => "timeout",
            FailClosed::TooManyPending => "too_many_pending_agent_requests",
            FailClosed::SessionCancelled => "session_cancelled",
        }
    }
}

/// An agent request relayed to subscribers, waiting for an answer.
#[derive(Debug)]
struct PendingAgentRequest {
    /// The id exactly as the agent wrote it.
    id: String,
    method: String,
    session_id: Option<String>,
    deadline: Instant,
}

/// Which `fs` methods the client advertised in the `initialize` request that passed through.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct FsCapability {
    read: bool,
    write: bool,
}

/// The routing state of one agentctl: pending calls, pending agent requests, fs capability, counters.
#[derive(Debug)]
pub struct Router {
    limits: RouterLimits,
    auto_approve_permissions: bool,
    next_call: CallId,
    calls: HashMap<CallId, ()>,
    agent_requests: HashMap<String, PendingAgentRequest>,
    fs: FsCapability,
    subscribers: usize,
    stats: RouterStats,
    actions: VecDeque<Action>,
}

impl Router {
    /// A router with no pending work.
    pub fn new(limits: RouterLimits, auto_approve_permissions: bool) -> Self {
        Self {
            limits,
            auto_approve_permissions,
            next_call: 1,
            calls: HashMap::new(),
            agent_requests: HashMap::new(),
            fs: FsCapability::default(),
            subscribers: 0,
            stats: RouterStats::default(),
            actions: VecDeque::new(),
        }
    }

    /// The next action to execute, in order; call until `None` after every `handle_*`/`begin_call`.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// The earliest deadline of a pending agent request; call [`Router::handle_timeout`] once it has passed.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.agent_requests.values().map(|r| r.deadline).min()
    }

    /// Counters so far.
    pub fn stats(&self) -> RouterStats {
        self.stats
    }

    /// `/acp/call` requests waiting for the agent.
    pub fn pending_calls(&self) -> usize {
        self.calls.len()
    }

    /// Agent requests waiting for a subscriber's answer.
    pub fn pending_agent_requests(&self) -> usize {
        self.agent_requests.len()
    }

    /// A new agent process started: forget the previous one's fs capability.
    pub fn agent_started(&mut self) {
        self.fs = FsCapability::default();
        self.agent_requests.clear();
    }

    /// The agent exited: every pending call completes with [`CallReply::Unreachable`] ([`Unreachable::Exited`]);
    /// pending agent requests are forgotten (nobody is left to answer); the fs capability is reset.
    pub fn agent_exited(&mut self) {
        self.fail_calls(Unreachable::Exited);
        self.agent_requests.clear();
        self.fs = FsCapability::default();
    }

    /// The agent can no longer answer (`why`): every pending call completes with [`CallReply::Unreachable`], in
    /// call order.
    pub fn fail_calls(&mut self, why: Unreachable) {
        let mut calls: Vec<CallId> = self.calls.drain().map(|(call, ())| call).collect();
        calls.sort_unstable();
        for call in calls {
            self.actions.push_back(Action::CompleteCall {
                call,
                reply: CallReply::Unreachable(why),
            });
        }
    }

    /// One call can never be answered (its request could not be written): it completes with
    /// [`CallReply::Unreachable`]. Returns whether it was pending.
    pub fn fail_call(&mut self, call: CallId, why: Unreachable) -> bool {
        if self.calls.remove(&call).is_none() {
            return false;
        }
        self.actions.push_back(Action::CompleteCall {
            call,
            reply: CallReply::Unreachable(why),
        });
        true
    }

    /// Starts an `/acp/call`: assigns the integer id `n` and queues the request line for the agent.
    ///
    /// `params` is forwarded verbatim (whitespace between tokens removed). An `initialize` request that advertises
    /// `clientCapabilities.fs.readTextFile`/`writeTextFile` turns on local `fs/*` serving.
    ///
    /// # Errors
    /// [`RouterError::EmptyMethod`], [`RouterError::InvalidParams`] (params neither object nor array),
    /// [`RouterError::TooManyPendingCalls`] at [`RouterLimits::max_pending_calls`]; nothing is queued.
    pub fn begin_call(
        &mut self,
        method: &str,
        params: Option<&RawValue>,
    ) -> Result<CallId, RouterError> {
        check_method_and_params(method, params)?;
        if self.calls.len() >= self.limits.max_pending_calls {
            return Err(RouterError::TooManyPendingCalls {
                limit: self.limits.max_pending_calls,
            });
        }
        let call = self.next_call;
        self.next_call += 1;
        self.calls.insert(call, ());
        self.observe_client_request(method, params);
        let id = call.to_string();
        let line = envelope::request_line(Some(&id), method, params);
        self.actions.push_back(Action::WriteCall {
            call,
            line: Bytes::from(line),
        });
        Ok(call)
    }

    /// The caller of `call` stopped waiting (timeout, or the HTTP client went away): its response, if it ever
    /// comes, is dropped and counted in [`RouterStats::late_responses`]. Returns whether it was pending.
    pub fn abandon_call(&mut self, call: CallId) -> bool {
        self.calls.remove(&call).is_some()
    }

    /// Handles an `/acp/send` body: a notification, a request (its response is relayed on the stream), or an answer
    /// to a pending agent request. Queues the line for the agent.
    ///
    /// A `session/cancel` notification also answers the session's pending `session/request_permission` requests
    /// with the cancelled outcome (ACP "Cancellation"; all of them when the params carry no `sessionId`).
    ///
    /// # Errors
    /// [`RouterError::NotAMessage`], [`RouterError::ReservedId`], [`RouterError::NoPendingRequest`],
    /// [`RouterError::InvalidErrorObject`], [`RouterError::InvalidId`], [`RouterError::InvalidParams`],
    /// [`RouterError::EmptyMethod`]; nothing is queued then.
    pub fn handle_client_message(&mut self, body: &[u8]) -> Result<(), RouterError> {
        match envelope::peek(body) {
            Envelope::Notification { method, params } => {
                check_method_and_params(&method, params)?;
                let line = envelope::request_line(None, &method, params);
                self.actions
                    .push_back(Action::WriteToAgent(Bytes::from(line)));
                if method == "session/cancel" {
                    self.cancel_permissions(params);
                }
                Ok(())
            }
            Envelope::Request { id, method, params } => {
                if !is_integer_or_string(id.get()) {
                    return Err(RouterError::InvalidId {
                        id: id.get().to_owned(),
                    });
                }
                check_method_and_params(&method, params)?;
                if is_reserved_id(id.get()) {
                    return Err(RouterError::ReservedId {
                        id: id.get().to_owned(),
                    });
                }
                self.observe_client_request(&method, params);
                let line = envelope::request_line(Some(id.get()), &method, params);
                self.actions
                    .push_back(Action::WriteToAgent(Bytes::from(line)));
                Ok(())
            }
            Envelope::Response { id, outcome } => {
                if let Outcome::Error(error) = &outcome
                    && serde_json::from_str::<ErrorShape>(error.get()).is_err()
                {
                    return Err(RouterError::InvalidErrorObject);
                }
                let key = id_key(id.get());
                let Some(pending) = self.agent_requests.remove(&key) else {
                    return Err(RouterError::NoPendingRequest {
                        id: id.get().to_owned(),
                    });
                };
                let line = envelope::response_line(&pending.id, &outcome);
                self.actions
                    .push_back(Action::WriteToAgent(Bytes::from(line)));
                Ok(())
            }
            Envelope::Other => Err(RouterError::NotAMessage),
        }
    }

    /// Routes one JSON line from the agent (verbatim bytes, no newline).
    ///
    /// - notifications, responses to `/acp/send` requests and anything that is not JSON-RPC: broadcast;
    /// - responses to `/acp/call`: complete the call and broadcast; a late one is dropped and counted;
    /// - `fs/*` requests when the client advertised `fs`: served locally ([`Action::ServeFs`]), not broadcast;
    /// - `session/request_permission` with auto-approve: answered with the first allow option, not broadcast;
    /// - any other request: broadcast and remembered until a subscriber answers, or answered at once when no
    ///   subscriber is connected (fail closed).
    pub fn handle_agent_message(&mut self, line: Bytes, now: Instant) {
        let action = match envelope::peek(&line) {
            Envelope::Other => {
                self.stats.non_rpc_messages += 1;
                Some(Action::Broadcast(line.clone()))
            }
            Envelope::Notification { .. } => Some(Action::Broadcast(line.clone())),
            Envelope::Response { id, outcome } => self.route_response(id, &outcome, &line),
            Envelope::Request { id, method, params } => {
                self.route_agent_request(id, &method, params, &line, now)
            }
        };
        if let Some(action) = action {
            self.actions.push_back(action);
        }
    }

    /// Answers every agent request whose deadline is at or before `now` (fail closed).
    pub fn handle_timeout(&mut self, now: Instant) {
        let mut expired: Vec<(Instant, String)> = self
            .agent_requests
            .iter()
            .filter(|(_, r)| r.deadline <= now)
            .map(|(key, r)| (r.deadline, key.clone()))
            .collect();
        expired.sort();
        for (_, key) in expired {
            if let Some(pending) = self.agent_requests.remove(&key) {
                self.fail_closed(&pending.id, &pending.method, FailClosed::Timeout);
            }
        }
    }

    /// The number of `/acp/stream` subscribers changed; when it drops to 0, every pending agent request is
    /// answered at once (nobody is left to answer it).
    pub fn set_subscribers(&mut self, count: usize) {
        self.subscribers = count;
        if count == 0 {
            let mut pending: Vec<PendingAgentRequest> =
                self.agent_requests.drain().map(|(_, r)| r).collect();
            pending.sort_by_key(|r| r.deadline);
            for request in pending {
                self.fail_closed(&request.id, &request.method, FailClosed::NoSubscriber);
            }
        }
    }

    fn route_response(
        &mut self,
        id: &RawValue,
        outcome: &Outcome<'_>,
        line: &Bytes,
    ) -> Option<Action> {
        let Some(call) = call_number(id.get()) else {
            if is_reserved_id(id.get()) {
                self.stats.late_responses += 1;
                return None;
            }
            return Some(Action::Broadcast(line.clone()));
        };
        if self.calls.remove(&call).is_none() {
            self.stats.late_responses += 1;
            return None;
        }
        let (member, raw) = match outcome {
            Outcome::Result(raw) => ("result", raw.get()),
            Outcome::Error(raw) => ("error", raw.get()),
        };
        let mut body = Vec::with_capacity(raw.len() + 12);
        body.extend_from_slice(b"{\"");
        body.extend_from_slice(member.as_bytes());
        body.extend_from_slice(b"\":");
        body.extend_from_slice(raw.as_bytes());
        body.push(b'}');
        self.actions.push_back(Action::CompleteCall {
            call,
            reply: CallReply::Response(Bytes::from(body)),
        });
        Some(Action::Broadcast(line.clone()))
    }

    fn route_agent_request(
        &mut self,
        id: &RawValue,
        method: &str,
        params: Option<&RawValue>,
        line: &Bytes,
        now: Instant,
    ) -> Option<Action> {
        let fs_method = match method {
            "fs/read_text_file" if self.fs.read => Some(FsMethod::ReadTextFile),
            "fs/write_text_file" if self.fs.write => Some(FsMethod::WriteTextFile),
            _ => None,
        };
        if let Some(method) = fs_method {
            self.stats.fs_requests_served += 1;
            return Some(Action::ServeFs(FsRequest {
                id: id.get().to_owned(),
                method,
                params: params.map_or_else(|| "null".to_owned(), |p| p.get().to_owned()),
            }));
        }
        let permission = (method == REQUEST_PERMISSION)
            .then(|| params.and_then(|p| serde_json::from_str::<PermissionParams>(p.get()).ok()))
            .flatten();
        if method == REQUEST_PERMISSION && self.auto_approve_permissions {
            self.stats.auto_approved_permissions += 1;
            let outcome = permission
                .as_ref()
                .and_then(|p| p.options.iter().find(|o| matches!(o.kind.as_deref(), Some("allow_once" | "allow_always"))))
                .map_or_else(
                    || serde_json::json!({"outcome": {"outcome": "cancelled"}}),
                    |option| serde_json::json!({"outcome": {"outcome": "selected", "optionId": option.option_id}}),
                );
            return Some(Action::WriteToAgent(Bytes::from(envelope::result_line(
                id.get(),
                &outcome,
            ))));
        }
        if self.subscribers == 0 {
            self.fail_closed(id.get(), method, FailClosed::NoSubscriber);
            return None;
        }
        let key = id_key(id.get());
        if !self.agent_requests.contains_key(&key)
            && self.agent_requests.len() >= self.limits.max_pending_agent_requests
        {
            self.fail_closed(id.get(), method, FailClosed::TooManyPending);
            return None;
        }
        self.agent_requests.insert(
            key,
            PendingAgentRequest {
                id: id.get().to_owned(),
                method: method.to_owned(),
                session_id: permission.and_then(|p| p.session_id),
                deadline: now + self.limits.agent_request_timeout,
            },
        );
        Some(Action::Broadcast(line.clone()))
    }

    /// Queues agentctl's own answer to an agent request nobody answered.
    fn fail_closed(&mut self, id: &str, method: &str, why: FailClosed) {
        self.stats.fail_closed_requests += 1;
        let line = if why == FailClosed::TooManyPending {
            let data = serde_json::json!({"reason": why.as_str(), "limit": self.limits.max_pending_agent_requests});
            envelope::error_line(
                id,
                INTERNAL_ERROR,
                "too many requests waiting for an answer",
                Some(&data),
            )
        } else if method == REQUEST_PERMISSION {
            envelope::result_line(
                id,
                &serde_json::json!({"outcome": {"outcome": "cancelled"}}),
            )
        } else {
            let data = serde_json::json!({"method": method, "reason": why.as_str()});
            envelope::error_line(
                id,
                METHOD_NOT_FOUND,
                "method not found: no client answered",
                Some(&data),
            )
        };
        self.actions
            .push_back(Action::WriteToAgent(Bytes::from(line)));
    }

    /// `session/cancel {sessionId}`: answer that session's pending permission requests with the cancelled outcome.
    fn cancel_permissions(&mut self, params: Option<&RawValue>) {
        let session = params
            .and_then(|p| serde_json::from_str::<CancelParams>(p.get()).ok())
            .and_then(|p| p.session_id);
        let mut keys: Vec<(Instant, String)> = self
            .agent_requests
            .iter()
            .filter(|(_, r)| r.method == REQUEST_PERMISSION)
            .filter(|(_, r)| session.is_none() || r.session_id == session)
            .map(|(key, r)| (r.deadline, key.clone()))
            .collect();
        keys.sort();
        for (_, key) in keys {
            if let Some(pending) = self.agent_requests.remove(&key) {
                self.fail_closed(&pending.id, &pending.method, FailClosed::SessionCancelled);
            }
        }
    }

    /// Looks at a request the client sends (through `/acp/call` or `/acp/send`); `initialize` sets the fs
    /// capability.
    fn observe_client_request(&mut self, method: &str, params: Option<&RawValue>) {
        if method != "initialize" {
            return;
        }
        let fs = params
            .and_then(|p| serde_json::from_str::<InitializeParams>(p.get()).ok())
            .and_then(|p| p.client_capabilities)
            .and_then(|c| c.fs)
            .unwrap_or_default();
        self.fs = FsCapability {
            read: fs.read_text_file,
            write: fs.write_text_file,
        };
    }
}

/// A client request's method is not empty and its params, when present, are an object or an array
/// (JSON-RPC 2.0 §4.2: "params … MUST be a Structured value").
fn check_method_and_params(method: &str, params: Option<&RawValue>) -> Result<(), RouterError> {
    if method.is_empty() {
        return Err(RouterError::EmptyMethod);
    }
    if let Some(params) = params
        && !matches!(
            params.get().trim_start().as_bytes().first(),
            Some(b'{' | b'[')
        )
    {
        return Err(RouterError::InvalidParams);
    }
    Ok(())
}

/// A JSON-RPC id agentctl relays: a string or an integer (no fraction, no exponent); JSON-RPC 2.0 §4 allows
/// `null` and fractions but discourages both, and neither can be matched back reliably.
fn is_integer_or_string(id: &str) -> bool {
    let id = id.trim();
    match id.as_bytes().first() {
        Some(b'"') => true,
        Some(b'-' | b'0'..=b'9') => id.bytes().skip(1).all(|b| b.is_ascii_digit()),
        _ => false,
    }
}

/// The call number of an id in agentctl's space (a JSON integer that fits a [`CallId`]), if it is one.
fn call_number(id: &str) -> Option<CallId> {
    let id = id.trim();
    if !id.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    id.parse().ok()
}

/// Whether an id is a JSON integer (any sign or size): agentctl's `/acp/call` space, not for subscribers.
fn is_reserved_id(id: &str) -> bool {
    let id = id.trim();
    let digits = id.strip_prefix('-').unwrap_or(id);
    !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
}

/// A canonical text for an id, so that `"a"` and `"\u0061"` (or `1` with different spacing) match.
fn id_key(id: &str) -> String {
    serde_json::from_str::<serde_json::Value>(id)
        .ok()
        .and_then(|value| serde_json::to_string(&value).ok())
        .unwrap_or_else(|| id.to_owned())
}

#[derive(Deserialize)]
struct ErrorShape {
    #[allow(dead_code, reason = "validated by deserialization")]
    code: i64,
    #[allow(dead_code, reason = "validated by deserialization")]
    message: String,
}

#[derive(Deserialize)]
struct PermissionParams {
    #[serde(rename = "sessionId", default)]
    session_id: Option<String>,
    #[serde(default)]
    options: Vec<PermissionOption>,
}

#[derive(Deserialize)]
struct PermissionOption {
    #[serde(rename = "optionId", default)]
    option_id: serde_json::Value,
    #[serde(default)]
    kind: Option<String>,
}

#[derive(Deserialize)]
struct CancelParams {
    #[serde(rename = "sessionId", default)]
    session_id: Option<String>,
}

#[derive(Deserialize)]
struct InitializeParams {
    #[serde(rename = "clientCapabilities", default)]
    client_capabilities: Option<ClientCapabilities>,
}

#[derive(Deserialize)]
struct ClientCapabilities {
    #[serde(default)]
    fs: Option<FsCapabilities>,
}

#[derive(Deserialize, Default)]
struct FsCapabilities {
    #[serde(rename = "readTextFile", default)]
    read_text_file: bool,
    #[serde(rename = "writeTextFile", default)]
    write_text_file: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A router driven by a script; each step's actions are rendered as readable lines.
    struct Harness {
        router: Router,
        start: Instant,
    }

    impl Harness {
        fn new(limits: RouterLimits, auto_approve: bool) -> Self {
            Self {
                router: Router::new(limits, auto_approve),
                start: Instant::now(),
            }
        }

        fn at(&self, secs: u64) -> Instant {
            self.start + Duration::from_secs(secs)
        }

        fn actions(&mut self) -> Vec<String> {
            std::iter::from_fn(|| self.router.poll_action())
                .map(|action| match action {
                    Action::Broadcast(b) => format!("broadcast {}", String::from_utf8_lossy(&b)),
                    Action::CompleteCall {
                        call,
                        reply: CallReply::Response(b),
                    } => {
                        format!("complete {call} {}", String::from_utf8_lossy(&b))
                    }
                    Action::CompleteCall {
                        call,
                        reply: CallReply::Unreachable(why),
                    } => format!("complete {call} {}", why.as_str()),
                    Action::WriteToAgent(b) | Action::WriteCall { line: b, .. } => {
                        format!("write {}", String::from_utf8_lossy(&b))
                    }
                    Action::ServeFs(r) => format!("fs {} {} {}", r.method.as_str(), r.id, r.params),
                })
                .collect()
        }

        fn agent(&mut self, line: &str, secs: u64) -> Vec<String> {
            let now = self.at(secs);
            self.router
                .handle_agent_message(Bytes::from(line.to_owned()), now);
            self.actions()
        }

        fn send(&mut self, body: &str) -> Result<Vec<String>, RouterError> {
            self.router.handle_client_message(body.as_bytes())?;
            Ok(self.actions())
        }

        fn call(
            &mut self,
            method: &str,
            params: Option<&str>,
        ) -> Result<(CallId, Vec<String>), RouterError> {
            let params: Option<Box<RawValue>> = params.map(|p| serde_json::from_str(p).unwrap());
            let call = self.router.begin_call(method, params.as_deref())?;
            Ok((call, self.actions()))
        }
    }

    /// Compares actions as `(verb, JSON value)`: key order inside a JSON object depends on serde_json's
    /// `preserve_order` feature, which feature unification turns on in a workspace-wide build.
    fn check(got: Vec<String>, expect: &[&str]) {
        fn normalize(action: &str) -> (String, Option<serde_json::Value>) {
            match action.split_once(' ') {
                Some((verb, rest)) => match serde_json::from_str(rest) {
                    Ok(value) => (verb.to_owned(), Some(value)),
                    Err(_) => (action.to_owned(), None),
                },
                None => (action.to_owned(), None),
            }
        }
        let got: Vec<_> = got.iter().map(|a| normalize(a)).collect();
        let expect: Vec<_> = expect.iter().map(|a| normalize(a)).collect();
        assert_eq!(got, expect);
    }

    const PERMISSION: &str = r#"{"jsonrpc":"2.0","id":0,"method":"session/request_permission","params":{"sessionId":"s1","toolCall":{"toolCallId":"t"},"options":[{"optionId":"rej","kind":"reject_once"},{"optionId":"ok","kind":"allow_once"}]}}"#;

    #[test]
    fn calls_get_their_own_ids_and_their_responses_verbatim() {
        let mut h = Harness::new(RouterLimits::default(), false);
        let (call, actions) = h
            .call("initialize", Some(r#"{"protocolVersion": 1}"#))
            .unwrap();
        assert_eq!(call, 1);
        check(
            actions,
            &[
                r#"write {"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}"#,
            ],
        );
        let response = r#"{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":1, "n":1.50}}"#;
        check(
            h.agent(response, 0),
            &[
                r#"complete 1 {"result":{"protocolVersion":1, "n":1.50}}"#,
                &format!("broadcast {response}"),
            ],
        );
        assert_eq!(h.router.pending_calls(), 0);
        let (call, _) = h.call("session/new", None).unwrap();
        let error = r#"{"jsonrpc":"2.0","id":2,"error":{"code":-32602,"message":"bad"}}"#;
        check(
            h.agent(error, 0),
            &[
                &format!("complete {call} {{\"error\":{{\"code\":-32602,\"message\":\"bad\"}}}}"),
                &format!("broadcast {error}"),
            ],
        );
    }

    #[test]
    fn a_late_response_is_dropped_and_counted() {
        let mut h = Harness::new(RouterLimits::default(), false);
        let (call, _) = h.call("session/prompt", Some("{}")).unwrap();
        assert!(h.router.abandon_call(call));
        check(h.agent(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#, 0), &[]);
        check(h.agent(r#"{"jsonrpc":"2.0","id":99,"result":{}}"#, 0), &[]);
        check(h.agent(r#"{"jsonrpc":"2.0","id":-3,"result":{}}"#, 0), &[]);
        assert_eq!(h.router.stats().late_responses, 3);
        // Responses to a subscriber's own (string-id) requests are relayed.
        check(
            h.agent(r#"{"jsonrpc":"2.0","id":"5","result":{}}"#, 0),
            &[r#"broadcast {"jsonrpc":"2.0","id":"5","result":{}}"#],
        );
    }

    #[test]
    fn pending_calls_are_bounded_at_the_limit() {
        let mut h = Harness::new(
            RouterLimits {
                max_pending_calls: 2,
                ..RouterLimits::default()
            },
            false,
        );
        h.call("a", None).unwrap();
        h.call("b", None).unwrap();
        let err = h.call("c", None).unwrap_err();
        assert_eq!(err, RouterError::TooManyPendingCalls { limit: 2 });
        assert_eq!(err.code(), "too_many_pending_calls");
        check(h.actions(), &[]);
        h.agent(r#"{"id":1,"result":null}"#, 0);
        h.call("c", None).unwrap();
    }

    #[test]
    fn agent_exit_fails_every_pending_call() {
        let mut h = Harness::new(RouterLimits::default(), false);
        h.call("a", None).unwrap();
        h.call("b", None).unwrap();
        h.router.agent_exited();
        check(h.actions(), &["complete 1 exited", "complete 2 exited"]);
        assert_eq!(h.router.pending_calls(), 0);
    }

    #[test]
    fn closed_pipes_fail_pending_calls_at_once() {
        let mut h = Harness::new(RouterLimits::default(), false);
        h.call("a", None).unwrap();
        h.call("b", None).unwrap();
        h.call("c", None).unwrap();
        assert!(h.router.fail_call(2, Unreachable::StdinClosed));
        assert!(
            !h.router.fail_call(2, Unreachable::StdinClosed),
            "only once"
        );
        check(h.actions(), &["complete 2 stdin_closed"]);
        h.router.fail_calls(Unreachable::StdoutClosed);
        check(
            h.actions(),
            &["complete 1 stdout_closed", "complete 3 stdout_closed"],
        );
        // A response after that is late.
        check(h.agent(r#"{"id":1,"result":{}}"#, 0), &[]);
        assert_eq!(h.router.stats().late_responses, 1);
    }

    #[test]
    fn permission_without_subscribers_fails_closed_at_once() {
        let mut h = Harness::new(RouterLimits::default(), false);
        check(
            h.agent(PERMISSION, 0),
            &[r#"write {"jsonrpc":"2.0","id":0,"result":{"outcome":{"outcome":"cancelled"}}}"#],
        );
        check(
            h.agent(
                r#"{"jsonrpc":"2.0","id":"t1","method":"terminal/create","params":{}}"#,
                0,
            ),
            &[
                r#"write {"jsonrpc":"2.0","id":"t1","error":{"code":-32601,"message":"method not found: no client answered","data":{"method":"terminal/create","reason":"no_subscriber"}}}"#,
            ],
        );
        assert_eq!(h.router.stats().fail_closed_requests, 2);
    }

    #[test]
    fn permission_is_relayed_and_answered_by_a_subscriber() {
        let mut h = Harness::new(RouterLimits::default(), false);
        h.router.set_subscribers(1);
        check(
            h.agent(PERMISSION, 0),
            &[&format!("broadcast {PERMISSION}")],
        );
        assert_eq!(h.router.poll_timeout(), Some(h.at(600)));
        let answer =
            r#"{"id": 0, "result": {"outcome": {"outcome": "selected", "optionId": "ok"}}}"#;
        check(
            h.send(answer).unwrap(),
            &[
                r#"write {"jsonrpc":"2.0","id":0,"result":{"outcome":{"outcome":"selected","optionId":"ok"}}}"#,
            ],
        );
        // A second answer to the same id is refused: the agent must never get two.
        let err = h.send(answer).unwrap_err();
        assert_eq!(err.code(), "no_pending_request");
        assert_eq!(h.router.poll_timeout(), None);
    }

    #[test]
    fn unanswered_agent_requests_fail_closed_at_the_deadline() {
        let limits = RouterLimits {
            agent_request_timeout: Duration::from_secs(10),
            ..RouterLimits::default()
        };
        let mut h = Harness::new(limits, false);
        h.router.set_subscribers(1);
        h.agent(PERMISSION, 0);
        h.agent(r#"{"jsonrpc":"2.0","id":1,"method":"x/custom"}"#, 5);
        h.router.handle_timeout(h.at(9));
        check(h.actions(), &[]);
        h.router.handle_timeout(h.at(10));
        check(
            h.actions(),
            &[r#"write {"jsonrpc":"2.0","id":0,"result":{"outcome":{"outcome":"cancelled"}}}"#],
        );
        assert_eq!(h.router.poll_timeout(), Some(h.at(15)));
        h.router.handle_timeout(h.at(15));
        check(
            h.actions(),
            &[
                r#"write {"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"method not found: no client answered","data":{"method":"x/custom","reason":"timeout"}}}"#,
            ],
        );
    }

    #[test]
    fn the_last_subscriber_leaving_fails_pending_requests_closed() {
        let mut h = Harness::new(RouterLimits::default(), false);
        h.router.set_subscribers(2);
        h.agent(PERMISSION, 0);
        h.router.set_subscribers(1);
        check(h.actions(), &[]);
        h.router.set_subscribers(0);
        check(
            h.actions(),
            &[r#"write {"jsonrpc":"2.0","id":0,"result":{"outcome":{"outcome":"cancelled"}}}"#],
        );
    }

    #[test]
    fn pending_agent_requests_are_bounded_at_the_limit() {
        let mut h = Harness::new(
            RouterLimits {
                max_pending_agent_requests: 2,
                ..RouterLimits::default()
            },
            false,
        );
        h.router.set_subscribers(1);
        h.agent(r#"{"id":1,"method":"x"}"#, 0);
        h.agent(r#"{"id":2,"method":"x"}"#, 0);
        check(
            h.agent(r#"{"id":3,"method":"x"}"#, 0),
            &[
                r#"write {"jsonrpc":"2.0","id":3,"error":{"code":-32603,"message":"too many requests waiting for an answer","data":{"limit":2,"reason":"too_many_pending_agent_requests"}}}"#,
            ],
        );
        assert_eq!(h.router.pending_agent_requests(), 2);
    }

    #[test]
    fn session_cancel_answers_that_sessions_permissions() {
        let mut h = Harness::new(RouterLimits::default(), false);
        h.router.set_subscribers(1);
        h.agent(PERMISSION, 0);
        h.agent(
            &PERMISSION
                .replace(r#""id":0"#, r#""id":1"#)
                .replace("s1", "s2"),
            0,
        );
        check(
            h.send(r#"{"method":"session/cancel","params":{"sessionId":"s1"}}"#)
                .unwrap(),
            &[
                r#"write {"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"s1"}}"#,
                r#"write {"jsonrpc":"2.0","id":0,"result":{"outcome":{"outcome":"cancelled"}}}"#,
            ],
        );
        assert_eq!(h.router.pending_agent_requests(), 1);
    }

    #[test]
    fn auto_approve_selects_the_first_allow_option() {
        let mut h = Harness::new(RouterLimits::default(), true);
        check(
            h.agent(PERMISSION, 0),
            &[
                r#"write {"jsonrpc":"2.0","id":0,"result":{"outcome":{"optionId":"ok","outcome":"selected"}}}"#,
            ],
        );
        let no_allow = r#"{"id":2,"method":"session/request_permission","params":{"options":[{"optionId":"r","kind":"reject_once"}]}}"#;
        check(
            h.agent(no_allow, 0),
            &[r#"write {"jsonrpc":"2.0","id":2,"result":{"outcome":{"outcome":"cancelled"}}}"#],
        );
    }

    #[test]
    fn fs_requests_are_served_only_after_initialize_advertised_fs() {
        let mut h = Harness::new(RouterLimits::default(), false);
        h.router.set_subscribers(1);
        let read =
            r#"{"jsonrpc":"2.0","id":4,"method":"fs/read_text_file","params":{"path":"/w/a"}}"#;
        check(h.agent(read, 0), &[&format!("broadcast {read}")]);
        h.call(
            "initialize",
            Some(r#"{"protocolVersion":1,"clientCapabilities":{"fs":{"readTextFile":true}}}"#),
        )
        .unwrap();
        check(
            h.agent(&read.replace("4", "5"), 0),
            &[r#"fs fs/read_text_file 5 {"path":"/w/a"}"#],
        );
        let write =
            r#"{"id":6,"method":"fs/write_text_file","params":{"path":"/w/a","content":""}}"#;
        check(h.agent(write, 0), &[&format!("broadcast {write}")]);
        h.router.agent_exited();
        check(h.actions(), &["complete 1 exited"]);
        check(
            h.agent(&read.replace("4", "7"), 0),
            &[&format!("broadcast {}", read.replace("4", "7"))],
        );
    }

    #[test]
    fn client_messages_are_validated() {
        let mut h = Harness::new(RouterLimits::default(), false);
        check(
            h.send(r#"{"method":"session/cancel","params":{"sessionId":"s"}}"#)
                .unwrap(),
            &[r#"write {"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"s"}}"#],
        );
        check(
            h.send(r#"{"jsonrpc":"2.0","id":"mine-1","method":"session/list"}"#)
                .unwrap(),
            &[r#"write {"jsonrpc":"2.0","id":"mine-1","method":"session/list"}"#],
        );
        for (body, code) in [
            (r#"{"id":3,"method":"x"}"#, "reserved_id"),
            (r#"{"id":-1,"method":"x"}"#, "reserved_id"),
            (
                r#"{"id":123456789012345678901234567890,"method":"x"}"#,
                "reserved_id",
            ),
            (r#"{"id":9,"result":{}}"#, "no_pending_request"),
            (
                r#"{"id":9,"error":{"message":"no code"}}"#,
                "invalid_error_object",
            ),
            (r#"{"params":{}}"#, "not_a_message"),
            ("[]", "not_a_message"),
        ] {
            assert_eq!(h.send(body).unwrap_err().code(), code, "{body}");
        }
        check(h.actions(), &[]);
    }

    #[test]
    fn other_json_is_relayed_and_counted() {
        let mut h = Harness::new(RouterLimits::default(), false);
        check(h.agent("[1,2]", 0), &["broadcast [1,2]"]);
        check(
            h.agent(r#"{"method":"session/update","params":{}}"#, 0),
            &[r#"broadcast {"method":"session/update","params":{}}"#],
        );
        assert_eq!(h.router.stats().non_rpc_messages, 1);
    }

    #[test]
    fn ids_must_be_integers_or_strings_params_structured_and_methods_named() {
        let mut h = Harness::new(RouterLimits::default(), false);
        for (body, code) in [
            (r#"{"id":null,"method":"x"}"#, "invalid_id"),
            (r#"{"id":1.5,"method":"x"}"#, "invalid_id"),
            (r#"{"id":1e3,"method":"x"}"#, "invalid_id"),
            (r#"{"id":{"a":1},"method":"x"}"#, "invalid_id"),
            (r#"{"id":[1],"method":"x"}"#, "invalid_id"),
            (r#"{"id":true,"method":"x"}"#, "invalid_id"),
            (r#"{"id":1,"method":"x","params":5}"#, "invalid_params"),
            (r#"{"method":"x","params":"s"}"#, "invalid_params"),
            (r#"{"method":"x","params":null}"#, "invalid_params"),
            (r#"{"method":""}"#, "empty_method"),
            (r#"{"id":1,"method":""}"#, "empty_method"),
        ] {
            assert_eq!(h.send(body).unwrap_err().code(), code, "{body}");
        }
        for params in ["5", "\"s\"", "null", "true"] {
            let err = h.call("x", Some(params)).unwrap_err();
            assert_eq!(err.code(), "invalid_params", "{params}");
        }
        assert_eq!(h.call("", None).unwrap_err().code(), "empty_method");
        check(h.actions(), &[]);
        assert_eq!(
            h.send(r#"{"id":-7,"method":"x","params":[]}"#)
                .unwrap_err()
                .code(),
            "reserved_id"
        );
        check(
            h.send(r#"{"id":"s","method":"x","params":{}}"#).unwrap(),
            &[r#"write {"jsonrpc":"2.0","id":"s","method":"x","params":{}}"#],
        );
        h.call("x", Some("[1]")).unwrap();
    }
}
