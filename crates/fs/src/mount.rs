//! The FUSE client: each kernel request becomes a task on the client's runtime that asks the
//! metadata server (names, attributes) or the OSDs (file data) and then replies, so many
//! requests are in flight at once.
//!
//! Coherence is close-to-open, as NFS gives: names and attributes are cached by the kernel
//! only under a directory lease ([`crate::dirlease`]; TTL 0 otherwise, and always for a
//! directory's name), for what is left of the lease, and taken out of the kernel before a
//! recalled lease is given up ([`crate::kernel`]); a file's size grown by writes is reported
//! to the MDS when the file is flushed, fsynced or closed (and shown by this client
//! meanwhile), and the page cache of a file is dropped when it is opened. Every mutation the
//! MDS answered is in its journal.
//!
//! Writes are behind, as NFS's and CephFS's buffered writes are: a write is answered once it
//! is sent to the OSDs (at most [`WRITE_BEHIND_BYTES`] in flight per mount), so one writer
//! keeps many in flight; flush, fsync and close wait for a file's writes and report the first
//! failure, and a read or truncate of the file waits for them first. A write overlapping one
//! still in flight waits for it, so the OSDs apply overlapping writes in the order made.
//! `O_SYNC` and `O_DSYNC` writes are answered only once durable.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cairn_client::Client;
use cairn_proto::mds::{
    Attr, DirEntry, FileKind, LockKind, LockSpec, MdsAnswer, MdsOp, NewInode, SetAttr,
    MAX_READDIR_ENTRIES,
};
use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo,
    KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyLock, ReplyOpen, ReplyStatfs, ReplyWrite,
    ReplyXattr, Request, TimeOrNow, WriteFlags,
};

use crate::backing;
use crate::dirlease::Lookup;
use crate::full::SpaceGuard;
use crate::gather::{self, Gather, GATHER_LINGER};
use crate::holds::Holds;
use crate::link::MdsLink;
use crate::mds::now_ns;
use crate::readahead;

/// Attributes and names no lease covers are not cached by the kernel (close-to-open across
/// clients).
const TTL: Duration = Duration::ZERO;
/// Largest write the kernel sends in one request.
const MAX_WRITE_BYTES: u32 = 1 << 20;
/// Readahead window a mount asks for unless told, KiB: two objects of the default layout,
/// so a sequential reader keeps the next object's reads in flight.
pub const DEFAULT_READAHEAD_KIB: u32 = 8 << 10;
/// Requests (readahead among them) the kernel keeps in flight to the mount at once.
const MAX_BACKGROUND: u16 = 64;
/// Block size `stat` reports, which `cp` and friends take as their I/O size.
const BLKSIZE: u32 = 1 << 20;
/// Most bytes of writes a mount has in flight before a write waits for room.
pub const WRITE_BEHIND_BYTES: usize = 64 << 20;
/// Longest a file read or write waits for its objects (PGs inactive while the cluster heals)
/// before the call fails with EIO; as long as a metadata call waits for the MDS.
pub const DATA_TIMEOUT_MS: u64 = 300_000;
/// Most streams of sequential writes into one file gathered at once (IOR's shared file
/// written by several processes, each into its own region).
const GATHER_STREAMS: usize = 16;
/// Bytes per permit of the write-behind budget.
const PERMIT_BYTES: usize = 4096;
/// A lock that must wait (`F_SETLKW`, `flock` without `LOCK_NB`) is asked for again after
/// this, then after twice as long each time, up to [`LOCK_POLL_MOST`].
const LOCK_POLL_FIRST: Duration = Duration::from_millis(10);
/// Longest pause between two asks for a lock that must wait.
const LOCK_POLL_MOST: Duration = Duration::from_millis(500);

/// A kernel lock request as the MDS takes it (None for a lock type that is none of
/// `F_RDLCK`, `F_WRLCK`, `F_UNLCK`, or a range that ends before it starts).
fn lock_spec(owner: LockOwner, start: u64, end: u64, typ: i32, pid: u32) -> Option<LockSpec> {
    let kind = match typ {
        libc::F_RDLCK => LockKind::Shared,
        libc::F_WRLCK => LockKind::Exclusive,
        libc::F_UNLCK => LockKind::Unlock,
        _ => return None,
    };
    (start <= end).then_some(LockSpec {
        owner: owner.0,
        start,
        end,
        kind,
        pid,
    })
}

/// The kernel's lock type for `kind`.
fn lock_type(kind: LockKind) -> i32 {
    match kind {
        LockKind::Shared => libc::F_RDLCK,
        LockKind::Exclusive => libc::F_WRLCK,
        LockKind::Unlock => libc::F_UNLCK,
    }
}

/// Written but not yet reported: a file's size and modification time as this client's writes
/// left them.
#[derive(Clone, Copy, Debug)]
struct Dirty {
    size: u64,
    mtime_ns: i64,
}

/// What this client keeps between requests.
#[derive(Default)]
struct State {
    /// Unreported sizes by inode.
    dirty: HashMap<u64, Dirty>,
    /// Known layouts (object sizes) and sizes by inode, as the latest attributes said.
    files: HashMap<u64, (u32, u64)>,
    /// Open directories' listings by handle.
    listings: HashMap<u64, Arc<Vec<DirEntry>>>,
    /// Writes in flight by inode: their byte ranges, and the first failure not yet reported.
    inflight: HashMap<u64, Inflight>,
    /// Sequential writes not yet sent, by inode, one per stream of writes into the file (at
    /// most [`GATHER_STREAMS`]); their ranges count as in flight.
    gathers: HashMap<u64, Vec<Gather>>,
    next_gather: u64,
    next_fh: u64,
}

/// A file's writes in flight.
#[derive(Default)]
struct Inflight {
    ranges: Vec<(u64, u64)>,
    error: Option<i32>,
}

/// What limits and signals writes in flight, shared by a mount's tasks.
struct WriteBehind {
    room: Arc<tokio::sync::Semaphore>,
    changed: tokio::sync::Notify,
}

/// The mounted file system.
pub struct CairnFs {
    rt: tokio::runtime::Handle,
    rados: Arc<Client>,
    link: Arc<MdsLink>,
    holds: Arc<Holds>,
    data_pool: String,
    state: Arc<Mutex<State>>,
    behind: Arc<WriteBehind>,
    /// Files are created here under leases, without waiting for the MDS.
    early_creates: bool,
    /// The readahead window asked for at the kernel's handshake, KiB.
    readahead_kib: u32,
    /// Whether a full cluster or pool refuses creates, as this mount's map says.
    space: Mutex<SpaceGuard>,
}

