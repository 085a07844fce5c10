//! Who serves while copies recover: temporary acting sets, recovery after activation, and the
//! cluster flags that hold recovery back.

use std::collections::BTreeSet;

use cairn_pg::acting::{
    held_by, holding_flag, min_objects_under_holds, missing_of, recovers_after_activation,
    temporary_acting,
};
use cairn_pg::{
    plan, ActingSet, Eversion, Hold, Holds, LogEntry, OpKind, PeerLog, PeeringPlan, PgLog, Recovery,
};

/// A log of `n` writes, one object each.
fn log(n: u64) -> PgLog {
    let mut log = PgLog::new(1000);
    for v in 1..=n {
        log.append(LogEntry {
            version: Eversion::new(1, v),
            object: format!("o{v}"),
            op: OpKind::Modify,
            prior: Eversion::default(),
            reqid: None,
        })
        .unwrap();
    }
    log
}

fn peer(osd: i32, les: u64, log: PgLog) -> PeerLog {
    PeerLog {
        osd,
        last_epoch_started: les,
        log,
        missing: Default::default(),
    }
}

fn acting(osds: Vec<i32>) -> ActingSet {
    ActingSet {
        osds,
        size: 3,
        min_size: 2,
    }
}

fn holds(h: &[Hold]) -> Holds {
    h.iter().copied().collect()
}

#[test]
fn only_a_long_recovery_with_enough_complete_copies_gets_a_temporary_acting_set() {
    let up: BTreeSet<i32> = (0..6).collect();
    let full = log(100);
    // osd.0 (primary) is 100 objects behind, osd.1 and osd.2 complete, osd.3 (a copy of an
    // earlier interval) complete.
    let logs = [
        peer(0, 5, log(0)),
        peer(1, 8, full.clone()),
        peer(2, 8, full.clone()),
        peer(3, 8, full.clone()),
    ];
    let p = plan(&logs, 0).unwrap();
    let a = acting(vec![0, 1, 2]);
    assert_eq!(temporary_acting(&a, &p, &up, 64), Some(vec![1, 2, 3]));
    // A short recovery is done in place.
    assert_eq!(temporary_acting(&a, &p, &up, 101), None);
    // Copies that are down do not serve.
    let few: BTreeSet<i32> = [0, 1].into();
    assert_eq!(
        temporary_acting(&a, &p, &few, 64),
        None,
        "one copy < min_size"
    );
    let some: BTreeSet<i32> = [0, 1, 2].into();
    assert_eq!(temporary_acting(&a, &p, &some, 64), Some(vec![1, 2]));
    // Every acting copy complete: nothing to do.
    assert_eq!(temporary_acting(&acting(vec![1, 2, 3]), &p, &up, 1), None);
}

#[test]
fn each_flag_holds_the_recoveries_it_names_and_norebalance_only_misplaced_pgs() {
    assert_eq!(held_by(&holds(&[]), false, 2, 3), None);
    let h = holds(&[Hold::NoRecover]);
    assert_eq!(held_by(&h, false, 2, 3), Some(Hold::NoRecover));
    assert_eq!(held_by(&h, true, 2, 3), None, "a backfill goes on");
    let h = holds(&[Hold::NoBackfill]);
    assert_eq!(held_by(&h, true, 2, 3), Some(Hold::NoBackfill));
    assert_eq!(held_by(&h, false, 2, 3), None, "a log recovery goes on");
    let h = holds(&[Hold::NoRebalance]);
    assert_eq!(held_by(&h, true, 3, 3), Some(Hold::NoRebalance));
    assert_eq!(held_by(&h, false, 3, 3), Some(Hold::NoRebalance));
    assert_eq!(held_by(&h, true, 2, 3), None, "a degraded PG recovers");
}

#[test]
fn a_flag_holding_the_recovery_keeps_a_pg_from_recovering_in_place() {
    let logs = [
        peer(0, 5, log(0)),
        peer(1, 8, log(100)),
        peer(2, 8, log(100)),
    ];
    let p = plan(&logs, 0).unwrap();
    assert!(matches!(p.recovery.get(&0), Some(Recovery::Log { .. })));
    let a = acting(vec![0, 1, 2]);
    assert_eq!(holding_flag(&holds(&[]), &a, &p, 3), None);
    let h = holds(&[Hold::NoRebalance]);
    assert_eq!(holding_flag(&h, &a, &p, 3), Some(Hold::NoRebalance));
    assert_eq!(holding_flag(&h, &a, &p, 2), None, "a degraded PG recovers");
    let h = holds(&[Hold::NoBackfill]);
    assert_eq!(holding_flag(&h, &a, &p, 2), None, "a log recovery goes on");
    let h = holds(&[Hold::NoRecover]);
    assert_eq!(holding_flag(&h, &a, &p, 2), Some(Hold::NoRecover));
    assert_eq!(
        holding_flag(&h, &acting(vec![1, 2]), &p, 2),
        None,
        "nothing to recover"
    );
    // Under norecover even a one-object recovery goes to the background where complete
    // copies can serve; without the flag the normal threshold stands.
    let up: BTreeSet<i32> = (0..3).collect();
    assert_eq!(min_objects_under_holds(&h, &a, &p, &up, 64), 1);
    assert_eq!(min_objects_under_holds(&holds(&[]), &a, &p, &up, 64), 64);
    let down: BTreeSet<i32> = [0, 1].into();
    assert_eq!(
        min_objects_under_holds(&h, &a, &p, &down, 64),
        64,
        "without min_size complete copies the PG recovers before it serves"
    );
}

#[test]
fn only_short_log_recoveries_of_acting_copies_run_after_activation() {
    let lacking = |n: u64| Recovery::Log {
        missing: (0..n)
            .map(|i| (format!("o{i}"), Some(Eversion::new(2, i + 1))))
            .collect(),
        divergent: Vec::new(),
    };
    let plan_of = |recovery: Vec<(i32, Recovery)>| PeeringPlan {
        authoritative: 0,
        head: Eversion::new(2, 9),
        recovery: recovery.into_iter().collect(),
    };
    let acting = [0, 1, 2];
    let short = plan_of(vec![
        (0, lacking(2)),
        (1, Recovery::Clean),
        (2, lacking(99)),
    ]);
    assert!(recovers_after_activation(&acting, &short, 100));
    assert_eq!(missing_of(&short, 0).len(), 2);
    assert!(missing_of(&short, 1).is_empty());
    let long = plan_of(vec![(0, Recovery::Clean), (2, lacking(100))]);
    assert!(!recovers_after_activation(&acting, &long, 100));
    let backfill = plan_of(vec![(1, Recovery::Backfill)]);
    assert!(!recovers_after_activation(&acting, &backfill, 100));
    assert!(missing_of(&backfill, 1).is_empty(), "a backfill is no list");
    // A copy outside the acting set (an earlier interval's) is not this interval's to
    // recover.
    let outside = plan_of(vec![(0, Recovery::Clean), (7, Recovery::Backfill)]);
    assert!(recovers_after_activation(&acting, &outside, 100));
}
