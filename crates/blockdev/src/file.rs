//! [`FileDevice`]: a block device on a regular file or a raw block device.
//!
//! Owns the file descriptor, the choice of `O_DIRECT` (tried first, with a clean fallback to
//! buffered I/O where the file system refuses it, e.g. tmpfs) and the mapping of the
//! [`BlockDevice`] contract to `pread`/`pwrite`/`fdatasync`/`fallocate(PUNCH_HOLE)`.
//! In a task on a multi-threaded runtime, reads, flushes and writes of at most
//! [`INLINE_WRITE_BYTES`] run inline under `block_in_place` (the worker's other tasks move to another thread), which saves
//! two thread wake-ups per I/O (a store commit of one small transaction is two writes and a
//! flush); a task that joins several of them therefore waits for them one after another. Larger
//! writes and discards run on tokio's blocking pool so many can be in flight. `write_owned`
//! takes an aligned buffer without copying it.
//! It must never retry a failed `fdatasync`: the error is returned and the caller dies.

use crate::aio::{AioError, AioRing, Pinned};
use crate::aligned::AlignedBuf;
use crate::device::{check_io, validate_geometry, BlockDevice, DeviceProperties, IoKind};
use crate::error::{BlockDevError, Result};
use async_trait::async_trait;
use cairn_convert::usize_of;
use std::fs::{File, OpenOptions};
use std::io::{Seek, SeekFrom};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::sync::Arc;

/// Memory and offset alignment used for `O_DIRECT` (safe for 512e and 4Kn devices).
const DIRECT_ALIGN_BYTES: u64 = 4096;
/// [`DIRECT_ALIGN_BYTES`] as a buffer alignment.
const DIRECT_ALIGN_LEN: usize = 4096;
const _: () = assert!(DIRECT_ALIGN_LEN as u64 == DIRECT_ALIGN_BYTES);
/// Alignment stated when the file is opened without `O_DIRECT`.
const BUFFERED_ALIGN_BYTES: u64 = 512;

/// How to open a [`FileDevice`].
#[derive(Debug, Clone)]
pub struct FileDeviceOptions {
    /// Create the file if missing and extend it to this size (regular files only). `None` uses
    /// the existing size.
    pub size_bytes: Option<u64>,
    /// Try `O_DIRECT` (bypass the page cache); falls back to buffered I/O if refused.
    pub direct: bool,
    /// Report the device as rotational (files cannot tell).
    pub rotational: bool,
    /// Most operations in flight; more are refused with [`BlockDevError::QueueFull`].
    pub max_queue_depth: usize,
    /// Run reads under `block_in_place` on the calling worker (saves two thread wake-ups per
    /// read where the runtime has workers to spare: the store benchmark's QD1 reads are ~1.5x
    /// faster). `false` sends them to the blocking pool, which is better for a daemon whose one
    /// worker also serves the network (an OSD's 4 KiB reads are ~1.2x faster); see
    /// `docs/results/2026-11-24-bottom-up-runs-and-one-worker.md`.
    pub inline_reads: bool,
    /// How I/O reaches the kernel (default [`IoEngine::Threads`]). [`IoEngine::Aio`] needs
    /// `O_DIRECT`; where either is unavailable the device uses threads (see
    /// [`FileDevice::engine`]). AIO wins where one runtime worker also serves the network (an
    /// OSD: 4 KiB reads 1.1-1.6x, 4 MiB writes 1.1-1.4x); threads win for a store driven
    /// from several workers (`cairn store bench`: QD1 writes ~1.4x, QD16 reads ~1.2x), whose
    /// inline system calls wake no other thread. See `docs/design/blockdev.md`.
    pub engine: IoEngine,
}

/// How a [`FileDevice`] issues its I/O.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoEngine {
    /// Linux native AIO (`io_submit`), completions reaped by one thread per device: no thread
    /// hand-off on submission, batched wake-ups on completion.
    Aio,
    /// Blocking system calls, inline under `block_in_place` or on tokio's blocking pool.
    Threads,
}

