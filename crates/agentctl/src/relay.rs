//! The relay shell: drives the sans-IO [`Router`] with the agent's lines, HTTP calls and sends, subscriber changes
//! and time, and executes its [`Action`]s (subscriber queues, call waiters, the agent's stdin writer, `fs/*`).
//!
//! Nothing here waits while holding the lock: broadcasting is `try_send`, a write to the agent's stdin goes out at
//! once as far as the pipe takes it without blocking when nothing is queued ahead, else to the run's writer queue,
//! `fs/*` runs on a blocking thread. So the agent's reader is never blocked by a subscriber or an HTTP client.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use agentwire_process::StdinError;
use axum::extract::ws::Utf8Bytes;
use bytes::Bytes;
use serde::Serialize;
use serde_json::value::RawValue;
use tokio::sync::{Notify, Semaphore, mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::envelope;
use crate::error::{ApiError, ErrorKind};
use crate::fs::FsService;
use crate::hub::{Hub, HubLimits, SubscriberRx};
use crate::router::{
    Action, CallId, CallReply, FsRequest, Router, RouterError, RouterLimits, RouterStats,
    Unreachable,
};

/// How far answers agentctl owes the agent (fail-closed answers, auto-approvals, fs errors) may go past
/// `AGENTCTL_MAX_STDIN_QUEUE_BYTES`, so a small error still reaches an agent whose queue is full of large lines;
/// beyond it they are dropped and counted in [`RelayStats::stdin_dropped_lines`].
pub const ANSWER_RESERVE_BYTES: usize = 64 * 1024;

/// `fs/*` requests served at once (each may hold a file of up to `AGENTCTL_MAX_MESSAGE_BYTES` in memory); one more
/// is answered at once with JSON-RPC error -32603 `fs_busy`.
pub const MAX_FS_IN_FLIGHT: usize = 4;

/// Bytes of JSON-RPC envelope an `/acp/call` line may add to its HTTP body (`"jsonrpc":"2.0","id":N`): the
/// stdin-queue check of a call uses the body length plus this.
pub const CALL_ENVELOPE_BYTES: usize = 64;

/// Counters and gauges for `/api/v1/status`.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct RelayStats {
    /// `/acp/call` requests waiting for the agent.
    pub pending_calls: usize,
    /// Agent requests waiting for a subscriber's answer.
    pub pending_agent_requests: usize,
    /// `/acp/stream` subscribers.
    pub subscribers: usize,
    /// Subscribers dropped for falling behind.
    pub dropped_subscribers: u64,
    /// Bytes queued for the agent's stdin.
    pub stdin_queued_bytes: usize,
    /// Lines for the agent's stdin dropped because even the reserve was full (it is not reading).
    pub stdin_dropped_lines: u64,
    /// fs answers replaced by an error because they did not fit the stdin queue, or refused as `fs_busy`.
    pub fs_refused: u64,
    /// Why the current (or last) agent run can no longer answer calls: `null` while it can, else `exited`,
    /// `stdout_closed` (it closed its stdout but still runs) or `stdin_closed` (a write to its stdin failed).
    pub unreachable: Option<Unreachable>,
    /// The router's counters.
    #[serde(flatten)]
    pub router: RouterStats,
}

/// A write to the agent's stdin that the pipe did not finish at once, handed to the writer task.
type InFlight = std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), StdinError>> + Send>>;

/// What the stdin writer task gets, in order.
enum StdinItem {
    /// A line to write.
    Line(Bytes, Option<CallId>),
    /// A direct write (see [`Writer::push`]) to finish.
    InFlight(InFlight, Option<CallId>),
}

/// The stdin and the number of items the writer task has not finished, under one lock.
#[derive(Debug)]
struct Direct {
    stdin: agentwire_process::Stdin,
    /// Items queued for the writer task or being written by it; a line is written directly only at 0, so lines
    /// never overtake each other.
    items: usize,
}

