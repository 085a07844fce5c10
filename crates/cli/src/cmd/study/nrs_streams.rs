//! What every run of `cairn study nrs` is made of: the pool its streams use, a stream (dd-like
//! sequential blocks written into objects of its own, or read back round and round), the
//! measurement of what each stream's counter gains over a window, and the live selection of
//! a scheduler policy on every OSD.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use cairn_client::Client;
use indicatif::ProgressBar;

use crate::mon_link::up_osds;

/// The pool the streams write to (one copy, as a Lustre OST keeps one).
pub(super) const POOL: &str = "nrs";

/// The name of object `index` of a stream.
pub(super) fn object_name(tag: &str, client: usize, stream: usize, index: u64) -> String {
    format!("{tag}-c{client}-s{stream}-{index}")
}

/// What a stream works on: fresh objects to write (named by their index), or the objects a
/// write run left, read round and round.
pub(super) enum Objects {
    /// Fresh objects of this client's stream.
    Write {
        /// The client's index.
        client: usize,
        /// The stream's index.
        stream: usize,
    },
    /// These objects, read round and round.
    Read(Vec<String>),
}

/// One stream: writes (or reads back) `block`-sized pieces until `stop`, counting bytes in
/// `counter`; a writer leaves in `written` how many objects it began.
#[allow(clippy::too_many_arguments)]
pub(super) async fn stream(
    client: Arc<Client>,
    objects: Objects,
    tag: String,
    block: usize,
    object_bytes: u64,
    counter: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    written: Arc<AtomicU64>,
) -> anyhow::Result<()> {
    let data = vec![0u8; block];
    let mut index = 0u64;
    let mut offset = 0u64;
    while !stop.load(Ordering::Relaxed) {
        match &objects {
            Objects::Write { client: c, stream } => {
                let name = object_name(&tag, *c, *stream, index);
                written.store(index + 1, Ordering::Relaxed);
                client.write(POOL, &name, offset, &data).await?;
            }
            Objects::Read(names) => {
                let name = &names[usize::try_from(index)? % names.len()];
                client
                    .read_range_bytes(POOL, name, offset, block as u64)
                    .await?;
            }
        }
        counter.fetch_add(block as u64, Ordering::Relaxed);
        offset += block as u64;
        if offset >= object_bytes {
            offset = 0;
            index += 1;
        }
    }
    Ok(())
}

/// Waits out `warmup`, then measures what each counter gains over `seconds` (ticking `bar`
/// each second): MiB/s per counter.
pub(super) async fn measure(
    counters: &[Arc<AtomicU64>],
    warmup: Duration,
    seconds: u64,
    bar: &ProgressBar,
) -> Vec<f64> {
    tokio::time::sleep(warmup).await;
    let before: Vec<u64> = counters.iter().map(|c| c.load(Ordering::Relaxed)).collect();
    let start = Instant::now();
    for _ in 0..seconds {
        tokio::time::sleep(Duration::from_secs(1)).await;
        bar.tick();
    }
    let secs = start.elapsed().as_secs_f64();
    let mib = (1u64 << 20) as f64;
    counters
        .iter()
        .zip(before)
        .map(|(c, b)| c.load(Ordering::Relaxed).saturating_sub(b) as f64 / secs / mib)
        .collect()
}

/// Selects the scheduler policy of `toml` (`osd_op_queue_config`) on every OSD.
pub(super) async fn select_policy(admin: &Client, toml: &str, what: &str) -> anyhow::Result<()> {
    for osd in up_osds(admin) {
        let words: Vec<String> = ["config", "set", "osd_op_queue_config", toml]
            .iter()
            .map(|w| w.to_string())
            .collect();
        admin
            .tell(osd, &words)
            .await
            .with_context(|| format!("selecting {what} on osd.{osd}"))?;
    }
    Ok(())
}
