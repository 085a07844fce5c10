//! `cairn rbd`: block images over the cluster (`create`, `ls`, `info`, `resize`, `rm`),
//! their snapshots (`snap create|ls|rollback|rm`), clones (`clone`), exclusive lock
//! (`lock ls|break`) and NBD export (`nbd`), as Ceph's `rbd` and `rbd-nbd` do.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use cairn_client::Client;
use cairn_rbd::header::{MAX_ORDER, MIN_ORDER};
use cairn_rbd::requests::{self, Request};
use cairn_rbd::{lock, Image};
use clap::{Args, Subcommand};

use crate::defaults::DEFAULT_MON;

/// `cairn rbd ...`.
#[derive(Args)]
pub struct RbdArgs {
    /// Monitor address.
    #[arg(long, default_value = DEFAULT_MON, global = true)]
    mon: SocketAddr,
    #[command(subcommand)]
    command: RbdCommand,
}

#[derive(Subcommand)]
enum RbdCommand {
    /// Create an image: `cairn rbd create POOL/IMAGE --size 10G [--object-size 4M]`.
    Create {
        /// POOL/IMAGE.
        spec: String,
        /// Size (bytes, or with K, M, G, T: powers of 1024).
        #[arg(long)]
        size: String,
        /// Bytes per data object: a power of two from 4K to 32M.
        #[arg(long, default_value = "4M")]
        object_size: String,
    },
    /// List the images of a pool.
    Ls {
        /// Pool.
        pool: String,
    },
    /// Size and object size of an image.
    Info {
        /// POOL/IMAGE.
        spec: String,
    },
    /// Change an image's size (shrinking drops the data past the new end).
    Resize {
        /// POOL/IMAGE.
        spec: String,
        /// New size.
        #[arg(long)]
        size: String,
    },
    /// Remove an image and its data (refused while it has snapshots or clones).
    Rm {
        /// POOL/IMAGE.
        spec: String,
    },
    /// Snapshots: `cairn rbd snap create|ls|rollback|rm POOL/IMAGE[@SNAP]`.
    #[command(subcommand)]
    Snap(SnapCommand),
    /// Clone a snapshot into a new image that reads it until it writes its own bytes:
    /// `cairn rbd clone POOL/IMAGE@SNAP POOL/CLONE`.
    Clone {
        /// POOL/IMAGE@SNAP.
        parent: String,
        /// POOL/CLONE.
        child: String,
    },
    /// Copy a clone's parent bytes into it and detach it from its parent:
    /// `cairn rbd flatten POOL/CLONE`.
    Flatten {
        /// POOL/CLONE.
        spec: String,
    },
    /// The exclusive lock: `cairn rbd lock ls|break POOL/IMAGE`.
    #[command(subcommand)]
    Lock(LockCommand),
    /// Export the images of a pool over NBD (export name = image, or IMAGE@SNAP read-only)
    /// until interrupted: `cairn rbd nbd POOL[/IMAGE] --listen 127.0.0.1:10809`, or on a
    /// unix socket only its owner may use: `--socket /run/cairn/nbd.sock`.
    Nbd {
        /// POOL, or POOL/IMAGE to check that image exists and print its URI.
        spec: String,
        /// Address to listen on.
        #[arg(long, default_value = "127.0.0.1:10809")]
        listen: SocketAddr,
        /// Listen on this unix socket (mode 0600) instead of a TCP address; a stale socket
        /// there is replaced, a live server's refused.
        #[arg(long, conflicts_with = "listen")]
        socket: Option<PathBuf>,
        /// Lease of the exclusive lock each exported image is held with, in milliseconds:
        /// after a crash of this server, another client takes the image over after one lease.
        #[arg(long, default_value_t = 30_000)]
        lock_lease_ms: u64,
    },
}

#[derive(Subcommand)]
enum SnapCommand {
    /// Take a snapshot: `cairn rbd snap create POOL/IMAGE@SNAP`.
    Create {
        /// POOL/IMAGE@SNAP.
        spec: String,
    },
    /// List an image's snapshots.
    Ls {
        /// POOL/IMAGE.
        spec: String,
    },
    /// Roll the image back to a snapshot (its size and every byte).
    Rollback {
        /// POOL/IMAGE@SNAP.
        spec: String,
    },
    /// Remove a snapshot (refused while clones of it exist).
    Rm {
        /// POOL/IMAGE@SNAP.
        spec: String,
    },
}

