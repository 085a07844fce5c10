//! What `cairn fs status` shows: a file system's pools, its active metadata server (its
//! address and lease) and, when that server answers in time, its totals.

use std::sync::Arc;
use std::time::Duration;

use cairn_client::lease::{self, LeaseRecord};
use cairn_client::{Client, ClientError};
use cairn_proto::mds::{MdsAnswer, MdsOp};

use crate::active::lease_place;
use crate::backing::{self, metadata_pool, FsInfo};
use crate::error::FsError;
use crate::link::MdsLink;
use crate::mds::ADDR_OBJECT;

/// Longest the status waits for the metadata server's totals.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);

/// A file system's state.
#[derive(Clone, Debug)]
pub struct FsStatus {
    /// Its pools.
    pub info: FsInfo,
    /// The address the active (or last active) metadata server published.
    pub mds_addr: Option<String>,
    /// The lease of the active metadata server, if one holds it.
    pub lease: Option<LeaseRecord>,
    /// Inodes and bytes in files, from the metadata server (None: it did not answer).
    pub totals: Option<(u64, u64)>,
}

/// Reads file system `fs`'s state through `client`.
pub async fn status(client: Arc<Client>, fs: &str) -> Result<FsStatus, FsError> {
    let meta = metadata_pool(fs);
    let info = backing::read_info(&client, &meta).await?;
    let mds_addr = match client.read(&meta, ADDR_OBJECT).await {
        Ok(bytes) => Some(String::from_utf8_lossy(&bytes).trim().to_string()),
        Err(ClientError::NotFound(_)) => None,
        Err(e) => return Err(e.into()),
    };
    let lease = match lease::holder(&client, &lease_place(&meta)).await {
        Ok((record, _)) => record,
        Err(lease::LeaseError::Missing(_)) => None,
        Err(e) => return Err(FsError::Mds(format!("reading the active lease: {e}"))),
    };
    let link = MdsLink::new(client, meta);
    let asked = tokio::time::timeout(ANSWER_TIMEOUT, link.request(MdsOp::StatFs));
    let totals = match asked.await {
        Ok(Ok(MdsAnswer::StatFs { files, bytes })) => Some((files, bytes)),
        _ => None,
    };
    Ok(FsStatus {
        info,
        mds_addr,
        lease,
        totals,
    })
}
