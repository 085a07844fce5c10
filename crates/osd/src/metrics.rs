//! The OSD's counters, rendered in Prometheus text format: client ops by kind (count, errors,
//! bytes, latency histogram), recovery traffic, PGs by state, and the scheduler's per-class
//! counters. Recording is a short critical section; rendering happens only on a scrape.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use std::sync::atomic::{AtomicU64, Ordering};

use cairn_metrics::{DescriptorEncoder, Families, HistogramSample, Written};
use cairn_proto::peer::Urgency;

/// Upper bounds of the latency histogram buckets, in seconds.
const BUCKETS_S: [f64; 14] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
];

#[derive(Default, Clone)]
struct OpStats {
    count: u64,
    errors: u64,
    bytes: u64,
    sum_s: f64,
    buckets: [u64; BUCKETS_S.len()],
}

/// A Prometheus counter family over the per-op stats: name, help text, the value.
type CounterFamily = (&'static str, &'static str, fn(&OpStats) -> u64);

/// What one recovery step did, from this OSD's side; each is one request through its scheduler.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum RecoveryKind {
    /// As primary: an object fetched from another copy and installed here.
    Pull,
    /// As primary: an object read here and sent to another copy.
    Push,
    /// An object read here for another OSD's pull (absent objects included).
    ServePull,
    /// A page of this OSD's object names listed for another OSD's backfill.
    ServeList,
    /// An object another OSD pushed, installed here.
    ReceivePush,
}

impl RecoveryKind {
    /// Label value in the metrics.
    pub fn label(self) -> &'static str {
        match self {
            RecoveryKind::Pull => "pull",
            RecoveryKind::Push => "push",
            RecoveryKind::ServePull => "serve_pull",
            RecoveryKind::ServeList => "serve_list",
            RecoveryKind::ReceivePush => "receive_push",
        }
    }
}

/// Counters of one OSD.
#[derive(Default)]
pub struct Metrics {
    ops: Mutex<BTreeMap<&'static str, OpStats>>,
    /// Objects and bytes moved by recovery, by kind.
    recovery: Mutex<BTreeMap<RecoveryKind, (u64, u64)>>,
    /// Recovery steps client I/O waited on (run in the client class).
    blocking_recovery_steps: AtomicU64,
    /// Objects (each once per copy it reached) and bytes this OSD recovered as a primary.
    recovered_objects: AtomicU64,
    recovered_bytes: AtomicU64,
    /// PGs peered again in their interval because a write left their copies disagreeing.
    repeers: AtomicU64,
    /// Client ops that touched an object a copy lacked and recovered it first.
    op_recoveries: AtomicU64,
    /// Temporary acting sets asked for, so that PGs serve while their up sets are filled.
    remaps: AtomicU64,
    history_gaps: AtomicU64,
    up_thru_requests: AtomicU64,
    /// Resent writes answered from the PG log (their first attempt was applied).
    dup_writes: AtomicU64,
    /// Client writes queued while another write of their PG was still committing.
    pipelined_writes: AtomicU64,
    /// Client writes forwarded to, and committed by, a copy being filled in the background.
    fill_writes_forwarded: AtomicU64,
    /// Objects a fill's hand-back pushed with the PG's writes held.
    fill_hand_back_pushes: AtomicU64,
    /// Objects a fill pushed with that object's writes held.
    fill_held_pushes: AtomicU64,
    /// Client reads that found this primary's copy damaged: repaired from another copy, and
    /// not repairable (every copy damaged or unreachable).
    read_repairs: AtomicU64,
    read_repairs_failed: AtomicU64,
    /// Scrubs finished, objects compared, inconsistent objects found and repaired.
    scrubs: AtomicU64,
    deep_scrubs: AtomicU64,
    scrub_objects: AtomicU64,
    scrub_inconsistent: AtomicU64,
    scrub_repaired: AtomicU64,
    /// Writes and read repairs that waited for a scrub chunk's fence.
    scrub_fenced: AtomicU64,
    /// Stray PG copies deleted, and their objects.
    strays_deleted: AtomicU64,
    stray_objects_deleted: AtomicU64,
}

