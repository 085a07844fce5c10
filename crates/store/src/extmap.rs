//! Extent maps: an object's logical blocks as extent records in the `extents` table.
//!
//! Owns finding the extents that intersect a range of logical blocks, punching a range out of a
//! map (splitting the extents at its edges), and inserting extents (split at
//! [`MAX_EXTENT_BLOCKS`], merged with a physically contiguous left neighbour). Extents of one
//! object never overlap. It must never decide where data goes or free space: callers own the
//! allocator and the blocks that a punch returns.

use crate::codec::{block_key, prefix_end, split_block_key, Extent, MAX_EXTENT_BLOCKS};
use crate::error::Result;
use crate::overlay::Layered;

/// The extents table as staging and reads see it (changes recorded for the redo log).
pub(crate) type ExtTable<'t> = Layered<'t, &'static [u8], &'static [u8]>;

fn decode_item((k, v): (Vec<u8>, Vec<u8>)) -> Result<Extent> {
    let (_, lblock) = split_block_key(&k)?;
    Extent::decode(lblock, &v)
}

/// Extents of the object with `prefix` intersecting logical blocks `from..to` (`to`: `None` for
/// the end of the object), in logical order.
pub(crate) fn overlapping(
    t: &ExtTable<'_>,
    prefix: &[u8],
    from: u64,
    to: Option<u64>,
) -> Result<Vec<Extent>> {
    let mut out = Vec::new();
    if matches!(to, Some(b) if b <= from) {
        return Ok(out);
    }
    // The record starting at or before `from` (extents never overlap: only it can cover
    // `from`), then those starting inside the range: a one-block range needs the first alone.
    let after_from = from.saturating_add(1);
    let after_key = block_key(prefix, after_from);
    if let Some(item) = t.last_in(prefix, &after_key)? {
        let e = decode_item(item)?;
        if e.lend() > from {
            out.push(e);
        }
    }
    let end_key = match to {
        Some(b) if b <= after_from => return Ok(out),
        Some(b) => Some(block_key(prefix, b)),
        None => prefix_end(prefix),
    };
    for item in t.range(&after_key, end_key.as_deref(), usize::MAX)? {
        out.push(decode_item(item)?);
    }
    Ok(out)
}

/// Every extent of the object with `prefix`, in logical order.
pub(crate) fn all(t: &ExtTable<'_>, prefix: &[u8]) -> Result<Vec<Extent>> {
    overlapping(t, prefix, 0, None)
}

/// Writes one extent record (at most [`MAX_EXTENT_BLOCKS`] long), replacing any record with
/// the same first block.
pub(crate) fn put(t: &mut ExtTable<'_>, prefix: &[u8], e: &Extent) -> Result<()> {
    debug_assert!(e.blocks() > 0 && e.blocks() <= MAX_EXTENT_BLOCKS);
    t.insert(
        block_key(prefix, e.lblock).as_slice(),
        e.encode().as_slice(),
    )?;
    Ok(())
}

/// Removes logical blocks `from..to` (`None`: to the end) from the object's map, keeping the
/// parts of edge extents outside the range. Returns the removed pieces (whose physical blocks
/// the caller frees).
pub(crate) fn punch(
    t: &mut ExtTable<'_>,
    prefix: &[u8],
    from: u64,
    to: Option<u64>,
) -> Result<Vec<Extent>> {
    let hit = overlapping(t, prefix, from, to)?;
    let to = to.unwrap_or(u64::MAX);
    let mut removed = Vec::with_capacity(hit.len());
    for e in hit {
        t.remove(block_key(prefix, e.lblock).as_slice());
        if e.lblock < from {
            put(t, prefix, &e.slice(e.lblock, from))?;
        }
        if e.lend() > to {
            put(t, prefix, &e.slice(to, e.lend()))?;
        }
        removed.push(e.slice(from, to));
    }
    Ok(removed)
}