impl Default for FileDeviceOptions {
    fn default() -> Self {
        Self {
            size_bytes: None,
            direct: true,
            rotational: false,
            max_queue_depth: 256,
            inline_reads: true,
            engine: IoEngine::Threads,
        }
    }
}

/// A block device backed by a file or raw device.
#[derive(Debug)]
pub struct FileDevice {
    file: Arc<File>,
    props: DeviceProperties,
    direct: bool,
    inline_reads: bool,
    in_flight: Arc<tokio::sync::Semaphore>,
    aio: Option<AioRing>,
}

fn io_err(kind: IoKind) -> impl FnOnce(std::io::Error) -> BlockDevError {
    move |source| BlockDevError::Io { kind, source }
}

fn aio_err(kind: IoKind) -> impl FnOnce(AioError) -> BlockDevError {
    move |e| BlockDevError::Io {
        kind,
        source: e.error,
    }
}

/// Whether a file device's file system can hold all of it (see [`FileDevice::backing`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backing {
    /// Device bytes no file system block backs yet (holes of a sparse file).
    pub unbacked_bytes: u64,
    /// Bytes the file system has free for an unprivileged writer.
    pub fs_free_bytes: u64,
}

/// Bytes free for an unprivileged writer on the file system holding `at` (a file or a
/// directory), e.g. to check that device files about to be written whole will fit.
pub fn fs_free_bytes(at: &Path) -> Result<u64> {
    free_bytes_of(&File::open(at).map_err(io_err(IoKind::Read))?)
}

fn free_bytes_of(file: &File) -> Result<u64> {
    // SAFETY: `statvfs` is plain integers, for which all zeros is a valid value.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `fstatvfs` writes one `statvfs` into `st`, which outlives the call, for a
    // descriptor `file` keeps open.
    let rc = unsafe { libc::fstatvfs(file.as_raw_fd(), &mut st) };
    if rc != 0 {
        return Err(io_err(IoKind::Read)(std::io::Error::last_os_error()));
    }
    Ok((st.f_bavail as u64).saturating_mul(st.f_frsize as u64))
}

impl Backing {
    /// True when writing every byte of the device may run the file system out of space.
    pub fn short(&self) -> bool {
        self.unbacked_bytes > self.fs_free_bytes
    }
}

