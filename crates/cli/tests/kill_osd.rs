//! Failure and recovery with real processes: `cairn up` (3 OSDs, pool size 3, min_size 2, a
//! 2 s heartbeat grace), writers in this process, then `kill -9` of one OSD while writes are in
//! flight. Pass: no acknowledged write is lost, writes continue degraded, the OSD restarts from
//! its directory, log-based recovery brings it back, every PG goes active+clean, and after
//! `cairn down` every copy of every object on all three stores is byte-identical (crc32c).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod common;

use cairn_client::Client;
use common::{copies, free_port, signal, Cluster};

fn payload(i: usize, round: usize) -> Vec<u8> {
    let size = [0, 1, 4096, 10_000, 65_536, 300_000][i % 6];
    (0..size)
        .map(|b| {
            (b as u32)
                .wrapping_mul(2_654_435_761)
                .wrapping_add((i * 31 + round) as u32) as u8
        })
        .collect()
}

type Acked = Arc<Mutex<BTreeMap<String, u32>>>;

/// Writes objects in a loop; records each acknowledged (name -> crc32c) and counts the
/// acknowledgements in `acks`, until told to stop.
async fn writer(
    client: Arc<Client>,
    id: usize,
    acked: Acked,
    acks: Arc<AtomicUsize>,
    stop: Arc<Mutex<bool>>,
) -> usize {
    let mut failures = 0;
    let mut round = 0;
    while !*stop.lock().unwrap() {
        round += 1;
        let i = (round * 7 + id) % 120;
        let name = format!("w{id}-obj{i}");
        let data = payload(i, round);
        match client.write_full("data", &name, &data).await {
            Ok(_) => {
                acked
                    .lock()
                    .unwrap()
                    .insert(name, crc_fast::crc32_iscsi(&data));
                acks.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                failures += 1;
                eprintln!("writer {id}: {e}");
                // The write may or may not have happened: whatever is read later must be
                // one of the acknowledged versions, so forget this object's expectation.
                acked.lock().unwrap().remove(&name);
            }
        }
    }
    failures
}

