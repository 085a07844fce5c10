//! A bucket's access controls besides ACLs and policies: Put/Get/DeletePublicAccessBlock,
//! Put/Get/DeleteBucketOwnershipControls and GetBucketPolicyStatus. Each lives in the
//! bucket's registry record (`public_access`, `ownership`); what they change in
//! authorization is `authz`'s and `access_ops`' business.

use s3s::dto::*;
use s3s::{s3_error, S3Error, S3ErrorCode, S3Request, S3Response, S3Result};

use crate::authz::policy_of;
use crate::buckets::{self, BucketInfo};
use crate::gateway::Gateway;
use crate::ownership::Ownership;
use crate::public_access::PublicAccessBlock;

/// Rewrites bucket `name`'s record (read afresh) with `change` applied, and forgets the
/// cached one.
async fn update(gw: &Gateway, name: &str, change: impl FnOnce(&mut BucketInfo)) -> S3Result<()> {
    let mut b = buckets::get_bucket(&gw.backend, name).await?;
    change(&mut b);
    buckets::update_bucket(&gw.backend, &b).await?;
    gw.buckets.forget(name);
    Ok(())
}

fn not_found(code: &str, message: &str) -> S3Error {
    let mut e = S3Error::with_message(
        S3ErrorCode::Custom(code.to_string().into()),
        message.to_string(),
    );
    e.set_status_code(hyper::StatusCode::NOT_FOUND);
    e
}

/// PutPublicAccessBlock (replaces the four switches).
pub async fn put_public_access_block(
    gw: &Gateway,
    req: S3Request<PutPublicAccessBlockInput>,
) -> S3Result<S3Response<PutPublicAccessBlockOutput>> {
    let i = req.input;
    let block = PublicAccessBlock::from_config(&i.public_access_block_configuration);
    update(gw, &i.bucket, |b| b.public_access = Some(block)).await?;
    Ok(S3Response::new(PutPublicAccessBlockOutput::default()))
}

/// GetPublicAccessBlock (NoSuchPublicAccessBlockConfiguration when the bucket has none).
pub async fn get_public_access_block(
    gw: &Gateway,
    req: S3Request<GetPublicAccessBlockInput>,
) -> S3Result<S3Response<GetPublicAccessBlockOutput>> {
    let b = gw.bucket(&req.extensions, &req.input.bucket).await?;
    let block = b.public_access.ok_or_else(|| {
        not_found(
            "NoSuchPublicAccessBlockConfiguration",
            "The public access block configuration was not found",
        )
    })?;
    Ok(S3Response::new(GetPublicAccessBlockOutput {
        public_access_block_configuration: Some(block.to_config()),
    }))
}

/// DeletePublicAccessBlock (succeeds when there is none).
pub async fn delete_public_access_block(
    gw: &Gateway,
    req: S3Request<DeletePublicAccessBlockInput>,
) -> S3Result<S3Response<DeletePublicAccessBlockOutput>> {
    update(gw, &req.input.bucket, |b| b.public_access = None).await?;
    Ok(S3Response::new(DeletePublicAccessBlockOutput::default()))
}

/// PutBucketOwnershipControls.
pub async fn put_ownership_controls(
    gw: &Gateway,
    req: S3Request<PutBucketOwnershipControlsInput>,
) -> S3Result<S3Response<PutBucketOwnershipControlsOutput>> {
    let i = req.input;
    let ownership = Ownership::from_controls(&i.ownership_controls)?;
    update(gw, &i.bucket, |b| b.ownership = Some(ownership)).await?;
    Ok(S3Response::new(PutBucketOwnershipControlsOutput::default()))
}

/// GetBucketOwnershipControls (OwnershipControlsNotFoundError when the bucket has none).
pub async fn get_ownership_controls(
    gw: &Gateway,
    req: S3Request<GetBucketOwnershipControlsInput>,
) -> S3Result<S3Response<GetBucketOwnershipControlsOutput>> {
    let b = gw.bucket(&req.extensions, &req.input.bucket).await?;
    let ownership = b.ownership.ok_or_else(|| {
        not_found(
            "OwnershipControlsNotFoundError",
            "The bucket ownership controls were not found",
        )
    })?;
    Ok(S3Response::new(GetBucketOwnershipControlsOutput {
        ownership_controls: Some(ownership.to_controls()),
    }))
}

/// DeleteBucketOwnershipControls (succeeds when there are none).
pub async fn delete_ownership_controls(
    gw: &Gateway,
    req: S3Request<DeleteBucketOwnershipControlsInput>,
) -> S3Result<S3Response<DeleteBucketOwnershipControlsOutput>> {
    update(gw, &req.input.bucket, |b| b.ownership = None).await?;
    Ok(S3Response::new(
        DeleteBucketOwnershipControlsOutput::default(),
    ))
}

/// GetBucketPolicyStatus: whether the bucket's policy is public (NoSuchBucketPolicy when it
/// has none).
pub async fn get_policy_status(
    gw: &Gateway,
    req: S3Request<GetBucketPolicyStatusInput>,
) -> S3Result<S3Response<GetBucketPolicyStatusOutput>> {
    let b = gw.bucket(&req.extensions, &req.input.bucket).await?;
    let policy = policy_of(&b)?.ok_or_else(|| s3_error!(NoSuchBucketPolicy))?;
    Ok(S3Response::new(GetBucketPolicyStatusOutput {
        policy_status: Some(PolicyStatus {
            is_public: Some(policy.is_public()),
        }),
    }))
}

/// The ownership a CreateBucket asks for with `x-amz-object-ownership`, checked against its
/// ACL: a bucket created with ACLs disabled takes no ACL but the owner's
/// (InvalidBucketAclWithObjectOwnership otherwise).
pub fn ownership_on_create(
    asked: Option<&ObjectOwnership>,
    acl: Option<&str>,
    grants: bool,
) -> S3Result<Option<Ownership>> {
    let Some(o) = asked.map(|o| Ownership::parse(o.as_str())).transpose()? else {
        return Ok(None);
    };
    let owner_only = !grants && matches!(acl, None | Some("private" | "bucket-owner-full-control"));
    if o == Ownership::BucketOwnerEnforced && !owner_only {
        let mut e = S3Error::with_message(
            S3ErrorCode::Custom("InvalidBucketAclWithObjectOwnership".into()),
            "Bucket cannot have ACLs set with ObjectOwnership's BucketOwnerEnforced setting",
        );
        e.set_status_code(hyper::StatusCode::BAD_REQUEST);
        return Err(e);
    }
    Ok(Some(o))
}
