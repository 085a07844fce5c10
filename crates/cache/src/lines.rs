//! The in-memory line table: which core line each cache line holds, valid and dirty bits per
//! 4 KiB sector, one LRU list per I/O class, the dirty list in dirty-since order, the free list.
//!
//! Owns the mapping and every list invariant (a mapped line is on exactly its class's LRU list;
//! a line is on the dirty list iff it has dirty sectors; a free line is unmapped). Pure: no I/O.
//! It must never let two cache lines map the same core line.

use crate::convert::line_u32;
use crate::ioclass::CLASS_SLOTS;
use std::collections::{BTreeSet, HashMap};
use std::hash::{BuildHasherDefault, Hasher};

/// A multiplicative (Fibonacci) hasher for core line numbers: one multiply instead of SipHash
/// on the hit path. Keys are block numbers chosen by the storage stack, not by an adversary.
#[derive(Debug, Default, Clone, Copy)]
pub struct LineHasher(u64);

impl Hasher for LineHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (n ^ self.0)
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            .rotate_left(29);
    }
}

type LineMap = HashMap<u64, u32, BuildHasherDefault<LineHasher>>;

/// Marks "no line" in links and "no core line" in lines.
pub const NONE: u32 = u32::MAX;
/// Marks an unmapped cache line.
pub const UNMAPPED: u64 = u64::MAX;

/// State of one cache line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Line {
    /// Core line number held, or [`UNMAPPED`].
    pub core_line: u64,
    /// Valid sectors (bit i = 4 KiB sector i of the line).
    pub valid: u16,
    /// Dirty sectors (a subset of `valid`).
    pub dirty: u16,
    /// I/O class id of the line.
    pub class: u8,
    /// Bumped on every data change; cleaning checks it did not move.
    pub gen: u32,
    /// When the line became dirty, ms.
    pub dirty_since_ms: u64,
    /// True while the background cleaner has the line's data in flight to the core.
    pub cleaning: bool,
}

impl Line {
    const EMPTY: Line = Line {
        core_line: UNMAPPED,
        valid: 0,
        dirty: 0,
        class: 0,
        gen: 0,
        dirty_since_ms: 0,
        cleaning: false,
    };
}

#[derive(Debug, Clone, Copy)]
struct Link {
    prev: u32,
    next: u32,
}

#[derive(Debug, Clone, Copy)]
struct List {
    head: u32,
    tail: u32,
    len: u32,
}

impl List {
    const EMPTY: List = List {
        head: NONE,
        tail: NONE,
        len: 0,
    };

    fn push_back(&mut self, links: &mut [Link], i: u32) {
        links[i as usize] = Link {
            prev: self.tail,
            next: NONE,
        };
        if self.tail == NONE {
            self.head = i;
        } else {
            links[self.tail as usize].next = i;
        }
        self.tail = i;
        self.len += 1;
    }

    fn remove(&mut self, links: &mut [Link], i: u32) {
        let Link { prev, next } = links[i as usize];
        if prev == NONE {
            self.head = next;
        } else {
            links[prev as usize].next = next;
        }
        if next == NONE {
            self.tail = prev;
        } else {
            links[next as usize].prev = prev;
        }
        links[i as usize] = Link {
            prev: NONE,
            next: NONE,
        };
        self.len -= 1;
    }
}

/// The line table.
#[derive(Debug)]
pub struct LineTable {
    lines: Vec<Line>,
    map: LineMap,
    lru: Vec<Link>,
    classes: [List; CLASS_SLOTS],
    dirty_links: Vec<Link>,
    dirty: List,
    dirty_by_core: BTreeSet<(u64, u32)>,
    free: Vec<u32>,
    is_free: Vec<bool>,
    /// Lines whose mapping, validity, dirt or class changed since [`LineTable::take_changed`]
    /// last drained them, each once: what a metadata flush must look at.
    changed: Vec<u32>,
    is_changed: Vec<bool>,
}

impl LineTable {
    /// Remembers that line `i`'s metadata entry may have changed.
    fn note(&mut self, i: u32) {
        if !self.is_changed[i as usize] {
            self.is_changed[i as usize] = true;
            self.changed.push(i);
        }
    }

    /// The lines whose entry may have changed since the last call, each once.
    pub fn take_changed(&mut self) -> Vec<u32> {
        for &i in &self.changed {
            self.is_changed[i as usize] = false;
        }
        std::mem::take(&mut self.changed)
    }

    /// Marks `lines` changed again (their entries were not persisted after all).
    pub fn restore_changed(&mut self, lines: impl IntoIterator<Item = u32>) {
        for i in lines {
            self.note(i);
        }
    }

