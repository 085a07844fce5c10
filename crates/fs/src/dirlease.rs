//! Directory leases (CephFS's "complete" directories under a client's caps): while a mount
//! holds a lease on a directory, it knows every name in it and answers a lookup of a missing
//! name itself, so a create costs one round trip to the MDS instead of two (the kernel looks a
//! name up before it creates it).
//!
//! The MDS grants a lease to one client at a time ([`Granted`]), with the directory's names,
//! and keeps it from nobody's changes but the holder's: before another client adds a name to
//! the directory (create, link, rename into it) it recalls the lease (`MdsRecall`) and holds
//! that request until the holder releases it or the lease runs out. The mount ([`Held`])
//! counts a lease from when it asked for it, so it always ends there before it ends at the
//! MDS; it keeps the names up to date with its own changes, and drops a lease the moment a
//! recall arrives, before it says so. A starting MDS knows no lease: it adds no name anywhere
//! until the longest a lease of the previous MDS could last has passed.
//!
//! Removals by other clients need no recall: a lookup of a name the mount believes present
//! goes to the MDS anyway.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

/// How long a lease lasts from its request (or its last renewal's).
pub const LEASE: Duration = Duration::from_secs(4);
/// A holder renews its lease once less than this is left of it, as it uses it.
pub const RENEW_WITHIN: Duration = Duration::from_secs(2);
/// Most names of a directory the MDS grants a lease on (the grant carries them all).
pub const MAX_LEASED_NAMES: usize = 4096;
/// Most directories one mount holds leases on; further ones are not asked for.
pub const MAX_HELD: usize = 1024;
/// After a recall, the directory is leased to nobody for this long (two clients at work in
/// one directory would otherwise pass the lease back and forth on every change).
pub const AFTER_RECALL: Duration = Duration::from_secs(2);

/// One lease as a mount holds it.
#[derive(Debug)]
struct Lease {
    /// The MDS's number for this grant (a recall names it).
    grant: u64,
    names: HashSet<Vec<u8>>,
    until: Instant,
    renewing: bool,
}

/// What a lookup of a name may do with the leases.
#[derive(Debug, PartialEq, Eq)]
pub enum Lookup {
    /// The name is not in the leased directory: ENOENT, without asking the MDS.
    Absent,
    /// Ask the MDS; and when it answers ENOENT, ask for a lease (`true`).
    Ask(bool),
}

/// A lease being asked for: names this mount added there meanwhile (a grant made before
/// them may be answered after them), and the newest grant recalled meanwhile (an answer
/// overtaken by its own recall).
#[derive(Debug, Default)]
struct Asking {
    added: HashSet<Vec<u8>>,
    recalled: u64,
}

/// The leases of one mount.
#[derive(Debug, Default)]
pub struct Held {
    leases: HashMap<u64, Lease>,
    asking: HashMap<u64, Asking>,
    /// Leases are neither asked for nor used.
    disabled: bool,
}

impl Held {
    /// Turns the use of leases on or off (off: every lookup asks the MDS).
    pub fn set_enabled(&mut self, on: bool) {
        self.disabled = !on;
        if !on {
            self.leases.clear();
            self.asking.clear();
        }
    }

    /// Whether a lookup of `name` in `dir` is answered here (and whether the lease wants
    /// renewing now, which the caller then asks for, with `renewing` noted).
    pub fn lookup(&mut self, dir: u64, name: &[u8], now: Instant) -> (Lookup, bool) {
        match self.leases.get_mut(&dir) {
            Some(l) if now < l.until => {
                let renew = !l.renewing && l.until.saturating_duration_since(now) < RENEW_WITHIN;
                if renew {
                    l.renewing = true;
                }
                match l.names.contains(name) {
                    true => (Lookup::Ask(false), renew),
                    false => (Lookup::Absent, renew),
                }
            }
            Some(_) => {
                self.leases.remove(&dir);
                (Lookup::Ask(self.may_ask(dir, now)), false)
            }
            None => (Lookup::Ask(self.may_ask(dir, now)), false),
        }
    }

    fn may_ask(&mut self, dir: u64, now: Instant) -> bool {
        if self.disabled || self.asking.contains_key(&dir) {
            return false;
        }
        if self.leases.len() >= MAX_HELD {
            self.leases.retain(|_, l| now < l.until);
        }
        self.leases.len() < MAX_HELD
    }

    /// Notes that a lease on `dir` is being asked for; false when one is already.
    pub fn asking(&mut self, dir: u64) -> bool {
        if self.asking.contains_key(&dir) || self.asking.len() >= MAX_HELD {
            return false;
        }
        self.asking.insert(dir, Asking::default());
        true
    }

