//! The typed event hub: per-run event streams, bounded subscribers, resumable cursors.
//!
//! [`HubCore`] is the sans-IO state machine; [`EventHub`] is its thin async shell (a mutex and one
//! `tokio::sync::Notify` per subscriber). Rules:
//!
//! - Events belong to a run ([`HubCore::start_run`] first); each gets a hub-wide increasing offset, and its
//!   cursor is `<incarnation>:<offset>` (`^[A-Za-z0-9_-]+:(0|[1-9][0-9]*)$`). The incarnation is random per hub
//!   start, so a cursor from a previous run of the host is recognised as foreign.
//! - Each run keeps a bounded retention ring ([`HubLimits::retained_per_run`]) and the hub a global bound
//!   ([`HubLimits::max_retained_events`]); resuming from a cursor replays the retained events after it, and a
//!   cursor whose successors were evicted is refused ([`HubError::CursorExpired`]) so that the client falls
//!   back to the durable run snapshot instead of silently missing events.
//! - Every subscriber has a bounded live queue ([`HubLimits::subscriber_queue`]). When an event finds it
//!   full, the queue is dropped and the subscriber gets exactly one terminal [`SubscriptionItem::Overflow`]
//!   record and is disconnected; the hub never accumulates events for a slow client.
//! - A run-filtered subscription ends after the run's terminal event ([`HubCore::finish_run`]).
//! - [`HubCore::close`] (shutdown) gives every subscriber one terminal [`SubscriptionItem::Shutdown`].
//!
//! Source: DeepChat spec, section "Typed Event Hub and Detached Runs" (bounded queues, terminal overflow
//! error, per-stream incarnation cursors, bounded retention, 30-minute inactive expiry); cursor pattern from
//! DeepChat `localControl.ts` stream records.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::Value;
use tokio::sync::Notify;

/// Bounds of the hub. Defaults in each field's doc.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HubLimits {
    /// Live events a subscriber may have waiting. Default 256; the event that finds the queue full turns into
    /// one terminal [`SubscriptionItem::Overflow`] and the subscriber is disconnected. Replay on resume is
    /// bounded by retention instead and does not count here.
    pub subscriber_queue: usize,
    /// Events retained per run for resume. Default 1024; older ones are evicted first.
    pub retained_per_run: usize,
    /// Events retained across all runs. Default 65 536; the oldest event of any run is evicted first.
    pub max_retained_events: usize,
    /// Runs tracked at once. Default 1024; starting one more evicts the least recently active finished run,
    /// or fails with [`HubError::Capacity`] when every run is live.
    pub max_runs: usize,
    /// Concurrent subscribers. Default 256; one more is [`HubError::Capacity`].
    pub max_subscribers: usize,
    /// How long a finished run's history is kept after its last event. Default 30 min ([`HubCore::prune`]).
    pub inactive_run_ttl: Duration,
}

impl Default for HubLimits {
    fn default() -> Self {
        HubLimits {
            subscriber_queue: 256,
            retained_per_run: 1024,
            max_retained_events: 65_536,
            max_runs: 1024,
            max_subscribers: 256,
            inactive_run_ttl: Duration::from_secs(30 * 60),
        }
    }
}

/// Why a hub operation failed.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HubError {
    /// The cursor does not match `^[A-Za-z0-9_-]+:(0|[1-9][0-9]*)$` (≤ 256 bytes), or points past the newest
    /// event (`invalid_request`).
    #[error("invalid event cursor")]
    InvalidCursor,
    /// The cursor belongs to another hub incarnation (an earlier start of the host, `conflict`): recover from the
    /// durable run snapshot.
    #[error("event cursor belongs to another stream incarnation")]
    ForeignCursor,
    /// Events after the cursor were evicted from retention (`conflict`): recover from the durable run snapshot.
    #[error("events after the cursor are no longer retained")]
    CursorExpired,
    /// No such run is tracked (`not_found`).
    #[error("run not found")]
    RunNotFound,
    /// The run already has its terminal event (`conflict`).
    #[error("run is already terminal")]
    RunTerminal,
    /// The run is already started (`conflict`).
    #[error("run already exists")]
    RunExists,
    /// A run id or event name is empty or longer than 128 bytes (`invalid_request`).
    #[error("invalid run id or event name")]
    InvalidName,
    /// Run or subscriber capacity is exhausted (`unavailable`).
    #[error("event hub capacity is exhausted")]
    Capacity,
    /// The hub is shut down (`unavailable`).
    #[error("event hub is closed")]
    Closed,
    /// The OS random source failed while choosing the incarnation (`unavailable`).
    #[error("random source is unavailable")]
    RandomUnavailable,
}

impl HubError {
    /// DeepChat's wire code for this error.
    pub fn code(&self) -> &'static str {
        match self {
            HubError::InvalidCursor | HubError::InvalidName => "invalid_request",
            HubError::ForeignCursor
            | HubError::CursorExpired
            | HubError::RunTerminal
            | HubError::RunExists => "conflict",
            HubError::RunNotFound => "not_found",
            HubError::Capacity | HubError::Closed | HubError::RandomUnavailable => "unavailable",
        }
    }
}

