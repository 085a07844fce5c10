//! Object versions of a bucket that has had versioning enabled: the version index, version
//! ids, and how a write, a delete and a delete of one version change the index.
//!
//! A versioned bucket keeps two indexes with the same sharding (crc32c of the key):
//! - the *current* index (`s3.idx.{id}.{n}`, as in every bucket): key -> its newest version
//!   unless that is a delete marker, so GET, HEAD and ListObjects cost what they cost in an
//!   unversioned bucket;
//! - the *version* index (`s3.ver.{id}.{n}`): `key \0 rank suffix` -> every version of the
//!   key, delete markers included. `rank` is 16 hex digits of `u64::MAX - nanoseconds`, so a
//!   key's versions list newest first; `suffix` is 8 random hex digits, or `null` for the null
//!   version (whose rank the entry keeps, as `null_rank`). A version id is `rank suffix` (24
//!   hex digits), so a version is found with one omap read; the null version (written while
//!   versioning was suspended, or before it was enabled) is found by reading the key's
//!   versions.
//!
//! An object written before versioning was enabled has no version id in the current index and
//! no entry in the version index until a versioned write or delete of its key copies it there
//! (as the null version, ranked by its modification time) first; enabling versioning copies
//! every such object too, so that ListObjectVersions, which reads the version index alone,
//! sees it.
//!
//! Order of writes: the version index first, then the current index; data is removed last.
//! A crash between them leaves a version listed that is not (yet) current, which the next
//! write of the key corrects; never a current entry whose data is gone.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};
use rand::Rng;
use s3s::{s3_error, S3Result};
use serde::{Deserialize, Serialize};

use crate::backend::{Backend, OmapPage};
use crate::buckets::{self, BucketInfo};
use crate::data::internal;
use crate::entry::{DataLoc, Entry};
use crate::pager::OmapPager;

/// The null version's id.
pub const NULL_VERSION: &str = "null";
/// Hex digits of a version's rank.
const RANK_DIGITS: usize = 16;
/// Length of a version id that is not `null`.
const VERSION_ID_LEN: usize = RANK_DIGITS + 8;
/// Versions of one key read per page while looking for its null version.
const VERSION_PAGE: u32 = 256;

/// A bucket's versioning state (S3's: never enabled, Enabled, Suspended).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Versioning {
    /// Never enabled: one version per key, overwritten in place.
    #[default]
    Off,
    /// Every write makes a new version; a delete makes a delete marker.
    Enabled,
    /// Writes and deletes replace the null version; other versions stay.
    Suspended,
}

impl Versioning {
    /// Whether the bucket keeps a version index (versioning was ever enabled).
    pub fn versioned(self) -> bool {
        self != Versioning::Off
    }
}

/// Version index shard object names, in shard order.
pub fn shard_names(b: &BucketInfo) -> Vec<String> {
    (0..b.shards)
        .map(|n| format!("s3.ver.{}.{n}", b.id))
        .collect()
}

/// The version index shard holding `key`'s versions (the same shard number as its entry in
/// the current index).
pub fn shard_of(b: &BucketInfo, key: &str) -> String {
    let n = crc_fast::crc32_iscsi(key.as_bytes()) % b.shards.max(1);
    format!("s3.ver.{}.{n}", b.id)
}

/// The rank of a version written at `nanos` since the epoch: larger is older.
fn rank(nanos: u128) -> String {
    let nanos = u64::try_from(nanos).unwrap_or(u64::MAX);
    format!("{:016x}", u64::MAX - nanos)
}

fn now_nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

/// A fresh version id, ranked now.
pub fn fresh_version_id() -> String {
    let suffix: u32 = rand::rng().random();
    format!("{}{suffix:08x}", rank(now_nanos()))
}

/// Whether `id` can name a version (`null`, or 24 lowercase hex digits).
pub fn valid_version_id(id: &str) -> bool {
    id == NULL_VERSION
        || (id.len() == VERSION_ID_LEN
            && id
                .bytes()
                .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c)))
}

