//! `cairn put|get|rm|stat|ls` and `cairn bench`: object I/O against a running cluster through the
//! client library. `bench` follows `rados bench` (write / seq / rand with a number of ops in
//! flight) and adds latency percentiles.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use bytes::Bytes;
use cairn_client::{Client, ClientError};
use clap::{Args, ValueEnum};

use crate::bench_timeline::{LatencyTimeline, SecondStats};
use crate::convert::{sat_usize, usize_of};
use crate::defaults::DEFAULT_MON;

/// Pool and monitor shared by the data commands.
#[derive(Args, Clone)]
pub struct Target {
    /// Monitor address.
    #[arg(long, default_value = DEFAULT_MON)]
    mon: SocketAddr,
    /// Pool name.
    #[arg(short = 'p', long)]
    pool: String,
}

/// `cairn put -p POOL NAME FILE`.
#[derive(Args)]
pub struct PutArgs {
    #[command(flatten)]
    target: Target,
    /// Object name.
    name: String,
    /// File to store ("-" = stdin).
    file: PathBuf,
}

/// `cairn get -p POOL NAME [FILE]`.
#[derive(Args)]
pub struct GetArgs {
    #[command(flatten)]
    target: Target,
    /// Object name.
    name: String,
    /// Where to write (stdout if absent).
    file: Option<PathBuf>,
}

/// `cairn rm|stat -p POOL NAME`.
#[derive(Args)]
pub struct NameArgs {
    #[command(flatten)]
    target: Target,
    /// Object name.
    name: String,
}

async fn connect(t: &Target) -> anyhow::Result<Client> {
    Client::connect_as(
        t.mon,
        cairn_client::random_client_id(),
        crate::credentials::client_auth()?,
    )
    .await
    .with_context(|| format!("connecting to the monitor at {}", t.mon))
}

/// Refuses `bytes` of data for one object when one operation cannot carry them, naming `what`.
fn check_object_bytes(bytes: u64, what: &str) -> anyhow::Result<()> {
    let max = cairn_client::max_op_data_bytes();
    if bytes > max as u64 {
        bail!("{what} is {bytes} bytes, past the {max} one operation carries (one object per command; the OSDs allow 32 MiB objects by default)");
    }
    Ok(())
}

/// Stores a file as an object (refused before reading when it is larger than one operation
/// carries; standard input is read up to that much and refused past it).
pub fn put(a: PutArgs) -> anyhow::Result<()> {
    let max = cairn_client::max_op_data_bytes() as u64;
    let data = if a.file.as_os_str() == "-" {
        let mut v = Vec::new();
        std::io::Read::read_to_end(&mut std::io::Read::take(std::io::stdin(), max + 1), &mut v)?;
        check_object_bytes(v.len() as u64, "standard input")?;
        v
    } else {
        let len = std::fs::metadata(&a.file)
            .with_context(|| format!("reading {}", a.file.display()))?
            .len();
        check_object_bytes(len, &a.file.display().to_string())?;
        std::fs::read(&a.file).with_context(|| format!("reading {}", a.file.display()))?
    };
    crate::runtime::command()?.block_on(async {
        let c = connect(&a.target).await?;
        let v = c.write_full(&a.target.pool, &a.name, &data).await?;
        eprintln!(
            "stored {} bytes as '{}' (version {v:#x})",
            data.len(),
            a.name
        );
        Ok(())
    })
}

/// Fetches an object.
pub fn get(a: GetArgs) -> anyhow::Result<()> {
    crate::runtime::command()?.block_on(async {
        let c = connect(&a.target).await?;
        let data = c.read(&a.target.pool, &a.name).await?;
        match &a.file {
            Some(p) => {
                std::fs::write(p, &data).with_context(|| format!("writing {}", p.display()))?
            }
            None => std::io::Write::write_all(&mut std::io::stdout(), &data)?,
        }
        Ok(())
    })
}

