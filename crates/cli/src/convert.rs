//! Checked conversions of the command line's numbers (u64 counts and sizes) into in-memory
//! lengths (usize), and of floating-point figures (ranks, rates, pixels, fixed-point
//! weights) into integers.

use anyhow::Context as _;

/// `n` (a count or a size given on the command line) as a usize, or an error naming
/// `what` when it does not fit in memory's indexes.
pub(crate) fn arg_usize(n: u64, what: &str) -> anyhow::Result<usize> {
    usize::try_from(n).with_context(|| format!("{what} {n} is too large"))
}

/// `n` (a quantity the command holds in memory: a block size, a second of a timeline, an
/// index below a count it has) as a usize: each is bounded by memory the command already
/// holds or by a count that is itself a usize, so a value beyond it is a broken invariant.
pub(crate) fn usize_of(n: u64) -> usize {
    usize::try_from(n).expect("a quantity the command holds in memory fits in usize")
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

/// `x` (a rank or a count of seconds computed in floating point) as a usize, truncated
/// toward zero. The cast saturates by Rust's semantics (negative and NaN to 0, too large to
/// `usize::MAX`), which is intended: callers clamp or bound-check the index it gives.
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
pub(crate) fn sat_usize(x: f64) -> usize {
    x as usize
}

/// `x` (a rate, a byte count or milliseconds computed in floating point) as a u64,
/// truncated toward zero. The cast saturates by Rust's semantics (negative and NaN to 0,
/// too large to `u64::MAX`), which is intended.
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
pub(crate) fn sat_u64(x: f64) -> u64 {
    x as u64
}

/// `x` (a 16.16 fixed-point weight computed in floating point) as a u32, truncated toward
/// zero. The cast saturates by Rust's semantics (negative and NaN to 0, too large to
/// `u32::MAX`), which is intended: callers check or clamp the weight first.
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
pub(crate) fn sat_u32(x: f64) -> u32 {
    x as u32
}

/// `x` (a pixel offset computed in floating point) as an i32, truncated toward zero. The
/// cast saturates by Rust's semantics (NaN to 0, out of range to the nearer bound), which is
/// intended: a point off the chart stays off it.
#[allow(clippy::cast_possible_truncation)]
pub(crate) fn sat_i32(x: f64) -> i32 {
    x as i32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_saturate_and_counts_convert() {
        assert_eq!(sat_usize(2.9), 2);
        assert_eq!(sat_usize(-1.0), 0);
        assert_eq!(sat_u64(f64::NAN), 0);
        assert_eq!(sat_u64(1e30), u64::MAX);
        assert_eq!(sat_u32(65536.4), 65536);
        assert_eq!(sat_i32(-1e30), i32::MIN);
        assert_eq!(small_i32(3), 3);
        assert_eq!(small_u32(3), 3);
        assert_eq!(usize_of(4096), 4096);
        assert_eq!(arg_usize(7, "--n").unwrap(), 7);
    }
}
