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

use cairn_client::mon::MonClient;
use cairn_client::{Client, ClientError};
use cairn_clustermap::ClusterMap;
use cairn_mon::daemon::{MonDaemon, MonServing};
use cairn_mon::{MonConfig, Monitor};
use cairn_osd::{OsdConfig, OsdDaemon};
use cairn_proto::mon::Request;
use cairn_store::StoreConfig;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::disk::SimDisk;
use crate::faults::{schedule, Fault, Shape, Timed};
use crate::ledger::{Ledger, Mismatch};

/// The monitor's port.
const MON_PORT: u16 = 6789;
/// Every OSD's port.
const OSD_PORT: u16 = 6800;
/// The pool the workload writes.
const POOL: &str = "data";
/// Longest the cluster may take to come up and serve its first write.
const SETUP_LIMIT: Duration = Duration::from_secs(120);
/// How often OSDs ping each other, and how long one must be silent before its peers report
/// it and the monitor marks it down: shorter than Ceph's 20 s grace, so that a fault within a
/// run's window outlasts it and the cluster goes on without the faulty OSD, then recovers it.
const HEARTBEAT_INTERVAL: Duration = Duration::from_millis(500);
const HEARTBEAT_GRACE: Duration = Duration::from_secs(3);
/// The least a message takes on a link without a fault: a LAN's.
const BASE_LATENCY: Duration = Duration::from_micros(100);
/// The longest a message takes on a link without a fault: latencies spread between the two
/// (exponentially, turmoil's curve), so messages of different connections overtake each other.
const MAX_LATENCY: Duration = Duration::from_millis(3);
/// Largest object the workload writes.
const MAX_OBJECT_BYTES: usize = 16 << 10;

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
}

impl Default for Options {
    fn default() -> Self {
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
        write!(
            f,
            "replay: CAIRN_SIM_SEED={} cargo test -p cairn-sim --test seeds",
            self.seed
        )
    }
}

