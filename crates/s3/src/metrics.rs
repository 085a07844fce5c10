//! The gateway's Prometheus page: S3 operations as s3s routed them (admitted or refused by
//! admission: signature, dating, rate limits), and every HTTP request by method and status
//! class with its latency and bytes, as MinIO and RGW report them.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use cairn_metrics::{DescriptorEncoder, Families, HistogramSample, Written};
use std::time::Duration;

/// Upper bounds of the latency histogram's buckets, seconds.
pub const LATENCY_BUCKETS_S: [f64; 13] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// HTTP methods the page names (others are counted as `other`).
const METHODS: [&str; 6] = ["GET", "PUT", "POST", "DELETE", "HEAD", "other"];

/// Requests of one method.
#[derive(Default)]
struct MethodStats {
    /// By status class: 1xx..5xx at index 0..4.
    by_class: [u64; 5],
    /// Requests per latency bucket (the last one past every bound).
    buckets: [u64; LATENCY_BUCKETS_S.len() + 1],
    latency_sum_s: f64,
    bytes_in: u64,
    bytes_out: u64,
}

/// Counters of a running gateway.
#[derive(Default)]
pub struct S3Metrics {
    /// S3 operations routed, by name: (admitted, refused).
    ops: Mutex<BTreeMap<String, (u64, u64)>>,
    http: Mutex<[MethodStats; METHODS.len()]>,
    in_flight: AtomicU64,
    /// Where the gateway protected itself: connections and bodies it refused or cut short.
    pub limits: LimitCounters,
    /// What the lifecycle pass did.
    pub lifecycle: LifecycleCounters,
}

/// Totals of the lifecycle passes (`lifecycle_pass`).
#[derive(Default)]
pub struct LifecycleCounters {
    /// Passes completed.
    pub passes: AtomicU64,
    /// Current versions expired.
    pub expired: AtomicU64,
    /// Noncurrent versions removed.
    pub noncurrent_removed: AtomicU64,
    /// Expired delete markers removed.
    pub markers_removed: AtomicU64,
    /// Incomplete multipart uploads aborted.
    pub uploads_aborted: AtomicU64,
    /// Versions moved to another storage class.
    pub transitioned: AtomicU64,
}

/// Counts of the gateway's limits at work (see docs/reference/limits.md).
#[derive(Default)]
pub struct LimitCounters {
    /// Connections answered 503 SlowDown because every slot held a request in progress.
    pub connections_refused: AtomicU64,
    /// Idle connections closed to give their slot to a new connection.
    pub connections_evicted: AtomicU64,
    /// Bodies refused 503 SlowDown after waiting too long for room in the body budget.
    pub bodies_refused: AtomicU64,
    /// Bodies cut short with RequestTimeout: idle too long, or too slow to fill a stripe.
    pub body_timeouts: AtomicU64,
}

impl LimitCounters {
    /// Adds one to `counter`.
    pub fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// Marks one request in flight until dropped.
pub struct InFlight<'a>(&'a S3Metrics);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

impl S3Metrics {
    /// Counts one S3 operation (`s3s`'s name, e.g. `PutObject`) admitted or refused.
    pub fn record_op(&self, op: &str, admitted: bool) {
        let mut ops = self.ops.lock().unwrap_or_else(|p| p.into_inner());
        if !ops.contains_key(op) {
            ops.insert(op.to_owned(), (0, 0));
        }
        let Some(e) = ops.get_mut(op) else {
            return;
        };
        match admitted {
            true => e.0 += 1,
            false => e.1 += 1,
        }
    }

