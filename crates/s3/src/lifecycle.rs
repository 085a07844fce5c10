//! Lifecycle rules: what PutBucketLifecycleConfiguration stores in a bucket's registry record,
//! checked as S3 checks it, and the pure questions the gateway's lifecycle pass
//! (`lifecycle_pass`) asks of them: does a rule apply to this object, and when is a version,
//! a delete marker or an upload due. Actions: expiration of current versions by age or date,
//! of noncurrent versions by age (keeping the newest N), of expired delete markers, and the
//! abort of incomplete multipart uploads; filters by prefix, tags and object size.
//! Transitions to other storage classes are refused: every object lives in the gateway's
//! pool.
//!
//! Ages count in lifecycle days. A real day (86,400 s) ends, as in S3, at the next midnight
//! UTC after the object's time plus its days; a shorter test day (the gateway's
//! `lifecycle_day_secs`, after radosgw's `rgw_lc_debug_interval`) counts from the object's
//! time exactly.

use s3s::dto::*;
use s3s::{s3_error, S3Result};
use serde::{Deserialize, Serialize};

use crate::tagging::{self, Tags};

/// Most rules one configuration holds (S3: 1000).
pub const MAX_RULES: usize = 1000;
/// Longest rule id (S3: 255 characters).
pub const MAX_ID_CHARS: usize = 255;
/// Milliseconds in a real day.
pub const DAY_MS: i64 = 86_400_000;

/// Which objects a rule applies to: all of prefix, tags and size bounds must hold.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Filter {
    /// Key prefix ("" matches every key).
    #[serde(default)]
    pub prefix: String,
    /// Tags the object must carry, each with this value.
    #[serde(default)]
    pub tags: Tags,
    /// The object must be larger than this many bytes.
    #[serde(default)]
    pub size_greater_than: Option<u64>,
    /// The object must be smaller than this many bytes.
    #[serde(default)]
    pub size_less_than: Option<u64>,
    /// The prefix came as the rule's legacy `Prefix` element, not inside `Filter`.
    #[serde(default)]
    pub legacy: bool,
}

impl Filter {
    /// Whether an object `key` of `size` bytes with `tags` is one the rule applies to.
    pub fn matches(&self, key: &str, size: u64, tags: &Tags) -> bool {
        key.starts_with(&self.prefix)
            && self.tags.iter().all(|(k, v)| tags.get(k) == Some(v))
            && self.size_greater_than.is_none_or(|min| size > min)
            && self.size_less_than.is_none_or(|max| size < max)
    }

    /// Whether matching needs the object's tags.
    pub fn needs_tags(&self) -> bool {
        !self.tags.is_empty()
    }
}

/// When current versions expire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Expiration {
    /// This many days after the version was written.
    Days(u32),
    /// From this time on (ms since the Unix epoch; midnight UTC).
    Date(i64),
}

/// One lifecycle rule.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rule {
    /// Rule id (unique in the bucket; generated when not given).
    pub id: String,
    /// Whether the rule is applied (`Enabled`) or kept but idle (`Disabled`).
    pub enabled: bool,
    /// The objects it applies to.
    pub filter: Filter,
    /// Current versions expire (in a versioned bucket: get a delete marker).
    #[serde(default)]
    pub expiration: Option<Expiration>,
    /// A delete marker with no older versions left is removed.
    #[serde(default)]
    pub expired_delete_marker: bool,
    /// Noncurrent versions expire this many days after they became noncurrent.
    #[serde(default)]
    pub noncurrent_days: Option<u32>,
    /// ... except the newest this many noncurrent versions of each key.
    #[serde(default)]
    pub newer_noncurrent_versions: Option<u32>,
    /// Incomplete multipart uploads are aborted this many days after they started.
    #[serde(default)]
    pub abort_upload_days: Option<u32>,
}

/// Lifecycle time: how long a lifecycle day is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Clock {
    /// Milliseconds in one lifecycle day.
    pub day_ms: i64,
}

impl Clock {
    /// A clock whose day is `day_secs` seconds (at least 1).
    pub fn with_day_secs(day_secs: u64) -> Clock {
        let secs = i64::try_from(day_secs.max(1)).unwrap_or(i64::MAX / 1000);
        Clock {
            day_ms: secs.saturating_mul(1000),
        }
    }

