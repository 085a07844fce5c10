//! Linux native asynchronous I/O (`io_submit`/`io_getevents`) for a file opened with
//! `O_DIRECT`: the [`AioRing`] a [`crate::FileDevice`] uses when the kernel allows it.
//!
//! Owns one kernel AIO context per device, the table of operations in flight (each holds the
//! buffer the kernel reads or writes until the operation completes) and the completion thread
//! that reaps finished operations in batches and wakes the tasks waiting for them. The task that
//! submits never leaves its thread: an OSD's one runtime worker submits all of its device I/O
//! itself, where the blocking pool cost two thread hand-offs per I/O (see `docs/design/blockdev.md`).
//! It must never free or hand back a buffer while the kernel may still use it: a buffer leaves
//! the table only with its completion event, or is leaked if the context fails.

use crate::aligned::AlignedBuf;
use bytes::Bytes;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex, MutexGuard};
use tokio::sync::oneshot;

/// `struct iocb` of `<linux/aio_abi.h>`, little-endian layout (`aio_key` before
/// `aio_rw_flags`). Big-endian targets do not build the ring (see [`AioRing::new`]).
#[repr(C)]
#[derive(Default)]
struct Iocb {
    aio_data: u64,
    aio_key: u32,
    aio_rw_flags: i32,
    aio_lio_opcode: u16,
    aio_reqprio: i16,
    aio_fildes: u32,
    aio_buf: u64,
    aio_nbytes: u64,
    aio_offset: i64,
    aio_reserved2: u64,
    aio_flags: u32,
    aio_resfd: u32,
}

/// `struct io_event` of `<linux/aio_abi.h>`.
#[repr(C)]
#[derive(Default, Clone, Copy)]
struct IoEvent {
    data: u64,
    obj: u64,
    res: i64,
    res2: i64,
}

const IOCB_CMD_PREAD: u16 = 0;
const IOCB_CMD_PWRITE: u16 = 1;
const IOCB_CMD_FDSYNC: u16 = 3;
const IOCB_CMD_POLL: u16 = 5;

/// `aio_data` of the poll on the wake-up eventfd (slot keys are table indexes, far below).
const WAKE_KEY: u64 = u64::MAX;
/// Most completion events taken per `io_getevents` call.
const REAP_BATCH: usize = 64;

/// What an operation does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AioOp {
    /// Read into the buffer.
    Read,
    /// Write the buffer; with `dsync`, durable on completion (`RWF_DSYNC`).
    Write {
        /// Complete only once the write is durable.
        dsync: bool,
    },
    /// `fdatasync` the file.
    Fdsync,
}

/// The memory an operation reads into or writes from, kept alive in the table until the kernel
/// is done with it. Its heap address is stable when the value moves.
pub(crate) enum Pinned {
    /// No memory (a flush).
    Nothing,
    /// An aligned buffer the caller gets back.
    Aligned(AlignedBuf),
    /// Shared bytes (writes only: the kernel never writes into them).
    Shared(Bytes),
}

impl Pinned {
    /// Start address and length of the memory.
    fn region(&mut self) -> (u64, usize) {
        match self {
            Pinned::Nothing => (0, 0),
            Pinned::Aligned(b) => (b.as_mut_slice().as_mut_ptr() as u64, b.len()),
            Pinned::Shared(b) => (b.as_ptr() as u64, b.len()),
        }
    }
}

/// An operation that failed, with its memory when the kernel never saw it (a refused submission
/// may be retried another way, e.g. a durable write as write + flush).
pub(crate) struct AioError {
    /// What went wrong.
    pub error: io::Error,
    /// The memory, when the operation was never submitted.
    pub unsubmitted: Option<Pinned>,
}

impl AioError {
    fn after_submit(error: io::Error) -> Self {
        Self {
            error,
            unsubmitted: None,
        }
    }

    /// True when the kernel refused the kind of operation (not this one's bytes or offset).
    pub fn is_unsupported(&self) -> bool {
        self.unsubmitted.is_some()
            && matches!(
                self.error.raw_os_error(),
                Some(libc::EINVAL) | Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS)
            )
    }
}

/// What an operation's waiter gets back: the kernel's result (bytes, or a negated errno) with
/// the memory.
type Outcome = (i64, Pinned);

