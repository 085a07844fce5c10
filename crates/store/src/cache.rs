//! The onode cache: committed metadata (size, whole extent map, and the small attributes read
//! so far) of recently read objects, so a read that hits it needs no KV lookup.
//!
//! Owns a byte-bounded LRU map from (collection, object) to an immutable snapshot of the
//! object's metadata. Coherence with commits: entries are filled only by readers holding the
//! store's shared lock, from a KV snapshot taken under it, and the committer (holding the
//! exclusive lock) removes every object a group touched after its KV commit and before the lock
//! is released, so no reader can see or insert metadata older than the last commit. It must
//! never hold an entry for an object whose metadata changed after the entry was filled.

use crate::codec::Extent;
use std::collections::{BTreeMap, HashMap};
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
    /// Every extent, in logical order.
    pub(crate) extents: Vec<Extent>,
    /// Small attributes looked up while the entry lived, by name (`None`: the object has no
    /// such attribute). Coherent for the same reason as the rest of the entry: filled by
    /// readers under the shared lock, and the whole entry is dropped when a commit touches
    /// the object.
    attrs: Mutex<Vec<(String, Option<Vec<u8>>)>>,
}

impl CachedObject {
    /// Metadata of an object with no attributes remembered yet.
    pub(crate) fn new(size_bytes: u64, extents: Vec<Extent>) -> Self {
        CachedObject {
            size_bytes,
            extents,
            attrs: Mutex::new(Vec::new()),
        }
    }

    /// A remembered attribute: `Some(None)` when it is known to be absent, `None` when it was
    /// not looked up yet.
    pub(crate) fn attr(&self, name: &str) -> Option<Option<Vec<u8>>> {
        let attrs = self.attrs.lock().unwrap_or_else(|p| p.into_inner());
        attrs
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    }

    /// Remembers an attribute just read from the KV under the shared lock, within the limits.
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
    }
}

#[derive(Debug, Default)]
struct Inner {
    map: HashMap<Vec<u8>, (Arc<CachedObject>, u64, usize)>,
    lru: BTreeMap<u64, Vec<u8>>,
    tick: u64,
    bytes: usize,
}

/// A byte-bounded LRU cache of object metadata.
#[derive(Debug)]
pub(crate) struct OnodeCache {
    inner: Mutex<Inner>,
    max_bytes: usize,
}

fn key(coll: &str, obj: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(2 + coll.len() + obj.len());
    k.extend_from_slice(&(coll.len() as u16).to_be_bytes());
    k.extend_from_slice(coll.as_bytes());
    k.extend_from_slice(obj.as_bytes());
    k
}

impl OnodeCache {
    /// An empty cache holding at most `max_bytes` (0 disables it).
    pub(crate) fn new(max_bytes: usize) -> Self {
        Self {
            inner: Mutex::new(Inner::default()),
            max_bytes,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The cached metadata of an object, marking it recently used.
    pub(crate) fn get(&self, coll: &str, obj: &str) -> Option<Arc<CachedObject>> {
        let k = key(coll, obj);
        let mut g = self.lock();
        let inner = &mut *g;
        let (o, tick, _) = inner.map.get_mut(&k)?;
        let o = o.clone();
        inner.tick += 1;
        let old = std::mem::replace(tick, inner.tick);
        inner.lru.remove(&old);
        inner.lru.insert(inner.tick, k);
        Some(o)
    }

    /// Caches an object's metadata (read from a snapshot at least as new as the last commit),
    /// evicting the least recently used entries beyond the budget.
    pub(crate) fn insert(&self, coll: &str, obj: &str, o: Arc<CachedObject>) {
        let k = key(coll, obj);
        let charge = o.charge(k.len());
        if charge > self.max_bytes / 4 {
            return;
        }
        let mut g = self.lock();
        let inner = &mut *g;
        inner.tick += 1;
        let tick = inner.tick;
        if let Some((_, old_tick, old_charge)) = inner.map.insert(k.clone(), (o, tick, charge)) {
            inner.lru.remove(&old_tick);
            inner.bytes -= old_charge;
        }
        inner.lru.insert(tick, k);
        inner.bytes += charge;
        while inner.bytes > self.max_bytes {
            let Some((_, victim)) = inner.lru.pop_first() else {
                break;
            };
            if let Some((_, _, c)) = inner.map.remove(&victim) {
                inner.bytes -= c;
            }
        }
    }

    /// Forgets an object (its metadata changed).
    pub(crate) fn invalidate(&self, coll: &str, obj: &str) {
        let k = key(coll, obj);
        let mut g = self.lock();
        let inner = &mut *g;
        if let Some((_, tick, c)) = inner.map.remove(&k) {
            inner.lru.remove(&tick);
            inner.bytes -= c;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(blocks: usize) -> Arc<CachedObject> {
        Arc::new(CachedObject::new(
            blocks as u64 * 4096,
            vec![Extent {
                lblock: 0,
                pblock: 1,
                crcs: vec![7; blocks],
            }],
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
    fn lru_within_budget_and_invalidation() {
        let one = obj(10).charge(key("c", "o0").len());
        let c = OnodeCache::new(one * 4);
        for i in 0..4 {
            c.insert("c", &format!("o{i}"), obj(10));
        }
        assert!(c.get("c", "o0").is_some());
        c.insert("c", "o4", obj(10));
        assert!(c.get("c", "o1").is_none(), "least recently used evicted");
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
}
