//! Durable map storage for the monitor, on the object store (so disks are touched only through
//! `cairn-blockdev`): the encoded map (checksummed envelope) is one object, replaced atomically
//! and durably with each epoch. The daemon saves an epoch before it replies to or publishes it.

use std::path::Path;
use std::sync::Arc;

use cairn_blockdev::{BlockDevice, FileDevice, FileDeviceOptions};
use cairn_store::{KvLocation, Store, StoreConfig, StoreError, Transaction};

use crate::error::MonError;
use crate::map::ClusterMap;

const COLLECTION: &str = "mon";
const OBJECT: &str = "osdmap";
/// Size of the monitor's device file.
pub const DEVICE_BYTES: u64 = 256 << 20;

/// The monitor's store.
pub struct MapStore {
    store: Store,
}

fn err(e: impl std::fmt::Display) -> MonError {
    MonError::Invalid(format!("map store: {e}"))
}

impl MapStore {
    /// Opens (creating on first use) the store in `dir` (`block` and `kv.redb`).
    pub async fn open(dir: &Path) -> Result<MapStore, MonError> {
        std::fs::create_dir_all(dir).map_err(err)?;
        let kv = dir.join("kv.redb");
        let fresh = !kv.exists();
        let dev: Arc<dyn BlockDevice> = Arc::new(
            FileDevice::open(
                &dir.join("block"),
                &FileDeviceOptions {
                    size_bytes: Some(DEVICE_BYTES),
                    ..FileDeviceOptions::default()
                },
            )
            .map_err(err)?,
        );
        if fresh {
            Store::mkfs(
                dev.clone(),
                KvLocation::File(kv.clone()),
                &StoreConfig::default(),
            )
            .await
            .map_err(err)?;
            let store = Store::mount(
                dev.clone(),
                KvLocation::File(kv.clone()),
                StoreConfig::default(),
            )
            .await
            .map_err(err)?;
            let mut txn = Transaction::new();
            txn.create_collection(COLLECTION);
            store.queue_transaction_owned(txn).await.map_err(err)?;
            return Ok(MapStore { store });
        }
        let store = Store::mount(dev, KvLocation::File(kv), StoreConfig::default())
            .await
            .map_err(err)?;
        Ok(MapStore { store })
    }

    /// The last saved map, if any; a damaged map is an error, never a silent reset.
    pub async fn load(&self) -> Result<Option<ClusterMap>, MonError> {
        match self.store.read(COLLECTION, OBJECT, 0, u64::MAX).await {
            Ok(bytes) => ClusterMap::decode(&bytes).map(Some),
            Err(StoreError::NoSuchObject { .. }) => Ok(None),
            Err(e) => Err(err(e)),
        }
    }

    /// Replaces the saved map with `map`, durably, in one transaction.
    pub async fn save(&self, map: &ClusterMap) -> Result<(), MonError> {
        let bytes = map.encode();
        let mut txn = Transaction::new();
        txn.truncate(COLLECTION, OBJECT, 0)
            .write(COLLECTION, OBJECT, 0, &bytes);
        self.store.queue_transaction_owned(txn).await.map_err(err)
    }

    /// Unmounts cleanly.
    pub async fn close(self) -> Result<(), MonError> {
        self.store.umount().await.map_err(err)
    }
}
