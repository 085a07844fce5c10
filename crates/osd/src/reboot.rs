//! Booting again after the monitor marked this OSD down while it ran (a partition that
//! healed, a freeze, `noup` lifted): the boot is sent until a map shows the OSD up, not once
//! per map. A single try lost to a monitor connection that is being replaced would otherwise
//! leave the OSD down for as long as no new epoch comes, its PGs degraded without it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use cairn_clustermap::{ClusterMap, MapFlag};
use cairn_proto::mon::Request;

use crate::shared::Shared;

/// How long one boot request waits for the monitor's answer.
const BOOT_TIMEOUT: Duration = Duration::from_secs(10);

/// Pause after a boot the monitor did not answer or refused, before the next try; doubled
/// after each failure up to [`RETRY_AT_MOST`] (a monitor that keeps refusing is not asked
/// every few seconds for good).
const RETRY_AFTER: Duration = Duration::from_secs(2);

/// Longest pause between two boots.
const RETRY_AT_MOST: Duration = Duration::from_secs(30);

/// How long an answered boot waits for the map that shows it before booting again.
const MAP_WAIT: Duration = Duration::from_secs(10);

/// Keeps at most one boot loop running per OSD process.
#[derive(Debug, Default)]
pub struct Rebooter {
    running: Arc<AtomicBool>,
}

impl Rebooter {
    /// Starts the boot loop unless one runs already; it ends once the newest map shows this
    /// OSD up, or holds `noup` for it, or the OSD stops.
    pub fn boot_until_up(&self, shared: &Arc<Shared>, boot: Request, epoch: u64) {
        if self.running.swap(true, Ordering::AcqRel) {
            return;
        }
        tracing::warn!(
            osd = shared.id,
            epoch,
            "marked down while running: booting again"
        );
        let running = self.running.clone();
        let s = shared.clone();
        shared.track(tokio::spawn(async move {
            boot_loop(&s, boot).await;
            running.store(false, Ordering::Release);
        }));
    }
}

/// Whether `map` asks OSD `id` to boot again: it is marked down and may come up.
pub fn must_boot(map: &ClusterMap, id: i32) -> bool {
    map.osds.get(&id).is_some_and(|o| !o.up) && !map.holds_for(id, MapFlag::NoUp)
}

async fn boot_loop(s: &Shared, boot: Request) {
    let mut tries: u64 = 0;
    let mut pause = RETRY_AFTER;
    loop {
        let current = s.map.borrow().clone();
        if !current.as_ref().is_some_and(|m| must_boot(m, s.id)) {
            return;
        }
        tries += 1;
        match s
            .mon
            .op(boot.clone(), crate::convert::millis(BOOT_TIMEOUT))
            .await
        {
            Ok(reply) => {
                // The boot made an epoch: wait for it before judging whether to boot again,
                // so one answered boot never becomes two.
                let mut rx = s.map.clone();
                let seen = tokio::time::timeout(
                    MAP_WAIT,
                    rx.wait_for(|m| m.as_ref().is_some_and(|m| m.epoch >= reply.epoch)),
                )
                .await
                // Not the map's guard: it must not be held across the pause below.
                .map(|r| r.map(|_| ()));
                match seen {
                    Ok(Ok(_)) => {}
                    Ok(Err(_)) => return,
                    Err(_) => tracing::warn!(
                        osd = s.id,
                        epoch = reply.epoch,
                        "booted, but the map of that epoch did not come"
                    ),
                }
                // An answered boot that left the OSD down is not sent again at once.
                let still_down = s.map.borrow().as_ref().is_some_and(|m| must_boot(m, s.id));
                if still_down {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(RETRY_AT_MOST);
                }
            }
            Err(e) => {
                tracing::warn!(osd = s.id, tries, error = %e, "boot again failed; retrying");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(RETRY_AT_MOST);
            }
        }
    }
}
