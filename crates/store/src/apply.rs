//! Applying transactions: group commit, limits, and the stage-write-flush-commit sequence
//! described in `store` (staging itself is `stage`'s job).
//!
//! Owns the order that makes a group durable and atomic: stage every transaction over the
//! overlay and any group in flight (restaging without a member that fails), place the group's
//! redo record in the write-ahead log, write the new blocks and the record and flush the device
//! (the commit point) without the store's lock, then finalize in order (`inflight`): take the
//! changes into the overlay, release freed blocks, forget the touched objects' cached
//! metadata, answer the submitters. When no record can be logged (no log, record too large, checkpoint due) the group
//! is a checkpoint instead: write and flush the data, then commit the overlay to the KV durably
//! with the log's marker. It must never write to the device before the whole group has staged successfully,
//! and never release a block before the commit that stops referencing it.

use crate::bufpool::RunBuf;
use crate::cache::{CachedObject, MAX_CACHED_EXTENT_BYTES};
use crate::codec::{self, prefix_end, split_block_key, Extent, Onode};
use crate::early::{EarlyHandle, Placed};
use crate::error::{Result, StoreError};
use crate::inflight::{InFlight, InFlightView, Launch, Written, MAX_IN_FLIGHT};
use crate::stage::{CreatedObject, Stage, Tables};
use crate::store::{State, Store};
use crate::txn::{Op, Transaction};
use crate::usage::UsageDelta;
use crate::wal::{self, REDO_EXTENTS, REDO_ONODES, REDO_XATTRS};
use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::oneshot;

/// Adds the time since `since` to `counter`, ns.
pub(crate) fn elapsed_into(counter: &AtomicU64, since: Instant) {
    counter.fetch_add(cairn_convert::nanos(since.elapsed()), Ordering::Relaxed);
}

/// A transaction waiting for its group commit.
#[derive(Debug)]
pub(crate) struct Pending {
    txn: Transaction,
    done: oneshot::Sender<Result<()>>,
    /// Its early writes (module `early`), if it has any.
    early: Option<EarlyHandle>,
}

impl Pending {
    /// Whether it may be staged: it has no early writes in flight.
    fn is_ready(&self) -> bool {
        self.early.as_ref().is_none_or(EarlyHandle::is_ready)
    }

    /// Where its early writes went (`None` without any); an error when they failed or were
    /// abandoned.
    fn placed(&self) -> Result<Option<std::sync::Arc<Placed>>> {
        self.early.as_ref().map(EarlyHandle::placed).transpose()
    }

    /// Every object `(collection, name)` the transaction may change.
    pub(crate) fn objects(&self) -> impl Iterator<Item = (&str, &str)> {
        self.txn
            .ops
            .iter()
            .flat_map(|op| {
                let (coll, a, b) = match op {
                    Op::CreateCollection { .. } | Op::RemoveCollection { .. } => {
                        return [None, None]
                    }
                    Op::Touch { coll, obj }
                    | Op::Remove { coll, obj }
                    | Op::Write { coll, obj, .. }
                    | Op::Zero { coll, obj, .. }
                    | Op::Truncate { coll, obj, .. }
                    | Op::SetAttr { coll, obj, .. }
                    | Op::RmAttr { coll, obj, .. }
                    | Op::OmapSet { coll, obj, .. }
                    | Op::OmapRemove { coll, obj, .. } => (coll, obj, None),
                    Op::Clone { coll, src, dst } | Op::Rename { coll, src, dst } => {
                        (coll, src, Some(dst))
                    }
                };
                [
                    Some((coll.as_str(), a.as_str())),
                    b.map(|b| (coll.as_str(), b.as_str())),
                ]
            })
            .flatten()
    }
}