impl FileDevice {
    /// Opens (and with `size_bytes`, creates/extends) `path`.
    pub fn open(path: &Path, opts: &FileDeviceOptions) -> Result<Self> {
        if opts.max_queue_depth == 0 {
            return Err(BlockDevError::Config("max_queue_depth must be >= 1".into()));
        }
        let base = |direct: bool| {
            let mut o = OpenOptions::new();
            o.read(true).write(true).create(opts.size_bytes.is_some());
            if direct {
                o.custom_flags(libc::O_DIRECT);
            }
            o.open(path)
        };
        let (mut file, mut direct) = match opts.direct {
            true => match base(true) {
                Ok(f) => (f, true),
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                    (base(false).map_err(io_err(IoKind::Read))?, false)
                }
                Err(e) => return Err(io_err(IoKind::Read)(e)),
            },
            false => (base(false).map_err(io_err(IoKind::Read))?, false),
        };
        if let Some(size) = opts.size_bytes {
            let meta = file.metadata().map_err(io_err(IoKind::Read))?;
            if meta.is_file() && meta.len() < size {
                file.set_len(size).map_err(io_err(IoKind::Write))?;
            }
        }
        let size = file.seek(SeekFrom::End(0)).map_err(io_err(IoKind::Read))?;
        if direct && !probe_direct(&file, size) {
            file = base(false).map_err(io_err(IoKind::Read))?;
            direct = false;
        }
        let alignment_bytes = if direct {
            DIRECT_ALIGN_BYTES
        } else {
            BUFFERED_ALIGN_BYTES
        };
        let size_bytes = size - size % alignment_bytes;
        validate_geometry(size_bytes, alignment_bytes)?;
        let file = Arc::new(file);
        let aio = match (opts.engine, direct) {
            (IoEngine::Aio, true) => AioRing::new(file.clone(), opts.max_queue_depth).ok(),
            _ => None,
        };
        Ok(Self {
            file,
            props: DeviceProperties {
                size_bytes,
                alignment_bytes,
                rotational: opts.rotational,
                optimal_io_bytes: if opts.rotational { 1 << 20 } else { 128 * 1024 },
                max_queue_depth: opts.max_queue_depth,
            },
            direct,
            inline_reads: opts.inline_reads,
            in_flight: Arc::new(tokio::sync::Semaphore::new(opts.max_queue_depth)),
            aio,
        })
    }

    /// The engine this device really uses (AIO falls back to threads without `O_DIRECT` or
    /// where the kernel refuses a context).
    pub fn engine(&self) -> IoEngine {
        match self.aio {
            Some(_) => IoEngine::Aio,
            None => IoEngine::Threads,
        }
    }

    /// Writes zeros over the whole device once, so that later writes to a regular file land on
    /// allocated blocks (as on a raw device) instead of paying the file system's block allocation
    /// and its journal commit on every flush. Used before benchmarks.
    pub async fn prefill(&self, chunk_bytes: u64) -> Result<()> {
        let chunk = chunk_bytes.max(self.props.alignment_bytes);
        let chunk = chunk - chunk % self.props.alignment_bytes;
        let zeros = vec![0u8; usize_of(chunk)];
        let mut off = 0;
        while off < self.props.size_bytes {
            let len = usize_of(chunk.min(self.props.size_bytes - off));
            self.write(off, &zeros[..len]).await?;
            off += len as u64;
        }
        self.flush().await
    }

    /// How much of the device the file system still has to find room for: the bytes of a
    /// sparse (or partly written) file that no block backs yet, against the bytes its file
    /// system has free for this user. Writing the whole device (a prefill, or a full store)
    /// fails with ENOSPC once the first exceeds the second; a block device is always backed.
    pub fn backing(&self) -> Result<Backing> {
        let meta = self.file.metadata().map_err(io_err(IoKind::Read))?;
        if !meta.is_file() {
            return Ok(Backing {
                unbacked_bytes: 0,
                fs_free_bytes: u64::MAX,
            });
        }
        let allocated = std::os::unix::fs::MetadataExt::blocks(&meta).saturating_mul(512);
        Ok(Backing {
            unbacked_bytes: self.props.size_bytes.saturating_sub(allocated),
            fs_free_bytes: free_bytes_of(&self.file)?,
        })
    }

    /// True when the device bypasses the page cache (`O_DIRECT` accepted).
    pub fn is_direct(&self) -> bool {
        self.direct
    }

    fn permit(&self) -> Result<tokio::sync::OwnedSemaphorePermit> {
        self.in_flight
            .clone()
            .try_acquire_owned()
            .map_err(|_| BlockDevError::QueueFull {
                limit: self.props.max_queue_depth,
            })
    }

    /// Runs `io` on an owned buffer, holding a queue slot: on this thread when `inline` and
    /// the runtime allows it, else on the blocking pool; hands the buffer back.
    async fn owned_io(
        &self,
        kind: IoKind,
        inline: bool,
        mut buf: AlignedBuf,
        io: impl FnOnce(&File, &mut AlignedBuf) -> std::io::Result<()> + Send + 'static,
    ) -> Result<AlignedBuf> {
        let _permit = self.permit()?;
        if inline && inline_allowed() {
            tokio::task::block_in_place(|| io(&self.file, &mut buf)).map_err(io_err(kind))?;
            return Ok(buf);
        }
        let file = self.file.clone();
        blocking(kind, move || {
            io(&file, &mut buf)?;
            Ok(buf)
        })
        .await
    }

    fn buffer(&self, len: usize, kind: IoKind) -> Result<AlignedBuf> {
        AlignedBuf::zeroed(len, DIRECT_ALIGN_LEN).ok_or_else(|| BlockDevError::Io {
            kind,
            source: std::io::Error::new(
                std::io::ErrorKind::OutOfMemory,
                "aligned buffer allocation failed",
            ),
        })
    }
}

