//! Runs the OSD's work through its QoS scheduler (invariant 2): every client op and replica
//! write is enqueued with its class and cost, and starts only when the scheduler releases it.
//!
//! The scheduler is sharded as Ceph's op queue is (`osd_op_num_shards`): each PG belongs to one
//! shard, by a hash of its id, and each shard has its own policy queue, lock, dispatcher and
//! share of the in-flight limit, so PGs of different shards never wait on one lock and a PG's
//! work is ordered by one policy. The shards' policies share one [`ShardLink`], so mClock
//! reservations, weights and limits and TBF rates hold for the OSD, not per shard. Within a
//! shard the policy alone chooses the order: a dispatcher task releases requests, and a caller
//! of [`OpScheduler::run`] that finds a free slot asks the policy itself (running its own
//! request inline when the policy picks it).

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

use cairn_clustermap::PgId;
use cairn_metrics::{DescriptorEncoder, Families, HistogramSample, Written};
use cairn_qos::hist::Histogram;
use cairn_qos::{
    CostModel, Dequeued, DeviceCapacity, PolicyConfig, QosClass, QosQueue, Request, ShardLink,
};

use crate::history::{History, ReleasedRequest};
use crate::work::{Priorities, Work};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use crate::error::OsdError;

/// Upper bounds of the scheduler wait-time histogram on the metrics page, seconds.
const WAIT_BUCKETS_S: [f64; 17] = [
    0.00001, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
    2.5, 5.0, 10.0,
];

/// A request's cost counts at least this many bytes (a 4 KiB random I/O is the cost model's
/// unit).
const MIN_COST_BYTES: u64 = 4096;

/// Most op shards an OSD may have (explicit limit).
pub const MAX_OP_SHARDS: usize = 64;
/// `cfg` with an mClock config's IOPS-denominated settings converting against `iops`, the
/// capacity in force; any other policy as it is.
fn at_capacity(mut cfg: PolicyConfig, iops: f64) -> PolicyConfig {
    if let PolicyConfig::Mclock(m) = &mut cfg {
        m.capacity_iops = iops;
    }
    cfg
}

/// Device capacities in 4 KiB IOPS an operator may set live (a slow disk to a fast NVMe).
pub const CAPACITY_IOPS_RANGE: std::ops::RangeInclusive<f64> = 1.0..=10_000_000.0;
/// Sequential bandwidths in bytes/s an operator may set live.
pub const CAPACITY_BANDWIDTH_RANGE: std::ops::RangeInclusive<f64> = 1e6..=1e12;

type Job = Pin<Box<dyn Future<Output = ()> + Send>>;

/// What the policy released into a held in-flight slot.
enum Released {
    /// A request: its id and its job, which drops the slot when it ends.
    Job(u64, Job),
    /// Nothing eligible before this time (ns on the scheduler's clock).
    NothingBefore(u64),
    /// Nothing queued.
    Empty,
}

/// Device time (by the cost model, in ns) of the requests a shard has released that have not
/// finished, against the shard's limit. Past the limit the policy releases nothing more, so
/// work waits in the policy's queue, where it is ordered, rather than in the device's queue
/// below, where it is not: without it a returning OSD's 4 MiB recovery writes fill the in-flight
/// slots and a client's 4 KiB write waits behind all of them whatever the policy (Ceph's
/// BlueStore throttle, which seed 000 lowered for mClock to work, counted in device time).
struct CostInFlight {
    ns: AtomicU64,
    /// 0: no limit.
    limit_ns: u64,
    freed: Notify,
}

impl CostInFlight {
    fn new(limit_ns: u64) -> Arc<Self> {
        Arc::new(CostInFlight {
            ns: AtomicU64::new(0),
            limit_ns,
            freed: Notify::new(),
        })
    }

    /// Whether another request may be released (one may overshoot the limit, so a request
    /// costlier than the whole limit still runs).
    fn has_room(&self) -> bool {
        self.limit_ns == 0 || self.ns.load(Ordering::Acquire) < self.limit_ns
    }

    /// Waits until [`CostInFlight::has_room`].
    async fn room(&self) {
        while !self.has_room() {
            self.freed.notified().await;
        }
    }

    /// Counts `ns` in flight until the returned guard is dropped.
    fn take(self: &Arc<Self>, ns: u64) -> CostTaken {
        self.ns.fetch_add(ns, Ordering::AcqRel);
        CostTaken {
            budget: self.clone(),
            ns,
        }
    }
}

/// A released request's share of [`CostInFlight`], given back when its job ends or is dropped.
struct CostTaken {
    budget: Arc<CostInFlight>,
    ns: u64,
}

impl Drop for CostTaken {
    fn drop(&mut self) {
        self.budget.ns.fetch_sub(self.ns, Ordering::AcqRel);
        self.budget.freed.notify_one();
    }
}

/// What every shard of one OSD shares: the priorities requests are queued with, the order of
/// release and nothing else.
#[derive(Default)]
struct Common {
    priorities: Priorities,
    released: AtomicU64,
}

/// One shard: a policy queue with its own lock, dispatcher and in-flight slots.
struct Shard {
    index: usize,
    common: Arc<Common>,
    queue: Mutex<QosQueue>,
    /// Queued jobs by request id, with what they are.
    jobs: Mutex<HashMap<u64, (Job, Work)>>,
    history: History,
    next_id: Mutex<u64>,
    notify: Notify,
    inflight: Arc<Semaphore>,
    cost_in_flight: Arc<CostInFlight>,
    /// The device cost model requests are charged by, the same in every shard; live-settable
    /// ([`OpScheduler::set_capacity`]), read as each request is queued.
    cost: Mutex<CostModel>,
    started: Instant,
    dispatcher: Mutex<Option<tokio::task::AbortHandle>>,
    /// Cancelled by [`Shard::stop`]: released jobs still running end at their next await.
    stopping: CancellationToken,
}

