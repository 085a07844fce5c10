//! What goes wrong in the file system's daemons and client, typed.

use thiserror::Error;

/// A file-system failure.
#[derive(Debug, Error)]
pub enum FsError {
    /// The cluster failed an operation.
    #[error(transparent)]
    Client(#[from] cairn_client::ClientError),
    /// The messenger failed.
    #[error(transparent)]
    Msgr(#[from] cairn_msgr::MsgrError),
    /// A local I/O failure (the mount point, the FUSE device).
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// No file system with this metadata pool.
    #[error("no file system in pool `{0}` (make one with `cairn fs new NAME`)")]
    NoFileSystem(String),
    /// Metadata in RADOS that does not decode.
    #[error("damaged metadata: {0}")]
    Damaged(String),
    /// The metadata server is not reachable or answered out of protocol.
    #[error("metadata server: {0}")]
    Mds(String),
    /// A mount option out of its range.
    #[error("invalid mount option: {0}")]
    Invalid(String),
}

impl FsError {
    /// The errno a file-system caller sees for this failure: ENOSPC when the cluster is full,
    /// EDQUOT when the pool is past its quota, EIO otherwise.
    pub fn errno(&self) -> i32 {
        match self {
            FsError::Client(cairn_client::ClientError::NoSpace(_)) => libc::ENOSPC,
            FsError::Client(cairn_client::ClientError::QuotaExceeded(_)) => libc::EDQUOT,
            _ => libc::EIO,
        }
    }
}
