//! Pipelined group commits (`max_groups_in_flight = 2`): a group stages over the changes of a
//! group whose flush has not completed, is acknowledged only after it, writes its record only
//! after that flush, and readers see neither until both are durable.

use crate::common;

use cairn_store::{Store, StoreConfig, Transaction};
use common::gated::{eventually, power_cut, rig_with, spawn_txn, GatedDevice};
use common::*;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// Two groups in flight behind any group, however small its copy-on-write data; small
/// overwrites deferred (the tests build groups of deferred writes).
fn pipelined() -> StoreConfig {
    StoreConfig {
        max_groups_in_flight: 2,
        pipeline_min_cow_bytes: 0,
        deferred_overwrite_max_bytes: StoreConfig::default().deferred_max_bytes,
        ..cfg()
    }
}

/// A store with object "A" (8 KiB, two blocks) and "B" (4 KiB) durable, on a gated device.
async fn rig() -> (Arc<Store>, Arc<GatedDevice>, cairn_store::CrashableKv) {
    rig_with(pipelined()).await
}

/// Waits until a group has started while another was in flight.
async fn wait_overlapped(s: &Store) {
    eventually("a second group is in flight", || async {
        s.stats().await.groups_overlapped > 0
    })
    .await;
}

/// Polls `fut` once (so that it queues its transaction and goes as far as it can).
async fn poll_once<F: std::future::Future + Unpin>(fut: &mut F) {
    std::future::poll_fn(|cx| {
        assert!(
            Pin::new(&mut *fut).poll(cx).is_pending(),
            "finished at once"
        );
        std::task::Poll::Ready(())
    })
    .await;
}

