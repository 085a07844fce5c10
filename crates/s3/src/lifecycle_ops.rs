//! Put/Get/DeleteBucketLifecycle: the rules live in the bucket's registry record
//! (`lifecycle`); the gateway's lifecycle pass (`lifecycle_pass`) applies them.

use s3s::dto::*;
use s3s::{s3_error, S3Request, S3Response, S3Result};

use crate::buckets;
use crate::gateway::Gateway;
use crate::lifecycle;

/// PutBucketLifecycleConfiguration (replaces every rule).
pub async fn put(
    gw: &Gateway,
    req: S3Request<PutBucketLifecycleConfigurationInput>,
) -> S3Result<S3Response<PutBucketLifecycleConfigurationOutput>> {
    let i = req.input;
    let config = i
        .lifecycle_configuration
        .ok_or_else(|| s3_error!(MalformedXML, "missing LifecycleConfiguration"))?;
    let classes: Vec<&str> = gw.classes.keys().map(String::as_str).collect();
    let rules = lifecycle::from_config(&config, &classes)?;
    let mut b = buckets::get_bucket(&gw.backend, &i.bucket).await?;
    b.lifecycle = rules;
    buckets::update_bucket(&gw.backend, &b).await?;
    gw.buckets.forget(&b.name);
    Ok(S3Response::new(
        PutBucketLifecycleConfigurationOutput::default(),
    ))
}

/// GetBucketLifecycleConfiguration (NoSuchLifecycleConfiguration when the bucket has none).
pub async fn get(
    gw: &Gateway,
    req: S3Request<GetBucketLifecycleConfigurationInput>,
) -> S3Result<S3Response<GetBucketLifecycleConfigurationOutput>> {
    let b = gw.bucket(&req.extensions, &req.input.bucket).await?;
    if b.lifecycle.is_empty() {
        return Err(s3_error!(NoSuchLifecycleConfiguration));
    }
    Ok(S3Response::new(GetBucketLifecycleConfigurationOutput {
        rules: Some(lifecycle::to_config(&b.lifecycle)),
        ..Default::default()
    }))
}

/// DeleteBucketLifecycle (succeeds when there is none).
pub async fn delete(
    gw: &Gateway,
    req: S3Request<DeleteBucketLifecycleInput>,
) -> S3Result<S3Response<DeleteBucketLifecycleOutput>> {
    let mut b = buckets::get_bucket(&gw.backend, &req.input.bucket).await?;
    if !b.lifecycle.is_empty() {
        b.lifecycle.clear();
        buckets::update_bucket(&gw.backend, &b).await?;
        gw.buckets.forget(&b.name);
    }
    Ok(S3Response::new(DeleteBucketLifecycleOutput::default()))
}
