//! Applying transactions: group commit, limits, and the stage-write-flush-commit sequence
//! described in `store` (staging itself is `stage`'s job).
//!
//! Owns the order that makes a group durable and atomic: stage every transaction over the
//! overlay (restaging without a member that fails), write the new blocks together with the
//! group's redo record in the write-ahead log, flush the device (the commit point), take the
//! changes into the overlay, then release freed blocks and forget the touched objects' cached
//! metadata. When no record can be logged (no log, record too large, checkpoint due) the group
//! is a checkpoint instead: write and flush the data, then commit the overlay to the KV durably
//! with the log's marker. It must never write to the device before the whole group has staged successfully,
//! and never release a block before the commit that stops referencing it.

use crate::bufpool::RunBuf;
use crate::codec;
use crate::error::{kv, Result, StoreError};
use crate::stage::{Stage, Tables};
use crate::store::{State, Store};
use crate::txn::{Op, Transaction};
use crate::wal;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::oneshot;

fn elapsed_into(counter: &AtomicU64, since: Instant) {
    counter.fetch_add(since.elapsed().as_nanos() as u64, Ordering::Relaxed);
}

/// A transaction waiting for its group commit.
#[derive(Debug)]
pub(crate) struct Pending {
    txn: Transaction,
    done: oneshot::Sender<Result<()>>,
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
    /// flush and one KV commit for all of them, each still atomic on its own (they are staged in
    /// submission order; one that fails is dropped from the group and the rest restaged).
    pub async fn queue_transaction_owned(&self, txn: Transaction) -> Result<()> {
        self.check_ok()?;
        self.check_limits(&txn)?;
        let (done, result) = oneshot::channel();
        self.commit_queue
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push_back(Pending { txn, done });
        let mut result = result;
        let dropped = || StoreError::Failed("transaction was dropped by the committer".into());
        // Either another submitter's group commit completes this transaction, or this task gets
        // the write lock and commits what is queued (oldest first, up to the group limits) as one
        // group. Repeat until this transaction is done: a full group may not have included it.
        loop {
            tokio::select! {
                biased;
                r = &mut result => return r.map_err(|_| dropped())?,
                mut st = self.state.write() => {
                    if st.last_group_txns > 1 {
                        // Concurrent submitters: the tasks ready in this runtime turn (an OSD's
                        // other ops) queue theirs first and share this group's flush. A lone
                        // submitter does not pay the extra turn.
                        tokio::task::yield_now().await;
                    }
                    let batch = self.take_batch();
                    if !batch.is_empty() {
                        st.last_group_txns = batch.len();
                        self.commit_group(&mut st, batch).await;
                    }
                }
            }
        }
    }

