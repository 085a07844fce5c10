//! State shared by every task of one OSD, and small read-only views of the current map.

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::{Arc, Mutex};

use cairn_client::mon::MonClient;
use cairn_clustermap::ClusterMap;
use cairn_clustermap::{MappingCache, PgId, PgMapping};
use cairn_store::{Store, StoreStats};
use tokio::sync::{oneshot, watch};
use tokio_util::sync::CancellationToken;

use crate::config::OsdConfig;
use crate::metrics::Metrics;
use crate::past::PastMaps;
use crate::peers::Peers;
use crate::pgs::PgTable;
use crate::sched::OpScheduler;

/// Every this many tracked tasks, the finished ones are dropped from the list (sessions and
/// peering tasks come and go for the OSD's whole life).
const TRACKED_TASKS_PRUNE_AT: usize = 256;

/// Everything the OSD's tasks share.
pub struct Shared {
    /// This OSD's id.
    pub id: i32,
    /// Its object store.
    pub store: Store,
    /// Its request scheduler.
    pub sched: Arc<OpScheduler>,
    /// The latest cluster map.
    pub map: watch::Receiver<Option<ClusterMap>>,
    /// The monitor connection (failure reports, beacons).
    pub mon: Arc<MonClient>,
    /// The PGs.
    pub pgs: PgTable,
    /// Client writes per object, in the order they were received (see [`crate::turns`]).
    pub write_turns: Arc<crate::turns::WriteTurns>,
    /// Maps of past epochs, for PGs' past intervals.
    pub past_maps: PastMaps,
    /// Connections to other OSDs.
    pub peers: Peers,
    /// Configuration.
    pub cfg: OsdConfig,
    /// Counters.
    pub metrics: Metrics,
    /// The store's counters as of the last refresh (every second): the metrics page is
    /// rendered synchronously and the store's are behind its lock.
    pub store_stats: Mutex<StoreStats>,
    /// The size of the pieces recovery moves objects in: the configured one, else by the
    /// kind of this OSD's device (see [`crate::config::recovery_chunk_bytes_for`]).
    pub recovery_chunk_bytes: u64,
    /// Ceph's throttles on background recovery (`osd_max_backfills` and the like).
    pub throttle: Arc<crate::throttle::RecoveryThrottle>,
    /// This OSD's pg_temp wants, batched into monitor requests.
    pub pg_temps: crate::pgtemp::PgTempBatch,
    /// The fault-injecting device under the store, when the OSD runs with `fault_injection`
    /// (see `failstop::inject`).
    pub faults: Option<Arc<cairn_blockdev::FaultDevice>>,
    /// The cache device under the store, when the OSD runs on a cached HDD.
    pub cache: Option<Arc<cairn_cache::CacheDevice>>,
    /// Its listener's counters (connections, sessions, bytes held), set once it listens.
    pub messenger: std::sync::OnceLock<Arc<cairn_msgr::session::ListenerStats>>,
    /// Why this OSD must stop although its store has not failed (see [`Shared::fail_stop`]).
    fault: std::sync::OnceLock<String>,
    tasks: Mutex<Vec<tokio::task::AbortHandle>>,
    /// Cancelled when the OSD stops: every task spawned through [`Shared::spawn`] ends at its
    /// next await, so that a stopped OSD lets go of its store at once.
    stopping: CancellationToken,
    mappings: Mutex<MappingCache>,
    /// Dropped with the rest of this state, after the store (fields drop in order): its
    /// receiver learns that the store is closed.
    _closed: oneshot::Sender<()>,
}