/// The queue of lines to one agent run's stdin (FIFO: messages are never reordered toward the agent). Each line
/// may belong to an `/acp/call`, which fails at once when its line cannot be written.
#[derive(Clone)]
struct Writer {
    tx: mpsc::UnboundedSender<StdinItem>,
    queued: Arc<AtomicUsize>,
    direct: Arc<Mutex<Direct>>,
}

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer")
            .field("queued", &self.queued())
            .finish_non_exhaustive()
    }
}

impl Writer {
    fn lock(&self) -> MutexGuard<'_, Direct> {
        // `Direct` is a counter and a handle: a panic cannot leave it inconsistent.
        self.direct.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Writes `line` to the agent's stdin. When nothing is queued ahead, it is written right here, as far as the
    /// pipe takes it without waiting (an `/acp/call` then costs no hop through the writer task); the rest of that
    /// write, or the line itself when others are queued, goes to the writer task. Never waits.
    fn push(&self, line: Bytes, call: Option<CallId>) {
        let mut direct = self.lock();
        if direct.items == 0 {
            let stdin = direct.stdin.clone();
            let mut write: InFlight = Box::pin(async move { stdin.write_line(&line).await });
            let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
            match write.as_mut().poll(&mut cx) {
                std::task::Poll::Ready(Ok(())) => return,
                // A failure is handed to the writer task too: it reports it outside this lock and the relay's.
                std::task::Poll::Ready(Err(error)) => {
                    write = Box::pin(std::future::ready(Err(error)));
                }
                std::task::Poll::Pending => {}
            }
            direct.items += 1;
            if self.tx.send(StdinItem::InFlight(write, call)).is_err() {
                direct.items -= 1;
                tracing::debug!("dropping a line for the agent: its stdin writer has ended");
            }
            return;
        }
        let len = line.len();
        self.queued.fetch_add(len, Ordering::Relaxed);
        direct.items += 1;
        if self.tx.send(StdinItem::Line(line, call)).is_err() {
            direct.items -= 1;
            self.queued.fetch_sub(len, Ordering::Relaxed);
            tracing::debug!("dropping a line for the agent: its stdin writer has ended");
        }
    }

    fn queued(&self) -> usize {
        self.queued.load(Ordering::Relaxed)
    }

    /// Whether `len` more bytes fit under `limit` (a line of any size fits an empty queue).
    fn fits(&self, len: usize, limit: usize) -> bool {
        let queued = self.queued();
        queued == 0 || queued.saturating_add(len) <= limit
    }
}

#[derive(Debug)]
struct State {
    router: Router,
    waiters: HashMap<CallId, oneshot::Sender<CallReply>>,
    hub: Hub,
    writer: Option<Writer>,
    unreachable: Option<Unreachable>,
}

/// The relay between one agent's stdio and many HTTP/WebSocket clients.
#[derive(Debug)]
pub struct Relay {
    state: Mutex<State>,
    timer: Notify,
    fs: FsService,
    /// `AGENTCTL_MAX_STDIN_QUEUE_BYTES`: calls and sends that do not fit get 503; see [`ANSWER_RESERVE_BYTES`].
    max_stdin_queue_bytes: usize,
    fs_slots: Arc<Semaphore>,
    stdin_dropped_lines: AtomicU64,
    fs_refused: AtomicU64,
}

/// A started `/acp/call`; await [`PendingCall::wait`]. Dropping it abandons the call (its late response is dropped).
#[derive(Debug)]
pub struct PendingCall {
    relay: Arc<Relay>,
    call: CallId,
    method: String,
    rx: Option<oneshot::Receiver<CallReply>>,
}

