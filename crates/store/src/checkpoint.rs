//! Checkpoints: committing the overlay to redb with the log's marker (in the foreground, or the
//! frozen layer on a thread of its own), and applying committed deferred writes in place before
//! the checkpoint that lets the log forget them.
//!
//! Owns two orders that keep deferred writes safe. A checkpoint's marker passes a record only
//! when every deferred write that record carries is durable in place (written and flushed) or
//! still in the KV: a background checkpoint writes the deferred writes pending at its freeze,
//! flushes, and only then commits the frozen layer without them. And no block such a checkpoint
//! may still write is reused: a run freed while it runs that holds one of its blocks is released
//! only after it has finished. It must never write a block except one that a committed deferred
//! write targets.

use crate::bufpool::{BufPool, RunBuf};
use crate::error::{kv, Result, StoreError};
use crate::keyfilter::KeyFilter;
use crate::kv::{DEFERRED, META};
use crate::logged;
use crate::overlay::{Frozen, Overlay, Thawed};
use crate::pins::ReadPins;
use crate::store::{blocking, write_ios, State, Store};
use crate::wal::{self, Marker};
use cairn_blockdev::BlockDevice;
use cairn_convert::usize_of;
use redb::Database;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// Largest I/O a checkpoint writes deferred contents in place with, one at a time: the group
/// commits' durable record writes share the device and queue behind whatever is in flight
/// (1 OSD, 4 KiB writes: with up to 32 I/Os of 1 MiB, one record write in five took over
/// 0.5 ms while a checkpoint wrote, one in a hundred so paced).
const PACED_IO_BYTES: u64 = 256 << 10;

/// Committed deferred writes as `(physical block, new contents)`, sorted by block.
type DeferredWrites = Arc<[(u64, Arc<Vec<u8>>)]>;

/// What a background checkpoint did, reported when it is taken in.
#[derive(Debug, Default)]
struct JobDone {
    elapsed: Duration,
    bytes_written: u64,
    flushes: u64,
}

/// A checkpoint committing the overlay's frozen layer to redb on a thread of its own, after
/// applying the deferred writes pending at the freeze; group commits go on meanwhile (they log
/// into the ring after its marker and fill the live layer).
#[derive(Debug)]
pub(crate) struct CheckpointJob {
    thread: std::thread::JoinHandle<Result<JobDone>>,
    /// Closed when the thread ends, so that waiting for it never blocks the runtime (whose
    /// device I/O the thread may be waiting for).
    finished: oneshot::Receiver<()>,
    /// The ring's fill at the freeze: what the checkpoint frees once durable.
    fill: wal::RingFill,
    /// The deferred writes it applies.
    applying: DeferredWrites,
    /// Freed runs holding a block it applies: released once it has finished.
    quarantine: Vec<(u64, u64)>,
    /// Tells the thread to stop before its next device write, flush or KV commit.
    stop: Arc<AtomicBool>,
}

impl CheckpointJob {
    /// Whether the job may write any block of `start..start + len`.
    fn writes_any(&self, start: u64, len: u64) -> bool {
        let i = self.applying.partition_point(|(p, _)| *p < start);
        self.applying
            .get(i)
            .is_some_and(|(p, _)| *p < start.saturating_add(len))
    }

    /// Stops the thread at its next step and waits for it (for a store being dropped: what it
    /// left undone is replayed from the log at the next mount). A device whose I/O needs the
    /// dropping thread's own runtime to make progress (the emulated device's timers on a
    /// current-thread runtime) would make this wait forever; cairn's daemons and benches run
    /// such devices on multi-threaded runtimes.
    pub(crate) fn abandon(self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.thread.join();
    }
}

/// What a checkpoint taken in leaves to free: its frozen layer, the snapshot read under it, and
/// the contents of the deferred writes it applied (thousands of allocations). Freed by the next
/// checkpoint's thread, not under the store's lock, where it held every commit and read for
/// 0.2-0.3 ms per checkpoint (1 OSD, 4 KiB writes: one checkpoint every ~60 ms). At most one
/// is held; a foreground checkpoint frees it too.
#[derive(Debug)]
pub(crate) struct Retired {
    _thawed: Thawed,
    _applied: DeferredWrites,
}

