//! `wpq`: Ceph's weighted priority queue, made deterministic.
//!
//! Owns a strict queue (priority >= cut-off: highest priority first, FIFO within) and one
//! sub-queue per lower priority, each a round robin over clients. Between priorities it picks by
//! smooth weighted round robin with weight = priority, and then applies Ceph's cost check as an
//! expected value instead of a coin flip: a pick of a priority whose head costs `c` earns credit
//! `(max_cost - 0.9 c) / max_cost` and dispatches once the credit reaches 1, so expensive heads
//! are served less often (down to 1 in 10 picks). It never draws randomness and never refuses a
//! request.

use crate::config::{PolicyConfig, WpqConfig};
use crate::error::{mismatch, QosError};
use crate::request::Request;
use crate::scheduler::{Dequeued, Dispatch, Phase, Refused, Scheduler};
use std::collections::{BTreeMap, HashMap, VecDeque};

/// Empty per-client queues (and empty priority sub-queues) kept for reuse, so a client or
/// priority that comes back costs no allocation; beyond these counts empty ones are freed.
pub const IDLE_CLIENTS_KEPT: usize = 65_536;
/// See `IDLE_CLIENTS_KEPT`.
pub const IDLE_PRIORITIES_KEPT: usize = 64;

/// Round robin over clients at one priority.
#[derive(Default)]
struct SubQueue {
    per_client: HashMap<u64, VecDeque<Request>, crate::fasthash::BuildFastHasher>,
    order: VecDeque<u64>,
    len: usize,
    /// Smooth weighted round robin state.
    current: i64,
    /// Cost-check credit, in millionths.
    credit: u64,
}

impl SubQueue {
    fn push(&mut self, req: Request) {
        let q = self.per_client.entry(req.client_id).or_default();
        if q.is_empty() {
            self.order.push_back(req.client_id);
        }
        q.push_back(req);
        self.len += 1;
    }

    fn front(&self) -> Option<&Request> {
        let c = self.order.front()?;
        self.per_client.get(c)?.front()
    }

    fn pop(&mut self) -> Option<Request> {
        let c = self.order.pop_front()?;
        let q = self.per_client.get_mut(&c)?;
        let req = q.pop_front()?;
        if !q.is_empty() {
            self.order.push_back(c);
        } else if self.per_client.len() > IDLE_CLIENTS_KEPT {
            self.per_client.remove(&c);
        }
        self.len -= 1;
        Some(req)
    }
}

/// Ceph-style weighted priority queue.
pub struct Wpq {
    cfg: WpqConfig,
    strict: BTreeMap<u8, VecDeque<Request>>,
    queues: BTreeMap<u8, SubQueue>,
    max_cost: u64,
    len: usize,
}

const CREDIT_ONE: u64 = 1_000_000;

impl Wpq {
    /// An empty queue.
    pub fn new(cfg: WpqConfig) -> Result<Wpq, QosError> {
        Ok(Wpq {
            cfg,
            strict: BTreeMap::new(),
            queues: BTreeMap::new(),
            max_cost: 0,
            len: 0,
        })
    }

    fn pick_priority(&mut self) -> Option<u8> {
        let total: i64 = self
            .queues
            .iter()
            .filter(|(_, q)| q.len > 0)
            .map(|(&p, _)| p.max(1) as i64)
            .sum();
        let mut best: Option<(u8, i64)> = None;
        for (&prio, q) in self.queues.iter_mut().filter(|(_, q)| q.len > 0) {
            q.current += prio.max(1) as i64;
            if best.is_none_or(|(_, c)| q.current > c) {
                best = Some((prio, q.current));
            }
        }
        let (prio, _) = best?;
        if let Some(q) = self.queues.get_mut(&prio) {
            q.current -= total;
        }
        Some(prio)
    }
}

impl Scheduler for Wpq {
    fn name(&self) -> &'static str {
        "wpq"
    }

    fn enqueue(&mut self, req: Request, _now_ns: u64) -> Result<(), Refused> {
        if req.priority >= self.cfg.cutoff_priority
            || req.class == crate::request::QosClass::Immediate
        {
            self.strict.entry(req.priority).or_default().push_back(req);
        } else {
            self.max_cost = self.max_cost.max(req.cost_ns);
            self.queues.entry(req.priority).or_default().push(req);
        }
        self.len += 1;
        Ok(())
    }

    fn dequeue(&mut self, _now_ns: u64) -> Dequeued {
        if let Some(mut e) = self.strict.last_entry() {
            let req = e.get_mut().pop_front();
            if e.get().is_empty() {
                e.remove();
            }
            if let Some(req) = req {
                self.len -= 1;
                return Dequeued::Request(Dispatch {
                    req,
                    phase: Phase::Reservation,
                });
            }
        }
        let mut non_empty = self.queues.iter().filter(|(_, q)| q.len > 0);
        let first = non_empty.next().map(|(&p, _)| p);
        let single = non_empty.next().is_none();
        let Some(first) = first else {
            return Dequeued::Empty;
        };
        let max_cost = self.max_cost.max(1);
        let prio = if single {
            Some(first)
        } else {
            loop {
                let Some(p) = self.pick_priority() else {
                    break None;
                };
                let Some(q) = self.queues.get_mut(&p) else {
                    break None;
                };
                let head_cost = q.front().map_or(0, |r| r.cost_ns).min(max_cost);
                let gain =
                    (max_cost - head_cost * 9 / 10) as u128 * CREDIT_ONE as u128 / max_cost as u128;
                q.credit += u64::try_from(gain).expect("a gain is at most CREDIT_ONE");
                if q.credit >= CREDIT_ONE {
                    q.credit -= CREDIT_ONE;
                    break Some(p);
                }
            }
        };
        let Some(prio) = prio else {
            return Dequeued::Empty;
        };
        let Some(q) = self.queues.get_mut(&prio) else {
            return Dequeued::Empty;
        };
        let req = q.pop();
        if q.len == 0 && self.queues.len() > IDLE_PRIORITIES_KEPT {
            self.queues.remove(&prio);
        }
        match req {
            Some(req) => {
                self.len -= 1;
                Dequeued::Request(Dispatch {
                    req,
                    phase: Phase::Weight,
                })
            }
            None => Dequeued::Empty,
        }
    }

    fn len(&self) -> usize {
        self.len
    }

    fn reconfigure(&mut self, cfg: &PolicyConfig) -> Result<(), QosError> {
        match cfg {
            PolicyConfig::Wpq(c) => {
                self.cfg = c.clone();
                Ok(())
            }
            other => Err(mismatch("wpq", other.name())),
        }
    }

    fn drain_all(&mut self) -> Vec<Request> {
        let mut out = Vec::with_capacity(self.len);
        for (_, q) in std::mem::take(&mut self.strict) {
            out.extend(q);
        }
        for (_, q) in std::mem::take(&mut self.queues) {
            for (_, cq) in q.per_client {
                out.extend(cq);
            }
        }
        self.max_cost = 0;
        self.len = 0;
        super::sorted_by_id(out)
    }
}
