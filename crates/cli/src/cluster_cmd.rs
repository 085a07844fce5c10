//! `cairn osd run`, `cairn up`, `cairn down`: running OSDs and a whole local cluster as real
//! processes on loopback, each OSD with its own device file under a data directory.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use cairn_client::mon::MonClient;
use cairn_osd::{OsdConfig, OsdDaemon};
use cairn_proto::mon::Request;
use clap::Args;

use crate::cluster_dir;
use crate::mon_cmd::DEFAULT_MON;

/// Worker threads of an OSD's runtime unless told (`cairn osd run --threads`): one. A request
/// then wakes no other worker on its way from the socket through the scheduler to the store
/// and back, and the store's device I/O goes through AIO. On 2 vCPUs two workers gave ~1.15x
/// fewer 4 KiB writes with ~15% more OSD CPU per write
/// (docs/results/2026-11-24-bottom-up-runs-and-one-worker.md); on a 16-core machine
/// 1, 2, 4 and 8 workers gave one OSD the same 4 KiB and 4 MiB throughput from one client, the
/// CPU per 4 KiB read about doubling at 4 (docs/results/2026-11-27-16-core-machine.md).
pub(crate) const DEFAULT_OSD_THREADS: usize = 1;

fn default_osd_threads() -> usize {
    DEFAULT_OSD_THREADS
}

/// A runtime shaped like an OSD's: `threads` workers (checked as the setting `threads`).
pub(crate) fn osd_runtime(threads: usize) -> anyhow::Result<tokio::runtime::Runtime> {
    crate::runtime::build(threads, "threads")
}

