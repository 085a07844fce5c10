//! Past intervals and the prior set: which OSDs a primary must hear from before its PG may go
//! active.
//!
//! An interval is a run of map epochs in which a PG's acting set stayed the same. An interval
//! with at least `min_size` copies may have served writes ("maybe went rw"); if it did, its
//! copies hold acknowledged writes that no other OSD may have. The OSD whose last epoch started
//! is the newest among those that answered peering holds every write up to its interval; each
//! later interval that may have gone rw needs at least one of its copies heard from too. When
//! every copy of such an interval is down, the PG is *down*: going active would serve stale data
//! and lose acknowledged writes, so it waits for one of them (or for the operator to remove
//! them, accepting the loss). This is Ceph's `PastIntervals` / `PriorSet`, with its up_thru
//! refinement: a primary has the monitor record its up_thru (the interval's start) before its
//! PG goes active, so an interval whose primary's up_thru in the interval's last map is older
//! than the interval never went active and took no writes, however many copies it had.

use std::collections::{BTreeMap, BTreeSet};

/// One interval of a PG's history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PastInterval {
    /// First epoch of the interval.
    pub first: u64,
    /// Last epoch of the interval.
    pub last: u64,
    /// Acting set, primary first (empty: no copy was up).
    pub acting: Vec<i32>,
    /// The pool's min_size then.
    pub min_size: usize,
    /// The primary's up_thru in the interval's last map (`None`: not recorded by that map).
    pub primary_up_thru: Option<u64>,
}

impl PastInterval {
    /// Whether the PG may have served writes in this interval: enough copies were up, and the
    /// primary's up_thru reached the interval's start (else it never went active), or the map
    /// did not record up_thru.
    pub fn maybe_went_rw(&self) -> bool {
        !self.acting.is_empty()
            && self.acting.len() >= self.min_size.max(1)
            && self.primary_up_thru.is_none_or(|u| u >= self.first)
    }
}

/// A PG's placement in one epoch's map.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EpochPlacement {
    /// Acting set, primary first.
    pub acting: Vec<i32>,
    /// The pool's min_size.
    pub min_size: usize,
    /// The primary's up_thru in that map (`None` when the map does not record it, or no
    /// copy is up).
    pub primary_up_thru: Option<u64>,
}

/// Folds a PG's placement at each epoch (ascending; `None` where the PG did not exist) into
/// intervals: a new one starts wherever the acting set changes.
pub fn intervals(
    epochs: impl IntoIterator<Item = (u64, Option<EpochPlacement>)>,
) -> Vec<PastInterval> {
    let mut out: Vec<PastInterval> = Vec::new();
    let mut open = false;
    for (epoch, placement) in epochs {
        let Some(EpochPlacement {
            acting,
            min_size,
            primary_up_thru,
        }) = placement
        else {
            open = false;
            continue;
        };
        match out.last_mut() {
            Some(iv) if open && iv.acting == acting && iv.last + 1 == epoch => {
                iv.last = epoch;
                // The lowest min_size of the run: the interval counts as written if it ever could be.
                iv.min_size = iv.min_size.min(min_size);
                // The last map's up_thru decides (it only grows within an interval).
                iv.primary_up_thru = primary_up_thru;
            }
            _ => out.push(PastInterval {
                first: epoch,
                last: epoch,
                acting,
                min_size,
                primary_up_thru,
            }),
        }
        open = true;
    }
    out
}

/// What peering must do next, from the intervals after the newest last epoch started heard of.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Prior {
    /// Every interval that may have gone rw has a copy among `heard`, or one up to ask: ask
    /// these (empty: peering may go on).
    Ask(BTreeSet<i32>),
    /// An interval that may have gone rw has no copy up (and not every one of them is lost):
    /// the PG must not go active.
    Down {
        /// The interval.
        interval: PastInterval,
    },
}

