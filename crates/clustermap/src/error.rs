//! Typed errors of the clustermap crate.

use thiserror::Error;

/// What can go wrong computing placement or reading exception tables.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum MapError {
    /// The pool does not exist.
    #[error("no pool {0}")]
    NoPool(i64),
    /// The pool's CRUSH rule does not exist.
    #[error("pool {pool}: crush rule {rule} does not exist")]
    NoRule {
        /// Pool id.
        pool: i64,
        /// Rule id.
        rule: i32,
    },
    /// The rule is outside what the balancer understands.
    #[error("rule {rule}: {reason}")]
    UnsupportedRule {
        /// Rule id.
        rule: i32,
        /// Why.
        reason: String,
    },
    /// A pool parameter is invalid.
    #[error("invalid pool: {0}")]
    InvalidPool(String),
    /// An exception table line could not be parsed.
    #[error("exceptions line {line}: {message}")]
    BadExceptions {
        /// 1-based line.
        line: usize,
        /// What was wrong.
        message: String,
    },
    /// A stored or received map or incremental failed its checks.
    #[error("bad encoding: {0}")]
    Encoding(String),
    /// An incremental does not follow the map's epoch.
    #[error("incremental for epoch {got} cannot apply to epoch {have}")]
    EpochGap {
        /// Epoch of the map.
        have: u64,
        /// Epoch the incremental produces.
        got: u64,
    },
    /// A change names something the map does not have.
    #[error("not found: {0}")]
    NotFound(String),
    /// A change is invalid for the map.
    #[error("invalid change: {0}")]
    Invalid(String),
    /// A CRUSH edit failed.
    #[error(transparent)]
    Crush(#[from] cairn_crush::CrushError),
}
