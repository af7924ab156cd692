//! Bounded background compute admission: the capacity model, media and OCR work (and agents' tool calls, in a
//! pool of their own) must win before it runs.
//!
//! Source: DeepChat spec, "Cost and concurrency" (bounded request sizes, per-connection concurrency, per-method
//! rate limits, Agent call counts; "interactive renderer work has priority; CLI/OCR/benchmark work enters
//! background capacity and cannot starve chat") and the Programmatic Tool extension ("tool call and batch also
//! enter a bounded Agent compute admission domain separate from model, media, and OCR compute"); DeepChat
//! `src/main/cli/policy.ts` (`admitCompute`: 2 concurrent and 20 starts per minute per Agent conversation and
//! quota domain, `rate_limited` with HTTP 429, retriable) and `src/main/cli/computeService.ts` (the queue wait
//! it reports as `latency.queueMs`).
//!
//! [`Admission`] is the sans-IO core: it takes `now: Instant` and answers with a [`TicketId`] that is either
//! running or queued; [`ComputeAdmission`] is the thin async shell that waits in the queue (bounded in length
//! and time) and hands out a [`ComputePermit`] that frees its slot on drop.
//!
//! What passes through it: requests whose resolved effect is `compute`, except `sessions.runDetached`
//! ([`compute_domain`]). Interactive `awp-host chat` turns and detached runs never do, so no amount of background
//! compute can delay or refuse them. The limits, in the order they are checked (each one a typed
//! `rate_limited` error, [`AdmissionError`]):
//! 1. per-connection concurrency (running + queued) in the domain;
//! 2. Agent concurrency per conversation in the domain (DeepChat's 2);
//! 3. Agent start rate per conversation in the domain (DeepChat's 20 per minute);
//! 4. per-method start rate, all callers together;
//! 5. global concurrency of the domain: over it the request waits in a FIFO queue, itself bounded in length
//!    ([`AdmissionError::QueueFull`]) and wait ([`AdmissionError::QueueTimeout`]).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentwire_local_control::caller::Caller;
use agentwire_local_control::envelope::{ErrorBody, ErrorCode};
use agentwire_local_control::surface::Effect;
use tokio::sync::Notify;

/// The method whose `compute` effect is a detached Agent run: never admitted here (a run is interactive work).
const RUN_DETACHED: &str = "sessions.runDetached";
/// The method whose `compute` effect is an agent's tool call: its own domain.
const TOOLS_CALL: &str = "tools.call";

/// Admission limits. Every field is enforced; `Default` gives the values below.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct AdmissionLimits {
    /// Requests running at once in one domain, all callers together. Default 4. A request past it waits in
    /// the queue.
    pub global_concurrency: usize,
    /// Requests waiting for a global slot in one domain. Default 32. Past it: [`AdmissionError::QueueFull`].
    pub max_queued: usize,
    /// Longest wait in the queue. Default 30 s. Past it: [`AdmissionError::QueueTimeout`].
    pub max_queue_wait: Duration,
    /// Requests running or queued at once from one connection in one domain. Default 2. Past it:
    /// [`AdmissionError::ConnectionBusy`].
    pub per_connection_concurrency: usize,
    /// Starts of one method within [`AdmissionLimits::window`], all callers together. Default 600 (ten a second
    /// on average, room for benchmarks). Past it: [`AdmissionError::MethodRateLimited`].
    pub method_starts_per_window: usize,
    /// Requests running or queued at once for one Agent conversation in one domain. Default 2 (DeepChat
    /// `DEFAULT_AGENT_COMPUTE_LIMIT`). Past it: [`AdmissionError::AgentBusy`].
    pub agent_concurrency: usize,
    /// Starts for one Agent conversation in one domain within [`AdmissionLimits::window`]. Default 20 (DeepChat
    /// `DEFAULT_AGENT_COMPUTE_STARTS_PER_MINUTE`). Past it: [`AdmissionError::AgentRateLimited`].
    pub agent_starts_per_window: usize,
    /// The sliding window of the start rates. Default 60 s (DeepChat `COMPUTE_WINDOW_MS`).
    pub window: Duration,
}

