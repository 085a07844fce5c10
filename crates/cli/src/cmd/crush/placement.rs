//! `cairn crush map-object|analyze|balance|diff`: pool-level placement over a crush map.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context;
use cairn_clustermap::analysis::{analyze, Spread, Summary};
use cairn_clustermap::balance::{balance, placement_of, up_sets, BalanceOptions};
use cairn_clustermap::diff::movement;
use cairn_clustermap::shape::Topology;
use cairn_clustermap::{Exceptions, OsdMap, Pool};
use clap::Args;

use super::map_file::load_map;
use crate::plot::{bar_chart, Bar};

/// A pool laid over a crush map, as the placement commands take it.
#[derive(Args, Clone)]
pub struct PoolArgs {
    /// Crush map (crushtool text, or `crushtool --dump` JSON).
    #[arg(long)]
    pub map: PathBuf,
    /// Replicas per PG.
    #[arg(long, default_value_t = 3)]
    pub size: u32,
    /// Number of PGs.
    #[arg(long = "pg-num")]
    pub pg_num: u32,
    /// Pool id (mixed into placement by hashpspool).
    #[arg(long = "pool-id", default_value_t = 1)]
    pub pool_id: i64,
    /// Crush rule id.
    #[arg(long, default_value_t = 0)]
    pub rule: i32,
    /// Exception table to apply (pg_upmap_items / pg_upmap_primary lines, or ceph commands).
    #[arg(long)]
    pub exceptions: Option<PathBuf>,
}

impl PoolArgs {
    /// Builds the OSD map: every device up and in, one pool, optional exceptions.
    pub fn osdmap(&self) -> anyhow::Result<OsdMap> {
        osdmap_from(&self.map, self.exceptions.as_deref(), self)
    }
}

fn osdmap_from(map: &Path, exceptions: Option<&Path>, pool: &PoolArgs) -> anyhow::Result<OsdMap> {
    let crush = load_map(map)?;
    let mut osdmap = OsdMap::all_up_in(crush);
    osdmap.add_pool(Pool::replicated(
        pool.pool_id,
        "pool",
        pool.size,
        pool.pg_num,
        pool.rule,
    )?)?;
    if let Some(path) = exceptions {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        osdmap.exceptions =
            Exceptions::parse(&text).with_context(|| format!("in {}", path.display()))?;
    }
    Ok(osdmap)
}

/// Arguments of `cairn crush map-object`.
#[derive(Args)]
pub struct MapObjectArgs {
    #[command(flatten)]
    pool: PoolArgs,
    /// Object namespace.
    #[arg(long, default_value = "")]
    namespace: String,
    /// Object name.
    name: String,
}

/// Prints `object 'NAME' -> PG -> [osds]` like `osdmaptool --test-map-object`.
pub fn map_object(args: MapObjectArgs) -> anyhow::Result<()> {
    let map = args.pool.osdmap()?;
    let pool = &map.pools[&args.pool.pool_id];
    let pg = pool.object_pg(&args.name, &args.namespace, "");
    let up = map.mapper().map_pg(pg)?.up;
    let osds: Vec<String> = up.iter().map(i32::to_string).collect();
    println!(" object '{}' -> {} -> [{}]", args.name, pg, osds.join(","));
    Ok(())
}

/// Arguments of `cairn crush pg-dump`.
#[derive(Args)]
pub struct PgDumpArgs {
    #[command(flatten)]
    pool: PoolArgs,
}

/// Prints every PG as `PG<TAB>[up set]<TAB>primary`, like `osdmaptool --test-map-pgs-dump`.
pub fn pg_dump(args: PgDumpArgs) -> anyhow::Result<()> {
    use std::io::Write as _;
    let map = args.pool.osdmap()?;
    let pool = &map.pools[&args.pool.pool_id];
    let mut mapper = map.mapper();
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    for pg in pool.pgs() {
        let m = mapper.map_pg(pg)?;
        let osds: Vec<String> = m.up.iter().map(i32::to_string).collect();
        writeln!(out, "{}\t[{}]\t{}", pg, osds.join(","), m.primary)?;
    }
    Ok(())
}

/// Arguments of `cairn crush analyze`.
#[derive(Args)]
pub struct AnalyzeArgs {
    #[command(flatten)]
    pool: PoolArgs,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Write a per-OSD bar chart against targets to this PNG.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Analyze this placement instead of computing one: `osdmaptool --test-map-pgs-dump`
    /// output (`PG<TAB>[osds]<TAB>primary` per line).
    #[arg(long = "up-sets")]
    up_sets: Option<PathBuf>,
}