pub use crate::envelope::Cursor;

/// Longest cursor the hub accepts, bytes (its own are at most 128 + 1 + 20).
pub const MAX_CURSOR_BYTES: usize = 256;

/// Parses a client's cursor `<incarnation>:<offset>` (the wire [`Cursor`]) within [`MAX_CURSOR_BYTES`].
///
/// # Errors
/// [`HubError::InvalidCursor`] unless the text matches `^[A-Za-z0-9_-]+:(0|[1-9][0-9]*)$` within 256 bytes
/// and the offset fits in a `u64`.
pub fn parse_cursor(text: &str) -> Result<Cursor, HubError> {
    if text.len() > MAX_CURSOR_BYTES {
        return Err(HubError::InvalidCursor);
    }
    Cursor::parse(text).ok_or(HubError::InvalidCursor)
}

/// One published event. Shared (`Arc`) between retention and subscriber queues.
#[derive(Debug, Clone, PartialEq)]
pub struct HubEvent {
    offset: u64,
    run_id: String,
    request_id: Option<String>,
    event: String,
    timestamp_ms: u64,
    data: Value,
    terminal: bool,
}

impl HubEvent {
    /// The hub-wide offset (1, 2, …).
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// The run the event belongs to.
    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    /// The request that caused it, if any.
    pub fn request_id(&self) -> Option<&str> {
        self.request_id.as_deref()
    }

    /// The event name, e.g. `run.completed`.
    pub fn event(&self) -> &str {
        &self.event
    }

    /// Milliseconds since the Unix epoch when it was published.
    pub fn timestamp_ms(&self) -> u64 {
        self.timestamp_ms
    }

    /// The typed payload.
    pub fn data(&self) -> &Value {
        &self.data
    }

    /// Whether this is the run's terminal event.
    pub fn is_terminal(&self) -> bool {
        self.terminal
    }
}

/// What to publish: run, event name, payload and optional request id.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct NewEvent {
    /// The run (1..=128 bytes).
    pub run_id: String,
    /// The event name (1..=128 bytes).
    pub event: String,
    /// The payload.
    pub data: Value,
    /// The originating request, if any.
    pub request_id: Option<String>,
}

impl NewEvent {
    /// An event without a request id.
    pub fn new(run_id: impl Into<String>, event: impl Into<String>, data: Value) -> Self {
        NewEvent {
            run_id: run_id.into(),
            event: event.into(),
            data,
            request_id: None,
        }
    }

    /// Sets the originating request id.
    pub fn request_id(mut self, request_id: impl Into<String>) -> Self {
        self.request_id = Some(request_id.into());
        self
    }
}

/// One item a subscriber receives. After [`Overflow`](Self::Overflow) or [`Shutdown`](Self::Shutdown) the
/// subscription is over.
#[derive(Debug, Clone, PartialEq)]
pub enum SubscriptionItem {
    /// An event, in offset order.
    Event(Arc<HubEvent>),
    /// Terminal: the subscriber's queue overflowed; it was disconnected (resume from the last cursor).
    Overflow,
    /// Terminal: the hub shut down.
    Shutdown,
}

impl SubscriptionItem {
    /// For the terminal records, the wire error code (`unavailable`, retriable by resuming); `None` for events.
    pub fn error_code(&self) -> Option<&'static str> {
        match self {
            SubscriptionItem::Event(_) => None,
            SubscriptionItem::Overflow | SubscriptionItem::Shutdown => Some("unavailable"),
        }
    }
}

/// The subscriber handle inside [`HubCore`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SubscriberId(u64);

/// What [`HubCore::poll`] found.
#[derive(Debug, Clone, PartialEq)]
pub enum Poll {
    /// The next item.
    Item(SubscriptionItem),
    /// Nothing yet; wait for a wake-up.
    Pending,
    /// The subscription is over (after a terminal item or the run's terminal event, or unknown id).
    Ended,
}

#[derive(Debug)]
struct RunStream {
    ring: VecDeque<Arc<HubEvent>>,
    evicted_through: u64,
    terminal: bool,
    last_activity: Instant,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Terminal {
    Overflow,
    Shutdown,
}

#[derive(Debug)]
struct Subscriber {
    filter: Option<String>,
    replay: VecDeque<Arc<HubEvent>>,
    queue: VecDeque<Arc<HubEvent>>,
    terminal: Option<Terminal>,
    ended: bool,
}

/// The sans-IO hub. Inputs take `now`; every mutating call returns the subscribers to wake.
#[derive(Debug)]
pub struct HubCore {
    incarnation: String,
    limits: HubLimits,
    last_offset: u64,
    forgotten_through: u64,
    retained: usize,
    runs: HashMap<String, RunStream>,
    subscribers: HashMap<SubscriberId, Subscriber>,
    next_subscriber: u64,
    closed: bool,
}

impl HubCore {
    /// A hub with this incarnation (validated like a cursor's: `[A-Za-z0-9_-]+`, ≤ 128 bytes).
    ///
    /// # Errors
    /// [`HubError::InvalidName`] for an invalid incarnation.
    pub fn new(incarnation: impl Into<String>, limits: HubLimits) -> Result<HubCore, HubError> {
        let incarnation = incarnation.into();
        if incarnation.is_empty()
            || incarnation.len() > 128
            || !incarnation
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(HubError::InvalidName);
        }
        Ok(HubCore {
            incarnation,
            limits,
            last_offset: 0,
            forgotten_through: 0,
            retained: 0,
            runs: HashMap::new(),
            subscribers: HashMap::new(),
            next_subscriber: 0,
            closed: false,
        })
    }

