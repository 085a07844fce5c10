//! `cairn`: the one binary. Each command group owns one module under `cmd` with its clap
//! arguments and handler; this file only dispatches.
#![deny(clippy::cast_possible_truncation)]

mod bench_timeline;
mod cluster_dir;
mod cmd;
mod config_file;
mod convert;
mod credentials;
mod defaults;
mod file_system;
mod health;
mod local_cluster;
mod mon_link;
mod osd_reports;
mod pg_select;
mod plot;
mod runtime;
mod up_keys;

use clap::{Parser, Subcommand};
use cmd::{
    auth, cache, crush, data, df, down, fs, mon, msgr, osd, pg, pool, rbd, s3, sched, status,
    store, study, tell, up,
};

/// Every daemon allocates and frees multi-MiB message and write buffers at a high rate. glibc's
/// malloc hands such blocks back to the kernel on free (mmap or heap trimming), so each new one
/// page-faults and is zeroed again: half of an OSD's CPU on 4 MiB writes. jemalloc keeps freed
/// pages for reuse and returns them lazily.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// cairn: a distributed object store with CRUSH placement and QoS scheduling.
#[derive(Parser)]
#[command(name = "cairn", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Keyring file: the key of the entity to act as (a client command), the seed of the
    /// authentication database (`cairn mon`), or the OSD's own key (`cairn osd run`).
    /// Without one nothing authenticates.
    #[arg(long, global = true, env = "CAIRN_KEYRING")]
    keyring: Option<std::path::PathBuf>,
    /// The entity to act as (`client.admin` by default), like Ceph's `--name`.
    #[arg(long = "name", id = "entity_name", global = true, env = "CAIRN_NAME")]
    entity_name: Option<String>,
    /// Wire mode asked for on authenticated connections: `mac` (every frame authenticated)
    /// or `secure` (also encrypted). A monitor's own is the weakest it accepts.
    #[arg(long = "ms-mode", global = true, env = "CAIRN_MS_MODE")]
    ms_mode: Option<cairn_msgr::protect::WireMode>,
}

#[derive(Subcommand)]
enum Command {
    /// CRUSH maps: test mappings, map objects, analyze spread, balance, diff.
    Crush(crush::CrushArgs),
    /// Start a local cluster (monitor + OSDs as processes) with a default pool; over a running
    /// one, start only the daemons that are not running (a crashed OSD, say).
    Up(up::UpArgs),
    /// Stop the cluster `cairn up` started.
    Down(down::DownArgs),
    /// Store a file as an object.
    Put(data::PutArgs),
    /// Fetch an object.
    Get(data::GetArgs),
    /// Delete an object.
    Rm(data::NameArgs),
    /// Size and version of an object.
    Stat(data::NameArgs),
    /// List the objects of a pool.
    Ls(data::LsArgs),
    /// Block images over the cluster and their NBD export: `cairn rbd create POOL/IMAGE
    /// --size 10G`, `rbd ls|info|resize|rm`, `rbd nbd POOL --listen ADDR`.
    Rbd(rbd::RbdArgs),
    /// Send an admin command to a daemon: `cairn tell osd.N config set osd_op_queue wpq`.
    Tell(tell::TellArgs),
    /// PGs as their primaries report them (`cairn pg dump`, `pg ls [STATE]`, `pg ls-by-osd N`),
    /// and scrubs of one PG.
    Pg(pg::PgArgs),
    /// Benchmark a pool like `rados bench` (with latency percentiles).
    Bench(data::BenchArgs),
    /// Run a monitor (the cluster map authority).
    Mon(mon::MonArgs),
    /// Entities, keys and capabilities, like `ceph auth`: `cairn auth get-or-create
    /// client.bob osd 'allow rw pool=data' mon 'allow r'`, `auth ls|get|caps|rm|print-key`.
    Auth(auth::AuthArgs),
    /// Cluster health, OSDs and PG spread, from the monitor.
    Status(mon_link::MonAddr),
    /// Health checks, and with `detail` the OSDs and PGs behind each, like `ceph health`.
    Health(cmd::health::HealthArgs),
    /// Raw space and each pool's objects, stored bytes and room left, like `ceph df`.
    Df(mon_link::MonAddr),
    /// Create, list, change and remove pools.
    Pool(pool::PoolArgs),
    /// Mark OSDs out, in or down; show the OSD tree.
    Osd(osd::OsdArgs),
    /// QoS scheduler: simulate scenarios in virtual time.
    Sched(sched::SchedArgs),
    /// Messenger: round trips between two processes with no storage (the network layer).
    Msgr(msgr::MsgrArgs),
    /// Object store: benchmark against fio, emulated device capacities, fsck.
    Store(store::StoreArgs),
    /// Cache device (Open-CAS style): create, set-param, load-ioclass, stats, flush, detach.
    Cache(cache::CacheArgs),
    /// Studies: the seeds' experiments on emulated devices (tables and PNG plots).
    Study(study::StudyArgs),
    /// Run the S3 gateway (`--config FILE` or flags).
    S3gw(s3::GatewayArgs),
    /// S3 administration: `cairn s3 user create NAME`.
    S3(s3::S3Args),
    /// File systems over the cluster: `cairn fs new NAME`, `cairn fs mount NAME DIR`.
    Fs(fs::FsArgs),
    /// Run the metadata server of one file system.
    Mds(fs::MdsArgs),
}

