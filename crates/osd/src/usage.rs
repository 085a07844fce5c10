//! The usage of the PGs this OSD leads: counted from the store (which keeps every
//! collection's objects and bytes), shown by `tell osd.N pg usage` and `cairn df`, and
//! reported to the monitor every `pg_usage_interval_ms` (Ceph's PG stats), which judges pool
//! quotas from it.

use std::sync::Arc;
use std::time::Duration;

use cairn_clustermap::quota::MAX_PG_USAGE_PER_REPORT;
use cairn_clustermap::PgUsage;
use cairn_proto::mon::Request;
use cairn_store::StoreError;

use crate::pgs::{Pg, PgStatus};
use crate::shared::Shared;

/// The active PGs this OSD is the acting primary of, in PG order. PGs still peering (or
/// unable to serve) are left out: their copy here may not be the authoritative one yet.
pub fn led_active(s: &Shared) -> Vec<Arc<Pg>> {
    let mut pgs: Vec<_> = s
        .pgs
        .all()
        .into_iter()
        .filter(|pg| {
            matches!(
                pg.status(),
                PgStatus::ActiveClean | PgStatus::ActiveDegraded | PgStatus::ActiveRemapped
            ) && s.is_acting_primary(pg.id) == Some(true)
        })
        .collect();
    pgs.sort_by_key(|pg| (pg.id.pool, pg.id.seed));
    pgs
}

/// Per PG of [`led_active`], its client objects and their logical bytes.
pub async fn led_pgs(s: &Shared) -> Result<Vec<PgUsage>, StoreError> {
    let pgs = led_active(s);
    let mut out = Vec::with_capacity(pgs.len());
    for pg in pgs {
        let (objects, bytes) = crate::objects::collection_usage(&s.store, &pg.coll).await?;
        out.push(PgUsage {
            pg: pg.id,
            objects,
            bytes,
        });
    }
    Ok(out)
}

/// Reports the usage of the PGs this OSD leads to the monitor every `every`, for the
/// daemon's life (in pieces of at most [`MAX_PG_USAGE_PER_REPORT`] PGs). Every report is
/// whole, so a restarted monitor knows every PG again after one period.
pub async fn report_forever(s: Arc<Shared>, every: Duration) {
    loop {
        tokio::time::sleep(every).await;
        let usage = match led_pgs(&s).await {
            Ok(u) => u,
            Err(e) => {
                tracing::warn!(osd = s.id, error = %e, "PG usage not counted");
                continue;
            }
        };
        for piece in usage.chunks(MAX_PG_USAGE_PER_REPORT) {
            let report = Request::PgUsage {
                id: s.id,
                usage: piece.to_vec(),
            };
            if let Err(e) = s.mon.op(report, 5_000).await {
                tracing::debug!(osd = s.id, error = %e, "PG usage report failed");
                break;
            }
        }
    }
}
