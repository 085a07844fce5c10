//! Where a PG's own state lives in the store: a hidden meta object in the PG's collection whose
//! omap holds the PG log (one entry per key, keyed by version so the order on disk is the log's
//! order), the requests of trimmed entries (dups, keyed the same way) and the PG info (tail,
//! last epoch started). Every change to it rides in the same store
//! transaction as the data change it describes, so the log and the data can never disagree.
//! This module only encodes and decodes; it never commits.

use cairn_pg::{Dup, Eversion, LogEntry, PgLog};
use cairn_store::{Store, Transaction};
use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::error::OsdError;

/// Name of the hidden meta object (clients cannot name objects with a NUL byte).
pub const META_OBJECT: &str = "\u{0}pgmeta";
/// Omap key of the PG info.
const INFO_KEY: &[u8] = b"info";
/// Omap key prefix of log entries.
const LOG_PREFIX: &[u8] = b"log.";
/// Omap key prefix of dups (requests of trimmed entries).
const DUP_PREFIX: &[u8] = b"dup.";
/// Format version of the persisted records (invariant 5).
const FORMAT: u32 = 1;

/// The persisted PG info.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PgInfo {
    /// Record format.
    pub format: u32,
    /// Version just before the oldest log entry.
    pub tail: Eversion,
    /// Last epoch in which this copy was activated.
    pub last_epoch_started: u64,
}

/// The collection name of a PG.
pub fn collection(pg: cairn_clustermap::PgId) -> String {
    format!("pg.{pg}")
}

fn versioned_key(prefix: &[u8], v: Eversion) -> Vec<u8> {
    let mut k = prefix.to_vec();
    k.extend_from_slice(&v.epoch.to_be_bytes());
    k.extend_from_slice(&v.version.to_be_bytes());
    k
}

fn log_key(v: Eversion) -> Vec<u8> {
    versioned_key(LOG_PREFIX, v)
}

fn dup_key(v: Eversion) -> Vec<u8> {
    versioned_key(DUP_PREFIX, v)
}

fn json<T: Serialize>(value: &T) -> Result<Vec<u8>, OsdError> {
    serde_json::to_vec(value).map_err(|e| OsdError::Protocol(e.to_string()))
}

/// Adds to `txn` the new log entry appended to `log` and what the append trims: the oldest
/// entry (its request kept as a dup, the oldest dup dropped past the limit) and the new tail.
pub fn append_entry(
    txn: &mut Transaction,
    coll: &str,
    log: &PgLog,
    entry: &LogEntry,
    last_epoch_started: u64,
) -> Result<(), OsdError> {
    txn.omap_set(coll, META_OBJECT, &log_key(entry.version), &json(entry)?);
    if let Some(t) = log.next_trimmed() {
        txn.omap_remove(coll, META_OBJECT, &log_key(t.version));
        if let Some(reqid) = t.reqid {
            let dup = Dup {
                reqid,
                version: t.version,
            };
            txn.omap_set(coll, META_OBJECT, &dup_key(t.version), &json(&dup)?);
        }
        if let Some(d) = log.next_dropped_dup() {
            txn.omap_remove(coll, META_OBJECT, &dup_key(d.version));
        }
        put_info(txn, coll, t.version, last_epoch_started)?;
    }
    Ok(())
}

/// Adds to `txn` the PG info record.
pub fn put_info(
    txn: &mut Transaction,
    coll: &str,
    tail: Eversion,
    last_epoch_started: u64,
) -> Result<(), OsdError> {
    let info = PgInfo {
        format: FORMAT,
        tail,
        last_epoch_started,
    };
    txn.omap_set(coll, META_OBJECT, INFO_KEY, &json(&info)?);
    Ok(())
}

/// Adds to `txn` what turns the persisted log `old` into `new` (entries removed and added).
pub fn replace_log(
    txn: &mut Transaction,
    coll: &str,
    old: &PgLog,
    new: &PgLog,
    last_epoch_started: u64,
) -> Result<(), OsdError> {
    for e in old.entries() {
        if !new.contains(e.version, &e.object) {
            txn.omap_remove(coll, META_OBJECT, &log_key(e.version));
        }
    }
    for e in new.entries() {
        if !old.contains(e.version, &e.object) {
            txn.omap_set(coll, META_OBJECT, &log_key(e.version), &json(e)?);
        }
    }
    let old_dups: BTreeSet<&Dup> = old.dups().collect();
    let new_dups: BTreeSet<&Dup> = new.dups().collect();
    for d in old_dups.difference(&new_dups) {
        txn.omap_remove(coll, META_OBJECT, &dup_key(d.version));
    }
    for d in new_dups.difference(&old_dups) {
        txn.omap_set(coll, META_OBJECT, &dup_key(d.version), &json(d)?);
    }
    put_info(txn, coll, new.tail(), last_epoch_started)
}

/// Loads a PG's log and info from its meta object (an empty log if it has none yet).
pub async fn load(store: &Store, coll: &str, max_entries: usize) -> Result<(PgLog, u64), OsdError> {
    if !store.exists(coll, META_OBJECT).await? {
        return Ok((PgLog::new(max_entries), 0));
    }
    let mut info = PgInfo::default();
    let mut entries = Vec::new();
    let mut dups = Vec::new();
    for (k, v) in store.omap_get(coll, META_OBJECT).await? {
        if k == INFO_KEY {
            info = serde_json::from_slice(&v)
                .map_err(|e| OsdError::Corrupt(format!("{coll} info: {e}")))?;
            if info.format != FORMAT {
                return Err(OsdError::Corrupt(format!(
                    "{coll} info format {} (expected {FORMAT})",
                    info.format
                )));
            }
        } else if k.starts_with(LOG_PREFIX) {
            let e: LogEntry = serde_json::from_slice(&v)
                .map_err(|e| OsdError::Corrupt(format!("{coll} log entry: {e}")))?;
            entries.push(e);
        } else if k.starts_with(DUP_PREFIX) {
            let d: Dup = serde_json::from_slice(&v)
                .map_err(|e| OsdError::Corrupt(format!("{coll} dup: {e}")))?;
            dups.push(d);
        }
    }
    entries.sort_by_key(|e| e.version);
    dups.sort_by_key(|d| d.version);
    let log = PgLog::from_parts(info.tail, dups, entries, max_entries)
        .map_err(|e| OsdError::Corrupt(format!("{coll} log: {e}")))?;
    Ok((log, info.last_epoch_started))
}

/// Packs a version into the u64 clients see and `_v` stores: `epoch << 32 | counter`.
pub fn pack(v: Eversion) -> u64 {
    (v.epoch << 32) | (v.version & 0xffff_ffff)
}

/// The inverse of [`pack`].
pub fn unpack(v: u64) -> Eversion {
    Eversion::new(v >> 32, v & 0xffff_ffff)
}