/// Everything the checkpoint thread needs, owned.
struct JobInput {
    /// The previous checkpoint's leftovers, freed first.
    retired: Option<Retired>,
    db: Arc<Database>,
    dev: Arc<dyn BlockDevice>,
    bufs: BufPool,
    runtime: tokio::runtime::Handle,
    frozen: Arc<Frozen>,
    applying: DeferredWrites,
    marker: Marker,
    block_bytes: u64,
    max_io_bytes: u64,
    io_depth: usize,
    stop: Arc<AtomicBool>,
    onode_keys: Arc<KeyFilter>,
    /// Reads on the device, and the mark of those begun before the freeze: a block is written
    /// in place only once they have ended (one of them may be reading its old contents).
    pins: Arc<ReadPins>,
    reads_before: u64,
}

impl JobInput {
    fn stopped(&self) -> Result<()> {
        if self.stop.load(Ordering::Relaxed) {
            return Err(StoreError::Failed(
                "checkpoint stopped: the store was dropped".into(),
            ));
        }
        Ok(())
    }

    /// The thread's work: deferred writes in place and a flush, then the durable KV commit.
    fn run(mut self) -> Result<JobDone> {
        drop(self.retired.take());
        let t0 = Instant::now();
        let mut done = JobDone::default();
        if !self.applying.is_empty() {
            self.pins.wait_blocking(self.reads_before);
            self.stopped()?;
            done.bytes_written = self.runtime.block_on(write_in_place(
                &*self.dev,
                &self.bufs,
                &self.applying,
                self.block_bytes,
                self.max_io_bytes,
                self.io_depth,
            ))?;
            self.stopped()?;
            self.runtime.block_on(self.dev.flush())?;
            done.flushes = 1;
        }
        self.stopped()?;
        let applied: Vec<u64> = self.applying.iter().map(|(p, _)| *p).collect();
        commit_to_kv(
            &self.db,
            &[&self.frozen.tables],
            &applied,
            self.marker,
            &self.onode_keys,
        )?;
        done.elapsed = t0.elapsed();
        Ok(done)
    }
}

/// Sets the calling thread's nice value (see `StoreConfig::checkpoint_nice`). A hint only:
/// where it cannot be set, the thread runs at its inherited priority.
fn lower_priority(nice: i32) {
    cairn_blockdev::os::set_thread_nice(nice);
}

/// Writes deferred contents to their blocks: neighbouring blocks joined into I/Os of at most
/// [`PACED_IO_BYTES`] (and `max_io_bytes`), issued `io_depth` at a time by [`write_ios`].
/// Returns the bytes written. No flush.
async fn write_in_place(
    dev: &dyn BlockDevice,
    bufs: &BufPool,
    writes: &[(u64, Arc<Vec<u8>>)],
    block_bytes: u64,
    max_io_bytes: u64,
    io_depth: usize,
) -> Result<u64> {
    let per_io = usize_of((PACED_IO_BYTES.min(max_io_bytes) / block_bytes).max(1));
    let mut ios = Vec::new();
    let mut rest = writes;
    while let Some(&(first, _)) = rest.first() {
        let n = rest
            .iter()
            .enumerate()
            .take(per_io)
            .take_while(|(i, (p, _))| *p == first + *i as u64)
            .count();
        let parts: Vec<&[u8]> = rest[..n].iter().map(|(_, d)| d.as_slice()).collect();
        ios.push((first * block_bytes, RunBuf::Owned(bufs.build(&parts)?)));
        rest = &rest[n..];
    }
    Ok(write_ios(dev, bufs, ios, io_depth).await?)
}

