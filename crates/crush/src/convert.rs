//! Checked conversions between the map's in-memory counts and positions (usize) and the
//! 32-bit integers CRUSH computes with, and of 16.16 weights computed in floating point.

/// Most items one bucket may hold: Ceph keeps a bucket's size in a `u32` and indexes its
/// items with `int`, so [`crate::Bucket::new`] refuses more than fit an `i32`.
pub(crate) const MAX_BUCKET_ITEMS: usize = i32::MAX as usize;

/// Most output slots one mapping fills: Ceph's `result_max` is an `int`, and
/// [`crate::CrushMap::do_rule`] caps the count asked for at it.
pub(crate) const MAX_RESULT: usize = i32::MAX as usize;

/// `n`, a position in or a count of a mapping's output, or a bucket's size, as an `i32`:
/// positions and counts stay below the output's length, at most [`MAX_RESULT`], and bucket
/// sizes are at most [`MAX_BUCKET_ITEMS`], so a value beyond `i32` is a broken invariant.
pub(crate) fn i32_of(n: usize) -> i32 {
    i32::try_from(n).expect("mapping positions and bucket sizes fit in i32")
}

/// `n`, a bucket's size or an index of one of its items, as a `u32`: bucket sizes are at
/// most [`MAX_BUCKET_ITEMS`], so a value beyond `u32` is a broken invariant.
pub(crate) fn u32_of(n: usize) -> u32 {
    u32::try_from(n).expect("bucket sizes fit in u32")
}

/// `x` (a 16.16 fixed-point quantity computed in floating point) as a `u32`, truncated
/// toward zero. The cast saturates by Rust's semantics (negative and NaN to 0, too large to
/// `u32::MAX`), which is intended: it is how these weights have always been read.
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
pub(crate) fn fixed_u32(x: f64) -> u32 {
    x as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_point_saturates_and_counts_convert() {
        assert_eq!(fixed_u32(65536.9), 65536);
        assert_eq!(fixed_u32(-1.0), 0);
        assert_eq!(fixed_u32(f64::NAN), 0);
        assert_eq!(fixed_u32(1e20), u32::MAX);
        assert_eq!(i32_of(MAX_RESULT), i32::MAX);
        assert_eq!(u32_of(MAX_BUCKET_ITEMS), 0x7fff_ffff);
    }
}
