//! The cluster's health as Ceph's `ceph health detail` states it: named checks, each with a
//! severity, a one-line summary and the items behind it (which OSDs, which PGs).
//!
//! Pure: it judges a map, the PG rows the up primaries report (`pg dump`) and the OSDs'
//! usage (`df`); gathering them is the caller's. `cairn status` takes its health line from
//! here too, so both always agree.

use std::collections::BTreeMap;

use cairn_clustermap::ClusterMap;

use crate::osd_reports::{OsdUsage, PgRow};

/// How bad a check (or the whole cluster) is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// Nothing to say.
    Ok,
    /// Redundancy or balance reduced; data served.
    Warn,
    /// Writes refused or data damaged.
    Err,
}

impl Level {
    /// Ceph's spelling: `HEALTH_OK`, `HEALTH_WARN`, `HEALTH_ERR`.
    pub fn name(self) -> &'static str {
        match self {
            Level::Ok => "HEALTH_OK",
            Level::Warn => "HEALTH_WARN",
            Level::Err => "HEALTH_ERR",
        }
    }
}

/// One failed check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Check {
    /// Ceph's code for it (`OSD_DOWN`, `PG_DEGRADED`, ...).
    pub code: &'static str,
    /// Its severity.
    pub level: Level,
    /// One line.
    pub summary: String,
    /// One line per OSD or PG concerned.
    pub detail: Vec<String>,
}

/// The verdict: the worst level and every failed check, worst first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Health {
    /// The worst check's level (`Ok` without any).
    pub level: Level,
    /// The failed checks.
    pub checks: Vec<Check>,
}

