//! `cairn osd ...`: marking OSDs out, in, down or lost, their flags and weights, the OSD
//! tree, where an object lives and per-OSD usage, through the monitor and the OSDs; `osd run`
//! (the daemon), the maintenance checks and the blocklist live in the sub-modules.

mod blocklist;
mod maintenance;
mod run;

use std::net::SocketAddr;

use cairn_clustermap::MapFlag;
use cairn_proto::mon::Request;
use clap::{Args, Subcommand};

pub use run::OsdRunArgs;

use crate::convert::sat_u32;
use crate::mon_link::{connect, current_map, mon_op, MonAddr};
use crate::osd_reports::OsdUsage;

/// `cairn osd out|in|down ID`.
#[derive(Args)]
pub struct OsdArgs {
    #[command(flatten)]
    mon: MonAddr,
    #[command(subcommand)]
    command: OsdCommand,
}

impl OsdArgs {
    /// Whether this is `cairn osd run` (a daemon).
    pub fn runs_daemon(&self) -> bool {
        matches!(self.command, OsdCommand::Run(_))
    }
}

#[derive(Subcommand)]
enum OsdCommand {
    /// Mark out: its data moves to other OSDs.
    Out {
        /// OSD id.
        id: i32,
    },
    /// Mark in.
    In {
        /// OSD id.
        id: i32,
    },
    /// Mark down.
    Down {
        /// OSD id.
        id: i32,
    },
    /// Set the override weight (Ceph's `osd reweight`): 1.0 keeps the OSD's CRUSH share, 0.8
    /// moves a fifth of its PGs to other OSDs, 0 is `out`.
    Reweight {
        /// OSD id.
        id: i32,
        /// 0.0..=1.0.
        weight: f64,
    },
    /// Set the CRUSH weight (Ceph's `osd crush reweight`): the OSD's share of the data against
    /// the others' (by convention its capacity in TiB).
    CrushReweight {
        /// OSD id.
        id: i32,
        /// 0.0..=1000.0.
        weight: f64,
    },
    /// Declare a down OSD's data lost (Ceph's `osd lost`): PGs down for want of its copy go
    /// active on what the others hold, and writes only it had are gone. It stays in the map.
    Lost {
        /// OSD id.
        id: i32,
        /// Required: the data only this OSD holds is given up.
        #[arg(long = "yes-i-really-mean-it")]
        yes: bool,
    },
    /// Remove a down OSD from the cluster for good (Ceph's `osd purge`): its PGs are placed
    /// on the others and recovered there; `cairn status` stops counting it.
    Rm {
        /// OSD id.
        id: i32,
    },
    /// Set cluster flags (Ceph's `osd set`): noout, noin, noup, nodown, norecover, nobackfill,
    /// norebalance, noscrub, nodeep-scrub, pauserd, pausewr, or pause (both pause flags).
    /// `cairn status` and `cairn health` list what is set.
    Set {
        /// The flags.
        #[arg(required = true)]
        flags: Vec<String>,
    },
    /// Keep these OSDs in while they are down (Ceph's `osd add-noout`): maintenance of one
    /// host without the cluster-wide `noout`.
    AddNoout {
        /// OSD ids.
        #[arg(required = true)]
        ids: Vec<i32>,
    },
    /// Let these OSDs be marked out again while down (Ceph's `osd rm-noout`).
    RmNoout {
        /// OSD ids.
        #[arg(required = true)]
        ids: Vec<i32>,
    },
    /// Keep these OSDs down when they boot (Ceph's `osd add-noup`): a flapping OSD stays out
    /// of its PGs' acting sets; it boots by itself once the flag is removed.
    AddNoup {
        /// OSD ids.
        #[arg(required = true)]
        ids: Vec<i32>,
    },
    /// Let these OSDs come up again (Ceph's `osd rm-noup`).
    RmNoup {
        /// OSD ids.
        #[arg(required = true)]
        ids: Vec<i32>,
    },
    /// Never mark these OSDs down on failure reports or missing beacons (Ceph's
    /// `osd add-nodown`); `osd down` still does.
    AddNodown {
        /// OSD ids.
        #[arg(required = true)]
        ids: Vec<i32>,
    },
    /// Let failure detection mark these OSDs down again (Ceph's `osd rm-nodown`).
    RmNodown {
        /// OSD ids.
        #[arg(required = true)]
        ids: Vec<i32>,
    },
    /// Keep these OSDs out when they boot after being marked out automatically (Ceph's
    /// `osd add-noin`).
    AddNoin {
        /// OSD ids.
        #[arg(required = true)]
        ids: Vec<i32>,
    },
    /// Let these OSDs be marked in again when they boot (Ceph's `osd rm-noin`).
    RmNoin {
        /// OSD ids.
        #[arg(required = true)]
        ids: Vec<i32>,
    },
    /// Unset cluster flags (Ceph's `osd unset`).
    Unset {
        /// The flags.
        #[arg(required = true)]
        flags: Vec<String>,
    },
    /// Fence client instances out of the OSDs (Ceph's `osd blocklist`), lift fences, list
    /// them.
    Blocklist {
        /// What to do.
        #[command(subcommand)]
        command: blocklist::BlocklistCommand,
    },
    /// OSDs by host with state and weights.
    Tree,
    /// Where an object lives, as Ceph's `osd map POOL OBJECT`: its hash, PG, up and acting
    /// sets; and the decimal id the OSD's scheduler and TBF rules (`object=`) know it by.
    Map {
        /// Pool name.
        pool: String,
        /// Object name.
        object: String,
    },
    /// Run an OSD daemon.
    Run(Box<OsdRunArgs>),
    /// Per-OSD usage: PGs, objects, stored and allocated bytes (asks each up OSD).
    Df,
    /// Whether these OSDs can stop (maintenance, a reboot) with every PG still serving, as
    /// Ceph's `osd ok-to-stop`: fails naming the PGs that would fall below min_size or do not
    /// serve now; says how many would go on degraded.
    OkToStop {
        /// OSD ids.
        #[arg(required = true)]
        ids: Vec<i32>,
    },
    /// Whether these OSDs can be destroyed without losing a copy, as Ceph's
    /// `osd safe-to-destroy`: no PG maps to them, every PG is active+clean and they hold no
    /// PG copy (mark them out and wait first).
    SafeToDestroy {
        /// OSD ids.
        #[arg(required = true)]
        ids: Vec<i32>,
    },
}

