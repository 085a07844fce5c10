//! Pipelined group commits: a group whose record and data are being written while the next
//! group stages over its changes, and the in-order completion that makes groups visible.
//!
//! A logged group no longer holds the store's lock while its writes and flush are in flight.
//! Once staged and placed in the ring it becomes an [`InFlight`] group; the submitter that
//! launched it writes and flushes without the lock (so readers and the next group's staging go
//! on), then takes the lock again to *finalize*: absorb its changes into the overlay, release the
//! blocks it freed, make its deferred writes visible, and acknowledge its transactions. Up to
//! [`MAX_IN_FLIGHT`] groups are in flight; they are finalized strictly in order, each only once
//! its own writes and flush have completed, so a group is never acknowledged before every group
//! it staged over is durable.
//!
//! Readers see only finalized (durable) groups. The next group's staging sees the in-flight
//! group's KV changes (a layer over the overlay), its deferred block contents (from memory), and
//! waits for its writes before reading a block it is writing copy-on-write; it writes its
//! copy-on-write data at once but its record only after the in-flight group's flush, so only
//! the last record on the device can lack its data (what mount checks). Checkpoints leave
//! in-flight records after their marker. A group that cannot be logged, `sync` and `fsck`
//! first drain the pipeline.
//!
//! A launcher cancelled before it finalized its group leaves the group to the store's other
//! submitters: its guard wakes them, and one of them finalizes the group, or, when the writes
//! were abandoned mid-flight (their outcome unknown), fails the store (invariant 8).

use crate::apply::{elapsed_into, GroupEffects};
use crate::error::{Result, StoreError};
use crate::store::{State, Store};
use crate::wal::{Marker, Redo, RingFill};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::{watch, RwLockWriteGuard};

/// Most groups whose writes may be in flight at once (`StoreConfig::max_groups_in_flight` is at
/// most this). Two lets one group's staging and writes overlap the previous group's flush;
/// staging then sees at most one in-flight layer (the overlay's `Below` has one slot for it).
pub(crate) const MAX_IN_FLIGHT: usize = 2;

/// Outcome of an in-flight group's writes and flush: `None` while in flight.
type IoOutcome = Option<std::result::Result<(), String>>;

/// What the next group's staging reads of a group in flight.
#[derive(Debug)]
pub(crate) struct InFlightView {
    /// The group's KV changes (its redo record).
    pub(crate) redo: Redo,
    /// Deferred block contents the group commits: physical block -> contents.
    pub(crate) deferred_new: BTreeMap<u64, Arc<Vec<u8>>>,
    /// Copy-on-write runs `(first block, blocks)` it is writing.
    pub(crate) runs: Vec<(u64, u64)>,
    /// Blocks of its copy-on-write runs, in all.
    cow_blocks: u64,
    io: watch::Receiver<IoOutcome>,
}

impl InFlightView {
    /// Whether the group is writing physical block `p` copy-on-write.
    pub(crate) fn writes_block(&self, p: u64) -> bool {
        let i = self.runs.partition_point(|&(s, _)| s <= p);
        i > 0 && {
            let (s, n) = self.runs[i - 1];
            p < s + n
        }
    }

    /// Waits until the group's writes and flush have completed (successfully or not).
    pub(crate) async fn wait_written(&self) -> Result<()> {
        self.written().wait().await
    }

    /// A handle that waits for the group's writes without holding the view: whoever finalizes
    /// the group takes its changes out of the view without a copy only when no one else holds
    /// it.
    pub(crate) fn written(&self) -> Written {
        Written(self.io.clone())
    }

    /// The outcome of the group's writes: `None` while in flight; an error when they failed or
    /// were abandoned by a cancelled launcher.
    fn outcome(&self) -> Option<Result<()>> {
        match &*self.io.borrow() {
            Some(Ok(())) => return Some(Ok(())),
            Some(Err(e)) => return Some(Err(StoreError::Failed(e.clone()))),
            None => {}
        }
        self.io.has_changed().is_err().then(|| Err(abandoned()))
    }
}

/// Waits for one in-flight group's writes and flush (see [`InFlightView::written`]).
pub(crate) struct Written(watch::Receiver<IoOutcome>);

impl Written {
    /// Waits until the writes and flush have completed (successfully or not).
    pub(crate) async fn wait(mut self) -> Result<()> {
        let outcome = match self.0.wait_for(Option::is_some).await {
            Ok(outcome) => outcome.clone(),
            Err(_) => return Err(abandoned()),
        };
        match outcome {
            Some(Err(e)) => Err(StoreError::Failed(e)),
            _ => Ok(()),
        }
    }
}

fn abandoned() -> StoreError {
    StoreError::Failed("a group commit was abandoned with its writes in flight".into())
}

/// A group whose writes are in flight, waiting to be finalized.
#[derive(Debug)]
pub(crate) struct InFlight {
    pub(crate) view: Arc<InFlightView>,
    /// What it changes outside the KV, applied when it is finalized.
    pub(crate) effects: GroupEffects,
    /// The ring's marker before its record: where a checkpoint taken while it is in flight
    /// leaves the log, so that mount replays it.
    pub(crate) marker_before: Marker,
    /// The ring fill its record added.
    pub(crate) fill: RingFill,
}

/// The launcher's end of an in-flight group: reports the outcome of its writes; dropped without
/// reporting (a cancelled launcher), it marks them abandoned. Until [`Launch::finalized`] is
/// called, dropping it wakes the store's other submitters to finalize the group in its place.
pub(crate) struct Launch<'a> {
    store: &'a Store,
    io: watch::Sender<IoOutcome>,
    finalized: bool,
}

