//! [`Store`]: mount/mkfs, the commit protocol, the read path, deferred-write application and
//! statistics.
//!
//! Owns the ordering that makes the store crash-safe:
//!
//! 1. Stage every operation of a group against the KV as `this group -> overlay -> redb`
//!    (metadata only); new data goes to blocks that committed metadata does not reference
//!    (copy-on-write), small overwrites are recorded as deferred writes. The staged changes are
//!    the group's redo record.
//! 2. Write the new blocks **and the redo record** (into the write-ahead log ring, `wal`) to the
//!    device and **flush** it: this one flush is the atomic commit point and the
//!    acknowledgement. The changes then join the in-memory overlay; redb is not touched.
//! 3. Every `wal_checkpoint_records` groups, when the ring is half used, the overlay is full, or
//!    a record does not fit, the group instead flushes its data and checkpoints: the overlay is
//!    committed to redb durably (`Durability::Immediate`) with the log's marker, so mount
//!    replays only records after it.
//! 4. Only after the commit release the blocks the transaction freed, and later apply deferred
//!    writes in place, flush, and delete their records (replayed at mount if a crash intervenes).
//!
//! Any device or KV error puts the store in the failed state (never retried). It must never
//! return bytes whose crc32c does not match, and never write over a block that committed
//! metadata still references except to apply a committed deferred write.

use crate::alloc::Allocator;
use crate::bufpool::{BufPool, RunBuf};
use crate::cache::OnodeCache;
use crate::checkpoint::{CheckpointJob, Retired};
use crate::codec::{self, onode_coll, split_block_key, Extent, Onode, Superblock};
use crate::config::StoreConfig;
use crate::error::{kv, Result, StoreError};
use crate::keyfilter::KeyFilter;
use crate::kv::{
    CountingBackend, DynBackend, KvCounters, COLLS, DEFERRED, EXTENTS, META, OMAP, ONODES, XATTRS,
};
use crate::overlay::Overlay;
use crate::usage::UsageTable;
use crate::wal::{self, Marker, WalRing};
use cairn_blockdev::{AlignedBuf, BlockDevError, BlockDevice};
use redb::{Database, ReadableTable, ReadableTableMetadata, StorageBackend};
use std::collections::HashMap;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::RwLock;

/// Most device writes one commit keeps in flight.
const MAX_WRITES_IN_FLIGHT: usize = 32;

/// Largest I/O that neighbouring copy-on-write runs are joined into (by copying them).
pub(crate) const JOIN_MAX_BYTES: u64 = 1 << 20;

/// Runs `futs` concurrently in this task, polling them in order (so each starts in order) and
/// returning their results in order.
async fn join_in_order<'a, T>(futs: Vec<Pin<Box<dyn Future<Output = T> + Send + 'a>>>) -> Vec<T> {
    let mut futs: Vec<Option<Pin<Box<dyn Future<Output = T> + Send + 'a>>>> =
        futs.into_iter().map(Some).collect();
    let mut out: Vec<Option<T>> = futs.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (f, o) in futs.iter_mut().zip(out.iter_mut()) {
            if let Some(fut) = f {
                match fut.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => {
                        *o = Some(v);
                        *f = None;
                    }
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    out.into_iter().flatten().collect()
}

/// Where the metadata KV lives.
pub enum KvLocation {
    /// A redb file (created by mkfs, replacing any existing file).
    File(PathBuf),
    /// Any redb storage backend (in-memory, crash-simulating, ...).
    Backend(Box<dyn StorageBackend>),
}

impl std::fmt::Debug for KvLocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KvLocation::File(p) => write!(f, "File({})", p.display()),
            KvLocation::Backend(b) => write!(f, "Backend({b:?})"),
        }
    }
}