/// What a staged group changes outside the KV, applied when it is finalized.
#[derive(Debug)]
pub(crate) struct GroupEffects {
    /// Its transactions' submitters.
    pub(crate) live: Vec<Pending>,
    /// Runs it frees, released once it is durable.
    pub(crate) to_free: Vec<(u64, u64)>,
    /// Blocks whose pending deferred write it cancels.
    pub(crate) deferred_dropped: Vec<u64>,
    /// Objects and bytes it adds to (or removes from) each collection.
    pub(crate) usage: UsageDelta,
    /// Objects it created (their cache entries are built from its redo record).
    pub(crate) created: Vec<CreatedObject>,
}

/// The device writes of a launched group: its record (first block in the ring, whole
/// blocks), its copy-on-write runs (first block, whole blocks), all made durable by one flush,
/// and the group in flight before it, if any, whose flush must complete before the record is
/// written.
pub(crate) struct GroupWrites {
    record: Option<(u64, RunBuf)>,
    runs: Vec<(u64, RunBuf)>,
    after: Option<Written>,
    /// Whether its transactions wrote data early: then its flush must follow even when it
    /// writes nothing else.
    early: bool,
}

impl Store {
    /// Applies `txn` atomically and durably: when this returns `Ok`, every operation is
    /// persistent; on `Err`, none is. A device or KV error fails the store. Copies the
    /// transaction; [`Store::queue_transaction_owned`] avoids the copy.
    pub async fn queue_transaction(&self, txn: &Transaction) -> Result<()> {
        self.queue_transaction_owned(txn.clone()).await
    }

    /// As [`Store::queue_transaction`], taking ownership of the transaction.
    ///
    /// Transactions submitted concurrently are committed as a group (group commit): one device
    /// flush for all of them, each still atomic on its own (they are staged in submission
    /// order; one that fails is dropped from the group and the rest restaged). Up to
    /// `inflight::MAX_IN_FLIGHT` groups have their writes in flight at once.
    pub async fn queue_transaction_owned(&self, txn: Transaction) -> Result<()> {
        self.check_ok()?;
        self.check_limits(&txn)?;
        let (done, result) = oneshot::channel();
        let mut orphans = self.orphans.subscribe();
        let (writer, early) = self.plan_early(&txn).unzip();
        // Queued in submission order (groups commit in it), before any early write.
        self.commit_queue
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push_back(Pending { txn, done, early });
        if let Some(writer) = writer {
            self.write_early(writer).await;
        }
        let mut result = result;
        let dropped = || StoreError::Failed("transaction was dropped by the committer".into());
        // Either another submitter's group commit completes this transaction, or this task
        // becomes the committers' leader and commits what is queued (oldest first, up to the
        // group limits) as one group. Once the queue is found empty, another submitter has
        // taken this transaction: wait for its answer, or for a cancelled launcher's group to
        // finalize in its place.
        let mut taken = false;
        loop {
            tokio::select! {
                biased;
                r = &mut result => return r.map_err(|_| dropped())?,
                _ = orphans.changed(), if taken => {
                    let mut st = self.state.write().await;
                    self.finalize_ready(&mut st).await;
                }
                leader = self.commit_leader.lock(), if !taken => {
                    // Its transaction may have gone out in the group just finalized: then this
                    // submitter has nothing to lead, and must not wait to pace others' group.
                    match result.try_recv() {
                        Ok(r) => return r,
                        Err(oneshot::error::TryRecvError::Closed) => return Err(dropped()),
                        Err(oneshot::error::TryRecvError::Empty) => {}
                    }
                    // While a checkpoint runs the leader may wait before it forms its group
                    // (`throttle`): commits are paced to the checkpoint and slow down near the
                    // log's hard limit instead of stopping there.
                    let signal = &self.counters.checkpoint_signal;
                    let delay =
                        signal.delay_for(self.counters.backlog.get(), self.cfg.commit_pacing);
                    let t = Instant::now();
                    if signal.wait(delay).await {
                        elapsed_into(&self.counters.throttle_wait_ns, t);
                    }
                    // Groups commit in submission order: the next one starts only once the
                    // oldest queued transaction's early writes are done.
                    let t = Instant::now();
                    self.head_ready().await;
                    elapsed_into(&self.counters.early_wait_ns, t);
                    let mut st = self.make_room().await;
                    if self.last_group_txns.load(Ordering::Relaxed) > 1 {
                        // Concurrent submitters: the tasks ready in this runtime turn (an OSD's
                        // other ops) queue theirs first and share this group's flush. A lone
                        // submitter does not pay the extra turn.
                        tokio::task::yield_now().await;
                    }
                    let batch = self.take_batch();
                    if batch.is_empty() {
                        taken = true;
                        continue;
                    }
                    self.last_group_txns.store(batch.len(), Ordering::Relaxed);
                    let launched = self.commit_group(&mut st, batch).await;
                    self.note_free();
                    let Some((writes, launch)) = launched else {
                        continue;
                    };
                    // The group's writes and flush run without the lock (readers go on) and
                    // without the leader's place (the next group may form and, with room in
                    // the pipeline, start its own writes).
                    drop(st);
                    drop(leader);
                    let outcome = self.write_group(writes).await;
                    launch.written(&outcome);
                    let mut st = self.state_for_commit().await;
                    self.finalize_ready(&mut st).await;
                    launch.finalized();
                }
            }
        }
    }