/// Reads `osdmaptool --test-map-pgs-dump` lines of one pool, in PG order.
fn read_up_sets(path: &Path, pool_id: i64, pg_num: u32) -> anyhow::Result<Vec<Vec<i32>>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut sets = vec![Vec::new(); pg_num as usize];
    for (i, line) in text.lines().enumerate() {
        let mut cols = line.split('\t');
        let Some(Ok(pg)) = cols.next().map(str::parse::<cairn_clustermap::PgId>) else {
            continue;
        };
        if pg.pool != pool_id || pg.seed >= pg_num {
            continue;
        }
        let list = cols
            .next()
            .and_then(|c| c.strip_prefix('[').and_then(|c| c.strip_suffix(']')))
            .with_context(|| format!("{}:{}: expected [osd,...]", path.display(), i + 1))?;
        let osds: Result<Vec<i32>, _> = list
            .split(',')
            .filter(|s| !s.is_empty())
            .map(str::parse)
            .collect();
        sets[pg.seed as usize] =
            osds.with_context(|| format!("{}:{}: bad OSD id", path.display(), i + 1))?;
    }
    Ok(sets)
}

fn summary_row(name: &str, s: &Summary) -> String {
    format!(
        "{name:<12} {:>9.2} {:>11} {:>13} {:>8.3} {:>8.2}",
        s.mean,
        format!("{}~{}", s.min, s.max),
        format!("{:.2}~{:.2}", s.norm_min, s.norm_max),
        s.stdev_norm,
        s.max_deviation
    )
}

/// Prints a spread table (seed 002's columns).
pub fn print_spread(spread: &Spread) {
    println!(
        "pg# {}  replica# {}  total pg# {}",
        spread.num_pgs, spread.size, spread.total_replicas
    );
    println!(
        "{:<12} {:>9} {:>11} {:>13} {:>8} {:>8}",
        "level", "mean", "min~max", "norm min~max", "stdev", "max dev"
    );
    println!("{}", summary_row("osd", &spread.osds));
    println!("{}", summary_row("domain", &spread.domains));
    println!("{}", summary_row("primary", &spread.primaries));
}

