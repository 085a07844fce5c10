//! Ceph's throttles on background recovery, live-settable with `config set`:
//! `osd_max_backfills` (how many PG fills this OSD takes part in at once: as the primary that
//! fills, a local reservation; as the copy filled, a remote one: each kind counts apart, as
//! Ceph's local and remote reservers do), `osd_recovery_max_active` (background recovery
//! pushes in flight on this OSD; 0 picks 3 on a rotational device, 10 on others, as Ceph's
//! `_hdd`/`_ssd` variants, but 1 on a rotational device under mClock's `high_client_ops`) and
//! `osd_recovery_sleep_{hdd,ssd,hybrid}` (a pause after each background recovery step, for
//! the queues that do not meter recovery themselves: ignored under mClock, as in Ceph).
//! Recovery a client waits on is never throttled here. Beneath `osd_recovery_max_active`, the
//! pacer ([`crate::pacing`]) lowers the pushes allowed in flight while clients are slowed by
//! more than `osd_recovery_pacing_factor`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::time::Instant;

use cairn_clustermap::PgId;
use cairn_qos::PolicyConfig;
use cairn_store::BacklogGauge;
use tokio::sync::Notify;

use crate::pacing::{Factor, Pacer, Stream};

/// The settings this module owns, in `config get/set/show` order.
pub const KEYS: [&str; 6] = [
    "osd_max_backfills",
    "osd_recovery_max_active",
    "osd_recovery_sleep_hdd",
    "osd_recovery_sleep_ssd",
    "osd_recovery_sleep_hybrid",
    "osd_recovery_pacing_factor",
];

/// Most fills or pushes a setting may allow at once (a typo of 1e9 must not disable the
/// throttle silently).
const MAX_SLOTS: usize = 1024;
/// How long after a new map epoch client latencies do not count as ones without recovery.
pub const MAP_QUIET: Duration = Duration::from_secs(3);
/// Longest recovery sleep, in seconds.
const MAX_SLEEP_S: f64 = 60.0;

/// The throttles' settings (Ceph's names and defaults).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Settings {
    /// `osd_max_backfills`: fills at once per kind of reservation (1..=1024).
    pub max_backfills: usize,
    /// `osd_recovery_max_active`: background pushes in flight; 0: by device kind.
    pub max_active: usize,
    /// `osd_recovery_sleep_hdd`, seconds.
    pub sleep_hdd_s: f64,
    /// `osd_recovery_sleep_ssd`, seconds.
    pub sleep_ssd_s: f64,
    /// `osd_recovery_sleep_hybrid`, seconds (a rotational device with a fast DB device).
    pub sleep_hybrid_s: f64,
    /// `osd_recovery_pacing_factor`: how much slower than without recovery clients may get
    /// before background recovery backs off (see [`crate::pacing`]).
    pub pacing: Factor,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            max_backfills: 1,
            max_active: 0,
            sleep_hdd_s: 0.1,
            sleep_ssd_s: 0.0,
            sleep_hybrid_s: 0.025,
            pacing: Factor::Auto,
        }
    }
}

/// The kind of device recovery runs on, which picks the `_hdd`/`_ssd`/`_hybrid` variants.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DeviceKind {
    /// A rotational device.
    Hdd,
    /// A solid-state device.
    Ssd,
    /// A rotational device with a fast device beside it (a DB device or an SSD cache).
    Hybrid,
}

/// Background pushes in flight on a rotational device when `osd_recovery_max_active` is 0:
/// Ceph's 3, but 1 under mClock's `high_client_ops`, whose promise is the client first. A
/// recovery push on a disk is a long sequential transfer that every client write queued
/// behind it waits out, and the scheduler can only order what is not yet on the device.
fn rotational_active(policy: &PolicyConfig) -> usize {
    match policy {
        PolicyConfig::Mclock(m) if m.profile == "high_client_ops" => 1,
        _ => 3,
    }
}

/// A remote reservation: granted to `primary` for the PG's interval of `epoch`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Grant {
    primary: i32,
    epoch: u64,
}

