//! File-system metadata messages between a mounted client and the metadata server (MDS): one
//! request per metadata operation, answered by the inode attributes, a directory page, bytes
//! or an errno. File data never travels here: clients read and write it on the OSDs.
//!
//! Names are raw bytes (POSIX names need not be UTF-8); times are nanoseconds since the Unix
//! epoch. Errors are Linux errno values so that a client hands them to the kernel unchanged.

use serde::{Deserialize, Serialize};

/// Client -> MDS request ([`MdsRequest`]).
pub const MSG_MDS_REQUEST: u16 = 0x0230;
/// MDS -> client reply ([`MdsReply`]).
pub const MSG_MDS_REPLY: u16 = 0x0231;
/// MDS -> client: early-answered mutations now durable ([`MdsSafe`]).
pub const MSG_MDS_SAFE: u16 = 0x0232;
/// MDS -> client: give up a directory lease ([`MdsRecall`]).
pub const MSG_MDS_RECALL: u16 = 0x0233;

/// Longest name of a directory entry or an extended attribute, as Linux's `NAME_MAX`.
pub const MAX_NAME_BYTES: usize = 255;
/// Longest symbolic-link target, as Linux's `PATH_MAX`.
pub const MAX_SYMLINK_BYTES: usize = 4096;
/// Largest value of one extended attribute, as Linux's `XATTR_SIZE_MAX`.
pub const MAX_XATTR_VALUE_BYTES: usize = 65536;
/// Most directory entries in one [`MdsAnswer::Entries`] page.
pub const MAX_READDIR_ENTRIES: u32 = 4096;

/// The inode number of the root directory (FUSE's `FUSE_ROOT_ID`).
pub const ROOT_INO: u64 = 1;

/// What an inode is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum FileKind {
    /// A regular file: its data in striped objects of the data pool.
    File,
    /// A directory.
    Dir,
    /// A symbolic link.
    Symlink,
    /// A named pipe.
    Fifo,
    /// A Unix socket.
    Socket,
    /// A character device node.
    CharDevice,
    /// A block device node.
    BlockDevice,
}

/// An inode's attributes as `stat` shows them, and its data layout.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attr {
    /// Inode number.
    pub ino: u64,
    /// What it is.
    pub kind: FileKind,
    /// Permission bits (`0o7777`).
    pub perm: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Size in bytes (a symlink: its target's length).
    pub size: u64,
    /// Hard links to it (a directory: 2 + its subdirectories).
    pub nlink: u32,
    /// Last access, ns since the epoch.
    pub atime_ns: i64,
    /// Last data change, ns since the epoch.
    pub mtime_ns: i64,
    /// Last attribute change, ns since the epoch.
    pub ctime_ns: i64,
    /// Device number of a device node.
    pub rdev: u32,
    /// Bytes per data object (the file layout; 4 MiB unless set).
    pub object_size: u32,
}

/// One directory entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirEntry {
    /// Its name.
    pub name: Vec<u8>,
    /// The inode it names.
    pub ino: u64,
    /// What that inode is.
    pub kind: FileKind,
}

/// Attribute changes of a `setattr`; `None` leaves a field alone.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetAttr {
    /// New permission bits.
    pub perm: Option<u32>,
    /// New owner.
    pub uid: Option<u32>,
    /// New group.
    pub gid: Option<u32>,
    /// New size.
    pub size: Option<u64>,
    /// Only grow: the size becomes `max(size, current)` (a client reporting what it wrote,
    /// which must never undo another client's larger size or a later truncate's order).
    pub grow_only: bool,
    /// New access time.
    pub atime_ns: Option<i64>,
    /// New modification time.
    pub mtime_ns: Option<i64>,
}

