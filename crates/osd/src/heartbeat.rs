//! Heartbeats: every interval this OSD pings every other up OSD; one that has not answered for
//! the grace period is reported to the monitor, which marks it down once enough distinct OSDs
//! agree. Pings bypass the scheduler (control traffic, invariant 2).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use cairn_mon::monitor::Request;
use cairn_proto::peer::Ping;
use cairn_proto::{encode, MSG_PING};

use crate::shared::Shared;

/// Runs the heartbeat loop until the OSD stops.
pub async fn run(s: Arc<Shared>) {
    let every = Duration::from_millis(s.cfg.heartbeat_interval_ms.max(10));
    let grace = Duration::from_millis(s.cfg.heartbeat_grace_ms);
    // Since when each peer has been watched in its current address (a restarted peer gets a
    // fresh grace period).
    let mut watched: HashMap<i32, (String, Instant)> = HashMap::new();
    loop {
        tokio::time::sleep(every).await;
        let targets = s.up_peers();
        watched.retain(|osd, _| targets.iter().any(|(o, _)| o == osd));
        let stamp_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let ping = Ping {
            from: s.id,
            epoch: s.epoch(),
            stamp_ms,
        };
        for (osd, addr) in targets {
            let since = watched
                .entry(osd)
                .and_modify(|w| {
                    if w.0 != addr {
                        *w = (addr.clone(), Instant::now());
                    }
                })
                .or_insert_with(|| (addr.clone(), Instant::now()))
                .1;
            if let Ok(sender) = s.peers.sender(osd, &addr).await {
                // A dead peer's queue fills up; never let that stall the loop.
                let _ = tokio::time::timeout(
                    Duration::from_millis(50),
                    sender.send(MSG_PING, encode(&ping, &[])),
                )
                .await;
            }
            let last_ok = s.peers.last_pong(osd).map_or(since, |p| p.max(since));
            let silent = last_ok.elapsed();
            if silent >= grace {
                let s2 = s.clone();
                let failed_for_ms = silent.as_millis() as u64;
                tokio::spawn(async move {
                    let report = Request::FailureReport {
                        reporter: s2.id,
                        target: osd,
                        failed_for_ms,
                    };
                    if let Err(e) = s2.mon.op(report, 5_000).await {
                        tracing::warn!(osd = s2.id, target = osd, error = %e, "failure report not taken");
                    }
                });
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
