//! `cairn pg dump`, `pg ls...` (PGs as their primaries report them) and `pg scrub|deep-scrub|
//! repair PGID` (asked of the PG's acting primary).

use std::net::SocketAddr;

use anyhow::{bail, Context};
use clap::Args;

use crate::defaults::DEFAULT_MON;
use crate::mon_link::{connect, up_osds};

/// `cairn pg dump`, `cairn pg ls...`, `cairn pg scrub|deep-scrub|repair PGID`.
#[derive(Args)]
pub struct PgArgs {
    /// Monitor address.
    #[arg(long, default_value = DEFAULT_MON)]
    mon: SocketAddr,
    /// `dump` (every PG as its primary reports it); `ls [STATE]` (those whose state has the
    /// words of STATE, e.g. `degraded`), `ls-by-osd N`, `ls-by-primary N`, `ls-by-pool NAME`
    /// (Ceph's); or `scrub`, `deep-scrub` (data and omap too) or `repair` (a deep scrub that
    /// makes differing copies hold what most hold) of PGID.
    #[arg(value_parser = ["dump", "ls", "ls-by-osd", "ls-by-primary", "ls-by-pool", "scrub", "deep-scrub", "repair"])]
    what: String,
    /// The PG to scrub, `POOL_ID.SEED` in hex as `pg dump` prints it (e.g. `1.1f`); the state,
    /// OSD or pool of a listing.
    pgid: Option<String>,
}

/// `cairn pg scrub|deep-scrub|repair PGID`: asks the PG's acting primary and prints its report.
fn scrub(mon: SocketAddr, what: &str, pgid: &str) -> anyhow::Result<()> {
    let id: cairn_clustermap::PgId = pgid
        .parse()
        .map_err(|e| anyhow::anyhow!("bad PG id `{pgid}`: {e}"))?;
    crate::runtime::command()?.block_on(async {
        let client = connect(mon).await?;
        let map = client.map().context("no cluster map")?;
        let Some(pool) = map.placement.pools.get(&id.pool) else {
            bail!("no pool with id {} (see `cairn pool ls`)", id.pool);
        };
        if id.seed >= pool.pg_num {
            bail!("pool {} has {} PGs: no pg {id}", pool.name, pool.pg_num);
        }
        let primary = map
            .placement
            .mapper()
            .map_pg(id)
            .ok()
            .and_then(|m| m.acting.first().copied())
            .with_context(|| format!("pg {id} has no acting primary"))?;
        let report = client
            .tell(primary, &["pg".into(), what.into(), id.to_string()])
            .await?;
        print!("{report}");
        Ok(())
    })
}

/// Every PG as its primary reports it (or those a listing selects), or a scrub of one PG by
/// its primary.
pub fn run(args: PgArgs) -> anyhow::Result<()> {
    if args.what != "dump" && !args.what.starts_with("ls") {
        let Some(pgid) = args.pgid else {
            bail!(
                "`cairn pg {}` needs a PG id (see `cairn pg dump`)",
                args.what
            );
        };
        return scrub(args.mon, &args.what, &pgid);
    }
    crate::runtime::command()?.block_on(async {
        let client = connect(args.mon).await?;
        let map = client.map().context("no cluster map")?;
        let select = crate::pg_select::PgSelect::parse(&args.what, args.pgid.as_deref(), &map)?
            .unwrap_or(crate::pg_select::PgSelect::State(None));
        println!(
            "{:<8} {:<18} {:<12} {:<12} {:<6} log",
            "pg", "state", "acting", "head", "les"
        );
        let mut rows = Vec::new();
        for osd in up_osds(&client) {
            match client.tell(osd, &["pg".into(), "dump".into()]).await {
                Ok(text) => rows.extend(text.lines().map(str::to_string)),
                Err(e) => eprintln!("osd.{osd}: {e}"),
            }
        }
        rows.retain(|r| select.keeps(r));
        rows.sort();
        for r in rows {
            let f: Vec<&str> = r.split(' ').collect();
            if f.len() >= 6 {
                let acting = f[2..f.len() - 3].join("");
                let n = f.len();
                println!(
                    "{:<8} {:<18} {:<12} {:<12} {:<6} {}",
                    f[0],
                    f[1],
                    acting,
                    f[n - 3],
                    f[n - 2],
                    f[n - 1]
                );
            }
        }
        Ok(())
    })
}
