#![deny(clippy::cast_possible_truncation)]
#![warn(missing_docs)]
//! A BlueStore-style object store for cairn OSDs.
//!
//! Data lives on one [`cairn_blockdev::BlockDevice`]; metadata (collections, objects, extent
//! maps with a crc32c per block, xattrs, omaps, deferred writes) lives in an embedded redb
//! database. Transactions are atomic and durable: new data is written copy-on-write to free
//! blocks together with a redo record of the metadata in a write-ahead log ring on the same
//! device, and one device flush commits both (data written once, no journal double write; the
//! KV is synced only at checkpoints); sub-block overwrites are logged as deferred writes and
//! applied in place later. Every
//! read is verified against its checksum. See `docs/design/store.md` and
//! `docs/design/store-durability.md` for the design and the crash model.
//!
//! This crate must never touch a disk except through its `BlockDevice` (and redb's own file),
//! and never retry a failed device write or flush: such errors fail the store.

pub mod alloc;
mod apply;
mod bufpool;
mod cache;
mod checkpoint;
pub mod codec;
pub mod config;
mod early;
pub mod error;
mod extmap;
pub mod fsck;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
mod inflight;
mod keyfilter;
pub mod kv;
mod logged;
mod overlay;
mod paced;
mod pins;
mod read;
mod replay;
mod stage;
pub mod store;
mod throttle;
pub mod txn;
mod usage;
mod wal;

pub use config::StoreConfig;
pub use error::{Result, StoreError};
pub use fsck::FsckReport;
pub use kv::{CrashableKv, KvLossMode};
pub use read::{OmapPage, MAX_LIST_ENTRIES, RUNS_IN_FLIGHT};
pub use store::{BacklogGauge, KvLocation, ObjectStat, Store, StoreStats};
pub use txn::{DataCrcs, Op, Transaction};
pub use usage::CollectionUsage;
