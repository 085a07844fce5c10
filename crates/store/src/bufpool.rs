//! The store's I/O buffers: copy-on-write runs and read windows, reused through a bounded pool
//! instead of paying fresh pages (faults and zeroing) on every transaction or read.
//!
//! Owns building a buffer from parts (one copy) and handing out buffers for device reads (lent
//! as `Bytes` that come back when dropped); the pooling is [`AlignedPool`]'s. It must never hand
//! out a built buffer whose every byte was not just written from the caller's parts.

use crate::error::{Result, StoreError};
use cairn_blockdev::{AlignedBuf, AlignedPool};
use std::sync::Arc;

/// Alignment of the buffers handed to the device (`O_DIRECT`-safe on 512e and 4Kn devices).
pub(crate) const IO_ALIGN_BYTES: usize = 4096;

/// The bytes of a copy-on-write run: a buffer of the store's own, or the caller's bytes
/// themselves when they were already aligned for direct I/O (no copy at all).
#[derive(Debug)]
pub(crate) enum RunBuf {
    /// Copied into a (pooled) aligned buffer.
    Owned(AlignedBuf),
    /// The caller's immutable bytes, starting on an [`IO_ALIGN_BYTES`] boundary.
    Shared(bytes::Bytes),
}

impl RunBuf {
    /// The run's bytes.
    pub(crate) fn as_slice(&self) -> &[u8] {
        match self {
            RunBuf::Owned(b) => b.as_slice(),
            RunBuf::Shared(b) => b,
        }
    }

    /// Length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.as_slice().len()
    }

    /// Bytes `start..end` as a run of their own (shared bytes are sliced, owned ones copied);
    /// `None` for an empty or out-of-bounds range, or when no buffer can be had.
    pub(crate) fn piece(&self, start: usize, end: usize) -> Option<RunBuf> {
        if start >= end || end > self.len() {
            return None;
        }
        match self {
            RunBuf::Owned(b) => {
                AlignedBuf::from_parts(&[&b.as_slice()[start..end]], IO_ALIGN_BYTES)
                    .map(RunBuf::Owned)
            }
            RunBuf::Shared(b) => Some(RunBuf::Shared(b.slice(start..end))),
        }
    }

    /// The run's bytes, mutably: shared bytes are first copied into a buffer of the store's.
    pub(crate) fn make_mut(&mut self, pool: &BufPool) -> Result<&mut [u8]> {
        match self {
            RunBuf::Owned(b) => Ok(b.as_mut_slice()),
            RunBuf::Shared(b) => {
                let owned = pool.build(&[b])?;
                *self = RunBuf::Owned(owned);
                self.make_mut(pool)
            }
        }
    }
}

/// The store's aligned buffers: built from parts for writes, taken whole for reads, reused
/// through a bounded [`AlignedPool`]. Clones share the pool.
#[derive(Debug, Clone)]
pub(crate) struct BufPool {
    pool: Arc<AlignedPool>,
}

impl BufPool {
    /// An empty pool keeping at most `max_bytes` of free buffers.
    pub(crate) fn new(max_bytes: usize) -> Self {
        Self {
            pool: Arc::new(AlignedPool::new(max_bytes, IO_ALIGN_BYTES)),
        }
    }

    /// A buffer holding the concatenation of `parts` (reused when a free one has that length).
    pub(crate) fn build(&self, parts: &[&[u8]]) -> Result<AlignedBuf> {
        self.build_blockwise(parts, usize::MAX, |_| {})
    }

    /// Like [`BufPool::build`], with the crc32c of every `block_bytes` of the buffer, each
    /// computed right after its block is copied (no second pass through memory).
    pub(crate) fn build_checksummed(
        &self,
        parts: &[&[u8]],
        block_bytes: usize,
    ) -> Result<(AlignedBuf, Vec<u32>)> {
        let mut crcs = Vec::new();
        let buf = self.build_blockwise(parts, block_bytes, |blk| {
            crcs.push(crc_fast::crc32_iscsi(blk))
        })?;
        Ok((buf, crcs))
    }

    /// Builds the buffer (a free one of the right length, or a new one), calling `each_block`
    /// with every `block_bytes` of it right after they are copied.
    fn build_blockwise(
        &self,
        parts: &[&[u8]],
        block_bytes: usize,
        mut each_block: impl FnMut(&[u8]),
    ) -> Result<AlignedBuf> {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        match self.pool.reuse(len) {
            Some(mut buf) => {
                buf.fill_blockwise(parts, block_bytes, &mut each_block);
                Ok(buf)
            }
            None => {
                AlignedBuf::from_parts_blockwise(parts, IO_ALIGN_BYTES, block_bytes, each_block)
                    .ok_or_else(|| too_big(len))
            }
        }
    }

    /// A buffer of `len` bytes with unspecified contents, for a device read that overwrites
    /// every byte (reused when a free one has that length).
    pub(crate) fn take(&self, len: usize) -> Result<AlignedBuf> {
        self.pool.take(len).ok_or_else(|| too_big(len))
    }

    /// `buf` as `Bytes`; the buffer comes back to the pool when the last of them is dropped.
    pub(crate) fn lend(&self, buf: AlignedBuf) -> bytes::Bytes {
        self.pool.lend(buf)
    }

    /// Bytes of free buffers held for reuse.
    pub(crate) fn free_bytes(&self) -> usize {
        self.pool.free_bytes()
    }

    /// Returns a buffer for reuse (dropped when the pool is full).
    pub(crate) fn put(&self, buf: AlignedBuf) {
        self.pool.put(buf);
    }
}

fn too_big(len: usize) -> StoreError {
    StoreError::Limit(format!("cannot allocate a {len}-byte buffer"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reuses_buffers_of_the_same_length_within_budget() {
        let pool = BufPool::new(8192);
        let a = pool.build(&[&[1u8; 4000], &[2u8; 96]]).unwrap();
        assert_eq!(a.len(), 4096);
        let ptr = a.as_slice().as_ptr();
        pool.put(a);
        let b = pool.build(&[&[3u8; 4096]]).unwrap();
        assert_eq!(b.as_slice().as_ptr(), ptr, "reused");
        assert!(b.as_slice().iter().all(|&x| x == 3), "every byte rewritten");
        pool.put(b);
        let (c, crcs) = pool
            .build_checksummed(&[&[5u8; 4096], &[6u8; 4096]], 4096)
            .unwrap();
        assert_eq!(
            crcs,
            [
                crc_fast::crc32_iscsi(&[5u8; 4096]),
                crc_fast::crc32_iscsi(&[6u8; 4096])
            ]
        );
        assert!(c.as_slice()[4096..].iter().all(|&x| x == 6));
        pool.put(c);
        let (d, _) = pool.build_checksummed(&[&[9u8; 8192]], 4096).unwrap();
        assert!(
            d.as_slice().iter().all(|&x| x == 9),
            "a reused buffer is rewritten"
        );
        pool.put(d);
        pool.put(pool.build(&[&[0u8; 8192]]).unwrap());
        assert_eq!(pool.pool.free_bytes(), 4096, "over budget: dropped");
        assert!(pool.build(&[]).is_err());
    }
}
