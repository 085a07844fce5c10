//! [`SimDisk`]: an OSD's disks in memory — its block device and its KV file — which outlive
//! the OSD's process and may lose power. A simulated host restarted after a process crash
//! mounts everything its last incarnation wrote (the kernel kept it); after a power loss it
//! mounts only what was flushed, plus a seeded subset of the rest with the last survivor torn
//! ([`PowerLossMode::RandomSubset`], [`KvLossMode::RandomSubset`]), as a real disk may leave it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use cairn_blockdev::{
    BlockDevice, CrashSwitch, FaultDevice, FaultRule, IoKind, MemDevice, PowerLossMode,
};
use cairn_store::{CrashableKv, KvLocation, KvLossMode, Store, StoreConfig, StoreError};

/// Alignment of the simulated block device.
const ALIGN_BYTES: u64 = 4096;

/// One power-on period of the disks: the switch every write goes through, and the devices
/// that record what is not yet flushed.
#[derive(Debug)]
struct PowerCycle {
    switch: Arc<CrashSwitch>,
    device: Arc<FaultDevice>,
    kv: CrashableKv,
    /// Set when power was cut: the seed choosing what survives, applied at the next mount.
    lost: Option<u64>,
    /// Set when the process using the disks crashed: everything it wrote survives.
    ended: bool,
}

impl PowerCycle {
    fn new(media: Arc<dyn BlockDevice>, kv_image: Vec<u8>) -> PowerCycle {
        let switch = CrashSwitch::new();
        PowerCycle {
            device: Arc::new(FaultDevice::new(media, switch.clone())),
            kv: CrashableKv::new(kv_image, switch.clone()),
            switch,
            lost: None,
            ended: false,
        }
    }
}

/// One OSD's disks.
#[derive(Debug)]
pub struct SimDisk {
    media: Arc<MemDevice>,
    cycle: Mutex<PowerCycle>,
    formatted: AtomicBool,
    /// Device writes not yet flushed when the power was cut, over every power loss.
    unflushed_at_cuts: AtomicU64,
    /// Whether the block device is to fail its writes.
    failing: AtomicBool,
}

impl SimDisk {
    /// Zeroed disks: a block device of `bytes` and an empty KV file.
    pub fn new(bytes: u64) -> Result<Arc<SimDisk>, StoreError> {
        let media = Arc::new(MemDevice::new(bytes, ALIGN_BYTES)?);
        Ok(Arc::new(SimDisk {
            cycle: Mutex::new(PowerCycle::new(media.clone(), Vec::new())),
            media,
            formatted: AtomicBool::new(false),
            unflushed_at_cuts: AtomicU64::new(0),
            failing: AtomicBool::new(false),
        }))
    }

