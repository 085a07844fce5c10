//! Peering against a reference model: whatever the histories (prefixes, trimmed logs,
//! divergent writes from an old interval), applying the plan makes every copy's objects equal
//! the authoritative copy's.

use std::collections::BTreeMap;

use cairn_pg::{plan, Eversion, LogEntry, OpKind, PeerLog, PgLog, Recovery};
use proptest::prelude::*;

type Objects = BTreeMap<String, Eversion>;

/// Object states after a sequence of entries (the model).
fn fold(entries: &[LogEntry]) -> Objects {
    let mut objs = Objects::new();
    for e in entries {
        match e.op {
            OpKind::Modify => {
                objs.insert(e.object.clone(), e.version);
            }
            OpKind::Delete => {
                objs.remove(&e.object);
            }
        }
    }
    objs
}

/// Builds entries for (epoch, object index, delete?) triples, with correct prior versions.
fn history(ops: &[(u64, u8, bool)], start: &Objects, first_version: u64) -> Vec<LogEntry> {
    let mut state = start.clone();
    let mut out = Vec::new();
    for (i, &(epoch, obj, delete)) in ops.iter().enumerate() {
        let object = format!("obj{}", obj % 6);
        let version = Eversion::new(epoch, first_version + i as u64);
        let prior = state.get(&object).copied().unwrap_or_default();
        let op = if delete && state.contains_key(&object) {
            OpKind::Delete
        } else {
            OpKind::Modify
        };
        match op {
            OpKind::Modify => state.insert(object.clone(), version),
            OpKind::Delete => state.remove(&object),
        };
        out.push(LogEntry {
            version,
            object,
            op,
            prior,
            reqid: None,
        });
    }
    out
}

fn log_of(entries: &[LogEntry], max: usize) -> PgLog {
    let mut log = PgLog::new(max);
    for e in entries {
        log.append(e.clone()).unwrap();
    }
    log
}

fn e(epoch: u64, v: u64, obj: &str, op: OpKind, prior: Eversion) -> LogEntry {
    LogEntry {
        version: Eversion::new(epoch, v),
        object: obj.into(),
        op,
        prior,
        reqid: None,
    }
}

#[test]
fn log_orders_trims_and_rewinds() {
    let mut log = PgLog::new(3);
    for v in 1..=5 {
        log.append(e(1, v, "a", OpKind::Modify, Eversion::default()))
            .unwrap();
    }
    assert_eq!(log.entries().count(), 3);
    assert_eq!(log.tail(), Eversion::new(1, 2));
    assert!(log
        .append(e(1, 5, "a", OpKind::Modify, Eversion::default()))
        .is_err());
    let dropped = log.rewind_to(Eversion::new(1, 3));
    assert_eq!(dropped.len(), 2);
    assert_eq!(log.head(), Eversion::new(1, 3));
}

#[test]
fn divergent_writes_are_rolled_back_and_behind_the_tail_means_backfill() {
    let a1 = e(1, 1, "a", OpKind::Modify, Eversion::default());
    let b2 = e(1, 2, "b", OpKind::Modify, Eversion::default());
    // The old primary wrote c at 1'3 and died; the new interval wrote b at 2'3.
    let c3_old = e(1, 3, "c", OpKind::Modify, Eversion::default());
    let b3_new = e(2, 3, "b", OpKind::Modify, Eversion::new(1, 2));
    let auth = PeerLog {
        osd: 1,
        last_epoch_started: 2,
        log: log_of(&[a1.clone(), b2.clone(), b3_new.clone()], 100),
        missing: Default::default(),
    };
    let old = PeerLog {
        osd: 0,
        last_epoch_started: 1,
        log: log_of(&[a1.clone(), b2.clone(), c3_old.clone()], 100),
        missing: Default::default(),
    };
    let p = plan(&[old, auth], 0).unwrap();
    assert_eq!(
        p.authoritative, 1,
        "the newer interval wins over the primary's longer-looking log"
    );
    match &p.recovery[&0] {
        Recovery::Log { missing, divergent } => {
            assert_eq!(divergent, &vec![c3_old]);
            assert_eq!(missing.get("b"), Some(&Some(Eversion::new(2, 3))));
            assert_eq!(
                missing.get("c"),
                Some(&None),
                "an object only the divergent write created is removed"
            );
        }
        other => panic!("{other:?}"),
    }
    let mut long = Vec::new();
    for v in 1..=50 {
        long.push(e(
            3,
            v,
            "x",
            OpKind::Modify,
            if v > 1 {
                Eversion::new(3, v - 1)
            } else {
                Eversion::default()
            },
        ));
    }
    let auth = PeerLog {
        osd: 2,
        last_epoch_started: 3,
        log: log_of(&long, 10),
        missing: Default::default(),
    };
    let stale = PeerLog {
        osd: 3,
        last_epoch_started: 3,
        log: log_of(&long[..5], 10),
        missing: Default::default(),
    };
    let p = plan(&[auth, stale], 2).unwrap();
    assert_eq!(p.recovery[&3], Recovery::Backfill);
}