/// Commits `layers` (oldest first) to redb in one durable write transaction, without the
/// deferred writes `applied` (they are in place on the device: removed from the table, and not
/// written when a layer carries them), and with the log's `marker`. The onode keys it writes
/// are added to `onode_keys` first, so that the filter covers every snapshot that has them.
fn commit_to_kv(
    db: &Database,
    layers: &[&[logged::Touched; wal::REDO_TABLES]],
    applied: &[u64],
    marker: Marker,
    onode_keys: &KeyFilter,
) -> Result<()> {
    for tables in layers {
        for (key, value) in tables[wal::REDO_ONODES].iter() {
            if value.is_some() {
                onode_keys.insert(key);
            }
        }
    }
    let applied_keys: HashSet<[u8; 8]> = applied.iter().map(|p| p.to_le_bytes()).collect();
    let keep_deferred = |k: &[u8]| !<[u8; 8]>::try_from(k).is_ok_and(|k| applied_keys.contains(&k));
    let mut wtx = db.begin_write().map_err(kv)?;
    wtx.set_durability(redb::Durability::Immediate);
    for tables in layers {
        logged::replay_tables(&wtx, std::array::from_fn(|i| &tables[i]), keep_deferred)?;
    }
    {
        let mut deferred = wtx.open_table(DEFERRED).map_err(kv)?;
        for k in applied {
            deferred.remove(*k).map_err(kv)?;
        }
        let mut meta = wtx.open_table(META).map_err(kv)?;
        meta.insert(wal::MARKER_KEY, marker.encode().as_slice())
            .map_err(kv)?;
    }
    wtx.commit().map_err(kv)
}

impl Store {
    /// Commits the overlay to the KV durably in one write transaction, with the removal of the
    /// applied deferred writes `applied` and the log's marker, after waiting for a background
    /// checkpoint in flight. Everything logged so far is then in the KV: the overlay is emptied
    /// and the ring's space is free again.
    pub(crate) async fn checkpoint(&self, st: &mut State, applied: Vec<u64>) -> Result<()> {
        self.wait_checkpoint(st).await?;
        blocking(|| self.checkpoint_now(st, applied))
    }

    fn checkpoint_now(&self, st: &mut State, applied: Vec<u64>) -> Result<()> {
        let t0 = Instant::now();
        // This commit already holds everyone for milliseconds: free the last background
        // checkpoint's leftovers here too, and its snapshot before the commit, so that an idle
        // store (synced, unmounted) keeps neither the memory nor an old read transaction.
        st.retired = None;
        let frozen = st.overlay.frozen.clone();
        let mut layers = Vec::with_capacity(2);
        layers.extend(frozen.as_deref().map(|f| &f.tables));
        layers.push(&st.overlay.tables);
        // Groups in flight are not in the overlay: their records stay after the marker.
        let marker = self.durable_marker(st);
        commit_to_kv(&self.db, &layers, &applied, marker, &self.onode_keys)
            .map_err(|e| self.fatal(e))?;
        st.overlay = Overlay::default();
        let pending = self.inflight_fill(st);
        st.wal.checkpointed_except(pending);
        self.note_backlog(st);
        self.counters.checkpoints.fetch_add(1, Ordering::Relaxed);
        self.counters
            .checkpoint_ns
            .fetch_add(cairn_convert::nanos(t0.elapsed()), Ordering::Relaxed);
        Ok(())
    }