impl PendingCall {
    /// Waits for the agent's response: the HTTP body `{"result":…}` / `{"error":…}`.
    ///
    /// # Errors
    /// 504 `timeout` after `timeout` (the late response will be dropped and counted), 502 `agent_exited`.
    pub async fn wait(mut self, timeout: Duration) -> Result<Bytes, ApiError> {
        let Some(rx) = self.rx.take() else {
            return Err(ApiError::new(
                ErrorKind::InternalError,
                "call already awaited",
            ));
        };
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(CallReply::Response(body))) => Ok(body),
            Ok(Ok(CallReply::Unreachable(why))) => Err(unreachable_error(why)
                .with_details(
                    serde_json::json!({"method": self.method, "id": self.call, "reason": why}),
                )),
            Ok(Err(_)) => Err(unreachable_error(Unreachable::Exited).with_details(
                serde_json::json!({"method": self.method, "id": self.call, "reason": Unreachable::Exited}),
            )),
            Err(_) => Err(
                ApiError::new(ErrorKind::Timeout, "the agent did not answer in time").with_details(
                    serde_json::json!({
                        "method": self.method,
                        "id": self.call,
                        "timeout_ms": u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
                    }),
                ),
            ),
        }
    }
}

impl Drop for PendingCall {
    fn drop(&mut self) {
        let mut state = self.relay.lock();
        state.waiters.remove(&self.call);
        state.router.abandon_call(self.call);
    }
}

