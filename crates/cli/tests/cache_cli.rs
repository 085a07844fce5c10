//! `cairn cache` on device files: create, refuse to overwrite, set parameters (and reject bad
//! ones), load an I/O class file (and name the bad line), stats, flush, detach, fsck.

mod common;

use common::cairn;

#[test]
fn cache_commands_work_on_device_files_and_reject_bad_input() {
    let dir = std::env::temp_dir().join(format!("cairn-cache-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cache = dir.join("cache.img").display().to_string();
    let core = dir.join("core.img").display().to_string();
    let devs = ["--cache", cache.as_str(), "--core", core.as_str()];
    let with = |extra: &[&str], head: &[&str]| -> Vec<String> {
        head.iter()
            .chain(devs.iter())
            .chain(extra.iter())
            .map(|s| s.to_string())
            .collect()
    };
    let run = |v: Vec<String>| cairn(&v.iter().map(String::as_str).collect::<Vec<_>>());
    let (ok, out) = run(with(
        &[
            "--cache-size-mib",
            "16",
            "--core-size-mib",
            "64",
            "--cache-mode",
            "wb",
        ],
        &["cache", "create"],
    ));
    assert!(ok, "{out}");
    let (ok, out) = run(with(
        &["--cache-size-mib", "16", "--core-size-mib", "64"],
        &["cache", "create"],
    ));
    assert!(
        !ok,
        "an existing cache must not be overwritten without --force: {out}"
    );
    let (ok, out) = run(with(
        &[
            "--namespace",
            "seq-cutoff",
            "--set",
            "policy=always",
            "--set",
            "threshold=16",
        ],
        &["cache", "set-param"],
    ));
    assert!(ok, "{out}");
    let (ok, out) = run(with(
        &["-n", "seq-cutoff", "--set", "policy=sometimes"],
        &["cache", "set-param"],
    ));
    assert!(!ok, "a bad parameter value must be rejected: {out}");
    let good = dir.join("good.csv");
    std::fs::write(&good, "IO class id,IO class name,Eviction priority,Allocation\n0,unclassified,22,1\n1,request_size:le:131072,1,1\n").unwrap();
    let (ok, out) = run(with(
        &["--file", &good.display().to_string()],
        &["cache", "load-ioclass"],
    ));
    assert!(ok, "{out}");
    let bad = dir.join("bad.csv");
    std::fs::write(&bad, "IO class id,IO class name,Eviction priority,Allocation\n0,unclassified,22,1\n1,request_size:maybe:1,1,1\n").unwrap();
    let (ok, out) = run(with(
        &["--file", &bad.display().to_string()],
        &["cache", "load-ioclass"],
    ));
    assert!(
        !ok && out.contains("line 3"),
        "a bad class file must name its line: {out}"
    );
    for cmd in ["stats", "flush", "fsck", "detach"] {
        let (ok, out) = run(with(&[], &["cache", cmd]));
        assert!(ok, "cache {cmd}: {out}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