    /// Starts a background checkpoint, unless one is in flight or nothing changed: the overlay's
    /// live layer is frozen, and a thread of its own applies the deferred writes pending now in
    /// place, flushes, then commits the layer to redb with the ring's marker of now, while later
    /// groups log after the marker.
    pub(crate) async fn start_checkpoint(&self, st: &mut State) -> Result<()> {
        if st.checkpoint_job.is_some() || st.overlay.tables.iter().all(|t| t.is_empty()) {
            return Ok(());
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return self.apply_deferred(st).await;
        };
        let Some(frozen) = st.overlay.freeze() else {
            return Ok(());
        };
        let mut applying: Vec<(u64, Arc<Vec<u8>>)> =
            st.deferred.iter().map(|(p, d)| (*p, d.clone())).collect();
        applying.sort_unstable_by_key(|(p, _)| *p);
        let applying: DeferredWrites = applying.into();
        let stop = Arc::new(AtomicBool::new(false));
        let input = JobInput {
            retired: st.retired.take(),
            db: self.db.clone(),
            dev: self.dev.clone(),
            bufs: self.bufs.clone(),
            runtime,
            frozen,
            applying: applying.clone(),
            marker: self.durable_marker(st),
            block_bytes: self.sb.block_bytes,
            max_io_bytes: self.cfg.max_io_bytes,
            io_depth: self.cfg.checkpoint_io_depth,
            stop: stop.clone(),
            onode_keys: self.onode_keys.clone(),
            pins: self.pins.clone(),
            reads_before: self.pins.mark(),
        };
        let nice = self.cfg.checkpoint_nice;
        let (finish, finished) = oneshot::channel::<()>();
        let signal = self.counters.checkpoint_signal.clone();
        signal.started(self.counters.backlog.get(), applying.len());
        let thread_signal = signal.clone();
        let spawned = match self.cfg.checkpoint_in_background {
            true => std::thread::Builder::new()
                .name("store-checkpoint".into())
                .spawn(move || {
                    lower_priority(nice);
                    let result = input.run();
                    thread_signal.ended(result.is_ok());
                    drop(finish);
                    result
                }),
            false => Err(std::io::Error::other("checkpoints run inline")),
        };
        if spawned.is_err() {
            signal.ended(false);
        }
        match spawned {
            Ok(thread) => {
                st.checkpoint_job = Some(CheckpointJob {
                    thread,
                    finished,
                    fill: st.wal.fill_except(self.inflight_fill(st)),
                    applying,
                    quarantine: Vec::new(),
                    stop,
                });
                Ok(())
            }
            // No thread to be had (or none wanted): apply and checkpoint in this one (frozen
            // and live layers together).
            Err(_) => self.apply_deferred(st).await,
        }
    }

    /// Waits for the background checkpoint in flight, if any, and takes it in.
    pub(crate) async fn wait_checkpoint(&self, st: &mut State) -> Result<()> {
        if let Some(job) = st.checkpoint_job.as_mut() {
            let _ = (&mut job.finished).await;
        }
        self.collect_checkpoint(st, true)
    }

    /// Takes in the background checkpoint in flight once it has finished (or, with `wait`, once
    /// its thread has ended: it has signalled `finished`, see [`Store::wait_checkpoint`]): its frozen layer is
    /// durable in redb, so it is dropped and the ring space before its marker is free; the
    /// deferred writes it applied are no longer pending (unless a later group replaced them);
    /// the runs freed meanwhile are released. A failed checkpoint fails the store.
    pub(crate) fn collect_checkpoint(&self, st: &mut State, wait: bool) -> Result<()> {
        let Some(job) = st
            .checkpoint_job
            .take_if(|job| wait || job.thread.is_finished())
        else {
            return Ok(());
        };
        let done = match job.thread.join() {
            Ok(Ok(done)) => done,
            Ok(Err(e)) => return Err(self.fatal(e)),
            Err(_) => {
                return Err(self.fatal(StoreError::Failed("checkpoint thread panicked".into())));
            }
        };
        let thawed = st.overlay.thaw();
        st.wal.checkpointed_at(job.fill);
        self.note_backlog(st);
        for (p, d) in job.applying.iter() {
            if st.deferred.get(p).is_some_and(|now| Arc::ptr_eq(now, d)) {
                st.deferred.remove(p);
            }
        }
        for (start, len) in job.quarantine {
            self.release_after_reads(st, start, len).map_err(|e| {
                self.fatal(StoreError::Failed(format!(
                    "allocator inconsistent after a checkpoint: {e}"
                )))
            })?;
        }
        self.note_free();
        let c = &self.counters;
        c.checkpoints.fetch_add(1, Ordering::Relaxed);
        c.checkpoint_ns
            .fetch_add(cairn_convert::nanos(done.elapsed), Ordering::Relaxed);
        c.deferred_applied
            .fetch_add(job.applying.len() as u64, Ordering::Relaxed);
        c.device_bytes_written
            .fetch_add(done.bytes_written, Ordering::Relaxed);
        c.device_flushes.fetch_add(done.flushes, Ordering::Relaxed);
        st.retired = Some(Retired {
            _thawed: thawed,
            _applied: job.applying,
        });
        Ok(())
    }