/// Everything a request task needs, cloned out of [`CairnFs`].
#[derive(Clone)]
struct Ctx {
    rados: Arc<Client>,
    link: Arc<MdsLink>,
    holds: Arc<Holds>,
    data_pool: String,
    state: Arc<Mutex<State>>,
    behind: Arc<WriteBehind>,
}

fn errno(e: i32) -> Errno {
    Errno::from_i32(e)
}

fn time_of(ns: i64) -> SystemTime {
    match u64::try_from(ns) {
        Ok(n) => UNIX_EPOCH + Duration::from_nanos(n),
        Err(_) => UNIX_EPOCH - Duration::from_nanos(ns.unsigned_abs()),
    }
}

fn ns_of(t: TimeOrNow) -> i64 {
    match t {
        TimeOrNow::Now => now_ns(),
        TimeOrNow::SpecificTime(t) => match t.duration_since(UNIX_EPOCH) {
            Ok(d) => i64::try_from(d.as_nanos()).unwrap_or(i64::MAX),
            Err(e) => -i64::try_from(e.duration().as_nanos()).unwrap_or(i64::MAX),
        },
    }
}

fn file_type(kind: FileKind) -> FileType {
    match kind {
        FileKind::File => FileType::RegularFile,
        FileKind::Dir => FileType::Directory,
        FileKind::Symlink => FileType::Symlink,
        FileKind::Fifo => FileType::NamedPipe,
        FileKind::Socket => FileType::Socket,
        FileKind::CharDevice => FileType::CharDevice,
        FileKind::BlockDevice => FileType::BlockDevice,
    }
}

/// The kind `mode`'s file-type bits name (mknod).
fn kind_of_mode(mode: u32) -> Option<FileKind> {
    match mode & libc::S_IFMT {
        libc::S_IFREG | 0 => Some(FileKind::File),
        libc::S_IFDIR => Some(FileKind::Dir),
        libc::S_IFIFO => Some(FileKind::Fifo),
        libc::S_IFSOCK => Some(FileKind::Socket),
        libc::S_IFCHR => Some(FileKind::CharDevice),
        libc::S_IFBLK => Some(FileKind::BlockDevice),
        _ => None,
    }
}

/// When no write of `ino` is in flight: the first error its writes left (taken, so it is
/// reported once), or success. `None` while writes are in flight.
fn take_if_idle(st: &mut State, ino: u64) -> Option<Result<(), i32>> {
    if !st.inflight.get(&ino).is_none_or(|f| f.ranges.is_empty()) {
        return None;
    }
    let error = st.inflight.remove(&ino).and_then(|f| f.error);
    Some(error.map_or(Ok(()), Err))
}

