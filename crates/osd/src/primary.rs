//! Client operations on the PG's primary. Every op waits until its PG is active, then runs
//! through the scheduler (invariant 2). Writes are ordered by the PG's lock: the primary
//! resolves the op (append -> write at the end), assigns the next PG version, queues the data
//! with its log entry in its store and sends the same to every other acting OSD, then lets go
//! of the lock (the PG's writes to other objects pipeline behind it) and answers only when all
//! have committed (invariant 1). Reads come from the primary's store, whose blocks are
//! checksum-verified (invariant 7).

use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

use crate::work::{Purpose, Work};
use bytes::Bytes;
use cairn_clustermap::PgId;
use cairn_msgr::blockcrc::{crc_with_known_blocks, CRC_BLOCK_BYTES};
use cairn_pg::{Eversion, ReqId};
use cairn_proto::pairs::{encode_keys, encode_pairs};
use cairn_proto::{OpHeader, OpKind, OpResult, RepOpHeader, ReplyHeader};
use cairn_store::StoreError;

use crate::fillwrites::Forwarded;
use crate::inflight::{poll_once, AfterFinish, LocalOutcome};
use crate::objects::list_page;
use crate::objects::{decode_version, recorded_version};
use crate::payload::Payload;
use crate::pgmeta::pack;
use crate::pgs::{Interval, Pg, PgInner};
use crate::repair::Repair;
use crate::repop::send_repop;
use crate::resolve::{applied_kind, needs_object_state, resolve, Resolved, WriteToResolve};
use crate::shared::Shared;
use crate::turns::Turn;
use crate::txns::{check_object_name, no_space_detail, VERSION_ATTR};

type Answer = (ReplyHeader, Bytes);

fn fail(tid: u64, epoch: u64, result: OpResult) -> Answer {
    (ReplyHeader::bare(tid, epoch, result), Bytes::new())
}

/// Executes one client op as this PG's primary; always answers. The data's crc32c, as the
/// messenger verified it on arrival, must match the op's own.
pub async fn client_op(
    s: Arc<Shared>,
    client: u64,
    op: OpHeader,
    data: Payload,
    turn: Option<Turn>,
) -> Answer {
    let started = Instant::now();
    let kind = op.kind.name();
    let in_bytes = data.bytes.len() as u64;
    let background = op.background;
    let mut waited = Duration::ZERO;
    let answer = run(&s, client, op, data, turn.as_ref(), &mut waited).await;
    drop(turn);
    let small = in_bytes + answer.1.len() as u64 <= PACED_OP_MAX_BYTES;
    if !background && small && answer.0.result == OpResult::Ok {
        // Only the op's own work: a wait for a map, for activation or for the recovery of the
        // object it touches is what background recovery shortens, so holding recovery back for
        // it would make it longer.
        s.throttle.observe_client_op(
            crate::pacing::Stream::Primary,
            started.elapsed().saturating_sub(waited),
        );
    }
    s.metrics.record_op(
        kind,
        in_bytes + answer.1.len() as u64,
        started.elapsed(),
        answer.0.result == OpResult::Ok,
    );
    answer
}