/// `cairn osd run`: one OSD daemon. Settings come from flags, or all from `--config FILE`
/// (TOML with the same names: `mon`, `data`, `host`, `id`, `listen`, `metrics`, `device_mib`,
/// `heartbeat_grace_s`, `fast_fail_on_connection_refused`, `policy`, `profile`, `prefill`,
/// `store_groups_in_flight`, `op_shards`, `threads`, `max_inflight_cost_ms`, `remap_min_objects`,
/// `recovery_chunk_bytes`, `scrub_interval_s`, `deep_scrub_interval_s`, `measure_capacity`,
/// `fault_injection`). An OSD whose store fails (a device error) reports itself down and
/// exits with status 1, the cause in its log.
#[derive(Args, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OsdRunArgs {
    /// TOML file with every setting (flags are then ignored).
    #[arg(long)]
    #[serde(skip)]
    pub config: Option<PathBuf>,
    /// The OSD's keyring (`osd.N`'s key), in a TOML file; on the command line it is the
    /// global `--keyring`.
    #[arg(skip)]
    #[serde(default)]
    pub keyring: Option<PathBuf>,
    /// Monitor address.
    #[arg(long, default_value = DEFAULT_MON)]
    #[serde(default = "crate::mon_cmd::default_mon")]
    pub mon: SocketAddr,
    /// Data directory (device file `block`, metadata `kv.redb`, identity `uuid`).
    #[arg(long)]
    #[serde(default)]
    pub data: Option<PathBuf>,
    /// Host name (CRUSH failure domain).
    #[arg(long, default_value = "localhost")]
    #[serde(default = "default_host")]
    pub host: String,
    /// The OSD id to ask the monitor for at the first boot (given when free, else the
    /// lowest free id; a known OSD keeps its id). `cairn up` asks for N in directory `osdN`.
    #[arg(long)]
    #[serde(default)]
    pub id: Option<i32>,
    /// Address to serve on.
    #[arg(long, default_value = "127.0.0.1:0")]
    #[serde(default = "default_listen")]
    pub listen: SocketAddr,
    /// Device file size when created, in MiB.
    #[arg(long = "device-mib", default_value_t = DEFAULT_DEVICE_MIB)]
    #[serde(default = "default_device_mib")]
    pub device_mib: u64,
    /// Address of the Prometheus metrics page (`/metrics`); none if not given.
    #[arg(long)]
    #[serde(default)]
    pub metrics: Option<SocketAddr>,
    /// Seconds a silent peer is given before it is reported down (Ceph: 20).
    #[arg(long = "heartbeat-grace-s", default_value_t = 20)]
    #[serde(default = "crate::mon_cmd::default_grace_s")]
    pub heartbeat_grace_s: u64,
    /// Report a peer whose address refuses connections at once, so the monitor marks it
    /// down without waiting for the heartbeat grace (Ceph's
    /// `osd_fast_fail_on_connection_refused`); `false` leaves failure detection to the grace
    /// alone (e.g. where a firewall rejects connections to live daemons).
    #[arg(long = "fast-fail-on-connection-refused", default_value_t = true, action = clap::ArgAction::Set)]
    #[serde(default = "default_fast_fail")]
    pub fast_fail_on_connection_refused: bool,
    /// Scheduler policy (fifo, wpq, mclock, crrn, orr, trr, tbf); switch live with
    /// `cairn tell osd.N config set osd_op_queue NAME`.
    #[arg(long, default_value = "mclock")]
    #[serde(default = "default_policy")]
    pub policy: String,
    /// Emulate a device profile over the data file (hdd-7200, nvme-p3700, nvme-p4510, optane or
    /// a TOML path); the scheduler's cost model takes the profile's capacity.
    #[arg(long)]
    #[serde(default)]
    pub profile: Option<String>,
    /// Write zeros over a new device file before formatting it, so data lands on allocated
    /// blocks as on a raw device (a sparse file pays the file system's block allocation on
    /// every first write). Costs one full write of the file.
    #[arg(long)]
    #[serde(default)]
    pub prefill: bool,
    /// Store group commits whose writes may be in flight at once (1 or 2): with 2, a group
    /// that writes 1 MiB or more copy-on-write has the next one launched behind it
    /// (docs/design/store.md).
    #[arg(long = "store-groups-in-flight", default_value_t = default_store_groups_in_flight())]
    #[serde(default = "default_store_groups_in_flight")]
    pub store_groups_in_flight: usize,
    /// Scheduler shards (Ceph's `osd_op_num_shards`, 1..=64): each PG's work is scheduled in
    /// one, with its own queue and dispatcher; QoS settings hold for the whole OSD.
    #[arg(long = "op-shards", default_value_t = cairn_osd::DEFAULT_OP_SHARDS)]
    #[serde(default = "default_op_shards")]
    pub op_shards: usize,
    /// Worker threads of the daemon's runtime (1..=64; Ceph's op threads): every request's
    /// messaging, scheduling and store work runs on them (see [`DEFAULT_OSD_THREADS`]).
    #[arg(long, default_value_t = default_osd_threads())]
    #[serde(default = "default_osd_threads")]
    pub threads: usize,
    /// Most device time (by the scheduler's cost model) of requests released and not finished,
    /// in ms, 0 for no limit: beyond it requests wait in the scheduler, where its policy orders
    /// them, instead of in the device's queue (Ceph's BlueStore throttle, in device time).
    #[arg(long = "max-inflight-cost-ms", default_value_t = cairn_osd::DEFAULT_MAX_INFLIGHT_COST_MS)]
    #[serde(default = "default_max_inflight_cost_ms")]
    pub max_inflight_cost_ms: u64,
    /// A copy whose recovery would move at least this many objects (or a whole backfill) is
    /// filled in the background while a temporary acting set of complete copies serves the PG;
    /// shorter recoveries are done before the PG activates (its I/O waits for them).
    #[arg(long = "remap-min-objects", default_value_t = default_remap_min_objects())]
    #[serde(default = "default_remap_min_objects")]
    pub remap_min_objects: usize,
    /// Recovery moves an object in pieces of about this many bytes (Ceph's
    /// `osd_recovery_max_chunk`; 4096 up to a quarter of the frame limit): on a slow disk a
    /// smaller piece is a shorter wait for a client write queued behind it.
    #[arg(long = "recovery-chunk-bytes", default_value_t = default_recovery_chunk_bytes())]
    #[serde(default = "default_recovery_chunk_bytes")]
    pub recovery_chunk_bytes: u64,
    /// Seconds between scrubs of each PG this OSD leads (every copy's metadata compared;
    /// Ceph's `osd_scrub_min_interval`, a day); 0 never.
    #[arg(long = "scrub-interval-s", default_value_t = default_scrub_interval_s())]
    #[serde(default = "default_scrub_interval_s")]
    pub scrub_interval_s: u64,
    /// Seconds between deep scrubs of each PG this OSD leads (data and omap compared too;
    /// Ceph's `osd_deep_scrub_interval`, a week); 0 never.
    #[arg(long = "deep-scrub-interval-s", default_value_t = default_deep_scrub_interval_s())]
    #[serde(default = "default_deep_scrub_interval_s")]
    pub deep_scrub_interval_s: u64,
    /// Measure the scheduler's capacity through the store at boot (a few seconds of 4 KiB and
    /// 4 MiB writes in a collection of their own; Ceph's boot-time `osd bench`) instead of
    /// taking the device profile's raw figures, which a store's group commit exceeds. The first
    /// boot's measurement is kept in the data directory (`capacity.json`) and reused; delete it
    /// to measure again. Read it with `cairn tell osd.N config get osd_mclock_max_capacity_iops`.
    #[arg(long = "measure-capacity")]
    #[serde(default)]
    pub measure_capacity: bool,
    /// Wrap the data device in a fault-injecting one that `cairn tell osd.N inject ...`
    /// drives (EIO on reads, writes or flushes, on one object's blocks, or a power loss): for
    /// testing how the cluster handles a failing disk. Slows writes; never in production.
    #[arg(long = "fault-injection")]
    #[serde(default)]
    pub fault_injection: bool,
}