/// `cairn crush analyze`.
pub fn analyze_cmd(args: AnalyzeArgs) -> anyhow::Result<()> {
    let map = args.pool.osdmap()?;
    let topo = Topology::for_pool(&map, &map.pools[&args.pool.pool_id])?;
    let sets = match &args.up_sets {
        Some(path) => read_up_sets(path, args.pool.pool_id, args.pool.pg_num)?,
        None => up_sets(&map, args.pool.pool_id)?,
    };
    let spread = analyze(&sets, &topo);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&spread)?);
    } else {
        print_spread(&spread);
    }
    if let Some(path) = &args.plot {
        let bars: Vec<Bar> = spread
            .per_osd
            .iter()
            .map(|s| Bar {
                label: s.osd.to_string(),
                value: f64::from(s.count),
                target: s.target,
            })
            .collect();
        let title = format!(
            "PGs per OSD: {} PGs x {} (max deviation {:.1})",
            spread.num_pgs, spread.size, spread.osds.max_deviation
        );
        bar_chart(path, &title, "replicas", "expected (by weight)", &bars)?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

/// Arguments of `cairn crush balance`.
#[derive(Args)]
pub struct BalanceArgs {
    #[command(flatten)]
    pool: PoolArgs,
    /// The crush map before the change, for incremental rebalancing (pins unchanged data).
    #[arg(long = "previous-map")]
    previous_map: Option<PathBuf>,
    /// The exception table in force with the previous map.
    #[arg(long = "previous-exceptions")]
    previous_exceptions: Option<PathBuf>,
    /// Write the exception table here (stdout if absent).
    #[arg(long, short)]
    out: Option<PathBuf>,
    /// Also write the equivalent `ceph osd pg-upmap-items/-primary` commands to this file.
    #[arg(long)]
    ceph: Option<PathBuf>,
    /// Leave primaries alone (no pg_upmap_primary entries).
    #[arg(long = "no-primaries")]
    no_primaries: bool,
    /// Write a JSON report (spread before/after, moves, lower bound, exceptions, CPU time).
    #[arg(long)]
    report: Option<PathBuf>,
}

/// `cairn crush balance`.
pub fn balance_cmd(args: BalanceArgs) -> anyhow::Result<()> {
    let map = args.pool.osdmap()?;
    let pool_id = args.pool.pool_id;
    let previous = match &args.previous_map {
        Some(path) => {
            let old = osdmap_from(path, args.previous_exceptions.as_deref(), &args.pool)?;
            Some(placement_of(&old, pool_id)?)
        }
        None => None,
    };
    let topo = Topology::for_pool(&map, &map.pools[&pool_id])?;
    let before = analyze(&up_sets(&map, pool_id)?, &topo);
    let started = Instant::now();
    let cpu_started = cpu_time();
    let outcome = balance(
        &map,
        pool_id,
        previous.as_deref(),
        BalanceOptions {
            primaries: !args.no_primaries,
            ..BalanceOptions::default()
        },
    )?;
    let cpu = cpu_time() - cpu_started;
    let wall = started.elapsed().as_secs_f64();
    let after = analyze(&outcome.up, &topo);
    eprintln!("before:");
    print_spread_to_stderr(&before);
    eprintln!("after:");
    print_spread_to_stderr(&after);
    eprintln!(
        "moved replicas {} (lower bound {}), exceptions {} PGs ({} item pairs, {} primary), kept {} dropped {}, converged {}, cpu {:.4} s, wall {:.4} s",
        outcome.moved_replicas,
        outcome.lower_bound,
        outcome.exceptions.len(),
        outcome.exceptions.upmap_items.values().map(Vec::len).sum::<usize>(),
        outcome.exceptions.upmap_primary.len(),
        outcome.kept_exceptions,
        outcome.dropped_exceptions,
        outcome.converged,
        cpu,
        wall
    );
    if let Some(path) = &args.report {
        let report = serde_json::json!({
            "pg_num": args.pool.pg_num,
            "size": args.pool.size,
            "before": before,
            "after": after,
            "moved_replicas": outcome.moved_replicas,
            "lower_bound": outcome.lower_bound,
            "exception_pgs": outcome.exceptions.len(),
            "item_pairs": outcome.exceptions.upmap_items.values().map(Vec::len).sum::<usize>(),
            "primary_entries": outcome.exceptions.upmap_primary.len(),
            "kept_exceptions": outcome.kept_exceptions,
            "dropped_exceptions": outcome.dropped_exceptions,
            "converged": outcome.converged,
            "cpu_seconds": cpu,
            "wall_seconds": wall,
        });
        std::fs::write(path, serde_json::to_string_pretty(&report)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    let text = outcome.exceptions.to_text();
    match &args.out {
        Some(path) => {
            std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?
        }
        None => print!("{text}"),
    }
    if let Some(path) = &args.ceph {
        std::fs::write(path, outcome.exceptions.to_ceph_commands())
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

fn print_spread_to_stderr(spread: &Spread) {
    eprintln!(
        "  osd     mean {:.2} min~max {}~{} norm {:.2}~{:.2} stdev {:.3} max dev {:.2}",
        spread.osds.mean,
        spread.osds.min,
        spread.osds.max,
        spread.osds.norm_min,
        spread.osds.norm_max,
        spread.osds.stdev_norm,
        spread.osds.max_deviation
    );
    eprintln!(
        "  primary mean {:.2} min~max {}~{} max dev {:.2}",
        spread.primaries.mean,
        spread.primaries.min,
        spread.primaries.max,
        spread.primaries.max_deviation
    );
}

/// Process CPU time in seconds (user + system), for reporting planning cost.
pub fn cpu_time() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    let after_name = stat.rsplit(')').next().unwrap_or("");
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // Fields 14 (utime) and 15 (stime) of /proc/self/stat, counted from after the name.
    (ticks(11) + ticks(12)) / 100.0
}

/// Arguments of `cairn crush diff`.
#[derive(Args)]
pub struct DiffArgs {
    #[command(flatten)]
    pool: PoolArgs,
    /// The second crush map.
    #[arg(long = "map-b")]
    map_b: PathBuf,
    /// Exception table applied with the second map.
    #[arg(long = "exceptions-b")]
    exceptions_b: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// `cairn crush diff`.
pub fn diff_cmd(args: DiffArgs) -> anyhow::Result<()> {
    let a = args.pool.osdmap()?;
    let b = osdmap_from(&args.map_b, args.exceptions_b.as_deref(), &args.pool)?;
    let pool_id = args.pool.pool_id;
    let topo_b = Topology::for_pool(&b, &b.pools[&pool_id])?;
    let m = movement(
        &placement_of(&a, pool_id)?,
        &placement_of(&b, pool_id)?,
        &topo_b,
    );
    if args.json {
        println!("{}", serde_json::to_string_pretty(&m)?);
    } else {
        println!(
            "moved {} of {} replicas ({:.2}%); minimum {:.1} ({:.2}%); ratio to minimum {:.2}",
            m.moved_replicas,
            m.total_replicas,
            m.moved_fraction * 100.0,
            m.minimum_replicas,
            m.minimum_fraction * 100.0,
            m.ratio_to_minimum
        );
    }
    Ok(())
}