impl Relay {
    /// A relay with no agent yet.
    pub fn new(
        router: RouterLimits,
        auto_approve: bool,
        hub: HubLimits,
        fs: FsService,
        max_stdin_queue_bytes: usize,
    ) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(State {
                router: Router::new(router, auto_approve),
                waiters: HashMap::new(),
                hub: Hub::new(hub),
                writer: None,
                unreachable: None,
            }),
            timer: Notify::new(),
            fs,
            max_stdin_queue_bytes,
            fs_slots: Arc::new(Semaphore::new(MAX_FS_IN_FLIGHT)),
            stdin_dropped_lines: AtomicU64::new(0),
            fs_refused: AtomicU64::new(0),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs the deadline timer of agent requests until `shutdown` is cancelled.
    pub async fn run_timer(self: Arc<Self>, shutdown: CancellationToken) {
        loop {
            let deadline = self.lock().router.poll_timeout();
            let sleep = async {
                match deadline {
                    Some(at) => tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = self.timer.notified() => {}
                () = sleep => {
                    let mut state = self.lock();
                    state.router.handle_timeout(Instant::now());
                    self.execute(&mut state);
                }
            }
        }
    }

    /// A new agent run: its stdin gets a writer task; the router forgets the previous run.
    pub fn agent_started(self: &Arc<Self>, stdin: agentwire_process::Stdin) {
        let (tx, mut rx) = mpsc::unbounded_channel::<StdinItem>();
        let queued = Arc::new(AtomicUsize::new(0));
        let direct = Arc::new(Mutex::new(Direct {
            stdin: stdin.clone(),
            items: 0,
        }));
        let writer = Writer {
            tx,
            queued: queued.clone(),
            direct,
        };
        let relay = Arc::downgrade(self);
        let task_writer = writer.direct.clone();
        tokio::spawn(async move {
            while let Some(item) = rx.recv().await {
                let (result, call) = match item {
                    StdinItem::Line(line, call) => {
                        queued.fetch_sub(line.len(), Ordering::Relaxed);
                        (stdin.write_line(&line).await, call)
                    }
                    StdinItem::InFlight(write, call) => (write.await, call),
                };
                {
                    let mut direct = task_writer.lock().unwrap_or_else(PoisonError::into_inner);
                    direct.items = direct.items.saturating_sub(1);
                }
                if let Err(error) = result {
                    tracing::warn!(code = error.code(), %error, "writing to the agent's stdin failed");
                    if let Some(relay) = relay.upgrade() {
                        relay.stdin_failed(call);
                    }
                }
            }
        });
        let mut state = self.lock();
        state.router.agent_started();
        state.writer = Some(writer);
        state.unreachable = None;
    }

    /// A write to the agent's stdin failed (after any error its stdin is closed): the call whose request it was
    /// fails at once, and later calls and sends get 502 until the next start.
    fn stdin_failed(self: &Arc<Self>, call: Option<CallId>) {
        let mut state = self.lock();
        if state.writer.is_none() {
            // Stopping or exited: the exit fails what is left.
            if let Some(call) = call {
                state.router.fail_call(call, Unreachable::StdinClosed);
                self.execute(&mut state);
            }
            return;
        }
        state.unreachable.get_or_insert(Unreachable::StdinClosed);
        if let Some(call) = call {
            state.router.fail_call(call, Unreachable::StdinClosed);
        }
        self.execute(&mut state);
    }

    /// The agent closed its stdout but still runs: no answer can arrive, so every pending call fails at once
    /// (502, `stdout_closed`) and later calls get 502 until the next start.
    pub fn agent_stdout_closed(self: &Arc<Self>) {
        let mut state = self.lock();
        state.unreachable.get_or_insert(Unreachable::StdoutClosed);
        state.router.fail_calls(Unreachable::StdoutClosed);
        self.execute(&mut state);
    }

    /// The agent is being stopped: new calls and sends get 409; queued lines still go out.
    pub fn agent_stopping(&self) {
        self.lock().writer = None;
    }

    /// The agent exited and its stdout is drained: pending calls fail (502); subscribers get `final_frame` and are
    /// closed with code 1000.
    pub fn agent_exited(self: &Arc<Self>, final_frame: &str) {
        let mut state = self.lock();
        state.writer = None;
        state.unreachable = Some(Unreachable::Exited);
        state.router.agent_exited();
        self.execute(&mut state);
        state.hub.broadcast(&Utf8Bytes::from(final_frame));
        state
            .hub
            .close_all(crate::hub::CLOSE_NORMAL, "agent exited");
        let count = state.hub.len();
        state.router.set_subscribers(count);
        self.execute(&mut state);
    }

    /// One JSON line from the agent's stdout.
    pub fn on_agent_message(self: &Arc<Self>, line: Bytes) {
        let mut state = self.lock();
        state.router.handle_agent_message(line, Instant::now());
        self.execute(&mut state);
        if state.router.pending_agent_requests() > 0 {
            self.timer.notify_one();
        }
    }

    /// Starts an `/acp/call`.
    ///
    /// # Errors
    /// 409 when the agent is not running; 503 at the pending-call limit or when the agent is not reading stdin.
    pub fn begin_call(
        self: &Arc<Self>,
        method: &str,
        params: Option<&RawValue>,
    ) -> Result<PendingCall, ApiError> {
        let mut state = self.lock();
        let line_len = method.len() + params.map_or(0, |p| p.get().len()) + CALL_ENVELOPE_BYTES;
        self.check_writable(&state, true, line_len)?;
        let call = state
            .router
            .begin_call(method, params)
            .map_err(router_error)?;
        let (tx, rx) = oneshot::channel();
        state.waiters.insert(call, tx);
        self.execute(&mut state);
        Ok(PendingCall {
            relay: self.clone(),
            call,
            method: method.to_owned(),
            rx: Some(rx),
        })
    }

    /// Handles an `/acp/send` body.
    ///
    /// # Errors
    /// 400 `bad_request` for malformed JSON, 400 `validation_error` for a non-message or a reserved id, 409 when the
    /// agent is not running or no agent request waits for that answer, 503 when the agent is not reading stdin.
    pub fn send(self: &Arc<Self>, body: &[u8]) -> Result<(), ApiError> {
        if let Err(error) = serde_json::from_slice::<serde::de::IgnoredAny>(body) {
            return Err(ApiError::new(
                ErrorKind::BadRequest,
                format!("malformed json: {error}"),
            ));
        }
        let mut state = self.lock();
        self.check_writable(&state, false, body.len() + CALL_ENVELOPE_BYTES)?;
        state
            .router
            .handle_client_message(body)
            .map_err(router_error)?;
        self.execute(&mut state);
        Ok(())
    }

    /// Adds an `/acp/stream` subscriber.
    ///
    /// # Errors
    /// 503 at the subscriber limit.
    pub fn subscribe(&self) -> Result<SubscriberRx, ApiError> {
        let mut state = self.lock();
        let rx = state.hub.subscribe().map_err(|e| {
            ApiError::new(ErrorKind::Unavailable, e.to_string())
                .with_details(serde_json::json!({"limit": e.limit}))
        })?;
        let count = state.hub.len();
        state.router.set_subscribers(count);
        Ok(rx)
    }

    /// Removes a subscriber; the last one leaving fails pending agent requests closed.
    pub fn unsubscribe(self: &Arc<Self>, id: u64) {
        let mut state = self.lock();
        if state.hub.unsubscribe(id) {
            let count = state.hub.len();
            state.router.set_subscribers(count);
            self.execute(&mut state);
        }
    }

    /// Closes every subscriber after its queue (shutdown).
    pub fn close_subscribers(self: &Arc<Self>, code: u16, reason: &str) {
        let mut state = self.lock();
        state.hub.close_all(code, reason);
        state.router.set_subscribers(0);
        self.execute(&mut state);
    }

    /// Current counters.
    pub fn stats(&self) -> RelayStats {
        let state = self.lock();
        RelayStats {
            pending_calls: state.router.pending_calls(),
            pending_agent_requests: state.router.pending_agent_requests(),
            subscribers: state.hub.len(),
            dropped_subscribers: state.hub.dropped_slow(),
            stdin_queued_bytes: state.writer.as_ref().map_or(0, Writer::queued),
            stdin_dropped_lines: self.stdin_dropped_lines.load(Ordering::Relaxed),
            fs_refused: self.fs_refused.load(Ordering::Relaxed),
            unreachable: state.unreachable,
            router: state.router.stats(),
        }
    }

    fn check_writable(&self, state: &State, call: bool, line_len: usize) -> Result<(), ApiError> {
        let Some(writer) = &state.writer else {
            return Err(ApiError::new(ErrorKind::Conflict, "agent is not running"));
        };
        match state.unreachable {
            Some(why @ Unreachable::StdinClosed) => {
                return Err(unreachable_error(why).with_details(serde_json::json!({"reason": why})));
            }
            Some(why @ Unreachable::StdoutClosed) if call => {
                return Err(unreachable_error(why).with_details(serde_json::json!({"reason": why})));
            }
            _ => {}
        }
        let queued = writer.queued();
        if !writer.fits(line_len, self.max_stdin_queue_bytes) {
            return Err(ApiError::new(
                ErrorKind::Unavailable,
                "the agent is not reading its stdin",
            )
            .with_details(
                serde_json::json!({"queued_bytes": queued, "line_bytes": line_len, "limit": self.max_stdin_queue_bytes}),
            ));
        }
        Ok(())
    }

    /// Executes the router's actions. Called with the lock held; nothing here waits.
    fn execute(self: &Arc<Self>, state: &mut State) {
        while let Some(action) = state.router.poll_action() {
            match action {
                Action::Broadcast(bytes) => {
                    if state.hub.is_empty() {
                        continue;
                    }
                    match Utf8Bytes::try_from(bytes) {
                        Ok(text) => {
                            if state.hub.broadcast(&text) > 0 {
                                let count = state.hub.len();
                                state.router.set_subscribers(count);
                            }
                        }
                        Err(error) => {
                            tracing::warn!(%error, "not relaying a message that is not utf-8")
                        }
                    }
                }
                Action::CompleteCall { call, reply } => {
                    if let Some(waiter) = state.waiters.remove(&call) {
                        // The HTTP client may be gone; then nobody needs the reply.
                        let _ = waiter.send(reply);
                    }
                }
                Action::WriteToAgent(line) => match &state.writer {
                    Some(writer) => {
                        self.push_bounded(writer, line);
                    }
                    None => tracing::debug!("agent not running: dropping a line for it"),
                },
                Action::WriteCall { call, line } => match &state.writer {
                    Some(writer) => writer.push(line, Some(call)),
                    None => tracing::debug!("agent not running: dropping a call for it"),
                },
                Action::ServeFs(request) => match &state.writer {
                    Some(writer) => {
                        let writer = writer.clone();
                        self.serve_fs(request, writer);
                    }
                    None => tracing::debug!("agent not running: not serving an fs request"),
                },
            }
        }
    }

    /// Queues a line within the stdin limit plus [`ANSWER_RESERVE_BYTES`]; drops and counts it otherwise.
    fn push_bounded(&self, writer: &Writer, line: Bytes) {
        if writer.fits(
            line.len(),
            self.max_stdin_queue_bytes
                .saturating_add(ANSWER_RESERVE_BYTES),
        ) {
            writer.push(line, None);
            return;
        }
        self.stdin_dropped_lines.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(
            bytes = line.len(),
            queued = writer.queued(),
            "the agent is not reading its stdin: dropping a line for it"
        );
    }

    /// Serves an `fs/*` request on a blocking thread (at most [`MAX_FS_IN_FLIGHT`] at once) and queues the answer;
    /// an answer that does not fit the stdin queue is replaced by a small error.
    fn serve_fs(self: &Arc<Self>, request: FsRequest, writer: Writer) {
        let Ok(permit) = self.fs_slots.clone().try_acquire_owned() else {
            self.fs_refused.fetch_add(1, Ordering::Relaxed);
            let data = serde_json::json!({"code": "fs_busy", "limit": MAX_FS_IN_FLIGHT});
            let line = envelope::error_line(
                &request.id,
                crate::fs::INTERNAL_ERROR,
                "too many fs requests in progress",
                Some(&data),
            );
            self.push_bounded(&writer, Bytes::from(line));
            return;
        };
        let fs = self.fs.clone();
        let relay = self.clone();
        tokio::spawn(async move {
            let id = request.id.clone();
            let method = request.method;
            let outcome =
                tokio::task::spawn_blocking(move || fs.serve(request.method, &request.params))
                    .await;
            drop(permit);
            let line = match outcome {
                Ok(Ok(result)) => envelope::result_line(&id, &result),
                Ok(Err(error)) => {
                    tracing::info!(method = method.as_str(), code = error.code(), %error, "fs request refused");
                    let data = serde_json::json!({"code": error.code()});
                    envelope::error_line(&id, error.rpc_code(), &error.to_string(), Some(&data))
                }
                Err(join) => envelope::error_line(
                    &id,
                    crate::fs::INTERNAL_ERROR,
                    &format!("fs task failed: {join}"),
                    None,
                ),
            };
            if writer.fits(line.len(), relay.max_stdin_queue_bytes) {
                writer.push(Bytes::from(line), None);
                return;
            }
            relay.fs_refused.fetch_add(1, Ordering::Relaxed);
            let data = serde_json::json!({
                "code": "stdin_queue_full",
                "answer_bytes": line.len(),
                "limit": relay.max_stdin_queue_bytes,
            });
            let error = envelope::error_line(
                &id,
                crate::fs::INTERNAL_ERROR,
                "the answer does not fit agentctl's queue to the agent's stdin (the agent is not reading it)",
                Some(&data),
            );
            relay.push_bounded(&writer, Bytes::from(error));
        });
    }
}

/// The 502 for a call the agent can no longer answer.
fn unreachable_error(why: Unreachable) -> ApiError {
    match why {
        Unreachable::Exited => {
            ApiError::new(ErrorKind::AgentExited, "the agent exited before answering")
        }
        Unreachable::StdoutClosed => ApiError::new(
            ErrorKind::AgentUnreachable,
            "the agent closed its stdout: it can no longer answer",
        ),
        Unreachable::StdinClosed => ApiError::new(
            ErrorKind::AgentUnreachable,
            "the agent's stdin is closed: the request could not be written",
        ),
    }
}

fn router_error(error: RouterError) -> ApiError {
    let kind = match error {
        RouterError::TooManyPendingCalls { .. } => ErrorKind::Unavailable,
        RouterError::NoPendingRequest { .. } => ErrorKind::Conflict,
        _ => ErrorKind::ValidationError,
    };
    ApiError::new(kind, error.to_string()).with_details(serde_json::json!({"code": error.code()}))
}
