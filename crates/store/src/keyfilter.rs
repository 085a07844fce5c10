//! A filter over the onode keys in the KV, so that looking up an object that does not exist
//! (every new object a write creates) usually ends in memory instead of in redb's B-tree search
//! (about 6% of an OSD's CPU under 4 KiB writes of new objects).
//!
//! A blocked Bloom filter: each key sets [`PROBES`] bits in one 512-bit block (one cache line).
//! Owns one invariant: every key the KV's onode table holds, in any snapshot, is in the filter
//! (keys are added at mount for what the KV holds, and before any checkpoint commits new ones),
//! so "absent" is always right; "maybe present" is wrong for about 1% of absent keys while the
//! filter holds no more than the keys it was sized for, and more often beyond (then the lookup
//! goes to redb, as without the filter). Keys removed from the KV stay in it until the next
//! mount rebuilds it. Thread-safe: the background checkpoint adds keys while staging reads.

use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};

use cairn_convert::usize_of;

/// Filter bits per key it is sized for (about 1% false positives at that load).
pub(crate) const BITS_PER_KEY: u64 = 10;
/// Fewest keys a filter is sized for (1.25 MiB of bits).
pub(crate) const MIN_KEYS: u64 = 1 << 20;
/// Most memory a filter takes (explicit limit): 64 MiB of bits, about 53 million keys at
/// [`BITS_PER_KEY`]; a store with more objects gets more false positives, not more memory.
pub(crate) const MAX_BYTES: u64 = 64 << 20;
/// Bits each key sets in its block.
const PROBES: u32 = 6;
/// Words (64 bits) per block: one 64-byte cache line.
const BLOCK_WORDS: usize = 8;
/// Fixed seed of the key hash (the filter is rebuilt at every mount, never persisted).
const SEED: u64 = 0x6361_6972_6e5f_6b66;

/// The filter (see the module's documentation).
pub(crate) struct KeyFilter {
    words: Box<[AtomicU64]>,
    blocks: u64,
    hasher: foldhash::fast::FixedState,
}

impl std::fmt::Debug for KeyFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyFilter")
            .field("bytes", &(self.words.len() * 8))
            .finish()
    }
}

impl KeyFilter {
    /// An empty filter sized for `keys` keys (at least [`MIN_KEYS`], at most [`MAX_BYTES`]).
    pub(crate) fn with_capacity(keys: u64) -> Self {
        let bits = keys
            .max(MIN_KEYS)
            .saturating_mul(BITS_PER_KEY)
            .min(MAX_BYTES * 8);
        let blocks = bits.div_ceil(BLOCK_WORDS as u64 * 64).max(1);
        let words = (0..blocks as usize * BLOCK_WORDS)
            .map(|_| AtomicU64::new(0))
            .collect();
        Self {
            words,
            blocks,
            hasher: foldhash::fast::FixedState::with_seed(SEED),
        }
    }

    /// The words and bits of `key`'s probes, all in one block.
    fn probes(&self, key: &[u8]) -> impl Iterator<Item = (usize, u64)> {
        let h = self.hasher.hash_one(key);
        // The high half of h * blocks: below `blocks` (Lemire's range reduction).
        let block = usize_of(
            u64::try_from((u128::from(h) * u128::from(self.blocks)) >> 64)
                .expect("the high half of a u64 product"),
        );
        let mut bits = h.wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(17) ^ h;
        let first = block * BLOCK_WORDS;
        (0..PROBES).map(move |_| {
            let bit = (bits & 511) as usize;
            bits >>= 9;
            (first + bit / 64, 1u64 << (bit % 64))
        })
    }

    /// Adds `key`.
    pub(crate) fn insert(&self, key: &[u8]) {
        for (word, mask) in self.probes(key) {
            self.words[word].fetch_or(mask, Ordering::Relaxed);
        }
    }

    /// Whether `key` may have been added; `false` proves it was not.
    pub(crate) fn may_contain(&self, key: &[u8]) -> bool {
        self.probes(key)
            .all(|(word, mask)| self.words[word].load(Ordering::Relaxed) & mask != 0)
    }

    /// Memory its bits take, bytes.
    #[cfg(test)]
    pub(crate) fn bytes(&self) -> u64 {
        self.words.len() as u64 * 8
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn key(i: u64) -> Vec<u8> {
        let mut k = vec![0, 0, 0, 7];
        k.extend_from_slice(format!("benchmark_data_host_4242_object{i}").as_bytes());
        k
    }

    #[test]
    fn every_added_key_is_found_and_few_others_are() {
        let f = KeyFilter::with_capacity(MIN_KEYS);
        for i in 0..MIN_KEYS {
            f.insert(&key(i));
        }
        assert!((0..MIN_KEYS).all(|i| f.may_contain(&key(i))));
        let trials = 200_000;
        let false_positives = (MIN_KEYS..MIN_KEYS + trials)
            .filter(|i| f.may_contain(&key(*i)))
            .count();
        let rate = false_positives as f64 / trials as f64;
        assert!(rate < 0.03, "false positive rate {rate} at the sized load");
    }

    #[test]
    fn an_empty_filter_contains_nothing_and_sizes_stay_in_their_limits() {
        let f = KeyFilter::with_capacity(0);
        assert!(!(0..10_000).any(|i| f.may_contain(&key(i))));
        assert_eq!(f.bytes(), MIN_KEYS * BITS_PER_KEY / 8);
        assert_eq!(KeyFilter::with_capacity(u64::MAX).bytes(), MAX_BYTES);
    }

    proptest! {
        #[test]
        fn added_keys_are_never_reported_absent(keys in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..64), 1..200)) {
            let f = KeyFilter::with_capacity(0);
            for k in &keys {
                f.insert(k);
            }
            for k in &keys {
                prop_assert!(f.may_contain(k));
            }
        }
    }
}
