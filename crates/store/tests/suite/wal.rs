//! The write-ahead log on the data device: acknowledged groups live only in the log until a
//! checkpoint, are replayed at mount, and a last record whose data did not reach the device is
//! discarded rather than replayed over missing blocks.

use crate::common;

use cairn_blockdev::PowerLossMode;
use cairn_store::{
    CrashableKv, KvLocation, KvLossMode, Store, StoreConfig, StoreError, Transaction,
};
use common::{cfg, dump, fresh_images, model_apply, pattern, Rig};
use std::sync::Arc;

fn write_txn(name: &str, seed: u8, len: usize) -> Transaction {
    let mut t = Transaction::new();
    t.write("c", name, 0, &pattern(seed, len));
    t.setattr("c", name, "seed", &[seed]);
    t
}

#[tokio::test]
async fn acknowledged_groups_are_replayed_from_the_log_after_power_loss() {
    let img = fresh_images().await;
    // No checkpoint may start during the groups, so that everything acknowledged is in the
    // log alone: the writes of a block or more stay copy-on-write (one-block records; deferred
    // ones would carry their blocks and fill a quarter of this small ring, which starts a
    // checkpoint), and the small overwrite below is still deferred.
    let log_only = StoreConfig {
        deferred_max_bytes: 4096,
        ..cfg()
    };
    let rig = Rig::mount(&img, log_only).await.unwrap();
    let mut model = dump(rig.store()).await;
    let before = rig.store().stats().await;
    let mut t = Transaction::new();
    t.omap_set("c", "log", b"k1", b"v1");
    let mut txns = vec![t];
    for i in 0..5u8 {
        txns.push(write_txn(
            &format!("o{i}"),
            i,
            4096 * (i as usize + 1) + 100,
        ));
    }
    // A small overwrite: a deferred write carried by the log.
    let mut t = Transaction::new();
    t.write("c", "o3", 5, b"patched");
    txns.push(t);
    for t in &txns {
        rig.store().queue_transaction(t).await.unwrap();
        model = model_apply(&model, t).expect("valid transaction");
    }
    let after = rig.store().stats().await;
    assert_eq!(after.wal_records - before.wal_records, txns.len() as u64);
    assert_eq!(
        after.kv_syncs, before.kv_syncs,
        "acknowledged without a KV sync"
    );
    assert_eq!(after.checkpoints, before.checkpoints);

    // Power loss: the KV keeps only its last durable commit (before all of these).
    let img = rig
        .crash(PowerLossMode::DropUnflushed, KvLossMode::DropUnsynced)
        .await;
    let rig = Rig::mount(&img, cfg()).await.unwrap();
    let st = rig.store().stats().await;
    assert_eq!(st.wal_replayed, txns.len() as u64);
    assert_eq!(st.wal_discarded, 0);
    assert_eq!(dump(rig.store()).await, model);
    assert!(rig.store().fsck(true).await.unwrap().is_clean());

    // The replay was checkpointed: another crash right away loses nothing and replays nothing.
    let img = rig
        .crash(PowerLossMode::DropUnflushed, KvLossMode::DropUnsynced)
        .await;
    let rig = Rig::mount(&img, cfg()).await.unwrap();
    assert_eq!(rig.store().stats().await.wal_replayed, 0);
    assert_eq!(dump(rig.store()).await, model);
}

/// Byte offset of the first device block holding exactly `block`.
fn find_block(dev: &[u8], block: &[u8]) -> Option<usize> {
    dev.chunks_exact(block.len())
        .position(|b| b == block)
        .map(|i| i * block.len())
}

#[tokio::test]
async fn a_last_record_whose_data_did_not_land_is_discarded() {
    let img = fresh_images().await;
    let rig = Rig::mount(&img, cfg()).await.unwrap();
    // Both are copy-on-write (at least `deferred_max_bytes`): their data is not in the record.
    let first = write_txn("kept", 1, 5 * 4096);
    let last = write_txn("lost", 2, 5 * 4096);
    rig.store().queue_transaction(&first).await.unwrap();
    let model = model_apply(&dump(rig.store()).await, &first).unwrap();
    rig.store().queue_transaction(&last).await.unwrap();
    let mut img = rig
        .crash(PowerLossMode::DropUnflushed, KvLossMode::DropUnsynced)
        .await;
    // Make it look as if the last group's record reached the device but one of its data blocks
    // did not (a power cut during its flush).
    let second_block = &pattern(2, 5 * 4096)[4096..8192];
    let at = find_block(&img.dev, second_block).expect("data block on the device");
    img.dev[at..at + 4096].fill(0);

    let rig = Rig::mount(&img, cfg()).await.unwrap();
    let st = rig.store().stats().await;
    assert_eq!((st.wal_replayed, st.wal_discarded), (1, 1));
    assert!(matches!(
        rig.store().stat("c", "lost").await,
        Err(StoreError::NoSuchObject { .. })
    ));
    assert_eq!(dump(rig.store()).await, model);
    assert!(rig.store().fsck(true).await.unwrap().is_clean());
    // The store goes on: the next records follow the discarded one and survive a crash too.
    let again = write_txn("again", 3, 4096);
    rig.store().queue_transaction(&again).await.unwrap();
    let model = model_apply(&model, &again).unwrap();
    let img = rig
        .crash(PowerLossMode::DropUnflushed, KvLossMode::DropUnsynced)
        .await;
    let rig = Rig::mount(&img, cfg()).await.unwrap();
    assert_eq!(dump(rig.store()).await, model);
}

