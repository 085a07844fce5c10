//! The bucket registry and each bucket's index shards. The registry is one cluster object
//! whose omap maps bucket name -> sealed [`BucketInfo`]; a bucket's index is `shards` objects
//! `s3.idx.{id}.{n}` whose omaps map object key -> encoded [`Entry`]. A key's shard is
//! crc32c(key) mod shards. The bucket id is fresh per creation, so a re-created bucket never
//! sees an old index.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::Rng;
use s3s::{s3_error, S3Result};
use serde::{Deserialize, Serialize};

use crate::acl::CannedAcl;
use crate::backend::Backend;
use crate::convert::millis;
use crate::data::internal;
use crate::entry::Entry;
use crate::record::{seal, unseal};
use crate::versions::{self, Versioning};

/// Object holding the bucket registry.
pub const REGISTRY: &str = "s3.buckets";

/// Most bucket records a [`BucketCache`] holds (it starts over when full).
const MAX_CACHED_BUCKETS: usize = 10_000;

/// A bucket's registry record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BucketInfo {
    /// Bucket name.
    pub name: String,
    /// Unique id (names the index and upload objects).
    pub id: String,
    /// Creation time, ms since the Unix epoch.
    pub created_ms: i64,
    /// Index shard count.
    pub shards: u32,
    /// Owner (user name).
    pub owner: String,
    /// Canned ACL (who besides the owner may list, write, read the ACL).
    #[serde(default, skip_serializing_if = "is_private")]
    pub acl: CannedAcl,
    /// Bucket policy document, as given to PutBucketPolicy (checked then).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
    /// Versioning state (never enabled, Enabled, Suspended): see `versions`.
    #[serde(default, skip_serializing_if = "is_unversioned")]
    pub versioning: Versioning,
    /// Bucket tags (PutBucketTagging).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub tags: crate::tagging::Tags,
    /// CORS rules (PutBucketCors).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cors: Vec<crate::cors::Rule>,
    /// Object lock configuration: present once object lock is enabled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object_lock: Option<crate::object_lock::LockConfig>,
    /// Public access block (PutPublicAccessBlock).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub public_access: Option<crate::public_access::PublicAccessBlock>,
    /// Object ownership controls (PutBucketOwnershipControls, or CreateBucket's
    /// `x-amz-object-ownership`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ownership: Option<crate::ownership::Ownership>,
    /// Lifecycle rules (PutBucketLifecycleConfiguration).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lifecycle: Vec<crate::lifecycle::Rule>,
    /// Some object's tags were changed after it was written (PutObjectTagging,
    /// DeleteObjectTagging): a GET then reads the tag records for its tag count; until then
    /// every entry's own tags are in force and a GET reads nothing more.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub retagged: bool,
}

fn is_unversioned(v: &Versioning) -> bool {
    !v.versioned()
}

fn is_private(acl: &CannedAcl) -> bool {
    *acl == CannedAcl::Private
}

#[cfg(test)]
impl BucketInfo {
    /// Bucket `b` (id `b.1`) of `alice` with `shards` index shards and nothing else set:
    /// what unit tests start from.
    pub(crate) fn for_tests(shards: u32) -> BucketInfo {
        BucketInfo {
            name: "b".into(),
            id: "b.1".into(),
            created_ms: 0,
            shards,
            owner: "alice".into(),
            acl: Default::default(),
            policy: None,
            versioning: Default::default(),
            tags: Default::default(),
            cors: Vec::new(),
            object_lock: None,
            public_access: None,
            ownership: None,
            lifecycle: Vec::new(),
            retagged: false,
        }
    }
}

impl BucketInfo {
    /// Index shard object names, in shard order.
    pub fn shard_names(&self) -> Vec<String> {
        (0..self.shards)
            .map(|n| format!("s3.idx.{}.{n}", self.id))
            .collect()
    }

    /// The index shard object holding `key`.
    pub fn shard_of(&self, key: &str) -> String {
        let n = crc_fast::crc32_iscsi(key.as_bytes()) % self.shards.max(1);
        format!("s3.idx.{}.{n}", self.id)
    }

    /// The object listing in-progress multipart uploads.
    pub fn uploads_object(&self) -> String {
        format!("s3.mpu.{}", self.id)
    }
}

/// A fresh random id (hex).
pub fn fresh_id() -> String {
    let v: u128 = rand::rng().random();
    format!("{v:032x}")
}

