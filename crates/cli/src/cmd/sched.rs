//! `cairn sched`: the QoS scheduler's tools. `simulate` runs a scenario (devices, sources,
//! policy and run-time changes) in virtual time and prints per-source and per-class throughput,
//! wait/latency percentiles and QoS verdicts; `--plot` draws throughput per class over time.

use crate::convert::sat_u64;
use anyhow::{Context, Result};
use cairn_qos::config::PolicyConfig;
use cairn_qos::sim::verdict::mclock_verdicts;
use cairn_qos::sim::{run_with_progress, Scenario, SimReport};
use cairn_qos::{CostModel, QosClass};
use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use std::path::{Path, PathBuf};

/// Scheduler tools.
#[derive(Args)]
pub struct SchedArgs {
    #[command(subcommand)]
    cmd: SchedCmd,
}

#[derive(Subcommand)]
enum SchedCmd {
    /// Run a scenario in virtual time and print throughput, waits and QoS verdicts.
    Simulate(SimulateArgs),
    /// Replay seed 000's recovery experiment in miniature (fifo, wpq, each mClock profile).
    ReplaySeed000(ReplayArgs),
}

#[derive(Args)]
struct ReplayArgs {
    /// Virtual seconds on the NVMe device (the HDD runs 5x longer).
    #[arg(long, default_value_t = 60.0)]
    duration_s: f64,
}

#[derive(Args)]
struct SimulateArgs {
    /// Scenario file (TOML; see scenarios/).
    scenario: PathBuf,
    /// Write a PNG of throughput (IOPS) per class over time.
    #[arg(long)]
    plot: Option<PathBuf>,
}

/// Runs `cairn sched ...`.
pub fn run(args: SchedArgs) -> Result<()> {
    match args.cmd {
        SchedCmd::Simulate(a) => simulate(a),
        SchedCmd::ReplaySeed000(a) => replay(a),
    }
}

fn replay(a: ReplayArgs) -> Result<()> {
    use cairn_qos::sim::replay::{replay, table};
    use cairn_qos::DeviceCapacity;
    if !(a.duration_s.is_finite() && a.duration_s >= 1.0 && a.duration_s <= 600.0) {
        anyhow::bail!("--duration-s must be in [1, 600]");
    }
    for (name, cap, secs) in [
        (
            "NVMe (21500 IOPS)",
            DeviceCapacity::NVME_SEED000,
            a.duration_s,
        ),
        (
            "HDD (340 IOPS)",
            DeviceCapacity::HDD_SEED000,
            a.duration_s * 5.0,
        ),
    ] {
        let bar = ProgressBar::new_spinner();
        bar.set_message(format!(
            "simulating {name}, {secs} s virtual x 7 schedulers"
        ));
        bar.enable_steady_tick(std::time::Duration::from_millis(200));
        let rows = replay(cap, secs)?;
        bar.finish_and_clear();
        println!("{name}, {secs} s virtual\n\n{}", table(&rows));
    }
    Ok(())
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

fn simulate(a: SimulateArgs) -> Result<()> {
    let text = std::fs::read_to_string(&a.scenario)
        .with_context(|| format!("reading {}", a.scenario.display()))?;
    let scn = Scenario::from_toml(&text).with_context(|| format!("in {}", a.scenario.display()))?;
    let bar = ProgressBar::new(sat_u64(scn.duration_s * 1000.0));
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} virtual ms ({elapsed})")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let report = run_with_progress(&scn, &mut |t| bar.set_position(t / 1_000_000))?;
    bar.finish_and_clear();
    print_report(&scn, &report)?;
    if let Some(path) = &a.plot {
        plot(&report, &scn.title, path)?;
        println!(
            "plot: {}: ops/s per class over time, one point per {} s window",
            path.display(),
            scn.window_s
        );
    }
    Ok(())
}

