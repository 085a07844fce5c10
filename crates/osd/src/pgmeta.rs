//! Where a PG's own state lives in the store: a hidden meta object in the PG's collection whose
//! omap holds the PG log (one entry per key, keyed by version so the order on disk is the log's
//! order) and the PG info (tail, last epoch started). A trimmed entry with a request id keeps
//! its key as the PG's dup (every key at or below the tail is one), so trimming writes nothing
//! more than it did before dups: the key removed per write is the dup that falls out. Every change to it rides in the same store
//! transaction as the data change it describes, so the log and the data can never disagree.
//! This module only encodes and decodes; it never commits.

// A narrowing cast in a byte format would silently write a wrong length: conversions here
// are checked (`try_from`).
#![deny(clippy::cast_possible_truncation)]

use cairn_pg::{Dup, Eversion, LogEntry, PgLog, ReqId};
use cairn_store::{Op, Store, Transaction};
use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::error::OsdError;
use crate::missing::Wanted;

/// Name of the hidden meta object (clients cannot name objects with a NUL byte).
pub const META_OBJECT: &str = "\u{0}pgmeta";
/// Omap key of the PG info.
const INFO_KEY: &[u8] = b"info";
/// Omap key prefix of log entries.
const LOG_PREFIX: &[u8] = b"log.";
/// Omap key prefix of the copy's missing objects (the object's name follows; the value is
/// the version it needs, JSON, `null` for a deletion).
const MISSING_PREFIX: &[u8] = b"missing.";
/// Format version of the persisted records (invariant 6).
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

/// What every log record (an entry, or a dup) has: its version and request id.
#[derive(Deserialize)]
struct Record {
    version: Eversion,
    #[serde(default)]
    reqid: Option<ReqId>,
}

/// The collection name of a PG.
pub fn collection(pg: cairn_clustermap::PgId) -> String {
    format!("pg.{pg}")
}

fn log_key(v: Eversion) -> Vec<u8> {
    let mut k = LOG_PREFIX.to_vec();
    k.extend_from_slice(&v.epoch.to_be_bytes());
    k.extend_from_slice(&v.version.to_be_bytes());
    k
}

fn json<T: Serialize>(value: &T) -> Result<Vec<u8>, OsdError> {
    serde_json::to_vec(value).map_err(|e| OsdError::Protocol(e.to_string()))
}

/// Adds to `txn` the new log entry appended to `log` and what the append trims: the oldest
/// entry (its key kept as a dup when it has a request id), the oldest dup past the limit, and
/// the new tail.
pub fn append_entry(
    txn: &mut Transaction,
    coll: &str,
    log: &PgLog,
    entry: &LogEntry,
    last_epoch_started: u64,
) -> Result<(), OsdError> {
    // At most one omap removal and one omap setting, each carrying all of its keys: every
    // store operation looks the meta object up again.
    let mut entries = vec![(log_key(entry.version), json(entry)?)];
    if let Some(t) = log.next_trimmed() {
        let mut gone = Vec::with_capacity(2);
        if t.reqid.is_none() {
            gone.push(log_key(t.version));
        }
        if let Some(d) = log.next_dropped_dup() {
            gone.push(log_key(d.version));
        }
        if !gone.is_empty() {
            txn.push(Op::OmapRemove {
                coll: coll.into(),
                obj: META_OBJECT.into(),
                keys: gone,
            });
        }
        entries.push((
            INFO_KEY.to_vec(),
            info_value(t.version, last_epoch_started)?,
        ));
    }
    txn.push(Op::OmapSet {
        coll: coll.into(),
        obj: META_OBJECT.into(),
        entries,
    });
    Ok(())
}

/// The encoded PG info record.
fn info_value(tail: Eversion, last_epoch_started: u64) -> Result<Vec<u8>, OsdError> {
    json(&PgInfo {
        format: FORMAT,
        tail,
        last_epoch_started,
    })
}

