//! A memory device whose flushes and data writes a test can hold at a gate (to keep a group
//! commit provably in flight) or lose (as a volatile cache loses them at a power cut).

use async_trait::async_trait;
use cairn_blockdev::{BlockDevice, DeviceProperties, MemDevice};
use cairn_store::{CrashableKv, KvLocation, KvLossMode, Store, StoreConfig, Transaction};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A device whose next flush (or, with `gate_data_write`, next write to the data area) waits
/// for the test to open its gate; while `drop_data` is set,
/// writes at or after `data_from` (the data area, not the log) are acknowledged but never
/// reach the memory (as if lost in a volatile cache at a power cut).
#[derive(Debug)]
pub struct GatedDevice {
    pub inner: Arc<MemDevice>,
    gate: tokio::sync::Semaphore,
    gated: AtomicBool,
    /// Makes the next write to the data area wait at the gate.
    pub gate_data_write: AtomicBool,
    /// Operations that have reached the gate.
    pub held: AtomicU64,
    /// Flushes entered (held or not).
    pub flushes_entered: AtomicU64,
    /// Data-area writes are acknowledged and dropped.
    pub drop_data: AtomicBool,
    data_from: u64,
}

impl GatedDevice {
    /// A gated device over `inner` whose data area starts at byte `data_from`.
    pub fn new(inner: Arc<MemDevice>, data_from: u64) -> Arc<Self> {
        Arc::new(Self {
            inner,
            gate: tokio::sync::Semaphore::new(0),
            gated: AtomicBool::new(false),
            gate_data_write: AtomicBool::new(false),
            held: AtomicU64::new(0),
            flushes_entered: AtomicU64::new(0),
            drop_data: AtomicBool::new(false),
            data_from,
        })
    }

    /// Makes the next flush wait at the gate.
    pub fn close_gate(&self) {
        self.gated.store(true, Ordering::SeqCst);
    }

    /// Lets one held operation through (now or when it arrives).
    pub fn open_gate(&self) {
        self.gate.add_permits(1);
    }

    /// Waits at the gate; one opening lets one held operation through.
    async fn hold(&self) {
        self.held.fetch_add(1, Ordering::SeqCst);
        self.gate.acquire().await.map(|p| p.forget()).ok();
    }

    /// Waits until `n` flushes have been entered since the device was made.
    pub async fn wait_flushes(&self, n: u64) {
        eventually("the flush is reached", || async {
            self.flushes_entered.load(Ordering::SeqCst) >= n
        })
        .await;
    }
}

#[async_trait]
impl BlockDevice for GatedDevice {
    fn properties(&self) -> DeviceProperties {
        self.inner.properties()
    }
    async fn read(&self, offset_bytes: u64, buf: &mut [u8]) -> cairn_blockdev::Result<()> {
        self.inner.read(offset_bytes, buf).await
    }
    async fn write(&self, offset_bytes: u64, data: &[u8]) -> cairn_blockdev::Result<()> {
        if offset_bytes >= self.data_from {
            if self.drop_data.load(Ordering::SeqCst) {
                return Ok(());
            }
            if self.gate_data_write.swap(false, Ordering::SeqCst) {
                self.hold().await;
            }
        }
        self.inner.write(offset_bytes, data).await
    }
    async fn flush(&self) -> cairn_blockdev::Result<()> {
        self.flushes_entered.fetch_add(1, Ordering::SeqCst);
        if self.gated.swap(false, Ordering::SeqCst) {
            self.hold().await;
        }
        self.inner.flush().await
    }
    async fn discard(&self, offset_bytes: u64, len_bytes: u64) -> cairn_blockdev::Result<()> {
        self.inner.discard(offset_bytes, len_bytes).await
    }
}

/// Waits (at most 10 s, polling every millisecond) until `cond` holds.
pub async fn eventually<F: std::future::Future<Output = bool>>(what: &str, cond: impl Fn() -> F) {
    let polled = tokio::time::timeout(Duration::from_secs(10), async {
        while !cond().await {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    });
    polled
        .await
        .unwrap_or_else(|_| panic!("{what}: not within 10 s"));
}

/// A store mounted with `conf` on a gated device, with object "A" (8 KiB, two blocks) and "B"
/// (4 KiB) durable, and its crashable KV.
pub async fn rig_with(conf: StoreConfig) -> (Arc<Store>, Arc<GatedDevice>, CrashableKv) {
    let img = super::fresh_images().await;
    let data_from = (1 + conf.wal_blocks_for(super::DEV_BYTES)) * conf.block_bytes;
    let mem = Arc::new(MemDevice::from_image(img.dev.clone(), 512).unwrap());
    let dev = GatedDevice::new(mem, data_from);
    let kv = CrashableKv::new(img.kv.clone(), cairn_blockdev::CrashSwitch::new());
    let s = Store::mount(dev.clone(), KvLocation::Backend(Box::new(kv.clone())), conf)
        .await
        .unwrap();
    let mut t = Transaction::new();
    t.write("c", "A", 0, &super::pattern(1, 8192))
        .write("c", "B", 0, &super::pattern(2, 4096));
    s.queue_transaction(&t).await.unwrap();
    s.sync().await.unwrap();
    (Arc::new(s), dev, kv)
}

/// What survives a power cut now: the device as written so far, the KV as last synced.
pub fn power_cut(dev: &GatedDevice, kv: &CrashableKv) -> super::Images {
    super::Images {
        dev: dev.inner.snapshot(),
        kv: kv.power_loss(KvLossMode::DropUnsynced),
        fast: None,
        cache: None,
    }
}

/// Submits `t` from a task of its own.
pub fn spawn_txn(
    s: &Arc<Store>,
    t: Transaction,
) -> tokio::task::JoinHandle<cairn_store::Result<()>> {
    let s = s.clone();
    tokio::spawn(async move { s.queue_transaction_owned(t).await })
}
