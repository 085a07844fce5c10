//! Crash consistency: power is cut (data device and KV together, on one switch) at every
//! mutating operation of short sequences, and at random points of random workloads. After
//! remount every acknowledged transaction must be fully present, the one in flight either fully
//! present or absent, fsck --deep clean, and the store usable.

use crate::common;

use cairn_blockdev::{BlockDevice, MemDevice, PowerLossMode};
use cairn_store::{KvLossMode, Op, StoreConfig, Transaction};
use common::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

const OBJ_A_BYTES: usize = 12_288;

/// The starting state: object A with data, an xattr and an omap entry; B absent.
async fn base() -> (Images, Model) {
    base_on(false).await
}

/// As [`base`]; with `split`, the store's superblock and log on a fast device of their own.
async fn base_on(split: bool) -> (Images, Model) {
    base_from(fresh_images_on(&cfg(), split).await).await
}

/// Lines of the cache in front of the data device in the cached tests: 48 of 4 KiB, far fewer
/// than the blocks the store writes, so that lines are evicted all the time.
const CACHE_LINES: u64 = 48;

/// As [`base`], the store on a write-back cache in front of its data device, which cleans a
/// dirty victim before it reuses its line (a full cache of dirty lines writes the core).
async fn base_cached() -> (Images, Model) {
    let mut cache_cfg = cairn_cache::CacheConfig {
        mode: cairn_cache::CacheMode::Wb,
        line_bytes: 4096,
        ..Default::default()
    };
    cache_cfg.seq_cutoff.policy = cairn_cache::SeqCutoffPolicy::Never;
    cache_cfg.cleaning.dirty_target_pct = 0;
    cache_cfg.promotion.dirty_full = cairn_cache::DirtyFullPolicy::Clean;
    let cache_bytes = 32 * 1024 + 4096 + CACHE_LINES * 4096;
    base_from(fresh_cached_images(&cfg(), cache_cfg, cache_bytes).await).await
}

/// The starting state on the store of `img`.
async fn base_from(img: Images) -> (Images, Model) {
    let r = Rig::mount(&img, cfg()).await.unwrap();
    let mut t = Transaction::new();
    t.write("c", "A", 0, &pattern(7, OBJ_A_BYTES))
        .setattr("c", "A", "a0", b"base")
        .omap_set("c", "A", b"k0", b"base");
    r.store().queue_transaction(&t).await.unwrap();
    let m = model_apply(&Model::new(), &t).unwrap();
    r.store().sync().await.unwrap();
    let img = r
        .crash(PowerLossMode::DropUnflushed, KvLossMode::DropUnsynced)
        .await;
    (img, m)
}

/// The operation vocabulary of the exhaustive test, on object `x` (`y` is the other one).
fn op(kind: usize, x: &str, y: &str) -> Transaction {
    let mut t = Transaction::new();
    match kind {
        0 => t.write("c", x, 0, &pattern(1, 8192)),
        1 => t.write("c", x, 1000, &pattern(2, 100)),
        2 => t.write("c", x, OBJ_A_BYTES as u64, &pattern(3, 6000)),
        3 => t.truncate("c", x, 5000),
        4 => t.setattr("c", x, "a1", b"new"),
        5 => t.omap_set("c", x, b"k1", b"new"),
        6 => t.clone_object("c", x, y),
        _ => t.remove("c", x),
    };
    t
}

const OP_KINDS: usize = 8;

