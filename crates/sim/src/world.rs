//! One simulated run: a monitor, OSDs and a client — the real daemons and client library —
//! as hosts of a `turmoil` simulation (one thread, simulated time, an in-memory network), a
//! workload of checksummed writes while a seeded fault schedule plays, then, once every fault
//! has ended, the invariants: every PG active+clean, every object as the client's ledger says
//! it may be, the client's map epochs never going back.

use std::cell::RefCell;
use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use cairn_convert::millis;
use cairn_mon::daemon::{MonDaemon, MonServing};
use cairn_mon::store::MapStore;
use cairn_mon::MonConfig;
use cairn_osd::{OsdConfig, OsdDaemon};
use cairn_proto::mon::Request;
use cairn_store::{StoreConfig, StoreError};

use crate::client::client_run;
use crate::disk::SimDisk;
use crate::driver::{drive, World};
use crate::faults::{schedule, Shape, Timed};
use crate::ledger::{Ledger, Mismatch};

/// The monitor's port.
const MON_PORT: u16 = 6789;
/// Every OSD's port.
const OSD_PORT: u16 = 6800;
/// Size of the monitor's simulated block device (its map store holds a few hundred epochs).
const MON_DEVICE_BYTES: u64 = 32 << 20;
/// The pool the workload writes.
pub(crate) const POOL: &str = "data";
/// Longest the cluster may take to come up and serve its first write.
pub(crate) const SETUP_LIMIT: Duration = Duration::from_secs(120);
/// The least a message takes on a link without a fault: a LAN's.
pub(crate) const BASE_LATENCY: Duration = Duration::from_micros(100);
/// The longest a message takes on a link without a fault: latencies spread between the two
/// (exponentially, turmoil's curve), so messages of different connections overtake each other.
pub(crate) const MAX_LATENCY: Duration = Duration::from_millis(3);
/// Largest object the workload writes.
pub(crate) const MAX_OBJECT_BYTES: usize = 16 << 10;

/// What one run does.
#[derive(Clone, Debug)]
pub struct Options {
    /// OSDs (one host each; the pool keeps three copies, so at least 3).
    pub osds: usize,
    /// PGs of the pool.
    pub pg_num: u32,
    /// Distinct objects the workload writes (over and over).
    pub objects: usize,
    /// Writes the workload issues, spread over the fault window.
    pub writes: usize,
    /// Writers issuing them side by side, each on its own objects, one write at a time.
    pub writers: usize,
    /// Faults in the schedule.
    pub faults: usize,
    /// Faults start within this window after the cluster first serves a write.
    pub window: Duration,
    /// Longest a fault lasts.
    pub longest: Duration,
    /// Longest the cluster may take, once every fault has ended, to be active+clean.
    pub settle: Duration,
    /// Bytes of each OSD's device.
    pub device_bytes: u64,
    /// The OSDs' `remap_min_objects`: a PG recovering at least this many objects on a copy is
    /// filled while a temporary acting set serves it.
    pub remap_min_objects: usize,
    /// How often OSDs ping each other.
    pub heartbeat_interval: Duration,
    /// How long an OSD must be silent before its peers report it and the monitor marks it
    /// down: far shorter than Ceph's 20 s, so that many faults of a run's window outlast it
    /// and the cluster goes on without the faulty OSD, then recovers it.
    pub heartbeat_grace: Duration,
    /// The simulation's step: every host runs up to each tick, then messages sent meanwhile
    /// move on. Messages take 0.1-3 ms, so a tick of 1 ms lets those of different
    /// connections overtake each other most; each tick costs the same whether any host has
    /// work or not.
    pub tick: Duration,
    /// Whether the cluster is healed (the client's checks start) as soon as the last fault
    /// of the schedule ends, rather than at the end of the window plus the longest fault.
    pub heal_after_last_fault: bool,
    /// How long the client's writes (and reads back) wait, resends included, before the
    /// client gives up on them: a write given up on may still apply, which the ledger allows.
    pub op_timeout: Duration,
    /// Whether a run that held drops its hosts (their runtimes, stores and KVs) before it
    /// returns. A process that runs one seed and exits leaves them to the exit instead.
    pub tear_down: bool,
}

