//! Priming temporary acting sets (Ceph's `mon_osd_prime_pg_temp`): when an epoch that
//! reweights an OSD (marks it in or out, with the balancer's exceptions that follow) moves a
//! PG's data to an OSD that was already up, the monitor keeps the PG's acting set as it was,
//! in the same epoch, with a `pg_temp` entry. The PG then peers once, with the copies that
//! already hold its data, and its primary fills the newcomers in the background before
//! handing the PG to its up set. Without it the PG would first peer with its new up set, find
//! the newcomer empty, ask for the temporary set and peer again: two peerings, with the
//! client's ops waiting on each, for every PG that moved at once.
//!
//! An OSD that just came up is no newcomer here, and epochs of OSDs going down, up or joining
//! prime nothing: a returning OSD's copies are usually a short log behind and recover in
//! place, and a new OSD's PGs ask for their temporary sets themselves. A PG whose acting set
//! loses an OSD, or keeps fewer than `min_size` of them, is left to peer as it would.

use cairn_clustermap::{incremental::Change, ClusterMap, MapError, PgId};

/// The `pg_temp` changes that keep the acting set of every PG that `after` moves to an
/// OSD already up in `before`: for each PG of a pool present in both maps with the same PG
/// count and a `pg_temp` entry in neither, whose up set in `after` has such a newcomer
/// outside its acting set in `before`, while that acting set stays up in `after` with at
/// least the pool's `min_size` OSDs.
pub fn primed_pg_temps(before: &ClusterMap, after: &ClusterMap) -> Result<Vec<Change>, MapError> {
    let mut changes = Vec::new();
    let mut old = before.placement.mapper();
    let mut new = after.placement.mapper();
    let is_up =
        |map: &ClusterMap, o: i32| map.placement.osds.get(&o).is_some_and(|s| s.exists && s.up);
    for (id, pool) in &after.placement.pools {
        let same_pool = before
            .placement
            .pools
            .get(id)
            .is_some_and(|p| p.pg_num == pool.pg_num && p.pgp_num == pool.pgp_num);
        if !same_pool {
            continue;
        }
        let min_size = pool.min_size.max(1) as usize;
        for seed in 0..pool.pg_num {
            let pg = PgId { pool: *id, seed };
            let named = |m: &ClusterMap| m.placement.pg_temp.contains_key(&pg);
            if named(before) || named(after) {
                // A primary asked for this one, or its removal: never overruled.
                continue;
            }
            let acting = old.map_pg(pg)?.acting;
            let up = new.map_pg(pg)?.up;
            let newcomer = up.iter().any(|o| !acting.contains(o) && is_up(before, *o));
            let holds = acting.len() >= min_size && acting.iter().all(|o| is_up(after, *o));
            if newcomer && holds && up != acting {
                changes.push(Change::PgTemp { pg, acting });
            }
        }
    }
    Ok(changes)
}
