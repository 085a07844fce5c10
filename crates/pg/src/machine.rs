//! The primary's peering sequence for one PG, driven by events: a new map makes the primary
//! gather the logs of its acting set; once all answered it plans (see [`crate::peering`]),
//! recovers its own missing objects first, activates, and pushes to the replicas that need it;
//! it is clean when every copy matches. Replicas only answer log requests (not modelled here).

use std::collections::{BTreeMap, BTreeSet};

use crate::log::{Eversion, ObjectId};
use crate::peering::{plan, PeerLog, PeeringPlan, Recovery};

/// What the PG is doing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PgState {
    /// Not the primary in the current map (or no map yet).
    Stray,
    /// Waiting for the logs of these OSDs.
    GetLogs {
        /// OSDs still to answer.
        waiting: BTreeSet<i32>,
    },
    /// Fewer than `min_size` copies available: no I/O until the map changes.
    Incomplete,
    /// Serving I/O; recovery still to do for these (osd, object) pairs.
    Active {
        /// Outstanding recovery.
        pending: BTreeSet<(i32, ObjectId)>,
        /// OSDs that need a backfill.
        backfill: BTreeSet<i32>,
    },
    /// Every copy matches the authoritative log.
    Clean,
}

/// Inputs.
#[derive(Clone, Debug)]
pub enum Event {
    /// A new map: this PG's acting set (primary first) at `epoch`.
    Map {
        /// Epoch.
        epoch: u64,
        /// Acting set, primary first.
        acting: Vec<i32>,
        /// Copies needed to serve I/O.
        min_size: usize,
    },
    /// An OSD's log arrived (for the given epoch).
    Log {
        /// Epoch of the request it answers.
        epoch: u64,
        /// The log.
        peer: PeerLog,
    },
    /// An object finished recovering on an OSD.
    Recovered {
        /// OSD that now has it.
        osd: i32,
        /// The object.
        object: ObjectId,
    },
    /// An OSD finished a backfill.
    Backfilled {
        /// OSD.
        osd: i32,
    },
}

/// Outputs for the daemon to carry out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Ask `to` for its log of this PG.
    RequestLog {
        /// Target OSD.
        to: i32,
        /// Epoch of the request.
        epoch: u64,
    },
    /// Fetch `object` (at `version`, None = it must be deleted) from `from` into the primary.
    Pull {
        /// Source OSD.
        from: i32,
        /// Object.
        object: ObjectId,
        /// Version wanted.
        version: Option<Eversion>,
    },
    /// Send `object` to `to` (None = delete it there).
    Push {
        /// Target OSD.
        to: i32,
        /// Object.
        object: ObjectId,
        /// Version to install.
        version: Option<Eversion>,
    },
    /// Copy the whole PG to `to`.
    Backfill {
        /// Target OSD.
        to: i32,
    },
    /// Start serving I/O with this plan.
    Activate {
        /// Epoch.
        epoch: u64,
        /// The plan.
        plan: PeeringPlan,
    },
}

/// Peering state of one PG on one OSD.
#[derive(Clone, Debug)]
pub struct PeeringMachine {
    me: i32,
    own: PeerLog,
    epoch: u64,
    acting: Vec<i32>,
    min_size: usize,
    logs: BTreeMap<i32, PeerLog>,
    /// Current state.
    pub state: PgState,
}

impl PeeringMachine {
    /// A machine for OSD `me` holding `own`.
    pub fn new(me: i32, own: PeerLog) -> Self {
        PeeringMachine {
            me,
            own,
            epoch: 0,
            acting: Vec::new(),
            min_size: 1,
            logs: BTreeMap::new(),
            state: PgState::Stray,
        }
    }

    /// Feeds one event; returns the actions to take.
    pub fn handle(&mut self, event: Event) -> Vec<Action> {
        match event {
            Event::Map {
                epoch,
                acting,
                min_size,
            } => {
                self.epoch = epoch;
                self.acting = acting;
                self.min_size = min_size.max(1);
                self.logs.clear();
                if self.acting.first() != Some(&self.me) {
                    self.state = PgState::Stray;
                    return Vec::new();
                }
                if self.acting.len() < self.min_size {
                    self.state = PgState::Incomplete;
                    return Vec::new();
                }
                self.logs.insert(self.me, self.own.clone());
                let waiting: BTreeSet<i32> = self
                    .acting
                    .iter()
                    .copied()
                    .filter(|&o| o != self.me)
                    .collect();
                let actions = waiting
                    .iter()
                    .map(|&to| Action::RequestLog { to, epoch })
                    .collect();
                self.state = PgState::GetLogs { waiting };
                self.maybe_activate_with(actions)
            }
            Event::Log { epoch, peer } => {
                let PgState::GetLogs { waiting } = &mut self.state else {
                    return Vec::new();
                };
                if epoch != self.epoch || !waiting.remove(&peer.osd) {
                    return Vec::new();
                }
                self.logs.insert(peer.osd, peer);
                self.maybe_activate_with(Vec::new())
            }
            Event::Recovered { osd, object } => {
                if let PgState::Active { pending, .. } = &mut self.state {
                    pending.remove(&(osd, object));
                }
                self.maybe_clean();
                Vec::new()
            }
            Event::Backfilled { osd } => {
                if let PgState::Active { backfill, .. } = &mut self.state {
                    backfill.remove(&osd);
                }
                self.maybe_clean();
                Vec::new()
            }
        }
    }

    fn maybe_clean(&mut self) {
        if let PgState::Active { pending, backfill } = &self.state {
            if pending.is_empty() && backfill.is_empty() {
                self.state = PgState::Clean;
            }
        }
    }

    fn maybe_activate_with(&mut self, mut actions: Vec<Action>) -> Vec<Action> {
        let PgState::GetLogs { waiting } = &self.state else {
            return actions;
        };
        if !waiting.is_empty() {
            return actions;
        }
        let peers: Vec<PeerLog> = self.logs.values().cloned().collect();
        let Ok(plan) = plan(&peers, self.me) else {
            self.state = PgState::Incomplete;
            return actions;
        };
        let mut pending = BTreeSet::new();
        let mut backfill = BTreeSet::new();
        if let Some(Recovery::Log { missing, .. }) = plan.recovery.get(&self.me) {
            for (object, version) in missing {
                actions.push(Action::Pull {
                    from: plan.authoritative,
                    object: object.clone(),
                    version: *version,
                });
                pending.insert((self.me, object.clone()));
            }
        }
        let usable = plan
            .recovery
            .iter()
            .filter(|(_, r)| !matches!(r, Recovery::Backfill))
            .count();
        if usable < self.min_size {
            self.state = PgState::Incomplete;
            return actions;
        }
        for (&osd, r) in &plan.recovery {
            match r {
                Recovery::Log { missing, .. } if osd != self.me => {
                    for (object, version) in missing {
                        actions.push(Action::Push {
                            to: osd,
                            object: object.clone(),
                            version: *version,
                        });
                        pending.insert((osd, object.clone()));
                    }
                }
                Recovery::Backfill => {
                    actions.push(Action::Backfill { to: osd });
                    backfill.insert(osd);
                }
                _ => {}
            }
        }
        actions.push(Action::Activate {
            epoch: self.epoch,
            plan,
        });
        self.state = PgState::Active { pending, backfill };
        self.maybe_clean();
        actions
    }
}
