//! The primary's peering of one PG in one interval, without I/O. The OSD drives it: it calls
//! [`Peering::start`], carries out the [`Step`] it gets, feeds the step's [`Outcome`] back
//! with [`Peering::advance`], and so on until a step ends the peering. Every decision is made
//! here; the OSD only fetches, sends and stores.
//!
//! The sequence, as Ceph's: gather the logs of the acting set and of the copies of earlier
//! intervals still up; hear from every later interval that may have taken writes (the prior
//! set, [`crate::intervals`]) or declare the PG down; have the monitor record that this OSD
//! was alive in the interval (up_thru); choose the authoritative log ([`crate::plan`]); then
//! choose who serves ([`crate::acting`]): a temporary acting set of complete copies while a
//! long recovery runs in the background, or the acting set itself, with short recoveries
//! done after activation and the rest before it. A copy too full for its recovery is left out
//! of the interval. Last, activate every copy and serve.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::acting::{
    holding_flag, min_objects_under_holds, missing_of, recovers_after_activation, temporary_acting,
    ActingSet, Hold, Holds, Missing,
};
use crate::intervals::{prior_set, PastInterval, Prior};
use crate::log::PgLog;
use crate::peering::{plan, PeerLog, PeeringPlan, Recovery};

/// Objects a PG that has just come home from a temporary acting set recovers in place rather
/// than going back to a temporary set: the copies filled in the background are then behind
/// only by what was written since the fill's last pass. Under steady writes that is often
/// more than the plain threshold, and with it a PG went back and forth between its up set and
/// a temporary set (seen in a thrash test: 15 round trips in 0.7 s) instead of recovering
/// those few objects.
pub const HOME_MIN_OBJECTS: usize = 64;

/// What the OSD knows when a peering starts.
#[derive(Clone, Debug)]
pub struct Setup {
    /// This OSD, the primary.
    pub me: i32,
    /// The epoch that began the interval.
    pub epoch: u64,
    /// The interval's acting set (primary first) and the pool's sizes.
    pub acting: ActingSet,
    /// This OSD's own copy.
    pub own: PeerLog,
    /// OSDs up in the newest map.
    pub up: BTreeSet<i32>,
    /// OSDs this OSD knows held the PG in earlier intervals.
    pub earlier: BTreeSet<i32>,
    /// Fewest objects a copy must lack for its recovery to run from a temporary acting set
    /// (Ceph's `osd_async_recovery_min_cost`).
    pub remap_min_objects: usize,
}

/// What the OSD is to do next for the peering.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Find the PG's acting set in the map of `epoch` (empty when it cannot be had) and the
    /// OSDs up now: [`Outcome::Acting`].
    ActingIn {
        /// The epoch.
        epoch: u64,
    },
    /// Ask `osd` for its log of the PG: [`Outcome::Log`]. Where `required`, the peering cannot
    /// go on without it and a failure ends the attempt; otherwise a copy that does not answer
    /// is passed over ([`Outcome::NoLog`]).
    QueryLog {
        /// The OSD.
        osd: i32,
        /// Whether the peering needs the answer.
        required: bool,
    },
    /// Fetch the PG's past intervals after `since` (the newest last epoch started heard of)
    /// and the OSDs whose data was given up: [`Outcome::PastIntervals`].
    PastIntervals {
        /// Newest last epoch started among the logs heard.
        since: u64,
    },
    /// Have the monitor record this OSD's up_thru at the interval's start and wait for a map
    /// of the interval that shows it: [`Outcome::UpThru`].
    UpThru,
    /// Read what the choice of who serves depends on now: [`Outcome::Conditions`].
    Conditions,
    /// Ask the monitor for a temporary acting set `temp` and wait for the map that starts it:
    /// [`Outcome::Served`]. Where it does not come, the peering goes on `instead`.
    ServeFrom {
        /// The temporary acting set, primary first.
        temp: Vec<i32>,
        /// What the peering does if the temporary set does not come.
        instead: &'static str,
    },
    /// Bring this OSD's copy to the authoritative state: [`Outcome::Done`].
    RecoverOwn {
        /// What the copy must do (a log recovery or a backfill).
        recovery: Recovery,
        /// The OSD holding the authoritative log.
        authoritative: i32,
        /// The copies to take objects from, the authoritative one first.
        sources: Vec<i32>,
    },
    /// Bring the acting copy on `osd` to the authoritative state: [`Outcome::CopyRecovered`],
    /// or [`Outcome::CopyTooFull`] when it cannot take its recovery.
    RecoverCopy {
        /// The OSD.
        osd: i32,
        /// What the copy must do.
        recovery: Recovery,
    },
    /// Activate the copy on `osd` with the authoritative log: [`Outcome::Done`].
    ActivateCopy {
        /// The OSD.
        osd: i32,
        /// The authoritative log.
        log: Box<PgLog>,
        /// After a backfill, the objects the copy keeps (it removes the others).
        keep: Option<Vec<String>>,
        /// Objects the copy lacks still (recovered after activation).
        missing: Missing,
    },
    /// Last step: persist the activation on this OSD and serve.
    Commit(Box<Activation>),
    /// Last step: fewer than min_size copies in the acting set; the PG stays inactive until
    /// the map changes.
    Inactive,
    /// Last step: an interval that may have taken writes has no copy up.
    Down {
        /// The interval.
        interval: PastInterval,
    },
    /// Last step: a cluster flag holds back the recovery this PG needs and no temporary
    /// acting set serves meanwhile; peer again later.
    Held(Hold),
    /// Last step: this attempt cannot finish; try again.
    Failed(String),
    /// Last step: nothing more to do here (the interval ended, or the PG serves elsewhere).
    Stop,
}

