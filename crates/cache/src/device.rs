//! [`CacheDevice`]: a [`BlockDevice`] made of a fast cache device and a slow core device.
//!
//! Owns the data path (hits, misses, promotion, cut-off, modes), eviction, cleaning I/O and the
//! ordering that makes the cache crash-safe. It must never let a persisted line entry claim data
//! that is not durable, and never write data into cache sectors that a persisted entry claims
//! as clean for some core address (it first persists an entry without that claim).
//!
//! # Concurrency
//! A gate (`tokio::sync::RwLock`) orders requests: full read hits, pass-through reads and
//! writes, and write-back writes that need no eviction and no line mapped elsewhere share it;
//! every other request that changes the line table (other writes, read misses, eviction,
//! the start and end of a cleaning round) takes it exclusively. Shared-gate writers mark
//! lines dirty only after their data write completed, so a flush sees every write completed
//! before it. A flush holds the gate shared: it snapshots the changed entries and registers
//! them as in flight in one step, and writers heed an in-flight entry's clean claims as they
//! do a persisted one's; the gate keeps every other persist out but claim releases, which a
//! lock of their own orders with the flush. Background cleaning writes to the
//! core outside the gate, for lines marked `cleaning`, which eviction skips; foreground writes
//! to dirty sectors always go to the cache, so the core never sees two writers of one sector.
//! A write-back write over sectors whose persisted entry claims them clean keeps the shared
//! gate: it has the claims dropped on media first, in a persist shared by every writer
//! waiting for one (the entries claim less than before, so no data need be durable first).
//! A write-back write the cache does not admit (its class caches nothing, it is cut off, or
//! the promotion policy declines it) keeps the shared gate too: the mapped lines it touches
//! take its bytes in place, dirty, and the rest goes to the core, so nothing is evicted or
//! invalidated under it.
//! A request that must evict dirty lines cleans them the same way before it takes the gate
//! exclusively, so hits are not held behind the core's writes; only a victim dirtied again in
//! between is cleaned under the gate.
//!
//! # Crash safety
//! Metadata is persisted by `persist`: flush core, flush cache (every completed data write is
//! now durable), write the metadata pages holding the changed entries, flush cache. `flush`
//! persists every changed entry. A line is reused only after its invalid entry is persisted.
//! A persist whose entries claim only what the persisted ones claim (dropped claims, a
//! released clean claim) skips the data flushes.

use crate::cleaning::{decide, CleanInput, CleanOrder};
use crate::config::{CacheConfig, CacheMode, DirtyFullPolicy, SeqCutoffPolicy};
use crate::convert::{line_u32, sector_u32, share_of, usize_of};
use crate::cutoff::SeqDetector;
use crate::error::{CacheError, Result};
use crate::ioclass::{IoClassTable, IoHint};
use crate::layout::{
    decode_entry, encode_entry, Decoded, Entry, Geometry, SbState, Superblock, ENTRIES_PER_PAGE,
    ENTRY_BYTES, META_PAGE_BYTES, META_PAGE_LEN, SB_SLOT_BYTES, SB_SLOT_LEN, SECTOR_BYTES,
};
use crate::lines::{LineTable, UNMAPPED};
use crate::promotion::Promoter;
use crate::stats::{CacheStats, ClassStats, Counters};
use async_trait::async_trait;
use cairn_blockdev::{
    check_io, BlockDevError, BlockDevice, DeviceProperties, IoKind, QueuedDevice,
};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

type BResult<T> = std::result::Result<T, BlockDevError>;
/// Runs of sectors read from a cache line: (first sector, bytes).
type SectorRuns = Vec<(u32, Vec<u8>)>;
/// Dirty data bound for the core: (core line, runs).
type CoreWrite = (u64, SectorRuns);

/// Most bytes one cleaning write to the core carries (adjacent dirty runs merged).
const MAX_CLEAN_WRITE_BYTES: usize = 1 << 20;

/// Most lines whose dirty data is written to core concurrently while cleaning.
const CLEAN_QUEUE_DEPTH: usize = 32;

/// Eviction looks at up to this many times the batch of least-recently-used lines for clean
/// ones before it evicts (and first cleans) dirty ones.
const VICTIM_SCAN_FACTOR: usize = 64;

/// Most lines reclaimed at once when the cache is full (one metadata persist per batch).
const RECLAIM_BATCH_LINES: usize = 32;

/// Most dirty lines one request cleans ahead of its evictions (a 1 MiB request's worth of
/// 4 KiB lines, rounded up to whole batches).
const MAX_CLEAN_AHEAD_LINES: usize = 256;

/// Lines reclaimed per batch: [`RECLAIM_BATCH_LINES`], or 1/16 of a small cache.
fn reclaim_batch(total_lines: u32) -> usize {
    (total_lines as usize / 16).clamp(1, RECLAIM_BATCH_LINES)
}

/// The cache's time source in milliseconds (dirty-since stamps, last foreground I/O). The
/// default follows tokio's clock; simulations that stretch time pass their own.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// Milliseconds since an arbitrary fixed origin; never decreases.
    fn now_ms(&self) -> u64;
}

/// [`Clock`] on tokio's clock (virtual under a paused runtime), origin at creation.
#[derive(Debug)]
pub struct TokioClock {
    epoch: tokio::time::Instant,
}

impl TokioClock {
    /// A clock whose origin is now.
    pub fn new() -> Self {
        Self {
            epoch: tokio::time::Instant::now(),
        }
    }
}

impl Default for TokioClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for TokioClock {
    fn now_ms(&self) -> u64 {
        cairn_convert::millis(self.epoch.elapsed())
    }
}

/// The outcome of one cleaning round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CleanReport {
    /// Dirty lines written to core and marked clean.
    pub cleaned_lines: usize,
    /// When the policy wants to be asked again, ms on the cache clock (now when more is pending).
    pub next_wake_ms: u64,
}

/// One core-line-sized part of a request.
#[derive(Debug, Clone, Copy)]
struct Piece {
    core_line: u64,
    buf_off: usize,
    len: usize,
    first_sector: u32,
    mask: u16,
}

/// A request's classification, decided once.
#[derive(Debug, Clone, Copy)]
struct Decision {
    class: u8,
    cutoff: bool,
    mode: CacheMode,
    allocate: bool,
}

/// A persisted clean claim a writer needs dropped before it overwrites the sectors in place.
#[derive(Debug, Clone, Copy)]
struct ClaimRelease {
    line: u32,
    /// The core line the claim is for; a line since remapped keeps its claims.
    core_line: u64,
    sectors: u16,
}

#[derive(Debug)]
struct State {
    cfg: CacheConfig,
    classes: IoClassTable,
    table: LineTable,
    persisted: Vec<Entry>,
    /// Lines whose entry on the cache device may be the persisted one or a newer one whose
    /// write did not complete (a persist failed or was cancelled midway): they count as
    /// claiming every sector for another core line until an entry of theirs persists.
    uncertain: Vec<bool>,
    entry_seq: Vec<u32>,
    detector: SeqDetector,
    promoter: Promoter,
    counters: Counters,
    last_io_ms: u64,
    sb: Superblock,
    /// Cleaning rounds whose lines are marked `cleaning` (their core writes may be in flight).
    cleaning_rounds: usize,
    /// Requests waiting for every cleaning round to end; no round starts while one waits.
    quiescing: usize,
    /// Clean claims that shared-gate writers wait to see dropped on media
    /// ([`CacheDevice::release_claims`]); the next release persist takes them all.
    pending_releases: Vec<ClaimRelease>,
    /// Release tickets handed out; the newest is the last entry of `pending_releases`.
    release_tickets: u64,
    /// Entries a persist in flight is writing: until it completes they may be on media
    /// already, so a shared-gate writer heeds their claims as it does persisted ones.
    persisting: HashMap<u32, Entry>,
}

impl State {
    fn mem_entry(&self, i: u32) -> Entry {
        let l = self.table.line(i);
        if l.core_line == UNMAPPED || l.valid == 0 {
            Entry::INVALID
        } else {
            Entry {
                core_line: l.core_line,
                valid: l.valid,
                dirty: l.dirty,
                class: l.class,
            }
        }
    }

    /// The sectors of line `i` that the media may claim clean for `core_line` (its persisted
    /// entry, or one a persist in flight is writing); `None` when the media may claim the
    /// line for another core line (an uncertain line, or an entry for another one).
    fn media_clean_claims(&self, i: u32, core_line: u64) -> Option<u16> {
        if self.uncertain[i as usize] {
            return None;
        }
        let mut clean = 0;
        let persisting = if self.persisting.is_empty() {
            None
        } else {
            self.persisting.get(&i).copied()
        };
        for e in std::iter::once(self.persisted[i as usize]).chain(persisting) {
            if e.valid != 0 && e.core_line != core_line {
                return None;
            }
            clean |= e.valid & !e.dirty;
        }
        Some(clean)
    }

    /// Makes the sectors `mask` of line `i` that the table holds as clean invalid there (the
    /// cache's copy is about to be overwritten); dirty sectors stay as they are.
    fn forget_clean(&mut self, i: u32, mask: u16) {
        let l = self.table.line(i);
        let clean = l.valid & !l.dirty & mask;
        if clean != 0 {
            self.table.invalidate(i, clean);
        }
    }

    fn occupancy_pct(&self) -> u64 {
        u64::from(self.table.mapped_lines()) * 100 / u64::from(self.table.len().max(1))
    }
}

/// An Open-CAS-style cache device. Create with [`CacheDevice::create`], reopen with
/// [`CacheDevice::attach`].
#[derive(Debug)]
pub struct CacheDevice {
    cache: Arc<dyn BlockDevice>,
    core: Arc<dyn BlockDevice>,
    /// The core's queue slots, which the cleaning path shares.
    core_queue: Arc<QueuedDevice>,
    /// The core as seen by cleaning (by default `core` itself); see
    /// [`CacheDevice::with_cleaning_path`].
    clean_core: Arc<dyn BlockDevice>,
    geom: Geometry,
    props: DeviceProperties,
    clock: Arc<dyn Clock>,
    gate: tokio::sync::RwLock<()>,
    /// Shared with the tasks that finish cleaning rounds whose futures were dropped.
    st: Arc<Mutex<State>>,
    /// Set when a foreground write to the core completes (before the write returns); cleared
    /// by the core flush that covers it, which it swaps out before flushing: a write that
    /// completed before a flush began is always covered by it.
    core_written: AtomicBool,
    /// Bumped before and after every write or discard of the core (foreground or cleaning):
    /// a read that went to the core without the exclusive gate installs what it read only
    /// if no core write could have overlapped it.
    core_gen: Arc<AtomicU64>,
    /// Signalled when a cleaning round ends.
    round_ended: Arc<tokio::sync::Notify>,
    /// Flush tickets handed out ([`CacheDevice::flush_impl`]).
    flush_tickets: AtomicU64,
    /// The newest ticket a completed flush covers; held by the flush running.
    flushed_ticket: tokio::sync::Mutex<u64>,
    /// The newest release ticket a completed release persist covers; held by the release
    /// persist running ([`CacheDevice::release_claims`]).
    released_ticket: tokio::sync::Mutex<u64>,
    /// Held by a persist's metadata page writes and the flush after them, which run in a task
    /// of their own: one persist's pages at a time, so that a dropped persist's late page
    /// never lands over a newer persist's copy of it.
    meta_io: Arc<tokio::sync::Mutex<()>>,
}

/// Dirty lines cleaned per round by [`CacheDevice::flush_dirty`] before its final pass.
const FLUSH_ROUND_LINES: u32 = 256;

/// Marks a request waiting for cleaning rounds to end, for as long as it lives.
struct Quiescing<'a>(&'a CacheDevice);

