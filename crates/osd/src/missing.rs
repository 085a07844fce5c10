//! The objects a PG's copies lack while it serves (Ceph's missing sets): a PG activates as soon
//! as peering has chosen its authoritative log, with every copy's log replaced by it, and the
//! objects a copy's data is behind on are recovered in the background afterwards. A client op
//! waits only for the object it touches: a read for this copy's, a write for every copy's.
//! Exactly one task recovers an object at a time (a claim); others wait for the claim to end
//! and look again.

use std::collections::BTreeMap;

use cairn_pg::Eversion;
use tokio::sync::watch;

/// Objects one copy lacks, each with the version it needs (None: the object is deleted).
pub type Wanted = BTreeMap<String, Option<Eversion>>;

/// The missing objects of a PG's copies, as this OSD knows them: its own copy's (on every
/// OSD, persisted with the PG's meta object), and as the primary, each other copy's and the
/// claims on the objects being recovered now.
#[derive(Default)]
pub struct MissingSets {
    /// The interval (its first epoch) whose activation recorded the sets; 0: none.
    epoch: u64,
    /// Counts the activations recorded: a PG peered again within its interval activates in
    /// the same epoch, and what a recovery of an earlier activation claimed or recovered must
    /// change nothing in the sets of the next.
    generation: u64,
    /// This copy's missing objects.
    own: Wanted,
    /// As primary: every other acting copy's missing objects (copies lacking none absent).
    peers: BTreeMap<i32, Wanted>,
    /// As primary: the copies to pull this copy's missing objects from, in order.
    sources: Vec<i32>,
    /// Objects a task is recovering now; dropping the sender wakes whoever waits.
    claims: BTreeMap<String, watch::Sender<()>>,
}

/// One object's recovery as a claim gives it out: what this copy and the others lack of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectRecovery {
    /// The object.
    pub object: String,
    /// The version this copy needs, if it lacks the object (inner None: delete it here).
    pub own: Option<Option<Eversion>>,
    /// The other copies that lack it.
    pub peers: Vec<i32>,
    /// The activation ([`MissingSets::generation`]) the claim belongs to.
    pub generation: u64,
    /// Where to pull this copy's version from, in order.
    pub sources: Vec<i32>,
}

/// What a client op on an object must do before it runs.
#[derive(Debug)]
pub enum Need {
    /// Nothing: every copy it needs holds the object.
    Ready,
    /// Another task recovers the object now: wait for it to end (`changed()` fails then),
    /// and ask again.
    Wait(watch::Receiver<()>),
    /// The caller has claimed the object's recovery: recover it, then [`MissingSets::release`].
    Recover(ObjectRecovery),
}

impl MissingSets {
    /// Records the sets of an activation as primary in the interval of `epoch`: this copy's,
    /// every other copy's (empty ones dropped) and where to pull this copy's from. Claims of
    /// an earlier activation end (their waiters look again and find the PG moved on).
    pub fn activate_primary(
        &mut self,
        epoch: u64,
        own: Wanted,
        peers: BTreeMap<i32, Wanted>,
        sources: Vec<i32>,
    ) {
        self.epoch = epoch;
        self.generation += 1;
        self.own = own;
        self.peers = peers.into_iter().filter(|(_, w)| !w.is_empty()).collect();
        self.sources = sources;
        self.claims.clear();
    }

    /// Records this copy's missing objects as a replica activated in the interval of `epoch`
    /// (or as loaded from the store, with `epoch` 0).
    pub fn set_own(&mut self, epoch: u64, own: Wanted) {
        self.epoch = epoch;
        self.generation += 1;
        self.own = own;
        self.peers.clear();
        self.sources.clear();
        self.claims.clear();
    }

    /// This copy's missing objects.
    pub fn own(&self) -> &Wanted {
        &self.own
    }

    /// Whether this copy lacks `object`.
    pub fn own_lacks(&self, object: &str) -> bool {
        self.own.contains_key(object)
    }

    /// Whether any copy lacks anything.
    pub fn is_empty(&self) -> bool {
        self.own.is_empty() && self.peers.is_empty()
    }

    /// Objects this copy lacks, and copies of objects the others lack (Ceph's degraded
    /// object count counts each missing copy).
    pub fn counts(&self) -> (u64, u64) {
        let own = self.own.len() as u64;
        let others: u64 = self.peers.values().map(|w| w.len() as u64).sum();
        (own, own + others)
    }

    /// What an op on `object` must do first: a read (`write` false) needs this copy's object,
    /// a write every copy's.
    pub fn need(&mut self, object: &str, write: bool) -> Need {
        let lacking_here = self.own.contains_key(object);
        let lacking_elsewhere = write && self.peers.values().any(|w| w.contains_key(object));
        if !lacking_here && !lacking_elsewhere {
            return Need::Ready;
        }
        if let Some(claim) = self.claims.get(object) {
            return Need::Wait(claim.subscribe());
        }
        Need::Recover(self.claim(object))
    }

    /// Claims the next object no task recovers yet, this copy's first (the others are pushed
    /// from it); None when there is none left.
    pub fn next_background(&mut self) -> Option<ObjectRecovery> {
        let unclaimed = |o: &&String| !self.claims.contains_key(o.as_str());
        let next = self
            .own
            .keys()
            .find(unclaimed)
            .or_else(|| self.peers.values().flat_map(|w| w.keys()).find(unclaimed))
            .cloned()?;
        Some(self.claim(&next))
    }