impl Step {
    /// Whether this step ends the peering.
    pub fn is_last(&self) -> bool {
        matches!(
            self,
            Step::Commit(_)
                | Step::Inactive
                | Step::Down { .. }
                | Step::Held(_)
                | Step::Failed(_)
                | Step::Stop
        )
    }
}

/// The outcome of a [`Step`], fed back to the machine.
#[derive(Clone, Debug)]
pub enum Outcome {
    /// The acting set asked for, and the OSDs up now.
    Acting {
        /// The acting set (empty when none could be had).
        acting: Vec<i32>,
        /// OSDs up now.
        up: BTreeSet<i32>,
    },
    /// A copy's log.
    Log(PeerLog),
    /// A copy that need not answer did not.
    NoLog,
    /// The PG's past intervals.
    PastIntervals {
        /// The intervals, oldest first.
        intervals: Vec<PastInterval>,
        /// OSDs whose data was given up, with the epoch of that decision.
        lost: BTreeMap<i32, u64>,
    },
    /// Whether the up_thru was recorded in the interval (false: the interval ended).
    UpThru(bool),
    /// What the choice of who serves depends on.
    Conditions {
        /// Cluster flags that hold recovery.
        holds: Holds,
        /// Whether a copy refused its recovery as too full earlier in this interval.
        too_full: bool,
        /// Whether the map before the interval had a temporary acting set for the PG that
        /// the interval's up set replaces.
        came_home: bool,
    },
    /// Whether the temporary acting set was granted.
    Served(bool),
    /// The step was carried out.
    Done,
    /// The copy was recovered; after a backfill, the objects it keeps.
    CopyRecovered {
        /// The objects a backfilled copy keeps.
        keep: Option<Vec<String>>,
    },
    /// The copy is too full to take its recovery.
    CopyTooFull,
}

/// What the primary persists and serves with once peering is over.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Activation {
    /// The authoritative log.
    pub log: PgLog,
    /// Objects this OSD's copy still lacks.
    pub own_missing: Missing,
    /// Objects each other acting copy still lacks.
    pub peers_missing: BTreeMap<i32, Missing>,
    /// The copies to recover objects from, the authoritative one first.
    pub sources: Vec<i32>,
    /// Acting copies left out of the interval (too full for their recovery).
    pub left_out: BTreeSet<i32>,
    /// Whether the PG is clean at once: its pool's size of copies, none lacking anything.
    pub clean: bool,
    /// The newest last epoch started heard of.
    pub history_les: u64,
}

/// Which copies to ask next, and what comes after.
#[derive(Clone, Debug)]
enum Then {
    /// The copies of earlier intervals.
    Past,
    /// The prior set.
    Prior,
    /// The up_thru.
    UpThru,
}

#[derive(Clone, Debug)]
enum Phase {
    Before,
    Asking {
        queue: VecDeque<i32>,
        required: bool,
        then: Then,
    },
    Prior,
    Since,
    UpThru,
    Conditions,
    Temporary {
        held: Option<Hold>,
    },
    Own,
    Copy {
        osd: i32,
    },
    Activating {
        osd: i32,
        missing: Missing,
    },
    LeftOut,
    Over,
}

