//! Offline consistency check of a cache device (superblock, every line entry).
//!
//! Owns the report. It must never modify either device.

use crate::convert::line_u32;
use crate::device::{load, Problem};
use crate::error::Result;
use cairn_blockdev::BlockDevice;
use std::sync::Arc;

/// What [`fsck`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FsckReport {
    /// Cache lines.
    pub lines: u32,
    /// Lines holding valid data.
    pub valid_lines: u32,
    /// Lines holding dirty data (not yet on core).
    pub dirty_lines: u32,
    /// True if the cache was detached cleanly.
    pub detached: bool,
    /// Inconsistencies; empty means clean.
    pub problems: Vec<Problem>,
}

impl FsckReport {
    /// True if no problem was found.
    pub fn is_clean(&self) -> bool {
        self.problems.is_empty()
    }
}

/// Checks the superblock (checksum, version, geometry, configuration, I/O classes) and every
/// line entry (checksum, core line in range, dirty within valid, sectors within the line, class
/// defined, no core line held twice). An unreadable superblock is an error; entry problems are
/// listed in the report.
pub async fn fsck(cache: &Arc<dyn BlockDevice>, core: &Arc<dyn BlockDevice>) -> Result<FsckReport> {
    let l = load(cache, core).await?;
    Ok(FsckReport {
        lines: l.geom.lines,
        valid_lines: line_u32(l.entries.iter().filter(|e| e.valid != 0).count()),
        dirty_lines: line_u32(l.entries.iter().filter(|e| e.dirty != 0).count()),
        detached: l.sb.state == crate::layout::SbState::Detached,
        problems: l.problems,
    })
}
