use super::*;

use std::collections::{BTreeSet, VecDeque};

use cairn_proto::mds::{Attr, DirEntry, FileKind, MdsAnswer, MdsOp, NewInode, SetAttr};
use proptest::prelude::*;

const T0: i64 = 1_000;
const UID: u32 = 1000;
const GID: u32 = 100;

// ---------------------------------------------------------------------------------------------
// Helpers

/// A namespace holding only the root, made by applying `format`.
fn fresh() -> Namespace {
    let mut ns = Namespace::default();
    for u in Namespace::format(T0, UID, GID) {
        ns.apply(&u);
    }
    ns
}

fn new_inode(kind: FileKind, perm: u32, target: &[u8], now_ns: i64) -> NewInode {
    NewInode {
        kind,
        perm,
        uid: UID,
        gid: GID,
        rdev: 0,
        target: target.to_vec(),
        now_ns,
        open: false,
        ino: None,
        object_size: None,
    }
}

fn create_op(parent: u64, name: &[u8], kind: FileKind, now_ns: i64) -> MdsOp {
    let target: &[u8] = if kind == FileKind::Symlink { b"t" } else { b"" };
    let perm = if kind == FileKind::Dir { 0o755 } else { 0o644 };
    MdsOp::Create {
        parent,
        name: name.to_vec(),
        inode: new_inode(kind, perm, target, now_ns),
    }
}

fn expect_attr(outcome: Outcome) -> Attr {
    match outcome {
        Ok((MdsAnswer::Attr(a), _)) => a,
        other => panic!("expected an Attr answer, got {other:?}"),
    }
}

fn create(ns: &mut Namespace, parent: u64, name: &[u8], kind: FileKind) -> Result<Attr, i32> {
    match ns.execute(&create_op(parent, name, kind, T0))? {
        (MdsAnswer::Attr(a), _) => Ok(a),
        other => panic!("create answered {other:?}"),
    }
}

fn mkfile(ns: &mut Namespace, parent: u64, name: &[u8]) -> u64 {
    create(ns, parent, name, FileKind::File).unwrap().ino
}

fn mkdir(ns: &mut Namespace, parent: u64, name: &[u8]) -> u64 {
    create(ns, parent, name, FileKind::Dir).unwrap().ino
}

/// Runs a mutation that answers `Done`: its updates.
fn done(ns: &mut Namespace, op: &MdsOp) -> Result<Vec<Update>, i32> {
    let (answer, updates) = ns.execute(op)?;
    assert_eq!(answer, MdsAnswer::Done, "{op:?}");
    Ok(updates)
}

fn unlink(ns: &mut Namespace, parent: u64, name: &[u8]) -> Result<Vec<Update>, i32> {
    done(
        ns,
        &MdsOp::Unlink {
            parent,
            name: name.to_vec(),
            now_ns: T0 + 50,
        },
    )
}

fn rmdir(ns: &mut Namespace, parent: u64, name: &[u8]) -> Result<Vec<Update>, i32> {
    done(
        ns,
        &MdsOp::Rmdir {
            parent,
            name: name.to_vec(),
            now_ns: T0 + 50,
        },
    )
}

fn rename_flags(
    ns: &mut Namespace,
    parent: u64,
    name: &[u8],
    new_parent: u64,
    new_name: &[u8],
    flags: u32,
) -> Result<Vec<Update>, i32> {
    done(
        ns,
        &MdsOp::Rename {
            parent,
            name: name.to_vec(),
            new_parent,
            new_name: new_name.to_vec(),
            flags,
            now_ns: T0 + 70,
        },
    )
}

fn rename(
    ns: &mut Namespace,
    parent: u64,
    name: &[u8],
    new_parent: u64,
    new_name: &[u8],
) -> Result<Vec<Update>, i32> {
    rename_flags(ns, parent, name, new_parent, new_name, 0)
}

fn link(ns: &mut Namespace, ino: u64, parent: u64, name: &[u8]) -> Result<Attr, i32> {
    let outcome = ns.execute(&MdsOp::Link {
        ino,
        parent,
        name: name.to_vec(),
        now_ns: T0 + 30,
    })?;
    Ok(expect_attr(Ok(outcome)))
}

fn lookup(ns: &mut Namespace, parent: u64, name: &[u8]) -> Result<Attr, i32> {
    let outcome = ns.execute(&MdsOp::Lookup {
        parent,
        name: name.to_vec(),
    })?;
    assert!(outcome.1.is_empty(), "a lookup made updates");
    Ok(expect_attr(Ok(outcome)))
}

fn getattr(ns: &mut Namespace, ino: u64) -> Result<Attr, i32> {
    let outcome = ns.execute(&MdsOp::GetAttr { ino })?;
    assert!(outcome.1.is_empty(), "a getattr made updates");
    Ok(expect_attr(Ok(outcome)))
}

fn setattr(ns: &mut Namespace, ino: u64, set: SetAttr, now_ns: i64) -> Result<Attr, i32> {
    let outcome = ns.execute(&MdsOp::SetAttr { ino, set, now_ns })?;
    Ok(expect_attr(Ok(outcome)))
}

fn readdir(
    ns: &mut Namespace,
    ino: u64,
    after: &[u8],
    max: u32,
) -> Result<(Vec<DirEntry>, bool), i32> {
    match ns.execute(&MdsOp::ReadDir {
        ino,
        after: after.to_vec(),
        max,
    })? {
        (MdsAnswer::Entries { entries, end }, updates) => {
            assert!(updates.is_empty(), "a readdir made updates");
            Ok((entries, end))
        }
        other => panic!("readdir answered {other:?}"),
    }
}

fn statfs(ns: &mut Namespace) -> (u64, u64) {
    match ns.execute(&MdsOp::StatFs).unwrap() {
        (MdsAnswer::StatFs { files, bytes }, _) => (files, bytes),
        other => panic!("statfs answered {other:?}"),
    }
}

fn set_xattr(
    ns: &mut Namespace,
    ino: u64,
    name: &[u8],
    value: &[u8],
    flags: u32,
) -> Result<(), i32> {
    done(
        ns,
        &MdsOp::SetXattr {
            ino,
            name: name.to_vec(),
            value: value.to_vec(),
            flags,
        },
    )
    .map(drop)
}

fn get_xattr(ns: &mut Namespace, ino: u64, name: &[u8]) -> Result<Vec<u8>, i32> {
    match ns.execute(&MdsOp::GetXattr {
        ino,
        name: name.to_vec(),
    })? {
        (MdsAnswer::Data(v), _) => Ok(v),
        other => panic!("getxattr answered {other:?}"),
    }
}

fn list_xattr(ns: &mut Namespace, ino: u64) -> Result<Vec<Vec<u8>>, i32> {
    match ns.execute(&MdsOp::ListXattr { ino })? {
        (MdsAnswer::Names(v), _) => Ok(v),
        other => panic!("listxattr answered {other:?}"),
    }
}

fn purges(updates: &[Update]) -> Vec<(u64, u64)> {
    updates
        .iter()
        .filter_map(|u| match u {
            Update::Purge { ino, size, .. } => Some((*ino, *size)),
            _ => None,
        })
        .collect()
}

fn deleted(updates: &[Update]) -> Vec<u64> {
    updates
        .iter()
        .filter_map(|u| match u {
            Update::DelInode(ino) => Some(*ino),
            _ => None,
        })
        .collect()
}

fn nlink(ns: &Namespace, ino: u64) -> u32 {
    ns.inode(ino).expect("inode exists").attr.nlink
}

/// The whole state, in comparable form (private fields included: the derived maps must agree
/// too, since `is_within` and `StatFs` read them).
#[derive(Debug, PartialEq)]
struct Snapshot {
    inodes: BTreeMap<u64, Inode>,
    dirs: BTreeMap<u64, BTreeMap<Vec<u8>, Dentry>>,
    parents: BTreeMap<u64, u64>,
    next_ino: u64,
    file_bytes: u64,
}

fn snapshot(ns: &Namespace) -> Snapshot {
    let inodes: BTreeMap<u64, Inode> = ns.inodes().map(|i| (i.attr.ino, i.clone())).collect();
    for (ino, i) in &inodes {
        assert_eq!(ns.inode(*ino), Some(i));
    }
    let dirs: BTreeMap<u64, BTreeMap<Vec<u8>, Dentry>> = ns
        .dirs
        .iter()
        .map(|(ino, entries)| (*ino, entries.clone()))
        .collect();
    for (ino, entries) in &dirs {
        assert_eq!(ns.entries(*ino), Some(entries));
    }
    Snapshot {
        inodes,
        dirs,
        parents: ns.parents.iter().map(|(k, v)| (*k, *v)).collect(),
        next_ino: ns.next_ino(),
        file_bytes: ns.file_bytes,
    }
}

/// `check()` and the invariants it does not cover: every directory inode has an entry map and
/// nothing else has one, `parents` is exactly what the entries say, `file_bytes` is the sum of
/// file sizes, and every inode is reachable from the root (no detached cycles).
fn well_formed(ns: &Namespace) -> Result<(), String> {
    ns.check()?;
    let dir_inodes: BTreeSet<u64> = ns
        .inodes()
        .filter(|i| i.attr.kind == FileKind::Dir)
        .map(|i| i.attr.ino)
        .collect();
    let dir_maps: BTreeSet<u64> = ns.dirs.keys().copied().collect();
    if dir_inodes != dir_maps {
        return Err(format!(
            "directory inodes {dir_inodes:?} but entry maps {dir_maps:?}"
        ));
    }
    let mut parents = BTreeMap::new();
    for (dir, entries) in &ns.dirs {
        for e in entries.values() {
            if e.kind == FileKind::Dir {
                parents.insert(e.ino, *dir);
            }
        }
    }
    let held: BTreeMap<u64, u64> = ns.parents.iter().map(|(k, v)| (*k, *v)).collect();
    if parents != held {
        return Err(format!("parents {held:?}, entries say {parents:?}"));
    }
    let bytes: u64 = ns
        .inodes()
        .filter(|i| i.attr.kind == FileKind::File)
        .map(|i| i.attr.size)
        .sum();
    if bytes != ns.file_bytes {
        return Err(format!(
            "file_bytes {} but files hold {bytes}",
            ns.file_bytes
        ));
    }
    let mut seen = BTreeSet::from([ROOT_INO]);
    let mut queue = VecDeque::from([ROOT_INO]);
    while let Some(dir) = queue.pop_front() {
        for e in ns.entries(dir).into_iter().flat_map(|m| m.values()) {
            if seen.insert(e.ino) && e.kind == FileKind::Dir {
                queue.push_back(e.ino);
            }
        }
    }
    let all: BTreeSet<u64> = ns.inodes().map(|i| i.attr.ino).collect();
    if seen != all {
        return Err(format!("reachable {seen:?} but inodes {all:?}"));
    }
    Ok(())
}

/// Runs an operation that must fail with `errno` and change nothing.
fn fails(ns: &mut Namespace, op: &MdsOp, errno: i32) {
    let before = snapshot(ns);
    assert_eq!(ns.execute(op), Err(errno), "{op:?}");
    assert_eq!(snapshot(ns), before, "failed {op:?} changed the namespace");
}

// ---------------------------------------------------------------------------------------------
// Format, create, lookup, getattr, readdir, readlink, names

#[test]
fn format_makes_an_empty_root_directory() {
    let mut ns = fresh();
    let root = getattr(&mut ns, ROOT_INO).unwrap();
    assert_eq!(root.ino, ROOT_INO);
    assert_eq!(root.kind, FileKind::Dir);
    assert_eq!(root.perm, 0o755);
    assert_eq!((root.uid, root.gid), (UID, GID));
    assert_eq!(root.nlink, 2);
    assert_eq!((root.atime_ns, root.mtime_ns, root.ctime_ns), (T0, T0, T0));
    assert_eq!(root.object_size, DEFAULT_OBJECT_SIZE);
    assert_eq!(ns.next_ino(), ROOT_INO + 1);
    assert_eq!(ns.inode_count(), 1);
    assert_eq!(
        readdir(&mut ns, ROOT_INO, b"", 100).unwrap(),
        (vec![], true)
    );
    assert_eq!(statfs(&mut ns), (1, 0));
    well_formed(&ns).unwrap();
}