async fn run(
    s: &Arc<Shared>,
    client: u64,
    op: OpHeader,
    data: Payload,
    turn: Option<&Turn>,
    waited: &mut Duration,
) -> Answer {
    let epoch = s.epoch();
    if !matches!(op.kind, OpKind::ListObjects { .. }) {
        if let Err(r) = check_object_name(&op.object) {
            return fail(op.tid, epoch, r);
        }
    }
    if op.assert_version.is_some() && !op.kind.is_write() {
        return fail(
            op.tid,
            epoch,
            OpResult::Invalid(format!("a {} cannot assert a version", op.kind.name())),
        );
    }
    if data.crc != op.data_crc {
        return fail(
            op.tid,
            epoch,
            OpResult::Invalid("data checksum mismatch".into()),
        );
    }
    // The client addressed the op with a newer map: serve it under that map or a later one
    // (a fence the client's map carries holds here before the op is served).
    let t0 = Instant::now();
    if op.epoch > epoch {
        if let Err(r) = wait_for_epoch(s, op.epoch).await {
            return fail(op.tid, s.epoch(), r);
        }
    }
    let map_wait = t0.elapsed();
    if let Some(r) = blocklisted(s, op.instance) {
        return fail(op.tid, s.epoch(), r);
    }
    let pgid = PgId {
        pool: op.pool,
        seed: op.pg_seed,
    };
    match s.is_acting_primary(pgid) {
        None => return fail(op.tid, epoch, OpResult::NotFound),
        Some(false) => return fail(op.tid, epoch, OpResult::NotPrimary),
        Some(true) => {}
    }
    let pg = s.pgs.get_or_create(pgid, s.cfg.max_log_entries);
    let wait = Duration::from_millis(s.cfg.op_wait_active_ms);
    let Some(active) = pg.wait_active(wait).await else {
        return fail(
            op.tid,
            s.epoch(),
            OpResult::Failed(format!("pg {pgid} is not active ({})", pg.status().name())),
        );
    };
    let active_wait = t0.elapsed();
    // An object a copy still lacks after activation is recovered first (this copy's for a
    // read, every copy's for a write); ops on other objects do not wait. A listing reads this
    // copy's names: every object it lacks first.
    let touched: Vec<String> = match op.kind {
        OpKind::ListObjects { .. } => pg.missing().own().keys().cloned().collect(),
        _ => vec![op.object.clone()],
    };
    for object in &touched {
        let write = op.kind.is_write();
        if let Err(why) = crate::recovery::ready_for_op(s, &pg, active, object, write).await {
            return fail(op.tid, s.epoch(), OpResult::Failed(why));
        }
    }
    let ready_wait = t0.elapsed();
    *waited = ready_wait;
    // Named in the slow-op trace; copied only when that trace can be written.
    let traced = tracing::enabled!(tracing::Level::DEBUG).then(|| (op.object.clone(), op.tid));
    let answer = if op.kind.is_write() {
        // Boxed: a write's future is several times a read's, and every op's future is moved
        // whole when its task is spawned (reads would pay to copy the write's state).
        Box::pin(write(s, (client, turn), &pg, active, op, data)).await
    } else {
        read_or_repair(s, client, &pg, active, op).await
    };
    if let Some((object, tid)) = traced.filter(|_| t0.elapsed() >= SLOW_OP_TRACE) {
        let ms = crate::convert::millis;
        tracing::debug!(
            osd = s.id,
            pg = %pgid,
            object,
            tid,
            map_ms = ms(map_wait),
            active_ms = ms(active_wait),
            ready_ms = ms(ready_wait),
            total_ms = ms(t0.elapsed()),
            "slow op: cumulative time after waiting for the op's map, for the PG to be active, for its object's recovery, and in all"
        );
    }
    answer
}

/// Largest client op (bytes in and out) whose latency the recovery pacer weighs: small ops
/// are the ones a recovery's large writes delay most, and a large write's own transfer time
/// would raise the level the pacer compares with.
pub(crate) const PACED_OP_MAX_BYTES: u64 = 128 << 10;

/// Ops slower than this are traced (at debug level) with where their time went.
const SLOW_OP_TRACE: Duration = Duration::from_millis(100);

/// A read whose data failed its checksum here: the op (to serve again once the copy is
/// repaired) and the store's error.
struct Damaged {
    op: OpHeader,
    error: StoreError,
}

/// Serves a read; when this copy of the object is damaged, replaces it with another copy's
/// (outside the read's scheduler slot: the repair's own steps wait for slots) and serves the
/// read once more. Never answers with bad bytes (invariant 7).
async fn read_or_repair(
    s: &Arc<Shared>,
    client: u64,
    pg: &Arc<Pg>,
    active: u64,
    op: OpHeader,
) -> Answer {
    let Damaged { op, error } = match scheduled_read(s, client, pg, op).await {
        Ok(answer) => return answer,
        Err(damaged) => damaged,
    };
    let tid = op.tid;
    // Boxed: the repair's future is large and rarely needed; inline, every read would carry
    // (and copy) its state.
    match Box::pin(crate::repair::repair_object(
        s, pg, active, &op.object, &error,
    ))
    .await
    {
        Repair::Repaired { .. } | Repair::Intact => match scheduled_read(s, client, pg, op).await {
            Ok(answer) => answer,
            Err(Damaged { op, error }) => fail(
                tid,
                s.epoch(),
                OpResult::Damaged(format!("{}: {error}, again after its repair", op.object)),
            ),
        },
        Repair::Retry(why) => fail(tid, s.epoch(), OpResult::Failed(why)),
        Repair::Unrepairable(why) => fail(tid, s.epoch(), OpResult::Damaged(why)),
    }
}

/// One read through the scheduler as a client request.
async fn scheduled_read(
    s: &Arc<Shared>,
    client: u64,
    pg: &Pg,
    op: OpHeader,
) -> Result<Answer, Damaged> {
    let s2 = s.clone();
    let coll = pg.coll.clone();
    let tid = op.tid;
    let mut work = client_work(client, &op.object, &op.kind, 0, op.background);
    if work.op == cairn_qos::OpKind::Read {
        let physical = s
            .store
            .physical_offset_hint(&coll, &op.object, work.offset_bytes);
        work = work.at_physical(physical);
    }
    match s
        .sched
        .run(pg.id, work, async move { read(&s2, &coll, op).await })
        .await
    {
        Ok(r) => r,
        Err(e) => Ok(fail(tid, s.epoch(), OpResult::Failed(e.to_string()))),
    }
}

