//! The namespace as the metadata server holds it: inodes and directories in memory, changed
//! only by [`Update`]s. An operation ([`Namespace::execute`]) checks POSIX's rules against the
//! current state and answers either an errno and no change, or its answer and the updates that
//! make it so, already applied. Updates are whole final states (an inode record, a directory
//! entry present or gone), so applying one again — a journal replayed after a crash — changes
//! nothing: the journal and the RADOS objects behind it rely on that.
//!
//! Inodes live apart from directory entries (unlike CephFS, which embeds them in their primary
//! dentry), so a hard link is one more entry naming the same inode, with no anchor table.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Bound;

use cairn_proto::mds::{
    Attr, DirEntry, FileKind, MdsAnswer, MdsOp, NewInode, SetAttr, MAX_NAME_BYTES,
    MAX_READDIR_ENTRIES, MAX_SYMLINK_BYTES, MAX_XATTR_VALUE_BYTES, ROOT_INO,
};
use serde::{Deserialize, Serialize};

use crate::layout::{self, Field, Scope, Virtual};

pub mod slots;

use slots::{Slots, FIRST_SLOT_INO};

/// Bytes of data object when a file's layout is not set: CephFS's default.
pub const DEFAULT_OBJECT_SIZE: u32 = 4 << 20;
/// Most bytes of extended attributes (names and values) one inode holds.
pub const MAX_XATTR_BYTES_PER_INODE: usize = 64 << 10;
/// Most entries in one directory (a hostile client cannot grow one without bound).
pub const MAX_DIR_ENTRIES: usize = 1 << 20;
/// Most inodes the metadata server holds (its whole namespace is in memory).
pub const MAX_INODES: usize = 16 << 20;
/// Furthest past the next inode number a replayed create may pin its number (the creates a
/// lost MDS answered early are far fewer; a client cannot push numbering toward the end).
pub const MAX_PIN_AHEAD: u64 = 1 << 24;

/// `rename(2)`'s `RENAME_NOREPLACE`.
pub const RENAME_NOREPLACE: u32 = 1;
/// `setxattr(2)`'s `XATTR_CREATE`.
pub const XATTR_CREATE: u32 = 1;
/// `setxattr(2)`'s `XATTR_REPLACE`.
pub const XATTR_REPLACE: u32 = 2;

/// One inode: its attributes, extended attributes and, for a symlink, its target.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Inode {
    /// Attributes.
    pub attr: Attr,
    /// Extended attributes by name.
    pub xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
    /// A symlink's target (empty otherwise).
    pub target: Vec<u8>,
}

impl Inode {
    fn xattr_bytes(&self) -> usize {
        self.xattrs.iter().map(|(k, v)| k.len() + v.len()).sum()
    }
}

/// A directory entry as stored: the inode it names and what that inode is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dentry {
    /// The inode.
    pub ino: u64,
    /// Its kind (readdir answers it without loading the inode).
    pub kind: FileKind,
}

/// One change of state, whole and idempotent.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Update {
    /// An inode's full record, new or changed.
    PutInode(Inode),
    /// An inode gone (its last link removed).
    DelInode(u64),
    /// A directory entry, new or pointing elsewhere.
    PutDentry {
        /// The directory.
        dir: u64,
        /// The name.
        name: Vec<u8>,
        /// What it names.
        entry: Dentry,
    },
    /// A directory entry gone.
    DelDentry {
        /// The directory.
        dir: u64,
        /// The name.
        name: Vec<u8>,
    },
    /// The next inode number to hand out (numbers are never reused: a purged file's objects
    /// may still be being removed).
    NextIno(u64),
    /// A file whose data objects are to be removed, at most `size` bytes in `object_size`
    /// objects.
    Purge {
        /// The inode.
        ino: u64,
        /// Its size when it went.
        size: u64,
        /// Its layout.
        object_size: u32,
    },
    /// A slot of inode numbers delegated to a client (see [`slots`]).
    Slot {
        /// The slot.
        slot: u64,
        /// The client it is delegated to.
        client: u64,
    },
}

/// The whole namespace.
#[derive(Clone, Debug, Default)]
pub struct Namespace {
    inodes: HashMap<u64, Inode>,
    dirs: HashMap<u64, BTreeMap<Vec<u8>, Dentry>>,
    /// Each directory's parent (a directory has exactly one name).
    parents: HashMap<u64, u64>,
    /// The directories naming each inode that is not a directory, once per name (a file's
    /// attributes are covered by the leases on them).
    named_in: HashMap<u64, Vec<u64>>,
    next_ino: u64,
    file_bytes: u64,
    /// The data pool's name, as layouts show it.
    data_pool: String,
    /// Files with no name left that a client still holds open (their data kept until
    /// [`Namespace::reap`]).
    orphans: BTreeSet<u64>,
    /// Inode numbers delegated to clients.
    slots: Slots,
}