struct InFlight {
    done: oneshot::Sender<Outcome>,
    pinned: Pinned,
}

/// Operations in flight, indexed by the `aio_data` key the kernel hands back.
#[derive(Default)]
struct Table {
    slots: Vec<Option<InFlight>>,
    free: Vec<usize>,
    busy: usize,
}

impl Table {
    fn insert(&mut self, op: InFlight) -> usize {
        self.busy += 1;
        match self.free.pop() {
            Some(key) => {
                self.slots[key] = Some(op);
                key
            }
            None => {
                self.slots.push(Some(op));
                self.slots.len() - 1
            }
        }
    }

    fn remove(&mut self, key: usize) -> Option<InFlight> {
        let op = self.slots.get_mut(key)?.take()?;
        self.free.push(key);
        self.busy -= 1;
        Some(op)
    }
}

/// State shared by the ring's owner and its completion thread.
struct Shared {
    ctx: u64,
    file: Arc<File>,
    /// Written once to wake the completion thread (its poll completes).
    wake: OwnedFd,
    table: Mutex<Table>,
    stopping: AtomicBool,
    /// Set when reaping failed: nothing more is submitted.
    broken: AtomicBool,
}

impl Shared {
    fn table(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn submit_iocb(&self, iocb: &mut Iocb) -> io::Result<()> {
        let mut list = [iocb as *mut Iocb];
        loop {
            // SAFETY: `ctx` is a live context (destroyed only after `Shared` is done with
            // it); the iocb and the memory it names stay valid until completion: the memory
            // is held in the table.
            let rc = unsafe { libc::syscall(libc::SYS_io_submit, self.ctx, 1, list.as_mut_ptr()) };
            match rc {
                1 => return Ok(()),
                0 => return Err(io::Error::from(io::ErrorKind::WouldBlock)),
                _ => {
                    let error = io::Error::last_os_error();
                    if error.raw_os_error() != Some(libc::EINTR) {
                        return Err(error);
                    }
                }
            }
        }
    }

    /// Submits one operation on `len` bytes of `pinned` from byte `start` at once, and waits
    /// for its result (bytes transferred). The calling task submits it itself: one
    /// `io_submit` per operation, so that none waits for the runtime's next turn (see
    /// `docs/design/blockdev.md`, "Submission").
    async fn once(
        &self,
        op: AioOp,
        offset: u64,
        mut pinned: Pinned,
        start: usize,
        len: usize,
    ) -> Result<(usize, Pinned), AioError> {
        let (base, _) = pinned.region();
        let (tx, rx) = oneshot::channel();
        let key = {
            let mut table = self.table();
            // Checked under the table's lock after `fail_all` may have emptied it: an
            // operation inserted after that would wait for a completion thread that is gone.
            if self.broken.load(Ordering::Acquire) {
                return Err(AioError {
                    error: io::Error::other("the device's AIO context failed"),
                    unsubmitted: Some(pinned),
                });
            }
            table.insert(InFlight { done: tx, pinned })
        };
        let (opcode, rw_flags) = match op {
            AioOp::Read => (IOCB_CMD_PREAD, 0),
            AioOp::Write { dsync } => (IOCB_CMD_PWRITE, if dsync { libc::RWF_DSYNC } else { 0 }),
            AioOp::Fdsync => (IOCB_CMD_FDSYNC, 0),
        };
        let mut iocb = Iocb {
            aio_data: key as u64,
            aio_rw_flags: rw_flags,
            aio_lio_opcode: opcode,
            aio_fildes: self.file.as_raw_fd() as u32,
            aio_buf: base + start as u64,
            aio_nbytes: len as u64,
            aio_offset: offset as i64,
            ..Iocb::default()
        };
        if let Err(error) = self.submit_iocb(&mut iocb) {
            // The kernel refused it: it never started, so its memory goes back with the error.
            let pinned = self.table().remove(key).map(|op| op.pinned);
            return Err(AioError {
                error,
                unsubmitted: pinned,
            });
        }
        match rx.await {
            // The kernel's errnos are small; anything else would be an I/O error.
            Ok((res, _)) if res < 0 => Err(AioError::after_submit(io::Error::from_raw_os_error(
                i32::try_from(-res).unwrap_or(libc::EIO),
            ))),
            Ok((res, pinned)) => Ok((
                usize::try_from(res).expect("the kernel reports at most the bytes asked for"),
                pinned,
            )),
            Err(_) => Err(AioError::after_submit(io::Error::other(
                "the device's AIO context failed",
            ))),
        }
    }

    /// Arms the poll on the wake-up eventfd.
    fn arm_wake(&self) -> io::Result<()> {
        let mut iocb = Iocb {
            aio_data: WAKE_KEY,
            aio_lio_opcode: IOCB_CMD_POLL,
            aio_fildes: self.wake.as_raw_fd() as u32,
            aio_buf: libc::POLLIN as u64,
            ..Iocb::default()
        };
        self.submit_iocb(&mut iocb)
    }

    /// Completion thread: hands each finished operation its result and memory back, until the
    /// ring stops and nothing is in flight. False when reaping failed.
    fn reap(&self) -> bool {
        let mut events = [IoEvent::default(); REAP_BATCH];
        let mut finished = Vec::with_capacity(REAP_BATCH);
        loop {
            // SAFETY: `events` has room for REAP_BATCH events; a null timeout waits.
            let n = unsafe {
                libc::syscall(
                    libc::SYS_io_getevents,
                    self.ctx,
                    1i64,
                    REAP_BATCH as i64,
                    events.as_mut_ptr(),
                    std::ptr::null_mut::<libc::timespec>(),
                )
            };
            if n < 0 {
                if io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                    continue;
                }
                self.fail_all();
                return false;
            }
            {
                let mut table = self.table();
                let n = usize::try_from(n).expect("at most REAP_BATCH events");
                for ev in &events[..n] {
                    if ev.data == WAKE_KEY {
                        continue;
                    }
                    let key = usize::try_from(ev.data).expect("keys are the table's usize keys");
                    if let Some(op) = table.remove(key) {
                        finished.push((op, ev.res));
                    }
                }
            }
            for (op, res) in finished.drain(..) {
                // A dropped receiver (cancelled wait) frees the memory here, after completion.
                let _ = op.done.send((res, op.pinned));
            }
            if self.stopping.load(Ordering::Acquire) && self.table().busy == 0 {
                return true;
            }
        }
    }