fn patched(mut base: Vec<u8>, at: usize, patch: &[u8]) -> Vec<u8> {
    base[at..at + patch.len()].copy_from_slice(patch);
    base
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_stages_over_the_one_in_flight_and_is_acknowledged_after_it() {
    let (s, dev, _kv) = rig().await;
    let flushes = dev.flushes_entered.load(Ordering::SeqCst);
    dev.close_gate();
    // First group: a deferred overwrite of B's block and a new copy-on-write object N. Its
    // flush waits at the gate.
    let mut t1 = Transaction::new();
    t1.write("c", "B", 0, &pattern(3, 4096))
        .write("c", "N", 0, &pattern(4, 65536))
        .setattr("c", "A", "v", b"1");
    let first = spawn_txn(&s, t1);
    dev.wait_flushes(flushes + 1).await;
    // Second group, staged over the first: patches B's new contents (read from the first
    // group's deferred write in memory), overwrites A's attribute, removes A's second block.
    let mut t2 = Transaction::new();
    t2.write("c", "B", 100, b"second")
        .setattr("c", "A", "v", b"2")
        .truncate("c", "A", 4096);
    let second = spawn_txn(&s, t2);
    // It is staged and in flight, its record waiting for the first group's flush.
    wait_overlapped(&s).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!first.is_finished() && !second.is_finished());
    // Readers are not blocked by the groups in flight and see neither of them.
    let read = tokio::time::timeout(Duration::from_secs(5), s.read("c", "B", 0, 4096))
        .await
        .expect("a read does not wait for groups in flight");
    assert_eq!(read.unwrap(), pattern(2, 4096));
    assert!(!s.exists("c", "N").await.unwrap());
    assert_eq!(s.stat("c", "A").await.unwrap().size_bytes, 8192);
    dev.open_gate();
    first.await.unwrap().unwrap();
    second.await.unwrap().unwrap();
    let st = s.stats().await;
    assert_eq!(
        st.groups_overlapped, 1,
        "the second group started in flight"
    );
    assert_eq!(
        s.read("c", "B", 0, 4096).await.unwrap(),
        patched(pattern(3, 4096), 100, b"second")
    );
    assert_eq!(s.read("c", "N", 0, 65536).await.unwrap(), pattern(4, 65536));
    assert_eq!(s.getattr("c", "A", "v").await.unwrap(), b"2".to_vec());
    assert_eq!(s.read("c", "A", 0, 8192).await.unwrap(), pattern(1, 4096));
    assert!(s.fsck(true).await.unwrap().is_clean());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_block_written_by_the_group_in_flight_is_read_once_it_is_written() {
    let (s, dev, _kv) = rig().await;
    dev.gate_data_write.store(true, Ordering::SeqCst);
    let mut t1 = Transaction::new();
    t1.write("c", "N", 0, &pattern(5, 65536));
    let first = spawn_txn(&s, t1);
    tokio::time::sleep(Duration::from_millis(20)).await;
    // A partial overwrite of N's first block must read that block, whose write waits at the
    // gate: the second group's staging waits for the first group's writes.
    let mut t2 = Transaction::new();
    t2.write("c", "N", 10, b"patch");
    let second = spawn_txn(&s, t2);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!second.is_finished());
    dev.open_gate();
    first.await.unwrap().unwrap();
    second.await.unwrap().unwrap();
    assert_eq!(
        s.read("c", "N", 0, 65536).await.unwrap(),
        patched(pattern(5, 65536), 10, b"patch")
    );
    assert!(s.fsck(true).await.unwrap().is_clean());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_block_deferred_in_flight_and_freed_by_the_next_group_stays_freed() {
    let (s, dev, kv) = rig().await;
    let before = s.stats().await;
    let flushes = dev.flushes_entered.load(Ordering::SeqCst);
    dev.close_gate();
    let mut t1 = Transaction::new();
    t1.write("c", "B", 0, &pattern(6, 4096));
    let first = spawn_txn(&s, t1);
    dev.wait_flushes(flushes + 1).await;
    let mut t2 = Transaction::new();
    t2.remove("c", "B");
    let second = spawn_txn(&s, t2);
    wait_overlapped(&s).await;
    dev.open_gate();
    first.await.unwrap().unwrap();
    second.await.unwrap().unwrap();
    let st = s.stats().await;
    assert_eq!(
        st.deferred_pending_bytes, 0,
        "B's pending write went with B"
    );
    assert_eq!(st.free_bytes, before.free_bytes + 4096);
    assert!(!s.exists("c", "B").await.unwrap());
    // Everything is in the log, nothing checkpointed: a remount replays both groups.
    let img = power_cut(&dev, &kv);
    drop(s);
    let r = Rig::mount(&img, pipelined()).await.unwrap();
    assert!(!r.store().exists("c", "B").await.unwrap());
    assert_eq!(r.store().stats().await.free_bytes, st.free_bytes);
    assert!(r.store().fsck(true).await.unwrap().is_clean());
}

/// Power is cut while two groups are in flight: the first group's record reached the device
/// but its data did not, and its flush never returned. The second group (record only) must not
/// write its record before the first group's flush: mount then finds the first record as the
/// last one and drops it (checking only the last record is enough).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_waits_for_the_previous_flush_so_only_the_last_can_lack_its_data() {
    let (s, dev, kv) = rig().await;
    let flushes = dev.flushes_entered.load(Ordering::SeqCst);
    dev.close_gate();
    dev.drop_data.store(true, Ordering::SeqCst);
    let mut t1 = Transaction::new();
    t1.write("c", "N", 0, &pattern(7, 65536));
    let first = spawn_txn(&s, t1);
    dev.wait_flushes(flushes + 1).await;
    let mut t2 = Transaction::new();
    t2.setattr("c", "N", "after", b"yes")
        .write("c", "B", 0, &pattern(8, 4096));
    let second = spawn_txn(&s, t2);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        dev.flushes_entered.load(Ordering::SeqCst),
        flushes + 1,
        "the second group's durable record write waits for the first flush"
    );
    let img = power_cut(&dev, &kv);
    first.abort();
    second.abort();
    let r = Rig::mount(&img, pipelined()).await.unwrap();
    let st = r.store().stats().await;
    assert_eq!(st.wal_discarded, 1, "the first record, data missing");
    assert_eq!(st.wal_replayed, 0);
    assert!(!r.store().exists("c", "N").await.unwrap());
    assert_eq!(
        r.store().read("c", "B", 0, 4096).await.unwrap(),
        pattern(2, 4096)
    );
    assert!(r.store().fsck(true).await.unwrap().is_clean());
    dev.open_gate();
}

