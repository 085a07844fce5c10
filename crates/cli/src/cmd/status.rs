//! `cairn status`: health, OSDs, pools and PG spread from the monitor, then what the OSDs
//! report live, like `ceph -s`.

use anyhow::Context;
use cairn_client::Client;
use cairn_clustermap::analysis::analyze;
use cairn_clustermap::balance::up_sets;
use cairn_clustermap::shape::Topology;

use crate::mon_link::{up_osds, MonAddr};
use crate::osd_reports::{counter_pair_totals, object_copies_of, unclean, usage_of, PgStates};

/// `cairn status`: health, OSDs, pools and PG spread, like `ceph -s`.
pub fn run(args: MonAddr) -> anyhow::Result<()> {
    crate::runtime::command()?.block_on(async {
        // One connection for the map and every OSD's answers.
        let client = crate::mon_link::connect(args.mon).await?;
        let map = client.map().context("no map from the monitor")?;
        let up = map.osds.values().filter(|o| o.up).count();
        let inn = map.osds.values().filter(|o| o.reweight > 0).count();
        let rows = crate::osd_reports::pg_rows(&client).await;
        let mut states = crate::osd_reports::PgStates::new();
        for r in &rows {
            *states.entry(r.state.clone()).or_default() += 1;
        }
        // The same checks as `cairn health`, each one's summary (their detail needs usage).
        let health = crate::health::assess(&map, &rows, &Default::default());
        println!(
            "cluster {}  epoch {}  {}",
            map.fsid,
            map.epoch,
            health.level.name()
        );
        for (i, check) in health.checks.iter().enumerate() {
            let label = if i == 0 { "health:" } else { "" };
            println!("  {label:<7} {}", check.summary);
        }
        if !health.checks.is_empty() {
            println!("          (`cairn health detail` names each OSD and PG concerned)");
        }
        let flags: Vec<&str> = map.flags.iter().map(|f| f.name()).collect();
        let flags = match flags.is_empty() {
            true => String::new(),
            false => format!("; flags {}", flags.join(",")),
        };
        println!("  osd: {} total, {up} up, {inn} in{flags}", map.osds.len());
        let down: Vec<i32> = map.osds.values().filter(|o| !o.up).map(|o| o.id).collect();
        for pool in map.placement.pools.values() {
            // The spread is over the OSDs that are up: a down OSD holds no up set's copy, and
            // counting it would read as imbalance where there is only a failure.
            let mut topo = Topology::for_pool(&map.placement, pool)?;
            let excluded = down.iter().filter(|&&o| topo.eligible(o)).count();
            for &o in &down {
                topo.exclude(o);
            }
            let spread = analyze(&up_sets(&map.placement, pool.id)?, &topo);
            let not_counted = match excluded {
                0 => String::new(),
                n => format!(", {n} down OSD{} not counted", if n == 1 { "" } else { "s" }),
            };
            println!(
                "  pool {} '{}' size {} pg_num {}: PGs per up OSD {}~{} (max deviation {:.1}{not_counted})",
                pool.id,
                pool.name,
                pool.size,
                pool.pg_num,
                spread.osds.min,
                spread.osds.max,
                spread.osds.max_deviation
            );
        }
        if up > 0 {
            live_status(&client, &states).await;
        }
        Ok(())
    })
}

/// The live part of `cairn status`: PGs by state (`states`, from their primaries), usage and
/// client I/O rates over one second.
async fn live_status(client: &Client, states: &PgStates) {
    let osds = up_osds(client);
    let unclean = unclean(states);
    let pgs: Vec<String> = states.iter().map(|(s, n)| format!("{n} {s}")).collect();
    println!(
        "  pgs: {}",
        if pgs.is_empty() {
            "none reported".into()
        } else {
            pgs.join(", ")
        }
    );
    let mut usage = [0u64; 3];
    for u in usage_of(client).await.values() {
        usage[0] += u.stored;
        usage[1] += u.allocated;
        usage[2] += u.capacity;
    }
    for line in object_copies_of(client, &osds).await.lines() {
        println!("  {line}");
    }
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    println!(
        "  usage: {:.1} MiB stored, {:.1} MiB allocated of {:.1} MiB (all copies)",
        mib(usage[0]),
        mib(usage[1]),
        mib(usage[2])
    );
    let a = io_totals(client, &osds).await;
    let ra = counter_pair_totals(client, &osds, "recovery").await;
    let t0 = std::time::Instant::now();
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    let b = io_totals(client, &osds).await;
    let rb = counter_pair_totals(client, &osds, "recovery").await;
    let dt = t0.elapsed().as_secs_f64();
    let rate = |a: (u64, u64), b: (u64, u64)| {
        (
            b.0.saturating_sub(a.0) as f64 / dt,
            b.1.saturating_sub(a.1) as f64 / dt / (1u64 << 20) as f64,
        )
    };
    let (ops, mb) = rate(a, b);
    println!("  io: {ops:.0} op/s, {mb:.1} MiB/s (client ops served by primaries, last second)");
    let (objects, mb) = rate(ra, rb);
    if unclean > 0 || objects > 0.0 {
        println!(
            "  recovery: {objects:.0} objects/s, {mb:.1} MiB/s (copies brought up to date by primaries, last second)"
        );
    }
}

/// Sum of (client ops, bytes) the OSDs have served so far.
async fn io_totals(client: &Client, osds: &[i32]) -> (u64, u64) {
    counter_pair_totals(client, osds, "io").await
}
