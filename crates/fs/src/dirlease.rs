//! Directory leases (CephFS's "complete" directories under a client's caps): while a mount
//! holds a lease on a directory, it knows every name in it with its inode number, and the
//! directory's attributes; it answers lookups there (a missing name: ENOENT; a name of a
//! directory it also leases: that directory's attributes; a file's whose attributes it keeps)
//! and `stat`s of the directory itself and of its files, once an answer of the MDS gave their
//! attributes under the lease, so a path walk and a create cost the MDS one round trip
//! instead of several (the kernel asks for the attributes of every directory on the path, and
//! looks each name up, before it creates a file), and a stat of a file none.
//!
//! The MDS grants a lease to one client at a time ([`Granted`]), with the directory's names
//! and attributes, and keeps it from nobody's changes but the holder's: before another client
//! changes the directory (adds, removes or renames a name there, sets its attributes, removes
//! or moves it) or the attributes of a file named there, it recalls the lease (`MdsRecall`)
//! and holds that request until the holder releases it or the lease runs out. The mount ([`Held`]) counts a lease from when it asked
//! for it, so it always ends there before it ends at the MDS; it keeps the names and
//! attributes up to date with its own changes (or forgets the attributes when it cannot say
//! what a change made of them), and drops a lease the moment a recall arrives, before it says
//! so. A starting MDS knows no lease: it changes no directory until the longest a lease of the
//! previous MDS could last has passed.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use cairn_proto::mds::{Attr, FileKind};

/// How long a lease lasts from its request (or its last renewal's).
pub const LEASE: Duration = Duration::from_secs(4);
/// A holder renews its lease once less than this is left of it, as it uses it.
pub const RENEW_WITHIN: Duration = Duration::from_secs(2);
/// Most names of a directory the MDS grants a lease on (the grant carries them all: up to
/// about 4 MiB).
pub const MAX_LEASED_NAMES: usize = 16 * 1024;
/// Most directories one mount holds leases on; further ones are not asked for.
pub const MAX_HELD: usize = 256;
/// After a recall, the directory is leased to nobody for this long (two clients at work in
/// one directory would otherwise pass the lease back and forth on every change); a mount
/// refused a lease asks again no sooner either.
pub const AFTER_RECALL: Duration = Duration::from_secs(2);
/// Most names a mount keeps of one leased directory as it adds its own; past it the lease is
/// given up (the MDS renews none past it either).
pub const MAX_HELD_NAMES: usize = 2 * MAX_LEASED_NAMES;
/// Most files whose attributes a mount keeps under its leases; past it more are not kept.
pub const MAX_HELD_FILES: usize = 64 * 1024;

/// What the kernel may cache under a lease ends this long before the lease does here, so it
/// ends before the lease ends at the MDS even when the answer reaches the kernel late.
pub const KERNEL_MARGIN: Duration = Duration::from_millis(250);

/// A file is created by the mount itself only under a lease with this much left: its `Create`
/// reaches the MDS well before the lease can end there.
pub const CREATE_MARGIN: Duration = Duration::from_secs(1);
/// A mount asks for its leases on a directory it created a file in this long ago or less to
/// be held for creates.
pub const CREATES_LATELY: Duration = Duration::from_secs(8);

/// An inode number a name is known to have in a leased directory; 0 when only the name is
/// known (a lookup of it asks the MDS).
const UNKNOWN_INO: u64 = 0;

/// What the kernel was let cache under a lease on one directory: names (missing ones among
/// them) and the directory's attributes. A recall must take them out of the kernel before
/// the lease is given up; otherwise they run out no later than the lease.
#[derive(Debug)]
pub struct Handed {
    /// Names whose entries (inode number, or absence) the kernel may cache.
    pub names: HashSet<Vec<u8>>,
    /// Whether the kernel may cache the directory's attributes.
    pub attr: bool,
    /// Files named there whose attributes the kernel may cache.
    pub files: HashSet<u64>,
    /// When the last of them runs out in the kernel.
    until: Instant,
}

/// One lease as a mount holds it.
#[derive(Debug)]
struct Lease {
    /// The MDS's number for this grant (a recall names it).
    grant: u64,
    /// This mount's number for this lease (an MDS that starts numbers its grants anew).
    serial: u64,
    /// When the grant was taken in: an answer to a request sent before may be older than it.
    since: Instant,
    /// Every name of the directory, with its inode number when known.
    names: HashMap<Vec<u8>, u64>,
    /// The directory's attributes, when known.
    attr: Option<Attr>,
    until: Instant,
    renewing: bool,
    /// The object size files created in the directory get (0: not known).
    file_object_size: u32,
    /// The MDS holds other clients' reads of the directory for this lease too: this mount
    /// may create files in it by itself.
    creates: bool,
}

/// A file's attributes, as an answer of the MDS gave them while a lease on a directory
/// naming the file was held: the MDS recalls that lease before another client changes them.
#[derive(Debug)]
struct Covered {
    dir: u64,
    /// The lease's [`Lease::serial`].
    serial: u64,
    attr: Attr,
}

/// What a lookup of a name may do with the leases.
#[derive(Debug, PartialEq, Eq)]
pub enum Lookup {
    /// The name is not in the leased directory: ENOENT, without asking the MDS.
    Absent,
    /// The name's inode has attributes a lease here covers (a directory leased too, or a
    /// file named in a leased directory): these are they.
    Found(Box<Attr>),
    /// Ask the MDS; and when it answers ENOENT, ask for a lease (`true`).
    Ask(bool),
}

/// Attributes a lease covers, and which directory's lease wants renewing now (the caller
/// asks for it).
pub type LeasedAttr = (Option<Attr>, Option<u64>);

/// One of this mount's own changes to a directory.
#[derive(Debug)]
enum Change {
    Added(Vec<u8>, u64),
    Removed(Vec<u8>),
    Touched(Option<i64>),
}

/// A lease being asked for: the newest grant recalled meanwhile. (This mount's changes
/// answered meanwhile need no keeping: the MDS answers a grant when it makes it, and its
/// answers leave in order, so a change answered before the grant was made before it and the
/// grant includes it.)
#[derive(Debug, Default)]
struct Asking {
    recalled: u64,
}

