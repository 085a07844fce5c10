//! Helpers shared by the process-level tests: run `cairn` with a deadline, pick free loopback
//! ports, and stop what a test started even when an assertion fails.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cairn_blockdev::{BlockDevice, FileDevice, FileDeviceOptions};
use cairn_store::{KvLocation, Store, StoreConfig};
use std::process::{Child, Command, Stdio};

/// Runs `cairn ARGS` (killed after 180 s); returns success and stdout + stderr.
pub fn cairn(args: &[&str]) -> (bool, String) {
    cairn_with_keyring(None, args)
}

/// Runs `cairn ARGS` as [`cairn`] does, with `CAIRN_KEYRING` set to `keyring` if given.
pub fn cairn_with_keyring(keyring: Option<&Path>, args: &[&str]) -> (bool, String) {
    let mut command = Command::new("timeout");
    command
        .arg("180")
        .arg(env!("CARGO_BIN_EXE_cairn"))
        .args(args);
    if let Some(keyring) = keyring {
        command.env("CAIRN_KEYRING", keyring);
    }
    let out = command.output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

/// A loopback port nobody listens on right now, chosen below the kernel's ephemeral range.
///
/// A test hands these ports to daemons it starts later, while the daemons themselves bind
/// port 0 for their metrics pages and outgoing connections take ephemeral ports: a port taken
/// from the ephemeral range could be handed out again by the kernel before the test's daemon
/// binds it. Below that range only another explicit bind can take it, so the window shrinks to
/// two tests drawing the same random port at the same moment.
pub fn free_port() -> u16 {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static DRAWS: AtomicU64 = AtomicU64::new(0);
    const LOWEST: u16 = 10_000;
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32_768);
    if ephemeral_low > LOWEST + 1_000 {
        let span = u64::from(ephemeral_low - LOWEST);
        for _ in 0..200 {
            let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
            hasher.write_u32(std::process::id());
            hasher.write_u64(DRAWS.fetch_add(1, Ordering::Relaxed));
            let port = LOWEST + u16::try_from(hasher.finish() % span).expect("span fits in u16");
            if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
                return port;
            }
        }
    }
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A two-thread tokio runtime for a test's clients.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// The cluster's administrator connected as a client of the monitor at `mon`, on `rt`.
pub fn admin_client(
    rt: &tokio::runtime::Runtime,
    cluster: &Cluster,
    mon: &str,
) -> Arc<cairn_client::Client> {
    let client = rt.block_on(cairn_client::Client::connect_as(
        mon.parse().unwrap(),
        cairn_client::random_client_id(),
        Some(cluster.admin()),
    ));
    Arc::new(client.unwrap())
}

/// Writes objects `obj0..objN` of pool `data`, `object(i)` the bytes of each.
pub fn write_objects(
    rt: &tokio::runtime::Runtime,
    client: &cairn_client::Client,
    n: usize,
    object: fn(usize) -> Vec<u8>,
) {
    rt.block_on(async {
        for i in 0..n {
            client
                .write_full("data", &format!("obj{i}"), &object(i))
                .await
                .unwrap();
        }
    });
}

/// Reads objects `obj0..objN` of pool `data` back and compares each with `object(i)` by
/// crc32c; `when` names the moment in a failure.
pub fn verify_objects(
    rt: &tokio::runtime::Runtime,
    client: &cairn_client::Client,
    n: usize,
    object: fn(usize) -> Vec<u8>,
    when: &str,
) {
    rt.block_on(async {
        for i in 0..n {
            let back = client.read("data", &format!("obj{i}")).await.unwrap();
            assert_eq!(
                crc_fast::crc32_iscsi(&back),
                crc_fast::crc32_iscsi(&object(i)),
                "obj{i} {when}"
            );
        }
    });
}

/// `len` bytes that differ for every `i` (and from one byte to the next).
pub fn payload(i: usize, len: usize) -> Vec<u8> {
    (0..len)
        .map(|b| {
            (b as u32)
                .wrapping_mul(2_654_435_761)
                .wrapping_add(i as u32) as u8
        })
        .collect()
}

/// A `cairn` child process (output discarded), killed when dropped.
pub struct Daemon(pub Child);

