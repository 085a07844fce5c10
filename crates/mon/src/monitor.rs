//! The monitor state machine: events in, new map epochs out.
//!
//! Owns failure detection (peer failure reports from enough distinct reporters past the
//! heartbeat grace, or missing beacons), the down -> out timer, OSD registration (ids reused by
//! uuid, placed in CRUSH under their host), pools, the history of incrementals subscribers
//! catch up from, and re-balancing after every change so PG counts stay within one of target
//! while moving only what the change requires. Sans-IO: `now_ms` is always passed in.

use std::collections::BTreeMap;

use cairn_clustermap::balance::{balance, placement_of, BalanceOptions};
use cairn_clustermap::shape::Topology;
use cairn_clustermap::Pool;

use cairn_clustermap::quota::{
    judge, PgUsage, PgUsageTable, PoolQuota, PoolUsage, MAX_PG_USAGE_PER_REPORT,
};
use cairn_clustermap::MapFlag;
use cairn_clustermap::MapHistory;
use cairn_clustermap::{Change, Incremental};
use cairn_clustermap::{ClusterMap, OsdEntry};
use cairn_proto::mon::{
    MonError, Reply, Request, MAX_BLOCKLIST_EXPIRE_S, MAX_CRUSH_WEIGHT, MAX_PG_TEMPS_PER_REQUEST,
    MAX_POOL_SIZE,
};

/// Monitor settings (defaults follow Ceph's).
#[derive(Clone, Debug)]
pub struct MonConfig {
    /// Distinct OSDs that must report a peer before it is marked down (Ceph: 2).
    pub min_down_reporters: usize,
    /// How long a peer must have been unresponsive in a report (Ceph's heartbeat grace, 20 s).
    pub heartbeat_grace_ms: u64,
    /// Down OSDs are marked out after this long (Ceph: 600 s).
    pub down_out_interval_ms: u64,
    /// An up OSD that sends no beacon for this long is marked down (Ceph: 900 s).
    pub beacon_timeout_ms: u64,
    /// Most incrementals sent to a subscriber to catch up (further behind, it gets the full map).
    pub catch_up_max: usize,
    /// Epochs of history kept (durably, with the daemon's store) for OSDs to rebuild the maps
    /// they missed and compute their PGs' past intervals. Ceph keeps maps back to the oldest
    /// epoch a PG may still need; this keeps a fixed number (an incremental is a few hundred
    /// bytes).
    pub history_epochs: usize,
    /// Re-balance placement (exceptions) after every change.
    pub balance: bool,
    /// Whether a pool may be removed at all (Ceph's `mon_allow_pool_delete`, off by default:
    /// removing a pool deletes its objects, and one mistyped command must not do that).
    pub allow_pool_delete: bool,
    /// Keep the acting set of a PG whose data a change moves to an OSD already up, with a
    /// `pg_temp` entry in the same epoch (Ceph's `mon_osd_prime_pg_temp`, on by default): the
    /// PG peers once instead of twice (see [`crate::prime`]).
    pub prime_pg_temp: bool,
}

impl Default for MonConfig {
    fn default() -> Self {
        MonConfig {
            min_down_reporters: 2,
            heartbeat_grace_ms: 20_000,
            down_out_interval_ms: 600_000,
            beacon_timeout_ms: 900_000,
            catch_up_max: 500,
            history_epochs: 20_000,
            balance: true,
            allow_pool_delete: false,
            prime_pg_temp: true,
        }
    }
}

/// The monitor: the authoritative map plus the state needed to change it.
pub struct Monitor {
    map: ClusterMap,
    config: MonConfig,
    reports: BTreeMap<i32, BTreeMap<i32, u64>>,
    last_beacon_ms: BTreeMap<i32, u64>,
    history: MapHistory,
    pg_usage: PgUsageTable,
    /// Wall-clock time (ms since the Unix epoch) at the callers' `now_ms` 0.
    unix_origin_ms: u64,
}

impl Monitor {
    /// A monitor over `map` (e.g. loaded from its store).
    pub fn new(map: ClusterMap, config: MonConfig) -> Self {
        let history = MapHistory::new(&map);
        Monitor::with_history(map, history, config)
    }