/// Whether a client holds a file open (its last unlink then keeps it as an orphan).
pub type Held<'a> = &'a dyn Fn(u64) -> bool;

/// Nothing is held open: every last unlink deletes.
fn none_held(_: u64) -> bool {
    false
}

/// An errno or the answer and its updates.
pub type Outcome = Result<(MdsAnswer, Vec<Update>), i32>;

fn check_name(name: &[u8]) -> Result<(), i32> {
    if name.is_empty() || name.contains(&b'/') || name.contains(&0) {
        return Err(libc::EINVAL);
    }
    if name == b"." || name == b".." {
        return Err(libc::EEXIST);
    }
    if name.len() > MAX_NAME_BYTES {
        return Err(libc::ENAMETOOLONG);
    }
    Ok(())
}

impl Namespace {
    /// The updates that make a new file system: its root directory, owned by `uid`:`gid`.
    pub fn format(now_ns: i64, uid: u32, gid: u32) -> Vec<Update> {
        let root = Inode {
            attr: Attr {
                ino: ROOT_INO,
                kind: FileKind::Dir,
                perm: 0o755,
                uid,
                gid,
                size: 0,
                nlink: 2,
                atime_ns: now_ns,
                mtime_ns: now_ns,
                ctime_ns: now_ns,
                rdev: 0,
                object_size: DEFAULT_OBJECT_SIZE,
            },
            xattrs: BTreeMap::new(),
            target: Vec::new(),
        };
        vec![Update::PutInode(root), Update::NextIno(ROOT_INO + 1)]
    }

    /// Applies one update (again: no change).
    pub fn apply(&mut self, u: &Update) {
        match u {
            Update::PutInode(inode) => {
                let ino = inode.attr.ino;
                if inode.attr.kind == FileKind::Dir {
                    self.dirs.entry(ino).or_default();
                }
                let orphan = inode.attr.kind == FileKind::File && inode.attr.nlink == 0;
                match orphan {
                    true => self.orphans.insert(ino),
                    false => self.orphans.remove(&ino),
                };
                let old = self.inodes.insert(ino, inode.clone());
                self.account(old.as_ref(), Some(inode));
                self.slots.used(ino);
            }
            Update::DelInode(ino) => {
                self.orphans.remove(ino);
                let old = self.inodes.remove(ino);
                self.account(old.as_ref(), None);
                self.dirs.remove(ino);
                self.parents.remove(ino);
                self.named_in.remove(ino);
            }
            Update::PutDentry { dir, name, entry } => {
                if entry.kind == FileKind::Dir {
                    self.parents.insert(entry.ino, *dir);
                }
                let old = self
                    .dirs
                    .entry(*dir)
                    .or_default()
                    .insert(name.clone(), *entry);
                if old != Some(*entry) {
                    if let Some(replaced) = old {
                        self.unname(replaced, *dir);
                    }
                    if entry.kind != FileKind::Dir {
                        self.named_in.entry(entry.ino).or_default().push(*dir);
                    }
                }
            }
            Update::DelDentry { dir, name } => {
                if let Some(d) = self.dirs.get_mut(dir) {
                    if let Some(gone) = d.remove(name) {
                        if self.parents.get(&gone.ino) == Some(dir) {
                            self.parents.remove(&gone.ino);
                        }
                        self.unname(gone, *dir);
                    }
                }
            }
            Update::NextIno(n) => {
                assert!(
                    *n <= FIRST_SLOT_INO,
                    "the MDS's numbering reached the slots"
                );
                self.next_ino = self.next_ino.max(*n);
            }
            Update::Purge { .. } => {}
            Update::Slot { slot, client } => self.slots.apply(*slot, *client),
        }
    }

    /// Forgets one name of `entry`'s inode in `dir` (a file's; a directory's parent is kept
    /// apart).
    fn unname(&mut self, entry: Dentry, dir: u64) {
        if entry.kind == FileKind::Dir {
            return;
        }
        if let Some(dirs) = self.named_in.get_mut(&entry.ino) {
            if let Some(at) = dirs.iter().position(|d| *d == dir) {
                dirs.swap_remove(at);
            }
            if dirs.is_empty() {
                self.named_in.remove(&entry.ino);
            }
        }
    }

    fn account(&mut self, old: Option<&Inode>, new: Option<&Inode>) {
        let bytes = |i: Option<&Inode>| match i {
            Some(i) if i.attr.kind == FileKind::File => i.attr.size,
            _ => 0,
        };
        self.file_bytes = self.file_bytes.saturating_sub(bytes(old)) + bytes(new);
    }

