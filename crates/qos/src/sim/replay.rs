//! Seed 000's recovery experiment in miniature: one client doing 4 KiB random writes at queue
//! depth 64 against recovery pushing 4 MiB objects, on seed 000's NVMe (21500 IOPS) and HDD
//! (340 IOPS), under fifo, wpq (default and aggressive recovery) and each mClock profile.
//!
//! Owns the experiment definitions and the table; the numbers come from `sim::run`, never from
//! constants.

use super::{run, DeviceSpec, Scenario, SourceSpec};
use crate::config::{MClockConfig, PolicyConfig, Profile, WpqConfig};
use crate::cost::DeviceCapacity;
use crate::error::QosError;
use crate::request::QosClass;

/// Size of a recovery push.
pub const RECOVERY_OBJECT_BYTES: u64 = 4 << 20;
/// Client queue depth (seed 000: 4 KiB random writes at QD 64).
pub const CLIENT_DEPTH: u32 = 64;
/// Concurrent recovery ops with Ceph's defaults (osd_max_backfills = 1).
pub const RECOVERY_DEPTH_DEFAULT: u32 = 1;
/// Concurrent recovery ops with seed 000's settings (osd_max_backfills = 1000).
pub const RECOVERY_DEPTH_AGGRESSIVE: u32 = 1000;

/// One configuration of the experiment.
#[derive(Clone, Debug)]
pub struct Variant {
    /// Row label.
    pub label: &'static str,
    /// Scheduler.
    pub policy: PolicyConfig,
    /// Recovery ops outstanding.
    pub recovery_depth: u32,
    /// wpq priority of recovery ops (Ceph default 3; client ops are 63).
    pub recovery_priority: u8,
}

/// The rows of the replay for a device of `capacity_iops`.
pub fn variants(capacity_iops: f64) -> Vec<Variant> {
    let wpq = PolicyConfig::Wpq(WpqConfig::default());
    let mclock = |p| PolicyConfig::Mclock(MClockConfig::profile(p, capacity_iops));
    vec![
        Variant {
            label: "fifo",
            policy: PolicyConfig::Fifo,
            recovery_depth: RECOVERY_DEPTH_AGGRESSIVE,
            recovery_priority: 3,
        },
        Variant {
            label: "wpq (default recovery)",
            policy: wpq.clone(),
            recovery_depth: RECOVERY_DEPTH_DEFAULT,
            recovery_priority: 3,
        },
        Variant {
            label: "wpq (aggressive, recovery prio 3)",
            policy: wpq.clone(),
            recovery_depth: RECOVERY_DEPTH_AGGRESSIVE,
            recovery_priority: 3,
        },
        Variant {
            label: "wpq (aggressive, recovery prio 63)",
            policy: wpq,
            recovery_depth: RECOVERY_DEPTH_AGGRESSIVE,
            recovery_priority: 63,
        },
        Variant {
            label: "mclock high_client_ops",
            policy: mclock(Profile::HighClientOps),
            recovery_depth: RECOVERY_DEPTH_AGGRESSIVE,
            recovery_priority: 3,
        },
        Variant {
            label: "mclock balanced",
            policy: mclock(Profile::Balanced),
            recovery_depth: RECOVERY_DEPTH_AGGRESSIVE,
            recovery_priority: 3,
        },
        Variant {
            label: "mclock high_recovery_ops",
            policy: mclock(Profile::HighRecoveryOps),
            recovery_depth: RECOVERY_DEPTH_AGGRESSIVE,
            recovery_priority: 3,
        },
    ]
}

/// The scenario of one variant.
pub fn scenario(capacity: DeviceCapacity, v: &Variant, duration_s: f64) -> Scenario {
    let client = SourceSpec {
        objects: 1024,
        ..SourceSpec::closed("client", QosClass::Client, 1, CLIENT_DEPTH, 4096)
    };
    let recovery = SourceSpec {
        priority: Some(v.recovery_priority),
        objects: 1 << 20,
        object_base: 1 << 40,
        ..SourceSpec::closed(
            "recovery",
            QosClass::Recovery,
            2,
            v.recovery_depth,
            RECOVERY_OBJECT_BYTES,
        )
    };
    Scenario {
        title: format!("seed 000 replay: {}", v.label),
        duration_s,
        window_s: 1.0,
        seed: 0,
        device: DeviceSpec {
            random_4k_iops: capacity.random_4k_iops,
            seq_bandwidth_bytes_per_s: capacity.seq_bandwidth_bytes_per_s,
            in_flight: 1,
            hdd: None,
        },
        policy: v.policy.clone(),
        sources: vec![client, recovery],
        changes: Vec::new(),
        record_dispatches: false,
    }
}

/// One row of the replay table.
#[derive(Clone, Debug)]
pub struct Row {
    /// Variant label.
    pub label: &'static str,
    /// Client IOPS.
    pub client_iops: f64,
    /// Recovered objects per second.
    pub recovery_objects_per_s: f64,
    /// Recovery bandwidth.
    pub recovery_mib_per_s: f64,
    /// Client latency percentiles p50, p95, p99, p99.5 (ms).
    pub client_lat_ms: [f64; 4],
    /// Mean client latency (ms).
    pub client_mean_ms: f64,
}

/// Runs every variant on one device.
pub fn replay(capacity: DeviceCapacity, duration_s: f64) -> Result<Vec<Row>, QosError> {
    variants(capacity.random_4k_iops)
        .iter()
        .map(|v| {
            let r = run(&scenario(capacity, v, duration_s))?;
            let c = &r.sources[0];
            let rec = &r.sources[1];
            let q = |x| c.latency.quantile_ns(x) as f64 / 1e6;
            Ok(Row {
                label: v.label,
                client_iops: c.iops(duration_s),
                recovery_objects_per_s: rec.iops(duration_s),
                recovery_mib_per_s: rec.completed_bytes as f64 / duration_s / (1 << 20) as f64,
                client_lat_ms: [q(0.5), q(0.95), q(0.99), q(0.995)],
                client_mean_ms: c.latency.mean_ns() / 1e6,
            })
        })
        .collect()
}

/// Formats rows as a Markdown table.
pub fn table(rows: &[Row]) -> String {
    let mut s = String::from(
        "| scheduler | client IOPS | recovery obj/s | recovery MiB/s | client lat mean ms | p50 | p95 | p99 | p99.5 |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in rows {
        s.push_str(&format!(
            "| {} | {:.0} | {:.1} | {:.0} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} |\n",
            r.label,
            r.client_iops,
            r.recovery_objects_per_s,
            r.recovery_mib_per_s,
            r.client_mean_ms,
            r.client_lat_ms[0],
            r.client_lat_ms[1],
            r.client_lat_ms[2],
            r.client_lat_ms[3]
        ));
    }
    s
}
