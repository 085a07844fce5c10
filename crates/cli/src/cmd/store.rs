//! `cairn store ...`: benchmark the object store on a file or device (side by side with fio on
//! the same file), measure emulated device profiles, and fsck a store.

use crate::convert::{arg_usize, sat_usize, usize_of};
use anyhow::{bail, Context};
use cairn_blockdev::capacity::{self, Pattern, Workload};
use cairn_blockdev::{
    BlockDevice, EmulatedDevice, FileDevice, FileDeviceOptions, IoEngine, IoKind, Profile,
};
use cairn_store::{DataCrcs, KvLocation, Store, StoreConfig, StoreStats, Transaction};
use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Bytes of one sequential-phase object and write.
const SEQ_OBJECT_BYTES: usize = 4 << 20;
/// Bytes of one random I/O.
const RAND_IO_BYTES: usize = 4096;
/// Largest queue depth the benchmark accepts.
const MAX_QUEUE_DEPTH: usize = 256;
/// Objects removed per transaction when a phase cleans up.
const REMOVE_BATCH: usize = 1024;
/// Most rounds `--rounds` accepts.
const MAX_ROUNDS: u64 = 20;

/// Arguments of `cairn store`.
#[derive(Args)]
pub struct StoreArgs {
    /// Worker threads of the runtime the store runs on, as an OSD's (`cairn osd run
    /// --threads`; default: an OSD's).
    #[arg(long, global = true, default_value_t = crate::runtime::DEFAULT_OSD_THREADS)]
    threads: usize,
    #[command(subcommand)]
    command: StoreCommand,
}

#[derive(Subcommand)]
enum StoreCommand {
    /// 4 MiB sequential writes, as many new 4 MiB objects at each queue depth above 1, 4 KiB
    /// random writes and reads at each queue depth, new 4 KiB objects written and read back
    /// (`--small-objects`); throughput, latency percentiles and
    /// write amplification, with fio on the same file for comparison. Destroys the contents of
    /// DEVICE.
    Bench(Box<BenchArgs>),
    /// Capacity of the emulated device profiles (virtual time), against their sources' figures.
    Capacity {
        /// Profiles to measure (built-in names or TOML paths); all built-ins if omitted.
        #[arg(long)]
        profile: Vec<String>,
    },
    /// Mount a store and check it (`--deep` reads and verifies every block).
    Fsck {
        /// Data device or file.
        #[arg(long)]
        device: PathBuf,
        /// Metadata KV file (default: DEVICE.kv).
        #[arg(long)]
        kv: Option<PathBuf>,
        /// Read every block and verify its checksum.
        #[arg(long)]
        deep: bool,
    },
}

#[derive(Args)]
struct BenchArgs {
    /// Data device or file (created/extended to --size-mib if a regular file).
    #[arg(long)]
    device: PathBuf,
    /// Size of the data file in MiB.
    #[arg(long, default_value_t = 2048)]
    size_mib: u64,
    /// Emulate a device profile on top of the file (hdd-7200, nvme-p3700, nvme-p4510, optane or a
    /// TOML path); fio is then skipped, as it would see the raw file.
    #[arg(long)]
    profile: Option<String>,
    /// Metadata KV file (default: DEVICE.kv).
    #[arg(long)]
    kv: Option<PathBuf>,
    /// MiB written by the sequential phase (4 MiB objects), and again by the 4 MiB phase at each
    /// queue depth above 1 (then read back whole at that depth); the random phases use the
    /// sequential phase's objects.
    #[arg(long, default_value_t = 512)]
    seq_mib: u64,
    /// 4 KiB operations per random phase.
    #[arg(long, default_value_t = 4000)]
    rand_ops: u64,
    /// New 4 KiB objects written at each queue depth above 1, then read back whole as many
    /// times at random from as many concurrent readers: what `cairn bench ... write|rand -b
    /// 4096` asks of one OSD's store (0: no such phases).
    #[arg(long, default_value_t = 0)]
    small_objects: usize,
    /// Queue depths of the random phases (concurrent submitters), comma-separated; each one
    /// above 1 also has a 4 MiB write phase and a 4 MiB read phase.
    #[arg(long, value_delimiter = ',', default_values_t = vec![1usize, 16])]
    queue_depths: Vec<usize>,
    /// Writes of new data shorter than this go through the log (deferred); the rest are
    /// copy-on-write.
    #[arg(long, default_value_t = StoreConfig::default().deferred_max_bytes)]
    deferred_max_bytes: u64,
    /// Overwrites shorter than this are deferred (not below `--deferred-max-bytes` on a
    /// rotational device, e.g. `--profile hdd-7200`).
    #[arg(long, default_value_t = StoreConfig::default().deferred_overwrite_max_bytes)]
    deferred_overwrite_max_bytes: u64,
    /// Pending deferred bytes that start a background checkpoint (it writes them in place; see
    /// `StoreConfig::deferred_batch_bytes`).
    #[arg(long, default_value_t = StoreConfig::default().deferred_batch_bytes)]
    deferred_batch_bytes: u64,
    /// Size of the store's write-ahead log ring in MiB (0: no log; every commit then flushes the
    /// device and syncs the KV, the format before the log, for comparison).
    #[arg(long, default_value_t = 64)]
    wal_mib: u64,
    /// Start a background checkpoint (durable KV commit) after this many logged group commits.
    #[arg(long, default_value_t = StoreConfig::default().wal_checkpoint_records)]
    wal_checkpoint_records: u64,
    /// Group commits whose writes may be in flight at once (1 or 2; see
    /// `StoreConfig::max_groups_in_flight`).
    #[arg(long, default_value_t = StoreConfig::default().max_groups_in_flight)]
    groups_in_flight: usize,
    /// Copy-on-write bytes a group in flight must write for the next group to be launched
    /// behind it (see `StoreConfig::pipeline_min_cow_bytes`; 0 pipelines every group).
    #[arg(long, default_value_t = StoreConfig::default().pipeline_min_cow_bytes)]
    pipeline_min_cow_bytes: u64,
    /// Write aligned writes of at least this many bytes early, before their group forms (0:
    /// none; see `StoreConfig::early_write_min_bytes`).
    #[arg(long, default_value_t = StoreConfig::default().early_write_min_bytes)]
    early_write_min_bytes: u64,
    /// Run fio with the same patterns on the same file after the store phases.
    #[arg(long)]
    fio: bool,
    /// Repeat the store phases (on a fresh mkfs) and fio's this many times and report each
    /// workload's store/fio ratio per round and its median: the disk's speed drifts from one
    /// minute to the next, so one round can mislead.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=MAX_ROUNDS))]
    rounds: u64,
    /// Hand the store the 4 MiB writes' block checksums with the data, as an OSD does (its
    /// messenger computes them while the bytes arrive), instead of letting the store compute
    /// them: the sequential phase then measures the store's own work in a cluster.
    #[arg(long)]
    caller_crcs: bool,
    /// Use buffered I/O instead of O_DIRECT.
    #[arg(long)]
    buffered: bool,
    /// How the device file's I/O reaches the kernel: blocking system calls on the bench's
    /// workers and tokio's blocking pool, or Linux native AIO (needs O_DIRECT; an OSD's
    /// choice).
    #[arg(long, value_enum, default_value_t = EngineArg::Threads)]
    io_engine: EngineArg,
    /// Skip writing zeros over the whole file first (by default the file is prefilled so the
    /// store and fio both write over allocated blocks, as on a raw device).
    #[arg(long)]
    no_prefill: bool,
    /// Also write the result table (markdown) to this file.
    #[arg(long)]
    markdown: Option<PathBuf>,
    /// Also draw the store's throughput as a percentage of fio's, per workload, to this PNG
    /// (needs --fio; labels are drawn when a DejaVu/Liberation TTF font is found).
    #[arg(long)]
    plot: Option<PathBuf>,
}