/// Milliseconds since the Unix epoch now.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, millis)
}

/// Looks a bucket up (NoSuchBucket if absent).
pub async fn get_bucket(backend: &Arc<dyn Backend>, name: &str) -> S3Result<BucketInfo> {
    let (page, _) = backend
        .omap_list(REGISTRY, &[], name.as_bytes(), 1)
        .await
        .map_err(internal)?;
    match page.first() {
        Some((k, v)) if k == name.as_bytes() => unseal(v).map_err(internal),
        _ => Err(s3_error!(NoSuchBucket)),
    }
}

/// Bucket records recently read, for requests that only read a bucket (GET, HEAD, listing):
/// they then cost one cluster round trip less. A record is trusted for `ttl`; this gateway
/// forgets a bucket it creates or deletes at once, and a bucket deleted or re-created through
/// another gateway is seen as such within `ttl`. Requests that write into a bucket always read
/// its record afresh, so a stale record can never make a write land in a deleted bucket.
pub struct BucketCache {
    ttl: Duration,
    entries: Mutex<HashMap<String, (BucketInfo, Instant)>>,
}

impl BucketCache {
    /// A cache trusting records for `ttl` (zero: no caching).
    pub fn new(ttl: Duration) -> Self {
        BucketCache {
            ttl,
            entries: Mutex::default(),
        }
    }

    /// The record of bucket `name` (NoSuchBucket if none), from the cache while fresh.
    pub async fn get(&self, backend: &Arc<dyn Backend>, name: &str) -> S3Result<BucketInfo> {
        if let Some((b, at)) = self
            .entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
        {
            if at.elapsed() < self.ttl {
                return Ok(b.clone());
            }
        }
        let b = get_bucket(backend, name).await?;
        if !self.ttl.is_zero() {
            let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
            if entries.len() >= MAX_CACHED_BUCKETS {
                entries.clear();
            }
            entries.insert(name.to_string(), (b.clone(), Instant::now()));
        }
        Ok(b)
    }

    /// Drops the record of bucket `name` (created or deleted through this gateway).
    pub fn forget(&self, name: &str) {
        self.entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(name);
    }
}

/// Every bucket, in name order.
pub async fn list_buckets(backend: &Arc<dyn Backend>) -> S3Result<Vec<BucketInfo>> {
    let mut out = Vec::new();
    let mut pages = crate::pager::OmapPager::new(backend, REGISTRY, &[], 1000);
    while let Some(page) = pages.next_page().await? {
        for (_, v) in &page {
            out.push(unseal(v).map_err(internal)?);
        }
    }
    Ok(out)
}

/// Rewrites a bucket's record (its ACL or policy changed). Last writer wins between
/// concurrent changes of one bucket.
pub async fn update_bucket(backend: &Arc<dyn Backend>, b: &BucketInfo) -> S3Result<()> {
    backend
        .omap_set(REGISTRY, &[(b.name.as_bytes().to_vec(), seal(b))])
        .await
        .map_err(internal)
}

/// Creates a bucket; BucketAlreadyOwnedByYou / BucketAlreadyExists if the name is taken.
pub async fn create_bucket(
    backend: &Arc<dyn Backend>,
    name: &str,
    owner: &str,
    shards: u32,
    acl: CannedAcl,
) -> S3Result<BucketInfo> {
    match get_bucket(backend, name).await {
        Ok(b) if b.owner == owner => return Err(s3_error!(BucketAlreadyOwnedByYou)),
        Ok(_) => return Err(s3_error!(BucketAlreadyExists)),
        Err(e) if e.code() == &s3s::S3ErrorCode::NoSuchBucket => {}
        Err(e) => return Err(e),
    }
    let info = BucketInfo {
        name: name.to_string(),
        id: format!("{name}.{}", &fresh_id()[..16]),
        created_ms: now_ms(),
        shards,
        owner: owner.to_string(),
        acl,
        policy: None,
        versioning: Versioning::Off,
        tags: Default::default(),
        cors: Vec::new(),
        object_lock: None,
        public_access: None,
        ownership: None,
        lifecycle: Vec::new(),
        retagged: false,
    };
    backend
        .omap_set(REGISTRY, &[(name.as_bytes().to_vec(), seal(&info))])
        .await
        .map_err(internal)?;
    Ok(info)
}

