//! Seed 000's recovery study, measured on a real cluster: what a client sees while an OSD is
//! backfilled, per device set and scheduler, and how fast the backfill goes.
//!
//! This module owns the figures and their presentation only (sans-IO): the `cairn study
//! recovery` command runs the cluster, the client and the OSD that returns, and hands each
//! run's samples here. The figures are seed 000's: client IOPS and mean / p95 / p99 / p99.5
//! latency during recovery, recovered objects per second and recovery bandwidth, the client's
//! IOPS on the same cluster before the OSD failed (the seed's baseline), and the degraded and
//! misplaced object copies over time. Runs repeated with the same setting are summarized as
//! their mean and spread, beside the seed's own figures ([`crate::seed000`]).

use crate::plot::{line_chart, PlotError, Series};
use crate::seed000;
use cairn_convert::sat_usize;
use std::fmt::Write as _;
use std::path::Path;

/// One client operation that completed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OpSample {
    /// When it completed, in seconds from the start of its phase.
    pub done_s: f64,
    /// How long it took, in milliseconds.
    pub latency_ms: f64,
}

/// The cluster's recovery counters (summed over the OSDs) at one moment of the recovery phase.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct RecoveryProgress {
    /// Seconds since the OSD was marked in.
    pub at_s: f64,
    /// Objects moved by recovery so far (each push or pull of one object to one copy).
    pub objects: u64,
    /// Bytes they carried.
    pub bytes: u64,
    /// PGs not active+clean.
    pub unclean_pgs: u64,
    /// Object copies missing (Ceph's degraded objects); None when not sampled this time.
    pub degraded: Option<u64>,
    /// Object copies serving away from their up set (Ceph's misplaced objects); None when
    /// not sampled this time.
    pub misplaced: Option<u64>,
}

/// Everything measured in one run of one scheduler on one device set.
#[derive(Debug, Clone, Default)]
pub struct RecoveryRun {
    /// Device set label (`nvme`, `hdd-db`, `hdd`, or a profile name).
    pub devices: String,
    /// Scheduler label (e.g. `wpq`, `mclock high_client_ops`).
    pub scheduler: String,
    /// Which repetition of its setting this is, from 1.
    pub run: usize,
    /// Client operations on the healthy cluster before the OSD failed, from that phase's start.
    pub baseline_ops: Vec<OpSample>,
    /// Length of the baseline phase, in seconds.
    pub baseline_s: f64,
    /// The capacity, in 4 KiB IOPS, each OSD's scheduler charged requests against during
    /// recovery when the study set it (from the baseline, as seed 000 does); None when the
    /// OSDs kept their own.
    pub capacity_iops: Option<f64>,
    /// Client operations from the moment the OSD was marked in.
    pub ops: Vec<OpSample>,
    /// Client operations that failed (the client's own deadline passed).
    pub failed_ops: u64,
    /// Recovery counters, sampled through the recovery phase; the first one is taken as the OSD
    /// is marked in.
    pub progress: Vec<RecoveryProgress>,
    /// When every PG was active+clean again; None if the run ended first.
    pub recovered_at_s: Option<f64>,
    /// When the client stopped, in seconds since the OSD was marked in.
    pub ended_s: f64,
}

