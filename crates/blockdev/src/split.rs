//! [`SplitDevice`]: one device whose first bytes live on a fast device and the rest on a slow
//! one — the object store's log (and superblock) on an SSD, its data on an HDD, as BlueStore
//! puts its WAL and DB on a separate device.
//!
//! Both devices keep the offsets of the whole: byte `x < split` is byte `x` of the fast device,
//! byte `x >= split` is byte `x` of the slow device (whose first `split` bytes stay unused), so
//! the slow device's timing model sees the same positions as without the split. An operation
//! that crosses the split is cut in two, both halves in flight at once.
//!
//! A flush flushes only the devices written since their last flush (a group commit whose only
//! write is its log record does not make the HDD flush), both at once; each device's flushes
//! are serialized so that a flush never returns before an earlier one that covers its writes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use async_trait::async_trait;

use crate::aligned::AlignedBuf;
use crate::device::{check_io, BlockDevice, DeviceProperties, IoKind};
use crate::error::{BlockDevError, Result};

/// One side of the split and whether it has writes not yet flushed.
#[derive(Debug)]
struct Side {
    device: Arc<dyn BlockDevice>,
    /// Set after a write to this side completes; cleared by the flush that covers it.
    written: AtomicBool,
    /// Held across a flush of this side (see [`Side::flush`]).
    flushing: tokio::sync::Mutex<()>,
}

impl Side {
    fn new(device: Arc<dyn BlockDevice>) -> Side {
        Side {
            device,
            written: AtomicBool::new(false),
            flushing: tokio::sync::Mutex::new(()),
        }
    }

    fn mark_written(&self) {
        self.written.store(true, Ordering::Release);
    }

    /// Flushes this side if a write completed since its last flush began. Flushes are
    /// serialized: a caller whose writes an earlier, still running flush covers waits for it.
    async fn flush(&self) -> Result<()> {
        let _one_at_a_time = self.flushing.lock().await;
        if !self.written.swap(false, Ordering::AcqRel) {
            return Ok(());
        }
        let flushed = self.device.flush().await;
        if flushed.is_err() {
            self.written.store(true, Ordering::Release);
        }
        flushed
    }
}

/// Where an operation of `len` bytes at `offset` goes: the part before the split and the part
/// from it (either may be empty).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Cut {
    fast_len: u64,
    slow_len: u64,
}

/// A device made of the first `split` bytes of a fast device and the rest of a slow one, at
/// the same offsets. See the module documentation.
#[derive(Debug)]
pub struct SplitDevice {
    fast: Side,
    slow: Side,
    split_bytes: u64,
    props: DeviceProperties,
}

impl SplitDevice {
    /// Joins `fast` (which must hold at least `split_bytes`) and `slow` (larger than
    /// `split_bytes`); `split_bytes` must be a non-zero multiple of both devices' alignment.
    /// The whole has the slow device's size, rotation and optimal I/O size, the larger
    /// alignment and the smaller queue depth.
    pub fn new(
        fast: Arc<dyn BlockDevice>,
        slow: Arc<dyn BlockDevice>,
        split_bytes: u64,
    ) -> Result<SplitDevice> {
        let (f, s) = (fast.properties(), slow.properties());
        let alignment_bytes = f.alignment_bytes.max(s.alignment_bytes);
        if split_bytes == 0 || !split_bytes.is_multiple_of(alignment_bytes) {
            return Err(BlockDevError::Config(format!(
                "split at {split_bytes} bytes must be a non-zero multiple of {alignment_bytes}"
            )));
        }
        if f.size_bytes < split_bytes {
            return Err(BlockDevError::Config(format!(
                "the fast device has {} bytes, fewer than the {split_bytes} split off to it",
                f.size_bytes
            )));
        }
        if s.size_bytes <= split_bytes {
            return Err(BlockDevError::Config(format!(
                "the slow device has {} bytes, none past the split at {split_bytes}",
                s.size_bytes
            )));
        }
        let props = DeviceProperties {
            size_bytes: s.size_bytes,
            alignment_bytes,
            rotational: s.rotational,
            optimal_io_bytes: s.optimal_io_bytes,
            max_queue_depth: f.max_queue_depth.min(s.max_queue_depth).max(1),
        };
        Ok(SplitDevice {
            fast: Side::new(fast),
            slow: Side::new(slow),
            split_bytes,
            props,
        })
    }

