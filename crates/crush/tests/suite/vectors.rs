//! Every mapping in tests/vectors (produced by Ceph 16.2.15's crushtool/osdmaptool) must be
//! reproduced exactly. The vectors and their generator are described in tests/vectors/README.md.

use cairn_crush::hash::hash32_2;
use cairn_crush::{json, text, CrushMap, Workspace};

fn vector_path(name: &str) -> String {
    format!("{}/tests/vectors/{name}", env!("CARGO_MANIFEST_DIR"))
}

fn load_json(name: &str) -> CrushMap {
    json::from_json(&std::fs::read_to_string(vector_path(name)).unwrap()).unwrap()
}

fn load_text(name: &str) -> CrushMap {
    text::parse(&std::fs::read_to_string(vector_path(name)).unwrap()).unwrap()
}

fn format_line(rule: i32, x: i32, out: &[i32]) -> String {
    let items: Vec<String> = out.iter().map(|i| i.to_string()).collect();
    format!("CRUSH rule {rule} x {x} [{}]", items.join(","))
}

/// Reweights as crushtool's `--weight D f` builds them.
fn reweights(map: &CrushMap, overrides: &[(i32, f64)]) -> Vec<u32> {
    let mut w = map.default_reweights();
    for &(dev, f) in overrides {
        w[dev as usize] = ((f * 65536.0) as i64).clamp(0, 0x10000) as u32;
    }
    w
}

fn check(
    map: &CrushMap,
    file: &str,
    rule: i32,
    num_rep: usize,
    overrides: &[(i32, f64)],
    pool: Option<u32>,
) {
    let expected = std::fs::read_to_string(vector_path(file)).unwrap();
    let w = reweights(map, overrides);
    let mut ws = Workspace::new();
    let mut out = Vec::new();
    let mut lines = 0;
    for (x, line) in expected.lines().enumerate() {
        let x = x as i32;
        let real_x = pool.map_or(x, |p| hash32_2(x as u32, p) as i32);
        assert!(map.do_rule(rule, real_x, num_rep, &w, None, &mut ws, &mut out));
        assert_eq!(format_line(rule, x, &out), line, "{file}");
        lines += 1;
    }
    assert_eq!(lines, 100, "{file}");
}

fn check_counts(map: &CrushMap, file: &str, rule: i32, num_rep: usize, overrides: &[(i32, f64)]) {
    let expected = std::fs::read_to_string(vector_path(file)).unwrap();
    let w = reweights(map, overrides);
    let mut counts = vec![0u64; map.max_devices() as usize];
    let mut ws = Workspace::new();
    let mut out = Vec::new();
    for x in 0..100_000 {
        map.do_rule(rule, x, num_rep, &w, None, &mut ws, &mut out);
        for &o in &out {
            if o >= 0 && (o as usize) < counts.len() {
                counts[o as usize] += 1;
            }
        }
    }
    for line in expected.lines() {
        let mut parts = line.split_whitespace();
        let dev: usize = parts.next().unwrap().parse().unwrap();
        let count: u64 = parts.next().unwrap().parse().unwrap();
        assert_eq!(counts[dev], count, "{file}: device {dev}");
    }
}

#[test]
fn eq60_vectors() {
    let map = load_json("map-eq60.json");
    check(&map, "eq60.rule0.rep3.x0-99.txt", 0, 3, &[], None);
    check(&map, "eq60.rule0.rep3.pool1.ps0-99.txt", 0, 3, &[], Some(1));
    check(&map, "eq60.rule1.indep5.x0-99.txt", 1, 5, &[], None);
    check(&map, "eq60.rule1.indep6.x0-99.txt", 1, 6, &[], None);
}

#[test]
fn w60_vectors() {
    let map = load_json("map-w60.json");
    let rw = [(7, 0.0), (20, 0.5)];
    check(&map, "w60.rule0.rep3.x0-99.txt", 0, 3, &[], None);
    check(
        &map,
        "w60.rule0.rep3.out7.rw20-0.5.x0-99.txt",
        0,
        3,
        &rw,
        None,
    );
    check(
        &map,
        "w60.rule1.indep5.out7.rw20-0.5.x0-99.txt",
        1,
        5,
        &rw,
        None,
    );
}

#[test]
fn legacy_tunable_vectors() {
    let mut firefly = load_json("map-w60.json");
    firefly.tunables.chooseleaf_stable = 0;
    check(
        &firefly,
        "w60-firefly.rule0.rep3.x0-99.txt",
        0,
        3,
        &[],
        None,
    );
    let mut argonaut = firefly.clone();
    argonaut.tunables.chooseleaf_vary_r = 0;
    argonaut.tunables.chooseleaf_descend_once = 0;
    argonaut.tunables.choose_local_tries = 2;
    argonaut.tunables.choose_local_fallback_tries = 5;
    argonaut.tunables.choose_total_tries = 19;
    check(
        &argonaut,
        "w60-argonaut.rule0.rep3.x0-99.txt",
        0,
        3,
        &[],
        None,
    );
}

#[test]
fn straw1_vectors_from_text() {
    let map = load_text("map-w60-straw1.txt");
    check(&map, "w60-straw1.rule0.rep3.x0-99.txt", 0, 3, &[], None);
}

#[test]
fn exact_text_map_gives_the_same_mappings_as_its_json_dump() {
    let from_text = load_text("map-eq60.txt");
    check(&from_text, "eq60.rule0.rep3.x0-99.txt", 0, 3, &[], None);
    check(&from_text, "eq60.rule1.indep5.x0-99.txt", 1, 5, &[], None);
}

#[test]
fn count_vectors_over_100k_inputs() {
    let eq = load_json("map-eq60.json");
    check_counts(&eq, "eq60.rule0.rep3.x0-99999.counts.txt", 0, 3, &[]);
    let w = load_json("map-w60.json");
    check_counts(
        &w,
        "w60.rule0.rep3.out7.rw20-0.5.x0-99999.counts.txt",
        0,
        3,
        &[(7, 0.0), (20, 0.5)],
    );
    check_counts(&w, "w60.rule1.indep5.x0-99999.counts.txt", 1, 5, &[]);
}
