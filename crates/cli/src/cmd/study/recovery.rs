//! `cairn study recovery`: seed 000's recovery test on a real local cluster, per device set
//! (NVMe, HDD with its WAL/DB on NVMe, HDD alone), scheduler and repetition, each run on a
//! fresh cluster of OSD processes.
//!
//! The steps are the seed's: 4 OSDs, size 3; a client pool prefilled; one OSD stopped and
//! marked out; objects written to a recovery pool meanwhile; the OSD started and marked in,
//! which starts the backfill; from that moment one client writes small blocks into the client
//! pool until every PG is active+clean again. The figures (client IOPS and latency during
//! recovery, objects recovered per second, degraded and misplaced copies) and the seed's own
//! figures beside them come from `cairn_study::recovery`.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use bytes::Bytes;
use cairn_client::Client;
use cairn_proto::mon::Request;
use cairn_qos::{PolicyConfig, Profile};
use cairn_study::recovery::{self, OpSample, RecoveryProgress, RecoveryRun, StudySetup};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};

use crate::convert::{arg_usize, usize_of};
use crate::local_cluster::{LocalCluster, UpSettings};
use crate::mon_link::up_osds;
use crate::osd_reports::{counter_pair_totals, object_copies_of, pg_states_of, unclean};

/// Arguments of `cairn study recovery`.
#[derive(Args)]
pub struct RecoveryStudyArgs {
    /// Directory for recovery-study.md, recovery-per-second.csv and the PNG plots.
    #[arg(long, default_value = "study-out")]
    out_dir: PathBuf,
    /// Scratch directory for the clusters (one at a time, each removed after its run);
    /// default: a new directory under the system's temporary directory.
    #[arg(long)]
    work_dir: Option<PathBuf>,
    /// Schedulers to compare, each on a fresh cluster: a policy (fifo, wpq, mclock, crrn, orr,
    /// trr, tbf), an mClock profile (high_client_ops, balanced, high_recovery_ops), or `bst`
    /// (seed 000's setting: wpq with recovery at the client's priority, no recovery sleep);
    /// each may be followed by `:KEY=VALUE` live settings set on every OSD with it (e.g.
    /// `high_client_ops:osd_recovery_pacing_factor=0` to compare without pacing).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "wpq,bst,high_client_ops,balanced,high_recovery_ops"
    )]
    schedulers: Vec<String>,
    /// Device sets to compare, each OSD of a run on the same: `nvme` (nvme-p3700), `hdd-db`
    /// (hdd-7200 with the store's superblock and log on an nvme-p3700 DB/WAL device), `hdd`
    /// (hdd-7200 alone), `none` (the plain device files), or any device profile name or
    /// TOML path.
    #[arg(long, value_delimiter = ',', default_value = "nvme,hdd-db,hdd")]
    devices: Vec<String>,
    /// Runs of each device set and scheduler, each on a fresh cluster (the report gives their
    /// mean and spread).
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// OSDs in the cluster (at least 4: the pool keeps 3 copies while one is out).
    #[arg(long, default_value_t = 4)]
    osds: usize,
    /// PGs of each of the two pools.
    #[arg(long = "pg-num", default_value_t = 32)]
    pg_num: u32,
    /// Objects written to the recovery pool while the OSD is out (seed 000: 100,000 on NVMe,
    /// 5,000 on HDD). Default: 400 on solid-state device sets, and on rotational ones
    /// [`HDD_RECOVERY_OBJECTS`], enough for a recovery of a minute or more there.
    #[arg(long = "recovery-objects")]
    recovery_objects: Option<usize>,
    /// Size of each object of both pools, KiB (seed 000: 4 MiB).
    #[arg(long = "object-kib", default_value_t = 4096)]
    object_kib: u64,
    /// Objects of the client pool, which the client writes into.
    #[arg(long = "client-objects", default_value_t = 16)]
    client_objects: usize,
    /// Size of each client write, bytes (seed 000: 4 KiB).
    #[arg(long = "client-block", default_value_t = 4096)]
    client_block: usize,
    /// Client writes in flight.
    #[arg(long = "client-depth", default_value_t = 16)]
    client_depth: usize,
    /// Seconds of client writes on the healthy cluster, before the failure (the baseline):
    /// long enough to include many of the store's checkpoints, so that it measures the rate
    /// the store sustains and not the burst its log absorbs first (on an HDD with its log on a
    /// DB device, 20 s measure about a fifth more than the HDD sustains; seed 000 measured
    /// 300 s).
    #[arg(long = "baseline-s", default_value_t = 120)]
    baseline_s: u64,
    /// Longest recovery phase, seconds: a recovery still running then is reported not done.
    #[arg(long = "max-s", default_value_t = 300)]
    max_s: u64,
    /// Device file size of each OSD, MiB (sparse).
    #[arg(long = "device-mib", default_value_t = 8192)]
    device_mib: u64,
    /// Keep each run's cluster directory (daemon logs, stopped stores) instead of removing it.
    #[arg(long)]
    keep: bool,
    /// An extra argument for every OSD (see `cairn up --osd-arg`), e.g.
    /// `--osd-arg=--max-inflight-cost-ms=0` to compare without the device-time limit.
    #[arg(long = "osd-arg", allow_hyphen_values = true)]
    osd_arg: Vec<String>,
    /// The capacity each OSD's mClock scheduler charges requests against: `baseline` (seed
    /// 000's protocol: the baseline runs under WPQ, which neither reserves nor limits, and each
    /// OSD's share of its writes and their copies is then set live on every OSD as
    /// `osd_mclock_max_capacity_iops`) or `device` (the OSD's own: its device profile's, or
    /// measured at its boot with `--osd-arg=--measure-capacity`; the baseline runs under the
    /// scheduler compared). Other policies always keep the OSD's own and run their baseline
    /// themselves.
    #[arg(long, value_enum, default_value_t = CapacityFrom::Baseline)]
    capacity: CapacityFrom,
}

