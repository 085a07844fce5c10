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
