//! `cairn ls`, `cairn tell`, `cairn pg dump`, `cairn osd df` and the live part of `cairn status`:
//! commands that ask the OSDs themselves (through the client library's admin channel) rather
//! than the monitor.

use std::net::SocketAddr;

use anyhow::{bail, Context};
use cairn_client::Client;
use clap::Args;

use crate::mon_cmd::DEFAULT_MON;

/// `cairn ls -p POOL`.
#[derive(Args)]
pub struct LsArgs {
    /// Monitor address.
    #[arg(long, default_value = DEFAULT_MON)]
    mon: SocketAddr,
    /// Pool name.
    #[arg(short = 'p', long)]
    pool: String,
}

/// `cairn tell osd.N WORDS...` or `cairn tell mon config set KEY VALUE`.
#[derive(Args)]
pub struct TellArgs {
    /// Monitor address.
    #[arg(long, default_value = DEFAULT_MON)]
    mon: SocketAddr,
    /// Target daemon, `osd.N`, or `mon` (`config set mon_allow_pool_delete true|false`).
    target: String,
    /// The command, e.g. `config set osd_op_queue wpq`, `config show`, `pg dump`, `df`.
    #[arg(required = true, num_args = 1.., trailing_var_arg = true)]
    words: Vec<String>,
}

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

/// A client of the cluster whose monitor is `mon`, holding its map.
pub(crate) async fn connect(mon: SocketAddr) -> anyhow::Result<Client> {
    Client::connect_as(
        mon,
        cairn_client::random_client_id(),
        crate::credentials::client_auth()?,
    )
    .await
    .with_context(|| format!("monitor at {mon}"))
}

/// Up OSD ids in the client's map.
pub(crate) fn up_osds(client: &Client) -> Vec<i32> {
    client
        .map()
        .map(|m| m.osds.values().filter(|o| o.up).map(|o| o.id).collect())
        .unwrap_or_default()
}

/// `cairn tell mon config set KEY VALUE`: changes a monitor option while it runs.
fn tell_mon(mon: SocketAddr, words: &[String]) -> anyhow::Result<()> {
    let [config, set, key, value] = words else {
        bail!(
            "the monitor takes `config set KEY VALUE` (got `{}`)",
            words.join(" ")
        );
    };
    if config != "config" || set != "set" {
        bail!(
            "the monitor takes `config set KEY VALUE` (got `{}`)",
            words.join(" ")
        );
    }
    crate::runtime::command()?.block_on(async {
        let request = cairn_proto::mon::Request::SetMonOption {
            key: key.clone(),
            value: value.clone(),
        };
        crate::mon_cmd::mon_op(mon, request).await?;
        println!("mon: {key} = {value}");
        Ok(())
    })
}

/// Lists every object of a pool.
pub fn ls(args: LsArgs) -> anyhow::Result<()> {
    crate::runtime::command()?.block_on(async {
        let client = connect(args.mon).await?;
        let mut names = client.list_objects(&args.pool).await?;
        names.sort();
        for n in names {
            println!("{n}");
        }
        Ok(())
    })
}

/// Sends an admin command to one OSD and prints its answer, or sets a monitor option.
pub fn tell(args: TellArgs) -> anyhow::Result<()> {
    if args.target == "mon" || args.target == "mon.*" {
        return tell_mon(args.mon, &args.words);
    }
    let Some(id) = args
        .target
        .strip_prefix("osd.")
        .and_then(|n| n.parse::<i32>().ok())
    else {
        bail!("target must be osd.N (got `{}`)", args.target);
    };
    crate::runtime::command()?.block_on(async {
        let client = connect(args.mon).await?;
        let out = client.tell(id, &args.words).await?;
        // Some answers are one bare value (`config get`): end the line either way.
        if out.ends_with('\n') {
            print!("{out}");
        } else {
            println!("{out}");
        }
        Ok(())
    })
}

/// Every PG as its primary reports it (or those a listing selects), or a scrub of one PG by
/// its primary.
pub fn pg(args: PgArgs) -> anyhow::Result<()> {
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

/// One OSD's usage as its `df` admin command reports it (`key=value` pairs).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OsdUsage {
    /// PG copies it holds, led or not (Ceph's PGS column).
    pub pgs: u64,
    /// PGs it leads.
    pub primary: u64,
    /// Client objects (PG meta and temporary objects left out).
    pub objects: u64,
    /// Logical bytes of its objects.
    pub stored: u64,
    /// Device bytes its objects use.
    pub allocated: u64,
    /// Usable bytes of its device.
    pub capacity: u64,
    /// Share of `capacity` past which it refuses writes (its `full_ratio`).
    pub full_ratio: f64,
}

impl OsdUsage {
    /// Parses a `df` reply; `None` when a field is missing or not a number.
    pub fn parse(text: &str) -> Option<OsdUsage> {
        let value = |key: &str| -> Option<&str> {
            text.split_whitespace()
                .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
        };
        let field = |key: &str| -> Option<u64> { value(key)?.parse().ok() };
        let full_ratio = value("full_ratio")?
            .parse::<f64>()
            .ok()
            .filter(|r| *r > 0.0 && *r <= 1.0)?;
        Some(OsdUsage {
            pgs: field("pgs")?,
            primary: field("primary")?,
            objects: field("objects")?,
            stored: field("stored")?,
            allocated: field("allocated")?,
            capacity: field("capacity")?,
            full_ratio,
        })
    }
}

