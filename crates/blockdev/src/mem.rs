//! [`MemDevice`]: a block device in RAM.
//!
//! Owns the device's bytes, held sparsely as a sparse file would: in chunks allocated on the
//! first write of something other than zeros (a device that a test or a simulated disk only
//! partly writes costs only what it wrote, and zeroing a range never written costs nothing),
//! and the [`BlockDevice`] contract checks for them. Writes are immediately "durable" (there
//! is no power to lose); crash behaviour is layered on by [`crate::FaultDevice`]. It must
//! never grow or shrink after creation, and a chunk never allocated must read as zeros.

use crate::device::{check_io, validate_geometry, BlockDevice, DeviceProperties, IoKind};
use crate::error::Result;
use async_trait::async_trait;
use cairn_convert::usize_of;
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Bytes of one chunk: what the device allocates when a write first puts data in its range.
const CHUNK_BYTES: usize = 64 << 10;

/// Bytes compared at once when checking a write for zeros (a vectorised OR of a block).
const ZERO_CHECK_BYTES: usize = 4096;

/// A RAM-backed block device.
#[derive(Debug)]
pub struct MemDevice {
    props: DeviceProperties,
    /// Bytes of the device.
    len: usize,
    /// Chunk `i` holds bytes `i * CHUNK_BYTES..` (the last one may be shorter); `None` reads
    /// as zeros.
    chunks: RwLock<Vec<Option<Box<[u8]>>>>,
}

/// One piece of an I/O: the part of it within one chunk.
struct Span {
    /// The chunk.
    chunk: usize,
    /// Where in the chunk it starts.
    within: usize,
    /// Where in the caller's buffer it starts.
    at: usize,
    /// Its length.
    len: usize,
}

/// The pieces of an I/O of `len` bytes at `offset`, chunk by chunk.
fn spans(offset: usize, len: usize) -> impl Iterator<Item = Span> {
    let mut at = 0;
    std::iter::from_fn(move || {
        if at >= len {
            return None;
        }
        let pos = offset + at;
        let within = pos % CHUNK_BYTES;
        let n = (CHUNK_BYTES - within).min(len - at);
        let span = Span {
            chunk: pos / CHUNK_BYTES,
            within,
            at,
            len: n,
        };
        at += n;
        Some(span)
    })
}

/// Whether `data` holds only zeros.
fn all_zero(data: &[u8]) -> bool {
    data.chunks(ZERO_CHECK_BYTES)
        .all(|block| block.iter().fold(0u8, |acc, &b| acc | b) == 0)
}

impl MemDevice {
    /// Creates a zero-filled device of `size_bytes` with the given alignment (a power of two
    /// >= 512 dividing `size_bytes`).
    pub fn new(size_bytes: u64, alignment_bytes: u64) -> Result<Self> {
        validate_geometry(size_bytes, alignment_bytes)?;
        let len = usize::try_from(size_bytes).map_err(|_| {
            crate::BlockDevError::Config(format!("{size_bytes} bytes do not fit in memory"))
        })?;
        Ok(Self {
            props: DeviceProperties {
                size_bytes,
                alignment_bytes,
                rotational: false,
                optimal_io_bytes: 128 * 1024,
                max_queue_depth: 1024,
            },
            len,
            chunks: RwLock::new(vec![None; len.div_ceil(CHUNK_BYTES)]),
        })
    }

    /// Creates a device holding `image` (its length must be a multiple of `alignment_bytes`).
    pub fn from_image(image: Vec<u8>, alignment_bytes: u64) -> Result<Self> {
        let device = Self::new(image.len() as u64, alignment_bytes)?;
        {
            let mut chunks = device.chunks_mut();
            for span in spans(0, image.len()) {
                let piece = &image[span.at..span.at + span.len];
                if !all_zero(piece) {
                    chunks[span.chunk] = Some(piece.into());
                }
            }
        }
        Ok(device)
    }

    fn chunks(&self) -> RwLockReadGuard<'_, Vec<Option<Box<[u8]>>>> {
        self.chunks.read().unwrap_or_else(|p| p.into_inner())
    }

    fn chunks_mut(&self) -> RwLockWriteGuard<'_, Vec<Option<Box<[u8]>>>> {
        self.chunks.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Bytes of chunk `i`: [`CHUNK_BYTES`] but for a shorter last one.
    fn chunk_len(&self, i: usize) -> usize {
        CHUNK_BYTES.min(self.len - i * CHUNK_BYTES)
    }

    /// Chunk `i`, allocated (zeroed) if it was not.
    fn allocated<'a>(&self, chunks: &'a mut [Option<Box<[u8]>>], i: usize) -> &'a mut [u8] {
        let len = self.chunk_len(i);
        chunks[i].get_or_insert_with(|| vec![0; len].into_boxed_slice())
    }

    /// Bytes of memory the device holds: its allocated chunks.
    pub fn allocated_bytes(&self) -> u64 {
        let chunks = self.chunks();
        chunks.iter().flatten().map(|c| c.len() as u64).sum()
    }

    /// A copy of the whole device contents (for tests and crash images).
    pub fn snapshot(&self) -> Vec<u8> {
        let chunks = self.chunks();
        let mut image = vec![0u8; self.len];
        for (i, chunk) in chunks.iter().enumerate() {
            if let Some(c) = chunk {
                let at = i * CHUNK_BYTES;
                image[at..at + c.len()].copy_from_slice(c);
            }
        }
        image
    }

    /// Flips bits of the byte at `offset_bytes` (for corruption tests); false if out of range.
    pub fn corrupt_byte(&self, offset_bytes: u64) -> bool {
        let Some(o) = usize::try_from(offset_bytes).ok().filter(|&o| o < self.len) else {
            return false;
        };
        let mut chunks = self.chunks_mut();
        self.allocated(&mut chunks, o / CHUNK_BYTES)[o % CHUNK_BYTES] ^= 0x5a;
        true
    }
}

