//! The exclusive lock: one writer per image at a time, so that two hosts mapping one image
//! cannot interleave writes into a corrupt disk, and so that a writer's in-memory knowledge
//! (which objects it has already copied for the newest snapshot) stays true.
//!
//! The lock is a lease kept in the `lock` attribute of the image's header object, taken and
//! renewed by compare-and-swap on the header's version (a conditional write, checked by the
//! primary under its PG lock). The holder renews every sixth of the lease and counts itself
//! the holder only until half a lease after the start of its last successful renewal; past
//! that, its writes wait for the next renewal, and a renewal that finds the header changed
//! under it ends the lock for good. A contender that finds a lock waits one full lease by its
//! own clock and takes the lock only if the header's version did not move meanwhile (the
//! holder stopped renewing): no clocks are compared between hosts, only their rates.
//!
//! What a lease cannot close: a write the old holder sent before its half lease ran out that
//! reaches its OSD after the new holder took over (Ceph closes it by blocklisting the old
//! client in the OSD map).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cairn_client::{Client, ClientError};
use tokio::sync::watch;

use crate::error::RbdError;
use crate::image::header_object;

/// The header attribute holding the lock record.
pub const LOCK_ATTR: &str = "lock";
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

/// Who holds a lock, as its record says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockRecord {
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
}

impl LockRecord {
    /// This process's record for a new acquisition.
    fn mine(lease: Duration) -> LockRecord {
        LockRecord {
            cookie: cairn_client::random_client_id(),
            host: std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|h| h.trim().to_string())
                .unwrap_or_else(|_| "unknown".into()),
            pid: std::process::id(),
            lease,
            renewals: 0,
        }
    }

    /// The stored form: `key=value` words.
    pub fn encode(&self) -> Vec<u8> {
        format!(
            "cookie={:016x} host={} pid={} lease_ms={} renewals={}",
            self.cookie,
            self.host.replace(char::is_whitespace, "_"),
            self.pid,
            self.lease.as_millis(),
            self.renewals
        )
        .into_bytes()
    }

    /// Parses a stored record; None when it is malformed (a contender then treats it as a
    /// lock of the default lease).
    pub fn decode(bytes: &[u8]) -> Option<LockRecord> {
        if bytes.len() > MAX_RECORD_BYTES {
            return None;
        }
        let text = std::str::from_utf8(bytes).ok()?;
        let mut r = LockRecord {
            cookie: 0,
            host: String::new(),
            pid: 0,
            lease: Duration::ZERO,
            renewals: 0,
        };
        for word in text.split_whitespace() {
            let (k, v) = word.split_once('=')?;
            match k {
                "cookie" => r.cookie = u64::from_str_radix(v, 16).ok()?,
                "host" => r.host = v.to_string(),
                "pid" => r.pid = v.parse().ok()?,
                "lease_ms" => r.lease = Duration::from_millis(v.parse().ok()?),
                "renewals" => r.renewals = v.parse().ok()?,
                _ => {}
            }
        }
        (MIN_LEASE..=MAX_LEASE).contains(&r.lease).then_some(r)
    }
}