impl Launch<'_> {
    /// Reports the outcome of the group's writes and flush.
    pub(crate) fn written(&self, outcome: &Result<()>) {
        let outcome = outcome.as_ref().map(|_| ()).map_err(|e| e.to_string());
        self.io.send_replace(Some(outcome));
    }

    /// Notes that the launcher has finalized (or seen finalized) its group.
    pub(crate) fn finalized(mut self) {
        self.finalized = true;
    }
}

impl Drop for Launch<'_> {
    fn drop(&mut self) {
        if !self.finalized {
            self.store.orphans.send_modify(|n| *n = n.wrapping_add(1));
        }
    }
}

impl Store {
    /// A new in-flight group's view and the launcher's end of it.
    pub(crate) fn launch(
        &self,
        redo: Redo,
        deferred_new: BTreeMap<u64, Arc<Vec<u8>>>,
        runs: Vec<(u64, u64)>,
    ) -> (Arc<InFlightView>, Launch<'_>) {
        let (tx, rx) = watch::channel(None);
        let cow_blocks = runs.iter().map(|&(_, n)| n).sum();
        let view = Arc::new(InFlightView {
            redo,
            deferred_new,
            runs,
            cow_blocks,
            io: rx,
        });
        let launch = Launch {
            store: self,
            io: tx,
            finalized: false,
        };
        (view, launch)
    }

    /// The marker of the oldest durable state the log must be replayed from: before the oldest
    /// group in flight, else the ring's head.
    pub(crate) fn durable_marker(&self, st: &State) -> Marker {
        st.inflight
            .front()
            .map_or_else(|| st.wal.marker(), |f| f.marker_before)
    }

    /// The ring fill of the groups in flight (their records stay after a checkpoint's marker).
    pub(crate) fn inflight_fill(&self, st: &State) -> RingFill {
        st.inflight
            .iter()
            .fold(RingFill::default(), |acc, f| acc + f.fill)
    }

    /// Finalizes, in order, the groups in flight whose writes have completed. When the oldest
    /// one's writes failed (or were abandoned), the store fails and every group in flight is
    /// answered with the error (none of them can be acknowledged).
    pub(crate) async fn finalize_ready(&self, st: &mut State) {
        while let Some(outcome) = st.inflight.front().and_then(|f| f.view.outcome()) {
            let Some(group) = st.inflight.pop_front() else {
                return;
            };
            if let Err(e) = outcome {
                let e = self.fatal(e);
                self.fail_all(group.effects.live, e);
                for rest in std::mem::take(&mut st.inflight) {
                    let e = StoreError::Failed("an earlier group's writes failed".into());
                    self.fail_all(rest.effects.live, e);
                }
                return;
            }
            let InFlight { view, effects, .. } = group;
            let (redo, deferred_new) = match Arc::try_unwrap(view) {
                Ok(v) => (v.redo, v.deferred_new),
                Err(shared) => (shared.redo.clone(), shared.deferred_new.clone()),
            };
            self.finalize(st, redo, deferred_new, effects, true).await;
            self.note_free();
        }
    }

    /// How many groups may be in flight with `st`'s: `max_groups_in_flight`, but one behind a
    /// group whose copy-on-write data is under `pipeline_min_cow_bytes` (a group of small
    /// writes is CPU, not device time: a second one would only split the groups).
    fn pipeline_depth(&self, st: &State) -> usize {
        let bs = self.sb.block_bytes;
        let heavy = st.inflight.back().is_some_and(|f| {
            f.view.cow_blocks.saturating_mul(bs) >= self.cfg.pipeline_min_cow_bytes
        });
        match heavy {
            true => self.cfg.max_groups_in_flight,
            false => 1,
        }
    }

    /// Makes room for one more group in flight (called by the committers' leader): finalizes
    /// what is done, then, while the pipeline is full (see [`Store::pipeline_depth`]), waits
    /// for the oldest group's writes without the store's lock (readers go on) and finalizes
    /// it. Returns the lock for staging the next group.
    /// The state's write lock for a committer, its wait counted.
    pub(crate) async fn state_for_commit(&self) -> RwLockWriteGuard<'_, State> {
        let t = Instant::now();
        let st = self.state.write().await;
        elapsed_into(&self.counters.lock_wait_ns, t);
        st
    }

    pub(crate) async fn make_room(&self) -> RwLockWriteGuard<'_, State> {
        let mut st = self.state_for_commit().await;
        self.finalize_ready(&mut st).await;
        while st.inflight.len() >= self.pipeline_depth(&st) {
            if let Some(written) = st.inflight.front().map(|f| f.view.written()) {
                drop(st);
                let t = Instant::now();
                let _ = written.wait().await;
                elapsed_into(&self.counters.pipeline_wait_ns, t);
                st = self.state_for_commit().await;
            }
            self.finalize_ready(&mut st).await;
        }
        st
    }

    /// Waits for every group in flight and finalizes them all: afterwards the overlay holds
    /// every acknowledged change (for a group that must checkpoint, `sync` and `fsck`).
    pub(crate) async fn drain(&self, st: &mut State) -> Result<()> {
        self.finalize_ready(st).await;
        while let Some(written) = st.inflight.front().map(|f| f.view.written()) {
            let _ = written.wait().await;
            self.finalize_ready(st).await;
        }
        self.check_ok()
    }
}
