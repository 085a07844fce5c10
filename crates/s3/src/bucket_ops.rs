//! Bucket operations: create (with a canned ACL, and object lock on request), delete (empty only; in-progress uploads
//! are aborted), head, list (the caller's own buckets), location.

use s3s::dto::*;
use s3s::{s3_error, S3Request, S3Response, S3Result};

use crate::access_ops::{acl_on_create, any_grant};
use crate::buckets;
use crate::controls_ops;
use crate::gateway::Gateway;
use crate::headers::timestamp;
use crate::multipart;
use crate::versions;

/// CreateBucket.
pub async fn create(
    gw: &Gateway,
    req: S3Request<CreateBucketInput>,
) -> S3Result<S3Response<CreateBucketOutput>> {
    let owner = gw.user_of(&req)?;
    let input = &req.input;
    let acl = acl_on_create(
        input.acl.as_ref().map(|a| a.as_str()),
        any_grant!(input) || input.grant_write.is_some(),
    )?;
    let ownership = controls_ops::ownership_on_create(
        input.object_ownership.as_ref(),
        input.acl.as_ref().map(|a| a.as_str()),
        any_grant!(input) || input.grant_write.is_some(),
    )?;
    let name = &input.bucket;
    let mut b = buckets::create_bucket(&gw.backend, name, &owner, gw.cfg.index_shards, acl).await?;
    let locked = input.object_lock_enabled_for_bucket == Some(true);
    if locked {
        // Object lock needs versioning: both on from the start, nothing to record yet.
        b.versioning = crate::versions::Versioning::Enabled;
        b.object_lock = Some(crate::object_lock::LockConfig::default());
    }
    b.ownership = ownership;
    if locked || ownership.is_some() {
        buckets::update_bucket(&gw.backend, &b).await?;
    }
    gw.buckets.forget(name);
    Ok(S3Response::new(CreateBucketOutput {
        location: Some(format!("/{name}")),
    }))
}

/// DeleteBucket.
pub async fn delete(
    gw: &Gateway,
    req: S3Request<DeleteBucketInput>,
) -> S3Result<S3Response<DeleteBucketOutput>> {
    let b = gw.bucket(&req.extensions, &req.input.bucket).await?;
    if buckets::has_objects(&gw.backend, &b).await?
        || (b.versioning.versioned() && versions::has_versions(&gw.backend, &b).await?)
    {
        return Err(s3_error!(BucketNotEmpty));
    }
    multipart::abort_all(gw, &b).await?;
    buckets::remove_bucket(&gw.backend, &b).await?;
    gw.buckets.forget(&b.name);
    Ok(S3Response::new(DeleteBucketOutput::default()))
}

/// HeadBucket.
pub async fn head(
    gw: &Gateway,
    req: S3Request<HeadBucketInput>,
) -> S3Result<S3Response<HeadBucketOutput>> {
    gw.bucket(&req.extensions, &req.input.bucket).await?;
    Ok(S3Response::new(HeadBucketOutput {
        bucket_region: Some(gw.cfg.region.clone()),
        ..Default::default()
    }))
}

/// ListBuckets: the caller's own buckets only.
pub async fn list(
    gw: &Gateway,
    req: S3Request<ListBucketsInput>,
) -> S3Result<S3Response<ListBucketsOutput>> {
    let user = gw.user_of(&req)?;
    let all = buckets::list_buckets(&gw.backend).await?;
    let buckets = all
        .into_iter()
        .filter(|b| b.owner == user)
        .filter(|b| {
            req.input
                .prefix
                .as_deref()
                .is_none_or(|p| b.name.starts_with(p))
        })
        .map(|b| Bucket {
            name: Some(b.name),
            creation_date: Some(timestamp(b.created_ms)),
            bucket_region: None,
        })
        .collect();
    Ok(S3Response::new(ListBucketsOutput {
        buckets: Some(buckets),
        owner: Some(Owner {
            display_name: Some(user.clone()),
            id: Some(user),
        }),
        ..Default::default()
    }))
}

/// GetBucketLocation.
pub async fn location(
    gw: &Gateway,
    req: S3Request<GetBucketLocationInput>,
) -> S3Result<S3Response<GetBucketLocationOutput>> {
    gw.bucket(&req.extensions, &req.input.bucket).await?;
    Ok(S3Response::new(GetBucketLocationOutput {
        location_constraint: None,
    }))
}
