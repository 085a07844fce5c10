//! The monitor's Prometheus page: what the map says about the cluster, and what the monitor
//! has been asked.
//!
//! An operator watches a Ceph cluster through the manager's exporter: OSDs up and in, pools,
//! PGs whose up set is short of their pool's size, the balance of PGs over OSDs. The monitor
//! holds the map those come from, so it serves them itself: gauges computed from the latest
//! map (placement of every PG included, once per epoch and only when the page is read), and
//! counters of the requests it served, the map saves it made durable and the updates it pushed
//! to subscribers. PG *states* (peering, recovering, clean) live in the OSDs that lead the PGs,
//! and are on their own pages (`cairn_osd_pgs`).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cairn_clustermap::analysis::analyze;
use cairn_clustermap::shape::Topology;
use cairn_metrics::{DescriptorEncoder, Families, Written};
use cairn_msgr::session::ListenerStats;

use cairn_clustermap::quota::PoolUsage;
use cairn_clustermap::ClusterMap;

/// Counters of a running monitor and the latest map, rendered on demand.
#[derive(Default)]
pub struct MonMetrics {
    /// Requests served, by kind: (accepted, refused).
    requests: Mutex<BTreeMap<&'static str, (u64, u64)>>,
    map_saves: AtomicU64,
    map_save_ns: AtomicU64,
    pushed_full: AtomicU64,
    pushed_incremental: AtomicU64,
    subscribers: AtomicU64,
    subscribers_dropped: AtomicU64,
    replies_dropped: AtomicU64,
    /// The listener's counters (connections, sessions, bytes held), once serving.
    messenger: std::sync::OnceLock<Arc<ListenerStats>>,
    /// The latest map, and its figures once some reader asked for them.
    map: Mutex<MapPage>,
    /// Per pool name, its usage as the primaries last reported it.
    pool_usage: Mutex<Vec<(String, PoolUsage)>>,
}

#[derive(Default)]
struct MapPage {
    map: Option<Arc<ClusterMap>>,
    /// The figures of the last map a page showed.
    figures: Option<Arc<MapFigures>>,
}

impl MonMetrics {
    /// Counts one request of `kind` (see [`cairn_proto::mon::Request::kind`]), accepted or
    /// refused with an error.
    pub fn record_request(&self, kind: &'static str, accepted: bool) {
        let mut r = self.requests.lock().unwrap_or_else(|p| p.into_inner());
        let e = r.entry(kind).or_default();
        match accepted {
            true => e.0 += 1,
            false => e.1 += 1,
        }
    }

    /// Counts one durable save of a new epoch that took `took`.
    pub fn record_save(&self, took: Duration) {
        self.map_saves.fetch_add(1, Ordering::Relaxed);
        self.map_save_ns
            .fetch_add(cairn_convert::nanos(took), Ordering::Relaxed);
    }

