//! Object lock (WORM) rules, as S3 states them: a version under an active retention period or
//! a legal hold cannot be deleted by version id by anyone; GOVERNANCE retention yields to a
//! caller allowed to bypass it (`x-amz-bypass-governance-retention: true`; the bucket owner
//! here), COMPLIANCE to no one; COMPLIANCE can only be extended, GOVERNANCE shortened or
//! removed only with the bypass. Pure: no I/O.

use s3s::{s3_error, S3Result};
use serde::{Deserialize, Serialize};

/// Milliseconds in a day.
const DAY_MS: i64 = 86_400_000;
/// Longest default retention in days (S3: 100 years).
pub const MAX_DEFAULT_DAYS: i64 = 36_500;

/// A retention mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Mode {
    /// Deletable early by a caller allowed to bypass governance retention.
    Governance,
    /// Deletable by no one until the date.
    Compliance,
}

impl Mode {
    /// The mode S3 names `name` (`GOVERNANCE`, `COMPLIANCE`).
    pub fn parse(name: &str) -> S3Result<Mode> {
        match name {
            "GOVERNANCE" => Ok(Mode::Governance),
            "COMPLIANCE" => Ok(Mode::Compliance),
            other => Err(s3_error!(
                InvalidArgument,
                "unknown object lock mode {other}: GOVERNANCE or COMPLIANCE"
            )),
        }
    }

    /// S3's name of the mode.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Governance => "GOVERNANCE",
            Mode::Compliance => "COMPLIANCE",
        }
    }
}

/// A retention period on one version.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Retention {
    /// Its mode.
    pub mode: Mode,
    /// Until when, ms since the Unix epoch.
    pub until_ms: i64,
}

impl Retention {
    /// Whether it still holds at `now_ms`.
    pub fn active(&self, now_ms: i64) -> bool {
        self.until_ms > now_ms
    }
}

/// A bucket's default retention, applied to every new version written without one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DefaultRetention {
    /// Its mode.
    pub mode: Mode,
    /// Its length in days (a configuration in years is kept as 365 days a year, as S3 counts).
    pub days: i64,
}

impl DefaultRetention {
    /// Checks a configured default (days or years, not both, positive, at most 100 years).
    pub fn new(mode: Mode, days: Option<i32>, years: Option<i32>) -> S3Result<DefaultRetention> {
        let days = match (days, years) {
            (Some(d), None) => i64::from(d),
            (None, Some(y)) => i64::from(y) * 365,
            _ => {
                return Err(s3_error!(
                    MalformedXML,
                    "a default retention has Days or Years, not both"
                ))
            }
        };
        if days <= 0 || days > MAX_DEFAULT_DAYS {
            return Err(s3_error!(
                InvalidArgument,
                "a default retention is 1 day to 100 years"
            ));
        }
        Ok(DefaultRetention { mode, days })
    }

    /// The retention of a version written at `now_ms`.
    pub fn from(&self, now_ms: i64) -> Retention {
        Retention {
            mode: self.mode,
            until_ms: now_ms.saturating_add(self.days.saturating_mul(DAY_MS)),
        }
    }
}

/// A bucket's object lock configuration (its presence means object lock is enabled).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockConfig {
    /// Default retention of new versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<DefaultRetention>,
}

/// The lock on one version.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lock {
    /// Its retention, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention: Option<Retention>,
    /// Whether a legal hold is on.
    #[serde(default)]
    pub legal_hold: bool,
}

impl Lock {
    /// Whether the version may be deleted at `now_ms` (`bypass`: the caller asked to bypass
    /// governance retention and may): AccessDenied otherwise.
    pub fn check_delete(&self, now_ms: i64, bypass: bool) -> S3Result<()> {
        if self.legal_hold {
            return Err(s3_error!(AccessDenied, "the version is under a legal hold"));
        }
        match self.retention {
            Some(r) if r.active(now_ms) && !(r.mode == Mode::Governance && bypass) => {
                Err(s3_error!(
                    AccessDenied,
                    "the version is locked in {} mode",
                    r.mode.name()
                ))
            }
            _ => Ok(()),
        }
    }