#[derive(Debug, Default)]
struct State {
    settings: Settings,
    local: BTreeSet<PgId>,
    remote: BTreeMap<PgId, Grant>,
    active: usize,
    pacer: Pacer,
    /// The factor `auto` stands for under the scheduler's policy now.
    auto_factor: f64,
    /// The pushes in flight `osd_recovery_max_active` 0 stands for on a rotational device
    /// under the scheduler's policy now.
    auto_rotational_active: usize,
    /// No push starts before this (the pacer's pause after the last one).
    not_before: Option<Instant>,
    /// Pushes waiting for a slot.
    waiting: usize,
    /// When this OSD last had a push in flight or waiting (None: never).
    last_pushing: Option<Instant>,
    /// Whether the newest map leaves data to move: a PG served from a temporary acting set,
    /// or an OSD that is in but down.
    unsettled: bool,
    /// The newest map's epoch, and until when its changes count as unsettled (peering).
    map_epoch: u64,
    quiet_until: Option<Instant>,
}

/// One OSD's recovery throttles.
#[derive(Debug)]
pub struct RecoveryThrottle {
    device: DeviceKind,
    /// The store's commit backlog, which the pacer reads every tick.
    backlog: BacklogGauge,
    state: Mutex<State>,
    freed: Notify,
}

/// A local fill reservation: released when dropped.
#[derive(Debug)]
pub struct LocalReservation {
    throttle: Arc<RecoveryThrottle>,
    pg: PgId,
}

impl Drop for LocalReservation {
    fn drop(&mut self) {
        self.throttle.lock().local.remove(&self.pg);
    }
}

/// One background push in flight: its slot is freed when dropped (and, while the pacer
/// allows less than one push, the next waits out a pause in proportion to this one).
#[derive(Debug)]
pub struct ActiveSlot<'a> {
    throttle: &'a RecoveryThrottle,
    taken: Instant,
}

impl Drop for ActiveSlot<'_> {
    fn drop(&mut self) {
        let mut st = self.throttle.lock();
        assert!(st.active > 0, "a recovery slot freed twice");
        st.active -= 1;
        st.last_pushing = Some(Instant::now());
        let max = self.throttle.max_active_in(&st);
        let pause = Pacer::pause_after(self.taken.elapsed(), st.pacer.allowance(max));
        if !pause.is_zero() {
            let until = Instant::now() + pause;
            st.not_before = Some(st.not_before.map_or(until, |t| t.max(until)));
        }
        drop(st);
        self.throttle.freed.notify_waiters();
    }
}

/// A push waiting for its slot, counted while it waits (also when its task is dropped).
struct Waiting<'a>(&'a RecoveryThrottle);

impl<'a> Waiting<'a> {
    fn new(throttle: &'a RecoveryThrottle) -> Self {
        throttle.lock().waiting += 1;
        Waiting(throttle)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let mut st = self.0.lock();
        assert!(st.waiting > 0, "a waiting push counted out twice");
        st.waiting -= 1;
        st.last_pushing = Some(Instant::now());
    }
}

impl RecoveryThrottle {
    /// Throttles with Ceph's defaults for a device of `device` kind, pacing by the store
    /// commit backlog `backlog` too.
    pub fn new(device: DeviceKind, backlog: BacklogGauge) -> Self {
        RecoveryThrottle {
            device,
            backlog,
            state: Mutex::new(State {
                auto_factor: crate::pacing::default_factor(&PolicyConfig::Fifo),
                auto_rotational_active: rotational_active(&PolicyConfig::Fifo),
                ..State::default()
            }),
            freed: Notify::new(),
        }
    }

    /// Takes the pacing factor `auto` and the pushes `osd_recovery_max_active` 0 stand for
    /// from the scheduler's `policy` (at boot and whenever the policy changes).
    pub fn follow_policy(&self, policy: &PolicyConfig) {
        let mut st = self.lock();
        st.auto_factor = crate::pacing::default_factor(policy);
        st.auto_rotational_active = rotational_active(policy);
    }

    /// Counts a small client op of `stream` (served as primary, end to end, or applied as a
    /// replica) that took `latency`, for the pacer.
    pub fn observe_client_op(&self, stream: Stream, latency: Duration) {
        let mut st = self.lock();
        st.pacer.observe(stream, latency);
        self.tick_in(&mut st);
    }

