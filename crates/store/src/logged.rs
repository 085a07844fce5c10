//! Logged tables: redb tables inside a write transaction that remember the final value of every
//! key they change, so a group commit's metadata can be written to the device's write-ahead log
//! as one redo record (see `wal`).
//!
//! Owns the capture (raw key and value bytes, last write wins) and the replay of captured changes
//! into a table. Reads go to the table itself (`Deref`); there is deliberately no `DerefMut`, so no
//! change can bypass the capture. Errors are redb's own, as from a plain table. It must never
//! decide durability or where records are written.

use crate::error::{kv, Result};
use redb::{Key, StorageError, Table, Value};
use std::borrow::Borrow;
use std::collections::BTreeMap;

/// The final state of every key a group touched in one table: raw key -> raw value, or `None`
/// when the key was removed.
pub(crate) type Touched = BTreeMap<Vec<u8>, Option<Vec<u8>>>;

/// One recorded change: raw key and the new raw value, or `None` for a removal.
pub(crate) type Change = (Vec<u8>, Option<Vec<u8>>);

/// A redb table that records its changes.
pub(crate) struct Logged<'t, K: Key + 'static, V: Value + 'static> {
    table: Table<'t, K, V>,
    touched: Touched,
}

impl<'t, K: Key + 'static, V: Value + 'static> Logged<'t, K, V> {
    /// Wraps an open table.
    pub(crate) fn new(table: Table<'t, K, V>) -> Self {
        Self {
            table,
            touched: Touched::new(),
        }
    }

    /// Inserts (or replaces) `key`, recording the new value.
    pub(crate) fn insert<'k, 'v>(
        &mut self,
        key: impl Borrow<K::SelfType<'k>>,
        value: impl Borrow<V::SelfType<'v>>,
    ) -> std::result::Result<(), StorageError> {
        let (key, value) = (key.borrow(), value.borrow());
        self.touched.insert(
            K::as_bytes(key).as_ref().to_vec(),
            Some(V::as_bytes(value).as_ref().to_vec()),
        );
        self.table.insert(key, value)?;
        Ok(())
    }

    /// Removes `key`, recording the removal; returns whether it existed.
    pub(crate) fn remove<'k>(
        &mut self,
        key: impl Borrow<K::SelfType<'k>>,
    ) -> std::result::Result<bool, StorageError> {
        let key = key.borrow();
        self.touched
            .insert(K::as_bytes(key).as_ref().to_vec(), None);
        Ok(self.table.remove(key)?.is_some())
    }

    /// The changes recorded so far (and forgets them).
    pub(crate) fn take_touched(&mut self) -> Touched {
        std::mem::take(&mut self.touched)
    }
}

impl<'t, K: Key + 'static, V: Value + 'static> std::ops::Deref for Logged<'t, K, V> {
    type Target = Table<'t, K, V>;

    fn deref(&self) -> &Self::Target {
        &self.table
    }
}

/// Applies recorded changes to `table` in order. Keys and values must be valid encodings of the
/// table's types (the log decoder checks the fixed-size and UTF-8 ones before calling this).
pub(crate) fn replay<K: Key + 'static, V: Value + 'static>(
    table: &mut Table<'_, K, V>,
    changes: &[Change],
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

#[cfg(test)]
mod tests {
    use super::*;
    use redb::backends::InMemoryBackend;
    use redb::{ReadableTable, ReadableTableMetadata, TableDefinition};

    const T: TableDefinition<&str, &[u8]> = TableDefinition::new("t");
    const U: TableDefinition<u64, &[u8]> = TableDefinition::new("u");

    #[test]
    fn records_the_last_change_of_each_key_and_replays_it() {
        let db = redb::Builder::new()
            .create_with_backend(InMemoryBackend::new())
            .unwrap();
        let w = db.begin_write().unwrap();
        let (touched_t, touched_u) = {
            let mut t = Logged::new(w.open_table(T).unwrap());
            t.insert("a", b"1".as_slice()).unwrap();
            t.insert("b", b"2".as_slice()).unwrap();
            t.insert("a", b"3".as_slice()).unwrap();
            assert!(t.remove("b").unwrap());
            assert!(!t.remove("c").unwrap());
            assert_eq!(t.get("a").unwrap().unwrap().value(), b"3");
            let mut u = Logged::new(w.open_table(U).unwrap());
            u.insert(7u64, b"x".as_slice()).unwrap();
            (t.take_touched(), u.take_touched())
        };
        w.commit().unwrap();
        assert_eq!(touched_t.len(), 3);
        assert_eq!(touched_t[b"a".as_slice()], Some(b"3".to_vec()));
        assert_eq!(touched_t[b"b".as_slice()], None);

        let other = redb::Builder::new()
            .create_with_backend(InMemoryBackend::new())
            .unwrap();
        let w = other.begin_write().unwrap();
        {
            let mut t = w.open_table(T).unwrap();
            t.insert("b", b"old".as_slice()).unwrap();
            let changes: Vec<_> = touched_t.into_iter().collect();
            replay(&mut t, &changes).unwrap();
            let mut u = w.open_table(U).unwrap();
            let changes: Vec<_> = touched_u.into_iter().collect();
            replay(&mut u, &changes).unwrap();
        }
        w.commit().unwrap();
        let r = other.begin_read().unwrap();
        let t = r.open_table(T).unwrap();
        assert_eq!(t.get("a").unwrap().unwrap().value(), b"3");
        assert!(t.get("b").unwrap().is_none());
        assert_eq!(t.len().unwrap(), 1);
        let u = r.open_table(U).unwrap();
        assert_eq!(u.get(7u64).unwrap().unwrap().value(), b"x");
    }
}