/// What a new inode is made as.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewInode {
    /// Its kind.
    pub kind: FileKind,
    /// Permission bits, the umask already applied.
    pub perm: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Device number of a device node.
    pub rdev: u32,
    /// A symlink's target.
    pub target: Vec<u8>,
    /// Creation time, ns since the epoch.
    pub now_ns: i64,
    /// The creator holds the new file open (FUSE's `create`): the MDS counts it as
    /// [`MdsOp::Open`] would.
    #[serde(default)]
    pub open: bool,
    /// On a replay only ([`MdsRequest::replay`]): the inode number the early answer gave,
    /// which the MDS uses again if it is still unallocated, so that the client's open files
    /// and its data objects (named by inode number) stay the file's.
    #[serde(default)]
    pub ino: Option<u64>,
    /// The object size the file is made with when it is a valid one (a creator that answered
    /// the create itself under a lease, see [`MdsOp::Delegate`], already writes with it);
    /// otherwise the one its directory gives new files.
    #[serde(default)]
    pub object_size: Option<u32>,
}

/// A metadata operation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum MdsOp {
    /// The inode `name` in directory `parent` names.
    Lookup {
        /// The directory.
        parent: u64,
        /// The name.
        name: Vec<u8>,
    },
    /// An inode's attributes.
    GetAttr {
        /// The inode.
        ino: u64,
    },
    /// Changes attributes.
    SetAttr {
        /// The inode.
        ino: u64,
        /// What changes.
        set: SetAttr,
        /// When, ns since the epoch (the new ctime).
        now_ns: i64,
    },
    /// Makes a new inode named `name` in `parent` (EEXIST if the name is taken).
    Create {
        /// The directory.
        parent: u64,
        /// The name.
        name: Vec<u8>,
        /// The inode.
        inode: NewInode,
    },
    /// Adds a hard link to `ino` named `name` in `parent`.
    Link {
        /// The inode (not a directory).
        ino: u64,
        /// The directory.
        parent: u64,
        /// The new name.
        name: Vec<u8>,
        /// When, ns since the epoch.
        now_ns: i64,
    },
    /// Removes a name that is not a directory; the inode goes with its last link.
    Unlink {
        /// The directory.
        parent: u64,
        /// The name.
        name: Vec<u8>,
        /// When, ns since the epoch.
        now_ns: i64,
    },
    /// Removes an empty directory.
    Rmdir {
        /// The parent directory.
        parent: u64,
        /// The name.
        name: Vec<u8>,
        /// When, ns since the epoch.
        now_ns: i64,
    },
    /// Moves a name, atomically replacing what the target name held (as rename(2)).
    Rename {
        /// The source directory.
        parent: u64,
        /// The source name.
        name: Vec<u8>,
        /// The target directory.
        new_parent: u64,
        /// The target name.
        new_name: Vec<u8>,
        /// `RENAME_NOREPLACE` (1) refuses an existing target with EEXIST.
        flags: u32,
        /// When, ns since the epoch.
        now_ns: i64,
    },
    /// A page of directory entries in name order, after `after` (empty: from the start).
    ReadDir {
        /// The directory.
        ino: u64,
        /// The last name of the previous page.
        after: Vec<u8>,
        /// Most entries wanted (at most [`MAX_READDIR_ENTRIES`]).
        max: u32,
    },
    /// A symlink's target.
    ReadLink {
        /// The symlink.
        ino: u64,
    },
    /// Sets an extended attribute; flags as setxattr(2) (`XATTR_CREATE` 1, `XATTR_REPLACE` 2).
    SetXattr {
        /// The inode.
        ino: u64,
        /// The attribute's name.
        name: Vec<u8>,
        /// Its value.
        value: Vec<u8>,
        /// Create-only or replace-only.
        flags: u32,
    },
    /// One extended attribute's value (ENODATA if absent).
    GetXattr {
        /// The inode.
        ino: u64,
        /// The attribute's name.
        name: Vec<u8>,
    },
    /// The names of an inode's extended attributes.
    ListXattr {
        /// The inode.
        ino: u64,
    },
    /// Removes an extended attribute (ENODATA if absent).
    RemoveXattr {
        /// The inode.
        ino: u64,
        /// The attribute's name.
        name: Vec<u8>,
    },
    /// File-system totals.
    StatFs,
    /// Waits until every change answered before it is durable (fsync's barrier).
    Sync,
    /// Sent first on every new session, after the client's replays ([`MdsRequest::replay`]):
    /// it holds no other early-answered mutation, so a starting MDS need not wait for it.
    Reconnected,
    /// Opens a file: its attributes, and the MDS counts it held open by this client, so that
    /// its data outlives its last name until the client closes it (or its lease ends).
    Open {
        /// The inode.
        ino: u64,
    },
    /// Closes what one [`MdsOp::Open`] opened.
    Close {
        /// The inode.
        ino: u64,
    },
    /// Every file this client holds open, with how many times, and every lock it holds:
    /// replaces what the MDS counted for it (after an MDS restart, or a lost open or close)
    /// and renews its lease.
    Held {
        /// (inode, opens), at most [`MAX_HELD_FILES`] of them.
        files: Vec<(u64, u32)>,
        /// (inode, lock), at most [`MAX_HELD_LOCKS`] of them.
        locks: Vec<(u64, LockSpec)>,
    },
    /// The first lock of another owner that keeps `lock` from being taken, if any (fcntl's
    /// `F_GETLK`).
    GetLock {
        /// The inode.
        ino: u64,
        /// The lock asked about.
        lock: LockSpec,
    },
    /// Takes, changes or (kind `Unlock`) releases a lock without waiting: EAGAIN while
    /// another owner's lock is in the way (fcntl's `F_SETLK`, flock's `LOCK_NB`).
    SetLock {
        /// The inode.
        ino: u64,
        /// The lock.
        lock: LockSpec,
        /// The caller waits and asks again until it is granted (`F_SETLKW`, flock without
        /// `LOCK_NB`): the MDS remembers the wait, and answers EDEADLK instead of EAGAIN
        /// when a holder in the way waits, directly or through others, for this owner.
        #[serde(default)]
        wait: bool,
    },
    /// Asks for a lease on a directory (or renews one): while it lasts, the client answers
    /// lookups in it and its attributes itself, and the MDS recalls it before another client
    /// changes it. EAGAIN when it is not granted.
    LeaseDir {
        /// The directory.
        dir: u64,
        /// Send every name of the directory (a new lease); false renews the lease held.
        names: bool,
        /// The client creates files in the directory by itself under the lease (see
        /// [`MdsOp::Delegate`]): another client's read of the directory recalls it too, so
        /// that the holder's creates reach the MDS before that read.
        #[serde(default)]
        creates: bool,
    },
    /// Gives up a directory lease (asked for by an [`MdsRecall`], or no longer wanted).
    ReleaseDir {
        /// The directory.
        dir: u64,
        /// The grant given up (a late release ends no newer grant).
        grant: u64,
    },
    /// Asks for inode numbers of this client's own (answered with
    /// [`MdsAnswer::Delegated`], once durable): the client then creates files in directories
    /// it leases by itself, answering the creator at once, and sends each `Create` with its
    /// number pinned afterwards. Asking again gives the same numbers.
    Delegate,
}

