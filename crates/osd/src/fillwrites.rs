//! The objects a PG's primary writes while a background fill copies the PG to OSDs outside
//! its temporary acting set: each pass of the fill pushes what was written since the
//! previous pass began, so passes shrink to the objects clients touch meanwhile (a pass that
//! re-listed everything would never end on a PG written faster than its log is long), and
//! the last pass, with the PG's writes held back, leaves every filled copy equal to the
//! primary's.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

/// Most object names kept for one fill target; past it the target's next pass lists every
/// object again (a full pass), as the first one does.
pub const MAX_TRACKED: usize = 1 << 20;

/// What has been written to one fill target's PG since its last pass began.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Written {
    /// The objects written (or removed), by name.
    pub objects: BTreeSet<String>,
    /// More than [`MAX_TRACKED`] names were written: `objects` is incomplete.
    pub overflowed: bool,
}

/// The fill of one interval tracking writes, and what each of its targets has yet to see.
#[derive(Debug, Default)]
struct Tracking {
    epoch: u64,
    targets: BTreeMap<i32, Written>,
}

/// The writes a PG's fill has yet to copy, by target (a short lock, never held across an
/// await).
#[derive(Debug, Default)]
pub struct FillWrites {
    tracking: Mutex<Option<Tracking>>,
}

impl FillWrites {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Tracking>> {
        self.tracking.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts tracking writes for the fill of the interval begun at `epoch` to `targets`
    /// (replacing any earlier fill's tracking).
    pub fn start(&self, epoch: u64, targets: &[i32]) {
        *self.lock() = Some(Tracking {
            epoch,
            targets: targets.iter().map(|&t| (t, Written::default())).collect(),
        });
    }

    /// Stops the tracking of the fill of `epoch` (a later fill's stays).
    pub fn stop(&self, epoch: u64) {
        let mut tracking = self.lock();
        if tracking.as_ref().is_some_and(|t| t.epoch == epoch) {
            *tracking = None;
        }
    }

    /// Notes a write (or removal) of `object` by the primary: every tracked target has it
    /// to copy.
    pub fn note(&self, object: &str) {
        let mut tracking = self.lock();
        let Some(t) = tracking.as_mut() else { return };
        for written in t.targets.values_mut() {
            if written.overflowed || written.objects.contains(object) {
                continue;
            }
            if written.objects.len() >= MAX_TRACKED {
                written.objects.clear();
                written.overflowed = true;
            } else {
                written.objects.insert(object.to_string());
            }
        }
    }

    /// What `target` has yet to copy of the fill of `epoch`, handed over: tracking goes on
    /// from nothing. None when that fill does not track `target`.
    pub fn take(&self, epoch: u64, target: i32) -> Option<Written> {
        let mut tracking = self.lock();
        let t = tracking.as_mut().filter(|t| t.epoch == epoch)?;
        t.targets.get_mut(&target).map(std::mem::take)
    }

    /// How many objects `target` has yet to copy of the fill of `epoch` (usize::MAX when
    /// too many were written to count, or the fill does not track it).
    pub fn pending(&self, epoch: u64, target: i32) -> usize {
        let tracking = self.lock();
        match tracking
            .as_ref()
            .filter(|t| t.epoch == epoch)
            .and_then(|t| t.targets.get(&target))
        {
            Some(w) if !w.overflowed => w.objects.len(),
            _ => usize::MAX,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_target_sees_the_writes_since_it_last_took_them() {
        let w = FillWrites::default();
        w.note("before");
        assert_eq!(w.take(7, 3), None, "nothing tracked yet");
        w.start(7, &[3, 4]);
        w.note("a");
        w.note("b");
        w.note("a");
        assert_eq!(w.pending(7, 3), 2);
        let taken = w.take(7, 3).unwrap();
        assert_eq!(
            taken.objects.into_iter().collect::<Vec<_>>(),
            ["a", "b"],
            "each name once"
        );
        assert!(!taken.overflowed);
        assert_eq!(w.pending(7, 3), 0, "tracking goes on from nothing");
        assert_eq!(w.pending(7, 4), 2, "another target keeps its own");
        w.note("c");
        assert_eq!(w.take(7, 3).unwrap().objects.len(), 1);
        assert_eq!(w.take(8, 3), None, "another interval's fill");
        assert_eq!(w.pending(7, 9), usize::MAX, "an untracked target");
    }

    #[test]
    fn a_later_fill_keeps_its_tracking_when_an_earlier_one_stops() {
        let w = FillWrites::default();
        w.start(7, &[3]);
        w.start(9, &[3]);
        w.stop(7);
        w.note("x");
        assert_eq!(w.pending(9, 3), 1);
        w.stop(9);
        w.note("y");
        assert_eq!(w.take(9, 3), None);
    }

    #[test]
    fn too_many_names_overflow_into_a_full_pass() {
        let w = FillWrites::default();
        w.start(1, &[2]);
        for i in 0..=MAX_TRACKED {
            w.note(&format!("o{i}"));
        }
        assert_eq!(w.pending(1, 2), usize::MAX);
        let taken = w.take(1, 2).unwrap();
        assert!(taken.overflowed);
        assert!(taken.objects.is_empty(), "the names are dropped, not kept");
        assert_eq!(w.pending(1, 2), 0);
    }
}
