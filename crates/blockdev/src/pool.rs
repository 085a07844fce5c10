//! A bounded pool of aligned buffers, so large I/O buffers are reused instead of paying fresh
//! pages (faults and zeroing) on every operation.
//!
//! Owns handing out a buffer of an exact length (a free one when there is one), taking buffers
//! back up to a byte budget, and lending buffers out as `Bytes` that come back when the last
//! of them is dropped. It must never take back a buffer that a `Bytes` still points into: a lent
//! buffer only returns from its owner's `Drop`. A reused buffer holds its previous contents, so
//! the caller overwrites every byte before anyone reads it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;

use crate::aligned::AlignedBuf;

/// Free aligned buffers kept for reuse, at most `max_bytes` in all.
#[derive(Debug)]
pub struct AlignedPool {
    free: Mutex<Free>,
    max_bytes: usize,
    align_bytes: usize,
}

/// The free buffers by length, and their total length (kept, not summed on every return):
/// finding one of a length costs the same however many of other lengths the pool holds (a
/// 64 MiB pool holds up to 16384 of 4 KiB).
#[derive(Debug, Default)]
struct Free {
    by_len: HashMap<usize, Vec<AlignedBuf>>,
    bytes: usize,
}

impl AlignedPool {
    /// An empty pool of buffers aligned to `align_bytes`, keeping at most `max_bytes` free.
    pub fn new(max_bytes: usize, align_bytes: usize) -> Self {
        AlignedPool {
            free: Mutex::new(Free::default()),
            max_bytes,
            align_bytes,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Free> {
        self.free.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Alignment of the pool's buffers.
    pub fn align_bytes(&self) -> usize {
        self.align_bytes
    }

    /// A free buffer of exactly `len` bytes (with its old contents), if the pool holds one.
    pub fn reuse(&self, len: usize) -> Option<AlignedBuf> {
        let mut free = self.lock();
        let bufs = free.by_len.get_mut(&len)?;
        let buf = bufs.pop()?;
        if bufs.is_empty() {
            free.by_len.remove(&len);
        }
        free.bytes -= buf.len();
        Some(buf)
    }

    /// A buffer of `len` bytes: a free one (old contents) or a new zeroed one; `None` for a
    /// zero length or when memory cannot be had.
    pub fn take(&self, len: usize) -> Option<AlignedBuf> {
        self.reuse(len)
            .or_else(|| AlignedBuf::zeroed(len, self.align_bytes))
    }

    /// Keeps `buf` for reuse, or drops it when the pool is full or its alignment differs.
    pub fn put(&self, buf: AlignedBuf) {
        if buf.align_bytes() != self.align_bytes {
            return;
        }
        let mut free = self.lock();
        if free.bytes + buf.len() <= self.max_bytes {
            free.bytes += buf.len();
            free.by_len.entry(buf.len()).or_default().push(buf);
        }
    }

    /// `buf` as `Bytes`; the buffer comes back to this pool when the last of them is dropped.
    pub fn lend(self: &Arc<Self>, buf: AlignedBuf) -> Bytes {
        Bytes::from_owner(Lent {
            buf: Some(buf),
            pool: self.clone(),
        })
    }

    /// Bytes of free buffers held.
    pub fn free_bytes(&self) -> usize {
        self.lock().bytes
    }
}

/// The owner behind a lent `Bytes`.
struct Lent {
    buf: Option<AlignedBuf>,
    pool: Arc<AlignedPool>,
}

impl AsRef<[u8]> for Lent {
    fn as_ref(&self) -> &[u8] {
        self.buf.as_ref().map_or(&[], AlignedBuf::as_slice)
    }
}

impl Drop for Lent {
    fn drop(&mut self) {
        if let Some(buf) = self.buf.take() {
            self.pool.put(buf);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lent_buffers_come_back_when_the_last_bytes_drops_and_within_budget() {
        let pool = Arc::new(AlignedPool::new(8192, 4096));
        let mut a = pool.take(4096).unwrap();
        a.as_mut_slice().fill(1);
        let ptr = a.as_slice().as_ptr();
        let bytes = pool.lend(a);
        let slice = bytes.slice(100..200);
        drop(bytes);
        assert!(pool.reuse(4096).is_none(), "a slice still points into it");
        drop(slice);
        let again = pool.take(4096).unwrap();
        assert_eq!(
            again.as_slice().as_ptr(),
            ptr,
            "reused once nothing points into it"
        );
        assert_eq!(again.as_slice()[0], 1, "old contents are kept");
        assert_eq!(again.as_slice().as_ptr() as usize % 4096, 0);
        drop(pool.lend(again));
        drop(pool.lend(pool.take(8192).unwrap()));
        assert_eq!(pool.free_bytes(), 4096, "over budget: dropped");
        pool.put(AlignedBuf::zeroed(512, 512).unwrap());
        assert_eq!(pool.free_bytes(), 4096, "another alignment: dropped");
        assert!(pool.take(0).is_none());
        assert!(pool.reuse(8192).is_none(), "only exact lengths are reused");
    }

    #[test]
    fn a_free_buffer_of_the_asked_length_is_found_among_many_of_other_lengths() {
        let pool = AlignedPool::new(64 << 20, 4096);
        let wanted = pool.take(8192).unwrap();
        let ptr = wanted.as_slice().as_ptr();
        pool.put(wanted);
        for _ in 0..1000 {
            pool.put(AlignedBuf::zeroed(4096, 4096).unwrap());
        }
        assert_eq!(pool.free_bytes(), 8192 + 1000 * 4096);
        let again = pool.take(8192).unwrap();
        assert_eq!(again.as_slice().as_ptr(), ptr, "the one 8 KiB buffer");
        assert!(pool.reuse(8192).is_none(), "no other of that length");
        assert_eq!(pool.free_bytes(), 1000 * 4096);
        assert_eq!(pool.reuse(4096).unwrap().len(), 4096);
    }

    #[test]
    fn huge_page_placed_buffers_come_back_to_the_pool_too() {
        let len = 4 << 20;
        let pool = Arc::new(AlignedPool::new(2 * len, 4096));
        let a = pool.take(len).unwrap();
        let ptr = a.as_slice().as_ptr();
        drop(pool.lend(a));
        assert_eq!(
            pool.free_bytes(),
            len,
            "kept although placed on a 2 MiB boundary"
        );
        assert_eq!(pool.take(len).unwrap().as_slice().as_ptr(), ptr);
    }
}