impl Shard {
    /// Shard `index` with `queue`'s policy, the device cost model and its in-flight limits.
    fn new(
        index: usize,
        common: Arc<Common>,
        queue: QosQueue,
        cost: CostModel,
        limits: InFlightLimits,
        started: Instant,
    ) -> Arc<Self> {
        let s = Arc::new(Shard {
            index,
            common,
            queue: Mutex::new(queue),
            jobs: Mutex::new(HashMap::new()),
            history: History::default(),
            next_id: Mutex::new(1),
            notify: Notify::new(),
            inflight: Arc::new(Semaphore::new(limits.ops.max(1))),
            cost_in_flight: CostInFlight::new(limits.cost_ns),
            cost: Mutex::new(cost),
            started,
            dispatcher: Mutex::new(None),
            stopping: CancellationToken::new(),
        });
        let handle = tokio::spawn(dispatch_loop(s.clone())).abort_handle();
        *s.dispatcher.lock().unwrap_or_else(|p| p.into_inner()) = Some(handle);
        s
    }

    /// Stops dispatching, drops every queued job and ends the running ones at their next await
    /// (the OSD is shutting down).
    fn stop(&self) {
        self.stopping.cancel();
        if let Some(h) = self
            .dispatcher
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            h.abort();
        }
        self.jobs.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }

    fn now_ns(&self) -> u64 {
        crate::convert::nanos(self.started.elapsed())
    }

    /// Queues `job`, described by `work`; it runs when released.
    fn submit(
        &self,
        work: Work,
        job: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), OsdError> {
        let id = self.enqueue(work, Box::pin(job))?;
        match self.dispatch_here(id) {
            Some(job) => drop(tokio::spawn(job)),
            None => self.notify.notify_one(),
        }
        Ok(())
    }

    /// Puts `job` in the policy's queue (without waking the dispatcher), with everything
    /// `work` says of it and its purpose's priority now; returns its id.
    fn enqueue(&self, work: Work, job: Job) -> Result<u64, OsdError> {
        let id = {
            let mut n = self.next_id.lock().unwrap_or_else(|p| p.into_inner());
            *n += 1;
            *n
        };
        let cost_ns = self.cost().cost_ns(work.length_bytes.max(MIN_COST_BYTES));
        let req = Request {
            op: work.op,
            target: 0,
            object_id: work.object_id,
            offset_bytes: work.offset_bytes,
            physical_offset_bytes: work.physical_offset_bytes,
            length_bytes: work.length_bytes,
            priority: self.common.priorities.of(work.purpose),
            ..Request::new(id, work.purpose.class(), work.client_id, cost_ns)
        };
        {
            // Checked under the lock `stop` clears the jobs under: a job queued after the
            // clear would never run and, holding the OSD's state, keep its store open.
            let mut jobs = self.jobs.lock().unwrap_or_else(|p| p.into_inner());
            if self.stopping.is_cancelled() {
                return Err(OsdError::Stopping);
            }
            jobs.insert(id, (job, work));
        }
        let queued = self
            .queue
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .enqueue(req, self.now_ns());
        if let Err(e) = queued {
            self.jobs
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&id);
            return Err(e.into());
        }
        Ok(id)
    }

    /// Asks the policy for the next request, holding `permit` for it: the job comes back
    /// wrapped so that the slot is released when it ends. Both the dispatcher and
    /// [`Shard::dispatch_here`] release requests only through here.
    fn release_next(&self, permit: OwnedSemaphorePermit) -> Released {
        let next = self
            .queue
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .dequeue(self.now_ns());
        match next {
            Dequeued::Request(d) => {
                let job = self
                    .jobs
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&d.req.id);
                match job {
                    Some((job, work)) => {
                        let seq = self.common.released.fetch_add(1, Ordering::Relaxed);
                        let now = self.now_ns();
                        self.history.record(
                            seq,
                            self.index,
                            &work,
                            d.req.priority,
                            d.req.arrival_ns,
                            now,
                        );
                        let cost = self.cost_in_flight.take(d.req.cost_ns);
                        let stopping = self.stopping.clone();
                        Released::Job(
                            d.req.id,
                            Box::pin(async move {
                                stopping.run_until_cancelled_owned(job).await;
                                drop((cost, permit));
                            }),
                        )
                    }
                    // Dropped by `stop`: look again at once.
                    None => Released::NothingBefore(self.now_ns()),
                }
            }
            Dequeued::NothingBefore(t) => Released::NothingBefore(t),
            Dequeued::Empty => Released::Empty,
        }
    }

    /// Dispatches in the caller's task when an in-flight slot is free: the policy picks the
    /// next request exactly as the dispatcher would. The caller's own request (`mine`) comes
    /// back to be run by the caller, holding its slot (saving the dispatcher's wake-up); another
    /// request is spawned. `None`: the caller's request is still queued.
    fn dispatch_here(&self, mine: u64) -> Option<Job> {
        if !self.cost_in_flight.has_room() {
            return None;
        }
        let permit = self.inflight.clone().try_acquire_owned().ok()?;
        match self.release_next(permit) {
            Released::Job(id, job) if id == mine => Some(job),
            Released::Job(_, job) => {
                tokio::spawn(job);
                None
            }
            Released::NothingBefore(_) | Released::Empty => None,
        }
    }

    /// The active policy's configuration.
    fn policy(&self) -> PolicyConfig {
        self.queue().config().clone()
    }

    /// Switches the policy live; queued requests drain through the old one (hot swap).
    fn set_policy(&self, cfg: PolicyConfig) -> Result<(), OsdError> {
        let now = self.now_ns();
        self.queue().set_policy(cfg, now)?;
        self.notify.notify_one();
        Ok(())
    }

    /// The cost model requests queued now are charged by.
    fn cost(&self) -> CostModel {
        *self.cost.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The policy queue (for its counters and config).
    fn queue(&self) -> std::sync::MutexGuard<'_, QosQueue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues a request described by `work` and waits until the policy releases it: the slot
    /// (and its share of the device time in flight) is the returned [`Grant`]'s until dropped.
    async fn grant(&self, work: Work) -> Result<Grant, OsdError> {
        let (released, granted) = tokio::sync::oneshot::channel();
        let (done, ended) = tokio::sync::oneshot::channel::<()>();
        let job: Job = Box::pin(async move {
            if released.send(()).is_ok() {
                let _ = ended.await;
            }
        });
        let id = self.enqueue(work, job)?;
        if let Some(job) = self.dispatch_here(id) {
            // Released here: the unpolled job holds the slot; dropping it frees the slot.
            return Ok(Grant {
                _held: GrantHeld::Here { _job: job },
            });
        }
        self.notify.notify_one();
        granted.await.map_err(|_| {
            OsdError::Protocol("scheduler stopped before releasing the request".into())
        })?;
        Ok(Grant {
            _held: GrantHeld::Dispatched { _done: done },
        })
    }

    /// Queues `task` like [`Shard::submit`] and waits for its result.
    async fn run<T: Send + 'static>(
        &self,
        work: Work,
        task: impl Future<Output = T> + Send + 'static,
    ) -> Result<T, OsdError> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let job: Job = Box::pin(async move {
            let _ = tx.send(task.await);
        });
        let id = self.enqueue(work, job)?;
        match self.dispatch_here(id) {
            Some(job) => job.await,
            None => self.notify.notify_one(),
        }
        rx.await
            .map_err(|_| OsdError::Protocol("scheduler stopped before running the request".into()))
    }
}

