//! Checked conversions of the command line's numbers (u64 counts and sizes) into in-memory
//! lengths (usize), and of floating-point figures (ranks, rates, pixels, fixed-point
//! weights) into integers.

pub(crate) use cairn_convert::{sat_i32, sat_u32, sat_u64, sat_usize, usize_of};

use anyhow::Context as _;

/// `n` (a count or a size given on the command line) as a usize, or an error naming
/// `what` when it does not fit in memory's indexes.
pub(crate) fn arg_usize(n: u64, what: &str) -> anyhow::Result<usize> {
    usize::try_from(n).with_context(|| format!("{what} {n} is too large"))
}

/// `n` (a short count or size: bars of a chart, a chart's width clamped to its maximum, OSDs
/// clamped to a pool size) as the i32 pixel or size arithmetic needs: each is at most a few
/// thousand, so a value beyond `i32` is a broken invariant.
pub(crate) fn small_i32(n: usize) -> i32 {
    i32::try_from(n).expect("a short count fits in i32")
}

/// `n` as [`small_i32`] bounds it, as a u32.
pub(crate) fn small_u32(n: usize) -> u32 {
    u32::try_from(n).expect("a short count fits in u32")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_saturate_and_counts_convert() {
        assert_eq!(small_i32(3), 3);
        assert_eq!(small_u32(3), 3);
        assert_eq!(arg_usize(7, "--n").unwrap(), 7);
    }
}
