//! `cairn osd run`: one OSD daemon, its settings from flags or a TOML file.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context};
use cairn_osd::{OsdConfig, OsdDaemon};
use clap::Args;

use crate::defaults::{DEFAULT_DEVICE_MIB, DEFAULT_MON};
use crate::runtime::osd_runtime;

/// `cairn osd run`: one OSD daemon. Settings come from flags, or all from `--config FILE`
/// (TOML with the same names: `mon`, `data`, `host`, `id`, `listen`, `metrics`, `device_mib`,
/// `heartbeat_grace_s`, `fast_fail_on_connection_refused`, `policy`, `profile`, `db_profile`,
/// `cache_profile`,
/// `cache_mib`, `cache_mode`, `cache_line_kib`, `prefill`,
/// `store_groups_in_flight`, `store_commit_pacing`, `op_shards`, `threads`, `max_inflight_cost_ms`, `remap_min_objects`,
/// `recovery_chunk_bytes`, `scrub_interval_s`, `deep_scrub_interval_s`, `measure_capacity`,
/// `fault_injection`). An OSD whose store fails (a device error) reports itself down and
/// exits with status 1, the cause in its log.
#[derive(Args, Clone, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OsdRunArgs {
    /// TOML file with every setting (flags are then ignored).
    #[arg(long)]
    #[serde(skip)]
    pub config: Option<PathBuf>,
    /// The OSD's keyring (`osd.N`'s key), in a TOML file; on the command line it is the
    /// global `--keyring`.
    #[arg(skip)]
    pub keyring: Option<PathBuf>,
    /// Monitor address.
    #[arg(long, default_value = DEFAULT_MON)]
    pub mon: SocketAddr,
    /// Data directory (device file `block`, metadata `kv.redb`, identity `uuid`).
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// Host name (CRUSH failure domain).
    #[arg(long, default_value = "localhost")]
    pub host: String,
    /// The OSD id to ask the monitor for at the first boot (given when free, else the
    /// lowest free id; a known OSD keeps its id). `cairn up` asks for N in directory `osdN`.
    #[arg(long)]
    pub id: Option<i32>,
    /// Address to serve on.
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: SocketAddr,
    /// Device file size when created, in MiB.
    #[arg(long = "device-mib", default_value_t = DEFAULT_DEVICE_MIB)]
    pub device_mib: u64,
    /// Address of the Prometheus metrics page (`/metrics`); none if not given.
    #[arg(long)]
    pub metrics: Option<SocketAddr>,
    /// Seconds a silent peer is given before it is reported down (Ceph: 20).
    #[arg(long = "heartbeat-grace-s", default_value_t = 20)]
    pub heartbeat_grace_s: u64,
    /// Report a peer whose address refuses connections at once, so the monitor marks it
    /// down without waiting for the heartbeat grace (Ceph's
    /// `osd_fast_fail_on_connection_refused`); `false` leaves failure detection to the grace
    /// alone (e.g. where a firewall rejects connections to live daemons).
    #[arg(long = "fast-fail-on-connection-refused", default_value_t = true, action = clap::ArgAction::Set)]
    pub fast_fail_on_connection_refused: bool,
    /// Scheduler policy (fifo, wpq, mclock, crrn, orr, trr, tbf); switch live with
    /// `cairn tell osd.N config set osd_op_queue NAME`.
    #[arg(long, default_value = "mclock")]
    pub policy: String,
    /// Emulate a device profile over the data file (hdd-7200, nvme-p3700, nvme-p4510, optane or
    /// a TOML path); the scheduler's cost model takes the profile's capacity.
    #[arg(long)]
    pub profile: Option<String>,
    /// Keep the store's superblock and write-ahead log on a DB/WAL device of their own
    /// (BlueStore's): its file `block.db` in the data directory, emulating this profile
    /// (nvme-p3700, ...; `none` for the file as it is). Fixed when the store is made;
    /// exclusive with a cache.
    #[arg(long)]
    pub db_profile: Option<String>,
    /// Put an SSD cache in front of the data device (Open-CAS-style, see `cairn cache`): its
    /// file `cache` in the data directory, emulating this profile (nvme-p3700, ...).
    #[arg(long)]
    pub cache_profile: Option<String>,
    /// Size of the cache file in MiB (default: an eighth of the device). Giving it turns the
    /// cache on without a profile.
    #[arg(long)]
    pub cache_mib: Option<u64>,
    /// Mode a new cache starts in: wt, wb, wa, pt, wo (switch live with `cairn tell osd.N
    /// cache set-mode`).
    #[arg(long, default_value = "wb")]
    pub cache_mode: String,
    /// Cache line size of a new cache, in KiB: 4, 8, 16, 32 or 64.
    #[arg(long, default_value_t = 4)]
    pub cache_line_kib: u64,
    /// Write zeros over a new device file before formatting it, so data lands on allocated
    /// blocks as on a raw device (a sparse file pays the file system's block allocation on
    /// every first write). Costs one full write of the file.
    #[arg(long)]
    pub prefill: bool,
    /// Store group commits whose writes may be in flight at once (1 or 2): with 2, a group
    /// that writes 1 MiB or more copy-on-write has the next one launched behind it
    /// (docs/design/store.md).
    #[arg(long = "store-groups-in-flight", default_value_t = cairn_store::StoreConfig::default().max_groups_in_flight)]
    pub store_groups_in_flight: usize,
    /// Whether the store paces its commits to a running checkpoint (docs/design/store.md):
    /// steadier client rates and lower tail latency on an HDD under a DB device, for fewer
    /// small writes sustained there.
    #[arg(long = "store-commit-pacing", default_value_t = cairn_store::StoreConfig::default().commit_pacing, action = clap::ArgAction::Set)]
    pub store_commit_pacing: bool,
    /// Scheduler shards (Ceph's `osd_op_num_shards`, 1..=64): each PG's work is scheduled in
    /// one, with its own queue and dispatcher; QoS settings hold for the whole OSD.
    #[arg(long = "op-shards", default_value_t = cairn_osd::DEFAULT_OP_SHARDS)]
    pub op_shards: usize,
    /// Worker threads of the daemon's runtime (1..=64; Ceph's op threads): every request's
    /// messaging, scheduling and store work runs on them (see [`DEFAULT_OSD_THREADS`]).
    #[arg(long, default_value_t = crate::runtime::DEFAULT_OSD_THREADS)]
    pub threads: usize,
    /// Most device time (by the scheduler's cost model) of requests released and not finished,
    /// in ms, 0 for no limit: beyond it requests wait in the scheduler, where its policy orders
    /// them, instead of in the device's queue (Ceph's BlueStore throttle, in device time).
    #[arg(long = "max-inflight-cost-ms", default_value_t = cairn_osd::DEFAULT_MAX_INFLIGHT_COST_MS)]
    pub max_inflight_cost_ms: u64,
    /// A copy whose recovery would move at least this many objects (or a whole backfill) is
    /// filled in the background while a temporary acting set of complete copies serves the PG;
    /// a shorter log recovery runs after the PG activates (Ceph's
    /// `osd_async_recovery_min_cost`).
    #[arg(long = "remap-min-objects", default_value_t = cairn_osd::DEFAULT_REMAP_MIN_OBJECTS)]
    pub remap_min_objects: usize,
    /// Recovery moves an object in pieces of about this many bytes (Ceph's
    /// `osd_recovery_max_chunk`; 4096 up to a quarter of the frame limit); by default 8 MiB on
    /// an HDD (with or without a DB device or cache) and 1 MiB on an SSD, where a smaller piece
    /// is a shorter wait for a client op queued behind it.
    #[arg(long = "recovery-chunk-bytes")]
    pub recovery_chunk_bytes: Option<u64>,
    /// Seconds between scrubs of each PG this OSD leads (every copy's metadata compared;
    /// Ceph's `osd_scrub_min_interval`, a day); 0 never.
    #[arg(long = "scrub-interval-s", default_value_t = cairn_osd::DEFAULT_SCRUB_INTERVAL_S)]
    pub scrub_interval_s: u64,
    /// Seconds between deep scrubs of each PG this OSD leads (data and omap compared too;
    /// Ceph's `osd_deep_scrub_interval`, a week); 0 never.
    #[arg(long = "deep-scrub-interval-s", default_value_t = cairn_osd::DEFAULT_DEEP_SCRUB_INTERVAL_S)]
    pub deep_scrub_interval_s: u64,
    /// Measure the scheduler's capacity through the store at boot (a few seconds of 4 KiB and
    /// 4 MiB writes in a collection of their own; Ceph's boot-time `osd bench`) instead of
    /// taking the device profile's raw figures, which a store's group commit exceeds. The first
    /// boot's measurement is kept in the data directory (`capacity.json`) and reused; delete it
    /// to measure again. Read it with `cairn tell osd.N config get osd_mclock_max_capacity_iops`.
    #[arg(long = "measure-capacity")]
    pub measure_capacity: bool,
    /// Wrap the data device in a fault-injecting one that `cairn tell osd.N inject ...`
    /// drives (EIO on reads, writes or flushes, on one object's blocks, or a power loss): for
    /// testing how the cluster handles a failing disk. Slows writes; never in production.
    #[arg(long = "fault-injection")]
    pub fault_injection: bool,
}

