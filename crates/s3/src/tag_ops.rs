//! Tagging operations. An object's tags given at write time (`x-amz-tagging` on PutObject,
//! CopyObject with `x-amz-tagging-directive: REPLACE`) live in its index entry, committed with
//! it. Put/DeleteObjectTagging change them later without rewriting the entry: a record in
//! the bucket's tag object (`s3.otag.{bucket-id}`) bound to that version (`bound`). A
//! bucket's tags are in its registry record.

use std::sync::Arc;

use s3s::dto::*;
use s3s::{s3_error, S3Request, S3Response, S3Result};

use crate::backend::Backend;
use crate::bound;
use crate::buckets::{self, BucketInfo};
use crate::entry::Entry;
use crate::gateway::Gateway;
use crate::object_ops::find_entry;
use crate::tagging::{self, Tags, MAX_BUCKET_TAGS, MAX_OBJECT_TAGS};

/// The object holding a bucket's tagging records (`bound`).
pub fn tag_object(b: &BucketInfo) -> String {
    format!("s3.otag.{}", b.id)
}

/// The tags in force for `entry` (a version of object `key` of `b`).
pub async fn effective(
    backend: &Arc<dyn Backend>,
    b: &BucketInfo,
    key: &str,
    entry: &Entry,
) -> S3Result<Tags> {
    Ok(bound::read(backend, &tag_object(b), key, entry)
        .await?
        .unwrap_or_else(|| entry.tags.clone()))
}

/// Records `tags` for version `e` of `key`, the bucket first marked as retagged (so that a
/// GET never misses the record for its tag count).
async fn set(gw: &Gateway, b: &BucketInfo, key: &str, e: &Entry, tags: Tags) -> S3Result<()> {
    if !b.retagged {
        let mut fresh = buckets::get_bucket(&gw.backend, &b.name).await?;
        if !fresh.retagged {
            fresh.retagged = true;
            buckets::update_bucket(&gw.backend, &fresh).await?;
            gw.buckets.forget(&b.name);
        }
    }
    bound::write(&gw.backend, &tag_object(b), key, e, tags).await
}

/// How many tags version `e` of `key` has now (the `x-amz-tagging-count` of a GET; None for
/// none): the entry's own, unless the bucket has seen tags changed later.
pub async fn count(gw: &Gateway, b: &BucketInfo, key: &str, e: &Entry) -> S3Result<Option<i32>> {
    let n = if b.retagged {
        effective(&gw.backend, b, key, e).await?.len()
    } else {
        e.tags.len()
    };
    Ok((n > 0).then(|| i32::try_from(n).unwrap_or(i32::MAX)))
}

/// PutObjectTagging (at most 10 tags; a version by id in a versioned bucket).
pub async fn put_object(
    gw: &Gateway,
    req: S3Request<PutObjectTaggingInput>,
) -> S3Result<S3Response<PutObjectTaggingOutput>> {
    let i = req.input;
    let tags = tagging::from_tag_set(&i.tagging.tag_set, MAX_OBJECT_TAGS)?;
    let b = gw.bucket(&req.extensions, &i.bucket).await?;
    let e = find_entry(gw, &b, &i.key, i.version_id.as_deref()).await?;
    set(gw, &b, &i.key, &e, tags).await?;
    Ok(S3Response::new(PutObjectTaggingOutput {
        version_id: e.version_id,
    }))
}

/// GetObjectTagging (an empty set when the object has none).
pub async fn get_object(
    gw: &Gateway,
    req: S3Request<GetObjectTaggingInput>,
) -> S3Result<S3Response<GetObjectTaggingOutput>> {
    let i = &req.input;
    let b = gw.bucket(&req.extensions, &i.bucket).await?;
    let e = find_entry(gw, &b, &i.key, i.version_id.as_deref()).await?;
    let tags = effective(&gw.backend, &b, &i.key, &e).await?;
    Ok(S3Response::new(GetObjectTaggingOutput {
        tag_set: tagging::to_tag_set(&tags),
        version_id: e.version_id,
    }))
}

/// DeleteObjectTagging.
pub async fn delete_object(
    gw: &Gateway,
    req: S3Request<DeleteObjectTaggingInput>,
) -> S3Result<S3Response<DeleteObjectTaggingOutput>> {
    let i = &req.input;
    let b = gw.bucket(&req.extensions, &i.bucket).await?;
    let e = find_entry(gw, &b, &i.key, i.version_id.as_deref()).await?;
    set(gw, &b, &i.key, &e, Tags::new()).await?;
    Ok(S3Response::new(DeleteObjectTaggingOutput {
        version_id: e.version_id,
    }))
}

/// PutBucketTagging (at most 50 tags; replaces the set).
pub async fn put_bucket(
    gw: &Gateway,
    req: S3Request<PutBucketTaggingInput>,
) -> S3Result<S3Response<PutBucketTaggingOutput>> {
    let i = req.input;
    let tags = tagging::from_tag_set(&i.tagging.tag_set, MAX_BUCKET_TAGS)?;
    let mut b = buckets::get_bucket(&gw.backend, &i.bucket).await?;
    b.tags = tags;
    buckets::update_bucket(&gw.backend, &b).await?;
    gw.buckets.forget(&b.name);
    Ok(S3Response::new(PutBucketTaggingOutput::default()))
}

/// GetBucketTagging (NoSuchTagSet when the bucket has none, as S3).
pub async fn get_bucket(
    gw: &Gateway,
    req: S3Request<GetBucketTaggingInput>,
) -> S3Result<S3Response<GetBucketTaggingOutput>> {
    let b = gw.bucket(&req.extensions, &req.input.bucket).await?;
    if b.tags.is_empty() {
        return Err(s3_error!(NoSuchTagSet));
    }
    Ok(S3Response::new(GetBucketTaggingOutput {
        tag_set: tagging::to_tag_set(&b.tags),
    }))
}

/// DeleteBucketTagging.
pub async fn delete_bucket(
    gw: &Gateway,
    req: S3Request<DeleteBucketTaggingInput>,
) -> S3Result<S3Response<DeleteBucketTaggingOutput>> {
    let mut b = buckets::get_bucket(&gw.backend, &req.input.bucket).await?;
    if !b.tags.is_empty() {
        b.tags.clear();
        buckets::update_bucket(&gw.backend, &b).await?;
        gw.buckets.forget(&b.name);
    }
    Ok(S3Response::new(DeleteBucketTaggingOutput::default()))
}