/// Per-OSD usage, as Ceph's `ceph osd df`: every OSD of the map, those down marked so (only
/// an up OSD can say what it holds).
pub fn osd_df(mon: SocketAddr) -> anyhow::Result<()> {
    crate::runtime::command()?.block_on(async {
        let client = connect(mon).await?;
        println!(
            "{:<8} {:>6} {:>8} {:>9} {:>12} {:>12} {:>12} {:>6}",
            "osd", "pgs", "primary", "objects", "stored MiB", "alloc MiB", "size MiB", "use%"
        );
        let osds: Vec<(i32, bool)> = client
            .map()
            .map(|m| m.osds.values().map(|o| (o.id, o.up)).collect())
            .unwrap_or_default();
        for (osd, up) in osds {
            if !up {
                println!("osd.{osd:<4} down");
                continue;
            }
            let text = match client.tell(osd, &["df".into()]).await {
                Ok(t) => t,
                Err(e) => {
                    eprintln!("osd.{osd}: {e}");
                    continue;
                }
            };
            let Some(u) = OsdUsage::parse(&text) else {
                eprintln!("osd.{osd}: unreadable usage `{}`", text.trim());
                continue;
            };
            let mib = |b: u64| b as f64 / (1 << 20) as f64;
            println!(
                "osd.{osd:<4} {:>6} {:>8} {:>9} {:>12.1} {:>12.1} {:>12.1} {:>5.1}%",
                u.pgs,
                u.primary,
                u.objects,
                mib(u.stored),
                mib(u.allocated),
                mib(u.capacity),
                100.0 * u.allocated as f64 / u.capacity.max(1) as f64
            );
        }
        Ok(())
    })
}

/// PGs by state, as the up OSDs report the PGs they lead.
pub type PgStates = std::collections::BTreeMap<String, u64>;

/// Every PG the up OSDs lead, as their `pg dump` rows; an OSD that does not answer is named on
/// stderr.
pub async fn pg_rows(client: &Client) -> Vec<crate::health::PgRow> {
    let mut rows = Vec::new();
    for osd in up_osds(client) {
        match client.tell(osd, &["pg".into(), "dump".into()]).await {
            Ok(text) => rows.extend(text.lines().filter_map(crate::health::PgRow::parse)),
            Err(e) => eprintln!("osd.{osd}: {e}"),
        }
    }
    rows
}

/// The up OSDs' `df` replies, by OSD (one that does not answer is left out).
pub async fn usage_of(client: &Client) -> std::collections::BTreeMap<i32, OsdUsage> {
    let mut usage = std::collections::BTreeMap::new();
    for osd in up_osds(client) {
        let reply = client.tell(osd, &["df".into()]).await;
        if let Some(u) = reply.ok().as_deref().and_then(OsdUsage::parse) {
            usage.insert(osd, u);
        }
    }
    usage
}

/// `cairn health [detail]`: the cluster's health checks, as `ceph health [detail]`.
pub fn health(mon: SocketAddr, detail: bool) -> anyhow::Result<()> {
    crate::runtime::command()?.block_on(async {
        let client = connect(mon).await?;
        let map = client.map().context("no map from the monitor")?;
        let rows = pg_rows(&client).await;
        let usage = usage_of(&client).await;
        let health = crate::health::assess(&map, &rows, &usage);
        match detail {
            true => print!("{}", health.detail()),
            false => println!("{}", health.line()),
        }
        Ok(())
    })
}

/// Asks every up OSD for the states of the PGs it leads and sums them.
pub async fn pg_states_of(client: &Client) -> PgStates {
    let mut states = PgStates::new();
    for osd in up_osds(client) {
        if let Ok(text) = client.tell(osd, &["pg".into(), "stats".into()]).await {
            for l in text.lines() {
                if let Some((state, n)) = l.rsplit_once(' ') {
                    *states.entry(state.to_string()).or_default() += n.parse::<u64>().unwrap_or(0);
                }
            }
        }
    }
    states
}

/// PGs in `states` that are not active+clean.
pub fn unclean(states: &PgStates) -> u64 {
    states
        .iter()
        .filter(|(s, _)| s.as_str() != "active+clean")
        .map(|(_, n)| n)
        .sum()
}

/// The live part of `cairn status`: PGs by state (`states`, from their primaries), usage and
/// client I/O rates over one second.
pub async fn live_status(client: &Client, states: &PgStates) {
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
    let mut counts = ObjectCopies::default();
    for &osd in &osds {
        if let Ok(text) = client.tell(osd, &["pg".into(), "objects".into()]).await {
            counts.add_lines(&text);
        }
    }
    for line in counts.lines() {
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
            b.1.saturating_sub(a.1) as f64 / dt / 1e6,
        )
    };
    let (ops, mb) = rate(a, b);
    println!("  io: {ops:.0} op/s, {mb:.1} MB/s (client ops served by primaries, last second)");
    let (objects, mb) = rate(ra, rb);
    if unclean > 0 || objects > 0.0 {
        println!(
            "  recovery: {objects:.0} objects/s, {mb:.1} MB/s (copies brought up to date by primaries, last second)"
        );
    }
}

