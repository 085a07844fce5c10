//! A client write resolved without I/O: from the op, the PG log and what the store said of the
//! object, the kind it is applied as, its version and log entry, the transaction that commits
//! it here and the message every replica applies — or the refusal the client gets. The
//! primary (`primary::write`) does the I/O around it: the object's state before, the store's
//! commit and the replicas' after.

use bytes::Bytes;
use cairn_clustermap::PgId;
use cairn_pg::{Eversion, LogEntry, OpKind as LogOp, PgLog, PRIOR_UNKNOWN};
use cairn_proto::{OpHeader, OpKind, OpResult, RepOpHeader};
use cairn_store::{DataCrcs, Transaction};

use crate::pgmeta::{append_entry, pack};
use crate::txns::build_write;

/// The kind `kind` is applied as, given the object's size (`None`: it does not exist, or its
/// state was not needed): an append is a write at the object's end; a removal of an absent
/// object, or of an xattr or omap keys of one, is refused as not found.
pub fn applied_kind(kind: &OpKind, size: Option<u64>) -> Result<OpKind, OpResult> {
    match (kind, size) {
        (OpKind::Append, sz) => Ok(OpKind::Write {
            offset: sz.unwrap_or(0),
        }),
        (OpKind::Remove | OpKind::RemoveXattr { .. } | OpKind::OmapRemove, None) => {
            Err(OpResult::NotFound)
        }
        (k, _) => Ok(k.clone()),
    }
}

/// Whether resolving `kind` needs the object's current state (its size, or whether it
/// exists): appends and removals do; everything else is logged without reading it.
pub fn needs_object_state(kind: &OpKind) -> bool {
    matches!(
        kind,
        OpKind::Append | OpKind::Remove | OpKind::RemoveXattr { .. } | OpKind::OmapRemove
    )
}

/// A write to resolve.
pub struct WriteToResolve<'a> {
    /// The PG.
    pub pg: PgId,
    /// Its collection in the store.
    pub coll: &'a str,
    /// The epoch of the interval the PG serves in (replicas refuse other intervals' writes).
    pub interval_epoch: u64,
    /// The OSD's newest map epoch (the version's epoch, unless the log is ahead).
    pub map_epoch: u64,
    /// The client's op.
    pub op: &'a OpHeader,
    /// The kind it is applied as ([`applied_kind`]).
    pub kind: OpKind,
    /// Its data.
    pub data: &'a Bytes,
    /// The data's block checksums, when the messenger knows them.
    pub block_crcs: Option<&'a DataCrcs>,
}

/// A resolved write.
pub struct Resolved {
    /// Its version: the PG's next.
    pub version: Eversion,
    /// Its log entry.
    pub entry: LogEntry,
    /// The transaction that commits it on this OSD (with its log entry).
    pub txn: Transaction,
    /// What every replica applies.
    pub rep: RepOpHeader,
    /// Whether it creates the PG's collection here.
    pub creates: bool,
}