/// The compact shape every seed of a batch runs: its faults start within 10 s and last up
/// to 7 s, against a heartbeat grace of 1.2 s, so that about five faults in six outlast the
/// grace while a run simulates about a third of [`Options::wide`]'s time; the client gives
/// up on an operation after 6 s, so writes caught behind a fault still end unacknowledged.
/// The simulation steps every host at each tick (2 ms here) whether it has work or not, so
/// a run costs about its simulated time.
impl Default for Options {
    fn default() -> Self {
        Options {
            window: Duration::from_secs(10),
            longest: Duration::from_secs(7),
            heartbeat_interval: Duration::from_millis(200),
            heartbeat_grace: Duration::from_millis(1200),
            heal_after_last_fault: true,
            tick: Duration::from_millis(2),
            op_timeout: Duration::from_secs(6),
            ..Options::wide()
        }
    }
}

impl Options {
    /// The wide shape: faults within 30 s lasting up to 20 s, heartbeats every 500 ms with a
    /// 3 s grace: fewer faults overlap and a stuck request meets its client's 30 s give-up
    /// within the window. The schedules the simulation once found breaking the cluster were
    /// found (and replay) with this shape.
    pub fn wide() -> Options {
        Options {
            osds: 4,
            pg_num: 8,
            objects: 24,
            writes: 240,
            writers: 4,
            faults: 4,
            window: Duration::from_secs(30),
            longest: Duration::from_secs(20),
            settle: Duration::from_secs(120),
            device_bytes: 64 << 20,
            remap_min_objects: 2,
            heartbeat_interval: Duration::from_millis(500),
            heartbeat_grace: Duration::from_secs(3),
            tick: Duration::from_millis(1),
            heal_after_last_fault: false,
            op_timeout: Duration::from_secs(30),
            tear_down: true,
        }
    }
}

/// What a run that held every invariant did.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// Its seed.
    pub seed: u64,
    /// The faults it played.
    pub schedule: Vec<Timed>,
    /// Writes acknowledged.
    pub acked: usize,
    /// Writes whose outcome the client did not learn.
    pub uncertain: usize,
    /// Simulated time, from the first host's start to the last check.
    pub simulated: Duration,
    /// Device writes not yet flushed when an OSD lost power, over the run's power losses.
    pub unflushed_at_cuts: u64,
    /// Reads back that failed once the cluster was clean (a daemon still cut off behind a
    /// connection that lost its state) and succeeded when tried again.
    pub reads_retried: usize,
    /// A hash of every write's outcome in the order the client learnt it, with the simulated
    /// time it did: a run replays exactly when this and `simulated` come out the same.
    pub trace: u64,
}

/// An invariant a run broke.
#[derive(Clone, Debug, thiserror::Error)]
pub enum Violation {
    /// An object does not hold what the ledger allows.
    #[error("object {} holds {:?}, acknowledged {:?}, unacknowledged since {:?}", .0.object, .0.found, .0.acked, .0.uncertain)]
    Lost(Mismatch),
    /// An object could not be read back within the settle time once the cluster was clean.
    #[error("reading {object} back failed until the settle time ran out: {error}")]
    Unreadable {
        /// The object.
        object: String,
        /// The client's error.
        error: String,
    },
    /// The PGs were not all active+clean within the settle time after the last fault.
    #[error("not active+clean {settle:?} after the faults ended: {states}")]
    NotClean {
        /// The settle time.
        settle: Duration,
        /// The PG states last seen, counted.
        states: String,
    },
    /// The client saw a map epoch older than one it had seen.
    #[error("the client's map went back from epoch {was} to {now}")]
    EpochWentBack {
        /// The newest epoch seen before.
        was: u64,
        /// The one seen after it.
        now: u64,
    },
    /// The cluster never served its first write.
    #[error("the cluster did not come up: {0}")]
    NoStart(String),
    /// The simulation itself failed (a host's software returned an error or panicked, or
    /// the simulated time ran out).
    #[error("simulation: {0}")]
    Sim(String),
}

/// A run that broke an invariant, with what replays it.
#[derive(Debug)]
pub struct Failure {
    /// The seed that replays it (`CAIRN_SIM_SEED`).
    pub seed: u64,
    /// The faults it played.
    pub schedule: Vec<Timed>,
    /// What broke.
    pub violation: Violation,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "seed {}: {}", self.seed, self.violation)?;
        for t in &self.schedule {
            writeln!(f, "  {t}")?;
        }
        // A run of the OSD's planted bugs replays with them.
        let features = match cfg!(feature = "planted-bugs") {
            true => " --features planted-bugs",
            false => "",
        };
        write!(
            f,
            "replay: CAIRN_SIM_SEED={} cargo test -p cairn-sim{features} --test seeds",
            self.seed
        )
    }
}

