//! Listing a bucket: a k-way merge of its index shards in key order, with prefix, delimiter
//! (common prefixes), an exclusive start marker and a page size. Each shard is read in pages
//! (`omap_list` with the prefix), so memory stays bounded by the page size times the shard
//! count. A common prefix is emitted once, at its first key, and only if it sorts after the
//! marker; the keys under it are skipped on every shard without being fetched.

use std::collections::VecDeque;

use crate::backend::{Backend, BackendError};

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
    let per_shard = ((q.max + 1) * 2 / shards.len() + 8).min(MAX_SHARD_PAGE as usize) as u32;
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
        let item = match common_prefix(&key, &q.prefix, q.delimiter.as_deref()) {
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
