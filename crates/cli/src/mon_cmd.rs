//! `cairn mon`, `cairn status`, `cairn pool ...`, `cairn osd out|in|down`: the monitor daemon
//! and the operator commands that talk to it.

use std::net::SocketAddr;

use anyhow::{bail, Context};
use cairn_client::mon::MonClient;
use cairn_clustermap::analysis::analyze;
use cairn_clustermap::balance::up_sets;
use cairn_clustermap::shape::Topology;
use cairn_clustermap::{ClusterMap, MapFlag};
use cairn_mon::daemon::{MonDaemon, MonServing};
use cairn_mon::{MonConfig, Monitor};
use cairn_proto::mon::Request;
use clap::{Args, Subcommand};

/// Default monitor address.
pub const DEFAULT_MON: &str = "127.0.0.1:6789";
const TIMEOUT_MS: u64 = 10_000;

/// `cairn mon`: run a monitor. Settings come from flags, or all from `--config FILE` (TOML
/// with the same names: `listen`, `fsid`, `down_out_interval_s`, `heartbeat_grace_s`, `data`,
/// `metrics`).
#[derive(Args, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MonArgs {
    /// TOML file with every setting (flags are then ignored).
    #[arg(long)]
    #[serde(skip)]
    config: Option<std::path::PathBuf>,
    /// Address to listen on.
    #[arg(long, default_value = DEFAULT_MON)]
    #[serde(default = "default_mon")]
    listen: SocketAddr,
    /// Cluster id.
    #[arg(long, default_value = "cairn")]
    #[serde(default = "default_fsid")]
    fsid: String,
    /// Seconds a down OSD stays in before it is marked out.
    #[arg(long = "down-out-interval-s", default_value_t = 600)]
    #[serde(default = "default_down_out_s")]
    down_out_interval_s: u64,
    /// Seconds an OSD must have been silent, as its peers report, before it is marked down.
    #[arg(long = "heartbeat-grace-s", default_value_t = 20)]
    #[serde(default = "default_grace_s")]
    heartbeat_grace_s: u64,
    /// Directory for the durable map store (the map then survives restarts).
    #[arg(long)]
    #[serde(default)]
    data: Option<std::path::PathBuf>,
    /// Address of the monitor's Prometheus page (`/metrics`: OSDs, pools, PG placement and
    /// spread, requests served); none if not given. Port 0 picks a free one (logged).
    #[arg(long)]
    #[serde(default)]
    metrics: Option<SocketAddr>,
    /// The keyring the authentication database is seeded from on first start, in a TOML
    /// file; on the command line it is the global `--keyring`.
    #[arg(skip)]
    #[serde(default)]
    keyring: Option<std::path::PathBuf>,
    /// Allow pools to be removed (Ceph's `mon_allow_pool_delete`; `cairn tell mon config set
    /// mon_allow_pool_delete true` changes it while the monitor runs).
    #[arg(long = "allow-pool-delete")]
    #[serde(default)]
    allow_pool_delete: bool,
}

/// Default monitor address, for config files.
pub fn default_mon() -> SocketAddr {
    DEFAULT_MON.parse().expect("literal address")
}

fn default_fsid() -> String {
    "cairn".into()
}

fn default_down_out_s() -> u64 {
    600
}

/// Ceph's heartbeat grace, in seconds (for config files).
pub fn default_grace_s() -> u64 {
    20
}

/// Reads a daemon's settings from a TOML file; unknown keys are errors.
pub fn load_config<T: for<'de> serde::Deserialize<'de>>(
    path: &std::path::Path,
) -> anyhow::Result<T> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    toml::from_str(&text).with_context(|| format!("in {}", path.display()))
}

/// Where to find the monitor.
#[derive(Args, Clone)]
pub struct MonAddr {
    /// Monitor address.
    #[arg(long = "mon", default_value = DEFAULT_MON)]
    pub mon: SocketAddr,
}

/// `cairn health [detail]`.
#[derive(Args)]
pub struct HealthArgs {
    #[command(flatten)]
    mon: MonAddr,
    /// `detail`: each check's OSDs and PGs, a line each.
    detail: Option<HealthDetail>,
}

/// The one word `cairn health` takes after it.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum HealthDetail {
    /// Each check's OSDs and PGs.
    Detail,
}

