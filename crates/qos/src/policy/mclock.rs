//! `mclock`: dmClock scheduling with reservation, weight and limit tags.
//!
//! Owns the per-client tag state, the three indexed tag heaps and the per-client queues. It
//! never reads a clock: every decision uses the `now_ns` passed in.
//!
//! Design (our own, after the dmClock paper):
//! * Tags are computed when a client's request reaches the head of its queue ("lazy" tags), with
//!   the spacing of the previous dispatch: after serving cost `c` at time `t`,
//!   `R' = clamp(R, t - burst, t) + c/r`, `L' = max(L, t - burst) + c/l`, `P' = P + c/w`.
//!   Every dispatch counts towards all three tags, so "reservation" means "at least r in total".
//! * Hard limits: a client is only eligible when `L <= now`, in both phases. Because
//!   `L' >= t - burst + c/l`, service in any window `T` is at most `l x (T + burst) + one request`.
//! * System virtual time `V` (largest P tag served by weight): a client that becomes active gets
//!   `P = max(P', V)`. A client that used idle capacity therefore competes from `V`, not from
//!   real time, and is not starved afterwards; an idle client banks no credit.
//! * Active clients live in `blocked` (a class whose sub-policy is throttling, by when it may
//!   serve), `limited` (by L) or in `ready_p` (by P) and, with a reservation, `ready_r` (by R):
//!   activation, dispatch and limit expiry are O(log N).
//! * dmClock's delta/rho: a request's `dmclock_delta`/`dmclock_rho` advance P/L and R as if that
//!   many requests of the same cost had been served here.

use crate::config::{build_policy, ClassParams, MClockConfig, PolicyConfig};
use crate::convert::sat_u64;
use crate::error::{mismatch, QosError};
use crate::heap::IndexedHeap;
use crate::request::{QosClass, Request};
use crate::scheduler::{Dequeued, Dispatch, Phase, Refused, Scheduler};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

/// Tag state shared by the shards of one OSD: for each dmClock client the tags its next request
/// must carry (after the latest dispatch in any shard), and the system virtual time. With it,
/// reservations and limits hold for the OSD as a whole instead of per shard.
#[derive(Debug, Default)]
pub struct SharedTags {
    next: HashMap<(QosClass, u64), [u64; 3]>,
    vtime: u64,
}

/// Handle to tags shared between shards.
pub type SharedTagsHandle = Arc<Mutex<SharedTags>>;

/// Rates converted to tag increments: nanoseconds of tag per unit of cost (0 = no constraint).
#[derive(Clone, Copy, Debug)]
struct Rates {
    inv_r: f64,
    inv_w: f64,
    inv_l: f64,
}

impl Rates {
    fn from(p: &ClassParams) -> Rates {
        Rates {
            inv_r: if p.reservation > 0.0 {
                1.0 / p.reservation
            } else {
                0.0
            },
            inv_w: 1.0 / p.weight,
            inv_l: if p.limit > 0.0 { 1.0 / p.limit } else { 0.0 },
        }
    }
}

/// A class's own queue: FIFO, or a sub-policy plus the FIFO that takes what it refuses (so
/// refused requests stay under the class's mClock tags).
enum KeyQueue {
    Fifo(VecDeque<Request>),
    Sub {
        policy: Box<dyn Scheduler>,
        refused: VecDeque<Request>,
        refused_turn: bool,
    },
}

impl KeyQueue {
    fn len(&self) -> usize {
        match self {
            KeyQueue::Fifo(q) => q.len(),
            KeyQueue::Sub {
                policy, refused, ..
            } => policy.len() + refused.len(),
        }
    }
}

struct Slot {
    class: QosClass,
    client_id: u64,
    rates: Rates,
    queue: KeyQueue,
    active: bool,
    r: u64,
    p: u64,
    l: u64,
    /// Limit tag from the limit alone (kept equal to `l`; `l` is what the heaps see).
    l_limit: u64,
    /// The class's sub-policy has nothing eligible before this time (0 = not blocked).
    blocked_until: u64,
    r_next: u64,
    p_next: u64,
    l_next: u64,
}

/// Key of a dmClock client: a class, or (client class, client id) in per-client mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Key(QosClass, u64);

