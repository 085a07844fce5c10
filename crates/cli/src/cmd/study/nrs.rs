//! `cairn study nrs`: seed 001's CRR-N experiment on a real local cluster. Groups of streams
//! per client (each stream a dd: sequential blocks into objects of its own, or read back),
//! every client a cluster client of its own id (the OSDs' CRR-N queues by client), under each
//! scheduler policy set live on every OSD; per-client throughput over a measured window, its
//! standard deviation, the lone client's share, tables beside the seed's and a plot per run.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use cairn_client::Client;
use cairn_proto::mon::Request;
use cairn_qos::config::PolicyConfig;
use cairn_study::nrs::{self, ClientResult, NrsRun};
use cairn_study::nrs_ior::{self, IorCase, IorRun};
use cairn_study::nrs_tbf;
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};

use crate::local_cluster::{LocalCluster, UpSettings};
use crate::mon_link::up_osds;
use crate::plot::{bar_chart, Bar};

use super::nrs_ior::{run_case, write_files, IorPlan};
use super::nrs_streams::{measure, object_name, select_policy, stream, Objects, POOL};
use super::nrs_tbf::{run_tbf, TbfPlan};

/// Longest wait for the pool to take writes.
const READY_TIMEOUT: Duration = Duration::from_secs(120);

/// Arguments of `cairn study nrs`.
#[derive(Args)]
pub struct NrsStudyArgs {
    /// Directory for nrs-study.md, nrs-clients.csv and the plots.
    #[arg(long, default_value = "study-out")]
    out_dir: PathBuf,
    /// Directory for the cluster (default: a fresh one under the temp dir).
    #[arg(long)]
    work_dir: Option<PathBuf>,
    /// OSD processes (the seed: 2 OSS x 4 OSTs).
    #[arg(long, default_value_t = 4)]
    osds: usize,
    /// Emulated device profile of every OSD (`none`: plain files).
    #[arg(long, default_value = "hdd-7200")]
    profile: String,
    /// Device file size of each OSD, MiB.
    #[arg(long = "device-mib", default_value_t = 8192)]
    device_mib: u64,
    /// PGs of the pool.
    #[arg(long = "pg-num", default_value_t = 64)]
    pg_num: u32,
    /// Scheduler policies to compare, comma-separated (`fifo` is the seed's "vanilla").
    #[arg(long, value_delimiter = ',', default_value = "fifo,crrn")]
    policies: Vec<String>,
    /// Cases, comma-separated: CLIENTSxSTREAMS groups joined by `+`.
    #[arg(long, value_delimiter = ',', default_value = "10x10,9x11+1x1")]
    cases: Vec<String>,
    /// Operations, comma-separated: `write` (dd if=/dev/zero) and `read` (dd of=/dev/null,
    /// of what the write run left).
    #[arg(long, value_delimiter = ',', default_value = "write,read")]
    ops: Vec<String>,
    /// Seconds measured per run.
    #[arg(long, default_value_t = 30)]
    seconds: u64,
    /// Seconds of each run before measuring.
    #[arg(long = "warmup-s", default_value_t = 5)]
    warmup_s: u64,
    /// Bytes per request, KiB (dd's bs=1M).
    #[arg(long = "block-kib", default_value_t = 1024)]
    block_kib: u64,
    /// Bytes a stream writes into one object before it moves to the next, MiB (also the IOR
    /// files' object size).
    #[arg(long = "object-mib", default_value_t = 16)]
    object_mib: u64,
    /// Parts of the study, comma-separated: `crrn` (dd streams under CRR-N), `ior` (IOR
    /// reads under ORR and TRR) and `tbf` (TBF rules by client and by operation).
    #[arg(long, value_delimiter = ',', default_value = "crrn,ior,tbf")]
    parts: Vec<String>,
    /// Clients of the TBF part (half of them capped, or writing).
    #[arg(long = "tbf-clients", default_value_t = 10)]
    tbf_clients: usize,
    /// Streams per client in the TBF part.
    #[arg(long = "tbf-streams", default_value_t = 4)]
    tbf_streams: usize,
    /// The TBF rule's rate: requests a second per client on each OSD.
    #[arg(long = "tbf-rate-rps", default_value_t = 5.0)]
    tbf_rate_rps: f64,
    /// IOR cases, comma-separated: `fpp-CxT` (file per process) or `ssf-CxT` (a shared file),
    /// C clients of T threads.
    #[arg(
        long = "ior-cases",
        value_delimiter = ',',
        default_value = "fpp-14x1,ssf-14x1,fpp-14x8,ssf-14x8"
    )]
    ior_cases: Vec<String>,
    /// IOR policies, comma-separated: `fifo`, `crrn`, or `orr|trr-log|phys-QUANTUM`.
    #[arg(
        long = "ior-policies",
        value_delimiter = ',',
        default_value = "fifo,orr-log-256,orr-phys-256,trr-log-256,trr-phys-256"
    )]
    ior_policies: Vec<String>,
    /// Bytes of each IOR thread's file (and of its segment of the shared file), MiB.
    #[arg(long = "ior-file-mib", default_value_t = 32)]
    ior_file_mib: u64,
    /// Transfers each IOR thread keeps in flight (Lustre's readahead keeps several RPCs).
    #[arg(long = "ior-depth", default_value_t = 4)]
    ior_depth: usize,
    /// Objects the shared file is striped over, in transfer-sized units.
    #[arg(long = "ior-stripe-count", default_value_t = 8)]
    ior_stripe_count: u64,
}

