//! `cairn up` starts a monitor and three OSD processes on a free loopback port in a temporary
//! directory; `cairn put`/`get`/`stat`/`rm` and a short `cairn bench` work against it; `cairn
//! down` stops every process. All waits are bounded and the cluster is torn down even when an
//! assertion fails.

mod common;

use common::{cairn, free_port, Cluster};

#[test]
fn up_put_get_bench_down() {
    let mon = format!("127.0.0.1:{}", free_port());
    let cluster = Cluster::new("up");
    let dir = cluster.dir.clone();
    let d = cluster.arg();
    let (ok, out) = cluster.cairn(&["up", "--dir", &d, "--mon", &mon, "--op-shards", "65"]);
    assert!(
        !ok && out.contains("op shards must be in 1..=64"),
        "a bad shard count must be refused before anything starts: {out}"
    );
    assert!(!dir.join("pids").exists(), "nothing was started");
    let (ok, out) = cluster.cairn(&["up", "--dir", &d, "--mon", &mon, "--osd-threads", "65"]);
    assert!(
        !ok && out.contains("--osd-threads must be 1..=64, got 65"),
        "a bad worker-thread count must be refused before anything starts: {out}"
    );
    assert!(!dir.join("pids").exists(), "nothing was started");
    let (ok, out) = cluster.up(
        &mon,
        &[
            "--device-mib",
            "1024",
            "--pg-num",
            "32",
            "--op-shards",
            "3",
            "--osd-threads",
            "2",
            "--fast-fail-on-connection-refused",
            "false",
            "--osd-arg=--measure-capacity",
        ],
    );
    assert!(ok, "{out}");
    // Every daemon's Prometheus page is printed; the monitor's shows the cluster it made.
    let pages = out
        .lines()
        .find_map(|l| l.strip_prefix("Prometheus metrics: "))
        .unwrap_or_else(|| panic!("no metrics line: {out}"));
    let mon_page = pages
        .split(", ")
        .find_map(|p| p.strip_prefix("mon http://"))
        .and_then(|p| p.strip_suffix("/metrics"))
        .unwrap_or_else(|| panic!("no monitor page in {pages}"));
    assert_eq!(pages.matches("osd").count(), 3, "{pages}");
    let page = common::http_get(mon_page, "/metrics");
    for line in [
        "cairn_mon_osds_up 3",
        "cairn_mon_pool_pg_num{pool=\"data\"} 32",
    ] {
        assert!(page.lines().any(|l| l == line), "{line} not on:\n{page}");
    }
    // Directory osdN holds osd.N, whatever order the OSDs booted in.
    for i in 0..3 {
        let log = std::fs::read_to_string(dir.join(format!("osd{i}.log"))).unwrap();
        assert!(
            log.contains(&format!("osd.{i} serving on")),
            "osd{i}/ is not osd.{i}: {log}"
        );
    }
    for osd in ["osd.0", "osd.2"] {
        let get = |key| cluster.cairn(&["tell", "--mon", &mon, osd, "config", "get", key]);
        let (ok, out) = get("osd_op_num_shards");
        assert!(
            ok && out.trim() == "3",
            "{osd}'s op shards from `up`: {out}"
        );
        let (ok, out) = get("osd_op_num_threads");
        assert!(
            ok && out.trim() == "2",
            "{osd}'s runtime workers from `up`: {out}"
        );
        let (ok, out) = get("osd_fast_fail_on_connection_refused");
        assert!(
            ok && out.trim() == "false",
            "{osd}'s fast fail from `up`: {out}"
        );
    }
    // Each OSD measured its capacity through the store at boot, unless its runs disagreed (a
    // busy machine): then its log says why and the configured capacity (21500 IOPS without a
    // profile) stays. Which process got which id depends on boot order, so logs and ids are
    // matched by count.
    let measured_ids = (0..3)
        .filter(|n| {
            let (ok, out) = cluster.cairn(&[
                "tell",
                "--mon",
                &mon,
                &format!("osd.{n}"),
                "config",
                "get",
                "osd_mclock_max_capacity_iops",
            ]);
            let iops: f64 = out.trim().parse().unwrap_or(0.0);
            assert!(ok && iops > 0.0, "osd.{n}'s capacity: {out}");
            iops != 21500.0
        })
        .count();
    let mut measured_logs = 0;
    for i in 0..3 {
        let log = std::fs::read_to_string(dir.join(format!("osd{i}.log"))).unwrap_or_default();
        if log.contains("capacity measured through the store") {
            measured_logs += 1;
        } else {
            assert!(log.contains("capacity not measured"), "osd{i}.log: {log}");
        }
    }
    assert_eq!(
        measured_ids, measured_logs,
        "capacities in force vs measurements logged"
    );
    // A second `up` over the running cluster starts nothing and keeps every daemon; one
    // naming another monitor address is refused.
    let (ok, out) = cluster.up(&mon, &["--device-mib", "1024", "--pg-num", "32"]);
    assert!(
        ok && out.contains("already running: mon, osd0, osd1, osd2; started: none"),
        "{out}"
    );
    let other_mon = format!("127.0.0.1:{}", free_port());
    let (ok, out) = cluster.up(&other_mon, &[]);
    assert!(
        !ok && out.contains(&format!("runs on {mon}")),
        "a second `up` with another monitor address must refuse: {out}"
    );
    let payload = dir.join("payload.bin");
    let data: Vec<u8> = (0..1_000_003u32)
        .map(|i| i.wrapping_mul(2_654_435_761) as u8)
        .collect();
    std::fs::write(&payload, &data).unwrap();
    let (ok, out) = cluster.cairn(&[
        "put",
        "--mon",
        &mon,
        "-p",
        "data",
        "big",
        &payload.display().to_string(),
    ]);
    assert!(ok, "{out}");
    let back = dir.join("back.bin");
    // Reads object `name` into `back` and checks it holds `data`.
    let reads_back = |name: &str| {
        let (ok, out) = cluster.cairn(&[
            "get",
            "--mon",
            &mon,
            "-p",
            "data",
            name,
            &back.display().to_string(),
        ]);
        assert!(ok, "{out}");
        assert_eq!(
            crc_fast::crc32_iscsi(&std::fs::read(&back).unwrap()),
            crc_fast::crc32_iscsi(&data)
        );
    };
    reads_back("big");
    let (ok, out) = cluster.cairn(&["stat", "--mon", &mon, "-p", "data", "big"]);
    assert!(ok && out.contains("size 1000003"), "{out}");
    let (ok, out) = cluster.cairn(&["rm", "--mon", &mon, "-p", "data", "big"]);
    assert!(ok, "{out}");
    let (ok, _) = cluster.cairn(&[
        "get",
        "--mon",
        &mon,
        "-p",
        "data",
        "big",
        &back.display().to_string(),
    ]);
    assert!(!ok, "a removed object must not be readable");
    let plot_prefix = dir.join("bench").display().to_string();
    let (ok, out) = cluster.cairn(&[
        "bench",
        "--mon",
        &mon,
        "-p",
        "data",
        "2",
        "write",
        "-b",
        "4096",
        "-t",
        "4",
        "--client-threads",
        "3",
        "--plot",
        &plot_prefix,
    ]);
    assert!(ok && out.contains("Average IOPS"), "{out}");
    // The progress lines carry each second's p99, and the run is drawn second by second.
    assert!(out.contains("cur ops/s   p99 ms"), "{out}");
    let p99s: Vec<f64> = out
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|f| f.len() == 6 && f[0].parse::<u64>().is_ok())
        .map(|f| f[5].parse().unwrap())
        .collect();
    assert!(!p99s.is_empty() && p99s.iter().any(|&p| p > 0.0), "{out}");
    for suffix in ["-ops.png", "-latency.png"] {
        let path = format!("{plot_prefix}{suffix}");
        assert!(out.contains(&format!("Plot: {path}")), "{out}");
        let png = std::fs::read(&path).unwrap();
        assert!(
            png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 2000,
            "{path}"
        );
    }
    let removed = out
        .lines()
        .find_map(|l| l.strip_prefix("Removed "))
        .and_then(|l| l.split(' ').next())
        .and_then(|n| n.parse::<u64>().ok());
    assert_eq!(
        removed,
        Some(total_ops(&out)),
        "the run removes every object it wrote: {out}"
    );
    // A write run kept with --no-cleanup is read back by seq and rand; each write run names
    // its objects anew (as rados bench does), so a second one adds objects.
    let bench_write_kept = || {
        let (ok, out) = cluster.cairn(&[
            "bench",
            "--mon",
            &mon,
            "-p",
            "data",
            "1",
            "write",
            "-b",
            "4096",
            "-t",
            "2",
            "--no-cleanup",
        ]);
        assert!(ok, "{out}");
        total_ops(&out)
    };
    let listed = || {
        let (ok, out) = cluster.cairn(&["ls", "--mon", &mon, "-p", "data"]);
        assert!(ok, "{out}");
        out.lines()
            .filter(|l| l.starts_with("benchmark_data_"))
            .count() as u64
    };
    assert_eq!(listed(), 0, "nothing left by the run that cleaned up");
    let first = bench_write_kept();
    assert!(first > 0 && listed() == first, "{first} written");
    for mode in ["seq", "rand"] {
        let (ok, out) =
            cluster.cairn(&["bench", "--mon", &mon, "-p", "data", "1", mode, "-t", "2"]);
        assert!(ok && total_ops(&out) > 0, "{mode}: {out}");
        if mode == "seq" {
            assert!(
                total_ops(&out) <= first,
                "seq reads each kept object once: {out}"
            );
        }
    }
    let second = bench_write_kept();
    assert_eq!(
        listed(),
        first + second,
        "the second run's objects are new ones"
    );
    let (ok, out) = cluster.cairn(&[
        "bench",
        "--mon",
        &mon,
        "-p",
        "data",
        "2",
        "write",
        "--client-threads",
        "0",
    ]);
    assert!(
        !ok && out.contains("--client-threads must be 1..=64, got 0"),
        "a bad client thread count must be refused: {out}"
    );
    let (ok, out) = cluster.cairn(&["status", "--mon", &mon]);
    assert!(ok && out.contains("3 up, 3 in"), "{out}");
    let (ok, out) = cluster.cairn(&[
        "put",
        "--mon",
        &mon,
        "-p",
        "data",
        "kept",
        &payload.display().to_string(),
    ]);
    assert!(ok, "{out}");
    // `osd df`: with size 3 on three OSDs each holds every PG and every client object `ls`
    // lists (the kept bench objects, the bench's metadata, `kept`), the PGs' meta objects left
    // out; each PG has one leader.
    let (ok, out) = cluster.cairn(&["ls", "--mon", &mon, "-p", "data"]);
    assert!(ok, "{out}");
    let objects = out.lines().count().to_string();
    let (ok, out) = cluster.cairn(&["osd", "--mon", &mon, "df"]);
    assert!(ok, "{out}");
    let rows: Vec<Vec<&str>> = out
        .lines()
        .filter(|l| l.starts_with("osd."))
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows.len(), 3, "{out}");
    for row in &rows {
        assert_eq!((row[1], row[3]), ("32", objects.as_str()), "{out}");
    }
    let led: u64 = rows.iter().map(|r| r[2].parse::<u64>().unwrap()).sum();
    assert_eq!(led, 32, "{out}");
    // `df`: raw space over the three OSDs; pool `data` counts the same objects from its 32
    // primaries, its USED is three copies of STORED, and it has room left.
    let (ok, out) = cluster.cairn(&["df", "--mon", &mon]);
    assert!(
        ok && out.contains("--- RAW STORAGE (3 of 3 OSDs up) ---"),
        "{out}"
    );
    let row: Vec<&str> = out
        .lines()
        .find(|l| l.starts_with("data "))
        .unwrap_or_else(|| panic!("no pool row: {out}"))
        .split_whitespace()
        .collect();
    assert_eq!(
        (row[1], row[2], row[5]),
        ("1", "32", objects.as_str()),
        "{out}"
    );
    let bytes = |value: &str, unit: &str| {
        let scale = match unit {
            "B" => 1.0,
            "KiB" => 1024.0,
            "MiB" => 1024.0 * 1024.0,
            "GiB" => 1024.0 * 1024.0 * 1024.0,
            other => panic!("unit {other}"),
        };
        value.parse::<f64>().unwrap() * scale
    };
    let (stored, used) = (bytes(row[3], row[4]), bytes(row[6], row[7]));
    assert!(stored > 0.0 && (used / stored - 3.0).abs() < 0.05, "{out}");
    assert!(bytes(row[9], row[10]) > 0.0, "{out}");
    assert!(!out.contains("not counted"), "{out}");
    // Maintenance checks: one OSD of three may stop (size 3, min_size 2), two may not, none is
    // safe to destroy while PGs map to it, an unknown one is refused.
    let osd = |args: &[&str]| {
        let mut all = vec!["osd", "--mon", &mon];
        all.extend_from_slice(args);
        cluster.cairn(&all)
    };
    let (ok, out) = osd(&["ok-to-stop", "0"]);
    assert!(
        ok && out.contains("osd.0 ok to stop") && out.contains("32 PGs would be degraded"),
        "{out}"
    );
    let (ok, out) = osd(&["ok-to-stop", "0", "1"]);
    assert!(
        !ok && out.contains("not ok to stop: 32 PGs would not serve")
            && out.contains("would keep 1 of min_size 2"),
        "{out}"
    );
    let (ok, out) = osd(&["safe-to-destroy", "2"]);
    assert!(
        !ok && out.contains("osd.2 is in the up or acting set of 32 PGs"),
        "{out}"
    );
    let (ok, out) = osd(&["ok-to-stop", "7"]);
    assert!(!ok && out.contains("no osd.7"), "{out}");
    // `pg ls...`: the pool's 32 PGs, each OSD in all of them, osd.0 primary of as many as
    // `osd df` says it leads, none degraded; an unknown OSD is refused.
    let pg = |args: &[&str]| {
        let mut all = vec!["pg", "--mon", &mon];
        all.extend_from_slice(args);
        let (ok, out) = cluster.cairn(&all);
        let rows = out.lines().filter(|l| l.starts_with("1.")).count();
        (ok, rows, out)
    };
    let led0 = rows.iter().find(|r| r[0] == "osd.0").unwrap()[2];
    for (args, want) in [
        (&["ls-by-pool", "data"][..], "32"),
        (&["ls-by-osd", "1"], "32"),
        (&["ls", "active+clean"], "32"),
        (&["ls", "degraded"], "0"),
        (&["ls-by-primary", "osd.0"], led0),
    ] {
        let (ok, n, out) = pg(args);
        assert!(ok && n.to_string() == want, "{args:?}: {n} rows\n{out}");
    }
    let (ok, _, out) = pg(&["ls-by-osd", "9"]);
    assert!(!ok && out.contains("no osd.9"), "{out}");
    // The daemons' log events reach their log files.
    let osd_log = std::fs::read_to_string(dir.join("osd0.log")).unwrap_or_default();
    assert!(
        osd_log
            .lines()
            .any(|l| l.contains("INFO") && l.contains("osd up")),
        "{osd_log}"
    );
    // An OSD killed with -9 is started again by `up`, alone; a pid in the file that is no
    // daemon of the cluster (a reused pid) is neither taken for one nor signalled by `down`.
    let pids = cluster.pids();
    common::signal("-9", pids[2]);
    common::wait_exited(pids[2]);
    // Marked down, it holds no up set's copy: the spread `status` prints is over the two OSDs
    // that are up (each holds every PG), not an imbalance of 0~32.
    let (ok, out) = cluster.cairn(&["osd", "--mon", &mon, "down", "1"]);
    assert!(ok, "{out}");
    let (ok, out) = cluster.cairn(&["status", "--mon", &mon]);
    assert!(
        ok && out.contains("2 up, 3 in")
            && out.contains("PGs per up OSD 32~32 (max deviation 0.0, 1 down OSD not counted)")
            && out.contains("  health: 1 OSDs down\n"),
        "{out}"
    );
    // `health detail` names the OSD, and (once the PGs have peered without it) the PGs.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let (ok, out) = cluster.cairn(&["health", "--mon", &mon, "detail"]);
        assert!(
            ok && out.starts_with("HEALTH_WARN 1 OSDs down")
                && out.contains("[WRN] OSD_DOWN: 1 OSDs down\n    osd.1 (host "),
            "{out}"
        );
        if out.contains("[WRN] PG_DEGRADED: 32 PGs degraded") {
            assert!(
                out.contains("    pg 1.0 is active+degraded, acting ["),
                "{out}"
            );
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{out}");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let mut stranger = std::process::Command::new("sleep")
        .arg("60")
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let list_stranger = || {
        let mut listed = std::fs::read_to_string(dir.join("pids")).unwrap();
        listed.push_str(&format!("{}\n", stranger.id()));
        std::fs::write(dir.join("pids"), listed).unwrap();
    };
    list_stranger();
    let (ok, out) = cluster.up(&mon, &["--device-mib", "1024", "--pg-num", "32"]);
    assert!(
        ok && out.contains("already running: mon, osd0, osd2; started: osd1"),
        "{out}"
    );
    assert_eq!(cluster.pids().len(), 4, "`up` lists its four daemons only");
    list_stranger();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let (ok, out) = cluster.cairn(&["status", "--mon", &mon]);
        if ok && out.contains("HEALTH_OK") && out.contains("3 up, 3 in") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the restarted OSD did not rejoin: {out}"
        );
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    reads_back("kept");
    let (ok, out) = cluster.cairn(&["health", "--mon", &mon]);
    assert!(ok && out.trim() == "HEALTH_OK", "{out}");
    let (ok, out) = cluster.cairn(&["down", "--dir", &d]);
    assert!(ok && out.contains("stopped 4"), "{out}");
    assert!(
        out.contains(&format!("left alone: pids [{}]", stranger.id())),
        "{out}"
    );
    assert!(
        stranger.try_wait().unwrap().is_none(),
        "`down` must not signal a process that is no daemon of the cluster"
    );
    stranger.kill().unwrap();
    stranger.wait().unwrap();
    // Each OSD took the SIGTERM as a request to stop: its ops ended and its store closed.
    for n in ["osd0", "osd1", "osd2"] {
        let log = std::fs::read_to_string(dir.join(format!("{n}.log"))).unwrap_or_default();
        assert!(
            log.contains(": SIGTERM: stopping") && log.contains(" stopped\n"),
            "--- {n}.log\n{log}"
        );
    }
    // The whole cluster restarts from its directory: the monitor's map (and so the OSD ids and
    // the pool) and every object come back.
    let (ok, out) = cluster.up(&mon, &["--device-mib", "1024", "--pg-num", "32"]);
    let logs: String = ["mon", "osd0", "osd1", "osd2"]
        .iter()
        .map(|n| {
            let text = std::fs::read_to_string(dir.join(format!("{n}.log"))).unwrap_or_default();
            format!("--- {n}.log\n{text}\n")
        })
        .collect();
    assert!(ok, "{out}\n{logs}");
    let log = std::fs::read_to_string(dir.join("mon.log")).unwrap_or_default();
    assert!(
        !log.contains("map at epoch 1\n"),
        "the restarted monitor must load its map: {log}"
    );
    reads_back("kept");
    let (ok, out) = cluster.cairn(&["down", "--dir", &d]);
    assert!(ok && out.contains("stopped 4"), "{out}");
    drop(cluster);
}

