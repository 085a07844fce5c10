//! Random maps (every bucket algorithm, random tunables, device classes, rule steps and
//! reweights) are compiled and evaluated by Ceph's own `crushtool`; our parser and mapper must
//! print exactly the same mappings, from our text and from crushtool's decompiled text.
//!
//! Needs `crushtool` (Debian package ceph-base). CI installs it and sets CI=true, in which case a
//! missing crushtool fails the test instead of skipping it.

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

use cairn_crush::{text, CrushMap, Workspace};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

fn crushtool_available() -> bool {
    let found = Command::new("crushtool").arg("--help").output().is_ok();
    if !found && std::env::var("CI").is_ok() {
        panic!("crushtool is required in CI (apt-get install ceph-base)");
    }
    found
}

/// Picks a bucket algorithm. With device classes, Ceph's own shadow trees exclude two
/// algorithms: it cannot clone `uniform` buckets at all (populate_classes fails silently and
/// `take ... class` no longer compiles), and it clones `tree` buckets item by item through
/// `crush_add_tree_bucket_item`, which sums into node weights of freshly realloc'd, uninitialised
/// memory, so its shadow tree buckets are not deterministic.
fn pick_alg<'a>(rng: &mut Rng, algs: &[&'a str], with_classes: bool) -> &'a str {
    loop {
        let alg = algs[rng.below(algs.len() as u64) as usize];
        if !(with_classes && (alg == "uniform" || alg == "tree")) {
            return alg;
        }
    }
}

