//! Connection slots of the gateway's listener.
//!
//! At most `max_connections` connections are served at once. A new connection that finds every
//! slot taken closes the connection idle longest (one with no request in progress: between
//! requests, or still sending its first request head) and takes its slot; when every
//! connection has a request in progress it waits briefly and is then refused (the server
//! answers 503 SlowDown). Idle connections therefore never lock clients out: only requests in
//! progress hold slots, and their bodies are bounded in time (`BodyDeadlines`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

use crate::metrics::{LimitCounters, S3Metrics};

/// The listener's slots and the connections holding them.
pub struct Slots {
    permits: Arc<Semaphore>,
    /// Connections waiting for a slot; one more is refused at once.
    waiting: Semaphore,
    holders: Mutex<HashMap<u64, Arc<ConnState>>>,
    next_id: AtomicU64,
    epoch: Instant,
    metrics: Arc<S3Metrics>,
}

/// What the slot table knows of one connection.
pub struct ConnState {
    /// Requests of this connection in progress.
    busy: AtomicU32,
    /// When it last became idle (ns since the table's epoch).
    idle_since_ns: AtomicU64,
    /// Set once it was chosen to give its slot up.
    evicting: AtomicBool,
    evict: Notify,
    epoch: Instant,
}

/// A slot held by one connection; dropping it frees the slot.
pub struct Slot {
    slots: Arc<Slots>,
    id: u64,
    /// The connection's state (marks requests, tells it when to close).
    pub state: Arc<ConnState>,
    _permit: OwnedSemaphorePermit,
}

/// Marks one request in progress on a connection until dropped.
pub struct Busy(Arc<ConnState>);

impl Slots {
    /// A table of `max_connections` slots counting refusals and evictions in `metrics`.
    pub fn new(max_connections: usize, metrics: Arc<S3Metrics>) -> Arc<Self> {
        assert!(max_connections > 0, "a listener needs at least one slot");
        Arc::new(Slots {
            permits: Arc::new(Semaphore::new(max_connections)),
            waiting: Semaphore::new(max_connections),
            holders: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
            epoch: Instant::now(),
            metrics,
        })
    }

    /// A slot for a new connection: a free one, else the slot of the connection idle longest
    /// (waiting at most `wait` for it to close), else `None` (counted as refused).
    pub async fn claim(self: &Arc<Self>, wait: Duration) -> Option<Slot> {
        if let Ok(permit) = self.permits.clone().try_acquire_owned() {
            return Some(self.register(permit));
        }
        let refused = || {
            LimitCounters::bump(&self.metrics.limits.connections_refused);
            None
        };
        let Ok(_waiting) = self.waiting.try_acquire() else {
            return refused();
        };
        self.evict_idlest();
        match tokio::time::timeout(wait, self.permits.clone().acquire_owned()).await {
            Ok(Ok(permit)) => Some(self.register(permit)),
            _ => refused(),
        }
    }

    /// Connections holding a slot now.
    pub fn held(&self) -> usize {
        self.lock().len()
    }

    fn register(self: &Arc<Self>, permit: OwnedSemaphorePermit) -> Slot {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let state = Arc::new(ConnState {
            busy: AtomicU32::new(0),
            idle_since_ns: AtomicU64::new(nanos_since(self.epoch)),
            evicting: AtomicBool::new(false),
            evict: Notify::new(),
            epoch: self.epoch,
        });
        self.lock().insert(id, state.clone());
        Slot {
            slots: self.clone(),
            id,
            state,
            _permit: permit,
        }
    }

    /// Tells the connection idle longest to close; false when every connection is busy.
    fn evict_idlest(&self) -> bool {
        let holders = self.lock();
        let idlest = holders
            .values()
            .filter(|c| c.busy.load(Ordering::Acquire) == 0 && !c.evicting.load(Ordering::Acquire))
            .min_by_key(|c| c.idle_since_ns.load(Ordering::Relaxed));
        let Some(c) = idlest else {
            return false;
        };
        c.evicting.store(true, Ordering::Release);
        c.evict.notify_one();
        LimitCounters::bump(&self.metrics.limits.connections_evicted);
        true
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<ConnState>>> {
        self.holders.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.slots.lock().remove(&self.id);
    }
}

impl ConnState {
    /// Marks a request in progress (the connection is not idle) until the guard drops.
    pub fn request_started(self: &Arc<Self>) -> Busy {
        self.busy.fetch_add(1, Ordering::AcqRel);
        Busy(self.clone())
    }

    /// Whether a request is in progress.
    pub fn is_busy(&self) -> bool {
        self.busy.load(Ordering::Acquire) > 0
    }

    /// Resolves once the connection was chosen to give its slot up.
    pub async fn evicted(&self) {
        self.evict.notified().await;
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0
            .idle_since_ns
            .store(nanos_since(self.0.epoch), Ordering::Relaxed);
        let before = self.0.busy.fetch_sub(1, Ordering::AcqRel);
        assert!(
            before > 0,
            "a connection finished more requests than it started"
        );
    }
}

fn nanos_since(epoch: Instant) -> u64 {
    crate::convert::nanos(epoch.elapsed())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_full_table_evicts_the_connection_idle_longest_and_refuses_when_all_are_busy() {
        let metrics = Arc::new(S3Metrics::default());
        let slots = Slots::new(2, metrics.clone());
        let older = slots.claim(Duration::ZERO).await.unwrap();
        tokio::time::sleep(Duration::from_millis(2)).await;
        let newer = slots.claim(Duration::ZERO).await.unwrap();
        let busy_newer = newer.state.request_started();

        // The third connection asks the idle one (the older) to close, and gets its slot.
        let third = {
            let slots = slots.clone();
            tokio::spawn(async move { slots.claim(Duration::from_secs(5)).await })
        };
        tokio::time::timeout(Duration::from_secs(5), older.state.evicted())
            .await
            .expect("the idle connection is told to close");
        assert!(newer.state.is_busy(), "the busy connection was not chosen");
        drop(older);
        let third = third
            .await
            .unwrap()
            .expect("the freed slot goes to the new one");
        assert_eq!(slots.held(), 2);

        // Now both hold a request in progress: a fourth is refused after its wait.
        let _busy_third = third.state.request_started();
        assert!(slots.claim(Duration::from_millis(20)).await.is_none());
        let l = &metrics.limits;
        assert_eq!(l.connections_evicted.load(Ordering::Relaxed), 1);
        assert_eq!(l.connections_refused.load(Ordering::Relaxed), 1);

        // A finished request makes its connection evictable again.
        drop(busy_newer);
        let fifth = {
            let slots = slots.clone();
            tokio::spawn(async move { slots.claim(Duration::from_secs(5)).await })
        };
        newer.state.evicted().await;
        drop(newer);
        assert!(fifth.await.unwrap().is_some());
    }
}