/// One cleaning round's lines, marked `cleaning` ([`CacheDevice::mark_round`]) until the
/// round is dropped; no other cleaning or eviction picks a line so marked. While its core
/// writes run, the task running them owns the round ([`CacheDevice::write_core_detached`]),
/// so a round whose request is dropped midway ends only once those writes have landed: never
/// while one could still overtake a later clean write of the same lines.
struct CleaningRound {
    st: Arc<Mutex<State>>,
    round_ended: Arc<tokio::sync::Notify>,
    lines: Vec<u32>,
}

impl Drop for CleaningRound {
    /// Ends the round: its lines are no longer being cleaned.
    fn drop(&mut self) {
        {
            let mut st = self.st.lock().unwrap_or_else(|p| p.into_inner());
            for &i in &self.lines {
                st.table.set_cleaning(i, false);
            }
            debug_assert!(st.cleaning_rounds > 0, "cleaning round ended twice");
            st.cleaning_rounds = st.cleaning_rounds.saturating_sub(1);
        }
        self.round_ended.notify_waiters();
    }
}

/// A metadata persist in progress ([`CacheDevice::persist_with`]). Unless it completes, its
/// drop (on an error or a cancelled future) owes the core its flush again, notes its lines
/// as changed again, and marks them uncertain once their pages may have been written.
struct PersistAttempt<'a> {
    dev: &'a CacheDevice,
    lines: Vec<u32>,
    core_flush_owed: bool,
    pages_started: bool,
    completed: bool,
}

impl Drop for PersistAttempt<'_> {
    fn drop(&mut self) {
        if self.completed {
            return;
        }
        if self.core_flush_owed {
            self.dev.core_written.store(true, Ordering::Release);
        }
        let mut st = self.dev.lock();
        for i in &self.lines {
            st.persisting.remove(i);
        }
        if self.pages_started {
            for &i in &self.lines {
                st.uncertain[i as usize] = true;
            }
        }
        st.table.restore_changed(self.lines.iter().copied());
    }
}

impl Drop for Quiescing<'_> {
    fn drop(&mut self) {
        let mut st = self.0.lock();
        assert!(st.quiescing > 0, "quiescing count underflow");
        st.quiescing -= 1;
    }
}

/// Most cache-line I/Os of one request in flight at once.
const LINE_IO_DEPTH: usize = 32;

/// Runs the I/Os of one request's cache lines, up to [`LINE_IO_DEPTH`] at a time; the first
/// error, once none is in flight.
async fn run_bounded<F>(ios: impl Iterator<Item = F>) -> BResult<()>
where
    F: std::future::Future<Output = BResult<()>>,
{
    use futures_util::StreamExt;
    let results: Vec<BResult<()>> = futures_util::stream::iter(ios)
        .buffer_unordered(LINE_IO_DEPTH)
        .collect()
        .await;
    results.into_iter().collect()
}

fn runs(mask: u16) -> impl Iterator<Item = (u32, u32)> {
    let mut m = mask;
    std::iter::from_fn(move || {
        if m == 0 {
            return None;
        }
        let start = m.trailing_zeros();
        let len = (m >> start).trailing_ones();
        m &= !sector_mask(start, len);
        Some((start, len))
    })
}

/// The mask of `count` sectors from `first`, within one line of at most 16 sectors.
fn sector_mask(first: u32, count: u32) -> u16 {
    u16::try_from(((1u32 << count) - 1) << first).expect("a line has at most 16 sectors")
}

impl CacheDevice {
    /// Formats a new cache on `cache` for `core` (destroying any earlier cache there) and
    /// returns it running. Both devices must have an alignment of at most 4 KiB and the core's
    /// size must be a multiple of 4 KiB.
    pub async fn create(
        cache: Arc<dyn BlockDevice>,
        core: Arc<dyn BlockDevice>,
        cfg: CacheConfig,
        classes: IoClassTable,
    ) -> Result<Self> {
        cfg.validate()?;
        let (cp, kp) = (cache.properties(), core.properties());
        Self::check_devices(&cp, &kp)?;
        let geom = Geometry::compute(cp.size_bytes, cfg.line_bytes)?;
        let config_toml =
            toml::to_string(&cfg).map_err(|e| CacheError::param("config", e.to_string()))?;
        let mut sb = Superblock {
            seq: 1,
            instance_id: rand::random(),
            line_bytes: cfg.line_bytes,
            lines: geom.lines,
            core_size_bytes: kp.size_bytes,
            state: SbState::Running,
            config_toml,
            ioclass_csv: classes.csv().to_string(),
        };
        cache.write(SB_SLOT_BYTES, &sb.encode()?).await?;
        sb.seq = 2;
        cache.write(0, &sb.encode()?).await?;
        cache.flush().await?;
        let persisted = vec![Entry::INVALID; geom.lines as usize];
        Ok(Self::assemble(
            cache,
            core,
            geom,
            cfg,
            classes,
            sb,
            persisted,
            Vec::new(),
        ))
    }

