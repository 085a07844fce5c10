//! Policy configuration: what can be selected by name and changed at run time.
//!
//! Owns the serde-loadable config types, Ceph's mClock profiles (seed 000's tables) and
//! `build_policy`, which turns a config into a boxed `Scheduler`. Never schedules anything.

use crate::error::{invalid, QosError};
use crate::policy::{crrn::Crrn, fifo::Fifo, mclock::MClock, orr::BatchRr, tbf::Tbf, wpq::Wpq};
use crate::request::QosClass;
use crate::scheduler::Scheduler;
use serde::{Deserialize, Serialize};

/// A policy and its parameters, tagged by `name`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "name", rename_all = "snake_case")]
pub enum PolicyConfig {
    /// First come, first served. Never refuses.
    Fifo,
    /// Ceph's weighted priority queue.
    Wpq(WpqConfig),
    /// dmClock: reservation, weight, limit per class (or per client).
    Mclock(MClockConfig),
    /// Round robin over clients.
    Crrn(CrrnConfig),
    /// Round robin over objects, batches sorted by offset.
    Orr(BatchConfig),
    /// Round robin over targets, batches sorted by offset.
    Trr(BatchConfig),
    /// Token bucket filter with ranked rules.
    Tbf(TbfConfig),
}

impl PolicyConfig {
    /// The policy name this config selects.
    pub fn name(&self) -> &'static str {
        match self {
            PolicyConfig::Fifo => "fifo",
            PolicyConfig::Wpq(_) => "wpq",
            PolicyConfig::Mclock(_) => "mclock",
            PolicyConfig::Crrn(_) => "crrn",
            PolicyConfig::Orr(_) => "orr",
            PolicyConfig::Trr(_) => "trr",
            PolicyConfig::Tbf(_) => "tbf",
        }
    }

    /// The default config of the policy called `name`; Ceph's value of `osd_op_queue` for
    /// mClock, `mclock_scheduler`, names it too, so an operator's Ceph habit works.
    pub fn by_name(name: &str) -> Result<PolicyConfig, QosError> {
        Ok(match name {
            "fifo" => PolicyConfig::Fifo,
            "wpq" => PolicyConfig::Wpq(WpqConfig::default()),
            "mclock" | "mclock_scheduler" => PolicyConfig::Mclock(MClockConfig::default()),
            "crrn" => PolicyConfig::Crrn(CrrnConfig::default()),
            "orr" => PolicyConfig::Orr(BatchConfig::default()),
            "trr" => PolicyConfig::Trr(BatchConfig::default()),
            "tbf" => PolicyConfig::Tbf(TbfConfig::default()),
            other => return Err(QosError::UnknownPolicy(other.to_string())),
        })
    }

    /// Parses a TOML table (with a `name` key) into a config.
    pub fn from_toml(text: &str) -> Result<PolicyConfig, QosError> {
        toml::from_str(text).map_err(|e| QosError::Config(e.to_string()))
    }
}

/// Builds the scheduler a config describes.
pub fn build_policy(cfg: &PolicyConfig) -> Result<Box<dyn Scheduler>, QosError> {
    Ok(match cfg {
        PolicyConfig::Fifo => Box::new(Fifo::new()),
        PolicyConfig::Wpq(c) => Box::new(Wpq::new(c.clone())?),
        PolicyConfig::Mclock(c) => Box::new(MClock::new(c.clone())?),
        PolicyConfig::Crrn(c) => Box::new(Crrn::new(c.clone())?),
        PolicyConfig::Orr(c) => Box::new(BatchRr::orr(c.clone())?),
        PolicyConfig::Trr(c) => Box::new(BatchRr::trr(c.clone())?),
        PolicyConfig::Tbf(c) => Box::new(Tbf::new(c.clone())?),
    })
}

/// `wpq` parameters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WpqConfig {
    /// Requests with priority >= this go to the strict queue (Ceph's cut-off "high" = 196).
    pub cutoff_priority: u8,
}

impl Default for WpqConfig {
    fn default() -> Self {
        WpqConfig {
            cutoff_priority: 196,
        }
    }
}

