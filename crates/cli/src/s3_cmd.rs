//! `cairn s3gw` (the S3 gateway daemon), `cairn s3 user create` (access keys), and the part
//! of `cairn up` that starts a gateway next to the cluster and prints its endpoint and keys.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use cairn_s3::GatewayConfig;
use clap::{Args, Subcommand};

use crate::mon_cmd::DEFAULT_MON;

/// Default gateway address.
pub const DEFAULT_S3: &str = "127.0.0.1:7480";

/// `cairn s3gw`: settings from flags, or all from `--config FILE` (TOML: `mon`, `listen`, `metrics`,
/// `pool`, `index_shards`, `inline_max_bytes`, `stripe_bytes`, `max_put_bytes`,
/// `max_meta_bytes`, `max_connections`, `max_inflight_body_bytes`, `region`, `[limits]`; unknown
/// keys rejected).
#[derive(Args)]
pub struct GatewayArgs {
    /// TOML file with every setting (flags are then ignored).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Monitor address.
    #[arg(long, default_value = DEFAULT_MON)]
    mon: SocketAddr,
    /// HTTP address to serve S3 on.
    #[arg(long, default_value = DEFAULT_S3)]
    listen: SocketAddr,
    /// Pool for buckets, indexes and data (created if missing).
    #[arg(long, default_value = "s3")]
    pool: String,
    /// Address of the gateway's Prometheus page (`/metrics`: S3 operations, HTTP requests by
    /// method and status, latency, bytes); none if not given. Port 0 picks a free one (logged).
    #[arg(long)]
    metrics: Option<SocketAddr>,
}

/// `cairn s3 ...`.
#[derive(Args)]
pub struct S3Args {
    #[command(subcommand)]
    cmd: S3Cmd,
}

#[derive(Subcommand)]
enum S3Cmd {
    /// S3 users and their access keys.
    User {
        #[command(subcommand)]
        cmd: UserCmd,
    },
}

#[derive(Subcommand)]
enum UserCmd {
    /// Creates a user and prints its access key and secret key.
    Create {
        /// User name.
        name: String,
        /// Monitor address.
        #[arg(long, default_value = DEFAULT_MON)]
        mon: SocketAddr,
        /// The gateway's pool.
        #[arg(long, default_value = "s3")]
        pool: String,
    },
}

/// Runs the gateway until interrupted.
pub fn run_gateway(args: GatewayArgs) -> anyhow::Result<()> {
    let cfg = match &args.config {
        Some(path) => GatewayConfig::load(path)?,
        None => GatewayConfig {
            mon: args.mon,
            listen: args.listen,
            pool: args.pool.clone(),
            metrics: args.metrics,
            ..GatewayConfig::default()
        },
    };
    crate::runtime::command()?.block_on(async {
        let gw = cairn_s3::connect(cfg.clone()).await?;
        let (addr, _task) = cairn_s3::server::start(&gw, cfg.listen)
            .await
            .with_context(|| format!("binding {}", cfg.listen))?;
        if let Some(at) = cfg.metrics {
            let metrics = gw.metrics.clone();
            let (bound, _page_task) = cairn_msgr::http::serve_metrics(at, move || metrics.render())
                .await
                .with_context(|| format!("binding the metrics page on {at}"))?;
            eprintln!("s3 gateway metrics on http://{bound}/metrics");
        }
        eprintln!("s3 gateway serving on http://{addr} (pool '{}')", cfg.pool);
        tokio::signal::ctrl_c().await?;
        anyhow::Ok(())
    })
}

/// `cairn s3 ...`.
pub fn run(args: S3Args) -> anyhow::Result<()> {
    match args.cmd {
        S3Cmd::User {
            cmd: UserCmd::Create { name, mon, pool },
        } => {
            let cfg = GatewayConfig {
                mon,
                pool,
                ..GatewayConfig::default()
            };
            let user = crate::runtime::command()?.block_on(cairn_s3::create_user(&cfg, &name))?;
            println!("user:       {}", user.name);
            println!("access_key: {}", user.access_key);
            println!("secret_key: {}", user.secret_key);
            Ok(())
        }
    }
}

/// The `admin` user whose keys `creds` (an AWS credentials file an earlier `cairn up` wrote)
/// holds, while the cluster still has it, so that a restarted gateway keeps the keys its users
/// configured; otherwise a new `admin` user.
async fn admin_user(cfg: &GatewayConfig, creds: &Path) -> anyhow::Result<cairn_s3::users::User> {
    let saved_key = std::fs::read_to_string(creds).ok().and_then(|text| {
        text.lines().find_map(|l| {
            let (k, v) = l.split_once('=')?;
            (k.trim() == "aws_access_key_id").then(|| v.trim().to_string())
        })
    });
    if let Some(key) = saved_key {
        if let Some(user) = cairn_s3::find_user(cfg, &key).await? {
            if user.name == "admin" {
                return Ok(user);
            }
        }
    }
    Ok(cairn_s3::create_user(cfg, "admin").await?)
}

/// For `cairn up`: starts `cairn s3gw` on `listen` (log `s3gw.log` in `dir`) through `spawn`
/// and returns its pid at once, so that `cairn up` records it before waiting for it
/// ([`announce_for_up`]).
pub fn spawn_for_up(
    dir: &Path,
    mon: SocketAddr,
    listen: SocketAddr,
    metrics: bool,
    spawn: impl Fn(&Path, &str, &[String]) -> anyhow::Result<u32>,
) -> anyhow::Result<u32> {
    let mut args = vec![
        "s3gw".to_string(),
        "--mon".into(),
        mon.to_string(),
        "--listen".into(),
        listen.to_string(),
    ];
    if metrics {
        args.extend(["--metrics".into(), "127.0.0.1:0".into()]);
    }
    spawn(dir, "s3gw", &args)
}

/// For `cairn up`, once the gateway [`spawn_for_up`] started on `listen` is recorded: waits
/// until it serves, takes the `admin` user of `dir/s3-credentials` (or creates one and saves
/// its keys there) and prints the endpoint and keys.
pub fn announce_for_up(dir: &Path, mon: SocketAddr, listen: SocketAddr) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    let log = dir.join("s3gw.log");
    loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains("serving on") {
            break;
        }
        if Instant::now() > deadline || text.contains("Error") {
            bail!(
                "the S3 gateway did not start on {listen} (see {}): {}",
                log.display(),
                text.trim()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let cfg = GatewayConfig {
        mon,
        ..GatewayConfig::default()
    };
    let creds = dir.join("s3-credentials");
    let user = crate::runtime::command()?.block_on(admin_user(&cfg, &creds))?;
    std::fs::write(
        &creds,
        format!(
            "[default]\naws_access_key_id = {}\naws_secret_access_key = {}\n",
            user.access_key, user.secret_key
        ),
    )?;
    println!(
        "S3 gateway on http://{listen} (user 'admin', keys also in {}):",
        creds.display()
    );
    println!("  export AWS_ACCESS_KEY_ID={}", user.access_key);
    println!("  export AWS_SECRET_ACCESS_KEY={}", user.secret_key);
    println!("  aws --endpoint-url http://{listen} s3 mb s3://demo");
    Ok(())
}