/// Where the OSDs' scheduler capacity comes from in a recovery study.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum CapacityFrom {
    /// Set from the baseline (seed 000's protocol).
    Baseline,
    /// The OSD's own.
    Device,
}

/// The pools' size: each client write is a write on this many OSDs.
const POOL_SIZE: u32 = 3;

/// The capacity, in 4 KiB writes per second, each of `osds` OSDs sustained in a baseline of
/// `baseline_iops` client writes per second, each written on [`POOL_SIZE`] of them (at least
/// 1, the least an OSD takes).
fn capacity_from_baseline(baseline_iops: f64, osds: usize) -> f64 {
    (baseline_iops * f64::from(POOL_SIZE) / osds.max(1) as f64).max(1.0)
}

/// Most runs of one setting (explicit limit).
const MAX_RUNS: usize = 20;

/// Longest wait for a cluster step (PGs clean, an OSD up) outside the measured phase.
const STEP_TIMEOUT: Duration = Duration::from_secs(300);

/// How often the recovery counters and PG states are sampled.
const SAMPLE_EVERY: Duration = Duration::from_millis(250);

/// Every how many samples the degraded and misplaced copies are counted while every PG is
/// clean (each count asks every OSD to count its PGs' objects); while one is not, every
/// sample counts them.
const COPIES_EVERY_SAMPLES: u64 = 4;

/// Recovery objects written at once while the OSD is out.
const FILL_IN_FLIGHT: usize = 16;

/// Recovery objects read back and compared after each run (every n-th, at most this many).
const VERIFY_OBJECTS: usize = 32;

/// Recovery objects of a rotational device set by default: with 4 MiB objects, about 6 GiB
/// written while the OSD is out, of which the returning OSD recovers three quarters.
const HDD_RECOVERY_OBJECTS: usize = 1600;
/// Recovery objects of a solid-state device set by default.
const SSD_RECOVERY_OBJECTS: usize = 400;

/// One device set to compare: its label, what every OSD runs on, and its recovery size.
#[derive(Debug, Clone, PartialEq)]
struct DeviceSet {
    label: String,
    /// Emulated profile of the data device (None: the plain file).
    profile: Option<String>,
    /// Emulated profile of the DB/WAL device, when the store has one.
    db_profile: Option<String>,
    /// Objects written to the recovery pool.
    recovery_objects: usize,
}

impl DeviceSet {
    /// How the report names what the set is.
    fn description(&self) -> String {
        let data = self.profile.as_deref().unwrap_or("plain device files");
        match &self.db_profile {
            Some(db) => format!("{data}, WAL/DB on {db}"),
            None => data.to_string(),
        }
    }

    /// Extra `cairn osd run` arguments the set needs.
    fn osd_args(&self) -> Vec<String> {
        self.db_profile
            .iter()
            .map(|db| format!("--db-profile={db}"))
            .collect()
    }
}

