//! Pool quotas at the monitor: set and removed by the operator, judged from the PG usage that
//! only each PG's primary may report, carried in the map's encoding and incrementals, kept
//! across a monitor restart until every PG has reported again.

use crate::{allow_pool_delete, remove_pool};
use cairn_clustermap::quota::MAX_PG_USAGE_PER_REPORT;
use cairn_clustermap::PgId;
use cairn_clustermap::{ClusterMap, Incremental, PgUsage, PoolQuota};
use cairn_mon::{MonConfig, Monitor};
use cairn_proto::mon::{MonError, Reply, Request};

const PG_NUM: u32 = 8;

/// A monitor with three OSDs on three hosts and pool `data` (size 2, 8 PGs, id 1).
fn monitor() -> Monitor {
    let mut mon = Monitor::new(ClusterMap::new("fsid-q").unwrap(), MonConfig::default());
    for i in 0..3 {
        mon.handle(
            0,
            Request::Boot {
                uuid: format!("uuid-{i}"),
                host: format!("host{i}"),
                addr: format!("127.0.0.1:{}", 7100 + i),
                crush_weight: 0x10000,
                want_id: None,
            },
        )
        .unwrap();
    }
    mon.handle(
        0,
        Request::CreatePool {
            name: "data".into(),
            size: 2,
            pg_num: PG_NUM,
        },
    )
    .unwrap();
    mon
}

fn epoch(reply: Result<Reply, MonError>) -> u64 {
    match reply.unwrap() {
        Reply::Done { epoch } => epoch,
        other => panic!("{other:?}"),
    }
}

fn set_quota(mon: &mut Monitor, objects: Option<u64>, bytes: Option<u64>) -> u64 {
    epoch(mon.handle(
        1,
        Request::SetPoolQuota {
            name: "data".into(),
            max_objects: objects,
            max_bytes: bytes,
        },
    ))
}

/// Each PG's acting primary in the monitor's map.
fn primaries(mon: &Monitor) -> Vec<(PgId, i32)> {
    let mut mapper = mon.map().placement.mapper();
    (0..PG_NUM)
        .map(|seed| {
            let pg = PgId { pool: 1, seed };
            (pg, mapper.map_pg(pg).unwrap().acting_primary().unwrap())
        })
        .collect()
}

/// Every OSD reports the PGs it leads among `seeds`, each with `objects` objects of 100
/// bytes; returns the epoch after the last report.
fn report(mon: &mut Monitor, seeds: std::ops::Range<u32>, objects: u64) -> u64 {
    let mut last = mon.map().epoch;
    for osd in 0..3 {
        let usage: Vec<PgUsage> = primaries(mon)
            .into_iter()
            .filter(|(pg, p)| *p == osd && seeds.contains(&pg.seed))
            .map(|(pg, _)| PgUsage {
                pg,
                objects,
                bytes: objects * 100,
            })
            .collect();
        last = epoch(mon.handle(2, Request::PgUsage { id: osd, usage }));
    }
    last
}

fn quota(mon: &Monitor) -> Option<PoolQuota> {
    mon.map().quotas.get(&1).cloned()
}

