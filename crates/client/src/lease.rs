//! Leases on an object: one holder at a time, so that two processes that must not both act
//! (two writers of one block image, two metadata servers of one file system) never do at once.
//!
//! The lease is a record in an attribute of an object, taken and renewed by compare-and-swap
//! on the object's version (a conditional write, checked by the primary under its PG lock).
//! The holder renews every sixth of the lease and counts itself the holder only until half a
//! lease after the start of its last successful renewal; past that, what it guards waits for
//! the next renewal, and a renewal that finds the object changed under it ends the lease for
//! good. A contender that finds a lease held waits one full lease by its own clock and takes
//! it only if the object's version did not move meanwhile (the holder stopped renewing): no
//! clocks are compared between hosts, only their rates.
//!
//! Fencing: a write the old holder sent before its half lease ran out could still reach its
//! OSD after the new holder took over. A holder whose client serves only what the lease
//! guards (a metadata server, a block image's server) records its client instance; whoever
//! takes its lease without a release, or breaks it, first fences that instance out of the
//! OSDs (the map's blocklist, as Ceph does) and waits for the map that says so. Its own ops
//! then carry that epoch, so no OSD serves one of them before it refuses the old holder's.

use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

use tokio::sync::watch;

use crate::{Client, ClientError};

/// What taking, holding or reading a lease fails with.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    /// The cluster refused or failed the operation.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// The object the lease lives on does not exist.
    #[error("no object {0}")]
    Missing(String),
    /// Another process holds the lease and renews it.
    #[error("locked: {0}")]
    Held(String),
    /// This holder's lease was lost (taken over, broken, or not renewed in time).
    #[error("lock lost: {0}")]
    Lost(String),
    /// A lease out of bounds.
    #[error("invalid: {0}")]
    Invalid(String),
}
/// The lease a holder keeps unless told otherwise: Ceph's `osd_client_watch_timeout`. Long
/// enough that renewals queued behind a saturated HDD's writes still land in time (a lease of
/// 10 s lapsed under 64 MiB of writes in flight on emulated HDD OSDs).
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);
/// Shortest lease accepted (renewals every sixth of it must still fit an op's round trip).
pub const MIN_LEASE: Duration = Duration::from_millis(600);
/// Longest lease accepted.
pub const MAX_LEASE: Duration = Duration::from_secs(600);
/// Largest lock record read back.
const MAX_RECORD_BYTES: usize = 1024;

/// Who holds a lease, as its record says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseRecord {
    /// The holder's random cookie, unique per acquisition.
    pub cookie: u64,
    /// The holder's host name.
    pub host: String,
    /// The holder's process id.
    pub pid: u32,
    /// Its lease.
    pub lease: Duration,
    /// Renewals so far (each changes the header's version).
    pub renewals: u64,
    /// The holder's client instance, fenced by whoever takes the lease over; 0 for a holder
    /// whose client also serves other things and must not be fenced.
    pub instance: u64,
}

impl LeaseRecord {
    /// This process's record for a new acquisition by client instance `instance` (0: not
    /// to be fenced).
    pub fn mine(lease: Duration, instance: u64) -> LeaseRecord {
        LeaseRecord {
            cookie: crate::random_client_id(),
            host: std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|h| h.trim().to_string())
                .unwrap_or_else(|_| "unknown".into()),
            pid: std::process::id(),
            lease,
            renewals: 0,
            instance,
        }
    }

    /// The stored form: `key=value` words.
    pub fn encode(&self) -> Vec<u8> {
        format!(
            "cookie={:016x} host={} pid={} lease_ms={} renewals={} instance={:016x}",
            self.cookie,
            self.host.replace(char::is_whitespace, "_"),
            self.pid,
            self.lease.as_millis(),
            self.renewals,
            self.instance
        )
        .into_bytes()
    }

    /// Parses a stored record; None when it is malformed (a contender then treats it as a
    /// lease of the default length).
    pub fn decode(bytes: &[u8]) -> Option<LeaseRecord> {
        if bytes.len() > MAX_RECORD_BYTES {
            return None;
        }
        let text = std::str::from_utf8(bytes).ok()?;
        let mut r = LeaseRecord {
            cookie: 0,
            host: String::new(),
            pid: 0,
            lease: Duration::ZERO,
            renewals: 0,
            instance: 0,
        };
        for word in text.split_whitespace() {
            let (k, v) = word.split_once('=')?;
            match k {
                "cookie" => r.cookie = u64::from_str_radix(v, 16).ok()?,
                "host" => r.host = v.to_string(),
                "pid" => r.pid = v.parse().ok()?,
                "lease_ms" => r.lease = Duration::from_millis(v.parse().ok()?),
                "renewals" => r.renewals = v.parse().ok()?,
                "instance" => r.instance = u64::from_str_radix(v, 16).ok()?,
                _ => {}
            }
        }
        (MIN_LEASE..=MAX_LEASE).contains(&r.lease).then_some(r)
    }
}