/// Runs `txns` on a store mounted from `img` with power cut before mutating operation `crash_at`
/// (relative to the end of mount; None = never). Returns (acknowledged count, whether a
/// transaction was in flight at the crash, the surviving images).
async fn run_with_crash(
    conf: &StoreConfig,
    img: &Images,
    txns: &[Transaction],
    crash_at: Option<u64>,
    modes: (PowerLossMode, KvLossMode),
) -> (usize, bool, Images, Vec<&'static str>) {
    let r = Rig::mount(img, conf.clone()).await.unwrap();
    let base_ops = r.switch.ops();
    if let Some(k) = crash_at {
        r.switch.arm(base_ops + k);
    } else {
        r.switch.enable_trace();
    }
    let mut acked = 0;
    let mut in_flight = false;
    for (i, t) in txns.iter().enumerate() {
        match r.store().queue_transaction(t).await {
            Ok(()) => acked += 1,
            Err(e) if e.is_fatal() => {
                assert!(r.switch.crashed(), "fatal error without a crash: {e}");
                in_flight = true;
                break;
            }
            Err(_) => acked += 1,
        }
        // A cache's cleaner writes dirty lines back between some of the transactions (every
        // line counts as stale), so power is also cut in the middle of a cleaning round.
        if let Some(cache) = r.cache.as_ref().filter(|_| i % 2 == 1) {
            if let Err(e) = cache.device.clean_step(u64::MAX / 4).await {
                assert!(r.switch.crashed(), "cleaning failed without a crash: {e}");
                break;
            }
        }
    }
    let trace = r.switch.trace();
    let img = r.crash(modes.0, modes.1).await;
    (acked, in_flight, img, trace)
}

/// Model states after 0, 1, ... transactions (rejected transactions leave the state alone).
fn model_states(start: &Model, txns: &[Transaction]) -> Vec<Model> {
    let mut states = vec![start.clone()];
    for t in txns {
        let next = model_apply(states.last().unwrap(), t)
            .unwrap_or_else(|| states.last().unwrap().clone());
        states.push(next);
    }
    states
}

/// Remounts the crash image and checks it against the allowed model states.
async fn verify(
    conf: &StoreConfig,
    img: &Images,
    states: &[Model],
    acked: usize,
    in_flight: bool,
    ctx: &str,
) {
    if img.cache.is_some() {
        cache_survived(img, ctx).await;
        detached_core_holds_what_the_cache_served(conf, img, ctx).await;
    }
    let r = Rig::mount(img, conf.clone())
        .await
        .unwrap_or_else(|e| panic!("{ctx}: remount failed: {e}"));
    let got = dump(r.store()).await;
    let ok = got == states[acked] || (in_flight && got == states[acked + 1]);
    assert!(
        ok,
        "{ctx}: state after crash matches neither {acked} nor {} transactions (it matches prefix {:?})\n got {got:?}\n want {:?}",
        acked + 1,
        states.iter().position(|s| *s == got),
        states[acked]
    );
    let rep = r.store().fsck(true).await.unwrap();
    assert!(rep.is_clean(), "{ctx}: fsck: {:?}", rep.errors);
    let mut t = Transaction::new();
    t.write("c", "after", 0, &pattern(9, 20_000))
        .write("c", "A", 3, b"zz");
    r.store()
        .queue_transaction(&t)
        .await
        .unwrap_or_else(|e| panic!("{ctx}: store unusable after crash: {e}"));
    assert_eq!(
        r.store().read("c", "after", 0, 20_000).await.unwrap(),
        pattern(9, 20_000)
    );
    let rep = r.store().fsck(true).await.unwrap();
    assert!(rep.is_clean(), "{ctx}: fsck after reuse: {:?}", rep.errors);
    let after = r
        .crash(PowerLossMode::DropUnflushed, KvLossMode::DropUnsynced)
        .await;
    if after.cache.is_some() {
        detached_core_holds_what_the_cache_served(conf, &after, &format!("{ctx}, reused")).await;
    }
}

/// Caches detached by [`detached_core_holds_what_the_cache_served`], and those among them that
/// held dirty lines the detach wrote back.
static DETACHES: AtomicU64 = AtomicU64::new(0);
/// See [`DETACHES`].
static DETACHES_WITH_DIRTY_LINES: AtomicU64 = AtomicU64::new(0);

