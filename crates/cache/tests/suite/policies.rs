//! Policy tests: sequential cut-off, I/O classes, promotion, cleaning in virtual time,
//! statistics and run-time parameters persisted across attach.

use crate::common;

use cairn_blockdev::BlockDevice;
use cairn_cache::{
    CacheDevice, CacheError, CacheMode, CleaningPolicyKind, IoClassTable, IoHint, SeqCutoffPolicy,
};
use common::*;
use std::sync::Arc;

const SEED_CSV: &str = "IO class id,IO class name,Eviction priority,Allocation\n\
                        0,unclassified,22,0\n\
                        1,request_size:le:131072,1,1\n";

#[tokio::test]
async fn seq_cutoff_always_passes_sequential_streams_to_core() {
    let mut c = cfg(CacheMode::Wb, 4096);
    c.seq_cutoff.policy = SeqCutoffPolicy::Always;
    c.seq_cutoff.threshold_bytes = 16 * 1024;
    let r = rig(c, 256, 8 << 20).await;
    // Two interleaved sequential write streams of 8 KiB requests.
    for i in 0..16u64 {
        for base in [0u64, 4 << 20] {
            let off = base + i * 8192;
            r.dev.write(off, &pattern(off, 8192, 1)).await.unwrap();
        }
    }
    let s = r.dev.stats();
    // Each stream: request 0 starts it, request 1 reaches 16 KiB and is cut off.
    assert_eq!(
        s.requests.write_misses, 2,
        "only the first request of each stream is cached"
    );
    assert_eq!(s.requests.seq_cutoff, 30);
    assert_eq!(s.requests.write_pass_through, 30);
    assert_eq!(
        read(r.core.as_ref(), 8192, 8192).await,
        pattern(8192, 8192, 1)
    );
    // Random 4 KiB writes are cached.
    for off in [1 << 20, 3 << 20, 2 << 20] {
        r.dev.write(off, &pattern(off, 4096, 2)).await.unwrap();
    }
    assert_eq!(r.dev.stats().requests.write_misses, 5);
    // Sequential reads are cut off too but still see dirty data.
    let mut got = Vec::new();
    for i in 0..4u64 {
        got.extend(read(&r.dev, i * 8192, 8192).await);
    }
    assert_eq!(got, pattern(0, 4 * 8192, 1));
}

#[tokio::test]
async fn seq_cutoff_never_and_full() {
    for (policy, want_cached) in [(SeqCutoffPolicy::Never, 16), (SeqCutoffPolicy::Full, 16)] {
        let mut c = cfg(CacheMode::Wt, 4096);
        c.seq_cutoff.policy = policy;
        c.seq_cutoff.threshold_bytes = 8192;
        let r = rig(c, 64, 8 << 20).await;
        for i in 0..16u64 {
            r.dev
                .write(i * 4096, &pattern(i * 4096, 4096, 1))
                .await
                .unwrap();
        }
        assert_eq!(r.dev.stats().occupancy_lines, want_cached, "{policy:?}");
    }
    // `full` cuts off once no line is free.
    let mut c = cfg(CacheMode::Wt, 4096);
    c.seq_cutoff.policy = SeqCutoffPolicy::Full;
    c.seq_cutoff.threshold_bytes = 8192;
    let r = rig(c, 8, 8 << 20).await;
    let lines = r.dev.stats().total_lines;
    for i in 0..(lines + 10) {
        r.dev
            .write(i * 4096, &pattern(i * 4096, 4096, 1))
            .await
            .unwrap();
    }
    let s = r.dev.stats();
    assert_eq!(s.occupancy_lines, lines);
    assert!(s.requests.seq_cutoff >= 9, "{s}");
}

#[tokio::test]
async fn seed_io_classes_cache_small_requests_only() {
    let classes = IoClassTable::parse_csv(SEED_CSV).unwrap();
    let cache = mem(cache_bytes_for(256, 4096));
    let core = mem(8 << 20);
    let dev = CacheDevice::create(cache, core.clone(), cfg(CacheMode::Wb, 4096), classes)
        .await
        .unwrap();
    dev.write(0, &pattern(0, 4096, 1)).await.unwrap();
    dev.write(1 << 20, &pattern(1 << 20, 256 * 1024, 1))
        .await
        .unwrap();
    let s = dev.stats();
    assert_eq!(s.occupancy_lines, 1);
    assert_eq!(s.classes[1].requests.write_misses, 1);
    assert_eq!(s.classes[0].requests.write_pass_through, 1);
    assert_eq!(s.classes[1].occupancy_lines, 1);
    assert_eq!(
        read(core.as_ref(), 1 << 20, 4096).await,
        pattern(1 << 20, 4096, 1)
    );
    let text = s.to_string();
    assert!(
        text.contains("request_size:le:131072") && text.contains("Write misses"),
        "{text}"
    );
}

#[tokio::test]
async fn allocation_share_and_eviction_priority() {
    let csv = "IO class id,IO class name,Eviction priority,Allocation\n\
               0,unclassified,200,1\n\
               1,metadata,0,0.25\n";
    let classes = IoClassTable::parse_csv(csv).unwrap();
    let cache = mem(cache_bytes_for(64, 4096));
    let dev = CacheDevice::create(cache, mem(16 << 20), cfg(CacheMode::Wt, 4096), classes)
        .await
        .unwrap();
    let total = dev.stats().total_lines;
    let md = IoHint {
        metadata: true,
        object_class: 0,
    };
    for i in 0..total {
        dev.write_hinted(i * 4096, &pattern(i * 4096, 4096, 1), md)
            .await
            .unwrap();
    }
    let s = dev.stats();
    assert!(
        s.classes[1].occupancy_lines <= total / 4,
        "share respected: {s}"
    );
    assert!(
        s.classes[1].occupancy_lines >= total / 4 - total / 16,
        "share used: {s}"
    );
    // Data (priority 200) fills the rest and is evicted before metadata (priority 0).
    for i in 0..(2 * total) {
        let off = (8 << 20) + i * 4096;
        dev.write(off, &pattern(off, 4096, 2)).await.unwrap();
    }
    let s2 = dev.stats();
    assert_eq!(
        s2.classes[1].occupancy_lines, s.classes[1].occupancy_lines,
        "{s2}"
    );
    assert!(s2.evictions > 0);
}

