//! `cairn cache ...`: create an Open-CAS-style cache on two device files and manage it across
//! invocations (configuration and line metadata live on the cache device, so every command
//! re-attaches): set parameters and the mode, load I/O classes, show statistics, flush, detach,
//! check.

use anyhow::{bail, Context};
use cairn_blockdev::{BlockDevice, FileDevice, FileDeviceOptions};
use cairn_cache::{fsck, CacheConfig, CacheDevice, CacheMode, IoClassTable};
use clap::{Args, Subcommand};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Arguments of `cairn cache`.
#[derive(Args)]
pub struct CacheArgs {
    #[command(subcommand)]
    command: CacheCommand,
}

/// The two devices every command works on.
#[derive(Args)]
struct Devices {
    /// Cache device or file (fast: NVMe).
    #[arg(long)]
    cache: PathBuf,
    /// Core device or file (slow: HDD).
    #[arg(long)]
    core: PathBuf,
}

#[derive(Subcommand)]
enum CacheCommand {
    /// Format a new cache on --cache for --core (casadm -S / -A). Refuses to overwrite an
    /// existing cache without --force.
    Create {
        #[command(flatten)]
        dev: Devices,
        /// Create/extend the cache file to this many MiB.
        #[arg(long)]
        cache_size_mib: Option<u64>,
        /// Create/extend the core file to this many MiB.
        #[arg(long)]
        core_size_mib: Option<u64>,
        /// Cache mode: wt, wb, wa, pt, wo.
        #[arg(long, default_value = "wt")]
        cache_mode: String,
        /// Cache line size in KiB: 4, 8, 16, 32 or 64.
        #[arg(long, default_value_t = 4)]
        cache_line_size: u64,
        /// I/O class CSV file (casadm format) to load at creation.
        #[arg(long)]
        io_class_file: Option<PathBuf>,
        /// Overwrite an existing cache on the cache device.
        #[arg(long)]
        force: bool,
    },
    /// Set parameters (casadm -X): `-n seq-cutoff --set policy=always --set threshold=16`;
    /// `-n cache-mode --set mode=wb [--set flush=yes]` changes the mode (casadm's `--name`
    /// is `--namespace` here: `--name` names the entity a command runs as).
    SetParam {
        #[command(flatten)]
        dev: Devices,
        /// Namespace: cache-mode, seq-cutoff, promotion, promotion-nhit, cleaning,
        /// cleaning-alru, cleaning-acp.
        #[arg(short = 'n', long = "namespace")]
        name: String,
        /// key=value pairs.
        #[arg(long = "set", required = true)]
        set: Vec<String>,
    },
    /// Load an I/O class CSV file (casadm --io-class --load-config).
    LoadIoclass {
        #[command(flatten)]
        dev: Devices,
        /// The CSV file.
        #[arg(long)]
        file: PathBuf,
    },
    /// Occupancy, clean/dirty lines and configuration (casadm -P). Request counters count the
    /// current invocation only.
    Stats {
        #[command(flatten)]
        dev: Devices,
    },
    /// Write every dirty line to the core (casadm -F).
    Flush {
        #[command(flatten)]
        dev: Devices,
    },
    /// Flush dirty data and mark the cache detached: the core alone is then complete.
    Detach {
        #[command(flatten)]
        dev: Devices,
    },
    /// Check the cache metadata without changing anything.
    Fsck {
        #[command(flatten)]
        dev: Devices,
    },
}

/// Runs `cairn cache`.
pub fn run(args: CacheArgs) -> anyhow::Result<()> {
    crate::runtime::command()?.block_on(dispatch(args.command))
}

fn open(path: &Path, size_mib: Option<u64>) -> anyhow::Result<Arc<dyn BlockDevice>> {
    let opts = FileDeviceOptions {
        size_bytes: size_mib.map(|m| m << 20),
        ..Default::default()
    };
    let dev =
        FileDevice::open(path, &opts).with_context(|| format!("opening {}", path.display()))?;
    Ok(Arc::new(dev))
}

async fn attach(d: &Devices) -> anyhow::Result<CacheDevice> {
    let (cache, core) = (open(&d.cache, None)?, open(&d.core, None)?);
    CacheDevice::attach(cache, core).await.with_context(|| {
        format!(
            "attaching cache {} over {}",
            d.cache.display(),
            d.core.display()
        )
    })
}

