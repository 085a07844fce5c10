//! The simulated device: serves dispatched requests one at a time, in the order it received
//! them, for a time given by the cost model, optionally plus an HDD seek model.
//!
//! Owns service-time computation and head position. Never schedules: order is the scheduler's.

use crate::convert::sat_u64;
use crate::cost::CostModel;
use crate::request::Request;
use serde::{Deserialize, Serialize};

/// Seek model of a rotating disk.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HddSeek {
    /// Addressable span (full-stroke distance).
    pub span_bytes: u64,
    /// Track-to-track seek.
    pub min_seek_ns: u64,
    /// Full-stroke seek.
    pub max_seek_ns: u64,
    /// Average rotational delay added to every non-sequential access.
    pub rotation_ns: u64,
}

impl HddSeek {
    /// A 7200 rpm 1 TB disk: 0.5-15 ms seeks, 4.17 ms average rotational delay.
    pub const SEVEN_K_1TB: HddSeek = HddSeek {
        span_bytes: 1 << 40,
        min_seek_ns: 500_000,
        max_seek_ns: 15_000_000,
        rotation_ns: 4_170_000,
    };

    /// Positioning time for a move of `distance` bytes (0 for a sequential access).
    pub fn seek_ns(&self, distance: u64) -> u64 {
        if distance == 0 {
            return 0;
        }
        let frac = (distance as f64 / self.span_bytes.max(1) as f64).min(1.0);
        let seek = self.min_seek_ns as f64
            + (self.max_seek_ns - self.min_seek_ns.min(self.max_seek_ns)) as f64 * frac.sqrt();
        sat_u64(seek) + self.rotation_ns
    }
}

/// Device parameters of a simulation.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DeviceModel {
    /// Costs (service time when there is no seek model).
    pub cost: CostModel,
    /// Requests the scheduler may have outstanding at the device (>= 1).
    pub in_flight: usize,
    /// Seek model; when set, service = seek + length x cost per byte.
    pub hdd: Option<HddSeek>,
}

/// Device state during a run.
#[derive(Clone, Debug)]
pub(crate) struct Device {
    model: DeviceModel,
    head_bytes: u64,
    /// Total head movement so far.
    pub seek_distance_bytes: u128,
}

impl Device {
    pub(crate) fn new(model: DeviceModel) -> Device {
        Device {
            model,
            head_bytes: 0,
            seek_distance_bytes: 0,
        }
    }

    /// Service time of `req`, moving the head.
    pub(crate) fn serve(&mut self, req: &Request) -> u64 {
        let pos = req.physical_offset_bytes.unwrap_or(req.offset_bytes);
        match self.model.hdd {
            Some(h) => {
                let dist = pos.abs_diff(self.head_bytes);
                self.seek_distance_bytes += dist as u128;
                self.head_bytes = pos + req.length_bytes;
                let transfer = req.length_bytes as f64 * self.model.cost.cost_per_byte_ns;
                (h.seek_ns(dist) + sat_u64(transfer)).max(1)
            }
            None => {
                self.seek_distance_bytes += pos.abs_diff(self.head_bytes) as u128;
                self.head_bytes = pos + req.length_bytes;
                req.cost_ns.max(1)
            }
        }
    }
}
