//! What an OSD does for a PG it does not lead: apply the primary's replica writes in order
//! (only from the interval it was activated in), and answer peering and recovery requests —
//! its log, its object names, object images, installing pushed objects, and activation with
//! the authoritative log.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use cairn_clustermap::PgId;
use cairn_proto::image::ObjectImage;
use cairn_proto::peer::{PeerAnswer, PeerBody, PeerReply, PeerRequest};
use cairn_proto::{OpResult, RepOpHeader, ReplyHeader};
use cairn_store::{StoreError, Transaction};

use crate::error::OsdError;
use crate::inflight::{poll_once, AfterFinish, LocalOutcome};
use crate::metrics::RecoveryKind;
use crate::objects::{
    list_all, list_page, piece_data_bytes, read_piece, remove_temps, stage_piece, Cursor,
    PiecePlace,
};
use crate::payload::Payload;
use crate::pgmeta::{append_entry, pack, put_info, remove_missing, replace_log, replace_missing};
use crate::pgs::PgStatus;
use crate::shared::Shared;
use crate::transfer;
use crate::txns::{build_write, no_space_detail};
use crate::work::Work;
use cairn_qos::OpKind as Io;

/// How long a replica write that arrived ahead of an earlier one of its PG waits for it, at
/// most, before it is refused (the primary then peers again): the two are sent a moment apart,
/// and the earlier one may wait its turn in this OSD's scheduler.
const REPLICA_ORDER_WAIT_MS: u64 = 2_000;

/// Applies a replica write durably; answers Ok only once it is committed. The data's crc32c,
/// as the messenger verified it on arrival, must match the write's own. Writes are applied in
/// version order: one that arrives ahead of an earlier one of the same interval (the primary
/// pipelines a PG's writes) waits for it, up to the replica-write timeout. Like the primary's,
/// the write is queued in the store and logged under the PG's lock, which it lets go of while
/// it commits.
pub async fn repop(s: &Arc<Shared>, rep: RepOpHeader, data: Payload, work: Work) -> ReplyHeader {
    let epoch = s.epoch();
    let bad = |r| ReplyHeader::bare(rep.tid, epoch, r);
    if data.crc != rep.data_crc {
        return bad(OpResult::Invalid("data checksum mismatch".into()));
    }
    let pgid = PgId {
        pool: rep.pool,
        seed: rep.pg_seed,
    };
    if let Err(r) = crate::txns::check_object_size(
        &rep.object,
        &rep.kind,
        data.bytes.len(),
        s.cfg.max_object_bytes,
    ) {
        return bad(r);
    }
    if rep.fill != 0 {
        return crate::forward::apply(s, rep, data, work).await;
    }
    let pg = s.pgs.get_or_create(pgid, s.cfg.max_log_entries);
    pg.note_request_epoch(rep.epoch);
    let deadline = tokio::time::Instant::now()
        + Duration::from_millis(s.cfg.repop_timeout_ms.min(REPLICA_ORDER_WAIT_MS));
    let version = rep.entry.version;
    loop {
        let grant = match s.sched.grant(pgid, work).await {
            Ok(g) => g,
            Err(e) => return bad(OpResult::Failed(e.to_string())),
        };
        let inner = pg.lock_for_replica_write().await;
        // Checked under the PG's lock, which a peering query takes too (once no write is in
        // flight): a write either commits before the query reads this copy's log (and the new
        // interval has it) or is refused.
        let peered_in = pg.peered_in();
        if rep.epoch < peered_in {
            return bad(OpResult::Failed(format!(
                "replica write of interval {} but this copy of {pgid} was read by the peering of interval {peered_in}",
                rep.epoch
            )));
        }
        if rep.epoch != inner.last_epoch_started {
            return bad(OpResult::Failed(format!(
                "replica write of interval {} but this copy of {pgid} is active in {}",
                rep.epoch, inner.last_epoch_started
            )));
        }
        let head = inner.log.head();
        if version <= head {
            if pg.writes.is_running(version) {
                // A resend of a write still committing here: answered once it ends.
                drop((inner, grant));
                pg.writes.ended(version).await;
                continue;
            }
            // A resend of an entry this copy holds (or has trimmed) is done already. A
            // different entry at a version this copy has used means the primary reused it
            // after a write it could not commit: the copies disagree, and saying Ok would lose
            // this write here.
            return match inner.log.entry_at(version) {
                Some(e) if *e != rep.entry => bad(OpResult::Failed(format!(
                    "pg {pgid} diverged at {version}: this copy holds another write there"
                ))),
                _ => ReplyHeader {
                    version: pack(version),
                    ..bad(OpResult::Ok)
                },
            };
        }
        if version.version != head.version + 1 {
            // An earlier write of this interval has not arrived yet, or never will.
            let mut changed = pg.writes.watch();
            drop((inner, grant));
            if tokio::time::timeout_at(deadline, changed.changed())
                .await
                .is_err()
            {
                return bad(OpResult::Failed(format!(
                    "pg {pgid} missed writes: {version} after {head}"
                )));
            }
            continue;
        }
        return apply(s, &pg, &rep, &data, inner, grant).await;
    }
}