impl Ctx {
    async fn mds(&self, op: MdsOp) -> Result<MdsAnswer, i32> {
        self.link.request(op).await
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether this client's writes to `ino` are unreported or in flight: its size and times
    /// are this client's own, still changing, and not for the kernel to cache.
    fn unsettled(&self, ino: u64) -> bool {
        let st = self.lock();
        st.dirty.contains_key(&ino)
            || st.inflight.contains_key(&ino)
            || st.gathers.contains_key(&ino)
    }

    /// `attr` as this client sees it (its unreported writes included), remembered.
    fn seen(&self, mut attr: Attr) -> FileAttr {
        let mut st = self.lock();
        if let Some(d) = st.dirty.get(&attr.ino) {
            attr.size = attr.size.max(d.size);
            attr.mtime_ns = attr.mtime_ns.max(d.mtime_ns);
        }
        if attr.kind == FileKind::File {
            st.files.insert(attr.ino, (attr.object_size, attr.size));
        }
        FileAttr {
            ino: INodeNo(attr.ino),
            size: attr.size,
            blocks: attr.size.div_ceil(512),
            atime: time_of(attr.atime_ns),
            mtime: time_of(attr.mtime_ns),
            ctime: time_of(attr.ctime_ns),
            crtime: time_of(attr.ctime_ns),
            kind: file_type(attr.kind),
            perm: u16::try_from(attr.perm & 0o7777).unwrap_or(0),
            nlink: attr.nlink,
            uid: attr.uid,
            gid: attr.gid,
            rdev: attr.rdev,
            blksize: BLKSIZE,
            flags: 0,
        }
    }

    async fn attr_of(&self, op: MdsOp) -> Result<FileAttr, i32> {
        match self.mds(op).await? {
            MdsAnswer::Attr(a) => Ok(self.seen(a)),
            _ => Err(libc::EIO),
        }
    }

    async fn done(&self, op: MdsOp) -> Result<(), i32> {
        self.mds(op).await.map(|_| ())
    }

    /// Layout and size of file `ino`, from the MDS when this client has not seen it.
    async fn layout(&self, ino: u64) -> Result<(u32, u64), i32> {
        if let Some(known) = self.lock().files.get(&ino).copied() {
            return Ok(known);
        }
        self.attr_of(MdsOp::GetAttr { ino }).await?;
        self.lock().files.get(&ino).copied().ok_or(libc::EISDIR)
    }

    /// Sends `ino`'s gathered writes and waits until it has no write in flight; the first
    /// failure among them, once.
    async fn drain(&self, ino: u64) -> Result<(), i32> {
        loop {
            let changed = self.behind.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            {
                let mut st = self.lock();
                self.seal(&mut st, ino);
                if let Some(settled) = take_if_idle(&mut st, ino) {
                    return settled;
                }
            }
            changed.await;
        }
    }

    /// What a report of `ino` would answer, when it has nothing to wait for: no write of it
    /// gathered or in flight and no size or mtime unreported (the error a failed write left is
    /// taken, as [`Ctx::report`] takes it). `None` when there is something to wait for; the
    /// FUSE thread answers a flush or close of an untouched file with this, without a hop to
    /// the runtime.
    fn settled_now(&self, ino: u64) -> Option<Result<(), i32>> {
        let mut st = self.lock();
        let untouched =
            st.gathers.get(&ino).is_none_or(|g| g.is_empty()) && !st.dirty.contains_key(&ino);
        match untouched {
            true => take_if_idle(&mut st, ino),
            false => None,
        }
    }

    /// Reports `ino`'s unreported size and mtime to the MDS (flush, fsync, close), once its
    /// writes in flight are done.
    async fn report(&self, ino: u64) -> Result<(), i32> {
        self.drain(ino).await?;
        let Some(d) = self.lock().dirty.get(&ino).copied() else {
            return Ok(());
        };
        let set = SetAttr {
            size: Some(d.size),
            grow_only: true,
            mtime_ns: Some(d.mtime_ns),
            ..SetAttr::default()
        };
        self.attr_of(MdsOp::SetAttr {
            ino,
            set,
            now_ns: now_ns(),
        })
        .await?;
        let mut st = self.lock();
        if st.dirty.get(&ino).is_some_and(|now| now.size == d.size) {
            st.dirty.remove(&ino);
        }
        Ok(())
    }

    /// Takes a write of `data` at `offset` of `ino`: joins it to the file's gathered writes
    /// when it continues them, or sends what was gathered and then this write (gathered in
    /// turn when it ends inside its object). Answers once it is taken (or, `sync`, once it is
    /// durable).
    async fn write(&self, ino: u64, offset: u64, data: Vec<u8>, sync: bool) -> Result<u32, i32> {
        let (object_size, _) = self.layout(ino).await?;
        let len = u32::try_from(data.len()).map_err(|_| libc::EINVAL)?;
        let end = offset + data.len() as u64;
        let permits = u32::try_from(data.len().div_ceil(PERMIT_BYTES).max(1)).unwrap_or(u32::MAX);
        let Ok(room) = self.behind.room.clone().acquire_many_owned(permits).await else {
            return Err(libc::EIO);
        };
        let mut room = Some(room);
        let mut data = Some(data);
        loop {
            let changed = self.behind.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let sent = {
                let mut st = self.lock();
                // Only bytes no write in flight overlaps may join (an overlapping write must
                // wait for it, to land after it).
                let clear = st
                    .inflight
                    .get(&ino)
                    .is_none_or(|f| !f.ranges.iter().any(|&(a, b)| a < end && offset < b));
                let joins = st.gathers.get(&ino).and_then(|gs| {
                    gs.iter().position(|g| {
                        clear && !sync && g.continued_by(offset, len as usize, object_size)
                    })
                });
                if let Some(i) = joins {
                    let g = &mut st.gathers.get_mut(&ino).expect("found")[i];
                    let start = g.offset;
                    g.data.extend_from_slice(&data.take().expect("taken once"));
                    g.room.merge(room.take().expect("taken once"));
                    let complete = g.complete(object_size);
                    let f = st.inflight.entry(ino).or_default();
                    if let Some(r) = f.ranges.iter_mut().find(|r| r.0 == start) {
                        r.1 = end;
                    }
                    self.note_dirty(&mut st, ino, end);
                    if complete {
                        self.seal_where(&mut st, ino, |g| g.offset == start);
                    }
                    return Ok(len);
                }
                self.seal_where(&mut st, ino, |g| g.offset < end && offset < g.end());
                let f = st.inflight.entry(ino).or_default();
                if !f.ranges.iter().any(|&(a, b)| a < end && offset < b) {
                    f.ranges.push((offset, end));
                    self.note_dirty(&mut st, ino, end);
                    let data = data.take().expect("taken once");
                    let room = room.take().expect("taken once");
                    if !sync && gather::worth_gathering(offset, data.len(), object_size) {
                        st.next_gather += 1;
                        let generation = st.next_gather;
                        let streams = st.gathers.get(&ino).map_or(0, Vec::len);
                        if streams >= GATHER_STREAMS {
                            let oldest = st.gathers[&ino].iter().map(|g| g.generation).min();
                            self.seal_where(&mut st, ino, |g| Some(g.generation) == oldest);
                        }
                        st.gathers.entry(ino).or_default().push(Gather {
                            offset,
                            data,
                            room,
                            generation,
                            object_size,
                        });
                        let c = self.clone();
                        tokio::spawn(async move {
                            tokio::time::sleep(GATHER_LINGER).await;
                            let mut st = c.lock();
                            c.seal_where(&mut st, ino, |g| g.generation == generation);
                        });
                        return Ok(len);
                    }
                    Some(self.send(ino, object_size, offset, data, room))
                } else {
                    None
                }
            };
            if let Some(sent) = sent {
                if sync {
                    sent.await.map_err(|_| libc::EIO)?;
                    self.drain(ino).await?;
                }
                return Ok(len);
            }
            changed.await;
        }
    }

    /// Records that this client's writes reach `end` of `ino` (its size as this client sees
    /// it, reported to the MDS at flush, fsync and close).
    fn note_dirty(&self, st: &mut State, ino: u64, end: u64) {
        let d = st.dirty.entry(ino).or_insert(Dirty {
            size: 0,
            mtime_ns: 0,
        });
        d.size = d.size.max(end);
        d.mtime_ns = now_ns();
        if let Some(f) = st.files.get_mut(&ino) {
            f.1 = f.1.max(end);
        }
    }

    /// Sends `ino`'s gathered writes, if any.
    fn seal(&self, st: &mut State, ino: u64) {
        self.seal_where(st, ino, |_| true);
    }

    /// Sends those of `ino`'s gathered writes that `which` picks.
    fn seal_where(&self, st: &mut State, ino: u64, which: impl Fn(&Gather) -> bool) {
        let Some(gathers) = st.gathers.get_mut(&ino) else {
            return;
        };
        let (go, stay): (Vec<Gather>, Vec<Gather>) = gathers.drain(..).partition(|g| which(g));
        if stay.is_empty() {
            st.gathers.remove(&ino);
        } else {
            *gathers = stay;
        }
        for g in go {
            drop(self.send(ino, g.object_size, g.offset, g.data, g.room));
        }
    }

    /// Writes `data` at `offset` of `ino` in the background (its range already counted in
    /// flight): the range is released when done, and a failure kept for flush or fsync.
    fn send(
        &self,
        ino: u64,
        object_size: u32,
        offset: u64,
        data: Vec<u8>,
        room: tokio::sync::OwnedSemaphorePermit,
    ) -> tokio::task::JoinHandle<()> {
        let c = self.clone();
        let end = offset + data.len() as u64;
        tokio::spawn(async move {
            let r =
                crate::data::write(&c.rados, &c.data_pool, ino, object_size, offset, &data).await;
            drop(room);
            let mut st = c.lock();
            let f = st.inflight.entry(ino).or_default();
            f.ranges.retain(|&r| r != (offset, end));
            if let Err(e) = &r {
                tracing::warn!(ino, offset, error = %e, "a file write failed");
                f.error.get_or_insert(e.errno());
            }
            drop(st);
            c.behind.changed.notify_waiters();
        })
    }

    async fn read(&self, ino: u64, offset: u64, len: u32) -> Result<bytes::Bytes, i32> {
        self.drain_quietly(ino).await;
        let (object_size, size) = self.layout(ino).await?;
        let dirty = self.lock().dirty.get(&ino).map_or(0, |d| d.size);
        crate::data::read(
            &self.rados,
            &self.data_pool,
            ino,
            object_size,
            offset,
            len as usize,
            size.max(dirty),
        )
        .await
        .map_err(|e| {
            tracing::warn!(ino, error = %e, "a file read failed");
            libc::EIO
        })
    }

    /// Waits for `ino`'s writes in flight, leaving a failure among them for flush or fsync
    /// to report.
    async fn drain_quietly(&self, ino: u64) {
        if let Err(e) = self.drain(ino).await {
            self.lock()
                .inflight
                .entry(ino)
                .or_default()
                .error
                .get_or_insert(e);
        }
    }

    async fn set_attr(&self, ino: u64, set: SetAttr) -> Result<FileAttr, i32> {
        if let Some(new_size) = set.size {
            self.drain(ino).await?;
            let current = match self.mds(MdsOp::GetAttr { ino }).await? {
                MdsAnswer::Attr(a) => a,
                _ => return Err(libc::EIO),
            };
            if current.kind == FileKind::File {
                let dirty = self.lock().dirty.remove(&ino).map_or(0, |d| d.size);
                let old = current.size.max(dirty);
                if new_size < old {
                    crate::data::truncate(
                        &self.rados,
                        &self.data_pool,
                        ino,
                        current.object_size,
                        old,
                        new_size,
                    )
                    .await
                    .map_err(|e| e.errno())?;
                }
            }
        }
        let attr = self
            .attr_of(MdsOp::SetAttr {
                ino,
                set,
                now_ns: now_ns(),
            })
            .await?;
        if let Some(f) = self.lock().files.get_mut(&ino) {
            f.1 = attr.size;
        }
        Ok(attr)
    }

    /// Every entry of directory `ino`, page by page.
    async fn list(&self, ino: u64) -> Result<Vec<DirEntry>, i32> {
        let mut out = Vec::new();
        let mut after = Vec::new();
        loop {
            let op = MdsOp::ReadDir {
                ino,
                after: after.clone(),
                max: MAX_READDIR_ENTRIES,
            };
            let MdsAnswer::Entries { entries, end } = self.mds(op).await? else {
                return Err(libc::EIO);
            };
            if let Some(last) = entries.last() {
                after.clone_from(&last.name);
            }
            let empty = entries.is_empty();
            out.extend(entries);
            if end || empty {
                return Ok(out);
            }
        }
    }

    async fn statfs(&self) -> Result<(u64, u64, u64), i32> {
        let MdsAnswer::StatFs { files, bytes } = self.mds(MdsOp::StatFs).await? else {
            return Err(libc::EIO);
        };
        let free = crate::space::free_bytes(&self.rados, &self.data_pool).await;
        Ok((files, bytes, free))
    }
}

fn new_inode(req: &Request, kind: FileKind, mode: u32, umask: u32, rdev: u32) -> NewInode {
    NewInode {
        kind,
        perm: mode & !umask & 0o7777,
        uid: req.uid(),
        gid: req.gid(),
        rdev,
        target: Vec::new(),
        now_ns: now_ns(),
        open: false,
        ino: None,
        object_size: None,
    }
}

impl CairnFs {
    /// A file system whose metadata is in `metadata_pool` and data in `data_pool`, served by
    /// tasks on `rt`.
    pub fn new(
        rt: tokio::runtime::Handle,
        rados: Arc<Client>,
        metadata_pool: String,
        data_pool: String,
    ) -> CairnFs {
        let space = SpaceGuard::new(rados.mon().watch(), &metadata_pool, &data_pool);
        let link = Arc::new(MdsLink::new(rados.clone(), metadata_pool));
        let holds = Arc::new(Holds::new(link.clone()));
        rt.spawn(holds.clone().renew_forever());
        rt.spawn(MdsLink::keep_replaying(Arc::downgrade(&link)));
        let permits = WRITE_BEHIND_BYTES / PERMIT_BYTES;
        CairnFs {
            rt,
            rados,
            link,
            holds,
            data_pool,
            state: Arc::default(),
            behind: Arc::new(WriteBehind {
                room: Arc::new(tokio::sync::Semaphore::new(permits)),
                changed: tokio::sync::Notify::new(),
            }),
            early_creates: true,
            readahead_kib: DEFAULT_READAHEAD_KIB,
            space: Mutex::new(space),
        }
    }

