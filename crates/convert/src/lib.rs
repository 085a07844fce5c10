//! Number conversions shared by the workspace, so that no crate writes a bare narrowing `as`.
//!
//! Two kinds, named by what happens at the edge of the target type:
//! - `*_of`: a size or count that must fit (a length held in memory); a value that does not is
//!   a broken invariant, and the conversion panics rather than truncate silently.
//! - `sat_*`, [`nanos`], [`millis`]: a measurement or an estimate (a rate times a time, a
//!   duration); it saturates at the target's bounds, and NaN becomes 0, which is what a
//!   counter, a budget or a delay wants.
//!
//! Conversions that meet an on-disk or wire format stay in the crate that owns the format,
//! next to the bound they rely on.

#![deny(clippy::cast_possible_truncation)]

use std::time::Duration;

/// `n` as a `usize`: a size or index of something held in memory, which fits on every target
/// the workspace builds for (64-bit). Panics where it does not, instead of truncating.
pub fn usize_of(n: u64) -> usize {
    usize::try_from(n).expect("a size held in memory fits in usize")
}

/// `x` as a `u64`, saturating: negative and NaN give 0, beyond `u64::MAX` gives `u64::MAX`,
/// fractions are dropped.
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
pub fn sat_u64(x: f64) -> u64 {
    x as u64
}

/// `x` as a `usize`, saturating as [`sat_u64`].
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
pub fn sat_usize(x: f64) -> usize {
    x as usize
}

/// `x` as a `u32`, saturating as [`sat_u64`].
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
pub fn sat_u32(x: f64) -> u32 {
    x as u32
}

/// `x` as an `i32`, saturating at both bounds; NaN gives 0.
#[allow(clippy::cast_possible_truncation)]
pub fn sat_i32(x: f64) -> i32 {
    x as i32
}

/// `d` in whole nanoseconds, saturating at `u64::MAX` (about 584 years).
pub fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// `d` in whole milliseconds, saturating at `u64::MAX`.
pub fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measurements_saturate_at_both_ends_and_nan_is_zero() {
        assert_eq!(sat_u64(2.9), 2);
        assert_eq!(sat_u64(-1.0), 0);
        assert_eq!(sat_u64(f64::NAN), 0);
        assert_eq!(sat_u64(1e30), u64::MAX);
        assert_eq!(sat_usize(7.5), 7);
        assert_eq!(sat_usize(1e30), usize::MAX);
        assert_eq!(sat_u32(65_536.4), 65_536);
        assert_eq!(sat_u32(1e20), u32::MAX);
        assert_eq!(sat_i32(-1e30), i32::MIN);
        assert_eq!(sat_i32(f64::NAN), 0);
    }

    #[test]
    fn durations_keep_their_value_until_they_saturate() {
        assert_eq!(nanos(Duration::from_micros(3)), 3_000);
        assert_eq!(nanos(Duration::MAX), u64::MAX);
        assert_eq!(millis(Duration::from_millis(1_500)), 1_500);
        assert_eq!(millis(Duration::MAX), u64::MAX);
    }

    #[test]
    fn sizes_convert_unchanged() {
        assert_eq!(usize_of(4096), 4096);
        assert_eq!(usize_of(u64::from(u32::MAX)), 4_294_967_295);
    }
}
