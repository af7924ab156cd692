//! The tokio shell: [`Approvals`] holds the [`ApprovalBroker`] in a mutex, reads the clock, wakes waiters at
//! their expiry and fans events out to attached [`Renderer`]s. No approval decision is made here.
//!
//! The clock is tokio's (`tokio::time::Instant::now()`), so tests on a paused runtime run on virtual time.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use tokio::sync::{Notify, broadcast, oneshot};

use crate::broker::{ApprovalBroker, Limits};
use crate::error::ApprovalError;
use crate::types::{
    ApprovalEvent, ApprovalId, ApprovalMatch, ApprovalSnapshot, ApprovalStatus, Consumption,
    Decision, DenyReason, Domain, NewApproval, Resolution,
};

/// How many events a [`Renderer`] may fall behind before it gets [`RendererEvent::Lagged`]: 256.
pub const RENDERER_EVENT_BUFFER: usize = 256;

/// A cloneable handle on one shared [`ApprovalBroker`] (the host holds one; adapters and renderers clone it).
///
/// It has no `resolve`: only a [`Renderer`] (from [`Approvals::attach_renderer`]) resolves. The host attaches one
/// for its approval UI and gives the CLI side only the guard and [`Approvals::pending`], so nothing reachable from
/// the local control socket can approve (DESIGN.md invariant 8).
#[derive(Clone)]
pub struct Approvals {
    shared: Arc<Shared>,
}

struct Shared {
    state: Mutex<State>,
    events: broadcast::Sender<ApprovalEvent>,
    /// Woken when an approval is created (its expiry may be the new earliest one).
    created: Notify,
}

struct State {
    broker: ApprovalBroker,
    waiters: HashMap<ApprovalId, Waiter>,
    renderers: usize,
    next_waiter: u64,
}

struct Waiter {
    token: u64,
    sender: oneshot::Sender<Decision>,
}

/// A registered wait: resolved by the event drain, or woken at the approval's expiry.
pub(crate) struct Registration {
    id: ApprovalId,
    token: u64,
    deadline: Instant,
    receiver: Option<oneshot::Receiver<Decision>>,
    ready: Option<Decision>,
}

impl Approvals {
    /// A new broker enforcing `limits`, with no renderer attached.
    pub fn new(limits: Limits) -> Self {
        let (events, _) = broadcast::channel(RENDERER_EVENT_BUFFER);
        Self {
            shared: Arc::new(Shared {
                state: Mutex::new(State {
                    broker: ApprovalBroker::new(limits),
                    waiters: HashMap::new(),
                    renderers: 0,
                    next_waiter: 0,
                }),
                events,
                created: Notify::new(),
            }),
        }
    }

    /// Creates an approval ([`ApprovalBroker::create`] at the current time) and tells the renderers.
    ///
    /// # Errors
    /// As [`ApprovalBroker::create`].
    pub fn create(&self, request: NewApproval<'_>) -> Result<ApprovalSnapshot, ApprovalError> {
        let mut state = self.lock();
        let now = now();
        let result = state.broker.create(request, now);
        self.drain(&mut state, now);
        drop(state);
        self.shared.created.notify_waiters();
        result
    }

    /// Waits for the decision on approval `id`; at most one waiter per approval.
    ///
    /// A [`Consumption::Waiter`] approval is spent by this wait when approved (so `Approved` resumes exactly one
    /// continuation); a [`Consumption::Match`] one is reported without being spent. Resolves to
    /// [`Decision::Expired`] at the approval's expiry without anybody else driving time. Dropping the future
    /// unregisters the waiter and leaves the approval as it is (the [`CliMutationGuard`](crate::CliMutationGuard)
    /// denies its approval when its own future is dropped).
    ///
    /// # Errors
    /// [`ApprovalError::NotFound`] if `id` is not live (already decided and removed, or never created),
    /// [`ApprovalError::AlreadyWaiting`] if another wait is registered.
    pub async fn wait(&self, id: ApprovalId) -> Result<Decision, ApprovalError> {
        let registration = self.register(id)?;
        Ok(self.await_registration(registration).await)
    }