    /// Whether the MDS refuses creates now (an OSD full, a pool past its quota), as this
    /// mount's map says.
    fn refuses_creates(&self) -> bool {
        let mut space = self.space.lock().unwrap_or_else(|p| p.into_inner());
        space.growth_refusal().is_some()
    }

    /// Creates file `name` in `parent` here, held open, when this mount may (see
    /// [`MdsLink::create_here`]): its attributes as the kernel gets them; the `Create` goes
    /// to the MDS in the background.
    fn create_here(&self, parent: u64, name: &[u8], inode: &NewInode) -> Option<FileAttr> {
        if !self.early_creates {
            return None;
        }
        if self.link.wants_numbers(parent) {
            let link = self.link.clone();
            self.rt.spawn(async move { link.ask_numbers().await });
        }
        if self.refuses_creates() {
            return None;
        }
        let (attr, early) = self.holds.opened_here(|| {
            let (attr, early) = self.link.create_here(parent, name, inode.clone())?;
            let ino = attr.ino;
            Some(((attr, early), ino))
        })?;
        self.rt.spawn(self.link.clone().finish_create(early));
        Some(self.ctx().seen(attr))
    }

    fn ctx(&self) -> Ctx {
        Ctx {
            rados: self.rados.clone(),
            link: self.link.clone(),
            holds: self.holds.clone(),
            data_pool: self.data_pool.clone(),
            state: self.state.clone(),
            behind: self.behind.clone(),
        }
    }

    /// Runs `work` on the runtime; it replies when done.
    fn spawn<F>(&self, work: impl FnOnce(Ctx) -> F)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        self.rt.spawn(work(self.ctx()));
    }

    /// Makes `inode` named `name` in `parent` and answers the kernel with its attributes
    /// (mknod, mkdir, symlink).
    fn make(&self, parent: INodeNo, name: &OsStr, inode: NewInode, reply: ReplyEntry) {
        let op = MdsOp::Create {
            parent: parent.0,
            name: name.as_bytes().to_vec(),
            inode,
        };
        self.spawn(|c| async move { reply_entry(reply, c.attr_of(op).await) });
    }