/// Judges the cluster: cluster flags set, OSDs with flags of their own, OSDs down, out, full and nearfull (with their use),
/// PGs not served, PGs with no OSD up at all, degraded PGs, inconsistent PGs.
pub fn assess(map: &ClusterMap, pgs: &[PgRow], usage: &BTreeMap<i32, OsdUsage>) -> Health {
    let mut checks = Vec::new();
    if !map.flags.is_empty() {
        let names: Vec<&str> = map.flags.iter().map(|f| f.name()).collect();
        checks.push(Check {
            code: "OSDMAP_FLAGS",
            level: Level::Warn,
            summary: format!("{} flag(s) set", names.join(",")),
            detail: map
                .flags
                .iter()
                .map(|f| format!("{f}: {}", f.effect()))
                .collect(),
        });
    }
    let own_flags: Vec<String> = map
        .osds
        .values()
        .filter_map(|o| {
            let flags = o.own_flags();
            let names: Vec<&str> = flags.iter().map(|f| f.name()).collect();
            (!names.is_empty()).then(|| {
                format!(
                    "osd.{} (host {}) has flags {}",
                    o.id,
                    o.host,
                    names.join(",")
                )
            })
        })
        .collect();
    if !own_flags.is_empty() {
        checks.push(Check {
            code: "OSD_FLAGS",
            level: Level::Warn,
            summary: format!("{} OSDs have flags set", own_flags.len()),
            detail: own_flags,
        });
    }
    let full_pools: Vec<String> = map
        .quotas
        .iter()
        .filter(|(_, q)| q.full)
        .map(|(id, q)| {
            format!(
                "pool '{}' is full (running out of quota: {})",
                map.pool_name(*id),
                q.describe()
            )
        })
        .collect();
    if !full_pools.is_empty() {
        checks.push(Check {
            code: "POOL_FULL",
            level: Level::Warn,
            summary: format!(
                "{} pool(s) full (writes other than removals refused)",
                full_pools.len()
            ),
            detail: full_pools,
        });
    }
    let use_of = |id: i32| {
        usage.get(&id).map_or(String::new(), |u| {
            format!(
                " ({:.1}% used)",
                100.0 * u.allocated as f64 / u.capacity.max(1) as f64
            )
        })
    };
    let osds = |pick: &dyn Fn(&cairn_clustermap::OsdEntry) -> bool, what: &str| -> Vec<String> {
        map.osds
            .values()
            .filter(|o| pick(o))
            .map(|o| format!("osd.{} (host {}) is {what}{}", o.id, o.host, use_of(o.id)))
            .collect()
    };
    let mut osd_check = |code, level, detail: Vec<String>, what: &str| {
        if !detail.is_empty() {
            checks.push(Check {
                code,
                level,
                summary: format!("{} OSDs {what}", detail.len()),
                detail,
            });
        }
    };
    osd_check(
        "OSD_FULL",
        Level::Err,
        osds(&|o| o.full, "full"),
        "full (writes to their PGs refused)",
    );
    osd_check(
        "OSD_NEARFULL",
        Level::Warn,
        osds(&|o| o.nearfull && !o.full, "nearfull"),
        "nearfull",
    );
    osd_check("OSD_DOWN", Level::Warn, osds(&|o| !o.up, "down"), "down");
    osd_check(
        "OSD_OUT",
        Level::Warn,
        osds(&|o| o.reweight == 0, "out"),
        "out (holding no data)",
    );
    let mut pg_check = |code, level, pick: &dyn Fn(&str) -> bool, what: &str| {
        let detail: Vec<String> = pgs
            .iter()
            .filter(|r| pick(&r.state))
            .map(|r| format!("pg {} is {}, acting {}", r.pgid, r.state, r.acting))
            .collect();
        if !detail.is_empty() {
            checks.push(Check {
                code,
                level,
                summary: format!("{} PGs {what}", detail.len()),
                detail,
            });
        }
    };
    pg_check(
        "PG_DAMAGED",
        Level::Err,
        &|s| s.contains("+inconsistent"),
        "inconsistent (scrub found copies that differ; `cairn pg repair PGID`)",
    );
    pg_check(
        "PG_AVAILABILITY",
        Level::Warn,
        &|s| !s.starts_with("active"),
        "not serving I/O (down, inactive or peering)",
    );
    pg_check(
        "PG_DEGRADED",
        Level::Warn,
        &|s| s.starts_with("active") && s.contains("degraded"),
        "degraded (fewer copies than the pool's size)",
    );
    pg_check(
        "PG_REMAPPED",
        Level::Warn,
        &|s| s.starts_with("active") && s.contains("remapped"),
        "remapped (served by a temporary acting set while their up set fills)",
    );
    let unserved: Vec<String> = map
        .placement
        .pools
        .values()
        .flat_map(|pool| pool.pgs())
        .filter_map(|pg| {
            let m = map.placement.mapper().map_pg(pg).ok()?;
            m.acting
                .is_empty()
                .then(|| format!("pg {pg} has no OSD of its placement up"))
        })
        .collect();
    if !unserved.is_empty() {
        checks.push(Check {
            code: "PG_STALE",
            level: Level::Warn,
            summary: format!("{} PGs with no OSD up to serve them", unserved.len()),
            detail: unserved,
        });
    }
    checks.sort_by_key(|c| std::cmp::Reverse(c.level));
    Health {
        level: checks.iter().map(|c| c.level).max().unwrap_or(Level::Ok),
        checks,
    }
}

impl Health {
    /// One line as `ceph health` prints it: the level, then each check's summary.
    pub fn line(&self) -> String {
        let summaries: Vec<&str> = self.checks.iter().map(|c| c.summary.as_str()).collect();
        match summaries.is_empty() {
            true => self.level.name().to_string(),
            false => format!("{} {}", self.level.name(), summaries.join("; ")),
        }
    }

    /// `ceph health detail`: the line, then per check its code and summary and its items.
    pub fn detail(&self) -> String {
        let mut out = self.line() + "\n";
        for c in &self.checks {
            out.push_str(&format!("[{}] {}: {}\n", short(c.level), c.code, c.summary));
            for d in &c.detail {
                out.push_str(&format!("    {d}\n"));
            }
        }
        out
    }
}