/// Deletes an object; one that does not exist is an error, as with `rados rm`.
pub fn rm(a: NameArgs) -> anyhow::Result<()> {
    crate::runtime::command()?.block_on(async {
        let client = connect(&a.target).await?;
        Ok(client.remove(&a.target.pool, &a.name).await?)
    })
}

/// Prints an object's size and version.
pub fn stat(a: NameArgs) -> anyhow::Result<()> {
    crate::runtime::command()?.block_on(async {
        let (size, version) = connect(&a.target)
            .await?
            .stat(&a.target.pool, &a.name)
            .await?;
        println!("{} size {size} version {version:#x}", a.name);
        Ok(())
    })
}

/// Benchmark mode.
#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum Mode {
    /// Write new objects.
    Write,
    /// Read the objects a previous `write --no-cleanup` left, in order.
    Seq,
    /// Read them in random order.
    Rand,
}

impl Mode {
    /// The mode as it is written on the command line.
    fn name(self) -> &'static str {
        match self {
            Mode::Write => "write",
            Mode::Seq => "seq",
            Mode::Rand => "rand",
        }
    }
}

/// Bytes of rados bench's "MB": its bandwidth figures are MiB/s under that label, and cairn's
/// are the same unit so the two compare directly.
const MIB: f64 = (1u64 << 20) as f64;

/// `cairn bench -p POOL SECONDS MODE`.
#[derive(Args)]
pub struct BenchArgs {
    #[command(flatten)]
    target: Target,
    /// Duration in seconds.
    seconds: u64,
    /// write, seq or rand.
    mode: Mode,
    /// Object size in bytes.
    #[arg(short = 'b', long = "block-size", default_value_t = 4 << 20)]
    block_size: usize,
    /// Operations in flight.
    #[arg(short = 't', long = "concurrent-ios", default_value_t = 16)]
    threads: usize,
    /// Keep the written objects (for a later seq/rand run).
    #[arg(long = "no-cleanup")]
    no_cleanup: bool,
    /// Worker threads of the client's runtime (1..=64): on a machine with many CPUs, more
    /// let one client keep a fast cluster busy.
    #[arg(long = "client-threads", default_value_t = crate::runtime::COMMAND_THREADS)]
    client_threads: usize,
    /// Also draw the run second by second: `PREFIX-ops.png` (operations per second) and
    /// `PREFIX-latency.png` (p50 and p99 per second, ms).
    #[arg(long = "plot", value_name = "PREFIX")]
    plot: Option<PathBuf>,
}

const BENCH_META: &str = "benchmark_last_metadata";

/// The names a `cairn bench ... write` run gives its objects, as rados bench does
/// (`benchmark_data_HOST_PID_object` then the index): each run writes new objects, so a run's
/// small writes do not overwrite (and free) a previous run's large objects.
fn bench_prefix() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into());
    format!("benchmark_data_{host}_{}_object", std::process::id())
}

/// The metadata a `write --no-cleanup` run leaves for `seq` and `rand`: how many objects it
/// wrote and their name prefix.
fn bench_meta(written: u64, prefix: &str) -> String {
    format!("{written} {prefix}")
}

/// Reads [`bench_meta`] back (a count alone, from before names had a prefix per run, means
/// the old fixed prefix).
fn parse_bench_meta(meta: &str) -> anyhow::Result<(u64, String)> {
    let mut fields = meta.split_whitespace();
    let count = fields
        .next()
        .and_then(|c| c.parse::<u64>().ok())
        .context("bad bench metadata: no object count")?;
    let prefix = fields.next().unwrap_or("bench_").to_string();
    if fields.next().is_some() {
        bail!("bad bench metadata: more than a count and a prefix");
    }
    Ok((count, prefix))
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[sat_usize(((sorted.len() as f64 - 1.0) * p).round())]
}

/// Most operations `cairn bench` keeps in flight (explicit limit; rados bench's default is 16).
const MAX_BENCH_IN_FLIGHT: usize = 4096;