/// Seed 000's figures for one run.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RunSummary {
    /// Device set label.
    pub devices: String,
    /// Scheduler label.
    pub scheduler: String,
    /// Repetition, from 1.
    pub run: usize,
    /// Client IOPS before the failure.
    pub baseline_iops: f64,
    /// Client p99 latency before the failure, ms.
    pub baseline_p99_ms: f64,
    /// Client IOPS during recovery.
    pub client_iops: f64,
    /// The fewest client operations completed in one whole second of the recovery window.
    pub worst_second_iops: f64,
    /// The client's reservation in IOPS as the seed states it (the profile's client share of
    /// the baseline); None for a scheduler without reservations.
    pub reservation_iops: Option<f64>,
    /// Whole seconds of the recovery window in which the client completed fewer operations
    /// than its reservation; None without one.
    pub seconds_below_reservation: Option<usize>,
    /// Mean client latency during recovery, ms.
    pub mean_ms: f64,
    /// Median client latency during recovery, ms.
    pub p50_ms: f64,
    /// 95th percentile, ms.
    pub p95_ms: f64,
    /// 99th percentile, ms.
    pub p99_ms: f64,
    /// 99.5th percentile, ms.
    pub p99_5_ms: f64,
    /// Longest, ms.
    pub max_ms: f64,
    /// Client operations that failed during recovery.
    pub failed_ops: u64,
    /// Seconds from marking the OSD in to every PG clean (None: not finished).
    pub recovery_s: Option<f64>,
    /// Objects recovered in the window.
    pub objects: u64,
    /// Objects recovered per second.
    pub objects_per_s: f64,
    /// Recovery bandwidth, MiB/s.
    pub mib_per_s: f64,
    /// Most degraded object copies seen during the recovery.
    pub peak_degraded: u64,
    /// Most misplaced object copies seen during the recovery.
    pub peak_misplaced: u64,
    /// The capacity each OSD's scheduler charged requests against, when the study set it.
    pub capacity_iops: Option<f64>,
}

impl RunSummary {
    /// Client IOPS during recovery as a share of the baseline (None without a baseline).
    pub fn kept(&self) -> Option<f64> {
        (self.baseline_iops > 0.0).then(|| self.client_iops / self.baseline_iops)
    }
}

/// The value at fraction `p` of `sorted` (nearest rank); 0 for no values.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = sat_usize(((sorted.len() as f64 - 1.0) * p.clamp(0.0, 1.0)).round());
    sorted[rank]
}

impl RecoveryRun {
    /// End of the recovery window: recovery's end, or the run's if it never finished.
    pub fn window_s(&self) -> f64 {
        self.recovered_at_s.unwrap_or(self.ended_s).max(1e-3)
    }

    /// Seed 000's figures over the recovery window (client ops completed in it).
    pub fn summary(&self) -> RunSummary {
        let window = self.window_s();
        let mut lat: Vec<f64> = self
            .ops
            .iter()
            .filter(|o| o.done_s <= window)
            .map(|o| o.latency_ms)
            .collect();
        lat.sort_by(f64::total_cmp);
        let mut baseline: Vec<f64> = self.baseline_ops.iter().map(|o| o.latency_ms).collect();
        baseline.sort_by(f64::total_cmp);
        let first = self.progress.first();
        let last = self
            .progress
            .iter()
            .rev()
            .find(|p| p.at_s <= window + 1e-9)
            .or(self.progress.last());
        let (objects, bytes) = match (first, last) {
            (Some(a), Some(b)) => (
                b.objects.saturating_sub(a.objects),
                b.bytes.saturating_sub(a.bytes),
            ),
            _ => (0, 0),
        };
        // Whole seconds inside the window only: the last, partial one would look starved.
        let whole_seconds = sat_usize(window.floor());
        let per_second: Vec<f64> = self
            .client_per_second()
            .iter()
            .take(whole_seconds)
            .map(|p| p.1)
            .collect();
        let worst_second_iops = per_second
            .iter()
            .copied()
            .min_by(f64::total_cmp)
            .unwrap_or(0.0);
        let baseline_iops = self.baseline_ops.len() as f64 / self.baseline_s.max(1e-3);
        let reservation_iops =
            seed000::client_reservation_share(&self.scheduler).map(|share| share * baseline_iops);
        // No whole second (a recovery shorter than one): nothing to count.
        let seconds_below_reservation = reservation_iops
            .filter(|_| !per_second.is_empty())
            .map(|r| per_second.iter().filter(|&&iops| iops < r).count());
        let peak = |pick: fn(&RecoveryProgress) -> Option<u64>| {
            self.progress.iter().filter_map(pick).max().unwrap_or(0)
        };
        RunSummary {
            devices: self.devices.clone(),
            scheduler: self.scheduler.clone(),
            run: self.run,
            baseline_iops,
            baseline_p99_ms: percentile(&baseline, 0.99),
            client_iops: lat.len() as f64 / window,
            worst_second_iops,
            reservation_iops,
            seconds_below_reservation,
            mean_ms: lat.iter().sum::<f64>() / lat.len().max(1) as f64,
            p50_ms: percentile(&lat, 0.5),
            p95_ms: percentile(&lat, 0.95),
            p99_ms: percentile(&lat, 0.99),
            p99_5_ms: percentile(&lat, 0.995),
            max_ms: lat.last().copied().unwrap_or(0.0),
            failed_ops: self.failed_ops,
            recovery_s: self.recovered_at_s,
            objects,
            objects_per_s: objects as f64 / window,
            mib_per_s: bytes as f64 / window / (1u64 << 20) as f64,
            peak_degraded: peak(|p| p.degraded),
            peak_misplaced: peak(|p| p.misplaced),
            capacity_iops: self.capacity_iops,
        }
    }