/// The prefix of every version-index key of `key`.
fn key_prefix(key: &str) -> Vec<u8> {
    let mut k = key.as_bytes().to_vec();
    k.push(0);
    k
}

/// The version-index key of `entry`, a version of `key`: its id for an ordinary version;
/// for the null version, a rank from when it was written.
pub fn index_key(key: &str, entry: &Entry) -> Vec<u8> {
    let mut k = key_prefix(key);
    match entry.version_id.as_deref() {
        Some(id) if id != NULL_VERSION => k.extend_from_slice(id.as_bytes()),
        _ => {
            let place = entry.null_rank.clone().unwrap_or_else(|| {
                rank(u128::try_from(entry.mtime_ms.max(0)).unwrap_or(0) * 1_000_000)
            });
            k.extend_from_slice(place.as_bytes());
            k.extend_from_slice(NULL_VERSION.as_bytes());
        }
    }
    k
}

/// Splits a version-index key into the object key and the version's place (rank and
/// suffix); None for a key that is not one.
pub fn split_index_key(k: &[u8]) -> Option<(&str, &str)> {
    let zero = k.iter().position(|&c| c == 0)?;
    let key = std::str::from_utf8(&k[..zero]).ok()?;
    let place = std::str::from_utf8(&k[zero + 1..]).ok()?;
    Some((key, place))
}

/// A version as the index holds it: the entry with its version id filled in (`null` for the
/// null version).
pub(crate) fn decode_version(v: &[u8]) -> S3Result<Entry> {
    let mut e = Entry::decode(v).map_err(internal)?;
    e.version_id.get_or_insert_with(|| NULL_VERSION.to_string());
    Ok(e)
}

/// Version `id` of `key` and its index key, if it exists.
pub async fn get_version(
    backend: &Arc<dyn Backend>,
    b: &BucketInfo,
    key: &str,
    id: &str,
) -> S3Result<Option<(Vec<u8>, Entry)>> {
    if !valid_version_id(id) {
        return Err(s3_error!(InvalidArgument, "invalid version id specified"));
    }
    let shard = shard_of(b, key);
    if id != NULL_VERSION {
        let mut wanted = key_prefix(key);
        wanted.extend_from_slice(id.as_bytes());
        let (page, _) = backend
            .omap_list(&shard, &[], &wanted, 1)
            .await
            .map_err(internal)?;
        return match page.into_iter().next() {
            Some((k, v)) if k == wanted => Ok(Some((k, decode_version(&v)?))),
            _ => Ok(None),
        };
    }
    let mut pages = OmapPager::new(backend, &shard, &key_prefix(key), VERSION_PAGE);
    while let Some(page) = pages.next_page().await? {
        for (k, v) in &page {
            if k.ends_with(NULL_VERSION.as_bytes()) {
                return Ok(Some((k.clone(), decode_version(v)?)));
            }
        }
    }
    Ok(None)
}

/// The newest version of `key` and its index key, if it has any.
pub async fn newest(
    backend: &Arc<dyn Backend>,
    b: &BucketInfo,
    key: &str,
) -> S3Result<Option<(Vec<u8>, Entry)>> {
    let (page, _) = backend
        .omap_list(&shard_of(b, key), &[], &key_prefix(key), 1)
        .await
        .map_err(internal)?;
    match page.into_iter().next() {
        Some((k, v)) => Ok(Some((k, decode_version(&v)?))),
        None => Ok(None),
    }
}

async fn put_version(
    backend: &Arc<dyn Backend>,
    b: &BucketInfo,
    key: &str,
    e: &Entry,
) -> S3Result<()> {
    backend
        .omap_set(&shard_of(b, key), &[(index_key(key, e), e.encode())])
        .await
        .map_err(internal)
}

async fn remove_version(
    backend: &Arc<dyn Backend>,
    b: &BucketInfo,
    key: &str,
    k: &[u8],
) -> S3Result<()> {
    backend
        .omap_remove(&shard_of(b, key), &[k.to_vec()])
        .await
        .map_err(internal)
}