/// Most bytes a read counts for in the scheduler (a whole-object read asks for `u64::MAX`).
const MAX_READ_COST_BYTES: u64 = 4 << 20;

/// What a client op of `kind` on `obj`, carrying `data_bytes`, is for the scheduler: a data
/// read, a data write (with its offset), or anything else (metadata, omap, removal), at the
/// client's class and priority, or the best-effort class for `background` ops. Replica writes
/// are described the same way.
pub(crate) fn client_work(
    client: u64,
    obj: &str,
    kind: &OpKind,
    data_bytes: u64,
    background: bool,
) -> Work {
    use cairn_qos::OpKind as Io;
    let (io, offset, length) = match *kind {
        OpKind::WriteFull | OpKind::Append => (Io::Write, 0, data_bytes),
        OpKind::Write { offset } => (Io::Write, offset, data_bytes),
        OpKind::Read { offset, len } => (Io::Read, offset, len.min(MAX_READ_COST_BYTES)),
        _ => (Io::Other, 0, data_bytes),
    };
    let purpose = if background {
        Purpose::BackgroundOp
    } else {
        Purpose::ClientOp
    };
    Work::new(purpose, client, io).on(obj, offset, length)
}

fn store_result(e: StoreError) -> OpResult {
    match e {
        StoreError::NoSuchObject { .. } | StoreError::NoSuchCollection { .. } => OpResult::NotFound,
        StoreError::NoSuchAttr { .. } => OpResult::NotFound,
        StoreError::NoSpace {
            needed_blocks,
            free_blocks,
        } => OpResult::NoSpace(no_space_detail(needed_blocks, free_blocks)),
        other => OpResult::Failed(other.to_string()),
    }
}

/// Executes a read op on this OSD's store; `Err` only when the data failed its checksum.
async fn read(s: &Shared, coll: &str, op: OpHeader) -> Result<Answer, Damaged> {
    let epoch = s.epoch();
    let ok = |size: u64, version: u64, body: Vec<u8>, more: bool| {
        (
            ReplyHeader {
                size,
                version,
                data_crc: crc_fast::crc32_iscsi(&body),
                more,
                ..ReplyHeader::bare(op.tid, epoch, OpResult::Ok)
            },
            Bytes::from(body),
        )
    };
    let obj = op.object.as_str();
    let r: Result<Answer, StoreError> = async {
        Ok(match &op.kind {
            OpKind::Read { offset, len } => {
                let (body, crcs, version) = s
                    .store
                    .read_checksummed_with_attr(coll, obj, *offset, *len, VERSION_ATTR)
                    .await?;
                let data_crc = if crcs.block_bytes == CRC_BLOCK_BYTES as u64 {
                    crc_with_known_blocks(&body, &crcs.crcs)
                } else {
                    crc_fast::crc32_iscsi(&body)
                };
                (
                    ReplyHeader {
                        size: body.len() as u64,
                        version: decode_version(version.as_deref()),
                        data_crc,
                        ..ReplyHeader::bare(op.tid, epoch, OpResult::Ok)
                    },
                    body,
                )
            }
            OpKind::Stat => {
                let st = s.store.stat(coll, obj).await?;
                ok(
                    st.size_bytes,
                    recorded_version(&s.store, coll, obj).await,
                    Vec::new(),
                    false,
                )
            }
            OpKind::GetXattr { name } => {
                let v = s.store.getattr(coll, obj, name).await?;
                ok(
                    v.len() as u64,
                    recorded_version(&s.store, coll, obj).await,
                    v,
                    false,
                )
            }
            OpKind::GetXattrs => {
                let attrs: Vec<(String, Vec<u8>)> = s
                    .store
                    .getattrs(coll, obj)
                    .await?
                    .into_iter()
                    .filter(|(k, _)| !k.starts_with('_'))
                    .collect();
                let pairs: Vec<(&[u8], &[u8])> = attrs
                    .iter()
                    .map(|(k, v)| (k.as_bytes(), v.as_slice()))
                    .collect();
                ok(attrs.len() as u64, 0, encode_pairs(&pairs), false)
            }
            OpKind::OmapList { after, prefix, max } => {
                let mut page = s
                    .store
                    .omap_page(coll, obj, after, prefix, (*max as usize).clamp(1, 100_000))
                    .await?;
                let kept = within_bytes(&page.entries, s.cfg.max_omap_bytes_per_request);
                if kept < page.entries.len() {
                    page.entries.truncate(kept);
                    page.more = true;
                }
                ok(
                    page.entries.len() as u64,
                    0,
                    encode_pairs(&page.entries),
                    page.more,
                )
            }
            OpKind::ListObjects { after, max } => {
                let (names, more) = list_page(&s.store, coll, after, *max).await?;
                ok(names.len() as u64, 0, encode_keys(&names), more)
            }
            other => {
                return Ok(fail(
                    op.tid,
                    epoch,
                    OpResult::Invalid(format!("{} is not a read", other.name())),
                ))
            }
        })
    }
    .await;
    match r {
        Ok(answer) => Ok(answer),
        Err(error) if error.is_damaged_copy() => Err(Damaged { op, error }),
        Err(e) => Ok(fail(op.tid, epoch, store_result(e))),
    }
}

