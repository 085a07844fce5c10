//! Checked conversions between the scheduler's quantities: u64 nanoseconds and counts,
//! in-memory indexes (usize), the u32 slot ids its tables and heaps number entries with,
//! and costs and rates computed in floating point.

/// `n` (an index the crate holds in memory: a histogram bucket, a simulation window) as a
/// usize: each is bounded by a table the crate has allocated (a histogram has at most a few
/// thousand buckets, a validated scenario at most `MAX_DURATION_S / 0.001` windows), so a
/// value beyond `usize::MAX` is a broken invariant, not input to handle.
pub(crate) fn usize_of(n: u64) -> usize {
    usize::try_from(n).expect("an index the crate holds in memory fits in usize")
}

/// `n` (a count or position numbered by u32: a heap position, a TBF bucket under
/// `MAX_BUCKETS`, a source of a validated scenario under `MAX_SOURCES`, a histogram
/// exponent) as a u32: each is bounded well below `u32::MAX` where it is made, so a value
/// beyond it is a broken invariant.
pub(crate) fn u32_of(n: usize) -> u32 {
    u32::try_from(n).expect("a u32-numbered count or position fits in u32")
}

/// The low 32 bits of `x`: where the crate keeps a value modulo 2^32 on purpose (a heap's
/// tie-break key).
pub(crate) fn low32(x: u64) -> u32 {
    u32::try_from(x & u64::from(u32::MAX)).expect("masked to 32 bits")
}

/// `x` (nanoseconds or a cost computed in floating point) as a u64, truncated toward zero.
/// The cast saturates by Rust's semantics (negative and NaN to 0, too large to `u64::MAX`),
/// which is intended: a tag or deadline pushed past the end of time stays there.
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
pub(crate) fn sat_u64(x: f64) -> u64 {
    x as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversions_saturate_wrap_and_check() {
        assert_eq!(sat_u64(2.9), 2);
        assert_eq!(sat_u64(-1.0), 0);
        assert_eq!(sat_u64(f64::NAN), 0);
        assert_eq!(sat_u64(1e30), u64::MAX);
        assert_eq!(low32(0x1_0000_0007), 7);
        assert_eq!(u32_of(7), 7);
        assert_eq!(usize_of(7), 7);
    }
}
