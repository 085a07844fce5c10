//! `QosQueue`: the scheduler an OSD (or a shard) talks to.
//!
//! Owns the active policy, the FIFO fallback for refused requests, the policy being drained
//! after a hot swap, the queue-depth limit and the counters. It never reorders requests itself
//! except to choose between the drained policy, the active policy and the fallback.
//!
//! Hot swap (NRS-style): the old policy stops receiving requests and is drained first; new
//! requests go to the new policy and are only served once the old one is empty, so nothing is
//! lost and each client's order across the swap is kept.

use crate::config::{build_policy, PolicyConfig};
use crate::counters::{SchedulerCounters, DEFAULT_MAX_TRACKED_CLIENTS};
use crate::error::QosError;
use crate::policy::fifo::Fifo;
use crate::request::Request;
use crate::scheduler::{Dequeued, Dispatch, Refused, Scheduler};
use crate::shard::ShardLink;

/// Default limit on queued requests.
pub const DEFAULT_MAX_QUEUED: usize = 16 * 1024 * 1024;

/// The front of a scheduler: policy + fallback + hot swap + counters.
pub struct QosQueue {
    cfg: PolicyConfig,
    policy: Box<dyn Scheduler>,
    draining: Option<Box<dyn Scheduler>>,
    fallback: Fifo,
    fallback_turn: bool,
    max_queued: usize,
    counters: SchedulerCounters,
    throttled_total_ns: u64,
    throttled_since: Option<u64>,
    link: Option<ShardLink>,
}

impl QosQueue {
    /// A queue running the configured policy.
    pub fn new(cfg: PolicyConfig) -> Result<QosQueue, QosError> {
        QosQueue::build(cfg, None)
    }

    /// A queue that is one shard of several on `link`: its policy (and every policy swapped in
    /// later) shares mClock tags and TBF buckets with the other shards on the link.
    pub fn new_shard(cfg: PolicyConfig, link: ShardLink) -> Result<QosQueue, QosError> {
        QosQueue::build(cfg, Some(link))
    }

    fn build(cfg: PolicyConfig, link: Option<ShardLink>) -> Result<QosQueue, QosError> {
        let policy = build_in(&cfg, link.as_ref())?;
        Ok(QosQueue {
            cfg,
            policy,
            draining: None,
            fallback: Fifo::new(),
            fallback_turn: false,
            max_queued: DEFAULT_MAX_QUEUED,
            counters: SchedulerCounters::new(DEFAULT_MAX_TRACKED_CLIENTS),
            throttled_total_ns: 0,
            throttled_since: None,
            link,
        })
    }

    /// Sets the queue-depth limit (>= 1).
    pub fn with_max_queued(mut self, max_queued: usize) -> QosQueue {
        self.max_queued = max_queued.max(1);
        self
    }

    /// The active policy's config.
    pub fn config(&self) -> &PolicyConfig {
        &self.cfg
    }