/// How many of `entries` (at least one) fit in `max_bytes` of keys and values: an omap listing
/// reply stops there and says there is more (Ceph's `osd_max_omap_bytes_per_request`), so no
/// reply nears the messenger's frame limit however large the values.
fn within_bytes(entries: &[(Vec<u8>, Vec<u8>)], max_bytes: u64) -> usize {
    let mut total = 0u64;
    for (i, (k, v)) in entries.iter().enumerate() {
        total += (k.len() + v.len()) as u64;
        if total > max_bytes {
            return i.max(1);
        }
    }
    entries.len()
}

async fn write(
    s: &Arc<Shared>,
    (client, turn): (u64, Option<&Turn>),
    pg: &Arc<Pg>,
    active: u64,
    op: OpHeader,
    payload: Payload,
) -> Answer {
    let Payload {
        bytes: data,
        block_crcs,
        ..
    } = payload;
    let t0 = Instant::now();
    if let Err(r) = check_quota(s, pg.id.pool, &op).await {
        return fail(op.tid, s.epoch(), r);
    }
    // Behind every write of this object received before it, whatever order their waits
    // for the map, the activation and the recovery released them in.
    if let Some(turn) = turn {
        turn.wait().await;
    }
    // Only this object's writes in flight are waited for: those of other objects go on
    // (pipelining; see `inflight`).
    let (mut inner, fenced) = pg.lock_for_write(&op.object).await;
    let locked = t0.elapsed();
    if fenced {
        s.metrics.record_scrub_fenced();
    }
    let epoch = s.epoch();
    let iv = pg.interval();
    if pg.active_epoch() != Some(active) || iv.acting.first() != Some(&s.id) {
        return fail(
            op.tid,
            epoch,
            OpResult::Failed(format!("pg {} changed interval", pg.id)),
        );
    }
    // Checked again under the object's lock: a write of a fenced instance that was admitted
    // before the fence arrived but reached the lock after a write of the taker (which waited
    // for the fence's epoch) is not applied after it.
    if let Some(r) = blocklisted(s, op.instance) {
        return fail(op.tid, epoch, r);
    }
    // A peering again within the interval (it holds this lock) may have activated the PG
    // anew with a copy lacking the object since it was found ready: the client resends, and
    // the op recovers it first.
    if !pg.missing().ready(&op.object, true) {
        return fail(
            op.tid,
            epoch,
            OpResult::Failed(format!(
                "pg {} activated again with a copy lacking {}",
                pg.id, op.object
            )),
        );
    }
    if let Some(reqid) = op.reqid {
        if let Some(done) = inner.log.version_of_request(&reqid) {
            // Its first attempt, on this object, is not in flight (`lock_for_write` waited);
            // earlier writes of other objects may be, and `complete_to` passes the first
            // attempt once they end.
            drop(inner);
            pg.writes.ended_through(done).await;
            return answer_resend(s, pg, &iv, &op, reqid, done);
        }
    }
    // A conditional write, checked under the PG's lock: no write to the object can come
    // between the check and this one's commit.
    if let Some(expected) = op.assert_version {
        let current = recorded_version(&s.store, &pg.coll, &op.object).await;
        if current != expected {
            return fail(op.tid, epoch, OpResult::VersionMismatch { current });
        }
    }
    if let Err(r) = check_full(s, &iv, data.len() as u64, op.full_force) {
        return fail(op.tid, epoch, r);
    }
    let coll = pg.coll.as_str();
    let obj = op.object.as_str();
    let size = if inner.created && needs_object_state(&op.kind) {
        match s.store.stat(coll, obj).await {
            Ok(st) => Some(st.size_bytes),
            Err(StoreError::NoSuchObject { .. }) => None,
            Err(e) => return fail(op.tid, epoch, store_result(e)),
        }
    } else {
        None
    };
    if let OpKind::SetXattr { name } = &op.kind {
        if inner.created {
            if let Err(r) = check_xattr_room(s, coll, obj, name, data.len()).await {
                return fail(op.tid, epoch, r);
            }
        }
    }
    let kind = match applied_kind(&op.kind, size) {
        Ok(kind) => kind,
        Err(r) => return fail(op.tid, epoch, r),
    };
    if let Err(r) = crate::txns::check_object_size(obj, &kind, data.len(), s.cfg.max_object_bytes) {
        return fail(op.tid, epoch, r);
    }
    let work = client_work(client, obj, &kind, data.len() as u64, op.background);
    // Released by the scheduler before its version is assigned: the PG's writes reach the
    // store and the replicas in version order whatever order the policy picks.
    let grant = match s.sched.grant(pg.id, work).await {
        Ok(g) => g,
        Err(e) => return fail(op.tid, epoch, OpResult::Failed(e.to_string())),
    };
    let granted = t0.elapsed();
    let PgInner {
        log,
        created,
        last_epoch_started,
        ..
    } = &mut *inner;
    let reservation = pg.writes.reserve(log, created);
    let to_resolve = WriteToResolve {
        pg: pg.id,
        coll,
        interval_epoch: iv.epoch,
        map_epoch: epoch,
        op: &op,
        kind,
        data: &data,
        block_crcs: block_crcs.as_ref(),
    };
    let Resolved {
        version,
        entry,
        txn,
        rep,
        creates,
    } = match resolve(to_resolve, log, *created, *last_epoch_started) {
        Ok(r) => r,
        Err(r) => return fail(op.tid, epoch, r),
    };
    tracing::trace!(osd = s.id, pg = %pg.id, object = obj, %version, tid = op.tid, crc = op.data_crc, "write versioned");
    if let Err(e) = log.append(entry) {
        return fail(op.tid, epoch, OpResult::Failed(e.to_string()));
    }
    let flight = pg.writes.submitted(reservation, version, obj, creates);
    if flight.pipelined() {
        s.metrics.record_pipelined_write();
    }
    // Owed to the copies a background fill is filling: forwarded, or noted for its next push
    // (settled, or dropped as refused, before the flight ends: declared after it).
    let mut routed = pg.fill_writes.route(obj);
    *created = true;
    // Queued in the store and sent to the replicas under the lock (version order), awaited
    // after it.
    let mut local = std::pin::pin!(s.store.queue_transaction_owned(txn));
    let local_now = match poll_once(local.as_mut()).await {
        Some(Err(e)) if !e.is_fatal() => {
            // Refused before it was queued: nothing of it is anywhere.
            flight.withdraw(log, created);
            return fail(op.tid, epoch, store_result(e));
        }
        other => other,
    };
    let forwards = routed.forwards();
    let to_forward = (!forwards.is_empty()).then(|| (rep.clone(), data.clone()));
    let mut remote = std::pin::pin!(replicate(s, pg, &iv, rep, data));
    let remote_now = poll_once(remote.as_mut()).await;
    drop(inner);
    let l = match local_now {
        Some(l) => l,
        None => local.await,
    };
    drop(grant);
    let committed_here = t0.elapsed();
    let r = match remote_now {
        Some(r) => r,
        None => remote.await,
    };
    // Only a write every acting copy committed goes to the copies being filled: one a later
    // interval could roll back would stay there, where no log names it. (Unsent, the object
    // is pushed again.)
    if let Some((rep, data)) = to_forward.filter(|_| l.is_ok() && r.is_complete()) {
        for (target, outcome) in crate::forward::send(s, pg, &iv, &rep, data, forwards).await {
            if outcome == Forwarded::Applied {
                s.metrics.record_fill_write_forwarded();
            }
            routed.settle(target, outcome);
        }
    }
    // Settled before the object's next write can start (it waits for this one's end).
    drop(routed);
    if t0.elapsed() >= SLOW_OP_TRACE {
        let ms = crate::convert::millis;
        tracing::debug!(
            osd = s.id,
            pg = %pg.id,
            %version,
            locked_ms = ms(locked),
            granted_ms = ms(granted),
            committed_here_ms = ms(committed_here),
            replicated_ms = ms(t0.elapsed()),
            "slow write: cumulative time after its object's turn, the scheduler's grant, the local commit and the replicas' commits"
        );
    }
    let local_ok = l.is_ok();
    let outcome = LocalOutcome::of(&l);
    let local_fatal = outcome == LocalOutcome::Unknown;
    if flight.finish(outcome, r.is_complete()) == AfterFinish::StopTheOsd {
        s.fail_stop(format!(
            "pg {}: write {version} failed locally after a later write was queued",
            pg.id
        ));
    }
    // The write reached some copies and not others: the next write would reuse this version
    // here, or skip it there. Peering again reconciles the copies first. (A failed store
    // serves nothing more; a copy that did not answer is left to the map's next change, and
    // if it did not commit, it refuses the next write, which peers then.)
    if !local_fatal && ((local_ok && r.refused.is_some()) || (!local_ok && r.applied > 0)) {
        crate::peering::repeer(s, pg, iv.epoch, "a write committed on some copies only");
    }
    let result = match (l, r.result()) {
        (Ok(()), Ok(())) => OpResult::Ok,
        (Err(e), _) => store_result(e),
        (_, Err(r)) => r,
    };
    (
        ReplyHeader {
            version: pack(version),
            ..ReplyHeader::bare(op.tid, epoch, result)
        },
        Bytes::new(),
    )
}

