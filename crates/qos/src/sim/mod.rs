//! Deterministic virtual-time simulator: sources issue requests, a `QosQueue` orders them, a
//! simulated device serves them. Same scenario + seed = same result, bit for bit.
//!
//! Owns the scenario format (also what `cairn sched simulate` reads), the event loop and the
//! report. Never reads the wall clock; randomness comes from ChaCha8 seeded by the scenario.

pub mod device;
pub mod replay;
pub mod verdict;

use crate::config::PolicyConfig;
use crate::convert::{sat_u64, u32_of, usize_of};
use crate::cost::{CostModel, DeviceCapacity};
use crate::error::{invalid, QosError};
use crate::hist::Histogram;
use crate::queue::QosQueue;
use crate::request::{OpKind, QosClass, Request};
use crate::scheduler::Dequeued;
use device::{Device, DeviceModel, HddSeek};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

/// Longest scenario accepted (virtual seconds).
pub const MAX_DURATION_S: f64 = 3600.0;
/// Most sources in one scenario.
pub const MAX_SOURCES: usize = 100_000;

/// A simulation scenario (TOML: see `scenarios/`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Free-form title.
    #[serde(default)]
    pub title: String,
    /// Virtual duration.
    pub duration_s: f64,
    /// Accounting window (QoS verdicts are per window).
    #[serde(default = "one")]
    pub window_s: f64,
    /// Seed of all randomness.
    #[serde(default)]
    pub seed: u64,
    /// The device.
    pub device: DeviceSpec,
    /// The scheduler policy at time 0.
    pub policy: PolicyConfig,
    /// Request sources.
    #[serde(default)]
    pub sources: Vec<SourceSpec>,
    /// Policy changes at run time (hot swap or reconfiguration).
    #[serde(default)]
    pub changes: Vec<PolicyChange>,
    /// Keep every dispatch (time, cost, bytes) per source for sliding-window checks.
    #[serde(default)]
    pub record_dispatches: bool,
}

fn one() -> f64 {
    1.0
}

/// Device section of a scenario.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceSpec {
    /// Random 4 KiB write IOPS.
    pub random_4k_iops: f64,
    /// Sequential bandwidth.
    pub seq_bandwidth_bytes_per_s: f64,
    /// Requests outstanding at the device (>= 1; served in arrival order).
    #[serde(default = "one_usize")]
    pub in_flight: usize,
    /// Optional HDD seek model.
    #[serde(default)]
    pub hdd: Option<HddSeek>,
}

fn one_usize() -> usize {
    1
}

/// A policy change at a point in virtual time.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyChange {
    /// When.
    pub at_s: f64,
    /// New config (same policy: reconfigure; other policy: hot swap).
    pub policy: PolicyConfig,
}

/// One request source.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceSpec {
    /// Name in reports.
    pub name: String,
    /// Service class.
    #[serde(default = "default_class")]
    pub class: QosClass,
    /// Client id.
    #[serde(default)]
    pub client_id: u64,
    /// Operation.
    #[serde(default = "default_op")]
    pub op: OpKind,
    /// Request size.
    #[serde(default = "default_size")]
    pub size_bytes: u64,
    /// wpq priority (default: client 63, immediate 255, others 3).
    #[serde(default)]
    pub priority: Option<u8>,
    /// Closed loop: keep this many requests outstanding.
    #[serde(default)]
    pub depth: Option<u32>,
    /// Open loop: this many requests per second.
    #[serde(default)]
    pub rate_rps: Option<f64>,
    /// Open loop with exponential gaps instead of even spacing.
    #[serde(default)]
    pub poisson: bool,
    /// First request time.
    #[serde(default)]
    pub start_s: f64,
    /// No new request after this time.
    #[serde(default)]
    pub stop_s: Option<f64>,
    /// Objects touched: ids `object_base .. object_base + objects`.
    #[serde(default = "one_u64")]
    pub objects: u64,
    /// First object id.
    #[serde(default)]
    pub object_base: u64,
    /// Object size (offsets stay inside it).
    #[serde(default = "default_object_size")]
    pub object_size_bytes: u64,
    /// Sequential offsets within each object (objects in turn) instead of random ones.
    #[serde(default)]
    pub sequential: bool,
    /// Requests carry no object id (e.g. to exercise the FIFO fallback of orr).
    #[serde(default)]
    pub no_object: bool,
    /// Job id for TBF rules.
    #[serde(default)]
    pub job_id: Option<u32>,
    /// Target device id.
    #[serde(default)]
    pub target: u32,
}