/// Adds to `txn` the PG info record.
pub fn put_info(
    txn: &mut Transaction,
    coll: &str,
    tail: Eversion,
    last_epoch_started: u64,
) -> Result<(), OsdError> {
    txn.omap_set(
        coll,
        META_OBJECT,
        INFO_KEY,
        &info_value(tail, last_epoch_started)?,
    );
    Ok(())
}

/// Adds to `txn` what turns the persisted log `old` into `new`: keys of entries and dups that
/// `new` lacks removed, keys it adds written (a dup whose key holds its entry already is kept).
pub fn replace_log(
    txn: &mut Transaction,
    coll: &str,
    old: &PgLog,
    new: &PgLog,
    last_epoch_started: u64,
) -> Result<(), OsdError> {
    let old_dups: BTreeSet<Eversion> = old.dups().map(|d| d.version).collect();
    let new_dups: BTreeSet<Eversion> = new.dups().map(|d| d.version).collect();
    for e in old.entries() {
        if !new.contains(e.version, &e.object) && !new_dups.contains(&e.version) {
            txn.omap_remove(coll, META_OBJECT, &log_key(e.version));
        }
    }
    for v in old_dups.difference(&new_dups) {
        if new.entry_at(*v).is_none() {
            txn.omap_remove(coll, META_OBJECT, &log_key(*v));
        }
    }
    for e in new.entries() {
        if !old.contains(e.version, &e.object) {
            txn.omap_set(coll, META_OBJECT, &log_key(e.version), &json(e)?);
        }
    }
    for d in new.dups() {
        if !old_dups.contains(&d.version) && old.entry_at(d.version).is_none() {
            txn.omap_set(coll, META_OBJECT, &log_key(d.version), &json(d)?);
        }
    }
    put_info(txn, coll, new.tail(), last_epoch_started)
}

fn missing_key(object: &str) -> Vec<u8> {
    let mut k = MISSING_PREFIX.to_vec();
    k.extend_from_slice(object.as_bytes());
    k
}

/// Adds to `txn` what turns the persisted missing objects `old` into `new`.
pub fn replace_missing(
    txn: &mut Transaction,
    coll: &str,
    old: &Wanted,
    new: &Wanted,
) -> Result<(), OsdError> {
    let gone: Vec<Vec<u8>> = old
        .keys()
        .filter(|o| !new.contains_key(*o))
        .map(|o| missing_key(o))
        .collect();
    if !gone.is_empty() {
        txn.push(Op::OmapRemove {
            coll: coll.into(),
            obj: META_OBJECT.into(),
            keys: gone,
        });
    }
    let mut entries = Vec::new();
    for (o, v) in new {
        if old.get(o) != Some(v) {
            entries.push((missing_key(o), json(v)?));
        }
    }
    if !entries.is_empty() {
        txn.push(Op::OmapSet {
            coll: coll.into(),
            obj: META_OBJECT.into(),
            entries,
        });
    }
    Ok(())
}

/// Adds to `txn` that this copy holds `object` now.
pub fn remove_missing(txn: &mut Transaction, coll: &str, object: &str) {
    txn.omap_remove(coll, META_OBJECT, &missing_key(object));
}

/// A PG's state as its meta object holds it.
#[derive(Debug)]
pub struct Loaded {
    /// The log.
    pub log: PgLog,
    /// The last epoch started.
    pub last_epoch_started: u64,
    /// The objects the copy lacks.
    pub missing: Wanted,
}

