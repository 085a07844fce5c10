//! Lifecycle rules: what PutBucketLifecycleConfiguration stores in a bucket's registry record,
//! checked as S3 checks it, and the pure questions the gateway's lifecycle pass
//! (`lifecycle_pass`) asks of them: does a rule apply to this object, and when is a version,
//! a delete marker or an upload due. Actions: expiration of current versions by age or date,
//! of noncurrent versions by age (keeping the newest N), of expired delete markers, and the
//! abort of incomplete multipart uploads; transitions of current and noncurrent versions to
//! another storage class (another pool, `storage_class`); filters by prefix, tags and object
//! size.
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

/// A move of current versions to another storage class.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Transition {
    /// When: days after the version was written, or a date.
    pub when: Expiration,
    /// The class it moves to (never STANDARD).
    pub class: String,
}

/// A move of noncurrent versions to another storage class.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NoncurrentTransition {
    /// Days after the version became noncurrent.
    pub days: u32,
    /// ... except the newest this many noncurrent versions of each key.
    pub newer: Option<u32>,
    /// The class it moves to (never STANDARD).
    pub class: String,
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
    /// Current versions move to other classes.
    #[serde(default)]
    pub transitions: Vec<Transition>,
    /// Noncurrent versions move to other classes.
    #[serde(default)]
    pub noncurrent_transitions: Vec<NoncurrentTransition>,
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

    /// The class a current version written at `mtime_ms` belongs in by `now_ms` under this
    /// rule's transitions, with the time it became due (the latest due transition wins).
    pub fn current_class(&self, clock: Clock, mtime_ms: i64, now_ms: i64) -> Option<(i64, &str)> {
        self.transitions
            .iter()
            .map(|t| {
                let due = match t.when {
                    Expiration::Days(d) => clock.due(mtime_ms, d),
                    Expiration::Date(at) => at,
                };
                (due, t.class.as_str())
            })
            .filter(|(due, _)| *due <= now_ms)
            .max_by_key(|(due, _)| *due)
    }

    /// The class a version noncurrent since `since_ms`, with `newer` noncurrent versions of
    /// its key newer than it, belongs in by `now_ms`, with the time it became due.
    pub fn noncurrent_class(
        &self,
        clock: Clock,
        since_ms: i64,
        newer: u32,
        now_ms: i64,
    ) -> Option<(i64, &str)> {
        self.noncurrent_transitions
            .iter()
            .filter(|t| newer >= t.newer.unwrap_or(0))
            .map(|t| (clock.due(since_ms, t.days), t.class.as_str()))
            .filter(|(due, _)| *due <= now_ms)
            .max_by_key(|(due, _)| *due)
    }

    /// Whether an upload started at `initiated_ms` of `key` is to be aborted by `now_ms`.
    pub fn upload_expired(&self, clock: Clock, key: &str, initiated_ms: i64, now_ms: i64) -> bool {
        self.abort_upload_days.is_some_and(|d| {
            key.starts_with(&self.filter.prefix) && clock.due(initiated_ms, d) <= now_ms
        })
    }
}

