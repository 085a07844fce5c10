//! A PG's writes between their submission and their end, so that the PG's lock is held only
//! while a write is ordered (its version assigned, its entry logged in memory, its local
//! transaction queued in the store and its replica writes sent) and not while it commits: the
//! PG's next write on another object goes on meanwhile (pipelining within a PG).
//!
//! The store commits transactions in submission order, and submissions happen under the PG's
//! lock in version order, so a copy's log on disk never has a gap left by a write that is
//! still to come. What pipelining changes, this tracker keeps sound:
//! - Whoever takes the PG's lock for anything but a write waits until no write is in flight
//!   ([`WritesInFlight::idle`]): peering, scrub, recovery and the rest see the PG as before.
//!   A write waits only for writes of its own object ([`WritesInFlight::object_idle`]), so
//!   one object's writes stay one at a time, in order, each seeing the previous one's state.
//! - `complete_to` (every entry up to it is on every copy) advances only over a gap-free prefix
//!   of writes that reached every copy, and not past one that did not until the PG activates
//!   again.
//! - A write whose local commit fails without failing the store (no space, say) leaves an
//!   entry in the in-memory log that the store does not hold: the next holder of the lock
//!   takes it out ([`WritesInFlight::settle`]) when it was the newest write submitted. When a
//!   later write was submitted on top of it, the copy's log would have a hole: the OSD stops
//!   (its peers recover the PG without it; at boot a log is cut at its first hole).

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::task::Poll;

use cairn_pg::{Eversion, PgLog};
use cairn_store::StoreError;
use tokio::sync::watch;

/// What the next holder of the PG's lock must take out of the in-memory state: the entry of
/// a write whose local commit failed after it was logged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Undo {
    version: Eversion,
    created_collection: bool,
}

/// How a write ended locally.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LocalOutcome {
    /// Committed.
    Committed,
    /// Refused by the store without failing it (nothing of it is on disk).
    Refused,
    /// The store failed, or the write's task ended before its commit was known.
    Unknown,
}

impl LocalOutcome {
    /// The outcome of a local commit that returned `result`.
    pub fn of(result: &Result<(), StoreError>) -> LocalOutcome {
        match result {
            Ok(()) => LocalOutcome::Committed,
            Err(e) if e.is_fatal() => LocalOutcome::Unknown,
            Err(_) => LocalOutcome::Refused,
        }
    }
}

/// What the writer must do after [`WritesInFlight::finish`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use]
pub enum AfterFinish {
    /// Nothing more.
    Done,
    /// A later write was submitted on top of a refused one: this copy's log has a hole, and
    /// the OSD must stop.
    StopTheOsd,
}

#[derive(Debug, Default)]
struct State {
    /// Submitted and not ended, by version: the object each writes.
    running: BTreeMap<Eversion, String>,
    /// Ended on every copy, above some running write (folded into `complete_to` once every
    /// earlier write has ended too).
    ended: BTreeSet<Eversion>,
    /// Every entry up to this version is on every copy.
    complete_to: Eversion,
    /// The oldest write that ended without reaching every copy: `complete_to` stays below it
    /// until the PG activates again.
    stalled_at: Option<Eversion>,
    /// The newest version submitted.
    newest: Eversion,
    /// A holder of the lock is building a write on the in-memory log as it is now.
    reserved: bool,
    undo: Option<Undo>,
}

/// The writes of one PG in flight (see the module's documentation).
#[derive(Debug)]
pub struct WritesInFlight {
    state: Mutex<State>,
    /// Bumped whenever a write is submitted or ends.
    changed: watch::Sender<u64>,
}

impl Default for WritesInFlight {
    fn default() -> Self {
        WritesInFlight {
            state: Mutex::default(),
            changed: watch::channel(0).0,
        }
    }
}

impl WritesInFlight {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn bump(&self) {
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Waits until `done` holds of the state (checked after each submission or end).
    async fn wait_until(&self, done: impl Fn(&State) -> bool) {
        let mut rx = self.changed.subscribe();
        loop {
            if done(&self.state()) {
                return;
            }
            if rx.changed().await.is_err() {
                return;
            }
        }
    }

