//! crc32c per fixed-size block of a data segment, and the whole segment's crc32c composed from
//! them.
//!
//! Owns checksumming a large data segment once, as it arrives, in a form both the messenger
//! (which checks the segment's crc32c) and a store (which keeps a crc32c per 4 KiB block) can
//! use, so the bytes are not read a second time. It must compose exactly the crc32c the whole
//! segment has; the tests compare against a one-pass crc32c.

// A narrowing cast in a byte format would silently write a wrong length: conversions here
// are checked (`try_from`).
#![deny(clippy::cast_possible_truncation)]

use std::sync::{Arc, OnceLock};

/// Bytes per checksummed block: the store's block, direct I/O's alignment.
pub const CRC_BLOCK_BYTES: usize = 4096;

/// crc32c(A ‖ B) from crc32c(A), crc32c(B) and the length of B.
fn crc32c_combine(crc_a: u32, crc_b: u32, len_b: usize) -> u32 {
    let combined = crc_fast::checksum_combine(
        crc_fast::CrcAlgorithm::Crc32Iscsi,
        u64::from(crc_a),
        u64::from(crc_b),
        len_b as u64,
    );
    u32::try_from(combined).expect("a crc32c register holds 32 bits")
}

/// crc32c(A ‖ `bytes`) from crc32c(A): the checksum resumed from A's register (crc32c's final
/// xor undone) over `bytes`, one pass and no combining (crc-fast's combine is a GF(2) matrix
/// power, ~4% of a client's CPU on 4 MiB reads when it ran once per socket read).
fn crc32c_append(crc_a: u32, bytes: &[u8]) -> u32 {
    if bytes.is_empty() {
        return crc_a;
    }
    let mut digest = crc_fast::Digest::new_with_init_state(
        crc_fast::CrcAlgorithm::Crc32Iscsi,
        u64::from(!crc_a),
    );
    digest.update(bytes);
    u32::try_from(digest.finalize()).expect("a crc32c register holds 32 bits")
}

/// Lookup tables applying the linear map "append `CRC_BLOCK_BYTES` bytes" to a crc32c, one table
/// per byte of the crc (so composing costs four lookups per block, not a pass over the bytes).
struct ShiftTables([[u32; 256]; 4]);

impl ShiftTables {
    fn get() -> &'static ShiftTables {
        static TABLES: OnceLock<ShiftTables> = OnceLock::new();
        TABLES.get_or_init(|| {
            // combine(a, 0, n) is linear in `a`: the image of each bit spans the whole map.
            let bit_images: Vec<u32> = (0..32)
                .map(|bit| crc32c_combine(1 << bit, 0, CRC_BLOCK_BYTES))
                .collect();
            let mut tables = [[0u32; 256]; 4];
            for (byte, table) in tables.iter_mut().enumerate() {
                for (value, slot) in table.iter_mut().enumerate() {
                    *slot = (0..8)
                        .filter(|b| value & (1 << b) != 0)
                        .fold(0, |acc, b| acc ^ bit_images[byte * 8 + b]);
                }
            }
            ShiftTables(tables)
        })
    }

    /// crc32c(A ‖ B) from crc32c(A) and crc32c(B) for a B of exactly `CRC_BLOCK_BYTES`.
    fn extend(&self, crc_a: u32, crc_b: u32) -> u32 {
        let t = &self.0;
        let [b0, b1, b2, b3] = crc_a.to_le_bytes();
        t[0][b0 as usize] ^ t[1][b1 as usize] ^ t[2][b2 as usize] ^ t[3][b3 as usize] ^ crc_b
    }
}

/// crc32c of `len` bytes whose blocks of `CRC_BLOCK_BYTES` have the crc32c values `blocks` (the
/// last block may be short: `len` says how long). `None` when `blocks` does not fit `len`.
pub fn compose(blocks: &[u32], len: usize) -> Option<u32> {
    if blocks.len() != len.div_ceil(CRC_BLOCK_BYTES) {
        return None;
    }
    let Some((&last, full)) = blocks.split_last() else {
        return Some(0);
    };
    let tables = ShiftTables::get();
    let mut rest = full.iter();
    let head = rest
        .next()
        .map(|&first| rest.fold(first, |acc, &c| tables.extend(acc, c)));
    let last_len = len - full.len() * CRC_BLOCK_BYTES;
    Some(match head {
        None => last,
        Some(h) if last_len == CRC_BLOCK_BYTES => tables.extend(h, last),
        Some(h) => crc32c_combine(h, last, last_len),
    })
}

/// crc32c of `bytes` when the crc32c of its first `known.len()` blocks of `CRC_BLOCK_BYTES` are
/// already known (a store just verified them): those blocks are not read again, the rest is.
/// With more known blocks than `bytes` holds, every byte is read.
pub fn crc_with_known_blocks(bytes: &[u8], known: &[u32]) -> u32 {
    let head_len = known.len() * CRC_BLOCK_BYTES;
    match compose(known, head_len) {
        Some(head) if head_len <= bytes.len() => crc32c_append(head, &bytes[head_len..]),
        _ => crc_fast::crc32_iscsi(bytes),
    }
}

/// Checksums bytes that arrive in pieces of any size, block by block.
#[derive(Debug, Default)]
pub struct BlockCrcs {
    done: Vec<u32>,
    current: u32,
    current_len: usize,
    total_len: usize,
}