impl std::fmt::Display for LeaseRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "pid {} on {} (cookie {:016x}, lease {} ms, renewed {} times)",
            self.pid,
            self.host,
            self.cookie,
            self.lease.as_millis(),
            self.renewals
        )
    }
}

/// Whether `holder` was a process of this host that no longer exists (its lease can be taken
/// at once instead of after a lease: a restart on the same host).
pub fn died_here(holder: &LeaseRecord) -> bool {
    let here = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().replace(char::is_whitespace, "_"))
        .unwrap_or_default();
    holder.host == here
        && holder.pid != std::process::id()
        && !std::path::Path::new(&format!("/proc/{}", holder.pid)).exists()
}

/// Checks a lease against [`MIN_LEASE`]..=[`MAX_LEASE`].
pub fn check_lease(lease: Duration) -> Result<(), LeaseError> {
    match (MIN_LEASE..=MAX_LEASE).contains(&lease) {
        true => Ok(()),
        false => Err(LeaseError::Invalid(format!(
            "a lock lease of {} ms is outside {}..={} ms",
            lease.as_millis(),
            MIN_LEASE.as_millis(),
            MAX_LEASE.as_millis()
        ))),
    }
}

/// Where a lease lives: the attribute `attr` of `object` in `pool`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeasePlace {
    /// The pool.
    pub pool: String,
    /// The object.
    pub object: String,
    /// The attribute holding the record.
    pub attr: String,
}

/// The lease record at `place` and its object's version, or None when no one holds it.
pub async fn holder(
    client: &Client,
    place: &LeasePlace,
) -> Result<(Option<LeaseRecord>, u64), LeaseError> {
    let LeasePlace { pool, object, attr } = place;
    let version = match client.stat(pool, object).await {
        Ok((_, v)) => v,
        Err(ClientError::NotFound(_)) => return Err(LeaseError::Missing(object.clone())),
        Err(e) => return Err(e.into()),
    };
    match client.get_xattr(pool, object, attr).await {
        Ok(bytes) => Ok((
            Some(LeaseRecord::decode(&bytes).unwrap_or(LeaseRecord {
                cookie: 0,
                host: "unreadable record".into(),
                pid: 0,
                lease: DEFAULT_LEASE,
                renewals: 0,
                instance: 0,
            })),
            version,
        )),
        Err(ClientError::NotFound(_)) => Ok((None, version)),
        Err(e) => Err(e.into()),
    }
}

/// Removes whatever lease `place` holds (an operator's last resort when a holder is known
/// dead and its lease is long), fencing its holder first where its record names an instance;
/// returns the record removed. Refused if the lease changed since it was read.
pub async fn break_lease(
    client: &Client,
    place: &LeasePlace,
) -> Result<Option<LeaseRecord>, LeaseError> {
    let (record, version) = holder(client, place).await?;
    if let Some(record) = &record {
        fence(client, record).await?;
        client
            .remove_xattr_if(&place.pool, &place.object, &place.attr, version)
            .await
            .map_err(|e| match e {
                ClientError::VersionMismatch { .. } => {
                    LeaseError::Held(format!("the lock of {} changed meanwhile", place.object))
                }
                e => e.into(),
            })?;
    }
    Ok(record)
}

