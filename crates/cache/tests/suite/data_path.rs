//! Data-path tests: every mode and line size against a byte-array model, with eviction, partial
//! writes, cleaning, flushes, mode switches, discards and a final detach checked on the core.

use crate::common;

use cairn_blockdev::{BlockDevError, BlockDevice};
use cairn_cache::{CacheDevice, CacheMode};
use common::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const MODES: [CacheMode; 6] = [
    CacheMode::Wt,
    CacheMode::Wb,
    CacheMode::Wa,
    CacheMode::Pt,
    CacheMode::Wo,
    CacheMode::Wi,
];

async fn random_workload(mode: CacheMode, line_bytes: u64, seed: u64, switch_modes: bool) {
    let core_bytes = 512 * 1024;
    let r = rig(cfg(mode, line_bytes), 12, core_bytes).await;
    let mut model = vec![0u8; core_bytes as usize];
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let sectors = core_bytes / K4;
    for step in 0..300u32 {
        let s = rng.random_range(0..sectors);
        let n = rng.random_range(1..=(sectors - s).min(20));
        let (off, len) = (s * K4, (n * K4) as usize);
        match rng.random_range(0..100) {
            0..=39 => {
                let data = pattern(off, len, step + 1);
                r.dev.write(off, &data).await.unwrap();
                model[off as usize..off as usize + len].copy_from_slice(&data);
            }
            40..=84 => {
                let got = read(&r.dev, off, len).await;
                assert!(
                    got == model[off as usize..off as usize + len],
                    "{mode:?} line {line_bytes} seed {seed} step {step}: read {off}+{len} differs"
                );
            }
            85..=89 => r.dev.flush().await.unwrap(),
            90..=93 => {
                r.dev.clean_step(u64::MAX / 4).await.unwrap();
            }
            94..=95 => {
                r.dev.discard(off, len as u64).await.unwrap();
                model[off as usize..off as usize + len].fill(0);
            }
            _ if switch_modes => {
                let m = MODES[rng.random_range(0..MODES.len())];
                r.dev.set_mode(m, rng.random_bool(0.5)).await.unwrap();
            }
            _ => {}
        }
    }
    let got = read(&r.dev, 0, core_bytes as usize).await;
    assert!(got == model, "{mode:?} final read differs");
    r.dev.detach().await.unwrap();
    assert_eq!(r.dev.stats().dirty_lines, 0);
    assert!(
        r.core.snapshot() == model,
        "{mode:?} line {line_bytes}: core after detach differs"
    );
}

#[tokio::test]
async fn every_mode_matches_the_model_with_4k_lines() {
    for (i, mode) in MODES.into_iter().enumerate() {
        random_workload(mode, 4096, i as u64, false).await;
    }
}

#[tokio::test]
async fn every_line_size_matches_the_model_in_write_back() {
    for (i, kib) in [8u64, 16, 32, 64].into_iter().enumerate() {
        random_workload(CacheMode::Wb, kib * 1024, 100 + i as u64, false).await;
        random_workload(CacheMode::Wt, kib * 1024, 200 + i as u64, false).await;
    }
}

#[tokio::test]
async fn mode_switches_at_run_time_keep_data_correct() {
    for seed in 0..4 {
        random_workload(CacheMode::Wb, 8192, 300 + seed, true).await;
    }
}

#[tokio::test]
async fn write_back_hits_are_served_from_cache_and_stay_dirty_until_cleaned() {
    let r = rig(cfg(CacheMode::Wb, 4096), 64, 1 << 20).await;
    let data = pattern(8192, 8192, 1);
    r.dev.write(8192, &data).await.unwrap();
    assert!(
        read(r.core.as_ref(), 8192, 8192)
            .await
            .iter()
            .all(|&b| b == 0),
        "core untouched"
    );
    assert_eq!(read(&r.dev, 8192, 8192).await, data);
    let s = r.dev.stats();
    assert_eq!(
        (s.dirty_lines, s.requests.write_misses, s.requests.read_hits),
        (2, 1, 1)
    );
    let rep = r.dev.clean_step(u64::MAX / 4).await.unwrap();
    assert_eq!(rep.cleaned_lines, 2);
    assert_eq!(read(r.core.as_ref(), 8192, 8192).await, data);
    assert_eq!(r.dev.stats().dirty_lines, 0);
    assert_eq!(r.dev.stats().clean_lines, 2);
}