    /// Whether the retention may become `new` at `now_ms` (None: removed): an active
    /// COMPLIANCE retention only extended, an active GOVERNANCE one shortened, removed or
    /// changed only with `bypass`; a new date must lie ahead.
    pub fn check_retention_change(
        &self,
        new: Option<Retention>,
        now_ms: i64,
        bypass: bool,
    ) -> S3Result<()> {
        if let Some(n) = new {
            if !n.active(now_ms) {
                return Err(s3_error!(
                    InvalidArgument,
                    "the retain until date must be in the future"
                ));
            }
        }
        let Some(old) = self.retention.filter(|r| r.active(now_ms)) else {
            return Ok(());
        };
        let extends = new.is_some_and(|n| n.mode == old.mode && n.until_ms >= old.until_ms);
        let to_compliance =
            new.is_some_and(|n| n.mode == Mode::Compliance && n.until_ms >= old.until_ms);
        match old.mode {
            Mode::Compliance if !extends => Err(s3_error!(
                AccessDenied,
                "a COMPLIANCE retention can only be extended"
            )),
            Mode::Governance if !(extends || to_compliance || bypass) => Err(s3_error!(
                AccessDenied,
                "shortening or removing a GOVERNANCE retention needs the bypass"
            )),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_000_000;

    fn lock(mode: Mode, until_ms: i64, legal_hold: bool) -> Lock {
        Lock {
            retention: Some(Retention { mode, until_ms }),
            legal_hold,
        }
    }

    #[test]
    fn deletes_wait_for_the_date_and_the_hold() {
        let g = lock(Mode::Governance, NOW + 1, false);
        assert!(g.check_delete(NOW, false).is_err());
        assert!(
            g.check_delete(NOW, true).is_ok(),
            "governance yields to the bypass"
        );
        assert!(g.check_delete(NOW + 1, false).is_ok(), "expired");
        let c = lock(Mode::Compliance, NOW + 1, false);
        assert!(
            c.check_delete(NOW, true).is_err(),
            "compliance yields to no one"
        );
        let held = Lock {
            retention: None,
            legal_hold: true,
        };
        assert!(held.check_delete(NOW, true).is_err());
        assert!(Lock::default().check_delete(NOW, false).is_ok());
    }

    #[test]
    fn retention_changes_follow_the_mode() {
        let r = |mode, until_ms| Some(Retention { mode, until_ms });
        let c = lock(Mode::Compliance, NOW + 10, false);
        assert!(c
            .check_retention_change(r(Mode::Compliance, NOW + 20), NOW, false)
            .is_ok());
        assert!(c
            .check_retention_change(r(Mode::Compliance, NOW + 5), NOW, true)
            .is_err());
        assert!(c
            .check_retention_change(r(Mode::Governance, NOW + 20), NOW, true)
            .is_err());
        assert!(c.check_retention_change(None, NOW, true).is_err());
        let g = lock(Mode::Governance, NOW + 10, false);
        assert!(g
            .check_retention_change(r(Mode::Governance, NOW + 20), NOW, false)
            .is_ok());
        assert!(g
            .check_retention_change(r(Mode::Compliance, NOW + 10), NOW, false)
            .is_ok());
        assert!(g
            .check_retention_change(r(Mode::Governance, NOW + 5), NOW, false)
            .is_err());
        assert!(g
            .check_retention_change(r(Mode::Governance, NOW + 5), NOW, true)
            .is_ok());
        assert!(g.check_retention_change(None, NOW, true).is_ok());
        assert!(
            Lock::default()
                .check_retention_change(r(Mode::Compliance, NOW - 1), NOW, false)
                .is_err(),
            "a past date"
        );
        let expired = lock(Mode::Compliance, NOW - 1, false);
        assert!(expired.check_retention_change(None, NOW, false).is_ok());
    }

    #[test]
    fn defaults_are_days_or_years() {
        let d = DefaultRetention::new(Mode::Governance, Some(1), None).unwrap();
        assert_eq!(d.from(NOW).until_ms, NOW + DAY_MS);
        assert_eq!(
            DefaultRetention::new(Mode::Compliance, None, Some(2))
                .unwrap()
                .days,
            730
        );
        assert!(DefaultRetention::new(Mode::Governance, Some(1), Some(1)).is_err());
        assert!(DefaultRetention::new(Mode::Governance, Some(0), None).is_err());
        assert!(DefaultRetention::new(Mode::Governance, None, Some(101)).is_err());
        assert!(Mode::parse("governance").is_err());
        assert_eq!(Mode::parse("COMPLIANCE").unwrap().name(), "COMPLIANCE");
    }
}