    /// Counts one map update pushed to a subscriber: a full map or incrementals.
    pub fn record_push(&self, full: bool) {
        match full {
            true => &self.pushed_full,
            false => &self.pushed_incremental,
        }
        .fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a subscriber dropped for falling behind.
    pub fn record_subscriber_dropped(&self) {
        self.subscribers_dropped.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a reply dropped because its session's window was full.
    pub fn record_reply_dropped(&self) {
        self.replies_dropped.fetch_add(1, Ordering::Relaxed);
    }

    /// The listener whose counters the page shows (set once, when the monitor starts serving).
    pub fn set_messenger(&self, stats: Arc<ListenerStats>) {
        let _ = self.messenger.set(stats);
    }

    /// Sessions subscribed to map updates now.
    pub fn set_subscribers(&self, n: usize) {
        self.subscribers.store(n as u64, Ordering::Relaxed);
    }

    /// Every pool's usage as the primaries reported it (called after each usage report).
    pub fn set_pool_usage(&self, rows: Vec<(String, PoolUsage)>) {
        *self.pool_usage.lock().unwrap_or_else(|p| p.into_inner()) = rows;
    }

    /// The map the page describes from now on (called with every new epoch).
    pub fn set_map(&self, map: &ClusterMap) {
        let mut page = self.map.lock().unwrap_or_else(|p| p.into_inner());
        if page.map.as_ref().is_some_and(|m| m.epoch == map.epoch) {
            return;
        }
        page.map = Some(Arc::new(map.clone()));
    }

    /// The whole page, Prometheus text format.
    pub fn render(self: &Arc<Self>) -> String {
        // The map's figures are computed outside the lock, once per epoch: placing every PG of
        // a large map takes a while, and the monitor's core sets the next epoch's map through
        // the same lock.
        let (map, computed) = {
            let page = self.map.lock().unwrap_or_else(|p| p.into_inner());
            (page.map.clone(), page.figures.clone())
        };
        let figures = map.map(|m| match computed {
            Some(f) if f.epoch == m.epoch => f,
            _ => {
                let f = Arc::new(MapFigures::of(&m));
                let mut page = self.map.lock().unwrap_or_else(|p| p.into_inner());
                if page.map.as_ref().is_some_and(|now| now.epoch == m.epoch) {
                    page.figures = Some(f.clone());
                }
                f
            }
        });
        let metrics = Arc::clone(self);
        cairn_metrics::render(move |e| {
            if let Some(f) = &figures {
                f.encode(e)?;
            }
            metrics.encode(e)
        })
    }

    /// Writes the pool usage, the request counters and the messenger's on a page.
    fn encode(&self, e: &mut DescriptorEncoder<'_>) -> Written {
        encode_pool_usage(
            e,
            &self.pool_usage.lock().unwrap_or_else(|p| p.into_inner()),
        )?;
        let requests = self
            .requests
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        e.counters(
            "cairn_mon_requests_total",
            "Requests served by the monitor, by kind and outcome.",
            requests.iter().flat_map(|(&kind, &(ok, refused))| {
                [
                    ([("kind", kind), ("outcome", "accepted")], ok),
                    ([("kind", kind), ("outcome", "refused")], refused),
                ]
            }),
        )?;
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        e.counter(
            "cairn_mon_map_saves_total",
            "New epochs saved durably before they were announced.",
            load(&self.map_saves),
        )?;
        e.counter(
            "cairn_mon_map_save_seconds_total",
            "Time spent saving new epochs durably.",
            load(&self.map_save_ns) as f64 / 1e9,
        )?;
        e.counter(
            "cairn_mon_map_pushes_full_total",
            "Full maps pushed to subscribers (new, or too far behind for incrementals).",
            load(&self.pushed_full),
        )?;
        e.counter(
            "cairn_mon_map_pushes_incremental_total",
            "Incremental updates pushed to subscribers.",
            load(&self.pushed_incremental),
        )?;
        e.gauge(
            "cairn_mon_subscribers",
            "Sessions subscribed to map updates.",
            load(&self.subscribers),
        )?;
        e.counter(
            "cairn_mon_subscribers_dropped_total",
            "Subscribers dropped for falling behind (they come back when they renew).",
            load(&self.subscribers_dropped),
        )?;
        e.counter(
            "cairn_mon_replies_dropped_total",
            "Replies dropped because their session held a full window (the client asks again).",
            load(&self.replies_dropped),
        )?;
        match self.messenger.get() {
            Some(m) => m.encode(e, "mon"),
            None => Ok(()),
        }
    }
}

/// Per pool, its objects and stored bytes as its primaries reported them (Ceph's `ceph df`
/// OBJECTS and STORED).
fn encode_pool_usage(e: &mut DescriptorEncoder<'_>, rows: &[(String, PoolUsage)]) -> Written {
    let per_pool = |f: fn(&PoolUsage) -> u64| {
        rows.iter()
            .map(move |(name, u)| ([("pool", name.as_str())], f(u)))
    };
    e.gauges(
        "cairn_mon_pool_objects",
        "Per pool: client objects, as its PGs' primaries last reported them.",
        per_pool(|u| u.objects),
    )?;
    e.gauges(
        "cairn_mon_pool_stored_bytes",
        "Per pool: logical bytes of its objects (one copy), as last reported.",
        per_pool(|u| u.bytes),
    )?;
    e.gauges(
        "cairn_mon_pool_pgs_reported",
        "Per pool: PGs whose primary reported their usage since the monitor started.",
        per_pool(|u| u64::from(u.pgs_reported)),
    )
}

/// Per-OSD placement counts over every pool.
#[derive(Default, Clone, Copy)]
struct OsdPgs {
    /// PGs whose up set holds it.
    up: u64,
    /// PGs it serves as acting primary.
    primary: u64,
}

/// One pool's figures on the page.
struct PoolFigures {
    name: String,
    size: u32,
    min_size: u32,
    pg_num: u32,
    /// The largest difference between an OSD's PG count and its target (NaN: no topology).
    max_deviation: f64,
    quota_full: bool,
}

/// One OSD's figures on the page.
struct OsdFigures {
    id: String,
    host: String,
    up: bool,
    reweight: f64,
    pgs: OsdPgs,
}

/// What a map implies for the page, computed once per epoch: epoch, OSDs, pools, PGs by what
/// their placement allows, and the spread of PGs over OSDs (seed 002's measure: the balancer
/// keeps it within one PG of the target).
pub struct MapFigures {
    epoch: u64,
    flags: Vec<(String, bool)>,
    pools: Vec<PoolFigures>,
    osds: Vec<OsdFigures>,
    osds_full: u64,
    osds_nearfull: u64,
    pgs: u64,
    undersized: u64,
    below_min: u64,
    pg_temp: u64,
    upmap_pgs: u64,
    placement_errors: u64,
}

impl MapFigures {
    /// Places every PG of `map` and counts what the page shows.
    pub fn of(map: &ClusterMap) -> MapFigures {
        let mut per_osd: BTreeMap<i32, OsdPgs> =
            map.osds.keys().map(|&id| (id, OsdPgs::default())).collect();
        let (mut pgs, mut undersized, mut below_min, mut errors) = (0u64, 0u64, 0u64, 0u64);
        let mut pools = Vec::with_capacity(map.placement.pools.len());
        for pool in map.placement.pools.values() {
            let mut mapper = map.placement.mapper();
            let mut up_sets = Vec::with_capacity(pool.pg_num as usize);
            for pg in pool.pgs() {
                let Ok(m) = mapper.map_pg(pg) else {
                    errors += 1;
                    continue;
                };
                pgs += 1;
                undersized += u64::from(m.up.len() < pool.size as usize);
                below_min += u64::from(m.acting.len() < pool.min_size.max(1) as usize);
                for o in &m.up {
                    per_osd.entry(*o).or_default().up += 1;
                }
                if let Some(p) = m.acting_primary() {
                    per_osd.entry(p).or_default().primary += 1;
                }
                up_sets.push(m.up);
            }
            let max_deviation = Topology::for_pool(&map.placement, pool)
                .map(|t| analyze(&up_sets, &t).osds.max_deviation)
                .unwrap_or(f64::NAN);
            pools.push(PoolFigures {
                name: pool.name.clone(),
                size: pool.size,
                min_size: pool.min_size,
                pg_num: pool.pg_num,
                max_deviation,
                quota_full: map.pool_full(pool.id),
            });
        }
        let count = |f: fn(&cairn_clustermap::OsdEntry) -> bool| {
            map.osds.values().filter(|o| f(o)).count() as u64
        };
        MapFigures {
            epoch: map.epoch,
            flags: cairn_clustermap::MapFlag::ALL
                .iter()
                .map(|&flag| (flag.to_string(), map.has(flag)))
                .collect(),
            pools,
            osds: map
                .osds
                .values()
                .map(|o| OsdFigures {
                    id: o.id.to_string(),
                    host: o.host.clone(),
                    up: o.up,
                    reweight: f64::from(o.reweight) / 65536.0,
                    pgs: per_osd.get(&o.id).copied().unwrap_or_default(),
                })
                .collect(),
            osds_full: count(|o| o.full),
            osds_nearfull: count(|o| o.nearfull),
            pgs,
            undersized,
            below_min,
            pg_temp: map.placement.pg_temp.len() as u64,
            upmap_pgs: map.placement.exceptions.upmap_items.len() as u64,
            placement_errors: errors,
        }
    }

    /// Writes the figures on a page.
    pub fn encode(&self, e: &mut DescriptorEncoder<'_>) -> Written {
        e.gauge("cairn_mon_epoch", "Cluster map epoch.", self.epoch)?;
        e.gauge("cairn_mon_osds", "OSDs in the map.", self.osds.len() as u64)?;
        let osds_with =
            |f: fn(&OsdFigures) -> bool| self.osds.iter().filter(|o| f(o)).count() as u64;
        e.gauge("cairn_mon_osds_up", "OSDs up.", osds_with(|o| o.up))?;
        e.gauge(
            "cairn_mon_osds_in",
            "OSDs in (reweight above 0).",
            osds_with(|o| o.reweight > 0.0),
        )?;
        e.gauge(
            "cairn_mon_osds_full",
            "OSDs past their full ratio (writes to their PGs refused).",
            self.osds_full,
        )?;
        e.gauge(
            "cairn_mon_osds_nearfull",
            "OSDs past their nearfull ratio.",
            self.osds_nearfull,
        )?;
        e.gauges(
            "cairn_mon_flag",
            "Cluster flags (Ceph's `osd set`): 1 while set.",
            self.flags
                .iter()
                .map(|(flag, set)| ([("flag", flag.as_str())], u64::from(*set))),
        )?;
        e.gauge("cairn_mon_pools", "Pools.", self.pools.len() as u64)?;
        let per_pool = |f: fn(&PoolFigures) -> u64| {
            self.pools
                .iter()
                .map(move |p| ([("pool", p.name.as_str())], f(p)))
        };
        e.gauges(
            "cairn_mon_pool_size",
            "Per pool: replicas per object.",
            per_pool(|p| u64::from(p.size)),
        )?;
        e.gauges(
            "cairn_mon_pool_min_size",
            "Per pool: replicas a PG needs to accept writes.",
            per_pool(|p| u64::from(p.min_size)),
        )?;
        e.gauges(
            "cairn_mon_pool_pg_num",
            "Per pool: PGs.",
            per_pool(|p| u64::from(p.pg_num)),
        )?;
        e.gauges(
            "cairn_mon_pool_pg_max_deviation",
            "Per pool: the largest difference between an OSD's PG count and its target (the \
             balancer keeps it within 1).",
            self.pools
                .iter()
                .map(|p| ([("pool", p.name.as_str())], p.max_deviation)),
        )?;
        e.gauges(
            "cairn_mon_pool_quota_full",
            "Per pool: 1 once it reached its quota (writes refused but those that free space).",
            per_pool(|p| u64::from(p.quota_full)),
        )?;
        e.gauge("cairn_mon_pgs", "PGs of every pool.", self.pgs)?;
        e.gauge(
            "cairn_mon_pgs_undersized",
            "PGs whose up set has fewer OSDs than their pool's size (the map cannot place every copy).",
            self.undersized,
        )?;
        e.gauge(
            "cairn_mon_pgs_below_min_size",
            "PGs served by fewer OSDs than their pool's min_size: no writes until OSDs return.",
            self.below_min,
        )?;
        e.gauge(
            "cairn_mon_pg_temp",
            "PGs served by a temporary acting set while their up set fills.",
            self.pg_temp,
        )?;
        e.gauge(
            "cairn_mon_upmap_pgs",
            "PGs moved by the balancer's exception table (pg_upmap_items).",
            self.upmap_pgs,
        )?;
        e.gauge(
            "cairn_mon_placement_errors",
            "PGs the map could not place (a pool whose rule is missing).",
            self.placement_errors,
        )?;
        e.gauges(
            "cairn_mon_osd_up",
            "Per OSD (with its host): 1 when up.",
            self.osds.iter().map(|o| {
                (
                    [("osd", o.id.as_str()), ("host", o.host.as_str())],
                    u64::from(o.up),
                )
            }),
        )?;
        let per_osd = |f: fn(&OsdFigures) -> u64| {
            self.osds
                .iter()
                .map(move |o| ([("osd", o.id.as_str())], f(o)))
        };
        e.gauges(
            "cairn_mon_osd_in",
            "Per OSD: 1 when in (reweight above 0).",
            per_osd(|o| u64::from(o.reweight > 0.0)),
        )?;
        e.gauges(
            "cairn_mon_osd_reweight",
            "Per OSD: in/out reweight, 0 to 1.",
            self.osds
                .iter()
                .map(|o| ([("osd", o.id.as_str())], o.reweight)),
        )?;
        e.gauges(
            "cairn_mon_osd_pgs",
            "Per OSD: PGs whose up set holds it.",
            per_osd(|o| o.pgs.up),
        )?;
        e.gauges(
            "cairn_mon_osd_primary_pgs",
            "Per OSD: PGs it serves as acting primary.",
            per_osd(|o| o.pgs.primary),
        )
    }
}

/// The page's map figures alone, Prometheus text format.
pub fn render_map(map: &ClusterMap) -> String {
    let figures = MapFigures::of(map);
    cairn_metrics::render(move |e| figures.encode(e))
}
