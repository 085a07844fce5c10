//! `tbf`: token bucket filter with ranked, run-time editable rules (Lustre's TBF, extended).
//!
//! Owns the rules, the token buckets (created on demand per rule and client/job) and the
//! deadline-ordered heap of buckets with queued requests. Rates are in requests/s and bytes/s at
//! the same time; both are hard (GCRA: after serving at `t`, a bucket's next time is
//! `max(prev, t - burst) + 1/rate_rps` for requests and `+ len/rate_bytes` for bytes, so any
//! window `T` sees at most `rate x (T + burst)` plus one request). A bucket's heap key is
//! `max(next time, time it was (re)queued)`, so eligible buckets are served in the order they
//! became eligible. Never reads a clock.

use crate::config::{BucketKey, PolicyConfig, TbfConfig, TbfRuleConfig};
use crate::convert::{sat_u64, u32_of};
use crate::error::{invalid, mismatch, QosError};
use crate::heap::IndexedHeap;
use crate::policy::tbf_expr::Expr;
use crate::request::Request;
use crate::scheduler::{Dequeued, Dispatch, Phase, Refused, Scheduler};
use std::collections::{HashMap, VecDeque};
use std::hash::BuildHasher;
use std::sync::{Arc, Mutex};

/// Token-bucket state shared by the TBF instances of one OSD's shards: for each (rule, group)
/// the next request and byte times. With it a rule's rate holds for the OSD, not per shard.
pub type TbfSharedHandle = Arc<Mutex<HashMap<(u64, u64), (u64, u64)>>>;

fn rule_hash(name: &str) -> u64 {
    crate::fasthash::BuildFastHasher::default().hash_one(name)
}

/// Most token buckets a TBF instance keeps; requests needing more go to FIFO.
pub const MAX_BUCKETS: usize = 1_000_000;

/// Id of the implicit default rule (matches everything, ranked last).
const DEFAULT_RULE: u32 = u32::MAX;

struct Rule {
    id: u32,
    cfg: TbfRuleConfig,
    expr: Expr,
}

struct Bucket {
    rule: u32,
    /// (rule name hash, group): the bucket's identity across shards.
    shared_key: (u64, u64),
    queue: VecDeque<Request>,
    ns_per_req: f64,
    ns_per_byte: f64,
    tat_req: u64,
    tat_byte: u64,
}

impl Bucket {
    fn deadline(&self) -> u64 {
        self.tat_req.max(self.tat_byte)
    }
}

fn ns_per(rate: Option<f64>) -> f64 {
    match rate {
        Some(r) if r > 0.0 => 1e9 / r,
        _ => 0.0,
    }
}

fn check_rate(name: &str, rate: Option<f64>) -> Result<(), QosError> {
    match rate {
        Some(r) if !(r.is_finite() && r > 0.0) => Err(invalid(name, "rate must be finite and > 0")),
        _ => Ok(()),
    }
}

/// Token bucket filter.
pub struct Tbf {
    cfg: TbfConfig,
    rules: Vec<Rule>,
    next_rule_id: u32,
    buckets: Vec<Bucket>,
    index: HashMap<(u32, u64), u32, crate::fasthash::BuildFastHasher>,
    ready: IndexedHeap,
    seq: u64,
    len: usize,
    shared: Option<TbfSharedHandle>,
}

impl Tbf {
    /// A TBF that is one shard of several sharing `shared` bucket state.
    pub fn with_shared(cfg: TbfConfig, shared: TbfSharedHandle) -> Result<Tbf, QosError> {
        let mut t = Tbf::new(cfg)?;
        t.shared = Some(shared);
        Ok(t)
    }

