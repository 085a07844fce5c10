//! Reacting to maps: every new map is checked PG by PG; a PG whose acting set changed starts a
//! new interval and, on its primary, peers. The peering's decisions are the pure machine's
//! (`cairn_pg::machine`: whom to ask, the prior set, the authoritative log, who serves, what
//! each copy recovers before or after activation); this module carries out its steps: log
//! queries, the monitor's history and up_thru, temporary acting sets (`remap`), transfers
//! (`transfer`), activation messages and the commit of the activation to the store.
//!
//! Every recovery step that moves data through this OSD's store (installing a pulled object,
//! reading an object to push, listing a PG for backfill) is a request through its scheduler
//! (invariant 2; `transfer`), in the client class here since the PG's I/O waits for this
//! recovery; log queries and activation are control messages and are not.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use cairn_clustermap::ClusterMap;
use cairn_clustermap::PgId;
use cairn_pg::machine::{Activation, Outcome, Peering, Setup, Step};
use cairn_pg::{ActingSet, PeerLog, Recovery};
use cairn_proto::mon::Request;
use cairn_proto::peer::{PeerBody, Urgency};
use cairn_store::Transaction;

use crate::ask::{ask, query_log};
use crate::error::OsdError;
use crate::objects::remove_temps;
use crate::pgmeta::{put_info, replace_log, replace_missing};
use crate::pgs::{Pg, PgStatus};
use crate::shared::Shared;
use crate::transfer::{
    install_local, list_remote, list_scheduled, pull, push, recover_local, Recovering,
};

/// Pause before a failed peering attempt is retried in the same interval.
const RETRY_PAUSE: Duration = Duration::from_millis(500);
/// How long a primary waits for a map with its up_thru before asking the monitor again.
const UP_THRU_WAIT: Duration = Duration::from_secs(2);
/// How long the monitor may take to answer an up_thru request.
const UP_THRU_TIMEOUT_MS: u64 = 5_000;
/// How often a primary looks whether its PG has applied the map that records its up_thru.
const PG_CATCH_UP_POLL: Duration = Duration::from_millis(2);

/// How long a catch-up waits for the monitor's history of the epochs the watcher skipped.
const CATCH_UP_WAIT: Duration = Duration::from_secs(5);

/// Applies the maps of the epochs between `last` (applied) and `map` (about to be) that the
/// watcher skipped — maps that arrived together, or a stretch this OSD spent cut off from the
/// monitor — in order, so that no PG misses an interval that began and ended among them. A
/// PG that did would stay in its old interval while its other copies, asked by the peering of
/// the newer one, refuse everything of the old (invariant 14): wedged until the acting set
/// changes again. Where the monitor's history cannot give those maps in time, every PG of
/// this OSD starts a new interval with `map` instead (`force`); a spare peering is cheap.
pub async fn catch_up(s: &Arc<Shared>, last: u64, map: &ClusterMap) {
    let Some(to) = map.epoch.checked_sub(1).filter(|to| *to > last) else {
        return;
    };
    let from = last + 1;
    let fetched = tokio::time::timeout(CATCH_UP_WAIT, s.past_maps.range(&s.mon, from, to)).await;
    let whole = match fetched {
        Ok(Ok(maps))
            if maps.first().map(|m| m.epoch) == Some(from)
                && maps.len() as u64 == to - from + 1 =>
        {
            Some(maps)
        }
        _ => None,
    };
    match whole {
        Some(maps) => {
            for m in maps {
                apply_map(s, &m, false);
            }
        }
        None => {
            tracing::warn!(
                osd = s.id,
                from,
                to,
                "skipped epochs not to be had: every PG starts a new interval"
            );
            apply_map(s, map, true);
        }
    }
}

/// Applies a new map to every PG this OSD serves or holds; starts peering where needed.
pub fn on_map(s: &Arc<Shared>, map: &ClusterMap) {
    apply_map(s, map, false);
}