/// The dmClock scheduler.
pub struct MClock {
    cfg: MClockConfig,
    class_params: [ClassParams; 3],
    overrides: HashMap<u64, ClassParams>,
    slots: Vec<Slot>,
    /// Slots of per-client keys, by client id (16-byte entries: the lookup is the cache miss
    /// that dominates enqueue at 100k clients).
    index: HashMap<u64, u32, crate::fasthash::BuildFastHasher>,
    /// Slots of class-level keys (no hashing on the common path).
    class_slots: [Option<u32>; 4],
    immediate: VecDeque<Request>,
    ready_r: IndexedHeap,
    ready_p: IndexedHeap,
    limited: IndexedHeap,
    /// Slots whose sub-policy is throttling (e.g. TBF inside the class), by when it may serve;
    /// never served by limit-break.
    blocked: IndexedHeap,
    vtime: u64,
    seq: u64,
    queued: usize,
    shared: Option<SharedTagsHandle>,
}

fn tag_add(base: u64, cost: u64, inv: f64, times: u16) -> u64 {
    let inc = cost as f64 * inv * (1.0 + times as f64);
    base.saturating_add(sat_u64(inc))
}

impl MClock {
    /// A scheduler for a validated config.
    pub fn new(cfg: MClockConfig) -> Result<MClock, QosError> {
        let class_params = cfg.class_params()?;
        for c in [QosClass::Client, QosClass::Recovery, QosClass::BestEffort] {
            if let Some(sub) = cfg.sub_policy(c) {
                build_policy(sub)?;
            }
        }
        let overrides = cfg
            .per_client_overrides
            .iter()
            .map(|o| (o.client_id, o.params))
            .collect();
        Ok(MClock {
            cfg,
            class_params,
            overrides,
            slots: Vec::new(),
            index: HashMap::default(),
            class_slots: [None; 4],
            immediate: VecDeque::new(),
            ready_r: IndexedHeap::new(),
            ready_p: IndexedHeap::new(),
            limited: IndexedHeap::new(),
            blocked: IndexedHeap::new(),
            vtime: 0,
            seq: 0,
            queued: 0,
            shared: None,
        })
    }

    /// A scheduler that is one shard of several sharing `shared` tags.
    pub fn with_shared(cfg: MClockConfig, shared: SharedTagsHandle) -> Result<MClock, QosError> {
        let mut m = MClock::new(cfg)?;
        m.shared = Some(shared);
        Ok(m)
    }

    /// Global next tags of a key and the global virtual time (shards only).
    fn global(&self, key: Key) -> Option<([u64; 3], u64)> {
        let shared = self.shared.as_ref()?;
        let g = shared.lock().ok()?;
        Some((
            g.next.get(&(key.0, key.1)).copied().unwrap_or([0; 3]),
            g.vtime,
        ))
    }

    /// Raises slot `s`'s head tags to what other shards' dispatches imply; true if they changed.
    fn sync_slot(&mut self, s: u32, now: u64) -> bool {
        let slot = &self.slots[s as usize];
        let Some(([r, p, l], _)) = self.global(Key(slot.class, slot.client_id)) else {
            return false;
        };
        let slot = &mut self.slots[s as usize];
        let r = if slot.rates.inv_r > 0.0 { r } else { u64::MAX };
        if slot.r >= r && slot.p >= p && slot.l_limit >= l {
            return false;
        }
        slot.r = slot.r.max(r);
        slot.p = slot.p.max(p);
        slot.l_limit = slot.l_limit.max(l);
        slot.l = slot.l.max(l);
        self.place(s, now);
        true
    }

    /// Phase and tag of the request this scheduler would dispatch at `now_ns` (shards compare
    /// these to pick the OSD-wide best), or None if nothing is eligible.
    pub fn peek(&mut self, now_ns: u64) -> Option<(Phase, u64)> {
        if !self.immediate.is_empty() {
            return Some((Phase::Reservation, 0));
        }
        self.promote(now_ns);
        loop {
            let (s, phase) = self.pick(now_ns)?;
            if self.sync_slot(s, now_ns) {
                continue;
            }
            let slot = &self.slots[s as usize];
            let tag = match phase {
                Phase::Reservation => slot.r,
                Phase::Weight => slot.p,
                Phase::LimitBreak => slot.l,
            };
            return Some((phase, tag));
        }
    }

