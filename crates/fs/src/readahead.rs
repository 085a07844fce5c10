//! The kernel's readahead window for a mount. A FUSE mount's window starts at the kernel's
//! default of 128 KiB: at the handshake the kernel offers that much and the file system may
//! only ask for less (the kernel keeps the smaller), so a sequential reader of 4 MiB objects
//! keeps only a few small reads in flight. A wider window is set through the mount's backing
//! device in sysfs (`/sys/class/bdi/MAJOR:MINOR/read_ahead_kb`), found from
//! `/proc/self/mountinfo` (not from `stat` of the mount point, which would ask the mount
//! itself). Writing there needs root and a writable `/sys`: elsewhere the window stays at the
//! default and the mount says so.

use std::path::{Path, PathBuf};

/// Widest readahead window a mount asks for, KiB (16 objects of the default layout).
pub const MAX_READAHEAD_KIB: u32 = 64 << 10;

/// The window the kernel gives a new FUSE mount, KiB (`VM_READAHEAD_PAGES`): one up to it is
/// set by the handshake alone, a wider one only through sysfs.
pub const KERNEL_READAHEAD_KIB: u32 = 128;

/// Why a mount's readahead window could not be set.
#[derive(Debug, thiserror::Error)]
pub enum ReadaheadError {
    /// `/proc/self/mountinfo` could not be read.
    #[error("reading /proc/self/mountinfo: {0}")]
    MountInfo(std::io::Error),
    /// No FUSE mount is listed at the mount point.
    #[error("no FUSE mount listed at {0}")]
    NotMounted(PathBuf),
    /// A window wider than [`MAX_READAHEAD_KIB`] was asked for.
    #[error("a readahead window of {0} KiB (at most {MAX_READAHEAD_KIB})")]
    TooWide(u32),
    /// The backing device's setting could not be written (not root, `/sys` read-only, or no
    /// such device).
    #[error("writing {path}: {error}")]
    Write {
        /// The sysfs file written.
        path: PathBuf,
        /// What the kernel answered.
        error: std::io::Error,
    },
}

/// Sets the readahead window of the FUSE mount at `mountpoint` (an absolute path without
/// symbolic links, as the kernel lists it) to `kib` KiB; returns the sysfs file it wrote.
pub fn set_window(mountpoint: &Path, kib: u32) -> Result<PathBuf, ReadaheadError> {
    if kib > MAX_READAHEAD_KIB {
        return Err(ReadaheadError::TooWide(kib));
    }
    let info = std::fs::read("/proc/self/mountinfo").map_err(ReadaheadError::MountInfo)?;
    let device = fuse_device_at(&info, mountpoint)
        .ok_or_else(|| ReadaheadError::NotMounted(mountpoint.to_path_buf()))?;
    let path = PathBuf::from(format!("/sys/class/bdi/{device}/read_ahead_kb"));
    std::fs::write(&path, format!("{kib}\n")).map_err(|error| ReadaheadError::Write {
        path: path.clone(),
        error,
    })?;
    Ok(path)
}

/// The `MAJOR:MINOR` of the last FUSE mount listed at `mountpoint` in `mountinfo` (the bytes
/// of `/proc/PID/mountinfo`, whose paths need not be UTF-8); the last, as a later mount hides
/// an earlier one there.
pub fn fuse_device_at(mountinfo: &[u8], mountpoint: &Path) -> Option<String> {
    let wanted = mountpoint.as_os_str().as_encoded_bytes();
    mountinfo.split(|b| *b == b'\n').rev().find_map(|line| {
        let at = line.windows(3).position(|w| w == b" - ")?;
        let (mount, super_part) = (&line[..at], &line[at + 3..]);
        let mut fields = mount.split(|b| *b == b' ');
        let device = fields.nth(2)?;
        let point = fields.nth(1)?;
        let fs_type = super_part.split(|b| *b == b' ').next()?;
        let is_fuse = fs_type == b"fuse" || fs_type.starts_with(b"fuse.");
        let device = std::str::from_utf8(device).ok()?;
        (is_fuse && unescape(point) == wanted).then(|| device.to_owned())
    })
}

/// A mountinfo path with its octal escapes (`\040` for a space, `\011`, `\012`, `\134`)
/// turned back into bytes.
fn unescape(bytes: &[u8]) -> Vec<u8> {
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
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;

    const INFO: &[u8] = b"\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
30 22 0:30 / /tmp/caf\xe9 rw,relatime - tmpfs tmpfs rw
40 22 0:41 / /tmp/a\\040b rw,nosuid,nodev,relatime shared:20 - fuse.cairn cairn:fs rw,user_id=0
41 22 0:42 / /tmp/plain rw,relatime - tmpfs tmpfs rw
43 22 0:47 / /tmp/twice rw,relatime - fuse.cairn cairn:fs rw
44 43 0:48 / /tmp/twice rw,relatime - fuse cairn:fs rw
45 22 0:49 / /tmp/l\xe4ngs rw,relatime - fuse cairn:fs rw
";

    #[test]
    fn the_device_of_a_fuse_mount_is_found_by_its_escaped_path() {
        assert_eq!(
            fuse_device_at(INFO, Path::new("/tmp/a b")).as_deref(),
            Some("0:41")
        );
    }

    #[test]
    fn paths_that_are_not_utf8_are_read_and_matched() {
        let point = Path::new(OsStr::from_bytes(b"/tmp/l\xe4ngs"));
        assert_eq!(fuse_device_at(INFO, point).as_deref(), Some("0:49"));
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
            fuse_device_at(b"garbage\n\n - \n1 2\n", Path::new("/")),
            None
        );
    }

    #[test]
    fn too_wide_a_window_is_refused_before_anything_is_read() {
        let error = set_window(Path::new("/nowhere"), MAX_READAHEAD_KIB + 1).expect_err("wide");
        assert!(matches!(error, ReadaheadError::TooWide(_)), "{error}");
    }

    #[test]
    fn unescape_keeps_what_is_not_an_octal_escape() {
        assert_eq!(unescape(b"a\\040b\\134c"), b"a b\\c");
        assert_eq!(unescape(b"end\\04"), b"end\\04");
        assert_eq!(unescape(b"\\9999"), b"\\9999");
        assert_eq!(unescape(b"\\777"), b"\\777");
    }
}
