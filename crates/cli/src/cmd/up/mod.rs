//! `cairn up`: a monitor, N OSDs and an S3 gateway as processes on loopback, each OSD with
//! its own device file under the cluster directory, plus a default pool.

mod s3gw;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::bail;
use cairn_client::mon::MonClient;
use cairn_proto::mon::Request;
use clap::Args;

use crate::cluster_dir::{self, spawn};
use crate::convert::small_u32;
use crate::defaults::{DEFAULT_DEVICE_MIB, DEFAULT_MON, DEFAULT_S3};
use crate::runtime::DEFAULT_OSD_THREADS;

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
    /// Give every OSD's store a DB/WAL device emulating this profile (nvme-p3700, ...; `none`
    /// for the plain file): its superblock and log there, its data on the OSD's device (see
    /// `cairn osd run --db-profile`).
    #[arg(long = "osd-db-profile")]
    osd_db_profile: Option<String>,
    /// Put an SSD cache emulating this profile (nvme-p3700, ...) in front of every OSD's
    /// device (see `cairn osd run --cache-profile`).
    #[arg(long = "osd-cache-profile")]
    osd_cache_profile: Option<String>,
    /// Size of each OSD's cache file in MiB (default: an eighth of the device); turns the
    /// cache on without a profile.
    #[arg(long = "osd-cache-mib")]
    osd_cache_mib: Option<u64>,
    /// Mode a new cache starts in: wt, wb, wa, pt, wo.
    #[arg(long = "cache-mode", default_value = "wb")]
    cache_mode: String,
    /// Cache line size of a new cache, in KiB: 4, 8, 16, 32 or 64.
    #[arg(long = "cache-line-kib", default_value_t = 4)]
    cache_line_kib: u64,
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
    #[arg(long, default_value = DEFAULT_S3)]
    s3: SocketAddr,
    /// Do not start the S3 gateway.
    #[arg(long = "no-s3")]
    no_s3: bool,
    /// Address of the metadata server of the file system `cairnfs` made with the cluster.
    #[arg(long, default_value = crate::file_system::DEFAULT_MDS)]
    mds: SocketAddr,
    /// Do not make the file system `cairnfs` nor start its metadata server.
    #[arg(long = "no-fs")]
    no_fs: bool,
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
pub fn run(args: UpArgs) -> anyhow::Result<()> {
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
        if let Some(p) = &args.osd_db_profile {
            osd_args.extend(["--db-profile".into(), p.clone()]);
        }
        if args.osd_cache_profile.is_some() || args.osd_cache_mib.is_some() {
            osd_args.extend([
                "--cache-mode".into(),
                args.cache_mode.clone(),
                "--cache-line-kib".into(),
                args.cache_line_kib.to_string(),
            ]);
            if let Some(p) = &args.osd_cache_profile {
                osd_args.extend(["--cache-profile".into(), p.clone()]);
            }
            if let Some(mib) = args.osd_cache_mib {
                osd_args.extend(["--cache-mib".into(), mib.to_string()]);
            }
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
            let size = small_u32(args.osds.min(3));
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
    if !args.no_fs {
        start_mds(&args, &mut daemons, cephx)?;
    }
    if !args.no_s3 {
        let fresh = daemons.running("s3gw").is_none();
        daemons.ensure("s3gw", || {
            s3gw::spawn_for_up(
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
            s3gw::announce_for_up(&args.dir, args.mon, args.s3, args.s3_tls, admin)?;
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
    if !args.no_fs {
        println!(
            "file system '{}' served by its metadata server on {}; mount it with:",
            crate::file_system::DEFAULT_FS,
            args.mds
        );
        println!(
            "  mkdir -p /mnt/cairn && cairn fs mount {} /mnt/cairn &",
            crate::file_system::DEFAULT_FS
        );
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

/// Makes the file system `cairnfs` (and, with cephx, its metadata server's key) unless it
/// exists, and starts its metadata server unless it runs; waits until it serves.
fn start_mds(args: &UpArgs, daemons: &mut UpDaemons<'_>, cephx: bool) -> anyhow::Result<()> {
    use crate::file_system::{create, mds_args, mds_keyring, register_mds, DEFAULT_FS};
    let admin = match cephx {
        true => Some(crate::up_keys::admin_auth(&args.dir)?),
        false => None,
    };
    crate::runtime::command()?.block_on(async {
        let client =
            cairn_client::Client::connect_as(args.mon, cairn_client::random_client_id(), admin)
                .await?;
        create(
            &client,
            DEFAULT_FS,
            args.pg_num,
            small_u32(args.osds.min(3)),
        )
        .await?;
        if cephx && !mds_keyring(&args.dir, DEFAULT_FS).exists() {
            register_mds(client.mon(), &args.dir, DEFAULT_FS).await?;
        }
        anyhow::Ok(())
    })?;
    if daemons.running("mds").is_some() {
        return Ok(());
    }
    let mut mds = mds_args(args.mon, DEFAULT_FS, args.mds);
    if cephx {
        mds.extend([
            "--keyring".into(),
            mds_keyring(&args.dir, DEFAULT_FS).display().to_string(),
        ]);
    }
    daemons.ensure("mds", || spawn(&args.dir, "mds", &mds))?;
    let log = args.dir.join("mds.log");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains("serving on") {
            return Ok(());
        }
        if Instant::now() > deadline || text.contains("Error") {
            bail!(
                "the metadata server did not start on {} (see {}): {}",
                args.mds,
                log.display(),
                text.trim()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}
