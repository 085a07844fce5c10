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
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cairn_clustermap::analysis::analyze;
use cairn_clustermap::shape::Topology;
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
    /// The latest map, and its rendered gauges once some reader asked for them.
    map: Mutex<MapPage>,
    /// Per pool name, its usage as the primaries last reported it.
    pool_usage: Mutex<Vec<(String, PoolUsage)>>,
}

#[derive(Default)]
struct MapPage {
    map: Option<Arc<ClusterMap>>,
    /// Epoch and text of the last rendering.
    rendered: Option<(u64, Arc<String>)>,
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
            .fetch_add(took.as_nanos() as u64, Ordering::Relaxed);
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
    pub fn render(&self) -> String {
        // Rendered outside the lock: placing every PG of a large map takes a while, and the
        // monitor's core sets the next epoch's map through the same lock.
        let (map, rendered) = {
            let page = self.map.lock().unwrap_or_else(|p| p.into_inner());
            (page.map.clone(), page.rendered.clone())
        };
        let map_text = map.map(|m| match rendered {
            Some((epoch, text)) if epoch == m.epoch => text,
            _ => {
                let text = Arc::new(render_map(&m));
                let mut page = self.map.lock().unwrap_or_else(|p| p.into_inner());
                if page.map.as_ref().is_some_and(|now| now.epoch == m.epoch) {
                    page.rendered = Some((m.epoch, text.clone()));
                }
                text
            }
        });
        let mut out = map_text.map(|t| t.to_string()).unwrap_or_default();
        render_pool_usage(
            &mut out,
            &self.pool_usage.lock().unwrap_or_else(|p| p.into_inner()),
        );
        family(
            &mut out,
            "requests_total",
            "counter",
            "Requests served by the monitor, by kind and outcome.",
        );
        for (kind, (ok, refused)) in self
            .requests
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
        {
            let _ = writeln!(
                out,
                "cairn_mon_requests_total{{kind=\"{kind}\",outcome=\"accepted\"}} {ok}"
            );
            let _ = writeln!(
                out,
                "cairn_mon_requests_total{{kind=\"{kind}\",outcome=\"refused\"}} {refused}"
            );
        }
        let counters = [
            (
                "map_saves_total",
                "counter",
                "New epochs saved durably before they were announced.",
                self.map_saves.load(Ordering::Relaxed) as f64,
            ),
            (
                "map_save_seconds_total",
                "counter",
                "Time spent saving new epochs durably.",
                self.map_save_ns.load(Ordering::Relaxed) as f64 / 1e9,
            ),
            (
                "map_pushes_full_total",
                "counter",
                "Full maps pushed to subscribers (new, or too far behind for incrementals).",
                self.pushed_full.load(Ordering::Relaxed) as f64,
            ),
            (
                "map_pushes_incremental_total",
                "counter",
                "Incremental updates pushed to subscribers.",
                self.pushed_incremental.load(Ordering::Relaxed) as f64,
            ),
            (
                "subscribers",
                "gauge",
                "Sessions subscribed to map updates.",
                self.subscribers.load(Ordering::Relaxed) as f64,
            ),
            (
                "subscribers_dropped_total",
                "counter",
                "Subscribers dropped for falling behind (they come back when they renew).",
                self.subscribers_dropped.load(Ordering::Relaxed) as f64,
            ),
            (
                "replies_dropped_total",
                "counter",
                "Replies dropped because their session held a full window (the client asks again).",
                self.replies_dropped.load(Ordering::Relaxed) as f64,
            ),
        ];
        for (name, kind, help, value) in counters {
            family(&mut out, name, kind, help);
            let _ = writeln!(out, "cairn_mon_{name} {value}");
        }
        if let Some(m) = self.messenger.get() {
            out.push_str(&m.render("mon"));
        }
        out
    }
}

/// Writes a metric family's HELP and TYPE lines.
fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP cairn_mon_{name} {help}");
    let _ = writeln!(out, "# TYPE cairn_mon_{name} {kind}");
}