#[tokio::test]
async fn partial_writes_track_sectors_exactly() {
    let r = rig(cfg(CacheMode::Wb, 65536), 8, 1 << 20).await;
    let base = pattern(0, 65536, 1);
    r.core.write(0, &base).await.unwrap();
    let part = pattern(8192, 4096, 2);
    r.dev.write(8192, &part).await.unwrap();
    let mut want = base.clone();
    want[8192..12288].copy_from_slice(&part);
    assert_eq!(
        read(&r.dev, 0, 65536).await,
        want,
        "other sectors come from core"
    );
    let s = r.dev.stats();
    assert_eq!((s.requests.read_partial_hits, s.dirty_lines), (1, 1));
    assert_eq!(read(&r.dev, 0, 65536).await, want);
    assert_eq!(
        r.dev.stats().requests.read_hits,
        1,
        "line filled by the partial miss"
    );
}

#[tokio::test]
async fn invalid_requests_are_typed_errors() {
    let r = rig(cfg(CacheMode::Wb, 4096), 8, 1 << 20).await;
    let mut b = vec![0u8; 512];
    assert!(matches!(
        r.dev.read(0, &mut b).await,
        Err(BlockDevError::Misaligned { .. })
    ));
    assert!(matches!(
        r.dev.write(1 << 20, &[0u8; 4096]).await,
        Err(BlockDevError::OutOfRange { .. })
    ));
    assert!(r.dev.write(0, &[]).await.is_ok());
    let odd = mem(1 << 20);
    let core = std::sync::Arc::new(cairn_blockdev::MemDevice::new(5 * 512, 512).unwrap());
    assert!(matches!(
        CacheDevice::create(odd, core, cfg(CacheMode::Wb, 4096), Default::default()).await,
        Err(cairn_cache::CacheError::Geometry(_))
    ));
    let tiny = mem(32 * 1024);
    assert!(matches!(
        CacheDevice::create(
            tiny,
            mem(1 << 20),
            cfg(CacheMode::Wb, 4096),
            Default::default()
        )
        .await,
        Err(cairn_cache::CacheError::Geometry(_))
    ));
    let mut bad = cfg(CacheMode::Wb, 4096);
    bad.line_bytes = 12288;
    assert!(matches!(
        CacheDevice::create(mem(1 << 20), mem(1 << 20), bad, Default::default()).await,
        Err(cairn_cache::CacheError::InvalidParam { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_readers_and_writers_on_disjoint_ranges() {
    let r = std::sync::Arc::new(rig(cfg(CacheMode::Wb, 4096), 32, 1 << 20).await);
    let mut tasks = Vec::new();
    for t in 0..8u64 {
        let r = r.clone();
        tasks.push(tokio::spawn(async move {
            let mut rng = ChaCha8Rng::seed_from_u64(t);
            let mut mine = [0u32; 32];
            for step in 1..200u32 {
                let b = rng.random_range(0..32u64);
                let off = (t * 32 + b) * K4;
                if rng.random_bool(0.5) {
                    r.dev.write(off, &pattern(off, 4096, step)).await.unwrap();
                    mine[b as usize] = step;
                } else {
                    let got = read(&r.dev, off, 4096).await;
                    assert_eq!(got, pattern(off, 4096, mine[b as usize]));
                }
                if step % 50 == 0 {
                    r.dev.clean_step(u64::MAX / 4).await.unwrap();
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}
