//! Which files each client holds open, as the metadata server counts them: a file that loses
//! its last name while some client holds it stays (an orphan) until no client does, as POSIX
//! keeps an unlinked file readable through the descriptors still open on it.
//!
//! Clients say `Open` and `Close` as they go, and every few seconds `Held` with their whole
//! count, which replaces what was counted (an open or close lost with a session, or all of
//! them after an MDS restart) and renews the client's lease. A client not heard from for a
//! lease holds nothing any more: a dead client keeps no orphan (and, through the caller, no
//! lock) for longer than that.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use cairn_proto::mds::MAX_HELD_FILES;

/// How long a client's opens count without word from it (any request renews it), unless the
/// MDS is told otherwise ([`OpenFiles::with_lease`]).
pub const LEASE: Duration = Duration::from_secs(30);
/// How often a client with open files sends its `Held` count: a few times per lease.
pub const RENEW_EVERY: Duration = Duration::from_secs(5);
/// The shortest lease an MDS accepts: three renewals, so that one delayed renewal does not
/// end a live client's lease.
pub const MIN_LEASE: Duration = Duration::from_secs(3 * RENEW_EVERY.as_secs());
/// Most clients known at once (heard from within a lease); past it a new client's opens are
/// refused (EMFILE) until others' leases pass.
pub const MAX_CLIENTS: usize = 1 << 16;

/// One client's opens.
#[derive(Debug)]
struct Holder {
    counts: HashMap<u64, u32>,
    heard: Instant,
}

/// Every client's opens.
#[derive(Debug)]
pub struct OpenFiles {
    clients: HashMap<u64, Holder>,
    /// How many clients hold each file.
    holders: HashMap<u64, u32>,
    lease: Duration,
}

impl Default for OpenFiles {
    fn default() -> Self {
        Self::with_lease(LEASE)
    }
}

/// A client whose lease ended ([`OpenFiles::expire`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gone {
    /// The client.
    pub client: u64,
    /// Whether it still held files open: it went without closing them (died, or is cut off).
    pub held_files: bool,
}

impl OpenFiles {
    /// No opens yet; a client holds its opens for `lease` (at least [`MIN_LEASE`]) after it
    /// was last heard from.
    pub fn with_lease(lease: Duration) -> Self {
        OpenFiles {
            clients: HashMap::new(),
            holders: HashMap::new(),
            lease: lease.max(MIN_LEASE),
        }
    }

    /// How long a client's opens count without word from it.
    pub fn lease(&self) -> Duration {
        self.lease
    }

    /// Whether any client holds `ino` open.
    pub fn is_held(&self, ino: u64) -> bool {
        self.holders.contains_key(&ino)
    }

    /// Notes that `client` was heard from at `now` (its lease renewed, or begun): a client
    /// is known until a lease passes without word from it, whatever it holds.
    pub fn heard(&mut self, client: u64, now: Instant) {
        if !self.clients.contains_key(&client) && self.clients.len() >= MAX_CLIENTS {
            return;
        }
        self.clients
            .entry(client)
            .or_insert_with(|| Holder {
                counts: HashMap::new(),
                heard: now,
            })
            .heard = now;
    }

    /// `client` opened `ino` once more (EMFILE past [`MAX_HELD_FILES`] files, or for a new
    /// client past [`MAX_CLIENTS`]).
    pub fn open(&mut self, client: u64, ino: u64, now: Instant) -> Result<(), i32> {
        if !self.clients.contains_key(&client) && self.clients.len() >= MAX_CLIENTS {
            return Err(libc::EMFILE);
        }
        let h = self.clients.entry(client).or_insert_with(|| Holder {
            counts: HashMap::new(),
            heard: now,
        });
        h.heard = now;
        if !h.counts.contains_key(&ino) && h.counts.len() >= MAX_HELD_FILES {
            return Err(libc::EMFILE);
        }
        let count = h.counts.entry(ino).or_default();
        *count = count.saturating_add(1);
        if *count == 1 {
            *self.holders.entry(ino).or_default() += 1;
        }
        Ok(())
    }

    /// `client` closed `ino` once (a close of what it does not hold changes nothing).
    pub fn close(&mut self, client: u64, ino: u64, now: Instant) {
        let Some(h) = self.clients.get_mut(&client) else {
            return;
        };
        h.heard = now;
        let Some(count) = h.counts.get_mut(&ino) else {
            return;
        };
        *count -= 1;
        if *count > 0 {
            return;
        }
        h.counts.remove(&ino);
        self.unhold(ino);
    }

    /// Replaces what `client` holds with `files` (E2BIG past [`MAX_HELD_FILES`]; entries
    /// with no opens are left out).
    pub fn replace(&mut self, client: u64, files: &[(u64, u32)], now: Instant) -> Result<(), i32> {
        if files.len() > MAX_HELD_FILES {
            return Err(libc::E2BIG);
        }
        if !self.clients.contains_key(&client) && self.clients.len() >= MAX_CLIENTS {
            return Err(libc::EMFILE);
        }
        self.drop_client(client);
        let counts: HashMap<u64, u32> = files.iter().copied().filter(|(_, n)| *n > 0).collect();
        for ino in counts.keys() {
            *self.holders.entry(*ino).or_default() += 1;
        }
        self.clients.insert(client, Holder { counts, heard: now });
        Ok(())
    }

    /// Drops the opens of every client not heard from for a lease before `now`: the clients
    /// that went.
    pub fn expire(&mut self, now: Instant) -> Vec<Gone> {
        let gone: Vec<Gone> = self
            .clients
            .iter()
            .filter(|(_, h)| now.saturating_duration_since(h.heard) > self.lease)
            .map(|(c, h)| Gone {
                client: *c,
                held_files: !h.counts.is_empty(),
            })
            .collect();
        for g in &gone {
            tracing::info!(
                client = g.client,
                "a client's lease ended; its open files are closed"
            );
            self.drop_client(g.client);
        }
        gone
    }

