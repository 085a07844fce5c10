//! A small, fast, non-cryptographic hasher for integer keys (client ids, bucket keys).
//!
//! Owns only hashing. Keys come from inside the cluster, so HashDoS resistance (SipHash) buys
//! nothing here while costing a large share of an enqueue at 100k clients. Never use it for keys
//! an outside party chooses freely.

use std::hash::{BuildHasherDefault, Hasher};

/// Multiply-rotate hasher (FxHash-style) over the written words.
#[derive(Default, Clone, Copy)]
pub struct FastHasher(u64);

const K: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl Hasher for FastHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut w = [0u8; 8];
            w[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(w));
        }
    }

    fn write_u8(&mut self, i: u8) {
        self.write_u64(i as u64);
    }

    fn write_u32(&mut self, i: u32) {
        self.write_u64(i as u64);
    }

    fn write_u64(&mut self, i: u64) {
        self.0 = (self.0.rotate_left(5) ^ i).wrapping_mul(K);
    }

    fn write_usize(&mut self, i: usize) {
        self.write_u64(i as u64);
    }

    fn finish(&self) -> u64 {
        // Final avalanche so that hashbrown's top bits (control bytes) are well mixed.
        let mut x = self.0;
        x ^= x >> 33;
        x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
        x ^= x >> 33;
        x
    }
}

/// `BuildHasher` for `FastHasher`.
pub type BuildFastHasher = BuildHasherDefault<FastHasher>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use std::hash::BuildHasher;

    #[test]
    fn sequential_keys_spread_over_buckets() {
        let b = BuildFastHasher::default();
        let buckets: HashSet<u64> = (0..10_000u64).map(|k| b.hash_one(k) >> 50).collect();
        // 10,000 random keys in 16,384 buckets fill about 7,490 of them.
        assert!(buckets.len() > 7200, "{}", buckets.len());
    }
}
