//! Who sent a request, as the gateway's own signature check established it: the
//! [`Identity`] that `server::authenticate` puts into the request's extensions for every
//! signed request (SigV4 or SigV2), read back by admission and the operations. Requests
//! without one are anonymous. Also carries [`AdmittedBucket`], the bucket record admission
//! authorized the request against, so that an operation acts on exactly that record.

use hyper::http::Extensions;

use crate::buckets::BucketInfo;

/// Name the rate limiter charges anonymous requests to.
pub const ANONYMOUS: &str = "*anonymous*";

/// The user behind a signed request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    /// User name (owner of the buckets it creates).
    pub user: String,
    /// The access key that signed.
    pub access_key: String,
    /// Whether the key's record was read from the cluster for this request (otherwise it came
    /// from the gateway's cache and admission checks it is still there).
    pub fresh: bool,
}

/// The signed user of a request's extensions (None: anonymous).
pub fn caller(ext: &Extensions) -> Option<&Identity> {
    ext.get::<Identity>()
}

/// The bucket record admission authorized a request against.
#[derive(Clone, Debug)]
pub struct AdmittedBucket(pub BucketInfo);