/// The primary's peering of one PG in one interval.
#[derive(Clone, Debug)]
pub struct Peering {
    setup: Setup,
    logs: Vec<PeerLog>,
    heard: BTreeSet<i32>,
    past: BTreeSet<i32>,
    phase: Phase,
    plan: Option<PeeringPlan>,
    after_activation: bool,
    copies: VecDeque<i32>,
    left_out: BTreeSet<i32>,
    peers_missing: BTreeMap<i32, Missing>,
}

impl Peering {
    /// A peering of `setup`'s interval; [`Peering::start`] gives its first step.
    pub fn new(setup: Setup) -> Self {
        let logs = vec![setup.own.clone()];
        let heard = BTreeSet::from([setup.me]);
        Peering {
            setup,
            logs,
            heard,
            past: BTreeSet::new(),
            phase: Phase::Over,
            plan: None,
            after_activation: false,
            copies: VecDeque::new(),
            left_out: BTreeSet::new(),
            peers_missing: BTreeMap::new(),
        }
    }

    /// The first step.
    pub fn start(&mut self) -> Step {
        let acting = &self.setup.acting;
        assert_eq!(
            acting.osds.first(),
            Some(&self.setup.me),
            "only a PG's primary peers it"
        );
        if acting.osds.len() < acting.min_size.max(1) {
            return self.over(Step::Inactive);
        }
        match self.setup.epoch.checked_sub(1).filter(|e| *e > 0) {
            Some(before) => {
                self.phase = Phase::Before;
                Step::ActingIn { epoch: before }
            }
            None => self.ask_acting(Vec::new()),
        }
    }

    /// The logs heard so far, this OSD's first.
    pub fn logs(&self) -> &[PeerLog] {
        &self.logs
    }

    /// The plan, once the logs are all heard and the up_thru recorded.
    pub fn plan(&self) -> Option<&PeeringPlan> {
        self.plan.as_ref()
    }

    /// Feeds the outcome of the last step; returns the next one. An outcome that does not
    /// answer the last step fails the peering.
    pub fn advance(&mut self, outcome: Outcome) -> Step {
        let phase = std::mem::replace(&mut self.phase, Phase::Over);
        match (phase, outcome) {
            (Phase::Before, Outcome::Acting { acting, .. }) => self.ask_acting(acting),
            (
                Phase::Asking {
                    queue,
                    required,
                    then,
                },
                outcome @ (Outcome::Log(_) | Outcome::NoLog),
            ) => {
                match outcome {
                    Outcome::Log(log) => {
                        self.heard.insert(log.osd);
                        self.logs.push(log);
                    }
                    _ if required => {
                        return self.over(Step::Failed("a required log did not come".into()))
                    }
                    _ => {}
                }
                self.ask_next(queue, required, then)
            }
            (Phase::Prior, Outcome::PastIntervals { intervals, lost }) => {
                match prior_set(&intervals, self.since(), &self.heard, &self.setup.up, &lost) {
                    Prior::Ask(more) if more.is_empty() => self.since_step(),
                    Prior::Ask(more) => {
                        self.ask_next(more.into_iter().collect(), true, Then::Prior)
                    }
                    Prior::Down { interval } => self.over(Step::Down { interval }),
                }
            }
            (Phase::Since, Outcome::Acting { acting, up }) => {
                let more = acting
                    .into_iter()
                    .filter(|o| !self.heard.contains(o) && !self.past.contains(o) && up.contains(o))
                    .collect();
                self.ask_next(more, false, Then::UpThru)
            }
            (Phase::UpThru, Outcome::UpThru(true)) => {
                match plan(&self.logs, self.setup.me) {
                    Ok(p) => self.plan = Some(p),
                    Err(e) => return self.over(Step::Failed(e.to_string())),
                }
                self.phase = Phase::Conditions;
                Step::Conditions
            }
            (Phase::UpThru, Outcome::UpThru(false)) => self.over(Step::Stop),
            (
                Phase::Conditions,
                Outcome::Conditions {
                    holds,
                    too_full,
                    came_home,
                },
            ) => self.choose(&holds, too_full, came_home),
            (Phase::Temporary { .. }, Outcome::Served(true)) => self.over(Step::Stop),
            (Phase::Temporary { held: Some(flag) }, Outcome::Served(false)) => {
                self.over(Step::Held(flag))
            }
            (Phase::Temporary { held: None }, Outcome::Served(false)) => self.recover_own(),
            (Phase::Own, Outcome::Done) => self.next_copy(),
            (Phase::Copy { osd }, Outcome::CopyRecovered { keep }) => {
                self.activate_copy(osd, keep, Missing::new())
            }
            (Phase::Copy { osd }, Outcome::CopyTooFull) => {
                self.left_out.insert(osd);
                self.next_copy()
            }
            (Phase::Activating { osd, missing }, Outcome::Done) => {
                self.peers_missing.insert(osd, missing);
                self.next_copy()
            }
            (Phase::LeftOut, Outcome::Served(true)) => self.over(Step::Stop),
            (Phase::LeftOut, Outcome::Served(false)) => self.commit(),
            (phase, outcome) => self.over(Step::Failed(format!(
                "peering in phase {phase:?} got an outcome that does not answer it: {outcome:?}"
            ))),
        }
    }