    /// Bytes at the start of the device that live on the fast device.
    pub fn split_bytes(&self) -> u64 {
        self.split_bytes
    }

    fn cut(&self, offset_bytes: u64, len_bytes: u64) -> Cut {
        let end = offset_bytes + len_bytes;
        let fast_len = end.min(self.split_bytes).saturating_sub(offset_bytes);
        Cut {
            fast_len,
            slow_len: len_bytes - fast_len,
        }
    }

    fn mark(&self, cut: Cut) {
        if cut.fast_len > 0 {
            self.fast.mark_written();
        }
        if cut.slow_len > 0 {
            self.slow.mark_written();
        }
    }

    /// The one side a range lies on, if it does not cross the split.
    fn side_of(&self, cut: Cut) -> Option<&Side> {
        match (cut.fast_len, cut.slow_len) {
            (_, 0) => Some(&self.fast),
            (0, _) => Some(&self.slow),
            _ => None,
        }
    }
}

#[async_trait]
impl BlockDevice for SplitDevice {
    fn properties(&self) -> DeviceProperties {
        self.props
    }

    async fn read(&self, offset_bytes: u64, buf: &mut [u8]) -> Result<()> {
        check_io(&self.props, IoKind::Read, offset_bytes, buf.len() as u64)?;
        let cut = self.cut(offset_bytes, buf.len() as u64);
        if let Some(side) = self.side_of(cut) {
            return side.device.read(offset_bytes, buf).await;
        }
        let head_len = usize::try_from(cut.fast_len).expect("a part of a buffer fits in usize");
        let (head, tail) = buf.split_at_mut(head_len);
        let (a, b) = tokio::join!(
            self.fast.device.read(offset_bytes, head),
            self.slow.device.read(self.split_bytes, tail)
        );
        a.and(b)
    }

    async fn read_owned(&self, offset_bytes: u64, mut buf: AlignedBuf) -> Result<AlignedBuf> {
        check_io(&self.props, IoKind::Read, offset_bytes, buf.len() as u64)?;
        let cut = self.cut(offset_bytes, buf.len() as u64);
        if let Some(side) = self.side_of(cut) {
            return side.device.read_owned(offset_bytes, buf).await;
        }
        self.read(offset_bytes, buf.as_mut_slice()).await?;
        Ok(buf)
    }

    async fn write(&self, offset_bytes: u64, data: &[u8]) -> Result<()> {
        check_io(&self.props, IoKind::Write, offset_bytes, data.len() as u64)?;
        let cut = self.cut(offset_bytes, data.len() as u64);
        if let Some(side) = self.side_of(cut) {
            side.device.write(offset_bytes, data).await?;
        } else {
            let head_len = usize::try_from(cut.fast_len).expect("a part of a buffer fits in usize");
            let (head, tail) = data.split_at(head_len);
            let (a, b) = tokio::join!(
                self.fast.device.write(offset_bytes, head),
                self.slow.device.write(self.split_bytes, tail)
            );
            a.and(b)?;
        }
        self.mark(cut);
        Ok(())
    }

    async fn write_owned(&self, offset_bytes: u64, buf: AlignedBuf) -> Result<AlignedBuf> {
        check_io(&self.props, IoKind::Write, offset_bytes, buf.len() as u64)?;
        let cut = self.cut(offset_bytes, buf.len() as u64);
        let Some(side) = self.side_of(cut) else {
            self.write(offset_bytes, buf.as_slice()).await?;
            return Ok(buf);
        };
        let buf = side.device.write_owned(offset_bytes, buf).await?;
        self.mark(cut);
        Ok(buf)
    }

    async fn write_shared(&self, offset_bytes: u64, data: bytes::Bytes) -> Result<()> {
        check_io(&self.props, IoKind::Write, offset_bytes, data.len() as u64)?;
        let cut = self.cut(offset_bytes, data.len() as u64);
        if let Some(side) = self.side_of(cut) {
            side.device.write_shared(offset_bytes, data).await?;
        } else {
            let head_len = usize::try_from(cut.fast_len).expect("a part of a buffer fits in usize");
            let (a, b) = tokio::join!(
                self.fast
                    .device
                    .write_shared(offset_bytes, data.slice(..head_len)),
                self.slow
                    .device
                    .write_shared(self.split_bytes, data.slice(head_len..))
            );
            a.and(b)?;
        }
        self.mark(cut);
        Ok(())
    }

