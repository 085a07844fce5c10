//! Past maps and the past intervals a primary computes from them.
//!
//! Every map this OSD's watcher sees is kept (the watcher may skip epochs that arrive together;
//! an OSD that was down saw none of those meanwhile): a PG's past intervals are computed from
//! the map of every epoch, and the epochs missing here are rebuilt from the monitor's history.
//! Kept: the newest [`KEEP_MAPS`] epochs, plus whatever an older fetch brought in until newer
//! maps push it out.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use cairn_client::mon::MonClient;
use cairn_clustermap::ClusterMap;
use cairn_clustermap::PgId;
use cairn_pg::{intervals, EpochPlacement, PastInterval};

use crate::error::OsdError;

/// Newest epochs kept in memory (a small cluster's map is a few KiB).
pub const KEEP_MAPS: usize = 1024;
/// How long the monitor may take to answer a history request.
const HISTORY_TIMEOUT_MS: u64 = 30_000;

/// The maps of past epochs.
#[derive(Default)]
pub struct PastMaps {
    maps: Mutex<BTreeMap<u64, Arc<ClusterMap>>>,
    /// One fetch from the monitor at a time: PGs peering together wait for the same one.
    fetching: tokio::sync::Mutex<()>,
}

/// A PG's past intervals between two epochs, and whether the maps covered all of them.
pub struct PastIntervals {
    /// The intervals, oldest first.
    pub intervals: Vec<PastInterval>,
    /// False when the monitor's history no longer reaches back to the first epoch asked for:
    /// intervals before `intervals[0]` (or the current one) are not known.
    pub complete: bool,
}

impl PastMaps {
    /// Keeps `map` (a new epoch seen by the watcher), dropping the oldest beyond [`KEEP_MAPS`].
    pub fn note(&self, map: &ClusterMap) {
        let mut maps = self.maps.lock().unwrap_or_else(|p| p.into_inner());
        if maps.contains_key(&map.epoch) {
            return;
        }
        maps.insert(map.epoch, Arc::new(map.clone()));
        while maps.len() > KEEP_MAPS {
            maps.pop_first();
        }
    }

    /// The map of `epoch`, if kept here.
    pub fn get(&self, epoch: u64) -> Option<Arc<ClusterMap>> {
        let maps = self.maps.lock().unwrap_or_else(|p| p.into_inner());
        maps.get(&epoch).cloned()
    }

    /// The maps of epochs `from..=to` known here, oldest first.
    fn known(&self, from: u64, to: u64) -> Vec<Arc<ClusterMap>> {
        let maps = self.maps.lock().unwrap_or_else(|p| p.into_inner());
        maps.range(from..=to).map(|(_, m)| m.clone()).collect()
    }

    /// The maps of every epoch `from..=to`, fetching from the monitor those not kept here. The
    /// result starts later than `from` when the monitor's history no longer reaches back.
    pub async fn range(
        &self,
        mon: &MonClient,
        from: u64,
        to: u64,
    ) -> Result<Vec<Arc<ClusterMap>>, OsdError> {
        if from > to {
            return Ok(Vec::new());
        }
        let want = crate::convert::usize_of(to - from + 1);
        let have = self.known(from, to);
        if have.len() == want {
            return Ok(have);
        }
        let _one = self.fetching.lock().await;
        let have = self.known(from, to);
        if have.len() == want {
            return Ok(have);
        }
        let fetched = mon.maps_since(from, HISTORY_TIMEOUT_MS).await?;
        {
            let mut maps = self.maps.lock().unwrap_or_else(|p| p.into_inner());
            for m in fetched {
                maps.entry(m.epoch).or_insert_with(|| Arc::new(m));
            }
        }
        Ok(self.known(from, to))
    }

    /// The past intervals of `pg` over epochs `from..=to`.
    pub async fn intervals(
        &self,
        mon: &MonClient,
        pg: PgId,
        from: u64,
        to: u64,
    ) -> Result<PastIntervals, OsdError> {
        let from = from.max(1);
        let maps = self.range(mon, from, to).await?;
        let complete = from > to || maps.first().is_some_and(|m| m.epoch == from);
        let epochs = maps.iter().map(|m| {
            let placement = m.placement.pools.get(&pg.pool).and_then(|pool| {
                let acting = m.placement.mapper().map_pg(pg).ok()?.acting;
                let primary_up_thru = acting
                    .first()
                    .and_then(|p| m.osds.get(p))
                    .and_then(|e| e.up_thru);
                Some(EpochPlacement {
                    acting,
                    min_size: pool.min_size as usize,
                    primary_up_thru,
                })
            });
            (m.epoch, placement)
        });
        Ok(PastIntervals {
            intervals: intervals(epochs),
            complete,
        })
    }
}
