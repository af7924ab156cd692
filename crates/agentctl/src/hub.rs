//! The `/acp/stream` subscriber set: one bounded queue per subscriber; broadcasting never waits.
//!
//! A subscriber whose queue is full (by messages or by bytes) is dropped at once with a close reason, so a slow
//! WebSocket client can never block the agent's reader.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use axum::extract::ws::Utf8Bytes;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// WebSocket close code 1000 (normal closure, RFC 6455 §7.4.1).
pub const CLOSE_NORMAL: u16 = 1000;
/// WebSocket close code 1001 (going away).
pub const CLOSE_GOING_AWAY: u16 = 1001;
/// WebSocket close code 1008 (policy violation): the subscriber fell behind.
pub const CLOSE_POLICY: u16 = 1008;

/// The hub's bounds, built from the configuration by `Config::hub_limits` (no `Default` here: the defaults are
/// the parsed configuration's, tested there).
///
/// A message fanned out to many subscribers is one shared buffer (`Bytes`); each subscriber's byte bound counts
/// what that subscriber pins, while memory holds the message once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HubLimits {
    /// Messages queued per subscriber (`AGENTCTL_SUBSCRIBER_QUEUE`, default 4096); one more drops the subscriber
    /// with close code 1008.
    pub queue_messages: usize,
    /// Bytes queued per subscriber (`AGENTCTL_SUBSCRIBER_QUEUE_BYTES`, default 256 MiB); a message that would go
    /// past it drops the subscriber, unless the queue is empty (one message of any size may always wait).
    pub queue_bytes: usize,
    /// Subscribers at once (`AGENTCTL_MAX_SUBSCRIBERS`, default 64); one more is refused (HTTP 503).
    pub max_subscribers: usize,
}

/// Why and how a subscriber's socket is to be closed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CloseReason {
    /// WebSocket close code.
    pub code: u16,
    /// Human-readable reason (at most 123 bytes on the wire).
    pub reason: String,
}

/// State shared between the hub and one subscriber's socket task.
#[derive(Debug, Default)]
struct Shared {
    queued_bytes: AtomicUsize,
    close: Mutex<Option<CloseReason>>,
    /// Cancelled when the subscriber must stop at once, discarding its queue (it fell behind).
    abort: CancellationToken,
}

#[derive(Debug)]
struct Subscriber {
    id: u64,
    tx: mpsc::Sender<Utf8Bytes>,
    shared: Arc<Shared>,
}

/// The receiving end of one subscriber, owned by its socket task.
#[derive(Debug)]
pub struct SubscriberRx {
    /// The subscriber's id in the hub.
    pub id: u64,
    rx: mpsc::Receiver<Utf8Bytes>,
    shared: Arc<Shared>,
}

impl SubscriberRx {
    /// The next queued message; `None` once the hub closed this subscriber and the queue is drained (then see
    /// [`SubscriberRx::close_reason`]).
    pub async fn recv(&mut self) -> Option<Utf8Bytes> {
        let message = self.rx.recv().await?;
        self.shared
            .queued_bytes
            .fetch_sub(message.len(), Ordering::Relaxed);
        Some(message)
    }

    /// The next queued message if one is ready now (for batching writes).
    pub fn try_recv(&mut self) -> Option<Utf8Bytes> {
        let message = self.rx.try_recv().ok()?;
        self.shared
            .queued_bytes
            .fetch_sub(message.len(), Ordering::Relaxed);
        Some(message)
    }

    /// Cancelled when the subscriber must stop without draining its queue (it fell behind).
    pub fn abort_token(&self) -> CancellationToken {
        self.shared.abort.clone()
    }

