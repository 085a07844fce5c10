//! Canned ACLs on buckets and objects: the four S3 canned ACLs the gateway stores
//! (`private`, `public-read`, `public-read-write`, `authenticated-read`), what each grants to
//! whom, and their translation to and from S3's `AccessControlPolicy` (the XML of
//! Get/PutBucketAcl and Get/PutObjectAcl). An XML body is accepted only when it expresses one
//! of the canned ACLs; anything finer (grants to single users, by e-mail, other groups) is
//! refused with NotImplemented, a malformed one with MalformedACLError. Pure: no I/O.

use s3s::dto::{AccessControlPolicy, Grant, Grantee, Owner, Permission, Type};
use s3s::{s3_error, S3Result};
use serde::{Deserialize, Serialize};

/// The group every requester belongs to, signed or not.
pub const ALL_USERS: &str = "http://acs.amazonaws.com/groups/global/AllUsers";
/// The group of every signed requester (any user of this gateway).
pub const AUTHENTICATED_USERS: &str = "http://acs.amazonaws.com/groups/global/AuthenticatedUsers";
/// Most grants accepted in one AccessControlPolicy (AWS's limit).
pub const MAX_GRANTS: usize = 100;

/// What an ACL grant allows (S3's permissions; FULL_CONTROL is all four).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AclPermission {
    /// List a bucket; read an object.
    Read,
    /// Write into and delete from a bucket.
    Write,
    /// Read the ACL.
    ReadAcp,
    /// Change the ACL.
    WriteAcp,
}

/// A canned ACL, as stored with a bucket or an object. The owner always has full control.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CannedAcl {
    /// Only the owner.
    #[default]
    Private,
    /// Everyone, signed or anonymous, may read.
    PublicRead,
    /// Everyone may read and write (on a bucket: put and delete objects).
    PublicReadWrite,
    /// Every signed user may read.
    AuthenticatedRead,
}

impl CannedAcl {
    /// Parses an `x-amz-acl` value. The `bucket-owner-*` object ACLs are `private` here (the
    /// bucket owner controls every object of its bucket); others are NotImplemented.
    pub fn parse(s: &str) -> S3Result<CannedAcl> {
        match s {
            "private" | "bucket-owner-read" | "bucket-owner-full-control" => Ok(CannedAcl::Private),
            "public-read" => Ok(CannedAcl::PublicRead),
            "public-read-write" => Ok(CannedAcl::PublicReadWrite),
            "authenticated-read" => Ok(CannedAcl::AuthenticatedRead),
            other => Err(s3_error!(
                NotImplemented,
                "canned ACL `{other}` is not supported (private, public-read, public-read-write, authenticated-read)"
            )),
        }
    }

