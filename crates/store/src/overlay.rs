//! The KV changes of the group commits since the last checkpoint, kept in memory over the
//! checkpointed redb state, and tables seen through them.
//!
//! A logged group commit no longer commits redb at all: its redo record (durable in the
//! write-ahead log) is absorbed here, and a checkpoint writes the whole overlay to redb in one
//! durable commit (each page once, however many groups changed it). Staging and reads see
//! `this group's changes -> overlay -> redb` through [`Layered`]. It must never be read without
//! the store's lock that guards it, and never be cleared except by a checkpoint's durable commit.

use crate::error::{kv, Result};
use crate::logged::Touched;
use crate::wal::{Redo, REDO_TABLES};
use redb::{Key, ReadOnlyTable, ReadableTable, Value};
use std::borrow::Borrow;
use std::collections::BTreeMap;
use std::ops::Bound;

/// Changes since the last checkpoint, by table (the order of [`Redo`]).
#[derive(Debug, Default)]
pub(crate) struct Overlay {
    /// Final state of every key changed since the checkpoint, per table.
    pub(crate) tables: [Touched; REDO_TABLES],
    /// Approximate bytes held (keys and values), to bound memory.
    pub(crate) bytes: usize,
}

impl Overlay {
    /// Takes a committed group's changes in (later changes win).
    pub(crate) fn absorb(&mut self, redo: Redo) {
        for (mine, theirs) in self.tables.iter_mut().zip(redo.tables) {
            for (k, v) in theirs {
                self.bytes += k.len() + v.as_ref().map_or(0, Vec::len);
                mine.insert(k, v);
            }
        }
    }

    /// Whether nothing changed since the checkpoint.
    pub(crate) fn is_empty(&self) -> bool {
        self.tables.iter().all(BTreeMap::is_empty)
    }
}

/// A redb table seen through the overlay and the current group's own changes, which it records
/// (the group's redo record). Values are returned as owned bytes.
pub(crate) struct Layered<'a, K: Key + 'static, V: Value + 'static> {
    base: ReadOnlyTable<K, V>,
    below: &'a Touched,
    touched: Touched,
}

impl<'a, K: Key + 'static, V: Value + 'static> Layered<'a, K, V> {
    /// `base` (the checkpointed table) under `below` (the overlay's changes to it).
    pub(crate) fn new(base: ReadOnlyTable<K, V>, below: &'a Touched) -> Self {
        Self {
            base,
            below,
            touched: Touched::new(),
        }
    }

    fn raw<'k>(key: &K::SelfType<'k>) -> Vec<u8> {
        K::as_bytes(key).as_ref().to_vec()
    }

    /// The value of `key`, if any.
    pub(crate) fn get<'k>(&self, key: impl Borrow<K::SelfType<'k>>) -> Result<Option<Vec<u8>>> {
        let key = key.borrow();
        let raw = Self::raw(key);
        if let Some(v) = self.touched.get(&raw).or_else(|| self.below.get(&raw)) {
            return Ok(v.clone());
        }
        Ok(self
            .base
            .get(key)
            .map_err(kv)?
            .map(|g| V::as_bytes(&g.value()).as_ref().to_vec()))
    }

    /// Sets `key` to `value` (recorded for the group's redo record).
    pub(crate) fn insert<'k, 'v>(
        &mut self,
        key: impl Borrow<K::SelfType<'k>>,
        value: impl Borrow<V::SelfType<'v>>,
    ) -> Result<()> {
        let value = V::as_bytes(value.borrow()).as_ref().to_vec();
        self.touched.insert(Self::raw(key.borrow()), Some(value));
        Ok(())
    }

    /// Removes `key` (recorded); returns whether it existed.
    pub(crate) fn remove<'k>(&mut self, key: impl Borrow<K::SelfType<'k>>) -> Result<bool> {
        let key = key.borrow();
        let existed = self.get(key)?.is_some();
        self.touched.insert(Self::raw(key), None);
        Ok(existed)
    }

    /// The changes recorded so far (and forgets them).
    pub(crate) fn take_touched(&mut self) -> Touched {
        std::mem::take(&mut self.touched)
    }

    /// The overlay's and this group's changes to keys in `lo..hi`, the group's winning.
    fn changes_in(&self, lo: &[u8], hi: Option<&[u8]>) -> BTreeMap<Vec<u8>, Option<Vec<u8>>> {
        let bounds = |t: &'a Touched| -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
            let upper = hi.map_or(Bound::Unbounded, Bound::Excluded);
            t.range::<[u8], _>((Bound::Included(lo), upper))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        };
        let mut out: BTreeMap<Vec<u8>, Option<Vec<u8>>> = bounds(self.below).into_iter().collect();
        let upper = hi.map_or(Bound::Unbounded, Bound::Excluded);
        for (k, v) in self.touched.range::<[u8], _>((Bound::Included(lo), upper)) {
            out.insert(k.clone(), v.clone());
        }
        out
    }
}