    /// Opens the cache on `cache` over `core`: loads configuration and line metadata, keeping
    /// every persisted line, dirty and clean (a warm restart). A cache detached cleanly starts
    /// cold instead: the core alone was complete since, and may have been written without it.
    /// Fails on a corrupt or mismatched cache (see [`crate::fsck`] for a full report).
    pub async fn attach(cache: Arc<dyn BlockDevice>, core: Arc<dyn BlockDevice>) -> Result<Self> {
        let loaded = load(&cache, &core).await?;
        // A detached cache's entries are dropped below, damaged or not.
        if let Some(p) = loaded.problems.first() {
            if loaded.sb.state != SbState::Detached {
                return Err(p.clone().into_error());
            }
        }
        let Loaded {
            mut sb,
            cfg,
            classes,
            geom,
            mut entries,
            ..
        } = loaded;
        if sb.state == SbState::Detached {
            // A new instance: the entries on the media are another instance's from the
            // superblock's write on, so none is read back after a crash either.
            sb.instance_id = rand::random();
            entries = vec![Entry::INVALID; entries.len()];
        }
        let installs: Vec<(u32, Entry)> = entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.valid != 0)
            .map(|(i, e)| (line_u32(i), *e))
            .collect();
        let dev = Self::assemble(cache, core, geom, cfg, classes, sb, entries, installs);
        {
            let _g = dev.gate.write().await;
            if dev.lock().sb.state != SbState::Running {
                dev.lock().sb.state = SbState::Running;
                dev.write_superblock().await?;
            }
        }
        Ok(dev)
    }

    fn check_devices(cp: &DeviceProperties, kp: &DeviceProperties) -> Result<()> {
        if cp.alignment_bytes > SECTOR_BYTES || kp.alignment_bytes > SECTOR_BYTES {
            return Err(CacheError::Geometry(format!(
                "device alignments {} / {} exceed {SECTOR_BYTES}",
                cp.alignment_bytes, kp.alignment_bytes
            )));
        }
        if !kp.size_bytes.is_multiple_of(SECTOR_BYTES) || kp.size_bytes == 0 {
            return Err(CacheError::Geometry(format!(
                "core size {} is not a non-zero multiple of {SECTOR_BYTES}",
                kp.size_bytes
            )));
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn assemble(
        cache: Arc<dyn BlockDevice>,
        core: Arc<dyn BlockDevice>,
        geom: Geometry,
        cfg: CacheConfig,
        classes: IoClassTable,
        sb: Superblock,
        persisted: Vec<Entry>,
        installs: Vec<(u32, Entry)>,
    ) -> Self {
        let kp = core.properties();
        // One request becomes several device operations (a line each, cleaning beside it):
        // past a device's queue depth they wait their turn instead of failing.
        let core_queue = Arc::new(QueuedDevice::new(core));
        let core: Arc<dyn BlockDevice> = core_queue.clone();
        let cache: Arc<dyn BlockDevice> = Arc::new(QueuedDevice::new(cache));
        let mut table = LineTable::new(geom.lines);
        for (i, e) in installs {
            table.install(i, e.core_line, e.class, e.valid, e.dirty, 0);
        }
        table.rebuild_free();
        let props = DeviceProperties {
            size_bytes: kp.size_bytes,
            alignment_bytes: SECTOR_BYTES,
            // The data lives on the core in the end: a store lays it out for the core's kind
            // (on an HDD, small overwrites in place rather than copied elsewhere, which would
            // scatter what is written sequentially and read back sequentially).
            rotational: kp.rotational,
            optimal_io_bytes: kp.optimal_io_bytes,
            max_queue_depth: kp.max_queue_depth.max(cache.properties().max_queue_depth),
        };
        let st = State {
            detector: SeqDetector::new(cfg.seq_cutoff.max_streams),
            promoter: Promoter::new(&cfg.promotion),
            entry_seq: vec![0; geom.lines as usize],
            uncertain: vec![false; geom.lines as usize],
            cfg,
            classes,
            table,
            persisted,
            counters: Counters::default(),
            last_io_ms: 0,
            sb,
            cleaning_rounds: 0,
            quiescing: 0,
            pending_releases: Vec::new(),
            release_tickets: 0,
            persisting: HashMap::new(),
        };
        Self {
            cache,
            clean_core: core.clone(),
            core,
            core_queue,
            geom,
            props,
            clock: Arc::new(TokioClock::new()),
            gate: tokio::sync::RwLock::new(()),
            st: Arc::new(Mutex::new(st)),
            core_written: AtomicBool::new(false),
            core_gen: Arc::new(AtomicU64::new(0)),
            round_ended: Arc::new(tokio::sync::Notify::new()),
            flush_tickets: AtomicU64::new(0),
            flushed_ticket: tokio::sync::Mutex::new(0),
            released_ticket: tokio::sync::Mutex::new(0),
            meta_io: Arc::new(tokio::sync::Mutex::new(())),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Milliseconds on the cache's clock (by default tokio's, origin when the device was
    /// opened); the time base of [`CacheDevice::clean_step`].
    pub fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    /// Sends background cleaning I/O (dirty data written back to the core by
    /// [`CacheDevice::clean_step`], and the core flushes that make it durable) through
    /// `core_for_cleaning` instead of the core handle used by foreground I/O. Cleaning a
    /// request waits on (an eviction, a flush) keeps the foreground core. It must address the same core: an OSD passes the core wrapped in its
    /// scheduler's best-effort class, so cleaning is paced and never starves client I/O.
    pub fn with_cleaning_path(mut self, core_for_cleaning: Arc<dyn BlockDevice>) -> Result<Self> {
        if core_for_cleaning.properties().size_bytes != self.core.properties().size_bytes {
            return Err(CacheError::param(
                "cleaning path",
                "the cleaning device must be the same core (sizes differ)",
            ));
        }
        self.clean_core = Arc::new(QueuedDevice::sharing(core_for_cleaning, &self.core_queue));
        Ok(self)
    }

    /// Replaces the clock (before any I/O; for simulations that stretch time).
    /// [`CacheDevice::spawn_cleaner`] sleeps on tokio's clock and assumes the default one.
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// The layout of the cache device.
    pub fn geometry(&self) -> Geometry {
        self.geom
    }

    /// The current configuration.
    pub fn config(&self) -> CacheConfig {
        self.lock().cfg.clone()
    }

    /// The current I/O class table.
    pub fn io_classes(&self) -> IoClassTable {
        self.lock().classes.clone()
    }

    fn pieces(&self, offset_bytes: u64, len: usize) -> Vec<Piece> {
        let lb = self.geom.line_bytes;
        let mut out = Vec::with_capacity(len / usize_of(lb) + 2);
        let mut off = offset_bytes;
        let end = offset_bytes + len as u64;
        while off < end {
            let core_line = off / lb;
            let line_end = ((core_line + 1) * lb).min(end);
            let first = sector_u32((off % lb) / SECTOR_BYTES);
            let count = sector_u32((line_end - off) / SECTOR_BYTES);
            out.push(Piece {
                core_line,
                buf_off: usize_of(off - offset_bytes),
                len: usize_of(line_end - off),
                first_sector: first,
                mask: sector_mask(first, count),
            });
            off = line_end;
        }
        out
    }

    fn cache_addr(&self, line: u32, sector: u32) -> u64 {
        self.geom.line_offset(line) + u64::from(sector) * SECTOR_BYTES
    }

    fn decide(&self, st: &mut State, write: bool, offset: u64, len: u64, hint: IoHint) -> Decision {
        st.last_io_ms = self.now_ms();
        let class = st.classes.classify(len, hint);
        let seq_bytes = st.detector.observe(write, offset, len);
        let sc = &st.cfg.seq_cutoff;
        let cutoff = seq_bytes >= sc.threshold_bytes
            && match sc.policy {
                SeqCutoffPolicy::Always => true,
                SeqCutoffPolicy::Full => st.table.free_lines() == 0,
                SeqCutoffPolicy::Never => false,
            };
        if cutoff {
            st.counters.classes[class as usize].seq_cutoff += 1;
        }
        let mut allocate = st.classes.get(class).is_some_and(|c| c.allocation > 0.0);
        if allocate
            && !cutoff
            && st.cfg.promotion.dirty_full == DirtyFullPolicy::Bypass
            && (st.cfg.mode.promotes_reads() || st.cfg.mode.caches_writes_dirty())
            && self.would_evict_dirty(st, class, offset, len)
        {
            allocate = false;
            st.counters.classes[class as usize].dirty_full_bypass += 1;
        }
        Decision {
            class,
            cutoff,
            mode: st.cfg.mode,
            allocate,
        }
    }

    /// Reads with a store hint (used by I/O classes).
    pub async fn read_hinted(
        &self,
        offset_bytes: u64,
        buf: &mut [u8],
        hint: IoHint,
    ) -> BResult<()> {
        check_io(&self.props, IoKind::Read, offset_bytes, buf.len() as u64)?;
        if buf.is_empty() {
            return Ok(());
        }
        let pieces = self.pieces(offset_bytes, buf.len());
        let decision;
        let pure_miss;
        {
            let gate = self.gate.read().await;
            enum Fast {
                Hit(Vec<u32>),
                Core,
                Slow,
            }
            let fast = {
                let mut st = self.lock();
                decision = self.decide(&mut st, false, offset_bytes, buf.len() as u64, hint);
                let lines: Vec<Option<u32>> = pieces
                    .iter()
                    .map(|p| st.table.lookup(p.core_line))
                    .collect();
                let full_hit = lines
                    .iter()
                    .zip(&pieces)
                    .all(|(l, p)| l.is_some_and(|i| st.table.line(i).valid & p.mask == p.mask));
                let dirty_overlap = lines
                    .iter()
                    .zip(&pieces)
                    .any(|(l, p)| l.is_some_and(|i| st.table.line(i).dirty & p.mask != 0));
                pure_miss = lines.iter().all(Option::is_none);
                let promote =
                    decision.mode.promotes_reads() && !decision.cutoff && decision.allocate;
                let c = &mut st.counters.classes[decision.class as usize];
                // A full hit is served from the cache even when cut off: cut-off keeps streams
                // from filling the cache, it does not send cached data to the slow device.
                if full_hit {
                    c.read_hits += 1;
                    let hit: Vec<u32> = lines.into_iter().flatten().collect();
                    for &i in &hit {
                        st.table.touch(i);
                    }
                    Fast::Hit(hit)
                } else if !dirty_overlap && !promote {
                    c.read_pass_through += 1;
                    Fast::Core
                } else {
                    Fast::Slow
                }
            };
            match fast {
                Fast::Hit(lines) => {
                    let mut rest: &mut [u8] = buf;
                    let mut reads = Vec::with_capacity(pieces.len());
                    for (p, i) in pieces.iter().zip(lines) {
                        let (piece, after) = std::mem::take(&mut rest).split_at_mut(p.len);
                        rest = after;
                        let addr = self.cache_addr(i, p.first_sector);
                        reads.push(self.cache.read(addr, piece));
                    }
                    debug_assert!(rest.is_empty(), "the pieces cover the buffer");
                    run_bounded(reads.into_iter()).await?;
                    return Ok(());
                }
                Fast::Core => {
                    // Nothing dirty in the range: the core holds its data, and the slow
                    // device is read without holding up requests that need the gate
                    // exclusively (a write concurrent with this read may land either side).
                    drop(gate);
                    return self.core.read(offset_bytes, buf).await;
                }
                Fast::Slow => {}
            }
        }
        // A miss, or a read over dirty sectors: the core, with the cache's dirty sectors on
        // top. The dirty sectors are read first, under the shared gate (no line can be
        // cleaned or evicted meanwhile); the core is read without the gate, so misses reach
        // the slow device together and never hold up requests that need the gate
        // exclusively. The core's write generation is taken before either: what was read is
        // installed only if no core write (foreground, cleaning or discard) could have
        // overlapped it.
        let core_gen = self.core_gen.load(Ordering::Acquire);
        let (overlay, any_valid) = if pure_miss {
            (Vec::new(), false)
        } else {
            let _g = self.gate.read().await;
            let (dirty_runs, any_valid) = {
                let st = self.lock();
                let mut runs_out = Vec::new();
                let mut any_valid = false;
                for p in &pieces {
                    let Some(i) = st.table.lookup(p.core_line) else {
                        continue;
                    };
                    any_valid |= st.table.line(i).valid & p.mask != 0;
                    for (s, n) in runs(st.table.line(i).dirty & p.mask) {
                        let at = p.buf_off + usize_of(u64::from(s - p.first_sector) * SECTOR_BYTES);
                        let len = usize_of(u64::from(n) * SECTOR_BYTES);
                        runs_out.push((at, len, self.cache_addr(i, s)));
                    }
                }
                (runs_out, any_valid)
            };
            let mut reads = Vec::with_capacity(dirty_runs.len());
            for &(at, len, addr) in &dirty_runs {
                reads.push(async move {
                    let mut b = vec![0u8; len];
                    self.cache.read(addr, &mut b).await.map(|()| (at, b))
                });
            }
            use futures_util::StreamExt;
            let got: Vec<BResult<(usize, Vec<u8>)>> = futures_util::stream::iter(reads)
                .buffer_unordered(LINE_IO_DEPTH)
                .collect()
                .await;
            let overlay = got.into_iter().collect::<BResult<Vec<_>>>()?;
            (overlay, any_valid)
        };
        self.core.read(offset_bytes, buf).await?;
        for (at, b) in overlay {
            buf[at..at + b.len()].copy_from_slice(&b);
        }
        {
            let c = &mut self.lock().counters.classes[decision.class as usize];
            if any_valid {
                c.read_partial_hits += 1;
            } else {
                c.read_misses += 1;
            }
        }
        let promote = decision.mode.promotes_reads() && !decision.cutoff && decision.allocate && {
            let mut st = self.lock();
            let occ = st.occupancy_pct();
            let params = st.cfg.promotion.clone();
            st.promoter
                .should_promote(&params, pieces[0].core_line, occ)
        };
        if promote {
            self.clean_victims_ahead(&pieces, decision.class).await?;
            let _g = self.gate.write().await;
            // A core write or discard since the read: what was read may be stale.
            if self.core_gen.load(Ordering::Acquire) == core_gen {
                self.install_clean(&pieces, buf, decision.class).await?;
            }
        }
        Ok(())
    }

    /// Installs data just read (`buf`, covering `pieces`) as clean lines, filling only the
    /// sectors no line holds. Caller holds the gate exclusively. Like
    /// [`CacheDevice::write_back`], every line is mapped first and the fills go out together,
    /// one piece at a time only if mapping evicted a line mapped for an earlier piece.
    async fn install_clean(&self, pieces: &[Piece], buf: &[u8], class: u8) -> BResult<()> {
        let Some(lines) = self.map_all(pieces, class).await? else {
            for p in pieces {
                let Some(line) = self.line_for(p.core_line, class).await? else {
                    break;
                };
                let missing = p.mask & !self.lock().table.line(line).valid;
                self.fill(line, p, missing, buf).await?;
            }
            return Ok(());
        };
        let fills: Vec<(u32, &Piece, u16)> = {
            let st = self.lock();
            pieces
                .iter()
                .zip(&lines)
                .filter_map(|(p, line)| line.map(|i| (i, p, p.mask & !st.table.line(i).valid)))
                .collect()
        };
        self.write_lines(&fills, buf).await?;
        let mut st = self.lock();
        for &(i, p, missing) in &fills {
            debug_assert_eq!(st.table.lookup(p.core_line), Some(i));
            if missing != 0 {
                st.table.mark_clean_valid(i, missing);
            }
            st.table.touch(i);
        }
        Ok(())
    }

    /// For a write-back write under the shared gate: the lines of every piece if each is
    /// mapped and writable in place (no persisted clean claim on its sectors) or can be taken
    /// from the free list within the class's share, all reserved atomically; else `None` and
    /// nothing changes (the caller takes the exclusive path). Returns (line, newly mapped).
    /// Sectors of a reserved line that the table holds as clean stop being valid there until
    /// the write marks them dirty.
    fn reserve_in_place(&self, pieces: &[Piece], class: u8) -> Option<Vec<(u32, bool)>> {
        let mut st = self.lock();
        let mut missing = 0u32;
        for p in pieces {
            match st.table.lookup(p.core_line) {
                Some(i) => match st.media_clean_claims(i, p.core_line) {
                    Some(clean) if clean & p.mask == 0 => {}
                    _ => return None,
                },
                None => missing += 1,
            }
        }
        if !Self::room_for(&st, missing, class) {
            return None;
        }
        let mut out = Vec::with_capacity(pieces.len());
        for p in pieces {
            match st.table.lookup(p.core_line) {
                Some(i) => {
                    // Sectors the table holds as clean stop being valid until the write's
                    // data lands and marks them dirty: a write dropped midway leaves them
                    // read from the core, never mixed data served as clean.
                    st.forget_clean(i, p.mask);
                    out.push((i, false));
                }
                None => out.push((st.table.alloc(p.core_line, class)?, true)),
            }
        }
        Some(out)
    }

    /// Whether `missing` more lines can be taken from the free list for `class` (within its
    /// share of the cache).
    fn room_for(st: &State, missing: u32, class: u8) -> bool {
        if missing == 0 {
            return true;
        }
        let share = st.classes.get(class).map_or(1.0, |c| c.allocation);
        let limit = share_of(share, st.table.len()).max(1);
        st.table.free_lines() >= missing && st.table.class_lines(class) + missing <= limit
    }

    /// For a write-back write under the shared gate that [`CacheDevice::reserve_in_place`]
    /// refused: the persisted clean claims on its sectors, as (line, core line, sectors),
    /// when they are all that stands in its way (no line uncertain or claimed for another
    /// core line, room for the unmapped pieces); `None` otherwise.
    fn releasable_claims(&self, pieces: &[Piece], class: u8) -> Option<Vec<ClaimRelease>> {
        let st = self.lock();
        let mut claims = Vec::new();
        let mut missing = 0u32;
        for p in pieces {
            let Some(i) = st.table.lookup(p.core_line) else {
                missing += 1;
                continue;
            };
            let clean = st.media_clean_claims(i, p.core_line)? & p.mask;
            if clean != 0 {
                claims.push(ClaimRelease {
                    line: i,
                    core_line: p.core_line,
                    sectors: clean,
                });
            }
        }
        (!claims.is_empty() && Self::room_for(&st, missing, class)).then_some(claims)
    }

    /// Drops the persisted clean claims `claims` (line, sectors) on media, so that a writer
    /// holding the shared gate may overwrite those sectors in place. Writers arriving while
    /// one release persists share the next one: a release persist covers every claim handed
    /// in before it starts. The entries written claim a subset of what their persisted ones
    /// claim, so no data needs to be made durable first (one page write and one cache flush
    /// per release persist, however many writers it serves).
    ///
    /// Caller holds the shared gate, which keeps the lines' mappings fixed and every other
    /// persist out but a flush's, which the release lock orders with this one; one release
    /// persist runs at a time. The released sectors stop being valid in the table too, so a
    /// flush between the release and the write does not claim them again. A release that
    /// fails leaves its lines uncertain, which sends their writers to the exclusive path.
    async fn release_claims(&self, claims: Vec<ClaimRelease>) -> BResult<()> {
        let ticket = {
            let mut st = self.lock();
            st.pending_releases.extend(claims);
            st.release_tickets += 1;
            st.release_tickets
        };
        let mut done = self.released_ticket.lock().await;
        if *done >= ticket {
            return Ok(());
        }
        let (targets, covers) = {
            let mut st = self.lock();
            let pending = std::mem::take(&mut st.pending_releases);
            let mut sectors: BTreeMap<u32, u16> = BTreeMap::new();
            // A claim handed in by a writer since dropped may name a line remapped meanwhile:
            // only claims on the core line the line still holds are released.
            for c in pending {
                let e = st.persisted[c.line as usize];
                if e.core_line == c.core_line && st.table.line(c.line).core_line == c.core_line {
                    *sectors.entry(c.line).or_default() |= c.sectors;
                }
            }
            let mut targets: Vec<(u32, Entry)> = Vec::with_capacity(sectors.len());
            for (i, mask) in sectors {
                if st.uncertain[i as usize] {
                    continue;
                }
                st.forget_clean(i, mask);
                let mut e = st.persisted[i as usize];
                let clean = e.valid & !e.dirty & mask;
                if clean == 0 {
                    continue;
                }
                e.valid &= !clean;
                if e.valid == 0 {
                    e = Entry::INVALID;
                }
                targets.push((i, e));
            }
            (targets, st.release_tickets)
        };
        if !targets.is_empty() {
            self.persist_with(targets, false).await?;
            self.lock().counters.claim_releases += 1;
        }
        *done = covers;
        Ok(())
    }

    /// Writes the sectors `mask` of piece `p` from `buf` into `line` as valid clean data.
    async fn fill(&self, line: u32, p: &Piece, mask: u16, buf: &[u8]) -> BResult<()> {
        if mask != 0 {
            self.ensure_safe(line, mask).await?;
            self.write_sectors(line, p, mask, buf).await?;
            self.lock().table.mark_clean_valid(line, mask);
        }
        self.lock().table.touch(line);
        Ok(())
    }

    async fn write_sectors(&self, line: u32, p: &Piece, mask: u16, buf: &[u8]) -> BResult<()> {
        for (s, n) in runs(mask) {
            let at = p.buf_off + usize_of(u64::from(s - p.first_sector) * SECTOR_BYTES);
            let len = usize_of(u64::from(n) * SECTOR_BYTES);
            self.cache
                .write(self.cache_addr(line, s), &buf[at..at + len])
                .await?;
        }
        Ok(())
    }

    /// Before cache data of `line` sectors `mask` is overwritten: if the persisted entry claims
    /// any of them as clean (or claims the line for another core line), persist an entry
    /// without those claims first. Caller holds the gate exclusively.
    async fn ensure_safe(&self, line: u32, mask: u16) -> BResult<()> {
        let target = Self::claim_without(&self.lock(), line, mask);
        match target {
            Some(t) => self.persist(vec![t]).await,
            None => Ok(()),
        }
    }

    /// The entry `line` must have persisted before sectors `mask` of it are overwritten, if
    /// its persisted entry claims any of them as clean data or claims the line for another
    /// core line; `None` when it is safe already.
    fn claim_without(st: &State, line: u32, mask: u16) -> Option<(u32, Entry)> {
        let p = st.persisted[line as usize];
        let l = st.table.line(line);
        let foreign = st.uncertain[line as usize] || (p.valid != 0 && p.core_line != l.core_line);
        if !foreign && p.valid & !p.dirty & mask == 0 {
            return None;
        }
        let mut e = st.mem_entry(line);
        e.valid &= !(mask & !e.dirty);
        if e.valid == 0 {
            e = Entry::INVALID;
        }
        Some((line, e))
    }

    /// Makes data durable and writes the given entries: flush core, flush cache, write their
    /// metadata pages, flush cache. Caller holds the gate exclusively.
    async fn persist(&self, targets: Vec<(u32, Entry)>) -> BResult<()> {
        // Entries that claim nothing need no data to be durable first.
        let data_first = targets.iter().any(|(_, e)| e.valid != 0);
        self.persist_with(targets, data_first).await
    }

    /// [`CacheDevice::persist`], flushing both devices first if `data_first` (always for a
    /// client flush, which must make every completed write durable).
    async fn persist_with(&self, targets: Vec<(u32, Entry)>, data_first: bool) -> BResult<()> {
        {
            let mut st = self.lock();
            for &(i, e) in &targets {
                st.persisting.insert(i, e);
            }
        }
        let mut attempt = PersistAttempt {
            dev: self,
            lines: targets.iter().map(|(i, _)| *i).collect(),
            core_flush_owed: false,
            pages_started: false,
            completed: false,
        };
        if data_first {
            // The core needs no flush when nothing was written to it since its last one (in
            // write-back, most flushes): an HDD flush per commit is what a cache saves.
            if self.core_written.swap(false, Ordering::AcqRel) {
                attempt.core_flush_owed = true;
                self.core.flush().await?;
                attempt.core_flush_owed = false;
            }
            self.cache.flush().await?;
        }
        if targets.is_empty() {
            attempt.completed = true;
            return Ok(());
        }
        // The pages carry the targets' new entries and every other line's persisted one;
        // `persisted` takes the new entries only once they are durable.
        let pages: BTreeMap<u64, Vec<u8>> = {
            let mut st = self.lock();
            let new: BTreeMap<u32, Entry> = targets.iter().copied().collect();
            let mut pages = BTreeMap::new();
            for &i in new.keys() {
                st.entry_seq[i as usize] = st.entry_seq[i as usize].wrapping_add(1);
                pages.insert(u64::from(i) / ENTRIES_PER_PAGE, Vec::new());
            }
            let instance = st.sb.instance_id;
            for (page, bytes) in pages.iter_mut() {
                bytes.resize(META_PAGE_LEN, 0);
                let first = page * ENTRIES_PER_PAGE;
                let last = (first + ENTRIES_PER_PAGE).min(u64::from(self.geom.lines));
                for i in first..last {
                    let line = u32::try_from(i).expect("line indexes fit in u32");
                    let entry = new.get(&line).unwrap_or(&st.persisted[usize_of(i)]);
                    let at = usize_of(i - first) * ENTRY_BYTES;
                    let enc = encode_entry(entry, instance, st.entry_seq[usize_of(i)]);
                    bytes[at..at + ENTRY_BYTES].copy_from_slice(&enc);
                }
            }
            st.counters.meta_page_writes += pages.len() as u64;
            pages
        };
        // The pages are independent and the flush below covers them all: they go out
        // together (a flush after scattered random writes changes one page per line). They
        // run to the end in a task of their own even if this future is dropped (a device's
        // write may outlive its future anyway), holding `meta_io` meanwhile.
        let meta_io = self.meta_io.clone().lock_owned().await;
        attempt.pages_started = true;
        let cache = self.cache.clone();
        // Whatever the core path holds for the device's life (an OSD's lock on the cache
        // file) is held until the pages land too, so that no new instance attaches before.
        let core_path = self.clean_core.clone();
        let pages: Vec<(u64, Vec<u8>)> = pages
            .into_iter()
            .map(|(page, bytes)| (self.geom.page_offset(page), bytes))
            .collect();
        let io = tokio::spawn(async move {
            let (_meta_io, _core_path) = (meta_io, core_path);
            let mut writes = Vec::with_capacity(pages.len());
            for (at, bytes) in &pages {
                writes.push(cache.write(*at, bytes));
            }
            run_bounded(writes.into_iter()).await?;
            cache.flush().await
        });
        let written = match io.await {
            Ok(written) => written,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(e) => Err(BlockDevError::Io {
                kind: IoKind::Write,
                source: std::io::Error::other(e),
            }),
        };
        written?;
        let mut st = self.lock();
        for (i, e) in targets {
            st.persisting.remove(&i);
            st.persisted[i as usize] = e;
            st.uncertain[i as usize] = false;
            if st.mem_entry(i) != e {
                // An entry persisted other than the line stands (without a claim, before a
                // change): the next flush owes the line's own.
                st.table.restore_changed([i]);
            }
        }
        attempt.completed = true;
        Ok(())
    }

    /// The line holding `core_line`, mapping one (evicting if needed) if none does; `None` when
    /// nothing can be evicted. Caller holds the gate exclusively.
    async fn line_for(&self, core_line: u64, class: u8) -> BResult<Option<u32>> {
        for _ in 0..3 {
            {
                let mut st = self.lock();
                if let Some(i) = st.table.lookup(core_line) {
                    return Ok(Some(i));
                }
                let over_share = {
                    let share = st.classes.get(class).map_or(1.0, |c| c.allocation);
                    let limit = share_of(share, st.table.len()).max(1);
                    st.table.class_lines(class) >= limit
                };
                if !over_share {
                    if let Some(i) = st.table.alloc(core_line, class) {
                        return Ok(Some(i));
                    }
                }
            }
            if !self.reclaim(class).await? {
                return Ok(None);
            }
        }
        Ok(None)
    }

    /// The next `batch` eviction victims for lines of `class`: from `class` itself if it is
    /// at its allocation share, else from the classes with the lowest eviction priority
    /// first; clean lines before dirty ones, never a line being cleaned.
    fn victims(st: &State, class: u8, batch: usize) -> Vec<u32> {
        let mut order: Vec<u8> = if Self::at_share(st, class) {
            vec![class]
        } else {
            let mut ids: Vec<(u8, u8)> = st
                .classes
                .classes()
                .iter()
                .map(|c| (c.eviction_priority, c.id))
                .collect();
            ids.sort_by(|a, b| b.cmp(a));
            ids.into_iter().map(|(_, id)| id).collect()
        };
        order.dedup();
        let mut cands = Vec::new();
        for c in order {
            cands.extend(
                st.table
                    .lru_lines(c, VICTIM_SCAN_FACTOR * batch)
                    .into_iter()
                    .filter(|&i| !st.table.line(i).cleaning),
            );
            if cands.len() >= VICTIM_SCAN_FACTOR * batch {
                break;
            }
        }
        let (mut clean, dirty): (Vec<u32>, Vec<u32>) = cands
            .into_iter()
            .partition(|&i| st.table.line(i).dirty == 0);
        clean.extend(dirty);
        clean.truncate(batch);
        clean
    }

    /// Whether caching the core lines of `offset_bytes .. + len_bytes` would evict dirty
    /// lines: the eviction batches the request needs (as [`CacheDevice::reclaim`] takes them)
    /// would include a dirty victim, or there is nothing left to evict.
    fn would_evict_dirty(&self, st: &State, class: u8, offset_bytes: u64, len_bytes: u64) -> bool {
        let lb = self.geom.line_bytes;
        let first = offset_bytes / lb;
        let last = (offset_bytes + len_bytes.max(1) - 1) / lb;
        let unmapped = (first..=last)
            .filter(|&l| st.table.lookup(l).is_none())
            .count();
        let needed = match Self::at_share(st, class) {
            true => unmapped,
            false => unmapped.saturating_sub(st.table.free_lines() as usize),
        };
        if needed == 0 {
            return false;
        }
        let batch = reclaim_batch(st.table.len());
        let count = needed
            .div_ceil(batch)
            .saturating_mul(batch)
            .min(MAX_CLEAN_AHEAD_LINES);
        let victims = Self::victims(st, class, count);
        victims.len() < needed.min(count) || victims.iter().any(|&i| st.table.line(i).dirty != 0)
    }

    /// Whether `class` holds its whole allocation share of the lines.
    fn at_share(st: &State, class: u8) -> bool {
        let share = st.classes.get(class).map_or(1.0, |c| c.allocation);
        let limit = share_of(share, st.table.len()).max(1);
        st.table.class_lines(class) >= limit
    }

    /// Before a request that may map lines for `pieces` takes the gate exclusively: if it
    /// would have to evict dirty lines, cleans them now, with the gate let go while the core
    /// writes and flushes, so that hits and other requests go on meanwhile and the eviction
    /// that follows finds them clean. A line dirtied again in between is cleaned by the
    /// eviction itself, under the gate, as before.
    async fn clean_victims_ahead(&self, pieces: &[Piece], class: u8) -> BResult<()> {
        // The lines the request must evict for (0: none).
        let room_needed = |st: &State| -> usize {
            let unmapped = pieces
                .iter()
                .filter(|p| st.table.lookup(p.core_line).is_none())
                .count();
            match Self::at_share(st, class) {
                true => unmapped,
                false => unmapped.saturating_sub(st.table.free_lines() as usize),
            }
        };
        if room_needed(&self.lock()) == 0 {
            return Ok(());
        }
        let g = self.gate.write().await;
        let picked = {
            let mut st = self.lock();
            let needed = room_needed(&st);
            if needed == 0 {
                return Ok(());
            }
            // Evictions go by batches: clean the victims of every batch the request needs.
            let batch = reclaim_batch(st.table.len());
            let count = needed
                .div_ceil(batch)
                .saturating_mul(batch)
                .min(MAX_CLEAN_AHEAD_LINES);
            let dirty: Vec<u32> = Self::victims(&st, class, count)
                .into_iter()
                .filter(|&i| st.table.line(i).dirty != 0)
                .collect();
            self.begin_round(&mut st, dirty)
        };
        let Some(round) = picked else {
            return Ok(());
        };
        let cleaned = self.clean_outside_gate(g, round, &self.core).await?;
        self.lock().counters.victims_cleaned_ahead += cleaned as u64;
        Ok(())
    }

    /// Evicts a batch of lines ([`CacheDevice::victims`]). Dirty victims (rare: a request
    /// cleans its victims ahead, outside the gate) are cleaned synchronously. Returns false
    /// if nothing could be evicted.
    async fn reclaim(&self, class: u8) -> BResult<bool> {
        let victims = {
            let st = self.lock();
            Self::victims(&st, class, reclaim_batch(st.table.len()))
        };
        if victims.is_empty() {
            return Ok(false);
        }
        let dirty: Vec<u32> = {
            let st = self.lock();
            victims
                .iter()
                .copied()
                .filter(|&i| st.table.line(i).dirty != 0)
                .collect()
        };
        self.clean_now(&dirty).await?;
        self.lock().counters.victims_cleaned_blocking += dirty.len() as u64;
        // The victims stay mapped until their invalid entries are durable: a persist that
        // fails leaves them holding their blocks (uncertain on media), so a later write of one
        // of those blocks goes to the same line and no crash can find two lines claiming it.
        self.persist(victims.iter().map(|&i| (i, Entry::INVALID)).collect())
            .await?;
        let mut st = self.lock();
        for &i in &victims {
            st.table.unmap(i);
            st.table.release(i);
        }
        st.counters.evictions += victims.len() as u64;
        Ok(true)
    }

    /// Reads the dirty sectors of `line` from the cache: (core line, mask, gen, bytes).
    async fn read_dirty(&self, line: u32) -> BResult<(u64, u16, u32, SectorRuns)> {
        let (core_line, mask, gen) = {
            let st = self.lock();
            let l = st.table.line(line);
            (l.core_line, l.dirty, l.gen)
        };
        let mut runs_data = Vec::new();
        for (s, n) in runs(mask) {
            let mut b = vec![0u8; usize_of(u64::from(n) * SECTOR_BYTES)];
            self.cache.read(self.cache_addr(line, s), &mut b).await?;
            runs_data.push((s, b));
        }
        Ok((core_line, mask, gen, runs_data))
    }

    /// The dirty runs of `batch` as core writes in core order, adjacent ones merged into one
    /// write of up to [`MAX_CLEAN_WRITE_BYTES`]: lines written in sequence are cleaned in
    /// sequence, one large write for the HDD instead of one seek per line.
    fn merged_core_writes(&self, batch: &[CoreWrite]) -> Vec<(u64, Vec<u8>)> {
        let line_bytes = self.geom.line_bytes;
        let mut extents: Vec<(u64, &[u8])> = batch
            .iter()
            .flat_map(|(core_line, runs)| {
                runs.iter().map(move |(s, b)| {
                    (
                        core_line * line_bytes + u64::from(*s) * SECTOR_BYTES,
                        b.as_slice(),
                    )
                })
            })
            .collect();
        extents.sort_unstable_by_key(|e| e.0);
        let mut out: Vec<(u64, Vec<u8>)> = Vec::new();
        for (addr, bytes) in extents {
            match out.last_mut() {
                Some((at, buf))
                    if *at + buf.len() as u64 == addr
                        && buf.len() + bytes.len() <= MAX_CLEAN_WRITE_BYTES =>
                {
                    buf.extend_from_slice(bytes);
                }
                last => {
                    debug_assert!(
                        last.is_none_or(|(at, buf)| *at + buf.len() as u64 <= addr),
                        "two dirty runs of one batch overlap on the core"
                    );
                    out.push((addr, bytes.to_vec()));
                }
            }
        }
        out
    }

    /// Writes the dirty data of several lines to `core`, adjacent runs merged, with up to
    /// [`CLEAN_QUEUE_DEPTH`] writes in flight (bounded by the core's queue depth), so the core
    /// can reorder them, then flushes the core. The writes and the flush run to the end in a
    /// task of their own even if this future is dropped (a device's write may outlive its
    /// future anyway). The task owns `round` (the lines' cleaning round) until they are done
    /// and hands it back with their outcome; a dropped caller's round ends there, once nothing
    /// of it can land any more, so no later clean of its lines starts before. (`None` back:
    /// the task was cancelled, by the runtime's shutdown.)
    async fn write_core_detached(
        &self,
        core: &Arc<dyn BlockDevice>,
        batch: &[CoreWrite],
        round: CleaningRound,
    ) -> (Option<CleaningRound>, BResult<()>) {
        // At most half the core's queue: the cleaning path may wait for a scheduler slot while
        // it holds queue slots, and foreground I/O must always find some free.
        let depth = CLEAN_QUEUE_DEPTH.min((core.properties().max_queue_depth / 2).max(1));
        let merged = self.merged_core_writes(batch);
        let core = core.clone();
        let core_gen = self.core_gen.clone();
        // Whatever the cleaning path holds for the device's life (an OSD's lock on the cache
        // file) is held until these writes land too, so that no new instance attaches and
        // cleans the same lines before they do.
        let core_path = self.clean_core.clone();
        let io = tokio::spawn(async move {
            let _core_path = core_path;
            let outcome = async {
                core_gen.fetch_add(1, Ordering::AcqRel);
                for chunk in merged.chunks(depth) {
                    let writes = chunk.iter().map(|(addr, data)| core.write(*addr, data));
                    let results = futures_util::future::join_all(writes).await;
                    core_gen.fetch_add(1, Ordering::AcqRel);
                    for r in results {
                        r?;
                    }
                }
                core.flush().await
            }
            .await;
            (round, outcome)
        });
        match io.await {
            Ok((round, outcome)) => (Some(round), outcome),
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(e) => (
                None,
                Err(BlockDevError::Io {
                    kind: IoKind::Write,
                    source: std::io::Error::other(e),
                }),
            ),
        }
    }

    /// Cleans `lines` synchronously (caller holds the gate exclusively). Through the
    /// foreground core, never the cleaning path: the I/O waiting on this (an eviction for a
    /// request, a flush) may itself hold a scheduler slot the cleaning path would wait for.
    async fn clean_now(&self, lines: &[u32]) -> BResult<()> {
        if lines.is_empty() {
            return Ok(());
        }
        let mut done = Vec::new();
        let mut batch = Vec::new();
        for &i in lines {
            let (core_line, mask, _, data) = self.read_dirty(i).await?;
            batch.push((core_line, data));
            done.push((i, mask));
        }
        let round = self.mark_round(&mut self.lock(), lines.to_vec());
        let (round, io) = self.write_core_detached(&self.core, &batch, round).await;
        drop(round);
        io?;
        let mut st = self.lock();
        for (i, mask) in done {
            st.table.clear_dirty(i, mask);
        }
        st.counters.cleaned_lines += lines.len() as u64;
        Ok(())
    }

    /// Writes with a store hint (used by I/O classes).
    pub async fn write_hinted(&self, offset_bytes: u64, data: &[u8], hint: IoHint) -> BResult<()> {
        check_io(&self.props, IoKind::Write, offset_bytes, data.len() as u64)?;
        if data.is_empty() {
            return Ok(());
        }
        let pieces = self.pieces(offset_bytes, data.len());
        // Decide once, under the shared gate. A write that caches nothing and touches no
        // mapped line goes to the core without excluding anyone: the mapping cannot change
        // while the shared gate is held (fills and evictions need it exclusively).
        let (d, promote) = {
            let _g = self.gate.read().await;
            let (d, any_mapped, promote) = {
                let mut st = self.lock();
                let d = self.decide(&mut st, true, offset_bytes, data.len() as u64, hint);
                let mapped: Vec<bool> = pieces
                    .iter()
                    .map(|p| st.table.lookup(p.core_line).is_some())
                    .collect();
                let all_mapped = mapped.iter().all(|&m| m);
                let any_mapped = mapped.iter().any(|&m| m);
                let occ = st.occupancy_pct();
                let params = st.cfg.promotion.clone();
                let promote = !d.cutoff
                    && d.allocate
                    && (all_mapped
                        || st
                            .promoter
                            .should_promote(&params, pieces[0].core_line, occ));
                (d, any_mapped, promote)
            };
            if d.mode.caches_writes_dirty() && promote {
                if let Some(lines) = self.reserve_in_place_releasing(&pieces, d.class).await? {
                    let hit = !lines.iter().any(|&(_, fresh)| fresh);
                    {
                        let c = &mut self.lock().counters.classes[d.class as usize];
                        if hit {
                            c.write_hits += 1;
                        } else {
                            c.write_misses += 1;
                        }
                    }
                    run_bounded(self.in_place_writes(&pieces, &lines, data).into_iter()).await?;
                    self.mark_written_in_place(&pieces, &lines);
                    return Ok(());
                }
            }
            let caches = match d.mode {
                CacheMode::Wb | CacheMode::Wo | CacheMode::Wt => promote,
                CacheMode::Wa => any_mapped && !d.cutoff,
                CacheMode::Pt | CacheMode::Wi => false,
            };
            if !any_mapped && !caches {
                self.lock().counters.classes[d.class as usize].write_pass_through += 1;
                return self.write_core(offset_bytes, data).await;
            }
            if !caches
                && d.mode.caches_writes_dirty()
                && self.write_beside_cache(&pieces, data, d.class).await?
            {
                self.lock().counters.classes[d.class as usize].write_pass_through += 1;
                return Ok(());
            }
            (d, promote)
        };
        if promote {
            self.clean_victims_ahead(&pieces, d.class).await?;
        }
        let _g = self.gate.write().await;
        let (dirty_overlap, all_mapped, any_mapped) = {
            let st = self.lock();
            let lines: Vec<Option<u32>> = pieces
                .iter()
                .map(|p| st.table.lookup(p.core_line))
                .collect();
            let dirty_overlap = lines
                .iter()
                .zip(&pieces)
                .any(|(l, p)| l.is_some_and(|i| st.table.line(i).dirty & p.mask != 0));
            (
                dirty_overlap,
                lines.iter().all(Option::is_some),
                lines.iter().any(Option::is_some),
            )
        };
        let count = |f: &dyn Fn(&mut crate::stats::RequestCounters)| {
            f(&mut self.lock().counters.classes[d.class as usize]);
        };
        if dirty_overlap || (d.mode.caches_writes_dirty() && promote) {
            count(&|c| {
                if all_mapped {
                    c.write_hits += 1
                } else {
                    c.write_misses += 1
                }
            });
            return self.write_back(&pieces, data, d.class).await;
        }
        match d.mode {
            CacheMode::Wt if promote => {
                count(&|c| {
                    if all_mapped {
                        c.write_hits += 1
                    } else {
                        c.write_misses += 1
                    }
                });
                self.write_through(offset_bytes, &pieces, data, d.class, true)
                    .await
            }
            CacheMode::Wa if any_mapped && !d.cutoff => {
                count(&|c| c.write_hits += 1);
                self.write_through(offset_bytes, &pieces, data, d.class, false)
                    .await
            }
            _ => {
                count(&|c| c.write_pass_through += 1);
                self.write_invalidate(offset_bytes, &pieces, data).await
            }
        }
    }

    /// A write-back write the cache does not admit (its class caches nothing, its stream is
    /// cut off, or the promotion policy declines it) that touches lines the cache holds, done
    /// under the shared gate the caller holds: the pieces on mapped lines are overwritten in
    /// place and marked dirty, so the
    /// cache keeps the newest copy of every sector it holds (only the clean claims under the
    /// new bytes are dropped on media first, in a shared release persist), and the other
    /// pieces go to the core. Nothing is evicted or invalidated, and the gate stays shared
    /// while the core writes. `false` when that cannot be done without excluding others (a mapped
    /// line is uncertain or claimed on media for another core line): nothing was written, and
    /// the caller takes the exclusive path.
    async fn write_beside_cache(&self, pieces: &[Piece], data: &[u8], class: u8) -> BResult<bool> {
        let (mapped, unmapped): (Vec<Piece>, Vec<Piece>) = {
            let st = self.lock();
            pieces
                .iter()
                .partition(|p| st.table.lookup(p.core_line).is_some())
        };
        let Some(lines) = self.reserve_in_place_releasing(&mapped, class).await? else {
            return Ok(false);
        };
        // Lines are unmapped only under the exclusive gate, so every mapped piece kept its line.
        assert!(
            lines.iter().all(|&(_, fresh)| !fresh),
            "a mapped piece lost its line under the shared gate"
        );
        // Collected first: futures made inside iterator adaptors would not be `Send` here.
        let mut to_core = Vec::new();
        for (addr, from, to) in self.contiguous_core_runs(&unmapped) {
            to_core.push(self.write_core(addr, &data[from..to]));
        }
        let (cached, cored) = futures_util::future::join(
            run_bounded(self.in_place_writes(&mapped, &lines, data).into_iter()),
            run_bounded(to_core.into_iter()),
        )
        .await;
        cached?;
        cored?;
        self.mark_written_in_place(&mapped, &lines);
        Ok(true)
    }

    /// [`CacheDevice::reserve_in_place`], with the clean claims in the way released first
    /// when they are all that refuses it ([`CacheDevice::releasable_claims`]). Caller holds
    /// the shared gate.
    async fn reserve_in_place_releasing(
        &self,
        pieces: &[Piece],
        class: u8,
    ) -> BResult<Option<Vec<(u32, bool)>>> {
        if let Some(lines) = self.reserve_in_place(pieces, class) {
            return Ok(Some(lines));
        }
        let Some(claims) = self.releasable_claims(pieces, class) else {
            return Ok(None);
        };
        self.release_claims(claims).await?;
        Ok(self.reserve_in_place(pieces, class))
    }

    /// The cache writes of `pieces` into the `lines` reserved for them in place (collected:
    /// futures made inside iterator adaptors would not be `Send` in the callers).
    fn in_place_writes<'a>(
        &'a self,
        pieces: &'a [Piece],
        lines: &[(u32, bool)],
        data: &'a [u8],
    ) -> Vec<impl std::future::Future<Output = BResult<()>> + Send + 'a> {
        let mut writes = Vec::with_capacity(pieces.len());
        for (p, &(line, _)) in pieces.iter().zip(lines) {
            writes.push(self.write_sectors(line, p, p.mask, data));
        }
        writes
    }

    /// Marks the sectors of `pieces` dirty in the `lines` they were written into in place,
    /// once those writes completed (a flush must see only completed writes as dirty).
    fn mark_written_in_place(&self, pieces: &[Piece], lines: &[(u32, bool)]) {
        let now = self.now_ms();
        let mut st = self.lock();
        for (p, &(line, _)) in pieces.iter().zip(lines) {
            st.table.mark_dirty(line, p.mask, now);
            st.table.touch(line);
        }
    }

    /// `pieces` (in request order) as core writes: (core address, buffer start, buffer end),
    /// pieces adjacent in the request merged into one write.
    fn contiguous_core_runs(&self, pieces: &[Piece]) -> Vec<(u64, usize, usize)> {
        let mut out: Vec<(u64, usize, usize)> = Vec::new();
        for p in pieces {
            match out.last_mut() {
                Some(last) if last.2 == p.buf_off => last.2 += p.len,
                _ => out.push((
                    p.core_line * self.geom.line_bytes + u64::from(p.first_sector) * SECTOR_BYTES,
                    p.buf_off,
                    p.buf_off + p.len,
                )),
            }
        }
        out
    }

    /// Writes `pieces` into the cache as dirty data. Caller holds the gate exclusively. Every
    /// piece is mapped first and the lines written together ([`CacheDevice::map_all`],
    /// [`CacheDevice::write_lines`]); a piece no line could be found for goes to the core.
    async fn write_back(&self, pieces: &[Piece], data: &[u8], class: u8) -> BResult<()> {
        let Some(lines) = self.map_all(pieces, class).await? else {
            return self.write_back_one_by_one(pieces, data, class).await;
        };
        let targets: Vec<(u32, &Piece, u16)> = pieces
            .iter()
            .zip(&lines)
            .filter_map(|(p, line)| line.map(|i| (i, p, p.mask)))
            .collect();
        self.write_lines(&targets, data).await?;
        {
            let now = self.now_ms();
            let mut st = self.lock();
            for &(i, p, mask) in &targets {
                debug_assert_eq!(st.table.lookup(p.core_line), Some(i));
                st.table.mark_dirty(i, mask, now);
                st.table.touch(i);
            }
        }
        for (p, _) in pieces.iter().zip(&lines).filter(|(_, l)| l.is_none()) {
            let addr =
                p.core_line * self.geom.line_bytes + u64::from(p.first_sector) * SECTOR_BYTES;
            self.write_core(addr, &data[p.buf_off..p.buf_off + p.len])
                .await?;
        }
        Ok(())
    }

    /// Maps a line for every piece, evicting as needed (`None` for a piece nothing could be
    /// evicted for). Caller holds the gate exclusively. Returns `None` when mapping a later
    /// piece evicted a line mapped for an earlier one (a cache smaller than the request): the
    /// caller then goes one piece at a time.
    async fn map_all(&self, pieces: &[Piece], class: u8) -> BResult<Option<Vec<Option<u32>>>> {
        let mut lines = Vec::with_capacity(pieces.len());
        for p in pieces {
            lines.push(self.line_for(p.core_line, class).await?);
        }
        let st = self.lock();
        let stable = pieces
            .iter()
            .zip(&lines)
            .all(|(p, line)| st.table.lookup(p.core_line) == *line);
        Ok(stable.then_some(lines))
    }

    /// Writes sectors `mask` of each (line, piece, mask) from `buf` into the cache: the stale
    /// claims of all the lines removed with one persist ([`CacheDevice::claim_without`]),
    /// then every line's writes together. Caller holds the gate exclusively and updates the
    /// line table after.
    async fn write_lines(&self, targets: &[(u32, &Piece, u16)], buf: &[u8]) -> BResult<()> {
        let claims: Vec<(u32, Entry)> = {
            let st = self.lock();
            targets
                .iter()
                .filter(|&&(_, _, mask)| mask != 0)
                .filter_map(|&(i, _, mask)| Self::claim_without(&st, i, mask))
                .collect()
        };
        if !claims.is_empty() {
            self.persist(claims).await?;
        }
        let mut writes = Vec::with_capacity(targets.len());
        for &(i, p, mask) in targets {
            if mask != 0 {
                writes.push(self.write_sectors(i, p, mask, buf));
            }
        }
        run_bounded(writes.into_iter()).await
    }

    /// [`CacheDevice::write_back`] one piece at a time: each piece's line is mapped, made
    /// safe and written before the next is mapped, so no eviction can take a line between.
    async fn write_back_one_by_one(&self, pieces: &[Piece], data: &[u8], class: u8) -> BResult<()> {
        for p in pieces {
            match self.line_for(p.core_line, class).await? {
                Some(line) => {
                    self.ensure_safe(line, p.mask).await?;
                    self.write_sectors(line, p, p.mask, data).await?;
                    let now = self.now_ms();
                    let mut st = self.lock();
                    st.table.mark_dirty(line, p.mask, now);
                    st.table.touch(line);
                }
                None => {
                    let addr = p.core_line * self.geom.line_bytes
                        + u64::from(p.first_sector) * SECTOR_BYTES;
                    self.write_core(addr, &data[p.buf_off..p.buf_off + p.len])
                        .await?;
                }
            }
        }
        Ok(())
    }

    /// Writes core and cache. Stale clean claims on the target sectors are removed durably
    /// *before* the core write: otherwise a later flush could make the new core data durable
    /// while the persisted entry still points at the old cached copy.
    async fn write_through(
        &self,
        offset_bytes: u64,
        pieces: &[Piece],
        data: &[u8],
        class: u8,
        allocate: bool,
    ) -> BResult<()> {
        let mut targets = Vec::with_capacity(pieces.len());
        for p in pieces {
            let line = if allocate {
                self.line_for(p.core_line, class).await?
            } else {
                self.lock().table.lookup(p.core_line)
            };
            if let Some(line) = line {
                self.ensure_safe(line, p.mask).await?;
                targets.push((p, line));
            }
        }
        self.write_core(offset_bytes, data).await?;
        for (p, line) in targets {
            if self.lock().table.lookup(p.core_line) == Some(line) {
                self.fill(line, p, p.mask, data).await?;
            }
        }
        Ok(())
    }

    /// Core write; cached copies of the written sectors are invalidated durably first.
    async fn write_invalidate(
        &self,
        offset_bytes: u64,
        pieces: &[Piece],
        data: &[u8],
    ) -> BResult<()> {
        self.invalidate_cached(pieces).await?;
        self.write_core(offset_bytes, data).await
    }

    /// A foreground write to the core, remembered for the next flush. Caller holds the gate.
    async fn write_core(&self, offset_bytes: u64, data: &[u8]) -> BResult<()> {
        self.core_gen.fetch_add(1, Ordering::AcqRel);
        let written = self.core.write(offset_bytes, data).await;
        self.core_gen.fetch_add(1, Ordering::AcqRel);
        written?;
        self.core_written.store(true, Ordering::Release);
        Ok(())
    }

    /// Invalidates the cached sectors of `pieces` (clean ones; dirty ones too for a discard)
    /// and persists that before returning, so a following core write can never be shadowed by
    /// stale cache data after a crash.
    async fn invalidate_cached(&self, pieces: &[Piece]) -> BResult<()> {
        let targets: Vec<(u32, Entry)> = {
            let mut st = self.lock();
            let mut t = Vec::new();
            for p in pieces {
                if let Some(i) = st.table.lookup(p.core_line) {
                    if st.table.line(i).valid & p.mask != 0 {
                        st.table.invalidate(i, p.mask);
                        t.push((i, st.mem_entry(i)));
                    }
                }
            }
            t
        };
        if targets.is_empty() {
            return Ok(());
        }
        self.persist(targets.clone()).await?;
        let mut st = self.lock();
        for (i, e) in targets {
            if e.valid == 0 {
                st.table.unmap(i);
                st.table.release(i);
            }
        }
        Ok(())
    }

    /// Every line whose entry in memory differs from the persisted one, with the new entry.
    /// The entries that differ from what is persisted: among the lines the table noted as
    /// changed (not a scan of every line, under the gate, at every flush).
    fn unpersisted_entries(&self) -> Vec<(u32, Entry)> {
        let mut st = self.lock();
        let changed = st.table.take_changed();
        let out: Vec<(u32, Entry)> = changed
            .into_iter()
            .filter_map(|i| {
                let e = st.mem_entry(i);
                (e != st.persisted[i as usize] || st.uncertain[i as usize]).then_some((i, e))
            })
            .collect();
        // Registered in the same critical section as the snapshot: from here on a writer
        // under the shared gate heeds these entries' claims (a flush persists them while
        // such writers go on).
        for &(i, e) in &out {
            st.persisting.insert(i, e);
        }
        debug_assert!(
            {
                let noted: std::collections::HashSet<u32> = out.iter().map(|(i, _)| *i).collect();
                (0..self.geom.lines).all(|i| {
                    let settled =
                        st.mem_entry(i) == st.persisted[i as usize] && !st.uncertain[i as usize];
                    settled || noted.contains(&i)
                })
            },
            "a changed entry the line table did not note"
        );
        out
    }

    /// Persists every changed entry (data first); on failure the entries count as changed
    /// again.
    async fn persist_changed(&self) -> BResult<()> {
        let targets = self.unpersisted_entries();
        self.persist_with(targets, true).await
    }

    /// A durability barrier for every write completed before the call. Concurrent callers
    /// share flushes: a caller takes a ticket, and any flush that starts after its ticket was
    /// taken covers its writes; so while one flush runs, everyone arriving meanwhile waits
    /// for the next, one flush for all of them, instead of one each behind the gate.
    ///
    /// The flush holds the gate shared, not exclusively: writes in place and read hits go on
    /// while it persists. Every write completed before the call has marked its lines already;
    /// the shared gate keeps out every other persist but claim releases, which the release
    /// lock keeps out; the entries it writes are registered as in flight with the snapshot
    /// taken of them, so no writer overwrites a sector they claim clean meanwhile.
    async fn flush_impl(&self) -> BResult<()> {
        let ticket = self.flush_tickets.fetch_add(1, Ordering::AcqRel) + 1;
        let mut done = self.flushed_ticket.lock().await;
        if *done >= ticket {
            return Ok(());
        }
        let covers = self.flush_tickets.load(Ordering::Acquire);
        debug_assert!(covers >= ticket);
        {
            let _g = self.gate.read().await;
            let _releases = self.released_ticket.lock().await;
            self.persist_changed().await?;
        }
        *done = covers;
        Ok(())
    }

    /// One cleaning round at `now_ms` (see [`CacheDevice::now_ms`]): the configured policy
    /// decides what to clean ([`crate::cleaning::decide`]); dirty data is written to core and
    /// the core flushed before lines are marked clean. Foreground I/O continues meanwhile.
    pub async fn clean_step(&self, now_ms: u64) -> BResult<CleanReport> {
        // Asked first without the gate: a wake with nothing to clean (the common case while
        // clients are busy) must not queue every request behind the exclusive gate, which
        // waits for every write in flight to the core.
        let idle = Self::clean_decision(&self.lock(), now_ms);
        if idle.max_lines == 0 {
            return Ok(CleanReport {
                cleaned_lines: 0,
                next_wake_ms: idle.idle_wake_ms,
            });
        }
        let g = self.gate.write().await;
        let (picked, next_wake_ms) = {
            let mut st = self.lock();
            let dec = Self::clean_decision(&st, now_ms);
            let picked = match dec.order {
                CleanOrder::OldestDirty => {
                    st.table.oldest_dirty(dec.max_lines, dec.dirty_before_ms)
                }
                CleanOrder::CoreAddress => st.table.dirty_by_core(dec.max_lines),
            };
            (self.begin_round(&mut st, picked), dec.idle_wake_ms)
        };
        let Some(round) = picked else {
            return Ok(CleanReport {
                cleaned_lines: 0,
                next_wake_ms,
            });
        };
        let cleaned = self.clean_outside_gate(g, round, &self.clean_core).await?;
        Ok(CleanReport {
            cleaned_lines: cleaned,
            next_wake_ms: now_ms,
        })
    }

    /// What the cleaning policy asks for at `now_ms`, given the table's dirty lines and the
    /// last foreground request.
    fn clean_decision(st: &State, now_ms: u64) -> crate::cleaning::CleanDecision {
        let input = CleanInput {
            now_ms,
            last_io_ms: st.last_io_ms,
            dirty_lines: u64::from(st.table.dirty_lines()),
            total_lines: u64::from(st.table.len()),
        };
        decide(&st.cfg.cleaning, input)
    }

    /// Cleans the lines of `round` (just marked `cleaning` under the exclusive gate `g`):
    /// reads their dirty data, lets the gate go while `core` is written and flushed, then
    /// takes it again to end the round and mark clean each line no write changed meanwhile.
    /// Returns the lines cleaned.
    async fn clean_outside_gate(
        &self,
        g: tokio::sync::RwLockWriteGuard<'_, ()>,
        round: CleaningRound,
        core: &Arc<dyn BlockDevice>,
    ) -> BResult<usize> {
        let mut batch = Vec::with_capacity(round.lines.len());
        for &i in &round.lines {
            batch.push((i, self.read_dirty(i).await?));
        }
        drop(g);
        let writes: Vec<CoreWrite> = batch
            .iter_mut()
            .map(|(_, (core_line, _, _, data))| (*core_line, std::mem::take(data)))
            .collect();
        let (round, io) = self.write_core_detached(core, &writes, round).await;
        let _g = self.gate.write().await;
        drop(round);
        io?;
        let mut st = self.lock();
        let mut cleaned = 0;
        for (i, (core_line, mask, gen, _)) in batch {
            let l = st.table.line(i);
            if l.core_line == core_line && l.gen == gen {
                st.table.clear_dirty(i, mask);
                cleaned += 1;
            }
        }
        st.counters.cleaned_lines += cleaned as u64;
        Ok(cleaned)
    }

    /// Starts a cleaning round of `lines` (caller holds the gate exclusively, `st` is this
    /// device's state): marks them `cleaning` and returns the round, or none while a flush
    /// waits for rounds to end.
    fn begin_round(&self, st: &mut State, lines: Vec<u32>) -> Option<CleaningRound> {
        if st.quiescing > 0 || lines.is_empty() {
            return None;
        }
        Some(self.mark_round(st, lines))
    }

    /// Marks `lines` (none of them in a round already) `cleaning` as one round, whatever
    /// waits for rounds to end: for a request that must clean them itself under the exclusive
    /// gate (an eviction, a full flush).
    fn mark_round(&self, st: &mut State, lines: Vec<u32>) -> CleaningRound {
        for &i in &lines {
            assert!(
                !st.table.line(i).cleaning,
                "line {i} is in two cleaning rounds"
            );
            st.table.set_cleaning(i, true);
        }
        st.cleaning_rounds += 1;
        CleaningRound {
            st: self.st.clone(),
            round_ended: self.round_ended.clone(),
            lines,
        }
    }

    /// The gate, exclusively, with no cleaning round in flight: a request that owes every
    /// dirty line to the core (a flush of dirty data, detach, leaving write-back) must not
    /// skip a line whose cleaning has not ended, nor write it to the core beside its cleaner.
    async fn gate_without_cleaning(&self) -> tokio::sync::RwLockWriteGuard<'_, ()> {
        self.lock().quiescing += 1;
        let _waiting = Quiescing(self);
        loop {
            let ended = self.round_ended.notified();
            let g = self.gate.write().await;
            if self.lock().cleaning_rounds == 0 {
                return g;
            }
            drop(g);
            ended.await;
        }
    }

    /// Runs [`CacheDevice::clean_step`] in a background task until the device is dropped or a
    /// device error occurs (which ends cleaning: errors are fatal, never retried).
    pub fn spawn_cleaner(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                let Some(dev) = weak.upgrade() else { return };
                let now = dev.now_ms();
                let report = match dev.clean_step(now).await {
                    Ok(r) => r,
                    Err(_) => return,
                };
                let wake = tokio::time::Instant::now()
                    + std::time::Duration::from_millis(report.next_wake_ms.max(now + 1) - now);
                drop(dev);
                if report.cleaned_lines > 0 {
                    tokio::task::yield_now().await;
                } else {
                    tokio::time::sleep_until(wake).await;
                }
            }
        })
    }

    /// Writes every dirty line to core and persists the metadata (casadm `--flush-cache`).
    ///
    /// The lines dirty when it starts are first cleaned in rounds that let the gate go (other
    /// requests go on meanwhile); what is left, and lines dirtied since, are cleaned with every
    /// other request waiting.
    pub async fn flush_dirty(&self) -> Result<()> {
        self.clean_in_rounds().await?;
        let _g = self.gate_without_cleaning().await;
        self.flush_dirty_locked().await?;
        Ok(())
    }

    /// Cleans the lines dirty now in rounds that hold the gate only to pick their lines and to
    /// mark them clean, so requests (hits included) go on while the core is written.
    async fn clean_in_rounds(&self) -> Result<()> {
        let mut rounds = self.lock().table.dirty_lines().div_ceil(FLUSH_ROUND_LINES);
        while rounds > 0 {
            rounds -= 1;
            let g = self.gate.write().await;
            let picked = {
                let mut st = self.lock();
                let oldest = st.table.oldest_dirty(FLUSH_ROUND_LINES as usize, None);
                self.begin_round(&mut st, oldest)
            };
            let Some(round) = picked else {
                break;
            };
            self.clean_outside_gate(g, round, &self.core).await?;
        }
        Ok(())
    }

    /// Cleans every dirty line and persists the metadata; caller holds the gate from
    /// [`CacheDevice::gate_without_cleaning`].
    async fn flush_dirty_locked(&self) -> BResult<()> {
        debug_assert_eq!(self.lock().cleaning_rounds, 0);
        loop {
            let lines = self
                .lock()
                .table
                .oldest_dirty(FLUSH_ROUND_LINES as usize, None);
            if lines.is_empty() {
                break;
            }
            self.clean_now(&lines).await?;
        }
        self.persist_changed().await
    }

    /// Changes the mode at run time. Leaving `wb`/`wo` with `flush_dirty` writes every dirty
    /// line to core first; without it dirty lines stay and are still served and cleaned.
    pub async fn set_mode(&self, mode: CacheMode, flush_dirty: bool) -> Result<()> {
        let cleans = |old: CacheMode| {
            flush_dirty && old.caches_writes_dirty() && !mode.caches_writes_dirty()
        };
        if cleans(self.lock().cfg.mode) {
            // Most of the cleaning with the gate let go of; what is dirtied meanwhile below.
            self.clean_in_rounds().await?;
        }
        let _g = self.gate_without_cleaning().await;
        let old = self.lock().cfg.mode;
        if cleans(old) {
            self.flush_dirty_locked().await?;
        }
        self.lock().cfg.mode = mode;
        self.write_superblock().await
    }

    /// Sets one parameter by casadm-like name ([`CacheConfig::set_param`]) and persists it.
    pub async fn set_param(&self, namespace: &str, key: &str, value: &str) -> Result<()> {
        let _g = self.gate.write().await;
        {
            let mut st = self.lock();
            let mut cfg = st.cfg.clone();
            cfg.set_param(namespace, key, value)?;
            superblock_with(&st.sb, &cfg, &st.classes)?;
            if cfg.seq_cutoff.max_streams != st.cfg.seq_cutoff.max_streams {
                st.detector = SeqDetector::new(cfg.seq_cutoff.max_streams);
            }
            if cfg.promotion.table_entries != st.cfg.promotion.table_entries {
                st.promoter = Promoter::new(&cfg.promotion);
            }
            st.cfg = cfg;
        }
        self.write_superblock().await
    }

    /// Replaces the I/O class table; lines of classes that no longer exist move to class 0.
    pub async fn load_io_classes(&self, classes: IoClassTable) -> Result<()> {
        let _g = self.gate.write().await;
        {
            let mut st = self.lock();
            // Refused before anything changes when the superblock cannot hold it.
            superblock_with(&st.sb, &st.cfg, &classes)?;
            for i in 0..st.table.len() {
                let c = st.table.line(i).class;
                if st.table.line(i).core_line != UNMAPPED && classes.get(c).is_none() {
                    st.table.set_class(i, 0);
                }
            }
            st.classes = classes;
        }
        self.write_superblock().await
    }

    /// Writes every dirty line to core, persists all metadata and marks the cache detached:
    /// the core alone now holds every acknowledged write.
    pub async fn detach(&self) -> Result<()> {
        self.clean_in_rounds().await?;
        let _g = self.gate_without_cleaning().await;
        self.flush_dirty_locked().await?;
        self.lock().sb.state = SbState::Detached;
        self.write_superblock().await
    }

    /// Writes the superblock (configuration included) into the older slot and flushes.
    async fn write_superblock(&self) -> Result<()> {
        let (slot, bytes) = {
            let mut st = self.lock();
            let (sb, bytes) = superblock_with(&st.sb, &st.cfg, &st.classes)?;
            st.sb = sb;
            (st.sb.seq % 2, bytes)
        };
        self.cache.write(slot * SB_SLOT_BYTES, &bytes).await?;
        self.cache.flush().await?;
        Ok(())
    }

    /// A `casadm -P`-like statistics snapshot.
    pub fn stats(&self) -> CacheStats {
        let st = self.lock();
        let mut dirty_per_class = [0u64; crate::ioclass::CLASS_SLOTS];
        for i in 0..st.table.len() {
            let l = st.table.line(i);
            if l.dirty != 0 {
                dirty_per_class[l.class as usize] += 1;
            }
        }
        let classes: Vec<ClassStats> = st
            .classes
            .classes()
            .iter()
            .map(|c| ClassStats {
                id: c.id,
                name: c.name.clone(),
                occupancy_lines: u64::from(st.table.class_lines(c.id)),
                dirty_lines: dirty_per_class[c.id as usize],
                requests: st.counters.classes[c.id as usize],
            })
            .collect();
        let dirty = u64::from(st.table.dirty_lines());
        let mapped = u64::from(st.table.mapped_lines());
        CacheStats {
            mode: st.cfg.mode.name().to_string(),
            line_bytes: self.geom.line_bytes,
            total_lines: u64::from(st.table.len()),
            occupancy_lines: mapped,
            free_lines: u64::from(st.table.free_lines()),
            clean_lines: mapped - dirty,
            dirty_lines: dirty,
            requests: CacheStats::total(&classes),
            classes,
            evictions: st.counters.evictions,
            cleaned_lines: st.counters.cleaned_lines,
            victims_cleaned_ahead: st.counters.victims_cleaned_ahead,
            victims_cleaned_blocking: st.counters.victims_cleaned_blocking,
            meta_page_writes: st.counters.meta_page_writes,
            claim_releases: st.counters.claim_releases,
        }
    }
}

