//! `crrn`: client round robin (Lustre's CRR-N). Owns one queue per active client and the
//! rotation; each turn serves up to `quantum` requests of one client. Never refuses.

use crate::config::{CrrnConfig, PolicyConfig};
use crate::error::{invalid, mismatch, QosError};
use crate::request::Request;
use crate::scheduler::{Dequeued, Dispatch, Phase, Refused, Scheduler};
use std::collections::{HashMap, VecDeque};

/// Empty per-client queues kept for reuse (a returning client costs no allocation); beyond this
/// many clients, empty queues are freed.
pub const IDLE_CLIENTS_KEPT: usize = 65_536;

/// Round robin over clients.
pub struct Crrn {
    cfg: CrrnConfig,
    per_client: HashMap<u64, VecDeque<Request>, crate::fasthash::BuildFastHasher>,
    rotation: VecDeque<u64>,
    served_in_turn: u32,
    len: usize,
}

impl Crrn {
    /// An empty queue; `quantum` must be >= 1.
    pub fn new(cfg: CrrnConfig) -> Result<Crrn, QosError> {
        if cfg.quantum == 0 {
            return Err(invalid("quantum", "must be >= 1"));
        }
        Ok(Crrn {
            cfg,
            per_client: HashMap::default(),
            rotation: VecDeque::new(),
            served_in_turn: 0,
            len: 0,
        })
    }
}

impl Scheduler for Crrn {
    fn name(&self) -> &'static str {
        "crrn"
    }

    fn enqueue(&mut self, req: Request, _now_ns: u64) -> Result<(), Refused> {
        let q = self.per_client.entry(req.client_id).or_default();
        if q.is_empty() {
            self.rotation.push_back(req.client_id);
        }
        q.push_back(req);
        self.len += 1;
        Ok(())
    }

    fn dequeue(&mut self, _now_ns: u64) -> Dequeued {
        let Some(&client) = self.rotation.front() else {
            return Dequeued::Empty;
        };
        let Some(q) = self.per_client.get_mut(&client) else {
            return Dequeued::Empty;
        };
        let Some(req) = q.pop_front() else {
            return Dequeued::Empty;
        };
        self.len -= 1;
        self.served_in_turn += 1;
        if q.is_empty() {
            if self.per_client.len() > IDLE_CLIENTS_KEPT {
                self.per_client.remove(&client);
            }
            self.rotation.pop_front();
            self.served_in_turn = 0;
        } else if self.served_in_turn >= self.cfg.quantum {
            self.rotation.rotate_left(1);
            self.served_in_turn = 0;
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
        match cfg {
            PolicyConfig::Crrn(c) => {
                let fresh = Crrn::new(c.clone())?;
                self.cfg = fresh.cfg;
                Ok(())
            }
            other => Err(mismatch("crrn", other.name())),
        }
    }

    fn drain_all(&mut self) -> Vec<Request> {
        let out = self.per_client.drain().flat_map(|(_, q)| q).collect();
        self.rotation.clear();
        self.len = 0;
        super::sorted_by_id(out)
    }
}
