//! [`FaultDevice`]: wraps a device to inject errors and simulate power loss.
//!
//! Owns the fault rules, the record of writes not yet flushed (with their pre-images), and the
//! construction of a post-crash image. A [`CrashSwitch`] can be shared with other crashable
//! components (the store's metadata KV in tests) so that one global operation counter decides
//! the crash point for all of them at once. It must never let an operation after the crash
//! point take effect, and never make an unflushed write "survive" except through
//! [`FaultDevice::power_loss`] with an explicit mode and seed.

use crate::device::{check_io, BlockDevice, DeviceProperties, IoKind, SECTOR_BYTES};
use crate::error::{BlockDevError, Result};
use async_trait::async_trait;
use cairn_convert::usize_of;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// A shared power switch: counts mutating operations (writes, flushes, discards, KV writes and
/// syncs) across every component that holds it, and cuts power when the armed index is reached.
#[derive(Debug)]
pub struct CrashSwitch {
    ops: AtomicU64,
    crash_at: AtomicU64,
    crashed: AtomicBool,
    trace: std::sync::Mutex<Option<Vec<&'static str>>>,
}

impl CrashSwitch {
    /// A switch that never crashes until armed.
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            ops: AtomicU64::new(0),
            crash_at: AtomicU64::new(u64::MAX),
            crashed: AtomicBool::new(false),
            trace: std::sync::Mutex::new(None),
        })
    }

    /// Starts recording the label of every counted operation (see [`CrashSwitch::trace`]).
    pub fn enable_trace(&self) {
        *self.trace.lock().unwrap_or_else(|p| p.into_inner()) = Some(Vec::new());
    }

    /// Labels of the operations counted since [`CrashSwitch::enable_trace`], in order; lets a
    /// test choose crash points by kind (e.g. skip points equivalent under its loss mode).
    pub fn trace(&self) -> Vec<&'static str> {
        self.trace
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .unwrap_or_default()
    }

    /// Power is cut just before mutating operation number `op_index` (0-based) would start:
    /// operations `0..op_index` complete, that one and every later one fail.
    pub fn arm(&self, op_index: u64) {
        self.crash_at.store(op_index, Ordering::SeqCst);
    }

    /// Cuts power now.
    pub fn crash_now(&self) {
        self.crashed.store(true, Ordering::SeqCst);
    }

    /// True once power was cut.
    pub fn crashed(&self) -> bool {
        self.crashed.load(Ordering::SeqCst)
    }

    /// Mutating operations counted so far (including the refused one that triggered the crash).
    pub fn ops(&self) -> u64 {
        self.ops.load(Ordering::SeqCst)
    }

    /// Called by a component before a mutating operation labelled `label` (for traces); false
    /// means "power is off, do nothing".
    pub fn tick(&self, label: &'static str) -> bool {
        if self.crashed() {
            return false;
        }
        if let Some(t) = self
            .trace
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_mut()
        {
            t.push(label);
        }
        let idx = self.ops.fetch_add(1, Ordering::SeqCst);
        if idx >= self.crash_at.load(Ordering::SeqCst) {
            self.crash_now();
            return false;
        }
        true
    }
}

/// When an injected error fires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FaultRule {
    /// Fail the `nth` (0-based) operation of `kind` only.
    Nth {
        /// Operation kind.
        kind: IoKind,
        /// Which occurrence.
        nth: u64,
    },
    /// Fail every operation of `kind`.
    Always {
        /// Operation kind.
        kind: IoKind,
    },
    /// Fail every operation of `kind` overlapping the byte range.
    Range {
        /// Operation kind.
        kind: IoKind,
        /// Range start.
        offset_bytes: u64,
        /// Range length.
        len_bytes: u64,
    },
}

/// What survives a power loss.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PowerLossMode {
    /// Every write not covered by a completed flush is lost.
    DropUnflushed,
    /// Each unflushed write independently survives with probability 1/2; the last survivor is
    /// torn: only its first k sectors (k uniform in 0..=sectors) reach the media. Seeded.
    RandomSubset {
        /// Seed of the ChaCha8 generator that picks survivors and the tear.
        seed: u64,
    },
}

#[derive(Debug)]
struct Unflushed {
    offset_bytes: u64,
    pre_image: Vec<u8>,
    data: Vec<u8>,
}

#[derive(Debug, Default)]
struct State {
    rules: Vec<FaultRule>,
    counts: [u64; 4],
    op_index: u64,
    unflushed: Vec<Unflushed>,
}

/// A fault-injecting, crash-simulating wrapper around another device.
#[derive(Debug)]
pub struct FaultDevice {
    inner: Arc<dyn BlockDevice>,
    switch: Arc<CrashSwitch>,
    state: tokio::sync::Mutex<State>,
}

fn kind_index(kind: IoKind) -> usize {
    match kind {
        IoKind::Read => 0,
        IoKind::Write => 1,
        IoKind::Flush => 2,
        IoKind::Discard => 3,
    }
}