/// A request the scheduler has released whose work its caller does itself: it holds the
/// request's in-flight slot and device time until dropped. A write takes one under its PG's
/// lock and keeps it through its local commit, after the lock is released, so the PG's next
/// write can be scheduled meanwhile.
pub struct Grant {
    _held: GrantHeld,
}

/// How a [`Grant`] holds its slot.
enum GrantHeld {
    /// The released job itself, never polled: dropping it drops the slot it carries.
    Here { _job: Job },
    /// The dispatcher runs the job, which waits until this sender is dropped.
    Dispatched {
        _done: tokio::sync::oneshot::Sender<()>,
    },
}

/// Refuses a shard count outside 1..=[`MAX_OP_SHARDS`].
pub fn check_shard_count(shards: usize) -> Result<(), OsdError> {
    if shards == 0 || shards > MAX_OP_SHARDS {
        return Err(OsdError::Config(format!(
            "op shards must be in 1..={MAX_OP_SHARDS}, not {shards}"
        )));
    }
    Ok(())
}

/// How much released work an OSD lets run at once, divided between its shards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InFlightLimits {
    /// Requests (each shard gets at least one).
    pub ops: usize,
    /// Device time by the cost model, in ns; 0 for no limit.
    pub cost_ns: u64,
}

/// The scheduler of one OSD: its op shards.
pub struct OpScheduler {
    shards: Vec<Arc<Shard>>,
    common: Arc<Common>,
    /// Held while a policy change is applied to every shard, so two changes never interleave.
    switching: Mutex<()>,
}

impl OpScheduler {
    /// `shards` shards (1..=[`MAX_OP_SHARDS`]) running `policy` on one link, with the device
    /// cost model; the in-flight limits are divided between them (each gets at least one slot
    /// and 1 ns of device time).
    pub fn new(
        policy: PolicyConfig,
        cost: CostModel,
        limits: InFlightLimits,
        shards: usize,
    ) -> Result<Arc<Self>, OsdError> {
        check_shard_count(shards)?;
        let policy = at_capacity(policy, cost.capacity.random_4k_iops);
        let link = ShardLink::default();
        let started = Instant::now();
        let per_shard = InFlightLimits {
            ops: limits.ops.div_ceil(shards).max(1),
            cost_ns: match limits.cost_ns {
                0 => 0,
                ns => (ns / shards as u64).max(1),
            },
        };
        let common = Arc::new(Common::default());
        let shards = (0..shards)
            .map(|index| {
                let queue = QosQueue::new_shard(policy.clone(), link.clone())?;
                Ok(Shard::new(
                    index,
                    common.clone(),
                    queue,
                    cost,
                    per_shard,
                    started,
                ))
            })
            .collect::<Result<Vec<_>, OsdError>>()?;
        Ok(Arc::new(OpScheduler {
            shards,
            common,
            switching: Mutex::new(()),
        }))
    }

    /// Number of shards.
    pub fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// The shard `pg`'s work runs in (a fixed hash of the PG id).
    pub fn shard_of(&self, pg: PgId) -> usize {
        let key = (pg.pool as u64).rotate_left(32) ^ u64::from(pg.seed);
        cairn_qos::shard::shard_index(key, self.shards.len())
    }

    fn shard(&self, pg: PgId) -> &Shard {
        &self.shards[self.shard_of(pg)]
    }

    /// Stops dispatching, drops every queued job and ends the running ones at their next await
    /// (the OSD is shutting down).
    pub fn stop(&self) {
        for shard in &self.shards {
            shard.stop();
        }
    }

    /// Queues `job`, described by `work`, in `pg`'s shard; it runs when released.
    pub fn submit(
        &self,
        pg: PgId,
        work: Work,
        job: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), OsdError> {
        self.shard(pg).submit(work, job)
    }

    /// Queues a request described by `work` in `pg`'s shard and waits until it is released;
    /// the caller does its work while holding the returned [`Grant`].
    pub async fn grant(&self, pg: PgId, work: Work) -> Result<Grant, OsdError> {
        self.shard(pg).grant(work).await
    }

