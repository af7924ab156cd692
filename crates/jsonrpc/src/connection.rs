//! The bidirectional connection: outgoing calls and notifications, the pending-call table, and the reader and
//! writer tasks that drive one byte stream.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use agentwire_jsonl::{Frame, JsonlDecoder, Limits};
use bytes::BytesMut;
use futures_util::Stream;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufWriter};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::{CancellationToken, DropGuard};

use crate::error::{CallError, CloseReason, SendError};
use crate::incoming::{Incoming, IncomingMessage, IncomingRequest, Responder};
use crate::message::{
    ErrorObject, InvalidMessage, Message, Notification, NotificationRef, Request, RequestId,
    RequestRef, Response, ResponseRef,
};

/// Default for [`Config::max_line_bytes`]: 64 MiB.
///
/// Larger than agentwire-jsonl's 4 MiB default on purpose: JSON-RPC peers (ACP agents) send whole files and tool
/// outputs in one message (ACP `tool_call_update` content and the history replayed by `session/load`, see
/// <https://agentclientprotocol.com/protocol/tool-calls> and <https://agentclientprotocol.com/protocol/session-setup>),
/// and lines of tens of megabytes occur. 64 MiB leaves a wide margin for those while still bounding what one peer
/// can make us buffer (`docs/architecture.md` in this repository describes the layers).
pub const DEFAULT_MAX_LINE_BYTES: usize = 64 * 1024 * 1024;

/// The method of the cancellation notification, in both directions: `{"requestId": <id>}`.
pub const CANCEL_REQUEST_METHOD: &str = "$/cancel_request";

/// Bytes reserved in the read buffer before each read.
const READ_CHUNK_BYTES: usize = 64 * 1024;
/// Capacity of the writer's buffer: small lines are coalesced into one write, large lines bypass it.
const WRITE_BUFFER_BYTES: usize = 64 * 1024;
/// Buffer of each direction of [`Connection::memory`].
const MEMORY_PIPE_BYTES: usize = 64 * 1024;

/// The limits and defaults of a [`Connection`]. Every queue and table is bounded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Largest incoming line in bytes (without its `\n`). Default [`DEFAULT_MAX_LINE_BYTES`] (64 MiB).
    /// On overflow the line is discarded as it streams in (never buffered), counted in
    /// [`Stats::too_long_lines`], logged, and the connection continues with the next line. Nothing is answered
    /// (the id is unknown): a call whose response is too long ends only by its timeout or by the connection closing.
    pub max_line_bytes: usize,
    /// Most outgoing calls waiting for an answer at once. Default 1024 (0 refuses every call).
    /// Past it, [`Connection::call`] fails at once with [`CallError::TooManyPendingCalls`] and sends nothing.
    pub max_pending_calls: usize,
    /// Most incoming requests accepted but not yet answered (queued or being handled). Default 256 (0 answers
    /// every request busy).
    /// Past it, a new request is answered at once with -32603 (`"server busy"`, `data: {"maxInFlight": n}`) and
    /// never reaches [`Incoming`]; counted in [`Stats::busy_rejections`]. -32603 is used rather than a
    /// server-defined code because every JSON-RPC peer understands it.
    pub max_incoming_in_flight: usize,
    /// Capacity, in messages, of the queue between the reader task and [`Incoming::next`]. Default 64 (0 acts as 1).
    /// When it is full the reader stops reading: back-pressure to the peer through the OS pipe, never unbounded
    /// buffering. Responses to our calls are read by the same reader, so drain [`Incoming`] while waiting on calls.
    pub incoming_queue: usize,
    /// Capacity, in messages, of the queue to the writer task. Default 64 (0 acts as 1).
    /// When it is full, `call`, `notify` and `respond` wait for room (back-pressure from a slow peer): a call
    /// until its timeout, any send until [`Connection::close`] or [`Connection::abort`] fails it;
    /// [`Connection::cancel`] and the -32603 answer of a dropped request never wait.
    pub outgoing_queue: usize,
    /// Timeout of [`Connection::call`]. Default `None` (no timeout): an ACP `session/prompt` lasts a whole agent
    /// turn and a permission request waits for a human. Use [`Connection::call_with_timeout`] per call.
    /// The timeout covers queueing the request (waiting for room in a full outgoing queue) and waiting for the
    /// answer.
    pub default_call_timeout: Option<Duration>,
    /// How long the writer keeps writing once the output is closing ([`Connection::close`], or every handle
    /// dropped): what was queued before is written, then the stream is shut down. Default 5 s. When the peer does
    /// not read and the deadline passes, the rest is discarded, the stream is dropped (the socket or pipe is
    /// released) and a warning is logged; [`Connection::close`] returns then. [`Connection::abort`] does not wait
    /// at all.
    pub close_flush_timeout: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            max_line_bytes: DEFAULT_MAX_LINE_BYTES,
            max_pending_calls: 1024,
            max_incoming_in_flight: 256,
            incoming_queue: 64,
            outgoing_queue: 64,
            default_call_timeout: None,
            close_flush_timeout: Duration::from_secs(5),
        }
    }
}

/// Counters of what the connection dropped, rejected or noticed. A snapshot from [`Connection::stats`].
#[non_exhaustive]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Responses whose id we never issued (a string id, or a number we have not reached), dropped.
    pub unknown_responses: u64,
    /// Responses to calls no longer pending (timed out, cancelled, dropped, or answered twice), dropped.
    pub late_responses: u64,
    /// Error responses with `"id": null` (the peer could not read one of our messages), logged and dropped.
    pub null_id_errors: u64,
    /// Lines that are not JSON, answered with -32700 and `"id": null`.
    pub invalid_lines: u64,
    /// JSON lines that are not valid JSON-RPC 2.0 messages (batches excluded), answered with -32600 unless
    /// response-like. Includes valid JSON that cannot be read (a lone surrogate escape, nesting deeper than 128)
    /// and `$/cancel_request` sent as a request (with an id).
    pub invalid_messages: u64,
    /// Batches (JSON arrays), answered with one -32600 and `"id": null`.
    pub batches_rejected: u64,
    /// Lines over [`Config::max_line_bytes`], discarded.
    pub too_long_lines: u64,
    /// Incoming requests answered -32603 because [`Config::max_incoming_in_flight`] were in flight.
    pub busy_rejections: u64,
    /// Incoming requests answered -32600 because a request with the same id was still in flight.
    pub duplicate_request_ids: u64,
    /// Incoming requests whose responder was dropped unanswered (answered -32603).
    pub dropped_responders: u64,
    /// Outgoing calls that timed out.
    pub timeouts: u64,
    /// Outgoing calls cancelled with [`Connection::cancel`].
    pub cancelled_calls: u64,
    /// `$/cancel_request` notifications received that matched a request in flight.
    pub cancel_requests_received: u64,
    /// `$/cancel_request` notifications received for no request in flight (already answered, or unknown).
    pub cancel_requests_unmatched: u64,
}

