//! Request admission after s3s has routed the request: a cached access key must still exist
//! ([`crate::users::Users::recheck`], concurrently with the bucket lookup), presigned SigV4
//! URLs may not live longer than 7 days, header-signed requests must be dated within 15
//! minutes of the gateway's clock, the caller (a user, or anonymous) must be authorized for
//! the operation on the bucket or object (`authz`: ownership, policy, ACLs), and the per-user
//! and per-bucket rate limits must admit the request (else SlowDown). The bucket record it
//! authorized against travels with the request ([`AdmittedBucket`]) so the operation acts on
//! exactly that record. Reads the wall clock; keeps no state of its own.

use s3s::access::{S3Access, S3AccessContext};
use s3s::path::S3Path;
use s3s::{s3_error, S3Result};

use crate::authz::{authorize, Action};
use crate::buckets::get_bucket;
use crate::convert::nanos;
use crate::gateway::Gateway;
use crate::identity::{self, AdmittedBucket, Identity, ANONYMOUS};
use crate::ratelimit::Refusal;

/// Longest presigned URL lifetime (AWS: 7 days).
pub const MAX_PRESIGN_EXPIRES_S: u64 = 7 * 24 * 3600;
/// Largest allowed difference between a request's date and the gateway's clock.
pub const MAX_SKEW_S: i64 = 15 * 60;

/// The gateway's `S3Access`.
pub struct Admission {
    /// The gateway (users, buckets, limits, metrics).
    pub gw: Gateway,
}

/// Seconds since the Unix epoch of an ISO 8601 basic timestamp (`20130524T000000Z`).
pub fn parse_amz_date(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() != 16 || b[8] != b'T' || b[15] != b'Z' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let t = s.get(r)?;
        t.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| t.parse().ok())
            .flatten()
    };
    // Two digits fit a u8 and four an i32: the conversions below cannot fail.
    let field = |r: std::ops::Range<usize>| u8::try_from(num(r)?).ok();
    let month = time::Month::try_from(field(4..6)?).ok()?;
    let year = i32::try_from(num(0..4)?).ok()?;
    let date = time::Date::from_calendar_date(year, month, field(6..8)?).ok()?;
    let t = time::Time::from_hms(field(9..11)?, field(11..13)?, field(13..15)?).ok()?;
    Some(
        time::PrimitiveDateTime::new(date, t)
            .assume_utc()
            .unix_timestamp(),
    )
}

fn query_param<'a>(query: &'a str, name: &str) -> Option<&'a str> {
    query.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        (k == name).then_some(v)
    })
}

/// Checks a request's dating: presigned lifetime and header clock skew.
pub fn check_dates(query: Option<&str>, amz_date: Option<&str>, now_s: i64) -> S3Result<()> {
    if let Some(expires) = query.and_then(|q| query_param(q, "X-Amz-Expires")) {
        let ok = expires
            .parse::<u64>()
            .is_ok_and(|e| (1..=MAX_PRESIGN_EXPIRES_S).contains(&e));
        if !ok {
            return Err(s3_error!(
                AuthorizationQueryParametersError,
                "X-Amz-Expires must be 1..={MAX_PRESIGN_EXPIRES_S} seconds"
            ));
        }
        return Ok(());
    }
    if let Some(d) = amz_date {
        let t = parse_amz_date(d).ok_or_else(|| s3_error!(AccessDenied, "bad x-amz-date"))?;
        if (t - now_s).abs() > MAX_SKEW_S {
            return Err(s3_error!(RequestTimeTooSkewed));
        }
    }
    Ok(())
}

#[async_trait::async_trait]
impl S3Access for Admission {
    async fn check(&self, cx: &mut S3AccessContext<'_>) -> S3Result<()> {
        let admitted = self.admit(cx).await;
        self.gw
            .metrics
            .record_op(cx.s3_op().name(), admitted.is_ok());
        admitted
    }

    /// A POST form upload names its key in the form: the caller is authorized for that key
    /// here, once s3s has parsed the form (admission passed it without a key). The form's
    /// `${filename}` variable is refused: s3s does not hand the file's name on.
    async fn post_object(
        &self,
        req: &mut s3s::S3Request<s3s::dto::PostObjectInput>,
    ) -> S3Result<()> {
        if req.input.key.contains("${filename}") {
            return Err(s3_error!(
                InvalidArgument,
                "the ${{filename}} key variable is not supported; name the key in the form"
            ));
        }
        let caller = identity::caller(&req.extensions).map(|id| id.user.clone());
        let b = self.gw.bucket(&req.extensions, &req.input.bucket).await?;
        authorize(
            &self.gw,
            caller.as_deref(),
            &b,
            Action::PutObject,
            Some(&req.input.key),
        )
        .await
    }
}

