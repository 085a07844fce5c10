//! `cairn`: the one binary. Each subsystem owns one module with its clap arguments and handler;
//! this file only dispatches.

mod admin_cmd;
mod auth_cmd;
mod bench_timeline;
mod cache_cmd;
mod cluster_cmd;
mod cluster_dir;
mod credentials;
mod crush_cmd;
mod crush_placement;
mod data_cmd;
mod df_cmd;
mod health;
mod local_cluster;
mod maintenance;
mod mon_cmd;
mod msgr_cmd;
mod pg_select;
mod plot;
mod rbd_cmd;
mod runtime;
mod s3_cmd;
mod sched_cmd;
mod store_cmd;
mod study_cmd;
mod study_recovery;
mod up_keys;

use clap::{Parser, Subcommand};

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
    Crush(crush_cmd::CrushArgs),
    /// Start a local cluster (monitor + OSDs as processes) with a default pool; over a running
    /// one, start only the daemons that are not running (a crashed OSD, say).
    Up(cluster_cmd::UpArgs),
    /// Stop the cluster `cairn up` started.
    Down(cluster_cmd::DownArgs),
    /// Store a file as an object.
    Put(data_cmd::PutArgs),
    /// Fetch an object.
    Get(data_cmd::GetArgs),
    /// Delete an object.
    Rm(data_cmd::NameArgs),
    /// Size and version of an object.
    Stat(data_cmd::NameArgs),
    /// List the objects of a pool.
    Ls(admin_cmd::LsArgs),
    /// Block images over the cluster and their NBD export: `cairn rbd create POOL/IMAGE
    /// --size 10G`, `rbd ls|info|resize|rm`, `rbd nbd POOL --listen ADDR`.
    Rbd(rbd_cmd::RbdArgs),
    /// Send an admin command to a daemon: `cairn tell osd.N config set osd_op_queue wpq`.
    Tell(admin_cmd::TellArgs),
    /// PGs as their primaries report them (`cairn pg dump`, `pg ls [STATE]`, `pg ls-by-osd N`),
    /// and scrubs of one PG.
    Pg(admin_cmd::PgArgs),
    /// Benchmark a pool like `rados bench` (with latency percentiles).
    Bench(data_cmd::BenchArgs),
    /// Run a monitor (the cluster map authority).
    Mon(mon_cmd::MonArgs),
    /// Entities, keys and capabilities, like `ceph auth`: `cairn auth get-or-create
    /// client.bob osd 'allow rw pool=data' mon 'allow r'`, `auth ls|get|caps|rm|print-key`.
    Auth(auth_cmd::AuthArgs),
    /// Cluster health, OSDs and PG spread, from the monitor.
    Status(mon_cmd::MonAddr),
    /// Health checks, and with `detail` the OSDs and PGs behind each, like `ceph health`.
    Health(mon_cmd::HealthArgs),
    /// Raw space and each pool's objects, stored bytes and room left, like `ceph df`.
    Df(mon_cmd::MonAddr),
    /// Create, list, change and remove pools.
    Pool(mon_cmd::PoolArgs),
    /// Mark OSDs out, in or down; show the OSD tree.
    Osd(mon_cmd::OsdArgs),
    /// QoS scheduler: simulate scenarios in virtual time.
    Sched(sched_cmd::SchedArgs),
    /// Messenger: round trips between two processes with no storage (the network layer).
    Msgr(msgr_cmd::MsgrArgs),
    /// Object store: benchmark against fio, emulated device capacities, fsck.
    Store(store_cmd::StoreArgs),
    /// Cache device (Open-CAS style): create, set-param, load-ioclass, stats, flush, detach.
    Cache(cache_cmd::CacheArgs),
    /// Studies: the seeds' experiments on emulated devices (tables and PNG plots).
    Study(study_cmd::StudyArgs),
    /// Run the S3 gateway (`--config FILE` or flags).
    S3gw(s3_cmd::GatewayArgs),
    /// S3 administration: `cairn s3 user create NAME`.
    S3(s3_cmd::S3Args),
}

/// Whether the command runs a daemon (which must see a closed socket as an error, never die of
/// SIGPIPE).
fn runs_daemon(command: &Command) -> bool {
    match command {
        Command::Mon(_) | Command::S3gw(_) | Command::Up(_) | Command::Down(_) => true,
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
        Command::Crush(args) => crush_cmd::run(args),
        Command::Auth(args) => auth_cmd::run(args),
        Command::Up(args) => cluster_cmd::run_up(args),
        Command::Down(args) => cluster_cmd::run_down(args),
        Command::Put(args) => data_cmd::put(args),
        Command::Rbd(args) => rbd_cmd::run(args),
        Command::Get(args) => data_cmd::get(args),
        Command::Rm(args) => data_cmd::rm(args),
        Command::Stat(args) => data_cmd::stat(args),
        Command::Ls(args) => admin_cmd::ls(args),
        Command::Tell(args) => admin_cmd::tell(args),
        Command::Pg(args) => admin_cmd::pg(args),
        Command::Bench(args) => data_cmd::bench(args),
        Command::Mon(args) => mon_cmd::run_mon(args),
        Command::Status(args) => mon_cmd::run_status(args),
        Command::Df(args) => df_cmd::run(args.mon),
        Command::Health(args) => mon_cmd::run_health(args),
        Command::Pool(args) => mon_cmd::run_pool(args),
        Command::Osd(args) => mon_cmd::run_osd(args),
        Command::Sched(args) => sched_cmd::run(args),
        Command::Msgr(args) => msgr_cmd::run(args),
        Command::Store(args) => store_cmd::run(args),
        Command::Cache(args) => cache_cmd::run(args),
        Command::Study(args) => study_cmd::run(args),
        Command::S3gw(args) => s3_cmd::run_gateway(args),
        Command::S3(args) => s3_cmd::run(args),
    }
}
