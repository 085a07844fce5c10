//! The files an OSD keeps beside its data device (a cache, a DB/WAL device) as block devices:
//! one way to open them, with the same I/O engine as the data device and an optional timing
//! profile over them.

use std::path::Path;
use std::sync::Arc;

use cairn_blockdev::{
    BlockDevice, EmulatedDevice, FileDevice, FileDeviceOptions, IoEngine, Profile,
};

use crate::error::OsdError;

/// Queue depth of an emulated device of an OSD (explicit limit).
pub const EMULATED_QUEUE_DEPTH: usize = 64;

/// `device` under the timing model of profile `name` (`hdd-7200`, `nvme-p3700`, ... or a TOML
/// path), or as it is for None.
pub fn emulate(
    device: Arc<dyn BlockDevice>,
    name: Option<&str>,
) -> Result<Arc<dyn BlockDevice>, OsdError> {
    let Some(name) = name else {
        return Ok(device);
    };
    let profile = Profile::load(name)?;
    Ok(Arc::new(EmulatedDevice::real_time(
        device,
        &profile,
        EMULATED_QUEUE_DEPTH,
    )?))
}

/// The file at `path` (created with `bytes` if missing) as a device submitting with AIO, as the
/// data device does, emulating profile `profile` if given.
pub fn open(
    path: &Path,
    bytes: u64,
    profile: Option<&str>,
) -> Result<Arc<dyn BlockDevice>, OsdError> {
    let file = FileDevice::open(
        path,
        &FileDeviceOptions {
            size_bytes: Some(bytes),
            engine: IoEngine::Aio,
            inline_reads: false,
            ..FileDeviceOptions::default()
        },
    )?;
    emulate(Arc::new(file), profile)
}
