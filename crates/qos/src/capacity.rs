//! Device capacity: from measurements (or a pinned config) to the `DeviceCapacity` that sets
//! mClock's capacity and the cost model.
//!
//! Owns the measurement plan, the estimate from samples (median of repeated runs), sanity bounds
//! and pinning. It never touches a device: the caller passes an `IoRunner` that runs the I/Os
//! (the blockdev crate provides one) and reports elapsed time. A measurement outside the bounds
//! is a typed error, never silently clamped or replaced by a default, and a pinned capacity is
//! never overwritten by a measurement.

use crate::cost::{DeviceCapacity, REFERENCE_IO_BYTES};
use crate::error::{invalid, QosError};
use serde::{Deserialize, Serialize};

/// Something that can run I/O on the device being measured and time it.
pub trait IoRunner {
    /// Runs `ios` random `REFERENCE_IO_BYTES` writes at `queue_depth`; returns elapsed ns.
    fn random_writes(&mut self, ios: u64, queue_depth: u32) -> Result<u64, String>;
    /// Writes `bytes` sequentially in `io_bytes` chunks; returns elapsed ns.
    fn sequential_writes(&mut self, bytes: u64, io_bytes: u64) -> Result<u64, String>;
}

/// How much to measure.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MeasurePlan {
    /// Random writes per run.
    pub random_ios: u64,
    /// Queue depth of the random writes (seed 000: 64).
    pub queue_depth: u32,
    /// Bytes per sequential run.
    pub sequential_bytes: u64,
    /// Sequential I/O size.
    pub sequential_io_bytes: u64,
    /// Runs of each kind; the median is used (odd, 1..=15).
    pub repeats: u32,
}

impl Default for MeasurePlan {
    fn default() -> Self {
        MeasurePlan {
            random_ios: 20_000,
            queue_depth: 64,
            sequential_bytes: 256 << 20,
            sequential_io_bytes: 4 << 20,
            repeats: 3,
        }
    }
}

/// Plausible ranges; a measurement outside them is rejected.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CapacityBounds {
    /// Lowest believable 4 KiB random IOPS.
    pub min_iops: f64,
    /// Highest believable 4 KiB random IOPS.
    pub max_iops: f64,
    /// Lowest believable sequential bandwidth.
    pub min_bytes_per_s: f64,
    /// Highest believable sequential bandwidth.
    pub max_bytes_per_s: f64,
    /// Largest spread (max/min) between repeated runs.
    pub max_spread: f64,
}

impl Default for CapacityBounds {
    fn default() -> Self {
        CapacityBounds {
            min_iops: 50.0,
            max_iops: 5_000_000.0,
            min_bytes_per_s: 10e6,
            max_bytes_per_s: 100e9,
            max_spread: 2.0,
        }
    }
}

/// Raw samples: (amount, elapsed ns) per run; amount is I/Os or bytes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CapacitySamples {
    /// Random 4 KiB write runs: (ios, elapsed ns).
    pub random: Vec<(u64, u64)>,
    /// Sequential write runs: (bytes, elapsed ns).
    pub sequential: Vec<(u64, u64)>,
}

fn median_rate(samples: &[(u64, u64)], what: &str, max_spread: f64) -> Result<f64, QosError> {
    let mut rates: Vec<f64> = samples
        .iter()
        .filter(|(_, ns)| *ns > 0)
        .map(|&(n, ns)| n as f64 * 1e9 / ns as f64)
        .collect();
    if rates.is_empty() || rates.len() != samples.len() {
        return Err(QosError::CapacityOutOfBounds(format!(
            "{what}: no valid samples"
        )));
    }
    rates.sort_by(f64::total_cmp);
    let (lo, hi) = (rates[0], rates[rates.len() - 1]);
    if lo <= 0.0 || hi / lo > max_spread {
        return Err(QosError::CapacityOutOfBounds(format!(
            "{what}: runs disagree ({lo:.0} .. {hi:.0}, spread > {max_spread})"
        )));
    }
    Ok(rates[rates.len() / 2])
}

