//! Cache configuration: mode, cache line size, sequential cut-off, promotion and cleaning
//! parameters, with casadm-style names, defaults and range checks.
//!
//! Owns validation and run-time parameter changes by name ([`CacheConfig::set_param`]). It must
//! never accept a value outside its documented range: every setter validates before it stores.

use crate::error::{CacheError, Result};
use serde::{Deserialize, Serialize};
use std::str::FromStr;

/// Largest number of concurrent sequential streams the cut-off detector tracks.
pub const MAX_SEQ_STREAMS: usize = 1024;
/// Largest number of counters of the nhit promotion table.
pub const MAX_NHIT_ENTRIES: usize = 1 << 22;

/// How the cache treats reads and writes (casadm `-c`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CacheMode {
    /// Write-through: writes go to core and cache; reads are cached.
    Wt,
    /// Write-back: writes go to cache only (dirty) and are cleaned later; reads are cached.
    Wb,
    /// Write-around: writes go to core and update the cache only where already cached.
    Wa,
    /// Pass-through: everything goes to core; dirty data still in cache is honoured.
    Pt,
    /// Write-only: writes are cached as in write-back; reads are not promoted.
    Wo,
    /// Write-invalidate (internal): writes go to core and invalidate cached copies; reads cached.
    Wi,
}

impl CacheMode {
    /// The casadm name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Wt => "wt",
            Self::Wb => "wb",
            Self::Wa => "wa",
            Self::Pt => "pt",
            Self::Wo => "wo",
            Self::Wi => "wi",
        }
    }

    /// True for modes whose writes leave dirty data in the cache.
    pub fn caches_writes_dirty(self) -> bool {
        matches!(self, Self::Wb | Self::Wo)
    }

    /// True for modes that promote read misses into the cache.
    pub fn promotes_reads(self) -> bool {
        matches!(self, Self::Wt | Self::Wb | Self::Wa | Self::Wi)
    }
}

impl FromStr for CacheMode {
    type Err = CacheError;
    fn from_str(s: &str) -> Result<Self> {
        Ok(match s {
            "wt" => Self::Wt,
            "wb" => Self::Wb,
            "wa" => Self::Wa,
            "pt" => Self::Pt,
            "wo" => Self::Wo,
            "wi" => Self::Wi,
            _ => {
                return Err(CacheError::param(
                    "cache-mode",
                    format!("unknown mode {s:?}"),
                ))
            }
        })
    }
}

/// When sequential streams bypass the cache (casadm `seq-cutoff -p`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SeqCutoffPolicy {
    /// Cut off every stream past the threshold.
    Always,
    /// Cut off streams past the threshold only while the cache has no free line.
    Full,
    /// Never cut off.
    Never,
}

impl FromStr for SeqCutoffPolicy {
    type Err = CacheError;
    fn from_str(s: &str) -> Result<Self> {
        Ok(match s {
            "always" => Self::Always,
            "full" => Self::Full,
            "never" => Self::Never,
            _ => {
                return Err(CacheError::param(
                    "seq-cutoff.policy",
                    format!("unknown {s:?}"),
                ))
            }
        })
    }
}

/// Sequential cut-off parameters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeqCutoffParams {
    /// The policy.
    pub policy: SeqCutoffPolicy,
    /// Bytes a stream must have read or written sequentially before it is cut off (casadm `-t`
    /// is in KiB; 1 KiB ..= 4 GiB).
    pub threshold_bytes: u64,
    /// Concurrent sequential streams tracked (1 ..= [`MAX_SEQ_STREAMS`]).
    pub max_streams: usize,
}

impl Default for SeqCutoffParams {
    fn default() -> Self {
        Self {
            policy: SeqCutoffPolicy::Full,
            threshold_bytes: 1 << 20,
            max_streams: 16,
        }
    }
}

/// Whether a miss is inserted into the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PromotionPolicy {
    /// Insert on the first access.
    Always,
    /// Insert once a core line was accessed `insertion_threshold` times, when the cache is at
    /// least `trigger_threshold_pct` full (below that, insert always).
    Nhit,
}

/// What a miss does when caching it would mean evicting dirty lines, that is cleaning them
/// to the core first (the cache is full and its least-recently-used lines are dirty).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DirtyFullPolicy {
    /// The miss goes to the core and is not cached: it costs one core I/O, as without a
    /// cache, instead of a cleaning write, a cache write and later another cleaning write.
    #[default]
    Bypass,
    /// The dirty victims are cleaned and the miss is cached (Open-CAS's behaviour): a writer
    /// faster than cleaning waits on it.
    Clean,
}

