//! `cairn store bench` on a small file: every phase runs and reports a row (the 4 MiB write and
//! read phases and the small-object phases at each queue depth above 1 included), the store is
//! fsck-clean afterwards, and sizes that do not fit are refused with a clear error before
//! anything is written.

mod common;

use common::cairn;

fn device(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("cairn-store-bench-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join("dev")
}

/// `cairn store bench` on a sparse 256 MiB file at `dev` with `extra` arguments; returns
/// whether it succeeded, its output, and how many bytes the file holds afterwards (0: none).
fn store_bench(dev: &std::path::Path, extra: &[&str]) -> (bool, String, u64) {
    let mut args = vec![
        "store",
        "bench",
        "--device",
        dev.to_str().unwrap(),
        "--size-mib",
        "256",
        "--no-prefill",
    ];
    args.extend_from_slice(extra);
    let (ok, out) = cairn(&args);
    let written = std::fs::metadata(dev).map(|m| m.len()).unwrap_or(0);
    std::fs::remove_dir_all(dev.parent().unwrap()).unwrap();
    (ok, out, written)
}

#[test]
fn every_phase_reports_a_row_and_the_store_stays_clean() {
    let dev = device("ok");
    let (ok, out, written) = store_bench(
        &dev,
        &[
            "--seq-mib",
            "32",
            "--rand-ops",
            "200",
            "--queue-depths",
            "1,4",
            "--small-objects",
            "300",
        ],
    );
    assert!(ok, "{out}");
    assert!(written > 0, "the bench wrote its file");
    for row in [
        "| 4 MiB seq write QD1 | cairn store |",
        "| 4 MiB write QD4 | cairn store |",
        "| 4 MiB read QD4 | cairn store |",
        "| 4 KiB rand write QD1 | cairn store |",
        "| 4 KiB rand read QD4 | cairn store |",
        "| 4 KiB object write QD4 | cairn store |",
        "| 4 KiB object read QD4 | cairn store |",
    ] {
        assert!(out.contains(row), "no row {row}: {out}");
    }
    assert!(
        out.contains("4 MiB write QD4: 8 transactions in"),
        "the QD4 phase writes as many objects as the sequential one: {out}"
    );
    assert!(
        out.contains("4 KiB object write QD4: 300 transactions in"),
        "the small-object phase writes the objects asked: {out}"
    );
    assert!(!out.contains("4 MiB write QD1 |"), "no QD1 repeat: {out}");
    assert!(
        !out.contains("4 KiB object write QD1"),
        "no QD1 small objects: {out}"
    );
    assert!(out.contains("fsck clean"), "{out}");
    assert!(
        out.contains("store: 8 objects"),
        "the QD4 phase's and the small objects are removed: {out}"
    );
}

#[test]
fn small_objects_that_do_not_fit_are_refused() {
    let dev = device("small");
    let (ok, out, written) = store_bench(
        &dev,
        &[
            "--seq-mib",
            "32",
            "--queue-depths",
            "16",
            "--small-objects",
            "100000",
        ],
    );
    assert!(!ok, "{out}");
    assert!(
        out.contains("--small-objects 100000 do not fit in --size-mib 256"),
        "{out}"
    );
    assert_eq!(written, 0, "nothing was created");
}

#[test]
fn a_sequential_volume_that_does_not_fit_twice_is_refused() {
    let dev = device("big");
    let (ok, out, written) = store_bench(&dev, &["--seq-mib", "160", "--queue-depths", "16"]);
    assert!(!ok, "{out}");
    assert!(out.contains("does not fit in --size-mib 256"), "{out}");
    assert_eq!(written, 0, "nothing was created");
    assert!(!out.contains("panicked"), "{out}");
}
