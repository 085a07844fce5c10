//! Block images through the CLI and their NBD export, on a `cairn up` cluster: `rbd create`,
//! `ls`, `info`, `resize`, `rm` (and their refusals), then `rbd nbd` serving the image to
//! libnbd's `nbdinfo` and `nbdcopy` (a 24 MiB file in and out, compared by checksum) and to
//! this test's own NBD client, which checks the protocol's corners: writes across object
//! boundaries, many requests in flight, trim and write-zeroes reading back as zeros, reads and
//! writes past the end refused with EINVAL and ENOSPC, an unknown export refused in the
//! handshake, and a connection that breaks the protocol closed without hurting the others.
//! Then the exclusive lock the server holds while a connection is open (`rbd lock ls`, a
//! resize refused; a snapshot taken and removed by the server that holds the lock while the
//! image is mapped), a snapshot exported read-only beside the image it was taken of, a clone
//! of it read by `nbdcopy` to the same bytes, and the removals refused while snapshots and
//! clones exist, a rollback and a flatten. The same server on a unix socket serves QEMU's
//! `qemu-img` and nbdfuse.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

use common::{cairn_with_keyring, free_port, Cluster};

const MIB: u64 = 1 << 20;
const IMAGE_BYTES: u64 = 24 * MIB;

fn ok(keyring: &Path, args: &[&str]) -> String {
    let (ok, out) = cairn_with_keyring(Some(keyring), args);
    assert!(ok, "cairn {args:?}: {out}");
    out
}

fn refused(keyring: &Path, args: &[&str], why: &str) {
    let (ok, out) = cairn_with_keyring(Some(keyring), args);
    assert!(
        !ok && out.contains(why),
        "cairn {args:?} should fail with {why:?}: {out}"
    );
}

/// A tool of libnbd-bin or qemu-utils, which `.ci/run` installs.
fn tool(name: &str) -> std::process::Command {
    let found = std::process::Command::new("sh")
        .args(["-c", &format!("command -v {name}")])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        found,
        "{name} is missing: apt-get install libnbd-bin qemu-utils"
    );
    std::process::Command::new(name)
}

/// Bytes no two places of the image share (so a misplaced piece shows).
fn pattern(len: u64, seed: u64) -> Vec<u8> {
    (0..len)
        .map(|i| {
            let x = (i / 8)
                .wrapping_add(seed)
                .wrapping_mul(0x9e37_79b9_7f4a_7c15);
            (x >> ((i % 8) * 8)) as u8
        })
        .collect()
}

/// A minimal NBD client over TCP (fixed newstyle, GO, simple replies).
struct Nbd {
    s: TcpStream,
}

const REQUEST_MAGIC: u32 = 0x2560_9513;
const READ: u16 = 0;
const WRITE: u16 = 1;
const DISC: u16 = 2;
const FLUSH: u16 = 3;
const TRIM: u16 = 4;
const WRITE_ZEROES: u16 = 6;

impl Nbd {
    fn connect(addr: &str) -> TcpStream {
        let s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        s
    }

    /// Negotiates `export` with NBD_OPT_GO: the client, or the option's error reply type.
    fn open(addr: &str, export: &str) -> Result<(Nbd, u64), u32> {
        let mut s = Self::connect(addr);
        let mut hello = [0u8; 18];
        s.read_exact(&mut hello).unwrap();
        assert_eq!(&hello[..8], b"NBDMAGIC");
        assert_eq!(&hello[8..16], b"IHAVEOPT");
        s.write_all(&3u32.to_be_bytes()).unwrap();
        let mut data = (export.len() as u32).to_be_bytes().to_vec();
        data.extend_from_slice(export.as_bytes());
        data.extend_from_slice(&0u16.to_be_bytes());
        let mut opt = b"IHAVEOPT".to_vec();
        opt.extend_from_slice(&7u32.to_be_bytes());
        opt.extend_from_slice(&(data.len() as u32).to_be_bytes());
        opt.extend_from_slice(&data);
        s.write_all(&opt).unwrap();
        let mut size = 0;
        loop {
            let mut head = [0u8; 20];
            s.read_exact(&mut head).unwrap();
            let kind = u32::from_be_bytes(head[12..16].try_into().unwrap());
            let len = u32::from_be_bytes(head[16..20].try_into().unwrap()) as usize;
            let mut body = vec![0u8; len];
            s.read_exact(&mut body).unwrap();
            match kind {
                1 => return Ok((Nbd { s }, size)),
                3 if u16::from_be_bytes([body[0], body[1]]) == 0 => {
                    size = u64::from_be_bytes(body[2..10].try_into().unwrap());
                }
                3 => {}
                err => return Err(err),
            }
        }
    }

