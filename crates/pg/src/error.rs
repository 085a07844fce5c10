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
    /// A log received or read whose parts break the log's invariants (its order, its tail
    /// and head, its dups); it is refused whole.
    #[error("invalid log: {0}")]
    InvalidLog(String),
    /// No OSD supplied a log; the PG cannot peer.
    #[error("no peer logs to choose from")]
    NoLogs,
}
