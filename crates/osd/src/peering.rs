//! Reacting to maps: every new map is checked PG by PG; a PG whose acting set changed starts a
//! new interval and, on its primary, peers: gather the logs of the acting set (and of earlier
//! intervals' OSDs still up), choose the authoritative log (`cairn_pg::plan`), bring the primary
//! up to date first (pull, or a whole-PG copy when it is beyond the log), then each replica
//! (push, or backfill), activate them with the authoritative log, and only then serve I/O. A PG
//! with fewer than min_size copies up stays inactive until the map changes. A long recovery is
//! not done here: the PG asks for a temporary acting set of its complete copies instead and is
//! filled in the background (`remap`).
//!
//! Every recovery step that moves data through this OSD's store (installing a pulled object,
//! reading an object to push, listing a PG for backfill) is a request through its scheduler
//! (invariant 2; `transfer`), in the client class here since the PG's I/O waits for this
//! recovery; log queries and activation are control messages and are not.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use cairn_clustermap::PgId;
use cairn_clustermap::{ClusterMap, MapFlag};
use cairn_pg::{plan, prior_set, PeerLog, PgLog, Prior, Recovery};
use cairn_proto::mon::Request;
use cairn_proto::peer::{PeerBody, Urgency};
use cairn_store::Transaction;

use crate::ask::{ask, query_log};
use crate::error::OsdError;
use crate::missing::Wanted;
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

/// The prior set of `pg`'s peering in the interval begun at `epoch`, from the logs heard so
/// far: the PG's intervals after the newest last epoch started among them, from the maps of
/// those epochs. OSDs the current map no longer has (removed) count as lost for every interval,
/// OSDs declared lost (`cairn osd lost`) for the intervals begun before the declaration.
async fn prior(
    s: &Shared,
    pg: &Pg,
    epoch: u64,
    logs: &[PeerLog],
    heard: &BTreeSet<i32>,
    up: &BTreeSet<i32>,
) -> Result<Prior, OsdError> {
    let since = logs.iter().map(|l| l.last_epoch_started).max().unwrap_or(0);
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
    Ok(prior_set(&past.intervals, since, heard, up, &lost))
}

/// `pg`'s acting set in the map just before `epoch` (fetched from the monitor's history when
/// this OSD skipped that epoch); empty where there is none or it cannot be had.
async fn acting_before(s: &Shared, pg: &Pg, epoch: u64) -> Vec<i32> {
    if epoch <= 1 {
        return Vec::new();
    }
    acting_in(s, pg, epoch - 1).await
}

/// `pg`'s acting set in the map of `epoch`; empty where there is none or it cannot be had.
async fn acting_in(s: &Shared, pg: &Pg, epoch: u64) -> Vec<i32> {
    match s.past_maps.range(&s.mon, epoch, epoch).await {
        Ok(maps) => maps
            .first()
            .and_then(|m| m.placement.mapper().map_pg(pg.id).ok())
            .map_or_else(Vec::new, |m| m.acting),
        Err(e) => {
            tracing::info!(osd = s.id, pg = %pg.id, epoch, error = %e, "no map before the interval");
            Vec::new()
        }
    }
}

/// Asks `osd`, a copy outside the acting set, for its log in the peering of the interval
/// begun at `epoch`, adding it to `logs` and `heard` when it answers; a copy that does not
/// answer is passed over unless the interval has ended meanwhile.
async fn ask_past_copy(
    s: &Arc<Shared>,
    pg: &Arc<Pg>,
    epoch: u64,
    osd: i32,
    logs: &mut Vec<PeerLog>,
    heard: &mut BTreeSet<i32>,
) -> Result<(), OsdError> {
    match query_in_interval(s, pg, epoch, osd).await {
        Ok(log) => {
            logs.push(log);
            heard.insert(osd);
            Ok(())
        }
        Err(e) if pg.interval().epoch != epoch => Err(e),
        Err(e) => {
            tracing::info!(pg = %pg.id, osd, error = %e, "past copy did not answer");
            Ok(())
        }
    }
}

