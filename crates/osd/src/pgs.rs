//! The PGs this OSD holds or serves: for each, its interval (acting set in the current map),
//! whether it is active in that interval, and — behind an async lock that orders every write,
//! replica write and peering step of the PG — its log and last epoch started.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::time::Instant;

use cairn_clustermap::MapFlag;
use cairn_clustermap::{PgId, PgMapping};
use cairn_pg::PgLog;
use tokio::sync::watch;

use crate::fence::ScrubFence;
use crate::fillhold::{FillHolds, Held};
use crate::inflight::WritesInFlight;
use crate::missing::MissingSets;
use crate::pgmeta::collection;

/// What a PG is doing on this OSD, as reported in metrics and status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PgStatus {
    /// Primary, gathering logs and recovering.
    Peering,
    /// Primary, serving I/O with every copy of the pool's size.
    ActiveClean,
    /// Primary, serving I/O with fewer copies than the pool's size (>= min_size).
    ActiveDegraded,
    /// Primary of a temporary acting set (pg_temp), serving I/O while the PG's up set is
    /// filled in the background (Ceph's active+remapped+backfilling).
    ActiveRemapped,
    /// Primary with fewer than min_size copies up: no I/O until the map changes.
    Inactive,
    /// Primary of a PG that may have taken writes in an earlier interval none of whose copies
    /// is up: no I/O (it would serve stale data) until one of them is back, or is removed.
    Down,
    /// A replica (or a stray copy) of the PG.
    Replica,
}

impl PgStatus {
    /// Name as in metrics.
    pub fn name(self) -> &'static str {
        match self {
            PgStatus::Peering => "peering",
            PgStatus::ActiveClean => "active+clean",
            PgStatus::ActiveDegraded => "active+degraded",
            PgStatus::ActiveRemapped => "active+remapped",
            PgStatus::Inactive => "inactive",
            PgStatus::Down => "down",
            PgStatus::Replica => "replica",
        }
    }
}

/// What the background fill of a PG served by a temporary acting set is doing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FillState {
    /// Nothing yet (or it is over).
    #[default]
    Idle,
    /// Waiting for a reservation, here or on the copy to fill (`osd_max_backfills`).
    Waiting,
    /// Held back by a cluster flag until it is unset.
    Held(MapFlag),
    /// Waiting for a copy too full for its fill to have room.
    TooFull,
    /// Copying the whole PG to a copy beyond the log's reach.
    Backfilling,
    /// Recovering the objects a copy within the log's reach lacks.
    Recovering,
}

impl FillState {
    /// Ceph's word for it in a PG state, if any.
    pub fn word(self) -> Option<&'static str> {
        Some(match self {
            FillState::Idle => return None,
            FillState::Waiting => "backfill_wait",
            FillState::Held(MapFlag::NoRecover) => "recovery_wait",
            FillState::Held(_) => "backfill_wait",
            FillState::TooFull => "backfill_toofull",
            FillState::Backfilling => "backfilling",
            FillState::Recovering => "recovering",
        })
    }
}

/// The PG's placement in the current map.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Interval {
    /// Epoch in which this acting set began.
    pub epoch: u64,
    /// Acting set, primary first: the OSDs serving the PG.
    pub acting: Vec<i32>,
    /// Up set in the newest map applied: where the PG's data belongs. It differs from the
    /// acting set while a temporary acting set serves the PG and the up set is filled.
    pub up: Vec<i32>,
    /// Pool size.
    pub size: usize,
    /// Pool min_size.
    pub min_size: usize,
    /// OSDs of the acting set left out of this interval because they could not take the
    /// recovery of their copy (too full): no replica writes go to them and the PG is degraded
    /// without them. Tried again on a map that shows them up and not flagged full.
    pub left_out: BTreeSet<i32>,
    /// Newest map epoch applied to the PG (the interval's last epoch so far): decisions that
    /// must hold for the interval read this map, not the OSD's newest, which the PG may not
    /// have applied yet.
    pub map_epoch: u64,
    /// Each acting OSD's up_from (same order as `acting`): which incarnation of it serves.
    pub incarnations: Vec<u64>,
}

