//! One epoch's changes. The monitor produces them; the monitor and every subscriber apply them
//! with the same code, so all copies of the map stay identical.

// A narrowing cast in a byte format would silently write a wrong length: conversions here
// are checked (`try_from`).
#![deny(clippy::cast_possible_truncation)]

use crate::{Exceptions, PgId, Pool};
use serde::{Deserialize, Serialize};

use crate::cluster_map::{envelope, open_envelope, ClusterMap, OsdEntry};
use crate::error::MapError;
use crate::flags::MapFlag;
use crate::quota::PoolQuota;

/// One change to the map.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Change {
    /// A new OSD, or a known one with new identity data; placed in CRUSH under its host.
    AddOsd {
        /// The entry.
        entry: OsdEntry,
        /// CRUSH weight (16.16).
        crush_weight: u32,
    },
    /// The OSD is running at `addr`.
    Up {
        /// OSD id.
        id: i32,
        /// Its address.
        addr: String,
    },
    /// The OSD stopped answering.
    Down {
        /// OSD id.
        id: i32,
        /// When it was judged down.
        at_ms: u64,
    },
    /// Set the in/out reweight (0 = out); `auto` marks a monitor decision.
    Reweight {
        /// OSD id.
        id: i32,
        /// New reweight (16.16).
        reweight: u32,
        /// Set by the monitor's down -> out timer.
        auto: bool,
    },
    /// The OSD's store went past its full ratio (`full`) or back under it.
    Full {
        /// OSD id.
        id: i32,
        /// Past its full ratio.
        full: bool,
    },
    /// The OSD's store went past its nearfull ratio (`nearfull`) or back under it.
    NearFull {
        /// OSD id.
        id: i32,
        /// Past its nearfull ratio.
        nearfull: bool,
    },
    /// The OSD was alive to serve as a primary in the interval begun at `epoch` (its up_thru).
    UpThru {
        /// OSD id.
        id: i32,
        /// Its new up_thru.
        epoch: u64,
    },
    /// The operator declared the OSD's data lost at `epoch` (the OSD stays in the map).
    Lost {
        /// OSD id.
        id: i32,
        /// The epoch of the declaration.
        epoch: u64,
    },
    /// The OSD leaves the cluster: out of the map, out of CRUSH, out of every exception.
    RemoveOsd {
        /// OSD id.
        id: i32,
    },
    /// Create a pool.
    CreatePool(Pool),
    /// Remove a pool.
    RemovePool(i64),
    /// Set a device's CRUSH weight (16.16) in its bucket.
    CrushWeight {
        /// OSD id.
        id: i32,
        /// New weight.
        weight: u32,
    },
    /// Replace a pool's parameters (same id and name; its size and min_size changed).
    SetPool(Pool),
    /// Replace the exception table (text form).
    Exceptions(String),
    /// Set (`on`) or unset one OSD's own `noout` (kept so that stored histories written
    /// before [`Change::OsdFlag`] still apply).
    OsdNoOut {
        /// OSD id.
        id: i32,
        /// Set it (true) or unset it.
        on: bool,
    },
    /// Set (`on`) or unset one of [`MapFlag::PER_OSD`] on one OSD alone.
    OsdFlag {
        /// OSD id.
        id: i32,
        /// The flag.
        flag: MapFlag,
        /// Set it (true) or unset it.
        on: bool,
    },
    /// Set (`on`) or unset a cluster flag.
    Flag {
        /// The flag.
        flag: MapFlag,
        /// Set it (true) or unset it.
        on: bool,
    },
    /// Replace a pool's quota and its `full` mark (a default quota removes the entry).
    PoolQuota {
        /// Pool id.
        pool: i64,
        /// The quota.
        quota: PoolQuota,
    },
    /// Set the PG's temporary acting set (Ceph's `pg_temp`), or remove it when `acting` is
    /// empty: the PG is served by these OSDs while its up set is being filled.
    PgTemp {
        /// The PG.
        pg: PgId,
        /// Its acting set, primary first (empty: served by its up set again).
        acting: Vec<i32>,
    },
    /// Fence client instance `instance` until `until_unix_s` (seconds since the Unix epoch),
    /// or lift its fence when `until_unix_s` is 0 (Ceph's `osd blocklist add|rm`).
    Blocklist {
        /// The client instance.
        instance: u64,
        /// When the fence lapses; 0 removes it.
        until_unix_s: u64,
    },
}

/// The changes that turn epoch `epoch - 1` into `epoch`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Incremental {
    /// The epoch this incremental produces.
    pub epoch: u64,
    /// Changes in order.
    pub changes: Vec<Change>,
}