/// `--io-engine` values.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum EngineArg {
    /// Linux native AIO.
    Aio,
    /// Blocking system calls on threads.
    Threads,
}

impl From<EngineArg> for IoEngine {
    fn from(e: EngineArg) -> Self {
        match e {
            EngineArg::Aio => IoEngine::Aio,
            EngineArg::Threads => IoEngine::Threads,
        }
    }
}

/// Runs one `cairn store` subcommand, on a runtime shaped like an OSD's (its worker count), so
/// that `cairn store bench` measures the store as an OSD runs it.
pub fn run(args: StoreArgs) -> anyhow::Result<()> {
    let rt = crate::runtime::osd_runtime(args.threads)?;
    match args.command {
        StoreCommand::Bench(b) => rt.block_on(bench(*b)),
        StoreCommand::Capacity { profile } => capacity_table(&profile),
        StoreCommand::Fsck { device, kv, deep } => rt.block_on(fsck(device, kv, deep)),
    }
}

fn kv_path(device: &Path, kv: Option<PathBuf>) -> PathBuf {
    kv.unwrap_or_else(|| {
        let mut p = device.as_os_str().to_owned();
        p.push(".kv");
        PathBuf::from(p)
    })
}

async fn fsck(device: PathBuf, kv: Option<PathBuf>, deep: bool) -> anyhow::Result<()> {
    let dev: Arc<dyn BlockDevice> =
        Arc::new(FileDevice::open(&device, &FileDeviceOptions::default())?);
    let store = Store::mount(
        dev,
        KvLocation::File(kv_path(&device, kv)),
        StoreConfig::default(),
    )
    .await?;
    let rep = store.fsck(deep).await?;
    println!(
        "{} objects, {} blocks verified",
        rep.objects, rep.blocks_verified
    );
    for e in &rep.errors {
        println!("error: {e}");
    }
    for (c, o) in &rep.damaged_objects {
        println!("damaged: {c}/{o}");
    }
    if !rep.is_clean() {
        bail!("fsck found {} problems", rep.errors.len());
    }
    println!("clean");
    Ok(())
}

/// One measured phase.
#[derive(Debug, Clone)]
struct PhaseResult {
    name: String,
    who: &'static str,
    iops: f64,
    mb_s: f64,
    p50_us: f64,
    p95_us: f64,
    p99_us: f64,
    p995_us: f64,
    wa_device: Option<f64>,
    wa_total: Option<f64>,
}

/// The byte at `i` of the benchmark's data pattern (a ramp modulo 251: no period of a power of
/// two).
fn byte_of(i: usize) -> u8 {
    u8::try_from(i % 251).expect("below 251")
}

fn percentile_us(sorted: &[Duration], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = sat_usize((sorted.len() as f64 * q).ceil()).clamp(1, sorted.len()) - 1;
    sorted[i].as_secs_f64() * 1e6
}

fn summarize(
    name: String,
    mut lat: Vec<Duration>,
    elapsed: Duration,
    bytes_per_op: usize,
    before: &StoreStats,
    after: &StoreStats,
) -> PhaseResult {
    lat.sort_unstable();
    let secs = elapsed.as_secs_f64().max(1e-9);
    let user = (after.user_bytes_written - before.user_bytes_written) as f64;
    let dev = (after.device_bytes_written - before.device_bytes_written) as f64;
    let kvb = (after.kv_bytes_written - before.kv_bytes_written) as f64;
    PhaseResult {
        name,
        who: "cairn store",
        iops: lat.len() as f64 / secs,
        mb_s: lat.len() as f64 * bytes_per_op as f64 / secs / 1e6,
        p50_us: percentile_us(&lat, 0.50),
        p95_us: percentile_us(&lat, 0.95),
        p99_us: percentile_us(&lat, 0.99),
        p995_us: percentile_us(&lat, 0.995),
        wa_device: (user > 0.0).then(|| dev / user),
        wa_total: (user > 0.0).then(|| (dev + kvb) / user),
    }
}