#[test]
fn a_copy_created_empty_is_backfilled_even_where_the_log_reaches_the_first_write() {
    let a1 = e(5, 1, "a", OpKind::Modify, Eversion::default());
    let b2 = e(5, 2, "b", OpKind::Modify, Eversion::default());
    let auth = PeerLog {
        osd: 1,
        last_epoch_started: 5,
        log: log_of(&[a1.clone(), b2], 100),
        missing: Default::default(),
    };
    let empty = |osd| PeerLog {
        osd,
        last_epoch_started: 0,
        log: PgLog::new(100),
        missing: Default::default(),
    };
    let behind = PeerLog {
        osd: 3,
        last_epoch_started: 5,
        log: log_of(&[a1], 100),
        missing: Default::default(),
    };
    let p = plan(&[empty(0), auth.clone(), behind], 0).unwrap();
    assert_eq!(p.authoritative, 1);
    assert_eq!(
        p.recovery[&0],
        Recovery::Backfill,
        "the empty primary copies the whole PG rather than each object on first touch"
    );
    assert!(
        matches!(&p.recovery[&3], Recovery::Log { missing, .. } if missing.len() == 1),
        "a copy with history still recovers by the log: {:?}",
        p.recovery[&3]
    );
    let served_empty = PeerLog {
        last_epoch_started: 4,
        ..empty(0)
    };
    let p = plan(&[served_empty, auth.clone()], 0).unwrap();
    assert!(
        matches!(&p.recovery[&0], Recovery::Log { missing, .. } if missing.len() == 2),
        "a copy that served empty recovers by the log: {:?}",
        p.recovery[&0]
    );
    let fresh = PeerLog {
        log: PgLog::new(100),
        ..auth
    };
    let p = plan(&[empty(0), fresh], 0).unwrap();
    assert_eq!(
        p.recovery[&0],
        Recovery::Clean,
        "a new PG's empty copies agree"
    );
}

proptest! {
    #[test]
    fn recovery_makes_every_copy_equal_the_authoritative_one(
        common in prop::collection::vec((1u64..2, any::<u8>(), any::<bool>()), 0..30),
        auth_tail_ops in prop::collection::vec((3u64..4, any::<u8>(), any::<bool>()), 0..20),
        copies in prop::collection::vec((0usize..50, prop::collection::vec((2u64..3, any::<u8>(), any::<bool>()), 0..5)), 1..4),
        max_entries in 5usize..40,
    ) {
        let base = history(&common, &Objects::new(), 1);
        let after_base = fold(&base);
        let auth_new = history(&auth_tail_ops, &after_base, base.len() as u64 + 1);
        let auth_entries: Vec<LogEntry> = base.iter().chain(&auth_new).cloned().collect();
        let auth_objects = fold(&auth_entries);
        let mut peers = vec![PeerLog { osd: 0, last_epoch_started: 3, log: log_of(&auth_entries, max_entries), missing: Default::default()  }];
        let mut models = BTreeMap::new();
        for (i, (prefix, divergent_ops)) in copies.iter().enumerate() {
            let cut = (*prefix).min(base.len());
            let start = fold(&base[..cut]);
            let divergent = history(divergent_ops, &start, cut as u64 + 1);
            let entries: Vec<LogEntry> = base[..cut].iter().chain(&divergent).cloned().collect();
            let osd = i as i32 + 1;
            models.insert(osd, fold(&entries));
            peers.push(PeerLog { osd, last_epoch_started: 2, log: log_of(&entries, max_entries), missing: Default::default()  });
        }
        let p = plan(&peers, 0).unwrap();
        prop_assert_eq!(p.authoritative, 0);
        for (osd, mut objects) in models {
            match &p.recovery[&osd] {
                Recovery::Clean => {}
                Recovery::Backfill => objects = auth_objects.clone(),
                Recovery::Log { missing, .. } => {
                    for (object, version) in missing {
                        match version {
                            Some(v) => { objects.insert(object.clone(), *v); }
                            None => { objects.remove(object); }
                        }
                    }
                }
            }
            prop_assert_eq!(&objects, &auth_objects, "osd {} after {:?}", osd, p.recovery[&osd]);
        }
    }
}

#[test]
fn a_copy_activated_with_missing_objects_is_not_clean_however_new_its_log() {
    let a1 = e(5, 1, "a", OpKind::Modify, Eversion::default());
    let b2 = e(5, 2, "b", OpKind::Modify, Eversion::default());
    let c3 = e(5, 3, "c", OpKind::Modify, Eversion::default());
    let a4 = e(6, 4, "a", OpKind::Modify, Eversion::new(5, 1));
    let c5 = e(6, 5, "c", OpKind::Delete, Eversion::new(5, 3));
    let entries = [a1, b2, c3, a4, c5];
    let copy = |osd, missing: &[(&str, Option<Eversion>)]| PeerLog {
        osd,
        last_epoch_started: 6,
        log: log_of(&entries, 100),
        missing: missing.iter().map(|(o, v)| (o.to_string(), *v)).collect(),
    };
    // osd.1 was activated lacking a (at 5'1 then) and c; osd.0, the primary, lacks "gone",
    // an object the log no longer names.
    let peers = [
        copy(0, &[("gone", Some(Eversion::new(4, 9)))]),
        copy(
            1,
            &[
                ("a", Some(Eversion::new(5, 1))),
                ("c", Some(Eversion::new(5, 3))),
            ],
        ),
        copy(2, &[]),
    ];
    let p = plan(&peers, 0).unwrap();
    assert_eq!(
        p.authoritative, 0,
        "missing objects do not change whose log wins"
    );
    assert_eq!(p.recovery[&2], Recovery::Clean);
    assert_eq!(p.clean_osds(), vec![2]);
    match &p.recovery[&1] {
        Recovery::Log { missing, divergent } => {
            assert!(divergent.is_empty());
            assert_eq!(
                missing.get("a"),
                Some(&Some(Eversion::new(6, 4))),
                "the version the log names now, not the one missed"
            );
            assert_eq!(missing.get("c"), Some(&None), "deleted since: removed");
            assert_eq!(missing.len(), 2);
        }
        other => panic!("{other:?}"),
    }
    match &p.recovery[&0] {
        Recovery::Log { missing, .. } => {
            assert_eq!(
                missing.get("gone"),
                Some(&Some(Eversion::new(4, 9))),
                "the authoritative copy's own missing object, at its own record"
            );
        }
        other => panic!("{other:?}"),
    }
}
