//! `orr` and `trr`: round robin over objects (orr) or targets (trr), serving each a batch of up
//! to `quantum` requests sorted by logical or physical offset (Lustre's ORR/TRR).
//!
//! Owns the per-key queues, the rotation and the current batch. Refuses requests it does not
//! handle (orr: no object id; both: ops outside the filter) so that they go to FIFO; it never
//! looks up extents itself (the physical offset comes with the request).

use crate::config::{BatchConfig, OffsetKind, OpFilter, PolicyConfig};
use crate::error::{invalid, mismatch, QosError};
use crate::request::{OpKind, Request};
use crate::scheduler::{Dequeued, Dispatch, Phase, Refused, Scheduler};
use std::collections::{HashMap, VecDeque};

/// Empty per-key queues kept for reuse (no allocation when an object comes back); beyond this
/// many keys, empty queues are freed.
pub const IDLE_KEYS_KEPT: usize = 65_536;

fn offset_of(kind: OffsetKind, req: &Request) -> u64 {
    match kind {
        OffsetKind::Logical => req.offset_bytes,
        OffsetKind::Physical => req.physical_offset_bytes.unwrap_or(req.offset_bytes),
    }
}

/// What the round robin rotates over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BatchKey {
    /// Objects (orr).
    Object,
    /// Targets (trr).
    Target,
}

/// Batched round robin (orr / trr).
pub struct BatchRr {
    cfg: BatchConfig,
    key: BatchKey,
    per_key: HashMap<u64, VecDeque<Request>>,
    rotation: VecDeque<u64>,
    /// Current batch, sorted by descending offset so `pop` yields ascending order.
    batch: Vec<Request>,
    len: usize,
}

impl BatchRr {
    /// Object round robin.
    pub fn orr(cfg: BatchConfig) -> Result<BatchRr, QosError> {
        BatchRr::new(cfg, BatchKey::Object)
    }

    /// Target round robin.
    pub fn trr(cfg: BatchConfig) -> Result<BatchRr, QosError> {
        BatchRr::new(cfg, BatchKey::Target)
    }

    fn new(cfg: BatchConfig, key: BatchKey) -> Result<BatchRr, QosError> {
        if cfg.quantum == 0 {
            return Err(invalid("quantum", "must be >= 1"));
        }
        Ok(BatchRr {
            cfg,
            key,
            per_key: HashMap::new(),
            rotation: VecDeque::new(),
            batch: Vec::new(),
            len: 0,
        })
    }

    fn key_of(&self, req: &Request) -> Option<u64> {
        let op_ok = matches!(
            (self.cfg.ops, req.op),
            (OpFilter::Both, OpKind::Read | OpKind::Write)
                | (OpFilter::Reads, OpKind::Read)
                | (OpFilter::Writes, OpKind::Write)
        );
        if !op_ok {
            return None;
        }
        match self.key {
            BatchKey::Object => req.object_id,
            BatchKey::Target => Some(req.target as u64),
        }
    }

    fn refill(&mut self) {
        let Some(k) = self.rotation.pop_front() else {
            return;
        };
        let Some(q) = self.per_key.get_mut(&k) else {
            return;
        };
        let n = (self.cfg.quantum as usize).min(q.len());
        self.batch.extend(q.drain(..n));
        if !q.is_empty() {
            self.rotation.push_back(k);
        } else if self.per_key.len() > IDLE_KEYS_KEPT {
            self.per_key.remove(&k);
        }
        let kind = self.cfg.offset;
        self.batch.sort_unstable_by_key(|r| {
            (
                std::cmp::Reverse(offset_of(kind, r)),
                std::cmp::Reverse(r.id),
            )
        });
    }
}

impl Scheduler for BatchRr {
    fn name(&self) -> &'static str {
        match self.key {
            BatchKey::Object => "orr",
            BatchKey::Target => "trr",
        }
    }

    fn enqueue(&mut self, req: Request, _now_ns: u64) -> Result<(), Refused> {
        let Some(k) = self.key_of(&req) else {
            return Err(Refused(req));
        };
        let q = self.per_key.entry(k).or_default();
        if q.is_empty() {
            self.rotation.push_back(k);
        }
        q.push_back(req);
        self.len += 1;
        Ok(())
    }

    fn dequeue(&mut self, _now_ns: u64) -> Dequeued {
        if self.batch.is_empty() {
            self.refill();
        }
        match self.batch.pop() {
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
        let c = match (self.key, cfg) {
            (BatchKey::Object, PolicyConfig::Orr(c)) | (BatchKey::Target, PolicyConfig::Trr(c)) => {
                c
            }
            (_, other) => return Err(mismatch(self.name(), other.name())),
        };
        if c.quantum == 0 {
            return Err(invalid("quantum", "must be >= 1"));
        }
        if c.ops != self.cfg.ops && self.len > 0 {
            return Err(invalid(
                "ops",
                "cannot change the op filter while requests are queued",
            ));
        }
        self.cfg = c.clone();
        Ok(())
    }

    fn drain_all(&mut self) -> Vec<Request> {
        let mut out: Vec<Request> = self.batch.drain(..).collect();
        out.extend(self.per_key.drain().flat_map(|(_, q)| q));
        self.rotation.clear();
        self.len = 0;
        super::sorted_by_id(out)
    }
}