/// `cairn health [detail]`.
pub fn run_health(args: HealthArgs) -> anyhow::Result<()> {
    crate::admin_cmd::health(args.mon.mon, args.detail.is_some())
}

/// `cairn pool ...`.
#[derive(Args)]
pub struct PoolArgs {
    /// Monitor address (before or after the pool command).
    #[arg(long = "mon", global = true, default_value = DEFAULT_MON)]
    mon: SocketAddr,
    #[command(subcommand)]
    command: PoolCommand,
}

#[derive(Subcommand)]
enum PoolCommand {
    /// Create a replicated pool.
    Create {
        /// Name.
        name: String,
        /// PG count.
        #[arg(long = "pg-num", default_value_t = 128)]
        pg_num: u32,
        /// Replicas.
        #[arg(long, default_value_t = 3)]
        size: u32,
    },
    /// List pools.
    Ls,
    /// Remove a pool and every object in it, as Ceph's `osd pool delete NAME NAME
    /// --yes-i-really-really-mean-it`; the monitor must allow it first (`cairn tell mon config
    /// set mon_allow_pool_delete true`, or `cairn mon --allow-pool-delete`).
    Rm {
        /// Name.
        name: String,
        /// The name again.
        repeated: Option<String>,
        /// Confirms that the pool's objects are to be deleted.
        #[arg(long = "yes-i-really-really-mean-it")]
        sure: bool,
    },
    /// Change a pool's replication, as `ceph osd pool set NAME size|min_size N`: a new size
    /// also resets min_size to size - size/2; every PG peers again, then new copies are
    /// backfilled (or surplus ones deleted).
    Set {
        /// Name.
        name: String,
        /// What to set.
        key: PoolKey,
        /// Its new value.
        value: u32,
        /// Confirms a size of 1 (every object then has one copy: losing its OSD loses it).
        #[arg(long = "yes-i-really-mean-it")]
        sure: bool,
    },
    /// Set a pool's quota, as `ceph osd pool set-quota NAME max_objects|max_bytes N`: once its
    /// objects or bytes (one copy) reach it, writes other than removals are refused (within
    /// a couple of seconds: the OSDs report usage that often). 0 removes the limit; bytes
    /// take K, M, G, T suffixes (powers of 1024).
    SetQuota {
        /// Name.
        name: String,
        /// Which limit.
        key: QuotaKey,
        /// Its value (0: none).
        #[arg(value_parser = parse_quantity)]
        value: u64,
    },
    /// Show a pool's quota and whether it is reached.
    GetQuota {
        /// Name.
        name: String,
    },
}

/// A pool quota limit `cairn pool set-quota` sets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum QuotaKey {
    /// Most client objects.
    #[value(name = "max_objects")]
    MaxObjects,
    /// Most logical bytes (one copy of each object).
    #[value(name = "max_bytes")]
    MaxBytes,
}

/// A count or a byte size: digits, optionally followed by K, M, G or T (powers of 1024; a
/// trailing `i` or `B` is accepted, as in `10GiB`).
fn parse_quantity(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let t = t.strip_suffix('B').unwrap_or(t);
    let t = t.strip_suffix('i').unwrap_or(t);
    let (digits, shift) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let shift = match c.to_ascii_uppercase() {
                'K' => 10,
                'M' => 20,
                'G' => 30,
                'T' => 40,
                _ => return Err(format!("`{text}`: unknown unit `{c}` (K, M, G or T)")),
            };
            (&t[..i], shift)
        }
        _ => (t, 0),
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("`{text}` is not a whole number (with an optional K, M, G or T)"))?;
    n.checked_mul(1 << shift)
        .ok_or_else(|| format!("`{text}` is too large"))
}

/// A pool parameter `cairn pool set` changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum PoolKey {
    /// Replicas of each object.
    Size,
    /// Copies a PG needs up to serve reads and writes.
    #[value(name = "min_size")]
    MinSize,
}

/// `cairn osd out|in|down ID`.
#[derive(Args)]
pub struct OsdArgs {
    #[command(flatten)]
    mon: MonAddr,
    #[command(subcommand)]
    command: OsdCommand,
}

impl OsdArgs {
    /// Whether this is `cairn osd run` (a daemon).
    pub fn runs_daemon(&self) -> bool {
        matches!(self.command, OsdCommand::Run(_))
    }
}