/// The IOR part's cases and policies (each with the TOML that selects it), checked.
type IorParts = (Vec<IorCase>, Vec<(String, String)>);

impl NrsStudyArgs {
    fn runs_part(&self, part: &str) -> bool {
        self.parts.iter().any(|p| p == part)
    }

    fn check_ior(&self) -> anyhow::Result<IorParts> {
        let cases = self
            .ior_cases
            .iter()
            .map(|c| IorCase::parse(c).map_err(|e| anyhow::anyhow!(e)))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let policies = self
            .ior_policies
            .iter()
            .map(|p| {
                nrs_ior::policy_toml(p)
                    .map(|t| (p.clone(), t))
                    .map_err(|e| anyhow::anyhow!("policy `{p}`: {e}"))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        if !(1..=4096).contains(&self.ior_file_mib)
            || !(self.ior_file_mib * 1024).is_multiple_of(self.block_kib)
        {
            bail!("--ior-file-mib is 1..=4096 and a whole number of blocks");
        }
        if !(self.object_mib * 1024).is_multiple_of(self.block_kib) {
            bail!("--object-mib is a whole number of blocks for the IOR files");
        }
        if !(1..=64).contains(&self.ior_depth) || !(1..=64).contains(&self.ior_stripe_count) {
            bail!("--ior-depth and --ior-stripe-count are 1..=64");
        }
        Ok((cases, policies))
    }

    fn tbf_plan(&self) -> TbfPlan {
        TbfPlan {
            block: self.block_kib * 1024,
            object_bytes: self.object_mib << 20,
            streams: self.tbf_streams,
            rate_rps: self.tbf_rate_rps,
            osds: self.osds,
            warmup: Duration::from_secs(self.warmup_s),
            seconds: self.seconds,
        }
    }

    fn ior_plan(&self) -> IorPlan {
        IorPlan {
            block: self.block_kib * 1024,
            file_bytes: self.ior_file_mib << 20,
            object_bytes: self.object_mib << 20,
            stripe_count: self.ior_stripe_count,
            depth: self.ior_depth,
            warmup: Duration::from_secs(self.warmup_s),
            seconds: self.seconds,
        }
    }

    fn check(&self) -> anyhow::Result<Vec<(String, Vec<usize>)>> {
        for p in &self.parts {
            if !["crrn", "ior", "tbf"].contains(&p.as_str()) {
                bail!("a part is `crrn`, `ior` or `tbf`, not `{p}`");
            }
        }
        if !(2..=64).contains(&self.tbf_clients) || !(1..=64).contains(&self.tbf_streams) {
            bail!("--tbf-clients is 2..=64 and --tbf-streams 1..=64");
        }
        if !(self.tbf_rate_rps.is_finite() && (0.1..=100_000.0).contains(&self.tbf_rate_rps)) {
            bail!("--tbf-rate-rps is 0.1..=100000");
        }
        for p in &self.policies {
            PolicyConfig::by_name(p).map_err(|e| anyhow::anyhow!("policy `{p}`: {e}"))?;
        }
        for op in &self.ops {
            if op != "write" && op != "read" {
                bail!("an operation is `write` or `read`, not `{op}`");
            }
        }
        if !(1..=64).contains(&self.osds) {
            bail!("--osds is 1..=64");
        }
        if !(1..=3600).contains(&self.seconds) || self.warmup_s > 600 {
            bail!("--seconds is 1..=3600 and --warmup-s at most 600");
        }
        if !(4..=16 * 1024).contains(&self.block_kib) {
            bail!("--block-kib is 4..=16384");
        }
        if self.object_mib == 0 || self.object_mib * 1024 < self.block_kib || self.object_mib > 1024
        {
            bail!("--object-mib is 1..=1024 and at least one block");
        }
        self.cases
            .iter()
            .map(|c| {
                nrs::parse_case(c)
                    .map(|streams| (c.clone(), streams))
                    .map_err(|e| anyhow::anyhow!(e))
            })
            .collect()
    }
}

/// The objects' names of one run start with its policy and case.
fn run_tag(policy: &str, case: &str) -> String {
    format!("{policy}-{case}")
}

/// Objects each stream of a run can use: for writes, a long enough list of fresh names; for
/// reads, those the write run left (at least one, written now if the write run was skipped).
struct StreamObjects {
    names: Vec<Vec<Vec<String>>>,
}

#[allow(clippy::too_many_arguments)]
async fn run_one(
    args: &NrsStudyArgs,
    clients: &[Arc<Client>],
    policy: &str,
    case: &str,
    streams: &[usize],
    write: bool,
    objects: &mut StreamObjects,
    bar: &ProgressBar,
) -> anyhow::Result<NrsRun> {
    let block = usize::try_from(args.block_kib * 1024)?;
    let object_bytes = args.object_mib << 20;
    let stop = Arc::new(AtomicBool::new(false));
    let counters: Vec<Arc<AtomicU64>> = streams.iter().map(|_| Arc::default()).collect();
    let mut written: Vec<Vec<Arc<AtomicU64>>> = Vec::new();
    let mut tasks = Vec::new();
    for (c, &n) in streams.iter().enumerate() {
        let mut per_client = Vec::new();
        for s in 0..n {
            let source = match write {
                true => Objects::Write {
                    client: c,
                    stream: s,
                },
                false => Objects::Read(objects.names[c][s].clone()),
            };
            let done = Arc::new(AtomicU64::new(0));
            per_client.push(done.clone());
            tasks.push(tokio::spawn(stream(
                clients[c].clone(),
                source,
                run_tag(policy, case),
                block,
                object_bytes,
                counters[c].clone(),
                stop.clone(),
                done,
            )));
        }
        written.push(per_client);
    }
    let rates = measure(
        &counters,
        Duration::from_secs(args.warmup_s),
        args.seconds,
        bar,
    )
    .await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await??;
    }
    if write {
        objects.names = written
            .iter()
            .enumerate()
            .map(|(c, per_client)| {
                per_client
                    .iter()
                    .enumerate()
                    .map(|(s, n)| {
                        (0..n.load(Ordering::Relaxed).max(1))
                            .map(|k| object_name(&run_tag(policy, case), c, s, k))
                            .collect()
                    })
                    .collect()
            })
            .collect();
    }
    let clients = streams
        .iter()
        .enumerate()
        .map(|(c, &n)| ClientResult {
            client: c,
            streams: n,
            mib_s: rates[c],
        })
        .collect();
    Ok(NrsRun {
        policy: policy.to_string(),
        case: case.to_string(),
        op: if write { "write" } else { "read" }.to_string(),
        clients,
    })
}

/// Writes one object per stream so that a read run has something to read.
async fn prefill(
    args: &NrsStudyArgs,
    client: &Client,
    policy: &str,
    case: &str,
    streams: &[usize],
) -> anyhow::Result<StreamObjects> {
    let data = vec![0u8; usize::try_from(args.object_mib << 20)?];
    let mut names = Vec::new();
    for (c, &n) in streams.iter().enumerate() {
        let mut per_client = Vec::new();
        for s in 0..n {
            let name = object_name(&run_tag(policy, case), c, s, 0);
            client.write_full(POOL, &name, &data).await?;
            per_client.push(vec![name]);
        }
        names.push(per_client);
    }
    Ok(StreamObjects { names })
}

/// Removes the objects a case's runs wrote (the next case starts on an empty pool).
async fn remove_objects(client: &Client, objects: &StreamObjects) -> anyhow::Result<()> {
    let names: Vec<&String> = objects.names.iter().flatten().flatten().collect();
    for chunk in names.chunks(32) {
        let removed =
            futures_util::future::join_all(chunk.iter().map(|name| client.remove(POOL, name)))
                .await;
        for r in removed {
            match r {
                Ok(()) | Err(cairn_client::ClientError::NotFound(_)) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(())
}

/// Waits until the pool takes a write.
async fn wait_writable(client: &Client) -> anyhow::Result<()> {
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        match client.write_full(POOL, "ready", b"ready").await {
            Ok(_) => return Ok(()),
            Err(e) if Instant::now() > deadline => return Err(e.into()),
            Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
}

fn plot_name(r: &NrsRun) -> String {
    format!("nrs-{}-{}-{}.png", r.op, r.case.replace('+', "p"), r.policy)
}

/// Runs `cairn study nrs`.
pub fn run(args: NrsStudyArgs) -> anyhow::Result<()> {
    let mut cases = args.check()?;
    let (ior_cases, ior_policies) = args.check_ior()?;
    let ior_cases = if args.runs_part("ior") {
        ior_cases
    } else {
        Vec::new()
    };
    if !args.runs_part("crrn") {
        cases.clear();
    }
    std::fs::create_dir_all(&args.out_dir)
        .with_context(|| format!("creating {}", args.out_dir.display()))?;
    let dir = args.work_dir.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("cairn-study-nrs-{}", std::process::id()))
    });
    let profile = (args.profile != "none").then_some(args.profile.as_str());
    let tbf_runs = if args.runs_part("tbf") { 4 } else { 0 };
    let total = args.policies.len() * cases.len() * args.ops.len()
        + ior_policies.len() * ior_cases.len()
        + tbf_runs;
    let bar = ProgressBar::new(total as u64);
    bar.set_style(ProgressStyle::with_template(
        "{elapsed_precise} {bar:30} {pos}/{len} {msg}",
    )?);
    bar.set_message(format!("starting {} OSDs", args.osds));
    let settings = UpSettings {
        osds: args.osds,
        device_mib: args.device_mib,
        profile,
        osd_args: &[],
    };
    let cluster = LocalCluster::up(&settings, &dir)?;
    let rt = crate::runtime::build(2, "study")?;
    let runs = rt.block_on(async {
        let (admin, mon) = cluster.connect().await?;
        let create = Request::CreatePool {
            name: POOL.into(),
            size: 1,
            pg_num: args.pg_num,
        };
        mon.op(create, 10_000).await?;
        wait_writable(&admin).await?;
        let most = cases
            .iter()
            .map(|(_, s)| s.len())
            .chain(ior_cases.iter().map(|c| c.clients))
            .chain((tbf_runs > 0).then_some(args.tbf_clients))
            .max()
            .unwrap_or(0);
        let mut clients = Vec::new();
        let mut ids = Vec::new();
        for _ in 0..most {
            let id = cairn_client::random_client_id();
            ids.push(id);
            clients.push(Arc::new(
                Client::connect_as(cluster.mon, id, Some(cluster.admin()?)).await?,
            ));
        }
        let mut runs = Vec::new();
        let policies = if cases.is_empty() {
            &[][..]
        } else {
            &args.policies[..]
        };
        for policy in policies {
            for osd in up_osds(&admin) {
                let set = ["config", "set", "osd_op_queue", policy.as_str()];
                let words: Vec<String> = set.iter().map(|w| w.to_string()).collect();
                admin
                    .tell(osd, &words)
                    .await
                    .with_context(|| format!("selecting {policy} on osd.{osd}"))?;
            }
            for (case, streams) in &cases {
                let mut objects = StreamObjects { names: Vec::new() };
                for op in &args.ops {
                    let write = op == "write";
                    if !write && objects.names.is_empty() {
                        bar.set_message(format!("{policy} {case}: writing objects to read"));
                        objects = prefill(&args, &admin, policy, case, streams).await?;
                    }
                    bar.set_message(format!("{policy} {case} {op}"));
                    let r = run_one(
                        &args,
                        &clients,
                        policy,
                        case,
                        streams,
                        write,
                        &mut objects,
                        &bar,
                    )
                    .await
                    .with_context(|| format!("{policy} {case} {op}"))?;
                    bar.inc(1);
                    runs.push(r);
                }
                bar.set_message(format!("{policy} {case}: removing its objects"));
                remove_objects(&admin, &objects).await?;
            }
        }
        let mut ior_runs = Vec::new();
        if !ior_cases.is_empty() {
            let plan = args.ior_plan();
            write_files(&admin, &plan, &ior_cases, &bar).await?;
            for (policy, toml) in &ior_policies {
                select_policy(&admin, toml, policy).await?;
                for case in &ior_cases {
                    bar.set_message(format!("{policy} {}: reading", case.name()));
                    let r = run_case(&plan, &clients, policy, case, &bar)
                        .await
                        .with_context(|| format!("{policy} {}", case.name()))?;
                    bar.inc(1);
                    ior_runs.push(r);
                }
            }
        }
        let mut tbf_rows = Vec::new();
        if tbf_runs > 0 {
            let plan = args.tbf_plan();
            let n = args.tbf_clients;
            tbf_rows = run_tbf(&plan, &admin, &clients[..n], &ids[..n], &bar).await?;
        }
        anyhow::Ok((runs, ior_runs, tbf_rows))
    });
    let (runs, ior_runs, tbf_rows) = match runs {
        Ok(r) => r,
        Err(e) => {
            bar.abandon();
            return Err(e.context(format!("the cluster's logs are in {}", dir.display())));
        }
    };
    bar.finish_and_clear();
    cluster.down()?;
    let setup = format!(
        "{} OSD processes ({}), one pool of one copy and {} PGs; each client its own cluster \
         client; each stream a dd of {} KiB blocks into objects of {} MiB; {} s measured \
         after {} s of warm-up. The seed: Lustre, 2 OSS x 4 OSTs, dd bs=1M, MB/sec.",
        args.osds,
        args.profile,
        args.pg_num,
        args.block_kib,
        args.object_mib,
        args.seconds,
        args.warmup_s
    );
    if !ior_runs.is_empty() {
        write_ior_report(&args, &ior_runs)?;
    }
    if !tbf_rows.is_empty() {
        write_tbf_report(&args, &tbf_rows)?;
    }
    if runs.is_empty() {
        println!("wrote {}", args.out_dir.display());
        return Ok(());
    }
    let table = nrs::render_markdown(&setup, &runs);
    std::fs::write(args.out_dir.join("nrs-study.md"), &table)?;
    std::fs::write(args.out_dir.join("nrs-clients.csv"), nrs::csv(&runs))?;
    for r in &runs {
        let target = r.summary().mean;
        let bars: Vec<Bar> = r
            .clients
            .iter()
            .map(|c| Bar {
                label: format!("c{}x{}", c.client, c.streams),
                value: c.mib_s,
                target,
            })
            .collect();
        let title = format!("{} {} {}: MiB/s per client", r.policy, r.case, r.op);
        bar_chart(
            &args.out_dir.join(plot_name(r)),
            &title,
            "MiB/s",
            "mean of the clients",
            &bars,
        )?;
    }
    println!("{table}");
    println!("wrote {}", args.out_dir.display());
    Ok(())
}

/// Writes `nrs-ior.md` (a row per policy and case, the seed's beside) and a plot per case of
/// each policy's total against FIFO's.
fn write_ior_report(args: &NrsStudyArgs, runs: &[IorRun]) -> anyhow::Result<()> {
    let setup = format!(
        "{} OSD processes ({}), one pool of one copy and {} PGs; each client its own cluster \
         client; each thread reads its file ({} MiB, one stripe of {} MiB objects) or its \
         {} MiB segment of a shared file striped over {} objects in {} KiB units, \
         sequentially in {} KiB transfers, {} in flight; {} s measured after {} s of warm-up. \
         ORR and TRR take reads only, as Lustre's default; TRR's target is the OSD's device. \
         The seed: Lustre, 2 OSS x 4 OSTs, 14 clients, IOR 1 MB transfers, MB/sec.",
        args.osds,
        args.profile,
        args.pg_num,
        args.ior_file_mib,
        args.object_mib,
        args.ior_file_mib,
        args.ior_stripe_count,
        args.block_kib,
        args.block_kib,
        args.ior_depth,
        args.seconds,
        args.warmup_s
    );
    let table = nrs_ior::render_markdown(&setup, runs);
    std::fs::write(args.out_dir.join("nrs-ior.md"), &table)?;
    let mut names: Vec<String> = runs.iter().map(|r| r.case.name()).collect();
    names.sort();
    names.dedup();
    for name in names {
        let of_case: Vec<&IorRun> = runs.iter().filter(|r| r.case.name() == name).collect();
        let fifo = of_case
            .iter()
            .find(|r| r.policy == "fifo")
            .map_or(0.0, |r| r.mib_s);
        let bars: Vec<Bar> = of_case
            .iter()
            .map(|r| Bar {
                label: r.policy.clone(),
                value: r.mib_s,
                target: fifo,
            })
            .collect();
        let title = format!("IOR {name} read: MiB/s per policy (line: fifo)");
        bar_chart(
            &args.out_dir.join(format!("nrs-ior-{name}.png")),
            &title,
            "MiB/s",
            "fifo",
            &bars,
        )?;
    }
    println!("{table}");
    Ok(())
}

/// Writes `nrs-tbf.md` (each group under FIFO and TBF beside the rule's limit) and a plot per
/// case.
fn write_tbf_report(args: &NrsStudyArgs, rows: &[nrs_tbf::TbfRow]) -> anyhow::Result<()> {
    let setup = format!(
        "{} OSD processes ({}), one pool of one copy and {} PGs; {} clients, each its own \
         cluster client, of {} dd streams ({} KiB blocks into objects of {} MiB); by client: \
         every client writes and a rule `client={{...}}` caps half of them; by op: half of the \
         clients write, half read, and a rule `op=write` caps the writes; each rule at {} \
         requests a second per client on each OSD (each OSD enforces it alone, so the limit is \
         the rate times the block times the OSDs); {} s measured after {} s of warm-up.",
        args.osds,
        args.profile,
        args.pg_num,
        args.tbf_clients,
        args.tbf_streams,
        args.block_kib,
        args.object_mib,
        args.tbf_rate_rps,
        args.seconds,
        args.warmup_s
    );
    let table = nrs_tbf::render_markdown(&setup, rows);
    std::fs::write(args.out_dir.join("nrs-tbf.md"), &table)?;
    for case in [nrs_tbf::TbfCase::ByClient, nrs_tbf::TbfCase::ByOp] {
        let limit = rows
            .iter()
            .find_map(|r| r.limit_mib_s.filter(|_| r.case == case))
            .unwrap_or(0.0);
        let bars: Vec<Bar> = rows
            .iter()
            .filter(|r| r.case == case)
            .map(|r| Bar {
                label: format!("{} {}", r.group, r.policy),
                value: r.mean(),
                // Only the capped group has a limit to stand against.
                target: match r.group == case.groups()[0] {
                    true => limit,
                    false => r.mean(),
                },
            })
            .collect();
        let title = format!("TBF {}: MiB/s per client, line: limit", case.name());
        bar_chart(
            &args.out_dir.join(format!("nrs-tbf-{}.png", case.name())),
            &title,
            "MiB/s",
            "limit (capped group)",
            &bars,
        )?;
    }
    println!("{table}");
    Ok(())
}