    /// Per whole second of the recovery phase: (second's end, client IOPS, client p99 ms). A
    /// last, partial second is left out: its few operations would read as a starved second.
    pub fn client_per_second(&self) -> Vec<(f64, f64, f64)> {
        let secs = sat_usize(self.ended_s.floor().max(0.0));
        let mut buckets: Vec<Vec<f64>> = vec![Vec::new(); secs];
        for o in &self.ops {
            let i = sat_usize(o.done_s.max(0.0));
            if let Some(b) = buckets.get_mut(i) {
                b.push(o.latency_ms);
            }
        }
        buckets
            .into_iter()
            .enumerate()
            .map(|(i, mut l)| {
                l.sort_by(f64::total_cmp);
                ((i + 1) as f64, l.len() as f64, percentile(&l, 0.99))
            })
            .collect()
    }
}

/// How the study was set up, for the report's heading.
#[derive(Debug, Clone, Default)]
pub struct StudySetup {
    /// OSDs in the cluster.
    pub osds: usize,
    /// Each device set's label, what it is, and the objects written to its recovery pool.
    pub device_sets: Vec<(String, String, usize)>,
    /// Size of each recovery object, bytes.
    pub object_bytes: u64,
    /// Client: block size, operations in flight.
    pub client_block: usize,
    /// Client operations in flight.
    pub client_depth: usize,
    /// Runs of each setting.
    pub runs: usize,
}

/// The mean of `values`, and their smallest and largest.
fn spread(values: &[f64]) -> (f64, f64, f64) {
    let mean = values.iter().sum::<f64>() / values.len().max(1) as f64;
    let min = values.iter().copied().fold(f64::INFINITY, f64::min);
    let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (mean, min, max)
}

/// `mean (min–max)` with `digits` decimals, or the mean alone for one value.
fn with_spread(values: &[f64], digits: usize) -> String {
    with_spread_in(values, digits, "")
}

/// As [`with_spread`], each number followed by `unit`.
fn with_spread_in(values: &[f64], digits: usize, unit: &str) -> String {
    if values.is_empty() {
        return "-".into();
    }
    let (mean, min, max) = spread(values);
    match values.len() {
        1 => format!("{mean:.digits$}{unit}"),
        _ => format!("{mean:.digits$}{unit} ({min:.digits$}{unit}–{max:.digits$}{unit})"),
    }
}

/// A seed figure, or `-` where the seed states none.
fn seed_cell(value: Option<f64>, digits: usize) -> String {
    value.map_or("-".into(), |v| format!("{v:.digits$}"))
}