    /// Notes a background push that arrived here (this OSD's copy is being filled or
    /// recovered): its writes load this device, so the tick is not one without recovery.
    pub fn note_push_received(&self) {
        let mut st = self.lock();
        st.pacer.note_recovering();
        self.tick_in(&mut st);
    }

    /// Notes the newest map, of `epoch`, and whether it leaves data to move (`unsettled`: a PG
    /// served from a temporary acting set, an OSD in but down). No tick counts as one without
    /// recovery while it does, nor within [`MAP_QUIET`] of a new epoch (PGs peer, and ops
    /// that waited on a failed OSD complete late).
    pub fn note_new_map(&self, epoch: u64, unsettled: bool) {
        let mut st = self.lock();
        st.unsettled = unsettled;
        if epoch != st.map_epoch {
            st.map_epoch = epoch;
            st.quiet_until = Some(Instant::now() + MAP_QUIET);
        }
    }

    /// Ends the pacer's tick when it is due.
    fn tick_in(&self, st: &mut State) {
        let max = self.max_active_in(st);
        let factor = st.settings.pacing.resolve(st.auto_factor);
        let now = Instant::now();
        let busy = st.unsettled
            || st.quiet_until.is_some_and(|t| t > now)
            || st.not_before.is_some_and(|t| t > now);
        let demand = st.active + st.waiting;
        let before = st.pacer.allowance(max);
        st.pacer.observe_backlog(self.backlog.get());
        st.pacer.observe_demand(demand);
        st.pacer.maybe_tick(now, busy, max, factor);
        st.pacer.observe_demand(demand);
        if st.pacer.allowance(max) > before {
            // Pushes waiting for a freed slot may take the new room at once.
            self.freed.notify_waiters();
        }
    }

    /// Background pushes the pacer allows in flight now (below 1: a duty cycle), and the
    /// client latencies without recovery it compares with, ms: of the ops served as primary
    /// and of the writes applied as a replica.
    pub fn pacing(&self) -> (f64, Option<f64>, Option<f64>) {
        let mut st = self.lock();
        self.tick_in(&mut st);
        let max = self.max_active_in(&st);
        let ms = |us: f64| us / 1000.0;
        (
            st.pacer.allowance(max),
            st.pacer.level(Stream::Primary).map(ms),
            st.pacer.level(Stream::Replica).map(ms),
        )
    }