#[derive(Default)]
struct Counters {
    unknown_responses: AtomicU64,
    late_responses: AtomicU64,
    null_id_errors: AtomicU64,
    invalid_lines: AtomicU64,
    invalid_messages: AtomicU64,
    batches_rejected: AtomicU64,
    too_long_lines: AtomicU64,
    busy_rejections: AtomicU64,
    duplicate_request_ids: AtomicU64,
    dropped_responders: AtomicU64,
    timeouts: AtomicU64,
    cancelled_calls: AtomicU64,
    cancel_requests_received: AtomicU64,
    cancel_requests_unmatched: AtomicU64,
}

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

type CallResult = Result<Value, CallError>;

/// The mutable state shared by the handles and the tasks. Never locked across an `.await`.
struct State {
    /// The id of our next request. Our ids are 0, 1, 2, … (numbers only).
    next_id: i64,
    /// Our calls waiting for an answer, by id.
    pending: HashMap<i64, oneshot::Sender<CallResult>>,
    /// The peer's requests accepted and not yet answered, with their cancellation flags.
    in_flight: HashMap<RequestId, CancellationToken>,
    /// Set once, when the connection closes.
    close_reason: Option<CloseReason>,
    /// The first line that was not JSON (its first 256 bytes, lossy UTF-8): [`Connection::first_invalid_line`].
    first_invalid_line: Option<String>,
}

pub(crate) struct Shared {
    config: Config,
    state: Mutex<State>,
    counters: Counters,
    /// Cancelled when the connection closes.
    closed: CancellationToken,
    /// Cancelled when the writer task has ended (for any reason); the writer then also aborts the reader.
    writer_done: CancellationToken,
    /// Cancelled when the output starts closing ([`Connection::close`], [`Connection::abort`], every handle
    /// dropped): sends fail from then on, and the writer's flush deadline starts.
    closing: CancellationToken,
    /// Cancelled by [`Connection::abort`]: the writer drops the stream without writing anything more.
    aborted: CancellationToken,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave `State` inconsistent (every update is one map operation).
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Marks the connection closed (the first reason wins) and fails every pending call.
    fn close(&self, reason: CloseReason) {
        let pending = {
            let mut state = self.lock();
            if state.close_reason.is_none() {
                tracing::debug!(reason = reason.code(), "json-rpc connection closed");
                state.close_reason = Some(reason);
            }
            std::mem::take(&mut state.pending)
        };
        for (_, waiter) in pending {
            // The caller may have stopped waiting; nothing to tell then.
            let _ = waiter.send(Err(CallError::ConnectionClosed));
        }
        self.closed.cancel();
    }

    /// Forgets an incoming request (answered or dropped).
    pub(crate) fn finish_incoming(&self, id: &RequestId) {
        self.lock().in_flight.remove(id);
    }

    pub(crate) fn count_dropped_responder(&self) {
        bump(&self.counters.dropped_responders);
    }
}

/// One end of a JSON-RPC 2.0 connection over a byte stream: one JSON message per line (agentwire-jsonl framing).
///
/// Cheap to clone; all clones share the connection. Incoming requests and notifications arrive on the [`Incoming`]
/// returned next to it. Two tasks run on the tokio runtime: a reader (frames lines, parses each once, routes
/// responses to their calls, queues requests and notifications for [`Incoming`], answers invalid input) and a writer.
/// Lines go out one per message, in the order sent: a request or response with nothing queued ahead of it is written
/// to the stream by its sender, without waiting (what the stream does not take at once is finished by the writer
/// task), which saves a task switch per message; otherwise, and for every notification (bursts of them are
/// coalesced), the line is queued for the writer task, which writes everything queued before one flush.
///
/// Outgoing and incoming ids are separate spaces: our requests are numbered 0, 1, 2, … and a response is matched
/// only against our pending calls, never against the peer's requests.
///
/// The output is closed (flushed, then shut down, so the peer sees EOF) by [`Connection::close`], or once every
/// `Connection` clone, the [`Incoming`] and every unanswered [`IncomingRequest`] are dropped; either way the writer
/// task drops the stream at the latest [`Config::close_flush_timeout`] later, even if the peer never reads.
/// [`Connection::abort`] drops it without flushing.
#[derive(Clone)]
pub struct Connection {
    shared: Arc<Shared>,
    out: Out,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("closed", &self.shared.closed.is_cancelled())
            .finish_non_exhaustive()
    }
}

impl Connection {
    /// A connection over `reader` (the peer's output) and `writer` (the peer's input): a child's stdout and stdin,
    /// the halves of a Unix socket (`into_split`), or of any stream (`tokio::io::split`).
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime (it spawns the reader and writer tasks with `tokio::spawn`).
    pub fn new<R, W>(reader: R, writer: W, config: Config) -> (Connection, Incoming)
    where
        R: AsyncRead + Send + Unpin + 'static,
        W: AsyncWrite + Send + Unpin + 'static,
    {
        Connection::new_boxed(Box::new(reader), Box::new(writer), config)
    }

    /// A connected pair in memory (a `tokio::io::duplex` of 64 KiB each way), for tests and in-process peers.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime.
    pub fn memory(config: Config) -> ((Connection, Incoming), (Connection, Incoming)) {
        let (a, b) = tokio::io::duplex(MEMORY_PIPE_BYTES);
        let (a_read, a_write) = tokio::io::split(a);
        let (b_read, b_write) = tokio::io::split(b);
        (
            Connection::new(a_read, a_write, config.clone()),
            Connection::new(b_read, b_write, config),
        )
    }

    /// A connection over the process's own stdin (the peer's output) and stdout (the peer's input): for an agent
    /// or a fixture launched by a host. Stdout must carry nothing but protocol lines: log to stderr.
    ///
    /// When both are pipes (the usual case for a child of a host), they are driven by the runtime's reactor
    /// (`tokio::net::unix::pipe`); this puts them in non-blocking mode, so do not use `std::io::stdin`/`stdout`
    /// (or `println!`) afterwards. Otherwise (a terminal, a file, a socket) `tokio::io::stdin`/`stdout` are used,
    /// which go through blocking threads.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime.
    pub fn stdio(config: Config) -> (Connection, Incoming) {
        #[cfg(unix)]
        {
            use std::os::fd::AsFd;
            let stdin = std::io::stdin().as_fd().try_clone_to_owned();
            let stdout = std::io::stdout().as_fd().try_clone_to_owned();
            if let (Ok(stdin), Ok(stdout)) = (stdin, stdout) {
                let reader = tokio::net::unix::pipe::Receiver::from_owned_fd(stdin);
                let writer = tokio::net::unix::pipe::Sender::from_owned_fd(stdout);
                if let (Ok(reader), Ok(writer)) = (reader, writer) {
                    return Connection::new(reader, writer, config);
                }
            }
        }
        Connection::new(tokio::io::stdin(), tokio::io::stdout(), config)
    }