#[derive(Subcommand)]
enum OsdCommand {
    /// Mark out: its data moves to other OSDs.
    Out {
        /// OSD id.
        id: i32,
    },
    /// Mark in.
    In {
        /// OSD id.
        id: i32,
    },
    /// Mark down.
    Down {
        /// OSD id.
        id: i32,
    },
    /// Set the override weight (Ceph's `osd reweight`): 1.0 keeps the OSD's CRUSH share, 0.8
    /// moves a fifth of its PGs to other OSDs, 0 is `out`.
    Reweight {
        /// OSD id.
        id: i32,
        /// 0.0..=1.0.
        weight: f64,
    },
    /// Set the CRUSH weight (Ceph's `osd crush reweight`): the OSD's share of the data against
    /// the others' (by convention its capacity in TiB).
    CrushReweight {
        /// OSD id.
        id: i32,
        /// 0.0..=1000.0.
        weight: f64,
    },
    /// Declare a down OSD's data lost (Ceph's `osd lost`): PGs down for want of its copy go
    /// active on what the others hold, and writes only it had are gone. It stays in the map.
    Lost {
        /// OSD id.
        id: i32,
        /// Required: the data only this OSD holds is given up.
        #[arg(long = "yes-i-really-mean-it")]
        yes: bool,
    },
    /// Remove a down OSD from the cluster for good (Ceph's `osd purge`): its PGs are placed
    /// on the others and recovered there; `cairn status` stops counting it.
    Rm {
        /// OSD id.
        id: i32,
    },
    /// Set cluster flags (Ceph's `osd set`): noout, noin, noup, nodown, norecover, nobackfill,
    /// norebalance, noscrub, nodeep-scrub, pauserd, pausewr, or pause (both pause flags).
    /// `cairn status` and `cairn health` list what is set.
    Set {
        /// The flags.
        #[arg(required = true)]
        flags: Vec<String>,
    },
    /// Keep these OSDs in while they are down (Ceph's `osd add-noout`): maintenance of one
    /// host without the cluster-wide `noout`.
    AddNoout {
        /// OSD ids.
        #[arg(required = true)]
        ids: Vec<i32>,
    },
    /// Let these OSDs be marked out again while down (Ceph's `osd rm-noout`).
    RmNoout {
        /// OSD ids.
        #[arg(required = true)]
        ids: Vec<i32>,
    },
    /// Keep these OSDs down when they boot (Ceph's `osd add-noup`): a flapping OSD stays out
    /// of its PGs' acting sets; it boots by itself once the flag is removed.
    AddNoup {
        /// OSD ids.
        #[arg(required = true)]
        ids: Vec<i32>,
    },
    /// Let these OSDs come up again (Ceph's `osd rm-noup`).
    RmNoup {
        /// OSD ids.
        #[arg(required = true)]
        ids: Vec<i32>,
    },
    /// Never mark these OSDs down on failure reports or missing beacons (Ceph's
    /// `osd add-nodown`); `osd down` still does.
    AddNodown {
        /// OSD ids.
        #[arg(required = true)]
        ids: Vec<i32>,
    },
    /// Let failure detection mark these OSDs down again (Ceph's `osd rm-nodown`).
    RmNodown {
        /// OSD ids.
        #[arg(required = true)]
        ids: Vec<i32>,
    },
    /// Keep these OSDs out when they boot after being marked out automatically (Ceph's
    /// `osd add-noin`).
    AddNoin {
        /// OSD ids.
        #[arg(required = true)]
        ids: Vec<i32>,
    },
    /// Let these OSDs be marked in again when they boot (Ceph's `osd rm-noin`).
    RmNoin {
        /// OSD ids.
        #[arg(required = true)]
        ids: Vec<i32>,
    },
    /// Unset cluster flags (Ceph's `osd unset`).
    Unset {
        /// The flags.
        #[arg(required = true)]
        flags: Vec<String>,
    },
    /// OSDs by host with state and weights.
    Tree,
    /// Where an object lives, as Ceph's `osd map POOL OBJECT`: its hash, PG, up and acting
    /// sets; and the decimal id the OSD's scheduler and TBF rules (`object=`) know it by.
    Map {
        /// Pool name.
        pool: String,
        /// Object name.
        object: String,
    },
    /// Run an OSD daemon.
    Run(Box<crate::cluster_cmd::OsdRunArgs>),
    /// Per-OSD usage: PGs, objects, stored and allocated bytes (asks each up OSD).
    Df,
    /// Whether these OSDs can stop (maintenance, a reboot) with every PG still serving, as
    /// Ceph's `osd ok-to-stop`: fails naming the PGs that would fall below min_size or do not
    /// serve now; says how many would go on degraded.
    OkToStop {
        /// OSD ids.
        #[arg(required = true)]
        ids: Vec<i32>,
    },
    /// Whether these OSDs can be destroyed without losing a copy, as Ceph's
    /// `osd safe-to-destroy`: no PG maps to them, every PG is active+clean and they hold no
    /// PG copy (mark them out and wait first).
    SafeToDestroy {
        /// OSD ids.
        #[arg(required = true)]
        ids: Vec<i32>,
    },
}

