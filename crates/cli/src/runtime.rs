//! The tokio runtimes of cairn's commands and daemons: one builder, one limit on worker
//! threads.

use anyhow::{bail, Context};
use tokio::runtime::Runtime;

/// Most worker threads a runtime may be given (explicit limit).
pub(crate) const MAX_THREADS: usize = 64;

/// Worker threads of a command's runtime (client commands, the monitor, the S3 gateway,
/// `cairn up`) unless it is told otherwise (`cairn bench --client-threads`).
pub(crate) const COMMAND_THREADS: usize = 2;

/// Checks a worker-thread count given by `setting` (a flag or config key, named in the error).
pub(crate) fn check_threads(threads: usize, setting: &str) -> anyhow::Result<()> {
    if !(1..=MAX_THREADS).contains(&threads) {
        bail!("{setting} must be 1..={MAX_THREADS}, got {threads}");
    }
    Ok(())
}

/// A multi-threaded runtime with `threads` workers (checked as `setting`), I/O and timers on.
pub(crate) fn build(threads: usize, setting: &str) -> anyhow::Result<Runtime> {
    check_threads(threads, setting)?;
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()
        .context("starting the async runtime")
}

/// The runtime of a command: [`COMMAND_THREADS`] workers.
pub(crate) fn command() -> anyhow::Result<Runtime> {
    build(COMMAND_THREADS, "worker threads")
}

/// Worker threads of an OSD's runtime unless told (`cairn osd run --threads`): one. A request
/// then wakes no other worker on its way from the socket through the scheduler to the store
/// and back, and the store's device I/O goes through AIO. On 2 vCPUs two workers gave ~1.15x
/// fewer 4 KiB writes with ~15% more OSD CPU per write
/// (docs/results/2026-11-24-bottom-up-runs-and-one-worker.md); on a 16-core machine
/// 1, 2, 4 and 8 workers gave one OSD the same 4 KiB and 4 MiB throughput from one client, the
/// CPU per 4 KiB read about doubling at 4 (docs/results/2026-11-27-16-core-machine.md).
pub(crate) const DEFAULT_OSD_THREADS: usize = 1;

/// A runtime shaped like an OSD's: `threads` workers (checked as the setting `threads`).
pub(crate) fn osd_runtime(threads: usize) -> anyhow::Result<tokio::runtime::Runtime> {
    crate::runtime::build(threads, "threads")
}

/// Waits for SIGINT or SIGTERM: a server command stops cleanly on either (its sockets and
/// mounts cleaned up), as a service manager or a test harness asks.
pub(crate) async fn stop_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