/// Builds, queues and awaits a replica write that is next in its PG's log (the lock held as
/// `inner`, let go of once the write is queued).
async fn apply(
    s: &Arc<Shared>,
    pg: &crate::pgs::Pg,
    rep: &RepOpHeader,
    data: &Payload,
    mut inner: tokio::sync::MutexGuard<'_, crate::pgs::PgInner>,
    grant: crate::sched::Grant,
) -> ReplyHeader {
    let epoch = s.epoch();
    let bad = |r| ReplyHeader::bare(rep.tid, epoch, r);
    let coll = pg.coll.as_str();
    let crate::pgs::PgInner {
        log,
        created,
        last_epoch_started,
        ..
    } = &mut *inner;
    let reservation = pg.writes.reserve(log, created);
    let creates = !*created;
    let mut txn = Transaction::new();
    if creates {
        txn.create_collection(coll);
    }
    if let Err(r) = build_write(
        &mut txn,
        coll,
        &rep.object,
        &rep.kind,
        &data.bytes,
        data.block_crcs.as_ref(),
        pack(rep.entry.version),
    ) {
        return bad(r);
    }
    if let Err(e) = append_entry(&mut txn, coll, log, &rep.entry, *last_epoch_started) {
        return bad(OpResult::Failed(e.to_string()));
    }
    if let Err(e) = log.append(rep.entry.clone()) {
        return bad(OpResult::Failed(e.to_string()));
    }
    let version = rep.entry.version;
    let flight = pg
        .writes
        .submitted(reservation, version, &rep.object, creates);
    *created = true;
    let refused = |e: StoreError| {
        bad(match e {
            StoreError::NoSpace {
                needed_blocks,
                free_blocks,
            } => OpResult::NoSpace(no_space_detail(needed_blocks, free_blocks)),
            other => OpResult::Failed(other.to_string()),
        })
    };
    let mut local = std::pin::pin!(s.store.queue_transaction_owned(txn));
    let now = match poll_once(local.as_mut()).await {
        Some(Err(e)) if !e.is_fatal() => {
            flight.withdraw(log, created);
            return refused(e);
        }
        other => other,
    };
    drop(inner);
    let l = match now {
        Some(l) => l,
        None => local.await,
    };
    drop(grant);
    if flight.finish(LocalOutcome::of(&l), true) == AfterFinish::StopTheOsd {
        s.fail_stop(format!(
            "pg {}: replica write {version} failed after a later write was queued",
            pg.id
        ));
    }
    match l {
        Ok(()) => ReplyHeader {
            version: pack(version),
            ..bad(OpResult::Ok)
        },
        Err(e) => refused(e),
    }
}

/// Answers a peering or recovery request. Log queries and activation are control messages and
/// run at once; listing, pulls and pushes move data and go through the scheduler as recovery;
/// a scrub map's object reads go through it as best-effort requests.
pub async fn peer_request(s: &Arc<Shared>, req: PeerRequest, data: Bytes) -> (PeerReply, Bytes) {
    let tid = req.tid;
    let from = req.from;
    let answer = match req.body {
        PeerBody::IsClean { last_epoch_started } => Ok((
            PeerAnswer::Clean {
                clean: clean_without(s, &req, last_epoch_started),
            },
            Bytes::new(),
        )),
        PeerBody::Reserve => Ok((
            PeerAnswer::Reserved {
                granted: reserve_fill(s, &req),
            },
            Bytes::new(),
        )),
        PeerBody::Release => {
            let pg = PgId {
                pool: req.pool,
                seed: req.pg_seed,
            };
            s.throttle.release_remote(pg, from);
            Ok((PeerAnswer::Done, Bytes::new()))
        }
        PeerBody::Query | PeerBody::Activate { .. } | PeerBody::Filled { .. } => {
            control(s, req, data).await
        }
        PeerBody::ScrubMap {
            ref after,
            ref until,
            deep,
        } => {
            // Not one scheduled request: each object it reads is one of its own.
            let pg = pg_of(s, &req);
            crate::scrub::scrub_map(s, &pg, after, until.as_deref(), deep)
                .await
                .map(|map| (PeerAnswer::ScrubMap { map }, Bytes::new()))
        }
        _ => {
            let s2 = s.clone();
            let pg = PgId {
                pool: req.pool,
                seed: req.pg_seed,
            };
            let work = peer_work(s, &req, u64::from(from as u32), data.len() as u64).await;
            s.sched
                .run(pg, work, async move { recovery(&s2, req, data).await })
                .await
                .and_then(|r| r)
        }
    };
    match answer {
        Ok((a, body)) => (PeerReply { tid, answer: Ok(a) }, body),
        Err(e) => (
            PeerReply {
                tid,
                answer: Err(e.to_string()),
            },
            Bytes::new(),
        ),
    }
}

