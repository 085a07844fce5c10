//! OSDs on SSD-cached HDDs with real processes: `cairn up --osd-profile hdd-7200
//! --osd-cache-profile nvme-p3700 --cache-mode wb`, objects written (acknowledged while their
//! lines are still dirty in the caches), then `kill -9` of every OSD. Pass: `cairn up` restarts
//! them, each cache attaches warm (its clean and dirty lines kept), every object reads back
//! by checksum, `cairn tell osd.N cache ...` shows statistics, changes parameters and the
//! mode and loads I/O classes, the Prometheus page carries the cache's series, the background cleaner's write-back
//! runs through the OSD's scheduler as best-effort work, and a flush leaves no dirty line.

mod common;

use common::{
    admin_client, free_port, payload, runtime, signal, verify_objects, write_objects, Cluster,
};

/// The count column of the `| NAME | COUNT | % |` row of `cache stats`.
fn stat(text: &str, name: &str) -> u64 {
    text.lines()
        .find(|l| l.split('|').nth(1).is_some_and(|c| c.trim() == name))
        .and_then(|l| l.split('|').nth(2))
        .and_then(|c| c.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} row in: {text}"))
}

/// Object `i`: 4 to 20 KiB.
fn object(i: usize) -> Vec<u8> {
    payload(i, 4096 * (1 + i % 5))
}

#[test]
fn a_cached_osd_killed_with_dirty_lines_restarts_warm_and_loses_nothing() {
    let cluster = Cluster::new("cached-osd");
    let mon = format!("127.0.0.1:{}", free_port());
    let settings = [
        "--device-mib",
        "256",
        "--pg-num",
        "8",
        "--osd-profile",
        "hdd-7200",
        "--osd-cache-profile",
        "nvme-p3700",
        "--osd-cache-mib",
        "32",
        "--cache-mode",
        "wb",
    ];
    let (ok, out) = cluster.up(&mon, &settings);
    assert!(ok, "{out}");
    let metrics = out
        .split_whitespace()
        .skip_while(|w| *w != "osd0")
        .nth(1)
        .map(str::to_string)
        .unwrap_or_else(|| panic!("no metrics address of osd0 in: {out}"));
    let pids = cluster.pids();
    assert_eq!(pids.len(), 4, "mon + 3 OSDs");
    let tell = |osd: &str, args: &[&str]| {
        let mut all = vec!["tell", "--mon", mon.as_str(), osd];
        all.extend_from_slice(args);
        let (ok, out) = cluster.cairn(&all);
        assert!(ok, "cairn {all:?}: {out}");
        out
    };

    let rt = runtime();
    let client = admin_client(&rt, &cluster, &mon);
    write_objects(&rt, &client, 40, object);
    let before = tell("osd.0", &["cache", "stats"]);
    assert!(before.contains("Cache mode: wb"), "{before}");
    assert!(
        stat(&before, "Dirty") > 0,
        "writes wait dirty in the cache: {before}"
    );
    let addr = metrics
        .trim_start_matches("http://")
        .trim_end_matches(',')
        .trim_end_matches("/metrics");
    let page = common::http_get(addr, "/metrics");
    assert!(
        page.contains("cairn_cache_dirty_lines{cache=\"osd.0\"}"),
        "{page}"
    );

    // kill -9 of every OSD with dirty lines in their caches, then restart.
    for pid in &pids[1..] {
        signal("-9", *pid);
    }
    let (ok, out) = cluster.up(&mon, &settings);
    assert!(ok, "{out}");
    let after = tell("osd.0", &["cache", "stats"]);
    assert!(
        stat(&after, "Occupancy") > 0 && stat(&after, "Dirty") > 0,
        "the cache restarts warm, its dirty lines kept: {after}"
    );
    verify_objects(&rt, &client, 40, object, "after the restart");

    // Parameters change live: ACP cleans without waiting for idle time, and its write-back
    // runs through the OSD's scheduler as best-effort work.
    assert!(stat(&tell("osd.1", &["cache", "stats"]), "Dirty") > 0);
    tell("osd.1", &["sched", "history", "clear"]);
    tell("osd.1", &["cache", "set-param", "cleaning", "policy=acp"]);
    let config = tell("osd.1", &["cache", "config"]);
    assert!(config.contains("\"acp\""), "{config}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(90);
    while stat(&tell("osd.1", &["cache", "stats"]), "Dirty") > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the cleaner never emptied the cache"
        );
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    let history = tell("osd.1", &["sched", "history"]);
    assert!(
        history.contains("\"cache_clean\"") && history.contains("best_effort"),
        "{history}"
    );
    // A flush and a change of mode (run in the background: they write every dirty line to
    // the HDD) leave no dirty line.
    let wait_until = |osd: &str, done: &dyn Fn(&str) -> bool| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
        loop {
            let stats = tell(osd, &["cache", "stats"]);
            if done(&stats) {
                return stats;
            }
            assert!(std::time::Instant::now() < deadline, "{osd}: {stats}");
            std::thread::sleep(std::time::Duration::from_millis(500));
        }
    };
    assert!(tell("osd.0", &["cache", "flush"]).contains("writing back"));
    wait_until("osd.0", &|s| stat(s, "Dirty") == 0);
    tell("osd.2", &["cache", "set-mode", "wt", "flush"]);
    let wt = wait_until("osd.2", &|s| s.contains("Cache mode: wt"));
    assert_eq!(stat(&wt, "Dirty"), 0, "{wt}");
    // I/O classes, as casadm loads them: seed 004's file (requests up to 128 KiB cached).
    let csv = "IO class id,IO class name,Eviction priority,Allocation\n\
               0,unclassified,22,0\n\
               1,request_size:le:131072,1,1\n";
    tell("osd.0", &["cache", "load-ioclass", csv]);
    assert!(tell("osd.0", &["cache", "ioclass"]).contains("request_size:le:131072"));
    let (ok, out) = cluster.cairn(&[
        "tell",
        "--mon",
        &mon,
        "osd.0",
        "cache",
        "load-ioclass",
        "1,2",
    ]);
    assert!(!ok, "a malformed class file is refused: {out}");
    let (ok, out) = cluster.cairn(&["tell", "--mon", &mon, "osd.0", "cache", "set-mode", "xx"]);
    assert!(!ok && out.contains("xx"), "{out}");
    let (ok, out) = cluster.cairn(&[
        "tell",
        "--mon",
        &mon,
        "osd.0",
        "cache",
        "set-param",
        "cleaning",
        "nokey",
    ]);
    assert!(!ok && out.contains("KEY=VALUE"), "{out}");
}
