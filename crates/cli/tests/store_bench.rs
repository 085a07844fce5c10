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

#[test]
fn every_phase_reports_a_row_and_the_store_stays_clean() {
    let dev = device("ok");
    let (ok, out) = cairn(&[
        "store",
        "bench",
        "--device",
        dev.to_str().unwrap(),
        "--size-mib",
        "256",
        "--seq-mib",
        "32",
        "--rand-ops",
        "200",
        "--queue-depths",
        "1,4",
        "--small-objects",
        "300",
        "--no-prefill",
    ]);
    std::fs::remove_dir_all(dev.parent().unwrap()).unwrap();
    assert!(ok, "{out}");
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
    let (ok, out) = cairn(&[
        "store",
        "bench",
        "--device",
        dev.to_str().unwrap(),
        "--size-mib",
        "256",
        "--seq-mib",
        "32",
        "--queue-depths",
        "16",
        "--small-objects",
        "100000",
        "--no-prefill",
    ]);
    let written = std::fs::metadata(&dev).map(|m| m.len()).unwrap_or(0);
    std::fs::remove_dir_all(dev.parent().unwrap()).unwrap();
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
    let (ok, out) = cairn(&[
        "store",
        "bench",
        "--device",
        dev.to_str().unwrap(),
        "--size-mib",
        "256",
        "--seq-mib",
        "160",
        "--queue-depths",
        "16",
        "--no-prefill",
    ]);
    let written = std::fs::metadata(&dev).map(|m| m.len()).unwrap_or(0);
    std::fs::remove_dir_all(dev.parent().unwrap()).unwrap();
    assert!(!ok, "{out}");
    assert!(out.contains("does not fit in --size-mib 256"), "{out}");
    assert_eq!(written, 0, "nothing was created");
    assert!(!out.contains("panicked"), "{out}");
}