/// What a peer's recovery request asks of this OSD's store, for the scheduler: a piece read
/// for a pull, a piece written for a push, else a metadata step; in the class and priority its
/// urgency asks for, on behalf of `peer`.
async fn peer_work(s: &Shared, req: &PeerRequest, peer: u64, data_bytes: u64) -> Work {
    let base = Work::new(transfer::purpose_of(req.urgency), peer, Io::Other);
    match &req.body {
        PeerBody::Pull {
            object,
            data_offset,
            ..
        } => {
            let coll = crate::pgmeta::collection(PgId {
                pool: req.pool,
                seed: req.pg_seed,
            });
            let budget = s.recovery_chunk_bytes;
            let bytes = piece_data_bytes(&s.store, &coll, object, *data_offset, budget).await;
            Work {
                op: Io::Read,
                ..base
            }
            .on(object, *data_offset, bytes)
            .at_physical(s.store.physical_offset_hint(&coll, object, *data_offset))
        }
        PeerBody::Push {
            object,
            data_offset,
            ..
        } => Work {
            op: Io::Write,
            ..base
        }
        .on(object, *data_offset, data_bytes),
        _ => base.sized(data_bytes),
    }
}

/// Grants the asker a remote reservation to fill this OSD's copy of the PG in the interval of
/// the request's epoch, if this OSD's `osd_max_backfills` allows one more. A grant lapses once
/// this OSD sees its PG in a later interval, so a primary that died holds none.
fn reserve_fill(s: &Shared, req: &PeerRequest) -> bool {
    let pg = PgId {
        pool: req.pool,
        seed: req.pg_seed,
    };
    s.throttle
        .reserve_remote(pg, req.from, req.epoch, |id, epoch| {
            grant_lapsed(s, id, epoch)
        })
}

/// Whether a fill reservation of `pg` granted in the interval of `epoch` has lapsed: this
/// OSD no longer holds the PG, or holds it in a later interval.
pub(crate) fn grant_lapsed(s: &Shared, pg: PgId, epoch: u64) -> bool {
    s.pgs.get(pg).is_none_or(|p| p.interval().epoch > epoch)
}

/// Whether this OSD leads the PG active+clean, in the asker's map epoch, without the asker,
/// and with a history that includes the asker's last interval (`les`, its last epoch started).
fn clean_without(s: &Shared, req: &PeerRequest, les: u64) -> bool {
    let id = PgId {
        pool: req.pool,
        seed: req.pg_seed,
    };
    let Some(pg) = s.pgs.get(id) else {
        return false;
    };
    let iv = pg.interval();
    let clean = s.epoch() == req.epoch
        && iv.acting.first() == Some(&s.id)
        && !iv.acting.contains(&req.from)
        && pg.active_epoch().is_some()
        && pg.status() == PgStatus::ActiveClean;
    if !clean {
        return false;
    }
    let Some(inner) = pg.try_lock() else {
        return false;
    };
    if les > inner.history_les {
        // Peering never saw that interval (its OSDs were down, and past intervals are not
        // persisted): the copy may hold acknowledged writes this PG lacks. Keep it.
        tracing::error!(osd = s.id, pg = %pg.id, copy = req.from, copy_les = les, history_les = inner.history_les, "a stray copy was activated in an interval this pg's history lacks: kept");
        return false;
    }
    true
}

