//! The map's past: a full map at the oldest epoch kept and every incremental after it. Any
//! epoch in between can be rebuilt from it. Subscribers catch up from the incrementals; OSDs
//! rebuild the maps of epochs they did not see to compute their PGs' past intervals (which OSDs
//! may hold acknowledged writes), so it is kept durably and far back.

use std::collections::VecDeque;

use crate::error::MonError;
use crate::incremental::Incremental;
use crate::map::ClusterMap;

/// A base map and the incrementals that lead from it to the current epoch.
#[derive(Clone, Debug)]
pub struct MapHistory {
    base: ClusterMap,
    incrementals: VecDeque<Incremental>,
}

impl MapHistory {
    /// A history that begins at `map`.
    pub fn new(map: &ClusterMap) -> MapHistory {
        MapHistory {
            base: map.clone(),
            incrementals: VecDeque::new(),
        }
    }

    /// A history from its parts (as stored), checked: the incrementals must follow the base
    /// epoch by epoch.
    pub fn from_parts(base: ClusterMap, incrementals: Vec<Incremental>) -> Result<Self, MonError> {
        for (i, inc) in incrementals.iter().enumerate() {
            let want = base.epoch + 1 + i as u64;
            if inc.epoch != want {
                return Err(MonError::EpochGap {
                    have: want - 1,
                    got: inc.epoch,
                });
            }
        }
        Ok(MapHistory {
            base,
            incrementals: incrementals.into(),
        })
    }

    /// The oldest epoch that can be rebuilt.
    pub fn oldest_epoch(&self) -> u64 {
        self.base.epoch
    }

    /// The newest epoch (the current map's).
    pub fn newest_epoch(&self) -> u64 {
        self.base.epoch + self.incrementals.len() as u64
    }

    /// The full map at the oldest epoch kept.
    pub fn base(&self) -> &ClusterMap {
        &self.base
    }

    /// Every incremental kept, oldest first.
    pub fn incrementals(&self) -> impl Iterator<Item = &Incremental> {
        self.incrementals.iter()
    }

    /// Records the incremental that made the newest epoch.
    pub fn push(&mut self, inc: Incremental) -> Result<(), MonError> {
        if inc.epoch != self.newest_epoch() + 1 {
            return Err(MonError::EpochGap {
                have: self.newest_epoch(),
                got: inc.epoch,
            });
        }
        self.incrementals.push_back(inc);
        Ok(())
    }

    /// Drops the oldest incrementals (folding them into the base) until at most `keep` remain.
    pub fn trim(&mut self, keep: usize) -> Result<(), MonError> {
        while self.incrementals.len() > keep {
            let Some(inc) = self.incrementals.pop_front() else {
                break;
            };
            self.base.apply(&inc)?;
        }
        Ok(())
    }

    /// The incrementals after `epoch`, or None when the history does not reach back that far
    /// or more than `max` would be needed (a full map is then the cheaper catch-up).
    pub fn since(&self, epoch: u64, max: usize) -> Option<Vec<Incremental>> {
        if epoch >= self.newest_epoch() {
            return Some(Vec::new());
        }
        if epoch < self.base.epoch || self.newest_epoch() - epoch > max as u64 {
            return None;
        }
        let skip = (epoch - self.base.epoch) as usize;
        Some(self.incrementals.iter().skip(skip).cloned().collect())
    }

    /// The full map at `from` (or at the oldest epoch kept, if `from` is older) and every
    /// incremental after it.
    pub fn range_from(&self, from: u64) -> Result<(ClusterMap, Vec<Incremental>), MonError> {
        let mut map = self.base.clone();
        let mut rest = self.incrementals.iter();
        while map.epoch < from.min(self.newest_epoch()) {
            let Some(inc) = rest.next() else { break };
            map.apply(inc)?;
        }
        Ok((map, rest.cloned().collect()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::incremental::Change;
    use crate::map::OsdEntry;

    fn grown(n: u64) -> (MapHistory, ClusterMap) {
        let mut map = ClusterMap::new("h").unwrap();
        let mut h = MapHistory::new(&map);
        for i in 0..n {
            let change = if i == 0 {
                Change::AddOsd {
                    entry: OsdEntry::booted(0, "u".into(), "h0".into(), "127.0.0.1:1".into()),
                    crush_weight: 0x10000,
                }
            } else {
                Change::Full {
                    id: 0,
                    full: i % 2 == 1,
                }
            };
            let inc = Incremental {
                epoch: map.epoch + 1,
                changes: vec![change],
            };
            map.apply(&inc).unwrap();
            h.push(inc).unwrap();
        }
        (h, map)
    }

    #[test]
    fn every_kept_epoch_can_be_rebuilt_and_trimming_keeps_the_newest() {
        let (mut h, map) = grown(10);
        assert_eq!((h.oldest_epoch(), h.newest_epoch()), (1, 11));
        let (at5, after) = h.range_from(5).unwrap();
        assert_eq!(at5.epoch, 5);
        assert_eq!(after.len(), 6);
        h.trim(4).unwrap();
        assert_eq!((h.oldest_epoch(), h.newest_epoch()), (7, 11));
        let (oldest, after) = h.range_from(2).unwrap();
        assert_eq!(oldest.epoch, 7);
        let mut replayed = oldest;
        for inc in &after {
            replayed.apply(inc).unwrap();
        }
        assert_eq!(replayed.encode(), map.encode());
    }

    #[test]
    fn catch_up_is_refused_past_the_history_or_the_limit() {
        let (mut h, _) = grown(10);
        assert_eq!(h.since(8, 100).unwrap().len(), 3);
        assert!(h.since(8, 2).is_none());
        assert!(h.since(11, 0).unwrap().is_empty());
        h.trim(4).unwrap();
        assert!(h.since(6, 100).is_none());
        assert_eq!(h.since(7, 100).unwrap().len(), 4);
    }

    #[test]
    fn parts_that_skip_an_epoch_are_refused() {
        let (h, _) = grown(3);
        let mut incs: Vec<Incremental> = h.incrementals().cloned().collect();
        incs.remove(1);
        assert!(MapHistory::from_parts(h.base().clone(), incs).is_err());
    }
}