/// Whether the command runs a daemon (which must see a closed socket as an error, never die of
/// SIGPIPE).
fn runs_daemon(command: &Command) -> bool {
    match command {
        Command::Mon(_)
        | Command::S3gw(_)
        | Command::Up(_)
        | Command::Down(_)
        | Command::Mds(_)
        | Command::Fs(_) => true,
        Command::Osd(args) => args.runs_daemon(),
        _ => false,
    }
}

/// Writes the libraries' log events (`tracing`) to stderr: as `RUST_LOG` says when it is set,
/// else `info` for daemons (peering retries, down PGs, stray deletions, failures) and `warn`
/// for other commands. Colour only on a terminal, so daemon log files stay plain text.
fn init_logging(daemon: bool) {
    use std::io::IsTerminal;
    let default = if daemon { "info" } else { "warn" };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
}

/// Runs the command; a failure prints its chain of causes on one line (`error: what: why`),
/// never a backtrace (anyhow's `Debug` output prints one whenever `RUST_BACKTRACE` is set).
fn main() -> std::process::ExitCode {
    match run(Cli::parse()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

#[allow(unsafe_code)] // restoring SIGPIPE: see the SAFETY note inside.
fn run(cli: Cli) -> anyhow::Result<()> {
    init_logging(runs_daemon(&cli.command));
    if !runs_daemon(&cli.command) {
        // A command whose output is piped into `head` ends quietly when the reader goes, as
        // Unix tools do, instead of panicking on a failed print (Rust ignores SIGPIPE).
        // SAFETY: called before any thread starts; restores the default disposition.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
    credentials::init(credentials::AuthOptions {
        keyring: cli.keyring,
        name: cli.entity_name,
        mode: cli.ms_mode,
    });
    match cli.command {
        Command::Crush(args) => crush::run(args),
        Command::Auth(args) => auth::run(args),
        Command::Up(args) => up::run(args),
        Command::Down(args) => down::run(args),
        Command::Put(args) => data::put(args),
        Command::Rbd(args) => rbd::run(args),
        Command::Get(args) => data::get(args),
        Command::Rm(args) => data::rm(args),
        Command::Stat(args) => data::stat(args),
        Command::Ls(args) => data::ls(args),
        Command::Tell(args) => tell::run(args),
        Command::Pg(args) => pg::run(args),
        Command::Bench(args) => data::bench(args),
        Command::Mon(args) => mon::run(args),
        Command::Status(args) => status::run(args),
        Command::Df(args) => df::run(args.mon),
        Command::Health(args) => cmd::health::run(args),
        Command::Pool(args) => pool::run(args),
        Command::Osd(args) => osd::run(args),
        Command::Sched(args) => sched::run(args),
        Command::Msgr(args) => msgr::run(args),
        Command::Store(args) => store::run(args),
        Command::Cache(args) => cache::run(args),
        Command::Study(args) => study::run(args),
        Command::S3gw(args) => s3::run_gateway(args),
        Command::S3(args) => s3::run(args),
        Command::Fs(args) => fs::run(args),
        Command::Mds(args) => fs::run_mds(args),
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn every_command_line_is_well_formed() {
        super::Cli::command().debug_assert();
    }
}