#[test]
fn create_file_answers_its_attributes_and_lookup_finds_it() {
    let mut ns = fresh();
    let op = MdsOp::Create {
        parent: ROOT_INO,
        name: b"f".to_vec(),
        inode: new_inode(FileKind::File, 0o100644, b"", T0 + 5),
    };
    let (answer, updates) = ns.execute(&op).unwrap();
    let a = expect_attr(Ok((answer, updates.clone())));
    assert_eq!(a.ino, 2);
    assert_eq!(a.kind, FileKind::File);
    assert_eq!(a.perm, 0o644, "the type bits are masked off");
    assert_eq!((a.uid, a.gid), (UID, GID));
    assert_eq!((a.size, a.nlink), (0, 1));
    assert_eq!(
        (a.atime_ns, a.mtime_ns, a.ctime_ns),
        (T0 + 5, T0 + 5, T0 + 5)
    );
    assert_eq!(a.object_size, DEFAULT_OBJECT_SIZE);
    assert!(updates.contains(&Update::NextIno(3)));
    assert_eq!(ns.next_ino(), 3);
    assert_eq!(lookup(&mut ns, ROOT_INO, b"f").unwrap(), a);
    assert_eq!(getattr(&mut ns, a.ino).unwrap(), a);
    let root = getattr(&mut ns, ROOT_INO).unwrap();
    assert_eq!(root.nlink, 2, "a file does not count in its parent's nlink");
    assert_eq!((root.mtime_ns, root.ctime_ns), (T0 + 5, T0 + 5));
    assert_eq!(
        ns.entries(ROOT_INO).unwrap().get(&b"f"[..]),
        Some(&Dentry {
            ino: a.ino,
            kind: FileKind::File
        })
    );
    well_formed(&ns).unwrap();
}

#[test]
fn inode_numbers_are_never_reused() {
    let mut ns = fresh();
    let a = mkfile(&mut ns, ROOT_INO, b"a");
    unlink(&mut ns, ROOT_INO, b"a").unwrap();
    let b = mkfile(&mut ns, ROOT_INO, b"a");
    assert_eq!((a, b), (2, 3));
    assert_eq!(ns.next_ino(), 4);
}

/// A create of a file named `name` in the root pinning `ino`, made with `object_size`.
fn delegated_create(name: &[u8], ino: u64, object_size: Option<u32>) -> MdsOp {
    MdsOp::Create {
        parent: ROOT_INO,
        name: name.to_vec(),
        inode: NewInode {
            ino: Some(ino),
            object_size,
            ..new_inode(FileKind::File, 0o644, b"", T0)
        },
    }
}

#[test]
fn delegated_numbers_are_a_clients_own_and_taken_once_with_the_layout_named() {
    let mut ns = fresh();
    let delegated = |ns: &mut Namespace, client| match ns.delegate_to(client) {
        Ok((MdsAnswer::Delegated { first, count }, updates)) => (first, count, updates),
        other => panic!("delegation answered {other:?}"),
    };
    let (first, count, updates) = delegated(&mut ns, 7);
    assert_eq!((first, count), (slots::FIRST_SLOT_INO, slots::SLOT_INOS));
    assert_eq!(updates.len(), 1, "a new slot is recorded");
    let (again, _, none) = delegated(&mut ns, 7);
    assert_eq!(
        (again, none.len()),
        (first, 0),
        "asking again gives the same slot"
    );
    let (other, _, _) = delegated(&mut ns, 8);
    assert_eq!(
        other,
        first + slots::SLOT_INOS,
        "another client's slot is apart"
    );
    assert!(ns.delegated_to(7, first + 5) && !ns.delegated_to(8, first + 5));
    let before = ns.next_ino();
    let a = expect_attr(ns.execute(&delegated_create(b"a", first + 5, Some(1 << 20))));
    assert_eq!((a.ino, a.object_size), (first + 5, 1 << 20));
    assert_eq!(
        ns.next_ino(),
        before,
        "the MDS's own numbering stays where it was"
    );
    let b = expect_attr(ns.execute(&delegated_create(b"b", first + 5, Some(3))));
    assert_eq!(
        b.ino, before,
        "a number taken already falls back to the MDS's own"
    );
    assert_eq!(
        b.object_size, DEFAULT_OBJECT_SIZE,
        "an invalid layout is not taken"
    );
    // A number far below the slot's highest was used already (and its file may be gone).
    let high = first + 10 * slots::OUT_OF_ORDER;
    let far = expect_attr(ns.execute(&delegated_create(b"far", high, None)));
    assert_eq!(far.ino, high);
    let old = expect_attr(ns.execute(&delegated_create(b"old", first + 6, None)));
    assert_eq!(
        old.ino,
        before + 1,
        "a number far below the highest is not taken"
    );
    let near = high - slots::OUT_OF_ORDER + 1;
    let late = expect_attr(ns.execute(&delegated_create(b"late", near, None)));
    assert_eq!(late.ino, near, "one that came out of order is");
    let before = ns.next_ino();
    let undelegated = other + slots::SLOT_INOS;
    let c = expect_attr(ns.execute(&delegated_create(b"c", undelegated, None)));
    assert_eq!(c.ino, before, "a number of no delegated slot is not taken");
    well_formed(&ns).unwrap();
    // The journal's updates rebuild the same slots.
    let mut replayed = fresh();
    for u in updates {
        replayed.apply(&u);
    }
    assert!(replayed.delegated_to(7, first) && !replayed.delegated_to(8, other));
    assert_eq!(replayed.slots().count(), 1);
}

#[test]
fn create_dir_starts_at_two_links_and_counts_in_its_parent() {
    let mut ns = fresh();
    let d = create(&mut ns, ROOT_INO, b"d", FileKind::Dir).unwrap();
    assert_eq!(d.kind, FileKind::Dir);
    assert_eq!(d.nlink, 2);
    assert_eq!(d.size, 0);
    assert_eq!(nlink(&ns, ROOT_INO), 3);
    assert!(ns.entries(d.ino).unwrap().is_empty());
    assert_eq!(readdir(&mut ns, d.ino, b"", 10).unwrap(), (vec![], true));
    let sub = mkdir(&mut ns, d.ino, b"sub");
    assert_eq!(nlink(&ns, d.ino), 3);
    assert_eq!(nlink(&ns, ROOT_INO), 3, "only direct subdirectories count");
    assert_eq!(lookup(&mut ns, d.ino, b"sub").unwrap().ino, sub);
    well_formed(&ns).unwrap();
}

#[test]
fn create_symlink_keeps_its_target_and_readlink_returns_it() {
    let mut ns = fresh();
    let target = b"../some/where/else";
    let a = expect_attr(ns.execute(&MdsOp::Create {
        parent: ROOT_INO,
        name: b"l".to_vec(),
        inode: new_inode(FileKind::Symlink, 0o777, target, T0),
    }));
    assert_eq!(a.kind, FileKind::Symlink);
    assert_eq!(a.size, target.len() as u64);
    assert_eq!(a.nlink, 1);
    assert_eq!(
        ns.execute(&MdsOp::ReadLink { ino: a.ino }),
        Ok((MdsAnswer::Data(target.to_vec()), vec![]))
    );
    assert_eq!(
        statfs(&mut ns),
        (2, 0),
        "a symlink's size is not file bytes"
    );
    well_formed(&ns).unwrap();
}

#[test]
fn create_symlink_target_must_match_the_kind_and_fit() {
    let mut ns = fresh();
    let op = |kind, target: &[u8]| MdsOp::Create {
        parent: ROOT_INO,
        name: b"x".to_vec(),
        inode: new_inode(kind, 0o777, target, T0),
    };
    fails(&mut ns, &op(FileKind::Symlink, b""), libc::EINVAL);
    fails(&mut ns, &op(FileKind::File, b"t"), libc::EINVAL);
    fails(&mut ns, &op(FileKind::Dir, b"t"), libc::EINVAL);
    let long = vec![b'x'; MAX_SYMLINK_BYTES + 1];
    fails(&mut ns, &op(FileKind::Symlink, &long), libc::ENAMETOOLONG);
    let longest = vec![b'x'; MAX_SYMLINK_BYTES];
    let a = expect_attr(ns.execute(&op(FileKind::Symlink, &longest)));
    assert_eq!(a.size, MAX_SYMLINK_BYTES as u64);
}

#[test]
fn create_fifo_and_device_nodes() {
    let mut ns = fresh();
    let fifo = create(&mut ns, ROOT_INO, b"p", FileKind::Fifo).unwrap();
    assert_eq!(fifo.kind, FileKind::Fifo);
    assert_eq!((fifo.nlink, fifo.size), (1, 0));
    assert_eq!(
        lookup(&mut ns, ROOT_INO, b"p").unwrap().kind,
        FileKind::Fifo
    );
    let mut dev = new_inode(FileKind::CharDevice, 0o600, b"", T0);
    dev.rdev = 0x0103;
    let c = expect_attr(ns.execute(&MdsOp::Create {
        parent: ROOT_INO,
        name: b"null".to_vec(),
        inode: dev,
    }));
    assert_eq!((c.kind, c.rdev), (FileKind::CharDevice, 0x0103));
    assert_eq!(nlink(&ns, ROOT_INO), 2);
    well_formed(&ns).unwrap();
}

#[test]
fn readlink_of_anything_but_a_symlink_is_einval() {
    let mut ns = fresh();
    let f = mkfile(&mut ns, ROOT_INO, b"f");
    let d = mkdir(&mut ns, ROOT_INO, b"d");
    let p = create(&mut ns, ROOT_INO, b"p", FileKind::Fifo).unwrap().ino;
    for ino in [f, d, p, ROOT_INO] {
        fails(&mut ns, &MdsOp::ReadLink { ino }, libc::EINVAL);
    }
    fails(&mut ns, &MdsOp::ReadLink { ino: 999 }, libc::ENOENT);
}

#[test]
fn lookup_and_getattr_errors() {
    let mut ns = fresh();
    let f = mkfile(&mut ns, ROOT_INO, b"f");
    assert_eq!(lookup(&mut ns, ROOT_INO, b"missing"), Err(libc::ENOENT));
    assert_eq!(lookup(&mut ns, f, b"x"), Err(libc::ENOTDIR));
    assert_eq!(lookup(&mut ns, 999, b"x"), Err(libc::ENOENT));
    assert_eq!(
        lookup(&mut ns, ROOT_INO, &[b'a'; 256]),
        Err(libc::ENAMETOOLONG)
    );
    assert_eq!(getattr(&mut ns, 999), Err(libc::ENOENT));
}

#[test]
fn create_rejects_bad_names() {
    let mut ns = fresh();
    let op = |name: &[u8]| create_op(ROOT_INO, name, FileKind::File, T0);
    fails(&mut ns, &op(b""), libc::EINVAL);
    fails(&mut ns, &op(b"a/b"), libc::EINVAL);
    fails(&mut ns, &op(b"/"), libc::EINVAL);
    fails(&mut ns, &op(b"a\0b"), libc::EINVAL);
    fails(&mut ns, &op(&[b'n'; 256]), libc::ENAMETOOLONG);
    fails(&mut ns, &op(b"."), libc::EEXIST);
    fails(&mut ns, &op(b".."), libc::EEXIST);
    let longest = vec![b'n'; MAX_NAME_BYTES];
    mkfile(&mut ns, ROOT_INO, &longest);
    assert!(lookup(&mut ns, ROOT_INO, &longest).is_ok());
    // Names are raw bytes, not necessarily UTF-8.
    mkfile(&mut ns, ROOT_INO, b"\xff\xfe");
    assert!(lookup(&mut ns, ROOT_INO, b"\xff\xfe").is_ok());
    well_formed(&ns).unwrap();
}

