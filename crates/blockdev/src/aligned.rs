//! A heap buffer with a guaranteed memory alignment, for `O_DIRECT` I/O.
//!
//! Owns allocation and release of aligned memory. It must never expose uninitialised bytes: every
//! buffer is zero-filled at allocation.

use std::alloc::{alloc, alloc_zeroed, dealloc, Layout};
use std::ptr::NonNull;

/// A zero-initialised byte buffer whose start address is a multiple of `align_bytes`.
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    layout: Layout,
}

// SAFETY: AlignedBuf owns its allocation exclusively, like a Vec<u8>.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared references only allow reads, like &Vec<u8>.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// Allocates `len_bytes` zeroed bytes aligned to `align_bytes` (a power of two).
    /// Returns `None` for a zero length or an invalid alignment or on allocation failure.
    pub fn zeroed(len_bytes: usize, align_bytes: usize) -> Option<Self> {
        if len_bytes == 0 {
            return None;
        }
        let layout = Layout::from_size_align(len_bytes, align_bytes).ok()?;
        // SAFETY: layout has a non-zero size.
        let raw = unsafe { alloc_zeroed(layout) };
        NonNull::new(raw).map(|ptr| Self { ptr, layout })
    }

    /// Allocates a buffer aligned to `align_bytes` holding the concatenation of `parts`, copying
    /// each byte once and never zeroing first (every byte is written before the buffer is
    /// returned). Returns `None` for a zero total length, an invalid alignment or on allocation
    /// failure.
    pub fn from_parts(parts: &[&[u8]], align_bytes: usize) -> Option<Self> {
        let len_bytes: usize = parts.iter().map(|p| p.len()).sum();
        if len_bytes == 0 {
            return None;
        }
        let layout = Layout::from_size_align(len_bytes, align_bytes).ok()?;
        // SAFETY: layout has a non-zero size.
        let raw = unsafe { alloc(layout) };
        let ptr = NonNull::new(raw)?;
        let mut at = 0;
        for p in parts {
            // SAFETY: the parts' lengths sum to the allocation's size, so `at + p.len()` stays
            // within it; source and destination cannot overlap (the destination is new).
            unsafe { std::ptr::copy_nonoverlapping(p.as_ptr(), ptr.as_ptr().add(at), p.len()) };
            at += p.len();
        }
        Some(Self { ptr, layout })
    }

    /// The alignment of the buffer's start address, bytes.
    pub fn align_bytes(&self) -> usize {
        self.layout.align()
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.layout.size()
    }

    /// Always false: zero-length buffers cannot be created.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: ptr is valid for layout.size() initialised bytes owned by self.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.layout.size()) }
    }

    /// The bytes, mutably.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, and &mut self guarantees exclusivity.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.layout.size()) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: ptr was allocated with exactly this layout.
        unsafe { dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

impl std::fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "AlignedBuf({} bytes, align {})",
            self.layout.size(),
            self.layout.align()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_and_zeroed() {
        let mut b = AlignedBuf::zeroed(8192, 4096).unwrap();
        assert_eq!(b.as_slice().as_ptr() as usize % 4096, 0);
        assert!(b.as_slice().iter().all(|&x| x == 0));
        b.as_mut_slice()[5] = 7;
        assert_eq!(b.as_slice()[5], 7);
        assert!(AlignedBuf::zeroed(0, 4096).is_none());
        assert!(AlignedBuf::zeroed(10, 3).is_none());
    }

    #[test]
    fn from_parts_concatenates() {
        let b = AlignedBuf::from_parts(&[b"ab", b"", &[7u8; 4094]], 4096).unwrap();
        assert_eq!(b.len(), 4096);
        assert_eq!(b.align_bytes(), 4096);
        assert_eq!(b.as_slice().as_ptr() as usize % 4096, 0);
        assert_eq!(&b.as_slice()[..3], &[b'a', b'b', 7]);
        assert!(b.as_slice()[2..].iter().all(|&x| x == 7));
        assert!(AlignedBuf::from_parts(&[b"", b""], 4096).is_none());
        assert!(AlignedBuf::from_parts(&[b"x"], 3).is_none());
    }
}