impl FaultDevice {
    /// Wraps `inner`, using `switch` for crash points (share it with other crashable parts).
    pub fn new(inner: Arc<dyn BlockDevice>, switch: Arc<CrashSwitch>) -> Self {
        Self {
            inner,
            switch,
            state: tokio::sync::Mutex::new(State::default()),
        }
    }

    /// The shared power switch.
    pub fn switch(&self) -> &Arc<CrashSwitch> {
        &self.switch
    }

    /// Adds an error-injection rule.
    pub async fn add_rule(&self, rule: FaultRule) {
        self.state.lock().await.rules.push(rule);
    }

    /// Operations of `kind` admitted so far (the `nth` of [`FaultRule::Nth`] for the next one).
    pub async fn count(&self, kind: IoKind) -> u64 {
        self.state.lock().await.counts[kind_index(kind)]
    }

    /// Removes all error-injection rules.
    pub async fn clear_rules(&self) {
        self.state.lock().await.rules.clear();
    }

    /// Number of writes not yet covered by a flush.
    pub async fn unflushed_writes(&self) -> usize {
        self.state.lock().await.unflushed.len()
    }

    /// Cuts power (if not already cut) and turns the wrapped device into the post-crash image
    /// chosen by `mode`; returns the wrapped device, ready to be reopened. This device refuses
    /// every operation afterwards.
    pub async fn power_loss(&self, mode: PowerLossMode) -> Result<Arc<dyn BlockDevice>> {
        self.switch.crash_now();
        let mut st = self.state.lock().await;
        let unflushed = std::mem::take(&mut st.unflushed);
        for u in unflushed.iter().rev() {
            self.inner.write(u.offset_bytes, &u.pre_image).await?;
        }
        if let PowerLossMode::RandomSubset { seed } = mode {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let survivors: Vec<&Unflushed> =
                unflushed.iter().filter(|_| rng.random_bool(0.5)).collect();
            let last = survivors.len().saturating_sub(1);
            for (i, u) in survivors.iter().enumerate() {
                let len = if i == last {
                    let sectors = u.data.len() as u64 / SECTOR_BYTES;
                    usize_of(rng.random_range(0..=sectors) * SECTOR_BYTES)
                } else {
                    u.data.len()
                };
                let align = usize_of(self.inner.properties().alignment_bytes);
                let len = len - len % align;
                self.inner.write(u.offset_bytes, &u.data[..len]).await?;
            }
        }
        self.inner.flush().await?;
        Ok(self.inner.clone())
    }

    /// Checks power and rules for one operation; returns its global index.
    fn admit(
        &self,
        st: &mut State,
        kind: IoKind,
        offset_bytes: u64,
        len_bytes: u64,
    ) -> Result<u64> {
        let label = match kind {
            IoKind::Read => "dev-read",
            IoKind::Write => "dev-write",
            IoKind::Flush => "dev-flush",
            IoKind::Discard => "dev-discard",
        };
        if (kind != IoKind::Read && !self.switch.tick(label)) || self.switch.crashed() {
            return Err(BlockDevError::PowerLost { kind });
        }
        let nth = st.counts[kind_index(kind)];
        st.counts[kind_index(kind)] += 1;
        let op_index = st.op_index;
        st.op_index += 1;
        let fire = st.rules.iter().any(|r| match *r {
            FaultRule::Nth { kind: k, nth: n } => k == kind && n == nth,
            FaultRule::Always { kind: k } => k == kind,
            FaultRule::Range {
                kind: k,
                offset_bytes: o,
                len_bytes: l,
            } => {
                k == kind
                    && offset_bytes < o.saturating_add(l)
                    && o < offset_bytes.saturating_add(len_bytes.max(1))
            }
        });
        if fire {
            return Err(BlockDevError::Injected { kind, op_index });
        }
        Ok(op_index)
    }
}

#[async_trait]
impl BlockDevice for FaultDevice {
    fn properties(&self) -> DeviceProperties {
        self.inner.properties()
    }

    async fn read(&self, offset_bytes: u64, buf: &mut [u8]) -> Result<()> {
        check_io(
            &self.properties(),
            IoKind::Read,
            offset_bytes,
            buf.len() as u64,
        )?;
        {
            let mut st = self.state.lock().await;
            self.admit(&mut st, IoKind::Read, offset_bytes, buf.len() as u64)?;
        }
        self.inner.read(offset_bytes, buf).await
    }

    async fn write(&self, offset_bytes: u64, data: &[u8]) -> Result<()> {
        check_io(
            &self.properties(),
            IoKind::Write,
            offset_bytes,
            data.len() as u64,
        )?;
        let mut st = self.state.lock().await;
        self.admit(&mut st, IoKind::Write, offset_bytes, data.len() as u64)?;
        let mut pre_image = vec![0u8; data.len()];
        self.inner.read(offset_bytes, &mut pre_image).await?;
        self.inner.write(offset_bytes, data).await?;
        st.unflushed.push(Unflushed {
            offset_bytes,
            pre_image,
            data: data.to_vec(),
        });
        Ok(())
    }

    async fn flush(&self) -> Result<()> {
        // A flush takes time on a real device: let other tasks run meanwhile.
        tokio::task::yield_now().await;
        let mut st = self.state.lock().await;
        self.admit(&mut st, IoKind::Flush, 0, 0)?;
        self.inner.flush().await?;
        st.unflushed.clear();
        Ok(())
    }

