//! The child's pipes: a clonable stdin writer, stdout as a stream (JSONL frames or bytes), stderr as a bounded tail.
//!
//! Stdout and stderr are read by background tasks that stop at EOF or at the child's exit + drain window, whichever
//! comes first, so a grandchild holding a pipe open cannot keep a reader waiting.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use futures_util::FutureExt;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::ChildStdin;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::child::{ChildConfig, Exit, deadline_after};
use crate::command::StdoutMode;
use crate::error::StdinError;
use crate::tail::TailBuffer;

// ---------------------------------------------------------------------------------------------------------------
// stdin

/// A clonable handle to the child's stdin.
///
/// Writes are serialized between clones; each call makes exactly one write attempt (no retry, no replay).
/// After a failed write or [`Stdin::close`], every write returns [`StdinError::Closed`].
/// Writing to a child that has exited returns [`StdinError::BrokenPipe`] (the process ignores `SIGPIPE`, as every
/// Rust program does by default).
/// `Debug` shows only whether stdin is closed.
#[derive(Clone)]
pub struct Stdin {
    inner: Arc<StdinShared>,
}

struct StdinShared {
    pipe: tokio::sync::Mutex<Option<ChildStdin>>,
    closing: CancellationToken,
}

impl Stdin {
    pub(crate) fn new(pipe: ChildStdin) -> Self {
        Self {
            inner: Arc::new(StdinShared {
                pipe: tokio::sync::Mutex::new(Some(pipe)),
                closing: CancellationToken::new(),
            }),
        }
    }

    /// Writes one line: `line` followed by `\n` (a single trailing `\n` in `line` is accepted and not doubled).
    ///
    /// The line and its newline go out in one write under the handle's lock, so lines from different clones never
    /// interleave.
    ///
    /// # Errors
    /// [`StdinError::NewlineInLine`] (nothing written) if `line` contains `\n` before its end; otherwise as
    /// [`Stdin::write_all`].
    pub async fn write_line(&self, line: &[u8]) -> Result<(), StdinError> {
        let body = line.strip_suffix(b"\n").unwrap_or(line);
        if let Some(position) = body.iter().position(|&b| b == b'\n') {
            return Err(StdinError::NewlineInLine { position });
        }
        let mut framed = Vec::with_capacity(body.len() + 1);
        framed.extend_from_slice(body);
        framed.push(b'\n');
        self.write_all(&framed).await
    }

    /// Writes `bytes` completely and flushes, in one attempt.
    ///
    /// The wait is not bounded here (a child that does not read its stdin blocks the write once the pipe is full);
    /// wrap it in a timeout if needed. [`Stdin::close`] (and therefore a stop) interrupts a blocked write.
    /// If this future is dropped after part of `bytes` went out, stdin is closed: the child never sees the rest of
    /// that write glued to a later one.
    ///
    /// # Errors
    /// [`StdinError::Closed`] if stdin was closed before or during the write (the write may then be partial),
    /// [`StdinError::BrokenPipe`] if the child no longer reads stdin, [`StdinError::Io`] for other errors.
    /// After any error stdin is closed.
    pub async fn write_all(&self, bytes: &[u8]) -> Result<(), StdinError> {
        let closing = &self.inner.closing;
        if closing.is_cancelled() {
            return Err(StdinError::Closed);
        }
        let pipe = tokio::select! {
            guard = self.inner.pipe.lock() => guard,
            () = closing.cancelled() => return Err(StdinError::Closed),
        };
        let mut inflight = Inflight {
            pipe,
            closing,
            written: 0,
            total: bytes.len(),
            finished: false,
        };
        let result = tokio::select! {
            written = inflight.write(bytes) => written,
            () = closing.cancelled() => Err(StdinError::Closed),
        };
        inflight.finish(&result);
        result
    }

    /// Closes stdin (the child reads EOF). Idempotent; interrupts writes that are blocked.
    pub async fn close(&self) {
        self.inner.closing.cancel();
        let mut guard = self.inner.pipe.lock().await;
        // Dropping the pipe closes our end of it.
        drop(guard.take());
    }