/// Loads a PG's log and info from its meta object (an empty log if it has none yet).
pub async fn load(store: &Store, coll: &str, max_entries: usize) -> Result<Loaded, OsdError> {
    if !store.exists(coll, META_OBJECT).await? {
        return Ok(Loaded {
            log: PgLog::new(max_entries),
            last_epoch_started: 0,
            missing: Wanted::new(),
        });
    }
    let mut info = PgInfo::default();
    let mut entries = Vec::new();
    let mut dups = Vec::new();
    let mut records = Vec::new();
    let mut missing = Wanted::new();
    for (k, v) in store.omap_get(coll, META_OBJECT).await? {
        if let Some(name) = k.strip_prefix(MISSING_PREFIX) {
            let object = String::from_utf8(name.to_vec())
                .map_err(|e| OsdError::Corrupt(format!("{coll} missing object name: {e}")))?;
            let version: Option<Eversion> = serde_json::from_slice(&v)
                .map_err(|e| OsdError::Corrupt(format!("{coll} missing {object}: {e}")))?;
            missing.insert(object, version);
            continue;
        }
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
            records.push(v);
        }
    }
    // Keys at or below the tail are dups: a trimmed entry kept for its request id (its value
    // read as a dup), or a dup received from a peer.
    for v in records {
        let r: Record = serde_json::from_slice(&v)
            .map_err(|e| OsdError::Corrupt(format!("{coll} log record: {e}")))?;
        if r.version <= info.tail {
            if let Some(reqid) = r.reqid {
                dups.push(Dup {
                    reqid,
                    version: r.version,
                });
            }
        } else {
            let e: LogEntry = serde_json::from_slice(&v)
                .map_err(|e| OsdError::Corrupt(format!("{coll} log entry: {e}")))?;
            entries.push(e);
        }
    }
    entries.sort_by_key(|e| e.version);
    cut_at_first_hole(coll, &mut entries);
    dups.sort_by_key(|d| d.version);
    let log = PgLog::from_parts(info.tail, dups, entries, max_entries)
        .map_err(|e| OsdError::Corrupt(format!("{coll} log: {e}")))?;
    Ok(Loaded {
        log,
        last_epoch_started: info.last_epoch_started,
        missing,
    })
}

/// Drops the entries from the first one whose version does not follow its predecessor's
/// (versions count up by one in every interval). A copy's log has such a hole only if a write
/// failed locally after a later one of its PG was queued (the OSD stops then): cut there, the
/// copy is behind, and peering recovers what it lacks, including the objects of the entries
/// cut, from the other copies.
fn cut_at_first_hole(coll: &str, entries: &mut Vec<LogEntry>) {
    let hole = entries
        .windows(2)
        .position(|w| w[1].version.version != w[0].version.version + 1);
    if let Some(i) = hole {
        tracing::error!(
            coll,
            after = %entries[i].version,
            next = %entries[i + 1].version,
            dropped = entries.len() - i - 1,
            "the PG log has a hole: the entries past it are ignored"
        );
        entries.truncate(i + 1);
    }
}

/// Packs a version into the u64 clients see and `_v` stores: `epoch << 32 | counter`.
pub fn pack(v: Eversion) -> u64 {
    (v.epoch << 32) | (v.version & 0xffff_ffff)
}