    /// Queues `task`, described by `work`, like [`OpScheduler::submit`] and waits for its
    /// result.
    pub async fn run<T: Send + 'static>(
        &self,
        pg: PgId,
        work: Work,
        task: impl Future<Output = T> + Send + 'static,
    ) -> Result<T, OsdError> {
        self.shard(pg).run(work, task).await
    }

    /// The priorities requests are queued with, by purpose (live-settable).
    pub fn priorities(&self) -> &Priorities {
        &self.common.priorities
    }

    /// The requests every shard released most recently, in order of release.
    pub fn history(&self) -> Vec<ReleasedRequest> {
        let mut all: Vec<ReleasedRequest> = self
            .shards
            .iter()
            .flat_map(|s| s.history.snapshot())
            .collect();
        all.sort_by_key(|r| r.seq);
        all
    }

    /// Forgets the history (so that a test or an operator reads only what follows).
    pub fn clear_history(&self) {
        for s in &self.shards {
            s.history.clear();
        }
    }

    /// The active policy's configuration (every shard runs the same).
    pub fn policy(&self) -> PolicyConfig {
        self.shards[0].policy()
    }

    /// Switches every shard's policy live; queued requests drain through the old one (hot
    /// swap). An invalid config is refused by the first shard and changes nothing. An mClock
    /// config takes the capacity in force, whatever it says.
    pub fn set_policy(&self, cfg: PolicyConfig) -> Result<(), OsdError> {
        let _one_at_a_time = self.switching.lock().unwrap_or_else(|p| p.into_inner());
        self.apply_policy(at_capacity(cfg, self.capacity().random_4k_iops))
    }

    /// Sets `cfg` on every shard; the caller holds `switching`.
    fn apply_policy(&self, cfg: PolicyConfig) -> Result<(), OsdError> {
        for shard in &self.shards {
            shard.set_policy(cfg.clone())?;
        }
        Ok(())
    }

    /// The device capacity requests are charged against (`osd_mclock_max_capacity_iops` and
    /// `osd_mclock_max_sequential_bandwidth`).
    pub fn capacity(&self) -> DeviceCapacity {
        self.shards[0].cost().capacity
    }

    /// Charges requests queued from now on against `capacity` (Ceph's live
    /// `osd_mclock_max_capacity_iops_*`), and applies an mClock policy in force again when its
    /// IOPS change: its reservations and limits are shares of the capacity. Requests already
    /// queued keep their cost. Under every policy the capacity also measures the device time
    /// in flight (`max_inflight_cost_ms`). A capacity out of [`CAPACITY_IOPS_RANGE`] or
    /// [`CAPACITY_BANDWIDTH_RANGE`] is refused and changes nothing.
    pub fn set_capacity(&self, capacity: DeviceCapacity) -> Result<(), OsdError> {
        let (iops, bandwidth) = (capacity.random_4k_iops, capacity.seq_bandwidth_bytes_per_s);
        if !CAPACITY_IOPS_RANGE.contains(&iops) || !CAPACITY_BANDWIDTH_RANGE.contains(&bandwidth) {
            return Err(OsdError::Config(format!(
                "capacity {iops} IOPS, {bandwidth} bytes/s: IOPS must lie in {CAPACITY_IOPS_RANGE:?}, \
                 bandwidth in {CAPACITY_BANDWIDTH_RANGE:?}"
            )));
        }
        let cost = CostModel::from_capacity(capacity)?;
        let _one_at_a_time = self.switching.lock().unwrap_or_else(|p| p.into_inner());
        match self.shards[0].policy() {
            PolicyConfig::Mclock(m) if m.capacity_iops != iops => {
                self.apply_policy(at_capacity(PolicyConfig::Mclock(m), iops))?;
            }
            _ => {}
        }
        for shard in &self.shards {
            *shard.cost.lock().unwrap_or_else(|p| p.into_inner()) = cost;
        }
        Ok(())
    }

    /// Writes the scheduler's per-class counters and wait times (over all shards) and each
    /// shard's queue length on a page.
    pub fn encode(&self, e: &mut DescriptorEncoder<'_>, osd: &str) -> Written {
        let mut dispatched = [0u64; QosClass::ALL.len()];
        let mut queued = [0u64; QosClass::ALL.len()];
        let mut refused = 0;
        let mut shard_queued = Vec::with_capacity(self.shards.len());
        let mut waits: Vec<Option<Histogram>> = vec![None; QosClass::ALL.len()];
        let policy = self.shards[0].queue().policy_name();
        for shard in &self.shards {
            let q = shard.queue();
            for (i, class) in QosClass::ALL.iter().enumerate() {
                let c = q.counters().class(*class);
                dispatched[i] += c.dispatched_total();
                queued[i] += c.queued;
                match &mut waits[i] {
                    Some(w) => w.merge(&c.wait),
                    None => waits[i] = Some(c.wait.clone()),
                }
            }
            refused += q.counters().refused_to_fifo;
            shard_queued.push(q.len() as u64);
        }
        let by_class = |values: [u64; QosClass::ALL.len()]| {
            QosClass::ALL
                .iter()
                .zip(values)
                .map(move |(class, n)| ([("osd", osd), ("class", class.name())], n))
        };
        e.counters(
            "cairn_osd_sched_dispatched_total",
            "Requests released by the scheduler, by class.",
            by_class(dispatched),
        )?;
        e.gauges(
            "cairn_osd_sched_queued",
            "Requests waiting in the scheduler, by class.",
            by_class(queued),
        )?;
        let wait_rows: Vec<_> = QosClass::ALL
            .iter()
            .zip(&waits)
            .filter_map(|(class, wait)| wait.as_ref().map(|w| (class.name(), wait_buckets(w))))
            .collect();
        e.histograms(
            "cairn_osd_sched_wait_seconds",
            "Time requests waited in the scheduler (queued to released), by class, over all \
             shards; bucket edges to the scheduler histogram's precision (1/8).",
            wait_rows.iter().map(|(class, (counts, count, sum))| {
                (
                    [("osd", osd), ("class", *class)],
                    HistogramSample {
                        bounds: &WAIT_BUCKETS_S,
                        counts,
                        count: *count,
                        sum: *sum,
                    },
                )
            }),
        )?;
        let shard_names: Vec<String> = (0..shard_queued.len()).map(|i| i.to_string()).collect();
        e.gauges(
            "cairn_osd_sched_shard_queued",
            "Requests waiting in each op shard.",
            shard_names
                .iter()
                .zip(shard_queued)
                .map(|(shard, n)| ([("osd", osd), ("shard", shard.as_str())], n)),
        )?;
        e.counters(
            "cairn_osd_sched_refused_to_fifo_total",
            "Requests the policy refused (served by FIFO).",
            [([("osd", osd), ("policy", policy)], refused)],
        )
    }
}