/// `crrn` parameters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CrrnConfig {
    /// Requests served from one client per turn.
    pub quantum: u32,
}

impl Default for CrrnConfig {
    fn default() -> Self {
        CrrnConfig { quantum: 1 }
    }
}

/// Which offset `orr`/`trr` sort a batch by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OffsetKind {
    /// Offset inside the object.
    Logical,
    /// Device offset (falls back to logical when unknown).
    Physical,
}

/// Which operations `orr`/`trr` handle (the rest are refused, i.e. go to FIFO).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OpFilter {
    /// Reads only (Lustre's default).
    Reads,
    /// Writes only.
    Writes,
    /// Reads and writes.
    Both,
}

/// `orr` / `trr` parameters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BatchConfig {
    /// Requests per object (or target) per round.
    pub quantum: u32,
    /// Sort key within a batch.
    pub offset: OffsetKind,
    /// Which ops are handled.
    pub ops: OpFilter,
}

impl Default for BatchConfig {
    fn default() -> Self {
        BatchConfig {
            quantum: 256,
            offset: OffsetKind::Logical,
            ops: OpFilter::Reads,
        }
    }
}

/// How requests matching a TBF rule are grouped into token buckets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BucketKey {
    /// One bucket per client id (Lustre's per-NID classes).
    Client,
    /// One bucket per job id.
    Job,
    /// One bucket shared by everything the rule matches.
    Rule,
}

/// One TBF rule.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TbfRuleConfig {
    /// Unique rule name (for change/stop).
    pub name: String,
    /// Match expression, e.g. `client=12* & op=write | job=7`.
    pub expr: String,
    /// Requests per second per bucket (absent: no request limit).
    #[serde(default)]
    pub rate_rps: Option<f64>,
    /// Bytes per second per bucket (absent: no byte limit).
    #[serde(default)]
    pub rate_bytes_per_s: Option<f64>,
    /// Bucket grouping.
    #[serde(default = "default_bucket_key")]
    pub key: BucketKey,
}

fn default_bucket_key() -> BucketKey {
    BucketKey::Client
}

/// `tbf` parameters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TbfConfig {
    /// Ranked rules; the first match wins.
    pub rules: Vec<TbfRuleConfig>,
    /// Default rule's request rate per client (absent: unlimited).
    pub default_rate_rps: Option<f64>,
    /// Default rule's byte rate per client (absent: unlimited).
    pub default_rate_bytes_per_s: Option<f64>,
    /// Credit a bucket may bank, in nanoseconds of its rate (hard limit: rate x (1 s + burst)).
    pub burst_ns: u64,
}

impl Default for TbfConfig {
    fn default() -> Self {
        TbfConfig {
            rules: Vec::new(),
            default_rate_rps: None,
            default_rate_bytes_per_s: None,
            burst_ns: 5_000_000,
        }
    }
}

/// Reservation, weight and limit of one mClock client, as fractions of device capacity.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClassParams {
    /// Guaranteed share of capacity (0 = none).
    pub reservation: f64,
    /// Proportional share of spare capacity (> 0).
    pub weight: f64,
    /// Hard cap as a share of capacity (0 = MAX, no limit).
    pub limit: f64,
}

impl ClassParams {
    /// Checks ranges: reservation >= 0, weight > 0, limit >= 0, reservation <= limit when limited.
    pub fn validate(&self, what: &str) -> Result<(), QosError> {
        let ok = |v: f64| v.is_finite() && v >= 0.0;
        if !ok(self.reservation) {
            return Err(invalid(what, "reservation must be finite and >= 0"));
        }
        if !(self.weight.is_finite() && self.weight > 0.0) {
            return Err(invalid(what, "weight must be finite and > 0"));
        }
        if !ok(self.limit) {
            return Err(invalid(
                what,
                "limit must be finite and >= 0 (0 = no limit)",
            ));
        }
        if self.limit > 0.0 && self.reservation > self.limit {
            return Err(invalid(what, "reservation exceeds limit"));
        }
        Ok(())
    }
}

