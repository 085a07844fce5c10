//! Extent maps: an object's logical blocks as extent records, kept either inside its onode
//! (a small map, `codec::Onode::extents`) or in the `extents` table under its prefix.
//!
//! Owns finding the extents that intersect a range of logical blocks, punching a range out of a
//! map (splitting the extents at its edges), and inserting extents (split at
//! [`MAX_EXTENT_BLOCKS`], merged with a physically contiguous left neighbour), the same way in
//! both places ([`Lookup`], [`Records`]). Extents of one object never overlap. It must never
//! decide where data goes or free space, nor where a map lives: callers own the allocator, the
//! blocks that a punch returns, and the onode.

use crate::codec::{block_key, prefix_end, split_block_key, Extent, MAX_EXTENT_BLOCKS};
use crate::error::Result;
use crate::overlay::Layered;

/// The extents table as staging and reads see it (changes recorded for the redo log).
pub(crate) type ExtTable<'t> = Layered<'t, &'static [u8], &'static [u8]>;

/// Looking one object's extent records up, wherever they are.
pub(crate) trait Lookup {
    /// The record with the greatest first block below `lblock`, if any.
    fn before(&self, lblock: u64) -> Result<Option<Extent>>;
    /// The records whose first block is in `from..to` (`to`: `None` for no end), in order.
    fn starting_in(&self, from: u64, to: Option<u64>) -> Result<Vec<Extent>>;
}

/// Changing one object's extent records, wherever they are.
pub(crate) trait Records: Lookup {
    /// Writes one record (at most [`MAX_EXTENT_BLOCKS`] long), replacing any record with the
    /// same first block.
    fn put(&mut self, e: &Extent) -> Result<()>;
    /// Removes the record starting at `lblock`.
    fn remove(&mut self, lblock: u64);
}

/// An object's records in the extents table (`T`: a shared or exclusive borrow of the table).
pub(crate) struct InTable<'p, T> {
    /// The table.
    pub(crate) table: T,
    /// The object's key prefix (`codec::object_prefix`).
    pub(crate) prefix: &'p [u8],
}

fn decode_item((k, v): (Vec<u8>, Vec<u8>)) -> Result<Extent> {
    let (_, lblock) = split_block_key(&k)?;
    Extent::decode(lblock, &v)
}

impl<'t, T: std::ops::Deref<Target = ExtTable<'t>>> Lookup for InTable<'_, T> {
    fn before(&self, lblock: u64) -> Result<Option<Extent>> {
        self.table
            .last_in(self.prefix, &block_key(self.prefix, lblock))?
            .map(decode_item)
            .transpose()
    }

    fn starting_in(&self, from: u64, to: Option<u64>) -> Result<Vec<Extent>> {
        let end_key = match to {
            Some(b) => Some(block_key(self.prefix, b)),
            None => prefix_end(self.prefix),
        };
        self.table
            .range(
                &block_key(self.prefix, from),
                end_key.as_deref(),
                usize::MAX,
            )?
            .into_iter()
            .map(decode_item)
            .collect()
    }
}

impl<'t, T: std::ops::DerefMut<Target = ExtTable<'t>>> Records for InTable<'_, T> {
    fn put(&mut self, e: &Extent) -> Result<()> {
        debug_assert!(e.blocks() > 0 && e.blocks() <= MAX_EXTENT_BLOCKS);
        self.table.insert(
            block_key(self.prefix, e.lblock).as_slice(),
            e.encode().as_slice(),
        )?;
        Ok(())
    }

    fn remove(&mut self, lblock: u64) {
        self.table.remove(block_key(self.prefix, lblock).as_slice());
    }
}

/// An onode's inline map: records sorted by first block.
impl Lookup for Vec<Extent> {
    fn before(&self, lblock: u64) -> Result<Option<Extent>> {
        let i = self.partition_point(|e| e.lblock < lblock);
        Ok(i.checked_sub(1).map(|i| self[i].clone()))
    }

    fn starting_in(&self, from: u64, to: Option<u64>) -> Result<Vec<Extent>> {
        let i = self.partition_point(|e| e.lblock < from);
        Ok(self[i..]
            .iter()
            .take_while(|e| to.is_none_or(|to| e.lblock < to))
            .cloned()
            .collect())
    }
}

impl Records for Vec<Extent> {
    fn put(&mut self, e: &Extent) -> Result<()> {
        debug_assert!(e.blocks() > 0 && e.blocks() <= MAX_EXTENT_BLOCKS);
        match self.binary_search_by_key(&e.lblock, |x| x.lblock) {
            Ok(i) => self[i] = e.clone(),
            Err(i) => self.insert(i, e.clone()),
        }
        Ok(())
    }