/// The prior set of a peering: `intervals` are the PG's past intervals, `since` the newest last
/// epoch started among the OSDs heard from (`heard`), `up` the OSDs up now, `lost` the OSDs
/// whose data was given up, with the epoch of that decision (`u64::MAX` for one removed from
/// the map: gone for every interval). Intervals that begin after `since` and may have gone rw
/// need a copy heard from; the up ones not yet heard are to be asked. An interval whose copies
/// were all given up after it began is given up too.
pub fn prior_set(
    intervals: &[PastInterval],
    since: u64,
    heard: &BTreeSet<i32>,
    up: &BTreeSet<i32>,
    lost: &BTreeMap<i32, u64>,
) -> Prior {
    let mut ask = BTreeSet::new();
    for iv in intervals
        .iter()
        .filter(|iv| iv.first > since && iv.maybe_went_rw())
    {
        if iv.acting.iter().any(|o| heard.contains(o)) {
            continue;
        }
        let reachable: Vec<i32> = iv
            .acting
            .iter()
            .copied()
            .filter(|o| up.contains(o))
            .collect();
        if reachable.is_empty() {
            if iv
                .acting
                .iter()
                .all(|o| lost.get(o).is_some_and(|&at| at > iv.first))
            {
                continue;
            }
            return Prior::Down {
                interval: iv.clone(),
            };
        }
        ask.extend(reachable);
    }
    Prior::Ask(ask)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(v: &[i32]) -> BTreeSet<i32> {
        v.iter().copied().collect()
    }

    /// OSDs given up at `epoch`.
    fn lost_at(v: &[i32], epoch: u64) -> BTreeMap<i32, u64> {
        v.iter().map(|&o| (o, epoch)).collect()
    }

    fn none_lost() -> BTreeMap<i32, u64> {
        BTreeMap::new()
    }

    /// A placement in a map that does not record up_thru.
    fn at(acting: Vec<i32>, min_size: usize) -> Option<EpochPlacement> {
        Some(EpochPlacement {
            acting,
            min_size,
            primary_up_thru: None,
        })
    }

    fn history() -> Vec<PastInterval> {
        // [0,1,2] from 5; osd.2 down at 10: [0,1]; both down at 12; osd.2 back alone at 13.
        let acting = |e: u64| match e {
            5..=9 => vec![0, 1, 2],
            10..=11 => vec![0, 1],
            _ => vec![],
        };
        let ivs = intervals((5..=12).map(|e| (e, at(acting(e), 2))));
        assert_eq!(ivs.len(), 3);
        ivs
    }

    #[test]
    fn equal_acting_sets_in_a_row_make_one_interval_and_gaps_split_them() {
        let ivs = intervals([
            (1, at(vec![1, 2], 1)),
            (2, at(vec![1, 2], 1)),
            (3, None),
            (4, at(vec![1, 2], 1)),
            (5, at(vec![2], 1)),
        ]);
        let spans: Vec<(u64, u64)> = ivs.iter().map(|i| (i.first, i.last)).collect();
        assert_eq!(spans, vec![(1, 2), (4, 4), (5, 5)]);
    }

    #[test]
    fn a_written_interval_with_no_copy_up_makes_the_pg_down() {
        let ivs = history();
        let p = prior_set(&ivs, 5, &set(&[2]), &set(&[2, 3]), &none_lost());
        assert_eq!(
            p,
            Prior::Down {
                interval: ivs[1].clone()
            }
        );
    }

    #[test]
    fn a_copy_of_the_interval_up_is_asked_and_once_heard_peering_goes_on() {
        let ivs = history();
        let p = prior_set(&ivs, 5, &set(&[2]), &set(&[1, 2]), &none_lost());
        assert_eq!(p, Prior::Ask(set(&[1])));
        let p = prior_set(&ivs, 5, &set(&[1, 2]), &set(&[1, 2]), &none_lost());
        assert_eq!(p, Prior::Ask(set(&[])));
    }

    #[test]
    fn intervals_before_the_newest_activation_heard_of_do_not_matter() {
        let ivs = history();
        let p = prior_set(&ivs, 10, &set(&[2]), &set(&[2]), &none_lost());
        assert_eq!(p, Prior::Ask(set(&[])));
    }

    #[test]
    fn intervals_below_min_size_never_went_rw() {
        let ivs = intervals([(7, at(vec![4], 2)), (8, at(vec![], 2))]);
        assert!(ivs.iter().all(|i| !i.maybe_went_rw()));
        assert_eq!(
            prior_set(&ivs, 0, &set(&[]), &set(&[]), &none_lost()),
            Prior::Ask(set(&[]))
        );
    }

    #[test]
    fn an_interval_whose_copies_are_all_lost_is_given_up() {
        let ivs = history();
        let p = prior_set(&ivs, 5, &set(&[2]), &set(&[2]), &lost_at(&[0, 1], u64::MAX));
        assert_eq!(p, Prior::Ask(set(&[])));
        let p = prior_set(&ivs, 5, &set(&[2]), &set(&[2]), &lost_at(&[0], u64::MAX));
        assert!(matches!(p, Prior::Down { .. }));
        // Declared lost at 13, after the [0,1] interval of 10-11 began: given up.
        let p = prior_set(&ivs, 5, &set(&[2]), &set(&[2]), &lost_at(&[0, 1], 13));
        assert_eq!(p, Prior::Ask(set(&[])));
        // Declared lost at 8, before it began: they booted again and wrote in it afterwards.
        let p = prior_set(&ivs, 5, &set(&[2]), &set(&[2]), &lost_at(&[0, 1], 8));
        assert!(matches!(p, Prior::Down { .. }));
    }

    /// [0,1] from epoch 10 (osd.2 down), then no copy up at 12. osd.0, the primary, asked
    /// for its up_thru at 10 only in the second history: in the first the interval never went
    /// active, and osd.2 may go on without hearing from osd.0 or osd.1.
    #[test]
    fn an_interval_whose_primary_never_got_its_up_thru_took_no_writes() {
        let history = |up_thru_at_11: u64| {
            let placement = |e: u64| match e {
                5..=9 => (vec![0, 1, 2], Some(5)),
                10 => (vec![0, 1], Some(5)),
                11 => (vec![0, 1], Some(up_thru_at_11)),
                _ => (vec![], None),
            };
            intervals((5..=12).map(|e| {
                let (acting, primary_up_thru) = placement(e);
                (
                    e,
                    Some(EpochPlacement {
                        acting,
                        min_size: 2,
                        primary_up_thru,
                    }),
                )
            }))
        };
        let never_active = history(5);
        assert!(!never_active[1].maybe_went_rw());
        assert_eq!(
            prior_set(&never_active, 5, &set(&[2]), &set(&[2]), &none_lost()),
            Prior::Ask(set(&[]))
        );
        let went_active = history(10);
        assert!(went_active[1].maybe_went_rw());
        assert_eq!(went_active[1].primary_up_thru, Some(10), "the last map's");
        assert_eq!(
            prior_set(&went_active, 5, &set(&[2]), &set(&[2]), &none_lost()),
            Prior::Down {
                interval: went_active[1].clone()
            }
        );
    }
}