/// Resolves `w` against the PG `log` (with `created`: whether the collection exists, and
/// `last_epoch_started`). The log itself is not changed: the caller appends `entry` once the
/// transaction is built.
pub fn resolve(
    w: WriteToResolve<'_>,
    log: &PgLog,
    created: bool,
    last_epoch_started: u64,
) -> Result<Resolved, OpResult> {
    let obj = w.op.object.as_str();
    let prior = match log.newest_for(obj) {
        Some(e) if e.op == LogOp::Delete => Eversion::default(),
        Some(e) => e.version,
        None if !created => Eversion::default(),
        None => PRIOR_UNKNOWN,
    };
    let head = log.head();
    let version = Eversion::new(w.map_epoch.max(head.epoch), head.version + 1);
    assert!(version > head, "a write's version follows the log's head");
    let entry = LogEntry {
        version,
        object: w.op.object.clone(),
        op: match w.kind {
            OpKind::Remove => LogOp::Delete,
            _ => LogOp::Modify,
        },
        prior,
        reqid: w.op.reqid,
    };
    let mut txn = Transaction::new();
    if !created {
        txn.create_collection(w.coll);
    }
    build_write(
        &mut txn,
        w.coll,
        obj,
        &w.kind,
        w.data,
        w.block_crcs,
        pack(version),
    )?;
    append_entry(&mut txn, w.coll, log, &entry, last_epoch_started)
        .map_err(|e| OpResult::Failed(e.to_string()))?;
    let rep = RepOpHeader {
        tid: 0,
        epoch: w.interval_epoch,
        pool: w.pg.pool,
        pg_seed: w.pg.seed,
        object: w.op.object.clone(),
        kind: w.kind,
        entry: entry.clone(),
        data_crc: w.op.data_crc,
        background: w.op.background,
        client: w.op.client,
        fill: 0,
    };
    Ok(Resolved {
        version,
        entry,
        txn,
        rep,
        creates: !created,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_store::Op;

    fn op(object: &str, kind: OpKind) -> OpHeader {
        OpHeader {
            tid: 7,
            epoch: 3,
            pool: 1,
            pg_seed: 2,
            object: object.into(),
            kind,
            data_crc: 0xfeed,
            reqid: None,
            assert_version: None,
            background: false,
            client: 42,
            instance: 0,
            full_force: false,
        }
    }

    fn entry(version: Eversion, object: &str, op: LogOp) -> LogEntry {
        LogEntry {
            version,
            object: object.into(),
            op,
            prior: Eversion::default(),
            reqid: None,
        }
    }

    fn resolve_in(log: &PgLog, created: bool, op: &OpHeader, map_epoch: u64) -> Resolved {
        let data = Bytes::from_static(b"abcd");
        let kind = applied_kind(&op.kind, Some(0)).unwrap();
        let w = WriteToResolve {
            pg: PgId { pool: 1, seed: 2 },
            coll: "1.2",
            interval_epoch: 9,
            map_epoch,
            op,
            kind,
            data: &data,
            block_crcs: None,
        };
        match resolve(w, log, created, 9) {
            Ok(r) => r,
            Err(e) => panic!("{e:?}"),
        }
    }

    #[test]
    fn appends_write_at_the_end_and_removing_what_is_absent_is_refused() {
        assert_eq!(
            applied_kind(&OpKind::Append, Some(10)),
            Ok(OpKind::Write { offset: 10 })
        );
        assert_eq!(
            applied_kind(&OpKind::Append, None),
            Ok(OpKind::Write { offset: 0 })
        );
        assert_eq!(applied_kind(&OpKind::Remove, None), Err(OpResult::NotFound));
        assert_eq!(applied_kind(&OpKind::Remove, Some(0)), Ok(OpKind::Remove));
        assert_eq!(
            applied_kind(&OpKind::OmapRemove, None),
            Err(OpResult::NotFound)
        );
        assert_eq!(
            applied_kind(&OpKind::WriteFull, None),
            Ok(OpKind::WriteFull)
        );
        assert!(needs_object_state(&OpKind::Append));
        assert!(!needs_object_state(&OpKind::WriteFull));
    }

    #[test]
    fn a_write_takes_the_next_version_and_its_prior_from_the_log() {
        let mut log = PgLog::new(100);
        log.append(entry(Eversion::new(4, 1), "a", LogOp::Modify))
            .unwrap();
        log.append(entry(Eversion::new(4, 2), "gone", LogOp::Delete))
            .unwrap();
        // The map is behind the log's epoch: the version keeps the log's.
        let r = resolve_in(&log, true, &op("a", OpKind::WriteFull), 3);
        assert_eq!(r.version, Eversion::new(4, 3));
        assert_eq!(r.entry.prior, Eversion::new(4, 1));
        assert_eq!(r.entry.op, LogOp::Modify);
        assert!(!r.creates);
        assert!(!r
            .txn
            .ops
            .iter()
            .any(|o| matches!(o, Op::CreateCollection { .. })));
        // A newer map: its epoch.
        let r = resolve_in(&log, true, &op("gone", OpKind::WriteFull), 6);
        assert_eq!(r.version, Eversion::new(6, 3));
        assert_eq!(r.entry.prior, Eversion::default(), "deleted: no prior");
        // An object the log no longer names in a PG that holds objects: prior unknown.
        let r = resolve_in(&log, true, &op("old", OpKind::WriteFull), 6);
        assert_eq!(r.entry.prior, PRIOR_UNKNOWN);
        let r = resolve_in(&log, false, &op("new", OpKind::Remove), 6);
        assert_eq!(r.entry.prior, Eversion::default(), "a new PG has no past");
        assert_eq!(r.entry.op, LogOp::Delete);
        assert!(r.creates);
        assert!(matches!(
            r.txn.ops.first(),
            Some(Op::CreateCollection { .. })
        ));
    }

    #[test]
    fn the_replicas_get_the_same_entry_in_the_interval_of_the_pg() {
        let log = PgLog::new(100);
        let o = op("a", OpKind::Write { offset: 4 });
        let r = resolve_in(&log, true, &o, 5);
        assert_eq!(r.rep.entry, r.entry);
        assert_eq!(r.rep.epoch, 9, "the interval's epoch, not the map's");
        assert_eq!((r.rep.pool, r.rep.pg_seed), (1, 2));
        assert_eq!(r.rep.kind, OpKind::Write { offset: 4 });
        assert_eq!((r.rep.data_crc, r.rep.client), (0xfeed, 42));
        assert!(log.entries().next().is_none(), "the log is not changed");
    }
}