/// Sizes and counters of a mounted store.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StoreStats {
    /// Objects.
    pub objects: u64,
    /// Sum of object sizes (logical bytes).
    pub stored_bytes: u64,
    /// Bytes of device blocks referenced by objects.
    pub allocated_bytes: u64,
    /// Bytes of free device blocks.
    pub free_bytes: u64,
    /// Usable data bytes of the device.
    pub capacity_bytes: u64,
    /// 1 - largest free extent / free space.
    pub fragmentation: f64,
    /// Free extents.
    pub free_extents: u64,
    /// Deferred writes committed but not yet applied, bytes.
    pub deferred_pending_bytes: u64,
    /// User bytes written by transactions (data, xattr and omap payload).
    pub user_bytes_written: u64,
    /// Bytes written to the data device.
    pub device_bytes_written: u64,
    /// Bytes read from the data device.
    pub device_bytes_read: u64,
    /// Device flushes issued.
    pub device_flushes: u64,
    /// Bytes the KV wrote to its storage.
    pub kv_bytes_written: u64,
    /// KV syncs.
    pub kv_syncs: u64,
    /// Transactions committed.
    pub commits: u64,
    /// KV commits that carried them (fewer than `commits` when group commit batched them).
    pub group_commits: u64,
    /// Deferred block writes applied in place.
    pub deferred_applied: u64,
    /// Time spent staging transactions (metadata updates, read-modify-write reads), ns.
    pub stage_ns: u64,
    /// Time spent writing new data blocks before commits, ns.
    pub data_write_ns: u64,
    /// Time spent in device flushes before commits, ns.
    pub device_flush_ns: u64,
    /// Time spent in checkpoints (durable KV commits of the overlay, the only KV commits), ns,
    /// in the background or not.
    pub checkpoint_ns: u64,
    /// Time group commits spent waiting for checkpoints (their own, or one in flight at a hard
    /// limit), ns: the part of `checkpoint_ns` that commits' latency saw.
    pub checkpoint_wait_ns: u64,
    /// Time committers waited for the store's state lock (reads hold it only to resolve
    /// their blocks), ns.
    pub lock_wait_ns: u64,
    /// Time committers waited for the oldest queued transaction's early writes, ns.
    pub early_wait_ns: u64,
    /// Time committers waited for a group in flight to make room in the pipeline, ns.
    pub pipeline_wait_ns: u64,
    /// Time group commits were delayed while the log neared its hard limit (so that they
    /// slow down rather than wait for a whole checkpoint there), ns.
    pub throttle_wait_ns: u64,
    /// Time reads spent on the device, ns (without the state lock).
    pub read_device_ns: u64,
    /// Group commits made durable by a write-ahead log record (one device flush, no KV sync).
    pub wal_records: u64,
    /// Group commits whose writes started while an earlier group's were still in flight
    /// (pipelined: the earlier one's flush did not hold them back).
    pub groups_overlapped: u64,
    /// Bytes of write-ahead log records written.
    pub wal_bytes_written: u64,
    /// Checkpoints: durable KV commits carrying the log's marker.
    pub checkpoints: u64,
    /// Records replayed from the log at the last mount.
    pub wal_replayed: u64,
    /// Records found at the last mount whose data had not all reached the device (never
    /// acknowledged), and were discarded.
    pub wal_discarded: u64,
    /// Free I/O buffers kept for reuse, bytes (at most `StoreConfig::io_buffer_pool_bytes`).
    pub io_buffers_free_bytes: u64,
    /// Bytes written early (by their submitters, before their groups formed; module `early`).
    pub early_write_bytes: u64,
    /// Reads' metadata lookups served by the onode cache.
    pub onode_cache_hits: u64,
    /// Reads' metadata lookups that went to the KV.
    pub onode_cache_misses: u64,
    /// Reads of object data the device failed (EIO), each answered with
    /// [`StoreError::DataUnreadable`] while the store went on.
    pub data_read_errors: u64,
}

/// How close a store's commits are to waiting for a checkpoint (see
/// [`Store::commit_backlog`]), readable without the store: an OSD's recovery pacer holds one
/// and reads it every tick.
#[derive(Clone, Debug, Default)]
pub struct BacklogGauge(Arc<AtomicU64>);

impl BacklogGauge {
    /// The backlog, 0 to 1.
    pub fn get(&self) -> f64 {
        self.0.load(Ordering::Relaxed) as f64 / 1000.0
    }

    /// Sets it (clamped to 0..=1, kept in thousandths).
    pub(crate) fn set(&self, backlog: f64) {
        // A rounded fraction of 1000: within 0..=1000 (NaN clamps to 0).
        #[allow(clippy::cast_possible_truncation)]
        let permille = (backlog.clamp(0.0, 1.0) * 1000.0).round() as u64;
        self.0.store(permille, Ordering::Relaxed);
    }
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub user_bytes_written: AtomicU64,
    pub device_bytes_written: AtomicU64,
    pub device_bytes_read: AtomicU64,
    pub device_flushes: AtomicU64,
    pub commits: AtomicU64,
    pub group_commits: AtomicU64,
    pub deferred_applied: AtomicU64,
    pub stage_ns: AtomicU64,
    pub data_write_ns: AtomicU64,
    pub device_flush_ns: AtomicU64,
    pub checkpoint_ns: AtomicU64,
    pub checkpoint_wait_ns: AtomicU64,
    pub lock_wait_ns: AtomicU64,
    pub early_wait_ns: AtomicU64,
    pub pipeline_wait_ns: AtomicU64,
    pub throttle_wait_ns: AtomicU64,
    /// Whether a background checkpoint runs (the commit throttle waits only then).
    pub checkpoint_signal: Arc<crate::throttle::CheckpointSignal>,
    pub read_device_ns: AtomicU64,
    /// [`Store::commit_backlog`], shared with whoever watches it.
    pub backlog: BacklogGauge,
    pub wal_records: AtomicU64,
    pub groups_overlapped: AtomicU64,
    pub wal_bytes_written: AtomicU64,
    pub checkpoints: AtomicU64,
    pub wal_replayed: AtomicU64,
    pub wal_discarded: AtomicU64,
    pub early_write_bytes: AtomicU64,
    pub data_read_errors: AtomicU64,
}

