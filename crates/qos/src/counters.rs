//! Per-class and per-client counters: queued, dispatched by phase, wait-time histogram,
//! throttled time. Owns only accounting; it never influences scheduling decisions.

use crate::hist::Histogram;
use crate::request::{QosClass, Request};
use crate::scheduler::Phase;
use std::collections::HashMap;

/// Default cap on clients tracked individually (the rest are summed in `untracked`).
pub const DEFAULT_MAX_TRACKED_CLIENTS: usize = 100_000;

/// Counters of one class or client.
#[derive(Clone, Debug, PartialEq)]
pub struct Counters {
    /// Requests queued now.
    pub queued: u64,
    /// Requests accepted in total.
    pub enqueued: u64,
    /// Requests dispatched, by phase (index = `Phase::index`).
    pub dispatched: [u64; 3],
    /// Sum of dispatched cost (device ns).
    pub dispatched_cost_ns: u64,
    /// Wait time (enqueue to dispatch) histogram.
    pub wait: Histogram,
    /// Time its requests spent queued while the scheduler was throttling (nothing eligible).
    pub throttled_ns: u64,
}

impl Counters {
    fn new(sub_bits: u32) -> Counters {
        Counters {
            queued: 0,
            enqueued: 0,
            dispatched: [0; 3],
            dispatched_cost_ns: 0,
            wait: Histogram::new(sub_bits),
            throttled_ns: 0,
        }
    }

    /// Total requests dispatched in any phase.
    pub fn dispatched_total(&self) -> u64 {
        self.dispatched.iter().sum()
    }

    /// Requests dispatched in `phase`.
    pub fn dispatched_in(&self, phase: Phase) -> u64 {
        self.dispatched[phase.index()]
    }

    fn on_enqueue(&mut self) {
        self.queued += 1;
        self.enqueued += 1;
    }

    fn on_dispatch(&mut self, req: &Request, phase: Phase, wait_ns: u64, throttled_ns: u64) {
        self.queued = self.queued.saturating_sub(1);
        self.dispatched[phase.index()] += 1;
        self.dispatched_cost_ns += req.cost_ns;
        self.wait.record(wait_ns);
        self.throttled_ns += throttled_ns;
    }
}

/// All counters of one scheduler.
#[derive(Clone, Debug)]
pub struct SchedulerCounters {
    classes: Vec<Counters>,
    clients: HashMap<u64, Counters, crate::fasthash::BuildFastHasher>,
    untracked: Counters,
    max_tracked_clients: usize,
    /// Requests a policy refused and FIFO took.
    pub refused_to_fifo: u64,
}

impl SchedulerCounters {
    /// Empty counters tracking at most `max_tracked_clients` clients individually.
    pub fn new(max_tracked_clients: usize) -> SchedulerCounters {
        SchedulerCounters {
            classes: QosClass::ALL.iter().map(|_| Counters::new(3)).collect(),
            clients: HashMap::default(),
            untracked: Counters::new(0),
            max_tracked_clients,
            refused_to_fifo: 0,
        }
    }

    /// Counters of a class.
    pub fn class(&self, class: QosClass) -> &Counters {
        &self.classes[class.index()]
    }

    /// Counters of a client (None if never seen or not tracked).
    pub fn client(&self, client_id: u64) -> Option<&Counters> {
        self.clients.get(&client_id)
    }

    /// Sum over clients beyond the tracking cap.
    pub fn untracked(&self) -> &Counters {
        &self.untracked
    }

    fn client_mut(&mut self, client_id: u64) -> &mut Counters {
        if self.clients.len() < self.max_tracked_clients || self.clients.contains_key(&client_id) {
            self.clients
                .entry(client_id)
                .or_insert_with(|| Counters::new(0))
        } else {
            &mut self.untracked
        }
    }

    pub(crate) fn on_enqueue(&mut self, req: &Request) {
        self.classes[req.class.index()].on_enqueue();
        self.client_mut(req.client_id).on_enqueue();
    }

    pub(crate) fn on_dispatch(&mut self, req: &Request, phase: Phase, now_ns: u64, throttled: u64) {
        let wait = now_ns.saturating_sub(req.arrival_ns);
        self.classes[req.class.index()].on_dispatch(req, phase, wait, throttled);
        self.client_mut(req.client_id)
            .on_dispatch(req, phase, wait, throttled);
    }
}