impl std::fmt::Display for LockRecord {
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

/// Checks a lease against [`MIN_LEASE`]..=[`MAX_LEASE`].
pub fn check_lease(lease: Duration) -> Result<(), RbdError> {
    match (MIN_LEASE..=MAX_LEASE).contains(&lease) {
        true => Ok(()),
        false => Err(RbdError::Invalid(format!(
            "a lock lease of {} ms is outside {}..={} ms",
            lease.as_millis(),
            MIN_LEASE.as_millis(),
            MAX_LEASE.as_millis()
        ))),
    }
}

/// The lock record of image `name` and the header's version, or None when it is unlocked.
pub async fn holder(
    client: &Client,
    pool: &str,
    name: &str,
) -> Result<(Option<LockRecord>, u64), RbdError> {
    let object = header_object(name);
    let version = match client.stat(pool, &object).await {
        Ok((_, v)) => v,
        Err(ClientError::NotFound(_)) => return Err(RbdError::NotFound(name.to_string())),
        Err(e) => return Err(e.into()),
    };
    match client.get_xattr(pool, &object, LOCK_ATTR).await {
        Ok(bytes) => Ok((
            Some(LockRecord::decode(&bytes).unwrap_or(LockRecord {
                cookie: 0,
                host: "unreadable record".into(),
                pid: 0,
                lease: DEFAULT_LEASE,
                renewals: 0,
            })),
            version,
        )),
        Err(ClientError::NotFound(_)) => Ok((None, version)),
        Err(e) => Err(e.into()),
    }
}

/// Removes whatever lock image `name` holds (an operator's last resort when a holder is
/// known dead and its lease is long); returns the record removed. Refused if the lock
/// changed since it was read.
pub async fn break_lock(
    client: &Client,
    pool: &str,
    name: &str,
) -> Result<Option<LockRecord>, RbdError> {
    let (record, version) = holder(client, pool, name).await?;
    if record.is_some() {
        client
            .remove_xattr_if(pool, &header_object(name), LOCK_ATTR, version)
            .await
            .map_err(|e| match e {
                ClientError::VersionMismatch { .. } => {
                    RbdError::Locked(format!("the lock of {name} changed meanwhile"))
                }
                e => e.into(),
            })?;
    }
    Ok(record)
}

/// A held lock: renewed in the background until released or lost.
pub struct ExclusiveLock {
    client: Arc<Client>,
    pool: String,
    name: String,
    lease: Duration,
    /// Held across every compare-and-swap of the header, so that a renewal and a header
    /// write never race each other's expected version.
    state: tokio::sync::Mutex<Held>,
    /// Half a lease after the start of the last successful renewal; `None` once lost.
    valid: watch::Sender<Option<Instant>>,
    renewer: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

/// What the holder knows of its record and the header.
struct Held {
    record: LockRecord,
    version: u64,
}

impl ExclusiveLock {
    /// Takes the lock of image `name`: at once when it is free; after one lease of the
    /// holder's when that holder stops renewing (it died); refused with
    /// [`RbdError::Locked`] when the holder renews meanwhile.
    pub async fn acquire(
        client: Arc<Client>,
        pool: &str,
        name: &str,
        lease: Duration,
    ) -> Result<Arc<ExclusiveLock>, RbdError> {
        check_lease(lease)?;
        let object = header_object(name);
        let mine = LockRecord::mine(lease);
        // Each round either takes the lock, sees a live holder, or saw the header change
        // under a compare-and-swap (a racing contender or a release): a few rounds suffice.
        for _ in 0..8 {
            let (theirs, version) = holder(&client, pool, name).await?;
            if let Some(theirs) = theirs {
                tokio::time::sleep(theirs.lease).await;
                let (now, after) = holder(&client, pool, name).await?;
                if after != version {
                    match now {
                        Some(now) if now.cookie == theirs.cookie => {
                            return Err(RbdError::Locked(format!(
                                "image {name} is locked by {now}"
                            )))
                        }
                        _ => continue,
                    }
                }
                tracing::warn!(image = name, holder = %theirs, "taking over a lock its holder stopped renewing");
            }
            let started = Instant::now();
            match client
                .set_xattr_if(pool, &object, LOCK_ATTR, &mine.encode(), version)
                .await
            {
                Ok(version) => {
                    let (valid, _) = watch::channel(Some(started + lease / 2));
                    let lock = Arc::new(ExclusiveLock {
                        client: client.clone(),
                        pool: pool.to_string(),
                        name: name.to_string(),
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
        Err(RbdError::Locked(format!(
            "the lock of image {name} kept changing hands"
        )))
    }

    /// Whether the lock was lost for good (taken over, broken, or a renewal found the header
    /// changed).
    pub fn is_lost(&self) -> bool {
        self.valid.borrow().is_none()
    }

    /// Waits until the lock is held (a renewal may be late: up to the lease), or fails once
    /// it is lost. Every write checks it first.
    pub async fn check(&self) -> Result<(), RbdError> {
        let lease = self.lease();
        let mut rx = self.valid.subscribe();
        let deadline = tokio::time::Instant::now() + lease;
        loop {
            match *rx.borrow_and_update() {
                None => {
                    return Err(RbdError::LockLost(format!(
                        "image {} is no longer locked by this client",
                        self.name
                    )))
                }
                Some(until) if Instant::now() < until => return Ok(()),
                Some(_) => {}
            }
            if tokio::time::timeout_at(deadline, rx.changed())
                .await
                .is_err()
            {
                return Err(RbdError::LockLost(format!(
                    "the lock of image {} was not renewed for a whole lease",
                    self.name
                )));
            }
        }
    }

    /// The lease.
    pub fn lease(&self) -> Duration {
        self.lease
    }

    /// Writes `bytes` as the header object's data, only while the lock holds and nothing
    /// else changed the header (a compare-and-swap on its version).
    pub async fn write_header(&self, bytes: &[u8]) -> Result<(), RbdError> {
        self.check().await?;
        let mut held = self.state.lock().await;
        let object = header_object(&self.name);
        match self
            .client
            .write_full_if(&self.pool, &object, bytes, held.version)
            .await
        {
            Ok(version) => {
                held.version = version;
                Ok(())
            }
            Err(ClientError::VersionMismatch { .. }) => {
                self.lost();
                Err(RbdError::LockLost(format!(
                    "the header of image {} changed under its lock",
                    self.name
                )))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Renews once: a compare-and-swap of the record with its renewal count raised.
    async fn renew(&self) -> Result<(), RbdError> {
        let mut held = self.state.lock().await;
        let mut record = held.record.clone();
        record.renewals += 1;
        let started = Instant::now();
        let object = header_object(&self.name);
        match self
            .client
            .set_xattr_if(
                &self.pool,
                &object,
                LOCK_ATTR,
                &record.encode(),
                held.version,
            )
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
                Err(RbdError::LockLost(format!(
                    "the lock of image {} was taken or broken",
                    self.name
                )))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Marks the lock lost for good: every later write fails.
    fn lost(&self) {
        self.valid.send_replace(None);
    }

    /// Releases the lock (removes the record if it is still ours) and stops renewing.
    pub async fn release(&self) -> Result<(), RbdError> {
        // Taken first: a renewal in flight holds it until its answer is recorded, so the
        // version below is the one the header is at (a renewal cut off mid-flight could
        // have moved the header without telling us).
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
        let object = header_object(&self.name);
        let mut expected = held.version;
        // A header that moved anyway is looked at: the record removed only while it is ours.
        for _ in 0..4 {
            match self
                .client
                .remove_xattr_if(&self.pool, &object, LOCK_ATTR, expected)
                .await
            {
                Ok(_) | Err(ClientError::NotFound(_)) => return Ok(()),
                Err(ClientError::VersionMismatch { current, .. }) => {
                    match holder(&self.client, &self.pool, &self.name).await {
                        Ok((Some(r), now)) if r.cookie == held.record.cookie => {
                            expected = now.max(current)
                        }
                        Ok(_) | Err(RbdError::NotFound(_)) => return Ok(()),
                        Err(e) => return Err(e),
                    }
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(RbdError::Locked(format!(
            "the lock of image {} kept changing while it was released",
            self.name
        )))
    }
}

impl Drop for ExclusiveLock {
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

/// Renews every sixth of the lease while the lock lives and is held.
async fn renew_until_lost(lock: std::sync::Weak<ExclusiveLock>) {
    loop {
        let Some(period) = lock.upgrade().map(|l| l.lease() / 6) else {
            return;
        };
        tokio::time::sleep(period).await;
        let Some(l) = lock.upgrade() else { return };
        match l.renew().await {
            Ok(()) => {}
            Err(RbdError::LockLost(why)) => {
                tracing::error!(image = %l.name, why, "exclusive lock lost");
                return;
            }
            Err(e) => tracing::warn!(image = %l.name, error = %e, "lock renewal failed"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_malformed_ones_are_refused() {
        let r = LockRecord {
            cookie: 0xfeed,
            host: "node a".into(),
            pid: 42,
            lease: Duration::from_secs(10),
            renewals: 7,
        };
        let back = LockRecord::decode(&r.encode()).unwrap();
        assert_eq!(back.host, "node_a");
        assert_eq!(
            (back.cookie, back.pid, back.lease, back.renewals),
            (0xfeed, 42, r.lease, 7)
        );
        for bad in [
            &b"cookie=zz"[..],
            b"lease_ms=1",
            b"noequals",
            &[0xff, 0xfe][..],
            &[b'a'; MAX_RECORD_BYTES + 1][..],
        ] {
            assert_eq!(LockRecord::decode(bad), None, "{bad:?}");
        }
        assert!(check_lease(DEFAULT_LEASE).is_ok());
        assert!(check_lease(Duration::from_millis(1)).is_err());
        assert!(check_lease(Duration::from_secs(3600)).is_err());
    }
}
