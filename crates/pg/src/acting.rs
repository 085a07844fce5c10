//! Who serves a PG while its copies are brought up to date: the choices peering makes once it
//! has a plan. A copy whose recovery is short is recovered after the PG activates; one whose
//! recovery is long (a backfill, or a log recovery of many objects) is filled in the
//! background while a temporary acting set of complete copies serves (Ceph's pg_temp). The
//! cluster flags `norecover`, `nobackfill` and `norebalance` hold such recoveries back.

use std::collections::{BTreeMap, BTreeSet};

use crate::log::{Eversion, ObjectId};
use crate::peering::{PeeringPlan, Recovery};

/// The objects a copy lacks, with the version it needs (None: the object is deleted).
pub type Missing = BTreeMap<ObjectId, Option<Eversion>>;

/// A PG's acting set and its pool's sizes, as one peering sees them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ActingSet {
    /// The OSDs serving the PG, primary first.
    pub osds: Vec<i32>,
    /// The pool's size.
    pub size: usize,
    /// The pool's min_size.
    pub min_size: usize,
}

/// A cluster flag that holds recovery back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Hold {
    /// `norecover`: no log recovery of a copy within the log's reach.
    NoRecover,
    /// `nobackfill`: no backfill of a copy beyond the log's reach.
    NoBackfill,
    /// `norebalance`: no recovery of any copy of a PG that is only misplaced (it has its
    /// pool's size of copies serving).
    NoRebalance,
}

/// The holding flags set in the cluster map.
pub type Holds = BTreeSet<Hold>;

/// Whether every acting copy's recovery is short enough to run after the PG activates: no
/// copy needs a backfill, and none lacks `min_objects` or more (Ceph's
/// `osd_async_recovery_min_cost`: beyond it, a temporary acting set of complete copies serves
/// while the copy is filled).
pub fn recovers_after_activation(acting: &[i32], plan: &PeeringPlan, min_objects: usize) -> bool {
    acting.iter().all(|o| match plan.recovery.get(o) {
        None | Some(Recovery::Clean) => true,
        Some(Recovery::Backfill) => false,
        Some(Recovery::Log { missing, .. }) => missing.len() < min_objects,
    })
}

/// What `plan` says copy `osd` lacks (nothing when it is clean or needs a backfill).
pub fn missing_of(plan: &PeeringPlan, osd: i32) -> Missing {
    match plan.recovery.get(&osd) {
        Some(Recovery::Log { missing, .. }) => missing.clone(),
        _ => Missing::new(),
    }
}

/// The temporary acting set to serve the PG from while its copies are filled in the
/// background, or None when every acting copy's recovery is short (fewer than `min_objects`
/// objects: done in place), or fewer than `min_size` complete copies are `up`. Complete copies
/// of the acting set come first, in its order, then complete copies of earlier intervals, up
/// to the pool's size.
pub fn temporary_acting(
    acting: &ActingSet,
    plan: &PeeringPlan,
    up: &BTreeSet<i32>,
    min_objects: usize,
) -> Option<Vec<i32>> {
    let long = |r: &Recovery| match r {
        Recovery::Clean => false,
        Recovery::Backfill => true,
        Recovery::Log { missing, .. } => missing.len() >= min_objects,
    };
    if !acting
        .osds
        .iter()
        .any(|o| plan.recovery.get(o).is_some_and(long))
    {
        return None;
    }
    let complete = |o: &i32| up.contains(o) && plan.recovery.get(o) == Some(&Recovery::Clean);
    let mut temp: Vec<i32> = acting.osds.iter().copied().filter(complete).collect();
    for o in plan.recovery.keys() {
        if temp.len() >= acting.size {
            break;
        }
        if !temp.contains(o) && complete(o) {
            temp.push(*o);
        }
    }
    (temp.len() >= acting.min_size.max(1) && temp != acting.osds).then_some(temp)
}

/// The flag of `holds` that holds back recovering a copy (`backfill`: one beyond the PG log's
/// reach) of a PG served by `serving` copies of its pool's `size`, if any: `nobackfill` or
/// `norecover` by the copy's kind, and `norebalance` when the PG has its size of copies
/// serving (it is only misplaced, not degraded).
pub fn held_by(holds: &Holds, backfill: bool, serving: usize, size: usize) -> Option<Hold> {
    let own = match backfill {
        true => Hold::NoBackfill,
        false => Hold::NoRecover,
    };
    [own, Hold::NoRebalance]
        .into_iter()
        .find(|&f| holds.contains(&f) && (f != Hold::NoRebalance || serving >= size))
}

/// The flag of `holds` that holds back the recovery `plan` gives the acting copies, were the
/// PG served by `serving` copies meanwhile: a primary that could not get its temporary acting
/// set must then peer again later rather than recover in place, which would move what the
/// flag holds.
pub fn holding_flag(
    holds: &Holds,
    acting: &ActingSet,
    plan: &PeeringPlan,
    serving: usize,
) -> Option<Hold> {
    acting
        .osds
        .iter()
        .find_map(|o| match plan.recovery.get(o)? {
            Recovery::Clean => None,
            Recovery::Backfill => held_by(holds, true, serving, acting.size),
            Recovery::Log { .. } => held_by(holds, false, serving, acting.size),
        })
}

/// The fewest objects a copy's log recovery must lack to be done in the background from a
/// temporary acting set rather than in place: `normal`, or 1 when a flag of `holds` would hold
/// that background fill (`norecover`; `norebalance` where the temporary set would have the
/// pool's size of copies). A flag so holds short recoveries too wherever the PG can serve
/// meanwhile; a PG without min_size complete copies still recovers before it serves.
pub fn min_objects_under_holds(
    holds: &Holds,
    acting: &ActingSet,
    plan: &PeeringPlan,
    up: &BTreeSet<i32>,
    normal: usize,
) -> usize {
    if !holds.contains(&Hold::NoRecover) && !holds.contains(&Hold::NoRebalance) {
        return normal;
    }
    match temporary_acting(acting, plan, up, 1) {
        Some(temp) if held_by(holds, false, temp.len(), acting.size).is_some() => 1,
        _ => normal,
    }
}