/// Estimates capacity from samples and checks it against `bounds`.
pub fn estimate(s: &CapacitySamples, bounds: &CapacityBounds) -> Result<DeviceCapacity, QosError> {
    let iops = median_rate(&s.random, "random 4 KiB writes", bounds.max_spread)?;
    let bw = median_rate(&s.sequential, "sequential writes", bounds.max_spread)?;
    if !(bounds.min_iops..=bounds.max_iops).contains(&iops) {
        return Err(QosError::CapacityOutOfBounds(format!(
            "{iops:.0} IOPS outside [{}, {}]; pin the capacity in config if this is right",
            bounds.min_iops, bounds.max_iops
        )));
    }
    if !(bounds.min_bytes_per_s..=bounds.max_bytes_per_s).contains(&bw) {
        return Err(QosError::CapacityOutOfBounds(format!(
            "{bw:.0} B/s outside [{}, {}]; pin the capacity in config if this is right",
            bounds.min_bytes_per_s, bounds.max_bytes_per_s
        )));
    }
    if bw < iops * REFERENCE_IO_BYTES as f64 * 0.5 {
        return Err(QosError::CapacityOutOfBounds(format!(
            "sequential {bw:.0} B/s is below half of random 4 KiB throughput ({iops:.0} IOPS)"
        )));
    }
    Ok(DeviceCapacity {
        random_4k_iops: iops,
        seq_bandwidth_bytes_per_s: bw,
    })
}

/// Runs `plan` on `runner` and estimates the capacity.
pub fn measure(
    runner: &mut dyn IoRunner,
    plan: &MeasurePlan,
    bounds: &CapacityBounds,
) -> Result<DeviceCapacity, QosError> {
    if plan.repeats == 0 || plan.repeats > 15 || plan.repeats.is_multiple_of(2) {
        return Err(invalid("repeats", "must be odd and in 1..=15"));
    }
    if plan.random_ios == 0 || plan.queue_depth == 0 || plan.sequential_io_bytes == 0 {
        return Err(invalid(
            "plan",
            "random_ios, queue_depth and sequential_io_bytes must be > 0",
        ));
    }
    if plan.sequential_bytes < plan.sequential_io_bytes {
        return Err(invalid(
            "sequential_bytes",
            "must be >= sequential_io_bytes",
        ));
    }
    let mut s = CapacitySamples::default();
    for _ in 0..plan.repeats {
        let ns = runner
            .random_writes(plan.random_ios, plan.queue_depth)
            .map_err(QosError::Measurement)?;
        s.random.push((plan.random_ios, ns));
        let ns = runner
            .sequential_writes(plan.sequential_bytes, plan.sequential_io_bytes)
            .map_err(QosError::Measurement)?;
        s.sequential.push((plan.sequential_bytes, ns));
    }
    estimate(&s, bounds)
}

/// Where the capacity in force came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CapacitySource {
    /// Set by config; measurements never replace it.
    Pinned,
    /// Measured on this device.
    Measured,
}

/// The capacity in force and its origin.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct CapacityState {
    /// The capacity.
    pub capacity: DeviceCapacity,
    /// Its origin.
    pub source: CapacitySource,
}

impl CapacityState {
    /// A pinned capacity (validated).
    pub fn pinned(capacity: DeviceCapacity) -> Result<CapacityState, QosError> {
        capacity.validate()?;
        Ok(CapacityState {
            capacity,
            source: CapacitySource::Pinned,
        })
    }

    /// Starts from config: the pinned value if any (no measuring), else a measurement.
    pub fn resolve(
        pinned: Option<DeviceCapacity>,
        measure_now: impl FnOnce() -> Result<DeviceCapacity, QosError>,
    ) -> Result<CapacityState, QosError> {
        match pinned {
            Some(c) => CapacityState::pinned(c),
            None => Ok(CapacityState {
                capacity: measure_now()?,
                source: CapacitySource::Measured,
            }),
        }
    }