/// The cache of `img` is consistent after the crash (its own fsck), and reattaches warm with
/// every line its metadata holds, clean and dirty.
async fn cache_survived(img: &Images, ctx: &str) {
    let Some(cache) = &img.cache else { return };
    let cache: Arc<dyn BlockDevice> = Arc::new(MemDevice::from_image(cache.clone(), 512).unwrap());
    let core: Arc<dyn BlockDevice> = Arc::new(MemDevice::from_image(img.dev.clone(), 512).unwrap());
    let report = cairn_cache::fsck(&cache, &core)
        .await
        .unwrap_or_else(|e| panic!("{ctx}: cache fsck failed: {e}"));
    assert!(
        report.is_clean(),
        "{ctx}: cache fsck: {:?}",
        report.problems
    );
    assert!(report.valid_lines > 0, "{ctx}: the cache came back cold");
    let attached = cairn_cache::CacheDevice::attach(cache, core)
        .await
        .unwrap_or_else(|e| panic!("{ctx}: the cache does not attach: {e}"));
    let stats = attached.stats();
    assert_eq!(
        (stats.occupancy_lines, stats.dirty_lines),
        (u64::from(report.valid_lines), u64::from(report.dirty_lines)),
        "{ctx}: the attached cache holds other lines than its metadata names"
    );
}

/// Mounts the store of `img` through its cache, unmounts it, detaches the cache (which writes
/// back every dirty line and flushes the data device), cuts power on the data device, then
/// mounts the store on it alone: it must hold what it held through the cache, and fsck clean.
async fn detached_core_holds_what_the_cache_served(conf: &StoreConfig, img: &Images, ctx: &str) {
    let r = Rig::mount(img, conf.clone()).await.unwrap();
    let through_cache = dump(r.store()).await;
    let Rig {
        store,
        cache,
        fault,
        mem,
        kv,
        ..
    } = r;
    store.unwrap().umount().await.unwrap();
    let cache = cache.expect("a cached rig");
    DETACHES.fetch_add(1, Ordering::Relaxed);
    if cache.device.stats().dirty_lines > 0 {
        DETACHES_WITH_DIRTY_LINES.fetch_add(1, Ordering::Relaxed);
    }
    cache.device.detach().await.unwrap();
    let detached = cairn_cache::fsck(
        &(cache.mem.clone() as Arc<dyn BlockDevice>),
        &(mem.clone() as Arc<dyn BlockDevice>),
    )
    .await
    .unwrap();
    assert!(
        detached.detached && detached.dirty_lines == 0,
        "{ctx}: after detach: {detached:?}"
    );
    fault
        .power_loss(PowerLossMode::DropUnflushed)
        .await
        .unwrap();
    let bare = Images {
        dev: mem.snapshot(),
        kv: kv.power_loss(KvLossMode::DropUnsynced),
        fast: None,
        cache: None,
    };
    let r = Rig::mount(&bare, conf.clone())
        .await
        .unwrap_or_else(|e| panic!("{ctx}: the data device alone does not mount: {e}"));
    assert!(
        dump(r.store()).await == through_cache,
        "{ctx}: the data device after detach differs from what the store read through the cache"
    );
    let rep = r.store().fsck(true).await.unwrap();
    assert!(
        rep.is_clean(),
        "{ctx}: fsck without the cache: {:?}",
        rep.errors
    );
}