fn print_report(scn: &Scenario, r: &SimReport) -> Result<()> {
    let secs = scn.duration_s;
    println!(
        "{}: policy {} at the end, {:.1} s virtual, device busy {:.1}%",
        if scn.title.is_empty() {
            "scenario"
        } else {
            &scn.title
        },
        r.queue.policy_name(),
        secs,
        r.device_busy_ns as f64 / r.duration_ns as f64 * 100.0
    );
    println!(
        "{:<16} {:<11} {:>7} {:>10} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "source",
        "class",
        "client",
        "IOPS",
        "MiB/s",
        "wait p50",
        "wait p99",
        "lat p50",
        "lat p95",
        "lat p99",
        "lat p99.5"
    );
    for s in &r.sources {
        println!(
            "{:<16} {:<11} {:>7} {:>10.1} {:>9.2} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3}",
            s.name,
            s.class.name(),
            s.client_id,
            s.iops(secs),
            s.completed_bytes as f64 / secs / (1 << 20) as f64,
            ms(s.wait.quantile_ns(0.5)),
            ms(s.wait.quantile_ns(0.99)),
            ms(s.latency.quantile_ns(0.5)),
            ms(s.latency.quantile_ns(0.95)),
            ms(s.latency.quantile_ns(0.99)),
            ms(s.latency.quantile_ns(0.995)),
        );
    }
    println!("(times in ms)");
    let mut clients: std::collections::BTreeMap<u64, f64> = std::collections::BTreeMap::new();
    for s in &r.sources {
        *clients.entry(s.client_id).or_default() += s.completed_bytes as f64 / secs / 1e6;
    }
    if clients.len() > 1 && clients.len() < r.sources.len() {
        let v: Vec<f64> = clients.values().copied().collect();
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        let sd = (v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / v.len() as f64).sqrt();
        println!("per client (sum of its sources), MB/s:");
        for (c, mbs) in &clients {
            println!("  client {c:>6}: {mbs:>10.2}");
        }
        println!(
            "  mean {mean:.2} MB/s, stdev {sd:.3} MB/s ({:.2}% of mean)",
            if mean > 0.0 { sd / mean * 100.0 } else { 0.0 }
        );
    }
    println!("per class:");
    let c = r.queue.counters();
    for class in QosClass::ALL {
        let k = c.class(class);
        if k.enqueued == 0 {
            continue;
        }
        println!(
            "  {:<11} dispatched {:>9} (reservation {}, weight {}, limit-break {}), {:.1}% of device time, wait p99 {:.3} ms, waited {:.1} request-s while throttled",
            class.name(),
            k.dispatched_total(),
            k.dispatched[0],
            k.dispatched[1],
            k.dispatched[2],
            k.dispatched_cost_ns as f64 / r.duration_ns as f64 * 100.0,
            ms(k.wait.quantile_ns(0.99)),
            k.throttled_ns as f64 / 1e9
        );
    }
    if c.refused_to_fifo > 0 {
        println!(
            "  refused by the policy, served by FIFO: {}",
            c.refused_to_fifo
        );
    }
    let issued: u64 = r.sources.iter().map(|s| s.issued).sum();
    let completed: u64 = r.sources.iter().map(|s| s.completed).sum();
    println!(
        "requests: issued {issued}, completed {completed}, still queued or in flight {}",
        r.left_queued
    );
    // Verdicts for the mClock config in force at the end.
    let policy: &PolicyConfig = r.queue.config();
    let cost = CostModel::from_capacity(scn.capacity())?;
    let max_cost = scn
        .sources
        .iter()
        .map(|s| cost.cost_ns(s.size_bytes))
        .max()
        .unwrap_or(0);
    let closed: Vec<bool> = scn
        .sources
        .iter()
        .map(|s| s.depth.is_some() && s.stop_s.is_none() && s.start_s == 0.0)
        .collect();
    let verdicts = mclock_verdicts(r, policy, &closed, max_cost);
    if !verdicts.is_empty() {
        println!("QoS verdicts:");
        for v in verdicts {
            println!("  [{}] {}", if v.pass { "PASS" } else { "FAIL" }, v.what);
        }
    }
    Ok(())
}

/// Draws ops/s per class over time.
fn plot(r: &SimReport, title: &str, path: &Path) -> Result<()> {
    use plotters::prelude::*;
    let windows = r.sources.first().map_or(0, |s| s.window_ops.len());
    let win_s = r.window_ns as f64 / 1e9;
    let mut series: Vec<(QosClass, Vec<f64>)> = Vec::new();
    for class in QosClass::ALL {
        let mut v = vec![0.0; windows];
        let mut any = false;
        for s in r.sources.iter().filter(|s| s.class == class) {
            any = true;
            for (o, x) in v.iter_mut().zip(&s.window_ops) {
                *o += *x as f64 / win_s;
            }
        }
        if any {
            series.push((class, v));
        }
    }
    let ymax = series
        .iter()
        .flat_map(|(_, v)| v.iter().copied())
        .fold(1.0, f64::max)
        * 1.1;
    crate::plot::register_font();
    let root = BitMapBackend::new(path, (1000, 500)).into_drawing_area();
    root.fill(&WHITE)
        .map_err(|e| anyhow::anyhow!("plot: {e}"))?;
    let xmax = windows as f64 * win_s;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(16)
        .x_label_area_size(36)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..xmax, 0f64..ymax)
        .map_err(|e| anyhow::anyhow!("plot: {e}"))?;
    chart
        .configure_mesh()
        .x_desc("time (s)")
        .y_desc("ops/s")
        .draw()
        .map_err(|e| anyhow::anyhow!("plot: {e}"))?;
    for (class, v) in series {
        let color = match class {
            QosClass::Client => BLUE,
            QosClass::Recovery => RED,
            QosClass::BestEffort => GREEN,
            QosClass::Immediate => BLACK,
        };
        chart
            .draw_series(LineSeries::new(
                v.iter()
                    .enumerate()
                    .map(|(i, &y)| ((i as f64 + 0.5) * win_s, y)),
                color.stroke_width(2),
            ))
            .map_err(|e| anyhow::anyhow!("plot: {e}"))?
            .label(format!("{class:?}"))
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| anyhow::anyhow!("plot: {e}"))?;
    root.present().map_err(|e| anyhow::anyhow!("plot: {e}"))?;
    Ok(())
}