/// Parses a device set name (see `--devices`); `objects` overrides the default recovery size.
fn parse_devices(name: &str, objects: Option<usize>) -> anyhow::Result<DeviceSet> {
    let (profile, db_profile) = match name {
        "nvme" => (Some("nvme-p3700"), None),
        "hdd-db" => (Some("hdd-7200"), Some("nvme-p3700")),
        "hdd" => (Some("hdd-7200"), None),
        "none" => (None, None),
        other => (Some(other), None),
    };
    let rotational = match profile {
        Some(p) => cairn_blockdev::Profile::load(p)
            .with_context(|| {
                format!(
                    "unknown device set `{name}` (nvme, hdd-db, hdd, none, or a device profile)"
                )
            })?
            .rotational(),
        None => false,
    };
    let default = match rotational {
        true => HDD_RECOVERY_OBJECTS,
        false => SSD_RECOVERY_OBJECTS,
    };
    Ok(DeviceSet {
        label: name.to_string(),
        profile: profile.map(str::to_string),
        db_profile: db_profile.map(str::to_string),
        recovery_objects: objects.unwrap_or(default),
    })
}

/// One scheduler to compare: its label and the admin commands that select it on an OSD.
#[derive(Debug, Clone, PartialEq)]
struct Scheduler {
    label: String,
    commands: Vec<Vec<String>>,
}

impl Scheduler {
    /// Whether it is mClock, whose reservations and limits are shares of the capacity.
    fn is_mclock(&self) -> bool {
        self.label.split_whitespace().next() == Some("mclock")
    }
}

/// Seed 000's "BST" setting: WPQ with recovery at the client's priority and no recovery sleep.
const BST: &str = "bst";

/// Parses a scheduler name: a policy name, an mClock profile, or `bst`.
fn parse_scheduler(spec: &str) -> anyhow::Result<Scheduler> {
    let mut parts = spec.split(':');
    let name = parts.next().unwrap_or_default();
    let mut sched = parse_policy(name)?;
    for setting in parts {
        let Some((key, value)) = setting
            .split_once('=')
            .filter(|(k, v)| !k.is_empty() && !v.is_empty())
        else {
            bail!("`{setting}` in `{spec}` is not KEY=VALUE");
        };
        sched
            .commands
            .push(["config", "set", key, value].map(String::from).to_vec());
        sched.label = format!("{} {key}={value}", sched.label);
    }
    Ok(sched)
}

/// The commands selecting scheduler `name` (see [`parse_scheduler`]).
fn parse_policy(name: &str) -> anyhow::Result<Scheduler> {
    let set = |key: &str, value: &str| -> Vec<String> {
        ["config", "set", key, value]
            .iter()
            .map(|w| w.to_string())
            .collect()
    };
    if name == BST {
        let mut commands = vec![
            set("osd_op_queue", "wpq"),
            set("osd_recovery_op_priority", "63"),
        ];
        for sleep in [
            "osd_recovery_sleep_hdd",
            "osd_recovery_sleep_ssd",
            "osd_recovery_sleep_hybrid",
        ] {
            commands.push(set(sleep, "0"));
        }
        return Ok(Scheduler {
            label: "wpq bst".to_string(),
            commands,
        });
    }
    if PolicyConfig::by_name(name).is_ok() {
        return Ok(Scheduler {
            label: name.to_string(),
            commands: vec![set("osd_op_queue", name)],
        });
    }
    match Profile::parse(name) {
        Ok(Profile::Custom) | Err(_) => bail!(
            "unknown scheduler `{name}` (a policy: fifo, wpq, mclock, crrn, orr, trr, tbf; an mClock profile: high_client_ops, balanced, high_recovery_ops; or bst: wpq with recovery at the client's priority and no recovery sleep)"
        ),
        Ok(_) => Ok(Scheduler {
            label: format!("mclock {name}"),
            commands: vec![set("osd_mclock_profile", name)],
        }),
    }
}

impl RecoveryStudyArgs {
    fn object_bytes(&self) -> u64 {
        self.object_kib << 10
    }

    fn check(&self) -> anyhow::Result<(Vec<DeviceSet>, Vec<Scheduler>)> {
        if self.osds < 4 {
            bail!("--osds must be at least 4 (size 3 with one OSD out)");
        }
        if self.recovery_objects == Some(0) || self.client_objects == 0 || self.client_depth == 0 {
            bail!("--recovery-objects, --client-objects and --client-depth must be at least 1");
        }
        if !(1..=MAX_RUNS).contains(&self.runs) {
            bail!("--runs must be 1 to {MAX_RUNS}");
        }
        if self.client_block == 0 || self.client_block as u64 > self.object_bytes() {
            bail!("--client-block must be 1 byte to --object-kib");
        }
        if self.object_kib == 0 || self.object_kib > 16 << 10 {
            bail!("--object-kib must be 1 to 16384");
        }
        if self.schedulers.is_empty() || self.devices.is_empty() {
            bail!("--schedulers and --devices must name at least one each");
        }
        let devices = self
            .devices
            .iter()
            .map(|d| parse_devices(d, self.recovery_objects))
            .collect::<anyhow::Result<_>>()?;
        let schedulers = self
            .schedulers
            .iter()
            .map(|s| parse_scheduler(s))
            .collect::<anyhow::Result<_>>()?;
        Ok((devices, schedulers))
    }
}

