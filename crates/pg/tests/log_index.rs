//! The PG log's per-object index must answer `newest_for` exactly as a scan of the entries
//! would, through appends, trims and rewinds, and after the log travels between OSDs.

use cairn_pg::{Eversion, LogEntry, OpKind, PgLog};
use proptest::prelude::*;

fn scan<'a>(log: &'a PgLog, object: &str) -> Option<&'a LogEntry> {
    log.entries().rev().find(|e| e.object == object)
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
    fn newest_for_matches_a_scan(max in 1usize..6, steps in proptest::collection::vec(step(), 1..60)) {
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
                    }).unwrap();
                    next += 1;
                }
                Step::Rewind(back) => {
                    let to = log.head().version.saturating_sub(u64::from(back));
                    log.rewind_to(Eversion::new(1, to.max(log.tail().version)));
                }
            }
            for o in 0..6 {
                let name = format!("obj{o}");
                prop_assert_eq!(log.newest_for(&name), scan(&log, &name));
            }
        }
        let sent: PgLog = serde_json::from_str(&serde_json::to_string(&log).unwrap()).unwrap();
        prop_assert_eq!(&sent, &log);
        for o in 0..6 {
            let name = format!("obj{o}");
            prop_assert_eq!(sent.newest_for(&name), scan(&log, &name));
        }
    }
}