#[test]
fn create_on_an_existing_name_is_eexist_whatever_the_kinds() {
    let mut ns = fresh();
    mkfile(&mut ns, ROOT_INO, b"f");
    mkdir(&mut ns, ROOT_INO, b"d");
    for name in [&b"f"[..], b"d"] {
        for kind in [
            FileKind::File,
            FileKind::Dir,
            FileKind::Symlink,
            FileKind::Fifo,
        ] {
            fails(&mut ns, &create_op(ROOT_INO, name, kind, T0), libc::EEXIST);
        }
    }
}

#[test]
fn create_under_a_non_directory_or_missing_parent() {
    let mut ns = fresh();
    let f = mkfile(&mut ns, ROOT_INO, b"f");
    let l = create(&mut ns, ROOT_INO, b"l", FileKind::Symlink)
        .unwrap()
        .ino;
    fails(
        &mut ns,
        &create_op(f, b"x", FileKind::File, T0),
        libc::ENOTDIR,
    );
    fails(
        &mut ns,
        &create_op(l, b"x", FileKind::Dir, T0),
        libc::ENOTDIR,
    );
    fails(
        &mut ns,
        &create_op(999, b"x", FileKind::File, T0),
        libc::ENOENT,
    );
    let d = mkdir(&mut ns, ROOT_INO, b"d");
    rmdir(&mut ns, ROOT_INO, b"d").unwrap();
    fails(
        &mut ns,
        &create_op(d, b"x", FileKind::File, T0),
        libc::ENOENT,
    );
}

#[test]
fn readdir_pages_through_5000_entries_in_name_order() {
    let mut ns = fresh();
    let d = mkdir(&mut ns, ROOT_INO, b"big");
    let n = 5000u32;
    let mut want = Vec::new();
    // Created out of order: 7919 is prime, so i * 7919 mod n visits every index once.
    for i in 0..n {
        let k = u32::try_from(u64::from(i) * 7919 % u64::from(n)).expect("below n");
        let name = format!("e{k:05}").into_bytes();
        let kind = if k.is_multiple_of(10) {
            FileKind::Dir
        } else {
            FileKind::File
        };
        let ino = create(&mut ns, d, &name, kind).unwrap().ino;
        want.push(DirEntry { name, ino, kind });
    }
    want.sort_by(|a, b| a.name.cmp(&b.name));
    assert_eq!(nlink(&ns, d), 2 + n / 10);

    let mut got = Vec::new();
    let mut after = Vec::new();
    let mut pages = 0;
    loop {
        let (page, end) = readdir(&mut ns, d, &after, 1000).unwrap();
        pages += 1;
        assert_eq!(page.len(), 1000, "page {pages}");
        assert_eq!(end, pages == 5, "page {pages}'s end flag");
        after = page.last().unwrap().name.clone();
        got.extend(page);
        if end {
            break;
        }
    }
    assert_eq!(got, want);

    // `after` need not be a present name.
    let (page, end) = readdir(&mut ns, d, b"e00010a", 2).unwrap();
    let names: Vec<&[u8]> = page.iter().map(|e| &e.name[..]).collect();
    assert_eq!(names, vec![&b"e00011"[..], b"e00012"]);
    assert!(!end);
    // After the last name: an empty final page.
    assert_eq!(
        readdir(&mut ns, d, b"e04999", 1000).unwrap(),
        (vec![], true)
    );
    // A partial last page.
    let (page, end) = readdir(&mut ns, d, b"e04989", 1000).unwrap();
    assert_eq!((page.len(), end), (10, true));
    // `max` is clamped to [1, MAX_READDIR_ENTRIES].
    let (page, end) = readdir(&mut ns, d, b"", 0).unwrap();
    assert_eq!((page.len(), end), (1, false));
    let (page, end) = readdir(&mut ns, d, b"", u32::MAX).unwrap();
    assert_eq!((page.len(), end), (MAX_READDIR_ENTRIES as usize, false));
    assert_eq!(page[..], want[..MAX_READDIR_ENTRIES as usize]);
    well_formed(&ns).unwrap();
}

#[test]
fn readdir_of_a_non_directory_or_missing_inode() {
    let mut ns = fresh();
    let f = mkfile(&mut ns, ROOT_INO, b"f");
    assert_eq!(readdir(&mut ns, f, b"", 10), Err(libc::ENOTDIR));
    assert_eq!(readdir(&mut ns, 999, b"", 10), Err(libc::ENOENT));
}

#[test]
fn a_full_directory_refuses_new_names_with_enospc() {
    let mut ns = fresh();
    let d = mkdir(&mut ns, ROOT_INO, b"d");
    let f = mkfile(&mut ns, ROOT_INO, b"f");
    let g = mkfile(&mut ns, ROOT_INO, b"g");
    let h = mkfile(&mut ns, ROOT_INO, b"h");
    link(&mut ns, h, ROOT_INO, b"h2").unwrap();
    // Fill `d` directly, every entry naming `h` (only their count matters here; `check` would
    // object to the link count).
    let entry = Dentry {
        ino: h,
        kind: FileKind::File,
    };
    // Three base-128 digits, each with the top bit set: no NUL or '/', and in order.
    let name = |i: usize| {
        (0..3)
            .rev()
            .map(|k| 0x80 | u8::try_from((i >> (7 * k)) & 0x7f).expect("seven bits"))
            .collect()
    };
    let filler: BTreeMap<Vec<u8>, Dentry> =
        (0..MAX_DIR_ENTRIES).map(|i| (name(i), entry)).collect();
    ns.dirs.insert(d, filler);
    let inodes = ns.inode_count();
    let refused = |ns: &mut Namespace, op: MdsOp| {
        assert_eq!(ns.execute(&op), Err(libc::ENOSPC), "{op:?}");
        assert_eq!(ns.entries(d).unwrap().len(), MAX_DIR_ENTRIES);
        assert_eq!(ns.inode_count(), inodes);
    };
    refused(&mut ns, create_op(d, b"x", FileKind::File, T0));
    let link = MdsOp::Link {
        ino: f,
        parent: d,
        name: b"x".to_vec(),
        now_ns: T0,
    };
    refused(&mut ns, link);
    let rename = |name: &[u8], new_name: &[u8]| MdsOp::Rename {
        parent: ROOT_INO,
        name: name.to_vec(),
        new_parent: d,
        new_name: new_name.to_vec(),
        flags: 0,
        now_ns: T0,
    };
    refused(&mut ns, rename(b"g", b"x"));
    // Replacing an entry adds none, so it is allowed.
    let first: Vec<u8> = name(0);
    done(&mut ns, &rename(b"g", &first)).unwrap();
    assert_eq!(ns.entries(d).unwrap().len(), MAX_DIR_ENTRIES);
    assert_eq!(ns.entries(d).unwrap()[&first].ino, g);
    assert_eq!(nlink(&ns, h), 1);
}

// ---------------------------------------------------------------------------------------------
// Unlink, rmdir, purge

#[test]
fn unlink_removes_the_file_and_purges_it_with_its_size() {
    let mut ns = fresh();
    let f = mkfile(&mut ns, ROOT_INO, b"f");
    let set = SetAttr {
        size: Some(12_345),
        ..SetAttr::default()
    };
    setattr(&mut ns, f, set, T0 + 1).unwrap();
    assert_eq!(statfs(&mut ns), (2, 12_345));
    let updates = unlink(&mut ns, ROOT_INO, b"f").unwrap();
    assert!(updates.contains(&Update::Purge {
        ino: f,
        size: 12_345,
        object_size: DEFAULT_OBJECT_SIZE
    }));
    assert_eq!(deleted(&updates), vec![f]);
    assert_eq!(lookup(&mut ns, ROOT_INO, b"f"), Err(libc::ENOENT));
    assert_eq!(getattr(&mut ns, f), Err(libc::ENOENT));
    assert_eq!(statfs(&mut ns), (1, 0));
    let root = getattr(&mut ns, ROOT_INO).unwrap();
    assert_eq!(
        (root.nlink, root.mtime_ns, root.ctime_ns),
        (2, T0 + 50, T0 + 50)
    );
    well_formed(&ns).unwrap();
}

#[test]
fn unlink_of_a_symlink_or_fifo_deletes_without_purge() {
    let mut ns = fresh();
    let l = create(&mut ns, ROOT_INO, b"l", FileKind::Symlink)
        .unwrap()
        .ino;
    let p = create(&mut ns, ROOT_INO, b"p", FileKind::Fifo).unwrap().ino;
    let updates = unlink(&mut ns, ROOT_INO, b"l").unwrap();
    assert_eq!((deleted(&updates), purges(&updates)), (vec![l], vec![]));
    let updates = unlink(&mut ns, ROOT_INO, b"p").unwrap();
    assert_eq!((deleted(&updates), purges(&updates)), (vec![p], vec![]));
    assert_eq!(ns.inode_count(), 1);
    well_formed(&ns).unwrap();
}

#[test]
fn unlink_errors() {
    let mut ns = fresh();
    let d = mkdir(&mut ns, ROOT_INO, b"d");
    let f = mkfile(&mut ns, ROOT_INO, b"f");
    let op = |parent, name: &[u8]| MdsOp::Unlink {
        parent,
        name: name.to_vec(),
        now_ns: T0,
    };
    fails(&mut ns, &op(ROOT_INO, b"d"), libc::EISDIR);
    fails(&mut ns, &op(ROOT_INO, b"missing"), libc::ENOENT);
    fails(&mut ns, &op(d, b"missing"), libc::ENOENT);
    fails(&mut ns, &op(999, b"f"), libc::ENOENT);
    fails(&mut ns, &op(f, b"x"), libc::ENOTDIR);
    fails(&mut ns, &op(ROOT_INO, &[b'f'; 256]), libc::ENAMETOOLONG);
}

#[test]
fn rmdir_removes_an_empty_directory_and_drops_the_parent_link() {
    let mut ns = fresh();
    let a = mkdir(&mut ns, ROOT_INO, b"a");
    let b = mkdir(&mut ns, a, b"b");
    assert_eq!((nlink(&ns, ROOT_INO), nlink(&ns, a)), (3, 3));
    let updates = rmdir(&mut ns, a, b"b").unwrap();
    assert_eq!((deleted(&updates), purges(&updates)), (vec![b], vec![]));
    assert_eq!(nlink(&ns, a), 2);
    assert_eq!(ns.inode(a).unwrap().attr.mtime_ns, T0 + 50);
    assert_eq!(ns.entries(b), None);
    rmdir(&mut ns, ROOT_INO, b"a").unwrap();
    assert_eq!(nlink(&ns, ROOT_INO), 2);
    assert_eq!(ns.inode_count(), 1);
    well_formed(&ns).unwrap();
}

#[test]
fn rmdir_errors() {
    let mut ns = fresh();
    let d = mkdir(&mut ns, ROOT_INO, b"d");
    mkfile(&mut ns, d, b"inside");
    let f = mkfile(&mut ns, ROOT_INO, b"f");
    let e = mkdir(&mut ns, ROOT_INO, b"e");
    mkdir(&mut ns, e, b"sub");
    let op = |parent, name: &[u8]| MdsOp::Rmdir {
        parent,
        name: name.to_vec(),
        now_ns: T0,
    };
    fails(&mut ns, &op(ROOT_INO, b"f"), libc::ENOTDIR);
    fails(&mut ns, &op(ROOT_INO, b"d"), libc::ENOTEMPTY);
    fails(&mut ns, &op(ROOT_INO, b"e"), libc::ENOTEMPTY);
    fails(&mut ns, &op(ROOT_INO, b"."), libc::EINVAL);
    fails(&mut ns, &op(d, b"."), libc::EINVAL);
    fails(&mut ns, &op(ROOT_INO, b".."), libc::ENOTEMPTY);
    fails(&mut ns, &op(d, b".."), libc::ENOTEMPTY);
    fails(&mut ns, &op(ROOT_INO, b"missing"), libc::ENOENT);
    fails(&mut ns, &op(999, b"d"), libc::ENOENT);
    fails(&mut ns, &op(f, b"d"), libc::ENOTDIR);
}

