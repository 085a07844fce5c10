//! Public access block: a bucket's four switches that stop ACLs and policies from opening it
//! to everyone, as S3 defines them. `BlockPublicAcls` refuses requests that set a public ACL,
//! `IgnorePublicAcls` makes existing public ACLs grant nothing, `BlockPublicPolicy` refuses a
//! public bucket policy, `RestrictPublicBuckets` makes a public policy grant nothing to anyone
//! but the owner. Every canned ACL other than `private` is public (S3 counts the
//! authenticated-users group as public too); a policy is public when one of its Allow
//! statements names every principal.

use s3s::dto::PublicAccessBlockConfiguration;
use s3s::{s3_error, S3Result};
use serde::{Deserialize, Serialize};

use crate::acl::CannedAcl;
use crate::policy::Policy;

/// A bucket's public access block (every switch off when absent).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PublicAccessBlock {
    /// Requests setting a public ACL are refused.
    #[serde(default)]
    pub block_public_acls: bool,
    /// Public ACLs grant nothing.
    #[serde(default)]
    pub ignore_public_acls: bool,
    /// A public bucket policy is refused.
    #[serde(default)]
    pub block_public_policy: bool,
    /// A public bucket policy grants nothing to callers other than the owner.
    #[serde(default)]
    pub restrict_public_buckets: bool,
}

impl PublicAccessBlock {
    /// From PutPublicAccessBlock's document (an omitted switch is off).
    pub fn from_config(c: &PublicAccessBlockConfiguration) -> PublicAccessBlock {
        PublicAccessBlock {
            block_public_acls: c.block_public_acls.unwrap_or(false),
            ignore_public_acls: c.ignore_public_acls.unwrap_or(false),
            block_public_policy: c.block_public_policy.unwrap_or(false),
            restrict_public_buckets: c.restrict_public_buckets.unwrap_or(false),
        }
    }

    /// As GetPublicAccessBlock returns it.
    pub fn to_config(self) -> PublicAccessBlockConfiguration {
        PublicAccessBlockConfiguration {
            block_public_acls: Some(self.block_public_acls),
            ignore_public_acls: Some(self.ignore_public_acls),
            block_public_policy: Some(self.block_public_policy),
            restrict_public_buckets: Some(self.restrict_public_buckets),
        }
    }

    /// Refuses setting `acl` when public ACLs are blocked.
    pub fn check_acl(self, acl: CannedAcl) -> S3Result<()> {
        if self.block_public_acls && is_public_acl(acl) {
            return Err(s3_error!(
                AccessDenied,
                "the bucket's public access block refuses public ACLs"
            ));
        }
        Ok(())
    }

    /// Refuses storing `policy` when public policies are blocked.
    pub fn check_policy(self, policy: &Policy) -> S3Result<()> {
        if self.block_public_policy && policy.is_public() {
            return Err(s3_error!(
                AccessDenied,
                "the bucket's public access block refuses public policies"
            ));
        }
        Ok(())
    }
}

/// Whether `acl` grants anything beyond the owner.
pub fn is_public_acl(acl: CannedAcl) -> bool {
    acl != CannedAcl::Private
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each switch does its one job: blocking refuses only public ACLs and policies.
    #[test]
    fn blocking_refuses_only_public_settings() {
        let open = PublicAccessBlock::default();
        let closed = PublicAccessBlock {
            block_public_acls: true,
            block_public_policy: true,
            ..PublicAccessBlock::default()
        };
        for acl in [
            CannedAcl::PublicRead,
            CannedAcl::PublicReadWrite,
            CannedAcl::AuthenticatedRead,
        ] {
            open.check_acl(acl).unwrap();
            assert_eq!(
                closed.check_acl(acl).unwrap_err().code(),
                &s3s::S3ErrorCode::AccessDenied
            );
        }
        closed.check_acl(CannedAcl::Private).unwrap();
        let public = Policy::parse(
            r#"{"Statement":[{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::b/*"}]}"#,
            "b",
        )
        .unwrap();
        let named = Policy::parse(
            r#"{"Statement":[{"Effect":"Allow","Principal":{"AWS":["alice"]},"Action":"s3:GetObject","Resource":"arn:aws:s3:::b/*"}]}"#,
            "b",
        )
        .unwrap();
        open.check_policy(&public).unwrap();
        closed.check_policy(&public).unwrap_err();
        closed.check_policy(&named).unwrap();
    }

    /// The document round-trips; omitted switches are off.
    #[test]
    fn config_round_trips() {
        let c = PublicAccessBlockConfiguration {
            block_public_acls: Some(true),
            ignore_public_acls: None,
            block_public_policy: Some(false),
            restrict_public_buckets: Some(true),
        };
        let p = PublicAccessBlock::from_config(&c);
        assert!(p.block_public_acls && p.restrict_public_buckets);
        assert!(!p.ignore_public_acls && !p.block_public_policy);
        assert_eq!(PublicAccessBlock::from_config(&p.to_config()), p);
    }
}
