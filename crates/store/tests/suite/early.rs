//! Early writes: a large block-aligned write's data is written by its submitter before its
//! group forms; the group only logs and flushes. Transactions still commit in submission
//! order, a member that fails gives its early blocks back, and a submitter dropped mid-write
//! leaves nothing applied and nothing stranded.

use crate::common;

use cairn_store::{DataCrcs, StoreConfig, StoreError, Transaction};
use common::gated::{eventually, power_cut, rig_with, spawn_txn};
use common::*;
use std::sync::atomic::Ordering;
use std::time::Duration;

const BIG: usize = 256 << 10;

/// Writes of 64 KiB and more go early.
fn early() -> StoreConfig {
    StoreConfig {
        early_write_min_bytes: 64 << 10,
        ..cfg()
    }
}

fn aligned(data: &[u8]) -> bytes::Bytes {
    cairn_blockdev::AlignedBuf::from_parts(&[data], 4096)
        .map(bytes::Bytes::from_owner)
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_large_writes_go_early_and_read_back_intact() {
    let (s, _dev, _kv) = rig_with(early()).await;
    let before = s.stats().await;
    // Copied (unaligned caller bytes), shared (aligned) and shared with the caller's checksums.
    let datas: Vec<Vec<u8>> = (0..3).map(|i| pattern(10 + i, BIG)).collect();
    let mut txns = Vec::new();
    let mut t = Transaction::new();
    t.write("c", "x0", 0, &datas[0]);
    txns.push(t);
    let mut t = Transaction::new();
    t.write_bytes("c", "x1", 4096, aligned(&datas[1]));
    txns.push(t);
    let crcs: Vec<u32> = datas[2].chunks(4096).map(crc_fast::crc32_iscsi).collect();
    let mut t = Transaction::new();
    t.write_checksummed(
        "c",
        "x2",
        0,
        aligned(&datas[2]),
        DataCrcs {
            block_bytes: 4096,
            crcs: crcs.into(),
        },
    );
    txns.push(t);
    let handles: Vec<_> = txns.into_iter().map(|t| spawn_txn(&s, t)).collect();
    for h in handles {
        h.await.unwrap().unwrap();
    }
    let after = s.stats().await;
    assert_eq!(
        after.early_write_bytes - before.early_write_bytes,
        3 * BIG as u64
    );
    assert_eq!(
        after.allocated_bytes - before.allocated_bytes,
        3 * BIG as u64
    );
    assert_eq!(s.read("c", "x0", 0, BIG as u64).await.unwrap(), datas[0]);
    let x1 = s.read("c", "x1", 0, 4096 + BIG as u64).await.unwrap();
    assert_eq!(
        &x1[..4096],
        &[0u8; 4096][..],
        "the hole before it reads as zeros"
    );
    assert_eq!(
        crc_fast::crc32_iscsi(&x1[4096..]),
        crc_fast::crc32_iscsi(&datas[1])
    );
    assert_eq!(s.read("c", "x2", 0, BIG as u64).await.unwrap(), datas[2]);
    // Overwritten early: the old blocks are freed at the commit.
    let mut t = Transaction::new();
    t.write("c", "x0", 0, &datas[1]);
    s.queue_transaction(&t).await.unwrap();
    assert_eq!(s.stats().await.allocated_bytes, after.allocated_bytes);
    assert_eq!(s.read("c", "x0", 0, BIG as u64).await.unwrap(), datas[1]);
    let rep = s.fsck(true).await.unwrap();
    assert!(rep.is_clean(), "{:?}", rep.errors);
}

/// An early write patched, partly zeroed and overwritten by later operations of its own
/// group: the caller's bytes are never modified, the patches land (as deferred writes), and
/// the blocks freed within the group return.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_early_write_changed_again_in_its_own_group_reads_as_the_last_change() {
    let (s, _dev, _kv) = rig_with(early()).await;
    let data = pattern(20, BIG);
    let shared = aligned(&data);
    let mut t = Transaction::new();
    t.write_bytes("c", "z", 0, shared.clone())
        .write("c", "z", 5000, &pattern(21, 100))
        .zero("c", "z", 16384, 8192)
        .write_bytes("c", "z", 65536, aligned(&pattern(22, 65536)));
    s.queue_transaction(&t).await.unwrap();
    assert_eq!(&shared[..], &data[..], "the caller's bytes are untouched");
    let mut want = data.clone();
    want[5000..5100].copy_from_slice(&pattern(21, 100));
    want[16384..24576].fill(0);
    want[65536..131072].copy_from_slice(&pattern(22, 65536));
    assert_eq!(s.read("c", "z", 0, BIG as u64).await.unwrap(), want);
    s.sync().await.unwrap();
    assert_eq!(s.read("c", "z", 0, BIG as u64).await.unwrap(), want);
    let rep = s.fsck(true).await.unwrap();
    assert!(rep.is_clean(), "{:?}", rep.errors);
}

