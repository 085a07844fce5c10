//! A bounded pool of aligned write buffers, so large copy-on-write runs reuse memory instead of
//! paying fresh pages (faults and zeroing) on every transaction.
//!
//! Owns building a buffer from parts (one copy) into a pooled buffer of the same length when one
//! is free, and keeping returned buffers up to a byte budget. It must never hand out a buffer
//! whose every byte was not just written from the caller's parts.

use crate::error::{Result, StoreError};
use cairn_blockdev::AlignedBuf;
use std::sync::Mutex;

/// Alignment of the buffers handed to the device (`O_DIRECT`-safe on 512e and 4Kn devices).
pub(crate) const IO_ALIGN_BYTES: usize = 4096;

/// Free buffers kept for reuse, at most `max_bytes` in all.
#[derive(Debug)]
pub(crate) struct BufPool {
    free: Mutex<Vec<AlignedBuf>>,
    max_bytes: usize,
}

impl BufPool {
    /// An empty pool keeping at most `max_bytes` of free buffers.
    pub(crate) fn new(max_bytes: usize) -> Self {
        Self {
            free: Mutex::new(Vec::new()),
            max_bytes,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<AlignedBuf>> {
        self.free.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A buffer holding the concatenation of `parts` (reused when a free one has that length).
    pub(crate) fn build(&self, parts: &[&[u8]]) -> Result<AlignedBuf> {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        let reused = {
            let mut free = self.lock();
            free.iter()
                .position(|b| b.len() == len)
                .map(|i| free.swap_remove(i))
        };
        match reused {
            Some(mut buf) => {
                let mut at = 0;
                let dst = buf.as_mut_slice();
                for p in parts {
                    dst[at..at + p.len()].copy_from_slice(p);
                    at += p.len();
                }
                Ok(buf)
            }
            None => AlignedBuf::from_parts(parts, IO_ALIGN_BYTES)
                .ok_or_else(|| StoreError::Limit(format!("cannot allocate a {len}-byte buffer"))),
        }
    }

    /// Returns a buffer for reuse (dropped when the pool is full).
    pub(crate) fn put(&self, buf: AlignedBuf) {
        let mut free = self.lock();
        let held: usize = free.iter().map(AlignedBuf::len).sum();
        if held + buf.len() <= self.max_bytes {
            free.push(buf);
        }
    }
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
        pool.put(pool.build(&[&[0u8; 8192]]).unwrap());
        assert_eq!(pool.lock().len(), 1, "over budget: dropped");
        assert!(pool.build(&[]).is_err());
    }
}
