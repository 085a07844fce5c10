//! Sharded mClock and TBF: N schedulers (one per OSD shard) whose reservations, limits and
//! token-bucket rates hold for the OSD as a whole, not per shard.
//!
//! Owns the shards, the tag state they share (`SharedTags`) and the choice of which shard
//! dispatches next. [`ShardLink`] is the same shared state for shards that dispatch on their
//! own (an OSD's op shards, each a `QosQueue` with its own lock and dispatcher). Requests are spread over shards by object (as PGs are); a dmClock client
//! with requests in several shards keeps one set of tags, so its reservation, weight and limit
//! are not multiplied or divided by N. Dispatch compares each shard's best candidate (phase, then
//! tag), which is what a single queue would choose. Never reads a clock.

use crate::config::TbfConfig;
use crate::config::{build_policy, MClockConfig, PolicyConfig};
use crate::error::{mismatch, QosError};
use crate::policy::mclock::{MClock, SharedTagsHandle};
use crate::policy::tbf::{Tbf, TbfSharedHandle};
use crate::request::Request;
use crate::scheduler::{Dequeued, Phase, Refused, Scheduler};

/// Most shards.
pub const MAX_SHARDS: usize = 256;

/// The shard of `shards` (> 0) that `key` belongs to: a Fibonacci hash, so consecutive keys
/// (PG seeds, object ids) spread evenly.
pub fn shard_index(key: u64, shards: usize) -> usize {
    (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize % shards
}

/// The state that independent shards of one OSD share so that mClock reservations, weights and
/// limits and TBF rates hold for the OSD as a whole: give every shard's policy the same link.
/// Other policies keep no cross-request state that needs sharing (each shard is fair or ordered
/// on its own, as Ceph's shards are).
#[derive(Clone, Default)]
pub struct ShardLink {
    tags: SharedTagsHandle,
    buckets: TbfSharedHandle,
}

impl ShardLink {
    /// Builds the scheduler `cfg` describes as one shard on this link.
    pub fn build(&self, cfg: &PolicyConfig) -> Result<Box<dyn Scheduler>, QosError> {
        Ok(match cfg {
            PolicyConfig::Mclock(c) => Box::new(MClock::with_shared(c.clone(), self.tags.clone())?),
            PolicyConfig::Tbf(c) => Box::new(Tbf::with_shared(c.clone(), self.buckets.clone())?),
            other => build_policy(other)?,
        })
    }
}

/// N mClock shards with OSD-wide QoS.
pub struct ShardedMClock {
    shards: Vec<MClock>,
    shared: SharedTagsHandle,
}

impl ShardedMClock {
    /// `shards` (1..=256) schedulers with one config.
    pub fn new(cfg: MClockConfig, shards: usize) -> Result<ShardedMClock, QosError> {
        if shards == 0 || shards > MAX_SHARDS {
            return Err(crate::error::invalid(
                "shards",
                format!("must be in 1..={MAX_SHARDS}"),
            ));
        }
        let shared = SharedTagsHandle::default();
        let shards = (0..shards)
            .map(|_| MClock::with_shared(cfg.clone(), shared.clone()))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(ShardedMClock { shards, shared })
    }

    /// Number of shards.
    pub fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// The shard a request belongs to (by object, else by client).
    pub fn shard_of(&self, req: &Request) -> usize {
        shard_index(req.object_id.unwrap_or(req.client_id), self.shards.len())
    }

    /// Requests queued in one shard.
    pub fn shard_len(&self, shard: usize) -> Result<usize, QosError> {
        self.shards
            .get(shard)
            .map(|s| s.len())
            .ok_or(QosError::NoSuchShard {
                shard,
                shards: self.shards.len(),
            })
    }

    /// The shared tag handle (for inspection).
    pub fn shared(&self) -> &SharedTagsHandle {
        &self.shared
    }
}

fn rank(phase: Phase) -> u8 {
    match phase {
        Phase::Reservation => 0,
        Phase::Weight => 1,
        Phase::LimitBreak => 2,
    }
}

impl Scheduler for ShardedMClock {
    fn name(&self) -> &'static str {
        "mclock"
    }

    fn enqueue(&mut self, req: Request, now_ns: u64) -> Result<(), Refused> {
        let s = self.shard_of(&req);
        self.shards[s].enqueue(req, now_ns)
    }

    fn dequeue(&mut self, now_ns: u64) -> Dequeued {
        // A shard's candidate can turn out blocked (its class's sub-policy throttles); then
        // the next best shard is asked, at most once per shard.
        for _ in 0..self.shards.len() {
            let mut best: Option<(u8, u64, usize)> = None;
            for (i, sh) in self.shards.iter_mut().enumerate() {
                if let Some((phase, tag)) = sh.peek(now_ns) {
                    let cand = (rank(phase), tag, i);
                    if best.is_none_or(|b| cand < b) {
                        best = Some(cand);
                    }
                }
            }
            let Some((_, _, i)) = best else {
                break;
            };
            if let d @ Dequeued::Request(_) = self.shards[i].dequeue(now_ns) {
                return d;
            }
        }
        match self
            .shards
            .iter()
            .filter_map(|s| s.next_eligible_ns())
            .min()
        {
            Some(t) => Dequeued::NothingBefore(t),
            None => Dequeued::Empty,
        }
    }

    fn len(&self) -> usize {
        self.shards.iter().map(|s| s.len()).sum()
    }

    fn reconfigure(&mut self, cfg: &PolicyConfig) -> Result<(), QosError> {
        if !matches!(cfg, PolicyConfig::Mclock(_)) {
            return Err(mismatch("mclock", cfg.name()));
        }
        for s in &mut self.shards {
            s.reconfigure(cfg)?;
        }
        Ok(())
    }

    fn drain_all(&mut self) -> Vec<Request> {
        let all = self.shards.iter_mut().flat_map(|s| s.drain_all()).collect();
        crate::policy::sorted_by_id(all)
    }
}

