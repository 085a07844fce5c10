//! Authorization: whether a caller (a user, or anonymous) may do an S3 action on a bucket or
//! one of its objects. The rules, in order:
//!
//! 1. Bucket policy operations (Get/Put/DeleteBucketPolicy) are the owner's alone, whatever
//!    the policy says, so an owner can always repair a policy.
//! 2. A bucket policy statement that denies the action wins over everything, ownership
//!    included.
//! 3. The bucket's owner may do everything in it (objects written by others included).
//! 4. A policy statement that allows the action grants it.
//! 5. Otherwise the canned ACL decides: the bucket's for bucket-level permissions (READ:
//!    listing; WRITE: putting and deleting objects), the object's for reading an object.
//! 6. Everything else is AccessDenied.
//!
//! [`decide`] is the pure decision; [`authorize`] looks up what it needs (the object's ACL
//! only when the decision depends on it).

use s3s::{s3_error, S3Result};

use crate::acl::{AclPermission, CannedAcl};
use crate::buckets::{self, BucketInfo};
use crate::data::internal;
use crate::gateway::Gateway;
use crate::object_acl;
use crate::ownership;
use crate::policy::{Policy, Verdict};

/// An S3 action, as bucket policies name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// ListBuckets.
    ListAllMyBuckets,
    /// CreateBucket.
    CreateBucket,
    /// DeleteBucket.
    DeleteBucket,
    /// ListObjects (v1, v2), HeadBucket.
    ListBucket,
    /// ListMultipartUploads.
    ListBucketMultipartUploads,
    /// GetBucketLocation.
    GetBucketLocation,
    /// GetBucketAcl.
    GetBucketAcl,
    /// PutBucketAcl.
    PutBucketAcl,
    /// Get/Put/DeleteBucketPolicy (owner only).
    BucketPolicy,
    /// GetObject, HeadObject, the source of CopyObject.
    GetObject,
    /// PutObject, CopyObject, CreateMultipartUpload, UploadPart, CompleteMultipartUpload.
    PutObject,
    /// DeleteObject, each key of DeleteObjects.
    DeleteObject,
    /// AbortMultipartUpload.
    AbortMultipartUpload,
    /// ListParts.
    ListMultipartUploadParts,
    /// GetObjectAcl.
    GetObjectAcl,
    /// PutObjectAcl.
    PutObjectAcl,
    /// GetBucketVersioning.
    GetBucketVersioning,
    /// PutBucketVersioning.
    PutBucketVersioning,
    /// ListObjectVersions.
    ListBucketVersions,
    /// GetObjectTagging.
    GetObjectTagging,
    /// PutObjectTagging, DeleteObjectTagging.
    PutObjectTagging,
    /// GetBucketTagging.
    GetBucketTagging,
    /// PutBucketTagging, DeleteBucketTagging.
    PutBucketTagging,
    /// GetBucketCors.
    GetBucketCors,
    /// PutBucketCors, DeleteBucketCors.
    PutBucketCors,
    /// Get/PutObjectLockConfiguration.
    BucketObjectLock,
    /// GetObjectRetention.
    GetObjectRetention,
    /// PutObjectRetention.
    PutObjectRetention,
    /// GetObjectLegalHold.
    GetObjectLegalHold,
    /// PutObjectLegalHold.
    PutObjectLegalHold,
    /// s3:GetBucketPublicAccessBlock
    GetBucketPublicAccessBlock,
    /// s3:PutBucketPublicAccessBlock (also its deletion)
    PutBucketPublicAccessBlock,
    /// s3:GetBucketOwnershipControls
    GetBucketOwnershipControls,
    /// s3:PutBucketOwnershipControls (also their deletion)
    PutBucketOwnershipControls,
    /// s3:GetBucketPolicyStatus
    GetBucketPolicyStatus,
    /// s3:GetLifecycleConfiguration
    GetLifecycleConfiguration,
    /// s3:PutLifecycleConfiguration (also its deletion)
    PutLifecycleConfiguration,
    /// Any other operation (owner only; the gateway answers most with NotImplemented).
    Other,
}

