//! [`MemDevice`]: a block device in RAM.
//!
//! Owns a byte vector and the [`BlockDevice`] contract checks for it. Writes are immediately
//! "durable" (there is no power to lose); crash behaviour is layered on by [`crate::FaultDevice`].
//! It must never grow or shrink after creation.

use crate::device::{check_io, validate_geometry, BlockDevice, DeviceProperties, IoKind};
use crate::error::Result;
use async_trait::async_trait;
use cairn_convert::usize_of;
use std::sync::RwLock;

/// A RAM-backed block device.
#[derive(Debug)]
pub struct MemDevice {
    props: DeviceProperties,
    data: RwLock<Vec<u8>>,
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
            data: RwLock::new(vec![0; len]),
        })
    }

    /// Creates a device holding `image` (its length must be a multiple of `alignment_bytes`).
    pub fn from_image(image: Vec<u8>, alignment_bytes: u64) -> Result<Self> {
        validate_geometry(image.len() as u64, alignment_bytes)?;
        Ok(Self {
            props: DeviceProperties {
                size_bytes: image.len() as u64,
                alignment_bytes,
                rotational: false,
                optimal_io_bytes: 128 * 1024,
                max_queue_depth: 1024,
            },
            data: RwLock::new(image),
        })
    }

    /// A copy of the whole device contents (for tests and crash images).
    pub fn snapshot(&self) -> Vec<u8> {
        self.data.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Flips bits of the byte at `offset_bytes` (for corruption tests); false if out of range.
    pub fn corrupt_byte(&self, offset_bytes: u64) -> bool {
        let mut d = self.data.write().unwrap_or_else(|p| p.into_inner());
        match usize::try_from(offset_bytes)
            .ok()
            .and_then(|o| d.get_mut(o))
        {
            Some(b) => {
                *b ^= 0x5a;
                true
            }
            None => false,
        }
    }
}

#[async_trait]
impl BlockDevice for MemDevice {
    fn properties(&self) -> DeviceProperties {
        self.props
    }

    async fn read(&self, offset_bytes: u64, buf: &mut [u8]) -> Result<()> {
        check_io(&self.props, IoKind::Read, offset_bytes, buf.len() as u64)?;
        let d = self.data.read().unwrap_or_else(|p| p.into_inner());
        let o = usize_of(offset_bytes);
        buf.copy_from_slice(&d[o..o + buf.len()]);
        Ok(())
    }

    async fn write(&self, offset_bytes: u64, data: &[u8]) -> Result<()> {
        check_io(&self.props, IoKind::Write, offset_bytes, data.len() as u64)?;
        let mut d = self.data.write().unwrap_or_else(|p| p.into_inner());
        let o = usize_of(offset_bytes);
        d[o..o + data.len()].copy_from_slice(data);
        Ok(())
    }

    async fn flush(&self) -> Result<()> {
        Ok(())
    }

    async fn discard(&self, offset_bytes: u64, len_bytes: u64) -> Result<()> {
        check_io(&self.props, IoKind::Discard, offset_bytes, len_bytes)?;
        let mut d = self.data.write().unwrap_or_else(|p| p.into_inner());
        let o = usize_of(offset_bytes);
        d[o..o + usize_of(len_bytes)].fill(0);
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
}
