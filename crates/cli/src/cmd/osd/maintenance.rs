//! `cairn osd ok-to-stop` and `cairn osd safe-to-destroy` (Ceph's): before maintenance, whether
//! stopping some OSDs leaves every PG serving, and whether destroying them loses no copy.
//! Judged from the map (each PG's acting set and its pool's min_size), the PG states the
//! primaries report and the PG copies each OSD holds; nothing here changes the cluster.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;

use anyhow::{bail, Context};
use cairn_clustermap::ClusterMap;
use cairn_clustermap::PgId;

use crate::osd_reports::OsdUsage;
use crate::osd_reports::PgRow;

/// What stopping some OSDs would do to the PGs.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct StopVerdict {
    /// PGs that would serve nothing: fewer than min_size copies left, or not active now.
    pub unavailable: Vec<String>,
    /// PGs that would go on serving with fewer copies than their pool's size.
    pub degraded: usize,
}

impl StopVerdict {
    /// Whether the OSDs can stop with every PG still serving.
    pub fn ok(&self) -> bool {
        self.unavailable.is_empty()
    }
}

/// Checks that every id names an OSD of the map.
fn known(map: &ClusterMap, ids: &[i32]) -> Result<BTreeSet<i32>, String> {
    match ids.iter().find(|id| !map.osds.contains_key(id)) {
        Some(id) => Err(format!("no osd.{id} in the map")),
        None if ids.is_empty() => Err("name at least one OSD".into()),
        None => Ok(ids.iter().copied().collect()),
    }
}

/// One PG where the map places it.
struct Placed {
    pg: PgId,
    /// Its pool's size.
    size: u32,
    /// Its pool's min_size (at least 1).
    min_size: u32,
    acting: Vec<i32>,
    up: Vec<i32>,
}

/// Every PG with its acting and up sets in `map`.
fn placements(map: &ClusterMap) -> Vec<Placed> {
    let mut out = Vec::new();
    let mut mapper = map.placement.mapper();
    for pool in map.placement.pools.values() {
        for pg in pool.pgs() {
            if let Ok(m) = mapper.map_pg(pg) {
                out.push(Placed {
                    pg,
                    size: pool.size,
                    min_size: pool.min_size.max(1),
                    acting: m.acting,
                    up: m.up,
                });
            }
        }
    }
    out
}

/// Ceph's `osd ok-to-stop`: of the PGs the OSDs `ids` serve, those that would be left with
/// fewer than their pool's min_size copies (or that do not serve now: `rows` says so), and how
/// many others would go on degraded.
pub fn ok_to_stop(map: &ClusterMap, ids: &[i32], rows: &[PgRow]) -> Result<StopVerdict, String> {
    let ids = known(map, ids)?;
    let states: BTreeMap<&str, &str> = rows
        .iter()
        .map(|r| (r.pgid.as_str(), r.state.as_str()))
        .collect();
    let mut verdict = StopVerdict::default();
    for Placed {
        pg,
        size,
        min_size,
        acting,
        ..
    } in placements(map)
    {
        let stopped = acting.iter().filter(|o| ids.contains(o)).count();
        if stopped == 0 {
            continue;
        }
        let left = acting.len() - stopped;
        let name = pg.to_string();
        let state = states.get(name.as_str()).copied();
        if left < min_size as usize {
            verdict.unavailable.push(format!(
                "pg {name} would keep {left} of min_size {min_size} copies (acting {acting:?})"
            ));
        } else if state.is_some_and(|s| !s.starts_with("active")) {
            verdict
                .unavailable
                .push(format!("pg {name} is {} now", state.unwrap_or("?")));
        } else if left < size as usize {
            verdict.degraded += 1;
        }
    }
    Ok(verdict)
}

