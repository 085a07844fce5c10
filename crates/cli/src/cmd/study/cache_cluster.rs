//! `cairn study cache --cluster`: seed 004 on the cluster. Block images over OSD processes
//! whose devices emulate a 7,200 rpm HDD, bare and then behind a write-back NVMe cache
//! (`cairn osd run --cache-profile`, configured as the seed's casadm), each on a fresh
//! cluster; fio through the NBD export runs the seed's Vdbench set (4 KiB random read, random
//! write, 70/30 mix; 512 KiB sequential read and write) and the report puts the cached/bare
//! ratios beside the seed's, with the caches' dirty share and cleaning sampled every second
//! from the random writes on ([`super::cache_timeline`]).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use cairn_client::Client;
use cairn_proto::mon::Request;
use cairn_rbd::nbd::Exports;
use cairn_rbd::Image;
use cairn_study::cache::{Pattern, Workload, VDBENCH_SET};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};

use super::cache_timeline::{self, CacheSample, Sampler};
use crate::local_cluster::{LocalCluster, UpSettings};
use crate::mon_link::up_osds;

/// The pool the images live in (size 2, as the seed's).
const POOL: &str = "rbd";
/// Longest wait for the pool's PGs to be clean.
const CLEAN_TIMEOUT: Duration = Duration::from_secs(300);
/// The seed's ratios (cached over bare) where it gives one: random read and write IOPS,
/// sequential read and write bandwidth.
const SEED_RATIOS: [Option<f64>; 5] = [Some(119.5), Some(86.8), None, Some(0.972), Some(0.944)];

/// Arguments of `cairn study cache --cluster`.
#[derive(Args, Clone)]
pub struct ClusterCacheArgs {
    /// Directory for cache-cluster.md and its plots (the study's `--out-dir`).
    #[arg(skip)]
    pub out_dir: PathBuf,
    /// OSD processes of each cluster.
    #[arg(long, default_value_t = 3)]
    pub osds: usize,
    /// Device file of each OSD, MiB.
    #[arg(long, default_value_t = 2048)]
    pub device_mib: u64,
    /// Cache file of each cached OSD, MiB.
    #[arg(long, default_value_t = 512)]
    pub cache_mib: u64,
    /// Device profile the caches emulate (the seed's caches were P4510s, used raw).
    #[arg(long, default_value = "nvme-p4510")]
    pub cache_profile: String,
    /// Images (each written by one fio job at queue depth 16; the seed ran 20).
    #[arg(long, default_value_t = 4)]
    pub images: usize,
    /// Size of each image, MiB (the working set is images x this).
    #[arg(long, default_value_t = 128)]
    pub image_mib: u64,
    /// Seconds measured per workload.
    #[arg(long, default_value_t = 20)]
    pub seconds: u64,
    /// PGs of the pool.
    #[arg(long, default_value_t = 32)]
    pub pg_num: u32,
    /// Seconds the cached cluster is watched after the last workload, with no client I/O:
    /// the default outlasts alru's staleness time (120 s), after which its cleaners start.
    #[arg(long, default_value_t = 150)]
    pub idle_s: u64,
}

/// One workload's figures.
#[derive(Clone, Copy, Debug, Default)]
struct Measured {
    iops: f64,
    mib_s: f64,
    p99_ms: f64,
}

/// One cluster's run: a figure per workload of [`VDBENCH_SET`] (or why it failed: the study
/// goes on and reports it), and for a cached one its caches from the random writes on.
struct SetupRun {
    results: Vec<Result<Measured, String>>,
    timeline: Vec<CacheSample>,
}

