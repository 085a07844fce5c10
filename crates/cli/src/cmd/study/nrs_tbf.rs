//! `cairn study nrs`'s TBF part: rules by client and by operation on a real local cluster.
//! Each case runs its clients' dd streams (each client a cluster client of its own) first under
//! FIFO, then under a TBF policy whose one rule caps half of the clients (by their ids), or
//! every client's writes while the other half of the clients read; each group's per-client
//! throughput over a measured window, beside the rule's limit.

use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use cairn_client::Client;
use cairn_study::nrs_tbf::{self, TbfCase, TbfRow};
use indicatif::ProgressBar;

use super::nrs_streams::{measure, object_name, select_policy, stream, Objects, POOL};

/// How the TBF part runs.
pub struct TbfPlan {
    /// Bytes per request.
    pub block: u64,
    /// Bytes a writer puts in one object before the next.
    pub object_bytes: u64,
    /// Streams per client.
    pub streams: usize,
    /// The rule's rate, requests a second per client on each OSD.
    pub rate_rps: f64,
    /// OSDs (a client may move the rate on each).
    pub osds: usize,
    /// Seconds before measuring.
    pub warmup: Duration,
    /// Seconds measured.
    pub seconds: u64,
}

impl TbfPlan {
    /// The most one capped client may move, MiB/s: the rate on every OSD.
    fn limit_mib_s(&self) -> f64 {
        self.rate_rps * self.block as f64 * self.osds as f64 / (1u64 << 20) as f64
    }
}

/// Writes one object per stream of the reading clients `readers`: what they read round and
/// round, by client (counted from the first reader) and stream.
async fn objects_to_read(
    admin: &Client,
    plan: &TbfPlan,
    tag: &str,
    readers: std::ops::Range<usize>,
) -> anyhow::Result<Vec<Vec<String>>> {
    let data = vec![0u8; usize::try_from(plan.object_bytes)?];
    let mut out = Vec::new();
    for c in readers {
        let mut names = Vec::new();
        for s in 0..plan.streams {
            let name = object_name(tag, c, s, 0);
            admin.write_full(POOL, &name, &data).await?;
            names.push(name);
        }
        out.push(names);
    }
    Ok(out)
}

/// Runs one case under one policy: each client's throughput, MiB/s.
async fn run_policy(
    plan: &TbfPlan,
    clients: &[Arc<Client>],
    case: TbfCase,
    tag: &str,
    reads: &[Vec<String>],
    bar: &ProgressBar,
) -> anyhow::Result<Vec<f64>> {
    let half = clients.len() / 2;
    let stop = Arc::new(AtomicBool::new(false));
    let counters: Vec<Arc<AtomicU64>> = clients.iter().map(|_| Arc::default()).collect();
    let mut tasks = Vec::new();
    for (c, client) in clients.iter().enumerate() {
        for s in 0..plan.streams {
            let to_read = match case {
                TbfCase::ByOp => c.checked_sub(half).and_then(|r| reads.get(r)?.get(s)),
                TbfCase::ByClient => None,
            };
            let objects = match to_read {
                Some(name) => Objects::Read(vec![name.clone()]),
                None => Objects::Write {
                    client: c,
                    stream: s,
                },
            };
            tasks.push(tokio::spawn(stream(
                client.clone(),
                objects,
                tag.to_string(),
                usize::try_from(plan.block)?,
                plan.object_bytes,
                counters[c].clone(),
                stop.clone(),
                Arc::default(),
            )));
        }
    }
    let rates = measure(&counters, plan.warmup, plan.seconds, bar).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for t in tasks {
        t.await??;
    }
    Ok(rates)
}

/// Runs both cases under FIFO and under their TBF rule: a row per case, policy and group.
/// `ids` are the clients' ids, as the OSDs see them.
pub async fn run_tbf(
    plan: &TbfPlan,
    admin: &Client,
    clients: &[Arc<Client>],
    ids: &[u64],
    bar: &ProgressBar,
) -> anyhow::Result<Vec<TbfRow>> {
    assert_eq!(clients.len(), ids.len(), "an id per client");
    let half = clients.len() / 2;
    let mut rows = Vec::new();
    for case in [TbfCase::ByClient, TbfCase::ByOp] {
        let expr = nrs_tbf::rule_expr(case, &ids[..half]);
        let tbf = nrs_tbf::rule_toml(&expr, plan.rate_rps).map_err(|e| anyhow::anyhow!(e))?;
        let reads = match case {
            TbfCase::ByOp => {
                bar.set_message(format!("tbf {}: writing objects to read", case.name()));
                objects_to_read(
                    admin,
                    plan,
                    &format!("tbf-{}", case.name()),
                    half..clients.len(),
                )
                .await?
            }
            TbfCase::ByClient => Vec::new(),
        };
        for (policy, toml) in [("fifo", "name = \"fifo\"".to_string()), ("tbf", tbf)] {
            select_policy(admin, &toml, policy).await?;
            bar.set_message(format!("tbf {} under {policy}", case.name()));
            let tag = format!("tbf-{}-{policy}", case.name());
            let rates = run_policy(plan, clients, case, &tag, &reads, bar)
                .await
                .with_context(|| format!("tbf {} under {policy}", case.name()))?;
            bar.inc(1);
            let [first, second] = case.groups();
            let limit = (policy == "tbf").then(|| plan.limit_mib_s());
            rows.push(TbfRow {
                case,
                policy: policy.to_string(),
                group: first.to_string(),
                clients_mib_s: rates[..half].to_vec(),
                limit_mib_s: limit,
            });
            rows.push(TbfRow {
                case,
                policy: policy.to_string(),
                group: second.to_string(),
                clients_mib_s: rates[half..].to_vec(),
                limit_mib_s: None,
            });
        }
    }
    select_policy(admin, "name = \"fifo\"", "fifo").await?;
    Ok(rows)
}
