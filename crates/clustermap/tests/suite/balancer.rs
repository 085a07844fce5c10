//! The balancer on seed 002's map (5 hosts x 12 OSDs, size 3) and the unequal-weight map:
//! every OSD within one PG of target, primaries too, failure domains respected, moves close to
//! the lower bound, deterministic; and incremental after adding or removing an OSD.

use cairn_clustermap::analysis::analyze;
use cairn_clustermap::balance::{balance, placement_of, BalanceOptions};
use cairn_clustermap::diff::movement;
use cairn_clustermap::shape::Topology;
use cairn_clustermap::{OsdMap, Pool};
use cairn_crush::{json, Bucket, BucketAlg, CrushMap, Device};

fn crush(name: &str) -> CrushMap {
    let path = format!(
        "{}/../crush/tests/vectors/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    json::from_json(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn osdmap(crush: CrushMap, pg_num: u32) -> OsdMap {
    let mut map = OsdMap::all_up_in(crush);
    map.add_pool(Pool::replicated(1, "rbd", 3, pg_num, 0).unwrap())
        .unwrap();
    map
}

fn assert_valid_and_balanced(map: &OsdMap, up: &[Vec<i32>]) {
    let topo = Topology::for_pool(map, &map.pools[&1]).unwrap();
    for set in up {
        assert_eq!(set.len(), 3);
        let mut hosts: Vec<i32> = set.iter().map(|&o| topo.domain[o as usize]).collect();
        hosts.sort();
        hosts.dedup();
        assert_eq!(hosts.len(), 3, "replicas of one PG share a host: {set:?}");
    }
    let spread = analyze(up, &topo);
    assert!(
        spread.osds.max_deviation < 1.0,
        "replica deviation {}",
        spread.osds.max_deviation
    );
    assert!(
        spread.primaries.max_deviation < 1.0,
        "primary deviation {}",
        spread.primaries.max_deviation
    );
}

#[test]
fn seed_002_map_balances_to_within_one_pg() {
    for pg_num in [60, 240, 960, 3840] {
        let mut map = osdmap(crush("map-eq60.json"), pg_num);
        let before = analyze(
            &cairn_clustermap::balance::up_sets(&map, 1).unwrap(),
            &Topology::for_pool(&map, &map.pools[&1]).unwrap(),
        );
        assert!(
            before.osds.max_deviation > 1.0,
            "CRUSH alone is not balanced at {pg_num}"
        );
        let out = balance(&map, 1, None, BalanceOptions::default()).unwrap();
        assert!(out.converged, "pg_num {pg_num}");
        assert!(
            out.moved_replicas as f64 <= out.lower_bound as f64 * 1.05 + 1.0,
            "pg_num {pg_num}: moved {} vs lower bound {}",
            out.moved_replicas,
            out.lower_bound
        );
        map.exceptions = out.exceptions.clone();
        // The table, applied with Ceph's semantics, reproduces the planned placement.
        let up = cairn_clustermap::balance::up_sets(&map, 1).unwrap();
        assert_eq!(up, out.up, "pg_num {pg_num}");
        assert_valid_and_balanced(&map, &up);
        let again = balance(
            &osdmap(crush("map-eq60.json"), pg_num),
            1,
            None,
            BalanceOptions::default(),
        )
        .unwrap();
        assert_eq!(again.exceptions, out.exceptions, "deterministic");
    }
}

#[test]
fn unequal_weights_balance_to_weighted_targets() {
    let mut map = osdmap(crush("map-w60.json"), 1024);
    let out = balance(&map, 1, None, BalanceOptions::default()).unwrap();
    assert!(out.converged);
    map.exceptions = out.exceptions;
    assert_valid_and_balanced(&map, &cairn_clustermap::balance::up_sets(&map, 1).unwrap());
}

#[test]
fn rebalancing_is_idempotent_and_keeps_valid_exceptions() {
    let mut map = osdmap(crush("map-eq60.json"), 960);
    let first = balance(&map, 1, None, BalanceOptions::default()).unwrap();
    map.exceptions = first.exceptions.clone();
    let second = balance(&map, 1, None, BalanceOptions::default()).unwrap();
    assert_eq!(second.moved_replicas, 0);
    assert_eq!(second.dropped_exceptions, 0);
    assert_eq!(second.exceptions, first.exceptions);
}

fn add_osd(mut crush: CrushMap, host_id: i32) -> CrushMap {
    let new_id = crush.max_devices();
    crush.devices.insert(
        new_id,
        Device {
            name: format!("osd.{new_id}"),
            class: None,
        },
    );
    let host = crush.bucket(host_id).unwrap().clone();
    let mut items = host.items.clone();
    let mut weights = host.weights.clone();
    items.push(new_id);
    weights.push(0x10000);
    let rebuilt = Bucket::new(
        host.id,
        host.name.clone(),
        host.type_id,
        BucketAlg::Straw2,
        items,
        weights,
        1,
    )
    .unwrap();
    let delta = 0x10000;
    crush.insert_bucket(rebuilt).unwrap();
    // Propagate the weight change to every ancestor, as `ceph osd crush add` does.
    let mut child = host_id;
    while let Some(parent) = crush.parent_of(child).cloned() {
        let mut weights = parent.weights.clone();
        let pos = parent.items.iter().position(|&i| i == child).unwrap();
        weights[pos] += delta;
        let b = Bucket::new(
            parent.id,
            parent.name.clone(),
            parent.type_id,
            parent.alg,
            parent.items.clone(),
            weights,
            1,
        )
        .unwrap();
        crush.insert_bucket(b).unwrap();
        child = parent.id;
    }
    crush
}

#[test]
fn adding_an_osd_moves_little_more_than_its_fair_share() {
    let mut old = osdmap(crush("map-eq60.json"), 3840);
    old.exceptions = balance(&old, 1, None, BalanceOptions::default())
        .unwrap()
        .exceptions;
    let previous = placement_of(&old, 1).unwrap();
    let mut new = osdmap(add_osd(old.crush.clone(), -1), 3840);
    new.exceptions = old.exceptions.clone();
    let out = balance(&new, 1, Some(&previous), BalanceOptions::default()).unwrap();
    assert!(out.converged);
    new.exceptions = out.exceptions.clone();
    assert_valid_and_balanced(&new, &cairn_clustermap::balance::up_sets(&new, 1).unwrap());
    let topo = Topology::for_pool(&new, &new.pools[&1]).unwrap();
    let m = movement(&previous, &out.placement, &topo);
    assert!(
        m.ratio_to_minimum <= 1.1,
        "moved {} vs minimum {}",
        m.moved_replicas,
        m.minimum_replicas
    );
    assert!(out.kept_exceptions > 0);
}

#[test]
fn marking_an_osd_out_moves_only_its_replicas() {
    let mut old = osdmap(crush("map-eq60.json"), 3840);
    old.exceptions = balance(&old, 1, None, BalanceOptions::default())
        .unwrap()
        .exceptions;
    let previous = placement_of(&old, 1).unwrap();
    let mut new = old.clone();
    new.osds.get_mut(&7).unwrap().reweight = 0;
    let out = balance(&new, 1, Some(&previous), BalanceOptions::default()).unwrap();
    assert!(out.converged);
    assert!(out.placement.iter().all(|s| !s.contains(&7)));
    let topo = Topology::for_pool(&new, &new.pools[&1]).unwrap();
    let m = movement(&previous, &out.placement, &topo);
    assert!(
        m.ratio_to_minimum <= 1.1,
        "moved {} vs minimum {}",
        m.moved_replicas,
        m.minimum_replicas
    );
    new.exceptions = out.exceptions;
    assert_valid_and_balanced(&new, &cairn_clustermap::balance::up_sets(&new, 1).unwrap());
}

#[test]
fn class_rules_balance_within_their_class() {
    use std::fmt::Write as _;
    let mut src = String::from("tunable choose_total_tries 50\ntunable chooseleaf_descend_once 1\ntunable chooseleaf_vary_r 1\ntunable chooseleaf_stable 1\ntunable straw_calc_version 1\n");
    for osd in 0..40 {
        let class = if osd % 4 == 0 { "ssd" } else { "hdd" };
        let _ = writeln!(src, "device {osd} osd.{osd} class {class}");
    }
    src.push_str("type 0 osd\ntype 1 host\ntype 2 root\n");
    for h in 0..5 {
        let _ = writeln!(src, "host h{h} {{\n\tid -{}\n\talg straw2\n\thash 0", h + 1);
        for i in 0..8 {
            let _ = writeln!(src, "\titem osd.{} weight 1.000", h * 8 + i);
        }
        src.push_str("}\n");
    }
    src.push_str("root default {\n\tid -6\n\talg straw2\n\thash 0\n");
    for h in 0..5 {
        let _ = writeln!(src, "\titem h{h}");
    }
    src.push_str("}\nrule ssd {\n\tid 0\n\ttype replicated\n\tstep take default class ssd\n\tstep chooseleaf firstn 0 type host\n\tstep emit\n}\n");
    let crush = cairn_crush::text::parse(&src).unwrap();
    let mut map = osdmap(crush, 512);
    let out = balance(&map, 1, None, BalanceOptions::default()).unwrap();
    assert!(out.converged);
    map.exceptions = out.exceptions;
    let up = cairn_clustermap::balance::up_sets(&map, 1).unwrap();
    assert!(
        up.iter().flatten().all(|&o| o % 4 == 0),
        "a replica left the ssd class"
    );
    assert_valid_and_balanced(&map, &up);
}

#[test]
fn a_down_osd_excluded_from_the_topology_leaves_no_false_imbalance() {
    let mut map = osdmap(crush("map-eq60.json"), 3840);
    map.exceptions = balance(&map, 1, None, BalanceOptions::default())
        .unwrap()
        .exceptions;
    map.osds.get_mut(&7).unwrap().up = false;
    let up = cairn_clustermap::balance::up_sets(&map, 1).unwrap();
    assert!(up.iter().all(|s| !s.contains(&7)));
    // Counted, the down OSD (still in) is a whole target short of its share.
    let mut topo = Topology::for_pool(&map, &map.pools[&1]).unwrap();
    let counted = analyze(&up, &topo);
    assert_eq!(counted.osds.min, 0);
    assert!(counted.osds.max_deviation > 150.0, "{:?}", counted.osds);
    // Excluded, its share is the others' and only the PGs it held are short a copy.
    topo.exclude(7);
    topo.exclude(-1);
    topo.exclude(10_000);
    let spread = analyze(&up, &topo);
    assert!(spread.per_osd.iter().all(|s| s.osd != 7));
    assert_eq!(spread.per_osd.len(), 59);
    let targets: f64 = spread.per_osd.iter().map(|s| s.target).sum();
    assert!((targets - spread.total_replicas as f64).abs() < 1e-6);
    assert!(spread.osds.min > 0);
    assert!(
        spread.osds.max_deviation < 10.0,
        "{:?} against {:?}",
        spread.osds,
        counted.osds
    );
}