/// What one round of store phases measured: a row per phase, and for write phases how their
/// transactions were grouped and where their commit time went.
#[derive(Default)]
struct RoundReport {
    results: Vec<PhaseResult>,
    groups: Vec<String>,
    times: Vec<String>,
}

impl RoundReport {
    /// Records a write phase: its row, its group commits, its commit-time split.
    fn write_phase(
        &mut self,
        name: String,
        (lat, elapsed): (Vec<Duration>, Duration),
        bytes_per_op: usize,
        before: &StoreStats,
        after: &StoreStats,
    ) {
        self.times.push(time_split(&name, before, after));
        self.groups.push(format!(
            "{name}: {} transactions in {} group commits, {} launched behind another",
            after.commits - before.commits,
            after.group_commits - before.group_commits,
            after.groups_overlapped - before.groups_overlapped
        ));
        self.read_phase(name, (lat, elapsed), bytes_per_op, before, after);
    }

    /// Records a read phase: its row.
    fn read_phase(
        &mut self,
        name: String,
        (lat, elapsed): (Vec<Duration>, Duration),
        bytes_per_op: usize,
        before: &StoreStats,
        after: &StoreStats,
    ) {
        self.results
            .push(summarize(name, lat, elapsed, bytes_per_op, before, after));
    }
}

/// The block checksums of `payload` as the store keeps them (what an OSD's messenger computes
/// while a write's bytes arrive).
fn block_crcs(store: &Store, payload: &[u8]) -> DataCrcs {
    DataCrcs {
        block_bytes: store.block_bytes(),
        crcs: payload
            .chunks(usize_of(store.block_bytes()))
            .map(crc_fast::crc32_iscsi)
            .collect(),
    }
}

/// Where commit time went in a phase (ms): staging, data writes, device flushes, checkpoints
/// (all, and the part commits waited for).
fn time_split(name: &str, before: &StoreStats, after: &StoreStats) -> String {
    let ms = |a: u64, b: u64| (a - b) as f64 / 1e6;
    format!(
        "{name}: stage {:.0} ms, data write {:.0} ms, device flush {:.0} ms, checkpoints {:.0} ms (commits waited {:.0} ms), {} log records, {} checkpoints",
        ms(after.stage_ns, before.stage_ns),
        ms(after.data_write_ns, before.data_write_ns),
        ms(after.device_flush_ns, before.device_flush_ns),
        ms(after.checkpoint_ns, before.checkpoint_ns),
        ms(after.checkpoint_wait_ns, before.checkpoint_wait_ns),
        after.wal_records - before.wal_records,
        after.checkpoints - before.checkpoints
    )
}

fn progress(len: u64, msg: &str) -> ProgressBar {
    let pb = ProgressBar::new(len);
    if let Ok(style) =
        ProgressStyle::with_template("{msg:28} [{bar:40}] {pos}/{len} {per_sec} eta {eta}")
    {
        pb.set_style(style.progress_chars("=> "));
    }
    pb.set_message(msg.to_string());
    pb
}

async fn bench(a: BenchArgs) -> anyhow::Result<()> {
    if a.queue_depths
        .iter()
        .any(|&q| q == 0 || q > MAX_QUEUE_DEPTH)
    {
        bail!("queue depths must be in 1..={MAX_QUEUE_DEPTH}");
    }
    let objects = (arg_usize(a.seq_mib, "--seq-mib")? * (1 << 20) / SEQ_OBJECT_BYTES).max(1);
    // The sequential phase's objects, and as many more written at each queue depth above 1.
    let deep = a.queue_depths.iter().any(|&q| q > 1);
    let needed = (objects * SEQ_OBJECT_BYTES) as u64 * if deep { 2 } else { 1 };
    if needed + (64 << 20) > a.size_mib << 20 {
        bail!(
            "--seq-mib {} does not fit in --size-mib {} (leave 64 MiB; twice the MiB with a queue depth above 1)",
            a.seq_mib,
            a.size_mib
        );
    }
    // The small objects join the sequential phase's objects (the 4 MiB phases' are removed).
    let small = if deep {
        (a.small_objects as u64).saturating_mul(RAND_IO_BYTES as u64)
    } else {
        0
    };
    if (objects * SEQ_OBJECT_BYTES) as u64 + small + (64 << 20) > a.size_mib << 20 {
        bail!(
            "--seq-mib {} and --small-objects {} do not fit in --size-mib {} (leave 64 MiB)",
            a.seq_mib,
            a.small_objects,
            a.size_mib
        );
    }
    let kv = kv_path(&a.device, a.kv.clone());
    let opts = FileDeviceOptions {
        size_bytes: Some(a.size_mib << 20),
        direct: !a.buffered,
        rotational: false,
        max_queue_depth: MAX_QUEUE_DEPTH * 2,
        inline_reads: true,
        engine: a.io_engine.into(),
    };
    let file = FileDevice::open(&a.device, &opts)
        .with_context(|| format!("opening {}", a.device.display()))?;
    let direct = file.is_direct();
    let engine = file.engine();
    if !a.no_prefill {
        let pb = ProgressBar::new_spinner();
        pb.set_message(format!("prefilling {} MiB with zeros", a.size_mib));
        pb.enable_steady_tick(Duration::from_millis(200));
        file.prefill(8 << 20).await?;
        pb.finish_and_clear();
    }
    let file: Arc<dyn BlockDevice> = Arc::new(file);
    let dev: Arc<dyn BlockDevice> = match &a.profile {
        Some(p) => Arc::new(EmulatedDevice::real_time(
            file,
            &Profile::load(p)?,
            MAX_QUEUE_DEPTH * 2,
        )?),
        None => file,
    };
    println!(
        "device {} ({} MiB, O_DIRECT {}, I/O engine {:?}, profile {}), kv {}, 4 MiB writes checksummed by {}",
        a.device.display(),
        a.size_mib,
        direct,
        engine,
        a.profile.as_deref().unwrap_or("none"),
        kv.display(),
        if a.caller_crcs {
            "the caller"
        } else {
            "the store"
        }
    );
    let mut rounds: Vec<Vec<PhaseResult>> = Vec::new();
    for round in 1..=a.rounds {
        if a.rounds > 1 {
            println!("\nround {round} of {}", a.rounds);
        }
        let mut results = store_round(&a, dev.clone(), &kv, objects).await?;
        if a.fio {
            if a.profile.is_some() {
                println!("fio skipped: it would measure the raw file, not the emulated profile");
            } else {
                results.extend(run_fio(&a, objects)?);
            }
        }
        let table = render(&results);
        println!("\n{table}");
        rounds.push(results);
    }
    let mut markdown: String = rounds
        .iter()
        .map(|r| render(r))
        .collect::<Vec<_>>()
        .join("\n");
    let per_round: Vec<Vec<(String, f64)>> = rounds.iter().map(|r| ratios(r)).collect();
    let medians = median_ratios(&per_round);
    if a.rounds > 1 && !medians.is_empty() {
        let table = render_ratios(&per_round, &medians);
        println!("store throughput as % of fio's, per round, and the median:\n\n{table}");
        markdown.push_str(&format!("\n{table}"));
    }
    if let Some(path) = &a.markdown {
        std::fs::write(path, &markdown)?;
    }
    if let Some(path) = &a.plot {
        if medians.is_empty() {
            println!("no plot: run with --fio to have something to compare");
        } else {
            let labelled = plot::ratio_chart(path, &medians)?;
            println!(
                "plot written to {} ({})",
                path.display(),
                if labelled {
                    "labelled"
                } else {
                    "no font found: unlabelled"
                }
            );
        }
    }
    Ok(())
}