    /// Reaping failed: the kernel may still own every buffer in flight, so they are leaked
    /// rather than freed; their waiters get an error.
    fn fail_all(&self) {
        self.broken.store(true, Ordering::Release);
        let mut table = self.table();
        for slot in table.slots.iter_mut() {
            if let Some(op) = slot.take() {
                std::mem::forget(op.pinned);
            }
        }
        table.busy = 0;
    }
}

/// Owns a kernel AIO context: destroying it waits for an RCU grace period (tens of
/// milliseconds), so the completion thread does it after the ring has been dropped.
struct Context(u64);

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: the context is ours and nothing submits to it any more; io_destroy waits for
        // any operation still in flight.
        unsafe { libc::syscall(libc::SYS_io_destroy, self.0) };
    }
}

/// A kernel AIO context on one file with its completion thread.
pub(crate) struct AioRing {
    shared: Arc<Shared>,
    /// Signalled by the completion thread once it stopped with nothing in flight.
    finished: Mutex<mpsc::Receiver<()>>,
}

impl std::fmt::Debug for AioRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AioRing").finish_non_exhaustive()
    }
}

impl AioRing {
    /// Sets up a context for up to `depth` operations in flight on `file` (opened with
    /// `O_DIRECT`: buffered AIO would block in `io_submit`). Fails where the kernel refuses
    /// (no AIO, the system-wide `aio-max-nr` reached, no poll support) or on big-endian targets.
    pub fn new(file: Arc<File>, depth: usize) -> io::Result<Self> {
        if cfg!(target_endian = "big") {
            return Err(io::Error::from(io::ErrorKind::Unsupported));
        }
        // SAFETY: plain syscall creating a new fd.
        let raw = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a new fd nobody else owns.
        let wake = unsafe { OwnedFd::from_raw_fd(raw) };
        let mut ctx: u64 = 0;
        let nr =
            i64::try_from(depth + 1).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        // SAFETY: `ctx` is a valid out-pointer initialised to 0 as io_setup requires.
        if unsafe { libc::syscall(libc::SYS_io_setup, nr, &mut ctx as *mut u64) } < 0 {
            return Err(io::Error::last_os_error());
        }
        let context = Context(ctx);
        let shared = Arc::new(Shared {
            ctx,
            file,
            wake,
            table: Mutex::new(Table::default()),
            stopping: AtomicBool::new(false),
            broken: AtomicBool::new(false),
        });
        shared.arm_wake()?;
        let for_thread = shared.clone();
        let (done, finished) = mpsc::channel();
        std::thread::Builder::new()
            .name("cairn-aio".into())
            .spawn(move || {
                let healthy = for_thread.reap();
                drop(for_thread);
                let _ = done.send(());
                if healthy {
                    drop(context);
                } else {
                    // The kernel may still use leaked buffers: the context is never destroyed
                    // (nor its address reused for another device's context).
                    std::mem::forget(context);
                }
            })?;
        Ok(Self {
            shared,
            finished: Mutex::new(finished),
        })
    }

