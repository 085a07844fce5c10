//! `cairn study nrs`'s ORR/TRR part: seed 001's IOR reads on a real local cluster. Files laid
//! out as CephFS lays them out (`cairn_study::nrs_ior::Layout`) are written once; then under
//! each policy, set live on every OSD, every case's threads (each client a cluster client of
//! its own) read their file, or their segment of the shared file, sequentially in transfers of
//! `--block-kib`, keeping `--ior-depth` in flight as Lustre's readahead keeps several RPCs;
//! total and per-thread throughput over a measured window.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use cairn_client::Client;
use cairn_study::nrs_ior::{IorCase, IorRun, Layout, Sharing};
use futures_util::StreamExt;
use indicatif::ProgressBar;

use super::nrs_streams::{measure, POOL};

/// What the IOR part reads and how.
pub struct IorPlan {
    /// Bytes per transfer.
    pub block: u64,
    /// Bytes of one thread's file (FPP), and of each thread's share of the shared file.
    pub file_bytes: u64,
    /// Objects' size.
    pub object_bytes: u64,
    /// The shared file's stripe count (FPP files have one stripe).
    pub stripe_count: u64,
    /// Transfers in flight per thread.
    pub depth: usize,
    /// Seconds before measuring, and measured.
    pub warmup: Duration,
    /// Seconds measured.
    pub seconds: u64,
}

impl IorPlan {
    /// An FPP file's layout: one stripe, objects filled in turn.
    fn fpp_layout(&self) -> Layout {
        Layout {
            stripe_unit: self.object_bytes,
            stripe_count: 1,
            object_size: self.object_bytes,
        }
    }

    /// The shared file's layout: transfer-sized stripe units over `stripe_count` objects.
    fn ssf_layout(&self) -> Layout {
        Layout {
            stripe_unit: self.block,
            stripe_count: self.stripe_count,
            object_size: self.object_bytes,
        }
    }
}

/// The name of object `index` of FPP file `file`, or of the shared file.
fn object_name(sharing: Sharing, file: usize, index: u64) -> String {
    match sharing {
        Sharing::Fpp => format!("ior-fpp-{file}-{index}"),
        Sharing::Ssf => format!("ior-ssf-{index}"),
    }
}

/// Writes the files the cases read: as many FPP files as the most threads of an FPP case, and
/// a shared file of that many shares for the SSF cases.
pub async fn write_files(
    client: &Client,
    plan: &IorPlan,
    cases: &[IorCase],
    bar: &ProgressBar,
) -> anyhow::Result<()> {
    let most = |sharing| {
        cases
            .iter()
            .filter(|c| c.sharing == sharing)
            .map(IorCase::total_threads)
            .max()
            .unwrap_or(0)
    };
    let mut objects: Vec<(String, u64)> = Vec::new();
    let fpp = plan.fpp_layout();
    for file in 0..most(Sharing::Fpp) {
        for index in 0..fpp.objects_for(plan.file_bytes) {
            let bytes = (plan.file_bytes - index * plan.object_bytes).min(plan.object_bytes);
            objects.push((object_name(Sharing::Fpp, file, index), bytes));
        }
    }
    let ssf = plan.ssf_layout();
    let shared_bytes = plan.file_bytes * most(Sharing::Ssf) as u64;
    let ssf_objects = ssf.objects_for(shared_bytes);
    let mut ssf_sizes = vec![0u64; usize::try_from(ssf_objects)?];
    let mut at = 0;
    while at < shared_bytes {
        let (o, off) = ssf.locate(at);
        let unit = plan.block.min(shared_bytes - at);
        let size = &mut ssf_sizes[usize::try_from(o)?];
        *size = (*size).max(off + unit);
        at += unit;
    }
    for (index, bytes) in ssf_sizes.into_iter().enumerate() {
        objects.push((object_name(Sharing::Ssf, 0, index as u64), bytes));
    }
    let total = objects.len();
    let data = bytes::Bytes::from(vec![0x5au8; usize::try_from(plan.object_bytes)?]);
    let mut done = 0;
    for chunk in objects.chunks(4) {
        let writes = chunk.iter().map(|(name, bytes)| {
            let piece = data.slice(..usize::try_from(*bytes).unwrap_or(0));
            client.write_full_bytes(POOL, name, piece)
        });
        for r in futures_util::future::join_all(writes).await {
            r.context("writing the IOR files")?;
        }
        done += chunk.len();
        bar.set_message(format!("writing the IOR files: {done}/{total} objects"));
    }
    Ok(())
}

