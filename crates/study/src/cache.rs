//! The cache study (seed 004): Vdbench's set on an emulated HDD core, bare and behind a
//! write-back cache on an emulated NVMe, plus dirty share over time per cleaning policy.
//!
//! Owns the workloads, the virtual-time measurement and the report. Everything runs on a paused
//! tokio runtime with dilated time ([`crate::dilated`]): device models decide all timings, so
//! results are deterministic and the CPU cost of the cache code is *not* included (it is
//! measured separately by the `hit` bench of `cairn-cache`).
//! It must never touch a real disk.

use crate::dilated::{DilatedClock, DilatedDevice, DILATION};
use crate::plot::{line_chart, PlotError, Series};
use cairn_blockdev::{BlockDevError, BlockDevice, MemDevice, Profile};
use cairn_cache::{
    CacheConfig, CacheDevice, CacheError, CacheMode, CleaningPolicyKind, IoClassTable,
    SeqCutoffPolicy,
};
use cairn_convert::sat_usize;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::path::Path;
use std::sync::Arc;
use tokio::time::{Duration, Instant};

/// Seed 004's I/O class file, as loaded with casadm.
pub const SEED_IOCLASS_CSV: &str = "IO class id,IO class name,Eviction priority,Allocation\n\
                                    0,unclassified,22,0\n\
                                    1,request_size:le:131072,1,1\n";
/// Most concurrent workers a study accepts.
pub const MAX_WORKERS: usize = 1024;

