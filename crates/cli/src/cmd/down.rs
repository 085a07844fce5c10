//! `cairn down`: stops the daemons `cairn up` started in a cluster directory.

use std::path::PathBuf;

use anyhow::bail;
use clap::Args;

use crate::cluster_dir::{self, stop_processes};

/// `cairn down`.
#[derive(Args)]
pub struct DownArgs {
    /// Cluster directory given to `cairn up`.
    #[arg(long, default_value = "cairn-cluster")]
    dir: PathBuf,
}

/// Stops every daemon `cairn up` started in `dir` and waits until each has exited, so that a
/// `cairn up` right after finds every device file and map store unlocked. Pids in the file
/// that are no daemon of `dir` any more (exited, or reused by another process after a crash
/// or reboot) are left alone and named.
pub fn run(args: DownArgs) -> anyhow::Result<()> {
    let pids = cluster_dir::read(&args.dir)?;
    if !pids.exists {
        bail!(
            "no running cluster in {} ({} missing)",
            args.dir.display(),
            args.dir.join(cluster_dir::PIDS_FILE).display()
        );
    }
    let running: Vec<i32> = pids.running.iter().rev().map(|d| d.pid as i32).collect();
    let stopped = stop_processes(&running)?;
    match std::fs::remove_file(args.dir.join(cluster_dir::PIDS_FILE)) {
        // Another `cairn down` of the same directory finished first.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        other => other?,
    }
    println!("stopped {stopped} processes");
    if !pids.gone.is_empty() {
        println!(
            "left alone: pids {:?} (no longer daemons of this cluster)",
            pids.gone
        );
    }
    Ok(())
}
