//! The onode cache: committed metadata (size, whole extent map, the attributes inside the onode,
//! and those of the xattr table read so far) of recently read objects, so a read that hits it
//! needs no KV lookup.
//!
//! Owns a byte-bounded CLOCK-evicted map from (collection, object) to an immutable snapshot of the
//! object's metadata. Coherence with commits: entries are filled by readers holding the
//! store's shared lock, from a KV snapshot taken under it, and by the committer (holding the
//! exclusive lock) for the objects a group created, from the group's own changes; the
//! committer removes every other object a group touched after its KV commit and before the
//! lock is released, so no reader can see or insert metadata older than the last commit. It
//! must never hold an entry for an object whose metadata changed after the entry was filled.

use crate::codec::{Extent, Onode};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Objects whose extent map would take more than this are not cached (their reads look up only
/// the extents they need).
pub(crate) const MAX_CACHED_EXTENT_BYTES: usize = 256 * 1024;

/// Fixed bookkeeping charged per entry, bytes.
const ENTRY_OVERHEAD_BYTES: usize = 128;
/// Attributes at most this long are remembered in an entry once read (explicit limit).
pub(crate) const MAX_CACHED_ATTR_BYTES: usize = 256;
/// Most attributes (present or absent) one entry remembers (explicit limit).
pub(crate) const MAX_CACHED_ATTRS: usize = 8;

/// Committed metadata of one object.
#[derive(Debug)]
pub(crate) struct CachedObject {
    /// Logical size.
    pub(crate) size_bytes: u64,
    /// Extents in logical order: every one when `whole_map`, else none (an object whose map is
    /// too large to cache: reads look up the extents they need).
    pub(crate) extents: Vec<Extent>,
    /// Whether `extents` is the whole extent map.
    pub(crate) whole_map: bool,
    /// The attributes inside the onode, sorted by name.
    pub(crate) inline_attrs: Vec<(String, Vec<u8>)>,
    /// Whether the object may have attributes in the xattr table (the onode's flag).
    pub(crate) spilled: bool,
    /// Attributes of the xattr table looked up while the entry lived, by name (`None`: the
    /// object has no such attribute). Coherent for the same reason as the rest of the entry:
    /// filled by readers under the shared lock, and the whole entry is dropped when a commit
    /// touches the object.
    attrs: Mutex<Vec<(String, Option<Vec<u8>>)>>,
}

impl CachedObject {
    /// Metadata of an object from its onode and its whole extent map if known, no table
    /// attribute remembered yet.
    pub(crate) fn new(node: Onode, extents: Option<Vec<Extent>>) -> Self {
        CachedObject {
            size_bytes: node.size_bytes,
            whole_map: extents.is_some(),
            extents: extents.unwrap_or_default(),
            inline_attrs: node.attrs,
            spilled: node.spilled,
            attrs: Mutex::new(Vec::new()),
        }
    }

    /// An attribute as far as the entry knows it: `Some(None)` when it is known to be absent,
    /// `None` when it may be in the xattr table and was not looked up yet.
    pub(crate) fn attr(&self, name: &str) -> Option<Option<Vec<u8>>> {
        if let Ok(i) = self
            .inline_attrs
            .binary_search_by(|(n, _)| n.as_str().cmp(name))
        {
            return Some(Some(self.inline_attrs[i].1.clone()));
        }
        if !self.spilled {
            return Some(None);
        }
        let attrs = self.attrs.lock().unwrap_or_else(|p| p.into_inner());
        attrs
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    }

    /// Remembers an attribute just read from the xattr table under the shared lock, within the
    /// limits.
    pub(crate) fn remember_attr(&self, name: &str, value: Option<&[u8]>) {
        if name.len() > MAX_CACHED_ATTR_BYTES
            || value.is_some_and(|v| v.len() > MAX_CACHED_ATTR_BYTES)
        {
            return;
        }
        let mut attrs = self.attrs.lock().unwrap_or_else(|p| p.into_inner());
        if attrs.len() < MAX_CACHED_ATTRS && !attrs.iter().any(|(n, _)| n == name) {
            attrs.push((name.to_string(), value.map(<[u8]>::to_vec)));
        }
    }

    /// Bytes the entry is charged against the cache's budget.
    pub(crate) fn charge(&self, key_bytes: usize) -> usize {
        ENTRY_OVERHEAD_BYTES
            + key_bytes
            + self
                .extents
                .iter()
                .map(|e| std::mem::size_of::<Extent>() + 4 * e.crcs.len())
                .sum::<usize>()
            + self
                .inline_attrs
                .iter()
                .map(|(n, v)| 2 * std::mem::size_of::<Vec<u8>>() + n.len() + v.len())
                .sum::<usize>()
    }
}

/// One cached object: its metadata, whether a reader used it since the clock hand last
/// passed (CLOCK's reference bit), its charge, and the generation of its place in the ring.
#[derive(Debug)]
struct Slot {
    object: Arc<CachedObject>,
    referenced: bool,
    charge: usize,
    generation: u64,
}

/// The cache's state: a map for lookups and a ring (insertion order, the CLOCK hand at its
/// front) for eviction. A hit only sets the slot's reference bit: no reordering, unlike an
/// LRU list, which costs two tree updates per hit. Ring places whose generation no longer
/// matches the slot's (the object was invalidated or inserted again) are stale and skipped.
#[derive(Debug, Default)]
struct Inner {
    map: HashMap<Arc<[u8]>, Slot, foldhash::fast::RandomState>,
    ring: VecDeque<(Arc<[u8]>, u64)>,
    generation: u64,
    bytes: usize,
}

impl Inner {
    /// Drops stale ring places once they outnumber the live ones (amortized: each insert adds
    /// one place, each compaction halves the ring at least).
    fn compact_ring(&mut self) {
        if self.ring.len() > 2 * self.map.len() + RING_SLACK {
            let map = &self.map;
            self.ring
                .retain(|(k, g)| map.get(k).is_some_and(|s| s.generation == *g));
        }
    }

    /// Evicts by CLOCK until the cache fits `max_bytes`: a referenced slot at the hand loses its
    /// bit and goes round once more, an unreferenced one is evicted.
    fn evict_to(&mut self, max_bytes: usize) {
        while self.bytes > max_bytes {
            let Some((k, g)) = self.ring.pop_front() else {
                break;
            };
            let Some(slot) = self.map.get_mut(&k) else {
                continue;
            };
            if slot.generation != g {
                continue;
            }
            if slot.referenced {
                slot.referenced = false;
                self.ring.push_back((k, g));
            } else if let Some(slot) = self.map.remove(&k) {
                self.bytes -= slot.charge;
            }
        }
    }
}

/// Stale ring places tolerated beyond twice the live entries before a compaction.
const RING_SLACK: usize = 1024;

/// Keys up to this long are built on the stack for a lookup.
const STACK_KEY_BYTES: usize = 256;

/// A byte-bounded cache of object metadata, evicting by CLOCK (an approximation of LRU whose
/// hits do not reorder anything).
#[derive(Debug)]
pub(crate) struct OnodeCache {
    inner: Mutex<Inner>,
    max_bytes: usize,
    /// Lookups that found their object, and those that did not (for the store's stats).
    hits: AtomicU64,
    misses: AtomicU64,
}

/// Bytes of the collection's length at the start of a cache key (a whole u64: no name is too
/// long for it, so no two pairs share a key whatever a lookup is given).
const KEY_LEN_BYTES: usize = 8;

/// Writes the cache key of (collection, object) into `out`: the collection's length, the
/// collection, the object, so that no two pairs share a key.
fn put_key(out: &mut [u8], coll: &str, obj: &str) {
    out[..KEY_LEN_BYTES].copy_from_slice(&(coll.len() as u64).to_be_bytes());
    out[KEY_LEN_BYTES..KEY_LEN_BYTES + coll.len()].copy_from_slice(coll.as_bytes());
    out[KEY_LEN_BYTES + coll.len()..].copy_from_slice(obj.as_bytes());
}

fn key_len(coll: &str, obj: &str) -> usize {
    KEY_LEN_BYTES + coll.len() + obj.len()
}

fn key(coll: &str, obj: &str) -> Vec<u8> {
    let mut k = vec![0u8; key_len(coll, obj)];
    put_key(&mut k, coll, obj);
    k
}

/// Calls `f` with the key of (collection, object), built without allocating when short.
fn with_key<R>(coll: &str, obj: &str, f: impl FnOnce(&[u8]) -> R) -> R {
    let n = key_len(coll, obj);
    if n <= STACK_KEY_BYTES {
        let mut buf = [0u8; STACK_KEY_BYTES];
        put_key(&mut buf[..n], coll, obj);
        f(&buf[..n])
    } else {
        f(&key(coll, obj))
    }
}

impl OnodeCache {
    /// An empty cache holding at most `max_bytes` (0 disables it).
    pub(crate) fn new(max_bytes: usize) -> Self {
        Self {
            inner: Mutex::new(Inner::default()),
            max_bytes,
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    /// Lookups so far that found their object, and those that did not.
    pub(crate) fn hits_and_misses(&self) -> (u64, u64) {
        (
            self.hits.load(Ordering::Relaxed),
            self.misses.load(Ordering::Relaxed),
        )
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The cached metadata of an object, marking it recently used.
    pub(crate) fn get(&self, coll: &str, obj: &str) -> Option<Arc<CachedObject>> {
        let found = with_key(coll, obj, |k| {
            let mut g = self.lock();
            let slot = g.map.get_mut(k)?;
            slot.referenced = true;
            Some(slot.object.clone())
        });
        let counter = if found.is_some() {
            &self.hits
        } else {
            &self.misses
        };
        counter.fetch_add(1, Ordering::Relaxed);
        found
    }

    /// The cached metadata of an object without marking it used or counting the lookup: for
    /// hints that must not change what the cache keeps or reports.
    pub(crate) fn peek(&self, coll: &str, obj: &str) -> Option<Arc<CachedObject>> {
        with_key(coll, obj, |k| {
            self.lock().map.get(k).map(|s| s.object.clone())
        })
    }

    /// Caches an object's committed metadata (read from a snapshot at least as new as the last
    /// commit, or built by the committer from what it just committed), evicting by CLOCK beyond
    /// the budget.
    pub(crate) fn insert(&self, coll: &str, obj: &str, o: Arc<CachedObject>) {
        let k: Arc<[u8]> = with_key(coll, obj, |k| Arc::from(k));
        let charge = o.charge(k.len());
        if charge > self.max_bytes / 4 {
            return;
        }
        let mut g = self.lock();
        let inner = &mut *g;
        inner.generation += 1;
        let generation = inner.generation;
        let slot = Slot {
            object: o,
            referenced: false,
            charge,
            generation,
        };
        if let Some(old) = inner.map.insert(k.clone(), slot) {
            inner.bytes -= old.charge;
        }
        inner.ring.push_back((k, generation));
        inner.bytes += charge;
        inner.evict_to(self.max_bytes);
        inner.compact_ring();
    }

    /// Forgets an object (its metadata changed).
    pub(crate) fn invalidate(&self, coll: &str, obj: &str) {
        with_key(coll, obj, |k| {
            let mut g = self.lock();
            if let Some(slot) = g.map.remove(k) {
                g.bytes -= slot.charge;
            }
        })
    }

    /// Places in the eviction ring, stale ones included (tests check it stays bounded).
    #[cfg(test)]
    fn ring_len(&self) -> usize {
        self.lock().ring.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(blocks: usize) -> Arc<CachedObject> {
        spilled_obj(blocks, Vec::new())
    }

    /// An object whose onode holds `inline` and may have table attributes as well.
    fn spilled_obj(blocks: usize, inline: Vec<(String, Vec<u8>)>) -> Arc<CachedObject> {
        let node = Onode {
            size_bytes: blocks as u64 * 4096,
            attrs: inline,
            spilled: true,
            ..Onode::default()
        };
        Arc::new(CachedObject::new(
            node,
            Some(vec![Extent {
                lblock: 0,
                pblock: 1,
                crcs: vec![7; blocks],
            }]),
        ))
    }

    #[test]
    fn attributes_are_remembered_within_limits() {
        let o = obj(1);
        assert_eq!(o.attr("v"), None, "not looked up yet");
        o.remember_attr("v", Some(b"1"));
        o.remember_attr("gone", None);
        o.remember_attr("v", Some(b"2"));
        assert_eq!(
            o.attr("v"),
            Some(Some(b"1".to_vec())),
            "the first lookup stays"
        );
        assert_eq!(o.attr("gone"), Some(None), "known absent");
        o.remember_attr("big", Some(&[0u8; MAX_CACHED_ATTR_BYTES + 1]));
        assert_eq!(o.attr("big"), None, "too long to remember");
        for i in 0..MAX_CACHED_ATTRS + 2 {
            o.remember_attr(&format!("a{i}"), Some(b"x"));
        }
        let remembered = (0..MAX_CACHED_ATTRS + 2)
            .filter(|i| o.attr(&format!("a{i}")).is_some())
            .count();
        assert_eq!(
            remembered,
            MAX_CACHED_ATTRS - 2,
            "at most MAX_CACHED_ATTRS in all"
        );
    }

    #[test]
    fn inline_attributes_answer_without_a_lookup() {
        let inline = vec![("_v".to_string(), b"7".to_vec())];
        let o = spilled_obj(1, inline.clone());
        assert_eq!(o.attr("_v"), Some(Some(b"7".to_vec())));
        assert_eq!(
            o.attr("big"),
            None,
            "a spilled object may have it in the table"
        );
        let node = Onode {
            size_bytes: 4096,
            attrs: inline,
            spilled: false,
            ..Onode::default()
        };
        let whole = CachedObject::new(node, Some(Vec::new()));
        assert_eq!(
            whole.attr("big"),
            Some(None),
            "nothing spilled: known absent"
        );
        assert!(whole.charge(0) > CachedObject::new(Onode::default(), Some(Vec::new())).charge(0));
    }

    #[test]
    fn clock_evicts_the_unused_within_budget_and_invalidation() {
        let one = obj(10).charge(key("c", "o0").len());
        let c = OnodeCache::new(one * 4);
        for i in 0..4 {
            c.insert("c", &format!("o{i}"), obj(10));
        }
        assert!(c.get("c", "o0").is_some());
        c.insert("c", "o4", obj(10));
        assert!(
            c.get("c", "o1").is_none(),
            "the unused entry at the hand is evicted"
        );
        assert!(c.get("c", "o0").is_some() && c.get("c", "o4").is_some());
        c.invalidate("c", "o0");
        assert!(c.get("c", "o0").is_none());
        assert!(c.get("c\0", "o4").is_none(), "keys do not collide");
        c.insert("c", "huge", obj(1000));
        assert!(
            c.get("c", "huge").is_none(),
            "entries above a quarter of the budget are skipped"
        );
        let off = OnodeCache::new(0);
        off.insert("c", "o", obj(1));
        assert!(off.get("c", "o").is_none());
    }

    #[test]
    fn stale_ring_places_stay_bounded_under_invalidation() {
        let c = OnodeCache::new(1 << 30);
        for round in 0..50 {
            for i in 0..100 {
                c.insert("c", &format!("o{i}"), obj(1));
                if round % 2 == 0 {
                    c.invalidate("c", &format!("o{i}"));
                }
            }
        }
        assert!(
            c.ring_len() <= 2 * 100 + RING_SLACK + 1,
            "ring {} places for at most 100 objects",
            c.ring_len()
        );
        assert!((0..100).all(|i| c.get("c", &format!("o{i}")).is_some()));
        let long = "x".repeat(STACK_KEY_BYTES + 10);
        c.insert("c", &long, obj(1));
        assert!(c.get("c", &long).is_some(), "long keys are found too");
        c.invalidate("c", &long);
        assert!(c.get("c", &long).is_none());
    }
}