    /// Whether stdin has been closed (by [`Stdin::close`], a stop, or a failed write).
    pub fn is_closed(&self) -> bool {
        self.inner.closing.is_cancelled()
    }
}

impl std::fmt::Debug for Stdin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stdin")
            .field("closed", &self.is_closed())
            .finish()
    }
}

/// One write in progress, holding the pipe's lock. Closes stdin if the write fails or is abandoned half-way.
struct Inflight<'a> {
    pipe: tokio::sync::MutexGuard<'a, Option<ChildStdin>>,
    closing: &'a CancellationToken,
    written: usize,
    total: usize,
    finished: bool,
}

impl Inflight<'_> {
    async fn write(&mut self, bytes: &[u8]) -> Result<(), StdinError> {
        let Some(pipe) = self.pipe.as_mut() else {
            return Err(StdinError::Closed);
        };
        while let Some(rest) = bytes.get(self.written..).filter(|rest| !rest.is_empty()) {
            match pipe.write(rest).await {
                Ok(0) => return Err(StdinError::Io(io::ErrorKind::WriteZero.into())),
                Ok(n) => self.written += n,
                Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                Err(err) => return Err(StdinError::from_io(err)),
            }
        }
        pipe.flush().await.map_err(StdinError::from_io)
    }

    fn finish(&mut self, result: &Result<(), StdinError>) {
        self.finished = true;
        if result.is_err() {
            // A failed write may have been partial: never write after it.
            self.close();
        }
    }

    fn close(&mut self) {
        *self.pipe = None;
        self.closing.cancel();
    }
}

impl Drop for Inflight<'_> {
    fn drop(&mut self) {
        if !self.finished && self.written > 0 && self.written < self.total {
            tracing::debug!(
                written = self.written,
                total = self.total,
                "stdin write abandoned half-way; closing stdin"
            );
            self.close();
        }
    }
}

// ---------------------------------------------------------------------------------------------------------------
// stdout

/// One item of the child's stdout.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum StdoutItem {
    /// One JSON Lines frame (with [`crate::Command::stdout_jsonl`]): a JSON value, an invalid line, or a too-long line.
    Frame(agentwire_jsonl::Frame),
    /// A chunk of raw bytes as read from the pipe (the default mode); chunk boundaries carry no meaning.
    Bytes(Bytes),
}

/// Why the stdout stream ended.
///
/// Which reason a child whose grandchild holds stdout open gets depends on a race that is not a bug: at the end
/// of the drain window the reader stops waiting, and (with [`ChildConfig::kill_orphans_after_drain`], the
/// default) the supervisor kills the orphans at that same moment, which closes their end of the pipe.
/// - [`StdoutEnd::Eof`]: every writer closed the pipe. Also the end when the orphans were killed at the end of the
///   drain window *before* the reader looked at the pipe again (typically a slow consumer: the reader was waiting
///   for queue room), and the late drain then read the rest and saw the close. Nothing was lost.
/// - [`StdoutEnd::DrainWindowElapsed`]: the pipe was still open when the reader looked after the window (the
///   reader was first, or the orphan kill is off, or a process that left the group with `setsid` holds the
///   pipe), or [`ChildConfig::late_drain_max_bytes`] ran out. Output in the pipe at that moment was delivered.
/// - [`StdoutEnd::ReadError`]: reading failed, or the reader task is gone (the runtime is shutting down).
///
/// So do not treat `Eof` as "no grandchild was left": look at [`crate::Child::wait`] for completion, which never
/// depends on the pipe.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum StdoutEnd {
    /// Every writer closed the pipe (including orphans killed at the end of the drain window; see above).
    Eof,
    /// The child exited and the drain window elapsed while the pipe was still open (a grandchild holds it).
    /// Output that was already in the pipe at that moment was still delivered.
    DrainWindowElapsed,
    /// Reading the pipe failed (or the reader task stopped without a verdict: `message` is `stdout reader stopped`).
    ReadError {
        /// The OS error kind.
        kind: io::ErrorKind,
        /// The OS error message.
        message: String,
    },
}

/// Message from the stdout reader task to [`Stdout`].
#[derive(Debug)]
pub(crate) enum StdoutMsg {
    Item(StdoutItem),
    End(StdoutEnd),
}