    /// How many inodes there are.
    pub fn inode_count(&self) -> usize {
        self.inodes.len()
    }

    /// The inode `ino`, if it exists.
    pub fn inode(&self, ino: u64) -> Option<&Inode> {
        self.inodes.get(&ino)
    }

    /// Every inode (to load and check a namespace).
    pub fn inodes(&self) -> impl Iterator<Item = &Inode> {
        self.inodes.values()
    }

    /// The entries of directory `ino`.
    pub fn entries(&self, ino: u64) -> Option<&BTreeMap<Vec<u8>, Dentry>> {
        self.dirs.get(&ino)
    }

    /// The directories naming inode `ino` (a file, a symlink, a special file), once per name;
    /// none for a directory.
    pub fn named_in(&self, ino: u64) -> &[u64] {
        self.named_in.get(&ino).map_or(&[], Vec::as_slice)
    }

    /// The next inode number to be handed out.
    pub fn next_ino(&self) -> u64 {
        self.next_ino
    }

    fn get(&self, ino: u64) -> Result<&Inode, i32> {
        self.inodes.get(&ino).ok_or(libc::ENOENT)
    }

    fn dir(&self, ino: u64) -> Result<&BTreeMap<Vec<u8>, Dentry>, i32> {
        match self.get(ino)?.attr.kind {
            FileKind::Dir => self.dirs.get(&ino).ok_or(libc::ENOENT),
            _ => Err(libc::ENOTDIR),
        }
    }

    fn child(&self, parent: u64, name: &[u8]) -> Result<Dentry, i32> {
        if name.len() > MAX_NAME_BYTES {
            return Err(libc::ENAMETOOLONG);
        }
        self.dir(parent)?.get(name).copied().ok_or(libc::ENOENT)
    }

    /// Whether `ino` is `ancestor` or below it.
    fn is_within(&self, mut ino: u64, ancestor: u64) -> bool {
        for _ in 0..=self.parents.len() {
            if ino == ancestor {
                return true;
            }
            match self.parents.get(&ino) {
                Some(p) if *p != ino => ino = *p,
                _ => return false,
            }
        }
        false
    }

    /// Runs `op`: its answer and the updates it made (applied), or an errno and no change.
    pub fn execute(&mut self, op: &MdsOp) -> Outcome {
        self.execute_holding(op, &none_held)
    }

    /// Runs `op` as [`Namespace::execute`] does, where a file `held` says is open loses its
    /// last name without being deleted: it stays, with no link, as an orphan.
    pub fn execute_holding(&mut self, op: &MdsOp, held: Held<'_>) -> Outcome {
        let outcome = self.plan(op, held);
        if let Ok((_, updates)) = &outcome {
            for u in updates {
                self.apply(u);
            }
        }
        outcome
    }

