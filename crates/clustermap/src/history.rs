//! The map's past: a full map at the oldest epoch kept and every incremental after it. Any
//! epoch in between can be rebuilt from it. Subscribers catch up from the incrementals; OSDs
//! rebuild the maps of epochs they did not see to compute their PGs' past intervals (which OSDs
//! may hold acknowledged writes), so it is kept durably and far back.

use std::collections::{BTreeMap, VecDeque};

use crate::cluster_map::ClusterMap;
use crate::error::MapError;
use crate::incremental::Incremental;

/// Epochs between the full maps kept in memory (not stored) to rebuild a past epoch from: a
/// request replays at most this many incrementals instead of the whole history.
pub const CHECKPOINT_EVERY: u64 = 256;

/// A base map and the incrementals that lead from it to the current epoch.
#[derive(Clone, Debug)]
pub struct MapHistory {
    base: ClusterMap,
    incrementals: VecDeque<Incremental>,
    /// Full maps of every epoch after the base that is a multiple of [`CHECKPOINT_EVERY`].
    checkpoints: BTreeMap<u64, ClusterMap>,
}

impl MapHistory {
    /// A history that begins at `map`.
    pub fn new(map: &ClusterMap) -> MapHistory {
        MapHistory {
            base: map.clone(),
            incrementals: VecDeque::new(),
            checkpoints: BTreeMap::new(),
        }
    }

    /// A history from its parts (as stored), checked by replaying it: the incrementals must
    /// follow the base epoch by epoch and apply.
    pub fn from_parts(base: ClusterMap, incrementals: Vec<Incremental>) -> Result<Self, MapError> {
        let mut history = MapHistory::new(&base);
        let mut map = base;
        for inc in incrementals {
            map.apply(&inc)?;
            history.push(inc, &map)?;
        }
        Ok(history)
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

    /// Records the incremental that made the newest epoch, and `map`, the map it made.
    pub fn push(&mut self, inc: Incremental, map: &ClusterMap) -> Result<(), MapError> {
        if inc.epoch != self.newest_epoch() + 1 || map.epoch != inc.epoch {
            return Err(MapError::EpochGap {
                have: self.newest_epoch(),
                got: inc.epoch,
            });
        }
        self.incrementals.push_back(inc);
        if map.epoch.is_multiple_of(CHECKPOINT_EVERY) {
            self.checkpoints.insert(map.epoch, map.clone());
        }
        Ok(())
    }

    /// Drops the oldest incrementals (folding them into the base) until at most `keep` remain.
    pub fn trim(&mut self, keep: usize) -> Result<(), MapError> {
        while self.incrementals.len() > keep {
            let Some(inc) = self.incrementals.pop_front() else {
                break;
            };
            self.base.apply(&inc)?;
        }
        let base = self.base.epoch;
        self.checkpoints.retain(|&e, _| e > base);
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
        let skip = self.position(epoch + 1);
        Some(self.incrementals.iter().skip(skip).cloned().collect())
    }

    /// Where the incremental that made `epoch` is kept (the base's epoch + 1 is at 0; the
    /// epoch after the newest, one past the end).
    fn position(&self, epoch: u64) -> usize {
        assert!(
            epoch > self.base.epoch && epoch <= self.newest_epoch() + 1,
            "epoch {epoch} outside the history's {}..={}",
            self.base.epoch + 1,
            self.newest_epoch() + 1
        );
        usize::try_from(epoch - self.base.epoch - 1).expect("within the incrementals kept")
    }

    /// The full map at `from` (or at the oldest epoch kept, if `from` is older) and every
    /// incremental after it, replayed from the nearest full map at or before `from`.
    pub fn range_from(&self, from: u64) -> Result<(ClusterMap, Vec<Incremental>), MapError> {
        let target = from.clamp(self.base.epoch, self.newest_epoch());
        let mut map = self
            .checkpoints
            .range(..=target)
            .next_back()
            .map_or(&self.base, |(_, m)| m)
            .clone();
        for inc in self
            .incrementals
            .range(self.position(map.epoch + 1)..self.position(target + 1))
        {
            map.apply(inc)?;
        }
        let rest = self
            .incrementals
            .range(self.position(target + 1)..)
            .cloned()
            .collect();
        Ok((map, rest))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster_map::OsdEntry;
    use crate::incremental::Change;

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
            h.push(inc, &map).unwrap();
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
    fn a_map_rebuilt_from_a_checkpoint_is_the_map_of_that_epoch() {
        let (mut h, _) = grown(2 * CHECKPOINT_EVERY + 40);
        let mut replayed = h.base().clone();
        let incs: Vec<Incremental> = h.incrementals().cloned().collect();
        for inc in &incs {
            replayed.apply(inc).unwrap();
            let (rebuilt, after) = h.range_from(replayed.epoch).unwrap();
            assert_eq!(
                rebuilt.encode(),
                replayed.encode(),
                "epoch {}",
                replayed.epoch
            );
            assert_eq!(after.len() as u64, h.newest_epoch() - replayed.epoch);
        }
        // Trimming past a checkpoint drops it; what remains still rebuilds.
        h.trim(100).unwrap();
        let (rebuilt, _) = h.range_from(h.newest_epoch() - 5).unwrap();
        assert_eq!(rebuilt.epoch, h.newest_epoch() - 5);
        let from_parts =
            MapHistory::from_parts(h.base().clone(), h.incrementals().cloned().collect()).unwrap();
        assert_eq!(
            from_parts.range_from(0).unwrap().0.encode(),
            h.base().encode()
        );
    }

    #[test]
    fn parts_that_skip_an_epoch_are_refused() {
        let (h, _) = grown(3);
        let mut incs: Vec<Incremental> = h.incrementals().cloned().collect();
        incs.remove(1);
        assert!(MapHistory::from_parts(h.base().clone(), incs).is_err());
    }
}