    /// This hub's stream incarnation.
    pub fn incarnation(&self) -> &str {
        &self.incarnation
    }

    /// The cursor of the newest event (`<incarnation>:0` before any).
    pub fn head(&self) -> Cursor {
        self.cursor_at(self.last_offset)
    }

    /// The cursor just after `event` (resume from here to get what follows it).
    pub fn cursor_of(&self, event: &HubEvent) -> Cursor {
        self.cursor_at(event.offset)
    }

    fn cursor_at(&self, offset: u64) -> Cursor {
        // The incarnation was validated when the hub was built.
        Cursor::from_valid_parts(&self.incarnation, offset)
    }

    /// Starts tracking a run so that it can publish and be subscribed to.
    ///
    /// # Errors
    /// [`HubError::InvalidName`], [`HubError::RunExists`], [`HubError::Capacity`] (every tracked run is live),
    /// [`HubError::Closed`].
    pub fn start_run(&mut self, run_id: &str, now: Instant) -> Result<(), HubError> {
        if self.closed {
            return Err(HubError::Closed);
        }
        check_name(run_id)?;
        if self.runs.contains_key(run_id) {
            return Err(HubError::RunExists);
        }
        if self.runs.len() >= self.limits.max_runs {
            let oldest_finished = self
                .runs
                .iter()
                .filter(|(_, run)| run.terminal)
                .min_by_key(|(_, run)| run.last_activity)
                .map(|(id, _)| id.clone());
            match oldest_finished {
                Some(id) => self.forget_run(&id),
                None => return Err(HubError::Capacity),
            }
        }
        self.runs.insert(
            run_id.to_owned(),
            RunStream {
                ring: VecDeque::new(),
                evicted_through: 0,
                terminal: false,
                last_activity: now,
            },
        );
        Ok(())
    }

    /// Publishes a non-terminal event; returns its cursor and the subscribers to wake.
    ///
    /// # Errors
    /// [`HubError::RunNotFound`], [`HubError::RunTerminal`], [`HubError::InvalidName`], [`HubError::Closed`].
    pub fn publish(
        &mut self,
        event: NewEvent,
        timestamp_ms: u64,
        now: Instant,
    ) -> Result<(Cursor, Vec<SubscriberId>), HubError> {
        self.append(event, timestamp_ms, now, false)
    }

    /// Publishes the run's terminal event: run-filtered subscriptions end after it and the run accepts no more.
    ///
    /// # Errors
    /// As [`publish`](Self::publish).
    pub fn finish_run(
        &mut self,
        event: NewEvent,
        timestamp_ms: u64,
        now: Instant,
    ) -> Result<(Cursor, Vec<SubscriberId>), HubError> {
        self.append(event, timestamp_ms, now, true)
    }

    fn append(
        &mut self,
        event: NewEvent,
        timestamp_ms: u64,
        now: Instant,
        terminal: bool,
    ) -> Result<(Cursor, Vec<SubscriberId>), HubError> {
        if self.closed {
            return Err(HubError::Closed);
        }
        check_name(&event.event)?;
        if event
            .request_id
            .as_deref()
            .is_some_and(|id| check_name(id).is_err())
        {
            return Err(HubError::InvalidName);
        }
        let run = self
            .runs
            .get_mut(&event.run_id)
            .ok_or(HubError::RunNotFound)?;
        if run.terminal {
            return Err(HubError::RunTerminal);
        }
        self.last_offset += 1;
        let event = Arc::new(HubEvent {
            offset: self.last_offset,
            run_id: event.run_id,
            request_id: event.request_id,
            event: event.event,
            timestamp_ms,
            data: event.data,
            terminal,
        });
        run.terminal = terminal;
        run.last_activity = now;
        run.ring.push_back(Arc::clone(&event));
        self.retained += 1;
        if run.ring.len() > self.limits.retained_per_run
            && let Some(evicted) = run.ring.pop_front()
        {
            run.evicted_through = evicted.offset;
            self.retained -= 1;
        }
        while self.retained > self.limits.max_retained_events {
            self.evict_oldest();
        }

        let mut woken = Vec::new();
        let capacity = self.limits.subscriber_queue;
        for (id, subscriber) in &mut self.subscribers {
            if subscriber.terminal.is_some() || subscriber.ended {
                continue;
            }
            if subscriber
                .filter
                .as_deref()
                .is_some_and(|run_id| run_id != event.run_id)
            {
                continue;
            }
            if subscriber.queue.len() >= capacity {
                subscriber.queue.clear();
                subscriber.replay.clear();
                subscriber.terminal = Some(Terminal::Overflow);
            } else {
                subscriber.queue.push_back(Arc::clone(&event));
            }
            woken.push(*id);
        }
        Ok((self.cursor_at(event.offset), woken))
    }