    fn cycle(&self) -> MutexGuard<'_, PowerCycle> {
        self.cycle.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Cuts the power now: no write or sync lands after this call (a thread of the dying
    /// process still running is refused); the next [`SimDisk::mount`] sees what `seed` lets
    /// survive of what was not flushed.
    pub fn cut_power(&self, seed: u64) {
        let mut cycle = self.cycle();
        cycle.switch.crash_now();
        cycle.lost.get_or_insert(seed);
    }

    /// Ends the process using the disks, as a crash does: everything it wrote stays (the
    /// kernel has it, flushed or not) and nothing it would still write lands — its exit
    /// path included (a KV's clean shutdown, which would spare the next mount its repair).
    pub fn end_process(&self) {
        let mut cycle = self.cycle();
        cycle.switch.crash_now();
        cycle.ended = true;
    }

    /// Device writes that were not flushed when the power was cut, over every power loss so
    /// far (each one's survival was left to the power-loss seed).
    pub fn unflushed_at_cuts(&self) -> u64 {
        self.unflushed_at_cuts.load(Ordering::Relaxed)
    }

    /// Arms the power cut: it happens just before the disks' `after_ops`-th next mutating
    /// operation (a device write, flush or discard, a KV write or sync), in the middle of
    /// whatever the OSD is doing then; [`SimDisk::power_is_off`] tells when it has.
    pub fn arm_cut(&self, after_ops: u64, seed: u64) {
        let mut cycle = self.cycle();
        let at = cycle.switch.ops().saturating_add(after_ops);
        cycle.switch.arm(at);
        cycle.lost.get_or_insert(seed);
    }

    /// Makes the block device fail every write with EIO (a dying disk) from the next
    /// [`SimDisk::apply_failing`] on, until [`SimDisk::replace_failing`]. Only a flag: the
    /// device's rules are changed by the OSD host's own task, never by the simulation's
    /// driver, which must not wait on a lock a checkpoint thread may hold while it waits for
    /// the host's runtime.
    pub fn fail_writes(&self) {
        self.failing.store(true, Ordering::Release);
    }

    /// Replaces the failing part: the next mount finds a device that takes writes again,
    /// holding what it held.
    pub fn replace_failing(&self) {
        self.failing.store(false, Ordering::Release);
    }

    /// Applies [`SimDisk::fail_writes`] to the current device, every `every`, while the host
    /// runs (the host's own task calls it).
    pub async fn apply_failing(&self, every: std::time::Duration) {
        loop {
            if self.failing.load(Ordering::Acquire) {
                let device = self.cycle().device.clone();
                device
                    .add_rule(FaultRule::Always {
                        kind: IoKind::Write,
                    })
                    .await;
                return;
            }
            tokio::time::sleep(every).await;
        }
    }

    /// Whether the power is off (cut by [`SimDisk::cut_power`] or an armed cut reached).
    pub fn power_is_off(&self) -> bool {
        self.cycle().switch.crashed()
    }

    /// Mounts the store on these disks, making it first (mkfs) the first time, after turning
    /// them into their post-power-loss images if the power was cut.
    pub async fn mount(&self, cfg: &StoreConfig) -> Result<Store, StoreError> {
        let (device, kv) = self.power_on().await?;
        if !self.formatted.load(Ordering::Acquire) {
            // Straight onto the media: the fault device's record of unflushed writes would
            // copy the zeroed log ring three times over, and mkfs ends with a flush anyway —
            // no fault of the run starts before the cluster serves.
            let media: Arc<dyn BlockDevice> = self.media.clone();
            Store::mkfs(media, KvLocation::Backend(Box::new(kv.clone())), cfg).await?;
            self.formatted.store(true, Ordering::Release);
        }
        let dev: Arc<dyn BlockDevice> = device;
        Store::mount(dev, KvLocation::Backend(Box::new(kv)), cfg.clone()).await
    }

    /// The devices of the current power cycle, starting a new one from the surviving images
    /// if the power was cut.
    async fn power_on(&self) -> Result<(Arc<FaultDevice>, CrashableKv), StoreError> {
        let (lost, ended, device, kv) = {
            let cycle = self.cycle();
            (
                cycle.lost,
                cycle.ended,
                cycle.device.clone(),
                cycle.kv.clone(),
            )
        };
        if !self.failing.load(Ordering::Acquire) {
            device.clear_rules().await;
        }
        let Some(seed) = lost else {
            if !ended {
                return Ok((device, kv));
            }
            let fresh = PowerCycle::new(self.media.clone(), kv.as_written());
            let out = (fresh.device.clone(), fresh.kv.clone());
            *self.cycle() = fresh;
            return Ok(out);
        };
        let unflushed = u64::try_from(device.unflushed_writes().await).unwrap_or(u64::MAX);
        self.unflushed_at_cuts
            .fetch_add(unflushed, Ordering::Relaxed);
        device
            .power_loss(PowerLossMode::RandomSubset { seed })
            .await?;
        let kv_image = kv.power_loss(KvLossMode::RandomSubset { seed });
        let fresh = PowerCycle::new(self.media.clone(), kv_image);
        let out = (fresh.device.clone(), fresh.kv.clone());
        *self.cycle() = fresh;
        Ok(out)
    }
}
