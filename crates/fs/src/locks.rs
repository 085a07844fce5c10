//! Byte-range locks as POSIX defines them (fcntl's record locks; flock's whole-file locks are
//! the same with the open file as owner), across every client of a file system.
//!
//! Locks belong to a (client, owner) pair. Another pair's lock overlapping a wanted range
//! refuses it when either is exclusive. A pair's own locks never conflict: setting a range
//! replaces what the pair held there (splitting a lock it cuts through), and unlocking a range
//! cuts it out. The metadata server keeps one table for every client; a client keeps one of
//! its own, the same type, to say again what it holds after an MDS restart.

use std::collections::HashMap;

use cairn_proto::mds::{LockKind, LockSpec, MAX_HELD_LOCKS};

/// One lock and its holder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Held {
    client: u64,
    lock: LockSpec,
}

fn overlap(a: &LockSpec, b: &LockSpec) -> bool {
    a.start <= b.end && b.start <= a.end
}

/// Locks by inode.
#[derive(Debug, Default)]
pub struct Locks {
    by_ino: HashMap<u64, Vec<Held>>,
    per_client: HashMap<u64, usize>,
}

impl Locks {
    /// The first lock of another holder that keeps `client` from taking `lock` on `ino`.
    pub fn conflict(&self, ino: u64, client: u64, lock: &LockSpec) -> Option<LockSpec> {
        if lock.kind == LockKind::Unlock {
            return None;
        }
        let held = self.by_ino.get(&ino)?;
        held.iter()
            .find(|h| {
                (h.client, h.lock.owner) != (client, lock.owner)
                    && overlap(&h.lock, lock)
                    && (lock.kind == LockKind::Exclusive || h.lock.kind == LockKind::Exclusive)
            })
            .map(|h| h.lock)
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
        if self.per_client.remove(&client).is_none() {
            return;
        }
        self.by_ino.retain(|_, held| {
            held.retain(|h| h.client != client);
            !held.is_empty()
        });
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
        self.drop_client(client);
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
}