    /// Earliest time something becomes eligible when `peek` says nothing is.
    pub fn next_eligible_ns(&self) -> Option<u64> {
        let l = self.limited.peek().map(|(_, (l, _))| l);
        let b = self.blocked.peek().map(|(_, (b, _))| b);
        match (l, b) {
            (Some(l), Some(b)) => Some(l.min(b)),
            (l, b) => l.or(b),
        }
    }

    /// The active configuration.
    pub fn config(&self) -> &MClockConfig {
        &self.cfg
    }

    /// Number of dmClock clients known (active or idle).
    pub fn clients(&self) -> usize {
        self.slots.len()
    }

    fn key_of(&self, req: &Request) -> Key {
        if req.class == QosClass::Client && self.cfg.per_client {
            Key(QosClass::Client, req.client_id)
        } else {
            Key(req.class, 0)
        }
    }

    fn params_of(&self, key: Key) -> ClassParams {
        if key.0 == QosClass::Client && self.cfg.per_client {
            return *self
                .overrides
                .get(&key.1)
                .unwrap_or(&self.cfg.per_client_default);
        }
        self.class_params[key.0.index().min(2)]
    }

    fn new_queue(&self, key: Key) -> Result<KeyQueue, QosError> {
        if key.0 == QosClass::Client && self.cfg.per_client {
            return Ok(KeyQueue::Fifo(VecDeque::new()));
        }
        match self.cfg.sub_policy(key.0) {
            Some(p) => Ok(KeyQueue::Sub {
                policy: build_policy(p)?,
                refused: VecDeque::new(),
                refused_turn: false,
            }),
            None => Ok(KeyQueue::Fifo(VecDeque::new())),
        }
    }

    fn slot_for(&mut self, key: Key) -> Option<u32> {
        let class_key = key.1 == 0 && !(key.0 == QosClass::Client && self.cfg.per_client);
        if class_key {
            if let Some(s) = self.class_slots[key.0.index()] {
                return Some(s);
            }
        } else if let Some(&s) = self.index.get(&key.1) {
            return Some(s);
        }
        if self.slots.len() >= self.cfg.max_clients {
            return None;
        }
        let queue = self.new_queue(key).ok()?;
        let rates = Rates::from(&self.params_of(key));
        // Slots are numbered by u32: a table that large counts as full.
        let s = u32::try_from(self.slots.len()).ok()?;
        self.slots.push(Slot {
            class: key.0,
            client_id: key.1,
            rates,
            queue,
            active: false,
            r: 0,
            p: 0,
            l: 0,
            l_limit: 0,
            blocked_until: 0,
            r_next: 0,
            p_next: 0,
            l_next: 0,
        });
        if class_key {
            self.class_slots[key.0.index()] = Some(s);
        } else {
            self.index.insert(key.1, s);
        }
        Some(s)
    }

    fn place(&mut self, s: u32, now: u64) {
        self.seq += 1;
        let seq = self.seq;
        let slot = &self.slots[s as usize];
        let (r, p, l, b) = (slot.r, slot.p, slot.l, slot.blocked_until);
        if b > now {
            self.ready_r.remove(s);
            self.ready_p.remove(s);
            self.limited.remove(s);
            self.blocked.upsert(s, (b, seq));
        } else if l > now {
            self.ready_r.remove(s);
            self.ready_p.remove(s);
            self.blocked.remove(s);
            self.limited.upsert(s, (l, seq));
        } else {
            self.limited.remove(s);
            self.blocked.remove(s);
            if r == u64::MAX {
                // No reservation: never a reservation-phase candidate, keep it out of that heap.
                self.ready_r.remove(s);
            } else {
                self.ready_r.upsert(s, (r, seq));
            }
            self.ready_p.upsert(s, (p, seq));
        }
    }

    fn unplace(&mut self, s: u32) {
        self.ready_r.remove(s);
        self.ready_p.remove(s);
        self.limited.remove(s);
        self.blocked.remove(s);
    }