#[async_trait]
impl BlockDevice for CacheDevice {
    fn properties(&self) -> DeviceProperties {
        self.props
    }

    async fn read(&self, offset_bytes: u64, buf: &mut [u8]) -> BResult<()> {
        self.read_hinted(offset_bytes, buf, IoHint::default()).await
    }

    async fn write(&self, offset_bytes: u64, data: &[u8]) -> BResult<()> {
        self.write_hinted(offset_bytes, data, IoHint::default())
            .await
    }

    async fn flush(&self) -> BResult<()> {
        self.flush_impl().await
    }

    async fn discard(&self, offset_bytes: u64, len_bytes: u64) -> BResult<()> {
        check_io(&self.props, IoKind::Discard, offset_bytes, len_bytes)?;
        let len = usize::try_from(len_bytes).map_err(|_| BlockDevError::OutOfRange {
            kind: IoKind::Discard,
            offset_bytes,
            len_bytes,
            size_bytes: self.props.size_bytes,
        })?;
        let pieces = self.pieces(offset_bytes, len);
        let _g = self.gate.write().await;
        let being_cleaned = {
            let st = self.lock();
            pieces.iter().any(|p| {
                st.table.lookup(p.core_line).is_some_and(|i| {
                    let l = st.table.line(i);
                    l.cleaning && l.dirty & p.mask != 0
                })
            })
        };
        if being_cleaned {
            // A cleaning round may still write these sectors' old data to the core after the
            // core's discard: keep them dirty, as zeros, so they never show through.
            let zeros = vec![0u8; len];
            return self.write_back(&pieces, &zeros, 0).await;
        }
        // Discarded contents are unspecified: dirty sectors are dropped, never cleaned (a
        // deleted object costs the HDD nothing), and the core's range is discarded after.
        self.invalidate_cached(&pieces).await?;
        self.core_gen.fetch_add(1, Ordering::AcqRel);
        let discarded = self.core.discard(offset_bytes, len_bytes).await;
        self.core_gen.fetch_add(1, Ordering::AcqRel);
        discarded
    }
}

