//! Background recovery that yields to clients by their measured latency.
//!
//! The scheduler orders work by a cost model; when the model's idea of the device is wrong (a
//! plain file on a shared host disk, several OSDs on one spindle) recovery's large writes fill
//! the device's own queue and a client's small write waits behind them whatever the policy:
//! on plain files a returning OSD's recovery left its clients 6-9% of their rate. The pacer
//! closes the loop on what the client sees instead. It follows two streams of small client
//! ops: those this OSD served as primary (end to end, its replicas included) and the client
//! writes it applied as a replica (its own device's share, which an OSD leading no client PG
//! still sees). Every [`TICK`] it compares each stream's mean latency with that stream's
//! level without recovery, and halves the background pushes allowed in flight when either is
//! more than `factor` times slower, or grows them by one (up to `osd_recovery_max_active`)
//! when neither is and this OSD's pushes used all it allowed (a recovery of one push at a time
//! earns no room for ten). It also halves them whenever the store's commit backlog passes
//! [`BACKLOG_SLOW`]: recovery's device I/O slows the checkpoints, and a store whose commits
//! wait for one stalls every client at once, before any mean shows it. Below one push the
//! allowance becomes a duty cycle: a push is followed by a pause of its own duration times
//! `1 / allowance - 1`, down to one push in [`MIN_ALLOWANCE`]'s inverse, so recovery slows
//! but never stops. A recovery starts slow: the first push after this OSD pushed nothing for
//! [`SETTLE_TICKS`] ticks finds the allowance at [`START_ALLOWANCE`] at most (see
//! [`Pacer::restart`]), so its pushes do not all land before any tick has judged them.
//!
//! The mean, not the median: the latency recovery adds lies in the tail (a small write that
//! waits behind a large push the scheduler has already released), which leaves the median
//! where it was, while a client keeping a constant number of ops in flight loses rate in
//! proportion to its mean latency (Little's law). A factor F on the mean is thus a floor of
//! about 1/F on such a client's rate.
//!
//! A stream with some but fewer than [`MIN_SAMPLES`] latencies in a tick carries them into
//! the next, up to [`MAX_POOL_TICKS`] ticks: the allowance then changes once per window of
//! pooled ticks, and what follows of ticks holds of windows.
//!
//! The level without recovery is a moving mean of the means of idle ticks (after
//! [`SETTLE_TICKS`] of them in a row): ticks in which no push of this OSD was in flight or
//! waiting, none arrived here, and the cluster served no PG from a temporary acting set — a
//! tick of a duty cycle's pause, or of another OSD's fill, is not a tick without recovery. A
//! stream with no such level yet is not paced on: without a measurement of the clients alone
//! there is nothing to hold their latency to.

use std::time::Duration;
use tokio::time::Instant;

use cairn_qos::PolicyConfig;

/// How often the allowance is reconsidered.
pub const TICK: Duration = Duration::from_millis(100);
/// The smallest allowance: one push for every 16 pushes' time.
pub const MIN_ALLOWANCE: f64 = 1.0 / 16.0;
/// Pushes a recovery starts with (see [`Pacer::restart`]): it grows by one per window in which
/// clients keep their pace, as after a halving, instead of starting at
/// `osd_recovery_max_active`.
pub const START_ALLOWANCE: f64 = 1.0;
/// Idle ticks in a row before their means count for the level without recovery (the
/// device drains what recovery left in its queue first).
pub const SETTLE_TICKS: u32 = 3;
/// Client latencies a stream's mean needs before it is judged: fewer (a slow client, a
/// rotational device) and ticks pool into one window, up to [`MAX_POOL_TICKS`], so that one
/// op stuck behind a push does not decide alone.
pub const MIN_SAMPLES: u64 = 16;
/// Most ticks pooled into one window.
pub const MAX_POOL_TICKS: u32 = 10;
/// Weight of a new idle tick in the level without recovery.
const IDLE_WEIGHT: f64 = 0.2;
/// A store backlog (see `cairn_store::Store::commit_backlog`) at which background pushes back
/// off whatever the latencies: halfway from where the store starts a checkpoint (0.5) to where
/// its commits wait for one (1.0). Recovery's device I/O slows the checkpoint's in-place
/// writes, and once commits wait, every client of the OSD stalls at once.
pub const BACKLOG_SLOW: f64 = 0.75;
/// Most an idle tick's mean counts for, as a multiple of the level it updates.
const MAX_IDLE_RISE: f64 = 2.0;
/// Largest factor accepted by the setting.
pub const MAX_FACTOR: f64 = 100.0;