/// The refusal of a push or `Filled` of fill attempt `attempt` that a later attempt overtook:
/// it may carry an older state than that attempt gave this copy.
fn stale_fill(s: &Shared, pg: &crate::pgs::Pg, attempt: u64) -> OsdError {
    OsdError::Peer {
        osd: s.id,
        reason: format!(
            "fill attempt {attempt} of pg {}: a later attempt reached this copy",
            pg.id
        ),
    }
}

/// The PG a peering or recovery request is about (created empty if unknown), with the
/// request's epoch noted.
fn pg_of(s: &Shared, req: &PeerRequest) -> Arc<crate::pgs::Pg> {
    let pg = s.pgs.get_or_create(
        PgId {
            pool: req.pool,
            seed: req.pg_seed,
        },
        s.cfg.max_log_entries,
    );
    pg.note_request_epoch(req.epoch);
    pg
}

async fn control(
    s: &Arc<Shared>,
    req: PeerRequest,
    _data: Bytes,
) -> Result<(PeerAnswer, Bytes), OsdError> {
    let pg = pg_of(s, &req);
    let busy = || OsdError::Peer {
        osd: s.id,
        reason: format!("pg {} is busy", pg.id),
    };
    let mut inner = tokio::time::timeout(Duration::from_secs(3), pg.lock())
        .await
        .map_err(|_| busy())?;
    // A peering of an interval older than one this copy was already peered or activated in
    // comes from a primary that has not learnt of the newer one (cut off from the monitor):
    // answering would let it plan from this copy's log, and activating would roll back
    // writes the newer interval acknowledged (Ceph drops such messages as old peering
    // messages).
    if matches!(req.body, PeerBody::Query | PeerBody::Activate { .. }) {
        let newest = inner.last_epoch_started.max(pg.peered_in());
        if req.epoch < newest {
            return Err(OsdError::Peer {
                osd: s.id,
                reason: format!(
                    "pg {} was peered in the interval of epoch {newest}: a peering of epoch {} is stale",
                    pg.id, req.epoch
                ),
            });
        }
    }
    // Under the lock, before this copy's log is read or replaced: replica writes of earlier
    // intervals wait for the lock and then see it.
    pg.note_peered_in(req.epoch);
    match req.body {
        PeerBody::Query => Ok((
            PeerAnswer::Info {
                last_epoch_started: inner.last_epoch_started,
                log: inner.log.clone(),
                missing: pg.missing().own().clone(),
            },
            Bytes::new(),
        )),
        PeerBody::Activate { log, keep, missing } => {
            let log = *log;
            let coll = pg.coll.clone();
            let mut txn = Transaction::new();
            if !inner.created {
                txn.create_collection(&coll);
            }
            if inner.created {
                // Recovery is over: a transfer in pieces interrupted here is garbage.
                remove_temps(&s.store, &coll, &mut txn).await?;
            }
            if let Some(keep) = keep {
                let keep: BTreeSet<String> = keep.into_iter().collect();
                for name in list_all(&s.store, &coll).await? {
                    if !keep.contains(&name) {
                        txn.remove(&coll, &name);
                    }
                }
            }
            replace_log(&mut txn, &coll, &inner.log, &log, req.epoch)?;
            let old_missing = pg.missing().own().clone();
            replace_missing(&mut txn, &coll, &old_missing, &missing)?;
            s.store.queue_transaction_owned(txn).await?;
            tracing::debug!(osd = s.id, pg = %pg.id, epoch = req.epoch, from = req.from, old_les = inner.last_epoch_started, old_head = %inner.log.head(), head = %log.head(), missing = missing.len(), "activated");
            pg.missing().set_own(req.epoch, missing);
            inner.created = true;
            pg.writes.reset(cairn_pg::Eversion::default(), log.head());
            inner.log = log;
            inner.last_epoch_started = req.epoch;
            Ok((PeerAnswer::Done, Bytes::new()))
        }
        PeerBody::Filled { log } => {
            if pg.interval().acting.contains(&s.id) {
                return Err(OsdError::Peer {
                    osd: s.id,
                    reason: format!("pg {} is served here: not filled in the background", pg.id),
                });
            }
            if req.fill != 0 && !pg.admit_fill(req.epoch, req.fill) {
                return Err(stale_fill(s, &pg, req.fill));
            }
            let log = *log;
            let coll = pg.coll.clone();
            let mut txn = Transaction::new();
            if !inner.created {
                txn.create_collection(&coll);
            }
            let les = inner.last_epoch_started;
            replace_log(&mut txn, &coll, &inner.log, &log, les)?;
            s.store.queue_transaction_owned(txn).await?;
            tracing::debug!(osd = s.id, pg = %pg.id, epoch = req.epoch, from = req.from, les, old_head = %inner.log.head(), head = %log.head(), "filled");
            inner.created = true;
            pg.writes.reset(cairn_pg::Eversion::default(), log.head());
            inner.log = log;
            Ok((PeerAnswer::Done, Bytes::new()))
        }
        _ => Err(OsdError::Protocol("not a control request".into())),
    }
}

