//! A reference model of the agentctl router's bookkeeping, driven by random operation sequences.
//!
//! Shared by the proptest state machine (`tests/router_state_machine.rs`) and the cargo-fuzz target
//! `agentctl_router` (`fuzz/fuzz_targets/agentctl_router.rs`, which decodes its bytes with [`decode_ops`]).
//!
//! Invariants checked after every operation (source: `protocols/agentctl.md` "Properties", `router.rs` docs):
//! - every `/acp/call` ends exactly once: one `CompleteCall` per call, never for a call that was abandoned,
//!   already completed or never begun; `agent_exited` completes every pending call with `exited`;
//! - call ids never collide: each `begin_call` returns a fresh id, larger than every earlier one, and its
//!   `WriteCall` line carries that id as a JSON integer;
//! - every agent request is answered at most once (by a subscriber's answer, a fail-closed answer, the
//!   auto-approver or a local `fs/*` serve), and a second answer is refused with `no_pending_request`;
//! - `pending_calls()` / `pending_agent_requests()` equal the model's counts and stay within the limits;
//! - every line written to the agent is one JSON-RPC 2.0 object; broadcasts are the agent's line verbatim.
#![allow(dead_code, reason = "each includer uses a different part")]

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

use agentwire_agentctl::router::{
    Action, CallId, CallReply, Router, RouterError, RouterLimits, Unreachable,
};
use bytes::Bytes;
use serde_json::Value;
use serde_json::value::RawValue;

/// The limits the model runs with: small, so that the bounds are reached.
pub const MAX_PENDING_CALLS: usize = 4;
/// See [`MAX_PENDING_CALLS`].
pub const MAX_PENDING_AGENT_REQUESTS: usize = 3;
/// Agent request timeout of the model.
pub const AGENT_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// One step of a scenario.
#[derive(Clone, Debug)]
pub enum Op {
    /// `/acp/call` with method number `method` (0 `initialize` with fs capabilities, 1 `session/prompt`,
    /// 2 an empty method, 3 params that are a number).
    Call { method: u8 },
    /// The HTTP caller of the `n`-th begun call leaves.
    Abandon { n: u8 },
    /// Writing the `n`-th begun call's request failed.
    FailCall { n: u8 },
    /// The agent answers call id `id` (live, stale or never issued), with an error when `error`.
    AgentResponse { id: u8, error: bool },
    /// The agent sends a request with a fresh id (method number `method`, session `session`).
    AgentRequest { method: u8, session: u8 },
    /// A subscriber answers the `n`-th agent request (already answered or not).
    ClientAnswer { n: u8, error: bool },
    /// A subscriber sends a message of kind `kind` on `/acp/send`.
    ClientSend { kind: u8, session: u8 },
    /// Arbitrary bytes from the agent (requests are left to [`Op::AgentRequest`]).
    AgentLine(Vec<u8>),
    /// An arbitrary `/acp/send` body (answers are left to [`Op::ClientAnswer`]).
    ClientBody(Vec<u8>),
    /// The subscriber count changes.
    Subscribers(u8),
    /// Time passes by `secs` seconds, then the router's timeout handler runs.
    Advance { secs: u8 },
    /// The agent closes stdout or stdin: every pending call fails.
    FailAll { stdout: bool },
    /// The agent process exits.
    AgentExited,
    /// A new agent process starts.
    AgentStarted,
}