/// Reads one aligned block with `O_DIRECT` to see whether the file system really honours it.
fn probe_direct(file: &File, size: u64) -> bool {
    if size < DIRECT_ALIGN_BYTES {
        return false;
    }
    match AlignedBuf::zeroed(DIRECT_ALIGN_LEN, DIRECT_ALIGN_LEN) {
        Some(mut b) => file.read_exact_at(b.as_mut_slice(), 0).is_ok(),
        None => false,
    }
}

/// Largest write run inline (see the module documentation): small writes are latency-bound, and
/// the hop to the blocking pool costs more than the write itself; large ones keep their
/// parallelism on the pool.
pub const INLINE_WRITE_BYTES: usize = 64 << 10;

/// True when a blocking call may run on the current thread (a multi-threaded tokio runtime
/// hands this worker's other tasks to another thread meanwhile): reads then skip the hop to the
/// blocking pool and back, which costs two thread wake-ups per I/O.
/// Writes all of `data` at `offset` so that it is durable on return: `pwritev2` with
/// `RWF_DSYNC` (one system call: the kernel makes the write durable as `fdatasync` would), or,
/// where the kernel refuses the flag, a plain write followed by `fdatasync`.
fn write_all_durable(file: &File, data: &[u8], offset: u64) -> std::io::Result<()> {
    let mut done = 0usize;
    while done < data.len() {
        let rest = &data[done..];
        let iov = libc::iovec {
            iov_base: rest.as_ptr() as *mut libc::c_void,
            iov_len: rest.len(),
        };
        let at = libc::off_t::try_from(offset + done as u64)
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
        // SAFETY: `iov` points at `rest`, which stays borrowed and valid for the whole call; the
        // kernel only reads from it.
        let n = unsafe { libc::pwritev2(file.as_raw_fd(), &iov, 1, at, libc::RWF_DSYNC) };
        if n < 0 {
            let err = std::io::Error::last_os_error();
            match err.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::EINVAL) | Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) if done == 0 => {
                    file.write_all_at(data, offset)?;
                    return file.sync_data();
                }
                _ => return Err(err),
            }
        }
        if n == 0 {
            return Err(std::io::Error::from(std::io::ErrorKind::WriteZero));
        }
        done += n as usize;
    }
    Ok(())
}

/// Whether an I/O may run inline under `block_in_place`: in a task on a multi-threaded
/// runtime. A thread that only blocks on a future (`Handle::block_on`, as a store's checkpoint
/// thread does) is in no task: its I/O goes to the blocking pool, so that a batch it issues
/// together runs in parallel instead of one system call after another.
fn inline_allowed() -> bool {
    tokio::task::try_id().is_some()
        && tokio::runtime::Handle::try_current()
            .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread)
}

async fn blocking<T: Send + 'static>(
    kind: IoKind,
    f: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| BlockDevError::Io {
            kind,
            source: std::io::Error::other(e.to_string()),
        })?
        .map_err(io_err(kind))
}

#[async_trait]
impl BlockDevice for FileDevice {
    fn properties(&self) -> DeviceProperties {
        self.props
    }

    async fn read(&self, offset_bytes: u64, buf: &mut [u8]) -> Result<()> {
        check_io(&self.props, IoKind::Read, offset_bytes, buf.len() as u64)?;
        if buf.is_empty() {
            return Ok(());
        }
        let _permit = self.permit()?;
        let mut tmp = self.buffer(buf.len(), IoKind::Read)?;
        if let Some(aio) = &self.aio {
            let tmp = aio
                .read(offset_bytes, tmp)
                .await
                .map_err(aio_err(IoKind::Read))?;
            buf.copy_from_slice(tmp.as_slice());
            return Ok(());
        }
        if self.inline_reads && inline_allowed() {
            tokio::task::block_in_place(|| {
                self.file.read_exact_at(tmp.as_mut_slice(), offset_bytes)
            })
            .map_err(io_err(IoKind::Read))?;
            buf.copy_from_slice(tmp.as_slice());
            return Ok(());
        }
        let file = self.file.clone();
        let tmp = blocking(IoKind::Read, move || {
            file.read_exact_at(tmp.as_mut_slice(), offset_bytes)?;
            Ok(tmp)
        })
        .await?;
        buf.copy_from_slice(tmp.as_slice());
        Ok(())
    }

