//! CPU cost of a 4 KiB cache hit on memory devices, against the raw 4 KiB read of the memory
//! device itself (the copy every path pays). Goal: hit - raw <= 0.8 us.

use cairn_blockdev::{BlockDevice, MemDevice};
use cairn_cache::{CacheConfig, CacheDevice, CacheMode, IoClassTable};
use criterion::{criterion_group, criterion_main, Criterion};
use std::sync::Arc;

const BLOCKS: u64 = 4096;

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let core = Arc::new(MemDevice::new(BLOCKS * 4096 * 4, 4096).unwrap());
    let cache = Arc::new(MemDevice::new(64 << 20, 4096).unwrap());
    let cfg = CacheConfig {
        mode: CacheMode::Wb,
        ..Default::default()
    };
    let dev = rt
        .block_on(CacheDevice::create(
            cache,
            core.clone(),
            cfg,
            IoClassTable::default(),
        ))
        .unwrap();
    let mut buf = vec![0u8; 4096];
    rt.block_on(async {
        for b in 0..BLOCKS {
            dev.read(b * 4096, &mut buf).await.unwrap();
        }
    });
    assert_eq!(dev.stats().occupancy_lines, BLOCKS);
    let mut i = 0u64;
    c.bench_function("mem_read_4k_raw", |b| {
        b.iter(|| {
            i = (i + 7919) % BLOCKS;
            rt.block_on(core.read(i * 4096, &mut buf)).unwrap();
        })
    });
    c.bench_function("cache_read_hit_4k", |b| {
        b.iter(|| {
            i = (i + 7919) % BLOCKS;
            rt.block_on(dev.read(i * 4096, &mut buf)).unwrap();
        })
    });
    c.bench_function("cache_write_hit_4k_wb", |b| {
        b.iter(|| {
            i = (i + 7919) % BLOCKS;
            rt.block_on(dev.write(i * 4096, &buf)).unwrap();
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