/// Refuses a setxattr of `name` (`value_len` bytes) that would take `obj`'s xattrs, names and
/// values together, past `max_xattr_bytes_per_object` (the value replaces one of the same name).
async fn check_xattr_room(
    s: &Shared,
    coll: &str,
    obj: &str,
    name: &str,
    value_len: usize,
) -> Result<(), OpResult> {
    let current = match s.store.getattrs(coll, obj).await {
        Ok(attrs) => attrs,
        Err(StoreError::NoSuchObject { .. } | StoreError::NoSuchCollection { .. }) => Vec::new(),
        Err(e) => return Err(store_result(e)),
    };
    let others: usize = current
        .iter()
        .filter(|(k, _)| k != name)
        .map(|(k, v)| k.len() + v.len())
        .sum();
    let total = (others + name.len() + value_len) as u64;
    let limit = s.cfg.max_xattr_bytes_per_object;
    if total > limit {
        return Err(OpResult::Invalid(format!(
            "object {obj}'s xattrs would be {total} bytes, past the limit of {limit} (max_xattr_bytes_per_object)"
        )));
    }
    Ok(())
}

/// Answers a resent write whose first attempt this PG logged at `done`, without applying it
/// again: Ok with that version once every copy holds it; otherwise (a copy did not answer the
/// first attempt) the PG peers again, which brings every copy to the log's head, and the
/// client's next resend is answered Ok.
fn answer_resend(
    s: &Arc<Shared>,
    pg: &Arc<Pg>,
    iv: &Interval,
    op: &OpHeader,
    reqid: ReqId,
    done: Eversion,
) -> Answer {
    let epoch = s.epoch();
    if done <= pg.writes.complete_to() {
        s.metrics.record_dup_write();
        tracing::debug!(pg = %pg.id, %reqid, version = %done, "resent write answered from the log");
        return (
            ReplyHeader {
                version: pack(done),
                ..ReplyHeader::bare(op.tid, epoch, OpResult::Ok)
            },
            Bytes::new(),
        );
    }
    crate::peering::repeer(
        s,
        pg,
        iv.epoch,
        "a resent write's first attempt is not on every copy",
    );
    fail(
        op.tid,
        epoch,
        OpResult::Failed(format!(
            "pg {}: the first attempt of request {reqid} is not on every copy yet; peering",
            pg.id
        )),
    )
}