/// The child's stdout as a stream of [`StdoutItem`]s; also a [`futures_util::Stream`].
///
/// The stream ends at EOF or at the child's exit + [`ChildConfig::drain_window`], whichever comes first; a
/// grandchild that keeps the pipe open cannot delay the end. [`Stdout::end`] then says which.
///
/// Reading is bounded: at most [`ChildConfig::stdout_queue_items`] items wait here; when they are not consumed, the
/// reader stops reading and the child blocks on its writes (backpressure, no unbounded buffering).
/// Dropping `Stdout` makes the reader discard the rest of the output, so the child never blocks or gets `EPIPE`.
/// `Debug` shows only the end reason (`None` while running).
pub struct Stdout {
    rx: mpsc::Receiver<StdoutMsg>,
    end: Option<StdoutEnd>,
}

impl Stdout {
    pub(crate) fn new(rx: mpsc::Receiver<StdoutMsg>) -> Self {
        Self { rx, end: None }
    }

    /// The next item, or `None` once the stream has ended (see [`Stdout::end`]).
    pub async fn next(&mut self) -> Option<StdoutItem> {
        std::future::poll_fn(|cx| self.poll_item(cx)).await
    }

    /// Why the stream ended; `None` while it is still running.
    pub fn end(&self) -> Option<&StdoutEnd> {
        self.end.as_ref()
    }

    fn poll_item(&mut self, cx: &mut Context<'_>) -> Poll<Option<StdoutItem>> {
        if self.end.is_some() {
            return Poll::Ready(None);
        }
        match self.rx.poll_recv(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Some(StdoutMsg::Item(item))) => Poll::Ready(Some(item)),
            Poll::Ready(Some(StdoutMsg::End(end))) => {
                self.end = Some(end);
                Poll::Ready(None)
            }
            // The reader task is gone without a verdict (runtime shutting down).
            Poll::Ready(None) => {
                self.end = Some(StdoutEnd::ReadError {
                    kind: io::ErrorKind::Other,
                    message: "stdout reader stopped".to_owned(),
                });
                Poll::Ready(None)
            }
        }
    }
}

impl std::fmt::Debug for Stdout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stdout").field("end", &self.end).finish()
    }
}

impl futures_util::Stream for Stdout {
    type Item = StdoutItem;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<StdoutItem>> {
        self.get_mut().poll_item(cx)
    }
}

// ---------------------------------------------------------------------------------------------------------------
// stderr

/// A clonable view of the child's stderr: the last [`ChildConfig::stderr_tail_bytes`] bytes and the total count.
///
/// Stderr is diagnostics, never protocol (invariant 2 of this repository's `docs/architecture.md`: stdout alone
/// carries the protocol): it is only kept, never parsed.
/// `Debug` shows the byte counts and whether collection has finished, never the bytes.
#[derive(Clone)]
pub struct StderrTail {
    inner: Arc<StderrShared>,
}

struct StderrShared {
    ring: Mutex<TailBuffer>,
    done: watch::Sender<bool>,
    /// Total bytes seen, published after each push (what [`StderrTail::changed`] waits on).
    total: watch::Sender<u64>,
}

