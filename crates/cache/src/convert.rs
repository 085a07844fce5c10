//! Checked conversions between the cache's on-device quantities (u64 bytes and offsets), its
//! in-memory lengths and indexes (usize), the u32 line and sector numbers, and the line
//! counts computed from an allocation share in floating point.

pub(crate) use cairn_convert::usize_of;

/// `n` (a count of lines or a line number) as a u32: a line table has a u32 number of lines
/// ([`crate::layout::Geometry::lines`]), so every count or index of them fits.
pub(crate) fn line_u32(n: usize) -> u32 {
    u32::try_from(n).expect("a count of cache lines fits in u32")
}

/// `n` (a sector number or count within one line) as a u32: lines are at most 64 KiB, so
/// there are at most 16 sectors of [`crate::layout::SECTOR_BYTES`] in one.
pub(crate) fn sector_u32(n: u64) -> u32 {
    u32::try_from(n).expect("a line has at most 16 sectors")
}

/// The number of lines `share` of `lines` makes, truncated toward zero. The cast saturates
/// by Rust's semantics (negative and NaN to 0, too large to `u32::MAX`), which is intended:
/// a share is a fraction in [0, 1], and a limit is never more than the lines there are.
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
pub(crate) fn share_of(share: f64, lines: u32) -> u32 {
    (share * f64::from(lines)) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_saturate_and_counts_convert() {
        assert_eq!(share_of(0.5, 7), 3);
        assert_eq!(share_of(-1.0, 7), 0);
        assert_eq!(share_of(f64::NAN, 7), 0);
        assert_eq!(share_of(1e12, u32::MAX), u32::MAX);
        assert_eq!(line_u32(3), 3);
        assert_eq!(sector_u32(16), 16);
    }
}
