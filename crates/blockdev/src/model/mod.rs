//! Timing models of real devices, and the engine that schedules requests through them.
//!
//! Owns the pure, clock-free description of how long a device takes: a [`TimingModel`] decides
//! which queued request starts next and when a started request completes, given the current time
//! in nanoseconds passed in. [`Engine`] is the queue discipline shared by the real-time
//! [`crate::EmulatedDevice`] and the virtual-time [`crate::capacity`] simulator, so both see the
//! same device. This module must never read a clock, sleep or draw unseeded randomness.

pub mod hdd;
pub mod nvme;

use crate::device::IoRequest;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

pub use hdd::{HddModel, HddParams, Reorder};
pub use nvme::{NvmeModel, NvmeParams};

/// A device's service-time behaviour.
pub trait TimingModel: Send + std::fmt::Debug {
    /// Index into `queue` (non-empty, in arrival order) of the request to start next at `now_ns`.
    fn pick(&mut self, now_ns: u64, queue: &[IoRequest]) -> usize;
    /// Starts `req` at `now_ns`; returns its completion time in ns (>= `now_ns`).
    fn start(&mut self, now_ns: u64, req: &IoRequest) -> u64;
    /// Most requests in service at once (1 for a single actuator).
    fn max_in_service(&self) -> usize;
}

/// Queue + in-service set around a [`TimingModel`]; generic over a per-request tag.
#[derive(Debug)]
pub struct Engine<T> {
    model: Box<dyn TimingModel>,
    queue: VecDeque<(IoRequest, T)>,
    in_service: BinaryHeap<Reverse<(u64, u64)>>,
    tags: std::collections::HashMap<u64, T>,
    next_id: u64,
}

impl<T> Engine<T> {
    /// An idle engine around `model`.
    pub fn new(model: Box<dyn TimingModel>) -> Self {
        Self {
            model,
            queue: VecDeque::new(),
            in_service: BinaryHeap::new(),
            tags: std::collections::HashMap::new(),
            next_id: 0,
        }
    }

    /// Queues a request (it starts at the next [`Engine::start_ready`]).
    pub fn submit(&mut self, req: IoRequest, tag: T) {
        self.queue.push_back((req, tag));
    }

    /// Starts as many queued requests as the model allows at `now_ns`.
    pub fn start_ready(&mut self, now_ns: u64) {
        while !self.queue.is_empty() && self.in_service.len() < self.model.max_in_service() {
            let reqs: Vec<IoRequest> = self.queue.iter().map(|(r, _)| *r).collect();
            let idx = self.model.pick(now_ns, &reqs).min(reqs.len() - 1);
            let Some((req, tag)) = self.queue.remove(idx) else {
                break;
            };
            let done_ns = self.model.start(now_ns, &req).max(now_ns);
            let id = self.next_id;
            self.next_id += 1;
            self.in_service.push(Reverse((done_ns, id)));
            self.tags.insert(id, tag);
        }
    }

    /// Completion time of the earliest request in service.
    pub fn next_completion_ns(&self) -> Option<u64> {
        self.in_service.peek().map(|Reverse((t, _))| *t)
    }

    /// Removes and returns every request completed by `now_ns`, with its completion time.
    pub fn pop_completed(&mut self, now_ns: u64) -> Vec<(u64, T)> {
        let mut out = Vec::new();
        while let Some(Reverse((t, id))) = self.in_service.peek().copied() {
            if t > now_ns {
                break;
            }
            self.in_service.pop();
            if let Some(tag) = self.tags.remove(&id) {
                out.push((t, tag));
            }
        }
        out
    }

    /// Requests queued or in service.
    pub fn outstanding(&self) -> usize {
        self.queue.len() + self.in_service.len()
    }
}
