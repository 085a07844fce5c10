//! Checked conversions between the devices' quantities (u64 bytes and offsets, as I/O
//! requests carry them) and in-memory lengths and indexes (usize), and of the timing models'
//! floating-point nanoseconds into integers.

/// `n` (bytes, an offset or an index the device holds in memory: a checked I/O's offset
/// into a memory device, a buffer's length, an alignment) as a usize: each is bounded by
/// memory the device or its caller has allocated, far below `usize::MAX` on the 64-bit
/// targets cairn runs on, so a value beyond it is a broken invariant, not input to handle.
pub(crate) fn usize_of(n: u64) -> usize {
    usize::try_from(n).expect("a quantity the device holds in memory fits in usize")
}

/// `x` (nanoseconds computed in floating point) as a u64, truncated toward zero. The cast
/// saturates by Rust's semantics (negative and NaN to 0, too large to `u64::MAX`), which is
/// intended: a completion pushed past the end of time stays there.
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
pub(crate) fn sat_u64(x: f64) -> u64 {
    x as u64
}

/// `x` (a rank computed in floating point) as a usize, truncated toward zero. The cast
/// saturates by Rust's semantics (negative and NaN to 0, too large to `usize::MAX`), which
/// is intended: callers bound-check the index it gives.
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
pub(crate) fn sat_usize(x: f64) -> usize {
    x as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_saturate_and_sizes_convert() {
        assert_eq!(sat_u64(2.9), 2);
        assert_eq!(sat_u64(-1.0), 0);
        assert_eq!(sat_u64(f64::NAN), 0);
        assert_eq!(sat_u64(1e30), u64::MAX);
        assert_eq!(sat_usize(1e30), usize::MAX);
        assert_eq!(usize_of(4096), 4096);
    }
}