/// Each workload's store/fio throughput ratio (%) per round.
fn ratios(results: &[PhaseResult]) -> Vec<(String, f64)> {
    results
        .iter()
        .filter(|r| r.who == "cairn store")
        .filter_map(|r| {
            let f = results
                .iter()
                .find(|f| f.who == "fio" && f.name == r.name)?;
            (f.iops > 0.0).then(|| (r.name.clone(), 100.0 * r.iops / f.iops))
        })
        .collect()
}

/// Each workload's median store/fio ratio (%) over the rounds' ratios (the lower median for
/// an even count: the less flattering one), in workload order; empty without fio.
fn median_ratios(per_round: &[Vec<(String, f64)>]) -> Vec<(String, f64)> {
    let Some(first) = per_round.first() else {
        return Vec::new();
    };
    first
        .iter()
        .map(|(name, _)| {
            let mut v: Vec<f64> = per_round
                .iter()
                .filter_map(|r| r.iter().find(|(n, _)| n == name).map(|(_, x)| *x))
                .collect();
            v.sort_by(f64::total_cmp);
            (name.clone(), v[(v.len() - 1) / 2])
        })
        .collect()
}

fn render_ratios(per_round: &[Vec<(String, f64)>], medians: &[(String, f64)]) -> String {
    let mut s = String::from("| workload |");
    for i in 1..=per_round.len() {
        s.push_str(&format!(" round {i} |"));
    }
    s.push_str(" median |\n|---|");
    s.push_str(&"---:|".repeat(per_round.len() + 1));
    s.push('\n');
    for (name, median) in medians {
        s.push_str(&format!("| {name} |"));
        for r in per_round {
            match r.iter().find(|(n, _)| n == name) {
                Some((_, x)) => s.push_str(&format!(" {x:.0}% |")),
                None => s.push_str(" - |"),
            }
        }
        s.push_str(&format!(" {median:.0}% |\n"));
    }
    s
}