    fn activate(&mut self, s: u32, now: u64) {
        let mut v = self.vtime;
        let key = Key(
            self.slots[s as usize].class,
            self.slots[s as usize].client_id,
        );
        if let Some(([r, p, l], gv)) = self.global(key) {
            v = v.max(gv);
            let slot = &mut self.slots[s as usize];
            slot.r_next = slot.r_next.max(r);
            slot.p_next = slot.p_next.max(p);
            slot.l_next = slot.l_next.max(l);
        }
        let slot = &mut self.slots[s as usize];
        slot.active = true;
        slot.r = if slot.rates.inv_r > 0.0 {
            slot.r_next.max(now)
        } else {
            u64::MAX
        };
        slot.p = slot.p_next.max(v);
        slot.l_limit = slot.l_next;
        slot.l = slot.l_next;
        self.place(s, now);
    }

    fn promote(&mut self, now: u64) {
        while let Some((s, (b, _))) = self.blocked.peek() {
            if b > now {
                break;
            }
            self.blocked.remove(s);
            self.slots[s as usize].blocked_until = 0;
            self.place(s, now);
        }
        while let Some((s, (l, _))) = self.limited.peek() {
            if l > now {
                break;
            }
            self.limited.remove(s);
            self.place(s, now);
        }
    }

    /// Takes the head request of slot `s`, or reports when its sub-policy can next serve.
    fn take(&mut self, s: u32, now: u64) -> Result<Request, Option<u64>> {
        let slot = &mut self.slots[s as usize];
        match &mut slot.queue {
            KeyQueue::Fifo(q) => q.pop_front().ok_or(None),
            KeyQueue::Sub {
                policy,
                refused,
                refused_turn,
            } => {
                *refused_turn = !*refused_turn;
                if *refused_turn {
                    if let Some(r) = refused.pop_front() {
                        return Ok(r);
                    }
                }
                match policy.dequeue(now) {
                    Dequeued::Request(d) => Ok(d.req),
                    Dequeued::NothingBefore(t) => refused.pop_front().ok_or(Some(t)),
                    Dequeued::Empty => refused.pop_front().ok_or(None),
                }
            }
        }
    }

    fn after_dispatch(&mut self, s: u32, req: &Request, phase: Phase, now: u64) {
        let burst = self.cfg.burst_ns;
        let floor = now.saturating_sub(burst);
        if phase == Phase::Weight {
            self.vtime = self.vtime.max(self.slots[s as usize].p);
        }
        let slot = &mut self.slots[s as usize];
        let c = req.cost_ns;
        let rt = slot.rates;
        slot.r_next = if rt.inv_r > 0.0 {
            tag_add(slot.r.clamp(floor, now), c, rt.inv_r, req.dmclock_rho)
        } else {
            u64::MAX
        };
        slot.p_next = tag_add(slot.p, c, rt.inv_w, req.dmclock_delta);
        slot.l_next = if rt.inv_l > 0.0 {
            tag_add(slot.l_limit.max(floor), c, rt.inv_l, req.dmclock_delta)
        } else {
            0
        };
        if let Some(shared) = &self.shared {
            if let Ok(mut g) = shared.lock() {
                g.next.insert(
                    (slot.class, slot.client_id),
                    [slot.r_next, slot.p_next, slot.l_next],
                );
                g.vtime = g.vtime.max(self.vtime);
            }
        }
        if slot.queue.len() == 0 {
            slot.active = false;
            slot.blocked_until = 0;
            self.unplace(s);
        } else {
            slot.r = slot.r_next;
            slot.p = slot.p_next;
            slot.l_limit = slot.l_next;
            slot.l = slot.l_next;
            self.place(s, now);
        }
    }

    fn pick(&mut self, now: u64) -> Option<(u32, Phase)> {
        if let Some((s, (r, _))) = self.ready_r.peek() {
            if r <= now {
                return Some((s, Phase::Reservation));
            }
        }
        if let Some((s, _)) = self.ready_p.peek() {
            return Some((s, Phase::Weight));
        }
        if self.cfg.limit_break {
            if let Some((s, _)) = self.limited.peek() {
                return Some((s, Phase::LimitBreak));
            }
        }
        None
    }
}

