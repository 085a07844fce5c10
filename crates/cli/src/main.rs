//! `cairn`: the one binary. Each subsystem owns one module with its clap arguments and handler;
//! this file only dispatches.

mod crush_cmd;
mod crush_placement;
mod plot;
mod sched_cmd;

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
    /// QoS scheduler: simulate scenarios in virtual time.
    Sched(sched_cmd::SchedArgs),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Crush(args) => crush_cmd::run(args),
        Command::Sched(args) => sched_cmd::run(args),
    }
}