/// The leases of one mount.
#[derive(Debug, Default)]
pub struct Held {
    leases: HashMap<u64, Lease>,
    asking: HashMap<u64, Asking>,
    /// When a lease on a directory was last refused (not asked again for [`AFTER_RECALL`]).
    refused_at: HashMap<u64, Instant>,
    /// Directories whose attributes the MDS answered once, and when: a second time within a
    /// lease asks for one.
    looked_at: HashMap<u64, Instant>,
    /// Leases are neither asked for nor used.
    disabled: bool,
    /// What the kernel may cache, by directory (kept past the lease until it runs out there).
    kernel: HashMap<u64, Handed>,
    /// Files' attributes under the leases, by inode.
    files: HashMap<u64, Covered>,
    /// The serial number of the latest lease taken in.
    serial: u64,
    /// Whether the kernel may cache what a lease covers (only once a recall can take it back).
    kernel_caching: bool,
    /// Directories this mount created files in lately, and when last.
    created_in: HashMap<u64, Instant>,
}

impl Lease {
    fn apply(&mut self, change: Change) {
        match change {
            Change::Added(name, ino) => {
                self.names.insert(name, ino);
            }
            Change::Removed(name) => {
                self.names.remove(&name);
            }
            Change::Touched(Some(t)) => {
                // The MDS sets both to the change's time. A time before the ones known (a
                // clock stepped back, a time set ahead) is not followed: asked again.
                match self.attr.as_mut() {
                    Some(a) if a.mtime_ns <= t && a.ctime_ns <= t => {
                        a.mtime_ns = t;
                        a.ctime_ns = t;
                    }
                    _ => self.attr = None,
                }
            }
            Change::Touched(None) => self.attr = None,
        }
    }

    /// Whether the lease wants renewing now (noted: the caller asks for it).
    fn renew_due(&mut self, now: Instant) -> bool {
        let due = !self.renewing && self.until.saturating_duration_since(now) < RENEW_WITHIN;
        if due {
            self.renewing = true;
        }
        due
    }
}

impl Held {
    /// Turns the use of leases on or off (off: every lookup asks the MDS).
    pub fn set_enabled(&mut self, on: bool) {
        self.disabled = !on;
        if !on {
            self.leases.clear();
            self.asking.clear();
            self.files.clear();
        }
    }

    /// Lets the kernel cache what leases cover (a recall then hands back what to take out of
    /// it, [`Held::recalled`]); off, every kernel answer has a TTL of zero.
    pub fn set_kernel_caching(&mut self, on: bool) {
        self.kernel_caching = on;
    }

    /// How long the kernel may cache the entry of `name` in `dir`: that it names inode `ino`
    /// (`Some`), or that there is none (`None`). What is left of the lease on `dir`, less
    /// [`KERNEL_MARGIN`], noted for a recall to take back; zero when `dir` is not leased here
    /// or the lease says otherwise of the name (an answer older than the lease).
    pub fn kernel_entry(
        &mut self,
        dir: u64,
        name: &[u8],
        ino: Option<u64>,
        now: Instant,
    ) -> Duration {
        let agrees = self
            .current(dir, now)
            .is_some_and(|l| l.names.get(name).copied() == ino);
        if !agrees {
            return Duration::ZERO;
        }
        self.kernel_ttl(dir, now, |h| {
            if h.names.len() >= MAX_HELD_NAMES && !h.names.contains(name) {
                return false;
            }
            h.names.insert(name.to_vec());
            true
        })
    }

    /// How long the kernel may cache the attributes of directory `dir`, as for
    /// [`Held::kernel_entry`].
    pub fn kernel_attr(&mut self, dir: u64, now: Instant) -> Duration {
        self.kernel_ttl(dir, now, |h| {
            h.attr = true;
            true
        })
    }

    /// How long the kernel may cache the attributes of file `ino` that a lease here covers
    /// (noted under that lease's directory), as for [`Held::kernel_entry`]; zero when none
    /// does.
    pub fn kernel_file_attr(&mut self, ino: u64, now: Instant) -> Duration {
        let Some((_, dir)) = self.covered(ino, now) else {
            return Duration::ZERO;
        };
        self.kernel_ttl(dir, now, |h| {
            if h.files.len() >= MAX_HELD_NAMES && !h.files.contains(&ino) {
                return false;
            }
            h.files.insert(ino);
            true
        })
    }

    fn kernel_ttl(
        &mut self,
        dir: u64,
        now: Instant,
        note: impl FnOnce(&mut Handed) -> bool,
    ) -> Duration {
        if !self.kernel_caching || self.disabled {
            return Duration::ZERO;
        }
        let Some(until) = self.current(dir, now).map(|l| l.until) else {
            return Duration::ZERO;
        };
        let ttl = until
            .saturating_duration_since(now)
            .saturating_sub(KERNEL_MARGIN);
        if ttl.is_zero() {
            return Duration::ZERO;
        }
        if !self.kernel.contains_key(&dir) && self.kernel.len() >= MAX_HELD {
            self.kernel.retain(|_, h| now < h.until);
            if self.kernel.len() >= MAX_HELD {
                return Duration::ZERO;
            }
        }
        let handed = self.kernel.entry(dir).or_insert_with(|| Handed {
            names: HashSet::new(),
            attr: false,
            files: HashSet::new(),
            until: now,
        });
        if !note(handed) {
            return Duration::ZERO;
        }
        let ends = now + ttl;
        handed.until = handed.until.max(ends);
        assert!(ends <= until, "the kernel's cache outlives the lease");
        ttl
    }

    /// The lease on `dir` if it is current at `now` (one that ran out is dropped).
    fn current(&mut self, dir: u64, now: Instant) -> Option<&mut Lease> {
        if self.leases.get(&dir).is_some_and(|l| now >= l.until) {
            self.leases.remove(&dir);
        }
        self.leases.get_mut(&dir)
    }