/// Why a study failed.
#[derive(Debug, thiserror::Error)]
pub enum StudyError {
    /// A device failed.
    #[error("device: {0}")]
    Device(#[from] BlockDevError),
    /// The cache rejected its setup.
    #[error("cache: {0}")]
    Cache(#[from] CacheError),
    /// A parameter is out of range.
    #[error("invalid study parameter: {0}")]
    Param(String),
    /// Plotting failed.
    #[error(transparent)]
    Plot(#[from] PlotError),
    /// The runtime could not be built.
    #[error("runtime: {0}")]
    Runtime(#[from] std::io::Error),
}

/// Study parameters.
#[derive(Debug, Clone)]
pub struct CacheStudyConfig {
    /// Core (HDD) size.
    pub core_bytes: u64,
    /// Cache (NVMe) size for the Vdbench set.
    pub cache_bytes: u64,
    /// Range the random workloads touch (fits in the cache, as in the seed's 100%-hit runs;
    /// the whole core by default, so the bare HDD seeks full-stroke like the seed's disks).
    pub working_set_bytes: u64,
    /// Concurrent workers (seed: 20 threads x queue depth 16, scaled down).
    pub workers: usize,
    /// Virtual time measured per workload on the cached device, ms (requests completing
    /// after the window are not counted, so the window length does not bias throughput).
    pub measure_ms: u64,
    /// Virtual time measured per workload on the bare HDD, ms.
    pub bare_measure_ms: u64,
    /// Cache size for the dirty-over-time runs (small, so it fills).
    pub dirty_cache_bytes: u64,
    /// Foreground 4 KiB random write rate of the dirty-over-time runs, IOPS.
    pub dirty_write_iops: u64,
    /// Length of each dirty-over-time run, virtual ms.
    pub dirty_run_ms: u64,
    /// Sampling interval of the dirty-over-time runs, ms.
    pub dirty_sample_ms: u64,
    /// Random seed.
    pub seed: u64,
    /// HDD profile (built-in name or TOML path).
    pub hdd_profile: String,
    /// NVMe profile.
    pub nvme_profile: String,
}

impl Default for CacheStudyConfig {
    fn default() -> Self {
        Self {
            core_bytes: 128 << 20,
            cache_bytes: 160 << 20,
            working_set_bytes: 128 << 20,
            workers: 32,
            measure_ms: 4000,
            bare_measure_ms: 4000,
            dirty_cache_bytes: 16 << 20,
            dirty_write_iops: 3000,
            dirty_run_ms: 10_000,
            dirty_sample_ms: 100,
            seed: 4,
            hdd_profile: "hdd-7200".into(),
            nvme_profile: "nvme-p4510".into(),
        }
    }
}

impl CacheStudyConfig {
    fn validate(&self) -> Result<(), StudyError> {
        let bad = |m: &str| Err(StudyError::Param(m.to_string()));
        if self.workers == 0 || self.workers > MAX_WORKERS {
            return bad("workers must be 1 ..= 1024");
        }
        if self.working_set_bytes == 0
            || self.working_set_bytes > self.core_bytes
            || !self.working_set_bytes.is_multiple_of(4096)
        {
            return bad("working set must be a non-zero multiple of 4 KiB within the core");
        }
        if self.measure_ms == 0 || self.bare_measure_ms == 0 || self.dirty_sample_ms == 0 {
            return bad("durations must be positive");
        }
        if self.dirty_write_iops == 0 {
            return bad("dirty_write_iops must be positive");
        }
        Ok(())
    }
}

/// Access pattern of a workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pattern {
    /// Uniform random reads in the working set.
    RandRead,
    /// Uniform random writes in the working set.
    RandWrite,
    /// Random reads and writes, `read_pct` percent reads.
    Mix {
        /// Share of reads, percent.
        read_pct: u32,
    },
    /// Each worker reads its own region sequentially.
    SeqRead,
    /// Each worker writes its own region sequentially.
    SeqWrite,
}

/// One Vdbench workload.
#[derive(Debug, Clone, Copy)]
pub struct Workload {
    /// Name in the report.
    pub name: &'static str,
    /// Pattern.
    pub pattern: Pattern,
    /// Request size.
    pub io_bytes: usize,
    /// The seed's published result for this workload (ratio or loss), for the table.
    pub seed_figure: &'static str,
}

/// Seed 004's Vdbench set.
pub const VDBENCH_SET: [Workload; 5] = [
    Workload {
        name: "4K random read",
        pattern: Pattern::RandRead,
        io_bytes: 4096,
        seed_figure: "x119.5 IOPS, latency 0.8%",
    },
    Workload {
        name: "4K random write",
        pattern: Pattern::RandWrite,
        io_bytes: 4096,
        seed_figure: "x86.8 IOPS, latency 1.2%",
    },
    Workload {
        name: "4K 70/30 read/write",
        pattern: Pattern::Mix { read_pct: 70 },
        io_bytes: 4096,
        seed_figure: "(figure only)",
    },
    Workload {
        name: "512K sequential read",
        pattern: Pattern::SeqRead,
        io_bytes: 512 * 1024,
        seed_figure: "-2.8% bandwidth",
    },
    Workload {
        name: "512K sequential write",
        pattern: Pattern::SeqWrite,
        io_bytes: 512 * 1024,
        seed_figure: "-5.6% bandwidth",
    },
];

/// Throughput and latency of one run.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Metrics {
    /// Completed requests.
    pub ops: u64,
    /// Requests per second.
    pub iops: f64,
    /// MB/s (10^6 bytes).
    pub mb_s: f64,
    /// Average latency, microseconds.
    pub avg_us: f64,
    /// 99th percentile latency, microseconds.
    pub p99_us: f64,
}

/// One row of the Vdbench table.
#[derive(Debug, Clone)]
pub struct Row {
    /// The workload.
    pub workload: Workload,
    /// Bare HDD.
    pub bare: Metrics,
    /// HDD behind the cache.
    pub cached: Metrics,
    /// Read hit share on the cached device during measurement, percent.
    pub read_hit_pct: f64,
}

impl Row {
    /// Cached IOPS over bare IOPS.
    pub fn iops_ratio(&self) -> f64 {
        self.cached.iops / self.bare.iops.max(1e-9)
    }

    /// Bandwidth change through the cache, percent (negative = loss).
    pub fn bandwidth_change_pct(&self) -> f64 {
        (self.cached.mb_s / self.bare.mb_s.max(1e-9) - 1.0) * 100.0
    }
}

/// Dirty share and write throughput over time for one cleaning setup.
#[derive(Debug, Clone)]
pub struct DirtySeries {
    /// Setup name (`alru`, `acp`, `nop`, `alru + dirty target 50%`).
    pub label: String,
    /// (seconds, dirty percent, completed write IOPS in the interval).
    pub points: Vec<(f64, f64, f64)>,
}

/// Everything the study measured.
#[derive(Debug, Clone)]
pub struct CacheStudyReport {
    /// The configuration used.
    pub config: CacheStudyConfig,
    /// One row per Vdbench workload.
    pub rows: Vec<Row>,
    /// One series per cleaning setup.
    pub dirty: Vec<DirtySeries>,
}

fn seed_cache_config() -> CacheConfig {
    let mut c = CacheConfig {
        mode: CacheMode::Wb,
        line_bytes: 4096,
        ..Default::default()
    };
    c.seq_cutoff.policy = SeqCutoffPolicy::Always;
    c.seq_cutoff.threshold_bytes = 16 * 1024;
    c.seq_cutoff.max_streams = 64;
    c.cleaning.alru.activity_threshold_ms = 1000;
    c
}

struct Devices {
    hdd: Profile,
    nvme: Profile,
}

impl Devices {
    fn emulated(&self, bytes: u64, p: &Profile) -> Result<Arc<dyn BlockDevice>, StudyError> {
        let mem: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(bytes, 512)?);
        Ok(Arc::new(DilatedDevice::new(mem, p)?))
    }

    async fn cached(
        &self,
        cfg: &CacheStudyConfig,
        cache_bytes: u64,
        cache_cfg: CacheConfig,
    ) -> Result<Arc<CacheDevice>, StudyError> {
        let core = self.emulated(cfg.core_bytes, &self.hdd)?;
        let cache = self.emulated(cache_bytes, &self.nvme)?;
        let classes = IoClassTable::parse_csv(SEED_IOCLASS_CSV)?;
        Ok(Arc::new(
            CacheDevice::create(cache, core, cache_cfg, classes)
                .await?
                .with_clock(Arc::new(DilatedClock::new())),
        ))
    }
}

/// Model milliseconds as a tokio duration.
fn model_ms(ms: u64) -> Duration {
    Duration::from_millis(ms).saturating_mul(DILATION)
}

/// Runs cleaning rounds on model time until aborted or a device error.
fn spawn_cleaner(dev: &Arc<CacheDevice>) -> tokio::task::JoinHandle<()> {
    let weak = Arc::downgrade(dev);
    tokio::spawn(async move {
        while let Some(dev) = weak.upgrade() {
            let now = dev.now_ms();
            let Ok(rep) = dev.clean_step(now).await else {
                return;
            };
            drop(dev);
            if rep.cleaned_lines == 0 {
                tokio::time::sleep(model_ms(rep.next_wake_ms.saturating_sub(now).max(1))).await;
            } else {
                tokio::task::yield_now().await;
            }
        }
    })
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let i = sat_usize(((sorted.len() as f64 - 1.0) * p).round());
    sorted[i.min(sorted.len() - 1)]
}

async fn drive(
    dev: Arc<dyn BlockDevice>,
    w: Workload,
    cfg: &CacheStudyConfig,
    measure_ms: u64,
) -> Result<Metrics, StudyError> {
    let start = Instant::now();
    let end = start + model_ms(measure_ms);
    let blocks = cfg.working_set_bytes / w.io_bytes as u64;
    let region = (cfg.core_bytes / cfg.workers as u64) / w.io_bytes as u64 * w.io_bytes as u64;
    if blocks == 0 || region < w.io_bytes as u64 {
        return Err(StudyError::Param(format!(
            "{}: working set or per-worker region smaller than one request",
            w.name
        )));
    }
    let mut tasks = Vec::new();
    for worker in 0..cfg.workers as u64 {
        let dev = dev.clone();
        let seed = cfg.seed ^ (worker << 32) ^ w.io_bytes as u64;
        tasks.push(tokio::spawn(async move {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let mut buf = vec![0u8; w.io_bytes];
            let data = vec![0xA5u8; w.io_bytes];
            let mut lat_ns = Vec::new();
            let mut in_window = 0u64;
            let mut seq = 0u64;
            while Instant::now() < end {
                let random = rng.random_range(0..blocks) * w.io_bytes as u64;
                let seq_off = worker * region + seq % region;
                seq += w.io_bytes as u64;
                let t0 = Instant::now();
                match w.pattern {
                    Pattern::RandRead => dev.read(random, &mut buf).await?,
                    Pattern::RandWrite => dev.write(random, &data).await?,
                    Pattern::Mix { read_pct } => {
                        if rng.random_range(0..100) < read_pct {
                            dev.read(random, &mut buf).await?
                        } else {
                            dev.write(random, &data).await?
                        }
                    }
                    Pattern::SeqRead => dev.read(seq_off, &mut buf).await?,
                    Pattern::SeqWrite => dev.write(seq_off, &data).await?,
                }
                let model_ns = t0.elapsed().as_nanos() / u128::from(DILATION);
                // Every request's latency counts (starved ones too); throughput counts only
                // requests completed inside the window.
                in_window += u64::from(Instant::now() <= end);
                lat_ns.push(u64::try_from(model_ns).unwrap_or(u64::MAX));
            }
            Ok::<_, BlockDevError>((lat_ns, in_window))
        }));
    }
    let mut all = Vec::new();
    let mut ops = 0;
    for t in tasks {
        let (lat, n) = t
            .await
            .map_err(|e| StudyError::Param(format!("worker failed: {e}")))??;
        all.extend(lat);
        ops += n;
    }
    let secs = (measure_ms as f64 / 1000.0).max(1e-9);
    all.sort_unstable();
    let avg_ns = all.iter().map(|&x| x as f64).sum::<f64>() / (all.len().max(1) as f64);
    Ok(Metrics {
        ops,
        iops: ops as f64 / secs,
        mb_s: ops as f64 * w.io_bytes as f64 / secs / 1e6,
        avg_us: avg_ns / 1e3,
        p99_us: percentile(&all, 0.99) as f64 / 1e3,
    })
}

/// Reads every block of the working set once (random order, all workers) so the random-read
/// measurement runs at 100% hits, as in the seed.
async fn warm_up(dev: &Arc<CacheDevice>, cfg: &CacheStudyConfig) -> Result<(), StudyError> {
    let blocks = cfg.working_set_bytes / 4096;
    let mut order: Vec<u64> = (0..blocks).collect();
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
    for i in (1..order.len()).rev() {
        order.swap(i, rng.random_range(0..=i));
    }
    let order = Arc::new(order);
    let mut tasks = Vec::new();
    for w in 0..cfg.workers {
        let (dev, order, n) = (dev.clone(), order.clone(), cfg.workers);
        tasks.push(tokio::spawn(async move {
            let mut buf = vec![0u8; 4096];
            for b in order.iter().skip(w).step_by(n) {
                dev.read(b * 4096, &mut buf).await?;
            }
            Ok::<_, BlockDevError>(())
        }));
    }
    for t in tasks {
        t.await
            .map_err(|e| StudyError::Param(format!("warm-up failed: {e}")))??;
    }
    Ok(())
}

async fn vdbench_row(
    devs: &Devices,
    cfg: &CacheStudyConfig,
    w: Workload,
) -> Result<Row, StudyError> {
    let bare = drive(
        devs.emulated(cfg.core_bytes, &devs.hdd)?,
        w,
        cfg,
        cfg.bare_measure_ms,
    )
    .await?;
    let cache = devs
        .cached(cfg, cfg.cache_bytes, seed_cache_config())
        .await?;
    if matches!(w.pattern, Pattern::RandRead | Pattern::Mix { .. }) {
        warm_up(&cache, cfg).await?;
    }
    let before = cache.stats().requests;
    let cleaner = spawn_cleaner(&cache);
    let dev: Arc<dyn BlockDevice> = cache.clone();
    let cached = drive(dev, w, cfg, cfg.measure_ms).await?;
    cleaner.abort();
    let after = cache.stats().requests;
    if std::env::var("STUDY_DEBUG").is_ok() {
        eprintln!("{}: {}", w.name, cache.stats());
    }
    let hits = after.read_hits - before.read_hits;
    let reads = hits
        + (after.read_misses - before.read_misses)
        + (after.read_partial_hits - before.read_partial_hits)
        + (after.read_pass_through - before.read_pass_through);
    Ok(Row {
        workload: w,
        bare,
        cached,
        read_hit_pct: if reads == 0 {
            0.0
        } else {
            hits as f64 * 100.0 / reads as f64
        },
    })
}

async fn dirty_run(
    devs: &Devices,
    cfg: &CacheStudyConfig,
    label: &str,
    cache_cfg: CacheConfig,
) -> Result<DirtySeries, StudyError> {
    let cache = devs.cached(cfg, cfg.dirty_cache_bytes, cache_cfg).await?;
    let cleaner = spawn_cleaner(&cache);
    let start = Instant::now();
    let end = start + model_ms(cfg.dirty_run_ms);
    let done = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let interval = Duration::from_nanos(1_000_000_000 * cfg.workers as u64 / cfg.dirty_write_iops)
        .saturating_mul(DILATION);
    let span = cfg.core_bytes / 4096;
    let mut tasks = Vec::new();
    for w in 0..cfg.workers as u64 {
        let (dev, done) = (cache.clone(), done.clone());
        let seed = cfg.seed ^ (w << 40);
        tasks.push(tokio::spawn(async move {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let data = vec![0x5Au8; 4096];
            let mut next = start + interval.mul_f64(w as f64 / 32.0);
            while Instant::now() < end {
                tokio::time::sleep_until(next).await;
                next += interval;
                dev.write(rng.random_range(0..span) * 4096, &data).await?;
                done.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            Ok::<_, BlockDevError>(())
        }));
    }
    let mut points = Vec::new();
    let mut last_done = 0;
    let mut t = start;
    while t < end {
        t += model_ms(cfg.dirty_sample_ms);
        tokio::time::sleep_until(t).await;
        let d = done.load(std::sync::atomic::Ordering::Relaxed);
        let iops = (d - last_done) as f64 * 1000.0 / cfg.dirty_sample_ms as f64;
        last_done = d;
        points.push((
            (t - start).as_secs_f64() / f64::from(DILATION),
            cache.stats().dirty_pct(),
            iops,
        ));
    }
    for task in tasks {
        task.await
            .map_err(|e| StudyError::Param(format!("writer failed: {e}")))??;
    }
    cleaner.abort();
    Ok(DirtySeries {
        label: label.to_string(),
        points,
    })
}

/// The cleaning setups compared in the dirty-over-time runs.
pub fn cleaning_setups() -> Vec<(String, CacheConfig)> {
    let mut out = Vec::new();
    for (label, policy, target) in [
        ("alru (seed: activity 1 s)", CleaningPolicyKind::Alru, 0u8),
        ("acp", CleaningPolicyKind::Acp, 0),
        ("nop", CleaningPolicyKind::Nop, 0),
        ("alru + dirty target 50%", CleaningPolicyKind::Alru, 50),
    ] {
        let mut c = seed_cache_config();
        c.cleaning.policy = policy;
        c.cleaning.dirty_target_pct = target;
        out.push((label.to_string(), c));
    }
    out
}

/// Runs the whole study on a paused (virtual-time) runtime; `progress` is told each step.
pub fn run(
    cfg: &CacheStudyConfig,
    progress: &mut dyn FnMut(&str),
) -> Result<CacheStudyReport, StudyError> {
    cfg.validate()?;
    let devs = Devices {
        hdd: Profile::load(&cfg.hdd_profile)?,
        nvme: Profile::load(&cfg.nvme_profile)?,
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()?;
    let mut rows = Vec::new();
    for w in VDBENCH_SET {
        progress(w.name);
        rows.push(rt.block_on(vdbench_row(&devs, cfg, w))?);
    }
    let mut dirty = Vec::new();
    for (label, c) in cleaning_setups() {
        progress(&format!("dirty over time: {label}"));
        dirty.push(rt.block_on(dirty_run(&devs, cfg, &label, c))?);
    }
    Ok(CacheStudyReport {
        config: cfg.clone(),
        rows,
        dirty,
    })
}

/// The report as a Markdown table with the seed's figures side by side.
pub fn markdown(r: &CacheStudyReport) -> String {
    let mut s = String::new();
    s.push_str("| workload | bare HDD IOPS | cached IOPS | ratio | bare MB/s | cached MB/s | bandwidth change | bare avg / p99 us | cached avg / p99 us | read hits | seed 004 |\n");
    s.push_str("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n");
    for row in &r.rows {
        s.push_str(&format!(
            "| {} | {:.0} | {:.0} | x{:.1} | {:.1} | {:.1} | {:+.2}% | {:.0} / {:.0} | {:.0} / {:.0} | {:.1}% | {} |\n",
            row.workload.name,
            row.bare.iops,
            row.cached.iops,
            row.iops_ratio(),
            row.bare.mb_s,
            row.cached.mb_s,
            row.bandwidth_change_pct(),
            row.bare.avg_us,
            row.bare.p99_us,
            row.cached.avg_us,
            row.cached.p99_us,
            row.read_hit_pct,
            row.workload.seed_figure,
        ));
    }
    s
}

/// Writes the dirty-percent and write-IOPS-over-time plots.
pub fn plot_dirty(
    r: &CacheStudyReport,
    dirty_png: &Path,
    iops_png: &Path,
) -> Result<(), StudyError> {
    let series = |f: fn(&(f64, f64, f64)) -> (f64, f64)| -> Vec<Series> {
        r.dirty
            .iter()
            .map(|d| Series {
                label: d.label.clone(),
                points: d.points.iter().map(f).collect(),
            })
            .collect()
    };
    line_chart(
        dirty_png,
        "Dirty share of the cache during 4 KiB random writes",
        "time (s, virtual)",
        "dirty %",
        &series(|p| (p.0, p.1)),
        (1000, 600),
    )?;
    line_chart(
        iops_png,
        "Completed 4 KiB random writes per second",
        "time (s, virtual)",
        "IOPS",
        &series(|p| (p.0, p.2)),
        (1000, 600),
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> CacheStudyConfig {
        CacheStudyConfig {
            core_bytes: 32 << 20,
            cache_bytes: 8 << 20,
            working_set_bytes: 2 << 20,
            workers: 8,
            measure_ms: 200,
            bare_measure_ms: 500,
            dirty_cache_bytes: 2 << 20,
            dirty_write_iops: 2000,
            dirty_run_ms: 1000,
            dirty_sample_ms: 100,
            ..Default::default()
        }
    }

    #[test]
    fn cached_random_io_beats_bare_hdd_and_sequential_passes_through() {
        let mut steps = Vec::new();
        let r = run(&small(), &mut |s| steps.push(s.to_string())).unwrap();
        assert_eq!(steps.len(), 9);
        let by = |n: &str| {
            r.rows
                .iter()
                .find(|x| x.workload.name == n)
                .unwrap()
                .clone()
        };
        let rr = by("4K random read");
        assert!(rr.read_hit_pct > 99.9, "{rr:?}");
        assert!(rr.iops_ratio() > 20.0, "{rr:?}");
        let rw = by("4K random write");
        assert!(rw.iops_ratio() > 20.0, "{rw:?}");
        let sr = by("512K sequential read");
        assert!(sr.bandwidth_change_pct().abs() < 10.0, "{sr:?}");
        assert_eq!(r.dirty.len(), 4);
        let nop = &r.dirty[2];
        assert!(
            nop.points.last().unwrap().1 > 50.0,
            "nop fills with dirty lines: {nop:?}"
        );
        let table = markdown(&r);
        assert!(table.contains("x119.5") && table.lines().count() == 7);
    }

    #[test]
    fn invalid_parameters_are_rejected() {
        let mut c = small();
        c.workers = 0;
        assert!(matches!(run(&c, &mut |_| {}), Err(StudyError::Param(_))));
        let mut c = small();
        c.working_set_bytes = c.core_bytes * 2;
        assert!(matches!(run(&c, &mut |_| {}), Err(StudyError::Param(_))));
    }
}