    /// A connection over frames someone else decoded and a function that writes lines: for a child started by
    /// `agentwire-process`, whose stdout is a stream of `agentwire_jsonl::Frame`s and whose stdin a line writer.
    ///
    /// `write` gets one or more complete lines (each ending in `\n`) per call, in order, one call at a time; an
    /// error closes the connection ([`CloseReason::WriteFailed`]). The end of `frames` is the peer's EOF.
    /// [`Config::max_line_bytes`] does not apply here: the frames' decoder has its own limit (set it to
    /// [`DEFAULT_MAX_LINE_BYTES`] or more for ACP). Closing the connection does not close the child's stdin.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// use agentwire_jsonrpc::{Config, Connection, DEFAULT_MAX_LINE_BYTES};
    /// use agentwire_process::{Command, StdoutItem};
    /// use futures_util::StreamExt;
    ///
    /// let limits = agentwire_jsonl::Limits { max_line_bytes: DEFAULT_MAX_LINE_BYTES, ..Default::default() };
    /// let mut child = Command::new("my-acp-agent").inherit_os_env().stdout_jsonl(limits).spawn()?;
    /// let stdin = child.stdin();
    /// let frames = child.take_stdout().ok_or("stdout taken")?.filter_map(|item| async move {
    ///     match item {
    ///         StdoutItem::Frame(frame) => Some(frame),
    ///         _ => None,
    ///     }
    /// });
    /// let write = move |lines: Vec<u8>| {
    ///     let stdin = stdin.clone();
    ///     async move { stdin.write_all(&lines).await.map_err(std::io::Error::other) }
    /// };
    /// let (connection, incoming) = Connection::from_frames(Box::pin(frames), write, Config::default());
    /// # Ok(()) }
    /// ```
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime.
    pub fn from_frames<F, W, Fut>(frames: F, mut write: W, config: Config) -> (Connection, Incoming)
    where
        F: Stream<Item = Frame> + Send + 'static,
        W: FnMut(Vec<u8>) -> Fut + Send + 'static,
        Fut: Future<Output = std::io::Result<()>> + Send + 'static,
    {
        let write: WriteFn = Box::new(move |lines| Box::pin(write(lines)));
        Connection::start(
            FrameSource::Frames(Box::pin(frames)),
            LineSink::Write {
                write,
                chunk: Vec::new(),
            },
            config,
        )
    }

    fn new_boxed(
        reader: Box<dyn AsyncRead + Send + Unpin>,
        writer: Box<dyn AsyncWrite + Send + Unpin>,
        config: Config,
    ) -> (Connection, Incoming) {
        let source = FrameSource::bytes(reader, config.max_line_bytes);
        let sink = LineSink::Io(BufWriter::with_capacity(WRITE_BUFFER_BYTES, writer));
        Connection::start(source, sink, config)
    }

    fn start(source: FrameSource, sink: LineSink, config: Config) -> (Connection, Incoming) {
        let (out_tx, out_rx) = mpsc::channel(config.outgoing_queue.max(1));
        let (incoming_tx, incoming_rx) = mpsc::channel(config.incoming_queue.max(1));
        let shared = Arc::new(Shared {
            config,
            state: Mutex::new(State {
                next_id: 0,
                pending: HashMap::new(),
                in_flight: HashMap::new(),
                close_reason: None,
                first_invalid_line: None,
            }),
            counters: Counters::default(),
            closed: CancellationToken::new(),
            writer_done: CancellationToken::new(),
            closing: CancellationToken::new(),
            aborted: CancellationToken::new(),
        });
        let direct = Arc::new(Direct::new(sink));
        let out = Out {
            tx: out_tx,
            direct: direct.clone(),
            closing: shared.closing.clone(),
            guard: Arc::new(shared.closing.clone().drop_guard()),
        };
        let reader_task = Reader {
            shared: shared.clone(),
            out: out.tx.downgrade(),
            direct: direct.clone(),
            guard: Arc::downgrade(&out.guard),
            incoming: incoming_tx,
        };
        let reader = tokio::spawn(reader_task.run(source)).abort_handle();
        tokio::spawn(write_loop(direct, out_rx, shared.clone(), reader));
        let incoming = Incoming::new(incoming_rx, out.clone());
        (Connection { shared, out }, incoming)
    }

    /// Calls `method` and waits for the answer, for at most [`Config::default_call_timeout`] (default: no limit).
    /// The timeout covers both waiting for room in a full outgoing queue (a peer that stopped reading) and waiting
    /// for the answer.
    ///
    /// JSON sent: `{"jsonrpc":"2.0","id":7,"method":"session/new","params":{…}}`.
    ///
    /// Without a timeout a call waits until it is answered, [`cancel`](Self::cancel)led, or the connection closes.
    /// A peer that drops our request line (for example because it is longer than the peer's own line limit) never
    /// answers it: bound such calls with [`call_with_timeout`](Self::call_with_timeout).
    ///
    /// # Errors
    ///
    /// [`CallError::Rpc`] when the peer answers with an error; otherwise see [`CallError`].
    pub async fn call(&self, method: &str, params: Option<Value>) -> Result<Value, CallError> {
        match self.shared.config.default_call_timeout {
            Some(timeout) => self.call_with_timeout(method, params, timeout).await,
            None => self.start_call(method, params).await?.await,
        }
    }

    /// Like [`call`](Self::call) with a timeout for this call only.
    ///
    /// # Errors
    ///
    /// [`CallError::Timeout`] when no answer arrived within `timeout` (the call is then forgotten and a late answer
    /// is counted in [`Stats::late_responses`]); otherwise as [`call`](Self::call).
    pub async fn call_with_timeout(
        &self,
        method: &str,
        params: Option<Value>,
        timeout: Duration,
    ) -> Result<Value, CallError> {
        let Some(deadline) = tokio::time::Instant::now().checked_add(timeout) else {
            // A timeout past the end of time is no timeout.
            return self.start_call(method, params).await?.await;
        };
        // The deadline covers queueing too: a peer that stops reading fills the outgoing queue.
        let started = tokio::time::timeout_at(deadline, self.start_call(method, params)).await;
        let Ok(started) = started else {
            // The request was never queued (sending into the queue is cancel-safe) and its pending entry was
            // removed when the dropped `start_call` future dropped its `PendingCall`.
            bump(&self.shared.counters.timeouts);
            return Err(CallError::Timeout);
        };
        started?.wait_until(deadline).await
    }

    /// Sends a request and returns its [`PendingCall`] (a future of the answer) without waiting for the answer,
    /// so that the caller can learn its id (to [`cancel`](Self::cancel) it) or race it against something else.
    /// Waits while the outgoing queue is full; dropping this future then sends nothing and leaves nothing pending.
    ///
    /// # Errors
    ///
    /// [`CallError::TooManyPendingCalls`], [`CallError::ConnectionClosed`] or [`CallError::Encode`]; nothing is
    /// pending then.
    pub async fn start_call(
        &self,
        method: &str,
        params: Option<Value>,
    ) -> Result<PendingCall, CallError> {
        let (tx, rx) = oneshot::channel();
        let id = {
            let mut state = self.shared.lock();
            if state.close_reason.is_some() {
                return Err(CallError::ConnectionClosed);
            }
            if state.pending.len() >= self.shared.config.max_pending_calls {
                return Err(CallError::TooManyPendingCalls);
            }
            let id = state.next_id;
            state.next_id = state.next_id.wrapping_add(1);
            state.pending.insert(id, tx);
            id
        };
        // From here on, dropping `call` (also when this future is dropped) removes the pending entry.
        let call = PendingCall {
            shared: self.shared.clone(),
            id,
            rx: Some(rx),
        };
        let request_id = RequestId::Number(id);
        let line = agentwire_jsonl::to_line(&RequestRef {
            id: &request_id,
            method,
            params: params.as_ref(),
        })
        .map_err(CallError::Encode)?;
        self.out.send(line).await?;
        Ok(call)
    }