/// [`on_map`]; with `force`, every PG of this OSD starts a new interval.
fn apply_map(s: &Arc<Shared>, map: &ClusterMap, force: bool) {
    let mut mapper = map.placement.mapper();
    for pool in map.placement.pools.values() {
        for seed in 0..pool.pg_num {
            let id = PgId {
                pool: pool.id,
                seed,
            };
            let Ok(m) = mapper.map_pg(id) else { continue };
            let known = s.pgs.get(id);
            let member = m.up.contains(&s.id) || m.acting.contains(&s.id);
            if known.is_none() && !member {
                continue;
            }
            let pg = known.unwrap_or_else(|| s.pgs.get_or_create(id, s.cfg.max_log_entries));
            let primary = m.acting_primary() == Some(s.id);
            let (size, min_size) = (pool.size as usize, pool.min_size as usize);
            let incarnations: Vec<u64> = m
                .acting
                .iter()
                .map(|o| map.osds.get(o).and_then(|e| e.up_from).unwrap_or(0))
                .collect();
            let sizes = (size, min_size);
            let mut changed = pg.on_map(map.epoch, &m, &incarnations, sizes, force);
            // A stray copy deleted meanwhile left the table: serve the PG from a fresh entry.
            let pg = if member && !s.pgs.holds(&pg) {
                let fresh = s.pgs.get_or_create(id, s.cfg.max_log_entries);
                changed = fresh.on_map(map.epoch, &m, &incarnations, sizes, force);
                fresh
            } else {
                pg
            };
            if changed {
                if primary {
                    pg.set_status(PgStatus::Peering);
                    let s2 = s.clone();
                    let epoch = map.epoch;
                    s.track(tokio::spawn(
                        async move { peer_until_done(s2, pg, epoch).await },
                    ));
                } else {
                    pg.set_status(PgStatus::Replica);
                }
            } else if primary {
                let iv = pg.interval();
                if retry_left_out(map, &iv) {
                    let why = "a copy left out as too full is no longer flagged full";
                    repeer(s, &pg, iv.epoch, why);
                } else if pg.status() == PgStatus::Down {
                    // A copy of the interval it waits for may be back (or removed).
                    let (s2, pg, epoch) = (s.clone(), pg.clone(), iv.epoch);
                    s.track(tokio::spawn(
                        async move { peer_until_done(s2, pg, epoch).await },
                    ));
                } else {
                    crate::remap::maybe_fill(s, &pg);
                }
            }
        }
    }
}

/// Whether a copy left out of the interval for being too full should be tried again: the map
/// does not (or no longer) flag it full.
fn retry_left_out(map: &ClusterMap, iv: &crate::pgs::Interval) -> bool {
    iv.left_out
        .iter()
        .any(|o| map.osds.get(o).is_some_and(|e| e.up && !e.full))
}

/// Peers `pg` again within its current interval (begun at `epoch`), on its primary, for
/// `reason`: a write reached some of its copies and not others, so they disagree until
/// peering chooses the authoritative log and recovers or rolls back the rest; or a copy left
/// out for being too full may take its recovery now. The PG serves no I/O meanwhile.
pub fn repeer(s: &Arc<Shared>, pg: &Arc<Pg>, epoch: u64, reason: &'static str) {
    let iv = pg.interval();
    if iv.epoch != epoch || iv.acting.first() != Some(&s.id) || pg.active_epoch().is_none() {
        return;
    }
    pg.deactivate(epoch);
    pg.set_status_in(epoch, PgStatus::Peering);
    s.metrics.record_repeer();
    tracing::warn!(osd = s.id, pg = %pg.id, epoch, reason, "peering again");
    let (s2, pg) = (s.clone(), pg.clone());
    s.track(tokio::spawn(
        async move { peer_until_done(s2, pg, epoch).await },
    ));
}

async fn peer_until_done(s: Arc<Shared>, pg: Arc<Pg>, epoch: u64) {
    loop {
        if pg.interval().epoch != epoch {
            return;
        }
        match peer(&s, &pg, epoch).await {
            Ok(()) => return,
            Err(e) => {
                tracing::info!(osd = s.id, pg = %pg.id, epoch, error = %e, "peering failed; retrying");
                tokio::time::sleep(RETRY_PAUSE).await;
            }
        }
    }
}

