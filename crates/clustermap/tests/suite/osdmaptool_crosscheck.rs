//! Pool placement with choose_args (per-position weight sets and substituted ids, as Ceph's
//! crush-compat balancer writes them) must equal what Ceph's `osdmaptool` computes: a random
//! weight set per bucket, for the pool's own set and for the default set. Needs Debian's
//! ceph-base; CI installs it and sets CI=true, which turns a missing osdmaptool into a failure.

use std::fmt::Write as _;
use std::process::Command;

use cairn_clustermap::{OsdMap, Pool};

fn have_osdmaptool() -> bool {
    let found = Command::new("osdmaptool").arg("--help").output().is_ok();
    if !found && std::env::var("CI").is_ok() {
        panic!("osdmaptool is required in CI (apt-get install ceph-base)");
    }
    found
}

fn sh(cmd: &str) -> String {
    let out = Command::new("sh").arg("-c").arg(cmd).output().unwrap();
    assert!(
        out.status.success(),
        "{cmd}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn choose_args_placement_matches_osdmaptool() {
    if !have_osdmaptool() {
        eprintln!("osdmaptool not installed: skipping (CI installs it)");
        return;
    }
    let base = include_str!("../../../crush/tests/vectors/map-eq60.txt");
    let dir = std::env::temp_dir().join(format!("cairn-om-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let d = dir.display();
    let mut seed = 12345u64;
    let mut rand = move |n: u64| {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (seed >> 33) % n
    };
    for (case, index) in ["1", "18446744073709551615", "1", "18446744073709551615"]
        .iter()
        .enumerate()
    {
        let mut text = base.to_string();
        let _ = writeln!(text, "choose_args {index} {{");
        for bucket in 1..=7 {
            let size = match bucket {
                1..=5 => 12,
                6 => 5,
                _ => 1,
            };
            let positions = 1 + rand(3);
            let _ = writeln!(text, "  {{\n    bucket_id -{bucket}\n    weight_set [");
            for _ in 0..positions {
                let ws: Vec<String> = (0..size)
                    .map(|_| format!("{}.{:03}", rand(3), rand(1000)))
                    .collect();
                let _ = writeln!(text, "      [ {} ]", ws.join(" "));
            }
            text.push_str("    ]\n");
            if case >= 2 && bucket <= 5 {
                let ids: Vec<String> = (0..size)
                    .map(|i| (100 + bucket * 20 + i).to_string())
                    .collect();
                let _ = writeln!(text, "    ids [ {} ]", ids.join(" "));
            }
            text.push_str("  }\n");
        }
        text.push_str("}\n");
        std::fs::write(dir.join("map.txt"), &text).unwrap();
        sh(&format!("crushtool -c {d}/map.txt -o {d}/map.bin"));
        sh(&format!("osdmaptool --createsimple 60 --with-default-pool --pg-bits 2 --pgp-bits 2 {d}/om --clobber"));
        sh(&format!("osdmaptool {d}/om --import-crush {d}/map.bin"));
        let expected: Vec<String> = sh(&format!(
            "osdmaptool {d}/om --mark-up-in --test-map-pgs-dump --pool 1 2>/dev/null"
        ))
        .lines()
        .filter(|l| l.starts_with("1."))
        .map(str::to_string)
        .collect();
        assert_eq!(expected.len(), 240);
        let crush = cairn_crush::text::parse(&text).unwrap();
        let mut map = OsdMap::all_up_in(crush);
        map.add_pool(Pool::replicated(1, "rbd", 3, 240, 0).unwrap())
            .unwrap();
        let mut mapper = map.mapper();
        for line in expected {
            let pg = line.split('\t').next().unwrap().parse().unwrap();
            let m = mapper.map_pg(pg).unwrap();
            let osds: Vec<String> = m.up.iter().map(i32::to_string).collect();
            assert_eq!(
                format!("{pg}\t[{}]\t{}", osds.join(","), m.primary),
                line,
                "case {case} (choose_args {index})"
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
