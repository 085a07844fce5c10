//! Commits paced to the checkpoints, and slowed as the store nears the limit where they would
//! wait for one.
//!
//! Small writes on a data device that applies them slower than clients send them (an HDD under
//! its log on a DB device) fill the log faster than a checkpoint applies them in place. At the
//! log's hard limit every commit waits for the checkpoint in flight: a second or more with no
//! write answered, then a burst until the limit again. Two delays of the committers' leader
//! spread that wait over the commits instead, so clients get the rate the device sustains in
//! every second rather than bursts and stalls:
//!
//! * **Pacing.** While a checkpoint runs, the backlog ([`crate::Store::commit_backlog`]) is
//!   kept under a line from where it stood when the checkpoint started to [`PACE_TARGET`] at
//!   the checkpoint's expected end (its deferred blocks times what a block cost the recent
//!   checkpoints). Commits then arrive evenly over the checkpoint instead of filling the log in
//!   its first part and waiting through the rest.
//! * **Near the limit.** Past [`FROM`] the delay rises with the square of the way to [`FULL`],
//!   whatever the estimate says (a checkpoint may run longer than expected).
//!
//! A delayed leader also lets more transactions join its group, so each record carries more of
//! them.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Backlog below which commits are never delayed: a checkpoint starts at 0.5, and one that
/// keeps pace with the commits ends before they log this much more. (Delays from 0.6 cost
/// an HDD under a DB device's log a fifth of the small writes it sustains.)
pub(crate) const FROM: f64 = 0.8;
/// Backlog at which the delay reaches [`MAX_DELAY`].
pub(crate) const FULL: f64 = 0.98;
/// The longest a group commit is delayed: a commit waiting at the hard limit waits for a whole
/// checkpoint (about a second on an HDD), so this is a fraction of that.
pub(crate) const MAX_DELAY: Duration = Duration::from_millis(100);

/// The backlog pacing aims to reach just as a running checkpoint ends: short of the limit by a
/// margin for a checkpoint that runs a little longer than expected.
pub(crate) const PACE_TARGET: f64 = 0.95;
/// Weight of the newest checkpoint in the estimate of what one deferred block costs: recent
/// checkpoints count most, since the device's load changes (recovery starts, clients stop).
const COST_WEIGHT: f64 = 0.5;
/// Fewest deferred blocks a checkpoint applies for its time to join the estimate: a smaller
/// one's time is mostly its fixed part (flush, KV commit), which would make blocks look dear
/// and pace the next large checkpoint's commits far too slowly. (A small checkpoint's own
/// expected time, its blocks at the large ones' cost, errs short: less pacing, never more.)
const MIN_SAMPLE_BLOCKS: f64 = 64.0;

/// How long the next group commit waits at `backlog` while a checkpoint that started at
/// backlog `from` is `elapsed` into the `expected` time it takes: until the line from `from`
/// (at its start) to [`PACE_TARGET`] (at its expected end) reaches `backlog`, at most
/// [`MAX_DELAY`]. Nothing when the backlog is on or under the line, or when no line can be
/// drawn (no time expected, or the checkpoint started at the target already).
pub(crate) fn paced_delay(
    from: f64,
    expected: Duration,
    elapsed: Duration,
    backlog: f64,
) -> Duration {
    let span = PACE_TARGET - from;
    if expected.is_zero() || span.is_nan() || span <= 0.0 || backlog.is_nan() {
        return Duration::ZERO;
    }
    let slope = span / expected.as_secs_f64();
    let line = from + slope * elapsed.as_secs_f64();
    if backlog <= line {
        return Duration::ZERO;
    }
    Duration::try_from_secs_f64((backlog - line) / slope)
        .unwrap_or(MAX_DELAY)
        .min(MAX_DELAY)
}

/// How long the next group commit waits at `backlog` (0 to 1): nothing up to [`FROM`], then
/// rising with the square of the way to [`FULL`], so that a backlog just past the threshold
/// costs little and one near the limit slows commits to a few groups a second.
pub(crate) fn commit_delay(backlog: f64) -> Duration {
    if backlog.is_nan() || backlog <= FROM {
        return Duration::ZERO;
    }
    let over = ((backlog - FROM) / (FULL - FROM)).min(1.0);
    MAX_DELAY.mul_f64(over * over)
}

/// Whether a background checkpoint's thread runs, a wake-up when it ends, and what pacing
/// needs to know of it. The backlog falls only once a finished checkpoint is taken in, which a
/// committer does: so commits are delayed only while the thread runs, and no longer than until
/// it ends.
#[derive(Debug, Default)]
pub(crate) struct CheckpointSignal {
    running: AtomicBool,
    ended: tokio::sync::Notify,
    pace: Mutex<Pace>,
}