#[test]
fn parent_nlink_is_two_plus_its_subdirectories() {
    let mut ns = fresh();
    let p = mkdir(&mut ns, ROOT_INO, b"p");
    for name in [&b"a"[..], b"b", b"c"] {
        mkdir(&mut ns, p, name);
    }
    mkfile(&mut ns, p, b"f");
    create(&mut ns, p, b"l", FileKind::Symlink).unwrap();
    assert_eq!(nlink(&ns, p), 5);
    rmdir(&mut ns, p, b"b").unwrap();
    assert_eq!(nlink(&ns, p), 4);
    unlink(&mut ns, p, b"f").unwrap();
    assert_eq!(nlink(&ns, p), 4);
    well_formed(&ns).unwrap();
}

#[test]
fn purge_waits_for_the_last_hard_link() {
    let mut ns = fresh();
    let d = mkdir(&mut ns, ROOT_INO, b"d");
    let f = mkfile(&mut ns, ROOT_INO, b"f");
    let set = SetAttr {
        size: Some(777),
        ..SetAttr::default()
    };
    setattr(&mut ns, f, set, T0).unwrap();
    link(&mut ns, f, d, b"g").unwrap();
    link(&mut ns, f, ROOT_INO, b"h").unwrap();
    assert_eq!(nlink(&ns, f), 3);

    let updates = unlink(&mut ns, ROOT_INO, b"f").unwrap();
    assert_eq!((deleted(&updates), purges(&updates)), (vec![], vec![]));
    let a = ns.inode(f).unwrap().attr.clone();
    assert_eq!((a.nlink, a.ctime_ns), (2, T0 + 50));
    let updates = unlink(&mut ns, d, b"g").unwrap();
    assert_eq!((deleted(&updates), purges(&updates)), (vec![], vec![]));
    assert_eq!(nlink(&ns, f), 1);
    assert_eq!(statfs(&mut ns), (3, 777));
    let updates = unlink(&mut ns, ROOT_INO, b"h").unwrap();
    assert_eq!(
        (deleted(&updates), purges(&updates)),
        (vec![f], vec![(f, 777)])
    );
    assert_eq!(statfs(&mut ns), (2, 0));
    well_formed(&ns).unwrap();
}

// ---------------------------------------------------------------------------------------------
// Hard links

#[test]
fn link_adds_a_name_for_the_same_inode() {
    let mut ns = fresh();
    let d = mkdir(&mut ns, ROOT_INO, b"d");
    let f = mkfile(&mut ns, ROOT_INO, b"f");
    let a = link(&mut ns, f, d, b"g").unwrap();
    assert_eq!((a.ino, a.nlink, a.ctime_ns), (f, 2, T0 + 30));
    assert_eq!(lookup(&mut ns, ROOT_INO, b"f").unwrap(), a);
    assert_eq!(lookup(&mut ns, d, b"g").unwrap(), a);
    let dir = getattr(&mut ns, d).unwrap();
    assert_eq!((dir.nlink, dir.mtime_ns), (2, T0 + 30));
    let a = link(&mut ns, f, ROOT_INO, b"h").unwrap();
    assert_eq!(a.nlink, 3);
    // Symlinks and other non-directories link too.
    let l = create(&mut ns, ROOT_INO, b"l", FileKind::Symlink)
        .unwrap()
        .ino;
    assert_eq!(link(&mut ns, l, d, b"l2").unwrap().nlink, 2);
    assert_eq!(statfs(&mut ns), (4, 0), "links are not inodes");
    well_formed(&ns).unwrap();
}

#[test]
fn link_errors() {
    let mut ns = fresh();
    let d = mkdir(&mut ns, ROOT_INO, b"d");
    let f = mkfile(&mut ns, ROOT_INO, b"f");
    let op = |ino, parent, name: &[u8]| MdsOp::Link {
        ino,
        parent,
        name: name.to_vec(),
        now_ns: T0,
    };
    fails(&mut ns, &op(d, ROOT_INO, b"d2"), libc::EPERM);
    fails(&mut ns, &op(ROOT_INO, d, b"root"), libc::EPERM);
    fails(&mut ns, &op(f, ROOT_INO, b"f"), libc::EEXIST);
    fails(&mut ns, &op(f, ROOT_INO, b"d"), libc::EEXIST);
    fails(&mut ns, &op(999, ROOT_INO, b"x"), libc::ENOENT);
    fails(&mut ns, &op(f, 999, b"x"), libc::ENOENT);
    fails(&mut ns, &op(f, f, b"x"), libc::ENOTDIR);
    fails(&mut ns, &op(f, ROOT_INO, b""), libc::EINVAL);
    fails(&mut ns, &op(f, ROOT_INO, b"a/b"), libc::EINVAL);
    fails(&mut ns, &op(f, ROOT_INO, b"."), libc::EEXIST);
    fails(&mut ns, &op(f, ROOT_INO, &[b'x'; 256]), libc::ENAMETOOLONG);
}

#[test]
fn link_beyond_65535_links_is_emlink() {
    let mut ns = fresh();
    let f = mkfile(&mut ns, ROOT_INO, b"f");
    let mut inode = ns.inode(f).unwrap().clone();
    inode.attr.nlink = u32::from(u16::MAX) - 1;
    ns.apply(&Update::PutInode(inode));
    assert_eq!(link(&mut ns, f, ROOT_INO, b"g").unwrap().nlink, 65535);
    let op = MdsOp::Link {
        ino: f,
        parent: ROOT_INO,
        name: b"h".to_vec(),
        now_ns: T0,
    };
    fails(&mut ns, &op, libc::EMLINK);
}

#[test]
fn unlinking_one_name_keeps_the_other_readable() {
    let mut ns = fresh();
    let f = mkfile(&mut ns, ROOT_INO, b"f");
    let set = SetAttr {
        size: Some(42),
        ..SetAttr::default()
    };
    setattr(&mut ns, f, set, T0).unwrap();
    set_xattr(&mut ns, f, b"user.k", b"v", 0).unwrap();
    link(&mut ns, f, ROOT_INO, b"g").unwrap();
    unlink(&mut ns, ROOT_INO, b"f").unwrap();
    let a = lookup(&mut ns, ROOT_INO, b"g").unwrap();
    assert_eq!((a.ino, a.nlink, a.size), (f, 1, 42));
    assert_eq!(get_xattr(&mut ns, f, b"user.k").unwrap(), b"v");
    assert_eq!(lookup(&mut ns, ROOT_INO, b"f"), Err(libc::ENOENT));
    well_formed(&ns).unwrap();
}

// ---------------------------------------------------------------------------------------------
// Rename

#[test]
fn rename_within_a_directory() {
    let mut ns = fresh();
    let f = mkfile(&mut ns, ROOT_INO, b"f");
    let d = mkdir(&mut ns, ROOT_INO, b"d");
    let updates = rename(&mut ns, ROOT_INO, b"f", ROOT_INO, b"g").unwrap();
    assert_eq!((deleted(&updates), purges(&updates)), (vec![], vec![]));
    assert_eq!(lookup(&mut ns, ROOT_INO, b"f"), Err(libc::ENOENT));
    let a = lookup(&mut ns, ROOT_INO, b"g").unwrap();
    assert_eq!((a.ino, a.nlink, a.ctime_ns), (f, 1, T0 + 70));
    rename(&mut ns, ROOT_INO, b"d", ROOT_INO, b"e").unwrap();
    assert_eq!(lookup(&mut ns, ROOT_INO, b"e").unwrap().ino, d);
    let root = getattr(&mut ns, ROOT_INO).unwrap();
    assert_eq!(
        (root.nlink, root.mtime_ns, root.ctime_ns),
        (3, T0 + 70, T0 + 70)
    );
    assert_eq!(ns.inode_count(), 3);
    well_formed(&ns).unwrap();
}

#[test]
fn rename_a_directory_across_directories_moves_a_parent_link() {
    let mut ns = fresh();
    let a = mkdir(&mut ns, ROOT_INO, b"a");
    let b = mkdir(&mut ns, ROOT_INO, b"b");
    let d = mkdir(&mut ns, a, b"d");
    mkfile(&mut ns, d, b"inside");
    assert_eq!((nlink(&ns, a), nlink(&ns, b)), (3, 2));
    rename(&mut ns, a, b"d", b, b"e").unwrap();
    assert_eq!((nlink(&ns, a), nlink(&ns, b)), (2, 3));
    assert_eq!(nlink(&ns, ROOT_INO), 4);
    assert_eq!(lookup(&mut ns, b, b"e").unwrap().ino, d);
    assert_eq!(lookup(&mut ns, a, b"d"), Err(libc::ENOENT));
    assert!(lookup(&mut ns, d, b"inside").is_ok());
    for p in [a, b] {
        let attr = getattr(&mut ns, p).unwrap();
        assert_eq!((attr.mtime_ns, attr.ctime_ns), (T0 + 70, T0 + 70));
    }
    well_formed(&ns).unwrap();
    // The moved directory's new place counts for the subtree check: b is now above d.
    assert_eq!(rename(&mut ns, ROOT_INO, b"b", d, b"x"), Err(libc::EINVAL));
    // And a is no longer above it.
    rename(&mut ns, ROOT_INO, b"a", d, b"a").unwrap();
    assert_eq!(nlink(&ns, d), 3);
    assert_eq!(nlink(&ns, ROOT_INO), 3);
    well_formed(&ns).unwrap();
}

#[test]
fn rename_a_file_across_directories_leaves_parent_links_alone() {
    let mut ns = fresh();
    let a = mkdir(&mut ns, ROOT_INO, b"a");
    let b = mkdir(&mut ns, ROOT_INO, b"b");
    let f = mkfile(&mut ns, a, b"f");
    rename(&mut ns, a, b"f", b, b"f").unwrap();
    assert_eq!((nlink(&ns, a), nlink(&ns, b), nlink(&ns, f)), (2, 2, 1));
    assert_eq!(lookup(&mut ns, b, b"f").unwrap().ino, f);
    assert!(ns.entries(a).unwrap().is_empty());
    well_formed(&ns).unwrap();
}

#[test]
fn rename_over_a_file_replaces_and_purges_it() {
    let mut ns = fresh();
    let a = mkfile(&mut ns, ROOT_INO, b"a");
    let b = mkfile(&mut ns, ROOT_INO, b"b");
    for (ino, size) in [(a, 10), (b, 20)] {
        let set = SetAttr {
            size: Some(size),
            ..SetAttr::default()
        };
        setattr(&mut ns, ino, set, T0).unwrap();
    }
    assert_eq!(statfs(&mut ns), (3, 30));
    let updates = rename(&mut ns, ROOT_INO, b"a", ROOT_INO, b"b").unwrap();
    assert_eq!(
        (deleted(&updates), purges(&updates)),
        (vec![b], vec![(b, 20)])
    );
    let got = lookup(&mut ns, ROOT_INO, b"b").unwrap();
    assert_eq!((got.ino, got.size), (a, 10));
    assert_eq!(lookup(&mut ns, ROOT_INO, b"a"), Err(libc::ENOENT));
    assert_eq!(getattr(&mut ns, b), Err(libc::ENOENT));
    assert_eq!(statfs(&mut ns), (2, 10));
    well_formed(&ns).unwrap();
}

#[test]
fn rename_over_a_file_with_other_links_only_drops_one() {
    let mut ns = fresh();
    let d = mkdir(&mut ns, ROOT_INO, b"d");
    mkfile(&mut ns, ROOT_INO, b"a");
    let b = mkfile(&mut ns, d, b"b");
    link(&mut ns, b, ROOT_INO, b"b2").unwrap();
    let updates = rename(&mut ns, ROOT_INO, b"a", d, b"b").unwrap();
    assert_eq!((deleted(&updates), purges(&updates)), (vec![], vec![]));
    let other = lookup(&mut ns, ROOT_INO, b"b2").unwrap();
    assert_eq!((other.ino, other.nlink, other.ctime_ns), (b, 1, T0 + 70));
    well_formed(&ns).unwrap();
}

