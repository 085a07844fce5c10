//! Object ACLs. An object gets its canned ACL when it is written (`x-amz-acl` of PutObject,
//! CopyObject or CreateMultipartUpload), inside its index entry, so the ACL and the object
//! are committed together. PutObjectAcl changes it later without rewriting the entry: it
//! records the ACL in the bucket's object ACL object (`s3.oacl.{bucket-id}`, omap: key ->
//! sealed [`AclRecord`]) bound to the entry's version (size, ETag, mtime). A record whose
//! version is not the current entry's (the object was overwritten or deleted since) is
//! ignored, so a PutObjectAcl racing an overwrite can never change the bytes an entry points
//! to, and a new object never inherits an older one's ACL. Records of deleted objects stay
//! until the key gets a new ACL or the bucket is deleted (its ACL object goes with it).

use std::sync::Arc;

use s3s::S3Result;
use serde::{Deserialize, Serialize};

use crate::acl::CannedAcl;
use crate::backend::Backend;
use crate::buckets::BucketInfo;
use crate::data::internal;
use crate::entry::Entry;
use crate::record::{seal, unseal};

/// An ACL set by PutObjectAcl on one version of an object.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AclRecord {
    /// Size of the entry it applies to.
    pub size: u64,
    /// ETag of that entry.
    pub etag: String,
    /// mtime of that entry, ms.
    pub mtime_ms: i64,
    /// The ACL.
    pub acl: CannedAcl,
}

impl AclRecord {
    fn applies_to(&self, e: &Entry) -> bool {
        self.size == e.size && self.etag == e.etag && self.mtime_ms == e.mtime_ms
    }
}

/// The object holding a bucket's PutObjectAcl records.
pub fn acl_object(b: &BucketInfo) -> String {
    format!("s3.oacl.{}", b.id)
}

/// The ACL in force for `entry` (the object `key` of `b`).
pub async fn effective(
    backend: &Arc<dyn Backend>,
    b: &BucketInfo,
    key: &str,
    entry: &Entry,
) -> S3Result<CannedAcl> {
    let (page, _) = backend
        .omap_list(&acl_object(b), &[], key.as_bytes(), 1)
        .await
        .map_err(internal)?;
    if let Some((k, v)) = page.first() {
        if k == key.as_bytes() {
            let rec: AclRecord = unseal(v).map_err(internal)?;
            if rec.applies_to(entry) {
                return Ok(rec.acl);
            }
        }
    }
    Ok(entry.acl)
}

/// Sets the ACL of the current version `entry` of object `key`.
pub async fn set(
    backend: &Arc<dyn Backend>,
    b: &BucketInfo,
    key: &str,
    entry: &Entry,
    acl: CannedAcl,
) -> S3Result<()> {
    let rec = AclRecord {
        size: entry.size,
        etag: entry.etag.clone(),
        mtime_ms: entry.mtime_ms,
        acl,
    };
    backend
        .omap_set(&acl_object(b), &[(key.as_bytes().to_vec(), seal(&rec))])
        .await
        .map_err(internal)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::MemBackend;
    use crate::entry::{ContentHeaders, DataLoc};

    fn entry(etag: &str, mtime_ms: i64, acl: CannedAcl) -> Entry {
        Entry {
            size: 1,
            etag: etag.into(),
            mtime_ms,
            headers: ContentHeaders::default(),
            loc: DataLoc::Inline,
            parts: 0,
            acl,
            checksum: None,
            version_id: None,
            delete_marker: false,
            null_rank: None,
            storage_class: None,
            tags: Default::default(),
            retention: None,
            legal_hold: false,
            inline: vec![0],
        }
    }

    #[tokio::test]
    async fn a_set_acl_holds_for_its_version_only() {
        let backend: Arc<dyn Backend> = Arc::new(MemBackend::default());
        let b = crate::buckets::create_bucket(&backend, "b", "alice", 1, CannedAcl::Private)
            .await
            .unwrap();
        let v1 = entry("e1", 1, CannedAcl::AuthenticatedRead);
        assert_eq!(
            effective(&backend, &b, "k", &v1).await.unwrap(),
            CannedAcl::AuthenticatedRead
        );
        set(&backend, &b, "k", &v1, CannedAcl::PublicRead)
            .await
            .unwrap();
        assert_eq!(
            effective(&backend, &b, "k", &v1).await.unwrap(),
            CannedAcl::PublicRead
        );
        // Another key is untouched; an overwrite (new mtime) falls back to its own ACL.
        assert_eq!(
            effective(&backend, &b, "k2", &v1).await.unwrap(),
            CannedAcl::AuthenticatedRead
        );
        let v2 = entry("e1", 2, CannedAcl::Private);
        assert_eq!(
            effective(&backend, &b, "k", &v2).await.unwrap(),
            CannedAcl::Private
        );
    }
}