/// The request that sets (`on`) or clears `flag` on the OSDs `ids` alone.
fn own_flag(ids: Vec<i32>, flag: MapFlag, on: bool) -> Request {
    Request::SetOsdFlag { ids, flag, on }
}

/// `cairn osd ...`.
pub fn run(args: OsdArgs) -> anyhow::Result<()> {
    let body = match args.command {
        OsdCommand::Run(run) => return run::run(*run),
        OsdCommand::Df => return osd_df(args.mon.mon),
        OsdCommand::Blocklist { command } => return blocklist::run(args.mon.mon, command),
        OsdCommand::OkToStop { ids } => return maintenance::run_ok_to_stop(args.mon.mon, &ids),
        OsdCommand::SafeToDestroy { ids } => {
            return maintenance::run_safe_to_destroy(args.mon.mon, &ids)
        }
        OsdCommand::Out { id } => Request::MarkOut { id },
        OsdCommand::In { id } => Request::MarkIn { id },
        OsdCommand::Down { id } => Request::MarkDown { id },
        OsdCommand::Reweight { id, weight } => Request::Reweight {
            id,
            reweight: fixed_16_16(weight, 1.0, "reweight")?,
        },
        OsdCommand::CrushReweight { id, weight } => Request::CrushReweight {
            id,
            weight: fixed_16_16(
                weight,
                f64::from(cairn_proto::mon::MAX_CRUSH_WEIGHT >> 16),
                "CRUSH weight",
            )?,
        },
        OsdCommand::Rm { id } => Request::RemoveOsd { id },
        OsdCommand::Lost { id, yes } => {
            anyhow::ensure!(
                yes,
                "declaring osd.{id} lost gives up the writes only it holds: add --yes-i-really-mean-it"
            );
            Request::MarkLost { id }
        }
        OsdCommand::Tree => return osd_tree(args.mon.mon),
        OsdCommand::Map { pool, object } => return osd_map(args.mon.mon, &pool, &object),
        OsdCommand::Set { flags } => Request::SetFlags {
            flags: parse_flags(&flags)?,
            on: true,
        },
        OsdCommand::AddNoout { ids } => own_flag(ids, MapFlag::NoOut, true),
        OsdCommand::RmNoout { ids } => own_flag(ids, MapFlag::NoOut, false),
        OsdCommand::AddNoup { ids } => own_flag(ids, MapFlag::NoUp, true),
        OsdCommand::RmNoup { ids } => own_flag(ids, MapFlag::NoUp, false),
        OsdCommand::AddNodown { ids } => own_flag(ids, MapFlag::NoDown, true),
        OsdCommand::RmNodown { ids } => own_flag(ids, MapFlag::NoDown, false),
        OsdCommand::AddNoin { ids } => own_flag(ids, MapFlag::NoIn, true),
        OsdCommand::RmNoin { ids } => own_flag(ids, MapFlag::NoIn, false),
        OsdCommand::Unset { flags } => Request::SetFlags {
            flags: parse_flags(&flags)?,
            on: false,
        },
    };
    crate::runtime::command()?.block_on(async {
        let r = mon_op(args.mon.mon, body).await?;
        println!("done (epoch {})", r.epoch);
        Ok(())
    })
}