impl FromStr for DirtyFullPolicy {
    type Err = CacheError;
    fn from_str(s: &str) -> Result<Self> {
        Ok(match s {
            "bypass" => Self::Bypass,
            "clean" => Self::Clean,
            _ => {
                return Err(CacheError::param(
                    "promotion.dirty-full",
                    format!("unknown {s:?}"),
                ))
            }
        })
    }
}

/// Promotion parameters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PromotionParams {
    /// The policy.
    pub policy: PromotionPolicy,
    /// Accesses before insertion under nhit (2 ..= 1000).
    pub insertion_threshold: u32,
    /// Occupancy percentage from which nhit applies (0 ..= 100).
    pub trigger_threshold_pct: u8,
    /// Counters in the nhit table (1 ..= [`MAX_NHIT_ENTRIES`]); colliding lines share one.
    pub table_entries: usize,
    /// What a miss does when it could be cached only by evicting dirty lines.
    #[serde(default)]
    pub dirty_full: DirtyFullPolicy,
}

impl Default for PromotionParams {
    fn default() -> Self {
        Self {
            policy: PromotionPolicy::Always,
            insertion_threshold: 3,
            trigger_threshold_pct: 80,
            table_entries: 1 << 16,
            dirty_full: DirtyFullPolicy::Bypass,
        }
    }
}

/// Which cleaning policy runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CleaningPolicyKind {
    /// Approximately-LRU: cleans stale dirty lines when the core has been idle.
    Alru,
    /// Aggressive: cleans continuously in core-address order.
    Acp,
    /// Never cleans on its own (lines are cleaned when evicted or flushed).
    Nop,
}

impl FromStr for CleaningPolicyKind {
    type Err = CacheError;
    fn from_str(s: &str) -> Result<Self> {
        Ok(match s {
            "alru" => Self::Alru,
            "acp" => Self::Acp,
            "nop" => Self::Nop,
            _ => {
                return Err(CacheError::param(
                    "cleaning.policy",
                    format!("unknown {s:?}"),
                ))
            }
        })
    }
}

/// alru parameters (casadm `cleaning-alru`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AlruParams {
    /// Sleep between cleaning rounds when there was nothing to do, seconds (0 ..= 3600).
    pub wake_up_s: u32,
    /// A line must have been dirty this long before alru cleans it, seconds (1 ..= 3600).
    pub staleness_time_s: u32,
    /// Lines cleaned per round (1 ..= 10000).
    pub flush_max_buffers: u32,
    /// alru cleans only after this long without foreground I/O, milliseconds (0 ..= 1000000).
    pub activity_threshold_ms: u32,
}

impl Default for AlruParams {
    fn default() -> Self {
        Self {
            wake_up_s: 20,
            staleness_time_s: 120,
            flush_max_buffers: 100,
            activity_threshold_ms: 10_000,
        }
    }
}

/// acp parameters (casadm `cleaning-acp`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AcpParams {
    /// Sleep between rounds, milliseconds (0 ..= 10000).
    pub wake_up_ms: u32,
    /// Lines cleaned per round (1 ..= 10000).
    pub flush_max_buffers: u32,
}

impl Default for AcpParams {
    fn default() -> Self {
        Self {
            wake_up_ms: 10,
            flush_max_buffers: 128,
        }
    }
}

/// Cleaning parameters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CleaningParams {
    /// The policy.
    pub policy: CleaningPolicyKind,
    /// alru settings.
    pub alru: AlruParams,
    /// acp settings.
    pub acp: AcpParams,
    /// Dirty share of the cache (percent, 1 ..= 100) above which cleaning starts whatever the
    /// policy's idle and staleness rules say, so writes slow down smoothly instead of hitting a
    /// full-of-dirty cliff; 0 disables it.
    pub dirty_target_pct: u8,
}

impl Default for CleaningParams {
    fn default() -> Self {
        Self {
            policy: CleaningPolicyKind::Alru,
            alru: AlruParams::default(),
            acp: AcpParams::default(),
            dirty_target_pct: 80,
        }
    }
}

/// Everything that configures a cache instance; persisted in its superblock.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheConfig {
    /// Cache mode.
    pub mode: CacheMode,
    /// Cache line size in bytes: 4, 8, 16, 32 or 64 KiB; fixed at creation.
    pub line_bytes: u64,
    /// Sequential cut-off.
    pub seq_cutoff: SeqCutoffParams,
    /// Promotion.
    pub promotion: PromotionParams,
    /// Cleaning.
    pub cleaning: CleaningParams,
}

