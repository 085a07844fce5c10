//! Checked conversions between the gateway's quantities: durations into counters and
//! timestamps, u64 offsets into in-memory positions, and the short lists and pages it
//! serves (usize) into the u32 and i32 counts of the backend's calls and S3's XML.

pub(crate) use cairn_convert::nanos;

use std::time::Duration;

/// `d` in whole milliseconds for a timestamp, saturating (after 292 million years).
pub(crate) fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// `n` (an offset or a length into data held in memory) as a usize, saturating: a value
/// beyond `usize::MAX` is past the end of any buffer, which is what callers clamp it to.
pub(crate) fn sat_usize(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

/// `n` (a page size or a count of one page's items, or of an upload's parts) as a u32:
/// pages are at most `MAX_PAGE`, `MAX_KEYS` or `MAX_SHARD_PAGE` (1000) items and an upload at
/// most `MAX_PARTS` (10,000) parts, so a value beyond `u32` is a broken invariant.
pub(crate) fn count_u32(n: usize) -> u32 {
    u32::try_from(n).expect("a page or a list of parts is short")
}

/// `n` (a page size or a count of one page's items) as the i32 S3's XML carries: bounded as
/// for [`count_u32`].
pub(crate) fn count_i32(n: usize) -> i32 {
    i32::try_from(n).expect("a page or a list of parts is short")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_offsets_saturate_and_counts_convert() {
        assert_eq!(millis(Duration::from_secs(2)), 2_000);
        assert_eq!(millis(Duration::MAX), i64::MAX);
        assert_eq!(sat_usize(7), 7);
        assert_eq!(count_u32(1000), 1000);
        assert_eq!(count_i32(1000), 1000);
    }
}
