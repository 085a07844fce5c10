//! Recovery after activation (Ceph's model): a PG whose copies lack a few objects activates
//! at once with their missing sets ([`crate::missing`]) and its primary recovers them in the
//! background, object by object, as recovery-class work in a slot of
//! `osd_recovery_max_active`, each followed by the recovery sleep, and not while `norecover`
//! is set. A client op that touches a missing object recovers that object first, at its own
//! class and priority (or waits for the recovery already under way); ops on other objects do
//! not wait at all.

use std::sync::Arc;
use std::time::Duration;

use cairn_clustermap::MapFlag;
use cairn_proto::peer::Urgency;
use cairn_store::Transaction;

use crate::error::OsdError;
use crate::missing::{Need, ObjectRecovery};
use crate::pgmeta::remove_missing;
use crate::pgs::{FillState, Pg};
use crate::shared::Shared;
use crate::transfer::{push, recover_local, Recovering};

/// Pause before a failed object recovery is tried again in the same interval.
const RETRY_PAUSE: Duration = Duration::from_millis(500);
/// Pause before a recovery held back by `norecover` looks at the flags again.
const HELD_PAUSE: Duration = Duration::from_millis(250);
/// Pause while the objects left are all being recovered by client ops.
const CLAIMED_PAUSE: Duration = Duration::from_millis(10);

/// How a background recovery ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecoveryEnd {
    /// Every missing object was recovered.
    Done,
    /// The PG left the interval or peered again: a newer recovery (if any) is its own.
    Superseded,
    /// A copy is too full to take its objects: the primary must peer again to leave it out.
    CopyTooFull,
}

/// The background recovery of `pg`, active in the interval of `epoch`, when a copy lacks
/// objects (none otherwise); its caller spawns it and acts on how it ended.
pub fn background(
    s: &Arc<Shared>,
    pg: &Arc<Pg>,
    epoch: u64,
) -> Option<impl std::future::Future<Output = RecoveryEnd> + Send + 'static> {
    let generation = {
        let missing = pg.missing();
        if missing.is_empty() {
            return None;
        }
        missing.generation()
    };
    let (s, pg) = (s.clone(), pg.clone());
    Some(async move { recover_all(s, pg, epoch, generation).await })
}

/// Whether the background recovery of the activation `generation` in the interval of `epoch`
/// is still the PG's (a PG peered again in its interval starts another).
fn current(pg: &Pg, epoch: u64, generation: u64) -> bool {
    pg.active_epoch() == Some(epoch) && pg.missing().generation() == generation
}

async fn recover_all(s: Arc<Shared>, pg: Arc<Pg>, epoch: u64, generation: u64) -> RecoveryEnd {
    let mut held_before = false;
    loop {
        if !current(&pg, epoch, generation) {
            return RecoveryEnd::Superseded;
        }
        if s.flag_set(MapFlag::NoRecover) {
            if !held_before {
                tracing::info!(osd = s.id, pg = %pg.id, epoch, "recovery held by norecover");
                held_before = true;
            }
            pg.set_fill_state(FillState::Held(MapFlag::NoRecover));
            tokio::time::sleep(HELD_PAUSE).await;
            continue;
        }
        held_before = false;
        let slot = s.throttle.active_slot().await;
        if !current(&pg, epoch, generation) {
            return RecoveryEnd::Superseded;
        }
        let claimed = pg.missing().next_background();
        let Some(claim) = claimed else {
            if pg.missing().is_empty() {
                break;
            }
            drop(slot);
            tokio::time::sleep(CLAIMED_PAUSE).await;
            continue;
        };
        pg.set_fill_state(FillState::Recovering);
        let held = Claimed::new(&pg, &claim);
        let done = recover_object(&s, &pg, epoch, &claim, Urgency::Background).await;
        drop(held);
        drop(slot);
        match done {
            Ok(()) => {}
            Err(OsdError::TooFull { osd, why }) => {
                tracing::warn!(osd = s.id, pg = %pg.id, epoch, copy = osd, %why, "copy too full for its recovery: peering again to leave it out");
                pg.note_too_full(epoch);
                return RecoveryEnd::CopyTooFull;
            }
            Err(e) => {
                tracing::info!(osd = s.id, pg = %pg.id, epoch, object = %claim.object, error = %e, "object recovery failed; retrying");
                tokio::time::sleep(RETRY_PAUSE).await;
                continue;
            }
        }
        let mclock = matches!(s.sched.policy(), cairn_qos::PolicyConfig::Mclock(_));
        let pause = s.throttle.sleep(mclock);
        if !pause.is_zero() {
            tokio::time::sleep(pause).await;
        }
    }
    pg.set_fill_state(FillState::Idle);
    pg.finish_recovery(epoch);
    tracing::debug!(osd = s.id, pg = %pg.id, epoch, "recovered after activation");
    RecoveryEnd::Done
}