    /// Sends a notification.
    ///
    /// JSON sent: `{"jsonrpc":"2.0","method":"session/update","params":{…}}`.
    ///
    /// # Errors
    ///
    /// [`SendError::ConnectionClosed`] when the writer has stopped; [`SendError::Encode`] (never for `Value`s).
    pub async fn notify(&self, method: &str, params: Option<Value>) -> Result<(), SendError> {
        let line = agentwire_jsonl::to_line(&NotificationRef {
            method,
            params: params.as_ref(),
        })?;
        self.out.queue(line).await
    }

    /// Sends any message as is (a relay forwarding a peer's request or response, or a test sending raw input).
    /// A [`Message::Request`] sent this way is not tracked: its answer is counted as an unknown response.
    ///
    /// # Errors
    ///
    /// As [`notify`](Self::notify).
    pub async fn send_message(&self, message: &Message) -> Result<(), SendError> {
        let line = message.to_line()?;
        match message {
            Message::Notification(_) => self.out.queue(line).await,
            _ => self.out.send(line).await,
        }
    }

    /// Cancels our pending call `id`: the call resolves at once with [`CallError::Cancelled`] and
    /// `$/cancel_request {"requestId": id}` is queued; the peer's eventual answer is dropped and counted in
    /// [`Stats::late_responses`]. Returns `false` (and sends nothing) when `id` is not pending.
    ///
    /// Never waits for the peer: when the outgoing queue is full (a peer that stopped reading), the notification
    /// is queued from a background task once there is room, and is dropped if the output starts closing first
    /// (the peer then never learns of the cancellation; the call is cancelled all the same).
    ///
    /// # Errors
    ///
    /// [`SendError`] when `$/cancel_request` could not be queued: the output is closed or closing, or encoding
    /// failed (the call is cancelled all the same).
    pub async fn cancel(&self, id: &RequestId) -> Result<bool, SendError> {
        let RequestId::Number(number) = id else {
            return Ok(false);
        };
        let waiter = self.shared.lock().pending.remove(number);
        let Some(waiter) = waiter else {
            return Ok(false);
        };
        bump(&self.shared.counters.cancelled_calls);
        // The caller may have stopped waiting; the cancellation stands either way.
        let _ = waiter.send(Err(CallError::Cancelled));
        let params = serde_json::json!({ "requestId": id });
        let line = agentwire_jsonl::to_line(&NotificationRef {
            method: crate::CANCEL_REQUEST_METHOD,
            params: Some(&params),
        })?;
        self.out.send_in_background(line, "$/cancel_request")?;
        Ok(true)
    }

    /// Closes the connection, flushing what was queued: bounded by [`Config::close_flush_timeout`].
    ///
    /// At once (before the first `.await`, so also when this future is dropped right away): the connection is
    /// closed ([`is_closed`](Self::is_closed) is `true`, [`close_reason`](Self::close_reason) is
    /// [`CloseReason::Closed`]), every pending call fails with [`CallError::ConnectionClosed`], and every send
    /// (`call`, `notify`, `respond`, also one already waiting for room in the queue) fails with
    /// [`CallError::ConnectionClosed`] / [`SendError::ConnectionClosed`].
    /// Then the writer task writes the lines queued before, shuts the output down (the peer sees EOF), drops the
    /// stream and stops the reader; this future resolves when it has. If the peer does not read, the writer gives
    /// up after [`Config::close_flush_timeout`] (default 5 s), discards the rest and drops the stream; dropping
    /// this future does not stop that. Use [`abort`](Self::abort) to drop the stream without flushing.
    pub async fn close(&self) {
        self.begin_close();
        self.shared.writer_done.cancelled().await;
    }

    /// Closes the connection without flushing: as [`close`](Self::close) (pending calls and sends fail at once),
    /// but queued lines are discarded and the writer task drops the stream (the socket or pipe is released) and
    /// stops the reader as soon as it runs, even while a write is blocked on a peer that does not read.
    /// Does not wait; `close().await` afterwards waits until the stream is dropped.
    pub fn abort(&self) {
        self.shared.aborted.cancel();
        self.begin_close();
    }

    fn begin_close(&self) {
        self.shared.closing.cancel();
        self.shared.close(CloseReason::Closed);
    }

    /// Resolves once the connection is closed: peer EOF, read or write failure, [`close`](Self::close) or
    /// [`abort`](Self::abort) (at once, before the output is flushed).
    /// After that, calls fail with [`CallError::ConnectionClosed`]. Responses and notifications can still be
    /// written after a peer EOF (a half-closed stream) until the writer stops.
    pub async fn closed(&self) {
        self.shared.closed.cancelled().await;
    }

    /// Whether the connection is closed (see [`closed`](Self::closed)).
    pub fn is_closed(&self) -> bool {
        self.shared.closed.is_cancelled()
    }

    /// Why the connection closed, `None` while open.
    pub fn close_reason(&self) -> Option<CloseReason> {
        self.shared.lock().close_reason.clone()
    }

    /// The first line the peer sent that was not JSON (counted in [`Stats::invalid_lines`]): its first 256 bytes,
    /// lossy UTF-8; `None` when every line was JSON. A peer's banner or error message printed on stdout, for
    /// diagnostics.
    pub fn first_invalid_line(&self) -> Option<String> {
        self.shared.lock().first_invalid_line.clone()
    }

    /// Number of our calls waiting for an answer.
    pub fn pending_calls(&self) -> usize {
        self.shared.lock().pending.len()
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> Stats {
        let c = &self.shared.counters;
        let get = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        Stats {
            unknown_responses: get(&c.unknown_responses),
            late_responses: get(&c.late_responses),
            null_id_errors: get(&c.null_id_errors),
            invalid_lines: get(&c.invalid_lines),
            invalid_messages: get(&c.invalid_messages),
            batches_rejected: get(&c.batches_rejected),
            too_long_lines: get(&c.too_long_lines),
            busy_rejections: get(&c.busy_rejections),
            duplicate_request_ids: get(&c.duplicate_request_ids),
            dropped_responders: get(&c.dropped_responders),
            timeouts: get(&c.timeouts),
            cancelled_calls: get(&c.cancelled_calls),
            cancel_requests_received: get(&c.cancel_requests_received),
            cancel_requests_unmatched: get(&c.cancel_requests_unmatched),
        }
    }
}

/// An outgoing call waiting for its answer; a future of `Result<Value, CallError>`.
///
/// Await it (or `&mut` it inside `tokio::select!`, then [`Connection::cancel`] its [`id`](Self::id) and await it
/// again for [`CallError::Cancelled`]). Dropping it abandons the call without telling the peer: the answer, when it
/// comes, is dropped and counted in [`Stats::late_responses`]. Once it has yielded its output it stays pending
/// forever (it is fused, never panics).
#[must_use = "a call does nothing useful unless its answer is awaited"]
#[derive(Debug)]
pub struct PendingCall {
    shared: Arc<Shared>,
    id: i64,
    rx: Option<oneshot::Receiver<CallResult>>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared").finish_non_exhaustive()
    }
}