/// Most files one client may hold open at once (what one [`MdsOp::Held`] names).
pub const MAX_HELD_FILES: usize = 1 << 16;
/// Most locks one client may hold at once.
pub const MAX_HELD_LOCKS: usize = 1 << 14;

/// What a byte-range lock is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum LockKind {
    /// A read lock: other read locks may overlap it.
    Shared,
    /// A write lock: nothing of another owner may overlap it.
    Exclusive,
    /// No lock: releases the range.
    Unlock,
}

/// A byte-range lock as fcntl(2) takes them (flock(2) locks are whole-file ones).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockSpec {
    /// Who holds it on the client (a process's lock owner, or an open file for flock).
    pub owner: u64,
    /// First byte.
    pub start: u64,
    /// Last byte, inclusive (`u64::MAX`: to the end of the file, however long).
    pub end: u64,
    /// Its kind.
    pub kind: LockKind,
    /// The holding process on its own host (what `F_GETLK` reports).
    pub pid: u32,
}

impl LockSpec {
    /// The release of everything `owner` holds on a file.
    pub fn unlock_all(owner: u64) -> LockSpec {
        LockSpec {
            owner,
            start: 0,
            end: u64::MAX,
            kind: LockKind::Unlock,
            pid: 0,
        }
    }
}