    /// Whether no write is in flight.
    pub fn is_idle(&self) -> bool {
        self.state().running.is_empty()
    }

    /// Whether a write of `object` is in flight.
    pub fn touches(&self, object: &str) -> bool {
        self.state().running.values().any(|o| o == object)
    }

    /// Whether the write of `version` is in flight.
    pub fn is_running(&self, version: Eversion) -> bool {
        self.state().running.contains_key(&version)
    }

    /// Waits until no write is in flight.
    pub async fn idle(&self) {
        self.wait_until(|s| s.running.is_empty()).await;
    }

    /// Waits until no write of `object` is in flight.
    pub async fn object_idle(&self, object: &str) {
        self.wait_until(|s| !s.running.values().any(|o| o == object))
            .await;
    }

    /// Waits until no write of `version` or older is in flight.
    pub async fn ended_through(&self, version: Eversion) {
        self.wait_until(|s| s.running.keys().next().is_none_or(|v| *v > version))
            .await;
    }

    /// Waits until the write of `version` is no longer in flight.
    pub async fn ended(&self, version: Eversion) {
        self.wait_until(|s| !s.running.contains_key(&version)).await;
    }

    /// A receiver that sees each later submission or end of a write: a replica write that
    /// arrived ahead of an earlier one subscribes before it lets go of the PG's lock, then
    /// waits for the next change.
    pub fn watch(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// Every entry up to this version is on every copy (as primary).
    pub fn complete_to(&self) -> Eversion {
        self.state().complete_to
    }

    /// Starts an interval's bookkeeping at activation (with the PG's lock held and no write in
    /// flight): every entry up to `complete_to` is on every copy, and `newest` is the log's head.
    pub fn reset(&self, complete_to: Eversion, newest: Eversion) {
        let mut s = self.state();
        assert!(s.running.is_empty(), "a PG activated with writes in flight");
        s.ended.clear();
        s.stalled_at = None;
        s.complete_to = complete_to;
        s.newest = newest;
        s.reserved = false;
        s.undo = None;
    }

    /// Takes out of `log` (and `created`) the entry of a refused write, if one is pending.
    /// Called by every holder of the PG's lock once it has waited for what it waits for.
    pub fn settle(&self, log: &mut PgLog, created: &mut bool) {
        let mut s = self.state();
        if let Some(undo) = s.undo.take() {
            assert_eq!(
                log.head(),
                undo.version,
                "a refused write's entry is not the log's head"
            );
            let before = log.entries().rev().nth(1).map_or(log.tail(), |e| e.version);
            log.rewind_to(before);
            if undo.created_collection {
                *created = false;
            }
            s.newest = log.head();
        }
    }

    /// Settles (see [`WritesInFlight::settle`]) and notes that the caller, holding the PG's
    /// lock, builds a write on the in-memory log as it is now: until it submits it or drops the
    /// returned reservation, a refused write is no longer taken out of the log (the OSD stops
    /// instead).
    pub fn reserve<'a>(&'a self, log: &mut PgLog, created: &mut bool) -> Reservation<'a> {
        self.settle(log, created);
        self.state().reserved = true;
        Reservation { writes: self }
    }

