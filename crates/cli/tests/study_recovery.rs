//! `cairn study recovery` runs seed 000's recovery test on real OSD processes, per device set
//! (plain files, and emulated HDDs with their WAL/DB on an emulated NVMe) and scheduler: the
//! report has a row per run with a finished recovery that moved objects and degraded copies
//! seen, client writes that all succeeded, a summary row per setting beside the seed's
//! figures, the plots per device set and the per-second CSV, and no cluster is left running. Bad arguments are refused before anything starts. Every cluster is stopped even
//! when an assertion fails.

mod common;

use common::cairn;
use std::path::{Path, PathBuf};

/// The study's scratch directory: every cluster in it is stopped and it is removed on drop.
struct WorkDir(PathBuf);

impl Drop for WorkDir {
    /// Stops the clusters found one or two levels down (`clusters/run0`), then removes it.
    fn drop(&mut self) {
        let subdirs = |dir: &Path| -> Vec<PathBuf> {
            std::fs::read_dir(dir)
                .map(|entries| entries.flatten().map(|e| e.path()).collect())
                .unwrap_or_default()
        };
        for dir in subdirs(&self.0) {
            for cluster in std::iter::once(dir.clone()).chain(subdirs(&dir)) {
                if cluster.join("pids").exists() {
                    cairn(&["down", "--dir", &cluster.display().to_string()]);
                }
            }
        }
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A command started in the background, stopped (SIGTERM, then SIGKILL) if still running when
/// dropped: a failed assertion leaves nothing behind.
struct Background(std::process::Child);

impl Drop for Background {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = common::try_signal("-TERM", self.0.id());
            std::thread::sleep(std::time::Duration::from_secs(5));
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

fn scratch(tag: &str) -> WorkDir {
    let dir = std::env::temp_dir().join(format!("cairn-study-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    WorkDir(dir)
}

/// The report's table rows (after the headers and separators), split into trimmed cells.
fn rows(report: &str) -> Vec<Vec<String>> {
    report
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| devices"))
        .map(|l| {
            l.trim_matches('|')
                .split('|')
                .map(|c| c.trim().to_string())
                .collect()
        })
        .collect()
}

fn number(cell: &str) -> f64 {
    cell.trim_end_matches('%')
        .parse()
        .unwrap_or_else(|_| panic!("not a number: {cell}"))
}

#[test]
fn recovery_study_compares_schedulers_on_a_real_cluster() {
    let work = scratch("recovery");
    let out = work.0.join("out");
    let clusters = work.0.join("clusters");
    let (ok, log) = cairn(&[
        "study",
        "recovery",
        "--out-dir",
        &out.display().to_string(),
        "--work-dir",
        &clusters.display().to_string(),
        "--devices",
        "none,hdd-db",
        "--runs",
        "1",
        "--schedulers",
        "wpq,high_client_ops",
        "--recovery-objects",
        "24",
        "--object-kib",
        "256",
        "--client-objects",
        "8",
        "--pg-num",
        "8",
        "--baseline-s",
        "1",
        "--max-s",
        "60",
        "--device-mib",
        "512",
    ]);
    assert!(ok, "{log}");
    let report = std::fs::read_to_string(out.join("recovery-study.md")).unwrap();
    let rows = rows(&report);
    assert_eq!(
        rows.len(),
        4 + 4,
        "a row per run, then per setting: {report}"
    );
    let runs: Vec<(&str, &str)> = rows[..4]
        .iter()
        .map(|r| (r[0].as_str(), r[1].as_str()))
        .collect();
    assert_eq!(
        runs,
        [
            ("none", "wpq"),
            ("none", "mclock high_client_ops"),
            ("hdd-db", "wpq"),
            ("hdd-db", "mclock high_client_ops")
        ]
    );
    for r in &rows[..4] {
        let (baseline, client, failed) = (number(&r[3]), number(&r[4]), number(&r[15]));
        assert!(baseline > 0.0 && client > 0.0, "client wrote: {r:?}");
        assert_eq!(failed, 0.0, "no client write failed: {r:?}");
        match r[1].as_str() {
            "wpq" => assert_eq!(r[7..9], ["-", "-"], "WPQ reserves nothing: {r:?}"),
            _ => {
                let reservation = number(&r[7]);
                assert!(
                    (reservation - 0.5 * baseline).abs() <= 1.0,
                    "high_client_ops reserves half the baseline: {r:?}"
                );
                assert!(r[8].parse::<usize>().is_ok(), "seconds below it: {r:?}");
            }
        }
        match r[1].as_str() {
            "wpq" => assert_eq!(r[22], "the OSD's own", "WPQ keeps its capacity: {r:?}"),
            _ => {
                let capacity = number(r[22].trim_end_matches(" IOPS"));
                assert!(
                    (capacity - 0.75 * baseline).abs() <= 1.5,
                    "each of 4 OSDs charged against its share of the baseline's 3 copies: {r:?}"
                );
            }
        }
        assert_ne!(r[16], "not done", "recovery finished in 60 s: {r:?}");
        assert!(number(&r[17]) >= 1.0, "objects were recovered: {r:?}");
        // max is printed with one decimal, p99 with two.
        let (p50, p99, max) = (number(&r[10]), number(&r[12]), number(&r[14]));
        assert!(
            0.0 < p50 && p50 <= p99 && p99 <= max + 0.05,
            "latencies ordered: {r:?}"
        );
        if number(&r[16]) >= 1.0 {
            assert!(
                number(&r[20]) + number(&r[21]) >= 1.0,
                "a recovery of a second or more shows degraded or misplaced copies: {r:?}"
            );
        }
    }
    let hdd_hco = &rows[7];
    assert_eq!(hdd_hco[..3], ["hdd-db", "mclock high_client_ops", "1"]);
    assert_eq!(
        hdd_hco[4], "80%",
        "the seed's share beside ours: {hdd_hco:?}"
    );
    assert_eq!(
        hdd_hco[6], "271",
        "the seed's IOPS beside ours: {hdd_hco:?}"
    );
    for set in ["none", "hdd-db"] {
        for what in ["client-iops", "client-p99", "objects", "degraded"] {
            let png = format!("recovery-{set}-{what}.png");
            let len = std::fs::metadata(out.join(&png)).map_or(0, |m| m.len());
            assert!(len > 1000, "{png}: {len} bytes");
        }
    }
    let csv = std::fs::read_to_string(out.join("recovery-per-second.csv")).unwrap();
    assert!(csv.starts_with("devices,scheduler,run,second,client_iops,client_p99_ms\n"));
    for r in &rows[..4] {
        let first_second = format!("{},{},1,1,", r[0], r[1]);
        let has_first = csv.lines().any(|l| l.starts_with(&first_second));
        assert_eq!(
            has_first,
            number(&r[16]) >= 1.0,
            "a row per whole second of the recovery, none for a part of one: {r:?} {csv}"
        );
    }
    assert!(
        !clusters.exists() || std::fs::read_dir(&clusters).unwrap().next().is_none(),
        "every cluster was stopped and removed"
    );
}

#[test]
fn bad_study_arguments_are_refused_before_anything_starts() {
    let work = scratch("recovery-bad");
    let clusters = work.0.join("clusters");
    let dir = clusters.display().to_string();
    let out = work.0.join("out").display().to_string();
    let base = ["study", "recovery", "--work-dir", &dir, "--out-dir", &out];
    for (extra, expect) in [
        (
            &["--schedulers", "wpq,lifo"][..],
            "unknown scheduler `lifo`",
        ),
        (
            &["--schedulers", "custom"][..],
            "unknown scheduler `custom`",
        ),
        (&["--osds", "3"][..], "at least 4"),
        (&["--client-block", "0"][..], "--client-block"),
        (&["--object-kib", "0"][..], "--client-block"),
        (&["--recovery-objects", "0"][..], "at least 1"),
        (&["--runs", "0"][..], "--runs"),
        (&["--devices", "floppy"][..], "unknown device set `floppy`"),
    ] {
        let args: Vec<&str> = base.iter().chain(extra).copied().collect();
        let (ok, log) = cairn(&args);
        assert!(!ok && log.contains(expect), "{extra:?}: {log}");
        assert!(!Path::new(&dir).exists(), "{extra:?}: nothing started");
    }
}

/// The pids a cluster directory's `pids` file lists, once it lists the monitor and `osds`
/// OSDs (None before).
fn cluster_pids(dir: &Path, osds: usize) -> Option<Vec<u32>> {
    let text = std::fs::read_to_string(dir.join("pids")).ok()?;
    let pids: Vec<u32> = text.lines().filter_map(|l| l.trim().parse().ok()).collect();
    (pids.len() > osds).then_some(pids)
}

#[test]
fn an_interrupted_study_stops_its_cluster_and_keeps_its_logs() {
    let work = scratch("recovery-interrupted");
    let clusters = work.0.join("clusters");
    let out = work.0.join("out");
    std::fs::create_dir_all(&work.0).unwrap();
    let log = std::fs::File::create(work.0.join("study.log")).unwrap();
    let mut study = Background(
        std::process::Command::new(env!("CARGO_BIN_EXE_cairn"))
            .args(["study", "recovery", "--work-dir"])
            .arg(&clusters)
            .arg("--out-dir")
            .arg(&out)
            .args(["--devices", "none", "--runs", "1", "--schedulers", "wpq"])
            .args([
                "--pg-num",
                "8",
                "--recovery-objects",
                "24",
                "--object-kib",
                "64",
            ])
            .args(["--device-mib", "512"])
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start the study"),
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let (dir, pids) = loop {
        let found = std::fs::read_dir(&clusters).ok().and_then(|entries| {
            entries
                .flatten()
                .find_map(|e| cluster_pids(&e.path(), 4).map(|p| (e.path(), p)))
        });
        if let Some(found) = found {
            break found;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no cluster started in 120 s"
        );
        assert!(
            study.0.try_wait().unwrap().is_none(),
            "the study ended early: {}",
            std::fs::read_to_string(work.0.join("study.log")).unwrap_or_default()
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert!(
        pids.iter().all(|&p| !common::has_exited(p)),
        "every daemon runs"
    );
    common::signal("-TERM", study.0.id());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(90);
    let status = loop {
        if let Some(status) = study.0.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = study.0.kill();
            panic!("the study did not exit within 90 s of SIGTERM");
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    let said = std::fs::read_to_string(work.0.join("study.log")).unwrap();
    assert_eq!(status.code(), Some(128 + 15), "128 + SIGTERM: {said}");
    assert!(
        said.contains("interrupted: the cluster in") && said.contains(" stopped (its logs"),
        "{said}"
    );
    for pid in pids {
        assert!(common::has_exited(pid), "daemon {pid} left running");
    }
    assert!(
        dir.join("mon.log").exists(),
        "the cluster's logs are kept: {}",
        dir.display()
    );
}