    fn over(&mut self, step: Step) -> Step {
        debug_assert!(step.is_last());
        self.phase = Phase::Over;
        step
    }

    fn since(&self) -> u64 {
        self.logs
            .iter()
            .map(|l| l.last_epoch_started)
            .max()
            .unwrap_or(0)
    }

    /// The acting set's copies other than the primary, in order of OSD id.
    fn other_copies(&self) -> BTreeSet<i32> {
        self.setup.acting.osds.iter().copied().skip(1).collect()
    }

    /// Asks the acting copies (all required), after noting the copies of earlier intervals
    /// (`previous`: the acting set just before this interval) to ask next.
    fn ask_acting(&mut self, previous: Vec<i32>) -> Step {
        let me = self.setup.me;
        let others = self.other_copies();
        self.past = self
            .setup
            .earlier
            .iter()
            .copied()
            .chain(previous)
            .filter(|o| *o != me && self.setup.up.contains(o) && !others.contains(o))
            .collect();
        self.ask_next(others.into_iter().collect(), true, Then::Past)
    }

    fn ask_next(&mut self, mut queue: VecDeque<i32>, required: bool, then: Then) -> Step {
        if let Some(osd) = queue.pop_front() {
            self.phase = Phase::Asking {
                queue,
                required,
                then,
            };
            return Step::QueryLog { osd, required };
        }
        match then {
            Then::Past => {
                let past = self.past.iter().copied().collect();
                self.ask_next(past, false, Then::Prior)
            }
            Then::Prior => {
                self.phase = Phase::Prior;
                Step::PastIntervals {
                    since: self.since(),
                }
            }
            Then::UpThru => {
                self.phase = Phase::UpThru;
                Step::UpThru
            }
        }
    }

    /// The copies of the interval the newest log was activated in, where the PG last served,
    /// are heard too: a complete one still up can serve in a temporary acting set (Ceph's
    /// choose_acting weighs every copy it heard of), where the intervals in between (ones that
    /// never went active) may not name it.
    fn since_step(&mut self) -> Step {
        match self.since() {
            0 => self.ask_next(VecDeque::new(), false, Then::UpThru),
            since => {
                self.phase = Phase::Since;
                Step::ActingIn { epoch: since }
            }
        }
    }

    /// Chooses who serves: a temporary acting set while a long recovery runs in the
    /// background, or the acting set, recovering short recoveries after activation.
    fn choose(&mut self, holds: &Holds, too_full: bool, came_home: bool) -> Step {
        let Some(plan) = self.plan.as_ref() else {
            return self.over(Step::Failed("no plan to choose from".into()));
        };
        let acting = &self.setup.acting;
        let up = &self.setup.up;
        let min_objects = match came_home {
            true => self.setup.remap_min_objects.max(HOME_MIN_OBJECTS),
            false => self.setup.remap_min_objects,
        };
        // `norebalance` keeps a PG that has its pool's size of complete copies on them.
        let misplaced_held = holds.contains(&Hold::NoRebalance)
            && temporary_acting(acting, plan, up, 1).is_some_and(|t| t.len() >= acting.size);
        // A copy that refused its recovery as too full is left out by recovering in place.
        self.after_activation = recovers_after_activation(&acting.osds, plan, min_objects)
            && !too_full
            && !misplaced_held;
        if !self.after_activation {
            let min_objects = min_objects_under_holds(holds, acting, plan, up, min_objects);
            if let Some(temp) = temporary_acting(acting, plan, up, min_objects) {
                let held = holding_flag(holds, acting, plan, temp.len());
                let instead = match held {
                    Some(_) => "peering again: a cluster flag holds the recovery",
                    None => "recovering before activation",
                };
                self.phase = Phase::Temporary { held };
                return Step::ServeFrom { temp, instead };
            }
        }
        self.recover_own()
    }