    async fn read_owned(&self, offset_bytes: u64, mut buf: AlignedBuf) -> Result<AlignedBuf> {
        if self.direct && buf.align_bytes() < DIRECT_ALIGN_LEN {
            self.read(offset_bytes, buf.as_mut_slice()).await?;
            return Ok(buf);
        }
        check_io(&self.props, IoKind::Read, offset_bytes, buf.len() as u64)?;
        if buf.is_empty() {
            return Ok(buf);
        }
        if let Some(aio) = &self.aio {
            let _permit = self.permit()?;
            return aio
                .read(offset_bytes, buf)
                .await
                .map_err(aio_err(IoKind::Read));
        }
        self.owned_io(IoKind::Read, self.inline_reads, buf, move |f, b| {
            f.read_exact_at(b.as_mut_slice(), offset_bytes)
        })
        .await
    }

    async fn write(&self, offset_bytes: u64, data: &[u8]) -> Result<()> {
        check_io(&self.props, IoKind::Write, offset_bytes, data.len() as u64)?;
        if data.is_empty() {
            return Ok(());
        }
        let _permit = self.permit()?;
        let mut tmp = self.buffer(data.len(), IoKind::Write)?;
        tmp.as_mut_slice().copy_from_slice(data);
        if let Some(aio) = &self.aio {
            return aio
                .write(offset_bytes, tmp, false)
                .await
                .map(drop)
                .map_err(aio_err(IoKind::Write));
        }
        let file = self.file.clone();
        blocking(IoKind::Write, move || {
            file.write_all_at(tmp.as_slice(), offset_bytes)
        })
        .await
    }

    async fn write_owned(&self, offset_bytes: u64, buf: AlignedBuf) -> Result<AlignedBuf> {
        if self.direct && buf.align_bytes() < DIRECT_ALIGN_LEN {
            self.write(offset_bytes, buf.as_slice()).await?;
            return Ok(buf);
        }
        check_io(&self.props, IoKind::Write, offset_bytes, buf.len() as u64)?;
        if let Some(aio) = &self.aio {
            let _permit = self.permit()?;
            return aio
                .write(offset_bytes, buf, false)
                .await
                .map_err(aio_err(IoKind::Write));
        }
        let inline = buf.len() <= INLINE_WRITE_BYTES;
        self.owned_io(IoKind::Write, inline, buf, move |f, b| {
            f.write_all_at(b.as_slice(), offset_bytes)
        })
        .await
    }

    async fn write_owned_durable(&self, offset_bytes: u64, buf: AlignedBuf) -> Result<AlignedBuf> {
        if self.direct && buf.align_bytes() < DIRECT_ALIGN_LEN {
            self.write(offset_bytes, buf.as_slice()).await?;
            self.flush().await?;
            return Ok(buf);
        }
        check_io(&self.props, IoKind::Write, offset_bytes, buf.len() as u64)?;
        if let Some(aio) = &self.aio {
            let permit = self.permit()?;
            match aio.write(offset_bytes, buf, true).await {
                Ok(buf) => return Ok(buf),
                Err(e) if e.is_unsupported() => {
                    // The kernel refuses RWF_DSYNC on AIO: a write and a flush instead.
                    let Some(Pinned::Aligned(buf)) = e.unsubmitted else {
                        return Err(aio_err(IoKind::Write)(e));
                    };
                    drop(permit);
                    let buf = self.write_owned(offset_bytes, buf).await?;
                    self.flush().await?;
                    return Ok(buf);
                }
                Err(e) => return Err(aio_err(IoKind::Write)(e)),
            }
        }
        let inline = buf.len() <= INLINE_WRITE_BYTES;
        self.owned_io(IoKind::Write, inline, buf, move |f, b| {
            write_all_durable(f, b.as_slice(), offset_bytes)
        })
        .await
    }