/// The running checkpoint as pacing sees it, and what a deferred block has cost lately.
#[derive(Debug, Default)]
struct Pace {
    current: Option<Running>,
    /// Seconds per deferred block, a weighted mean over the checkpoints that ended after
    /// applying at least [`MIN_SAMPLE_BLOCKS`]; `None` before the first.
    secs_per_block: Option<f64>,
}

/// A checkpoint in flight: when it started, the backlog then, and its deferred blocks.
#[derive(Debug, Clone, Copy)]
struct Running {
    started: Instant,
    from: f64,
    blocks: f64,
}

impl CheckpointSignal {
    /// A checkpoint's thread is about to start, at `backlog`, to apply `deferred_blocks`
    /// deferred writes in place.
    pub(crate) fn started(&self, backlog: f64, deferred_blocks: usize) {
        self.pace_state().current = Some(Running {
            started: Instant::now(),
            from: backlog,
            blocks: deferred_blocks as f64,
        });
        self.running.store(true, Ordering::SeqCst);
    }

    /// The checkpoint's thread has done its work (or never started). With `completed` (it
    /// ran to the end) and enough blocks, what a block cost joins the estimate; a checkpoint
    /// that never ran, ran inline or stopped early says nothing of the device's pace.
    pub(crate) fn ended(&self, completed: bool) {
        {
            let mut pace = self.pace_state();
            if let Some(run) = pace.current.take() {
                if completed && run.blocks >= MIN_SAMPLE_BLOCKS {
                    let cost = run.started.elapsed().as_secs_f64() / run.blocks;
                    pace.secs_per_block = Some(match pace.secs_per_block {
                        Some(old) => old + COST_WEIGHT * (cost - old),
                        None => cost,
                    });
                }
            }
        }
        self.running.store(false, Ordering::SeqCst);
        self.ended.notify_waiters();
    }

    /// How long the next group commit should wait at `backlog`: the longer of the pacing
    /// delay (with `pacing`, once a checkpoint has ended, so that there is an estimate) and
    /// the delay near the limit. Nothing when no checkpoint runs.
    pub(crate) fn delay_for(&self, backlog: f64, pacing: bool) -> Duration {
        self.delay_at(backlog, pacing, Instant::now())
    }

    /// [`CheckpointSignal::delay_for`] as of `now`.
    fn delay_at(&self, backlog: f64, pacing: bool, now: Instant) -> Duration {
        if !self.running.load(Ordering::SeqCst) {
            return Duration::ZERO;
        }
        let near_limit = commit_delay(backlog);
        if !pacing {
            return near_limit;
        }
        let pace = self.pace_state();
        let paced = match (pace.current, pace.secs_per_block) {
            (Some(run), Some(cost)) => paced_delay(
                run.from,
                Duration::try_from_secs_f64(cost * run.blocks).unwrap_or(Duration::ZERO),
                now.saturating_duration_since(run.started),
                backlog,
            ),
            _ => Duration::ZERO,
        };
        near_limit.max(paced)
    }

