//! The objects a PG's primary writes while a background fill copies the PG to OSDs outside
//! its temporary acting set, and which of those writes go to the copies being filled.
//!
//! Each fill attempt has a number ([`FillWrites::start`]) that its pushes, its `Filled` and
//! its forwarded writes carry, so a copy refuses what an earlier attempt left in flight. Its
//! first pass pushes what the copy lacks without holding writes, noting every object written
//! meanwhile (`dirty`). From then on the copy is current for every object outside `dirty` and
//! the pass under way (`pushing`): a write to such an object, once every acting copy has
//! committed it, is forwarded to the copy ([`FillWrites::route`]; Ceph writes to a backfill
//! target below its `last_backfill`), so it stays current. Later passes push the dirty objects
//! one at a time with that object's writes held, and each pushed object is current again. A forward that fails makes its object dirty
//! again; one whose outcome is unknown (no answer) spoils the attempt, since the copy may still
//! apply it after a later push (the next attempt starts from its first pass). What is left for
//! the hand-back, with the PG's writes held, is then only what failed to forward.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

/// Most object names kept for one fill target; past it the target's next pass lists every
/// object again (a full pass), as the first one does.
pub const MAX_TRACKED: usize = 1 << 20;

/// What has been written to one fill target's PG and not forwarded to it since its last pass
/// began.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Written {
    /// The objects written (or removed), by name.
    pub objects: BTreeSet<String>,
    /// More than [`MAX_TRACKED`] names were written: `objects` is incomplete.
    pub overflowed: bool,
}

/// What a write of the primary owes one fill target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Forward {
    /// The copy being filled.
    pub target: i32,
    /// The fill attempt the forwarded write belongs to.
    pub attempt: u64,
}

/// One fill target's state.
#[derive(Debug, Default)]
struct Target {
    dirty: Written,
    /// The copy is current for every object outside `dirty` and `pushing`.
    forwarding: bool,
    /// Objects of the pass under way not pushed yet: a write to one is neither forwarded nor
    /// noted, since its push (which waits for the write) carries it.
    pushing: BTreeSet<String>,
    /// A forwarded write's outcome is unknown: this attempt cannot vouch for the copy.
    spoiled: bool,
}

impl Target {
    fn note(&mut self, object: &str) {
        let dirty = &mut self.dirty;
        if dirty.overflowed || dirty.objects.contains(object) {
            return;
        }
        if dirty.objects.len() >= MAX_TRACKED {
            dirty.objects.clear();
            dirty.overflowed = true;
        } else {
            dirty.objects.insert(object.to_string());
        }
    }
}

/// The fill attempt tracking writes, and what each of its targets has yet to see.
#[derive(Debug, Default)]
struct Tracking {
    epoch: u64,
    attempt: u64,
    targets: BTreeMap<i32, Target>,
}

/// The writes a PG's fill has yet to copy, by target (a short lock, never held across an
/// await).
#[derive(Debug, Default)]
pub struct FillWrites {
    tracking: Mutex<Option<Tracking>>,
    /// The last attempt number given out.
    attempts: Mutex<u64>,
}

/// What became of a write forwarded to a fill target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Forwarded {
    /// The copy committed it.
    Applied,
    /// It was not applied: refused there, or never sent.
    Refused,
    /// No answer: the copy may apply it later.
    Unknown,
}

/// The forwards one write owes, settled when it learns their outcome; any not settled when it
/// is dropped count as refused (the object is copied again).
#[must_use]
#[derive(Debug)]
pub struct Routed<'a> {
    writes: &'a FillWrites,
    object: String,
    /// The forwards to send, each with its outcome once known.
    pending: Vec<(Forward, Option<Forwarded>)>,
}

impl Routed<'_> {
    /// The copies this write is to be forwarded to.
    pub fn forwards(&self) -> Vec<Forward> {
        self.pending.iter().map(|(f, _)| *f).collect()
    }

    /// Records what became of the forward to `target`.
    pub fn settle(&mut self, target: i32, outcome: Forwarded) {
        for (f, o) in &mut self.pending {
            if f.target == target {
                *o = Some(outcome);
            }
        }
    }
}