    /// Why the hub closed this subscriber, if it did.
    pub fn close_reason(&self) -> Option<CloseReason> {
        self.shared
            .close
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// The subscriber set.
#[derive(Debug)]
pub struct Hub {
    limits: HubLimits,
    next_id: u64,
    subscribers: Vec<Subscriber>,
    dropped_slow: u64,
}

/// Refused: [`HubLimits::max_subscribers`] are connected.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("too many subscribers (limit {limit})")]
pub struct TooManySubscribers {
    /// The limit.
    pub limit: usize,
}

impl Hub {
    /// An empty hub.
    pub fn new(limits: HubLimits) -> Self {
        Self {
            limits,
            next_id: 1,
            subscribers: Vec::new(),
            dropped_slow: 0,
        }
    }

    /// Subscribers connected.
    pub fn len(&self) -> usize {
        self.subscribers.len()
    }

    /// Whether nobody is connected.
    pub fn is_empty(&self) -> bool {
        self.subscribers.is_empty()
    }

    /// Subscribers dropped so far for falling behind.
    pub fn dropped_slow(&self) -> u64 {
        self.dropped_slow
    }

    /// Adds a subscriber.
    ///
    /// # Errors
    /// [`TooManySubscribers`] at the limit.
    pub fn subscribe(&mut self) -> Result<SubscriberRx, TooManySubscribers> {
        if self.subscribers.len() >= self.limits.max_subscribers {
            return Err(TooManySubscribers {
                limit: self.limits.max_subscribers,
            });
        }
        let id = self.next_id;
        self.next_id += 1;
        let (tx, rx) = mpsc::channel(self.limits.queue_messages.max(1));
        let shared = Arc::new(Shared::default());
        self.subscribers.push(Subscriber {
            id,
            tx,
            shared: shared.clone(),
        });
        Ok(SubscriberRx { id, rx, shared })
    }

    /// Removes a subscriber (its socket closed). Returns whether it was still there.
    pub fn unsubscribe(&mut self, id: u64) -> bool {
        let before = self.subscribers.len();
        self.subscribers.retain(|s| s.id != id);
        before != self.subscribers.len()
    }

    /// Queues `message` for every subscriber without waiting; drops those that fell behind. Returns how many were
    /// dropped.
    pub fn broadcast(&mut self, message: &Utf8Bytes) -> usize {
        let limits = &self.limits;
        let mut dropped = 0;
        self.subscribers.retain(|subscriber| {
            let queued = subscriber.shared.queued_bytes.load(Ordering::Relaxed);
            if queued > 0 && queued.saturating_add(message.len()) > limits.queue_bytes {
                let reason = format!(
                    "slow subscriber: more than {} bytes queued",
                    limits.queue_bytes
                );
                abort(subscriber, reason);
                dropped += 1;
                return false;
            }
            subscriber
                .shared
                .queued_bytes
                .fetch_add(message.len(), Ordering::Relaxed);
            match subscriber.tx.try_send(message.clone()) {
                Ok(()) => true,
                Err(mpsc::error::TrySendError::Full(_)) => {
                    subscriber
                        .shared
                        .queued_bytes
                        .fetch_sub(message.len(), Ordering::Relaxed);
                    let reason = format!(
                        "slow subscriber: more than {} messages queued",
                        limits.queue_messages
                    );
                    abort(subscriber, reason);
                    dropped += 1;
                    false
                }
                Err(mpsc::error::TrySendError::Closed(_)) => false,
            }
        });
        self.dropped_slow += dropped as u64;
        dropped
    }

    /// Closes every subscriber after its queue is delivered (agent exit, shutdown).
    pub fn close_all(&mut self, code: u16, reason: &str) {
        for subscriber in self.subscribers.drain(..) {
            set_reason(
                &subscriber.shared,
                CloseReason {
                    code,
                    reason: reason.to_owned(),
                },
            );
            // Dropping the sender ends the queue after its last message.
        }
    }
}

fn abort(subscriber: &Subscriber, reason: String) {
    tracing::warn!(subscriber = subscriber.id, %reason, "dropping /acp/stream subscriber");
    set_reason(
        &subscriber.shared,
        CloseReason {
            code: CLOSE_POLICY,
            reason,
        },
    );
    subscriber.shared.abort.cancel();
}

fn set_reason(shared: &Shared, reason: CloseReason) {
    let mut slot = shared.close.lock().unwrap_or_else(PoisonError::into_inner);
    if slot.is_none() {
        *slot = Some(reason);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hub(queue_messages: usize, queue_bytes: usize, max_subscribers: usize) -> Hub {
        Hub::new(HubLimits {
            queue_messages,
            queue_bytes,
            max_subscribers,
        })
    }

    #[tokio::test]
    async fn a_full_queue_drops_only_that_subscriber_with_a_reason() {
        let mut hub = hub(2, 1 << 20, 8);
        let mut fast = hub.subscribe().unwrap();
        let slow = hub.subscribe().unwrap();
        for n in 0..2 {
            assert_eq!(hub.broadcast(&Utf8Bytes::from(format!("m{n}"))), 0);
            assert_eq!(fast.recv().await.unwrap().as_str(), format!("m{n}"));
        }
        // At the limit: `slow` holds 2 messages; one more drops it.
        assert_eq!(hub.broadcast(&Utf8Bytes::from("m2")), 1);
        assert_eq!(hub.len(), 1);
        assert!(slow.abort_token().is_cancelled());
        let reason = slow.close_reason().unwrap();
        assert_eq!(reason.code, CLOSE_POLICY);
        assert!(reason.reason.contains("more than 2 messages"), "{reason:?}");
        assert_eq!(fast.recv().await.unwrap().as_str(), "m2");
        assert_eq!(hub.dropped_slow(), 1);
    }

    #[tokio::test]
    async fn the_byte_bound_holds_but_one_large_message_may_always_wait() {
        let mut hub = hub(100, 10, 8);
        let mut rx = hub.subscribe().unwrap();
        assert_eq!(
            hub.broadcast(&Utf8Bytes::from("x".repeat(50))),
            0,
            "an empty queue takes any size"
        );
        assert_eq!(rx.recv().await.unwrap().len(), 50);
        assert_eq!(hub.broadcast(&Utf8Bytes::from("12345")), 0);
        assert_eq!(
            hub.broadcast(&Utf8Bytes::from("12345")),
            0,
            "exactly at the byte limit"
        );
        assert_eq!(hub.broadcast(&Utf8Bytes::from("1")), 1, "one byte past it");
        assert!(rx.close_reason().unwrap().reason.contains("10 bytes"));
    }

    #[tokio::test]
    async fn close_all_delivers_the_queue_first() {
        let mut hub = hub(8, 1 << 20, 8);
        let mut rx = hub.subscribe().unwrap();
        hub.broadcast(&Utf8Bytes::from("last"));
        hub.close_all(CLOSE_NORMAL, "agent exited");
        assert_eq!(rx.recv().await.unwrap().as_str(), "last");
        assert_eq!(rx.recv().await, None);
        assert_eq!(
            rx.close_reason(),
            Some(CloseReason {
                code: CLOSE_NORMAL,
                reason: "agent exited".into()
            })
        );
    }

    #[test]
    fn subscribers_are_bounded_at_the_limit() {
        let mut hub = hub(8, 1 << 20, 2);
        let first = hub.subscribe().unwrap();
        let _second = hub.subscribe().unwrap();
        assert_eq!(
            hub.subscribe().unwrap_err(),
            TooManySubscribers { limit: 2 }
        );
        assert!(hub.unsubscribe(first.id));
        assert!(hub.subscribe().is_ok());
    }
}