/// Mutable in-memory state, guarded by the store's lock.
#[derive(Debug)]
pub(crate) struct State {
    /// Committed deferred writes not yet applied: physical block -> contents.
    pub deferred: HashMap<u64, Arc<Vec<u8>>, foldhash::fast::RandomState>,
    pub objects: u64,
    pub stored_bytes: u64,
    /// Objects and bytes per collection, as of the last finalized group.
    pub usage: UsageTable,
    /// The write-ahead log ring's position.
    pub wal: WalRing,
    /// KV changes of the groups since the last checkpoint (durable in the log, not yet in redb).
    pub overlay: Overlay,
    /// The background checkpoint in flight, if any.
    pub checkpoint_job: Option<CheckpointJob>,
    /// What the last checkpoint taken in left to free; the next checkpoint's thread frees it.
    pub retired: Option<Retired>,
    /// Groups whose writes are in flight, oldest first (at most `inflight::MAX_IN_FLIGHT`).
    pub inflight: std::collections::VecDeque<crate::inflight::InFlight>,
    /// Runs freed while reads that may have resolved their blocks were on the device:
    /// `(read mark, start, blocks)`, released once the reads pinned at or before the mark have
    /// ended (see [`crate::pins`]).
    pub read_quarantine: Vec<(u64, u64, u64)>,
}

/// Runs `f`, which blocks (a KV sync, waiting for a checkpoint thread), so that on a
/// multi-threaded runtime this worker's other tasks (sockets, other PGs' reads) move to another
/// thread meanwhile instead of waiting.
pub(crate) fn blocking<T>(f: impl FnOnce() -> T) -> T {
    let multi_thread = tokio::runtime::Handle::try_current()
        .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
    if multi_thread {
        tokio::task::block_in_place(f)
    } else {
        f()
    }
}

/// Writes `ios` (byte offset, buffer) to `dev`, up to [`MAX_WRITES_IN_FLIGHT`] (and the
/// device's queue depth) at once, each batch started in order; owned buffers go back to `bufs`.
/// Returns the bytes written, or the first error once the batch in flight has completed.
pub(crate) async fn write_ios(
    dev: &dyn BlockDevice,
    bufs: &BufPool,
    ios: Vec<(u64, RunBuf)>,
    max_in_flight: usize,
) -> std::result::Result<u64, BlockDevError> {
    let limit = max_in_flight.min(dev.properties().max_queue_depth).max(1);
    let mut written = 0u64;
    let mut ios = ios.into_iter().peekable();
    while ios.peek().is_some() {
        let batch: Vec<DeviceWrite<'_>> = ios
            .by_ref()
            .take(limit)
            .map(|(offset, run)| {
                Box::pin(async move {
                    let len = run.len() as u64;
                    match run {
                        RunBuf::Owned(buf) => bufs.put(dev.write_owned(offset, buf).await?),
                        RunBuf::Shared(bytes) => dev.write_shared(offset, bytes).await?,
                    }
                    Ok(len)
                }) as DeviceWrite<'_>
            })
            .collect();
        let mut first_err = None;
        for r in join_in_order(batch).await {
            match r {
                Ok(n) => written += n,
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        if let Some(e) = first_err {
            return Err(e);
        }
    }
    Ok(written)
}

/// One device write in flight, resolving to the bytes written.
type DeviceWrite<'a> =
    Pin<Box<dyn Future<Output = std::result::Result<u64, BlockDevError>> + Send + 'a>>;

/// A BlueStore-style object store on one block device with metadata in redb.
pub struct Store {
    pub(crate) dev: Arc<dyn BlockDevice>,
    /// Shared with the background checkpoint thread.
    pub(crate) db: Arc<Database>,
    pub(crate) cfg: StoreConfig,
    pub(crate) sb: Superblock,
    pub(crate) state: RwLock<State>,
    /// Free and used data blocks: a lock of its own, so that early writes take blocks without
    /// the store's lock (a block committed metadata referenced is released only under that
    /// lock, when no reader can still be reading it).
    alloc: Mutex<Allocator>,
    failed: Mutex<Option<String>>,
    pub(crate) counters: Counters,
    kv_counters: Arc<KvCounters>,
    pub(crate) commit_queue: Mutex<std::collections::VecDeque<crate::apply::Pending>>,
    pub(crate) onode_cache: OnodeCache,
    /// Every key the KV's onode table may hold (built at mount, added to by checkpoints):
    /// staging a new object and reading a missing one skip redb's search.
    pub(crate) onode_keys: Arc<KeyFilter>,
    pub(crate) bufs: BufPool,
    /// Bumped when a launcher leaves its in-flight group unfinalized (it was cancelled), so
    /// that the submitters waiting on that group finalize it.
    pub(crate) orphans: tokio::sync::watch::Sender<u64>,
    /// Held by the submitter that forms and stages the next group (FIFO, so waiting
    /// submitters wake one at a time), released once the group's writes are launched.
    pub(crate) commit_leader: tokio::sync::Mutex<()>,
    /// Transactions in the last group commit: more than one means submitters are concurrent,
    /// and the next leader waits one runtime turn for the ones about to queue.
    pub(crate) last_group_txns: AtomicUsize,
    /// Free data blocks as of the last group staged, finalized or checkpointed (see
    /// [`Store::free_bytes_hint`]).
    free_blocks_hint: AtomicU64,
    /// Data blocks in all (fixed at mkfs).
    capacity_blocks: u64,
    /// Blocks taken for early writes whose transactions have not been staged yet (or were
    /// abandoned mid-write: those stay taken until the next mount). Neither free nor referenced.
    pub(crate) early_blocks: AtomicU64,
    /// Reads on the device without the state lock (see [`crate::pins`]).
    pub(crate) pins: Arc<crate::pins::ReadPins>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("dev", &self.dev)
            .field("sb", &self.sb)
            .finish()
    }
}

impl Drop for Store {
    /// Stops a background checkpoint in flight (it finishes the device or KV operation it is in
    /// and does nothing more: what it left undone is replayed from the log at the next mount)
    /// and waits for it, so that the KV file is closed when the store is gone (a store mounted
    /// again from the same files must not find it still open).
    ///
    /// The checkpoint thread's device I/O runs on the runtime the store was used on (its AIO
    /// completions and emulated devices' timers are that runtime's): on a worker of a
    /// multi-threaded runtime the wait hands the worker's other duties to a new thread first,
    /// or a one-worker runtime (an OSD's default) would wait for I/O only it can complete.
    fn drop(&mut self) {
        if let Some(job) = self.state.get_mut().checkpoint_job.take() {
            let on_worker = tokio::runtime::Handle::try_current()
                .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
            match on_worker {
                true => tokio::task::block_in_place(|| job.abandon()),
                false => job.abandon(),
            }
        }
    }
}

/// Information about one object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ObjectStat {
    /// Logical size in bytes.
    pub size_bytes: u64,
}