    /// The `x-amz-acl` name.
    pub fn as_str(self) -> &'static str {
        match self {
            CannedAcl::Private => "private",
            CannedAcl::PublicRead => "public-read",
            CannedAcl::PublicReadWrite => "public-read-write",
            CannedAcl::AuthenticatedRead => "authenticated-read",
        }
    }

    /// Whether this ACL grants `perm` to a requester other than the owner (`signed`: the
    /// requester is an authenticated user). Only READ and WRITE are ever granted to groups.
    pub fn grants(self, perm: AclPermission, signed: bool) -> bool {
        match (self, perm) {
            (CannedAcl::PublicRead | CannedAcl::PublicReadWrite, AclPermission::Read) => true,
            (CannedAcl::PublicReadWrite, AclPermission::Write) => true,
            (CannedAcl::AuthenticatedRead, AclPermission::Read) => signed,
            _ => false,
        }
    }

    /// The group grants beyond the owner's, as (group URI, permission).
    fn group_grants(self) -> &'static [(&'static str, &'static str)] {
        match self {
            CannedAcl::Private => &[],
            CannedAcl::PublicRead => &[(ALL_USERS, Permission::READ)],
            CannedAcl::PublicReadWrite => &[
                (ALL_USERS, Permission::READ),
                (ALL_USERS, Permission::WRITE),
            ],
            CannedAcl::AuthenticatedRead => &[(AUTHENTICATED_USERS, Permission::READ)],
        }
    }

    /// The ACL as S3 returns it: the owner with FULL_CONTROL, then the group grants.
    pub fn to_policy(self, owner: &str) -> (Owner, Vec<Grant>) {
        let owner_dto = Owner {
            display_name: Some(owner.to_string()),
            id: Some(owner.to_string()),
        };
        let mut grants = vec![Grant {
            grantee: Some(Grantee {
                display_name: Some(owner.to_string()),
                email_address: None,
                id: Some(owner.to_string()),
                type_: Type::from_static(Type::CANONICAL_USER),
                uri: None,
            }),
            permission: Some(Permission::from_static(Permission::FULL_CONTROL)),
        }];
        for (uri, perm) in self.group_grants() {
            grants.push(Grant {
                grantee: Some(Grantee {
                    display_name: None,
                    email_address: None,
                    id: None,
                    type_: Type::from_static(Type::GROUP),
                    uri: Some((*uri).to_string()),
                }),
                permission: Some(Permission::from_static(perm)),
            });
        }
        (owner_dto, grants)
    }

    /// The canned ACL an AccessControlPolicy expresses for a resource owned by `owner`: the
    /// owner's own grants are ignored (the owner always has full control), the rest must be
    /// exactly the group grants of one canned ACL.
    pub fn from_policy(policy: &AccessControlPolicy, owner: &str) -> S3Result<CannedAcl> {
        let grants = policy.grants.as_deref().unwrap_or_default();
        if grants.len() > MAX_GRANTS {
            return Err(s3_error!(
                MalformedACLError,
                "at most {MAX_GRANTS} grants per ACL"
            ));
        }
        let mut groups: Vec<(&str, &str)> = Vec::new();
        for g in grants {
            let (Some(grantee), Some(perm)) = (&g.grantee, &g.permission) else {
                return Err(s3_error!(
                    MalformedACLError,
                    "every grant needs a grantee and a permission"
                ));
            };
            let perm = match perm.as_str() {
                p @ (Permission::READ
                | Permission::WRITE
                | Permission::READ_ACP
                | Permission::WRITE_ACP
                | Permission::FULL_CONTROL) => p,
                other => return Err(s3_error!(MalformedACLError, "unknown permission `{other}`")),
            };
            match grantee.type_.as_str() {
                Type::CANONICAL_USER if grantee.id.as_deref() == Some(owner) => {}
                Type::CANONICAL_USER | Type::AMAZON_CUSTOMER_BY_EMAIL => {
                    return Err(s3_error!(
                        NotImplemented,
                        "grants to single users are not supported; use a bucket policy"
                    ))
                }
                Type::GROUP => {
                    let uri = grantee.uri.as_deref().ok_or_else(|| {
                        s3_error!(MalformedACLError, "a group grantee needs a URI")
                    })?;
                    if !groups.contains(&(uri, perm)) {
                        groups.push((uri, perm));
                    }
                }
                other => {
                    return Err(s3_error!(
                        MalformedACLError,
                        "unknown grantee type `{other}`"
                    ))
                }
            }
        }
        groups.sort_unstable();
        for acl in [
            CannedAcl::Private,
            CannedAcl::PublicRead,
            CannedAcl::PublicReadWrite,
            CannedAcl::AuthenticatedRead,
        ] {
            let mut want = acl.group_grants().to_vec();
            want.sort_unstable();
            if want == groups {
                return Ok(acl);
            }
        }
        Err(s3_error!(
            NotImplemented,
            "only ACLs equal to a canned ACL (private, public-read, public-read-write, authenticated-read) are supported"
        ))
    }
}

