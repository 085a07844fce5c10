//! Reused aligned buffers for received data segments.
//!
//! Owns the process-wide pool that large data segments are read into (aligned for direct I/O,
//! so a store can write them as they are) and its limits; the pooling itself is
//! [`cairn_blockdev::AlignedPool`]'s.

use std::sync::{Arc, OnceLock};

use cairn_blockdev::AlignedPool;

/// Alignment of the buffers that large data segments are read into (direct I/O's).
pub const DATA_ALIGN_BYTES: usize = 4096;
/// Most bytes of free buffers the process keeps for reuse.
pub const POOL_MAX_BYTES: usize = 64 << 20;

/// The process's pool of data-segment buffers, shared by every connection.
pub(crate) fn data_pool() -> &'static Arc<AlignedPool> {
    static POOL: OnceLock<Arc<AlignedPool>> = OnceLock::new();
    POOL.get_or_init(|| Arc::new(AlignedPool::new(POOL_MAX_BYTES, DATA_ALIGN_BYTES)))
}
