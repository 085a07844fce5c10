//! A request's data as the messenger delivered it, with the checksums it verified.
//!
//! Owns carrying the bytes, their crc32c and (for large data segments) the crc32c of each
//! 4 KiB block from the messenger to the store, so no layer reads the bytes again to checksum
//! them. It never checks anything itself: the messenger verified the bytes against the wire.

use bytes::Bytes;
use cairn_store::DataCrcs;

/// A request's data with its checksums.
#[derive(Debug, Clone)]
pub struct Payload {
    /// The bytes (shared with the received frame, not copied).
    pub bytes: Bytes,
    /// crc32c of `bytes`, as verified on arrival.
    pub crc: u32,
    /// crc32c of each block of `bytes`, when the messenger computed them on arrival.
    pub block_crcs: Option<DataCrcs>,
}