impl StderrTail {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            inner: Arc::new(StderrShared {
                ring: Mutex::new(TailBuffer::new(capacity)),
                done: watch::Sender::new(false),
                total: watch::Sender::new(0),
            }),
        }
    }

    /// `(bytes kept, total bytes seen)`: the kept bytes are the tail of the output, oldest first;
    /// `total - kept.len()` bytes were dropped from the front.
    pub fn snapshot(&self) -> (Bytes, u64) {
        let ring = self
            .inner
            .ring
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        (ring.kept(), ring.total())
    }

    /// The kept tail as text (lossy UTF-8), for error messages.
    pub fn tail_lossy(&self) -> String {
        String::from_utf8_lossy(&self.snapshot().0).into_owned()
    }

    /// Resolves once stderr collection has ended (EOF, or the child's exit + drain window).
    pub async fn finished(&self) {
        let mut rx = self.inner.done.subscribe();
        // The sender lives in `inner`, which `self` keeps alive: the wait cannot fail.
        let _ = rx.wait_for(|done| *done).await;
    }

    /// Whether stderr collection has ended.
    pub fn is_finished(&self) -> bool {
        *self.inner.done.borrow()
    }

    /// Resolves once more than `seen` bytes of stderr have arrived in total, or collection has ended (then no
    /// more will come); at once when either already holds. Pass the total of the caller's last
    /// [`snapshot`](Self::snapshot) (0 at first), then take a new snapshot: no arrival is missed between the two,
    /// and a follower needs no polling.
    ///
    /// Bytes are published chunk by chunk as read from the pipe (at most [`ChildConfig::read_chunk_bytes`] each),
    /// so a wake-up may cover several writes of the child. Cancel-safe.
    pub async fn changed(&self, seen: u64) {
        let mut total = self.inner.total.subscribe();
        let mut done = self.inner.done.subscribe();
        // Both senders live in `inner`, which `self` keeps alive: neither wait can fail.
        tokio::select! {
            _ = total.wait_for(|total| *total > seen) => {}
            _ = done.wait_for(|done| *done) => {}
        }
    }

    fn push(&self, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        let total = {
            let mut ring = self
                .inner
                .ring
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            ring.push(data);
            ring.total()
        };
        self.inner.total.send_replace(total);
    }
}

impl std::fmt::Debug for StderrTail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (kept, total) = {
            let ring = self
                .inner
                .ring
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            (ring.kept_len(), ring.total())
        };
        f.debug_struct("StderrTail")
            .field("kept_bytes", &kept)
            .field("total_bytes", &total)
            .field("finished", &self.is_finished())
            .finish()
    }
}

// ---------------------------------------------------------------------------------------------------------------
// readers

/// What one read produced.
enum ReadOutcome {
    /// Bytes were appended to the buffer.
    Data,
    /// The stream is over.
    End(StdoutEnd),
}

/// Reads a pipe until EOF or the child's exit + drain window.
///
/// After the deadline it still takes what the pipe holds at that moment (reads that complete without waiting), up
/// to [`ChildConfig::late_drain_max_bytes`], so output written before the exit is not lost to a slow consumer.
struct PipeReader<R> {
    pipe: R,
    exit: watch::Receiver<Option<Exit>>,
    drain_window: Duration,
    chunk_bytes: usize,
    late_budget: usize,
    deadline_passed: bool,
}

impl<R: AsyncRead + Unpin> PipeReader<R> {
    fn new(pipe: R, exit: watch::Receiver<Option<Exit>>, config: &ChildConfig) -> Self {
        Self {
            pipe,
            exit,
            drain_window: config.drain_window,
            chunk_bytes: config.read_chunk_bytes.max(1),
            late_budget: config.late_drain_max_bytes,
            deadline_passed: false,
        }
    }

    fn deadline(&self) -> Option<tokio::time::Instant> {
        self.exit
            .borrow()
            .as_ref()
            .and_then(|exit| deadline_after(exit.at, self.drain_window))
    }

    async fn read(&mut self, buf: &mut BytesMut) -> ReadOutcome {
        if !self.deadline_passed
            && self
                .deadline()
                .is_some_and(|d| d <= tokio::time::Instant::now())
        {
            self.deadline_passed = true;
        }
        if !self.deadline_passed {
            buf.reserve(self.chunk_bytes);
            let mut limited = (&mut *buf).limit(self.chunk_bytes);
            tokio::select! {
                read = self.pipe.read_buf(&mut limited) => return classify(read),
                () = drain_deadline(&mut self.exit, self.drain_window) => self.deadline_passed = true,
            }
        }
        if self.late_budget == 0 {
            return ReadOutcome::End(StdoutEnd::DrainWindowElapsed);
        }
        let limit = self.late_budget.min(self.chunk_bytes);
        buf.reserve(limit);
        let before = buf.len();
        let mut limited = (&mut *buf).limit(limit);
        match self.pipe.read_buf(&mut limited).now_or_never() {
            None => ReadOutcome::End(StdoutEnd::DrainWindowElapsed),
            Some(read) => {
                self.late_budget -= buf.len() - before;
                classify(read)
            }
        }
    }
}