/// The factor a policy implies when `osd_recovery_pacing_factor` is `auto`: mClock's
/// `high_client_ops` keeps clients within 1.2x of their latency without recovery,
/// `high_recovery_ops` lets them slow 2x, everything else 1.6x. A factor F on the mean
/// latency is a floor of about 1/F on a constant-depth client's rate, so each stays above
/// its profile's client reservation (high_recovery_ops: 30%) with room for a second's spread.
pub fn default_factor(policy: &PolicyConfig) -> f64 {
    match policy {
        PolicyConfig::Mclock(m) => match m.profile.as_str() {
            "high_client_ops" => 1.2,
            "high_recovery_ops" => 2.0,
            _ => 1.6,
        },
        _ => 1.6,
    }
}

/// The pacing setting: by the policy, a fixed factor, or off.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Factor {
    /// [`default_factor`] of the policy in force.
    Auto,
    /// Clients may be this many times slower (at least 1).
    Fixed(f64),
    /// No pacing: `osd_recovery_max_active` alone.
    Off,
}

impl Factor {
    /// Parses `auto`, `0` (off) or a factor in 1..=[`MAX_FACTOR`].
    pub fn parse(value: &str) -> Result<Factor, String> {
        let value = value.trim();
        if value == "auto" {
            return Ok(Factor::Auto);
        }
        let f: f64 = value
            .parse()
            .map_err(|_| format!("`{value}` is not `auto`, 0 or a factor"))?;
        if f == 0.0 {
            return Ok(Factor::Off);
        }
        if !(1.0..=MAX_FACTOR).contains(&f) {
            return Err(format!(
                "{f} is outside 1..={MAX_FACTOR} (0 turns pacing off)"
            ));
        }
        Ok(Factor::Fixed(f))
    }

    /// The factor in force where `auto` stands for `auto` (the policy's
    /// [`default_factor`]), None when off.
    pub fn resolve(self, auto: f64) -> Option<f64> {
        match self {
            Factor::Auto => Some(auto),
            Factor::Fixed(f) => Some(f),
            Factor::Off => None,
        }
    }
}

impl std::fmt::Display for Factor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Factor::Auto => write!(f, "auto"),
            Factor::Fixed(x) => write!(f, "{x}"),
            Factor::Off => write!(f, "0"),
        }
    }
}

/// Which latencies a sample belongs to: each kind has its own level without recovery.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    /// A client op this OSD served as primary, end to end (its replicas' commits included).
    Primary,
    /// A client write this OSD applied as a replica: what its own device costs a client, so
    /// an OSD that leads no client PG still sees its pushes slow the clients it serves.
    Replica,
}

/// One stream's latencies: this tick's sum and count, and its level without recovery.
#[derive(Debug, Default)]
struct Signal {
    sum_us: f64,
    count: u64,
    idle_level_us: Option<f64>,
    /// Settled idle ticks learned from.
    learned: u32,
}

impl Signal {
    fn observe(&mut self, latency: Duration) {
        self.sum_us += f64::from(crate::convert::micros_u32(latency));
        self.count += 1;
    }

    /// Whether the samples so far are too few for their mean to judge by (some, but fewer
    /// than [`MIN_SAMPLES`]).
    fn sparse(&self) -> bool {
        (1..MIN_SAMPLES).contains(&self.count)
    }

