//! Heartbeats: every interval this OSD pings every other up OSD; one that has not answered for
//! the grace period is reported to the monitor, which marks it down once enough distinct OSDs
//! agree. A peer whose address refuses connections (its host answers, nothing listens: the
//! process is gone) is reported at once instead, and one such report marks it down (Ceph's
//! `osd_fast_fail_on_connection_refused`). Pings bypass the scheduler (control traffic,
//! invariant 2).
//!
//! Silence this OSD caused itself is not held against its peers: when the loop's sleep ends
//! far later than it asked for (the process was stopped, or starved), every peer gets a fresh
//! grace period instead of being reported for the time this OSD was not listening. Without
//! this, an OSD resumed after SIGSTOP reports every peer at once, and two such OSDs mark
//! healthy ones down.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::time::Instant;

use cairn_proto::mon::Request;
use cairn_proto::peer::Ping;
use cairn_proto::{encode, MSG_PING};

use crate::shared::{Shared, UpPeer};

/// Runs the heartbeat loop until the OSD stops.
pub async fn run(s: Arc<Shared>) {
    let every = Duration::from_millis(s.cfg.heartbeat_interval_ms.max(10));
    let grace = Duration::from_millis(s.cfg.heartbeat_grace_ms);
    // Since when each peer has been watched in its current incarnation (address and boot
    // epoch): a restarted peer gets a fresh grace period, and only a refusal after this
    // instant can be about it.
    let mut watched: HashMap<i32, (UpPeer, Instant)> = HashMap::new();
    // Incarnations already logged as refusing connections (reports repeat every interval
    // until the map marks them down; the log line does not).
    let mut logged_refusals: HashSet<(i32, u64)> = HashSet::new();
    loop {
        let asleep = Instant::now();
        // A peer that starts refusing connections is looked at now, not at the next beat.
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = s.peers.refusal(), if s.cfg.fast_fail_on_connection_refused => {}
        }
        let gap = asleep.elapsed();
        if stalled(gap, every, grace) {
            let woke = Instant::now();
            tracing::warn!(
                osd = s.id,
                stalled_ms = crate::convert::millis(gap),
                "heartbeat loop stalled (process stopped or starved): peers get a fresh grace"
            );
            for (_, since) in watched.values_mut() {
                *since = woke;
            }
        }
        let targets = s.up_peers();
        watched.retain(|osd, _| targets.iter().any(|p| p.id == *osd));
        logged_refusals.retain(|(osd, up_from)| {
            targets
                .iter()
                .any(|p| p.id == *osd && p.up_from == *up_from)
        });
        let stamp_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, crate::convert::millis);
        let ping = Ping {
            from: s.id,
            epoch: s.epoch(),
            stamp_ms,
        };
        for peer in targets {
            let osd = peer.id;
            let since = watched
                .entry(osd)
                .and_modify(|w| {
                    if w.0 != peer {
                        *w = (peer.clone(), Instant::now());
                    }
                })
                .or_insert_with(|| (peer.clone(), Instant::now()))
                .1;
            let mut refused = false;
            if let Ok(sender) = s.peers.sender(osd, &peer.addr).await {
                // A dead peer's queue fills up; never let that stall the loop.
                let _ = tokio::time::timeout(
                    Duration::from_millis(50),
                    sender.send(MSG_PING, encode(&ping, &[])),
                )
                .await;
                refused = sender.refused_at().is_some_and(|at| at > since);
            }
            if refused && s.cfg.fast_fail_on_connection_refused {
                if logged_refusals.insert((osd, peer.up_from)) {
                    tracing::info!(
                        osd = s.id,
                        target = osd,
                        addr = %peer.addr,
                        "peer refuses connections: reported at once"
                    );
                }
                report(
                    &s,
                    Request::RefusedReport {
                        reporter: s.id,
                        target: osd,
                        addr: peer.addr.clone(),
                        up_from: peer.up_from,
                    },
                );
                continue;
            }
            let last_ok = s.peers.last_pong(osd).map_or(since, |p| p.max(since));
            let silent = last_ok.elapsed();
            if silent >= grace {
                let failed_for_ms = crate::convert::millis(silent);
                report(
                    &s,
                    Request::FailureReport {
                        reporter: s.id,
                        target: osd,
                        failed_for_ms,
                        addr: peer.addr.clone(),
                        up_from: peer.up_from,
                    },
                );
                tracing::info!(
                    osd = s.id,
                    target = osd,
                    failed_for_ms,
                    "peer silent: reported"
                );
            }
        }
    }
}

/// Whether a sleep of `every` that took `gap` means this OSD itself was not running for a
/// good part of the grace: a peer's silence over that time says nothing about the peer.
fn stalled(gap: Duration, every: Duration, grace: Duration) -> bool {
    gap > every + grace / 2
}

/// Sends a failure report to the monitor without holding up the heartbeat loop.
fn report(s: &Arc<Shared>, report: Request) {
    let s2 = s.clone();
    s.spawn(async move {
        if let Err(e) = s2.mon.op(report, 5_000).await {
            tracing::warn!(osd = s2.id, error = %e, "failure report not taken");
        }
    });
}

#[cfg(test)]
mod tests {
    use super::stalled;
    use std::time::Duration;

    #[test]
    fn only_a_wake_late_by_half_the_grace_is_a_stall() {
        let (every, grace) = (Duration::from_secs(1), Duration::from_secs(20));
        assert!(!stalled(Duration::from_millis(1_000), every, grace));
        assert!(!stalled(Duration::from_millis(9_000), every, grace));
        assert!(!stalled(Duration::from_millis(11_000), every, grace));
        assert!(stalled(Duration::from_millis(11_001), every, grace));
        assert!(stalled(Duration::from_secs(60), every, grace));
    }
}