impl Admission {
    /// The admission decision for one routed request (see the module).
    async fn admit(&self, cx: &mut S3AccessContext<'_>) -> S3Result<()> {
        let gw = &self.gw;
        let mut caller = identity::caller(cx.extensions_mut()).cloned();
        let form = cx.s3_op().name() == "PostObject";
        if form && caller.is_none() {
            // s3s checked the form's policy signature with this key's secret.
            if let Some(key) = cx.credentials().map(|c| c.access_key.clone()) {
                let (user, fresh) = gw.users.lookup(&key).await?;
                let id = Identity {
                    user: user.name,
                    access_key: user.access_key,
                    fresh,
                };
                cx.extensions_mut().insert(id.clone());
                caller = Some(id);
            }
        }
        // SigV4 (s3s verified it again and holds its credentials); SigV2 times were checked
        // with its signature.
        if cx.credentials().is_some() {
            let now_s = time::OffsetDateTime::now_utc().unix_timestamp();
            let amz_date = cx.headers().get("x-amz-date").and_then(|v| v.to_str().ok());
            check_dates(cx.uri().query(), amz_date, now_s)?;
        }
        let action = Action::of_op(cx.s3_op().name());
        let (bucket, key) = match cx.s3_path() {
            S3Path::Root => (None, None),
            S3Path::Bucket { bucket } => (Some(bucket.to_string()), None),
            S3Path::Object { bucket, key } => (Some(bucket.to_string()), Some(key.to_string())),
        };
        let needs_record = bucket.is_some() && action != Action::CreateBucket;
        let recheck = async {
            match &caller {
                Some(id) => gw.users.recheck(id).await,
                None => Ok(()),
            }
        };
        let record = async {
            match &bucket {
                Some(name) if needs_record && action.writes() => {
                    get_bucket(&gw.backend, name).await.map(Some)
                }
                Some(name) if needs_record => gw.buckets.get(&gw.backend, name).await.map(Some),
                _ => Ok(None),
            }
        };
        let (rechecked, record) = tokio::join!(recheck, record);
        rechecked?;
        let user = caller.as_ref().map(|id| id.user.as_str());
        match record? {
            Some(b) => {
                // DeleteObjects names its keys in the body, a POST form upload its key in
                // the form: each is authorized by the operation itself.
                if cx.s3_op().name() != "DeleteObjects" && !form {
                    authorize(gw, user, &b, action, key.as_deref()).await?;
                }
                cx.extensions_mut().insert(AdmittedBucket(b));
            }
            None if user.is_none() => {
                return Err(s3_error!(AccessDenied, "anonymous access is denied"));
            }
            None => {}
        }
        let bytes = crate::server::declared_len(cx.headers());
        let now_ns = nanos(gw.epoch.elapsed());
        let who = user.unwrap_or(ANONYMOUS);
        match gw.limiter.admit(who, bucket.as_deref(), bytes, now_ns) {
            Ok(()) => Ok(()),
            Err(Refusal::User) => Err(s3_error!(SlowDown, "request rate of user {who} exceeded")),
            Err(Refusal::Bucket) => Err(s3_error!(SlowDown, "request rate of the bucket exceeded")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(parse_amz_date("19700101T000000Z"), Some(0));
        assert_eq!(parse_amz_date("20130524T000000Z"), Some(1_369_353_600));
        for bad in [
            "",
            "2013052T000000Z",
            "20131324T000000Z",
            "20130524T000000",
            "2013+524T000000Z",
        ] {
            assert_eq!(parse_amz_date(bad), None, "{bad}");
        }
        let now = 1_369_353_600;
        check_dates(None, Some("20130524T001400Z"), now).unwrap();
        let e = check_dates(None, Some("20130524T001600Z"), now).unwrap_err();
        assert_eq!(e.code(), &s3s::S3ErrorCode::RequestTimeTooSkewed);
        check_dates(Some("X-Amz-Expires=604800"), None, now).unwrap();
        for q in [
            "X-Amz-Expires=604801",
            "a=b&X-Amz-Expires=0",
            "X-Amz-Expires=x",
        ] {
            let e = check_dates(Some(q), None, now).unwrap_err();
            assert_eq!(
                e.code(),
                &s3s::S3ErrorCode::AuthorizationQueryParametersError
            );
        }
    }
}