    /// Ends a window: its mean, None without samples.
    fn close(&mut self) -> Option<f64> {
        let mean = (self.count > 0).then(|| self.sum_us / self.count as f64);
        self.sum_us = 0.0;
        self.count = 0;
        mean
    }

    /// Counts a settled idle tick's mean towards the level without recovery. The first
    /// [`SETTLE_TICKS`] set it to the least of their means (one slow op in the first tick
    /// must not set a lax level); after them one tick raises it by at most [`IDLE_WEIGHT`]
    /// times [`MAX_IDLE_RISE`] (a stall that nothing flagged must not teach the pacer that
    /// slow is normal).
    fn learn(&mut self, mean: f64) {
        self.idle_level_us = Some(match self.idle_level_us {
            Some(level) if self.learned < SETTLE_TICKS => level.min(mean),
            Some(level) => level + IDLE_WEIGHT * (mean.min(level * MAX_IDLE_RISE) - level),
            None => mean,
        });
        self.learned = self.learned.saturating_add(1);
    }

    fn level(&self) -> Option<f64> {
        self.idle_level_us
    }
}

/// One OSD's pacer state (kept under the recovery throttle's lock).
#[derive(Debug)]
pub struct Pacer {
    primary: Signal,
    replica: Signal,
    backlog: f64,
    recovering: bool,
    /// Most of this OSD's pushes in flight or waiting at once in the current window.
    demand: usize,
    tick_started: Option<Instant>,
    /// Ticks pooled into the current window (see [`MIN_SAMPLES`]).
    pooled_ticks: u32,
    idle_streak: u32,
    allowance: f64,
}

impl Default for Pacer {
    fn default() -> Self {
        Pacer {
            primary: Signal::default(),
            replica: Signal::default(),
            backlog: 0.0,
            recovering: false,
            demand: 0,
            tick_started: None,
            pooled_ticks: 0,
            idle_streak: 0,
            allowance: START_ALLOWANCE,
        }
    }
}

impl Pacer {
    /// Counts one client op's latency of `stream` in the current tick.
    pub fn observe(&mut self, stream: Stream, latency: Duration) {
        match stream {
            Stream::Primary => self.primary.observe(latency),
            Stream::Replica => self.replica.observe(latency),
        }
    }

    /// Counts the store's commit backlog seen now (the tick keeps the highest).
    pub fn observe_backlog(&mut self, backlog: f64) {
        self.backlog = self.backlog.max(backlog);
    }

    /// Notes that recovery ran during the current tick: a push of this OSD was in flight or
    /// waiting for its turn, a push to this OSD arrived, or the cluster moved data. Such a
    /// tick never counts towards the level without recovery.
    pub fn note_recovering(&mut self) {
        self.recovering = true;
    }

    /// Counts `pushes` of this OSD in flight or waiting now (the window keeps the most); any
    /// is recovery.
    pub fn observe_demand(&mut self, pushes: usize) {
        self.demand = self.demand.max(pushes);
        if pushes > 0 {
            self.recovering = true;
        }
    }

    /// Starts a recovery slow: the allowance falls to [`START_ALLOWANCE`] if above it (one
    /// held back by slow clients stays where it is). Called when a push finds this OSD has
    /// pushed nothing for [`SETTLE_TICKS`] ticks, and when the setting changes.
    pub fn restart(&mut self) {
        self.allowance = self.allowance.min(START_ALLOWANCE);
    }

    /// Ends the current tick if it began [`TICK`] or more before `now` (`busy`: data moves
    /// beyond this OSD's pushes, see [`Pacer::note_recovering`]), adapting the allowance under
    /// `factor` (None: pacing off, which takes effect at once).
    pub fn maybe_tick(&mut self, now: Instant, busy: bool, max_active: usize, factor: Option<f64>) {
        if factor.is_none() {
            self.allowance = f64::INFINITY;
        }
        let started = *self.tick_started.get_or_insert(now);
        if now.duration_since(started) < TICK {
            return;
        }
        self.tick_started = Some(now);
        if busy {
            self.recovering = true;
        }
        self.tick(max_active, factor);
    }

