//! The objects a PG's primary is pushing to a copy being filled with their writes held: a
//! write to one waits until its push is done (Ceph makes a client op wait for an object being
//! backfilled), writes to the PG's other objects go on. Once pushed that way the copy is
//! current for the object, and the fill forwards its later writes there.
//!
//! A hold is put up while the PG's lock is held, which a write holds while it checks the holds
//! and registers itself in flight; so a write either is in flight before the hold (the pusher
//! waits for it) or sees the hold and waits. This module only keeps the names and wakes the
//! waiters; it never takes the PG's lock itself.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

/// One PG's held objects (a name may be held by several pushes at once, one per target).
#[derive(Debug, Default)]
pub struct FillHolds {
    held: Mutex<BTreeMap<String, usize>>,
    released: Notify,
}

impl FillHolds {
    fn held(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, usize>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether a write to `name` must wait.
    pub fn holds(&self, name: &str) -> bool {
        self.held().contains_key(name)
    }

    /// Waits until no push holds `name`. The caller checks again under the PG's lock: another
    /// hold may be up by then.
    pub async fn wait_released(&self, name: &str) {
        loop {
            let released = self.released.notified();
            tokio::pin!(released);
            released.as_mut().enable();
            if !self.holds(name) {
                return;
            }
            released.await;
        }
    }

    /// Holds writes to `name` until the returned guard is dropped (the caller holds the PG's
    /// lock).
    pub fn hold(self: &Arc<Self>, name: &str) -> Held {
        *self.held().entry(name.to_string()).or_default() += 1;
        Held {
            holds: self.clone(),
            name: name.to_string(),
        }
    }
}

/// One push's hold on an object; dropping it (the push done, failed or abandoned) lets the
/// object's writes go on once no other push holds it.
#[derive(Debug)]
pub struct Held {
    holds: Arc<FillHolds>,
    name: String,
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut held = self.holds.held();
        if let Some(n) = held.get_mut(&self.name) {
            *n -= 1;
            if *n == 0 {
                held.remove(&self.name);
            }
        }
        drop(held);
        self.holds.released.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_held_name_waits_until_every_hold_on_it_is_dropped_and_others_never_wait() {
        let holds = Arc::new(FillHolds::default());
        let first = holds.hold("a");
        let second = holds.hold("a");
        assert!(holds.holds("a"));
        assert!(!holds.holds("b"));
        tokio::time::timeout(Duration::from_millis(10), holds.wait_released("b"))
            .await
            .expect("another name does not wait");
        let waiter = {
            let holds = holds.clone();
            tokio::spawn(async move { holds.wait_released("a").await })
        };
        drop(first);
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiter.is_finished(), "still held by the second push");
        drop(second);
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("released once every hold is dropped")
            .unwrap();
        assert!(!holds.holds("a"));
    }
}