fn default_scrub_interval_s() -> u64 {
    cairn_osd::DEFAULT_SCRUB_INTERVAL_S
}

fn default_deep_scrub_interval_s() -> u64 {
    cairn_osd::DEFAULT_DEEP_SCRUB_INTERVAL_S
}

fn default_fast_fail() -> bool {
    true
}

fn default_op_shards() -> usize {
    cairn_osd::DEFAULT_OP_SHARDS
}

fn default_remap_min_objects() -> usize {
    cairn_osd::DEFAULT_REMAP_MIN_OBJECTS
}

fn default_recovery_chunk_bytes() -> u64 {
    cairn_osd::DEFAULT_RECOVERY_CHUNK_BYTES
}

fn default_max_inflight_cost_ms() -> u64 {
    cairn_osd::DEFAULT_MAX_INFLIGHT_COST_MS
}

fn default_store_groups_in_flight() -> usize {
    cairn_store::StoreConfig::default().max_groups_in_flight
}

fn default_policy() -> String {
    "mclock".into()
}

fn default_host() -> String {
    "localhost".into()
}

fn default_listen() -> SocketAddr {
    "127.0.0.1:0".parse().expect("literal address")
}

/// Default device file size: a sparse 16 GiB, so a 10 s `cairn bench` write to the default
/// three OSDs does not fill it (disk is used only as data is written). One OSD taking 4 MiB
/// writes at 1.6 GB/s fills it in 10 s: give it `--device-mib` to match.
const DEFAULT_DEVICE_MIB: u64 = 16 << 10;

fn default_device_mib() -> u64 {
    DEFAULT_DEVICE_MIB
}

/// Runs an OSD until interrupted.
pub fn run_osd(args: OsdRunArgs) -> anyhow::Result<()> {
    let args: OsdRunArgs = match &args.config {
        Some(path) => crate::mon_cmd::load_config(path)?,
        None => args,
    };
    let Some(data) = args.data.clone() else {
        bail!("an OSD needs a data directory (--data or `data` in the config file)");
    };
    std::fs::create_dir_all(&data).with_context(|| format!("creating {}", data.display()))?;
    let uuid_path = data.join("uuid");
    let uuid = match std::fs::read_to_string(&uuid_path) {
        Ok(u) => u.trim().to_string(),
        Err(_) => {
            let u = format!(
                "{:016x}{:08x}",
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)?
                    .as_nanos(),
                std::process::id()
            );
            std::fs::write(&uuid_path, &u)?;
            u
        }
    };
    let rt = osd_runtime(args.threads)?;
    rt.block_on(async {
        let mut cfg = OsdConfig::local(&uuid, &args.host, args.mon, data.clone());
        cfg.listen = args.listen;
        cfg.want_id = args.id;
        cfg.auth = crate::credentials::osd(args.keyring.as_deref(), args.id)?;
        cfg.device_bytes = args.device_mib << 20;
        cfg.metrics_listen = args.metrics;
        cfg.device_profile = args.profile.clone();
        cfg.heartbeat_grace_ms = args.heartbeat_grace_s * 1000;
        cfg.fast_fail_on_connection_refused = args.fast_fail_on_connection_refused;
        cfg.policy = cairn_qos::PolicyConfig::by_name(&args.policy)?;
        cfg.prefill = args.prefill;
        cfg.store_groups_in_flight = args.store_groups_in_flight;
        cfg.op_shards = args.op_shards;
        cfg.max_inflight_cost_ms = args.max_inflight_cost_ms;
        cfg.remap_min_objects = args.remap_min_objects;
        cfg.recovery_chunk_bytes = args.recovery_chunk_bytes;
        cfg.scrub_interval_s = args.scrub_interval_s;
        cfg.deep_scrub_interval_s = args.deep_scrub_interval_s;
        cfg.measure_capacity = args.measure_capacity;
        cfg.fault_injection = args.fault_injection;
        if args.prefill && !data.join("kv.redb").exists() {
            eprintln!(
                "prefilling {} MiB of {}/block with zeros",
                args.device_mib,
                data.display()
            );
        }
        let mut osd = OsdDaemon::start(cfg).await?;
        if let Some(m) = osd.metrics_addr() {
            eprintln!("osd.{} metrics on http://{m}/metrics", osd.id());
        }
        eprintln!("osd.{} serving on {}", osd.id(), osd.addr());
        let id = osd.id();
        let signal = tokio::select! {
            signal = stop_signal() => signal?,
            why = osd.failed() => {
                // Fail-stop: nothing restarts it; an operator replaces the device first.
                bail!("osd.{id} stopped: its store failed ({why}); it reported itself down")
            }
        };
        eprintln!("osd.{id}: {signal}: stopping");
        // Its ops end, then its store closes (what was acknowledged is durable either way).
        osd.shutdown(OSD_STOP_WAIT).await?;
        eprintln!("osd.{id} stopped");
        Ok(())
    })
}