impl Incremental {
    /// Encodes with the same checksummed envelope as full maps.
    pub fn encode(&self) -> Vec<u8> {
        envelope(&serde_json::to_vec(self).unwrap_or_default())
    }

    /// Decodes and verifies.
    pub fn decode(bytes: &[u8]) -> Result<Self, MapError> {
        serde_json::from_slice(open_envelope(bytes)?).map_err(|e| MapError::Encoding(e.to_string()))
    }
}

impl ClusterMap {
    /// Applies `inc`, which must produce exactly the next epoch.
    pub fn apply(&mut self, inc: &Incremental) -> Result<(), MapError> {
        if inc.epoch != self.epoch + 1 {
            return Err(MapError::EpochGap {
                have: self.epoch,
                got: inc.epoch,
            });
        }
        let mut next = self.clone();
        for change in &inc.changes {
            next.apply_change(change)?;
            match change {
                Change::CreatePool(pool) => {
                    next.pool_created.insert(pool.id, inc.epoch);
                }
                Change::Up { id, .. } => next.entry(*id)?.up_from = Some(inc.epoch),
                Change::AddOsd { entry, .. } if entry.up => {
                    next.entry(entry.id)?.up_from = Some(inc.epoch)
                }
                Change::RemovePool(id) => {
                    next.pool_created.remove(id);
                }
                _ => {}
            }
        }
        next.epoch = inc.epoch;
        next.sync_states();
        *self = next;
        Ok(())
    }

    fn entry(&mut self, id: i32) -> Result<&mut OsdEntry, MapError> {
        self.osds
            .get_mut(&id)
            .ok_or_else(|| MapError::NotFound(format!("osd.{id}")))
    }