/// The submitter that launched a group is cancelled while the group's writes are in flight:
/// their outcome is unknown. Another submitter whose transaction is in that group, and who
/// already found the queue empty (so it only waits for its answer), is woken, fails the group
/// instead of waiting forever, and the store fails; a remount finds the group's objects whole
/// or absent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_launcher_fails_its_group_instead_of_stranding_it() {
    let (s, dev, kv) = rig().await;
    let flushes = dev.flushes_entered.load(Ordering::SeqCst);
    // Group 0 (record only) holds its flush at the gate; group X, record only, is in flight
    // behind it.
    dev.close_gate();
    let mut t0 = Transaction::new();
    t0.setattr("c", "A", "g", b"0");
    let zero = spawn_txn(&s, t0);
    dev.wait_flushes(flushes + 1).await;
    let mut tx = Transaction::new();
    tx.setattr("c", "A", "g", b"x");
    let x = spawn_txn(&s, tx);
    wait_overlapped(&s).await;
    // Two copy-on-write writes queue behind them and will form one group: `one` becomes the
    // committers' leader (waiting for room in the pipeline), `two` queues behind it.
    let mut t1 = Transaction::new();
    t1.write("c", "N", 0, &pattern(10, 65536));
    let s1 = s.clone();
    let mut one = Box::pin(async move { s1.queue_transaction_owned(t1).await });
    poll_once(&mut one).await;
    let mut t2 = Transaction::new();
    t2.write("c", "M", 0, &pattern(11, 65536));
    let s2 = s.clone();
    let mut two = Box::pin(async move { s2.queue_transaction_owned(t2).await });
    poll_once(&mut two).await;
    let (one, two) = (tokio::spawn(one), tokio::spawn(two));
    // Let groups 0 and X through; the next group's data write waits at the gate.
    let held = dev.held.load(Ordering::SeqCst);
    dev.gate_data_write.store(true, Ordering::SeqCst);
    dev.open_gate();
    zero.await.unwrap().unwrap();
    x.await.unwrap().unwrap();
    eventually("the group's data write reaches the gate", || async {
        dev.held.load(Ordering::SeqCst) > held
    })
    .await;
    assert!(!one.is_finished() && !two.is_finished());
    one.abort();
    assert!(one.await.unwrap_err().is_cancelled());
    let answer = tokio::time::timeout(Duration::from_secs(10), two)
        .await
        .expect("the other submitter is answered")
        .unwrap();
    assert!(answer.is_err(), "{answer:?}");
    assert!(s.failure().is_some(), "the store failed");
    let img = power_cut(&dev, &kv);
    drop(s);
    let r = Rig::mount(&img, pipelined()).await.unwrap();
    assert_eq!(
        r.store().getattr("c", "A", "g").await.unwrap(),
        b"x".to_vec()
    );
    for (name, seed) in [("N", 10), ("M", 11)] {
        if r.store().exists("c", name).await.unwrap() {
            assert_eq!(
                r.store().read("c", name, 0, 65536).await.unwrap(),
                pattern(seed, 65536)
            );
        }
    }
    assert!(r.store().fsck(true).await.unwrap().is_clean());
}

/// With the default threshold, a second group is launched only behind a group that writes
/// enough copy-on-write data: behind a group of small (deferred) writes the next group waits
/// for its flush; behind a large copy-on-write write it stages and goes in flight at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_group_with_large_copy_on_write_data_has_a_second_group_launched_behind_it() {
    let conf = StoreConfig {
        pipeline_min_cow_bytes: 64 * 1024,
        ..cfg()
    };
    assert_eq!(conf.max_groups_in_flight, 2, "pipelining is the default");
    let (s, dev, _kv) = rig_with(conf).await;
    let small_then_next = |first: Transaction| {
        let s = s.clone();
        let dev = dev.clone();
        async move {
            let flushes = dev.flushes_entered.load(Ordering::SeqCst);
            let groups = s.stats().await.group_commits;
            dev.close_gate();
            let first = spawn_txn(&s, first);
            dev.wait_flushes(flushes + 1).await;
            let mut t2 = Transaction::new();
            t2.setattr("c", "A", "next", b"x");
            let second = spawn_txn(&s, t2);
            tokio::time::sleep(Duration::from_millis(100)).await;
            let overlapped = s.stats().await.groups_overlapped;
            dev.open_gate();
            first.await.unwrap().unwrap();
            second.await.unwrap().unwrap();
            assert_eq!(s.stats().await.group_commits, groups + 2);
            overlapped
        }
    };
    // 4 KiB over B: a deferred write, no copy-on-write data.
    let mut small = Transaction::new();
    small.write("c", "B", 0, &pattern(6, 4096));
    assert_eq!(
        small_then_next(small).await,
        0,
        "no second group behind small writes"
    );
    // 32 KiB copy-on-write: under the threshold.
    let mut under = Transaction::new();
    under.write("c", "U", 0, &pattern(7, 32 * 1024));
    assert_eq!(
        small_then_next(under).await,
        0,
        "none behind 32 KiB of new data"
    );
    // 64 KiB copy-on-write: at the threshold.
    let mut large = Transaction::new();
    large.write("c", "L", 0, &pattern(8, 64 * 1024));
    assert_eq!(
        small_then_next(large).await,
        1,
        "a second group behind 64 KiB"
    );
    assert_eq!(s.read("c", "L", 0, 65536).await.unwrap(), pattern(8, 65536));
    assert_eq!(s.getattr("c", "A", "next").await.unwrap(), b"x".to_vec());
    assert!(s.fsck(true).await.unwrap().is_clean());
}