impl PendingCall {
    /// The id our request carries.
    pub fn id(&self) -> RequestId {
        RequestId::Number(self.id)
    }

    /// Waits for the answer for at most `timeout`.
    ///
    /// # Errors
    ///
    /// [`CallError::Timeout`] when no answer arrived in time (the call is then forgotten); otherwise as the future.
    pub async fn wait_timeout(&mut self, timeout: Duration) -> Result<Value, CallError> {
        match tokio::time::Instant::now().checked_add(timeout) {
            Some(deadline) => self.wait_until(deadline).await,
            None => (&mut *self).await,
        }
    }

    /// As [`wait_timeout`](Self::wait_timeout), with a deadline.
    async fn wait_until(&mut self, deadline: tokio::time::Instant) -> Result<Value, CallError> {
        match tokio::time::timeout_at(deadline, &mut *self).await {
            Ok(result) => result,
            Err(_) => {
                let removed = self.shared.lock().pending.remove(&self.id).is_some();
                // An answer that arrived between the timer firing and the removal wins.
                if let Some(Ok(result)) = self.rx.as_mut().map(oneshot::Receiver::try_recv) {
                    self.rx = None;
                    return result;
                }
                self.rx = None;
                if removed {
                    bump(&self.shared.counters.timeouts);
                }
                Err(CallError::Timeout)
            }
        }
    }
}

impl Future for PendingCall {
    type Output = Result<Value, CallError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let Some(rx) = self.rx.as_mut() else {
            return Poll::Pending;
        };
        let output = match Pin::new(rx).poll(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(Ok(result)) => result,
            // The sender is dropped only with the shared state: the connection is gone.
            Poll::Ready(Err(_)) => Err(CallError::ConnectionClosed),
        };
        self.rx = None;
        Poll::Ready(output)
    }
}

impl Drop for PendingCall {
    fn drop(&mut self) {
        if self.rx.is_some() {
            self.shared.lock().pending.remove(&self.id);
        }
    }
}

/// The reader task's state.
struct Reader {
    shared: Arc<Shared>,
    /// Weak, so that the reader alone does not keep the output open.
    out: mpsc::WeakSender<Outgoing>,
    /// The stream shared with the writer task (holds no sender, so it does not keep the output open).
    direct: Arc<Direct>,
    /// Weak, for the same reason: the output starts closing when the last strong guard is dropped.
    guard: std::sync::Weak<DropGuard>,
    incoming: mpsc::Sender<IncomingMessage>,
}

/// What to do with one incoming line: the routing decision, free of IO.
enum Route {
    Deliver(IncomingMessage),
    Answer(Vec<u8>),
    Nothing,
}

/// Where the reader gets its frames: bytes it frames itself, or frames someone else decoded.
enum FrameSource {
    Bytes {
        reader: Box<dyn AsyncRead + Send + Unpin>,
        decoder: JsonlDecoder,
        buf: BytesMut,
        eof: bool,
    },
    Frames(Pin<Box<dyn Stream<Item = Frame> + Send>>),
}

impl FrameSource {
    fn bytes(reader: Box<dyn AsyncRead + Send + Unpin>, max_line_bytes: usize) -> Self {
        let limits = Limits {
            max_line_bytes,
            ..Limits::default()
        };
        // Framing only: the line is parsed once, by `Message::from_slice`, which also reports non-JSON (-32700).
        FrameSource::Bytes {
            reader,
            decoder: JsonlDecoder::framing_only(limits),
            buf: BytesMut::with_capacity(READ_CHUNK_BYTES),
            eof: false,
        }
    }

    /// The next frame; `Ok(None)` at the end of the input. Cancel-safe.
    async fn next(&mut self) -> std::io::Result<Option<Frame>> {
        match self {
            FrameSource::Frames(frames) => {
                Ok(std::future::poll_fn(|cx| frames.as_mut().poll_next(cx)).await)
            }
            FrameSource::Bytes {
                reader,
                decoder,
                buf,
                eof,
            } => loop {
                if *eof {
                    return Ok(decoder.decode_eof(buf));
                }
                if let Some(frame) = decoder.decode(buf) {
                    return Ok(Some(frame));
                }
                buf.reserve(READ_CHUNK_BYTES);
                if reader.read_buf(buf).await? == 0 {
                    *eof = true;
                }
            },
        }
    }
}

impl Reader {
    /// Reads until EOF or a read error. The writer aborts this task when it ends (write failure, close, every
    /// handle dropped), so no per-frame race against a stop signal is needed; no lock is held across an `.await`.
    async fn run(self, mut source: FrameSource) {
        let reason = loop {
            match source.next().await {
                Ok(Some(frame)) => self.handle(frame).await,
                Ok(None) => break CloseReason::Eof,
                Err(error) => break CloseReason::ReadFailed(error.to_string()),
            }
        };
        self.shared.close(reason);
        // Dropping `self.incoming` ends `Incoming::next` after the queued messages.
    }

    async fn handle(&self, frame: Frame) {
        match self.route(frame) {
            Route::Nothing => {}
            Route::Answer(line) => {
                let Some(out) = self.out.upgrade() else {
                    return;
                };
                if send_line(&out, &self.direct, &self.shared.closing, line, true)
                    .await
                    .is_err()
                {
                    tracing::debug!("json-rpc answer to invalid input not sent: writer stopped");
                }
            }
            // Waits while the queue is full: back-pressure to the peer.
            Route::Deliver(message) => {
                if self.incoming.send(message).await.is_err() {
                    tracing::debug!("json-rpc incoming message dropped: Incoming was dropped");
                }
            }
        }
    }

    fn route(&self, frame: Frame) -> Route {
        let counters = &self.shared.counters;
        let bytes = match frame {
            Frame::Json(bytes) => bytes,
            Frame::TooLong { bytes_discarded } => {
                bump(&counters.too_long_lines);
                tracing::warn!(
                    bytes_discarded,
                    max_line_bytes = self.shared.config.max_line_bytes,
                    "json-rpc line over the limit discarded"
                );
                return Route::Nothing;
            }
            Frame::Invalid(line) => {
                // Only a validating decoder produces this; treat it as the parse error it is.
                bump(&counters.invalid_lines);
                self.shared
                    .lock()
                    .first_invalid_line
                    .get_or_insert_with(|| line.preview.to_string());
                tracing::warn!(preview = %line.preview, error = %line.error, "json-rpc line is not json");
                return answer(&Response::error(
                    None,
                    ErrorObject::parse_error("parse error"),
                ));
            }
            other => {
                tracing::warn!(
                    kind = other.kind(),
                    "json-rpc: unexpected frame kind ignored"
                );
                return Route::Nothing;
            }
        };
        match Message::from_slice(&bytes) {
            Ok(Message::Request(request)) => self.accept_request(request),
            Ok(Message::Notification(notification)) => self.accept_notification(notification),
            Ok(Message::Response(response)) => {
                self.resolve(response);
                Route::Nothing
            }
            Err(invalid) => self.reject(&bytes, invalid),
        }
    }