/// One round of the store's phases on a fresh store: 4 MiB sequential writes, as many new
/// 4 MiB objects at each queue depth above 1 (written, then read back whole), then 4 KiB random
/// writes and reads at each queue depth; prints the store's own counters.
async fn store_round(
    a: &BenchArgs,
    dev: Arc<dyn BlockDevice>,
    kv: &Path,
    objects: usize,
) -> anyhow::Result<Vec<PhaseResult>> {
    let kv = kv.to_path_buf();
    let cfg = StoreConfig {
        deferred_max_bytes: a.deferred_max_bytes,
        deferred_overwrite_max_bytes: a.deferred_overwrite_max_bytes,
        deferred_batch_bytes: a.deferred_batch_bytes,
        wal_bytes: a.wal_mib << 20,
        wal_checkpoint_records: a.wal_checkpoint_records,
        max_groups_in_flight: a.groups_in_flight,
        pipeline_min_cow_bytes: a.pipeline_min_cow_bytes,
        early_write_min_bytes: a.early_write_min_bytes,
        ..StoreConfig::default()
    };
    Store::mkfs(dev.clone(), KvLocation::File(kv.clone()), &cfg).await?;
    let store = Arc::new(Store::mount(dev, KvLocation::File(kv.clone()), cfg).await?);
    let mut t = Transaction::new();
    t.create_collection("bench");
    store.queue_transaction_owned(t).await?;
    let mut report = RoundReport::default();

    // The object's bytes sit in an aligned buffer, as fio's do: the store then writes them
    // from that buffer (checksummed, never copied). A caller with unaligned bytes costs the
    // store one copy more.
    let pattern: Vec<u8> = (0..SEQ_OBJECT_BYTES).map(byte_of).collect();
    let payload = cairn_blockdev::AlignedBuf::from_parts(&[&pattern], 4096)
        .map(bytes::Bytes::from_owner)
        .context("allocating the 4 MiB payload")?;
    let before = store.stats().await;
    let pb = progress(objects as u64, "4 MiB sequential writes");
    let mut lat = Vec::with_capacity(objects);
    // One transaction at a time: the store is busy exactly the sum of the commit latencies
    // (building each 4 MiB transaction, the benchmark's own copy, is not the store's time).
    let mut elapsed = Duration::ZERO;
    let crcs = a.caller_crcs.then(|| block_crcs(&store, &payload));
    for i in 0..objects {
        let t = write_object(&format!("obj{i:06}"), &payload, crcs.as_ref());
        let t0 = Instant::now();
        store.queue_transaction_owned(t).await?;
        let took = t0.elapsed();
        elapsed += took;
        lat.push(took);
        pb.inc(1);
    }
    store.sync().await?;
    pb.finish_and_clear();
    let after = store.stats().await;
    report.write_phase(
        "4 MiB seq write QD1".into(),
        (lat, elapsed),
        SEQ_OBJECT_BYTES,
        &before,
        &after,
    );

    for &qd in a.queue_depths.iter().filter(|&&q| q > 1) {
        let name = format!("4 MiB write QD{qd}");
        let before = store.stats().await;
        let timed = write_new_objects(&store, &name, qd, objects, &payload, crcs.as_ref()).await?;
        store.sync().await?;
        let after = store.stats().await;
        report.write_phase(name, timed, SEQ_OBJECT_BYTES, &before, &after);
        let name = format!("4 MiB read QD{qd}");
        let before = store.stats().await;
        let timed = read_new_objects(&store, &name, qd, objects).await?;
        let after = store.stats().await;
        report.read_phase(name, timed, SEQ_OBJECT_BYTES, &before, &after);
        // The random phases find the store as the sequential phase left it.
        remove_new_objects(&store, qd, objects).await?;
    }

    for &qd in &a.queue_depths {
        for write in [true, false] {
            let name = format!("4 KiB rand {} QD{qd}", if write { "write" } else { "read" });
            let before = store.stats().await;
            let timed = time_random_ops(&store, &name, qd, a.rand_ops, 7919, move |store, rng| {
                let obj = format!("obj{:06}", rng.random_range(0..objects));
                let off = rng.random_range(0..(SEQ_OBJECT_BYTES / RAND_IO_BYTES) as u64)
                    * RAND_IO_BYTES as u64;
                let byte = if write { rng.random::<u8>() } else { 0 };
                async move {
                    if write {
                        let mut t = Transaction::new();
                        t.write("bench", &obj, off, &[byte; RAND_IO_BYTES]);
                        store.queue_transaction_owned(t).await?;
                    } else {
                        store.read("bench", &obj, off, RAND_IO_BYTES as u64).await?;
                    }
                    Ok(())
                }
            })
            .await?;
            store.sync().await?;
            let after = store.stats().await;
            if write {
                report.write_phase(name, timed, RAND_IO_BYTES, &before, &after);
            } else {
                report.read_phase(name, timed, RAND_IO_BYTES, &before, &after);
            }
        }
    }
    if a.small_objects > 0 {
        for &qd in a.queue_depths.iter().filter(|&&q| q > 1) {
            small_object_phases(&store, qd, a.small_objects, &mut report).await?;
        }
    }

    let st = store.stats().await;
    let rep = store.fsck(false).await?;
    println!(
        "store: {} objects, {:.1} MiB stored, {:.1} MiB allocated, fragmentation {:.3}, {} commits in {} group commits, fsck {}",
        st.objects,
        st.stored_bytes as f64 / 1048576.0,
        st.allocated_bytes as f64 / 1048576.0,
        st.fragmentation,
        st.commits,
        st.group_commits,
        if rep.is_clean() { "clean" } else { "NOT CLEAN" }
    );
    drop(store);
    for g in report.groups.iter().chain(&report.times) {
        println!("{g}");
    }
    Ok(report.results)
}

/// A transaction writing `payload` as the whole of object `obj` (checksummed by the caller
/// when `crcs` are given, else by the store).
fn write_object(obj: &str, payload: &bytes::Bytes, crcs: Option<&DataCrcs>) -> Transaction {
    let mut t = Transaction::new();
    match crcs {
        Some(c) => t.write_checksummed("bench", obj, 0, payload.clone(), c.clone()),
        None => t.write_bytes("bench", obj, 0, payload.clone()),
    };
    t
}

/// Writes `objects` new 4 MiB objects from `qd` concurrent submitters (what a cluster's 4 MiB
/// writes at `qd` in flight ask of one store). Returns each write's latency and the phase's
/// wall time.
async fn write_new_objects(
    store: &Arc<Store>,
    name: &str,
    qd: usize,
    objects: usize,
    payload: &bytes::Bytes,
    crcs: Option<&DataCrcs>,
) -> anyhow::Result<(Vec<Duration>, Duration)> {
    let (payload, crcs) = (payload.clone(), crcs.cloned());
    time_each_new_object(store, name, qd, objects, move |store, obj| {
        let t = write_object(&obj, &payload, crcs.as_ref());
        async move { Ok(store.queue_transaction_owned(t).await?) }
    })
    .await
}

/// Reads back, whole and each once, the objects [`write_new_objects`] wrote at queue depth `qd`,
/// from `qd` concurrent readers, as an OSD reads them (`read_checksummed`: every block verified
/// against its crc32c, the buffer handed over without a copy). Fails on a short read.
async fn read_new_objects(
    store: &Arc<Store>,
    name: &str,
    qd: usize,
    objects: usize,
) -> anyhow::Result<(Vec<Duration>, Duration)> {
    time_each_new_object(store, name, qd, objects, |store, obj| async move {
        read_whole(&store, &obj, SEQ_OBJECT_BYTES).await
    })
    .await
}

/// Reads object `obj` of `len` bytes whole, as an OSD reads it (`read_checksummed`: every block
/// verified against its crc32c); fails on a short read.
async fn read_whole(store: &Store, obj: &str, len: usize) -> anyhow::Result<()> {
    let (bytes, _) = store.read_checksummed("bench", obj, 0, len as u64).await?;
    if bytes.len() != len {
        bail!("{obj}: read {} bytes of {len}", bytes.len());
    }
    Ok(())
}