/// Runs the benchmark and prints rados-bench-like totals plus latency percentiles. A write
/// run that fails (an OSD out of space, a timeout) stops every writer and still removes what
/// it wrote, unless `--no-cleanup`, before it reports the error.
pub fn bench(a: BenchArgs) -> anyhow::Result<()> {
    if a.threads == 0 || a.seconds == 0 {
        bail!("seconds and --concurrent-ios must be at least 1");
    }
    if a.threads > MAX_BENCH_IN_FLIGHT {
        bail!(
            "--concurrent-ios {} is past the limit of {MAX_BENCH_IN_FLIGHT}",
            a.threads
        );
    }
    if a.mode == Mode::Write {
        check_object_bytes(a.block_size as u64, "--block-size")?;
    }
    crate::runtime::build(a.client_threads, "--client-threads")?.block_on(async {
        let client = Arc::new(connect(&a.target).await?);
        let pool = a.target.pool.clone();
        // Refused before the progress table starts (each op would fail the same way).
        if let Some(map) = client.map() {
            if map.placement.pool_named(&pool).is_none() {
                bail!("no pool `{pool}`");
            }
        }
        let (objects, prefix) = match a.mode {
            Mode::Write => (0, bench_prefix()),
            _ => {
                let meta = client
                    .read(&pool, BENCH_META)
                    .await
                    .context("no objects from a previous `cairn bench ... write --no-cleanup`")?;
                parse_bench_meta(&String::from_utf8_lossy(&meta))?
            }
        };
        if a.mode != Mode::Write && objects == 0 {
            bail!("the previous write left no objects");
        }
        // One buffer shared by every write (as rados bench reuses its buffer): the client frames
        // it without a copy.
        let block: Bytes = (0..a.block_size)
            .map(|i: usize| i.wrapping_mul(2_654_435_761).to_le_bytes()[0])
            .collect::<Vec<u8>>()
            .into();
        // Shared counters are atomics and each worker keeps its own latencies: at tens of
        // thousands of small ops a second, a lock per op would cost the client CPU it shares
        // with the cluster on a small machine.
        let next = Arc::new(AtomicU64::new(0));
        let done_ops = Arc::new(AtomicU64::new(0));
        let bytes = Arc::new(AtomicU64::new(0));
        let failed = Arc::new(AtomicBool::new(false));
        let started = Instant::now();
        let stop_at = started + Duration::from_secs(a.seconds);
        let timeline = Arc::new(LatencyTimeline::new(started, a.seconds));
        let mut workers = Vec::new();
        for w in 0..a.threads {
            let (client, pool, block, next, done_ops, bytes, prefix, failed, timeline) = (
                client.clone(),
                pool.clone(),
                block.clone(),
                next.clone(),
                done_ops.clone(),
                bytes.clone(),
                prefix.clone(),
                failed.clone(),
                timeline.clone(),
            );
            let mode = a.mode;
            workers.push(tokio::spawn(async move {
                let mut rng = 0x9e37_79b9_7f4a_7c15u64 ^ (w as u64);
                let mut lat = Vec::new();
                while Instant::now() < stop_at && !failed.load(Ordering::Relaxed) {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let t0 = Instant::now();
                    let moved = match mode {
                        Mode::Write => client
                            .write_full_bytes(&pool, &format!("{prefix}{i}"), block.clone())
                            .await
                            .map(|_| block.len()),
                        Mode::Seq => {
                            if i >= objects {
                                break;
                            }
                            client
                                .read_bytes(&pool, &format!("{prefix}{i}"))
                                .await
                                .map(|d| d.len())
                        }
                        Mode::Rand => {
                            rng ^= rng << 13;
                            rng ^= rng >> 7;
                            rng ^= rng << 17;
                            client
                                .read_bytes(&pool, &format!("{prefix}{}", rng % objects))
                                .await
                                .map(|d| d.len())
                        }
                    };
                    let moved = moved.inspect_err(|_| failed.store(true, Ordering::Relaxed))?;
                    let (done, took) = (Instant::now(), t0.elapsed());
                    timeline.record(done, took);
                    lat.push(took.as_secs_f64() * 1000.0);
                    done_ops.fetch_add(1, Ordering::Relaxed);
                    bytes.fetch_add(moved as u64, Ordering::Relaxed);
                }
                anyhow::Ok(lat)
            }));
        }
        // Progress once a second, as rados bench prints it (on stderr: the summary stays clean).
        let (p_ops, p_bytes, p_timeline) = (done_ops.clone(), bytes.clone(), timeline.clone());
        let progress = tokio::spawn(async move {
            eprintln!("  sec   ops   cur MB/s   avg MB/s   cur ops/s   p99 ms");
            let (mut last_ops, mut last_bytes) = (0u64, 0u64);
            for sec in 1.. {
                tokio::time::sleep_until((started + Duration::from_secs(sec)).into()).await;
                let ops = p_ops.load(Ordering::Relaxed);
                let b = p_bytes.load(Ordering::Relaxed);
                let el = started.elapsed().as_secs_f64();
                eprintln!(
                    "  {sec:>3} {ops:>6} {:>10.2} {:>10.2} {:>11} {:>8.2}",
                    (b - last_bytes) as f64 / MIB,
                    b as f64 / MIB / el,
                    ops - last_ops,
                    p_timeline.second(usize_of(sec) - 1).p99_ms
                );
                (last_ops, last_bytes) = (ops, b);
            }
        });
        let mut l = Vec::new();
        let mut first_error = None;
        for w in workers {
            match w.await? {
                Ok(lat) => l.extend(lat),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        progress.abort();
        if let Some(e) = first_error {
            let written = next.load(Ordering::Relaxed);
            if a.mode == Mode::Write && !a.no_cleanup {
                remove_bench_objects(&client, &pool, &prefix, written, a.threads).await?;
            }
            return Err(e.context(format!("bench stopped after {} ops", l.len())));
        }
        let secs = started.elapsed().as_secs_f64();
        l.sort_by(f64::total_cmp);
        let total = bytes.load(Ordering::Relaxed);
        let ops = l.len();
        let written = next.load(Ordering::Relaxed);
        println!("Total time run:         {secs:.3}");
        println!("Total ops:              {ops}");
        println!("Object size:            {}", a.block_size);
        println!("Bandwidth (MB/sec):     {:.3}", total as f64 / secs / MIB);
        println!("Average IOPS:           {:.1}", ops as f64 / secs);
        println!(
            "Average Latency (ms):   {:.3}",
            l.iter().sum::<f64>() / ops.max(1) as f64
        );
        for (name, p) in [("p50", 0.5), ("p95", 0.95), ("p99", 0.99), ("p99.5", 0.995)] {
            println!("Latency {name:<6} (ms):   {:.3}", percentile(&l, p));
        }
        println!(
            "Max latency (ms):       {:.3}",
            l.last().copied().unwrap_or(0.0)
        );
        if let Some(plot_prefix) = &a.plot {
            // Whole seconds only: the last, partial one would read as a drop.
            let seconds = sat_usize(secs.floor()).clamp(1, timeline.len());
            let what = format!(
                "cairn bench {} -b {} -t {}",
                a.mode.name(),
                a.block_size,
                a.threads
            );
            for path in plot_timeline(plot_prefix, &timeline, seconds, &what)? {
                println!("Plot: {}", path.display());
            }
        }
        if a.mode == Mode::Write {
            // Objects 0..written were all attempted; every one completed or the run failed.
            if a.no_cleanup {
                client
                    .write_full(&pool, BENCH_META, bench_meta(written, &prefix).as_bytes())
                    .await?;
            } else {
                remove_bench_objects(&client, &pool, &prefix, written, a.threads).await?;
            }
        }
        Ok(())
    })
}

/// Draws a run's first `seconds` from `timeline`: `PREFIX-ops.png` and `PREFIX-latency.png`
/// (titled with `what`); returns their paths.
fn plot_timeline(
    prefix: &std::path::Path,
    timeline: &LatencyTimeline,
    seconds: usize,
    what: &str,
) -> anyhow::Result<Vec<PathBuf>> {
    use cairn_study::plot::{line_chart, Series};
    let with = |suffix: &str| {
        let mut name = prefix.as_os_str().to_owned();
        name.push(suffix);
        PathBuf::from(name)
    };
    let stats: Vec<(f64, SecondStats)> = (0..seconds)
        .map(|s| (s as f64 + 1.0, timeline.second(s)))
        .collect();
    let series = |label: &str, pick: fn(&SecondStats) -> f64| Series {
        label: label.into(),
        points: stats.iter().map(|(x, st)| (*x, pick(st))).collect(),
    };
    let ops = with("-ops.png");
    line_chart(
        &ops,
        &format!("{what}: operations per second"),
        "second",
        "ops/s",
        &[series("ops/s", |st| st.ops as f64)],
        (900, 500),
    )?;
    let latency = with("-latency.png");
    line_chart(
        &latency,
        &format!("{what}: latency per second"),
        "second",
        "ms",
        &[series("p50", |st| st.p50_ms), series("p99", |st| st.p99_ms)],
        (900, 500),
    )?;
    Ok(vec![ops, latency])
}

/// Removes the `count` objects a write run attempted (`{prefix}0..`; one a failed run never
/// wrote is skipped), `in_flight` at a time as the run wrote them (rados bench's cleanup), and
/// says how long it took.
async fn remove_bench_objects(
    client: &Arc<Client>,
    pool: &str,
    prefix: &str,
    count: u64,
    in_flight: usize,
) -> anyhow::Result<()> {
    let started = Instant::now();
    let next = Arc::new(AtomicU64::new(0));
    let mut workers = Vec::with_capacity(in_flight);
    for _ in 0..in_flight {
        let (client, pool, prefix, next) = (
            client.clone(),
            pool.to_string(),
            prefix.to_string(),
            next.clone(),
        );
        workers.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= count {
                    return anyhow::Ok(());
                }
                // A failed run attempted objects it never wrote: those are already gone.
                match client.remove(&pool, &format!("{prefix}{i}")).await {
                    Ok(()) | Err(ClientError::NotFound(_)) => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }));
    }
    for w in workers {
        w.await??;
    }
    eprintln!(
        "Removed {count} benchmark objects in {:.3} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// `cairn ls -p POOL`.
#[derive(Args)]
pub struct LsArgs {
    /// Monitor address.
    #[arg(long, default_value = DEFAULT_MON)]
    mon: SocketAddr,
    /// Pool name.
    #[arg(short = 'p', long)]
    pool: String,
}

/// Lists every object of a pool.
pub fn ls(args: LsArgs) -> anyhow::Result<()> {
    crate::runtime::command()?.block_on(async {
        let client = crate::mon_link::connect(args.mon).await?;
        let mut names = client.list_objects(&args.pool).await?;
        names.sort();
        for n in names {
            println!("{n}");
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bench_metadata_round_trips_and_bad_metadata_is_refused() {
        let prefix = bench_prefix();
        assert!(
            prefix.starts_with("benchmark_data_")
                && prefix.ends_with(&format!("_{}_object", std::process::id())),
            "{prefix}"
        );
        assert_eq!(
            parse_bench_meta(&bench_meta(42, &prefix)).unwrap(),
            (42, prefix)
        );
        assert_eq!(
            parse_bench_meta("7\n").unwrap(),
            (7, "bench_".to_string()),
            "a count alone is the old fixed prefix"
        );
        for bad in ["", "x y", "3 a b"] {
            assert!(parse_bench_meta(bad).is_err(), "{bad:?} must be refused");
        }
    }
}