/// Clap's defaults (flags and TOML files share them; see [`crate::config_file::clap_defaults`]).
impl Default for OsdRunArgs {
    fn default() -> Self {
        crate::config_file::clap_defaults()
    }
}

/// Runs an OSD until interrupted.
pub fn run(args: OsdRunArgs) -> anyhow::Result<()> {
    let args: OsdRunArgs = match &args.config {
        Some(path) => crate::config_file::load_config(path)?,
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
        cfg.cache = cache_config(&args)?;
        cfg.db = args
            .db_profile
            .as_ref()
            .map(|name| cairn_osd::db_device::OsdDbConfig {
                profile: (name != "none").then(|| name.clone()),
            });
        cfg.heartbeat_grace_ms = args.heartbeat_grace_s * 1000;
        cfg.fast_fail_on_connection_refused = args.fast_fail_on_connection_refused;
        cfg.policy = cairn_qos::PolicyConfig::by_name(&args.policy)?;
        cfg.prefill = args.prefill;
        cfg.store_groups_in_flight = args.store_groups_in_flight;
        cfg.store_commit_pacing = args.store_commit_pacing;
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

/// The cache `args` ask for: on when a cache profile or size is given.
fn cache_config(args: &OsdRunArgs) -> anyhow::Result<Option<cairn_osd::cached::OsdCacheConfig>> {
    if args.cache_profile.is_none() && args.cache_mib.is_none() {
        return Ok(None);
    }
    let mib = args.cache_mib.unwrap_or((args.device_mib / 8).max(16));
    let settings = cairn_cache::CacheConfig {
        mode: args.cache_mode.parse()?,
        line_bytes: args.cache_line_kib * 1024,
        ..cairn_cache::CacheConfig::default()
    };
    settings.validate()?;
    Ok(Some(cairn_osd::cached::OsdCacheConfig {
        profile: args.cache_profile.clone(),
        bytes: mib << 20,
        settings,
    }))
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

#[cfg(test)]
mod tests {
    use super::OsdRunArgs;

    /// A TOML file's missing settings take the flags' defaults, declared once on the flags.
    #[test]
    fn a_config_file_shares_the_flags_defaults_and_refuses_unknown_keys() {
        let empty: OsdRunArgs = toml::from_str("").unwrap();
        assert_eq!(empty.mon.to_string(), crate::defaults::DEFAULT_MON);
        assert_eq!(empty.host, "localhost");
        assert_eq!(empty.listen.to_string(), "127.0.0.1:0");
        assert_eq!(empty.device_mib, crate::defaults::DEFAULT_DEVICE_MIB);
        assert_eq!(empty.heartbeat_grace_s, 20);
        assert!(empty.fast_fail_on_connection_refused);
        assert_eq!(empty.policy, "mclock");
        assert_eq!(empty.threads, crate::runtime::DEFAULT_OSD_THREADS);
        assert_eq!(empty.op_shards, cairn_osd::DEFAULT_OP_SHARDS);
        assert_eq!(empty.scrub_interval_s, cairn_osd::DEFAULT_SCRUB_INTERVAL_S);
        assert!(empty.data.is_none() && empty.profile.is_none() && !empty.fault_injection);

        let some: OsdRunArgs = toml::from_str("policy = \"wpq\"\nthreads = 2\n").unwrap();
        assert_eq!((some.policy.as_str(), some.threads), ("wpq", 2));
        assert_eq!(some.heartbeat_grace_s, 20);

        let unknown = toml::from_str::<OsdRunArgs>("heartbeat_grace = 3\n");
        assert!(unknown.is_err());
    }
}