    /// Raises bucket `b`'s times to the shared ones; true if they changed.
    fn sync_bucket(&mut self, b: u32) -> bool {
        let Some(shared) = &self.shared else {
            return false;
        };
        let bucket = &mut self.buckets[b as usize];
        let got = shared
            .lock()
            .ok()
            .and_then(|m| m.get(&bucket.shared_key).copied());
        let Some((r, y)) = got else {
            return false;
        };
        if r <= bucket.tat_req && y <= bucket.tat_byte {
            return false;
        }
        bucket.tat_req = bucket.tat_req.max(r);
        bucket.tat_byte = bucket.tat_byte.max(y);
        true
    }

    /// Earliest time this shard can serve (after syncing with the other shards), if anything
    /// is queued.
    pub fn peek_deadline(&mut self) -> Option<u64> {
        loop {
            let (b, (deadline, seq)) = self.ready.peek()?;
            if !self.sync_bucket(b) {
                return Some(deadline);
            }
            let d = self.buckets[b as usize].deadline().max(deadline);
            self.ready.upsert(b, (d, seq));
        }
    }

    /// A TBF with the configured rules (ranked in list order) and default rule.
    pub fn new(cfg: TbfConfig) -> Result<Tbf, QosError> {
        check_rate("default_rate_rps", cfg.default_rate_rps)?;
        check_rate("default_rate_bytes_per_s", cfg.default_rate_bytes_per_s)?;
        let mut t = Tbf {
            cfg: TbfConfig {
                rules: Vec::new(),
                ..cfg.clone()
            },
            rules: Vec::new(),
            next_rule_id: 0,
            buckets: Vec::new(),
            index: HashMap::default(),
            ready: IndexedHeap::new(),
            seq: 0,
            len: 0,
            shared: None,
        };
        for r in cfg.rules {
            t.start_rule(r, None)?;
        }
        Ok(t)
    }

    /// Names of the installed rules, in rank order.
    pub fn rule_names(&self) -> Vec<&str> {
        self.rules.iter().map(|r| r.cfg.name.as_str()).collect()
    }

    /// Installs a rule at `rank` (0 = first; default: after the others, before the default).
    /// Requests already queued stay where they are; new requests see the rule.
    pub fn start_rule(&mut self, cfg: TbfRuleConfig, rank: Option<usize>) -> Result<(), QosError> {
        if self.rules.iter().any(|r| r.cfg.name == cfg.name) {
            return Err(QosError::DuplicateRule(cfg.name));
        }
        check_rate("rate_rps", cfg.rate_rps)?;
        check_rate("rate_bytes_per_s", cfg.rate_bytes_per_s)?;
        let expr = Expr::parse(&cfg.expr)?;
        let id = self.next_rule_id;
        self.next_rule_id += 1;
        let at = rank.unwrap_or(self.rules.len()).min(self.rules.len());
        self.rules.insert(at, Rule { id, cfg, expr });
        Ok(())
    }

    /// Changes a rule's rates (applied to its existing buckets at once) and optionally its rank.
    pub fn change_rule(
        &mut self,
        name: &str,
        rate_rps: Option<f64>,
        rate_bytes_per_s: Option<f64>,
        rank: Option<usize>,
    ) -> Result<(), QosError> {
        check_rate("rate_rps", rate_rps)?;
        check_rate("rate_bytes_per_s", rate_bytes_per_s)?;
        let pos = self
            .rules
            .iter()
            .position(|r| r.cfg.name == name)
            .ok_or_else(|| QosError::NoSuchRule(name.to_string()))?;
        let id = self.rules[pos].id;
        self.rules[pos].cfg.rate_rps = rate_rps;
        self.rules[pos].cfg.rate_bytes_per_s = rate_bytes_per_s;
        if let Some(rank) = rank {
            let rule = self.rules.remove(pos);
            let at = rank.min(self.rules.len());
            self.rules.insert(at, rule);
        }
        for b in self.buckets.iter_mut().filter(|b| b.rule == id) {
            b.ns_per_req = ns_per(rate_rps);
            b.ns_per_byte = ns_per(rate_bytes_per_s);
        }
        Ok(())
    }

