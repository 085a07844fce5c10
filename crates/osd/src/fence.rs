//! The objects of a PG that a scrub is comparing right now: writes to them wait, writes to the
//! PG's other objects go on (Ceph blocks writes to the chunk being scrubbed the same way).
//!
//! A scrub raises the fence over one chunk's name range while it holds the PG's lock, when no
//! write of the PG is in flight (a write holds that lock until every copy has it), so every
//! copy holds the chunk's objects alike from then on; it reads them on every copy without the
//! lock and lowers the fence when the chunk is compared. A write checks the fence under the
//! PG's lock and, when its object is fenced, lets go of the lock and waits for the fence to
//! come down. This module only keeps the range and wakes the waiters; it never takes the
//! PG's lock itself.

use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

/// Object names after `after` up to `until` inclusive (`None`: to the PG's last), in the
/// order a PG lists its objects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NameRange {
    /// Names above this one are in the range (`""`: from the first).
    pub after: String,
    /// The range's last name (`None`: every name above `after`).
    pub until: Option<String>,
}

impl NameRange {
    /// Whether `name` is in the range.
    pub fn contains(&self, name: &str) -> bool {
        name > self.after.as_str() && self.until.as_deref().is_none_or(|u| name <= u)
    }
}

/// One PG's fence: at most one range at a time (one chunk of one scrub).
#[derive(Debug, Default)]
pub struct ScrubFence {
    range: Mutex<Option<NameRange>>,
    lowered: Notify,
}

impl ScrubFence {
    /// Whether a write to `name` must wait (`None`: whether any fence is up).
    pub fn holds(&self, name: Option<&str>) -> bool {
        let range = self.range.lock().unwrap_or_else(|p| p.into_inner());
        match (range.as_ref(), name) {
            (None, _) => false,
            (Some(_), None) => true,
            (Some(r), Some(n)) => r.contains(n),
        }
    }

    /// Waits until [`ScrubFence::holds`] is false for `name`. The caller checks again under
    /// the PG's lock: another fence may be up by then.
    pub async fn wait_lowered(&self, name: Option<&str>) {
        loop {
            let lowered = self.lowered.notified();
            tokio::pin!(lowered);
            lowered.as_mut().enable();
            if !self.holds(name) {
                return;
            }
            lowered.await;
        }
    }

    /// Raises the fence over `range` (none may be up: the caller checked under the PG's lock,
    /// which it holds) until the returned guard is dropped.
    pub fn raise(self: &Arc<Self>, range: NameRange) -> Raised {
        let mut up = self.range.lock().unwrap_or_else(|p| p.into_inner());
        debug_assert!(up.is_none(), "a scrub fence is up already");
        *up = Some(range);
        Raised {
            fence: self.clone(),
        }
    }
}

/// A raised fence; dropping it lowers the fence and wakes the writes that wait on it (also
/// when its scrub ends early: an error, a new interval).
#[derive(Debug)]
pub struct Raised {
    fence: Arc<ScrubFence>,
}

impl Drop for Raised {
    fn drop(&mut self) {
        *self.fence.range.lock().unwrap_or_else(|p| p.into_inner()) = None;
        self.fence.lowered.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn range(after: &str, until: Option<&str>) -> NameRange {
        NameRange {
            after: after.into(),
            until: until.map(str::to_string),
        }
    }

    #[test]
    fn a_range_holds_the_names_after_its_start_up_to_its_end() {
        let r = range("b", Some("d"));
        assert!(!r.contains("b"));
        assert!(r.contains("ba"));
        assert!(r.contains("c"));
        assert!(r.contains("d"));
        assert!(!r.contains("da"));
        assert!(!r.contains("a"));
        let open = range("", None);
        assert!(open.contains("a") && open.contains("\u{10ffff}"));
        let tail = range("m", None);
        assert!(tail.contains("z") && !tail.contains("m") && !tail.contains("a"));
    }

    #[tokio::test]
    async fn writes_to_fenced_names_wait_until_the_guard_drops_and_others_do_not() {
        let fence = Arc::new(ScrubFence::default());
        assert!(!fence.holds(None));
        let raised = fence.raise(range("b", Some("d")));
        assert!(fence.holds(None));
        assert!(fence.holds(Some("c")));
        assert!(!fence.holds(Some("e")));
        tokio::time::timeout(Duration::from_millis(10), fence.wait_lowered(Some("e")))
            .await
            .expect("a name outside the range does not wait");
        let waiters: Vec<_> = ["c", "d"]
            .into_iter()
            .map(|n| {
                let fence = fence.clone();
                tokio::spawn(async move { fence.wait_lowered(Some(n)).await })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(
            waiters.iter().all(|w| !w.is_finished()),
            "fenced writes wait"
        );
        drop(raised);
        for w in waiters {
            tokio::time::timeout(Duration::from_secs(5), w)
                .await
                .expect("lowering the fence wakes every waiter")
                .unwrap();
        }
        assert!(!fence.holds(Some("c")));
        let again = fence.raise(range("", None));
        assert!(fence.holds(Some("anything")));
        drop(again);
        assert!(!fence.holds(None));
    }
}
