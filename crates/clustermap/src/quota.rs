//! Pool quotas (Ceph's `osd pool set-quota`) and the PG usage the OSDs report.
//!
//! A pool may be given a most objects and a most bytes (logical, one copy). Every primary
//! reports, every few seconds, how many client objects each PG it leads holds and their bytes
//! (its store keeps these per collection, so a report costs no listing); the monitor keeps the
//! newest report of each PG in memory ([`PgUsageTable`]) and marks a pool `full` in the map
//! once its PGs add up to a limit. Clients and primaries then refuse writes to it, except
//! those that only free space, until removals bring it back under (Ceph's `FULL_QUOTA` pool
//! flag and `EDQUOT`). As in Ceph the check trails the writes by one report: a pool can go past
//! its quota by what its clients write in that time.

use std::collections::BTreeMap;

use crate::PgId;
use serde::{Deserialize, Serialize};

use crate::cluster_map::ClusterMap;

/// Most PG entries in one usage report (explicit limit; an OSD with more PGs sends several).
pub const MAX_PG_USAGE_PER_REPORT: usize = 16_384;

/// A pool's quota, and whether the monitor found it reached.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolQuota {
    /// Most client objects (none: no limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_objects: Option<u64>,
    /// Most logical bytes, one copy (none: no limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_bytes: Option<u64>,
    /// Reached: writes to the pool are refused, except those that only free space.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub full: bool,
}

impl PoolQuota {
    /// Whether any limit is set.
    pub fn is_limited(&self) -> bool {
        self.max_objects.is_some() || self.max_bytes.is_some()
    }

    /// The limit `usage` reaches, named for an operator ("max_objects 100"), if any.
    pub fn reached_by(&self, usage: &PoolUsage) -> Option<String> {
        if let Some(max) = self.max_objects.filter(|m| usage.objects >= *m) {
            return Some(format!("max_objects {max}"));
        }
        if let Some(max) = self.max_bytes.filter(|m| usage.bytes >= *m) {
            return Some(format!("max_bytes {max}"));
        }
        None
    }

    /// The limits as an operator reads them ("max_objects 100, max_bytes N/A").
    pub fn describe(&self) -> String {
        format!(
            "max_objects {}, max_bytes {}",
            limit_text(self.max_objects),
            limit_text(self.max_bytes)
        )
    }
}

/// One limit as an operator reads it: its value, or `N/A` when there is none (Ceph's).
pub fn limit_text(limit: Option<u64>) -> String {
    limit.map_or_else(|| "N/A".to_string(), |v| v.to_string())
}

/// One PG's usage, as its primary counted it from its store.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PgUsage {
    /// The PG.
    pub pg: PgId,
    /// Its client objects.
    pub objects: u64,
    /// Their logical bytes (one copy).
    pub bytes: u64,
}

/// A pool's usage summed over the PGs whose primaries reported.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolUsage {
    /// Client objects.
    pub objects: u64,
    /// Their logical bytes (one copy).
    pub bytes: u64,
    /// PGs with a report (out of the pool's pg_num).
    pub pgs_reported: u32,
}

/// The newest usage report of each PG. In memory only: after a monitor restart the OSDs'
/// next reports fill it again, and until every PG of a pool has reported, the pool's `full`
/// mark is only ever set, never cleared, from it.
#[derive(Debug, Default)]
pub struct PgUsageTable {
    by_pg: BTreeMap<PgId, (u64, u64)>,
}

impl PgUsageTable {
    /// Records `usage` (each entry already checked to come from its PG's primary).
    pub fn record(&mut self, usage: &PgUsage) {
        self.by_pg.insert(usage.pg, (usage.objects, usage.bytes));
    }

    /// Pool `pool`'s usage over its PGs `0..pg_num`.
    pub fn pool(&self, pool: i64, pg_num: u32) -> PoolUsage {
        let first = PgId { pool, seed: 0 };
        self.by_pg
            .range(first..)
            .take_while(|(pg, _)| pg.pool == pool && pg.seed < pg_num)
            .fold(PoolUsage::default(), |u, (_, (objects, bytes))| PoolUsage {
                objects: u.objects + objects,
                bytes: u.bytes + bytes,
                pgs_reported: u.pgs_reported + 1,
            })
    }

    /// Forgets the reports of a removed pool.
    pub fn forget_pool(&mut self, pool: i64) {
        self.by_pg.retain(|pg, _| pg.pool != pool);
    }
}

/// Why writes to `pool` are refused while `map` marks it full, for an operator: its name and
/// its limits.
pub fn refusal(map: &ClusterMap, pool: i64) -> String {
    let name = map.pool_name(pool);
    let limits = map
        .quotas
        .get(&pool)
        .map(PoolQuota::describe)
        .unwrap_or_default();
    format!("pool {name} is full: its quota is reached ({limits})")
}

/// Whether a pool with `quota` and `usage` over `pg_num` PGs is full: `Some(true)` once a
/// limit is reached, `Some(false)` when none is and every PG reported (or no limit is set),
/// `None` when that cannot be known yet (keep what the map says).
pub fn judge(quota: &PoolQuota, usage: &PoolUsage, pg_num: u32) -> Option<bool> {
    if !quota.is_limited() {
        return Some(false);
    }
    if quota.reached_by(usage).is_some() {
        return Some(true);
    }
    (usage.pgs_reported >= pg_num).then_some(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(pool: i64, seed: u32, objects: u64, bytes: u64) -> PgUsage {
        PgUsage {
            pg: PgId { pool, seed },
            objects,
            bytes,
        }
    }

    #[test]
    fn a_pool_sums_its_own_pgs_and_keeps_the_newest_report() {
        let mut t = PgUsageTable::default();
        for u in [
            usage(1, 0, 5, 50),
            usage(1, 1, 7, 70),
            usage(2, 0, 100, 1000),
            usage(1, 0, 6, 60),
            usage(1, 9, 1, 1),
        ] {
            t.record(&u);
        }
        let p1 = t.pool(1, 4);
        assert_eq!(
            p1,
            PoolUsage {
                objects: 13,
                bytes: 130,
                pgs_reported: 2
            }
        );
        assert_eq!(t.pool(2, 1).objects, 100);
        t.forget_pool(1);
        assert_eq!(t.pool(1, 4), PoolUsage::default());
        assert_eq!(t.pool(2, 1).pgs_reported, 1);
    }

    #[test]
    fn fullness_is_judged_only_from_what_is_known() {
        let q = PoolQuota {
            max_objects: Some(10),
            max_bytes: Some(1000),
            full: false,
        };
        let some = PoolUsage {
            objects: 3,
            bytes: 30,
            pgs_reported: 1,
        };
        assert_eq!(judge(&q, &some, 2), None, "one PG of two unknown");
        assert_eq!(
            judge(
                &q,
                &PoolUsage {
                    pgs_reported: 2,
                    ..some
                },
                2
            ),
            Some(false)
        );
        let many = PoolUsage {
            objects: 10,
            ..some
        };
        assert_eq!(
            judge(&q, &many, 2),
            Some(true),
            "reached, whatever is unknown"
        );
        assert_eq!(q.reached_by(&many).as_deref(), Some("max_objects 10"));
        let big = PoolUsage {
            bytes: 1000,
            ..some
        };
        assert_eq!(q.reached_by(&big).as_deref(), Some("max_bytes 1000"));
        assert_eq!(judge(&PoolQuota::default(), &many, 2), Some(false));
        assert_eq!(q.describe(), "max_objects 10, max_bytes 1000");
        assert_eq!(
            PoolQuota::default().describe(),
            "max_objects N/A, max_bytes N/A"
        );
    }
}
