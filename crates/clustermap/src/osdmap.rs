//! The OSD map's placement view: CRUSH map + OSD states + pools + exceptions -> up sets.
//!
//! Owns Ceph's `pg_to_up_acting` pipeline: CRUSH (`do_rule` on the pool's seed, result size =
//! pool size, reweights = in/out vector), removal of non-existent OSDs, upmap exceptions, removal
//! of down OSDs, primary choice, then the acting set (`pg_temp`, down OSDs removed). Pure;
//! callers pass a [`Workspace`] to avoid allocation.

use std::collections::{BTreeMap, HashMap};

use cairn_crush::{CrushMap, Workspace, ITEM_NONE};

use crate::error::MapError;
use crate::exceptions::Exceptions;
use crate::pool::{PgId, Pool};

/// One OSD's state in the map.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OsdState {
    /// Registered in the map.
    pub exists: bool,
    /// Running and reachable.
    pub up: bool,
    /// In/out reweight, 16.16 (0 = out, 0x10000 = fully in).
    pub reweight: u32,
}

impl Default for OsdState {
    fn default() -> Self {
        OsdState {
            exists: true,
            up: true,
            reweight: 0x10000,
        }
    }
}

/// CRUSH map, OSDs, pools and exceptions: everything placement depends on.
#[derive(Clone, Debug)]
pub struct OsdMap {
    /// Map epoch.
    pub epoch: u64,
    /// The CRUSH hierarchy and rules.
    pub crush: CrushMap,
    /// OSD states by id.
    pub osds: BTreeMap<i32, OsdState>,
    /// Pools by id.
    pub pools: BTreeMap<i64, Pool>,
    /// Placement exceptions.
    pub exceptions: Exceptions,
    /// Temporary acting sets (Ceph's `pg_temp`): a PG listed here is served by these OSDs
    /// (primary first) while its up set receives its data, so moving a PG never blocks its I/O.
    pub pg_temp: BTreeMap<PgId, Vec<i32>>,
}

/// Most PGs a [`MappingCache`] remembers (explicit limit: callers may ask about any pool and
/// seed); past it the cache starts over.
pub const MAX_CACHED_MAPPINGS: usize = 1 << 16;

/// PG mappings of one map epoch, remembered, as Ceph keeps an `OSDMapMapping` per epoch: a
/// client addressing an op, or an OSD checking that it is a PG's primary, looks the PG up here
/// instead of building a mapper and running CRUSH every time.
#[derive(Debug, Default)]
pub struct MappingCache {
    epoch: u64,
    by_pg: HashMap<PgId, Option<PgMapping>>,
}

impl MappingCache {
    /// `pg`'s mapping in `map`, whose epoch is `epoch` (a different epoch than the last call's
    /// forgets everything remembered); None when the map cannot place it (no such pool).
    pub fn get(&mut self, epoch: u64, map: &OsdMap, pg: PgId) -> Option<&PgMapping> {
        if self.epoch != epoch || self.by_pg.len() >= MAX_CACHED_MAPPINGS {
            self.epoch = epoch;
            self.by_pg.clear();
        }
        self.by_pg
            .entry(pg)
            .or_insert_with(|| {
                map.pools.get(&pg.pool)?;
                map.mapper().map_pg(pg).ok()
            })
            .as_ref()
    }
}

/// Result of mapping one PG.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PgMapping {
    /// CRUSH's raw result (after removing non-existent OSDs).
    pub raw: Vec<i32>,
    /// Up set after exceptions and removal of down OSDs: where the PG's data belongs.
    pub up: Vec<i32>,
    /// The up set's first OSD, or -1 if none is up.
    pub primary: i32,
    /// The OSDs serving the PG, primary first: its `pg_temp` entry without down OSDs, or the
    /// up set when it has none, or fewer than the pool's `min_size` of its OSDs are up (a
    /// temporary set that cannot serve gives the PG back to its up set, which recovers before
    /// it activates).
    pub acting: Vec<i32>,
}

impl PgMapping {
    /// The OSD that serves the PG's I/O (first of the acting set), if any.
    pub fn acting_primary(&self) -> Option<i32> {
        self.acting.first().copied()
    }
}

impl OsdMap {
    /// The pool named `name`, if there is one (pools are keyed by id; clients, gateways and
    /// commands name them).
    pub fn pool_named(&self, name: &str) -> Option<&Pool> {
        self.pools.values().find(|p| p.name == name)
    }

    /// A map where every device of the CRUSH map is an existing, up and in OSD.
    pub fn all_up_in(crush: CrushMap) -> Self {
        let osds = crush
            .devices
            .keys()
            .map(|&id| (id, OsdState::default()))
            .collect();
        OsdMap {
            epoch: 1,
            crush,
            osds,
            pools: BTreeMap::new(),
            exceptions: Exceptions::default(),
            pg_temp: BTreeMap::new(),
        }
    }

