//! Pool -> PG -> OSD mapping must equal Ceph's `osdmaptool --test-map-pgs-dump` (vectors from
//! Ceph 16.2.15, see crates/crush/tests/vectors/README.md) and `--test-map-object`.

use cairn_clustermap::{MappingCache, OsdMap, PgId, Pool};
use cairn_crush::json;

fn eq60() -> OsdMap {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../crush/tests/vectors/map-eq60.json"
    );
    let crush = json::from_json(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut map = OsdMap::all_up_in(crush);
    map.add_pool(Pool::replicated(1, "rbd", 3, 240, 0).unwrap())
        .unwrap();
    map
}

#[test]
fn every_pg_of_the_240_pg_pool_matches_osdmaptool() {
    let map = eq60();
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../crush/tests/vectors/eq60.osdmap.pool1.pg240.txt"
    );
    let expected = std::fs::read_to_string(path).unwrap();
    let mut mapper = map.mapper();
    let mut n = 0;
    for line in expected.lines() {
        let mut cols = line.split('\t');
        let pg: PgId = cols.next().unwrap().parse().unwrap();
        let acting = cols.next().unwrap();
        let primary: i32 = cols.next().unwrap().parse().unwrap();
        let m = mapper.map_pg(pg).unwrap();
        let got: Vec<String> = m.up.iter().map(i32::to_string).collect();
        assert_eq!(format!("[{}]", got.join(",")), acting, "{pg}");
        assert_eq!(m.primary, primary, "{pg}");
        n += 1;
    }
    assert_eq!(n, 240);
}

#[test]
fn object_names_hash_to_the_pgs_osdmaptool_reports() {
    // `osdmaptool om --mark-up-in --test-map-object NAME --pool 1` on the eq60 map.
    let map = eq60();
    let pool = &map.pools[&1];
    let cases = [
        ("foo", 0x6, "[43,31,20]"),
        ("a/long-object_name.0123456789", 0x86, ""),
    ];
    let mut mapper = map.mapper();
    for (name, seed, osds) in cases {
        let pg = pool.object_pg(name, "", "");
        assert_eq!(pg, PgId { pool: 1, seed }, "{name}");
        if !osds.is_empty() {
            let up: Vec<String> = mapper
                .map_pg(pg)
                .unwrap()
                .up
                .iter()
                .map(i32::to_string)
                .collect();
            assert_eq!(format!("[{}]", up.join(",")), osds);
        }
    }
}

#[test]
fn the_mapping_cache_answers_as_the_mapper_and_forgets_on_a_new_epoch() {
    let mut map = eq60();
    let mut cache = MappingCache::default();
    for seed in 0..240 {
        let pg = PgId { pool: 1, seed };
        let want = map.mapper().map_pg(pg).unwrap();
        assert_eq!(cache.get(1, &map, pg), Some(&want), "{pg}");
    }
    assert_eq!(cache.get(1, &map, PgId { pool: 9, seed: 0 }), None);
    let pg = PgId { pool: 1, seed: 6 };
    let primary = cache.get(1, &map, pg).unwrap().primary;
    map.osds.get_mut(&primary).unwrap().up = false;
    assert_eq!(
        cache.get(1, &map, pg).unwrap().primary,
        primary,
        "within one epoch the first answer stands"
    );
    let now = cache.get(2, &map, pg).unwrap().clone();
    assert_ne!(now.primary, primary);
    assert_eq!(now, map.mapper().map_pg(pg).unwrap());
}

#[test]
fn a_pg_temp_entry_sets_the_acting_set_without_moving_the_up_set() {
    let mut map = eq60();
    let pg = PgId { pool: 1, seed: 7 };
    let plain = map.mapper().map_pg(pg).unwrap();
    assert_eq!(plain.acting, plain.up, "no pg_temp: acting is up");
    let temp: Vec<i32> = (0..60).filter(|o| !plain.up.contains(o)).take(3).collect();
    map.pg_temp.insert(pg, temp.clone());
    let m = map.mapper().map_pg(pg).unwrap();
    assert_eq!(m.up, plain.up);
    assert_eq!(m.primary, plain.primary);
    assert_eq!(m.acting, temp);
    assert_eq!(m.acting_primary(), Some(temp[0]));
    // A down member leaves the acting set; the next one serves.
    map.osds.get_mut(&temp[0]).unwrap().up = false;
    let m = map.mapper().map_pg(pg).unwrap();
    assert_eq!(m.acting, temp[1..].to_vec());
    // With fewer members up than the pool's min_size (2) the PG is served by its up set.
    map.osds.get_mut(&temp[1]).unwrap().up = false;
    let m = map.mapper().map_pg(pg).unwrap();
    assert_eq!(m.acting, m.up);
    for o in &temp {
        map.osds.get_mut(o).unwrap().up = false;
    }
    let m = map.mapper().map_pg(pg).unwrap();
    assert_eq!(m.acting, m.up);
    // Other PGs are not affected.
    let other = PgId { pool: 1, seed: 8 };
    let o = map.mapper().map_pg(other).unwrap();
    assert_eq!(o.acting, o.up);
}