/// Which ACL, if any, can grant an action to someone other than the owner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AclLevel {
    /// No ACL grants it (owner or policy only).
    None,
    /// The bucket's ACL, with this permission.
    Bucket(AclPermission),
    /// The object's ACL, with this permission.
    Object(AclPermission),
}

impl Action {
    /// The action of an operation as s3s names it (`GetObject`, `ListObjectsV2`, ...).
    pub fn of_op(op: &str) -> Action {
        match op {
            "ListBuckets" => Action::ListAllMyBuckets,
            "CreateBucket" => Action::CreateBucket,
            "DeleteBucket" => Action::DeleteBucket,
            "HeadBucket" | "ListObjects" | "ListObjectsV2" => Action::ListBucket,
            "ListMultipartUploads" => Action::ListBucketMultipartUploads,
            "GetBucketLocation" => Action::GetBucketLocation,
            "GetBucketAcl" => Action::GetBucketAcl,
            "PutBucketAcl" => Action::PutBucketAcl,
            "GetBucketPolicy" | "PutBucketPolicy" | "DeleteBucketPolicy" => Action::BucketPolicy,
            "GetObject" | "HeadObject" | "GetObjectAttributes" => Action::GetObject,
            "PutObject"
            | "CopyObject"
            | "CreateMultipartUpload"
            | "UploadPart"
            | "UploadPartCopy"
            | "CompleteMultipartUpload"
            | "PostObject" => Action::PutObject,
            "DeleteObject" | "DeleteObjects" => Action::DeleteObject,
            "AbortMultipartUpload" => Action::AbortMultipartUpload,
            "ListParts" => Action::ListMultipartUploadParts,
            "GetObjectAcl" => Action::GetObjectAcl,
            "PutObjectAcl" => Action::PutObjectAcl,
            "GetBucketVersioning" => Action::GetBucketVersioning,
            "PutBucketVersioning" => Action::PutBucketVersioning,
            "ListObjectVersions" => Action::ListBucketVersions,
            "GetObjectTagging" => Action::GetObjectTagging,
            "PutObjectTagging" | "DeleteObjectTagging" => Action::PutObjectTagging,
            "GetBucketTagging" => Action::GetBucketTagging,
            "PutBucketTagging" | "DeleteBucketTagging" => Action::PutBucketTagging,
            "GetBucketCors" => Action::GetBucketCors,
            "PutBucketCors" | "DeleteBucketCors" => Action::PutBucketCors,
            "GetObjectLockConfiguration" | "PutObjectLockConfiguration" => Action::BucketObjectLock,
            "GetObjectRetention" => Action::GetObjectRetention,
            "PutObjectRetention" => Action::PutObjectRetention,
            "GetObjectLegalHold" => Action::GetObjectLegalHold,
            "PutObjectLegalHold" => Action::PutObjectLegalHold,
            "GetPublicAccessBlock" => Action::GetBucketPublicAccessBlock,
            "PutPublicAccessBlock" | "DeletePublicAccessBlock" => {
                Action::PutBucketPublicAccessBlock
            }
            "GetBucketOwnershipControls" => Action::GetBucketOwnershipControls,
            "PutBucketOwnershipControls" | "DeleteBucketOwnershipControls" => {
                Action::PutBucketOwnershipControls
            }
            "GetBucketPolicyStatus" => Action::GetBucketPolicyStatus,
            "GetBucketLifecycleConfiguration" => Action::GetLifecycleConfiguration,
            "PutBucketLifecycleConfiguration" | "DeleteBucketLifecycle" => {
                Action::PutLifecycleConfiguration
            }
            _ => Action::Other,
        }
    }