    /// The copies to pull this copy's missing objects from: the authoritative log's holder
    /// first, then every other copy heard.
    fn sources(&self, authoritative: i32) -> Vec<i32> {
        std::iter::once(authoritative)
            .chain(self.logs.iter().map(|l| l.osd))
            .filter(|&o| o != self.setup.me)
            .collect()
    }

    /// The primary first: it must hold the authoritative state before it serves or pushes.
    fn recover_own(&mut self) -> Step {
        self.copies = self.other_copies().into_iter().collect();
        let Some(plan) = self.plan.as_ref() else {
            return self.over(Step::Failed("no plan to recover by".into()));
        };
        if self.after_activation {
            return self.next_copy();
        }
        match plan.recovery.get(&self.setup.me) {
            Some(r @ (Recovery::Log { .. } | Recovery::Backfill)) => {
                let step = Step::RecoverOwn {
                    recovery: r.clone(),
                    authoritative: plan.authoritative,
                    sources: self.sources(plan.authoritative),
                };
                self.phase = Phase::Own;
                step
            }
            _ => self.next_copy(),
        }
    }

    /// Then every other acting copy, in order of OSD id.
    fn next_copy(&mut self) -> Step {
        let Some(osd) = self.copies.pop_front() else {
            return self.after_copies();
        };
        let Some(plan) = self.plan.as_ref() else {
            return self.over(Step::Failed("no plan to recover by".into()));
        };
        if self.after_activation {
            let missing = missing_of(plan, osd);
            return self.activate_copy(osd, None, missing);
        }
        match plan.recovery.get(&osd) {
            Some(r @ (Recovery::Log { .. } | Recovery::Backfill)) => {
                let step = Step::RecoverCopy {
                    osd,
                    recovery: r.clone(),
                };
                self.phase = Phase::Copy { osd };
                step
            }
            _ => self.activate_copy(osd, None, Missing::new()),
        }
    }

    fn activate_copy(&mut self, osd: i32, keep: Option<Vec<String>>, missing: Missing) -> Step {
        let log = Box::new(self.authoritative_log().clone());
        self.phase = Phase::Activating {
            osd,
            missing: missing.clone(),
        };
        Step::ActivateCopy {
            osd,
            log,
            keep,
            missing,
        }
    }

    fn authoritative_log(&self) -> &PgLog {
        let auth = self.plan.as_ref().map(|p| p.authoritative);
        self.logs
            .iter()
            .find(|l| Some(l.osd) == auth)
            .map_or(&self.logs[0].log, |l| &l.log)
    }

    /// Enough copies took their recovery? Those left out must leave the acting set in the map
    /// too: a copy left out while the map still names it could later be taken for a copy of
    /// the interval it never served.
    fn after_copies(&mut self) -> Step {
        let acting = &self.setup.acting;
        let copies = acting.osds.len() - self.left_out.len();
        if copies < acting.min_size.max(1) {
            let reason = format!(
                "only {copies} copies could take recovery, min_size is {}",
                acting.min_size
            );
            return self.over(Step::Failed(reason));
        }
        if self.left_out.is_empty() {
            return self.commit();
        }
        let temp = acting
            .osds
            .iter()
            .copied()
            .filter(|o| !self.left_out.contains(o))
            .collect();
        self.phase = Phase::LeftOut;
        Step::ServeFrom {
            temp,
            instead: "serving with the too full copies left out",
        }
    }

    fn commit(&mut self) -> Step {
        let Some(plan) = self.plan.as_ref() else {
            return self.over(Step::Failed("no plan to activate with".into()));
        };
        let own_missing = match self.after_activation {
            true => missing_of(plan, self.setup.me),
            false => Missing::new(),
        };
        let acting = &self.setup.acting;
        let copies = acting.osds.len() - self.left_out.len();
        let complete = own_missing.is_empty() && self.peers_missing.values().all(|m| m.is_empty());
        let activation = Activation {
            log: self.authoritative_log().clone(),
            sources: self.sources(plan.authoritative),
            own_missing,
            peers_missing: std::mem::take(&mut self.peers_missing),
            left_out: std::mem::take(&mut self.left_out),
            clean: copies >= acting.size && complete,
            history_les: self.since(),
        };
        self.over(Step::Commit(Box::new(activation)))
    }
}