#[derive(Subcommand)]
enum LockCommand {
    /// Who holds an image's exclusive lock.
    Ls {
        /// POOL/IMAGE.
        spec: String,
    },
    /// Remove an image's lock record (when its holder is known dead and its lease long).
    Break {
        /// POOL/IMAGE.
        spec: String,
    },
}

/// Runs one `cairn rbd` command.
pub fn run(a: RbdArgs) -> anyhow::Result<()> {
    crate::runtime::command()?.block_on(async move {
        let client = Arc::new(
            Client::connect_as(a.mon, cairn_client::random_client_id(), crate::credentials::client_auth()?)
                .await
                .with_context(|| format!("connecting to the monitor at {}", a.mon))?,
        );
        match a.command {
            RbdCommand::Create {
                spec,
                size,
                object_size,
            } => {
                let (pool, name) = split_spec(&spec)?;
                let size = parse_size(&size)?;
                let order = order_of(parse_size(&object_size)?)?;
                Image::create(&client, pool, name, size, Some(order)).await?;
                println!("created {pool}/{name}: {size} bytes in objects of {} bytes", 1u64 << order);
            }
            RbdCommand::Ls { pool } => {
                for name in Image::list(&client, &pool).await? {
                    println!("{name}");
                }
            }
            RbdCommand::Info { spec } => {
                let (pool, name) = split_spec(&spec)?;
                let image = Image::open_read_only(client.clone(), pool, name).await?;
                let header = image.header();
                println!(
                    "rbd image '{name}':\n\tsize {} bytes in {} objects\n\torder {} ({} bytes objects)\n\tsnapshot_count: {}",
                    image.size(),
                    image.size().div_ceil(image.object_bytes()),
                    image.object_bytes().trailing_zeros(),
                    image.object_bytes(),
                    header.snaps.len()
                );
                if let Some(p) = &header.parent {
                    let snap = cairn_rbd::Image::open_read_only(client.clone(), &p.pool, &p.image)
                        .await
                        .ok()
                        .and_then(|i| i.snapshots().into_iter().find(|s| s.id == p.snap))
                        .map_or_else(|| format!("#{}", p.snap), |s| s.name);
                    println!("\tparent: {}/{}@{snap}\n\toverlap: {} bytes", p.pool, p.image, p.overlap);
                }
                if let (Some(holder), _) = lock::holder(&client, pool, name).await? {
                    println!("\tlocked by {holder}");
                }
            }
            RbdCommand::Resize { spec, size } => {
                let (pool, name) = split_spec(&spec)?;
                let image = Image::open(client, pool, name).await?;
                let resized = image.resize(parse_size(&size)?).await;
                image.close().await?;
                resized?;
                println!("{pool}/{name} is now {} bytes", image.size());
            }
            RbdCommand::Snap(command) => snap(client, command).await?,
            RbdCommand::Clone { parent, child } => {
                let (parent_pool, parent_name, snap) = split_snap_spec(&parent)?;
                let (child_pool, child_name) = split_spec(&child)?;
                Image::clone_snapshot(client, (parent_pool, parent_name), snap, (child_pool, child_name))
                    .await?;
                println!("cloned {parent} into {child}");
            }
            RbdCommand::Flatten { spec } => {
                let (pool, name) = split_spec(&spec)?;
                let image = Image::open(client, pool, name).await?;
                let flattened = image
                    .flatten(|done, total| {
                        if done == total || done % 64 == 0 {
                            eprintln!("flatten {pool}/{name}: {done}/{total} objects");
                        }
                    })
                    .await;
                image.close().await?;
                flattened?;
                println!("{pool}/{name} no longer depends on its parent");
            }
            RbdCommand::Lock(LockCommand::Ls { spec }) => {
                let (pool, name) = split_spec(&spec)?;
                match lock::holder(&client, pool, name).await?.0 {
                    Some(holder) => println!("{holder}"),
                    None => println!("{pool}/{name} is not locked"),
                }
            }
            RbdCommand::Lock(LockCommand::Break { spec }) => {
                let (pool, name) = split_spec(&spec)?;
                match lock::break_lock(&client, pool, name).await? {
                    Some(holder) => println!("broke the lock of {pool}/{name} held by {holder}"),
                    None => println!("{pool}/{name} was not locked"),
                }
            }
            RbdCommand::Rm { spec } => {
                let (pool, name) = split_spec(&spec)?;
                Image::remove(client, pool, name).await?;
                println!("removed {pool}/{name}");
            }
            RbdCommand::Nbd {
                spec,
                listen,
                socket,
                lock_lease_ms,
            } => {
                let lease = Duration::from_millis(lock_lease_ms);
                lock::check_lease(lease)?;
                let socket = socket
                    .map(|p| std::path::absolute(&p).with_context(|| p.display().to_string()))
                    .transpose()?;
                let (pool, image) = match spec.split_once('/') {
                    Some((pool, name)) => {
                        Image::open_read_only(client.clone(), pool, name).await?;
                        (pool.to_string(), Some(name.to_string()))
                    }
                    None => (spec, None),
                };
                let (listener, at) = match &socket {
                    Some(path) => (
                        cairn_rbd::listen::bind_unix(path).await?,
                        path.display().to_string(),
                    ),
                    None => (
                        cairn_rbd::listen::NbdListener::Tcp(
                            tokio::net::TcpListener::bind(listen)
                                .await
                                .with_context(|| format!("listening on {listen}"))?,
                        ),
                        listen.to_string(),
                    ),
                };
                // Printed once the server listens: a script may connect as soon as it reads it.
                if let Some(name) = image {
                    match &socket {
                        Some(path) => println!(
                            "nbd+unix:///{name}?socket={}",
                            uri_escaped(&path.to_string_lossy())
                        ),
                        None => println!("nbd://{listen}/{name}"),
                    }
                }
                let writers =
                    cairn_rbd::nbd::client_maker(a.mon, crate::credentials::client_auth()?);
                eprintln!("exporting the images of pool {pool} over NBD on {at}");
                let exports = cairn_rbd::nbd::Exports::new(client, writers, pool, lease);
                tokio::select! {
                    served = cairn_rbd::listen::serve(listener, exports) => served?,
                    _ = crate::runtime::stop_signal() => {}
                }
            }
        }
        Ok(())
    })
}