impl Default for AdmissionLimits {
    fn default() -> Self {
        AdmissionLimits {
            global_concurrency: 4,
            max_queued: 32,
            max_queue_wait: Duration::from_secs(30),
            per_connection_concurrency: 2,
            method_starts_per_window: 600,
            agent_concurrency: 2,
            agent_starts_per_window: 20,
            window: Duration::from_secs(60),
        }
    }
}

/// A capacity pool. Agent tool calls and model/media/OCR compute never take each other's slots or start rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ComputeDomain {
    /// Model invocation, image/speech/video generation, transcription and OCR.
    General,
    /// An Agent's tool calls (`tools.call`).
    ToolCall,
}

/// Which domain a request of `method` with resolved `effect` is admitted in; `None` for everything that is not
/// background compute: any effect other than `compute`, and `sessions.runDetached` (a detached Agent run is
/// interactive work and never waits here).
pub fn compute_domain(method: &str, effect: Effect) -> Option<ComputeDomain> {
    match (method, effect) {
        (_, effect) if effect != Effect::Compute => None,
        (RUN_DETACHED, _) => None,
        (TOOLS_CALL, _) => Some(ComputeDomain::ToolCall),
        _ => Some(ComputeDomain::General),
    }
}

/// Who asks for compute.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ComputeRequest {
    /// The public method, e.g. `ocr.extractUpload`.
    pub method: String,
    /// The pool.
    pub domain: ComputeDomain,
    /// The connection the request came on.
    pub connection_id: String,
    /// The Agent caller's conversation, `None` for a human caller.
    pub agent_conversation: Option<String>,
}

impl ComputeRequest {
    /// The request of `caller` for `method` in `domain`.
    pub fn new(method: &str, domain: ComputeDomain, caller: &Caller) -> ComputeRequest {
        let agent_conversation = match caller {
            Caller::Agent(agent) => Some(agent.conversation_id().to_owned()),
            _ => None,
        };
        ComputeRequest {
            method: method.to_owned(),
            domain,
            connection_id: caller.connection_id().unwrap_or_default().to_owned(),
            agent_conversation,
        }
    }
}

/// Why compute was refused. Every variant is the wire code `rate_limited` (HTTP 429, retriable); [`reason`]
/// tells them apart in `details.reason`.
///
/// [`reason`]: AdmissionError::reason
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdmissionError {
    /// The connection already has [`AdmissionLimits::per_connection_concurrency`] requests in the domain.
    #[error("compute capacity of this connection is full")]
    ConnectionBusy,
    /// The Agent conversation already has [`AdmissionLimits::agent_concurrency`] requests in the domain.
    #[error("agent compute capacity is full")]
    AgentBusy,
    /// The Agent conversation started [`AdmissionLimits::agent_starts_per_window`] requests in the window.
    #[error("agent compute start rate exceeded")]
    AgentRateLimited,
    /// The method was started [`AdmissionLimits::method_starts_per_window`] times in the window.
    #[error("start rate of {method} exceeded")]
    MethodRateLimited {
        /// The method.
        method: String,
    },
    /// [`AdmissionLimits::max_queued`] requests already wait for capacity.
    #[error("compute queue is full")]
    QueueFull,
    /// The request waited [`AdmissionLimits::max_queue_wait`] without getting capacity.
    #[error("waited too long for compute capacity")]
    QueueTimeout,
}

impl AdmissionError {
    /// The wire code: always `rate_limited`.
    pub fn code(&self) -> &'static str {
        "rate_limited"
    }

    /// Which limit refused: `connection_busy`, `agent_busy`, `agent_rate_limited`, `method_rate_limited`,
    /// `queue_full` or `queue_timeout`.
    pub fn reason(&self) -> &'static str {
        match self {
            AdmissionError::ConnectionBusy => "connection_busy",
            AdmissionError::AgentBusy => "agent_busy",
            AdmissionError::AgentRateLimited => "agent_rate_limited",
            AdmissionError::MethodRateLimited { .. } => "method_rate_limited",
            AdmissionError::QueueFull => "queue_full",
            AdmissionError::QueueTimeout => "queue_timeout",
        }
    }

    /// The error envelope body: `{"code":"rate_limited","message":…,"retriable":true,"details":{"reason":…}}`.
    pub fn to_error_body(&self) -> ErrorBody {
        let mut details = serde_json::Map::new();
        details.insert("reason".to_owned(), self.reason().into());
        ErrorBody::new(ErrorCode::RateLimited, self.to_string())
            .retriable(true)
            .with_details(details)
    }
}

