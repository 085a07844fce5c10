//! Shared helpers for the cache integration tests.
#![allow(dead_code)]

use cairn_blockdev::{BlockDevice, MemDevice};
use cairn_cache::{CacheConfig, CacheDevice, CacheMode, IoClassTable};
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