/// Decodes a fuzzer's bytes into operations: byte 0 sets auto-approve, then one tag byte per operation.
pub fn decode_ops(data: &[u8]) -> (bool, Vec<Op>) {
    let Some((&first, mut rest)) = data.split_first() else {
        return (false, Vec::new());
    };
    let mut ops = Vec::new();
    let byte = |rest: &mut &[u8]| -> u8 {
        let Some((&b, tail)) = rest.split_first() else {
            return 0;
        };
        *rest = tail;
        b
    };
    while !rest.is_empty() && ops.len() < 512 {
        let tag = byte(&mut rest);
        let a = byte(&mut rest);
        let b = byte(&mut rest);
        let op = match tag % 14 {
            0 => Op::Call { method: a },
            1 => Op::Abandon { n: a },
            2 => Op::FailCall { n: a },
            3 => Op::AgentResponse {
                id: a,
                error: b & 1 == 1,
            },
            4 => Op::AgentRequest {
                method: a,
                session: b,
            },
            5 => Op::ClientAnswer {
                n: a,
                error: b & 1 == 1,
            },
            6 => Op::ClientSend {
                kind: a,
                session: b,
            },
            7 | 8 => {
                let len = usize::from(a).min(rest.len());
                let (bytes, tail) = rest.split_at(len);
                rest = tail;
                if tag % 14 == 7 {
                    Op::AgentLine(bytes.to_vec())
                } else {
                    Op::ClientBody(bytes.to_vec())
                }
            }
            9 => Op::Subscribers(a % 3),
            10 => Op::Advance { secs: a },
            11 => Op::FailAll { stdout: a & 1 == 1 },
            12 => Op::AgentExited,
            _ => Op::AgentStarted,
        };
        ops.push(op);
    }
    (first & 1 == 1, ops)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RequestState {
    Pending,
    Answered,
    Forgotten,
}

/// The model next to a real [`Router`].
pub struct Model {
    router: Router,
    now: Instant,
    /// Calls begun, in order.
    issued: Vec<CallId>,
    /// Calls waiting for their end.
    open: BTreeSet<CallId>,
    /// Calls that ended (completed or abandoned).
    ended: BTreeSet<CallId>,
    /// Agent request ids (compact JSON text), in order, with their state.
    requests: Vec<String>,
    request_state: HashMap<String, RequestState>,
    subscribers: usize,
}

impl Model {
    /// A fresh router and model.
    pub fn new(auto_approve: bool) -> Self {
        let limits = RouterLimits {
            max_pending_calls: MAX_PENDING_CALLS,
            max_pending_agent_requests: MAX_PENDING_AGENT_REQUESTS,
            agent_request_timeout: AGENT_REQUEST_TIMEOUT,
        };
        Self {
            router: Router::new(limits, auto_approve),
            now: Instant::now(),
            issued: Vec::new(),
            open: BTreeSet::new(),
            ended: BTreeSet::new(),
            requests: Vec::new(),
            request_state: HashMap::new(),
            subscribers: 0,
        }
    }

    fn drain(&mut self) -> Vec<Action> {
        std::iter::from_fn(|| self.router.poll_action()).collect()
    }

    fn pending_requests(&self) -> usize {
        self.request_state
            .values()
            .filter(|s| **s == RequestState::Pending)
            .count()
    }

    /// Checks what every action says, whatever produced it: completions end open calls exactly once, answers to
    /// the agent answer pending requests exactly once, lines are JSON-RPC objects, broadcasts are `agent_line`.
    fn check_actions(&mut self, actions: &[Action], agent_line: Option<&[u8]>) {
        for action in actions {
            match action {
                Action::CompleteCall { call, reply } => {
                    assert!(
                        self.open.remove(call),
                        "call {call} completed but it was not pending"
                    );
                    assert!(self.ended.insert(*call), "call {call} ended twice");
                    if let CallReply::Response(body) = reply {
                        let value: Value =
                            serde_json::from_slice(body).expect("call reply body is json");
                        let object = value.as_object().expect("call reply body is an object");
                        assert_eq!(object.len(), 1, "reply body has one member: {value}");
                        assert!(object.contains_key("result") || object.contains_key("error"));
                    }
                }
                Action::Broadcast(line) => {
                    assert_eq!(
                        Some(line.as_ref()),
                        agent_line,
                        "only the agent's own line is broadcast, verbatim"
                    );
                }
                Action::WriteToAgent(line) => {
                    let value = json_rpc_object(line);
                    if value.get("method").is_none() {
                        let id = value.get("id").expect("a response has an id").to_string();
                        self.answered(&id);
                    }
                }
                Action::WriteCall { call, line } => {
                    let value = json_rpc_object(line);
                    assert_eq!(value.get("id"), Some(&Value::from(*call)));
                    assert!(value.get("method").is_some_and(Value::is_string));
                }
                Action::ServeFs(request) => {
                    let id = serde_json::from_str::<Value>(&request.id)
                        .expect("fs request id is json")
                        .to_string();
                    self.answered(&id);
                }
            }
        }
    }

    fn answered(&mut self, id: &str) {
        let state = self.request_state.get_mut(id);
        assert_eq!(
            state.as_deref(),
            Some(&RequestState::Pending),
            "answer to agent request {id} which is not pending"
        );
        if let Some(state) = state {
            *state = RequestState::Answered;
        }
    }

    fn forget_requests(&mut self) {
        for state in self.request_state.values_mut() {
            if *state == RequestState::Pending {
                *state = RequestState::Forgotten;
            }
        }
    }

    fn nth_call(&self, n: u8) -> CallId {
        if self.issued.is_empty() {
            return u64::from(n) + 1;
        }
        self.issued[usize::from(n) % self.issued.len()]
    }

    /// Applies one operation to the router and checks every invariant.
    pub fn apply(&mut self, op: &Op) {
        match op {
            Op::Call { method } => self.call(*method),
            Op::Abandon { n } => {
                let call = self.nth_call(*n);
                let was_open = self.open.remove(&call);
                assert_eq!(self.router.abandon_call(call), was_open);
                if was_open {
                    self.ended.insert(call);
                }
                let actions = self.drain();
                assert!(actions.is_empty(), "abandoning queues nothing: {actions:?}");
            }
            Op::FailCall { n } => {
                let call = self.nth_call(*n);
                let was_open = self.open.contains(&call);
                assert_eq!(
                    self.router.fail_call(call, Unreachable::StdinClosed),
                    was_open
                );
                let actions = self.drain();
                assert_eq!(actions.len(), usize::from(was_open));
                self.check_actions(&actions, None);
            }
            Op::AgentResponse { id, error } => {
                let id = u64::from(*id % 16);
                let outcome = if *error {
                    r#""error":{"code":-32000,"message":"no"}"#.to_owned()
                } else {
                    format!(r#""result":{{"n":{id}}}"#)
                };
                let line = format!(r#"{{"jsonrpc":"2.0","id":{id},{outcome}}}"#);
                let was_open = self.open.contains(&id);
                let actions = self.agent_line(line.as_bytes());
                let completions = actions
                    .iter()
                    .filter(|a| matches!(a, Action::CompleteCall { .. }))
                    .count();
                assert_eq!(completions, usize::from(was_open));
                assert!(!self.open.contains(&id));
            }
            Op::AgentRequest { method, session } => self.agent_request(*method, *session),
            Op::ClientAnswer { n, error } => {
                if self.requests.is_empty() {
                    return;
                }
                let id = self.requests[usize::from(*n) % self.requests.len()].clone();
                let outcome = if *error {
                    r#""error":{"code":-32000,"message":"no"}"#
                } else {
                    r#""result":{"outcome":{"outcome":"cancelled"}}"#
                };
                let body = format!(r#"{{"jsonrpc":"2.0","id":{id},{outcome}}}"#);
                let pending = self.request_state.get(&id) == Some(&RequestState::Pending);
                let result = self.router.handle_client_message(body.as_bytes());
                let actions = self.drain();
                if pending {
                    assert_eq!(result, Ok(()));
                    assert_eq!(actions.len(), 1, "one answer is written: {actions:?}");
                    self.check_actions(&actions, None);
                    assert_ne!(self.request_state.get(&id), Some(&RequestState::Pending));
                } else {
                    assert!(
                        matches!(result, Err(RouterError::NoPendingRequest { .. })),
                        "answer to a request that is not pending: {result:?}"
                    );
                    assert!(actions.is_empty());
                }
            }
            Op::ClientSend { kind, session } => self.client_send(*kind, *session),
            Op::AgentLine(bytes) => {
                if is_request(bytes) {
                    return;
                }
                self.agent_line(bytes);
            }
            Op::ClientBody(bytes) => {
                if is_response(bytes) {
                    return;
                }
                let result = self.router.handle_client_message(bytes);
                let actions = self.drain();
                if result.is_err() {
                    assert!(actions.is_empty(), "a refused send queues nothing");
                }
                self.check_actions(&actions, None);
            }
            Op::Subscribers(count) => {
                self.subscribers = usize::from(*count);
                self.router.set_subscribers(self.subscribers);
                let actions = self.drain();
                self.check_actions(&actions, None);
                if self.subscribers == 0 {
                    assert_eq!(self.router.pending_agent_requests(), 0);
                }
            }
            Op::Advance { secs } => {
                self.now += Duration::from_secs(u64::from(*secs));
                let due = self.router.poll_timeout().is_some_and(|t| t <= self.now);
                self.router.handle_timeout(self.now);
                let actions = self.drain();
                assert_eq!(due, !actions.is_empty(), "timeouts fire exactly when due");
                self.check_actions(&actions, None);
                assert!(self.router.poll_timeout().is_none_or(|t| t > self.now));
            }
            Op::FailAll { stdout } => {
                let why = if *stdout {
                    Unreachable::StdoutClosed
                } else {
                    Unreachable::StdinClosed
                };
                let before = self.open.len();
                self.router.fail_calls(why);
                let actions = self.drain();
                assert_eq!(actions.len(), before);
                self.check_actions(&actions, None);
            }
            Op::AgentExited => {
                let before = self.open.len();
                self.router.agent_exited();
                let actions = self.drain();
                assert_eq!(actions.len(), before);
                assert!(actions.iter().all(|a| matches!(
                    a,
                    Action::CompleteCall {
                        reply: CallReply::Unreachable(Unreachable::Exited),
                        ..
                    }
                )));
                self.check_actions(&actions, None);
                self.forget_requests();
            }
            Op::AgentStarted => {
                self.router.agent_started();
                let actions = self.drain();
                assert!(actions.is_empty());
                self.forget_requests();
            }
        }
        assert_eq!(self.router.pending_calls(), self.open.len());
        assert!(self.router.pending_calls() <= MAX_PENDING_CALLS);
        assert_eq!(
            self.router.pending_agent_requests(),
            self.pending_requests()
        );
        assert!(self.router.pending_agent_requests() <= MAX_PENDING_AGENT_REQUESTS);
    }

    fn call(&mut self, method: u8) {
        let object = RawValue::from_string(
            r#"{"protocolVersion":1,"clientCapabilities":{"fs":{"readTextFile":true,"writeTextFile":true}}}"#
                .to_owned(),
        )
        .expect("valid json");
        let number = RawValue::from_string("7".to_owned()).expect("valid json");
        let (name, params, valid) = match method % 4 {
            0 => ("initialize", Some(object.as_ref()), true),
            1 => ("session/prompt", None, true),
            2 => ("", None, false),
            _ => ("session/prompt", Some(number.as_ref()), false),
        };
        let full = self.open.len() >= MAX_PENDING_CALLS;
        let result = self.router.begin_call(name, params);
        let actions = self.drain();
        match result {
            Ok(call) => {
                assert!(valid && !full, "call accepted against the rules");
                assert!(
                    self.issued.last().is_none_or(|last| call > *last),
                    "call id {call} collides with or precedes an earlier one"
                );
                self.issued.push(call);
                self.open.insert(call);
                assert_eq!(actions.len(), 1);
                assert!(matches!(&actions[0], Action::WriteCall { call: c, .. } if *c == call));
                self.check_actions(&actions, None);
            }
            Err(error) => {
                if valid {
                    assert!(full, "valid call refused below the limit: {error}");
                    assert_eq!(
                        error,
                        RouterError::TooManyPendingCalls {
                            limit: MAX_PENDING_CALLS
                        }
                    );
                }
                assert!(actions.is_empty(), "a refused call queues nothing");
            }
        }
    }

    fn agent_request(&mut self, method: u8, session: u8) {
        let n = self.requests.len();
        let id = if n.is_multiple_of(2) {
            format!("\"r{n}\"")
        } else {
            format!("{}", 1000 + n)
        };
        let session = session % 2;
        let (name, params) = match method % 4 {
            0 => (
                "session/request_permission",
                format!(
                    r#"{{"sessionId":"s{session}","options":[{{"optionId":"yes","kind":"allow_once"}}]}}"#
                ),
            ),
            1 => (
                "fs/read_text_file",
                r#"{"sessionId":"s0","path":"a.txt"}"#.to_owned(),
            ),
            2 => (
                "fs/write_text_file",
                r#"{"sessionId":"s0","path":"a.txt","content":"x"}"#.to_owned(),
            ),
            _ => ("x/ask", "{}".to_owned()),
        };
        self.requests.push(id.clone());
        self.request_state.insert(id.clone(), RequestState::Pending);
        let line = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"{name}","params":{params}}}"#);
        let pending_before = self.router.pending_agent_requests();
        let actions = self.agent_line(line.as_bytes());
        assert_eq!(
            actions.len(),
            1,
            "one outcome per agent request: {actions:?}"
        );
        match &actions[0] {
            Action::Broadcast(_) => {
                assert!(self.subscribers > 0, "relayed with no subscriber");
                assert!(pending_before < MAX_PENDING_AGENT_REQUESTS);
            }
            Action::WriteToAgent(_) | Action::ServeFs(_) => {}
            other => panic!("unexpected outcome of an agent request: {other:?}"),
        }
    }

    fn client_send(&mut self, kind: u8, session: u8) {
        let n = self.issued.len() + self.requests.len();
        let (body, expect_ok) = match kind % 5 {
            0 => (
                format!(
                    r#"{{"jsonrpc":"2.0","method":"session/cancel","params":{{"sessionId":"s{}"}}}}"#,
                    session % 2
                ),
                true,
            ),
            1 => (
                r#"{"jsonrpc":"2.0","method":"session/cancel"}"#.to_owned(),
                true,
            ),
            2 => (
                format!(
                    r#"{{"jsonrpc":"2.0","id":"c{n}","method":"initialize","params":{{"clientCapabilities":{{"fs":{{"readTextFile":{}}}}}}}}}"#,
                    session & 1 == 1
                ),
                true,
            ),
            3 => (
                format!(r#"{{"jsonrpc":"2.0","id":{n},"method":"session/prompt","params":{{}}}}"#),
                false,
            ),
            _ => (r#"{"jsonrpc":"2.0","method":""}"#.to_owned(), false),
        };
        let result = self.router.handle_client_message(body.as_bytes());
        let actions = self.drain();
        assert_eq!(result.is_ok(), expect_ok, "{body}: {result:?}");
        if result.is_err() {
            assert!(actions.is_empty());
        }
        self.check_actions(&actions, None);
    }

    fn agent_line(&mut self, line: &[u8]) -> Vec<Action> {
        self.router
            .handle_agent_message(Bytes::copy_from_slice(line), self.now);
        let actions = self.drain();
        self.check_actions(&actions, Some(line));
        actions
    }
}

/// Runs a whole scenario.
pub fn run(auto_approve: bool, ops: &[Op]) {
    let mut model = Model::new(auto_approve);
    for op in ops {
        model.apply(op);
    }
    // Whatever happened, the agent's exit ends every call still open.
    model.apply(&Op::AgentExited);
    assert!(model.open.is_empty());
    assert_eq!(model.router.pending_agent_requests(), 0);
}

/// The fuzz entry point.
pub fn check_fuzz_input(data: &[u8]) {
    let (auto_approve, ops) = decode_ops(data);
    run(auto_approve, &ops);
}

fn json_rpc_object(line: &[u8]) -> Value {
    let value: Value = serde_json::from_slice(line).expect("a line to the agent is json");
    assert_eq!(
        value.get("jsonrpc").and_then(Value::as_str),
        Some("2.0"),
        "not a JSON-RPC 2.0 object: {value}"
    );
    value
}

/// Whether an arbitrary agent line may be a request (left to [`Op::AgentRequest`], whose ids the model tracks).
fn is_request(bytes: &[u8]) -> bool {
    let text = String::from_utf8_lossy(bytes);
    text.contains("method") || text.contains('\\')
}

/// Whether an arbitrary client body may be an answer (left to [`Op::ClientAnswer`]).
fn is_response(bytes: &[u8]) -> bool {
    let text = String::from_utf8_lossy(bytes);
    text.contains("result") || text.contains("error") || text.contains('\\')
}