impl Metrics {
    /// Records one finished client op.
    pub fn record_op(&self, kind: &'static str, bytes: u64, latency: Duration, ok: bool) {
        let secs = latency.as_secs_f64();
        let mut ops = self.ops.lock().unwrap_or_else(|p| p.into_inner());
        let st = ops.entry(kind).or_default();
        st.count += 1;
        st.errors += u64::from(!ok);
        st.bytes += bytes;
        st.sum_s += secs;
        if let Some(i) = BUCKETS_S.iter().position(|&b| secs <= b) {
            st.buckets[i] += 1;
        }
    }

    /// Records one object moved by recovery, in a step of `urgency`.
    pub fn record_recovery(&self, kind: RecoveryKind, urgency: Urgency, bytes: u64) {
        let mut r = self.recovery.lock().unwrap_or_else(|p| p.into_inner());
        let e = r.entry(kind).or_default();
        e.0 += 1;
        e.1 += bytes;
        if urgency == Urgency::Blocking {
            self.blocking_recovery_steps.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Records a piece this OSD, as a PG's primary, pushed to another copy or pulled to itself;
    /// `first` when it is the object's first piece, so each object counts once per copy.
    pub fn record_recovered(&self, first: bool, bytes: u64) {
        use std::sync::atomic::Ordering::Relaxed;
        self.recovered_objects.fetch_add(u64::from(first), Relaxed);
        self.recovered_bytes.fetch_add(bytes, Relaxed);
    }

    /// Objects and bytes this OSD has recovered as a PG's primary (see `record_recovered`):
    /// the cluster's recovery progress is the sum over its OSDs.
    pub fn recovered_as_primary(&self) -> (u64, u64) {
        use std::sync::atomic::Ordering::Relaxed;
        (
            self.recovered_objects.load(Relaxed),
            self.recovered_bytes.load(Relaxed),
        )
    }

    /// Records that a PG peers again in its interval (see `peering::repeer`).
    pub fn record_repeer(&self) {
        self.repeers.fetch_add(1, Ordering::Relaxed);
    }

    /// Records a client op that recovers the object it touches before it runs (see
    /// `recovery::ready_for_op`).
    pub fn record_op_recovery(&self) {
        self.op_recoveries.fetch_add(1, Ordering::Relaxed);
    }

    /// Records a temporary acting set asked for (see `remap`).
    pub fn record_remap(&self) {
        self.remaps.fetch_add(1, Ordering::Relaxed);
    }

    /// Records a peering whose past intervals could not all be computed: the monitor's history
    /// no longer reaches back to the PG's last activation.
    pub fn record_history_gap(&self) {
        self.history_gaps.fetch_add(1, Ordering::Relaxed);
    }

    /// Records an up_thru request sent to the monitor before a PG went active.
    pub fn record_up_thru_request(&self) {
        self.up_thru_requests.fetch_add(1, Ordering::Relaxed);
    }

    /// Records a client write queued while another write of its PG was still committing.
    pub fn record_pipelined_write(&self) {
        self.pipelined_writes.fetch_add(1, Ordering::Relaxed);
    }

    /// Records a client write forwarded to, and committed by, a copy being filled.
    pub fn record_fill_write_forwarded(&self) {
        self.fill_writes_forwarded.fetch_add(1, Ordering::Relaxed);
    }

    /// Records `objects` pushed by a fill's hand-back with the PG's writes held.
    pub fn record_fill_hand_back_pushes(&self, objects: u64) {
        self.fill_hand_back_pushes
            .fetch_add(objects, Ordering::Relaxed);
    }

    /// Records an object pushed by a fill with its writes held.
    pub fn record_fill_held_push(&self) {
        self.fill_held_pushes.fetch_add(1, Ordering::Relaxed);
    }

    /// Records a resent write answered from the PG log instead of being applied again.
    pub fn record_dup_write(&self) {
        self.dup_writes.fetch_add(1, Ordering::Relaxed);
    }

    /// Records a read repair (see `repair`): `repaired` when a good copy replaced the damaged
    /// one here.
    pub fn record_read_repair(&self, repaired: bool) {
        let counter = if repaired {
            &self.read_repairs
        } else {
            &self.read_repairs_failed
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a write or read repair that waited for a scrub chunk's fence over its object.
    pub fn record_scrub_fenced(&self) {
        self.scrub_fenced.fetch_add(1, Ordering::Relaxed);
    }

    /// Records a finished scrub of a PG this OSD leads (deep or not): the objects it compared,
    /// and how many it found inconsistent and repaired.
    pub fn record_scrub(&self, deep: bool, objects: u64, inconsistent: usize, repaired: usize) {
        use std::sync::atomic::Ordering::Relaxed;
        let kind = if deep {
            &self.deep_scrubs
        } else {
            &self.scrubs
        };
        kind.fetch_add(1, Relaxed);
        self.scrub_objects.fetch_add(objects, Relaxed);
        self.scrub_inconsistent
            .fetch_add(inconsistent as u64, Relaxed);
        self.scrub_repaired.fetch_add(repaired as u64, Relaxed);
    }

    /// Records a deleted stray PG copy of `objects` objects.
    pub fn record_stray_deleted(&self, objects: u64) {
        use std::sync::atomic::Ordering::Relaxed;
        self.strays_deleted.fetch_add(1, Relaxed);
        self.stray_objects_deleted.fetch_add(objects, Relaxed);
    }

    /// Total client ops so far (all kinds).
    pub fn total_ops(&self) -> u64 {
        self.ops
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .map(|s| s.count)
            .sum()
    }

    /// Total bytes carried by client ops so far.
    pub fn total_bytes(&self) -> u64 {
        self.ops
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .map(|s| s.bytes)
            .sum()
    }

    /// Writes the op, recovery, peering and scrub counters on a page.
    pub fn encode(&self, e: &mut DescriptorEncoder<'_>, osd: &str) -> Written {
        use std::sync::atomic::Ordering::Relaxed;
        let ops = self.ops.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let families: [CounterFamily; 3] = [
            (
                "cairn_osd_ops_total",
                "Client operations served as primary.",
                |s| s.count,
            ),
            (
                "cairn_osd_op_errors_total",
                "Client operations that failed.",
                |s| s.errors,
            ),
            (
                "cairn_osd_op_bytes_total",
                "Bytes carried by client operations.",
                |s| s.bytes,
            ),
        ];
        for (name, help, value) in families {
            e.counters(
                name,
                help,
                ops.iter()
                    .map(|(&op, st)| ([("osd", osd), ("op", op)], value(st))),
            )?;
        }
        e.histograms(
            "cairn_osd_op_latency_seconds",
            "Client operation latency.",
            ops.iter().map(|(&op, st)| {
                (
                    [("osd", osd), ("op", op)],
                    HistogramSample {
                        bounds: &BUCKETS_S,
                        counts: &st.buckets,
                        count: st.count,
                        sum: st.sum_s,
                    },
                )
            }),
        )?;
        let by_kind = self
            .recovery
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let (objs, bytes) = by_kind
            .values()
            .fold((0, 0), |(o, b), &(o2, b2)| (o + o2, b + b2));
        let at = [("osd", osd)];
        let (recovered, recovered_bytes) = self.recovered_as_primary();
        let single: [(&str, &str, u64); 4] = [
            (
                "cairn_osd_recovery_objects_total",
                "Objects moved by recovery.",
                objs,
            ),
            (
                "cairn_osd_recovery_bytes_total",
                "Bytes moved by recovery.",
                bytes,
            ),
            (
                "cairn_osd_recovered_objects_total",
                "Objects this OSD, as a PG's primary, pushed to another copy or pulled to itself \
                 (once per copy).",
                recovered,
            ),
            (
                "cairn_osd_recovered_bytes_total",
                "Bytes of those objects.",
                recovered_bytes,
            ),
        ];
        for (name, help, value) in single {
            e.counters(name, help, [(at, value)])?;
        }
        e.counters(
            "cairn_osd_recovery_steps_total",
            "Recovery steps by kind (each one request through this OSD's scheduler).",
            by_kind
                .iter()
                .map(|(kind, &(n, _))| ([("osd", osd), ("kind", kind.label())], n)),
        )?;
        let single: [(&str, &str, &AtomicU64); 13] = [
            (
                "cairn_osd_op_recoveries_total",
                "Client ops that touched an object a copy of its PG lacked after activation, \
                 and recovered it first at the client's class.",
                &self.op_recoveries,
            ),
            (
                "cairn_osd_recovery_blocking_steps_total",
                "Recovery steps (of all kinds) that client I/O waited on (a PG recovering before \
                 it activates, a read's repair), run as client-class requests; the others are \
                 recovery-class.",
                &self.blocking_recovery_steps,
            ),
            (
                "cairn_osd_pg_repeers_total",
                "PGs peered again in their interval (a write reached some copies only, a resend \
                 found its first attempt not on every copy, a copy left out as too full is tried \
                 again).",
                &self.repeers,
            ),
            (
                "cairn_osd_pg_remaps_total",
                "Temporary acting sets asked for, so that PGs serve while their up sets are \
                 filled in the background.",
                &self.remaps,
            ),
            (
                "cairn_osd_peering_history_gaps_total",
                "Peerings whose past intervals reach back past the monitor's history (earlier \
                 intervals not checked).",
                &self.history_gaps,
            ),
            (
                "cairn_osd_up_thru_requests_total",
                "up_thru requests sent to the monitor before PGs went active.",
                &self.up_thru_requests,
            ),
            (
                "cairn_osd_strays_deleted_total",
                "Stray PG copies deleted (PG clean elsewhere, or its pool removed).",
                &self.strays_deleted,
            ),
            (
                "cairn_osd_stray_objects_deleted_total",
                "Objects of deleted stray PG copies.",
                &self.stray_objects_deleted,
            ),
            (
                "cairn_osd_dup_writes_total",
                "Resent client writes answered from the PG log, their first attempt having been \
                 applied.",
                &self.dup_writes,
            ),
            (
                "cairn_osd_pipelined_writes_total",
                "Client writes queued while another write of their PG was still committing.",
                &self.pipelined_writes,
            ),
            (
                "cairn_osd_fill_writes_forwarded_total",
                "Client writes forwarded to, and committed by, a copy being filled in the \
                 background outside the acting set.",
                &self.fill_writes_forwarded,
            ),
            (
                "cairn_osd_fill_hand_back_pushes_total",
                "Objects a background fill's hand-back pushed with its PG's writes held.",
                &self.fill_hand_back_pushes,
            ),
            (
                "cairn_osd_fill_held_pushes_total",
                "Objects a background fill pushed with that object's writes held, after which \
                 the copy gets its writes forwarded.",
                &self.fill_held_pushes,
            ),
        ];
        for (name, help, value) in single {
            e.counters(name, help, [(at, value.load(Relaxed))])?;
        }
        e.counters(
            "cairn_osd_read_repairs_total",
            "Client reads that found this primary's copy of an object damaged (a block failing \
             its crc32c), by whether a good copy from another OSD replaced it.",
            [
                ("repaired", &self.read_repairs),
                ("failed", &self.read_repairs_failed),
            ]
            .map(|(result, n)| ([("osd", osd), ("result", result)], n.load(Relaxed))),
        )?;
        e.counters(
            "cairn_osd_scrubs_total",
            "Scrubs of PGs this OSD leads, by kind (deep: data and omap compared too).",
            [("shallow", &self.scrubs), ("deep", &self.deep_scrubs)]
                .map(|(kind, n)| ([("osd", osd), ("kind", kind)], n.load(Relaxed))),
        )?;
        e.counters(
            "cairn_osd_scrub_objects_total",
            "Objects compared by scrubs, inconsistent ones found, and those repaired.",
            [
                ("compared", &self.scrub_objects),
                ("inconsistent", &self.scrub_inconsistent),
                ("repaired", &self.scrub_repaired),
            ]
            .map(|(result, n)| ([("osd", osd), ("result", result)], n.load(Relaxed))),
        )?;
        e.counters(
            "cairn_osd_scrub_fenced_ops_total",
            "Writes and read repairs that waited while a scrub compared their object's chunk \
             (the PG's other objects are not held).",
            [(at, self.scrub_fenced.load(Relaxed))],
        )
    }
}

/// Writes the object store's counters and sizes (a snapshot the OSD refreshes every second) on
/// a page: where a write's time goes (staging, data writes, flushes, checkpoints) and how many
/// device and KV bytes it costs.
pub fn encode_store(
    e: &mut DescriptorEncoder<'_>,
    osd: &str,
    st: &cairn_store::StoreStats,
) -> Written {
    const NS: f64 = 1e-9;
    let at = [("osd", osd)];
    let counts: [(&str, &str, u64); 15] = [
        (
            "cairn_osd_store_commits_total",
            "Transactions committed.",
            st.commits,
        ),
        (
            "cairn_osd_store_group_commits_total",
            "Group commits carrying them.",
            st.group_commits,
        ),
        (
            "cairn_osd_store_wal_records_total",
            "Group commits made durable by a log record.",
            st.wal_records,
        ),
        (
            "cairn_osd_store_groups_overlapped_total",
            "Group commits started while an earlier group's writes were in flight.",
            st.groups_overlapped,
        ),
        (
            "cairn_osd_store_checkpoints_total",
            "Durable KV commits of the overlay.",
            st.checkpoints,
        ),
        (
            "cairn_osd_store_deferred_applied_total",
            "Deferred block writes applied in place.",
            st.deferred_applied,
        ),
        (
            "cairn_osd_store_user_bytes_written_total",
            "Bytes transactions wrote (data, xattrs, omap).",
            st.user_bytes_written,
        ),
        (
            "cairn_osd_store_device_bytes_written_total",
            "Bytes written to the data device.",
            st.device_bytes_written,
        ),
        (
            "cairn_osd_store_device_bytes_read_total",
            "Bytes read from the data device.",
            st.device_bytes_read,
        ),
        (
            "cairn_osd_store_device_flushes_total",
            "Device flushes.",
            st.device_flushes,
        ),
        (
            "cairn_osd_store_onode_cache_hits_total",
            "Reads' object metadata found in the onode cache.",
            st.onode_cache_hits,
        ),
        (
            "cairn_osd_store_onode_cache_misses_total",
            "Reads' object metadata looked up in the KV.",
            st.onode_cache_misses,
        ),
        (
            "cairn_osd_store_kv_bytes_written_total",
            "Bytes the KV wrote.",
            st.kv_bytes_written,
        ),
        (
            "cairn_osd_store_data_read_errors_total",
            "Reads of object data the device failed (EIO); each copy is repaired from another.",
            st.data_read_errors,
        ),
        (
            "cairn_osd_store_early_write_bytes_total",
            "Bytes written by their submitters before their groups formed.",
            st.early_write_bytes,
        ),
    ];
    for (name, help, value) in counts {
        e.counters(name, help, [(at, value)])?;
    }
    let seconds: [(&str, &str, f64); 10] = [
        (
            "cairn_osd_store_stage_seconds_total",
            "Time staging transactions.",
            st.stage_ns as f64 * NS,
        ),
        (
            "cairn_osd_store_data_write_seconds_total",
            "Time writing data blocks before commits.",
            st.data_write_ns as f64 * NS,
        ),
        (
            "cairn_osd_store_device_flush_seconds_total",
            "Time in device flushes before commits.",
            st.device_flush_ns as f64 * NS,
        ),
        (
            "cairn_osd_store_checkpoint_seconds_total",
            "Time in checkpoints, background included.",
            st.checkpoint_ns as f64 * NS,
        ),
        (
            "cairn_osd_store_checkpoint_wait_seconds_total",
            "Time commits waited for checkpoints.",
            st.checkpoint_wait_ns as f64 * NS,
        ),
        (
            "cairn_osd_store_lock_wait_seconds_total",
            "Time committers waited for the store's state lock.",
            st.lock_wait_ns as f64 * NS,
        ),
        (
            "cairn_osd_store_early_wait_seconds_total",
            "Time committers waited for the oldest queued transaction's early writes.",
            st.early_wait_ns as f64 * NS,
        ),
        (
            "cairn_osd_store_pipeline_wait_seconds_total",
            "Time committers waited for a group in flight to make room.",
            st.pipeline_wait_ns as f64 * NS,
        ),
        (
            "cairn_osd_store_throttle_wait_seconds_total",
            "Time group commits were slowed while the store's log neared its limit.",
            st.throttle_wait_ns as f64 * NS,
        ),
        (
            "cairn_osd_store_read_device_seconds_total",
            "Time reads spent on the device (without the store's state lock).",
            st.read_device_ns as f64 * NS,
        ),
    ];
    for (name, help, value) in seconds {
        e.counters(name, help, [(at, value)])?;
    }
    let sizes: [(&str, &str, u64); 7] = [
        ("cairn_osd_store_objects", "Objects stored.", st.objects),
        (
            "cairn_osd_store_stored_bytes",
            "Sum of object sizes.",
            st.stored_bytes,
        ),
        (
            "cairn_osd_store_allocated_bytes",
            "Device bytes referenced by objects.",
            st.allocated_bytes,
        ),
        (
            "cairn_osd_store_free_bytes",
            "Free device bytes.",
            st.free_bytes,
        ),
        (
            "cairn_osd_store_capacity_bytes",
            "Usable device bytes.",
            st.capacity_bytes,
        ),
        (
            "cairn_osd_store_deferred_pending_bytes",
            "Deferred writes not yet in place.",
            st.deferred_pending_bytes,
        ),
        (
            "cairn_osd_store_io_buffers_free_bytes",
            "Free I/O buffers kept for reuse.",
            st.io_buffers_free_bytes,
        ),
    ];
    for (name, help, value) in sizes {
        e.gauges(name, help, [(at, value)])?;
    }
    e.gauges(
        "cairn_osd_store_fragmentation",
        "1 - largest free extent / free space.",
        [(at, st.fragmentation)],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_counters_are_rendered_with_their_units() {
        let st = cairn_store::StoreStats {
            group_commits: 7,
            device_flush_ns: 1_500_000_000,
            free_bytes: 4096,
            io_buffers_free_bytes: 8 << 20,
            onode_cache_misses: 3,
            read_device_ns: 250_000_000,
            ..Default::default()
        };
        let text = cairn_metrics::render(move |e| encode_store(e, "2", &st));
        assert!(text.contains("# TYPE cairn_osd_store_group_commits_total counter"));
        assert!(text.contains("cairn_osd_store_group_commits_total{osd=\"2\"} 7\n"));
        assert!(text.contains("cairn_osd_store_device_flush_seconds_total{osd=\"2\"} 1.5\n"));
        assert!(text.contains("# TYPE cairn_osd_store_free_bytes gauge"));
        assert!(text.contains("cairn_osd_store_free_bytes{osd=\"2\"} 4096\n"));
        assert!(text.contains("cairn_osd_store_io_buffers_free_bytes{osd=\"2\"} 8388608\n"));
        assert!(text.contains("cairn_osd_store_onode_cache_misses_total{osd=\"2\"} 3\n"));
        assert!(text.contains("cairn_osd_store_read_device_seconds_total{osd=\"2\"} 0.25\n"));
    }

    #[test]
    fn histogram_is_cumulative_and_counts_errors() {
        let m = Metrics::default();
        m.record_op("read", 10, Duration::from_micros(50), true);
        m.record_op("read", 10, Duration::from_millis(30), false);
        let m = std::sync::Arc::new(m);
        let page = m.clone();
        let text = cairn_metrics::render(move |e| page.encode(e, "3"));
        assert!(text.contains("cairn_osd_ops_total{osd=\"3\",op=\"read\"} 2"));
        assert!(text.contains("cairn_osd_op_errors_total{osd=\"3\",op=\"read\"} 1"));
        assert!(text.contains("le=\"0.0001\"} 1"));
        assert!(text.contains("le=\"0.05\"} 2"));
        assert!(text.contains("le=\"+Inf\"} 2"));
        assert_eq!(m.total_ops(), 2);
    }
}
