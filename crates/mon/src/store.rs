//! Durable map storage for the monitor, on the object store (so disks are touched only through
//! `cairn-blockdev`): the encoded map (checksummed envelope) is one object, replaced atomically
//! and durably with each epoch, in the same transaction as the epoch's incremental (one object
//! per epoch, `inc.` and the zero-padded epoch) and, when the history was trimmed, its new base
//! map. The daemon saves an epoch before it replies to or publishes it.

// A narrowing cast in a byte format would silently write a wrong length: conversions here
// are checked (`try_from`).
#![deny(clippy::cast_possible_truncation)]

use std::path::Path;
use std::sync::{Arc, Mutex};

use cairn_blockdev::{BlockDevice, FileDevice, FileDeviceOptions};
use cairn_store::{KvLocation, Store, StoreConfig, StoreError, Transaction};

use cairn_clustermap::ClusterMap;
use cairn_clustermap::Incremental;
use cairn_clustermap::MapHistory;
use cairn_proto::mon::MonError;

const COLLECTION: &str = "mon";
const OBJECT: &str = "osdmap";
/// The history's base map.
const BASE: &str = "history.base";
/// The authentication database (see [`crate::auth_db`]).
const AUTH: &str = "auth";
/// Prefix of the history's incrementals, one object per epoch.
const INCREMENTAL_PREFIX: &str = "inc.";

fn incremental_object(epoch: u64) -> String {
    format!("{INCREMENTAL_PREFIX}{epoch:020}")
}
/// Size of the monitor's device file.
pub const DEVICE_BYTES: u64 = 256 << 20;

/// The monitor's store.
pub struct MapStore {
    store: Store,
    /// The oldest and newest history epochs saved so far.
    saved: Mutex<Option<(u64, u64)>>,
}

fn err(e: impl std::fmt::Display) -> MonError {
    MonError::Invalid(format!("map store: {e}"))
}

