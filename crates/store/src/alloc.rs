//! The space allocator: which device blocks are free.
//!
//! Owns an in-memory set of free extents (start block -> length), rebuilt at mount from the block
//! references in the KV (so it can never disagree with committed metadata). Allocation is
//! next-fit: a single extent when one is large enough (sequential placement for big writes),
//! otherwise several. It must never hand out a block twice, nor accept the release of a block
//! that is already free.

use crate::error::{Result, StoreError};
use std::collections::BTreeMap;

/// Free-extent allocator over blocks `0..total_blocks`.
#[derive(Debug, Clone)]
pub struct Allocator {
    free: BTreeMap<u64, u64>,
    total_blocks: u64,
    free_blocks: u64,
    cursor: u64,
}

impl Allocator {
    /// An allocator where every block in `first_usable..total_blocks` is free except the
    /// `used` extents `(start, len)` (need not be sorted); overlapping, empty or out-of-range
    /// extents are metadata corruption.
    pub fn from_used(
        total_blocks: u64,
        first_usable: u64,
        used: &mut [(u64, u64)],
    ) -> Result<Self> {
        used.sort_unstable();
        if let Some(&(s, _)) = used.iter().find(|&&(_, l)| l == 0) {
            return Err(StoreError::Corrupt(format!("empty extent at block {s}")));
        }
        if let Some(w) = used.windows(2).find(|w| w[0].0 + w[0].1 > w[1].0) {
            return Err(StoreError::Corrupt(format!(
                "block {} is referenced twice",
                w[1].0
            )));
        }
        if let Some(&(s, l)) = used
            .iter()
            .find(|&&(s, l)| s < first_usable || s.checked_add(l).is_none_or(|e| e > total_blocks))
        {
            return Err(StoreError::Corrupt(format!(
                "blocks {s}..{} lie outside the data area",
                s.saturating_add(l)
            )));
        }
        let mut a = Self {
            free: BTreeMap::new(),
            total_blocks,
            free_blocks: 0,
            cursor: first_usable,
        };
        let mut next = first_usable;
        for &(s, l) in used.iter() {
            if s > next {
                a.free.insert(next, s - next);
                a.free_blocks += s - next;
            }
            next = s + l;
        }
        if total_blocks > next {
            a.free.insert(next, total_blocks - next);
            a.free_blocks += total_blocks - next;
        }
        Ok(a)
    }

    /// Blocks currently free.
    pub fn free_blocks(&self) -> u64 {
        self.free_blocks
    }

    /// Blocks managed (including reserved ones).
    pub fn total_blocks(&self) -> u64 {
        self.total_blocks
    }

    /// Number of free extents.
    pub fn free_extents(&self) -> usize {
        self.free.len()
    }

    /// 0 when all free space is one extent, approaching 1 as it splinters
    /// (1 - largest free extent / free space).
    pub fn fragmentation(&self) -> f64 {
        if self.free_blocks == 0 {
            return 0.0;
        }
        let largest = self.free.values().copied().max().unwrap_or(0);
        1.0 - largest as f64 / self.free_blocks as f64
    }

    /// Allocates `n` blocks as extents `(start, len)`, in placement order.
    pub fn allocate(&mut self, n: u64) -> Result<Vec<(u64, u64)>> {
        if n > self.free_blocks {
            return Err(StoreError::NoSpace {
                needed_blocks: n,
                free_blocks: self.free_blocks,
            });
        }
        if n == 0 {
            return Ok(Vec::new());
        }
        let fit = self
            .free
            .range(self.cursor..)
            .chain(self.free.range(..self.cursor))
            .find(|(_, &len)| len >= n)
            .map(|(&s, _)| s);
        let mut out = Vec::new();
        match fit {
            Some(start) => out.push(self.take(start, n)),
            None => {
                let mut left = n;
                while left > 0 {
                    let Some((&start, &len)) = self
                        .free
                        .range(self.cursor..)
                        .next()
                        .or_else(|| self.free.iter().next())
                    else {
                        break;
                    };
                    let got = self.take(start, len.min(left));
                    left -= got.1;
                    out.push(got);
                }
            }
        }
        Ok(out)
    }