/// Runs the study.
pub fn run(args: ClusterCacheArgs) -> anyhow::Result<()> {
    let found = Command::new("sh")
        .args(["-c", "command -v fio"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        bail!("fio is missing (apt-get install fio): the study drives the images with it");
    }
    std::fs::create_dir_all(&args.out_dir)
        .with_context(|| format!("creating {}", args.out_dir.display()))?;
    // Per cluster: prefill, warm-up, the workloads, stopping; and the cached one's idle watch.
    let steps = 2 * (VDBENCH_SET.len() as u64 + 3) + 1;
    let bar = ProgressBar::new(steps);
    bar.set_style(ProgressStyle::with_template(
        "{elapsed:>4} {bar:30} {pos}/{len} {msg}",
    )?);
    let scratch = args.out_dir.join("clusters");
    let bare = run_setup(&args, false, &scratch.join("bare"), &bar)?;
    let cached = run_setup(&args, true, &scratch.join("cached"), &bar)?;
    bar.finish_and_clear();
    let table = markdown(&args, &bare, &cached);
    std::fs::write(args.out_dir.join("cache-cluster.md"), &table)?;
    plot_ratios(
        &args.out_dir.join("cache-cluster-ratios.png"),
        &bare,
        &cached,
    )?;
    cache_timeline::plot(
        &args.out_dir.join("cache-cluster-timeline.png"),
        &cached.timeline,
    )?;
    println!("{table}");
    println!("wrote {}", args.out_dir.display());
    Ok(())
}

/// One fresh cluster, bare or cached: the pool, the images and their export, a prefill, and
/// the workloads.
fn run_setup(
    args: &ClusterCacheArgs,
    cached: bool,
    dir: &Path,
    bar: &ProgressBar,
) -> anyhow::Result<SetupRun> {
    let label = if cached { "cached" } else { "bare" };
    let step = |what: &str| {
        bar.set_message(format!("{label}: {what}"));
        bar.inc(1);
    };
    bar.set_message(format!("{label}: starting {} OSDs", args.osds));
    let osd_args: Vec<String> = if cached {
        vec![
            format!("--cache-profile={}", args.cache_profile),
            format!("--cache-mib={}", args.cache_mib),
            "--cache-mode=wb".into(),
        ]
    } else {
        Vec::new()
    };
    let settings = UpSettings {
        osds: args.osds,
        device_mib: args.device_mib,
        profile: Some("hdd-7200"),
        osd_args: &osd_args,
    };
    let cluster = LocalCluster::up(&settings, dir)?;
    let rt = crate::runtime::command()?;
    let run = rt.block_on(async {
        let (client, admin) = cluster.connect().await?;
        let create = Request::CreatePool {
            name: POOL.into(),
            size: 2,
            pg_num: args.pg_num,
        };
        admin.op(create, 10_000).await?;
        super::recovery::wait_clean(&client, u64::from(args.pg_num), CLEAN_TIMEOUT).await?;
        if cached {
            configure_caches_as_the_seed(&client).await?;
        }
        let mut uris = Vec::new();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        for i in 0..args.images {
            let name = format!("vol{i}");
            Image::create(&client, POOL, &name, args.image_mib << 20, Some(22)).await?;
            uris.push(format!("nbd://{addr}/{name}"));
        }
        let writers = cairn_rbd::nbd::client_maker(cluster.mon, Some(cluster.admin()?));
        let exports = Exports::new(
            client.clone(),
            writers,
            POOL.into(),
            cairn_rbd::lock::DEFAULT_LEASE,
        );
        let server = tokio::spawn(cairn_rbd::listen::serve(
            cairn_rbd::listen::NbdListener::Tcp(listener),
            exports,
        ));
        step("prefilling the images");
        // Four 1 MiB writes in flight per image: the HDD OSDs' queues stay far below the
        // clients' 30 s op timeout.
        let prefill = ["--size=100%".to_string(), "--iodepth=4".to_string()];
        fio(&uris, "write", "1M", 0, &prefill).await?;
        if cached {
            // One pass over every image in the largest requests the seed's I/O classes cache
            // (128 KiB): the caches start the measured runs warm, as the seed's long runs were.
            step("warming the caches: reading every image once");
            fio(&uris, "read", "128k", 0, &["--size=100%".to_string()]).await?;
        } else {
            bar.inc(1);
        }
        let mut results = Vec::new();
        let mut sampler: Option<Sampler> = None;
        for w in VDBENCH_SET {
            step(w.name);
            match &sampler {
                Some(s) => s.enter(w.name),
                None if cached && matches!(w.pattern, Pattern::RandWrite) => {
                    sampler = Some(Sampler::start(client.clone(), w.name));
                }
                None => {}
            }
            let measured = run_workload(&w, &uris, args.seconds).await;
            if let Err(e) = &measured {
                bar.println(format!("{label}: {} failed: {e:#}", w.name));
            }
            results.push(measured.map_err(|e| format!("{e:#}")));
        }
        let timeline = match sampler {
            Some(s) => {
                // The cleaners' work once the clients stop.
                step("idle: the caches' cleaning");
                s.enter("idle");
                tokio::time::sleep(Duration::from_secs(args.idle_s)).await;
                s.finish().await?
            }
            None => Vec::new(),
        };
        server.abort();
        Ok::<_, anyhow::Error>(SetupRun { results, timeline })
    });
    drop(rt);
    step("stopping the cluster");
    match run {
        Ok(run) => {
            cluster.down()?;
            Ok(run)
        }
        Err(e) => {
            drop(cluster);
            Err(e.context(format!(
                "the {label} cluster's logs are kept in {}",
                dir.display()
            )))
        }
    }
}

/// Each cached OSD's cache as the seed set its casadm up, but for the sequential cut-off:
/// only requests of at most 128 KiB cached (its I/O class file), alru cleaning with a 1 s
/// activity threshold. The seed cut off every stream past 16 KiB; on cairn's store that
/// would send its log, one strictly sequential stream of small synchronous writes, to the
/// HDD, so the caches keep the default cut-off (`full`: only while the cache has no free
/// line).
async fn configure_caches_as_the_seed(client: &Client) -> anyhow::Result<()> {
    let commands: [&[&str]; 2] = [
        &["set-param", "cleaning-alru", "activity-threshold=1000"],
        &["load-ioclass", cairn_study::cache::SEED_IOCLASS_CSV],
    ];
    for osd in up_osds(client) {
        for words in commands {
            let words: Vec<String> = std::iter::once("cache")
                .chain(words.iter().copied())
                .map(str::to_string)
                .collect();
            client
                .tell(osd, &words)
                .await
                .map_err(|e| anyhow!("osd.{osd}: {}: {e}", words.join(" ")))?;
        }
    }
    Ok(())
}

/// Runs workload `w` on every image at once for `seconds`.
async fn run_workload(w: &Workload, uris: &[String], seconds: u64) -> anyhow::Result<Measured> {
    let bs = format!("{}k", w.io_bytes / 1024);
    let (rw, extra): (&str, Vec<String>) = match w.pattern {
        Pattern::RandRead => ("randread", vec![]),
        Pattern::RandWrite => ("randwrite", vec![]),
        Pattern::Mix { read_pct } => ("randrw", vec![format!("--rwmixread={read_pct}")]),
        Pattern::SeqRead => ("read", vec![]),
        Pattern::SeqWrite => ("write", vec![]),
    };
    fio(uris, rw, &bs, seconds, &extra).await
}

/// fio with one job per image (NBD engine, queue depth 16), time-based for `seconds` (0:
/// once over the images), its summary parsed from JSON.
async fn fio(
    uris: &[String],
    rw: &str,
    bs: &str,
    seconds: u64,
    extra: &[String],
) -> anyhow::Result<Measured> {
    let mut cmd = tokio::process::Command::new("fio");
    cmd.args([
        "--ioengine=nbd",
        &format!("--rw={rw}"),
        &format!("--bs={bs}"),
        "--iodepth=16",
        "--direct=1",
        "--group_reporting",
        "--output-format=json",
    ]);
    if seconds > 0 {
        cmd.args(["--time_based", &format!("--runtime={seconds}")]);
    }
    cmd.args(extra);
    for (i, uri) in uris.iter().enumerate() {
        cmd.args([format!("--name=vol{i}"), format!("--uri={uri}")]);
    }
    let out = cmd.output().await.context("running fio")?;
    if !out.status.success() {
        bail!(
            "fio {rw} {bs} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    parse_fio(&out.stdout)
}

/// The group's IOPS, MiB/s and p99 completion latency (reads and writes together; the
/// slower p99) from fio's JSON output.
fn parse_fio(json: &[u8]) -> anyhow::Result<Measured> {
    // fio may print notes before its JSON.
    let start = json
        .iter()
        .position(|&b| b == b'{')
        .ok_or_else(|| anyhow!("no JSON in fio's output"))?;
    let v: serde_json::Value = serde_json::from_slice(&json[start..])?;
    let job = v["jobs"]
        .get(0)
        .ok_or_else(|| anyhow!("fio's JSON has no job"))?;
    let mut m = Measured::default();
    for side in ["read", "write"] {
        let s = &job[side];
        m.iops += s["iops"].as_f64().unwrap_or(0.0);
        m.mib_s += s["bw_bytes"].as_f64().unwrap_or(0.0) / (1 << 20) as f64;
        let p99 = s["clat_ns"]["percentile"]["99.000000"]
            .as_f64()
            .unwrap_or(0.0);
        m.p99_ms = m.p99_ms.max(p99 / 1e6);
    }
    Ok(m)
}

/// The report: each workload bare and cached, their ratio, the seed's.
fn markdown(args: &ClusterCacheArgs, bare: &SetupRun, cached: &SetupRun) -> String {
    let mut out = format!(
        "# Seed 004 on the cluster\n\n{} OSD processes per cluster (device `hdd-7200`, {} MiB; \
         cached: `{}` cache of {} MiB, write-back, the seed's I/O classes (requests of \
         at most 128 KiB cached) and alru cleaning with a 1 s activity threshold, warmed by one \
         128 KiB read pass over the images), pool size 2, {} images of {} MiB through the NBD \
         export, one fio job each at queue depth 16, {} s per workload.\n\n\
         | workload | bare IOPS | bare MiB/s | bare p99 ms | cached IOPS | cached MiB/s | cached p99 ms | cached / bare | seed |\n\
         |---|---|---|---|---|---|---|---|---|\n",
        args.osds,
        args.device_mib,
        args.cache_profile,
        args.cache_mib,
        args.images,
        args.image_mib,
        args.seconds
    );
    let figures = |m: &Result<Measured, String>| match m {
        Ok(m) => format!("{:.0} | {:.1} | {:.1}", m.iops, m.mib_s, m.p99_ms),
        Err(_) => "failed | - | -".to_string(),
    };
    let mut failures = String::new();
    for (i, w) in VDBENCH_SET.iter().enumerate() {
        let (b, c) = (&bare.results[i], &cached.results[i]);
        let ratio = match (b, c) {
            (Ok(b), Ok(c)) => format!("x{:.2}", ratio_of(w, b, c)),
            _ => "-".to_string(),
        };
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} |\n",
            w.name,
            figures(b),
            figures(c),
            ratio,
            w.seed_figure
        ));
        for (setup, m) in [("bare", b), ("cached", c)] {
            if let Err(e) = m {
                failures.push_str(&format!("- {setup}, {}: {e}\n", w.name));
            }
        }
    }
    if !failures.is_empty() {
        out.push_str(&format!("\nFailed workloads:\n\n{failures}"));
    }
    let spans = cache_timeline::by_workload(&cached.timeline);
    if !spans.is_empty() {
        out.push_str(
            "\nThe cached OSDs' caches from the random writes on (sampled every second; `idle`: \
             after the last workload, no client I/O):\n\n\
             | workload | seconds | dirty at its start | dirty at its end | written back, MiB | MiB/s |\n\
             |---|---:|---:|---:|---:|---:|\n",
        );
        for s in spans {
            out.push_str(&format!(
                "| {} | {:.0} | {:.1}% | {:.1}% | {:.1} | {:.2} |\n",
                s.workload,
                s.seconds,
                s.dirty_first_pct,
                s.dirty_last_pct,
                s.cleaned_mib,
                s.cleaned_mib / s.seconds.max(1e-3)
            ));
        }
    }
    out
}

