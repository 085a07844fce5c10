//! The PG log as it travels between OSDs and is stored: its serialized form, and a log
//! rebuilt from persisted parts (tail, dups, entries), which must hold its order invariants.

use cairn_pg::{Dup, Eversion, LogEntry, OpKind, PgLog, ReqId};

/// Persisted parts of a log.
#[derive(serde::Serialize, serde::Deserialize)]
struct Parts {
    tail: Eversion,
    dups: Vec<Dup>,
    entries: Vec<LogEntry>,
    max_entries: usize,
}

/// A serialized log (first byte even) or its persisted parts rebuilt into a log.
pub fn log(data: &[u8]) {
    let (which, rest) = crate::selector(data);
    let log = if which % 2 == 0 {
        let Ok(log) = serde_json::from_slice::<PgLog>(rest) else {
            return;
        };
        log
    } else {
        let Ok(p) = serde_json::from_slice::<Parts>(rest) else {
            return;
        };
        let Ok(log) = PgLog::from_parts(p.tail, p.dups, p.entries, p.max_entries.min(1 << 16))
        else {
            return;
        };
        log
    };
    let again: PgLog =
        serde_json::from_str(&serde_json::to_string(&log).expect("a log serializes"))
            .expect("a serialized log reads back");
    assert_eq!(again.head(), log.head());
    assert_eq!(again.tail(), log.tail());
    assert!(log.tail() <= log.head(), "tail past head");
}

/// A log of three entries and one dup, whole and as parts.
pub fn log_seeds() -> Vec<Vec<u8>> {
    let entries: Vec<LogEntry> = (1..=3)
        .map(|v| LogEntry {
            version: Eversion::new(2, v + 5),
            object: format!("obj{v}"),
            op: if v == 2 {
                OpKind::Delete
            } else {
                OpKind::Modify
            },
            prior: Eversion::default(),
            reqid: Some(ReqId { client: 7, seq: v }),
        })
        .collect();
    let parts = Parts {
        tail: Eversion::new(2, 5),
        dups: vec![Dup {
            reqid: ReqId { client: 7, seq: 0 },
            version: Eversion::new(2, 4),
        }],
        entries,
        max_entries: 100,
    };
    let mut seeds = vec![[&[1u8][..], &serde_json::to_vec(&parts).expect("json")[..]].concat()];
    if let Ok(log) = PgLog::from_parts(parts.tail, parts.dups, parts.entries, 100) {
        seeds.push([&[0u8][..], &serde_json::to_vec(&log).expect("json")[..]].concat());
    }
    seeds
}
