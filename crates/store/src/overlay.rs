//! The KV changes of the group commits since the last checkpoint, kept in memory over the
//! checkpointed redb state, and tables seen through them.
//!
//! A logged group commit no longer commits redb at all: its redo record (durable in the
//! write-ahead log) is absorbed here, and a checkpoint writes the whole overlay to redb in one
//! durable commit (each page once, however many groups changed it). Staging and reads see
//! `this group's changes -> overlay -> redb` through [`Layered`]. It must never be read without
//! the store's lock that guards it, and never be cleared except by a checkpoint's durable commit.
//!
//! A checkpoint does not stall commits: it *freezes* the overlay (the live changes move, without
//! a copy, to a shared [`Frozen`] layer that a background thread writes to redb) and later groups
//! fill a fresh live layer, so lookups see `group -> live -> frozen -> redb`. The frozen layer is
//! dropped only once its commit is durable; until then it shadows redb with the very values the
//! commit is writing, so a reader's redb snapshot from before or after that commit sees the same.

use crate::error::{kv, Result};
use crate::keyfilter::KeyFilter;
use crate::kv::{FoundMemo, KvSnapshot};
use crate::logged::Touched;
use crate::wal::{Redo, REDO_TABLES};
use redb::{Database, Key, ReadOnlyTable, ReadableTable, Value};
use std::borrow::Borrow;
use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::{Arc, Mutex};

/// The empty layer, standing in for a frozen layer when no checkpoint is in flight (and for
/// the in-flight group's layer when there is none).
pub(crate) static NO_CHANGES: Touched = BTreeMap::new();

/// The layers of changes over one checkpointed table, the newest first: the changes of a group
/// whose commit is in flight (seen only by the next group's staging, never by readers), the
/// live layer, the frozen layer.
pub(crate) type Below<'a> = [&'a Touched; 3];

/// Changes frozen for a checkpoint in flight, by table (the order of [`Redo`]).
#[derive(Debug, Default)]
pub(crate) struct Frozen {
    /// Final state of every key changed between the previous checkpoint and the freeze.
    pub(crate) tables: [Touched; REDO_TABLES],
    /// Approximate bytes held (keys and values).
    pub(crate) bytes: usize,
}

/// Changes since the last durable checkpoint: the live layer groups add to, over the layer
/// frozen for a checkpoint in flight (if any).
#[derive(Debug, Default)]
pub(crate) struct Overlay {
    /// Final state of every key changed since the last freeze, per table.
    pub(crate) tables: [Touched; REDO_TABLES],
    /// Approximate bytes held by the live layer (keys and values), to bound memory.
    pub(crate) bytes: usize,
    /// The layer a background checkpoint is writing to redb.
    pub(crate) frozen: Option<Arc<Frozen>>,
    /// The redb snapshot these layers are read over, opened on first use and forgotten
    /// whenever a layer is dropped (a new overlay starts without one). A snapshot from before
    /// a checkpoint's commit stays right while that checkpoint's frozen layer shadows it; once
    /// the layer goes, so does the snapshot, and the next one is opened after the commit.
    base: Mutex<Option<Arc<KvSnapshot>>>,
}

/// A frozen layer and the snapshot under it, no longer read by anyone: dropping them frees
/// their memory.
#[derive(Debug)]
pub(crate) struct Thawed {
    _frozen: Option<Arc<Frozen>>,
    _snapshot: Option<Arc<KvSnapshot>>,
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

    /// Whether nothing changed since the last durable checkpoint.
    pub(crate) fn is_empty(&self) -> bool {
        self.frozen.is_none() && self.tables.iter().all(BTreeMap::is_empty)
    }

    /// Bytes held by both layers.
    pub(crate) fn total_bytes(&self) -> usize {
        self.bytes + self.frozen.as_ref().map_or(0, |f| f.bytes)
    }

