//! Reused aligned buffers for received data segments.
//!
//! Owns handing out a buffer of an exact length aligned to [`DATA_ALIGN_BYTES`] (a freed one
//! when there is one, which costs neither page faults nor zeroing) and taking buffers back when
//! the last `Bytes` made from them is dropped, up to a byte budget. It must never hand out a
//! buffer that a `Bytes` still points into: a buffer only comes back from its owner's `Drop`.

use std::sync::{Arc, Mutex, OnceLock};

use bytes::Bytes;
use cairn_blockdev::AlignedBuf;

/// Alignment of the buffers that large data segments are read into (direct I/O's).
pub const DATA_ALIGN_BYTES: usize = 4096;
/// Most bytes of free buffers the process keeps for reuse.
pub const POOL_MAX_BYTES: usize = 64 << 20;

/// Free data buffers, shared by every connection of the process.
pub(crate) struct DataBufPool {
    free: Mutex<Vec<AlignedBuf>>,
    max_bytes: usize,
}

impl DataBufPool {
    /// A pool keeping at most `max_bytes` of free buffers.
    pub(crate) fn new(max_bytes: usize) -> Arc<Self> {
        Arc::new(DataBufPool {
            free: Mutex::new(Vec::new()),
            max_bytes,
        })
    }

    /// The process's pool.
    pub(crate) fn global() -> &'static Arc<DataBufPool> {
        static POOL: OnceLock<Arc<DataBufPool>> = OnceLock::new();
        POOL.get_or_init(|| DataBufPool::new(POOL_MAX_BYTES))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<AlignedBuf>> {
        self.free.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A buffer of `len` bytes: a free one of that length (old contents: the caller overwrites
    /// all of it before anyone reads it), else a new zeroed one; `None` for a zero length or
    /// when memory cannot be had.
    pub(crate) fn take(&self, len: usize) -> Option<AlignedBuf> {
        let reused = {
            let mut free = self.lock();
            free.iter()
                .position(|b| b.len() == len)
                .map(|i| free.swap_remove(i))
        };
        reused.or_else(|| AlignedBuf::zeroed(len, DATA_ALIGN_BYTES))
    }

    /// `buf` as `Bytes`; the buffer comes back to this pool when the last of them is dropped.
    pub(crate) fn into_bytes(self: &Arc<Self>, buf: AlignedBuf) -> Bytes {
        Bytes::from_owner(Pooled {
            buf: Some(buf),
            pool: self.clone(),
        })
    }

    fn put(&self, buf: AlignedBuf) {
        let mut free = self.lock();
        let held: usize = free.iter().map(AlignedBuf::len).sum();
        if held + buf.len() <= self.max_bytes {
            free.push(buf);
        }
    }
}

/// The owner behind a pooled `Bytes`.
struct Pooled {
    buf: Option<AlignedBuf>,
    pool: Arc<DataBufPool>,
}

impl AsRef<[u8]> for Pooled {
    fn as_ref(&self) -> &[u8] {
        self.buf.as_ref().map_or(&[], AlignedBuf::as_slice)
    }
}

impl Drop for Pooled {
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
    fn buffers_come_back_when_the_last_bytes_drops_and_within_budget() {
        let pool = DataBufPool::new(8192);
        let mut a = pool.take(4096).unwrap();
        a.as_mut_slice().fill(1);
        let ptr = a.as_slice().as_ptr();
        let bytes = pool.into_bytes(a);
        let slice = bytes.slice(100..200);
        drop(bytes);
        assert_ne!(
            pool.take(4096).map(|b| b.as_slice().as_ptr()),
            Some(ptr),
            "a slice still points into it"
        );
        drop(slice);
        let again = pool.take(4096).unwrap();
        assert_eq!(
            again.as_slice().as_ptr(),
            ptr,
            "reused once nothing points into it"
        );
        assert_eq!(again.as_slice().as_ptr() as usize % DATA_ALIGN_BYTES, 0);
        drop(pool.into_bytes(again));
        drop(pool.into_bytes(pool.take(8192).unwrap()));
        assert_eq!(pool.lock().len(), 1, "over budget: dropped");
        assert!(pool.take(0).is_none());
    }
}