impl Default for CacheConfig {
    fn default() -> Self {
        Self {
            mode: CacheMode::Wt,
            line_bytes: 4096,
            seq_cutoff: SeqCutoffParams::default(),
            promotion: PromotionParams::default(),
            cleaning: CleaningParams::default(),
        }
    }
}

fn parse_num<T: FromStr>(name: &str, value: &str) -> Result<T> {
    value
        .trim()
        .parse()
        .map_err(|_| CacheError::param(name, format!("{value:?} is not a number")))
}

fn check_range(name: &str, v: u64, lo: u64, hi: u64) -> Result<()> {
    if v < lo || v > hi {
        return Err(CacheError::param(
            name,
            format!("{v} outside {lo} ..= {hi}"),
        ));
    }
    Ok(())
}

impl CacheConfig {
    /// Checks every field's range.
    pub fn validate(&self) -> Result<()> {
        if ![4, 8, 16, 32, 64].contains(&(self.line_bytes / 1024))
            || !self.line_bytes.is_multiple_of(1024)
        {
            return Err(CacheError::param(
                "line_bytes",
                format!("{} is not 4, 8, 16, 32 or 64 KiB", self.line_bytes),
            ));
        }
        let s = &self.seq_cutoff;
        check_range("seq-cutoff.threshold", s.threshold_bytes, 1024, 4 << 30)?;
        check_range(
            "seq-cutoff.streams",
            s.max_streams as u64,
            1,
            MAX_SEQ_STREAMS as u64,
        )?;
        let p = &self.promotion;
        check_range(
            "promotion-nhit.insertion-threshold",
            p.insertion_threshold.into(),
            2,
            1000,
        )?;
        check_range(
            "promotion-nhit.trigger-threshold",
            p.trigger_threshold_pct.into(),
            0,
            100,
        )?;
        check_range(
            "promotion-nhit.table-entries",
            p.table_entries as u64,
            1,
            MAX_NHIT_ENTRIES as u64,
        )?;
        let c = &self.cleaning;
        check_range("cleaning-alru.wake-up", c.alru.wake_up_s.into(), 0, 3600)?;
        check_range(
            "cleaning-alru.staleness-time",
            c.alru.staleness_time_s.into(),
            1,
            3600,
        )?;
        check_range(
            "cleaning-alru.flush-max-buffers",
            c.alru.flush_max_buffers.into(),
            1,
            10_000,
        )?;
        check_range(
            "cleaning-alru.activity-threshold",
            c.alru.activity_threshold_ms.into(),
            0,
            1_000_000,
        )?;
        check_range("cleaning-acp.wake-up", c.acp.wake_up_ms.into(), 0, 10_000)?;
        check_range(
            "cleaning-acp.flush-max-buffers",
            c.acp.flush_max_buffers.into(),
            1,
            10_000,
        )?;
        check_range("cleaning.dirty-target", c.dirty_target_pct.into(), 0, 100)?;
        Ok(())
    }

