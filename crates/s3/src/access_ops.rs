//! Access control operations: Get/PutBucketAcl, Get/PutObjectAcl (canned ACLs, `acl`) and
//! Get/Put/DeleteBucketPolicy (`policy`). Who may call them is decided before (admission,
//! `authz`); these read and write the ACL or policy. A bucket's ACL and policy live in its
//! registry record; an object's ACL in its entry or in `object_acl`.

use s3s::dto::*;
use s3s::{s3_error, S3Request, S3Response, S3Result};

use crate::acl::{acl_to_set, CannedAcl};
use crate::buckets::{self, BucketInfo};
use crate::entry::Entry;
use crate::gateway::Gateway;
use crate::object_acl;
use crate::ownership;
use crate::policy::Policy;

/// Whether any `x-amz-grant-*` header every ACL-taking input has was sent (bucket inputs
/// and PutObjectAcl also have `grant_write`, which callers add).
macro_rules! any_grant {
    ($input:expr) => {
        $input.grant_full_control.is_some()
            || $input.grant_read.is_some()
            || $input.grant_read_acp.is_some()
            || $input.grant_write_acp.is_some()
    };
}

/// The canned ACL of a PutObject, CopyObject or CreateMultipartUpload request into bucket
/// `b` (private when none is given; `x-amz-grant-*` headers are NotImplemented). Where the
/// bucket's ACLs are disabled only `bucket-owner-full-control` passes
/// (AccessControlListNotSupported otherwise); where its public access block blocks public
/// ACLs a public one is AccessDenied.
pub fn acl_on_write(
    b: &BucketInfo,
    header: Option<&str>,
    grant_headers: bool,
) -> S3Result<CannedAcl> {
    ownership::check_write_acl(b.ownership, header, grant_headers)?;
    let acl = acl_on_create(header, grant_headers)?;
    b.public_access.unwrap_or_default().check_acl(acl)?;
    Ok(acl)
}

/// The canned ACL of a request creating a bucket or object (private when none is given;
/// `x-amz-grant-*` headers are NotImplemented).
pub fn acl_on_create(header: Option<&str>, grant_headers: bool) -> S3Result<CannedAcl> {
    if grant_headers {
        return Err(s3_error!(
            NotImplemented,
            "x-amz-grant-* headers are not supported; use x-amz-acl"
        ));
    }
    header.map_or(Ok(CannedAcl::Private), CannedAcl::parse)
}

pub(crate) use any_grant;

/// GetBucketAcl.
pub async fn get_bucket_acl(
    gw: &Gateway,
    req: S3Request<GetBucketAclInput>,
) -> S3Result<S3Response<GetBucketAclOutput>> {
    let b = gw.bucket(&req.extensions, &req.input.bucket).await?;
    let (owner, grants) = in_force(&b, b.acl).to_policy(&b.owner);
    Ok(S3Response::new(GetBucketAclOutput {
        grants: Some(grants),
        owner: Some(owner),
    }))
}

/// Rewrites bucket `b`'s record with `change` applied, and forgets the cached one.
async fn update(gw: &Gateway, b: BucketInfo, change: impl FnOnce(&mut BucketInfo)) -> S3Result<()> {
    let mut b = b;
    change(&mut b);
    buckets::update_bucket(&gw.backend, &b).await?;
    gw.buckets.forget(&b.name);
    Ok(())
}

/// The ACL as it is in force in bucket `b`: private where its ACLs are disabled.
fn in_force(b: &BucketInfo, acl: CannedAcl) -> CannedAcl {
    if ownership::acls_enabled(b.ownership) {
        acl
    } else {
        CannedAcl::Private
    }
}

/// The ACL a PutBucketAcl or PutObjectAcl into bucket `b` sets: refused where the bucket's
/// ACLs are disabled (AccessControlListNotSupported) or its public access block blocks a
/// public one (AccessDenied).
fn acl_to_put(
    b: &BucketInfo,
    canned: Option<&str>,
    policy: Option<&AccessControlPolicy>,
    grants: bool,
) -> S3Result<CannedAcl> {
    if !ownership::acls_enabled(b.ownership) {
        return Err(ownership::acl_not_supported());
    }
    let acl = acl_to_set(canned, policy, grants, &b.owner)?;
    b.public_access.unwrap_or_default().check_acl(acl)?;
    Ok(acl)
}

