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
/// OSD -> OSD peering/recovery request ([`peer::PeerRequest`]).
pub const MSG_PEER_REQUEST: u16 = 0x0210;
/// Answer to a peering/recovery request ([`peer::PeerReply`]).
pub const MSG_PEER_REPLY: u16 = 0x0211;
/// OSD -> OSD heartbeat ([`peer::Ping`]).
pub const MSG_PING: u16 = 0x0212;
/// Heartbeat answer ([`peer::Ping`] echoed).
pub const MSG_PING_REPLY: u16 = 0x0213;
/// Largest JSON header accepted (explicit limit; a PG log travels in a header).
pub const MAX_HEADER_BYTES: usize = 4 << 20;

pub mod admin;
pub mod image;
pub mod op;
pub mod pairs;
pub mod peer;

pub use cairn_pg::ReqId;
pub use op::{OpHeader, OpKind, OpResult, RepOpHeader, ReplyHeader};

/// Encodes header + data.
pub fn encode<T: Serialize>(header: &T, data: &[u8]) -> Bytes {
    let json = serde_json::to_vec(header).unwrap_or_default();
    let mut out = BytesMut::with_capacity(4 + json.len() + data.len());
    out.put_u32_le(json.len() as u32);
    out.put_slice(&json);
    out.put_slice(data);
    out.freeze()
}

/// Decodes a message whose bulk data may travel as the frame's data segment (`data`, with the
/// crc32c `data_crc` the messenger verified): the header comes from `payload`, the data from
/// `data` when it is not empty and otherwise from what follows the header in `payload` (its
/// crc32c computed here). Data in both places is an error.
pub fn decode_with_data<T: for<'a> Deserialize<'a>>(
    payload: &Bytes,
    data: &Bytes,
    data_crc: u32,
) -> Result<(T, Bytes, u32), ProtoError> {
    let (header, inline) = decode(payload)?;
    match (inline.is_empty(), data.is_empty()) {
        (_, true) => {
            let crc = crc32c::crc32c(&inline);
            Ok((header, inline, crc))
        }
        (true, false) => Ok((header, data.clone(), data_crc)),
        (false, false) => Err(ProtoError(
            "data both after the header and in the data segment".into(),
        )),
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::peer::Ping;

    #[test]
    fn data_comes_from_the_segment_or_after_the_header_never_both() {
        let h = Ping {
            from: 3,
            epoch: 9,
            stamp_ms: 1,
        };
        let seg = Bytes::from_static(b"segment");
        let (back, data, crc) =
            decode_with_data::<Ping>(&encode(&h, &[]), &seg, crc32c::crc32c(&seg)).unwrap();
        assert_eq!((back.from, back.epoch), (3, 9));
        assert_eq!((data, crc), (seg.clone(), crc32c::crc32c(&seg)));
        let (_, data, crc) =
            decode_with_data::<Ping>(&encode(&h, b"inline"), &Bytes::new(), 0).unwrap();
        assert_eq!(
            (&data[..], crc),
            (&b"inline"[..], crc32c::crc32c(b"inline"))
        );
        assert!(decode_with_data::<Ping>(&encode(&h, b"inline"), &seg, 0).is_err());
        assert!(decode_with_data::<Ping>(&Bytes::from_static(b"\x09\0\0\0{"), &seg, 0).is_err());
    }
}