/// Ceph's `osd safe-to-destroy`: why destroying the OSDs `ids` could lose data, if it could.
/// Safe when no PG's up or acting set holds them, every PG reported is active+clean, and
/// each of them that is up holds no PG copy (`usage`: its own count, strays included).
pub fn safe_to_destroy(
    map: &ClusterMap,
    ids: &[i32],
    rows: &[PgRow],
    usage: &BTreeMap<i32, OsdUsage>,
) -> Result<Vec<String>, String> {
    let ids = known(map, ids)?;
    let mut why = Vec::new();
    let mut mapped: BTreeMap<i32, usize> = BTreeMap::new();
    for Placed { acting, up, .. } in placements(map) {
        let both: BTreeSet<i32> = acting.into_iter().chain(up).collect();
        for o in both.intersection(&ids) {
            *mapped.entry(*o).or_default() += 1;
        }
    }
    for (o, n) in &mapped {
        why.push(format!(
            "osd.{o} is in the up or acting set of {n} PGs: mark it out and wait for them to be clean elsewhere"
        ));
    }
    for id in &ids {
        if !map.osds.get(id).is_some_and(|o| o.up) {
            continue;
        }
        match usage.get(id) {
            Some(u) if u.pgs > 0 => why.push(format!(
                "osd.{id} still holds {} PG copies (strays are deleted once their PGs are clean)",
                u.pgs
            )),
            Some(_) => {}
            None => why.push(format!("osd.{id} is up and did not say what it holds")),
        }
    }
    let unclean = rows.iter().filter(|r| r.state != "active+clean").count();
    if unclean > 0 {
        why.push(format!(
            "{unclean} PGs are not active+clean: their other copies may be incomplete"
        ));
    }
    Ok(why)
}

