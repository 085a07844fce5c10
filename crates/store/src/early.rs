//! Early writes: a large block-aligned write's data placed and written by its submitter before
//! its group forms, so that a group commit writes only its log record and flushes (BlueStore's
//! order: data first, then the metadata commit).
//!
//! Without them a group writes its copy-on-write data only once launched, and with at most
//! `max_groups_in_flight` groups the device holds at most that many groups' data while every
//! other submitter waits in the queue. With them every submitter's data is on its way to the
//! device as soon as it is submitted, however many groups are ahead.
//!
//! Owns choosing which writes go early, taking their blocks from the allocator (blocks that no
//! committed or staged metadata references; under the allocator's own lock, so readers are
//! not held up), writing them, and telling the group that stages
//! the transaction where they went and with which checksums. Crash model: until the group's
//! record and flush, nothing references the blocks, so a crash leaves them free; the group's
//! flush is issued after the early writes completed, so it makes them durable with the record,
//! and the record lists them among its runs so that mount discards a last record whose early
//! data did not land. It must never let a group stage a transaction before its early writes
//! have completed, never reuse an early block whose write may still be in flight (an abandoned
//! early write leaks its blocks until the next mount instead), and never change the order in
//! which transactions commit (a queued transaction waits for the early writes of every one
//! before it).

use crate::bufpool::{RunBuf, IO_ALIGN_BYTES};
use crate::error::{Result, StoreError};
use crate::store::Store;
use crate::txn::{DataCrcs, Op, Transaction};
use bytes::Bytes;
use cairn_convert::usize_of;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::sync::watch;

/// One run of an early write: `blocks` blocks from physical block `pblock`, with their crc32c.
#[derive(Debug)]
pub(crate) struct EarlyRun {
    pub(crate) pblock: u64,
    pub(crate) blocks: u64,
    pub(crate) crcs: Vec<u32>,
}

/// Where a transaction's early writes went: per operation index, its runs in logical order.
#[derive(Debug, Default)]
pub(crate) struct Placed {
    by_op: Vec<(usize, Vec<EarlyRun>)>,
    /// Blocks taken from the allocator, in all.
    pub(crate) blocks: u64,
}

impl Placed {
    /// The runs operation `op` was written to, if it was written early.
    pub(crate) fn runs_of(&self, op: usize) -> Option<&[EarlyRun]> {
        self.by_op
            .iter()
            .find(|(i, _)| *i == op)
            .map(|(_, runs)| runs.as_slice())
    }

    /// Every run `(first block, blocks)`.
    pub(crate) fn runs(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.by_op
            .iter()
            .flat_map(|(_, runs)| runs.iter().map(|r| (r.pblock, r.blocks)))
    }
}

/// State of a transaction's early writes: `None` while they are in flight; the placement once
/// written; an error's text when they failed.
type Outcome = Option<std::result::Result<Arc<Placed>, String>>;

/// The queued transaction's end: whether its early writes are done, and where they went.
#[derive(Debug, Clone)]
pub(crate) struct EarlyHandle(watch::Receiver<Outcome>);

impl EarlyHandle {
    /// Whether the early writes are over (written, failed, or abandoned by a cancelled
    /// submitter): the transaction may be staged.
    pub(crate) fn is_ready(&self) -> bool {
        self.0.borrow().is_some() || self.0.has_changed().is_err()
    }

    /// Waits until [`EarlyHandle::is_ready`].
    pub(crate) async fn ready(&self) {
        let mut rx = self.0.clone();
        let _ = rx.wait_for(Option::is_some).await;
    }

    /// Where the writes went. An error when they failed (the store has failed) or were
    /// abandoned (the transaction must not commit: its data may not have been written).
    pub(crate) fn placed(&self) -> Result<Arc<Placed>> {
        match &*self.0.borrow() {
            Some(Ok(placed)) => Ok(placed.clone()),
            Some(Err(e)) => Err(StoreError::Failed(e.clone())),
            None => Err(StoreError::Cancelled(
                "its submitter was dropped while its data was being written".into(),
            )),
        }
    }