    /// The policy name (`s3:GetObject`).
    pub fn name(self) -> &'static str {
        match self {
            Action::ListAllMyBuckets => "s3:ListAllMyBuckets",
            Action::CreateBucket => "s3:CreateBucket",
            Action::DeleteBucket => "s3:DeleteBucket",
            Action::ListBucket => "s3:ListBucket",
            Action::ListBucketMultipartUploads => "s3:ListBucketMultipartUploads",
            Action::GetBucketLocation => "s3:GetBucketLocation",
            Action::GetBucketAcl => "s3:GetBucketAcl",
            Action::PutBucketAcl => "s3:PutBucketAcl",
            Action::BucketPolicy => "s3:PutBucketPolicy",
            Action::GetObject => "s3:GetObject",
            Action::PutObject => "s3:PutObject",
            Action::DeleteObject => "s3:DeleteObject",
            Action::AbortMultipartUpload => "s3:AbortMultipartUpload",
            Action::ListMultipartUploadParts => "s3:ListMultipartUploadParts",
            Action::GetObjectAcl => "s3:GetObjectAcl",
            Action::PutObjectAcl => "s3:PutObjectAcl",
            Action::GetBucketVersioning => "s3:GetBucketVersioning",
            Action::PutBucketVersioning => "s3:PutBucketVersioning",
            Action::ListBucketVersions => "s3:ListBucketVersions",
            Action::GetObjectTagging => "s3:GetObjectTagging",
            Action::PutObjectTagging => "s3:PutObjectTagging",
            Action::GetBucketTagging => "s3:GetBucketTagging",
            Action::PutBucketTagging => "s3:PutBucketTagging",
            Action::GetBucketCors => "s3:GetBucketCORS",
            Action::PutBucketCors => "s3:PutBucketCORS",
            Action::BucketObjectLock => "s3:PutBucketObjectLockConfiguration",
            Action::GetObjectRetention => "s3:GetObjectRetention",
            Action::PutObjectRetention => "s3:PutObjectRetention",
            Action::GetObjectLegalHold => "s3:GetObjectLegalHold",
            Action::PutObjectLegalHold => "s3:PutObjectLegalHold",
            Action::GetBucketPublicAccessBlock => "s3:GetBucketPublicAccessBlock",
            Action::PutBucketPublicAccessBlock => "s3:PutBucketPublicAccessBlock",
            Action::GetBucketOwnershipControls => "s3:GetBucketOwnershipControls",
            Action::PutBucketOwnershipControls => "s3:PutBucketOwnershipControls",
            Action::GetBucketPolicyStatus => "s3:GetBucketPolicyStatus",
            Action::GetLifecycleConfiguration => "s3:GetLifecycleConfiguration",
            Action::PutLifecycleConfiguration => "s3:PutLifecycleConfiguration",
            Action::Other => "s3:Unsupported",
        }
    }

    /// Which ACL can grant it.
    pub fn acl_level(self) -> AclLevel {
        use AclPermission::*;
        match self {
            Action::ListBucket
            | Action::ListBucketMultipartUploads
            | Action::ListBucketVersions => AclLevel::Bucket(Read),
            Action::PutObject
            | Action::DeleteObject
            | Action::AbortMultipartUpload
            | Action::ListMultipartUploadParts => AclLevel::Bucket(Write),
            Action::GetBucketAcl => AclLevel::Bucket(ReadAcp),
            Action::PutBucketAcl => AclLevel::Bucket(WriteAcp),
            Action::GetObject => AclLevel::Object(Read),
            Action::GetObjectAcl => AclLevel::Object(ReadAcp),
            Action::PutObjectAcl => AclLevel::Object(WriteAcp),
            _ => AclLevel::None,
        }
    }

    /// Whether the operation changes the bucket or its objects (its bucket record is then
    /// read afresh rather than from the cache).
    pub fn writes(self) -> bool {
        !matches!(
            self,
            Action::ListBucket
                | Action::ListBucketMultipartUploads
                | Action::ListBucketVersions
                | Action::GetBucketVersioning
                | Action::GetObjectTagging
                | Action::GetBucketTagging
                | Action::GetBucketCors
                | Action::GetObjectRetention
                | Action::GetObjectLegalHold
                | Action::GetBucketPublicAccessBlock
                | Action::GetBucketOwnershipControls
                | Action::GetBucketPolicyStatus
                | Action::GetLifecycleConfiguration
                | Action::GetBucketLocation
                | Action::GetBucketAcl
                | Action::GetObject
                | Action::GetObjectAcl
                | Action::ListMultipartUploadParts
        )
    }

    /// Whether its policy resource is an object (`bucket/key`) rather than the bucket.
    pub fn on_object(self) -> bool {
        matches!(
            self,
            Action::GetObject
                | Action::PutObject
                | Action::DeleteObject
                | Action::AbortMultipartUpload
                | Action::ListMultipartUploadParts
                | Action::GetObjectAcl
                | Action::PutObjectAcl
                | Action::GetObjectTagging
                | Action::PutObjectTagging
                | Action::GetObjectRetention
                | Action::PutObjectRetention
                | Action::GetObjectLegalHold
                | Action::PutObjectLegalHold
        )
    }
}