fn load_classes(path: &Path) -> anyhow::Result<IoClassTable> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    IoClassTable::parse_csv(&text).with_context(|| format!("in {}", path.display()))
}

async fn dispatch(cmd: CacheCommand) -> anyhow::Result<()> {
    match cmd {
        CacheCommand::Create {
            dev,
            cache_size_mib,
            core_size_mib,
            cache_mode,
            cache_line_size,
            io_class_file,
            force,
        } => {
            let cache = open(&dev.cache, cache_size_mib)?;
            let core = open(&dev.core, core_size_mib)?;
            if !force
                && CacheDevice::attach(cache.clone(), core.clone())
                    .await
                    .is_ok()
            {
                bail!(
                    "{} already holds a cache (use --force to overwrite)",
                    dev.cache.display()
                );
            }
            let cfg = CacheConfig {
                mode: cache_mode.parse::<CacheMode>()?,
                line_bytes: cache_line_size.saturating_mul(1024),
                ..Default::default()
            };
            let classes = match io_class_file {
                Some(p) => load_classes(&p)?,
                None => IoClassTable::default(),
            };
            let c = CacheDevice::create(cache, core, cfg, classes).await?;
            let g = c.geometry();
            println!(
                "created cache: {} lines of {} KiB, metadata {} KiB, mode {}",
                g.lines,
                g.line_bytes / 1024,
                g.meta_pages * 4,
                c.config().mode.name()
            );
        }
        CacheCommand::SetParam { dev, name, set } => {
            let c = attach(&dev).await?;
            let mut pairs = Vec::new();
            for kv in &set {
                let (k, v) = kv
                    .split_once('=')
                    .with_context(|| format!("--set {kv:?} is not key=value"))?;
                pairs.push((k.trim(), v.trim()));
            }
            if name == "cache-mode" {
                let mut mode = None;
                let mut flush = true;
                for (k, v) in pairs {
                    match (k, v) {
                        ("mode", v) => mode = Some(v.parse::<CacheMode>()?),
                        ("flush", "yes") => flush = true,
                        ("flush", "no") => flush = false,
                        _ => bail!("cache-mode takes mode=<wt|wb|wa|pt|wo> and flush=<yes|no>"),
                    }
                }
                let mode = mode.context("cache-mode needs mode=...")?;
                c.set_mode(mode, flush).await?;
            } else {
                for (k, v) in pairs {
                    c.set_param(&name, k, v).await?;
                }
            }
            c.flush().await?;
            println!("{}", toml_summary(&c.config())?);
        }
        CacheCommand::LoadIoclass { dev, file } => {
            let classes = load_classes(&file)?;
            let c = attach(&dev).await?;
            c.load_io_classes(classes).await?;
            c.flush().await?;
            println!("loaded {} io classes", c.io_classes().classes().len());
        }
        CacheCommand::Stats { dev } => {
            let c = attach(&dev).await?;
            print!("{}", c.stats());
            println!("{}", toml_summary(&c.config())?);
        }
        CacheCommand::Flush { dev } => {
            let c = attach(&dev).await?;
            let before = c.stats().dirty_lines;
            c.flush_dirty().await?;
            println!("flushed {before} dirty lines");
        }
        CacheCommand::Detach { dev } => {
            let c = attach(&dev).await?;
            let before = c.stats().dirty_lines;
            c.detach().await?;
            println!("detached; {before} dirty lines written to core");
        }
        CacheCommand::Fsck { dev } => {
            let (cache, core) = (open(&dev.cache, None)?, open(&dev.core, None)?);
            let r = fsck(&cache, &core).await?;
            println!(
                "{} lines, {} valid, {} dirty, detached: {}",
                r.lines, r.valid_lines, r.dirty_lines, r.detached
            );
            for p in &r.problems {
                println!("line {}: {}", p.line, p.reason);
            }
            if !r.is_clean() {
                bail!("{} problems", r.problems.len());
            }
        }
    }
    Ok(())
}

fn toml_summary(cfg: &CacheConfig) -> anyhow::Result<String> {
    Ok(toml::to_string(cfg)?)
}
