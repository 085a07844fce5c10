//! The error type of cache management operations (create, attach, parameters, I/O classes).
//!
//! Owns the classification of failures: caller mistakes (invalid parameters, malformed I/O class
//! files), on-media problems (bad superblock, corrupt metadata) and device errors. It must never
//! hide a device error: a failed flush is reported as such and never retried here.

use cairn_blockdev::BlockDevError;

/// Result alias for cache management operations.
pub type Result<T> = std::result::Result<T, CacheError>;

/// Why a cache management operation failed.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    /// The cache or core device failed (or lost power).
    #[error("device error: {0}")]
    Device(#[from] BlockDevError),
    /// A parameter name or value was rejected.
    #[error("invalid parameter {name}: {reason}")]
    InvalidParam {
        /// The parameter (`namespace.key` or field name).
        name: String,
        /// What is wrong with it.
        reason: String,
    },
    /// An I/O class CSV file is malformed.
    #[error("io class file line {line}: {reason}")]
    IoClassCsv {
        /// 1-based line number in the file.
        line: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// The devices cannot hold a cache of the requested shape.
    #[error("geometry: {0}")]
    Geometry(String),
    /// No valid superblock was found, or it does not match the devices.
    #[error("superblock: {0}")]
    Superblock(String),
    /// Line metadata on the cache device is inconsistent.
    #[error("metadata of cache line {line}: {reason}")]
    CorruptMetadata {
        /// Cache line index.
        line: u32,
        /// What is inconsistent.
        reason: String,
    },
}

impl CacheError {
    /// Shorthand for [`CacheError::InvalidParam`].
    pub fn param(name: impl Into<String>, reason: impl Into<String>) -> Self {
        Self::InvalidParam {
            name: name.into(),
            reason: reason.into(),
        }
    }
}
