//! The OSD's counters, rendered in Prometheus text format: client ops by kind (count, errors,
//! bytes, latency histogram), recovery traffic, PGs by state, and the scheduler's per-class
//! counters. Recording is a short critical section; rendering happens only on a scrape.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::time::Duration;

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
    blocking_recovery_steps: std::sync::atomic::AtomicU64,
    /// Objects (each once per copy it reached) and bytes this OSD recovered as a primary.
    recovered_objects: std::sync::atomic::AtomicU64,
    recovered_bytes: std::sync::atomic::AtomicU64,
    /// PGs peered again in their interval because a write left their copies disagreeing.
    repeers: std::sync::atomic::AtomicU64,
    /// Temporary acting sets asked for, so that PGs serve while their up sets are filled.
    remaps: std::sync::atomic::AtomicU64,
    history_gaps: std::sync::atomic::AtomicU64,
    up_thru_requests: std::sync::atomic::AtomicU64,
    /// Resent writes answered from the PG log (their first attempt was applied).
    dup_writes: std::sync::atomic::AtomicU64,
    /// Client reads that found this primary's copy damaged: repaired from another copy, and
    /// not repairable (every copy damaged or unreachable).
    read_repairs: std::sync::atomic::AtomicU64,
    read_repairs_failed: std::sync::atomic::AtomicU64,
    /// Scrubs finished, objects compared, inconsistent objects found and repaired.
    scrubs: std::sync::atomic::AtomicU64,
    deep_scrubs: std::sync::atomic::AtomicU64,
    scrub_objects: std::sync::atomic::AtomicU64,
    scrub_inconsistent: std::sync::atomic::AtomicU64,
    scrub_repaired: std::sync::atomic::AtomicU64,
    /// Writes and read repairs that waited for a scrub chunk's fence.
    scrub_fenced: std::sync::atomic::AtomicU64,
    /// Stray PG copies deleted, and their objects.
    strays_deleted: std::sync::atomic::AtomicU64,
    stray_objects_deleted: std::sync::atomic::AtomicU64,
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
            self.blocking_recovery_steps
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
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
        self.repeers
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Records a temporary acting set asked for (see `remap`).
    pub fn record_remap(&self) {
        self.remaps
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Records a peering whose past intervals could not all be computed: the monitor's history
    /// no longer reaches back to the PG's last activation.
    pub fn record_history_gap(&self) {
        self.history_gaps
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Records an up_thru request sent to the monitor before a PG went active.
    pub fn record_up_thru_request(&self) {
        self.up_thru_requests
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Records a resent write answered from the PG log instead of being applied again.
    pub fn record_dup_write(&self) {
        self.dup_writes
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Records a read repair (see `repair`): `repaired` when a good copy replaced the damaged
    /// one here.
    pub fn record_read_repair(&self, repaired: bool) {
        let counter = if repaired {
            &self.read_repairs
        } else {
            &self.read_repairs_failed
        };
        counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Counts a write or read repair that waited for a scrub chunk's fence over its object.
    pub fn record_scrub_fenced(&self) {
        self.scrub_fenced
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Records a finished scrub of a PG this OSD leads.
    pub fn record_scrub(&self, report: &crate::scrub::ScrubReport) {
        use std::sync::atomic::Ordering::Relaxed;
        let kind = if report.deep {
            &self.deep_scrubs
        } else {
            &self.scrubs
        };
        kind.fetch_add(1, Relaxed);
        self.scrub_objects.fetch_add(report.objects, Relaxed);
        self.scrub_inconsistent
            .fetch_add(report.inconsistent.len() as u64, Relaxed);
        self.scrub_repaired
            .fetch_add(report.repaired.len() as u64, Relaxed);
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

    /// Prometheus text: the op and recovery counters, then `extra` lines (PG states, scheduler).
    pub fn render(&self, osd: i32, extra: &str) -> String {
        let mut out = String::new();
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
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
            for (k, st) in &ops {
                let _ = writeln!(out, "{name}{{osd=\"{osd}\",op=\"{k}\"}} {}", value(st));
            }
        }
        out.push_str("# HELP cairn_osd_op_latency_seconds Client operation latency.\n# TYPE cairn_osd_op_latency_seconds histogram\n");
        for (k, s) in &ops {
            let mut cum = 0;
            for (b, n) in BUCKETS_S.iter().zip(s.buckets) {
                cum += n;
                let _ = writeln!(out, "cairn_osd_op_latency_seconds_bucket{{osd=\"{osd}\",op=\"{k}\",le=\"{b}\"}} {cum}");
            }
            let _ = writeln!(
                out,
                "cairn_osd_op_latency_seconds_bucket{{osd=\"{osd}\",op=\"{k}\",le=\"+Inf\"}} {}",
                s.count
            );
            let _ = writeln!(
                out,
                "cairn_osd_op_latency_seconds_sum{{osd=\"{osd}\",op=\"{k}\"}} {}",
                s.sum_s
            );
            let _ = writeln!(
                out,
                "cairn_osd_op_latency_seconds_count{{osd=\"{osd}\",op=\"{k}\"}} {}",
                s.count
            );
        }
        let by_kind = self
            .recovery
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let (objs, bytes) = by_kind
            .values()
            .fold((0, 0), |(o, b), &(o2, b2)| (o + o2, b + b2));
        let _ = writeln!(out, "# HELP cairn_osd_recovery_objects_total Objects moved by recovery.\n# TYPE cairn_osd_recovery_objects_total counter\ncairn_osd_recovery_objects_total{{osd=\"{osd}\"}} {objs}");
        let _ = writeln!(out, "# HELP cairn_osd_recovery_bytes_total Bytes moved by recovery.\n# TYPE cairn_osd_recovery_bytes_total counter\ncairn_osd_recovery_bytes_total{{osd=\"{osd}\"}} {bytes}");
        let (recovered, recovered_bytes) = self.recovered_as_primary();
        let _ = writeln!(out, "# HELP cairn_osd_recovered_objects_total Objects this OSD, as a PG's primary, pushed to another copy or pulled to itself (once per copy).\n# TYPE cairn_osd_recovered_objects_total counter\ncairn_osd_recovered_objects_total{{osd=\"{osd}\"}} {recovered}");
        let _ = writeln!(out, "# HELP cairn_osd_recovered_bytes_total Bytes of those objects.\n# TYPE cairn_osd_recovered_bytes_total counter\ncairn_osd_recovered_bytes_total{{osd=\"{osd}\"}} {recovered_bytes}");
        let _ = writeln!(out, "# HELP cairn_osd_recovery_steps_total Recovery steps by kind (each one request through this OSD's scheduler).\n# TYPE cairn_osd_recovery_steps_total counter");
        for (kind, (n, _)) in &by_kind {
            let _ = writeln!(
                out,
                "cairn_osd_recovery_steps_total{{osd=\"{osd}\",kind=\"{}\"}} {n}",
                kind.label()
            );
        }
        let _ = writeln!(out, "# HELP cairn_osd_recovery_blocking_steps_total Recovery steps (of all kinds) that client I/O waited on (a PG recovering before it activates, a read's repair), run as client-class requests; the others are recovery-class.\n# TYPE cairn_osd_recovery_blocking_steps_total counter\ncairn_osd_recovery_blocking_steps_total{{osd=\"{osd}\"}} {}", self.blocking_recovery_steps.load(std::sync::atomic::Ordering::Relaxed));
        let _ = writeln!(out, "# HELP cairn_osd_pg_repeers_total PGs peered again in their interval (a write reached some copies only, a resend found its first attempt not on every copy, a copy left out as too full is tried again).\n# TYPE cairn_osd_pg_repeers_total counter\ncairn_osd_pg_repeers_total{{osd=\"{osd}\"}} {}", self.repeers.load(std::sync::atomic::Ordering::Relaxed));
        let _ = writeln!(out, "# HELP cairn_osd_pg_remaps_total Temporary acting sets asked for, so that PGs serve while their up sets are filled in the background.\n# TYPE cairn_osd_pg_remaps_total counter\ncairn_osd_pg_remaps_total{{osd=\"{osd}\"}} {}", self.remaps.load(std::sync::atomic::Ordering::Relaxed));
        let _ = writeln!(out, "# HELP cairn_osd_peering_history_gaps_total Peerings whose past intervals reach back past the monitor's history (earlier intervals not checked).\n# TYPE cairn_osd_peering_history_gaps_total counter\ncairn_osd_peering_history_gaps_total{{osd=\"{osd}\"}} {}", self.history_gaps.load(std::sync::atomic::Ordering::Relaxed));
        let _ = writeln!(out, "# HELP cairn_osd_up_thru_requests_total up_thru requests sent to the monitor before PGs went active.\n# TYPE cairn_osd_up_thru_requests_total counter\ncairn_osd_up_thru_requests_total{{osd=\"{osd}\"}} {}", self.up_thru_requests.load(std::sync::atomic::Ordering::Relaxed));
        let _ = writeln!(out, "# HELP cairn_osd_strays_deleted_total Stray PG copies deleted (PG clean elsewhere, or its pool removed).\n# TYPE cairn_osd_strays_deleted_total counter\ncairn_osd_strays_deleted_total{{osd=\"{osd}\"}} {}", self.strays_deleted.load(std::sync::atomic::Ordering::Relaxed));
        let _ = writeln!(out, "# HELP cairn_osd_stray_objects_deleted_total Objects of deleted stray PG copies.\n# TYPE cairn_osd_stray_objects_deleted_total counter\ncairn_osd_stray_objects_deleted_total{{osd=\"{osd}\"}} {}", self.stray_objects_deleted.load(std::sync::atomic::Ordering::Relaxed));
        let _ = writeln!(out, "# HELP cairn_osd_dup_writes_total Resent client writes answered from the PG log, their first attempt having been applied.\n# TYPE cairn_osd_dup_writes_total counter\ncairn_osd_dup_writes_total{{osd=\"{osd}\"}} {}", self.dup_writes.load(std::sync::atomic::Ordering::Relaxed));
        let _ = writeln!(out, "# HELP cairn_osd_read_repairs_total Client reads that found this primary's copy of an object damaged (a block failing its crc32c), by whether a good copy from another OSD replaced it.\n# TYPE cairn_osd_read_repairs_total counter\ncairn_osd_read_repairs_total{{osd=\"{osd}\",result=\"repaired\"}} {}\ncairn_osd_read_repairs_total{{osd=\"{osd}\",result=\"failed\"}} {}", self.read_repairs.load(std::sync::atomic::Ordering::Relaxed), self.read_repairs_failed.load(std::sync::atomic::Ordering::Relaxed));
        {
            use std::sync::atomic::Ordering::Relaxed;
            let _ = writeln!(out, "# HELP cairn_osd_scrubs_total Scrubs of PGs this OSD leads, by kind (deep: data and omap compared too).\n# TYPE cairn_osd_scrubs_total counter\ncairn_osd_scrubs_total{{osd=\"{osd}\",kind=\"shallow\"}} {}\ncairn_osd_scrubs_total{{osd=\"{osd}\",kind=\"deep\"}} {}", self.scrubs.load(Relaxed), self.deep_scrubs.load(Relaxed));
            let _ = writeln!(out, "# HELP cairn_osd_scrub_objects_total Objects compared by scrubs, inconsistent ones found, and those repaired.\n# TYPE cairn_osd_scrub_objects_total counter\ncairn_osd_scrub_objects_total{{osd=\"{osd}\",result=\"compared\"}} {}\ncairn_osd_scrub_objects_total{{osd=\"{osd}\",result=\"inconsistent\"}} {}\ncairn_osd_scrub_objects_total{{osd=\"{osd}\",result=\"repaired\"}} {}", self.scrub_objects.load(Relaxed), self.scrub_inconsistent.load(Relaxed), self.scrub_repaired.load(Relaxed));
            let _ = writeln!(out, "# HELP cairn_osd_scrub_fenced_ops_total Writes and read repairs that waited while a scrub compared their object's chunk (the PG's other objects are not held).\n# TYPE cairn_osd_scrub_fenced_ops_total counter\ncairn_osd_scrub_fenced_ops_total{{osd=\"{osd}\"}} {}", self.scrub_fenced.load(Relaxed));
        }
        out.push_str(extra);
        out
    }
}

/// Prometheus text for the object store's counters and sizes (a snapshot the OSD refreshes
/// every second): where a write's time goes (staging, data writes, flushes, checkpoints) and
/// how many device and KV bytes it costs.
pub fn render_store(osd: i32, st: &cairn_store::StoreStats) -> String {
    const NS: f64 = 1e-9;
    let counters: [(&str, &str, f64); 20] = [
        (
            "commits_total",
            "Transactions committed.",
            st.commits as f64,
        ),
        (
            "group_commits_total",
            "Group commits carrying them.",
            st.group_commits as f64,
        ),
        (
            "wal_records_total",
            "Group commits made durable by a log record.",
            st.wal_records as f64,
        ),
        (
            "groups_overlapped_total",
            "Group commits started while an earlier group's writes were in flight.",
            st.groups_overlapped as f64,
        ),
        (
            "checkpoints_total",
            "Durable KV commits of the overlay.",
            st.checkpoints as f64,
        ),
        (
            "deferred_applied_total",
            "Deferred block writes applied in place.",
            st.deferred_applied as f64,
        ),
        (
            "user_bytes_written_total",
            "Bytes transactions wrote (data, xattrs, omap).",
            st.user_bytes_written as f64,
        ),
        (
            "device_bytes_written_total",
            "Bytes written to the data device.",
            st.device_bytes_written as f64,
        ),
        (
            "device_bytes_read_total",
            "Bytes read from the data device.",
            st.device_bytes_read as f64,
        ),
        (
            "device_flushes_total",
            "Device flushes.",
            st.device_flushes as f64,
        ),
        (
            "onode_cache_hits_total",
            "Reads' object metadata found in the onode cache.",
            st.onode_cache_hits as f64,
        ),
        (
            "onode_cache_misses_total",
            "Reads' object metadata looked up in the KV.",
            st.onode_cache_misses as f64,
        ),
        (
            "kv_bytes_written_total",
            "Bytes the KV wrote.",
            st.kv_bytes_written as f64,
        ),
        (
            "stage_seconds_total",
            "Time staging transactions.",
            st.stage_ns as f64 * NS,
        ),
        (
            "data_write_seconds_total",
            "Time writing data blocks before commits.",
            st.data_write_ns as f64 * NS,
        ),
        (
            "data_read_errors_total",
            "Reads of object data the device failed (EIO); each copy is repaired from another.",
            st.data_read_errors as f64,
        ),
        (
            "early_write_bytes_total",
            "Bytes written by their submitters before their groups formed.",
            st.early_write_bytes as f64,
        ),
        (
            "device_flush_seconds_total",
            "Time in device flushes before commits.",
            st.device_flush_ns as f64 * NS,
        ),
        (
            "checkpoint_seconds_total",
            "Time in checkpoints, background included.",
            st.checkpoint_ns as f64 * NS,
        ),
        (
            "checkpoint_wait_seconds_total",
            "Time commits waited for checkpoints.",
            st.checkpoint_wait_ns as f64 * NS,
        ),
    ];
    let gauges: [(&str, &str, f64); 8] = [
        ("objects", "Objects stored.", st.objects as f64),
        (
            "stored_bytes",
            "Sum of object sizes.",
            st.stored_bytes as f64,
        ),
        (
            "allocated_bytes",
            "Device bytes referenced by objects.",
            st.allocated_bytes as f64,
        ),
        ("free_bytes", "Free device bytes.", st.free_bytes as f64),
        (
            "capacity_bytes",
            "Usable device bytes.",
            st.capacity_bytes as f64,
        ),
        (
            "fragmentation",
            "1 - largest free extent / free space.",
            st.fragmentation,
        ),
        (
            "deferred_pending_bytes",
            "Deferred writes not yet in place.",
            st.deferred_pending_bytes as f64,
        ),
        (
            "io_buffers_free_bytes",
            "Free I/O buffers kept for reuse.",
            st.io_buffers_free_bytes as f64,
        ),
    ];
    let mut out = String::new();
    for (kind, family) in [("counter", &counters[..]), ("gauge", &gauges[..])] {
        for (name, help, value) in family {
            let _ = writeln!(
                out,
                "# HELP cairn_osd_store_{name} {help}\n# TYPE cairn_osd_store_{name} {kind}\ncairn_osd_store_{name}{{osd=\"{osd}\"}} {value}"
            );
        }
    }
    out
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
            ..Default::default()
        };
        let text = render_store(2, &st);
        assert!(text.contains("# TYPE cairn_osd_store_group_commits_total counter"));
        assert!(text.contains("cairn_osd_store_group_commits_total{osd=\"2\"} 7\n"));
        assert!(text.contains("cairn_osd_store_device_flush_seconds_total{osd=\"2\"} 1.5\n"));
        assert!(text.contains("# TYPE cairn_osd_store_free_bytes gauge"));
        assert!(text.contains("cairn_osd_store_free_bytes{osd=\"2\"} 4096\n"));
        assert!(text.contains("cairn_osd_store_io_buffers_free_bytes{osd=\"2\"} 8388608\n"));
        assert!(text.contains("cairn_osd_store_onode_cache_misses_total{osd=\"2\"} 3\n"));
    }

    #[test]
    fn histogram_is_cumulative_and_counts_errors() {
        let m = Metrics::default();
        m.record_op("read", 10, Duration::from_micros(50), true);
        m.record_op("read", 10, Duration::from_millis(30), false);
        let text = m.render(3, "");
        assert!(text.contains("cairn_osd_ops_total{osd=\"3\",op=\"read\"} 2"));
        assert!(text.contains("cairn_osd_op_errors_total{osd=\"3\",op=\"read\"} 1"));
        assert!(text.contains("le=\"0.0001\"} 1"));
        assert!(text.contains("le=\"0.05\"} 2"));
        assert!(text.contains("le=\"+Inf\"} 2"));
        assert_eq!(m.total_ops(), 2);
    }
}
