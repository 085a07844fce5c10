//! Moving a PG without stopping its I/O (Ceph's pg_temp and backfill). When peering finds an
//! acting copy that would need a long recovery (a backfill, or a log recovery of many objects)
//! and enough copies are already complete, the primary asks the monitor for a temporary acting
//! set of the complete copies instead of recovering before activation. The PG then peers and
//! serves from them at once (active+remapped), and their primary fills the up set's other OSDs
//! in the background: pass after pass it pushes the objects a copy lacks, as recovery requests
//! through the scheduler, then gives the copy the log as of the pass's start; each later pass
//! pushes only what clients wrote since the previous one began, until few were. It then holds
//! the PG's writes, pushes those few, asks for the temporary set to be removed and lets the
//! writes go on once the map ends it: the PG peers with its up set again, every copy equal.
//! A copy too full for its recovery is moved out of the acting set the same way, and its fill
//! waits until it takes the objects. The cluster flags `norecover` (a copy within the log's
//! reach), `nobackfill` (a copy beyond it) and `norebalance` (any copy of a PG that is only
//! misplaced) hold a fill back, pass by pass and object by object, until they are unset.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use cairn_clustermap::{ClusterMap, MapFlag};
use cairn_pg::{plan, Hold, Holds, PeerLog, Recovery};
use cairn_proto::peer::{PeerAnswer, PeerBody, Urgency};
use futures_util::stream::{FuturesUnordered, StreamExt};

use crate::ask::{ask, ask_as, query_log};
use crate::error::OsdError;
use crate::pgs::{FillState, Pg};
use crate::shared::Shared;
use crate::transfer::{list_remote, list_scheduled, push, Recovering};

/// A fill pass during which at most this many objects were written (or, after the first,
/// at least three quarters as many as it pushed) is the last one with the PG's writes going
/// on: [`hand_back`] pushes those with the writes held.
const FINAL_PASS_OBJECTS: usize = 16;
/// Most fill passes for one copy; after them [`hand_back`] pushes what the last one saw
/// written, with the writes held (a PG whose writes outrun the pushes must still come home).
const MAX_PASSES: usize = 8;
/// Pushes [`hand_back`] runs at once: client writes wait for them all, so they go as client
/// work and together, where a fill's passes go one `osd_recovery_max_active` slot at a time.
const HAND_BACK_PUSHES_AT_ONCE: usize = 8;
/// How long a primary that asked for a temporary acting set waits for the map that starts it.
const REMAP_WAIT: Duration = Duration::from_secs(5);
/// Pause before a failed fill is tried again in the same interval.
const RETRY_PAUSE: Duration = Duration::from_millis(500);
/// Pause before a fill held back by a cluster flag looks at the flags again.
const HELD_PAUSE: Duration = Duration::from_millis(250);
/// Pause before a fill whose copy refused a reservation asks again (Ceph retries after
/// `osd_backfill_retry_interval`; shorter here, since a refusal costs one message).
const RESERVE_RETRY_PAUSE: Duration = Duration::from_secs(1);
/// Pause before a fill that a copy refused as too full is tried again (Ceph's
/// backfill_toofull: it waits until space is freed there).
const TOOFULL_PAUSE: Duration = Duration::from_secs(5);

/// The holding flags (`norecover`, `nobackfill`, `norebalance`) set in `map`.
pub fn holds_of(map: &ClusterMap) -> Holds {
    [Hold::NoRecover, Hold::NoBackfill, Hold::NoRebalance]
        .into_iter()
        .filter(|h| map.has(flag_of(*h)))
        .collect()
}

/// The map flag that sets `hold`.
pub fn flag_of(hold: Hold) -> MapFlag {
    match hold {
        Hold::NoRecover => MapFlag::NoRecover,
        Hold::NoBackfill => MapFlag::NoBackfill,
        Hold::NoRebalance => MapFlag::NoRebalance,
    }
}