    /// Whether a lookup of `name` in `dir` is answered here (and whether the lease wants
    /// renewing now, which the caller then asks for, with `renewing` noted).
    pub fn lookup(&mut self, dir: u64, name: &[u8], now: Instant) -> (Lookup, bool) {
        let Some(l) = self.current(dir, now) else {
            return (Lookup::Ask(self.may_ask(dir, now)), false);
        };
        let renew = l.renew_due(now);
        let ino = match l.names.get(name) {
            None => return (Lookup::Absent, renew),
            Some(&ino) => ino,
        };
        let child = match ino {
            UNKNOWN_INO => None,
            _ => match self.current(ino, now).and_then(|c| c.attr.clone()) {
                Some(a) => Some(a),
                None => self.covered(ino, now).map(|(a, _)| a),
            },
        };
        match child {
            Some(a) => (Lookup::Found(Box::new(a)), renew),
            None => (Lookup::Ask(false), renew),
        }
    }

    /// The attributes of directory `ino` when this mount leases it and knows them (and
    /// whether the lease wants renewing now, as for [`Held::lookup`]).
    pub fn attr(&mut self, ino: u64, now: Instant) -> (Option<Attr>, bool) {
        match self.current(ino, now) {
            Some(l) => {
                let renew = l.renew_due(now);
                (l.attr.clone(), renew)
            }
            None => (None, false),
        }
    }

    /// The attributes of file `ino` when a lease here covers them, and the directory whose
    /// lease wants renewing now (noted, as for [`Held::lookup`]).
    pub fn file_attr(&mut self, ino: u64, now: Instant) -> LeasedAttr {
        let Some((attr, dir)) = self.covered(ino, now) else {
            return (None, None);
        };
        let renew = self.current(dir, now).is_some_and(|l| l.renew_due(now));
        (Some(attr), renew.then_some(dir))
    }

    /// File `ino`'s attributes and the directory whose current lease covers them.
    fn covered(&mut self, ino: u64, now: Instant) -> Option<(Attr, u64)> {
        let (dir, serial) = self.files.get(&ino).map(|c| (c.dir, c.serial))?;
        if self.current(dir, now).is_none_or(|l| l.serial != serial) {
            self.files.remove(&ino);
            return None;
        }
        self.files.get(&ino).map(|c| (c.attr.clone(), dir))
    }

    /// The MDS answered file `attr` (a create, a lookup, a getattr, a setattr, an open, a
    /// link) to a request first sent at `asked`: kept while a lease covers it, under `named`
    /// (the directory and name it was answered for) when that directory is leased here with
    /// that name for it, else under the lease that covers it already (called in the order the
    /// answers come). An answer to a request sent before the lease was taken in is not kept:
    /// one answered again from the MDS's memory may be older than the grant.
    pub fn seen_file(
        &mut self,
        named: Option<(u64, &[u8])>,
        attr: &Attr,
        asked: Instant,
        now: Instant,
    ) {
        if attr.kind == FileKind::Dir || self.disabled {
            return;
        }
        let ino = attr.ino;
        let under = named.and_then(|(dir, name)| {
            let l = self.current(dir, now)?;
            (l.names.get(name) == Some(&ino)).then_some((dir, l.serial, l.since))
        });
        let under = under.or_else(|| {
            let (dir, serial) = self.files.get(&ino).map(|c| (c.dir, c.serial))?;
            let l = self.current(dir, now).filter(|l| l.serial == serial)?;
            Some((dir, serial, l.since))
        });
        let Some((dir, serial, since)) = under.filter(|u| asked >= u.2) else {
            self.files.remove(&ino);
            return;
        };
        if !self.files.contains_key(&ino) && self.files.len() >= MAX_HELD_FILES {
            let leases = &self.leases;
            self.files.retain(|_, c| {
                leases
                    .get(&c.dir)
                    .is_some_and(|l| l.serial == c.serial && now < l.until)
            });
            if self.files.len() >= MAX_HELD_FILES {
                return;
            }
        }
        debug_assert!(since <= now);
        let attr = attr.clone();
        self.files.insert(ino, Covered { dir, serial, attr });
    }

    /// This mount changed file `ino`'s attributes in a way not followed here: asked again.
    pub fn forget_file(&mut self, ino: u64) {
        self.files.remove(&ino);
    }

    /// This mount changed a file's attributes without knowing its number: every file's are
    /// asked again.
    pub fn forget_files(&mut self) {
        self.files.clear();
    }

    /// The MDS answered directory `attr` (a lookup, a getattr, a setattr): kept when it is
    /// leased here (called in the order the answers come).
    pub fn seen_dir(&mut self, attr: &Attr, now: Instant) {
        if let Some(l) = self.current(attr.ino, now) {
            l.attr = Some(attr.clone());
        }
    }

    /// Whether a lease on directory `dir`, whose attributes the MDS just answered, is worth
    /// asking for now: they were asked for before, within a lease, and no lease on it is
    /// held, being asked for, or refused lately.
    pub fn worth_asking(&mut self, dir: u64, now: Instant) -> bool {
        if self.current(dir, now).is_some() {
            return false;
        }
        if self.looked_at.len() >= MAX_HELD {
            self.looked_at
                .retain(|_, at| now.saturating_duration_since(*at) < LEASE);
        }
        let again = self
            .looked_at
            .get(&dir)
            .is_some_and(|at| now.saturating_duration_since(*at) < LEASE);
        if self.looked_at.len() < MAX_HELD {
            self.looked_at.insert(dir, now);
        }
        again && self.may_ask(dir, now)
    }

    /// The MDS said `name` in `dir` is inode `ino` (a lookup's answer).
    pub fn named(&mut self, dir: u64, name: &[u8], ino: u64, now: Instant) {
        if let Some(l) = self.current(dir, now) {
            if let Some(known) = l.names.get_mut(name) {
                *known = ino;
            }
        }
    }