impl Drop for Routed<'_> {
    fn drop(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let mut tracking = self.writes.lock();
        for (f, outcome) in self.pending.drain(..) {
            let outcome = outcome.unwrap_or(Forwarded::Refused);
            let Some(t) = tracking.as_mut() else { continue };
            if outcome == Forwarded::Applied {
                continue;
            }
            let current = t.attempt == f.attempt;
            if let Some(st) = t.targets.get_mut(&f.target) {
                // Also when a later attempt began meanwhile: its first pass may have planned
                // without this object.
                st.note(&self.object);
                if outcome == Forwarded::Unknown && current {
                    st.spoiled = true;
                }
            }
        }
    }
}

impl FillWrites {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Tracking>> {
        self.tracking.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts an attempt of the fill of the interval begun at `epoch` to `targets`, and gives
    /// its number (above every earlier attempt's). What earlier attempts of the interval left
    /// dirty stays dirty; another interval's tracking is replaced. Nothing is forwarded until
    /// [`FillWrites::forward_from_now`].
    pub fn start(&self, epoch: u64, targets: &[i32]) -> u64 {
        let attempt = {
            let mut n = self.attempts.lock().unwrap_or_else(|p| p.into_inner());
            *n += 1;
            *n
        };
        let mut tracking = self.lock();
        let mut earlier = match tracking.take() {
            Some(t) if t.epoch == epoch => t,
            _ => Tracking {
                epoch,
                ..Tracking::default()
            },
        };
        let targets = targets
            .iter()
            .map(|&t| {
                let dirty = earlier
                    .targets
                    .remove(&t)
                    .map(|old| old.dirty)
                    .unwrap_or_default();
                (
                    t,
                    Target {
                        dirty,
                        ..Target::default()
                    },
                )
            })
            .collect();
        *tracking = Some(Tracking {
            epoch,
            attempt,
            targets,
        });
        attempt
    }

    /// Ends forwarding for the fill of `epoch` (an attempt ended): writes are noted as dirty
    /// again, and what is dirty stays for the next attempt.
    pub fn pause(&self, epoch: u64) {
        let mut tracking = self.lock();
        if let Some(t) = tracking.as_mut().filter(|t| t.epoch == epoch) {
            for st in t.targets.values_mut() {
                st.forwarding = false;
                st.pushing.clear();
            }
        }
    }

    /// Stops the tracking of the fill of `epoch` (handed back, or the interval ended; a later
    /// interval's fill stays).
    pub fn stop(&self, epoch: u64) {
        let mut tracking = self.lock();
        if tracking.as_ref().is_some_and(|t| t.epoch == epoch) {
            *tracking = None;
        }
    }

    /// Notes a write (or removal) of `object` by the primary: the targets it is to be
    /// forwarded to, with every other tracked target noting it dirty (unless the pass under
    /// way pushes it there).
    pub fn route(&self, object: &str) -> Routed<'_> {
        let mut tracking = self.lock();
        let mut pending = Vec::new();
        if let Some(t) = tracking.as_mut() {
            for (&target, st) in &mut t.targets {
                if st.pushing.contains(object) {
                    continue;
                }
                let current = st.forwarding
                    && !st.spoiled
                    && !st.dirty.overflowed
                    && !st.dirty.objects.contains(object);
                if current {
                    pending.push((
                        Forward {
                            target,
                            attempt: t.attempt,
                        },
                        None,
                    ));
                } else {
                    st.note(object);
                }
            }
        }
        Routed {
            writes: self,
            object: object.to_string(),
            pending,
        }
    }

    /// Stops forwarding to `target` (a full pass is about to push whatever it lacks).
    pub fn hold_forwards(&self, attempt: u64, target: i32) {
        if let Some(st) = self.target_of(attempt, target).as_mut() {
            st.forwarding = false;
        }
    }