    /// Removes a rule; its queued requests are re-classified by the remaining rules, keeping
    /// each client's order.
    pub fn stop_rule(&mut self, name: &str, now_ns: u64) -> Result<(), QosError> {
        let pos = self
            .rules
            .iter()
            .position(|r| r.cfg.name == name)
            .ok_or_else(|| QosError::NoSuchRule(name.to_string()))?;
        let id = self.rules.remove(pos).id;
        let mut moved = Vec::new();
        for (i, b) in self.buckets.iter_mut().enumerate() {
            if b.rule == id {
                moved.extend(b.queue.drain(..));
                self.ready.remove(u32_of(i));
            }
        }
        self.len -= moved.len();
        for req in super::sorted_by_id(moved) {
            // A re-classified request can only be refused if the bucket table is full; FIFO
            // fallback is then the caller's job, so keep it in the default bucket instead.
            if let Err(Refused(r)) = self.enqueue(req, now_ns) {
                self.force_default(r, now_ns);
            }
        }
        Ok(())
    }

    fn classify(&self, req: &Request) -> (u32, u64, BucketKey, Option<f64>, Option<f64>) {
        for r in &self.rules {
            if r.expr.matches(req) {
                return (
                    r.id,
                    rule_hash(&r.cfg.name),
                    r.cfg.key,
                    r.cfg.rate_rps,
                    r.cfg.rate_bytes_per_s,
                );
            }
        }
        (
            DEFAULT_RULE,
            u64::MAX,
            BucketKey::Client,
            self.cfg.default_rate_rps,
            self.cfg.default_rate_bytes_per_s,
        )
    }

    fn bucket_for(&mut self, req: &Request) -> Option<u32> {
        let (rule, name_hash, key, rps, bps) = self.classify(req);
        let group = match key {
            BucketKey::Client => req.client_id,
            BucketKey::Job => req.job_id.map_or(u64::MAX, |j| j as u64),
            BucketKey::Rule => 0,
        };
        if let Some(&b) = self.index.get(&(rule, group)) {
            return Some(b);
        }
        if self.buckets.len() >= MAX_BUCKETS {
            return None;
        }
        let b = u32_of(self.buckets.len());
        self.buckets.push(Bucket {
            rule,
            shared_key: (name_hash, group),
            queue: VecDeque::new(),
            ns_per_req: ns_per(rps),
            ns_per_byte: ns_per(bps),
            tat_req: 0,
            tat_byte: 0,
        });
        self.index.insert((rule, group), b);
        Some(b)
    }

    fn push(&mut self, b: u32, req: Request, now_ns: u64) {
        let bucket = &mut self.buckets[b as usize];
        bucket.queue.push_back(req);
        self.len += 1;
        if bucket.queue.len() == 1 {
            self.seq += 1;
            let d = bucket.deadline().max(now_ns);
            self.ready.upsert(b, (d, self.seq));
        }
    }

    fn force_default(&mut self, req: Request, now_ns: u64) {
        let b = self
            .index
            .get(&(DEFAULT_RULE, req.client_id))
            .copied()
            .unwrap_or(0);
        if (b as usize) < self.buckets.len() {
            self.push(b, req, now_ns);
        }
    }
}