    /// The kind of device these throttles were made for.
    pub fn device(&self) -> DeviceKind {
        self.device
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The settings in force.
    pub fn settings(&self) -> Settings {
        self.lock().settings
    }

    /// Background pushes allowed in flight: `osd_recovery_max_active`, or by device kind.
    pub fn max_active(&self) -> usize {
        self.max_active_in(&self.lock())
    }

    /// The pause after each background recovery step; none under mClock, which meters
    /// recovery itself.
    pub fn sleep(&self, mclock: bool) -> Duration {
        if mclock {
            return Duration::ZERO;
        }
        let s = self.settings();
        let secs = match self.device {
            DeviceKind::Hdd => s.sleep_hdd_s,
            DeviceKind::Ssd => s.sleep_ssd_s,
            DeviceKind::Hybrid => s.sleep_hybrid_s,
        };
        Duration::from_secs_f64(secs)
    }

    /// Takes a local reservation for filling `pg` from this OSD, if fewer than
    /// `osd_max_backfills` are held (one PG holds at most one).
    pub fn reserve_local(self: &Arc<Self>, pg: PgId) -> Option<LocalReservation> {
        let mut st = self.lock();
        if st.local.contains(&pg) || st.local.len() >= st.settings.max_backfills {
            return None;
        }
        st.local.insert(pg);
        Some(LocalReservation {
            throttle: self.clone(),
            pg,
        })
    }

    /// Grants `primary` a remote reservation to fill this OSD's copy of `pg` in the interval
    /// begun at `epoch`, if fewer than `osd_max_backfills` are held; a grant for the same PG
    /// is renewed. Grants for which `stale` holds (their PG moved to a later interval, their
    /// primary died) are dropped first: a primary that never releases cannot hold one forever.
    pub fn reserve_remote(
        &self,
        pg: PgId,
        primary: i32,
        epoch: u64,
        stale: impl Fn(PgId, u64) -> bool,
    ) -> bool {
        self.drop_stale(&stale);
        let mut st = self.lock();
        if !st.remote.contains_key(&pg) && st.remote.len() >= st.settings.max_backfills {
            return false;
        }
        st.remote.insert(pg, Grant { primary, epoch });
        true
    }

    /// Drops the remote grants for which `stale` holds (given the PG and the grant's epoch).
    pub fn drop_stale(&self, stale: impl Fn(PgId, u64) -> bool) {
        self.lock().remote.retain(|&p, g| !stale(p, g.epoch));
    }

    /// Releases `primary`'s remote reservation of `pg` (a later one of another primary stays).
    pub fn release_remote(&self, pg: PgId, primary: i32) {
        let mut st = self.lock();
        if st.remote.get(&pg).is_some_and(|g| g.primary == primary) {
            st.remote.remove(&pg);
        }
    }

    /// The PGs holding local and remote reservations now.
    pub fn reservations(&self) -> (Vec<PgId>, Vec<PgId>) {
        let st = self.lock();
        (
            st.local.iter().copied().collect(),
            st.remote.keys().copied().collect(),
        )
    }

    /// Waits for a slot for one background push: fewer than `osd_recovery_max_active` in
    /// flight, and fewer than the pacer allows, after its pause.
    pub async fn active_slot(&self) -> ActiveSlot<'_> {
        {
            let mut st = self.lock();
            let quiet_for = crate::pacing::TICK * crate::pacing::SETTLE_TICKS;
            let pushed_lately = st
                .last_pushing
                .is_some_and(|t| Instant::now().duration_since(t) < quiet_for);
            if st.active == 0 && st.waiting == 0 && !pushed_lately {
                st.pacer.restart();
            }
        }
        let _waiting = Waiting::new(self);
        loop {
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            let paused = {
                let mut st = self.lock();
                self.tick_in(&mut st);
                let now = Instant::now();
                let allowed =
                    crate::convert::sat_usize(st.pacer.allowance(self.max_active_in(&st)).ceil());
                match st.not_before.filter(|t| *t > now) {
                    Some(t) => Some(t - now),
                    None if st.active < allowed => {
                        st.active += 1;
                        st.not_before = None;
                        st.pacer.note_recovering();
                        return ActiveSlot {
                            throttle: self,
                            taken: now,
                        };
                    }
                    None => None,
                }
            };
            match paused {
                Some(left) => tokio::time::sleep(left).await,
                None => freed.await,
            }
        }
    }

    fn max_active_in(&self, st: &State) -> usize {
        match (st.settings.max_active, self.device) {
            (0, DeviceKind::Ssd) => 10,
            (0, _) => st.auto_rotational_active,
            (n, _) => n,
        }
    }

    /// The value of one of [`KEYS`], or None for another key.
    pub fn get(&self, key: &str) -> Option<String> {
        let s = self.settings();
        Some(match key {
            "osd_max_backfills" => s.max_backfills.to_string(),
            "osd_recovery_max_active" => s.max_active.to_string(),
            "osd_recovery_sleep_hdd" => s.sleep_hdd_s.to_string(),
            "osd_recovery_sleep_ssd" => s.sleep_ssd_s.to_string(),
            "osd_recovery_sleep_hybrid" => s.sleep_hybrid_s.to_string(),
            "osd_recovery_pacing_factor" => s.pacing.to_string(),
            _ => return None,
        })
    }