/// [`query_log`], given up as soon as `pg`'s interval begun at `epoch` ends (and, as every
/// request to another OSD, as soon as a map shows `osd` down or booted again: see
/// [`crate::ask::ask_as`]). Peering holds the PG's lock while it asks; when a newer map has
/// moved the PG on, the new interval's primary may be asking this OSD for that very lock (each
/// side's answer waits for the other's lock until the 3 s busy timeout: client I/O of the PG
/// stalled ~3.5 s when an OSD came back in). A copy of an earlier interval that was stopped
/// while the map still showed it up is not in the acting set, so its going down ends no
/// interval: only `ask_as`'s watch on it spares every PG asking it the 10 s peer timeout (seen
/// when an OSD was stopped and marked out at once).
async fn query_in_interval(s: &Shared, pg: &Pg, epoch: u64, osd: i32) -> Result<PeerLog, OsdError> {
    tokio::select! {
        r = query_log(s, pg, epoch, osd) => r,
        _ = pg.wait_interval_end(epoch) => Err(OsdError::Peer {
            osd,
            reason: format!("pg {}: the interval of epoch {epoch} ended", pg.id),
        }),
    }
}

/// The PG's past intervals after `since` (the newest last epoch started heard of), from the
/// maps of those epochs, and the OSDs whose data was given up: OSDs the current map no longer
/// has (removed) count as lost for every interval, OSDs declared lost (`cairn osd lost`) for
/// the intervals begun before the declaration.
async fn past_intervals(s: &Shared, pg: &Pg, epoch: u64, since: u64) -> Result<Outcome, OsdError> {
    let (created, lost_at) = {
        let map = s.map.borrow();
        let map = map.as_ref();
        let created = map.and_then(|m| m.pool_created.get(&pg.id.pool).copied());
        let lost_at: BTreeMap<i32, Option<u64>> = map
            .map(|m| m.osds.values().map(|o| (o.id, o.lost_at)).collect())
            .unwrap_or_default();
        (created.unwrap_or(0), lost_at)
    };
    let from = (since + 1).max(created);
    let past = s
        .past_maps
        .intervals(&s.mon, pg.id, from, epoch.saturating_sub(1))
        .await?;
    if !past.complete {
        s.metrics.record_history_gap();
        tracing::warn!(osd = s.id, pg = %pg.id, since, oldest = ?past.intervals.first().map(|i| i.first), "the monitor's history no longer reaches back to the pg's last activation: intervals before it are not checked");
    }
    let lost: BTreeMap<i32, u64> = past
        .intervals
        .iter()
        .flat_map(|i| i.acting.iter().copied())
        .filter_map(|o| match lost_at.get(&o) {
            None => Some((o, u64::MAX)),
            Some(at) => at.map(|at| (o, at)),
        })
        .collect();
    Ok(Outcome::PastIntervals {
        intervals: past.intervals,
        lost,
    })
}

/// `pg`'s acting set in the map of `epoch`; empty where there is none or it cannot be had.
async fn acting_in(s: &Shared, pg: &Pg, epoch: u64) -> Vec<i32> {
    match s.past_maps.range(&s.mon, epoch, epoch).await {
        Ok(maps) => maps
            .first()
            .and_then(|m| m.placement.mapper().map_pg(pg.id).ok())
            .map_or_else(Vec::new, |m| m.acting),
        Err(e) => {
            tracing::info!(osd = s.id, pg = %pg.id, epoch, error = %e, "no map of that epoch");
            Vec::new()
        }
    }
}

/// Asks `osd` for its log in the peering of the interval begun at `epoch`. A copy the
/// peering needs (`required`) must answer; another that does not is passed over unless the
/// interval has ended meanwhile.
async fn query(
    s: &Shared,
    pg: &Pg,
    epoch: u64,
    osd: i32,
    required: bool,
) -> Result<Outcome, OsdError> {
    match query_in_interval(s, pg, epoch, osd).await {
        Ok(log) => Ok(Outcome::Log(log)),
        Err(e) if required || pg.interval().epoch != epoch => Err(e),
        Err(e) => {
            tracing::info!(pg = %pg.id, osd, error = %e, "past copy did not answer");
            Ok(Outcome::NoLog)
        }
    }
}

/// How long each stage of a peering took, for its log line.
#[derive(Default)]
struct Stages {
    locked: Duration,
    heard_all: Duration,
    alive: Duration,
    recovered: Duration,
}