    async fn write_owned_durable(&self, offset_bytes: u64, buf: AlignedBuf) -> Result<AlignedBuf> {
        check_io(&self.props, IoKind::Write, offset_bytes, buf.len() as u64)?;
        let cut = self.cut(offset_bytes, buf.len() as u64);
        match self.side_of(cut) {
            // Durable by itself: no later flush of that side owes it anything.
            Some(side) => side.device.write_owned_durable(offset_bytes, buf).await,
            None => {
                let buf = self.write_owned(offset_bytes, buf).await?;
                self.flush().await?;
                Ok(buf)
            }
        }
    }

    async fn flush(&self) -> Result<()> {
        let (a, b) = tokio::join!(self.fast.flush(), self.slow.flush());
        a.and(b)
    }

    async fn discard(&self, offset_bytes: u64, len_bytes: u64) -> Result<()> {
        check_io(&self.props, IoKind::Discard, offset_bytes, len_bytes)?;
        let cut = self.cut(offset_bytes, len_bytes);
        if let Some(side) = self.side_of(cut) {
            return side.device.discard(offset_bytes, len_bytes).await;
        }
        let (a, b) = tokio::join!(
            self.fast.device.discard(offset_bytes, cut.fast_len),
            self.slow.device.discard(self.split_bytes, cut.slow_len)
        );
        a.and(b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fault::{CrashSwitch, FaultDevice, PowerLossMode};
    use crate::mem::MemDevice;
    use std::sync::atomic::AtomicUsize;

    /// A device that counts its flushes.
    #[derive(Debug)]
    struct Counting {
        inner: Arc<dyn BlockDevice>,
        flushes: AtomicUsize,
    }

    #[async_trait]
    impl BlockDevice for Counting {
        fn properties(&self) -> DeviceProperties {
            self.inner.properties()
        }
        async fn read(&self, offset_bytes: u64, buf: &mut [u8]) -> Result<()> {
            self.inner.read(offset_bytes, buf).await
        }
        async fn write(&self, offset_bytes: u64, data: &[u8]) -> Result<()> {
            self.inner.write(offset_bytes, data).await
        }
        async fn flush(&self) -> Result<()> {
            self.flushes.fetch_add(1, Ordering::SeqCst);
            self.inner.flush().await
        }
        async fn discard(&self, offset_bytes: u64, len_bytes: u64) -> Result<()> {
            self.inner.discard(offset_bytes, len_bytes).await
        }
    }

    fn counting(size: u64) -> Arc<Counting> {
        Arc::new(Counting {
            inner: Arc::new(MemDevice::new(size, 512).unwrap()),
            flushes: AtomicUsize::new(0),
        })
    }

    fn pattern(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| i.to_le_bytes()[0].wrapping_mul(31).wrapping_add(seed))
            .collect()
    }

    #[tokio::test]
    async fn bytes_land_on_the_side_their_offset_names() {
        let (fast, slow) = (counting(8192), counting(65536));
        let dev = SplitDevice::new(fast.clone(), slow.clone(), 4096).unwrap();
        assert_eq!(dev.properties().size_bytes, 65536);
        let data = pattern(8192, 7);
        dev.write(2048, &data).await.unwrap();

        let mut on_fast = vec![0; 2048];
        fast.read(2048, &mut on_fast).await.unwrap();
        assert_eq!(on_fast, data[..2048]);
        let mut on_slow = vec![0; 6144];
        slow.read(4096, &mut on_slow).await.unwrap();
        assert_eq!(on_slow, data[2048..]);
        let mut slow_head = vec![1; 4096];
        slow.read(0, &mut slow_head).await.unwrap();
        assert!(
            slow_head.iter().all(|&b| b == 0),
            "nothing below the split on slow"
        );

        let mut back = vec![0; 8192];
        dev.read(2048, &mut back).await.unwrap();
        assert_eq!(back, data);
        let owned = dev
            .read_owned(2048, AlignedBuf::zeroed(8192, 512).unwrap())
            .await
            .unwrap();
        assert_eq!(owned.as_slice(), &data[..]);

        dev.write_shared(3584, bytes::Bytes::from(pattern(1024, 9)))
            .await
            .unwrap();
        let mut back = vec![0; 1024];
        dev.read(3584, &mut back).await.unwrap();
        assert_eq!(back, pattern(1024, 9));

        dev.discard(0, 65536).await.unwrap();
        let mut back = vec![1; 8192];
        dev.read(2048, &mut back).await.unwrap();
        assert!(back.iter().all(|&b| b == 0));
    }

    #[tokio::test]
    async fn a_flush_flushes_only_the_sides_written_since_the_last() {
        let (fast, slow) = (counting(8192), counting(65536));
        let dev = SplitDevice::new(fast.clone(), slow.clone(), 8192).unwrap();
        dev.flush().await.unwrap();
        assert_eq!(fast.flushes.load(Ordering::SeqCst), 0);
        assert_eq!(slow.flushes.load(Ordering::SeqCst), 0);

        dev.write(512, &pattern(512, 1)).await.unwrap();
        dev.flush().await.unwrap();
        assert_eq!(fast.flushes.load(Ordering::SeqCst), 1);
        assert_eq!(slow.flushes.load(Ordering::SeqCst), 0);

        dev.write(16384, &pattern(512, 2)).await.unwrap();
        dev.flush().await.unwrap();
        assert_eq!(fast.flushes.load(Ordering::SeqCst), 1);
        assert_eq!(slow.flushes.load(Ordering::SeqCst), 1);

        dev.write(7680, &pattern(1024, 3)).await.unwrap();
        dev.flush().await.unwrap();
        dev.flush().await.unwrap();
        assert_eq!(fast.flushes.load(Ordering::SeqCst), 2);
        assert_eq!(slow.flushes.load(Ordering::SeqCst), 2);

        let buf = AlignedBuf::from_parts(&[&pattern(512, 4)], 512).unwrap();
        dev.write_owned_durable(0, buf).await.unwrap();
        assert_eq!(
            fast.flushes.load(Ordering::SeqCst),
            3,
            "the default durable write"
        );
        dev.flush().await.unwrap();
        assert_eq!(
            fast.flushes.load(Ordering::SeqCst),
            3,
            "nothing left to flush"
        );
    }

    #[tokio::test]
    async fn what_a_flush_covered_survives_power_loss_on_both_sides() {
        let switch = CrashSwitch::new();
        let fast = Arc::new(FaultDevice::new(
            Arc::new(MemDevice::new(8192, 512).unwrap()),
            switch.clone(),
        ));
        let slow = Arc::new(FaultDevice::new(
            Arc::new(MemDevice::new(65536, 512).unwrap()),
            switch.clone(),
        ));
        let dev = SplitDevice::new(fast.clone(), slow.clone(), 8192).unwrap();
        let data = pattern(4096, 5);
        dev.write(6144, &data).await.unwrap();
        dev.flush().await.unwrap();
        dev.write(20480, &pattern(512, 6)).await.unwrap();
        assert_eq!(fast.unflushed_writes().await, 0);
        assert_eq!(slow.unflushed_writes().await, 1);
        let fast_after = fast.power_loss(PowerLossMode::DropUnflushed).await.unwrap();
        let slow_after = slow.power_loss(PowerLossMode::DropUnflushed).await.unwrap();
        let dev = SplitDevice::new(fast_after, slow_after, 8192).unwrap();
        let mut back = vec![0; 4096];
        dev.read(6144, &mut back).await.unwrap();
        assert_eq!(back, data, "flushed bytes on both sides survive");
        let mut lost = vec![1; 512];
        dev.read(20480, &mut lost).await.unwrap();
        assert!(lost.iter().all(|&b| b == 0), "the unflushed write is gone");
    }

    #[tokio::test]
    async fn bad_geometry_and_ranges_are_refused() {
        let fast: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(4096, 512).unwrap());
        let slow: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(65536, 512).unwrap());
        assert!(SplitDevice::new(fast.clone(), slow.clone(), 0).is_err());
        assert!(SplitDevice::new(fast.clone(), slow.clone(), 1000).is_err());
        assert!(SplitDevice::new(fast.clone(), slow.clone(), 8192).is_err());
        assert!(SplitDevice::new(slow.clone(), fast.clone(), 4096).is_err());
        let dev = SplitDevice::new(fast, slow, 4096).unwrap();
        assert!(matches!(
            dev.write(65024, &[0; 1024]).await,
            Err(BlockDevError::OutOfRange { .. })
        ));
        assert!(matches!(
            dev.read(100, &mut [0; 512]).await,
            Err(BlockDevError::Misaligned { .. })
        ));
    }
}
