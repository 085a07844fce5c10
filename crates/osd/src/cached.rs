//! An OSD whose data device is an SSD-cached HDD: the store runs on a [`CacheDevice`] made of
//! the cache file (`cache` in the data directory, optionally emulating an SSD profile) over
//! the data device. The cache is created with the store and attached, warm, at every later
//! start (its metadata lives on the cache device); its dirty lines are written back by a
//! cleaner whose core I/O runs through the OSD's scheduler as best-effort work
//! ([`Purpose::CacheClean`]), so cleaning takes what clients leave and never starves them.

use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use cairn_blockdev::{BlockDevice, DeviceProperties};
use cairn_cache::{CacheConfig, CacheDevice, IoClassTable};
use cairn_clustermap::PgId;
use cairn_qos::OpKind as Io;

use crate::error::OsdError;
use crate::sched::OpScheduler;
use crate::work::{Purpose, Work};

/// The client id the cleaner's work is scheduled as (one client: mClock and the fair
/// policies see all of it as one stream).
const CLEANER_CLIENT: u64 = u64::MAX - 1;
/// Bytes of the core one scheduler shard key covers: cleaning spreads over the shards by
/// where it writes.
const SHARD_SPAN_BYTES: u64 = 4 << 20;

/// How an OSD's cache is made.
#[derive(Clone, Debug)]
pub struct OsdCacheConfig {
    /// Emulate this device profile over the cache file (`nvme-p3700`, ...; None: the file as
    /// it is).
    pub profile: Option<String>,
    /// Size of the cache file.
    pub bytes: u64,
    /// Settings a new cache is created with (mode, line size, policies); an existing cache
    /// keeps its own, changed at run time with `cairn tell osd.N cache set-param`.
    pub settings: CacheConfig,
}

/// The scheduler a cleaning path sends its I/O through, bound once the OSD has one.
pub type SchedulerSlot = Arc<OnceLock<Arc<OpScheduler>>>;

/// The core as the cleaner sees it: writes and flushes wait for a best-effort slot of the
/// OSD's scheduler (once bound; at mount, before it exists, they go straight through).
struct ScheduledCore {
    core: Arc<dyn BlockDevice>,
    sched: SchedulerSlot,
    osd: u64,
}

impl std::fmt::Debug for ScheduledCore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScheduledCore")
            .field("core", &self.core)
            .field("scheduled", &self.sched.get().is_some())
            .finish()
    }
}

impl ScheduledCore {
    /// The scheduler's key and description of `len` bytes of cleaning at `offset`.
    fn work(&self, op: Io, offset: u64, len: u64) -> (PgId, Work) {
        let seed = u32::try_from((offset / SHARD_SPAN_BYTES) % u64::from(u32::MAX))
            .expect("reduced below u32::MAX");
        let pg = PgId { pool: -1, seed };
        let work = Work::new(Purpose::CacheClean, self.osd, op)
            .sized(len)
            .at_physical(Some(offset));
        (pg, work)
    }
}

#[async_trait]
impl BlockDevice for ScheduledCore {
    fn properties(&self) -> DeviceProperties {
        self.core.properties()
    }

    async fn read(&self, offset_bytes: u64, buf: &mut [u8]) -> cairn_blockdev::Result<()> {
        self.core.read(offset_bytes, buf).await
    }

    async fn write(&self, offset_bytes: u64, data: &[u8]) -> cairn_blockdev::Result<()> {
        let Some(sched) = self.sched.get() else {
            return self.core.write(offset_bytes, data).await;
        };
        let (pg, work) = self.work(Io::Write, offset_bytes, data.len() as u64);
        let (core, data) = (self.core.clone(), data.to_vec());
        match sched
            .run(
                pg,
                work,
                async move { core.write(offset_bytes, &data).await },
            )
            .await
        {
            Ok(done) => done,
            Err(e) => Err(cairn_blockdev::BlockDevError::Config(format!(
                "cache cleaning could not be scheduled: {e}"
            ))),
        }
    }

    async fn flush(&self) -> cairn_blockdev::Result<()> {
        let Some(sched) = self.sched.get() else {
            return self.core.flush().await;
        };
        let (pg, work) = self.work(Io::Other, 0, 0);
        let core = self.core.clone();
        match sched.run(pg, work, async move { core.flush().await }).await {
            Ok(done) => done,
            Err(e) => Err(cairn_blockdev::BlockDevError::Config(format!(
                "cache flush could not be scheduled: {e}"
            ))),
        }
    }

    async fn discard(&self, offset_bytes: u64, len_bytes: u64) -> cairn_blockdev::Result<()> {
        self.core.discard(offset_bytes, len_bytes).await
    }
}

/// Puts the cache in `data_dir` in front of `core`: creates it when `fresh` (a new store)
/// or when no cache file exists yet, attaches it warm otherwise, and starts its cleaner.
/// Returns the device the store runs on and the slot to bind the scheduler into.
pub async fn open(
    data_dir: &std::path::Path,
    cfg: &OsdCacheConfig,
    core: Arc<dyn BlockDevice>,
    fresh: bool,
) -> Result<(Arc<CacheDevice>, SchedulerSlot), OsdError> {
    let path = data_dir.join("cache");
    let new_file = !path.exists();
    let cache = crate::side_device::open(&path, cfg.bytes, cfg.profile.as_deref())?;
    let sched: SchedulerSlot = Arc::new(OnceLock::new());
    let cleaning: Arc<dyn BlockDevice> = Arc::new(ScheduledCore {
        core: core.clone(),
        sched: sched.clone(),
        osd: CLEANER_CLIENT,
    });
    let device = if fresh || new_file {
        tracing::info!(bytes = cfg.bytes, mode = ?cfg.settings.mode, "creating the OSD's cache");
        CacheDevice::create(cache, core, cfg.settings.clone(), IoClassTable::default()).await
    } else {
        CacheDevice::attach(cache, core).await
    }
    .map_err(|e| OsdError::Config(format!("cache {}: {e}", path.display())))?
    .with_cleaning_path(cleaning)
    .map_err(|e| OsdError::Config(format!("cache {}: {e}", path.display())))?;
    let device = Arc::new(device);
    let stats = device.stats();
    tracing::info!(
        occupancy_lines = stats.occupancy_lines,
        dirty_lines = stats.dirty_lines,
        "cache attached"
    );
    device.spawn_cleaner();
    Ok((device, sched))
}