/// The policy resource of `key` in `bucket` (the bucket itself without a key).
pub fn resource(bucket: &str, key: Option<&str>) -> String {
    match key {
        Some(k) => format!("arn:aws:s3:::{bucket}/{k}"),
        None => format!("arn:aws:s3:::{bucket}"),
    }
}

/// The outcome of [`decide`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Allowed.
    Allow,
    /// AccessDenied.
    Deny,
    /// Only the object's ACL can still allow it: call again with it.
    NeedObjectAcl,
}

/// The decision for `caller` doing `action` on `key` (None: the bucket) of `bucket`, whose
/// parsed policy is `policy`; `object_acl` is the object's ACL once [`Decision::NeedObjectAcl`]
/// asked for it (None before; a missing object passes `Some(Private)`).
pub fn decide(
    caller: Option<&str>,
    action: Action,
    bucket: &BucketInfo,
    policy: Option<&Policy>,
    key: Option<&str>,
    object_acl: Option<CannedAcl>,
) -> Decision {
    let owner = caller == Some(bucket.owner.as_str());
    if action == Action::BucketPolicy {
        return if owner {
            Decision::Allow
        } else {
            Decision::Deny
        };
    }
    let key = key.filter(|_| action.on_object());
    let block = bucket.public_access.unwrap_or_default();
    let restricted;
    let policy = match policy {
        Some(p) if block.restrict_public_buckets && p.is_public() => {
            restricted = p.without_public_grants();
            Some(&restricted)
        }
        other => other,
    };
    let verdict = policy.map_or(Verdict::Silent, |p| {
        p.evaluate(caller, action.name(), &resource(&bucket.name, key))
    });
    if verdict == Verdict::Deny {
        return Decision::Deny;
    }
    if owner || verdict == Verdict::Allow {
        return Decision::Allow;
    }
    let signed = caller.is_some();
    // Every ACL but `private` is public: ignored public ACLs and disabled ACLs grant nothing.
    if block.ignore_public_acls || !ownership::acls_enabled(bucket.ownership) {
        return Decision::Deny;
    }
    match action.acl_level() {
        AclLevel::None => Decision::Deny,
        AclLevel::Bucket(perm) => {
            if bucket.acl.grants(perm, signed) {
                Decision::Allow
            } else {
                Decision::Deny
            }
        }
        AclLevel::Object(perm) => match object_acl {
            None => Decision::NeedObjectAcl,
            Some(acl) if acl.grants(perm, signed) => Decision::Allow,
            Some(_) => Decision::Deny,
        },
    }
}

/// The parsed policy of a bucket record, if it has one.
pub fn policy_of(b: &BucketInfo) -> S3Result<Option<Policy>> {
    b.policy
        .as_deref()
        .map(|text| Policy::parse(text, &b.name))
        .transpose()
        .map_err(|e| internal(format!("stored policy of bucket {}: {e}", b.name)))
}