    /// The MDS granted lease `grant` on `dir` with these names, to a request sent at `asked`;
    /// refused here when that grant was recalled before its answer came.
    pub fn granted(&mut self, dir: u64, grant: u64, names: Vec<Vec<u8>>, asked: Instant) {
        let Some(meanwhile) = self.asking.remove(&dir) else {
            return;
        };
        if grant <= meanwhile.recalled || self.disabled || self.leases.len() >= MAX_HELD {
            return;
        }
        let mut names: HashSet<Vec<u8>> = names.into_iter().collect();
        names.extend(meanwhile.added);
        self.leases.insert(
            dir,
            Lease {
                grant,
                names,
                until: asked + LEASE,
                renewing: false,
            },
        );
    }

    /// The MDS renewed lease `grant` on `dir` to a request sent at `asked` (`false`: it
    /// refused; the lease ends).
    pub fn renewed(&mut self, dir: u64, grant: Option<u64>, asked: Instant) {
        let Some(l) = self.leases.get_mut(&dir) else {
            return;
        };
        match grant {
            Some(g) if g == l.grant => {
                l.until = l.until.max(asked + LEASE);
                l.renewing = false;
            }
            _ => {
                self.leases.remove(&dir);
            }
        }
    }

    /// A lease asked for was not granted (or the request failed).
    pub fn refused(&mut self, dir: u64) {
        self.asking.remove(&dir);
    }

    /// The MDS recalled lease `grant` on `dir`: it ends now (a newer one stays; one still
    /// being asked for is refused if its answer names this grant or an older one).
    pub fn recalled(&mut self, dir: u64, grant: u64) {
        if self.leases.get(&dir).is_some_and(|l| l.grant <= grant) {
            self.leases.remove(&dir);
        }
        if let Some(a) = self.asking.get_mut(&dir) {
            a.recalled = a.recalled.max(grant);
        }
    }

    /// This mount added `name` to `dir` (the MDS said so).
    pub fn added(&mut self, dir: u64, name: &[u8]) {
        if let Some(l) = self.leases.get_mut(&dir) {
            l.names.insert(name.to_vec());
        }
        if let Some(a) = self.asking.get_mut(&dir) {
            a.added.insert(name.to_vec());
        }
    }

    /// This mount removed `name` from `dir` (the MDS said so).
    pub fn removed(&mut self, dir: u64, name: &[u8]) {
        if let Some(l) = self.leases.get_mut(&dir) {
            l.names.remove(name);
        }
    }
}

/// One lease as the MDS granted it.
#[derive(Debug)]
struct Grant<S> {
    /// Its number: recalls and releases name it, so a late release ends no newer grant.
    id: u64,
    client: u64,
    /// Where to send its recall: the session that last asked for it.
    to: S,
    until: Instant,
    recalled: bool,
}

/// What a change that adds a name to a directory must do first.
#[derive(Debug, PartialEq, Eq)]
pub enum Adding<S> {
    /// Nothing: no other client holds the directory.
    Go,
    /// Wait until the holder releases it or its lease ends; first recall grant `.1` through
    /// `.0` when given.
    Wait(Option<(S, u64)>),
}

/// The leases an MDS granted, and the requests that wait for one to end.
#[derive(Debug)]
pub struct Granted<S, R> {
    grants: HashMap<u64, Grant<S>>,
    next_id: u64,
    recalled_at: HashMap<u64, Instant>,
    /// Requests waiting for the lease of a directory to end.
    waiting: Vec<(u64, R)>,
    /// Until then a lease of the previous MDS may still be held: nothing adds a name.
    quiet_until: Instant,
}

impl<S: Clone, R> Granted<S, R> {
    /// The leases of an MDS started at `start`.
    pub fn new(start: Instant) -> Granted<S, R> {
        Granted {
            grants: HashMap::new(),
            next_id: 1,
            recalled_at: HashMap::new(),
            waiting: Vec::new(),
            quiet_until: start + LEASE,
        }
    }

    /// Grants `client` a lease on `dir`, which holds `names` names, asked for through `to` at
    /// `now` (renewing the one it holds, keeping its number): the grant's number, or None when
    /// another client holds it, a change waits for it, it was recalled lately, or it holds too
    /// many names.
    pub fn grant(
        &mut self,
        dir: u64,
        client: u64,
        to: S,
        names: usize,
        now: Instant,
    ) -> Option<u64> {
        if now < self.quiet_until || self.waiting.iter().any(|(d, _)| *d == dir) {
            return None;
        }
        if self
            .recalled_at
            .get(&dir)
            .is_some_and(|at| now.saturating_duration_since(*at) < AFTER_RECALL)
        {
            return None;
        }
        match self.grants.get_mut(&dir) {
            Some(g) if g.client == client && !g.recalled && now < g.until => {
                g.until = now + LEASE;
                g.to = to;
                Some(g.id)
            }
            Some(g) if now < g.until => None,
            _ if names > MAX_LEASED_NAMES => None,
            _ => {
                let id = self.next_id;
                self.next_id += 1;
                let grant = Grant {
                    id,
                    client,
                    to,
                    until: now + LEASE,
                    recalled: false,
                };
                self.grants.insert(dir, grant);
                Some(id)
            }
        }
    }