    /// Table `index` as readers see it: the live layer over the frozen one (durable changes
    /// only; see [`Below`]).
    pub(crate) fn layers(&self, index: usize) -> Below<'_> {
        self.layers_under(index, &NO_CHANGES)
    }

    /// Table `index` as a group being staged sees it: the changes of the group whose commit is
    /// in flight (`in_flight`, not yet durable) over the live layer over the frozen one.
    pub(crate) fn layers_under<'a>(&'a self, index: usize, in_flight: &'a Touched) -> Below<'a> {
        [
            in_flight,
            &self.tables[index],
            self.frozen
                .as_ref()
                .map_or(&NO_CHANGES, |f| &f.tables[index]),
        ]
    }

    /// Moves the live layer into a new frozen layer (for a background checkpoint) and returns
    /// it; `None` when a layer is frozen already (one checkpoint in flight at a time).
    pub(crate) fn freeze(&mut self) -> Option<Arc<Frozen>> {
        if self.frozen.is_some() {
            return None;
        }
        let frozen = Arc::new(Frozen {
            tables: std::mem::take(&mut self.tables),
            bytes: std::mem::take(&mut self.bytes),
        });
        self.frozen = Some(frozen.clone());
        Some(frozen)
    }

    /// Removes the frozen layer: its checkpoint is durable in redb. The snapshot read under the
    /// layers goes with it (it may predate that commit). Both are returned for the caller to
    /// free where it costs no one a wait (a layer holds thousands of allocations).
    pub(crate) fn thaw(&mut self) -> Thawed {
        Thawed {
            _frozen: self.frozen.take(),
            _snapshot: self
                .base
                .get_mut()
                .unwrap_or_else(|p| p.into_inner())
                .take(),
        }
    }

    /// The redb snapshot to read under the layers: the one in use, or a new one of `db`
    /// (whose onode table `onode_keys` covers).
    pub(crate) fn snapshot(
        &self,
        db: &Database,
        onode_keys: &Arc<KeyFilter>,
    ) -> Result<Arc<KvSnapshot>> {
        let mut base = self.base.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = &*base {
            return Ok(s.clone());
        }
        let s = Arc::new(KvSnapshot::open(db, onode_keys)?);
        *base = Some(s.clone());
        Ok(s)
    }
}

/// A redb table seen through the overlay and the current group's own changes, which it records
/// (the group's redo record). Values are returned as owned bytes.
pub(crate) struct Layered<'a, K: Key + 'static, V: Value + 'static> {
    base: &'a ReadOnlyTable<K, V>,
    /// The layers of changes to this table, the newest first.
    below: Below<'a>,
    /// Values already found in `base`, when kept (see [`FoundMemo`]).
    found: Option<&'a FoundMemo>,
    /// Every key `base` may hold, when known: a key not in it is not looked up.
    keys: Option<&'a KeyFilter>,
    touched: Touched,
}

impl<'a, K: Key + 'static, V: Value + 'static> Layered<'a, K, V> {
    /// `base` (the checkpointed table) under `below` (the layers of changes to it, the newest
    /// first: see [`Overlay::layers`]).
    pub(crate) fn new(base: &'a ReadOnlyTable<K, V>, below: Below<'a>) -> Self {
        Self {
            base,
            below,
            found: None,
            keys: None,
            touched: Touched::new(),
        }
    }

    /// The same, keeping the values it finds in `base` in `found` (which must belong to the
    /// snapshot `base` is a table of) and looking there first.
    pub(crate) fn with_found(mut self, found: &'a FoundMemo) -> Self {
        self.found = Some(found);
        self
    }

    /// The same, not looking up in `base` a key that `keys` (which must cover every key
    /// `base` holds) proves absent.
    pub(crate) fn with_key_filter(mut self, keys: &'a KeyFilter) -> Self {
        self.keys = Some(keys);
        self
    }