/// Allows `caller` to do `action` on `key` of bucket `b`, or fails with AccessDenied;
/// reads the object's ACL when only it can decide (a missing object is AccessDenied).
pub async fn authorize(
    gw: &Gateway,
    caller: Option<&str>,
    b: &BucketInfo,
    action: Action,
    key: Option<&str>,
) -> S3Result<()> {
    let policy = policy_of(b)?;
    let mut d = decide(caller, action, b, policy.as_ref(), key, None);
    if d == Decision::NeedObjectAcl {
        let acl = match key {
            Some(k) => match buckets::get_entry(&gw.backend, b, k).await? {
                Some(e) => object_acl::effective(&gw.backend, b, k, &e).await?,
                None => CannedAcl::Private,
            },
            None => CannedAcl::Private,
        };
        d = decide(caller, action, b, policy.as_ref(), key, Some(acl));
    }
    match d {
        Decision::Allow => Ok(()),
        _ => Err(s3_error!(AccessDenied)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bucket(acl: CannedAcl, policy: Option<&str>) -> BucketInfo {
        BucketInfo {
            acl,
            policy: policy.map(str::to_string),
            ..BucketInfo::for_tests(1)
        }
    }

    const ALL: [Action; 38] = [
        Action::ListAllMyBuckets,
        Action::CreateBucket,
        Action::DeleteBucket,
        Action::ListBucket,
        Action::ListBucketMultipartUploads,
        Action::GetBucketLocation,
        Action::GetBucketAcl,
        Action::PutBucketAcl,
        Action::BucketPolicy,
        Action::GetObject,
        Action::PutObject,
        Action::DeleteObject,
        Action::AbortMultipartUpload,
        Action::ListMultipartUploadParts,
        Action::GetObjectAcl,
        Action::PutObjectAcl,
        Action::GetBucketVersioning,
        Action::PutBucketVersioning,
        Action::ListBucketVersions,
        Action::GetObjectTagging,
        Action::PutObjectTagging,
        Action::GetBucketTagging,
        Action::PutBucketTagging,
        Action::GetBucketCors,
        Action::PutBucketCors,
        Action::BucketObjectLock,
        Action::GetObjectRetention,
        Action::PutObjectRetention,
        Action::GetObjectLegalHold,
        Action::PutObjectLegalHold,
        Action::GetBucketPublicAccessBlock,
        Action::PutBucketPublicAccessBlock,
        Action::GetBucketOwnershipControls,
        Action::PutBucketOwnershipControls,
        Action::GetBucketPolicyStatus,
        Action::GetLifecycleConfiguration,
        Action::PutLifecycleConfiguration,
        Action::Other,
    ];

    fn run(caller: Option<&str>, a: Action, b: &BucketInfo, obj: CannedAcl) -> Decision {
        let p = policy_of(b).unwrap();
        match decide(caller, a, b, p.as_ref(), Some("k"), None) {
            Decision::NeedObjectAcl => decide(caller, a, b, p.as_ref(), Some("k"), Some(obj)),
            d => d,
        }
    }

    #[test]
    fn private_buckets_are_their_owners_alone() {
        let b = bucket(CannedAcl::Private, None);
        for a in ALL {
            assert_eq!(
                run(Some("alice"), a, &b, CannedAcl::Private),
                Decision::Allow,
                "{a:?}"
            );
            assert_eq!(
                run(Some("bob"), a, &b, CannedAcl::Private),
                Decision::Deny,
                "{a:?}"
            );
            assert_eq!(
                run(None, a, &b, CannedAcl::Private),
                Decision::Deny,
                "{a:?}"
            );
        }
    }

    #[test]
    fn canned_acls_grant_reads_and_writes_only() {
        let pr = bucket(CannedAcl::PublicRead, None);
        for a in ALL {
            let listing = [
                Action::ListBucket,
                Action::ListBucketMultipartUploads,
                Action::ListBucketVersions,
            ];
            let want = if listing.contains(&a) {
                Decision::Allow
            } else {
                Decision::Deny
            };
            assert_eq!(run(None, a, &pr, CannedAcl::Private), want, "{a:?}");
            assert_eq!(run(Some("bob"), a, &pr, CannedAcl::Private), want, "{a:?}");
        }
        // An object's public-read ACL lets anyone read that object, and nothing else.
        let private = bucket(CannedAcl::Private, None);
        for a in ALL {
            let want = if a == Action::GetObject {
                Decision::Allow
            } else {
                Decision::Deny
            };
            assert_eq!(run(None, a, &private, CannedAcl::PublicRead), want, "{a:?}");
        }
        let auth = bucket(CannedAcl::AuthenticatedRead, None);
        assert_eq!(
            run(Some("bob"), Action::ListBucket, &auth, CannedAcl::Private),
            Decision::Allow
        );
        assert_eq!(
            run(None, Action::ListBucket, &auth, CannedAcl::Private),
            Decision::Deny
        );
        assert_eq!(
            run(
                Some("bob"),
                Action::GetObject,
                &private,
                CannedAcl::AuthenticatedRead
            ),
            Decision::Allow
        );
        assert_eq!(
            run(
                None,
                Action::GetObject,
                &private,
                CannedAcl::AuthenticatedRead
            ),
            Decision::Deny
        );
        let prw = bucket(CannedAcl::PublicReadWrite, None);
        for a in [Action::PutObject, Action::DeleteObject, Action::ListBucket] {
            assert_eq!(
                run(None, a, &prw, CannedAcl::Private),
                Decision::Allow,
                "{a:?}"
            );
        }
        for a in [
            Action::PutBucketAcl,
            Action::DeleteBucket,
            Action::GetObject,
            Action::BucketPolicy,
        ] {
            assert_eq!(
                run(None, a, &prw, CannedAcl::Private),
                Decision::Deny,
                "{a:?}"
            );
        }
    }

    #[test]
    fn policies_grant_and_deny_wins_even_over_the_owner() {
        let text = r#"{"Statement": [
            {"Effect": "Allow", "Principal": {"AWS": "bob"}, "Action": "s3:*", "Resource": ["arn:aws:s3:::b", "arn:aws:s3:::b/*"]},
            {"Effect": "Deny", "Principal": "*", "Action": "s3:DeleteObject", "Resource": "arn:aws:s3:::b/*"}
        ]}"#;
        let b = bucket(CannedAcl::Private, Some(text));
        assert_eq!(
            run(Some("bob"), Action::PutObject, &b, CannedAcl::Private),
            Decision::Allow
        );
        assert_eq!(
            run(Some("bob"), Action::ListBucket, &b, CannedAcl::Private),
            Decision::Allow
        );
        assert_eq!(
            run(Some("bob"), Action::GetObject, &b, CannedAcl::Private),
            Decision::Allow
        );
        assert_eq!(
            run(Some("carol"), Action::GetObject, &b, CannedAcl::Private),
            Decision::Deny
        );
        assert_eq!(
            run(Some("bob"), Action::DeleteObject, &b, CannedAcl::Private),
            Decision::Deny
        );
        assert_eq!(
            run(Some("alice"), Action::DeleteObject, &b, CannedAcl::Private),
            Decision::Deny
        );
        // Policy operations stay the owner's whatever the policy says.
        assert_eq!(
            run(Some("bob"), Action::BucketPolicy, &b, CannedAcl::Private),
            Decision::Deny
        );
        assert_eq!(
            run(Some("alice"), Action::BucketPolicy, &b, CannedAcl::Private),
            Decision::Allow
        );
        // A Deny beats a public ACL too.
        let deny_all = r#"{"Statement": {"Effect": "Deny", "Principal": "*", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::b/*"}}"#;
        let b = bucket(CannedAcl::PublicRead, Some(deny_all));
        assert_eq!(
            run(None, Action::GetObject, &b, CannedAcl::PublicRead),
            Decision::Deny
        );
        assert_eq!(
            run(None, Action::ListBucket, &b, CannedAcl::PublicRead),
            Decision::Allow
        );
    }

    #[test]
    fn every_gateway_operation_maps_to_an_action() {
        for op in [
            "PutObject",
            "GetObject",
            "HeadObject",
            "DeleteObject",
            "DeleteObjects",
            "CopyObject",
            "CreateMultipartUpload",
            "UploadPart",
            "CompleteMultipartUpload",
            "AbortMultipartUpload",
            "ListParts",
            "ListMultipartUploads",
            "ListObjects",
            "ListObjectsV2",
            "HeadBucket",
            "DeleteBucket",
            "CreateBucket",
            "ListBuckets",
            "GetBucketLocation",
            "GetBucketAcl",
            "PutBucketAcl",
            "GetObjectAcl",
            "PutObjectAcl",
            "GetBucketPolicy",
            "PutBucketPolicy",
            "DeleteBucketPolicy",
            "UploadPartCopy",
            "GetObjectAttributes",
            "GetBucketVersioning",
            "PutBucketVersioning",
            "ListObjectVersions",
            "GetObjectTagging",
            "PutObjectTagging",
            "DeleteObjectTagging",
            "GetBucketTagging",
            "PutBucketTagging",
            "DeleteBucketTagging",
            "GetBucketCors",
            "PutBucketCors",
            "DeleteBucketCors",
            "GetObjectLockConfiguration",
            "PutObjectLockConfiguration",
            "GetObjectRetention",
            "PutObjectRetention",
            "GetObjectLegalHold",
            "PutObjectLegalHold",
            "GetPublicAccessBlock",
            "PutPublicAccessBlock",
            "DeletePublicAccessBlock",
            "GetBucketOwnershipControls",
            "PutBucketOwnershipControls",
            "DeleteBucketOwnershipControls",
            "GetBucketPolicyStatus",
            "GetBucketLifecycleConfiguration",
            "PutBucketLifecycleConfiguration",
            "DeleteBucketLifecycle",
            "PostObject",
        ] {
            assert_ne!(Action::of_op(op), Action::Other, "{op}");
        }
        assert_eq!(Action::of_op("PutBucketReplication"), Action::Other);
    }

    /// A public access block and disabled ACLs take away what public ACLs and public policy
    /// statements grant, and nothing the owner or a named user has.
    #[test]
    fn public_access_blocks_and_disabled_acls_take_public_grants_away() {
        let policy = r#"{"Statement":[
            {"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::b/*"},
            {"Effect":"Allow","Principal":{"AWS":"bob"},"Action":"s3:ListBucket","Resource":"arn:aws:s3:::b"}]}"#;
        let mut b = bucket(CannedAcl::PublicRead, Some(policy));
        let open = |b: &BucketInfo, who, a| run(who, a, b, CannedAcl::PublicRead);
        assert_eq!(open(&b, None, Action::ListBucket), Decision::Allow);
        assert_eq!(open(&b, None, Action::GetObject), Decision::Allow);
        b.public_access = Some(crate::public_access::PublicAccessBlock {
            ignore_public_acls: true,
            ..Default::default()
        });
        assert_eq!(open(&b, None, Action::ListBucket), Decision::Deny);
        assert_eq!(
            open(&b, None, Action::GetObject),
            Decision::Allow,
            "the policy still grants"
        );
        b.public_access = Some(crate::public_access::PublicAccessBlock {
            ignore_public_acls: true,
            restrict_public_buckets: true,
            ..Default::default()
        });
        assert_eq!(open(&b, None, Action::GetObject), Decision::Deny);
        assert_eq!(open(&b, Some("carol"), Action::GetObject), Decision::Deny);
        assert_eq!(open(&b, Some("bob"), Action::ListBucket), Decision::Allow);
        assert_eq!(open(&b, Some("alice"), Action::GetObject), Decision::Allow);
        let mut enforced = bucket(CannedAcl::PublicReadWrite, None);
        enforced.ownership = Some(crate::ownership::Ownership::BucketOwnerEnforced);
        for a in ALL {
            assert_eq!(open(&enforced, None, a), Decision::Deny, "{a:?}");
            assert_eq!(open(&enforced, Some("alice"), a), Decision::Allow, "{a:?}");
        }
    }
}
