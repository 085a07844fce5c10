//! Typed errors of the OSD.

use thiserror::Error;

/// What can stop an OSD or fail an operation.
#[derive(Debug, Error)]
pub enum OsdError {
    /// The object store failed (fatal for device errors, see the store's contract).
    #[error("store: {0}")]
    Store(#[from] cairn_store::StoreError),
    /// The block device could not be opened.
    #[error("device: {0}")]
    Device(#[from] cairn_blockdev::BlockDevError),
    /// The monitor refused or did not answer.
    #[error("monitor: {0}")]
    Mon(#[from] cairn_proto::mon::MonError),
    /// The scheduler refused the request (queue full, bad config).
    #[error("scheduler: {0}")]
    Qos(#[from] cairn_qos::QosError),
    /// A message could not be decoded.
    #[error("protocol: {0}")]
    Protocol(String),
    /// A peer sent a malformed message.
    #[error(transparent)]
    Malformed(#[from] cairn_proto::ProtoError),
    /// Persisted PG state does not decode.
    #[error("corrupt PG state: {0}")]
    Corrupt(String),
    /// A peer failed or refused a peering/recovery request.
    #[error("peer osd.{osd}: {reason}")]
    Peer {
        /// The peer.
        osd: i32,
        /// What went wrong.
        reason: String,
    },
    /// A copy cannot take a recovered object (out of space or past its full ratio).
    #[error("osd.{osd} is too full for recovery: {why}")]
    TooFull {
        /// The copy.
        osd: i32,
        /// Its answer.
        why: String,
    },
    /// Networking failed.
    #[error("messenger: {0}")]
    Msgr(#[from] cairn_msgr::MsgrError),
    /// A setting is out of its range.
    #[error("configuration: {0}")]
    Config(String),
    /// The OSD is stopping: the work was not queued.
    #[error("osd stopping: the request was not queued")]
    Stopping,
    /// A stopped OSD's tasks still held its state (its store) when the wait for them ended.
    #[error("osd still busy {waited_ms} ms after being stopped: {holders} task(s) hold its store")]
    StillBusy {
        /// How long the stop waited.
        waited_ms: u64,
        /// How many holders of the OSD's state were left.
        holders: usize,
    },
    /// A cluster flag holds the work back (e.g. `norecover` a background recovery).
    #[error("held by the cluster flag {0}")]
    Held(cairn_clustermap::MapFlag),
    /// A fill's reservation was refused: the OSD takes part in as many fills as its
    /// `osd_max_backfills` allows.
    #[error("osd.{osd} refused a fill reservation (osd_max_backfills reached)")]
    NotReserved {
        /// The OSD that refused (this one for a local reservation).
        osd: i32,
    },
}