    fn claim(&mut self, object: &str) -> ObjectRecovery {
        assert!(
            !self.claims.contains_key(object),
            "{object} is claimed twice"
        );
        self.claims.insert(object.to_string(), watch::channel(()).0);
        ObjectRecovery {
            object: object.to_string(),
            own: self.own.get(object).copied(),
            peers: self
                .peers
                .iter()
                .filter(|(_, w)| w.contains_key(object))
                .map(|(&o, _)| o)
                .collect(),
            sources: self.sources.clone(),
            generation: self.generation,
        }
    }

    /// This copy holds `object` now, as recovered in the activation `generation` (nothing when
    /// another activation has replaced the sets since: what it records is newer).
    pub fn own_recovered(&mut self, generation: u64, object: &str) {
        if generation == self.generation {
            self.own.remove(object);
        }
    }

    /// Copy `osd` holds `object` now, as recovered in the activation `generation`.
    pub fn peer_recovered(&mut self, generation: u64, osd: i32, object: &str) {
        if generation != self.generation {
            return;
        }
        if let Some(w) = self.peers.get_mut(&osd) {
            w.remove(object);
            if w.is_empty() {
                self.peers.remove(&osd);
            }
        }
    }

    /// Ends the claim on `object` taken in the activation `generation`, recovered or not:
    /// whoever waits looks again.
    pub fn release(&mut self, generation: u64, object: &str) {
        if generation == self.generation {
            self.claims.remove(object);
        }
    }

    /// This copy holds `object` now, pushed to it as a replica (its primary tracks the
    /// claims).
    pub fn replica_recovered(&mut self, object: &str) {
        self.own.remove(object);
    }

    /// The interval whose activation recorded the sets (0: none).
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The activation the sets belong to (see the field).
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Whether an op on `object` finds it ready (see [`MissingSets::need`]) without claiming
    /// anything.
    pub fn ready(&self, object: &str, write: bool) -> bool {
        let lacking_elsewhere = write && self.peers.values().any(|w| w.contains_key(object));
        !(self.own.contains_key(object) || lacking_elsewhere)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wanted(objects: &[&str]) -> Wanted {
        objects
            .iter()
            .map(|o| (o.to_string(), Some(Eversion::new(3, 1))))
            .collect()
    }

    fn sets() -> MissingSets {
        let mut m = MissingSets::default();
        m.activate_primary(
            7,
            wanted(&["a"]),
            BTreeMap::from([(1, wanted(&["a", "b"])), (2, Wanted::new())]),
            vec![2, 1],
        );
        m
    }

    #[test]
    fn a_read_waits_for_this_copy_only_and_a_write_for_every_copy() {
        let mut m = sets();
        assert_eq!(m.counts(), (1, 3));
        assert!(matches!(m.need("c", true), Need::Ready));
        assert!(
            matches!(m.need("b", false), Need::Ready),
            "only osd.1 lacks b"
        );
        let Need::Recover(b) = m.need("b", true) else {
            panic!("a write to b recovers it first")
        };
        assert_eq!((b.own, b.peers.clone()), (None, vec![1]));
        let Need::Recover(a) = m.need("a", false) else {
            panic!("a read of a recovers it first")
        };
        assert_eq!(a.own, Some(Some(Eversion::new(3, 1))));
        assert_eq!((a.peers, a.sources), (vec![1], vec![2, 1]));
        let Need::Wait(waiter) = m.need("a", true) else {
            panic!("a claimed object is waited for")
        };
        assert_eq!(a.generation, 1);
        m.own_recovered(0, "a");
        m.peer_recovered(0, 1, "a");
        m.release(0, "a");
        assert_eq!(
            m.counts(),
            (1, 3),
            "an older activation's recovery records nothing"
        );
        assert!(
            matches!(m.need("a", true), Need::Wait(_)),
            "nor ends a claim"
        );
        m.own_recovered(1, "a");
        m.peer_recovered(1, 1, "a");
        m.release(1, "a");
        assert!(
            waiter.has_changed().is_err(),
            "the end of the claim wakes the waiter"
        );
        assert!(matches!(m.need("a", true), Need::Ready));
        assert_eq!(m.counts(), (0, 1));
        m.peer_recovered(1, 1, "b");
        m.release(1, "b");
        assert!(m.is_empty());
    }

    #[test]
    fn background_recovery_takes_this_copys_objects_first_and_skips_claimed_ones() {
        let mut m = sets();
        let first = m.next_background().unwrap();
        assert_eq!(first.object, "a");
        let second = m.next_background().unwrap();
        assert_eq!(second.object, "b");
        assert_eq!(m.next_background(), None, "both claimed");
        m.release(1, "b");
        assert_eq!(
            m.next_background().unwrap().object,
            "b",
            "not recovered: again"
        );
    }

    #[test]
    fn a_new_activation_ends_every_claim() {
        let mut m = sets();
        let Need::Recover(_) = m.need("a", false) else {
            panic!()
        };
        let Need::Wait(waiter) = m.need("a", false) else {
            panic!()
        };
        m.set_own(9, Wanted::new());
        assert!(waiter.has_changed().is_err());
        assert!(m.is_empty());
        assert_eq!((m.epoch(), m.generation()), (9, 2));
    }
}