/// Cached over bare: IOPS for 4 KiB work, bandwidth for sequential.
fn ratio_of(w: &Workload, bare: &Measured, cached: &Measured) -> f64 {
    let (b, c) = match w.pattern {
        Pattern::SeqRead | Pattern::SeqWrite => (bare.mib_s, cached.mib_s),
        _ => (bare.iops, cached.iops),
    };
    if b > 0.0 {
        c / b
    } else {
        0.0
    }
}

/// Bars of cached/bare per workload, the seed's ratio as each bar's target.
fn plot_ratios(path: &Path, bare: &SetupRun, cached: &SetupRun) -> anyhow::Result<()> {
    let bars: Vec<crate::plot::Bar> = VDBENCH_SET
        .iter()
        .enumerate()
        .map(|(i, w)| crate::plot::Bar {
            label: w.name.to_string(),
            value: match (&bare.results[i], &cached.results[i]) {
                (Ok(b), Ok(c)) => ratio_of(w, b, c),
                _ => 0.0,
            },
            target: SEED_RATIOS[i].unwrap_or(0.0),
        })
        .collect();
    crate::plot::bar_chart(
        path,
        "Cached over bare HDD OSDs (ticks: seed 004)",
        "ratio",
        "seed 004",
        &bars,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fio_json_is_read() {
        let json = br#"note: something
{"jobs":[{"read":{"iops":100.5,"bw_bytes":1048576,"clat_ns":{"percentile":{"99.000000":2000000}}},
"write":{"iops":50.0,"bw_bytes":0,"clat_ns":{"percentile":{"99.000000":5000000}}}}]}"#;
        let m = parse_fio(json).unwrap();
        assert_eq!(m.iops, 150.5);
        assert_eq!(m.mib_s, 1.0);
        assert_eq!(m.p99_ms, 5.0);
        assert!(parse_fio(b"nothing").is_err());
        assert!(parse_fio(br#"{"jobs":[]}"#).is_err());
    }

    #[test]
    fn a_failed_workload_is_reported_and_the_others_keep_their_ratios() {
        let ok = |iops: f64| {
            Ok(Measured {
                iops,
                mib_s: iops / 256.0,
                p99_ms: 10.0,
            })
        };
        let n = VDBENCH_SET.len();
        let bare = SetupRun {
            results: (0..n).map(|_| ok(100.0)).collect(),
            timeline: Vec::new(),
        };
        let mut cached = SetupRun {
            results: (0..n).map(|_| ok(300.0)).collect(),
            timeline: vec![
                sample(1.0, "4K random write", 1.0, 0.0),
                sample(15.0, "4K random write", 7.5, 0.0),
                sample(16.0, "idle", 7.0, 4.0),
            ],
        };
        cached.results[n - 1] = Err("fio write 512k failed: EIO".into());
        let args = ClusterCacheArgs {
            out_dir: PathBuf::new(),
            osds: 3,
            device_mib: 2048,
            cache_mib: 512,
            cache_profile: "nvme-p4510".into(),
            images: 4,
            image_mib: 64,
            seconds: 15,
            pg_num: 32,
            idle_s: 150,
        };
        let text = markdown(&args, &bare, &cached);
        assert_eq!(text.matches("| x3.00 |").count(), n - 1, "{text}");
        assert!(text.contains("| failed | - | - | - |"), "{text}");
        assert!(text.contains("`nvme-p4510` cache of 512 MiB"), "{text}");
        assert!(
            text.contains("- cached, 512K sequential write: fio write 512k failed: EIO"),
            "{text}"
        );
        assert!(
            text.contains("| 4K random write | 15 | 1.0% | 7.5% | 0.0 | 0.00 |"),
            "{text}"
        );
        assert!(
            text.contains("| idle | 1 | 7.0% | 7.0% | 4.0 | 4.00 |"),
            "{text}"
        );
    }

    fn sample(t_s: f64, workload: &str, dirty_pct: f64, cleaning_mib_s: f64) -> CacheSample {
        CacheSample {
            t_s,
            workload: workload.into(),
            dirty_pct,
            cleaning_mib_s,
        }
    }
}