    /// Runs `op`, answered with success or its errno (unlink, rmdir, rename, xattrs).
    fn run(&self, op: MdsOp, reply: ReplyEmpty) {
        self.spawn(|c| async move { reply_empty(reply, c.done(op).await) });
    }

    fn next_fh(&self) -> u64 {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        st.next_fh += 1;
        st.next_fh
    }
}

/// The generation every inode has (inode numbers are never reused).
const NO_GEN: Generation = Generation(0);

/// A lookup's answer that the name is missing, which the kernel caches for the entry's TTL
/// (inode number 0).
fn missing() -> FileAttr {
    FileAttr {
        ino: INodeNo(0),
        size: 0,
        blocks: 0,
        atime: UNIX_EPOCH,
        mtime: UNIX_EPOCH,
        ctime: UNIX_EPOCH,
        crtime: UNIX_EPOCH,
        kind: FileType::RegularFile,
        perm: 0,
        nlink: 0,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: BLKSIZE,
        flags: 0,
    }
}

/// The kernel's cache, told to drop what a recalled lease covered (FUSE invalidation notices).
struct Notices(fuser::Notifier);

impl crate::kernel::KernelCache for Notices {
    fn forget_entry(&self, dir: u64, name: &[u8]) -> std::io::Result<()> {
        self.0.inval_entry(INodeNo(dir), OsStr::from_bytes(name))
    }

    fn forget_attr(&self, ino: u64) -> std::io::Result<()> {
        // A negative offset drops the attributes alone, not the page cache.
        self.0.inval_inode(INodeNo(ino), -1, 0)
    }
}

fn reply_entry(reply: ReplyEntry, r: Result<FileAttr, i32>) {
    match r {
        Ok(a) => reply.entry(&TTL, &a, NO_GEN),
        Err(e) => reply.error(errno(e)),
    }
}

fn reply_empty(reply: ReplyEmpty, r: Result<(), i32>) {
    match r {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(errno(e)),
    }
}

fn reply_bytes(reply: ReplyXattr, size: u32, r: Result<Vec<u8>, i32>) {
    match r {
        Ok(v) if size == 0 => reply.size(u32::try_from(v.len()).unwrap_or(u32::MAX)),
        Ok(v) if v.len() <= size as usize => reply.data(&v),
        Ok(_) => reply.error(errno(libc::ERANGE)),
        Err(e) => reply.error(errno(e)),
    }
}