    /// When something that started at `since_ms` is `days` lifecycle days old.
    pub fn due(self, since_ms: i64, days: u32) -> i64 {
        let end = since_ms.saturating_add(self.day_ms.saturating_mul(i64::from(days)));
        if self.day_ms == DAY_MS {
            // The next midnight UTC at or after the end, as S3 rounds.
            end.saturating_add(DAY_MS - 1).div_euclid(DAY_MS) * DAY_MS
        } else {
            end
        }
    }
}

impl Rule {
    /// Whether a current version written at `mtime_ms` has expired by `now_ms`.
    pub fn current_expired(&self, clock: Clock, mtime_ms: i64, now_ms: i64) -> bool {
        match self.expiration {
            Some(Expiration::Days(d)) => clock.due(mtime_ms, d) <= now_ms,
            Some(Expiration::Date(at)) => at <= now_ms,
            None => false,
        }
    }

    /// Whether a version noncurrent since `since_ms`, with `newer` noncurrent versions of its
    /// key newer than it, has expired by `now_ms`.
    pub fn noncurrent_expired(&self, clock: Clock, since_ms: i64, newer: u32, now_ms: i64) -> bool {
        let Some(days) = self.noncurrent_days else {
            return false;
        };
        newer >= self.newer_noncurrent_versions.unwrap_or(0) && clock.due(since_ms, days) <= now_ms
    }

    /// Whether an upload started at `initiated_ms` of `key` is to be aborted by `now_ms`.
    pub fn upload_expired(&self, clock: Clock, key: &str, initiated_ms: i64, now_ms: i64) -> bool {
        self.abort_upload_days.is_some_and(|d| {
            key.starts_with(&self.filter.prefix) && clock.due(initiated_ms, d) <= now_ms
        })
    }
}

/// The rules of PutBucketLifecycleConfiguration's document, checked as S3 checks them
/// (MalformedXML or InvalidArgument, InvalidRequest for what the gateway does not do).
pub fn from_config(c: &BucketLifecycleConfiguration) -> S3Result<Vec<Rule>> {
    if c.rules.is_empty() || c.rules.len() > MAX_RULES {
        return Err(s3_error!(
            MalformedXML,
            "a lifecycle configuration holds 1 to {MAX_RULES} rules"
        ));
    }
    let mut rules: Vec<Rule> = Vec::with_capacity(c.rules.len());
    for (n, r) in c.rules.iter().enumerate() {
        let rule = rule_from(r, n)?;
        if rules.iter().any(|o| o.id == rule.id) {
            return Err(s3_error!(
                InvalidArgument,
                "rule id `{}` is used twice",
                rule.id
            ));
        }
        rules.push(rule);
    }
    Ok(rules)
}

fn days(v: i32, what: &str) -> S3Result<u32> {
    u32::try_from(v).ok().filter(|d| *d > 0).ok_or_else(|| {
        s3_error!(
            InvalidArgument,
            "{what} must be a positive whole number of days"
        )
    })
}

fn size(v: i64, what: &str) -> S3Result<u64> {
    u64::try_from(v).map_err(|_| s3_error!(InvalidArgument, "{what} must not be negative"))
}

fn filter_from(r: &LifecycleRule) -> S3Result<Filter> {
    match (&r.prefix, &r.filter) {
        (Some(_), Some(_)) => Err(s3_error!(
            MalformedXML,
            "a rule takes Prefix or Filter, not both"
        )),
        (Some(p), None) => Ok(Filter {
            prefix: p.clone(),
            legacy: true,
            ..Filter::default()
        }),
        (None, None) => Ok(Filter::default()),
        (None, Some(f)) => {
            let given = usize::from(f.prefix.is_some())
                + usize::from(f.tag.is_some())
                + usize::from(f.object_size_greater_than.is_some())
                + usize::from(f.object_size_less_than.is_some())
                + usize::from(f.and.is_some());
            if given > 1 {
                return Err(s3_error!(
                    MalformedXML,
                    "a Filter takes one of Prefix, Tag, ObjectSizeGreaterThan, ObjectSizeLessThan or And"
                ));
            }
            let mut out = Filter {
                prefix: f.prefix.clone().unwrap_or_default(),
                ..Filter::default()
            };
            if let Some(t) = &f.tag {
                out.tags = tagging::from_tag_set(std::slice::from_ref(t), 1)?;
            }
            out.size_greater_than = f
                .object_size_greater_than
                .map(|v| size(v, "ObjectSizeGreaterThan"))
                .transpose()?;
            out.size_less_than = f
                .object_size_less_than
                .map(|v| size(v, "ObjectSizeLessThan"))
                .transpose()?;
            if let Some(a) = &f.and {
                out.prefix = a.prefix.clone().unwrap_or_default();
                out.tags = tagging::from_tag_set(
                    a.tags.as_deref().unwrap_or(&[]),
                    tagging::MAX_OBJECT_TAGS,
                )?;
                out.size_greater_than = a
                    .object_size_greater_than
                    .map(|v| size(v, "ObjectSizeGreaterThan"))
                    .transpose()?;
                out.size_less_than = a
                    .object_size_less_than
                    .map(|v| size(v, "ObjectSizeLessThan"))
                    .transpose()?;
            }
            if let (Some(min), Some(max)) = (out.size_greater_than, out.size_less_than) {
                if min >= max {
                    return Err(s3_error!(
                        InvalidArgument,
                        "ObjectSizeGreaterThan must be less than ObjectSizeLessThan"
                    ));
                }
            }
            Ok(out)
        }
    }
}

