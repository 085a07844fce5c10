//! A heap buffer with a guaranteed memory alignment, for `O_DIRECT` I/O.
//!
//! Owns allocation and release of aligned memory. It must never expose uninitialised bytes: every
//! buffer is zero-filled, or wholly written from the caller's bytes, before it is returned.
//!
//! A buffer of at least [`HUGE_PAGE_BYTES`] starts on a huge-page boundary and is marked for
//! transparent huge pages (`madvise(MADV_HUGEPAGE)`) before its memory is first touched, so the
//! kernel can back it with 2 MiB pages: a direct I/O from it is then a few physically
//! contiguous segments instead of one per 4 KiB page, and the block layer sends a 4 MiB write
//! as one or two requests rather than ten (on this VM's virtio disk, 1-OSD 4 MiB writes went
//! from ~2.0-2.5 to ~3.5-4 GB/s; see docs/design/blockdev.md). Where the kernel has transparent huge
//! pages off, the advice does nothing.

use std::alloc::{alloc, alloc_zeroed, dealloc, Layout};
use std::ptr::NonNull;

/// Buffers at least this long are placed and advised for transparent huge pages (x86-64's and
/// most ARM64 kernels' huge page size).
pub const HUGE_PAGE_BYTES: usize = 2 << 20;

/// A zero-initialised byte buffer whose start address is a multiple of `align_bytes`.
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    /// The allocation's layout (its alignment raised to [`HUGE_PAGE_BYTES`] for a large buffer).
    layout: Layout,
    /// The alignment the caller asked for (pools match buffers on it).
    align_bytes: usize,
}

/// The layout of a `len_bytes` buffer aligned to `align_bytes` (a power of two), on a huge-page
/// boundary when it is at least [`HUGE_PAGE_BYTES`] long.
fn layout_for(len_bytes: usize, align_bytes: usize) -> Option<Layout> {
    Layout::from_size_align(len_bytes, align_bytes).ok()?;
    let align = if len_bytes >= HUGE_PAGE_BYTES {
        align_bytes.max(HUGE_PAGE_BYTES)
    } else {
        align_bytes
    };
    Layout::from_size_align(len_bytes, align).ok()
}