    /// The active policy's name.
    pub fn policy_name(&self) -> &'static str {
        self.policy.name()
    }

    /// Counters.
    pub fn counters(&self) -> &SchedulerCounters {
        &self.counters
    }

    /// Requests queued (active policy + draining policy + fallback).
    pub fn len(&self) -> usize {
        self.policy.len() + self.fallback.len() + self.draining.as_ref().map_or(0, |d| d.len())
    }

    /// True when nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// True while a swapped-out policy still holds requests.
    pub fn is_draining(&self) -> bool {
        self.draining.is_some()
    }

    fn close_throttle(&mut self, now_ns: u64) {
        if let Some(since) = self.throttled_since.take() {
            self.throttled_total_ns += now_ns.saturating_sub(since);
        }
    }

    /// Queues a request at `now_ns`; a request the policy refuses goes to FIFO.
    pub fn enqueue(&mut self, mut req: Request, now_ns: u64) -> Result<(), QosError> {
        if self.len() >= self.max_queued {
            return Err(QosError::QueueFull {
                limit: self.max_queued,
            });
        }
        self.close_throttle(now_ns);
        req.arrival_ns = now_ns;
        req.throttle_mark_ns = self.throttled_total_ns;
        self.counters.on_enqueue(&req);
        if let Err(Refused(r)) = self.policy.enqueue(req, now_ns) {
            self.counters.refused_to_fifo += 1;
            let _ = self.fallback.enqueue(r, now_ns);
        }
        Ok(())
    }

    fn record(&mut self, d: Dispatch, now_ns: u64) -> Dequeued {
        let throttled = self
            .throttled_total_ns
            .saturating_sub(d.req.throttle_mark_ns);
        self.counters
            .on_dispatch(&d.req, d.phase, now_ns, throttled);
        Dequeued::Request(d)
    }

    fn serve_fallback(&mut self, now_ns: u64) -> Option<Dequeued> {
        match self.fallback.dequeue(now_ns) {
            Dequeued::Request(d) => Some(self.record(d, now_ns)),
            _ => None,
        }
    }

    /// Picks the next request at `now_ns`.
    pub fn dequeue(&mut self, now_ns: u64) -> Dequeued {
        self.close_throttle(now_ns);
        let out = self.pick(now_ns);
        if let Dequeued::NothingBefore(_) = out {
            self.throttled_since = Some(now_ns);
        }
        out
    }

    fn pick(&mut self, now_ns: u64) -> Dequeued {
        if let Some(old) = self.draining.as_mut() {
            match old.dequeue(now_ns) {
                Dequeued::Request(d) => return self.record(d, now_ns),
                Dequeued::NothingBefore(t) => {
                    return self
                        .serve_fallback(now_ns)
                        .unwrap_or(Dequeued::NothingBefore(t));
                }
                Dequeued::Empty => self.draining = None,
            }
        }
        self.fallback_turn = !self.fallback_turn;
        if self.fallback_turn {
            if let Some(d) = self.serve_fallback(now_ns) {
                return d;
            }
        }
        match self.policy.dequeue(now_ns) {
            Dequeued::Request(d) => self.record(d, now_ns),
            Dequeued::NothingBefore(t) => self
                .serve_fallback(now_ns)
                .unwrap_or(Dequeued::NothingBefore(t)),
            Dequeued::Empty => self.serve_fallback(now_ns).unwrap_or(Dequeued::Empty),
        }
    }

    /// Applies a config at run time: same policy = reconfigured in place when it can be;
    /// another policy (or a change that cannot be applied in place) = hot swap, the current
    /// policy being drained first. An invalid config is an error and changes nothing.
    pub fn set_policy(&mut self, cfg: PolicyConfig, now_ns: u64) -> Result<(), QosError> {
        let mut next = build_in(&cfg, self.link.as_ref())?;
        if cfg.name() == self.cfg.name() && self.policy.reconfigure(&cfg).is_ok() {
            self.cfg = cfg;
            return Ok(());
        }
        // Another policy, or a change the running one cannot take in place (e.g. new mClock
        // sub-policies while requests are queued): hot swap.
        let old = std::mem::replace(&mut self.policy, Box::new(Fifo::new()));
        if self.draining.is_none() {
            self.draining = Some(old);
        } else {
            let mut old = old;
            for req in old.drain_all() {
                if let Err(Refused(r)) = next.enqueue(req, now_ns) {
                    self.counters.refused_to_fifo += 1;
                    let _ = self.fallback.enqueue(r, now_ns);
                }
            }
        }
        self.policy = next;
        self.cfg = cfg;
        Ok(())
    }
}

/// Builds `cfg`'s policy, on `link` when the queue is a shard.
fn build_in(cfg: &PolicyConfig, link: Option<&ShardLink>) -> Result<Box<dyn Scheduler>, QosError> {
    match link {
        Some(link) => link.build(cfg),
        None => build_policy(cfg),
    }
}