/// Merges checkpointed entries (sorted) with the changes over them (sorted): a changed key shows
/// its change (or nothing, when removed). Stops after `limit` entries.
fn merge(
    base: impl Iterator<Item = Result<(Vec<u8>, Vec<u8>)>>,
    changes: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    limit: usize,
) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let mut out = Vec::new();
    let mut changes = changes.into_iter().peekable();
    let mut base = base.peekable();
    let mut next_base = base.next().transpose()?;
    while out.len() < limit {
        let take_change = match (&next_base, changes.peek()) {
            (None, None) => break,
            (None, Some(_)) => true,
            (Some((bk, _)), Some((ck, _))) => ck <= bk,
            (Some(_), None) => false,
        };
        if !take_change {
            if let Some(entry) = next_base.take() {
                out.push(entry);
            }
            next_base = base.next().transpose()?;
            continue;
        }
        let Some((ck, cv)) = changes.next() else {
            break;
        };
        if next_base.as_ref().is_some_and(|(bk, _)| *bk == ck) {
            next_base = base.next().transpose()?;
        }
        if let Some(v) = cv {
            out.push((ck, v));
        }
    }
    Ok(out)
}

impl Layered<'_, &'static [u8], &'static [u8]> {
    /// Live entries with keys in `lo..hi` (`None`: to the end), in key order, at most `limit`.
    pub(crate) fn range(
        &self,
        lo: &[u8],
        hi: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let changes = self.changes_in(lo, hi);
        let iter = match hi {
            Some(hi) => self.base.range(lo..hi),
            None => self.base.range(lo..),
        }
        .map_err(kv)?;
        let base = iter.map(|item| {
            item.map_err(kv)
                .map(|(k, v)| (k.value().to_vec(), v.value().to_vec()))
        });
        merge(base, changes, limit)
    }

    /// The live entry with the greatest key in `lo..hi`, if any.
    pub(crate) fn last_in(&self, lo: &[u8], hi: &[u8]) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        let changes = self.changes_in(lo, Some(hi));
        let mut base = self.base.range(lo..hi).map_err(kv)?.rev();
        // The last live base key not shadowed by a change, against the last live change.
        let from_base = loop {
            match base.next() {
                None => break None,
                Some(item) => {
                    let (k, v) = item.map_err(kv)?;
                    if !changes.contains_key(k.value()) {
                        break Some((k.value().to_vec(), v.value().to_vec()));
                    }
                }
            }
        };
        let from_changes = changes
            .into_iter()
            .rev()
            .find_map(|(k, v)| v.map(|v| (k, v)));
        Ok(match (from_base, from_changes) {
            (Some(b), Some(c)) => Some(if c.0 > b.0 { c } else { b }),
            (b, c) => b.or(c),
        })
    }
}

impl Layered<'_, &'static str, &'static [u8]> {
    /// Every live entry, in key order.
    pub(crate) fn all(&self) -> Result<Vec<(String, Vec<u8>)>> {
        let changes = self.changes_in(&[], None);
        let base = self.base.iter().map_err(kv)?.map(|item| {
            item.map_err(kv)
                .map(|(k, v)| (k.value().as_bytes().to_vec(), v.value().to_vec()))
        });
        Ok(merge(base, changes, usize::MAX)?
            .into_iter()
            .filter_map(|(k, v)| String::from_utf8(k).ok().map(|k| (k, v)))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use redb::backends::InMemoryBackend;
    use redb::TableDefinition;

    const T: TableDefinition<&[u8], &[u8]> = TableDefinition::new("t");

    #[test]
    fn layers_shadow_in_order_and_ranges_merge() {
        let db = redb::Builder::new()
            .create_with_backend(InMemoryBackend::new())
            .unwrap();
        let w = db.begin_write().unwrap();
        {
            let mut t = w.open_table(T).unwrap();
            for k in [b"a", b"c", b"e", b"g"] {
                t.insert(k.as_slice(), b"base".as_slice()).unwrap();
            }
        }
        w.commit().unwrap();
        let mut below = Touched::new();
        below.insert(b"c".to_vec(), None);
        below.insert(b"d".to_vec(), Some(b"over".to_vec()));
        below.insert(b"e".to_vec(), Some(b"over".to_vec()));
        let r = db.begin_read().unwrap();
        let mut t = Layered::new(r.open_table(T).unwrap(), &below);
        t.insert(b"b".as_slice(), b"mine".as_slice()).unwrap();
        assert!(t.remove(b"g".as_slice()).unwrap());
        assert!(!t.remove(b"c".as_slice()).unwrap(), "removed below");
        t.insert(b"e".as_slice(), b"mine".as_slice()).unwrap();
        assert_eq!(t.get(b"a".as_slice()).unwrap(), Some(b"base".to_vec()));
        assert_eq!(t.get(b"c".as_slice()).unwrap(), None);
        assert_eq!(t.get(b"d".as_slice()).unwrap(), Some(b"over".to_vec()));
        let all: Vec<(Vec<u8>, Vec<u8>)> = t.range(b"", None, usize::MAX).unwrap();
        let want: Vec<(Vec<u8>, Vec<u8>)> =
            [("a", "base"), ("b", "mine"), ("d", "over"), ("e", "mine")]
                .iter()
                .map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec()))
                .collect();
        assert_eq!(all, want);
        assert_eq!(
            t.range(b"b", Some(b"e"), usize::MAX).unwrap(),
            want[1..3].to_vec()
        );
        assert_eq!(t.range(b"", None, 2).unwrap(), want[..2].to_vec());
        assert_eq!(t.last_in(b"a", b"g").unwrap(), Some(want[3].clone()));
        assert_eq!(t.last_in(b"a", b"d").unwrap(), Some(want[1].clone()));
        assert_eq!(t.last_in(b"f", b"z").unwrap(), None, "g removed");
        let touched = t.take_touched();
        assert_eq!(touched.len(), 4);
    }
}
