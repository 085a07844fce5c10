//! The file system on a `cairn up` cluster, mounted through FUSE by `cairn fs mount`: POSIX
//! behaviour with the errno of each refusal (ENOENT, EEXIST, ENOTEMPTY, EISDIR, ENOTDIR,
//! EPERM, EINVAL, EXDEV), large directories, atomic renames, hard and symbolic links,
//! attributes and extended attributes, sparse files, O_APPEND and truncation; small sequential
//! writes gathered into object writes (read back, overwritten, several writers into one file);
//! per-directory and per-file layouts; two mounts seeing each other's changes and racing on one
//! directory, locking against each other, and keeping a file one holds open while the other
//! unlinks it; this crate's source tree copied in with `cp -a` and compared with `diff -r`;
//! kill -9 of
//! the metadata server (a replacement on its address), a stall of it (a standby on another
//! address fences it and takes over; woken, it stops), kill -9 of an OSD and of a mounted
//! client, each in the middle of a metadata-heavy workload, after which every acknowledged
//! file reads back whole; a mounted client cut off while it holds a lock and a file open for
//! writing is evicted (fenced first), its lock passes on, and woken its writes are refused.
//! A full cluster refuses what would grow the file system with ENOSPC (and S3 PUTs with 507),
//! serves reads, and takes the deletes that make room again.

mod common;

use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{free_port, payload, signal, wait_exited, Cluster};

/// A `cairn fs mount` process and its mount point; unmounted and stopped when dropped.
struct Mount {
    dir: PathBuf,
    child: Child,
}

fn mounted(dir: &Path) -> bool {
    let mounts = fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    let dir = dir.display().to_string();
    mounts
        .lines()
        .any(|l| l.split_whitespace().nth(1) == Some(dir.as_str()))
}