impl BlockCrcs {
    /// An accumulator expecting about `len` bytes (it reserves room for their blocks).
    pub fn with_capacity(len: usize) -> Self {
        BlockCrcs {
            done: Vec::with_capacity(len.div_ceil(CRC_BLOCK_BYTES)),
            ..Self::default()
        }
    }

    /// Checksums the next `bytes` of the stream.
    pub fn append(&mut self, mut bytes: &[u8]) {
        self.total_len += bytes.len();
        while !bytes.is_empty() {
            let n = (CRC_BLOCK_BYTES - self.current_len).min(bytes.len());
            self.current = if self.current_len == 0 {
                crc_fast::crc32_iscsi(&bytes[..n])
            } else {
                crc32c_append(self.current, &bytes[..n])
            };
            self.current_len += n;
            bytes = &bytes[n..];
            if self.current_len == CRC_BLOCK_BYTES {
                self.done.push(self.current);
                self.current = 0;
                self.current_len = 0;
            }
        }
    }

    /// The whole stream's crc32c and each block's (the last one short when the length is not a
    /// multiple of `CRC_BLOCK_BYTES`).
    pub fn finish(mut self) -> (u32, Arc<[u32]>) {
        if self.current_len > 0 {
            self.done.push(self.current);
        }
        let whole = compose(&self.done, self.total_len).unwrap_or(0);
        (whole, self.done.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn bytes(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| i.to_le_bytes()[0].wrapping_mul(31).wrapping_add(seed))
            .collect()
    }

    #[test]
    fn composes_the_one_pass_crc_at_block_edges() {
        for len in [0, 1, 4095, 4096, 4097, 8192, 3 * 4096 + 7, 1 << 20] {
            let data = bytes(len, 7);
            let mut acc = BlockCrcs::with_capacity(len);
            acc.append(&data);
            let (whole, blocks) = acc.finish();
            assert_eq!(whole, crc_fast::crc32_iscsi(&data), "len {len}");
            assert_eq!(blocks.len(), len.div_ceil(CRC_BLOCK_BYTES));
            for (i, chunk) in data.chunks(CRC_BLOCK_BYTES).enumerate() {
                assert_eq!(
                    blocks[i],
                    crc_fast::crc32_iscsi(chunk),
                    "len {len} block {i}"
                );
            }
        }
    }

    #[test]
    fn the_checksum_is_crc32c_castagnoli() {
        // RFC 3720 (iSCSI) B.4 vectors and the catalogue's check value: stores, caches and maps
        // written by any earlier build keep their checksums.
        assert_eq!(crc_fast::crc32_iscsi(b"123456789"), 0xe306_9283);
        assert_eq!(crc_fast::crc32_iscsi(&[0u8; 32]), 0x8a91_36aa);
        assert_eq!(crc_fast::crc32_iscsi(&[0xffu8; 32]), 0x62a8_ab43);
        let ascending: Vec<u8> = (0u8..32).collect();
        assert_eq!(crc_fast::crc32_iscsi(&ascending), 0x46dd_794e);
        let (a, b) = b"123456789".split_at(4);
        assert_eq!(crc32c_append(crc_fast::crc32_iscsi(a), b), 0xe306_9283);
        assert_eq!(crc32c_append(0xe306_9283, b""), 0xe306_9283);
    }

    #[test]
    fn compose_refuses_a_block_count_that_does_not_fit() {
        assert_eq!(compose(&[1, 2], 4096), None);
        assert_eq!(compose(&[], 1), None);
        assert_eq!(compose(&[], 0), Some(0));
    }

    #[test]
    fn known_leading_blocks_and_a_computed_rest_give_the_one_pass_crc() {
        let data = bytes(5 * CRC_BLOCK_BYTES + 123, 9);
        let blocks: Vec<u32> = data
            .chunks(CRC_BLOCK_BYTES)
            .map(crc_fast::crc32_iscsi)
            .collect();
        for known in 0..=5 {
            assert_eq!(
                crc_with_known_blocks(&data, &blocks[..known]),
                crc_fast::crc32_iscsi(&data),
                "{known} known"
            );
        }
        let short = &data[..2 * CRC_BLOCK_BYTES];
        assert_eq!(
            crc_with_known_blocks(short, &blocks[..5]),
            crc_fast::crc32_iscsi(short),
            "more known blocks than bytes: everything is read"
        );
    }

    proptest! {
        #[test]
        fn any_split_gives_the_one_pass_crc(
            len in 0usize..40_000,
            seed in any::<u8>(),
            cuts in proptest::collection::vec(1usize..9000, 0..12),
        ) {
            let data = bytes(len, seed);
            let mut acc = BlockCrcs::with_capacity(len);
            let mut at = 0;
            for c in cuts {
                let end = (at + c).min(len);
                acc.append(&data[at..end]);
                at = end;
            }
            acc.append(&data[at..]);
            let (whole, blocks) = acc.finish();
            prop_assert_eq!(whole, crc_fast::crc32_iscsi(&data));
            let expected: Vec<u32> = data.chunks(CRC_BLOCK_BYTES).map(crc_fast::crc32_iscsi).collect();
            prop_assert_eq!(&blocks[..], &expected[..]);
        }
    }
}