/// Runs one `cairn rbd snap` command.
async fn snap(client: Arc<Client>, command: SnapCommand) -> anyhow::Result<()> {
    let spec = match &command {
        SnapCommand::Create { spec }
        | SnapCommand::Rollback { spec }
        | SnapCommand::Rm { spec }
        | SnapCommand::Ls { spec } => spec.clone(),
    };
    if let SnapCommand::Ls { .. } = command {
        let (pool, name) = split_spec(&spec)?;
        let image = Image::open_read_only(client, pool, name).await?;
        println!("{:>6}  {:<24} {:>16}", "SNAPID", "NAME", "SIZE");
        for s in image.snapshots() {
            let state = if s.removing { "  (removing)" } else { "" };
            println!("{:>6}  {:<24} {:>16}{state}", s.id, s.name, s.size);
        }
        return Ok(());
    }
    let (pool, name, snap) = split_snap_spec(&spec)?;
    // A mapped image: its writer takes or removes the snapshot (a rollback needs it unmapped).
    let asked = match &command {
        SnapCommand::Create { .. } => Some(Request::SnapCreate(snap.to_string())),
        SnapCommand::Rm { .. } => Some(Request::SnapRemove(snap.to_string())),
        _ => None,
    };
    if let (Some(request), (Some(holder), _)) = (asked, lock::holder(&client, pool, name).await?) {
        eprintln!("{pool}/{name} is locked by {holder}: asking it");
        let done = requests::ask(&client, pool, name, &request, holder.lease * 2).await?;
        println!("{done}");
        return Ok(());
    }
    let image = Image::open(client, pool, name).await?;
    let done = match command {
        SnapCommand::Create { .. } => image
            .snap_create(snap)
            .await
            .map(|id| format!("created {spec} (id {id})")),
        SnapCommand::Rollback { .. } => image
            .snap_rollback(snap)
            .await
            .map(|()| format!("rolled {pool}/{name} back to {snap}")),
        SnapCommand::Rm { .. } => image
            .snap_remove(snap)
            .await
            .map(|()| format!("removed {spec}")),
        SnapCommand::Ls { .. } => unreachable!("listed above"),
    };
    image.close().await?;
    println!("{}", done?);
    Ok(())
}