#[test]
fn rename_over_an_empty_directory_replaces_it() {
    let mut ns = fresh();
    let d1 = mkdir(&mut ns, ROOT_INO, b"d1");
    let d2 = mkdir(&mut ns, ROOT_INO, b"d2");
    mkfile(&mut ns, d1, b"f");
    assert_eq!(nlink(&ns, ROOT_INO), 4);
    let updates = rename(&mut ns, ROOT_INO, b"d1", ROOT_INO, b"d2").unwrap();
    assert_eq!((deleted(&updates), purges(&updates)), (vec![d2], vec![]));
    assert_eq!(nlink(&ns, ROOT_INO), 3);
    assert_eq!(lookup(&mut ns, ROOT_INO, b"d2").unwrap().ino, d1);
    assert_eq!(ns.entries(d2), None);
    well_formed(&ns).unwrap();

    // Across directories: the source parent loses a link, the target's count stays.
    let a = mkdir(&mut ns, ROOT_INO, b"a");
    let b = mkdir(&mut ns, ROOT_INO, b"b");
    mkdir(&mut ns, a, b"x");
    let y = mkdir(&mut ns, b, b"y");
    rename(&mut ns, a, b"x", b, b"y").unwrap();
    assert_eq!((nlink(&ns, a), nlink(&ns, b)), (2, 3));
    assert_eq!(getattr(&mut ns, y), Err(libc::ENOENT));
    well_formed(&ns).unwrap();
}

#[test]
fn rename_errors_on_kind_mismatch_and_non_empty_targets() {
    let mut ns = fresh();
    let d = mkdir(&mut ns, ROOT_INO, b"d");
    mkdir(&mut ns, ROOT_INO, b"full");
    mkfile(&mut ns, ROOT_INO, b"f");
    mkfile(&mut ns, d, b"inner");
    mkdir(&mut ns, ROOT_INO, b"e");
    let op = |name: &[u8], new_name: &[u8]| MdsOp::Rename {
        parent: ROOT_INO,
        name: name.to_vec(),
        new_parent: ROOT_INO,
        new_name: new_name.to_vec(),
        flags: 0,
        now_ns: T0,
    };
    let full = lookup(&mut ns, ROOT_INO, b"full").unwrap().ino;
    mkfile(&mut ns, full, b"x");
    fails(&mut ns, &op(b"e", b"full"), libc::ENOTEMPTY);
    fails(&mut ns, &op(b"f", b"e"), libc::EISDIR);
    fails(&mut ns, &op(b"e", b"f"), libc::ENOTDIR);
    fails(&mut ns, &op(b"missing", b"x"), libc::ENOENT);
}

#[test]
fn rename_a_directory_into_its_own_subtree_is_einval() {
    let mut ns = fresh();
    let a = mkdir(&mut ns, ROOT_INO, b"a");
    let b = mkdir(&mut ns, a, b"b");
    let c = mkdir(&mut ns, b, b"c");
    let op = |parent, name: &[u8], new_parent| MdsOp::Rename {
        parent,
        name: name.to_vec(),
        new_parent,
        new_name: b"x".to_vec(),
        flags: 0,
        now_ns: T0,
    };
    fails(&mut ns, &op(ROOT_INO, b"a", a), libc::EINVAL);
    fails(&mut ns, &op(ROOT_INO, b"a", b), libc::EINVAL);
    fails(&mut ns, &op(ROOT_INO, b"a", c), libc::EINVAL);
    fails(&mut ns, &op(a, b"b", c), libc::EINVAL);
    fails(&mut ns, &op(b, b"c", c), libc::EINVAL);
    // Moving up is fine.
    rename(&mut ns, b, b"c", ROOT_INO, b"c").unwrap();
    assert_eq!((nlink(&ns, b), nlink(&ns, ROOT_INO)), (2, 4));
    // A file may go anywhere below.
    mkfile(&mut ns, ROOT_INO, b"f");
    rename(&mut ns, ROOT_INO, b"f", b, b"f").unwrap();
    well_formed(&ns).unwrap();
}

#[test]
fn rename_into_the_subtree_is_caught_at_any_depth() {
    let mut ns = fresh();
    let top = mkdir(&mut ns, ROOT_INO, b"top");
    let mut bottom = top;
    for _ in 0..200 {
        bottom = mkdir(&mut ns, bottom, b"d");
    }
    let op = MdsOp::Rename {
        parent: ROOT_INO,
        name: b"top".to_vec(),
        new_parent: bottom,
        new_name: b"x".to_vec(),
        flags: 0,
        now_ns: T0,
    };
    fails(&mut ns, &op, libc::EINVAL);
    // The other way round is a plain move.
    let other = mkdir(&mut ns, ROOT_INO, b"other");
    rename(&mut ns, ROOT_INO, b"other", bottom, b"x").unwrap();
    assert_eq!(nlink(&ns, bottom), 3);
    assert_eq!(lookup(&mut ns, bottom, b"x").unwrap().ino, other);
    well_formed(&ns).unwrap();
}

#[test]
fn rename_noreplace_and_unknown_flags() {
    let mut ns = fresh();
    mkfile(&mut ns, ROOT_INO, b"a");
    mkfile(&mut ns, ROOT_INO, b"b");
    let op = |new_name: &[u8], flags| MdsOp::Rename {
        parent: ROOT_INO,
        name: b"a".to_vec(),
        new_parent: ROOT_INO,
        new_name: new_name.to_vec(),
        flags,
        now_ns: T0,
    };
    fails(&mut ns, &op(b"b", RENAME_NOREPLACE), libc::EEXIST);
    // RENAME_EXCHANGE (2), RENAME_WHITEOUT (4) and anything else are not supported.
    fails(&mut ns, &op(b"b", 2), libc::EINVAL);
    fails(&mut ns, &op(b"c", 4), libc::EINVAL);
    fails(&mut ns, &op(b"c", RENAME_NOREPLACE | 8), libc::EINVAL);
    rename_flags(&mut ns, ROOT_INO, b"a", ROOT_INO, b"c", RENAME_NOREPLACE).unwrap();
    assert!(lookup(&mut ns, ROOT_INO, b"c").is_ok());
    well_formed(&ns).unwrap();
}

#[test]
fn rename_name_and_parent_errors() {
    let mut ns = fresh();
    let f = mkfile(&mut ns, ROOT_INO, b"f");
    let op = |parent, name: &[u8], new_parent, new_name: &[u8]| MdsOp::Rename {
        parent,
        name: name.to_vec(),
        new_parent,
        new_name: new_name.to_vec(),
        flags: 0,
        now_ns: T0,
    };
    fails(&mut ns, &op(ROOT_INO, b".", ROOT_INO, b"x"), libc::EBUSY);
    fails(&mut ns, &op(ROOT_INO, b"..", ROOT_INO, b"x"), libc::EBUSY);
    fails(&mut ns, &op(ROOT_INO, b"f", ROOT_INO, b"."), libc::EBUSY);
    fails(&mut ns, &op(ROOT_INO, b"f", ROOT_INO, b".."), libc::EBUSY);
    fails(&mut ns, &op(ROOT_INO, b"f", ROOT_INO, b""), libc::EINVAL);
    fails(&mut ns, &op(ROOT_INO, b"f", ROOT_INO, b"a/b"), libc::EINVAL);
    fails(
        &mut ns,
        &op(ROOT_INO, b"f", ROOT_INO, &[b'x'; 256]),
        libc::ENAMETOOLONG,
    );
    fails(&mut ns, &op(ROOT_INO, b"f", f, b"x"), libc::ENOTDIR);
    fails(&mut ns, &op(ROOT_INO, b"f", 999, b"x"), libc::ENOENT);
    fails(&mut ns, &op(999, b"f", ROOT_INO, b"x"), libc::ENOENT);
    fails(&mut ns, &op(f, b"f", ROOT_INO, b"x"), libc::ENOTDIR);
}

#[test]
fn rename_onto_a_hard_link_of_the_same_inode_changes_nothing() {
    let mut ns = fresh();
    let d = mkdir(&mut ns, ROOT_INO, b"d");
    let f = mkfile(&mut ns, ROOT_INO, b"f");
    link(&mut ns, f, ROOT_INO, b"g").unwrap();
    link(&mut ns, f, d, b"h").unwrap();
    let before = snapshot(&ns);
    assert_eq!(rename(&mut ns, ROOT_INO, b"f", ROOT_INO, b"g"), Ok(vec![]));
    assert_eq!(rename(&mut ns, ROOT_INO, b"f", d, b"h"), Ok(vec![]));
    assert_eq!(snapshot(&ns), before);
    assert_eq!(lookup(&mut ns, ROOT_INO, b"f").unwrap().nlink, 3);
    assert_eq!(lookup(&mut ns, ROOT_INO, b"g").unwrap().ino, f);
}

#[test]
fn rename_to_the_same_name_changes_nothing() {
    let mut ns = fresh();
    mkfile(&mut ns, ROOT_INO, b"f");
    let d = mkdir(&mut ns, ROOT_INO, b"d");
    mkfile(&mut ns, d, b"inner");
    let before = snapshot(&ns);
    assert_eq!(rename(&mut ns, ROOT_INO, b"f", ROOT_INO, b"f"), Ok(vec![]));
    assert_eq!(rename(&mut ns, ROOT_INO, b"d", ROOT_INO, b"d"), Ok(vec![]));
    assert_eq!(snapshot(&ns), before);
}

// ---------------------------------------------------------------------------------------------
// Setattr

#[test]
fn truncate_sets_size_mtime_and_ctime() {
    let mut ns = fresh();
    let f = mkfile(&mut ns, ROOT_INO, b"f");
    let set = |size| SetAttr {
        size: Some(size),
        ..SetAttr::default()
    };
    let a = setattr(&mut ns, f, set(100), T0 + 10).unwrap();
    assert_eq!((a.size, a.mtime_ns, a.ctime_ns), (100, T0 + 10, T0 + 10));
    assert_eq!(a.atime_ns, T0);
    assert_eq!(getattr(&mut ns, f).unwrap(), a);
    assert_eq!(statfs(&mut ns), (2, 100));
    let a = setattr(&mut ns, f, set(40), T0 + 20).unwrap();
    assert_eq!((a.size, a.mtime_ns, a.ctime_ns), (40, T0 + 20, T0 + 20));
    assert_eq!(statfs(&mut ns), (2, 40));
    // An explicit mtime wins over the implied one.
    let explicit = SetAttr {
        size: Some(0),
        mtime_ns: Some(5),
        ..SetAttr::default()
    };
    let a = setattr(&mut ns, f, explicit, T0 + 30).unwrap();
    assert_eq!((a.size, a.mtime_ns, a.ctime_ns), (0, 5, T0 + 30));
    assert_eq!(statfs(&mut ns), (2, 0));
    well_formed(&ns).unwrap();
}

#[test]
fn grow_only_never_shrinks() {
    let mut ns = fresh();
    let f = mkfile(&mut ns, ROOT_INO, b"f");
    let grow = |size, mtime_ns| SetAttr {
        size: Some(size),
        grow_only: true,
        mtime_ns,
        ..SetAttr::default()
    };
    let a = setattr(&mut ns, f, grow(100, None), T0 + 10).unwrap();
    assert_eq!((a.size, a.mtime_ns), (100, T0 + 10));
    let a = setattr(&mut ns, f, grow(50, None), T0 + 20).unwrap();
    assert_eq!((a.size, a.mtime_ns, a.ctime_ns), (100, T0 + 10, T0 + 20));
    let a = setattr(&mut ns, f, grow(100, None), T0 + 25).unwrap();
    assert_eq!((a.size, a.mtime_ns), (100, T0 + 10));
    // A grow-only report never moves mtime backwards either.
    let a = setattr(&mut ns, f, grow(200, Some(T0 + 5)), T0 + 30).unwrap();
    assert_eq!((a.size, a.mtime_ns), (200, T0 + 10));
    let a = setattr(&mut ns, f, grow(10, Some(T0 + 40)), T0 + 40).unwrap();
    assert_eq!((a.size, a.mtime_ns), (200, T0 + 40));
    assert_eq!(statfs(&mut ns), (2, 200));
}