impl Shared {
    /// Builds the shared state.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        id: i32,
        store: Store,
        sched: Arc<OpScheduler>,
        map: watch::Receiver<Option<ClusterMap>>,
        mon: Arc<MonClient>,
        cfg: OsdConfig,
        closed: oneshot::Sender<()>,
    ) -> Shared {
        let fast_beside = cfg.db.is_some() || cfg.cache.is_some();
        let device = match (store.device().properties().rotational, fast_beside) {
            (true, false) => crate::throttle::DeviceKind::Hdd,
            (true, true) => crate::throttle::DeviceKind::Hybrid,
            (false, _) => crate::throttle::DeviceKind::Ssd,
        };
        let recovery_chunk_bytes =
            crate::config::recovery_chunk_bytes_for(cfg.recovery_chunk_bytes, device);
        let pg_temps = crate::pgtemp::PgTempBatch::new(mon.clone());
        let throttle = Arc::new(crate::throttle::RecoveryThrottle::new(
            device,
            store.backlog_gauge(),
        ));
        throttle.follow_policy(&sched.policy());
        Shared {
            id,
            recovery_chunk_bytes,
            throttle,
            store,
            sched,
            map,
            mon,
            pgs: PgTable::default(),
            write_turns: Arc::default(),
            past_maps: PastMaps::default(),
            peers: Peers::new(id),
            cfg,
            metrics: Metrics::default(),
            store_stats: Mutex::new(StoreStats::default()),
            pg_temps,
            messenger: std::sync::OnceLock::new(),
            faults: None,
            cache: None,
            fault: std::sync::OnceLock::new(),
            tasks: Mutex::new(Vec::new()),
            stopping: CancellationToken::new(),
            mappings: Mutex::new(MappingCache::default()),
            _closed: closed,
        }
    }

    /// Stops this OSD as a failed store would (`failstop::watch` sees it): for a state its
    /// PGs cannot go on from, such as a copy's log left with a hole. The first cause is kept.
    pub fn fail_stop(&self, why: String) {
        tracing::error!(osd = self.id, cause = %why, "fail-stop");
        let _ = self.fault.set(why);
    }

    /// Why [`Shared::fail_stop`] was called, if it was.
    pub fn fault(&self) -> Option<String> {
        self.fault.get().cloned()
    }

    /// Keeps `handle` to abort when the OSD stops; aborts it at once when the OSD is already
    /// stopping (a task spawned while [`Shared::stop_tasks`] ran would otherwise outlive the
    /// stop and keep the store open). Finished tasks are forgotten as the list grows.
    pub fn track(&self, handle: tokio::task::JoinHandle<()>) {
        let mut tasks = self.tasks.lock().unwrap_or_else(|p| p.into_inner());
        // `stop_tasks` cancels before it drains under this lock: a task tracked after the
        // drain sees the cancellation here.
        if self.stopping.is_cancelled() {
            handle.abort();
            return;
        }
        if tasks.len() >= TRACKED_TASKS_PRUNE_AT
            && tasks.len().is_multiple_of(TRACKED_TASKS_PRUNE_AT)
        {
            tasks.retain(|t| !t.is_finished());
        }
        tasks.push(handle.abort_handle());
    }

    /// Spawns `work` as a task that ends early, with `None`, when the OSD stops: for work that
    /// holds the OSD's state (its store) and may wait long (a peer's answer, a scheduler slot).
    pub fn spawn<F>(&self, work: F) -> tokio::task::JoinHandle<Option<F::Output>>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        tokio::spawn(self.stopping.clone().run_until_cancelled_owned(work))
    }

    /// Resolves once the OSD is stopping.
    pub async fn stopped(&self) {
        self.stopping.cancelled().await
    }

    /// True once the OSD is stopping (see [`Shared::stop_tasks`]).
    pub fn is_stopping(&self) -> bool {
        self.stopping.is_cancelled()
    }

    /// Ends every task spawned through [`Shared::spawn`] and aborts every tracked task.
    pub fn stop_tasks(&self) {
        self.stopping.cancel();
        for t in self
            .tasks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain(..)
        {
            t.abort();
        }
    }

    /// The current map epoch (0 before the first map).
    pub fn epoch(&self) -> u64 {
        self.map.borrow().as_ref().map_or(0, |m| m.epoch)
    }

    /// Whether this OSD is in the PG's up or acting set in the current map (it serves the PG,
    /// or its copy is being filled); None if the map has no such pool (or no map yet).
    pub fn is_member(&self, pg: PgId) -> Option<bool> {
        self.with_mapping(pg, |_, m| {
            m.up.contains(&self.id) || m.acting.contains(&self.id)
        })
    }

    /// Whether this OSD is first in the PG's acting set in the current map (it serves the
    /// PG's I/O); None if the map has no such pool (or no map yet). Asked on every client op.
    pub fn is_acting_primary(&self, pg: PgId) -> Option<bool> {
        self.with_mapping(pg, |_, m| m.acting_primary() == Some(self.id))
    }

    /// `f` of the current map and the PG's mapping there, looked up in the per-epoch cache
    /// (CRUSH runs once per PG and epoch); None without a map or without the PG's pool.
    fn with_mapping<T>(&self, pg: PgId, f: impl FnOnce(&ClusterMap, &PgMapping) -> T) -> Option<T> {
        let guard = self.map.borrow();
        let map = guard.as_ref()?;
        let mut cache = self.mappings.lock().unwrap_or_else(|p| p.into_inner());
        let m = cache.get(map.epoch, &map.placement, pg)?;
        Some(f(map, m))
    }

    /// An OSD's address in the current map.
    pub fn addr_of(&self, osd: i32) -> Option<String> {
        self.map
            .borrow()
            .as_ref()
            .and_then(|m| m.osds.get(&osd).map(|e| e.addr.clone()))
    }

    /// Ids of the OSDs up in the current map.
    pub fn up_osds(&self) -> BTreeSet<i32> {
        self.map.borrow().as_ref().map_or_else(BTreeSet::new, |m| {
            m.osds.values().filter(|o| o.up).map(|o| o.id).collect()
        })
    }

    /// Whether the current map has the cluster flag `flag` set.
    pub fn flag_set(&self, flag: cairn_clustermap::MapFlag) -> bool {
        self.map.borrow().as_ref().is_some_and(|m| m.has(flag))
    }

    /// `osd`'s incarnation (its up_from) in the current map, if it is up there.
    pub fn incarnation_of(&self, osd: i32) -> Option<u64> {
        self.map.borrow().as_ref().and_then(|m| {
            m.osds
                .get(&osd)
                .filter(|o| o.up)
                .map(|o| o.up_from.unwrap_or(0))
        })
    }

    /// Returns once a map this OSD has no longer shows `osd` up in incarnation `up_from`: down,
    /// removed, or booted again (maybe between two maps this OSD applied). An answer the
    /// process was asked for will not come, so whoever waits for one need not wait out its
    /// timeout.
    pub async fn until_gone(&self, osd: i32, up_from: u64) {
        let mut maps = self.map.clone();
        loop {
            let gone = maps.borrow_and_update().as_ref().is_some_and(|m| {
                !m.osds
                    .get(&osd)
                    .is_some_and(|o| o.up && o.up_from.unwrap_or(0) == up_from)
            });
            if gone {
                return;
            }
            if maps.changed().await.is_err() {
                // No more maps: the OSD is stopping; the caller's own timeout decides.
                std::future::pending::<()>().await;
            }
        }
    }

    /// The other up OSDs: each one's address and incarnation.
    pub fn up_peers(&self) -> Vec<UpPeer> {
        self.map.borrow().as_ref().map_or_else(Vec::new, |m| {
            m.osds
                .values()
                .filter(|o| o.up && o.id != self.id)
                .map(|o| UpPeer {
                    id: o.id,
                    addr: o.addr.clone(),
                    up_from: o.up_from.unwrap_or(0),
                })
                .collect()
        })
    }
}

/// One incarnation of another up OSD, as this OSD's map has it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpPeer {
    /// OSD id.
    pub id: i32,
    /// Its address.
    pub addr: String,
    /// The epoch it booted at (its up_from; 0 when the map did not keep it).
    pub up_from: u64,
}
