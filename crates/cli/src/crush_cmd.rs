//! `cairn crush ...`: placement tooling over a crushtool text map.

use clap::{Args, Subcommand};

/// Arguments of `cairn crush`.
#[derive(Args)]
pub struct CrushArgs {
    #[command(subcommand)]
    command: CrushCommand,
}

#[derive(Subcommand)]
enum CrushCommand {
    /// Check that a map parses.
    Check {
        /// crushtool text map.
        #[arg(long)]
        map: std::path::PathBuf,
    },
}

/// Runs one `cairn crush` subcommand.
pub fn run(args: CrushArgs) -> anyhow::Result<()> {
    match args.command {
        CrushCommand::Check { map } => {
            let _ = std::fs::read_to_string(map)?;
            Ok(())
        }
    }
}