    /// A monitor over `map` and the history that leads to it (both loaded from its store); a
    /// history that does not end at the map's epoch is replaced by one that begins there.
    pub fn with_history(map: ClusterMap, history: MapHistory, config: MonConfig) -> Self {
        let history = if history.newest_epoch() == map.epoch {
            history
        } else {
            tracing::warn!(
                map = map.epoch,
                history = history.newest_epoch(),
                "map history does not end at the map: it begins again here"
            );
            MapHistory::new(&map)
        };
        Monitor {
            map,
            config,
            reports: BTreeMap::new(),
            last_beacon_ms: BTreeMap::new(),
            history,
            pg_usage: PgUsageTable::default(),
            unix_origin_ms: 0,
        }
    }

    /// Pool `pool`'s usage as its primaries last reported it (nothing for an unknown pool).
    pub fn pool_usage(&self, pool: i64) -> PoolUsage {
        match self.map.placement.pools.get(&pool) {
            Some(p) => self.pg_usage.pool(pool, p.pg_num),
            None => PoolUsage::default(),
        }
    }

    /// The map's history (base map and incrementals since).
    pub fn history(&self) -> &MapHistory {
        &self.history
    }

    /// The current map.
    pub fn map(&self) -> &ClusterMap {
        &self.map
    }

    /// Incrementals after `epoch`, or None if the history no longer reaches back that far (send
    /// the full map instead).
    pub fn incrementals_since(&self, epoch: u64) -> Option<Vec<Incremental>> {
        self.history.since(epoch, self.config.catch_up_max)
    }

    /// Why an OSD authenticated as `osd.id` may not boot with `uuid`, if it may not: the uuid
    /// belongs to another id in the map, or the id to another uuid (another OSD's data, or
    /// another OSD holding this one's key). Without authentication an id is only a wish.
    pub fn boot_conflict(&self, uuid: &str, id: i32) -> Option<String> {
        if let Some(other) = self
            .map
            .osds
            .values()
            .find(|o| o.uuid == uuid && o.id != id)
        {
            return Some(format!(
                "permission denied: uuid {uuid} is osd.{}, not osd.{id}",
                other.id
            ));
        }
        match self.map.osds.get(&id) {
            Some(o) if o.uuid != uuid => Some(format!(
                "permission denied: osd.{id} belongs to another OSD (uuid {}); \
                 `cairn osd rm {id}` it first if it is gone",
                o.uuid
            )),
            _ => None,
        }
    }