/// One admitted (running or queued) request of an [`Admission`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TicketId(u64);

/// Where an admitted request stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admitted {
    /// It holds a global slot and may run.
    Running,
    /// It waits for a global slot; ask [`Admission::try_start`] again after a release.
    Queued,
}

#[derive(Debug)]
struct Ticket {
    request: ComputeRequest,
    running: bool,
}

/// The sans-IO core: counters, queues and start windows. No clock, no IO.
#[derive(Debug)]
pub struct Admission {
    limits: AdmissionLimits,
    next_ticket: u64,
    tickets: HashMap<TicketId, Ticket>,
    running: HashMap<ComputeDomain, usize>,
    queues: HashMap<ComputeDomain, VecDeque<TicketId>>,
    connections: HashMap<(ComputeDomain, String), usize>,
    agents: HashMap<(ComputeDomain, String), usize>,
    agent_starts: HashMap<(ComputeDomain, String), VecDeque<Instant>>,
    method_starts: HashMap<String, VecDeque<Instant>>,
    last_prune: Option<Instant>,
}

impl Admission {
    /// An empty admission with `limits`.
    pub fn new(limits: AdmissionLimits) -> Admission {
        Admission {
            limits,
            next_ticket: 0,
            tickets: HashMap::new(),
            running: HashMap::new(),
            queues: HashMap::new(),
            connections: HashMap::new(),
            agents: HashMap::new(),
            agent_starts: HashMap::new(),
            method_starts: HashMap::new(),
            last_prune: None,
        }
    }

    /// The limits.
    pub fn limits(&self) -> &AdmissionLimits {
        &self.limits
    }

    /// Checks `request` against every limit at `now` and, when it passes, counts it (concurrency and starts)
    /// and answers whether it runs at once or waits in the queue.
    ///
    /// # Errors
    /// The first limit that refuses, in the order of the module docs; nothing is counted then.
    pub fn request(
        &mut self,
        request: ComputeRequest,
        now: Instant,
    ) -> Result<(TicketId, Admitted), AdmissionError> {
        self.prune(now);
        let domain = request.domain;
        let limits = &self.limits;
        let connection_key = (domain, request.connection_id.clone());
        if self.connections.get(&connection_key).copied().unwrap_or(0)
            >= limits.per_connection_concurrency
        {
            return Err(AdmissionError::ConnectionBusy);
        }
        let agent_key = request
            .agent_conversation
            .as_ref()
            .map(|conversation| (domain, conversation.clone()));
        if let Some(key) = &agent_key {
            if self.agents.get(key).copied().unwrap_or(0) >= limits.agent_concurrency {
                return Err(AdmissionError::AgentBusy);
            }
            let recent = recent_starts(self.agent_starts.get_mut(key), now, limits.window);
            if recent >= limits.agent_starts_per_window {
                return Err(AdmissionError::AgentRateLimited);
            }
        }
        let recent = recent_starts(
            self.method_starts.get_mut(&request.method),
            now,
            limits.window,
        );
        if recent >= limits.method_starts_per_window {
            return Err(AdmissionError::MethodRateLimited {
                method: request.method.clone(),
            });
        }
        let running = self.running.get(&domain).copied().unwrap_or(0);
        let queue = self.queues.entry(domain).or_default();
        let admitted = if running < limits.global_concurrency && queue.is_empty() {
            Admitted::Running
        } else if queue.len() < limits.max_queued {
            Admitted::Queued
        } else {
            return Err(AdmissionError::QueueFull);
        };
        let id = TicketId(self.next_ticket);
        self.next_ticket = self.next_ticket.wrapping_add(1);
        match admitted {
            Admitted::Running => *self.running.entry(domain).or_default() += 1,
            Admitted::Queued => queue.push_back(id),
        }
        *self.connections.entry(connection_key).or_default() += 1;
        if let Some(key) = agent_key {
            *self.agents.entry(key.clone()).or_default() += 1;
            self.agent_starts.entry(key).or_default().push_back(now);
        }
        self.method_starts
            .entry(request.method.clone())
            .or_default()
            .push_back(now);
        self.tickets.insert(
            id,
            Ticket {
                request,
                running: admitted == Admitted::Running,
            },
        );
        Ok((id, admitted))
    }