/// Runs the monitor until interrupted.
pub fn run_mon(args: MonArgs) -> anyhow::Result<()> {
    let args: MonArgs = match &args.config {
        Some(path) => load_config(path)?,
        None => args,
    };
    crate::runtime::command()?.block_on(async {
        let config = MonConfig {
            down_out_interval_ms: args.down_out_interval_s * 1000,
            heartbeat_grace_ms: args.heartbeat_grace_s * 1000,
            allow_pool_delete: args.allow_pool_delete,
            ..MonConfig::default()
        };
        let (monitor, store) = match &args.data {
            Some(dir) => {
                let store = cairn_mon::store::MapStore::open(dir).await?;
                let map = match store.load().await? {
                    Some(map) => map,
                    None => ClusterMap::new(&args.fsid)?,
                };
                let history = store.load_history(&map).await?;
                (Monitor::with_history(map, history, config), Some(store))
            }
            None => (Monitor::new(ClusterMap::new(&args.fsid)?, config), None),
        };
        eprintln!(
            "monitor map at epoch {} (history from epoch {})",
            monitor.map().epoch,
            monitor.history().oldest_epoch()
        );
        let auth = crate::credentials::keyring(args.keyring.as_deref())?.map(|seed| {
            cairn_mon::daemon::MonAuthConfig {
                seed,
                min_mode: crate::credentials::mode(),
            }
        });
        if auth.is_none() {
            eprintln!("warning: no keyring: the monitor authenticates no one (auth none)");
        }
        let serving = MonServing {
            store,
            metrics_listen: args.metrics,
            auth,
        };
        let daemon = MonDaemon::serve(monitor, args.listen, serving).await?;
        eprintln!("monitor listening on {}", daemon.addr());
        if let Some(m) = daemon.metrics_addr() {
            eprintln!("monitor metrics on http://{m}/metrics");
        }
        tokio::signal::ctrl_c().await?;
        eprintln!("monitor stopping");
        Ok(())
    })
}

/// Sends one operator request to the monitor at `mon` on a connection of its own.
pub(crate) async fn mon_op(
    mon: SocketAddr,
    request: Request,
) -> anyhow::Result<cairn_proto::mon::MonReply> {
    let client = MonClient::connect_as(
        mon,
        cairn_client::random_client_id(),
        crate::credentials::client()?,
    )
    .await;
    Ok(client.op(request, TIMEOUT_MS).await?)
}

async fn current_map(mon: SocketAddr) -> anyhow::Result<ClusterMap> {
    let client = MonClient::connect_as(
        mon,
        cairn_client::random_client_id(),
        crate::credentials::client()?,
    )
    .await;
    client
        .subscribe(TIMEOUT_MS)
        .await
        .with_context(|| format!("monitor at {mon}"))?;
    Ok(client.wait_for_epoch(1, TIMEOUT_MS).await?)
}