    /// Notes the write of `version` (on `object`) submitted: its entry is in the in-memory log
    /// and its transaction queued in the store. The returned guard ends it if the writer never
    /// does (its task cancelled), as a write of unknown outcome; [`InFlight::pipelined`] says
    /// whether other writes of the PG were in flight then.
    pub fn submitted(
        &self,
        reservation: Reservation<'_>,
        version: Eversion,
        object: &str,
        created_collection: bool,
    ) -> InFlight<'_> {
        std::mem::forget(reservation);
        let pipelined = {
            let mut s = self.state();
            assert!(
                !s.running.contains_key(&version),
                "write {version} submitted twice"
            );
            s.reserved = false;
            s.newest = version;
            let others = !s.running.is_empty();
            s.running.insert(version, object.to_string());
            others
        };
        self.bump();
        InFlight {
            writes: self,
            version,
            created_collection,
            pipelined,
            ended: false,
        }
    }

    /// Ends the write of `version`: `local` is its local outcome, `everywhere` whether every
    /// other copy committed it.
    fn finish(
        &self,
        version: Eversion,
        created_collection: bool,
        local: LocalOutcome,
        everywhere: bool,
    ) -> AfterFinish {
        let mut after = AfterFinish::Done;
        {
            let mut s = self.state();
            let was = s.running.remove(&version);
            assert!(was.is_some(), "write {version} ended twice");
            if local == LocalOutcome::Refused {
                if s.newest == version && !s.reserved {
                    s.undo = Some(Undo {
                        version,
                        created_collection,
                    });
                } else {
                    after = AfterFinish::StopTheOsd;
                }
            }
            let complete = local == LocalOutcome::Committed && everywhere;
            if !complete {
                s.stalled_at = Some(s.stalled_at.map_or(version, |v| v.min(version)));
            } else if s.stalled_at.is_none_or(|at| version < at) {
                s.ended.insert(version);
            }
            let State {
                running,
                ended,
                complete_to,
                stalled_at,
                ..
            } = &mut *s;
            while let Some(&first) = ended.first() {
                let below_running = running.keys().next().is_none_or(|r| first < *r);
                let below_stall = stalled_at.is_none_or(|at| first < at);
                if !(below_running && below_stall) {
                    break;
                }
                ended.pop_first();
                *complete_to = (*complete_to).max(first);
            }
            if let Some(at) = *stalled_at {
                ended.retain(|v| *v < at);
            }
        }
        self.bump();
        after
    }
}

/// A holder of the PG's lock building a write (see [`WritesInFlight::reserve`]).
pub struct Reservation<'a> {
    writes: &'a WritesInFlight,
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        self.writes.state().reserved = false;
    }
}

/// A submitted write, ended by [`InFlight::finish`] or, if dropped first, as of unknown
/// outcome.
pub struct InFlight<'a> {
    writes: &'a WritesInFlight,
    version: Eversion,
    created_collection: bool,
    pipelined: bool,
    ended: bool,
}

impl InFlight<'_> {
    /// Whether other writes of the PG were in flight when this one was submitted.
    pub fn pipelined(&self) -> bool {
        self.pipelined
    }

    /// Ends the write (see [`LocalOutcome`]); `everywhere`: every other copy committed it.
    pub fn finish(mut self, local: LocalOutcome, everywhere: bool) -> AfterFinish {
        self.ended = true;
        self.writes
            .finish(self.version, self.created_collection, local, everywhere)
    }

    /// Ends a write whose transaction the store refused at once, before queueing it: takes its
    /// entry out of the log (the caller holds the PG's lock).
    pub fn withdraw(mut self, log: &mut PgLog, created: &mut bool) {
        self.ended = true;
        let after = self.writes.finish(
            self.version,
            self.created_collection,
            LocalOutcome::Refused,
            false,
        );
        assert_eq!(
            after,
            AfterFinish::Done,
            "a withdrawn write was not the newest"
        );
        // Not stalled by its own refusal: nothing of it reached any copy.
        {
            let mut s = self.writes.state();
            if s.stalled_at == Some(self.version) {
                s.stalled_at = None;
            }
        }
        self.writes.settle(log, created);
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if !self.ended {
            let _ = self.writes.finish(
                self.version,
                self.created_collection,
                LocalOutcome::Unknown,
                false,
            );
        }
    }
}

/// Polls `f` once: its output if it is done already, else `None` (then it has run up to its
/// first wait). A write polls its store transaction once under the PG's lock, which queues it
/// in submission order, and awaits it after letting go of the lock.
pub async fn poll_once<F: Future>(mut f: Pin<&mut F>) -> Option<F::Output> {
    std::future::poll_fn(|cx| {
        Poll::Ready(match f.as_mut().poll(cx) {
            Poll::Ready(out) => Some(out),
            Poll::Pending => None,
        })
    })
    .await
}

#[cfg(test)]
mod tests;