/// The report: setup, one row per run with seed 000's figures, then per device set and
/// scheduler the mean and spread over the runs beside the seed's own figures.
pub fn render_markdown(setup: &StudySetup, runs: &[RecoveryRun]) -> String {
    let mut out = String::new();
    let sets = setup
        .device_sets
        .iter()
        .map(|(label, what, objects)| format!("`{label}` ({what}; {objects} recovery objects)"))
        .collect::<Vec<_>>()
        .join(", ");
    let _ = writeln!(
        out,
        "{} OSDs, pool size 3, on {sets}. While one OSD was down and out, objects of {} KiB were \
         written to the recovery pool; it was then started and marked in, and one client wrote \
         {} B blocks at random offsets of the client pool's objects, {} in flight, until every PG \
         was active+clean again. Baseline: the same client on the healthy cluster before the \
         failure. {} run(s) of each setting, each on a fresh cluster.\n",
        setup.osds,
        setup.object_bytes >> 10,
        setup.client_block,
        setup.client_depth,
        setup.runs,
    );
    out.push_str("### Every run\n\n");
    out.push_str(
        "Reservation: under an mClock profile, its client share of the baseline IOPS, as seed \
         000 states its reservation goal (50% of the baseline under high_client_ops); seconds \
         below it: whole seconds of the recovery in which the client completed fewer \
         operations. Capacity per OSD: the 4 KiB IOPS each OSD's scheduler charged requests \
         against during recovery, set from the baseline as seed 000 sets Ceph's \
         `osd_mclock_max_capacity_iops` (each OSD's share of the baseline's writes and their \
         copies), or the OSD's own (its device profile's, or measured at its boot).\n\n",
    );
    out.push_str(
        "| devices | scheduler | run | baseline IOPS | client IOPS | kept | worst second | reservation | seconds below it | mean ms | p50 | p95 | p99 | p99.5 | max | failed | recovery s | objects | objects/s | MiB/s | peak degraded | peak misplaced | capacity per OSD |\n",
    );
    out.push_str(
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    let summaries: Vec<RunSummary> = runs.iter().map(RecoveryRun::summary).collect();
    for s in &summaries {
        let kept = s
            .kept()
            .map_or("-".to_string(), |k| format!("{:.0}%", 100.0 * k));
        let recovery = s
            .recovery_s
            .map_or("not done".to_string(), |r| format!("{r:.1}"));
        let reservation = s
            .reservation_iops
            .map_or("-".to_string(), |r| format!("{r:.0}"));
        let below = s
            .seconds_below_reservation
            .map_or("-".to_string(), |n| n.to_string());
        let capacity = s
            .capacity_iops
            .map_or("the OSD's own".to_string(), |c| format!("{c:.0} IOPS"));
        let _ = writeln!(
            out,
            "| {} | {} | {} | {:.0} | {:.0} | {kept} | {:.0} | {reservation} | {below} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.1} | {} | {recovery} | {} | {:.1} | {:.1} | {} | {} | {capacity} |",
            s.devices,
            s.scheduler,
            s.run,
            s.baseline_iops,
            s.client_iops,
            s.worst_second_iops,
            s.mean_ms,
            s.p50_ms,
            s.p95_ms,
            s.p99_ms,
            s.p99_5_ms,
            s.max_ms,
            s.failed_ops,
            s.objects,
            s.objects_per_s,
            s.mib_per_s,
            s.peak_degraded,
            s.peak_misplaced,
        );
    }
    out.push_str("\n### Against seed 000 (mean over the runs, min–max)\n\n");
    out.push_str(
        "| devices | scheduler | runs | kept | seed kept | client IOPS | seed IOPS | mean ms | seed mean ms | p99 / baseline p99 | recovery s | seed recovery s | objects/s | seed objects/s | MiB/s | seed MiB/s |\n",
    );
    out.push_str(
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    let mut settings: Vec<(&str, &str)> = Vec::new();
    for s in &summaries {
        if !settings.contains(&(s.devices.as_str(), s.scheduler.as_str())) {
            settings.push((s.devices.as_str(), s.scheduler.as_str()));
        }
    }
    for (devices, scheduler) in settings {
        let group: Vec<&RunSummary> = summaries
            .iter()
            .filter(|s| s.devices == devices && s.scheduler == scheduler)
            .collect();
        let pick = |f: fn(&RunSummary) -> Option<f64>| -> Vec<f64> {
            group.iter().filter_map(|s| f(s)).collect()
        };
        let seed = seed000::figures(devices, scheduler).unwrap_or_default();
        let seed_kept = seed
            .client_iops
            .zip(seed000::baseline_iops(devices))
            .map(|(c, b)| 100.0 * c / b);
        let finished = pick(|s| s.recovery_s);
        let recovery = match finished.len() == group.len() {
            true => with_spread(&finished, 1),
            false => format!("{} not done", group.len() - finished.len()),
        };
        let _ = writeln!(
            out,
            "| {devices} | {scheduler} | {} | {} | {} | {} | {} | {} | {} | {} | {recovery} | {} | {} | {} | {} | {} |",
            group.len(),
            with_spread_in(&pick(|s| s.kept().map(|k| 100.0 * k)), 0, "%"),
            seed_kept.map_or("-".into(), |k| format!("{k:.0}%")),
            with_spread(&pick(|s| Some(s.client_iops)), 0),
            seed_cell(seed.client_iops, 0),
            with_spread(&pick(|s| Some(s.mean_ms)), 1),
            seed_cell(seed.mean_ms, 1),
            with_spread(
                &pick(|s| (s.baseline_p99_ms > 0.0).then(|| s.p99_ms / s.baseline_p99_ms)),
                1
            ),
            seed_cell(seed.recovery_s, 0),
            with_spread(&pick(|s| Some(s.objects_per_s)), 1),
            seed_cell(seed.objects_per_s, 1),
            with_spread(&pick(|s| Some(s.mib_per_s)), 1),
            seed_cell(seed.mib_per_s, 1),
        );
    }
    out
}

/// Draws, per device set, the client's IOPS and p99 latency per second, the objects
/// recovered and the degraded and misplaced copies over time, one line per scheduler (its
/// first run): `recovery-DEVICES-client-iops.png`, `-client-p99.png`, `-objects.png` and
/// `-degraded.png` in `dir`. Returns the file names.
pub fn plot(dir: &Path, runs: &[RecoveryRun]) -> Result<Vec<String>, PlotError> {
    let mut sets: Vec<&str> = Vec::new();
    for r in runs {
        if !sets.contains(&r.devices.as_str()) {
            sets.push(&r.devices);
        }
    }
    let mut files = Vec::new();
    for set in sets {
        let first: Vec<&RecoveryRun> = runs
            .iter()
            .filter(|r| r.devices == set && r.run <= 1)
            .collect();
        files.extend(plot_set(dir, set, &first)?);
    }
    Ok(files)
}

/// The plots of one device set (see [`plot`]).
fn plot_set(dir: &Path, set: &str, runs: &[&RecoveryRun]) -> Result<Vec<String>, PlotError> {
    let size = (1000, 560);
    let name = |what: &str| match set.is_empty() {
        true => format!("recovery-{what}.png"),
        false => format!("recovery-{set}-{what}.png"),
    };
    let per_second: Vec<_> = runs.iter().map(|r| r.client_per_second()).collect();
    // A second in which no write completed has no latency to draw (its IOPS point is 0).
    let series = |pick: fn(&(f64, f64, f64)) -> f64, empty_too: bool| -> Vec<Series> {
        runs.iter()
            .zip(&per_second)
            .map(|(r, ps)| Series {
                label: r.scheduler.clone(),
                points: ps
                    .iter()
                    .filter(|p| empty_too || p.1 > 0.0)
                    .map(|p| (p.0, pick(p)))
                    .collect(),
            })
            .collect()
    };
    let x = "seconds since the OSD was marked in";
    let iops = name("client-iops");
    line_chart(
        &dir.join(&iops),
        &format!("{set}: client IOPS during recovery"),
        x,
        "IOPS",
        &series(|p| p.1, true),
        size,
    )?;
    let p99 = name("client-p99");
    line_chart(
        &dir.join(&p99),
        &format!("{set}: client p99 latency during recovery"),
        x,
        "p99 ms",
        &series(|p| p.2, false),
        size,
    )?;
    let objects = name("objects");
    let recovered: Vec<Series> = runs
        .iter()
        .map(|r| {
            let base = r.progress.first().map_or(0, |p| p.objects);
            Series {
                label: r.scheduler.clone(),
                points: r
                    .progress
                    .iter()
                    .map(|p| (p.at_s, p.objects.saturating_sub(base) as f64))
                    .collect(),
            }
        })
        .collect();
    line_chart(
        &dir.join(&objects),
        &format!("{set}: objects recovered"),
        x,
        "objects",
        &recovered,
        size,
    )?;
    let degraded = name("degraded");
    let copies: Vec<Series> = runs
        .iter()
        .flat_map(|r| {
            let line = |what: &str, pick: fn(&RecoveryProgress) -> Option<u64>| Series {
                label: format!("{} {what}", r.scheduler),
                points: r
                    .progress
                    .iter()
                    .filter_map(|p| pick(p).map(|n| (p.at_s, n as f64)))
                    .collect(),
            };
            [
                line("degraded", |p| p.degraded),
                line("misplaced", |p| p.misplaced),
            ]
        })
        .filter(|s| !s.points.is_empty())
        .collect();
    line_chart(
        &dir.join(&degraded),
        &format!("{set}: degraded and misplaced object copies"),
        x,
        "object copies",
        &copies,
        size,
    )?;
    Ok(vec![iops, p99, objects, degraded])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(done_s: f64, latency_ms: f64) -> OpSample {
        OpSample { done_s, latency_ms }
    }

    fn progress(at_s: f64, objects: u64, bytes: u64) -> RecoveryProgress {
        RecoveryProgress {
            at_s,
            objects,
            bytes,
            unclean_pgs: 0,
            degraded: (at_s < 4.5).then_some(60 - objects),
            misplaced: None,
        }
    }

    fn run() -> RecoveryRun {
        RecoveryRun {
            devices: "hdd-db".into(),
            scheduler: "wpq".into(),
            run: 1,
            baseline_ops: (0..200).map(|i| op(i as f64 / 100.0, 1.0)).collect(),
            baseline_s: 2.0,
            capacity_iops: None,
            // 100 ops in the 4 s window (latency 1..=100 ms), 50 after recovery ended.
            ops: (1..=100)
                .map(|i| op(i as f64 / 25.0, i as f64))
                .chain((0..50).map(|i| op(4.5 + i as f64 * 0.01, 1000.0)))
                .collect(),
            failed_ops: 2,
            progress: vec![
                progress(0.0, 10, 1 << 20),
                progress(2.0, 30, 21 << 20),
                progress(4.0, 50, 41 << 20),
                progress(5.0, 60, 51 << 20),
            ],
            recovered_at_s: Some(4.0),
            ended_s: 5.0,
        }
    }

    #[test]
    fn figures_cover_the_recovery_window_only() {
        let s = run().summary();
        assert_eq!(s.baseline_iops, 100.0);
        assert_eq!(s.client_iops, 25.0, "100 ops in 4 s; the later 50 are out");
        assert_eq!(s.mean_ms, 50.5);
        assert_eq!(s.p50_ms, 51.0);
        assert_eq!(s.p95_ms, 95.0);
        assert_eq!(s.p99_ms, 99.0);
        assert_eq!(s.p99_5_ms, 100.0);
        assert_eq!(s.max_ms, 100.0);
        assert_eq!(s.objects, 40, "counters at 4 s less those at 0 s");
        assert_eq!(s.objects_per_s, 10.0);
        assert_eq!(s.mib_per_s, 10.0);
        assert_eq!(s.recovery_s, Some(4.0));
        assert_eq!(s.failed_ops, 2);
        assert_eq!(s.baseline_p99_ms, 1.0);
        assert_eq!(
            s.worst_second_iops, 24.0,
            "the four whole seconds: 24, 25, 25, 25"
        );
        assert_eq!((s.peak_degraded, s.peak_misplaced), (50, 0));
    }

    #[test]
    fn the_per_second_series_leaves_out_a_last_partial_second() {
        let mut r = run();
        r.ended_s = 4.55;
        let seconds = r.client_per_second();
        assert_eq!(seconds.len(), 4, "4.55 s: four whole seconds");
        assert_eq!(
            seconds.iter().map(|s| s.1).collect::<Vec<_>>(),
            [24.0, 25.0, 25.0, 25.0]
        );
        r.ended_s = 5.0;
        assert_eq!(
            r.client_per_second()[4].1,
            51.0,
            "the fifth second, whole, is kept"
        );
    }

    #[test]
    fn seconds_below_the_profiles_reservation_of_the_baseline_are_counted() {
        let mut r = run();
        r.baseline_s = 4.0;
        r.scheduler = "mclock high_client_ops".into();
        let s = r.summary();
        assert_eq!(s.reservation_iops, Some(25.0), "half of 50 baseline IOPS");
        assert_eq!(
            s.seconds_below_reservation,
            Some(1),
            "of the whole seconds 24, 25, 25, 25 only the first is below 25"
        );
        r.scheduler = "mclock balanced osd_recovery_max_active=1".into();
        let s = r.summary();
        assert_eq!(
            (s.reservation_iops, s.seconds_below_reservation),
            (Some(20.0), Some(0))
        );
        let md = render_markdown(&StudySetup::default(), &[r.clone()]);
        assert!(md.contains("| 24 | 20 | 0 |"), "{md}");
        assert!(md.contains("| the OSD's own |"), "{md}");
        r.capacity_iops = Some(75.4);
        let md = render_markdown(&StudySetup::default(), &[r.clone()]);
        assert!(md.contains("| 75 IOPS |"), "{md}");
        r.scheduler = "wpq".into();
        let s = r.summary();
        assert_eq!(
            (s.reservation_iops, s.seconds_below_reservation),
            (None, None)
        );
        let md = render_markdown(&StudySetup::default(), &[r]);
        assert!(md.contains("| 24 | - | - |"), "{md}");
    }

    #[test]
    fn an_unfinished_recovery_is_measured_to_the_end_of_the_run() {
        let mut r = run();
        r.recovered_at_s = None;
        let s = r.summary();
        assert_eq!(s.client_iops, 30.0, "150 ops in 5 s");
        assert_eq!(s.objects, 50);
        assert_eq!(s.recovery_s, None);
        let md = render_markdown(&StudySetup::default(), &[r]);
        assert!(md.contains("| not done |"), "{md}");
    }

    #[test]
    fn an_empty_run_gives_zeros_not_a_panic() {
        let s = RecoveryRun::default().summary();
        assert_eq!((s.client_iops, s.p99_ms, s.objects), (0.0, 0.0, 0));
        assert!(RecoveryRun::default().client_per_second().is_empty());
        let sub_second = RecoveryRun {
            scheduler: "mclock balanced".into(),
            recovered_at_s: Some(0.5),
            ended_s: 0.5,
            ..RecoveryRun::default()
        }
        .summary();
        assert_eq!(
            sub_second.seconds_below_reservation, None,
            "no whole second to count"
        );
    }

    #[test]
    fn per_second_buckets_count_ops_and_their_p99() {
        let ps = run().client_per_second();
        assert_eq!(ps.len(), 5);
        assert_eq!(ps[0].1, 24.0, "ops done in [0, 1) s: 0.04 .. 0.96");
        assert_eq!(
            ps[4].1,
            50.0 + 1.0,
            "the op at 4.0 s and the 50 after recovery"
        );
        assert_eq!(ps[4].2, 1000.0);
    }

    #[test]
    fn the_report_has_a_row_per_run_and_a_summary_per_setting_beside_the_seed() {
        let mut second = run();
        second.run = 2;
        second.ops.truncate(50);
        let mut other = run();
        other.scheduler = "mclock high_client_ops".into();
        let md = render_markdown(&StudySetup::default(), &[run(), second, other]);
        assert!(
            md.contains("| hdd-db | wpq | 1 | 100 | 25 | 25% | 24 |"),
            "{md}"
        );
        assert!(md.contains("| hdd-db | wpq | 2 | 100 | 12 | 12% |"), "{md}");
        assert!(
            md.contains("| hdd-db | wpq | 2 | 19% (12%–25%) | 91% | 19 (12–25) | 308 |"),
            "{md}"
        );
        assert!(
            md.contains("| hdd-db | mclock high_client_ops | 1 | 25% | 80% | 25 | 271 |"),
            "{md}"
        );
        assert_eq!(
            md.lines().filter(|l| l.starts_with("| ")).count(),
            3 + 1 + 2 + 1
        );
    }

    #[test]
    fn plots_are_written() {
        let dir = std::env::temp_dir().join(format!("cairn-recovery-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut nvme = run();
        nvme.devices = "nvme".into();
        let files = plot(&dir, &[run(), nvme]).unwrap();
        assert_eq!(files.len(), 8, "four plots per device set: {files:?}");
        assert!(files.contains(&"recovery-hdd-db-degraded.png".to_string()));
        for f in files {
            let len = std::fs::metadata(dir.join(&f)).unwrap().len();
            assert!(len > 1000, "{f}: {len} bytes");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