/// Runs `op` once on each of the `objects` objects named `qd{qd}-NNNNNN`, from `qd` concurrent
/// tasks taking the next name as they finish one; returns each op's latency and the wall time.
async fn time_each_new_object<F, Fut>(
    store: &Arc<Store>,
    name: &str,
    qd: usize,
    objects: usize,
    op: F,
) -> anyhow::Result<(Vec<Duration>, Duration)>
where
    F: Fn(Arc<Store>, String) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = anyhow::Result<()>> + Send,
{
    let pb = progress(objects as u64, name);
    let next = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..qd {
        let (store, pb, next, op) = (store.clone(), pb.clone(), next.clone(), op.clone());
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= objects {
                    return Ok::<_, anyhow::Error>(lat);
                }
                let t0 = Instant::now();
                op(store.clone(), format!("qd{qd}-{i:06}")).await?;
                lat.push(t0.elapsed());
                pb.inc(1);
            }
        }));
    }
    let mut lat = Vec::with_capacity(objects);
    for t in tasks {
        lat.extend(t.await??);
    }
    let elapsed = start.elapsed();
    pb.finish_and_clear();
    Ok((lat, elapsed))
}

/// The cluster bench's small-object workload on the store alone: `objects` new 4 KiB objects
/// written from `qd` concurrent submitters (each write checksummed by the caller, as an OSD's
/// messenger hands the store a write's block checksums), then as many whole-object reads of
/// objects picked at random among them, verified as an OSD reads (`read_checksummed`). The
/// one-OSD layer of the bottom-up benchmark runs this workload over the network, so its loss
/// is measured against the same work. The objects are removed afterwards.
async fn small_object_phases(
    store: &Arc<Store>,
    qd: usize,
    objects: usize,
    report: &mut RoundReport,
) -> anyhow::Result<()> {
    let pattern: Vec<u8> = (0..RAND_IO_BYTES).map(byte_of).collect();
    let payload = bytes::Bytes::from(pattern);
    let crcs = block_crcs(store, &payload);
    let name = format!("4 KiB object write QD{qd}");
    let before = store.stats().await;
    let timed = time_each_new_object(store, &name, qd, objects, move |store, obj| {
        let t = write_object(&small_name(&obj), &payload, Some(&crcs));
        async move { Ok(store.queue_transaction_owned(t).await?) }
    })
    .await?;
    store.sync().await?;
    let after = store.stats().await;
    report.write_phase(name, timed, RAND_IO_BYTES, &before, &after);

    let name = format!("4 KiB object read QD{qd}");
    let before = store.stats().await;
    let timed = time_random_ops(
        store,
        &name,
        qd,
        objects as u64,
        104_729,
        move |store, rng| {
            let obj = small_name(&format!("qd{qd}-{:06}", rng.random_range(0..objects)));
            async move { read_whole(&store, &obj, RAND_IO_BYTES).await }
        },
    )
    .await?;
    let after = store.stats().await;
    report.read_phase(name, timed, RAND_IO_BYTES, &before, &after);
    remove_objects(
        store,
        (0..objects).map(|i| small_name(&format!("qd{qd}-{i:06}"))),
    )
    .await
}

/// The name of a small object: the 4 MiB phases' name with a prefix of its own.
fn small_name(name: &str) -> String {
    format!("small-{name}")
}

/// Runs `ops` operations from `qd` concurrent tasks, each with its own random stream (seeded
/// from `seed_step`, the task and `qd`) that `op` draws what it needs from before it returns
/// the operation; returns each operation's latency and the phase's wall time.
async fn time_random_ops<F, Fut>(
    store: &Arc<Store>,
    name: &str,
    qd: usize,
    ops: u64,
    seed_step: u64,
    op: F,
) -> anyhow::Result<(Vec<Duration>, Duration)>
where
    F: Fn(Arc<Store>, &mut ChaCha8Rng) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = anyhow::Result<()>> + Send,
{
    let pb = progress(ops, name);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..qd as u64 {
        let (store, pb, op) = (store.clone(), pb.clone(), op.clone());
        let n = ops / qd as u64 + u64::from(w < ops % qd as u64);
        tasks.push(tokio::spawn(async move {
            let mut rng = ChaCha8Rng::seed_from_u64(w * seed_step + qd as u64);
            let mut lat = Vec::with_capacity(arg_usize(n, "operations")?);
            for _ in 0..n {
                let next = op(store.clone(), &mut rng);
                let t0 = Instant::now();
                next.await?;
                lat.push(t0.elapsed());
                pb.inc(1);
            }
            Ok::<_, anyhow::Error>(lat)
        }));
    }
    let mut lat = Vec::with_capacity(arg_usize(ops, "operations")?);
    for t in tasks {
        lat.extend(t.await??);
    }
    let elapsed = start.elapsed();
    pb.finish_and_clear();
    Ok((lat, elapsed))
}

/// Removes the objects [`write_new_objects`] wrote at queue depth `qd`.
async fn remove_new_objects(store: &Store, qd: usize, objects: usize) -> anyhow::Result<()> {
    remove_objects(store, (0..objects).map(|i| format!("qd{qd}-{i:06}"))).await
}

/// Removes the named objects, [`REMOVE_BATCH`] to a transaction.
async fn remove_objects(store: &Store, names: impl Iterator<Item = String>) -> anyhow::Result<()> {
    let mut names = names.peekable();
    while names.peek().is_some() {
        let mut t = Transaction::new();
        for name in names.by_ref().take(REMOVE_BATCH) {
            t.remove("bench", &name);
        }
        store.queue_transaction_owned(t).await?;
    }
    Ok(())
}

/// PNG output of the benchmark.
mod plot {
    use crate::convert::{sat_i32, small_i32, small_u32};
    use plotters::prelude::*;
    use std::path::Path;

    /// Labels use the binary's embedded font (crate::plot), so they always render.
    fn register_font() -> bool {
        crate::plot::register_font();
        true
    }