/// Whether any index shard holds a key.
pub async fn has_objects(backend: &Arc<dyn Backend>, b: &BucketInfo) -> S3Result<bool> {
    for shard in b.shard_names() {
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

/// Removes the registry record and the (empty) index shards, current and version.
pub async fn remove_bucket(backend: &Arc<dyn Backend>, b: &BucketInfo) -> S3Result<()> {
    backend
        .omap_remove(REGISTRY, &[b.name.as_bytes().to_vec()])
        .await
        .map_err(internal)?;
    let version_shards = if b.versioning.versioned() {
        versions::shard_names(b)
    } else {
        Vec::new()
    };
    for shard in b.shard_names().into_iter().chain(version_shards) {
        backend.remove(&shard).await.map_err(internal)?;
    }
    backend
        .remove(&b.uploads_object())
        .await
        .map_err(internal)?;
    backend
        .remove(&crate::object_acl::acl_object(b))
        .await
        .map_err(internal)?;
    backend
        .remove(&crate::tag_ops::tag_object(b))
        .await
        .map_err(internal)?;
    backend
        .remove(&crate::lock_ops::lock_object(b))
        .await
        .map_err(internal)?;
    Ok(())
}

/// An object's index entry, if the key exists.
pub async fn get_entry(
    backend: &Arc<dyn Backend>,
    b: &BucketInfo,
    key: &str,
) -> S3Result<Option<Entry>> {
    let (page, _) = backend
        .omap_list(&b.shard_of(key), &[], key.as_bytes(), 1)
        .await
        .map_err(internal)?;
    match page.first() {
        Some((k, v)) if k == key.as_bytes() => Entry::decode(v).map(Some).map_err(internal),
        _ => Ok(None),
    }
}

/// Sets an object's index entry (the commit point of a PUT).
pub async fn put_entry(
    backend: &Arc<dyn Backend>,
    b: &BucketInfo,
    key: &str,
    entry: &Entry,
) -> S3Result<()> {
    backend
        .omap_set(
            &b.shard_of(key),
            &[(key.as_bytes().to_vec(), entry.encode())],
        )
        .await
        .map_err(internal)
}

/// Removes an object's index entry (the commit point of a DELETE).
pub async fn remove_entry(backend: &Arc<dyn Backend>, b: &BucketInfo, key: &str) -> S3Result<()> {
    backend
        .omap_remove(&b.shard_of(key), &[key.as_bytes().to_vec()])
        .await
        .map_err(internal)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::MemBackend;

    fn is_missing(r: S3Result<BucketInfo>) -> bool {
        matches!(r, Err(e) if e.code() == &s3s::S3ErrorCode::NoSuchBucket)
    }

    #[tokio::test]
    async fn cached_records_expire_and_local_changes_are_seen_at_once() {
        let backend: Arc<dyn Backend> = Arc::new(MemBackend::default());
        let cache = BucketCache::new(Duration::from_millis(200));
        assert!(
            is_missing(cache.get(&backend, "b").await),
            "absent: not cached"
        );
        create_bucket(&backend, "b", "alice", 4, CannedAcl::Private)
            .await
            .unwrap();
        let first = cache.get(&backend, "b").await.unwrap();
        // Another gateway deletes the bucket: this one trusts its record until it expires.
        remove_bucket(&backend, &first).await.unwrap();
        assert!(is_missing(get_bucket(&backend, "b").await));
        assert_eq!(cache.get(&backend, "b").await.unwrap(), first);
        tokio::time::sleep(Duration::from_millis(250)).await;
        assert!(is_missing(cache.get(&backend, "b").await), "expired");
        // Re-created elsewhere with a new id, then read: the new record.
        create_bucket(&backend, "b", "alice", 4, CannedAcl::Private)
            .await
            .unwrap();
        let second = cache.get(&backend, "b").await.unwrap();
        assert_ne!(second.id, first.id);
        // Deleted through this gateway: forgotten at once.
        remove_bucket(&backend, &second).await.unwrap();
        cache.forget("b");
        assert!(is_missing(cache.get(&backend, "b").await));
        // A zero lifetime never caches.
        let never = BucketCache::new(Duration::ZERO);
        create_bucket(&backend, "c", "alice", 4, CannedAcl::Private)
            .await
            .unwrap();
        let c = never.get(&backend, "c").await.unwrap();
        remove_bucket(&backend, &c).await.unwrap();
        assert!(is_missing(never.get(&backend, "c").await));
    }
}
