//! The [`BlockDevice`] trait: the contract between storage code and disks.
//!
//! Owns the interface and the argument checks shared by all implementations. It must never
//! depend on a particular runtime feature beyond `Send` futures, so that a cache device, the
//! store and simulations can all stack devices freely (`Arc<dyn BlockDevice>`).
//!
//! # Contract
//!
//! * Offsets and lengths are in bytes and must be multiples of
//!   [`DeviceProperties::alignment_bytes`]; ranges must lie inside `size_bytes`. Violations return
//!   [`BlockDevError::Misaligned`] / [`BlockDevError::OutOfRange`] and touch nothing.
//!   A zero-length read or write is valid and does nothing.
//! * Many operations may be in flight at once (call the methods concurrently from several tasks);
//!   the device may complete them in any order. Two overlapping writes in flight at the same time
//!   have an undefined winner: callers order them.
//! * A completed `write` is visible to later `read`s but is **not durable** until a later
//!   `flush` completes. After power loss, any subset of unflushed writes may have survived, and the
//!   last one may be torn at a [`SECTOR_BYTES`] boundary ([`crate::FaultDevice`] simulates this).
//! * `flush` makes every write that completed before `flush` was called durable. An error from
//!   `flush` means durability is unknown: callers must treat it as fatal and never retry.
//! * `discard` is a hint that the range is no longer needed; its contents become unspecified
//!   (zeros on the memory device). It needs no flush to be safe to ignore.
//! * Buffers may live anywhere in memory: implementations that need aligned memory (O_DIRECT)
//!   copy through their own aligned buffers.

use crate::aligned::AlignedBuf;
use crate::error::{BlockDevError, Result};
use async_trait::async_trait;

/// The sector size used for torn-write simulation and the smallest alignment any device states.
pub const SECTOR_BYTES: u64 = 512;

/// The kinds of operations a device performs (used in errors, fault rules and timing models).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IoKind {
    /// Read bytes.
    Read,
    /// Write bytes.
    Write,
    /// Make completed writes durable.
    Flush,
    /// Drop the contents of a range.
    Discard,
}

/// One operation as seen by a timing model: kind, byte offset and length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IoRequest {
    /// What the operation does.
    pub kind: IoKind,
    /// Byte offset on the device (0 for flush).
    pub offset_bytes: u64,
    /// Length in bytes (0 for flush).
    pub len_bytes: u64,
}

/// Static properties of a device, fixed for its lifetime.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceProperties {
    /// Capacity in bytes (a multiple of `alignment_bytes`).
    pub size_bytes: u64,
    /// Offsets and lengths of every operation must be multiples of this (a power of two >= 512).
    pub alignment_bytes: u64,
    /// True for spinning media: sequential placement matters much more than on flash.
    pub rotational: bool,
    /// The I/O size at which the device reaches its bandwidth; allocators should place data in
    /// runs of at least this size when they can.
    pub optimal_io_bytes: u64,
    /// Most operations the device accepts in flight at once; more return
    /// [`BlockDevError::QueueFull`] on devices that enforce it.
    pub max_queue_depth: usize,
}

/// An asynchronous block device. See the module documentation for the full contract.
#[async_trait]
pub trait BlockDevice: Send + Sync + std::fmt::Debug {
    /// The device's fixed properties.
    fn properties(&self) -> DeviceProperties;

    /// Reads `buf.len()` bytes starting at `offset_bytes` into `buf`.
    async fn read(&self, offset_bytes: u64, buf: &mut [u8]) -> Result<()>;

    /// Reads `buf.len()` bytes starting at `offset_bytes` into an owned buffer and hands it
    /// back filled. Devices that pass the I/O to another thread (the file device) read straight
    /// into `buf` when it is aligned for their I/O, instead of into a buffer of their own that
    /// is then copied; the default goes through `read`.
    async fn read_owned(&self, offset_bytes: u64, mut buf: AlignedBuf) -> Result<AlignedBuf> {
        self.read(offset_bytes, buf.as_mut_slice()).await?;
        Ok(buf)
    }

    /// Writes `data` at `offset_bytes`. Not durable until a later [`BlockDevice::flush`].
    async fn write(&self, offset_bytes: u64, data: &[u8]) -> Result<()>;

    /// Writes an owned buffer at `offset_bytes`, with the contract of [`BlockDevice::write`],
    /// and hands the buffer back (for reuse). Devices that pass the bytes to another thread (the
    /// file device) take the buffer as it is instead of copying it into one of their own; the
    /// default goes through `write`.
    async fn write_owned(&self, offset_bytes: u64, buf: AlignedBuf) -> Result<AlignedBuf> {
        self.write(offset_bytes, buf.as_slice()).await?;
        Ok(buf)
    }