/// Share of the room above the full ratio that only forced writes ([`OpHeader::full_force`])
/// may use: 0.4 puts the failsafe ratio at 0.97 for the default full ratio 0.95, Ceph's
/// `osd_failsafe_full_ratio`, and above any full ratio an operator sets.
const FAILSAFE_SHARE_OF_ROOM: f64 = 0.4;

/// The share of its store past which an OSD refuses even forced writes.
pub(crate) fn failsafe_ratio(full_ratio: f64) -> f64 {
    full_ratio + (1.0 - full_ratio) * FAILSAFE_SHARE_OF_ROOM
}

/// This OSD's store: bytes used, capacity, and whether `bytes` more would fill it past
/// `ratio` of its capacity (never with ratio 1.0).
fn fullness(s: &Shared, bytes: u64, ratio: f64) -> (u64, u64, bool) {
    let capacity = s.store.capacity_bytes();
    let used = capacity.saturating_sub(s.store.free_bytes_hint());
    let limit = crate::convert::sat_u64(capacity as f64 * ratio);
    let past = ratio < 1.0 && used.saturating_add(bytes) > limit;
    (used, capacity, past)
}

/// Why `bytes` more would fill this OSD's store past `ratio` (named `what` in the answer), or
/// None if they fit.
fn past_ratio_with(s: &Shared, bytes: u64, ratio: f64, what: &str) -> Option<String> {
    let (used, capacity, past) = fullness(s, bytes, ratio);
    past.then(|| {
        format!("{used} of {capacity} bytes used, {bytes} more would pass the {what} {ratio}")
    })
}