    /// Serves one request at time `now_ms`.
    pub fn handle(&mut self, now_ms: u64, request: Request) -> Result<Reply, MonError> {
        match request {
            Request::Boot {
                uuid,
                host,
                addr,
                crush_weight,
                want_id,
            } => self.boot(now_ms, uuid, host, addr, crush_weight, want_id),
            Request::FailureReport {
                reporter,
                target,
                failed_for_ms,
                addr,
                up_from,
            } => {
                if self.map.holds_for(target, MapFlag::NoDown) {
                    return Ok(Reply::Done {
                        epoch: self.map.epoch,
                    });
                }
                let reporter_up = self.map.osds.get(&reporter).is_some_and(|o| o.up);
                let target_current = match addr.is_empty() {
                    true => self.map.osds.get(&target).is_some_and(|o| o.up),
                    false => self.is_current(target, &addr, up_from),
                };
                if !reporter_up || !target_current || reporter == target {
                    return Ok(Reply::Done {
                        epoch: self.map.epoch,
                    });
                }
                if failed_for_ms >= self.config.heartbeat_grace_ms {
                    self.reports
                        .entry(target)
                        .or_default()
                        .insert(reporter, now_ms);
                }
                let enough = self.reports.get(&target).map_or(0, BTreeMap::len)
                    >= self.config.min_down_reporters;
                if enough {
                    self.reports.remove(&target);
                    let epoch = self.commit(vec![Change::Down {
                        id: target,
                        at_ms: self.unix_ms(now_ms),
                    }])?;
                    return Ok(Reply::Done { epoch });
                }
                Ok(Reply::Done {
                    epoch: self.map.epoch,
                })
            }
            Request::RefusedReport {
                reporter,
                target,
                addr,
                up_from,
            } => self.refused(now_ms, reporter, target, &addr, up_from),
            Request::Beacon { id, full, nearfull } => {
                let Some(known) = self.map.osds.get(&id) else {
                    return Err(MonError::NotFound(format!("osd.{id}")));
                };
                self.last_beacon_ms.insert(id, now_ms);
                let mut changes = Vec::new();
                if known.full != full {
                    changes.push(Change::Full { id, full });
                }
                if known.nearfull != nearfull {
                    changes.push(Change::NearFull { id, nearfull });
                }
                let epoch = self.commit_any(changes)?;
                Ok(Reply::Done { epoch })
            }
            Request::Alive { id, want } => self.alive(id, want),
            Request::PgTemp { temps } => self.pg_temp(temps),
            Request::MarkOut { id } => self.set_reweight(id, 0),
            Request::MarkIn { id } => self.set_reweight(id, 0x10000),
            Request::Reweight { id, reweight } => {
                if reweight > 0x10000 {
                    return Err(MonError::Invalid(format!(
                        "reweight {:.4} is past 1.0",
                        f64::from(reweight) / 65536.0
                    )));
                }
                self.set_reweight(id, reweight)
            }
            Request::CrushReweight { id, weight } => {
                self.osd(id)?;
                if weight > MAX_CRUSH_WEIGHT {
                    return Err(MonError::Invalid(format!(
                        "CRUSH weight {:.4} is past {}",
                        f64::from(weight) / 65536.0,
                        MAX_CRUSH_WEIGHT >> 16
                    )));
                }
                let epoch = match self.map.placement.crush.device_weight(id) {
                    Some(w) if w == weight => self.map.epoch,
                    _ => self.commit(vec![Change::CrushWeight { id, weight }])?,
                };
                Ok(Reply::Done { epoch })
            }
            Request::MarkDown { id } => {
                let up = self.osd(id)?.up;
                let epoch = if up {
                    self.commit(vec![Change::Down {
                        id,
                        at_ms: self.unix_ms(now_ms),
                    }])?
                } else {
                    self.map.epoch
                };
                Ok(Reply::Done { epoch })
            }
            Request::MarkLost { id } => {
                if self.osd(id)?.up {
                    return Err(MonError::Invalid(format!(
                        "osd.{id} is up: stop it (or mark it down) before declaring it lost"
                    )));
                }
                let epoch = self.map.epoch + 1;
                let epoch = self.commit(vec![Change::Lost { id, epoch }])?;
                Ok(Reply::Done { epoch })
            }
            Request::RemoveOsd { id } => {
                if self.osd(id)?.up {
                    return Err(MonError::Invalid(format!(
                        "osd.{id} is up: stop it (or mark it down) before removing it"
                    )));
                }
                let epoch = self.commit(vec![Change::RemoveOsd { id }])?;
                self.last_beacon_ms.remove(&id);
                self.reports.remove(&id);
                for by in self.reports.values_mut() {
                    by.remove(&id);
                }
                Ok(Reply::Done { epoch })
            }
            Request::CreatePool { name, size, pg_num } => {
                if self.map.placement.pool_named(&name).is_some() {
                    return Err(MonError::Invalid(format!("pool `{name}` exists")));
                }
                let id = self.map.pool_max + 1;
                let pool = Pool::replicated(id, &name, size, pg_num, 0)?;
                let epoch = self.commit(vec![Change::CreatePool(pool)])?;
                Ok(Reply::Done { epoch })
            }
            Request::RemovePool {
                name,
                repeated,
                sure,
            } => {
                if !self.config.allow_pool_delete {
                    return Err(MonError::Refused(format!(
                        "pool deletion is disabled: set mon_allow_pool_delete first \
                         (`cairn mon set mon_allow_pool_delete true`, or the monitor's \
                         --allow-pool-delete) to remove pool `{name}`"
                    )));
                }
                if repeated != name || !sure {
                    return Err(MonError::Refused(format!(
                        "removing pool `{name}` deletes all of its objects: give its name \
                         twice and --yes-i-really-really-mean-it"
                    )));
                }
                let id = self
                    .map
                    .placement
                    .pools
                    .values()
                    .find(|p| p.name == name)
                    .map(|p| p.id)
                    .ok_or_else(|| MonError::NotFound(format!("pool `{name}`")))?;
                let epoch = self.commit(vec![Change::RemovePool(id)])?;
                self.pg_usage.forget_pool(id);
                Ok(Reply::Done { epoch })
            }
            Request::SetMonOption { key, value } => self.set_option(&key, &value),
            Request::SetPool {
                name,
                size,
                min_size,
            } => {
                if size.is_none() && min_size.is_none() {
                    return Err(MonError::Invalid(format!(
                        "pool `{name}`: nothing to set (size or min_size)"
                    )));
                }
                let mut pool = self
                    .map
                    .placement
                    .pool_named(&name)
                    .cloned()
                    .ok_or_else(|| MonError::NotFound(format!("pool `{name}`")))?;
                if let Some(size) = size {
                    if !(1..=MAX_POOL_SIZE).contains(&size) {
                        return Err(MonError::Invalid(format!(
                            "pool size must be in 1..={MAX_POOL_SIZE}, not {size}"
                        )));
                    }
                    pool.size = size;
                    pool.min_size = size - size / 2;
                }
                if let Some(min_size) = min_size {
                    if !(1..=pool.size).contains(&min_size) {
                        return Err(MonError::Invalid(format!(
                            "min_size must be in 1..=size ({}), not {min_size}",
                            pool.size
                        )));
                    }
                    pool.min_size = min_size;
                }
                let epoch = self.commit(vec![Change::SetPool(pool)])?;
                Ok(Reply::Done { epoch })
            }
            Request::SetOsdFlag { ids, flag, on } => {
                if !MapFlag::PER_OSD.contains(&flag) {
                    return Err(MonError::Invalid(format!(
                        "{flag} is cluster-wide only; an OSD alone can have {}",
                        MapFlag::PER_OSD.map(MapFlag::name).join(", ")
                    )));
                }
                let mut changes = Vec::new();
                for id in ids.into_iter().collect::<std::collections::BTreeSet<_>>() {
                    if self.osd(id)?.has_own(flag) != on {
                        changes.push(Change::OsdFlag { id, flag, on });
                    }
                }
                let epoch = self.commit_any(changes)?;
                Ok(Reply::Done { epoch })
            }
            Request::SetPoolQuota {
                name,
                max_objects,
                max_bytes,
            } => self.set_pool_quota(&name, max_objects, max_bytes),
            Request::PgUsage { id, usage } => self.record_pg_usage(id, usage),
            Request::SetFlags { flags, on } => {
                let changes: Vec<Change> = flags
                    .into_iter()
                    .collect::<std::collections::BTreeSet<_>>()
                    .into_iter()
                    .filter(|f| self.map.has(*f) != on)
                    .map(|flag| Change::Flag { flag, on })
                    .collect();
                let epoch = self.commit_any(changes)?;
                Ok(Reply::Done { epoch })
            }
            Request::Blocklist { instance, expire_s } => {
                self.blocklist(instance, expire_s, self.unix_s(now_ms))
            }
        }
    }