    fn accept_request(&self, request: Request) -> Route {
        if request.method == crate::CANCEL_REQUEST_METHOD {
            // `$/cancel_request` is a notification (LSP, ACP); with an id it is not acted on, but answered.
            bump(&self.shared.counters.invalid_messages);
            tracing::warn!(id = %request.id, "json-rpc $/cancel_request sent as a request; rejected");
            let error =
                ErrorObject::invalid_request("invalid request").with_data(serde_json::json!({
                    "reason": "$/cancel_request is a notification and must not carry an id"
                }));
            return answer(&Response::error(Some(request.id), error));
        }
        let cancel = CancellationToken::new();
        {
            let mut state = self.shared.lock();
            if state.in_flight.contains_key(&request.id) {
                drop(state);
                bump(&self.shared.counters.duplicate_request_ids);
                tracing::warn!(id = %request.id, "json-rpc request id already in flight; rejected");
                let error = ErrorObject::invalid_request("request id is already in flight");
                return answer(&Response::error(Some(request.id), error));
            }
            let max = self.shared.config.max_incoming_in_flight;
            if state.in_flight.len() >= max {
                drop(state);
                bump(&self.shared.counters.busy_rejections);
                tracing::warn!(id = %request.id, method = %request.method, "json-rpc server busy; request rejected");
                let error = ErrorObject::internal_error("server busy: too many requests in flight")
                    .with_data(serde_json::json!({ "maxInFlight": max }));
                return answer(&Response::error(Some(request.id), error));
            }
            state.in_flight.insert(request.id.clone(), cancel.clone());
        }
        let responder = Responder::new(
            request.id.clone(),
            self.upgrade_out(),
            self.shared.clone(),
            cancel,
        );
        Route::Deliver(IncomingMessage::Request(IncomingRequest::new(
            request, responder,
        )))
    }

    /// A strong handle on the output, `None` once every handle was dropped (the output is closing then).
    fn upgrade_out(&self) -> Option<Out> {
        Some(Out {
            tx: self.out.upgrade()?,
            direct: self.direct.clone(),
            closing: self.shared.closing.clone(),
            guard: self.guard.upgrade()?,
        })
    }

    fn accept_notification(&self, notification: Notification) -> Route {
        if notification.method != crate::CANCEL_REQUEST_METHOD {
            return Route::Deliver(IncomingMessage::Notification(notification));
        }
        let id = notification
            .params
            .as_ref()
            .and_then(|params| params.get("requestId"))
            .and_then(|id| serde_json::from_value::<RequestId>(id.clone()).ok());
        let token = id
            .as_ref()
            .and_then(|id| self.shared.lock().in_flight.get(id).cloned());
        match token {
            Some(token) => {
                bump(&self.shared.counters.cancel_requests_received);
                token.cancel();
            }
            None => {
                bump(&self.shared.counters.cancel_requests_unmatched);
                tracing::debug!(params = ?notification.params, "json-rpc $/cancel_request matches no request in flight");
            }
        }
        Route::Nothing
    }

    fn resolve(&self, response: Response) {
        let counters = &self.shared.counters;
        let Some(id) = response.id else {
            bump(&counters.null_id_errors);
            if let Err(error) = &response.result {
                tracing::warn!(code = error.code.0, message = %error.message, "json-rpc peer reported an error without id");
            }
            return;
        };
        let result = response.result.map_err(CallError::Rpc);
        self.deliver_result(&id, result);
    }

    fn deliver_result(&self, id: &RequestId, result: CallResult) {
        let counters = &self.shared.counters;
        let RequestId::Number(number) = *id else {
            bump(&counters.unknown_responses);
            tracing::debug!(%id, "json-rpc response to an id we never issued dropped");
            return;
        };
        let (waiter, issued) = {
            let mut state = self.shared.lock();
            (
                state.pending.remove(&number),
                (0..state.next_id).contains(&number),
            )
        };
        match waiter {
            // The caller may have just stopped waiting; then the answer is simply unused.
            Some(waiter) => {
                let _ = waiter.send(result);
            }
            None if issued => {
                bump(&counters.late_responses);
                tracing::debug!(%id, "json-rpc response to a call no longer pending dropped");
            }
            None => {
                bump(&counters.unknown_responses);
                tracing::debug!(%id, "json-rpc response to an id we never issued dropped");
            }
        }
    }

    fn reject(&self, bytes: &[u8], invalid: InvalidMessage) -> Route {
        let counters = &self.shared.counters;
        let preview =
            String::from_utf8_lossy(bytes.get(..bytes.len().min(256)).unwrap_or_default());
        if invalid.batch {
            bump(&counters.batches_rejected);
        } else if invalid.code == crate::ErrorCode::PARSE_ERROR {
            bump(&counters.invalid_lines);
            self.shared
                .lock()
                .first_invalid_line
                .get_or_insert_with(|| preview.to_string());
        } else {
            bump(&counters.invalid_messages);
        }
        tracing::warn!(%preview, reason = %invalid.reason, "json-rpc invalid input");
        if invalid.ambiguous
            && let Some(RequestId::Number(number)) = &invalid.id
        {
            // Maybe a broken answer to one of our calls: fail that call (if pending) rather than leave it
            // hanging; it is also answered below as the broken request it may be.
            let waiter = self.shared.lock().pending.remove(number);
            if let Some(waiter) = waiter {
                let _ = waiter.send(Err(CallError::InvalidResponse(invalid.reason.clone())));
            }
        }
        if invalid.response_like {
            if let Some(id) = &invalid.id {
                // A broken answer to one of our calls fails that call instead of leaving it hanging.
                self.deliver_result(id, Err(CallError::InvalidResponse(invalid.reason.clone())));
            }
            return Route::Nothing;
        }
        match invalid.answer() {
            Some(response) => answer(&response),
            None => Route::Nothing,
        }
    }
}

fn answer(response: &Response) -> Route {
    let line = agentwire_jsonl::to_line(&ResponseRef {
        id: response.id.as_ref(),
        result: response.result.as_ref(),
    });
    match line {
        Ok(line) => Route::Answer(line),
        Err(error) => {
            tracing::error!(%error, "json-rpc error answer could not be encoded");
            Route::Nothing
        }
    }
}

/// A function that writes one chunk of complete lines, for [`Connection::from_frames`].
type WriteFn =
    Box<dyn FnMut(Vec<u8>) -> Pin<Box<dyn Future<Output = std::io::Result<()>> + Send>> + Send>;

/// What the writer task receives.
#[derive(Debug)]
pub(crate) enum Outgoing {
    /// One complete line (ends in `\n`).
    Line(Vec<u8>),
}

/// The part of the output that senders and the writer task share: the stream while nobody writes to it, so that a
/// sender with nothing ahead of it writes its line at once instead of handing it to the writer task (one task
/// switch less per message, which is most of a round trip's cost between processes).
pub(crate) struct Direct {
    slot: Mutex<Slot>,
    /// Wakes the writer task to finish a direct write that the stream did not take at once.
    resume: tokio::sync::Notify,
}

struct Slot {
    /// The stream while idle; `None` while the writer task writes to it, and for good once the writer has stopped.
    sink: Option<LineSink>,
    /// Lines queued for the writer task or being written by it, senders waiting for room in the queue, and an
    /// unfinished direct write. A sender writes directly only when this is 0, so lines keep the order they were
    /// sent in.
    ahead: usize,
    /// The unfinished part of a direct write, finished by the writer task before anything else.
    rest: Option<Rest>,
}

