//! Reads in flight on the device, so that a read need not hold the store's state lock while it
//! waits for the device. A read resolves its blocks under the lock, takes a [`ReadPin`], lets
//! the lock go and reads; committers go on meanwhile. What a read could then see change under
//! it waits for the readers that began before the change instead: a run a commit frees is
//! released to the allocator (and so reused) only once every read pinned before the commit
//! has ended, and a checkpoint writes deferred contents in place only once every read pinned
//! before its freeze has ended.
//!
//! Generations order the two: a read is pinned at the current generation; a [`ReadPins::mark`]
//! closes it, so the reads that may have seen the state before the mark are exactly those
//! pinned at or below it.

use std::collections::BTreeMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// Reads in flight, by the generation they began in.
#[derive(Debug, Default)]
pub(crate) struct ReadPins {
    inner: Mutex<Generations>,
    /// Signalled whenever a read ends.
    ended: Condvar,
    /// The same, for async waiters.
    ended_async: tokio::sync::Notify,
}

#[derive(Debug, Default)]
struct Generations {
    /// The generation new reads are pinned at.
    current: u64,
    /// Reads in flight per generation (no zero counts).
    active: BTreeMap<u64, usize>,
}

/// A read in flight; it ends when dropped.
#[derive(Debug)]
pub(crate) struct ReadPin {
    pins: Arc<ReadPins>,
    generation: u64,
}

impl ReadPins {
    fn lock(&self) -> MutexGuard<'_, Generations> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Pins a read beginning now (taken under the state lock, with the blocks it resolved).
    pub(crate) fn enter(self: &Arc<Self>) -> ReadPin {
        let mut g = self.lock();
        let generation = g.current;
        *g.active.entry(generation).or_insert(0) += 1;
        ReadPin {
            pins: self.clone(),
            generation,
        }
    }

    /// Closes the current generation (taken under the state lock, with the change that must
    /// wait): the reads that began before are those [`ReadPins::drained`] waits for.
    pub(crate) fn mark(&self) -> u64 {
        let mut g = self.lock();
        let mark = g.current;
        g.current = mark.checked_add(1).expect("read generations never run out");
        mark
    }

    /// Whether every read pinned at or before `mark` has ended.
    pub(crate) fn drained(&self, mark: u64) -> bool {
        self.lock().active.range(..=mark).next().is_none()
    }

    /// Blocks the calling thread until [`ReadPins::drained`] (a checkpoint's own thread).
    pub(crate) fn wait_blocking(&self, mark: u64) {
        let mut g = self.lock();
        while g.active.range(..=mark).next().is_some() {
            g = self.ended.wait(g).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Waits until [`ReadPins::drained`]. The reads need no lock to end, so a caller that
    /// holds the state lock may wait.
    pub(crate) async fn wait(&self, mark: u64) {
        loop {
            let ended = self.ended_async.notified();
            if self.drained(mark) {
                return;
            }
            ended.await;
        }
    }

    /// Reads in flight now.
    #[cfg(test)]
    fn in_flight(&self) -> usize {
        self.lock().active.values().sum()
    }
}

impl Drop for ReadPin {
    fn drop(&mut self) {
        let mut g = self.pins.lock();
        let left = match g.active.get_mut(&self.generation) {
            Some(n) => {
                *n -= 1;
                *n
            }
            None => {
                debug_assert!(false, "a read pin ended twice");
                return;
            }
        };
        if left == 0 {
            g.active.remove(&self.generation);
        }
        drop(g);
        self.pins.ended.notify_all();
        self.pins.ended_async.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mark_waits_for_the_reads_begun_before_it_only() {
        let pins = Arc::new(ReadPins::default());
        let early = pins.enter();
        let mark = pins.mark();
        let late = pins.enter();
        assert!(!pins.drained(mark), "the read begun before is in flight");
        drop(late);
        assert!(!pins.drained(mark));
        assert_eq!(pins.in_flight(), 1);
        drop(early);
        assert!(pins.drained(mark));
        let later = pins.enter();
        assert!(
            pins.drained(mark),
            "a read begun after the mark does not count"
        );
        assert!(!pins.drained(pins.mark()));
        drop(later);
        assert_eq!(pins.in_flight(), 0);
    }

    #[test]
    fn waiters_wake_when_the_last_earlier_read_ends() {
        let pins = Arc::new(ReadPins::default());
        let read = pins.enter();
        let mark = pins.mark();
        let waiter = {
            let pins = pins.clone();
            std::thread::spawn(move || pins.wait_blocking(mark))
        };
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_time()
            .build()
            .unwrap();
        let async_pins = pins.clone();
        let waited = rt.spawn(async move { async_pins.wait(mark).await });
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert!(!waiter.is_finished());
        assert!(!waited.is_finished());
        drop(read);
        waiter.join().unwrap();
        rt.block_on(async {
            tokio::time::timeout(std::time::Duration::from_secs(5), waited)
                .await
                .expect("the async waiter wakes")
                .unwrap()
        });
    }
}
