//! OSD wire messages, shared by clients and OSDs. A message is a format byte
//! ([`HEADER_FORMAT`]), a little-endian u32 header length, the header in MessagePack (compact:
//! structs as arrays, by `rmp-serde`), then the raw data bytes (not encoded), inside a
//! checksummed messenger frame. This crate only defines and (de)codes messages; it never does
//! I/O.

// A narrowing cast in a byte format would silently write a wrong length: conversions here
// are checked (`try_from`), and this crate keeps them so.
#![deny(clippy::cast_possible_truncation)]
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
/// Largest header accepted (explicit limit; a PG log travels in a header).
pub const MAX_HEADER_BYTES: usize = 4 << 20;
/// First byte of every message: how its header is encoded. 1 is compact MessagePack; JSON
/// headers (before this byte existed) and any other format are refused with a clear error.
pub const HEADER_FORMAT: u8 = 1;
/// Bytes before the header: the format byte and the u32 header length.
const PREFIX_BYTES: usize = 5;

pub mod admin;
pub mod image;
pub mod mds;
pub mod mon;
pub mod op;
pub mod pairs;
pub mod peer;
pub mod registry;

pub use cairn_pg::ReqId;
pub use op::{OpHeader, OpKind, OpResult, RepOpHeader, ReplyHeader};

/// A length as the 32-bit field that precedes it on the wire. Every message travels in one
/// messenger frame, whose 32-bit size limit the sender checks, so a length past `u32::MAX` is
/// a bug: stopped here rather than written as a wrong length that would misframe the rest.
pub fn length_field(len: usize, what: &str) -> u32 {
    u32::try_from(len).unwrap_or_else(|_| panic!("{what} of {len} bytes cannot be framed"))
}

/// Encodes header + data. Every message type of this crate encodes (MessagePack has a form
/// for each of them), so an encoding failure is a bug: it yields a message with an empty
/// header, which the receiver refuses as malformed.
pub fn encode<T: Serialize>(header: &T, data: &[u8]) -> Bytes {
    let head = rmp_serde::to_vec(header).unwrap_or_default();
    let mut out = BytesMut::with_capacity(PREFIX_BYTES + head.len() + data.len());
    out.put_u8(HEADER_FORMAT);
    out.put_u32_le(length_field(head.len(), "message header"));
    out.put_slice(&head);
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
            let crc = crc_fast::crc32_iscsi(&inline);
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
    if payload.len() < PREFIX_BYTES {
        return Err(ProtoError("message shorter than its prefix".into()));
    }
    if payload[0] != HEADER_FORMAT {
        return Err(ProtoError(format!(
            "header format {} is not supported (this build speaks {HEADER_FORMAT})",
            payload[0]
        )));
    }
    let len = u32::from_le_bytes([payload[1], payload[2], payload[3], payload[4]]) as usize;
    if len > MAX_HEADER_BYTES || PREFIX_BYTES + len > payload.len() {
        return Err(ProtoError(format!("bad header length {len}")));
    }
    let end = PREFIX_BYTES + len;
    let header = rmp_serde::from_slice(&payload[PREFIX_BYTES..end])
        .map_err(|e| ProtoError(e.to_string()))?;
    Ok((header, payload.slice(end..)))
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
            decode_with_data::<Ping>(&encode(&h, &[]), &seg, crc_fast::crc32_iscsi(&seg)).unwrap();
        assert_eq!((back.from, back.epoch), (3, 9));
        assert_eq!((data, crc), (seg.clone(), crc_fast::crc32_iscsi(&seg)));
        let (_, data, crc) =
            decode_with_data::<Ping>(&encode(&h, b"inline"), &Bytes::new(), 0).unwrap();
        assert_eq!(
            (&data[..], crc),
            (&b"inline"[..], crc_fast::crc32_iscsi(b"inline"))
        );
        assert!(decode_with_data::<Ping>(&encode(&h, b"inline"), &seg, 0).is_err());
        assert!(
            decode_with_data::<Ping>(&Bytes::from_static(b"\x01\x09\0\0\0{"), &seg, 0).is_err()
        );
    }

    #[test]
    fn headers_round_trip_and_other_formats_are_refused_by_name() {
        let h = OpHeader {
            tid: 7,
            epoch: 3,
            pool: 1,
            pg_seed: 5,
            object: "obj".into(),
            kind: OpKind::Write { offset: 4096 },
            data_crc: 9,
            reqid: Some(ReqId {
                client: 11,
                seq: 12,
            }),
            assert_version: Some(3 << 32 | 4),
            background: false,
            client: 13,
            instance: 14,
            full_force: true,
        };
        let (back, data) = decode::<OpHeader>(&encode(&h, b"tail")).unwrap();
        assert_eq!((back, &data[..]), (h.clone(), &b"tail"[..]));
        let json = Bytes::from_static(b"\x02\0\0\0{}");
        let e = decode::<Ping>(&json).unwrap_err();
        assert!(e.0.contains("header format 2 is not supported"), "{e}");
        let mut wrong_type = encode(&h, &[]).to_vec();
        wrong_type.extend_from_slice(b"x");
        assert!(decode::<ReplyHeader>(&Bytes::from(wrong_type)).is_err());
    }

    #[test]
    fn a_pg_log_travels_whole_with_and_without_request_ids_and_dups() {
        use cairn_pg::log::{Eversion, LogEntry, OpKind as LogOp, PgLog};
        for max_entries in [2, 100] {
            let mut log = PgLog::new(max_entries);
            for v in 1..=5u64 {
                let entry = LogEntry {
                    version: Eversion::new(1, v),
                    object: format!("o{v}"),
                    op: LogOp::Modify,
                    prior: Eversion::default(),
                    reqid: (v % 2 == 0).then_some(ReqId { client: 3, seq: v }),
                };
                log.append(entry).unwrap();
            }
            let reply = peer::PeerReply {
                tid: 4,
                answer: Ok(peer::PeerAnswer::Info {
                    last_epoch_started: 2,
                    log: log.clone(),
                    missing: [("o9".to_string(), Some(Eversion::new(1, 9)))].into(),
                }),
            };
            let (back, _) = decode::<peer::PeerReply>(&encode(&reply, &[])).unwrap();
            assert_eq!(back, reply, "max_entries {max_entries}");
            let failed = peer::PeerReply {
                tid: 5,
                answer: Err("no such PG".into()),
            };
            assert_eq!(
                decode::<peer::PeerReply>(&encode(&failed, &[])).unwrap().0,
                failed
            );
        }
    }

    proptest::proptest! {
        #[test]
        fn decoding_garbage_never_panics(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..256)) {
            let mut framed = vec![HEADER_FORMAT];
            framed.extend_from_slice(&length_field(bytes.len(), "garbage").to_le_bytes());
            framed.extend_from_slice(&bytes);
            for payload in [Bytes::from(bytes), Bytes::from(framed)] {
                let _ = decode::<OpHeader>(&payload);
                let _ = decode::<RepOpHeader>(&payload);
                let _ = decode::<ReplyHeader>(&payload);
                let _ = decode::<peer::PeerRequest>(&payload);
            }
        }
    }
}
