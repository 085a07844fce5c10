//! [`QueuedDevice`]: a device that waits for one of its inner device's queue slots instead of
//! being refused with [`crate::BlockDevError::QueueFull`], as a kernel's request queue holds
//! what the device cannot take yet. For a layer that turns one request into several (a cache
//! splitting a request into cache lines, cleaning beside client I/O), where the caller's own
//! bound on requests in flight does not bound the operations reaching the device.

use std::sync::Arc;

use async_trait::async_trait;
use tokio::sync::Semaphore;

use crate::device::{BlockDevice, DeviceProperties};
use crate::error::{BlockDevError, Result};

/// `inner` with at most its `max_queue_depth` operations in flight, the rest waiting in turn.
#[derive(Debug)]
pub struct QueuedDevice {
    inner: Arc<dyn BlockDevice>,
    slots: Arc<Semaphore>,
}

impl QueuedDevice {
    /// `inner` with a queue of its own.
    pub fn new(inner: Arc<dyn BlockDevice>) -> QueuedDevice {
        let depth = inner.properties().max_queue_depth.max(1);
        QueuedDevice {
            inner,
            slots: Arc::new(Semaphore::new(depth)),
        }
    }

    /// `inner` sharing the queue slots of `other` (two handles to one device, e.g. a path
    /// through a scheduler beside the direct one).
    pub fn sharing(inner: Arc<dyn BlockDevice>, other: &QueuedDevice) -> QueuedDevice {
        QueuedDevice {
            inner,
            slots: other.slots.clone(),
        }
    }

    async fn slot(&self) -> Result<tokio::sync::SemaphorePermit<'_>> {
        self.slots
            .acquire()
            .await
            .map_err(|_| BlockDevError::EngineStopped)
    }
}

#[async_trait]
impl BlockDevice for QueuedDevice {
    fn properties(&self) -> DeviceProperties {
        self.inner.properties()
    }

    async fn read(&self, offset_bytes: u64, buf: &mut [u8]) -> Result<()> {
        let _slot = self.slot().await?;
        self.inner.read(offset_bytes, buf).await
    }

    async fn write(&self, offset_bytes: u64, data: &[u8]) -> Result<()> {
        let _slot = self.slot().await?;
        self.inner.write(offset_bytes, data).await
    }

    async fn flush(&self) -> Result<()> {
        let _slot = self.slot().await?;
        self.inner.flush().await
    }

    async fn discard(&self, offset_bytes: u64, len_bytes: u64) -> Result<()> {
        let _slot = self.slot().await?;
        self.inner.discard(offset_bytes, len_bytes).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{EmulatedDevice, MemDevice, Profile};

    #[tokio::test]
    async fn more_operations_than_the_queue_holds_wait_instead_of_failing() {
        let profile = Profile::load("nvme-p3700").unwrap();
        let mem = Arc::new(MemDevice::new(1 << 20, 512).unwrap());
        let emulated: Arc<dyn BlockDevice> =
            Arc::new(EmulatedDevice::new(mem, &profile, 2).unwrap());
        let direct = futures_util::future::join_all(
            (0..8u64).map(|i| emulated.write(i * 4096, &[1u8; 4096][..])),
        )
        .await;
        assert!(
            direct
                .iter()
                .any(|r| matches!(r, Err(BlockDevError::QueueFull { limit: 2 }))),
            "the emulated device refuses past its depth"
        );
        let queued = QueuedDevice::new(emulated.clone());
        let shared = QueuedDevice::sharing(emulated, &queued);
        let writes = (0..16u64).map(|i| {
            let dev = if i % 2 == 0 { &queued } else { &shared };
            dev.write(i * 4096, &[2u8; 4096][..])
        });
        for r in futures_util::future::join_all(writes).await {
            r.unwrap();
        }
        let mut back = vec![0u8; 4096];
        queued.read(15 * 4096, &mut back).await.unwrap();
        assert!(back.iter().all(|&b| b == 2));
    }
}