    /// Runs `op` over all of `pinned` at `offset`, resubmitting the rest after a short
    /// transfer, and hands the memory back.
    async fn transfer(
        &self,
        op: AioOp,
        offset: u64,
        mut pinned: Pinned,
    ) -> Result<Pinned, AioError> {
        let (_, len) = pinned.region();
        let mut done = 0usize;
        loop {
            let (n, back) = self
                .shared
                .once(op, offset + done as u64, pinned, done, len - done)
                .await
                .map_err(|mut e| {
                    if done > 0 {
                        e.unsubmitted = None;
                    }
                    e
                })?;
            pinned = back;
            done += n;
            if op == AioOp::Fdsync || done >= len {
                return Ok(pinned);
            }
            if n == 0 {
                let kind = match op {
                    AioOp::Read => io::ErrorKind::UnexpectedEof,
                    _ => io::ErrorKind::WriteZero,
                };
                return Err(AioError::after_submit(io::Error::from(kind)));
            }
        }
    }
}

impl AioRing {
    /// Reads `buf.len()` bytes at `offset` into `buf` and hands it back.
    pub async fn read(&self, offset: u64, buf: AlignedBuf) -> Result<AlignedBuf, AioError> {
        aligned(
            self.transfer(AioOp::Read, offset, Pinned::Aligned(buf))
                .await?,
        )
    }

    /// Writes `buf` at `offset` (durable on return with `dsync`) and hands it back.
    pub async fn write(
        &self,
        offset: u64,
        buf: AlignedBuf,
        dsync: bool,
    ) -> Result<AlignedBuf, AioError> {
        aligned(
            self.transfer(AioOp::Write { dsync }, offset, Pinned::Aligned(buf))
                .await?,
        )
    }

    /// Writes shared bytes at `offset`.
    pub async fn write_shared(&self, offset: u64, data: Bytes) -> Result<(), AioError> {
        let op = AioOp::Write { dsync: false };
        self.transfer(op, offset, Pinned::Shared(data))
            .await
            .map(drop)
    }

    /// Makes every write completed before the call durable (`fdatasync`).
    pub async fn flush(&self) -> Result<(), AioError> {
        self.transfer(AioOp::Fdsync, 0, Pinned::Nothing)
            .await
            .map(drop)
    }
}

/// The aligned buffer an operation on one hands back.
fn aligned(back: Pinned) -> Result<AlignedBuf, AioError> {
    match back {
        Pinned::Aligned(buf) => Ok(buf),
        _ => Err(AioError::after_submit(io::Error::other(
            "an AIO operation handed back other memory than it took",
        ))),
    }
}

impl Drop for AioRing {
    fn drop(&mut self) {
        // The completion thread stops once every operation in the table has completed.
        self.shared.stopping.store(true, Ordering::Release);
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from `one` to our eventfd; this completes the armed poll,
        // which wakes the completion thread.
        unsafe {
            libc::write(
                self.shared.wake.as_raw_fd(),
                (&one as *const u64).cast(),
                std::mem::size_of::<u64>(),
            )
        };
        // Abandoned operations finish before the device is gone; the context is destroyed
        // by the completion thread afterwards.
        let finished = self.finished.get_mut().unwrap_or_else(|p| p.into_inner());
        let _ = finished.recv();
    }
}
