//! Object ownership controls: whether ACLs are in force in a bucket. Under
//! `BucketOwnerEnforced` ACLs are disabled: they grant nothing, requests that set one are
//! refused with AccessControlListNotSupported (a write naming `bucket-owner-full-control`, or
//! no ACL, passes), and reading an ACL shows the owner's full control. `BucketOwnerPreferred`
//! and `ObjectWriter` keep ACLs; every object here is owned by its bucket's owner under all
//! three, so they differ only in what is reported. A bucket without controls behaves as
//! `ObjectWriter`, as radosgw and MinIO buckets do.

use s3s::dto::{ObjectOwnership, OwnershipControls, OwnershipControlsRule};
use s3s::{s3_error, S3Error, S3ErrorCode, S3Result};
use serde::{Deserialize, Serialize};

/// A bucket's object ownership setting.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Ownership {
    /// ACLs disabled; the bucket owner owns and controls everything.
    BucketOwnerEnforced,
    /// ACLs in force; objects written with `bucket-owner-full-control` go to the bucket owner.
    BucketOwnerPreferred,
    /// ACLs in force; the writer owns what it writes.
    ObjectWriter,
}

impl Ownership {
    /// Parses S3's name of a setting (InvalidArgument otherwise).
    pub fn parse(name: &str) -> S3Result<Ownership> {
        match name {
            ObjectOwnership::BUCKET_OWNER_ENFORCED => Ok(Ownership::BucketOwnerEnforced),
            ObjectOwnership::BUCKET_OWNER_PREFERRED => Ok(Ownership::BucketOwnerPreferred),
            ObjectOwnership::OBJECT_WRITER => Ok(Ownership::ObjectWriter),
            other => Err(s3_error!(
                InvalidArgument,
                "unknown object ownership `{other}`"
            )),
        }
    }

    /// S3's name of the setting.
    pub fn as_str(self) -> &'static str {
        match self {
            Ownership::BucketOwnerEnforced => ObjectOwnership::BUCKET_OWNER_ENFORCED,
            Ownership::BucketOwnerPreferred => ObjectOwnership::BUCKET_OWNER_PREFERRED,
            Ownership::ObjectWriter => ObjectOwnership::OBJECT_WRITER,
        }
    }

    /// From PutBucketOwnershipControls' document: exactly one rule
    /// (MalformedXML otherwise, as S3).
    pub fn from_controls(c: &OwnershipControls) -> S3Result<Ownership> {
        match c.rules.as_slice() {
            [rule] => Ownership::parse(rule.object_ownership.as_str()),
            _ => Err(s3_error!(
                MalformedXML,
                "ownership controls take exactly one rule"
            )),
        }
    }

    /// As GetBucketOwnershipControls returns it.
    pub fn to_controls(self) -> OwnershipControls {
        OwnershipControls {
            rules: vec![OwnershipControlsRule {
                object_ownership: ObjectOwnership::from(self.as_str().to_string()),
            }],
        }
    }
}

/// Whether ACLs grant anything under `ownership` (None: no controls set).
pub fn acls_enabled(ownership: Option<Ownership>) -> bool {
    ownership != Some(Ownership::BucketOwnerEnforced)
}

/// The error S3 answers a request that sets an ACL while ACLs are disabled.
pub fn acl_not_supported() -> S3Error {
    let mut e = S3Error::with_message(
        S3ErrorCode::Custom("AccessControlListNotSupported".into()),
        "The bucket does not allow ACLs",
    );
    e.set_status_code(hyper::StatusCode::BAD_REQUEST);
    e
}

/// Refuses a write's `x-amz-acl` (`acl`) or `x-amz-grant-*` headers (`grants`) where ACLs are
/// disabled; only `bucket-owner-full-control` (or no ACL) passes there.
pub fn check_write_acl(
    ownership: Option<Ownership>,
    acl: Option<&str>,
    grants: bool,
) -> S3Result<()> {
    if acls_enabled(ownership) {
        return Ok(());
    }
    match acl {
        _ if grants => Err(acl_not_supported()),
        None | Some("bucket-owner-full-control") => Ok(()),
        Some(_) => Err(acl_not_supported()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Names parse and print back; a document needs exactly one rule.
    #[test]
    fn settings_round_trip() {
        for o in [
            Ownership::BucketOwnerEnforced,
            Ownership::BucketOwnerPreferred,
            Ownership::ObjectWriter,
        ] {
            assert_eq!(Ownership::parse(o.as_str()).unwrap(), o);
            assert_eq!(Ownership::from_controls(&o.to_controls()).unwrap(), o);
        }
        assert!(Ownership::parse("Everyone").is_err());
        let none = OwnershipControls { rules: vec![] };
        assert_eq!(
            Ownership::from_controls(&none).unwrap_err().code(),
            &S3ErrorCode::MalformedXML
        );
    }

    /// With ACLs disabled only the bucket owner's full control passes; otherwise all do.
    #[test]
    fn disabled_acls_refuse_settings() {
        let enforced = Some(Ownership::BucketOwnerEnforced);
        check_write_acl(enforced, None, false).unwrap();
        check_write_acl(enforced, Some("bucket-owner-full-control"), false).unwrap();
        for acl in ["private", "public-read", "authenticated-read"] {
            let e = check_write_acl(enforced, Some(acl), false).unwrap_err();
            assert_eq!(e.status_code(), Some(hyper::StatusCode::BAD_REQUEST));
        }
        check_write_acl(enforced, None, true).unwrap_err();
        for o in [
            None,
            Some(Ownership::ObjectWriter),
            Some(Ownership::BucketOwnerPreferred),
        ] {
            check_write_acl(o, Some("public-read"), true).unwrap();
        }
    }
}