impl Filesystem for CairnFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        if let Err(most) = config.set_max_write(MAX_WRITE_BYTES) {
            let _ = config.set_max_write(most);
        }
        // The kernel offers its default window (128 KiB) and keeps the smaller: a narrower one
        // is set here (0 KiB is refused for 1 byte, no page), a wider one through sysfs once
        // mounted (`readahead::set_window`).
        if let Err(most) = config.set_max_readahead(self.readahead_kib.saturating_mul(1024)) {
            let _ = config.set_max_readahead(most);
        }
        let _ = config.set_max_background(MAX_BACKGROUND);
        let _ = config.set_congestion_threshold(MAX_BACKGROUND / 4 * 3);
        let locks = fuser::InitFlags::FUSE_POSIX_LOCKS | fuser::InitFlags::FUSE_FLOCK_LOCKS;
        if let Err(missing) = config.add_capabilities(locks) {
            tracing::warn!(?missing, "the kernel takes no file locks from this mount");
        }
        Ok(())
    }

    fn getlk(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        lock_owner: LockOwner,
        start: u64,
        end: u64,
        typ: i32,
        pid: u32,
        reply: ReplyLock,
    ) {
        let Some(lock) = lock_spec(lock_owner, start, end, typ, pid) else {
            return reply.error(Errno::EINVAL);
        };
        self.spawn(|c| async move {
            match c.holds.lock_in_the_way(ino.0, lock).await {
                Ok(Some(l)) => reply.locked(l.start, l.end, lock_type(l.kind), l.pid),
                Ok(None) => reply.locked(start, end, libc::F_UNLCK, 0),
                Err(e) => reply.error(errno(e)),
            }
        });
    }

    fn setlk(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        lock_owner: LockOwner,
        start: u64,
        end: u64,
        typ: i32,
        pid: u32,
        sleep: bool,
        reply: ReplyEmpty,
    ) {
        let Some(lock) = lock_spec(lock_owner, start, end, typ, pid) else {
            return reply.error(Errno::EINVAL);
        };
        self.spawn(|c| async move {
            let mut pause = LOCK_POLL_FIRST;
            loop {
                match c.holds.set_lock(ino.0, lock, sleep).await {
                    Err(libc::EAGAIN) if sleep => {
                        tokio::time::sleep(pause).await;
                        pause = (pause * 2).min(LOCK_POLL_MOST);
                    }
                    r => return reply_empty(reply, r),
                }
            }
        });
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let name = name.as_bytes().to_vec();
        let (leased, ttl, renew) = self.link.lookup_leased(parent.0, &name);
        for dir in renew.into_iter().flatten() {
            let link = self.link.clone();
            self.rt
                .spawn(async move { link.ask_lease(dir, false).await });
        }
        let ask_lease = match leased {
            // The directory is leased here and has no such name: answered without the MDS,
            // and cached by the kernel as missing while the lease lasts.
            Lookup::Absent if ttl.entry.is_zero() => return reply.error(errno(libc::ENOENT)),
            Lookup::Absent => return reply.entry_with_ttls(&TTL, &ttl.entry, &missing(), NO_GEN),
            // A directory leased here too, named in one leased here.
            Lookup::Found(attr) => {
                let c = self.ctx();
                let attr_ttl = match c.unsettled(attr.ino) {
                    true => TTL,
                    false => ttl.attr,
                };
                let attr = c.seen(*attr);
                return reply.entry_with_ttls(&attr_ttl, &ttl.entry, &attr, NO_GEN);
            }
            Lookup::Ask(ask_lease) => ask_lease,
        };
        self.spawn(|c| async move {
            let op = MdsOp::Lookup {
                parent: parent.0,
                name: name.clone(),
            };
            let found = c.attr_of(op).await;
            // A missing name: names are about to be made here (a create looks its name up
            // first); or a directory looked in again and again: a lease answers its lookups
            // without the MDS from now on.
            let worth = match found {
                Err(libc::ENOENT) => ask_lease,
                Ok(_) => ask_lease && c.link.worth_leasing(parent.0),
                Err(_) => false,
            };
            if worth {
                let link = c.link.clone();
                tokio::spawn(async move { link.ask_lease(parent.0, true).await });
            }
            match found {
                // The name's inode number is covered by a lease on the directory; its
                // attributes are not.
                Ok(a) => {
                    let is_dir = a.kind == FileType::Directory;
                    let entry = c.link.kernel_entry_ttl(parent.0, &name, a.ino.0, is_dir);
                    reply.entry_with_ttls(&TTL, &entry, &a, NO_GEN)
                }
                Err(e) => reply.error(errno(e)),
            }
        });
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let (leased, ttl, renew) = self.link.attr_leased(ino.0);
        if let Some(dir) = renew {
            let link = self.link.clone();
            self.rt
                .spawn(async move { link.ask_lease(dir, false).await });
        }
        if let Some(attr) = leased {
            // A directory leased here, or a file named in one: nobody else changes it without
            // a recall first.
            let c = self.ctx();
            let ttl = match c.unsettled(ino.0) {
                true => TTL,
                false => ttl,
            };
            return reply.attr(&ttl, &c.seen(attr));
        }
        self.spawn(|c| async move {
            match c.attr_of(MdsOp::GetAttr { ino: ino.0 }).await {
                Ok(a) => {
                    if a.kind == FileType::Directory && c.link.worth_leasing(ino.0) {
                        // A directory walked through again and again (every path under it
                        // asks for its attributes): a lease answers them here.
                        let link = c.link.clone();
                        tokio::spawn(async move { link.ask_lease(ino.0, true).await });
                    }
                    reply.attr(&TTL, &a)
                }
                Err(e) => reply.error(errno(e)),
            }
        });
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let set = SetAttr {
            perm: mode.map(|m| m & 0o7777),
            uid,
            gid,
            size,
            grow_only: false,
            atime_ns: atime.map(ns_of),
            mtime_ns: mtime.map(ns_of),
        };
        self.spawn(|c| async move {
            match c.set_attr(ino.0, set).await {
                Ok(a) => reply.attr(&TTL, &a),
                Err(e) => reply.error(errno(e)),
            }
        });
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        self.spawn(|c| async move {
            match c.mds(MdsOp::ReadLink { ino: ino.0 }).await {
                Ok(MdsAnswer::Data(t)) => reply.data(&t),
                Ok(_) => reply.error(errno(libc::EIO)),
                Err(e) => reply.error(errno(e)),
            }
        });
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let Some(kind) = kind_of_mode(mode) else {
            return reply.error(errno(libc::EINVAL));
        };
        self.make(parent, name, new_inode(req, kind, mode, umask, rdev), reply);
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        self.make(
            parent,
            name,
            new_inode(req, FileKind::Dir, mode, umask, 0),
            reply,
        );
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let op = MdsOp::Unlink {
            parent: parent.0,
            name: name.as_bytes().to_vec(),
            now_ns: now_ns(),
        };
        self.run(op, reply);
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let op = MdsOp::Rmdir {
            parent: parent.0,
            name: name.as_bytes().to_vec(),
            now_ns: now_ns(),
        };
        self.run(op, reply);
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let mut inode = new_inode(req, FileKind::Symlink, 0o777, 0, 0);
        inode.target = target.as_os_str().as_bytes().to_vec();
        self.make(parent, link_name, inode, reply);
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let op = MdsOp::Rename {
            parent: parent.0,
            name: name.as_bytes().to_vec(),
            new_parent: newparent.0,
            new_name: newname.as_bytes().to_vec(),
            flags: flags.bits(),
            now_ns: now_ns(),
        };
        self.run(op, reply);
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let op = MdsOp::Link {
            ino: ino.0,
            parent: newparent.0,
            name: newname.as_bytes().to_vec(),
            now_ns: now_ns(),
        };
        self.spawn(|c| async move { reply_entry(reply, c.attr_of(op).await) });
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let fh = self.next_fh();
        self.spawn(|c| async move {
            c.lock().files.remove(&ino.0);
            match c.holds.open(MdsOp::Open { ino: ino.0 }).await {
                Ok(a) => {
                    c.seen(a);
                    reply.opened(FileHandle(fh), FopenFlags::empty())
                }
                Err(e) => reply.error(errno(e)),
            }
        });
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        self.spawn(|c| async move {
            match c.read(ino.0, offset, size).await {
                Ok(d) => reply.data(&d),
                Err(e) => reply.error(errno(e)),
            }
        });
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let data = data.to_vec();
        let sync = flags.0 & (libc::O_SYNC | libc::O_DSYNC) != 0;
        self.spawn(|c| async move {
            match c.write(ino.0, offset, data, sync).await {
                Ok(n) => reply.written(n),
                Err(e) => reply.error(errno(e)),
            }
        });
    }

    fn flush(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // A close releases the process's record locks on the file (POSIX); the kernel leaves
        // that to the file system, through the owner it names here.
        if !self.holds.holds_locks(ino.0, lock_owner.0) {
            if let Some(settled) = self.ctx().settled_now(ino.0) {
                return reply_empty(reply, settled);
            }
        }
        self.spawn(|c| async move {
            c.holds.release_locks(ino.0, lock_owner.0).await;
            reply_empty(reply, c.report(ino.0).await)
        });
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let locked = lock_owner.is_some_and(|owner| self.holds.holds_locks(ino.0, owner.0));
        if !locked {
            if let Some(settled) = self.ctx().settled_now(ino.0) {
                reply_empty(reply, settled);
                return self.holds.close(ino.0);
            }
        }
        self.spawn(|c| async move {
            if let Some(owner) = lock_owner {
                c.holds.release_locks(ino.0, owner.0).await;
            }
            let reported = c.report(ino.0).await;
            reply_empty(reply, reported);
            c.holds.close(ino.0);
        });
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.spawn(|c| async move { reply_empty(reply, c.report(ino.0).await) });
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let fh = self.next_fh();
        self.spawn(|c| async move {
            match c.list(ino.0).await {
                Ok(entries) => {
                    c.lock().listings.insert(fh, Arc::new(entries));
                    reply.opened(FileHandle(fh), FopenFlags::empty());
                }
                Err(e) => reply.error(errno(e)),
            }
        });
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let listing = self
            .state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .listings
            .get(&fh.0)
            .cloned();
        let Some(listing) = listing else {
            return reply.error(errno(libc::EBADF));
        };
        let dots = [
            (ino.0, FileType::Directory, &b"."[..]),
            (ino.0, FileType::Directory, b".."),
        ];
        let all = dots.into_iter().chain(
            listing
                .iter()
                .map(|e| (e.ino, file_type(e.kind), e.name.as_slice())),
        );
        // The kernel's offset is past every entry when it does not even fit a usize.
        let skip = usize::try_from(offset).unwrap_or(usize::MAX);
        for (i, (entry_ino, kind, name)) in all.enumerate().skip(skip) {
            if reply.add(
                INodeNo(entry_ino),
                i as u64 + 1,
                kind,
                OsStr::from_bytes(name),
            ) {
                break;
            }
        }
        reply.ok();
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .listings
            .remove(&fh.0);
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.spawn(|c| async move { reply_empty(reply, c.done(MdsOp::Sync).await) });
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        self.spawn(|c| async move {
            match c.statfs().await {
                Ok((files, used, free)) => {
                    let bsize = u64::from(BLKSIZE);
                    let blocks = (used + free).div_ceil(bsize);
                    let bfree = free / bsize;
                    reply.statfs(
                        blocks,
                        bfree,
                        bfree,
                        files,
                        u64::MAX / 2,
                        BLKSIZE,
                        255,
                        BLKSIZE,
                    );
                }
                Err(e) => reply.error(errno(e)),
            }
        });
    }

    fn setxattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        let virtual_name = crate::layout::is_virtual(name.as_bytes());
        let op = MdsOp::SetXattr {
            ino: ino.0,
            name: name.as_bytes().to_vec(),
            value: value.to_vec(),
            flags: u32::try_from(flags).unwrap_or(u32::MAX),
        };
        if !virtual_name {
            return self.run(op, reply);
        }
        self.spawn(|c| async move {
            let r = async {
                c.report(ino.0).await?;
                c.done(op).await?;
                c.lock().files.remove(&ino.0);
                Ok(())
            };
            reply_empty(reply, r.await)
        });
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let op = MdsOp::GetXattr {
            ino: ino.0,
            name: name.as_bytes().to_vec(),
        };
        self.spawn(|c| async move {
            let r = match c.mds(op).await {
                Ok(MdsAnswer::Data(v)) => Ok(v),
                Ok(_) => Err(libc::EIO),
                Err(e) => Err(e),
            };
            reply_bytes(reply, size, r);
        });
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        self.spawn(|c| async move {
            let r = match c.mds(MdsOp::ListXattr { ino: ino.0 }).await {
                Ok(MdsAnswer::Names(names)) => Ok(names
                    .into_iter()
                    .flat_map(|mut n| {
                        n.push(0);
                        n
                    })
                    .collect()),
                Ok(_) => Err(libc::EIO),
                Err(e) => Err(e),
            };
            reply_bytes(reply, size, r);
        });
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let op = MdsOp::RemoveXattr {
            ino: ino.0,
            name: name.as_bytes().to_vec(),
        };
        self.run(op, reply);
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        let inode = NewInode {
            open: true,
            ..new_inode(req, FileKind::File, mode, umask, 0)
        };
        let name = name.as_bytes().to_vec();
        let fh = self.next_fh();
        if let Some(a) = self.create_here(parent.0, &name, &inode) {
            return reply.created(&TTL, &a, NO_GEN, FileHandle(fh), FopenFlags::empty());
        }
        self.spawn(|c| async move {
            let op = MdsOp::Create {
                parent: parent.0,
                name,
                inode,
            };
            match c.holds.open(op).await {
                Ok(a) => {
                    if c.link.lease_for_creates(parent.0) {
                        let link = c.link.clone();
                        tokio::spawn(async move { link.ask_lease(parent.0, false).await });
                    }
                    let a = c.seen(a);
                    reply.created(&TTL, &a, NO_GEN, FileHandle(fh), FopenFlags::empty())
                }
                Err(e) => reply.error(errno(e)),
            }
        });
    }
}

