//! The PG log's indexes must answer `newest_for` and `version_of_request` exactly as a scan of
//! the entries (and, for requests, of the dups kept for trimmed entries) would, through appends,
//! trims and rewinds, and after the log travels between OSDs or is rebuilt from its parts; the
//! dups are the requests of the newest trimmed entries, as many as the log keeps entries.

use std::collections::VecDeque;

use cairn_pg::{Dup, Eversion, LogEntry, OpKind, PgLog, ReqId};
use proptest::prelude::*;

fn scan<'a>(log: &'a PgLog, object: &str) -> Option<&'a LogEntry> {
    log.entries().rev().find(|e| e.object == object)
}

fn scan_request(log: &PgLog, reqid: &ReqId) -> Option<Eversion> {
    log.entries()
        .find(|e| e.reqid.as_ref() == Some(reqid))
        .map(|e| e.version)
        .or_else(|| log.dups().find(|d| d.reqid == *reqid).map(|d| d.version))
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
        let mut trimmed_requests: VecDeque<Dup> = VecDeque::new();
        for s in steps {
            match s {
                Step::Append(o) => {
                    if let Some(t) = log.next_trimmed() {
                        if let Some(reqid) = t.reqid {
                            let dropped = log.next_dropped_dup().copied();
                            trimmed_requests.push_back(Dup { reqid, version: t.version });
                            if trimmed_requests.len() > max {
                                prop_assert_eq!(trimmed_requests.pop_front(), dropped);
                            } else {
                                prop_assert_eq!(dropped, None);
                            }
                        }
                    }
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
            prop_assert!(log.dups().eq(trimmed_requests.iter()));
        }
        let sent: PgLog = serde_json::from_str(&serde_json::to_string(&log).unwrap()).unwrap();
        prop_assert_eq!(&sent, &log);
        indexes_match(&log, &sent, next)?;
        let rebuilt = PgLog::from_parts(
            log.tail(),
            log.dups().copied().collect(),
            log.entries().cloned().collect(),
            max,
        ).unwrap();
        prop_assert_eq!(&rebuilt, &log);
        indexes_match(&log, &rebuilt, next)?;
    }
}