impl MdsOp {
    /// The operation without an inode number a replay may pin (honoured on replays only).
    pub fn unpinned(mut self) -> MdsOp {
        if let MdsOp::Create { inode, .. } = &mut self {
            inode.ino = None;
        }
        self
    }

    /// The operation with the inode number `answer` gave it pinned, for its replay.
    pub fn pinned_to(mut self, answer: &Result<MdsAnswer, i32>) -> MdsOp {
        if let (MdsOp::Create { inode, .. }, Ok(MdsAnswer::Attr(a))) = (&mut self, answer) {
            inode.ino = Some(a.ino);
        }
        self
    }

    /// The directories whose names or attributes the operation changes, as far as the
    /// operation names them (the parents it changes, the inode whose attributes it sets);
    /// another client's lease on any of them is recalled first. The directories it removes
    /// or moves are found in the namespace by the MDS.
    pub fn changes_dirs(&self) -> [Option<u64>; 2] {
        match self {
            MdsOp::Create { parent, .. }
            | MdsOp::Link { parent, .. }
            | MdsOp::Unlink { parent, .. }
            | MdsOp::Rmdir { parent, .. } => [Some(*parent), None],
            MdsOp::Rename {
                parent, new_parent, ..
            } => [Some(*parent), Some(*new_parent)],
            MdsOp::SetAttr { ino, .. }
            | MdsOp::SetXattr { ino, .. }
            | MdsOp::RemoveXattr { ino, .. } => [Some(*ino), None],
            _ => [None, None],
        }
    }

    /// Whether the operation changes metadata (it then needs write access and goes through
    /// the journal).
    pub fn is_mutation(&self) -> bool {
        matches!(
            self,
            MdsOp::SetAttr { .. }
                | MdsOp::Create { .. }
                | MdsOp::Link { .. }
                | MdsOp::Unlink { .. }
                | MdsOp::Rmdir { .. }
                | MdsOp::Rename { .. }
                | MdsOp::SetXattr { .. }
                | MdsOp::RemoveXattr { .. }
                | MdsOp::Delegate
        )
    }
}

/// A successful answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum MdsAnswer {
    /// An inode's attributes (lookup, getattr, setattr, create, link).
    Attr(Attr),
    /// A page of directory entries; `end` when none follow.
    Entries {
        /// The entries, in name order.
        entries: Vec<DirEntry>,
        /// No entries after these.
        end: bool,
    },
    /// Bytes: a symlink's target or an attribute's value.
    Data(Vec<u8>),
    /// Names of extended attributes.
    Names(Vec<Vec<u8>>),
    /// The lock in the way, or none.
    Lock(Option<LockSpec>),
    /// File-system totals.
    StatFs {
        /// Inodes in use.
        files: u64,
        /// Bytes in files (their sizes).
        bytes: u64,
    },
    /// Done, nothing to return.
    Done,
    /// A lock taken, changed or released. The mount uses it only under a cluster map at least
    /// as new as `epoch_barrier`: every client evicted before the grant is fenced there.
    LockGranted {
        /// The epoch of the map that fences every client the MDS evicted.
        epoch_barrier: u64,
    },
    /// A directory lease granted or renewed.
    DirLeased {
        /// Every name of the directory with its inode number, for a new lease (none for a
        /// renewal).
        names: Option<Vec<(Vec<u8>, u64)>>,
        /// The directory's attributes, for a new lease.
        #[serde(default)]
        attr: Option<Attr>,
        /// The grant's number (a renewal keeps it; recalls and releases name it).
        grant: u64,
        /// For a new lease: the object size files created in the directory get (0: not
        /// told).
        #[serde(default)]
        file_object_size: u32,
    },
    /// Inode numbers delegated to the asking client: `first` and the `count` after it are
    /// its alone, never handed to anyone else.
    Delegated {
        /// The first number.
        first: u64,
        /// How many.
        count: u64,
    },
}