/// Bytes of a file that are allocated on disk (a sparse file has fewer than its length).
fn allocated_bytes(path: &std::path::Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).unwrap().blocks() * 512
}

#[test]
fn up_with_prefill_allocates_the_whole_device_file_before_serving() {
    let mon = format!("127.0.0.1:{}", free_port());
    let cluster = Cluster::new("prefill");
    let dir = cluster.dir.clone();
    let d = cluster.arg();
    // Starts the one-OSD cluster and returns its OSD's log.
    let up = || {
        let (ok, out) = cluster.up(
            &mon,
            &[
                "--osds",
                "1",
                "--device-mib",
                "64",
                "--pg-num",
                "8",
                "--prefill",
            ],
        );
        let log = std::fs::read_to_string(dir.join("osd0.log")).unwrap_or_default();
        assert!(ok, "{out}\n{log}");
        log
    };
    let data: Vec<u8> = (0..300_001u32).map(|i| (i % 251) as u8).collect();
    let back = dir.join("back.bin").display().to_string();
    let reads_back = || {
        let (ok, out) = cluster.cairn(&["get", "--mon", &mon, "-p", "data", "o", &back]);
        assert!(ok, "{out}");
        assert_eq!(
            crc_fast::crc32_iscsi(&std::fs::read(&back).unwrap()),
            crc_fast::crc32_iscsi(&data)
        );
    };
    let log = up();
    assert!(log.contains("prefilling 64 MiB"), "{log}");
    let block = dir.join("osd0").join("block");
    let len = std::fs::metadata(&block).unwrap().len();
    assert_eq!(len, 64 << 20);
    let allocated = allocated_bytes(&block);
    assert!(
        allocated >= len,
        "a prefilled device file has every block allocated ({allocated} of {len} bytes)"
    );
    let payload = dir.join("payload.bin");
    std::fs::write(&payload, &data).unwrap();
    let p = payload.display().to_string();
    let (ok, out) = cluster.cairn(&["put", "--mon", &mon, "-p", "data", "o", &p]);
    assert!(ok, "{out}");
    reads_back();
    let (ok, out) = cluster.cairn(&["down", "--dir", &d]);
    assert!(ok, "{out}");
    // A second start finds a formatted store and does not write zeros over it.
    let log = up();
    assert!(!log.contains("prefilling"), "{log}");
    reads_back();
    let (ok, out) = cluster.cairn(&["down", "--dir", &d]);
    assert!(ok, "{out}");
    drop(cluster);
}

