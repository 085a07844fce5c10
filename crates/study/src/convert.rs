//! Conversions of the studies' floating-point figures (ranks, seconds) into counts and
//! indexes.

/// `x` (a rank or a count of seconds computed in floating point) as a usize, truncated
/// toward zero. The cast saturates by Rust's semantics (negative and NaN to 0, too large to
/// `usize::MAX`), which is intended: callers clamp or bound-check the index it gives.
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
pub(crate) fn sat_usize(x: f64) -> usize {
    x as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncates_and_saturates() {
        assert_eq!(sat_usize(2.9), 2);
        assert_eq!(sat_usize(-1.0), 0);
        assert_eq!(sat_usize(f64::NAN), 0);
        assert_eq!(sat_usize(1e30), usize::MAX);
    }
}
