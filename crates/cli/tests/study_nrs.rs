//! `cairn study nrs` runs seed 001's dd-stream experiment on real OSD processes: a row per
//! policy, case and operation with every client's throughput measured (the lone client's
//! apart), the seed's figures beside the seed's own cases, a CSV row per client, a plot per
//! run, and no cluster left running; bad arguments are refused before anything starts. Its IOR
//! part reads files per process and a shared file under FIFO, ORR and TRR, a row per policy
//! and case with each one's ratio to FIFO, a plot per case. Its TBF part caps half of the
//! clients by id, then every client's writes, and each capped group stays near its limit.

mod common;

use common::cairn;

#[test]
fn the_nrs_study_measures_each_client_under_each_policy() {
    let work = std::env::temp_dir().join(format!("cairn-study-nrs-{}", std::process::id()));
    let out = std::env::temp_dir().join(format!("cairn-study-nrs-out-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    let _ = std::fs::remove_dir_all(&out);
    let (w, o) = (work.display().to_string(), out.display().to_string());
    for (bad, why) in [
        (vec!["--policies", "nope"], "policy `nope`"),
        (vec!["--cases", "3"], "CLIENTSxSTREAMS"),
        (vec!["--ops", "append"], "`write` or `read`"),
        (vec!["--block-kib", "2"], "--block-kib"),
        (vec!["--parts", "nope"], "`crrn`, `ior` or `tbf`"),
        (vec!["--tbf-rate-rps", "0"], "--tbf-rate-rps"),
        (vec!["--tbf-clients", "1"], "--tbf-clients"),
        (vec!["--ior-cases", "fpp-1"], "CLIENTSxTHREADS"),
        (vec!["--ior-policies", "orr-log-0"], "quantum"),
        (
            vec!["--ior-file-mib", "3", "--block-kib", "2048"],
            "--ior-file-mib",
        ),
    ] {
        let mut args = vec!["study", "nrs", "--work-dir", &w, "--out-dir", &o];
        args.extend(bad);
        let (ok, text) = cairn(&args);
        assert!(!ok && text.contains(why), "{args:?}: {text}");
        assert!(!work.exists(), "nothing started for {args:?}");
    }
    let (ok, text) = cairn(&[
        "study",
        "nrs",
        "--work-dir",
        &w,
        "--out-dir",
        &o,
        "--osds",
        "2",
        "--profile",
        "none",
        "--device-mib",
        "4096",
        "--pg-num",
        "16",
        "--parts",
        "crrn",
        "--cases",
        "2x2+1x1",
        "--seconds",
        "2",
        "--warmup-s",
        "1",
    ]);
    if work.join("pids").exists() {
        cairn(&["down", "--dir", &w]);
    }
    let _ = std::fs::remove_dir_all(&work);
    assert!(ok, "{text}");
    let report = std::fs::read_to_string(out.join("nrs-study.md")).unwrap();
    let rows: Vec<Vec<&str>> = report
        .lines()
        .filter(|l| l.starts_with("| write") || l.starts_with("| read"))
        .map(|l| l.split('|').map(str::trim).collect())
        .collect();
    assert_eq!(rows.len(), 4, "fifo and crrn, write and read: {report}");
    for r in &rows {
        let mean: f64 = r[4].parse().unwrap();
        let lone: f64 = r[7].parse().unwrap();
        assert!(mean > 0.0 && lone > 0.0, "every client moved data: {r:?}");
    }
    let csv = std::fs::read_to_string(out.join("nrs-clients.csv")).unwrap();
    assert_eq!(csv.lines().count(), 1 + 4 * 3, "{csv}");
    for name in ["nrs-write-2x2p1x1-fifo.png", "nrs-read-2x2p1x1-crrn.png"] {
        assert!(out.join(name).exists(), "{name}");
    }
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn the_ior_part_reads_under_each_policy_and_reports_against_fifo() {
    let work = std::env::temp_dir().join(format!("cairn-study-ior-{}", std::process::id()));
    let out = std::env::temp_dir().join(format!("cairn-study-ior-out-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    let _ = std::fs::remove_dir_all(&out);
    let (w, o) = (work.display().to_string(), out.display().to_string());
    let (ok, text) = cairn(&[
        "study",
        "nrs",
        "--work-dir",
        &w,
        "--out-dir",
        &o,
        "--osds",
        "2",
        "--profile",
        "none",
        "--device-mib",
        "4096",
        "--pg-num",
        "16",
        "--parts",
        "ior",
        "--ior-cases",
        "fpp-2x2,ssf-2x2",
        "--ior-policies",
        "fifo,orr-phys-4,trr-log-8",
        "--ior-file-mib",
        "4",
        "--object-mib",
        "2",
        "--block-kib",
        "256",
        "--ior-stripe-count",
        "2",
        "--seconds",
        "2",
        "--warmup-s",
        "1",
    ]);
    if work.join("pids").exists() {
        cairn(&["down", "--dir", &w]);
    }
    let _ = std::fs::remove_dir_all(&work);
    assert!(ok, "{text}");
    let report = std::fs::read_to_string(out.join("nrs-ior.md")).unwrap();
    let rows: Vec<Vec<&str>> = report
        .lines()
        .filter(|l| l.starts_with("| fpp") || l.starts_with("| ssf"))
        .map(|l| l.split('|').map(str::trim).collect())
        .collect();
    assert_eq!(rows.len(), 6, "three policies, two cases: {report}");
    for r in &rows {
        let total: f64 = r[3].parse().unwrap();
        let slowest: f64 = r[5].parse().unwrap();
        assert!(total > 0.0 && slowest > 0.0, "every thread read: {r:?}");
        if r[2] == "fifo" {
            assert_eq!(r[4], "1.00", "{r:?}");
        }
    }
    assert!(
        !out.join("nrs-study.md").exists(),
        "the crrn part was not asked for"
    );
    for name in ["nrs-ior-fpp-2x2.png", "nrs-ior-ssf-2x2.png"] {
        assert!(out.join(name).exists(), "{name}");
    }
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn the_tbf_part_caps_what_its_rules_match() {
    let work = std::env::temp_dir().join(format!("cairn-study-tbf-{}", std::process::id()));
    let out = std::env::temp_dir().join(format!("cairn-study-tbf-out-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    let _ = std::fs::remove_dir_all(&out);
    let (w, o) = (work.display().to_string(), out.display().to_string());
    let (ok, text) = cairn(&[
        "study",
        "nrs",
        "--work-dir",
        &w,
        "--out-dir",
        &o,
        "--osds",
        "2",
        "--profile",
        "none",
        "--device-mib",
        "4096",
        "--pg-num",
        "16",
        "--parts",
        "tbf",
        "--tbf-clients",
        "4",
        "--tbf-streams",
        "2",
        "--tbf-rate-rps",
        "4",
        "--block-kib",
        "64",
        "--object-mib",
        "1",
        "--seconds",
        "4",
        "--warmup-s",
        "2",
    ]);
    if work.join("pids").exists() {
        cairn(&["down", "--dir", &w]);
    }
    let _ = std::fs::remove_dir_all(&work);
    assert!(ok, "{text}");
    let report = std::fs::read_to_string(out.join("nrs-tbf.md")).unwrap();
    let rows: Vec<Vec<&str>> = report
        .lines()
        .filter(|l| l.starts_with("| by-"))
        .map(|l| l.split('|').map(str::trim).collect())
        .collect();
    assert_eq!(rows.len(), 4, "two cases, two groups each: {report}");
    // 4 requests a second of 64 KiB on each of 2 OSDs: 0.5 MiB/s per capped client.
    for r in &rows {
        let tbf: f64 = r[5].parse().unwrap();
        assert!(tbf > 0.0, "every group moved data under tbf: {r:?}");
        if r[2].contains("capped") {
            assert_eq!(r[6], "0.5", "{r:?}");
            let share: f64 = r[7].parse().unwrap();
            assert!(share <= 1.5, "a capped group stays near its limit: {r:?}");
        }
    }
    for name in ["nrs-tbf-by-client.png", "nrs-tbf-by-op.png"] {
        assert!(out.join(name).exists(), "{name}");
    }
    let _ = std::fs::remove_dir_all(&out);
}
