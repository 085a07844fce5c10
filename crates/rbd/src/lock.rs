//! The exclusive lock: one writer per image at a time, so that two hosts mapping one image
//! cannot interleave writes into a corrupt disk, and so that a writer's in-memory knowledge
//! (which objects it has already copied for the newest snapshot) stays true.
//!
//! The lock is a [`cairn_client::lease`] kept in the `lock` attribute of the image's header
//! object; header writes are compare-and-swaps under it.

use std::sync::Arc;
use std::time::Duration;

use cairn_client::lease::{self, Lease, LeaseError, LeasePlace};
use cairn_client::Client;

pub use cairn_client::lease::{LeaseRecord as LockRecord, DEFAULT_LEASE, MAX_LEASE, MIN_LEASE};

use crate::error::RbdError;
use crate::image::header_object;

/// The header attribute holding the lock record.
pub const LOCK_ATTR: &str = "lock";

/// Where image `name`'s lock lives.
fn place(pool: &str, name: &str) -> LeasePlace {
    LeasePlace {
        pool: pool.to_string(),
        object: header_object(name),
        attr: LOCK_ATTR.to_string(),
    }
}

/// A lease failure as an image operation's.
fn image_error(e: LeaseError, name: &str) -> RbdError {
    match e {
        LeaseError::Client(e) => e.into(),
        LeaseError::Missing(_) => RbdError::NotFound(name.to_string()),
        LeaseError::Held(why) => RbdError::Locked(why),
        LeaseError::Lost(why) => RbdError::LockLost(why),
        LeaseError::Invalid(why) => RbdError::Invalid(why),
    }
}

/// Checks a lease against [`MIN_LEASE`]..=[`MAX_LEASE`].
pub fn check_lease(lease: Duration) -> Result<(), RbdError> {
    lease::check_lease(lease).map_err(|e| image_error(e, ""))
}

/// The lock record of image `name` and the header's version, or None when it is unlocked.
pub async fn holder(
    client: &Client,
    pool: &str,
    name: &str,
) -> Result<(Option<LockRecord>, u64), RbdError> {
    lease::holder(client, &place(pool, name))
        .await
        .map_err(|e| image_error(e, name))
}

/// Removes whatever lock image `name` holds (an operator's last resort when a holder is
/// known dead and its lease is long); returns the record removed. Refused if the lock
/// changed since it was read.
pub async fn break_lock(
    client: &Client,
    pool: &str,
    name: &str,
) -> Result<Option<LockRecord>, RbdError> {
    lease::break_lease(client, &place(pool, name))
        .await
        .map_err(|e| image_error(e, name))
}

/// A held lock: renewed in the background until released or lost.
pub struct ExclusiveLock {
    lease: Arc<Lease>,
    name: String,
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
        let what = format!("image {name}");
        let lease = Lease::acquire(client, place(pool, name), &what, lease, &|_| false, true)
            .await
            .map_err(|e| image_error(e, name))?;
        Ok(Arc::new(ExclusiveLock {
            lease,
            name: name.to_string(),
        }))
    }

    /// Whether the lock was lost for good (taken over, broken, or a renewal found the header
    /// changed).
    pub fn is_lost(&self) -> bool {
        self.lease.is_lost()
    }

    /// Waits until the lock is held (a renewal may be late: up to the lease), or fails once
    /// it is lost. Every write checks it first.
    pub async fn check(&self) -> Result<(), RbdError> {
        self.lease
            .check()
            .await
            .map_err(|e| image_error(e, &self.name))
    }

    /// The lease.
    pub fn lease(&self) -> Duration {
        self.lease.lease()
    }

    /// Writes `bytes` as the header object's data, only while the lock holds and nothing
    /// else changed the header (a compare-and-swap on its version).
    pub async fn write_header(&self, bytes: &[u8]) -> Result<(), RbdError> {
        self.lease
            .write_data(bytes)
            .await
            .map_err(|e| image_error(e, &self.name))
    }

    /// Releases the lock (removes the record if it is still ours) and stops renewing.
    pub async fn release(&self) -> Result<(), RbdError> {
        self.lease
            .release()
            .await
            .map_err(|e| image_error(e, &self.name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_failures_read_as_image_failures() {
        assert!(matches!(
            check_lease(Duration::from_millis(1)),
            Err(RbdError::Invalid(_))
        ));
        assert!(check_lease(DEFAULT_LEASE).is_ok());
        assert!(matches!(
            image_error(LeaseError::Missing("rbd_header.x".into()), "x"),
            RbdError::NotFound(n) if n == "x"
        ));
        assert!(matches!(
            image_error(LeaseError::Held("by pid 1".into()), "x"),
            RbdError::Locked(_)
        ));
        assert!(matches!(
            image_error(LeaseError::Lost("taken".into()), "x"),
            RbdError::LockLost(_)
        ));
    }
}