#[async_trait]
impl BlockDevice for MemDevice {
    fn properties(&self) -> DeviceProperties {
        self.props
    }

    async fn read(&self, offset_bytes: u64, buf: &mut [u8]) -> Result<()> {
        check_io(&self.props, IoKind::Read, offset_bytes, buf.len() as u64)?;
        let chunks = self.chunks();
        for span in spans(usize_of(offset_bytes), buf.len()) {
            let out = &mut buf[span.at..span.at + span.len];
            match &chunks[span.chunk] {
                Some(c) => out.copy_from_slice(&c[span.within..span.within + span.len]),
                None => out.fill(0),
            }
        }
        Ok(())
    }

    async fn write(&self, offset_bytes: u64, data: &[u8]) -> Result<()> {
        check_io(&self.props, IoKind::Write, offset_bytes, data.len() as u64)?;
        let mut chunks = self.chunks_mut();
        for span in spans(usize_of(offset_bytes), data.len()) {
            let piece = &data[span.at..span.at + span.len];
            if chunks[span.chunk].is_none() && all_zero(piece) {
                continue;
            }
            let chunk = self.allocated(&mut chunks, span.chunk);
            chunk[span.within..span.within + span.len].copy_from_slice(piece);
        }
        Ok(())
    }

    async fn flush(&self) -> Result<()> {
        Ok(())
    }

    async fn discard(&self, offset_bytes: u64, len_bytes: u64) -> Result<()> {
        check_io(&self.props, IoKind::Discard, offset_bytes, len_bytes)?;
        let mut chunks = self.chunks_mut();
        for span in spans(usize_of(offset_bytes), usize_of(len_bytes)) {
            if span.len == self.chunk_len(span.chunk) {
                chunks[span.chunk] = None;
            } else if let Some(c) = &mut chunks[span.chunk] {
                c[span.within..span.within + span.len].fill(0);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::BlockDevError;

    #[tokio::test]
    async fn read_back_what_was_written() {
        let d = MemDevice::new(4096, 512).unwrap();
        d.write(512, &[7u8; 1024]).await.unwrap();
        let mut b = vec![0u8; 2048];
        d.read(0, &mut b).await.unwrap();
        assert!(b[..512].iter().all(|&x| x == 0));
        assert!(b[512..1536].iter().all(|&x| x == 7));
        d.discard(512, 512).await.unwrap();
        d.read(0, &mut b).await.unwrap();
        assert!(b[512..1024].iter().all(|&x| x == 0));
        assert!(matches!(
            d.write(4096, &[0; 512]).await,
            Err(BlockDevError::OutOfRange { .. })
        ));
        assert!(matches!(
            d.read(3, &mut b).await,
            Err(BlockDevError::Misaligned { .. })
        ));
        assert!(MemDevice::new(1000, 512).is_err());
    }

    /// Writes across chunk boundaries, zero writes on fresh and written chunks, discards of
    /// whole and partial chunks, and an image round trip all read back byte for byte as a
    /// plain byte vector would.
    #[tokio::test]
    async fn sparse_chunks_read_as_a_flat_device() {
        let len = 3 * CHUNK_BYTES + 4096;
        let d = MemDevice::new(len as u64, 512).unwrap();
        let mut model = vec![0u8; len];
        let ops: [(usize, usize, u8); 6] = [
            (CHUNK_BYTES - 512, 1024, 9),
            (2 * CHUNK_BYTES, CHUNK_BYTES + 4096, 3),
            (0, 4096, 0),
            (2 * CHUNK_BYTES + 512, 512, 0),
            (512, 1536, 5),
            (CHUNK_BYTES, 512, 7),
        ];
        for (at, n, byte) in ops {
            d.write(at as u64, &vec![byte; n]).await.unwrap();
            model[at..at + n].fill(byte);
        }
        assert_eq!(d.snapshot(), model);
        assert_eq!(d.allocated_bytes(), (3 * CHUNK_BYTES + 4096) as u64);
        d.discard(2 * CHUNK_BYTES as u64, CHUNK_BYTES as u64)
            .await
            .unwrap();
        d.discard(1024, 512).await.unwrap();
        model[2 * CHUNK_BYTES..3 * CHUNK_BYTES].fill(0);
        model[1024..1536].fill(0);
        let mut all = vec![1u8; len];
        d.read(0, &mut all).await.unwrap();
        assert_eq!(all, model);
        assert_eq!(d.allocated_bytes(), (2 * CHUNK_BYTES + 4096) as u64);
        let copy = MemDevice::from_image(model.clone(), 512).unwrap();
        assert_eq!(copy.snapshot(), model);
        assert_eq!(copy.allocated_bytes(), d.allocated_bytes());
        assert!(copy.corrupt_byte(len as u64 - 1));
        assert!(!copy.corrupt_byte(len as u64));
    }

    /// Zeros written where nothing was allocate nothing.
    #[tokio::test]
    async fn zeros_on_a_fresh_device_allocate_nothing() {
        let d = MemDevice::new(1 << 20, 4096).unwrap();
        d.write(4096, &vec![0u8; 512 << 10]).await.unwrap();
        assert_eq!(d.allocated_bytes(), 0);
        d.write(8192, &[1u8; 4096]).await.unwrap();
        assert_eq!(d.allocated_bytes(), CHUNK_BYTES as u64);
    }
}