    fn send(&mut self, kind: u16, cookie: u64, offset: u64, len: u32, data: &[u8]) {
        let mut req = REQUEST_MAGIC.to_be_bytes().to_vec();
        req.extend_from_slice(&0u16.to_be_bytes());
        req.extend_from_slice(&kind.to_be_bytes());
        req.extend_from_slice(&cookie.to_be_bytes());
        req.extend_from_slice(&offset.to_be_bytes());
        req.extend_from_slice(&len.to_be_bytes());
        req.extend_from_slice(data);
        self.s.write_all(&req).unwrap();
    }

    /// The next reply: (cookie, error).
    fn reply(&mut self) -> (u64, u32) {
        let mut head = [0u8; 16];
        self.s.read_exact(&mut head).unwrap();
        assert_eq!(
            u32::from_be_bytes(head[..4].try_into().unwrap()),
            0x6744_6698
        );
        let error = u32::from_be_bytes(head[4..8].try_into().unwrap());
        (u64::from_be_bytes(head[8..16].try_into().unwrap()), error)
    }

    fn read(&mut self, offset: u64, len: u32) -> Result<Vec<u8>, u32> {
        self.send(READ, 1, offset, len, &[]);
        let (cookie, error) = self.reply();
        assert_eq!(cookie, 1);
        if error != 0 {
            return Err(error);
        }
        let mut data = vec![0u8; len as usize];
        self.s.read_exact(&mut data).unwrap();
        Ok(data)
    }

    fn command(&mut self, kind: u16, offset: u64, len: u32, data: &[u8]) -> u32 {
        self.send(kind, 2, offset, len, data);
        let (cookie, error) = self.reply();
        assert_eq!(cookie, 2);
        error
    }
}

/// A FUSE mount of nbdfuse, unmounted (lazily, so a failed test leaves no busy mount) and its
/// process ended when dropped.
struct FuseMount {
    dir: std::path::PathBuf,
    child: std::process::Child,
}