/// `cairn status`: health, OSDs, pools and PG spread, like `ceph -s`.
pub fn run_status(args: MonAddr) -> anyhow::Result<()> {
    crate::runtime::command()?.block_on(async {
        // One connection for the map and every OSD's answers.
        let client = crate::admin_cmd::connect(args.mon).await?;
        let map = client.map().context("no map from the monitor")?;
        let up = map.osds.values().filter(|o| o.up).count();
        let inn = map.osds.values().filter(|o| o.reweight > 0).count();
        let rows = crate::admin_cmd::pg_rows(&client).await;
        let mut states = crate::admin_cmd::PgStates::new();
        for r in &rows {
            *states.entry(r.state.clone()).or_default() += 1;
        }
        // The same checks as `cairn health`, each one's summary (their detail needs usage).
        let health = crate::health::assess(&map, &rows, &Default::default());
        println!(
            "cluster {}  epoch {}  {}",
            map.fsid,
            map.epoch,
            health.level.name()
        );
        for (i, check) in health.checks.iter().enumerate() {
            let label = if i == 0 { "health:" } else { "" };
            println!("  {label:<7} {}", check.summary);
        }
        if !health.checks.is_empty() {
            println!("          (`cairn health detail` names each OSD and PG concerned)");
        }
        let flags: Vec<&str> = map.flags.iter().map(|f| f.name()).collect();
        let flags = match flags.is_empty() {
            true => String::new(),
            false => format!("; flags {}", flags.join(",")),
        };
        println!("  osd: {} total, {up} up, {inn} in{flags}", map.osds.len());
        let down: Vec<i32> = map.osds.values().filter(|o| !o.up).map(|o| o.id).collect();
        for pool in map.placement.pools.values() {
            // The spread is over the OSDs that are up: a down OSD holds no up set's copy, and
            // counting it would read as imbalance where there is only a failure.
            let mut topo = Topology::for_pool(&map.placement, pool)?;
            let excluded = down.iter().filter(|&&o| topo.eligible(o)).count();
            for &o in &down {
                topo.exclude(o);
            }
            let spread = analyze(&up_sets(&map.placement, pool.id)?, &topo);
            let not_counted = match excluded {
                0 => String::new(),
                n => format!(", {n} down OSD{} not counted", if n == 1 { "" } else { "s" }),
            };
            println!(
                "  pool {} '{}' size {} pg_num {}: PGs per up OSD {}~{} (max deviation {:.1}{not_counted})",
                pool.id,
                pool.name,
                pool.size,
                pool.pg_num,
                spread.osds.min,
                spread.osds.max,
                spread.osds.max_deviation
            );
        }
        if up > 0 {
            crate::admin_cmd::live_status(&client, &states).await;
        }
        Ok(())
    })
}

/// `cairn pool ...`.
pub fn run_pool(args: PoolArgs) -> anyhow::Result<()> {
    crate::runtime::command()?.block_on(async {
        match args.command {
            PoolCommand::Ls => {
                let map = current_map(args.mon).await?;
                for p in map.placement.pools.values() {
                    let quota = match map.quotas.get(&p.id) {
                        Some(q) if q.full => format!(" quota {} (full)", q.describe()),
                        Some(q) => format!(" quota {}", q.describe()),
                        None => String::new(),
                    };
                    println!(
                        "{} {} size {} min_size {} pg_num {}{quota}",
                        p.id, p.name, p.size, p.min_size, p.pg_num
                    );
                }
            }
            PoolCommand::Create { name, pg_num, size } => {
                let r = mon_op(
                    args.mon,
                    Request::CreatePool {
                        name: name.clone(),
                        size,
                        pg_num,
                    },
                )
                .await?;
                println!("pool '{name}' created (epoch {})", r.epoch);
            }
            PoolCommand::Set {
                name,
                key,
                value,
                sure,
            } => {
                if key == PoolKey::Size && value == 1 && !sure {
                    bail!(
                        "size 1 keeps one copy of every object (an OSD lost is its data lost); \
                         pass --yes-i-really-mean-it to set it"
                    );
                }
                let (size, min_size) = match key {
                    PoolKey::Size => (Some(value), None),
                    PoolKey::MinSize => (None, Some(value)),
                };
                let r = mon_op(
                    args.mon,
                    Request::SetPool {
                        name: name.clone(),
                        size,
                        min_size,
                    },
                )
                .await?;
                let map = current_map(args.mon).await?;
                let pool = map
                    .placement
                    .pool_named(&name)
                    .context("the pool is gone")?;
                println!(
                    "pool '{name}' size {} min_size {} (epoch {})",
                    pool.size, pool.min_size, r.epoch
                );
            }
            PoolCommand::SetQuota { name, key, value } => {
                let (max_objects, max_bytes) = match key {
                    QuotaKey::MaxObjects => (Some(value), None),
                    QuotaKey::MaxBytes => (None, Some(value)),
                };
                let r = mon_op(
                    args.mon,
                    Request::SetPoolQuota {
                        name: name.clone(),
                        max_objects,
                        max_bytes,
                    },
                )
                .await?;
                let map = current_map(args.mon).await?;
                println!("{} (epoch {})", quota_lines(&map, &name)?, r.epoch);
            }
            PoolCommand::GetQuota { name } => {
                let map = current_map(args.mon).await?;
                println!("{}", quota_lines(&map, &name)?);
            }
            PoolCommand::Rm {
                name,
                repeated,
                sure,
            } => {
                let request = Request::RemovePool {
                    name: name.clone(),
                    repeated: repeated.unwrap_or_default(),
                    sure,
                };
                let r = mon_op(args.mon, request).await?;
                println!("pool '{name}' removed (epoch {})", r.epoch);
            }
        }
        Ok(())
    })
}