/// What the client host and the driver share (one thread: the simulation's).
#[derive(Default)]
struct Board {
    /// Simulated time at which the cluster first served a write.
    ready: Option<Duration>,
    /// Set by the driver once every fault has ended.
    healed: bool,
    /// What the client found broken.
    violation: Option<Violation>,
    /// The client's ledger, for the outcome.
    ledger: Ledger,
    /// Operator requests the driver asks the client host to send to the monitor.
    orders: std::collections::VecDeque<Request>,
    /// Reads back that failed once the cluster was clean and were tried again.
    reads_retried: usize,
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

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn mon_addr() -> SocketAddr {
    SocketAddr::new(turmoil::lookup("mon"), MON_PORT)
}

fn osd_name(i: usize) -> String {
    format!("osd{i}")
}

/// Runs seed `seed` with `opts`; Ok when every invariant held.
pub fn run(seed: u64, opts: &Options) -> Result<Outcome, Failure> {
    let shape = Shape {
        osds: (0..opts.osds).map(osd_name).collect(),
        others: vec!["mon".into(), "client".into()],
        window: opts.window,
        faults: opts.faults,
        longest: opts.longest,
    };
    run_schedule(seed, opts, schedule(seed, &shape))
}

/// Runs `faults` (each within the window and the longest fault of `opts`, on hosts the run
/// has) with the workload and network randomness of `seed`: a schedule written out by hand,
/// as a regression test keeps one a seed once found.
pub fn run_schedule(seed: u64, opts: &Options, faults: Vec<Timed>) -> Result<Outcome, Failure> {
    assert!(opts.osds >= 3, "the pool keeps three copies");
    let shape = Shape {
        osds: (0..opts.osds).map(osd_name).collect(),
        others: vec!["mon".into(), "client".into()],
        window: opts.window,
        faults: faults.len(),
        longest: opts.longest,
    };
    let fail = |violation| Failure {
        seed,
        schedule: faults.clone(),
        violation,
    };
    let limit = SETUP_LIMIT + opts.window + opts.longest + opts.settle + Duration::from_secs(60);
    let mut sim = turmoil::Builder::new()
        .rng_seed(seed)
        .simulation_duration(limit)
        .tick_duration(Duration::from_millis(1))
        .min_message_latency(BASE_LATENCY)
        .max_message_latency(MAX_LATENCY)
        .build();
    sim.host("mon", || async {
        let config = MonConfig {
            heartbeat_grace_ms: millis(HEARTBEAT_GRACE),
            ..MonConfig::default()
        };
        let monitor = Monitor::new(ClusterMap::new("sim").map_err(|e| e.to_string())?, config);
        let _mon = MonDaemon::serve(monitor, mon_addr(), MonServing::default())
            .await
            .map_err(|e| e.to_string())?;
        std::future::pending::<()>().await;
        Ok(())
    });
    let mut disks = Vec::with_capacity(opts.osds);
    for i in 0..opts.osds {
        let disk =
            SimDisk::new(opts.device_bytes).map_err(|e| fail(Violation::Sim(e.to_string())))?;
        disks.push(disk.clone());
        let device_bytes = opts.device_bytes;
        let remap_min_objects = opts.remap_min_objects;
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
                cfg.heartbeat_interval_ms = millis(HEARTBEAT_INTERVAL);
                cfg.heartbeat_grace_ms = millis(HEARTBEAT_GRACE);
                let _osd = OsdDaemon::start_on_store(cfg, store)
                    .await
                    .map_err(|e| e.to_string())?;
                disk.apply_failing(Duration::from_millis(50)).await;
                std::future::pending::<()>().await;
                Ok(())
            }
        });
    }
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
        board: &board,
        seed,
    };
    let ended = drive(&mut sim, &world, &faults, opts, &board);
    let mut b = board.borrow_mut();
    if let Some(v) = b.violation.take() {
        return Err(fail(v));
    }
    ended.map_err(|e| fail(Violation::Sim(e)))?;
    Ok(Outcome {
        seed,
        schedule: faults.clone(),
        acked: b.ledger.acked_count(),
        uncertain: b.ledger.uncertain_count(),
        simulated: sim.elapsed(),
        unflushed_at_cuts: disks.iter().map(|d| d.unflushed_at_cuts()).sum(),
        reads_retried: b.reads_retried,
    })
}

/// Steps the simulation until the client is done, starting and ending faults on time and
/// ending them all once the window and the longest fault have passed.
fn drive(
    sim: &mut turmoil::Sim<'_>,
    world: &World<'_>,
    faults: &[Timed],
    opts: &Options,
    board: &Rc<RefCell<Board>>,
) -> Result<(), String> {
    let mut started = vec![false; faults.len()];
    let mut ended = vec![false; faults.len()];
    let mut downs = Downs::default();
    let heal_at = opts.window + opts.longest;
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
/// OSD index), the run's seed.
struct World<'a> {
    hosts: &'a [String],
    disks: &'a [Arc<SimDisk>],
    board: &'a Rc<RefCell<Board>>,
    seed: u64,
}