    /// Whether `ticket` runs: `true` if it already did or if it is first in its queue and a global slot is free
    /// (it then takes the slot); `false` while it must keep waiting or when the ticket is unknown.
    pub fn try_start(&mut self, ticket: TicketId) -> bool {
        let Some(entry) = self.tickets.get_mut(&ticket) else {
            return false;
        };
        if entry.running {
            return true;
        }
        let domain = entry.request.domain;
        let running = self.running.entry(domain).or_default();
        let queue = self.queues.entry(domain).or_default();
        if *running < self.limits.global_concurrency && queue.front() == Some(&ticket) {
            queue.pop_front();
            *running += 1;
            entry.running = true;
            true
        } else {
            false
        }
    }

    /// Frees `ticket`'s slot (running) or queue place (queued) and its per-connection and Agent counts; its
    /// starts stay counted in their windows. Unknown or already released tickets are ignored.
    pub fn release(&mut self, ticket: TicketId) {
        let Some(entry) = self.tickets.remove(&ticket) else {
            return;
        };
        let request = entry.request;
        let domain = request.domain;
        if entry.running {
            decrement(&mut self.running, &domain);
        } else if let Some(queue) = self.queues.get_mut(&domain) {
            queue.retain(|queued| *queued != ticket);
        }
        decrement(&mut self.connections, &(domain, request.connection_id));
        if let Some(conversation) = request.agent_conversation {
            decrement(&mut self.agents, &(domain, conversation));
        }
    }

    /// Requests running in `domain`.
    pub fn running(&self, domain: ComputeDomain) -> usize {
        self.running.get(&domain).copied().unwrap_or(0)
    }

    /// Requests queued in `domain`.
    pub fn queued(&self, domain: ComputeDomain) -> usize {
        self.queues.get(&domain).map_or(0, VecDeque::len)
    }

    /// Drops start timestamps older than the window, at most once per window (keeps the maps bounded by the
    /// conversations and methods active in the last window).
    fn prune(&mut self, now: Instant) {
        if let Some(last) = self.last_prune
            && now.saturating_duration_since(last) < self.limits.window
        {
            return;
        }
        self.last_prune = Some(now);
        let window = self.limits.window;
        self.agent_starts.retain(|_, starts| {
            recent_starts(Some(starts), now, window);
            !starts.is_empty()
        });
        self.method_starts.retain(|_, starts| {
            recent_starts(Some(starts), now, window);
            !starts.is_empty()
        });
    }
}

/// Drops starts at or before `now - window` and counts the rest.
fn recent_starts(starts: Option<&mut VecDeque<Instant>>, now: Instant, window: Duration) -> usize {
    let Some(starts) = starts else {
        return 0;
    };
    while let Some(first) = starts.front() {
        if now.saturating_duration_since(*first) >= window {
            starts.pop_front();
        } else {
            break;
        }
    }
    starts.len()
}

fn decrement<K: std::hash::Hash + Eq>(counts: &mut HashMap<K, usize>, key: &K) {
    if let Some(count) = counts.get_mut(key) {
        *count = count.saturating_sub(1);
        if *count == 0 {
            counts.remove(key);
        }
    }
}

#[derive(Debug)]
struct Shared {
    core: Mutex<Admission>,
    released: Notify,
}

/// The async shell around [`Admission`]; cheap to clone (a shared handle).
#[derive(Debug, Clone)]
pub struct ComputeAdmission {
    shared: Arc<Shared>,
}

impl ComputeAdmission {
    /// An admission with `limits`.
    pub fn new(limits: AdmissionLimits) -> ComputeAdmission {
        ComputeAdmission {
            shared: Arc::new(Shared {
                core: Mutex::new(Admission::new(limits)),
                released: Notify::new(),
            }),
        }
    }