/// Runs the study and writes its report and plots.
pub fn run(args: RecoveryStudyArgs) -> anyhow::Result<()> {
    let (devices, schedulers) = args.check()?;
    std::fs::create_dir_all(&args.out_dir)
        .with_context(|| format!("creating {}", args.out_dir.display()))?;
    let work = args.work_dir.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("cairn-study-recovery-{}", std::process::id()))
    });
    let total = devices.len() * schedulers.len() * args.runs;
    let bar = ProgressBar::new((total * STEPS) as u64);
    bar.set_style(ProgressStyle::with_template(
        "{elapsed_precise} {bar:30} {pos}/{len} {msg}",
    )?);
    let mut runs = Vec::new();
    for set in &devices {
        for sched in &schedulers {
            for repetition in 1..=args.runs {
                let dir = work.join(format!("run{}", runs.len()));
                let label = format!(
                    "{} {} run {repetition}/{}",
                    set.label, sched.label, args.runs
                );
                let mut run = run_one(&args, set, sched, &label, &dir, &bar)
                    .with_context(|| format!("{label} (logs in {})", dir.display()))?;
                run.run = repetition;
                runs.push(run);
            }
        }
    }
    bar.finish_and_clear();
    if !args.keep {
        let _ = std::fs::remove_dir(&work);
    }
    let setup = StudySetup {
        osds: args.osds,
        device_sets: devices
            .iter()
            .map(|d| (d.label.clone(), d.description(), d.recovery_objects))
            .collect(),
        object_bytes: args.object_bytes(),
        client_block: args.client_block,
        client_depth: args.client_depth,
        runs: args.runs,
    };
    let table = recovery::render_markdown(&setup, &runs);
    std::fs::write(args.out_dir.join("recovery-study.md"), &table)?;
    std::fs::write(
        args.out_dir.join("recovery-per-second.csv"),
        per_second_csv(&runs),
    )?;
    let plots = recovery::plot(&args.out_dir, &runs)?;
    println!("{table}");
    println!(
        "wrote recovery-study.md, recovery-per-second.csv, {} in {}",
        plots.join(", "),
        args.out_dir.display()
    );
    Ok(())
}

/// Per run and second of the recovery phase: client IOPS, client p99 latency.
fn per_second_csv(runs: &[RecoveryRun]) -> String {
    let mut out = String::from("devices,scheduler,run,second,client_iops,client_p99_ms\n");
    for r in runs {
        for (s, iops, p99) in r.client_per_second() {
            out.push_str(&format!(
                "{},{},{},{s},{iops},{p99:.3}\n",
                r.devices, r.scheduler, r.run
            ));
        }
    }
    out
}

/// Progress steps of one run.
const STEPS: usize = 7;

