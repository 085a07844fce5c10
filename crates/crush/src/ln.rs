//! `crush_ln`: a fixed-point 2^44 * log2(u + 1) that straw2 buckets draw with.
//!
//! Table-driven exactly like Ceph's so that draws, and therefore mappings, agree bit for bit.
//! Owns no state; never uses floating point.

use crate::ln_table::{LL, RH_LH};

/// Returns approximately `2^44 * log2(u + 1)` for `u` in `0..=0xffff`.
#[inline]
pub fn crush_ln(u: u32) -> u64 {
    let mut x: u32 = u + 1;
    let mut exponent: i64 = 15;
    if x & 0x18000 == 0 {
        let bits = (x & 0x1ffff).leading_zeros() as i64 - 16;
        x <<= bits;
        exponent = 15 - bits;
    }
    let index1 = ((x >> 8) << 1) as usize;
    let rh = RH_LH[index1 - 256] as u64;
    let lh = RH_LH[index1 + 1 - 256] as u64;
    let xl64 = (u64::from(x).wrapping_mul(rh)) >> 48;
    let result = (exponent as u64) << 44;
    let index2 = (xl64 & 0xff) as usize;
    let lh = (lh.wrapping_add(LL[index2] as u64)) >> 4;
    result.wrapping_add(lh)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ln_is_close_to_log2_and_quirky_at_the_top() {
        for u in [1u32, 2, 100, 1000, 30000, 65000] {
            let exact = ((u as f64) + 1.0).log2() * (1u64 << 44) as f64;
            let got = crush_ln(u) as f64;
            assert!(
                (got - exact).abs() / exact < 1e-4,
                "u={u} got={got} exact={exact}"
            );
        }
        assert!(crush_ln(0xffff) < crush_ln(0xfffe));
    }

    #[test]
    fn ln_never_exceeds_2_pow_48_so_straw2_draws_are_never_positive() {
        assert!((0..=0xffffu32).all(|u| crush_ln(u) <= 1 << 48));
    }
}