    /// Bars of "store throughput as % of fio" per workload with a 100% line; returns whether
    /// labels could be drawn.
    pub fn ratio_chart(path: &Path, bars: &[(String, f64)]) -> anyhow::Result<bool> {
        let labelled = register_font();
        let (w, h) = (200 + 170 * small_u32(bars.len()), 520u32);
        let root = BitMapBackend::new(path, (w, h)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| anyhow::anyhow!("{e}"))?;
        let (left, top, bottom) = (80i32, 60i32, 440i32);
        let ymax = bars.iter().map(|b| b.1).fold(120.0f64, f64::max) * 1.1;
        let y = |pct: f64| bottom - sat_i32((pct / ymax) * f64::from(bottom - top));
        let draw = |e: Result<(), DrawingAreaErrorKind<_>>| e.map_err(|e| anyhow::anyhow!("{e}"));
        draw(root.draw(&Rectangle::new(
            [(left, top), (left + 1, bottom)],
            BLACK.filled(),
        )))?;
        draw(root.draw(&Rectangle::new(
            [(left, bottom), (w as i32 - 40, bottom + 1)],
            BLACK.filled(),
        )))?;
        let hundred = y(100.0);
        draw(root.draw(&Rectangle::new(
            [(left, hundred), (w as i32 - 40, hundred + 2)],
            RED.filled(),
        )))?;
        for (i, (name, pct)) in bars.iter().enumerate() {
            let x0 = left + 40 + 170 * small_i32(i);
            draw(root.draw(&Rectangle::new(
                [(x0, y(*pct)), (x0 + 90, bottom)],
                BLUE.mix(0.7).filled(),
            )))?;
            if labelled {
                let style = ("sans-serif", 16).into_font().color(&BLACK);
                draw(root.draw(&Text::new(
                    format!("{pct:.0}%"),
                    (x0 + 25, y(*pct) - 22),
                    style.clone(),
                )))?;
                let short = name.replace("4 KiB ", "").replace("4 MiB ", "");
                draw(root.draw(&Text::new(short, (x0 - 5, bottom + 12), style)))?;
            }
        }
        if labelled {
            let title = ("sans-serif", 22).into_font().color(&BLACK);
            draw(root.draw(&Text::new(
                "cairn store throughput as % of fio on the same file (red: 100%)",
                (left, 15),
                title,
            )))?;
            let axis = ("sans-serif", 14).into_font().color(&BLACK);
            for pct in [0.0, 50.0, 100.0] {
                draw(root.draw(&Text::new(
                    format!("{pct:.0}%"),
                    (20, y(pct) - 7),
                    axis.clone(),
                )))?;
            }
        }
        root.present().map_err(|e| anyhow::anyhow!("{e}"))?;
        Ok(labelled)
    }
}

/// One fio invocation.
struct FioJob<'a> {
    name: &'a str,
    rw: &'a str,
    bs: &'a str,
    size_mib: u64,
    jobs: usize,
    ios_per_job: Option<u64>,
    sync: bool,
}