    fn pace_state(&self) -> std::sync::MutexGuard<'_, Pace> {
        self.pace
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Waits `delay`, or until the running checkpoint ends if that is sooner; returns at once
    /// when none runs. Returns whether it waited.
    pub(crate) async fn wait(&self, delay: Duration) -> bool {
        if delay.is_zero() {
            return false;
        }
        let ended = self.ended.notified();
        tokio::pin!(ended);
        ended.as_mut().enable();
        if !self.running.load(Ordering::SeqCst) {
            return false;
        }
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            () = ended => {}
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_delay_until_the_threshold_then_rising_to_the_cap() {
        for b in [f64::NAN, -1.0, 0.0, 0.5, FROM] {
            assert_eq!(commit_delay(b), Duration::ZERO, "backlog {b}");
        }
        let mut last = Duration::ZERO;
        for step in 1..=50 {
            let b = FROM + (1.0 - FROM) * f64::from(step) / 50.0;
            let d = commit_delay(b);
            assert!(
                d >= last,
                "the delay never falls as the backlog rises ({b})"
            );
            assert!(d <= MAX_DELAY, "capped ({b}: {d:?})");
            last = d;
        }
        assert_eq!(commit_delay(FULL), MAX_DELAY);
        assert_eq!(commit_delay(1.0), MAX_DELAY);
        assert_eq!(commit_delay(7.0), MAX_DELAY);
        let halfway = commit_delay((FROM + FULL) / 2.0);
        assert!(
            halfway > Duration::from_millis(24) && halfway < Duration::from_millis(26),
            "a quarter of the cap halfway: {halfway:?}"
        );
    }

    #[tokio::test]
    async fn a_delay_waits_only_while_a_checkpoint_runs_and_ends_with_it() {
        let signal = std::sync::Arc::new(CheckpointSignal::default());
        let long = Duration::from_secs(3600);
        assert!(!signal.wait(long).await, "no checkpoint runs: no wait");
        signal.started(0.5, 10);
        assert!(
            !signal.wait(Duration::ZERO).await,
            "no delay asked: no wait"
        );
        let waiting = {
            let signal = signal.clone();
            tokio::spawn(async move { signal.wait(long).await })
        };
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        signal.ended(true);
        let waited = tokio::time::timeout(Duration::from_secs(20), waiting)
            .await
            .expect("the wait ends with the checkpoint")
            .unwrap();
        assert!(waited);
    }

    #[test]
    fn pacing_holds_the_backlog_under_the_line_to_the_target() {
        let expected = Duration::from_secs(2);
        let at = |ms: u64| Duration::from_millis(ms);
        assert_eq!(paced_delay(0.5, expected, at(0), 0.5), Duration::ZERO);
        assert_eq!(
            paced_delay(0.5, expected, at(1000), 0.7),
            Duration::ZERO,
            "under the line halfway through (0.725)"
        );
        let d = paced_delay(0.5, expected, at(1000), 0.74);
        assert!(
            d > at(65) && d < at(68),
            "0.015 over a line climbing 0.225/s: {d:?}"
        );
        assert_eq!(paced_delay(0.5, expected, at(0), 0.9), MAX_DELAY, "capped");
        assert_eq!(
            paced_delay(0.5, expected, at(5000), 0.97),
            Duration::ZERO,
            "past the expected end the line is past the backlog"
        );
        for (from, expected, backlog) in [
            (0.5, Duration::ZERO, 0.9),
            (PACE_TARGET, expected, 0.99),
            (0.97, expected, 0.99),
            (0.5, expected, f64::NAN),
        ] {
            assert_eq!(
                paced_delay(from, expected, at(0), backlog),
                Duration::ZERO,
                "no line: from {from}, {expected:?}, at {backlog}"
            );
        }
    }

    #[test]
    fn pacing_starts_once_a_checkpoint_has_shown_what_a_block_costs() {
        let signal = CheckpointSignal::default();
        assert_eq!(signal.delay_for(0.9, true), Duration::ZERO, "none runs");
        signal.started(0.5, 1000);
        assert_eq!(
            signal.delay_for(0.75, true),
            Duration::ZERO,
            "no estimate yet, and under the threshold near the limit"
        );
        assert_eq!(signal.delay_for(FULL, true), MAX_DELAY, "near the limit");
        std::thread::sleep(Duration::from_millis(200));
        signal.ended(true);
        let cost = signal.pace_state().secs_per_block.expect("an estimate");
        assert!((0.2 / 1000.0..1.0).contains(&cost), "{cost}");

        signal.started(0.5, 1000);
        let start = signal.pace_state().current.expect("running").started;
        assert_eq!(
            signal.delay_at(0.75, true, start),
            MAX_DELAY,
            "0.25 over the line at the start of a checkpoint expected to last 200 ms or more"
        );
        assert_eq!(
            signal.delay_at(0.5, true, start),
            Duration::ZERO,
            "on the line"
        );
        assert_eq!(
            signal.delay_at(0.75, false, start),
            Duration::ZERO,
            "pacing off: only the delay near the limit"
        );
        signal.ended(true);
        assert_eq!(signal.delay_for(0.9, true), Duration::ZERO, "ended");
    }

    #[test]
    fn only_completed_checkpoints_with_enough_blocks_join_the_estimate() {
        let signal = CheckpointSignal::default();
        for (blocks, completed) in [(1000, false), (10, true), (0, true)] {
            signal.started(0.5, blocks);
            std::thread::sleep(Duration::from_millis(5));
            signal.ended(completed);
            assert!(
                signal.pace_state().secs_per_block.is_none(),
                "{blocks} blocks, completed {completed}: no estimate"
            );
        }
        signal.started(0.5, 1000);
        std::thread::sleep(Duration::from_millis(50));
        signal.ended(true);
        let cost = signal.pace_state().secs_per_block.expect("an estimate");
        signal.started(0.5, 0);
        let start = signal.pace_state().current.expect("running").started;
        assert_eq!(
            signal.delay_at(0.75, true, start),
            Duration::ZERO,
            "a checkpoint without deferred blocks is not paced"
        );
        signal.ended(true);
        assert_eq!(
            signal.pace_state().secs_per_block,
            Some(cost),
            "and leaves the estimate as it was"
        );
    }
}