    /// Admits `request`: at once when a slot is free, else after waiting in the FIFO queue. Dropping the future
    /// while it waits gives the queue place back.
    ///
    /// # Errors
    /// [`AdmissionError`] for the limit that refused, [`AdmissionError::QueueTimeout`] after
    /// [`AdmissionLimits::max_queue_wait`] in the queue.
    pub async fn admit(&self, request: ComputeRequest) -> Result<ComputePermit, AdmissionError> {
        let asked = Instant::now();
        let (ticket, admitted, max_wait) = {
            let mut core = super::lock(&self.shared.core);
            let max_wait = core.limits.max_queue_wait;
            let (ticket, admitted) = core.request(request, asked)?;
            (ticket, admitted, max_wait)
        };
        // From here on the ticket is freed on every path (drop of the permit or of this guard).
        let mut permit = ComputePermit {
            shared: Arc::clone(&self.shared),
            ticket,
            accepted: asked,
            queue_wait: Duration::ZERO,
        };
        if admitted == Admitted::Queued {
            let waited = tokio::time::timeout(max_wait, self.wait_for_slot(ticket)).await;
            if waited.is_err() {
                return Err(AdmissionError::QueueTimeout);
            }
            permit.queue_wait = asked.elapsed();
        }
        Ok(permit)
    }

    async fn wait_for_slot(&self, ticket: TicketId) {
        loop {
            let released = self.shared.released.notified();
            tokio::pin!(released);
            released.as_mut().enable();
            if super::lock(&self.shared.core).try_start(ticket) {
                return;
            }
            released.await;
        }
    }

    /// Requests running in `domain` now.
    pub fn running(&self, domain: ComputeDomain) -> usize {
        super::lock(&self.shared.core).running(domain)
    }

    /// Requests queued in `domain` now.
    pub fn queued(&self, domain: ComputeDomain) -> usize {
        super::lock(&self.shared.core).queued(domain)
    }
}

/// Capacity held by one request; dropping it frees the slot and wakes the queue.
#[derive(Debug)]
pub struct ComputePermit {
    shared: Arc<Shared>,
    ticket: TicketId,
    accepted: Instant,
    queue_wait: Duration,
}

impl ComputePermit {
    /// How long the request waited in the queue (zero when it ran at once).
    pub fn queue_wait(&self) -> Duration {
        self.queue_wait
    }

    /// When admission was asked for: the moment the host accepted the request, from which every request-relative
    /// latency counts (so those latencies include [`ComputePermit::queue_wait`]).
    pub fn accepted_at(&self) -> Instant {
        self.accepted
    }

    /// [`ComputePermit::queue_wait`] in whole milliseconds, as DeepChat's `latency.queueMs`.
    pub fn queue_ms(&self) -> u64 {
        u64::try_from(self.queue_wait.as_millis()).unwrap_or(u64::MAX)
    }
}

