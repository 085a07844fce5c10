#![deny(clippy::cast_possible_truncation)]
#![warn(missing_docs)]
//! Block devices for cairn.
//!
//! This crate owns every byte that goes to or comes from a disk (invariant 4: only `blockdev`
//! touches disks). It defines the [`BlockDevice`] trait that the object store and the cache device
//! are built on, and five implementations:
//!
//! * [`FileDevice`]: a regular file or a raw block device, `O_DIRECT` where the file system
//!   allows it, `flush` = `fdatasync`;
//! * [`MemDevice`]: RAM, for tests and simulations;
//! * [`EmulatedDevice`]: wraps another device and imposes an HDD or NVMe timing model
//!   (parameters from a TOML [`profile`]), in real time or in tokio's paused (virtual) time;
//!   the same models run without any runtime in [`capacity`] for sans-IO simulation;
//! * [`FaultDevice`]: wraps another device, fails chosen operations and simulates power loss
//!   (unflushed writes dropped, or a seeded random subset surviving with the last one torn);
//! * [`SplitDevice`]: the first bytes of a fast device and the rest of a slow one as one
//!   device (the store's log on an SSD, its data on an HDD).
//!
//! It must never interpret the bytes it stores: layout and checksums belong to its users.

// The device crates own every `unsafe` of the project: aligned buffers, AIO and the system
// calls of files (see `os` for the ones other crates need).
#[allow(unsafe_code)]
mod aio;
#[allow(unsafe_code)]
pub mod aligned;
pub mod capacity;
pub mod device;
pub mod emulated;
pub mod error;
pub mod fault;
#[allow(unsafe_code)]
pub mod file;
pub mod mem;
pub mod model;
#[allow(unsafe_code)]
pub mod os;
pub mod pool;
pub mod profile;
pub mod queued;
pub mod split;

pub use aligned::AlignedBuf;
pub use device::{check_io, BlockDevice, DeviceProperties, IoKind, IoRequest, SECTOR_BYTES};
pub use emulated::EmulatedDevice;
pub use error::{BlockDevError, Result};
pub use fault::{CrashSwitch, FaultDevice, FaultRule, PowerLossMode};
pub use file::{fs_free_bytes, Backing, FileDevice, FileDeviceOptions, IoEngine};
pub use mem::MemDevice;
pub use pool::AlignedPool;
pub use profile::Profile;
pub use queued::QueuedDevice;
pub use split::SplitDevice;