/// A problem found while loading metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Cache line index.
    pub line: u32,
    /// What is wrong.
    pub reason: String,
}

impl Problem {
    fn into_error(self) -> CacheError {
        CacheError::CorruptMetadata {
            line: self.line,
            reason: self.reason,
        }
    }
}

/// `sb` as the next write of it, holding `cfg` and `classes`, and its encoding: an error
/// (nothing changed) when the configuration does not encode or the superblock cannot hold it.
fn superblock_with(
    sb: &Superblock,
    cfg: &CacheConfig,
    classes: &IoClassTable,
) -> Result<(Superblock, Vec<u8>)> {
    let mut next = sb.clone();
    next.seq += 1;
    next.config_toml =
        toml::to_string(cfg).map_err(|e| CacheError::param("config", e.to_string()))?;
    next.ioclass_csv = classes.csv().to_string();
    let bytes = next.encode()?;
    Ok((next, bytes))
}

/// Everything read back from a cache device.
#[derive(Debug)]
pub(crate) struct Loaded {
    pub sb: Superblock,
    pub cfg: CacheConfig,
    pub classes: IoClassTable,
    pub geom: Geometry,
    pub entries: Vec<Entry>,
    pub problems: Vec<Problem>,
}

/// Reads and checks the superblock and every line entry.
pub(crate) async fn load(
    cache: &Arc<dyn BlockDevice>,
    core: &Arc<dyn BlockDevice>,
) -> Result<Loaded> {
    let (cp, kp) = (cache.properties(), core.properties());
    CacheDevice::check_devices(&cp, &kp)?;
    let mut best: Option<Superblock> = None;
    let mut why = String::from("no superblock slot is readable");
    for slot in 0..2 {
        let mut b = vec![0u8; SB_SLOT_LEN];
        cache.read(slot * SB_SLOT_BYTES, &mut b).await?;
        match Superblock::decode(&b) {
            Ok(sb) if best.as_ref().is_none_or(|o| sb.seq > o.seq) => best = Some(sb),
            Ok(_) => {}
            Err(e) => why = e.to_string(),
        }
    }
    let sb = best.ok_or(CacheError::Superblock(why))?;
    if sb.core_size_bytes != kp.size_bytes {
        return Err(CacheError::Superblock(format!(
            "cache was created for a core of {} bytes, this core has {}",
            sb.core_size_bytes, kp.size_bytes
        )));
    }
    let cfg: CacheConfig = toml::from_str(&sb.config_toml)
        .map_err(|e| CacheError::Superblock(format!("configuration: {e}")))?;
    cfg.validate()?;
    let classes = IoClassTable::parse_csv(&sb.ioclass_csv)?;
    // The layout the cache was made with: a device grown since (a larger file) keeps it, the
    // space past it unused until the cache is made again; a smaller one cannot hold it.
    let geom = Geometry::of_lines(sb.lines, sb.line_bytes);
    if geom.used_bytes() > cp.size_bytes || cfg.line_bytes != sb.line_bytes || sb.lines == 0 {
        return Err(CacheError::Superblock(format!(
            "geometry mismatch: superblock says {} lines of {} bytes ({} bytes), device holds {}",
            sb.lines,
            sb.line_bytes,
            geom.used_bytes(),
            cp.size_bytes
        )));
    }
    let meta_len = usize::try_from(geom.meta_pages * META_PAGE_BYTES).map_err(|_| {
        CacheError::Geometry(format!(
            "{} metadata pages do not fit in memory",
            geom.meta_pages
        ))
    })?;
    let mut meta = vec![0u8; meta_len];
    cache.read(geom.meta_offset_bytes, &mut meta).await?;
    let core_lines = kp.size_bytes.div_ceil(geom.line_bytes);
    let full: u16 = sector_mask(0, sector_u32(geom.sectors_per_line()));
    let mut entries = vec![Entry::INVALID; geom.lines as usize];
    let mut problems = Vec::new();
    let mut owner: std::collections::HashMap<u64, u32> = std::collections::HashMap::new();
    for i in 0..geom.lines {
        let at = i as usize * ENTRY_BYTES;
        let e = match decode_entry(&meta[at..at + ENTRY_BYTES], sb.instance_id) {
            Decoded::Empty => continue,
            Decoded::Corrupt => {
                problems.push(Problem {
                    line: i,
                    reason: "checksum mismatch".into(),
                });
                continue;
            }
            Decoded::Line(mut e) => {
                // A class removed from the table (its superblock written before every line of
                // it was moved, and then a crash) is the default class, as the removal made it.
                if classes.get(e.class).is_none() {
                    e.class = 0;
                }
                e
            }
        };
        let mut bad = Vec::new();
        if e.core_line >= core_lines {
            bad.push(format!(
                "core line {} beyond the core's {core_lines}",
                e.core_line
            ));
        }
        if e.dirty & !e.valid != 0 {
            bad.push("dirty sectors that are not valid".to_string());
        }
        if e.valid & !full != 0 {
            bad.push("sectors beyond the line size".to_string());
        }
        if let Some(other) = owner.insert(e.core_line, i) {
            bad.push(format!(
                "core line {} also held by cache line {other}",
                e.core_line
            ));
        }
        if bad.is_empty() {
            entries[i as usize] = e;
        } else {
            problems.extend(bad.into_iter().map(|reason| Problem { line: i, reason }));
        }
    }
    Ok(Loaded {
        sb,
        cfg,
        classes,
        geom,
        entries,
        problems,
    })
}
