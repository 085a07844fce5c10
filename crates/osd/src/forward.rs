//! Writes forwarded to the copies a PG's primary is filling in the background (outside its
//! temporary acting set): once every acting copy committed a write of an object such a copy
//! is current for, the primary sends it there too ([`send`]), so the copy stays current and the fill's
//! hand-back has nothing left to push; the copy applies it to the object alone ([`apply`]),
//! since its log comes with the fill. Which writes go where is [`crate::fillwrites`]'s call.

use std::sync::Arc;

use bytes::Bytes;
use cairn_clustermap::PgId;
use cairn_proto::{OpResult, RepOpHeader, ReplyHeader};
use cairn_store::Transaction;

use crate::fillwrites::{Forward, Forwarded};
use crate::inflight::poll_once;
use crate::payload::Payload;
use crate::pgmeta::{pack, put_info};
use crate::pgs::{Interval, Pg};
use crate::repop::send_repop;
use crate::shared::Shared;
use crate::txns::build_write;
use crate::work::Work;

/// Sends the write `rep` (with `data`), committed on every acting copy, to each copy of
/// `forwards`, as its fill attempt's, and
/// says what became of each: applied, refused (answered with an error, or never sent) or
/// unknown (no answer in time, or the PG's interval changed meanwhile).
pub async fn send(
    s: &Arc<Shared>,
    pg: &Pg,
    iv: &Interval,
    rep: &RepOpHeader,
    data: Bytes,
    forwards: Vec<Forward>,
) -> Vec<(i32, Forwarded)> {
    let mut calls = Vec::new();
    for f in forwards {
        let Some(addr) = s.addr_of(f.target) else {
            calls.push((f.target, None));
            continue;
        };
        let h = RepOpHeader {
            fill: f.attempt,
            ..rep.clone()
        };
        let call = send_repop(s, f.target, addr, h, data.clone());
        let call = s.spawn(async move {
            match call.await {
                Ok(OpResult::Ok) => Forwarded::Applied,
                Ok(_) => Forwarded::Refused,
                Err(_) => Forwarded::Unknown,
            }
        });
        calls.push((f.target, Some(call)));
    }
    let targets: Vec<i32> = calls.iter().map(|(t, _)| *t).collect();
    let all = async {
        let mut out = Vec::new();
        for (target, call) in calls {
            let outcome = match call {
                None => Forwarded::Refused,
                Some(c) => match c.await {
                    Ok(Some(o)) => o,
                    _ => Forwarded::Unknown,
                },
            };
            out.push((target, outcome));
        }
        out
    };
    tokio::select! {
        out = all => out,
        _ = pg.wait_interval_change(iv.epoch) => {
            targets.into_iter().map(|t| (t, Forwarded::Unknown)).collect()
        }
    }
}

/// Applies a write forwarded by the primary filling this copy of its PG: to the object alone,
/// unless this copy serves the PG in that interval, a later interval's peering has read it, or
/// a later fill attempt reached it (each answered with an error: the primary copies the
/// object again). Answers Ok once it is committed.
pub async fn apply(s: &Arc<Shared>, rep: RepOpHeader, data: Payload, work: Work) -> ReplyHeader {
    let epoch = s.epoch();
    let bad = |r| ReplyHeader::bare(rep.tid, epoch, r);
    let refuse = |why: String| bad(OpResult::Failed(why));
    let pgid = PgId {
        pool: rep.pool,
        seed: rep.pg_seed,
    };
    let pg = s.pgs.get_or_create(pgid, s.cfg.max_log_entries);
    pg.note_request_epoch(rep.epoch);
    let grant = match s.sched.grant(pgid, work).await {
        Ok(g) => g,
        Err(e) => return refuse(e.to_string()),
    };
    let mut inner = pg.lock().await;
    let peered_in = pg.peered_in();
    if rep.epoch < peered_in {
        return refuse(format!(
            "forwarded write of interval {} but this copy of {pgid} was read by the peering of interval {peered_in}",
            rep.epoch
        ));
    }
    let iv = pg.interval();
    if iv.epoch == rep.epoch && iv.acting.contains(&s.id) {
        return refuse(format!(
            "{pgid} is served here: not filled in the background"
        ));
    }
    if !pg.admit_fill(rep.epoch, rep.fill) {
        return refuse(format!(
            "forwarded write of fill attempt {} of {pgid}: a later attempt reached this copy",
            rep.fill
        ));
    }
    let coll = pg.coll.clone();
    let mut txn = Transaction::new();
    if !inner.created {
        txn.create_collection(&coll);
        if let Err(e) = put_info(&mut txn, &coll, inner.log.tail(), inner.last_epoch_started) {
            return refuse(e.to_string());
        }
    }
    let version = pack(rep.entry.version);
    if let Err(r) = build_write(
        &mut txn,
        &coll,
        &rep.object,
        &rep.kind,
        &data.bytes,
        data.block_crcs.as_ref(),
        version,
    ) {
        return bad(r);
    }
    // Queued under the lock (after whatever was admitted before it), committed after it, so
    // that forwards to one PG commit together.
    let creates = !inner.created;
    inner.created = true;
    let mut queued = std::pin::pin!(s.store.queue_transaction_owned(txn));
    let now = poll_once(queued.as_mut()).await;
    drop(inner);
    let committed = match now {
        Some(c) => c,
        None => queued.await,
    };
    drop(grant);
    match committed {
        Ok(()) => ReplyHeader {
            version,
            ..bad(OpResult::Ok)
        },
        Err(e) => {
            if creates {
                // The collection may not be there: the next write here creates it.
                pg.lock().await.created = false;
            }
            refuse(e.to_string())
        }
    }
}