/// A random map in crushtool text, plus the rules' ids and whether each is indep.
fn random_map(rng: &mut Rng) -> (String, Vec<(i32, bool)>) {
    let algs = ["uniform", "list", "tree", "straw", "straw2"];
    let mut s = String::new();
    let optimal = rng.chance(50);
    let tun = |rng: &mut Rng, legacy: u64, optimal_v: u64, max: u64| -> u64 {
        match rng.below(4) {
            0 => rng.below(max + 1),
            _ if optimal => optimal_v,
            _ => legacy,
        }
    };
    let _ = writeln!(s, "tunable choose_local_tries {}", tun(rng, 2, 0, 3));
    let _ = writeln!(
        s,
        "tunable choose_local_fallback_tries {}",
        tun(rng, 5, 0, 5)
    );
    let _ = writeln!(
        s,
        "tunable choose_total_tries {}",
        tun(rng, 19, 50, 60).max(1)
    );
    let _ = writeln!(s, "tunable chooseleaf_descend_once {}", tun(rng, 0, 1, 1));
    let _ = writeln!(s, "tunable chooseleaf_vary_r {}", tun(rng, 0, 1, 3));
    let _ = writeln!(s, "tunable chooseleaf_stable {}", tun(rng, 0, 1, 1));
    let _ = writeln!(s, "tunable straw_calc_version {}", tun(rng, 0, 1, 1));
    let _ = writeln!(s, "tunable allowed_bucket_algs 62");
    let with_classes = rng.chance(50);
    let classes = ["ssd", "hdd"];
    let racks = 1 + rng.below(3) as usize;
    let mut next_osd = 0;
    let mut devices = String::new();
    let mut buckets = String::new();
    let mut rack_names = Vec::new();
    let mut next_id = -1;
    let mut next_shadow = -100;
    let mut shadow_ids = |with: bool| -> String {
        let mut lines = String::new();
        if with {
            for c in ["ssd", "hdd"] {
                let _ = writeln!(lines, "\tid {next_shadow} class {c}");
                next_shadow -= 1;
            }
        }
        lines
    };
    for r in 0..racks {
        let hosts = 1 + rng.below(4) as usize;
        let mut host_names = Vec::new();
        for h in 0..hosts {
            let alg = pick_alg(rng, &algs, with_classes);
            let n = 1 + rng.below(6) as usize;
            let uniform_w = 1 + rng.below(3000);
            let name = format!("host{r}x{h}");
            let ids = shadow_ids(with_classes);
            let _ = writeln!(
                buckets,
                "host {name} {{\n\tid {next_id}\n{ids}\talg {alg}\n\thash 0"
            );
            next_id -= 1;
            for _ in 0..n {
                let class = if with_classes {
                    format!(" class {}", classes[rng.below(2) as usize])
                } else {
                    String::new()
                };
                let _ = writeln!(devices, "device {next_osd} osd.{next_osd}{class}");
                let w = if alg == "uniform" {
                    uniform_w
                } else if rng.chance(10) {
                    0
                } else {
                    1 + rng.below(5000)
                };
                let _ = writeln!(
                    buckets,
                    "\titem osd.{next_osd} weight {}.{:03}",
                    w / 1000,
                    w % 1000
                );
                next_osd += 1;
            }
            buckets.push_str("}\n");
            host_names.push(name);
        }
        let alg = pick_alg(rng, &algs[1..], with_classes);
        let name = format!("rack{r}");
        let ids = shadow_ids(with_classes);
        let _ = writeln!(
            buckets,
            "rack {name} {{\n\tid {next_id}\n{ids}\talg {alg}\n\thash 0"
        );
        next_id -= 1;
        for h in &host_names {
            let _ = writeln!(buckets, "\titem {h}");
        }
        buckets.push_str("}\n");
        rack_names.push(name);
    }
    let alg = pick_alg(rng, &["straw2", "straw", "list", "tree"], with_classes);
    let ids = shadow_ids(with_classes);
    let _ = writeln!(
        buckets,
        "root default {{\n\tid {next_id}\n{ids}\talg {alg}\n\thash 0"
    );
    for r in &rack_names {
        let _ = writeln!(buckets, "\titem {r}");
    }
    buckets.push_str("}\n");
    s.push_str(&devices);
    s.push_str("type 0 osd\ntype 1 host\ntype 2 rack\ntype 3 root\n");
    s.push_str(&buckets);
    let mut rules = Vec::new();
    let take = |rng: &mut Rng| {
        if with_classes && rng.chance(50) {
            format!("step take default class {}", classes[rng.below(2) as usize])
        } else {
            "step take default".to_string()
        }
    };
    for kind in 0..4 {
        let rule_id = kind;
        let mut body = String::new();
        if rng.chance(30) {
            let _ = writeln!(body, "\tstep set_choose_tries {}", 1 + rng.below(100));
        }
        if rng.chance(30) {
            let _ = writeln!(body, "\tstep set_chooseleaf_tries {}", 1 + rng.below(10));
        }
        if rng.chance(20) {
            let _ = writeln!(body, "\tstep set_chooseleaf_vary_r {}", rng.below(3));
        }
        if rng.chance(20) {
            let _ = writeln!(body, "\tstep set_chooseleaf_stable {}", rng.below(2));
        }
        let t = take(rng);
        let _ = writeln!(body, "\t{t}");
        let indep = kind % 2 == 1;
        let mode = if indep { "indep" } else { "firstn" };
        match kind {
            0 | 1 => {
                let _ = writeln!(body, "\tstep chooseleaf {mode} 0 type host");
            }
            2 => {
                let _ = writeln!(
                    body,
                    "\tstep choose firstn 0 type rack\n\tstep chooseleaf firstn 2 type host"
                );
            }
            _ => {
                let _ = writeln!(
                    body,
                    "\tstep choose indep 0 type host\n\tstep choose indep 1 type osd"
                );
            }
        }
        body.push_str("\tstep emit\n");
        let rtype = if indep { "erasure" } else { "replicated" };
        let _ = writeln!(s, "rule r{rule_id} {{\n\tid {rule_id}\n\ttype {rtype}\n\tmin_size 1\n\tmax_size 10\n{body}}}");
        rules.push((rule_id, indep));
    }
    (s, rules)
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().expect("run crushtool");
    assert!(
        out.status.success(),
        "{:?}: {}",
        cmd,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

fn our_lines(
    map: &CrushMap,
    rule: i32,
    num_rep: usize,
    reweights: &[(i32, u32)],
    max_x: i32,
) -> Vec<String> {
    let mut w = map.default_reweights();
    for &(d, v) in reweights {
        w[d as usize] = v;
    }
    let mut ws = Workspace::new();
    let mut out = Vec::new();
    (0..=max_x)
        .map(|x| {
            map.do_rule(rule, x, num_rep, &w, None, &mut ws, &mut out);
            let items: Vec<String> = out.iter().map(i32::to_string).collect();
            format!("CRUSH rule {rule} x {x} [{}]", items.join(","))
        })
        .collect()
}

fn crushtool_lines(
    bin: &Path,
    dir: &Path,
    rule: i32,
    num_rep: usize,
    reweights: &[(i32, u32)],
    max_x: i32,
) -> Vec<String> {
    let out_file = dir.join("mappings.txt");
    let mut args = format!(
        "crushtool -i {} --test --show-mappings --rule {rule} --num-rep {num_rep} --min-x 0 --max-x {max_x}",
        bin.display()
    );
    for &(d, v) in reweights {
        let _ = write!(args, " --weight {d} {}", f64::from(v) / 65536.0);
    }
    let _ = write!(args, " > {} 2>&1", out_file.display());
    run(Command::new("sh").arg("-c").arg(&args));
    std::fs::read_to_string(&out_file)
        .unwrap()
        .lines()
        .filter(|l| l.starts_with("CRUSH rule"))
        .map(str::to_string)
        .collect()
}

#[test]
fn random_maps_match_crushtool() {
    if !crushtool_available() {
        eprintln!("crushtool not installed: skipping (CI installs it)");
        return;
    }
    let dir = std::env::temp_dir().join(format!("cairn-crosscheck-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cases: u64 = std::env::var("CAIRN_CROSSCHECK_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(40);
    let mut compared = 0;
    for seed in 0..cases {
        let mut rng = Rng(seed * 7919 + 1);
        let (src, rules) = random_map(&mut rng);
        let src_path = dir.join("map.txt");
        let bin = dir.join("map.bin");
        std::fs::write(&src_path, &src).unwrap();
        run(Command::new("crushtool")
            .arg("-c")
            .arg(&src_path)
            .arg("-o")
            .arg(&bin));
        let decompiled = run(Command::new("crushtool").arg("-d").arg(&bin));
        let ours = text::parse(&src).unwrap_or_else(|e| panic!("seed {seed}: {e}\n{src}"));
        let theirs_text =
            text::parse(&decompiled).unwrap_or_else(|e| panic!("seed {seed}: {e}\n{decompiled}"));
        let rewritten = text::parse(&text::write(&ours)).expect("our own output parses");
        assert_eq!(
            rewritten, ours,
            "seed {seed}: parse -> write -> parse is not identity"
        );
        let max_dev = ours.max_devices();
        let mut reweights = Vec::new();
        for _ in 0..rng.below(3) {
            let d = rng.below(max_dev as u64) as i32;
            let v = [0u32, 0x8000, 0x4000, 0xc000][rng.below(4) as usize];
            reweights.push((d, v));
        }
        for &(rule, _) in &rules {
            let num_rep = 1 + rng.below(5) as usize;
            let expected = crushtool_lines(&bin, &dir, rule, num_rep, &reweights, 199);
            if expected.is_empty() {
                continue;
            }
            for (label, map) in [("our text", &ours), ("crushtool -d", &theirs_text)] {
                let got = our_lines(map, rule, num_rep, &reweights, 199);
                if let Some((g, e)) = got.iter().zip(&expected).find(|(g, e)| g != e) {
                    panic!("seed {seed} ({label}) num_rep {num_rep} reweights {reweights:?}\nours:      {g}\ncrushtool: {e}\n{src}");
                }
                assert_eq!(got.len(), expected.len());
            }
            compared += 1;
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        compared >= cases as usize,
        "too few rule evaluations compared: {compared}"
    );
}

#[test]
fn build_matches_crushtool_build() {
    if !crushtool_available() {
        eprintln!("crushtool not installed: skipping (CI installs it)");
        return;
    }
    let dir = std::env::temp_dir().join(format!("cairn-build-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    type BuildLayers<'a> = &'a [(&'a str, &'a str, usize)];
    let layouts: &[(usize, BuildLayers)] = &[
        (60, &[("host", "straw2", 12), ("root", "straw2", 0)]),
        (
            24,
            &[
                ("host", "uniform", 4),
                ("rack", "list", 2),
                ("root", "straw", 0),
            ],
        ),
        (
            30,
            &[
                ("host", "straw2", 5),
                ("rack", "tree", 3),
                ("root", "straw2", 0),
            ],
        ),
    ];
    for (num_osds, layers) in layouts {
        let bin = dir.join("built.bin");
        let mut cmd = Command::new("crushtool");
        cmd.arg("--build")
            .arg("--num_osds")
            .arg(num_osds.to_string());
        for (t, alg, size) in layers.iter() {
            cmd.arg(t).arg(alg).arg(size.to_string());
        }
        run(cmd.arg("-o").arg(&bin));
        let ours = cairn_crush::build::build(
            *num_osds,
            &layers
                .iter()
                .map(|(t, alg, size)| cairn_crush::build::Layer {
                    type_name: t.to_string(),
                    alg: cairn_crush::BucketAlg::from_name(alg).unwrap(),
                    size: *size,
                })
                .collect::<Vec<_>>(),
        )
        .unwrap();
        let theirs = text::parse(&run(Command::new("crushtool").arg("-d").arg(&bin))).unwrap();
        assert_eq!(text::write(&ours), text::write(&theirs), "{layers:?}");
        let expected = crushtool_lines(&bin, &dir, 0, 3, &[], 499);
        assert_eq!(our_lines(&ours, 0, 3, &[], 499), expected, "{layers:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