/// Ceph's built-in mClock profiles.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Profile {
    /// Client 50% / recovery 25% / best effort 25% reservations (Ceph's default).
    HighClientOps,
    /// Client 40% / recovery 40% / best effort 20%.
    Balanced,
    /// Client 30% / recovery 60% / best effort 1 IOPS.
    HighRecoveryOps,
    /// Parameters given explicitly in `MClockConfig::custom`.
    Custom,
}

impl Profile {
    /// Parses a profile name.
    pub fn parse(s: &str) -> Result<Profile, QosError> {
        Ok(match s {
            "high_client_ops" => Profile::HighClientOps,
            "balanced" => Profile::Balanced,
            "high_recovery_ops" => Profile::HighRecoveryOps,
            "custom" => Profile::Custom,
            other => return Err(QosError::UnknownProfile(other.to_string())),
        })
    }

    /// The profile's name.
    pub fn name(self) -> &'static str {
        match self {
            Profile::HighClientOps => "high_client_ops",
            Profile::Balanced => "balanced",
            Profile::HighRecoveryOps => "high_recovery_ops",
            Profile::Custom => "custom",
        }
    }

    /// Params for [client, recovery, best_effort], from seed 000's tables (limit MAX = 0).
    /// `capacity_iops` converts the "1 IOPS (MIN)" reservation into a fraction.
    pub fn params(self, capacity_iops: f64) -> Option<[ClassParams; 3]> {
        let p = |reservation, weight, limit| ClassParams {
            reservation,
            weight,
            limit,
        };
        match self {
            Profile::HighClientOps => {
                Some([p(0.5, 2.0, 0.0), p(0.25, 1.0, 1.0), p(0.25, 2.0, 0.0)])
            }
            Profile::Balanced => Some([p(0.4, 1.0, 1.0), p(0.4, 1.0, 1.5), p(0.2, 2.0, 0.0)]),
            Profile::HighRecoveryOps => Some([
                p(0.3, 1.0, 0.8),
                p(0.6, 2.0, 2.0),
                p(1.0 / capacity_iops.max(1.0), 2.0, 0.0),
            ]),
            Profile::Custom => None,
        }
    }
}

/// One per-client override in `per_client` mode.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientOverride {
    /// The client.
    pub client_id: u64,
    /// Its parameters.
    pub params: ClassParams,
}

/// `mclock` parameters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MClockConfig {
    /// Profile name: high_client_ops, balanced, high_recovery_ops or custom.
    pub profile: String,
    /// Device capacity in 4 KiB IOPS (converts IOPS-denominated settings to fractions).
    pub capacity_iops: f64,
    /// For `custom`: [client, recovery, best_effort].
    pub custom: Option<[ClassParams; 3]>,
    /// When true every external client is its own dmClock client with `per_client_default`
    /// (or its override); when false the whole client class is one dmClock client.
    pub per_client: bool,
    /// Params of each external client in `per_client` mode.
    pub per_client_default: ClassParams,
    /// Per-client overrides in `per_client` mode.
    pub per_client_overrides: Vec<ClientOverride>,
    /// Serve over-limit requests when nothing else is eligible (work conserving, limits soft).
    pub limit_break: bool,
    /// Lateness a reservation/limit tag may carry over, in ns: service in any window T is at most
    /// limit x (T + burst) + one request.
    pub burst_ns: u64,
    /// Maximum number of distinct dmClock clients (beyond it requests are refused to FIFO).
    pub max_clients: usize,
    /// Policy ordering requests inside the client class (class mode only); absent = FIFO.
    /// Requests a sub-policy refuses stay in the class, in a FIFO served alternately with it.
    pub client_policy: Option<Box<PolicyConfig>>,
    /// Policy ordering requests inside the recovery class; absent = FIFO.
    pub recovery_policy: Option<Box<PolicyConfig>>,
    /// Policy ordering requests inside the best-effort class; absent = FIFO.
    pub best_effort_policy: Option<Box<PolicyConfig>>,
}