/// What a direct write left for the writer task.
enum Rest {
    /// Bytes of the line the stream did not take (it would have blocked).
    Bytes(Vec<u8>),
    /// The line is written, the flush would have blocked.
    Flush,
    /// The write function's future did not complete at once.
    Future(Pin<Box<dyn Future<Output = std::io::Result<()>> + Send>>),
    /// The write failed: the writer task closes the connection with this error.
    Failed(std::io::Error),
}

impl Direct {
    fn new(sink: LineSink) -> Self {
        Direct {
            slot: Mutex::new(Slot {
                sink: Some(sink),
                ahead: 0,
                rest: None,
            }),
            resume: tokio::sync::Notify::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Slot> {
        // Every update of `Slot` is a single assignment or counter step: a panic cannot leave it inconsistent.
        self.slot.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Writes `line` at once when nothing is ahead of it and the stream is idle (what the stream does not take
    /// without blocking is left to the writer task), else queues it when there is room. Never waits.
    /// Returns the line when the queue is full; it is then counted in `ahead` and the caller must queue it or
    /// uncount it ([`Waiting`]).
    ///
    /// With `write_now` false the line is always queued: a notification, which nobody waits for and which often
    /// comes in bursts that the writer task coalesces into one write.
    fn try_send(
        &self,
        tx: &mpsc::Sender<Outgoing>,
        closing: &CancellationToken,
        line: Vec<u8>,
        write_now: bool,
    ) -> Result<Option<Vec<u8>>, SendError> {
        if closing.is_cancelled() {
            return Err(SendError::ConnectionClosed);
        }
        let mut slot = self.lock();
        if write_now
            && slot.ahead == 0
            && let Some(sink) = slot.sink.as_mut()
        {
            if let Some(rest) = sink.write_now(line) {
                slot.rest = Some(rest);
                slot.ahead = 1;
                drop(slot);
                self.resume.notify_one();
            }
            return Ok(None);
        }
        match tx.try_send(Outgoing::Line(line)) {
            Ok(()) => {
                slot.ahead += 1;
                Ok(None)
            }
            Err(mpsc::error::TrySendError::Closed(_)) => Err(SendError::ConnectionClosed),
            Err(mpsc::error::TrySendError::Full(Outgoing::Line(line))) => {
                slot.ahead += 1;
                Ok(Some(line))
            }
        }
    }
}

/// A line counted in [`Slot::ahead`] while its sender waits for room in the queue; uncounted if it never gets in.
struct Waiting<'a> {
    direct: &'a Direct,
    queued: bool,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if !self.queued {
            let mut slot = self.direct.lock();
            slot.ahead = slot.ahead.saturating_sub(1);
        }
    }
}

/// Sends one line (see [`Direct::try_send`]), waiting while the queue is full; fails at once when the output is
/// closing, also while waiting. Cancel-safe: a direct write never waits, and dropped while waiting for room, nothing
/// is queued.
async fn send_line(
    tx: &mpsc::Sender<Outgoing>,
    direct: &Direct,
    closing: &CancellationToken,
    line: Vec<u8>,
    write_now: bool,
) -> Result<(), SendError> {
    let Some(line) = direct.try_send(tx, closing, line, write_now)? else {
        return Ok(());
    };
    let mut waiting = Waiting {
        direct,
        queued: false,
    };
    let sent = tokio::select! {
        biased;
        () = closing.cancelled() => Err(SendError::ConnectionClosed),
        sent = tx.send(Outgoing::Line(line)) => sent.map_err(|_| SendError::ConnectionClosed),
    };
    waiting.queued = sent.is_ok();
    sent
}

/// A strong handle on the output: the writer queue, the shared stream, and a guard that starts closing the output
/// when the last handle ([`Connection`] clones, [`Incoming`], unanswered [`Responder`]s) is dropped.
#[derive(Clone)]
pub(crate) struct Out {
    tx: mpsc::Sender<Outgoing>,
    direct: Arc<Direct>,
    closing: CancellationToken,
    guard: Arc<DropGuard>,
}

impl std::fmt::Debug for Out {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Out")
            .field("closing", &self.closing.is_cancelled())
            .finish_non_exhaustive()
    }
}

impl Out {
    /// Sends one line: written at once when nothing is ahead of it, else queued, waiting while the queue is full;
    /// fails at once when the output is closing, also while waiting. Cancel-safe: dropped while waiting, nothing is
    /// queued.
    pub(crate) async fn send(&self, line: Vec<u8>) -> Result<(), SendError> {
        send_line(&self.tx, &self.direct, &self.closing, line, true).await
    }

    /// As [`send`](Self::send), but always through the writer task's queue (for notifications: see
    /// [`Direct::try_send`]).
    pub(crate) async fn queue(&self, line: Vec<u8>) -> Result<(), SendError> {
        send_line(&self.tx, &self.direct, &self.closing, line, false).await
    }

    /// Sends one line without waiting: at once when possible, else from a background task that holds no guard (so
    /// it does not keep the output open) and gives up when the output starts closing.
    ///
    /// # Errors
    ///
    /// [`SendError::ConnectionClosed`] when the output is closed or closing.
    pub(crate) fn send_in_background(
        &self,
        line: Vec<u8>,
        what: &'static str,
    ) -> Result<(), SendError> {
        let Some(line) = self.direct.try_send(&self.tx, &self.closing, line, true)? else {
            return Ok(());
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            drop(Waiting {
                direct: &self.direct,
                queued: false,
            });
            tracing::warn!(
                what,
                "json-rpc line not sent: queue full and no tokio runtime"
            );
            return Err(SendError::ConnectionClosed);
        };
        let tx = self.tx.clone();
        let direct = self.direct.clone();
        let closing = self.closing.clone();
        runtime.spawn(async move {
            let mut waiting = Waiting {
                direct: &direct,
                queued: false,
            };
            let sent = tokio::select! {
                biased;
                () = closing.cancelled() => false,
                sent = tx.send(Outgoing::Line(line)) => sent.is_ok(),
            };
            waiting.queued = sent;
            if !sent {
                tracing::debug!(what, "json-rpc line not sent: the output closed first");
            }
        });
        Ok(())
    }
}

/// Where the writer task puts lines.
enum LineSink {
    Io(BufWriter<Box<dyn AsyncWrite + Send + Unpin>>),
    Write { write: WriteFn, chunk: Vec<u8> },
}

impl LineSink {
    /// Writes and flushes `line` as far as possible without waiting; returns what is left for the writer task.
    /// Called only while idle, when the writer task has flushed everything (its buffers are empty).
    fn write_now(&mut self, line: Vec<u8>) -> Option<Rest> {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        match self {
            LineSink::Io(writer) => {
                if !writer.buffer().is_empty() {
                    return Some(Rest::Bytes(line));
                }
                let inner = writer.get_mut();
                let mut written = 0;
                while let Some(unwritten) = line.get(written..).filter(|rest| !rest.is_empty()) {
                    match Pin::new(&mut *inner).poll_write(&mut cx, unwritten) {
                        Poll::Ready(Ok(0)) => {
                            return Some(Rest::Failed(std::io::ErrorKind::WriteZero.into()));
                        }
                        Poll::Ready(Ok(n)) => written += n,
                        Poll::Ready(Err(error))
                            if error.kind() == std::io::ErrorKind::Interrupted => {}
                        Poll::Ready(Err(error)) => return Some(Rest::Failed(error)),
                        Poll::Pending => {
                            let mut line = line;
                            line.drain(..written);
                            return Some(Rest::Bytes(line));
                        }
                    }
                }
                match Pin::new(&mut *inner).poll_flush(&mut cx) {
                    Poll::Ready(Ok(())) => None,
                    Poll::Ready(Err(error)) => Some(Rest::Failed(error)),
                    Poll::Pending => Some(Rest::Flush),
                }
            }
            LineSink::Write { write, chunk } => {
                if !chunk.is_empty() {
                    return Some(Rest::Bytes(line));
                }
                let mut future = write(line);
                match future.as_mut().poll(&mut cx) {
                    Poll::Ready(Ok(())) => None,
                    Poll::Ready(Err(error)) => Some(Rest::Failed(error)),
                    Poll::Pending => Some(Rest::Future(future)),
                }
            }
        }
    }