    /// Fences `instance` for `expire_s` seconds from `now_unix_s`, or lifts its fence (see
    /// [`Request::Blocklist`]). Fencing an instance already fenced renews its expiry.
    fn blocklist(
        &mut self,
        instance: u64,
        expire_s: Option<u64>,
        now_unix_s: u64,
    ) -> Result<Reply, MonError> {
        if instance == 0 {
            return Err(MonError::Invalid(
                "client instance 0 names no client and cannot be fenced".into(),
            ));
        }
        let until_unix_s = match expire_s {
            None if !self.map.blocklist.contains_key(&instance) => {
                return Err(MonError::NotFound(format!(
                    "client instance {instance:016x} in the blocklist"
                )))
            }
            None => 0,
            Some(s) if (1..=MAX_BLOCKLIST_EXPIRE_S).contains(&s) => now_unix_s.saturating_add(s),
            Some(s) => {
                return Err(MonError::Invalid(format!(
                    "a fence lasts 1..={MAX_BLOCKLIST_EXPIRE_S} s, not {s}"
                )))
            }
        };
        let epoch = self.commit(vec![Change::Blocklist {
            instance,
            until_unix_s,
        }])?;
        Ok(Reply::Done { epoch })
    }

    /// Advances timers: missing beacons -> down, down too long -> out. Returns the new epoch if
    /// the map changed.
    pub fn tick(&mut self, now_ms: u64) -> Result<Option<u64>, MonError> {
        let mut changes = Vec::new();
        for o in self.map.osds.values() {
            if o.up {
                if self.map.holds_for(o.id, MapFlag::NoDown) {
                    continue;
                }
                let last = self.last_beacon_ms.get(&o.id).copied().unwrap_or(now_ms);
                if now_ms.saturating_sub(last) > self.config.beacon_timeout_ms {
                    changes.push(Change::Down {
                        id: o.id,
                        at_ms: self.unix_ms(now_ms),
                    });
                }
            } else if o.reweight > 0 && !self.map.holds_for(o.id, MapFlag::NoOut) {
                // Wall-clock times: a restarted monitor (whose `now_ms` starts again at 0)
                // counts from when the OSD really went down.
                if let Some(since) = o.down_since_ms {
                    if self.unix_ms(now_ms).saturating_sub(since)
                        >= self.config.down_out_interval_ms
                    {
                        changes.push(Change::Reweight {
                            id: o.id,
                            reweight: 0,
                            auto: true,
                        });
                    }
                }
            }
        }
        let grace = self.config.heartbeat_grace_ms.saturating_mul(2);
        for reporters in self.reports.values_mut() {
            reporters.retain(|_, &mut at| now_ms.saturating_sub(at) <= grace);
        }
        self.reports.retain(|_, r| !r.is_empty());
        let now_unix_s = self.unix_s(now_ms);
        changes.extend(
            self.map
                .blocklist
                .iter()
                .filter(|(_, until)| **until <= now_unix_s)
                .map(|(instance, _)| Change::Blocklist {
                    instance: *instance,
                    until_unix_s: 0,
                }),
        );
        if changes.is_empty() {
            return Ok(None);
        }
        self.commit(changes).map(Some)
    }