impl Scheduler for Tbf {
    fn name(&self) -> &'static str {
        "tbf"
    }

    fn enqueue(&mut self, req: Request, now_ns: u64) -> Result<(), Refused> {
        let Some(b) = self.bucket_for(&req) else {
            return Err(Refused(req));
        };
        self.push(b, req, now_ns);
        Ok(())
    }

    fn dequeue(&mut self, now_ns: u64) -> Dequeued {
        let b = loop {
            let Some((b, (deadline, seq))) = self.ready.peek() else {
                return Dequeued::Empty;
            };
            if deadline > now_ns {
                return Dequeued::NothingBefore(deadline);
            }
            if self.buckets[b as usize].queue.is_empty() {
                self.ready.remove(b);
                continue;
            }
            if self.sync_bucket(b) {
                // Another shard used this bucket's tokens: re-queue at its new deadline.
                let d = self.buckets[b as usize].deadline().max(now_ns);
                self.ready.upsert(b, (d, seq));
                continue;
            }
            break b;
        };
        let floor = now_ns.saturating_sub(self.cfg.burst_ns);
        let bucket = &mut self.buckets[b as usize];
        let Some(req) = bucket.queue.pop_front() else {
            return Dequeued::Empty;
        };
        self.len -= 1;
        if bucket.ns_per_req > 0.0 {
            bucket.tat_req = bucket.tat_req.max(floor) + sat_u64(bucket.ns_per_req);
        }
        if bucket.ns_per_byte > 0.0 {
            bucket.tat_byte =
                bucket.tat_byte.max(floor) + sat_u64(req.length_bytes as f64 * bucket.ns_per_byte);
        }
        if let Some(shared) = &self.shared {
            if let Ok(mut m) = shared.lock() {
                m.insert(bucket.shared_key, (bucket.tat_req, bucket.tat_byte));
            }
        }
        if bucket.queue.is_empty() {
            self.ready.remove(b);
        } else {
            // Eligible buckets are ordered by when they became eligible, so an unlimited bucket
            // (deadline 0) cannot starve a rate-limited one.
            self.seq += 1;
            let d = bucket.deadline().max(now_ns);
            self.ready.upsert(b, (d, self.seq));
        }
        Dequeued::Request(Dispatch {
            req,
            phase: Phase::Weight,
        })
    }

    fn len(&self) -> usize {
        self.len
    }

    fn reconfigure(&mut self, cfg: &PolicyConfig) -> Result<(), QosError> {
        let PolicyConfig::Tbf(c) = cfg else {
            return Err(mismatch("tbf", cfg.name()));
        };
        check_rate("default_rate_rps", c.default_rate_rps)?;
        check_rate("default_rate_bytes_per_s", c.default_rate_bytes_per_s)?;
        for r in &c.rules {
            Expr::parse(&r.expr)?;
            check_rate("rate_rps", r.rate_rps)?;
            check_rate("rate_bytes_per_s", r.rate_bytes_per_s)?;
        }
        let now = self.ready.peek().map_or(0, |(_, (d, _))| d);
        let stale: Vec<String> = self
            .rules
            .iter()
            .filter(|r| {
                !c.rules
                    .iter()
                    .any(|n| n.name == r.cfg.name && n.expr == r.cfg.expr)
            })
            .map(|r| r.cfg.name.clone())
            .collect();
        for name in stale {
            self.stop_rule(&name, now)?;
        }
        for (rank, r) in c.rules.iter().enumerate() {
            if self.rules.iter().any(|x| x.cfg.name == r.name) {
                self.change_rule(&r.name, r.rate_rps, r.rate_bytes_per_s, Some(rank))?;
            } else {
                self.start_rule(r.clone(), Some(rank))?;
            }
        }
        self.cfg.default_rate_rps = c.default_rate_rps;
        self.cfg.default_rate_bytes_per_s = c.default_rate_bytes_per_s;
        self.cfg.burst_ns = c.burst_ns;
        for b in self.buckets.iter_mut().filter(|b| b.rule == DEFAULT_RULE) {
            b.ns_per_req = ns_per(c.default_rate_rps);
            b.ns_per_byte = ns_per(c.default_rate_bytes_per_s);
        }
        Ok(())
    }

    fn drain_all(&mut self) -> Vec<Request> {
        let mut out = Vec::with_capacity(self.len);
        for b in &mut self.buckets {
            out.extend(b.queue.drain(..));
        }
        self.ready = IndexedHeap::new();
        self.len = 0;
        super::sorted_by_id(out)
    }
}