    /// Takes queued transactions for one group, up to `max_group_txns` and `max_txn_bytes`.
    fn take_batch(&self) -> Vec<Pending> {
        let mut q = self.commit_queue.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = Vec::new();
        let mut bytes = 0u64;
        while let Some(p) = q.front() {
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
    fn fail_all(&self, live: Vec<Pending>, e: StoreError) {
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

    async fn commit_group(&self, st: &mut State, mut live: Vec<Pending>) {
        loop {
            if let Err(e) = self.check_ok() {
                return self.fail_all(live, e);
            }
            let rtx = match self.db.begin_read() {
                Ok(r) => r,
                Err(e) => return self.fail_all(live, kv(e)),
            };
            let mut stage = Stage::default();
            let t_stage = Instant::now();
            // Staging reads through the overlay while it changes the allocator in `st`.
            let overlay = std::mem::take(&mut st.overlay);
            let staged = async {
                let mut t = Tables::open(&rtx, &overlay).map_err(|e| (usize::MAX, e))?;
                for (i, p) in live.iter().enumerate() {
                    for op in &p.txn.ops {
                        self.stage_op(st, &mut stage, &mut t, op)
                            .await
                            .map_err(|e| (i, e))?;
                    }
                }
                for p in &stage.deferred_dropped {
                    t.deferred.remove(*p).map_err(|e| (usize::MAX, e))?;
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
            drop(rtx);
            let redo = match staged {
                Ok(redo) => redo,
                Err(failed) => match self.unstage(st, &mut stage, &mut live, failed) {
                    Some(()) => continue,
                    None => return,
                },
            };
            elapsed_into(&self.counters.stage_ns, t_stage);
            let logged = match self.commit_staged(st, &mut stage, redo).await {
                Ok(logged) => logged,
                Err(e) => return self.fail_all(live, e),
            };
            for p in &live {
                self.forget_cached(&p.txn);
            }
            for &(start, len) in &stage.to_free {
                if let Err(e) = self.release_freed(st, start, len) {
                    let e = StoreError::Failed(format!("allocator inconsistent after commit: {e}"));
                    return self.fail_all(live, e);
                }
            }
            for p in &stage.deferred_dropped {
                st.deferred.remove(p);
            }
            for (p, c) in std::mem::take(&mut stage.deferred_new) {
                st.deferred.insert(p, Arc::new(c));
            }
            st.objects = st.objects.saturating_add_signed(stage.objects_delta);
            st.stored_bytes = st.stored_bytes.saturating_add_signed(stage.stored_delta);
            if let Err(e) = self.after_commit(st, logged).await {
                return self.fail_all(live, e);
            }
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
            return;
        }
    }

    /// Undoes a failed staging: returns the group's allocations and drops the member that failed
    /// (answering it with its error). `Some(())` when the rest of the group should be restaged;
    /// `None` when nothing is left to do (every waiter has been answered).
    fn unstage(
        &self,
        st: &mut State,
        stage: &mut Stage,
        live: &mut Vec<Pending>,
        (i, e): (usize, StoreError),
    ) -> Option<()> {
        for (s, l) in std::mem::take(&mut stage.allocated) {
            if let Err(e) = st.alloc.release(s, l) {
                self.fail_all(std::mem::take(live), e);
                return None;
            }
        }
        if e.is_fatal() || i >= live.len() {
            self.fail_all(std::mem::take(live), e);
            return None;
        }
        let p = live.remove(i);
        let _ = p.done.send(Err(e));
        (!live.is_empty()).then_some(())
    }

    /// Writes a staged group: its data and redo record in one device write batch and one flush,
    /// its changes then taken into the overlay (no KV commit). Returns whether it was logged;
    /// when no record can be logged (no log, record too large, ring or overlay full), only its
    /// data is written and flushed, and the group is durable only after the checkpoint that
    /// [`Store::after_commit`] then makes.
    async fn commit_staged(
        &self,
        st: &mut State,
        stage: &mut Stage,
        redo: wal::Redo,
    ) -> Result<bool> {
        let bs = self.sb.block_bytes;
        let runs: Vec<(u64, u64)> = stage
            .new_data
            .iter()
            .map(|(&s, b)| (s, b.len() as u64 / bs))
            .collect();
        let record_blocks = (wal::encoded_len(&redo, runs.len()) as u64).div_ceil(bs);
        // A background checkpoint that has finished frees its frozen layer and its ring space.
        self.collect_checkpoint(st, false)?;
        // Hard limits (a background checkpoint normally lands long before them): half the ring,
        // twice the records of a checkpoint interval, the overlay's memory.
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
        let mut ios: Vec<(u64, RunBuf)> = Vec::with_capacity(runs.len() + 1);
        if let Some(pos) = placed {
            let record = wal::encode(self.sb.uuid, st.wal.next_seq, &redo, &runs, bs);
            self.counters
                .wal_bytes_written
                .fetch_add(record.len() as u64, Ordering::Relaxed);
            // The ring lies before the data area, so the record goes first in block order.
            ios.push((
                st.wal.first_block + pos,
                RunBuf::Owned(self.bufs.build(&[&record])?),
            ));
        }
        ios.extend(std::mem::take(&mut stage.new_data));
        match ios.pop() {
            // One write (a group whose data all went into its record as deferred writes): made
            // durable by itself, which is the flush of this group.
            Some((block, RunBuf::Owned(buf))) if ios.is_empty() => {
                let t = Instant::now();
                self.dev_write_durable(block * bs, buf).await?;
                elapsed_into(&self.counters.device_flush_ns, t);
            }
            Some(last) => {
                ios.push(last);
                let t = Instant::now();
                self.write_runs(ios).await?;
                elapsed_into(&self.counters.data_write_ns, t);
                let t = Instant::now();
                self.dev_flush().await?;
                elapsed_into(&self.counters.device_flush_ns, t);
            }
            None => {}
        }
        st.overlay.absorb(redo);
        if let Some(pos) = placed {
            st.wal.advance(pos, record_blocks);
            self.counters.wal_records.fetch_add(1, Ordering::Relaxed);
        }
        Ok(placed.is_some())
    }

    /// What follows a group's commit once the in-memory state (freed blocks, pending deferred
    /// writes) reflects it, so that a checkpoint's view of the pending deferred writes matches
    /// the overlay it commits. A group that could not be logged is durable only after a
    /// checkpoint, which also applies the pending deferred writes once there are enough; a
    /// logged one starts a background checkpoint when one is due.
    async fn after_commit(&self, st: &mut State, logged: bool) -> Result<()> {
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

    /// Drops the cached metadata of every object `txn` may have changed.
    fn forget_cached(&self, txn: &Transaction) {
        for op in &txn.ops {
            match op {
                Op::CreateCollection { .. } | Op::RemoveCollection { .. } => {}
                Op::Touch { coll, obj }
                | Op::Remove { coll, obj }
                | Op::Write { coll, obj, .. }
                | Op::Zero { coll, obj, .. }
                | Op::Truncate { coll, obj, .. }
                | Op::SetAttr { coll, obj, .. }
                | Op::RmAttr { coll, obj, .. }
                | Op::OmapSet { coll, obj, .. }
                | Op::OmapRemove { coll, obj, .. } => self.onode_cache.invalidate(coll, obj),
                Op::Clone { coll, src, dst } | Op::Rename { coll, src, dst } => {
                    self.onode_cache.invalidate(coll, src);
                    self.onode_cache.invalidate(coll, dst);
                }
            }
        }
    }
}
