//! Per-collection usage: how many objects a collection holds and their logical bytes.
//!
//! Every group commit carries what its transactions added and removed, per collection, and
//! applies it when the group is finalized (under the store's lock, with its KV changes);
//! mounting counts it again from the onodes it scans anyway. So a caller (an OSD reporting its
//! PGs' usage to the monitor every few seconds) reads a collection's usage in constant time,
//! where listing it would cost a KV walk over every object.

use std::collections::HashMap;

/// Objects and logical bytes (the sum of their sizes) of one collection.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CollectionUsage {
    /// Objects.
    pub objects: u64,
    /// Sum of the objects' sizes.
    pub bytes: u64,
}

/// What one group changes: per collection id, objects and bytes added (negative: removed).
/// A group touches few collections, so a short list searched in order is enough.
#[derive(Debug, Default)]
pub(crate) struct UsageDelta {
    by_coll: Vec<(u32, i64, i64)>,
}

impl UsageDelta {
    /// Adds `objects` and `bytes` (either may be negative) to collection `coll`.
    pub(crate) fn add(&mut self, coll: u32, objects: i64, bytes: i64) {
        match self.by_coll.iter_mut().find(|(c, _, _)| *c == coll) {
            Some((_, o, b)) => {
                *o += objects;
                *b += bytes;
            }
            None => self.by_coll.push((coll, objects, bytes)),
        }
    }

    /// Objects and bytes added over every collection.
    pub(crate) fn totals(&self) -> (i64, i64) {
        self.by_coll
            .iter()
            .fold((0, 0), |(o, b), (_, do_, db)| (o + do_, b + db))
    }
}

/// The usage of every collection that holds objects, by collection id.
#[derive(Debug, Default)]
pub(crate) struct UsageTable {
    by_coll: HashMap<u32, CollectionUsage>,
}

impl UsageTable {
    /// Counts one object of `bytes` in `coll` (mount's scan of the onodes).
    pub(crate) fn count(&mut self, coll: u32, bytes: u64) {
        let u = self.by_coll.entry(coll).or_default();
        u.objects += 1;
        u.bytes += bytes;
    }

    /// Applies a finalized group's changes; a collection left with nothing is dropped.
    pub(crate) fn apply(&mut self, delta: &UsageDelta) {
        for &(coll, objects, bytes) in &delta.by_coll {
            let u = self.by_coll.entry(coll).or_default();
            u.objects = u.objects.saturating_add_signed(objects);
            u.bytes = u.bytes.saturating_add_signed(bytes);
            if u.objects == 0 && u.bytes == 0 {
                self.by_coll.remove(&coll);
            }
        }
    }

    /// The ids of the collections that hold objects.
    pub(crate) fn collections(&self) -> impl Iterator<Item = u32> + '_ {
        self.by_coll.keys().copied()
    }

    /// The usage of collection `coll` (nothing when it holds no object).
    pub(crate) fn get(&self, coll: u32) -> CollectionUsage {
        self.by_coll.get(&coll).copied().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_delta_sums_per_collection_and_the_table_drops_emptied_ones() {
        let mut d = UsageDelta::default();
        d.add(7, 1, 4096);
        d.add(9, 1, 10);
        d.add(7, 1, 100);
        assert_eq!(d.totals(), (3, 4206));
        let mut t = UsageTable::default();
        t.apply(&d);
        assert_eq!(
            t.get(7),
            CollectionUsage {
                objects: 2,
                bytes: 4196
            }
        );
        let mut gone = UsageDelta::default();
        gone.add(9, -1, -10);
        t.apply(&gone);
        assert_eq!(t.get(9), CollectionUsage::default());
        assert!(!t.by_coll.contains_key(&9));
        t.count(9, 5);
        assert_eq!(t.get(9).objects, 1);
    }
}