#[tokio::test]
async fn nhit_promotion_inserts_after_the_threshold() {
    let mut c = cfg(CacheMode::Wt, 4096);
    c.promotion.policy = cairn_cache::PromotionPolicy::Nhit;
    c.promotion.insertion_threshold = 3;
    c.promotion.trigger_threshold_pct = 0;
    let r = rig(c, 64, 8 << 20).await;
    r.core.write(40960, &pattern(40960, 4096, 5)).await.unwrap();
    for n in 1..=3 {
        assert_eq!(read(&r.dev, 40960, 4096).await, pattern(40960, 4096, 5));
        let occ = r.dev.stats().occupancy_lines;
        assert_eq!(occ, u64::from(n == 3), "access {n}");
    }
    read(&r.dev, 40960, 4096).await;
    assert_eq!(r.dev.stats().requests.read_hits, 1);
}

async fn dirty_rig(policy: CleaningPolicyKind, target: u8) -> Rig {
    let mut c = cfg(CacheMode::Wb, 4096);
    c.cleaning.policy = policy;
    c.cleaning.dirty_target_pct = target;
    c.cleaning.alru.activity_threshold_ms = 1000;
    c.cleaning.alru.staleness_time_s = 5;
    c.cleaning.alru.flush_max_buffers = 4;
    c.cleaning.acp.flush_max_buffers = 8;
    let r = rig(c, 40, 8 << 20).await;
    for i in 0..20u64 {
        r.dev
            .write(i * 8192, &pattern(i * 8192, 4096, 1))
            .await
            .unwrap();
    }
    r
}

#[tokio::test(start_paused = true)]
async fn alru_cleans_only_when_idle_and_stale() {
    let r = dirty_rig(CleaningPolicyKind::Alru, 0).await;
    let now = r.dev.now_ms();
    assert_eq!(
        r.dev.clean_step(now).await.unwrap().cleaned_lines,
        0,
        "active I/O"
    );
    tokio::time::advance(std::time::Duration::from_secs(2)).await;
    let rep = r.dev.clean_step(r.dev.now_ms()).await.unwrap();
    assert_eq!(rep.cleaned_lines, 0, "idle but not stale yet");
    assert!(rep.next_wake_ms > r.dev.now_ms());
    tokio::time::advance(std::time::Duration::from_secs(4)).await;
    let rep = r.dev.clean_step(r.dev.now_ms()).await.unwrap();
    assert_eq!(rep.cleaned_lines, 4, "flush_max_buffers per round");
    assert_eq!(r.dev.stats().dirty_lines, 16);
    // Foreground I/O makes the core busy again.
    read(&r.dev, 0, 4096).await;
    assert_eq!(
        r.dev
            .clean_step(r.dev.now_ms())
            .await
            .unwrap()
            .cleaned_lines,
        0
    );
}

#[tokio::test(start_paused = true)]
async fn acp_cleans_at_once_and_nop_never() {
    let r = dirty_rig(CleaningPolicyKind::Acp, 0).await;
    let rep = r.dev.clean_step(r.dev.now_ms()).await.unwrap();
    assert_eq!(rep.cleaned_lines, 8);
    let n = dirty_rig(CleaningPolicyKind::Nop, 0).await;
    tokio::time::advance(std::time::Duration::from_secs(3600)).await;
    assert_eq!(
        n.dev
            .clean_step(n.dev.now_ms())
            .await
            .unwrap()
            .cleaned_lines,
        0
    );
    assert_eq!(n.dev.stats().dirty_lines, 20);
}

#[tokio::test(start_paused = true)]
async fn dirty_target_starts_cleaning_despite_activity() {
    // 20 of ~40 lines dirty = ~50%: above a 30% target, below 80%.
    let r = dirty_rig(CleaningPolicyKind::Alru, 30).await;
    let total = r.dev.stats().total_lines;
    let rep = r.dev.clean_step(r.dev.now_ms()).await.unwrap();
    assert_eq!(rep.cleaned_lines, 4);
    let nop = dirty_rig(CleaningPolicyKind::Nop, 30).await;
    let mut rounds = 0;
    while nop.dev.stats().dirty_lines * 100 > 30 * total {
        nop.dev.clean_step(nop.dev.now_ms()).await.unwrap();
        rounds += 1;
        assert!(rounds < 20);
    }
    assert_eq!(
        nop.dev
            .clean_step(nop.dev.now_ms())
            .await
            .unwrap()
            .cleaned_lines,
        0
    );
}

#[tokio::test(start_paused = true)]
async fn background_cleaner_drains_dirty_lines() {
    let r = dirty_rig(CleaningPolicyKind::Acp, 0).await;
    let dev = Arc::new(r.dev);
    let task = dev.spawn_cleaner();
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    assert_eq!(dev.stats().dirty_lines, 0);
    for i in 0..20u64 {
        assert_eq!(
            read(r.core.as_ref(), i * 8192, 4096).await,
            pattern(i * 8192, 4096, 1)
        );
    }
    task.abort();
}

#[tokio::test]
async fn parameters_modes_and_classes_persist_across_attach() {
    let r = rig(cfg(CacheMode::Wb, 16384), 32, 8 << 20).await;
    r.dev
        .set_param("seq-cutoff", "policy", "always")
        .await
        .unwrap();
    r.dev
        .set_param("seq-cutoff", "threshold", "16")
        .await
        .unwrap();
    r.dev
        .set_param("cleaning-alru", "activity-threshold", "1000")
        .await
        .unwrap();
    assert!(matches!(
        r.dev.set_param("seq-cutoff", "policy", "nofull").await,
        Err(CacheError::InvalidParam { .. })
    ));
    r.dev
        .load_io_classes(IoClassTable::parse_csv(SEED_CSV).unwrap())
        .await
        .unwrap();
    r.dev.write(0, &pattern(0, 4096, 1)).await.unwrap();
    r.dev.set_mode(CacheMode::Wt, true).await.unwrap();
    assert_eq!(r.dev.stats().dirty_lines, 0, "leaving wb with flush cleans");
    assert_eq!(read(r.core.as_ref(), 0, 4096).await, pattern(0, 4096, 1));
    let (cache, core) = (r.cache.clone(), r.core.clone());
    drop(r);
    let dev = CacheDevice::attach(cache, core).await.unwrap();
    let c = dev.config();
    assert_eq!(c.mode, CacheMode::Wt);
    assert_eq!(c.line_bytes, 16384);
    assert_eq!(c.seq_cutoff.policy, SeqCutoffPolicy::Always);
    assert_eq!(c.seq_cutoff.threshold_bytes, 16384);
    assert_eq!(c.cleaning.alru.activity_threshold_ms, 1000);
    assert_eq!(dev.io_classes().csv(), SEED_CSV);
}