    /// The placement, when the writes completed.
    pub(crate) fn written(&self) -> Option<Arc<Placed>> {
        self.placed().ok()
    }
}

/// One operation to write early: its index, its bytes, their checksums if the caller gave them.
struct EarlyOp {
    index: usize,
    data: Bytes,
    crcs: Option<DataCrcs>,
}

/// Blocks taken for each planned write, in order: its extents `(first block, blocks)`.
type Taken = Vec<Vec<(u64, u64)>>;

/// The submitter's end: the data to write and where to report.
pub(crate) struct EarlyWriter {
    ops: Vec<EarlyOp>,
    tx: watch::Sender<Outcome>,
}

impl Store {
    /// The early-write plan for `txn`: its writes of at least `early_write_min_bytes` (and
    /// `deferred_max_bytes`) at a block-aligned offset and length, or `None` when it has none.
    pub(crate) fn plan_early(&self, txn: &Transaction) -> Option<(EarlyWriter, EarlyHandle)> {
        if self.cfg.early_write_min_bytes == 0 {
            return None;
        }
        let bs = self.sb.block_bytes;
        let min = self
            .cfg
            .early_write_min_bytes
            .max(self.cfg.deferred_max_bytes)
            .max(1);
        let ops: Vec<EarlyOp> = txn
            .ops
            .iter()
            .enumerate()
            .filter_map(|(index, op)| match op {
                Op::Write {
                    offset_bytes,
                    data,
                    crcs,
                    ..
                } if data.len() as u64 >= min
                    && offset_bytes.is_multiple_of(bs)
                    && (data.len() as u64).is_multiple_of(bs) =>
                {
                    let crcs = crcs
                        .as_ref()
                        .filter(|c| {
                            c.block_bytes == bs && c.crcs.len() as u64 == data.len() as u64 / bs
                        })
                        .cloned();
                    Some(EarlyOp {
                        index,
                        data: data.clone(),
                        crcs,
                    })
                }
                _ => None,
            })
            .collect();
        if ops.is_empty() {
            return None;
        }
        let (tx, rx) = watch::channel(None);
        Some((EarlyWriter { ops, tx }, EarlyHandle(rx)))
    }

    /// Takes blocks for the planned writes, writes them, and reports where they went. Without
    /// room (or buffers) for all of them none is written early: the group then stages the
    /// writes as usual and reports the shortage if there is one. A device error fails the store.
    pub(crate) async fn write_early(&self, writer: EarlyWriter) {
        let EarlyWriter { ops, tx } = writer;
        let outcome = self.place_and_write(&ops).await;
        tx.send_replace(Some(outcome.map_err(|e| e.to_string())));
    }

    async fn place_and_write(&self, ops: &[EarlyOp]) -> Result<Arc<Placed>> {
        let Some(extents) = self.take_early_blocks(ops)? else {
            return Ok(Arc::default());
        };
        let Ok((ios, placed)) = self.early_ios(ops, &extents) else {
            self.give_back_early(&extents)?;
            return Ok(Arc::default());
        };
        let written = self.write_counted(ios).await?;
        self.counters
            .early_write_bytes
            .fetch_add(written, Ordering::Relaxed);
        Ok(Arc::new(placed))
    }

    /// Blocks for every planned write (extents per write, in order), or `None` when they do
    /// not all fit. Takes only the allocator's lock (not the store's: readers go on).
    fn take_early_blocks(&self, ops: &[EarlyOp]) -> Result<Option<Taken>> {
        let bs = self.sb.block_bytes;
        let mut alloc = self.allocator();
        let mut extents = Vec::with_capacity(ops.len());
        for op in ops {
            match alloc.allocate(op.data.len() as u64 / bs) {
                Ok(e) => extents.push(e),
                Err(_) => {
                    for (s, l) in extents.into_iter().flatten() {
                        alloc.release(s, l).map_err(|e| self.inconsistent(e))?;
                    }
                    return Ok(None);
                }
            }
        }
        let blocks: u64 = extents.iter().flatten().map(|&(_, l)| l).sum();
        // Counted under the allocator's lock, so fsck sees both or neither.
        self.early_blocks.fetch_add(blocks, Ordering::Relaxed);
        drop(alloc);
        self.note_free();
        Ok(Some(extents))
    }