/// A pool's quota as `cairn pool get-quota` shows it.
fn quota_lines(map: &ClusterMap, name: &str) -> anyhow::Result<String> {
    let pool = map
        .placement
        .pool_named(name)
        .with_context(|| format!("no pool `{name}`"))?;
    let quota = map.quotas.get(&pool.id).cloned().unwrap_or_default();
    let show = cairn_clustermap::quota::limit_text;
    let state = match quota.full {
        true => "full: writes other than removals are refused",
        false => "under its quota",
    };
    Ok(format!(
        "quotas for pool '{name}':\n  max objects: {}\n  max bytes  : {}\n  {state}",
        show(quota.max_objects),
        show(quota.max_bytes)
    ))
}

/// The request that sets (`on`) or clears `flag` on the OSDs `ids` alone.
fn own_flag(ids: Vec<i32>, flag: MapFlag, on: bool) -> Request {
    Request::SetOsdFlag { ids, flag, on }
}

/// `cairn osd ...`.
pub fn run_osd(args: OsdArgs) -> anyhow::Result<()> {
    let body = match args.command {
        OsdCommand::Run(run) => return crate::cluster_cmd::run_osd(*run),
        OsdCommand::Df => return crate::admin_cmd::osd_df(args.mon.mon),
        OsdCommand::OkToStop { ids } => {
            return crate::maintenance::run_ok_to_stop(args.mon.mon, &ids)
        }
        OsdCommand::SafeToDestroy { ids } => {
            return crate::maintenance::run_safe_to_destroy(args.mon.mon, &ids)
        }
        OsdCommand::Out { id } => Request::MarkOut { id },
        OsdCommand::In { id } => Request::MarkIn { id },
        OsdCommand::Down { id } => Request::MarkDown { id },
        OsdCommand::Reweight { id, weight } => Request::Reweight {
            id,
            reweight: fixed_16_16(weight, 1.0, "reweight")?,
        },
        OsdCommand::CrushReweight { id, weight } => Request::CrushReweight {
            id,
            weight: fixed_16_16(
                weight,
                f64::from(cairn_proto::mon::MAX_CRUSH_WEIGHT >> 16),
                "CRUSH weight",
            )?,
        },
        OsdCommand::Rm { id } => Request::RemoveOsd { id },
        OsdCommand::Lost { id, yes } => {
            anyhow::ensure!(
                yes,
                "declaring osd.{id} lost gives up the writes only it holds: add --yes-i-really-mean-it"
            );
            Request::MarkLost { id }
        }
        OsdCommand::Tree => return osd_tree(args.mon.mon),
        OsdCommand::Map { pool, object } => return osd_map(args.mon.mon, &pool, &object),
        OsdCommand::Set { flags } => Request::SetFlags {
            flags: parse_flags(&flags)?,
            on: true,
        },
        OsdCommand::AddNoout { ids } => own_flag(ids, MapFlag::NoOut, true),
        OsdCommand::RmNoout { ids } => own_flag(ids, MapFlag::NoOut, false),
        OsdCommand::AddNoup { ids } => own_flag(ids, MapFlag::NoUp, true),
        OsdCommand::RmNoup { ids } => own_flag(ids, MapFlag::NoUp, false),
        OsdCommand::AddNodown { ids } => own_flag(ids, MapFlag::NoDown, true),
        OsdCommand::RmNodown { ids } => own_flag(ids, MapFlag::NoDown, false),
        OsdCommand::AddNoin { ids } => own_flag(ids, MapFlag::NoIn, true),
        OsdCommand::RmNoin { ids } => own_flag(ids, MapFlag::NoIn, false),
        OsdCommand::Unset { flags } => Request::SetFlags {
            flags: parse_flags(&flags)?,
            on: false,
        },
    };
    crate::runtime::command()?.block_on(async {
        let r = mon_op(args.mon.mon, body).await?;
        println!("done (epoch {})", r.epoch);
        Ok(())
    })
}

