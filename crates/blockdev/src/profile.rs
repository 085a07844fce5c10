//! Device profiles: TOML files naming a timing model, its parameters, and the published figures
//! (with their sources) the parameters were calibrated to reproduce.
//!
//! Owns parsing, validation and the built-in profiles (`hdd-7200`, `nvme-p3700`, `nvme-p4510`,
//! `optane`, shipped in `crates/blockdev/profiles/`). It must never accept a profile with both or
//! neither model, or with non-positive rates.

use crate::error::{BlockDevError, Result};
use crate::model::{HddModel, HddParams, NvmeModel, NvmeParams, TimingModel};
use serde::{Deserialize, Serialize};

/// The built-in profiles: (name, TOML text).
pub const BUILTIN: [(&str, &str); 4] = [
    ("hdd-7200", include_str!("../profiles/hdd-7200.toml")),
    ("nvme-p3700", include_str!("../profiles/nvme-p3700.toml")),
    ("nvme-p4510", include_str!("../profiles/nvme-p4510.toml")),
    ("optane", include_str!("../profiles/optane.toml")),
];

/// Figures the profile must reproduce (checked by tests within 10%).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Expected {
    /// 4 KiB random writes per second at `random_write_queue_depth`.
    pub random_write_4k_iops: f64,
    /// Queue depth at which that figure was measured.
    pub random_write_queue_depth: usize,
    /// Sequential write bandwidth with large (4 MiB) requests, MB/s.
    pub sequential_write_mb_s: f64,
}

/// A device profile.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    /// Short name (`hdd-7200`).
    pub name: String,
    /// What device this models.
    pub description: String,
    /// Where the expected figures come from.
    pub sources: Vec<String>,
    /// Figures the parameters were calibrated against.
    pub expected: Expected,
    /// HDD model parameters (exactly one of `hdd`/`nvme`).
    pub hdd: Option<HddParams>,
    /// NVMe model parameters (exactly one of `hdd`/`nvme`).
    pub nvme: Option<NvmeParams>,
}

impl Profile {
    /// Parses and validates a profile.
    pub fn from_toml_str(text: &str) -> Result<Self> {
        let p: Profile =
            toml::from_str(text).map_err(|e| BlockDevError::Config(format!("profile: {e}")))?;
        p.validate()?;
        Ok(p)
    }

    /// A built-in profile by name.
    pub fn builtin(name: &str) -> Result<Self> {
        BUILTIN
            .iter()
            .find(|(n, _)| *n == name)
            .ok_or_else(|| {
                let names: Vec<&str> = BUILTIN.iter().map(|(n, _)| *n).collect();
                BlockDevError::Config(format!("no built-in profile {name:?} (have {names:?})"))
            })
            .and_then(|(_, text)| Self::from_toml_str(text))
    }

    /// A built-in profile name, or else a path to a TOML file.
    pub fn load(name_or_path: &str) -> Result<Self> {
        if BUILTIN.iter().any(|(n, _)| *n == name_or_path) {
            return Self::builtin(name_or_path);
        }
        let text = std::fs::read_to_string(name_or_path)
            .map_err(|e| BlockDevError::Config(format!("profile {name_or_path}: {e}")))?;
        Self::from_toml_str(&text)
    }

    /// True for the HDD model.
    pub fn rotational(&self) -> bool {
        self.hdd.is_some()
    }

    /// A fresh timing model for a device of `size_bytes`.
    pub fn model(&self, size_bytes: u64) -> Box<dyn TimingModel> {
        match (&self.hdd, &self.nvme) {
            (Some(h), _) => Box::new(HddModel::new(h.clone(), size_bytes)),
            (None, Some(n)) => Box::new(NvmeModel::new(n.clone())),
            (None, None) => Box::new(NvmeModel::new(NvmeParams {
                channels: 1,
                stripe_bytes: 4096,
                read_busy_us: 0.0,
                write_busy_us: 0.0,
                latency_us: 0.0,
                read_mb_s: 1e9,
                write_mb_s: 1e9,
                bus_mb_s: None,
            })),
        }
    }

    fn validate(&self) -> Result<()> {
        let bad = |m: &str| Err(BlockDevError::Config(format!("profile {}: {m}", self.name)));
        match (&self.hdd, &self.nvme) {
            (Some(h), None) => {
                let rates = [h.rpm, h.transfer_mb_s, h.seek_full_ms];
                if rates.iter().any(|r| !r.is_finite() || *r <= 0.0)
                    || h.seek_min_ms < 0.0
                    || h.seek_min_ms > h.seek_full_ms
                    || h.command_overhead_us < 0.0
                    || h.reorder_window == 0
                {
                    return bad(
                        "hdd parameters must be positive, with seek_min_ms <= seek_full_ms",
                    );
                }
            }
            (None, Some(n)) => {
                if n.channels == 0
                    || n.stripe_bytes < 512
                    || [n.read_mb_s, n.write_mb_s, n.bus_mb_s.unwrap_or(1.0)]
                        .iter()
                        .any(|r| !r.is_finite() || *r <= 0.0)
                    || [n.read_busy_us, n.write_busy_us, n.latency_us]
                        .iter()
                        .any(|r| !r.is_finite() || *r < 0.0)
                {
                    return bad("nvme parameters must be positive");
                }
            }
            _ => return bad("exactly one of [hdd] or [nvme] must be given"),
        }
        if self.expected.random_write_queue_depth == 0 {
            return bad("expected.random_write_queue_depth must be >= 1");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtins_parse() {
        for (name, _) in BUILTIN {
            let p = Profile::builtin(name).unwrap();
            assert_eq!(p.name, name);
            assert!(!p.sources.is_empty());
        }
        assert!(Profile::builtin("floppy").is_err());
    }

    #[test]
    fn malformed_profiles_are_typed_errors() {
        assert!(matches!(
            Profile::from_toml_str("name = 3"),
            Err(BlockDevError::Config(_))
        ));
        let both = format!(
            "{}\n{}",
            BUILTIN[0].1,
            BUILTIN[1]
                .1
                .split("[nvme]")
                .nth(1)
                .map(|s| format!("[nvme]{s}"))
                .unwrap()
        );
        assert!(Profile::from_toml_str(&both).is_err());
        let neg = BUILTIN[0].1.replace("rpm = 7200.0", "rpm = -1.0");
        assert!(Profile::from_toml_str(&neg).is_err());
        assert!(Profile::load("/nonexistent/profile.toml").is_err());
    }
}
