//! Default addresses and names the commands and the daemons they start agree on.

/// Default monitor address.
pub const DEFAULT_MON: &str = "127.0.0.1:6789";

/// Default S3 gateway address.
pub const DEFAULT_S3: &str = "127.0.0.1:7480";

/// The S3 gateway's pool by default.
pub const DEFAULT_S3_POOL: &str = "s3";

/// Default device file size: a sparse 16 GiB, so a 10 s `cairn bench` write to the default
/// three OSDs does not fill it (disk is used only as data is written). One OSD taking 4 MiB
/// writes at 1.6 GB/s fills it in 10 s: give it `--device-mib` to match.
pub const DEFAULT_DEVICE_MIB: u64 = 16 << 10;
