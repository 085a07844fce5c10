//! Fast failure detection with real processes (`cairn up`, 3 OSDs, the default 20 s heartbeat
//! grace): an OSD killed with `kill -9` on a live host refuses connections, its peers report
//! that at once and the monitor marks it down within tens of milliseconds, not after the
//! grace. An OSD that is only stopped (SIGSTOP: its socket still accepts) is not marked down
//! that way; it is left to the grace.

use std::time::{Duration, Instant};

mod common;

use cairn_client::Client;
use common::{free_port, signal, Cluster};

/// The id of the OSD `cairn up` started `i`-th (OSDs boot concurrently, so ids need not follow
/// the start order), from its log.
fn osd_id(dir: &std::path::Path, i: usize) -> i32 {
    let log = std::fs::read_to_string(dir.join(format!("osd{i}.log"))).unwrap();
    log.lines()
        .find_map(|l| {
            l.split("osd.")
                .nth(1)?
                .split(" serving on")
                .next()?
                .parse()
                .ok()
        })
        .expect("the OSD logs its id")
}

fn is_up(client: &Client, osd: i32) -> bool {
    client
        .map()
        .and_then(|m| m.osds.get(&osd).map(|o| o.up))
        .unwrap_or(false)
}

#[test]
fn a_killed_osd_is_marked_down_at_once_and_a_stopped_one_is_left_to_the_grace() {
    let mon = format!("127.0.0.1:{}", free_port());
    let cluster = Cluster::new("fastfail");
    let (ok, out) = cluster.up(&mon, &["--device-mib", "64", "--pg-num", "8"]);
    assert!(ok, "{out}");
    let pids = cluster.pids();
    assert_eq!(pids.len(), 4, "mon + 3 OSDs");
    let (ok, out) = cluster.cairn(&[
        "tell",
        "--mon",
        &mon,
        "osd.0",
        "config",
        "get",
        "osd_fast_fail_on_connection_refused",
    ]);
    assert!(ok && out.trim() == "true", "{out}");

    let rt = tokio::runtime::Runtime::new().unwrap();
    let client = rt
        .block_on(Client::connect_as(
            mon.parse().unwrap(),
            4343,
            Some(cluster.admin()),
        ))
        .unwrap();
    rt.block_on(async {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !(0..3).all(|osd| is_up(&client, osd)) {
            assert!(Instant::now() < deadline, "the OSDs never came up");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });

    let (stopped, victim) = (osd_id(&cluster.dir, 1), osd_id(&cluster.dir, 2));
    let survivor = 3 - stopped - victim;

    // Stopped, not gone: three heartbeat intervals later it is still up.
    signal("-STOP", pids[2]);
    std::thread::sleep(Duration::from_secs(3));
    let still_up = is_up(&client, stopped);
    signal("-CONT", pids[2]);
    assert!(
        still_up,
        "a stopped (silent) OSD was marked down before the grace"
    );

    // Gone: its address refuses connections, and it is down well inside the grace.
    signal("-9", pids[3]);
    let killed = Instant::now();
    rt.block_on(async {
        while is_up(&client, victim) {
            assert!(
                killed.elapsed() < Duration::from_secs(10),
                "a killed OSD was still up 10 s later (the grace is 20 s)"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    eprintln!(
        "osd.{victim} marked down {:?} after kill -9",
        killed.elapsed()
    );
    assert!(
        is_up(&client, stopped) && is_up(&client, survivor),
        "only the killed OSD is down"
    );
}
