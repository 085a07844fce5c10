//! Capacity measurement of a timing model in virtual time (no runtime, no clock).
//!
//! Owns a closed-loop discrete-event simulation: `queue_depth` requests are always outstanding,
//! each completion immediately submits the next. This is the "capacity function" that QoS
//! studies use to learn what a device can do (IOPS, bandwidth) and the check that profiles
//! reproduce their sources. It must never read a clock: all time is simulated nanoseconds.

use crate::device::{IoKind, IoRequest};
use crate::error::{BlockDevError, Result};
use crate::model::{Engine, TimingModel};
use cairn_convert::{sat_usize, usize_of};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Most requests kept outstanding in a measurement (explicit limit).
pub const MAX_QUEUE_DEPTH: usize = 4096;

/// Where requests land.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pattern {
    /// Uniformly random block-aligned offsets over the whole device (seeded).
    Random,
    /// Consecutive blocks from offset 0, wrapping at the end.
    Sequential,
}

/// A closed-loop workload.
#[derive(Debug, Clone, Copy)]
pub struct Workload {
    /// Read or write.
    pub kind: IoKind,
    /// Bytes per request.
    pub block_bytes: u64,
    /// Offsets.
    pub pattern: Pattern,
    /// Requests kept outstanding (1..=[`MAX_QUEUE_DEPTH`]).
    pub queue_depth: usize,
    /// Requests to complete.
    pub ops: u64,
    /// Seed for random offsets.
    pub seed: u64,
}

/// What a measurement found.
#[derive(Debug, Clone, Copy)]
pub struct CapacityReport {
    /// Completed requests.
    pub ops: u64,
    /// Simulated time from first submission to last completion.
    pub elapsed_ns: u64,
    /// Requests per second.
    pub iops: f64,
    /// Bytes per second / 10^6.
    pub bandwidth_mb_s: f64,
    /// Mean request latency in microseconds.
    pub mean_latency_us: f64,
    /// 99th percentile latency in microseconds.
    pub p99_latency_us: f64,
}

/// Runs `workload` against `model` on a device of `size_bytes`, in virtual time.
pub fn measure(
    model: Box<dyn TimingModel>,
    size_bytes: u64,
    workload: Workload,
) -> Result<CapacityReport> {
    let w = workload;
    if w.queue_depth == 0 || w.queue_depth > MAX_QUEUE_DEPTH {
        return Err(BlockDevError::Config(format!(
            "queue depth {} outside 1..={MAX_QUEUE_DEPTH}",
            w.queue_depth
        )));
    }
    if w.block_bytes == 0 || w.block_bytes > size_bytes || w.ops == 0 {
        return Err(BlockDevError::Config(
            "block size must be in 1..=device size and ops >= 1".into(),
        ));
    }
    if !matches!(w.kind, IoKind::Read | IoKind::Write) {
        return Err(BlockDevError::Config(
            "capacity workloads read or write".into(),
        ));
    }
    let blocks = size_bytes / w.block_bytes;
    let mut rng = ChaCha8Rng::seed_from_u64(w.seed);
    let mut cursor = 0u64;
    let mut next_req = |rng: &mut ChaCha8Rng| {
        let block = match w.pattern {
            Pattern::Random => rng.random_range(0..blocks),
            Pattern::Sequential => {
                let b = cursor % blocks;
                cursor += 1;
                b
            }
        };
        IoRequest {
            kind: w.kind,
            offset_bytes: block * w.block_bytes,
            len_bytes: w.block_bytes,
        }
    };
    let mut engine: Engine<u64> = Engine::new(model);
    let mut submitted = 0u64;
    let mut now = 0u64;
    let mut latencies = Vec::with_capacity(usize_of(w.ops));
    while submitted < w.ops && submitted < w.queue_depth as u64 {
        engine.submit(next_req(&mut rng), now);
        submitted += 1;
    }
    while (latencies.len() as u64) < w.ops {
        engine.start_ready(now);
        let Some(t) = engine.next_completion_ns() else {
            break;
        };
        now = t;
        for (done, submit_ns) in engine.pop_completed(now) {
            latencies.push(done - submit_ns);
            if submitted < w.ops {
                engine.submit(next_req(&mut rng), now);
                submitted += 1;
            }
        }
    }
    let ops = latencies.len() as u64;
    let secs = (now.max(1)) as f64 / 1e9;
    latencies.sort_unstable();
    let p99 = latencies
        .get(sat_usize((latencies.len() as f64 * 0.99).ceil()).saturating_sub(1))
        .copied()
        .unwrap_or(0);
    Ok(CapacityReport {
        ops,
        elapsed_ns: now,
        iops: ops as f64 / secs,
        bandwidth_mb_s: ops as f64 * w.block_bytes as f64 / secs / 1e6,
        mean_latency_us: latencies.iter().sum::<u64>() as f64 / ops.max(1) as f64 / 1e3,
        p99_latency_us: p99 as f64 / 1e3,
    })
}