impl Mount {
    fn new(cluster: &Cluster, mon: &str, name: &str) -> Mount {
        let dir = cluster.dir.join(name);
        fs::create_dir_all(&dir).unwrap();
        let log = File::create(cluster.dir.join(format!("{name}.mount.log"))).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_cairn"))
            .env("CAIRN_KEYRING", cluster.keyring())
            .args(["fs", "mount", "--mon", mon, "cairnfs"])
            .arg(&dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while !mounted(&dir) {
            assert!(
                Instant::now() < deadline,
                "{} was not mounted",
                dir.display()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Mount { dir, child }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.join(rel)
    }

    /// Kills the client with SIGKILL (its mount point is left broken, then detached).
    fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        lazy_unmount(&self.dir);
    }
}

fn lazy_unmount(dir: &Path) {
    let _ = Command::new("umount").arg("-l").arg(dir).status();
}

impl Drop for Mount {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_some() {
            return;
        }
        signal("-TERM", self.child.id());
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline && self.child.try_wait().ok().flatten().is_none() {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        if mounted(&self.dir) {
            lazy_unmount(&self.dir);
        }
    }
}

fn errno<T: std::fmt::Debug>(r: std::io::Result<T>) -> i32 {
    r.expect_err("the call should fail")
        .raw_os_error()
        .expect("an errno")
}

/// Whether this machine can mount FUSE file systems at all.
fn fuse_available() -> bool {
    OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
        .is_ok()
}

/// The pid of the directory's daemon `name` (its standard output is `DIR/NAME.log`).
fn daemon_pid(dir: &Path, name: &str) -> u32 {
    let log = fs::canonicalize(dir).unwrap().join(format!("{name}.log"));
    for pid in fs::read_to_string(dir.join("pids"))
        .unwrap()
        .lines()
        .filter_map(|l| l.trim().parse::<u32>().ok())
    {
        if fs::read_link(format!("/proc/{pid}/fd/1")).is_ok_and(|p| p == log) {
            return pid;
        }
    }
    panic!("no running {name} in {}", dir.display());
}

/// The mount widens the kernel's readahead window (128 KiB for any new FUSE mount) to its
/// default of 8 MiB where it may write sysfs (root, with `/sys` writable), and elsewhere logs
/// that it could not, naming the setting, which stays at 128 KiB.
fn readahead_window(m: &Mount, cluster: &Cluster, name: &str) {
    let out = Command::new("mountpoint")
        .arg("-d")
        .arg(&m.dir)
        .output()
        .expect("mountpoint (util-linux) runs");
    let device = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    assert!(out.status.success() && device.contains(':'), "{device}");
    let setting = format!("/sys/class/bdi/{device}/read_ahead_kb");
    let writable = OpenOptions::new().write(true).open(&setting).is_ok();
    let log = cluster.dir.join(format!("{name}.mount.log"));
    let window = || fs::read_to_string(&setting).map(|kib| kib.trim().to_owned());
    let settled = eventually(Duration::from_secs(10), || {
        if writable {
            window().is_ok_and(|kib| kib == "8192")
        } else {
            fs::read_to_string(&log).is_ok_and(|l| l.contains(&setting))
        }
    });
    assert!(
        settled,
        "writable {writable}: {setting} holds {:?}",
        window()
    );
    if !writable {
        assert_eq!(window().expect("read_ahead_kb is readable"), "128");
    }
}

/// Small sequential writes, which the mount gathers into object-sized writes: read back
/// before any flush, overwritten while still gathered, and from several writers into their own
/// regions of one shared file at once (IOR's shared-file pattern), every byte in place.
fn gathered_writes(m: &Mount) {
    const CHUNK: usize = 64 << 10;
    let want = payload(41, 3 << 20);
    let mut f = File::create(m.path("gathered")).unwrap();
    for chunk in want.chunks(CHUNK) {
        f.write_all(chunk).unwrap();
    }
    assert!(
        fs::read(m.path("gathered")).unwrap() == want,
        "gathered writes read back before a flush"
    );
    let patch = payload(42, CHUNK);
    f.seek(SeekFrom::Start(32 << 10)).unwrap();
    f.write_all(&patch).unwrap();
    f.seek(SeekFrom::Start(3 << 20)).unwrap();
    f.write_all(&patch).unwrap();
    f.sync_all().unwrap();
    drop(f);
    let mut patched = want.clone();
    patched[32 << 10..(32 << 10) + CHUNK].copy_from_slice(&patch);
    patched.extend_from_slice(&patch);
    assert!(fs::read(m.path("gathered")).unwrap() == patched);

    const REGION: usize = 1 << 20;
    let shared = m.path("gathered-shared");
    File::create(&shared).unwrap();
    std::thread::scope(|scope| {
        for w in 0..6 {
            let shared = &shared;
            scope.spawn(move || {
                let mut f = OpenOptions::new().write(true).open(shared).unwrap();
                f.seek(SeekFrom::Start((w * REGION) as u64)).unwrap();
                for chunk in payload(50 + w, REGION).chunks(CHUNK) {
                    f.write_all(chunk).unwrap();
                }
                f.sync_all().unwrap();
            });
        }
    });
    let back = fs::read(&shared).unwrap();
    assert_eq!(back.len(), 6 * REGION);
    for (w, region) in back.chunks(REGION).enumerate() {
        assert!(
            region == payload(50 + w, REGION),
            "region {w} of the shared file"
        );
    }
}

fn posix_basics(m: &Mount) {
    // Create, write, read back.
    let data = payload(1, 300_000);
    fs::write(m.path("a"), &data).unwrap();
    assert_eq!(fs::read(m.path("a")).unwrap(), data);
    assert_eq!(fs::metadata(m.path("a")).unwrap().len(), data.len() as u64);
    // Errors, each with its errno.
    let excl = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(m.path("a"));
    assert_eq!(errno(excl), libc::EEXIST);
    assert_eq!(errno(fs::remove_file(m.path("missing"))), libc::ENOENT);
    assert_eq!(errno(fs::metadata(m.path("missing"))), libc::ENOENT);
    fs::create_dir(m.path("d")).unwrap();
    assert_eq!(errno(fs::create_dir(m.path("d"))), libc::EEXIST);
    fs::write(m.path("d/inner"), b"x").unwrap();
    assert_eq!(errno(fs::remove_dir(m.path("d"))), libc::ENOTEMPTY);
    assert_eq!(errno(fs::remove_file(m.path("d"))), libc::EISDIR);
    assert_eq!(errno(fs::remove_dir(m.path("a"))), libc::ENOTDIR);
    assert_eq!(errno(File::open(m.path("a/x"))), libc::ENOTDIR);
    assert_eq!(errno(fs::hard_link(m.path("d"), m.path("dl"))), libc::EPERM);
    fs::create_dir(m.path("d/sub")).unwrap();
    assert_eq!(
        errno(fs::rename(m.path("d"), m.path("d/sub/d"))),
        libc::EINVAL
    );
    let outside = std::env::temp_dir().join(format!("cairn-fs-exdev-{}", std::process::id()));
    assert_eq!(errno(fs::rename(m.path("a"), &outside)), libc::EXDEV);
    assert_eq!(
        errno(fs::write(m.path(&"n".repeat(256)), b"x")),
        libc::ENAMETOOLONG
    );
    // A directory's link count follows its subdirectories.
    assert_eq!(fs::metadata(m.path("d")).unwrap().nlink(), 3);
    fs::remove_dir(m.path("d/sub")).unwrap();
    fs::remove_file(m.path("d/inner")).unwrap();
    fs::remove_dir(m.path("d")).unwrap();
    assert!(!m.path("d").exists());

    // Rename replaces its target atomically.
    fs::write(m.path("old"), b"new contents").unwrap();
    fs::write(m.path("target"), b"old contents").unwrap();
    fs::rename(m.path("old"), m.path("target")).unwrap();
    assert_eq!(fs::read(m.path("target")).unwrap(), b"new contents");
    assert!(!m.path("old").exists());
    fs::create_dir_all(m.path("r1/deep")).unwrap();
    fs::create_dir(m.path("r2")).unwrap();
    fs::rename(m.path("r1/deep"), m.path("r2/moved")).unwrap();
    assert!(m.path("r2/moved").is_dir());
    assert_eq!(fs::metadata(m.path("r1")).unwrap().nlink(), 2);
    assert_eq!(fs::metadata(m.path("r2")).unwrap().nlink(), 3);

    // Hard links and symbolic links.
    fs::hard_link(m.path("target"), m.path("hard")).unwrap();
    let (t, h) = (
        fs::metadata(m.path("target")).unwrap(),
        fs::metadata(m.path("hard")).unwrap(),
    );
    assert_eq!((t.ino(), t.nlink()), (h.ino(), 2));
    fs::remove_file(m.path("target")).unwrap();
    assert_eq!(fs::read(m.path("hard")).unwrap(), b"new contents");
    assert_eq!(fs::metadata(m.path("hard")).unwrap().nlink(), 1);
    std::os::unix::fs::symlink("hard", m.path("sym")).unwrap();
    assert_eq!(fs::read_link(m.path("sym")).unwrap(), Path::new("hard"));
    assert_eq!(fs::read(m.path("sym")).unwrap(), b"new contents");
    assert!(fs::symlink_metadata(m.path("sym"))
        .unwrap()
        .file_type()
        .is_symlink());

    // Attributes.
    fs::set_permissions(m.path("hard"), fs::Permissions::from_mode(0o640)).unwrap();
    assert_eq!(
        fs::metadata(m.path("hard")).unwrap().permissions().mode() & 0o7777,
        0o640
    );
    std::os::unix::fs::chown(m.path("hard"), Some(1234), Some(5678)).unwrap();
    let md = fs::metadata(m.path("hard")).unwrap();
    assert_eq!((md.uid(), md.gid()), (1234, 5678));
    let when = std::time::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
    File::options()
        .write(true)
        .open(m.path("hard"))
        .unwrap()
        .set_modified(when)
        .unwrap();
    assert_eq!(fs::metadata(m.path("hard")).unwrap().mtime(), 1_000_000_000);

    // Extended attributes.
    xattr::set(m.path("hard"), "user.color", b"blue").unwrap();
    xattr::set(m.path("hard"), "user.size", b"large").unwrap();
    assert_eq!(
        xattr::get(m.path("hard"), "user.color").unwrap(),
        Some(b"blue".to_vec())
    );
    let mut names: Vec<_> = xattr::list(m.path("hard")).unwrap().collect();
    names.sort();
    assert_eq!(names, vec!["user.color", "user.size"]);
    xattr::remove(m.path("hard"), "user.color").unwrap();
    assert_eq!(xattr::get(m.path("hard"), "user.color").unwrap(), None);
    assert_eq!(
        errno(xattr::remove(m.path("hard"), "user.color")),
        libc::ENODATA
    );

    // Sparse files, truncation, O_APPEND.
    let mut f = File::create(m.path("sparse")).unwrap();
    f.seek(SeekFrom::Start(9 << 20)).unwrap();
    f.write_all(b"tail").unwrap();
    drop(f);
    let all = fs::read(m.path("sparse")).unwrap();
    assert_eq!(all.len(), (9 << 20) + 4);
    assert!(
        all[..9 << 20].iter().all(|b| *b == 0),
        "a hole reads as zeros"
    );
    assert_eq!(&all[9 << 20..], b"tail");
    let f = OpenOptions::new()
        .write(true)
        .open(m.path("sparse"))
        .unwrap();
    f.set_len(100).unwrap();
    f.set_len(5 << 20).unwrap();
    drop(f);
    let all = fs::read(m.path("sparse")).unwrap();
    assert_eq!(all.len(), 5 << 20);
    assert!(all.iter().all(|b| *b == 0), "cut bytes do not come back");
    for part in [&b"one,"[..], b"two,", b"three"] {
        let mut f = OpenOptions::new()
            .append(true)
            .create(true)
            .open(m.path("log"))
            .unwrap();
        f.write_all(part).unwrap();
    }
    assert_eq!(fs::read(m.path("log")).unwrap(), b"one,two,three");
    // fsync is a barrier the client honours (its size reported before it returns).
    let mut f = File::create(m.path("synced")).unwrap();
    f.write_all(&payload(2, 70_000)).unwrap();
    f.sync_all().unwrap();
    f.sync_data().unwrap();
    drop(f);

    // A directory of thousands of entries, listed whole.
    fs::create_dir(m.path("big")).unwrap();
    for i in 0..2500 {
        File::create(m.path(&format!("big/entry-{i:05}"))).unwrap();
    }
    let mut names: Vec<String> = fs::read_dir(m.path("big"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    let expected: Vec<String> = (0..2500).map(|i| format!("entry-{i:05}")).collect();
    assert_eq!(names, expected);

    // statfs answers with the cluster's room and the file count.
    let out = Command::new("stat")
        .args(["-f", "-c", "%b %f %c"])
        .arg(&m.dir)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let fields: Vec<u64> = text
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    assert!(
        fields.len() == 3 && fields[0] > 0 && fields[1] > 0 && fields[1] <= fields[0],
        "statfs: {text}"
    );
}

/// The size of data object `index` of file `ino`, if it exists.
fn data_object_size(cluster: &Cluster, mon: &str, ino: u64, index: u64) -> Option<u64> {
    let name = format!("{ino:x}.{index:08x}");
    let (ok, out) = cluster.cairn(&["stat", "--mon", mon, "-p", "cairnfs.data", &name]);
    ok.then(|| {
        out.split_whitespace()
            .skip_while(|w| *w != "size")
            .nth(1)
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("stat said {out}"))
    })
}

/// Waits (up to `limit`) until file `ino`'s first data object is gone (its data purged).
fn wait_purged(cluster: &Cluster, mon: &str, ino: u64, limit: Duration) {
    let deadline = Instant::now() + limit;
    while data_object_size(cluster, mon, ino, 0).is_some() {
        assert!(
            Instant::now() < deadline,
            "file {ino}'s data is still there"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// A file one mount holds open and another unlinks: the holder reads and writes it on until
/// it closes it, and then its data goes.
fn open_unlinked(a: &Mount, b: &Mount, cluster: &Cluster, mon: &str) {
    let data = payload(21, 200_000);
    fs::write(a.path("doomed"), &data).unwrap();
    let mut held = OpenOptions::new()
        .read(true)
        .write(true)
        .open(b.path("doomed"))
        .unwrap();
    let ino = held.metadata().unwrap().ino();
    fs::remove_file(a.path("doomed")).unwrap();
    assert!(!b.path("doomed").exists());
    std::thread::sleep(Duration::from_secs(3));
    let mut back = Vec::new();
    held.read_to_end(&mut back).unwrap();
    assert_eq!(back, data, "the holder still reads the whole file");
    held.write_all(b"tail").unwrap();
    held.sync_all().unwrap();
    assert_eq!(held.metadata().unwrap().nlink(), 0);
    assert_eq!(held.metadata().unwrap().len(), data.len() as u64 + 4);
    assert!(data_object_size(cluster, mon, ino, 0).is_some());
    drop(held);
    wait_purged(cluster, mon, ino, Duration::from_secs(30));
}

/// Python's lock calls on `path`, as a process of its own (stopped after 120 s): `code` runs
/// with `f` open on it (read and write) and `fcntl`, `os`, `struct`, `sys`, `time` imported.
fn python_on(path: &Path, code: &str) -> Command {
    let mut c = Command::new("timeout");
    c.args(["120", "python3", "-c"])
        .arg(format!(
            "import fcntl, os, struct, sys, time\nf = open(sys.argv[1], 'r+')\n{code}"
        ))
        .arg(path);
    c
}

/// A process holding a lock on `path` until it is stopped (or its stdin closes).
struct LockHolder(Child);

impl LockHolder {
    /// Starts `code` (which takes the lock) and waits until it says it holds it.
    fn start(path: &Path, code: &str) -> LockHolder {
        let code = format!("{code}\nprint('locked', flush=True)\nsys.stdin.read()");
        let mut child = python_on(path, &code)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
        std::io::BufRead::read_line(&mut out, &mut line).unwrap();
        assert_eq!(line.trim(), "locked", "the holder did not get its lock");
        LockHolder(child)
    }

    /// Lets go: the process exits and the kernel releases its locks.
    fn stop(mut self) {
        drop(self.0.stdin.take());
        let _ = self.0.wait();
    }
}

/// What a python snippet printed; panics if it failed.
fn python_says(path: &Path, code: &str) -> String {
    let out = python_on(path, code).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A process that locks byte `mine` of `path`, says `locked`, and on a line on its stdin
/// waits for byte `other`, saying `got` or the errno's name; it exits when its stdin closes.
fn crossing_locker(
    path: &Path,
    mine: u64,
    other: u64,
) -> (Child, std::io::BufReader<std::process::ChildStdout>) {
    let code = format!(
        "import errno\nfcntl.lockf(f, fcntl.LOCK_EX, 1, {mine})\nprint('locked', flush=True)\n\
         sys.stdin.readline()\ntry:\n fcntl.lockf(f, fcntl.LOCK_EX, 1, {other})\n print('got', flush=True)\n\
         except OSError as e:\n print('EDEADLK' if e.errno == errno.EDEADLK else errno.errorcode[e.errno], flush=True)\nsys.stdin.read()"
    );
    let mut child = python_on(path, &code)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    assert_eq!(read_line(&mut out), "locked");
    (child, out)
}

fn read_line(out: &mut std::io::BufReader<std::process::ChildStdout>) -> String {
    let mut line = String::new();
    std::io::BufRead::read_line(out, &mut line).unwrap();
    line.trim().to_string()
}

/// Two processes on two mounts, each holding the byte the other then waits for: the second
/// to wait is told EDEADLK (as Linux tells two local processes), the first gets its byte once
/// the second exits.
fn deadlock_across_mounts(a: &Mount, b: &Mount) {
    fs::write(a.path("crossing"), b"ab").unwrap();
    let (mut first, mut first_out) = crossing_locker(&a.path("crossing"), 0, 1);
    let (mut second, mut second_out) = crossing_locker(&b.path("crossing"), 1, 0);
    first.stdin.as_mut().unwrap().write_all(b"go\n").unwrap();
    std::thread::sleep(Duration::from_secs(1));
    second.stdin.as_mut().unwrap().write_all(b"go\n").unwrap();
    assert_eq!(
        read_line(&mut second_out),
        "EDEADLK",
        "the wait that closes the cycle"
    );
    drop(second.stdin.take());
    second.wait().unwrap();
    assert_eq!(read_line(&mut first_out), "got", "the other waiter goes on");
    drop(first.stdin.take());
    first.wait().unwrap();
}

/// fcntl record locks and flock locks taken on one mount keep the other mount's processes out
/// of what they cover, until released; a waiting lock is granted once the holder goes.
fn locks_across_mounts(a: &Mount, b: &Mount) {
    fs::write(a.path("records"), b"0123456789").unwrap();
    fs::write(a.path("whole"), b"x").unwrap();
    let holder = LockHolder::start(&a.path("records"), "fcntl.lockf(f, fcntl.LOCK_EX, 100, 0)");
    let try_range = |start: u64, len: u64| {
        python_says(
            &b.path("records"),
            &format!(
                "try:\n fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB, {len}, {start})\n print('ok')\n\
                 except BlockingIOError:\n print('busy')"
            ),
        )
    };
    assert_eq!(
        try_range(50, 10),
        "busy",
        "inside the other mount's record lock"
    );
    assert_eq!(try_range(100, 100), "ok", "beside it");
    let in_the_way = python_says(
        &b.path("records"),
        "q = struct.pack('hhqqi', fcntl.F_WRLCK, 0, 0, 0, 0)\n\
         r = struct.unpack('hhqqi', fcntl.fcntl(f, fcntl.F_GETLK, q))\n\
         print(r[0] == fcntl.F_WRLCK, r[2], r[3])",
    );
    assert_eq!(
        in_the_way, "True 0 100",
        "F_GETLK names the other mount's lock"
    );
    holder.stop();
    assert_eq!(try_range(50, 10), "ok", "released when its holder exited");

    let holder = LockHolder::start(&a.path("whole"), "fcntl.flock(f, fcntl.LOCK_EX)");
    let busy = python_says(
        &b.path("whole"),
        "try:\n fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)\n print('ok')\n\
         except BlockingIOError:\n print('busy')",
    );
    assert_eq!(busy, "busy");
    let waiter = python_on(
        &b.path("whole"),
        "t = time.time()\nfcntl.flock(f, fcntl.LOCK_EX)\nprint('waited', time.time() - t)",
    )
    .stdout(Stdio::piped())
    .spawn()
    .unwrap();
    std::thread::sleep(Duration::from_secs(2));
    holder.stop();
    let out = waiter.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && said.starts_with("waited"), "{said}");
    let waited: f64 = said.split_whitespace().nth(1).unwrap().parse().unwrap();
    assert!(
        waited >= 1.5,
        "the waiter waited for the holder ({waited} s)"
    );
}

/// Per-directory and per-file layouts through CephFS's virtual attributes: files made under a
/// directory with a 64 KiB layout lie in 64 KiB objects of the data pool; a file's own layout
/// changes only while it is empty; bad values are refused with EINVAL.
fn layouts(m: &Mount, cluster: &Cluster, mon: &str) {
    let object_size = |ino: u64, index: u64| data_object_size(cluster, mon, ino, index);
    fs::create_dir(m.path("small-objects")).unwrap();
    assert_eq!(
        xattr::get(m.path("small-objects"), "ceph.dir.layout").unwrap(),
        None,
        "a new directory has no layout of its own"
    );
    xattr::set(
        m.path("small-objects"),
        "ceph.dir.layout.object_size",
        b"65536",
    )
    .unwrap();
    let shown = xattr::get(m.path("small-objects"), "ceph.dir.layout")
        .unwrap()
        .unwrap();
    assert_eq!(
        String::from_utf8(shown).unwrap(),
        "stripe_unit=65536 stripe_count=1 object_size=65536 pool=cairnfs.data"
    );
    let data = payload(11, 300_000);
    fs::write(m.path("small-objects/f"), &data).unwrap();
    assert_eq!(fs::read(m.path("small-objects/f")).unwrap(), data);
    let ino = fs::metadata(m.path("small-objects/f")).unwrap().ino();
    assert_eq!(object_size(ino, 0), Some(65536));
    assert_eq!(object_size(ino, 4), Some(300_000 - 4 * 65536));
    assert_eq!(object_size(ino, 5), None);
    assert_eq!(
        errno(xattr::set(
            m.path("small-objects/f"),
            "ceph.file.layout.object_size",
            b"131072"
        )),
        libc::ENOTEMPTY
    );
    fs::write(m.path("small-objects/empty"), b"").unwrap();
    xattr::set(
        m.path("small-objects/empty"),
        "ceph.file.layout.object_size",
        b"131072",
    )
    .unwrap();
    let data = payload(12, 200_000);
    fs::write(m.path("small-objects/empty"), &data).unwrap();
    assert_eq!(fs::read(m.path("small-objects/empty")).unwrap(), data);
    let ino = fs::metadata(m.path("small-objects/empty")).unwrap().ino();
    assert_eq!(object_size(ino, 1), Some(200_000 - 131_072));
    assert_eq!(
        errno(xattr::set(
            m.path("small-objects"),
            "ceph.dir.layout.object_size",
            b"1000"
        )),
        libc::EINVAL
    );
    assert_eq!(
        errno(xattr::set(
            m.path("small-objects"),
            "ceph.dir.layout.pool",
            b"elsewhere"
        )),
        libc::EINVAL
    );
    assert_eq!(
        xattr::get(m.path("small-objects"), "ceph.dir.entries").unwrap(),
        Some(b"2".to_vec())
    );
}

fn two_mounts(a: &Mount, b: &Mount) {
    // Close-to-open: what one client wrote and closed, the other opens and reads.
    fs::write(a.path("shared"), b"from a").unwrap();
    assert_eq!(fs::read(b.path("shared")).unwrap(), b"from a");
    let mut f = OpenOptions::new()
        .append(true)
        .open(b.path("shared"))
        .unwrap();
    f.write_all(b", then b").unwrap();
    drop(f);
    assert_eq!(fs::read(a.path("shared")).unwrap(), b"from a, then b");
    fs::remove_file(a.path("shared")).unwrap();
    assert!(!b.path("shared").exists());

    // Racing on one directory: distinct names all land; each contested name is created by
    // exactly one of them.
    fs::create_dir(a.path("race")).unwrap();
    let won = |m: &Mount, tag: &str| -> Vec<String> {
        let mut mine = Vec::new();
        for i in 0..150 {
            File::create(m.path(&format!("race/{tag}-{i}"))).unwrap();
            let contested = OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(m.path(&format!("race/both-{i}")));
            match contested {
                Ok(mut f) => {
                    f.write_all(tag.as_bytes()).unwrap();
                    mine.push(format!("both-{i}"));
                }
                Err(e) => assert_eq!(e.kind(), ErrorKind::AlreadyExists),
            }
        }
        mine
    };
    let (wa, wb) = std::thread::scope(|s| {
        let ha = s.spawn(|| won(a, "a"));
        let hb = s.spawn(|| won(b, "b"));
        (ha.join().unwrap(), hb.join().unwrap())
    });
    assert_eq!(wa.len() + wb.len(), 150, "each contested name created once");
    let listed = fs::read_dir(b.path("race")).unwrap().count();
    assert_eq!(listed, 450);
    for name in &wa {
        assert_eq!(fs::read(b.path(&format!("race/{name}"))).unwrap(), b"a");
    }
}

/// The MDS's log lines saying it recalled a directory lease.
fn recalls_logged(cluster: &Cluster) -> usize {
    fs::read_to_string(cluster.dir.join("mds.log"))
        .unwrap_or_default()
        .matches("a directory lease recalled")
        .count()
}

/// A mount that creates names in a directory holds a lease on it and answers lookups of
/// missing names there itself; another mount's new name there recalls the lease first, so the
/// first mount sees it at once.
fn leased_directory(a: &Mount, b: &Mount, cluster: &Cluster) {
    fs::create_dir(a.path("leased")).unwrap();
    for i in 0..50 {
        File::create(a.path(&format!("leased/a-{i}"))).unwrap();
    }
    assert!(!a.path("leased/from-b").exists());
    let before = recalls_logged(cluster);
    fs::write(b.path("leased/from-b"), b"b").unwrap();
    assert_eq!(
        fs::read(a.path("leased/from-b")).unwrap(),
        b"b",
        "the leasing mount sees the other's new name at once"
    );
    assert!(
        recalls_logged(cluster) > before,
        "the first mount's lease was recalled"
    );
    // Renamed in by the other mount: seen at once too.
    fs::write(b.path("outside"), b"moved").unwrap();
    for i in 50..60 {
        File::create(a.path(&format!("leased/a-{i}"))).unwrap();
    }
    fs::rename(b.path("outside"), b.path("leased/moved-in")).unwrap();
    assert_eq!(fs::read(a.path("leased/moved-in")).unwrap(), b"moved");
    let names = fs::read_dir(a.path("leased")).unwrap().count();
    assert_eq!(names, 62);
    leased_attributes(a, b, cluster);
}

/// A directory's attributes and its subdirectories' names, answered by the mount that leases
/// them, follow its own changes and every other mount's at once.
fn leased_attributes(a: &Mount, b: &Mount, cluster: &Cluster) {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let same = |what: &str| {
        let (ma, mb) = (
            fs::metadata(a.path("attrs")).unwrap(),
            fs::metadata(b.path("attrs")).unwrap(),
        );
        assert_eq!(
            (
                ma.mode(),
                ma.nlink(),
                ma.mtime(),
                ma.mtime_nsec(),
                ma.ctime_nsec()
            ),
            (
                mb.mode(),
                mb.nlink(),
                mb.mtime(),
                mb.mtime_nsec(),
                mb.ctime_nsec()
            ),
            "both mounts see the directory alike after {what}"
        );
    };
    fs::create_dir_all(a.path("attrs/sub")).unwrap();
    for i in 0..4 {
        // Walked through again and again: both directories get leased by the first mount.
        fs::metadata(a.path("attrs/sub")).unwrap();
        File::create(a.path(&format!("attrs/sub/f-{i}"))).unwrap();
        File::create(a.path(&format!("attrs/a-{i}"))).unwrap();
        std::thread::sleep(Duration::from_millis(100));
    }
    same("its own creates");
    fs::create_dir(a.path("attrs/sub2")).unwrap();
    same("its own mkdir");
    fs::remove_dir(a.path("attrs/sub2")).unwrap();
    same("its own rmdir");
    fs::remove_file(a.path("attrs/a-1")).unwrap();
    same("its own unlink");
    fs::rename(a.path("attrs/a-2"), a.path("attrs/a-3")).unwrap();
    same("its own rename");
    assert!(!a.path("attrs/a-2").exists());
    answered_by_the_kernel(a);
    for _ in 0..3 {
        // Walked again: leased again if its lease ran out meanwhile.
        fs::metadata(a.path("attrs/sub")).unwrap();
        std::thread::sleep(Duration::from_millis(50));
    }
    let before = recalls_logged(cluster);
    fs::set_permissions(b.path("attrs/sub"), fs::Permissions::from_mode(0o700)).unwrap();
    let mode = fs::metadata(a.path("attrs/sub"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o700, "the other mount's chmod seen at once");
    assert!(
        recalls_logged(cluster) > before,
        "the chmod recalled the first mount's lease on the directory"
    );
    // The chmod's path walk recalled the lease on `attrs` too (held for creates, it is
    // recalled by other mounts' lookups there): walked again once it may be leased again.
    std::thread::sleep(cairn_fs::dirlease::AFTER_RECALL + Duration::from_millis(200));
    for _ in 0..3 {
        fs::metadata(a.path("attrs/a-0")).unwrap();
        std::thread::sleep(Duration::from_millis(50));
    }
    let before = recalls_logged(cluster);
    fs::remove_file(b.path("attrs/a-0")).unwrap();
    assert!(
        !a.path("attrs/a-0").exists(),
        "the other mount's unlink seen at once"
    );
    assert!(
        recalls_logged(cluster) > before,
        "the unlink recalled the first mount's lease on its directory"
    );
    same("the other mount's unlink");
    fs::rename(b.path("attrs/sub"), b.path("attrs/moved-sub")).unwrap();
    assert!(
        !a.path("attrs/sub").exists(),
        "the other mount's rename seen at once"
    );
    assert!(a.path("attrs/moved-sub/f-0").exists());
    same("the other mount's rename");
    fs::set_permissions(b.path("attrs"), fs::Permissions::from_mode(0o750)).unwrap();
    same("the other mount's chmod");
    leased_file_attributes(a, b, cluster);
}

/// A file's attributes, answered by the mount that leases a directory naming it, follow every
/// other mount's change to them at once (the MDS recalls the lease first).
fn leased_file_attributes(a: &Mount, b: &Mount, cluster: &Cluster) {
    use cairn_fs::dirlease;
    let seen = |m: &Mount| {
        let md = fs::metadata(m.path("attrs/a-3")).unwrap();
        (
            md.mode(),
            md.len(),
            md.nlink(),
            md.mtime_nsec(),
            md.ctime_nsec(),
        )
    };
    // The directory was recalled just now: leased to nobody for a while, then again to the
    // mount that walks it.
    std::thread::sleep(dirlease::AFTER_RECALL + Duration::from_millis(200));
    for _ in 0..4 {
        seen(a);
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(seen(a), seen(b));
    let changes: [(&str, &dyn Fn()); 3] = [
        ("chmod", &|| {
            fs::set_permissions(b.path("attrs/a-3"), fs::Permissions::from_mode(0o600)).unwrap()
        }),
        ("write and close", &|| {
            let mut f = OpenOptions::new()
                .append(true)
                .open(b.path("attrs/a-3"))
                .unwrap();
            f.write_all(b"grown by the other mount").unwrap();
        }),
        ("hard link in another directory", &|| {
            fs::hard_link(b.path("attrs/a-3"), b.path("attrs/moved-sub/h")).unwrap()
        }),
    ];
    for (what, change) in changes {
        seen(a);
        let before = recalls_logged(cluster);
        change();
        assert_eq!(seen(a), seen(b), "the other mount's {what} seen at once");
        assert!(
            recalls_logged(cluster) > before,
            "the other mount's {what} recalled the lease covering the file"
        );
        std::thread::sleep(dirlease::AFTER_RECALL + Duration::from_millis(200));
        for _ in 0..3 {
            seen(a);
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    assert_eq!(seen(a).2, 2, "two names");
}

/// A mount creates files in a directory it leases for creates by itself, numbering them from
/// the inode numbers the MDS delegated to it; another mount's read of the directory recalls
/// that lease first, and so finds every one of them, whole and with the same number.
fn early_creates(a: &Mount, b: &Mount, cluster: &Cluster) {
    use cairn_fs::namespace::slots::FIRST_SLOT_INO;
    let ino = |m: &Mount, name: &str| fs::metadata(m.path(name)).unwrap().ino();
    fs::create_dir(a.path("by-itself")).unwrap();
    let mut own = 0;
    for i in 0..200 {
        let mut f = File::create(a.path(&format!("by-itself/f-{i}"))).unwrap();
        f.write_all(&payload(i, 3000)).unwrap();
        own += usize::from(f.metadata().unwrap().ino() >= FIRST_SLOT_INO);
    }
    assert!(own >= 150, "{own} of 200 files created by the mount itself");
    let before = recalls_logged(cluster);
    let listed = fs::read_dir(b.path("by-itself")).unwrap().count();
    assert_eq!(listed, 200, "the other mount lists every file at once");
    assert!(
        recalls_logged(cluster) > before,
        "the other mount's read recalled the lease"
    );
    for i in 0..200 {
        let name = format!("by-itself/f-{i}");
        assert_eq!(fs::read(b.path(&name)).unwrap(), payload(i, 3000), "{name}");
        assert_eq!(ino(a, &name), ino(b, &name), "{name}");
    }
    let exclusive = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(a.path("by-itself/f-3"));
    assert_eq!(errno(exclusive), libc::EEXIST);
    // Created and removed at once, by itself again once the lease is back.
    std::thread::sleep(cairn_fs::dirlease::AFTER_RECALL);
    for round in 0..20 {
        let name = format!("by-itself/brief-{round}");
        drop(File::create(a.path(&name)).unwrap());
        fs::remove_file(a.path(&name)).unwrap();
        assert!(!a.path(&name).exists());
    }
    assert_eq!(fs::read_dir(b.path("by-itself")).unwrap().count(), 200);
}

/// Lets a stopped mount go on, however the check that stopped it ends.
struct Resume<'a>(&'a Mount);

impl Drop for Resume<'_> {
    fn drop(&mut self) {
        signal("-CONT", self.0.child.id());
    }
}

/// The root's attributes, and a name missing there, are answered by the kernel alone while the
/// mount's lease on the root lasts: still with the mount stopped (a request to it would hang
/// until killed).
fn answered_by_the_kernel(m: &Mount) {
    let (root, missing) = (m.path(""), m.path("never-made"));
    let stat = |path: &Path| {
        Command::new("timeout")
            .args(["-s", "KILL", "2", "stat"])
            .arg(path)
            .output()
            .unwrap()
    };
    let answered = (0..5).any(|_| {
        // Walked twice: the lease is renewed, so the kernel caches them for seconds.
        for _ in 0..2 {
            fs::metadata(&root).unwrap();
            assert!(!missing.exists());
            std::thread::sleep(Duration::from_millis(50));
        }
        // Well past a TTL of zero, which the kernel takes to last to the end of its tick.
        std::thread::sleep(Duration::from_millis(100));
        signal("-STOP", m.child.id());
        let _resume = Resume(m);
        let found = stat(&root).status.success();
        let absent = stat(&missing);
        found
            && absent.status.code() == Some(1)
            && String::from_utf8_lossy(&absent.stderr).contains("No such file")
    });
    assert!(
        answered,
        "the kernel asked the stopped mount for what a lease covers"
    );
}

fn tree_copy(m: &Mount) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fs");
    let status = Command::new("cp")
        .arg("-a")
        .arg(&src)
        .arg(m.path("tree"))
        .status()
        .unwrap();
    assert!(status.success(), "cp -a");
    let out = Command::new("diff")
        .arg("-r")
        .arg(&src)
        .arg(m.path("tree"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "diff -r: {}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// Creates files `DIR/f-N` with N's payload until `stop`, recording each one whose write
/// and close returned.
fn workload(m: &Mount, dir: &str, stop: &AtomicBool, done: &Mutex<Vec<usize>>) {
    fs::create_dir_all(m.path(dir)).unwrap();
    let mut i = 0;
    while !stop.load(Ordering::Relaxed) {
        let path = m.path(&format!("{dir}/f-{i}"));
        let mut f = File::create(&path).unwrap();
        f.write_all(&payload(i, 1000 + i % 5000)).unwrap();
        f.sync_all().unwrap();
        drop(f);
        done.lock().unwrap().push(i);
        i += 1;
    }
}

fn verify(m: &Mount, dir: &str, done: &[usize]) {
    assert!(!done.is_empty(), "the workload made progress");
    for &i in done {
        let got = fs::read(m.path(&format!("{dir}/f-{i}"))).unwrap();
        assert_eq!(got, payload(i, 1000 + i % 5000), "{dir}/f-{i}");
    }
}

/// Creates files `DIR/m-N` and renames every odd one to `DIR/r-N` until `stop`, without
/// syncing: what the MDS answered early. Records each N whose operations returned.
fn metadata_workload(m: &Mount, dir: &str, stop: &AtomicBool, done: &Mutex<Vec<usize>>) {
    fs::create_dir_all(m.path(dir)).unwrap();
    let mut i = 0;
    while !stop.load(Ordering::Relaxed) {
        let made = m.path(&format!("{dir}/m-{i}"));
        drop(File::create(&made).unwrap());
        if i % 2 == 1 {
            fs::rename(&made, m.path(&format!("{dir}/r-{i}"))).unwrap();
        }
        done.lock().unwrap().push(i);
        i += 1;
    }
}

/// Every change the metadata workload saw acknowledged is there, and nothing else.
fn verify_metadata(m: &Mount, dir: &str, done: &[usize]) {
    assert!(!done.is_empty(), "the metadata workload made progress");
    let names: std::collections::BTreeSet<String> = fs::read_dir(m.path(dir))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    for &i in done {
        let want = match i % 2 {
            1 => format!("r-{i}"),
            _ => format!("m-{i}"),
        };
        assert!(
            names.contains(&want),
            "{dir}/{want} was acknowledged and is missing"
        );
    }
    let unacknowledged = names.len().saturating_sub(done.len());
    assert!(
        unacknowledged <= 1,
        "{dir}: {unacknowledged} names no call acknowledged"
    );
}

/// Runs the workload in `dir`, and the metadata workload in `DIR-meta`, while `crash` runs
/// once they have made progress; checks the metadata workload's changes.
fn under_workload(m: &Mount, dir: &str, crash: impl FnOnce()) -> Vec<usize> {
    let stop = AtomicBool::new(false);
    let done = Mutex::new(Vec::new());
    let meta_dir = format!("{dir}-meta");
    let meta_done = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        let w = s.spawn(|| workload(m, dir, &stop, &done));
        let mw = s.spawn(|| metadata_workload(m, &meta_dir, &stop, &meta_done));
        let deadline = Instant::now() + Duration::from_secs(60);
        while done.lock().unwrap().len() < 20 {
            assert!(Instant::now() < deadline, "no progress");
            std::thread::sleep(Duration::from_millis(20));
        }
        crash();
        let after = done.lock().unwrap().len();
        let deadline = Instant::now() + Duration::from_secs(120);
        while done.lock().unwrap().len() < after + 20 {
            assert!(Instant::now() < deadline, "no progress after the crash");
            std::thread::sleep(Duration::from_millis(20));
        }
        stop.store(true, Ordering::Relaxed);
        w.join().unwrap();
        mw.join().unwrap();
    });
    verify_metadata(m, &meta_dir, &meta_done.into_inner().unwrap());
    done.into_inner().unwrap()
}

#[test]
fn a_mounted_file_system_behaves_as_posix_says_and_keeps_what_it_acknowledged() {
    if !fuse_available() {
        eprintln!("SKIPPED: /dev/fuse cannot be opened here (no FUSE)");
        return;
    }
    let mon = format!("127.0.0.1:{}", free_port());
    let mds = format!("127.0.0.1:{}", free_port());
    let cluster = Cluster::new("fs");
    let d = cluster.arg();
    let (ok, out) = common::cairn(&[
        "up",
        "--no-s3",
        "--dir",
        &d,
        "--mon",
        &mon,
        "--mds",
        &mds,
        "--device-mib",
        "1024",
        "--pg-num",
        "16",
        "--heartbeat-grace-s",
        "6",
    ]);
    assert!(ok, "{out}");
    assert!(out.contains("cairn fs mount cairnfs"), "{out}");
    let (ok, out) = cluster.cairn(&["fs", "new", "--mon", &mon, "cairnfs"]);
    assert!(ok && out.contains("exists"), "{out}");
    let (ok, out) = cluster.cairn(&["fs", "new", "--mon", &mon, "bad/name"]);
    assert!(!ok && out.contains("letters, digits"), "{out}");

    let a = Mount::new(&cluster, &mon, "mnt-a");
    readahead_window(&a, &cluster, "mnt-a");
    posix_basics(&a);
    gathered_writes(&a);
    layouts(&a, &cluster, &mon);
    let b = Mount::new(&cluster, &mon, "mnt-b");
    two_mounts(&a, &b);
    leased_directory(&a, &b, &cluster);
    early_creates(&a, &b, &cluster);
    open_unlinked(&a, &b, &cluster, &mon);
    locks_across_mounts(&a, &b);
    deadlock_across_mounts(&a, &b);
    tree_copy(&a);

    // kill -9 of the metadata server mid-workload; a new one resumes from the journal.
    let mds_pid = daemon_pid(&cluster.dir, "mds");
    let keyring = cluster
        .dir
        .join("mds.cairnfs.keyring")
        .display()
        .to_string();
    let mds_on = |listen: &str| -> Vec<String> {
        let args = ["--keyring", &keyring, "mds", "--mon", &mon];
        let args = args.into_iter().chain([
            "--fs",
            "cairnfs",
            "--listen",
            listen,
            "--session-timeout",
            "15",
        ]);
        args.map(String::from).collect()
    };
    let replacement_args = mds_on(&mds);
    let replacement_args: Vec<&str> = replacement_args.iter().map(String::as_str).collect();
    let replacement = cluster.start_on_cue("mds-replacement.log", &replacement_args);
    // A file held open on one mount and unlinked on the other outlives the MDS's restart.
    let kept = payload(22, 150_000);
    fs::write(a.path("kept-open"), &kept).unwrap();
    let mut kept_open = File::open(a.path("kept-open")).unwrap();
    let kept_ino = kept_open.metadata().unwrap().ino();
    fs::remove_file(b.path("kept-open")).unwrap();
    let restarted = Mutex::new(None);
    let done = under_workload(&a, "mds-crash", || {
        signal("-9", mds_pid);
        wait_exited(mds_pid);
        *restarted.lock().unwrap() = Some(replacement.go());
    });
    verify(&a, "mds-crash", &done);
    verify(&b, "mds-crash", &done);

    // A standby on another address takes over by itself from an active one that stalls
    // (stopped, not killed), fencing it first; the stalled one, woken, finds itself replaced
    // and stops.
    let standby_addr = format!("127.0.0.1:{}", free_port());
    let standby_args = mds_on(&standby_addr);
    let standby_args: Vec<&str> = standby_args.iter().map(String::as_str).collect();
    let mut standby = cluster.start("mds-standby.log", &standby_args);
    let standby_log = cluster.dir.join("mds-standby.log");
    let said = |what: &str| {
        fs::read_to_string(&standby_log)
            .unwrap_or_default()
            .contains(what)
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while !said("standing by") {
        assert!(Instant::now() < deadline, "the second MDS did not stand by");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(!said("serving on"), "two active metadata servers");
    let active_pid = restarted.lock().unwrap().as_ref().unwrap().id();
    let mut restarted_at = Instant::now();
    let done = under_workload(&a, "standby", || {
        signal("-STOP", active_pid);
        restarted_at = Instant::now();
    });
    assert!(said(&format!("serving on {standby_addr}")));
    signal("-CONT", active_pid);
    wait_exited(active_pid);
    let stalled_log = fs::read_to_string(cluster.dir.join("mds-replacement.log")).unwrap();
    assert!(
        stalled_log.contains("no longer the active metadata server")
            || stalled_log.contains("blocklisted"),
        "the stalled MDS stops because it was replaced: {stalled_log}"
    );
    // Both take-overs fenced the MDS they replaced (the killed one and the stalled one).
    assert!(blocklisted(&cluster, &mon) >= 2);
    let (ok, status) = cluster.cairn(&["fs", "status", "--mon", &mon, "cairnfs"]);
    assert!(ok, "{status}");
    assert!(
        status.contains(&format!("active metadata server: {standby_addr}"))
            && status.contains("inodes: "),
        "{status}"
    );
    verify(&a, "standby", &done);
    verify(&b, "standby", &done);

    // Mutations answered early outlive their MDS: with client writes held (`pausewr`) the MDS
    // can journal nothing, so the creates that return meanwhile were answered from its memory;
    // it is then killed, and only the mount's replay to the next MDS can bring them back.
    fs::create_dir(a.path("early")).unwrap();
    let stop_creating = Arc::new(AtomicBool::new(false));
    let creator = {
        let (dir, stop) = (a.path("early"), stop_creating.clone());
        std::thread::spawn(move || {
            let (mut made, mut inos) = (Vec::new(), Vec::new());
            while !stop.load(Ordering::Relaxed) && made.len() < 400 {
                let name = format!("e-{}", made.len());
                let f = File::create(dir.join(&name)).unwrap();
                inos.push(f.metadata().unwrap().ino());
                drop(f);
                made.push(name);
                std::thread::sleep(Duration::from_millis(20));
            }
            (made, inos)
        })
    };
    std::thread::sleep(Duration::from_millis(500));
    let (ok, out) = cluster.cairn(&["osd", "--mon", &mon, "set", "pausewr"]);
    assert!(ok, "{out}");
    std::thread::sleep(Duration::from_millis(1500));
    stop_creating.store(true, Ordering::Relaxed);
    let (mut made, inos) = creator.join().unwrap();
    signal("-9", standby.id());
    wait_exited(standby.id());
    let (ok, out) = cluster.cairn(&["osd", "--mon", &mon, "unset", "pausewr"]);
    assert!(ok, "{out}");
    let third_addr = format!("127.0.0.1:{}", free_port());
    let third_args = mds_on(&third_addr);
    let third_args: Vec<&str> = third_args.iter().map(String::as_str).collect();
    let mut third = cluster.start("mds-third.log", &third_args);
    let names = |m: &Mount| -> Vec<String> {
        let mut n: Vec<String> = fs::read_dir(m.path("early"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        n.sort();
        n
    };
    // A replayed create gets the inode number its early answer gave.
    for (name, ino) in made.iter().zip(&inos) {
        let now = fs::metadata(b.path(&format!("early/{name}")))
            .unwrap()
            .ino();
        assert_eq!(
            now, *ino,
            "early/{name} kept its inode number through the replay"
        );
    }
    made.sort();
    assert_eq!(
        names(&b),
        made,
        "what was answered early is there after its MDS died"
    );
    assert_eq!(names(&a), made);
    // The mount's replay made them again: the new MDS did not find them in the journal.
    let third_log = fs::read_to_string(cluster.dir.join("mds-third.log")).unwrap();
    let rerun = third_log
        .split("rerun=")
        .skip(1)
        .filter_map(|t| t.split_whitespace().next()?.parse::<u64>().ok())
        .max()
        .unwrap_or_else(|| panic!("no client answered early reconnected: {third_log}"));
    assert!(
        rerun > 0,
        "no create was run again from a replay: {third_log}"
    );

    // kill -9 of an OSD mid-workload: writes go on with the other copies.
    let osd_pid = daemon_pid(&cluster.dir, "osd1");
    let done = under_workload(&a, "osd-crash", || {
        signal("-9", osd_pid);
        wait_exited(osd_pid);
    });
    verify(&a, "osd-crash", &done);

    // kill -9 of a mounted client after fsync: a new mount finds the synced file whole; what
    // it held open and another mount unlinked goes a lease later.
    let mut f = File::create(b.path("before-client-crash")).unwrap();
    f.write_all(&payload(7, 123_456)).unwrap();
    f.sync_all().unwrap();
    fs::write(b.path("held-by-the-dead"), payload(23, 10_000)).unwrap();
    let held_by_the_dead = File::open(b.path("held-by-the-dead")).unwrap();
    let dead_ino = held_by_the_dead.metadata().unwrap().ino();
    fs::remove_file(a.path("held-by-the-dead")).unwrap();
    fs::write(a.path("locked-by-the-dead"), b"x").unwrap();
    let dead_lock = LockHolder::start(
        &b.path("locked-by-the-dead"),
        "fcntl.flock(f, fcntl.LOCK_EX)",
    );
    b.kill();
    drop(held_by_the_dead);
    let waited = python_says(
        &a.path("locked-by-the-dead"),
        "t = time.time()\nfcntl.flock(f, fcntl.LOCK_EX)\nprint(time.time() - t)",
    );
    let waited: f64 = waited.parse().unwrap();
    assert!(
        waited < 60.0,
        "a dead client's lock goes with its 15 s lease, not {waited} s later"
    );
    let mut dead_lock = dead_lock;
    let _ = dead_lock.0.kill();
    let _ = dead_lock.0.wait();
    let c = Mount::new(&cluster, &mon, "mnt-c");
    let mut back = Vec::new();
    File::open(c.path("before-client-crash"))
        .unwrap()
        .read_to_end(&mut back)
        .unwrap();
    assert_eq!(back, payload(7, 123_456));
    drop(c);
    cut_off_client(&cluster, &mon, &a);
    let past_the_lease = restarted_at + Duration::from_secs(40);
    std::thread::sleep(past_the_lease.saturating_duration_since(Instant::now()));
    let mut back = Vec::new();
    kept_open.read_to_end(&mut back).unwrap();
    assert_eq!(
        back, kept,
        "held open across two new MDSs and their orphan sweeps"
    );
    drop(kept_open);
    wait_purged(&cluster, &mon, kept_ino, Duration::from_secs(30));
    wait_purged(&cluster, &mon, dead_ino, Duration::from_secs(90));
    drop(a);
    if let Some(mut child) = restarted.into_inner().unwrap() {
        let _ = child.kill();
        let _ = child.wait();
    }
    let _ = standby.kill();
    let _ = third.kill();
    let _ = standby.wait();
    let _ = third.wait();
}

/// Writes synced files of 4 MiB, then 64 KiB, then 4 KiB, each size until the cluster
/// refuses one (a write is refused before it would pass an OSD's full ratio, so smaller ones
/// still fit); the files written whole with their sizes, and the last refusal.
fn fill(m: &Mount) -> (Vec<(String, usize)>, std::io::Error) {
    let mut written = Vec::new();
    let mut refused = None;
    for size in [4 << 20, 64 << 10, 4 << 10] {
        for _ in 0..64 {
            let name = format!("fill-{}", written.len());
            let wrote = File::create(m.path(&name)).and_then(|mut f| {
                f.write_all(&payload(written.len(), size))?;
                f.sync_all()
            });
            match wrote {
                Ok(()) => written.push((name, size)),
                Err(e) => {
                    refused = Some(e);
                    break;
                }
            }
        }
    }
    (
        written,
        refused.expect("files of 4 KiB never filled devices of 128 MiB"),
    )
}

/// Calls `settled` every 200 ms until it says so, for at most `limit`; whether it did.
fn eventually(limit: Duration, mut settled: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if settled() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    false
}

/// Whether `r` is an ENOSPC refusal (false for success; any other error fails the test).
fn no_space<T>(r: std::io::Result<T>) -> bool {
    match r {
        Ok(_) => false,
        Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => true,
        Err(e) => panic!("expected ENOSPC or success, got {e}"),
    }
}

/// A full cluster leaves the file system serving: a file write fails with ENOSPC (not EIO),
/// creates, mkdirs and setxattrs are refused with ENOSPC while the map flags an OSD full,
/// everything written before reads back whole, an S3 PUT gets 507 InsufficientStorage,
/// deletes go through and free the space, after which creates work again; the metadata
/// server never stops.
#[test]
fn a_full_cluster_refuses_growth_with_enospc_and_takes_deletes() {
    if !fuse_available() {
        eprintln!("SKIPPED: /dev/fuse cannot be opened here (no FUSE)");
        return;
    }
    let mon = format!("127.0.0.1:{}", free_port());
    let mds = format!("127.0.0.1:{}", free_port());
    let s3 = format!("127.0.0.1:{}", free_port());
    let cluster = Cluster::new("fs-full");
    let d = cluster.arg();
    let (ok, out) = common::cairn(&[
        "up",
        "--s3",
        &s3,
        "--dir",
        &d,
        "--mon",
        &mon,
        "--mds",
        &mds,
        "--device-mib",
        "128",
        "--pg-num",
        "8",
    ]);
    assert!(ok, "{out}");
    let key = |name: &str| {
        out.lines()
            .find_map(|l| l.trim().strip_prefix(name))
            .unwrap_or_else(|| panic!("no {name} in {out}"))
            .to_string()
    };
    let (access, secret) = (
        key("export AWS_ACCESS_KEY_ID="),
        key("export AWS_SECRET_ACCESS_KEY="),
    );
    let aws = |args: &[&str]| {
        Command::new("aws")
            .args(["--endpoint-url", &format!("http://{s3}")])
            .args(args)
            .env("AWS_ACCESS_KEY_ID", &access)
            .env("AWS_SECRET_ACCESS_KEY", &secret)
            .env("AWS_DEFAULT_REGION", "us-east-1")
            .env("AWS_CONFIG_FILE", "/dev/null")
            .env("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
            .env_remove("AWS_PROFILE")
            .output()
            .unwrap()
    };
    let made = aws(&["s3", "mb", "s3://while-full"]);
    assert!(made.status.success(), "{made:?}");
    let mds_pid = daemon_pid(&cluster.dir, "mds");
    let m = Mount::new(&cluster, &mon, "mnt");
    fs::create_dir(m.path("kept")).unwrap();
    let (written, refused) = fill(&m);
    assert_eq!(refused.raw_os_error(), Some(libc::ENOSPC), "{refused}");
    assert!(written.len() >= 10, "only {} files fitted", written.len());

    // The metadata server's own (forced) writes take the last room past the full ratio; once
    // the map flags an OSD full, the namespace stops growing.
    let refused = || {
        let full = no_space(File::create(m.path("kept/while-full")));
        if !full {
            fs::remove_file(m.path("kept/while-full")).unwrap();
        }
        full
    };
    assert!(
        eventually(Duration::from_secs(30), refused),
        "creates still went through 30 s after a write was refused"
    );
    assert_eq!(
        errno(fs::create_dir(m.path("dir-while-full"))),
        libc::ENOSPC
    );
    assert_eq!(
        xattr::set(m.path("kept"), "user.full", b"yes")
            .expect_err("a setxattr while full")
            .raw_os_error(),
        Some(libc::ENOSPC)
    );
    assert!(
        m.path("kept").is_dir() && fs::read_dir(m.path("kept")).unwrap().count() == 0,
        "a refused create leaves nothing behind"
    );
    for (i, (name, size)) in written.iter().enumerate() {
        assert!(
            fs::read(m.path(name)).unwrap() == payload(i, *size),
            "{name} reads back whole while the cluster is full"
        );
    }
    // The S3 gateway answers a PUT on the full cluster with 507 InsufficientStorage, which
    // clients report at once instead of retrying as they retry a 500.
    let big = cluster.dir.join("big.bin");
    fs::write(&big, payload(99, 4 << 20)).unwrap();
    let put = aws(&[
        "s3",
        "cp",
        &big.display().to_string(),
        "s3://while-full/big",
    ]);
    let said = String::from_utf8_lossy(&put.stderr);
    assert!(
        !put.status.success() && said.contains("InsufficientStorage"),
        "{said}"
    );

    // Deletes go through, their data is purged, and the space comes back.
    let (freed, kept) = written.split_at(written.len() / 2);
    for (name, _) in freed {
        fs::remove_file(m.path(name)).unwrap();
    }
    let room_again = || !no_space(fs::write(m.path("kept/after-deletes"), b"room again"));
    assert!(
        eventually(Duration::from_secs(120), room_again),
        "no room 120 s after half the files were deleted"
    );
    assert_eq!(
        fs::read(m.path("kept/after-deletes")).unwrap(),
        b"room again"
    );
    let (name, size) = &kept[0];
    assert_eq!(fs::read(m.path(name)).unwrap(), payload(freed.len(), *size));
    assert!(
        !common::has_exited(mds_pid),
        "the metadata server served throughout"
    );
}

/// A client cut off (stopped, not killed) while it holds a lock and a file open for writing
/// is evicted a lease later: fenced out of the OSDs first, then its lock passes to `a`, which
/// writes under it. Woken, the cut-off client's write through the file it had open is
/// refused, what `a` wrote stands, and the MDS refuses its requests (ESHUTDOWN).
fn cut_off_client(cluster: &Cluster, mon: &str, a: &Mount) {
    let fenced_before = blocklisted(cluster, mon);
    let p = Mount::new(cluster, mon, "mnt-p");
    let first = payload(31, 8192);
    fs::write(p.path("cut-off"), &first).unwrap();
    let stale_code = [
        "fcntl.flock(f, fcntl.LOCK_EX)",
        "print('locked', flush=True)",
        "sys.stdin.readline()",
        "try:",
        " f.seek(0)",
        " f.write('stale' * 1000)",
        " f.flush()",
        " os.fsync(f.fileno())",
        " print('wrote', flush=True)",
        "except OSError as e:",
        " print('refused', e.errno, flush=True)",
        "sys.stdin.read()",
    ]
    .join("\n");
    let mut stale = python_on(&p.path("cut-off"), &stale_code)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stale_out = std::io::BufReader::new(stale.stdout.take().unwrap());
    assert_eq!(read_line(&mut stale_out), "locked");
    signal("-STOP", p.child.id());
    let waited = python_says(
        &a.path("cut-off"),
        "t = time.time()\nfcntl.flock(f, fcntl.LOCK_EX)\nw = time.time() - t\nf.seek(0)\n\
         f.write('fresh' * 1000)\nf.flush()\nos.fsync(f.fileno())\nprint(w)",
    );
    let waited: f64 = waited.parse().unwrap();
    assert!(
        waited < 60.0,
        "a cut-off client's lock passes on a 15 s lease (and its fence) later, not {waited} s"
    );
    assert!(
        blocklisted(cluster, mon) > fenced_before,
        "the cut-off client was fenced before its lock passed on"
    );
    signal("-CONT", p.child.id());
    writeln!(stale.stdin.as_mut().unwrap()).unwrap();
    let said = read_line(&mut stale_out);
    assert!(
        said.starts_with("refused"),
        "a fenced client's write through a file it had open must fail, not: {said}"
    );
    let mut want = b"fresh".repeat(1000);
    want.extend_from_slice(&first[want.len()..]);
    assert_eq!(
        fs::read(a.path("cut-off")).unwrap(),
        want,
        "what was written under the passed-on lock stands"
    );
    assert_eq!(
        errno(fs::write(p.path("after-eviction"), b"x")),
        libc::ESHUTDOWN,
        "the MDS refuses an evicted client"
    );
    let _ = stale.kill();
    let _ = stale.wait();
    drop(p);
}

/// How many client instances the cluster's blocklist fences.
fn blocklisted(cluster: &Cluster, mon: &str) -> usize {
    let (ok, fences) = cluster.cairn(&["osd", "--mon", mon, "blocklist", "ls"]);
    assert!(ok, "{fences}");
    fences
        .lines()
        .find_map(|l| l.strip_prefix("listed ")?.split(' ').next()?.parse().ok())
        .unwrap_or(0)
}