/// The cluster flags an operator's words name (`pause` names two), refused whole when one
/// word names none.
fn parse_flags(words: &[String]) -> anyhow::Result<Vec<cairn_clustermap::MapFlag>> {
    let mut flags = Vec::new();
    for word in words {
        flags.extend(cairn_clustermap::MapFlag::parse_word(word)?);
    }
    Ok(flags)
}

/// `value` in 16.16 fixed point, refused unless in `0.0..=max`.
fn fixed_16_16(value: f64, max: f64, what: &str) -> anyhow::Result<u32> {
    anyhow::ensure!(
        (0.0..=max).contains(&value),
        "{what} must be in 0..={max}, not {value}"
    );
    Ok((value * 65536.0).round() as u32)
}

fn osd_map(mon: SocketAddr, pool: &str, object: &str) -> anyhow::Result<()> {
    crate::runtime::command()?.block_on(async {
        let map = current_map(mon).await?;
        let p = map
            .placement
            .pools
            .values()
            .find(|p| p.name == pool)
            .ok_or_else(|| anyhow::anyhow!("no pool named `{pool}`"))?;
        let hash = cairn_clustermap::Pool::hash_key(object, "");
        let pg = p.object_pg(object, "", "");
        let m = map.placement.mapper().map_pg(pg)?;
        let set = |osds: &[i32]| {
            let ids: Vec<String> = osds.iter().map(i32::to_string).collect();
            let primary = osds.first().map_or(-1, |o| *o);
            format!("([{}], p{primary})", ids.join(","))
        };
        println!(
            "osdmap e{} pool '{pool}' ({}) object '{object}' -> pg {}.{hash:08x} ({pg}) -> up {} acting {}",
            map.epoch,
            p.id,
            p.id,
            set(&m.up),
            set(&m.acting)
        );
        println!("scheduler object id (TBF object=): {hash}");
        Ok(())
    })
}

fn osd_tree(mon: SocketAddr) -> anyhow::Result<()> {
    crate::runtime::command()?.block_on(async {
        let map = current_map(mon).await?;
        let mut hosts: std::collections::BTreeMap<&str, Vec<&cairn_clustermap::OsdEntry>> =
            Default::default();
        for o in map.osds.values() {
            hosts.entry(&o.host).or_default().push(o);
        }
        println!(
            "{:<8} {:<16} {:<6} {:<8} {:<8} addr",
            "id", "host", "up", "weight", "reweight"
        );
        for (host, osds) in hosts {
            for o in osds {
                let weight = map.placement.crush.device_weight(o.id).unwrap_or(0);
                println!(
                    "osd.{:<4} {:<16} {:<6} {:<8.3} {:<8.3} {}",
                    o.id,
                    host,
                    match (o.up, o.lost_at.is_some()) {
                        (true, _) => "up",
                        (false, false) => "down",
                        (false, true) => "lost",
                    },
                    f64::from(weight) / 65536.0,
                    f64::from(o.reweight) / 65536.0,
                    o.addr
                );
            }
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::parse_quantity;

    #[test]
    fn quantities_take_iec_units_and_refuse_garbage() {
        assert_eq!(parse_quantity("0"), Ok(0));
        assert_eq!(parse_quantity("1500"), Ok(1500));
        assert_eq!(parse_quantity("4K"), Ok(4096));
        assert_eq!(parse_quantity("10G"), Ok(10 << 30));
        assert_eq!(parse_quantity("10GiB"), Ok(10 << 30));
        assert_eq!(parse_quantity("2t"), Ok(2 << 40));
        assert!(parse_quantity("").is_err());
        assert!(parse_quantity("-1").is_err());
        assert!(parse_quantity("5X").is_err());
        assert!(parse_quantity("1.5G").is_err());
        assert!(parse_quantity("99999999999T").is_err());
    }
}