    /// Spends an approved [`Consumption::Match`] approval with this binding ([`ApprovalBroker::consume_approved`]).
    pub fn consume_approved(&self, spend: &ApprovalMatch<'_>) -> bool {
        let mut state = self.lock();
        let now = now();
        let consumed = state.broker.consume_approved(spend, now);
        self.drain(&mut state, now);
        consumed
    }

    /// Denies the live approval `id` in `scope` ([`ApprovalBroker::cancel`]).
    ///
    /// # Errors
    /// [`ApprovalError::NotFound`].
    pub fn cancel(
        &self,
        id: ApprovalId,
        scope: &str,
        reason: DenyReason,
    ) -> Result<(), ApprovalError> {
        let mut state = self.lock();
        let result = state.broker.cancel(id, scope, reason);
        self.drain(&mut state, now());
        result
    }

    /// Denies every live approval in `scope` ([`ApprovalBroker::cancel_scope`]); their waiters get the decision.
    pub fn cancel_scope(&self, scope: &str, reason: DenyReason) {
        let mut state = self.lock();
        state.broker.cancel_scope(scope, reason);
        self.drain(&mut state, now());
    }

    /// Removes every approval, deciding pending ones [`Decision::Cancelled`] (shutdown).
    pub fn clear(&self) {
        let mut state = self.lock();
        state.broker.clear();
        self.drain(&mut state, now());
    }

    /// Expires what is due now. Waits do this themselves at their own expiry; a host may also run it at
    /// [`Approvals::next_expiry`] so that unwaited approvals are reported expired promptly.
    pub fn handle_timeout(&self) {
        let mut state = self.lock();
        let now = now();
        state.broker.handle_timeout(now);
        self.drain(&mut state, now);
    }

    /// Expires every approval at its expiry, so renderers see `Decided{Expired}` for approvals nobody waits on.
    /// Runs until dropped (spawn it once per host and abort it at shutdown); it only sleeps between expiries.
    pub async fn run_expiry(&self) {
        loop {
            let mut created = std::pin::pin!(self.shared.created.notified());
            // Registered before reading the next expiry, so a create in between is not missed.
            created.as_mut().enable();
            match self.next_expiry() {
                Some(due) => {
                    let due_at = tokio::time::Instant::from_std(due);
                    if tokio::time::timeout_at(due_at, created.as_mut())
                        .await
                        .is_err()
                    {
                        let mut state = self.lock();
                        // The timer fired for `due`: time is at least that.
                        let now = now().max(due);
                        state.broker.handle_timeout(now);
                        self.drain(&mut state, now);
                    }
                }
                None => created.await,
            }
        }
    }

    /// The earliest expiry of a live approval ([`ApprovalBroker::poll_timeout`]).
    pub fn next_expiry(&self) -> Option<Instant> {
        self.lock().broker.poll_timeout()
    }

    /// Live, unexpired approvals, oldest first: what `approvals.pending`-style status calls show.
    pub fn pending(&self) -> Vec<ApprovalSnapshot> {
        self.lock().broker.pending(now())
    }

    /// How many [`Renderer`]s are attached.
    pub fn renderer_count(&self) -> usize {
        self.lock().renderers
    }

    /// Attaches a renderer: it receives every event from now on and may resolve. While at least one renderer is
    /// attached, CLI mutations can wait for approval; when the last one detaches (drops), pending
    /// [`Domain::CliMutation`] approvals are denied [`DenyReason::NoRenderer`].
    pub fn attach_renderer(&self) -> Renderer {
        let mut state = self.lock();
        state.renderers += 1;
        // Subscribing under the lock: nothing is emitted between this and the caller's first `pending()`.
        let events = self.shared.events.subscribe();
        drop(state);
        Renderer {
            approvals: self.clone(),
            events,
        }
    }

    /// Creates a [`Consumption::Waiter`] approval and registers its one waiter atomically, refusing with
    /// `Ok(None)` when no renderer is attached (checked under the same lock, so no renderer can leave between
    /// the check and the creation unnoticed).
    pub(crate) fn create_waiting_with_renderer(
        &self,
        request: NewApproval<'_>,
    ) -> Result<Option<(ApprovalSnapshot, Registration)>, ApprovalError> {
        let mut state = self.lock();
        if state.renderers == 0 {
            return Ok(None);
        }
        let now = now();
        let created = state
            .broker
            .create(request.consumption(Consumption::Waiter), now);
        let result = created.map(|snapshot| {
            let registration = Self::register_locked(&mut state, &snapshot);
            Some((snapshot, registration))
        });
        self.drain(&mut state, now);
        drop(state);
        self.shared.created.notify_waiters();
        result
    }

