//! [`SimDisk`]: an OSD's disks in memory — its block device and its KV file — which outlive
//! the OSD's process, so that a simulated host restarted after a crash mounts what its last
//! incarnation left, as a real OSD does.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use cairn_blockdev::MemDevice;
use cairn_store::{KvLocation, Store, StoreConfig, StoreError};
use redb::StorageBackend;

/// Alignment of the simulated block device.
const ALIGN_BYTES: u64 = 4096;

/// One OSD's disks.
#[derive(Debug)]
pub struct SimDisk {
    dev: Arc<MemDevice>,
    kv: SharedKv,
    formatted: AtomicBool,
}

impl SimDisk {
    /// Zeroed disks: a block device of `bytes` and an empty KV file.
    pub fn new(bytes: u64) -> Result<Arc<SimDisk>, StoreError> {
        Ok(Arc::new(SimDisk {
            dev: Arc::new(MemDevice::new(bytes, ALIGN_BYTES)?),
            kv: SharedKv::default(),
            formatted: AtomicBool::new(false),
        }))
    }

    /// Mounts the store on these disks, making it first (mkfs) the first time.
    pub async fn mount(&self, cfg: &StoreConfig) -> Result<Store, StoreError> {
        if !self.formatted.load(Ordering::Acquire) {
            Store::mkfs(self.dev.clone(), self.kv_location(), cfg).await?;
            self.formatted.store(true, Ordering::Release);
        }
        Store::mount(self.dev.clone(), self.kv_location(), cfg.clone()).await
    }

    fn kv_location(&self) -> KvLocation {
        KvLocation::Backend(Box::new(self.kv.clone()))
    }
}

/// A redb file in memory that every handle shares: the store mounted after a restart sees
/// what the one before wrote.
#[derive(Clone, Debug, Default)]
struct SharedKv {
    bytes: Arc<RwLock<Vec<u8>>>,
}

impl SharedKv {
    fn poisoned() -> io::Error {
        io::Error::other("the simulated KV file's lock is poisoned")
    }
}

impl StorageBackend for SharedKv {
    fn len(&self) -> Result<u64, io::Error> {
        let bytes = self.bytes.read().map_err(|_| Self::poisoned())?;
        Ok(bytes.len() as u64)
    }

    fn read(&self, offset: u64, len: usize) -> Result<Vec<u8>, io::Error> {
        let bytes = self.bytes.read().map_err(|_| Self::poisoned())?;
        let start = usize::try_from(offset).map_err(io::Error::other)?;
        let end = start
            .checked_add(len)
            .filter(|end| *end <= bytes.len())
            .ok_or_else(|| io::Error::new(io::ErrorKind::UnexpectedEof, "read past the end"))?;
        Ok(bytes[start..end].to_vec())
    }

    fn set_len(&self, len: u64) -> Result<(), io::Error> {
        let mut bytes = self.bytes.write().map_err(|_| Self::poisoned())?;
        bytes.resize(usize::try_from(len).map_err(io::Error::other)?, 0);
        Ok(())
    }

    fn sync_data(&self, _eventual: bool) -> Result<(), io::Error> {
        Ok(())
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), io::Error> {
        let mut bytes = self.bytes.write().map_err(|_| Self::poisoned())?;
        let start = usize::try_from(offset).map_err(io::Error::other)?;
        let end = start
            .checked_add(data.len())
            .ok_or_else(|| io::Error::other("write past the address space"))?;
        if end > bytes.len() {
            bytes.resize(end, 0);
        }
        bytes[start..end].copy_from_slice(data);
        Ok(())
    }
}