/// Has `pg` (peering in the interval of `epoch`) served by `temp`: true once the map that
/// starts that interval has come. Otherwise logs why not, and that the caller goes on
/// `instead`.
pub async fn serve_from(
    s: &Arc<Shared>,
    pg: &Pg,
    epoch: u64,
    temp: Vec<i32>,
    instead: &'static str,
) -> bool {
    tracing::info!(osd = s.id, pg = %pg.id, epoch, temp = ?temp, "asking for a temporary set");
    let why = match request(s, pg, epoch, temp).await {
        Ok(true) => return true,
        Ok(false) => "no map with it came".to_string(),
        Err(e) => e.to_string(),
    };
    tracing::warn!(osd = s.id, pg = %pg.id, epoch, %why, instead, "no temporary acting set");
    false
}

/// Asks the monitor to serve `pg` from `temp` and waits (boundedly) for the map that starts
/// that interval; false when it did not come.
async fn request(s: &Arc<Shared>, pg: &Pg, epoch: u64, temp: Vec<i32>) -> Result<bool, OsdError> {
    s.pg_temps.want(pg.id, temp, |h| s.track(h)).await?;
    s.metrics.record_remap();
    let deadline = tokio::time::Instant::now() + REMAP_WAIT;
    while pg.interval().epoch == epoch {
        if tokio::time::Instant::now() >= deadline {
            return Ok(false);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(true)
}

/// Starts filling `pg`'s up set in the background if this OSD is the active primary of a
/// temporary acting set and no fill runs for this interval and up set yet.
pub fn maybe_fill(s: &Arc<Shared>, pg: &Arc<Pg>) {
    let iv = pg.interval();
    if iv.acting.first() != Some(&s.id) || pg.active_epoch() != Some(iv.epoch) {
        return;
    }
    let temp = s
        .map
        .borrow()
        .as_ref()
        .is_some_and(|m| m.placement.pg_temp.contains_key(&pg.id));
    if !temp || !pg.claim_fill(iv.epoch, &iv.up) {
        return;
    }
    let (s2, pg2) = (s.clone(), pg.clone());
    s.track(tokio::spawn(async move {
        fill_until_done(s2, pg2, iv.epoch, iv.up).await
    }));
}

/// Whether the fill of `up` begun in the interval of `epoch` still has a PG to fill.
fn still(pg: &Pg, epoch: u64, up: &[i32]) -> bool {
    let iv = pg.interval();
    iv.epoch == epoch && iv.up == up && pg.active_epoch() == Some(epoch)
}

/// The cluster flag of `map` that holds back recovering a copy (`backfill`: one beyond the
/// PG log's reach) of a PG served by `serving` copies of its pool's `size`, if any
/// ([`cairn_pg::acting::held_by`]).
pub fn held_by(map: &ClusterMap, backfill: bool, serving: usize, size: usize) -> Option<MapFlag> {
    cairn_pg::acting::held_by(&holds_of(map), backfill, serving, size).map(flag_of)
}

/// [`held_by`] in this OSD's newest map, for `pg`'s interval now.
fn held_now(s: &Shared, pg: &Pg, backfill: bool) -> Option<MapFlag> {
    let iv = pg.interval();
    let map = s.map.borrow();
    held_by(map.as_ref()?, backfill, iv.copies().count(), iv.size)
}

async fn fill_until_done(s: Arc<Shared>, pg: Arc<Pg>, epoch: u64, up: Vec<i32>) {
    let mut held_before = None;
    while still(&pg, epoch, &up) {
        // A local reservation first (Ceph's local reserver), held for the whole fill.
        let Some(_local) = s.throttle.reserve_local(pg.id) else {
            pg.set_fill_state(FillState::Waiting);
            tokio::time::sleep(HELD_PAUSE).await;
            continue;
        };
        let filled = fill(&s, &pg, epoch, &up).await;
        // What is dirty stays for the next attempt; nothing is forwarded meanwhile.
        pg.fill_writes.pause(epoch);
        match filled {
            Ok(true) => {
                pg.set_fill_state(FillState::Idle);
                return;
            }
            // Stopped before handing back: the PG left its activation.
            Ok(false) => break,
            Err(OsdError::Held(flag)) => {
                if held_before != Some(flag) {
                    tracing::info!(osd = s.id, pg = %pg.id, epoch, %flag, "fill held by a cluster flag");
                    held_before = Some(flag);
                }
                pg.set_fill_state(FillState::Held(flag));
                // A held fill keeps no reservation: another PG's may run meanwhile.
                drop(_local);
                while still(&pg, epoch, &up) && s.flag_set(flag) {
                    tokio::time::sleep(HELD_PAUSE).await;
                }
            }
            Err(OsdError::NotReserved { osd }) => {
                // Let another PG's fill have this OSD's slot meanwhile.
                tracing::debug!(osd = s.id, pg = %pg.id, epoch, copy = osd, "fill waits for a reservation");
                pg.set_fill_state(FillState::Waiting);
                drop(_local);
                tokio::time::sleep(RESERVE_RETRY_PAUSE).await;
            }
            Err(OsdError::TooFull { osd, why }) => {
                tracing::debug!(osd = s.id, pg = %pg.id, epoch, copy = osd, %why, "copy too full to fill");
                pg.set_fill_state(FillState::TooFull);
                tokio::time::sleep(TOOFULL_PAUSE).await;
            }
            Err(e) => {
                tracing::info!(osd = s.id, pg = %pg.id, epoch, error = %e, "filling the up set failed");
                tokio::time::sleep(RETRY_PAUSE).await;
            }
        }
    }
    // The PG left its activation: a new interval (whose primary fills anew), or peering again
    // within this one, whose activation must be able to start the fill again (found by the
    // simulation: a PG repeered within its interval stayed on its temporary acting set).
    pg.set_fill_state(FillState::Idle);
    pg.fill_writes.stop(epoch);
    pg.release_fill(epoch, &up);
    if still(&pg, epoch, &up) {
        maybe_fill(&s, &pg);
    }
}

/// Fills every OSD of `up` outside the acting set, each under a remote reservation, then
/// hands the PG back to its up set: true once handed back, false when the PG left its
/// activation first.
async fn fill(s: &Arc<Shared>, pg: &Arc<Pg>, epoch: u64, up: &[i32]) -> Result<bool, OsdError> {
    let acting = pg.interval().acting;
    let targets: Vec<i32> = up.iter().copied().filter(|o| !acting.contains(o)).collect();
    // From before the first pass lists anything: every write after it is pushed again or
    // forwarded.
    let attempt = pg.fill_writes.start(epoch, &targets);
    for &target in &targets {
        let granted = match ask(s, pg, epoch, target, PeerBody::Reserve, Bytes::new()).await? {
            (PeerAnswer::Reserved { granted }, _) => granted,
            (other, _) => {
                return Err(OsdError::Protocol(format!(
                    "osd.{target} answered a fill reservation with {other:?}"
                )))
            }
        };
        if !granted {
            return Err(OsdError::NotReserved { osd: target });
        }
        let filled = fill_copy(s, pg, epoch, up, target, attempt).await;
        if let Err(e) = ask(s, pg, epoch, target, PeerBody::Release, Bytes::new()).await {
            // It lapses there once the PG's interval ends.
            tracing::debug!(osd = s.id, pg = %pg.id, copy = target, error = %e, "fill reservation not released");
        }
        filled?;
    }
    pg.set_fill_state(FillState::Idle);
    pg.set_fill_progress(None);
    hand_back(s, pg, epoch, up, &targets, attempt).await
}

/// Waits until this copy holds every object its activation left it lacking (pushes read
/// it); false when the fill is over meanwhile.
async fn own_copy_complete(pg: &Pg, epoch: u64, up: &[i32]) -> bool {
    while !pg.missing().own().is_empty() {
        if !still(pg, epoch, up) {
            return false;
        }
        tokio::time::sleep(HELD_PAUSE).await;
    }
    still(pg, epoch, up)
}

/// Brings `target`'s copy level with this OSD's, pass by pass ([`crate::fillwrites`]): a full
/// pass pushes what the copy lacks against this OSD's log as the pass begins (every object on
/// either side for a copy behind the log's tail) and whatever was left dirty, gives the copy
/// that log, and from then on writes to the objects it is current for are forwarded to it;
/// each later pass pushes the objects written meanwhile, each with its writes held, so the
/// copy is current for them too. Passes end once few objects are left (the writes that could
/// not be forwarded; [`hand_back`] pushes them with the PG's writes held). Up to
/// `osd_recovery_max_active` pushes run at once, each followed by the recovery sleep.
async fn fill_copy(
    s: &Arc<Shared>,
    pg: &Arc<Pg>,
    epoch: u64,
    up: &[i32],
    target: i32,
    attempt: u64,
) -> Result<(), OsdError> {
    // The PG serves from its temporary acting set meanwhile: nothing waits on the fill.
    let r = Recovering {
        s,
        pg,
        epoch,
        urgency: Urgency::Background,
        fill: attempt,
    };
    let mut full = true;
    for pass in 0..MAX_PASSES {
        if !own_copy_complete(pg, epoch, up).await {
            return Ok(());
        }
        let (pushed, was_full) = match full {
            true => (full_pass(&r, up, target).await?, true),
            false => match held_pass(&r, up, target).await? {
                Some(pushed) => (pushed, false),
                // Too many written to name: the next pass lists them again.
                None => {
                    full = true;
                    continue;
                }
            },
        };
        if !still(pg, epoch, up) {
            return Ok(());
        }
        if pg.fill_writes.spoiled(attempt, target) {
            return Err(OsdError::Peer {
                osd: target,
                reason: "a write forwarded to it went unanswered: the fill starts over".into(),
            });
        }
        let pending = pg.fill_writes.pending(attempt, target);
        tracing::debug!(osd = s.id, pg = %pg.id, target, pass, full = was_full, pushed, pending, "fill pass done");
        full = pending == usize::MAX;
        if pending == 0 || (!was_full && pending <= FINAL_PASS_OBJECTS) {
            return Ok(());
        }
    }
    Ok(())
}

/// A pass that pushes, without holding writes, what `target` lacks against this OSD's log as
/// it begins, and what was left dirty there; then gives the copy that log and forwards writes
/// to it from then on. How many objects it pushed.
async fn full_pass(r: &Recovering<'_>, up: &[i32], target: i32) -> Result<usize, OsdError> {
    let (s, pg, epoch, attempt) = (r.s, r.pg, r.epoch, r.fill);
    // Under the PG's lock, once no write is in flight: every forward has settled (a write
    // settles its forwards before it ends), so the log given to the copy names no write whose
    // forward may yet fail there, and what failed is in the dirty set taken with it.
    let (written, mine) = {
        let inner = pg.lock().await;
        pg.fill_writes.hold_forwards(attempt, target);
        let written = pg
            .fill_writes
            .take(attempt, target)
            .ok_or_else(|| OsdError::Protocol(format!("fill of {} lost its tracking", pg.id)))?;
        let mine = PeerLog {
            osd: s.id,
            last_epoch_started: inner.last_epoch_started,
            log: inner.log.clone(),
            missing: Default::default(),
        };
        (written, mine)
    };
    let theirs = query_log(s, pg, epoch, target).await?;
    let plan = plan(&[mine.clone(), theirs], s.id).map_err(|e| OsdError::Corrupt(e.to_string()))?;
    // What was dirty was written after the copy's log ends: the log names it too, unless the
    // copy is beyond the log's reach and every object is listed anyway.
    let mut objects: BTreeSet<String> = written.objects;
    let backfill = match plan.recovery.get(&target) {
        Some(Recovery::Log { missing, .. }) => {
            objects.extend(missing.keys().cloned());
            false
        }
        Some(Recovery::Backfill) => {
            objects.extend(list_scheduled(r).await?);
            objects.extend(list_remote(r, target).await?);
            true
        }
        _ => false,
    };
    pg.set_fill_state(match backfill {
        true => FillState::Backfilling,
        false => FillState::Recovering,
    });
    push_all(r, up, target, objects.iter(), backfill, false).await?;
    if !still(pg, epoch, up) {
        return Ok(objects.len());
    }
    let body = PeerBody::Filled {
        log: Box::new(mine.log),
    };
    ask_as(s, pg, epoch, target, body, Bytes::new(), r.asking()).await?;
    pg.fill_writes.forward_from_now(attempt, target);
    Ok(objects.len())
}

/// A pass that pushes the objects written since the previous one that were not forwarded to
/// `target`, each with its writes held (as client work, since they wait on it), so the copy is
/// current for each once it is pushed.
/// How many it pushed; None when too many were written to name.
async fn held_pass(r: &Recovering<'_>, up: &[i32], target: i32) -> Result<Option<usize>, OsdError> {
    let Some(objects) = r.pg.fill_writes.begin_held_pass(r.fill, target) else {
        return Ok(None);
    };
    r.pg.set_fill_state(FillState::Recovering);
    // Client writes to each object wait for its push: as client work on both ends (Ceph
    // recovers an object a client op waits on at the client's priority).
    let blocking = Recovering {
        urgency: Urgency::Blocking,
        ..*r
    };
    push_all(&blocking, up, target, objects.iter(), false, true).await?;
    Ok(Some(objects.len()))
}

/// Pushes `objects` to `target`, up to `osd_recovery_max_active` at once ([`push_throttled`]),
/// with the fill's progress shown.
async fn push_all<'o>(
    r: &Recovering<'_>,
    up: &[i32],
    target: i32,
    objects: impl ExactSizeIterator<Item = &'o String>,
    backfill: bool,
    held: bool,
) -> Result<(), OsdError> {
    r.pg.set_fill_progress(Some((target, objects.len() as u64)));
    let limit = r.s.throttle.max_active().max(1);
    let mut queue = objects;
    let mut running = FuturesUnordered::new();
    loop {
        while running.len() < limit {
            let Some(obj) = queue.next() else { break };
            running.push(push_throttled(r, up, target, obj, backfill, held));
        }
        match running.next().await {
            Some(pushed) => pushed?,
            None => return Ok(()),
        }
    }
}

/// The end of a fill: with the PG's writes held back (its lock taken once none is in
/// flight), pushes to each filled copy what could not be forwarded to it since its last pass
/// began (as client work, several at once: the held writes wait on them), gives it this OSD's
/// log, asks for the temporary acting set to be removed and waits (boundedly) for the map that
/// ends it; true once asked, false when the PG left its activation first. No write is logged
/// here meanwhile that a filled copy lacks, so the up set peers clean however fast the PG is
/// written and however short its log.
async fn hand_back(
    s: &Arc<Shared>,
    pg: &Arc<Pg>,
    epoch: u64,
    up: &[i32],
    targets: &[i32],
    attempt: u64,
) -> Result<bool, OsdError> {
    let r = Recovering {
        s,
        pg,
        epoch,
        urgency: Urgency::Blocking,
        fill: attempt,
    };
    let inner = loop {
        if !own_copy_complete(pg, epoch, up).await {
            return Ok(false);
        }
        let inner = pg.lock().await;
        if pg.missing().own().is_empty() {
            break inner;
        }
    };
    if !still(pg, epoch, up) {
        return Ok(false);
    }
    let held = std::time::Instant::now();
    let mut pushed = 0;
    for &target in targets {
        if pg.fill_writes.spoiled(attempt, target) {
            return Err(OsdError::Peer {
                osd: target,
                reason: "a write forwarded to it went unanswered: the fill starts over".into(),
            });
        }
        let written = pg
            .fill_writes
            .take(attempt, target)
            .ok_or_else(|| OsdError::Protocol(format!("fill of {} lost its tracking", pg.id)))?;
        if written.overflowed {
            return Err(OsdError::Protocol(format!(
                "more than {} objects of {} written since osd.{target}'s last pass",
                crate::fillwrites::MAX_TRACKED,
                pg.id
            )));
        }
        let mut queue = written.objects.iter();
        let mut running = FuturesUnordered::new();
        loop {
            while running.len() < HAND_BACK_PUSHES_AT_ONCE {
                let Some(obj) = queue.next() else { break };
                running.push(push(&r, target, obj));
            }
            match running.next().await {
                Some(pushed) => pushed?,
                None => break,
            }
        }
        pushed += written.objects.len();
        let body = PeerBody::Filled {
            log: Box::new(inner.log.clone()),
        };
        ask_as(s, pg, epoch, target, body, Bytes::new(), r.asking()).await?;
    }
    // Every copy is level: later writes of this interval are the next peering's to reconcile.
    pg.fill_writes.stop(epoch);
    s.metrics.record_fill_hand_back_pushes(pushed as u64);
    let pushed_ms = crate::convert::millis(held.elapsed());
    tracing::info!(osd = s.id, pg = %pg.id, epoch, up = ?up, pushed, pushed_ms, "up set filled: back to it");
    s.pg_temps.want(pg.id, Vec::new(), |h| s.track(h)).await?;
    // An up set the acting set already equals starts no interval: nothing to wait for.
    let ends = pg.interval().acting != up;
    if ends
        && tokio::time::timeout(REMAP_WAIT, pg.wait_interval_end(epoch))
            .await
            .is_err()
    {
        tracing::info!(osd = s.id, pg = %pg.id, epoch, "no map ended the temporary acting set yet; writes go on");
    }
    tracing::debug!(osd = s.id, pg = %pg.id, held_ms = crate::convert::millis(held.elapsed()), "writes held for the hand-back");
    drop(inner);
    Ok(true)
}

/// One push of a fill, unless the fill is over or a flag holds it: in a slot of
/// `osd_recovery_max_active`, then the recovery sleep. `held`: with the object's writes held
/// while it goes, after which the copy is current for it.
async fn push_throttled(
    r: &Recovering<'_>,
    up: &[i32],
    target: i32,
    obj: &str,
    backfill: bool,
    held: bool,
) -> Result<(), OsdError> {
    let (s, pg) = (r.s, r.pg);
    let _slot = s.throttle.active_slot().await;
    if !still(pg, r.epoch, up) {
        return Ok(());
    }
    if let Some(flag) = held_now(s, pg, backfill) {
        return Err(OsdError::Held(flag));
    }
    if held {
        let _hold = pg.hold_for_fill(obj).await;
        push(r, target, obj).await?;
        pg.fill_writes.pushed(r.fill, target, obj);
        s.metrics.record_fill_held_push();
    } else {
        push(r, target, obj).await?;
    }
    pg.fill_pushed_one();
    let mclock = matches!(s.sched.policy(), cairn_qos::PolicyConfig::Mclock(_));
    let pause = s.throttle.sleep(mclock);
    if !pause.is_zero() {
        tokio::time::sleep(pause).await;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_flag_holds_the_fills_it_names_and_norebalance_only_misplaced_pgs() {
        let mut map = ClusterMap::new("held").unwrap();
        assert_eq!(held_by(&map, false, 2, 3), None);
        map.flags.insert(MapFlag::NoRecover);
        assert_eq!(held_by(&map, false, 2, 3), Some(MapFlag::NoRecover));
        assert_eq!(held_by(&map, true, 2, 3), None, "a backfill goes on");
        map.flags = [MapFlag::NoBackfill].into();
        assert_eq!(held_by(&map, true, 2, 3), Some(MapFlag::NoBackfill));
        assert_eq!(held_by(&map, false, 2, 3), None, "a log recovery goes on");
        map.flags = [MapFlag::NoRebalance].into();
        assert_eq!(held_by(&map, true, 3, 3), Some(MapFlag::NoRebalance));
        assert_eq!(held_by(&map, false, 3, 3), Some(MapFlag::NoRebalance));
        assert_eq!(held_by(&map, true, 2, 3), None, "a degraded PG recovers");
        map.flags = [MapFlag::NoOut, MapFlag::NoScrub, MapFlag::PauseWr].into();
        assert_eq!(held_by(&map, true, 3, 3), None, "other flags hold no fill");
        assert!(holds_of(&map).is_empty());
        map.flags = [
            MapFlag::NoRecover,
            MapFlag::NoBackfill,
            MapFlag::NoRebalance,
        ]
        .into();
        let all = holds_of(&map);
        assert_eq!(all.len(), 3);
        assert!(all.iter().all(|h| map.has(flag_of(*h))));
    }
}