    fn take(&mut self, start: u64, n: u64) -> (u64, u64) {
        let len = self.free.remove(&start).unwrap_or(0);
        let n = n.min(len);
        if len > n {
            self.free.insert(start + n, len - n);
        }
        self.free_blocks -= n;
        self.cursor = start + n;
        (start, n)
    }

    /// True if `block` is in the free set.
    pub fn is_free(&self, block: u64) -> bool {
        self.any_free(block, 1)
    }

    /// True if any block of `start..start + len` is in the free set.
    pub fn any_free(&self, start: u64, len: u64) -> bool {
        let end = start.saturating_add(len);
        let before = self
            .free
            .range(..=start)
            .next_back()
            .is_some_and(|(&s, &l)| start < s + l);
        before || self.free.range(start..end).next().is_some()
    }

    /// Returns `len` blocks at `start` to the free set, merging neighbours.
    pub fn release(&mut self, start: u64, len: u64) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        let end = start + len;
        if end > self.total_blocks {
            return Err(StoreError::Corrupt(format!(
                "release of blocks {start}..{end} past the end"
            )));
        }
        let prev = self.free.range(..=start).next_back().map(|(&s, &l)| (s, l));
        if let Some((s, l)) = prev {
            if s + l > start {
                return Err(StoreError::Corrupt(format!("double free of block {start}")));
            }
        }
        if let Some((&s, _)) = self.free.range(start..).next() {
            if s < end {
                return Err(StoreError::Corrupt(format!("double free of block {s}")));
            }
        }
        let (mut new_start, mut new_len) = (start, len);
        if let Some((s, l)) = prev {
            if s + l == start {
                self.free.remove(&s);
                new_start = s;
                new_len += l;
            }
        }
        if let Some(l) = self.free.remove(&end) {
            new_len += l;
        }
        self.free.insert(new_start, new_len);
        self.free_blocks += len;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocate_release_and_detect_misuse() {
        let mut a = Allocator::from_used(100, 1, &mut [(50, 1), (5, 2)]).unwrap();
        assert_eq!(a.free_blocks(), 96);
        let e = a.allocate(4).unwrap();
        assert_eq!(e, vec![(1, 4)]);
        let e2 = a.allocate(10).unwrap();
        assert_eq!(e2, vec![(7, 10)]);
        a.release(1, 4).unwrap();
        assert!(matches!(a.release(2, 1), Err(StoreError::Corrupt(_))));
        assert!(matches!(a.release(99, 5), Err(StoreError::Corrupt(_))));
        assert!(matches!(a.allocate(1000), Err(StoreError::NoSpace { .. })));
        let total_free = a.free_blocks();
        let all = a.allocate(total_free).unwrap();
        assert_eq!(all.iter().map(|e| e.1).sum::<u64>(), total_free);
        assert_eq!(a.free_blocks(), 0);
        assert_eq!(a.fragmentation(), 0.0);
        for (s, l) in all {
            a.release(s, l).unwrap();
        }
        assert_eq!(a.free_blocks(), total_free);
        assert!(Allocator::from_used(10, 1, &mut [(3, 2), (4, 1)]).is_err());
        assert!(Allocator::from_used(10, 1, &mut [(0, 1)]).is_err());
        assert!(Allocator::from_used(10, 1, &mut [(8, 3)]).is_err());
        assert!(Allocator::from_used(10, 1, &mut [(4, 0)]).is_err());
        let b = Allocator::from_used(10, 1, &mut [(3, 4)]).unwrap();
        assert!(b.any_free(1, 3) && !b.any_free(3, 4) && b.any_free(6, 2) && b.is_free(7));
    }

    #[test]
    fn fragmentation_grows_with_holes() {
        let mut used: Vec<(u64, u64)> = (1..100).step_by(2).map(|b| (b, 1)).collect();
        let a = Allocator::from_used(100, 1, &mut used).unwrap();
        assert!(a.fragmentation() > 0.9);
        let b = Allocator::from_used(100, 1, &mut []).unwrap();
        assert_eq!(b.fragmentation(), 0.0);
    }
}