    async fn write_shared(&self, offset_bytes: u64, data: bytes::Bytes) -> Result<()> {
        let align = DIRECT_ALIGN_LEN;
        let aligned =
            (data.as_ptr() as usize).is_multiple_of(align) && data.len().is_multiple_of(align);
        if self.direct && !aligned {
            return self.write(offset_bytes, &data).await;
        }
        check_io(&self.props, IoKind::Write, offset_bytes, data.len() as u64)?;
        if data.is_empty() {
            return Ok(());
        }
        let _permit = self.permit()?;
        if let Some(aio) = &self.aio {
            return aio
                .write_shared(offset_bytes, data)
                .await
                .map_err(aio_err(IoKind::Write));
        }
        let file = self.file.clone();
        blocking(IoKind::Write, move || {
            file.write_all_at(&data, offset_bytes)
        })
        .await
    }

    async fn flush(&self) -> Result<()> {
        let _permit = self.permit()?;
        if let Some(aio) = &self.aio {
            match aio.flush().await {
                Ok(()) => return Ok(()),
                // The file system has no asynchronous fdatasync: the blocking one below.
                Err(e) if e.is_unsupported() => {}
                Err(e) => return Err(aio_err(IoKind::Flush)(e)),
            }
        }
        if inline_allowed() {
            return tokio::task::block_in_place(|| self.file.sync_data())
                .map_err(io_err(IoKind::Flush));
        }
        let file = self.file.clone();
        blocking(IoKind::Flush, move || file.sync_data()).await
    }

