//! The PG log's indexes must answer `newest_for` and `version_of_request` exactly as a scan of
//! the entries would, through appends, trims and rewinds, and after the log travels between
//! OSDs.

use cairn_pg::{Eversion, LogEntry, OpKind, PgLog, ReqId};
use proptest::prelude::*;

fn scan<'a>(log: &'a PgLog, object: &str) -> Option<&'a LogEntry> {
    log.entries().rev().find(|e| e.object == object)
}

fn scan_request(log: &PgLog, reqid: &ReqId) -> Option<Eversion> {
    log.entries()
        .find(|e| e.reqid.as_ref() == Some(reqid))
        .map(|e| e.version)
}

/// Request ids of the steps: a few clients, some entries without one.
fn request(step: u64) -> Option<ReqId> {
    (!step.is_multiple_of(4)).then_some(ReqId {
        client: step % 3,
        seq: step,
    })
}

fn indexes_match(log: &PgLog, checked: &PgLog, next: u64) -> Result<(), TestCaseError> {
    for o in 0..6 {
        let name = format!("obj{o}");
        prop_assert_eq!(checked.newest_for(&name), scan(log, &name));
    }
    for step in 1..next {
        if let Some(r) = request(step) {
            prop_assert_eq!(checked.version_of_request(&r), scan_request(log, &r));
        }
    }
    Ok(())
}

#[derive(Clone, Debug)]
enum Step {
    Append(u8),
    Rewind(u8),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (0u8..6).prop_map(Step::Append),
        1 => (0u8..8).prop_map(Step::Rewind),
    ]
}

proptest! {
    #[test]
    fn the_indexes_match_a_scan(max in 1usize..6, steps in proptest::collection::vec(step(), 1..60)) {
        let mut log = PgLog::new(max);
        let mut next = 1u64;
        for s in steps {
            match s {
                Step::Append(o) => {
                    log.append(LogEntry {
                        version: Eversion::new(1, next),
                        object: format!("obj{o}"),
                        op: OpKind::Modify,
                        prior: Eversion::default(),
                        reqid: request(next),
                    }).unwrap();
                    next += 1;
                }
                Step::Rewind(back) => {
                    let to = log.head().version.saturating_sub(u64::from(back));
                    log.rewind_to(Eversion::new(1, to.max(log.tail().version)));
                }
            }
            indexes_match(&log, &log, next)?;
        }
        let sent: PgLog = serde_json::from_str(&serde_json::to_string(&log).unwrap()).unwrap();
        prop_assert_eq!(&sent, &log);
        indexes_match(&log, &sent, next)?;
    }
}
