//! Stray PG copies: copies this OSD holds of PGs whose acting and up sets no longer include
//! it (the PG was remapped: the OSD was marked out, or came back after the PG moved). Peering
//! recovers from them while they are needed; once the PG's primary reports the PG active+clean
//! without this OSD, in the same map, the copy is deleted so its space returns (Ceph's stray
//! purge). PGs of removed pools are deleted at once. Deletion runs as best-effort work through
//! the scheduler, in batches, under the PG's lock.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use cairn_pg::{Eversion, PgLog};
use cairn_proto::peer::{PeerAnswer, PeerBody};
use cairn_qos::OpKind as Io;
use cairn_store::{Op, Transaction};

use crate::ask::ask;
use crate::error::OsdError;
use crate::pgmeta::META_OBJECT;
use crate::pgs::Pg;
use crate::shared::Shared;
use crate::work::{Purpose, Work};

/// Objects removed per store transaction while deleting a PG.
const DELETE_BATCH: usize = 256;
/// Scheduler cost of one removal (metadata only).
const REMOVE_COST: u64 = 4096;

/// Why a copy held here may be deleted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Deletable {
    /// Its pool is gone from the map.
    PoolRemoved,
    /// The primary reported the PG active+clean without this OSD in the map of this epoch.
    CleanElsewhere(u64),
}

/// Looks for deletable copies every `stray_check_ms`, for the daemon's life.
pub async fn run(s: Arc<Shared>) {
    let every = Duration::from_millis(s.cfg.stray_check_ms.max(100));
    loop {
        tokio::time::sleep(every).await;
        sweep(&s).await;
    }
}

/// One pass over the PGs this OSD knows.
async fn sweep(s: &Arc<Shared>) {
    for pg in s.pgs.all() {
        let Some(why) = deletable(s, &pg).await else {
            continue;
        };
        match delete(s, &pg, why).await {
            Ok(Some(objects)) => {
                s.metrics.record_stray_deleted(objects);
                tracing::info!(osd = s.id, pg = %pg.id, objects, reason = ?why, "stray pg copy deleted");
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(osd = s.id, pg = %pg.id, error = %e, "deleting a stray pg copy failed")
            }
        }
    }
}

/// Whether `pg`'s copy here may be deleted, and why.
async fn deletable(s: &Shared, pg: &Pg) -> Option<Deletable> {
    let epoch = s.epoch();
    if epoch == 0 {
        return None;
    }
    let pool_gone = s
        .map
        .borrow()
        .as_ref()
        .is_some_and(|m| !m.placement.pools.contains_key(&pg.id.pool));
    if pool_gone {
        return Some(Deletable::PoolRemoved);
    }
    // The acting set the map handler last gave the PG (no placement computed here per PG and
    // per pass; `delete` checks the current map again before it removes anything).
    let iv = pg.interval();
    if iv.acting.contains(&s.id) || iv.up.contains(&s.id) {
        return None;
    }
    let primary = *iv.acting.first()?;
    let last_epoch_started = pg.lock().await.last_epoch_started;
    let body = PeerBody::IsClean { last_epoch_started };
    match ask(s, pg, epoch, primary, body, Bytes::new()).await {
        Ok((PeerAnswer::Clean { clean: true }, _)) => Some(Deletable::CleanElsewhere(epoch)),
        _ => None,
    }
}

/// Deletes the copy (objects, log, collection) and forgets the PG, unless the map or a peer's
/// request says it is needed again; the number of objects deleted, or None when it was kept.
async fn delete(s: &Arc<Shared>, pg: &Arc<Pg>, why: Deletable) -> Result<Option<u64>, OsdError> {
    let mut inner = pg.lock().await;
    // Checked under the lock, which every peering, recovery and replica request takes: none
    // of them can be half done here, and any sent in a newer map has been noted.
    let still = match why {
        Deletable::PoolRemoved => s.is_member(pg.id).is_none(),
        Deletable::CleanElsewhere(epoch) => {
            s.epoch() == epoch
                && pg.newest_request_epoch() <= epoch
                && s.is_member(pg.id) == Some(false)
        }
    };
    if !still {
        return Ok(None);
    }
    let coll = pg.coll.clone();
    let mut objects = 0u64;
    if inner.created {
        loop {
            let names = s.store.list_objects(&coll, None, DELETE_BATCH).await?;
            if names.is_empty() {
                break;
            }
            let mut txn = Transaction::new();
            for name in &names {
                txn.remove(&coll, name);
            }
            objects += names.iter().filter(|n| *n != META_OBJECT).count() as u64;
            let s2 = s.clone();
            let cost = REMOVE_COST * names.len() as u64;
            let work = Work::new(Purpose::PgDelete, u64::from(s.id as u32), Io::Other).sized(cost);
            s.sched
                .run(pg.id, work, async move {
                    s2.store.queue_transaction_owned(txn).await
                })
                .await??;
        }
        let mut txn = Transaction::new();
        txn.push(Op::RemoveCollection { coll: coll.clone() });
        s.store.queue_transaction_owned(txn).await?;
    }
    inner.created = false;
    inner.log = PgLog::new(s.cfg.max_log_entries);
    inner.last_epoch_started = 0;
    pg.writes.reset(Eversion::default(), Eversion::default());
    drop(inner);
    match why {
        Deletable::PoolRemoved => s.pgs.remove(pg),
        Deletable::CleanElsewhere(_) => s.pgs.remove_stray(pg, s.id),
    };
    Ok(Some(objects))
}