    /// `lines` empty cache lines, all free (allocated lowest index first).
    pub fn new(lines: u32) -> Self {
        Self {
            lines: vec![Line::EMPTY; lines as usize],
            map: LineMap::with_capacity_and_hasher(lines as usize, Default::default()),
            lru: vec![
                Link {
                    prev: NONE,
                    next: NONE
                };
                lines as usize
            ],
            classes: [List::EMPTY; CLASS_SLOTS],
            dirty_links: vec![
                Link {
                    prev: NONE,
                    next: NONE
                };
                lines as usize
            ],
            dirty: List::EMPTY,
            dirty_by_core: BTreeSet::new(),
            free: (0..lines).rev().collect(),
            is_free: vec![true; lines as usize],
            changed: Vec::new(),
            is_changed: vec![false; lines as usize],
        }
    }

    /// Number of cache lines.
    pub fn len(&self) -> u32 {
        line_u32(self.lines.len())
    }

    /// True if the table has no lines.
    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }

    /// The line's state.
    pub fn line(&self, i: u32) -> &Line {
        &self.lines[i as usize]
    }

    /// The cache line holding `core_line`.
    pub fn lookup(&self, core_line: u64) -> Option<u32> {
        self.map.get(&core_line).copied()
    }

    /// Free lines.
    pub fn free_lines(&self) -> u32 {
        line_u32(self.free.len())
    }

    /// Mapped lines.
    pub fn mapped_lines(&self) -> u32 {
        line_u32(self.map.len())
    }

    /// Lines with dirty sectors.
    pub fn dirty_lines(&self) -> u32 {
        self.dirty.len
    }

    /// Mapped lines of class `class`.
    pub fn class_lines(&self, class: u8) -> u32 {
        self.classes[class as usize].len
    }

    /// Moves a mapped line to the most-recently-used end of its class list.
    pub fn touch(&mut self, i: u32) {
        let c = self.lines[i as usize].class as usize;
        self.classes[c].remove(&mut self.lru, i);
        self.classes[c].push_back(&mut self.lru, i);
    }

    /// Maps a free line to `core_line` in `class` with no valid sector; `None` if no line is
    /// free. The caller checked `core_line` is not mapped.
    pub fn alloc(&mut self, core_line: u64, class: u8) -> Option<u32> {
        let i = self.free.pop()?;
        self.is_free[i as usize] = false;
        self.install(i, core_line, class, 0, 0, 0);
        Some(i)
    }

    /// Maps unmapped line `i` as loaded from metadata; call [`LineTable::rebuild_free`] after
    /// installing lines that were on the free list.
    pub fn install(
        &mut self,
        i: u32,
        core_line: u64,
        class: u8,
        valid: u16,
        dirty: u16,
        now_ms: u64,
    ) {
        self.note(i);
        self.lines[i as usize] = Line {
            core_line,
            valid,
            dirty: 0,
            class,
            gen: 0,
            dirty_since_ms: 0,
            cleaning: false,
        };
        self.map.insert(core_line, i);
        self.classes[class as usize].push_back(&mut self.lru, i);
        if dirty != 0 {
            self.mark_dirty(i, dirty, now_ms);
        }
    }

    /// Sets sectors `mask` valid and dirty.
    pub fn mark_dirty(&mut self, i: u32, mask: u16, now_ms: u64) {
        self.note(i);
        let l = &mut self.lines[i as usize];
        if l.dirty == 0 && mask != 0 {
            l.dirty_since_ms = now_ms;
            self.dirty.push_back(&mut self.dirty_links, i);
            self.dirty_by_core.insert((l.core_line, i));
        }
        l.valid |= mask;
        l.dirty |= mask;
        l.gen = l.gen.wrapping_add(1);
    }

    /// Sets sectors `mask` valid and clean.
    pub fn mark_clean_valid(&mut self, i: u32, mask: u16) {
        self.note(i);
        let l = &mut self.lines[i as usize];
        l.valid |= mask;
        l.gen = l.gen.wrapping_add(1);
        self.clear_dirty(i, mask);
    }

    /// Clears dirty bits `mask` (data stays valid).
    pub fn clear_dirty(&mut self, i: u32, mask: u16) {
        self.note(i);
        let l = &mut self.lines[i as usize];
        let was = l.dirty;
        l.dirty &= !mask;
        if was != 0 && l.dirty == 0 {
            let core = l.core_line;
            self.dirty.remove(&mut self.dirty_links, i);
            self.dirty_by_core.remove(&(core, i));
        }
    }

    /// Invalidates sectors `mask` (clean or dirty).
    pub fn invalidate(&mut self, i: u32, mask: u16) {
        self.note(i);
        self.clear_dirty(i, mask);
        let l = &mut self.lines[i as usize];
        l.valid &= !mask;
        l.gen = l.gen.wrapping_add(1);
    }

    /// Unmaps line `i` (its data is dropped); it is not free until [`LineTable::release`].
    pub fn unmap(&mut self, i: u32) {
        self.note(i);
        let l = self.lines[i as usize];
        if l.core_line == UNMAPPED {
            return;
        }
        self.clear_dirty(i, u16::MAX);
        self.classes[l.class as usize].remove(&mut self.lru, i);
        self.map.remove(&l.core_line);
        self.lines[i as usize] = Line {
            gen: l.gen.wrapping_add(1),
            ..Line::EMPTY
        };
    }

    /// Puts an unmapped line on the free list (its metadata says invalid on media).
    pub fn release(&mut self, i: u32) {
        if self.lines[i as usize].core_line == UNMAPPED && !self.is_free[i as usize] {
            self.is_free[i as usize] = true;
            self.free.push(i);
        }
    }

    /// Recomputes the free list as every unmapped line (lowest index allocated first).
    pub fn rebuild_free(&mut self) {
        self.free = (0..self.len())
            .rev()
            .filter(|&i| self.lines[i as usize].core_line == UNMAPPED)
            .collect();
        for (i, l) in self.lines.iter().enumerate() {
            self.is_free[i] = l.core_line == UNMAPPED;
        }
    }

    /// Moves a mapped line to another class's list.
    pub fn set_class(&mut self, i: u32, class: u8) {
        self.note(i);
        let old = self.lines[i as usize].class as usize;
        self.classes[old].remove(&mut self.lru, i);
        self.lines[i as usize].class = class;
        self.classes[class as usize].push_back(&mut self.lru, i);
    }

    /// Least-recently-used lines of `class`, oldest first, at most `limit`.
    pub fn lru_lines(&self, class: u8, limit: usize) -> Vec<u32> {
        let mut out = Vec::new();
        let mut i = self.classes[class as usize].head;
        while i != NONE && out.len() < limit {
            out.push(i);
            i = self.lru[i as usize].next;
        }
        out
    }

    /// Dirty lines, longest dirty first, at most `limit`, dirty since at most `before_ms`.
    pub fn oldest_dirty(&self, limit: usize, before_ms: Option<u64>) -> Vec<u32> {
        let mut out = Vec::new();
        let mut i = self.dirty.head;
        while i != NONE && out.len() < limit {
            let l = &self.lines[i as usize];
            if before_ms.is_some_and(|b| l.dirty_since_ms > b) {
                break;
            }
            if !l.cleaning {
                out.push(i);
            }
            i = self.dirty_links[i as usize].next;
        }
        out
    }

    /// Dirty lines in ascending core address, at most `limit`.
    pub fn dirty_by_core(&self, limit: usize) -> Vec<u32> {
        self.dirty_by_core
            .iter()
            .map(|&(_, i)| i)
            .filter(|&i| !self.lines[i as usize].cleaning)
            .take(limit)
            .collect()
    }

    /// Sets the line's cleaning flag.
    pub fn set_cleaning(&mut self, i: u32, on: bool) {
        self.lines[i as usize].cleaning = on;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_entry_change_is_noted_once_and_drained() {
        let mut t = LineTable::new(4);
        assert!(t.take_changed().is_empty());
        let a = t.alloc(100, 1).unwrap();
        t.mark_dirty(a, 0b11, 5);
        t.touch(a);
        assert_eq!(
            t.take_changed(),
            vec![a],
            "noted once; a touch changes no entry"
        );
        assert!(t.take_changed().is_empty());
        t.clear_dirty(a, 0b1);
        let b = t.alloc(200, 1).unwrap();
        t.set_cleaning(b, true);
        let mut got = t.take_changed();
        got.sort_unstable();
        assert_eq!(got, vec![a.min(b), a.max(b)]);
        t.unmap(b);
        t.restore_changed([a]);
        let mut got = t.take_changed();
        got.sort_unstable();
        assert_eq!(got, vec![a.min(b), a.max(b)]);
    }

    #[test]
    fn lists_follow_mapping_dirt_and_touches() {
        let mut t = LineTable::new(4);
        let a = t.alloc(100, 1).unwrap();
        let b = t.alloc(200, 1).unwrap();
        let c = t.alloc(50, 2).unwrap();
        assert_eq!((a, b, c), (0, 1, 2));
        assert_eq!(t.lru_lines(1, 10), vec![a, b]);
        t.touch(a);
        assert_eq!(t.lru_lines(1, 10), vec![b, a]);
        t.mark_dirty(b, 0b1, 10);
        t.mark_dirty(c, 0b10, 20);
        t.mark_dirty(a, 0b1, 30);
        assert_eq!(t.oldest_dirty(10, None), vec![b, c, a]);
        assert_eq!(t.oldest_dirty(10, Some(20)), vec![b, c]);
        assert_eq!(t.dirty_by_core(10), vec![c, a, b]);
        t.clear_dirty(c, 0b10);
        assert_eq!(t.dirty_lines(), 2);
        assert_eq!(t.line(c).valid, 0b10);
        t.unmap(b);
        assert_eq!(t.lookup(200), None);
        assert_eq!(t.dirty_lines(), 1);
        assert_eq!(t.free_lines(), 1);
        t.release(b);
        assert_eq!(t.free_lines(), 2);
        assert_eq!(t.class_lines(1), 1);
        t.invalidate(a, 0b1);
        assert_eq!(
            (t.line(a).valid, t.line(a).dirty, t.dirty_lines()),
            (0, 0, 0)
        );
    }
}