    fn remove(&mut self, lblock: u64) {
        if let Ok(i) = self.binary_search_by_key(&lblock, |x| x.lblock) {
            Vec::remove(self, i);
        }
    }
}

/// One object's map as staging changes it: inside its onode or in the table.
pub(crate) enum Place<'a, 't> {
    /// The onode's inline map.
    Inline(&'a mut Vec<Extent>),
    /// The object's records in the extents table.
    Table(InTable<'a, &'a mut ExtTable<'t>>),
}

impl Lookup for Place<'_, '_> {
    fn before(&self, lblock: u64) -> Result<Option<Extent>> {
        match self {
            Place::Inline(v) => v.before(lblock),
            Place::Table(t) => t.before(lblock),
        }
    }

    fn starting_in(&self, from: u64, to: Option<u64>) -> Result<Vec<Extent>> {
        match self {
            Place::Inline(v) => v.starting_in(from, to),
            Place::Table(t) => t.starting_in(from, to),
        }
    }
}

impl Records for Place<'_, '_> {
    fn put(&mut self, e: &Extent) -> Result<()> {
        match self {
            Place::Inline(v) => v.put(e),
            Place::Table(t) => t.put(e),
        }
    }

    fn remove(&mut self, lblock: u64) {
        match self {
            Place::Inline(v) => Records::remove(*v, lblock),
            Place::Table(t) => t.remove(lblock),
        }
    }
}

/// Extents of the map `r` intersecting logical blocks `from..to` (`to`: `None` for the end of
/// the object), in logical order.
pub(crate) fn overlapping(r: &impl Lookup, from: u64, to: Option<u64>) -> Result<Vec<Extent>> {
    let mut out = Vec::new();
    if matches!(to, Some(b) if b <= from) {
        return Ok(out);
    }
    // The record starting at or before `from` (extents never overlap: only it can cover
    // `from`), then those starting inside the range: a one-block range needs the first alone.
    let after_from = from.saturating_add(1);
    if let Some(e) = r.before(after_from)? {
        if e.lend() > from {
            out.push(e);
        }
    }
    if matches!(to, Some(b) if b <= after_from) {
        return Ok(out);
    }
    out.extend(r.starting_in(after_from, to)?);
    Ok(out)
}

/// Every extent of the map `r`, in logical order.
pub(crate) fn all(r: &impl Lookup) -> Result<Vec<Extent>> {
    overlapping(r, 0, None)
}

/// Removes logical blocks `from..to` (`None`: to the end) from the map `r`, keeping the parts
/// of edge extents outside the range. Returns the removed pieces (whose physical blocks the
/// caller frees).
pub(crate) fn punch(r: &mut impl Records, from: u64, to: Option<u64>) -> Result<Vec<Extent>> {
    let hit = overlapping(r, from, to)?;
    let to = to.unwrap_or(u64::MAX);
    let mut removed = Vec::with_capacity(hit.len());
    for e in hit {
        r.remove(e.lblock);
        if e.lblock < from {
            r.put(&e.slice(e.lblock, from))?;
        }
        if e.lend() > to {
            r.put(&e.slice(to, e.lend()))?;
        }
        removed.push(e.slice(from, to));
    }
    Ok(removed)
}

/// Inserts a new extent over logical blocks the map `r` does not cover (punch them first), in
/// records of at most [`MAX_EXTENT_BLOCKS`], merging the first into its left neighbour when the
/// two are contiguous both logically and physically and fit in one record.
pub(crate) fn insert(r: &mut impl Records, e: Extent) -> Result<()> {
    let mut e = e;
    if e.lblock > 0 {
        // The record with the greatest first block below `e`'s: the only one that can end
        // where `e` starts (one lookup, where `overlapping` would take two).
        if let Some(l) = r.before(e.lblock)? {
            if l.lend() == e.lblock
                && l.pblock + l.blocks() == e.pblock
                && l.blocks() + e.blocks() <= MAX_EXTENT_BLOCKS
            {
                let mut crcs = l.crcs;
                crcs.extend_from_slice(&e.crcs);
                e = Extent {
                    lblock: l.lblock,
                    pblock: l.pblock,
                    crcs,
                };
            }
        }
    }
    let mut at = 0;
    while at < e.blocks() {
        let n = (e.blocks() - at).min(MAX_EXTENT_BLOCKS);
        r.put(&e.slice(e.lblock + at, e.lblock + at + n))?;
        at += n;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::object_prefix;
    use crate::kv::EXTENTS;
    use redb::backends::InMemoryBackend;

    fn ext(lblock: u64, pblock: u64, n: u32) -> Extent {
        Extent {
            lblock,
            pblock,
            crcs: (0..n)
                .map(|i| 1000 + u32::try_from(lblock).unwrap() + i)
                .collect(),
        }
    }

    /// Runs `check` on an object's map in the extents table, beside a neighbour's that must stay
    /// untouched, then on an inline map.
    fn in_both_places(check: impl Fn(&mut dyn Probe)) {
        let db = redb::Database::builder()
            .create_with_backend(InMemoryBackend::new())
            .unwrap();
        let w = db.begin_write().unwrap();
        w.open_table(EXTENTS).unwrap();
        w.commit().unwrap();
        let r = db.begin_read().unwrap();
        let below = crate::logged::Touched::new();
        let base = r.open_table(EXTENTS).unwrap();
        let mut t = Layered::new(&base, [&below, &below, &below]);
        let (other, mine) = (object_prefix(1, "aa"), object_prefix(1, "a"));
        let mut neighbour = InTable {
            table: &mut t,
            prefix: &other,
        };
        neighbour.put(&ext(0, 900, 4)).unwrap();
        check(&mut InTable {
            table: &mut t,
            prefix: &mine,
        });
        let neighbour = InTable {
            table: &t,
            prefix: &other,
        };
        assert_eq!(all(&neighbour).unwrap(), vec![ext(0, 900, 4)]);
        check(&mut Vec::new());
    }

    /// The map operations on either kind of map, as one object-safe interface for the tests.
    trait Probe {
        fn punch(&mut self, from: u64, to: Option<u64>) -> Vec<Extent>;
        fn insert(&mut self, e: Extent);
        fn overlapping(&self, from: u64, to: Option<u64>) -> Vec<Extent>;
        fn all(&self) -> Vec<Extent> {
            self.overlapping(0, None)
        }
    }

    impl<R: Records> Probe for R {
        fn punch(&mut self, from: u64, to: Option<u64>) -> Vec<Extent> {
            punch(self, from, to).unwrap()
        }
        fn insert(&mut self, e: Extent) {
            insert(self, e).unwrap()
        }
        fn overlapping(&self, from: u64, to: Option<u64>) -> Vec<Extent> {
            overlapping(self, from, to).unwrap()
        }
    }

    fn spans(exts: &[Extent]) -> Vec<(u64, u64, u64)> {
        exts.iter()
            .map(|e| (e.lblock, e.pblock, e.blocks()))
            .collect()
    }

    #[test]
    fn punch_splits_edges_and_returns_the_middle() {
        in_both_places(|m| {
            m.insert(ext(0, 10, 8));
            m.insert(ext(20, 40, 4));
            assert_eq!(spans(&m.punch(3, Some(22))), vec![(3, 13, 5), (20, 40, 2)]);
            assert_eq!(spans(&m.all()), vec![(0, 10, 3), (22, 42, 2)]);
            assert_eq!(
                m.all()[1].crcs,
                vec![1022, 1023],
                "crcs follow their blocks"
            );
            assert!(m.punch(5, Some(20)).is_empty(), "hole");
            assert_eq!(m.punch(1, None).len(), 2);
            assert_eq!(m.all(), vec![ext(0, 10, 1)]);
        });
    }

    #[test]
    fn punch_inside_one_extent_leaves_both_sides() {
        in_both_places(|m| {
            m.insert(ext(0, 10, 8));
            assert_eq!(m.punch(2, Some(3)), vec![ext(0, 10, 8).slice(2, 3)]);
            assert_eq!(
                m.all(),
                vec![ext(0, 10, 8).slice(0, 2), ext(0, 10, 8).slice(3, 8)]
            );
        });
    }

    #[test]
    fn insert_merges_contiguous_neighbours_and_splits_long_extents() {
        in_both_places(|m| {
            m.insert(ext(0, 10, 3));
            m.insert(ext(3, 13, 2));
            m.insert(ext(5, 99, 1));
            let exts = m.all();
            assert_eq!(exts.len(), 2);
            assert_eq!((exts[0].blocks(), exts[0].crcs[3]), (5, 1003));
            let long = u32::try_from(MAX_EXTENT_BLOCKS).unwrap() * 2 + 7;
            m.insert(ext(100, 1000, long));
            let exts = m.overlapping(100, None);
            assert_eq!(exts.len(), 3);
            assert_eq!(exts.iter().map(Extent::blocks).sum::<u64>(), long as u64);
            assert_eq!(exts[1].pblock, 1000 + MAX_EXTENT_BLOCKS);
            assert_eq!(m.overlapping(1, Some(2)).len(), 1);
            assert!(m.overlapping(6, Some(100)).is_empty());
        });
    }
}
