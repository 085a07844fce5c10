//! A primary's peering, step by step: the OSD's side is played by the test, which answers
//! each step the machine asks for.

use std::collections::{BTreeMap, BTreeSet};

use cairn_pg::machine::{Outcome, Peering, Setup, Step, HOME_MIN_OBJECTS};
use cairn_pg::{
    ActingSet, Eversion, Hold, Holds, LogEntry, OpKind, PastInterval, PeerLog, PgLog, Recovery,
};

/// A log of writes `first..=last` of epoch 5, one object each (`o<v>`).
fn log(first: u64, last: u64) -> PgLog {
    let mut log = PgLog::new(1000);
    for v in first..=last {
        log.append(LogEntry {
            version: Eversion::new(5, v),
            object: format!("o{v}"),
            op: OpKind::Modify,
            prior: Eversion::default(),
            reqid: None,
        })
        .unwrap();
    }
    log
}

fn copy(osd: i32, les: u64, log: PgLog) -> PeerLog {
    PeerLog {
        osd,
        last_epoch_started: les,
        log,
        missing: Default::default(),
    }
}

/// A peering of epoch 7 by osd.0 over `acting`, its own copy holding writes 1..=`own_head`,
/// with OSDs 0..6 up and copies `earlier` known from earlier intervals.
fn peering(acting: Vec<i32>, own_head: u64, earlier: &[i32]) -> Peering {
    Peering::new(Setup {
        me: 0,
        epoch: 7,
        acting: ActingSet {
            osds: acting,
            size: 3,
            min_size: 2,
        },
        own: copy(0, 5, log(1, own_head)),
        up: (0..6).collect(),
        earlier: earlier.iter().copied().collect(),
        remap_min_objects: 10,
    })
}

fn acting(osds: &[i32]) -> Outcome {
    Outcome::Acting {
        acting: osds.to_vec(),
        up: (0..6).collect(),
    }
}

fn no_intervals() -> Outcome {
    Outcome::PastIntervals {
        intervals: Vec::new(),
        lost: BTreeMap::new(),
    }
}

fn conditions(holds: &[Hold], too_full: bool) -> Outcome {
    Outcome::Conditions {
        holds: holds.iter().copied().collect::<Holds>(),
        too_full,
        came_home: false,
    }
}

/// Plays the common opening: the map before the interval showed `acting` too, the acting
/// copies answer with `logs` (in OSD order), no past interval needs hearing, the last
/// activation's acting set was `acting`, and the up_thru is recorded. Returns the step after
/// the conditions are read with `holds`.
fn open(m: &mut Peering, acting_set: &[i32], logs: Vec<PeerLog>, holds: &[Hold]) -> Step {
    assert_eq!(m.start(), Step::ActingIn { epoch: 6 });
    let mut step = m.advance(acting(acting_set));
    for log in logs {
        assert_eq!(
            step,
            Step::QueryLog {
                osd: log.osd,
                required: true
            }
        );
        step = m.advance(Outcome::Log(log));
    }
    assert_eq!(step, Step::PastIntervals { since: 5 });
    assert_eq!(m.advance(no_intervals()), Step::ActingIn { epoch: 5 });
    assert_eq!(m.advance(acting(acting_set)), Step::UpThru);
    assert_eq!(m.advance(Outcome::UpThru(true)), Step::Conditions);
    assert!(m.plan().is_some(), "planned once every log is in");
    m.advance(conditions(holds, false))
}

/// Plays a peering of acting set [0, 1] up to the prior set: osd.1 answers with writes 1..=4.
fn hear_osd1(m: &mut Peering) -> Step {
    m.start();
    m.advance(acting(&[0, 1]));
    m.advance(Outcome::Log(copy(1, 5, log(1, 4))))
}

fn activation_of(step: Step) -> cairn_pg::machine::Activation {
    match step {
        Step::Commit(a) => *a,
        other => panic!("expected the commit, got {other:?}"),
    }
}