fn fio_job(a: &BenchArgs, j: FioJob<'_>) -> anyhow::Result<serde_json::Value> {
    let FioJob {
        name,
        rw,
        bs,
        size_mib,
        jobs,
        ios_per_job,
        sync,
    } = j;
    let mut cmd = std::process::Command::new("fio");
    cmd.arg(format!("--name={name}"))
        .arg(format!("--filename={}", a.device.display()))
        .arg(format!("--rw={rw}"))
        .arg(format!("--bs={bs}"))
        .arg(format!("--size={size_mib}M"))
        .arg(format!("--direct={}", u8::from(!a.buffered)))
        .arg("--ioengine=psync")
        .arg(format!("--numjobs={jobs}"))
        .arg("--group_reporting")
        .arg("--norandommap")
        .arg("--randrepeat=0")
        .arg("--output-format=json");
    if sync {
        cmd.arg("--fdatasync=1");
    }
    if let Some(n) = ios_per_job {
        cmd.arg(format!("--number_ios={n}"));
    }
    let out = cmd
        .output()
        .context("running fio (apt-get install -y fio)")?;
    if !out.status.success() {
        bail!("fio failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let json_start = text.find('{').context("fio printed no JSON")?;
    Ok(serde_json::from_str(&text[json_start..])?)
}

fn fio_result(v: &serde_json::Value, dir: &str, name: String) -> PhaseResult {
    let d = &v["jobs"][0][dir];
    let pct = |k: &str| d["clat_ns"]["percentile"][k].as_f64().unwrap_or(0.0) / 1e3;
    PhaseResult {
        name,
        who: "fio",
        iops: d["iops"].as_f64().unwrap_or(0.0),
        mb_s: d["bw_bytes"].as_f64().unwrap_or(0.0) / 1e6,
        p50_us: pct("50.000000"),
        p95_us: pct("95.000000"),
        p99_us: pct("99.000000"),
        p995_us: pct("99.500000"),
        wa_device: None,
        wa_total: None,
    }
}

fn run_fio(a: &BenchArgs, objects: usize) -> anyhow::Result<Vec<PhaseResult>> {
    let span_mib = ((objects * SEQ_OBJECT_BYTES) >> 20) as u64;
    let mut out = Vec::new();
    let deep = a.queue_depths.iter().filter(|&&q| q > 1).count() as u64;
    let pb = progress(1 + deep + 2 * a.queue_depths.len() as u64, "fio");
    let v = fio_job(
        a,
        FioJob {
            name: "seq",
            rw: "write",
            bs: "4M",
            size_mib: span_mib,
            jobs: 1,
            ios_per_job: None,
            sync: true,
        },
    )?;
    out.push(fio_result(&v, "write", "4 MiB seq write QD1".into()));
    pb.inc(1);
    for &qd in a.queue_depths.iter().filter(|&&q| q > 1) {
        let v = fio_job(
            a,
            FioJob {
                name: "write4m",
                rw: "randwrite",
                bs: "4M",
                size_mib: span_mib,
                jobs: qd,
                ios_per_job: Some((objects / qd).max(1) as u64),
                sync: true,
            },
        )?;
        out.push(fio_result(&v, "write", format!("4 MiB write QD{qd}")));
        let v = fio_job(
            a,
            FioJob {
                name: "read4m",
                rw: "randread",
                bs: "4M",
                size_mib: span_mib,
                jobs: qd,
                ios_per_job: Some((objects / qd).max(1) as u64),
                sync: false,
            },
        )?;
        out.push(fio_result(&v, "read", format!("4 MiB read QD{qd}")));
        pb.inc(1);
    }
    for &qd in &a.queue_depths {
        let per_job = (a.rand_ops / qd as u64).max(1);
        let v = fio_job(
            a,
            FioJob {
                name: "randwrite",
                rw: "randwrite",
                bs: "4k",
                size_mib: span_mib,
                jobs: qd,
                ios_per_job: Some(per_job),
                sync: true,
            },
        )?;
        out.push(fio_result(&v, "write", format!("4 KiB rand write QD{qd}")));
        pb.inc(1);
        let v = fio_job(
            a,
            FioJob {
                name: "randread",
                rw: "randread",
                bs: "4k",
                size_mib: span_mib,
                jobs: qd,
                ios_per_job: Some(per_job),
                sync: false,
            },
        )?;
        out.push(fio_result(&v, "read", format!("4 KiB rand read QD{qd}")));
        pb.inc(1);
    }
    pb.finish_and_clear();
    Ok(out)
}

fn render(results: &[PhaseResult]) -> String {
    let mut s = String::from("| workload | engine | IOPS | MB/s | p50 us | p95 us | p99 us | p99.5 us | WA device | WA device+KV | vs fio |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    let opt = |v: Option<f64>| v.map(|x| format!("{x:.3}")).unwrap_or_else(|| "-".into());
    for r in results {
        let fio = results.iter().find(|f| f.who == "fio" && f.name == r.name);
        let ratio = match (r.who, fio) {
            ("cairn store", Some(f)) if f.iops > 0.0 => format!("{:.0}%", 100.0 * r.iops / f.iops),
            _ => "-".into(),
        };
        s.push_str(&format!(
            "| {} | {} | {:.0} | {:.1} | {:.0} | {:.0} | {:.0} | {:.0} | {} | {} | {} |\n",
            r.name,
            r.who,
            r.iops,
            r.mb_s,
            r.p50_us,
            r.p95_us,
            r.p99_us,
            r.p995_us,
            opt(r.wa_device),
            opt(r.wa_total),
            ratio
        ));
    }
    s
}

fn capacity_table(profiles: &[String]) -> anyhow::Result<()> {
    let names: Vec<String> = if profiles.is_empty() {
        cairn_blockdev::profile::BUILTIN
            .iter()
            .map(|(n, _)| n.to_string())
            .collect()
    } else {
        profiles.to_vec()
    };
    const DEVICE_BYTES: u64 = 1 << 40;
    println!("| profile | 4 KiB rand write IOPS (QD) | expected | error | 4 MiB seq write MB/s (QD4) | expected | error | 4 KiB rand read IOPS QD1 / QD32 |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for name in names {
        let p = Profile::load(&name)?;
        let w = |kind, block_bytes, pattern, queue_depth, ops| Workload {
            kind,
            block_bytes,
            pattern,
            queue_depth,
            ops,
            seed: 42,
        };
        let qd = p.expected.random_write_queue_depth;
        let rw = capacity::measure(
            p.model(DEVICE_BYTES),
            DEVICE_BYTES,
            w(IoKind::Write, 4096, Pattern::Random, qd, 20_000),
        )?;
        let sw = capacity::measure(
            p.model(DEVICE_BYTES),
            DEVICE_BYTES,
            w(IoKind::Write, 4 << 20, Pattern::Sequential, 4, 400),
        )?;
        let r1 = capacity::measure(
            p.model(DEVICE_BYTES),
            DEVICE_BYTES,
            w(IoKind::Read, 4096, Pattern::Random, 1, 5_000),
        )?;
        let r32 = capacity::measure(
            p.model(DEVICE_BYTES),
            DEVICE_BYTES,
            w(IoKind::Read, 4096, Pattern::Random, 32, 20_000),
        )?;
        let err = |got: f64, want: f64| format!("{:+.1}%", 100.0 * (got - want) / want);
        println!(
            "| {} | {:.0} ({qd}) | {:.0} | {} | {:.0} | {:.0} | {} | {:.0} / {:.0} |",
            p.name,
            rw.iops,
            p.expected.random_write_4k_iops,
            err(rw.iops, p.expected.random_write_4k_iops),
            sw.bandwidth_mb_s,
            p.expected.sequential_write_mb_s,
            err(sw.bandwidth_mb_s, p.expected.sequential_write_mb_s),
            r1.iops,
            r32.iops
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn phase(name: &str, who: &'static str, iops: f64) -> PhaseResult {
        PhaseResult {
            name: name.into(),
            who,
            iops,
            mb_s: 0.0,
            p50_us: 0.0,
            p95_us: 0.0,
            p99_us: 0.0,
            p995_us: 0.0,
            wa_device: None,
            wa_total: None,
        }
    }

    #[test]
    fn ratios_take_the_lower_median_over_rounds() {
        let round = |store: f64, fio: f64| {
            vec![
                phase("w", "cairn store", store),
                phase("w", "fio", fio),
                phase("r", "cairn store", 50.0),
                phase("r", "fio", 0.0),
            ]
        };
        let per_round = |rounds: &[Vec<PhaseResult>]| -> Vec<Vec<(String, f64)>> {
            rounds.iter().map(|r| ratios(r)).collect()
        };
        let three = per_round(&[round(90.0, 100.0), round(50.0, 100.0), round(70.0, 100.0)]);
        assert_eq!(median_ratios(&three), vec![("w".to_string(), 70.0)]);
        let two = per_round(&[round(90.0, 100.0), round(50.0, 100.0)]);
        assert_eq!(median_ratios(&two), vec![("w".to_string(), 50.0)]);
        assert!(median_ratios(&[]).is_empty());
        let table = render_ratios(&three, &median_ratios(&three));
        assert!(table.contains("| w | 90% | 50% | 70% | 70% |"), "{table}");
    }
}