    /// Applies a new measurement; refused (typed error) when the capacity is pinned.
    pub fn apply_measurement(&mut self, measured: DeviceCapacity) -> Result<(), QosError> {
        if self.source == CapacitySource::Pinned {
            return Err(QosError::CapacityPinned);
        }
        measured.validate()?;
        self.capacity = measured;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::convert::sat_u64;

    /// A device with fixed per-I/O latency and bandwidth, plus a noise factor per run.
    struct Fake {
        iops: f64,
        bw: f64,
        noise: Vec<f64>,
        run: usize,
        fail: bool,
    }

    impl IoRunner for Fake {
        fn random_writes(&mut self, ios: u64, _qd: u32) -> Result<u64, String> {
            if self.fail {
                return Err("EIO".into());
            }
            let f = self.noise[self.run % self.noise.len()];
            Ok(sat_u64(ios as f64 / self.iops * 1e9 * f))
        }
        fn sequential_writes(&mut self, bytes: u64, _io: u64) -> Result<u64, String> {
            let f = self.noise[self.run % self.noise.len()];
            self.run += 1;
            Ok(sat_u64(bytes as f64 / self.bw * 1e9 * f))
        }
    }

    fn fake(iops: f64, bw: f64, noise: Vec<f64>) -> Fake {
        Fake {
            iops,
            bw,
            noise,
            run: 0,
            fail: false,
        }
    }

    #[test]
    fn median_of_runs_is_used() {
        let mut f = fake(21500.0, 1.5e9, vec![1.0, 1.3, 0.9]);
        let c = measure(&mut f, &MeasurePlan::default(), &CapacityBounds::default()).unwrap();
        assert!((c.random_4k_iops - 21500.0).abs() < 1.0, "{c:?}");
        assert!((c.seq_bandwidth_bytes_per_s - 1.5e9).abs() / 1.5e9 < 1e-6);
    }

    #[test]
    fn implausible_or_noisy_measurements_are_rejected() {
        let b = CapacityBounds::default();
        let plan = MeasurePlan::default();
        // A cache absorbing writes: 50M IOPS.
        let mut f = fake(50e6, 100e9, vec![1.0]);
        assert!(matches!(
            measure(&mut f, &plan, &b),
            Err(QosError::CapacityOutOfBounds(_))
        ));
        // Runs disagree by 3x.
        let mut f = fake(1000.0, 1e9, vec![1.0, 3.0, 1.0]);
        assert!(matches!(
            measure(&mut f, &plan, &b),
            Err(QosError::CapacityOutOfBounds(_))
        ));
        // Device error.
        let mut f = fake(1000.0, 1e9, vec![1.0]);
        f.fail = true;
        assert!(matches!(
            measure(&mut f, &plan, &b),
            Err(QosError::Measurement(_))
        ));
        let bad_plan = MeasurePlan { repeats: 2, ..plan };
        assert!(measure(&mut fake(1e3, 1e9, vec![1.0]), &bad_plan, &b).is_err());
    }

    #[test]
    fn pinned_capacity_is_never_replaced_by_a_measurement() {
        let pinned = DeviceCapacity::HDD_SEED000;
        let mut st = CapacityState::resolve(Some(pinned), || panic!("must not measure")).unwrap();
        assert_eq!(st.source, CapacitySource::Pinned);
        assert_eq!(
            st.apply_measurement(DeviceCapacity::NVME_SEED000),
            Err(QosError::CapacityPinned)
        );
        assert_eq!(st.capacity, pinned);
        let mut m = CapacityState::resolve(None, || Ok(DeviceCapacity::NVME_SEED000)).unwrap();
        m.apply_measurement(pinned).unwrap();
        assert_eq!(m.capacity, pinned);
    }
}
