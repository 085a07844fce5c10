//! Object lock operations: Put/GetObjectLockConfiguration, Put/GetObjectRetention,
//! Put/GetObjectLegalHold, the lock a new version gets (`x-amz-object-lock-*` headers or the
//! bucket's default retention, stored in its entry), and the check a delete of a version
//! passes. A lock changed after the write is a record bound to that version (`bound`, in
//! `s3.olock.{bucket-id}`). Object lock needs versioning: a bucket created with it gets
//! versioning enabled, and its versioning can no longer be suspended.

use std::sync::Arc;

use s3s::dto::*;
use s3s::{s3_error, S3Request, S3Response, S3Result};

use crate::backend::Backend;
use crate::bound;
use crate::buckets::{self, now_ms, BucketInfo};
use crate::entry::Entry;
use crate::gateway::Gateway;
use crate::headers::timestamp;
use crate::object_lock::{DefaultRetention, Lock, LockConfig, Mode, Retention};
use crate::object_ops::find_entry;
use crate::versions::Versioning;

/// The object holding a bucket's lock records.
pub fn lock_object(b: &BucketInfo) -> String {
    format!("s3.olock.{}", b.id)
}

fn ms_of(t: &Timestamp) -> i64 {
    let t = time::OffsetDateTime::from(t.clone());
    i64::try_from(t.unix_timestamp_nanos() / 1_000_000).unwrap_or(i64::MAX)
}

/// The lock in force on `entry` (a version of `key` of `b`).
pub async fn effective(
    backend: &Arc<dyn Backend>,
    b: &BucketInfo,
    key: &str,
    entry: &Entry,
) -> S3Result<Lock> {
    Ok(bound::read(backend, &lock_object(b), key, entry)
        .await?
        .unwrap_or(Lock {
            retention: entry.retention,
            legal_hold: entry.legal_hold,
        }))
}

fn lock_enabled(b: &BucketInfo) -> S3Result<LockConfig> {
    b.object_lock.ok_or_else(|| {
        s3_error!(
            InvalidRequest,
            "Bucket is missing Object Lock Configuration"
        )
    })
}

/// The lock of a version about to be written to `b` with these request headers: the ones
/// given (mode and date together), else the bucket's default retention. InvalidRequest when
/// the bucket has no object lock and a header asks for one.
pub fn for_new_version(
    b: &BucketInfo,
    mode: Option<&ObjectLockMode>,
    until: Option<&Timestamp>,
    hold: Option<&ObjectLockLegalHoldStatus>,
) -> S3Result<Lock> {
    if mode.is_none() && until.is_none() && hold.is_none() {
        let retention = b
            .object_lock
            .and_then(|c| c.default)
            .map(|d| d.from(now_ms()));
        return Ok(Lock {
            retention,
            legal_hold: false,
        });
    }
    let config = lock_enabled(b)?;
    let retention = match (mode, until) {
        (Some(m), Some(u)) => {
            let r = Retention {
                mode: Mode::parse(m.as_str())?,
                until_ms: ms_of(u),
            };
            if !r.active(now_ms()) {
                return Err(s3_error!(
                    InvalidArgument,
                    "the retain until date must be in the future"
                ));
            }
            Some(r)
        }
        (None, None) => config.default.map(|d| d.from(now_ms())),
        _ => {
            return Err(s3_error!(
                InvalidArgument,
                "x-amz-object-lock-mode and x-amz-object-lock-retain-until-date go together"
            ))
        }
    };
    Ok(Lock {
        retention,
        legal_hold: legal_hold(hold)?,
    })
}

fn legal_hold(status: Option<&ObjectLockLegalHoldStatus>) -> S3Result<bool> {
    match status.map(|s| s.as_str()) {
        None | Some(ObjectLockLegalHoldStatus::OFF) => Ok(false),
        Some(ObjectLockLegalHoldStatus::ON) => Ok(true),
        Some(other) => Err(s3_error!(
            MalformedXML,
            "a legal hold status is ON or OFF, not {other}"
        )),
    }
}