    /// Ends a tick, with `max_active` pushes at most: see the module's documentation.
    pub fn tick(&mut self, max_active: usize, factor: Option<f64>) {
        let max = max_active.max(1) as f64;
        let backlog = std::mem::take(&mut self.backlog);
        let Some(factor) = factor else {
            self.close_window();
            self.allowance = f64::INFINITY;
            return;
        };
        if self.allowance.is_infinite() {
            // Pacing was off until now.
            self.allowance = START_ALLOWANCE;
        }
        if self.recovering && backlog >= BACKLOG_SLOW {
            self.close_window();
            self.idle_streak = 0;
            self.halve(max);
            return;
        }
        let limited = self.demand as f64 >= self.allowance.min(max).ceil();
        self.pooled_ticks += 1;
        let sparse = self.primary.sparse() || self.replica.sparse();
        if sparse && self.pooled_ticks < MAX_POOL_TICKS {
            return;
        }
        let (recovering, means) = self.close_window();
        if !recovering {
            self.idle_streak = self.idle_streak.saturating_add(1);
            if self.idle_streak >= SETTLE_TICKS {
                for (signal, mean) in [&mut self.primary, &mut self.replica]
                    .into_iter()
                    .zip(means)
                {
                    if let Some(m) = mean {
                        signal.learn(m);
                    }
                }
            }
            return;
        }
        self.idle_streak = 0;
        // Each stream with both a mean and a level says slow or not. No client, or none with
        // a level to hold it to: nothing to protect, so grow if the pushes wanted more.
        let slow = [&self.primary, &self.replica]
            .into_iter()
            .zip(means)
            .any(|(signal, mean)| {
                matches!((mean, signal.level()), (Some(m), Some(level)) if m > level * factor)
            });
        match (slow, limited) {
            (true, _) => self.halve(max),
            (false, true) => self.grow(max),
            (false, false) => {}
        }
    }

    /// Ends the window of pooled ticks: whether recovery ran in it, and each stream's mean.
    fn close_window(&mut self) -> (bool, [Option<f64>; 2]) {
        self.pooled_ticks = 0;
        self.demand = 0;
        let recovering = std::mem::take(&mut self.recovering);
        (recovering, [self.primary.close(), self.replica.close()])
    }

    /// Halves the allowance, down to the floor.
    fn halve(&mut self, max: f64) {
        self.allowance = (self.allowance.min(max) / 2.0).max(MIN_ALLOWANCE);
    }

    /// One step up, to `max` at most.
    fn grow(&mut self, max: f64) {
        assert!(self.allowance.is_finite(), "grown while pacing is off");
        self.allowance = match self.allowance < 1.0 {
            true => (self.allowance * 2.0).min(1.0),
            false => (self.allowance + 1.0).min(max),
        };
    }

    /// The client latency without recovery the pacer compares with, µs, of `stream`.
    pub fn level(&self, stream: Stream) -> Option<f64> {
        match stream {
            Stream::Primary => self.primary.level(),
            Stream::Replica => self.replica.level(),
        }
    }

    /// Background pushes allowed in flight now, at most `max_active`; below 1 a duty cycle.
    pub fn allowance(&self, max_active: usize) -> f64 {
        assert!(
            self.allowance >= MIN_ALLOWANCE,
            "the allowance fell below its floor"
        );
        self.allowance.min(max_active.max(1) as f64)
    }

