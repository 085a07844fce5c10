//! Deferred writes: small writes (whole blocks included) are carried by the log record alone and
//! applied in place later by the background checkpoint; a block freed while that checkpoint is
//! writing it is not handed out again until it has finished. Which writes are deferred
//! depends on whether they bring new data and on the kind of device.

use crate::common;

use async_trait::async_trait;
use cairn_blockdev::{
    BlockDevice, CrashSwitch, DeviceProperties, FileDevice, FileDeviceOptions, MemDevice,
    PowerLossMode, Result as DevResult,
};
use cairn_store::{
    CrashableKv, KvLocation, KvLossMode, Store, StoreConfig, StoreError, Transaction,
};
use common::{dump, fresh_images, fresh_images_with, model_apply, pattern, Rig};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

const BLOCK: usize = 4096;

/// Writes shorter than 16 KiB, overwrites included, are deferred; a background checkpoint
/// starts once 8 blocks are pending (long before the record interval).
fn deferring() -> StoreConfig {
    StoreConfig {
        deferred_max_bytes: 16 * 1024,
        deferred_overwrite_max_bytes: 16 * 1024,
        deferred_batch_bytes: 8 * BLOCK as u64,
        wal_checkpoint_records: 10_000,
        ..common::cfg()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whole_block_overwrites_are_logged_without_reading_and_applied_in_the_background() {
    let img = fresh_images().await;
    let rig = Rig::mount(&img, deferring()).await.unwrap();
    let store = rig.store();
    let mut model = dump(store).await;
    let mut t = Transaction::new();
    t.write("c", "obj", 0, &pattern(1, 64 * BLOCK));
    store.queue_transaction(&t).await.unwrap();
    model = model_apply(&model, &t).unwrap();
    let before = store.stats().await;
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    for i in 0..200u32 {
        let block = rng.random_range(0..64usize);
        let mut t = Transaction::new();
        t.write(
            "c",
            "obj",
            (block * BLOCK) as u64,
            &pattern(i as u8 ^ 0x5a, BLOCK),
        );
        store.queue_transaction(&t).await.unwrap();
        model = model_apply(&model, &t).unwrap();
    }
    let after = store.stats().await;
    assert_eq!(
        after.device_bytes_read, before.device_bytes_read,
        "a whole-block overwrite never reads the block it replaces"
    );
    assert!(
        after.deferred_applied > before.deferred_applied,
        "background checkpoints applied deferred writes in place"
    );
    assert!(
        after.checkpoints > before.checkpoints,
        "started by the pending deferred bytes"
    );
    assert_eq!(dump(store).await, model, "reads see every overwrite");

    // Power loss: whatever was pending in memory comes back from the log.
    let img = rig
        .crash(PowerLossMode::DropUnflushed, KvLossMode::DropUnsynced)
        .await;
    let rig = Rig::mount(&img, deferring()).await.unwrap();
    assert_eq!(dump(rig.store()).await, model);
    let rep = rig.store().fsck(true).await.unwrap();
    assert!(rep.is_clean(), "{:?}", rep.errors);
}

/// The group that starts a background checkpoint may itself replace a pending deferred write:
/// the checkpoint must apply and drop only the version it saw, so that the newer one still
/// comes back after a power cut (found by the model test: a checksum mismatch after remount).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_block_deferred_again_by_the_group_that_starts_a_checkpoint_survives_a_crash() {
    let two_blocks = StoreConfig {
        deferred_batch_bytes: 2 * BLOCK as u64,
        ..deferring()
    };
    let img = fresh_images().await;
    let rig = Rig::mount(&img, two_blocks.clone()).await.unwrap();
    let store = rig.store();
    let mut model = dump(store).await;
    let mut txns = Vec::new();
    let mut t = Transaction::new();
    t.write("c", "obj", 0, &pattern(1, 8 * BLOCK));
    txns.push(t);
    for (block, seed) in [(0u64, 2u8), (1, 3), (0, 4), (1, 5), (0, 6)] {
        let mut t = Transaction::new();
        t.write("c", "obj", block * BLOCK as u64, &pattern(seed, BLOCK));
        txns.push(t);
    }
    for t in &txns {
        store.queue_transaction(t).await.unwrap();
        model = model_apply(&model, t).unwrap();
        // Let any background checkpoint finish (its KV commit durable) before the next group.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(store.stats().await.checkpoints > 0);
    let img = rig
        .crash(PowerLossMode::DropUnflushed, KvLossMode::DropUnsynced)
        .await;
    let rig = Rig::mount(&img, two_blocks).await.unwrap();
    assert_eq!(dump(rig.store()).await, model);
    assert!(rig.store().fsck(true).await.unwrap().is_clean());
}

#[tokio::test]
async fn without_a_log_deferred_writes_are_applied_in_batches() {
    let no_log = StoreConfig {
        wal_bytes: 0,
        ..deferring()
    };
    // The log's size is fixed at mkfs: make a store without one.
    let img = fresh_images_with(&no_log).await;
    let rig = Rig::mount(&img, no_log.clone()).await.unwrap();
    assert_eq!(rig.store().stats().await.wal_records, 0);
    let store = rig.store();
    let mut model = dump(store).await;
    let mut t = Transaction::new();
    t.write("c", "obj", 0, &pattern(1, 32 * BLOCK));
    store.queue_transaction(&t).await.unwrap();
    model = model_apply(&model, &t).unwrap();
    for i in 0..100u32 {
        let mut t = Transaction::new();
        t.write(
            "c",
            "obj",
            u64::from(i % 32) * BLOCK as u64,
            &pattern(i as u8, BLOCK),
        );
        store.queue_transaction(&t).await.unwrap();
        model = model_apply(&model, &t).unwrap();
        let st = store.stats().await;
        assert!(
            st.deferred_pending_bytes <= no_log.deferred_batch_bytes,
            "{} bytes pending after write {i}",
            st.deferred_pending_bytes
        );
    }
    assert!(store.stats().await.deferred_applied > 0);
    assert_eq!(dump(store).await, model);
    let img = rig
        .crash(PowerLossMode::DropUnflushed, KvLossMode::DropUnsynced)
        .await;
    let rig = Rig::mount(&img, no_log).await.unwrap();
    assert_eq!(dump(rig.store()).await, model);
    assert!(rig.store().fsck(true).await.unwrap().is_clean());
}

/// A memory device whose writes from the store's checkpoint thread wait until the test opens
/// the gate.
#[derive(Debug)]
struct GatedDevice {
    inner: MemDevice,
    open: Mutex<bool>,
    opened: Condvar,
    waiting: AtomicUsize,
}

impl GatedDevice {
    fn open(&self) {
        *self.open.lock().unwrap() = true;
        self.opened.notify_all();
    }

    fn hold_checkpoint_writes(&self) {
        if std::thread::current().name() != Some("store-checkpoint") {
            return;
        }
        self.waiting.fetch_add(1, Ordering::SeqCst);
        let mut open = self.open.lock().unwrap();
        while !*open {
            open = self.opened.wait(open).unwrap();
        }
    }
}

#[async_trait]
impl BlockDevice for GatedDevice {
    fn properties(&self) -> DeviceProperties {
        self.inner.properties()
    }
    async fn read(&self, offset_bytes: u64, buf: &mut [u8]) -> DevResult<()> {
        self.inner.read(offset_bytes, buf).await
    }
    async fn write(&self, offset_bytes: u64, data: &[u8]) -> DevResult<()> {
        self.hold_checkpoint_writes();
        self.inner.write(offset_bytes, data).await
    }
    async fn flush(&self) -> DevResult<()> {
        self.inner.flush().await
    }
    async fn discard(&self, offset_bytes: u64, len_bytes: u64) -> DevResult<()> {
        self.inner.discard(offset_bytes, len_bytes).await
    }
}

/// Writes objects of `len` bytes until the store has no room for another; returns their names.
async fn fill(store: &Store, prefix: &str, len: usize, seed: &mut u8) -> Vec<(String, u8)> {
    let mut made = Vec::new();
    loop {
        let name = format!("{prefix}{}", made.len());
        *seed = seed.wrapping_add(1);
        let mut t = Transaction::new();
        t.write("c", &name, 0, &pattern(*seed, len));
        match store.queue_transaction(&t).await {
            Ok(()) => made.push((name, *seed)),
            Err(StoreError::NoSpace { .. }) => return made,
            Err(e) => panic!("writing {name}: {e}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_block_freed_while_a_checkpoint_applies_it_is_reused_only_after_it_finished() {
    let cfg = StoreConfig {
        wal_bytes: 1 << 20,
        ..deferring()
    };
    let dev = Arc::new(GatedDevice {
        inner: MemDevice::new(16 << 20, 512).unwrap(),
        open: Mutex::new(false),
        opened: Condvar::new(),
        waiting: AtomicUsize::new(0),
    });
    let kv = CrashableKv::new(Vec::new(), CrashSwitch::new());
    let kv_at = || KvLocation::Backend(Box::new(kv.clone()));
    Store::mkfs(dev.clone(), kv_at(), &cfg).await.unwrap();
    let store = Store::mount(dev.clone(), kv_at(), cfg.clone())
        .await
        .unwrap();
    let mut t = Transaction::new();
    t.create_collection("c");
    t.write("c", "old", 0, &pattern(0, 8 * BLOCK));
    store.queue_transaction(&t).await.unwrap();
    // Eight deferred overwrites, then one more group: it starts the background checkpoint,
    // whose writes of those eight blocks now wait at the gate.
    for b in 0..8u8 {
        let mut t = Transaction::new();
        t.write(
            "c",
            "old",
            u64::from(b) * BLOCK as u64,
            &pattern(100 + b, BLOCK),
        );
        store.queue_transaction(&t).await.unwrap();
    }
    let mut t = Transaction::new();
    t.setattr("c", "old", "k", b"v");
    store.queue_transaction(&t).await.unwrap();
    let waited = tokio::time::timeout(Duration::from_secs(10), async {
        while dev.waiting.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    assert!(
        waited.is_ok(),
        "the checkpoint never wrote the deferred blocks"
    );

    // Free those blocks, then take every block the allocator will give out.
    let mut t = Transaction::new();
    t.remove("c", "old");
    store.queue_transaction(&t).await.unwrap();
    let mut seed = 0u8;
    let mut objects = Vec::new();
    for (prefix, len) in [("big", 256 * BLOCK), ("mid", 16 * BLOCK), ("small", BLOCK)] {
        for (name, s) in fill(&store, prefix, len, &mut seed).await {
            objects.push((name, s, len));
        }
    }
    assert!(objects.len() > 10);

    // The checkpoint now writes the old contents of the freed blocks: none of them may be a
    // block that an object written since holds.
    dev.open();
    store.sync().await.unwrap();
    check(&store, &objects).await;
    let rep = store.fsck(true).await.unwrap();
    assert!(rep.is_clean(), "{:?}", rep.errors);
    store.umount().await.unwrap();
    let store = Store::mount(dev.clone(), kv_at(), cfg).await.unwrap();
    check(&store, &objects).await;
    assert!(store.fsck(true).await.unwrap().is_clean());
}

/// Reads every object back and compares it with its pattern.
async fn check(store: &Store, objects: &[(String, u8, usize)]) {
    for (name, seed, len) in objects {
        let got = store
            .read("c", name, 0, *len as u64)
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(
            got[..] == pattern(*seed, *len)[..],
            "{name} was overwritten"
        );
    }
}

/// Mounts a store with the default configuration on a file device that says it is
/// `rotational` or not.
async fn mount_file_store(dir: &std::path::Path, rotational: bool) -> Store {
    let opts = FileDeviceOptions {
        size_bytes: Some(64 << 20),
        rotational,
        ..FileDeviceOptions::default()
    };
    let dev: Arc<dyn BlockDevice> = Arc::new(FileDevice::open(&dir.join("dev"), &opts).unwrap());
    let kv = || KvLocation::File(dir.join("kv"));
    let cfg = StoreConfig::default();
    if !dir.join("kv").exists() {
        Store::mkfs(dev.clone(), kv(), &cfg).await.unwrap();
    }
    Store::mount(dev, kv(), cfg).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_data_and_part_blocks_are_deferred_and_whole_block_overwrites_only_on_rotational_devices(
) {
    for rotational in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let store = mount_file_store(dir.path(), rotational).await;
        let pending = || async { store.stats().await.deferred_pending_bytes };
        let mut expected: Vec<(&str, Vec<u8>)> = Vec::new();
        let mut t = Transaction::new();
        t.create_collection("c");
        t.write("c", "big", 0, &pattern(1, 16 * BLOCK));
        store.queue_transaction(&t).await.unwrap();
        expected.push(("big", pattern(1, 16 * BLOCK)));
        assert_eq!(pending().await, 0, "a 64 KiB write is copy-on-write");

        let mut t = Transaction::new();
        t.write("c", "new", 0, &pattern(2, BLOCK));
        store.queue_transaction(&t).await.unwrap();
        expected.push(("new", pattern(2, BLOCK)));
        assert_eq!(
            pending().await,
            BLOCK as u64,
            "4 KiB of new data is deferred"
        );

        let mut t = Transaction::new();
        t.write("c", "big", 3 * BLOCK as u64, &pattern(3, BLOCK));
        store.queue_transaction(&t).await.unwrap();
        expected[0].1[3 * BLOCK..4 * BLOCK].copy_from_slice(&pattern(3, BLOCK));
        let overwrite = if rotational { BLOCK as u64 } else { 0 };
        assert_eq!(
            pending().await,
            (BLOCK as u64) + overwrite,
            "a whole-block overwrite is deferred only on a rotational device ({rotational})"
        );

        let mut t = Transaction::new();
        t.write("c", "big", 9 * BLOCK as u64 + 100, &pattern(4, 1000));
        store.queue_transaction(&t).await.unwrap();
        let at = 9 * BLOCK + 100;
        expected[0].1[at..at + 1000].copy_from_slice(&pattern(4, 1000));
        assert_eq!(
            pending().await,
            2 * BLOCK as u64 + overwrite,
            "an overwrite of part of a block is deferred on every device"
        );

        check_reads(&store, &expected, "mounted").await;
        drop(store);
        let store = mount_file_store(dir.path(), rotational).await;
        check_reads(&store, &expected, "remounted").await;
    }
}

/// Reads every `(object, contents)` of collection "c" back whole and compares crc32c.
async fn check_reads(store: &Store, expected: &[(&str, Vec<u8>)], when: &str) {
    for (name, want) in expected {
        let got = store.read("c", name, 0, want.len() as u64).await.unwrap();
        assert_eq!(
            crc_fast::crc32_iscsi(&got),
            crc_fast::crc32_iscsi(want),
            "{name} read back ({when})"
        );
    }
}
