//! Listing a bucket: a k-way merge of its index shards in key order, with prefix, delimiter
//! (common prefixes), an exclusive start marker and a page size. Each shard is read in pages
//! (`omap_list` with the prefix), so memory stays bounded by the page size times the shard
//! count. A common prefix is emitted once, at its first key, and only if it sorts after the
//! marker; the keys under it are skipped on every shard without being fetched.

use std::collections::VecDeque;

use crate::backend::{Backend, BackendError};
use crate::convert::count_u32;

/// Largest page asked of one shard.
pub const MAX_SHARD_PAGE: u32 = 1000;

/// What to list.
#[derive(Clone, Debug, Default)]
pub struct ListQuery {
    /// Only keys starting with this.
    pub prefix: String,
    /// Roll keys up to the first occurrence of this after the prefix.
    pub delimiter: Option<String>,
    /// Exclusive start: only items sorting after this.
    pub marker: String,
    /// Most items (keys plus common prefixes) returned.
    pub max: usize,
    /// The shards are version index shards: each omap key is `object key \0 version place`,
    /// and prefixes and common prefixes apply to the object key before the `\0`.
    pub versioned: bool,
}

/// One listed item.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Item {
    /// A key and its encoded index entry.
    Object(String, Vec<u8>),
    /// A common prefix (ends with the delimiter).
    Prefix(String),
}

impl Item {
    /// The key or prefix: the marker that continues after this item.
    pub fn marker(&self) -> &str {
        match self {
            Item::Object(k, _) | Item::Prefix(k) => k,
        }
    }
}

/// One page of a listing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListPage {
    /// Items in key order.
    pub items: Vec<Item>,
    /// Whether more items follow the last one.
    pub truncated: bool,
}

struct Cursor<'a> {
    name: &'a str,
    after: Vec<u8>,
    buf: VecDeque<(Vec<u8>, Vec<u8>)>,
    done: bool,
}

/// The common prefix of `key` under `prefix` and `delimiter`, if the key has one.
pub fn common_prefix<'k>(key: &'k str, prefix: &str, delimiter: Option<&str>) -> Option<&'k str> {
    let d = delimiter.filter(|d| !d.is_empty())?;
    let rest = key.get(prefix.len()..)?;
    rest.find(d).map(|i| &key[..prefix.len() + i + d.len()])
}

/// Entries asked of each shard for a page of `max` items over `shards` shards. Keys spread
/// evenly over the shards (crc32c), so a shard holds about `(max + 1) / shards` of the page's
/// keys (binomial, standard deviation under its square root): three deviations more, plus 8,
/// make a second round trip rare while reading about 1.5x the page instead of 2x. A shard
/// that runs dry is simply read again.
pub fn shard_page(max: usize, shards: usize) -> u32 {
    let mean = (max + 1).div_ceil(shards.max(1));
    count_u32((mean + 3 * mean.isqrt() + 8).min(MAX_SHARD_PAGE as usize))
}

/// Lists one page over the index shards named `shards`.
pub async fn list(
    backend: &dyn Backend,
    shards: &[String],
    q: &ListQuery,
) -> Result<ListPage, BackendError> {
    let mut page = ListPage::default();
    if q.max == 0 || shards.is_empty() {
        return Ok(page);
    }
    let per_shard = shard_page(q.max, shards.len());
    let mut cursors: Vec<Cursor<'_>> = shards
        .iter()
        .map(|name| Cursor {
            name,
            after: q.marker.as_bytes().to_vec(),
            buf: VecDeque::new(),
            done: false,
        })
        .collect();
    let prefix = q.prefix.as_bytes();
    loop {
        // Refill every drained shard at once: one round trip for all of them, not one each.
        let drained: Vec<usize> = (0..cursors.len())
            .filter(|&i| cursors[i].buf.is_empty() && !cursors[i].done)
            .collect();
        let pages = futures::future::try_join_all(drained.iter().map(|&i| {
            let c = &cursors[i];
            backend.omap_list(c.name, &c.after, prefix, per_shard)
        }))
        .await?;
        for (i, (entries, more)) in drained.into_iter().zip(pages) {
            let c = &mut cursors[i];
            if let Some((k, _)) = entries.last() {
                c.after.clone_from(k);
            }
            c.done = !more || entries.is_empty();
            c.buf.extend(entries);
        }
        let Some(best) = cursors
            .iter()
            .enumerate()
            .filter_map(|(i, c)| c.buf.front().map(|(k, _)| (i, k)))
            .min_by(|a, b| a.1.cmp(b.1))
            .map(|(i, _)| i)
        else {
            return Ok(page);
        };
        let (k, v) = cursors[best].buf.pop_front().expect("head exists");
        let key = String::from_utf8(k)
            .map_err(|_| BackendError::Cluster("index key is not UTF-8".into()))?;
        let name = match q.versioned {
            true => key.split('\0').next().unwrap_or_default(),
            false => key.as_str(),
        };
        let item = match common_prefix(name, &q.prefix, q.delimiter.as_deref()) {
            Some(cp) => {
                skip_prefix(&mut cursors, cp.as_bytes());
                if cp.as_bytes() <= q.marker.as_bytes() {
                    continue;
                }
                Item::Prefix(cp.to_string())
            }
            None => Item::Object(key, v),
        };
        if page.items.len() == q.max {
            page.truncated = true;
            return Ok(page);
        }
        page.items.push(item);
    }
}