/// Writes a gauge family with one sample per label set.
fn labeled(out: &mut String, name: &str, help: &str, rows: &[(String, f64)]) {
    family(out, name, "gauge", help);
    for (labels, value) in rows {
        let _ = writeln!(out, "cairn_mon_{name}{{{labels}}} {value}");
    }
}

/// Per pool, its objects and stored bytes as its primaries reported them (Ceph's `ceph df`
/// OBJECTS and STORED).
fn render_pool_usage(out: &mut String, rows: &[(String, PoolUsage)]) {
    let rows_of = |f: fn(&PoolUsage) -> f64| -> Vec<(String, f64)> {
        rows.iter()
            .map(|(name, u)| (format!("pool=\"{}\"", label(name)), f(u)))
            .collect()
    };
    labeled(
        out,
        "pool_objects",
        "Per pool: client objects, as its PGs' primaries last reported them.",
        &rows_of(|u| u.objects as f64),
    );
    labeled(
        out,
        "pool_stored_bytes",
        "Per pool: logical bytes of its objects (one copy), as last reported.",
        &rows_of(|u| u.bytes as f64),
    );
    labeled(
        out,
        "pool_pgs_reported",
        "Per pool: PGs whose primary reported their usage since the monitor started.",
        &rows_of(|u| f64::from(u.pgs_reported)),
    );
}

/// A label value as the text format wants it (backslash, quote and newline escaped).
fn label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Per-OSD placement counts over every pool.
#[derive(Default, Clone, Copy)]
struct OsdPgs {
    /// PGs whose up set holds it.
    up: u64,
    /// PGs it serves as acting primary.
    primary: u64,
}