#[test]
fn setattr_size_of_a_non_file_is_refused() {
    let mut ns = fresh();
    let d = mkdir(&mut ns, ROOT_INO, b"d");
    let l = create(&mut ns, ROOT_INO, b"l", FileKind::Symlink)
        .unwrap()
        .ino;
    let p = create(&mut ns, ROOT_INO, b"p", FileKind::Fifo).unwrap().ino;
    let op = |ino| MdsOp::SetAttr {
        ino,
        set: SetAttr {
            size: Some(0),
            perm: Some(0o700),
            ..SetAttr::default()
        },
        now_ns: T0 + 1,
    };
    fails(&mut ns, &op(d), libc::EISDIR);
    fails(&mut ns, &op(ROOT_INO), libc::EISDIR);
    fails(&mut ns, &op(l), libc::EINVAL);
    fails(&mut ns, &op(p), libc::EINVAL);
    fails(&mut ns, &op(999), libc::ENOENT);
}

#[test]
fn setattr_masks_perm_and_sets_owner_times_and_ctime() {
    let mut ns = fresh();
    let f = mkfile(&mut ns, ROOT_INO, b"f");
    let d = mkdir(&mut ns, ROOT_INO, b"d");
    let set = SetAttr {
        perm: Some(0o107_755),
        uid: Some(7),
        gid: Some(8),
        atime_ns: Some(11),
        mtime_ns: Some(12),
        ..SetAttr::default()
    };
    let a = setattr(&mut ns, f, set.clone(), T0 + 100).unwrap();
    assert_eq!(a.perm, 0o7755);
    assert_eq!((a.uid, a.gid), (7, 8));
    assert_eq!((a.atime_ns, a.mtime_ns, a.ctime_ns), (11, 12, T0 + 100));
    assert_eq!(a.size, 0);
    let a = setattr(&mut ns, d, set, T0 + 100).unwrap();
    assert_eq!(
        (a.perm, a.uid, a.ctime_ns, a.nlink),
        (0o7755, 7, T0 + 100, 2)
    );
    // An empty change still touches ctime, but never moves it backwards.
    let a = setattr(&mut ns, f, SetAttr::default(), T0 + 200).unwrap();
    assert_eq!((a.perm, a.ctime_ns, a.mtime_ns), (0o7755, T0 + 200, 12));
    let a = setattr(&mut ns, f, SetAttr::default(), T0 + 150).unwrap();
    assert_eq!(a.ctime_ns, T0 + 200);
    well_formed(&ns).unwrap();
}

// ---------------------------------------------------------------------------------------------
// Extended attributes

#[test]
fn xattrs_set_get_list_remove() {
    let mut ns = fresh();
    let f = mkfile(&mut ns, ROOT_INO, b"f");
    assert_eq!(list_xattr(&mut ns, f).unwrap(), Vec::<Vec<u8>>::new());
    set_xattr(&mut ns, f, b"user.b", b"2", 0).unwrap();
    set_xattr(&mut ns, f, b"user.a", b"1", XATTR_CREATE).unwrap();
    set_xattr(&mut ns, f, b"user.empty", b"", 0).unwrap();
    assert_eq!(get_xattr(&mut ns, f, b"user.a").unwrap(), b"1");
    assert_eq!(get_xattr(&mut ns, f, b"user.empty").unwrap(), b"");
    assert_eq!(
        list_xattr(&mut ns, f).unwrap(),
        vec![
            b"user.a".to_vec(),
            b"user.b".to_vec(),
            b"user.empty".to_vec()
        ]
    );
    set_xattr(&mut ns, f, b"user.a", b"one", XATTR_REPLACE).unwrap();
    set_xattr(&mut ns, f, b"user.b", b"two", 0).unwrap();
    assert_eq!(get_xattr(&mut ns, f, b"user.a").unwrap(), b"one");
    assert_eq!(get_xattr(&mut ns, f, b"user.b").unwrap(), b"two");
    assert_eq!(
        done(
            &mut ns,
            &MdsOp::RemoveXattr {
                ino: f,
                name: b"user.a".to_vec()
            }
        )
        .map(|u| u.len()),
        Ok(1)
    );
    assert_eq!(get_xattr(&mut ns, f, b"user.a"), Err(libc::ENODATA));
    assert_eq!(list_xattr(&mut ns, f).unwrap().len(), 2);
    // Directories carry them too.
    set_xattr(&mut ns, ROOT_INO, b"user.r", b"x", 0).unwrap();
    assert_eq!(get_xattr(&mut ns, ROOT_INO, b"user.r").unwrap(), b"x");
    well_formed(&ns).unwrap();
}

#[test]
fn xattr_errors() {
    let mut ns = fresh();
    let f = mkfile(&mut ns, ROOT_INO, b"f");
    set_xattr(&mut ns, f, b"user.k", b"v", 0).unwrap();
    let set = |name: &[u8], value: Vec<u8>, flags| MdsOp::SetXattr {
        ino: f,
        name: name.to_vec(),
        value,
        flags,
    };
    fails(
        &mut ns,
        &set(b"user.k", b"w".to_vec(), XATTR_CREATE),
        libc::EEXIST,
    );
    fails(
        &mut ns,
        &set(b"user.new", b"w".to_vec(), XATTR_REPLACE),
        libc::ENODATA,
    );
    fails(&mut ns, &set(b"", b"w".to_vec(), 0), libc::EINVAL);
    fails(&mut ns, &set(b"user.\0", b"w".to_vec(), 0), libc::EINVAL);
    fails(&mut ns, &set(&[b'n'; 256], b"w".to_vec(), 0), libc::ERANGE);
    fails(&mut ns, &set(b"user.k", b"w".to_vec(), 4), libc::EINVAL);
    fails(
        &mut ns,
        &set(b"user.big", vec![0; MAX_XATTR_VALUE_BYTES + 1], 0),
        libc::E2BIG,
    );
    fails(
        &mut ns,
        &MdsOp::SetXattr {
            ino: 999,
            name: b"user.k".to_vec(),
            value: vec![],
            flags: 0,
        },
        libc::ENOENT,
    );
    let get = |name: &[u8]| MdsOp::GetXattr {
        ino: f,
        name: name.to_vec(),
    };
    fails(&mut ns, &get(b"user.missing"), libc::ENODATA);
    let remove = |ino, name: &[u8]| MdsOp::RemoveXattr {
        ino,
        name: name.to_vec(),
    };
    fails(&mut ns, &remove(f, b"user.missing"), libc::ENODATA);
    fails(&mut ns, &remove(999, b"user.k"), libc::ENOENT);
    fails(&mut ns, &MdsOp::ListXattr { ino: 999 }, libc::ENOENT);
    fails(
        &mut ns,
        &MdsOp::GetXattr {
            ino: 999,
            name: b"user.k".to_vec(),
        },
        libc::ENOENT,
    );
}

#[test]
fn xattrs_per_inode_are_bounded_to_64_kib_in_all() {
    let mut ns = fresh();
    let f = mkfile(&mut ns, ROOT_INO, b"f");
    let g = mkfile(&mut ns, ROOT_INO, b"g");
    // Names count: "a" plus 65535 bytes is exactly the limit.
    set_xattr(&mut ns, g, b"a", &vec![1; MAX_XATTR_BYTES_PER_INODE - 1], 0).unwrap();
    fails(
        &mut ns,
        &MdsOp::SetXattr {
            ino: g,
            name: b"b".to_vec(),
            value: vec![],
            flags: 0,
        },
        libc::ENOSPC,
    );
    set_xattr(&mut ns, f, b"user.a", &[1; 40_000], 0).unwrap();
    let op = |value: Vec<u8>| MdsOp::SetXattr {
        ino: f,
        name: b"user.b".to_vec(),
        value,
        flags: 0,
    };
    fails(&mut ns, &op(vec![2; 30_000]), libc::ENOSPC);
    // Replacing a value counts the new value, not the old one.
    set_xattr(&mut ns, f, b"user.a", &[1; 10_000], XATTR_REPLACE).unwrap();
    done(&mut ns, &op(vec![2; 30_000])).unwrap();
    assert_eq!(get_xattr(&mut ns, f, b"user.b").unwrap().len(), 30_000);
    let grow = MdsOp::SetXattr {
        ino: f,
        name: b"user.a".to_vec(),
        value: vec![1; 40_000],
        flags: XATTR_REPLACE,
    };
    fails(&mut ns, &grow, libc::ENOSPC);
    assert_eq!(get_xattr(&mut ns, f, b"user.a").unwrap().len(), 10_000);
}

// ---------------------------------------------------------------------------------------------
// Statfs, check, apply

#[test]
fn statfs_counts_inodes_and_file_bytes() {
    let mut ns = fresh();
    assert_eq!(statfs(&mut ns), (1, 0));
    let d = mkdir(&mut ns, ROOT_INO, b"d");
    let a = mkfile(&mut ns, d, b"a");
    let b = mkfile(&mut ns, ROOT_INO, b"b");
    create(&mut ns, ROOT_INO, b"l", FileKind::Symlink).unwrap();
    for (ino, size) in [(a, 100), (b, 200)] {
        let set = SetAttr {
            size: Some(size),
            ..SetAttr::default()
        };
        setattr(&mut ns, ino, set, T0).unwrap();
    }
    assert_eq!(statfs(&mut ns), (5, 300));
    link(&mut ns, a, ROOT_INO, b"a2").unwrap();
    assert_eq!(statfs(&mut ns), (5, 300));
    unlink(&mut ns, d, b"a").unwrap();
    assert_eq!(statfs(&mut ns), (5, 300));
    unlink(&mut ns, ROOT_INO, b"a2").unwrap();
    assert_eq!(statfs(&mut ns), (4, 200));
    rmdir(&mut ns, ROOT_INO, b"d").unwrap();
    assert_eq!(statfs(&mut ns), (3, 200));
    assert_eq!(ns.inode_count(), 3);
    assert_eq!(ns.execute(&MdsOp::Sync), Ok((MdsAnswer::Done, vec![])));
}

/// A file's record, made by hand (to break invariants with).
fn file_inode(ino: u64, nlink: u32) -> Inode {
    Inode {
        attr: Attr {
            ino,
            kind: FileKind::File,
            perm: 0o644,
            uid: UID,
            gid: GID,
            size: 0,
            nlink,
            atime_ns: T0,
            mtime_ns: T0,
            ctime_ns: T0,
            rdev: 0,
            object_size: DEFAULT_OBJECT_SIZE,
        },
        xattrs: BTreeMap::new(),
        target: Vec::new(),
    }
}

fn put_entry(ns: &mut Namespace, name: &[u8], ino: u64, kind: FileKind) {
    ns.apply(&Update::PutDentry {
        dir: ROOT_INO,
        name: name.to_vec(),
        entry: Dentry { ino, kind },
    });
}

#[test]
fn check_reports_broken_invariants() {
    let ns = fresh();
    ns.check().unwrap();

    let mut dangling = ns.clone();
    put_entry(&mut dangling, b"x", 77, FileKind::File);
    assert!(dangling.check().is_err());

    let mut bad_nlink = ns.clone();
    bad_nlink.apply(&Update::NextIno(10));
    bad_nlink.apply(&Update::PutInode(file_inode(5, 2)));
    put_entry(&mut bad_nlink, b"f", 5, FileKind::File);
    assert!(bad_nlink.check().is_err());
    put_entry(&mut bad_nlink, b"g", 5, FileKind::File);
    bad_nlink.check().unwrap();
    put_entry(&mut bad_nlink, b"h", 5, FileKind::Fifo);
    assert!(bad_nlink.check().is_err(), "kind differs");

    let mut bad_dir = ns.clone();
    let mut root = bad_dir.inode(ROOT_INO).unwrap().clone();
    root.attr.nlink = 3;
    bad_dir.apply(&Update::PutInode(root));
    assert!(bad_dir.check().is_err());

    let mut past_next = ns.clone();
    past_next.apply(&Update::PutInode(file_inode(50, 1)));
    put_entry(&mut past_next, b"f", 50, FileKind::File);
    assert!(past_next.check().is_err());
    past_next.apply(&Update::NextIno(51));
    past_next.check().unwrap();
}