    /// Returns early blocks that were never written (nothing can be reading them).
    fn give_back_early(&self, extents: &Taken) -> Result<()> {
        let mut alloc = self.allocator();
        for &(s, l) in extents.iter().flatten() {
            alloc.release(s, l).map_err(|e| self.inconsistent(e))?;
            self.early_blocks.fetch_sub(l, Ordering::Relaxed);
        }
        drop(alloc);
        self.note_free();
        Ok(())
    }

    fn inconsistent(&self, e: StoreError) -> StoreError {
        self.fatal(StoreError::Failed(format!("allocator inconsistent: {e}")))
    }

    /// The device writes of the planned writes on `extents` (runs of at most `max_io_bytes`),
    /// and the placement they make.
    fn early_ios(&self, ops: &[EarlyOp], extents: &Taken) -> Result<(Vec<(u64, RunBuf)>, Placed)> {
        let bs = self.sb.block_bytes;
        let max_run = (self.cfg.max_io_bytes / bs).max(1);
        let mut ios = Vec::new();
        let mut placed = Placed {
            blocks: extents.iter().flatten().map(|&(_, l)| l).sum(),
            ..Placed::default()
        };
        for (op, exts) in ops.iter().zip(extents) {
            let aligned = (op.data.as_ptr() as usize).is_multiple_of(IO_ALIGN_BYTES);
            let mut runs = Vec::new();
            let mut at = 0usize;
            for &(p, len) in exts {
                let mut done = 0;
                while done < len {
                    let n = (len - done).min(max_run);
                    let end = at + usize_of(n * bs);
                    let (buf, crcs) = self.early_run(op, at, end, aligned)?;
                    ios.push(((p + done) * bs, buf));
                    runs.push(EarlyRun {
                        pblock: p + done,
                        blocks: n,
                        crcs,
                    });
                    at = end;
                    done += n;
                }
            }
            placed.by_op.push((op.index, runs));
        }
        Ok((ios, placed))
    }

    /// Releases the blocks of a transaction whose early writes completed but which did not
    /// commit (it failed to stage).
    pub(crate) fn release_early(&self, placed: &Placed) -> Result<()> {
        let mut alloc = self.allocator();
        for (s, l) in placed.runs() {
            alloc.release(s, l).map_err(|e| self.inconsistent(e))?;
        }
        self.early_blocks
            .fetch_sub(placed.blocks, Ordering::Relaxed);
        Ok(())
    }

    /// Notes that a staged transaction's early blocks are now the group's (referenced by its
    /// metadata once it commits).
    pub(crate) fn adopt_early(&self, placed: &Placed) {
        let _alloc = self.allocator();
        self.early_blocks
            .fetch_sub(placed.blocks, Ordering::Relaxed);
    }

    /// Bytes `a..b` of an early write as a device buffer (the caller's own bytes when aligned,
    /// else a copy) with their per-block crc32c (the caller's when given).
    fn early_run(
        &self,
        op: &EarlyOp,
        a: usize,
        b: usize,
        aligned: bool,
    ) -> Result<(RunBuf, Vec<u32>)> {
        let bs = usize_of(self.sb.block_bytes);
        if !aligned {
            let (buf, crcs) = self.bufs.build_checksummed(&[&op.data[a..b]], bs)?;
            return Ok((RunBuf::Owned(buf), crcs));
        }
        let run = op.data.slice(a..b);
        let crcs = match &op.crcs {
            Some(k) => k.crcs[a / bs..b / bs].to_vec(),
            None => run.chunks(bs).map(crc_fast::crc32_iscsi).collect(),
        };
        Ok((RunBuf::Shared(run), crcs))
    }
}
