//! `cairn mon` as a real process on a free loopback port, driven by `cairn pool`, `cairn status`
//! and `cairn osd`; the monitor is always killed at the end, and every wait is bounded.

mod common;

use common::{cairn, free_port, Daemon};
use std::time::{Duration, Instant};

#[test]
fn monitor_serves_pool_and_status_commands() {
    let addr = format!("127.0.0.1:{}", free_port());
    let _mon = Daemon::spawn(&["mon", "--listen", &addr]);
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(&addr).is_err() {
        assert!(Instant::now() < deadline, "monitor did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    let (ok, out) = cairn(&["pool", "--mon", &addr, "create", "data", "--pg-num", "32"]);
    assert!(ok, "{out}");
    let (ok, out) = cairn(&["pool", "--mon", &addr, "create", "data"]);
    assert!(!ok, "duplicate pool accepted: {out}");
    assert!(out.contains("exists"), "{out}");
    let (ok, out) = cairn(&["pool", "--mon", &addr, "ls"]);
    assert!(ok && out.contains("data size 3"), "{out}");
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