    fn register(&self, id: ApprovalId) -> Result<Registration, ApprovalError> {
        let mut state = self.lock();
        let now = now();
        state.broker.handle_timeout(now);
        self.drain(&mut state, now);
        let snapshot = state.broker.get(id).ok_or(ApprovalError::NotFound)?;
        if state.waiters.contains_key(&id) {
            return Err(ApprovalError::AlreadyWaiting);
        }
        if snapshot.status == ApprovalStatus::Approved {
            // Approved before anyone waited: spend it now (waiter approvals) or report it (match approvals).
            if snapshot.consumption == Consumption::Waiter && !state.broker.take_approved(id, now) {
                self.drain(&mut state, now);
                return Err(ApprovalError::NotFound);
            }
            self.drain(&mut state, now);
            return Ok(Registration {
                id,
                token: u64::MAX,
                deadline: snapshot.expires_at,
                receiver: None,
                ready: Some(Decision::Approved),
            });
        }
        Ok(Self::register_locked(&mut state, &snapshot))
    }

    fn register_locked(state: &mut State, snapshot: &ApprovalSnapshot) -> Registration {
        let (sender, receiver) = oneshot::channel();
        let token = state.next_waiter;
        state.next_waiter = state.next_waiter.wrapping_add(1);
        state.waiters.insert(snapshot.id, Waiter { token, sender });
        Registration {
            id: snapshot.id,
            token,
            deadline: snapshot.expires_at,
            receiver: Some(receiver),
            ready: None,
        }
    }

    pub(crate) async fn await_registration(&self, mut registration: Registration) -> Decision {
        if let Some(decision) = registration.ready {
            return decision;
        }
        let Some(mut receiver) = registration.receiver.take() else {
            return Decision::Cancelled;
        };
        let _unregister = Unregister {
            approvals: self,
            id: registration.id,
            token: registration.token,
        };
        let deadline = tokio::time::Instant::from_std(registration.deadline);
        if let Ok(decision) = tokio::time::timeout_at(deadline, &mut receiver).await {
            // The sender lives in the shared state until it delivers, and the drain always sends before dropping
            // it; a closed channel is reported as cancellation rather than hanging.
            return decision.unwrap_or(Decision::Cancelled);
        }
        let mut state = self.lock();
        // The timer fired for `deadline`: time is at least that, whatever rounding the clocks did.
        let now = now().max(registration.deadline);
        state.broker.handle_timeout(now);
        self.drain(&mut state, now);
        let still_registered = state
            .waiters
            .get(&registration.id)
            .is_some_and(|waiter| waiter.token == registration.token);
        if still_registered {
            // Cannot happen (the approval expired at `deadline`), but a wait must end at its expiry.
            state.waiters.remove(&registration.id);
            return Decision::Expired;
        }
        // The drain above delivered the decision (or an earlier one did).
        receiver.try_recv().unwrap_or(Decision::Expired)
    }