    /// Sets one of [`KEYS`] from `value`, checked against its range; what now holds.
    pub fn set(&self, key: &str, value: &str) -> Result<String, String> {
        let value = value.trim();
        let slots = |min: usize| -> Result<usize, String> {
            let n: usize = value
                .parse()
                .map_err(|_| format!("{key}: `{value}` is not a whole number"))?;
            if !(min..=MAX_SLOTS).contains(&n) {
                return Err(format!("{key}: {n} is outside {min}..={MAX_SLOTS}"));
            }
            Ok(n)
        };
        let secs = || -> Result<f64, String> {
            let s: f64 = value
                .parse()
                .map_err(|_| format!("{key}: `{value}` is not a number of seconds"))?;
            if !(0.0..=MAX_SLEEP_S).contains(&s) {
                return Err(format!("{key}: {s} s is outside 0..={MAX_SLEEP_S} s"));
            }
            Ok(s)
        };
        let mut st = self.lock();
        match key {
            "osd_max_backfills" => st.settings.max_backfills = slots(1)?,
            "osd_recovery_max_active" => st.settings.max_active = slots(0)?,
            "osd_recovery_sleep_hdd" => st.settings.sleep_hdd_s = secs()?,
            "osd_recovery_sleep_ssd" => st.settings.sleep_ssd_s = secs()?,
            "osd_recovery_sleep_hybrid" => st.settings.sleep_hybrid_s = secs()?,
            "osd_recovery_pacing_factor" => {
                st.settings.pacing = Factor::parse(value).map_err(|e| format!("{key}: {e}"))?;
                st.pacer.restart();
            }
            other => return Err(format!("`{other}` is not a recovery throttle")),
        }
        drop(st);
        // A raised limit lets waiting pushes go at once.
        self.freed.notify_waiters();
        Ok(format!(
            "{key} set to {}; fills and recovery pushes started from now on follow it\n",
            self.get(key).unwrap_or_default()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pg(seed: u32) -> PgId {
        PgId { pool: 1, seed }
    }

    #[test]
    fn local_reservations_are_capped_and_freed_on_drop() {
        let t = Arc::new(RecoveryThrottle::new(
            DeviceKind::Hdd,
            BacklogGauge::default(),
        ));
        let a = t.reserve_local(pg(0)).expect("the first fill reserves");
        assert!(t.reserve_local(pg(1)).is_none(), "osd_max_backfills is 1");
        assert!(t.reserve_local(pg(0)).is_none(), "one reservation per PG");
        drop(a);
        let b = t.reserve_local(pg(1)).expect("freed by the drop");
        t.set("osd_max_backfills", "2").unwrap();
        let c = t.reserve_local(pg(2)).expect("raised to two");
        assert_eq!(t.reservations().0, vec![pg(1), pg(2)]);
        drop((b, c));
        assert!(t.reservations().0.is_empty());
    }

    #[test]
    fn remote_grants_are_capped_renewed_released_and_dropped_when_stale() {
        let t = RecoveryThrottle::new(DeviceKind::Ssd, BacklogGauge::default());
        let never = |_: PgId, _: u64| false;
        assert!(t.reserve_remote(pg(0), 3, 10, never));
        assert!(!t.reserve_remote(pg(1), 4, 10, never), "full");
        assert!(t.reserve_remote(pg(0), 3, 11, never), "renewed");
        t.release_remote(pg(0), 4);
        assert!(!t.reserve_remote(pg(1), 4, 10, never), "not its primary's");
        t.release_remote(pg(0), 3);
        assert!(t.reserve_remote(pg(1), 4, 10, never));
        // The holder's interval ended without a release.
        assert!(t.reserve_remote(pg(2), 5, 12, |p, e| p == pg(1) && e == 10));
        assert_eq!(t.reservations().1, vec![pg(2)]);
    }

    #[test]
    fn high_client_ops_keeps_one_recovery_push_on_a_rotational_device_unless_set() {
        let hco = PolicyConfig::by_name("mclock").unwrap();
        let PolicyConfig::Mclock(m) = &hco else {
            panic!("mclock is an mClock policy: {hco:?}");
        };
        assert_eq!(m.profile, "high_client_ops", "the default profile");
        let mut balanced = m.clone();
        balanced.profile = "balanced".into();
        for kind in [DeviceKind::Hdd, DeviceKind::Hybrid] {
            let t = RecoveryThrottle::new(kind, BacklogGauge::default());
            t.follow_policy(&hco);
            assert_eq!(t.max_active(), 1, "{kind:?}");
            t.follow_policy(&PolicyConfig::Mclock(balanced.clone()));
            assert_eq!(t.max_active(), 3, "{kind:?}: other profiles keep Ceph's");
            t.follow_policy(&hco);
            t.set("osd_recovery_max_active", "4").unwrap();
            assert_eq!(t.max_active(), 4, "{kind:?}: a setting wins");
        }
        let ssd = RecoveryThrottle::new(DeviceKind::Ssd, BacklogGauge::default());
        ssd.follow_policy(&hco);
        assert_eq!(ssd.max_active(), 10);
    }

    #[test]
    fn settings_are_checked_and_sleeps_follow_the_device_and_queue() {
        let hdd = RecoveryThrottle::new(DeviceKind::Hdd, BacklogGauge::default());
        assert_eq!(hdd.max_active(), 3);
        assert_eq!(hdd.sleep(false), Duration::from_millis(100));
        assert_eq!(
            hdd.sleep(true),
            Duration::ZERO,
            "mClock meters recovery itself"
        );
        assert_eq!(
            RecoveryThrottle::new(DeviceKind::Ssd, BacklogGauge::default()).max_active(),
            10
        );
        assert_eq!(
            RecoveryThrottle::new(DeviceKind::Hybrid, BacklogGauge::default()).sleep(false),
            Duration::from_millis(25)
        );
        for (key, bad) in [
            ("osd_max_backfills", "0"),
            ("osd_max_backfills", "many"),
            ("osd_recovery_max_active", "100000"),
            ("osd_recovery_sleep_hdd", "-1"),
            ("osd_recovery_sleep_ssd", "NaN"),
            ("osd_recovery_sleep_hybrid", "1e9"),
            ("osd_unknown", "1"),
        ] {
            assert!(hdd.set(key, bad).is_err(), "{key}={bad} must be refused");
        }
        assert_eq!(hdd.settings(), Settings::default(), "nothing changed");
        hdd.set("osd_recovery_max_active", "5").unwrap();
        hdd.set("osd_recovery_sleep_hdd", "0").unwrap();
        assert_eq!(hdd.max_active(), 5);
        assert_eq!(hdd.sleep(false), Duration::ZERO);
        assert_eq!(hdd.get("osd_recovery_max_active").as_deref(), Some("5"));
    }

    #[tokio::test]
    async fn pushes_past_the_limit_wait_until_a_slot_is_freed() {
        let t = Arc::new(RecoveryThrottle::new(
            DeviceKind::Hdd,
            BacklogGauge::default(),
        ));
        t.set("osd_recovery_max_active", "1").unwrap();
        let first = t.active_slot().await;
        let t2 = t.clone();
        let waiter = tokio::spawn(async move {
            let _slot = t2.active_slot().await;
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiter.is_finished(), "the second push waits");
        drop(first);
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("freed slot taken")
            .unwrap();
    }

    /// Client ops of `ms` each for just over one pacer tick.
    async fn client_tick(t: &RecoveryThrottle, ms: u64) {
        let end = Instant::now() + crate::pacing::TICK + Duration::from_millis(5);
        while Instant::now() < end {
            t.observe_client_op(Stream::Primary, Duration::from_millis(ms));
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        t.observe_client_op(Stream::Primary, Duration::from_millis(ms));
    }

    /// Takes four push slots at once (and frees them).
    async fn four_slots(t: &RecoveryThrottle) {
        let mut held = Vec::new();
        for _ in 0..4 {
            held.push(t.active_slot().await);
        }
    }

    /// Takes `n` push slots, waiting for each.
    async fn slots(t: &RecoveryThrottle, n: usize) -> Vec<ActiveSlot<'_>> {
        let mut held = Vec::new();
        for _ in 0..n {
            held.push(t.active_slot().await);
        }
        held
    }

    /// Whether one more push slot is refused for 50 ms (the waiter is dropped after).
    async fn one_more_is_refused(t: &RecoveryThrottle) -> bool {
        tokio::time::timeout(Duration::from_millis(50), t.active_slot())
            .await
            .is_err()
    }

    #[tokio::test(start_paused = true)]
    async fn slowed_clients_hold_pushes_back_and_off_lets_them_go() {
        let t = RecoveryThrottle::new(DeviceKind::Ssd, BacklogGauge::default());
        t.set("osd_recovery_pacing_factor", "1.2").unwrap();
        for _ in 0..crate::pacing::SETTLE_TICKS + 1 {
            client_tick(&t, 1).await;
        }
        assert_eq!(
            t.pacing(),
            (crate::pacing::START_ALLOWANCE, Some(1.0), None),
            "measured without recovery"
        );
        let first = t.active_slot().await;
        assert!(
            one_more_is_refused(&t).await,
            "a recovery starts at one push"
        );
        let clients = async {
            for _ in 0..60 {
                if t.pacing().0 >= 10.0 {
                    break;
                }
                client_tick(&t, 1).await;
            }
        };
        let (held, ()) = tokio::join!(
            tokio::time::timeout(Duration::from_secs(30), slots(&t, 9)),
            clients
        );
        let mut held = held.expect("the waiting pushes take the room the pacer grows");
        held.push(first);
        assert_eq!(
            t.pacing().0,
            10.0,
            "pushes waiting while clients keep their pace grow it to osd_recovery_max_active"
        );
        for _ in 0..3 {
            client_tick(&t, 5).await;
        }
        let (allowance, _, _) = t.pacing();
        assert!(allowance <= 2.5, "halved each slow tick: {allowance}");
        drop(held);
        let blocked = tokio::time::timeout(Duration::from_millis(50), four_slots(&t)).await;
        assert!(blocked.is_err(), "no more pushes than the pacer allows");
        t.set("osd_recovery_pacing_factor", "0").unwrap();
        client_tick(&t, 5).await;
        let four = tokio::time::timeout(Duration::from_secs(5), four_slots(&t)).await;
        assert!(four.is_ok(), "pacing off: osd_recovery_max_active alone");
        assert!(t.set("osd_recovery_pacing_factor", "0.5").is_err());
        assert_eq!(t.get("osd_recovery_pacing_factor").as_deref(), Some("0"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_recovery_after_a_quiet_spell_starts_at_one_push_again() {
        let t = RecoveryThrottle::new(DeviceKind::Ssd, BacklogGauge::default());
        let mut held = vec![t.active_slot().await];
        let pushes = async {
            held.extend(slots(&t, 3).await);
            held
        };
        let ticks = async {
            for _ in 0..10 {
                t.pacing();
                tokio::time::sleep(crate::pacing::TICK).await;
            }
        };
        let (held, ()) = tokio::join!(tokio::time::timeout(Duration::from_secs(30), pushes), ticks);
        let held = held.expect("no client: grown while pushes wait");
        assert!(t.pacing().0 >= 4.0);
        drop(held);
        tokio::time::sleep(crate::pacing::TICK).await;
        let again = slots(&t, 2).await;
        assert_eq!(again.len(), 2, "a short pause keeps the pace");
        drop(again);
        tokio::time::sleep(crate::pacing::TICK * crate::pacing::SETTLE_TICKS).await;
        t.pacing();
        let _first = t.active_slot().await;
        assert_eq!(
            t.pacing().0,
            crate::pacing::START_ALLOWANCE,
            "after three ticks without a push, the next recovery starts slow"
        );
        assert!(one_more_is_refused(&t).await);
    }

    #[tokio::test]
    async fn ticks_while_data_moves_or_arrives_teach_no_level() {
        let t = RecoveryThrottle::new(DeviceKind::Ssd, BacklogGauge::default());
        for _ in 0..crate::pacing::SETTLE_TICKS + 1 {
            client_tick(&t, 1).await;
        }
        let end = Instant::now() + crate::pacing::TICK * (crate::pacing::SETTLE_TICKS + 2);
        while Instant::now() < end {
            t.note_push_received();
            t.observe_client_op(Stream::Primary, Duration::from_millis(7));
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(
            t.pacing().1,
            Some(1.0),
            "a fill of this OSD is no idle time"
        );
        t.note_new_map(1, true);
        for _ in 0..crate::pacing::SETTLE_TICKS + 2 {
            client_tick(&t, 7).await;
        }
        assert_eq!(
            t.pacing().1,
            Some(1.0),
            "nor is the peering of a new epoch, or another OSD's fill"
        );
    }
}
