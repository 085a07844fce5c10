//! Time dilation for device emulation below tokio's 1 ms timer resolution.
//!
//! tokio's timers round to whole milliseconds, which would turn every NVMe operation into a
//! 1 ms one. Here one *model* microsecond lasts one *tokio* millisecond ([`DILATION`]): a
//! [`DilatedDevice`] runs a profile's timing engine on model time and sleeps on the stretched
//! tokio clock; [`DilatedClock`] gives the cache model milliseconds. Used on a paused runtime,
//! the stretching costs no wall time. It must never change the data path.

use cairn_blockdev::model::Engine;
use cairn_blockdev::{
    check_io, BlockDevError, BlockDevice, DeviceProperties, IoKind, IoRequest, Profile,
};
use cairn_cache::Clock;
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};
use tokio::time::{Duration, Instant};

/// Tokio nanoseconds per model nanosecond.
pub const DILATION: u32 = 1000;

type Grant = oneshot::Sender<()>;

/// Model nanoseconds since `epoch`.
pub fn model_ns_since(epoch: Instant) -> u64 {
    u64::try_from(epoch.elapsed().as_nanos() / u128::from(DILATION)).unwrap_or(u64::MAX)
}

/// The tokio instant at model time `model_ns` after `epoch`.
pub fn tokio_at(epoch: Instant, model_ns: u64) -> Instant {
    epoch + Duration::from_nanos(model_ns).saturating_mul(DILATION)
}

/// A cache clock in model milliseconds.
#[derive(Debug)]
pub struct DilatedClock {
    epoch: Instant,
}

impl DilatedClock {
    /// A clock whose origin is now.
    pub fn new() -> Self {
        Self {
            epoch: Instant::now(),
        }
    }
}

impl Default for DilatedClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for DilatedClock {
    fn now_ms(&self) -> u64 {
        model_ns_since(self.epoch) / 1_000_000
    }
}

/// A device with a profile's timing, on dilated time.
#[derive(Debug)]
pub struct DilatedDevice {
    inner: Arc<dyn BlockDevice>,
    props: DeviceProperties,
    submit: mpsc::UnboundedSender<(IoRequest, Grant)>,
}

impl DilatedDevice {
    /// Wraps `inner` with `profile`'s timing. Needs a tokio runtime (spawns the driver).
    pub fn new(inner: Arc<dyn BlockDevice>, profile: &Profile) -> Result<Self, BlockDevError> {
        let handle = tokio::runtime::Handle::try_current()
            .map_err(|_| BlockDevError::Config("DilatedDevice needs a tokio runtime".into()))?;
        let props = inner.properties();
        let engine = Engine::new(profile.model(props.size_bytes));
        let (tx, rx) = mpsc::unbounded_channel();
        handle.spawn(drive(rx, engine, Instant::now()));
        Ok(Self {
            inner,
            props: DeviceProperties {
                rotational: profile.rotational(),
                ..props
            },
            submit: tx,
        })
    }

    async fn timed(
        &self,
        kind: IoKind,
        offset_bytes: u64,
        len_bytes: u64,
    ) -> Result<(), BlockDevError> {
        let (tx, rx) = oneshot::channel();
        let req = IoRequest {
            kind,
            offset_bytes,
            len_bytes,
        };
        self.submit
            .send((req, tx))
            .map_err(|_| BlockDevError::EngineStopped)?;
        rx.await.map_err(|_| BlockDevError::EngineStopped)
    }
}

async fn drive(
    mut rx: mpsc::UnboundedReceiver<(IoRequest, Grant)>,
    mut engine: Engine<Grant>,
    epoch: Instant,
) {
    let mut open = true;
    loop {
        let now = model_ns_since(epoch);
        for (_, grant) in engine.pop_completed(now) {
            let _ = grant.send(());
        }
        engine.start_ready(now);
        let next = engine.next_completion_ns();
        if !open && next.is_none() {
            return;
        }
        let wake = tokio_at(epoch, next.unwrap_or(0));
        tokio::select! {
            msg = rx.recv(), if open => match msg {
                Some((req, grant)) => engine.submit(req, grant),
                None => open = false,
            },
            _ = tokio::time::sleep_until(wake), if next.is_some() => {}
        }
    }
}

#[async_trait::async_trait]
impl BlockDevice for DilatedDevice {
    fn properties(&self) -> DeviceProperties {
        self.props
    }

    async fn read(&self, offset_bytes: u64, buf: &mut [u8]) -> Result<(), BlockDevError> {
        check_io(&self.props, IoKind::Read, offset_bytes, buf.len() as u64)?;
        self.inner.read(offset_bytes, buf).await?;
        self.timed(IoKind::Read, offset_bytes, buf.len() as u64)
            .await
    }

    async fn write(&self, offset_bytes: u64, data: &[u8]) -> Result<(), BlockDevError> {
        check_io(&self.props, IoKind::Write, offset_bytes, data.len() as u64)?;
        self.inner.write(offset_bytes, data).await?;
        self.timed(IoKind::Write, offset_bytes, data.len() as u64)
            .await
    }

    async fn flush(&self) -> Result<(), BlockDevError> {
        self.inner.flush().await?;
        self.timed(IoKind::Flush, 0, 0).await
    }

    async fn discard(&self, offset_bytes: u64, len_bytes: u64) -> Result<(), BlockDevError> {
        check_io(&self.props, IoKind::Discard, offset_bytes, len_bytes)?;
        self.inner.discard(offset_bytes, len_bytes).await?;
        self.timed(IoKind::Discard, offset_bytes, len_bytes).await
    }
}