/// Drops every key under `cp` from the buffers and moves exhausted buffers past it. Object
/// keys are UTF-8, which never contains the byte 0xFF, so `cp + 0xFF` sorts after every key
/// under `cp` and before every other key greater than `cp`.
fn skip_prefix(cursors: &mut [Cursor<'_>], cp: &[u8]) {
    let mut past = cp.to_vec();
    past.push(0xFF);
    for c in cursors.iter_mut() {
        while c.buf.front().is_some_and(|(k, _)| k.starts_with(cp)) {
            c.buf.pop_front();
        }
        if c.buf.is_empty() && c.after < past {
            c.after.clone_from(&past);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{MemBackend, OmapPage};
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Counts the omap reads and the entries they return.
    #[derive(Default)]
    struct Counting {
        mem: MemBackend,
        reads: AtomicUsize,
        entries: AtomicUsize,
    }

    #[async_trait::async_trait]
    impl Backend for Counting {
        async fn put(&self, name: &str, data: &[u8]) -> Result<(), BackendError> {
            self.mem.put(name, data).await
        }
        async fn read_range(&self, n: &str, o: u64, l: u64) -> Result<bytes::Bytes, BackendError> {
            self.mem.read_range(n, o, l).await
        }
        async fn remove(&self, name: &str) -> Result<(), BackendError> {
            self.mem.remove(name).await
        }
        async fn omap_set(&self, n: &str, e: &[(Vec<u8>, Vec<u8>)]) -> Result<(), BackendError> {
            self.mem.omap_set(n, e).await
        }
        async fn omap_remove(&self, name: &str, keys: &[Vec<u8>]) -> Result<(), BackendError> {
            self.mem.omap_remove(name, keys).await
        }
        async fn version(&self, name: &str) -> Result<u64, BackendError> {
            self.mem.version(name).await
        }
        async fn omap_set_if(
            &self,
            name: &str,
            entries: &[(Vec<u8>, Vec<u8>)],
            expected: u64,
        ) -> Result<bool, BackendError> {
            self.mem.omap_set_if(name, entries, expected).await
        }
        async fn omap_list(
            &self,
            name: &str,
            after: &[u8],
            prefix: &[u8],
            max: u32,
        ) -> Result<(OmapPage, bool), BackendError> {
            let r = self.mem.omap_list(name, after, prefix, max).await?;
            self.reads.fetch_add(1, Ordering::SeqCst);
            self.entries.fetch_add(r.0.len(), Ordering::SeqCst);
            Ok(r)
        }
    }

    #[test]
    fn shard_pages() {
        assert_eq!(shard_page(1000, 16), 63 + 21 + 8);
        assert_eq!(shard_page(1000, 1), MAX_SHARD_PAGE);
        assert_eq!(shard_page(1, 16), 1 + 3 + 8);
        assert_eq!(shard_page(5, 0), 6 + 6 + 8);
    }

    #[tokio::test]
    async fn a_full_page_reads_about_one_and_a_half_pages() {
        let b = Counting::default();
        let shards: Vec<String> = (0..16).map(|i| format!("idx.{i}")).collect();
        let keys: Vec<String> = (0..20_000).map(|i| format!("k/{i:07}")).collect();
        for k in &keys {
            let shard = &shards[crc_fast::crc32_iscsi(k.as_bytes()) as usize % shards.len()];
            b.omap_set(shard, &[(k.as_bytes().to_vec(), vec![1])])
                .await
                .unwrap();
        }
        let mut marker = String::new();
        let mut got = Vec::new();
        let mut pages = 0;
        loop {
            let q = ListQuery {
                marker: marker.clone(),
                max: 1000,
                ..Default::default()
            };
            let page = list(&b, &shards, &q).await.unwrap();
            pages += 1;
            got.extend(page.items.iter().map(|i| i.marker().to_string()));
            if !page.truncated {
                break;
            }
            marker = got.last().unwrap().clone();
        }
        assert_eq!(got, keys);
        assert_eq!(pages, 20);
        let (reads, entries) = (b.reads.into_inner(), b.entries.into_inner());
        // 16 shard reads per page, plus an occasional refill of a shard that ran dry
        assert!(reads <= 20 * 16 + 20, "{reads} omap reads");
        assert!(entries <= 20 * 1600, "{entries} entries read for 20 pages");
    }

    #[test]
    fn common_prefixes() {
        assert_eq!(common_prefix("a/b/c", "", Some("/")), Some("a/"));
        assert_eq!(common_prefix("a/b/c", "a/", Some("/")), Some("a/b/"));
        assert_eq!(common_prefix("a/b", "a/", Some("/")), None);
        assert_eq!(common_prefix("a/b", "a/", None), None);
        assert_eq!(common_prefix("a/b", "a/", Some("")), None);
        assert_eq!(common_prefix("axxbxx", "a", Some("xx")), Some("axx"));
    }
}
