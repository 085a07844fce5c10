//! Indexed 4-ary min-heap over dense slot ids, with O(log N) insert, remove and re-key.
//!
//! Owns heap ordering only; it never looks at requests. Used by mClock (tag heaps over active
//! clients) and TBF (bucket deadlines). Entries are 16 bytes and each node has four children
//! (one cache line for a node's children, half the depth of a binary heap): at 100k members a
//! re-key touches ~9 levels instead of ~17. The tie-break key is kept modulo 2^32, which only
//! matters for equal primary keys. Memory: one `u32` per slot plus one entry per member;
//! nothing is allocated per operation once capacity is reached.

use crate::convert::{low32, u32_of};

const ABSENT: u32 = u32::MAX;

const ARITY: usize = 4;

#[derive(Clone, Copy, Debug)]
struct Entry {
    key: u64,
    tie: u32,
    slot: u32,
}

impl Entry {
    /// The ordering key as one integer: primary key, then tie-break.
    #[inline(always)]
    fn k(&self) -> u128 {
        ((self.key as u128) << 32) | self.tie as u128
    }
}

/// Min-heap of slots keyed by `(primary, tie_break)`.
#[derive(Clone, Debug, Default)]
pub struct IndexedHeap {
    entries: Vec<Entry>,
    pos: Vec<u32>,
}

impl IndexedHeap {
    /// An empty heap.
    pub fn new() -> IndexedHeap {
        IndexedHeap::default()
    }

    /// Number of members.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True if no member.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// True if `slot` is a member.
    pub fn contains(&self, slot: u32) -> bool {
        self.pos.get(slot as usize).is_some_and(|&p| p != ABSENT)
    }

    /// Smallest member and its key.
    pub fn peek(&self) -> Option<(u32, (u64, u64))> {
        self.entries
            .first()
            .map(|e| (e.slot, (e.key, e.tie as u64)))
    }

    /// Inserts `slot` or changes its key.
    pub fn upsert(&mut self, slot: u32, key: (u64, u64)) {
        let s = slot as usize;
        if s >= self.pos.len() {
            self.pos.resize(s + 1, ABSENT);
        }
        let p = self.pos[s];
        let e = Entry {
            key: key.0,
            tie: low32(key.1),
            slot,
        };
        if p == ABSENT {
            self.entries.push(e);
            let i = self.entries.len() - 1;
            self.pos[s] = u32_of(i);
            self.sift_up(i);
        } else {
            let i = p as usize;
            let old = self.entries[i].k();
            self.entries[i] = e;
            if e.k() < old {
                self.sift_up(i);
            } else {
                self.sift_down(i);
            }
        }
    }

    /// Removes `slot` if present.
    pub fn remove(&mut self, slot: u32) {
        let Some(&p) = self.pos.get(slot as usize) else {
            return;
        };
        if p == ABSENT {
            return;
        }
        let i = p as usize;
        let last = self.entries.len() - 1;
        self.swap(i, last);
        self.entries.pop();
        self.pos[slot as usize] = ABSENT;
        if i < self.entries.len() {
            self.sift_up(i);
            self.sift_down(i);
        }
    }

    /// Removes and returns the smallest member.
    pub fn pop(&mut self) -> Option<(u32, (u64, u64))> {
        let top = self.peek()?;
        self.remove(top.0);
        Some(top)
    }

    fn swap(&mut self, a: usize, b: usize) {
        self.entries.swap(a, b);
        self.pos[self.entries[a].slot as usize] = u32_of(a);
        self.pos[self.entries[b].slot as usize] = u32_of(b);
    }

    /// Moves the entry at `i` up to its place, shifting parents down into the hole (one `pos`
    /// write per level, no swaps).
    fn sift_up(&mut self, mut i: usize) {
        let e = self.entries[i];
        let k = e.k();
        while i > 0 {
            let parent = (i - 1) / ARITY;
            let p = self.entries[parent];
            if k < p.k() {
                self.entries[i] = p;
                self.pos[p.slot as usize] = u32_of(i);
                i = parent;
            } else {
                break;
            }
        }
        self.entries[i] = e;
        self.pos[e.slot as usize] = u32_of(i);
    }

    /// Moves the entry at `i` down to its place, shifting the smallest child up into the hole.
    fn sift_down(&mut self, mut i: usize) {
        let n = self.entries.len();
        let e = self.entries[i];
        let k = e.k();
        loop {
            let first = ARITY * i + 1;
            if first >= n {
                break;
            }
            let (m, mk) = if first + ARITY <= n {
                // Full node: four children in one cache line, compared without a loop.
                let kids: &[Entry; ARITY] = self.entries[first..first + ARITY]
                    .try_into()
                    .unwrap_or_else(|_| unreachable!("slice of length ARITY"));
                let (k0, k1, k2, k3) = (kids[0].k(), kids[1].k(), kids[2].k(), kids[3].k());
                let (a, ka) = if k1 < k0 { (1, k1) } else { (0, k0) };
                let (b, kb) = if k3 < k2 { (3, k3) } else { (2, k2) };
                if kb < ka {
                    (first + b, kb)
                } else {
                    (first + a, ka)
                }
            } else {
                let mut m = first;
                let mut mk = self.entries[first].k();
                for (c, kid) in self.entries[first + 1..n].iter().enumerate() {
                    let ck = kid.k();
                    if ck < mk {
                        m = first + 1 + c;
                        mk = ck;
                    }
                }
                (m, mk)
            };
            if mk >= k {
                break;
            }
            let child = self.entries[m];
            self.entries[i] = child;
            self.pos[child.slot as usize] = u32_of(i);
            i = m;
        }
        self.entries[i] = e;
        self.pos[e.slot as usize] = u32_of(i);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pops_in_key_order_after_rekeys_and_removals() {
        let mut h = IndexedHeap::new();
        for s in 0..100u32 {
            h.upsert(s, (((s * 37) % 100) as u64, s as u64));
        }
        h.upsert(5, (1000, 5));
        h.remove(7);
        h.remove(7);
        h.upsert(9, (0, 0));
        assert!(!h.contains(7));
        let mut last = (0, 0);
        let mut n = 0;
        while let Some((_, k)) = h.pop() {
            assert!(k >= last);
            last = k;
            n += 1;
        }
        assert_eq!(n, 99);
        assert_eq!(last, (1000, 5));
    }

    #[test]
    fn matches_a_reference_model_under_random_operations() {
        use rand::{Rng, SeedableRng};
        use std::collections::BTreeMap;
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
        let mut h = IndexedHeap::new();
        let mut model: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
        for step in 0..20_000u64 {
            let slot = rng.random_range(0..300u32);
            match rng.random_range(0..4) {
                0 | 1 => {
                    let key = (rng.random_range(0..50u64), step);
                    h.upsert(slot, key);
                    model.insert(slot, key);
                }
                2 => {
                    h.remove(slot);
                    model.remove(&slot);
                }
                _ => {
                    let want = model
                        .iter()
                        .min_by_key(|(s, k)| (**k, **s))
                        .map(|(s, k)| (*s, *k));
                    let got = h.pop();
                    assert_eq!(got.map(|g| g.1), want.map(|w| w.1), "step {step}");
                    if let Some((s, _)) = got {
                        model.remove(&s);
                    }
                }
            }
            assert_eq!(h.len(), model.len());
        }
    }
}