/// Peers `pg` in the interval begun at `epoch`: drives the pure peering machine
/// ([`cairn_pg::machine`]), carrying out each of its steps.
async fn peer(s: &Arc<Shared>, pg: &Arc<Pg>, epoch: u64) -> Result<(), OsdError> {
    let started = tokio::time::Instant::now();
    // After a scrub's chunk: what peering recovers must not change objects while a scrub
    // compares them (a scrub ends its chunk as soon as the PG leaves its activation).
    let (mut inner, _) = pg.lock_unfenced(None).await;
    // This copy's log is read now, for this interval: replica writes of earlier ones are
    // refused from here on, even if this peering ends in a temporary acting set and not in
    // this copy's activation (the same fence a query puts on the other copies).
    pg.note_peered_in(epoch);
    let mut stages = Stages {
        locked: started.elapsed(),
        ..Stages::default()
    };
    let iv = pg.interval();
    // Another peering of this interval (retries of a down PG on successive maps) got there
    // first.
    if iv.epoch != epoch || pg.active_epoch() == Some(epoch) {
        return Ok(());
    }
    let mut machine = Peering::new(Setup {
        me: s.id,
        epoch,
        acting: ActingSet {
            osds: iv.acting.clone(),
            size: iv.size,
            min_size: iv.min_size,
        },
        own: PeerLog {
            osd: s.id,
            last_epoch_started: inner.last_epoch_started,
            log: inner.log.clone(),
            missing: pg.missing().own().clone(),
        },
        up: s.up_osds(),
        earlier: pg.past_osds(),
        remap_min_objects: s.cfg.remap_min_objects,
    });
    let mut step = machine.start();
    if !step.is_last() {
        pg.set_status_in(epoch, PgStatus::Peering);
    }
    // Client I/O of the PG waits for all of the recovery done here: its steps run as client
    // work.
    let r = Recovering {
        s,
        pg,
        epoch,
        urgency: Urgency::Blocking,
        fill: 0,
    };
    loop {
        let outcome = match step {
            Step::ActingIn { epoch: at } => Outcome::Acting {
                acting: acting_in(s, pg, at).await,
                up: s.up_osds(),
            },
            Step::QueryLog { osd, required } => query(s, pg, epoch, osd, required).await?,
            Step::PastIntervals { since } => past_intervals(s, pg, epoch, since).await?,
            Step::UpThru => {
                // Later peerings count this interval as possibly written only once the
                // monitor knows this OSD was alive in it (Ceph's up_thru).
                stages.heard_all = started.elapsed();
                Outcome::UpThru(wait_up_thru(s, pg, epoch).await?)
            }
            Step::Conditions => {
                stages.alive = started.elapsed();
                log_plan(s, pg, epoch, &machine);
                let holds = s
                    .map
                    .borrow()
                    .as_ref()
                    .map(crate::remap::holds_of)
                    .unwrap_or_default();
                Outcome::Conditions {
                    holds,
                    too_full: pg.too_full_in(epoch),
                    came_home: came_home(s, pg, &iv, epoch),
                }
            }
            Step::ServeFrom { temp, instead } => {
                Outcome::Served(crate::remap::serve_from(s, pg, epoch, temp, instead).await)
            }
            Step::RecoverOwn {
                recovery,
                authoritative,
                sources,
            } => {
                recover_own(&r, &mut inner.created, &recovery, authoritative, &sources).await?;
                Outcome::Done
            }
            Step::RecoverCopy { osd, recovery } => match recover_copy(&r, osd, &recovery).await {
                Ok(keep) => Outcome::CopyRecovered { keep },
                // A copy too full to take its recovery is left out of the interval (Ceph's
                // recovery_toofull): the PG goes active degraded without it, if min_size
                // copies remain.
                Err(OsdError::TooFull { osd, why }) => {
                    tracing::warn!(osd = s.id, pg = %pg.id, epoch, copy = osd, %why, "copy too full for recovery: left out of the interval");
                    Outcome::CopyTooFull
                }
                Err(e) => return Err(e),
            },
            Step::ActivateCopy {
                osd,
                log,
                keep,
                missing,
            } => {
                let body = PeerBody::Activate { log, keep, missing };
                ask(s, pg, epoch, osd, body, Bytes::new()).await?;
                Outcome::Done
            }
            Step::Commit(activation) => {
                stages.recovered = started.elapsed();
                return commit(s, pg, epoch, &mut inner, *activation, stages, started).await;
            }
            Step::Inactive => {
                pg.set_status_in(epoch, PgStatus::Inactive);
                tracing::warn!(osd = s.id, pg = %pg.id, up = iv.acting.len(), min_size = iv.min_size, "too few copies up: pg inactive");
                return Ok(());
            }
            Step::Down { interval } => {
                if pg.set_status_in(epoch, PgStatus::Down) {
                    tracing::warn!(osd = s.id, pg = %pg.id, epoch, first = interval.first, last = interval.last, acting = ?interval.acting, "pg down: an interval that may have taken writes has no copy up");
                }
                return Ok(());
            }
            Step::Held(hold) => return Err(OsdError::Held(crate::remap::flag_of(hold))),
            Step::Failed(reason) => return Err(OsdError::Peer { osd: s.id, reason }),
            Step::Stop => return Ok(()),
        };
        step = machine.advance(outcome);
    }
}