    fn raw<'k>(key: &K::SelfType<'k>) -> Vec<u8> {
        K::as_bytes(key).as_ref().to_vec()
    }

    /// The value of `key`, if any.
    pub(crate) fn get<'k>(&self, key: impl Borrow<K::SelfType<'k>>) -> Result<Option<Vec<u8>>> {
        let key = key.borrow();
        let raw = Self::raw(key);
        if let Some(v) = self
            .touched
            .get(&raw)
            .or_else(|| self.below.iter().find_map(|layer| layer.get(&raw)))
        {
            return Ok(v.clone());
        }
        if let Some(v) = self.found.and_then(|f| f.get(&raw)) {
            return Ok(Some(v));
        }
        if self.keys.is_some_and(|k| !k.may_contain(&raw)) {
            return Ok(None);
        }
        let value = self
            .base
            .get(key)
            .map_err(kv)?
            .map(|g| V::as_bytes(&g.value()).as_ref().to_vec());
        if let (Some(f), Some(v)) = (self.found, &value) {
            f.found(&raw, v);
        }
        Ok(value)
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

    /// Removes `key` (recorded), without looking it up: removing a key that is not there
    /// changes nothing, and looking it up would search redb's B-tree for every removed key.
    pub(crate) fn remove<'k>(&mut self, key: impl Borrow<K::SelfType<'k>>) {
        self.touched.insert(Self::raw(key.borrow()), None);
    }

    /// The changes recorded so far (and forgets them).
    pub(crate) fn take_touched(&mut self) -> Touched {
        std::mem::take(&mut self.touched)
    }

    /// The overlay's and this group's changes to keys in `lo..hi`, newer layers winning.
    fn changes_in(&self, lo: &[u8], hi: Option<&[u8]>) -> BTreeMap<Vec<u8>, Option<Vec<u8>>> {
        let mut out = BTreeMap::new();
        let oldest_first = self.below.iter().rev().copied();
        for layer in oldest_first.chain(std::iter::once(&self.touched)) {
            let upper = hi.map_or(Bound::Unbounded, Bound::Excluded);
            for (k, v) in layer.range::<[u8], _>((Bound::Included(lo), upper)) {
                out.insert(k.clone(), v.clone());
            }
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
    ///
    /// Walks every layer backwards from `hi` in step and stops at the first key whose newest
    /// version is live, so it reads only the keys at the end of the range (an object's extent
    /// lookup costs the same however many of its extents the overlay holds).
    pub(crate) fn last_in(&self, lo: &[u8], hi: &[u8]) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        if lo >= hi {
            return Ok(None);
        }
        let bounds = (Bound::Included(lo), Bound::Excluded(hi));
        // Newest layer first: the first layer holding a key decides its value.
        let mut layers = [&self.touched, self.below[0], self.below[1], self.below[2]]
            .map(|l| l.range::<[u8], _>(bounds).rev().peekable());
        let mut base = self.base.range(lo..hi).map_err(kv)?.rev();
        let mut next_base = || -> Result<Option<(Vec<u8>, Vec<u8>)>> {
            base.next()
                .transpose()
                .map_err(kv)
                .map(|e| e.map(|(k, v)| (k.value().to_vec(), v.value().to_vec())))
        };
        let mut base_head = next_base()?;
        loop {
            let greatest = layers
                .iter_mut()
                .filter_map(|l| l.peek().map(|(k, _)| k.as_slice()))
                .chain(base_head.as_ref().map(|(k, _)| k.as_slice()))
                .max()
                .map(<[u8]>::to_vec);
            let Some(key) = greatest else {
                return Ok(None);
            };
            let mut newest: Option<Option<Vec<u8>>> = None;
            for layer in &mut layers {
                if let Some((_, v)) = layer.next_if(|(k, _)| **k == key) {
                    newest.get_or_insert_with(|| v.clone());
                }
            }
            if base_head.as_ref().is_some_and(|(k, _)| *k == key) {
                if let Some((_, v)) = base_head.take() {
                    newest.get_or_insert(Some(v));
                }
                base_head = next_base()?;
            }
            if let Some(Some(v)) = newest {
                return Ok(Some((key, v)));
            }
        }
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
        // The live layer over a frozen one: a key only in the frozen layer shows through, a key
        // in both shows the live value, a removal in the live layer hides the frozen value.
        let mut frozen = Touched::new();
        frozen.insert(b"a".to_vec(), Some(b"frozen".to_vec()));
        frozen.insert(b"d".to_vec(), Some(b"old".to_vec()));
        frozen.insert(b"f".to_vec(), Some(b"frozen".to_vec()));
        let mut live = Touched::new();
        live.insert(b"c".to_vec(), None);
        live.insert(b"d".to_vec(), Some(b"over".to_vec()));
        live.insert(b"e".to_vec(), Some(b"over".to_vec()));
        live.insert(b"f".to_vec(), None);
        // A group in flight over both: its value wins over theirs, its removal hides theirs.
        let mut in_flight = Touched::new();
        in_flight.insert(b"a".to_vec(), None);
        in_flight.insert(b"h".to_vec(), Some(b"flying".to_vec()));
        let r = db.begin_read().unwrap();
        {
            let base = r.open_table(T).unwrap();
            let t = Layered::new(&base, [&in_flight, &live, &frozen]);
            assert_eq!(t.get(b"a".as_slice()).unwrap(), None, "removed in flight");
            assert_eq!(t.get(b"h".as_slice()).unwrap(), Some(b"flying".to_vec()));
            assert_eq!(t.last_in(b"a", b"z").unwrap().unwrap().0, b"h".to_vec());
        }
        in_flight.clear();
        let base = r.open_table(T).unwrap();
        let mut t = Layered::new(&base, [&in_flight, &live, &frozen]);
        t.insert(b"b".as_slice(), b"mine".as_slice()).unwrap();
        assert!(t.get(b"g".as_slice()).unwrap().is_some());
        assert_eq!(t.get(b"c".as_slice()).unwrap(), None, "removed below");
        assert_eq!(
            t.get(b"f".as_slice()).unwrap(),
            None,
            "frozen value removed live"
        );
        for k in ["g", "c", "f"] {
            t.remove(k.as_bytes());
        }
        assert_eq!(t.get(b"g".as_slice()).unwrap(), None, "removed here");
        t.insert(b"e".as_slice(), b"mine".as_slice()).unwrap();
        assert_eq!(t.get(b"a".as_slice()).unwrap(), Some(b"frozen".to_vec()));
        assert_eq!(t.get(b"c".as_slice()).unwrap(), None);
        assert_eq!(t.get(b"d".as_slice()).unwrap(), Some(b"over".to_vec()));
        let all: Vec<(Vec<u8>, Vec<u8>)> = t.range(b"", None, usize::MAX).unwrap();
        let want: Vec<(Vec<u8>, Vec<u8>)> =
            [("a", "frozen"), ("b", "mine"), ("d", "over"), ("e", "mine")]
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
        assert_eq!(touched.len(), 5);
    }

    /// A key of a small alphabet, so that layers often hold the same keys.
    fn key() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
        proptest::collection::vec(0u8..4, 1..4)
    }

    fn layer() -> impl proptest::strategy::Strategy<Value = Touched> {
        proptest::collection::btree_map(
            key(),
            proptest::option::of(proptest::collection::vec(0u8..255, 0..3)),
            0..12,
        )
    }

    proptest::proptest! {
        /// `last_in` walks the layers backwards in step; it must find what merging every layer
        /// (newest wins, removals hide) and taking the greatest live key in the range finds.
        #[test]
        fn last_in_matches_the_merged_layers(
            base in proptest::collection::btree_map(key(), proptest::collection::vec(0u8..255, 0..3), 0..12),
            older in layer(),
            newer in layer(),
            newest in layer(),
            mine in layer(),
            lo in key(),
            hi in key(),
        ) {
            let db = redb::Builder::new()
                .create_with_backend(InMemoryBackend::new())
                .unwrap();
            let w = db.begin_write().unwrap();
            {
                let mut t = w.open_table(T).unwrap();
                for (k, v) in &base {
                    t.insert(k.as_slice(), v.as_slice()).unwrap();
                }
            }
            w.commit().unwrap();
            let r = db.begin_read().unwrap();
            let table = r.open_table(T).unwrap();
            let mut t = Layered::new(&table, [&newest, &newer, &older]);
            for (k, v) in &mine {
                match v {
                    Some(v) => t.insert(k.as_slice(), v.as_slice()).unwrap(),
                    None => t.remove(k.as_slice()),
                }
            }
            let mut merged: BTreeMap<Vec<u8>, Option<Vec<u8>>> =
                base.iter().map(|(k, v)| (k.clone(), Some(v.clone()))).collect();
            for l in [&older, &newer, &newest, &mine] {
                merged.extend(l.iter().map(|(k, v)| (k.clone(), v.clone())));
            }
            let want = if lo < hi {
                merged
                    .range(lo.clone()..hi.clone())
                    .rev()
                    .find_map(|(k, v)| v.clone().map(|v| (k.clone(), v)))
            } else {
                None
            };
            proptest::prop_assert_eq!(t.last_in(&lo, &hi).unwrap(), want);
        }
    }
}
