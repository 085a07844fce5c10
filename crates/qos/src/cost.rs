//! Cost model: how much device time a request consumes.
//!
//! Owns `DeviceCapacity` (what was measured) and `CostModel` (cost per I/O + cost per byte,
//! in device nanoseconds). Never measures anything itself (see `capacity`).

use crate::convert::sat_u64;
use crate::error::{invalid, QosError};
use serde::{Deserialize, Serialize};

/// Size of the I/O used to measure random IOPS.
pub const REFERENCE_IO_BYTES: u64 = 4096;

/// A device's measured capacity.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeviceCapacity {
    /// Random 4 KiB write IOPS at the measuring queue depth.
    pub random_4k_iops: f64,
    /// Sequential write bandwidth.
    pub seq_bandwidth_bytes_per_s: f64,
}

impl DeviceCapacity {
    /// Seed 000's NVMe (Intel P3700): 21500 IOPS, ~1.5 GiB/s sequential.
    pub const NVME_SEED000: DeviceCapacity = DeviceCapacity {
        random_4k_iops: 21500.0,
        seq_bandwidth_bytes_per_s: 1.5 * 1024.0 * 1024.0 * 1024.0,
    };
    /// Seed 000's HDD with WAL/DB on flash: 340 IOPS, ~120 MiB/s sequential.
    pub const HDD_SEED000: DeviceCapacity = DeviceCapacity {
        random_4k_iops: 340.0,
        seq_bandwidth_bytes_per_s: 120.0 * 1024.0 * 1024.0,
    };

    /// Checks that both numbers are finite and positive.
    pub fn validate(&self) -> Result<(), QosError> {
        if !(self.random_4k_iops.is_finite() && self.random_4k_iops > 0.0) {
            return Err(invalid("random_4k_iops", "must be finite and > 0"));
        }
        if !(self.seq_bandwidth_bytes_per_s.is_finite() && self.seq_bandwidth_bytes_per_s > 0.0) {
            return Err(invalid(
                "seq_bandwidth_bytes_per_s",
                "must be finite and > 0",
            ));
        }
        Ok(())
    }
}

/// Cost = `cost_per_io_ns` + `length_bytes` x `cost_per_byte_ns`, in device nanoseconds.
///
/// Derived so that a random 4 KiB I/O costs exactly `1 / random_4k_iops` seconds and each further
/// byte costs `1 / seq_bandwidth` seconds: one 4 MiB write costs what it really costs the device.
/// One second of device time is therefore 1e9 cost units, and "x % of capacity" is x % of that.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct CostModel {
    /// Fixed cost of any I/O (seek, command, metadata).
    pub cost_per_io_ns: f64,
    /// Transfer cost of one byte.
    pub cost_per_byte_ns: f64,
    /// The capacity it was derived from.
    pub capacity: DeviceCapacity,
}

impl CostModel {
    /// Derives costs from a measured capacity.
    pub fn from_capacity(capacity: DeviceCapacity) -> Result<CostModel, QosError> {
        capacity.validate()?;
        let per_byte = 1e9 / capacity.seq_bandwidth_bytes_per_s;
        let per_4k = 1e9 / capacity.random_4k_iops;
        let per_io = (per_4k - REFERENCE_IO_BYTES as f64 * per_byte).max(0.0);
        Ok(CostModel {
            cost_per_io_ns: per_io,
            cost_per_byte_ns: per_byte,
            capacity,
        })
    }

    /// Cost of one I/O of `length_bytes`, in device nanoseconds (at least 1).
    pub fn cost_ns(&self, length_bytes: u64) -> u64 {
        let c = self.cost_per_io_ns + length_bytes as f64 * self.cost_per_byte_ns;
        sat_u64(c.round()).max(1)
    }

    /// Device capacity in cost units per second (always 1e9: one second of device time).
    pub fn capacity_cost_per_s(&self) -> f64 {
        1e9
    }

    /// Converts a rate in 4 KiB IOPS to a fraction of device capacity.
    pub fn iops_to_fraction(&self, iops: f64) -> f64 {
        iops / self.capacity.random_4k_iops
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn four_k_costs_one_over_iops_and_large_io_costs_bandwidth() {
        let m = CostModel::from_capacity(DeviceCapacity::NVME_SEED000).unwrap();
        let c4k = m.cost_ns(4096);
        assert!((c4k as f64 - 1e9 / 21500.0).abs() < 2.0);
        let c4m = m.cost_ns(4 << 20);
        let expect = m.cost_per_io_ns + (4u64 << 20) as f64 * 1e9 / (1.5 * 1073741824.0);
        assert!((c4m as f64 - expect).abs() < 2.0);
        assert!(c4m > 50 * c4k);
    }

    #[test]
    fn bad_capacity_is_a_typed_error() {
        let bad = DeviceCapacity {
            random_4k_iops: 0.0,
            seq_bandwidth_bytes_per_s: 1.0,
        };
        assert!(matches!(
            CostModel::from_capacity(bad),
            Err(QosError::InvalidParam { .. })
        ));
        let nan = DeviceCapacity {
            random_4k_iops: 1.0,
            seq_bandwidth_bytes_per_s: f64::NAN,
        };
        assert!(CostModel::from_capacity(nan).is_err());
    }
}