    /// Sets the wall-clock time (ms since the Unix epoch) at `now_ms` 0 of the times the
    /// caller passes. Blocklist expiries are wall-clock times, which every OSD compares with
    /// its own clock (as Ceph's); the monitor reads no clock itself.
    pub fn set_unix_origin_ms(&mut self, unix_ms: u64) {
        self.unix_origin_ms = unix_ms;
    }

    /// Seconds since the Unix epoch at `now_ms`.
    fn unix_s(&self, now_ms: u64) -> u64 {
        self.unix_ms(now_ms) / 1000
    }

    /// Milliseconds since the Unix epoch at `now_ms`.
    fn unix_ms(&self, now_ms: u64) -> u64 {
        self.unix_origin_ms.saturating_add(now_ms)
    }

    /// Sets one of the monitor's run-time options (see [`Request::SetMonOption`]).
    fn set_option(&mut self, key: &str, value: &str) -> Result<Reply, MonError> {
        let flag = |v: &str| match v {
            "true" | "1" | "yes" => Ok(true),
            "false" | "0" | "no" => Ok(false),
            _ => Err(MonError::Invalid(format!(
                "{key}: `{v}` is not true or false"
            ))),
        };
        match key {
            "mon_allow_pool_delete" => self.config.allow_pool_delete = flag(value)?,
            "mon_osd_prime_pg_temp" => self.config.prime_pg_temp = flag(value)?,
            _ => {
                return Err(MonError::Invalid(format!(
                    "unknown monitor option `{key}` (known: mon_allow_pool_delete)"
                )))
            }
        }
        Ok(Reply::Done {
            epoch: self.map.epoch,
        })
    }