impl Interval {
    /// The OSDs holding the PG's copies in this interval: the acting set without the ones
    /// left out (the primary first).
    pub fn copies(&self) -> impl Iterator<Item = i32> + '_ {
        self.acting
            .iter()
            .copied()
            .filter(|o| !self.left_out.contains(o))
    }
}

/// State behind the PG's lock.
pub struct PgInner {
    /// The PG log.
    pub log: PgLog,
    /// Last epoch in which this copy was activated.
    pub last_epoch_started: u64,
    /// The collection exists in the store.
    pub created: bool,
    /// As primary: the newest last epoch started among the copies it peered with (before this
    /// interval's activation). A stray copy activated in a later interval holds writes this
    /// history does not know of, and is never called clean.
    pub history_les: u64,
}

/// One PG on this OSD.
pub struct Pg {
    /// Its id.
    pub id: PgId,
    /// Its store collection.
    pub coll: String,
    /// Orders writes and peering: taken through [`Pg::lock`], [`Pg::lock_unfenced`] or
    /// [`Pg::lock_for_write`], which wait for the writes in flight that matter to each.
    inner: tokio::sync::Mutex<PgInner>,
    /// Its writes submitted and not ended (as primary: also how far every copy has them, the
    /// `complete_to` a resend is answered from the log up to).
    pub writes: WritesInFlight,
    interval: Mutex<Interval>,
    status: Mutex<PgStatus>,
    /// OSDs of earlier intervals not yet known to be clean (queried when peering).
    past: Mutex<BTreeSet<i32>>,
    /// Some(epoch) once active in the interval that began at `epoch`.
    active: watch::Sender<Option<u64>>,
    /// Newest map epoch of a peering, recovery or replica request about this PG received here
    /// (noted before the request waits for the PG's lock): a stray copy is not deleted once
    /// an OSD with a newer map has asked for it.
    newest_request_epoch: AtomicU64,
    /// Newest interval (its first epoch) whose peering or fill has queried or activated this
    /// copy: a replica write of an earlier interval is refused from then on (Ceph drops ops of
    /// an interval that has ended), or a primary frozen past its grace could have a write
    /// committed here after the new interval read this copy's log, then lost at activation.
    peered_in: AtomicU64,
    /// The interval and up set the running background fill (as primary of a temporary acting
    /// set) serves: one fill per interval and up set.
    fill: Mutex<Option<(u64, Vec<i32>)>>,
    /// What that fill is doing now (`pg dump` shows it).
    fill_state: Mutex<FillState>,
    /// The objects written here that the fill's targets have yet to be given, and which
    /// writes are forwarded to them.
    pub fill_writes: crate::fillwrites::FillWrites,
    /// The objects the fill pushes now with their writes held.
    fill_holds: Arc<FillHolds>,
    /// As a copy being filled: the newest fill attempt (its interval's epoch, its number) a
    /// push, `Filled` or forwarded write came from; an earlier attempt's are refused.
    fill_floor: Mutex<(u64, u64)>,
    /// The copy that fill pushes to now and the objects its pass has left to push (for the
    /// misplaced count).
    fill_progress: Mutex<Option<(i32, u64)>>,
    /// Scrub schedule and outcome here (in memory: a restarted primary forgets it until the
    /// next scrub).
    scrub: Mutex<ScrubState>,
    /// The objects a scrub of this PG compares right now (writes to them wait).
    pub fence: Arc<ScrubFence>,
    /// The objects its copies lack while it serves, and who recovers which now.
    missing: Mutex<MissingSets>,
    /// The interval (its first epoch) in which a copy refused a background recovery as too
    /// full: its next peering recovers before activation, which leaves such a copy out.
    too_full_in: AtomicU64,
}

/// When a PG's next scrubs are due on its primary, and what the last one left.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScrubState {
    /// Objects the last scrub found inconsistent and did not repair.
    pub inconsistent: u64,
    /// When the next scrub is due (None: not scheduled yet).
    pub next: Option<Instant>,
    /// When the next deep scrub is due (None: not scheduled yet).
    pub next_deep: Option<Instant>,
}

