//! Helpers shared by the virtual-time tests.
#![allow(dead_code)]

use cairn_qos::config::{ClassParams, MClockConfig, PolicyConfig};
use cairn_qos::sim::{DeviceSpec, Scenario, SourceSpec};

pub fn device(iops: f64) -> DeviceSpec {
    DeviceSpec {
        random_4k_iops: iops,
        seq_bandwidth_bytes_per_s: 400e6,
        in_flight: 1,
        hdd: None,
    }
}

pub fn scenario(
    policy: PolicyConfig,
    sources: Vec<SourceSpec>,
    duration_s: f64,
    iops: f64,
) -> Scenario {
    Scenario {
        title: String::new(),
        duration_s,
        window_s: 1.0,
        seed: 7,
        device: device(iops),
        policy,
        sources,
        changes: Vec::new(),
        record_dispatches: true,
    }
}

pub fn p(reservation: f64, weight: f64, limit: f64) -> ClassParams {
    ClassParams {
        reservation,
        weight,
        limit,
    }
}

pub fn custom(
    client: ClassParams,
    recovery: ClassParams,
    best_effort: ClassParams,
) -> PolicyConfig {
    PolicyConfig::Mclock(MClockConfig {
        profile: "custom".into(),
        custom: Some([client, recovery, best_effort]),
        ..MClockConfig::default()
    })
}
