//! Checked conversions between the store's on-disk quantities (u64 bytes, blocks, offsets)
//! and in-memory lengths and indexes (usize), and of durations into counters.

use std::time::Duration;

/// `n` (bytes, blocks or an offset the store holds in memory) as a length or index: every
/// such quantity is bounded by the store's configured limits (an I/O, a transaction, an
/// object), far below `usize::MAX` on the 64-bit targets the store runs on, so a value
/// beyond it is a broken invariant, not input to handle.
pub(crate) fn usize_of(n: u64) -> usize {
    usize::try_from(n).expect("a quantity the store holds in memory fits in usize")
}

/// `d` in whole nanoseconds for a counter, saturating (after 584 years).
pub(crate) fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_saturate_and_sizes_convert() {
        assert_eq!(nanos(Duration::from_micros(3)), 3_000);
        assert_eq!(nanos(Duration::MAX), u64::MAX);
        assert_eq!(usize_of(4096), 4096);
    }
}
