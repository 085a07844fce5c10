//! Typed errors of the qos crate. Owns `QosError`; never panics on bad input.

use thiserror::Error;

/// Everything that can go wrong configuring or driving a scheduler.
#[derive(Debug, Error, PartialEq)]
pub enum QosError {
    /// A policy name that no policy answers to.
    #[error("unknown policy `{0}` (expected fifo, wpq, mclock (or Ceph's mclock_scheduler), crrn, orr, trr or tbf)")]
    UnknownPolicy(String),
    /// A profile name that is not a known mClock profile.
    #[error("unknown mclock profile `{0}` (expected high_client_ops, balanced, high_recovery_ops or custom)")]
    UnknownProfile(String),
    /// A numeric parameter outside its allowed range.
    #[error("invalid parameter `{name}`: {reason}")]
    InvalidParam {
        /// Parameter name.
        name: String,
        /// Why it was rejected.
        reason: String,
    },
    /// A TBF rule expression that does not parse.
    #[error("bad TBF rule expression at byte {pos}: {reason}")]
    BadRule {
        /// Byte offset in the expression.
        pos: usize,
        /// What was wrong.
        reason: String,
    },
    /// A TBF rule name that is not installed (change/stop).
    #[error("no TBF rule named `{0}`")]
    NoSuchRule(String),
    /// A TBF rule name that is already installed (start).
    #[error("TBF rule `{0}` already exists")]
    DuplicateRule(String),
    /// The scheduler is at its configured request limit.
    #[error("queue full: {limit} requests queued")]
    QueueFull {
        /// The configured limit.
        limit: usize,
    },
    /// A scenario/config file that does not parse.
    #[error("config: {0}")]
    Config(String),
    /// A capacity measurement that falls outside the sanity bounds.
    #[error("capacity measurement rejected: {0}")]
    CapacityOutOfBounds(String),
    /// The device measurement itself failed.
    #[error("capacity measurement failed: {0}")]
    Measurement(String),
    /// A measured capacity may not replace a pinned one.
    #[error("capacity is pinned by config; a measurement does not replace it")]
    CapacityPinned,
    /// A shard index outside 0..shards.
    #[error("shard {shard} out of range (have {shards})")]
    NoSuchShard {
        /// The shard asked for.
        shard: usize,
        /// How many shards exist.
        shards: usize,
    },
}

pub(crate) fn invalid(name: &str, reason: impl Into<String>) -> QosError {
    QosError::InvalidParam {
        name: name.to_string(),
        reason: reason.into(),
    }
}

pub(crate) fn mismatch(expected: &str, got: &str) -> QosError {
    invalid(
        "name",
        format!("cannot reconfigure `{expected}` with a `{got}` config; swap the policy instead"),
    )
}
