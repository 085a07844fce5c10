//! Daemons started from TOML config files (the multi-machine way): `cairn mon --config` and
//! `cairn osd run --config` on free loopback ports; unknown keys are refused with an error.

mod common;

use common::{cairn, free_port, http_get, Daemon};
use std::time::{Duration, Instant};

#[test]
fn daemons_run_from_config_files() {
    let dir = std::env::temp_dir().join(format!("cairn-configs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mon = format!("127.0.0.1:{}", free_port());
    let mon_metrics = format!("127.0.0.1:{}", free_port());
    let mon_toml = dir.join("mon.toml");
    std::fs::write(
        &mon_toml,
        format!(
            "listen = \"{mon}\"\nfsid = \"site-a\"\ndata = \"{}\"\nmetrics = \"{mon_metrics}\"\n",
            dir.join("mon").display()
        ),
    )
    .unwrap();
    let osd_toml = dir.join("osd.toml");
    std::fs::write(
        &osd_toml,
        format!(
            "mon = \"{mon}\"\ndata = \"{}\"\nhost = \"rack1-node7\"\nid = 5\ndevice_mib = 128\nprofile = \"nvme-p3700\"\nmetrics = \"127.0.0.1:0\"\nheartbeat_grace_s = 20\npolicy = \"wpq\"\nstore_groups_in_flight = 2\nstore_commit_pacing = false\nop_shards = 5\nthreads = 3\nfast_fail_on_connection_refused = false\nrecovery_chunk_bytes = 2097152\nremap_min_objects = 4\nmeasure_capacity = true\n",
            dir.join("osd").display()
        ),
    )
    .unwrap();
    let _mon = Daemon::spawn(&["mon", "--config", &mon_toml.display().to_string()]);
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(&mon).is_err() {
        assert!(
            Instant::now() < deadline,
            "monitor did not start from its config"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let _osd = Daemon::spawn(&["osd", "run", "--config", &osd_toml.display().to_string()]);
    let mut tree = String::new();
    while Instant::now() < deadline {
        let (ok, out) = cairn(&["osd", "--mon", &mon, "tree"]);
        if ok && out.contains("rack1-node7") {
            tree = out;
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        tree.contains("osd.5") && tree.contains("up"),
        "OSD from config did not register as the osd.5 it asked for: {tree}"
    );
    let (ok, out) = cairn(&["status", "--mon", &mon]);
    assert!(ok && out.contains("site-a"), "{out}");
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, "listen = \"127.0.0.1:1\"\nfsdi = \"typo\"\n").unwrap();
    let (ok, out) = cairn(&["mon", "--config", &bad.display().to_string()]);
    assert!(
        !ok && out.contains("fsdi"),
        "an unknown key must be named: {out}"
    );
    let (ok, out) = cairn(&[
        "pool", "--mon", &mon, "create", "one", "--size", "1", "--pg-num", "4",
    ]);
    assert!(ok, "{out}");
    let src = dir.join("in.bin");
    std::fs::write(&src, vec![7u8; 100_000]).unwrap();
    let mut stored = false;
    while Instant::now() < deadline + Duration::from_secs(20) {
        let (ok, _) = cairn(&[
            "put",
            "--mon",
            &mon,
            "-p",
            "one",
            "obj",
            &src.display().to_string(),
        ]);
        if ok {
            stored = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(stored, "an OSD on an emulated NVMe device serves writes");
    let dst = dir.join("out.bin");
    let (ok, out) = cairn(&[
        "get",
        "--mon",
        &mon,
        "-p",
        "one",
        "obj",
        &dst.display().to_string(),
    ]);
    assert!(ok, "{out}");
    assert_eq!(std::fs::read(&dst).unwrap(), vec![7u8; 100_000]);
    // The monitor's page, at the address its config gave.
    let page = http_get(&mon_metrics, "/metrics");
    for line in [
        "cairn_mon_osds_up 1",
        "cairn_mon_osd_up{osd=\"5\",host=\"rack1-node7\"} 1",
        "cairn_mon_pool_size{pool=\"one\"} 1",
        "cairn_mon_osd_pgs{osd=\"5\"} 4",
    ] {
        assert!(
            page.lines().any(|l| l == line),
            "{line} not on the page:\n{page}"
        );
    }
    let config_get = |key: &str| cairn(&["tell", "--mon", &mon, "osd.5", "config", "get", key]);
    let (ok, out) = config_get("osd_op_queue");
    assert!(
        ok && out.trim() == "wpq",
        "policy from the config file: {out}"
    );
    let (ok, out) = config_get("osd_op_num_shards");
    assert!(
        ok && out.trim() == "5",
        "shards from the config file: {out}"
    );
    let (ok, out) = config_get("osd_op_num_threads");
    assert!(
        ok && out.trim() == "3",
        "runtime workers from the config file: {out}"
    );
    let (ok, out) = config_get("osd_recovery_max_chunk");
    assert!(
        ok && out.trim() == "2097152",
        "recovery piece size from the config file: {out}"
    );
    let (ok, out) = config_get("remap_min_objects");
    assert!(
        ok && out.trim() == "4",
        "remap threshold from the config file: {out}"
    );
    let (ok, out) = config_get("osd_fast_fail_on_connection_refused");
    assert!(
        ok && out.trim() == "false",
        "fast fail from the config file: {out}"
    );
    // `measure_capacity = true`: measured through the store and kept in the data directory
    // (or, if the runs disagreed on a busy machine, the profile's capacity kept).
    let (ok, out) = config_get("osd_mclock_max_capacity_iops");
    let kept = std::fs::read_to_string(dir.join("osd").join("capacity.json")).ok();
    assert!(ok, "{out}");
    if let Some(kept) = kept {
        let c: serde_json::Value = serde_json::from_str(&kept).unwrap();
        let iops = c["random_4k_iops"].as_f64().unwrap();
        assert_eq!(
            out.trim(),
            format!("{iops:.0}"),
            "the kept capacity is the one in force"
        );
    }
    // The capacity is settable live, as Ceph's `osd_mclock_max_capacity_iops_*`; bad values
    // are refused and change nothing.
    let config_set = |key: &str, value: &str| {
        cairn(&["tell", "--mon", &mon, "osd.5", "config", "set", key, value])
    };
    let (ok, out) = config_set("osd_mclock_max_capacity_iops", "777");
    assert!(ok, "{out}");
    let (ok, out) = config_get("osd_mclock_max_capacity_iops");
    assert!(ok && out.trim() == "777", "the capacity set live: {out}");
    for bad in ["0", "-5", "lots", "1e12"] {
        let (ok, out) = config_set("osd_mclock_max_capacity_iops", bad);
        assert!(!ok, "{bad} IOPS must be refused: {out}");
    }
    let (ok, out) = config_set("osd_mclock_max_sequential_bandwidth", "100");
    assert!(!ok && out.contains("bandwidth"), "{out}");
    let (ok, out) = config_get("osd_mclock_max_capacity_iops");
    assert!(
        ok && out.trim() == "777",
        "refused values changed nothing: {out}"
    );
    // An OSD started with a bad setting exits with an error that names it.
    let refused = |data: &str, flag: &str, value: &str| {
        let data = dir.join(data).display().to_string();
        cairn(&["osd", "run", "--data", &data, "--mon", &mon, flag, value])
    };
    let (ok, out) = refused("osd-x", "--profile", "floppy");
    assert!(
        !ok && out.contains("floppy"),
        "an unknown profile must be named: {out}"
    );
    let (ok, out) = refused("osd-y", "--store-groups-in-flight", "3");
    assert!(
        !ok && out.contains("max_groups_in_flight 3"),
        "an out-of-range pipeline depth must be refused: {out}"
    );
    let (ok, out) = refused("osd-z", "--op-shards", "0");
    assert!(
        !ok && out.contains("op shards must be in 1..=64"),
        "a shard count out of range must be refused: {out}"
    );
    let (ok, out) = refused("osd-w", "--threads", "0");
    assert!(
        !ok && out.contains("threads must be 1..=64, got 0"),
        "a worker-thread count out of range must be refused: {out}"
    );
    let (ok, out) = cairn(&["osd", "run"]);
    assert!(
        !ok && out.contains("--data"),
        "an OSD without a data directory must be refused: {out}"
    );
    drop(_osd);
    drop(_mon);
    let _ = std::fs::remove_dir_all(&dir);
}