fn short(level: Level) -> &'static str {
    match level {
        Level::Ok => "OK",
        Level::Warn => "WRN",
        Level::Err => "ERR",
    }
}

/// A monitor for unit tests: `osds` OSDs, each on a host of its own (`h0`, `h1`, ...), and
/// pool `data` of size 3 with `pg_num` PGs.
#[cfg(test)]
pub(crate) fn test_monitor(osds: i32, pg_num: u32) -> cairn_mon::Monitor {
    use cairn_proto::mon::Request;
    let mut mon = cairn_mon::Monitor::new(
        ClusterMap::new("test").unwrap(),
        cairn_mon::MonConfig::default(),
    );
    for i in 0..osds {
        let boot = Request::Boot {
            uuid: format!("u{i}"),
            host: format!("h{i}"),
            addr: format!("127.0.0.1:{}", 7000 + i),
            crush_weight: 0x10000,
            want_id: None,
        };
        mon.handle(0, boot).unwrap();
    }
    let pool = Request::CreatePool {
        name: "data".into(),
        size: 3,
        pg_num,
    };
    mon.handle(0, pool).unwrap();
    mon
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_mon::Monitor;
    use cairn_proto::mon::Request;

    /// Three OSDs on three hosts and a size-3 pool of 8 PGs.
    fn monitor() -> Monitor {
        test_monitor(3, 8)
    }

    fn rows(state: &str, n: u32) -> Vec<PgRow> {
        (0..n)
            .map(|i| PgRow::parse(&format!("1.{i:x} {state} [0,1,2] 5'10 5 10")).unwrap())
            .collect()
    }

    #[test]
    fn a_clean_cluster_is_ok_with_no_checks() {
        let mon = monitor();
        let h = assess(mon.map(), &rows("active+clean", 8), &BTreeMap::new());
        assert_eq!(h.level, Level::Ok);
        assert!(h.checks.is_empty());
        assert_eq!(h.line(), "HEALTH_OK");
        assert_eq!(h.detail(), "HEALTH_OK\n");
    }

    #[test]
    fn each_problem_is_named_with_its_osds_and_pgs_worst_first() {
        let mut mon = monitor();
        mon.handle(1, Request::MarkDown { id: 1 }).unwrap();
        mon.handle(1, Request::MarkOut { id: 1 }).unwrap();
        let mut map = mon.map().clone();
        map.osds.get_mut(&2).unwrap().full = true;
        map.osds.get_mut(&0).unwrap().nearfull = true;
        let usage: BTreeMap<i32, OsdUsage> = [(
            2,
            OsdUsage {
                allocated: 96,
                capacity: 100,
                full_ratio: 0.95,
                ..OsdUsage::default()
            },
        )]
        .into();
        let mut pgs = rows("active+degraded", 6);
        pgs.push(PgRow::parse("1.6 active+clean+inconsistent [0,2] 5'3 5 3").unwrap());
        pgs.push(PgRow::parse("1.7 down [0,2] 5'3 5 3").unwrap());
        let h = assess(&map, &pgs, &usage);
        assert_eq!(h.level, Level::Err);
        let codes: Vec<&str> = h.checks.iter().map(|c| c.code).collect();
        assert_eq!(
            codes,
            [
                "OSD_FULL",
                "PG_DAMAGED",
                "OSD_NEARFULL",
                "OSD_DOWN",
                "OSD_OUT",
                "PG_AVAILABILITY",
                "PG_DEGRADED"
            ]
        );
        let detail = h.detail();
        for want in [
            "HEALTH_ERR 1 OSDs full (writes to their PGs refused); 1 PGs inconsistent",
            "[ERR] OSD_FULL: 1 OSDs full",
            "    osd.2 (host h2) is full (96.0% used)",
            "    osd.0 (host h0) is nearfull\n",
            "    osd.1 (host h1) is down",
            "    osd.1 (host h1) is out",
            "[WRN] PG_DEGRADED: 6 PGs degraded",
            "    pg 1.7 is down, acting [0,2]",
            "    pg 1.6 is active+clean+inconsistent, acting [0,2]",
        ] {
            assert!(detail.contains(want), "`{want}` not in:\n{detail}");
        }
        assert!(!detail.contains("PG_STALE"), "{detail}");
    }

    #[test]
    fn cluster_flags_set_are_a_warning_naming_each_and_what_it_holds_back() {
        let mut mon = monitor();
        let set = Request::SetFlags {
            flags: vec![
                cairn_clustermap::MapFlag::NoOut,
                cairn_clustermap::MapFlag::NoRecover,
            ],
            on: true,
        };
        mon.handle(1, set).unwrap();
        let h = assess(mon.map(), &rows("active+clean", 8), &BTreeMap::new());
        assert_eq!(h.level, Level::Warn);
        assert_eq!(h.line(), "HEALTH_WARN noout,norecover flag(s) set");
        let own = Request::SetOsdFlag {
            ids: vec![1],
            flag: cairn_clustermap::MapFlag::NoOut,
            on: true,
        };
        mon.handle(1, own).unwrap();
        let own = Request::SetOsdFlag {
            ids: vec![1],
            flag: cairn_clustermap::MapFlag::NoUp,
            on: true,
        };
        mon.handle(1, own).unwrap();
        let h = assess(mon.map(), &rows("active+clean", 8), &BTreeMap::new());
        assert!(
            h.detail().contains(
                "[WRN] OSD_FLAGS: 1 OSDs have flags set\n    osd.1 (host h1) has flags noup,noout"
            ),
            "{}",
            h.detail()
        );
        let detail = h.detail();
        for want in [
            "[WRN] OSDMAP_FLAGS: noout,norecover flag(s) set",
            "    noout: down OSDs are not marked out",
            "    norecover: copies within the PG log's reach are not recovered",
        ] {
            assert!(detail.contains(want), "`{want}` not in:\n{detail}");
        }
    }

    #[test]
    fn a_pool_at_its_quota_is_a_warning_naming_it_and_its_limits() {
        let mut mon = monitor();
        let quota = Request::SetPoolQuota {
            name: "data".into(),
            max_objects: Some(3),
            max_bytes: None,
        };
        mon.handle(1, quota).unwrap();
        let h = assess(mon.map(), &rows("active+clean", 8), &BTreeMap::new());
        assert_eq!(h.level, Level::Ok, "a quota not reached: {}", h.detail());
        let mut map = mon.map().clone();
        map.quotas.get_mut(&1).unwrap().full = true;
        let h = assess(&map, &rows("active+clean", 8), &BTreeMap::new());
        assert_eq!(h.level, Level::Warn);
        let detail = h.detail();
        for want in [
            "[WRN] POOL_FULL: 1 pool(s) full (writes other than removals refused)",
            "    pool 'data' is full (running out of quota: max_objects 3, max_bytes N/A)",
        ] {
            assert!(detail.contains(want), "`{want}` not in:\n{detail}");
        }
    }

    #[test]
    fn pgs_with_no_osd_up_are_stale_and_garbage_rows_are_skipped() {
        let mut mon = monitor();
        for id in 0..3 {
            mon.handle(1, Request::MarkDown { id }).unwrap();
        }
        let h = assess(mon.map(), &[], &BTreeMap::new());
        let stale = h.checks.iter().find(|c| c.code == "PG_STALE").unwrap();
        assert_eq!(stale.detail.len(), 8, "{stale:?}");
        assert_eq!(h.level, Level::Warn);
        assert_eq!(PgRow::parse("pg state acting head les log"), None);
        assert_eq!(PgRow::parse("1.0 active+clean"), None);
        assert_eq!(PgRow::parse(""), None);
        let r = PgRow::parse("1.1f active+remapped [3,4](up:[3,5]) 7'2 7 2").unwrap();
        assert_eq!(
            (r.pgid.as_str(), r.acting.as_str()),
            ("1.1f", "[3,4](up:[3,5])")
        );
    }
}
