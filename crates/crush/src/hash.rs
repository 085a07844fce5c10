//! Robert Jenkins' 32-bit mixing hash as CRUSH uses it (`rjenkins1`, hash id 0).
//!
//! Owns the integer hashes behind every placement decision. Pure arithmetic: all operations wrap
//! modulo 2^32, negative ids are hashed as their two's-complement bit pattern.

const SEED: u32 = 1_315_423_911;
const X0: u32 = 231_232;
const Y0: u32 = 1232;

/// One round of Jenkins' mix; like the C macro it rewrites all three arguments.
#[inline(always)]
fn mix(a: &mut u32, b: &mut u32, c: &mut u32) {
    *a = a.wrapping_sub(*b).wrapping_sub(*c) ^ (*c >> 13);
    *b = b.wrapping_sub(*c).wrapping_sub(*a) ^ (*a << 8);
    *c = c.wrapping_sub(*a).wrapping_sub(*b) ^ (*b >> 13);
    *a = a.wrapping_sub(*b).wrapping_sub(*c) ^ (*c >> 12);
    *b = b.wrapping_sub(*c).wrapping_sub(*a) ^ (*a << 16);
    *c = c.wrapping_sub(*a).wrapping_sub(*b) ^ (*b >> 5);
    *a = a.wrapping_sub(*b).wrapping_sub(*c) ^ (*c >> 3);
    *b = b.wrapping_sub(*c).wrapping_sub(*a) ^ (*a << 10);
    *c = c.wrapping_sub(*a).wrapping_sub(*b) ^ (*b >> 15);
}

/// Hash of two words; used for the pool seed (`pps`) and for partial-reweight `is_out` draws.
#[inline]
pub fn hash32_2(a: u32, b: u32) -> u32 {
    let (mut a, mut b) = (a, b);
    let mut h = SEED ^ a ^ b;
    let (mut x, mut y) = (X0, Y0);
    mix(&mut a, &mut b, &mut h);
    mix(&mut x, &mut a, &mut h);
    mix(&mut b, &mut y, &mut h);
    h
}

/// Hash of three words; used by straw, straw2 and uniform buckets.
#[inline]
pub fn hash32_3(a: u32, b: u32, c: u32) -> u32 {
    let (mut a, mut b, mut c) = (a, b, c);
    let mut h = SEED ^ a ^ b ^ c;
    let (mut x, mut y) = (X0, Y0);
    mix(&mut a, &mut b, &mut h);
    mix(&mut c, &mut x, &mut h);
    mix(&mut y, &mut a, &mut h);
    mix(&mut b, &mut x, &mut h);
    mix(&mut y, &mut c, &mut h);
    h
}

/// Lanes hashed at once by [`hash32_3_lanes`].
pub const LANES: usize = 8;

/// Lane-wise [`mix`] over arrays, written so the compiler turns it into SIMD.
#[inline(always)]
fn mix_lanes(a: &mut [u32; LANES], b: &mut [u32; LANES], c: &mut [u32; LANES]) {
    for i in 0..LANES {
        let (mut x, mut y, mut z) = (a[i], b[i], c[i]);
        mix(&mut x, &mut y, &mut z);
        (a[i], b[i], c[i]) = (x, y, z);
    }
}

/// [`hash32_3`] of `(a, b[i], c)` for every lane `i`: identical results, computed side by side
/// (straw2 hashes every item of a bucket with the same `a` = x and `c` = r). Uses AVX2 when the
/// CPU has it (one 8-lane vector instead of two 4-lane SSE2 vectors).
#[inline]
#[allow(unsafe_code)] // calling the AVX2 version: see the SAFETY note inside.
pub fn hash32_3_lanes(a: u32, b: &[u32; LANES], c: u32) -> [u32; LANES] {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU supports AVX2, checked just above.
            return unsafe { hash32_3_lanes_avx2(a, b, c) };
        }
    }
    hash32_3_lanes_portable(a, b, c)
}

/// [`hash32_3_lanes_portable`] compiled for AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn hash32_3_lanes_avx2(a: u32, b: &[u32; LANES], c: u32) -> [u32; LANES] {
    hash32_3_lanes_portable(a, b, c)
}