/// Why `bytes` more would fill this OSD's store past its full ratio, or None if they fit.
fn past_full_ratio_with(s: &Shared, bytes: u64) -> Option<String> {
    past_ratio_with(s, bytes, s.cfg.full_ratio, "full ratio")
}

/// Why a recovery push of `bytes` would fill this OSD's store past its backfillfull ratio, or
/// None if it fits: the stricter ratio keeps room for client writes once the copy serves.
pub(crate) fn past_backfillfull_ratio_with(s: &Shared, bytes: u64) -> Option<String> {
    past_ratio_with(s, bytes, s.cfg.backfillfull_ratio, "backfillfull ratio")
}

/// Whether this OSD's store is past its nearfull and its full ratio now (what its beacons tell
/// the monitor).
pub fn past_ratios(s: &Shared) -> (bool, bool) {
    let (used, capacity, full) = fullness(s, 0, s.cfg.full_ratio);
    let nearfull = used as f64 > capacity as f64 * s.cfg.nearfull_ratio;
    (nearfull || full, full)
}

/// Refuses a client write of `bytes` (before it is given a version or reaches any copy, so the
/// copies cannot disagree over it) when it would fill this OSD's store past its full ratio, or
/// when the map flags another OSD holding a copy full (one left out of the interval holds
/// none). A forced write (`forced`, a metadata server's) is refused only past this OSD's
/// failsafe ratio: the map's full flags do not stop it.
fn check_full(s: &Shared, iv: &Interval, bytes: u64, forced: bool) -> Result<(), OpResult> {
    if bytes == 0 {
        return Ok(());
    }
    if forced {
        let failsafe = failsafe_ratio(s.cfg.full_ratio);
        return match past_ratio_with(s, bytes, failsafe, "failsafe ratio") {
            Some(why) => Err(OpResult::NoSpace(format!("osd.{}: {why}", s.id))),
            None => Ok(()),
        };
    }
    if let Some(why) = past_full_ratio_with(s, bytes) {
        return Err(OpResult::NoSpace(format!("osd.{}: {why}", s.id)));
    }
    let map = s.map.borrow();
    let full = map.as_ref().and_then(|m| {
        iv.copies()
            .find(|o| *o != s.id && m.osds.get(o).is_some_and(|e| e.full))
    });
    match full {
        Some(o) => Err(OpResult::NoSpace(format!(
            "osd.{o} of pg's acting set is full (past its full ratio)"
        ))),
        None => Ok(()),
    }
}

/// Refuses a write that could add objects or bytes to a pool the map marks past its quota
/// (removals still go through: they are how the pool gets back under it, and so do forced
/// writes, a metadata server's journal of those removals). When the client addressed the op
/// with a newer map than this OSD's, which may have lifted the quota, the OSD waits for that
/// map (up to [`QUOTA_MAP_WAIT`]) before it refuses.
async fn check_quota(s: &Shared, pool: i64, op: &OpHeader) -> Result<(), OpResult> {
    let full = || s.map.borrow().as_ref().is_some_and(|m| m.pool_full(pool));
    if op.kind.frees_only() || op.full_force || !full() {
        return Ok(());
    }
    let op_epoch = op.epoch;
    let mut maps = s.map.clone();
    let deadline = Instant::now() + QUOTA_MAP_WAIT;
    loop {
        let (refusal, epoch) = {
            let map = maps.borrow_and_update();
            match map.as_ref() {
                Some(m) if m.pool_full(pool) => {
                    (Some(cairn_clustermap::quota::refusal(m, pool)), m.epoch)
                }
                _ => (None, 0),
            }
        };
        let Some(why) = refusal else { return Ok(()) };
        let left = deadline.saturating_duration_since(Instant::now());
        if epoch >= op_epoch || left.is_zero() {
            return Err(OpResult::QuotaExceeded(why));
        }
        if !matches!(tokio::time::timeout(left, maps.changed()).await, Ok(Ok(()))) {
            return Err(OpResult::QuotaExceeded(why));
        }
    }
}

/// Waits, up to [`OP_MAP_WAIT`], until this OSD has map `want` (an op's epoch); a retryable
/// failure past that.
async fn wait_for_epoch(s: &Shared, want: u64) -> Result<(), OpResult> {
    let mut maps = s.map.clone();
    let reached = tokio::time::timeout(OP_MAP_WAIT, async {
        loop {
            if maps
                .borrow_and_update()
                .as_ref()
                .is_some_and(|m| m.epoch >= want)
            {
                return true;
            }
            if maps.changed().await.is_err() {
                return false;
            }
        }
    })
    .await;
    match reached {
        Ok(true) => Ok(()),
        _ => Err(OpResult::Failed(format!(
            "this osd is behind the op's map epoch {want} (at {})",
            s.epoch()
        ))),
    }
}

