//! [`EmulatedDevice`]: a device that stores data in another device and takes the time a modelled
//! HDD or NVMe drive would take.
//!
//! Owns a driver task that runs the [`Engine`] of the profile's timing model against tokio's
//! clock. With a normal runtime that is real time (daemons, benchmarks); with a paused runtime
//! (`tokio::time::pause`, `#[tokio::test(start_paused = true)]`) the same code runs in virtual
//! time, which auto-advances whenever every task waits. It must never change the data path: bytes
//! go to and come from the wrapped device unchanged.

use crate::device::{check_io, BlockDevice, DeviceProperties, IoKind, IoRequest};
use crate::error::{BlockDevError, Result};
use crate::model::Engine;
use crate::profile::Profile;
use async_trait::async_trait;
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot, Semaphore};
use tokio::time::Instant;

type Grant = oneshot::Sender<()>;

/// A timing-emulated device.
#[derive(Debug)]
pub struct EmulatedDevice {
    inner: Arc<dyn BlockDevice>,
    props: DeviceProperties,
    profile_name: String,
    submit: mpsc::UnboundedSender<(IoRequest, Grant)>,
    slots: Arc<Semaphore>,
}

impl EmulatedDevice {
    /// Wraps `inner` with `profile`'s timing; at most `max_queue_depth` operations in flight.
    /// Must be called inside a tokio runtime (it spawns the timing driver there).
    pub fn new(
        inner: Arc<dyn BlockDevice>,
        profile: &Profile,
        max_queue_depth: usize,
    ) -> Result<Self> {
        if max_queue_depth == 0 {
            return Err(BlockDevError::Config("max_queue_depth must be >= 1".into()));
        }
        let handle = tokio::runtime::Handle::try_current().map_err(|_| {
            BlockDevError::Config("EmulatedDevice::new needs a tokio runtime".into())
        })?;
        let inner_props = inner.properties();
        let engine = Engine::new(profile.model(inner_props.size_bytes));
        let (tx, rx) = mpsc::unbounded_channel();
        handle.spawn(drive(rx, engine, Instant::now()));
        let optimal_io_bytes = match (&profile.hdd, &profile.nvme) {
            (Some(_), _) => 1 << 20,
            (None, Some(n)) => n.stripe_bytes,
            (None, None) => inner_props.optimal_io_bytes,
        };
        Ok(Self {
            inner,
            props: DeviceProperties {
                rotational: profile.rotational(),
                optimal_io_bytes,
                max_queue_depth,
                ..inner_props
            },
            profile_name: profile.name.clone(),
            submit: tx,
            slots: Arc::new(Semaphore::new(max_queue_depth)),
        })
    }

    /// The profile this device emulates.
    pub fn profile_name(&self) -> &str {
        &self.profile_name
    }

    /// Registers the request's arrival with the timing engine; await the result for completion.
    fn arrive(
        &self,
        kind: IoKind,
        offset_bytes: u64,
        len_bytes: u64,
    ) -> Result<(oneshot::Receiver<()>, tokio::sync::OwnedSemaphorePermit)> {
        let permit =
            self.slots
                .clone()
                .try_acquire_owned()
                .map_err(|_| BlockDevError::QueueFull {
                    limit: self.props.max_queue_depth,
                })?;
        let (tx, rx) = oneshot::channel();
        let req = IoRequest {
            kind,
            offset_bytes,
            len_bytes,
        };
        self.submit
            .send((req, tx))
            .map_err(|_| BlockDevError::EngineStopped)?;
        Ok((rx, permit))
    }
}

fn elapsed_ns(epoch: Instant) -> u64 {
    cairn_convert::nanos(epoch.elapsed())
}

async fn drive(
    mut rx: mpsc::UnboundedReceiver<(IoRequest, Grant)>,
    mut engine: Engine<Grant>,
    epoch: Instant,
) {
    let mut open = true;
    loop {
        let now = elapsed_ns(epoch);
        for (_, grant) in engine.pop_completed(now) {
            let _ = grant.send(());
        }
        engine.start_ready(now);
        let next = engine.next_completion_ns();
        if !open && next.is_none() {
            return;
        }
        let wake = epoch + std::time::Duration::from_nanos(next.unwrap_or(0));
        tokio::select! {
            msg = rx.recv(), if open => match msg {
                Some((req, grant)) => engine.submit(req, grant),
                None => open = false,
            },
            _ = tokio::time::sleep_until(wake), if next.is_some() => {}
        }
    }
}

async fn wait(rx: oneshot::Receiver<()>) -> Result<()> {
    rx.await.map_err(|_| BlockDevError::EngineStopped)
}

#[async_trait]
impl BlockDevice for EmulatedDevice {
    fn properties(&self) -> DeviceProperties {
        self.props
    }

    async fn read(&self, offset_bytes: u64, buf: &mut [u8]) -> Result<()> {
        check_io(&self.props, IoKind::Read, offset_bytes, buf.len() as u64)?;
        let (done, _permit) = self.arrive(IoKind::Read, offset_bytes, buf.len() as u64)?;
        self.inner.read(offset_bytes, buf).await?;
        wait(done).await
    }

    async fn write(&self, offset_bytes: u64, data: &[u8]) -> Result<()> {
        check_io(&self.props, IoKind::Write, offset_bytes, data.len() as u64)?;
        let (done, _permit) = self.arrive(IoKind::Write, offset_bytes, data.len() as u64)?;
        self.inner.write(offset_bytes, data).await?;
        wait(done).await
    }

    async fn flush(&self) -> Result<()> {
        let (done, _permit) = self.arrive(IoKind::Flush, 0, 0)?;
        self.inner.flush().await?;
        wait(done).await
    }

    async fn discard(&self, offset_bytes: u64, len_bytes: u64) -> Result<()> {
        check_io(&self.props, IoKind::Discard, offset_bytes, len_bytes)?;
        let (done, _permit) = self.arrive(IoKind::Discard, offset_bytes, len_bytes)?;
        self.inner.discard(offset_bytes, len_bytes).await?;
        wait(done).await
    }
}