#[test]
fn a_pool_is_full_once_its_primaries_report_it_at_its_quota_and_until_they_report_it_under() {
    let mut mon = monitor();
    let start = mon.map().epoch;
    let history_from = start;

    // Bad requests change nothing.
    assert!(matches!(
        mon.handle(
            1,
            Request::SetPoolQuota {
                name: "data".into(),
                max_objects: None,
                max_bytes: None
            }
        ),
        Err(MonError::Invalid(_))
    ));
    assert!(matches!(
        mon.handle(
            1,
            Request::SetPoolQuota {
                name: "nope".into(),
                max_objects: Some(5),
                max_bytes: None
            }
        ),
        Err(MonError::NotFound(_))
    ));
    assert_eq!(mon.map().epoch, start);

    let e = set_quota(&mut mon, Some(100), None);
    assert_eq!(e, start + 1);
    assert_eq!(
        quota(&mon),
        Some(PoolQuota {
            max_objects: Some(100),
            max_bytes: None,
            full: false
        })
    );
    assert_eq!(
        set_quota(&mut mon, Some(100), None),
        e,
        "the same quota again"
    );

    // 8 PGs of 10 objects: under the quota, no epoch.
    assert_eq!(report(&mut mon, 0..PG_NUM, 10), e);
    assert_eq!(mon.pool_usage(1).objects, 80);
    assert_eq!(mon.pool_usage(1).pgs_reported, PG_NUM);

    // A PG's non-primary cannot report it.
    let (pg, primary) = primaries(&mon)[0];
    let other = (0..3).find(|o| *o != primary).unwrap();
    let stray = PgUsage {
        pg,
        objects: 1_000_000,
        bytes: 0,
    };
    assert_eq!(
        epoch(mon.handle(
            2,
            Request::PgUsage {
                id: other,
                usage: vec![stray]
            }
        )),
        e
    );
    assert_eq!(mon.pool_usage(1).objects, 80);
    // Nor can anyone report a PG the pool does not have.
    let beyond = PgUsage {
        pg: PgId {
            pool: 1,
            seed: PG_NUM,
        },
        objects: 1_000_000,
        bytes: 0,
    };
    epoch(mon.handle(
        2,
        Request::PgUsage {
            id: primary,
            usage: vec![beyond],
        },
    ));
    assert_eq!(mon.pool_usage(1).objects, 80);

    // 8 x 13 = 104 objects: full, in one epoch.
    let full_at = report(&mut mon, 0..PG_NUM, 13);
    assert_eq!(full_at, e + 1);
    assert!(mon.map().pool_full(1));
    assert_eq!(report(&mut mon, 0..PG_NUM, 14), full_at, "still full");

    // The mark travels in the encoding and the incrementals.
    let decoded = ClusterMap::decode(&mon.map().encode()).unwrap();
    assert_eq!(decoded.quotas, mon.map().quotas);
    let (base, incs) = mon.history().range_from(history_from).unwrap();
    let mut replica = base.clone();
    for inc in incs {
        replica
            .apply(&Incremental::decode(&inc.encode()).unwrap())
            .unwrap();
    }
    assert_eq!(replica.epoch, mon.map().epoch);
    assert!(replica.pool_full(1));

    // A restarted monitor knows no usage: half the PGs reporting nothing cannot clear it...
    let mut mon = Monitor::new(decoded, MonConfig::default());
    assert_eq!(report(&mut mon, 0..PG_NUM / 2, 0), full_at);
    assert!(mon.map().pool_full(1));
    // ... every PG reporting under the quota does.
    let cleared = report(&mut mon, PG_NUM / 2..PG_NUM, 0);
    assert_eq!(cleared, full_at + 1);
    assert!(!mon.map().pool_full(1));

    // A byte quota, judged at once against what is known: 8 x 5 x 100 = 4000 bytes.
    report(&mut mon, 0..PG_NUM, 5);
    let e = set_quota(&mut mon, None, Some(4000));
    assert_eq!(
        quota(&mon),
        Some(PoolQuota {
            max_objects: Some(100),
            max_bytes: Some(4000),
            full: true
        })
    );
    // Raising it past the usage clears the mark in the same epoch.
    assert_eq!(set_quota(&mut mon, None, Some(4001)), e + 1);
    assert!(!mon.map().pool_full(1));
    // Zero removes a limit; with none left the entry is gone.
    set_quota(&mut mon, Some(0), Some(0));
    assert_eq!(quota(&mon), None);
    assert!(mon.map().quotas.is_empty());
}

#[test]
fn usage_reports_are_bounded_and_a_down_reporter_or_a_removed_pool_counts_for_nothing() {
    let mut mon = monitor();
    set_quota(&mut mon, Some(10), None);
    let too_many = vec![
        PgUsage {
            pg: PgId { pool: 1, seed: 0 },
            objects: 0,
            bytes: 0
        };
        MAX_PG_USAGE_PER_REPORT + 1
    ];
    assert!(matches!(
        mon.handle(
            2,
            Request::PgUsage {
                id: 0,
                usage: too_many
            }
        ),
        Err(MonError::Invalid(_))
    ));
    assert!(matches!(
        mon.handle(
            2,
            Request::PgUsage {
                id: 42,
                usage: Vec::new()
            }
        ),
        Err(MonError::NotFound(_))
    ));
    let (pg, primary) = primaries(&mon)[0];
    mon.handle(3, Request::MarkDown { id: primary }).unwrap();
    let e = mon.map().epoch;
    let big = PgUsage {
        pg,
        objects: 50,
        bytes: 0,
    };
    assert_eq!(
        epoch(mon.handle(
            4,
            Request::PgUsage {
                id: primary,
                usage: vec![big]
            }
        )),
        e
    );
    assert_eq!(mon.pool_usage(1).objects, 0);
    assert!(!mon.map().pool_full(1));

    mon.handle(5, allow_pool_delete()).unwrap();
    mon.handle(5, remove_pool("data")).unwrap();
    assert!(mon.map().quotas.is_empty());
    assert_eq!(mon.pool_usage(1).pgs_reported, 0);
}
