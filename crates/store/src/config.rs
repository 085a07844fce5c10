//! Store configuration: sizes, thresholds and limits, all explicit and checked.
//!
//! Owns defaults and validation. It must never be changed on a mounted store except through a
//! remount (the block size is fixed at mkfs and recorded in the superblock).

use crate::error::{Result, StoreError};

/// Tunables of a store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreConfig {
    /// Allocation unit and checksum granularity, bytes (power of two, >= device alignment).
    pub block_bytes: u64,
    /// A write shorter than this into space the object does not have yet (a new object, an
    /// append) is deferred: its new block contents travel in the group's log record (one
    /// device write and one flush commit it) and are written in place later by a background
    /// checkpoint, next to each other. Longer writes are copy-on-write to newly allocated
    /// blocks (data written once, beside the record). Default: 16 KiB, so 4-12 KiB writes of new
    /// data are deferred.
    pub deferred_max_bytes: u64,
    /// A write shorter than this over blocks the object already has is deferred (and one of at
    /// least `deferred_max_bytes` never is). Default: one block (4 KiB), so only writes of part
    /// of a block are deferred over existing data, as BlueStore does on SSDs
    /// (`bluestore_prefer_deferred_size_ssd` 0): a deferred overwrite is written twice, the
    /// second time in place at a random spot, which the device's flushes pay for (4 KiB random
    /// overwrites at 16 in flight over 1000 objects of 4 MiB: 21.5-23.2k IOPS deferred,
    /// 30.2-37.2k copy-on-write; docs/design/store.md). On a rotational device (the device's
    /// properties say which at mount) `deferred_max_bytes` applies to overwrites too: there a
    /// deferred write turns a random write into a log append.
    pub deferred_overwrite_max_bytes: u64,
    /// Start a background checkpoint, which applies the pending deferred writes in place, once
    /// this many bytes are pending (it also starts every `wal_checkpoint_records` records).
    pub deferred_batch_bytes: u64,
    /// Largest single device I/O the store issues, bytes.
    pub max_io_bytes: u64,
    /// Most user data (bytes) one transaction may carry.
    pub max_txn_bytes: u64,
    /// Most bytes one read may return (reads of more fail with `Limit`; read in pieces).
    pub max_read_bytes: u64,
    /// Most operations in one transaction.
    pub max_txn_ops: usize,
    /// Most transactions committed together by one group commit.
    pub max_group_txns: usize,
    /// Most group commits whose writes are in flight at once (1 or 2). With 2, a group stages
    /// and starts its writes while the previous group's are still running, but only behind a
    /// group that writes at least `pipeline_min_cow_bytes` copy-on-write: there the device's
    /// data writes are the bottleneck and a second group keeps it busy (1 OSD, 4 MiB writes:
    /// 1.13-1.27x); behind a group of small writes it would only halve the groups and cost CPU
    /// (4 KiB writes: 0.8-0.9x), so those groups keep one in flight. Default 2.
    pub max_groups_in_flight: usize,
    /// Copy-on-write bytes a group in flight must write for the next group to be launched
    /// behind it (with `max_groups_in_flight` 2); 0 pipelines every group.
    pub pipeline_min_cow_bytes: u64,
    /// A write of at least this many bytes (and at least `deferred_max_bytes`) at a
    /// block-aligned offset and length is written early: its submitter takes its blocks and
    /// writes its data at once, before its group forms, and the group commit only logs and
    /// flushes (BlueStore's order). Without it a group writes its data once launched, so the
    /// device holds at most `max_groups_in_flight` groups' data while later submitters queue.
    /// 0 writes nothing early. Default 1 MiB.
    pub early_write_min_bytes: u64,
    /// Longest object or collection name, bytes.
    pub max_name_bytes: usize,
    /// Largest xattr or omap value, bytes.
    pub max_value_bytes: usize,
    /// Largest object size, bytes.
    pub max_object_bytes: u64,
    /// redb page cache size, bytes.
    pub kv_cache_bytes: usize,
    /// Free I/O buffers kept for reuse, bytes (0 keeps none). A buffer a read or write needs is
    /// taken from them when one of its length is free; a new one costs the kernel a page fault
    /// and a page of zeros per 4 KiB (or per 2 MiB huge page) first touched. Default 64 MiB:
    /// 16 reads of 4 MiB in flight, an OSD serving `rados bench`'s default, come back to it
    /// (with 16 MiB kept, most 4 MiB reads took fresh memory: 10% of the store bench's CPU was
    /// the kernel zeroing it; docs/results/2026-11-27-store-lookups-buffers-cache.md).
    pub io_buffer_pool_bytes: usize,
    /// Onode cache size, bytes: committed size and extent maps of recently read objects, so a
    /// read that hits it needs no KV lookup (0 disables it).
    pub meta_cache_bytes: usize,
    /// Size of the write-ahead log ring on the data device, bytes, fixed at mkfs (capped at a
    /// sixteenth of the device; 0: no log, every group commit flushes the device and then syncs
    /// the KV). With the log a group commit costs one device flush.
    pub wal_bytes: u64,
    /// A background checkpoint (durable KV commit of the overlay, on a thread of its own while
    /// commits go on) starts after this many logged group commits (or a quarter of the ring);
    /// at twice this many since the last durable checkpoint a group waits for it. Bounds replay
    /// at mount and the in-memory overlay.
    pub wal_checkpoint_records: u64,
    /// Most bytes (keys and values) the in-memory overlay of changes since the last checkpoint
    /// holds before the next group checkpoints in the foreground (a background checkpoint starts
    /// at half of it).
    pub max_overlay_bytes: usize,
    /// Nice value (0-19) of the background checkpoint thread. Its redb commit is CPU-bound for
    /// milliseconds; at the daemons' priority it takes a CPU from the threads that complete
    /// the group commits' device writes, and those writes then wait behind it (1 OSD, 4 KiB
    /// writes: one record write in twenty took over 1 ms during a checkpoint's KV commit at
    /// nice 0, one in three hundred at 19). A checkpoint that falls behind is still bounded:
    /// at `wal_checkpoint_records` twice over, commits wait for it. Default 19.
    pub checkpoint_nice: i32,
    /// Whether checkpoints run on a thread of their own (true, the default) or inline in the
    /// commit that starts them: a simulation that must not depend on a thread's timing (the
    /// cluster simulation, `crates/sim`) runs them inline.
    pub checkpoint_in_background: bool,
    /// In-place writes a checkpoint keeps in flight (1 ..= 64). One at a time by default: on a
    /// bare HDD the checkpoint's random writes then leave the disk's queue to the clients. A
    /// device with a fast write cache in front of the HDD (an OSD's SSD cache) takes several
    /// at once at no cost to them, and checkpoints then keep up with a small-write load.
    pub checkpoint_io_depth: usize,
    /// Whether commits are paced to a running checkpoint (module `throttle`): smoother
    /// per-second rates and lower tail latency where the data device applies deferred writes
    /// slower than clients send them, for fewer small writes sustained there. Default true.
    pub commit_pacing: bool,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            block_bytes: 4096,
            deferred_max_bytes: 16 << 10,
            deferred_overwrite_max_bytes: 4 << 10,
            deferred_batch_bytes: 4 << 20,
            max_io_bytes: 8 << 20,
            max_txn_bytes: 256 << 20,
            max_read_bytes: 256 << 20,
            max_txn_ops: 65536,
            max_group_txns: 64,
            max_groups_in_flight: 2,
            pipeline_min_cow_bytes: 1 << 20,
            early_write_min_bytes: 1 << 20,
            max_name_bytes: 1024,
            max_value_bytes: 1 << 20,
            max_object_bytes: 1 << 40,
            kv_cache_bytes: 64 << 20,
            io_buffer_pool_bytes: 64 << 20,
            meta_cache_bytes: 32 << 20,
            wal_bytes: 64 << 20,
            wal_checkpoint_records: 256,
            max_overlay_bytes: 64 << 20,
            checkpoint_nice: 19,
            commit_pacing: true,
            checkpoint_in_background: true,
            checkpoint_io_depth: 1,
        }
    }
}

