//! An OSD whose store keeps its superblock and write-ahead log on a fast device of their own
//! (BlueStore's "WAL/DB device"): the file `block.db` in the data directory, optionally
//! emulating an SSD profile, holds the first bytes of the store's device — the superblock and
//! the log ring, whose records every commit writes and whose deferred small writes wait there —
//! while the data stays on the data device ([`SplitDevice`]). A commit whose only write is its
//! log record then waits for the fast device alone; the data device is written in place in
//! the background.
//!
//! The store's metadata KV (`kv.redb`) is a file of the host's file system in every layout, so
//! the device timing models see the log and the data, not the KV's checkpoints.

use std::path::Path;
use std::sync::Arc;

use cairn_blockdev::{BlockDevice, SplitDevice};
use cairn_store::StoreConfig;

use crate::error::OsdError;

/// The DB device's file in the OSD's data directory.
pub const DB_FILE: &str = "block.db";

/// Where the store's log goes when it has a device of its own.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OsdDbConfig {
    /// Emulate this device profile over the DB file (`nvme-p3700`, ...; None: the file as it
    /// is).
    pub profile: Option<String>,
}

/// Bytes of the store's device that live on the DB device: the superblock and the log ring
/// a store made with `store` on `device_bytes` has.
pub fn db_bytes(store: &StoreConfig, device_bytes: u64) -> Result<u64, OsdError> {
    let log_blocks = store.wal_blocks_for(device_bytes);
    if log_blocks == 0 {
        return Err(OsdError::Config(format!(
            "a device of {device_bytes} bytes is too small for a log ring, so for a DB device"
        )));
    }
    Ok(store.block_bytes * (1 + log_blocks))
}

/// Checks that the data directory's layout matches the configuration: a store made with a DB
/// device cannot start without it, nor one made without start with one (its superblock and
/// log are where it was made with them).
pub fn check_layout(data_dir: &Path, wants_db: bool, fresh: bool) -> Result<(), OsdError> {
    let has_db = data_dir.join(DB_FILE).exists();
    match (fresh, wants_db, has_db) {
        (false, true, false) => Err(OsdError::Config(format!(
            "the store in {} was made without a DB device; one cannot be added (make a new OSD)",
            data_dir.display()
        ))),
        (false, false, true) => Err(OsdError::Config(format!(
            "the store in {} keeps its log on {DB_FILE}: start it with its DB device",
            data_dir.display()
        ))),
        _ => Ok(()),
    }
}

/// The store's device: the first [`db_bytes`] from the DB file (created if missing), the rest
/// from `data`.
pub fn open(
    data_dir: &Path,
    cfg: &OsdDbConfig,
    data: Arc<dyn BlockDevice>,
    store: &StoreConfig,
) -> Result<Arc<dyn BlockDevice>, OsdError> {
    let split_bytes = db_bytes(store, data.properties().size_bytes)?;
    let path = data_dir.join(DB_FILE);
    if let Ok(meta) = std::fs::metadata(&path) {
        if meta.len() != split_bytes {
            return Err(OsdError::Config(format!(
                "{} has {} bytes, the store's superblock and log take {split_bytes}",
                path.display(),
                meta.len()
            )));
        }
    }
    let fast = crate::side_device::open(&path, split_bytes, cfg.profile.as_deref())?;
    Ok(Arc::new(SplitDevice::new(fast, data, split_bytes)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_db_device_holds_the_superblock_and_the_log() {
        let store = StoreConfig::default();
        let bytes = db_bytes(&store, 10 << 30).unwrap();
        assert_eq!(bytes, store.block_bytes + store.wal_bytes);
        let small = db_bytes(&store, 256 << 20).unwrap();
        assert_eq!(small, store.block_bytes + (16 << 20));
        assert!(db_bytes(&store, 64 << 10).is_err());
    }

    #[test]
    fn a_store_keeps_the_layout_it_was_made_with() {
        let dir = tempfile::tempdir().unwrap();
        assert!(check_layout(dir.path(), true, true).is_ok());
        assert!(check_layout(dir.path(), false, false).is_ok());
        let err = check_layout(dir.path(), true, false).unwrap_err();
        assert!(err.to_string().contains("without a DB device"), "{err}");
        std::fs::write(dir.path().join(DB_FILE), b"").unwrap();
        assert!(check_layout(dir.path(), true, false).is_ok());
        let err = check_layout(dir.path(), false, false).unwrap_err();
        assert!(
            err.to_string().contains("start it with its DB device"),
            "{err}"
        );
    }
}
