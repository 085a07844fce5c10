//! Checked and saturating conversions the OSD makes between durations, counters, sizes and
//! floating-point rates, in one place: a narrowing cast elsewhere is denied
//! (`clippy::cast_possible_truncation`).

pub(crate) use cairn_convert::{millis, nanos, sat_u64, sat_usize, usize_of};

use std::time::Duration;

/// `d` in whole microseconds, saturating at `u32::MAX` (71 minutes): latency samples.
pub(crate) fn micros_u32(d: Duration) -> u32 {
    u32::try_from(d.as_micros()).unwrap_or(u32::MAX)
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
        assert_eq!(micros_u32(Duration::from_secs(10_000)), u32::MAX);
        assert_eq!(crc32(0xdead_beef), 0xdead_beef);
        assert_eq!(len_u32(12), 12);
    }
}
