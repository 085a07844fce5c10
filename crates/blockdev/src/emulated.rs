//! [`EmulatedDevice`]: a device that stores data in another device and takes the time a modelled
//! HDD or NVMe drive would take.
//!
//! Owns a driver that runs the [`Engine`] of the profile's timing model. [`EmulatedDevice::new`]
//! runs it as a task against tokio's clock: with a normal runtime that is real time, but in
//! whole milliseconds (tokio's timer resolution, so every operation that waits takes up to a
//! millisecond more than its model says); with a paused runtime (`tokio::time::pause`,
//! `#[tokio::test(start_paused = true)]`) the same code runs in virtual time, which
//! auto-advances whenever every task waits. [`EmulatedDevice::real_time`] runs it on an OS
//! thread of its own that sleeps to the microsecond instead, for daemons and benchmarks, where
//! an NVMe operation's tens of microseconds must not become a millisecond. It must never change
//! the data path: bytes go to and come from the wrapped device unchanged.

use crate::device::{check_io, BlockDevice, DeviceProperties, IoKind, IoRequest};
use crate::error::{BlockDevError, Result};
use crate::model::Engine;
use crate::profile::Profile;
use async_trait::async_trait;
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot, Semaphore};
use tokio::time::Instant;

type Grant = oneshot::Sender<()>;

/// Where requests go to the timing driver.
#[derive(Debug)]
enum Submit {
    /// A driver task on tokio's clock.
    Task(mpsc::UnboundedSender<(IoRequest, Grant)>),
    /// A driver thread on the OS clock.
    Thread(std::sync::mpsc::Sender<(IoRequest, Grant)>),
}

/// A timing-emulated device.
#[derive(Debug)]
pub struct EmulatedDevice {
    inner: Arc<dyn BlockDevice>,
    props: DeviceProperties,
    profile_name: String,
    submit: Submit,
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
        let engine = engine_for(&inner, profile, max_queue_depth)?;
        let handle = tokio::runtime::Handle::try_current().map_err(|_| {
            BlockDevError::Config("EmulatedDevice::new needs a tokio runtime".into())
        })?;
        let (tx, rx) = mpsc::unbounded_channel();
        handle.spawn(drive(rx, engine, Instant::now()));
        Ok(Self::with_driver(
            inner,
            profile,
            max_queue_depth,
            Submit::Task(tx),
        ))
    }

    /// As [`EmulatedDevice::new`], but the timing driver runs on an OS thread of its own
    /// against the OS clock, which wakes it to within tens of microseconds of each modelled
    /// completion where tokio's timer rounds up to the next millisecond. For real-time use
    /// (daemons, benchmarks); never under a paused tokio clock, which it does not follow. The
    /// thread ends once the device is dropped and its last operation completed.
    pub fn real_time(
        inner: Arc<dyn BlockDevice>,
        profile: &Profile,
        max_queue_depth: usize,
    ) -> Result<Self> {
        let engine = engine_for(&inner, profile, max_queue_depth)?;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name(format!("emulated-{}", profile.name))
            .spawn(move || drive_on_thread(&rx, engine, std::time::Instant::now()))
            .map_err(|e| BlockDevError::Config(format!("starting the timing thread: {e}")))?;
        Ok(Self::with_driver(
            inner,
            profile,
            max_queue_depth,
            Submit::Thread(tx),
        ))
    }

    /// The device over `inner` whose requests go to the timing driver behind `submit`.
    fn with_driver(
        inner: Arc<dyn BlockDevice>,
        profile: &Profile,
        max_queue_depth: usize,
        submit: Submit,
    ) -> Self {
        let inner_props = inner.properties();
        let optimal_io_bytes = match (&profile.hdd, &profile.nvme) {
            (Some(_), _) => 1 << 20,
            (None, Some(n)) => n.stripe_bytes,
            (None, None) => inner_props.optimal_io_bytes,
        };
        Self {
            inner,
            props: DeviceProperties {
                rotational: profile.rotational(),
                optimal_io_bytes,
                max_queue_depth,
                ..inner_props
            },
            profile_name: profile.name.clone(),
            submit,
            slots: Arc::new(Semaphore::new(max_queue_depth)),
        }
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
        let sent = match &self.submit {
            Submit::Task(s) => s.send((req, tx)).is_ok(),
            Submit::Thread(s) => s.send((req, tx)).is_ok(),
        };
        if !sent {
            return Err(BlockDevError::EngineStopped);
        }
        Ok((rx, permit))
    }
}

/// The timing engine of `profile` over a device the size of `inner`, once the queue depth is
/// checked.
fn engine_for(
    inner: &Arc<dyn BlockDevice>,
    profile: &Profile,
    max_queue_depth: usize,
) -> Result<Engine<Grant>> {
    if max_queue_depth == 0 {
        return Err(BlockDevError::Config("max_queue_depth must be >= 1".into()));
    }
    Ok(Engine::new(profile.model(inner.properties().size_bytes)))
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

/// [`drive`] on an OS thread: blocks on the request channel until the next modelled
/// completion, which the OS clock meets to within its timer slack (tens of microseconds).
fn drive_on_thread(
    rx: &std::sync::mpsc::Receiver<(IoRequest, Grant)>,
    mut engine: Engine<Grant>,
    epoch: std::time::Instant,
) {
    use std::sync::mpsc::RecvTimeoutError;
    let mut open = true;
    loop {
        let now = cairn_convert::nanos(epoch.elapsed());
        for (_, grant) in engine.pop_completed(now) {
            let _ = grant.send(());
        }
        engine.start_ready(now);
        let next = engine.next_completion_ns();
        let got = match (next, open) {
            (None, false) => return,
            (None, true) => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
            (Some(at), true) => match at.checked_sub(now).filter(|&ns| ns > 0) {
                Some(ns) => rx.recv_timeout(std::time::Duration::from_nanos(ns)),
                None => continue,
            },
            (Some(at), false) => {
                std::thread::sleep(std::time::Duration::from_nanos(at.saturating_sub(now)));
                continue;
            }
        };
        match got {
            Ok((req, grant)) => engine.submit(req, grant),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => open = false,
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