    /// Notes a request in flight (until the guard drops).
    pub fn start(&self) -> InFlight<'_> {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        InFlight(self)
    }

    /// Counts one answered HTTP request: its method, status code, time from arrival to the
    /// response head, and the body bytes it declared and was answered with.
    pub fn record_http(
        &self,
        method: &str,
        status: u16,
        took: Duration,
        bytes_in: u64,
        bytes_out: u64,
    ) {
        let m = METHODS
            .iter()
            .position(|&x| x == method)
            .unwrap_or(METHODS.len() - 1);
        let class = usize::from(status / 100).clamp(1, 5) - 1;
        let s = took.as_secs_f64();
        let bucket = LATENCY_BUCKETS_S
            .iter()
            .position(|&b| s <= b)
            .unwrap_or(LATENCY_BUCKETS_S.len());
        let mut http = self.http.lock().unwrap_or_else(|p| p.into_inner());
        let st = &mut http[m];
        st.by_class[class] += 1;
        st.buckets[bucket] += 1;
        st.latency_sum_s += s;
        st.bytes_in += bytes_in;
        st.bytes_out += bytes_out;
    }

    /// The page, Prometheus text format.
    pub fn render(self: &Arc<Self>) -> String {
        let metrics = Arc::clone(self);
        cairn_metrics::render(move |e| metrics.encode(e))
    }

    /// Writes the gateway's families on a metrics page.
    pub fn encode(&self, e: &mut DescriptorEncoder<'_>) -> Written {
        let ops = self.ops.lock().unwrap_or_else(|p| p.into_inner()).clone();
        e.counters(
            "cairn_s3_operations_total",
            "S3 operations routed, by name and admission (refused: unsigned, bad key or \
             date, rate limit).",
            ops.iter().flat_map(|(op, &(ok, refused))| {
                [
                    ([("op", op.as_str()), ("admission", "admitted")], ok),
                    ([("op", op.as_str()), ("admission", "refused")], refused),
                ]
            }),
        )?;
        let http = self.http.lock().unwrap_or_else(|p| p.into_inner());
        const CLASSES: [&str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];
        e.counters(
            "cairn_s3_http_requests_total",
            "HTTP requests answered, by method and status class.",
            METHODS.iter().zip(http.iter()).flat_map(|(&m, st)| {
                CLASSES
                    .iter()
                    .zip(st.by_class)
                    .map(move |(&class, n)| ([("method", m), ("status", class)], n))
            }),
        )?;
        e.histograms(
            "cairn_s3_http_request_seconds",
            "Time from a request's arrival to its response head, by method.",
            METHODS.iter().zip(http.iter()).map(|(&m, st)| {
                (
                    [("method", m)],
                    HistogramSample {
                        bounds: &LATENCY_BUCKETS_S,
                        counts: &st.buckets[..LATENCY_BUCKETS_S.len()],
                        count: st.buckets.iter().sum(),
                        sum: st.latency_sum_s,
                    },
                )
            }),
        )?;
        for (name, help, pick) in [
            (
                "cairn_s3_received_bytes_total",
                "Request body bytes declared, by method.",
                (|s: &MethodStats| s.bytes_in) as fn(&MethodStats) -> u64,
            ),
            (
                "cairn_s3_sent_bytes_total",
                "Response body bytes declared, by method.",
                |s: &MethodStats| s.bytes_out,
            ),
        ] {
            e.counters(
                name,
                help,
                METHODS
                    .iter()
                    .zip(http.iter())
                    .map(|(&m, st)| ([("method", m)], pick(st))),
            )?;
        }
        drop(http);
        e.gauge(
            "cairn_s3_requests_in_flight",
            "Requests being served now.",
            self.in_flight.load(Ordering::Relaxed),
        )?;
        let l = &self.limits;
        for (name, help, v) in [
            (
                "cairn_s3_connections_refused_total",
                "Connections answered 503 SlowDown: every slot held a request in progress.",
                &l.connections_refused,
            ),
            (
                "cairn_s3_connections_evicted_total",
                "Idle connections closed to give their slot to a new connection.",
                &l.connections_evicted,
            ),
            (
                "cairn_s3_bodies_refused_total",
                "Request bodies refused 503 SlowDown after waiting for the body budget.",
                &l.bodies_refused,
            ),
            (
                "cairn_s3_body_timeouts_total",
                "Request bodies cut short with RequestTimeout (idle, or too slow a stripe).",
                &l.body_timeouts,
            ),
        ] {
            e.counter(name, help, v.load(Ordering::Relaxed))?;
        }
        let lc = &self.lifecycle;
        e.counter(
            "cairn_s3_lifecycle_passes_total",
            "Lifecycle passes completed.",
            lc.passes.load(Ordering::Relaxed),
        )?;
        e.counters(
            "cairn_s3_lifecycle_actions_total",
            "What lifecycle rules did, by action.",
            [
                ("expire_current", &lc.expired),
                ("expire_noncurrent", &lc.noncurrent_removed),
                ("remove_delete_marker", &lc.markers_removed),
                ("abort_upload", &lc.uploads_aborted),
                ("transition", &lc.transitioned),
            ]
            .map(|(action, v)| ([("action", action)], v.load(Ordering::Relaxed))),
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_land_in_their_method_class_and_bucket() {
        let m = Arc::new(S3Metrics::default());
        m.record_http("PUT", 200, Duration::from_millis(3), 4096, 0);
        m.record_http("PUT", 503, Duration::from_secs(20), 10, 200);
        m.record_http("PATCH", 405, Duration::from_micros(10), 0, 0);
        m.record_op("PutObject", true);
        m.record_op("PutObject", false);
        let guard = m.start();
        let page = m.render();
        let has = |l: &str| page.lines().any(|x| x == l);
        assert!(has(
            "cairn_s3_http_requests_total{method=\"PUT\",status=\"2xx\"} 1"
        ));
        assert!(has(
            "cairn_s3_http_requests_total{method=\"PUT\",status=\"5xx\"} 1"
        ));
        assert!(has(
            "cairn_s3_http_requests_total{method=\"other\",status=\"4xx\"} 1"
        ));
        // 3 ms is past the 2.5 ms bound and within 5 ms; 20 s only in +Inf.
        assert!(has(
            "cairn_s3_http_request_seconds_bucket{method=\"PUT\",le=\"0.0025\"} 0"
        ));
        assert!(has(
            "cairn_s3_http_request_seconds_bucket{method=\"PUT\",le=\"0.005\"} 1"
        ));
        assert!(has(
            "cairn_s3_http_request_seconds_bucket{method=\"PUT\",le=\"10\"} 1"
        ));
        assert!(has(
            "cairn_s3_http_request_seconds_bucket{method=\"PUT\",le=\"+Inf\"} 2"
        ));
        assert!(has("cairn_s3_http_request_seconds_count{method=\"PUT\"} 2"));
        assert!(has("cairn_s3_received_bytes_total{method=\"PUT\"} 4106"));
        assert!(has("cairn_s3_sent_bytes_total{method=\"PUT\"} 200"));
        assert!(has(
            "cairn_s3_operations_total{op=\"PutObject\",admission=\"admitted\"} 1"
        ));
        assert!(has(
            "cairn_s3_operations_total{op=\"PutObject\",admission=\"refused\"} 1"
        ));
        assert!(has("cairn_s3_requests_in_flight 1"));
        drop(guard);
        assert!(m
            .render()
            .lines()
            .any(|x| x == "cairn_s3_requests_in_flight 0"));
    }
}