/// The response fields (mode, retain until, legal hold) of a version's lock.
pub fn response_fields(
    lock: &Lock,
) -> (
    Option<ObjectLockMode>,
    Option<Timestamp>,
    Option<ObjectLockLegalHoldStatus>,
) {
    (
        lock.retention
            .map(|r| ObjectLockMode::from_static(r.mode.name())),
        lock.retention.map(|r| timestamp(r.until_ms)),
        lock.legal_hold
            .then(|| ObjectLockLegalHoldStatus::from_static(ObjectLockLegalHoldStatus::ON)),
    )
}

/// Refuses (AccessDenied) deleting `entry`, a version of `key`, while its lock holds;
/// `bypass`: the caller asked to bypass governance retention and may.
pub async fn check_delete(
    gw: &Gateway,
    b: &BucketInfo,
    key: &str,
    entry: &Entry,
    bypass: bool,
) -> S3Result<()> {
    if b.object_lock.is_none() && entry.retention.is_none() && !entry.legal_hold {
        return Ok(());
    }
    effective(&gw.backend, b, key, entry)
        .await?
        .check_delete(now_ms(), bypass)
}

/// PutObjectLockConfiguration: enables object lock on a versioned bucket and sets its
/// default retention (InvalidBucketState unless versioning is enabled).
pub async fn put_config(
    gw: &Gateway,
    req: S3Request<PutObjectLockConfigurationInput>,
) -> S3Result<S3Response<PutObjectLockConfigurationOutput>> {
    let i = req.input;
    let conf = i
        .object_lock_configuration
        .ok_or_else(|| s3_error!(MalformedXML, "no ObjectLockConfiguration"))?;
    if conf.object_lock_enabled.as_ref().map(|e| e.as_str()) != Some(ObjectLockEnabled::ENABLED) {
        return Err(s3_error!(MalformedXML, "ObjectLockEnabled must be Enabled"));
    }
    let default = match conf.rule.and_then(|r| r.default_retention) {
        Some(d) => {
            let mode = d
                .mode
                .ok_or_else(|| s3_error!(MalformedXML, "a default retention needs a Mode"))?;
            Some(DefaultRetention::new(
                Mode::parse(mode.as_str())?,
                d.days,
                d.years,
            )?)
        }
        None => None,
    };
    let mut b = buckets::get_bucket(&gw.backend, &i.bucket).await?;
    if b.versioning != Versioning::Enabled {
        return Err(s3_error!(
            InvalidBucketState,
            "object lock needs versioning enabled"
        ));
    }
    b.object_lock = Some(LockConfig { default });
    buckets::update_bucket(&gw.backend, &b).await?;
    gw.buckets.forget(&b.name);
    Ok(S3Response::new(PutObjectLockConfigurationOutput::default()))
}

/// GetObjectLockConfiguration.
pub async fn get_config(
    gw: &Gateway,
    req: S3Request<GetObjectLockConfigurationInput>,
) -> S3Result<S3Response<GetObjectLockConfigurationOutput>> {
    let b = gw.bucket(&req.extensions, &req.input.bucket).await?;
    let config = b
        .object_lock
        .ok_or_else(|| s3_error!(ObjectLockConfigurationNotFoundError))?;
    let rule = config.default.map(|d| ObjectLockRule {
        default_retention: Some(s3s::dto::DefaultRetention {
            mode: Some(ObjectLockRetentionMode::from_static(d.mode.name())),
            days: i32::try_from(d.days).ok(),
            years: None,
        }),
    });
    Ok(S3Response::new(GetObjectLockConfigurationOutput {
        object_lock_configuration: Some(ObjectLockConfiguration {
            object_lock_enabled: Some(ObjectLockEnabled::from_static(ObjectLockEnabled::ENABLED)),
            rule,
        }),
    }))
}

/// Whether `caller` may bypass governance retention on `b` when it asks to
/// (`x-amz-bypass-governance-retention`): the bucket's owner may.
pub fn may_bypass(caller: Option<&str>, b: &BucketInfo, asked: Option<bool>) -> bool {
    asked == Some(true) && caller == Some(b.owner.as_str())
}

