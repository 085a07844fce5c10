//! `cairn fs new|mount|status` (a POSIX file system over the cluster, mounted through FUSE)
//! and `cairn mds` (its metadata server daemon).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::{Args, Subcommand};

use crate::convert::small_u32;
use crate::defaults::DEFAULT_MON;
use crate::file_system::{DEFAULT_FS, DEFAULT_MDS};

/// `cairn fs ...`.
#[derive(Args)]
pub struct FsArgs {
    /// Monitor address.
    #[arg(long, global = true, default_value = DEFAULT_MON)]
    mon: SocketAddr,
    #[command(subcommand)]
    cmd: FsCmd,
}

#[derive(Subcommand)]
enum FsCmd {
    /// Makes a file system: pools NAME.meta (its metadata) and NAME.data (file data).
    New {
        /// Its name.
        name: String,
        /// PGs of each pool.
        #[arg(long = "pg-num", default_value_t = 32)]
        pg_num: u32,
        /// Copies of each object (0: as many OSDs as are up, at most 3).
        #[arg(long, default_value_t = 0)]
        size: u32,
    },
    /// Mounts a file system at MOUNTPOINT through FUSE and serves it until it is unmounted
    /// (`umount MOUNTPOINT`) or this process gets SIGINT or SIGTERM.
    Mount {
        /// The file system (`cairnfs` is the one `cairn up` makes).
        name: String,
        /// An existing empty directory.
        mountpoint: PathBuf,
        /// Hold no directory lease: every lookup and attribute request asks the metadata server.
        #[arg(long)]
        no_dir_leases: bool,
        /// Let the kernel cache no name or directory attributes that a lease covers: every
        /// path walk asks this mount.
        #[arg(long)]
        no_kernel_cache: bool,
        /// Create no file in a leased directory without waiting for the metadata server:
        /// every create waits for its answer.
        #[arg(long)]
        no_early_creates: bool,
        /// Threads reading the kernel's requests (1 to 16; four, or one per CPU where there
        /// are fewer, by default): requests answered from the mount's leases are answered on
        /// them, one at a time per thread.
        #[arg(long)]
        fuse_threads: Option<usize>,
        /// The kernel's readahead window per sequentially read file, KiB (0 to 65536; one
        /// past 128 is set through sysfs, which needs root and a writable /sys).
        #[arg(long, default_value_t = cairn_fs::mount::DEFAULT_READAHEAD_KIB)]
        readahead_kib: u32,
    },
    /// Shows a file system's pools, its active metadata server and its totals.
    Status {
        /// The file system.
        name: String,
    },
}

/// `cairn mds`: the metadata server of one file system.
#[derive(Args)]
pub struct MdsArgs {
    /// Monitor address.
    #[arg(long, default_value = DEFAULT_MON)]
    mon: SocketAddr,
    /// The file system it serves.
    #[arg(long, default_value = DEFAULT_FS)]
    fs: String,
    /// Address to serve clients on (published in the metadata pool for them to find).
    #[arg(long, default_value = DEFAULT_MDS)]
    listen: SocketAddr,
    /// Seconds a client keeps its open files and locks without word from it; then it is
    /// evicted (fenced out of the OSDs first if it held any). At least 15.
    #[arg(long, default_value_t = cairn_fs::opens::LEASE.as_secs(), value_parser = clap::value_parser!(u64).range(15..=3600))]
    session_timeout: u64,
}

/// Runs `cairn fs ...`.
pub fn run(args: FsArgs) -> anyhow::Result<()> {
    match args.cmd {
        FsCmd::New { name, pg_num, size } => crate::runtime::command()?.block_on(async {
            let client = crate::mon_link::connect(args.mon).await?;
            let size = match size {
                0 => small_u32(crate::mon_link::up_osds(&client).len().clamp(1, 3)),
                n => n,
            };
            match crate::file_system::create(&client, &name, pg_num, size).await? {
                true => println!(
                    "file system '{name}' created (pools {} and {})",
                    cairn_fs::backing::metadata_pool(&name),
                    cairn_fs::backing::data_pool(&name)
                ),
                false => println!("file system '{name}' exists"),
            }
            anyhow::Ok(())
        }),
        FsCmd::Status { name } => crate::runtime::command()?.block_on(async {
            let client = Arc::new(crate::mon_link::connect(args.mon).await?);
            let st = cairn_fs::status::status(client, &name).await?;
            println!(
                "file system {name}: metadata pool {}, data pool {}",
                st.info.metadata_pool, st.info.data_pool
            );
            match (&st.lease, &st.mds_addr) {
                (Some(holder), Some(addr)) => println!("active metadata server: {addr}, {holder}"),
                (None, Some(addr)) => {
                    println!("no active metadata server (the last served on {addr})")
                }
                (_, None) => println!("no metadata server has started"),
            }
            match st.totals {
                Some((files, bytes)) => println!("inodes: {files}, bytes in files: {bytes}"),
                None => println!("totals: the metadata server does not answer"),
            }
            anyhow::Ok(())
        }),
        FsCmd::Mount {
            name,
            mountpoint,
            no_dir_leases,
            no_kernel_cache,
            no_early_creates,
            fuse_threads,
            readahead_kib,
        } => {
            let rt = crate::runtime::build(mount_threads(), "fs mount")?;
            let mut client = rt.block_on(crate::mon_link::connect(args.mon))?;
            client.op_timeout_ms = cairn_fs::mount::DATA_TIMEOUT_MS;
            let options = cairn_fs::mount::MountOptions {
                dir_leases: !no_dir_leases,
                kernel_cache: !no_kernel_cache,
                early_creates: !no_early_creates,
                fuse_threads: fuse_threads.unwrap_or_else(cairn_fs::mount::default_fuse_threads),
                readahead_kib,
            };
            cairn_fs::mount::mount(
                &rt,
                Arc::new(client),
                &name,
                &mountpoint,
                options,
                crate::runtime::stop_signal(),
            )
            .with_context(|| format!("mounting {name} at {}", mountpoint.display()))
        }
    }
}

/// Worker threads of a mount's runtime: one per CPU, at most 4. Each FUSE request crosses
/// from the FUSE thread to a worker and back, and more workers than CPUs add task switches to
/// every crossing: on two vCPUs, two workers create files 22% faster than four and move file
/// data as fast.
fn mount_threads() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get().clamp(1, 4))
}

/// Runs `cairn mds` until SIGINT or SIGTERM.
pub fn run_mds(args: MdsArgs) -> anyhow::Result<()> {
    let auth = crate::credentials::credentials_of(crate::file_system::mds_entity(&args.fs))?.map(
        |(entity, key)| cairn_client::tickets::ClientAuth {
            entity,
            key,
            mode: crate::credentials::mode(),
        },
    );
    let cfg = cairn_fs::mds::MdsConfig {
        mon: args.mon,
        fs: args.fs,
        listen: args.listen,
        auth,
        session_timeout: std::time::Duration::from_secs(args.session_timeout),
    };
    crate::runtime::build(2, "mds")?
        .block_on(cairn_fs::mds::run(cfg, crate::runtime::stop_signal()))?;
    Ok(())
}