    /// Sets a pool's quota limits (see [`Request::SetPoolQuota`]) and judges it at once.
    fn set_pool_quota(
        &mut self,
        name: &str,
        max_objects: Option<u64>,
        max_bytes: Option<u64>,
    ) -> Result<Reply, MonError> {
        if max_objects.is_none() && max_bytes.is_none() {
            return Err(MonError::Invalid(format!(
                "pool `{name}`: nothing to set (max_objects or max_bytes)"
            )));
        }
        let pool = self
            .map
            .placement
            .pool_named(name)
            .cloned()
            .ok_or_else(|| MonError::NotFound(format!("pool `{name}`")))?;
        let current = self.map.quotas.get(&pool.id).cloned().unwrap_or_default();
        let mut quota = current.clone();
        if let Some(max) = max_objects {
            quota.max_objects = (max > 0).then_some(max);
        }
        if let Some(max) = max_bytes {
            quota.max_bytes = (max > 0).then_some(max);
        }
        let usage = self.pg_usage.pool(pool.id, pool.pg_num);
        if let Some(full) = judge(&quota, &usage, pool.pg_num) {
            quota.full = full;
        }
        let changes = match quota == current {
            true => Vec::new(),
            false => vec![Change::PoolQuota {
                pool: pool.id,
                quota,
            }],
        };
        let epoch = self.commit_any(changes)?;
        Ok(Reply::Done { epoch })
    }

    /// Keeps the entries of a usage report that come from their PG's acting primary (as the
    /// monitor's map has it; a down reporter's are stale), then judges every pool with a
    /// quota again: one epoch for the pools whose `full` mark changes, none otherwise.
    fn record_pg_usage(&mut self, id: i32, usage: Vec<PgUsage>) -> Result<Reply, MonError> {
        if usage.len() > MAX_PG_USAGE_PER_REPORT {
            return Err(MonError::Invalid(format!(
                "{} PG usage entries in one report, at most {MAX_PG_USAGE_PER_REPORT}",
                usage.len()
            )));
        }
        if !self.osd(id)?.up {
            return Ok(Reply::Done {
                epoch: self.map.epoch,
            });
        }
        let pools = &self.map.placement.pools;
        let mut mapper = self.map.placement.mapper();
        for u in &usage {
            let known = pools.get(&u.pg.pool).is_some_and(|p| u.pg.seed < p.pg_num);
            let led = known
                && mapper
                    .map_pg(u.pg)
                    .is_ok_and(|m| m.acting_primary() == Some(id));
            if led {
                self.pg_usage.record(u);
            }
        }
        let changes: Vec<Change> = self
            .map
            .quotas
            .iter()
            .filter_map(|(&pool, quota)| {
                let pg_num = self.map.placement.pools.get(&pool)?.pg_num;
                let full = judge(quota, &self.pg_usage.pool(pool, pg_num), pg_num)?;
                (full != quota.full).then(|| Change::PoolQuota {
                    pool,
                    quota: PoolQuota {
                        full,
                        ..quota.clone()
                    },
                })
            })
            .collect();
        let epoch = self.commit_any(changes)?;
        Ok(Reply::Done { epoch })
    }

    /// Marks `target` down on one report that its current incarnation refused a connection
    /// (see [`Request::RefusedReport`]); a report about an earlier incarnation, another
    /// address, or from a reporter that is itself down changes nothing, nor does any while
    /// `nodown` is set.
    fn refused(
        &mut self,
        now_ms: u64,
        reporter: i32,
        target: i32,
        addr: &str,
        up_from: u64,
    ) -> Result<Reply, MonError> {
        let reporter_up = self.map.osds.get(&reporter).is_some_and(|o| o.up);
        let current = self.is_current(target, addr, up_from);
        if !reporter_up
            || !current
            || reporter == target
            || self.map.holds_for(target, MapFlag::NoDown)
        {
            return Ok(Reply::Done {
                epoch: self.map.epoch,
            });
        }
        self.reports.remove(&target);
        let epoch = self.commit(vec![Change::Down {
            id: target,
            at_ms: self.unix_ms(now_ms),
        }])?;
        Ok(Reply::Done { epoch })
    }

    /// Whether `id` is up at `addr` in the incarnation that booted at `up_from` (0: the map
    /// kept no up_from): what a report about it must name to count.
    fn is_current(&self, id: i32, addr: &str, up_from: u64) -> bool {
        self.map
            .osds
            .get(&id)
            .is_some_and(|o| o.up && o.addr == addr && o.up_from.unwrap_or(0) == up_from)
    }

    fn osd(&self, id: i32) -> Result<&OsdEntry, MonError> {
        self.map
            .osds
            .get(&id)
            .ok_or_else(|| MonError::NotFound(format!("osd.{id}")))
    }