/// Crash points of a traced run worth testing: with whole-write loss modes, a crash at a KV
/// write inside a commit leaves the same images as a crash at that commit's sync, so only device
/// writes, device flushes, KV syncs and the end are distinct; with random survivors every point is.
fn crash_points(trace: &[&'static str], random_survivors: bool) -> Vec<u64> {
    let mut v: Vec<u64> = (0..trace.len() as u64)
        .filter(|&k| random_survivors || trace[k as usize] != "kv-write")
        .collect();
    v.push(trace.len() as u64);
    v
}

/// Every sequence of up to two operations from the vocabulary, on objects A and B; `shard`
/// (index, count) keeps every count-th sequence for the fast default run.
async fn exhaustive(random_survivors: bool, shard: (usize, usize)) {
    let (img, start) = base().await;
    let mut sequences: Vec<Vec<Transaction>> = Vec::new();
    for a in 0..OP_KINDS * 2 {
        let t1 = if a < OP_KINDS {
            op(a, "A", "B")
        } else {
            op(a - OP_KINDS, "B", "A")
        };
        sequences.push(vec![t1.clone()]);
        for b in 0..OP_KINDS * 2 {
            let t2 = if b < OP_KINDS {
                op(b, "A", "B")
            } else {
                op(b - OP_KINDS, "B", "A")
            };
            sequences.push(vec![t1.clone(), t2]);
        }
    }
    let mut points = 0;
    let total_sequences = sequences.len();
    for (si, seq) in sequences
        .iter()
        .enumerate()
        .filter(|(i, _)| i % shard.1 == shard.0)
    {
        let states = model_states(&start, seq);
        let modes = (PowerLossMode::DropUnflushed, KvLossMode::DropUnsynced);
        let (_, _, _, trace) = run_with_crash(&cfg(), &img, seq, None, modes).await;
        let total = trace.len();
        for k in crash_points(&trace, random_survivors) {
            let modes = if random_survivors {
                let seed = si as u64 * 1000 + k;
                (
                    PowerLossMode::RandomSubset { seed },
                    KvLossMode::RandomSubset { seed: seed ^ 0xabc },
                )
            } else {
                modes
            };
            let (acked, in_flight, crashed, _) =
                run_with_crash(&cfg(), &img, seq, Some(k), modes).await;
            let ctx = format!(
                "sequence {si} {:?} crash at {k}/{total} {modes:?}",
                seq.iter().map(|t| &t.ops[0]).collect::<Vec<&Op>>()
            );
            verify(&cfg(), &crashed, &states, acked, in_flight, &ctx).await;
            points += 1;
        }
    }
    println!("{total_sequences} sequences (shard {shard:?}), {points} crash points checked");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_op_sequences_survive_a_crash_at_every_point() {
    exhaustive(false, (0, 12)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_op_sequences_survive_torn_random_subsets() {
    exhaustive(true, (3, 48)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "all 272 sequences at every crash point, both loss models; run with --ignored"]
async fn all_two_op_sequences_every_point_every_loss_model() {
    exhaustive(false, (0, 1)).await;
    exhaustive(true, (0, 1)).await;
}

/// A random transaction; with `aligned`, half of its large writes are block-aligned (so that
/// they go early when the store writes such writes early).
fn random_txn(rng: &mut ChaCha8Rng, aligned: bool) -> Transaction {
    let names = ["A", "B", "C"];
    let mut t = Transaction::new();
    for _ in 0..rng.random_range(1..=3) {
        let x = names[rng.random_range(0..names.len())];
        let y = names[rng.random_range(0..names.len())];
        let off = rng.random_range(0..40_000u64);
        match rng.random_range(0..10) {
            0 | 1 if aligned && rng.random_bool(0.5) => {
                let off = rng.random_range(0..10u64) * 4096;
                let len = rng.random_range(4..9usize) * 4096;
                t.write("c", x, off, &pattern(rng.random(), len));
            }
            0 | 1 => {
                let len = if rng.random_bool(0.5) {
                    rng.random_range(1..600)
                } else {
                    rng.random_range(4096..30_000)
                };
                t.write("c", x, off, &pattern(rng.random(), len));
            }
            2 => {
                t.zero("c", x, off, rng.random_range(1..10_000));
            }
            3 => {
                t.truncate("c", x, rng.random_range(0..40_000));
            }
            4 => {
                t.remove("c", x);
            }
            5 => {
                t.clone_object("c", x, y);
            }
            6 => {
                t.rename("c", x, y);
            }
            7 => {
                t.setattr(
                    "c",
                    x,
                    &format!("a{}", rng.random_range(0..3)),
                    &pattern(rng.random(), 10),
                );
            }
            8 => {
                t.omap_set(
                    "c",
                    x,
                    &[rng.random_range(0..4u8)],
                    &pattern(rng.random(), 5),
                );
            }
            _ => {
                t.omap_remove("c", x, &[rng.random_range(0..4u8)]);
            }
        }
    }
    t
}

/// `cases` random workloads (seeds from `seed0`) on stores mounted with `conf`, each with a power
/// cut at a random one of its first `ops_per_txn` counted operations per transaction.
async fn random_workloads(conf: &StoreConfig, cases: u64, seed0: u64, ops_per_txn: u64) {
    random_workloads_on(base().await, conf, cases, seed0, ops_per_txn).await;
}

/// As [`random_workloads`], from the store `base` gives.
async fn random_workloads_on(
    base: (Images, Model),
    conf: &StoreConfig,
    cases: u64,
    seed0: u64,
    ops_per_txn: u64,
) {
    // Aligned writes only where they would go early: the other workloads stay as they were.
    let aligned = *conf == early_writes();
    let (img, start) = base;
    let mut crashed_mid = 0;
    // CAIRN_CRASH_FIRST skips to one case (to rerun a failure).
    let first = std::env::var("CAIRN_CRASH_FIRST")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    for case in first..cases {
        let mut rng = ChaCha8Rng::seed_from_u64(seed0 + case);
        let txns: Vec<Transaction> = (0..rng.random_range(1..=6))
            .map(|_| random_txn(&mut rng, aligned))
            .collect();
        let states = model_states(&start, &txns);
        // A logged group is about three counted operations: its data write(s), its log record
        // and one flush (the KV is written only at checkpoints).
        let crash_at = rng.random_range(0..ops_per_txn * txns.len() as u64);
        let modes = match rng.random_range(0..3) {
            0 => (PowerLossMode::DropUnflushed, KvLossMode::DropUnsynced),
            1 => (
                PowerLossMode::RandomSubset { seed: case },
                KvLossMode::DropUnsynced,
            ),
            _ => (
                PowerLossMode::RandomSubset { seed: case },
                KvLossMode::RandomSubset { seed: !case },
            ),
        };
        let (acked, in_flight, crashed, _) =
            run_with_crash(conf, &img, &txns, Some(crash_at), modes).await;
        crashed_mid += in_flight as u64;
        verify(
            conf,
            &crashed,
            &states,
            acked,
            in_flight,
            &format!("case {case} crash at {crash_at} {modes:?}: {txns:?}"),
        )
        .await;
    }
    println!("{cases} random workloads, {crashed_mid} crashed mid-transaction");
    assert!(
        crashed_mid >= (cases - first) / 3,
        "crash points should often hit a transaction"
    );
}

/// Runs `futs` concurrently in this task, polling them in order, and returns their outputs.
async fn join_in_order<F: std::future::Future>(futs: Vec<F>) -> Vec<F::Output> {
    let mut futs: Vec<_> = futs.into_iter().map(Box::pin).collect();
    let mut out: Vec<Option<F::Output>> = futs.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        for (f, o) in futs.iter_mut().zip(out.iter_mut()) {
            if o.is_none() {
                if let std::task::Poll::Ready(v) = f.as_mut().poll(cx) {
                    *o = Some(v);
                }
            }
        }
        if out.iter().all(Option::is_some) {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await;
    out.into_iter()
        .map(|o| o.expect("every future finished"))
        .collect()
}

/// Random workloads whose transactions are all submitted at once, so that a group starts while
/// the previous one is still writing (two in flight), the ones queued meanwhile commit together
/// as the next group (and a rejected member is dropped from its group), with power cut at a
/// random operation. Groups commit in submission order, so after
/// remount the store must hold the state after some prefix of the transactions that includes
/// every acknowledged one.
async fn concurrent_groups(groups_in_flight: usize, checkpoint_records: u64, seed0: u64) {
    let conf = StoreConfig {
        max_groups_in_flight: groups_in_flight,
        pipeline_min_cow_bytes: 0,
        wal_checkpoint_records: checkpoint_records,
        ..cfg()
    };
    concurrent_groups_with(conf, seed0).await;
}

/// [`concurrent_groups`] on a store mounted with `conf`.
async fn concurrent_groups_with(conf: StoreConfig, seed0: u64) {
    let (groups_in_flight, aligned) = (conf.max_groups_in_flight, conf == early_writes());
    let (img, start) = base().await;
    let cases = cases_from_env(400);
    let (mut crashed_mid, mut grouped, mut overlapped, mut early) = (0u64, 0u64, 0u64, 0u64);
    for case in 0..cases {
        let mut rng = ChaCha8Rng::seed_from_u64(seed0 + case);
        let txns: Vec<Transaction> = (0..rng.random_range(2..=6))
            .map(|_| random_txn(&mut rng, aligned))
            .collect();
        let states = model_states(&start, &txns);
        let crash_at = rng.random_range(0..3 * txns.len() as u64);
        let modes = match rng.random_range(0..2) {
            0 => (PowerLossMode::DropUnflushed, KvLossMode::DropUnsynced),
            _ => (
                PowerLossMode::RandomSubset { seed: case },
                KvLossMode::RandomSubset { seed: !case },
            ),
        };
        let r = Rig::mount(&img, conf.clone()).await.unwrap();
        r.switch.arm(r.switch.ops() + crash_at);
        let store = r.store();
        let before = store.stats().await;
        let results =
            join_in_order(txns.iter().map(|t| store.queue_transaction(t)).collect()).await;
        let after = store.stats().await;
        grouped +=
            u64::from(after.commits - before.commits > after.group_commits - before.group_commits);
        overlapped += u64::from(after.groups_overlapped > before.groups_overlapped);
        early += u64::from(after.early_write_bytes > before.early_write_bytes);
        let mut must_hold = 0;
        for (i, res) in results.iter().enumerate() {
            match res {
                Ok(()) => must_hold = i + 1,
                Err(e) if e.is_fatal() => {
                    assert!(r.switch.crashed(), "fatal error without a crash: {e}")
                }
                // A rejection changes nothing; it may have been decided on the state of an
                // earlier transaction that the crash then lost.
                Err(_) => {}
            }
        }
        crashed_mid += u64::from(
            results
                .iter()
                .any(|r| r.as_ref().is_err_and(|e| e.is_fatal())),
        );
        let crashed = r.crash(modes.0, modes.1).await;
        let outcome: Vec<String> = results
            .iter()
            .map(|r| match r {
                Ok(()) => "ok".to_string(),
                Err(e) => format!("err({e})"),
            })
            .collect();
        let ctx = format!("case {case} crash at {crash_at} {modes:?}, results {outcome:?}");
        let r = Rig::mount(&crashed, conf.clone())
            .await
            .unwrap_or_else(|e| panic!("{ctx}: remount failed: {e}"));
        let got = dump(r.store()).await;
        assert!(
            (must_hold..states.len()).any(|k| got == states[k]),
            "{ctx}: state after crash is no prefix holding the {must_hold} acknowledged transactions (it matches prefix {:?})",
            states.iter().position(|s| *s == got)
        );
        let rep = r.store().fsck(true).await.unwrap();
        assert!(rep.is_clean(), "{ctx}: fsck: {:?}", rep.errors);
        r.crash(PowerLossMode::DropUnflushed, KvLossMode::DropUnsynced)
            .await;
    }
    println!("{cases} concurrent workloads, {crashed_mid} crashed mid-way, {grouped} with groups of several, {overlapped} with two groups in flight, {early} with early writes");
    assert!(
        !aligned || early >= cases / 4,
        "aligned large writes should often go early"
    );
    if groups_in_flight == 1 {
        assert!(
            grouped >= cases / 4,
            "transactions submitted together should share groups"
        );
        assert_eq!(overlapped, 0, "one group in flight at a time");
    } else {
        // Groups are smaller when the next one starts without waiting for the previous
        // flush (and smaller still when every group checkpoints), but some still share one.
        assert!(
            grouped >= cases / 40,
            "transactions submitted together should share groups"
        );
        assert!(
            overlapped >= cases / 4,
            "a group should often start while the previous one is in flight"
        );
    }
    assert!(
        crashed_mid >= cases / 3,
        "crash points should often hit a transaction"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_groups_survive_random_crash_points() {
    concurrent_groups(1, cfg().wal_checkpoint_records, 2_000_000).await;
}

/// As above with two groups in flight: a group staged over the changes of one whose writes
/// have not completed, a crash between them (mount must drop a record whose data did not land
/// and every record after it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_groups_survive_random_crash_points() {
    concurrent_groups(2, cfg().wal_checkpoint_records, 3_000_000).await;
}

/// As above with a background checkpoint after every group: checkpoints freeze the overlay
/// while a group is in flight, so their marker must stay before its record and its ring space
/// must stay counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_groups_with_background_checkpoints_survive_random_crash_points() {
    concurrent_groups(2, 1, 4_000_000).await;
}

/// Writes of 16 KiB and more written early (before their groups form), so that power is cut
/// while early writes, records and flushes of several groups interleave: an early write not
/// yet flushed must never be referenced by a surviving record, and order must hold.
fn early_writes() -> StoreConfig {
    StoreConfig {
        early_write_min_bytes: 16 << 10,
        max_groups_in_flight: 2,
        pipeline_min_cow_bytes: 0,
        ..cfg()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_groups_with_early_writes_survive_random_crash_points() {
    concurrent_groups_with(early_writes(), 5_000_000).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_workloads_with_early_writes_survive_random_crash_points() {
    random_workloads(&early_writes(), cases_from_env(60), 700_000, 4).await;
}

fn cases_from_env(default: u64) -> u64 {
    std::env::var("CAIRN_CRASH_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_workloads_with_random_crash_points() {
    random_workloads(&cfg(), cases_from_env(60), 0, 3).await;
}

/// The superblock and log on a fast device, the data on another (`SplitDevice`, BlueStore's
/// WAL device): power is cut on both at once, at random points of random workloads, with
/// random survivors on each; what was acknowledged survives and the store stays usable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_workloads_on_a_split_device_survive_random_crash_points() {
    let split = base_on(true).await;
    let fast = split.0.fast.as_ref().expect("a split store");
    assert!(
        fast.iter().any(|&b| b != 0),
        "superblock and log on the fast device"
    );
    assert!(
        split.0.dev[..fast.len()].iter().all(|&b| b == 0),
        "nothing below the split on the data device"
    );
    random_workloads_on(split, &cfg(), cases_from_env(60), 2_000_000, 3).await;
}

/// The store on an SSD cache in front of its data device, as an OSD on a cached HDD runs it:
/// power is cut on the cache, the data device and the KV at once, at random points of random
/// workloads, with random survivors on each. The cache is far smaller than what the store
/// writes, so crashes land in evictions that write dirty lines back to the data device too.
/// After the cache reattaches, every acknowledged transaction is there, the cache and the store
/// both fsck clean, the cache is warm, and once detached it leaves on the data device exactly
/// what the store read through it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_workloads_on_a_cached_device_survive_random_crash_points() {
    let base = base_cached().await;
    let r = Rig::mount(&base.0, cfg()).await.unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(3_000_000);
    for _ in 0..30 {
        let _ = r
            .store()
            .queue_transaction(&random_txn(&mut rng, false))
            .await;
    }
    let stats = r.cache.as_ref().expect("a cached rig").device.stats();
    assert!(
        stats.evictions > 0 && stats.victims_cleaned_ahead + stats.victims_cleaned_blocking > 0,
        "the workloads must evict dirty lines, writing them back: {stats:?}"
    );
    random_workloads_on(base, &cfg(), cases_from_env(60), 3_000_000, 8).await;
    let (crashes, after_write_back) = (
        CACHED_CRASHES.load(Ordering::Relaxed),
        CACHED_CRASHES_AFTER_WRITE_BACK.load(Ordering::Relaxed),
    );
    let (detaches, with_dirty) = (
        DETACHES.load(Ordering::Relaxed),
        DETACHES_WITH_DIRTY_LINES.load(Ordering::Relaxed),
    );
    println!(
        "{crashes} power cuts mid-workload, {after_write_back} after a write-back; \
         {detaches} detaches, {with_dirty} with dirty lines"
    );
    assert!(
        after_write_back >= crashes / 3,
        "power must often be cut once the cache has written lines back"
    );
    assert!(
        with_dirty >= detaches / 2,
        "a detach must usually have dirty lines to write back"
    );
}

/// A checkpoint after every logged group: each one commits the KV on a background thread while
/// the next groups write their data and records, so power is cut in every interleaving of a
/// checkpoint's KV writes and sync with later groups' device writes and flushes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_workloads_with_background_checkpoints() {
    let every_group = StoreConfig {
        wal_checkpoint_records: 1,
        ..cfg()
    };
    random_workloads(&every_group, cases_from_env(60), 500_000, 5).await;
    // As on an OSD with a cache: the checkpoint's in-place writes several at a time.
    let deep = StoreConfig {
        checkpoint_io_depth: 8,
        ..every_group
    };
    random_workloads(&deep, cases_from_env(30), 600_000, 5).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "long sweep: 20000 workloads; run with --ignored"]
async fn random_workloads_sweep() {
    random_workloads(&cfg(), cases_from_env(20_000), 1_000_000, 3).await;
}