/// Object copies summed over the primaries' `pg objects` replies (Ceph's degraded and
/// misplaced counts in `ceph status`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ObjectCopies {
    /// Objects of the PGs.
    pub objects: u64,
    /// Copies their pools want.
    pub copies: u64,
    /// Copies missing.
    pub degraded: u64,
    /// Copies serving away from their up set.
    pub misplaced: u64,
}

impl ObjectCopies {
    /// Adds every well-formed `PGID objects copies degraded misplaced` line of `text`.
    pub fn add_lines(&mut self, text: &str) {
        for line in text.lines() {
            let n: Vec<u64> = line
                .split_whitespace()
                .skip(1)
                .filter_map(|w| w.parse().ok())
                .collect();
            if let [objects, copies, degraded, misplaced] = n[..] {
                self.objects += objects;
                self.copies += copies;
                self.degraded += degraded;
                self.misplaced += misplaced;
            }
        }
    }

    /// The status lines: the objects, then the degraded and misplaced copies as shares of
    /// the copies wanted, when there are any.
    pub fn lines(&self) -> Vec<String> {
        let share = |n: u64| 100.0 * n as f64 / self.copies.max(1) as f64;
        let mut out = vec![format!("objects: {}", self.objects)];
        if self.degraded > 0 {
            out.push(format!(
                "{}/{} objects degraded ({:.3}%)",
                self.degraded,
                self.copies,
                share(self.degraded)
            ));
        }
        if self.misplaced > 0 {
            out.push(format!(
                "{}/{} objects misplaced ({:.3}%)",
                self.misplaced,
                self.copies,
                share(self.misplaced)
            ));
        }
        out
    }
}

/// Sum of (client ops, bytes) the OSDs have served so far.
async fn io_totals(client: &Client, osds: &[i32]) -> (u64, u64) {
    counter_pair_totals(client, osds, "io").await
}

/// Sums over `osds` the two counters that the admin command `command` (`io`: client ops and
/// bytes served; `recovery`: objects and bytes recovered as primary) answers; an OSD that does
/// not answer counts nothing.
pub(crate) async fn counter_pair_totals(
    client: &Client,
    osds: &[i32],
    command: &str,
) -> (u64, u64) {
    let mut total = (0u64, 0u64);
    for &osd in osds {
        if let Ok(t) = client.tell(osd, &[command.to_string()]).await {
            let v: Vec<u64> = t
                .split_whitespace()
                .filter_map(|x| x.parse().ok())
                .collect();
            if let [a, b] = v[..] {
                total.0 += a;
                total.1 += b;
            }
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_copies_sum_the_primaries_lines_and_read_as_cephs() {
        let mut c = ObjectCopies::default();
        c.add_lines("1.0 10 30 0 0\n1.1 20 60 20 5\n");
        c.add_lines("2.0 5 10 0 10\nnot a line\n2.1 1 2 3\n");
        assert_eq!(
            c,
            ObjectCopies {
                objects: 35,
                copies: 100,
                degraded: 20,
                misplaced: 15
            }
        );
        assert_eq!(
            c.lines(),
            [
                "objects: 35",
                "20/100 objects degraded (20.000%)",
                "15/100 objects misplaced (15.000%)"
            ]
        );
        let clean = ObjectCopies {
            objects: 3,
            copies: 9,
            ..Default::default()
        };
        assert_eq!(clean.lines(), ["objects: 3"]);
    }

    /// A `df` reply is read by key, in any order; a missing or non-numeric field is refused.
    #[test]
    fn usage_replies_parse_by_key_and_refuse_gaps() {
        let u = OsdUsage::parse(
            "primary=3 pgs=32 objects=7 internal=33 stored=10 allocated=4096 capacity=1048576 full_ratio=0.9\n",
        )
        .unwrap();
        assert_eq!(
            u,
            OsdUsage {
                pgs: 32,
                primary: 3,
                objects: 7,
                stored: 10,
                allocated: 4096,
                capacity: 1048576,
                full_ratio: 0.9,
            }
        );
        for bad_ratio in ["0", "1.5", "x", "NaN"] {
            let text = format!(
                "pgs=1 primary=1 objects=1 stored=1 allocated=1 capacity=1 full_ratio={bad_ratio}"
            );
            assert_eq!(OsdUsage::parse(&text), None, "{text}");
        }
        assert_eq!(
            OsdUsage::parse("pgs=1 primary=1 objects=1 stored=1 allocated=1"),
            None
        );
        assert_eq!(
            OsdUsage::parse(
                "pgs=x primary=1 objects=1 stored=1 allocated=1 capacity=1 full_ratio=1"
            ),
            None
        );
        assert_eq!(OsdUsage::parse("32 31 97 0 0 2080374784"), None);
    }
}
