//! `cairn`: the one binary. Each subsystem owns one module with its clap arguments and handler;
//! this file only dispatches.

mod cache_cmd;
mod crush_cmd;
mod store_cmd;
mod study_cmd;

use clap::{Parser, Subcommand};

/// cairn: a distributed object store with CRUSH placement and QoS scheduling.
#[derive(Parser)]
#[command(name = "cairn", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// CRUSH maps: test mappings, map objects, analyze spread, balance, diff.
    Crush(crush_cmd::CrushArgs),
    /// Object store: benchmark against fio, emulated device capacities, fsck.
    Store(store_cmd::StoreArgs),
    /// Cache device (Open-CAS style): create, set-param, load-ioclass, stats, flush, detach.
    Cache(cache_cmd::CacheArgs),
    /// Studies: the seeds' experiments on emulated devices (tables and PNG plots).
    Study(study_cmd::StudyArgs),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Crush(args) => crush_cmd::run(args),
        Command::Store(args) => store_cmd::run(args),
        Command::Cache(args) => cache_cmd::run(args),
        Command::Study(args) => study_cmd::run(args),
    }
}
