use super::*;
use cairn_pg::{LogEntry, OpKind};

fn v(n: u64) -> Eversion {
    Eversion::new(1, n)
}

fn entry(n: u64, object: &str) -> LogEntry {
    LogEntry {
        version: v(n),
        object: object.to_string(),
        op: OpKind::Modify,
        prior: Eversion::default(),
        reqid: None,
    }
}

/// Logs and submits the write of version `n` on `object`, as a primary does under the lock.
fn submit<'a>(
    w: &'a WritesInFlight,
    log: &mut PgLog,
    created: &mut bool,
    n: u64,
    object: &str,
) -> InFlight<'a> {
    let r = w.reserve(log, created);
    assert_eq!(
        log.head().version + 1,
        n,
        "the test submits in version order"
    );
    let creates = !*created;
    log.append(entry(n, object)).unwrap();
    *created = true;
    w.submitted(r, v(n), object, creates)
}

#[test]
fn complete_to_advances_only_over_writes_that_every_earlier_one_precedes() {
    let w = WritesInFlight::default();
    let (mut log, mut created) = (PgLog::new(100), true);
    let a = submit(&w, &mut log, &mut created, 1, "a");
    let b = submit(&w, &mut log, &mut created, 2, "b");
    let c = submit(&w, &mut log, &mut created, 3, "c");
    assert!(!a.pipelined() && b.pipelined() && c.pipelined());
    assert_eq!(b.finish(LocalOutcome::Committed, true), AfterFinish::Done);
    assert_eq!(w.complete_to(), Eversion::default(), "1 is still running");
    assert_eq!(a.finish(LocalOutcome::Committed, true), AfterFinish::Done);
    assert_eq!(w.complete_to(), v(2));
    // 3 misses a copy: nothing past 2 counts as complete until the PG activates again.
    assert_eq!(c.finish(LocalOutcome::Committed, false), AfterFinish::Done);
    let d = submit(&w, &mut log, &mut created, 4, "d");
    assert_eq!(d.finish(LocalOutcome::Committed, true), AfterFinish::Done);
    assert_eq!(w.complete_to(), v(2));
    assert!(w.is_idle());
    w.reset(v(4), v(4));
    assert_eq!(w.complete_to(), v(4));
    let e = submit(&w, &mut log, &mut created, 5, "e");
    assert_eq!(e.finish(LocalOutcome::Committed, true), AfterFinish::Done);
    assert_eq!(w.complete_to(), v(5));
}

#[test]
fn a_stall_below_running_writes_keeps_complete_to_below_it() {
    let w = WritesInFlight::default();
    let (mut log, mut created) = (PgLog::new(100), true);
    let a = submit(&w, &mut log, &mut created, 1, "a");
    let b = submit(&w, &mut log, &mut created, 2, "b");
    let c = submit(&w, &mut log, &mut created, 3, "c");
    assert_eq!(c.finish(LocalOutcome::Committed, true), AfterFinish::Done);
    assert_eq!(b.finish(LocalOutcome::Committed, false), AfterFinish::Done);
    assert_eq!(a.finish(LocalOutcome::Committed, true), AfterFinish::Done);
    assert_eq!(
        w.complete_to(),
        v(1),
        "2 did not reach every copy; 3 is past it"
    );
}

#[test]
fn the_newest_refused_write_is_taken_out_of_the_log_by_the_next_holder() {
    let w = WritesInFlight::default();
    let (mut log, mut created) = (PgLog::new(100), false);
    let a = submit(&w, &mut log, &mut created, 1, "a");
    assert!(created);
    assert_eq!(a.finish(LocalOutcome::Refused, true), AfterFinish::Done);
    // Not settled yet: only a holder of the lock changes the log.
    assert_eq!(log.head(), v(1));
    w.settle(&mut log, &mut created);
    assert_eq!(log.head(), Eversion::default());
    assert!(log.entry_at(v(1)).is_none());
    assert!(!created, "the refused write created the collection");
    // The version is used again by the next write.
    let b = submit(&w, &mut log, &mut created, 1, "b");
    assert_eq!(b.finish(LocalOutcome::Committed, true), AfterFinish::Done);
    assert_eq!(log.head(), v(1));
    assert_eq!(log.newest_for("b").map(|e| e.version), Some(v(1)));
}

#[test]
fn a_refused_write_under_a_later_one_stops_the_osd() {
    let w = WritesInFlight::default();
    let (mut log, mut created) = (PgLog::new(100), true);
    let a = submit(&w, &mut log, &mut created, 1, "a");
    let b = submit(&w, &mut log, &mut created, 2, "b");
    assert_eq!(
        a.finish(LocalOutcome::Refused, true),
        AfterFinish::StopTheOsd
    );
    assert_eq!(b.finish(LocalOutcome::Committed, true), AfterFinish::Done);
    w.settle(&mut log, &mut created);
    assert_eq!(log.head(), v(2), "nothing is undone under a later write");
}

