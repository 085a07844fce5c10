//! The kernel's readahead window for a mount. A FUSE mount's window starts at the kernel's
//! default of 128 KiB whatever the file system asks for at its handshake (the kernel takes
//! the smaller of the two), so a sequential reader of 4 MiB objects keeps only a few small
//! reads in flight; the window is widened through the mount's backing device in sysfs
//! (`/sys/class/bdi/MAJOR:MINOR/read_ahead_kb`), found from `/proc/self/mountinfo`. Writing
//! there needs root: elsewhere the window stays at the default and the mount says so.

use std::path::{Path, PathBuf};

/// Widest readahead window a mount asks for, KiB (16 objects of the default layout).
pub const MAX_READAHEAD_KIB: u32 = 64 << 10;

/// Why a mount's readahead window could not be set.
#[derive(Debug, thiserror::Error)]
pub enum ReadaheadError {
    /// `/proc/self/mountinfo` could not be read.
    #[error("reading /proc/self/mountinfo: {0}")]
    MountInfo(std::io::Error),
    /// No FUSE mount of this file system is listed at the mountpoint.
    #[error("no FUSE mount listed at {0}")]
    NotMounted(PathBuf),
    /// The backing device's setting could not be written (not root, or no such device).
    #[error("writing {path}: {error}")]
    Write {
        /// The sysfs file written.
        path: PathBuf,
        /// What the kernel answered.
        error: std::io::Error,
    },
}

/// Sets the readahead window of the FUSE mount at `mountpoint` to `kib` KiB; returns the
/// sysfs file it wrote.
pub fn set_window(mountpoint: &Path, kib: u32) -> Result<PathBuf, ReadaheadError> {
    assert!(
        kib <= MAX_READAHEAD_KIB,
        "readahead of {kib} KiB was not checked"
    );
    let info =
        std::fs::read_to_string("/proc/self/mountinfo").map_err(ReadaheadError::MountInfo)?;
    let wanted = mountpoint
        .canonicalize()
        .unwrap_or_else(|_| mountpoint.to_path_buf());
    let device =
        fuse_device_at(&info, &wanted).ok_or_else(|| ReadaheadError::NotMounted(wanted.clone()))?;
    let path = PathBuf::from(format!("/sys/class/bdi/{device}/read_ahead_kb"));
    std::fs::write(&path, format!("{kib}\n")).map_err(|error| ReadaheadError::Write {
        path: path.clone(),
        error,
    })?;
    Ok(path)
}

/// The `MAJOR:MINOR` of the last FUSE mount listed at `mountpoint` in `mountinfo` (the text
/// of `/proc/PID/mountinfo`); the last, as a later mount hides an earlier one there.
pub fn fuse_device_at(mountinfo: &str, mountpoint: &Path) -> Option<String> {
    let wanted = mountpoint.as_os_str().as_encoded_bytes();
    mountinfo.lines().rev().find_map(|line| {
        let (mount, super_part) = line.split_once(" - ")?;
        let fields: Vec<&str> = mount.split(' ').collect();
        let (device, point) = (fields.get(2)?, fields.get(4)?);
        let fs_type = super_part.split(' ').next()?;
        let is_fuse = fs_type == "fuse" || fs_type.starts_with("fuse.");
        (is_fuse && unescape(point) == wanted).then(|| (*device).to_owned())
    })
}

/// A mountinfo path with its octal escapes (`\040` for a space, `\011`, `\012`, `\134`)
/// turned back into bytes.
fn unescape(field: &str) -> Vec<u8> {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|d| bytes[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match octal.and_then(|d| u8::from_str_radix(std::str::from_utf8(d).ok()?, 8).ok()) {
            Some(byte) => {
                out.push(byte);
                i += 4;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const INFO: &str = "\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
40 22 0:41 / /tmp/a\\040b rw,nosuid,nodev,relatime shared:20 - fuse.cairn cairn:fs rw,user_id=0
41 22 0:42 / /tmp/plain rw,relatime - tmpfs tmpfs rw
43 22 0:47 / /tmp/twice rw,relatime - fuse.cairn cairn:fs rw
44 43 0:48 / /tmp/twice rw,relatime - fuse cairn:fs rw
";

    #[test]
    fn the_device_of_a_fuse_mount_is_found_by_its_escaped_path() {
        assert_eq!(
            fuse_device_at(INFO, Path::new("/tmp/a b")).as_deref(),
            Some("0:41")
        );
    }

    #[test]
    fn the_last_fuse_mount_at_a_point_wins() {
        assert_eq!(
            fuse_device_at(INFO, Path::new("/tmp/twice")).as_deref(),
            Some("0:48")
        );
    }

    #[test]
    fn other_file_systems_and_unlisted_points_are_not_taken() {
        assert_eq!(fuse_device_at(INFO, Path::new("/tmp/plain")), None);
        assert_eq!(fuse_device_at(INFO, Path::new("/tmp/a\\040b")), None);
        assert_eq!(fuse_device_at(INFO, Path::new("/nowhere")), None);
        assert_eq!(
            fuse_device_at("garbage\n\n - \n1 2\n", Path::new("/")),
            None
        );
    }

    #[test]
    fn unescape_keeps_what_is_not_an_octal_escape() {
        assert_eq!(unescape("a\\040b\\134c"), b"a b\\c");
        assert_eq!(unescape("end\\04"), b"end\\04");
        assert_eq!(unescape("\\9999"), b"\\9999");
        assert_eq!(unescape("\\777"), b"\\777");
    }
}
