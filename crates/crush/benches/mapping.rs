//! Mappings per second of `do_rule` on the seed-002 map (60 OSDs, 5 hosts, straw2, size 3) and
//! the EC rule, single-threaded. Compare with `bench/mapping_vs_crushtool.sh`, which times
//! crushtool on the same map and inputs in the same run.

use cairn_crush::{json, CrushMap, Workspace};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

fn map() -> CrushMap {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/vectors/map-eq60.json");
    json::from_json(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn bench(c: &mut Criterion) {
    let map = map();
    let weights = map.default_reweights();
    let mut ws = Workspace::new();
    let mut out = Vec::with_capacity(8);
    let mut group = c.benchmark_group("do_rule");
    group.throughput(Throughput::Elements(1000));
    for (name, rule, size) in [("replicated_rep3", 0, 3), ("ec_indep5", 1, 5)] {
        group.bench_function(name, |b| {
            let mut x = 0i32;
            b.iter(|| {
                for _ in 0..1000 {
                    map.do_rule(rule, x, size, &weights, None, &mut ws, &mut out);
                    x = x.wrapping_add(1);
                }
                out.len()
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