impl Daemon {
    /// Starts `cairn ARGS` in the background.
    pub fn spawn(args: &[&str]) -> Daemon {
        Daemon(
            Command::new(env!("CARGO_BIN_EXE_cairn"))
                .args(args)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        )
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A cluster directory of `cairn up`: `cairn down` and removed when dropped, together with any
/// extra processes the test started.
pub struct Cluster {
    /// The directory given to `cairn up --dir`.
    pub dir: PathBuf,
    /// Processes started beside `cairn up` (killed first).
    pub extra: Vec<Child>,
}

impl Cluster {
    /// A fresh directory under the temp dir, named after `tag` and this process.
    pub fn new(tag: &str) -> Cluster {
        let dir = std::env::temp_dir().join(format!("cairn-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        Cluster {
            dir,
            extra: Vec::new(),
        }
    }

    /// The administrator's keyring `cairn up` wrote in the directory.
    pub fn keyring(&self) -> PathBuf {
        self.dir.join("keyring")
    }

    /// Runs `cairn ARGS` as the cluster's administrator (its keyring in `CAIRN_KEYRING`).
    pub fn cairn(&self, args: &[&str]) -> (bool, String) {
        cairn_with_keyring(Some(&self.keyring()), args)
    }

    /// The administrator as a client of the cluster (its keyring from the directory).
    pub fn admin(&self) -> cairn_client::tickets::ClientAuth {
        let ring = cairn_auth::Keyring::load(&self.keyring()).unwrap();
        let admin = cairn_auth::EntityName::admin();
        let key = ring.get(&admin).expect("client.admin's key").key.clone();
        cairn_client::tickets::ClientAuth {
            entity: admin,
            key,
            mode: cairn_msgr::protect::WireMode::Mac,
        }
    }

    /// Starts `cairn ARGS` with the keyring `FILE` of the directory (`mon.keyring`,
    /// `osdN.keyring`) as [`Cluster::start`] does.
    pub fn start_with_keyring(&self, log: &str, file: &str, args: &[&str]) -> Child {
        let keyring = self.dir.join(file).display().to_string();
        let mut all = vec!["--keyring", keyring.as_str()];
        all.extend_from_slice(args);
        self.start(log, &all)
    }

    /// The directory as a string argument.
    pub fn arg(&self) -> String {
        self.dir.display().to_string()
    }

    /// Runs `cairn up --no-s3 --no-fs --dir DIR --mon MON` followed by the test's own
    /// `settings`; returns success and the output.
    pub fn up(&self, mon: &str, settings: &[&str]) -> (bool, String) {
        let dir = self.arg();
        let mut args = vec!["up", "--no-s3", "--no-fs", "--dir", &dir, "--mon", mon];
        args.extend_from_slice(settings);
        cairn(&args)
    }

    /// Starts `cairn ARGS` beside the cluster with its output in `DIR/LOG`, listing its pid in
    /// the `pids` file so that `cairn down` stops it too (a daemon restarted by a test).
    pub fn start(&self, log: &str, args: &[&str]) -> Child {
        let log = std::fs::File::create(self.dir.join(log)).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_cairn"))
            .args(args)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        let mut pids = std::fs::read_to_string(self.dir.join("pids")).unwrap();
        pids.push_str(&format!("{}\n", child.id()));
        std::fs::write(self.dir.join("pids"), pids).unwrap();
        child
    }

    /// Prepares `cairn ARGS` beside the cluster as [`Cluster::start`] does, but has it wait for
    /// [`Cued::go`]: a shell spawned now, while the test holds no file open on a FUSE mount,
    /// execs `cairn` on cue. Spawning at that moment instead would close the test's open files
    /// on the mount at exec, and a close waits for the mount, which may be waiting for the very
    /// daemon being started (a replacement metadata server).
    pub fn start_on_cue(&self, log: &str, args: &[&str]) -> Cued {
        let log = std::fs::File::create(self.dir.join(log)).unwrap();
        let mut child = Command::new("sh")
            .arg("-c")
            .arg("read -r _ && exec \"$0\" \"$@\"")
            .arg(env!("CARGO_BIN_EXE_cairn"))
            .args(args)
            .stdin(Stdio::piped())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        let cue = child.stdin.take().expect("piped");
        let mut pids = std::fs::read_to_string(self.dir.join("pids")).unwrap();
        pids.push_str(&format!("{}\n", child.id()));
        std::fs::write(self.dir.join("pids"), pids).unwrap();
        Cued { child, cue }
    }

    /// The process ids `cairn up` wrote to its `pids` file: the monitor's, then each OSD's in
    /// the order it started them.
    pub fn pids(&self) -> Vec<u32> {
        std::fs::read_to_string(self.dir.join("pids"))
            .unwrap()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    }
}

/// A daemon prepared by [`Cluster::start_on_cue`]: its process waits for the cue.
pub struct Cued {
    child: Child,
    cue: std::process::ChildStdin,
}

impl Cued {
    /// Starts the daemon (the waiting process execs it, keeping its pid) and hands back its
    /// child handle.
    pub fn go(mut self) -> Child {
        use std::io::Write;
        self.cue.write_all(b"go\n").unwrap();
        drop(self.cue);
        self.child
    }
}

/// Sends `sig` (`-9`, `-STOP`, `-CONT`, `-TERM`) to process `pid`, by the system call rather
/// than kill(1): a process spawned while a test holds files open on a FUSE mount closes them
/// at exec, and each close waits on that mount. Panics if the process is not there. `-STOP`
/// returns once every thread of the process has stopped: a FUSE thread the signal woke from
/// its read of `/dev/fuse` still takes a request that came meanwhile, and the process asking
/// it then waits, unkillably, until the mount goes on.
pub fn signal(sig: &str, pid: u32) {
    if let Err(e) = try_signal(sig, pid) {
        panic!("kill {sig} {pid}: {e}");
    }
    if sig == "-STOP" {
        wait_for_process(pid, 10, "stop", all_threads_stopped);
    }
}

/// Waits at most `limit_s` seconds until `done(pid)`; panics with "process PID did not
/// `what`" past it.
fn wait_for_process(pid: u32, limit_s: u64, what: &str, done: impl Fn(u32) -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(limit_s);
    while !done(pid) {
        assert!(
            std::time::Instant::now() < deadline,
            "process {pid} did not {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// The state letter of a `/proc/PID[/task/TID]/stat` line (`R`, `S`, `D`, `T`, `Z`...): it
/// follows the command name, which is in parentheses and may hold any byte.
fn state_of(stat: &str) -> Option<char> {
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.trim_start().chars().next())
}

/// Whether every thread of process `pid` is stopped (state `T` or `t` in its `stat`) or dead
/// (`Z`, `X`: killed meanwhile); a process that is gone has none running.
fn all_threads_stopped(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return true;
    };
    tasks.flatten().all(|task| {
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else {
            return true;
        };
        matches!(state_of(&stat), Some('T' | 't' | 'Z' | 'X' | 'x') | None)
    })
}

/// [`signal`], handing back the system call's error (`ESRCH` for a process that is gone).
#[allow(unsafe_code)] // kill(2): see the SAFETY note inside.
pub fn try_signal(sig: &str, pid: u32) -> std::io::Result<()> {
    let number = match sig {
        "-9" | "-KILL" => libc::SIGKILL,
        "-STOP" => libc::SIGSTOP,
        "-CONT" => libc::SIGCONT,
        "-TERM" => libc::SIGTERM,
        other => panic!("signal {other} is not one the tests send"),
    };
    let pid = i32::try_from(pid).expect("a pid fits in pid_t");
    // SAFETY: kill(2) takes plain integers and touches no memory of this process.
    match unsafe { libc::kill(pid, number) } {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

/// Whether process `pid` is gone, or a zombie with no thread left.
pub fn has_exited(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => {
            state_of(&stat) == Some('Z')
                && std::fs::read_dir(format!("/proc/{pid}/task")).map_or(0, |t| t.count()) <= 1
        }
    }
}

/// Waits (at most 30 s) until process `pid`, just sent SIGKILL, is gone or a zombie with no
/// thread left: before that `cairn up` still counts it as running.
pub fn wait_exited(pid: u32) {
    wait_for_process(pid, 30, "exit", has_exited);
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for c in &mut self.extra {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = Command::new(env!("CARGO_BIN_EXE_cairn"))
            .args(["down", "--dir"])
            .arg(&self.dir)
            .output();
        if std::thread::panicking() {
            print_log_tails(&self.dir);
        }
        // CAIRN_KEEP_CLUSTER=failed keeps a failed test's directory (logs, stores), `always`
        // every one.
        let keep = std::env::var("CAIRN_KEEP_CLUSTER").unwrap_or_default();
        if keep == "always" || (keep == "failed" && std::thread::panicking()) {
            eprintln!("kept {} (CAIRN_KEEP_CLUSTER)", self.dir.display());
            return;
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Prints the last lines of every daemon log in `dir` to stderr: a failed test's output then
/// shows what the daemons were doing (the directory is removed unless `CAIRN_KEEP_CLUSTER`
/// keeps it).
fn print_log_tails(dir: &Path) {
    const LINES: usize = 25;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut logs: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    logs.sort();
    for log in logs {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        eprintln!("---- last lines of {} ----", log.display());
        for line in &lines[lines.len().saturating_sub(LINES)..] {
            eprintln!("{line}");
        }
    }
}

/// The crc32c of every object on each of the `osds` stores of a stopped cluster in `dir`
/// (mounted read-write in turn, the PG metadata objects left out), by object name.
pub fn copies(dir: &Path, osds: usize) -> BTreeMap<String, Vec<u32>> {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut out: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    for i in 0..osds {
        let d = dir.join(format!("osd{i}"));
        rt.block_on(async {
            let dev: Arc<dyn BlockDevice> = Arc::new(
                FileDevice::open(&d.join("block"), &FileDeviceOptions::default()).unwrap(),
            );
            let store = Store::mount(
                dev,
                KvLocation::File(d.join("kv.redb")),
                StoreConfig::default(),
            )
            .await
            .unwrap();
            let fsck = store.fsck(true).await.unwrap();
            assert!(fsck.is_clean(), "osd{i}'s store: {fsck:?}");
            for coll in store.list_collections().await.unwrap() {
                for obj in store.list_objects(&coll, None, 10_000).await.unwrap() {
                    if obj == cairn_osd::pgmeta::META_OBJECT {
                        continue;
                    }
                    let data = store.read(&coll, &obj, 0, u64::MAX).await.unwrap();
                    out.entry(obj)
                        .or_default()
                        .push(crc_fast::crc32_iscsi(&data));
                }
            }
            store.umount().await.unwrap();
        });
    }
    out
}

/// The body of `GET path` from the HTTP page at `addr`, failing on any other status.
pub fn http_get(addr: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut reply = String::new();
    s.read_to_string(&mut reply).unwrap();
    let (head, body) = reply.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    body.to_string()
}