    /// The number of the lease `client` holds on `dir` now, if it holds one (a renewal needs
    /// no names).
    pub fn held_by(&self, dir: u64, client: u64, now: Instant) -> Option<u64> {
        self.grants
            .get(&dir)
            .filter(|g| g.client == client && !g.recalled && now < g.until)
            .map(|g| g.id)
    }

    /// What `client`'s change adding a name to `dir` must do first (see [`Adding`]); a
    /// recall it asks for is noted as sent.
    pub fn adding(&mut self, dir: u64, client: u64, now: Instant) -> Adding<S> {
        if now < self.quiet_until {
            return Adding::Wait(None);
        }
        let Some(g) = self.grants.get_mut(&dir) else {
            return Adding::Go;
        };
        if g.client == client {
            return Adding::Go;
        }
        if now >= g.until {
            self.grants.remove(&dir);
            return Adding::Go;
        }
        match g.recalled {
            true => Adding::Wait(None),
            false => {
                g.recalled = true;
                self.recalled_at.insert(dir, now);
                Adding::Wait(Some((g.to.clone(), g.id)))
            }
        }
    }

    /// Holds `request` until `dir` is free of other clients' leases.
    pub fn wait(&mut self, dir: u64, request: R) {
        self.waiting.push((dir, request));
    }

    /// `client` released lease `grant` on `dir` (a release of an older grant ends nothing):
    /// the requests that waited for it, to run again.
    pub fn released(&mut self, dir: u64, client: u64, grant: u64) -> Vec<R> {
        if self
            .grants
            .get(&dir)
            .is_some_and(|g| g.client == client && g.id == grant)
        {
            self.grants.remove(&dir);
        }
        self.take_free(Instant::now())
    }

    /// Ends the leases that ran out: the requests no lease holds back any more, to run again.
    pub fn expire(&mut self, now: Instant) -> Vec<R> {
        self.grants.retain(|_, g| now < g.until);
        self.recalled_at
            .retain(|_, at| now.saturating_duration_since(*at) < AFTER_RECALL);
        self.take_free(now)
    }

    fn take_free(&mut self, now: Instant) -> Vec<R> {
        if now < self.quiet_until {
            return Vec::new();
        }
        let (free, held): (Vec<_>, Vec<_>) = std::mem::take(&mut self.waiting)
            .into_iter()
            .partition(|(dir, _)| !self.grants.contains_key(dir));
        self.waiting = held;
        free.into_iter().map(|(_, r)| r).collect()
    }

    /// How many requests wait for leases.
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mount_answers_missing_names_of_a_leased_directory_until_it_ends() {
        let t0 = Instant::now();
        let mut h = Held::default();
        assert_eq!(h.lookup(5, b"a", t0), (Lookup::Ask(true), false));
        assert!(h.asking(5));
        assert!(!h.asking(5), "one request at a time");
        assert_eq!(h.lookup(5, b"a", t0).0, Lookup::Ask(false), "being asked");
        h.granted(5, 1, vec![b"here".to_vec()], t0);
        assert_eq!(h.lookup(5, b"a", t0).0, Lookup::Absent);
        assert_eq!(h.lookup(5, b"here", t0).0, Lookup::Ask(false));
        h.added(5, b"a");
        assert_eq!(
            h.lookup(5, b"a", t0).0,
            Lookup::Ask(false),
            "its own create"
        );
        h.removed(5, b"here");
        assert_eq!(h.lookup(5, b"here", t0).0, Lookup::Absent);
        let late = t0 + LEASE - RENEW_WITHIN / 2;
        assert_eq!(h.lookup(5, b"x", late), (Lookup::Absent, true), "renew");
        assert_eq!(h.lookup(5, b"x", late), (Lookup::Absent, false), "once");
        h.renewed(5, Some(1), late);
        assert_eq!(h.lookup(5, b"x", t0 + LEASE).0, Lookup::Absent, "renewed");
        assert_eq!(
            h.lookup(5, b"x", late + LEASE).0,
            Lookup::Ask(true),
            "run out"
        );
        assert!(h.asking(5));
        h.granted(5, 2, Vec::new(), t0);
        h.renewed(5, None, t0);
        assert_eq!(
            h.lookup(5, b"x", t0).0,
            Lookup::Ask(true),
            "refused renewal"
        );
        assert!(h.asking(5));
        h.granted(5, 3, Vec::new(), t0);
        h.set_enabled(false);
        assert_eq!(h.lookup(5, b"x", t0).0, Lookup::Ask(false), "turned off");
    }