#[tokio::test]
async fn checkpoints_bound_the_log_and_a_store_without_a_log_syncs_the_kv() {
    let img = fresh_images().await;
    let every_4 = StoreConfig {
        wal_checkpoint_records: 4,
        ..cfg()
    };
    let rig = Rig::mount(&img, every_4.clone()).await.unwrap();
    let mut model = dump(rig.store()).await;
    let before = rig.store().stats().await;
    for i in 0..10u8 {
        let t = write_txn(&format!("o{i}"), i, 4096);
        rig.store().queue_transaction(&t).await.unwrap();
        model = model_apply(&model, &t).unwrap();
    }
    let after = rig.store().stats().await;
    // Every group is logged: the checkpoints after records 4 and 8 run in the background. The
    // first is taken in by record 9 at the latest (8 records since the durable marker is the
    // hard limit, where a group waits for it).
    assert_eq!(after.wal_records - before.wal_records, 10);
    assert!(after.checkpoints > before.checkpoints, "{after:?}");
    let img = rig
        .crash(PowerLossMode::DropUnflushed, KvLossMode::DropUnsynced)
        .await;
    let rig = Rig::mount(&img, every_4.clone()).await.unwrap();
    let replayed = rig.store().stats().await.wal_replayed;
    assert!(
        replayed <= 6,
        "records before a durable checkpoint replayed: {replayed}"
    );
    assert_eq!(dump(rig.store()).await, model);
    // sync waits for the checkpoint in flight and checkpoints the rest: nothing to replay.
    rig.store().sync().await.unwrap();
    let img = rig
        .crash(PowerLossMode::DropUnflushed, KvLossMode::DropUnsynced)
        .await;
    let rig = Rig::mount(&img, every_4).await.unwrap();
    assert_eq!(rig.store().stats().await.wal_replayed, 0);
    assert_eq!(dump(rig.store()).await, model);

    // mkfs with no log: every group is a durable KV commit, and nothing needs replaying.
    let no_log = StoreConfig {
        wal_bytes: 0,
        ..cfg()
    };
    let switch = cairn_blockdev::CrashSwitch::new();
    let mem = Arc::new(cairn_blockdev::MemDevice::new(4 << 20, 512).unwrap());
    let kv = CrashableKv::new(Vec::new(), switch.clone());
    let kv_loc = || KvLocation::Backend(Box::new(kv.clone()));
    Store::mkfs(mem.clone(), kv_loc(), &no_log).await.unwrap();
    let store = Store::mount(mem.clone(), kv_loc(), no_log.clone())
        .await
        .unwrap();
    let mut t = Transaction::new();
    t.create_collection("c");
    store.queue_transaction(&t).await.unwrap();
    let before = store.stats().await;
    for i in 0..3u8 {
        store
            .queue_transaction(&write_txn(&format!("o{i}"), i, 4096))
            .await
            .unwrap();
    }
    let after = store.stats().await;
    assert_eq!(after.wal_records, 0);
    assert_eq!(after.checkpoints - before.checkpoints, 3);
    assert_eq!(after.kv_syncs - before.kv_syncs, 3);
    let kv_img = kv.power_loss(KvLossMode::DropUnsynced);
    drop(store);
    let images = common::Images {
        dev: mem.snapshot(),
        kv: kv_img,
        fast: None,
        cache: None,
    };
    let rig = Rig::mount(&images, no_log).await.unwrap();
    assert_eq!(rig.store().stats().await.wal_replayed, 0);
    assert_eq!(rig.store().stat("c", "o2").await.unwrap().size_bytes, 4096);
}

