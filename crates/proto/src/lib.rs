//! OSD wire messages, shared by clients and OSDs. A message is a little-endian u32 header
//! length, a JSON header, then the raw data bytes (not encoded), inside a checksummed messenger
//! frame. This crate only defines and (de)codes messages; it never does I/O.
#![warn(missing_docs)]

use bytes::{BufMut, Bytes, BytesMut};
use serde::{Deserialize, Serialize};

use thiserror::Error;

/// A message that cannot be decoded.
#[derive(Debug, Error, PartialEq, Eq)]
#[error("malformed message: {0}")]
pub struct ProtoError(pub String);

/// Client -> primary operation.
pub const MSG_OSD_OP: u16 = 0x0200;
/// Primary -> client reply.
pub const MSG_OSD_OP_REPLY: u16 = 0x0201;
/// Primary -> replica write.
pub const MSG_OSD_REPOP: u16 = 0x0202;
/// Replica -> primary acknowledgement.
pub const MSG_OSD_REPOP_REPLY: u16 = 0x0203;
/// Largest header accepted (explicit limit).
pub const MAX_HEADER_BYTES: usize = 64 << 10;

/// What an operation does.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum OpKind {
    /// Replace the object's content with the data.
    WriteFull,
    /// Read `len` bytes at `offset` (0, u64::MAX = whole object).
    Read {
        /// Offset.
        offset: u64,
        /// Length.
        len: u64,
    },
    /// Size and version.
    Stat,
    /// Delete the object.
    Remove,
}

/// Header of an operation (client op or replica op).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpHeader {
    /// Request id chosen by the sender, echoed in the reply.
    pub tid: u64,
    /// Sender's map epoch.
    pub epoch: u64,
    /// Pool id.
    pub pool: i64,
    /// PG seed within the pool.
    pub pg_seed: u32,
    /// Object name.
    pub object: String,
    /// The operation.
    pub kind: OpKind,
    /// Version assigned by the primary (replica ops only).
    pub version: u64,
    /// crc32c of the data, checked on receipt.
    pub data_crc: u32,
}

/// Result codes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum OpResult {
    /// Done.
    Ok,
    /// This OSD is not the primary in its map; retry with a newer map.
    NotPrimary,
    /// No such pool or object.
    NotFound,
    /// The operation failed (replica unreachable, store error); safe to retry.
    Failed(String),
}

/// Header of a reply.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplyHeader {
    /// The request's id.
    pub tid: u64,
    /// Responder's map epoch.
    pub epoch: u64,
    /// Outcome.
    pub result: OpResult,
    /// Object size (stat, read).
    pub size: u64,
    /// Object version.
    pub version: u64,
    /// crc32c of the data.
    pub data_crc: u32,
}

/// Encodes header + data.
pub fn encode<T: Serialize>(header: &T, data: &[u8]) -> Bytes {
    let json = serde_json::to_vec(header).unwrap_or_default();
    let mut out = BytesMut::with_capacity(4 + json.len() + data.len());
    out.put_u32_le(json.len() as u32);
    out.put_slice(&json);
    out.put_slice(data);
    out.freeze()
}

/// Decodes header + data (the data is a zero-copy slice of `payload`).
pub fn decode<T: for<'a> Deserialize<'a>>(payload: &Bytes) -> Result<(T, Bytes), ProtoError> {
    if payload.len() < 4 {
        return Err(ProtoError("message shorter than its length prefix".into()));
    }
    let len = u32::from_le_bytes([payload[0], payload[1], payload[2], payload[3]]) as usize;
    if len > MAX_HEADER_BYTES || 4 + len > payload.len() {
        return Err(ProtoError(format!("bad header length {len}")));
    }
    let header =
        serde_json::from_slice(&payload[4..4 + len]).map_err(|e| ProtoError(e.to_string()))?;
    Ok((header, payload.slice(4 + len..)))
}