    fn may_ask(&mut self, dir: u64, now: Instant) -> bool {
        if self.disabled || self.asking.contains_key(&dir) {
            return false;
        }
        if self
            .refused_at
            .get(&dir)
            .is_some_and(|at| now.saturating_duration_since(*at) < AFTER_RECALL)
        {
            return false;
        }
        if self.leases.len() >= MAX_HELD {
            self.leases.retain(|_, l| now < l.until);
        }
        self.leases.len() < MAX_HELD
    }

    /// Notes that a new lease on `dir` is being asked for; false when one is already, or
    /// when a lease on it is current at `now`. A grant replaces the lease wholesale with the
    /// names the MDS listed when it answered, so it must not follow a create this mount made
    /// by itself under a current lease: such a create's request is sent after the ask, the
    /// listing lacks its name, and the name would be lost here until the lease ends.
    pub fn asking(&mut self, dir: u64, now: Instant) -> bool {
        if self.asking.contains_key(&dir)
            || self.asking.len() >= MAX_HELD
            || self.current(dir, now).is_some()
        {
            return false;
        }
        self.asking.insert(dir, Asking::default());
        true
    }

    /// The MDS granted lease `grant` on `dir` with these names and attributes, to a request
    /// sent at `asked`, taken in at `now`; refused here when that grant was recalled before its
    /// answer came.
    pub fn granted(
        &mut self,
        dir: u64,
        grant: u64,
        names: Vec<(Vec<u8>, u64)>,
        attr: Option<Attr>,
        asked: Instant,
        now: Instant,
    ) {
        let Some(meanwhile) = self.asking.remove(&dir) else {
            return;
        };
        if grant <= meanwhile.recalled || self.disabled || self.leases.len() >= MAX_HELD {
            return;
        }
        if names.len() > MAX_LEASED_NAMES {
            return;
        }
        self.serial += 1;
        self.files.retain(|_, c| c.dir != dir);
        let lease = Lease {
            grant,
            serial: self.serial,
            since: now,
            names: names.into_iter().collect(),
            attr: attr.filter(|a| a.ino == dir),
            until: asked + LEASE,
            renewing: false,
            file_object_size: 0,
            creates: false,
        };
        self.leases.insert(dir, lease);
    }

    /// The lease on `dir`, new or renewed, says files created in it get `object_size` bytes
    /// per object.
    pub fn new_files_get(&mut self, dir: u64, object_size: u32) {
        if let Some(l) = self.leases.get_mut(&dir) {
            l.file_object_size = object_size;
        }
    }

    /// The object size of a file `name` this mount may create in `dir` by itself, without
    /// asking the MDS first: `dir` is leased here for creates with [`CREATE_MARGIN`] left, its
    /// layout for new files is known, and it has no `name`. The try is noted as a create in
    /// `dir` (see [`Held::note_create`]), so its leases are asked for creates from now on.
    pub fn may_create(&mut self, dir: u64, name: &[u8], now: Instant) -> Option<u32> {
        if self.disabled {
            return None;
        }
        self.note_create(dir, now);
        let l = self.current(dir, now)?;
        let lasts = l.until.saturating_duration_since(now) >= CREATE_MARGIN;
        let room = l.names.len() < MAX_HELD_NAMES;
        let known = l.creates && l.file_object_size > 0;
        (lasts && room && known && !l.names.contains_key(name)).then_some(l.file_object_size)
    }

    /// Notes that this mount creates a file in `dir` at `now`: its leases on `dir` are asked
    /// for creates from now on (see [`Held::wants_creates`]).
    pub fn note_create(&mut self, dir: u64, now: Instant) {
        if !self.created_in.contains_key(&dir) && self.created_in.len() >= MAX_HELD {
            self.created_in
                .retain(|_, at| now.saturating_duration_since(*at) < CREATES_LATELY);
            if self.created_in.len() >= MAX_HELD {
                return;
            }
        }
        self.created_in.insert(dir, now);
    }

    /// Whether a lease on `dir` is asked for creates: this mount created a file in it within
    /// [`CREATES_LATELY`].
    pub fn wants_creates(&self, dir: u64, now: Instant) -> bool {
        self.created_in
            .get(&dir)
            .is_some_and(|at| now.saturating_duration_since(*at) < CREATES_LATELY)
    }

    /// Whether the lease on `dir`, not held for creates, wants renewing now to be held for
    /// them (noted as renewing: the caller asks for it).
    pub fn creates_due(&mut self, dir: u64, now: Instant) -> bool {
        let wanted = self.wants_creates(dir, now);
        match self.current(dir, now) {
            Some(l) if wanted && !l.creates && !l.renewing => {
                l.renewing = true;
                true
            }
            _ => false,
        }
    }

    /// Whether this mount keeps the attributes of `ino` as a file's.
    pub fn keeps_file(&self, ino: u64) -> bool {
        self.files.contains_key(&ino)
    }

    /// Whether this mount holds a current lease on `dir` for creates.
    pub fn held_for_creates(&mut self, dir: u64, now: Instant) -> bool {
        !self.disabled && self.current(dir, now).is_some_and(|l| l.creates)
    }

    /// This mount changed a directory's layout: the layout new files get is asked of the MDS
    /// again (with the next renewal) for every leased directory, which may inherit it.
    pub fn forget_layouts(&mut self) {
        for l in self.leases.values_mut() {
            l.file_object_size = 0;
        }
    }

