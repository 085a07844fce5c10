//! Checked and saturating conversions the OSD makes between durations, counters, sizes and
//! floating-point rates, in one place: a narrowing cast elsewhere is denied
//! (`clippy::cast_possible_truncation`).

use std::time::Duration;

/// `d` in whole milliseconds for a log line, a report or a counter, saturating (after 584
/// million years).
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// `d` in whole microseconds, saturating at `u32::MAX` (71 minutes): latency samples.
pub(crate) fn micros_u32(d: Duration) -> u32 {
    u32::try_from(d.as_micros()).unwrap_or(u32::MAX)
}

/// `d` in whole nanoseconds, saturating (after 584 years).
pub(crate) fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// A count or size the OSD holds in memory (bounded by its configured limits, far below
/// `usize::MAX` on the 64-bit targets it runs on) as a length: a value beyond is a broken
/// invariant, not input to handle.
pub(crate) fn usize_of(n: u64) -> usize {
    usize::try_from(n).expect("a quantity the OSD holds in memory fits in usize")
}

/// A non-negative floating-point quantity (a rate, a ratio of a capacity, a cost) as a whole
/// count: NaN and negatives give 0, values past `u64::MAX` saturate, fractions are cut.
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
pub(crate) fn sat_u64(x: f64) -> u64 {
    // Rust's float-to-integer `as` saturates and maps NaN to 0: the intended behaviour.
    x as u64
}

/// As [`sat_u64`], as a length.
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
pub(crate) fn sat_usize(x: f64) -> usize {
    // As above: saturating, NaN to 0.
    x as usize
}

/// A CRC-32C kept in a wider integer by the hasher, as the 32 bits it is.
pub(crate) fn crc32(wide: u64) -> u32 {
    u32::try_from(wide).expect("a CRC-32 fits in 32 bits")
}

/// The length of a key or value folded into a scrub digest, as the digest's 32-bit field: the
/// store bounds keys and values far below 4 GiB.
pub(crate) fn len_u32(len: usize) -> u32 {
    u32::try_from(len).expect("a key or value the store holds is under 4 GiB")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversions_saturate_or_keep_the_value() {
        assert_eq!(millis(Duration::from_millis(1_500)), 1_500);
        assert_eq!(millis(Duration::MAX), u64::MAX);
        assert_eq!(micros_u32(Duration::from_secs(10_000)), u32::MAX);
        assert_eq!(nanos(Duration::from_micros(3)), 3_000);
        assert_eq!(usize_of(4096), 4096);
        assert_eq!(sat_u64(-1.0), 0);
        assert_eq!(sat_u64(f64::NAN), 0);
        assert_eq!(sat_u64(2.9), 2);
        assert_eq!(sat_u64(1e30), u64::MAX);
        assert_eq!(sat_usize(7.5), 7);
        assert_eq!(crc32(0xdead_beef), 0xdead_beef);
        assert_eq!(len_u32(12), 12);
    }
}