/// What the client host and the driver share (one thread: the simulation's).
#[derive(Default)]
pub(crate) struct Board {
    /// Simulated time at which the cluster first served a write.
    pub(crate) ready: Option<Duration>,
    /// Set by the driver once every fault has ended.
    pub(crate) healed: bool,
    /// What the client found broken.
    pub(crate) violation: Option<Violation>,
    /// The client's ledger, for the outcome.
    pub(crate) ledger: Ledger,
    /// Operator requests the driver asks the client host to send to the monitor.
    pub(crate) orders: std::collections::VecDeque<Request>,
    /// Reads back that failed once the cluster was clean and were tried again.
    pub(crate) reads_retried: usize,
}

/// The store configuration of a simulated OSD: a small log ring and caches, so that a
/// simulated disk stays small, and checkpoints inline.
fn store_config() -> StoreConfig {
    StoreConfig {
        wal_bytes: 4 << 20,
        kv_cache_bytes: 1 << 20,
        deferred_batch_bytes: 64 << 10,
        // No thread beside the simulation's: its timing would make runs differ.
        checkpoint_in_background: false,
        ..StoreConfig::default()
    }
}

pub(crate) fn mon_addr() -> SocketAddr {
    SocketAddr::new(turmoil::lookup("mon"), MON_PORT)
}

fn osd_name(i: usize) -> String {
    format!("osd{i}")
}

/// The hosts of a run with `opts` and what a schedule of `faults` faults may hold.
fn shape(opts: &Options, faults: usize) -> Shape {
    Shape {
        osds: (0..opts.osds).map(osd_name).collect(),
        others: vec!["mon".into(), "client".into()],
        monitor: Some("mon".into()),
        window: opts.window,
        faults,
        longest: opts.longest,
    }
}

/// Runs seed `seed` with `opts`; Ok when every invariant held.
pub fn run(seed: u64, opts: &Options) -> Result<Outcome, Failure> {
    run_schedule(seed, opts, schedule(seed, &shape(opts, opts.faults)))
}

/// Runs `faults` (each within the window and the longest fault of `opts`, on hosts the run
/// has) with the workload and network randomness of `seed`: a schedule written out by hand,
/// as a regression test keeps one a seed once found.
pub fn run_schedule(seed: u64, opts: &Options, faults: Vec<Timed>) -> Result<Outcome, Failure> {
    // A thread of its own, its randomness and wall clock drawn from the seed.
    std::thread::scope(|scope| {
        let run = std::thread::Builder::new()
            .name(format!("sim-{seed}"))
            .spawn_scoped(scope, || {
                crate::entropy::seed_thread(seed);
                run_on_this_thread(seed, opts, faults)
            })
            .map_err(|e| Failure {
                seed,
                schedule: Vec::new(),
                violation: Violation::Sim(format!("no thread for the run: {e}")),
            })?;
        run.join()
            .unwrap_or_else(|panicked| std::panic::resume_unwind(panicked))
    })
}