fn default_class() -> QosClass {
    QosClass::Client
}
fn default_op() -> OpKind {
    OpKind::Write
}
fn default_size() -> u64 {
    4096
}
fn one_u64() -> u64 {
    1
}
fn default_object_size() -> u64 {
    4 << 20
}

impl SourceSpec {
    /// A closed-loop source with defaults for everything else.
    pub fn closed(
        name: &str,
        class: QosClass,
        client_id: u64,
        depth: u32,
        size_bytes: u64,
    ) -> Self {
        SourceSpec {
            name: name.to_string(),
            class,
            client_id,
            op: OpKind::Write,
            size_bytes,
            priority: None,
            depth: Some(depth),
            rate_rps: None,
            poisson: false,
            start_s: 0.0,
            stop_s: None,
            objects: 1,
            object_base: client_id << 20,
            object_size_bytes: 4 << 20,
            sequential: false,
            no_object: false,
            job_id: None,
            target: 0,
        }
    }

    /// An open-loop source at `rate_rps`.
    pub fn open(
        name: &str,
        class: QosClass,
        client_id: u64,
        rate_rps: f64,
        size_bytes: u64,
    ) -> Self {
        SourceSpec {
            depth: None,
            rate_rps: Some(rate_rps),
            ..SourceSpec::closed(name, class, client_id, 1, size_bytes)
        }
    }

    fn priority(&self) -> u8 {
        self.priority.unwrap_or(match self.class {
            QosClass::Client => 63,
            QosClass::Immediate => 255,
            _ => 3,
        })
    }
}

impl Scenario {
    /// Parses and validates a TOML scenario.
    pub fn from_toml(text: &str) -> Result<Scenario, QosError> {
        let s: Scenario = toml::from_str(text).map_err(|e| QosError::Config(e.to_string()))?;
        s.validate()?;
        Ok(s)
    }

    /// Checks ranges and limits.
    pub fn validate(&self) -> Result<(), QosError> {
        if !(self.duration_s.is_finite()
            && self.duration_s > 0.0
            && self.duration_s <= MAX_DURATION_S)
        {
            return Err(invalid(
                "duration_s",
                format!("must be in (0, {MAX_DURATION_S}]"),
            ));
        }
        if !(self.window_s.is_finite()
            && self.window_s >= 0.001
            && self.window_s <= self.duration_s)
        {
            return Err(invalid("window_s", "must be in [0.001, duration_s]"));
        }
        if self.device.in_flight == 0 || self.device.in_flight > 4096 {
            return Err(invalid("device.in_flight", "must be in 1..=4096"));
        }
        CostModel::from_capacity(self.capacity())?;
        if self.sources.len() > MAX_SOURCES {
            return Err(invalid("sources", format!("at most {MAX_SOURCES}")));
        }
        for s in &self.sources {
            match (s.depth, s.rate_rps) {
                (Some(d), None) if (1..=65536).contains(&d) => {}
                (None, Some(r)) if r.is_finite() && r > 0.0 && r <= 1e8 => {}
                _ => {
                    return Err(invalid(
                        &s.name,
                        "needs exactly one of depth (1..=65536) or rate_rps (0, 1e8]",
                    ))
                }
            }
            if s.size_bytes == 0 || s.size_bytes > 1 << 30 || s.objects == 0 {
                return Err(invalid(
                    &s.name,
                    "size_bytes must be in 1..=1 GiB and objects >= 1",
                ));
            }
            if s.object_size_bytes < s.size_bytes {
                return Err(invalid(&s.name, "object_size_bytes must be >= size_bytes"));
            }
            if !(s.start_s.is_finite() && s.start_s >= 0.0) {
                return Err(invalid(&s.name, "start_s must be >= 0"));
            }
        }
        for c in &self.changes {
            if !(c.at_s.is_finite() && c.at_s >= 0.0) {
                return Err(invalid("changes.at_s", "must be >= 0"));
            }
            crate::config::build_policy(&c.policy)?;
        }
        crate::config::build_policy(&self.policy)?;
        Ok(())
    }

