//! An OSD whose data device is an SSD-cached HDD: the store runs on a [`CacheDevice`] made of
//! the cache file (`cache` in the data directory, optionally emulating an SSD profile) over
//! the data device. The cache is created with the store and attached, warm, at every later
//! start (its metadata lives on the cache device); its dirty lines are written back by a
//! cleaner whose core I/O runs through the OSD's scheduler as best-effort work
//! ([`Purpose::CacheClean`]), so cleaning takes what clients leave and never starves them.
//! The cache file is locked (`flock`) for as long as its device runs: a second instance of
//! the OSD (one still exiting) never runs a cache over it at the same time, which would map
//! its lines differently and overwrite the other's metadata.

use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

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

/// How long an OSD waits for its cache file's lock held by another process (an instance of
/// this OSD still exiting), trying again every [`LOCK_RETRY`].
const LOCK_WAIT: Duration = Duration::from_secs(15);
/// How often the lock is tried meanwhile.
const LOCK_RETRY: Duration = Duration::from_millis(100);

/// The exclusive lock on a cache file, released when the file is closed.
#[derive(Debug)]
struct CacheFileLock {
    _file: std::fs::File,
}

/// The file beside the cache that says this OSD has run with a cache: a cache file missing
/// while it exists is a lost cache (its dirty lines with it), not one to make afresh.
pub const CACHE_MADE: &str = "cache.made";

/// Locks the cache file at `path` (creating it empty if missing), waiting up to [`LOCK_WAIT`]
/// for another process to let go of it.
async fn lock_cache_file(path: &Path) -> Result<CacheFileLock, OsdError> {
    let named = |what: String| OsdError::Config(format!("cache {}: {what}", path.display()));
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(|e| named(format!("opening to lock: {e}")))?;
    let since = Instant::now();
    let mut warned = false;
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(CacheFileLock { _file: file }),
            Err(std::fs::TryLockError::WouldBlock) if since.elapsed() < LOCK_WAIT => {
                if !warned {
                    tracing::warn!(cache = %path.display(), "cache file locked by another process (an instance of this OSD still exiting?): waiting up to {LOCK_WAIT:?}");
                    warned = true;
                }
                tokio::time::sleep(LOCK_RETRY).await;
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(named(format!(
                    "locked by another process for {LOCK_WAIT:?}: is this OSD running twice?"
                )))
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(named(format!("locking: {e}"))),
        }
    }
}

/// The core as the cleaner sees it: writes and flushes wait for a best-effort slot of the
/// OSD's scheduler (once bound; at mount, before it exists, they go straight through).
struct ScheduledCore {
    core: Arc<dyn BlockDevice>,
    sched: SchedulerSlot,
    osd: u64,
    /// The cache file's lock: the cache device owns this path for its whole life, so the
    /// lock is let go of only once the device (its cleaner included) is gone.
    _file_lock: CacheFileLock,
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
    let made = data_dir.join(CACHE_MADE);
    if new_file && !fresh && made.exists() {
        return Err(OsdError::Config(format!(
            "cache {} is missing, but this OSD ran with a cache: the data device may lack what \
             was dirty in it. Restore the file, or remove {} to start with an empty cache over \
             the data device as it is",
            path.display(),
            made.display()
        )));
    }
    let file_lock = lock_cache_file(&path).await?;
    let cache = crate::side_device::open(&path, cfg.bytes, cfg.profile.as_deref())?;
    let sched: SchedulerSlot = Arc::new(OnceLock::new());
    let cleaning: Arc<dyn BlockDevice> = Arc::new(ScheduledCore {
        core: core.clone(),
        sched: sched.clone(),
        osd: CLEANER_CLIENT,
        _file_lock: file_lock,
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
    if !made.exists() {
        std::fs::write(&made, b"")
            .and_then(|()| std::fs::File::open(data_dir)?.sync_all())
            .map_err(|e| OsdError::Config(format!("{}: {e}", made.display())))?;
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_blockdev::MemDevice;

    fn config() -> OsdCacheConfig {
        OsdCacheConfig {
            profile: None,
            bytes: 8 << 20,
            settings: CacheConfig::default(),
        }
    }

    /// A second opening of one cache file waits for the first to be let go of; a cache file
    /// lost after the OSD ran with one is refused rather than made afresh.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_cache_file_is_opened_by_one_device_at_a_time_and_never_lost_silently() {
        let dir = tempfile::tempdir().unwrap();
        let core: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(32 << 20, 4096).unwrap());
        let (first, _) = open(dir.path(), &config(), core.clone(), true)
            .await
            .unwrap();
        assert!(dir.path().join(CACHE_MADE).exists());
        let dropped = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let second = {
            let (path, core, dropped) = (dir.path().to_path_buf(), core.clone(), dropped.clone());
            tokio::spawn(async move {
                let opened = open(&path, &config(), core, false).await;
                (opened, dropped.load(std::sync::atomic::Ordering::Acquire))
            })
        };
        tokio::time::sleep(Duration::from_millis(400)).await;
        dropped.store(true, std::sync::atomic::Ordering::Release);
        drop(first);
        let (opened, after_drop) = second.await.unwrap();
        assert!(opened.is_ok(), "{:?}", opened.err());
        assert!(
            after_drop,
            "the second device waited for the first one's lock"
        );
        drop(opened);

        std::fs::remove_file(dir.path().join("cache")).unwrap();
        let lost = open(dir.path(), &config(), core.clone(), false).await;
        let Err(OsdError::Config(why)) = lost else {
            panic!("a lost cache file was made afresh");
        };
        assert!(why.contains("is missing"), "{why}");
        std::fs::remove_file(dir.path().join(CACHE_MADE)).unwrap();
        assert!(open(dir.path(), &config(), core, false).await.is_ok());
    }
}