    /// The MDS holds lease `grant` on `dir` for creates (see [`Held::may_create`]).
    pub fn creates_granted(&mut self, dir: u64, grant: u64) {
        if let Some(l) = self.leases.get_mut(&dir).filter(|l| l.grant == grant) {
            l.creates = true;
        }
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

    /// A lease asked for was not granted (or the request failed) at `now`.
    pub fn refused(&mut self, dir: u64, now: Instant) {
        self.asking.remove(&dir);
        if self.refused_at.len() >= MAX_HELD {
            self.refused_at
                .retain(|_, at| now.saturating_duration_since(*at) < AFTER_RECALL);
        }
        if self.refused_at.len() < MAX_HELD {
            self.refused_at.insert(dir, now);
        }
    }

    /// The MDS recalled lease `grant` on `dir`: it ends now (a newer one stays; one still
    /// being asked for is refused if its answer names this grant or an older one). What the
    /// kernel may still cache under it, to take out of the kernel before the MDS is told.
    pub fn recalled(&mut self, dir: u64, grant: u64) -> Option<Handed> {
        let newer = self.leases.get(&dir).is_some_and(|l| l.grant > grant);
        if !newer {
            self.leases.remove(&dir);
        }
        if let Some(a) = self.asking.get_mut(&dir) {
            a.recalled = a.recalled.max(grant);
        }
        let kept = self.leases.get(&dir).filter(|_| newer).map(|l| l.serial);
        self.files
            .retain(|_, c| c.dir != dir || Some(c.serial) == kept);
        match newer {
            true => None,
            false => self.kernel.remove(&dir),
        }
    }

    fn change(&mut self, dir: u64, change: Change) {
        if let Some(l) = self.leases.get_mut(&dir) {
            l.apply(change);
            if l.names.len() > MAX_HELD_NAMES {
                // A directory grown far past what is leased: its lookups go to the MDS.
                self.leases.remove(&dir);
            }
        }
    }

    /// Forgets the attributes of every leased directory (a change of this mount's moved or
    /// removed a directory this mount may lease without knowing its number).
    pub fn forget_attrs(&mut self) {
        for l in self.leases.values_mut() {
            l.attr = None;
        }
    }

    /// This mount added `name`, inode `ino` (0: not known), to `dir` (the MDS said so).
    pub fn added(&mut self, dir: u64, name: &[u8], ino: u64) {
        self.change(dir, Change::Added(name.to_vec(), ino));
    }

    /// This mount removed `name` from `dir` (the MDS said so): the inode number it had,
    /// when known here.
    pub fn removed(&mut self, dir: u64, name: &[u8]) -> Option<u64> {
        let ino = self.ino_of(dir, name);
        self.change(dir, Change::Removed(name.to_vec()));
        ino
    }

    /// The inode number `name` in `dir` has, when known here.
    pub fn ino_of(&self, dir: u64, name: &[u8]) -> Option<u64> {
        self.leases
            .get(&dir)
            .and_then(|l| l.names.get(name).copied())
            .filter(|ino| *ino != UNKNOWN_INO)
    }

    /// Whether `name` is in the directory `dir` this mount leases.
    pub fn knows_name(&self, dir: u64, name: &[u8]) -> bool {
        self.leases
            .get(&dir)
            .is_some_and(|l| l.names.contains_key(name))
    }

    /// Whether this mount holds a lease on `dir` (current or not).
    pub fn is_leased(&self, dir: u64) -> bool {
        self.leases.contains_key(&dir)
    }

    /// Gives up the lease on `dir` here (the MDS learns of it at its recall).
    pub fn forget(&mut self, dir: u64) {
        self.leases.remove(&dir);
    }

    /// This mount changed directory `dir`'s attributes: set its times to `at` (ns; a change
    /// of its names, which moves them to the change's time), or, `None`, in a way not
    /// followed here (its attributes are then asked of the MDS again).
    pub fn touched(&mut self, dir: u64, at: Option<i64>) {
        self.change(dir, Change::Touched(at));
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
    /// The holder creates files under it by itself: other clients' reads wait for it too.
    creates: bool,
}

/// What a change to a directory by a client must do first.
#[derive(Debug, PartialEq, Eq)]
pub enum Changing<S> {
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
    /// Requests waiting for other clients' leases to end: the directories each changes, and
    /// its client.
    waiting: Vec<(Vec<u64>, u64, R)>,
    /// Until then a lease of the previous MDS may still be held: no directory changes.
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
        if now < self.quiet_until || self.waiting.iter().any(|(dirs, _, _)| dirs.contains(&dir)) {
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
                if names > MAX_HELD_NAMES {
                    return None;
                }
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
                    creates: false,
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

    /// Notes that `client` creates files under its lease on `dir` by itself (see
    /// [`Granted::reading`]).
    pub fn creating(&mut self, dir: u64, client: u64) {
        if let Some(g) = self.grants.get_mut(&dir).filter(|g| g.client == client) {
            g.creates = true;
        }
    }

    /// What `client`'s read of `dir` must do first: as a change does (see
    /// [`Granted::changing`]) when another client creates files under its lease on `dir`,
    /// whose creates may not have reached the MDS yet; wait while a lease of the previous
    /// MDS may still be held (for creates, unknown here); else nothing.
    pub fn reading(&mut self, dir: u64, client: u64, now: Instant) -> Changing<S> {
        if now < self.quiet_until {
            return Changing::Wait(None);
        }
        match self.grants.get(&dir) {
            Some(g) if g.client != client && g.creates && now < g.until => {
                self.changing(dir, client, now)
            }
            _ => Changing::Go,
        }
    }

    /// What `client`'s change to `dir` must do first (see [`Changing`]); a recall it asks
    /// for is noted as sent.
    pub fn changing(&mut self, dir: u64, client: u64, now: Instant) -> Changing<S> {
        if now < self.quiet_until {
            return Changing::Wait(None);
        }
        let Some(g) = self.grants.get_mut(&dir) else {
            return Changing::Go;
        };
        if g.client == client {
            return Changing::Go;
        }
        if now >= g.until {
            self.grants.remove(&dir);
            return Changing::Go;
        }
        match g.recalled {
            true => Changing::Wait(None),
            false => {
                g.recalled = true;
                self.recalled_at.insert(dir, now);
                Changing::Wait(Some((g.to.clone(), g.id)))
            }
        }
    }

    /// Holds `client`'s `request`, which changes `dirs`, until they are free of other
    /// clients' leases; meanwhile none of them is leased to anyone.
    pub fn wait(&mut self, dirs: Vec<u64>, client: u64, request: R) {
        self.waiting.push((dirs, client, request));
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
        let others_hold = |dirs: &[u64], client: u64| {
            dirs.iter()
                .any(|d| self.grants.get(d).is_some_and(|g| g.client != client))
        };
        let (held, free): (Vec<_>, Vec<_>) = std::mem::take(&mut self.waiting)
            .into_iter()
            .partition(|(dirs, client, _)| others_hold(dirs, *client));
        self.waiting = held;
        free.into_iter().map(|(_, _, r)| r).collect()
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
    fn another_clients_read_recalls_only_a_lease_held_for_creates() {
        let t0 = Instant::now();
        let mut starting: Granted<&str, u32> = Granted::new(t0);
        assert_eq!(
            starting.reading(7, 2, t0),
            Changing::Wait(None),
            "a predecessor's lease may still be held"
        );
        let mut g: Granted<&str, u32> = Granted::new(t0 - LEASE);
        let id = g.grant(7, 1, "s1", 0, t0).unwrap();
        assert_eq!(g.reading(7, 2, t0), Changing::Go, "not held for creates");
        g.creating(7, 2);
        assert_eq!(
            g.reading(7, 2, t0),
            Changing::Go,
            "only its holder marks it"
        );
        g.creating(7, 1);
        assert_eq!(g.reading(7, 1, t0), Changing::Go, "the holder's own read");
        assert_eq!(g.reading(7, 2, t0), Changing::Wait(Some(("s1", id))));
        g.wait(vec![7], 2, 100);
        assert_eq!(g.reading(7, 2, t0), Changing::Wait(None), "recalled once");
        assert_eq!(g.released(7, 1, id), [100]);
        assert_eq!(g.reading(7, 2, t0), Changing::Go);
        let later = t0 + AFTER_RECALL;
        g.expire(later);
        g.grant(8, 1, "s1", 0, later).unwrap();
        g.creating(8, 1);
        assert_eq!(
            g.reading(8, 2, later + LEASE),
            Changing::Go,
            "a lease run out holds nothing"
        );
    }

    #[test]
    fn a_mount_creates_by_itself_only_under_a_lease_held_for_creates() {
        let t0 = Instant::now();
        let mut h = Held::default();
        assert!(!h.wants_creates(5, t0));
        assert!(h.asking(5, t0));
        h.granted(5, 1, vec![(b"here".to_vec(), 9)], None, t0, t0);
        h.new_files_get(5, 4 << 20);
        assert_eq!(h.may_create(5, b"a", t0), None, "not held for creates");
        assert!(h.wants_creates(5, t0), "a create was tried");
        assert!(h.creates_due(5, t0));
        assert!(!h.creates_due(5, t0), "asked once");
        h.creates_granted(5, 2);
        assert_eq!(h.may_create(5, b"a", t0), None, "another grant's");
        h.creates_granted(5, 1);
        assert_eq!(h.may_create(5, b"a", t0), Some(4 << 20));
        assert_eq!(h.may_create(5, b"here", t0), None, "taken");
        let late = t0 + LEASE - CREATE_MARGIN / 2;
        assert_eq!(h.may_create(5, b"a", late), None, "too little lease left");
        assert!(!h.wants_creates(5, t0 + CREATES_LATELY + LEASE));
        h.new_files_get(5, 0);
        assert_eq!(h.may_create(5, b"a", t0), None, "no layout told");
    }

    #[test]
    fn a_mount_answers_missing_names_of_a_leased_directory_until_it_ends() {
        let t0 = Instant::now();
        let mut h = Held::default();
        assert_eq!(h.lookup(5, b"a", t0), (Lookup::Ask(true), false));
        assert!(h.asking(5, t0));
        assert!(!h.asking(5, t0), "one request at a time");
        assert_eq!(h.lookup(5, b"a", t0).0, Lookup::Ask(false), "being asked");
        h.granted(5, 1, vec![(b"here".to_vec(), 9)], None, t0, t0);
        assert_eq!(h.lookup(5, b"a", t0).0, Lookup::Absent);
        assert_eq!(h.lookup(5, b"here", t0).0, Lookup::Ask(false));
        h.added(5, b"a", 0);
        assert_eq!(
            h.lookup(5, b"a", t0).0,
            Lookup::Ask(false),
            "its own create"
        );
        assert_eq!(h.removed(5, b"here"), Some(9));
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
        assert!(h.asking(5, t0));
        h.granted(5, 2, Vec::new(), None, t0, t0);
        h.renewed(5, None, t0);
        assert_eq!(
            h.lookup(5, b"x", t0).0,
            Lookup::Ask(true),
            "refused renewal"
        );
        assert!(h.asking(5, t0));
        h.granted(5, 3, Vec::new(), None, t0, t0);
        h.set_enabled(false);
        assert_eq!(h.lookup(5, b"x", t0).0, Lookup::Ask(false), "turned off");
    }

    #[test]
    fn a_recall_ends_its_grant_and_no_newer_one_even_when_it_overtakes_the_grant() {
        let t0 = Instant::now();
        let mut h = Held::default();
        assert!(h.asking(5, t0));
        h.added(5, b"mine", 12);
        h.recalled(5, 4);
        h.granted(5, 4, Vec::new(), None, t0, t0);
        assert_eq!(
            h.lookup(5, b"x", t0).0,
            Lookup::Ask(true),
            "recalled before its answer"
        );
        assert!(h.asking(5, t0));
        h.added(5, b"gone", 12);
        h.granted(5, 5, vec![(b"mine".to_vec(), 12)], None, t0, t0);
        assert_eq!(
            h.lookup(5, b"mine", t0).0,
            Lookup::Ask(false),
            "the grant's names"
        );
        assert_eq!(
            h.lookup(5, b"gone", t0).0,
            Lookup::Absent,
            "a change answered before the grant is in it already: not replayed over it"
        );
        h.recalled(5, 4);
        assert_eq!(h.lookup(5, b"x", t0).0, Lookup::Absent, "a stale recall");
        h.recalled(5, 5);
        assert_eq!(h.lookup(5, b"x", t0).0, Lookup::Ask(true));
    }

    #[test]
    fn the_kernel_caches_a_leased_directory_no_longer_than_its_lease_and_a_recall_takes_it_back() {
        let t0 = Instant::now();
        let mut h = Held::default();
        assert!(h.asking(5, t0));
        h.granted(5, 1, vec![(b"here".to_vec(), 9)], None, t0, t0);
        assert!(h.kernel_entry(5, b"x", None, t0).is_zero(), "not turned on");
        h.set_kernel_caching(true);
        assert_eq!(h.kernel_entry(5, b"x", None, t0), LEASE - KERNEL_MARGIN);
        let later = t0 + LEASE / 2;
        assert_eq!(h.kernel_attr(5, later), LEASE / 2 - KERNEL_MARGIN);
        assert!(h.kernel_entry(6, b"x", None, t0).is_zero(), "not leased");
        assert!(!h.kernel_entry(5, b"here", Some(9), t0).is_zero());
        assert!(
            h.kernel_entry(5, b"here", Some(8), t0).is_zero(),
            "an answer the lease disagrees with"
        );
        assert!(h.kernel_entry(5, b"here", None, t0).is_zero());
        assert!(h.kernel_file_attr(9, t0).is_zero(), "no attributes kept");
        h.seen_file(Some((5, b"here")), &file_attr(9, 3), t0, t0);
        assert_eq!(h.kernel_file_attr(9, t0), LEASE - KERNEL_MARGIN);
        assert!(
            h.kernel_entry(5, b"x", None, t0 + LEASE - KERNEL_MARGIN)
                .is_zero(),
            "within the margin of its end"
        );
        // Forgotten here, the lease still holds at the MDS: what the kernel caches stays
        // noted until the recall.
        h.forget(5);
        assert!(h.kernel_entry(5, b"y", None, t0).is_zero());
        let handed = h.recalled(5, 1).expect("what the kernel caches");
        let mut names: Vec<_> = handed.names.into_iter().collect();
        names.sort();
        assert_eq!(names, [b"here".to_vec(), b"x".to_vec()]);
        assert!(handed.attr);
        assert_eq!(handed.files.into_iter().collect::<Vec<_>>(), [9]);
        assert!(h.recalled(5, 1).is_none(), "taken back once");
        // A recall of an older grant leaves a newer one's.
        assert!(h.asking(5, t0));
        h.granted(5, 3, Vec::new(), None, t0, t0);
        assert!(!h.kernel_entry(5, b"z", None, t0).is_zero());
        assert!(h.recalled(5, 2).is_none());
        assert!(h.recalled(5, 3).is_some());
        // Names past the cap are not cached.
        assert!(h.asking(7, t0));
        h.granted(7, 4, Vec::new(), None, t0, t0);
        for i in 0..MAX_HELD_NAMES {
            assert!(!h
                .kernel_entry(7, format!("n{i}").as_bytes(), None, t0)
                .is_zero());
        }
        assert!(h.kernel_entry(7, b"one more", None, t0).is_zero());
        assert!(
            !h.kernel_entry(7, b"n0", None, t0).is_zero(),
            "one noted already"
        );
    }

    fn file_attr(ino: u64, size: u64) -> Attr {
        Attr {
            kind: FileKind::File,
            size,
            nlink: 1,
            ..dir_attr(ino, 0)
        }
    }

    #[test]
    fn a_files_attributes_are_kept_while_a_lease_on_a_directory_naming_it_lasts() {
        let t0 = Instant::now();
        let mut h = Held::default();
        assert!(h.asking(5, t0));
        h.granted(5, 1, vec![(b"f".to_vec(), 9)], None, t0, t0);
        h.seen_file(Some((5, b"other")), &file_attr(9, 1), t0, t0);
        assert_eq!(
            h.file_attr(9, t0),
            (None, None),
            "not the name answered for"
        );
        h.seen_file(None, &file_attr(9, 1), t0, t0);
        assert_eq!(h.file_attr(9, t0).0, None, "no lease known to cover it");
        h.seen_file(Some((5, b"f")), &file_attr(9, 1), t0, t0);
        assert_eq!(h.file_attr(9, t0), (Some(file_attr(9, 1)), None));
        h.seen_file(None, &file_attr(9, 7), t0, t0);
        assert_eq!(
            h.file_attr(9, t0).0,
            Some(file_attr(9, 7)),
            "a later answer"
        );
        assert_eq!(
            h.lookup(5, b"f", t0).0,
            Lookup::Found(Box::new(file_attr(9, 7)))
        );
        let late = t0 + LEASE - RENEW_WITHIN / 2;
        assert_eq!(
            h.file_attr(9, late),
            (Some(file_attr(9, 7)), Some(5)),
            "renew"
        );
        assert_eq!(h.file_attr(9, late).1, None, "once");
        h.forget_file(9);
        assert_eq!(h.file_attr(9, t0).0, None, "its own change");
        h.seen_file(Some((5, b"f")), &file_attr(9, 7), t0, t0);
        h.forget_files();
        assert_eq!(h.file_attr(9, t0).0, None);
        // Dropped here, then granted anew: what the first grant covered is not brought back.
        h.seen_file(Some((5, b"f")), &file_attr(9, 7), t0, t0);
        assert!(h.file_attr(9, t0).0.is_some());
        h.forget(5);
        assert!(h.asking(5, t0));
        h.granted(5, 2, vec![(b"f".to_vec(), 9)], None, t0, t0);
        assert_eq!(h.file_attr(9, t0).0, None, "a newer grant");
        h.seen_file(Some((5, b"f")), &file_attr(9, 8), t0, t0);
        let _ = h.recalled(5, 1);
        assert_eq!(
            h.file_attr(9, t0).0,
            Some(file_attr(9, 8)),
            "a stale recall"
        );
        let _ = h.recalled(5, 2);
        assert_eq!(h.file_attr(9, t0).0, None, "recalled");
        assert!(h.asking(5, t0));
        h.granted(5, 3, vec![(b"f".to_vec(), 9)], None, t0, t0);
        h.seen_file(Some((5, b"f")), &file_attr(9, 8), t0, t0);
        assert!(h.file_attr(9, t0).0.is_some());
        assert_eq!(h.file_attr(9, t0 + LEASE).0, None, "the lease ran out");
    }

    fn dir_attr(ino: u64, mtime_ns: i64) -> Attr {
        Attr {
            ino,
            kind: cairn_proto::mds::FileKind::Dir,
            perm: 0o755,
            uid: 0,
            gid: 0,
            size: 0,
            nlink: 2,
            atime_ns: 0,
            mtime_ns,
            ctime_ns: mtime_ns,
            rdev: 0,
            object_size: 0,
        }
    }

    #[test]
    fn a_leased_directory_answers_its_attributes_and_its_leased_subdirectories() {
        let t0 = Instant::now();
        let mut h = Held::default();
        assert!(!h.worth_asking(1, t0), "asked once");
        assert!(h.worth_asking(1, t0), "asked twice: worth a lease");
        assert!(h.asking(1, t0));
        h.granted(
            1,
            1,
            vec![(b"md".to_vec(), 2)],
            Some(dir_attr(1, 40)),
            t0,
            t0,
        );
        h.touched(1, Some(50));
        h.added(1, b"new", 0);
        let (a, _) = h.attr(1, t0);
        assert_eq!(
            a.map(|a| (a.mtime_ns, a.ctime_ns)),
            Some((50, 50)),
            "its own change: the change's time, as the MDS sets it"
        );
        assert_eq!(
            h.lookup(1, b"md", t0).0,
            Lookup::Ask(false),
            "md is not leased"
        );
        assert!(h.asking(2, t0));
        h.granted(2, 2, Vec::new(), Some(dir_attr(2, 7)), t0, t0);
        assert_eq!(
            h.lookup(1, b"md", t0).0,
            Lookup::Found(Box::new(dir_attr(2, 7)))
        );
        assert_eq!(
            h.lookup(1, b"new", t0).0,
            Lookup::Ask(false),
            "its inode unknown"
        );
        h.touched(2, Some(3));
        assert_eq!(
            h.attr(2, t0).0,
            None,
            "a time before the one known is not followed"
        );
        h.seen_dir(&dir_attr(2, 7), t0);
        h.touched(2, None);
        assert_eq!(h.attr(2, t0).0, None, "a change not followed: ask the MDS");
        assert_eq!(h.lookup(1, b"md", t0).0, Lookup::Ask(false));
        assert_eq!(h.attr(1, t0 + LEASE).0, None, "run out");
        h.seen_dir(&dir_attr(2, 8), t0);
        assert_eq!(
            h.attr(2, t0).0.map(|a| a.mtime_ns),
            Some(8),
            "the MDS's answer kept"
        );
        h.forget_attrs();
        assert_eq!(h.attr(2, t0).0, None, "forgotten");
        h.seen_dir(&dir_attr(2, 8), t0);
        h.recalled(2, 2);
        assert_eq!(h.attr(2, t0).0, None, "recalled");
        for i in 0..=MAX_HELD_NAMES {
            h.added(1, format!("n{i}").as_bytes(), 0);
        }
        assert!(
            matches!(h.lookup(1, b"absent", t0).0, Lookup::Ask(_)),
            "grown too large: given up"
        );
        h.refused(3, t0);
        assert!(!h.worth_asking(3, t0));
        assert!(!h.worth_asking(3, t0), "refused lately: not asked again");
        assert!(h.worth_asking(3, t0 + AFTER_RECALL));
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
        assert_eq!(g.changing(7, 1, t0), Changing::Go, "the holder's own");
        assert_eq!(g.changing(7, 2, t0), Changing::Wait(Some(("s1", id))));
        g.wait(vec![7], 2, 100);
        assert_eq!(g.changing(7, 2, t0), Changing::Wait(None), "recalled once");
        g.wait(vec![7], 2, 101);
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
    fn a_change_of_two_directories_keeps_both_from_being_leased_while_it_waits() {
        let t0 = Instant::now();
        let mut g: Granted<&str, u32> = Granted::new(t0 - LEASE);
        let a = g.grant(7, 1, "s1", 0, t0).unwrap();
        let c = g.grant(8, 3, "s3", 0, t0).unwrap();
        assert_eq!(g.changing(7, 2, t0), Changing::Wait(Some(("s1", a))));
        assert_eq!(g.changing(8, 2, t0), Changing::Wait(Some(("s3", c))));
        g.wait(vec![7, 8], 2, 5);
        assert!(g.released(8, 3, c).is_empty(), "7 still held");
        let later = t0 + AFTER_RECALL;
        assert!(g.expire(later).is_empty());
        assert_eq!(g.grant(8, 3, "s3", 0, later), None, "8 waits to change");
        assert_eq!(g.released(7, 1, a), [5]);
        let mine = g.grant(9, 2, "s2", 0, later).unwrap();
        g.wait(vec![9], 2, 6);
        assert_eq!(
            g.expire(later),
            [6],
            "its own lease holds back none of its changes"
        );
        assert_eq!(g.held_by(9, 2, later), Some(mine));
    }

    #[test]
    fn a_holder_that_never_answers_holds_a_change_back_one_lease_at_most() {
        let t0 = Instant::now();
        let mut g: Granted<&str, u32> = Granted::new(t0 - LEASE);
        let id = g.grant(7, 1, "s1", 0, t0).unwrap();
        assert_eq!(g.changing(7, 2, t0), Changing::Wait(Some(("s1", id))));
        g.wait(vec![7], 2, 1);
        assert!(g.expire(t0 + LEASE / 2).is_empty());
        assert_eq!(g.expire(t0 + LEASE), [1]);
        assert_eq!(g.changing(7, 2, t0 + LEASE), Changing::Go);
    }

    #[test]
    fn a_starting_mds_adds_no_name_until_an_earlier_lease_has_run_out() {
        let t0 = Instant::now();
        let mut g: Granted<&str, u32> = Granted::new(t0);
        assert_eq!(g.changing(7, 2, t0), Changing::Wait(None));
        g.wait(vec![7], 2, 9);
        assert_eq!(g.grant(7, 1, "s1", 0, t0), None, "nor grants");
        assert!(g.expire(t0 + LEASE / 2).is_empty());
        assert_eq!(g.expire(t0 + LEASE), [9]);
    }
}