/// [`run_schedule`] on the calling thread.
fn run_on_this_thread(seed: u64, opts: &Options, faults: Vec<Timed>) -> Result<Outcome, Failure> {
    assert!(opts.osds >= 3, "the pool keeps three copies");
    let shape = shape(opts, faults.len());
    let fail = |violation| Failure {
        seed,
        schedule: faults.clone(),
        violation,
    };
    let limit = SETUP_LIMIT + opts.window + opts.longest + opts.settle + Duration::from_secs(60);
    let mut sim = turmoil::Builder::new()
        .rng_seed(seed)
        .simulation_duration(limit)
        .tick_duration(opts.tick)
        .min_message_latency(BASE_LATENCY)
        .max_message_latency(MAX_LATENCY)
        .build();
    let mon_disk =
        SimDisk::new(MON_DEVICE_BYTES).map_err(|e| fail(Violation::Sim(e.to_string())))?;
    add_monitor(&mut sim, mon_disk.clone(), opts.heartbeat_grace);
    let disks = add_osds(&mut sim, opts).map_err(|e| fail(Violation::Sim(e.to_string())))?;
    let board = Rc::new(RefCell::new(Board::default()));
    let shared = board.clone();
    let workload = opts.clone();
    sim.client("client", async move {
        let result = client_run(seed, &workload, &shared).await;
        if let Err(v) = result {
            shared.borrow_mut().violation = Some(v);
            return Err("an invariant broke".into());
        }
        Ok(())
    });
    let hosts: Vec<String> = shape.osds.iter().chain(&shape.others).cloned().collect();
    let world = World {
        hosts: &hosts,
        disks: &disks,
        mon_disk: &mon_disk,
        board: &board,
        seed,
    };
    let ended = drive(&mut sim, &world, &faults, opts);
    let mut b = board.borrow_mut();
    if let Some(v) = b.violation.take() {
        return Err(fail(v));
    }
    ended.map_err(|e| fail(Violation::Sim(e)))?;
    let outcome = Outcome {
        seed,
        schedule: faults.clone(),
        acked: b.ledger.acked_count(),
        uncertain: b.ledger.uncertain_count(),
        simulated: sim.elapsed(),
        unflushed_at_cuts: disks
            .iter()
            .chain([&mon_disk])
            .map(|d| d.unflushed_at_cuts())
            .sum(),
        reads_retried: b.reads_retried,
        trace: b.ledger.trace(),
    };
    drop(b);
    if !opts.tear_down {
        // Dropping every host's runtime, store and KV costs about a third of a short run.
        std::mem::forget(sim);
    }
    Ok(outcome)
}

/// The monitor's host: its map store on simulated disks that outlive its process (each epoch
/// saved before it is answered or published, as `cairn mon run --data` does), Ceph's settings
/// but the heartbeat grace.
fn add_monitor(sim: &mut turmoil::Sim<'_>, disk: Arc<SimDisk>, heartbeat_grace: Duration) {
    sim.host("mon", move || {
        let disk = disk.clone();
        async move {
            let config = MonConfig {
                heartbeat_grace_ms: millis(heartbeat_grace),
                ..MonConfig::default()
            };
            let store = disk
                .mount(&store_config())
                .await
                .map_err(|e| e.to_string())?;
            let store = MapStore::on_store(store).await.map_err(|e| e.to_string())?;
            let monitor = store
                .load_monitor("sim", config)
                .await
                .map_err(|e| e.to_string())?;
            let serving = MonServing {
                store: Some(store),
                ..MonServing::default()
            };
            let _mon = MonDaemon::serve(monitor, mon_addr(), serving)
                .await
                .map_err(|e| e.to_string())?;
            std::future::pending::<()>().await;
            Ok(())
        }
    });
}

/// The OSDs' hosts, `osd0`.. booting as osd.0..; their disks, by OSD index.
fn add_osds(sim: &mut turmoil::Sim<'_>, opts: &Options) -> Result<Vec<Arc<SimDisk>>, StoreError> {
    let mut disks = Vec::with_capacity(opts.osds);
    for i in 0..opts.osds {
        let disk = SimDisk::new(opts.device_bytes)?;
        disks.push(disk.clone());
        let (device_bytes, remap_min_objects) = (opts.device_bytes, opts.remap_min_objects);
        let (heartbeat_interval, heartbeat_grace) = (opts.heartbeat_interval, opts.heartbeat_grace);
        sim.host(osd_name(i).as_str(), move || {
            let disk = disk.clone();
            async move {
                let store = disk
                    .mount(&store_config())
                    .await
                    .map_err(|e| e.to_string())?;
                let name = osd_name(i);
                let mut cfg = OsdConfig::local(
                    &format!("sim-{name}"),
                    &name,
                    mon_addr(),
                    PathBuf::from(format!("/sim/{name}")),
                );
                cfg.listen = SocketAddr::new(turmoil::lookup(name.as_str()), OSD_PORT);
                cfg.device_bytes = device_bytes;
                cfg.want_id = i32::try_from(i).ok();
                cfg.remap_min_objects = remap_min_objects;
                cfg.heartbeat_interval_ms = millis(heartbeat_interval);
                cfg.heartbeat_grace_ms = millis(heartbeat_grace);
                let _osd = OsdDaemon::start_on_store(cfg, store)
                    .await
                    .map_err(|e| e.to_string())?;
                disk.apply_failing(Duration::from_millis(50)).await;
                std::future::pending::<()>().await;
                Ok(())
            }
        });
    }
    Ok(disks)
}