#[test]
fn a_short_recovery_activates_first_and_hands_each_copy_its_missing_objects() {
    let mut m = peering(vec![0, 1, 2], 4, &[]);
    // osd.1 lacks writes 3 and 4; osd.2 is complete.
    let step = open(
        &mut m,
        &[0, 1, 2],
        vec![copy(1, 5, log(1, 2)), copy(2, 5, log(1, 4))],
        &[],
    );
    let Step::ActivateCopy {
        osd: 1,
        log,
        keep: None,
        missing,
    } = step
    else {
        panic!("{step:?}")
    };
    assert_eq!(log.head(), Eversion::new(5, 4), "the authoritative log");
    assert_eq!(
        missing.keys().cloned().collect::<Vec<_>>(),
        vec!["o3".to_string(), "o4".to_string()]
    );
    let step = m.advance(Outcome::Done);
    assert!(
        matches!(&step, Step::ActivateCopy { osd: 2, missing, .. } if missing.is_empty()),
        "{step:?}"
    );
    let a = activation_of(m.advance(Outcome::Done));
    assert!(a.own_missing.is_empty());
    assert_eq!(a.peers_missing[&1].len(), 2);
    assert!(!a.clean, "a copy still lacks objects");
    assert!(a.left_out.is_empty());
    assert_eq!(a.history_les, 5);
    assert_eq!(
        a.sources,
        vec![1, 2],
        "every other copy heard, authoritative first"
    );
}

#[test]
fn every_copy_equal_activates_clean() {
    let mut m = peering(vec![0, 1, 2], 4, &[]);
    let step = open(
        &mut m,
        &[0, 1, 2],
        vec![copy(1, 5, log(1, 4)), copy(2, 5, log(1, 4))],
        &[],
    );
    assert!(matches!(step, Step::ActivateCopy { osd: 1, .. }));
    assert!(matches!(
        m.advance(Outcome::Done),
        Step::ActivateCopy { osd: 2, .. }
    ));
    assert!(activation_of(m.advance(Outcome::Done)).clean);
}

#[test]
fn too_few_copies_leave_the_pg_inactive_at_once() {
    let mut m = peering(vec![0], 4, &[]);
    assert_eq!(m.start(), Step::Inactive);
}

#[test]
fn a_past_copy_is_asked_but_need_not_answer_and_an_acting_copy_must() {
    // osd.4 held the PG before (known), osd.5 just before this interval (the previous map).
    let mut m = peering(vec![0, 1, 2], 4, &[4]);
    assert_eq!(m.start(), Step::ActingIn { epoch: 6 });
    assert_eq!(
        m.advance(acting(&[5, 1, 2])),
        Step::QueryLog {
            osd: 1,
            required: true
        }
    );
    assert_eq!(
        m.advance(Outcome::Log(copy(1, 5, log(1, 4)))),
        Step::QueryLog {
            osd: 2,
            required: true
        }
    );
    assert_eq!(
        m.advance(Outcome::Log(copy(2, 5, log(1, 4)))),
        Step::QueryLog {
            osd: 4,
            required: false
        }
    );
    assert_eq!(
        m.advance(Outcome::NoLog),
        Step::QueryLog {
            osd: 5,
            required: false
        }
    );
    let step = m.advance(Outcome::Log(copy(5, 5, log(1, 4))));
    assert_eq!(step, Step::PastIntervals { since: 5 });
    assert_eq!(m.logs().len(), 4, "own, two acting, one past copy");

    let mut m = peering(vec![0, 1, 2], 4, &[]);
    m.start();
    m.advance(acting(&[0, 1, 2]));
    match m.advance(Outcome::NoLog) {
        Step::Failed(_) => {}
        other => panic!("a required log missing must fail the attempt, got {other:?}"),
    }
}