/// The lane-wise hash in portable code; the compiler vectorizes it for the enabled features.
#[inline(always)]
fn hash32_3_lanes_portable(a: u32, b: &[u32; LANES], c: u32) -> [u32; LANES] {
    let mut av = [a; LANES];
    let mut bv = *b;
    let mut cv = [c; LANES];
    let mut h = [0u32; LANES];
    for i in 0..LANES {
        h[i] = SEED ^ a ^ b[i] ^ c;
    }
    let mut x = [X0; LANES];
    let mut y = [Y0; LANES];
    mix_lanes(&mut av, &mut bv, &mut h);
    mix_lanes(&mut cv, &mut x, &mut h);
    mix_lanes(&mut y, &mut av, &mut h);
    mix_lanes(&mut bv, &mut x, &mut h);
    mix_lanes(&mut y, &mut cv, &mut h);
    h
}

/// Hash of four words; used by list and tree buckets.
#[inline]
pub fn hash32_4(a: u32, b: u32, c: u32, d: u32) -> u32 {
    let (mut a, mut b, mut c, mut d) = (a, b, c, d);
    let mut h = SEED ^ a ^ b ^ c ^ d;
    let (mut x, mut y) = (X0, Y0);
    mix(&mut a, &mut b, &mut h);
    mix(&mut c, &mut d, &mut h);
    mix(&mut a, &mut x, &mut h);
    mix(&mut y, &mut b, &mut h);
    mix(&mut c, &mut x, &mut h);
    mix(&mut y, &mut d, &mut h);
    h
}

/// The Linux/Ceph string hash (`ceph_str_hash_rjenkins`): object name -> placement seed.
///
/// Processes 12 bytes per round little-endian, then folds the tail with the length.
pub fn str_hash(data: &[u8]) -> u32 {
    let mut a: u32 = 0x9e37_79b9;
    let mut b: u32 = a;
    let mut c: u32 = 0;
    let mut chunks = data.chunks_exact(12);
    for k in &mut chunks {
        a = a.wrapping_add(u32::from_le_bytes([k[0], k[1], k[2], k[3]]));
        b = b.wrapping_add(u32::from_le_bytes([k[4], k[5], k[6], k[7]]));
        c = c.wrapping_add(u32::from_le_bytes([k[8], k[9], k[10], k[11]]));
        mix(&mut a, &mut b, &mut c);
    }
    let k = chunks.remainder();
    // Ceph adds the length as a 32-bit unsigned: its low 32 bits.
    let len = u64::try_from(data.len()).expect("a slice's length fits in u64");
    c = c.wrapping_add(u32::try_from(len & u64::from(u32::MAX)).expect("masked to 32 bits"));
    let byte = |i: usize| u32::from(k[i]);
    let n = k.len();
    if n >= 11 {
        c = c.wrapping_add(byte(10) << 24);
    }
    if n >= 10 {
        c = c.wrapping_add(byte(9) << 16);
    }
    if n >= 9 {
        c = c.wrapping_add(byte(8) << 8);
    }
    if n >= 8 {
        b = b.wrapping_add(byte(7) << 24);
    }
    if n >= 7 {
        b = b.wrapping_add(byte(6) << 16);
    }
    if n >= 6 {
        b = b.wrapping_add(byte(5) << 8);
    }
    if n >= 5 {
        b = b.wrapping_add(byte(4));
    }
    if n >= 4 {
        a = a.wrapping_add(byte(3) << 24);
    }
    if n >= 3 {
        a = a.wrapping_add(byte(2) << 16);
    }
    if n >= 2 {
        a = a.wrapping_add(byte(1) << 8);
    }
    if n >= 1 {
        a = a.wrapping_add(byte(0));
    }
    mix(&mut a, &mut b, &mut c);
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lane_hash_equals_scalar_hash() {
        let b: [u32; LANES] = core::array::from_fn(|i| {
            u32::try_from(i)
                .expect("a lane index is small")
                .wrapping_mul(0x9e37_79b9)
        });
        for (a, c) in [(0u32, 0u32), (17, 3), (0xdead_beef, 0xffff_fff0)] {
            let lanes = hash32_3_lanes(a, &b, c);
            for i in 0..LANES {
                assert_eq!(lanes[i], hash32_3(a, b[i], c));
            }
        }
    }

    #[test]
    fn hashes_are_deterministic_and_spread() {
        assert_eq!(hash32_2(1, 2), hash32_2(1, 2));
        assert_ne!(hash32_2(1, 2), hash32_2(2, 1));
        assert_ne!(hash32_3(0, 0, 0), hash32_3(0, 0, 1));
        assert_ne!(hash32_4(0, 0, 0, 0), hash32_4(0, 0, 0, 1));
        assert_ne!(str_hash(b"foo"), str_hash(b"fop"));
    }
}