    async fn discard(&self, offset_bytes: u64, len_bytes: u64) -> Result<()> {
        check_io(&self.properties(), IoKind::Discard, offset_bytes, len_bytes)?;
        let mut st = self.state.lock().await;
        self.admit(&mut st, IoKind::Discard, offset_bytes, len_bytes)?;
        self.inner.discard(offset_bytes, len_bytes).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemDevice;

    fn dev() -> (FaultDevice, Arc<CrashSwitch>) {
        let sw = CrashSwitch::new();
        let inner: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(64 * 1024, 512).unwrap());
        (FaultDevice::new(inner, sw.clone()), sw)
    }

    async fn read_all(d: &Arc<dyn BlockDevice>, off: u64, len: usize) -> Vec<u8> {
        let mut b = vec![0u8; len];
        d.read(off, &mut b).await.unwrap();
        b
    }

    #[tokio::test]
    async fn unflushed_writes_are_dropped() {
        let (d, _) = dev();
        d.write(0, &[1; 4096]).await.unwrap();
        d.flush().await.unwrap();
        d.write(0, &[2; 4096]).await.unwrap();
        d.write(8192, &[3; 4096]).await.unwrap();
        assert_eq!(d.unflushed_writes().await, 2);
        let img = d.power_loss(PowerLossMode::DropUnflushed).await.unwrap();
        assert!(read_all(&img, 0, 4096).await.iter().all(|&x| x == 1));
        assert!(read_all(&img, 8192, 4096).await.iter().all(|&x| x == 0));
        assert!(matches!(
            d.write(0, &[0; 512]).await,
            Err(BlockDevError::PowerLost { .. })
        ));
    }

    #[tokio::test]
    async fn random_subset_is_seeded_and_tears_at_sector_boundaries() {
        let mut outcomes = std::collections::HashSet::new();
        for seed in 0..40 {
            let (d, _) = dev();
            for i in 0..4u8 {
                d.write(i as u64 * 4096, &[i + 1; 4096]).await.unwrap();
            }
            let img = d
                .power_loss(PowerLossMode::RandomSubset { seed })
                .await
                .unwrap();
            let bytes = read_all(&img, 0, 4 * 4096).await;
            for (i, chunk) in bytes.chunks(4096).enumerate() {
                let want = u8::try_from(i + 1).expect("four chunks");
                let k = chunk.iter().take_while(|&&x| x == want).count();
                assert_eq!(k % 512, 0, "tear not at a sector boundary");
                assert!(chunk[k..].iter().all(|&x| x == 0));
            }
            outcomes.insert(bytes);
            let (d2, _) = dev();
            for i in 0..4u8 {
                d2.write(i as u64 * 4096, &[i + 1; 4096]).await.unwrap();
            }
            let img2 = d2
                .power_loss(PowerLossMode::RandomSubset { seed })
                .await
                .unwrap();
            assert_eq!(
                read_all(&img2, 0, 4 * 4096).await,
                read_all(&img, 0, 4 * 4096).await
            );
        }
        assert!(outcomes.len() > 5, "subsets should vary with the seed");
    }

    #[tokio::test]
    async fn crash_switch_stops_at_the_armed_operation() {
        let (d, sw) = dev();
        sw.arm(2);
        d.write(0, &[1; 512]).await.unwrap();
        d.flush().await.unwrap();
        assert!(matches!(
            d.write(512, &[1; 512]).await,
            Err(BlockDevError::PowerLost { .. })
        ));
        assert!(sw.crashed());
        assert!(matches!(
            d.flush().await,
            Err(BlockDevError::PowerLost { .. })
        ));
        let img = d.power_loss(PowerLossMode::DropUnflushed).await.unwrap();
        assert_eq!(read_all(&img, 0, 512).await, vec![1; 512]);
        assert_eq!(read_all(&img, 512, 512).await, vec![0; 512]);
    }

    #[tokio::test]
    async fn rules_fail_chosen_operations() {
        let (d, _) = dev();
        d.add_rule(FaultRule::Nth {
            kind: IoKind::Write,
            nth: 1,
        })
        .await;
        d.add_rule(FaultRule::Range {
            kind: IoKind::Read,
            offset_bytes: 4096,
            len_bytes: 512,
        })
        .await;
        d.write(0, &[1; 512]).await.unwrap();
        assert!(matches!(
            d.write(0, &[1; 512]).await,
            Err(BlockDevError::Injected {
                kind: IoKind::Write,
                ..
            })
        ));
        d.write(0, &[1; 512]).await.unwrap();
        let mut b = vec![0; 512];
        d.read(0, &mut b).await.unwrap();
        assert!(matches!(
            d.read(4096, &mut b).await,
            Err(BlockDevError::Injected { .. })
        ));
        d.add_rule(FaultRule::Always {
            kind: IoKind::Flush,
        })
        .await;
        assert!(d.flush().await.is_err());
        d.clear_rules().await;
        d.flush().await.unwrap();
    }
}
