//! Bucket versioning operations: Get/PutBucketVersioning and ListObjectVersions (a merge of
//! the version index shards, see `versions`).

use s3s::dto::*;
use s3s::{s3_error, S3Request, S3Response, S3Result};

use crate::buckets;
use crate::convert::count_i32;
use crate::entry::Entry;
use crate::gateway::Gateway;
use crate::headers::{etag, timestamp, url_encode};
use crate::list_ops::{is_url, MAX_KEYS};
use crate::listing::{self, Item, ListQuery};
use crate::versions::{self, Versioning, NULL_VERSION};

/// PutBucketVersioning: Enabled or Suspended (a bucket never returns to unversioned, as in
/// S3). The first time, every object already in the bucket is recorded as its key's null
/// version. MFA delete is not supported.
pub async fn put(
    gw: &Gateway,
    req: S3Request<PutBucketVersioningInput>,
) -> S3Result<S3Response<PutBucketVersioningOutput>> {
    let input = req.input;
    let conf = input.versioning_configuration;
    if conf
        .mfa_delete
        .as_ref()
        .is_some_and(|m| m.as_str() == MFADelete::ENABLED)
    {
        return Err(s3_error!(NotImplemented, "MFA delete is not supported"));
    }
    let state = match conf.status.as_ref().map(|s| s.as_str()) {
        Some(BucketVersioningStatus::ENABLED) => Versioning::Enabled,
        Some(BucketVersioningStatus::SUSPENDED) => Versioning::Suspended,
        _ => {
            return Err(s3_error!(
                MalformedXML,
                "the versioning status must be Enabled or Suspended"
            ))
        }
    };
    let mut b = buckets::get_bucket(&gw.backend, &input.bucket).await?;
    if state == Versioning::Suspended && b.object_lock.is_some() {
        return Err(s3_error!(
            InvalidBucketState,
            "versioning cannot be suspended on a bucket with object lock"
        ));
    }
    let first = !b.versioning.versioned();
    b.versioning = state;
    buckets::update_bucket(&gw.backend, &b).await?;
    gw.buckets.forget(&b.name);
    if first {
        let kept = versions::keep_all_unversioned(&gw.backend, &b).await?;
        tracing::info!(bucket = %b.name, kept, "versioning enabled: existing objects are null versions");
    }
    Ok(S3Response::new(PutBucketVersioningOutput::default()))
}

/// GetBucketVersioning: no status for a bucket never versioned.
pub async fn get(
    gw: &Gateway,
    req: S3Request<GetBucketVersioningInput>,
) -> S3Result<S3Response<GetBucketVersioningOutput>> {
    let b = gw.bucket(&req.extensions, &req.input.bucket).await?;
    let status = match b.versioning {
        Versioning::Off => None,
        Versioning::Enabled => Some(BucketVersioningStatus::ENABLED),
        Versioning::Suspended => Some(BucketVersioningStatus::SUSPENDED),
    };
    Ok(S3Response::new(GetBucketVersioningOutput {
        status: status.map(BucketVersioningStatus::from_static),
        mfa_delete: None,
    }))
}

/// Where a version listing resumes: after every version of `key_marker` when no version id
/// marker is given, else after that version of it.
async fn resume_after(
    gw: &Gateway,
    b: &buckets::BucketInfo,
    key_marker: &str,
    version_marker: Option<&str>,
) -> S3Result<String> {
    if key_marker.is_empty() {
        return Ok(String::new());
    }
    let Some(id) = version_marker.filter(|v| !v.is_empty()) else {
        // Past every `key \0 ...`: \u{1} sorts after the separator and before other keys.
        return Ok(format!("{key_marker}\u{1}"));
    };
    if id == NULL_VERSION {
        return match versions::get_version(&gw.backend, b, key_marker, id).await? {
            Some((k, _)) => String::from_utf8(k).map_err(crate::data::internal),
            None => Err(s3_error!(
                InvalidArgument,
                "the version id marker names no version of the key marker"
            )),
        };
    }
    if !versions::valid_version_id(id) {
        return Err(s3_error!(InvalidArgument, "invalid version id marker"));
    }
    Ok(format!("{key_marker}\0{id}"))
}