    fn apply_change(&mut self, change: &Change) -> Result<(), MapError> {
        match change {
            Change::AddOsd {
                entry,
                crush_weight,
            } => {
                self.placement.crush.add_device(
                    entry.id,
                    &format!("osd.{}", entry.id),
                    *crush_weight,
                    &entry.host,
                    "default",
                )?;
                self.osds.insert(entry.id, entry.clone());
            }
            Change::RemoveOsd { id } => {
                if self.osds.remove(id).is_none() {
                    return Err(MapError::NotFound(format!("osd.{id}")));
                }
                self.placement.crush.remove_device(*id)?;
                let ex = &mut self.placement.exceptions;
                for pairs in ex.upmap_items.values_mut() {
                    pairs.retain(|(from, to)| from != id && to != id);
                }
                ex.upmap_items.retain(|_, pairs| !pairs.is_empty());
                ex.upmap_primary.retain(|_, osd| osd != id);
                let temp = &mut self.placement.pg_temp;
                for acting in temp.values_mut() {
                    acting.retain(|o| o != id);
                }
                temp.retain(|_, acting| !acting.is_empty());
            }
            Change::Up { id, addr } => {
                let e = self.entry(*id)?;
                e.up = true;
                e.addr = addr.clone();
                e.down_since_ms = None;
            }
            Change::Down { id, at_ms } => {
                let e = self.entry(*id)?;
                e.up = false;
                e.down_since_ms = Some(*at_ms);
            }
            Change::Reweight { id, reweight, auto } => {
                let e = self.entry(*id)?;
                e.reweight = *reweight;
                e.auto_out = *auto && *reweight == 0;
            }
            Change::Full { id, full } => {
                self.entry(*id)?.full = *full;
            }
            Change::NearFull { id, nearfull } => {
                self.entry(*id)?.nearfull = *nearfull;
            }
            Change::UpThru { id, epoch } => {
                self.entry(*id)?.up_thru = Some(*epoch);
            }
            Change::Lost { id, epoch } => {
                self.entry(*id)?.lost_at = Some(*epoch);
            }
            Change::CreatePool(pool) => {
                self.placement.add_pool(pool.clone())?;
                self.pool_max = self.pool_max.max(pool.id);
            }
            Change::CrushWeight { id, weight } => {
                self.entry(*id)?;
                self.placement.crush.reweight_device(*id, *weight)?;
            }
            Change::SetPool(pool) => {
                pool.validate()?;
                match self.placement.pools.get_mut(&pool.id) {
                    Some(p) if p.name == pool.name => *p = pool.clone(),
                    _ => {
                        return Err(MapError::NotFound(format!(
                            "pool {} `{}`",
                            pool.id, pool.name
                        )))
                    }
                }
            }
            Change::RemovePool(id) => {
                if self.placement.pools.remove(id).is_none() {
                    return Err(MapError::NotFound(format!("pool {id}")));
                }
                self.placement
                    .exceptions
                    .upmap_items
                    .retain(|pg, _| pg.pool != *id);
                self.placement
                    .exceptions
                    .upmap_primary
                    .retain(|pg, _| pg.pool != *id);
                self.placement.pg_temp.retain(|pg, _| pg.pool != *id);
                self.quotas.remove(id);
            }
            Change::Exceptions(text) => {
                self.placement.exceptions =
                    Exceptions::parse(text).map_err(|e| MapError::Encoding(e.to_string()))?;
            }
            Change::OsdNoOut { id, on } => {
                self.entry(*id)?.noout = *on;
            }
            Change::OsdFlag { id, flag, on } => {
                if !self.entry(*id)?.set_own(*flag, *on) {
                    return Err(MapError::Invalid(format!(
                        "{flag} is a cluster-wide flag, not one of an OSD"
                    )));
                }
            }
            Change::Flag { flag, on: true } => {
                self.flags.insert(*flag);
            }
            Change::Flag { flag, on: false } => {
                self.flags.remove(flag);
            }
            Change::PoolQuota { pool, quota } => {
                if !self.placement.pools.contains_key(pool) {
                    return Err(MapError::NotFound(format!("pool {pool}")));
                }
                if *quota == PoolQuota::default() {
                    self.quotas.remove(pool);
                } else {
                    self.quotas.insert(*pool, quota.clone());
                }
            }
            Change::PgTemp { pg, acting } => {
                if acting.is_empty() {
                    self.placement.pg_temp.remove(pg);
                } else {
                    self.placement.pg_temp.insert(*pg, acting.clone());
                }
            }
            Change::Blocklist {
                instance,
                until_unix_s,
            } => {
                if *instance == 0 {
                    return Err(MapError::Invalid(
                        "client instance 0 names no client and cannot be fenced".into(),
                    ));
                }
                if *until_unix_s == 0 {
                    self.blocklist.remove(instance);
                } else {
                    if !self.blocklist.contains_key(instance)
                        && self.blocklist.len() >= crate::cluster_map::MAX_BLOCKLIST_ENTRIES
                    {
                        return Err(MapError::Invalid(format!(
                            "the blocklist holds its limit of {} instances",
                            crate::cluster_map::MAX_BLOCKLIST_ENTRIES
                        )));
                    }
                    self.blocklist.insert(*instance, *until_unix_s);
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn next(map: &mut ClusterMap, changes: Vec<Change>) -> Result<(), MapError> {
        let inc = Incremental {
            epoch: map.epoch + 1,
            changes,
        };
        map.apply(&inc)
    }

    #[test]
    fn a_fenced_instance_stays_fenced_until_its_expiry_or_removal_and_survives_encoding() {
        let mut map = ClusterMap::new("fsid").unwrap();
        next(
            &mut map,
            vec![Change::Blocklist {
                instance: 7,
                until_unix_s: 1_000,
            }],
        )
        .unwrap();
        assert!(map.is_blocklisted(7, 999));
        assert!(!map.is_blocklisted(7, 1_000), "expired at its time");
        assert!(!map.is_blocklisted(8, 0), "another instance is not");
        assert!(!map.is_blocklisted(0, 0), "instance 0 is never fenced");
        let back = ClusterMap::decode(&map.encode()).unwrap();
        assert_eq!(back.blocklist, map.blocklist);
        next(
            &mut map,
            vec![Change::Blocklist {
                instance: 7,
                until_unix_s: 0,
            }],
        )
        .unwrap();
        assert!(!map.is_blocklisted(7, 0));
        assert!(map.blocklist.is_empty());
    }

    #[test]
    fn instance_zero_cannot_be_fenced_and_the_list_is_bounded() {
        let mut map = ClusterMap::new("fsid").unwrap();
        let zero = Change::Blocklist {
            instance: 0,
            until_unix_s: 5,
        };
        assert!(matches!(
            next(&mut map, vec![zero]),
            Err(MapError::Invalid(_))
        ));
        assert_eq!(map.epoch, 1, "a refused incremental changes nothing");
        map.blocklist = (1..=crate::cluster_map::MAX_BLOCKLIST_ENTRIES as u64)
            .map(|i| (i, 9))
            .collect();
        let one_more = Change::Blocklist {
            instance: u64::MAX,
            until_unix_s: 9,
        };
        assert!(matches!(
            next(&mut map, vec![one_more]),
            Err(MapError::Invalid(_))
        ));
        let renewed = Change::Blocklist {
            instance: 1,
            until_unix_s: 19,
        };
        next(&mut map, vec![renewed]).unwrap();
        assert_eq!(
            map.blocklist[&1], 19,
            "an entry already there may be renewed"
        );
    }
}
