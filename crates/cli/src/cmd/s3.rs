//! `cairn s3gw` (the S3 gateway daemon, HTTP or HTTPS) and `cairn s3 user ...` (users and
//! their access keys: create, ls, rm, key add, key rm).

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use cairn_s3::GatewayConfig;
use clap::{Args, Subcommand};

use crate::defaults::{DEFAULT_MON, DEFAULT_S3, DEFAULT_S3_POOL as DEFAULT_POOL};

/// `cairn s3gw`: settings from flags, or all from `--config FILE` (TOML: `mon`, `listen`, `metrics`,
/// `pool`, `index_shards`, `inline_max_bytes`, `stripe_bytes`, `max_put_bytes`,
/// `max_meta_bytes`, `max_connections`, `max_inflight_body_bytes`, `region`, `tls_cert`,
/// `tls_key`, `[limits]`; unknown keys rejected).
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
    #[arg(long, default_value = DEFAULT_POOL)]
    pool: String,
    /// Address of the gateway's Prometheus page (`/metrics`: S3 operations, HTTP requests by
    /// method and status, latency, bytes); none if not given. Port 0 picks a free one (logged).
    #[arg(long)]
    metrics: Option<SocketAddr>,
    /// PEM certificate chain to serve HTTPS with (with --tls-key).
    #[arg(long = "tls-cert", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(long = "tls-key", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Domain of virtual-hosted-style requests (`BUCKET.DOMAIN`); repeatable. Path-style
    /// requests are served either way.
    #[arg(long = "domain")]
    domains: Vec<String>,
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

/// Where the users live: the cluster's monitor and the gateway's pool.
#[derive(Args)]
struct Store {
    /// Monitor address.
    #[arg(long, default_value = DEFAULT_MON)]
    mon: SocketAddr,
    /// The gateway's pool.
    #[arg(long, default_value = DEFAULT_POOL)]
    pool: String,
}

impl Store {
    fn config(&self) -> anyhow::Result<GatewayConfig> {
        Ok(GatewayConfig {
            mon: self.mon,
            pool: self.pool.clone(),
            cluster_auth: crate::credentials::client_auth()?,
            ..GatewayConfig::default()
        })
    }
}

#[derive(Subcommand)]
enum UserCmd {
    /// Creates a user and prints its access key and secret key.
    Create {
        /// User name.
        name: String,
        #[command(flatten)]
        store: Store,
    },
    /// Lists users and their access keys (never secrets).
    Ls {
        #[command(flatten)]
        store: Store,
    },
    /// Removes a user and revokes every key of it (refused while it owns buckets); running
    /// gateways refuse its keys from their next request.
    Rm {
        /// User name.
        name: String,
        #[command(flatten)]
        store: Store,
    },
    /// A user's access keys.
    Key {
        #[command(subcommand)]
        cmd: KeyCmd,
    },
}

#[derive(Subcommand)]
enum KeyCmd {
    /// Gives a user another access key and prints it with its secret.
    Add {
        /// User name.
        name: String,
        #[command(flatten)]
        store: Store,
    },
    /// Revokes one access key of a user; running gateways refuse it from their next request.
    Rm {
        /// User name.
        name: String,
        /// The access key to revoke.
        access_key: String,
        #[command(flatten)]
        store: Store,
    },
}

/// Runs the gateway until interrupted.
pub fn run_gateway(args: GatewayArgs) -> anyhow::Result<()> {
    let mut cfg = match &args.config {
        Some(path) => GatewayConfig::load(path)?,
        None => GatewayConfig {
            mon: args.mon,
            listen: args.listen,
            pool: args.pool.clone(),
            metrics: args.metrics,
            tls_cert: args.tls_cert.clone(),
            tls_key: args.tls_key.clone(),
            domains: args.domains.clone(),
            ..GatewayConfig::default()
        },
    };
    cfg.validate()?;
    cfg.cluster_auth = match &cfg.keyring {
        Some(path) => Some(crate::credentials::client_auth_in(
            path,
            cfg.name.as_deref(),
        )?),
        None => crate::credentials::client_auth()?,
    };
    let scheme = if cfg.tls_cert.is_some() {
        "https"
    } else {
        "http"
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
        eprintln!(
            "s3 gateway serving on {scheme}://{addr} (pool '{}')",
            cfg.pool
        );
        tokio::signal::ctrl_c().await?;
        anyhow::Ok(())
    })
}

fn print_keys(user: &cairn_s3::users::User) {
    println!("user:       {}", user.name);
    println!("access_key: {}", user.access_key);
    println!("secret_key: {}", user.secret_key);
}

/// `cairn s3 ...`.
pub fn run(args: S3Args) -> anyhow::Result<()> {
    let rt = crate::runtime::command()?;
    let S3Cmd::User { cmd } = args.cmd;
    match cmd {
        UserCmd::Create { name, store } => {
            print_keys(&rt.block_on(cairn_s3::create_user(&store.config()?, &name))?);
        }
        UserCmd::Ls { store } => {
            let users = rt.block_on(cairn_s3::list_users(&store.config()?))?;
            println!("{:<24} {:<22} created", "user", "access_key");
            for u in users {
                println!("{:<24} {:<22} {}", u.name, u.access_key, u.created_date());
            }
        }
        UserCmd::Rm { name, store } => {
            let n = rt.block_on(cairn_s3::remove_user(&store.config()?, &name))?;
            println!("removed user {name} ({n} access key(s) revoked)");
        }
        UserCmd::Key {
            cmd: KeyCmd::Add { name, store },
        } => print_keys(&rt.block_on(cairn_s3::add_key(&store.config()?, &name))?),
        UserCmd::Key {
            cmd:
                KeyCmd::Rm {
                    name,
                    access_key,
                    store,
                },
        } => {
            rt.block_on(cairn_s3::remove_key(&store.config()?, &name, &access_key))?;
            println!("revoked access key {access_key} of user {name}");
        }
    }
    Ok(())
}