async fn recovery(
    s: &Arc<Shared>,
    req: PeerRequest,
    data: Bytes,
) -> Result<(PeerAnswer, Bytes), OsdError> {
    let pg = pg_of(s, &req);
    let coll = pg.coll.clone();
    let urgency = req.urgency;
    match req.body {
        PeerBody::List { after, max } => {
            let (names, more) = list_page(&s.store, &coll, &after, max).await?;
            s.metrics
                .record_recovery(RecoveryKind::ServeList, urgency, 0);
            Ok((PeerAnswer::Names { names, more }, Bytes::new()))
        }
        PeerBody::Pull {
            object,
            data_offset,
            omap_after,
        } => {
            let at = Cursor {
                data_offset,
                omap_after,
            };
            let budget = s.recovery_chunk_bytes;
            match read_piece(&s.store, &coll, &object, &at, budget).await? {
                Some(piece) => {
                    let data = piece.image.encode();
                    s.metrics
                        .record_recovery(RecoveryKind::ServePull, urgency, data.len() as u64);
                    let answer = PeerAnswer::Object {
                        present: true,
                        version: piece.version,
                        more: piece.more,
                    };
                    Ok((answer, data))
                }
                None => {
                    s.metrics
                        .record_recovery(RecoveryKind::ServePull, urgency, 0);
                    let answer = PeerAnswer::Object {
                        present: false,
                        version: Default::default(),
                        more: false,
                    };
                    Ok((answer, Bytes::new()))
                }
            }
        }
        PeerBody::Push {
            object,
            present,
            data_offset,
            first,
            last,
        } => {
            let image = if present {
                Some(ObjectImage::decode(&data)?)
            } else {
                None
            };
            let place = PiecePlace {
                data_offset,
                first,
                last,
            };
            let bytes = image.as_ref().map_or(0, |i| i.data.len() as u64);
            s.throttle.note_push_received();
            // A removal (no image) frees room: never refused.
            let refused = match bytes {
                0 => None,
                _ => crate::primary::past_backfillfull_ratio_with(s, bytes),
            };
            if let Some(why) = refused {
                return Ok((PeerAnswer::TooFull { why }, Bytes::new()));
            }
            let mut inner = pg.lock().await;
            // A push of an interval whose copies a later peering has read may carry a
            // version that peering replaced: refused, as replica writes are.
            let peered_in = pg.peered_in();
            if req.epoch < peered_in {
                return Err(OsdError::Peer {
                    osd: s.id,
                    reason: format!(
                        "push of interval {} but this copy of {} was read by the peering of interval {peered_in}",
                        req.epoch, pg.id
                    ),
                });
            }
            if req.fill != 0 && !pg.admit_fill(req.epoch, req.fill) {
                return Err(stale_fill(s, &pg, req.fill));
            }
            let mut txn = Transaction::new();
            if !inner.created {
                txn.create_collection(&coll);
            }
            let piece = image.as_ref().map(|i| (i, place));
            stage_piece(&s.store, &mut txn, &coll, &object, piece, inner.created).await?;
            // The object complete: this copy no longer lacks it (with the last piece, in the
            // same transaction).
            let completes = last && pg.missing().own_lacks(&object);
            if completes {
                remove_missing(&mut txn, &coll, &object);
            }
            if !inner.created {
                put_info(&mut txn, &coll, inner.log.tail(), inner.last_epoch_started)?;
            }
            match s.store.queue_transaction_owned(txn).await {
                Err(e @ StoreError::NoSpace { .. }) => {
                    let why = e.to_string();
                    return Ok((PeerAnswer::TooFull { why }, Bytes::new()));
                }
                r => r?,
            }
            inner.created = true;
            if completes {
                pg.missing().replica_recovered(&object);
            }
            s.metrics
                .record_recovery(RecoveryKind::ReceivePush, urgency, data.len() as u64);
            Ok((PeerAnswer::Done, Bytes::new()))
        }
        _ => Err(OsdError::Protocol("not a recovery request".into())),
    }
}