    #[test]
    fn a_recall_ends_its_grant_and_no_newer_one_even_when_it_overtakes_the_grant() {
        let t0 = Instant::now();
        let mut h = Held::default();
        assert!(h.asking(5));
        h.added(5, b"mine");
        h.recalled(5, 4);
        h.granted(5, 4, Vec::new(), t0);
        assert_eq!(
            h.lookup(5, b"x", t0).0,
            Lookup::Ask(true),
            "recalled before its answer"
        );
        assert!(h.asking(5));
        h.added(5, b"mine");
        h.granted(5, 5, Vec::new(), t0);
        assert_eq!(
            h.lookup(5, b"mine", t0).0,
            Lookup::Ask(false),
            "its own create answered before the grant made before it"
        );
        h.recalled(5, 4);
        assert_eq!(h.lookup(5, b"x", t0).0, Lookup::Absent, "a stale recall");
        h.recalled(5, 5);
        assert_eq!(h.lookup(5, b"x", t0).0, Lookup::Ask(true));
    }

    #[test]
    fn another_clients_addition_recalls_the_lease_once_and_waits_for_its_release() {
        let t0 = Instant::now();
        let start = t0 - LEASE;
        let mut g: Granted<&str, u32> = Granted::new(start);
        let id = g.grant(7, 1, "s1", 3, t0).unwrap();
        assert_eq!(g.held_by(7, 1, t0), Some(id));
        assert_eq!(g.grant(7, 1, "s1", 3, t0), Some(id), "renewed, same number");
        assert_eq!(g.grant(7, 2, "s2", 3, t0), None, "held by another");
        assert_eq!(g.adding(7, 1, t0), Adding::Go, "the holder's own");
        assert_eq!(g.adding(7, 2, t0), Adding::Wait(Some(("s1", id))));
        g.wait(7, 100);
        assert_eq!(g.adding(7, 2, t0), Adding::Wait(None), "recalled once");
        g.wait(7, 101);
        assert_eq!(
            g.grant(7, 1, "s1", 3, t0),
            None,
            "not renewed once recalled"
        );
        assert_eq!(g.expire(t0), Vec::<u32>::new());
        assert!(
            g.released(7, 1, id + 1).is_empty(),
            "another grant's release"
        );
        assert_eq!(g.released(7, 1, id), [100, 101]);
        assert_eq!(g.waiting(), 0);
        assert_eq!(
            g.grant(7, 2, "s2", 3, t0),
            None,
            "nobody's right after a recall"
        );
        let later = t0 + AFTER_RECALL;
        assert!(g.expire(later).is_empty());
        let newer = g.grant(7, 2, "s2", 3, later).unwrap();
        assert!(newer > id);
        assert!(g.released(7, 2, id).is_empty());
        assert_eq!(
            g.held_by(7, 2, later),
            Some(newer),
            "a late release ends no newer grant"
        );
        assert_eq!(
            g.grant(8, 2, "s2", MAX_LEASED_NAMES + 1, later),
            None,
            "too many names"
        );
    }

    #[test]
    fn a_holder_that_never_answers_holds_a_change_back_one_lease_at_most() {
        let t0 = Instant::now();
        let mut g: Granted<&str, u32> = Granted::new(t0 - LEASE);
        let id = g.grant(7, 1, "s1", 0, t0).unwrap();
        assert_eq!(g.adding(7, 2, t0), Adding::Wait(Some(("s1", id))));
        g.wait(7, 1);
        assert!(g.expire(t0 + LEASE / 2).is_empty());
        assert_eq!(g.expire(t0 + LEASE), [1]);
        assert_eq!(g.adding(7, 2, t0 + LEASE), Adding::Go);
    }

    #[test]
    fn a_starting_mds_adds_no_name_until_an_earlier_lease_has_run_out() {
        let t0 = Instant::now();
        let mut g: Granted<&str, u32> = Granted::new(t0);
        assert_eq!(g.adding(7, 2, t0), Adding::Wait(None));
        g.wait(7, 9);
        assert_eq!(g.grant(7, 1, "s1", 0, t0), None, "nor grants");
        assert!(g.expire(t0 + LEASE / 2).is_empty());
        assert_eq!(g.expire(t0 + LEASE), [9]);
    }
}
