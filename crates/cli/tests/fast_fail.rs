//! Fast failure detection with real processes (`cairn up`, 3 OSDs, the default 20 s heartbeat
//! grace): an OSD killed with `kill -9` on a live host refuses connections, its peers report
//! that at once and the monitor marks it down within tens of milliseconds, not after the
//! grace. An OSD that is only stopped (SIGSTOP: its socket still accepts) is not marked down
//! that way; it is left to the grace. An OSD resumed after being stopped does not report the
//! peers it could not hear while it was stopped.

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

    let (rt, client) = admin_client(&cluster, &mon, 4343);
    wait_up(&rt, &client, &[0, 1, 2]);

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

/// The epoch OSD `osd` last booted at, in the client's map.
fn incarnation(client: &Client, osd: i32) -> Option<u64> {
    client
        .map()
        .and_then(|m| m.osds.get(&osd).and_then(|o| o.up_from))
}

/// A runtime and a client of the cluster at `mon` as its administrator, with client id `id`.
fn admin_client(cluster: &Cluster, mon: &str, id: u64) -> (tokio::runtime::Runtime, Client) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let client = rt
        .block_on(Client::connect_as(
            mon.parse().unwrap(),
            id,
            Some(cluster.admin()),
        ))
        .unwrap();
    (rt, client)
}

/// Waits until every OSD in `osds` is up in the map, for at most 30 s.
fn wait_up(rt: &tokio::runtime::Runtime, client: &Client, osds: &[i32]) {
    rt.block_on(async {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !osds.iter().all(|&osd| is_up(client, osd)) {
            assert!(Instant::now() < deadline, "the OSDs never came up");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
}

#[test]
fn osds_resumed_after_a_stop_do_not_report_the_peers_they_could_not_hear() {
    let mon = format!("127.0.0.1:{}", free_port());
    let cluster = Cluster::new("resumed");
    let grace = Duration::from_secs(3);
    let (ok, out) = cluster.up(
        &mon,
        &[
            "--osds",
            "4",
            "--device-mib",
            "64",
            "--pg-num",
            "8",
            "--heartbeat-grace-s",
            "3",
        ],
    );
    assert!(ok, "{out}");
    let pids = cluster.pids();
    assert_eq!(pids.len(), 5, "mon + 4 OSDs");
    let (rt, client) = admin_client(&cluster, &mon, 4344);
    wait_up(&rt, &client, &[0, 1, 2, 3]);
    let ids: Vec<i32> = (0..4).map(|i| osd_id(&cluster.dir, i)).collect();
    let (frozen, healthy) = (&ids[..2], &ids[2..]);
    // Two heartbeat intervals: every OSD watches every peer and has heard it.
    std::thread::sleep(Duration::from_secs(2));

    // Two OSDs stop for twice the grace. `nodown` keeps them up in the map, so on resuming
    // they are reporters the monitor listens to: two of them are enough to mark a peer down
    // if they report the silence they caused themselves.
    let frozen_args: Vec<String> = frozen.iter().map(i32::to_string).collect();
    let mut nodown = vec!["osd", "--mon", &mon, "add-nodown"];
    nodown.extend(frozen_args.iter().map(String::as_str));
    let (ok, out) = cluster.cairn(&nodown);
    assert!(ok, "{out}");
    let before: std::collections::HashMap<i32, Option<u64>> = healthy
        .iter()
        .map(|&osd| (osd, incarnation(&client, osd)))
        .collect();
    for i in 0..2 {
        signal("-STOP", pids[1 + i]);
    }
    std::thread::sleep(grace * 2);
    for i in 0..2 {
        signal("-CONT", pids[1 + i]);
    }
    // A healthy OSD marked down boots again at once: its incarnation (up_from) tells, where
    // a look at `up` could fall between the two epochs.
    let resumed = Instant::now();
    while resumed.elapsed() < grace * 2 {
        for &osd in healthy {
            assert!(
                is_up(&client, osd) && incarnation(&client, osd) == before[&osd],
                "osd.{osd} was marked down on reports of OSDs that were themselves stopped"
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    for i in 0..2 {
        let log = std::fs::read_to_string(cluster.dir.join(format!("osd{i}.log"))).unwrap();
        assert!(
            log.contains("heartbeat loop stalled"),
            "a resumed OSD logs its own stall"
        );
    }

    // The resumed OSDs still report a peer that really goes silent.
    let silent = healthy[0];
    signal("-STOP", pids[3]);
    let stopped = Instant::now();
    rt.block_on(async {
        while is_up(&client, silent) {
            assert!(
                stopped.elapsed() < grace * 6,
                "a silent OSD was still up six grace periods later"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    signal("-CONT", pids[3]);
    for &osd in frozen.iter().chain(&healthy[1..]) {
        assert!(is_up(&client, osd), "osd.{osd} is up");
    }
}