impl Scheduler for MClock {
    fn name(&self) -> &'static str {
        "mclock"
    }

    fn enqueue(&mut self, req: Request, now_ns: u64) -> Result<(), Refused> {
        if req.class == QosClass::Immediate {
            self.immediate.push_back(req);
            self.queued += 1;
            return Ok(());
        }
        let key = self.key_of(&req);
        let Some(s) = self.slot_for(key) else {
            return Err(Refused(req));
        };
        let slot = &mut self.slots[s as usize];
        match &mut slot.queue {
            KeyQueue::Fifo(q) => q.push_back(req),
            KeyQueue::Sub {
                policy, refused, ..
            } => {
                if let Err(Refused(r)) = policy.enqueue(req, now_ns) {
                    refused.push_back(r);
                }
                if slot.active && slot.blocked_until > 0 {
                    // A throttled sub-policy may now have something ready: re-check it.
                    slot.blocked_until = 0;
                    self.queued += 1;
                    self.place(s, now_ns);
                    return Ok(());
                }
            }
        }
        self.queued += 1;
        if !self.slots[s as usize].active {
            self.activate(s, now_ns);
        }
        Ok(())
    }

    fn dequeue(&mut self, now_ns: u64) -> Dequeued {
        if let Some(req) = self.immediate.pop_front() {
            self.queued -= 1;
            return Dequeued::Request(Dispatch {
                req,
                phase: Phase::Reservation,
            });
        }
        self.promote(now_ns);
        while let Some((s, phase)) = self.pick(now_ns) {
            if self.sync_slot(s, now_ns) {
                continue;
            }
            match self.take(s, now_ns) {
                Ok(req) => {
                    self.queued -= 1;
                    self.after_dispatch(s, &req, phase, now_ns);
                    return Dequeued::Request(Dispatch { req, phase });
                }
                Err(Some(t)) => {
                    self.slots[s as usize].blocked_until = t.max(now_ns + 1);
                    self.place(s, now_ns);
                }
                Err(None) => {
                    self.slots[s as usize].active = false;
                    self.slots[s as usize].blocked_until = 0;
                    self.unplace(s);
                }
            }
        }
        match self.next_eligible_ns() {
            Some(t) => Dequeued::NothingBefore(t),
            None => Dequeued::Empty,
        }
    }

    fn len(&self) -> usize {
        self.queued
    }

    fn reconfigure(&mut self, cfg: &PolicyConfig) -> Result<(), QosError> {
        let PolicyConfig::Mclock(c) = cfg else {
            return Err(mismatch("mclock", cfg.name()));
        };
        let class_params = c.class_params()?;
        let subs_changed = c.client_policy != self.cfg.client_policy
            || c.recovery_policy != self.cfg.recovery_policy
            || c.best_effort_policy != self.cfg.best_effort_policy
            || c.per_client != self.cfg.per_client;
        if subs_changed && self.queued > 0 {
            return Err(mismatch(
                "mclock",
                "mclock with other sub-policies while requests are queued",
            ));
        }
        self.cfg = c.clone();
        self.class_params = class_params;
        self.overrides = c
            .per_client_overrides
            .iter()
            .map(|o| (o.client_id, o.params))
            .collect();
        if subs_changed {
            self.slots.clear();
            self.index.clear();
            self.class_slots = [None; 4];
            return Ok(());
        }
        for i in 0..self.slots.len() {
            let key = Key(self.slots[i].class, self.slots[i].client_id);
            self.slots[i].rates = Rates::from(&self.params_of(key));
        }
        Ok(())
    }

    fn drain_all(&mut self) -> Vec<Request> {
        let mut out: Vec<Request> = self.immediate.drain(..).collect();
        for slot in &mut self.slots {
            match &mut slot.queue {
                KeyQueue::Fifo(q) => out.extend(q.drain(..)),
                KeyQueue::Sub {
                    policy, refused, ..
                } => {
                    out.extend(refused.drain(..));
                    out.extend(policy.drain_all());
                }
            }
            slot.active = false;
            slot.blocked_until = 0;
        }
        self.ready_r = IndexedHeap::new();
        self.ready_p = IndexedHeap::new();
        self.limited = IndexedHeap::new();
        self.blocked = IndexedHeap::new();
        self.queued = 0;
        super::sorted_by_id(out)
    }
}