impl Drop for ComputePermit {
    fn drop(&mut self) {
        super::lock(&self.shared.core).release(self.ticket);
        self.shared.released.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> AdmissionLimits {
        AdmissionLimits {
            global_concurrency: 2,
            max_queued: 2,
            max_queue_wait: Duration::from_secs(5),
            per_connection_concurrency: 3,
            method_starts_per_window: 100,
            agent_concurrency: 2,
            agent_starts_per_window: 20,
            window: Duration::from_secs(60),
        }
    }

    fn human(connection: &str) -> ComputeRequest {
        ComputeRequest {
            method: "ocr.extractUpload".to_owned(),
            domain: ComputeDomain::General,
            connection_id: connection.to_owned(),
            agent_conversation: None,
        }
    }

    fn agent(connection: &str, conversation: &str, domain: ComputeDomain) -> ComputeRequest {
        ComputeRequest {
            method: "ocr.extractArtifact".to_owned(),
            domain,
            connection_id: connection.to_owned(),
            agent_conversation: Some(conversation.to_owned()),
        }
    }

    #[test]
    fn only_background_compute_is_admitted() {
        assert_eq!(
            compute_domain("models.invoke", Effect::Compute),
            Some(ComputeDomain::General)
        );
        assert_eq!(
            compute_domain("ocr.extractUpload", Effect::Compute),
            Some(ComputeDomain::General)
        );
        assert_eq!(
            compute_domain("tools.call", Effect::Compute),
            Some(ComputeDomain::ToolCall)
        );
        assert_eq!(
            compute_domain("sessions.runDetached", Effect::Compute),
            None
        );
        assert_eq!(compute_domain("ocr.getRuntimeStatus", Effect::Read), None);
        assert_eq!(
            compute_domain("ocr.clearCache", Effect::LocalMaintenance),
            None
        );
        assert_eq!(compute_domain("tools.call", Effect::Destructive), None);
    }

    #[test]
    fn global_concurrency_queues_at_the_limit_and_refuses_past_the_queue() {
        let mut core = Admission::new(limits());
        let now = Instant::now();
        let (a, first) = core.request(human("c1"), now).unwrap();
        let (_, second) = core.request(human("c2"), now).unwrap();
        assert_eq!((first, second), (Admitted::Running, Admitted::Running));
        // One past the global limit waits; the queue holds exactly max_queued.
        let (q1, third) = core.request(human("c3"), now).unwrap();
        let (q2, fourth) = core.request(human("c4"), now).unwrap();
        assert_eq!((third, fourth), (Admitted::Queued, Admitted::Queued));
        assert_eq!(
            core.request(human("c5"), now),
            Err(AdmissionError::QueueFull)
        );
        assert_eq!(
            (
                core.running(ComputeDomain::General),
                core.queued(ComputeDomain::General)
            ),
            (2, 2)
        );
        // FIFO: the second in line cannot jump the first.
        assert!(!core.try_start(q2));
        assert!(!core.try_start(q1));
        core.release(a);
        assert!(!core.try_start(q2));
        assert!(core.try_start(q1));
        assert!(core.try_start(q1), "a started ticket stays started");
        assert_eq!(core.queued(ComputeDomain::General), 1);
        // A queued ticket that gives up frees its place.
        core.release(q2);
        assert_eq!(core.queued(ComputeDomain::General), 0);
        assert!(core.request(human("c6"), now).is_ok());
    }

    #[test]
    fn per_connection_concurrency_counts_running_and_queued() {
        let mut core = Admission::new(AdmissionLimits {
            per_connection_concurrency: 2,
            global_concurrency: 1,
            max_queued: 8,
            ..limits()
        });
        let now = Instant::now();
        let (a, _) = core.request(human("c1"), now).unwrap();
        let (_, queued) = core.request(human("c1"), now).unwrap();
        assert_eq!(queued, Admitted::Queued);
        let refused = core.request(human("c1"), now).unwrap_err();
        assert_eq!(refused, AdmissionError::ConnectionBusy);
        assert_eq!(
            (refused.code(), refused.reason()),
            ("rate_limited", "connection_busy")
        );
        // Another connection is not affected; a release gives the connection its slot back.
        assert!(core.request(human("c2"), now).is_ok());
        core.release(a);
        assert!(core.request(human("c1"), now).is_ok());
    }

    #[test]
    fn method_start_rate_at_the_limit_and_one_past_it() {
        let mut core = Admission::new(AdmissionLimits {
            method_starts_per_window: 3,
            ..limits()
        });
        let start = Instant::now();
        for i in 0..3 {
            let (ticket, _) = core.request(human(&format!("c{i}")), start).unwrap();
            core.release(ticket);
        }
        assert_eq!(
            core.request(human("c9"), start + Duration::from_secs(59)),
            Err(AdmissionError::MethodRateLimited {
                method: "ocr.extractUpload".to_owned()
            })
        );
        // Another method has its own window.
        let mut other = human("c9");
        other.method = "models.invoke".to_owned();
        assert!(core.request(other, start).is_ok());
        // Once the window has passed the starts no longer count.
        assert!(
            core.request(human("c9"), start + Duration::from_secs(60))
                .is_ok()
        );
    }

    #[test]
    fn agent_concurrency_at_the_limit_and_one_past_it() {
        let mut core = Admission::new(AdmissionLimits {
            global_concurrency: 10,
            per_connection_concurrency: 10,
            ..limits()
        });
        let now = Instant::now();
        let (a, _) = core
            .request(agent("c1", "t1", ComputeDomain::General), now)
            .unwrap();
        core.request(agent("c2", "t1", ComputeDomain::General), now)
            .unwrap();
        assert_eq!(
            core.request(agent("c3", "t1", ComputeDomain::General), now),
            Err(AdmissionError::AgentBusy)
        );
        // Another conversation, and the same conversation's tool calls, have their own capacity.
        assert!(
            core.request(agent("c4", "t2", ComputeDomain::General), now)
                .is_ok()
        );
        assert!(
            core.request(agent("c5", "t1", ComputeDomain::ToolCall), now)
                .is_ok()
        );
        assert!(
            core.request(agent("c6", "t1", ComputeDomain::ToolCall), now)
                .is_ok()
        );
        assert_eq!(
            core.request(agent("c7", "t1", ComputeDomain::ToolCall), now),
            Err(AdmissionError::AgentBusy)
        );
        core.release(a);
        assert!(
            core.request(agent("c3", "t1", ComputeDomain::General), now)
                .is_ok()
        );
    }

    #[test]
    fn agent_start_rate_at_the_limit_and_one_past_it() {
        let mut core = Admission::new(AdmissionLimits {
            global_concurrency: 100,
            per_connection_concurrency: 100,
            ..limits()
        });
        let start = Instant::now();
        for i in 0..20u64 {
            let at = start + Duration::from_secs(i);
            let (ticket, _) = core
                .request(agent("c1", "t1", ComputeDomain::General), at)
                .unwrap();
            core.release(ticket);
        }
        let late = start + Duration::from_secs(59);
        let refused = core
            .request(agent("c1", "t1", ComputeDomain::General), late)
            .unwrap_err();
        assert_eq!(refused, AdmissionError::AgentRateLimited);
        // Tool calls are a separate start-rate domain, humans are not Agent-limited.
        assert!(
            core.request(agent("c1", "t1", ComputeDomain::ToolCall), late)
                .is_ok()
        );
        assert!(core.request(human("c1"), late).is_ok());
        // The first start leaves the window after 60 s: exactly one more start fits.
        let later = start + Duration::from_secs(60);
        assert!(
            core.request(agent("c2", "t1", ComputeDomain::General), later)
                .is_ok()
        );
        assert_eq!(
            core.request(agent("c3", "t1", ComputeDomain::General), later),
            Err(AdmissionError::AgentRateLimited)
        );
    }

    #[test]
    fn a_refusal_counts_nothing() {
        let mut core = Admission::new(AdmissionLimits {
            agent_concurrency: 1,
            ..limits()
        });
        let now = Instant::now();
        let (a, _) = core
            .request(agent("c1", "t1", ComputeDomain::General), now)
            .unwrap();
        for _ in 0..50 {
            assert!(
                core.request(agent("c1", "t1", ComputeDomain::General), now)
                    .is_err()
            );
        }
        core.release(a);
        core.release(a);
        assert_eq!(core.running(ComputeDomain::General), 0);
        assert!(
            core.request(agent("c1", "t1", ComputeDomain::General), now)
                .is_ok()
        );
    }

    #[test]
    fn error_body_is_rate_limited_and_retriable() {
        let body = AdmissionError::QueueTimeout.to_error_body();
        assert_eq!(body.code, ErrorCode::RateLimited);
        assert!(body.retriable);
        assert_eq!(
            body.details.and_then(|d| d.get("reason").cloned()),
            Some(serde_json::json!("queue_timeout"))
        );
    }

    /// One step of a random scenario: request (connection, conversation or human, domain, seconds later), start
    /// the oldest queued ticket, or release the n-th live ticket.
    #[derive(Debug, Clone)]
    enum Step {
        Request(u8, Option<u8>, bool, u8),
        TryStart(u8),
        Release(u8),
    }

    fn step() -> impl proptest::strategy::Strategy<Value = Step> {
        use proptest::prelude::*;
        prop_oneof![
            (0u8..4, proptest::option::of(0u8..3), any::<bool>(), 0u8..30)
                .prop_map(|(c, a, tool, dt)| Step::Request(c, a, tool, dt)),
            (0u8..8).prop_map(Step::TryStart),
            (0u8..8).prop_map(Step::Release),
        ]
    }

    proptest::proptest! {
        /// Random request/start/release sequences keep every bound, and releasing everything leaves nothing
        /// counted.
        #[test]
        fn random_sequences_keep_the_bounds(steps in proptest::collection::vec(step(), 0..80)) {
            let limits = limits();
            let mut core = Admission::new(limits.clone());
            let mut now = Instant::now();
            let mut live: Vec<(TicketId, ComputeRequest)> = Vec::new();
            for step in steps {
                match step {
                    Step::Request(connection, conversation, tool, later) => {
                        now += Duration::from_secs(u64::from(later));
                        let domain = if tool { ComputeDomain::ToolCall } else { ComputeDomain::General };
                        let request = match conversation {
                            Some(t) => agent(&format!("c{connection}"), &format!("t{t}"), domain),
                            None => {
                                let mut request = human(&format!("c{connection}"));
                                request.domain = domain;
                                request
                            }
                        };
                        if let Ok((ticket, _)) = core.request(request.clone(), now) {
                            live.push((ticket, request));
                        }
                    }
                    Step::TryStart(n) => {
                        if let Some((ticket, _)) = live.get(usize::from(n) % live.len().max(1)) {
                            core.try_start(*ticket);
                        }
                    }
                    Step::Release(n) => {
                        if !live.is_empty() {
                            let (ticket, _) = live.remove(usize::from(n) % live.len());
                            core.release(ticket);
                        }
                    }
                }
                for domain in [ComputeDomain::General, ComputeDomain::ToolCall] {
                    proptest::prop_assert!(core.running(domain) <= limits.global_concurrency);
                    proptest::prop_assert!(core.queued(domain) <= limits.max_queued);
                    let held = live.iter().filter(|(_, r)| r.domain == domain).count();
                    proptest::prop_assert_eq!(core.running(domain) + core.queued(domain), held);
                    for connection in 0..4 {
                        let id = format!("c{connection}");
                        let n = live.iter().filter(|(_, r)| r.domain == domain && r.connection_id == id).count();
                        proptest::prop_assert!(n <= limits.per_connection_concurrency);
                    }
                    for conversation in 0..3 {
                        let id = Some(format!("t{conversation}"));
                        let n = live.iter().filter(|(_, r)| r.domain == domain && r.agent_conversation == id).count();
                        proptest::prop_assert!(n <= limits.agent_concurrency);
                    }
                }
            }
            for (ticket, _) in live.drain(..) {
                core.release(ticket);
            }
            proptest::prop_assert!(core.connections.is_empty() && core.agents.is_empty());
            proptest::prop_assert_eq!(core.running(ComputeDomain::General) + core.queued(ComputeDomain::General), 0);
        }
    }

    #[tokio::test]
    async fn a_queued_request_starts_when_a_slot_frees_and_reports_its_wait() {
        let admission = ComputeAdmission::new(AdmissionLimits {
            global_concurrency: 1,
            ..limits()
        });
        let first = admission.admit(human("c1")).await.unwrap();
        assert_eq!(first.queue_ms(), 0);
        let waiting = tokio::spawn({
            let admission = admission.clone();
            async move { admission.admit(human("c2")).await }
        });
        // Wait until the second request is in the queue (no sleeps: yield until the count says so).
        while admission.queued(ComputeDomain::General) == 0 {
            tokio::task::yield_now().await;
        }
        drop(first);
        let second = waiting.await.unwrap().unwrap();
        assert_eq!(admission.running(ComputeDomain::General), 1);
        assert!(second.queue_wait() <= Duration::from_secs(5));
        drop(second);
        assert_eq!(admission.running(ComputeDomain::General), 0);
    }

    #[tokio::test]
    async fn the_queue_wait_is_bounded_and_a_timed_out_request_leaves_the_queue() {
        let admission = ComputeAdmission::new(AdmissionLimits {
            global_concurrency: 1,
            max_queue_wait: Duration::from_millis(20),
            ..limits()
        });
        let _held = admission.admit(human("c1")).await.unwrap();
        let refused = admission.admit(human("c2")).await.unwrap_err();
        assert_eq!(refused, AdmissionError::QueueTimeout);
        assert_eq!(admission.queued(ComputeDomain::General), 0);
    }

    #[tokio::test]
    async fn dropping_a_waiting_request_gives_its_place_back() {
        let admission = ComputeAdmission::new(AdmissionLimits {
            global_concurrency: 1,
            ..limits()
        });
        let held = admission.admit(human("c1")).await.unwrap();
        let waiting = tokio::spawn({
            let admission = admission.clone();
            async move { admission.admit(human("c2")).await }
        });
        while admission.queued(ComputeDomain::General) == 0 {
            tokio::task::yield_now().await;
        }
        waiting.abort();
        let _ = waiting.await;
        assert_eq!(admission.queued(ComputeDomain::General), 0);
        drop(held);
        assert_eq!(admission.running(ComputeDomain::General), 0);
    }
}