    /// Waits until the oldest queued transaction, if any, has no early writes in flight.
    async fn head_ready(&self) {
        loop {
            let head = {
                let q = self.commit_queue.lock().unwrap_or_else(|p| p.into_inner());
                match q.front() {
                    Some(Pending { early: Some(h), .. }) if !h.is_ready() => h.clone(),
                    _ => return,
                }
            };
            head.ready().await;
        }
    }

    /// Takes queued transactions for one group, oldest first, up to `max_group_txns` and
    /// `max_txn_bytes`, stopping at one whose early writes are still in flight.
    fn take_batch(&self) -> Vec<Pending> {
        let mut q = self.commit_queue.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = Vec::new();
        let mut bytes = 0u64;
        while let Some(p) = q.front().filter(|p| p.is_ready()) {
            let b: u64 = p.txn.ops.iter().map(Op::data_bytes).sum();
            if !out.is_empty()
                && (out.len() >= self.cfg.max_group_txns || bytes + b > self.cfg.max_txn_bytes)
            {
                break;
            }
            bytes += b;
            if let Some(p) = q.pop_front() {
                out.push(p);
            }
        }
        out
    }

    /// Fails every waiter with `e` (the first gets the error itself, the rest a copy of its text).
    pub(crate) fn fail_all(&self, live: Vec<Pending>, e: StoreError) {
        let e = self.fatal(e);
        let text = e.to_string();
        let mut first = Some(e);
        for p in live {
            let err = first
                .take()
                .unwrap_or_else(|| StoreError::Failed(text.clone()));
            let _ = p.done.send(Err(err));
        }
    }

    /// Answers a durable group's submitters and counts it.
    fn acknowledge(&self, live: Vec<Pending>) {
        let user: u64 = live
            .iter()
            .flat_map(|p| p.txn.ops.iter())
            .map(Op::data_bytes)
            .sum();
        self.counters
            .user_bytes_written
            .fetch_add(user, Ordering::Relaxed);
        self.counters
            .commits
            .fetch_add(live.len() as u64, Ordering::Relaxed);
        self.counters.group_commits.fetch_add(1, Ordering::Relaxed);
        for p in live {
            let _ = p.done.send(Ok(()));
        }
    }