/// How long a signalled OSD waits for its store to close before it exits anyway (less than
/// `cairn down`'s grace before SIGKILL).
const OSD_STOP_WAIT: Duration = Duration::from_secs(5);

/// Waits for SIGINT or SIGTERM (what `cairn down` sends); returns which.
async fn stop_signal() -> anyhow::Result<&'static str> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    Ok(tokio::select! {
        r = tokio::signal::ctrl_c() => { r?; "SIGINT" }
        _ = term.recv() => "SIGTERM",
    })
}

/// `cairn up`: a monitor and N OSDs as processes, plus a default pool.
#[derive(Args)]
pub struct UpArgs {
    /// Number of OSDs.
    #[arg(long, default_value_t = 3)]
    osds: usize,
    /// Cluster directory (one sub-directory per daemon, logs, pid file).
    #[arg(long, default_value = "cairn-cluster")]
    dir: PathBuf,
    /// Monitor address.
    #[arg(long, default_value = DEFAULT_MON)]
    mon: SocketAddr,
    /// Default pool name ("" for none).
    #[arg(long, default_value = "data")]
    pool: String,
    /// PGs of the default pool.
    #[arg(long = "pg-num", default_value_t = 64)]
    pg_num: u32,
    /// Device file size per OSD, in MiB.
    #[arg(long = "device-mib", default_value_t = DEFAULT_DEVICE_MIB)]
    device_mib: u64,
    /// Heartbeat grace of the monitor and OSDs, in seconds (Ceph: 20).
    #[arg(long = "heartbeat-grace-s", default_value_t = 20)]
    heartbeat_grace_s: u64,
    /// Whether every OSD reports a peer that refuses connections at once (see `cairn osd run
    /// --fast-fail-on-connection-refused`).
    #[arg(long = "fast-fail-on-connection-refused", default_value_t = true, action = clap::ArgAction::Set)]
    fast_fail_on_connection_refused: bool,
    /// Serve the monitor's, each OSD's and the S3 gateway's Prometheus metrics on free
    /// loopback ports (printed in their logs and by `cairn up`).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    metrics: bool,
    /// Emulated device profile of every OSD (hdd-7200, nvme-p3700, nvme-p4510, optane or a
    /// TOML path); default: the plain files.
    #[arg(long = "osd-profile")]
    osd_profile: Option<String>,
    /// Write zeros over each new OSD device file before formatting it (as on a raw device;
    /// see `cairn osd run --prefill`). `cairn up` then waits longer for the OSDs.
    #[arg(long)]
    prefill: bool,
    /// Op shards of every OSD (see `cairn osd run --op-shards`).
    #[arg(long = "op-shards", default_value_t = cairn_osd::DEFAULT_OP_SHARDS)]
    op_shards: usize,
    /// Worker threads of every OSD (see `cairn osd run --threads`).
    #[arg(long = "osd-threads", default_value_t = DEFAULT_OSD_THREADS)]
    osd_threads: usize,
    /// Address of the S3 gateway started with the cluster.
    #[arg(long, default_value = crate::s3_cmd::DEFAULT_S3)]
    s3: SocketAddr,
    /// Do not start the S3 gateway.
    #[arg(long = "no-s3")]
    no_s3: bool,
    /// Serve the S3 gateway over HTTPS with a generated local CA and certificate (kept in the
    /// cluster directory; the CA's path is printed for `aws --ca-bundle`).
    #[arg(long = "s3-tls")]
    s3_tls: bool,
    /// An extra argument for every `cairn osd run` (repeat it for more), e.g.
    /// `--osd-arg=--max-inflight-cost-ms=0` or `--osd-arg=--scrub-interval-s=0`.
    #[arg(long = "osd-arg", allow_hyphen_values = true)]
    osd_arg: Vec<String>,
    /// Authentication: `cephx` (the default for a new directory) creates keys in the
    /// directory (`keyring` is the administrator's, which commands run from the directory
    /// above the default `cairn-cluster` find by themselves; elsewhere `export
    /// CAIRN_KEYRING=DIR/keyring`) and every daemon and client must prove its key; `none`
    /// lets anyone who reaches a port do anything. An existing directory keeps what it was
    /// made with unless this is given.
    #[arg(long)]
    auth: Option<UpAuth>,
}