/// Copies a current entry written before versioning was enabled (no version id) into the
/// version index as the null version; idempotent (its index key comes from its mtime).
pub async fn keep_unversioned(
    backend: &Arc<dyn Backend>,
    b: &BucketInfo,
    key: &str,
    current: Option<&Entry>,
) -> S3Result<()> {
    match current {
        Some(e) if e.version_id.is_none() => {
            let mut null = e.clone();
            null.version_id = Some(NULL_VERSION.into());
            put_version(backend, b, key, &null).await
        }
        _ => Ok(()),
    }
}

/// What a versioned write or delete leaves to the caller: data no version refers to any
/// more, to remove once the indexes are written.
#[derive(Debug, Default)]
pub struct Replaced {
    /// Entries whose data is to be removed.
    pub orphans: Vec<Entry>,
}

/// Records `entry` as the new newest version of `key` (a PUT, copy or completed upload in a
/// bucket with versioning `state`, Enabled or Suspended), sets its version id, and makes it
/// current. Under Suspended it replaces the null version, whose data the caller removes.
pub async fn commit(
    backend: &Arc<dyn Backend>,
    b: &BucketInfo,
    key: &str,
    entry: &mut Entry,
    state: Versioning,
) -> S3Result<Replaced> {
    assert!(
        state.versioned(),
        "a versioned commit in a bucket never versioned"
    );
    let current = buckets::get_entry(backend, b, key).await?;
    keep_unversioned(backend, b, key, current.as_ref()).await?;
    let mut replaced = Replaced::default();
    entry.version_id = Some(if state == Versioning::Enabled {
        fresh_version_id()
    } else {
        if let Some((k, old)) = get_version(backend, b, key, NULL_VERSION).await? {
            remove_version(backend, b, key, &k).await?;
            replaced.orphans.push(old);
        }
        NULL_VERSION.to_string()
    });
    entry.null_rank = (state == Versioning::Suspended).then(|| rank(now_nanos()));
    put_version(backend, b, key, entry).await?;
    buckets::put_entry(backend, b, key, entry).await?;
    Ok(replaced)
}

/// The outcome of a delete in a versioned bucket.
#[derive(Debug, Default)]
pub struct Deleted {
    /// The version id the response names (the delete marker's, or the removed version's).
    pub version_id: Option<String>,
    /// Whether that version is a delete marker.
    pub delete_marker: bool,
    /// Data to remove.
    pub orphans: Vec<Entry>,
}

/// DeleteObject without a version id in a versioned bucket: a delete marker becomes the
/// newest version (Suspended: the null one, replacing the null version) and the key leaves
/// the current index.
pub async fn delete_current(
    backend: &Arc<dyn Backend>,
    b: &BucketInfo,
    key: &str,
    state: Versioning,
) -> S3Result<Deleted> {
    let current = buckets::get_entry(backend, b, key).await?;
    keep_unversioned(backend, b, key, current.as_ref()).await?;
    let mut orphans = Vec::new();
    let id = if state == Versioning::Enabled {
        fresh_version_id()
    } else {
        if let Some((k, old)) = get_version(backend, b, key, NULL_VERSION).await? {
            remove_version(backend, b, key, &k).await?;
            orphans.push(old);
        }
        NULL_VERSION.to_string()
    };
    let marker = Entry {
        size: 0,
        etag: String::new(),
        mtime_ms: buckets::now_ms(),
        headers: Default::default(),
        loc: DataLoc::Inline,
        parts: 0,
        acl: Default::default(),
        checksum: None,
        version_id: Some(id.clone()),
        delete_marker: true,
        null_rank: (state == Versioning::Suspended).then(|| rank(now_nanos())),
        storage_class: None,
        tags: Default::default(),
        retention: None,
        legal_hold: false,
        inline: Vec::new(),
    };
    put_version(backend, b, key, &marker).await?;
    if current.is_some() {
        buckets::remove_entry(backend, b, key).await?;
    }
    Ok(Deleted {
        version_id: Some(id),
        delete_marker: true,
        orphans,
    })
}