impl StoreConfig {
    /// Blocks of write-ahead log ring for a device of `device_bytes`: `wal_bytes` capped at a
    /// sixteenth of the device, in whole blocks (0 when that leaves fewer than 8).
    pub fn wal_blocks_for(&self, device_bytes: u64) -> u64 {
        let blocks = self.wal_bytes.min(device_bytes / 16) / self.block_bytes;
        if blocks < 8 {
            0
        } else {
            blocks
        }
    }

    /// This configuration as a store on a device that is `rotational` or not uses it (the
    /// deferred-write thresholds depend on the kind).
    pub fn for_device(mut self, rotational: bool) -> Self {
        if rotational {
            self.deferred_overwrite_max_bytes = self.deferred_max_bytes;
        }
        self
    }

    /// Checks the configuration against a device alignment.
    pub fn validate(&self, device_alignment_bytes: u64) -> Result<()> {
        let bad = |m: String| Err(StoreError::Config(m));
        if !self.block_bytes.is_power_of_two() || self.block_bytes < 512 {
            return bad(format!(
                "block_bytes {} must be a power of two >= 512",
                self.block_bytes
            ));
        }
        if !self
            .block_bytes
            .is_multiple_of(device_alignment_bytes.max(1))
        {
            return bad(format!(
                "block_bytes {} must be a multiple of the device alignment {device_alignment_bytes}",
                self.block_bytes
            ));
        }
        if self.max_io_bytes < self.block_bytes || self.max_txn_ops == 0 || self.max_name_bytes == 0
        {
            return bad("max_io_bytes must be >= block_bytes and limits non-zero".into());
        }
        if !(1..=crate::inflight::MAX_IN_FLIGHT).contains(&self.max_groups_in_flight) {
            return bad(format!(
                "max_groups_in_flight {} must be 1..={}",
                self.max_groups_in_flight,
                crate::inflight::MAX_IN_FLIGHT
            ));
        }
        if !(1..=64).contains(&self.checkpoint_io_depth) {
            return bad(format!(
                "checkpoint_io_depth {} must be 1..=64",
                self.checkpoint_io_depth
            ));
        }
        if !(0..=19).contains(&self.checkpoint_nice) {
            return bad(format!(
                "checkpoint_nice {} must be 0..=19",
                self.checkpoint_nice
            ));
        }
        if self.max_name_bytes > u16::MAX as usize {
            return bad("max_name_bytes must fit in 16 bits".into());
        }
        Ok(())
    }
}