/// Most threads a mount reads the kernel's requests with ([`MountOptions::fuse_threads`]).
pub const MAX_FUSE_THREADS: usize = 16;

/// How a mount behaves.
#[derive(Clone, Copy, Debug)]
pub struct MountOptions {
    /// Answer lookups of missing names from directory leases ([`crate::dirlease`]).
    pub dir_leases: bool,
    /// Let the kernel cache what the leases cover ([`crate::kernel`]).
    pub kernel_cache: bool,
    /// Create files in leased directories without waiting for the MDS
    /// ([`MdsLink::create_here`]).
    pub early_creates: bool,
    /// Threads reading the kernel's requests, each on its own clone of `/dev/fuse` (1 to
    /// [`MAX_FUSE_THREADS`]). Most requests go on to the runtime, but those answered from
    /// leases and the open-file table (lookups of leased names, creates under a lease,
    /// flushes and closes of untouched files, listings) are answered on these threads: with
    /// one, every process's request waits behind the others'.
    pub fuse_threads: usize,
    /// The kernel's readahead window for each file read sequentially, KiB (0 to
    /// [`readahead::MAX_READAHEAD_KIB`]; one wider than the kernel's 128 KiB is set through
    /// sysfs, which needs root: see [`crate::readahead`]).
    pub readahead_kib: u32,
}

impl Default for MountOptions {
    fn default() -> Self {
        MountOptions {
            dir_leases: true,
            kernel_cache: true,
            early_creates: true,
            fuse_threads: default_fuse_threads(),
            readahead_kib: DEFAULT_READAHEAD_KIB,
        }
    }
}

/// Threads a mount reads the kernel's requests with unless told: four, or one per CPU where
/// there are fewer (more threads than CPUs measured slower on writes of a shared file, each
/// request waking a thread that must wait for a CPU).
pub fn default_fuse_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().min(4))
}

impl MountOptions {
    /// Refuses options out of their ranges, before anything is mounted.
    pub fn check(&self) -> Result<(), crate::error::FsError> {
        if !(1..=MAX_FUSE_THREADS).contains(&self.fuse_threads) {
            return Err(crate::error::FsError::Invalid(format!(
                "{} FUSE threads: a mount reads with 1 to {MAX_FUSE_THREADS}",
                self.fuse_threads
            )));
        }
        if self.readahead_kib > readahead::MAX_READAHEAD_KIB {
            return Err(crate::error::FsError::Invalid(format!(
                "a readahead of {} KiB: a mount reads ahead at most {} KiB",
                self.readahead_kib,
                readahead::MAX_READAHEAD_KIB
            )));
        }
        Ok(())
    }
}