/// A claim on one object's recovery, ended when dropped: also when the task recovering it is
/// aborted or its op given up, so that whoever waits for the object never waits on a claim
/// nobody holds.
struct Claimed<'a> {
    pg: &'a Pg,
    claim: &'a ObjectRecovery,
}

impl<'a> Claimed<'a> {
    fn new(pg: &'a Pg, claim: &'a ObjectRecovery) -> Self {
        Claimed { pg, claim }
    }
}

impl Drop for Claimed<'_> {
    fn drop(&mut self) {
        let claim = self.claim;
        self.pg.missing().release(claim.generation, &claim.object);
    }
}

/// A planted bug (feature `planted-bugs`, for the simulation to catch): a copy that lacks an
/// object records it recovered without pulling it, and serves what it had.
const PLANTED_SKIP_OWN_PULL: bool = cfg!(feature = "planted-bugs");

/// Recovers `claim`'s object in the interval of `epoch`: this copy first (pulled from a copy
/// at the version the log names, or removed), recorded here; then pushed to every other copy
/// that lacks it, each of which records it with the object. `urgency` picks the steps' class.
pub(crate) async fn recover_object(
    s: &Arc<Shared>,
    pg: &Pg,
    epoch: u64,
    claim: &ObjectRecovery,
    urgency: Urgency,
) -> Result<(), OsdError> {
    let r = Recovering {
        s,
        pg,
        epoch,
        urgency,
        fill: 0,
    };
    let obj = claim.object.as_str();
    if let Some(want) = claim.own {
        // Activation created the collection.
        let mut created = true;
        if !PLANTED_SKIP_OWN_PULL {
            recover_local(&r, &claim.sources, obj, &mut created, want).await?;
        }
        record_own(s, pg, claim.generation, obj).await?;
    }
    for &osd in &claim.peers {
        push(&r, osd, obj).await?;
        pg.missing().peer_recovered(claim.generation, osd, obj);
    }
    Ok(())
}

/// Records that this copy holds `obj` now, under the PG's lock (which an activation holds
/// while it replaces the missing set), if the activation `generation` is still the PG's.
async fn record_own(s: &Shared, pg: &Pg, generation: u64, obj: &str) -> Result<(), OsdError> {
    let _inner = pg.lock().await;
    if pg.missing().generation() != generation || !pg.missing().own_lacks(obj) {
        return Ok(());
    }
    let mut txn = Transaction::new();
    remove_missing(&mut txn, &pg.coll, obj);
    s.store.queue_transaction_owned(txn).await?;
    pg.missing().own_recovered(generation, obj);
    Ok(())
}

/// Makes `object` ready for a client op on `pg`, active in the interval of `active`: a read
/// needs this copy of it, a write every copy. Recovers it now, as the client's work, unless
/// another task does already (then waits for that); returns at once when nothing lacks it.
/// Err: why the op cannot go on.
pub(crate) async fn ready_for_op(
    s: &Arc<Shared>,
    pg: &Pg,
    active: u64,
    object: &str,
    write: bool,
) -> Result<(), String> {
    loop {
        let need = pg.missing().need(object, write);
        match need {
            Need::Ready => return Ok(()),
            Need::Wait(mut claim) => {
                tokio::select! {
                    _ = claim.changed() => {}
                    _ = pg.wait_interval_change(active) => {
                        return Err(format!("pg {} changed interval", pg.id));
                    }
                    _ = s.stopped() => return Err(format!("osd.{} is stopping", s.id)),
                }
            }
            Need::Recover(claim) => {
                s.metrics.record_op_recovery();
                let held = Claimed::new(pg, &claim);
                let done = recover_object(s, pg, active, &claim, Urgency::Blocking).await;
                drop(held);
                if let Err(e) = done {
                    return Err(format!("pg {}: recovering {object} first: {e}", pg.id));
                }
                if pg.missing().is_empty() {
                    pg.finish_recovery(active);
                }
            }
        }
        if pg.active_epoch() != Some(active) {
            return Err(format!("pg {} changed interval", pg.id));
        }
    }
}