/// Inserts a new extent over logical blocks the map does not cover (punch them first), in
/// records of at most [`MAX_EXTENT_BLOCKS`], merging the first into its left neighbour when the
/// two are contiguous both logically and physically and fit in one record.
pub(crate) fn insert(t: &mut ExtTable<'_>, prefix: &[u8], e: Extent) -> Result<()> {
    let mut e = e;
    if e.lblock > 0 {
        // The record with the greatest first block below `e`'s: the only one that can end
        // where `e` starts (one lookup, where `overlapping` would take two).
        let left = t
            .last_in(prefix, &block_key(prefix, e.lblock))?
            .map(decode_item)
            .transpose()?;
        if let Some(l) = left {
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
        put(t, prefix, &e.slice(e.lblock + at, e.lblock + at + n))?;
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
            crcs: (0..n).map(|i| 1000 + lblock as u32 + i).collect(),
        }
    }

    fn with_table(f: impl FnOnce(&mut ExtTable<'_>, &[u8])) {
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
        let other = object_prefix(1, "aa");
        put(&mut t, &other, &ext(0, 900, 4)).unwrap();
        f(&mut t, &object_prefix(1, "a"));
        assert_eq!(
            all(&t, &other).unwrap(),
            vec![ext(0, 900, 4)],
            "neighbour untouched"
        );
    }

    #[test]
    fn punch_splits_edges_and_returns_the_middle() {
        with_table(|t, p| {
            insert(t, p, ext(0, 10, 8)).unwrap();
            insert(t, p, ext(20, 40, 4)).unwrap();
            let got = punch(t, p, 3, Some(22)).unwrap();
            let got: Vec<(u64, u64, u64)> = got
                .iter()
                .map(|e| (e.lblock, e.pblock, e.blocks()))
                .collect();
            assert_eq!(got, vec![(3, 13, 5), (20, 40, 2)]);
            let left: Vec<(u64, u64, u64)> = all(t, p)
                .unwrap()
                .iter()
                .map(|e| (e.lblock, e.pblock, e.blocks()))
                .collect();
            assert_eq!(left, vec![(0, 10, 3), (22, 42, 2)]);
            let rest = all(t, p).unwrap();
            assert_eq!(rest[1].crcs, vec![1022, 1023], "crcs follow their blocks");
            assert!(punch(t, p, 5, Some(20)).unwrap().is_empty(), "hole");
            let tail = punch(t, p, 1, None).unwrap();
            assert_eq!(tail.len(), 2);
            assert_eq!(all(t, p).unwrap(), vec![ext(0, 10, 1)]);
        });
    }

    #[test]
    fn punch_inside_one_extent_leaves_both_sides() {
        with_table(|t, p| {
            insert(t, p, ext(0, 10, 8)).unwrap();
            let mid = punch(t, p, 2, Some(3)).unwrap();
            assert_eq!(mid, vec![ext(0, 10, 8).slice(2, 3)]);
            let exts = all(t, p).unwrap();
            assert_eq!(
                exts,
                vec![ext(0, 10, 8).slice(0, 2), ext(0, 10, 8).slice(3, 8)]
            );
        });
    }

    #[test]
    fn insert_merges_contiguous_neighbours_and_splits_long_extents() {
        with_table(|t, p| {
            insert(t, p, ext(0, 10, 3)).unwrap();
            insert(t, p, ext(3, 13, 2)).unwrap();
            insert(t, p, ext(5, 99, 1)).unwrap();
            let exts = all(t, p).unwrap();
            assert_eq!(exts.len(), 2);
            assert_eq!((exts[0].blocks(), exts[0].crcs[3]), (5, 1003));
            let long = MAX_EXTENT_BLOCKS as u32 * 2 + 7;
            insert(t, p, ext(100, 1000, long)).unwrap();
            let exts = overlapping(t, p, 100, None).unwrap();
            assert_eq!(exts.len(), 3);
            assert_eq!(exts.iter().map(Extent::blocks).sum::<u64>(), long as u64);
            assert_eq!(exts[1].pblock, 1000 + MAX_EXTENT_BLOCKS);
            assert_eq!(overlapping(t, p, 1, Some(2)).unwrap().len(), 1);
            assert!(overlapping(t, p, 6, Some(100)).unwrap().is_empty());
        });
    }
}