/// Asks the kernel to back the whole huge pages of a new allocation with huge pages. Advice
/// only: a kernel without transparent huge pages (or refusing) leaves small pages.
fn advise_huge_pages(ptr: NonNull<u8>, layout: Layout) {
    let whole = layout.size() / HUGE_PAGE_BYTES * HUGE_PAGE_BYTES;
    if layout.align() < HUGE_PAGE_BYTES || whole == 0 {
        return;
    }
    #[cfg(target_os = "linux")]
    // SAFETY: the range lies within an allocation this buffer owns; MADV_HUGEPAGE changes no
    // contents, only how the kernel may back the pages.
    unsafe {
        libc::madvise(ptr.as_ptr().cast(), whole, libc::MADV_HUGEPAGE);
    }
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
        let layout = layout_for(len_bytes, align_bytes)?;
        if layout.align() < HUGE_PAGE_BYTES {
            // SAFETY: layout has a non-zero size.
            let raw = unsafe { alloc_zeroed(layout) };
            return NonNull::new(raw).map(|ptr| Self {
                ptr,
                layout,
                align_bytes,
            });
        }
        // Advised before the first touch, which the zeroing is.
        // SAFETY: layout has a non-zero size.
        let ptr = NonNull::new(unsafe { alloc(layout) })?;
        advise_huge_pages(ptr, layout);
        // SAFETY: the allocation is valid for `len_bytes` writes.
        unsafe { std::ptr::write_bytes(ptr.as_ptr(), 0, len_bytes) };
        Some(Self {
            ptr,
            layout,
            align_bytes,
        })
    }

    /// Allocates a buffer aligned to `align_bytes` holding the concatenation of `parts`, copying
    /// each byte once and never zeroing first (every byte is written before the buffer is
    /// returned). Returns `None` for a zero total length, an invalid alignment or on allocation
    /// failure.
    pub fn from_parts(parts: &[&[u8]], align_bytes: usize) -> Option<Self> {
        Self::from_parts_blockwise(parts, align_bytes, usize::MAX, |_| {})
    }

    /// Like [`AlignedBuf::from_parts`], calling `each_block` with every `block_bytes` of the new
    /// buffer (the last piece may be shorter) right after copying it, while it is still in the
    /// CPU's cache: a checksum of each block then costs no second pass through memory.
    pub fn from_parts_blockwise(
        parts: &[&[u8]],
        align_bytes: usize,
        block_bytes: usize,
        mut each_block: impl FnMut(&[u8]),
    ) -> Option<Self> {
        let len_bytes: usize = parts.iter().map(|p| p.len()).sum();
        if len_bytes == 0 {
            return None;
        }
        let layout = layout_for(len_bytes, align_bytes)?;
        // SAFETY: layout has a non-zero size.
        let raw = unsafe { alloc(layout) };
        let ptr = NonNull::new(raw)?;
        advise_huge_pages(ptr, layout);
        // SAFETY: the allocation holds exactly the parts' total length and is new, so it
        // overlaps none of them.
        unsafe { copy_blockwise(ptr.as_ptr(), len_bytes, parts, block_bytes, &mut each_block) };
        Some(Self {
            ptr,
            layout,
            align_bytes,
        })
    }

    /// Overwrites the whole buffer with the concatenation of `parts` (their total length must
    /// be the buffer's, else nothing is written and false is returned), calling `each_block` as
    /// [`AlignedBuf::from_parts_blockwise`] does.
    pub fn fill_blockwise(
        &mut self,
        parts: &[&[u8]],
        block_bytes: usize,
        mut each_block: impl FnMut(&[u8]),
    ) -> bool {
        let len_bytes: usize = parts.iter().map(|p| p.len()).sum();
        if len_bytes != self.len() {
            return false;
        }
        // SAFETY: the buffer is valid for its length, which is the parts' total; `&mut self`
        // means no part can borrow it.
        unsafe {
            copy_blockwise(
                self.ptr.as_ptr(),
                len_bytes,
                parts,
                block_bytes,
                &mut each_block,
            )
        };
        true
    }

    /// The alignment asked for the buffer's start address, bytes (a large buffer's is also a
    /// huge-page boundary).
    pub fn align_bytes(&self) -> usize {
        self.align_bytes
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

/// Copies the concatenation of `parts` to `dst` one block of `block_bytes` (at least 1) at a
/// time, calling `each_block` with each block of the destination right after writing it.
///
/// # Safety
/// `dst` must be valid for writes of `len_bytes` bytes, overlap none of `parts`, and
/// `len_bytes` must be the parts' total length.
unsafe fn copy_blockwise(
    dst: *mut u8,
    len_bytes: usize,
    parts: &[&[u8]],
    block_bytes: usize,
    each_block: &mut dyn FnMut(&[u8]),
) {
    let block = block_bytes.max(1);
    let (mut part, mut within) = (0, 0);
    let mut at = 0;
    while at < len_bytes {
        let n = block.min(len_bytes - at);
        let mut filled = 0;
        while filled < n {
            let src = parts[part];
            let take = (src.len() - within).min(n - filled);
            // SAFETY: `take` bytes remain in this part and in the destination block.
            unsafe {
                std::ptr::copy_nonoverlapping(src.as_ptr().add(within), dst.add(at + filled), take)
            };
            filled += take;
            within += take;
            if within == src.len() {
                part += 1;
                within = 0;
            }
        }
        // SAFETY: these `n` bytes were just written.
        each_block(unsafe { std::slice::from_raw_parts(dst.add(at), n) });
        at += n;
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: ptr was allocated with exactly this layout.
        unsafe { dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

/// Lets an aligned buffer back a `bytes::Bytes` (`Bytes::from_owner`), so that bytes handed
/// around as `Bytes` can still be written with direct I/O without a copy.
impl AsRef<[u8]> for AlignedBuf {
    fn as_ref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl std::fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "AlignedBuf({} bytes, align {})",
            self.layout.size(),
            self.align_bytes
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
    fn large_buffers_sit_on_huge_page_boundaries_and_keep_their_asked_alignment() {
        let len = 2 * HUGE_PAGE_BYTES + 4096;
        let z = AlignedBuf::zeroed(len, 4096).unwrap();
        assert_eq!(z.as_slice().as_ptr() as usize % HUGE_PAGE_BYTES, 0);
        assert_eq!(
            z.align_bytes(),
            4096,
            "pools match buffers on the asked alignment"
        );
        assert!(z.as_slice().iter().all(|&x| x == 0));
        let parts: Vec<u8> = (0..len)
            .map(|i| u8::try_from(i % 251).expect("below 251"))
            .collect();
        let (a, b) = parts.split_at(12345);
        let f = AlignedBuf::from_parts(&[a, b], 512).unwrap();
        assert_eq!(f.as_slice().as_ptr() as usize % HUGE_PAGE_BYTES, 0);
        assert_eq!(f.align_bytes(), 512);
        assert_eq!(f.as_slice(), &parts[..]);
        let small = AlignedBuf::zeroed(HUGE_PAGE_BYTES - 4096, 4096).unwrap();
        assert_eq!(small.align_bytes(), 4096);
        assert!(
            AlignedBuf::zeroed(len, 3).is_none(),
            "a bad alignment is refused at any size"
        );
    }

    #[test]
    fn blockwise_copies_concatenate_and_show_every_block_once() {
        let parts: [&[u8]; 4] = [b"abc", b"", &[7u8; 10], b"xy"];
        let whole: Vec<u8> = parts.concat();
        let mut seen = Vec::new();
        let b =
            AlignedBuf::from_parts_blockwise(&parts, 64, 4, |blk| seen.push(blk.to_vec())).unwrap();
        assert_eq!(b.as_slice(), &whole[..]);
        assert_eq!(b.as_slice().as_ptr() as usize % 64, 0);
        assert_eq!(seen.concat(), whole);
        assert_eq!(seen.iter().map(Vec::len).collect::<Vec<_>>(), [4, 4, 4, 3]);
        let mut again = AlignedBuf::zeroed(whole.len(), 64).unwrap();
        let mut blocks = 0;
        assert!(again.fill_blockwise(&parts, 5, |_| blocks += 1));
        assert_eq!((again.as_slice(), blocks), (&whole[..], 3));
        assert!(!again.fill_blockwise(&[b"short"], 5, |_| {}));
        assert!(AlignedBuf::from_parts_blockwise(&[b""], 64, 4, |_| {}).is_none());
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