/// The inverse of [`pack`].
pub fn unpack(v: u64) -> Eversion {
    Eversion::new(v >> 32, v & 0xffff_ffff)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use cairn_blockdev::mem::MemDevice;
    use cairn_pg::OpKind;
    use cairn_store::{KvLocation, StoreConfig};

    use super::*;

    const COLL: &str = "pg.1.0";

    fn entry(n: u64, with_request: bool) -> LogEntry {
        LogEntry {
            version: Eversion::new(3, n),
            object: format!("obj{}", n % 5),
            op: OpKind::Modify,
            prior: Eversion::default(),
            reqid: with_request.then_some(ReqId { client: 9, seq: n }),
        }
    }

    async fn store(dir: &std::path::Path) -> Store {
        let dev: Arc<dyn cairn_blockdev::BlockDevice> =
            Arc::new(MemDevice::new(64 << 20, 4096).unwrap());
        let kv = dir.join("kv.redb");
        let cfg = StoreConfig::default();
        Store::mkfs(dev.clone(), KvLocation::File(kv.clone()), &cfg)
            .await
            .unwrap();
        let store = Store::mount(dev, KvLocation::File(kv), cfg).await.unwrap();
        let mut txn = Transaction::new();
        txn.create_collection(COLL);
        put_info(&mut txn, COLL, Eversion::default(), 2).unwrap();
        store.queue_transaction_owned(txn).await.unwrap();
        store
    }

    #[test]
    fn a_log_is_cut_at_its_first_hole_and_kept_whole_without_one() {
        let mut whole: Vec<LogEntry> = (5..=9).map(|n| entry(n, false)).collect();
        cut_at_first_hole(COLL, &mut whole);
        assert_eq!(whole.len(), 5);
        let mut holed: Vec<LogEntry> = [5, 6, 8, 9].iter().map(|&n| entry(n, false)).collect();
        cut_at_first_hole(COLL, &mut holed);
        let kept: Vec<u64> = holed.iter().map(|e| e.version.version).collect();
        assert_eq!(kept, [5, 6]);
        // A new interval's first entry follows the last one of the previous interval.
        let mut across = vec![entry(5, false), entry(6, false)];
        across.push(LogEntry {
            version: Eversion::new(4, 7),
            ..entry(7, false)
        });
        cut_at_first_hole(COLL, &mut across);
        assert_eq!(across.len(), 3);
    }

    /// Appends, trims (entries without a request id leave, those with one stay as dups until
    /// the dups are full) and a replacement by a peer's log all load back as the log in memory.
    #[tokio::test]
    async fn the_persisted_log_and_dups_load_back_as_they_are_in_memory() {
        let dir = std::env::temp_dir().join(format!("cairn-pgmeta-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let store = store(&dir).await;
        let mut log = PgLog::new(4);
        for n in 1..=15 {
            let e = entry(n, n % 3 != 0);
            let mut txn = Transaction::new();
            append_entry(&mut txn, COLL, &log, &e, 2).unwrap();
            store.queue_transaction_owned(txn).await.unwrap();
            log.append(e).unwrap();
            let loaded = load(&store, COLL, 4).await.unwrap();
            assert_eq!(
                (&loaded.log, loaded.last_epoch_started),
                (&log, 2),
                "after entry {n}"
            );
        }
        assert_eq!(log.dups().count(), 4);
        assert!(log
            .version_of_request(&ReqId { client: 9, seq: 8 })
            .is_some());
        assert!(log
            .version_of_request(&ReqId { client: 9, seq: 4 })
            .is_none());
        // A peer's log: shorter (entry 13, in this log, is a dup there), another history
        // after entry 14.
        let mut peer = PgLog::new(2);
        for n in 7..=14 {
            peer.append(entry(n, n % 3 != 0)).unwrap();
        }
        peer.append(LogEntry {
            version: Eversion::new(4, 15),
            object: "elsewhere".into(),
            ..entry(15, true)
        })
        .unwrap();
        assert!(peer.dups().any(|d| d.version == Eversion::new(3, 13)));
        let mut txn = Transaction::new();
        replace_log(&mut txn, COLL, &log, &peer, 5).unwrap();
        store.queue_transaction_owned(txn).await.unwrap();
        let loaded = load(&store, COLL, 2).await.unwrap();
        assert_eq!((&loaded.log, loaded.last_epoch_started), (&peer, 5));
        // Missing objects: recorded at activation, one recovered, the set replaced.
        let first: Wanted = [
            ("obj1".to_string(), Some(Eversion::new(3, 11))),
            ("obj2".to_string(), None),
            ("obj3".to_string(), Some(Eversion::new(3, 8))),
        ]
        .into();
        let mut txn = Transaction::new();
        replace_missing(&mut txn, COLL, &Wanted::new(), &first).unwrap();
        remove_missing(&mut txn, COLL, "obj3");
        store.queue_transaction_owned(txn).await.unwrap();
        let mut expected = first.clone();
        expected.remove("obj3");
        assert_eq!(load(&store, COLL, 2).await.unwrap().missing, expected);
        let second: Wanted = [("obj2".to_string(), Some(Eversion::new(4, 1)))].into();
        let mut txn = Transaction::new();
        replace_missing(&mut txn, COLL, &expected, &second).unwrap();
        store.queue_transaction_owned(txn).await.unwrap();
        let loaded = load(&store, COLL, 2).await.unwrap();
        assert_eq!(loaded.missing, second);
        assert_eq!(loaded.log, peer, "the log is untouched");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