    async fn discard(&self, offset_bytes: u64, len_bytes: u64) -> Result<()> {
        check_io(&self.props, IoKind::Discard, offset_bytes, len_bytes)?;
        if len_bytes == 0 {
            return Ok(());
        }
        let _permit = self.permit()?;
        let file = self.file.clone();
        blocking(IoKind::Discard, move || {
            let (off, len) = (offset_bytes as libc::off_t, len_bytes as libc::off_t);
            // SAFETY: plain syscall on an fd we own; no memory is passed.
            let rc = unsafe {
                libc::fallocate(
                    file.as_raw_fd(),
                    libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                    off,
                    len,
                )
            };
            if rc == 0 {
                return Ok(());
            }
            let e = std::io::Error::last_os_error();
            // Discard is a hint: file systems or raw devices without hole punching ignore it.
            match e.raw_os_error() {
                Some(libc::EOPNOTSUPP) | Some(libc::ENODEV) => Ok(()),
                _ => Err(e),
            }
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A store's checkpoint thread blocks on its batch of in-place writes (`block_on`, no
    /// task): inline, they would run one after another; they must go to the blocking pool.
    #[test]
    fn io_runs_inline_only_in_a_task_of_a_multi_threaded_runtime() {
        let multi = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .build()
            .unwrap();
        assert!(
            !multi.block_on(async { inline_allowed() }),
            "a thread blocking on a future is in no task"
        );
        let in_task = multi.block_on(async { tokio::spawn(async { inline_allowed() }).await });
        assert!(in_task.unwrap(), "a worker's task runs its I/O inline");
        let single = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let in_task = single.block_on(async { tokio::spawn(async { inline_allowed() }).await });
        assert!(
            !in_task.unwrap(),
            "block_in_place needs a multi-threaded runtime"
        );
        assert!(!inline_allowed(), "outside any runtime");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn backing_counts_the_holes_of_a_sparse_file_against_free_space() {
        let dir = tempfile::tempdir().unwrap();
        let opts = |size| FileDeviceOptions {
            size_bytes: Some(size),
            ..FileDeviceOptions::default()
        };
        let dev = FileDevice::open(&dir.path().join("small"), &opts(8 << 20)).unwrap();
        let b = dev.backing().unwrap();
        assert!(b.unbacked_bytes > 7 << 20, "a new file is a hole: {b:?}");
        assert!(b.fs_free_bytes > 0 && !b.short(), "{b:?}");
        dev.prefill(1 << 20).await.unwrap();
        assert_eq!(dev.backing().unwrap().unbacked_bytes, 0, "written whole");
        // A sparse file larger than any test machine's disk: set_len is free, filling is not.
        let huge = FileDevice::open(&dir.path().join("huge"), &opts(1 << 43)).unwrap();
        let b = huge.backing().unwrap();
        assert!(b.short(), "{b:?}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn file_device_round_trip_and_concurrency() {
        for engine in [IoEngine::Aio, IoEngine::Threads] {
            round_trip_and_concurrency(engine).await;
        }
    }

    async fn round_trip_and_concurrency(engine: IoEngine) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dev");
        let opts = FileDeviceOptions {
            size_bytes: Some(1 << 20),
            engine,
            ..Default::default()
        };
        let dev = Arc::new(FileDevice::open(&path, &opts).unwrap());
        let a = usize_of(dev.properties().alignment_bytes);
        let mut tasks = Vec::new();
        for i in 0..16u8 {
            let d = dev.clone();
            tasks.push(tokio::spawn(async move {
                d.write(i as u64 * 8192, &vec![i; 8192]).await
            }));
        }
        for t in tasks {
            t.await.unwrap().unwrap();
        }
        let owned = AlignedBuf::from_parts(&[&[9u8; 4096]], 4096).unwrap();
        dev.write_owned(20 * 8192, owned).await.unwrap();
        let unaligned = AlignedBuf::from_parts(&[&[8u8; 4096]], 512).unwrap();
        dev.write_owned(21 * 8192, unaligned).await.unwrap();
        let shared = AlignedBuf::from_parts(&[&[7u8; 8192]], 4096)
            .map(bytes::Bytes::from_owner)
            .unwrap();
        dev.write_shared(22 * 8192, shared.clone()).await.unwrap();
        let off_boundary = bytes::Bytes::from(vec![6u8; 4097]).slice(1..);
        dev.write_shared(23 * 8192, off_boundary).await.unwrap();
        assert!(matches!(
            dev.write_shared(1, shared).await,
            Err(BlockDevError::Misaligned { .. })
        ));
        dev.flush().await.unwrap();
        let mut b = vec![0u8; 4096];
        dev.read(22 * 8192 + 4096, &mut b).await.unwrap();
        assert!(b.iter().all(|&x| x == 7));
        dev.read(23 * 8192, &mut b).await.unwrap();
        assert!(
            b.iter().all(|&x| x == 6),
            "unaligned bytes are copied, then written"
        );
        let mut b = vec![0u8; 4096];
        dev.read(20 * 8192, &mut b).await.unwrap();
        assert!(b.iter().all(|&x| x == 9));
        dev.read(21 * 8192, &mut b).await.unwrap();
        assert!(b.iter().all(|&x| x == 8));
        let mut b = vec![0u8; 8192];
        dev.read(5 * 8192, &mut b).await.unwrap();
        assert!(b.iter().all(|&x| x == 5));
        dev.discard(5 * 8192, 8192).await.unwrap();
        dev.read(5 * 8192, &mut b).await.unwrap();
        assert!(b.iter().all(|&x| x == 0));
        assert!(matches!(
            dev.write(1, &vec![0; a]).await,
            Err(BlockDevError::Misaligned { .. })
        ));
        assert!(matches!(
            dev.write(1 << 20, &vec![0; a]).await,
            Err(BlockDevError::OutOfRange { .. })
        ));
        drop(dev);
        let opts = FileDeviceOptions {
            engine,
            ..Default::default()
        };
        let reopened = FileDevice::open(&path, &opts).unwrap();
        assert_eq!(reopened.properties().size_bytes, 1 << 20);
        let mut b = vec![0u8; 8192];
        reopened.read(3 * 8192, &mut b).await.unwrap();
        assert!(b.iter().all(|&x| x == 3));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn reads_on_the_blocking_pool_return_what_was_written() {
        let dir = tempfile::tempdir().unwrap();
        let opts = FileDeviceOptions {
            size_bytes: Some(1 << 20),
            inline_reads: false,
            engine: IoEngine::Threads,
            ..Default::default()
        };
        let dev = Arc::new(FileDevice::open(&dir.path().join("dev"), &opts).unwrap());
        let mut tasks = Vec::new();
        for i in 0..8u8 {
            let d = dev.clone();
            tasks.push(tokio::spawn(async move {
                d.write(i as u64 * 4096, &[i + 1; 4096]).await?;
                let mut b = vec![0u8; 4096];
                d.read(i as u64 * 4096, &mut b).await?;
                Ok::<_, BlockDevError>(b.iter().all(|&x| x == i + 1))
            }));
        }
        for t in tasks {
            assert!(t.await.unwrap().unwrap());
        }
        let mut b = vec![0u8; 4096];
        assert!(matches!(
            dev.read(1 << 20, &mut b).await,
            Err(BlockDevError::OutOfRange { .. })
        ));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn owned_reads_fill_the_given_buffer_inline_or_on_the_pool() {
        let dir = tempfile::tempdir().unwrap();
        for inline_reads in [true, false] {
            let opts = FileDeviceOptions {
                size_bytes: Some(1 << 20),
                inline_reads,
                engine: IoEngine::Threads,
                ..Default::default()
            };
            let dev =
                FileDevice::open(&dir.path().join(format!("dev{inline_reads}")), &opts).unwrap();
            dev.write(8192, &[4u8; 8192]).await.unwrap();
            for align in [4096, 512] {
                let buf = AlignedBuf::zeroed(8192, align).unwrap();
                let back = dev.read_owned(8192, buf).await.unwrap();
                assert_eq!(back.align_bytes(), align, "the same buffer comes back");
                assert!(
                    back.as_slice().iter().all(|&x| x == 4),
                    "inline {inline_reads}"
                );
            }
            let buf = AlignedBuf::zeroed(4096, 4096).unwrap();
            assert!(matches!(
                dev.read_owned(1 << 20, buf).await,
                Err(BlockDevError::OutOfRange { .. })
            ));
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn durable_writes_land_whole_inline_or_on_the_pool_and_survive_reopening() {
        for engine in [IoEngine::Aio, IoEngine::Threads] {
            durable_writes_land_whole(engine).await;
        }
    }

    async fn durable_writes_land_whole(engine: IoEngine) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dev");
        let opts = FileDeviceOptions {
            size_bytes: Some(1 << 20),
            engine,
            ..Default::default()
        };
        let dev = FileDevice::open(&path, &opts).unwrap();
        // Inline (small), on the blocking pool (large), and through the unaligned fallback.
        for (at, len, align, byte) in [
            (4096u64, 8192usize, 4096usize, 7u8),
            (65536, 128 << 10, 4096, 8),
            (512 << 10, 4096, 512, 9),
        ] {
            let buf = AlignedBuf::from_parts(&[&vec![byte; len]], align).unwrap();
            let back = dev.write_owned_durable(at, buf).await.unwrap();
            assert_eq!(back.len(), len, "the buffer comes back");
            let mut got = vec![0u8; len];
            dev.read(at, &mut got).await.unwrap();
            assert!(got.iter().all(|&x| x == byte), "{len} bytes at {at}");
        }
        let buf = AlignedBuf::zeroed(4096, 4096).unwrap();
        assert!(matches!(
            dev.write_owned_durable(1 << 20, buf).await,
            Err(BlockDevError::OutOfRange { .. })
        ));
        let buf = AlignedBuf::zeroed(100, 4096).unwrap();
        assert!(matches!(
            dev.write_owned_durable(0, buf).await,
            Err(BlockDevError::Misaligned { .. })
        ));
        drop(dev);
        let bytes = std::fs::read(&path).unwrap();
        assert!(bytes[65536..65536 + (128 << 10)].iter().all(|&x| x == 8));
    }

    #[test]
    fn missing_file_is_a_typed_error() {
        let err = FileDevice::open(
            Path::new("/nonexistent/dir/dev"),
            &FileDeviceOptions::default(),
        )
        .unwrap_err();
        assert!(matches!(err, BlockDevError::Io { .. }));
    }
}
