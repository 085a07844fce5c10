//! Checked conversions between the scheduler's quantities: u64 nanoseconds and counts,
//! in-memory indexes (usize), the u32 slot ids its tables and heaps number entries with,
//! and costs and rates computed in floating point.

pub(crate) use cairn_convert::{sat_u64, usize_of};

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversions_saturate_wrap_and_check() {
        assert_eq!(low32(0x1_0000_0007), 7);
        assert_eq!(u32_of(7), 7);
    }
}