#[test]
fn the_prior_set_asks_a_later_interval_or_declares_the_pg_down() {
    let rw = |acting: Vec<i32>| PastInterval {
        first: 6,
        last: 6,
        acting,
        min_size: 1,
        primary_up_thru: Some(6),
    };
    let mut m = peering(vec![0, 1], 4, &[]);
    m.start();
    m.advance(acting(&[0, 1]));
    assert_eq!(
        m.advance(Outcome::Log(copy(1, 5, log(1, 4)))),
        Step::PastIntervals { since: 5 }
    );
    // Interval 6 went rw on osd.3 alone, which is up: ask it (required), then look again.
    let step = m.advance(Outcome::PastIntervals {
        intervals: vec![rw(vec![3])],
        lost: BTreeMap::new(),
    });
    assert_eq!(
        step,
        Step::QueryLog {
            osd: 3,
            required: true
        }
    );
    let step = m.advance(Outcome::Log(copy(3, 6, log(1, 5))));
    assert_eq!(
        step,
        Step::PastIntervals { since: 6 },
        "osd.3 activated at 6"
    );
    assert_eq!(m.advance(no_intervals()), Step::ActingIn { epoch: 6 });

    // The same interval on an OSD that is down: the PG is down.
    let mut m = peering(vec![0, 1], 4, &[]);
    hear_osd1(&mut m);
    let step = m.advance(Outcome::PastIntervals {
        intervals: vec![rw(vec![9])],
        lost: BTreeMap::new(),
    });
    assert!(matches!(step, Step::Down { ref interval } if interval.acting == vec![9]));
    assert!(step.is_last());

    // Given up as lost after it began: the interval is given up too.
    let mut m = peering(vec![0, 1], 4, &[]);
    hear_osd1(&mut m);
    let step = m.advance(Outcome::PastIntervals {
        intervals: vec![rw(vec![9])],
        lost: BTreeMap::from([(9, 8)]),
    });
    assert_eq!(step, Step::ActingIn { epoch: 5 });
}

#[test]
fn an_interval_that_ends_before_the_up_thru_stops_the_peering() {
    let mut m = peering(vec![0, 1], 4, &[]);
    hear_osd1(&mut m);
    m.advance(no_intervals());
    assert_eq!(m.advance(acting(&[0, 1])), Step::UpThru);
    assert_eq!(m.advance(Outcome::UpThru(false)), Step::Stop);
}

#[test]
fn a_long_recovery_asks_for_a_temporary_acting_set_and_recovers_in_place_without_it() {
    // osd.0 (primary) lacks 20 objects (more than remap_min_objects 10): complete osd.1 and
    // osd.2 serve while it is filled.
    let mut m = peering(vec![0, 1, 2], 0, &[]);
    let step = open(
        &mut m,
        &[0, 1, 2],
        vec![copy(1, 5, log(1, 20)), copy(2, 5, log(1, 20))],
        &[],
    );
    assert_eq!(
        step,
        Step::ServeFrom {
            temp: vec![1, 2],
            instead: "recovering before activation"
        }
    );
    let mut granted = m.clone();
    assert_eq!(granted.advance(Outcome::Served(true)), Step::Stop);
    // Refused: recover the primary first, then the others, then activate.
    let step = m.advance(Outcome::Served(false));
    let Step::RecoverOwn {
        recovery: Recovery::Log { missing, .. },
        authoritative: 1,
        sources,
    } = step
    else {
        panic!("{step:?}")
    };
    assert_eq!(missing.len(), 20);
    assert_eq!(sources, vec![1, 1, 2]);
    assert!(matches!(
        m.advance(Outcome::Done),
        Step::ActivateCopy { osd: 1, .. }
    ));
    assert!(matches!(
        m.advance(Outcome::Done),
        Step::ActivateCopy { osd: 2, .. }
    ));
    let a = activation_of(m.advance(Outcome::Done));
    assert!(a.clean, "recovered before activation: nothing missing");
}