/// One run of a scheduler on a device set, on a fresh cluster in `dir`; `label` names it in
/// the progress line.
fn run_one(
    args: &RecoveryStudyArgs,
    set: &DeviceSet,
    sched: &Scheduler,
    label: &str,
    dir: &Path,
    bar: &ProgressBar,
) -> anyhow::Result<RecoveryRun> {
    let step = |what: &str| {
        bar.set_message(format!("{label}: {what}"));
        bar.inc(1);
    };
    bar.set_message(format!("{label}: starting {} OSDs", args.osds));
    let mut osd_args = set.osd_args();
    osd_args.extend(args.osd_arg.iter().cloned());
    let settings = UpSettings {
        osds: args.osds,
        device_mib: args.device_mib,
        profile: set.profile.as_deref(),
        osd_args: &osd_args,
    };
    let mut cluster = LocalCluster::up(&settings, dir)?;
    let rt = crate::runtime::command()?;
    let run = rt.block_on(async {
        let (client, admin) = cluster.connect().await?;
        let total_pgs = 2 * args.pg_num as u64;
        for pool in [CLIENT_POOL, RECOVERY_POOL] {
            let create = Request::CreatePool {
                name: pool.into(),
                size: POOL_SIZE,
                pg_num: args.pg_num,
            };
            admin.op(create, 10_000).await?;
        }
        wait_clean(&client, total_pgs, STEP_TIMEOUT).await?;
        // Only mClock's shares are of the capacity; the other policies keep the OSD's own.
        let from_baseline = args.capacity == CapacityFrom::Baseline && sched.is_mclock();
        let unlimited = parse_policy("wpq")?;
        let during_baseline = if from_baseline { &unlimited } else { sched };
        for osd in up_osds(&client) {
            select_scheduler(&client, osd, during_baseline).await?;
        }
        step("prefilling the client pool");
        let object = pattern(arg_usize(args.object_bytes(), "object bytes")?);
        write_objects(&client, CLIENT_POOL, args.client_objects, &object, bar).await?;
        step("baseline client writes");
        let stop = Arc::new(AtomicBool::new(false));
        let load = tokio::spawn(client_load(client.clone(), args.into(), stop.clone()));
        tokio::time::sleep(Duration::from_secs(args.baseline_s)).await;
        stop.store(true, Ordering::Relaxed);
        let (baseline_ops, _) = load.await?;
        let capacity_iops = from_baseline.then(|| {
            let baseline_iops = baseline_ops.len() as f64 / args.baseline_s.max(1) as f64;
            capacity_from_baseline(baseline_iops, args.osds)
        });
        let sched = &with_capacity(sched, capacity_iops);
        if from_baseline {
            for osd in up_osds(&client) {
                select_scheduler(&client, osd, sched).await?;
            }
        }
        let index = args.osds - 1;
        let victim = cluster.osd_id(index)?;
        step(&format!("stopping osd.{victim}, marking it out"));
        let cmdline = tokio::task::block_in_place(|| cluster.stop_osd(index))?;
        admin.op(Request::MarkOut { id: victim }, 10_000).await?;
        wait_osd(&client, victim, false).await?;
        wait_clean(&client, total_pgs, STEP_TIMEOUT).await?;
        step("filling the recovery pool");
        write_objects(&client, RECOVERY_POOL, set.recovery_objects, &object, bar).await?;
        step(&format!("starting osd.{victim}"));
        tokio::task::block_in_place(|| cluster.start_osd(index, &cmdline))?;
        wait_osd(&client, victim, true).await?;
        select_scheduler(&client, victim, sched).await?;
        step(&format!("osd.{victim} in: recovery"));
        let mut run = RecoveryRun {
            devices: set.label.clone(),
            scheduler: sched.label.clone(),
            baseline_s: args.baseline_s as f64,
            baseline_ops,
            capacity_iops,
            ..Default::default()
        };
        let (objects, bytes) = recovered(&client).await;
        let copies = object_copies_of(&client, &up_osds(&client)).await;
        run.progress.push(RecoveryProgress {
            at_s: 0.0,
            objects,
            bytes,
            unclean_pgs: 0,
            degraded: Some(copies.degraded),
            misplaced: Some(copies.misplaced),
        });
        admin.op(Request::MarkIn { id: victim }, 10_000).await?;
        let stop = Arc::new(AtomicBool::new(false));
        let load = tokio::spawn(client_load(client.clone(), args.into(), stop.clone()));
        let started = Instant::now();
        let mut end = RecoveryEnd::default();
        let mut samples = 0u64;
        while started.elapsed() < Duration::from_secs(args.max_s) {
            tokio::time::sleep(SAMPLE_EVERY).await;
            samples += 1;
            let states = pg_states_of(&client).await;
            let reported: u64 = states.values().sum();
            let left = unclean(&states) + total_pgs.saturating_sub(reported);
            let (objects, bytes) = recovered(&client).await;
            let copies = match left > 0 || samples.is_multiple_of(COPIES_EVERY_SAMPLES) {
                true => Some(object_copies_of(&client, &up_osds(&client)).await),
                false => None,
            };
            let at_s = started.elapsed().as_secs_f64();
            run.progress.push(RecoveryProgress {
                at_s,
                objects,
                bytes,
                unclean_pgs: left,
                degraded: copies.map(|c| c.degraded),
                misplaced: copies.map(|c| c.misplaced),
            });
            bar.set_message(format!(
                "{label}: recovery, {left} PGs not clean, {} objects moved",
                objects.saturating_sub(run.progress[0].objects)
            ));
            if let Some(at) = end.observe(&run.progress) {
                run.recovered_at_s = Some(at);
                break;
            }
        }
        stop.store(true, Ordering::Relaxed);
        run.ended_s = started.elapsed().as_secs_f64();
        (run.ops, run.failed_ops) = load.await?;
        step("verifying recovered objects");
        verify_objects(&client, set.recovery_objects, &object).await?;
        anyhow::Ok(run)
    })?;
    drop(rt);
    match args.keep {
        true => cluster.stop()?,
        false => cluster.down()?,
    }
    Ok(run)
}

/// Decides from the samples when recovery is over: every PG clean and nothing moved since the
/// previous sample, after something moved (or, if nothing ever needed to, after
/// `IDLE_RECOVERY_S`). It ended when the last object moved or the last PG became clean.
#[derive(Default)]
struct RecoveryEnd {
    clean_since: Option<f64>,
    last_move_at: f64,
}