    /// The device capacity.
    pub fn capacity(&self) -> DeviceCapacity {
        DeviceCapacity {
            random_4k_iops: self.device.random_4k_iops,
            seq_bandwidth_bytes_per_s: self.device.seq_bandwidth_bytes_per_s,
        }
    }
}

/// One dispatch, kept when `record_dispatches` is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DispatchRecord {
    /// Dispatch time.
    pub at_ns: u64,
    /// Request cost.
    pub cost_ns: u64,
    /// Request length.
    pub bytes: u64,
    /// Request id.
    pub id: u64,
}

/// What happened to one source.
#[derive(Clone, Debug)]
pub struct SourceReport {
    /// Source name.
    pub name: String,
    /// Class.
    pub class: QosClass,
    /// Client id.
    pub client_id: u64,
    /// Requests issued.
    pub issued: u64,
    /// Requests completed.
    pub completed: u64,
    /// Bytes completed.
    pub completed_bytes: u64,
    /// Requests dispatched per window.
    pub window_ops: Vec<u64>,
    /// Cost dispatched per window (device ns).
    pub window_cost_ns: Vec<u64>,
    /// Bytes dispatched per window.
    pub window_bytes: Vec<u64>,
    /// Scheduler wait (arrival to dispatch).
    pub wait: Histogram,
    /// Latency (arrival to completion).
    pub latency: Histogram,
    /// Every dispatch, if recorded.
    pub dispatches: Vec<DispatchRecord>,
}

impl SourceReport {
    /// Completed requests per second over `duration_s`.
    pub fn iops(&self, duration_s: f64) -> f64 {
        self.completed as f64 / duration_s
    }
}

/// Result of a run.
pub struct SimReport {
    /// Virtual duration.
    pub duration_ns: u64,
    /// Window length.
    pub window_ns: u64,
    /// Per source, in scenario order.
    pub sources: Vec<SourceReport>,
    /// Total head movement of the device.
    pub seek_distance_bytes: u128,
    /// Time the device was busy.
    pub device_busy_ns: u64,
    /// The scheduler at the end (counters, policy).
    pub queue: QosQueue,
    /// Requests still queued or in flight at the end.
    pub left_queued: usize,
    /// Ids dispatched, in dispatch order (for loss/order checks).
    pub dispatch_order: Vec<(u64, u64)>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    Change(u32),
    Complete,
    Arrival(u32),
    Wake,
}

struct SrcState {
    rng: ChaCha8Rng,
    seq_cursor: u64,
}

struct Engine<'a> {
    scn: &'a Scenario,
    cost: CostModel,
    queue: QosQueue,
    device: Device,
    in_device: VecDeque<(Request, u64)>,
    serving_until: Option<u64>,
    events: BinaryHeap<Reverse<(u64, u64, Ev)>>,
    ev_seq: u64,
    wake_at: Option<u64>,
    next_id: u64,
    src: Vec<SrcState>,
    reports: Vec<SourceReport>,
    owner: std::collections::HashMap<u64, u32>,
    duration_ns: u64,
    window_ns: u64,
    busy_ns: u64,
    dispatch_order: Vec<(u64, u64)>,
}

fn secs(s: f64) -> u64 {
    sat_u64((s * 1e9).round())
}