#[tokio::test]
async fn leaving_write_back_without_flush_keeps_dirty_data_correct() {
    let r = rig(cfg(CacheMode::Wb, 4096), 32, 8 << 20).await;
    r.dev.write(0, &pattern(0, 8192, 1)).await.unwrap();
    r.dev.set_mode(CacheMode::Pt, false).await.unwrap();
    assert_eq!(r.dev.stats().dirty_lines, 2);
    assert_eq!(
        read(&r.dev, 0, 8192).await,
        pattern(0, 8192, 1),
        "pt still sees dirty data"
    );
    r.dev.write(4096, &pattern(4096, 4096, 2)).await.unwrap();
    let mut want = pattern(0, 4096, 1);
    want.extend(pattern(4096, 4096, 2));
    assert_eq!(read(&r.dev, 0, 8192).await, want);
    r.dev.detach().await.unwrap();
    assert_eq!(read(r.core.as_ref(), 0, 8192).await, want);
}

#[tokio::test]
async fn background_cleaning_goes_through_the_cleaning_path() {
    let core = mem(8 << 20);
    let fg = Arc::new(Rigged::new(core.clone(), Hold::Nothing));
    let bg = Arc::new(Rigged::new(core.clone(), Hold::Nothing));
    let dev = CacheDevice::create(
        mem(cache_bytes_for(64, 4096)),
        fg.clone(),
        cfg(CacheMode::Wb, 4096),
        IoClassTable::default(),
    )
    .await
    .unwrap()
    .with_cleaning_path(bg.clone())
    .unwrap();
    for i in 0..10u64 {
        dev.write(i * 4096, &pattern(i * 4096, 4096, 1))
            .await
            .unwrap();
    }
    dev.clean_step(u64::MAX / 4).await.unwrap();
    dev.flush_dirty().await.unwrap();
    use std::sync::atomic::Ordering::SeqCst;
    assert_eq!(
        fg.writes.load(SeqCst),
        0,
        "foreground handle carries no background cleaning"
    );
    assert_eq!(
        bg.writes.load(SeqCst),
        1,
        "ten adjacent dirty lines go to the core as one write"
    );
    assert_eq!(read(core.as_ref(), 0, 10 * 4096).await, {
        (0..10u64)
            .flat_map(|i| pattern(i * 4096, 4096, 1))
            .collect::<Vec<u8>>()
    });
    // A flush someone waits on (like an eviction) keeps the foreground handle: it may run
    // inside a scheduler slot the cleaning path would queue behind. Lines apart on the core
    // go as writes of their own.
    for i in 0..3u64 {
        dev.write(i * 2 * 4096, &pattern(i * 2 * 4096, 4096, 2))
            .await
            .unwrap();
    }
    dev.flush_dirty().await.unwrap();
    assert_eq!(fg.writes.load(SeqCst), 3);
    assert_eq!(bg.writes.load(SeqCst), 1);
    assert_eq!(read(core.as_ref(), 0, 4096).await, pattern(0, 4096, 2));
    assert_eq!(
        read(core.as_ref(), 4096, 4096).await,
        pattern(4096, 4096, 1)
    );
    assert_eq!(
        read(core.as_ref(), 4 * 4096, 4096).await,
        pattern(4 * 4096, 4096, 2)
    );
    let wrong = CacheDevice::create(
        mem(cache_bytes_for(64, 4096)),
        mem(8 << 20),
        cfg(CacheMode::Wb, 4096),
        IoClassTable::default(),
    )
    .await
    .unwrap()
    .with_cleaning_path(mem(4 << 20));
    assert!(matches!(wrong, Err(CacheError::InvalidParam { .. })));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evicting_dirty_lines_lets_hits_through_while_the_core_writes() {
    use std::time::Duration;
    const LINES: u64 = 64;
    let core = mem(8 << 20);
    let held = Arc::new(Rigged::new(core.clone(), Hold::Writes));
    let dev = Arc::new(
        CacheDevice::create(
            mem(cache_bytes_for(LINES, 4096)),
            held.clone(),
            clean_dirty_victims(cfg(CacheMode::Wb, 4096)),
            IoClassTable::default(),
        )
        .await
        .unwrap(),
    );
    for i in 0..LINES {
        dev.write(i * 4096, &pattern(i * 4096, 4096, 1))
            .await
            .unwrap();
    }
    assert_eq!(
        dev.stats().dirty_lines,
        LINES,
        "every line dirty: the cache is full"
    );
    held.held.send_replace(true);
    let miss = {
        let dev = dev.clone();
        tokio::spawn(async move {
            dev.write(LINES * 4096, &pattern(LINES * 4096, 4096, 2))
                .await
        })
    };
    let bound = Duration::from_secs(20);
    tokio::time::timeout(bound, held.blocked.acquire())
        .await
        .expect("the miss cleans its victims to the core")
        .unwrap()
        .forget();
    // The miss now waits on the core. A read hit and an in-place write hit go on.
    let last = (LINES - 1) * 4096;
    let got = tokio::time::timeout(bound, read(dev.as_ref(), last, 4096))
        .await
        .expect("a read hit is not held behind an eviction's core writes");
    assert_eq!(got, pattern(last, 4096, 1));
    let prev = (LINES - 2) * 4096;
    tokio::time::timeout(bound, dev.write(prev, &pattern(prev, 4096, 3)))
        .await
        .expect("a write hit is not held behind an eviction's core writes")
        .unwrap();
    assert!(!miss.is_finished(), "the miss still waits for its victims");
    held.held.send_replace(false);
    tokio::time::timeout(bound, miss)
        .await
        .expect("the miss completes once the core does")
        .unwrap()
        .unwrap();
    let s = dev.stats();
    assert!(s.victims_cleaned_ahead >= 1, "{s:?}");
    assert_eq!(s.victims_cleaned_blocking, 0, "{s:?}");
    assert!(s.evictions >= 1, "{s:?}");
    let mut want = Vec::new();
    for i in 0..=LINES {
        let v = match i {
            i if i == LINES => 2,
            i if i == LINES - 2 => 3,
            _ => 1,
        };
        want.extend(pattern(i * 4096, 4096, v));
    }
    assert_eq!(read(dev.as_ref(), 0, want.len()).await, want);
    dev.flush_dirty().await.unwrap();
    assert_eq!(read(core.as_ref(), 0, want.len()).await, want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_victim_dirtied_again_after_cleaning_ahead_is_cleaned_before_eviction() {
    // Many concurrent misses on a full, all-dirty cache: whichever order the cleaning ahead
    // and the evictions interleave in, no data is lost.
    const LINES: u64 = 32;
    let r = rig(cfg(CacheMode::Wb, 4096), LINES, 8 << 20).await;
    let dev = Arc::new(r.dev);
    for i in 0..LINES {
        dev.write(i * 4096, &pattern(i * 4096, 4096, 1))
            .await
            .unwrap();
    }
    for version in 2..=3u32 {
        let tasks: Vec<_> = (0..2 * LINES)
            .map(|i| {
                let dev = dev.clone();
                tokio::spawn(
                    async move { dev.write(i * 4096, &pattern(i * 4096, 4096, version)).await },
                )
            })
            .collect();
        for t in tasks {
            t.await.unwrap().unwrap();
        }
    }
    let mut want = Vec::new();
    for i in 0..2 * LINES {
        want.extend(pattern(i * 4096, 4096, 3));
    }
    assert_eq!(read(dev.as_ref(), 0, want.len()).await, want);
    dev.flush_dirty().await.unwrap();
    assert_eq!(read(r.core.as_ref(), 0, want.len()).await, want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flush_waits_for_a_cleaning_round_in_flight_and_leaves_nothing_dirty() {
    use std::time::Duration;
    const LINES: u64 = 64;
    let core = mem(8 << 20);
    let cleaning_path = Arc::new(Rigged::new(core.clone(), Hold::Writes).held());
    let dev = Arc::new(
        CacheDevice::create(
            mem(cache_bytes_for(LINES, 4096)),
            core.clone(),
            cfg(CacheMode::Wb, 4096),
            IoClassTable::default(),
        )
        .await
        .unwrap()
        .with_cleaning_path(cleaning_path.clone())
        .unwrap(),
    );
    for i in 0..16u64 {
        dev.write(i * 4096, &pattern(i * 4096, 4096, 1))
            .await
            .unwrap();
    }
    let round = {
        let dev = dev.clone();
        tokio::spawn(async move { dev.clean_step(u64::MAX / 4).await })
    };
    let bound = Duration::from_secs(20);
    tokio::time::timeout(bound, cleaning_path.blocked.acquire())
        .await
        .expect("the cleaning round writes to its path")
        .unwrap()
        .forget();
    let flush = {
        let dev = dev.clone();
        tokio::spawn(async move { dev.flush_dirty().await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !flush.is_finished(),
        "a flush does not end while lines it owes the core are still being cleaned"
    );
    cleaning_path.held.send_replace(false);
    tokio::time::timeout(bound, round)
        .await
        .expect("the round ends")
        .unwrap()
        .unwrap();
    tokio::time::timeout(bound, flush)
        .await
        .expect("the flush ends once the round has")
        .unwrap()
        .unwrap();
    assert_eq!(dev.stats().dirty_lines, 0, "{:?}", dev.stats());
    let mut want = Vec::new();
    for i in 0..16u64 {
        want.extend(pattern(i * 4096, 4096, 1));
    }
    assert_eq!(read(core.as_ref(), 0, want.len()).await, want);
    // Cleaning goes on after the flush.
    dev.write(0, &pattern(0, 4096, 2)).await.unwrap();
    assert_eq!(dev.clean_step(u64::MAX / 4).await.unwrap().cleaned_lines, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flushes_arriving_while_one_runs_share_the_next() {
    use std::sync::atomic::Ordering::SeqCst;
    use std::time::Duration;
    let cache = Arc::new(Rigged::new(mem(cache_bytes_for(64, 4096)), Hold::Flushes));
    let dev = Arc::new(
        CacheDevice::create(
            cache.clone(),
            mem(8 << 20),
            cfg(CacheMode::Wb, 4096),
            IoClassTable::default(),
        )
        .await
        .unwrap(),
    );
    dev.write(0, &pattern(0, 4096, 1)).await.unwrap();
    cache.held.send_replace(true);
    let first = {
        let dev = dev.clone();
        tokio::spawn(async move { dev.flush().await })
    };
    let bound = Duration::from_secs(20);
    tokio::time::timeout(bound, cache.blocked.acquire())
        .await
        .expect("the first flush reaches the cache")
        .unwrap()
        .forget();
    let before = cache.flushes.load(SeqCst);
    // Fifteen writers complete a write each and ask for a flush while the first one runs.
    let others: Vec<_> = (1..16u64)
        .map(|i| {
            let dev = dev.clone();
            tokio::spawn(async move {
                dev.write(i * 4096, &pattern(i * 4096, 4096, 1)).await?;
                dev.flush().await
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(200)).await;
    cache.held.send_replace(false);
    tokio::time::timeout(bound, first)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    for o in others {
        tokio::time::timeout(bound, o)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
    }
    let after = cache.flushes.load(SeqCst) - before;
    assert!(
        after <= 4,
        "the waiting flushes share one persist (two cache flushes), not {after} cache flushes"
    );
    // Every write acknowledged by a flush is durable: a power loss now (a reattach over the
    // same media, the cache's memory gone) finds all sixteen lines.
    assert_eq!(dev.stats().dirty_lines, 16);
}

/// Writers overwriting clean lines whose claims are persisted do not take turns, one persist
/// (two cache flushes) each: the writers arriving while one release persist runs share the
/// next, and every write lands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writers_over_clean_lines_share_the_persist_that_releases_their_claims() {
    use std::sync::atomic::Ordering::SeqCst;
    use std::time::Duration;
    const BLOCKS: u64 = 16;
    let cache = Arc::new(Rigged::new(mem(cache_bytes_for(64, 4096)), Hold::Flushes));
    let mut config = cfg(CacheMode::Wb, 4096);
    config.cleaning.dirty_target_pct = 0;
    let dev = Arc::new(
        CacheDevice::create(cache.clone(), mem(8 << 20), config, IoClassTable::default())
            .await
            .unwrap(),
    );
    for b in 0..BLOCKS {
        dev.write(b * 4096, &pattern(b * 4096, 4096, 1))
            .await
            .unwrap();
    }
    for _ in 0..BLOCKS {
        if dev.stats().dirty_lines == 0 {
            break;
        }
        dev.clean_step(u64::MAX / 4).await.unwrap();
    }
    dev.flush().await.unwrap();
    assert_eq!(
        dev.stats().dirty_lines,
        0,
        "every line clean, its claim persisted"
    );
    cache.held.send_replace(true);
    let write = |b: u64| {
        let dev = dev.clone();
        tokio::spawn(async move { dev.write(b * 4096, &pattern(b * 4096, 4096, 2)).await })
    };
    let first = write(0);
    let bound = Duration::from_secs(20);
    tokio::time::timeout(bound, cache.blocked.acquire())
        .await
        .expect("the first release reaches the cache flush")
        .unwrap()
        .forget();
    let before = cache.flushes.load(SeqCst);
    let others: Vec<_> = (1..BLOCKS).map(write).collect();
    tokio::time::sleep(Duration::from_millis(200)).await;
    cache.held.send_replace(false);
    for w in std::iter::once(first).chain(others) {
        tokio::time::timeout(bound, w)
            .await
            .expect("every writer finishes")
            .unwrap()
            .unwrap();
    }
    let after = cache.flushes.load(SeqCst) - before;
    // One flush for the writers that queued behind the first, a few more if some had not
    // queued yet when it was let go; one each (fifteen) without sharing.
    assert!(
        after <= 4,
        "the waiting writers share release persists (a cache flush each), not {after} flushes"
    );
    let releases = dev.stats().claim_releases;
    assert!((2..=5).contains(&releases), "{releases} release persists");
    for b in 0..BLOCKS {
        let got = read(dev.as_ref(), b * 4096, 4096).await;
        assert_eq!(got, pattern(b * 4096, 4096, 2), "block {b}");
    }
    dev.flush().await.unwrap();
    assert_eq!(dev.stats().dirty_lines, BLOCKS);
}

/// A flush persisting its entries lets writes in place and read hits through, but no write
/// lands over a sector that an entry it is writing claims clean before that flush is done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flush_lets_writes_in_place_through_but_not_over_the_clean_claims_it_writes() {
    use std::time::Duration;
    let cache = Arc::new(Rigged::new(mem(cache_bytes_for(64, 4096)), Hold::Flushes));
    let core = mem(8 << 20);
    core.write(5 * 4096, &pattern(5 * 4096, 4096, 1))
        .await
        .unwrap();
    let dev = Arc::new(
        CacheDevice::create(
            cache.clone(),
            core.clone(),
            cfg(CacheMode::Wb, 4096),
            IoClassTable::default(),
        )
        .await
        .unwrap(),
    );
    dev.write(0, &pattern(0, 4096, 1)).await.unwrap();
    // Block 5 read into the cache: a clean line whose claim only the next flush persists.
    assert_eq!(
        read(dev.as_ref(), 5 * 4096, 4096).await,
        pattern(5 * 4096, 4096, 1)
    );
    cache.held.send_replace(true);
    let flush = {
        let dev = dev.clone();
        tokio::spawn(async move { dev.flush().await })
    };
    let bound = Duration::from_secs(20);
    tokio::time::timeout(bound, cache.blocked.acquire())
        .await
        .expect("the flush reaches the cache")
        .unwrap()
        .forget();
    tokio::time::timeout(bound, dev.write(0, &pattern(0, 4096, 2)))
        .await
        .expect("a write over a dirty line goes on while the flush persists")
        .unwrap();
    assert_eq!(read(dev.as_ref(), 0, 4096).await, pattern(0, 4096, 2));
    let over_claim = {
        let dev = dev.clone();
        tokio::spawn(async move { dev.write(5 * 4096, &pattern(5 * 4096, 4096, 2)).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !over_claim.is_finished(),
        "a write over a clean claim the flush is writing waits for the flush"
    );
    cache.held.send_replace(false);
    tokio::time::timeout(bound, flush)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    tokio::time::timeout(bound, over_claim)
        .await
        .expect("the write goes on once the flush is done")
        .unwrap()
        .unwrap();
    assert_eq!(
        read(dev.as_ref(), 5 * 4096, 4096).await,
        pattern(5 * 4096, 4096, 2)
    );
    assert!(dev.stats().claim_releases >= 1);
    dev.flush().await.unwrap();
    assert_eq!(dev.stats().dirty_lines, 2);
}

/// Holds `core`'s writes and starts a 256 KiB write of `version` at offset 0 (too large for
/// [`SEED_CSV`]'s caching class); returns once its bytes for the core wait there.
async fn uncached_write_held_at_the_core(
    dev: &Arc<CacheDevice>,
    core: &Rigged,
    version: u32,
) -> tokio::task::JoinHandle<Result<(), cairn_blockdev::BlockDevError>> {
    core.held.send_replace(true);
    let big = {
        let dev = dev.clone();
        tokio::spawn(async move { dev.write(0, &pattern(0, 256 * 1024, version)).await })
    };
    tokio::time::timeout(std::time::Duration::from_secs(20), core.blocked.acquire())
        .await
        .expect("the uncached pieces go to the core")
        .unwrap()
        .forget();
    big
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_the_cache_does_not_admit_updates_its_lines_in_place_while_hits_go_on() {
    use std::time::Duration;
    let core = Arc::new(Rigged::new(mem(8 << 20), Hold::Writes));
    core.write(0, &pattern(0, 256 * 1024, 1)).await.unwrap();
    let cache = mem(cache_bytes_for(64, 4096));
    let classes = IoClassTable::parse_csv(SEED_CSV).unwrap();
    let dev = Arc::new(
        CacheDevice::create(
            cache.clone(),
            core.clone(),
            cfg(CacheMode::Wb, 4096),
            classes,
        )
        .await
        .unwrap(),
    );
    let far = 4u64 << 20;
    dev.write(0, &pattern(0, 4096, 2)).await.unwrap();
    dev.write(far, &pattern(far, 4096, 2)).await.unwrap();
    assert_eq!(
        read(dev.as_ref(), 2 * 4096, 4096).await,
        pattern(2 * 4096, 4096, 1)
    );
    dev.flush().await.unwrap();
    let before = dev.stats();
    assert_eq!((before.occupancy_lines, before.dirty_lines), (3, 2));

    // 256 KiB: too large for the caching class. Block 0 is dirty in the cache, block 2 clean
    // with its claim persisted, the rest is not cached.
    let big = uncached_write_held_at_the_core(&dev, &core, 3).await;
    let bound = Duration::from_secs(20);
    assert_eq!(
        tokio::time::timeout(bound, read(dev.as_ref(), far, 4096))
            .await
            .expect("a read hit goes on while the write waits for the core"),
        pattern(far, 4096, 2)
    );
    tokio::time::timeout(bound, dev.write(far, &pattern(far, 4096, 4)))
        .await
        .expect("a write hit goes on while the write waits for the core")
        .unwrap();
    core.held.send_replace(false);
    tokio::time::timeout(bound, big)
        .await
        .expect("the write completes once the core does")
        .unwrap()
        .unwrap();

    let after = dev.stats();
    assert_eq!(after.classes[0].requests.write_pass_through, 1);
    assert_eq!(
        (after.occupancy_lines, after.dirty_lines),
        (3, 3),
        "the lines it held took the new bytes; none was added or evicted"
    );
    assert!(after.claim_releases > before.claim_releases);
    assert_eq!(
        read(core.as_ref(), 4096, 4096).await,
        pattern(4096, 4096, 3)
    );
    assert_eq!(
        read(core.as_ref(), 0, 4096).await,
        pattern(0, 4096, 1),
        "block 0's newest copy stays in the cache, dirty"
    );
    assert_eq!(
        read(dev.as_ref(), 0, 256 * 1024).await,
        pattern(0, 256 * 1024, 3)
    );
    dev.flush().await.unwrap();
    drop(dev);
    let again = CacheDevice::attach(cache, core).await.unwrap();
    assert_eq!(read(&again, 0, 256 * 1024).await, pattern(0, 256 * 1024, 3));
    assert_eq!(read(&again, far, 4096).await, pattern(far, 4096, 4));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cleaner_wake_with_nothing_to_clean_queues_no_one_behind_the_core() {
    use std::time::Duration;
    let core = Arc::new(Rigged::new(mem(8 << 20), Hold::Writes));
    let classes = IoClassTable::parse_csv(SEED_CSV).unwrap();
    let dev = Arc::new(
        CacheDevice::create(
            mem(cache_bytes_for(64, 4096)),
            core.clone(),
            cfg(CacheMode::Wb, 4096),
            classes,
        )
        .await
        .unwrap(),
    );
    let far = 4u64 << 20;
    dev.write(far, &pattern(far, 4096, 1)).await.unwrap();
    dev.flush().await.unwrap();
    dev.clean_step(u64::MAX / 4).await.unwrap();
    assert_eq!(dev.stats().dirty_lines, 0);
    let big = uncached_write_held_at_the_core(&dev, &core, 2).await;
    let bound = Duration::from_secs(20);
    let report = tokio::time::timeout(bound, dev.clean_step(u64::MAX / 4))
        .await
        .expect("a cleaner wake with nothing dirty does not wait for the core's writes")
        .unwrap();
    assert_eq!(report.cleaned_lines, 0);
    assert_eq!(
        tokio::time::timeout(bound, read(dev.as_ref(), far, 4096))
            .await
            .expect("a hit after the wake goes on"),
        pattern(far, 4096, 1)
    );
    core.held.send_replace(false);
    tokio::time::timeout(bound, big)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(
        read(dev.as_ref(), 0, 256 * 1024).await,
        pattern(0, 256 * 1024, 2)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_fanning_out_past_the_devices_queues_wait_instead_of_failing() {
    let profile = cairn_blockdev::Profile::load("nvme-p3700").unwrap();
    let shallow = |bytes: u64| -> Arc<dyn BlockDevice> {
        Arc::new(cairn_blockdev::EmulatedDevice::new(mem(bytes), &profile, 2).unwrap())
    };
    let core = shallow(8 << 20);
    let dev = Arc::new(
        CacheDevice::create(
            shallow(cache_bytes_for(256, 4096)),
            core.clone(),
            cfg(CacheMode::Wb, 4096),
            IoClassTable::default(),
        )
        .await
        .unwrap()
        .with_cleaning_path(core.clone())
        .unwrap(),
    );
    // Sixteen 64 KiB writes at once: 256 line writes against queues two deep.
    let writes: Vec<_> = (0..16u64)
        .map(|i| {
            let dev = dev.clone();
            tokio::spawn(async move { dev.write(i << 16, &pattern(i << 16, 1 << 16, 1)).await })
        })
        .collect();
    for w in writes {
        w.await.unwrap().unwrap();
    }
    dev.flush().await.unwrap();
    let cleaner = {
        let dev = dev.clone();
        tokio::spawn(async move { dev.clean_step(u64::MAX / 4).await })
    };
    let reads: Vec<_> = (0..16u64)
        .map(|i| {
            let dev = dev.clone();
            tokio::spawn(async move { read(dev.as_ref(), i << 16, 1 << 16).await })
        })
        .collect();
    for (i, r) in reads.into_iter().enumerate() {
        let i = i as u64;
        assert_eq!(r.await.unwrap(), pattern(i << 16, 1 << 16, 1));
    }
    cleaner.await.unwrap().unwrap();
    dev.flush_dirty().await.unwrap();
    assert_eq!(
        read(core.as_ref(), 0, 16 << 16).await,
        (0..16u64)
            .flat_map(|i| pattern(i << 16, 1 << 16, 1))
            .collect::<Vec<u8>>()
    );
}

#[tokio::test]
async fn a_read_miss_overtaken_by_a_core_write_is_not_cached() {
    let core = mem(8 << 20);
    let late = Arc::new(Rigged::new(core.clone(), Hold::ReadsAfterReading));
    // The seed's classes: a 256 KiB write is not cached, it goes to the core.
    let dev = Arc::new(
        CacheDevice::create(
            mem(cache_bytes_for(64, 4096)),
            late.clone(),
            cfg(CacheMode::Wb, 4096),
            IoClassTable::parse_csv(SEED_CSV).unwrap(),
        )
        .await
        .unwrap(),
    );
    core.write(0, &pattern(0, 4096, 1)).await.unwrap();
    late.held.send_replace(true);
    let reader = {
        let dev = dev.clone();
        tokio::spawn(async move { read(dev.as_ref(), 0, 4096).await })
    };
    late.blocked.acquire().await.unwrap().forget();
    dev.write(0, &pattern(0, 256 << 10, 2)).await.unwrap();
    assert_eq!(read(core.as_ref(), 0, 4096).await, pattern(0, 4096, 2));
    late.held.send_replace(false);
    assert_eq!(
        reader.await.unwrap(),
        pattern(0, 4096, 1),
        "read before the write"
    );
    assert_eq!(
        dev.stats().occupancy_lines,
        0,
        "what it read is stale: not cached"
    );
    assert_eq!(read(dev.as_ref(), 0, 4096).await, pattern(0, 4096, 2));
    // Without a write in between, a miss is cached and the next read hits.
    assert_eq!(dev.stats().occupancy_lines, 1);
    assert_eq!(read(dev.as_ref(), 0, 4096).await, pattern(0, 4096, 2));
    let hits: u64 = dev
        .stats()
        .classes
        .iter()
        .map(|c| c.requests.read_hits)
        .sum();
    assert_eq!(hits, 1);
}

#[tokio::test]
async fn the_cache_is_rotational_when_its_core_is() {
    for (core, want) in [
        (
            Arc::new(Rigged::new(mem(8 << 20), Hold::Nothing).spinning()) as Arc<dyn BlockDevice>,
            true,
        ),
        (mem(8 << 20) as Arc<dyn BlockDevice>, false),
    ] {
        let dev = CacheDevice::create(
            mem(cache_bytes_for(64, 4096)),
            core,
            cfg(CacheMode::Wb, 4096),
            IoClassTable::default(),
        )
        .await
        .unwrap();
        assert_eq!(dev.properties().rotational, want);
    }
}

/// `c` with Open-CAS's behaviour on a dirty-full cache: dirty victims are cleaned and evicted.
fn clean_dirty_victims(mut c: cairn_cache::CacheConfig) -> cairn_cache::CacheConfig {
    c.promotion.dirty_full = cairn_cache::DirtyFullPolicy::Clean;
    c
}

#[tokio::test]
async fn a_miss_on_a_dirty_full_cache_goes_to_the_core_without_cleaning() {
    const LINES: u64 = 64;
    let mut c = cfg(CacheMode::Wb, 4096);
    c.cleaning.policy = CleaningPolicyKind::Nop;
    c.cleaning.dirty_target_pct = 0;
    let r = rig(c, LINES, 8 << 20).await;
    for i in 0..LINES {
        r.dev
            .write(i * 4096, &pattern(i * 4096, 4096, 1))
            .await
            .unwrap();
    }
    assert_eq!(r.dev.stats().dirty_lines, LINES);
    // A 64 KiB write and a read of never-cached data: both straight to the core.
    let at = LINES * 4096;
    r.dev.write(at, &pattern(at, 1 << 16, 2)).await.unwrap();
    assert_eq!(
        read(r.core.as_ref(), at, 1 << 16).await,
        pattern(at, 1 << 16, 2)
    );
    let far = 1 << 20;
    assert_eq!(read(&r.dev, far, 4096).await, vec![0u8; 4096]);
    let s = r.dev.stats();
    assert_eq!(s.cleaned_lines, 0, "{s:?}");
    assert_eq!(s.dirty_lines, LINES, "the dirty lines stay cached: {s:?}");
    let classes: u64 = s.classes.iter().map(|c| c.requests.dirty_full_bypass).sum();
    assert_eq!(classes, 2, "{s:?}");
    // Every written byte reads back, cached or not.
    assert_eq!(read(&r.dev, at, 1 << 16).await, pattern(at, 1 << 16, 2));
    assert_eq!(read(&r.dev, 0, 4096).await, pattern(0, 4096, 1));
    // Once cleaned, misses are cached again.
    r.dev.flush_dirty().await.unwrap();
    r.dev.write(far, &pattern(far, 4096, 3)).await.unwrap();
    let s = r.dev.stats();
    assert_eq!(s.dirty_lines, 1, "{s:?}");
    assert_eq!(read(r.core.as_ref(), far, 4096).await, vec![0u8; 4096]);
    assert_eq!(read(&r.dev, far, 4096).await, pattern(far, 4096, 3));
}

#[tokio::test]
async fn discarding_dirty_lines_drops_them_without_writing_the_core() {
    let mut c = cfg(CacheMode::Wb, 4096);
    c.cleaning.policy = CleaningPolicyKind::Nop;
    c.cleaning.dirty_target_pct = 0;
    let r = rig(c, 64, 8 << 20).await;
    r.dev.write(0, &pattern(0, 8 * 4096, 1)).await.unwrap();
    r.dev.flush().await.unwrap();
    assert_eq!(r.dev.stats().dirty_lines, 8);
    r.dev.discard(4096, 4 * 4096).await.unwrap();
    let s = r.dev.stats();
    assert_eq!((s.dirty_lines, s.cleaned_lines), (4, 0), "{s:?}");
    assert_eq!(read(&r.dev, 4096, 4 * 4096).await, vec![0u8; 4 * 4096]);
    assert_eq!(read(&r.dev, 0, 4096).await, pattern(0, 4096, 1));
    assert_eq!(
        read(&r.dev, 5 * 4096, 3 * 4096).await,
        pattern(5 * 4096, 3 * 4096, 1)
    );
    // The dropped claims are persisted: a reattached cache keeps only the other lines.
    let (cache, core) = (r.cache.clone(), r.core.clone());
    drop(r);
    let dev = CacheDevice::attach(cache, core).await.unwrap();
    assert_eq!(dev.stats().dirty_lines, 4);
    assert_eq!(read(&dev, 0, 4096).await, pattern(0, 4096, 1));
    assert_eq!(read(&dev, 4096, 4096).await, vec![0u8; 4096]);
}

#[tokio::test]
async fn a_request_needing_many_lines_cleans_all_its_victims_ahead() {
    const LINES: u64 = 64;
    let r = rig(
        clean_dirty_victims(cfg(CacheMode::Wb, 4096)),
        LINES,
        8 << 20,
    )
    .await;
    for i in 0..LINES {
        r.dev
            .write(i * 4096, &pattern(i * 4096, 4096, 1))
            .await
            .unwrap();
    }
    // 64 KiB: sixteen lines to evict, four eviction batches of this cache.
    let at = LINES * 4096;
    r.dev.write(at, &pattern(at, 1 << 16, 2)).await.unwrap();
    let s = r.dev.stats();
    assert_eq!(s.victims_cleaned_blocking, 0, "{s:?}");
    assert!(s.victims_cleaned_ahead >= 16, "{s:?}");
    assert_eq!(read(&r.dev, at, 1 << 16).await, pattern(at, 1 << 16, 2));
    assert_eq!(read(&r.dev, 0, 4096).await, pattern(0, 4096, 1));
}

/// A class table too large for the superblock is refused with nothing changed; a class
/// removed while lines hold it, and a restart before those lines' metadata is written, leaves
/// a cache that attaches with them in the default class.
#[tokio::test]
async fn class_tables_change_safely_across_restarts() {
    let csv = "IO class id,IO class name,Eviction priority,Allocation\n\
               0,unclassified,200,1\n\
               1,metadata,0,0.5\n";
    let cache = mem(cache_bytes_for(64, 4096));
    let core = mem(16 << 20);
    let dev = CacheDevice::create(
        cache.clone(),
        core.clone(),
        cfg(CacheMode::Wb, 4096),
        IoClassTable::parse_csv(csv).unwrap(),
    )
    .await
    .unwrap();
    let md = IoHint {
        metadata: true,
        object_class: 0,
    };
    let data = pattern(0, 8 * 4096, 3);
    dev.write_hinted(0, &data, md).await.unwrap();
    dev.flush().await.unwrap();
    assert_eq!(dev.stats().classes[1].occupancy_lines, 8);
    let huge = format!(
        "IO class id,IO class name,Eviction priority,Allocation\n\
         0,unclassified,200,1\n1,{}metadata,0,0.5\n",
        "metadata&".repeat(4000)
    );
    let table = IoClassTable::parse_csv(&huge).expect("a long name parses");
    assert!(dev.load_io_classes(table).await.is_err());
    assert_eq!(
        dev.io_classes().csv(),
        csv,
        "a refused table changes nothing"
    );
    let only_default = "IO class id,IO class name,Eviction priority,Allocation\n\
                        0,unclassified,200,1\n";
    dev.load_io_classes(IoClassTable::parse_csv(only_default).unwrap())
        .await
        .unwrap();
    drop(dev);
    let dev = CacheDevice::attach(cache, core).await.unwrap();
    assert_eq!(dev.io_classes().csv(), only_default);
    assert_eq!(dev.stats().classes[0].occupancy_lines, 8);
    assert_eq!(read(&dev, 0, 8 * 4096).await, data);
}

/// Leaving write-back with a flush, and detaching, write the dirty lines to the core in rounds
/// that let the gate go: a read hit goes on while the core is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mode_change_that_flushes_lets_hits_through_while_the_core_writes() {
    use std::time::Duration;
    const LINES: u64 = 16;
    let core = mem(8 << 20);
    let held = Arc::new(Rigged::new(core.clone(), Hold::Writes));
    let dev = Arc::new(
        CacheDevice::create(
            mem(cache_bytes_for(64, 4096)),
            held.clone(),
            cfg(CacheMode::Wb, 4096),
            IoClassTable::default(),
        )
        .await
        .unwrap(),
    );
    for i in 0..LINES {
        dev.write(i * 4096, &pattern(i * 4096, 4096, 1))
            .await
            .unwrap();
    }
    held.held.send_replace(true);
    let change = {
        let dev = dev.clone();
        tokio::spawn(async move { dev.set_mode(CacheMode::Wt, true).await })
    };
    let bound = Duration::from_secs(20);
    tokio::time::timeout(bound, held.blocked.acquire())
        .await
        .expect("the mode change writes dirty lines to the core")
        .unwrap()
        .forget();
    let got = tokio::time::timeout(bound, read(dev.as_ref(), 0, 4096))
        .await
        .expect("a read hit is not held behind the mode change's core writes");
    assert_eq!(got, pattern(0, 4096, 1));
    assert!(!change.is_finished());
    held.held.send_replace(false);
    tokio::time::timeout(bound, change)
        .await
        .expect("the mode change completes once the core does")
        .unwrap()
        .unwrap();
    assert_eq!(dev.stats().dirty_lines, 0);
    assert_eq!(dev.config().mode, CacheMode::Wt);
    assert_eq!(read(core.as_ref(), 0, 4096).await, pattern(0, 4096, 1));
}