    /// The pause after a push that held its slot for `held`, under allowance `allowance`.
    pub fn pause_after(held: Duration, allowance: f64) -> Duration {
        if allowance >= 1.0 {
            return Duration::ZERO;
        }
        held.mul_f64(1.0 / allowance.max(MIN_ALLOWANCE) - 1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tick_with(p: &mut Pacer, latency_ms: u64, recovering: bool, factor: f64) {
        for _ in 0..20 {
            p.observe(Stream::Primary, Duration::from_millis(latency_ms));
        }
        if recovering {
            p.observe_demand(MAX_ACTIVE);
        }
        p.tick(MAX_ACTIVE, Some(factor));
    }

    const MAX_ACTIVE: usize = 10;

    fn settled(level_ms: u64) -> Pacer {
        let mut p = Pacer::default();
        for _ in 0..SETTLE_TICKS + 2 {
            tick_with(&mut p, level_ms, false, 1.2);
        }
        p
    }

    /// A settled pacer whose recovery has grown to `osd_recovery_max_active` at the level.
    fn at_full_speed(level_ms: u64) -> Pacer {
        let mut p = settled(level_ms);
        for _ in 0..MAX_ACTIVE {
            tick_with(&mut p, level_ms, true, 1.2);
        }
        assert_eq!(p.allowance(MAX_ACTIVE), MAX_ACTIVE as f64);
        p
    }

    #[test]
    fn slow_clients_halve_the_allowance_down_to_a_duty_cycle_and_fast_ones_grow_it_back() {
        let mut p = at_full_speed(2);
        assert_eq!(p.level(Stream::Primary), Some(2000.0));
        tick_with(&mut p, 10, true, 1.2);
        assert_eq!(p.allowance(10), 5.0);
        for _ in 0..20 {
            tick_with(&mut p, 10, true, 1.2);
        }
        assert_eq!(p.allowance(10), MIN_ALLOWANCE, "never below the floor");
        tick_with(&mut p, 2, true, 1.2);
        assert_eq!(
            p.allowance(10),
            2.0 * MIN_ALLOWANCE,
            "doubles below one push"
        );
        for _ in 0..4 {
            tick_with(&mut p, 2, true, 1.2);
        }
        assert_eq!(p.allowance(10), 2.0, "then one more push per tick");
        for _ in 0..20 {
            tick_with(&mut p, 2, true, 1.2);
        }
        assert_eq!(p.allowance(10), 10.0, "up to osd_recovery_max_active");
    }

    #[test]
    fn a_tail_behind_pushes_slows_the_mean_and_holds_recovery_back() {
        let mut p = at_full_speed(2);
        for _ in 0..17 {
            p.observe(Stream::Primary, Duration::from_millis(2));
        }
        for _ in 0..3 {
            p.observe(Stream::Primary, Duration::from_millis(40));
        }
        p.observe_demand(MAX_ACTIVE);
        p.tick(MAX_ACTIVE, Some(2.0));
        assert_eq!(
            p.allowance(MAX_ACTIVE),
            5.0,
            "median 2 ms, but a mean of 7.7 ms leaves a constant-depth client 26% of its rate"
        );
    }

    #[test]
    fn the_factor_decides_what_counts_as_slow() {
        let mut p = at_full_speed(2);
        tick_with(&mut p, 3, true, 2.0);
        assert_eq!(p.allowance(10), 10.0, "1.5x is within a factor of 2");
        tick_with(&mut p, 5, true, 2.0);
        assert_eq!(p.allowance(10), 5.0, "2.5x is not");
        p.maybe_tick(Instant::now(), false, 8, None);
        assert_eq!(
            p.allowance(10),
            10.0,
            "off, at once: osd_recovery_max_active alone"
        );
        tick_with(&mut p, 2, true, 2.0);
        assert_eq!(
            p.allowance(10),
            START_ALLOWANCE + 1.0,
            "turned on again: starts at one push, and this tick's fast clients add one"
        );
    }

    #[test]
    fn a_recovery_starts_at_one_push_and_grows_while_clients_keep_their_pace() {
        let mut p = settled(2);
        assert_eq!(p.allowance(MAX_ACTIVE), START_ALLOWANCE, "before any push");
        for expected in 2..=4 {
            tick_with(&mut p, 2, true, 1.2);
            assert_eq!(p.allowance(MAX_ACTIVE), f64::from(expected));
        }
        p.restart();
        assert_eq!(
            p.allowance(MAX_ACTIVE),
            START_ALLOWANCE,
            "the next recovery starts slow again"
        );
        for _ in 0..20 {
            tick_with(&mut p, 40, true, 1.2);
        }
        p.restart();
        assert_eq!(
            p.allowance(MAX_ACTIVE),
            MIN_ALLOWANCE,
            "one held back by slow clients stays held"
        );
    }

    #[test]
    fn only_pushes_that_use_the_allowance_grow_it() {
        let mut p = settled(2);
        let tick_of = |p: &mut Pacer, pushes: usize| {
            for _ in 0..MIN_SAMPLES {
                p.observe(Stream::Primary, Duration::from_millis(2));
            }
            p.observe_demand(pushes);
            p.tick(MAX_ACTIVE, Some(1.2));
        };
        tick_of(&mut p, 1);
        assert_eq!(
            p.allowance(MAX_ACTIVE),
            2.0,
            "one push used the one allowed"
        );
        for _ in 0..5 {
            tick_of(&mut p, 1);
        }
        assert_eq!(
            p.allowance(MAX_ACTIVE),
            2.0,
            "one push at a time earns no room for more"
        );
        tick_of(&mut p, 3);
        assert_eq!(p.allowance(MAX_ACTIVE), 3.0, "more waiting than allowed");
    }

    #[test]
    fn recovery_elsewhere_holds_the_allowance_but_slow_clients_still_halve_it() {
        let mut p = at_full_speed(2);
        tick_with(&mut p, 40, true, 1.2);
        assert_eq!(p.allowance(MAX_ACTIVE), 5.0);
        for _ in 0..5 {
            for _ in 0..MIN_SAMPLES {
                p.observe(Stream::Primary, Duration::from_millis(2));
            }
            p.note_recovering();
            p.tick(MAX_ACTIVE, Some(1.2));
        }
        assert_eq!(
            p.allowance(MAX_ACTIVE),
            5.0,
            "another OSD's fill or a new map, none of this OSD's pushes: held"
        );
        assert_eq!(p.level(Stream::Primary), Some(2000.0), "and no idle time");
        for _ in 0..MIN_SAMPLES {
            p.observe(Stream::Primary, Duration::from_millis(40));
        }
        p.maybe_tick(Instant::now(), true, MAX_ACTIVE, Some(1.2));
        p.maybe_tick(Instant::now() + TICK, true, MAX_ACTIVE, Some(1.2));
        assert_eq!(p.allowance(MAX_ACTIVE), 2.5, "slow clients: halved anyway");
    }

    #[test]
    fn without_a_level_measured_alone_latency_paces_nothing() {
        let mut p = Pacer::default();
        for _ in 0..MAX_ACTIVE {
            tick_with(&mut p, 4, true, 1.2);
            tick_with(&mut p, 40, true, 1.2);
        }
        assert_eq!(p.level(Stream::Primary), None, "no idle tick yet");
        assert_eq!(
            p.allowance(MAX_ACTIVE),
            MAX_ACTIVE as f64,
            "grows as if no client were there"
        );
    }

    #[test]
    fn idle_ticks_settle_before_they_count_and_ticks_without_clients_grow() {
        let mut p = at_full_speed(2);
        tick_with(&mut p, 10, true, 1.2);
        tick_with(&mut p, 10, true, 1.2);
        assert_eq!(p.allowance(MAX_ACTIVE), 2.5);
        tick_with(&mut p, 8, false, 1.2);
        assert_eq!(
            p.level(Stream::Primary),
            Some(2000.0),
            "the device still drains recovery's writes"
        );
        p.observe_demand(MAX_ACTIVE);
        p.tick(MAX_ACTIVE, Some(1.2));
        assert_eq!(
            p.allowance(MAX_ACTIVE),
            3.5,
            "no client op: nothing to protect"
        );
    }

    /// A tick with one sample per stream given (ms).
    fn tick_streams(p: &mut Pacer, primary: Option<u64>, replica: Option<u64>, recovering: bool) {
        let streams = [(Stream::Primary, primary), (Stream::Replica, replica)];
        for (stream, ms) in streams {
            if let Some(ms) = ms {
                for _ in 0..MIN_SAMPLES {
                    p.observe(stream, Duration::from_millis(ms));
                }
            }
        }
        if recovering {
            p.observe_demand(MAX_ACTIVE);
        }
        p.tick(MAX_ACTIVE, Some(1.2));
    }

    #[test]
    fn slow_replica_writes_hold_recovery_back_where_no_client_op_is_led() {
        let mut p = Pacer::default();
        for _ in 0..SETTLE_TICKS + 2 {
            tick_streams(&mut p, None, Some(3), false);
        }
        assert_eq!(p.level(Stream::Replica), Some(3000.0));
        assert_eq!(p.level(Stream::Primary), None, "leads no client op");
        for _ in 0..MAX_ACTIVE {
            tick_streams(&mut p, None, Some(3), true);
        }
        tick_streams(&mut p, None, Some(9), true);
        assert_eq!(p.allowance(MAX_ACTIVE), 5.0, "its own device slows clients");
        let mut p = Pacer::default();
        for _ in 0..SETTLE_TICKS + 2 {
            tick_streams(&mut p, Some(2), Some(3), false);
        }
        for _ in 0..MAX_ACTIVE {
            tick_streams(&mut p, Some(2), Some(3), true);
        }
        tick_streams(&mut p, Some(2), Some(30), true);
        assert_eq!(
            p.allowance(MAX_ACTIVE),
            5.0,
            "fast primary ops do not excuse slow replica writes"
        );
        tick_streams(&mut p, Some(2), Some(3), true);
        assert_eq!(p.allowance(MAX_ACTIVE), 6.0, "both within the factor");
    }

    #[test]
    fn a_few_latencies_pool_over_ticks_before_they_judge() {
        let mut p = at_full_speed(2);
        let tick_of = |p: &mut Pacer, ms: u64, ops: u64| {
            for _ in 0..ops {
                p.observe(Stream::Primary, Duration::from_millis(ms));
            }
            p.observe_demand(MAX_ACTIVE);
            p.tick(MAX_ACTIVE, Some(3.0));
        };
        tick_of(&mut p, 40, 1);
        assert_eq!(p.pooled_ticks, 1, "one op is too few to judge by");
        tick_of(&mut p, 2, MIN_SAMPLES - 1);
        assert_eq!(p.pooled_ticks, 0, "judged once 16 ops are in");
        assert_eq!(
            p.allowance(MAX_ACTIVE),
            MAX_ACTIVE as f64,
            "one op behind a push among 16: (40 + 15 x 2) / 16 = 4.4 ms, within 3 x 2 ms"
        );
        for _ in 0..MAX_POOL_TICKS - 1 {
            tick_of(&mut p, 40, 1);
        }
        assert_eq!(p.allowance(MAX_ACTIVE), MAX_ACTIVE as f64);
        tick_of(&mut p, 40, 1);
        assert_eq!(
            p.allowance(MAX_ACTIVE),
            5.0,
            "ten slow ops over a second are judged at its end"
        );
    }

    #[test]
    fn the_first_level_is_the_least_of_the_settled_ticks() {
        let mut p = Pacer::default();
        for ms in [2, 2, 9, 3, 4] {
            tick_with(&mut p, ms, false, 1.2);
        }
        assert_eq!(
            p.level(Stream::Primary),
            Some(3000.0),
            "the first three settled ticks (9, 3, 4 ms) give 3 ms, not the 9 of the first"
        );
        tick_with(&mut p, 5, false, 1.2);
        assert_eq!(
            p.level(Stream::Primary),
            Some(3400.0),
            "then a moving mean: 3 ms + 0.2 x (5 ms - 3 ms)"
        );
    }

    #[test]
    fn one_slow_idle_tick_raises_the_level_a_little() {
        let mut p = settled(2);
        tick_with(&mut p, 500, false, 1.2);
        assert_eq!(
            p.level(Stream::Primary),
            Some(2400.0),
            "2 ms + 0.2 x (2 x 2 ms - 2 ms)"
        );
    }

    #[test]
    fn a_store_falling_behind_its_checkpoints_holds_pushes_back() {
        let mut p = at_full_speed(2);
        for _ in 0..MIN_SAMPLES {
            p.observe(Stream::Primary, Duration::from_millis(2));
        }
        p.observe_backlog(0.8);
        p.observe_demand(MAX_ACTIVE);
        p.tick(MAX_ACTIVE, Some(1.2));
        assert_eq!(
            p.allowance(MAX_ACTIVE),
            5.0,
            "fast clients, but commits near a wait"
        );
        p.observe_backlog(0.9);
        p.observe_demand(MAX_ACTIVE);
        p.tick(MAX_ACTIVE, Some(1.2));
        assert_eq!(
            p.allowance(MAX_ACTIVE),
            2.5,
            "no client op this tick: still held"
        );
        for _ in 0..MIN_SAMPLES {
            p.observe(Stream::Primary, Duration::from_millis(2));
        }
        p.observe_backlog(0.6);
        p.observe_demand(MAX_ACTIVE);
        p.tick(MAX_ACTIVE, Some(1.2));
        assert_eq!(
            p.allowance(MAX_ACTIVE),
            3.5,
            "a checkpoint's normal backlog"
        );
        p.observe_backlog(0.9);
        p.tick(MAX_ACTIVE, None);
        assert!(p.allowance(MAX_ACTIVE) >= MAX_ACTIVE as f64, "pacing off");
    }

    #[test]
    fn ticks_of_recovery_never_teach_the_level() {
        let mut p = settled(2);
        for _ in 0..50 {
            tick_with(&mut p, 20, true, 1.2);
        }
        assert_eq!(
            p.level(Stream::Primary),
            Some(2000.0),
            "a paused duty cycle or another OSD's fill is no idle time"
        );
        assert_eq!(p.allowance(MAX_ACTIVE), MIN_ALLOWANCE);
    }

    #[test]
    fn a_pause_stretches_a_push_to_the_duty_cycle() {
        let held = Duration::from_millis(10);
        assert_eq!(Pacer::pause_after(held, 2.0), Duration::ZERO);
        assert_eq!(Pacer::pause_after(held, 1.0), Duration::ZERO);
        assert_eq!(Pacer::pause_after(held, 0.25), Duration::from_millis(30));
        assert_eq!(
            Pacer::pause_after(held, 0.0),
            Duration::from_millis(150),
            "never beyond the floor"
        );
    }

    #[test]
    fn the_setting_is_auto_off_or_a_checked_factor() {
        assert_eq!(Factor::parse("auto"), Ok(Factor::Auto));
        assert_eq!(Factor::parse("0"), Ok(Factor::Off));
        assert_eq!(Factor::parse(" 1.5 "), Ok(Factor::Fixed(1.5)));
        for bad in ["0.5", "-1", "NaN", "1e9", "fast", ""] {
            assert!(Factor::parse(bad).is_err(), "{bad:?} must be refused");
        }
        let hco = default_factor(&PolicyConfig::by_name("mclock").unwrap());
        assert_eq!(hco, 1.2, "mClock's default profile is high_client_ops");
        assert_eq!(Factor::Auto.resolve(hco), Some(1.2));
        assert_eq!(Factor::Off.resolve(hco), None);
        assert_eq!(Factor::Fixed(2.0).resolve(hco), Some(2.0));
        assert_eq!(default_factor(&PolicyConfig::Fifo), 1.6);
        let hro = PolicyConfig::Mclock(cairn_qos::MClockConfig::profile(
            cairn_qos::config::Profile::HighRecoveryOps,
            1_000.0,
        ));
        assert_eq!(
            default_factor(&hro),
            2.0,
            "half the client's rate, above its 30% reservation"
        );
    }
}