impl World<'_> {
    /// The disks of OSD host `name`.
    fn disk(&self, name: &str) -> Option<&Arc<SimDisk>> {
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
            sim.crash(h.as_str());
            if let Some(disk) = world.disk(h) {
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

/// The client host: makes the pool, writes while the faults play, waits for the heal, then
/// checks the cluster.
async fn client_run(
    seed: u64,
    opts: &Options,
    board: &Rc<RefCell<Board>>,
) -> Result<(), Violation> {
    let admin = MonClient::connect(mon_addr(), 91).await;
    admin
        .op(
            Request::CreatePool {
                name: POOL.into(),
                size: 3,
                pg_num: opts.pg_num,
            },
            millis(SETUP_LIMIT),
        )
        .await
        .map_err(|e| Violation::NoStart(format!("create the pool: {e}")))?;
    let client = Client::connect(mon_addr(), 2)
        .await
        .map_err(|e| Violation::NoStart(format!("connect: {e}")))?;
    let deadline = tokio::time::Instant::now() + SETUP_LIMIT;
    while let Err(e) = client.write_full(POOL, "probe", b"x").await {
        if tokio::time::Instant::now() >= deadline {
            return Err(Violation::NoStart(format!("first write: {e}")));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    board.borrow_mut().ready = Some(turmoil::elapsed());
    let ledger = RefCell::new(Ledger::default());
    let epochs = RefCell::new(EpochWatch::default());
    let writers = (0..opts.writers.max(1)).map(|w| {
        let writer = Writer {
            index: w,
            client: &client,
            ledger: &ledger,
            epochs: &epochs,
        };
        writer.run(seed, opts)
    });
    let written = tokio::select! {
        written = futures_util::future::join_all(writers) => written,
        never = serve_orders(&admin, board) => match never {},
    };
    for done in written {
        done?;
    }
    let ledger = ledger.into_inner();
    let mut epochs = epochs.into_inner();
    let healed = async {
        while !board.borrow().healed {
            epochs.see(&client)?;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok::<(), Violation>(())
    };
    tokio::select! {
        healed = healed => healed?,
        never = serve_orders(&admin, board) => match never {},
    }
    send_orders(&admin, board).await;
    board.borrow_mut().ledger = ledger.clone();
    wait_clean(&client, opts, &mut epochs).await?;
    // A daemon whose connection lost its state in a partition hears again only once the
    // messenger's idle timeout closes it (a minute): a read may time out before; it is tried
    // again until the settle time is over.
    let deadline = tokio::time::Instant::now() + opts.settle;
    for object in ledger.objects() {
        let found = loop {
            match client.read(POOL, object).await {
                Ok(data) => break Some(crc_fast::crc32_iscsi(&data)),
                Err(ClientError::NotFound(_)) => break None,
                Err(e) if tokio::time::Instant::now() >= deadline => {
                    return Err(Violation::Unreadable {
                        object: object.to_string(),
                        error: e.to_string(),
                    })
                }
                Err(e) => {
                    tracing::info!(%object, error = %e, "read back failed; trying again");
                    board.borrow_mut().reads_retried += 1;
                }
            }
        };
        ledger.check(object, found).map_err(Violation::Lost)?;
    }
    Ok(())
}

/// Sends the operator requests the driver queued, for as long as it is polled.
async fn serve_orders(admin: &MonClient, board: &Rc<RefCell<Board>>) -> std::convert::Infallible {
    loop {
        send_orders(admin, board).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Sends every queued operator request, each retried a few times (the monitor may be cut
/// off for a while); one that keeps failing is logged and dropped, as an operator's command
/// that timed out.
async fn send_orders(admin: &MonClient, board: &Rc<RefCell<Board>>) {
    loop {
        let Some(order) = board.borrow_mut().orders.pop_front() else {
            return;
        };
        for attempt in 1..=ORDER_ATTEMPTS {
            match admin.op(order.clone(), ORDER_TIMEOUT_MS).await {
                Ok(_) => break,
                Err(e) if attempt == ORDER_ATTEMPTS => {
                    tracing::warn!(?order, error = %e, "operator request dropped");
                }
                Err(_) => tokio::time::sleep(Duration::from_secs(1)).await,
            }
        }
    }
}

/// Tries of one operator request, each waiting this long for the monitor.
const ORDER_ATTEMPTS: u32 = 5;
const ORDER_TIMEOUT_MS: u64 = 5_000;

/// One of the client's concurrent writers: it alone writes objects `o{k}` with
/// `k % writers == index`, one write at a time, so each object's writes are ordered.
struct Writer<'a> {
    index: usize,
    client: &'a Client,
    ledger: &'a RefCell<Ledger>,
    epochs: &'a RefCell<EpochWatch>,
}

impl Writer<'_> {
    async fn run(self, seed: u64, opts: &Options) -> Result<(), Violation> {
        let writers = opts.writers.max(1);
        let mine: Vec<usize> = (0..opts.objects.max(1))
            .filter(|k| k % writers == self.index)
            .collect();
        if mine.is_empty() {
            return Ok(());
        }
        let lane = u64::try_from(self.index).unwrap_or(u64::MAX);
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5eed_c11e ^ lane.rotate_left(48));
        let count = opts.writes / writers + usize::from(self.index < opts.writes % writers);
        let per_writer = u64::try_from(count.max(1)).unwrap_or(u64::MAX);
        let gap_ms = (millis(opts.window) * 2 / per_writer).max(1);
        for n in 0..count {
            let object = format!("o{}", mine[rng.random_range(0..mine.len())]);
            let len = rng.random_range(1..=MAX_OBJECT_BYTES);
            let mut data = vec![0u8; len];
            rng.fill(&mut data[..]);
            let stamp = ((lane << 32) | u64::try_from(n).unwrap_or(u64::MAX)).to_le_bytes();
            data[..8.min(len)].copy_from_slice(&stamp[..8.min(len)]);
            let crc = crc_fast::crc32_iscsi(&data);
            match self.client.write_full(POOL, &object, &data).await {
                Ok(_) => self.ledger.borrow_mut().acked(&object, crc),
                Err(e) => {
                    tracing::info!(%object, error = %e, "write not acknowledged");
                    self.ledger.borrow_mut().uncertain(&object, crc);
                }
            }
            self.epochs.borrow_mut().see(self.client)?;
            tokio::time::sleep(Duration::from_millis(rng.random_range(0..=gap_ms))).await;
        }
        Ok(())
    }
}

/// Waits until every PG of the pool is active+clean, as its primary says.
async fn wait_clean(
    client: &Client,
    opts: &Options,
    epochs: &mut EpochWatch,
) -> Result<(), Violation> {
    let deadline = tokio::time::Instant::now() + opts.settle;
    loop {
        epochs.see(client)?;
        let states = pg_states(client, opts.osds).await;
        let total: usize = states.values().sum();
        if total == opts.pg_num as usize && states.keys().all(|s| s == "active+clean") {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            let mut detail = format!("{states:?}");
            for osd in 0..opts.osds {
                let Ok(id) = i32::try_from(osd) else { break };
                let dump = client
                    .tell(id, &["pg".into(), "dump".into()])
                    .await
                    .unwrap_or_default();
                for line in dump.lines().filter(|l| !l.contains("active+clean")) {
                    detail.push_str(&format!("\n    osd.{id}: {line}"));
                }
            }
            return Err(Violation::NotClean {
                settle: opts.settle,
                states: detail,
            });
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The PG states the OSDs report for the PGs they lead, counted.
async fn pg_states(client: &Client, osds: usize) -> std::collections::BTreeMap<String, usize> {
    let mut out = std::collections::BTreeMap::new();
    for osd in 0..osds {
        let Ok(id) = i32::try_from(osd) else { break };
        let stats = client
            .tell(id, &["pg".into(), "stats".into()])
            .await
            .unwrap_or_default();
        for line in stats.lines() {
            if let Some((state, n)) = line.rsplit_once(' ') {
                *out.entry(state.to_string()).or_default() += n.parse::<usize>().unwrap_or(0);
            }
        }
    }
    out
}

/// The newest map epoch the client has seen; an older one after it is a violation.
#[derive(Default)]
struct EpochWatch {
    newest: u64,
}

impl EpochWatch {
    fn see(&mut self, client: &Client) -> Result<(), Violation> {
        let Some(map) = client.map() else {
            return Ok(());
        };
        if map.epoch < self.newest {
            return Err(Violation::EpochWentBack {
                was: self.newest,
                now: map.epoch,
            });
        }
        self.newest = map.epoch;
        Ok(())
    }
}