    fn evict_oldest(&mut self) {
        let oldest = self
            .runs
            .iter()
            .filter_map(|(id, run)| run.ring.front().map(|event| (event.offset, id.clone())))
            .min();
        let Some((_, run_id)) = oldest else {
            self.retained = 0;
            return;
        };
        if let Some(run) = self.runs.get_mut(&run_id)
            && let Some(evicted) = run.ring.pop_front()
        {
            run.evicted_through = evicted.offset;
            self.retained -= 1;
        }
    }

    fn forget_run(&mut self, run_id: &str) {
        if let Some(run) = self.runs.remove(run_id) {
            self.retained -= run.ring.len();
            let last = run
                .ring
                .back()
                .map_or(run.evicted_through, |event| event.offset);
            self.forgotten_through = self.forgotten_through.max(last);
        }
    }

    /// Subscribes to one run (`Some(run_id)`) or to every run (`None`), optionally resuming after `cursor`.
    ///
    /// Without a cursor, a run subscription replays the run's retained events and an all-runs subscription
    /// starts live. With one, the retained matching events after it are replayed first.
    ///
    /// # Errors
    /// [`HubError::InvalidCursor`], [`HubError::ForeignCursor`], [`HubError::CursorExpired`],
    /// [`HubError::RunNotFound`], [`HubError::Capacity`], [`HubError::Closed`].
    pub fn subscribe(
        &mut self,
        run_id: Option<&str>,
        cursor: Option<&str>,
    ) -> Result<SubscriberId, HubError> {
        if self.closed {
            return Err(HubError::Closed);
        }
        let cursor = cursor.map(parse_cursor).transpose()?;
        if let Some(cursor) = &cursor {
            if cursor.incarnation() != self.incarnation {
                return Err(HubError::ForeignCursor);
            }
            if cursor.offset() > self.last_offset {
                return Err(HubError::InvalidCursor);
            }
        }
        if self.subscribers.len() >= self.limits.max_subscribers {
            return Err(HubError::Capacity);
        }
        let after = cursor.as_ref().map(Cursor::offset);
        let mut replay: Vec<Arc<HubEvent>> = Vec::new();
        let mut ended = false;
        match run_id {
            Some(run_id) => {
                let run = self.runs.get(run_id).ok_or(HubError::RunNotFound)?;
                if let Some(after) = after
                    && run.evicted_through > after
                {
                    return Err(HubError::CursorExpired);
                }
                let from = after.unwrap_or(0);
                replay.extend(run.ring.iter().filter(|e| e.offset > from).cloned());
                // A cursor at or past the terminal event: nothing more will come.
                ended = run.terminal && replay.is_empty();
            }
            None => {
                if let Some(after) = after {
                    if self.forgotten_through > after
                        || self.runs.values().any(|run| run.evicted_through > after)
                    {
                        return Err(HubError::CursorExpired);
                    }
                    for run in self.runs.values() {
                        replay.extend(run.ring.iter().filter(|e| e.offset > after).cloned());
                    }
                    replay.sort_by_key(|event| event.offset);
                }
            }
        }
        self.next_subscriber += 1;
        let id = SubscriberId(self.next_subscriber);
        self.subscribers.insert(
            id,
            Subscriber {
                filter: run_id.map(str::to_owned),
                replay: replay.into(),
                queue: VecDeque::new(),
                terminal: None,
                ended,
            },
        );
        Ok(id)
    }

    /// The subscriber's next item.
    pub fn poll(&mut self, id: SubscriberId) -> Poll {
        let Some(subscriber) = self.subscribers.get_mut(&id) else {
            return Poll::Ended;
        };
        if subscriber.ended {
            return Poll::Ended;
        }
        if let Some(terminal) = subscriber.terminal {
            subscriber.ended = true;
            return Poll::Item(match terminal {
                Terminal::Overflow => SubscriptionItem::Overflow,
                Terminal::Shutdown => SubscriptionItem::Shutdown,
            });
        }
        let next = match subscriber.replay.pop_front() {
            Some(event) => Some(event),
            None => subscriber.queue.pop_front(),
        };
        match next {
            Some(event) => {
                if event.terminal && subscriber.filter.is_some() {
                    subscriber.ended = true;
                }
                Poll::Item(SubscriptionItem::Event(event))
            }
            None => Poll::Pending,
        }
    }

    /// Removes a subscriber (its connection closed).
    pub fn unsubscribe(&mut self, id: SubscriberId) {
        self.subscribers.remove(&id);
    }

    /// Live subscribers (including ended ones not yet unsubscribed).
    pub fn subscriber_count(&self) -> usize {
        self.subscribers.len()
    }

    /// Events retained across all runs.
    pub fn retained_events(&self) -> usize {
        self.retained
    }

