//! `cairn df`: the cluster's raw space and each pool's usage, as Ceph's `ceph df`.
//!
//! Raw space is what every up OSD reports of its device (`df`); a pool's objects and stored
//! bytes are summed from the primaries of its PGs (`pg usage`, counted from their stores).
//! MAX AVAIL is Ceph's projection: how much more the pool can take before the first of its
//! OSDs reaches its full ratio, when new data spreads over its OSDs in proportion to their
//! placement targets. This module only gathers and computes; it never changes the cluster.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use anyhow::Context;
use cairn_client::Client;
use cairn_clustermap::shape::Topology;
use cairn_clustermap::PoolQuota;
use cairn_clustermap::{OsdMap, PgId, Pool};

use crate::convert::sat_u64;
use crate::osd_reports::OsdUsage;

/// One pool's row.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolUsage {
    /// Pool name.
    pub name: String,
    /// Pool id.
    pub id: i64,
    /// Its PGs.
    pub pgs: u32,
    /// PGs whose primary answered (the others' objects are not counted).
    pub reported_pgs: u32,
    /// Client objects.
    pub objects: u64,
    /// Logical bytes of those objects (one copy).
    pub stored: u64,
    /// Bytes of every copy: `stored` times the pool's size.
    pub used: u64,
    /// Logical bytes the pool can still take before the first of its OSDs is full.
    pub max_avail: u64,
}

impl PoolUsage {
    /// `used` as a share of `used` plus what the pool's copies may still take, in percent
    /// (Ceph's %USED).
    pub fn percent_used(&self, size: u32) -> f64 {
        let room = self.max_avail.saturating_mul(u64::from(size));
        match self.used.saturating_add(room) {
            0 => 0.0,
            total => 100.0 * self.used as f64 / total as f64,
        }
    }
}

/// Parses a `pg usage` reply (`PGID objects bytes` per line); lines that do not parse are
/// skipped.
pub fn parse_pg_usage(text: &str) -> BTreeMap<PgId, (u64, u64)> {
    text.lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let pg = f.next()?.parse().ok()?;
            let objects = f.next()?.parse().ok()?;
            let bytes = f.next()?.parse().ok()?;
            Some((pg, (objects, bytes)))
        })
        .collect()
}

/// What `pool` can still take (logical bytes, one copy): new data lands on each OSD in
/// proportion to its placement target, so the pool is full once the OSD with the least room
/// for its share is; `usage` holds the reporting (up) OSDs, the others count for nothing (with
/// fewer failure domains up than the pool's size, each object gets fewer copies).
pub fn max_avail(map: &OsdMap, pool: &Pool, usage: &BTreeMap<i32, OsdUsage>) -> u64 {
    let Ok(mut topo) = Topology::for_pool(map, pool) else {
        return 0;
    };
    let osds = i32::try_from(topo.domain.len()).expect("per-OSD tables are indexed by i32 OSD ids");
    for osd in 0..osds {
        if !usage.contains_key(&osd) {
            topo.exclude(osd);
        }
    }
    let targets = topo.targets(
        f64::from(pool.size) * f64::from(pool.pg_num),
        pool.pg_num as usize,
    );
    let total: f64 = targets.iter().sum();
    if total <= 0.0 {
        return 0;
    }
    let raw = usage
        .iter()
        .filter_map(|(&osd, u)| {
            let share = targets.get(osd as usize).copied().unwrap_or(0.0) / total;
            (share > 0.0).then(|| {
                let limit = u.capacity as f64 * u.full_ratio;
                (limit - u.allocated as f64).max(0.0) / share
            })
        })
        .fold(f64::INFINITY, f64::min);
    // Copies each new object gets: the pool's size, or fewer while fewer failure domains than
    // that are up (the targets then sum to less than size x pg_num).
    let copies = (total / f64::from(pool.pg_num.max(1))).max(1.0);
    if raw.is_finite() {
        sat_u64(raw / copies)
    } else {
        0
    }
}

/// Every pool's row from the map, the OSDs' usage and their PGs' counts.
pub fn pool_rows(
    map: &OsdMap,
    usage: &BTreeMap<i32, OsdUsage>,
    pgs: &BTreeMap<PgId, (u64, u64)>,
) -> Vec<PoolUsage> {
    map.pools
        .values()
        .map(|pool| {
            let mine = pgs.iter().filter(|(pg, _)| pg.pool == pool.id);
            let (reported, objects, stored) = mine.fold((0u32, 0u64, 0u64), |(n, o, b), (_, c)| {
                (n + 1, o + c.0, b + c.1)
            });
            PoolUsage {
                name: pool.name.clone(),
                id: pool.id,
                pgs: pool.pg_num,
                reported_pgs: reported,
                objects,
                stored,
                used: stored.saturating_mul(u64::from(pool.size)),
                max_avail: max_avail(map, pool, usage),
            }
        })
        .collect()
}