/// N TBF shards sharing bucket state: each rule's rate holds for the OSD, not per shard.
pub struct ShardedTbf {
    shards: Vec<Tbf>,
}

impl ShardedTbf {
    /// `shards` (1..=256) TBF instances with one config and shared buckets.
    pub fn new(cfg: TbfConfig, shards: usize) -> Result<ShardedTbf, QosError> {
        if shards == 0 || shards > MAX_SHARDS {
            return Err(crate::error::invalid(
                "shards",
                format!("must be in 1..={MAX_SHARDS}"),
            ));
        }
        let shared = TbfSharedHandle::default();
        let shards = (0..shards)
            .map(|_| Tbf::with_shared(cfg.clone(), shared.clone()))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(ShardedTbf { shards })
    }

    /// The shard a request belongs to (by object, else by client).
    pub fn shard_of(&self, req: &Request) -> usize {
        shard_index(req.object_id.unwrap_or(req.client_id), self.shards.len())
    }
}

impl Scheduler for ShardedTbf {
    fn name(&self) -> &'static str {
        "tbf"
    }

    fn enqueue(&mut self, req: Request, now_ns: u64) -> Result<(), Refused> {
        let s = self.shard_of(&req);
        self.shards[s].enqueue(req, now_ns)
    }

    fn dequeue(&mut self, now_ns: u64) -> Dequeued {
        for _ in 0..=self.shards.len() {
            let best = self
                .shards
                .iter_mut()
                .enumerate()
                .filter_map(|(i, s)| s.peek_deadline().map(|d| (d, i)))
                .min();
            let Some((d, i)) = best else {
                return Dequeued::Empty;
            };
            if d > now_ns {
                return Dequeued::NothingBefore(d);
            }
            if let r @ Dequeued::Request(_) = self.shards[i].dequeue(now_ns) {
                return r;
            }
        }
        let next = self
            .shards
            .iter_mut()
            .filter_map(|s| s.peek_deadline())
            .min();
        match next {
            Some(t) => Dequeued::NothingBefore(t.max(now_ns + 1)),
            None => Dequeued::Empty,
        }
    }

    fn len(&self) -> usize {
        self.shards.iter().map(|s| s.len()).sum()
    }

    fn reconfigure(&mut self, cfg: &PolicyConfig) -> Result<(), QosError> {
        if !matches!(cfg, PolicyConfig::Tbf(_)) {
            return Err(mismatch("tbf", cfg.name()));
        }
        for s in &mut self.shards {
            s.reconfigure(cfg)?;
        }
        Ok(())
    }

    fn drain_all(&mut self) -> Vec<Request> {
        let all = self.shards.iter_mut().flat_map(|s| s.drain_all()).collect();
        crate::policy::sorted_by_id(all)
    }
}