    /// Forgets finished runs idle for longer than [`HubLimits::inactive_run_ttl`].
    pub fn prune(&mut self, now: Instant) {
        let ttl = self.limits.inactive_run_ttl;
        let expired: Vec<String> = self
            .runs
            .iter()
            .filter(|(_, run)| {
                run.terminal && now.saturating_duration_since(run.last_activity) >= ttl
            })
            .map(|(id, _)| id.clone())
            .collect();
        for id in expired {
            self.forget_run(&id);
        }
    }

    /// Shuts down: every open subscriber gets one [`SubscriptionItem::Shutdown`]; later calls fail with
    /// [`HubError::Closed`]. Returns the subscribers to wake.
    pub fn close(&mut self) -> Vec<SubscriberId> {
        self.closed = true;
        let mut woken = Vec::new();
        for (id, subscriber) in &mut self.subscribers {
            if subscriber.terminal.is_none() && !subscriber.ended {
                subscriber.replay.clear();
                subscriber.queue.clear();
                subscriber.terminal = Some(Terminal::Shutdown);
            }
            woken.push(*id);
        }
        woken
    }
}

fn check_name(name: &str) -> Result<(), HubError> {
    if name.is_empty() || name.len() > 128 {
        Err(HubError::InvalidName)
    } else {
        Ok(())
    }
}

#[derive(Debug)]
struct Inner {
    core: HubCore,
    wakers: HashMap<SubscriberId, Arc<Notify>>,
}

impl Inner {
    fn wake(&self, ids: &[SubscriberId]) {
        for id in ids {
            if let Some(notify) = self.wakers.get(id) {
                notify.notify_one();
            }
        }
    }
}

/// The async hub: a shared [`HubCore`] behind a mutex. Cheap to clone.
#[derive(Debug, Clone)]
pub struct EventHub {
    inner: Arc<Mutex<Inner>>,
}

impl EventHub {
    /// A hub with a fresh random incarnation (12 random bytes, 16 base64url characters).
    ///
    /// # Errors
    /// [`HubError::RandomUnavailable`] when the OS random source fails.
    pub fn new(limits: HubLimits) -> Result<EventHub, HubError> {
        let mut bytes = [0u8; 12];
        getrandom::fill(&mut bytes).map_err(|_| HubError::RandomUnavailable)?;
        Ok(EventHub::from_core(HubCore::new(
            URL_SAFE_NO_PAD.encode(bytes),
            limits,
        )?))
    }