    /// Stages `live` as one group (restaging without a member that fails) over the groups in
    /// flight and commits it. A group that can be logged is placed in the ring and put in
    /// flight: its writes are returned for the caller to do without the lock, with the
    /// launcher's end of it. A group that cannot be logged first drains the pipeline, then is
    /// written, flushed, checkpointed and answered here (`None`); so is a group that failed.
    async fn commit_group<'s>(
        &'s self,
        st: &mut State,
        mut live: Vec<Pending>,
    ) -> Option<(GroupWrites, Launch<'s>)> {
        loop {
            if let Err(e) = self.check_ok() {
                self.fail_all(live, e);
                return None;
            }
            let snap = match st.overlay.snapshot(&self.db, &self.onode_keys) {
                Ok(s) => s,
                Err(e) => {
                    self.fail_all(live, e);
                    return None;
                }
            };
            debug_assert!(st.inflight.len() < MAX_IN_FLIGHT.min(self.cfg.max_groups_in_flight));
            let views: Vec<Arc<InFlightView>> =
                st.inflight.iter().map(|f| f.view.clone()).collect();
            let mut stage = Stage {
                inflight: views.clone(),
                ..Stage::default()
            };
            let t_stage = Instant::now();
            // Staging reads through the overlay while it changes the allocator in `st`.
            let overlay = std::mem::take(&mut st.overlay);
            let staged = async {
                let newest = views.last().map(|v| &v.redo);
                let mut t = Tables::open(&snap, &overlay, newest);
                for (i, p) in live.iter().enumerate() {
                    let placed = p.placed().map_err(|e| (i, e))?;
                    for (j, op) in p.txn.ops.iter().enumerate() {
                        let early = placed.as_ref().and_then(|pl| pl.runs_of(j));
                        self.stage_op(st, &mut stage, &mut t, op, early)
                            .await
                            .map_err(|e| (i, e))?;
                    }
                }
                for p in &stage.deferred_dropped {
                    t.deferred.remove(*p);
                }
                for (p, c) in &stage.deferred_new {
                    t.deferred
                        .insert(*p, codec::seal(c).as_slice())
                        .map_err(|e| (usize::MAX, e))?;
                }
                Ok::<_, (usize, StoreError)>(t.take_redo())
            }
            .await;
            st.overlay = overlay;
            drop(snap);
            let redo = match staged {
                Ok(redo) => redo,
                Err(failed) => match self.unstage(&mut stage, &mut live, failed) {
                    Some(()) => continue,
                    None => return None,
                },
            };
            elapsed_into(&self.counters.stage_ns, t_stage);
            for placed in live.iter().filter_map(|p| p.placed().ok().flatten()) {
                self.adopt_early(&placed);
            }
            return match self.place_group(st, &mut stage, live, redo).await {
                Ok(launched) => launched,
                Err((live, e)) => {
                    self.fail_all(live, e);
                    None
                }
            };
        }
    }

    /// Undoes a failed staging: returns the group's allocations and drops the member that failed
    /// (answering it with its error). `Some(())` when the rest of the group should be restaged;
    /// `None` when nothing is left to do (every waiter has been answered).
    fn unstage(
        &self,
        stage: &mut Stage,
        live: &mut Vec<Pending>,
        (i, e): (usize, StoreError),
    ) -> Option<()> {
        for (s, l) in std::mem::take(&mut stage.allocated) {
            if let Err(e) = self.allocator().release(s, l) {
                self.fail_all(std::mem::take(live), e);
                return None;
            }
        }
        if e.is_fatal() || i >= live.len() {
            self.fail_all(std::mem::take(live), e);
            return None;
        }
        let p = live.remove(i);
        // Its early blocks were written and are referenced by nothing: free again. (Early
        // writes that were abandoned may still be in flight: their blocks stay taken.)
        if let Some(placed) = p.early.as_ref().and_then(EarlyHandle::written) {
            if let Err(e) = self.release_early(&placed) {
                let _ = p.done.send(Err(StoreError::Failed(e.to_string())));
                self.fail_all(std::mem::take(live), e);
                return None;
            }
        }
        let _ = p.done.send(Err(e));
        (!live.is_empty()).then_some(())
    }

    /// Places a staged group's redo record in the ring and puts the group in flight, returning
    /// its writes. When no record can be logged (no log, record too large, ring or overlay
    /// full), drains the pipeline, writes and flushes the group's data, and finalizes it with a
    /// checkpoint (`Ok(None)`).
    async fn place_group<'s>(
        &'s self,
        st: &mut State,
        stage: &mut Stage,
        live: Vec<Pending>,
        redo: wal::Redo,
    ) -> std::result::Result<Option<(GroupWrites, Launch<'s>)>, (Vec<Pending>, StoreError)> {
        let bs = self.sb.block_bytes;
        let early = !stage.early_runs.is_empty();
        let mut runs: Vec<(u64, u64)> = stage
            .new_data
            .iter()
            .map(|(&s, b)| (s, b.len() as u64 / bs))
            .chain(std::mem::take(&mut stage.early_runs))
            .collect();
        runs.sort_unstable();
        let record_blocks = (wal::encoded_len(&redo, runs.len()) as u64).div_ceil(bs);
        let placed = match self.place_record(st, record_blocks).await {
            Ok(placed) => placed,
            Err(e) => return Err((live, e)),
        };
        let deferred_new: BTreeMap<u64, Arc<Vec<u8>>> = std::mem::take(&mut stage.deferred_new)
            .into_iter()
            .map(|(p, c)| (p, Arc::new(c)))
            .collect();
        let effects = GroupEffects {
            live,
            to_free: std::mem::take(&mut stage.to_free),
            deferred_dropped: std::mem::take(&mut stage.deferred_dropped),
            usage: std::mem::take(&mut stage.usage),
            created: std::mem::take(&mut stage.created),
        };
        let Some(pos) = placed else {
            // A checkpoint makes this group durable, and it must carry every group before it.
            if let Err(e) = self.drain(st).await {
                return Err((effects.live, e));
            }
            let writes = GroupWrites {
                record: None,
                runs: std::mem::take(&mut stage.new_data).into_iter().collect(),
                after: None,
                early,
            };
            if let Err(e) = self.write_group(writes).await {
                return Err((effects.live, e));
            }
            self.finalize(st, redo, deferred_new, effects, false).await;
            return Ok(None);
        };
        let record = wal::encode(self.sb.uuid, st.wal.next_seq, &redo, &runs, bs);
        let record = match self.bufs.build(&[&record]) {
            Ok(buf) => buf,
            Err(e) => return Err((effects.live, e)),
        };
        self.counters
            .wal_bytes_written
            .fetch_add(record.len() as u64, Ordering::Relaxed);
        self.counters.wal_records.fetch_add(1, Ordering::Relaxed);
        let writes = GroupWrites {
            record: Some((st.wal.first_block + pos, RunBuf::Owned(record))),
            runs: std::mem::take(&mut stage.new_data).into_iter().collect(),
            after: st.inflight.back().map(|f| f.view.written()),
            early,
        };
        let marker_before = st.wal.marker();
        let fill = st.wal.advance(pos, record_blocks);
        if !st.inflight.is_empty() {
            self.counters
                .groups_overlapped
                .fetch_add(1, Ordering::Relaxed);
        }
        let (view, launch) = self.launch(redo, deferred_new, runs);
        st.inflight.push_back(InFlight {
            view,
            effects,
            marker_before,
            fill,
        });
        Ok(Some((writes, launch)))
    }

    /// Where a record of `record_blocks` goes in the ring, or `None` when the group must
    /// checkpoint instead. Hard limits (a background checkpoint normally lands long before
    /// them): half the ring, twice the records of a checkpoint interval, the overlay's memory;
    /// at one, waits for a background checkpoint in flight and tries again.
    async fn place_record(&self, st: &mut State, record_blocks: u64) -> Result<Option<u64>> {
        let bs = self.sb.block_bytes;
        // A background checkpoint that has finished frees its frozen layer and its ring space.
        self.collect_checkpoint(st, false)?;
        let place = |st: &State| {
            (record_blocks * bs <= self.cfg.max_io_bytes
                && st.overlay.total_bytes() < self.cfg.max_overlay_bytes)
                .then(|| {
                    st.wal
                        .place(record_blocks, 2 * self.cfg.wal_checkpoint_records.max(1))
                })
                .flatten()
        };
        let mut placed = place(st);
        if placed.is_none() && st.checkpoint_job.is_some() {
            let t = Instant::now();
            self.wait_checkpoint(st).await?;
            elapsed_into(&self.counters.checkpoint_wait_ns, t);
            placed = place(st);
        }
        Ok(placed)
    }

    /// Does a group's writes and makes them durable with one flush (a group whose only write
    /// is its record, as when all its data went into it as deferred writes, writes it durably
    /// in one device operation instead). Behind a group in flight, the copy-on-write runs are
    /// written at once but the record only after that group's flush: so only the last record
    /// on the device can lack its data (what mount checks), however many groups are in flight.
    pub(crate) async fn write_group(&self, writes: GroupWrites) -> Result<()> {
        let GroupWrites {
            record,
            mut runs,
            after,
            early,
        } = writes;
        let bs = self.sb.block_bytes;
        let t = Instant::now();
        if let Some(before) = after {
            if !runs.is_empty() {
                self.write_runs(std::mem::take(&mut runs)).await?;
            }
            before.wait().await?;
        }
        // The ring lies before the data area, so the record goes first in block order.
        let mut ios: Vec<(u64, RunBuf)> = record.into_iter().chain(runs).collect();
        match ios.pop() {
            // One durable write makes only itself durable: not with early data to flush.
            Some((block, RunBuf::Owned(buf))) if ios.is_empty() && !early => {
                elapsed_into(&self.counters.data_write_ns, t);
                let t = Instant::now();
                self.dev_write_durable(block * bs, buf).await?;
                elapsed_into(&self.counters.device_flush_ns, t);
            }
            None if !early => {}
            None => {
                let t = Instant::now();
                self.dev_flush().await?;
                elapsed_into(&self.counters.device_flush_ns, t);
            }
            Some(last) => {
                ios.push(last);
                self.write_runs(ios).await?;
                elapsed_into(&self.counters.data_write_ns, t);
                let t = Instant::now();
                self.dev_flush().await?;
                elapsed_into(&self.counters.device_flush_ns, t);
            }
        }
        Ok(())
    }

    /// Finalizes a durable group (logged, or about to be checkpointed when not): its changes
    /// join the overlay, the objects it touched leave the onode cache, its freed blocks return
    /// to the allocator, its deferred writes become visible, then [`Store::after_commit`], and
    /// its submitters are answered.
    pub(crate) async fn finalize(
        &self,
        st: &mut State,
        redo: wal::Redo,
        deferred_new: BTreeMap<u64, Arc<Vec<u8>>>,
        effects: GroupEffects,
        logged: bool,
    ) {
        let GroupEffects {
            live,
            to_free,
            deferred_dropped,
            usage,
            created,
        } = effects;
        let fresh: Vec<_> = created
            .iter()
            .filter_map(|c| Some((c, self.created_meta(&redo, c)?)))
            .collect();
        st.overlay.absorb(redo);
        for p in &live {
            for (coll, obj) in p.objects() {
                self.onode_cache.invalidate(coll, obj);
            }
        }
        // Objects the group created are cached as it left them: a read soon after the write
        // finds them (the entries are exactly the committed state, built under the lock).
        for (c, meta) in fresh {
            self.onode_cache.insert(&c.coll, &c.name, Arc::new(meta));
        }
        for &(start, len) in &to_free {
            if let Err(e) = self.release_freed(st, start, len) {
                let e = StoreError::Failed(format!("allocator inconsistent after commit: {e}"));
                return self.fail_all(live, e);
            }
        }
        for p in &deferred_dropped {
            st.deferred.remove(p);
        }
        st.deferred.extend(deferred_new);
        let (objects_delta, stored_delta) = usage.totals();
        st.objects = st.objects.saturating_add_signed(objects_delta);
        st.stored_bytes = st.stored_bytes.saturating_add_signed(stored_delta);
        st.usage.apply(&usage);
        if let Err(e) = self.after_commit(st, logged).await {
            return self.fail_all(live, e);
        }
        self.acknowledge(live);
    }

    /// The onode cache entry of an object the group created, from its redo record alone (the
    /// object had nothing in the KV before it): its size, every extent, and the attributes it
    /// was given. `None` when the group removed it again, its extent map is too large to cache,
    /// or a record does not decode (then it is simply not cached).
    fn created_meta(&self, redo: &wal::Redo, c: &CreatedObject) -> Option<CachedObject> {
        let mut node = Onode::decode(redo.tables[REDO_ONODES].get(&c.key)?.as_deref()?).ok()?;
        let blocks = node.size_bytes.div_ceil(self.sb.block_bytes);
        if node.extents_spilled && blocks.saturating_mul(4) > MAX_CACHED_EXTENT_BYTES as u64 {
            return None;
        }
        let end = prefix_end(&c.prefix);
        let under = |table: usize| {
            let upper = end.as_deref().map_or(Bound::Unbounded, Bound::Excluded);
            redo.tables[table]
                .range::<[u8], _>((Bound::Included(c.prefix.as_slice()), upper))
                .filter_map(|(k, v)| Some((k, v.as_ref()?)))
        };
        let mut extents = std::mem::take(&mut node.extents);
        // Object prefixes are unambiguous (`codec::object_prefix`): every key in the range is
        // this object's.
        if node.extents_spilled {
            for (k, v) in under(REDO_EXTENTS) {
                let (_, lblock) = split_block_key(k).ok()?;
                extents.push(Extent::decode(lblock, v).ok()?);
            }
        }
        let meta = CachedObject::new(node, Some(extents));
        for (k, v) in under(REDO_XATTRS) {
            let name = std::str::from_utf8(&k[c.prefix.len()..]).ok()?;
            meta.remember_attr(name, Some(codec::open(v, "xattr value").ok()?));
        }
        Some(meta)
    }

    /// What follows a group's commit once the in-memory state (freed blocks, pending deferred
    /// writes) reflects it, so that a checkpoint's view of the pending deferred writes matches
    /// the overlay it commits. A group that could not be logged is durable only after a
    /// checkpoint, which also applies the pending deferred writes once there are enough; a
    /// logged one starts a background checkpoint when one is due.
    /// Notes how close the store is to making commits wait for a checkpoint (see
    /// [`Store::commit_backlog`]).
    pub(crate) fn note_backlog(&self, st: &State) {
        let ring = st.wal.backlog(self.cfg.wal_checkpoint_records);
        let overlay = st.overlay.total_bytes() as f64 / self.cfg.max_overlay_bytes.max(1) as f64;
        self.counters.backlog.set(ring.max(overlay));
    }

    /// How close commits are to waiting for a checkpoint, 0 to 1: the records logged since
    /// the last durable checkpoint against the limits at which a group waits for one (twice
    /// `wal_checkpoint_records`, half the ring) and the overlay's memory against
    /// `max_overlay_bytes`. Background work that writes or reads this store's device slows
    /// its checkpoints; an OSD holds it back while this climbs, before clients stall.
    pub fn commit_backlog(&self) -> f64 {
        self.counters.backlog.get()
    }

    /// A handle on [`Store::commit_backlog`] that outlives borrows of the store.
    pub fn backlog_gauge(&self) -> crate::store::BacklogGauge {
        self.counters.backlog.clone()
    }

    async fn after_commit(&self, st: &mut State, logged: bool) -> Result<()> {
        self.note_backlog(st);
        let deferred_due =
            st.deferred.len() as u64 * self.sb.block_bytes >= self.cfg.deferred_batch_bytes;
        if !logged {
            let t = Instant::now();
            if deferred_due {
                self.apply_deferred(st).await?;
            } else {
                self.checkpoint(st, Vec::new()).await?;
            }
            elapsed_into(&self.counters.checkpoint_wait_ns, t);
        } else if deferred_due
            || st.wal.checkpoint_due(self.cfg.wal_checkpoint_records)
            || st.overlay.bytes >= self.cfg.max_overlay_bytes / 2
        {
            self.start_checkpoint(st).await?;
        }
        Ok(())
    }

    fn check_name(&self, what: &str, name: &str) -> Result<()> {
        if name.is_empty() || name.len() > self.cfg.max_name_bytes {
            return Err(StoreError::Limit(format!(
                "{what} name of {} bytes (must be 1..={})",
                name.len(),
                self.cfg.max_name_bytes
            )));
        }
        Ok(())
    }

    fn check_limits(&self, txn: &Transaction) -> Result<()> {
        if txn.ops.len() > self.cfg.max_txn_ops {
            return Err(StoreError::Limit(format!(
                "{} ops > {}",
                txn.ops.len(),
                self.cfg.max_txn_ops
            )));
        }
        let bytes: u64 = txn.ops.iter().map(Op::data_bytes).sum();
        if bytes > self.cfg.max_txn_bytes {
            return Err(StoreError::Limit(format!(
                "{bytes} bytes > {}",
                self.cfg.max_txn_bytes
            )));
        }
        let value_ok = |v: &[u8]| v.len() <= self.cfg.max_value_bytes;
        for op in &txn.ops {
            match op {
                Op::CreateCollection { coll } | Op::RemoveCollection { coll } => {
                    self.check_name("collection", coll)?
                }
                Op::Touch { coll, obj }
                | Op::Remove { coll, obj }
                | Op::Write { coll, obj, .. }
                | Op::Zero { coll, obj, .. }
                | Op::Truncate { coll, obj, .. }
                | Op::RmAttr { coll, obj, .. }
                | Op::OmapRemove { coll, obj, .. } => {
                    self.check_name("collection", coll)?;
                    self.check_name("object", obj)?;
                }
                Op::SetAttr {
                    coll,
                    obj,
                    name,
                    value,
                } => {
                    self.check_name("collection", coll)?;
                    self.check_name("object", obj)?;
                    self.check_name("attribute", name)?;
                    if !value_ok(value) {
                        return Err(StoreError::Limit(format!(
                            "attribute value of {} bytes",
                            value.len()
                        )));
                    }
                }
                Op::OmapSet { coll, obj, entries } => {
                    self.check_name("collection", coll)?;
                    self.check_name("object", obj)?;
                    if entries
                        .iter()
                        .any(|(k, v)| k.len() > self.cfg.max_name_bytes || !value_ok(v))
                    {
                        return Err(StoreError::Limit("omap key or value too large".into()));
                    }
                }
                Op::Clone { coll, src, dst } | Op::Rename { coll, src, dst } => {
                    self.check_name("collection", coll)?;
                    self.check_name("object", src)?;
                    self.check_name("object", dst)?;
                }
            }
            let end = match op {
                Op::Write {
                    offset_bytes, data, ..
                } => offset_bytes.checked_add(data.len() as u64),
                Op::Zero {
                    offset_bytes,
                    len_bytes,
                    ..
                } => offset_bytes.checked_add(*len_bytes),
                Op::Truncate { size_bytes, .. } => Some(*size_bytes),
                _ => Some(0),
            };
            if end.is_none_or(|e| e > self.cfg.max_object_bytes) {
                return Err(StoreError::Limit(format!(
                    "object would exceed {} bytes",
                    self.cfg.max_object_bytes
                )));
            }
        }
        Ok(())
    }
}