    /// Decides `op` against the current state without changing it.
    fn plan(&self, op: &MdsOp, held: Held<'_>) -> Outcome {
        let read = |a: MdsAnswer| Ok((a, Vec::new()));
        match op {
            MdsOp::Lookup { parent, name } => {
                let d = self.child(*parent, name)?;
                read(MdsAnswer::Attr(self.get(d.ino)?.attr.clone()))
            }
            MdsOp::GetAttr { ino } | MdsOp::Open { ino } => {
                read(MdsAnswer::Attr(self.get(*ino)?.attr.clone()))
            }
            MdsOp::Close { .. } | MdsOp::Held { .. } => read(MdsAnswer::Done),
            MdsOp::GetLock { ino, .. } | MdsOp::SetLock { ino, .. } => {
                match self.get(*ino)?.attr.kind {
                    FileKind::Dir => Err(libc::EISDIR),
                    _ => read(MdsAnswer::Done),
                }
            }
            MdsOp::SetAttr { ino, set, now_ns } => self.set_attr(*ino, set, *now_ns),
            MdsOp::Create {
                parent,
                name,
                inode,
            } => self.create(*parent, name, inode),
            MdsOp::Link {
                ino,
                parent,
                name,
                now_ns,
            } => self.link(*ino, *parent, name, *now_ns),
            MdsOp::Unlink {
                parent,
                name,
                now_ns,
            } => self.remove(*parent, name, false, *now_ns, held),
            MdsOp::Rmdir {
                parent,
                name,
                now_ns,
            } => self.remove(*parent, name, true, *now_ns, held),
            MdsOp::Rename {
                parent,
                name,
                new_parent,
                new_name,
                flags,
                now_ns,
            } => {
                let to = (*new_parent, new_name.as_slice());
                self.rename(*parent, name, to, *flags, *now_ns, held)
            }
            MdsOp::ReadDir { ino, after, max } => {
                let dir = self.dir(*ino)?;
                let max = (*max).clamp(1, MAX_READDIR_ENTRIES) as usize;
                let start = match after.is_empty() {
                    true => Bound::Unbounded,
                    false => Bound::Excluded(after.clone()),
                };
                let mut it = dir.range((start, Bound::Unbounded));
                let entries: Vec<DirEntry> = it
                    .by_ref()
                    .take(max)
                    .map(|(name, d)| DirEntry {
                        name: name.clone(),
                        ino: d.ino,
                        kind: d.kind,
                    })
                    .collect();
                let end = it.next().is_none();
                read(MdsAnswer::Entries { entries, end })
            }
            MdsOp::ReadLink { ino } => {
                let i = self.get(*ino)?;
                match i.attr.kind {
                    FileKind::Symlink => read(MdsAnswer::Data(i.target.clone())),
                    _ => Err(libc::EINVAL),
                }
            }
            MdsOp::SetXattr {
                ino,
                name,
                value,
                flags,
            } if layout::is_virtual(name) => self.set_virtual(*ino, name, value, *flags),
            MdsOp::SetXattr {
                ino,
                name,
                value,
                flags,
            } => self.set_xattr(*ino, name, value, *flags),
            MdsOp::GetXattr { ino, name } if layout::is_virtual(name) => {
                read(MdsAnswer::Data(self.get_virtual(*ino, name)?))
            }
            MdsOp::GetXattr { ino, name } => {
                let v = self.get(*ino)?.xattrs.get(name).ok_or(libc::ENODATA)?;
                read(MdsAnswer::Data(v.clone()))
            }
            MdsOp::ListXattr { ino } => read(MdsAnswer::Names(
                self.get(*ino)?.xattrs.keys().cloned().collect(),
            )),
            MdsOp::RemoveXattr { ino, name } if layout::is_virtual(name) => {
                self.remove_virtual(*ino, name)
            }
            MdsOp::RemoveXattr { ino, name } => {
                let mut i = self.get(*ino)?.clone();
                i.xattrs.remove(name).ok_or(libc::ENODATA)?;
                Ok((MdsAnswer::Done, vec![Update::PutInode(i)]))
            }
            MdsOp::StatFs => read(MdsAnswer::StatFs {
                files: self.inodes.len() as u64,
                bytes: self.file_bytes,
            }),
            // Leases are the MDS's own (`crate::dirlease`): nothing of the namespace changes.
            // Delegation is per client: the MDS runs it through `delegate_to`.
            MdsOp::Delegate => Err(libc::EINVAL),
            MdsOp::Sync
            | MdsOp::Reconnected
            | MdsOp::LeaseDir { .. }
            | MdsOp::ReleaseDir { .. } => read(MdsAnswer::Done),
        }
    }

    fn set_attr(&self, ino: u64, set: &SetAttr, now_ns: i64) -> Outcome {
        let mut i = self.get(ino)?.clone();
        let a = &mut i.attr;
        if let Some(size) = set.size {
            match a.kind {
                FileKind::File => {}
                FileKind::Dir => return Err(libc::EISDIR),
                _ => return Err(libc::EINVAL),
            }
            let new = match set.grow_only {
                true => a.size.max(size),
                false => size,
            };
            if new != a.size && set.mtime_ns.is_none() {
                a.mtime_ns = now_ns;
            }
            a.size = new;
        }
        if let Some(p) = set.perm {
            a.perm = p & 0o7777;
        }
        if let Some(u) = set.uid {
            a.uid = u;
        }
        if let Some(g) = set.gid {
            a.gid = g;
        }
        if let Some(t) = set.atime_ns {
            a.atime_ns = t;
        }
        if let Some(t) = set.mtime_ns {
            a.mtime_ns = if set.grow_only { a.mtime_ns.max(t) } else { t };
        }
        a.ctime_ns = now_ns.max(a.ctime_ns);
        let answer = MdsAnswer::Attr(a.clone());
        Ok((answer, vec![Update::PutInode(i)]))
    }

    /// The number of a new inode: `pinned` when it lies in a delegated slot, no inode has it
    /// and it is not far below the slot's highest (see [`slots`]), or (a replayed create's earlier answer) when no inode has had it yet and it is
    /// less than [`MAX_PIN_AHEAD`] ahead; else the next one (ENOSPC past the MDS's range).
    fn new_ino(&self, pinned: Option<u64>) -> Result<u64, i32> {
        let next = self.next_ino.max(ROOT_INO + 1);
        match pinned {
            Some(p)
                if self.slots.owner_of(p).is_some()
                    && !self.inodes.contains_key(&p)
                    && self.slots.fresh(p) =>
            {
                Ok(p)
            }
            Some(p) if p >= next && p < FIRST_SLOT_INO && p - next < MAX_PIN_AHEAD => Ok(p),
            _ if next >= FIRST_SLOT_INO => Err(libc::ENOSPC),
            _ => Ok(next),
        }
    }

