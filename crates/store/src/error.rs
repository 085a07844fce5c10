//! The store's error type.
//!
//! Owns the split between caller errors (no such object, limits), data errors (checksum
//! mismatch: never bad bytes), and fatal errors (device or KV failure: the store stops accepting
//! work and must be remounted, never retried). It must never turn a device error into success.

use cairn_blockdev::BlockDevError;

/// Result alias for store operations.
pub type Result<T> = std::result::Result<T, StoreError>;

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The collection does not exist.
    #[error("no such collection {0:?}")]
    NoSuchCollection(String),
    /// The collection already exists.
    #[error("collection {0:?} already exists")]
    CollectionExists(String),
    /// The collection still holds objects.
    #[error("collection {0:?} is not empty")]
    CollectionNotEmpty(String),
    /// The object does not exist.
    #[error("no such object {object:?} in collection {collection:?}")]
    NoSuchObject {
        /// Collection name.
        collection: String,
        /// Object name.
        object: String,
    },
    /// An xattr was asked for that the object does not have.
    #[error("no such attribute {0:?}")]
    NoSuchAttr(String),
    /// A name, value, size or count exceeds an explicit limit.
    #[error("limit exceeded: {0}")]
    Limit(String),
    /// Stored data does not match its checksum: the bytes are not returned.
    #[error("checksum mismatch in {collection}/{object} block {block_index} (expected {expected_crc:#010x}, found {actual_crc:#010x})")]
    ChecksumMismatch {
        /// Collection name.
        collection: String,
        /// Object name.
        object: String,
        /// Logical block index within the object.
        block_index: u64,
        /// crc32c recorded at write time.
        expected_crc: u32,
        /// crc32c of what the device returned.
        actual_crc: u32,
    },
    /// The device could not read an object's data (EIO). Not fatal: the store stays usable,
    /// and the copy is to be repaired from another (a daemon replaces it).
    #[error("cannot read {collection}/{object}'s data: {detail}")]
    DataUnreadable {
        /// Collection name.
        collection: String,
        /// Object name.
        object: String,
        /// What the device said.
        detail: String,
    },
    /// A metadata record failed its own checksum or version check, or metadata is inconsistent.
    #[error("corrupt metadata: {0}")]
    Corrupt(String),
    /// The device has no room for the data.
    #[error("out of space: need {needed_blocks} blocks, {free_blocks} free")]
    NoSpace {
        /// Blocks requested.
        needed_blocks: u64,
        /// Blocks free.
        free_blocks: u64,
    },
    /// The device failed (EIO, failed flush, power loss). Fatal: the store is now failed.
    #[error("device error (store is now failed): {0}")]
    Device(#[from] BlockDevError),
    /// The metadata KV failed. Fatal: the store is now failed.
    #[error("metadata KV error (store is now failed): {0}")]
    Kv(Box<redb::Error>),
    /// An earlier fatal error stopped the store; remount to recover.
    #[error("store failed earlier and accepts no more operations: {0}")]
    Failed(String),
    /// The device holds a store of another on-disk format generation (no conversion exists:
    /// make a new store with mkfs).
    #[error("store format {found:?} is not supported (this version reads {supported:?}); make a new store with mkfs")]
    UnsupportedFormat {
        /// Magic found in device block 0.
        found: String,
        /// Magic this version writes and reads.
        supported: String,
    },
    /// The transaction was not applied because its submitter was dropped (cancelled) while its
    /// data was being written early; nothing of it is applied.
    #[error("transaction not applied: {0}")]
    Cancelled(String),
    /// The metadata KV file is locked by another process: another instance of this store is
    /// running on it, or is still exiting. Nothing was opened; mounting again later may work.
    #[error("metadata KV {0} is locked by another process (the store is open elsewhere, or its last user is still exiting)")]
    Locked(String),
    /// The store configuration or device geometry is invalid, or device and KV do not match.
    #[error("invalid configuration: {0}")]
    Config(String),
}

impl StoreError {
    /// True when this copy of one object cannot be read back (a block failing its checksum,
    /// or the device failing to read it) while the store goes on: another copy can replace it.
    pub fn is_damaged_copy(&self) -> bool {
        matches!(
            self,
            StoreError::ChecksumMismatch { .. } | StoreError::DataUnreadable { .. }
        )
    }

    /// True for errors after which the store refuses all further work.
    pub fn is_fatal(&self) -> bool {
        matches!(
            self,
            StoreError::Device(_) | StoreError::Kv(_) | StoreError::Failed(_)
        )
    }
}

/// Converts any redb error into [`StoreError::Kv`].
pub(crate) fn kv<E: Into<redb::Error>>(e: E) -> StoreError {
    StoreError::Kv(Box::new(e.into()))
}
