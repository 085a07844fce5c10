//! Cleaning policy decisions (`alru`, `acp`, `nop`, plus the dirty-ratio target), as a pure
//! function of the cache's dirty state and virtual time.
//!
//! Owns *what* to clean and when to look again. It must never do I/O or read a clock: the cache
//! device passes `now_ms` in and carries out the decision, so tests run in virtual time.

use crate::config::{CleaningParams, CleaningPolicyKind};

/// The cache state a cleaning decision needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CleanInput {
    /// Current time, milliseconds on the cache's clock.
    pub now_ms: u64,
    /// Time of the last foreground request, milliseconds.
    pub last_io_ms: u64,
    /// Lines holding dirty data.
    pub dirty_lines: u64,
    /// Lines in the cache.
    pub total_lines: u64,
}

/// Which dirty lines to take first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CleanOrder {
    /// Longest-dirty first (alru, dirty target).
    OldestDirty,
    /// Ascending core address, so core writes are near-sequential (acp).
    CoreAddress,
}

/// What to clean now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CleanDecision {
    /// Most lines to clean in this round (0: nothing).
    pub max_lines: usize,
    /// Only lines dirty since at most this time (ms) qualify; `None`: any dirty line.
    pub dirty_before_ms: Option<u64>,
    /// Selection order.
    pub order: CleanOrder,
    /// When to ask again if this round cleans nothing, milliseconds.
    pub idle_wake_ms: u64,
}

/// Decides one cleaning round.
pub fn decide(p: &CleaningParams, input: CleanInput) -> CleanDecision {
    let over_target = p.dirty_target_pct > 0
        && input.dirty_lines * 100 > u64::from(p.dirty_target_pct) * input.total_lines;
    let nothing = |wake| CleanDecision {
        max_lines: 0,
        dirty_before_ms: None,
        order: CleanOrder::OldestDirty,
        idle_wake_ms: wake,
    };
    if input.dirty_lines == 0 {
        let wake = match p.policy {
            CleaningPolicyKind::Acp => u64::from(p.acp.wake_up_ms),
            _ => u64::from(p.alru.wake_up_s) * 1000,
        };
        return nothing(input.now_ms + wake);
    }
    if over_target {
        let batch = match p.policy {
            CleaningPolicyKind::Acp => p.acp.flush_max_buffers,
            _ => p.alru.flush_max_buffers,
        };
        return CleanDecision {
            max_lines: batch as usize,
            dirty_before_ms: None,
            order: CleanOrder::OldestDirty,
            idle_wake_ms: input.now_ms,
        };
    }
    match p.policy {
        CleaningPolicyKind::Nop => nothing(input.now_ms + u64::from(p.alru.wake_up_s) * 1000),
        CleaningPolicyKind::Acp => CleanDecision {
            max_lines: p.acp.flush_max_buffers as usize,
            dirty_before_ms: None,
            order: CleanOrder::CoreAddress,
            idle_wake_ms: input.now_ms + u64::from(p.acp.wake_up_ms),
        },
        CleaningPolicyKind::Alru => {
            let idle_since = input.last_io_ms + u64::from(p.alru.activity_threshold_ms);
            let wake = input.now_ms + u64::from(p.alru.wake_up_s) * 1000;
            if input.now_ms < idle_since {
                return nothing(wake.min(idle_since));
            }
            let staleness_ms = u64::from(p.alru.staleness_time_s) * 1000;
            let Some(dirty_before_ms) = input.now_ms.checked_sub(staleness_ms) else {
                return nothing(wake.min(staleness_ms));
            };
            CleanDecision {
                max_lines: p.alru.flush_max_buffers as usize,
                dirty_before_ms: Some(dirty_before_ms),
                order: CleanOrder::OldestDirty,
                idle_wake_ms: wake,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(now_ms: u64, last_io_ms: u64, dirty: u64) -> CleanInput {
        CleanInput {
            now_ms,
            last_io_ms,
            dirty_lines: dirty,
            total_lines: 100,
        }
    }

    #[test]
    fn alru_waits_for_idle_and_staleness() {
        let p = CleaningParams {
            dirty_target_pct: 0,
            ..Default::default()
        };
        let busy = decide(&p, input(50_000, 45_000, 10));
        assert_eq!(busy.max_lines, 0);
        assert_eq!(
            busy.idle_wake_ms, 55_000,
            "wakes when the activity threshold passes"
        );
        let young = decide(&p, input(100_000, 50_000, 10));
        assert_eq!(
            (young.max_lines, young.idle_wake_ms),
            (0, 120_000),
            "nothing can be stale yet"
        );
        let idle = decide(&p, input(200_000, 100_000, 10));
        assert_eq!(idle.max_lines, 100);
        assert_eq!(idle.dirty_before_ms, Some(80_000));
        assert_eq!(idle.order, CleanOrder::OldestDirty);
    }

    #[test]
    fn dirty_target_overrides_activity_for_every_policy() {
        for policy in [
            CleaningPolicyKind::Alru,
            CleaningPolicyKind::Nop,
            CleaningPolicyKind::Acp,
        ] {
            let mut p = CleaningParams {
                policy,
                dirty_target_pct: 50,
                ..Default::default()
            };
            let d = decide(&p, input(1000, 999, 51));
            assert!(d.max_lines > 0, "{policy:?}");
            assert_eq!(d.dirty_before_ms, None);
            p.dirty_target_pct = 0;
            let d = decide(&p, input(1000, 999, 51));
            assert_eq!(
                d.max_lines > 0,
                policy == CleaningPolicyKind::Acp,
                "{policy:?}"
            );
        }
    }

    #[test]
    fn acp_cleans_in_core_order_and_nothing_to_do_sleeps() {
        let p = CleaningParams {
            policy: CleaningPolicyKind::Acp,
            ..Default::default()
        };
        let d = decide(&p, input(10, 10, 3));
        assert_eq!(d.order, CleanOrder::CoreAddress);
        assert_eq!(d.max_lines, 128);
        let d = decide(&p, input(10, 10, 0));
        assert_eq!((d.max_lines, d.idle_wake_ms), (0, 20));
    }
}