/// The cluster flags an operator's words name (`pause` names two), refused whole when one
/// word names none.
fn parse_flags(words: &[String]) -> anyhow::Result<Vec<cairn_clustermap::MapFlag>> {
    let mut flags = Vec::new();
    for word in words {
        flags.extend(cairn_clustermap::MapFlag::parse_word(word)?);
    }
    Ok(flags)
}

/// `value` in 16.16 fixed point, refused unless in `0.0..=max`.
fn fixed_16_16(value: f64, max: f64, what: &str) -> anyhow::Result<u32> {
    anyhow::ensure!(
        (0.0..=max).contains(&value),
        "{what} must be in 0..={max}, not {value}"
    );
    Ok(sat_u32((value * 65536.0).round()))
}

fn osd_map(mon: SocketAddr, pool: &str, object: &str) -> anyhow::Result<()> {
    crate::runtime::command()?.block_on(async {
        let map = current_map(mon).await?;
        let p = map
            .placement
            .pools
            .values()
            .find(|p| p.name == pool)
            .ok_or_else(|| anyhow::anyhow!("no pool named `{pool}`"))?;
        let hash = cairn_clustermap::Pool::hash_key(object, "");
        let pg = p.object_pg(object, "", "");
        let m = map.placement.mapper().map_pg(pg)?;
        let set = |osds: &[i32]| {
            let ids: Vec<String> = osds.iter().map(i32::to_string).collect();
            let primary = osds.first().map_or(-1, |o| *o);
            format!("([{}], p{primary})", ids.join(","))
        };
        println!(
            "osdmap e{} pool '{pool}' ({}) object '{object}' -> pg {}.{hash:08x} ({pg}) -> up {} acting {}",
            map.epoch,
            p.id,
            p.id,
            set(&m.up),
            set(&m.acting)
        );
        println!("scheduler object id (TBF object=): {hash}");
        Ok(())
    })
}

fn osd_tree(mon: SocketAddr) -> anyhow::Result<()> {
    crate::runtime::command()?.block_on(async {
        let map = current_map(mon).await?;
        let mut hosts: std::collections::BTreeMap<&str, Vec<&cairn_clustermap::OsdEntry>> =
            Default::default();
        for o in map.osds.values() {
            hosts.entry(&o.host).or_default().push(o);
        }
        println!(
            "{:<8} {:<16} {:<6} {:<8} {:<8} addr",
            "id", "host", "up", "weight", "reweight"
        );
        for (host, osds) in hosts {
            for o in osds {
                let weight = map.placement.crush.device_weight(o.id).unwrap_or(0);
                println!(
                    "osd.{:<4} {:<16} {:<6} {:<8.3} {:<8.3} {}",
                    o.id,
                    host,
                    match (o.up, o.lost_at.is_some()) {
                        (true, _) => "up",
                        (false, false) => "down",
                        (false, true) => "lost",
                    },
                    f64::from(weight) / 65536.0,
                    f64::from(o.reweight) / 65536.0,
                    o.addr
                );
            }
        }
        Ok(())
    })
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