/// A transaction queued after one whose early write is held back does not commit before it:
/// readers see neither until both are durable, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_queued_behind_an_early_write_waits_for_it() {
    let (s, dev, _kv) = rig_with(early()).await;
    let held = dev.held.load(Ordering::SeqCst);
    dev.gate_data_write.store(true, Ordering::SeqCst);
    let mut t1 = Transaction::new();
    t1.write("c", "E", 0, &pattern(30, BIG))
        .setattr("c", "A", "v", b"1");
    let first = spawn_txn(&s, t1);
    eventually("the early write reaches the gate", || async {
        dev.held.load(Ordering::SeqCst) > held
    })
    .await;
    let mut t2 = Transaction::new();
    t2.setattr("c", "A", "v", b"2");
    let second = spawn_txn(&s, t2);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!first.is_finished() && !second.is_finished());
    assert!(!s.exists("c", "E").await.unwrap());
    assert!(
        s.getattr("c", "A", "v").await.is_err(),
        "nothing committed yet"
    );
    dev.open_gate();
    first.await.unwrap().unwrap();
    second.await.unwrap().unwrap();
    assert_eq!(s.getattr("c", "A", "v").await.unwrap(), b"2".to_vec());
    assert_eq!(
        s.read("c", "E", 0, BIG as u64).await.unwrap(),
        pattern(30, BIG)
    );
    let rep = s.fsck(true).await.unwrap();
    assert!(rep.is_clean(), "{:?}", rep.errors);
}

/// A member of a group that fails gives back the blocks its early write took; the others
/// commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_transaction_gives_its_early_blocks_back() {
    let (s, _dev, _kv) = rig_with(early()).await;
    let before = s.stats().await;
    let mut bad = Transaction::new();
    bad.write("c", "X", 0, &pattern(40, BIG))
        .remove("c", "no-such-object");
    let mut good = Transaction::new();
    good.write("c", "Y", 0, &pattern(41, BIG));
    let (bad, good) = tokio::join!(s.queue_transaction(&bad), s.queue_transaction(&good));
    assert!(
        matches!(bad, Err(StoreError::NoSuchObject { .. })),
        "{bad:?}"
    );
    good.unwrap();
    let after = s.stats().await;
    assert_eq!(
        after.early_write_bytes - before.early_write_bytes,
        2 * BIG as u64
    );
    assert_eq!(after.allocated_bytes - before.allocated_bytes, BIG as u64);
    assert!(!s.exists("c", "X").await.unwrap());
    assert_eq!(
        s.read("c", "Y", 0, BIG as u64).await.unwrap(),
        pattern(41, BIG)
    );
    let rep = s.fsck(true).await.unwrap();
    assert!(rep.is_clean(), "{:?}", rep.errors);
}

/// A submitter dropped while its early write is in flight: its transaction is not applied,
/// the ones queued behind it commit, and its blocks stay out of use until the next mount
/// (its write may still land), where they are free again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submitter_dropped_mid_early_write_applies_nothing_and_strands_no_one() {
    let (s, dev, kv) = rig_with(early()).await;
    let free_before = s.stats().await.free_bytes;
    let held = dev.held.load(Ordering::SeqCst);
    dev.gate_data_write.store(true, Ordering::SeqCst);
    let mut t1 = Transaction::new();
    t1.write("c", "E", 0, &pattern(50, BIG))
        .setattr("c", "A", "v", b"dropped");
    let first = spawn_txn(&s, t1);
    eventually("the early write reaches the gate", || async {
        dev.held.load(Ordering::SeqCst) > held
    })
    .await;
    let mut t2 = Transaction::new();
    t2.setattr("c", "A", "w", b"after");
    let second = spawn_txn(&s, t2);
    first.abort();
    assert!(first.await.unwrap_err().is_cancelled());
    tokio::time::timeout(Duration::from_secs(10), second)
        .await
        .expect("the transaction behind it is not stranded")
        .unwrap()
        .unwrap();
    assert!(s.failure().is_none(), "nothing failed");
    assert!(!s.exists("c", "E").await.unwrap());
    assert!(s.getattr("c", "A", "v").await.is_err());
    assert_eq!(s.getattr("c", "A", "w").await.unwrap(), b"after".to_vec());
    assert_eq!(
        s.stats().await.free_bytes,
        free_before - BIG as u64,
        "the abandoned blocks stay taken"
    );
    let rep = s.fsck(true).await.unwrap();
    assert!(rep.is_clean(), "{:?}", rep.errors);
    s.sync().await.unwrap();
    let img = power_cut(&dev, &kv);
    drop(s);
    let r = Rig::mount(&img, early()).await.unwrap();
    assert_eq!(r.store().stats().await.free_bytes, free_before);
    assert_eq!(
        r.store().getattr("c", "A", "w").await.unwrap(),
        b"after".to_vec()
    );
    let rep = r.store().fsck(true).await.unwrap();
    assert!(rep.is_clean(), "{:?}", rep.errors);
}

/// An early write patched by a small write of its own group, then power is cut: the record is
/// the last in the log and its patched block holds the early bytes, not the patch (that is a
/// deferred write the record carries); mount must replay it, not take it for one whose data
/// never landed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acknowledged_early_write_patched_in_its_group_survives_a_power_cut() {
    let (s, dev, kv) = rig_with(early()).await;
    let mut t = Transaction::new();
    t.write("c", "P", 0, &pattern(60, BIG))
        .write("c", "P", 100, b"patch");
    s.queue_transaction(&t).await.unwrap();
    let img = power_cut(&dev, &kv);
    drop(s);
    let r = Rig::mount(&img, early()).await.unwrap();
    let mut want = pattern(60, BIG);
    want[100..105].copy_from_slice(b"patch");
    assert_eq!(r.store().stats().await.wal_discarded, 0);
    assert_eq!(r.store().read("c", "P", 0, BIG as u64).await.unwrap(), want);
    let rep = r.store().fsck(true).await.unwrap();
    assert!(rep.is_clean(), "{:?}", rep.errors);
}
