//! Indexed binary min-heap over dense slot ids, with O(log N) insert, remove and re-key.
//!
//! Owns heap ordering only; it never looks at requests. Used by mClock (three tag heaps over
//! active clients) and TBF (bucket deadlines). Memory: two `u32` per slot plus one entry per
//! member; nothing is allocated per operation once capacity is reached.

const ABSENT: u32 = u32::MAX;

#[derive(Clone, Copy, Debug)]
struct Entry {
    key: (u64, u64),
    slot: u32,
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
        self.entries.first().map(|e| (e.slot, e.key))
    }

    /// Inserts `slot` or changes its key.
    pub fn upsert(&mut self, slot: u32, key: (u64, u64)) {
        let s = slot as usize;
        if s >= self.pos.len() {
            self.pos.resize(s + 1, ABSENT);
        }
        let p = self.pos[s];
        if p == ABSENT {
            self.entries.push(Entry { key, slot });
            let i = self.entries.len() - 1;
            self.pos[s] = i as u32;
            self.sift_up(i);
        } else {
            let i = p as usize;
            let old = self.entries[i].key;
            self.entries[i].key = key;
            if key < old {
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
        self.pos[self.entries[a].slot as usize] = a as u32;
        self.pos[self.entries[b].slot as usize] = b as u32;
    }

    fn sift_up(&mut self, mut i: usize) {
        while i > 0 {
            let parent = (i - 1) / 2;
            if self.entries[i].key < self.entries[parent].key {
                self.swap(i, parent);
                i = parent;
            } else {
                break;
            }
        }
    }

    fn sift_down(&mut self, mut i: usize) {
        let n = self.entries.len();
        loop {
            let l = 2 * i + 1;
            let r = l + 1;
            let mut m = i;
            if l < n && self.entries[l].key < self.entries[m].key {
                m = l;
            }
            if r < n && self.entries[r].key < self.entries[m].key {
                m = r;
            }
            if m == i {
                break;
            }
            self.swap(i, m);
            i = m;
        }
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
}