impl Drop for FuseMount {
    fn drop(&mut self) {
        let unmounted = std::process::Command::new("fusermount3")
            .arg("-uz")
            .arg(&self.dir)
            .status()
            .is_ok_and(|s| s.success());
        if !unmounted {
            let _ = std::process::Command::new("umount")
                .arg("-l")
                .arg(&self.dir)
                .status();
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `rbd nbd --socket`: the socket is its owner's alone and a second server on it is refused;
/// QEMU's `qemu-img` reads the export's size, writes a whole image and compares it (and
/// tells a different one apart); nbdfuse shows the image as a file, written and read back
/// through FUSE.
fn serves_qemu_img_and_nbdfuse_on_a_unix_socket(cluster: &mut Cluster, mon: &str, keyring: &Path) {
    use std::os::unix::fs::{FileExt, PermissionsExt};
    const SPARE_BYTES: u64 = 16 * MIB;
    let dir = cluster.dir.clone();
    let socket = dir.join("nbd.sock");
    let keyring_arg = keyring.display().to_string();
    let socket_arg = socket.display().to_string();
    let serve = [
        "--keyring",
        keyring_arg.as_str(),
        "rbd",
        "--mon",
        mon,
        "nbd",
        "data",
        "--socket",
        socket_arg.as_str(),
        "--lock-lease-ms",
        "2000",
    ];
    let server = cluster.start("nbd-unix.log", &serve);
    let server_pid = server.id();
    cluster.extra.push(server);
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::os::unix::net::UnixStream::connect(&socket).is_err() {
        assert!(
            Instant::now() < deadline,
            "the NBD server never listened on its socket"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let mode = std::fs::metadata(&socket).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the socket is its owner's alone");
    let (second, out) = common::cairn(&serve);
    assert!(!second && out.contains("listening on it"), "{out}");

    let uri = format!("nbd+unix:///spare?socket={socket_arg}");
    let info = tool("qemu-img")
        .args(["info", "--output=json", &uri])
        .output()
        .unwrap();
    let info = String::from_utf8_lossy(&info.stdout);
    assert!(info.contains("\"virtual-size\": 16777216"), "{info}");
    let mut content = pattern(SPARE_BYTES, 21);
    let local = dir.join("spare.img");
    std::fs::write(&local, &content).unwrap();
    let converted = tool("qemu-img")
        .args(["convert", "-n", "-f", "raw", "-O", "raw"])
        .arg(&local)
        .arg(&uri)
        .output()
        .unwrap();
    assert!(converted.status.success(), "{converted:?}");
    let compare = |file: &Path| {
        tool("qemu-img")
            .args(["compare", "-q", "-f", "raw", "-F", "raw"])
            .arg(file)
            .arg(&uri)
            .status()
            .unwrap()
            .code()
    };
    assert_eq!(compare(&local), Some(0), "qemu-img finds the image equal");
    let other = dir.join("other.img");
    std::fs::write(&other, pattern(SPARE_BYTES, 22)).unwrap();
    assert_eq!(compare(&other), Some(1), "and a different one different");

    // nbdfuse: the image as a file of a FUSE mount.
    let mnt = dir.join("fuse");
    std::fs::create_dir_all(&mnt).unwrap();
    let child = tool("nbdfuse")
        .arg(mnt.join("spare"))
        .arg(&uri)
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(dir.join("nbdfuse.log")).unwrap())
        .spawn()
        .unwrap();
    let mut mount = FuseMount {
        dir: mnt.clone(),
        child,
    };
    let file = mnt.join("spare");
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::fs::metadata(&file).map(|m| m.len()).ok() != Some(SPARE_BYTES) {
        let log = || std::fs::read_to_string(dir.join("nbdfuse.log")).unwrap_or_default();
        let exited = mount.child.try_wait().unwrap();
        assert!(exited.is_none(), "nbdfuse exited ({exited:?}): {}", log());
        assert!(
            Instant::now() < deadline,
            "nbdfuse never showed the image: {}",
            log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let read = std::fs::read(&file).unwrap();
    assert_eq!(
        crc_fast::crc32_iscsi(&read),
        crc_fast::crc32_iscsi(&content)
    );
    let piece = pattern(MIB, 23);
    let f = std::fs::OpenOptions::new().write(true).open(&file).unwrap();
    f.write_all_at(&piece, 5 * MIB + 512).unwrap();
    f.sync_all().unwrap();
    drop(f);
    drop(mount);
    content[(5 * MIB + 512) as usize..][..MIB as usize].copy_from_slice(&piece);
    std::fs::write(&local, &content).unwrap();
    assert_eq!(
        compare(&local),
        Some(0),
        "what was written through FUSE is the image's"
    );
    // With its last connection gone, the server lets go of the image.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (listed, out) = cairn_with_keyring(
            Some(keyring),
            &["rbd", "--mon", mon, "lock", "ls", "data/spare"],
        );
        assert!(listed, "{out}");
        if !out.contains("pid") {
            break;
        }
        assert!(Instant::now() < deadline, "the lock was kept: {out}");
        std::thread::sleep(Duration::from_millis(200));
    }
    // Stopped (SIGTERM), the server removes its socket.
    common::signal("-TERM", server_pid);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !common::has_exited(server_pid) || socket.exists() {
        assert!(
            Instant::now() < deadline,
            "the stopped server left its socket"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn an_image_exported_over_nbd_serves_libnbd_tools_and_the_protocols_corners() {
    let mut cluster = Cluster::new("rbd-nbd");
    let mon = format!("127.0.0.1:{}", free_port());
    let (up, out) = cluster.up(&mon, &["--device-mib", "256", "--pg-num", "8"]);
    assert!(up, "{out}");
    let keyring = cluster.keyring();
    let rbd = |args: &[&str]| -> Vec<String> {
        let mut v = vec!["rbd".to_string(), "--mon".into(), mon.clone()];
        v.extend(args.iter().map(|a| a.to_string()));
        v
    };
    let run = |args: &[&str]| {
        let v = rbd(args);
        ok(&keyring, &v.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let refuse = |args: &[&str], why: &str| {
        let v = rbd(args);
        refused(
            &keyring,
            &v.iter().map(String::as_str).collect::<Vec<_>>(),
            why,
        )
    };

    run(&[
        "create",
        "data/disk",
        "--size",
        "24M",
        "--object-size",
        "1M",
    ]);
    assert_eq!(run(&["ls", "data"]).trim(), "disk");
    assert!(run(&["info", "data/disk"]).contains("size 25165824 bytes in 24 objects"));
    refuse(&["create", "data/disk", "--size", "1M"], "exists");
    refuse(&["create", "data/.hidden", "--size", "1M"], "image name");
    refuse(
        &[
            "create",
            "data/odd",
            "--size",
            "1M",
            "--object-size",
            "3000",
        ],
        "power of two",
    );
    refuse(&["create", "data/huge", "--size", "2000000T"], "past");
    refuse(&["info", "data/nothing"], "no image");
    refuse(&["info", "disk"], "POOL/IMAGE");
    run(&["create", "data/spare", "--size", "8M"]);
    run(&["resize", "data/spare", "--size", "16M"]);
    assert!(run(&["info", "data/spare"]).contains("size 16777216 bytes"));
    serves_qemu_img_and_nbdfuse_on_a_unix_socket(&mut cluster, &mon, &keyring);

    let listen = format!("127.0.0.1:{}", free_port());
    let server = cluster.start(
        "nbd.log",
        &[
            "--keyring",
            &keyring.display().to_string(),
            "rbd",
            "--mon",
            &mon,
            "nbd",
            "data/disk",
            "--listen",
            &listen,
            "--lock-lease-ms",
            "2000",
        ],
    );
    cluster.extra.push(server);
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(&listen).is_err() {
        assert!(Instant::now() < deadline, "the NBD server never listened");
        std::thread::sleep(Duration::from_millis(50));
    }
    let uri = format!("nbd://{listen}/disk");

    // libnbd's tools: the export's size, then a whole image in and out.
    let info = tool("nbdinfo").arg(&uri).output().unwrap();
    let info = String::from_utf8_lossy(&info.stdout);
    assert!(info.contains("export-size: 25165824"), "{info}");
    assert!(info.contains("is_read_only: false"), "{info}");
    let dir = cluster.dir.clone();
    let mut content = pattern(IMAGE_BYTES, 7);
    content[..MIB as usize].fill(0);
    std::fs::write(dir.join("in.img"), &content).unwrap();
    let copied = tool("nbdcopy")
        .arg(dir.join("in.img"))
        .arg(&uri)
        .output()
        .unwrap();
    assert!(copied.status.success(), "{copied:?}");
    let back = tool("nbdcopy")
        .arg(&uri)
        .arg(dir.join("out.img"))
        .output()
        .unwrap();
    assert!(back.status.success(), "{back:?}");
    let out = std::fs::read(dir.join("out.img")).unwrap();
    assert_eq!(out.len(), content.len());
    assert_eq!(
        crc_fast::crc32_iscsi(&out),
        crc_fast::crc32_iscsi(&content),
        "the image read back differs"
    );

    // This test's own client: the export, then the corners.
    assert_eq!(Nbd::open(&listen, "nothing").err(), Some(0x8000_0006));
    let (mut c, size) = Nbd::open(&listen, "disk").unwrap();
    assert_eq!(size, IMAGE_BYTES);
    let across = pattern(8192, 11);
    assert_eq!(c.command(WRITE, MIB - 4096, 8192, &across), 0);
    assert_eq!(c.read(MIB - 4096, 8192).unwrap(), across);
    // Sixteen writes in flight, answered in any order, each read back.
    for i in 0..16u64 {
        c.send(WRITE, 100 + i, 4 * MIB + i * 65536, 4096, &pattern(4096, i));
    }
    let mut answered: Vec<u64> = (0..16)
        .map(|_| {
            let (cookie, error) = c.reply();
            assert_eq!(error, 0);
            cookie
        })
        .collect();
    answered.sort_unstable();
    assert_eq!(answered, (100..116).collect::<Vec<_>>());
    for i in 0..16u64 {
        assert_eq!(c.read(4 * MIB + i * 65536, 4096).unwrap(), pattern(4096, i));
    }
    assert_eq!(c.command(FLUSH, 0, 0, &[]), 0);
    // Trim of whole objects and of a piece, write-zeroes: zeros read back.
    assert_eq!(c.command(TRIM, 2 * MIB, 2 * MIB as u32 + 100, &[]), 0);
    assert_eq!(
        c.read(2 * MIB, 2 * MIB as u32 + 100).unwrap(),
        vec![0u8; 2 * MIB as usize + 100]
    );
    assert_eq!(
        c.read(4 * MIB + 100, 100).unwrap(),
        pattern(4096, 0)[100..200]
    );
    // The whole objects trimmed are gone: their space is freed, not written with zeros.
    let objects = ok(&keyring, &["ls", "--mon", &mon, "-p", "data"]);
    for (index, kept) in [(1, true), (2, false), (3, false), (4, true)] {
        let name = format!("rbd_data.disk.{index:016x}");
        assert_eq!(objects.contains(&name), kept, "{name}: {objects}");
    }
    assert_eq!(c.command(WRITE_ZEROES, 10 * MIB + 5, 1000, &[]), 0);
    assert_eq!(c.read(10 * MIB + 5, 1000).unwrap(), vec![0u8; 1000]);
    assert_eq!(
        c.read(10 * MIB, 5).unwrap(),
        content[10 * MIB as usize..][..5]
    );
    // Past the end: refused, nothing written.
    assert_eq!(c.read(IMAGE_BYTES - 10, 20), Err(22));
    assert_eq!(c.command(WRITE, IMAGE_BYTES - 10, 20, &[1u8; 20]), 28);
    assert_eq!(c.command(TRIM, u64::MAX - 5, 10, &[]), 22);
    assert_eq!(c.command(99, 0, 0, &[]), 22);
    c.send(DISC, 3, 0, 0, &[]);

    // A broken client is cut off; the next connection is served.
    let mut bad = Nbd::connect(&listen);
    let mut hello = [0u8; 18];
    bad.read_exact(&mut hello).unwrap();
    bad.write_all(&3u32.to_be_bytes()).unwrap();
    bad.write_all(b"NOTANOPTIONMAGIC....").unwrap();
    let mut rest = Vec::new();
    assert_eq!(
        bad.read_to_end(&mut rest).unwrap(),
        0,
        "the connection was closed"
    );
    let (mut c, _) = Nbd::open(&listen, "disk").unwrap();
    c.send(WRITE, 9, 0, 64 << 20, &[]);
    let mut rest = Vec::new();
    let closed = c.s.read_to_end(&mut rest).map(|n| n == 0).unwrap_or(true);
    assert!(closed, "an oversized request closes the connection");
    let (mut c, _) = Nbd::open(&listen, "disk").unwrap();
    assert_eq!(c.read(MIB - 4096, 8192).unwrap(), across);
    c.send(DISC, 4, 0, 0, &[]);

    // While a connection is open, the server holds the image's lock.
    let (mut c, _) = Nbd::open(&listen, "disk").unwrap();
    assert!(run(&["lock", "ls", "data/disk"]).contains("pid"));
    refuse(&["resize", "data/disk", "--size", "48M"], "locked");
    // A snapshot of the mapped image: the server holding the lock takes it between writes.
    let before = c.read(0, 4096).unwrap();
    assert!(run(&["snap", "create", "data/disk@live"]).contains("created data/disk@live"));
    assert_eq!(c.command(WRITE, 0, 4096, &pattern(4096, 77)), 0);
    let (mut live, _) = Nbd::open(&listen, "disk@live").unwrap();
    assert_eq!(
        live.read(0, 4096).unwrap(),
        before,
        "the snapshot holds the bytes before it"
    );
    live.send(DISC, 8, 0, 0, &[]);
    assert_eq!(c.command(WRITE, 0, 4096, &before), 0);
    assert!(run(&["snap", "rm", "data/disk@live"]).contains("removed data/disk@live"));
    c.send(DISC, 5, 0, 0, &[]);

    // A snapshot, exported read-only beside the image it was taken of.
    run(&["snap", "create", "data/disk@s1"]);
    refuse(&["snap", "create", "data/disk@s1"], "exists");
    assert!(run(&["snap", "ls", "data/disk"]).contains("s1"));
    assert!(run(&["info", "data/disk"]).contains("snapshot_count: 1"));
    let (mut c, _) = Nbd::open(&listen, "disk").unwrap();
    let changed = pattern(8192, 99);
    assert_eq!(c.command(WRITE, MIB - 4096, 8192, &changed), 0);
    let (mut snap, size) = Nbd::open(&listen, "disk@s1").unwrap();
    assert_eq!(size, IMAGE_BYTES);
    assert_eq!(snap.read(MIB - 4096, 8192).unwrap(), across);
    assert_eq!(c.read(MIB - 4096, 8192).unwrap(), changed);
    assert_eq!(snap.command(WRITE, 0, 4, b"nope"), 1, "EPERM");
    assert_eq!(Nbd::open(&listen, "disk@none").err(), Some(0x8000_0006));
    let info = tool("nbdinfo")
        .arg(format!("nbd://{listen}/disk@s1"))
        .output()
        .unwrap();
    let info = String::from_utf8_lossy(&info.stdout);
    assert!(info.contains("is_read_only: true"), "{info}");
    snap.send(DISC, 6, 0, 0, &[]);
    c.send(DISC, 7, 0, 0, &[]);

    // A clone of the snapshot reads the snapshot's bytes, through libnbd's nbdcopy.
    run(&["clone", "data/disk@s1", "data/child"]);
    assert!(run(&["info", "data/child"]).contains("parent: data/disk@s1"));
    for (export, file) in [("disk@s1", "s1.img"), ("child", "child.img")] {
        let copied = tool("nbdcopy")
            .arg(format!("nbd://{listen}/{export}"))
            .arg(dir.join(file))
            .output()
            .unwrap();
        assert!(copied.status.success(), "{copied:?}");
    }
    let s1 = std::fs::read(dir.join("s1.img")).unwrap();
    let child = std::fs::read(dir.join("child.img")).unwrap();
    assert_eq!(s1.len() as u64, IMAGE_BYTES);
    assert_eq!(crc_fast::crc32_iscsi(&s1), crc_fast::crc32_iscsi(&child));
    assert_eq!(&s1[(MIB - 4096) as usize..][..8192], &across[..]);

    // Removals wait for what depends on them.
    refuse(&["rm", "data/disk"], "snapshots");
    refuse(&["snap", "rm", "data/disk@s1"], "clones");

    // A rollback, once the server has let go of the image: it reads the snapshot's bytes.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let v = rbd(&["snap", "rollback", "data/disk@s1"]);
        let (rolled, out) = cairn_with_keyring(
            Some(&keyring),
            &v.iter().map(String::as_str).collect::<Vec<_>>(),
        );
        if rolled {
            assert!(out.contains("rolled data/disk back to s1"), "{out}");
            break;
        }
        assert!(
            out.contains("locked") && Instant::now() < deadline,
            "rollback: {out}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let (mut c, _) = Nbd::open(&listen, "disk").unwrap();
    assert_eq!(c.read(MIB - 4096, 8192).unwrap(), across);
    c.send(DISC, 9, 0, 0, &[]);

    // A flattened clone holds its parent's bytes itself: the snapshot may go.
    assert!(run(&["flatten", "data/child"]).contains("no longer depends"));
    assert!(!run(&["info", "data/child"]).contains("parent:"));
    run(&["snap", "rm", "data/disk@s1"]);
    let copied = tool("nbdcopy")
        .arg(format!("nbd://{listen}/child"))
        .arg(dir.join("flat.img"))
        .output()
        .unwrap();
    assert!(copied.status.success(), "{copied:?}");
    let flat = std::fs::read(dir.join("flat.img")).unwrap();
    assert_eq!(crc_fast::crc32_iscsi(&s1), crc_fast::crc32_iscsi(&flat));
    run(&["rm", "data/child"]);

    // Removing the image removes its objects.
    run(&["rm", "data/disk"]);
    run(&["rm", "data/spare"]);
    assert_eq!(run(&["ls", "data"]).trim(), "");
    let objects = ok(&keyring, &["ls", "--mon", &mon, "-p", "data"]);
    assert!(
        !objects.contains("rbd_data.") && !objects.contains("rbd_header."),
        "{objects}"
    );
}