fn ms_of(t: &Timestamp) -> i64 {
    let t = time::OffsetDateTime::from(t.clone());
    i64::try_from(t.unix_timestamp_nanos() / 1_000_000).unwrap_or(i64::MAX)
}

fn rule_from(r: &LifecycleRule, n: usize) -> S3Result<Rule> {
    let id = r.id.clone().unwrap_or_else(|| format!("rule-{n}"));
    if id.chars().count() > MAX_ID_CHARS {
        return Err(s3_error!(
            InvalidArgument,
            "a rule id has at most {MAX_ID_CHARS} characters"
        ));
    }
    let enabled = match r.status.as_str() {
        ExpirationStatus::ENABLED => true,
        ExpirationStatus::DISABLED => false,
        _ => {
            return Err(s3_error!(
                MalformedXML,
                "a rule's Status is Enabled or Disabled"
            ))
        }
    };
    if r.transitions.as_ref().is_some_and(|t| !t.is_empty())
        || r.noncurrent_version_transitions
            .as_ref()
            .is_some_and(|t| !t.is_empty())
    {
        return Err(s3_error!(
            InvalidRequest,
            "transitions are not supported: every object lives in the gateway's pool"
        ));
    }
    let filter = filter_from(r)?;
    let mut rule = Rule {
        id,
        enabled,
        filter,
        expiration: None,
        expired_delete_marker: false,
        noncurrent_days: None,
        newer_noncurrent_versions: None,
        abort_upload_days: None,
    };
    if let Some(e) = &r.expiration {
        let marker = e.expired_object_delete_marker.unwrap_or(false);
        rule.expiration = match (e.days, &e.date) {
            (Some(_), Some(_)) => {
                return Err(s3_error!(
                    MalformedXML,
                    "an Expiration takes Days or Date, not both"
                ))
            }
            (Some(d), None) => Some(Expiration::Days(days(d, "Expiration Days")?)),
            (None, Some(t)) => {
                let at = ms_of(t);
                if at.rem_euclid(DAY_MS) != 0 {
                    return Err(s3_error!(
                        InvalidArgument,
                        "an Expiration Date must be midnight UTC"
                    ));
                }
                Some(Expiration::Date(at))
            }
            (None, None) if e.expired_object_delete_marker.is_some() => None,
            (None, None) => {
                return Err(s3_error!(
                    MalformedXML,
                    "an Expiration needs Days, Date or ExpiredObjectDeleteMarker"
                ))
            }
        };
        if marker && rule.expiration.is_some() {
            return Err(s3_error!(
                MalformedXML,
                "ExpiredObjectDeleteMarker cannot be given with Days or Date"
            ));
        }
        if marker && rule.filter.needs_tags() {
            return Err(s3_error!(
                InvalidArgument,
                "ExpiredObjectDeleteMarker cannot be used with a tag filter"
            ));
        }
        rule.expired_delete_marker = marker;
    }
    if let Some(nc) = &r.noncurrent_version_expiration {
        let d = nc.noncurrent_days.ok_or_else(|| {
            s3_error!(
                MalformedXML,
                "a NoncurrentVersionExpiration needs NoncurrentDays"
            )
        })?;
        rule.noncurrent_days = Some(days(d, "NoncurrentDays")?);
        rule.newer_noncurrent_versions = nc
            .newer_noncurrent_versions
            .map(|v| {
                u32::try_from(v)
                    .ok()
                    .filter(|v| (1..=100).contains(v))
                    .ok_or_else(|| {
                        s3_error!(InvalidArgument, "NewerNoncurrentVersions must be 1 to 100")
                    })
            })
            .transpose()?;
    }
    if let Some(a) = &r.abort_incomplete_multipart_upload {
        if rule.filter.needs_tags() {
            return Err(s3_error!(
                InvalidArgument,
                "AbortIncompleteMultipartUpload cannot be used with a tag filter"
            ));
        }
        let d = a.days_after_initiation.ok_or_else(|| {
            s3_error!(
                MalformedXML,
                "AbortIncompleteMultipartUpload needs DaysAfterInitiation"
            )
        })?;
        rule.abort_upload_days = Some(days(d, "DaysAfterInitiation")?);
    }
    let acts = rule.expiration.is_some()
        || rule.expired_delete_marker
        || rule.noncurrent_days.is_some()
        || rule.abort_upload_days.is_some();
    if !acts {
        return Err(s3_error!(MalformedXML, "a rule needs at least one action"));
    }
    Ok(rule)
}

