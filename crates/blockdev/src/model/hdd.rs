//! The HDD timing model: one actuator, seek time from head distance, rotational position,
//! media transfer rate, and an optional command-queue reordering (SATA NCQ-like).
//!
//! Owns the head position and the geometry arithmetic. Rotational position is a pure function
//! of time (the platter never stops), so the model is deterministic. It must never read a clock.

use super::TimingModel;
use crate::device::{IoKind, IoRequest};
use cairn_convert::sat_u64;
use serde::{Deserialize, Serialize};

/// How the drive orders its command queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Reorder {
    /// First come, first served.
    Fifo,
    /// Shortest access time first among the first `reorder_window` commands (as NCQ firmware does).
    Satf,
}

/// HDD parameters (from a TOML profile).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct HddParams {
    /// Spindle speed in revolutions per minute.
    pub rpm: f64,
    /// Media transfer rate in MB/s (10^6 bytes), which also fixes the bytes per track.
    pub transfer_mb_s: f64,
    /// Track-to-track (shortest) seek in ms.
    pub seek_min_ms: f64,
    /// Full-stroke seek in ms; seek time grows with the square root of the distance.
    pub seek_full_ms: f64,
    /// Fixed controller overhead per command in microseconds.
    pub command_overhead_us: f64,
    /// Queue ordering.
    pub reorder: Reorder,
    /// How many queued commands the firmware considers when reordering (NCQ allows 32).
    pub reorder_window: usize,
}

/// The HDD model state.
#[derive(Debug, Clone)]
pub struct HddModel {
    params: HddParams,
    size_bytes: u64,
    head_bytes: u64,
    rev_ns: f64,
    track_bytes: f64,
    bytes_per_ns: f64,
}

impl HddModel {
    /// A model of a `size_bytes` drive with `params`; the head starts at offset 0.
    pub fn new(params: HddParams, size_bytes: u64) -> Self {
        let rev_ns = 60e9 / params.rpm.max(1.0);
        let bytes_per_ns = params.transfer_mb_s.max(0.001) * 1e6 / 1e9;
        Self {
            track_bytes: bytes_per_ns * rev_ns,
            params,
            size_bytes: size_bytes.max(1),
            head_bytes: 0,
            rev_ns,
            bytes_per_ns,
        }
    }

    fn seek_ns(&self, to_bytes: u64) -> f64 {
        let dist = self.head_bytes.abs_diff(to_bytes) as f64;
        if dist < self.track_bytes {
            return 0.0;
        }
        let frac = (dist / self.size_bytes as f64).min(1.0);
        let p = &self.params;
        (p.seek_min_ms + (p.seek_full_ms - p.seek_min_ms) * frac.sqrt()) * 1e6
    }

    /// Positioning time (overhead + seek + rotational wait) if `req` started at `now_ns`.
    fn access_ns(&self, now_ns: u64, req: &IoRequest) -> f64 {
        let overhead = self.params.command_overhead_us * 1e3;
        if req.kind == IoKind::Flush
            || req.kind == IoKind::Discard
            || req.offset_bytes == self.head_bytes
        {
            return overhead;
        }
        let seek = self.seek_ns(req.offset_bytes);
        let arrive = now_ns as f64 + overhead + seek;
        let head_angle = (arrive / self.rev_ns).fract();
        let target = (req.offset_bytes as f64 / self.track_bytes).fract();
        let wait = (target - head_angle).rem_euclid(1.0) * self.rev_ns;
        overhead + seek + wait
    }
}

impl TimingModel for HddModel {
    fn pick(&mut self, now_ns: u64, queue: &[IoRequest]) -> usize {
        if self.params.reorder == Reorder::Fifo || queue[0].kind == IoKind::Flush {
            return 0;
        }
        let barrier = queue
            .iter()
            .position(|r| r.kind == IoKind::Flush)
            .unwrap_or(queue.len());
        let window = barrier.min(self.params.reorder_window.max(1));
        (0..window)
            .min_by(|&a, &b| {
                self.access_ns(now_ns, &queue[a])
                    .total_cmp(&self.access_ns(now_ns, &queue[b]))
            })
            .unwrap_or(0)
    }

    fn start(&mut self, now_ns: u64, req: &IoRequest) -> u64 {
        let access = self.access_ns(now_ns, req);
        let transfer = match req.kind {
            IoKind::Read | IoKind::Write => req.len_bytes as f64 / self.bytes_per_ns,
            IoKind::Flush | IoKind::Discard => 0.0,
        };
        if matches!(req.kind, IoKind::Read | IoKind::Write) {
            self.head_bytes = req.offset_bytes + req.len_bytes;
        }
        now_ns + sat_u64((access + transfer).ceil())
    }

    fn max_in_service(&self) -> usize {
        1
    }
}