/// Logs the peering plan at debug level: per copy heard, its history and what it must do.
fn log_plan(s: &Shared, pg: &Pg, epoch: u64, machine: &Peering) {
    let Some(plan) = machine.plan() else { return };
    if !tracing::enabled!(tracing::Level::DEBUG) {
        return;
    }
    let copies: Vec<String> = machine
        .logs()
        .iter()
        .map(|l| {
            let todo = match plan.recovery.get(&l.osd) {
                Some(Recovery::Clean) | None => "clean".to_string(),
                Some(Recovery::Backfill) => "backfill".to_string(),
                Some(Recovery::Log { missing, divergent }) => {
                    let rolled: Vec<String> = divergent
                        .iter()
                        .take(8)
                        .map(|e| format!("{}@{}", e.object, e.version))
                        .collect();
                    format!(
                        "{} missing, {} divergent {rolled:?}",
                        missing.len(),
                        divergent.len()
                    )
                }
            };
            format!(
                "osd.{} les {} log {}..{} {todo}",
                l.osd,
                l.last_epoch_started,
                l.log.tail(),
                l.log.head()
            )
        })
        .collect();
    tracing::debug!(osd = s.id, pg = %pg.id, epoch, auth = plan.authoritative, head = %plan.head, ?copies, "peering plan");
}

/// Persists `activation` as this copy's state and serves: the authoritative log, the
/// interval's start as the last epoch started, the objects still missing; then the
/// background recovery of what any copy lacks.
async fn commit(
    s: &Arc<Shared>,
    pg: &Arc<Pg>,
    epoch: u64,
    inner: &mut crate::pgs::PgInner,
    activation: Activation,
    stages: Stages,
    started: tokio::time::Instant,
) -> Result<(), OsdError> {
    let Activation {
        log: auth_log,
        own_missing,
        peers_missing,
        sources,
        left_out,
        clean,
        history_les,
    } = activation;
    let coll = pg.coll.clone();
    let mut txn = Transaction::new();
    if !inner.created {
        txn.create_collection(&coll);
    } else {
        // Recovery is over: a transfer in pieces interrupted here is garbage.
        remove_temps(&s.store, &coll, &mut txn).await?;
    }
    replace_log(&mut txn, &coll, &inner.log, &auth_log, epoch)?;
    put_info(&mut txn, &coll, auth_log.tail(), epoch)?;
    let old_missing = pg.missing().own().clone();
    replace_missing(&mut txn, &coll, &old_missing, &own_missing)?;
    s.store.queue_transaction_owned(txn).await?;
    inner.created = true;
    inner.history_les = history_les;
    pg.writes.reset(auth_log.head(), auth_log.head());
    inner.log = auth_log;
    inner.last_epoch_started = epoch;
    // Before the PG serves: an op on an object a copy lacks must find it missing.
    let (own_count, peer_count) = (
        own_missing.len(),
        peers_missing.values().map(|w| w.len()).sum::<usize>(),
    );
    pg.missing()
        .activate_primary(epoch, own_missing, peers_missing, sources);
    if pg.finish_peering(epoch, left_out, clean) {
        let ms = crate::convert::millis;
        tracing::debug!(
            osd = s.id,
            pg = %pg.id,
            epoch,
            locked_ms = ms(stages.locked),
            heard_ms = ms(stages.heard_all),
            up_thru_ms = ms(stages.alive),
            recovered_ms = ms(stages.recovered),
            active_ms = ms(started.elapsed()),
            missing_here = own_count,
            missing_elsewhere = peer_count,
            "pg active"
        );
        crate::remap::maybe_fill(s, pg);
        if let Some(recovery) = crate::recovery::background(s, pg, epoch) {
            let (s2, pg2) = (s.clone(), pg.clone());
            s.track(tokio::spawn(async move {
                if recovery.await == crate::recovery::RecoveryEnd::CopyTooFull {
                    repeer(&s2, &pg2, epoch, "a copy is too full for its recovery");
                }
            }));
        }
    }
    Ok(())
}