    /// From now on every write to an object outside `target`'s dirty set is forwarded to it
    /// (its full pass has made it current for all the others).
    pub fn forward_from_now(&self, attempt: u64, target: i32) {
        let mut tracking = self.lock();
        if let Some(st) = tracking
            .as_mut()
            .filter(|t| t.attempt == attempt)
            .and_then(|t| t.targets.get_mut(&target))
        {
            st.forwarding = true;
        }
    }

    fn target_of(&self, attempt: u64, target: i32) -> TargetGuard<'_> {
        TargetGuard {
            guard: self.lock(),
            attempt,
            target,
        }
    }

    /// What `target` has yet to copy in `attempt`, handed over: tracking goes on from
    /// nothing. None when that attempt is over or does not fill `target`.
    pub fn take(&self, attempt: u64, target: i32) -> Option<Written> {
        self.target_of(attempt, target)
            .as_mut()
            .map(|st| std::mem::take(&mut st.dirty))
    }

    /// Begins a pass that pushes `target`'s dirty objects one at a time, each with its writes
    /// held: they are handed over, and writes to them meanwhile are left to their pushes.
    /// None when the attempt is over, or too many were written to list (a full pass then).
    pub fn begin_held_pass(&self, attempt: u64, target: i32) -> Option<Vec<String>> {
        let mut guard = self.target_of(attempt, target);
        let st = guard.as_mut()?;
        if st.dirty.overflowed {
            return None;
        }
        let objects = std::mem::take(&mut st.dirty.objects);
        st.pushing.clone_from(&objects);
        Some(objects.into_iter().collect())
    }

    /// `object` was pushed to `target` with its writes held: the copy is current for it.
    pub fn pushed(&self, attempt: u64, target: i32, object: &str) {
        if let Some(st) = self.target_of(attempt, target).as_mut() {
            st.pushing.remove(object);
        }
    }

    /// How many objects `target` has yet to copy in `attempt` (usize::MAX when too many were
    /// written to count, or the attempt is over or does not fill it).
    pub fn pending(&self, attempt: u64, target: i32) -> usize {
        match self.target_of(attempt, target).as_mut() {
            Some(st) if !st.dirty.overflowed => st.dirty.objects.len(),
            _ => usize::MAX,
        }
    }

    /// Whether a forwarded write of `attempt` to `target` has an unknown outcome (the copy
    /// may apply it after a later push): the attempt must start over.
    pub fn spoiled(&self, attempt: u64, target: i32) -> bool {
        self.target_of(attempt, target)
            .as_mut()
            .is_none_or(|st| st.spoiled)
    }
}

/// The tracking, locked, narrowed to one target of one attempt.
struct TargetGuard<'a> {
    guard: std::sync::MutexGuard<'a, Option<Tracking>>,
    attempt: u64,
    target: i32,
}

