//! No acknowledged block write is lost when the cluster or the NBD server dies under a real
//! client: fio (its `nbd` engine, random 4 KiB writes at 16 in flight, each block carrying a
//! crc32c verify header) writes an image exported by `cairn rbd nbd` while
//!
//! 1. one of the three OSDs is killed with `kill -9`: fio carries on (the pool serves with
//!    two copies) and ends without an error, then fio's verify pass reads back every block
//!    its state file says was acknowledged;
//! 2. the NBD server itself is killed with `kill -9`: fio fails, as it must, and saves which
//!    writes had been acknowledged; a new server takes the dead one's lock over after one
//!    lease, and fio's verify pass reads every acknowledged block back intact.
//!
//! The verify pass is shown to catch damage: zeros written over the image make it fail.

mod common;

use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::{cairn_with_keyring, free_port, signal, Cluster};

/// fio over the NBD export `uri`, in `dir` (where its verify state files go).
fn fio(dir: &Path, uri: &str, job: &str, extra: &[&str]) -> Output {
    let found = Command::new("sh")
        .args(["-c", "command -v fio"])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(found, "fio is missing: apt-get install fio");
    Command::new("fio")
        .current_dir(dir)
        .args([
            &format!("--name={job}"),
            "--ioengine=nbd",
            &format!("--uri={uri}"),
            "--rw=randwrite",
            "--bs=4k",
            "--size=32M",
            "--iodepth=16",
            "--verify=crc32c",
            "--direct=1",
            "--time_based",
        ])
        .args(extra)
        .output()
        .unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Blocks fio's verify pass read back (the `issued rwts: total=READS,...` line).
fn verified_blocks(o: &Output) -> u64 {
    let out = text(o);
    out.lines()
        .find_map(|l| l.trim().strip_prefix("issued rwts: total="))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no issued line in fio's output: {out}"))
}

/// Starts `cairn rbd nbd` on `listen` and waits until it accepts connections.
fn start_server(cluster: &Cluster, mon: &str, listen: &str, log: &str) -> std::process::Child {
    let keyring = cluster.keyring().display().to_string();
    let server = cluster.start(
        log,
        &[
            "--keyring",
            &keyring,
            "rbd",
            "--mon",
            mon,
            "nbd",
            "data",
            "--listen",
            listen,
            "--lock-lease-ms",
            "2000",
        ],
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(listen).is_err() {
        assert!(Instant::now() < deadline, "the NBD server never listened");
        std::thread::sleep(Duration::from_millis(50));
    }
    server
}

/// Runs fio's verify pass over the blocks job `name` acknowledged (its saved verify state):
/// every one must read back intact, and there must be some.
fn verify_acknowledged(dir: &Path, uri: &str, name: &str, when: &str) {
    let verified = fio(
        dir,
        uri,
        name,
        &["--runtime=1", "--verify_only", "--verify_state_load=1"],
    );
    assert!(
        verified.status.success(),
        "{when}: blocks lost or damaged: {}",
        text(&verified)
    );
    let blocks = verified_blocks(&verified);
    assert!(
        blocks > 0,
        "{when}: nothing was verified: {}",
        text(&verified)
    );
    eprintln!("{when}: {blocks} acknowledged blocks verified");
}

#[test]
fn fio_verifies_every_acknowledged_block_after_kill_9_of_an_osd_and_of_the_nbd_server() {
    let mut cluster = Cluster::new("rbd-crash");
    let mon = format!("127.0.0.1:{}", free_port());
    let (up, out) = cluster.up(
        &mon,
        &[
            "--device-mib",
            "256",
            "--pg-num",
            "8",
            "--heartbeat-grace-s",
            "2",
        ],
    );
    assert!(up, "{out}");
    let keyring = cluster.keyring();
    let (ok, out) = cairn_with_keyring(
        Some(&keyring),
        &[
            "rbd",
            "--mon",
            &mon,
            "create",
            "data/disk",
            "--size",
            "64M",
            "--object-size",
            "1M",
        ],
    );
    assert!(ok, "{out}");
    let dir = cluster.dir.clone();
    let listen = format!("127.0.0.1:{}", free_port());
    let uri = format!("nbd://{listen}/disk");
    let pids = cluster.pids();
    assert_eq!(pids.len(), 4, "mon + 3 OSDs");
    let first = start_server(&cluster, &mon, &listen, "nbd1.log");
    let first_pid = first.id();
    cluster.extra.push(first);

    // 1. kill -9 of an OSD while fio writes: fio goes on and ends cleanly.
    let osd = pids[3];
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(4));
        signal("-9", osd);
    });
    let wrote = fio(
        &dir,
        &uri,
        "osdkill",
        &["--runtime=14", "--do_verify=0", "--verify_state_save=1"],
    );
    killer.join().unwrap();
    assert!(wrote.status.success(), "fio failed: {}", text(&wrote));
    verify_acknowledged(&dir, &uri, "osdkill", "after kill -9 of an OSD");

    // 2. kill -9 of the NBD server while fio writes: fio fails; a new server takes the lock
    //    over after a lease, and every acknowledged block reads back.
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(4));
        signal("-9", first_pid);
    });
    let wrote = fio(
        &dir,
        &uri,
        "serverkill",
        &["--runtime=30", "--do_verify=0", "--verify_state_save=1"],
    );
    killer.join().unwrap();
    assert!(
        !wrote.status.success(),
        "fio outlived its server: {}",
        text(&wrote)
    );
    let second = start_server(&cluster, &mon, &listen, "nbd2.log");
    cluster.extra.push(second);
    verify_acknowledged(&dir, &uri, "serverkill", "after kill -9 of the NBD server");

    // The verify pass catches damage: zeros over the image fail it.
    let zeroed = Command::new("fio")
        .current_dir(&dir)
        .args([
            "--name=zero",
            "--ioengine=nbd",
            &format!("--uri={uri}"),
            "--rw=write",
            "--bs=1M",
            "--size=32M",
            "--zero_buffers",
            "--direct=1",
        ])
        .output()
        .unwrap();
    assert!(zeroed.status.success(), "{}", text(&zeroed));
    let damaged = fio(
        &dir,
        &uri,
        "serverkill",
        &["--runtime=1", "--verify_only", "--verify_state_load=1"],
    );
    assert!(
        !damaged.status.success(),
        "the verify pass missed zeroed blocks: {}",
        text(&damaged)
    );
}