/// The rules of PutBucketLifecycleConfiguration's document, checked as S3 checks them
/// (MalformedXML or InvalidArgument); transitions may name only the storage classes in
/// `classes` (InvalidStorageClass).
pub fn from_config(c: &BucketLifecycleConfiguration, classes: &[&str]) -> S3Result<Vec<Rule>> {
    if c.rules.is_empty() || c.rules.len() > MAX_RULES {
        return Err(s3_error!(
            MalformedXML,
            "a lifecycle configuration holds 1 to {MAX_RULES} rules"
        ));
    }
    let mut rules: Vec<Rule> = Vec::with_capacity(c.rules.len());
    for (n, r) in c.rules.iter().enumerate() {
        let rule = rule_from(r, n, classes)?;
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

/// A transition's storage class: given, configured, not STANDARD.
fn class_of(class: Option<&TransitionStorageClass>, classes: &[&str]) -> S3Result<String> {
    let name = class
        .map(|c| c.as_str())
        .ok_or_else(|| s3_error!(MalformedXML, "a transition needs a StorageClass"))?;
    if !classes.contains(&name) {
        return Err(s3_error!(
            InvalidStorageClass,
            "the storage class `{name}` is not one this gateway stores (nor STANDARD)"
        ));
    }
    Ok(name.to_string())
}

fn transitions_from(r: &LifecycleRule, classes: &[&str]) -> S3Result<Vec<Transition>> {
    let mut out: Vec<Transition> = Vec::new();
    for t in r.transitions.as_deref().unwrap_or(&[]) {
        let when =
            match (t.days, &t.date) {
                (Some(d), None) => Expiration::Days(u32::try_from(d).map_err(|_| {
                    s3_error!(InvalidArgument, "Transition Days must not be negative")
                })?),
                (None, Some(date)) => Expiration::Date(midnight(date, "a Transition Date")?),
                _ => {
                    return Err(s3_error!(
                        MalformedXML,
                        "a Transition takes Days or Date, one of them"
                    ))
                }
            };
        let class = class_of(t.storage_class.as_ref(), classes)?;
        if out.iter().any(|o| o.class == class) {
            return Err(s3_error!(
                InvalidArgument,
                "two transitions of one rule to {class}"
            ));
        }
        if out.first().is_some_and(|o| {
            matches!(o.when, Expiration::Days(_)) != matches!(when, Expiration::Days(_))
        }) {
            return Err(s3_error!(
                InvalidArgument,
                "the transitions of one rule all take Days or all take Date"
            ));
        }
        out.push(Transition { when, class });
    }
    Ok(out)
}

fn noncurrent_transitions_from(
    r: &LifecycleRule,
    classes: &[&str],
) -> S3Result<Vec<NoncurrentTransition>> {
    let mut out: Vec<NoncurrentTransition> = Vec::new();
    for t in r.noncurrent_version_transitions.as_deref().unwrap_or(&[]) {
        let d = t.noncurrent_days.ok_or_else(|| {
            s3_error!(
                MalformedXML,
                "a NoncurrentVersionTransition needs NoncurrentDays"
            )
        })?;
        let class = class_of(t.storage_class.as_ref(), classes)?;
        if out.iter().any(|o| o.class == class) {
            return Err(s3_error!(
                InvalidArgument,
                "two noncurrent transitions of one rule to {class}"
            ));
        }
        out.push(NoncurrentTransition {
            days: days(d, "NoncurrentDays")?,
            newer: newer_versions(t.newer_noncurrent_versions)?,
            class,
        });
    }
    Ok(out)
}

fn newer_versions(v: Option<i32>) -> S3Result<Option<u32>> {
    v.map(|v| {
        u32::try_from(v)
            .ok()
            .filter(|v| (1..=100).contains(v))
            .ok_or_else(|| s3_error!(InvalidArgument, "NewerNoncurrentVersions must be 1 to 100"))
    })
    .transpose()
}

/// A lifecycle date in ms, which must be midnight UTC.
fn midnight(t: &Timestamp, what: &str) -> S3Result<i64> {
    let at = ms_of(t);
    if at.rem_euclid(DAY_MS) != 0 {
        return Err(s3_error!(InvalidArgument, "{what} must be midnight UTC"));
    }
    Ok(at)
}

fn rule_from(r: &LifecycleRule, n: usize, classes: &[&str]) -> S3Result<Rule> {
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
        transitions: transitions_from(r, classes)?,
        noncurrent_transitions: noncurrent_transitions_from(r, classes)?,
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
            (None, Some(t)) => Some(Expiration::Date(midnight(t, "an Expiration Date")?)),
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
        rule.newer_noncurrent_versions = newer_versions(nc.newer_noncurrent_versions)?;
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
    if let Some(Expiration::Days(e)) = rule.expiration {
        if rule
            .transitions
            .iter()
            .any(|t| matches!(t.when, Expiration::Days(d) if d >= e))
        {
            return Err(s3_error!(
                InvalidArgument,
                "Expiration Days must be greater than every Transition's Days"
            ));
        }
    }
    let acts = rule.expiration.is_some()
        || rule.expired_delete_marker
        || rule.noncurrent_days.is_some()
        || rule.abort_upload_days.is_some()
        || !rule.transitions.is_empty()
        || !rule.noncurrent_transitions.is_empty();
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
                noncurrent_version_transitions: (!r.noncurrent_transitions.is_empty()).then(|| {
                    r.noncurrent_transitions
                        .iter()
                        .map(|t| NoncurrentVersionTransition {
                            noncurrent_days: i32::try_from(t.days).ok(),
                            newer_noncurrent_versions: t.newer.and_then(|n| i32::try_from(n).ok()),
                            storage_class: Some(TransitionStorageClass::from(t.class.clone())),
                        })
                        .collect()
                }),
                transitions: (!r.transitions.is_empty()).then(|| {
                    r.transitions
                        .iter()
                        .map(|t| s3s::dto::Transition {
                            days: match t.when {
                                Expiration::Days(d) => i32::try_from(d).ok(),
                                Expiration::Date(_) => None,
                            },
                            date: match t.when {
                                Expiration::Date(ms) => Some(crate::headers::timestamp(ms)),
                                Expiration::Days(_) => None,
                            },
                            storage_class: Some(TransitionStorageClass::from(t.class.clone())),
                        })
                        .collect()
                }),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests;