/// Brings this OSD's copy to the authoritative state before the PG serves: a log recovery
/// pulls each object from a copy holding the version the log names (the authoritative log's
/// holder first, then every other copy heard: a holder of the newest log may itself still
/// lack an object, as Ceph's missing_loc allows for); a backfill removes what the
/// authoritative copy lacks and pulls everything it has.
async fn recover_own(
    r: &Recovering<'_>,
    created: &mut bool,
    recovery: &Recovery,
    authoritative: i32,
    sources: &[i32],
) -> Result<(), OsdError> {
    match recovery {
        Recovery::Log { missing, .. } => {
            for (obj, want) in missing {
                recover_local(r, sources, obj, created, *want).await?;
            }
        }
        Recovery::Backfill => {
            let names = list_remote(r, authoritative).await?;
            let keep: BTreeSet<&String> = names.iter().collect();
            for obj in list_scheduled(r).await? {
                if !keep.contains(&obj) {
                    install_local(r, created, &obj, None).await?;
                }
            }
            for obj in &names {
                pull(r, authoritative, obj, created, None).await?;
            }
        }
        Recovery::Clean => {}
    }
    Ok(())
}

/// Whether `pg`'s interval begun at `epoch` is its up set serving again right after a
/// temporary acting set (the map before `epoch` had one): the copies filled in the background
/// are then behind only by what was written since the fill's last pass, and peering recovers
/// up to `cairn_pg::machine::HOME_MIN_OBJECTS` of them in place.
fn came_home(s: &Shared, pg: &Pg, iv: &crate::pgs::Interval, epoch: u64) -> bool {
    let before = epoch.checked_sub(1).and_then(|e| s.past_maps.get(e));
    before.is_some_and(|b| home_after_temporary_set(iv, &b, pg.id))
}

/// Whether interval `iv` (served by its up set) follows a map `before` in which PG `pg` had a
/// temporary acting set.
fn home_after_temporary_set(iv: &crate::pgs::Interval, before: &ClusterMap, pg: PgId) -> bool {
    iv.acting == iv.up
        && before
            .placement
            .mapper()
            .map_pg(pg)
            .is_ok_and(|m| m.acting != m.up)
}

/// Has the monitor record this OSD's up_thru at `epoch` (the start of `pg`'s interval) and
/// waits until the PG has applied a map that shows it: the map must be one of the interval's,
/// so that a later peering reads it as the interval's last (the OSD's newest map may already
/// have ended the interval while the PG has not applied it). `false` when the PG's interval
/// ended meanwhile (the next interval's peering takes over). The monitor answers at once when
/// it is recorded already.
async fn wait_up_thru(s: &Shared, pg: &Pg, epoch: u64) -> Result<bool, OsdError> {
    let recorded = |m: &ClusterMap| {
        m.osds
            .get(&s.id)
            .and_then(|e| e.up_thru)
            .is_some_and(|u| u >= epoch)
    };
    let mut maps = s.map.clone();
    loop {
        let iv = pg.interval();
        if iv.epoch != epoch {
            return Ok(false);
        }
        if s.past_maps.get(iv.map_epoch).is_some_and(|m| recorded(&m)) {
            return Ok(true);
        }
        if maps.borrow_and_update().as_ref().is_some_and(recorded) {
            // The OSD's newest map records it; the PG applies that map next.
            tokio::time::sleep(PG_CATCH_UP_POLL).await;
            continue;
        }
        let alive = Request::Alive {
            id: s.id,
            want: epoch,
        };
        s.mon.op(alive, UP_THRU_TIMEOUT_MS).await?;
        s.metrics.record_up_thru_request();
        let _ = tokio::time::timeout(UP_THRU_WAIT, maps.changed()).await;
    }
}