#[test]
fn applying_updates_again_changes_nothing() {
    let mut ns = fresh();
    let d = mkdir(&mut ns, ROOT_INO, b"d");
    let f = mkfile(&mut ns, d, b"f");
    link(&mut ns, f, ROOT_INO, b"g").unwrap();
    let mut all = Namespace::format(T0, UID, GID);
    let ops = [
        create_op(ROOT_INO, b"e", FileKind::Dir, T0 + 1),
        MdsOp::Rename {
            parent: ROOT_INO,
            name: b"e".to_vec(),
            new_parent: d,
            new_name: b"e".to_vec(),
            flags: 0,
            now_ns: T0 + 2,
        },
        MdsOp::SetAttr {
            ino: f,
            set: SetAttr {
                size: Some(9),
                ..SetAttr::default()
            },
            now_ns: T0 + 3,
        },
        MdsOp::Unlink {
            parent: d,
            name: b"f".to_vec(),
            now_ns: T0 + 4,
        },
        MdsOp::Rename {
            parent: d,
            name: b"e".to_vec(),
            new_parent: ROOT_INO,
            new_name: b"d2".to_vec(),
            flags: 0,
            now_ns: T0 + 5,
        },
    ];
    let mut replayed = ns.clone();
    for op in &ops {
        let (_, updates) = ns.execute(op).unwrap();
        for u in &updates {
            replayed.apply(u);
            replayed.apply(u);
        }
        all.extend(updates);
    }
    well_formed(&ns).unwrap();
    assert_eq!(snapshot(&replayed), snapshot(&ns));
    for u in &all {
        replayed.apply(u);
    }
    assert_eq!(snapshot(&replayed), snapshot(&ns));
}

// ---------------------------------------------------------------------------------------------
// Replay: a random run, its updates applied once, twice each, and all again

const NAMES: [&[u8]; 7] = [b"a", b"b", b"c", b"d", b"e", b".", b""];

#[derive(Clone, Debug)]
enum Step {
    Create {
        dir: u8,
        name: u8,
        kind: u8,
    },
    Unlink {
        dir: u8,
        name: u8,
    },
    Rmdir {
        dir: u8,
        name: u8,
    },
    Rename {
        dir: u8,
        name: u8,
        /// Prefer a directory as the source.
        move_dir: bool,
        new_dir: u8,
        new_name: u8,
        flags: u32,
    },
    Link {
        ino: u8,
        dir: u8,
        name: u8,
    },
    SetAttr {
        ino: u8,
        size: Option<u16>,
        grow_only: bool,
        perm: Option<u32>,
    },
    SetXattr {
        ino: u8,
        name: u8,
        len: u32,
        flags: u32,
    },
    RemoveXattr {
        ino: u8,
        name: u8,
    },
}

/// Mostly a valid name of [`NAMES`]; `.` or an empty name now and then. As a pick among
/// the names a directory holds ([`resolve`]), any value.
fn name_strategy() -> impl Strategy<Value = u8> {
    prop_oneof![
        12 => (0u8..36, 0u8..5).prop_map(|(k, i)| k * 7 + i),
        1 => (0u8..36, 5u8..7).prop_map(|(k, i)| k * 7 + i),
    ]
}

/// A directory mostly; now and then any inode or a missing one.
fn dir_strategy() -> impl Strategy<Value = u8> {
    prop_oneof![9 => 0u8..100, 1 => 200u8..=255]
}

fn step_strategy() -> impl Strategy<Value = Step> {
    let name = name_strategy;
    let dir = dir_strategy;
    prop_oneof![
        6 => (dir(), name(), 0u8..5).prop_map(|(dir, name, kind)| Step::Create { dir, name, kind }),
        3 => (dir(), name()).prop_map(|(dir, name)| Step::Unlink { dir, name }),
        3 => (dir(), name()).prop_map(|(dir, name)| Step::Rmdir { dir, name }),
        6 => (
            (dir(), name(), any::<bool>()),
            (dir(), name()),
            prop_oneof![6 => Just(0u32), 2 => Just(1), 1 => Just(2)],
        )
            .prop_map(|((dir, name, move_dir), (new_dir, new_name), flags)| Step::Rename {
                dir,
                name,
                move_dir,
                new_dir,
                new_name,
                flags,
            }),
        3 => (any::<u8>(), dir(), name()).prop_map(|(ino, dir, name)| Step::Link { ino, dir, name }),
        2 => (any::<u8>(), proptest::option::of(0u16..5000), any::<bool>(), proptest::option::of(0u32..0o20000))
            .prop_map(|(ino, size, grow_only, perm)| Step::SetAttr { ino, size, grow_only, perm }),
        1 => (any::<u8>(), 0u8..3, prop_oneof![3 => 0u32..64, 1 => 30_000u32..40_000], 0u32..3)
            .prop_map(|(ino, name, len, flags)| Step::SetXattr { ino, name, len, flags }),
        1 => (any::<u8>(), 0u8..3).prop_map(|(ino, name)| Step::RemoveXattr { ino, name }),
    ]
}

