//! Log-linear histogram of nanosecond durations (wait times, latencies).
//!
//! Owns bucketing and percentile queries. Fixed memory chosen at construction; recording never
//! allocates.

use crate::convert::{sat_u64, u32_of, usize_of};

/// A histogram with `2^sub_bits` linear sub-buckets per power of two (relative error
/// <= 2^-sub_bits).
#[derive(Clone, Debug, PartialEq)]
pub struct Histogram {
    sub_bits: u32,
    counts: Vec<u64>,
    total: u64,
    sum_ns: u128,
    max_ns: u64,
}

impl Histogram {
    /// A histogram with `sub_bits` (0..=6) sub-bucket bits; 3 gives 12.5% precision in 4 KiB.
    pub fn new(sub_bits: u32) -> Histogram {
        let sub_bits = sub_bits.min(6);
        let buckets = ((64 - sub_bits as usize) + 1) << sub_bits;
        Histogram {
            sub_bits,
            counts: vec![0; buckets],
            total: 0,
            sum_ns: 0,
            max_ns: 0,
        }
    }

    fn bucket(&self, v: u64) -> usize {
        let sub = self.sub_bits;
        if v < (1u64 << sub) {
            return usize_of(v);
        }
        let e = 63 - v.leading_zeros();
        let shift = e - sub;
        let mantissa = (v >> shift) & ((1u64 << sub) - 1);
        (((shift + 1) as usize) << sub) + usize_of(mantissa)
    }

    fn bucket_low(&self, b: usize) -> u64 {
        let sub = self.sub_bits as usize;
        let group = b >> sub;
        let mantissa = (b & ((1 << sub) - 1)) as u64;
        if group == 0 {
            return mantissa;
        }
        let shift = u32_of(group - 1);
        ((1u64 << sub) | mantissa) << shift
    }

    /// Records one value.
    pub fn record(&mut self, v_ns: u64) {
        let b = self.bucket(v_ns);
        self.counts[b] += 1;
        self.total += 1;
        self.sum_ns += v_ns as u128;
        self.max_ns = self.max_ns.max(v_ns);
    }

    /// Number of recorded values.
    pub fn count(&self) -> u64 {
        self.total
    }

    /// Sum of recorded values.
    pub fn sum_ns(&self) -> u128 {
        self.sum_ns
    }

    /// Mean of recorded values (0 if empty).
    pub fn mean_ns(&self) -> f64 {
        if self.total == 0 {
            0.0
        } else {
            self.sum_ns as f64 / self.total as f64
        }
    }

    /// Largest recorded value.
    pub fn max_ns(&self) -> u64 {
        self.max_ns
    }

    /// Value at quantile `q` in [0, 1] (lower edge of the bucket holding it; 0 if empty).
    pub fn quantile_ns(&self, q: f64) -> u64 {
        if self.total == 0 {
            return 0;
        }
        let rank = sat_u64((q.clamp(0.0, 1.0) * self.total as f64).ceil()).max(1);
        let mut seen = 0;
        for (b, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return self.bucket_low(b).min(self.max_ns);
            }
        }
        self.max_ns
    }

    /// Values recorded that are at most `bound_ns`, to the histogram's precision: a bucket
    /// counts once every value it can hold is within the bound, so the count errs low by at
    /// most the bucket the bound falls in.
    pub fn count_at_most(&self, bound_ns: u64) -> u64 {
        let holding = self.bucket(bound_ns);
        let below: u64 = self.counts[..holding].iter().sum();
        let bound_is_last_of_its_bucket = holding + 1 >= self.counts.len()
            || self.bucket_low(holding + 1) == bound_ns.saturating_add(1);
        if bound_is_last_of_its_bucket {
            below + self.counts[holding]
        } else {
            below
        }
    }

    /// Adds another histogram with the same precision into this one.
    pub fn merge(&mut self, other: &Histogram) {
        if other.sub_bits == self.sub_bits {
            for (a, b) in self.counts.iter_mut().zip(&other.counts) {
                *a += b;
            }
            self.total += other.total;
            self.sum_ns += other.sum_ns;
            self.max_ns = self.max_ns.max(other.max_ns);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_within_precision() {
        let mut h = Histogram::new(3);
        for v in 1..=10_000u64 {
            h.record(v * 1000);
        }
        for (q, want) in [
            (0.5, 5_000_000.0),
            (0.99, 9_900_000.0),
            (0.995, 9_950_000.0),
        ] {
            let got = h.quantile_ns(q) as f64;
            assert!((got - want).abs() / want < 0.13, "q{q}: {got} vs {want}");
        }
        assert_eq!(h.count(), 10_000);
        assert_eq!(h.max_ns(), 10_000_000);
        assert_eq!(Histogram::new(3).quantile_ns(0.5), 0);
    }

    #[test]
    fn counts_at_most_a_bound_never_exceed_the_truth_nor_miss_more_than_a_bucket() {
        let mut h = Histogram::new(3);
        let values: Vec<u64> = (0..5_000u64).map(|i| i * i * 37).collect();
        for &v in &values {
            h.record(v);
        }
        for bound in [0u64, 1, 999, 50_000, 1 << 20, 123_456_789, u64::MAX] {
            let truth = values.iter().filter(|&&v| v <= bound).count() as u64;
            let within_bucket = values
                .iter()
                .filter(|&&v| v <= bound && h.bucket(v) == h.bucket(bound))
                .count() as u64;
            let got = h.count_at_most(bound);
            assert!(got <= truth, "bound {bound}: {got} > {truth}");
            assert!(
                got + within_bucket >= truth,
                "bound {bound}: {got} of {truth}"
            );
        }
        assert_eq!(h.count_at_most(u64::MAX), h.count());
    }

    #[test]
    fn buckets_are_monotonic_and_cover_u64() {
        let h = Histogram::new(2);
        let mut last = 0;
        for v in [0u64, 1, 3, 4, 5, 7, 8, 100, 1 << 40, u64::MAX] {
            let b = h.bucket(v);
            assert!(b >= last && b < h.counts.len());
            assert!(h.bucket_low(b) <= v);
            last = b;
        }
    }
}
