//! Safe wrappers of the few operating-system calls other crates need outside a device: this
//! crate is the project's boundary with the kernel, so `unsafe` lives here and nowhere above.

use std::fs::File;
use std::io;

/// Starts write-back of bytes `offset..offset + len` of `file` (`start`), or waits for the
/// write-back in flight over them to end and reports its error (`!start`): Linux's
/// `sync_file_range`. Elsewhere it does nothing (a later `fdatasync` writes everything back).
#[cfg(target_os = "linux")]
pub fn sync_file_range(file: &File, offset: u64, len: u64, start: bool) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let flags = if start {
        libc::SYNC_FILE_RANGE_WRITE
    } else {
        libc::SYNC_FILE_RANGE_WAIT_BEFORE | libc::SYNC_FILE_RANGE_WAIT_AFTER
    };
    let (Ok(offset), Ok(len)) = (i64::try_from(offset), i64::try_from(len)) else {
        return Err(io::Error::other("write-back range past i64"));
    };
    // SAFETY: the descriptor is open for the life of `file`; the call touches no memory.
    let rc = unsafe { libc::sync_file_range(file.as_raw_fd(), offset, len, flags) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// See the Linux version: elsewhere nothing is started or awaited.
#[cfg(not(target_os = "linux"))]
pub fn sync_file_range(_file: &File, _offset: u64, _len: u64, _start: bool) -> io::Result<()> {
    Ok(())
}

/// Sets the calling thread's nice value (higher is lower priority). A hint only: where it
/// cannot be set, the thread keeps its inherited priority.
pub fn set_thread_nice(nice: i32) {
    #[cfg(target_os = "linux")]
    // SAFETY: setpriority on the calling thread's own id touches no memory.
    unsafe {
        let _ = libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, nice);
    }
    #[cfg(not(target_os = "linux"))]
    let _ = nice;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_back_of_a_range_starts_and_ends() {
        let path = std::env::temp_dir().join(format!("cairn-os-{}", std::process::id()));
        let mut f = File::create(&path).unwrap();
        std::io::Write::write_all(&mut f, &[7u8; 8192]).unwrap();
        sync_file_range(&f, 0, 8192, true).unwrap();
        sync_file_range(&f, 0, 8192, false).unwrap();
        assert!(
            sync_file_range(&f, u64::MAX, 1, true).is_err(),
            "past i64 refused"
        );
        set_thread_nice(0);
        std::fs::remove_file(&path).unwrap();
    }
}
