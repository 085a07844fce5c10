//! Byte-range locks as POSIX defines them (fcntl's record locks; flock's whole-file locks are
//! the same with the open file as owner), across every client of a file system.
//!
//! Locks belong to a (client, owner) pair. Another pair's lock overlapping a wanted range
//! refuses it when either is exclusive. A pair's own locks never conflict: setting a range
//! replaces what the pair held there (splitting a lock it cuts through), and unlocking a range
//! cuts it out. The metadata server keeps one table for every client; a client keeps one of
//! its own, the same type, to say again what it holds after an MDS restart.
//!
//! A waiting request (`F_SETLKW`) is asked again by its client until granted; the MDS
//! remembers each waiting (client, owner), the lock it wants and when it began to wait, for
//! [`WAIT_FRESH`] after its last try. Waiting requests are granted in the order they began:
//! one that could be granted still waits while an earlier waiter wants a range it conflicts
//! with (so a stream of shared locks cannot starve an exclusive one), unless that earlier
//! waiter itself waits, through any chain, for it (queueing would then never end). A waiting
//! request whose holders in the way wait, through any chain of holders and earlier waiters,
//! for its own owner would wait forever: it is answered EDEADLK, as Linux answers a local
//! `F_SETLKW` deadlock.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use cairn_proto::mds::{LockKind, LockSpec, MAX_HELD_LOCKS};

/// How long a waiting owner counts as waiting after its last try (a client tries again at
/// least every half second).
pub const WAIT_FRESH: Duration = Duration::from_secs(2);
/// Most waiting owners remembered at once, over every client.
pub const MAX_WAITERS: usize = 1 << 16;

/// A (client, owner) pair: who holds or waits for locks.
type Owner = (u64, u64);

/// A lock an owner waits for.
#[derive(Clone, Copy, Debug)]
struct Waiter {
    ino: u64,
    lock: LockSpec,
    /// Its latest try.
    at: Instant,
    /// Its first try for this lock: its place in the queue.
    since: Instant,
}

/// One lock and its holder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Held {
    client: u64,
    lock: LockSpec,
}

fn overlap(a: &LockSpec, b: &LockSpec) -> bool {
    a.start <= b.end && b.start <= a.end
}

/// Whether two wanted or held locks of different owners cannot both be held.
fn conflicting(a: &LockSpec, b: &LockSpec) -> bool {
    a.kind != LockKind::Unlock
        && b.kind != LockKind::Unlock
        && overlap(a, b)
        && (a.kind == LockKind::Exclusive || b.kind == LockKind::Exclusive)
}

/// The fresh waiters of each inode, gathered once per waiting request.
type WaitersByIno = HashMap<u64, Vec<(Owner, Waiter)>>;

/// Locks by inode.
#[derive(Debug, Default)]
pub struct Locks {
    by_ino: HashMap<u64, Vec<Held>>,
    per_client: HashMap<u64, usize>,
    waiting: HashMap<Owner, Waiter>,
}

impl Locks {
    /// The first lock of another holder that keeps `client` from taking `lock` on `ino`.
    pub fn conflict(&self, ino: u64, client: u64, lock: &LockSpec) -> Option<LockSpec> {
        let held = self.by_ino.get(&ino)?;
        held.iter()
            .find(|h| {
                (h.client, h.lock.owner) != (client, lock.owner) && conflicting(&h.lock, lock)
            })
            .map(|h| h.lock)
    }