fn filter_to(f: &Filter) -> (Option<Prefix>, Option<LifecycleRuleFilter>) {
    if f.legacy {
        return (Some(f.prefix.clone()), None);
    }
    let criteria = usize::from(!f.prefix.is_empty())
        + f.tags.len()
        + usize::from(f.size_greater_than.is_some())
        + usize::from(f.size_less_than.is_some());
    let size = |v: Option<u64>| v.map(|v| i64::try_from(v).unwrap_or(i64::MAX));
    let mut out = LifecycleRuleFilter::default();
    if criteria > 1 {
        out.and = Some(LifecycleRuleAndOperator {
            prefix: (!f.prefix.is_empty()).then(|| f.prefix.clone()),
            tags: (!f.tags.is_empty()).then(|| tagging::to_tag_set(&f.tags)),
            object_size_greater_than: size(f.size_greater_than),
            object_size_less_than: size(f.size_less_than),
        });
    } else {
        out.prefix = Some(f.prefix.clone()).filter(|p| !p.is_empty() || criteria == 0);
        out.tag = tagging::to_tag_set(&f.tags).into_iter().next();
        out.object_size_greater_than = size(f.size_greater_than);
        out.object_size_less_than = size(f.size_less_than);
    }
    (None, Some(out))
}

/// The rules as GetBucketLifecycleConfiguration returns them.
pub fn to_config(rules: &[Rule]) -> Vec<LifecycleRule> {
    rules
        .iter()
        .map(|r| {
            let (prefix, filter) = filter_to(&r.filter);
            let expiration = match (r.expiration, r.expired_delete_marker) {
                (None, false) => None,
                (e, marker) => Some(LifecycleExpiration {
                    days: match e {
                        Some(Expiration::Days(d)) => i32::try_from(d).ok(),
                        _ => None,
                    },
                    date: match e {
                        Some(Expiration::Date(ms)) => Some(crate::headers::timestamp(ms)),
                        _ => None,
                    },
                    expired_object_delete_marker: marker.then_some(true),
                }),
            };
            LifecycleRule {
                id: Some(r.id.clone()),
                status: ExpirationStatus::from(
                    if r.enabled {
                        ExpirationStatus::ENABLED
                    } else {
                        ExpirationStatus::DISABLED
                    }
                    .to_string(),
                ),
                prefix,
                filter,
                expiration,
                noncurrent_version_expiration: r.noncurrent_days.map(|d| {
                    NoncurrentVersionExpiration {
                        noncurrent_days: i32::try_from(d).ok(),
                        newer_noncurrent_versions: r
                            .newer_noncurrent_versions
                            .and_then(|n| i32::try_from(n).ok()),
                    }
                }),
                abort_incomplete_multipart_upload: r.abort_upload_days.map(|d| {
                    AbortIncompleteMultipartUpload {
                        days_after_initiation: i32::try_from(d).ok(),
                    }
                }),
                noncurrent_version_transitions: None,
                transitions: None,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests;
