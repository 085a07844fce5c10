//! The driver of a run: steps the simulation, starts and ends each fault of the schedule on
//! time (power cuts armed inside an OSD's disk operations, EIO applied by the OSD host's own
//! task), ends them all at the close of the window, and tells the client host when.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use cairn_proto::mon::Request;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::disk::SimDisk;
use crate::faults::{Fault, Timed};
use crate::world::{Board, Options, BASE_LATENCY, MAX_LATENCY};

/// Steps the simulation until the client is done, starting and ending faults on time and
/// ending them all once the window and the longest fault have passed.
pub(crate) fn drive(
    sim: &mut turmoil::Sim<'_>,
    world: &World<'_>,
    faults: &[Timed],
    opts: &Options,
) -> Result<(), String> {
    let board = world.board;
    let mut started = vec![false; faults.len()];
    let mut ended = vec![false; faults.len()];
    let mut downs = Downs::default();
    let heal_at = heal_at(faults, opts);
    loop {
        let done = sim.step().map_err(|e| e.to_string())?;
        if done {
            return Ok(());
        }
        let Some(ready) = board.borrow().ready else {
            continue;
        };
        let t = sim.elapsed().saturating_sub(ready);
        downs.cut_due(sim, world, t);
        for (i, f) in faults.iter().enumerate() {
            if !started[i] && t >= f.at && t < heal_at {
                started[i] = true;
                if start(sim, world, (i, t), &f.fault, &mut downs) {
                    tracing::info!(fault = %f, "fault starts");
                } else {
                    ended[i] = true;
                }
            }
            if started[i] && !ended[i] && (t >= f.at + f.lasts || t >= heal_at) {
                ended[i] = true;
                end(sim, world, &f.fault, &mut downs);
                tracing::info!(fault = %f, "fault ends");
            }
        }
        if t >= heal_at && !board.borrow().healed {
            board.borrow_mut().healed = true;
        }
    }
}

/// When, after the cluster first served a write, every fault has ended and the cluster is
/// left to heal.
fn heal_at(faults: &[Timed], opts: &Options) -> Duration {
    let latest = opts.window + opts.longest;
    match opts.heal_after_last_fault {
        true => faults
            .iter()
            .map(|f| f.at + f.lasts)
            .max()
            .unwrap_or_default()
            .min(latest),
        false => latest,
    }
}

/// Most mutating disk operations an OSD does between a power-loss fault's start and the cut.
const MAX_OPS_BEFORE_CUT: u64 = 8;
/// Longest an armed power cut waits for the OSD's disk operations: an idle OSD loses power
/// this long after the fault starts.
const CUT_WITHIN: Duration = Duration::from_secs(2);

/// OSD hosts that are down or going down.
#[derive(Default)]
struct Downs {
    /// Crashed or losing power, until their fault ends.
    crashed: Vec<String>,
    /// Armed to lose power, each with when its cut happens at the latest.
    cutting: Vec<(String, Duration)>,
}

impl Downs {
    /// Crashes every host whose armed cut has happened or is due at `t`, cutting the power of
    /// those still on.
    fn cut_due(&mut self, sim: &mut turmoil::Sim<'_>, world: &World<'_>, t: Duration) {
        let due: Vec<String> = self
            .cutting
            .iter()
            .filter(|(h, by)| t >= *by || world.disk(h).is_none_or(|d| d.power_is_off()))
            .map(|(h, _)| h.clone())
            .collect();
        for h in due {
            self.cut_now(sim, world, &h);
        }
    }

    /// Cuts `h`'s power now if it is armed to lose it, and crashes its process.
    fn cut_now(&mut self, sim: &mut turmoil::Sim<'_>, world: &World<'_>, h: &str) {
        let before = self.cutting.len();
        self.cutting.retain(|(c, _)| c != h);
        if self.cutting.len() == before {
            return;
        }
        if let Some(disk) = world.disk(h) {
            disk.cut_power(world.seed);
        }
        sim.crash(h);
        tracing::info!(host = h, "power cut");
    }
}

/// What the driver reaches besides the simulation: the hosts by name, the OSDs' disks (by
/// OSD index) and the monitor's, the run's seed.
pub(crate) struct World<'a> {
    pub(crate) hosts: &'a [String],
    pub(crate) disks: &'a [Arc<SimDisk>],
    pub(crate) mon_disk: &'a Arc<SimDisk>,
    pub(crate) board: &'a Rc<RefCell<Board>>,
    pub(crate) seed: u64,
}