#[tokio::test]
async fn records_left_by_a_previous_store_on_the_device_are_never_replayed() {
    // Store A acknowledges writes that live only in its log, then loses power.
    let img = fresh_images().await;
    let rig = Rig::mount(&img, cfg()).await.unwrap();
    for i in 0..3u8 {
        let t = write_txn(&format!("old{i}"), i, 4096);
        rig.store().queue_transaction(&t).await.unwrap();
    }
    let old = rig
        .crash(PowerLossMode::DropUnflushed, KvLossMode::DropUnsynced)
        .await;
    // Store B is made on the same device and mounted once, like A was before its writes, so
    // it expects its next record with the sequence number and ring position of A's first write.
    // Put A's log ring back over B's zeroed one, as if B's mkfs had not cleared it: only the
    // store identity in each record tells them apart.
    let fresh = fresh_images().await;
    let b = Rig::mount(&fresh, cfg())
        .await
        .unwrap()
        .crash(PowerLossMode::DropUnflushed, KvLossMode::DropUnsynced)
        .await;
    let mut dev = b.dev.clone();
    let ring = 4096..(1 + cfg().wal_blocks_for(common::DEV_BYTES) as usize) * 4096;
    dev[ring.clone()].copy_from_slice(&old.dev[ring]);
    let rig = Rig::mount(
        &common::Images {
            dev,
            kv: b.kv.clone(),
            fast: None,
            cache: None,
        },
        cfg(),
    )
    .await
    .unwrap();
    assert_eq!(rig.store().stats().await.wal_replayed, 0);
    assert_eq!(dump(rig.store()).await, dump_of(&b).await);
    assert!(rig.store().fsck(true).await.unwrap().is_clean());
}

/// The store state in `img`.
async fn dump_of(img: &common::Images) -> common::Model {
    let rig = Rig::mount(img, cfg()).await.unwrap();
    dump(rig.store()).await
}

/// The commit backlog climbs with the groups logged since the last checkpoint, towards the
/// hard limit where a group must wait for one, and falls back once a checkpoint is durable.
#[tokio::test]
async fn the_commit_backlog_climbs_with_logged_groups_and_falls_at_a_checkpoint() {
    let img = fresh_images().await;
    let every_100 = StoreConfig {
        wal_checkpoint_records: 100,
        deferred_max_bytes: 4096,
        ..cfg()
    };
    let rig = Rig::mount(&img, every_100).await.unwrap();
    let store = rig.store();
    assert_eq!(store.commit_backlog(), 0.0, "nothing logged yet");
    let mut highest: f64 = 0.0;
    for i in 0..20u8 {
        let t = write_txn(&format!("o{i}"), i, 4096);
        store.queue_transaction(&t).await.unwrap();
        let now = store.commit_backlog();
        assert!((0.0..=1.0).contains(&now), "record {i}: {now}");
        highest = highest.max(now);
    }
    assert!(
        highest > 0.3,
        "20 records fill much of this small ring: {highest}"
    );
    store.sync().await.unwrap();
    let t = write_txn("after", 1, 4096);
    store.queue_transaction(&t).await.unwrap();
    assert!(
        store.commit_backlog() < highest / 4.0,
        "one record since the checkpoint: {}",
        store.commit_backlog()
    );
}

/// Near the log's hard limit commits are slowed, not stopped: with the checkpoint's in-place
/// writes held on the data device, small overwrites go on being acknowledged while the ring
/// fills past the throttle's threshold, those past it delayed, none waiting for the
/// checkpoint; once it lands, the last write reads back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commits_near_the_logs_limit_are_slowed_not_stopped() {
    use std::sync::atomic::Ordering::SeqCst;
    let conf = StoreConfig {
        deferred_overwrite_max_bytes: 8192,
        deferred_batch_bytes: 64 << 20,
        wal_checkpoint_records: 100_000,
        ..cfg()
    };
    let (s, dev, _kv) = common::gated::rig_with(conf).await;
    let before = s.stats().await;
    assert_eq!(before.throttle_wait_ns, 0, "nothing near the limit yet");
    dev.gate_data_write.store(true, SeqCst);
    let mut written = 0u32;
    let mut last = Vec::new();
    while s.commit_backlog() < 0.9 {
        assert!(
            written < 10_000,
            "the ring never filled: backlog {}",
            s.commit_backlog()
        );
        last = pattern(u8::try_from(written % 250).unwrap() + 1, 4096);
        let mut t = Transaction::new();
        t.write("c", "A", 0, &last);
        s.queue_transaction(&t).await.unwrap();
        written += 1;
    }
    assert_eq!(
        dev.held.load(SeqCst),
        1,
        "the checkpoint's in-place write waits at the gate"
    );
    let after = s.stats().await;
    assert!(
        after.throttle_wait_ns > 0,
        "commits past the threshold were delayed ({written} written)"
    );
    assert_eq!(
        after.checkpoint_wait_ns, before.checkpoint_wait_ns,
        "no commit waited for the checkpoint"
    );
    dev.open_gate();
    s.sync().await.unwrap();
    assert_eq!(s.read("c", "A", 0, 4096).await.unwrap(), last);
    assert!(s.fsck(true).await.unwrap().is_clean());
}
