//! Reads on the device without the store's lock: commits go on while a read waits for the
//! device, and what the read resolved stays right: blocks freed meanwhile are not reused, and
//! a checkpoint does not write a block in place under it.

use crate::common;

use async_trait::async_trait;
use cairn_blockdev::{BlockDevice, CrashSwitch, DeviceProperties, MemDevice, Result as DevResult};
use cairn_store::{CrashableKv, KvLocation, Store, StoreConfig, Transaction};
use common::pattern;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

const BLOCK: usize = 4096;

/// A memory device whose next data read, once armed, waits until the test opens the gate.
#[derive(Debug)]
struct ReadGate {
    inner: MemDevice,
    armed: AtomicBool,
    held: AtomicUsize,
    gate: tokio::sync::Semaphore,
}

impl ReadGate {
    fn new() -> Arc<Self> {
        Arc::new(ReadGate {
            inner: MemDevice::new(16 << 20, 512).unwrap(),
            armed: AtomicBool::new(false),
            held: AtomicUsize::new(0),
            gate: tokio::sync::Semaphore::new(0),
        })
    }
}

#[async_trait]
impl BlockDevice for ReadGate {
    fn properties(&self) -> DeviceProperties {
        self.inner.properties()
    }
    async fn read(&self, offset_bytes: u64, buf: &mut [u8]) -> DevResult<()> {
        if self.armed.swap(false, Ordering::SeqCst) {
            self.held.fetch_add(1, Ordering::SeqCst);
            self.gate.acquire().await.map(|p| p.forget()).ok();
        }
        self.inner.read(offset_bytes, buf).await
    }
    async fn write(&self, offset_bytes: u64, data: &[u8]) -> DevResult<()> {
        self.inner.write(offset_bytes, data).await
    }
    async fn flush(&self) -> DevResult<()> {
        self.inner.flush().await
    }
    async fn discard(&self, offset_bytes: u64, len_bytes: u64) -> DevResult<()> {
        self.inner.discard(offset_bytes, len_bytes).await
    }
}

/// A fresh store on `dev` with `cfg`, holding object "a" of `blocks` blocks of pattern 1.
async fn store_with_a(dev: &Arc<ReadGate>, cfg: &StoreConfig, blocks: usize) -> Arc<Store> {
    let kv = CrashableKv::new(Vec::new(), CrashSwitch::new());
    let kv_at = || KvLocation::Backend(Box::new(kv.clone()));
    Store::mkfs(dev.clone(), kv_at(), cfg).await.unwrap();
    let store = Arc::new(
        Store::mount(dev.clone(), kv_at(), cfg.clone())
            .await
            .unwrap(),
    );
    let mut t = Transaction::new();
    t.create_collection("c");
    t.write("c", "a", 0, &pattern(1, blocks * BLOCK));
    store.queue_transaction(&t).await.unwrap();
    store.sync().await.unwrap();
    store
}