/// A wait histogram as a page's buckets: per-bucket counts over [`WAIT_BUCKETS_S`], the count
/// and the sum in seconds.
fn wait_buckets(w: &Histogram) -> ([u64; WAIT_BUCKETS_S.len()], u64, f64) {
    let mut counts = [0u64; WAIT_BUCKETS_S.len()];
    let mut below = 0;
    for (slot, bound_s) in counts.iter_mut().zip(WAIT_BUCKETS_S) {
        let at_most = w.count_at_most(crate::convert::sat_u64(bound_s * 1e9));
        *slot = at_most.saturating_sub(below);
        below = below.max(at_most);
    }
    (counts, w.count(), w.sum_ns() as f64 / 1e9)
}

async fn dispatch_loop(s: Arc<Shard>) {
    loop {
        s.cost_in_flight.room().await;
        let Ok(permit) = s.inflight.clone().acquire_owned().await else {
            return;
        };
        match s.release_next(permit) {
            Released::Job(_, job) => drop(tokio::spawn(job)),
            Released::NothingBefore(t) => {
                let wait = Duration::from_nanos(t.saturating_sub(s.now_ns()));
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = s.notify.notified() => {}
                }
            }
            Released::Empty => s.notify.notified().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::work::Purpose;
    use cairn_qos::config::ClassParams;
    use cairn_qos::{DeviceCapacity, MClockConfig};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex as StdMutex;

    const PG: PgId = PgId { pool: 1, seed: 0 };

    /// Work of `class` for `client` of `length` bytes.
    fn w(class: QosClass, client: u64, length: u64) -> Work {
        let purpose = match class {
            QosClass::Client => Purpose::ClientOp,
            QosClass::Recovery => Purpose::Recovery,
            _ => Purpose::Scrub,
        };
        Work::new(purpose, client, cairn_qos::OpKind::Write).sized(length)
    }

    fn sharded(policy: PolicyConfig, max_inflight: usize, shards: usize) -> Arc<OpScheduler> {
        let limits = InFlightLimits {
            ops: max_inflight,
            cost_ns: 0,
        };
        OpScheduler::new(policy, cost_model(), limits, shards).unwrap()
    }

    fn cost_model() -> CostModel {
        let capacity = DeviceCapacity {
            random_4k_iops: 20_000.0,
            seq_bandwidth_bytes_per_s: 1e9,
        };
        CostModel::from_capacity(capacity).unwrap()
    }

    fn scheduler(max_inflight: usize) -> Arc<OpScheduler> {
        sharded(PolicyConfig::Fifo, max_inflight, 1)
    }

    /// A PG of pool 1 in `shard` of `s` (other than `not`).
    fn pg_in(s: &OpScheduler, shard: usize, not: Option<PgId>) -> PgId {
        (0..1000)
            .map(|seed| PgId { pool: 1, seed })
            .find(|pg| s.shard_of(*pg) == shard && Some(*pg) != not)
            .expect("some PG hashes to every shard")
    }

    /// Occupies the only in-flight slot until the returned sender fires.
    async fn hold_the_slot(s: &OpScheduler) -> tokio::sync::oneshot::Sender<()> {
        hold_a_slot_of(s, PG).await
    }

    /// Occupies one in-flight slot of `pg`'s shard until the returned sender fires.
    async fn hold_a_slot_of(s: &OpScheduler, pg: PgId) -> tokio::sync::oneshot::Sender<()> {
        let (release, wait) = tokio::sync::oneshot::channel::<()>();
        let (started_tx, started) = tokio::sync::oneshot::channel();
        s.submit(pg, w(QosClass::Client, 9, 4096), async move {
            let _ = started_tx.send(());
            let _ = wait.await;
        })
        .unwrap();
        started.await.unwrap();
        release
    }

    /// One shard with 64 slots and a device-time limit of `limit_in_4mib` 4 MiB requests.
    fn cost_limited(policy: PolicyConfig, limit_in_4mib: f64) -> Arc<OpScheduler> {
        let cost = cost_model();
        let limits = InFlightLimits {
            ops: 64,
            cost_ns: crate::convert::sat_u64(cost.cost_ns(4 << 20) as f64 * limit_in_4mib),
        };
        OpScheduler::new(policy, cost, limits, 1).unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_capacity_set_live_charges_later_requests_and_reaches_the_mclock_profile() {
        let profile = MClockConfig::profile(cairn_qos::config::Profile::Balanced, 20_000.0);
        let s = sharded(PolicyConfig::Mclock(profile), 8, 1);
        let in_flight = |s: &OpScheduler| s.shards[0].cost_in_flight.ns.load(Ordering::Acquire);
        let first = hold_the_slot(&s).await;
        assert_eq!(in_flight(&s), 50_000, "4 KiB at 20,000 IOPS: 50 us");
        let slow = DeviceCapacity {
            random_4k_iops: 1_000.0,
            seq_bandwidth_bytes_per_s: 1e9,
        };
        s.set_capacity(slow).unwrap();
        assert_eq!(s.capacity(), slow);
        match s.policy() {
            PolicyConfig::Mclock(m) => {
                assert_eq!((m.profile.as_str(), m.capacity_iops), ("balanced", 1_000.0))
            }
            other => panic!("the policy changed: {other:?}"),
        }
        let second = hold_the_slot(&s).await;
        assert_eq!(in_flight(&s), 50_000 + 1_000_000, "then 1 ms");
        for iops in [0.0, -1.0, 0.5, f64::NAN, f64::INFINITY, 1e8] {
            let bad = DeviceCapacity {
                random_4k_iops: iops,
                ..slow
            };
            assert!(s.set_capacity(bad).is_err(), "{iops} IOPS");
        }
        for bandwidth in [0.0, 1e5, f64::NAN, 1e13] {
            let bad = DeviceCapacity {
                seq_bandwidth_bytes_per_s: bandwidth,
                ..slow
            };
            assert!(s.set_capacity(bad).is_err(), "{bandwidth} bytes/s");
        }
        assert_eq!(s.capacity(), slow, "a refused capacity changes nothing");
        let stale = MClockConfig::profile(cairn_qos::config::Profile::HighRecoveryOps, 21_500.0);
        s.set_policy(PolicyConfig::Mclock(stale)).unwrap();
        match s.policy() {
            PolicyConfig::Mclock(m) => assert_eq!(
                (m.profile.as_str(), m.capacity_iops),
                ("high_recovery_ops", 1_000.0),
                "a policy set later takes the capacity in force"
            ),
            other => panic!("not mClock: {other:?}"),
        }
        drop((first, second));
        let fifo = scheduler(1);
        fifo.set_capacity(slow).unwrap();
        assert_eq!(
            fifo.policy(),
            PolicyConfig::Fifo,
            "no mClock: the policy stays"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn released_work_stays_within_the_device_time_limit() {
        let s = cost_limited(PolicyConfig::Fifo, 2.5);
        let started = Arc::new(AtomicUsize::new(0));
        let gate = Arc::new(Semaphore::new(0));
        for i in 0..6u64 {
            let (started, gate) = (started.clone(), gate.clone());
            s.submit(PG, w(QosClass::Recovery, i, 4 << 20), async move {
                started.fetch_add(1, Ordering::SeqCst);
                gate.acquire().await.unwrap().forget();
            })
            .unwrap();
        }
        assert_eq!(
            settled_count(&started, 3).await,
            3,
            "released while under 2.5 requests' device time (the third overshoots), with 64 slots free"
        );
        gate.add_permits(1);
        assert_eq!(
            settled_count(&started, 4).await,
            4,
            "one ended, one more released"
        );
        gate.add_permits(6);
        assert_eq!(settled_count(&started, 6).await, 6, "every request ran");
    }

    /// The count once it has reached `expected` (or 5 s passed) and then held for 100 ms: a
    /// loaded host may start tasks late, and one too many shows in the hold.
    async fn settled_count(count: &AtomicUsize, expected: usize) -> usize {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while count.load(Ordering::SeqCst) < expected && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        count.load(Ordering::SeqCst)
    }

    /// 20 recovery writes of 4 MiB are queued on a device that serves one request at a time
    /// (5 ms each), then a client write. The policy favours clients (mClock weights 4:1) and
    /// does not pace recovery (no limit on either class): with the device-time limit the client
    /// write completes after the few recovery writes it let through; without it every recovery
    /// write is released at once and queues on the device ahead of the client's, whatever the
    /// policy would have chosen.
    async fn client_position_behind_recovery(limit_in_4mib: f64) -> usize {
        let class = |weight| ClassParams {
            reservation: 0.0,
            weight,
            limit: 0.0,
        };
        let cfg = MClockConfig {
            profile: "custom".into(),
            capacity_iops: 20_000.0,
            custom: Some([class(4.0), class(1.0), class(1.0)]),
            ..MClockConfig::default()
        };
        let s = cost_limited(PolicyConfig::Mclock(cfg), limit_in_4mib);
        let device = Arc::new(tokio::sync::Mutex::new(()));
        let done = Arc::new(StdMutex::new(Vec::new()));
        let served = |what: String,
                      device: Arc<tokio::sync::Mutex<()>>,
                      done: Arc<StdMutex<Vec<String>>>| async move {
            let _busy = device.lock().await;
            tokio::time::sleep(Duration::from_millis(5)).await;
            done.lock().unwrap().push(what);
        };
        for i in 0..20u64 {
            let job = served(format!("recovery {i}"), device.clone(), done.clone());
            s.submit(PG, w(QosClass::Recovery, 1, 4 << 20), job)
                .unwrap();
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
        let job = served("client".into(), device.clone(), done.clone());
        tokio::time::timeout(
            Duration::from_secs(5),
            s.run(PG, w(QosClass::Client, 2, 4096), job),
        )
        .await
        .expect("client write ran")
        .unwrap();
        let done = done.lock().unwrap().clone();
        done.iter().position(|d| d == "client").unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_client_write_waits_behind_the_limit_not_behind_every_queued_recovery_write() {
        let limited = client_position_behind_recovery(2.0).await;
        assert!(
            limited <= 4,
            "{limited} recovery writes served before the client's"
        );
        let unlimited = client_position_behind_recovery(0.0).await;
        assert!(unlimited >= 15, "without the limit: {unlimited} before it");
    }

    /// Under WPQ with one slot, recovery queued before a burst of client writes: the order of
    /// release and the history it leaves.
    async fn wpq_release_order(recovery_priority: &str) -> Vec<ReleasedRequest> {
        let s = sharded(PolicyConfig::by_name("wpq").unwrap(), 1, 1);
        s.priorities()
            .set("osd_recovery_op_priority", recovery_priority)
            .unwrap();
        let gate = Arc::new(tokio::sync::Semaphore::new(0));
        let g = gate.clone();
        let blocker = Work::new(Purpose::ClientOp, 99, cairn_qos::OpKind::Other);
        s.submit(PG, blocker, async move {
            let _ = g.acquire().await;
        })
        .unwrap();
        let mut waiting = Vec::new();
        for i in 0..20u64 {
            let work = Work::new(Purpose::Recovery, 1, cairn_qos::OpKind::Write).on(
                &format!("r{i}"),
                0,
                64 << 10,
            );
            let s2 = s.clone();
            waiting.push(tokio::spawn(
                async move { s2.run(PG, work, async {}).await },
            ));
        }
        for i in 0..20u64 {
            let work = Work::new(Purpose::ClientOp, 2 + i % 2, cairn_qos::OpKind::Read).on(
                "c",
                i * 4096,
                4096,
            );
            let s2 = s.clone();
            waiting.push(tokio::spawn(
                async move { s2.run(PG, work, async {}).await },
            ));
        }
        while s.shards[0].queue().len() < 40 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        gate.add_permits(1);
        for w in waiting {
            tokio::time::timeout(Duration::from_secs(5), w)
                .await
                .expect("released")
                .unwrap()
                .unwrap();
        }
        s.history()
            .into_iter()
            .filter(|r| r.client_id != 99)
            .collect()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn wpq_puts_clients_ahead_of_recovery_by_ceph_priorities_and_the_history_says_so() {
        let h = wpq_release_order("3").await;
        assert_eq!(h.len(), 40);
        let clients_in_first_20 = h[..20]
            .iter()
            .filter(|r| r.purpose == Purpose::ClientOp)
            .count();
        assert!(
            clients_in_first_20 >= 18,
            "63 against 3: {clients_in_first_20} of the first 20 released were clients"
        );
        let rec = h.iter().find(|r| r.purpose == Purpose::Recovery).unwrap();
        assert_eq!((rec.class, rec.priority), (QosClass::Recovery, 3));
        assert_eq!(rec.op, cairn_qos::OpKind::Write);
        assert_eq!(rec.length_bytes, 64 << 10);
        let client_reads: Vec<_> = h
            .iter()
            .filter(|r| r.purpose == Purpose::ClientOp)
            .collect();
        assert!(client_reads.iter().all(|r| r.priority == 63
            && r.op == cairn_qos::OpKind::Read
            && r.object_id == Some(crate::work::object_id("c"))));
        let mut offsets: Vec<u64> = client_reads.iter().map(|r| r.offset_bytes).collect();
        offsets.sort_unstable();
        assert_eq!(offsets, (0..20).map(|i| i * 4096).collect::<Vec<_>>());

        // Recovery at the client's priority (the seed's "BST" setting): the two alternate.
        let even = wpq_release_order("63").await;
        let clients_in_first_20 = even[..20]
            .iter()
            .filter(|r| r.purpose == Purpose::ClientOp)
            .count();
        assert!(
            (5..=15).contains(&clients_in_first_20),
            "equal priorities: {clients_in_first_20} of the first 20 were clients"
        );
    }

    #[tokio::test]
    async fn work_queued_after_stop_is_refused_and_holds_nothing() {
        let s = scheduler(1);
        s.stop();
        let held = Arc::new(());
        let job_holds = held.clone();
        let refused = s.submit(PG, w(QosClass::Client, 1, 4096), async move {
            drop(job_holds);
        });
        assert!(matches!(refused, Err(OsdError::Stopping)), "{refused:?}");
        assert_eq!(
            Arc::strong_count(&held),
            1,
            "the refused job was dropped at once"
        );
        let ran = s.run(PG, w(QosClass::Recovery, 1, 4096), async { 1 }).await;
        assert!(matches!(ran, Err(OsdError::Stopping)), "{ran:?}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_request_costlier_than_the_whole_limit_still_runs() {
        let s = cost_limited(PolicyConfig::Fifo, 0.001);
        for _ in 0..3 {
            let got = s.run(PG, w(QosClass::Recovery, 1, 16 << 20), async { 5 });
            let got = tokio::time::timeout(Duration::from_secs(5), got).await;
            assert_eq!(got.expect("ran").unwrap(), 5);
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn run_returns_the_work_result_whether_dispatched_here_or_by_the_dispatcher() {
        let s = scheduler(4);
        for i in 0..100u64 {
            let got = s.run(PG, w(QosClass::Client, i % 3, 4096), async move { i * 2 });
            assert_eq!(got.await.unwrap(), i * 2);
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_caller_never_runs_beyond_the_in_flight_limit_and_the_policy_keeps_its_order() {
        let s = scheduler(1);
        let release = hold_the_slot(&s).await;
        let order = Arc::new(StdMutex::new(Vec::new()));
        let mut waiters = Vec::new();
        for i in 0..5u64 {
            let (s2, order2) = (s.clone(), order.clone());
            waiters.push(tokio::spawn(async move {
                s2.run(PG, w(QosClass::Client, i, 4096), async move {
                    order2.lock().unwrap().push(i);
                })
                .await
                .unwrap();
            }));
            // Each caller has queued before the next one starts (FIFO order = this order).
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(
            order.lock().unwrap().is_empty(),
            "ran while the only slot was held"
        );
        release.send(()).unwrap();
        for w in waiters {
            tokio::time::timeout(Duration::from_secs(5), w)
                .await
                .expect("queued request never ran")
                .unwrap();
        }
        assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3, 4]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_caller_with_a_free_slot_still_lets_the_policy_pick_an_older_request() {
        for _ in 0..20 {
            let s = scheduler(1);
            let release = hold_the_slot(&s).await;
            let order = Arc::new(StdMutex::new(Vec::new()));
            let (s2, order2) = (s.clone(), order.clone());
            let older = tokio::spawn(async move {
                s2.run(PG, w(QosClass::Client, 1, 4096), async move {
                    order2.lock().unwrap().push("older");
                })
                .await
                .unwrap();
            });
            tokio::time::sleep(Duration::from_millis(5)).await;
            // The slot frees as this caller arrives: FIFO must still run the older one first.
            release.send(()).unwrap();
            let order3 = order.clone();
            s.run(PG, w(QosClass::Client, 2, 4096), async move {
                order3.lock().unwrap().push("newer");
            })
            .await
            .unwrap();
            older.await.unwrap();
            assert_eq!(*order.lock().unwrap(), vec!["older", "newer"]);
        }
    }

    #[test]
    fn every_pg_has_one_shard_and_the_pgs_of_a_pool_spread_over_all_shards() {
        let rt = tokio::runtime::Runtime::new().unwrap();
        let _in_runtime = rt.enter();
        let s = sharded(PolicyConfig::Fifo, 64, 4);
        let mut per_shard = [0usize; 4];
        for seed in 0..256 {
            let pg = PgId { pool: 3, seed };
            assert_eq!(s.shard_of(pg), s.shard_of(pg));
            per_shard[s.shard_of(pg)] += 1;
        }
        assert!(
            per_shard.iter().all(|n| (32..=96).contains(n)),
            "256 PGs over 4 shards: {per_shard:?}"
        );
        let limits = InFlightLimits {
            ops: 64,
            cost_ns: 0,
        };
        assert!(OpScheduler::new(PolicyConfig::Fifo, s.shards[0].cost(), limits, 0).is_err());
        assert!(OpScheduler::new(PolicyConfig::Fifo, s.shards[0].cost(), limits, 65).is_err());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_shard_with_every_slot_taken_does_not_hold_back_another_shards_pgs() {
        // Two shards, one slot each.
        let s = sharded(PolicyConfig::Fifo, 2, 2);
        let busy = pg_in(&s, 0, None);
        let release = hold_a_slot_of(&s, busy).await;
        let other = pg_in(&s, 1, None);
        let ran = tokio::time::timeout(
            Duration::from_secs(5),
            s.run(other, w(QosClass::Client, 1, 4096), async { 7 }),
        )
        .await
        .expect("the other shard's PG waited for the busy shard");
        assert_eq!(ran.unwrap(), 7);
        // A second PG of the busy shard waits for its slot, and runs once it is free.
        let same = pg_in(&s, 0, Some(busy));
        let s2 = s.clone();
        let waiting = tokio::spawn(async move {
            s2.run(same, w(QosClass::Client, 1, 4096), async { 8 })
                .await
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(
            !waiting.is_finished(),
            "ran beyond its shard's in-flight limit"
        );
        release.send(()).unwrap();
        let got = tokio::time::timeout(Duration::from_secs(5), waiting).await;
        assert_eq!(got.expect("never ran").unwrap().unwrap(), 8);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_mclock_limit_holds_for_the_osd_not_per_shard() {
        // Clients limited to 1% of 20k 4 KiB IOPS = 200 requests/s over the whole OSD.
        let class = |limit| ClassParams {
            reservation: 0.0,
            weight: 1.0,
            limit,
        };
        let cfg = MClockConfig {
            profile: "custom".into(),
            capacity_iops: 20_000.0,
            custom: Some([class(0.01), class(0.0), class(0.0)]),
            ..MClockConfig::default()
        };
        let s = sharded(PolicyConfig::Mclock(cfg), 64, 4);
        let done = Arc::new(AtomicUsize::new(0));
        for seed in 0..400u32 {
            let d = done.clone();
            let pg = PgId { pool: 1, seed };
            s.submit(pg, w(QosClass::Client, 1, 4096), async move {
                d.fetch_add(1, Ordering::Relaxed);
            })
            .unwrap();
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let in_half_a_second = done.load(Ordering::Relaxed);
        // Per shard, four shards would serve all 400 in half a second (4 x 200/s).
        assert!(
            in_half_a_second <= 150,
            "{in_half_a_second} requests in 0.5 s against an OSD-wide limit of 200/s"
        );
        tokio::time::timeout(Duration::from_secs(10), async {
            while done.load(Ordering::Relaxed) < 400 {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
        .expect("the limited requests never all ran");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_policy_switch_reaches_every_shard_and_a_bad_one_changes_none() {
        let s = sharded(PolicyConfig::Fifo, 8, 3);
        s.set_policy(PolicyConfig::by_name("wpq").unwrap()).unwrap();
        for shard in &s.shards {
            assert_eq!(shard.policy().name(), "wpq");
        }
        let bad = PolicyConfig::Mclock(MClockConfig {
            profile: "no_such_profile".into(),
            ..MClockConfig::default()
        });
        assert!(s.set_policy(bad).is_err());
        for shard in &s.shards {
            assert_eq!(shard.policy().name(), "wpq");
        }
        let got = s.run(pg_in(&s, 2, None), w(QosClass::Client, 1, 4096), async {
            3
        });
        assert_eq!(got.await.unwrap(), 3);
        let metrics = page_of(&s);
        assert!(metrics.contains("cairn_osd_sched_shard_queued{osd=\"0\",shard=\"2\"} 0"));
        assert!(metrics.contains("cairn_osd_sched_dispatched_total{osd=\"0\",class=\"client\"} 1"));
    }

    /// The scheduler's part of a metrics page, as OSD 0 shows it.
    fn page_of(s: &Arc<OpScheduler>) -> String {
        let s = s.clone();
        cairn_metrics::render(move |e| s.encode(e, "0"))
    }

    /// The value of the metric line starting with `prefix` (labels included).
    fn metric(page: &str, prefix: &str) -> f64 {
        page.lines()
            .find_map(|l| l.strip_prefix(prefix))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {prefix} in\n{page}"))
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn wait_times_are_reported_by_class_over_all_shards() {
        // Two shards, one slot each: recovery work queued behind a held slot waits for it.
        let s = sharded(PolicyConfig::Fifo, 2, 2);
        // Waits count from each request's arrival, not from the scheduler's start.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let busy = pg_in(&s, 0, None);
        let release = hold_a_slot_of(&s, busy).await;
        let s2 = s.clone();
        let waiting =
            tokio::spawn(
                async move { s2.run(busy, w(QosClass::Recovery, 1, 4096), async {}).await },
            );
        let other = pg_in(&s, 1, None);
        s.run(other, w(QosClass::Client, 1, 4096), async {})
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        release.send(()).unwrap();
        waiting.await.unwrap().unwrap();
        let page = page_of(&s);
        let wait = |class: &str, what: &str| {
            let suffix = match what.strip_prefix("le=") {
                Some(le) => format!("_bucket{{osd=\"0\",class=\"{class}\",le=\"{le}\"}}"),
                None => format!("_{what}{{osd=\"0\",class=\"{class}\"}}"),
            };
            metric(&page, &format!("cairn_osd_sched_wait_seconds{suffix}"))
        };
        assert_eq!(
            wait("client", "count"),
            2.0,
            "the holder and the other shard's request"
        );
        assert!(wait("client", "sum") < 0.1, "{page}");
        assert_eq!(wait("recovery", "count"), 1.0);
        assert!((0.2..0.45).contains(&wait("recovery", "sum")), "{page}");
        assert_eq!(wait("recovery", "le=0.1"), 0.0, "one 0.2 s wait: {page}");
        assert_eq!(wait("recovery", "le=0.5"), 1.0, "one 0.2 s wait: {page}");
        assert_eq!(wait("best_effort", "count"), 0.0);
    }
}
