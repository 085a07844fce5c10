//! The caches of a cached cluster over time, for `cairn study cache --cluster`: every second,
//! each OSD's `cache stats` gives its dirty share and the lines its cleaner has written back so
//! far; the timeline holds their mean dirty share and the cleaning rate of all of them, with the
//! workload that ran in each second, and is drawn as two charts over one time axis.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::anyhow;
use cairn_client::Client;
use plotters::prelude::*;

use crate::mon_link::up_osds;

/// How often the caches are sampled.
const PERIOD: Duration = Duration::from_secs(1);

/// One second of the timeline.
#[derive(Clone, Debug, PartialEq)]
pub struct CacheSample {
    /// Seconds since sampling began.
    pub t_s: f64,
    /// The workload running then.
    pub workload: String,
    /// Mean dirty share of the caches, percent.
    pub dirty_pct: f64,
    /// Bytes the cleaners wrote back since the previous sample, over its interval, MiB/s.
    pub cleaning_mib_s: f64,
}

/// Samples the caches of every up OSD until stopped; the workload each sample is labelled
/// with is whatever `phase` says at that moment.
pub struct Sampler {
    stop: Arc<AtomicBool>,
    phase: Arc<Mutex<String>>,
    task: tokio::task::JoinHandle<Vec<CacheSample>>,
}

impl Sampler {
    /// Starts sampling, labelling samples with `phase` until [`Sampler::enter`] changes it.
    pub fn start(client: Arc<Client>, phase: &str) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let phase = Arc::new(Mutex::new(phase.to_string()));
        let task = tokio::spawn(sample(client, stop.clone(), phase.clone()));
        Sampler { stop, phase, task }
    }

    /// Labels the samples from now on with `phase`.
    pub fn enter(&self, phase: &str) {
        *self.phase.lock().unwrap_or_else(|p| p.into_inner()) = phase.to_string();
    }

    /// Stops sampling and returns the timeline.
    pub async fn finish(self) -> anyhow::Result<Vec<CacheSample>> {
        self.stop.store(true, Ordering::Release);
        Ok(self.task.await?)
    }
}

/// The sampling loop.
async fn sample(
    client: Arc<Client>,
    stop: Arc<AtomicBool>,
    phase: Arc<Mutex<String>>,
) -> Vec<CacheSample> {
    let started = Instant::now();
    let mut points = Vec::new();
    // Each OSD's cleaned bytes at its last answer: the rate sums each one's own increase, so
    // an OSD that missed a round, or restarted (its counter from zero), adds no false burst.
    let mut cleaned_at: HashMap<i32, u64> = HashMap::new();
    let mut last_sample: Option<Instant> = None;
    while !stop.load(Ordering::Acquire) {
        let mut shares = Vec::new();
        let mut cleaned_now = 0u64;
        for osd in up_osds(&client) {
            let words = ["cache".to_string(), "stats".to_string()];
            let Ok(text) = client.tell(osd, &words).await else {
                continue;
            };
            let Some(stats) = read_stats(&text) else {
                continue;
            };
            shares.push(stats.dirty_pct);
            let before = cleaned_at.insert(osd, stats.cleaned_bytes);
            cleaned_now = cleaned_now.saturating_add(match before {
                Some(b) if stats.cleaned_bytes >= b => stats.cleaned_bytes - b,
                Some(_) => stats.cleaned_bytes,
                None => 0,
            });
        }
        let now = Instant::now();
        if !shares.is_empty() {
            let cleaning_mib_s = match last_sample {
                Some(then) => {
                    let secs = now.duration_since(then).as_secs_f64().max(1e-3);
                    cleaned_now as f64 / secs / f64::from(1u32 << 20)
                }
                None => 0.0,
            };
            last_sample = Some(now);
            points.push(CacheSample {
                t_s: now.duration_since(started).as_secs_f64(),
                workload: phase.lock().unwrap_or_else(|p| p.into_inner()).clone(),
                dirty_pct: shares.iter().sum::<f64>() / shares.len() as f64,
                cleaning_mib_s,
            });
        }
        tokio::time::sleep(PERIOD).await;
    }
    points
}

/// What one `cache stats` answer says of the cache's state.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StatsRead {
    /// Dirty share, percent.
    pub dirty_pct: f64,
    /// Bytes cleaned since the cache was attached (cleaned lines times the line size).
    pub cleaned_bytes: u64,
}

/// Reads the `Dirty` row's share and line size and the `Cleaned` row's count from the text
/// of `cache stats`; `None` when either row is missing or malformed.
pub fn read_stats(stats: &str) -> Option<StatsRead> {
    let cells = |name: &str| -> Option<Vec<String>> {
        let row = stats
            .lines()
            .find(|l| l.split('|').nth(1).is_some_and(|c| c.trim() == name))?;
        Some(row.split('|').map(|c| c.trim().to_string()).collect())
    };
    let dirty = cells("Dirty")?;
    let dirty_pct: f64 = dirty.get(3)?.parse().ok()?;
    // "lines (4 KiB each)"
    let line_kib: u64 = dirty
        .get(4)?
        .split_once('(')?
        .1
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    let cleaned_lines: u64 = cells("Cleaned")?.get(2)?.parse().ok()?;
    Some(StatsRead {
        dirty_pct,
        cleaned_bytes: cleaned_lines.checked_mul(line_kib.checked_mul(1024)?)?,
    })
}

/// One workload's part of the timeline.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkloadSpan {
    /// The workload.
    pub workload: String,
    /// Seconds it was sampled for.
    pub seconds: f64,
    /// Dirty share at its first sample, percent.
    pub dirty_first_pct: f64,
    /// Dirty share at its last sample, percent.
    pub dirty_last_pct: f64,
    /// MiB the cleaners wrote back during it.
    pub cleaned_mib: f64,
}