fn classify(read: io::Result<usize>) -> ReadOutcome {
    match read {
        Ok(0) => ReadOutcome::End(StdoutEnd::Eof),
        Ok(_) => ReadOutcome::Data,
        Err(err) if err.kind() == io::ErrorKind::Interrupted => ReadOutcome::Data,
        Err(err) => ReadOutcome::End(StdoutEnd::ReadError {
            kind: err.kind(),
            message: err.to_string(),
        }),
    }
}

/// Resolves at the child's exit + `drain_window`; never if the exit is never observed.
async fn drain_deadline(exit: &mut watch::Receiver<Option<Exit>>, drain_window: Duration) {
    let at = match exit.wait_for(Option::is_some).await {
        Ok(exit) => exit.as_ref().map(|e| e.at),
        Err(_) => None,
    };
    // No exit yet (the supervisor is gone), or a window past the end of the clock: the deadline never comes.
    match at.and_then(|at| deadline_after(at, drain_window)) {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// Reads stdout, decodes it per `mode` and sends the items to [`Stdout`]; ends with one [`StdoutMsg::End`].
pub(crate) async fn pump_stdout<R: AsyncRead + Unpin>(
    pipe: R,
    mode: StdoutMode,
    tx: mpsc::Sender<StdoutMsg>,
    exit: watch::Receiver<Option<Exit>>,
    config: ChildConfig,
) {
    let mut reader = PipeReader::new(pipe, exit, &config);
    let mut decoder = match mode {
        StdoutMode::Jsonl(limits) => Some(agentwire_jsonl::JsonlDecoder::new(limits)),
        StdoutMode::Bytes => None,
    };
    let mut buf = BytesMut::new();
    let mut consumer_gone = false;
    let end = loop {
        let outcome = reader.read(&mut buf).await;
        if consumer_gone {
            buf.clear();
        }
        match outcome {
            ReadOutcome::End(end) => break end,
            ReadOutcome::Data if consumer_gone => {}
            ReadOutcome::Data => match &mut decoder {
                Some(decoder) => {
                    while let Some(frame) = decoder.decode(&mut buf) {
                        if tx
                            .send(StdoutMsg::Item(StdoutItem::Frame(frame)))
                            .await
                            .is_err()
                        {
                            consumer_gone = true;
                            buf.clear();
                            break;
                        }
                    }
                }
                None => {
                    let chunk = buf.split().freeze();
                    if tx
                        .send(StdoutMsg::Item(StdoutItem::Bytes(chunk)))
                        .await
                        .is_err()
                    {
                        consumer_gone = true;
                    }
                }
            },
        }
    };
    if consumer_gone {
        return;
    }
    if let Some(decoder) = &mut decoder {
        while let Some(frame) = decoder.decode_eof(&mut buf) {
            if tx
                .send(StdoutMsg::Item(StdoutItem::Frame(frame)))
                .await
                .is_err()
            {
                return;
            }
        }
    } else if !buf.is_empty() {
        let chunk = buf.split().freeze();
        if tx
            .send(StdoutMsg::Item(StdoutItem::Bytes(chunk)))
            .await
            .is_err()
        {
            return;
        }
    }
    // The receiver may be gone; then nobody needs the verdict.
    let _ = tx.send(StdoutMsg::End(end)).await;
}

/// Reads stderr into the tail until EOF or the child's exit + drain window, then marks it finished.
pub(crate) async fn pump_stderr<R: AsyncRead + Unpin>(
    pipe: R,
    tail: StderrTail,
    exit: watch::Receiver<Option<Exit>>,
    config: ChildConfig,
) {
    let mut reader = PipeReader::new(pipe, exit, &config);
    let mut buf = BytesMut::new();
    loop {
        let outcome = reader.read(&mut buf).await;
        tail.push(&buf);
        buf.clear();
        match outcome {
            ReadOutcome::Data => {}
            ReadOutcome::End(end) => {
                if let StdoutEnd::ReadError { message, .. } = end {
                    tracing::debug!(%message, "reading child stderr failed");
                }
                break;
            }
        }
    }
    tail.inner.done.send_replace(true);
}