/// `cairn up --auth`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum UpAuth {
    /// Nothing is authenticated.
    None,
    /// Keys, proofs and capabilities (Ceph's cephx).
    Cephx,
}

/// The authentication `cairn up` runs the cluster with: `--auth` if given; else what the
/// directory was made with (its monitor's seed keyring, or a monitor store without one);
/// else, for a new directory, `cephx`.
fn up_auth(args: &UpArgs) -> UpAuth {
    match args.auth {
        Some(auth) => auth,
        None if crate::up_keys::mon_keyring(&args.dir).exists() => UpAuth::Cephx,
        None if args.dir.join("mon").exists() => UpAuth::None,
        None => UpAuth::Cephx,
    }
}

/// `cairn down`.
#[derive(Args)]
pub struct DownArgs {
    /// Cluster directory given to `cairn up`.
    #[arg(long, default_value = "cairn-cluster")]
    dir: PathBuf,
}

pub(crate) fn spawn(dir: &Path, name: &str, args: &[String]) -> anyhow::Result<u32> {
    let exe = std::env::current_exe()?;
    let log = std::fs::File::create(dir.join(format!("{name}.log")))?;
    let child = Command::new(exe)
        .args(args)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .with_context(|| format!("starting {name}"))?;
    Ok(child.id())
}

/// Whether `args.dir`'s file system can hold the device files of the OSDs about to be made
/// (those without a store yet): `--prefill` writes them whole at once, so a shortfall is an
/// error before anything starts; sparse files only fill as data arrives, so it is a warning.
fn check_room_for_devices(args: &UpArgs) -> anyhow::Result<()> {
    let fresh = (0..args.osds)
        .filter(|i| !args.dir.join(format!("osd{i}/kv.redb")).exists())
        .count() as u64;
    let need_mib = fresh.saturating_mul(args.device_mib);
    let free_mib = cairn_blockdev::fs_free_bytes(&args.dir)? >> 20;
    if need_mib <= free_mib {
        return Ok(());
    }
    let what = format!(
        "{fresh} new device files of {} MiB need {need_mib} MiB; {} has {free_mib} MiB free",
        args.device_mib,
        args.dir.display()
    );
    if args.prefill {
        bail!("--prefill: {what} (lower --device-mib or drop --prefill)");
    }
    eprintln!("warning: {what}: the files are sparse, but OSDs fail once it is full");
    Ok(())
}

/// The daemons of one `cairn up` run: each either found running from before (a second `up`
/// over a cluster some of whose daemons stopped or crashed starts only those) or started now;
/// the `pids` file is rewritten after each, so that `cairn down` finds every one even when a
/// later start fails.
struct UpDaemons<'a> {
    dir: &'a Path,
    before: cluster_dir::PidsFile,
    /// Pids in `cairn up`'s order: the monitor, each OSD, the S3 gateway.
    pids: Vec<u32>,
    /// Running daemons of the directory this run does not manage (more OSDs than `--osds`,
    /// the gateway under `--no-s3`, daemons a test started), and those it manages but has not
    /// reached yet: kept in the file, so that a start failing midway loses none of them.
    others: Vec<u32>,
    started: Vec<String>,
    kept: Vec<String>,
}