/// The timeline cut into its workloads, in order.
pub fn by_workload(samples: &[CacheSample]) -> Vec<WorkloadSpan> {
    let mut out: Vec<WorkloadSpan> = Vec::new();
    let mut prev_t = 0.0;
    for s in samples {
        let seconds = s.t_s - prev_t;
        let cleaned = s.cleaning_mib_s * seconds;
        match out.last_mut() {
            Some(span) if span.workload == s.workload => {
                span.seconds += seconds;
                span.dirty_last_pct = s.dirty_pct;
                span.cleaned_mib += cleaned;
            }
            _ => out.push(WorkloadSpan {
                workload: s.workload.clone(),
                seconds,
                dirty_first_pct: s.dirty_pct,
                dirty_last_pct: s.dirty_pct,
                cleaned_mib: cleaned,
            }),
        }
        prev_t = s.t_s;
    }
    out
}

/// One chart of [`plot`]: caption, unit, top of the axis, and the value it draws.
type Panel = (&'static str, &'static str, f64, fn(&CacheSample) -> f64);

/// Draws the dirty share (top) and the cleaning rate (bottom) over the timeline.
pub fn plot(path: &Path, samples: &[CacheSample]) -> anyhow::Result<()> {
    crate::plot::register_font();
    let root = BitMapBackend::new(path, (900, 620)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow!("{e}"))?;
    let t_max = samples.last().map_or(1.0, |p| p.t_s).max(1.0);
    let rate_max = samples
        .iter()
        .map(|s| s.cleaning_mib_s)
        .fold(1.0f64, f64::max)
        * 1.1;
    let panels = root.split_evenly((2, 1));
    let series: [Panel; 2] = [
        (
            "Dirty share of the OSDs' caches (mean)",
            "dirty %",
            100.0,
            |s| s.dirty_pct,
        ),
        (
            "Written back by the cleaners (all OSDs)",
            "MiB/s",
            rate_max,
            |s| s.cleaning_mib_s,
        ),
    ];
    for (panel, (caption, unit, y_max, value)) in panels.iter().zip(series) {
        let mut chart = ChartBuilder::on(panel)
            .caption(caption, ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(32)
            .y_label_area_size(50)
            .build_cartesian_2d(0f64..t_max, 0f64..y_max)
            .map_err(|e| anyhow!("{e}"))?;
        chart
            .configure_mesh()
            .x_desc("seconds since the random writes began")
            .y_desc(unit)
            .draw()
            .map_err(|e| anyhow!("{e}"))?;
        chart
            .draw_series(LineSeries::new(
                samples.iter().map(|s| (s.t_s, value(s))),
                &BLUE,
            ))
            .map_err(|e| anyhow!("{e}"))?;
        // A mark where each workload begins, named; the names step down so that short
        // workloads' names do not overlap.
        let mut previous = "";
        let mut marks = 0u32;
        for s in samples {
            if s.workload != previous {
                let label_y = y_max * (0.93 - 0.09 * f64::from(marks % 5));
                marks += 1;
                chart
                    .draw_series(std::iter::once(PathElement::new(
                        vec![(s.t_s, 0.0), (s.t_s, y_max)],
                        BLACK.mix(0.3),
                    )))
                    .map_err(|e| anyhow!("{e}"))?;
                chart
                    .draw_series(std::iter::once(Text::new(
                        s.workload.clone(),
                        (s.t_s, label_y),
                        ("sans-serif", 12),
                    )))
                    .map_err(|e| anyhow!("{e}"))?;
                previous = &s.workload;
            }
        }
    }
    root.present().map_err(|e| anyhow!("{e}"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATS: &str = "Cache mode: wb\n\
        | Usage statistics       |        Count |      % | Units\n\
        | Dirty                  |          120 |   12.5 | lines (4 KiB each)\n\
        | Evictions              |            3 |        | lines\n\
        | Cleaned                |          256 |        | lines\n";

    #[test]
    fn the_dirty_share_and_bytes_cleaned_are_read_and_malformed_stats_are_not() {
        assert_eq!(
            read_stats(STATS),
            Some(StatsRead {
                dirty_pct: 12.5,
                cleaned_bytes: 256 * 4096,
            })
        );
        let no_cleaned = STATS.replace("Cleaned", "Clean");
        assert_eq!(read_stats(&no_cleaned), None);
        let bad_size = STATS.replace("(4 KiB each)", "(four KiB each)");
        assert_eq!(read_stats(&bad_size), None);
        assert_eq!(read_stats("| Dirty | 1 | x |"), None);
        assert_eq!(read_stats(""), None);
    }

    #[test]
    fn each_workload_gets_its_seconds_dirty_share_and_cleaning() {
        let s = |t_s: f64, workload: &str, dirty_pct: f64, cleaning_mib_s: f64| CacheSample {
            t_s,
            workload: workload.into(),
            dirty_pct,
            cleaning_mib_s,
        };
        let rows = by_workload(&[
            s(1.0, "write", 5.0, 0.0),
            s(2.0, "write", 9.0, 0.0),
            s(3.0, "mix", 8.0, 2.0),
            s(5.0, "mix", 4.0, 1.5),
        ]);
        let span =
            |workload: &str, seconds, dirty_first_pct, dirty_last_pct, cleaned_mib| WorkloadSpan {
                workload: workload.into(),
                seconds,
                dirty_first_pct,
                dirty_last_pct,
                cleaned_mib,
            };
        assert_eq!(
            rows,
            vec![
                span("write", 2.0, 5.0, 9.0, 0.0),
                span("mix", 3.0, 8.0, 4.0, 2.0 + 3.0),
            ]
        );
    }
}