/// Bytes in binary units (`12.3 MiB`).
pub fn human(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = bytes as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    match unit {
        0 => format!("{bytes} B"),
        _ => format!("{v:.1} {}", UNITS[unit]),
    }
}

/// `cairn df`.
pub fn run(mon: SocketAddr) -> anyhow::Result<()> {
    crate::runtime::command()?.block_on(async {
        let client = crate::mon_link::connect(mon).await?;
        let map = client.map().context("no map from the monitor")?;
        let (usage, pgs) = gather(&client).await;
        let size: u64 = usage.values().map(|u| u.capacity).sum();
        let used: u64 = usage.values().map(|u| u.allocated).sum();
        println!(
            "--- RAW STORAGE ({} of {} OSDs up) ---",
            usage.len(),
            map.osds.len()
        );
        println!(
            "{:>12} {:>12} {:>12} {:>10}",
            "SIZE", "AVAIL", "USED", "%RAW USED"
        );
        println!(
            "{:>12} {:>12} {:>12} {:>10.2}",
            human(size),
            human(size.saturating_sub(used)),
            human(used),
            100.0 * used as f64 / size.max(1) as f64
        );
        println!("--- POOLS ---");
        println!(
            "{:<16} {:>4} {:>6} {:>12} {:>9} {:>12} {:>7} {:>12}",
            "POOL", "ID", "PGS", "STORED", "OBJECTS", "USED", "%USED", "MAX AVAIL"
        );
        for mut row in pool_rows(&map.placement, &usage, &pgs) {
            let size = map.placement.pools[&row.id].size;
            let quota = map.quotas.get(&row.id);
            row.max_avail = cap_by_quota(row.max_avail, row.stored, row.objects, quota);
            println!(
                "{:<16} {:>4} {:>6} {:>12} {:>9} {:>12} {:>7.2} {:>12}",
                row.name,
                row.id,
                row.pgs,
                human(row.stored),
                row.objects,
                human(row.used),
                row.percent_used(size),
                human(row.max_avail)
            );
            if let Some(q) = quota {
                let state = match q.full {
                    true => " (full: writes other than removals refused)",
                    false => "",
                };
                println!("  quota: {}{state}", q.describe());
            }
            if row.reported_pgs < row.pgs {
                println!(
                    "  ({} of its {} PGs not counted: their primaries did not answer)",
                    row.pgs - row.reported_pgs,
                    row.pgs
                );
            }
        }
        Ok(())
    })
}

/// MAX AVAIL under a pool's quota, as Ceph caps it: no more than the bytes its `max_bytes`
/// leaves, and nothing once its objects reach `max_objects`.
pub fn cap_by_quota(max_avail: u64, stored: u64, objects: u64, quota: Option<&PoolQuota>) -> u64 {
    let Some(q) = quota else { return max_avail };
    if q.max_objects.is_some_and(|m| objects >= m) {
        return 0;
    }
    match q.max_bytes {
        Some(m) => max_avail.min(m.saturating_sub(stored)),
        None => max_avail,
    }
}