/// With nothing to recover, how long the PGs must stay clean before recovery counts as over.
const IDLE_RECOVERY_S: f64 = 5.0;

impl RecoveryEnd {
    /// Takes the newest of `samples` (the first is the start); returns the end once known.
    fn observe(&mut self, samples: &[RecoveryProgress]) -> Option<f64> {
        let [.., prev, now] = samples else {
            return None;
        };
        if now.objects != prev.objects {
            self.last_move_at = now.at_s;
        }
        if now.unclean_pgs > 0 {
            self.clean_since = None;
            return None;
        }
        let clean_since = *self.clean_since.get_or_insert(now.at_s);
        let moved = now.objects != samples[0].objects;
        let settled = now.objects == prev.objects;
        (settled && (moved || now.at_s >= IDLE_RECOVERY_S))
            .then(|| clean_since.max(self.last_move_at))
    }
}

const CLIENT_POOL: &str = "client";
const RECOVERY_POOL: &str = "recovery";

/// The bytes of object `i`: `base` with its first 8 bytes replaced by `i`.
fn object_bytes(base: &Bytes, i: usize) -> Bytes {
    let mut v = base.to_vec();
    let n = v.len().min(8);
    v[..n].copy_from_slice(&(i as u64).to_le_bytes()[..n]);
    v.into()
}

/// A deterministic, incompressible-looking buffer of `len` bytes.
fn pattern(len: usize) -> Bytes {
    (0..len)
        .map(|i| i.wrapping_mul(2_654_435_761).to_le_bytes()[3])
        .collect::<Vec<u8>>()
        .into()
}

fn object_name(i: usize) -> String {
    format!("obj_{i}")
}

/// Writes objects `0..n` of `pool`, `FILL_IN_FLIGHT` at a time.
async fn write_objects(
    client: &Arc<Client>,
    pool: &str,
    n: usize,
    base: &Bytes,
    bar: &ProgressBar,
) -> anyhow::Result<()> {
    let prefix = bar.message();
    let mut next = 0;
    let mut running = tokio::task::JoinSet::new();
    while next < n || !running.is_empty() {
        while next < n && running.len() < FILL_IN_FLIGHT {
            let (client, pool, data) = (client.clone(), pool.to_string(), object_bytes(base, next));
            let name = object_name(next);
            running.spawn(async move { client.write_full_bytes(&pool, &name, data).await });
            next += 1;
        }
        if let Some(done) = running.join_next().await {
            done??;
        }
        bar.set_message(format!("{prefix} ({}/{n})", next - running.len()));
    }
    Ok(())
}

/// Reads back up to `VERIFY_OBJECTS` recovery objects spread over `0..n` and compares them.
async fn verify_objects(client: &Client, n: usize, base: &Bytes) -> anyhow::Result<()> {
    let stride = n.div_ceil(VERIFY_OBJECTS).max(1);
    for i in (0..n).step_by(stride) {
        let got = client.read_bytes(RECOVERY_POOL, &object_name(i)).await?;
        if got != object_bytes(base, i) {
            bail!(
                "{RECOVERY_POOL}/{} read back {} bytes that differ from what was written",
                object_name(i),
                got.len()
            );
        }
    }
    Ok(())
}

/// What the client writes and how.
#[derive(Clone)]
struct LoadSpec {
    objects: usize,
    object_bytes: u64,
    block: usize,
    depth: usize,
}

impl From<&RecoveryStudyArgs> for LoadSpec {
    fn from(a: &RecoveryStudyArgs) -> Self {
        LoadSpec {
            objects: a.client_objects,
            object_bytes: a.object_bytes(),
            block: a.client_block,
            depth: a.client_depth,
        }
    }
}

/// One client writing `spec.block` bytes at random block-aligned offsets of the client pool's
/// objects, `spec.depth` at a time, until `stop`: the completed writes (from this call's
/// start) and the number that failed.
async fn client_load(
    client: Arc<Client>,
    spec: LoadSpec,
    stop: Arc<AtomicBool>,
) -> (Vec<OpSample>, u64) {
    let started = Instant::now();
    let data = pattern(spec.block);
    let blocks = (spec.object_bytes / spec.block as u64).max(1);
    let mut workers = tokio::task::JoinSet::new();
    for w in 0..spec.depth {
        let (client, stop, data, spec) = (client.clone(), stop.clone(), data.clone(), spec.clone());
        workers.spawn(async move {
            let mut rng = 0x9e37_79b9_7f4a_7c15u64 ^ ((w as u64 + 1) << 32);
            let (mut ops, mut failed) = (Vec::new(), 0u64);
            while !stop.load(Ordering::Relaxed) {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                let name = object_name(usize_of(rng % spec.objects as u64));
                let offset = (rng >> 20) % blocks * spec.block as u64;
                let t0 = Instant::now();
                match client.write(CLIENT_POOL, &name, offset, &data).await {
                    Ok(_) => ops.push(OpSample {
                        done_s: started.elapsed().as_secs_f64(),
                        latency_ms: t0.elapsed().as_secs_f64() * 1000.0,
                    }),
                    Err(_) => failed += 1,
                }
            }
            (ops, failed)
        });
    }
    let (mut ops, mut failed) = (Vec::new(), 0);
    while let Some(done) = workers.join_next().await {
        if let Ok((o, f)) = done {
            ops.extend(o);
            failed += f;
        }
    }
    ops.sort_by(|a, b| a.done_s.total_cmp(&b.done_s));
    (ops, failed)
}

