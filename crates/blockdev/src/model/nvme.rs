//! The NVMe timing model: independent flash channels, per-chunk busy time, bandwidth per
//! channel, and a fixed pipeline latency per command.
//!
//! Owns the channel occupancy. Writes go to the channel that frees first (the FTL places them);
//! reads go to the channel that holds the data (striped by offset). It must never read a clock.

use super::TimingModel;
use crate::device::{IoKind, IoRequest};
use cairn_convert::{sat_u64, usize_of};
use serde::{Deserialize, Serialize};

/// NVMe parameters (from a TOML profile).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct NvmeParams {
    /// Independent channels (parallel units).
    pub channels: usize,
    /// Commands are split into chunks of this many bytes, spread over channels.
    pub stripe_bytes: u64,
    /// Time a channel is occupied per read chunk beyond the transfer itself, in microseconds.
    pub read_busy_us: f64,
    /// Time a channel is occupied per write chunk beyond the transfer itself, in microseconds.
    pub write_busy_us: f64,
    /// Pipeline latency added to every command (not occupying a channel), in microseconds.
    pub latency_us: f64,
    /// Aggregate read bandwidth over all channels, MB/s (10^6 bytes).
    pub read_mb_s: f64,
    /// Aggregate write bandwidth over all channels, MB/s (10^6 bytes).
    pub write_mb_s: f64,
    /// Optional limit of the host interface / controller shared by all channels, MB/s; every
    /// transferred byte also passes through it.
    #[serde(default)]
    pub bus_mb_s: Option<f64>,
}

/// The NVMe model state.
#[derive(Debug, Clone)]
pub struct NvmeModel {
    params: NvmeParams,
    busy_until_ns: Vec<u64>,
    bus_free_ns: u64,
}

impl NvmeModel {
    /// A model with every channel idle.
    pub fn new(params: NvmeParams) -> Self {
        let channels = params.channels.max(1);
        Self {
            params,
            busy_until_ns: vec![0; channels],
            bus_free_ns: 0,
        }
    }
}

impl TimingModel for NvmeModel {
    fn pick(&mut self, _now_ns: u64, _queue: &[IoRequest]) -> usize {
        0
    }

    fn start(&mut self, now_ns: u64, req: &IoRequest) -> u64 {
        let p = &self.params;
        let n = self.busy_until_ns.len();
        let latency_ns = sat_u64(p.latency_us * 1e3);
        let (busy_us, mb_s) = match req.kind {
            IoKind::Read => (p.read_busy_us, p.read_mb_s),
            IoKind::Write => (p.write_busy_us, p.write_mb_s),
            IoKind::Flush => {
                let drained = self
                    .busy_until_ns
                    .iter()
                    .copied()
                    .max()
                    .unwrap_or(0)
                    .max(now_ns);
                return drained + latency_ns;
            }
            IoKind::Discard => return now_ns + latency_ns,
        };
        let channel_bytes_per_ns = (mb_s.max(0.001) * 1e6 / 1e9) / n as f64;
        let stripe = p.stripe_bytes.max(512);
        let mut done = now_ns;
        let mut off = req.offset_bytes;
        let end = req.offset_bytes + req.len_bytes;
        while off < end {
            let chunk_end = ((off / stripe) + 1) * stripe;
            let len = chunk_end.min(end) - off;
            let ch = match req.kind {
                IoKind::Read => usize_of((off / stripe) % n as u64),
                _ => (0..n).min_by_key(|&c| self.busy_until_ns[c]).unwrap_or(0),
            };
            let begin = self.busy_until_ns[ch].max(now_ns);
            let finish =
                begin + sat_u64((busy_us * 1e3 + len as f64 / channel_bytes_per_ns).ceil());
            self.busy_until_ns[ch] = finish;
            done = done.max(finish);
            off += len;
        }
        if let Some(bus) = p.bus_mb_s {
            let bus_bytes_per_ns = bus.max(0.001) * 1e6 / 1e9;
            let begin = self.bus_free_ns.max(now_ns);
            self.bus_free_ns = begin + sat_u64((req.len_bytes as f64 / bus_bytes_per_ns).ceil());
            done = done.max(self.bus_free_ns);
        }
        done + latency_ns
    }

    fn max_in_service(&self) -> usize {
        usize::MAX
    }
}