impl Engine<'_> {
    fn push(&mut self, t: u64, ev: Ev) {
        self.ev_seq += 1;
        self.events.push(Reverse((t, self.ev_seq, ev)));
    }

    fn make_request(&mut self, si: u32, now: u64) -> Request {
        let spec = &self.scn.sources[si as usize];
        let st = &mut self.src[si as usize];
        let slots = (spec.object_size_bytes / spec.size_bytes).max(1);
        let (obj_index, slot) = if spec.sequential {
            let n = st.seq_cursor;
            st.seq_cursor += 1;
            ((n / slots) % spec.objects, n % slots)
        } else {
            (
                st.rng.random_range(0..spec.objects),
                st.rng.random_range(0..slots),
            )
        };
        let object = spec.object_base + obj_index;
        let offset = slot * spec.size_bytes;
        let span = self
            .scn
            .device
            .hdd
            .map_or(u64::MAX, |h| h.span_bytes.max(1));
        let physical = (object.wrapping_mul(spec.object_size_bytes) % span).saturating_add(offset);
        self.next_id += 1;
        Request {
            id: self.next_id,
            class: spec.class,
            client_id: spec.client_id,
            op: spec.op,
            target: spec.target,
            object_id: if spec.no_object { None } else { Some(object) },
            offset_bytes: offset,
            physical_offset_bytes: Some(physical),
            length_bytes: spec.size_bytes,
            job_id: spec.job_id,
            priority: spec.priority(),
            cost_ns: self.cost.cost_ns(spec.size_bytes),
            arrival_ns: now,
            dmclock_delta: 0,
            dmclock_rho: 0,
            throttle_mark_ns: 0,
        }
    }

    fn issue(&mut self, si: u32, now: u64) {
        let req = self.make_request(si, now);
        self.owner.insert(req.id, si);
        self.reports[si as usize].issued += 1;
        if self.queue.enqueue(req, now).is_err() {
            // Queue full: the request is dropped at the door (counted as issued, never done).
            self.owner.remove(&req.id);
        }
    }

    fn stop_of(&self, si: u32) -> u64 {
        self.scn.sources[si as usize]
            .stop_s
            .map_or(u64::MAX, secs)
            .min(self.duration_ns)
    }

    fn start_service(&mut self, now: u64) {
        if self.serving_until.is_some() {
            return;
        }
        if let Some((req, _)) = self.in_device.front() {
            let req = *req;
            let t = self.device.serve(&req);
            self.busy_ns += t;
            self.serving_until = Some(now + t);
            self.push(now + t, Ev::Complete);
        }
    }

    fn dispatch(&mut self, now: u64) {
        while self.in_device.len() < self.scn.device.in_flight {
            match self.queue.dequeue(now) {
                Dequeued::Request(d) => {
                    let req = d.req;
                    if let Some(&si) = self.owner.get(&req.id) {
                        let r = &mut self.reports[si as usize];
                        r.wait.record(now - req.arrival_ns);
                        let w = usize_of(now / self.window_ns);
                        if w < r.window_ops.len() {
                            r.window_ops[w] += 1;
                            r.window_cost_ns[w] += req.cost_ns;
                            r.window_bytes[w] += req.length_bytes;
                        }
                        if self.scn.record_dispatches {
                            r.dispatches.push(DispatchRecord {
                                at_ns: now,
                                cost_ns: req.cost_ns,
                                bytes: req.length_bytes,
                                id: req.id,
                            });
                        }
                    }
                    self.dispatch_order.push((req.client_id, req.id));
                    self.in_device.push_back((req, now));
                    self.start_service(now);
                }
                Dequeued::NothingBefore(t) => {
                    let t = t.max(now + 1);
                    if self.wake_at.is_none_or(|w| w <= now || t < w) {
                        self.wake_at = Some(t);
                        self.push(t, Ev::Wake);
                    }
                    break;
                }
                Dequeued::Empty => break,
            }
        }
    }

    fn complete(&mut self, now: u64) {
        self.serving_until = None;
        let Some((req, _)) = self.in_device.pop_front() else {
            return;
        };
        if let Some(si) = self.owner.remove(&req.id) {
            let r = &mut self.reports[si as usize];
            r.completed += 1;
            r.completed_bytes += req.length_bytes;
            r.latency.record(now - req.arrival_ns);
            let spec = &self.scn.sources[si as usize];
            if spec.depth.is_some() && now < self.stop_of(si) {
                self.issue(si, now);
            }
        }
        self.start_service(now);
    }

    fn arrival(&mut self, si: u32, now: u64) {
        let spec = &self.scn.sources[si as usize];
        if let Some(depth) = spec.depth {
            if self.reports[si as usize].issued == 0 {
                for _ in 0..depth {
                    self.issue(si, now);
                }
            }
            return;
        }
        let rate = spec.rate_rps.unwrap_or(1.0);
        let poisson = spec.poisson;
        self.issue(si, now);
        let gap = if poisson {
            let u: f64 = self.src[si as usize].rng.random_range(f64::EPSILON..1.0);
            -u.ln() / rate
        } else {
            1.0 / rate
        };
        let next = now + sat_u64(gap * 1e9).max(1);
        if next < self.stop_of(si) {
            self.push(next, Ev::Arrival(si));
        }
    }
}

