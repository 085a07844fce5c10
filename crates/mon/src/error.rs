//! Typed errors of the monitor core.

use thiserror::Error;

/// What the monitor refuses or fails to do.
#[derive(Debug, Error)]
pub enum MonError {
    /// A stored or received map/incremental failed its checks.
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
    /// The request names something that does not exist.
    #[error("not found: {0}")]
    NotFound(String),
    /// The request is invalid.
    #[error("invalid request: {0}")]
    Invalid(String),
    /// The monitor refused a client's request; its own message says why (it already names
    /// the kind of refusal, so nothing is added in front).
    #[error("{0}")]
    Refused(String),
    /// The monitor could not be reached or did not answer in time (the request may or may not
    /// have been applied).
    #[error("monitor unreachable: {0}")]
    Unreachable(String),
    /// A placement computation failed.
    #[error(transparent)]
    Placement(#[from] cairn_clustermap::MapError),
    /// A CRUSH edit failed.
    #[error(transparent)]
    Crush(#[from] cairn_crush::CrushError),
}