#[test]
fn a_prefill_the_file_system_cannot_hold_is_refused_before_anything_starts() {
    let mon = format!("127.0.0.1:{}", free_port());
    let cluster = Cluster::new("prefill-too-big");
    std::fs::create_dir_all(&cluster.dir).unwrap();
    // Each device file as large as the file system's free space and a GiB more.
    let free_mib = cairn_blockdev::fs_free_bytes(&cluster.dir).unwrap() >> 20;
    let mib = (free_mib + 1024).to_string();
    let (ok, out) = cluster.up(&mon, &["--osds", "2", "--device-mib", &mib, "--prefill"]);
    assert!(!ok, "{out}");
    let need = format!("--prefill: 2 new device files of {mib} MiB need");
    assert!(out.contains(&need), "{out}");
    assert!(!cluster.dir.join("pids").exists(), "nothing was started");
    assert!(std::net::TcpStream::connect(&mon).is_err(), "no monitor");
    // The OSD itself refuses too (a config file may ask for it), and says why.
    let data = cluster.dir.join("osd").display().to_string();
    let (ok, out) = cairn(&[
        "osd",
        "run",
        "--mon",
        &mon,
        "--data",
        &data,
        "--device-mib",
        &mib,
        "--prefill",
    ]);
    assert!(!ok, "{out}");
    assert!(out.contains("cannot prefill:"), "{out}");
    assert!(
        out.contains("MiB not yet backed by its file system"),
        "{out}"
    );
    drop(cluster);
}