    /// Records that `id` is alive through the interval begun at `want` (its up_thru), unless
    /// it already is, or it is down in the map (a stale request: the interval is over), or
    /// `want` is an epoch the map has not reached.
    fn alive(&mut self, id: i32, want: u64) -> Result<Reply, MonError> {
        let osd = self.osd(id)?;
        if want > self.map.epoch {
            return Err(MonError::Invalid(format!(
                "up_thru {want} asked past the map's epoch {}",
                self.map.epoch
            )));
        }
        let recorded = osd.up_thru.is_some_and(|u| u >= want);
        let epoch = if osd.up && !recorded {
            self.commit(vec![Change::UpThru { id, epoch: want }])?
        } else {
            self.map.epoch
        };
        Ok(Reply::Done { epoch })
    }

    /// Sets or removes PGs' temporary acting sets, in one epoch, after checking every one
    /// (nothing changes if one is malformed). No new epoch when the map has them already.
    fn pg_temp(
        &mut self,
        temps: Vec<(cairn_clustermap::PgId, Vec<i32>)>,
    ) -> Result<Reply, MonError> {
        if temps.len() > MAX_PG_TEMPS_PER_REQUEST {
            return Err(MonError::Invalid(format!(
                "{} pg_temp entries in one request, at most {MAX_PG_TEMPS_PER_REQUEST}",
                temps.len()
            )));
        }
        let mut changes = Vec::new();
        for (pg, acting) in temps {
            self.check_pg_temp(pg, &acting)?;
            let current = self.map.placement.pg_temp.get(&pg);
            if !current.map_or(acting.is_empty(), |c| *c == acting) {
                changes.retain(|c| !matches!(c, Change::PgTemp { pg: p, .. } if *p == pg));
                changes.push(Change::PgTemp { pg, acting });
            }
        }
        let epoch = self.commit_any(changes)?;
        Ok(Reply::Done { epoch })
    }

    /// Checks one temporary acting set: the pool and PG exist, its OSDs exist, are distinct
    /// and no more than the pool's size.
    fn check_pg_temp(&self, pg: cairn_clustermap::PgId, acting: &[i32]) -> Result<(), MonError> {
        let pool = self
            .map
            .placement
            .pools
            .get(&pg.pool)
            .ok_or_else(|| MonError::NotFound(format!("pool {}", pg.pool)))?;
        if pg.seed >= pool.pg_num {
            return Err(MonError::NotFound(format!("pg {pg}")));
        }
        if acting.len() > pool.size as usize {
            return Err(MonError::Invalid(format!(
                "pg_temp of {} OSDs for pg {pg} of a pool of size {}",
                acting.len(),
                pool.size
            )));
        }
        for (i, o) in acting.iter().enumerate() {
            self.osd(*o)?;
            if acting[..i].contains(o) {
                return Err(MonError::Invalid(format!(
                    "osd.{o} twice in pg_temp of {pg}"
                )));
            }
        }
        Ok(())
    }

    fn set_reweight(&mut self, id: i32, reweight: u32) -> Result<Reply, MonError> {
        let current = self.osd(id)?.reweight;
        let epoch = if current == reweight {
            self.map.epoch
        } else {
            self.commit(vec![Change::Reweight {
                id,
                reweight,
                auto: false,
            }])?
        };
        Ok(Reply::Done { epoch })
    }

