//! Which metadata server is the active one: a lease on the `mds.lock` object of the metadata
//! pool ([`cairn_client::lease`]). A metadata server takes it before it loads the namespace,
//! and waits as a standby while another holds and renews it; it stops the moment it cannot
//! count on holding it, so that two never write the journal at once. A holder that died on
//! this host (its process is gone) is taken over at once; one elsewhere after its lease.

use std::sync::Arc;
use std::time::Duration;

use cairn_client::lease::{self, died_here, Lease, LeaseError, LeasePlace};
use cairn_client::{Client, ClientError};

use crate::error::FsError;

/// The object whose attribute holds the active MDS's lease.
pub const LEASE_OBJECT: &str = "mds.lock";
/// The attribute holding it.
const LEASE_ATTR: &str = "lock";
/// How long an active MDS's lease lasts without renewal (Ceph's `mds_beacon_grace`): the
/// longest a standby waits after the active one stops.
pub const MDS_LEASE: Duration = Duration::from_secs(15);

/// Where file system `fs`'s lease lives (in its metadata pool `meta`).
pub fn lease_place(meta: &str) -> LeasePlace {
    LeasePlace {
        pool: meta.to_string(),
        object: LEASE_OBJECT.to_string(),
        attr: LEASE_ATTR.to_string(),
    }
}

/// Takes the lease of the file system whose metadata pool is `meta`, waiting as a standby
/// (saying so once) for as long as another MDS holds it.
pub async fn become_active(
    client: Arc<Client>,
    meta: &str,
    fs: &str,
) -> Result<Arc<Lease>, FsError> {
    match client.write_full_if(meta, LEASE_OBJECT, &[], 0).await {
        Ok(_) | Err(ClientError::VersionMismatch { .. }) => {}
        Err(e) => return Err(e.into()),
    }
    let what = format!("the metadata server of {fs}");
    let place = lease_place(meta);
    let (holder, _) = lease::holder(&client, &place)
        .await
        .map_err(|e| FsError::Mds(format!("reading the lease of {what}: {e}")))?;
    if let Some(active) = holder.filter(|h| !died_here(h)) {
        tracing::info!(fs, %active, "standing by");
        println!("metadata server for {fs} standing by while {active} is active");
    }
    loop {
        let taken = Lease::acquire(
            client.clone(),
            place.clone(),
            &what,
            MDS_LEASE,
            &died_here,
            true,
        );
        match taken.await {
            Ok(lease) => return Ok(lease),
            Err(LeaseError::Held(_)) => {}
            Err(e) => return Err(FsError::Mds(format!("taking the lease of {what}: {e}"))),
        }
    }
}

/// Resolves once the lease is lost for good (taken over or broken) or has gone a whole lease
/// without renewal: the MDS must stop.
pub async fn lost(lease: &Lease) -> String {
    loop {
        if let Err(e) = lease.check().await {
            return e.to_string();
        }
        tokio::time::sleep(lease.lease() / 12).await;
    }
}