    /// Finishes what a direct write left (the caller flushes afterwards).
    async fn finish(&mut self, rest: Rest) -> std::io::Result<()> {
        match rest {
            Rest::Bytes(bytes) => self.write(&bytes).await,
            Rest::Flush => Ok(()),
            Rest::Future(future) => future.await,
            Rest::Failed(error) => Err(error),
        }
    }

    async fn write(&mut self, line: &[u8]) -> std::io::Result<()> {
        match self {
            LineSink::Io(writer) => writer.write_all(line).await,
            LineSink::Write { write, chunk } => {
                chunk.extend_from_slice(line);
                // Coalesce small lines into one call, so a storm of small lines is one write.
                if chunk.len() >= WRITE_BUFFER_BYTES {
                    write(std::mem::take(chunk)).await?;
                }
                Ok(())
            }
        }
    }

    async fn flush(&mut self) -> std::io::Result<()> {
        match self {
            LineSink::Io(writer) => writer.flush().await,
            LineSink::Write { write, chunk } if !chunk.is_empty() => {
                write(std::mem::take(chunk)).await
            }
            LineSink::Write { .. } => Ok(()),
        }
    }

    async fn shutdown(&mut self) -> std::io::Result<()> {
        self.flush().await?;
        match self {
            LineSink::Io(writer) => writer.shutdown().await,
            LineSink::Write { .. } => Ok(()),
        }
    }
}

/// What wakes the writer task.
enum Wake {
    /// A line from the queue.
    Line(Vec<u8>),
    /// A direct write left something to finish.
    Resume,
    /// Closing began, or every sender is gone (then the guard is gone too).
    Stop,
}

/// The writer task: writes what senders could not write at once themselves (see [`Direct`]): the rest of a direct
/// write, then each queued line, everything queued at that moment before one flush; it takes the stream from
/// [`Direct`] meanwhile and puts it back when done. On a write error (its own or a direct write's) it closes the
/// connection (every pending call fails).
///
/// When the output starts closing (`Shared::closing`: [`Connection::close`], or every handle dropped) it writes
/// what is still queued, shuts the stream down and stops, within [`Config::close_flush_timeout`]; on
/// [`Connection::abort`] it stops at once. Either way it then drops the stream, aborts the reader and marks the
/// connection closed.
async fn write_loop(
    direct: Arc<Direct>,
    mut queue: mpsc::Receiver<Outgoing>,
    shared: Arc<Shared>,
    reader: tokio::task::AbortHandle,
) {
    let closing = shared.closing.clone();
    let body = async {
        loop {
            let wake = tokio::select! {
                biased;
                () = closing.cancelled() => Wake::Stop,
                () = direct.resume.notified() => Wake::Resume,
                item = queue.recv() => match item {
                    Some(Outgoing::Line(line)) => Wake::Line(line),
                    None => Wake::Stop,
                },
            };
            let first = match wake {
                Wake::Stop => break,
                Wake::Resume => None,
                Wake::Line(line) => Some(line),
            };
            let (sink, rest) = {
                let mut slot = direct.lock();
                (slot.sink.take(), slot.rest.take())
            };
            let Some(mut sink) = sink else {
                return Err(std::io::Error::other("json-rpc output stream lost"));
            };
            let mut written = 0;
            if let Some(rest) = rest {
                written += 1;
                sink.finish(rest).await?;
            }
            if let Some(line) = first {
                written += 1;
                sink.write(&line).await?;
            }
            while let Ok(Outgoing::Line(line)) = queue.try_recv() {
                written += 1;
                sink.write(&line).await?;
            }
            sink.flush().await?;
            let mut slot = direct.lock();
            slot.ahead = slot.ahead.saturating_sub(written);
            slot.sink = Some(sink);
        }
        // Starts the flush deadline (a no-op when closing already began).
        closing.cancel();
        // Later sends fail; what is already queued is written.
        queue.close();
        let (sink, rest) = {
            let mut slot = direct.lock();
            (slot.sink.take(), slot.rest.take())
        };
        let Some(mut sink) = sink else {
            return Ok(());
        };
        if let Some(rest) = rest {
            sink.finish(rest).await?;
        }
        while let Some(Outgoing::Line(line)) = queue.recv().await {
            sink.write(&line).await?;
        }
        sink.shutdown().await
    };
    let flush_deadline = async {
        closing.cancelled().await;
        tokio::time::sleep(shared.config.close_flush_timeout).await;
    };
    let reason = tokio::select! {
        biased;
        () = shared.aborted.cancelled() => CloseReason::Closed,
        result = body => match result {
            Ok(()) => CloseReason::Closed,
            Err(error) => {
                tracing::warn!(%error, "json-rpc write failed; connection closed");
                CloseReason::WriteFailed(error.to_string())
            }
        },
        () = flush_deadline => {
            tracing::warn!(
                timeout = ?shared.config.close_flush_timeout,
                "json-rpc peer did not take the queued lines before the close deadline; they are discarded"
            );
            CloseReason::Closed
        }
    };
    // Before anyone learns that the connection closed, later sends must already fail.
    closing.cancel();
    queue.close();
    let (sink, rest) = {
        let mut slot = direct.lock();
        (slot.sink.take(), slot.rest.take())
    };
    drop((sink, rest));
    shared.close(reason);
    reader.abort();
    shared.writer_done.cancel();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_can_move_between_tasks() {
        fn send_sync<T: Send + Sync>() {}
        fn send<T: Send>() {}
        send_sync::<Connection>();
        send_sync::<Config>();
        send::<Incoming>();
        send::<IncomingRequest>();
        send::<Responder>();
        send::<PendingCall>();
        send_sync::<CallError>();
        send_sync::<SendError>();
    }

    #[test]
    fn default_config_is_documented() {
        let config = Config::default();
        assert_eq!(config.max_line_bytes, 64 * 1024 * 1024);
        assert_eq!(config.max_pending_calls, 1024);
        assert_eq!(config.max_incoming_in_flight, 256);
        assert_eq!(config.incoming_queue, 64);
        assert_eq!(config.outgoing_queue, 64);
        assert_eq!(config.default_call_timeout, None);
        assert_eq!(config.close_flush_timeout, Duration::from_secs(5));
    }
}