fn open_db(
    loc: KvLocation,
    create: bool,
    cfg: &StoreConfig,
    counters: Arc<KvCounters>,
) -> Result<Database> {
    let backend: Box<dyn StorageBackend> = match loc {
        KvLocation::File(path) => {
            if create {
                match std::fs::remove_file(&path) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => {
                        return Err(StoreError::Config(format!("kv {}: {e}", path.display())))
                    }
                }
            } else if !path.exists() {
                return Err(StoreError::Config(format!(
                    "kv {} does not exist",
                    path.display()
                )));
            }
            let file = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(create)
                .truncate(false)
                .open(&path)
                .map_err(|e| StoreError::Config(format!("kv {}: {e}", path.display())))?;
            match crate::paced::PacedFileBackend::new(file) {
                Ok(backend) => Box::new(backend),
                Err(redb::DatabaseError::DatabaseAlreadyOpen) => {
                    return Err(StoreError::Locked(path.display().to_string()))
                }
                Err(e) => return Err(kv(e)),
            }
        }
        KvLocation::Backend(b) => b,
    };
    let counting = CountingBackend::new(backend, counters);
    let mut builder = redb::Builder::new();
    builder.set_cache_size(cfg.kv_cache_bytes);
    builder
        .create_with_backend(DynBackend(Box::new(counting)))
        .map_err(kv)
}

/// A new store's id: the operating system's randomness (through the standard library's
/// randomly keyed hasher) over the time and the device's size, so two stores made at once on
/// two devices differ.
fn fresh_uuid(device_bytes: u64) -> u64 {
    use std::hash::BuildHasher;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(cairn_convert::nanos)
        .unwrap_or(0);
    std::collections::hash_map::RandomState::new().hash_one((nanos, device_bytes))
}