/// A client's request; `tid` is unique per client and repeated on a resend, so that the MDS
/// answers a resent mutation from its record instead of applying it twice.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MdsRequest {
    /// Request id, echoed.
    pub tid: u64,
    /// The client's id (its sessions' id), which with `tid` names the request.
    pub client: u64,
    /// The operation.
    pub op: MdsOp,
    /// A mutation the MDS answered early (not yet durable) and the client sends again on a new
    /// session, before any new request: a starting MDS runs replays before anything new.
    pub replay: bool,
}

/// The MDS's answer: the result or an errno.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MdsReply {
    /// The request's id.
    pub tid: u64,
    /// The answer, or a Linux errno.
    pub result: Result<MdsAnswer, i32>,
    /// Whether what the request changed is durable. An early (unsafe) answer is one the MDS
    /// has applied in memory only: the client keeps the request, replays it to a restarted
    /// MDS, and forgets it when an [`MdsSafe`] names it.
    pub safe: bool,
    /// For an early answer, where the mutation fell in the MDS's order of execution: the
    /// client replays its early answers in this order (0 on other answers).
    pub seq: u64,
}

/// The MDS asks a client to give up its lease on a directory, before another client adds a
/// name there: the client stops answering from it, then sends [`MdsOp::ReleaseDir`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MdsRecall {
    /// The directory.
    pub dir: u64,
    /// The grant recalled.
    pub grant: u64,
}

/// Mutations of one client answered early whose journal records are now durable.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MdsSafe {
    /// Their request ids.
    pub tids: Vec<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_and_replies_round_trip() {
        let req = MdsRequest {
            tid: 7,
            client: 9,
            op: MdsOp::Rename {
                parent: 1,
                name: b"a\xff".to_vec(),
                new_parent: 2,
                new_name: b"b".to_vec(),
                flags: 1,
                now_ns: -5,
            },
            replay: true,
        };
        let (back, rest): (MdsRequest, _) = crate::decode(&crate::encode(&req, &[])).unwrap();
        assert_eq!(back, req);
        assert!(rest.is_empty());
        assert!(req.op.is_mutation());
        assert!(!MdsOp::StatFs.is_mutation());
        let reply = MdsReply {
            tid: 7,
            result: Err(39),
            safe: false,
            seq: 3,
        };
        let (back, _): (MdsReply, _) = crate::decode(&crate::encode(&reply, &[])).unwrap();
        assert_eq!(back, reply);
        let safe = MdsSafe { tids: vec![7, 3] };
        let (back, _): (MdsSafe, _) = crate::decode(&crate::encode(&safe, &[])).unwrap();
        assert_eq!(back, safe);
        assert!(!MdsOp::Reconnected.is_mutation());
        assert_eq!(
            req.op.changes_dirs(),
            [Some(1), Some(2)],
            "a rename changes both parents"
        );
        let lease = MdsOp::LeaseDir {
            dir: 4,
            names: true,
            creates: false,
        };
        let (back, _): (MdsRequest, _) = crate::decode(&crate::encode(
            &MdsRequest {
                tid: 1,
                client: 2,
                op: MdsOp::Delegate,
                replay: false,
            },
            &[],
        ))
        .unwrap();
        assert_eq!(back.op, MdsOp::Delegate);
        assert!(MdsOp::Delegate.is_mutation());
        assert!(!lease.is_mutation());
        assert_eq!(lease.changes_dirs(), [None, None]);
        let recall = MdsRecall { dir: 4, grant: 2 };
        let (back, _): (MdsRecall, _) = crate::decode(&crate::encode(&recall, &[])).unwrap();
        assert_eq!(back, recall);
    }
}