    /// Writes shared, immutable bytes at `offset_bytes`, with the contract of
    /// [`BlockDevice::write`]. Devices that pass the bytes to another thread (the file device)
    /// write from `data` itself when it is aligned for their I/O, instead of copying it into a
    /// buffer of their own; the default goes through `write`.
    async fn write_shared(&self, offset_bytes: u64, data: bytes::Bytes) -> Result<()> {
        self.write(offset_bytes, &data).await
    }

    /// Writes an owned buffer at `offset_bytes` and returns once that write is durable, as a
    /// [`BlockDevice::write_owned`] followed by a [`BlockDevice::flush`] would (the default
    /// does exactly that). Devices that can make one write durable by itself do so in one
    /// operation (the file device: `pwritev2` with `RWF_DSYNC`), which saves a system call and
    /// a thread hand-off per commit. Only this write is promised durable: other writes in
    /// flight or completed before it need a `flush`. An error means its durability is unknown
    /// and is fatal for the caller, as for `flush`.
    async fn write_owned_durable(&self, offset_bytes: u64, buf: AlignedBuf) -> Result<AlignedBuf> {
        let buf = self.write_owned(offset_bytes, buf).await?;
        self.flush().await?;
        Ok(buf)
    }

    /// Makes all writes completed before this call durable. An error is fatal for the caller.
    async fn flush(&self) -> Result<()>;

    /// Declares `len_bytes` at `offset_bytes` unused; contents become unspecified.
    async fn discard(&self, offset_bytes: u64, len_bytes: u64) -> Result<()>;
}

/// Checks alignment and range of an operation against `props`; every implementation calls this
/// before touching anything, so misuse is a typed error and never a partial operation.
pub fn check_io(
    props: &DeviceProperties,
    kind: IoKind,
    offset_bytes: u64,
    len_bytes: u64,
) -> Result<()> {
    let align = props.alignment_bytes.max(1);
    if !offset_bytes.is_multiple_of(align) || !len_bytes.is_multiple_of(align) {
        return Err(BlockDevError::Misaligned {
            kind,
            offset_bytes,
            len_bytes,
            alignment_bytes: align,
        });
    }
    let end = offset_bytes.checked_add(len_bytes);
    if end.is_none_or(|e| e > props.size_bytes) {
        return Err(BlockDevError::OutOfRange {
            kind,
            offset_bytes,
            len_bytes,
            size_bytes: props.size_bytes,
        });
    }
    Ok(())
}

/// Validates a size/alignment pair when a device is created.
pub(crate) fn validate_geometry(size_bytes: u64, alignment_bytes: u64) -> Result<()> {
    if alignment_bytes < SECTOR_BYTES || !alignment_bytes.is_power_of_two() {
        return Err(BlockDevError::Config(format!(
            "alignment {alignment_bytes} must be a power of two >= {SECTOR_BYTES}"
        )));
    }
    if size_bytes == 0 || !size_bytes.is_multiple_of(alignment_bytes) {
        return Err(BlockDevError::Config(format!(
            "size {size_bytes} must be a non-zero multiple of alignment {alignment_bytes}"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn props() -> DeviceProperties {
        DeviceProperties {
            size_bytes: 8192,
            alignment_bytes: 512,
            rotational: false,
            optimal_io_bytes: 4096,
            max_queue_depth: 8,
        }
    }

    #[test]
    fn check_io_rejects_misaligned_and_out_of_range() {
        let p = props();
        assert!(check_io(&p, IoKind::Read, 0, 8192).is_ok());
        assert!(check_io(&p, IoKind::Read, 8192, 0).is_ok());
        assert!(matches!(
            check_io(&p, IoKind::Write, 1, 512),
            Err(BlockDevError::Misaligned { .. })
        ));
        assert!(matches!(
            check_io(&p, IoKind::Write, 0, 100),
            Err(BlockDevError::Misaligned { .. })
        ));
        assert!(matches!(
            check_io(&p, IoKind::Write, 7680, 1024),
            Err(BlockDevError::OutOfRange { .. })
        ));
        assert!(matches!(
            check_io(&p, IoKind::Write, u64::MAX - 511, 512),
            Err(BlockDevError::Misaligned { .. }) | Err(BlockDevError::OutOfRange { .. })
        ));
    }

    #[test]
    fn geometry_validation() {
        assert!(validate_geometry(4096, 512).is_ok());
        assert!(validate_geometry(4096, 100).is_err());
        assert!(validate_geometry(0, 512).is_err());
        assert!(validate_geometry(1000, 512).is_err());
    }
}