/// The "Total ops" a `cairn bench` run printed.
fn total_ops(out: &str) -> u64 {
    out.lines()
        .find_map(|l| l.strip_prefix("Total ops:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no total ops in {out}"))
}

/// Bad and oversized input to the data commands is refused before anything is built or sent,
/// `rm` of a missing object is an error (as `rados rm`), and a bench write run that fills
/// the cluster stops, removes every object it wrote, and reports the failure.
#[test]
fn data_commands_refuse_bad_input_and_a_failed_bench_cleans_up() {
    let mon = format!("127.0.0.1:{}", free_port());
    let cluster = Cluster::new("bench-full");
    let d = cluster.arg();
    let (ok, out) = cluster.up(
        &mon,
        &["--osds", "1", "--device-mib", "96", "--pg-num", "8"],
    );
    assert!(ok, "{out}");
    let bench = |args: &[&str]| {
        let mut all = vec!["bench", "--mon", &mon, "-p", "data"];
        all.extend_from_slice(args);
        cluster.cairn(&all)
    };
    let (ok, out) = bench(&["1", "write", "-b", "99999999999"]);
    assert!(
        !ok && out.contains("--block-size is 99999999999 bytes, past"),
        "{out}"
    );
    let (ok, out) = bench(&["1", "write", "-t", "5000"]);
    assert!(!ok && out.contains("past the limit of 4096"), "{out}");
    let big = cluster.dir.join("big.bin");
    std::fs::File::create(&big)
        .unwrap()
        .set_len(100 << 20)
        .unwrap();
    let (ok, out) = cluster.cairn(&[
        "put",
        "--mon",
        &mon,
        "-p",
        "data",
        "big",
        &big.display().to_string(),
    ]);
    assert!(!ok && out.contains("bytes, past the"), "{out}");
    let (ok, out) = cluster.cairn(&["rm", "--mon", &mon, "-p", "data", "missing"]);
    assert!(!ok && out.contains("no object `missing`"), "{out}");
    // 4 MiB objects for up to 60 s into a 96 MiB device: the OSD fills and refuses.
    let (ok, out) = bench(&["60", "write", "-t", "4"]);
    assert!(
        !ok && out.contains("bench stopped after") && out.contains("out of space"),
        "{out}"
    );
    assert!(out.contains("Removed "), "{out}");
    let (ok, out) = cluster.cairn(&["ls", "--mon", &mon, "-p", "data"]);
    assert!(
        ok && out.trim().is_empty(),
        "the failed run left objects: {out}"
    );
    // `pool set`: size 1 wants confirmation, a bad min_size is the monitor's refusal, a new
    // size resets min_size and `pool ls` shows both.
    let pool_set = |args: &[&str]| {
        let mut all = vec!["pool", "--mon", &mon, "set"];
        all.extend_from_slice(args);
        cluster.cairn(&all)
    };
    let (ok, out) = pool_set(&["data", "size", "1"]);
    assert!(!ok && out.contains("--yes-i-really-mean-it"), "{out}");
    let (ok, out) = pool_set(&["data", "min_size", "4"]);
    assert!(!ok && out.contains("min_size must be in 1..=size"), "{out}");
    let (ok, out) = pool_set(&["data", "pg_num", "64"]);
    assert!(!ok && out.contains("invalid value 'pg_num'"), "{out}");
    let (ok, out) = pool_set(&["data", "size", "3"]);
    assert!(ok && out.contains("pool 'data' size 3 min_size 2"), "{out}");
    let (ok, out) = pool_set(&["data", "size", "1", "--yes-i-really-mean-it"]);
    assert!(ok && out.contains("pool 'data' size 1 min_size 1"), "{out}");
    let (ok, out) = cluster.cairn(&["pool", "--mon", &mon, "ls"]);
    assert!(
        ok && out.contains("data size 1 min_size 1 pg_num 8"),
        "{out}"
    );
    // Weights: the override and the CRUSH weight show in the tree; out of range is refused.
    let osd = |args: &[&str]| {
        let mut all = vec!["osd", "--mon", &mon];
        all.extend_from_slice(args);
        cluster.cairn(&all)
    };
    let (ok, out) = osd(&["reweight", "0", "1.5"]);
    assert!(
        !ok && out.contains("reweight must be in 0..=1, not 1.5"),
        "{out}"
    );
    let (ok, out) = osd(&["crush-reweight", "0", "5000"]);
    assert!(
        !ok && out.contains("CRUSH weight must be in 0..=1000"),
        "{out}"
    );
    let (ok, out) = osd(&["crush-reweight", "7", "1"]);
    assert!(!ok && out.contains("osd.7"), "{out}");
    assert!(osd(&["reweight", "0", "0.5"]).0);
    assert!(osd(&["crush-reweight", "0", "2.5"]).0);
    let (ok, out) = osd(&["tree"]);
    let row: Vec<&str> = out
        .lines()
        .find(|l| l.starts_with("osd.0"))
        .unwrap_or_else(|| panic!("{out}"))
        .split_whitespace()
        .collect();
    assert!(ok && row[3..5] == ["2.500", "0.500"], "{out}");
    // Where an object lives, with Ceph's hash of its name (0x7fc1f406 for `foo`, as `ceph osd
    // map` prints it) and the decimal id TBF rules name it by.
    let (ok, out) = osd(&["map", "data", "foo"]);
    assert!(
        ok && out.contains("object 'foo' -> pg ")
            && out.contains(".7fc1f406 (")
            && out.contains("scheduler object id (TBF object=): 2143417350"),
        "{out}"
    );
    let (ok, out) = osd(&["map", "nopool", "foo"]);
    assert!(!ok && out.contains("no pool named `nopool`"), "{out}");
    // Cluster flags: an unknown one is refused naming the known ones; set ones are a warning in
    // `health` and `status` until unset.
    let (ok, out) = osd(&["set", "noot"]);
    assert!(
        !ok && out.contains("unknown flag `noot`") && out.contains("nodeep-scrub"),
        "{out}"
    );
    assert!(osd(&["set", "noout", "norebalance"]).0);
    let (ok, out) = cluster.cairn(&["health", "--mon", &mon, "detail"]);
    assert!(
        ok && out.contains("[WRN] OSDMAP_FLAGS: noout,norebalance flag(s) set")
            && out.contains("noout: down OSDs are not marked out"),
        "{out}"
    );
    let (ok, out) = cluster.cairn(&["status", "--mon", &mon]);
    assert!(
        ok && out.contains("noout,norebalance flag(s) set")
            && out.contains("in; flags noout,norebalance"),
        "{out}"
    );
    assert!(osd(&["unset", "noout", "norebalance"]).0);
    let (ok, out) = osd(&["add-noout", "7"]);
    assert!(!ok && out.contains("osd.7"), "{out}");
    assert!(osd(&["add-noout", "0"]).0);
    assert!(osd(&["add-nodown", "0"]).0);
    let (ok, out) = cluster.cairn(&["health", "--mon", &mon, "detail"]);
    assert!(
        ok && out.contains("osd.0 (host") && out.contains("has flags nodown,noout"),
        "{out}"
    );
    assert!(osd(&["rm-noout", "0"]).0);
    assert!(osd(&["rm-nodown", "0"]).0);
    let (ok, out) = cluster.cairn(&["health", "--mon", &mon]);
    assert!(
        ok && !out.contains("OSDMAP_FLAGS") && !out.contains("OSD_FLAGS"),
        "{out}"
    );
    // Pool quotas: a bad value or pool is refused; once the pool's one object reaches
    // max_objects 1 (as its OSD reports within ~2 s), puts are refused and `health` says so;
    // removing the limit lets them through. (The override weight back to 1 first: at 0.5 the
    // one OSD's CRUSH draw leaves some PGs unplaced.)
    assert!(osd(&["reweight", "0", "1"]).0);
    let pool = |args: &[&str]| {
        let mut all = vec!["pool", "--mon", &mon];
        all.extend_from_slice(args);
        cluster.cairn(&all)
    };
    let (ok, out) = pool(&["set-quota", "data", "max_bytes", "1.5G"]);
    assert!(!ok && out.contains("not a whole number"), "{out}");
    let (ok, out) = pool(&["set-quota", "nope", "max_objects", "1"]);
    assert!(!ok && out.contains("pool `nope`"), "{out}");
    let (ok, out) = pool(&["set-quota", "data", "max_objects", "1"]);
    assert!(ok && out.contains("max objects: 1"), "{out}");
    let one = cluster.dir.join("one.bin");
    std::fs::write(&one, b"quota").unwrap();
    let one = one.display().to_string();
    let put = |name: &str| cluster.cairn(&["put", "--mon", &mon, "-p", "data", name, &one]);
    assert!(put("q0").0);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let refused = loop {
        let (ok, out) = put("q1");
        if !ok {
            break out;
        }
        assert!(std::time::Instant::now() < deadline, "never refused");
        std::thread::sleep(std::time::Duration::from_millis(500));
    };
    assert!(refused.contains("quota exceeded"), "{refused}");
    let (ok, out) = cluster.cairn(&["health", "--mon", &mon, "detail"]);
    assert!(
        ok && out.contains("POOL_FULL") && out.contains("pool 'data' is full"),
        "{out}"
    );
    let (ok, out) = cluster.cairn(&["df", "--mon", &mon]);
    assert!(
        ok && out.contains("  quota: max_objects 1, max_bytes N/A (full: writes other"),
        "{out}"
    );
    let (ok, out) = pool(&["get-quota", "data"]);
    assert!(
        ok && out.contains("full: writes other than removals"),
        "{out}"
    );
    let (ok, out) = pool(&["ls"]);
    assert!(ok && out.contains("quota max_objects 1"), "{out}");
    assert!(pool(&["set-quota", "data", "max_objects", "0"]).0);
    let (ok, out) = put("q2");
    assert!(ok, "writes resume once the quota is gone: {out}");
    let (ok, out) = cluster.cairn(&["down", "--dir", &d]);
    assert!(ok, "{out}");
    drop(cluster);
}