fn err_poisoned<T>(_: std::sync::PoisonError<T>) -> MonError {
    MonError::Invalid("map store: state poisoned".into())
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
        }
        let store = Store::mount(dev, KvLocation::File(kv), StoreConfig::default())
            .await
            .map_err(err)?;
        MapStore::on_store(store).await
    }

    /// The monitor's store on `store`, mounted by the caller (a simulation's in-memory disks),
    /// its collection made on first use.
    pub async fn on_store(store: Store) -> Result<MapStore, MonError> {
        let collections = store.list_collections().await.map_err(err)?;
        if !collections.iter().any(|c| c == COLLECTION) {
            let mut txn = Transaction::new();
            txn.create_collection(COLLECTION);
            store.queue_transaction_owned(txn).await.map_err(err)?;
        }
        Ok(MapStore {
            store,
            saved: Mutex::new(None),
        })
    }

    /// The monitor this store holds: its last saved map and history, or a new map of `fsid`
    /// when none was saved (the first start).
    pub async fn load_monitor(
        &self,
        fsid: &str,
        config: crate::monitor::MonConfig,
    ) -> Result<crate::monitor::Monitor, MonError> {
        let map = match self.load().await? {
            Some(map) => map,
            None => ClusterMap::new(fsid)?,
        };
        let history = self.load_history(&map).await?;
        Ok(crate::monitor::Monitor::with_history(map, history, config))
    }

    /// The last saved map, if any; a damaged map is an error, never a silent reset.
    pub async fn load(&self) -> Result<Option<ClusterMap>, MonError> {
        match self.store.read(COLLECTION, OBJECT, 0, u64::MAX).await {
            Ok(bytes) => Ok(Some(ClusterMap::decode(&bytes)?)),
            Err(StoreError::NoSuchObject { .. }) => Ok(None),
            Err(e) => Err(err(e)),
        }
    }

    /// The saved history that ends at `map` (a history beginning at `map` when none was saved,
    /// as by a monitor of an earlier version); a damaged one is an error.
    pub async fn load_history(&self, map: &ClusterMap) -> Result<MapHistory, MonError> {
        let base = match self.store.read(COLLECTION, BASE, 0, u64::MAX).await {
            Ok(bytes) => ClusterMap::decode(&bytes)?,
            Err(StoreError::NoSuchObject { .. }) => return Ok(MapHistory::new(map)),
            Err(e) => return Err(err(e)),
        };
        let mut incrementals = Vec::new();
        let mut after = INCREMENTAL_PREFIX.to_string();
        'pages: loop {
            let page = self
                .store
                .list_objects(COLLECTION, Some(&after), 1000)
                .await
                .map_err(err)?;
            let Some(last) = page.last() else { break };
            after = last.clone();
            for name in page {
                let Some(epoch) = name.strip_prefix(INCREMENTAL_PREFIX) else {
                    break 'pages;
                };
                // Left by a monitor that began its history again: older than its base.
                if epoch.parse::<u64>().map_err(err)? <= base.epoch {
                    continue;
                }
                let bytes = self
                    .store
                    .read(COLLECTION, &name, 0, u64::MAX)
                    .await
                    .map_err(err)?;
                incrementals.push(Incremental::decode(&bytes)?);
            }
        }
        let history = MapHistory::from_parts(base, incrementals)?;
        *self.saved.lock().map_err(err_poisoned)? =
            Some((history.oldest_epoch(), history.newest_epoch()));
        Ok(history)
    }

    /// Saves `map` and what `history` gained (and lost to trimming) since the last save,
    /// durably, in one transaction.
    pub async fn save(&self, map: &ClusterMap, history: &MapHistory) -> Result<(), MonError> {
        let bytes = map.encode();
        let mut txn = Transaction::new();
        txn.truncate(COLLECTION, OBJECT, 0)
            .write(COLLECTION, OBJECT, 0, &bytes);
        let saved = *self.saved.lock().map_err(err_poisoned)?;
        let (old_base, old_newest) = saved.unwrap_or((u64::MAX, 0));
        if saved.is_none() || history.oldest_epoch() != old_base {
            let base = history.base().encode();
            txn.truncate(COLLECTION, BASE, 0)
                .write(COLLECTION, BASE, 0, &base);
        }
        if let Some((old_base, _)) = saved {
            for epoch in old_base + 1..=history.oldest_epoch() {
                txn.remove(COLLECTION, &incremental_object(epoch));
            }
        }
        for inc in history.incrementals().filter(|i| i.epoch > old_newest) {
            let name = incremental_object(inc.epoch);
            txn.truncate(COLLECTION, &name, 0)
                .write(COLLECTION, &name, 0, &inc.encode());
        }
        self.store.queue_transaction_owned(txn).await.map_err(err)?;
        *self.saved.lock().map_err(err_poisoned)? =
            Some((history.oldest_epoch(), history.newest_epoch()));
        Ok(())
    }

    /// The saved authentication database's bytes, if one was saved.
    pub async fn load_auth(&self) -> Result<Option<Vec<u8>>, MonError> {
        match self.store.read(COLLECTION, AUTH, 0, u64::MAX).await {
            Ok(bytes) => Ok(Some(bytes.to_vec())),
            Err(StoreError::NoSuchObject { .. }) => Ok(None),
            Err(e) => Err(err(e)),
        }
    }

    /// Replaces the saved authentication database, durably.
    pub async fn save_auth(&self, bytes: &[u8]) -> Result<(), MonError> {
        let mut txn = Transaction::new();
        txn.truncate(COLLECTION, AUTH, 0)
            .write(COLLECTION, AUTH, 0, bytes);
        self.store.queue_transaction_owned(txn).await.map_err(err)
    }

    /// Unmounts cleanly.
    pub async fn close(self) -> Result<(), MonError> {
        self.store.umount().await.map_err(err)
    }
}