/// The gauges `map` implies: epoch, OSDs, pools, PGs by what their placement allows, and the
/// spread of PGs over OSDs (seed 002's measure: the balancer keeps it within one PG of the
/// target).
pub fn render_map(map: &ClusterMap) -> String {
    let mut out = String::new();
    let gauge = |out: &mut String, name: &str, help: &str, value: f64| {
        family(out, name, "gauge", help);
        let _ = writeln!(out, "cairn_mon_{name} {value}");
    };
    gauge(&mut out, "epoch", "Cluster map epoch.", map.epoch as f64);
    let osds = map.osds.values();
    let count =
        |f: &dyn Fn(&cairn_clustermap::OsdEntry) -> bool| osds.clone().filter(|o| f(o)).count();
    gauge(&mut out, "osds", "OSDs in the map.", map.osds.len() as f64);
    gauge(&mut out, "osds_up", "OSDs up.", count(&|o| o.up) as f64);
    gauge(
        &mut out,
        "osds_in",
        "OSDs in (reweight above 0).",
        count(&|o| o.reweight > 0) as f64,
    );
    gauge(
        &mut out,
        "osds_full",
        "OSDs past their full ratio (writes to their PGs refused).",
        count(&|o| o.full) as f64,
    );
    gauge(
        &mut out,
        "osds_nearfull",
        "OSDs past their nearfull ratio.",
        count(&|o| o.nearfull) as f64,
    );
    family(
        &mut out,
        "flag",
        "gauge",
        "Cluster flags (Ceph's `osd set`): 1 while set.",
    );
    for flag in cairn_clustermap::MapFlag::ALL {
        let set = u8::from(map.has(flag));
        let _ = writeln!(out, "cairn_mon_flag{{flag=\"{flag}\"}} {set}");
    }

    let mut per_osd: BTreeMap<i32, OsdPgs> =
        map.osds.keys().map(|&id| (id, OsdPgs::default())).collect();
    let (mut pgs, mut undersized, mut below_min, mut errors) = (0u64, 0u64, 0u64, 0u64);
    let mut pool_rows: [Vec<(String, f64)>; 5] = Default::default();
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
        let deviation = Topology::for_pool(&map.placement, pool)
            .map(|t| analyze(&up_sets, &t).osds.max_deviation)
            .unwrap_or(f64::NAN);
        let labels = format!("pool=\"{}\"", label(&pool.name));
        let values = [
            f64::from(pool.size),
            f64::from(pool.min_size),
            f64::from(pool.pg_num),
            deviation,
            f64::from(u8::from(map.pool_full(pool.id))),
        ];
        for (rows, v) in pool_rows.iter_mut().zip(values) {
            rows.push((labels.clone(), v));
        }
    }
    gauge(
        &mut out,
        "pools",
        "Pools.",
        map.placement.pools.len() as f64,
    );
    let [sizes, min_sizes, pg_nums, deviations, quota_full] = pool_rows;
    labeled(
        &mut out,
        "pool_size",
        "Per pool: replicas per object.",
        &sizes,
    );
    labeled(
        &mut out,
        "pool_min_size",
        "Per pool: replicas a PG needs to accept writes.",
        &min_sizes,
    );
    labeled(&mut out, "pool_pg_num", "Per pool: PGs.", &pg_nums);
    labeled(
        &mut out,
        "pool_pg_max_deviation",
        "Per pool: the largest difference between an OSD's PG count and its target (the \
         balancer keeps it within 1).",
        &deviations,
    );
    labeled(
        &mut out,
        "pool_quota_full",
        "Per pool: 1 once it reached its quota (writes refused but those that free space).",
        &quota_full,
    );
    gauge(&mut out, "pgs", "PGs of every pool.", pgs as f64);
    gauge(
        &mut out,
        "pgs_undersized",
        "PGs whose up set has fewer OSDs than their pool's size (the map cannot place every copy).",
        undersized as f64,
    );
    gauge(
        &mut out,
        "pgs_below_min_size",
        "PGs served by fewer OSDs than their pool's min_size: no writes until OSDs return.",
        below_min as f64,
    );
    gauge(
        &mut out,
        "pg_temp",
        "PGs served by a temporary acting set while their up set fills.",
        map.placement.pg_temp.len() as f64,
    );
    gauge(
        &mut out,
        "upmap_pgs",
        "PGs moved by the balancer's exception table (pg_upmap_items).",
        map.placement.exceptions.upmap_items.len() as f64,
    );
    gauge(
        &mut out,
        "placement_errors",
        "PGs the map could not place (a pool whose rule is missing).",
        errors as f64,
    );
    let osd_rows = |f: &dyn Fn(&cairn_clustermap::OsdEntry, OsdPgs) -> f64| -> Vec<(String, f64)> {
        map.osds
            .values()
            .map(|o| {
                let c = per_osd.get(&o.id).copied().unwrap_or_default();
                (format!("osd=\"{}\"", o.id), f(o, c))
            })
            .collect()
    };
    let up: Vec<(String, f64)> = map
        .osds
        .values()
        .map(|o| {
            let labels = format!("osd=\"{}\",host=\"{}\"", o.id, label(&o.host));
            (labels, f64::from(u8::from(o.up)))
        })
        .collect();
    labeled(
        &mut out,
        "osd_up",
        "Per OSD (with its host): 1 when up.",
        &up,
    );
    labeled(
        &mut out,
        "osd_in",
        "Per OSD: 1 when in (reweight above 0).",
        &osd_rows(&|o, _| f64::from(u8::from(o.reweight > 0))),
    );
    labeled(
        &mut out,
        "osd_reweight",
        "Per OSD: in/out reweight, 0 to 1.",
        &osd_rows(&|o, _| f64::from(o.reweight) / 65536.0),
    );
    labeled(
        &mut out,
        "osd_pgs",
        "Per OSD: PGs whose up set holds it.",
        &osd_rows(&|_, c| c.up as f64),
    );
    labeled(
        &mut out,
        "osd_primary_pgs",
        "Per OSD: PGs it serves as acting primary.",
        &osd_rows(&|_, c| c.primary as f64),
    );
    out
}