/// ListObjectVersions: every version and delete marker, by key, newest first within a key;
/// prefix, delimiter, key and version id markers, max-keys (<= 1000), `encoding-type=url`.
pub async fn list(
    gw: &Gateway,
    req: S3Request<ListObjectVersionsInput>,
) -> S3Result<S3Response<ListObjectVersionsOutput>> {
    let i = &req.input;
    let b = gw.buckets.get(&gw.backend, &i.bucket).await?;
    let max = match i.max_keys {
        Some(m) if m < 0 => return Err(s3_error!(InvalidArgument, "max-keys must be >= 0")),
        Some(m) => (m as usize).min(MAX_KEYS),
        None => MAX_KEYS,
    };
    let key_marker = i.key_marker.clone().unwrap_or_default();
    let version_marker = i
        .version_id_marker
        .as_deref()
        .filter(|_| !key_marker.is_empty());
    let url = is_url(i.encoding_type.as_ref());
    let enc = |s: &str| if url { url_encode(s) } else { s.to_string() };
    let owner = Owner {
        display_name: Some(b.owner.clone()),
        id: Some(b.owner.clone()),
    };
    let mut out = ListObjectVersionsOutput {
        name: Some(i.bucket.clone()),
        prefix: Some(enc(i.prefix.as_deref().unwrap_or_default())),
        key_marker: Some(enc(&key_marker)),
        version_id_marker: version_marker.map(str::to_string),
        max_keys: Some(i.max_keys.unwrap_or(count_i32(MAX_KEYS))),
        delimiter: i.delimiter.as_deref().map(enc),
        encoding_type: i.encoding_type.clone(),
        is_truncated: Some(false),
        versions: Some(Vec::new()),
        delete_markers: Some(Vec::new()),
        common_prefixes: Some(Vec::new()),
        ..Default::default()
    };
    if !b.versioning.versioned() {
        return list_unversioned(gw, &b, i, max, &key_marker, out, owner).await;
    }
    let q = ListQuery {
        prefix: i.prefix.clone().unwrap_or_default(),
        delimiter: i.delimiter.clone().filter(|d| !d.is_empty()),
        marker: resume_after(gw, &b, &key_marker, version_marker).await?,
        max,
        versioned: true,
    };
    let page = listing::list(gw.backend.as_ref(), &versions::shard_names(&b), &q)
        .await
        .map_err(crate::data::internal)?;
    // The first version of a key on this page is its newest unless the page resumes inside
    // that key's versions.
    let mut previous_key: Option<String> = version_marker.map(|_| key_marker.clone());
    let mut last: Option<(String, Option<String>)> = None;
    for item in &page.items {
        match item {
            Item::Object(index_key, value) => {
                let (key, _) = versions::split_index_key(index_key.as_bytes())
                    .ok_or_else(|| crate::data::internal("a version index key without \\0"))?;
                let mut e = Entry::decode(value).map_err(crate::data::internal)?;
                let id = e.version_id.take().unwrap_or_else(|| NULL_VERSION.into());
                let latest = previous_key.as_deref() != Some(key);
                previous_key = Some(key.to_string());
                last = Some((key.to_string(), Some(id.clone())));
                if e.delete_marker {
                    out.delete_markers
                        .get_or_insert_default()
                        .push(DeleteMarkerEntry {
                            key: Some(enc(key)),
                            version_id: Some(id),
                            is_latest: Some(latest),
                            last_modified: Some(timestamp(e.mtime_ms)),
                            owner: Some(owner.clone()),
                        });
                } else {
                    out.versions.get_or_insert_default().push(version_of(
                        enc(key),
                        id,
                        latest,
                        &e,
                        &owner,
                    ));
                }
            }
            Item::Prefix(p) => {
                last = Some((p.clone(), None));
                out.common_prefixes
                    .get_or_insert_default()
                    .push(CommonPrefix {
                        prefix: Some(enc(p)),
                    });
            }
        }
    }
    if page.truncated {
        out.is_truncated = Some(true);
        if let Some((key, id)) = last {
            out.next_key_marker = Some(enc(&key));
            out.next_version_id_marker = id;
        }
    }
    Ok(S3Response::new(out))
}

fn version_of(key: String, id: String, latest: bool, e: &Entry, owner: &Owner) -> ObjectVersion {
    ObjectVersion {
        key: Some(key),
        version_id: Some(id),
        is_latest: Some(latest),
        e_tag: Some(etag(&e.etag)),
        size: Some(e.size as i64),
        last_modified: Some(timestamp(e.mtime_ms)),
        owner: Some(owner.clone()),
        storage_class: Some(ObjectVersionStorageClass::from(
            crate::storage_class::name_of(e.storage_class.as_deref()).to_string(),
        )),
        ..Default::default()
    }
}

/// ListObjectVersions of a bucket never versioned: each object is its key's one (null)
/// version, listed from the current index.
async fn list_unversioned(
    gw: &Gateway,
    b: &buckets::BucketInfo,
    i: &ListObjectVersionsInput,
    max: usize,
    key_marker: &str,
    mut out: ListObjectVersionsOutput,
    owner: Owner,
) -> S3Result<S3Response<ListObjectVersionsOutput>> {
    let url = is_url(i.encoding_type.as_ref());
    let enc = |s: &str| if url { url_encode(s) } else { s.to_string() };
    let q = ListQuery {
        prefix: i.prefix.clone().unwrap_or_default(),
        delimiter: i.delimiter.clone().filter(|d| !d.is_empty()),
        marker: key_marker.to_string(),
        max,
        versioned: false,
    };
    let page = listing::list(gw.backend.as_ref(), &b.shard_names(), &q)
        .await
        .map_err(crate::data::internal)?;
    for item in &page.items {
        match item {
            Item::Object(key, value) => {
                let e = Entry::decode(value).map_err(crate::data::internal)?;
                out.versions.get_or_insert_default().push(version_of(
                    enc(key),
                    NULL_VERSION.into(),
                    true,
                    &e,
                    &owner,
                ));
            }
            Item::Prefix(p) => out
                .common_prefixes
                .get_or_insert_default()
                .push(CommonPrefix {
                    prefix: Some(enc(p)),
                }),
        }
    }
    if page.truncated {
        out.is_truncated = Some(true);
        out.next_key_marker = page.items.last().map(|x| enc(x.marker()));
    }
    Ok(S3Response::new(out))
}
