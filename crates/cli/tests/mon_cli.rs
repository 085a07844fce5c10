//! `cairn mon` as a real process on a free loopback port, driven by `cairn pool`, `cairn status`
//! and `cairn osd`; the monitor is always killed at the end, and every wait is bounded.

mod common;

use common::{cairn, free_port, Daemon};
use std::time::{Duration, Instant};

/// A monitor on a free loopback port, once it accepts connections (within 20 s), and its address.
fn start_monitor() -> (Daemon, String) {
    let addr = format!("127.0.0.1:{}", free_port());
    let mon = Daemon::spawn(&["mon", "--listen", &addr]);
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(&addr).is_err() {
        assert!(Instant::now() < deadline, "monitor did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    (mon, addr)
}

#[test]
fn monitor_serves_pool_and_status_commands() {
    let (_mon, addr) = start_monitor();
    let (ok, out) = cairn(&["pool", "--mon", &addr, "create", "data", "--pg-num", "32"]);
    assert!(ok, "{out}");
    let (ok, out) = cairn(&["pool", "--mon", &addr, "create", "data"]);
    assert!(!ok, "duplicate pool accepted: {out}");
    assert!(out.contains("exists"), "{out}");
    let (ok, out) = cairn(&["pool", "--mon", &addr, "ls"]);
    assert!(ok && out.contains("data size 3"), "{out}");
    // The monitor's address may follow the pool command too.
    let (ok, out) = cairn(&["pool", "create", "--mon", &addr, "wide", "--pg-num", "8"]);
    assert!(ok, "{out}");
    let (ok, out) = cairn(&["pool", "ls", "--mon", &addr]);
    assert!(ok && out.contains("wide size 3"), "{out}");
    let (ok, out) = cairn(&["status", "--mon", &addr]);
    assert!(
        ok && out.contains("0 total") && out.contains("'data'"),
        "{out}"
    );
    let (ok, out) = cairn(&["osd", "--mon", &addr, "out", "7"]);
    assert!(
        !ok && out.contains("osd.7"),
        "unknown OSD must be an error: {out}"
    );
}

/// A failed command prints one line naming the cause (`error: ...`), without a backtrace even
/// when `RUST_BACKTRACE` is set, exits non-zero, and a benchmark of a pool that does not exist
/// is refused before its progress table starts; a silent monitor is named unreachable.
#[test]
fn a_failed_command_prints_its_cause_without_a_backtrace() {
    let (_mon, addr) = start_monitor();
    let out = std::process::Command::new("timeout")
        .arg("60")
        .arg(env!("CARGO_BIN_EXE_cairn"))
        .args(["bench", "--mon", &addr, "-p", "nosuch", "1", "write"])
        .env("RUST_BACKTRACE", "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{stdout}{stderr}");
    assert_eq!(stderr.trim(), "error: no pool `nosuch`", "{stderr}");
    assert!(
        !stdout.contains("ops"),
        "the progress table started: {stdout}"
    );
    // A monitor nobody answers for is unreachable, not an invalid request.
    let nobody = format!("127.0.0.1:{}", free_port());
    let (ok, out) = cairn(&["pool", "create", "--mon", &nobody, "x"]);
    assert!(!ok, "{out}");
    assert!(
        out.trim() == "error: monitor unreachable: no reply within 10000 ms",
        "{out}"
    );
}
