//! The error type of every block device operation.
//!
//! Owns the classification of failures (caller bugs such as misalignment versus device failures
//! such as EIO or power loss). It must never hide an I/O error: callers such as the store treat
//! any device error or failed flush as fatal and never retry it.

use crate::device::IoKind;

/// Result alias for block device operations.
pub type Result<T> = std::result::Result<T, BlockDevError>;

/// Why a block device operation failed.
#[derive(Debug, thiserror::Error)]
pub enum BlockDevError {
    /// Offset or length is not a multiple of the device's stated alignment (a caller bug).
    #[error("{kind:?} at offset {offset_bytes} len {len_bytes} is not aligned to {alignment_bytes} bytes")]
    Misaligned {
        /// Which operation was refused.
        kind: IoKind,
        /// Requested offset.
        offset_bytes: u64,
        /// Requested length.
        len_bytes: u64,
        /// The device's alignment.
        alignment_bytes: u64,
    },
    /// The range extends past the end of the device (a caller bug).
    #[error(
        "{kind:?} at offset {offset_bytes} len {len_bytes} is beyond device size {size_bytes}"
    )]
    OutOfRange {
        /// Which operation was refused.
        kind: IoKind,
        /// Requested offset.
        offset_bytes: u64,
        /// Requested length.
        len_bytes: u64,
        /// The device's size.
        size_bytes: u64,
    },
    /// The operating system reported an I/O error.
    #[error("{kind:?} failed: {source}")]
    Io {
        /// Which operation failed.
        kind: IoKind,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A fault device was told to fail this operation.
    #[error("injected fault on {kind:?} (operation #{op_index})")]
    Injected {
        /// Which operation failed.
        kind: IoKind,
        /// Index of the operation among all operations of the fault device.
        op_index: u64,
    },
    /// Power was lost: the device accepts no more operations.
    #[error("device lost power; {kind:?} not performed")]
    PowerLost {
        /// Which operation was refused.
        kind: IoKind,
    },
    /// Too many operations in flight (the explicit queue limit was reached).
    #[error("queue full: {limit} operations already in flight")]
    QueueFull {
        /// The configured limit.
        limit: usize,
    },
    /// A device could not be created because its configuration is invalid.
    #[error("invalid device configuration: {0}")]
    Config(String),
    /// The emulation's timing engine stopped (its runtime was shut down).
    #[error("timing engine of the emulated device has stopped")]
    EngineStopped,
}