    /// A hub around an existing core (e.g. with a chosen incarnation in tests).
    pub fn from_core(core: HubCore) -> EventHub {
        EventHub {
            inner: Arc::new(Mutex::new(Inner {
                core,
                wakers: HashMap::new(),
            })),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// This hub's incarnation.
    pub fn incarnation(&self) -> String {
        self.lock().core.incarnation().to_owned()
    }

    /// The cursor of the newest event (see [`HubCore::head`]).
    pub fn head(&self) -> Cursor {
        self.lock().core.head()
    }

    /// The cursor just after `event` (see [`HubCore::cursor_of`]).
    pub fn cursor_of(&self, event: &HubEvent) -> Cursor {
        self.lock().core.cursor_of(event)
    }

    /// See [`HubCore::start_run`]; `now` is read here.
    ///
    /// # Errors
    /// As [`HubCore::start_run`].
    pub fn start_run(&self, run_id: &str) -> Result<(), HubError> {
        self.lock().core.start_run(run_id, Instant::now())
    }

    /// Publishes an event (see [`HubCore::publish`]); the timestamp and `now` are read here.
    ///
    /// # Errors
    /// As [`HubCore::publish`].
    pub fn publish(&self, event: NewEvent) -> Result<Cursor, HubError> {
        let mut inner = self.lock();
        let (cursor, woken) = inner.core.publish(event, unix_ms(), Instant::now())?;
        inner.wake(&woken);
        Ok(cursor)
    }

    /// Publishes the run's terminal event (see [`HubCore::finish_run`]).
    ///
    /// # Errors
    /// As [`HubCore::publish`].
    pub fn finish_run(&self, event: NewEvent) -> Result<Cursor, HubError> {
        let mut inner = self.lock();
        let (cursor, woken) = inner.core.finish_run(event, unix_ms(), Instant::now())?;
        inner.wake(&woken);
        Ok(cursor)
    }

    /// Subscribes (see [`HubCore::subscribe`]).
    ///
    /// # Errors
    /// As [`HubCore::subscribe`].
    pub fn subscribe(
        &self,
        run_id: Option<&str>,
        cursor: Option<&str>,
    ) -> Result<Subscription, HubError> {
        let mut inner = self.lock();
        let id = inner.core.subscribe(run_id, cursor)?;
        let notify = Arc::new(Notify::new());
        inner.wakers.insert(id, Arc::clone(&notify));
        Ok(Subscription {
            hub: self.clone(),
            id,
            notify,
        })
    }

    /// Forgets idle finished runs (see [`HubCore::prune`]).
    pub fn prune(&self) {
        self.lock().core.prune(Instant::now());
    }

    /// Shuts the hub down: every subscriber receives [`SubscriptionItem::Shutdown`] and ends.
    pub fn close(&self) {
        let mut inner = self.lock();
        let woken = inner.core.close();
        inner.wake(&woken);
    }
}

/// One subscriber's stream. Dropping it unsubscribes.
#[derive(Debug)]
pub struct Subscription {
    hub: EventHub,
    id: SubscriberId,
    notify: Arc<Notify>,
}

impl Subscription {
    /// The next item, waiting for one; `None` once the subscription is over.
    pub async fn next(&mut self) -> Option<SubscriptionItem> {
        loop {
            match self.hub.lock().core.poll(self.id) {
                Poll::Item(item) => return Some(item),
                Poll::Ended => return None,
                Poll::Pending => {}
            }
            // A wake-up between the poll and here is kept as a permit by `notify_one`.
            self.notify.notified().await;
        }
    }

    /// The next item if one is ready, without waiting: [`Poll::Pending`] when none is, [`Poll::Ended`] after the end.
    pub fn try_next(&mut self) -> Poll {
        self.hub.lock().core.poll(self.id)
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut inner = self.hub.lock();
        inner.core.unsubscribe(self.id);
        inner.wakers.remove(&self.id);
    }
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|elapsed| u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn core(limits: HubLimits) -> HubCore {
        HubCore::new("inc1", limits).expect("core")
    }

    fn publish(hub: &mut HubCore, run: &str, n: u64) -> Cursor {
        hub.publish(
            NewEvent::new(run, "run.progress", json!({ "n": n })),
            n,
            Instant::now(),
        )
        .expect("publish")
        .0
    }

    fn drain(hub: &mut HubCore, id: SubscriberId) -> Vec<SubscriptionItem> {
        let mut items = Vec::new();
        while let Poll::Item(item) = hub.poll(id) {
            items.push(item);
        }
        items
    }

    fn offsets(items: &[SubscriptionItem]) -> Vec<u64> {
        items
            .iter()
            .filter_map(|item| match item {
                SubscriptionItem::Event(event) => Some(event.offset()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn cursor_syntax() {
        for good in ["a:0", "A-b_9:1", "x:18446744073709551615"] {
            let cursor = parse_cursor(good).expect(good);
            assert_eq!(cursor.to_string(), good);
        }
        let long_ok = format!("{}:1", "a".repeat(254));
        assert!(parse_cursor(&long_ok).is_ok());
        let too_long = format!("{}:1", "a".repeat(255));
        for bad in [
            "",
            ":1",
            "a:",
            "a:01",
            "a:-1",
            "a:1:2",
            "a b:1",
            "a:1 ",
            "a:18446744073709551616",
            "a/b:1",
            too_long.as_str(),
        ] {
            assert_eq!(parse_cursor(bad), Err(HubError::InvalidCursor), "{bad}");
        }
    }

    #[test]
    fn run_subscription_replays_and_ends_at_terminal() {
        let mut hub = core(HubLimits::default());
        let now = Instant::now();
        hub.start_run("r1", now).expect("start");
        hub.start_run("r2", now).expect("start");
        publish(&mut hub, "r1", 1);
        publish(&mut hub, "r2", 2);
        let sub = hub.subscribe(Some("r1"), None).expect("subscribe");
        publish(&mut hub, "r1", 3);
        hub.finish_run(NewEvent::new("r1", "run.completed", json!({})), 4, now)
            .expect("finish");
        let items = drain(&mut hub, sub);
        assert_eq!(offsets(&items), vec![1, 3, 4]);
        assert_eq!(hub.poll(sub), Poll::Ended);
        assert_eq!(
            hub.publish(NewEvent::new("r1", "late", json!(null)), 5, now)
                .expect_err("terminal"),
            HubError::RunTerminal
        );
        // Subscribing after the end with the last cursor ends at once; without a cursor it replays.
        let last = hub.head();
        let sub = hub
            .subscribe(Some("r1"), Some(&last.to_string()))
            .expect("resume");
        assert_eq!(hub.poll(sub), Poll::Ended);
        let sub = hub.subscribe(Some("r1"), None).expect("replay");
        assert_eq!(offsets(&drain(&mut hub, sub)), vec![1, 3, 4]);
    }

    #[test]
    fn resume_from_cursor_replays_only_later_events() {
        let mut hub = core(HubLimits::default());
        hub.start_run("r1", Instant::now()).expect("start");
        let mut cursors = Vec::new();
        for n in 1..=5 {
            cursors.push(publish(&mut hub, "r1", n));
        }
        let sub = hub
            .subscribe(Some("r1"), Some(&cursors[2].to_string()))
            .expect("resume");
        assert_eq!(offsets(&drain(&mut hub, sub)), vec![4, 5]);
        let all = hub
            .subscribe(None, Some(&cursors[0].to_string()))
            .expect("resume all");
        assert_eq!(offsets(&drain(&mut hub, all)), vec![2, 3, 4, 5]);
        let live = hub.subscribe(None, None).expect("live");
        assert_eq!(hub.poll(live), Poll::Pending);
        assert_eq!(
            hub.subscribe(None, Some("inc1:6")).expect_err("future"),
            HubError::InvalidCursor
        );
    }

    #[test]
    fn foreign_incarnation_is_recognised() {
        let mut first = core(HubLimits::default());
        first.start_run("r1", Instant::now()).expect("start");
        let cursor = publish(&mut first, "r1", 1);
        let mut restarted = HubCore::new("inc2", HubLimits::default()).expect("core");
        restarted.start_run("r1", Instant::now()).expect("start");
        let error = restarted
            .subscribe(Some("r1"), Some(&cursor.to_string()))
            .expect_err("foreign");
        assert_eq!(
            (error.clone(), error.code()),
            (HubError::ForeignCursor, "conflict")
        );
    }

    #[test]
    fn evicted_history_refuses_the_cursor() {
        let limits = HubLimits {
            retained_per_run: 3,
            ..HubLimits::default()
        };
        let mut hub = core(limits);
        hub.start_run("r1", Instant::now()).expect("start");
        let cursors: Vec<Cursor> = (1..=5).map(|n| publish(&mut hub, "r1", n)).collect();
        // Retained: 3, 4, 5. Resuming after 2 is complete; after 1 would miss event 2.
        let ok = hub
            .subscribe(Some("r1"), Some(&cursors[1].to_string()))
            .expect("in range");
        assert_eq!(offsets(&drain(&mut hub, ok)), vec![3, 4, 5]);
        assert_eq!(
            hub.subscribe(Some("r1"), Some(&cursors[0].to_string()))
                .expect_err("gap"),
            HubError::CursorExpired
        );
        assert_eq!(
            hub.subscribe(None, Some(&cursors[0].to_string()))
                .expect_err("gap"),
            HubError::CursorExpired
        );
        assert_eq!(hub.retained_events(), 3);
    }

    #[test]
    fn global_retention_and_run_capacity() {
        let limits = HubLimits {
            max_retained_events: 4,
            max_runs: 2,
            ..HubLimits::default()
        };
        let mut hub = core(limits);
        let now = Instant::now();
        hub.start_run("r1", now).expect("start");
        hub.start_run("r2", now).expect("start");
        for n in 1..=3 {
            publish(&mut hub, "r1", n);
        }
        for n in 4..=5 {
            publish(&mut hub, "r2", n);
        }
        assert_eq!(hub.retained_events(), 4);
        assert_eq!(hub.start_run("r3", now), Err(HubError::Capacity));
        hub.finish_run(NewEvent::new("r1", "run.completed", json!({})), 6, now)
            .expect("finish");
        hub.start_run("r3", now).expect("evicts finished r1");
        assert_eq!(hub.subscribe(Some("r1"), None), Err(HubError::RunNotFound));
        assert_eq!(
            hub.subscribe(None, Some("inc1:1")).expect_err("forgotten"),
            HubError::CursorExpired
        );
    }

    #[test]
    fn inactive_finished_runs_expire() {
        let mut hub = core(HubLimits::default());
        let now = Instant::now();
        hub.start_run("r1", now).expect("start");
        hub.start_run("live", now).expect("start");
        hub.finish_run(NewEvent::new("r1", "run.completed", json!({})), 1, now)
            .expect("finish");
        hub.prune(now + Duration::from_secs(30 * 60) - Duration::from_millis(1));
        assert!(hub.subscribe(Some("r1"), None).is_ok());
        hub.prune(now + Duration::from_secs(30 * 60));
        assert_eq!(hub.subscribe(Some("r1"), None), Err(HubError::RunNotFound));
        assert!(hub.subscribe(Some("live"), None).is_ok());
    }

    #[test]
    fn overflow_at_capacity_plus_one() {
        let limits = HubLimits {
            subscriber_queue: 3,
            ..HubLimits::default()
        };
        let mut hub = core(limits);
        hub.start_run("r1", Instant::now()).expect("start");
        let slow = hub.subscribe(Some("r1"), None).expect("slow");
        let fast = hub.subscribe(Some("r1"), None).expect("fast");
        for n in 1..=3 {
            publish(&mut hub, "r1", n);
        }
        assert_eq!(offsets(&drain(&mut hub, fast)), vec![1, 2, 3]);
        publish(&mut hub, "r1", 4);
        let items = drain(&mut hub, slow);
        assert_eq!(items, vec![SubscriptionItem::Overflow]);
        assert_eq!(items[0].error_code(), Some("unavailable"));
        assert_eq!(hub.poll(slow), Poll::Ended);
        assert_eq!(offsets(&drain(&mut hub, fast)), vec![4]);
    }

    #[test]
    fn close_sends_one_shutdown() {
        let mut hub = core(HubLimits::default());
        hub.start_run("r1", Instant::now()).expect("start");
        let sub = hub.subscribe(None, None).expect("subscribe");
        publish(&mut hub, "r1", 1);
        assert_eq!(hub.close(), vec![sub]);
        assert_eq!(drain(&mut hub, sub), vec![SubscriptionItem::Shutdown]);
        assert_eq!(hub.poll(sub), Poll::Ended);
        assert_eq!(hub.subscribe(None, None), Err(HubError::Closed));
        assert_eq!(hub.start_run("r2", Instant::now()), Err(HubError::Closed));
    }

    #[test]
    fn limits_on_names_and_subscribers() {
        let limits = HubLimits {
            max_subscribers: 1,
            ..HubLimits::default()
        };
        let mut hub = core(limits);
        let now = Instant::now();
        assert_eq!(hub.start_run("", now), Err(HubError::InvalidName));
        assert_eq!(
            hub.start_run(&"r".repeat(129), now),
            Err(HubError::InvalidName)
        );
        hub.start_run(&"r".repeat(128), now).expect("128 bytes");
        assert_eq!(
            hub.start_run(&"r".repeat(128), now),
            Err(HubError::RunExists)
        );
        let first = hub.subscribe(None, None).expect("first");
        assert_eq!(hub.subscribe(None, None), Err(HubError::Capacity));
        hub.unsubscribe(first);
        assert!(hub.subscribe(None, None).is_ok());
        assert_eq!(
            HubCore::new("bad:inc", HubLimits::default()).err(),
            Some(HubError::InvalidName)
        );
    }

    #[tokio::test]
    async fn async_subscription_wakes_on_publish_and_drop_unsubscribes() {
        let hub = EventHub::new(HubLimits::default()).expect("hub");
        assert_eq!(hub.incarnation().len(), 16);
        hub.start_run("r1").expect("start");
        let mut subscription = hub.subscribe(Some("r1"), None).expect("subscribe");
        let publisher = hub.clone();
        let task = tokio::spawn(async move {
            publisher
                .publish(NewEvent::new("r1", "run.progress", json!(1)).request_id("req-1"))
                .expect("publish");
            publisher
                .finish_run(NewEvent::new("r1", "run.completed", json!(2)))
                .expect("finish");
        });
        let first = subscription.next().await.expect("first");
        let SubscriptionItem::Event(first) = first else {
            panic!("expected an event, got {first:?}");
        };
        assert_eq!(
            (first.event(), first.request_id()),
            ("run.progress", Some("req-1"))
        );
        let second = subscription.next().await.expect("second");
        assert!(matches!(second, SubscriptionItem::Event(ref event) if event.is_terminal()));
        assert_eq!(subscription.next().await, None);
        task.await.expect("task");
        assert_eq!(hub.lock().core.subscriber_count(), 1);
        drop(subscription);
        assert_eq!(hub.lock().core.subscriber_count(), 0);
    }

    #[tokio::test]
    async fn async_close_ends_waiting_subscribers() {
        let hub = EventHub::new(HubLimits::default()).expect("hub");
        let mut subscription = hub.subscribe(None, None).expect("subscribe");
        let closer = hub.clone();
        let task = tokio::spawn(async move { closer.close() });
        assert_eq!(subscription.next().await, Some(SubscriptionItem::Shutdown));
        assert_eq!(subscription.next().await, None);
        task.await.expect("task");
    }

    #[derive(Debug, Clone)]
    enum Op {
        Publish,
        Poll(usize),
    }

    proptest! {
        /// Whatever the interleaving, each subscriber sees a gap-free prefix of the events in order, and its
        /// stream ends with exactly one Overflow precisely when an event found its queue full.
        #[test]
        fn overflow_rule(
            capacity in 1usize..6,
            ops in proptest::collection::vec(
                prop_oneof![3 => Just(Op::Publish), 2 => (0usize..3).prop_map(Op::Poll)],
                0..120,
            ),
        ) {
            let limits = HubLimits { subscriber_queue: capacity, ..HubLimits::default() };
            let mut hub = core(limits);
            hub.start_run("r", Instant::now()).expect("start");
            let ids: Vec<SubscriberId> =
                (0..3).map(|_| hub.subscribe(Some("r"), None).expect("subscribe")).collect();
            // Model per subscriber: queued count, overflowed, overflow delivered, last offset seen.
            let mut queued = [0usize; 3];
            let mut overflowed = [false; 3];
            let mut delivered = [false; 3];
            let mut seen = [0u64; 3];
            let mut published = 0u64;
            for op in ops {
                match op {
                    Op::Publish => {
                        publish(&mut hub, "r", published + 1);
                        published += 1;
                        for s in 0..3 {
                            if overflowed[s] { continue; }
                            if queued[s] == capacity { overflowed[s] = true; queued[s] = 0; }
                            else { queued[s] += 1; }
                        }
                    }
                    Op::Poll(s) => {
                        let polled = hub.poll(ids[s]);
                        if delivered[s] {
                            prop_assert_eq!(polled, Poll::Ended);
                        } else if overflowed[s] {
                            prop_assert_eq!(polled, Poll::Item(SubscriptionItem::Overflow));
                            delivered[s] = true;
                        } else if queued[s] == 0 {
                            prop_assert_eq!(polled, Poll::Pending);
                        } else {
                            match polled {
                                Poll::Item(SubscriptionItem::Event(event)) => {
                                    prop_assert_eq!(event.offset(), seen[s] + 1);
                                    seen[s] += 1;
                                    queued[s] -= 1;
                                }
                                other => prop_assert!(false, "unexpected {:?}", other),
                            }
                        }
                    }
                }
            }
        }
    }
}
