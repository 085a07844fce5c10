//! `cairn pool create|ls|rm|set|set-quota|get-quota`: pools, through the monitor.

use std::net::SocketAddr;

use anyhow::{bail, Context};
use cairn_clustermap::ClusterMap;
use cairn_proto::mon::Request;
use clap::{Args, Subcommand};

use crate::defaults::DEFAULT_MON;
use crate::mon_link::{current_map, mon_op};

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

/// `cairn pool ...`.
pub fn run(args: PoolArgs) -> anyhow::Result<()> {
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
