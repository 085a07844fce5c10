//! `cairn mon`: the monitor daemon.

use std::net::SocketAddr;

use cairn_clustermap::ClusterMap;
use cairn_mon::daemon::{MonDaemon, MonServing};
use cairn_mon::{MonConfig, Monitor};
use clap::Args;

use crate::config_file::load_config;
use crate::defaults::DEFAULT_MON;

/// `cairn mon`: run a monitor. Settings come from flags, or all from `--config FILE` (TOML
/// with the same names: `listen`, `fsid`, `down_out_interval_s`, `heartbeat_grace_s`, `data`,
/// `metrics`).
#[derive(Args, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MonArgs {
    /// TOML file with every setting (flags are then ignored).
    #[arg(long)]
    #[serde(skip)]
    config: Option<std::path::PathBuf>,
    /// Address to listen on.
    #[arg(long, default_value = DEFAULT_MON)]
    listen: SocketAddr,
    /// Cluster id.
    #[arg(long, default_value = "cairn")]
    fsid: String,
    /// Seconds a down OSD stays in before it is marked out.
    #[arg(long = "down-out-interval-s", default_value_t = 600)]
    down_out_interval_s: u64,
    /// Seconds an OSD must have been silent, as its peers report, before it is marked down.
    #[arg(long = "heartbeat-grace-s", default_value_t = 20)]
    heartbeat_grace_s: u64,
    /// Directory for the durable map store (the map then survives restarts).
    #[arg(long)]
    data: Option<std::path::PathBuf>,
    /// Address of the monitor's Prometheus page (`/metrics`: OSDs, pools, PG placement and
    /// spread, requests served); none if not given. Port 0 picks a free one (logged).
    #[arg(long)]
    metrics: Option<SocketAddr>,
    /// The keyring the authentication database is seeded from on first start, in a TOML
    /// file; on the command line it is the global `--keyring`.
    #[arg(skip)]
    keyring: Option<std::path::PathBuf>,
    /// Allow pools to be removed (Ceph's `mon_allow_pool_delete`; `cairn tell mon config set
    /// mon_allow_pool_delete true` changes it while the monitor runs).
    #[arg(long = "allow-pool-delete")]
    allow_pool_delete: bool,
}

/// Clap's defaults (flags and TOML files share them; see [`crate::config_file::clap_defaults`]).
impl Default for MonArgs {
    fn default() -> Self {
        crate::config_file::clap_defaults()
    }
}

/// Runs the monitor until interrupted.
pub fn run(args: MonArgs) -> anyhow::Result<()> {
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
                let monitor = store.load_monitor(&args.fsid, config).await?;
                (monitor, Some(store))
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

#[cfg(test)]
mod tests {
    use super::MonArgs;

    /// A monitor's TOML file takes the flags' defaults for what it leaves out.
    #[test]
    fn a_config_file_shares_the_flags_defaults() {
        let empty: MonArgs = toml::from_str("").unwrap();
        assert_eq!(empty.listen.to_string(), crate::defaults::DEFAULT_MON);
        assert_eq!(empty.fsid, "cairn");
        assert_eq!(empty.down_out_interval_s, 600);
        assert_eq!(empty.heartbeat_grace_s, 20);
        assert!(!empty.allow_pool_delete && empty.data.is_none());
        let some: MonArgs = toml::from_str("fsid = \"lab\"\n").unwrap();
        assert_eq!((some.fsid.as_str(), some.heartbeat_grace_s), ("lab", 20));
        assert!(toml::from_str::<MonArgs>("fsid = 3\n").is_err());
    }
}
