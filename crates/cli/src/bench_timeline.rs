//! Latency per second of a `cairn bench` run: a log-bucketed histogram for each second,
//! filled by every worker without a lock, read by the progress line (the last second's p99)
//! and, with `--plot`, drawn over the run.
//!
//! Buckets are eighths of a power of two of microseconds (a percentile is read within ~9%),
//! from 1 us to about 2^26 us (67 s, longer latencies fall in the last bucket); memory is
//! one bucket array per second of the run, bounded by [`MAX_SECONDS`]. This module only counts
//! and reads; it never decides what the run does.

use crate::convert::{sat_u64, sat_usize, usize_of};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// Buckets per doubling of latency.
const PER_OCTAVE: usize = 8;
/// Doublings covered from 1 us.
const OCTAVES: usize = 26;
/// Buckets per second.
const BUCKETS: usize = PER_OCTAVE * OCTAVES;
/// Longest run (seconds) kept second by second (explicit memory limit: ~830 B per second,
/// 72 MB for a day); later completions count in the last second.
pub const MAX_SECONDS: u64 = 86_400;

/// Per-second latency histograms of one run.
pub struct LatencyTimeline {
    start: Instant,
    seconds: Vec<Box<[AtomicU32]>>,
}

/// What one second of the run saw.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SecondStats {
    /// Operations completed in that second.
    pub ops: u64,
    /// Median latency (ms).
    pub p50_ms: f64,
    /// 99th percentile latency (ms).
    pub p99_ms: f64,
}

impl LatencyTimeline {
    /// A timeline for a run started at `start` of `seconds` (and a few more for the last
    /// operations to finish).
    pub fn new(start: Instant, seconds: u64) -> LatencyTimeline {
        LatencyTimeline {
            start,
            seconds: (0..slots(seconds))
                .map(|_| (0..BUCKETS).map(|_| AtomicU32::new(0)).collect())
                .collect(),
        }
    }

    /// Counts one operation that finished at `done` after `latency`.
    pub fn record(&self, done: Instant, latency: Duration) {
        // A second past the last slot counts in the last one (saturating: it is past it).
        let secs = done.saturating_duration_since(self.start).as_secs();
        let sec = usize::try_from(secs)
            .unwrap_or(usize::MAX)
            .min(self.seconds.len() - 1);
        self.seconds[sec][bucket_of(latency)].fetch_add(1, Ordering::Relaxed);
    }

    /// Seconds the timeline holds.
    pub fn len(&self) -> usize {
        self.seconds.len()
    }

    /// The stats of second `sec` (counting from 0); zero when out of range.
    pub fn second(&self, sec: usize) -> SecondStats {
        let Some(counts) = self.seconds.get(sec) else {
            return SecondStats {
                ops: 0,
                p50_ms: 0.0,
                p99_ms: 0.0,
            };
        };
        let counts: Vec<u64> = counts
            .iter()
            .map(|c| u64::from(c.load(Ordering::Relaxed)))
            .collect();
        let ops = counts.iter().sum();
        SecondStats {
            ops,
            p50_ms: quantile(&counts, ops, 0.5),
            p99_ms: quantile(&counts, ops, 0.99),
        }
    }
}

/// Seconds kept for a run of `seconds`: five more for the last operations, at most
/// [`MAX_SECONDS`].
fn slots(seconds: u64) -> usize {
    usize_of(seconds.saturating_add(5).min(MAX_SECONDS))
}

/// The bucket of `latency`: eighths of powers of two of microseconds.
fn bucket_of(latency: Duration) -> usize {
    let us = latency.as_micros().max(1) as f64;
    sat_usize(us.log2() * PER_OCTAVE as f64).min(BUCKETS - 1)
}

/// The latency (ms) at the middle of bucket `b`.
fn bucket_ms(b: usize) -> f64 {
    2f64.powf((b as f64 + 0.5) / PER_OCTAVE as f64) / 1000.0
}

/// The `q` quantile (ms) of `total` operations counted in `counts`.
fn quantile(counts: &[u64], total: u64, q: f64) -> f64 {
    if total == 0 {
        return 0.0;
    }
    let rank = sat_u64((total as f64 * q).ceil()).max(1);
    let mut seen = 0;
    for (b, &n) in counts.iter().enumerate() {
        seen += n;
        if seen >= rank {
            return bucket_ms(b);
        }
    }
    bucket_ms(counts.len() - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_count_their_operations_and_read_percentiles_within_a_bucket() {
        let start = Instant::now();
        let t = LatencyTimeline::new(start, 3);
        assert_eq!(t.len(), 8);
        // Second 0: 98 ops at 1 ms and 2 at 50 ms; second 2: one op at 200 us.
        for i in 0..100 {
            let lat = if i < 98 { 1_000 } else { 50_000 };
            t.record(
                start + Duration::from_millis(10),
                Duration::from_micros(lat),
            );
        }
        t.record(
            start + Duration::from_millis(2500),
            Duration::from_micros(200),
        );
        let s0 = t.second(0);
        assert_eq!(s0.ops, 100);
        assert!((s0.p50_ms - 1.0).abs() / 1.0 < 0.1, "{s0:?}");
        assert!((s0.p99_ms - 50.0).abs() / 50.0 < 0.1, "{s0:?}");
        assert_eq!(t.second(1).ops, 0);
        assert_eq!(t.second(1).p99_ms, 0.0);
        let s2 = t.second(2);
        assert!(s2.ops == 1 && (s2.p99_ms - 0.2).abs() / 0.2 < 0.1, "{s2:?}");
        // Past the end: the last second; out of range reads are empty.
        t.record(start + Duration::from_secs(100), Duration::from_secs(1000));
        assert_eq!(t.second(7).ops, 1);
        assert!(t.second(7).p99_ms > 60_000.0);
        assert_eq!(t.second(99).ops, 0);
    }

    #[test]
    fn buckets_are_monotonic_and_bounded() {
        let mut last = 0;
        for us in [0u64, 1, 2, 3, 10, 100, 1_000, 10_000, 1 << 30, u64::MAX / 2] {
            let b = bucket_of(Duration::from_micros(us));
            assert!(b >= last && b < BUCKETS, "{us}: {b}");
            last = b;
        }
        assert_eq!(slots(u64::MAX) as u64, MAX_SECONDS);
        assert_eq!(slots(10), 15);
    }
}