    /// Delivers queued broker events: decisions to their waiter (spending waiter approvals), everything to the
    /// renderers. Runs until the broker's queue is empty (spending queues a `Removed`).
    fn drain(&self, state: &mut State, now: Instant) {
        while let Some(event) = state.broker.poll_event() {
            match &event {
                ApprovalEvent::Decided { id, decision, .. } => {
                    if let Some(waiter) = state.waiters.remove(id) {
                        let delivered = if *decision == Decision::Approved {
                            let waiter_spends = state.broker.get(*id).is_some_and(|snapshot| {
                                snapshot.consumption == Consumption::Waiter
                            });
                            if !waiter_spends || state.broker.take_approved(*id, now) {
                                Decision::Approved
                            } else {
                                Decision::Expired
                            }
                        } else {
                            *decision
                        };
                        let _ = waiter.sender.send(delivered);
                    }
                }
                ApprovalEvent::Removed { id, .. } => {
                    // Unreachable in practice (every removal of a waited approval is decided first); a waiter
                    // must never hang, so it learns of the removal.
                    if let Some(waiter) = state.waiters.remove(id) {
                        let _ = waiter.sender.send(Decision::Cancelled);
                    }
                }
                _ => {}
            }
            // No receivers is fine: nobody is watching.
            let _ = self.shared.events.send(event);
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // The state stays consistent even if a holder panicked: every mutation is a single broker call.
        self.shared
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn renderer_detached(&self) {
        let mut state = self.lock();
        state.renderers = state.renderers.saturating_sub(1);
        if state.renderers == 0 {
            state
                .broker
                .cancel_domain(Domain::CliMutation, DenyReason::NoRenderer);
            self.drain(&mut state, now());
        }
    }
}

impl fmt::Debug for Approvals {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.lock();
        f.debug_struct("Approvals")
            .field("live", &state.broker.len())
            .field("waiters", &state.waiters.len())
            .field("renderers", &state.renderers)
            .finish()
    }
}

/// Removes a wait's registration when the wait ends or is dropped (only its own: the token must match).
struct Unregister<'a> {
    approvals: &'a Approvals,
    id: ApprovalId,
    token: u64,
}

impl Drop for Unregister<'_> {
    fn drop(&mut self) {
        let mut state = self.approvals.lock();
        if state
            .waiters
            .get(&self.id)
            .is_some_and(|waiter| waiter.token == self.token)
        {
            state.waiters.remove(&self.id);
        }
    }
}

fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// What a [`Renderer`] receives.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq)]
pub enum RendererEvent {
    /// The next broker event.
    Approval(ApprovalEvent),
    /// The renderer fell more than [`RENDERER_EVENT_BUFFER`] events behind and missed `missed` of them; it should
    /// re-read [`Renderer::pending`] and continue.
    Lagged {
        /// How many events were skipped.
        missed: u64,
    },
}

/// An attached approval UI: the only thing that resolves approvals (DeepChat: the trusted renderer behind the
/// `approvals.resolve` IPC route, never the CLI socket).
///
/// Dropping it detaches it; see [`Approvals::attach_renderer`].
pub struct Renderer {
    approvals: Approvals,
    events: broadcast::Receiver<ApprovalEvent>,
}

impl Renderer {
    /// The next event, waiting for one. `None` never happens while the renderer exists (it holds the sender's
    /// owner alive); it is there for completeness.
    pub async fn next_event(&mut self) -> Option<RendererEvent> {
        match self.events.recv().await {
            Ok(event) => Some(RendererEvent::Approval(event)),
            Err(broadcast::error::RecvError::Lagged(missed)) => {
                Some(RendererEvent::Lagged { missed })
            }
            Err(broadcast::error::RecvError::Closed) => None,
        }
    }

    /// The next event if one is queued, without waiting.
    pub fn try_next_event(&mut self) -> Option<RendererEvent> {
        match self.events.try_recv() {
            Ok(event) => Some(RendererEvent::Approval(event)),
            Err(broadcast::error::TryRecvError::Lagged(missed)) => {
                Some(RendererEvent::Lagged { missed })
            }
            Err(_) => None,
        }
    }

    /// Live, unexpired approvals, oldest first.
    pub fn pending(&self) -> Vec<ApprovalSnapshot> {
        self.approvals.pending()
    }

    /// Answers approval `id` in `scope` ([`ApprovalBroker::resolve`] at the current time); its waiter, if any,
    /// resumes.
    ///
    /// # Errors
    /// As [`ApprovalBroker::resolve`]: `not_found`, `approval_timeout`, `conflict`.
    pub fn resolve(
        &self,
        id: ApprovalId,
        scope: &str,
        resolution: Resolution,
    ) -> Result<(), ApprovalError> {
        let mut state = self.approvals.lock();
        let now = now();
        let result = state.broker.resolve(id, scope, resolution, now);
        self.approvals.drain(&mut state, now);
        result
    }
}

impl Drop for Renderer {
    fn drop(&mut self) {
        self.approvals.renderer_detached();
    }
}

impl fmt::Debug for Renderer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Renderer").finish_non_exhaustive()
    }
}