/// PutObjectRetention.
pub async fn put_retention(
    gw: &Gateway,
    req: S3Request<PutObjectRetentionInput>,
) -> S3Result<S3Response<PutObjectRetentionOutput>> {
    let i = &req.input;
    let b = gw.bucket(&req.extensions, &i.bucket).await?;
    lock_enabled(&b)?;
    let bypass = may_bypass(
        gw.caller(&req).as_deref(),
        &b,
        i.bypass_governance_retention,
    );
    let new = match &i.retention {
        Some(ObjectLockRetention {
            mode: Some(m),
            retain_until_date: Some(u),
        }) => Some(Retention {
            mode: Mode::parse(m.as_str())?,
            until_ms: ms_of(u),
        }),
        Some(ObjectLockRetention {
            mode: None,
            retain_until_date: None,
        })
        | None => None,
        _ => {
            return Err(s3_error!(
                MalformedXML,
                "a retention has both Mode and RetainUntilDate"
            ))
        }
    };
    let e = find_entry(gw, &b, &i.key, i.version_id.as_deref()).await?;
    let mut lock = effective(&gw.backend, &b, &i.key, &e).await?;
    lock.check_retention_change(new, now_ms(), bypass)?;
    lock.retention = new;
    bound::write(&gw.backend, &lock_object(&b), &i.key, &e, lock).await?;
    Ok(S3Response::new(PutObjectRetentionOutput::default()))
}

/// GetObjectRetention (NoSuchObjectLockConfiguration when the version has none).
pub async fn get_retention(
    gw: &Gateway,
    req: S3Request<GetObjectRetentionInput>,
) -> S3Result<S3Response<GetObjectRetentionOutput>> {
    let i = &req.input;
    let b = gw.bucket(&req.extensions, &i.bucket).await?;
    lock_enabled(&b)?;
    let e = find_entry(gw, &b, &i.key, i.version_id.as_deref()).await?;
    let r = effective(&gw.backend, &b, &i.key, &e)
        .await?
        .retention
        .ok_or_else(|| s3_error!(NoSuchObjectLockConfiguration))?;
    Ok(S3Response::new(GetObjectRetentionOutput {
        retention: Some(ObjectLockRetention {
            mode: Some(ObjectLockRetentionMode::from_static(r.mode.name())),
            retain_until_date: Some(timestamp(r.until_ms)),
        }),
    }))
}

/// PutObjectLegalHold (ON or OFF).
pub async fn put_legal_hold(
    gw: &Gateway,
    req: S3Request<PutObjectLegalHoldInput>,
) -> S3Result<S3Response<PutObjectLegalHoldOutput>> {
    let i = &req.input;
    let b = gw.bucket(&req.extensions, &i.bucket).await?;
    lock_enabled(&b)?;
    let status = i
        .legal_hold
        .as_ref()
        .and_then(|h| h.status.as_ref())
        .ok_or_else(|| s3_error!(MalformedXML, "a legal hold needs a Status"))?;
    let on = legal_hold(Some(status))?;
    let e = find_entry(gw, &b, &i.key, i.version_id.as_deref()).await?;
    let mut lock = effective(&gw.backend, &b, &i.key, &e).await?;
    lock.legal_hold = on;
    bound::write(&gw.backend, &lock_object(&b), &i.key, &e, lock).await?;
    Ok(S3Response::new(PutObjectLegalHoldOutput::default()))
}

/// GetObjectLegalHold.
pub async fn get_legal_hold(
    gw: &Gateway,
    req: S3Request<GetObjectLegalHoldInput>,
) -> S3Result<S3Response<GetObjectLegalHoldOutput>> {
    let i = &req.input;
    let b = gw.bucket(&req.extensions, &i.bucket).await?;
    lock_enabled(&b)?;
    let e = find_entry(gw, &b, &i.key, i.version_id.as_deref()).await?;
    let on = effective(&gw.backend, &b, &i.key, &e).await?.legal_hold;
    let status = if on {
        ObjectLockLegalHoldStatus::ON
    } else {
        ObjectLockLegalHoldStatus::OFF
    };
    Ok(S3Response::new(GetObjectLegalHoldOutput {
        legal_hold: Some(ObjectLockLegalHold {
            status: Some(ObjectLockLegalHoldStatus::from_static(status)),
        }),
    }))
}