    /// Returns a run freed by a commit to the allocator, or holds it until the background
    /// checkpoint in flight has finished when that may still write one of its blocks.
    pub(crate) fn release_freed(&self, st: &mut State, start: u64, len: u64) -> Result<()> {
        if let Some(job) = st
            .checkpoint_job
            .as_mut()
            .filter(|job| job.writes_any(start, len))
        {
            job.quarantine.push((start, len));
            return Ok(());
        }
        self.release_after_reads(st, start, len)
    }

    /// Returns a freed run to the allocator, or holds it until the reads on the device now
    /// (which may have resolved one of its blocks before it was freed) have ended; releases
    /// the runs held so whose reads have ended.
    pub(crate) fn release_after_reads(&self, st: &mut State, start: u64, len: u64) -> Result<()> {
        self.release_read_quarantine(st)?;
        let mark = self.pins.mark();
        if self.pins.drained(mark) {
            return self.allocator().release(start, len);
        }
        st.read_quarantine.push((mark, start, len));
        Ok(())
    }

    /// Releases the runs held for reads that have all ended.
    pub(crate) fn release_read_quarantine(&self, st: &mut State) -> Result<()> {
        if st.read_quarantine.is_empty() {
            return Ok(());
        }
        let (ended, held): (Vec<_>, Vec<_>) = std::mem::take(&mut st.read_quarantine)
            .into_iter()
            .partition(|(mark, _, _)| self.pins.drained(*mark));
        st.read_quarantine = held;
        let mut alloc = self.allocator();
        for (_, start, len) in ended {
            alloc.release(start, len)?;
        }
        Ok(())
    }

    /// Waits for every read on the device now, then releases every run held for reads: what
    /// fsck needs to find the allocator and the KV in agreement.
    pub(crate) async fn release_all_read_quarantine(&self, st: &mut State) -> Result<()> {
        let mark = self.pins.mark();
        self.pins.wait(mark).await;
        self.release_read_quarantine(st)
    }

    /// Applies every committed deferred write in place now, flushes, then checkpoints without
    /// them (after the background checkpoint in flight, which applies its own).
    pub(crate) async fn apply_deferred(&self, st: &mut State) -> Result<()> {
        self.wait_checkpoint(st).await?;
        if st.deferred.is_empty() {
            return Ok(());
        }
        let mut pending: Vec<(u64, Arc<Vec<u8>>)> =
            st.deferred.iter().map(|(k, v)| (*k, v.clone())).collect();
        pending.sort_unstable_by_key(|(k, _)| *k);
        // A read on the device now may be reading one of these blocks' old contents.
        let mark = self.pins.mark();
        self.pins.wait(mark).await;
        let bytes = write_in_place(
            &*self.dev,
            &self.bufs,
            &pending,
            self.sb.block_bytes,
            self.cfg.max_io_bytes,
            self.cfg.checkpoint_io_depth,
        )
        .await
        .map_err(|e| self.fatal(e))?;
        self.counters
            .device_bytes_written
            .fetch_add(bytes, Ordering::Relaxed);
        self.dev_flush().await?;
        self.checkpoint(st, pending.iter().map(|(k, _)| *k).collect())
            .await?;
        self.counters
            .deferred_applied
            .fetch_add(pending.len() as u64, Ordering::Relaxed);
        st.deferred.clear();
        Ok(())
    }
}
