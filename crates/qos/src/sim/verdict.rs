//! QoS verdicts over a simulation report: reservation met per window, limits never exceeded in
//! any sliding window, shares. Owns the checks the tests and `cairn sched simulate` print;
//! never runs a simulation itself.

use super::{DispatchRecord, SimReport};
use crate::config::PolicyConfig;
use crate::convert::usize_of;
use crate::request::QosClass;

/// Largest sum of `value` over any window of `window_ns` (sliding, anchored at each dispatch).
pub fn max_sliding(
    dispatches: &[DispatchRecord],
    window_ns: u64,
    value: fn(&DispatchRecord) -> u64,
) -> u64 {
    let mut best = 0;
    let mut sum = 0;
    let mut lo = 0;
    for hi in 0..dispatches.len() {
        sum += value(&dispatches[hi]);
        while dispatches[hi].at_ns - dispatches[lo].at_ns >= window_ns {
            sum -= value(&dispatches[lo]);
            lo += 1;
        }
        best = best.max(sum);
    }
    best
}

/// Per-class cost dispatched in each window (device ns), summed over the class's sources.
pub fn class_window_cost(report: &SimReport, class: QosClass) -> Vec<u64> {
    let n = report.sources.first().map_or(0, |s| s.window_cost_ns.len());
    let mut out = vec![0; n];
    for s in report.sources.iter().filter(|s| s.class == class) {
        for (o, c) in out.iter_mut().zip(&s.window_cost_ns) {
            *o += c;
        }
    }
    out
}

/// One verdict line.
#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    /// What was checked.
    pub what: String,
    /// Whether it held.
    pub pass: bool,
}

/// Reservation and limit verdicts for an mClock run (class mode). Reservations are checked
/// only when all of the class's sources are closed-loop (always backlogged); limits allow 1% plus
/// `max_request_cost_ns` (one request) per window.
pub fn mclock_verdicts(
    report: &SimReport,
    policy: &PolicyConfig,
    closed_loop: &[bool],
    max_request_cost_ns: u64,
) -> Vec<Verdict> {
    let PolicyConfig::Mclock(cfg) = policy else {
        return Vec::new();
    };
    let Ok(params) = cfg.class_params() else {
        return Vec::new();
    };
    let window_s = report.window_ns as f64 / 1e9;
    let full_windows = usize_of(report.duration_ns / report.window_ns);
    let mut out = Vec::new();
    for (i, class) in [QosClass::Client, QosClass::Recovery, QosClass::BestEffort]
        .into_iter()
        .enumerate()
    {
        let backlogged = report
            .sources
            .iter()
            .zip(closed_loop)
            .filter(|(s, _)| s.class == class)
            .map(|(_, c)| *c)
            .collect::<Vec<_>>();
        if backlogged.is_empty() {
            continue;
        }
        let w = class_window_cost(report, class);
        let p = params[i];
        if p.reservation > 0.0 && backlogged.iter().all(|b| *b) && full_windows > 1 {
            let need = p.reservation * 1e9 * window_s * 0.98;
            let ok = w[1..full_windows]
                .iter()
                .filter(|&&c| c as f64 >= need)
                .count();
            let frac = ok as f64 / (full_windows - 1) as f64;
            out.push(Verdict {
                what: format!(
                    "{}: reservation {:.0}% met in {:.1}% of windows (need >= 99%)",
                    class.name(),
                    p.reservation * 100.0,
                    frac * 100.0
                ),
                pass: frac >= 0.99,
            });
        }
        if p.limit > 0.0 && p.limit < 1.0 {
            let cap = p.limit * 1e9 * window_s * 1.01 + max_request_cost_ns as f64;
            let worst = w[..full_windows].iter().copied().max().unwrap_or(0);
            out.push(Verdict {
                what: format!(
                    "{}: limit {:.0}%: worst window {:.1}% of capacity",
                    class.name(),
                    p.limit * 100.0,
                    worst as f64 / 1e9 / window_s * 100.0
                ),
                pass: (worst as f64) <= cap,
            });
        }
    }
    out
}
