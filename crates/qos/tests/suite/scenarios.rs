//! Every scenario shipped in `scenarios/` parses, validates and runs (shortened to 1 s here),
//! and malformed scenarios are typed errors.

use cairn_qos::sim::{run, Scenario};
use cairn_qos::QosError;
use std::path::Path;

#[test]
fn shipped_scenarios_parse_and_run() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "toml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let mut scn =
            Scenario::from_toml(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        scn.duration_s = scn.duration_s.min(1.0);
        scn.window_s = scn.window_s.min(scn.duration_s);
        scn.changes.retain(|c| c.at_s < 1.0);
        let r = run(&scn).unwrap();
        let done: u64 = r.sources.iter().map(|s| s.completed).sum();
        assert!(done > 0, "{}: nothing completed", path.display());
        n += 1;
    }
    assert!(n >= 10, "only {n} scenarios found in {}", dir.display());
}

#[test]
fn malformed_scenarios_are_typed_errors() {
    let base = "duration_s = 1.0\n[device]\nrandom_4k_iops = 100.0\nseq_bandwidth_bytes_per_s = 1e8\n[policy]\nname = \"fifo\"\n";
    assert!(Scenario::from_toml(base).is_ok());
    let cases = [
        base.replace("duration_s = 1.0", "duration_s = -1.0"),
        base.replace("random_4k_iops = 100.0", "random_4k_iops = 0.0"),
        base.replace("name = \"fifo\"", "name = \"elevator\""),
        format!("{base}[[sources]]\nname = \"x\"\n"),
        format!("{base}[[sources]]\nname = \"x\"\ndepth = 1\nrate_rps = 5.0\n"),
        format!("{base}[[sources]]\nname = \"x\"\ndepth = 1\nsize_bytes = 0\n"),
        format!("bogus = 1\n{base}"),
        "not toml at all [".to_string(),
    ];
    for c in cases {
        let e = Scenario::from_toml(&c).unwrap_err();
        assert!(
            matches!(e, QosError::Config(_) | QosError::InvalidParam { .. }),
            "{e:?}"
        );
    }
}