#[test]
fn a_refused_write_while_a_holder_builds_on_it_stops_the_osd() {
    let w = WritesInFlight::default();
    let (mut log, mut created) = (PgLog::new(100), true);
    let a = submit(&w, &mut log, &mut created, 1, "a");
    let building = w.reserve(&mut log, &mut created);
    assert_eq!(
        a.finish(LocalOutcome::Refused, true),
        AfterFinish::StopTheOsd
    );
    drop(building);
    let c = submit(&w, &mut log, &mut created, 2, "c");
    assert_eq!(c.finish(LocalOutcome::Refused, true), AfterFinish::Done);
}

#[test]
fn a_write_withdrawn_before_it_was_queued_leaves_nothing_behind() {
    let w = WritesInFlight::default();
    let (mut log, mut created) = (PgLog::new(100), true);
    let a = submit(&w, &mut log, &mut created, 1, "a");
    assert_eq!(a.finish(LocalOutcome::Committed, true), AfterFinish::Done);
    let b = submit(&w, &mut log, &mut created, 2, "b");
    b.withdraw(&mut log, &mut created);
    assert_eq!(log.head(), v(1));
    assert!(created);
    assert!(w.is_idle());
    let c = submit(&w, &mut log, &mut created, 2, "c");
    assert_eq!(c.finish(LocalOutcome::Committed, true), AfterFinish::Done);
    assert_eq!(w.complete_to(), v(2), "a withdrawn write stalls nothing");
}

#[test]
fn a_dropped_write_ends_as_unknown_and_stalls_complete_to() {
    let w = WritesInFlight::default();
    let (mut log, mut created) = (PgLog::new(100), true);
    let a = submit(&w, &mut log, &mut created, 1, "a");
    assert!(w.touches("a") && w.is_running(v(1)));
    drop(a);
    assert!(w.is_idle());
    let b = submit(&w, &mut log, &mut created, 2, "b");
    assert_eq!(b.finish(LocalOutcome::Committed, true), AfterFinish::Done);
    assert_eq!(w.complete_to(), Eversion::default());
}

#[tokio::test]
async fn waiters_wake_for_what_they_wait_for_only() {
    let w = std::sync::Arc::new(WritesInFlight::default());
    let (mut log, mut created) = (PgLog::new(100), true);
    let a = submit(&w, &mut log, &mut created, 1, "a");
    let b = submit(&w, &mut log, &mut created, 2, "b");
    let w2 = w.clone();
    let for_a = tokio::spawn(async move { w2.object_idle("a").await });
    let w3 = w.clone();
    let for_all = tokio::spawn(async move { w3.idle().await });
    let w4 = w.clone();
    let through_1 = tokio::spawn(async move { w4.ended_through(v(1)).await });
    assert_eq!(b.finish(LocalOutcome::Committed, true), AfterFinish::Done);
    tokio::task::yield_now().await;
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    assert!(!for_a.is_finished(), "a is still running");
    assert!(!for_all.is_finished());
    assert!(!through_1.is_finished());
    assert_eq!(a.finish(LocalOutcome::Committed, true), AfterFinish::Done);
    tokio::time::timeout(std::time::Duration::from_secs(5), through_1)
        .await
        .unwrap()
        .unwrap();
    tokio::time::timeout(std::time::Duration::from_secs(5), for_a)
        .await
        .unwrap()
        .unwrap();
    tokio::time::timeout(std::time::Duration::from_secs(5), for_all)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(w.complete_to(), v(2));
}

#[tokio::test]
async fn poll_once_queues_a_future_up_to_its_first_wait() {
    let (tx, rx) = tokio::sync::oneshot::channel::<u32>();
    let reached = std::sync::atomic::AtomicBool::new(false);
    let mut f = std::pin::pin!(async {
        reached.store(true, std::sync::atomic::Ordering::SeqCst);
        rx.await.unwrap()
    });
    assert_eq!(poll_once(f.as_mut()).await, None);
    assert!(reached.load(std::sync::atomic::Ordering::SeqCst));
    tx.send(7).unwrap();
    assert_eq!(f.await, 7);
    let mut ready = std::pin::pin!(async { 3 });
    assert_eq!(poll_once(ready.as_mut()).await, Some(3));
}

#[test]
fn a_local_commit_is_refused_only_when_the_store_did_not_fail() {
    assert_eq!(LocalOutcome::of(&Ok(())), LocalOutcome::Committed);
    let full = Err(StoreError::NoSpace {
        needed_blocks: 2,
        free_blocks: 1,
    });
    assert_eq!(LocalOutcome::of(&full), LocalOutcome::Refused);
    let failed = Err(StoreError::Failed("device gone".into()));
    assert_eq!(LocalOutcome::of(&failed), LocalOutcome::Unknown);
}
