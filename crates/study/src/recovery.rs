//! Seed 000's recovery study, measured on a real cluster: what a client sees while an OSD is
//! backfilled, per scheduler, and how fast the backfill goes.
//!
//! This module owns the figures and their presentation only (sans-IO): the `cairn study
//! recovery` command runs the cluster, the client and the OSD that returns, and hands each
//! scheduler's samples here. The figures are seed 000's: client IOPS and mean / p95 / p99 /
//! p99.5 latency during recovery, recovered objects per second and recovery bandwidth, plus
//! the client's IOPS on the same cluster before the OSD failed (the seed's baseline).

use crate::plot::{line_chart, PlotError, Series};
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
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RecoveryProgress {
    /// Seconds since the OSD was marked in.
    pub at_s: f64,
    /// Objects moved by recovery so far (each push or pull of one object to one copy).
    pub objects: u64,
    /// Bytes they carried.
    pub bytes: u64,
    /// PGs not active+clean.
    pub unclean_pgs: u64,
}

/// Everything measured for one scheduler.
#[derive(Debug, Clone, Default)]
pub struct RecoveryRun {
    /// Scheduler label (e.g. `wpq`, `mclock high_client_ops`).
    pub scheduler: String,
    /// Client operations on the healthy cluster before the OSD failed, from that phase's start.
    pub baseline_ops: Vec<OpSample>,
    /// Length of the baseline phase, in seconds.
    pub baseline_s: f64,
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

/// Seed 000's figures for one scheduler.
#[derive(Debug, Clone, PartialEq)]
pub struct RunSummary {
    /// Scheduler label.
    pub scheduler: String,
    /// Client IOPS before the failure.
    pub baseline_iops: f64,
    /// Client IOPS during recovery.
    pub client_iops: f64,
    /// Mean client latency during recovery, ms.
    pub mean_ms: f64,
    /// Percentiles of client latency during recovery, ms: p50, p95, p99, p99.5, max.
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
}

/// The value at fraction `p` of `sorted` (nearest rank); 0 for no values.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((sorted.len() as f64 - 1.0) * p.clamp(0.0, 1.0)).round() as usize;
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
        RunSummary {
            scheduler: self.scheduler.clone(),
            baseline_iops: self.baseline_ops.len() as f64 / self.baseline_s.max(1e-3),
            client_iops: lat.len() as f64 / window,
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
        }
    }

    /// Per whole second of the recovery phase: (second's end, client IOPS, client p99 ms).
    pub fn client_per_second(&self) -> Vec<(f64, f64, f64)> {
        let secs = self.ended_s.ceil().max(0.0) as usize;
        let mut buckets: Vec<Vec<f64>> = vec![Vec::new(); secs];
        for o in &self.ops {
            let i = o.done_s.max(0.0) as usize;
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
    /// Device profile of every OSD (None: plain files).
    pub profile: Option<String>,
    /// Objects written to the recovery pool while the OSD was out, and their size.
    pub recovery_objects: usize,
    /// Size of each recovery object, bytes.
    pub object_bytes: u64,
    /// Client: block size, operations in flight.
    pub client_block: usize,
    /// Client operations in flight.
    pub client_depth: usize,
}

/// The report: setup, then one row per scheduler with seed 000's figures.
pub fn render_markdown(setup: &StudySetup, runs: &[RecoveryRun]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} OSDs ({}), pool size 3. While one OSD was down and out, {} objects of {} KiB were \
         written to the recovery pool; it was then started and marked in, and one client wrote \
         {} B blocks at random offsets of the client pool's objects, {} in flight, until every PG \
         was active+clean again. Baseline: the same client on the healthy cluster before the \
         failure.\n",
        setup.osds,
        setup.profile.as_deref().unwrap_or("plain device files"),
        setup.recovery_objects,
        setup.object_bytes >> 10,
        setup.client_block,
        setup.client_depth,
    );
    out.push_str(
        "| scheduler | baseline IOPS | client IOPS | kept | mean ms | p50 | p95 | p99 | p99.5 | max | failed | recovery s | objects | objects/s | MiB/s |\n",
    );
    out.push_str("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for s in runs.iter().map(RecoveryRun::summary) {
        let kept = match s.baseline_iops > 0.0 {
            true => format!("{:.0}%", 100.0 * s.client_iops / s.baseline_iops),
            false => "-".into(),
        };
        let recovery = s
            .recovery_s
            .map_or("not done".to_string(), |r| format!("{r:.1}"));
        let _ = writeln!(
            out,
            "| {} | {:.0} | {:.0} | {kept} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.1} | {} | {recovery} | {} | {:.1} | {:.1} |",
            s.scheduler,
            s.baseline_iops,
            s.client_iops,
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
        );
    }
    out
}

/// Draws the client's IOPS and p99 latency per second, and the objects recovered over time,
/// one line per scheduler: `recovery-client-iops.png`, `recovery-client-p99.png` and
/// `recovery-objects.png` in `dir`.
pub fn plot(dir: &Path, runs: &[RecoveryRun]) -> Result<Vec<String>, PlotError> {
    let size = (1000, 560);
    let per_second: Vec<_> = runs.iter().map(RecoveryRun::client_per_second).collect();
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
    let iops = "recovery-client-iops.png";
    line_chart(
        &dir.join(iops),
        "client IOPS during recovery",
        "seconds since the OSD was marked in",
        "IOPS",
        &series(|p| p.1, true),
        size,
    )?;
    let p99 = "recovery-client-p99.png";
    line_chart(
        &dir.join(p99),
        "client p99 latency during recovery",
        "seconds since the OSD was marked in",
        "p99 ms",
        &series(|p| p.2, false),
        size,
    )?;
    let objects = "recovery-objects.png";
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
        &dir.join(objects),
        "objects recovered",
        "seconds since the OSD was marked in",
        "objects",
        &recovered,
        size,
    )?;
    Ok(vec![iops.into(), p99.into(), objects.into()])
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
        }
    }

    fn run() -> RecoveryRun {
        RecoveryRun {
            scheduler: "wpq".into(),
            baseline_ops: (0..200).map(|i| op(i as f64 / 100.0, 1.0)).collect(),
            baseline_s: 2.0,
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
    fn the_report_has_a_row_per_scheduler_with_the_share_kept() {
        let mut other = run();
        other.scheduler = "mclock high_client_ops".into();
        let md = render_markdown(&StudySetup::default(), &[run(), other]);
        assert!(md.contains("| wpq | 100 | 25 | 25% |"), "{md}");
        assert!(md.contains("| mclock high_client_ops |"), "{md}");
        assert_eq!(md.lines().filter(|l| l.starts_with("| ")).count(), 3);
    }

    #[test]
    fn plots_are_written() {
        let dir = std::env::temp_dir().join(format!("cairn-recovery-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let files = plot(&dir, &[run()]).unwrap();
        for f in files {
            let len = std::fs::metadata(dir.join(&f)).unwrap().len();
            assert!(len > 1000, "{f}: {len} bytes");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