/// Starts a read of all of "a" and waits until it is held on the device.
async fn held_read(
    store: &Arc<Store>,
    dev: &Arc<ReadGate>,
    len: usize,
) -> tokio::task::JoinHandle<Vec<u8>> {
    dev.armed.store(true, Ordering::SeqCst);
    let s = store.clone();
    let read = tokio::spawn(async move { s.read("c", "a", 0, len as u64).await.unwrap().to_vec() });
    tokio::time::timeout(Duration::from_secs(10), async {
        while dev.held.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await
    .expect("the read reaches the device");
    read
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commits_go_on_while_a_read_waits_and_its_freed_blocks_are_not_reused() {
    let dev = ReadGate::new();
    let cfg = common::cfg();
    let store = store_with_a(&dev, &cfg, 16).await;
    let read = held_read(&store, &dev, 16 * BLOCK).await;
    // With the read on the device: remove "a" (its blocks freed) and write more objects than
    // the freed blocks, which a release of those blocks would hand out.
    let written = tokio::time::timeout(Duration::from_secs(10), async {
        let mut t = Transaction::new();
        t.remove("c", "a");
        store.queue_transaction(&t).await.unwrap();
        for i in 0..8u8 {
            let mut t = Transaction::new();
            t.write("c", &format!("n{i}"), 0, &pattern(10 + i, 8 * BLOCK));
            store.queue_transaction(&t).await.unwrap();
        }
    })
    .await;
    assert!(written.is_ok(), "commits waited for a read on the device");
    assert!(!read.is_finished());
    dev.gate.add_permits(1);
    let got = read.await.unwrap();
    assert!(
        got == pattern(1, 16 * BLOCK),
        "the read returns what the object held when it began"
    );
    for i in 0..8u8 {
        let name = format!("n{i}");
        assert_eq!(
            store.read("c", &name, 0, 8 * BLOCK as u64).await.unwrap(),
            pattern(10 + i, 8 * BLOCK),
            "{name}"
        );
    }
    let rep = store.fsck(true).await.unwrap();
    assert!(rep.is_clean(), "{:?}", rep.errors);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_writes_in_place_only_after_the_reads_begun_before_it() {
    let dev = ReadGate::new();
    let cfg = StoreConfig {
        deferred_max_bytes: 16 * 1024,
        deferred_overwrite_max_bytes: 16 * 1024,
        wal_checkpoint_records: 10_000,
        ..common::cfg()
    };
    let store = store_with_a(&dev, &cfg, 4).await;
    let read = held_read(&store, &dev, 4 * BLOCK).await;
    // A small overwrite is deferred (logged, applied in place at a checkpoint); the sync's
    // checkpoint must not write the block while the read is on the device.
    let mut t = Transaction::new();
    t.write("c", "a", 0, &pattern(2, BLOCK));
    tokio::time::timeout(Duration::from_secs(10), store.queue_transaction(&t))
        .await
        .expect("the overwrite commits while the read waits")
        .unwrap();
    let s = store.clone();
    let sync = tokio::spawn(async move { s.sync().await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!sync.is_finished(), "the checkpoint waits for the read");
    dev.gate.add_permits(1);
    assert!(
        read.await.unwrap() == pattern(1, 4 * BLOCK),
        "the read returns the contents from before the overwrite, whole"
    );
    tokio::time::timeout(Duration::from_secs(10), sync)
        .await
        .expect("the checkpoint goes on once the read ended")
        .unwrap()
        .unwrap();
    let mut want = pattern(1, 4 * BLOCK);
    want[..BLOCK].copy_from_slice(&pattern(2, BLOCK));
    assert_eq!(
        store.read("c", "a", 0, 4 * BLOCK as u64).await.unwrap(),
        want
    );
    let rep = store.fsck(true).await.unwrap();
    assert!(rep.is_clean(), "{:?}", rep.errors);
}

/// A memory device whose reads each take a millisecond, counting how many overlap at most.
#[derive(Debug)]
struct OverlapProbe {
    inner: MemDevice,
    reading: AtomicUsize,
    peak: AtomicUsize,
}

#[async_trait]
impl BlockDevice for OverlapProbe {
    fn properties(&self) -> DeviceProperties {
        self.inner.properties()
    }
    async fn read(&self, offset_bytes: u64, buf: &mut [u8]) -> DevResult<()> {
        let now = self.reading.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(1)).await;
        let read = self.inner.read(offset_bytes, buf).await;
        self.reading.fetch_sub(1, Ordering::SeqCst);
        read
    }
    async fn write(&self, offset_bytes: u64, data: &[u8]) -> DevResult<()> {
        self.inner.write(offset_bytes, data).await
    }
    async fn flush(&self) -> DevResult<()> {
        self.inner.flush().await
    }
    async fn discard(&self, offset_bytes: u64, len_bytes: u64) -> DevResult<()> {
        self.inner.discard(offset_bytes, len_bytes).await
    }
}

/// An object overwritten block by block lies in many device runs: one read of it has several
/// of them on the device at once (never more than `RUNS_IN_FLIGHT`), and returns every block
/// in its place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fragmented_object_is_read_with_its_runs_in_flight_together() {
    let dev = Arc::new(OverlapProbe {
        inner: MemDevice::new(16 << 20, 512).unwrap(),
        reading: AtomicUsize::new(0),
        peak: AtomicUsize::new(0),
    });
    let cfg = common::cfg();
    let kv = CrashableKv::new(Vec::new(), CrashSwitch::new());
    let kv_at = || KvLocation::Backend(Box::new(kv.clone()));
    Store::mkfs(dev.clone(), kv_at(), &cfg).await.unwrap();
    let store = Store::mount(dev.clone(), kv_at(), cfg.clone())
        .await
        .unwrap();
    const BLOCKS: usize = 64;
    let mut want = pattern(1, BLOCKS * BLOCK);
    let mut t = Transaction::new();
    t.create_collection("c");
    t.write("c", "a", 0, &want);
    store.queue_transaction(&t).await.unwrap();
    for b in (0..BLOCKS).step_by(2) {
        let block = pattern(2 + (b % 200) as u8, BLOCK);
        want[b * BLOCK..(b + 1) * BLOCK].copy_from_slice(&block);
        let mut t = Transaction::new();
        t.write("c", "a", (b * BLOCK) as u64, &block);
        store.queue_transaction(&t).await.unwrap();
    }
    store.sync().await.unwrap();
    dev.peak.store(0, Ordering::SeqCst);
    let got = store.read("c", "a", 0, want.len() as u64).await.unwrap();
    assert!(got == want, "every block read back in its place");
    let peak = dev.peak.load(Ordering::SeqCst);
    assert!(peak > 1, "the object's runs were read one at a time");
    assert!(
        peak <= cairn_store::RUNS_IN_FLIGHT,
        "{peak} reads at once, past the bound"
    );
    let rep = store.fsck(true).await.unwrap();
    assert!(rep.is_clean(), "{:?}", rep.errors);
}