async fn peer(s: &Arc<Shared>, pg: &Arc<Pg>, epoch: u64) -> Result<(), OsdError> {
    let started = tokio::time::Instant::now();
    // After a scrub's chunk: what peering recovers must not change objects while a scrub
    // compares them (a scrub ends its chunk as soon as the PG leaves its activation).
    let (mut inner, _) = pg.lock_unfenced(None).await;
    // This copy's log is read now, for this interval: replica writes of earlier ones are
    // refused from here on, even if this peering ends in a temporary acting set and not in
    // this copy's activation (the same fence a query puts on the other copies).
    pg.note_peered_in(epoch);
    let locked = started.elapsed();
    let iv = pg.interval();
    // Another peering of this interval (retries of a down PG on successive maps) got there
    // first.
    if iv.epoch != epoch || pg.active_epoch() == Some(epoch) {
        return Ok(());
    }
    if iv.acting.len() < iv.min_size.max(1) {
        pg.set_status_in(epoch, PgStatus::Inactive);
        tracing::warn!(osd = s.id, pg = %pg.id, up = iv.acting.len(), min_size = iv.min_size, "too few copies up: pg inactive");
        return Ok(());
    }
    pg.set_status_in(epoch, PgStatus::Peering);
    let mut logs = vec![PeerLog {
        osd: s.id,
        last_epoch_started: inner.last_epoch_started,
        log: inner.log.clone(),
        missing: pg.missing().own().clone(),
    }];
    let acting: BTreeSet<i32> = iv.acting.iter().copied().skip(1).collect();
    let up = s.up_osds();
    // The copies that served just before this interval are asked too, even where this OSD
    // did not know the PG then (it is new to the PG): a complete one still up (an OSD marked
    // out, say) can serve in a temporary acting set while the new copies are filled.
    let previous = acting_before(s, pg, epoch).await;
    let past: BTreeSet<i32> = pg
        .past_osds()
        .into_iter()
        .chain(previous)
        .filter(|o| *o != s.id && up.contains(o) && !acting.contains(o))
        .collect();
    let mut heard = BTreeSet::from([s.id]);
    for &osd in &acting {
        logs.push(query_in_interval(s, pg, epoch, osd).await?);
        heard.insert(osd);
    }
    for &osd in &past {
        ask_past_copy(s, pg, epoch, osd, &mut logs, &mut heard).await?;
    }
    // Every later interval that may have taken writes must be heard from (Ceph's prior set).
    loop {
        match prior(s, pg, epoch, &logs, &heard, &up).await? {
            Prior::Ask(more) if more.is_empty() => break,
            Prior::Ask(more) => {
                for osd in more {
                    logs.push(query_in_interval(s, pg, epoch, osd).await?);
                    heard.insert(osd);
                }
            }
            Prior::Down { interval } => {
                if pg.set_status_in(epoch, PgStatus::Down) {
                    tracing::warn!(osd = s.id, pg = %pg.id, epoch, first = interval.first, last = interval.last, acting = ?interval.acting, "pg down: an interval that may have taken writes has no copy up");
                }
                return Ok(());
            }
        }
    }
    // The copies of the interval the newest log was activated in, where the PG last served,
    // are heard too: a complete one still up can serve in a temporary acting set (Ceph's
    // choose_acting weighs every copy it heard of), where the intervals in between (ones
    // that never went active) may not name it.
    let since = logs.iter().map(|l| l.last_epoch_started).max().unwrap_or(0);
    if since > 0 {
        let up_now = s.up_osds();
        for osd in acting_in(s, pg, since).await {
            // Asked already (a past copy that did not answer is not asked twice), or down.
            if heard.contains(&osd) || past.contains(&osd) || !up_now.contains(&osd) {
                continue;
            }
            ask_past_copy(s, pg, epoch, osd, &mut logs, &mut heard).await?;
        }
    }
    // Later peerings count this interval as possibly written only once the monitor knows this
    // OSD was alive in it (Ceph's up_thru): it must before the PG goes active.
    let heard_all = started.elapsed();
    if !wait_up_thru(s, pg, epoch).await? {
        return Ok(());
    }
    let alive = started.elapsed();
    let plan = plan(&logs, s.id).map_err(|e| OsdError::Corrupt(e.to_string()))?;
    if tracing::enabled!(tracing::Level::DEBUG) {
        let copies: Vec<String> = logs
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
    // A long recovery is done in the background from a temporary acting set of complete
    // copies, which serves meanwhile (and a short one too while a cluster flag holds it).
    let min_objects = match came_home(s, pg, &iv, epoch) {
        true => s.cfg.remap_min_objects.max(HOME_MIN_OBJECTS),
        false => s.cfg.remap_min_objects,
    };
    // A short log recovery is done after activation instead, in the background (a copy that
    // refused it as too full is left out by recovering before activation).
    // `norebalance` keeps a PG that has its pool's size of complete copies on them, as before.
    let misplaced_held = s.map.borrow().as_ref().is_some_and(|map| {
        map.has(MapFlag::NoRebalance)
            && crate::remap::temporary_acting(&iv, &plan, &up, 1)
                .is_some_and(|t| t.len() >= iv.size)
    });
    let behind = recovers_after_activation(&iv, &plan, min_objects)
        && !pg.too_full_in(epoch)
        && !misplaced_held;
    if !behind {
        let min_objects = match s.map.borrow().as_ref() {
            Some(map) => crate::remap::min_objects_under_flags(map, &iv, &plan, &up, min_objects),
            None => min_objects,
        };
        if let Some(temp) = crate::remap::temporary_acting(&iv, &plan, &up, min_objects) {
            let serving = temp.len();
            let held = match s.map.borrow().as_ref() {
                Some(map) => crate::remap::holding_flag(map, &iv, &plan, serving),
                None => None,
            };
            let instead = match held {
                Some(_) => "peering again: a cluster flag holds the recovery",
                None => "recovering before activation",
            };
            if crate::remap::serve_from(s, pg, epoch, temp, instead).await {
                return Ok(());
            }
            if let Some(flag) = held {
                return Err(OsdError::Held(flag));
            }
        }
    }
    let auth_log: PgLog = logs
        .iter()
        .find(|l| l.osd == plan.authoritative)
        .map(|l| l.log.clone())
        .unwrap_or_else(|| inner.log.clone());
    let coll = pg.coll.clone();
    // The primary first: it must hold the authoritative state before it serves or pushes.
    let auth = plan.authoritative;
    // Client I/O of the PG waits for all of it: its steps run as client work.
    let r = Recovering {
        s,
        pg,
        epoch,
        urgency: Urgency::Blocking,
    };
    // The copies to pull this copy's missing objects from: the authoritative log's holder
    // first, then every other copy heard.
    let sources: Vec<i32> = std::iter::once(auth)
        .chain(logs.iter().map(|l| l.osd))
        .filter(|&o| o != s.id)
        .collect();
    let own_missing = match behind {
        true => missing_of(&plan, s.id),
        false => Wanted::new(),
    };
    match plan.recovery.get(&s.id) {
        _ if behind => {}
        Some(Recovery::Log { missing, .. }) => {
            // The copy to pull from is one that holds the version the log names: the
            // authoritative log's holder first, then every other copy heard (a holder of the
            // newest log may itself still lack an object, as Ceph's missing_loc allows for).
            for (obj, want) in missing {
                recover_local(&r, &sources, obj, &mut inner.created, *want).await?;
            }
        }
        Some(Recovery::Backfill) => {
            let names = list_remote(&r, auth).await?;
            let keep: BTreeSet<&String> = names.iter().collect();
            for obj in list_scheduled(&r).await? {
                if !keep.contains(&obj) {
                    install_local(&r, &mut inner.created, &obj, None).await?;
                }
            }
            for obj in &names {
                pull(&r, auth, obj, &mut inner.created, None).await?;
            }
        }
        _ => {}
    }
    // Then every other acting copy.
    // A copy too full to take its recovery is left out of the interval (Ceph's
    // recovery_toofull): the PG goes active degraded without it, if min_size copies remain.
    let mut left_out = BTreeSet::new();
    let mut peers_missing = BTreeMap::new();
    for &osd in &acting {
        let (keep, missing) = if behind {
            (None, missing_of(&plan, osd))
        } else {
            match recover_copy(&r, &plan, osd).await {
                Ok(keep) => (keep, Wanted::new()),
                Err(OsdError::TooFull { osd, why }) => {
                    tracing::warn!(osd = s.id, pg = %pg.id, epoch, copy = osd, %why, "copy too full for recovery: left out of the interval");
                    left_out.insert(osd);
                    continue;
                }
                Err(e) => return Err(e),
            }
        };
        let body = PeerBody::Activate {
            log: Box::new(auth_log.clone()),
            keep,
            missing: missing.clone(),
        };
        ask(s, pg, epoch, osd, body, Bytes::new()).await?;
        peers_missing.insert(osd, missing);
    }
    let copies = iv.acting.len() - left_out.len();
    if copies < iv.min_size.max(1) {
        return Err(OsdError::Peer {
            osd: s.id,
            reason: format!(
                "only {copies} copies could take recovery, min_size is {}",
                iv.min_size
            ),
        });
    }
    if !left_out.is_empty() {
        // The map must say who serves: a copy left out while the map still names it in the
        // acting set could later be taken for a copy of the interval it never served.
        let temp: Vec<i32> = iv
            .acting
            .iter()
            .copied()
            .filter(|o| !left_out.contains(o))
            .collect();
        let instead = "serving with the too full copies left out";
        if crate::remap::serve_from(s, pg, epoch, temp, instead).await {
            return Ok(());
        }
    }
    let recovered = started.elapsed();
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
    inner.history_les = logs.iter().map(|l| l.last_epoch_started).max().unwrap_or(0);
    pg.writes.reset(auth_log.head(), auth_log.head());
    inner.log = auth_log;
    inner.last_epoch_started = epoch;
    // Before the PG serves: an op on an object a copy lacks must find it missing.
    let complete = own_missing.is_empty() && peers_missing.values().all(|w| w.is_empty());
    let (own_count, peer_count) = (
        own_missing.len(),
        peers_missing.values().map(|w| w.len()).sum::<usize>(),
    );
    pg.missing()
        .activate_primary(epoch, own_missing, peers_missing, sources);
    if pg.finish_peering(epoch, left_out, copies >= iv.size && complete) {
        let ms = crate::convert::millis;
        tracing::debug!(
            osd = s.id,
            pg = %pg.id,
            epoch,
            locked_ms = ms(locked),
            heard_ms = ms(heard_all),
            up_thru_ms = ms(alive),
            recovered_ms = ms(recovered),
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

/// Whether `plan`'s recovery of `iv`'s acting copies runs after the PG activates: no copy
/// needs a backfill, and none lacks `min_objects` or more (Ceph's
/// `osd_async_recovery_min_cost`: beyond it, a temporary acting set of complete copies serves
/// while the copy is filled).
fn recovers_after_activation(
    iv: &crate::pgs::Interval,
    plan: &cairn_pg::PeeringPlan,
    min_objects: usize,
) -> bool {
    iv.acting.iter().all(|o| match plan.recovery.get(o) {
        None | Some(Recovery::Clean) => true,
        Some(Recovery::Backfill) => false,
        Some(Recovery::Log { missing, .. }) => missing.len() < min_objects,
    })
}

/// What `plan` says copy `osd` lacks (nothing when it is clean).
fn missing_of(plan: &cairn_pg::PeeringPlan, osd: i32) -> Wanted {
    match plan.recovery.get(&osd) {
        Some(Recovery::Log { missing, .. }) => missing.clone(),
        _ => Wanted::new(),
    }
}

/// Objects a PG that has just come home from a temporary acting set recovers before it
/// activates rather than going back to a temporary set (see [`came_home`]).
const HOME_MIN_OBJECTS: usize = 64;

/// Whether `pg`'s interval begun at `epoch` is its up set serving again right after a
/// temporary acting set (the map before `epoch` had one): the copies filled in the background
/// are then behind only by what was written since the fill's last pass. Under steady writes
/// that is often more than `remap_min_objects`, and with the plain threshold the PG went back
/// and forth between its up set and a temporary set (seen in the thrash test: 15 round trips in
/// 0.7 s, two epochs and two peerings each) instead of recovering those few objects.
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

/// Brings the acting copy on `osd` up to the authoritative state (log recovery or backfill);
/// what it must keep after a backfill. [`OsdError::TooFull`] when it cannot take an object.
async fn recover_copy(
    r: &Recovering<'_>,
    plan: &cairn_pg::PeeringPlan,
    osd: i32,
) -> Result<Option<Vec<String>>, OsdError> {
    Ok(match plan.recovery.get(&osd) {
        Some(Recovery::Log { missing, .. }) => {
            for obj in missing.keys() {
                push(r, osd, obj).await?;
            }
            None
        }
        Some(Recovery::Backfill) => {
            let names = list_scheduled(r).await?;
            for obj in &names {
                push(r, osd, obj).await?;
            }
            Some(names)
        }
        _ => None,
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
    fn only_short_log_recoveries_of_acting_copies_run_after_activation() {
        use cairn_pg::{Eversion, PeeringPlan};
        let lacking = |n: u64| Recovery::Log {
            missing: (0..n)
                .map(|i| (format!("o{i}"), Some(Eversion::new(2, i + 1))))
                .collect(),
            divergent: Vec::new(),
        };
        let iv = crate::pgs::Interval {
            acting: vec![0, 1, 2],
            ..Default::default()
        };
        let plan_of = |recovery: Vec<(i32, Recovery)>| PeeringPlan {
            authoritative: 0,
            head: Eversion::new(2, 9),
            recovery: recovery.into_iter().collect(),
        };
        let short = plan_of(vec![
            (0, lacking(2)),
            (1, Recovery::Clean),
            (2, lacking(99)),
        ]);
        assert!(recovers_after_activation(&iv, &short, 100));
        assert_eq!(missing_of(&short, 0).len(), 2);
        assert!(missing_of(&short, 1).is_empty());
        let long = plan_of(vec![(0, Recovery::Clean), (2, lacking(100))]);
        assert!(!recovers_after_activation(&iv, &long, 100));
        let backfill = plan_of(vec![(1, Recovery::Backfill)]);
        assert!(!recovers_after_activation(&iv, &backfill, 100));
        // A copy outside the acting set (an earlier interval's) is not this interval's to
        // recover.
        let outside = plan_of(vec![(0, Recovery::Clean), (7, Recovery::Backfill)]);
        assert!(recovers_after_activation(&iv, &outside, 100));
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