impl Store {
    /// Creates an empty store: writes the superblock to device block 0, flushes, then records it
    /// in a new KV. Destroys whatever the device and KV held.
    pub async fn mkfs(
        dev: Arc<dyn BlockDevice>,
        kv_loc: KvLocation,
        cfg: &StoreConfig,
    ) -> Result<()> {
        let props = dev.properties();
        cfg.validate(props.alignment_bytes)?;
        let total_blocks = props.size_bytes / cfg.block_bytes;
        if total_blocks < 2 {
            return Err(StoreError::Config(
                "device holds fewer than 2 blocks".into(),
            ));
        }
        let wal_blocks = cfg.wal_blocks_for(props.size_bytes);
        if total_blocks < 2 + wal_blocks {
            return Err(StoreError::Config(
                "device holds no data blocks after the log".into(),
            ));
        }
        let sb = Superblock {
            uuid: fresh_uuid(props.size_bytes),
            block_bytes: cfg.block_bytes,
            device_bytes: props.size_bytes,
            wal_blocks,
        };
        let db = open_db(kv_loc, true, cfg, Arc::new(KvCounters::default()))?;
        let mut block0 = sb.encode();
        block0.resize(cairn_convert::usize_of(cfg.block_bytes), 0);
        dev.write(0, &block0).await?;
        // A zeroed ring: nothing there looks like a record, and a sparse file gets its ring
        // allocated now rather than on the first lap of commits.
        let zeros = vec![0u8; cfg.max_io_bytes.min(8 << 20) as usize];
        let ring_end = sb.first_data_block() * cfg.block_bytes;
        let mut at = Superblock::WAL_FIRST_BLOCK * cfg.block_bytes;
        while at < ring_end {
            let n = (ring_end - at).min(zeros.len() as u64);
            dev.write(at, &zeros[..cairn_convert::usize_of(n)]).await?;
            at += n;
        }
        dev.flush().await?;
        let mut wtx = db.begin_write().map_err(kv)?;
        wtx.set_durability(redb::Durability::Immediate);
        {
            let mut meta = wtx.open_table(META).map_err(kv)?;
            meta.insert("super", &block0[..Superblock::ENCODED_BYTES])
                .map_err(kv)?;
            let marker = Marker {
                next_seq: 1,
                head_block: 0,
            };
            meta.insert(wal::MARKER_KEY, marker.encode().as_slice())
                .map_err(kv)?;
            meta.insert("next_coll", codec::seal(&1u32.to_le_bytes()).as_slice())
                .map_err(kv)?;
            for t in [ONODES, EXTENTS, XATTRS, OMAP] {
                wtx.open_table(t).map_err(kv)?;
            }
            wtx.open_table(COLLS).map_err(kv)?;
            wtx.open_table(DEFERRED).map_err(kv)?;
        }
        wtx.commit().map_err(kv)?;
        Ok(())
    }

    /// Mounts a store made by [`Store::mkfs`]: checks that device and KV belong together,
    /// replays the write-ahead log into the KV, rebuilds the allocator from the block references,
    /// and applies deferred writes.
    pub async fn mount(
        dev: Arc<dyn BlockDevice>,
        kv_loc: KvLocation,
        cfg: StoreConfig,
    ) -> Result<Store> {
        let props = dev.properties();
        cfg.validate(props.alignment_bytes)?;
        let cfg = cfg.for_device(props.rotational);
        let kv_counters = Arc::new(KvCounters::default());
        let db = open_db(kv_loc, false, &cfg, kv_counters.clone())?;
        let mut block0 = vec![0u8; cairn_convert::usize_of(cfg.block_bytes)];
        dev.read(0, &mut block0).await?;
        let on_dev = Superblock::decode(&block0)?;
        let (in_kv, marker) = {
            let rtx = db.begin_read().map_err(kv)?;
            let meta = rtx.open_table(META).map_err(kv)?;
            let sb = match meta.get("super").map_err(kv)? {
                Some(v) => Superblock::decode(v.value())?,
                None => return Err(StoreError::Corrupt("KV has no superblock".into())),
            };
            let marker = match meta.get(wal::MARKER_KEY).map_err(kv)? {
                Some(v) => Marker::decode(v.value())?,
                None => return Err(StoreError::Corrupt("KV has no log marker".into())),
            };
            (sb, marker)
        };
        if on_dev != in_kv {
            return Err(StoreError::Config(format!(
                "device superblock {on_dev:?} does not match the KV's {in_kv:?}"
            )));
        }
        if in_kv.block_bytes != cfg.block_bytes || in_kv.device_bytes > props.size_bytes {
            return Err(StoreError::Config(format!(
                "store was made with block {} on a {}-byte device; now block {} on {}",
                in_kv.block_bytes, in_kv.device_bytes, cfg.block_bytes, props.size_bytes
            )));
        }
        let mut ring = WalRing::new(Superblock::WAL_FIRST_BLOCK, in_kv.wal_blocks, marker);
        let counters = Counters::default();
        crate::replay::replay_log(&*dev, &db, &in_kv, &mut ring, &counters).await?;
        let rtx = db.begin_read().map_err(kv)?;
        let mut used = Vec::new();
        for item in rtx.open_table(EXTENTS).map_err(kv)?.iter().map_err(kv)? {
            let (k, v) = item.map_err(kv)?;
            let (_, lblock) = split_block_key(k.value())?;
            let e = Extent::decode(lblock, v.value())?;
            used.push((e.pblock, e.blocks()));
        }
        let (mut objects, mut stored_bytes) = (0, 0);
        let mut usage = UsageTable::default();
        let onodes = rtx.open_table(ONODES).map_err(kv)?;
        // Room for as many new objects again before false positives grow.
        let onode_keys = Arc::new(KeyFilter::with_capacity(
            onodes.len().map_err(kv)?.saturating_mul(2),
        ));
        for item in onodes.iter().map_err(kv)? {
            let (k, v) = item.map_err(kv)?;
            onode_keys.insert(k.value());
            objects += 1;
            let node = Onode::decode(v.value())?;
            stored_bytes += node.size_bytes;
            usage.count(onode_coll(k.value())?, node.size_bytes);
            used.extend(node.extents.iter().map(|e| (e.pblock, e.blocks())));
        }
        let total_blocks = in_kv.device_bytes / in_kv.block_bytes;
        let alloc = Allocator::from_used(total_blocks, in_kv.first_data_block(), &mut used)?;
        let mut deferred = HashMap::default();
        for item in rtx.open_table(DEFERRED).map_err(kv)?.iter().map_err(kv)? {
            let (k, v) = item.map_err(kv)?;
            let data = codec::open(v.value(), "deferred write")?;
            if data.len() as u64 != in_kv.block_bytes {
                return Err(StoreError::Corrupt(format!(
                    "deferred write for block {} has {} bytes",
                    k.value(),
                    data.len()
                )));
            }
            deferred.insert(k.value(), Arc::new(data.to_vec()));
        }
        drop(rtx);
        let free_blocks = alloc.free_blocks();
        let capacity_blocks = alloc
            .total_blocks()
            .saturating_sub(in_kv.first_data_block());
        let store = Store {
            dev,
            db: Arc::new(db),
            sb: in_kv,
            alloc: Mutex::new(alloc),
            state: RwLock::new(State {
                deferred,
                objects,
                stored_bytes,
                usage,
                wal: ring,
                overlay: Overlay::default(),
                checkpoint_job: None,
                retired: None,
                inflight: std::collections::VecDeque::new(),
                read_quarantine: Vec::new(),
            }),
            failed: Mutex::new(None),
            counters,
            kv_counters,
            commit_queue: Mutex::new(std::collections::VecDeque::new()),
            onode_cache: OnodeCache::new(cfg.meta_cache_bytes),
            onode_keys,
            bufs: BufPool::new(cfg.io_buffer_pool_bytes),
            orphans: tokio::sync::watch::Sender::new(0),
            commit_leader: tokio::sync::Mutex::new(()),
            last_group_txns: AtomicUsize::new(0),
            free_blocks_hint: AtomicU64::new(free_blocks),
            capacity_blocks,
            early_blocks: AtomicU64::new(0),
            pins: Arc::new(crate::pins::ReadPins::default()),
            cfg,
        };
        {
            let mut st = store.state.write().await;
            store.apply_deferred(&mut st).await?;
        }
        Ok(store)
    }