impl<'a> UpDaemons<'a> {
    fn new(dir: &'a Path) -> anyhow::Result<UpDaemons<'a>> {
        let mut before = cluster_dir::read(dir)?;
        // A daemon killed a moment ago may still be exiting (its last I/O in flight): it is
        // started again once it is gone, not kept as one that runs.
        let (dying, running) = std::mem::take(&mut before.running)
            .into_iter()
            .partition::<Vec<_>, _>(|d| cluster_dir::is_dying(d.pid));
        before.running = running;
        for d in dying {
            eprintln!("{} (pid {}) is exiting; waiting for it", d.name, d.pid);
            if !cluster_dir::wait_gone(d.pid) {
                bail!(
                    "{} (pid {}) was still exiting after {} s; run `cairn up` again once it is gone",
                    d.name,
                    d.pid,
                    cluster_dir::EXIT_WAIT.as_secs()
                );
            }
            before.gone.push(d.pid);
        }
        let others = before.running.iter().map(|d| d.pid).collect();
        Ok(UpDaemons {
            dir,
            before,
            pids: Vec::new(),
            others,
            started: Vec::new(),
            kept: Vec::new(),
        })
    }

    /// The running daemon `name` from before, if any.
    fn running(&self, name: &str) -> Option<u32> {
        self.before.find(name).map(|d| d.pid)
    }

    /// Keeps daemon `name` when it runs, or starts it through `start` (which returns its pid).
    fn ensure(
        &mut self,
        name: &str,
        start: impl FnOnce() -> anyhow::Result<u32>,
    ) -> anyhow::Result<u32> {
        let pid = match self.running(name) {
            Some(pid) => {
                self.kept.push(name.to_string());
                self.others.retain(|&p| p != pid);
                pid
            }
            None => {
                let pid = start()?;
                self.started.push(name.to_string());
                pid
            }
        };
        self.pids.push(pid);
        let all: Vec<u32> = self.pids.iter().chain(&self.others).copied().collect();
        cluster_dir::write(self.dir, &all)?;
        Ok(pid)
    }
}

/// Starts the cluster and waits until every OSD is up and the pool exists. Over a directory
/// whose cluster runs, it starts only the daemons that are not running (a crashed OSD, or
/// all of them after a reboot left a stale `pids` file) and leaves the others as they are.
pub fn run_up(args: UpArgs) -> anyhow::Result<()> {
    if args.osds == 0 {
        bail!("--osds must be at least 1");
    }
    cairn_osd::sched::check_shard_count(args.op_shards)?;
    crate::runtime::check_threads(args.osd_threads, "--osd-threads")?;
    std::fs::create_dir_all(&args.dir)?;
    let mut daemons = UpDaemons::new(&args.dir)?;
    if let Some(pid) = daemons.running("mon") {
        let listen = cluster_dir::command_line_value(pid, "--listen");
        if let Some(listen) = listen.filter(|l| *l != args.mon.to_string()) {
            bail!(
                "the monitor of the cluster in {} runs on {listen} (pid {pid}): pass --mon {listen}",
                args.dir.display()
            );
        }
    }
    check_room_for_devices(&args)?;
    let cephx = up_auth(&args) == UpAuth::Cephx;
    let unregistered = match cephx {
        true => crate::up_keys::prepare(&args.dir, args.osds)?,
        false => Vec::new(),
    };
    let keyring_arg = |path: PathBuf| ["--keyring".to_string(), path.display().to_string()];
    let mon = args.mon.to_string();
    let mon_data = args.dir.join("mon").display().to_string();
    let mut mon_args = vec![
        "mon".into(),
        "--listen".into(),
        mon.clone(),
        "--data".into(),
        mon_data,
        "--heartbeat-grace-s".into(),
        args.heartbeat_grace_s.to_string(),
    ];
    if args.metrics {
        mon_args.extend(["--metrics".into(), "127.0.0.1:0".into()]);
    }
    if cephx {
        mon_args.extend(keyring_arg(crate::up_keys::mon_keyring(&args.dir)));
    }
    daemons.ensure("mon", || spawn(&args.dir, "mon", &mon_args))?;
    // Prefilling writes every OSD's file once, all at once: allow 100 MiB/s in all.
    let prefill_s = match args.prefill {
        true => args.device_mib.saturating_mul(args.osds as u64) / 100,
        false => 0,
    };
    let deadline = Instant::now() + Duration::from_secs(30 + prefill_s);
    while std::net::TcpStream::connect(args.mon).is_err() {
        if Instant::now() > deadline {
            bail!("monitor did not start (see {}/mon.log)", args.dir.display());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let admin = match cephx {
        true => Some(crate::up_keys::admin_credentials(&args.dir)?),
        false => None,
    };
    if !unregistered.is_empty() {
        crate::runtime::command()?.block_on(async {
            let mon =
                MonClient::connect_as(args.mon, cairn_client::random_client_id(), admin.clone())
                    .await;
            crate::up_keys::register_osds(&mon, &args.dir, &unregistered).await
        })?;
    }
    for i in 0..args.osds {
        let data = args.dir.join(format!("osd{i}"));
        let mut osd_args = vec![
            "osd".into(),
            "run".into(),
            "--mon".into(),
            mon.clone(),
            "--data".into(),
            data.display().to_string(),
            "--host".into(),
            format!("host{i}"),
            "--id".into(),
            i.to_string(),
            "--device-mib".into(),
            args.device_mib.to_string(),
            "--heartbeat-grace-s".into(),
            args.heartbeat_grace_s.to_string(),
            "--op-shards".into(),
            args.op_shards.to_string(),
            "--threads".into(),
            args.osd_threads.to_string(),
            "--fast-fail-on-connection-refused".into(),
            args.fast_fail_on_connection_refused.to_string(),
        ];
        if args.metrics {
            osd_args.extend(["--metrics".into(), "127.0.0.1:0".into()]);
        }
        if let Some(p) = &args.osd_profile {
            osd_args.extend(["--profile".into(), p.clone()]);
        }
        if args.prefill {
            osd_args.push("--prefill".into());
        }
        osd_args.extend(args.osd_arg.iter().cloned());
        if cephx {
            osd_args.extend(keyring_arg(crate::up_keys::osd_keyring(&args.dir, i)));
        }
        let name = format!("osd{i}");
        daemons.ensure(&name, || spawn(&args.dir, &name, &osd_args))?;
    }
    let rt = crate::runtime::command()?;
    rt.block_on(async {
        let client = MonClient::connect_as(args.mon, cairn_client::random_client_id(), admin).await;
        client.subscribe(10_000).await?;
        // Wait for every OSD started here to be serving: a restarted monitor's map may still
        // list the previous run's addresses as up.
        loop {
            let serving = (0..args.osds)
                .filter(|i| {
                    std::fs::read_to_string(args.dir.join(format!("osd{i}.log")))
                        .is_ok_and(|log| log.contains("serving on"))
                })
                .count();
            if serving == args.osds {
                break;
            }
            if Instant::now() > deadline {
                bail!(
                    "only {serving} of {} OSDs started (see {}/osd*.log)",
                    args.osds,
                    args.dir.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        if !args.pool.is_empty() {
            let size = args.osds.min(3) as u32;
            let exists = client
                .wait_for_epoch(1, 10_000)
                .await?
                .placement
                .pool_named(&args.pool)
                .is_some();
            if !exists {
                client
                    .op(
                        Request::CreatePool {
                            name: args.pool.clone(),
                            size,
                            pg_num: args.pg_num,
                        },
                        10_000,
                    )
                    .await?;
            }
        }
        anyhow::Ok(())
    })?;
    if !args.no_s3 {
        let fresh = daemons.running("s3gw").is_none();
        daemons.ensure("s3gw", || {
            crate::s3_cmd::spawn_for_up(
                &args.dir,
                args.mon,
                args.s3,
                args.metrics,
                args.s3_tls,
                cephx
                    .then(|| crate::up_keys::s3gw_keyring(&args.dir))
                    .as_deref(),
                spawn,
            )
        })?;
        if fresh {
            let admin = match cephx {
                true => Some(crate::up_keys::admin_auth(&args.dir)?),
                false => None,
            };
            crate::s3_cmd::announce_for_up(&args.dir, args.mon, args.s3, args.s3_tls, admin)?;
        }
    }
    if daemons.before.exists {
        let list = |names: &[String]| match names.is_empty() {
            true => "none".to_string(),
            false => names.join(", "),
        };
        println!(
            "{} held a cluster: already running: {}; started: {}",
            args.dir.display(),
            list(&daemons.kept),
            list(&daemons.started)
        );
        if daemons.kept.iter().any(|n| n == "s3gw") {
            println!(
                "S3 gateway still running (keys in {})",
                args.dir.join("s3-credentials").display()
            );
        }
    }
    println!(
        "cairn cluster up: monitor {} with {} OSDs, data in {}",
        args.mon,
        args.osds,
        args.dir.display()
    );
    if cephx {
        let keyring = crate::up_keys::admin_keyring(&args.dir);
        match std::path::Path::new(crate::credentials::DEFAULT_KEYRINGS[0]) == keyring {
            true => println!(
                "authentication on: commands run from this directory use {} (client.admin's key)",
                keyring.display()
            ),
            false => println!(
                "authentication on: export CAIRN_KEYRING={} (client.admin's key) for the commands below",
                std::fs::canonicalize(&keyring).unwrap_or(keyring).display()
            ),
        }
    }
    if !args.pool.is_empty() {
        println!("pool '{}' ready. Try:", args.pool);
        println!(
            "  cairn put -p {} hello README.md && cairn get -p {} hello",
            args.pool, args.pool
        );
        println!("  cairn bench -p {} 10 write", args.pool);
        println!("  cairn status");
    }
    if args.metrics {
        let s3 = (!args.no_s3).then(|| "s3gw".to_string());
        let urls: Vec<String> = std::iter::once("mon".to_string())
            .chain((0..args.osds).map(|i| format!("osd{i}")))
            .chain(s3)
            .filter_map(|name| {
                let log = std::fs::read_to_string(args.dir.join(format!("{name}.log"))).ok()?;
                let url = log
                    .split_whitespace()
                    .find(|w| w.starts_with("http://") && w.ends_with("/metrics"))?;
                Some(format!("{name} {url}"))
            })
            .collect();
        println!("Prometheus metrics: {}", urls.join(", "));
    }
    println!("stop with: cairn down --dir {}", args.dir.display());
    Ok(())
}

/// How long `cairn down` waits for a stopped process to exit before it sends SIGKILL, and
/// again after SIGKILL before it gives up.
const DOWN_GRACE: Duration = Duration::from_secs(20);

/// Stops every daemon `cairn up` started in `dir` and waits until each has exited, so that a
/// `cairn up` right after finds every device file and map store unlocked. Pids in the file
/// that are no daemon of `dir` any more (exited, or reused by another process after a crash
/// or reboot) are left alone and named.
pub fn run_down(args: DownArgs) -> anyhow::Result<()> {
    let pids = cluster_dir::read(&args.dir)?;
    if !pids.exists {
        bail!(
            "no running cluster in {} ({} missing)",
            args.dir.display(),
            args.dir.join(cluster_dir::PIDS_FILE).display()
        );
    }
    let running: Vec<i32> = pids.running.iter().rev().map(|d| d.pid as i32).collect();
    let stopped = stop_processes(&running)?;
    std::fs::remove_file(args.dir.join(cluster_dir::PIDS_FILE))?;
    println!("stopped {stopped} processes");
    if !pids.gone.is_empty() {
        println!(
            "left alone: pids {:?} (no longer daemons of this cluster)",
            pids.gone
        );
    }
    Ok(())
}

/// Sends SIGTERM to each of `pids` (in order), SIGKILL to those still running after
/// `DOWN_GRACE`, and waits until every one has exited; returns how many were signalled.
pub(crate) fn stop_processes(pids: &[i32]) -> anyhow::Result<usize> {
    let mut stopped = Vec::new();
    for &pid in pids {
        let status = Command::new("kill").arg(pid.to_string()).status()?;
        if status.success() {
            stopped.push(pid);
        }
    }
    let lingering = wait_for_exit(&stopped, DOWN_GRACE);
    for pid in &lingering {
        eprintln!("process {pid} still running after {DOWN_GRACE:?}; sending SIGKILL");
        Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status()?;
    }
    let lingering = wait_for_exit(&lingering, DOWN_GRACE);
    anyhow::ensure!(
        lingering.is_empty(),
        "processes {lingering:?} did not exit even after SIGKILL"
    );
    Ok(stopped.len())
}

/// Polls until every pid in `pids` has exited (a zombie with no thread left holds no locks or files)
/// or `grace` passes; returns those still running.
fn wait_for_exit(pids: &[i32], grace: Duration) -> Vec<i32> {
    let deadline = Instant::now() + grace;
    loop {
        let running: Vec<i32> = pids.iter().copied().filter(|&p| is_running(p)).collect();
        if running.is_empty() || Instant::now() >= deadline {
            return running;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether process `pid` still exists as more than a zombie, read from `/proc/PID/stat` (its
/// state is the first field after the parenthesised command name). A zombie thread-group
/// leader whose other threads are still exiting counts as running: the process's files, and
/// so the locks on its store and map, close only when its last thread is gone.
pub(crate) fn is_running(pid: i32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next());
    match state {
        None | Some("X") => false,
        Some("Z") => std::fs::read_dir(format!("/proc/{pid}/task")).is_ok_and(|t| t.count() > 1),
        Some(_) => true,
    }
}