/// PutBucketAcl.
pub async fn put_bucket_acl(
    gw: &Gateway,
    req: S3Request<PutBucketAclInput>,
) -> S3Result<S3Response<PutBucketAclOutput>> {
    let b = gw.bucket(&req.extensions, &req.input.bucket).await?;
    let input = &req.input;
    let acl = acl_to_put(
        &b,
        input.acl.as_ref().map(|a| a.as_str()),
        input.access_control_policy.as_ref(),
        any_grant!(input) || input.grant_write.is_some(),
    )?;
    update(gw, b, |b| b.acl = acl).await?;
    Ok(S3Response::new(PutBucketAclOutput::default()))
}

async fn entry_of(gw: &Gateway, b: &BucketInfo, key: &str) -> S3Result<Entry> {
    buckets::get_entry(&gw.backend, b, key)
        .await?
        .ok_or_else(|| s3_error!(NoSuchKey))
}

/// GetObjectAcl.
pub async fn get_object_acl(
    gw: &Gateway,
    req: S3Request<GetObjectAclInput>,
) -> S3Result<S3Response<GetObjectAclOutput>> {
    let b = gw.bucket(&req.extensions, &req.input.bucket).await?;
    let e = entry_of(gw, &b, &req.input.key).await?;
    let acl = object_acl::effective(&gw.backend, &b, &req.input.key, &e).await?;
    let (owner, grants) = in_force(&b, acl).to_policy(&b.owner);
    Ok(S3Response::new(GetObjectAclOutput {
        grants: Some(grants),
        owner: Some(owner),
        ..Default::default()
    }))
}

/// PutObjectAcl.
pub async fn put_object_acl(
    gw: &Gateway,
    req: S3Request<PutObjectAclInput>,
) -> S3Result<S3Response<PutObjectAclOutput>> {
    let b = gw.bucket(&req.extensions, &req.input.bucket).await?;
    let input = &req.input;
    let acl = acl_to_put(
        &b,
        input.acl.as_ref().map(|a| a.as_str()),
        input.access_control_policy.as_ref(),
        any_grant!(input) || input.grant_write.is_some(),
    )?;
    let e = entry_of(gw, &b, &input.key).await?;
    object_acl::set(&gw.backend, &b, &input.key, &e, acl).await?;
    Ok(S3Response::new(PutObjectAclOutput::default()))
}

/// GetBucketPolicy (NoSuchBucketPolicy when there is none).
pub async fn get_bucket_policy(
    gw: &Gateway,
    req: S3Request<GetBucketPolicyInput>,
) -> S3Result<S3Response<GetBucketPolicyOutput>> {
    let b = gw.bucket(&req.extensions, &req.input.bucket).await?;
    let policy = b.policy.ok_or_else(|| s3_error!(NoSuchBucketPolicy))?;
    Ok(S3Response::new(GetBucketPolicyOutput {
        policy: Some(policy),
    }))
}

/// PutBucketPolicy: the document is parsed and checked (MalformedPolicy) before it is
/// stored as given.
pub async fn put_bucket_policy(
    gw: &Gateway,
    req: S3Request<PutBucketPolicyInput>,
) -> S3Result<S3Response<PutBucketPolicyOutput>> {
    let b = gw.bucket(&req.extensions, &req.input.bucket).await?;
    let text = req.input.policy;
    let policy = Policy::parse(&text, &b.name).map_err(|e| e.to_s3())?;
    b.public_access.unwrap_or_default().check_policy(&policy)?;
    update(gw, b, |b| b.policy = Some(text)).await?;
    Ok(S3Response::new(PutBucketPolicyOutput::default()))
}

/// DeleteBucketPolicy (succeeds when there is none, as in S3).
pub async fn delete_bucket_policy(
    gw: &Gateway,
    req: S3Request<DeleteBucketPolicyInput>,
) -> S3Result<S3Response<DeleteBucketPolicyOutput>> {
    let b = gw.bucket(&req.extensions, &req.input.bucket).await?;
    if b.policy.is_some() {
        update(gw, b, |b| b.policy = None).await?;
    }
    Ok(S3Response::new(DeleteBucketPolicyOutput::default()))
}