/// Sets `sched` on `osd`, retrying while it is not reachable yet.
async fn select_scheduler(client: &Client, osd: i32, sched: &Scheduler) -> anyhow::Result<()> {
    let deadline = Instant::now() + STEP_TIMEOUT;
    for command in &sched.commands {
        loop {
            match client.tell(osd, command).await {
                Ok(_) => break,
                Err(e) if Instant::now() > deadline => {
                    return Err(e).context(format!("setting {} on osd.{osd}", sched.label))
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    }
    Ok(())
}

/// `sched` preceded by setting the scheduler's capacity to `iops`, when there is one.
fn with_capacity(sched: &Scheduler, iops: Option<f64>) -> Scheduler {
    let set = iops.map(|iops| {
        [
            "config",
            "set",
            "osd_mclock_max_capacity_iops",
            &format!("{iops:.0}"),
        ]
        .map(String::from)
        .to_vec()
    });
    let commands = set
        .into_iter()
        .chain(sched.commands.iter().cloned())
        .collect();
    Scheduler {
        label: sched.label.clone(),
        commands,
    }
}

/// Objects and bytes recovered so far, summed over the up OSDs.
async fn recovered(client: &Client) -> (u64, u64) {
    counter_pair_totals(client, &up_osds(client), "recovery").await
}

/// Waits until every one of `total` PGs is reported active+clean.
pub(super) async fn wait_clean(
    client: &Client,
    total: u64,
    timeout: Duration,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        let states = pg_states_of(client).await;
        if unclean(&states) == 0 && states.values().sum::<u64>() == total {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("PGs not all active+clean after {timeout:?}: {states:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits until the client's map shows `osd` up (or down).
async fn wait_osd(client: &Client, osd: i32, up: bool) -> anyhow::Result<()> {
    let deadline = Instant::now() + STEP_TIMEOUT;
    loop {
        let now = client
            .map()
            .and_then(|m| m.osds.get(&osd).map(|o| o.up))
            .unwrap_or(false);
        if now == up {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "osd.{osd} not {} after {STEP_TIMEOUT:?}",
                if up { "up" } else { "down" }
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedulers_are_policies_mclock_profiles_or_the_seeds_bst() {
        let wpq = parse_scheduler("wpq").unwrap();
        assert_eq!(wpq.label, "wpq");
        assert_eq!(wpq.commands, [["config", "set", "osd_op_queue", "wpq"]]);
        let p = parse_scheduler("high_recovery_ops").unwrap();
        assert_eq!(p.label, "mclock high_recovery_ops");
        assert_eq!(
            p.commands,
            [["config", "set", "osd_mclock_profile", "high_recovery_ops"]]
        );
        let bst = parse_scheduler("bst").unwrap();
        assert_eq!(bst.label, "wpq bst");
        assert_eq!(bst.commands[0], ["config", "set", "osd_op_queue", "wpq"]);
        assert!(bst.commands.contains(&vec![
            "config".to_string(),
            "set".into(),
            "osd_recovery_op_priority".into(),
            "63".into()
        ]));
        assert_eq!(
            bst.commands
                .iter()
                .filter(|c| c[2].starts_with("osd_recovery_sleep_") && c[3] == "0")
                .count(),
            3
        );
        for bad in ["custom", "lifo", "", ":osd_max_backfills=2"] {
            let e = parse_scheduler(bad).unwrap_err().to_string();
            assert!(e.contains("unknown scheduler"), "{bad}: {e}");
        }
        let unpaced = parse_scheduler("high_client_ops:osd_recovery_pacing_factor=0").unwrap();
        assert_eq!(
            unpaced.label,
            "mclock high_client_ops osd_recovery_pacing_factor=0"
        );
        assert_eq!(
            unpaced.commands.last().unwrap(),
            &["config", "set", "osd_recovery_pacing_factor", "0"]
        );
        for bad in [
            "wpq:",
            "wpq:osd_max_backfills",
            "wpq:=1",
            "wpq:osd_max_backfills=",
        ] {
            let e = parse_scheduler(bad).unwrap_err().to_string();
            assert!(e.contains("is not KEY=VALUE"), "{bad}: {e}");
        }
    }

    fn sample(at_s: f64, objects: u64, unclean_pgs: u64) -> RecoveryProgress {
        RecoveryProgress {
            at_s,
            objects,
            bytes: 0,
            unclean_pgs,
            ..RecoveryProgress::default()
        }
    }

    #[test]
    fn the_capacity_set_from_a_baseline_is_each_osds_share_of_the_writes_and_copies() {
        assert_eq!(capacity_from_baseline(1_000.0, 4), 750.0);
        assert_eq!(capacity_from_baseline(0.0, 4), 1.0, "at least 1");
        let hco = parse_scheduler("high_client_ops:osd_recovery_max_active=1").unwrap();
        assert!(hco.is_mclock() && parse_policy("mclock").unwrap().is_mclock());
        for other in ["wpq", "bst", "fifo", "orr"] {
            assert!(!parse_scheduler(other).unwrap().is_mclock(), "{other}");
        }
        let set = with_capacity(&hco, Some(750.4));
        assert_eq!(set.label, hco.label);
        assert_eq!(
            set.commands[0],
            ["config", "set", "osd_mclock_max_capacity_iops", "750"]
        );
        assert_eq!(set.commands[1..], hco.commands[..]);
        assert_eq!(with_capacity(&hco, None).commands, hco.commands);
    }

    #[test]
    fn device_sets_are_the_seeds_three_or_a_profile() {
        let hdd_db = parse_devices("hdd-db", None).unwrap();
        assert_eq!(hdd_db.profile.as_deref(), Some("hdd-7200"));
        assert_eq!(hdd_db.osd_args(), ["--db-profile=nvme-p3700"]);
        assert_eq!(hdd_db.recovery_objects, HDD_RECOVERY_OBJECTS);
        assert!(hdd_db.description().contains("WAL/DB on nvme-p3700"));
        let nvme = parse_devices("nvme", None).unwrap();
        assert_eq!(nvme.recovery_objects, SSD_RECOVERY_OBJECTS);
        assert!(nvme.osd_args().is_empty());
        assert_eq!(parse_devices("hdd", Some(7)).unwrap().recovery_objects, 7);
        assert_eq!(parse_devices("none", None).unwrap().profile, None);
        let e = parse_devices("floppy", None).unwrap_err();
        assert!(
            format!("{e:#}").contains("unknown device set `floppy`"),
            "{e:#}"
        );
    }

    fn end_of(samples: &[RecoveryProgress]) -> Option<f64> {
        let mut end = RecoveryEnd::default();
        (2..=samples.len()).find_map(|n| end.observe(&samples[..n]))
    }

    #[test]
    fn recovery_ends_when_pgs_are_clean_and_nothing_moves() {
        let s = |v: &[(f64, u64, u64)]| {
            v.iter()
                .map(|&(a, o, u)| sample(a, o, u))
                .collect::<Vec<_>>()
        };
        // PGs unclean while objects move, then clean; ends when the last PG became clean.
        let moving = s(&[
            (0.0, 10, 0),
            (0.5, 12, 3),
            (1.0, 20, 1),
            (1.5, 20, 0),
            (2.0, 20, 0),
        ]);
        assert_eq!(end_of(&moving), Some(1.5));
        // Moved between two samples without a PG ever seen unclean: ends at the last move.
        let quick = s(&[(0.0, 0, 0), (0.25, 0, 0), (0.5, 7, 0), (0.75, 7, 0)]);
        assert_eq!(end_of(&quick), Some(0.5));
        // Clean again but still moving (a pass that found more): not over.
        let still = s(&[(0.0, 0, 0), (0.5, 4, 0), (1.0, 9, 0)]);
        assert_eq!(end_of(&still), None);
        // Nothing to recover: over once clean for IDLE_RECOVERY_S.
        let idle: Vec<_> = (0..30).map(|i| sample(i as f64 * 0.25, 5, 0)).collect();
        assert_eq!(end_of(&idle), Some(0.25));
        assert_eq!(end_of(&idle[..20]), None);
    }

    #[test]
    fn each_object_has_its_own_bytes() {
        let base = pattern(64);
        assert_ne!(object_bytes(&base, 1), object_bytes(&base, 2));
        assert_eq!(object_bytes(&base, 3), object_bytes(&base, 3));
        assert_eq!(object_bytes(&base, 3).len(), 64);
        assert_eq!(object_bytes(&pattern(3), 1).len(), 3);
    }
}