/// DeleteObject of version `id` of `key`: the version goes for good (a missing one
/// succeeds, as in S3); when it was the newest, the next one becomes current (or none, if
/// that is a delete marker).
pub async fn delete_version(
    backend: &Arc<dyn Backend>,
    b: &BucketInfo,
    key: &str,
    id: &str,
    known: Option<(Vec<u8>, Entry)>,
) -> S3Result<Deleted> {
    let current = buckets::get_entry(backend, b, key).await?;
    keep_unversioned(backend, b, key, current.as_ref()).await?;
    let found = match known {
        Some(found) => Some(found),
        None => get_version(backend, b, key, id).await?,
    };
    let Some((k, gone)) = found else {
        return Ok(Deleted {
            version_id: Some(id.to_string()),
            ..Default::default()
        });
    };
    let was_newest = newest(backend, b, key)
        .await?
        .is_some_and(|(newest_key, _)| newest_key == k);
    remove_version(backend, b, key, &k).await?;
    if was_newest {
        match newest(backend, b, key).await? {
            Some((_, next)) if !next.delete_marker => {
                buckets::put_entry(backend, b, key, &next).await?
            }
            _ if current.is_some() => buckets::remove_entry(backend, b, key).await?,
            _ => {}
        }
    }
    let delete_marker = gone.delete_marker;
    Ok(Deleted {
        version_id: Some(id.to_string()),
        delete_marker,
        orphans: if delete_marker {
            Vec::new()
        } else {
            vec![gone]
        },
    })
}

/// Index shards whose pre-versioning objects are recorded at once when versioning is enabled.
const KEEP_CONCURRENCY: usize = 4;

/// Copies every object written before versioning was enabled into the version index (see
/// the module's notes): run when a bucket's versioning is first enabled. Index shards are
/// walked a few at a time, and each page's null versions go in one write per version-index
/// shard.
pub async fn keep_all_unversioned(backend: &Arc<dyn Backend>, b: &BucketInfo) -> S3Result<u64> {
    futures::stream::iter(b.shard_names())
        .map(|shard| keep_shard_unversioned(backend, b, shard))
        .buffer_unordered(KEEP_CONCURRENCY)
        .try_fold(0, |total, kept| async move { Ok(total + kept) })
        .await
}

async fn keep_shard_unversioned(
    backend: &Arc<dyn Backend>,
    b: &BucketInfo,
    shard: String,
) -> S3Result<u64> {
    let mut kept = 0;
    let mut pages = OmapPager::new(backend, &shard, &[], VERSION_PAGE);
    while let Some(page) = pages.next_page().await? {
        let mut batches: BTreeMap<String, OmapPage> = BTreeMap::new();
        for (k, v) in &page {
            let e = Entry::decode(v).map_err(internal)?;
            if e.version_id.is_some() {
                continue;
            }
            let key = std::str::from_utf8(k).map_err(internal)?;
            let mut null = e;
            null.version_id = Some(NULL_VERSION.into());
            batches
                .entry(shard_of(b, key))
                .or_default()
                .push((index_key(key, &null), null.encode()));
            kept += 1;
        }
        for (version_shard, entries) in batches {
            backend
                .omap_set(&version_shard, &entries)
                .await
                .map_err(internal)?;
        }
    }
    Ok(kept)
}

/// Whether any version index shard holds a version (a versioned bucket with only delete
/// markers or old versions left is not empty).
pub async fn has_versions(backend: &Arc<dyn Backend>, b: &BucketInfo) -> S3Result<bool> {
    for shard in shard_names(b) {
        let (page, _) = backend
            .omap_list(&shard, &[], &[], 1)
            .await
            .map_err(internal)?;
        if !page.is_empty() {
            return Ok(true);
        }
    }
    Ok(false)
}

#[cfg(test)]
mod tests;