/// A held lease: renewed in the background until released or lost.
pub struct Lease {
    client: Arc<Client>,
    place: LeasePlace,
    /// What the lease guards, as messages name it ("image foo").
    what: String,
    lease: Duration,
    /// Held across every compare-and-swap of the object, so that a renewal and a data write
    /// never race each other's expected version.
    state: tokio::sync::Mutex<Held>,
    /// Half a lease after the start of the last successful renewal; `None` once lost.
    valid: watch::Sender<Option<Instant>>,
    renewer: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

/// What the holder knows of its record and the object.
struct Held {
    record: LeaseRecord,
    version: u64,
}

impl Lease {
    /// Takes the lease at `place` for `what`: at once when it is free, or when `gone` says
    /// its holder is known dead; after one lease of the holder's when that holder stops
    /// renewing (it died); refused with [`LeaseError::Held`] when the holder renews
    /// meanwhile. A holder replaced without its release is fenced first (see the module's
    /// notes); `fenceable` says whether this holder's client may be fenced in turn (it
    /// serves nothing but what the lease guards).
    pub async fn acquire(
        client: Arc<Client>,
        place: LeasePlace,
        what: &str,
        lease: Duration,
        gone: &(dyn Fn(&LeaseRecord) -> bool + Sync),
        fenceable: bool,
    ) -> Result<Arc<Lease>, LeaseError> {
        check_lease(lease)?;
        let mine = LeaseRecord::mine(lease, if fenceable { client.instance() } else { 0 });
        // Each round either takes the lease, sees a live holder, or saw the object change
        // under a compare-and-swap (a racing contender or a release): a few rounds suffice.
        for _ in 0..8 {
            let (theirs, mut version) = holder(&client, &place).await?;
            if let Some(theirs) = &theirs {
                if !gone(theirs) {
                    tokio::time::sleep(theirs.lease).await;
                    let (now, after) = holder(&client, &place).await?;
                    if after != version {
                        match now {
                            Some(now) if now.cookie == theirs.cookie => {
                                return Err(LeaseError::Held(format!("{what} is locked by {now}")))
                            }
                            _ => continue,
                        }
                    }
                    version = after;
                    tracing::warn!(what, holder = %theirs, "taking over a lease its holder stopped renewing");
                }
                fence(&client, theirs).await?;
            }
            let started = Instant::now();
            match client
                .set_xattr_if(
                    &place.pool,
                    &place.object,
                    &place.attr,
                    &mine.encode(),
                    version,
                )
                .await
            {
                Ok(version) => {
                    let (valid, _) = watch::channel(Some(started + lease / 2));
                    let lock = Arc::new(Lease {
                        client: client.clone(),
                        place: place.clone(),
                        what: what.to_string(),
                        lease,
                        state: tokio::sync::Mutex::new(Held {
                            record: mine,
                            version,
                        }),
                        valid,
                        renewer: Mutex::new(None),
                    });
                    let renewer = tokio::spawn(renew_until_lost(Arc::downgrade(&lock)));
                    *lock.renewer.lock().unwrap_or_else(|p| p.into_inner()) = Some(renewer);
                    return Ok(lock);
                }
                Err(ClientError::VersionMismatch { .. }) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(LeaseError::Held(format!(
            "the lock of {what} kept changing hands"
        )))
    }

    /// Whether the lease was lost for good (taken over, broken, or a renewal found the
    /// object changed).
    pub fn is_lost(&self) -> bool {
        self.valid.borrow().is_none()
    }

    /// Waits until the lease is held (a renewal may be late: up to the lease), or fails once
    /// it is lost. Every write it guards checks it first.
    pub async fn check(&self) -> Result<(), LeaseError> {
        let lease = self.lease();
        let mut rx = self.valid.subscribe();
        let deadline = tokio::time::Instant::now() + lease;
        loop {
            match *rx.borrow_and_update() {
                None => {
                    return Err(LeaseError::Lost(format!(
                        "{} is no longer locked by this client",
                        self.what
                    )))
                }
                Some(until) if Instant::now() < until => return Ok(()),
                Some(_) => {}
            }
            if tokio::time::timeout_at(deadline, rx.changed())
                .await
                .is_err()
            {
                return Err(LeaseError::Lost(format!(
                    "the lock of {} was not renewed for a whole lease",
                    self.what
                )));
            }
        }
    }

    /// The lease.
    pub fn lease(&self) -> Duration {
        self.lease
    }

    /// Writes `bytes` as the lease object's data, only while the lease holds and nothing else
    /// changed the object (a compare-and-swap on its version).
    pub async fn write_data(&self, bytes: &[u8]) -> Result<(), LeaseError> {
        self.check().await?;
        let mut held = self.state.lock().await;
        let LeasePlace { pool, object, .. } = &self.place;
        match self
            .client
            .write_full_if(pool, object, bytes, held.version)
            .await
        {
            Ok(version) => {
                held.version = version;
                Ok(())
            }
            Err(ClientError::VersionMismatch { .. }) => {
                self.lost();
                Err(LeaseError::Lost(format!(
                    "the object of {} changed under its lock",
                    self.what
                )))
            }
            Err(e @ ClientError::Blocklisted { .. }) => {
                self.lost();
                Err(LeaseError::Lost(format!(
                    "{} was taken over and this client fenced: {e}",
                    self.what
                )))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Renews once: a compare-and-swap of the record with its renewal count raised.
    async fn renew(&self) -> Result<(), LeaseError> {
        let mut held = self.state.lock().await;
        let mut record = held.record.clone();
        record.renewals += 1;
        let started = Instant::now();
        let LeasePlace { pool, object, attr } = &self.place;
        match self
            .client
            .set_xattr_if(pool, object, attr, &record.encode(), held.version)
            .await
        {
            Ok(version) => {
                held.version = version;
                held.record = record;
                drop(held);
                let lease = self.lease;
                self.valid.send_if_modified(|v| match v {
                    Some(until) => {
                        *until = (*until).max(started + lease / 2);
                        true
                    }
                    None => false,
                });
                Ok(())
            }
            Err(ClientError::VersionMismatch { .. }) => {
                self.lost();
                Err(LeaseError::Lost(format!(
                    "the lock of {} was taken or broken",
                    self.what
                )))
            }
            Err(e @ ClientError::Blocklisted { .. }) => {
                self.lost();
                Err(LeaseError::Lost(format!(
                    "the lock of {} was taken over and this client fenced: {e}",
                    self.what
                )))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Marks the lease lost for good: every later write fails.
    fn lost(&self) {
        self.valid.send_replace(None);
    }

    /// Releases the lease (removes the record if it is still ours) and stops renewing.
    pub async fn release(&self) -> Result<(), LeaseError> {
        // Taken first: a renewal in flight holds it until its answer is recorded, so the
        // version below is the one the object is at (a renewal cut off mid-flight could
        // have moved the object without telling us).
        let held = self.state.lock().await;
        if let Some(task) = self
            .renewer
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            task.abort();
        }
        let was_held = self.valid.send_replace(None).is_some();
        if !was_held {
            return Ok(());
        }
        let LeasePlace { pool, object, attr } = &self.place;
        let mut expected = held.version;
        // An object that moved anyway is looked at: the record removed only while it is ours.
        for _ in 0..4 {
            match self
                .client
                .remove_xattr_if(pool, object, attr, expected)
                .await
            {
                Ok(_) | Err(ClientError::NotFound(_)) => return Ok(()),
                Err(ClientError::VersionMismatch { current, .. }) => {
                    match holder(&self.client, &self.place).await {
                        Ok((Some(r), now)) if r.cookie == held.record.cookie => {
                            expected = now.max(current)
                        }
                        Ok(_) | Err(LeaseError::Missing(_)) => return Ok(()),
                        Err(e) => return Err(e),
                    }
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(LeaseError::Held(format!(
            "the lock of {} kept changing while it was released",
            self.what
        )))
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(task) = self
            .renewer
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            task.abort();
        }
    }
}

/// Fences `holder`'s client instance out of the OSDs before its lease is taken or broken, and
/// waits for the map that says so; nothing to do for a holder that named none.
async fn fence(client: &Client, holder: &LeaseRecord) -> Result<(), LeaseError> {
    if holder.instance == 0 || holder.instance == client.instance() {
        return Ok(());
    }
    let expire_s = cairn_proto::mon::DEFAULT_BLOCKLIST_EXPIRE_S;
    match client.blocklist(holder.instance, Some(expire_s)).await {
        Ok(epoch) => {
            tracing::warn!(holder = %holder, epoch, "fenced the lease's previous holder");
            Ok(())
        }
        Err(e) => Err(LeaseError::Held(format!(
            "the previous holder ({holder}) could not be fenced: {e}"
        ))),
    }
}

/// Renews every sixth of the lease while the lease lives and is held.
async fn renew_until_lost(lock: std::sync::Weak<Lease>) {
    loop {
        let Some(period) = lock.upgrade().map(|l| l.lease() / 6) else {
            return;
        };
        tokio::time::sleep(period).await;
        let Some(l) = lock.upgrade() else { return };
        match l.renew().await {
            Ok(()) => {}
            Err(LeaseError::Lost(why)) => {
                tracing::error!(what = %l.what, why, "lease lost");
                return;
            }
            Err(e) => tracing::warn!(what = %l.what, error = %e, "lease renewal failed"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_malformed_ones_are_refused() {
        let r = LeaseRecord {
            cookie: 0xfeed,
            host: "node a".into(),
            pid: 42,
            lease: Duration::from_secs(10),
            renewals: 7,
            instance: 0xabc,
        };
        let back = LeaseRecord::decode(&r.encode()).unwrap();
        assert_eq!(back.host, "node_a");
        assert_eq!(
            (
                back.cookie,
                back.pid,
                back.lease,
                back.renewals,
                back.instance
            ),
            (0xfeed, 42, r.lease, 7, 0xabc)
        );
        let older = LeaseRecord::decode(b"cookie=1 host=h pid=2 lease_ms=1000 renewals=0").unwrap();
        assert_eq!(
            older.instance, 0,
            "a record without an instance names none to fence"
        );
        for bad in [
            &b"cookie=zz"[..],
            b"cookie=1 lease_ms=1000 instance=nothex",
            b"lease_ms=1",
            b"noequals",
            &[0xff, 0xfe][..],
            &[b'a'; MAX_RECORD_BYTES + 1][..],
        ] {
            assert_eq!(LeaseRecord::decode(bad), None, "{bad:?}");
        }
        assert!(check_lease(DEFAULT_LEASE).is_ok());
        assert!(check_lease(Duration::from_millis(1)).is_err());
        assert!(check_lease(Duration::from_secs(3600)).is_err());
    }
}
