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
    c = c.wrapping_add(data.len() as u32);
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
    fn hashes_are_deterministic_and_spread() {
        assert_eq!(hash32_2(1, 2), hash32_2(1, 2));
        assert_ne!(hash32_2(1, 2), hash32_2(2, 1));
        assert_ne!(hash32_3(0, 0, 0), hash32_3(0, 0, 1));
        assert_ne!(hash32_4(0, 0, 0, 0), hash32_4(0, 0, 0, 1));
        assert_ne!(str_hash(b"foo"), str_hash(b"fop"));
    }
}