/// Longest an op waits for the newer map its client addressed it with.
const OP_MAP_WAIT: Duration = Duration::from_secs(5);

/// The refusal of an op from client instance `instance` while the OSD's map fences it.
fn blocklisted(s: &Shared, instance: u64) -> Option<OpResult> {
    let now_unix_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let map = s.map.borrow();
    let map = map.as_ref()?;
    map.is_blocklisted(instance, now_unix_s).then(|| {
        OpResult::Blocklisted(format!(
            "client instance {instance:016x} is blocklisted in map epoch {}",
            map.epoch
        ))
    })
}

/// Longest a write to a full pool waits for the newer map its client addressed it with.
const QUOTA_MAP_WAIT: Duration = Duration::from_secs(2);

/// How the other acting OSDs answered a replica write.
#[derive(Debug, Default)]
struct Replicated {
    /// Copies that committed it.
    applied: usize,
    /// The first error a copy answered with: it did not commit the write.
    refused: Option<OpResult>,
    /// The first copy that did not answer in time (or the interval changed): its outcome is
    /// unknown until the PG peers.
    unanswered: Option<OpResult>,
}

impl Replicated {
    /// Whether every other copy committed the write.
    fn is_complete(&self) -> bool {
        self.refused.is_none() && self.unanswered.is_none()
    }

    /// The write's outcome on the other copies: Ok only when every one committed it.
    fn result(self) -> Result<(), OpResult> {
        match self.refused.or(self.unanswered) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

/// Sends the write to every other acting OSD and waits for all their durable acknowledgements;
/// gives up early when the PG's interval changes (the new interval's peering reconciles).
async fn replicate(
    s: &Arc<Shared>,
    pg: &Arc<Pg>,
    iv: &Interval,
    rep: RepOpHeader,
    data: Bytes,
) -> Replicated {
    let mut peers = Vec::new();
    for osd in iv.copies().skip(1) {
        match s.addr_of(osd) {
            Some(addr) => peers.push((osd, addr)),
            None => {
                return Replicated {
                    unanswered: Some(OpResult::Failed(format!(
                        "osd.{osd} has no address in the map"
                    ))),
                    ..Replicated::default()
                }
            }
        }
    }
    let mut calls = Vec::new();
    for (osd, addr) in peers {
        // Err((answered, why)): `answered` when the copy itself refused the write.
        let call = send_repop(s, osd, addr, rep.clone(), data.clone());
        calls.push(s.spawn(async move {
            let failed = |e: String| OpResult::Failed(format!("osd.{osd}: {e}"));
            match call.await.map_err(|e| (false, failed(e)))? {
                OpResult::Ok => Ok(()),
                OpResult::NoSpace(why) => {
                    Err((true, OpResult::NoSpace(format!("osd.{osd}: {why}"))))
                }
                other => Err((true, failed(format!("{other:?}")))),
            }
        }));
    }
    let all = async {
        let mut out = Replicated::default();
        for c in calls {
            match c.await {
                Ok(Some(Ok(()))) => out.applied += 1,
                Ok(Some(Err((true, e)))) => {
                    out.refused.get_or_insert(e);
                }
                Ok(Some(Err((false, e)))) => {
                    out.unanswered.get_or_insert(e);
                }
                Ok(None) => {
                    out.unanswered
                        .get_or_insert(OpResult::Failed("the osd is stopping".into()));
                }
                Err(e) => {
                    out.unanswered
                        .get_or_insert(OpResult::Failed(e.to_string()));
                }
            }
        }
        out
    };
    tokio::select! {
        r = all => r,
        _ = pg.wait_interval_change(iv.epoch) => Replicated {
            unanswered: Some(OpResult::Failed(format!("pg {} changed interval", pg.id))),
            ..Replicated::default()
        },
    }
}

#[cfg(test)]
mod tests {
    use super::within_bytes;

    fn entries(sizes: &[usize]) -> Vec<(Vec<u8>, Vec<u8>)> {
        sizes.iter().map(|&n| (vec![b'k'], vec![0u8; n])).collect()
    }

    #[test]
    fn an_omap_reply_stops_at_its_byte_limit_but_carries_at_least_one_entry() {
        assert_eq!(within_bytes(&entries(&[9, 9, 9]), 30), 3);
        assert_eq!(within_bytes(&entries(&[9, 9, 9]), 29), 2);
        assert_eq!(within_bytes(&entries(&[100, 1]), 10), 1);
        assert_eq!(within_bytes(&[], 10), 0);
    }
}