/// The canned ACL a PutBucketAcl or PutObjectAcl sets: from the `x-amz-acl` header or from
/// the XML body, never both; `x-amz-grant-*` headers are NotImplemented.
pub fn acl_to_set(
    header: Option<&str>,
    body: Option<&AccessControlPolicy>,
    grant_headers: bool,
    owner: &str,
) -> S3Result<CannedAcl> {
    if grant_headers {
        return Err(s3_error!(
            NotImplemented,
            "x-amz-grant-* headers are not supported; use x-amz-acl"
        ));
    }
    match (header, body) {
        (Some(_), Some(_)) => Err(s3_error!(
            UnexpectedContent,
            "give either x-amz-acl or an AccessControlPolicy body, not both"
        )),
        (Some(h), None) => CannedAcl::parse(h),
        (None, Some(p)) => CannedAcl::from_policy(p, owner),
        (None, None) => Err(s3_error!(
            MalformedACLError,
            "no ACL given (x-amz-acl header or AccessControlPolicy body)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use s3s::S3ErrorCode;

    fn policy_of(grants: Vec<Grant>) -> AccessControlPolicy {
        AccessControlPolicy {
            grants: Some(grants),
            owner: None,
        }
    }

    fn group(uri: &str, perm: &'static str) -> Grant {
        Grant {
            grantee: Some(Grantee {
                display_name: None,
                email_address: None,
                id: None,
                type_: Type::from_static(Type::GROUP),
                uri: Some(uri.into()),
            }),
            permission: Some(Permission::from_static(perm)),
        }
    }

    #[test]
    fn canned_acls_grant_only_their_permissions() {
        use AclPermission::*;
        for perm in [Read, Write, ReadAcp, WriteAcp] {
            for signed in [false, true] {
                assert!(!CannedAcl::Private.grants(perm, signed));
                assert_eq!(CannedAcl::PublicRead.grants(perm, signed), perm == Read);
                assert_eq!(
                    CannedAcl::PublicReadWrite.grants(perm, signed),
                    perm == Read || perm == Write
                );
                assert_eq!(
                    CannedAcl::AuthenticatedRead.grants(perm, signed),
                    perm == Read && signed
                );
            }
        }
    }

    #[test]
    fn every_canned_acl_round_trips_through_its_xml_form() {
        for acl in [
            CannedAcl::Private,
            CannedAcl::PublicRead,
            CannedAcl::PublicReadWrite,
            CannedAcl::AuthenticatedRead,
        ] {
            assert_eq!(CannedAcl::parse(acl.as_str()).unwrap(), acl);
            let (owner, grants) = acl.to_policy("alice");
            assert_eq!(owner.id.as_deref(), Some("alice"));
            let p = AccessControlPolicy {
                grants: Some(grants),
                owner: Some(owner),
            };
            assert_eq!(CannedAcl::from_policy(&p, "alice").unwrap(), acl);
        }
    }

    #[test]
    fn finer_or_malformed_acls_are_refused() {
        let code = |r: S3Result<CannedAcl>| r.unwrap_err().code().clone();
        assert_eq!(
            code(CannedAcl::parse("aws-exec-read")),
            S3ErrorCode::NotImplemented
        );
        // A grant to another single user, or a group grant no canned ACL has.
        let (_, mut grants) = CannedAcl::Private.to_policy("bob");
        assert_eq!(
            code(CannedAcl::from_policy(&policy_of(grants.clone()), "alice")),
            S3ErrorCode::NotImplemented
        );
        grants.push(group(AUTHENTICATED_USERS, Permission::WRITE));
        assert_eq!(
            code(CannedAcl::from_policy(&policy_of(grants), "bob")),
            S3ErrorCode::NotImplemented
        );
        assert_eq!(
            code(CannedAcl::from_policy(
                &policy_of(vec![group(ALL_USERS, Permission::WRITE)]),
                "bob"
            )),
            S3ErrorCode::NotImplemented
        );
        // Malformed: no permission, unknown permission, group without URI, too many.
        let mut g = group(ALL_USERS, Permission::READ);
        g.permission = None;
        assert_eq!(
            code(CannedAcl::from_policy(&policy_of(vec![g]), "a")),
            S3ErrorCode::MalformedACLError
        );
        let mut g = group(ALL_USERS, Permission::READ);
        g.permission = Some(Permission::from("EVERYTHING".to_string()));
        assert_eq!(
            code(CannedAcl::from_policy(&policy_of(vec![g]), "a")),
            S3ErrorCode::MalformedACLError
        );
        let mut g = group(ALL_USERS, Permission::READ);
        g.grantee.as_mut().unwrap().uri = None;
        assert_eq!(
            code(CannedAcl::from_policy(&policy_of(vec![g]), "a")),
            S3ErrorCode::MalformedACLError
        );
        let many = vec![group(ALL_USERS, Permission::READ); MAX_GRANTS + 1];
        assert_eq!(
            code(CannedAcl::from_policy(&policy_of(many), "a")),
            S3ErrorCode::MalformedACLError
        );
        // Repeated identical grants are one grant.
        let twice = vec![group(ALL_USERS, Permission::READ); 3];
        assert_eq!(
            CannedAcl::from_policy(&policy_of(twice), "a").unwrap(),
            CannedAcl::PublicRead
        );
    }

    #[test]
    fn header_or_body_never_both() {
        let body = policy_of(vec![]);
        let code = |r: S3Result<CannedAcl>| r.unwrap_err().code().clone();
        assert_eq!(
            acl_to_set(Some("public-read"), None, false, "a").unwrap(),
            CannedAcl::PublicRead
        );
        assert_eq!(
            acl_to_set(None, Some(&body), false, "a").unwrap(),
            CannedAcl::Private
        );
        assert_eq!(
            code(acl_to_set(Some("private"), Some(&body), false, "a")),
            S3ErrorCode::UnexpectedContent
        );
        assert_eq!(
            code(acl_to_set(None, None, false, "a")),
            S3ErrorCode::MalformedACLError
        );
        assert_eq!(
            code(acl_to_set(Some("private"), None, true, "a")),
            S3ErrorCode::NotImplemented
        );
    }
}