/// Mounts the file system `fs` of the cluster `rados` follows at `mountpoint` and serves it
/// until it is unmounted (`umount`, `fusermount -u`) or `stop` resolves (then it unmounts).
pub fn mount(
    rt: &tokio::runtime::Runtime,
    rados: Arc<Client>,
    fs: &str,
    mountpoint: &Path,
    options: MountOptions,
    stop: impl std::future::Future<Output = ()>,
) -> Result<(), crate::error::FsError> {
    options.check()?;
    let meta = backing::metadata_pool(fs);
    let info = rt.block_on(backing::read_info(&rados, &meta))?;
    let mut filesystem = CairnFs::new(rt.handle().clone(), rados, meta, info.data_pool);
    filesystem.early_creates = options.early_creates;
    filesystem.readahead_kib = options.readahead_kib;
    filesystem.link.use_dir_leases(options.dir_leases);
    let link = filesystem.link.clone();
    let mut config = fuser::Config::default();
    config.mount_options = vec![
        fuser::MountOption::FSName(format!("cairn:{fs}")),
        fuser::MountOption::Subtype("cairn".into()),
        fuser::MountOption::DefaultPermissions,
    ];
    let root = std::fs::metadata("/proc/self").is_ok_and(|m| {
        use std::os::unix::fs::MetadataExt;
        m.uid() == 0
    });
    if root {
        config.acl = fuser::SessionACL::All;
    }
    config.n_threads = Some(options.fuse_threads);
    config.clone_fd = true;
    watch_fuse_thread_panics();
    // As the kernel lists it in mountinfo (fuser mounts the same canonical path).
    let listed = mountpoint.canonicalize()?;
    let session = fuser::spawn_mount(filesystem, &listed, &config)?;
    if options.readahead_kib > readahead::KERNEL_READAHEAD_KIB {
        match readahead::set_window(&listed, options.readahead_kib) {
            Ok(path) => {
                tracing::debug!(kib = options.readahead_kib, path = %path.display(), "readahead set")
            }
            Err(e) => tracing::warn!(
                error = %e,
                "the kernel's readahead window stays at its default (128 KiB): sequential reads are slower"
            ),
        }
    }
    if options.kernel_cache {
        link.cache_in_kernel(Arc::new(Notices(session.notifier())));
    }
    tracing::info!(fs, mountpoint = %mountpoint.display(), "mounted");
    println!("mounted {fs} at {}", mountpoint.display());
    let end = rt.block_on(async {
        tokio::pin!(stop);
        loop {
            if session.guard.is_finished() {
                return End::Unmounted;
            }
            if FUSE_THREAD_PANICKED.load(Ordering::Acquire) {
                return End::Panicked;
            }
            tokio::select! {
                _ = &mut stop => return End::Stopped,
                _ = tokio::time::sleep(Duration::from_millis(200)) => {}
            }
        }
    });
    match end {
        End::Stopped => session.umount_and_join()?,
        End::Unmounted => session.join()?,
        End::Panicked => {
            // fuser reports the panicked thread when it joins it: that error is expected.
            let joined = session.umount_and_join();
            return Err(std::io::Error::other(format!(
                "a thread serving the kernel's requests panicked (unmounting: {joined:?})"
            ))
            .into());
        }
    }
    Ok(())
}

/// Why a mount ends.
enum End {
    /// Its stop future resolved: it unmounts.
    Stopped,
    /// It was unmounted from outside (its FUSE threads ended).
    Unmounted,
    /// One FUSE thread panicked: the others would go on serving, on state it may have left
    /// half changed, so it unmounts (lazily when not root: the others serve until the mount's
    /// last user leaves) and the mount ends with an error.
    Panicked,
}

/// Set once a thread reading the kernel's requests (fuser names them `fuser-N`; its
/// `fuser-bg` thread ends the session itself) panicked; never reset: a process mounts once.
/// fuser joins its threads only once every one has ended, so a mount learns of a panic from
/// this, through [`watch_fuse_thread_panics`].
static FUSE_THREAD_PANICKED: AtomicBool = AtomicBool::new(false);

/// Notes panics of FUSE threads in [`FUSE_THREAD_PANICKED`], before the panic hook in place
/// runs (installed once per process).
fn watch_fuse_thread_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let name = std::thread::current().name().map(str::to_owned);
            let serving = |n: String| {
                n.strip_prefix("fuser-")
                    .is_some_and(|i| i.parse::<usize>().is_ok())
            };
            if name.is_some_and(serving) {
                FUSE_THREAD_PANICKED.store(true, Ordering::Release);
            }
            previous(info);
        }));
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fuse_threads_are_checked_before_mounting() {
        MountOptions::default()
            .check()
            .expect("the defaults are valid");
        let most = MountOptions {
            fuse_threads: MAX_FUSE_THREADS,
            ..MountOptions::default()
        };
        most.check().expect("the most threads are valid");
        for bad in [0, MAX_FUSE_THREADS + 1, usize::MAX] {
            let options = MountOptions {
                fuse_threads: bad,
                ..MountOptions::default()
            };
            let error = options.check().expect_err("out of range");
            assert!(error.to_string().contains("FUSE threads"), "{error}");
        }
    }

    #[test]
    fn readahead_is_checked_before_mounting() {
        for fine in [0, DEFAULT_READAHEAD_KIB, readahead::MAX_READAHEAD_KIB] {
            let options = MountOptions {
                readahead_kib: fine,
                ..MountOptions::default()
            };
            options.check().expect("in range");
        }
        let options = MountOptions {
            readahead_kib: readahead::MAX_READAHEAD_KIB + 1,
            ..MountOptions::default()
        };
        let error = options.check().expect_err("out of range");
        assert!(error.to_string().contains("readahead"), "{error}");
    }

    #[test]
    fn a_panic_on_a_fuse_thread_is_noted_and_one_elsewhere_is_not() {
        watch_fuse_thread_panics();
        let elsewhere = std::thread::Builder::new()
            .name("fuser-bg".into())
            .spawn(|| panic!("a panic on another thread"))
            .expect("spawned");
        assert!(elsewhere.join().is_err());
        assert!(!FUSE_THREAD_PANICKED.load(Ordering::Acquire));
        let fuse = std::thread::Builder::new()
            .name("fuser-3".into())
            .spawn(|| panic!("a panic serving a request"))
            .expect("spawned");
        assert!(fuse.join().is_err());
        assert!(FUSE_THREAD_PANICKED.load(Ordering::Acquire));
    }
}
