//! `cairn sched simulate`: runs a shipped scenario end to end, writes the PNG, and rejects a
//! malformed scenario with an error (not a panic).

use std::path::Path;
use std::process::Command;

fn scenario(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../scenarios")
        .join(name)
        .display()
        .to_string()
}

#[test]
fn simulate_prints_results_verdicts_and_writes_a_png() {
    let png = std::env::temp_dir().join(format!("cairn-sched-{}.png", std::process::id()));
    let out = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args([
            "sched",
            "simulate",
            &scenario("seed000_hdd_mclock_high_client_ops.toml"),
        ])
        .arg("--plot")
        .arg(&png)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("[PASS] client: reservation 50%"),
        "{stdout}"
    );
    assert!(!stdout.contains("[FAIL]"), "{stdout}");
    let bytes = std::fs::read(&png).unwrap();
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    let _ = std::fs::remove_file(&png);

    let out = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(["sched", "simulate", &scenario("hot_swap.toml")])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    let line = stdout.lines().find(|l| l.starts_with("requests:")).unwrap();
    let nums: Vec<u64> = line
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|t| t.parse().ok())
        .collect();
    assert_eq!(nums[0], nums[1], "hot swap lost requests: {line}");
    assert_eq!(nums[2], 0, "{line}");
}

#[test]
fn malformed_scenario_is_an_error_not_a_panic() {
    let bad = std::env::temp_dir().join(format!("cairn-bad-{}.toml", std::process::id()));
    std::fs::write(&bad, "duration_s = -3\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(["sched", "simulate"])
        .arg(&bad)
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&bad);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.starts_with("error: "), "{stderr}");
    assert!(stderr.contains("missing field `device`"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}