    /// Applies every pending deferred write now (also done automatically in batches) and
    /// checkpoints the write-ahead log, so that everything committed is in the KV.
    pub async fn sync(&self) -> Result<()> {
        self.check_ok()?;
        let mut st = self.state.write().await;
        self.drain(&mut st).await?;
        self.apply_deferred(&mut st).await?;
        if st.wal.records_since_checkpoint() > 0 || !st.overlay.is_empty() {
            self.checkpoint(&mut st, Vec::new()).await?;
        }
        Ok(())
    }

    /// Applies pending deferred writes, checkpoints the log, then umounts (drops) the store.
    pub async fn umount(self) -> Result<()> {
        self.sync().await
    }

    /// The block (allocation and checksum) size.
    pub fn block_bytes(&self) -> u64 {
        self.sb.block_bytes
    }

    /// The data device.
    pub fn device(&self) -> &Arc<dyn BlockDevice> {
        &self.dev
    }

    /// The error that failed the store, if any.
    pub fn failure(&self) -> Option<String> {
        self.failed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub(crate) fn check_ok(&self) -> Result<()> {
        match self.failure() {
            Some(why) => Err(StoreError::Failed(why)),
            None => Ok(()),
        }
    }

    /// Records a fatal error (device/KV) so every later call fails; passes the error through.
    pub(crate) fn fatal(&self, e: StoreError) -> StoreError {
        if e.is_fatal() {
            let mut f = self.failed.lock().unwrap_or_else(|p| p.into_inner());
            if f.is_none() {
                *f = Some(e.to_string());
            }
        }
        e
    }

    /// Writes one owned buffer and returns once it is durable (one device operation where the
    /// device can: see [`BlockDevice::write_owned_durable`]); counted as a write and a flush.
    pub(crate) async fn dev_write_durable(&self, offset_bytes: u64, buf: AlignedBuf) -> Result<()> {
        let len = buf.len() as u64;
        let buf = self
            .dev
            .write_owned_durable(offset_bytes, buf)
            .await
            .map_err(|e| self.fatal(e.into()))?;
        self.bufs.put(buf);
        self.counters
            .device_bytes_written
            .fetch_add(len, Ordering::Relaxed);
        self.counters.device_flushes.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    pub(crate) async fn dev_flush(&self) -> Result<()> {
        self.dev.flush().await.map_err(|e| self.fatal(e.into()))?;
        self.counters.device_flushes.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    pub(crate) async fn dev_read(&self, offset_bytes: u64, buf: &mut [u8]) -> Result<()> {
        self.raw_read(offset_bytes, buf)
            .await
            .map_err(|e| self.read_error(e))
    }

    /// Reads without judging a failure: the caller maps it (see [`Store::read_error`],
    /// [`Store::data_read_error`]).
    pub(crate) async fn raw_read(
        &self,
        offset_bytes: u64,
        buf: &mut [u8],
    ) -> std::result::Result<(), cairn_blockdev::BlockDevError> {
        self.dev.read(offset_bytes, buf).await?;
        self.counters
            .device_bytes_read
            .fetch_add(buf.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    /// Reads into an owned buffer (the file device reads straight into it) and hands it back;
    /// the caller judges a failure.
    pub(crate) async fn raw_read_owned(
        &self,
        offset_bytes: u64,
        buf: cairn_blockdev::AlignedBuf,
    ) -> std::result::Result<cairn_blockdev::AlignedBuf, cairn_blockdev::BlockDevError> {
        let buf = self.dev.read_owned(offset_bytes, buf).await?;
        self.counters
            .device_bytes_read
            .fetch_add(buf.len() as u64, Ordering::Relaxed);
        Ok(buf)
    }

    /// A failed read of `collection/object`'s data blocks: the device's I/O error on them is
    /// [`StoreError::DataUnreadable`] and leaves the store serving (the blocks are the object's
    /// alone; its copy elsewhere replaces it), anything else is judged as any read's.
    pub(crate) fn data_read_error(
        &self,
        e: cairn_blockdev::BlockDevError,
        collection: &str,
        object: &str,
    ) -> StoreError {
        match e {
            cairn_blockdev::BlockDevError::Io { .. }
            | cairn_blockdev::BlockDevError::Injected { .. } => {
                self.counters
                    .data_read_errors
                    .fetch_add(1, Ordering::Relaxed);
                StoreError::DataUnreadable {
                    collection: collection.to_string(),
                    object: object.to_string(),
                    detail: e.to_string(),
                }
            }
            e => self.read_error(e),
        }
    }

    fn read_error(&self, e: cairn_blockdev::BlockDevError) -> StoreError {
        match e {
            // Only damaged metadata can point a read outside the device: report, don't die.
            cairn_blockdev::BlockDevError::OutOfRange { .. }
            | cairn_blockdev::BlockDevError::Misaligned { .. } => {
                StoreError::Corrupt(format!("block reference outside the device: {e}"))
            }
            e => self.fatal(e.into()),
        }
    }

    /// Writes copy-on-write runs `(first block, whole blocks)` sorted by block: neighbouring
    /// runs are joined into one I/O of at most [`JOIN_MAX_BYTES`] (small runs only: joining
    /// copies, and a large run is a large I/O already), any other run is handed to the device
    /// as it is (no copy), and up to [`MAX_WRITES_IN_FLIGHT`] I/Os are in flight at once (issued
    /// in block order).
    pub(crate) async fn write_runs(&self, runs: Vec<(u64, RunBuf)>) -> Result<()> {
        let bs = self.sb.block_bytes;
        let mut ios: Vec<(u64, RunBuf)> = Vec::new();
        let mut group: Vec<(u64, RunBuf)> = Vec::new();
        let mut group_bytes = 0u64;
        let flush_group =
            |group: &mut Vec<(u64, RunBuf)>, ios: &mut Vec<(u64, RunBuf)>| -> Result<()> {
                if group.len() == 1 {
                    ios.append(group);
                } else if let Some(&(start, _)) = group.first() {
                    let parts: Vec<&[u8]> = group.iter().map(|(_, b)| b.as_slice()).collect();
                    let joined = self.bufs.build(&parts)?;
                    for (_, b) in group.drain(..) {
                        if let RunBuf::Owned(b) = b {
                            self.bufs.put(b);
                        }
                    }
                    ios.push((start, RunBuf::Owned(joined)));
                }
                Ok(())
            };
        for (start, buf) in runs {
            let len = buf.len() as u64;
            let joins = group
                .last()
                .is_some_and(|(s, b)| s + b.len() as u64 / bs == start)
                && group_bytes + len <= JOIN_MAX_BYTES.min(self.cfg.max_io_bytes);
            if !joins {
                flush_group(&mut group, &mut ios)?;
                group_bytes = 0;
            }
            group_bytes += len;
            group.push((start, buf));
        }
        flush_group(&mut group, &mut ios)?;
        let ios = ios
            .into_iter()
            .map(|(start, buf)| (start * bs, buf))
            .collect();
        self.write_counted(ios).await.map(|_| ())
    }

    /// [`write_ios`] on the data device, counted; a failure fails the store. The bytes written.
    pub(crate) async fn write_counted(&self, ios: Vec<(u64, RunBuf)>) -> Result<u64> {
        let written = write_ios(&*self.dev, &self.bufs, ios, MAX_WRITES_IN_FLIGHT)
            .await
            .map_err(|e| self.fatal(e.into()))?;
        self.counters
            .device_bytes_written
            .fetch_add(written, Ordering::Relaxed);
        Ok(written)
    }

    /// Free bytes for data, without waiting for the store's lock: as of the last group staged,
    /// finalized or checkpointed (a caller deciding whether a write fits, like an OSD's full
    /// check, reads it on every write; [`Store::stats`] is exact).
    pub fn free_bytes_hint(&self) -> u64 {
        self.free_blocks_hint.load(Ordering::Relaxed) * self.sb.block_bytes
    }

    /// Bytes for data in all (the device less the log and the superblock).
    pub fn capacity_bytes(&self) -> u64 {
        self.capacity_blocks * self.sb.block_bytes
    }

    /// The allocator (held briefly, never across an await).
    pub(crate) fn allocator(&self) -> std::sync::MutexGuard<'_, Allocator> {
        self.alloc.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records the allocator's free blocks for [`Store::free_bytes_hint`].
    pub(crate) fn note_free(&self) {
        let free = self.allocator().free_blocks();
        self.free_blocks_hint.store(free, Ordering::Relaxed);
    }

    /// Current sizes and counters.
    pub async fn stats(&self) -> StoreStats {
        let st = self.state.read().await;
        let bs = self.sb.block_bytes;
        let (onode_cache_hits, onode_cache_misses) = self.onode_cache.hits_and_misses();
        let (total, free, fragmentation, free_extents) = {
            let a = self.allocator();
            (
                a.total_blocks(),
                a.free_blocks(),
                a.fragmentation(),
                a.free_extents() as u64,
            )
        };
        let usable = total.saturating_sub(self.sb.first_data_block());
        StoreStats {
            objects: st.objects,
            stored_bytes: st.stored_bytes,
            allocated_bytes: (usable - free) * bs,
            free_bytes: free * bs,
            capacity_bytes: usable * bs,
            fragmentation,
            free_extents,
            deferred_pending_bytes: st.deferred.len() as u64 * bs,
            user_bytes_written: self.counters.user_bytes_written.load(Ordering::Relaxed),
            device_bytes_written: self.counters.device_bytes_written.load(Ordering::Relaxed),
            device_bytes_read: self.counters.device_bytes_read.load(Ordering::Relaxed),
            device_flushes: self.counters.device_flushes.load(Ordering::Relaxed),
            kv_bytes_written: self.kv_counters.bytes_written.load(Ordering::Relaxed),
            kv_syncs: self.kv_counters.syncs.load(Ordering::Relaxed),
            commits: self.counters.commits.load(Ordering::Relaxed),
            group_commits: self.counters.group_commits.load(Ordering::Relaxed),
            deferred_applied: self.counters.deferred_applied.load(Ordering::Relaxed),
            stage_ns: self.counters.stage_ns.load(Ordering::Relaxed),
            data_write_ns: self.counters.data_write_ns.load(Ordering::Relaxed),
            device_flush_ns: self.counters.device_flush_ns.load(Ordering::Relaxed),
            checkpoint_ns: self.counters.checkpoint_ns.load(Ordering::Relaxed),
            checkpoint_wait_ns: self.counters.checkpoint_wait_ns.load(Ordering::Relaxed),
            lock_wait_ns: self.counters.lock_wait_ns.load(Ordering::Relaxed),
            early_wait_ns: self.counters.early_wait_ns.load(Ordering::Relaxed),
            pipeline_wait_ns: self.counters.pipeline_wait_ns.load(Ordering::Relaxed),
            throttle_wait_ns: self.counters.throttle_wait_ns.load(Ordering::Relaxed),
            read_device_ns: self.counters.read_device_ns.load(Ordering::Relaxed),
            wal_records: self.counters.wal_records.load(Ordering::Relaxed),
            groups_overlapped: self.counters.groups_overlapped.load(Ordering::Relaxed),
            wal_bytes_written: self.counters.wal_bytes_written.load(Ordering::Relaxed),
            checkpoints: self.counters.checkpoints.load(Ordering::Relaxed),
            wal_replayed: self.counters.wal_replayed.load(Ordering::Relaxed),
            wal_discarded: self.counters.wal_discarded.load(Ordering::Relaxed),
            io_buffers_free_bytes: self.bufs.free_bytes() as u64,
            early_write_bytes: self.counters.early_write_bytes.load(Ordering::Relaxed),
            data_read_errors: self.counters.data_read_errors.load(Ordering::Relaxed),
            onode_cache_hits,
            onode_cache_misses,
        }
    }

    /// Number of KV records of each table as of the last checkpoint (for tests and fsck
    /// summaries; [`Store::sync`] first to include everything committed).
    pub fn kv_record_counts(&self) -> Result<Vec<(&'static str, u64)>> {
        let rtx = self.db.begin_read().map_err(kv)?;
        let mut out = Vec::new();
        for (name, t) in [
            ("onodes", ONODES),
            ("extents", EXTENTS),
            ("xattrs", XATTRS),
            ("omap", OMAP),
        ] {
            out.push((name, rtx.open_table(t).map_err(kv)?.len().map_err(kv)?));
        }
        out.push((
            "deferred",
            rtx.open_table(DEFERRED).map_err(kv)?.len().map_err(kv)?,
        ));
        Ok(out)
    }
}