impl Pg {
    fn new(id: PgId, log: PgLog, last_epoch_started: u64, created: bool) -> Pg {
        Pg {
            id,
            coll: collection(id),
            inner: tokio::sync::Mutex::new(PgInner {
                log,
                last_epoch_started,
                created,
                history_les: 0,
            }),
            writes: WritesInFlight::default(),
            interval: Mutex::new(Interval::default()),
            status: Mutex::new(PgStatus::Replica),
            past: Mutex::new(BTreeSet::new()),
            active: watch::channel(None).0,
            newest_request_epoch: AtomicU64::new(0),
            peered_in: AtomicU64::new(0),
            fill: Mutex::new(None),
            fill_state: Mutex::new(FillState::Idle),
            fill_writes: Default::default(),
            fill_holds: Arc::default(),
            fill_floor: Mutex::new((0, 0)),
            fill_progress: Mutex::new(None),
            scrub: Mutex::new(ScrubState::default()),
            fence: Arc::default(),
            missing: Mutex::new(MissingSets::default()),
            too_full_in: AtomicU64::new(0),
        }
    }

    /// The missing objects of the PG's copies (a short lock: never held across an await).
    pub fn missing(&self) -> std::sync::MutexGuard<'_, MissingSets> {
        self.missing.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Notes that a copy refused the background recovery of the interval of `epoch` as too
    /// full.
    pub fn note_too_full(&self, epoch: u64) {
        self.too_full_in.fetch_max(epoch, Ordering::SeqCst);
    }

    /// Whether a copy refused the background recovery of the interval of `epoch` as too full.
    pub fn too_full_in(&self, epoch: u64) -> bool {
        self.too_full_in.load(Ordering::SeqCst) == epoch
    }

    /// Ends the background recovery of the interval of `epoch` once no copy lacks anything:
    /// clean (earlier intervals forgotten) with the pool's size of copies, else degraded.
    pub fn finish_recovery(&self, epoch: u64) {
        let iv = self.interval.lock().unwrap_or_else(|p| p.into_inner());
        if iv.epoch != epoch || *self.active.borrow() != Some(epoch) || !self.missing().is_empty() {
            return;
        }
        let clean = iv.copies().count() >= iv.size;
        if clean {
            self.past.lock().unwrap_or_else(|p| p.into_inner()).clear();
        }
        *self.status.lock().unwrap_or_else(|p| p.into_inner()) = active_status(&iv, clean);
    }