    /// Sets one run-time parameter by its casadm-like name (`namespace`, `key`), validating the
    /// whole configuration before anything changes. Names:
    /// `seq-cutoff` {`policy`, `threshold` (KiB), `streams`}; `promotion` {`policy`, `dirty-full` (`bypass` or `clean`)};
    /// `promotion-nhit` {`insertion-threshold`, `trigger-threshold` (%)}; `cleaning`
    /// {`policy`, `dirty-target` (%)}; `cleaning-alru` {`wake-up` (s), `staleness-time` (s),
    /// `flush-max-buffers`, `activity-threshold` (ms)}; `cleaning-acp` {`wake-up` (ms),
    /// `flush-max-buffers`}. The line size cannot be changed; the mode has its own call.
    pub fn set_param(&mut self, namespace: &str, key: &str, value: &str) -> Result<()> {
        let mut next = self.clone();
        let name = format!("{namespace}.{key}");
        match (namespace, key) {
            ("seq-cutoff", "policy") => next.seq_cutoff.policy = value.parse()?,
            ("seq-cutoff", "threshold") => {
                next.seq_cutoff.threshold_bytes =
                    parse_num::<u64>(&name, value)?.saturating_mul(1024)
            }
            ("seq-cutoff", "streams") => next.seq_cutoff.max_streams = parse_num(&name, value)?,
            ("promotion", "policy") => {
                next.promotion.policy = match value {
                    "always" => PromotionPolicy::Always,
                    "nhit" => PromotionPolicy::Nhit,
                    _ => return Err(CacheError::param(name, format!("unknown {value:?}"))),
                }
            }
            ("promotion", "dirty-full") => next.promotion.dirty_full = value.parse()?,
            ("promotion-nhit", "insertion-threshold") => {
                next.promotion.insertion_threshold = parse_num(&name, value)?
            }
            ("promotion-nhit", "trigger-threshold") => {
                next.promotion.trigger_threshold_pct = parse_num(&name, value)?
            }
            ("cleaning", "policy") => next.cleaning.policy = value.parse()?,
            ("cleaning", "dirty-target") => {
                next.cleaning.dirty_target_pct = parse_num(&name, value)?
            }
            ("cleaning-alru", "wake-up") => next.cleaning.alru.wake_up_s = parse_num(&name, value)?,
            ("cleaning-alru", "staleness-time") => {
                next.cleaning.alru.staleness_time_s = parse_num(&name, value)?
            }
            ("cleaning-alru", "flush-max-buffers") => {
                next.cleaning.alru.flush_max_buffers = parse_num(&name, value)?
            }
            ("cleaning-alru", "activity-threshold") => {
                next.cleaning.alru.activity_threshold_ms = parse_num(&name, value)?
            }
            ("cleaning-acp", "wake-up") => next.cleaning.acp.wake_up_ms = parse_num(&name, value)?,
            ("cleaning-acp", "flush-max-buffers") => {
                next.cleaning.acp.flush_max_buffers = parse_num(&name, value)?
            }
            _ => return Err(CacheError::param(name, "unknown parameter")),
        }
        next.validate()?;
        *self = next;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_line_sizes_are_checked() {
        let mut c = CacheConfig::default();
        c.validate().unwrap();
        for kib in [4, 8, 16, 32, 64] {
            c.line_bytes = kib * 1024;
            c.validate().unwrap();
        }
        for bad in [0, 2048, 12 * 1024, 128 * 1024, 4097] {
            c.line_bytes = bad;
            assert!(
                matches!(c.validate(), Err(CacheError::InvalidParam { .. })),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_superblock_written_before_dirty_full_existed_reads_as_bypass() {
        let text = toml::to_string(&CacheConfig::default()).unwrap();
        let old: String = text
            .lines()
            .filter(|l| !l.starts_with("dirty_full"))
            .map(|l| format!("{l}\n"))
            .collect();
        assert_ne!(old, text, "the field is written");
        let back: CacheConfig = toml::from_str(&old).unwrap();
        assert_eq!(back.promotion.dirty_full, DirtyFullPolicy::Bypass);
    }

    #[test]
    fn set_param_accepts_casadm_names_and_rejects_bad_values_without_change() {
        let mut c = CacheConfig::default();
        c.set_param("seq-cutoff", "policy", "always").unwrap();
        c.set_param("seq-cutoff", "threshold", "16").unwrap();
        assert_eq!(c.seq_cutoff.threshold_bytes, 16 * 1024);
        c.set_param("cleaning-alru", "activity-threshold", "1000")
            .unwrap();
        assert_eq!(c.cleaning.alru.activity_threshold_ms, 1000);
        c.set_param("cleaning", "policy", "acp").unwrap();
        c.set_param("promotion", "policy", "nhit").unwrap();
        c.set_param("promotion", "dirty-full", "clean").unwrap();
        assert_eq!(c.promotion.dirty_full, DirtyFullPolicy::Clean);
        let before = c.clone();
        for (ns, k, v) in [
            ("seq-cutoff", "policy", "nofull"),
            ("promotion", "dirty-full", "wait"),
            ("seq-cutoff", "threshold", "0"),
            ("seq-cutoff", "threshold", "abc"),
            ("cleaning-alru", "staleness-time", "0"),
            ("cleaning-alru", "flush-max-buffers", "10001"),
            ("cleaning", "dirty-target", "101"),
            ("promotion-nhit", "insertion-threshold", "1"),
            ("cleaning", "colour", "blue"),
            ("cache-line", "size", "8"),
        ] {
            assert!(
                matches!(c.set_param(ns, k, v), Err(CacheError::InvalidParam { .. })),
                "{ns}.{k}={v} accepted"
            );
        }
        assert_eq!(c, before);
        assert!("nofull".parse::<SeqCutoffPolicy>().is_err());
        assert_eq!("wo".parse::<CacheMode>().unwrap(), CacheMode::Wo);
        assert!("wx".parse::<CacheMode>().is_err());
    }
}