impl World<'_> {
    /// The disks of host `name`: an OSD's, or the monitor's.
    fn disk(&self, name: &str) -> Option<&Arc<SimDisk>> {
        if name == "mon" {
            return Some(self.mon_disk);
        }
        self.disks.get(usize::try_from(osd_id(name)?).ok()?)
    }
}

/// Starts fault number `n`, `fault`, at `t`; false when it cannot start (its host is already
/// down).
fn start(
    sim: &mut turmoil::Sim<'_>,
    world: &World<'_>,
    (n, t): (usize, Duration),
    fault: &Fault,
    downs: &mut Downs,
) -> bool {
    let hosts = world.hosts;
    match fault {
        Fault::Partition(a, b) => sim.partition(a.as_str(), b.as_str()),
        Fault::Hold(a, b) => sim.hold(a.as_str(), b.as_str()),
        Fault::Crash(h) => {
            if downs.crashed.contains(h) {
                return false;
            }
            downs.crashed.push(h.clone());
            if let Some(disk) = world.disk(h) {
                disk.end_process();
            }
            sim.crash(h.as_str());
        }
        Fault::PowerLoss(h) => {
            if downs.crashed.contains(h) {
                return false;
            }
            let Some(disk) = world.disk(h) else {
                return false;
            };
            let mut rng = ChaCha8Rng::seed_from_u64(world.seed ^ (n as u64).rotate_left(32));
            downs.crashed.push(h.clone());
            disk.arm_cut(rng.random_range(0..MAX_OPS_BEFORE_CUT), rng.random());
            downs.cutting.push((h.clone(), t + CUT_WITHIN));
        }
        Fault::Eio(h) => {
            if downs.crashed.contains(h) {
                return false;
            }
            let Some(disk) = world.disk(h) else {
                return false;
            };
            downs.crashed.push(h.clone());
            disk.fail_writes();
        }
        Fault::Slow(h, d) => {
            for other in others(hosts, h) {
                sim.set_link_latency(h.as_str(), other.as_str(), *d);
            }
        }
        Fault::Freeze(h) => {
            for other in others(hosts, h) {
                sim.hold(h.as_str(), other.as_str());
            }
        }
        Fault::Out(h) => {
            let Some(id) = osd_id(h) else { return false };
            world
                .board
                .borrow_mut()
                .orders
                .push_back(Request::MarkOut { id });
        }
    }
    true
}

/// Ends `fault`.
fn end(sim: &mut turmoil::Sim<'_>, world: &World<'_>, fault: &Fault, downs: &mut Downs) {
    let hosts = world.hosts;
    match fault {
        Fault::Partition(a, b) => sim.repair(a.as_str(), b.as_str()),
        Fault::Hold(a, b) => sim.release(a.as_str(), b.as_str()),
        Fault::Crash(h) | Fault::PowerLoss(h) => {
            downs.cut_now(sim, world, h);
            downs.crashed.retain(|c| c != h);
            sim.bounce(h.as_str());
        }
        Fault::Eio(h) => {
            let disk = world.disk(h);
            if let Some(disk) = disk {
                disk.end_process();
            }
            sim.crash(h.as_str());
            if let Some(disk) = disk {
                disk.replace_failing();
            }
            downs.crashed.retain(|c| c != h);
            sim.bounce(h.as_str());
        }
        Fault::Slow(h, _) => {
            for other in others(hosts, h) {
                sim.set_link_latency(h.as_str(), other.as_str(), BASE_LATENCY);
                sim.set_link_max_message_latency(h.as_str(), other.as_str(), MAX_LATENCY);
            }
        }
        Fault::Freeze(h) => {
            for other in others(hosts, h) {
                sim.release(h.as_str(), other.as_str());
            }
        }
        Fault::Out(h) => {
            if let Some(id) = osd_id(h) {
                world
                    .board
                    .borrow_mut()
                    .orders
                    .push_back(Request::MarkIn { id });
            }
        }
    }
}

/// The OSD id of host `name` (`osdN` boots as osd.N).
fn osd_id(name: &str) -> Option<i32> {
    name.strip_prefix("osd")?.parse().ok()
}

/// Every host of the run but `h`, by name.
fn others<'a>(hosts: &'a [String], h: &'a str) -> impl Iterator<Item = &'a String> + 'a {
    hosts.iter().filter(move |o| o.as_str() != h)
}