    /// The PG's lock, once no write is in flight: what everything but a write takes, so that
    /// it sees every submitted write ended (committed, or taken out of the log).
    pub async fn lock(&self) -> tokio::sync::MutexGuard<'_, PgInner> {
        let mut inner = self.inner.lock().await;
        self.drained(&mut inner).await;
        inner
    }

    /// The PG's lock if free now, writes in flight or not: for a look at its log or history
    /// that must not wait.
    pub fn try_lock(&self) -> Option<tokio::sync::MutexGuard<'_, PgInner>> {
        self.inner.try_lock().ok()
    }

    /// With the lock held, waits until no write is in flight (no new one can start: writes
    /// submit under the lock) and settles a refused one.
    async fn drained(&self, inner: &mut PgInner) {
        self.writes.idle().await;
        let PgInner { log, created, .. } = inner;
        self.writes.settle(log, created);
    }

    /// The PG's lock, taken once no scrub fence holds `object` (`None`: once no fence is up)
    /// and no write is in flight, and whether it had to wait for a fence: what a repair of
    /// that object, or a scrub, waits for. A fenced object's waiter does not hold the lock, so
    /// the PG's other writes, and the scrub itself, go on meanwhile.
    pub async fn lock_unfenced(
        &self,
        object: Option<&str>,
    ) -> (tokio::sync::MutexGuard<'_, PgInner>, bool) {
        let mut waited = false;
        loop {
            let mut inner = self.inner.lock().await;
            if !self.fence.holds(object) {
                self.drained(&mut inner).await;
                return (inner, waited);
            }
            drop(inner);
            waited = true;
            self.fence.wait_lowered(object).await;
        }
    }

    /// The PG's lock for a write of `object`: taken once no scrub fence holds it and no other
    /// write of it is in flight (writes of other objects may be), and whether it had to wait
    /// for a fence. The waiter does not hold the lock meanwhile.
    pub async fn lock_for_write(
        &self,
        object: &str,
    ) -> (tokio::sync::MutexGuard<'_, PgInner>, bool) {
        let mut fenced = false;
        loop {
            let mut inner = self.inner.lock().await;
            if self.fence.holds(Some(object)) {
                drop(inner);
                fenced = true;
                self.fence.wait_lowered(Some(object)).await;
                continue;
            }
            if self.fill_holds.holds(object) {
                drop(inner);
                self.fill_holds.wait_released(object).await;
                continue;
            }
            if self.writes.touches(object) {
                drop(inner);
                self.writes.object_idle(object).await;
                continue;
            }
            let PgInner { log, created, .. } = &mut *inner;
            self.writes.settle(log, created);
            return (inner, fenced);
        }
    }

    /// Holds the writes of `object` for a push of the background fill, once its writes in
    /// flight have ended; they go on when the returned guard is dropped.
    pub async fn hold_for_fill(&self, object: &str) -> Held {
        let inner = self.inner.lock().await;
        let held = self.fill_holds.hold(object);
        drop(inner);
        self.writes.object_idle(object).await;
        held
    }

    /// As a copy being filled: whether a message of fill attempt `attempt` in the interval of
    /// `epoch` may be applied (none of a later attempt was); it becomes the newest. The caller
    /// holds the PG's lock and applies the message under it.
    pub fn admit_fill(&self, epoch: u64, attempt: u64) -> bool {
        let mut floor = self.fill_floor.lock().unwrap_or_else(|p| p.into_inner());
        if (epoch, attempt) < *floor {
            return false;
        }
        *floor = (epoch, attempt);
        true
    }

    /// The PG's lock for a replica write: writes of other objects may be in flight; settles
    /// a refused one.
    pub async fn lock_for_replica_write(&self) -> tokio::sync::MutexGuard<'_, PgInner> {
        let mut inner = self.inner.lock().await;
        let PgInner { log, created, .. } = &mut *inner;
        self.writes.settle(log, created);
        inner
    }

    /// Claims the background fill of `up` in the interval of `epoch`: false when one was
    /// claimed for them already.
    pub fn claim_fill(&self, epoch: u64, up: &[i32]) -> bool {
        let mut fill = self.fill.lock().unwrap_or_else(|p| p.into_inner());
        if fill.as_ref().is_some_and(|(e, u)| *e == epoch && u == up) {
            return false;
        }
        *fill = Some((epoch, up.to_vec()));
        self.set_fill_state(FillState::Idle);
        true
    }

    /// Gives up the claim of the fill of `up` in the interval of `epoch` (its task stopped
    /// before handing the PG back): a later activation in the same interval — the PG peering
    /// again within it — claims and starts it anew.
    pub fn release_fill(&self, epoch: u64, up: &[i32]) {
        let mut fill = self.fill.lock().unwrap_or_else(|p| p.into_inner());
        if fill.as_ref().is_some_and(|(e, u)| *e == epoch && u == up) {
            *fill = None;
        }
    }

    /// Notes the copy the PG's background fill pushes to and the objects its pass has left
    /// (None: no pass runs).
    pub fn set_fill_progress(&self, progress: Option<(i32, u64)>) {
        *self.fill_progress.lock().unwrap_or_else(|p| p.into_inner()) = progress;
    }

    /// One more object of the running fill pass pushed.
    pub fn fill_pushed_one(&self) {
        if let Some((_, left)) = self
            .fill_progress
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_mut()
        {
            *left = left.saturating_sub(1);
        }
    }

    /// The copy the running fill pass pushes to and the objects it has left.
    pub fn fill_progress(&self) -> Option<(i32, u64)> {
        *self.fill_progress.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Notes what the PG's background fill is doing now.
    pub fn set_fill_state(&self, state: FillState) {
        *self.fill_state.lock().unwrap_or_else(|p| p.into_inner()) = state;
    }

    /// Notes a peering, recovery or replica request about this PG sent in map `epoch`.
    pub fn note_request_epoch(&self, epoch: u64) {
        self.newest_request_epoch
            .fetch_max(epoch, Ordering::Relaxed);
    }

    /// Notes that the peering (or fill) of the interval begun at `epoch` has read or
    /// activated this copy: replica writes of earlier intervals are refused from now on.
    pub fn note_peered_in(&self, epoch: u64) {
        self.peered_in.fetch_max(epoch, Ordering::SeqCst);
    }

    /// The newest interval whose peering has read or activated this copy (0: none).
    pub fn peered_in(&self) -> u64 {
        self.peered_in.load(Ordering::SeqCst)
    }

    /// The newest epoch noted by [`Pg::note_request_epoch`].
    pub fn newest_request_epoch(&self) -> u64 {
        self.newest_request_epoch.load(Ordering::Relaxed)
    }

    /// The current interval.
    pub fn interval(&self) -> Interval {
        self.interval
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Records a new map's placement (the PG's `up` and `acting` sets, and the incarnation
    /// of each acting OSD: its up_from); returns true when it starts a new interval, which
    /// deactivates the PG until it peers again. A new interval starts when the acting set
    /// changed, when the pool's size or min_size changed, or when one of its OSDs is another incarnation than the one the interval
    /// began with: maps reach a PG coalesced, so an OSD that died and booted again between two
    /// maps it applied keeps its place in the acting set while everything the dead process
    /// held (replica writes in flight, answers to peering) is gone; Ceph, which applies every
    /// epoch, sees the down epoch in between as an interval of its own. `force` starts a new
    /// interval whatever the map says (epochs were skipped that may have held a change, and
    /// their maps could not be had: see `peering::catch_up`).
    pub fn on_map(
        &self,
        epoch: u64,
        m: &PgMapping,
        incarnations: &[u64],
        (size, min_size): (usize, usize),
        force: bool,
    ) -> bool {
        let (up, acting) = (m.up.clone(), m.acting.clone());
        let mut iv = self.interval.lock().unwrap_or_else(|p| p.into_inner());
        // As in Ceph, a new size or min_size starts a new interval: the PG peers again (a PG
        // short of its old min_size may serve now; one with a new copy backfills it).
        if !force
            && iv.acting == acting
            && iv.incarnations == incarnations
            && iv.epoch != 0
            && (iv.size, iv.min_size) == (size, min_size)
        {
            iv.map_epoch = iv.map_epoch.max(epoch);
            iv.up = up;
            let mut status = self.status.lock().unwrap_or_else(|p| p.into_inner());
            if matches!(
                *status,
                PgStatus::ActiveClean | PgStatus::ActiveDegraded | PgStatus::ActiveRemapped
            ) {
                let clean = iv.copies().count() >= iv.size && self.missing().is_empty();
                *status = active_status(&iv, clean);
            }
            return false;
        }
        self.past
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(iv.acting.iter().copied());
        *iv = Interval {
            epoch,
            acting,
            up,
            size,
            min_size,
            left_out: BTreeSet::new(),
            map_epoch: epoch,
            incarnations: incarnations.to_vec(),
        };
        self.active.send_replace(None);
        true
    }

    /// OSDs of earlier intervals that may hold newer data.
    pub fn past_osds(&self) -> BTreeSet<i32> {
        self.past.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Current status.
    pub fn status(&self) -> PgStatus {
        *self.status.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The status as reported in `pg stats`, `pg dump` and metrics: its name; for a PG served
    /// by a temporary acting set, `+degraded` with fewer copies serving than the pool's size
    /// and what its background fill does; for a PG whose copies lack objects it recovers
    /// after activation, what that recovery does; as Ceph names it (`+backfilling`, `+recovering`,
    /// `+backfill_wait` for a reservation or a `nobackfill`/`norebalance` flag,
    /// `+recovery_wait` for `norecover`, `+backfill_toofull`); and `+inconsistent` while the
    /// last scrub left inconsistent objects.
    pub fn state_name(&self) -> String {
        let status = self.status();
        let mut name = status.name().to_string();
        let recovering = status == PgStatus::ActiveDegraded && !self.missing().is_empty();
        if status == PgStatus::ActiveRemapped {
            let iv = self.interval();
            if iv.copies().count() < iv.size {
                name.push_str("+degraded");
            }
        }
        if status == PgStatus::ActiveRemapped || recovering {
            let fill = *self.fill_state.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(word) = fill.word() {
                name.push('+');
                name.push_str(word);
            }
        }
        if status != PgStatus::Replica && self.scrub_state().inconsistent > 0 {
            name.push_str("+inconsistent");
        }
        name
    }

    /// The scrub schedule and outcome.
    pub fn scrub_state(&self) -> ScrubState {
        *self.scrub.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Changes the scrub schedule or outcome; what `f` returns.
    pub fn update_scrub<T>(&self, f: impl FnOnce(&mut ScrubState) -> T) -> T {
        f(&mut self.scrub.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Sets the status.
    pub fn set_status(&self, s: PgStatus) {
        *self.status.lock().unwrap_or_else(|p| p.into_inner()) = s;
    }

    /// Sets the status if the interval of `epoch` is still the current one: a peering of an
    /// interval that has ended must not overwrite the state of the next. True when set.
    pub fn set_status_in(&self, epoch: u64, s: PgStatus) -> bool {
        let iv = self.interval.lock().unwrap_or_else(|p| p.into_inner());
        if iv.epoch != epoch {
            return false;
        }
        *self.status.lock().unwrap_or_else(|p| p.into_inner()) = s;
        true
    }

    /// Ends the peering of the interval of `epoch`, if it is still the current one (checked
    /// under the interval's lock, which a new map takes to start the next): records the copies
    /// left out, forgets earlier intervals when every copy is clean, sets the status and
    /// activates. True when the PG is now active.
    pub fn finish_peering(&self, epoch: u64, left_out: BTreeSet<i32>, clean: bool) -> bool {
        let mut iv = self.interval.lock().unwrap_or_else(|p| p.into_inner());
        if iv.epoch != epoch {
            return false;
        }
        iv.left_out = left_out;
        if clean {
            self.past.lock().unwrap_or_else(|p| p.into_inner()).clear();
        }
        *self.status.lock().unwrap_or_else(|p| p.into_inner()) = active_status(&iv, clean);
        self.active.send_replace(Some(epoch));
        true
    }

    /// Takes the PG out of service in the interval of `epoch` (if that is still the current
    /// one) until it peers again: its copies may disagree.
    pub fn deactivate(&self, epoch: u64) {
        let iv = self.interval.lock().unwrap_or_else(|p| p.into_inner());
        if iv.epoch == epoch {
            self.active.send_replace(None);
        }
    }

    /// The interval epoch the PG is active in, if any.
    pub fn active_epoch(&self) -> Option<u64> {
        let a = *self.active.borrow();
        a.filter(|&e| e == self.interval().epoch)
    }

    /// Resolves once the PG is no longer active in the interval that began at `epoch`.
    pub async fn wait_interval_change(&self, epoch: u64) {
        let mut rx = self.active.subscribe();
        loop {
            if *rx.borrow_and_update() != Some(epoch) || self.interval().epoch != epoch {
                return;
            }
            if rx.changed().await.is_err() {
                return;
            }
        }
    }

    /// Resolves once the PG's current interval no longer begins at `epoch`: a newer map moved
    /// it on (active or not).
    pub async fn wait_interval_end(&self, epoch: u64) {
        let mut rx = self.active.subscribe();
        while self.interval().epoch == epoch {
            if rx.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }

    /// Waits until the PG is active in its current interval, or `timeout` passes.
    pub async fn wait_active(&self, timeout: std::time::Duration) -> Option<u64> {
        let mut rx = self.active.subscribe();
        let wait = async {
            loop {
                if let Some(e) = self.active_epoch() {
                    return e;
                }
                if rx.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
            }
        };
        tokio::time::timeout(timeout, wait).await.ok()
    }
}

/// An active PG's status: remapped while its acting set is not its up set, else clean with
/// every copy of the pool's size, else degraded.
fn active_status(iv: &Interval, clean: bool) -> PgStatus {
    match clean {
        _ if iv.up != iv.acting => PgStatus::ActiveRemapped,
        true => PgStatus::ActiveClean,
        false => PgStatus::ActiveDegraded,
    }
}

/// Every PG this OSD knows.
#[derive(Default)]
pub struct PgTable {
    pgs: Mutex<HashMap<PgId, Arc<Pg>>>,
}

impl PgTable {
    /// The PG, if known.
    pub fn get(&self, id: PgId) -> Option<Arc<Pg>> {
        self.pgs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&id)
            .cloned()
    }

    /// The PG, created empty (not yet in the store) if unknown.
    pub fn get_or_create(&self, id: PgId, max_log_entries: usize) -> Arc<Pg> {
        self.pgs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(id)
            .or_insert_with(|| Arc::new(Pg::new(id, PgLog::new(max_log_entries), 0, false)))
            .clone()
    }

    /// Adds a PG loaded from the store.
    pub fn insert_loaded(&self, id: PgId, loaded: crate::pgmeta::Loaded) {
        let pg = Pg::new(id, loaded.log, loaded.last_epoch_started, true);
        pg.missing().set_own(0, loaded.missing);
        self.pgs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, Arc::new(pg));
    }

    /// Whether `pg` is the table's entry for its id (a deleted stray leaves the table).
    pub fn holds(&self, pg: &Arc<Pg>) -> bool {
        is_entry(&self.pgs.lock().unwrap_or_else(|p| p.into_inner()), pg)
    }

    /// Forgets `pg` (a deleted copy of a removed pool's PG: pool ids are never reused); true
    /// when it was the table's entry.
    pub fn remove(&self, pg: &Arc<Pg>) -> bool {
        self.remove_if(pg, |_| true)
    }

    /// Forgets `pg` (a deleted stray copy) unless its interval now has `osd` in its acting
    /// or up set; true when it was removed. Checked under the table's lock, so a map that
    /// makes `osd` serve the PG again either sees it here or finds the entry gone and starts
    /// afresh.
    pub fn remove_stray(&self, pg: &Arc<Pg>, osd: i32) -> bool {
        self.remove_if(pg, |pg| {
            let iv = pg.interval();
            !iv.acting.contains(&osd) && !iv.up.contains(&osd)
        })
    }

    /// Forgets `pg` if it is the table's entry for its id and `cond` holds, under the table's
    /// lock; true when it was removed.
    fn remove_if(&self, pg: &Arc<Pg>, cond: impl FnOnce(&Pg) -> bool) -> bool {
        let mut pgs = self.pgs.lock().unwrap_or_else(|p| p.into_inner());
        if is_entry(&pgs, pg) && cond(pg) {
            pgs.remove(&pg.id);
            return true;
        }
        false
    }

    /// All PGs.
    pub fn all(&self) -> Vec<Arc<Pg>> {
        self.pgs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect()
    }
}

/// Whether `pg` is `pgs`' entry for its id (not an older one since replaced or removed).
fn is_entry(pgs: &HashMap<PgId, Arc<Pg>>, pg: &Arc<Pg>) -> bool {
    pgs.get(&pg.id).is_some_and(|known| Arc::ptr_eq(known, pg))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A mapping with these up and acting sets.
    fn placed(up: Vec<i32>, acting: Vec<i32>) -> PgMapping {
        PgMapping {
            primary: up[0],
            raw: up.clone(),
            up,
            acting,
        }
    }

    /// A mapping served by its up set.
    fn plain(up: Vec<i32>) -> PgMapping {
        placed(up.clone(), up)
    }

    #[test]
    fn a_peering_that_ends_after_its_interval_has_changed_changes_nothing() {
        let table = PgTable::default();
        let pg = table.get_or_create(PgId { pool: 1, seed: 0 }, 10);
        assert!(pg.on_map(5, &plain(vec![0, 1, 2]), &[], (3, 2), false));
        // The next map starts another interval (led by another OSD) while the first one's
        // peering is still running here.
        assert!(pg.on_map(6, &plain(vec![1, 0, 2]), &[], (3, 2), false));
        pg.set_status(PgStatus::Replica);
        assert!(!pg.finish_peering(5, BTreeSet::new(), true));
        assert!(!pg.set_status_in(5, PgStatus::Peering));
        assert_eq!(pg.status(), PgStatus::Replica);
        assert_eq!(pg.active_epoch(), None);
        assert_eq!(pg.past_osds(), BTreeSet::from([0, 1, 2]));
        // The current interval's peering ends as it should.
        assert!(pg.finish_peering(6, BTreeSet::from([2]), false));
        assert_eq!(pg.status(), PgStatus::ActiveDegraded);
        assert_eq!(pg.active_epoch(), Some(6));
        assert_eq!(pg.interval().left_out, BTreeSet::from([2]));
        assert_eq!(pg.interval().copies().collect::<Vec<_>>(), vec![1, 0]);
    }

    #[test]
    fn an_acting_osd_that_booted_again_between_two_maps_starts_a_new_interval() {
        let table = PgTable::default();
        let pg = table.get_or_create(PgId { pool: 1, seed: 0 }, 10);
        assert!(pg.on_map(5, &plain(vec![0, 1, 2]), &[1, 1, 3], (3, 2), false));
        assert!(pg.finish_peering(5, BTreeSet::new(), true));
        // The same incarnations in a later map: the same interval, still active.
        assert!(!pg.on_map(6, &plain(vec![0, 1, 2]), &[1, 1, 3], (3, 2), false));
        assert_eq!(pg.active_epoch(), Some(5));
        // osd.2 died and booted again at epoch 9; the PG never applied the maps in between.
        assert!(pg.on_map(9, &plain(vec![0, 1, 2]), &[1, 1, 9], (3, 2), false));
        assert_eq!(pg.interval().epoch, 9);
        assert_eq!(pg.interval().incarnations, vec![1, 1, 9]);
        assert_eq!(pg.active_epoch(), None, "the PG peers again");
    }

    #[test]
    fn a_pg_served_by_a_temporary_acting_set_is_remapped_until_its_up_set_serves() {
        let table = PgTable::default();
        let pg = table.get_or_create(PgId { pool: 1, seed: 0 }, 10);
        let temp = |up: Vec<i32>| placed(up, vec![3, 1, 2]);
        assert!(pg.on_map(5, &temp(vec![0, 1, 2]), &[], (3, 2), false));
        assert!(pg.finish_peering(5, BTreeSet::new(), true));
        assert_eq!(pg.status(), PgStatus::ActiveRemapped);
        // The up set moves, the acting set does not: the same interval, still remapped.
        assert!(!pg.on_map(6, &temp(vec![0, 1, 4]), &[], (3, 2), false));
        assert_eq!(pg.status(), PgStatus::ActiveRemapped);
        assert_eq!(pg.interval().up, vec![0, 1, 4]);
        // The acting set is the up set again without a new interval: clean.
        assert!(!pg.on_map(7, &plain(vec![3, 1, 2]), &[], (3, 2), false));
        assert_eq!(pg.status(), PgStatus::ActiveClean);
        assert_eq!(pg.active_epoch(), Some(5));
        // One background fill per interval and up set.
        assert!(pg.claim_fill(5, &[0, 1, 2]));
        assert!(!pg.claim_fill(5, &[0, 1, 2]));
        assert!(pg.claim_fill(5, &[0, 1, 4]));
        assert!(pg.claim_fill(8, &[0, 1, 4]));
    }
}