    /// Delegates a slot of inode numbers to `client` (the one it has, if any): the numbers,
    /// and the update that records a new slot.
    pub fn delegate_to(&mut self, client: u64) -> Outcome {
        let (slot, updates) = match self.slots.of(client) {
            Some(slot) => (slot, Vec::new()),
            None => {
                let slot = self.slots.next_free().ok_or(libc::ENOSPC)?;
                (slot, vec![Update::Slot { slot, client }])
            }
        };
        for u in &updates {
            self.apply(u);
        }
        let answer = MdsAnswer::Delegated {
            first: Slots::first_of(slot),
            count: slots::SLOT_INOS,
        };
        Ok((answer, updates))
    }

    /// Whether `ino` lies in the slot delegated to `client`.
    pub fn delegated_to(&self, client: u64, ino: u64) -> bool {
        self.slots.owner_of(ino) == Some(client)
    }

    /// Every delegated slot with its client.
    pub fn slots(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.slots.all()
    }

    /// The object size a file created in directory `dir` gets unless its creator names one.
    pub fn new_file_object_size(&self, dir: u64) -> u32 {
        self.layout_for_new_file(dir)
    }

    /// The parent's record after an entry was added or removed under it.
    fn touched_parent(&self, parent: u64, nlink_delta: i32, now_ns: i64) -> Result<Inode, i32> {
        let mut p = self.get(parent)?.clone();
        p.attr.mtime_ns = now_ns;
        p.attr.ctime_ns = now_ns;
        p.attr.nlink = p.attr.nlink.saturating_add_signed(nlink_delta);
        Ok(p)
    }

    fn create(&self, parent: u64, name: &[u8], new: &NewInode) -> Outcome {
        check_name(name)?;
        let dir = self.dir(parent)?;
        if dir.contains_key(name) {
            return Err(libc::EEXIST);
        }
        if dir.len() >= MAX_DIR_ENTRIES || self.inodes.len() >= MAX_INODES {
            return Err(libc::ENOSPC);
        }
        if new.target.len() > MAX_SYMLINK_BYTES {
            return Err(libc::ENAMETOOLONG);
        }
        if (new.kind == FileKind::Symlink) == new.target.is_empty() {
            return Err(libc::EINVAL);
        }
        let ino = self.new_ino(new.ino)?;
        let is_dir = new.kind == FileKind::Dir;
        let named_size = new
            .object_size
            .filter(|s| layout::check_object_size(*s).is_ok());
        let object_size = match new.kind {
            FileKind::File => named_size.unwrap_or_else(|| self.layout_for_new_file(parent)),
            _ => 0,
        };
        let inode = Inode {
            attr: Attr {
                ino,
                kind: new.kind,
                perm: new.perm & 0o7777,
                uid: new.uid,
                gid: new.gid,
                size: new.target.len() as u64,
                nlink: if is_dir { 2 } else { 1 },
                atime_ns: new.now_ns,
                mtime_ns: new.now_ns,
                ctime_ns: new.now_ns,
                rdev: new.rdev,
                object_size,
            },
            xattrs: BTreeMap::new(),
            target: new.target.clone(),
        };
        let answer = MdsAnswer::Attr(inode.attr.clone());
        let p = self.touched_parent(parent, i32::from(is_dir), new.now_ns)?;
        // A delegated number leaves the MDS's own numbering where it is.
        let next = match Slots::slot_of(ino) {
            Some(_) => Update::NextIno(self.next_ino),
            None => Update::NextIno(ino + 1),
        };
        Ok((
            answer,
            vec![
                next,
                Update::PutInode(inode),
                Update::PutDentry {
                    dir: parent,
                    name: name.to_vec(),
                    entry: Dentry {
                        ino,
                        kind: new.kind,
                    },
                },
                Update::PutInode(p),
            ],
        ))
    }

    fn link(&self, ino: u64, parent: u64, name: &[u8], now_ns: i64) -> Outcome {
        check_name(name)?;
        let mut i = self.get(ino)?.clone();
        if i.attr.kind == FileKind::Dir {
            return Err(libc::EPERM);
        }
        if self.orphans.contains(&ino) {
            return Err(libc::ENOENT);
        }
        let dir = self.dir(parent)?;
        if dir.contains_key(name) {
            return Err(libc::EEXIST);
        }
        if dir.len() >= MAX_DIR_ENTRIES {
            return Err(libc::ENOSPC);
        }
        if i.attr.nlink >= u32::from(u16::MAX) {
            return Err(libc::EMLINK);
        }
        i.attr.nlink += 1;
        i.attr.ctime_ns = now_ns;
        let answer = MdsAnswer::Attr(i.attr.clone());
        let entry = Dentry {
            ino,
            kind: i.attr.kind,
        };
        let p = self.touched_parent(parent, 0, now_ns)?;
        Ok((
            answer,
            vec![
                Update::PutInode(i),
                Update::PutDentry {
                    dir: parent,
                    name: name.to_vec(),
                    entry,
                },
                Update::PutInode(p),
            ],
        ))
    }

