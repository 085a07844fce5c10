//! Shared helpers for the cache integration tests.
#![allow(dead_code)]

use cairn_blockdev::{BlockDevice, MemDevice};
use cairn_cache::{CacheConfig, CacheDevice, CacheMode, IoClassTable};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

pub const K4: u64 = 4096;

/// Cache device bytes holding about `lines` lines of `line_bytes` (plus superblocks and metadata).
pub fn cache_bytes_for(lines: u64, line_bytes: u64) -> u64 {
    32 * 1024 + lines.div_ceil(128) * 4096 + lines * line_bytes
}

pub fn mem(size_bytes: u64) -> Arc<MemDevice> {
    Arc::new(MemDevice::new(size_bytes, 512).unwrap())
}

pub fn cfg(mode: CacheMode, line_bytes: u64) -> CacheConfig {
    let mut c = CacheConfig {
        mode,
        line_bytes,
        ..Default::default()
    };
    c.seq_cutoff.policy = cairn_cache::SeqCutoffPolicy::Never;
    c
}

pub struct Rig {
    pub dev: CacheDevice,
    pub cache: Arc<MemDevice>,
    pub core: Arc<MemDevice>,
}

pub async fn rig(cfg: CacheConfig, lines: u64, core_bytes: u64) -> Rig {
    let cache = mem(cache_bytes_for(lines, cfg.line_bytes));
    let core = mem(core_bytes);
    let dev = CacheDevice::create(cache.clone(), core.clone(), cfg, IoClassTable::default())
        .await
        .unwrap();
    Rig { dev, cache, core }
}

/// A 4 KiB-multiple buffer whose every 512-byte sector names its device sector and `version`.
pub fn pattern(offset_bytes: u64, len_bytes: usize, version: u32) -> Vec<u8> {
    let mut b = vec![0u8; len_bytes];
    if version == 0 {
        return b;
    }
    for (i, s) in b.chunks_mut(512).enumerate() {
        let sector = offset_bytes / 512 + i as u64;
        s[..8].copy_from_slice(&sector.to_le_bytes());
        s[8..12].copy_from_slice(&version.to_le_bytes());
        for (j, x) in s[12..].iter_mut().enumerate() {
            *x = (version as usize * 31 + j + sector as usize) as u8;
        }
    }
    b
}

/// The version a 512-byte sector carries (0 for zeros), or `None` if it matches no pattern.
pub fn version_of(sector: u64, bytes: &[u8]) -> Option<u32> {
    if bytes.iter().all(|&x| x == 0) {
        return Some(0);
    }
    let v = u32::from_le_bytes(bytes[8..12].try_into().unwrap());
    (pattern(sector * 512, 512, v) == bytes).then_some(v)
}

pub async fn read(dev: &dyn BlockDevice, offset: u64, len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len];
    dev.read(offset, &mut b).await.unwrap();
    b
}

/// Which operations a [`Rigged`] device makes wait while it is held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hold {
    /// None: the device only counts.
    Nothing,
    /// Writes wait before they reach the inner device (a slow disk under an eviction).
    Writes,
    /// Flushes wait before they reach the inner device.
    Flushes,
    /// Reads read the inner device, then wait: what they return may be older than a write
    /// that completes meanwhile.
    ReadsAfterReading,
}

/// A device over `inner` for tests: counts writes and flushes, makes the operations of its
/// [`Hold`] wait while `held` is true (each that finds it held adds a permit to `blocked`),
/// and may say it is rotational.
#[derive(Debug)]
pub struct Rigged {
    inner: Arc<dyn BlockDevice>,
    hold: Hold,
    rotational: bool,
    /// Whether the held operations wait.
    pub held: tokio::sync::watch::Sender<bool>,
    /// A permit per operation that found the device held.
    pub blocked: tokio::sync::Semaphore,
    /// Writes seen.
    pub writes: AtomicU64,
    /// Flushes seen.
    pub flushes: AtomicU64,
}

impl Rigged {
    /// Not held, not rotational, as `inner` says otherwise.
    pub fn new(inner: Arc<dyn BlockDevice>, hold: Hold) -> Self {
        let rotational = inner.properties().rotational;
        Self {
            inner,
            hold,
            rotational,
            held: tokio::sync::watch::channel(false).0,
            blocked: tokio::sync::Semaphore::new(0),
            writes: AtomicU64::new(0),
            flushes: AtomicU64::new(0),
        }
    }

    /// Held from the start.
    pub fn held(self) -> Self {
        self.held.send_replace(true);
        self
    }

    /// Says it is rotational, as an HDD does.
    pub fn spinning(mut self) -> Self {
        self.rotational = true;
        self
    }

    async fn wait_if_held(&self, op: Hold) {
        if self.hold != op {
            return;
        }
        let mut rx = self.held.subscribe();
        if *rx.borrow_and_update() {
            self.blocked.add_permits(1);
            rx.wait_for(|held| !held).await.expect("sender lives");
        }
    }
}

#[async_trait::async_trait]
impl BlockDevice for Rigged {
    fn properties(&self) -> cairn_blockdev::DeviceProperties {
        cairn_blockdev::DeviceProperties {
            rotational: self.rotational,
            ..self.inner.properties()
        }
    }
    async fn read(&self, o: u64, b: &mut [u8]) -> cairn_blockdev::Result<()> {
        self.inner.read(o, b).await?;
        self.wait_if_held(Hold::ReadsAfterReading).await;
        Ok(())
    }
    async fn write(&self, o: u64, d: &[u8]) -> cairn_blockdev::Result<()> {
        self.writes.fetch_add(1, Ordering::SeqCst);
        self.wait_if_held(Hold::Writes).await;
        self.inner.write(o, d).await
    }
    async fn flush(&self) -> cairn_blockdev::Result<()> {
        self.flushes.fetch_add(1, Ordering::SeqCst);
        self.wait_if_held(Hold::Flushes).await;
        self.inner.flush().await
    }
    async fn discard(&self, o: u64, l: u64) -> cairn_blockdev::Result<()> {
        self.inner.discard(o, l).await
    }
}