#[test]
fn a_pg_home_from_a_temporary_set_recovers_a_few_dozen_objects_in_place() {
    let mut m = peering(vec![0, 1, 2], 0, &[]);
    assert_eq!(m.start(), Step::ActingIn { epoch: 6 });
    m.advance(acting(&[0, 1, 2]));
    m.advance(Outcome::Log(copy(1, 5, log(1, 20))));
    m.advance(Outcome::Log(copy(2, 5, log(1, 20))));
    m.advance(no_intervals());
    m.advance(acting(&[0, 1, 2]));
    m.advance(Outcome::UpThru(true));
    const { assert!(20 < HOME_MIN_OBJECTS) };
    let step = m.advance(Outcome::Conditions {
        holds: Holds::new(),
        too_full: false,
        came_home: true,
    });
    assert!(
        matches!(step, Step::ActivateCopy { osd: 1, .. }),
        "recovered after activation: {step:?}"
    );
}

#[test]
fn norecover_holds_a_long_recovery_but_lets_a_short_one_run_after_activation() {
    // The primary lacks 20 objects: under norecover it must not recover them in place.
    let mut m = peering(vec![0, 1, 2], 0, &[]);
    let step = open(
        &mut m,
        &[0, 1, 2],
        vec![copy(1, 5, log(1, 20)), copy(2, 5, log(1, 20))],
        &[Hold::NoRecover],
    );
    assert_eq!(
        step,
        Step::ServeFrom {
            temp: vec![1, 2],
            instead: "peering again: a cluster flag holds the recovery"
        }
    );
    assert_eq!(
        m.advance(Outcome::Served(false)),
        Step::Held(Hold::NoRecover)
    );

    // One object behind: the PG activates and the background recovery (which the flag
    // holds) is handed the missing object.
    let mut m = peering(vec![0, 1, 2], 3, &[]);
    let step = open(
        &mut m,
        &[0, 1, 2],
        vec![copy(1, 5, log(1, 4)), copy(2, 5, log(1, 4))],
        &[Hold::NoRecover],
    );
    assert!(
        matches!(step, Step::ActivateCopy { osd: 1, .. }),
        "{step:?}"
    );
    m.advance(Outcome::Done);
    let a = activation_of(m.advance(Outcome::Done));
    assert_eq!(a.own_missing.len(), 1);
}

#[test]
fn a_copy_too_full_is_left_out_and_the_map_must_say_so() {
    // osd.1 and osd.2 lack 20 objects each; the primary is complete and no temporary set
    // can have min_size complete copies, so they are recovered in place.
    let mut m = peering(vec![0, 1, 2], 20, &[]);
    let step = open(
        &mut m,
        &[0, 1, 2],
        vec![copy(1, 5, log(1, 0)), copy(2, 5, log(1, 0))],
        &[],
    );
    assert!(matches!(step, Step::RecoverCopy { osd: 1, .. }), "{step:?}");
    let step = m.advance(Outcome::CopyTooFull);
    assert!(matches!(step, Step::RecoverCopy { osd: 2, .. }), "{step:?}");
    assert!(matches!(
        m.advance(Outcome::CopyRecovered { keep: None }),
        Step::ActivateCopy { osd: 2, .. }
    ));
    assert_eq!(
        m.advance(Outcome::Done),
        Step::ServeFrom {
            temp: vec![0, 2],
            instead: "serving with the too full copies left out"
        }
    );
    let a = activation_of(m.advance(Outcome::Served(false)));
    assert_eq!(a.left_out, BTreeSet::from([1]));
    assert!(!a.clean, "two copies of three");

    // Both too full: fewer than min_size copies, the attempt fails.
    let mut m = peering(vec![0, 1, 2], 20, &[]);
    open(
        &mut m,
        &[0, 1, 2],
        vec![copy(1, 5, log(1, 0)), copy(2, 5, log(1, 0))],
        &[],
    );
    m.advance(Outcome::CopyTooFull);
    assert!(matches!(m.advance(Outcome::CopyTooFull), Step::Failed(_)));
}

#[test]
fn an_outcome_that_answers_another_step_fails_the_peering() {
    let mut m = peering(vec![0, 1, 2], 4, &[]);
    assert_eq!(m.start(), Step::ActingIn { epoch: 6 });
    let step = m.advance(Outcome::UpThru(true));
    assert!(matches!(step, Step::Failed(_)), "{step:?}");
    assert!(step.is_last());
}