    /// The updates that drop one link of `ino`: its record, or (the last link) its removal
    /// and purge, or its record with no link where the file is `held` open.
    fn unlinked(&self, ino: u64, now_ns: i64, held: Held<'_>) -> Result<Vec<Update>, i32> {
        let mut i = self.get(ino)?.clone();
        let last = i.attr.kind == FileKind::Dir || i.attr.nlink <= 1;
        let keep = i.attr.kind == FileKind::File && held(ino);
        if !last || keep {
            i.attr.nlink = i.attr.nlink.saturating_sub(1);
            i.attr.ctime_ns = now_ns;
            return Ok(vec![Update::PutInode(i)]);
        }
        Ok(Self::deleted(i))
    }

    /// The updates that delete inode `i` and, for a file, purge its data.
    fn deleted(i: Inode) -> Vec<Update> {
        let ino = i.attr.ino;
        let mut out = vec![Update::DelInode(ino)];
        if i.attr.kind == FileKind::File {
            out.push(Update::Purge {
                ino,
                size: i.attr.size,
                object_size: i.attr.object_size,
            });
        }
        out
    }

    /// Files that lost their last name while held open, in inode order.
    pub fn orphans(&self) -> impl Iterator<Item = u64> + '_ {
        self.orphans.iter().copied()
    }

    /// Deletes orphan `ino` (no client holds it any longer): the updates, already applied,
    /// or none where `ino` is no orphan.
    pub fn reap(&mut self, ino: u64) -> Option<Vec<Update>> {
        if !self.orphans.contains(&ino) {
            return None;
        }
        let i = self.inodes.get(&ino)?.clone();
        assert_eq!(i.attr.nlink, 0, "an orphan has no link");
        let updates = Self::deleted(i);
        for u in &updates {
            self.apply(u);
        }
        Some(updates)
    }

    fn remove(
        &self,
        parent: u64,
        name: &[u8],
        want_dir: bool,
        now_ns: i64,
        held: Held<'_>,
    ) -> Outcome {
        if want_dir && name == b"." {
            return Err(libc::EINVAL);
        }
        if want_dir && name == b".." {
            return Err(libc::ENOTEMPTY);
        }
        let d = self.child(parent, name)?;
        let is_dir = d.kind == FileKind::Dir;
        match (want_dir, is_dir) {
            (true, false) => return Err(libc::ENOTDIR),
            (false, true) => return Err(libc::EISDIR),
            _ => {}
        }
        if is_dir && !self.dirs.get(&d.ino).is_none_or(BTreeMap::is_empty) {
            return Err(libc::ENOTEMPTY);
        }
        let mut out = vec![Update::DelDentry {
            dir: parent,
            name: name.to_vec(),
        }];
        out.extend(self.unlinked(d.ino, now_ns, held)?);
        out.push(Update::PutInode(self.touched_parent(
            parent,
            -i32::from(is_dir),
            now_ns,
        )?));
        Ok((MdsAnswer::Done, out))
    }

    fn rename(
        &self,
        parent: u64,
        name: &[u8],
        (new_parent, new_name): (u64, &[u8]),
        flags: u32,
        now_ns: i64,
        held: Held<'_>,
    ) -> Outcome {
        if flags & !RENAME_NOREPLACE != 0 {
            return Err(libc::EINVAL);
        }
        if name == b"." || name == b".." {
            return Err(libc::EBUSY);
        }
        check_name(new_name).map_err(|e| if e == libc::EEXIST { libc::EBUSY } else { e })?;
        let src = self.child(parent, name)?;
        self.dir(new_parent)?;
        let src_dir = src.kind == FileKind::Dir;
        if src_dir && self.is_within(new_parent, src.ino) {
            return Err(libc::EINVAL);
        }
        let target = self.dir(new_parent)?.get(new_name).copied();
        if parent == new_parent && name == new_name {
            return Ok((MdsAnswer::Done, Vec::new()));
        }
        let mut out = Vec::new();
        let mut new_parent_links = i32::from(src_dir && parent != new_parent);
        if let Some(t) = target {
            if flags & RENAME_NOREPLACE != 0 {
                return Err(libc::EEXIST);
            }
            if t.ino == src.ino {
                return Ok((MdsAnswer::Done, Vec::new()));
            }
            let t_dir = t.kind == FileKind::Dir;
            match (src_dir, t_dir) {
                (true, false) => return Err(libc::ENOTDIR),
                (false, true) => return Err(libc::EISDIR),
                _ => {}
            }
            if t_dir && !self.dirs.get(&t.ino).is_none_or(BTreeMap::is_empty) {
                return Err(libc::ENOTEMPTY);
            }
            out.extend(self.unlinked(t.ino, now_ns, held)?);
            new_parent_links -= i32::from(t_dir);
        } else if self.dir(new_parent)?.len() >= MAX_DIR_ENTRIES {
            return Err(libc::ENOSPC);
        }
        out.push(Update::DelDentry {
            dir: parent,
            name: name.to_vec(),
        });
        out.push(Update::PutDentry {
            dir: new_parent,
            name: new_name.to_vec(),
            entry: src,
        });
        let mut moved = self.get(src.ino)?.clone();
        moved.attr.ctime_ns = now_ns;
        out.push(Update::PutInode(moved));
        if parent == new_parent {
            out.push(Update::PutInode(self.touched_parent(
                parent,
                new_parent_links,
                now_ns,
            )?));
        } else {
            out.push(Update::PutInode(self.touched_parent(
                parent,
                -i32::from(src_dir),
                now_ns,
            )?));
            out.push(Update::PutInode(self.touched_parent(
                new_parent,
                new_parent_links,
                now_ns,
            )?));
        }
        Ok((MdsAnswer::Done, out))
    }

    fn set_xattr(&self, ino: u64, name: &[u8], value: &[u8], flags: u32) -> Outcome {
        if name.is_empty() || name.contains(&0) {
            return Err(libc::EINVAL);
        }
        if name.len() > MAX_NAME_BYTES {
            return Err(libc::ERANGE);
        }
        if value.len() > MAX_XATTR_VALUE_BYTES {
            return Err(libc::E2BIG);
        }
        if flags & !(XATTR_CREATE | XATTR_REPLACE) != 0 {
            return Err(libc::EINVAL);
        }
        let mut i = self.get(ino)?.clone();
        let exists = i.xattrs.contains_key(name);
        if flags & XATTR_CREATE != 0 && exists {
            return Err(libc::EEXIST);
        }
        if flags & XATTR_REPLACE != 0 && !exists {
            return Err(libc::ENODATA);
        }
        i.xattrs.insert(name.to_vec(), value.to_vec());
        if i.xattr_bytes() > MAX_XATTR_BYTES_PER_INODE {
            return Err(libc::ENOSPC);
        }
        Ok((MdsAnswer::Done, vec![Update::PutInode(i)]))
    }

    /// Names the data pool, which layouts show and accept.
    pub fn set_data_pool(&mut self, pool: &str) {
        self.data_pool = pool.to_string();
    }

    /// The layout a new file in `parent` takes: its nearest ancestor's that has one.
    fn layout_for_new_file(&self, parent: u64) -> u32 {
        let mut at = parent;
        for _ in 0..=self.parents.len() {
            match self.inodes.get(&at).map(|i| i.attr.object_size) {
                Some(size) if size > 0 => return size,
                _ => {}
            }
            match self.parents.get(&at) {
                Some(&up) => at = up,
                None => break,
            }
        }
        DEFAULT_OBJECT_SIZE
    }

    /// The inode a virtual attribute lives on, and its meaning (ENODATA for one
    /// that does not exist or does not fit the inode's kind).
    fn virtual_of(&self, ino: u64, name: &[u8]) -> Result<(&Inode, Virtual), i32> {
        let i = self.get(ino)?;
        let v = layout::parse_name(name).ok_or(libc::ENODATA)?;
        let scope = match v {
            Virtual::Layout(scope, _) => scope,
            _ => Scope::Dir,
        };
        let fits = match scope {
            Scope::File => i.attr.kind == FileKind::File,
            Scope::Dir => i.attr.kind == FileKind::Dir,
        };
        match fits {
            true => Ok((i, v)),
            false => Err(libc::ENODATA),
        }
    }

    fn get_virtual(&self, ino: u64, name: &[u8]) -> Result<Vec<u8>, i32> {
        let (i, v) = self.virtual_of(ino, name)?;
        let count = |dirs: Option<bool>| {
            let entries = self.dir(ino).map(|d| {
                d.values()
                    .filter(|e| dirs.is_none_or(|want| (e.kind == FileKind::Dir) == want))
                    .count()
            });
            entries.map(|n| n.to_string().into_bytes())
        };
        match v {
            Virtual::DirEntries => count(None),
            Virtual::DirFiles => count(Some(false)),
            Virtual::DirSubdirs => count(Some(true)),
            Virtual::Layout(_, field) => match i.attr.object_size {
                0 => Err(libc::ENODATA),
                size => Ok(layout::show(field, size, &self.data_pool)),
            },
        }
    }

    /// Sets a layout field: a directory's (inherited by files made under it from then on) or
    /// an empty file's.
    fn set_virtual(&self, ino: u64, name: &[u8], value: &[u8], flags: u32) -> Outcome {
        if flags & !(XATTR_CREATE | XATTR_REPLACE) != 0 {
            return Err(libc::EINVAL);
        }
        let (i, v) = self.virtual_of(ino, name).map_err(|e| match e {
            libc::ENODATA => libc::EINVAL,
            other => other,
        })?;
        let Virtual::Layout(scope, field) = v else {
            return Err(libc::EINVAL);
        };
        if scope == Scope::File && i.attr.size > 0 {
            return Err(libc::ENOTEMPTY);
        }
        let current = match i.attr.object_size {
            0 => self.layout_for_new_file(ino),
            size => size,
        };
        let object_size = layout::assign(field, value, current, &self.data_pool)?;
        let mut i = i.clone();
        i.attr.object_size = object_size;
        Ok((MdsAnswer::Done, vec![Update::PutInode(i)]))
    }

    /// Removes a directory's own layout (its files then take an ancestor's); the root's
    /// stays, as does every other virtual attribute.
    fn remove_virtual(&self, ino: u64, name: &[u8]) -> Outcome {
        let (i, v) = self.virtual_of(ino, name)?;
        match v {
            Virtual::Layout(Scope::Dir, Field::Whole) if ino != ROOT_INO => {
                if i.attr.object_size == 0 {
                    return Err(libc::ENODATA);
                }
                let mut i = i.clone();
                i.attr.object_size = 0;
                Ok((MdsAnswer::Done, vec![Update::PutInode(i)]))
            }
            _ => Err(libc::EINVAL),
        }
    }

    /// Checks the invariants that tie inodes and entries together; the first broken one.
    pub fn check(&self) -> Result<(), String> {
        let mut links: HashMap<u64, u32> = HashMap::new();
        let mut named_in: HashMap<u64, Vec<u64>> = HashMap::new();
        for (dir, entries) in &self.dirs {
            let d = self
                .inodes
                .get(dir)
                .ok_or_else(|| format!("directory {dir} has entries but no inode"))?;
            let mut subdirs = 0;
            for (name, e) in entries {
                let i = self
                    .inodes
                    .get(&e.ino)
                    .ok_or_else(|| format!("entry {name:?} in {dir} names missing {}", e.ino))?;
                if i.attr.kind != e.kind {
                    return Err(format!("entry {name:?} in {dir}: kind differs"));
                }
                subdirs += u32::from(e.kind == FileKind::Dir);
                *links.entry(e.ino).or_default() += 1;
                if e.kind != FileKind::Dir {
                    named_in.entry(e.ino).or_default().push(*dir);
                }
            }
            if d.attr.nlink != 2 + subdirs {
                return Err(format!(
                    "directory {dir} has nlink {} but {subdirs} subdirectories",
                    d.attr.nlink
                ));
            }
        }
        for (ino, dirs) in named_in.iter_mut() {
            let mut kept = self.named_in(*ino).to_vec();
            kept.sort_unstable();
            dirs.sort_unstable();
            if kept != *dirs {
                return Err(format!(
                    "inode {ino} is named in {dirs:?} but kept in {kept:?}"
                ));
            }
        }
        if let Some(ino) = self.named_in.keys().find(|i| !named_in.contains_key(i)) {
            return Err(format!("inode {ino} is named nowhere but kept as named"));
        }
        for i in self.inodes.values() {
            let ino = i.attr.ino;
            let named = links.get(&ino).copied().unwrap_or(0);
            match i.attr.kind {
                FileKind::Dir if ino == ROOT_INO => {}
                FileKind::Dir if named != 1 => {
                    return Err(format!("directory {ino} named {named} times"))
                }
                FileKind::Dir => {}
                _ if named != i.attr.nlink => {
                    return Err(format!(
                        "inode {ino}: nlink {} but {named} names",
                        i.attr.nlink
                    ))
                }
                _ => {}
            }
            if i.attr.kind == FileKind::File
                && layout::check_object_size(i.attr.object_size).is_err()
            {
                return Err(format!("file {ino} has object size {}", i.attr.object_size));
            }
            let delegated = self.slots.owner_of(ino).is_some();
            if ino >= self.next_ino && !delegated {
                return Err(format!(
                    "inode {ino} at or past the next number {}",
                    self.next_ino
                ));
            }
        }
        if self.next_ino > FIRST_SLOT_INO {
            return Err(format!("next inode number {} in the slots", self.next_ino));
        }
        self.slots.check()
    }
}

#[cfg(test)]
mod tests;