    /// Adds or replaces a pool after checking it and its rule.
    pub fn add_pool(&mut self, pool: Pool) -> Result<(), MapError> {
        pool.validate()?;
        if !self.crush.rules.contains_key(&pool.crush_rule) {
            return Err(MapError::NoRule {
                pool: pool.id,
                rule: pool.crush_rule,
            });
        }
        self.pools.insert(pool.id, pool);
        Ok(())
    }

    /// The in/out reweight vector CRUSH sees (0 for absent or out OSDs).
    pub fn reweights(&self) -> Vec<u32> {
        let max = self
            .crush
            .max_devices()
            .max(self.osds.keys().next_back().map_or(0, |&id| id + 1));
        (0..max)
            .map(|id| match self.osds.get(&id) {
                Some(s) if s.exists => s.reweight,
                _ => 0,
            })
            .collect()
    }

    /// A reusable mapper for many PGs of this map.
    pub fn mapper(&self) -> Mapper<'_> {
        Mapper {
            map: self,
            reweights: self.reweights(),
            ws: Workspace::new(),
            scratch: Vec::new(),
            choose_args: None,
            choose_args_pool: None,
        }
    }
}

/// Maps PGs of one [`OsdMap`] repeatedly without reallocating.
pub struct Mapper<'a> {
    map: &'a OsdMap,
    reweights: Vec<u32>,
    ws: Workspace,
    scratch: Vec<i32>,
    /// The pool's choose_args set (falling back to the default set), as OSDMap uses it.
    choose_args: Option<cairn_crush::mapper::DenseChooseArgs>,
    choose_args_pool: Option<i64>,
}

impl Mapper<'_> {
    /// CRUSH's raw result for a PG (non-existent OSDs removed), before exceptions.
    pub fn raw(&mut self, pg: PgId) -> Result<Vec<i32>, MapError> {
        let pool = self
            .map
            .pools
            .get(&pg.pool)
            .ok_or(MapError::NoPool(pg.pool))?;
        if self.choose_args_pool != Some(pool.id) {
            self.choose_args = self.map.crush.dense_choose_args(pool.id);
            self.choose_args_pool = Some(pool.id);
        }
        let ok = self.map.crush.do_rule(
            pool.crush_rule,
            pool.pps(pg) as i32,
            pool.size as usize,
            &self.reweights,
            self.choose_args.as_deref(),
            &mut self.ws,
            &mut self.scratch,
        );
        if !ok {
            return Err(MapError::NoRule {
                pool: pool.id,
                rule: pool.crush_rule,
            });
        }
        let osds = &self.map.osds;
        Ok(self
            .scratch
            .iter()
            .copied()
            .filter(|&o| o == ITEM_NONE || osds.get(&o).is_some_and(|s| s.exists))
            .collect())
    }

    /// Where a PG's data lives: the raw result with `pg_upmap_items` applied, positions kept,
    /// before removing down OSDs or choosing the primary.
    pub fn placed(&mut self, pg: PgId) -> Result<Vec<i32>, MapError> {
        let mut set = self.raw(pg)?;
        let reweights = &self.reweights;
        self.map.exceptions.apply_items(pg, &mut set, |o| {
            o < 0 || reweights.get(o as usize).is_none_or(|&w| w == 0)
        });
        Ok(set)
    }

    /// Full mapping of a PG: raw, exceptions applied, down OSDs removed, primary chosen, and
    /// the acting set.
    pub fn map_pg(&mut self, pg: PgId) -> Result<PgMapping, MapError> {
        let raw = self.raw(pg)?;
        let mut up = raw.clone();
        let reweights = &self.reweights;
        self.map.exceptions.apply_items(pg, &mut up, |o| {
            o < 0 || reweights.get(o as usize).is_none_or(|&w| w == 0)
        });
        let osds = &self.map.osds;
        up.retain(|&o| o != ITEM_NONE && osds.get(&o).is_some_and(|s| s.up));
        self.map.exceptions.apply_primary(pg, &mut up);
        let primary = up.first().copied().unwrap_or(-1);
        let temp: Vec<i32> = self
            .map
            .pg_temp
            .get(&pg)
            .map(|t| {
                t.iter()
                    .copied()
                    .filter(|o| osds.get(o).is_some_and(|s| s.exists && s.up))
                    .collect()
            })
            .unwrap_or_default();
        let min_size = self
            .map
            .pools
            .get(&pg.pool)
            .map_or(1, |p| p.min_size.max(1));
        let acting = if temp.len() < min_size as usize {
            up.clone()
        } else {
            temp
        };
        Ok(PgMapping {
            raw,
            up,
            primary,
            acting,
        })
    }
}