/// Brings the acting copy on `osd` up to the authoritative state by `recovery` (a log
/// recovery or a backfill); what it must keep after a backfill. [`OsdError::TooFull`] when it
/// cannot take an object.
async fn recover_copy(
    r: &Recovering<'_>,
    osd: i32,
    recovery: &Recovery,
) -> Result<Option<Vec<String>>, OsdError> {
    Ok(match recovery {
        Recovery::Log { missing, .. } => {
            for obj in missing.keys() {
                push(r, osd, obj).await?;
            }
            None
        }
        Recovery::Backfill => {
            let names = list_scheduled(r).await?;
            for obj in &names {
                push(r, osd, obj).await?;
            }
            Some(names)
        }
        Recovery::Clean => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_mon::{MonConfig, Monitor};
    use cairn_proto::mon::Reply;

    /// A monitor with four OSDs on four hosts and a pool of size 3 with 8 PGs.
    fn monitor() -> Monitor {
        let mut mon = Monitor::new(ClusterMap::new("home").unwrap(), MonConfig::default());
        for i in 0..4 {
            let boot = Request::Boot {
                uuid: format!("u{i}"),
                host: format!("h{i}"),
                addr: format!("127.0.0.1:{}", 7000 + i),
                crush_weight: 0x10000,
                want_id: None,
            };
            assert!(matches!(mon.handle(0, boot), Ok(Reply::Booted { .. })));
        }
        let pool = Request::CreatePool {
            name: "p".into(),
            size: 3,
            pg_num: 8,
        };
        mon.handle(0, pool).unwrap();
        mon
    }

    fn interval_of(map: &ClusterMap, pg: PgId) -> crate::pgs::Interval {
        let m = map.placement.mapper().map_pg(pg).unwrap();
        crate::pgs::Interval {
            epoch: map.epoch,
            acting: m.acting,
            up: m.up,
            size: 3,
            min_size: 2,
            ..Default::default()
        }
    }

    #[test]
    fn only_an_up_set_right_after_a_temporary_set_has_come_home() {
        let mut mon = monitor();
        let pool = mon.map().placement.pool_named("p").unwrap().id;
        let pg = PgId { pool, seed: 0 };
        let plain = mon.map().clone();
        let up = interval_of(&plain, pg).up;
        // A temporary acting set of two of the up set's OSDs.
        let temp = vec![up[1], up[2]];
        let epoch_of_temp = match mon.handle(
            0,
            Request::PgTemp {
                temps: vec![(pg, temp)],
            },
        ) {
            Ok(Reply::Done { epoch }) => epoch,
            other => panic!("{other:?}"),
        };
        let remapped = mon.map().clone();
        assert_eq!(remapped.epoch, epoch_of_temp);
        assert_ne!(
            interval_of(&remapped, pg).acting,
            up,
            "served by the temporary set"
        );
        // Removed again: the up set serves.
        mon.handle(
            0,
            Request::PgTemp {
                temps: vec![(pg, vec![])],
            },
        )
        .unwrap();
        let home = interval_of(mon.map(), pg);
        assert_eq!(home.acting, up);

        assert!(
            home_after_temporary_set(&home, &remapped, pg),
            "home after a temporary set"
        );
        assert!(
            !home_after_temporary_set(&home, &plain, pg),
            "an up set after an up set is an ordinary interval"
        );
        assert!(
            !home_after_temporary_set(&interval_of(&remapped, pg), &plain, pg),
            "a temporary set itself is not home"
        );
        let other = PgId { pool, seed: 1 };
        assert!(
            !home_after_temporary_set(&interval_of(mon.map(), other), &remapped, other),
            "another PG of the pool had no temporary set"
        );
    }
}