    fn boot(
        &mut self,
        now_ms: u64,
        uuid: String,
        host: String,
        addr: String,
        crush_weight: u32,
        want_id: Option<i32>,
    ) -> Result<Reply, MonError> {
        if uuid.is_empty() || host.is_empty() {
            return Err(MonError::Invalid("boot needs a uuid and a host".into()));
        }
        let existing = self.map.osds.values().find(|o| o.uuid == uuid).cloned();
        let mut changes = Vec::new();
        let id = match existing {
            Some(o) => {
                if o.host != host {
                    changes.push(Change::AddOsd {
                        entry: OsdEntry {
                            host: host.clone(),
                            ..o.clone()
                        },
                        crush_weight,
                    });
                }
                // Under `noup` (its own or the cluster's) it stays down; it boots again once
                // the flag is unset.
                if !self.map.holds_for(o.id, MapFlag::NoUp) {
                    changes.push(Change::Up {
                        id: o.id,
                        addr: addr.clone(),
                    });
                    if o.auto_out && !self.map.holds_for(o.id, MapFlag::NoIn) {
                        changes.push(Change::Reweight {
                            id: o.id,
                            reweight: 0x10000,
                            auto: false,
                        });
                    }
                }
                o.id
            }
            None => {
                let free = |i: &i32| *i >= 0 && !self.map.osds.contains_key(i);
                let id = want_id
                    .filter(free)
                    .or_else(|| (0..).find(free))
                    .unwrap_or(0);
                let noup = self.map.has(MapFlag::NoUp);
                changes.push(Change::AddOsd {
                    entry: OsdEntry {
                        up: !noup,
                        ..OsdEntry::booted(id, uuid, host, addr)
                    },
                    crush_weight,
                });
                if noup || self.map.has(MapFlag::NoIn) {
                    // Out (a down OSD in would make its PGs degraded); under `noup` alone it
                    // is marked in when it boots after the flag is unset.
                    changes.push(Change::Reweight {
                        id,
                        reweight: 0,
                        auto: noup,
                    });
                }
                id
            }
        };
        self.last_beacon_ms.insert(id, now_ms);
        // Reports gathered about its previous incarnation do not count against this one.
        self.reports.remove(&id);
        let epoch = self.commit_any(changes)?;
        Ok(Reply::Booted { id, epoch })
    }

    /// The `pg_temp` entries that keep the acting sets of the PGs `changes` (to be epoch
    /// `epoch`) move to OSDs already up, where the changes reweight an OSD (mark it in or out;
    /// see [`crate::prime`]).
    fn primed(&self, epoch: u64, changes: &[Change]) -> Result<Vec<Change>, MonError> {
        let moves = changes.iter().any(|c| matches!(c, Change::Reweight { .. }));
        if !moves {
            return Ok(Vec::new());
        }
        let mut after = self.map.clone();
        after.apply(&Incremental {
            epoch,
            changes: changes.to_vec(),
        })?;
        Ok(crate::prime::primed_pg_temps(&self.map, &after)?)
    }

    /// [`Monitor::commit`]s `changes` if there are any; the current epoch otherwise (a
    /// request that changes nothing makes no epoch).
    fn commit_any(&mut self, changes: Vec<Change>) -> Result<u64, MonError> {
        match changes.is_empty() {
            true => Ok(self.map.epoch),
            false => self.commit(changes),
        }
    }

    /// Applies `changes` plus re-balanced exceptions as the next epoch.
    fn commit(&mut self, mut changes: Vec<Change>) -> Result<u64, MonError> {
        let epoch = self.map.epoch + 1;
        let mut candidate = self.map.clone();
        candidate.apply(&Incremental {
            epoch,
            changes: changes.clone(),
        })?;
        if self.config.balance {
            let mut exceptions = candidate.placement.exceptions.clone();
            for &pool_id in candidate.placement.pools.keys() {
                let pool = &candidate.placement.pools[&pool_id];
                let topo = Topology::for_pool(&candidate.placement, pool)?;
                if !topo
                    .domain
                    .iter()
                    .any(|&d| d != cairn_clustermap::shape::NOT_ELIGIBLE)
                {
                    continue;
                }
                let previous = if self.map.placement.pools.get(&pool_id) == Some(pool) {
                    Some(placement_of(&self.map.placement, pool_id)?)
                } else {
                    None
                };
                let mut view = candidate.placement.clone();
                view.exceptions = exceptions.clone();
                exceptions = balance(
                    &view,
                    pool_id,
                    previous.as_deref(),
                    BalanceOptions::default(),
                )?
                .exceptions;
            }
            if exceptions != candidate.placement.exceptions {
                changes.push(Change::Exceptions(exceptions.to_text()));
            }
        }
        if self.config.prime_pg_temp {
            changes.extend(self.primed(epoch, &changes)?);
        }
        let inc = Incremental { epoch, changes };
        self.map.apply(&inc)?;
        self.history.push(inc, &self.map)?;
        self.history.trim(self.config.history_epochs)?;
        Ok(epoch)
    }
}