/// The OSDs named, as an operator reads them ("osd.1, osd.2").
fn named(ids: &[i32]) -> String {
    ids.iter()
        .map(|o| format!("osd.{o}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `cairn osd ok-to-stop ID...`: exits 0 when the OSDs can stop with every PG serving.
pub fn run_ok_to_stop(mon: SocketAddr, ids: &[i32]) -> anyhow::Result<()> {
    crate::runtime::command()?.block_on(async {
        let client = crate::mon_link::connect(mon).await?;
        let map = client.map().context("no map from the monitor")?;
        let rows = crate::osd_reports::pg_rows(&client).await;
        let v = ok_to_stop(&map, ids, &rows).map_err(anyhow::Error::msg)?;
        if !v.ok() {
            let mut text = format!(
                "{} not ok to stop: {} PGs would not serve",
                named(ids),
                v.unavailable.len()
            );
            for line in &v.unavailable {
                text.push_str("\n  ");
                text.push_str(line);
            }
            bail!(text);
        }
        println!(
            "{} ok to stop: every PG keeps min_size copies serving; {} PGs would be degraded meanwhile",
            named(ids),
            v.degraded
        );
        Ok(())
    })
}

/// `cairn osd safe-to-destroy ID...`: exits 0 when destroying the OSDs loses no copy.
pub fn run_safe_to_destroy(mon: SocketAddr, ids: &[i32]) -> anyhow::Result<()> {
    crate::runtime::command()?.block_on(async {
        let client = crate::mon_link::connect(mon).await?;
        let map = client.map().context("no map from the monitor")?;
        let rows = crate::osd_reports::pg_rows(&client).await;
        let usage = crate::osd_reports::usage_of(&client).await;
        let why = safe_to_destroy(&map, ids, &rows, &usage).map_err(anyhow::Error::msg)?;
        if !why.is_empty() {
            bail!(
                "{} not safe to destroy:\n  {}",
                named(ids),
                why.join("\n  ")
            );
        }
        println!(
            "{} safe to destroy: no PG maps to them, they hold no copy, every PG is active+clean",
            named(ids)
        );
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_mon::Monitor;
    use cairn_proto::mon::Request;

    /// Four OSDs on four hosts, pool `data` of size 3 (min_size 2), 16 PGs.
    fn monitor() -> Monitor {
        crate::health::test_monitor(4, 16)
    }

    fn clean_rows(map: &ClusterMap) -> Vec<PgRow> {
        placements(map)
            .into_iter()
            .map(|p| PgRow::parse(&format!("{} active+clean [0,1,2] 5'1 5 1", p.pg)).unwrap())
            .collect()
    }

    #[test]
    fn one_osd_of_four_may_stop_two_may_not_and_a_pg_not_serving_counts() {
        let mon = monitor();
        let map = mon.map();
        let rows = clean_rows(map);
        let one = ok_to_stop(map, &[1], &rows).unwrap();
        assert!(one.ok(), "{one:?}");
        let held = placements(map)
            .iter()
            .filter(|p| p.acting.contains(&1))
            .count();
        assert!(held > 0);
        assert_eq!(one.degraded, held);
        let two = ok_to_stop(map, &[1, 2], &rows).unwrap();
        assert!(!two.ok());
        assert!(
            two.unavailable[0].contains("would keep 1 of min_size 2"),
            "{two:?}"
        );
        // A PG osd.1 serves that is peering now would not serve either.
        let pg = placements(map)
            .into_iter()
            .find(|p| p.acting.contains(&1))
            .unwrap()
            .pg;
        let mut rows = rows;
        let at = rows.iter().position(|r| r.pgid == pg.to_string()).unwrap();
        rows[at].state = "peering".into();
        let v = ok_to_stop(map, &[1], &rows).unwrap();
        assert_eq!(v.unavailable, [format!("pg {pg} is peering now")]);
        assert_eq!(
            ok_to_stop(map, &[9], &rows),
            Err("no osd.9 in the map".into())
        );
        assert!(ok_to_stop(map, &[], &rows).is_err());
    }

    #[test]
    fn only_an_out_emptied_osd_is_safe_to_destroy() {
        let mut mon = monitor();
        let rows = clean_rows(mon.map());
        let usage = |pgs: u64| -> BTreeMap<i32, OsdUsage> {
            [(
                3,
                OsdUsage {
                    pgs,
                    ..OsdUsage::default()
                },
            )]
            .into()
        };
        let why = safe_to_destroy(mon.map(), &[3], &rows, &usage(12)).unwrap();
        assert!(why[0].contains("is in the up or acting set of"), "{why:?}");
        mon.handle(1, Request::MarkOut { id: 3 }).unwrap();
        let why = safe_to_destroy(mon.map(), &[3], &clean_rows(mon.map()), &usage(2)).unwrap();
        assert!(
            why[0].contains("is in the up or acting set of"),
            "its PGs still serve from it until they are filled elsewhere: {why:?}"
        );
        // Their primaries fill the new copies and hand the PGs to their up sets.
        let filled = Request::PgTemp {
            temps: mon
                .map()
                .placement
                .pg_temp
                .keys()
                .map(|pg| (*pg, Vec::new()))
                .collect(),
        };
        mon.handle(2, filled).unwrap();
        let rows = clean_rows(mon.map());
        let why = safe_to_destroy(mon.map(), &[3], &rows, &usage(2)).unwrap();
        assert_eq!(
            why,
            ["osd.3 still holds 2 PG copies (strays are deleted once their PGs are clean)"]
        );
        assert!(safe_to_destroy(mon.map(), &[3], &rows, &usage(0))
            .unwrap()
            .is_empty());
        let why = safe_to_destroy(mon.map(), &[3], &rows, &BTreeMap::new()).unwrap();
        assert_eq!(why, ["osd.3 is up and did not say what it holds"]);
        let mut unclean = rows.clone();
        unclean[0].state = "active+remapped".into();
        let why = safe_to_destroy(mon.map(), &[3], &unclean, &usage(0)).unwrap();
        assert_eq!(
            why,
            ["1 PGs are not active+clean: their other copies may be incomplete"]
        );
        // Down and out, with every PG clean: safe without asking it.
        mon.handle(2, Request::MarkDown { id: 3 }).unwrap();
        assert!(safe_to_destroy(mon.map(), &[3], &rows, &BTreeMap::new())
            .unwrap()
            .is_empty());
    }
}
