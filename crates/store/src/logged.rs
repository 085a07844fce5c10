//! Recorded KV changes: the final value (or removal) of every key a group commit changed, by raw
//! key bytes, as carried by redo records (`wal`), held by the overlay (`overlay`), and replayed
//! into redb tables at checkpoints and at mount.
//!
//! Owns the change types and their replay. It must never decide durability or where records are
//! written.

use crate::error::{kv, Result};
use crate::kv::{COLLS, DEFERRED, EXTENTS, META, OMAP, ONODES, XATTRS};
use crate::wal::REDO_TABLES;
use redb::{Key, Table, Value, WriteTransaction};
use std::collections::BTreeMap;

/// The final state of every key a group touched in one table: raw key -> raw value, or `None`
/// when the key was removed.
pub(crate) type Touched = BTreeMap<Vec<u8>, Option<Vec<u8>>>;

/// One recorded change: raw key and the new raw value, or `None` for a removal.
pub(crate) type Change = (Vec<u8>, Option<Vec<u8>>);

/// Applies recorded changes (raw key -> new raw value or removal) to `table` in order. Keys and
/// values must be valid encodings of the table's types (the log decoder checks the fixed-size and
/// UTF-8 ones; the overlay holds only what staging wrote).
pub(crate) fn replay<'c, K: Key + 'static, V: Value + 'static>(
    table: &mut Table<'_, K, V>,
    changes: impl IntoIterator<Item = (&'c Vec<u8>, &'c Option<Vec<u8>>)>,
) -> Result<()> {
    for (k, v) in changes {
        let key = K::from_bytes(k);
        match v {
            Some(v) => {
                table.insert(key, V::from_bytes(v)).map_err(kv)?;
            }
            None => {
                table.remove(key).map_err(kv)?;
            }
        }
    }
    Ok(())
}

/// Replays one set of changes per table (in the order of `wal::Redo`: meta, collections, onodes,
/// extents, xattrs, omap, deferred) into the tables of `wtx`, leaving out the deferred writes
/// whose raw key `keep_deferred` refuses (already applied in place).
pub(crate) fn replay_tables<'c, I>(
    wtx: &WriteTransaction,
    tables: [I; REDO_TABLES],
    keep_deferred: impl Fn(&[u8]) -> bool,
) -> Result<()>
where
    I: IntoIterator<Item = (&'c Vec<u8>, &'c Option<Vec<u8>>)>,
{
    let [meta, colls, onodes, extents, xattrs, omap, deferred] = tables;
    replay(&mut wtx.open_table(META).map_err(kv)?, meta)?;
    replay(&mut wtx.open_table(COLLS).map_err(kv)?, colls)?;
    replay(&mut wtx.open_table(ONODES).map_err(kv)?, onodes)?;
    replay(&mut wtx.open_table(EXTENTS).map_err(kv)?, extents)?;
    replay(&mut wtx.open_table(XATTRS).map_err(kv)?, xattrs)?;
    replay(&mut wtx.open_table(OMAP).map_err(kv)?, omap)?;
    replay(
        &mut wtx.open_table(DEFERRED).map_err(kv)?,
        deferred.into_iter().filter(|(k, _)| keep_deferred(k)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use redb::backends::InMemoryBackend;
    use redb::{ReadableTableMetadata, TableDefinition};

    const T: TableDefinition<&str, &[u8]> = TableDefinition::new("t");
    const U: TableDefinition<u64, &[u8]> = TableDefinition::new("u");

    #[test]
    fn replays_insertions_and_removals_in_order() {
        let db = redb::Builder::new()
            .create_with_backend(InMemoryBackend::new())
            .unwrap();
        let mut changes = Touched::new();
        changes.insert(b"a".to_vec(), Some(b"3".to_vec()));
        changes.insert(b"b".to_vec(), None);
        let mut blocks = Touched::new();
        blocks.insert(7u64.to_le_bytes().to_vec(), Some(b"x".to_vec()));
        let w = db.begin_write().unwrap();
        {
            let mut t = w.open_table(T).unwrap();
            t.insert("b", b"old".as_slice()).unwrap();
            replay(&mut t, &changes).unwrap();
            let mut u = w.open_table(U).unwrap();
            replay(&mut u, &blocks).unwrap();
        }
        w.commit().unwrap();
        let r = db.begin_read().unwrap();
        let t = r.open_table(T).unwrap();
        assert_eq!(t.get("a").unwrap().unwrap().value(), b"3");
        assert!(t.get("b").unwrap().is_none());
        assert_eq!(t.len().unwrap(), 1);
        let u = r.open_table(U).unwrap();
        assert_eq!(u.get(7u64).unwrap().unwrap().value(), b"x");
    }
}
