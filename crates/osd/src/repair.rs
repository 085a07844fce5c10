//! Read repair: a client read that finds this primary's copy of an object damaged (a data
//! block failing its crc32c, so the store returned no bytes) replaces the copy with a good one
//! pulled from another copy of the acting set, and the read is served again — what Ceph's
//! primary does for a replicated pool (the object marked missing and recovered before the op
//! is retried), so a client gets the data rather than an error while a good copy exists.
//!
//! Runs under the PG's lock: no write changes the object on any copy while it is pulled, and
//! the source's copy must be at the version this copy records (its version attribute lives in
//! the metadata, not in the damaged blocks). A source whose copy is damaged too refuses the
//! pull (its store returns no bad bytes), so a damaged copy never replaces anything. Every
//! store step is a request through the scheduler (invariant 2), in the client class since the
//! client's read waits on it; it must never be called from inside a scheduled request (it
//! waits for the scheduler's slots itself).

use std::sync::Arc;

use cairn_proto::peer::Urgency;
use cairn_store::StoreError;

use crate::pgmeta::unpack;
use crate::pgs::Pg;
use crate::shared::Shared;
use crate::transfer::{pull_from_any, Recovering};

/// What a read repair came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Repair {
    /// The copy here was replaced by `from`'s.
    Repaired {
        /// The OSD whose copy was pulled.
        from: i32,
    },
    /// The copy here reads whole (a read before this one repaired it) or is gone.
    Intact,
    /// The PG left the interval the read was served in; the client resends.
    Retry(String),
    /// No other copy could replace the damaged one (all damaged, at another version, or
    /// unreachable): why, per copy tried.
    Unrepairable(String),
}

/// Repairs `obj` of `pg` on this OSD, its primary in the interval activated at `active`, after
/// a read found `damage` (the store's checksum error).
pub async fn repair_object(
    s: &Arc<Shared>,
    pg: &Arc<Pg>,
    active: u64,
    obj: &str,
    damage: &StoreError,
) -> Repair {
    let (mut inner, fenced) = pg.lock_unfenced(Some(obj)).await;
    if fenced {
        s.metrics.record_scrub_fenced();
    }
    let iv = pg.interval();
    if pg.active_epoch() != Some(active) || iv.acting.first() != Some(&s.id) {
        return Repair::Retry(format!("pg {} changed interval", pg.id));
    }
    let r = Recovering {
        s,
        pg,
        epoch: iv.epoch,
        urgency: Urgency::Blocking,
        fill: 0,
    };
    match reads_whole(&r, obj).await {
        Ok(true) => return Repair::Intact,
        Ok(false) => {}
        Err(e) => return Repair::Retry(format!("reading {obj} again: {e}")),
    }
    let want = unpack(crate::objects::recorded_version(&s.store, &pg.coll, obj).await);
    let sources: Vec<i32> = iv.copies().filter(|&o| o != s.id).collect();
    let refusals = match pull_from_any(&r, &sources, obj, &mut inner.created, want).await {
        Ok(from) => {
            s.metrics.record_read_repair(true);
            tracing::warn!(osd = s.id, pg = %pg.id, object = obj, from, %damage, "damaged copy replaced by a good one");
            return Repair::Repaired { from };
        }
        Err(refusals) => refusals,
    };
    let mut refused: Vec<String> = refusals
        .iter()
        .map(|(from, e)| format!("osd.{from}: {e}"))
        .collect();
    s.metrics.record_read_repair(false);
    if refused.is_empty() {
        refused.push("no other copy in the acting set".into());
    }
    let why = format!(
        "{obj} on osd.{}: {damage}; no other copy replaced it ({})",
        s.id,
        refused.join("; ")
    );
    tracing::error!(osd = s.id, pg = %pg.id, "unrepairable read: {why}");
    Repair::Unrepairable(why)
}

/// Whether `obj` reads whole here now (true when it no longer exists): every block passes
/// its checksum.
async fn reads_whole(r: &Recovering<'_>, obj: &str) -> Result<bool, crate::OsdError> {
    let (s2, coll, name) = (r.s.clone(), r.pg.coll.clone(), obj.to_string());
    r.run(r.work(cairn_qos::OpKind::Read).on(obj, 0, 0), async move {
        let size = match s2.store.stat(&coll, &name).await {
            Ok(st) => st.size_bytes,
            Err(StoreError::NoSuchObject { .. } | StoreError::NoSuchCollection(_)) => {
                return Ok(true)
            }
            Err(e) => return Err(e.into()),
        };
        match s2.store.read(&coll, &name, 0, size).await {
            Ok(_) => Ok(true),
            Err(e) if e.is_damaged_copy() => Ok(false),
            Err(e) => Err(e.into()),
        }
    })
    .await
}
