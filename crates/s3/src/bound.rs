//! Records about one version of an object kept beside its index entry, so that a later change
//! (PutObjectTagging, PutObjectRetention, PutObjectLegalHold) never rewrites the entry: a
//! read-modify-write of the entry could undo a concurrent overwrite. A record lives in an omap
//! object of the bucket under `key \0 version id` (empty id in a bucket never versioned) and is
//! bound to the entry's size, ETag and mtime: once the key holds another object, the record
//! no longer applies and the entry's own value (given when it was written) is in force.

use std::sync::Arc;

use s3s::S3Result;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::backend::Backend;
use crate::data::internal;
use crate::entry::Entry;
use crate::record::{seal, unseal};

/// A value bound to one version of an object.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Bound<T> {
    size: u64,
    etag: String,
    mtime_ms: i64,
    value: T,
}

fn record_key(key: &str, e: &Entry) -> Vec<u8> {
    let mut k = key.as_bytes().to_vec();
    k.push(0);
    k.extend_from_slice(e.version_id.as_deref().unwrap_or_default().as_bytes());
    k
}

/// The value recorded in `object` for `entry` (a version of `key`), if a record still applies
/// to it.
pub async fn read<T: DeserializeOwned>(
    backend: &Arc<dyn Backend>,
    object: &str,
    key: &str,
    entry: &Entry,
) -> S3Result<Option<T>> {
    let wanted = record_key(key, entry);
    let (page, _) = backend
        .omap_list(object, &[], &wanted, 1)
        .await
        .map_err(internal)?;
    let Some((_, v)) = page.first().filter(|(k, _)| *k == wanted) else {
        return Ok(None);
    };
    let rec: Bound<T> = unseal(v).map_err(internal)?;
    let applies =
        rec.size == entry.size && rec.etag == entry.etag && rec.mtime_ms == entry.mtime_ms;
    Ok(applies.then_some(rec.value))
}

/// Records `value` in `object` for `entry` (a version of `key`).
pub async fn write<T: Serialize>(
    backend: &Arc<dyn Backend>,
    object: &str,
    key: &str,
    entry: &Entry,
    value: T,
) -> S3Result<()> {
    let rec = Bound {
        size: entry.size,
        etag: entry.etag.clone(),
        mtime_ms: entry.mtime_ms,
        value,
    };
    backend
        .omap_set(object, &[(record_key(key, entry), seal(&rec))])
        .await
        .map_err(internal)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::MemBackend;
    use crate::entry::DataLoc;

    fn entry(etag: &str, version: Option<&str>) -> Entry {
        Entry {
            size: 1,
            etag: etag.into(),
            mtime_ms: 5,
            headers: Default::default(),
            loc: DataLoc::Inline,
            parts: 0,
            acl: Default::default(),
            checksum: None,
            version_id: version.map(str::to_string),
            delete_marker: false,
            null_rank: None,
            storage_class: None,
            tags: Default::default(),
            retention: None,
            legal_hold: false,
            inline: b"x".to_vec(),
        }
    }

    #[tokio::test]
    async fn a_record_applies_to_its_version_only() {
        let backend: Arc<dyn Backend> = Arc::new(MemBackend::default());
        let v1 = entry("a", Some("v1"));
        write(&backend, "o", "k", &v1, 7u32).await.unwrap();
        assert_eq!(read::<u32>(&backend, "o", "k", &v1).await.unwrap(), Some(7));
        assert_eq!(
            read::<u32>(&backend, "o", "k", &entry("a", Some("v2")))
                .await
                .unwrap(),
            None
        );
        assert_eq!(
            read::<u32>(&backend, "o", "k", &entry("b", Some("v1")))
                .await
                .unwrap(),
            None,
            "another object under the key"
        );
        assert_eq!(read::<u32>(&backend, "o", "k2", &v1).await.unwrap(), None);
    }
}
