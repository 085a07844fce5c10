//! A log as it travels between OSDs is checked when it is read: one that breaks the log's
//! invariants (as a damaged or hostile peer could send) is refused, never taken in.

use cairn_pg::{Eversion, LogEntry, OpKind, PgLog};

fn entry(v: u64) -> LogEntry {
    LogEntry {
        version: Eversion::new(2, v),
        object: format!("obj{v}"),
        op: OpKind::Modify,
        prior: Eversion::default(),
        reqid: None,
    }
}

#[test]
fn a_valid_log_round_trips_and_broken_ones_are_refused() {
    let mut log = PgLog::new(10);
    for v in 1..=3 {
        log.append(entry(v)).unwrap();
    }
    let json = serde_json::to_value(&log).unwrap();
    let back: PgLog = serde_json::from_value(json.clone()).unwrap();
    assert_eq!(back, log);

    let broken = |field: &str, value: serde_json::Value| {
        let mut j = json.clone();
        j[field] = value;
        serde_json::from_value::<PgLog>(j)
            .expect_err(&format!("a log with {field} changed was taken in"))
            .to_string()
    };
    let tail_past_head = broken("tail", serde_json::json!({"epoch": 3, "version": 0}));
    assert!(tail_past_head.contains("past head"), "{tail_past_head}");
    let head_elsewhere = broken("head", serde_json::json!({"epoch": 2, "version": 9}));
    assert!(
        head_elsewhere.contains("not the last entry"),
        "{head_elsewhere}"
    );
    let unordered = broken(
        "entries",
        serde_json::to_value(vec![entry(2), entry(1), entry(3)]).unwrap(),
    );
    assert!(unordered.contains("does not follow"), "{unordered}");
    let no_room = broken("max_entries", serde_json::json!(0));
    assert!(no_room.contains("max_entries"), "{no_room}");
}