/// Each up OSD's `df` and the `pg usage` of the PGs it leads; an OSD that does not answer is
/// left out (named on stderr when it fails `pg usage`).
async fn gather(client: &Client) -> (BTreeMap<i32, OsdUsage>, BTreeMap<PgId, (u64, u64)>) {
    let mut usage = crate::osd_reports::usage_of(client).await;
    let mut pgs = BTreeMap::new();
    let osds: Vec<i32> = usage.keys().copied().collect();
    for osd in osds {
        match client.tell(osd, &["pg".into(), "usage".into()]).await {
            Ok(led) => pgs.extend(parse_pg_usage(&led)),
            Err(e) => {
                eprintln!("osd.{osd}: {e}");
                usage.remove(&osd);
            }
        }
    }
    (usage, pgs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::convert::small_i32;
    use cairn_crush::CrushMap;

    /// Four OSDs on four hosts, each of `weight` (16.16) and a pool of size 2 over them.
    fn map(weights: [u32; 4]) -> OsdMap {
        let mut crush = CrushMap::new_cluster("default").unwrap();
        for (i, w) in weights.into_iter().enumerate() {
            crush
                .add_device(
                    small_i32(i),
                    &format!("osd.{i}"),
                    w,
                    &format!("h{i}"),
                    "default",
                )
                .unwrap();
        }
        let mut map = OsdMap::all_up_in(crush);
        map.add_pool(Pool::replicated(1, "data", 2, 64, 0).unwrap())
            .unwrap();
        map
    }

    fn usage(capacity: u64, allocated: u64) -> OsdUsage {
        OsdUsage {
            capacity,
            allocated,
            full_ratio: 0.95,
            ..OsdUsage::default()
        }
    }

    #[test]
    fn max_avail_is_set_by_the_osd_with_least_room_for_its_share() {
        let m = map([0x10000; 4]);
        let pool = &m.pools[&1];
        let gib = 1u64 << 30;
        let even: BTreeMap<i32, OsdUsage> = (0..4).map(|o| (o, usage(100 * gib, 0))).collect();
        // Each OSD takes a quarter of the raw bytes: 4 x 95 GiB raw, halved by size 2.
        let avail = max_avail(&m, pool, &even);
        assert!(
            (avail as f64 - 190.0 * gib as f64).abs() < gib as f64,
            "{avail}"
        );
        // One OSD 90 GiB full: 5 GiB of room for a quarter share bounds the pool.
        let mut one_full = even.clone();
        one_full.insert(2, usage(100 * gib, 90 * gib));
        let avail = max_avail(&m, pool, &one_full);
        assert!(
            (avail as f64 - 10.0 * gib as f64).abs() < gib as f64,
            "{avail}"
        );
        // Past its full ratio: nothing more fits.
        one_full.insert(2, usage(100 * gib, 99 * gib));
        assert_eq!(max_avail(&m, pool, &one_full), 0);
        // A down OSD (not reporting) leaves its share to the others.
        let three: BTreeMap<i32, OsdUsage> = (0..3).map(|o| (o, usage(100 * gib, 0))).collect();
        let avail = max_avail(&m, pool, &three);
        assert!(
            (avail as f64 - 142.5 * gib as f64).abs() < gib as f64,
            "{avail}"
        );
        assert_eq!(max_avail(&m, pool, &BTreeMap::new()), 0);
        // One OSD up: each object gets one copy (undersized), all of it on that OSD.
        let one: BTreeMap<i32, OsdUsage> = [(1, usage(100 * gib, 0))].into();
        let avail = max_avail(&m, pool, &one);
        assert!(
            (avail as f64 - 95.0 * gib as f64).abs() < gib as f64,
            "{avail}"
        );
    }

    #[test]
    fn a_quota_caps_what_a_pool_can_still_take() {
        let q = |objects: Option<u64>, bytes: Option<u64>| PoolQuota {
            max_objects: objects,
            max_bytes: bytes,
            full: false,
        };
        assert_eq!(cap_by_quota(1000, 10, 1, None), 1000);
        assert_eq!(cap_by_quota(1000, 10, 1, Some(&q(None, Some(300)))), 290);
        assert_eq!(cap_by_quota(100, 10, 1, Some(&q(None, Some(300)))), 100);
        assert_eq!(cap_by_quota(1000, 400, 1, Some(&q(None, Some(300)))), 0);
        assert_eq!(cap_by_quota(1000, 10, 5, Some(&q(Some(5), None))), 0);
        assert_eq!(cap_by_quota(1000, 10, 4, Some(&q(Some(5), None))), 1000);
    }

    #[test]
    fn a_heavier_osd_takes_a_larger_share() {
        // osd.0 weighs 3, the others 1 each: with size 2 on four hosts, osd.0 holds at most
        // one copy of each PG, so its share is capped at a half of the raw bytes.
        let m = map([0x30000, 0x10000, 0x10000, 0x10000]);
        let pool = &m.pools[&1];
        let gib = 1u64 << 30;
        let mut u: BTreeMap<i32, OsdUsage> = (0..4).map(|o| (o, usage(100 * gib, 0))).collect();
        u.insert(0, usage(100 * gib, 85 * gib));
        let avail = max_avail(&m, pool, &u);
        // 10 GiB of room for a half share: 20 GiB raw, 10 GiB for the pool.
        assert!(
            (avail as f64 - 10.0 * gib as f64).abs() < gib as f64,
            "{avail}"
        );
    }

    #[test]
    fn rows_sum_the_pgs_their_primaries_reported() {
        let m = map([0x10000; 4]);
        let text = "1.0 10 1000\n1.1 5 500\nnot a line\n1.x 1 1\n";
        let pgs = parse_pg_usage(text);
        assert_eq!(pgs.len(), 2);
        let u: BTreeMap<i32, OsdUsage> = (0..4).map(|o| (o, usage(1 << 30, 0))).collect();
        let rows = pool_rows(&m, &u, &pgs);
        assert_eq!(rows.len(), 1);
        let r = &rows[0];
        assert_eq!(
            (r.pgs, r.reported_pgs, r.objects, r.stored, r.used),
            (64, 2, 15, 1500, 3000)
        );
        assert!(r.percent_used(2) > 0.0 && r.percent_used(2) < 0.01);
        assert_eq!(human(1023), "1023 B");
        assert_eq!(human(1536), "1.5 KiB");
        assert_eq!(human(5 << 30), "5.0 GiB");
    }
}