impl Default for MClockConfig {
    fn default() -> Self {
        MClockConfig {
            profile: "high_client_ops".into(),
            capacity_iops: 21500.0,
            custom: None,
            per_client: false,
            per_client_default: ClassParams {
                reservation: 0.0,
                weight: 1.0,
                limit: 0.0,
            },
            per_client_overrides: Vec::new(),
            limit_break: false,
            burst_ns: 5_000_000,
            max_clients: 1_000_000,
            client_policy: None,
            recovery_policy: None,
            best_effort_policy: None,
        }
    }
}

impl MClockConfig {
    /// A config for one of the built-in profiles at a given capacity.
    pub fn profile(profile: Profile, capacity_iops: f64) -> MClockConfig {
        MClockConfig {
            profile: profile.name().into(),
            capacity_iops,
            ..MClockConfig::default()
        }
    }

    /// Resolved, validated [client, recovery, best_effort] params.
    pub fn class_params(&self) -> Result<[ClassParams; 3], QosError> {
        if !(self.capacity_iops.is_finite() && self.capacity_iops > 0.0) {
            return Err(invalid("capacity_iops", "must be finite and > 0"));
        }
        let profile = Profile::parse(&self.profile)?;
        let params = match profile.params(self.capacity_iops) {
            Some(p) => p,
            None => self
                .custom
                .ok_or_else(|| invalid("custom", "profile `custom` needs `custom` params"))?,
        };
        for (p, c) in params.iter().zip(QosClass::ALL) {
            p.validate(c.name())?;
        }
        self.per_client_default.validate("per_client_default")?;
        for o in &self.per_client_overrides {
            o.params.validate("per_client_overrides")?;
        }
        if self.max_clients == 0 {
            return Err(invalid("max_clients", "must be > 0"));
        }
        Ok(params)
    }

    /// The sub-policy of a class, if any.
    pub fn sub_policy(&self, class: QosClass) -> Option<&PolicyConfig> {
        match class {
            QosClass::Client => self.client_policy.as_deref(),
            QosClass::Recovery => self.recovery_policy.as_deref(),
            QosClass::BestEffort => self.best_effort_policy.as_deref(),
            QosClass::Immediate => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profiles_match_seed_000_tables() {
        let p = Profile::HighClientOps.params(21500.0).unwrap();
        assert_eq!((p[0].reservation, p[0].weight, p[0].limit), (0.5, 2.0, 0.0));
        assert_eq!(
            (p[1].reservation, p[1].weight, p[1].limit),
            (0.25, 1.0, 1.0)
        );
        let b = Profile::Balanced.params(21500.0).unwrap();
        assert_eq!(b[1].limit, 1.5);
        let r = Profile::HighRecoveryOps.params(21500.0).unwrap();
        assert!((r[2].reservation * 21500.0 - 1.0).abs() < 1e-9);
        assert!(Profile::Custom.params(1.0).is_none());
    }

    #[test]
    fn configs_parse_by_name_and_from_toml_with_typed_errors() {
        assert_eq!(PolicyConfig::by_name("fifo").unwrap(), PolicyConfig::Fifo);
        assert_eq!(
            PolicyConfig::by_name("mclock_scheduler").unwrap(),
            PolicyConfig::by_name("mclock").unwrap()
        );
        assert!(matches!(
            PolicyConfig::by_name("cfq"),
            Err(QosError::UnknownPolicy(_))
        ));
        let c = PolicyConfig::from_toml("name = \"mclock\"\nprofile = \"balanced\"\n").unwrap();
        assert_eq!(c.name(), "mclock");
        assert!(matches!(
            PolicyConfig::from_toml("name = \"mclock\"\nprofile = 3\n"),
            Err(QosError::Config(_))
        ));
        let bad = MClockConfig {
            profile: "custom".into(),
            ..MClockConfig::default()
        };
        assert!(bad.class_params().is_err());
        let bad = MClockConfig {
            profile: "nope".into(),
            ..MClockConfig::default()
        };
        assert!(matches!(
            bad.class_params(),
            Err(QosError::UnknownProfile(_))
        ));
        let bad = ClassParams {
            reservation: 0.5,
            weight: 1.0,
            limit: 0.4,
        };
        assert!(bad.validate("x").is_err());
    }
}