/// One thread: reads its bytes of the file round and round, `depth` transfers in flight,
/// counting what it read in `counter`, until `stop`.
async fn thread(
    client: Arc<Client>,
    place: Vec<(String, u64)>,
    block: u64,
    depth: usize,
    counter: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
) -> anyhow::Result<()> {
    let place = Arc::new(place);
    let mut next = 0usize;
    let transfers = std::iter::from_fn(|| {
        if stop.load(Ordering::Relaxed) {
            return None;
        }
        let i = next;
        next = (next + 1) % place.len();
        Some(i)
    });
    let mut reads = futures_util::stream::iter(transfers)
        .map(|i| {
            let (client, place) = (client.clone(), place.clone());
            async move {
                let (name, offset) = &place[i];
                client.read_range_bytes(POOL, name, *offset, block).await
            }
        })
        .buffered(depth.max(1));
    while let Some(r) = reads.next().await {
        let got = r?;
        counter.fetch_add(got.len() as u64, Ordering::Relaxed);
    }
    Ok(())
}

/// Where each transfer of thread `t` of `case` reads: (object, offset), in its file's order.
fn places(plan: &IorPlan, case: &IorCase, t: usize) -> Vec<(String, u64)> {
    let (layout, start, bytes, file) = match case.sharing {
        Sharing::Fpp => (plan.fpp_layout(), 0, plan.file_bytes, t),
        // Thread t's segment of the shared file (a case of fewer threads than the file was
        // written for reads its first segments).
        Sharing::Ssf => (
            plan.ssf_layout(),
            plan.file_bytes * t as u64,
            plan.file_bytes,
            0,
        ),
    };
    (0..bytes / plan.block)
        .map(|k| {
            let (object, offset) = layout.locate(start + k * plan.block);
            (object_name(case.sharing, file, object), offset)
        })
        .collect()
}

/// Runs one case under the policy already set: every thread reads for the warm-up and the
/// measured window.
pub async fn run_case(
    plan: &IorPlan,
    clients: &[Arc<Client>],
    policy: &str,
    case: &IorCase,
    bar: &ProgressBar,
) -> anyhow::Result<IorRun> {
    anyhow::ensure!(
        clients.len() >= case.clients,
        "{} clients for a case of {}",
        clients.len(),
        case.clients
    );
    let stop = Arc::new(AtomicBool::new(false));
    let threads = case.total_threads();
    let counters: Vec<Arc<AtomicU64>> = (0..threads).map(|_| Arc::default()).collect();
    let mut tasks = Vec::new();
    for (t, counter) in counters.iter().enumerate() {
        let place = places(plan, case, t);
        anyhow::ensure!(
            !place.is_empty(),
            "a thread of {} has nothing to read",
            case.name()
        );
        tasks.push(tokio::spawn(thread(
            clients[t / case.threads].clone(),
            place,
            plan.block,
            plan.depth,
            counter.clone(),
            stop.clone(),
        )));
    }
    let threads_mib_s = measure(&counters, plan.warmup, plan.seconds, bar).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await??;
    }
    Ok(IorRun {
        policy: policy.to_string(),
        case: *case,
        mib_s: threads_mib_s.iter().sum(),
        threads_mib_s,
    })
}
