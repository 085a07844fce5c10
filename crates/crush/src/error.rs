//! Typed errors of the crush crate.

use thiserror::Error;

/// Everything that can go wrong reading, building or evaluating a CRUSH map.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum CrushError {
    /// Map text could not be parsed; names the position.
    #[error("{line}:{column}: {message}")]
    Parse {
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// What was wrong.
        message: String,
    },
    /// The map is structurally invalid (dangling ids, overflowing weights, ...).
    #[error("invalid crush map: {0}")]
    Invalid(String),
    /// A JSON dump could not be read.
    #[error("bad crush json: {0}")]
    Json(String),
}