    /// Every holder whose lock keeps `client` from taking `lock` on `ino`.
    fn blockers<'a>(
        &'a self,
        ino: u64,
        client: u64,
        lock: &'a LockSpec,
    ) -> impl Iterator<Item = Owner> + 'a {
        self.by_ino
            .get(&ino)
            .into_iter()
            .flatten()
            .filter(move |h| {
                (h.client, h.lock.owner) != (client, lock.owner) && conflicting(&h.lock, lock)
            })
            .map(|h| (h.client, h.lock.owner))
    }

    /// The waiters still waiting at `now`, by inode.
    fn fresh_waiters(&self, now: Instant) -> WaitersByIno {
        let mut by_ino: WaitersByIno = HashMap::new();
        for (owner, w) in &self.waiting {
            if now.saturating_duration_since(w.at) < WAIT_FRESH {
                by_ino.entry(w.ino).or_default().push((*owner, *w));
            }
        }
        by_ino
    }

    /// The earlier waiters `owner`, waiting since `since`, queues behind: those on `ino`
    /// that began first and want a range its `lock` conflicts with.
    fn queued_behind<'a>(
        waiters: &'a WaitersByIno,
        owner: Owner,
        ino: u64,
        lock: &'a LockSpec,
        since: Instant,
    ) -> impl Iterator<Item = Owner> + 'a {
        waiters
            .get(&ino)
            .into_iter()
            .flatten()
            .filter(move |(other, w)| {
                *other != owner && (w.since, *other) < (since, owner) && conflicting(&w.lock, lock)
            })
            .map(|(other, _)| *other)
    }

    /// Whether any of `from` waits at `now`, through a chain of holders in its way and earlier
    /// waiters it queues behind, for `me`.
    fn reaches(&self, waiters: &WaitersByIno, me: Owner, from: Vec<Owner>, now: Instant) -> bool {
        let mut seen: HashSet<Owner> = HashSet::new();
        let mut next = from;
        while let Some(owner) = next.pop() {
            if owner == me {
                return true;
            }
            if !seen.insert(owner) {
                continue;
            }
            let waiting = self
                .waiting
                .get(&owner)
                .filter(|w| now.saturating_duration_since(w.at) < WAIT_FRESH);
            if let Some(w) = waiting {
                next.extend(self.blockers(w.ino, owner.0, &w.lock));
                next.extend(Self::queued_behind(waiters, owner, w.ino, &w.lock, w.since));
            }
        }
        false
    }

    /// [`Locks::set`] for a caller that waits and asks again until granted: while refused,
    /// the owner is remembered as waiting for `lock`; EDEADLK instead of EAGAIN when the
    /// wait would never end (see the module's comment).
    pub fn set_or_wait(
        &mut self,
        ino: u64,
        client: u64,
        lock: LockSpec,
        now: Instant,
    ) -> Result<(), i32> {
        let me = (client, lock.owner);
        // Its place in the queue: kept while it asks again for the same lock.
        let since = self
            .waiting
            .get(&me)
            .filter(|w| {
                w.ino == ino && w.lock == lock && now.saturating_duration_since(w.at) < WAIT_FRESH
            })
            .map_or(now, |w| w.since);
        if lock.end < lock.start {
            return Err(libc::EINVAL);
        }
        let waiters = self.fresh_waiters(now);
        let holders: Vec<Owner> = self.blockers(ino, client, &lock).collect();
        if !holders.is_empty() && self.reaches(&waiters, me, holders, now) {
            self.waiting.remove(&me);
            return Err(libc::EDEADLK);
        }
        let ahead: Vec<Owner> = Self::queued_behind(&waiters, me, ino, &lock, since).collect();
        // An earlier waiter that waits for this owner is not waited for: that would never end.
        let queued = !ahead.is_empty() && !self.reaches(&waiters, me, ahead, now);
        if !queued {
            match self.set(ino, client, lock) {
                Err(libc::EAGAIN) => {}
                done => {
                    self.waiting.remove(&me);
                    return done;
                }
            }
        }
        if self.waiting.len() >= MAX_WAITERS {
            self.waiting
                .retain(|_, w| now.saturating_duration_since(w.at) < WAIT_FRESH);
        }
        if self.waiting.len() < MAX_WAITERS || self.waiting.contains_key(&me) {
            let waiter = Waiter {
                ino,
                lock,
                at: now,
                since,
            };
            self.waiting.insert(me, waiter);
        }
        Err(libc::EAGAIN)
    }

    /// Takes, changes or releases `lock` of `client` on `ino`: EAGAIN while another holder's
    /// lock is in the way, ENOLCK past [`MAX_HELD_LOCKS`] locks of one client, EINVAL for a
    /// range that ends before it starts.
    pub fn set(&mut self, ino: u64, client: u64, lock: LockSpec) -> Result<(), i32> {
        if lock.end < lock.start {
            return Err(libc::EINVAL);
        }
        if self.conflict(ino, client, &lock).is_some() {
            return Err(libc::EAGAIN);
        }
        let old = self.by_ino.get(&ino).cloned().unwrap_or_default();
        let mut new = Vec::with_capacity(old.len() + 2);
        for h in old {
            let mine = (h.client, h.lock.owner) == (client, lock.owner);
            if !mine || !overlap(&h.lock, &lock) {
                new.push(h);
                continue;
            }
            if h.lock.start < lock.start {
                let mut left = h;
                left.lock.end = lock.start - 1;
                new.push(left);
            }
            if h.lock.end > lock.end {
                let mut right = h;
                right.lock.start = lock.end + 1;
                new.push(right);
            }
        }
        if lock.kind != LockKind::Unlock {
            new.push(Held { client, lock });
        }
        let before = self
            .by_ino
            .get(&ino)
            .map_or(0, |v| v.iter().filter(|h| h.client == client).count());
        let after = new.iter().filter(|h| h.client == client).count();
        let total = self.per_client.get(&client).copied().unwrap_or(0) - before + after;
        if total > MAX_HELD_LOCKS && after > before {
            return Err(libc::ENOLCK);
        }
        self.store(ino, new);
        self.count(client, total);
        Ok(())
    }

    fn store(&mut self, ino: u64, held: Vec<Held>) {
        match held.is_empty() {
            true => self.by_ino.remove(&ino),
            false => self.by_ino.insert(ino, held),
        };
    }

    fn count(&mut self, client: u64, n: usize) {
        match n {
            0 => self.per_client.remove(&client),
            n => self.per_client.insert(client, n),
        };
    }

    /// Releases every lock `owner` of `client` holds on `ino` (the file it locked through was
    /// closed).
    pub fn release_owner(&mut self, ino: u64, client: u64, owner: u64) {
        let released = self.set(ino, client, LockSpec::unlock_all(owner));
        assert_eq!(released, Ok(()), "an unlock is never refused");
    }

    /// Releases every lock of `client` (its lease ended).
    pub fn drop_client(&mut self, client: u64) {
        self.waiting.retain(|(c, _), _| *c != client);
        self.forget_locks(client);
    }

    /// Forgets the locks of `client` (not what it waits for).
    fn forget_locks(&mut self, client: u64) {
        if self.per_client.remove(&client).is_none() {
            return;
        }
        self.by_ino.retain(|_, held| {
            held.retain(|h| h.client != client);
            !held.is_empty()
        });
    }

    /// Whether `client` holds any lock.
    pub fn holds_any(&self, client: u64) -> bool {
        self.per_client.contains_key(&client)
    }

    /// Every lock `client` holds, by inode.
    pub fn held_by(&self, client: u64) -> Vec<(u64, LockSpec)> {
        if !self.per_client.contains_key(&client) {
            return Vec::new();
        }
        let mut out: Vec<(u64, LockSpec)> = self
            .by_ino
            .iter()
            .flat_map(|(ino, held)| {
                held.iter()
                    .filter(|h| h.client == client)
                    .map(|h| (*ino, h.lock))
            })
            .collect();
        out.sort_by_key(|(ino, l)| (*ino, l.owner, l.start));
        out
    }

    /// Replaces what `client` holds with `locks`, as it says it holds them (E2BIG past
    /// [`MAX_HELD_LOCKS`]; unlocks and backward ranges are left out).
    pub fn replace(&mut self, client: u64, locks: &[(u64, LockSpec)]) -> Result<(), i32> {
        if locks.len() > MAX_HELD_LOCKS {
            return Err(libc::E2BIG);
        }
        self.forget_locks(client);
        let mut n = 0;
        for (ino, lock) in locks {
            if lock.kind == LockKind::Unlock || lock.end < lock.start {
                continue;
            }
            self.by_ino.entry(*ino).or_default().push(Held {
                client,
                lock: *lock,
            });
            n += 1;
        }
        self.count(client, n);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lock(owner: u64, start: u64, end: u64, kind: LockKind) -> LockSpec {
        LockSpec {
            owner,
            start,
            end,
            kind,
            pid: 7,
        }
    }

    #[test]
    fn exclusive_locks_refuse_overlaps_of_other_holders() {
        let mut t = Locks::default();
        t.set(1, 10, lock(1, 0, 99, LockKind::Exclusive)).unwrap();
        assert_eq!(
            t.set(1, 20, lock(1, 50, 60, LockKind::Shared)),
            Err(libc::EAGAIN)
        );
        assert_eq!(
            t.set(1, 10, lock(2, 99, 99, LockKind::Shared)),
            Err(libc::EAGAIN),
            "another owner on the same client conflicts too"
        );
        t.set(1, 20, lock(1, 100, 199, LockKind::Exclusive))
            .unwrap();
        t.set(2, 20, lock(1, 0, 99, LockKind::Exclusive)).unwrap();
        assert_eq!(
            t.conflict(1, 30, &lock(1, 0, u64::MAX, LockKind::Shared)),
            Some(lock(1, 0, 99, LockKind::Exclusive))
        );
    }

    #[test]
    fn shared_locks_share() {
        let mut t = Locks::default();
        t.set(1, 10, lock(1, 0, u64::MAX, LockKind::Shared))
            .unwrap();
        t.set(1, 20, lock(1, 0, u64::MAX, LockKind::Shared))
            .unwrap();
        assert_eq!(
            t.set(1, 30, lock(1, 5, 5, LockKind::Exclusive)),
            Err(libc::EAGAIN)
        );
        t.release_owner(1, 10, 1);
        assert_eq!(
            t.set(1, 30, lock(1, 5, 5, LockKind::Exclusive)),
            Err(libc::EAGAIN)
        );
        t.release_owner(1, 20, 1);
        t.set(1, 30, lock(1, 5, 5, LockKind::Exclusive)).unwrap();
    }

    #[test]
    fn a_holders_own_ranges_are_replaced_split_and_cut() {
        let mut t = Locks::default();
        t.set(1, 10, lock(1, 0, 99, LockKind::Shared)).unwrap();
        t.set(1, 10, lock(1, 40, 59, LockKind::Exclusive)).unwrap();
        assert_eq!(
            t.held_by(10),
            vec![
                (1, lock(1, 0, 39, LockKind::Shared)),
                (1, lock(1, 40, 59, LockKind::Exclusive)),
                (1, lock(1, 60, 99, LockKind::Shared)),
            ]
        );
        t.set(1, 10, lock(1, 30, 69, LockKind::Unlock)).unwrap();
        assert_eq!(
            t.held_by(10),
            vec![
                (1, lock(1, 0, 29, LockKind::Shared)),
                (1, lock(1, 70, 99, LockKind::Shared)),
            ]
        );
        t.set(1, 20, lock(1, 30, 69, LockKind::Exclusive)).unwrap();
        t.set(1, 10, lock(1, 0, u64::MAX, LockKind::Unlock))
            .unwrap();
        assert_eq!(t.held_by(10), vec![]);
        assert_eq!(t.per_client.get(&10), None);
        assert!(!t.holds_any(10));
        assert_eq!(
            t.set(1, 10, lock(1, 5, 4, LockKind::Shared)),
            Err(libc::EINVAL)
        );
    }

    #[test]
    fn a_gone_client_holds_nothing_and_a_restated_one_holds_what_it_says() {
        let mut t = Locks::default();
        t.set(1, 10, lock(1, 0, 9, LockKind::Exclusive)).unwrap();
        t.set(2, 10, lock(3, 0, 9, LockKind::Exclusive)).unwrap();
        t.drop_client(10);
        assert!(t.by_ino.is_empty() && t.per_client.is_empty());
        let said = vec![
            (1, lock(1, 0, 9, LockKind::Exclusive)),
            (4, lock(2, 0, 0, LockKind::Unlock)),
        ];
        t.replace(10, &said).unwrap();
        assert_eq!(t.held_by(10), vec![(1, lock(1, 0, 9, LockKind::Exclusive))]);
        assert_eq!(
            t.set(1, 20, lock(1, 0, 0, LockKind::Shared)),
            Err(libc::EAGAIN)
        );
    }

    #[test]
    fn one_client_holds_at_most_the_limit_of_locks() {
        let mut t = Locks::default();
        for ino in 0..MAX_HELD_LOCKS as u64 {
            t.set(ino, 10, lock(1, 0, 1, LockKind::Shared)).unwrap();
        }
        assert_eq!(
            t.set(0, 10, lock(1, 5, 6, LockKind::Shared)),
            Err(libc::ENOLCK)
        );
        t.set(0, 10, lock(1, 0, 1, LockKind::Exclusive)).unwrap();
        t.set(0, 10, lock(1, 0, 1, LockKind::Unlock)).unwrap();
        t.set(0, 10, lock(1, 5, 6, LockKind::Shared)).unwrap();
    }

    /// Two owners each holding what the other waits for: the second to wait is told
    /// EDEADLK, the first keeps waiting; a chain of three is found the same way.
    #[test]
    fn a_wait_that_would_never_end_is_a_deadlock() {
        let now = Instant::now();
        let mut t = Locks::default();
        t.set(1, 10, lock(1, 0, 0, LockKind::Exclusive)).unwrap();
        t.set(1, 20, lock(2, 1, 1, LockKind::Exclusive)).unwrap();
        let a_wants = lock(1, 1, 1, LockKind::Exclusive);
        let b_wants = lock(2, 0, 0, LockKind::Exclusive);
        assert_eq!(t.set_or_wait(1, 10, a_wants, now), Err(libc::EAGAIN));
        assert_eq!(t.set(1, 20, b_wants), Err(libc::EAGAIN), "no wait: EAGAIN");
        assert_eq!(t.set_or_wait(1, 20, b_wants, now), Err(libc::EDEADLK));
        assert_eq!(t.set_or_wait(1, 10, a_wants, now), Err(libc::EAGAIN));
        t.set(1, 20, LockSpec::unlock_all(2)).unwrap();
        assert_eq!(
            t.set_or_wait(1, 10, a_wants, now),
            Ok(()),
            "granted once freed"
        );

        let mut t = Locks::default();
        for (client, owner, byte) in [(1, 1, 0), (2, 2, 1), (3, 3, 2)] {
            t.set(9, client, lock(owner, byte, byte, LockKind::Exclusive))
                .unwrap();
        }
        let want = |owner, byte| lock(owner, byte, byte, LockKind::Exclusive);
        assert_eq!(t.set_or_wait(9, 1, want(1, 1), now), Err(libc::EAGAIN));
        assert_eq!(t.set_or_wait(9, 2, want(2, 2), now), Err(libc::EAGAIN));
        assert_eq!(t.set_or_wait(9, 3, want(3, 0), now), Err(libc::EDEADLK));
    }

    /// Waiting requests are granted in the order they began: readers that keep coming do
    /// not starve a waiting writer, and a later waiter on another range is not held back.
    #[test]
    fn waiters_are_granted_in_the_order_they_began() {
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        let mut t = Locks::default();
        t.set(1, 10, lock(1, 0, 99, LockKind::Shared)).unwrap();
        let writer = lock(2, 0, 99, LockKind::Exclusive);
        assert_eq!(t.set_or_wait(1, 20, writer, at(0)), Err(libc::EAGAIN));
        // A later reader could share the first reader's lock, but the writer waits first.
        let reader = lock(3, 50, 60, LockKind::Shared);
        assert_eq!(t.set_or_wait(1, 30, reader, at(10)), Err(libc::EAGAIN));
        assert_eq!(
            t.set(1, 30, reader),
            Ok(()),
            "a request that does not wait is not queued"
        );
        t.set(1, 30, LockSpec::unlock_all(3)).unwrap();
        // A waiter on a range nobody ahead wants is granted at once.
        let elsewhere = lock(4, 200, 299, LockKind::Exclusive);
        assert_eq!(t.set_or_wait(1, 40, elsewhere, at(20)), Ok(()));
        // The first reader lets go: the writer, first in line, gets it; the reader, asking
        // again, still waits, now for the writer's lock.
        t.set(1, 10, LockSpec::unlock_all(1)).unwrap();
        assert_eq!(t.set_or_wait(1, 30, reader, at(30)), Err(libc::EAGAIN));
        assert_eq!(t.set_or_wait(1, 20, writer, at(40)), Ok(()));
        t.set(1, 20, LockSpec::unlock_all(2)).unwrap();
        assert_eq!(t.set_or_wait(1, 30, reader, at(50)), Ok(()));
        // A waiter whose wait went stale loses its place.
        t.set(1, 30, LockSpec::unlock_all(3)).unwrap();
        t.set(1, 10, lock(1, 0, 0, LockKind::Exclusive)).unwrap();
        assert_eq!(t.set_or_wait(1, 20, writer, at(60)), Err(libc::EAGAIN));
        t.set(1, 10, LockSpec::unlock_all(1)).unwrap();
        let late = at(60) + WAIT_FRESH + Duration::from_millis(1);
        assert_eq!(t.set_or_wait(1, 30, reader, late), Ok(()));
    }

    /// Queueing behind an earlier waiter that itself waits for the newcomer would never end:
    /// the newcomer is granted instead; and a cycle through the queue is a deadlock.
    #[test]
    fn the_queue_never_makes_a_wait_that_cannot_end() {
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        let mut t = Locks::default();
        // Owner B holds byte 5; A waits for [0, 9] (blocked by B).
        t.set(1, 20, lock(2, 5, 5, LockKind::Exclusive)).unwrap();
        let a_wants = lock(1, 0, 9, LockKind::Exclusive);
        assert_eq!(t.set_or_wait(1, 10, a_wants, at(0)), Err(libc::EAGAIN));
        // B now wants byte 0, free, but inside A's wanted range: A waits for B, so B does
        // not queue behind A.
        let b_wants = lock(2, 0, 0, LockKind::Exclusive);
        assert_eq!(t.set_or_wait(1, 20, b_wants, at(10)), Ok(()));
        // C, free of both, queues behind A for byte 1; then B asks for byte 1 too: behind C,
        // which is behind A, which waits for B — granted rather than queued.
        let c_wants = lock(3, 1, 1, LockKind::Exclusive);
        assert_eq!(t.set_or_wait(1, 30, c_wants, at(20)), Err(libc::EAGAIN));
        let b_more = lock(2, 1, 1, LockKind::Exclusive);
        assert_eq!(t.set_or_wait(1, 20, b_more, at(30)), Ok(()));
        // D holds byte 50 and waits behind nobody for byte 5 (B's): then B waits for byte 50
        // (D's): B -> D -> B is a deadlock.
        t.set(1, 40, lock(4, 50, 50, LockKind::Exclusive)).unwrap();
        assert_eq!(
            t.set_or_wait(1, 40, lock(4, 5, 5, LockKind::Exclusive), at(40)),
            Err(libc::EAGAIN)
        );
        assert_eq!(
            t.set_or_wait(1, 20, lock(2, 50, 50, LockKind::Exclusive), at(50)),
            Err(libc::EDEADLK)
        );
        assert_eq!(
            t.set_or_wait(1, 20, lock(2, 9, 3, LockKind::Exclusive), at(60)),
            Err(libc::EINVAL)
        );
    }

    /// A waiter that stopped asking, or whose client's lease ended, is no longer waiting.
    #[test]
    fn waits_that_stopped_are_forgotten() {
        let now = Instant::now();
        let mut t = Locks::default();
        t.set(1, 10, lock(1, 0, 0, LockKind::Exclusive)).unwrap();
        t.set(1, 20, lock(2, 1, 1, LockKind::Exclusive)).unwrap();
        let a_wants = lock(1, 1, 1, LockKind::Exclusive);
        let b_wants = lock(2, 0, 0, LockKind::Exclusive);
        assert_eq!(t.set_or_wait(1, 10, a_wants, now), Err(libc::EAGAIN));
        let later = now + WAIT_FRESH + Duration::from_millis(1);
        assert_eq!(
            t.set_or_wait(1, 20, b_wants, later),
            Err(libc::EAGAIN),
            "the first wait went stale"
        );
        t.replace(20, &[(1, lock(2, 1, 1, LockKind::Exclusive))])
            .unwrap();
        assert_eq!(
            t.set_or_wait(1, 10, a_wants, later),
            Err(libc::EDEADLK),
            "a restatement keeps the client's waits"
        );
        t.drop_client(20);
        assert_eq!(
            t.set_or_wait(1, 10, a_wants, later),
            Ok(()),
            "its locks and waits went"
        );
    }
}
