//! `cairn study ...`: the seeds' experiments on emulated devices, with tables and PNG plots.

mod cache_cluster;
mod cache_timeline;
mod nrs;
mod nrs_ior;
mod nrs_streams;
mod nrs_tbf;
mod recovery;

use anyhow::Context;
use cairn_study::cache::{self, CacheStudyConfig};
use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use std::path::PathBuf;

/// Arguments of `cairn study`.
#[derive(Args)]
pub struct StudyArgs {
    #[command(subcommand)]
    command: StudyCommand,
}

#[derive(Subcommand)]
enum StudyCommand {
    /// Seed 000 on a real local cluster: client latency and IOPS while an OSD is backfilled,
    /// and the recovery rate, per scheduler (each on a fresh cluster of OSD processes).
    Recovery(recovery::RecoveryStudyArgs),
    /// Seed 001 on a real local cluster: per-client throughput of groups of dd streams
    /// (10 x 10, 9 x 11 + 1 x 1) under FIFO and CRR-N, writing and reading.
    Nrs(nrs::NrsStudyArgs),
    /// Seed 004: Vdbench's set on an emulated HDD, bare and behind a write-back NVMe cache
    /// (virtual time), and dirty share over time per cleaning policy; with `--cluster`, on
    /// clusters of OSD processes through block images and fio.
    Cache {
        /// Directory for cache-study.md, cache-dirty.png and cache-write-iops.png
        /// (`--cluster`: cache-cluster.md and its plots).
        #[arg(long, default_value = "study-out")]
        out_dir: PathBuf,
        /// Run the set on real clusters (bare HDD OSDs, then cached ones) through NBD.
        #[arg(long)]
        cluster: bool,
        #[command(flatten)]
        on_cluster: cache_cluster::ClusterCacheArgs,
        /// Concurrent workers (the seed ran 20 threads x queue depth 16).
        #[arg(long, default_value_t = 32)]
        workers: usize,
        /// Virtual milliseconds measured per workload on the cached device.
        #[arg(long, default_value_t = 4000)]
        measure_ms: u64,
        /// Random seed.
        #[arg(long, default_value_t = 4)]
        seed: u64,
    },
}

/// Runs `cairn study`.
pub fn run(args: StudyArgs) -> anyhow::Result<()> {
    match args.command {
        StudyCommand::Recovery(args) => recovery::run(args),
        StudyCommand::Nrs(args) => nrs::run(args),
        StudyCommand::Cache {
            out_dir,
            cluster: true,
            mut on_cluster,
            ..
        } => {
            on_cluster.out_dir = out_dir;
            cache_cluster::run(on_cluster)
        }
        StudyCommand::Cache {
            out_dir,
            workers,
            measure_ms,
            seed,
            ..
        } => {
            let cfg = CacheStudyConfig {
                workers,
                measure_ms,
                bare_measure_ms: measure_ms,
                seed,
                ..Default::default()
            };
            let steps = cache::VDBENCH_SET.len() + cache::cleaning_setups().len();
            let bar = ProgressBar::new(steps as u64);
            bar.set_style(ProgressStyle::with_template("{bar:30} {pos}/{len} {msg}")?);
            let report = cache::run(&cfg, &mut |step| {
                bar.inc(1);
                bar.set_message(step.to_string());
            })?;
            bar.finish_and_clear();
            std::fs::create_dir_all(&out_dir)
                .with_context(|| format!("creating {}", out_dir.display()))?;
            let table = cache::markdown(&report);
            std::fs::write(out_dir.join("cache-study.md"), &table)?;
            cache::plot_dirty(
                &report,
                &out_dir.join("cache-dirty.png"),
                &out_dir.join("cache-write-iops.png"),
            )?;
            println!("{table}");
            for d in &report.dirty {
                let tail: Vec<_> = d.points.iter().rev().take(20).collect();
                let tail_iops = tail.iter().map(|p| p.2).sum::<f64>() / tail.len().max(1) as f64;
                let last = d.points.last().copied().unwrap_or_default();
                let first_full = d.points.iter().find(|p| p.1 >= 99.0).map(|p| p.0);
                println!(
                    "{:<28} dirty at end {:>5.1}%  writes/s over the last 2 s {:>6.0}  100% dirty at {}",
                    d.label,
                    last.1,
                    tail_iops,
                    first_full.map_or("never".to_string(), |t| format!("{t:.1} s"))
                );
            }
            println!("wrote {}", out_dir.display());
            Ok(())
        }
    }
}