    /// Renews every client's lease at `now`: after a stall of the MDS itself, silence says
    /// nothing of its clients (Ceph's MDS does not evict while it is laggy).
    pub fn renew_all(&mut self, now: Instant) {
        for h in self.clients.values_mut() {
            h.heard = now;
        }
    }

    /// Forgets `client` and what it holds open (an evicted client).
    pub fn forget(&mut self, client: u64) {
        self.drop_client(client);
    }

    fn drop_client(&mut self, client: u64) {
        if let Some(h) = self.clients.remove(&client) {
            for ino in h.counts.keys() {
                self.unhold(*ino);
            }
        }
    }

    fn unhold(&mut self, ino: u64) {
        let n = self
            .holders
            .get_mut(&ino)
            .expect("a file a client holds is counted among the held");
        *n -= 1;
        if *n == 0 {
            self.holders.remove(&ino);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_held_while_any_client_has_it_open() {
        let now = Instant::now();
        let mut o = OpenFiles::default();
        o.open(1, 10, now).unwrap();
        o.open(1, 10, now).unwrap();
        o.open(2, 10, now).unwrap();
        o.close(1, 10, now);
        assert!(o.is_held(10));
        o.close(1, 10, now);
        assert!(o.is_held(10), "client 2 still has it");
        o.close(2, 10, now);
        assert!(!o.is_held(10));
        o.close(2, 10, now);
        o.close(3, 10, now);
        assert!(!o.is_held(10), "closes of what is not held change nothing");
        assert!(o.holders.is_empty());
        assert!(
            o.clients.contains_key(&1) && !o.clients.contains_key(&3),
            "a client is known until its lease passes"
        );
    }

    #[test]
    fn a_held_count_replaces_what_was_counted() {
        let now = Instant::now();
        let mut o = OpenFiles::default();
        o.open(1, 10, now).unwrap();
        o.open(1, 11, now).unwrap();
        o.replace(1, &[(11, 2), (12, 1), (13, 0)], now).unwrap();
        assert!(!o.is_held(10), "a lost close is made good");
        assert!(o.is_held(11) && o.is_held(12) && !o.is_held(13));
        o.close(1, 11, now);
        assert!(o.is_held(11), "two opens, one close");
        o.replace(1, &[], now).unwrap();
        assert!(o.holders.is_empty());
        let too_many: Vec<(u64, u32)> = (0..=MAX_HELD_FILES as u64).map(|i| (i, 1)).collect();
        assert_eq!(o.replace(1, &too_many, now), Err(libc::E2BIG));
    }

    #[test]
    fn a_client_not_heard_from_for_a_lease_holds_nothing() {
        let t0 = Instant::now();
        let mut o = OpenFiles::default();
        o.open(1, 10, t0).unwrap();
        o.open(2, 11, t0).unwrap();
        o.heard(2, t0 + LEASE);
        o.heard(3, t0);
        assert_eq!(o.expire(t0 + LEASE / 2), Vec::<Gone>::new());
        let mut gone = o.expire(t0 + LEASE + Duration::from_secs(1));
        gone.sort_by_key(|g| g.client);
        assert_eq!(
            gone,
            vec![
                Gone {
                    client: 1,
                    held_files: true
                },
                Gone {
                    client: 3,
                    held_files: false
                }
            ]
        );
        assert!(!o.is_held(10));
        assert!(o.is_held(11), "client 2 renewed its lease");
        o.renew_all(t0 + LEASE * 3);
        assert!(o.expire(t0 + LEASE * 3 + LEASE / 2).is_empty());
        assert_eq!(o.expire(t0 + LEASE * 5).len(), 1);
    }

    #[test]
    fn the_lease_is_chosen_but_never_below_three_renewals() {
        let t0 = Instant::now();
        let mut o = OpenFiles::with_lease(Duration::from_secs(20));
        o.open(1, 10, t0).unwrap();
        assert!(o.expire(t0 + Duration::from_secs(19)).is_empty());
        assert_eq!(o.expire(t0 + Duration::from_secs(21)).len(), 1);
        assert_eq!(
            OpenFiles::with_lease(Duration::from_secs(1)).lease(),
            MIN_LEASE
        );
    }

    #[test]
    fn at_most_the_limit_of_clients_are_known() {
        let now = Instant::now();
        let mut o = OpenFiles::default();
        for c in 0..MAX_CLIENTS as u64 {
            o.heard(c, now);
        }
        o.heard(u64::MAX, now);
        assert_eq!(o.clients.len(), MAX_CLIENTS);
        assert_eq!(o.open(u64::MAX, 1, now), Err(libc::EMFILE));
        assert_eq!(o.replace(u64::MAX, &[(1, 1)], now), Err(libc::EMFILE));
        o.open(0, 1, now).unwrap();
        assert_eq!(o.expire(now + LEASE * 2).len(), MAX_CLIENTS);
        o.open(u64::MAX, 1, now + LEASE * 2).unwrap();
    }

    #[test]
    fn one_client_opens_at_most_the_limit_of_files() {
        let now = Instant::now();
        let mut o = OpenFiles::default();
        let files: Vec<(u64, u32)> = (0..MAX_HELD_FILES as u64).map(|i| (i, 1)).collect();
        o.replace(1, &files, now).unwrap();
        assert_eq!(o.open(1, u64::MAX, now), Err(libc::EMFILE));
        o.open(1, 0, now).unwrap();
    }
}
