//! Commits slowed as the store nears the limit where they would wait for a checkpoint.
//!
//! Small writes on a data device that applies them slower than clients send them (an HDD under
//! its log on a DB device) fill the log faster than a checkpoint applies them in place. At the
//! log's hard limit every commit waits for the checkpoint in flight: a second or more with no
//! write answered, then a burst until the limit again. Slowing each group commit as the
//! backlog ([`crate::Store::commit_backlog`]) climbs past [`FROM`] spreads that wait over the
//! commits instead: the rate the device sustains in every second rather than bursts and
//! stalls. A delayed leader also lets more transactions join its group, so each record
//! carries more of them.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Backlog below which commits are never delayed: a checkpoint starts at 0.5, and one that
/// keeps pace with the commits ends before they log this much more. (Delays from 0.6 cost
/// an HDD under a DB device's log a fifth of the small writes it sustains.)
pub(crate) const FROM: f64 = 0.8;
/// Backlog at which the delay reaches [`MAX_DELAY`].
pub(crate) const FULL: f64 = 0.98;
/// The longest a group commit is delayed: a commit waiting at the hard limit waits for a whole
/// checkpoint (about a second on an HDD), so this is a fraction of that.
pub(crate) const MAX_DELAY: Duration = Duration::from_millis(100);

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

/// Whether a background checkpoint's thread runs, and a wake-up when it ends. The backlog
/// falls only once a finished checkpoint is taken in, which a committer does: so commits are
/// delayed only while the thread runs, and no longer than until it ends.
#[derive(Debug, Default)]
pub(crate) struct CheckpointSignal {
    running: AtomicBool,
    ended: tokio::sync::Notify,
}

impl CheckpointSignal {
    /// A checkpoint's thread is about to start.
    pub(crate) fn started(&self) {
        self.running.store(true, Ordering::SeqCst);
    }

    /// The checkpoint's thread has done its work (or never started).
    pub(crate) fn ended(&self) {
        self.running.store(false, Ordering::SeqCst);
        self.ended.notify_waiters();
    }

    /// Waits `delay`, or until the running checkpoint ends if that is sooner; returns at once
    /// when none runs. Returns whether it waited.
    pub(crate) async fn delay(&self, delay: Duration) -> bool {
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
        assert!(!signal.delay(long).await, "no checkpoint runs: no wait");
        signal.started();
        assert!(
            !signal.delay(Duration::ZERO).await,
            "no delay asked: no wait"
        );
        let waiting = {
            let signal = signal.clone();
            tokio::spawn(async move { signal.delay(long).await })
        };
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        signal.ended();
        let waited = tokio::time::timeout(Duration::from_secs(20), waiting)
            .await
            .expect("the wait ends with the checkpoint")
            .unwrap();
        assert!(waited);
    }
}