impl TargetGuard<'_> {
    fn as_mut(&mut self) -> Option<&mut Target> {
        let (attempt, target) = (self.attempt, self.target);
        self.guard
            .as_mut()
            .filter(|t| t.attempt == attempt)
            .and_then(|t| t.targets.get_mut(&target))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(w: &Written) -> Vec<&str> {
        w.objects.iter().map(String::as_str).collect()
    }

    #[test]
    fn before_forwarding_every_target_notes_each_write_once() {
        let w = FillWrites::default();
        assert!(w.route("before").forwards().is_empty());
        let a = w.start(7, &[3, 4]);
        for o in ["a", "b", "a"] {
            assert!(w.route(o).forwards().is_empty(), "nothing is current yet");
        }
        assert_eq!(w.pending(a, 3), 2);
        assert_eq!(names(&w.take(a, 3).unwrap()), ["a", "b"]);
        assert_eq!(w.pending(a, 3), 0, "tracking goes on from nothing");
        assert_eq!(w.pending(a, 4), 2, "another target keeps its own");
        assert_eq!(w.take(a + 1, 3), None, "another attempt");
        assert_eq!(w.pending(a, 9), usize::MAX, "an untracked target");
    }

    #[test]
    fn a_current_copy_gets_writes_forwarded_and_a_failed_forward_makes_its_object_dirty() {
        let w = FillWrites::default();
        let a = w.start(7, &[3]);
        drop(w.route("early"));
        assert_eq!(names(&w.take(a, 3).unwrap()), ["early"]);
        w.forward_from_now(a, 3);
        let mut r = w.route("x");
        assert_eq!(
            r.forwards(),
            [Forward {
                target: 3,
                attempt: a
            }]
        );
        r.settle(3, Forwarded::Applied);
        drop(r);
        assert_eq!(
            w.pending(a, 3),
            0,
            "an applied forward leaves nothing to copy"
        );
        let mut r = w.route("y");
        r.settle(3, Forwarded::Refused);
        drop(r);
        assert_eq!(w.pending(a, 3), 1);
        assert!(!w.spoiled(a, 3));
        assert!(
            w.route("y").forwards().is_empty(),
            "a dirty object is not forwarded"
        );
        drop(w.route("z"));
        assert_eq!(
            w.pending(a, 3),
            2,
            "a forward never settled counts as refused"
        );
        let mut r = w.route("u");
        r.settle(3, Forwarded::Unknown);
        drop(r);
        assert!(w.spoiled(a, 3), "an unknown outcome spoils the attempt");
        assert!(w.route("v").forwards().is_empty(), "nor forwards any more");
    }

    #[test]
    fn a_held_pass_leaves_writes_to_its_objects_to_their_pushes() {
        let w = FillWrites::default();
        let a = w.start(1, &[2]);
        for o in ["p", "q"] {
            drop(w.route(o));
        }
        w.forward_from_now(a, 2);
        assert_eq!(w.begin_held_pass(a, 2).unwrap(), ["p", "q"]);
        let r = w.route("p");
        assert!(r.forwards().is_empty(), "its push carries it");
        drop(r);
        assert_eq!(w.pending(a, 2), 0, "nor is it noted");
        w.pushed(a, 2, "p");
        let mut r = w.route("p");
        assert_eq!(r.forwards().len(), 1, "pushed: current again");
        r.settle(2, Forwarded::Applied);
    }

    #[test]
    fn what_an_attempt_left_dirty_or_failed_late_goes_to_the_next() {
        let w = FillWrites::default();
        let a = w.start(5, &[1]);
        w.forward_from_now(a, 1);
        let mut late = w.route("late");
        drop(w.route("dirty"));
        w.pause(5);
        assert!(w.route("paused").forwards().is_empty());
        let b = w.start(5, &[1]);
        assert!(b > a);
        late.settle(1, Forwarded::Unknown);
        drop(late);
        assert!(!w.spoiled(b, 1), "an earlier attempt's unknown forward");
        assert_eq!(
            names(&w.take(b, 1).unwrap()),
            ["dirty", "late", "paused"],
            "kept across attempts, the late failure included"
        );
        let c = w.start(6, &[1]);
        assert_eq!(w.pending(c, 1), 0, "another interval starts clean");
        w.stop(6);
        assert!(w.route("after").forwards().is_empty());
        assert_eq!(w.take(c, 1), None, "stopped");
    }

    #[test]
    fn too_many_names_overflow_into_a_full_pass() {
        let w = FillWrites::default();
        let a = w.start(1, &[2]);
        for i in 0..=MAX_TRACKED {
            drop(w.route(&format!("o{i}")));
        }
        assert_eq!(w.pending(a, 2), usize::MAX);
        assert_eq!(w.begin_held_pass(a, 2), None, "too many to push one by one");
        let taken = w.take(a, 2).unwrap();
        assert!(taken.overflowed);
        assert!(taken.objects.is_empty(), "the names are dropped, not kept");
        assert_eq!(w.pending(a, 2), 0);
    }
}