async fn wait_for(what: &str, secs: u64, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !ok() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn all_clean(client: &Client) -> bool {
    for osd in 0..3 {
        match client.tell(osd, &["pg".into(), "stats".into()]).await {
            Ok(text) => {
                if text.lines().any(|l| !l.starts_with("active+clean")) {
                    return false;
                }
            }
            Err(_) => return false,
        }
    }
    true
}

/// The Prometheus page of the OSD whose log is `log`, fetched over HTTP.
fn metrics_of(log: &Path) -> String {
    use std::io::{Read, Write};
    let text = std::fs::read_to_string(log).unwrap();
    let url = text
        .lines()
        .find_map(|l| l.split("metrics on http://").nth(1))
        .expect("the OSD logs its metrics address");
    let addr = url.trim_end_matches("/metrics").trim();
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    out
}

fn counter(page: &str, name: &str) -> f64 {
    page.lines()
        .filter(|l| l.starts_with(name))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Sum of the samples of `name` whose labels contain `label`.
fn labelled(page: &str, name: &str, label: &str) -> f64 {
    page.lines()
        .filter(|l| l.starts_with(name) && l.contains(label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[test]
fn kill_9_an_osd_during_writes_then_recover() {
    let mon = format!("127.0.0.1:{}", free_port());
    let cluster = Cluster::new("kill");
    let dir = cluster.dir.clone();
    let d = cluster.arg();
    let (ok, out) = cluster.up(
        &mon,
        &[
            "--device-mib",
            "256",
            "--pg-num",
            "16",
            "--heartbeat-grace-s",
            "2",
            "--osd-arg=--measure-capacity",
        ],
    );
    assert!(ok, "{out}");
    let pids = cluster.pids();
    assert_eq!(pids.len(), 4, "mon + 3 OSDs");

    let rt = common::runtime();
    let acked: Acked = Arc::default();
    // Acknowledged writes (the map keeps one entry per object name, which the writers reuse).
    let acks = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(Mutex::new(false));
    let client = rt.block_on(async {
        let mut c = Client::connect_as(mon.parse().unwrap(), 4242, Some(cluster.admin()))
            .await
            .unwrap();
        c.op_timeout_ms = 60_000;
        let c = Arc::new(c);
        wait_for("the pool to be writable", 30, || true).await;
        c
    });
    let writers: Vec<_> = (0..4)
        .map(|id| {
            let task = writer(
                client.clone(),
                id,
                acked.clone(),
                acks.clone(),
                stop.clone(),
            );
            rt.spawn(task)
        })
        .collect();
    rt.block_on(wait_for("100 acknowledged writes", 60, || {
        acks.load(Ordering::Relaxed) >= 100
    }));

    // kill -9 osd.2 with writes in flight.
    signal("-9", pids[3]);
    let before = acks.load(Ordering::Relaxed);
    let killed_at = Instant::now();
    rt.block_on(wait_for("degraded writes to continue", 90, || {
        acks.load(Ordering::Relaxed) >= before + 150
    }));
    eprintln!(
        "150 degraded writes done {:?} after the kill",
        killed_at.elapsed()
    );

    // Restart it from its directory (same identity), as an operator would.
    let osd2 = dir.join("osd2").display().to_string();
    let mut child = cluster.start_with_keyring(
        "osd2-restart.log",
        "osd2.keyring",
        &[
            "osd",
            "run",
            "--mon",
            &mon,
            "--data",
            &osd2,
            "--host",
            "host2",
            "--device-mib",
            "256",
            "--heartbeat-grace-s",
            "2",
            "--measure-capacity",
        ],
    );
    let restarted = Instant::now();
    rt.block_on(async {
        let deadline = Instant::now() + Duration::from_secs(90);
        while !all_clean(&client).await {
            assert!(Instant::now() < deadline, "cluster never became clean");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
    eprintln!(
        "all PGs active+clean {:?} after the restart",
        restarted.elapsed()
    );
    // The capacity its first boot measured (unless that measurement was refused on a busy
    // machine) is reused: the restart neither waits for the probe nor writes its objects.
    let first = std::fs::read_to_string(dir.join("osd2.log")).unwrap_or_default();
    let again = std::fs::read_to_string(dir.join("osd2-restart.log")).unwrap_or_default();
    if first.contains("capacity measured through the store") {
        assert!(
            again.contains("capacity as measured at the first boot")
                && !again.contains("capacity measured through the store"),
            "the restarted OSD measured again: {again}"
        );
    } else {
        assert!(first.contains("capacity not measured"), "{first}");
    }

    // Recovery really moved objects, and the metrics say so.
    let recovered: f64 = (0..2)
        .map(|i| {
            let page = metrics_of(&dir.join(format!("osd{i}.log")));
            assert!(page.contains("cairn_osd_ops_total"), "{page}");
            assert!(page.contains("cairn_osd_sched_dispatched_total"));
            assert!(page.contains("cairn_osd_pgs{"));
            assert!(counter(&page, "cairn_osd_capacity_iops") > 0.0, "{page}");
            counter(&page, "cairn_osd_recovery_objects_total")
        })
        .sum();
    eprintln!("objects recovered by osd.0 and osd.1: {recovered}");
    assert!(
        recovered > 0.0,
        "the restarted OSD missed writes: recovery must have pushed them"
    );
    // Invariant 2: every recovery step moving data through an OSD's store, its own pulls and
    // pushes as primary included, was a request through that OSD's scheduler: a recovery-class
    // one, or a client-class one when client I/O waited on it (recovery before a PG
    // activates; a longer one is filled in the background).
    let (mut pushed, mut blocking) = (0.0, 0.0);
    for i in 0..2 {
        let page = metrics_of(&dir.join(format!("osd{i}.log")));
        let steps = counter(&page, "cairn_osd_recovery_steps_total");
        let urgent = counter(&page, "cairn_osd_recovery_blocking_steps_total");
        let dispatched = labelled(
            &page,
            "cairn_osd_sched_dispatched_total",
            "class=\"recovery\"",
        );
        eprintln!("osd.{i}: {steps} recovery steps ({urgent} blocking client I/O), {dispatched} recovery-class requests scheduled");
        assert!(
            urgent <= steps,
            "osd.{i}: {urgent} blocking of {steps} steps"
        );
        assert!(
            dispatched >= steps - urgent,
            "osd.{i}: {} background recovery steps but only {dispatched} recovery-class requests went through its scheduler",
            steps - urgent
        );
        pushed += labelled(&page, "cairn_osd_recovery_steps_total", "kind=\"push\"");
        blocking += urgent;
    }
    assert!(pushed > 0.0, "the surviving primaries pushed nothing");
    eprintln!("recovery steps that blocked client I/O: {blocking}");

    *stop.lock().unwrap() = true;
    let failures: usize = rt.block_on(async {
        let mut n = 0;
        for w in writers {
            n += w.await.unwrap();
        }
        n
    });
    eprintln!("writes that failed (retried by the writers): {failures}");
    rt.block_on(async {
        let expected = acked.lock().unwrap().clone();
        assert!(expected.len() >= 200);
        for (name, crc) in &expected {
            let data = client.read("data", name).await.unwrap();
            assert_eq!(
                crc_fast::crc32_iscsi(&data),
                *crc,
                "{name}: acknowledged data lost"
            );
        }
    });

    // kill -9 the monitor and restart it from its directory: the map survives, and every
    // daemon and client resumes following it (a new pool is created and used).
    let epoch_before = client.epoch();
    signal("-9", pids[0]);
    std::thread::sleep(Duration::from_millis(300));
    let mon_dir = dir.join("mon").display().to_string();
    let mut mon_child = cluster.start_with_keyring(
        "mon-restart.log",
        "mon.keyring",
        &[
            "mon",
            "--listen",
            &mon,
            "--data",
            &mon_dir,
            "--heartbeat-grace-s",
            "2",
        ],
    );
    let (ok, out) = cluster.cairn(&["pool", "--mon", &mon, "create", "after", "--pg-num", "8"]);
    assert!(ok, "{out}");
    let (ok, out) = cluster.cairn(&["status", "--mon", &mon]);
    assert!(ok && out.contains("3 up"), "{out}");
    rt.block_on(async {
        let deadline = Instant::now() + Duration::from_secs(60);
        while client
            .write_full("after", "x", b"after the monitor restart")
            .await
            .is_err()
        {
            assert!(
                Instant::now() < deadline,
                "new pool never writable after the mon restart"
            );
        }
        assert!(
            client.epoch() > epoch_before,
            "the client follows the restarted monitor"
        );
        assert_eq!(
            client.read("after", "x").await.unwrap(),
            b"after the monitor restart"
        );
    });

    drop(client);
    drop(rt);
    let expected = acked.lock().unwrap().clone();
    let (ok, out) = cluster.cairn(&["down", "--dir", &d]);
    assert!(ok, "{out}");
    let _ = child.wait();
    let _ = mon_child.wait();
    std::thread::sleep(Duration::from_millis(500));
    let found = copies(&dir, 3);
    for (name, crc) in &expected {
        assert_eq!(
            found.get(name),
            Some(&vec![*crc; 3]),
            "{name}: copies differ"
        );
    }
    for (name, crcs) in found.iter().filter(|(n, _)| n.as_str() != "x") {
        assert_eq!(crcs.len(), 3, "{name}: not on every OSD");
        assert!(crcs.iter().all(|c| *c == crcs[0]), "{name}: copies differ");
    }
    drop(cluster);
}
