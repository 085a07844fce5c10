//! Typed errors of the PG logic.

use thiserror::Error;

/// What the PG logic refuses.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum PgError {
    /// A log entry does not advance the log's head.
    #[error("entry {entry} does not follow head {head}")]
    OutOfOrder {
        /// The offending version.
        entry: String,
        /// The log head.
        head: String,
    },
    /// No OSD supplied a log; the PG cannot peer.
    #[error("no peer logs to choose from")]
    NoLogs,
}