/// Runs a scenario; `progress` is called with the virtual time now and then.
pub fn run_with_progress(
    scn: &Scenario,
    progress: &mut dyn FnMut(u64),
) -> Result<SimReport, QosError> {
    scn.validate()?;
    let cost = CostModel::from_capacity(scn.capacity())?;
    let duration_ns = secs(scn.duration_s);
    let window_ns = secs(scn.window_s).max(1);
    let windows = usize_of(duration_ns.div_ceil(window_ns));
    let queue = QosQueue::new(scn.policy.clone())?;
    let model = DeviceModel {
        cost,
        in_flight: scn.device.in_flight,
        hdd: scn.device.hdd,
    };
    let mut eng = Engine {
        scn,
        cost,
        queue,
        device: Device::new(model),
        in_device: VecDeque::new(),
        serving_until: None,
        events: BinaryHeap::new(),
        ev_seq: 0,
        wake_at: None,
        next_id: 0,
        src: (0..scn.sources.len())
            .map(|i| SrcState {
                rng: ChaCha8Rng::seed_from_u64(
                    scn.seed ^ (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15),
                ),
                seq_cursor: 0,
            })
            .collect(),
        reports: scn
            .sources
            .iter()
            .map(|s| SourceReport {
                name: s.name.clone(),
                class: s.class,
                client_id: s.client_id,
                issued: 0,
                completed: 0,
                completed_bytes: 0,
                window_ops: vec![0; windows],
                window_cost_ns: vec![0; windows],
                window_bytes: vec![0; windows],
                wait: Histogram::new(6),
                latency: Histogram::new(6),
                dispatches: Vec::new(),
            })
            .collect(),
        owner: std::collections::HashMap::new(),
        duration_ns,
        window_ns,
        busy_ns: 0,
        dispatch_order: Vec::new(),
    };
    for (i, s) in scn.sources.iter().enumerate() {
        let t = secs(s.start_s);
        if t < duration_ns {
            eng.push(t, Ev::Arrival(u32_of(i)));
        }
    }
    for (i, c) in scn.changes.iter().enumerate() {
        let i = u32::try_from(i).map_err(|_| invalid("changes", "too many"))?;
        eng.push(secs(c.at_s), Ev::Change(i));
    }
    let mut last_progress = 0;
    while let Some(Reverse((t, _, ev))) = eng.events.pop() {
        if t > duration_ns {
            break;
        }
        match ev {
            Ev::Arrival(si) => eng.arrival(si, t),
            Ev::Complete => eng.complete(t),
            Ev::Wake => {
                if eng.wake_at == Some(t) {
                    eng.wake_at = None;
                }
            }
            Ev::Change(i) => {
                let cfg = scn.changes[i as usize].policy.clone();
                eng.queue.set_policy(cfg, t)?;
            }
        }
        eng.dispatch(t);
        if t >= last_progress + 100_000_000 {
            last_progress = t;
            progress(t);
        }
    }
    let left_queued = eng.queue.len() + eng.in_device.len();
    Ok(SimReport {
        duration_ns,
        window_ns,
        sources: eng.reports,
        seek_distance_bytes: eng.device.seek_distance_bytes,
        device_busy_ns: eng.busy_ns,
        queue: eng.queue,
        left_queued,
        dispatch_order: eng.dispatch_order,
    })
}

/// Runs a scenario.
pub fn run(scn: &Scenario) -> Result<SimReport, QosError> {
    run_with_progress(scn, &mut |_| {})
}