/// The operation a step stands for in the namespace as it is now.
fn resolve(ns: &Namespace, step: &Step, now_ns: i64) -> MdsOp {
    let mut all: Vec<u64> = ns.inodes().map(|i| i.attr.ino).collect();
    all.sort_unstable();
    let mut dirs: Vec<u64> = ns
        .inodes()
        .filter(|i| i.attr.kind == FileKind::Dir)
        .map(|i| i.attr.ino)
        .collect();
    dirs.sort_unstable();
    let missing = ns.next_ino() + 3;
    let any_ino = |sel: u8| {
        all.get(usize::from(sel) % (all.len() + 1))
            .copied()
            .unwrap_or(missing)
    };
    let dir = |sel: u8| match sel {
        0..200 => dirs[usize::from(sel) % dirs.len()],
        _ => any_ino(sel),
    };
    // The directory to remove or move from: mostly one with entries.
    let full: Vec<u64> = dirs
        .iter()
        .copied()
        .filter(|d| ns.entries(*d).is_some_and(|m| !m.is_empty()))
        .collect();
    let src_dir = |sel: u8| match sel {
        0..200 if !full.is_empty() => full[usize::from(sel) % full.len()],
        _ => dir(sel),
    };
    let name = |sel: u8| NAMES[usize::from(sel) % NAMES.len()].to_vec();
    // A name to remove or move: mostly one that `parent` holds (a directory, for rmdir), so
    // that these succeed often.
    let held = |parent: u64, sel: u8, prefer_dir: bool| {
        let entries = ns.entries(parent).into_iter().flatten();
        let all: Vec<&Vec<u8>> = entries.clone().map(|(name, _)| name).collect();
        let dirs: Vec<&Vec<u8>> = entries
            .filter(|(_, e)| e.kind == FileKind::Dir)
            .map(|(name, _)| name)
            .collect();
        let names = if prefer_dir && !dirs.is_empty() {
            dirs
        } else {
            all
        };
        match names.len() {
            n if n > 0 && !sel.is_multiple_of(4) => names[usize::from(sel) % n].clone(),
            _ => name(sel),
        }
    };
    match *step {
        Step::Create {
            dir: d,
            name: n,
            kind,
        } => {
            let kind = [
                FileKind::File,
                FileKind::Dir,
                FileKind::Symlink,
                FileKind::Fifo,
                FileKind::Dir,
            ][usize::from(kind) % 5];
            create_op(dir(d), &name(n), kind, now_ns)
        }
        Step::Unlink { dir: d, name: n } => MdsOp::Unlink {
            parent: src_dir(d),
            name: held(src_dir(d), n, false),
            now_ns,
        },
        Step::Rmdir { dir: d, name: n } => MdsOp::Rmdir {
            parent: src_dir(d),
            name: held(src_dir(d), n, true),
            now_ns,
        },
        Step::Rename {
            dir: d,
            name: n,
            move_dir,
            new_dir,
            new_name,
            flags,
        } => MdsOp::Rename {
            parent: src_dir(d),
            name: held(src_dir(d), n, move_dir),
            new_parent: dir(new_dir),
            new_name: name(new_name),
            flags,
            now_ns,
        },
        Step::Link {
            ino,
            dir: d,
            name: n,
        } => MdsOp::Link {
            ino: any_ino(ino),
            parent: dir(d),
            name: name(n),
            now_ns,
        },
        Step::SetAttr {
            ino,
            size,
            grow_only,
            perm,
        } => MdsOp::SetAttr {
            ino: any_ino(ino),
            set: SetAttr {
                size: size.map(u64::from),
                grow_only,
                perm,
                ..SetAttr::default()
            },
            now_ns,
        },
        Step::SetXattr {
            ino,
            name: n,
            len,
            flags,
        } => MdsOp::SetXattr {
            ino: any_ino(ino),
            name: vec![b'x', n],
            value: vec![n; len as usize],
            flags,
        },
        Step::RemoveXattr { ino, name: n } => MdsOp::RemoveXattr {
            ino: any_ino(ino),
            name: vec![b'x', n],
        },
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn replaying_updates_once_twice_or_again_rebuilds_the_same_namespace(
        steps in proptest::collection::vec(step_strategy(), 1..60)
    ) {
        let format = Namespace::format(T0, UID, GID);
        let mut live = Namespace::default();
        let mut once = Namespace::default();
        let mut twice = Namespace::default();
        for u in &format {
            live.apply(u);
            once.apply(u);
            twice.apply(u);
            twice.apply(u);
        }
        let mut log = format.clone();
        for (i, step) in steps.iter().enumerate() {
            let now_ns = T0 + 1 + i as i64;
            let op = resolve(&live, step, now_ns);
            let pre = live.clone();
            match live.execute(&op) {
                Err(errno) => {
                    prop_assert!(errno > 0, "errno {errno} for {op:?}");
                    prop_assert_eq!(snapshot(&live), snapshot(&pre), "failed {:?} changed state", op);
                }
                Ok((_, updates)) => {
                    prop_assert!(
                        op.is_mutation() || updates.is_empty(),
                        "{:?} is no mutation but made updates", op
                    );
                    // A file's inode goes with a purge of its data at its last size, and
                    // nothing else is purged.
                    for (ino, _) in purges(&updates) {
                        prop_assert!(deleted(&updates).contains(&ino), "{:?} purged live {}", op, ino);
                    }
                    for u in &updates {
                        if let Update::DelInode(ino) = u {
                            let gone = &pre.inode(*ino).unwrap().attr;
                            if gone.kind == FileKind::File {
                                prop_assert!(
                                    updates.contains(&Update::Purge {
                                        ino: *ino,
                                        size: gone.size,
                                        object_size: gone.object_size,
                                    }),
                                    "{:?} deleted file {} without purging it: {:?}", op, ino, updates
                                );
                            }
                        }
                    }
                    for u in &updates {
                        once.apply(u);
                        twice.apply(u);
                        twice.apply(u);
                    }
                    log.extend(updates);
                }
            }
            if let Err(e) = well_formed(&live) {
                return Err(TestCaseError::fail(format!("after {op:?}: {e}")));
            }
            let now = snapshot(&live);
            prop_assert_eq!(&snapshot(&once), &now, "applied once, after {:?}", op);
            prop_assert_eq!(&snapshot(&twice), &now, "applied twice, after {:?}", op);
        }
        let mut fresh_replay = Namespace::default();
        for u in &log {
            fresh_replay.apply(u);
        }
        for u in &log {
            twice.apply(u);
        }
        let end = snapshot(&live);
        prop_assert_eq!(&snapshot(&fresh_replay), &end);
        prop_assert_eq!(&snapshot(&twice), &end, "the whole log replayed over the end state");
        prop_assert!(well_formed(&fresh_replay).is_ok());
        prop_assert!(well_formed(&twice).is_ok());
    }
}

// ---------------------------------------------------------------------------------------------
// Layouts

fn fresh_with_pool() -> Namespace {
    let mut ns = fresh();
    ns.set_data_pool("fs.data");
    ns
}

#[test]
fn a_directory_layout_reaches_files_made_under_it_and_under_its_subdirectories() {
    let mut ns = fresh_with_pool();
    let d = mkdir(&mut ns, ROOT_INO, b"d");
    assert_eq!(
        get_xattr(&mut ns, d, b"ceph.dir.layout"),
        Err(libc::ENODATA),
        "a new directory has no layout of its own"
    );
    assert_eq!(
        get_xattr(&mut ns, ROOT_INO, b"ceph.dir.layout.object_size").unwrap(),
        b"4194304"
    );
    let sub = mkdir(&mut ns, d, b"sub");
    let before = mkfile(&mut ns, d, b"before");
    set_xattr(&mut ns, d, b"ceph.dir.layout.object_size", b"1048576", 0).unwrap();
    let f = mkfile(&mut ns, d, b"f");
    let deep = mkfile(&mut ns, sub, b"deep");
    assert_eq!(getattr(&mut ns, f).unwrap().object_size, 1 << 20);
    assert_eq!(
        getattr(&mut ns, deep).unwrap().object_size,
        1 << 20,
        "the nearest ancestor with a layout decides, at creation"
    );
    assert_eq!(
        getattr(&mut ns, before).unwrap().object_size,
        DEFAULT_OBJECT_SIZE,
        "files made before keep theirs"
    );
    assert_eq!(
        get_xattr(&mut ns, f, b"ceph.file.layout").unwrap(),
        b"stripe_unit=1048576 stripe_count=1 object_size=1048576 pool=fs.data"
    );
    assert_eq!(
        list_xattr(&mut ns, d).unwrap(),
        Vec::<Vec<u8>>::new(),
        "virtual attributes are not listed"
    );
    done(
        &mut ns,
        &MdsOp::RemoveXattr {
            ino: d,
            name: b"ceph.dir.layout".to_vec(),
        },
    )
    .unwrap();
    let after = mkfile(&mut ns, d, b"after");
    assert_eq!(
        getattr(&mut ns, after).unwrap().object_size,
        DEFAULT_OBJECT_SIZE
    );
    ns.check().unwrap();
}

#[test]
fn a_file_layout_changes_only_while_the_file_is_empty() {
    let mut ns = fresh_with_pool();
    let f = mkfile(&mut ns, ROOT_INO, b"f");
    set_xattr(
        &mut ns,
        f,
        b"ceph.file.layout",
        b"stripe_unit=65536 stripe_count=1 object_size=65536 pool=fs.data",
        0,
    )
    .unwrap();
    assert_eq!(getattr(&mut ns, f).unwrap().object_size, 64 << 10);
    let set = SetAttr {
        size: Some(1),
        ..SetAttr::default()
    };
    setattr(&mut ns, f, set, T0 + 1).unwrap();
    assert_eq!(
        set_xattr(&mut ns, f, b"ceph.file.layout.object_size", b"1048576", 0),
        Err(libc::ENOTEMPTY)
    );
    assert_eq!(getattr(&mut ns, f).unwrap().object_size, 64 << 10);
    ns.check().unwrap();
}

#[test]
fn layouts_refuse_what_they_cannot_hold() {
    let mut ns = fresh_with_pool();
    let d = mkdir(&mut ns, ROOT_INO, b"d");
    let f = mkfile(&mut ns, ROOT_INO, b"f");
    let before = ns.clone();
    for (ino, name, value, errno) in [
        (
            d,
            &b"ceph.dir.layout.object_size"[..],
            &b"4096"[..],
            libc::EINVAL,
        ),
        (d, b"ceph.dir.layout.object_size", b"67108864", libc::EINVAL),
        (d, b"ceph.dir.layout.stripe_count", b"4", libc::EINVAL),
        (d, b"ceph.dir.layout.pool", b"elsewhere", libc::EINVAL),
        (d, b"ceph.dir.layout", b"object_size=abc", libc::EINVAL),
        (d, b"ceph.file.layout.object_size", b"1048576", libc::EINVAL),
        (f, b"ceph.dir.layout.object_size", b"1048576", libc::EINVAL),
        (d, b"ceph.dir.entries", b"3", libc::EINVAL),
        (d, b"ceph.unknown", b"1", libc::EINVAL),
        (f, b"ceph.file.layout.object_size", b"1048576", 0),
    ] {
        let got = set_xattr(&mut ns, ino, name, value, 0).err().unwrap_or(0);
        assert_eq!(got, errno, "{}", String::from_utf8_lossy(name));
    }
    assert_eq!(
        get_xattr(&mut ns, f, b"ceph.dir.layout"),
        Err(libc::ENODATA)
    );
    assert_eq!(
        get_xattr(&mut ns, d, b"ceph.file.layout"),
        Err(libc::ENODATA)
    );
    assert_eq!(get_xattr(&mut ns, d, b"ceph.nothing"), Err(libc::ENODATA));
    assert_eq!(
        done(
            &mut ns,
            &MdsOp::RemoveXattr {
                ino: ROOT_INO,
                name: b"ceph.dir.layout".to_vec(),
            }
        ),
        Err(libc::EINVAL),
        "the root keeps its layout"
    );
    assert_eq!(
        getattr(&mut ns, d).unwrap(),
        getattr(&mut before.clone(), d).unwrap()
    );
    ns.check().unwrap();
}

#[test]
fn directory_counts_read_as_virtual_attributes() {
    let mut ns = fresh_with_pool();
    let d = mkdir(&mut ns, ROOT_INO, b"d");
    mkfile(&mut ns, d, b"a");
    mkfile(&mut ns, d, b"b");
    mkdir(&mut ns, d, b"c");
    assert_eq!(get_xattr(&mut ns, d, b"ceph.dir.entries").unwrap(), b"3");
    assert_eq!(get_xattr(&mut ns, d, b"ceph.dir.files").unwrap(), b"2");
    assert_eq!(get_xattr(&mut ns, d, b"ceph.dir.subdirs").unwrap(), b"1");
}

// ---------------------------------------------------------------------------------------------
// Files held open

fn unlink_holding(ns: &mut Namespace, parent: u64, name: &[u8], held: &[u64]) -> Vec<Update> {
    let op = MdsOp::Unlink {
        parent,
        name: name.to_vec(),
        now_ns: T0 + 50,
    };
    let (answer, updates) = ns.execute_holding(&op, &|ino| held.contains(&ino)).unwrap();
    assert_eq!(answer, MdsAnswer::Done);
    updates
}

#[test]
fn a_file_held_open_outlives_its_last_name_until_reaped() {
    let mut ns = fresh();
    let f = mkfile(&mut ns, ROOT_INO, b"f");
    let set = SetAttr {
        size: Some(5000),
        ..SetAttr::default()
    };
    setattr(&mut ns, f, set, T0 + 1).unwrap();
    let updates = unlink_holding(&mut ns, ROOT_INO, b"f", &[f]);
    assert!(
        purges(&updates).is_empty(),
        "no purge while held: {updates:?}"
    );
    assert!(!deleted(&updates).contains(&f));
    assert_eq!(lookup(&mut ns, ROOT_INO, b"f"), Err(libc::ENOENT));
    let a = getattr(&mut ns, f).unwrap();
    assert_eq!(
        (a.nlink, a.size),
        (0, 5000),
        "fstat on the open file still works"
    );
    assert_eq!(ns.orphans().collect::<Vec<_>>(), vec![f]);
    assert_eq!(
        link(&mut ns, f, ROOT_INO, b"again"),
        Err(libc::ENOENT),
        "an orphan takes no new name"
    );
    ns.check().unwrap();

    let mut reloaded = Namespace::default();
    for i in ns.inodes() {
        reloaded.apply(&Update::PutInode(i.clone()));
    }
    assert_eq!(
        reloaded.orphans().collect::<Vec<_>>(),
        vec![f],
        "orphans are known again after a restart"
    );

    let reaped = ns.reap(f).unwrap();
    assert_eq!(purges(&reaped), vec![(f, 5000)]);
    assert_eq!(getattr(&mut ns, f), Err(libc::ENOENT));
    assert_eq!(ns.orphans().count(), 0);
    assert_eq!(ns.reap(f), None, "reaping twice does nothing");
    ns.check().unwrap();
}

#[test]
fn only_a_held_files_last_name_makes_an_orphan() {
    let mut ns = fresh();
    let f = mkfile(&mut ns, ROOT_INO, b"f");
    link(&mut ns, f, ROOT_INO, b"g").unwrap();
    let updates = unlink_holding(&mut ns, ROOT_INO, b"f", &[f]);
    assert!(purges(&updates).is_empty());
    assert_eq!(getattr(&mut ns, f).unwrap().nlink, 1);
    assert_eq!(ns.orphans().count(), 0, "it still has a name");
    assert_eq!(ns.reap(f), None, "a named file is never reaped");
    let other = mkfile(&mut ns, ROOT_INO, b"other");
    let updates = unlink_holding(&mut ns, ROOT_INO, b"other", &[f]);
    assert_eq!(
        purges(&updates),
        vec![(other, 0)],
        "not held: deleted at once"
    );
    ns.check().unwrap();
}

#[test]
fn a_rename_over_a_held_file_keeps_it_as_an_orphan() {
    let mut ns = fresh();
    let victim = mkfile(&mut ns, ROOT_INO, b"victim");
    mkfile(&mut ns, ROOT_INO, b"new");
    let op = MdsOp::Rename {
        parent: ROOT_INO,
        name: b"new".to_vec(),
        new_parent: ROOT_INO,
        new_name: b"victim".to_vec(),
        flags: 0,
        now_ns: T0 + 9,
    };
    let (_, updates) = ns.execute_holding(&op, &|ino| ino == victim).unwrap();
    assert!(purges(&updates).is_empty());
    assert_eq!(ns.orphans().collect::<Vec<_>>(), vec![victim]);
    assert_eq!(getattr(&mut ns, victim).unwrap().nlink, 0);
    ns.check().unwrap();
}

fn pinned_create(ns: &mut Namespace, name: &[u8], pin: u64) -> u64 {
    let op = create_op(ROOT_INO, name, FileKind::File, T0).pinned_to(&Ok(MdsAnswer::Attr(Attr {
        ino: pin,
        ..create(&mut fresh(), ROOT_INO, b"model", FileKind::File).unwrap()
    })));
    expect_attr(ns.execute(&op)).ino
}

#[test]
fn a_replayed_create_gets_the_inode_number_it_was_answered_while_no_inode_had_it() {
    let mut ns = fresh();
    let first = create(&mut ns, ROOT_INO, b"a", FileKind::File).unwrap().ino;
    let next = ns.next_ino();
    assert_eq!(next, first + 1);
    assert_eq!(
        pinned_create(&mut ns, b"b", next + 3),
        next + 3,
        "unallocated: kept"
    );
    assert_eq!(ns.next_ino(), next + 4, "numbering goes on past it");
    assert_eq!(
        pinned_create(&mut ns, b"c", first),
        next + 4,
        "a number given before is never given again"
    );
    let far = ns.next_ino() + MAX_PIN_AHEAD;
    assert_eq!(pinned_create(&mut ns, b"d", far), next + 5, "too far ahead");
    let plain = create_op(ROOT_INO, b"e", FileKind::File, T0).unpinned();
    assert!(matches!(plain, MdsOp::Create { ref inode, .. } if inode.ino.is_none()));
}