/// `POOL/IMAGE@SNAP` split in three.
fn split_snap_spec(spec: &str) -> anyhow::Result<(&str, &str, &str)> {
    match spec.split_once('@') {
        Some((image, snap)) if !snap.is_empty() => {
            let (pool, name) = split_spec(image)?;
            Ok((pool, name, snap))
        }
        _ => bail!("`{spec}`: name the snapshot as POOL/IMAGE@SNAP"),
    }
}

/// `POOL/IMAGE` split in two.
fn split_spec(spec: &str) -> anyhow::Result<(&str, &str)> {
    match spec.split_once('/') {
        Some((pool, name)) if !pool.is_empty() && !name.is_empty() => Ok((pool, name)),
        _ => bail!("`{spec}`: name the image as POOL/IMAGE"),
    }
}

/// A size in bytes, with an optional K, M, G or T suffix (powers of 1024; `KiB`, `MB` and
/// the like read the same).
pub fn parse_size(text: &str) -> anyhow::Result<u64> {
    let t = text.trim();
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (number, unit) = t.split_at(digits);
    let n: u64 = number
        .parse()
        .with_context(|| format!("size `{text}`: no number"))?;
    let shift = match unit
        .trim()
        .to_ascii_uppercase()
        .trim_end_matches('B')
        .trim_end_matches('I')
    {
        "" => 0,
        "K" => 10,
        "M" => 20,
        "G" => 30,
        "T" => 40,
        other => bail!("size `{text}`: unknown unit `{other}` (K, M, G, T)"),
    };
    n.checked_mul(1u64 << shift)
        .with_context(|| format!("size `{text}` overflows"))
}

/// The power of two an object size is.
fn order_of(bytes: u64) -> anyhow::Result<u8> {
    if !bytes.is_power_of_two() {
        bail!("object size {bytes} is not a power of two");
    }
    let order = u8::try_from(bytes.trailing_zeros()).expect("at most 64");
    if !(MIN_ORDER..=MAX_ORDER).contains(&order) {
        bail!(
            "object size {bytes} is outside {} to {} bytes",
            1u64 << MIN_ORDER,
            1u64 << MAX_ORDER
        );
    }
    Ok(order)
}

/// `text` with every byte but URI-unreserved ones and `/` percent-encoded (RFC 3986), for a
/// socket path in an `nbd+unix://` URI's query.
fn uri_escaped(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' | b'/' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_socket_path_is_escaped_for_a_uri() {
        assert_eq!(uri_escaped("/run/cairn/nbd.sock"), "/run/cairn/nbd.sock");
        assert_eq!(
            uri_escaped("/tmp/my disk?&=.sock"),
            "/tmp/my%20disk%3F%26%3D.sock"
        );
        assert_eq!(uri_escaped("/tmp/é"), "/tmp/%C3%A9");
    }

    #[test]
    fn sizes_and_specs_parse_and_bad_ones_are_refused() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("4K").unwrap(), 4096);
        assert_eq!(parse_size("10G").unwrap(), 10 << 30);
        assert_eq!(parse_size("4MiB").unwrap(), 4 << 20);
        assert_eq!(parse_size("1t").unwrap(), 1 << 40);
        for bad in ["", "G", "1X", "99999999999999999999", "20000000T"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
        assert_eq!(order_of(4 << 20).unwrap(), 22);
        assert!(order_of(3000).is_err());
        assert!(order_of(1 << 30).is_err());
        assert_eq!(split_spec("rbd/disk").unwrap(), ("rbd", "disk"));
        for bad in ["disk", "/disk", "rbd/"] {
            assert!(split_spec(bad).is_err(), "{bad}");
        }
        assert_eq!(
            split_snap_spec("rbd/disk@mon").unwrap(),
            ("rbd", "disk", "mon")
        );
        for bad in ["rbd/disk", "rbd/disk@", "disk@mon", "rbd/@mon"] {
            assert!(split_snap_spec(bad).is_err(), "{bad}");
        }
    }
}
