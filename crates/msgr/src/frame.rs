//! The wire format of one frame, and its limits. Pure: encode to and decode from bytes.
//!
//! A frame carries two segments, each with its own crc32c (like Ceph's msgr2): the *payload*
//! (the message's header, small) and the *data* (bulk bytes, often empty). The data segment's
//! checksum is the end-to-end checksum of the bytes: the receiver verifies it once and hands it
//! up with the frame, and a sender forwarding data it received (a primary OSD replicating a
//! write) reuses it instead of computing it again. The writer sends a large data segment
//! straight from its buffer, never copying it into the frame.
//!
//! Layout (all little-endian):
//!
//! | bytes | field |
//! |---|---|
//! | 4 | magic `0x4352_4e31` ("CRN1") |
//! | 1 | protocol version |
//! | 1 | flags |
//! | 2 | message type (opaque to the messenger) |
//! | 8 | sequence number (per session and direction; 0 = unsequenced) |
//! | 8 | acknowledgement: highest sequence number received from the peer |
//! | 4 | payload length |
//! | 4 | data length |
//! | 4 | crc32c of the 32 bytes above |
//! | n | payload |
//! | 4 | crc32c of the payload |
//! | m | data |
//! | 4 | crc32c of the data |
//!
//! It must never allocate more than the configured maximum for a frame it has not verified.

// A narrowing cast in a byte format would silently write a wrong length: conversions here
// are checked (`try_from`).
#![deny(clippy::cast_possible_truncation)]

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::error::MsgrError;
use std::sync::Arc;

/// Frame magic, "CRN1" read as a little-endian u32.
pub const MAGIC: u32 = 0x314e_5243;
/// The protocol version this build speaks (2: payload and data segments).
pub const PROTOCOL_VERSION: u8 = 2;
/// Bytes before the payload.
pub const HEADER_BYTES: usize = 36;
/// Checksum bytes after each segment.
pub const SEGMENT_CRC_BYTES: usize = 4;

/// Explicit limits of a messenger endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest payload plus data accepted or sent in one frame.
    pub max_payload_bytes: u32,
    /// Most payload and data bytes sent but not yet acknowledged per connection (backpressure).
    pub max_inflight_bytes: u64,
    /// Most frames queued for sending per connection.
    pub max_queued_frames: usize,
    /// Most bytes one vectored write hands the socket before the writer lets the runtime's
    /// other tasks run (0: no bound). An OSD (one runtime worker) bounds it on the sessions it
    /// accepts, so that copying one 4 MiB reply into the socket does not hold up its other
    /// requests' device reads and completions meanwhile. Unbounded elsewhere: from a client's
    /// two-worker runtime, 4 MiB requests in 512 KiB turns moved ~4.4 GB/s where whole writes
    /// moved ~6.3 (`cairn msgr bench 4 write -b 4194304 -t 16`). See [`Limits::single_worker`].
    pub write_turn_bytes: usize,
    /// A connection from which no frame has arrived for this long is closed (0: never), so a
    /// peer that vanished without closing (a host gone, a frozen process) holds nothing for
    /// ever. Each end sends a keepalive after a quarter of it without sending anything, so
    /// an idle but live peer is never taken for a dead one.
    pub idle_timeout_ms: u64,
    /// A connection on which frames sent have waited this long for the peer's acknowledgement,
    /// with no acknowledgement arriving meanwhile, is closed and made again (0: never), and
    /// what the peer had not acknowledged goes again on the new one. A stream that stalls in
    /// one direction while the other still carries keepalives (a stateful firewall or NAT
    /// that forgot the connection, a path that lost it) is otherwise only noticed at the idle
    /// timeout, and its requests wait for that long.
    pub ack_timeout_ms: u64,
    /// Most connections a listener holds open at once, handshakes included; one more is
    /// closed at once (its dialer retries), so a flood of connections cannot exhaust a
    /// daemon's sockets and memory.
    pub max_connections: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_payload_bytes: 64 << 20,
            max_inflight_bytes: 256 << 20,
            max_queued_frames: 4096,
            write_turn_bytes: 0,
            idle_timeout_ms: DEFAULT_IDLE_TIMEOUT_MS,
            ack_timeout_ms: DEFAULT_ACK_TIMEOUT_MS,
            max_connections: DEFAULT_MAX_CONNECTIONS,
        }
    }
}

/// [`Limits::idle_timeout_ms`] by default: a minute, three times Ceph's heartbeat grace, so a
/// process frozen for less (a debugger, a thrash test's SIGSTOP) keeps its connections.
pub const DEFAULT_IDLE_TIMEOUT_MS: u64 = 60_000;

/// [`Limits::ack_timeout_ms`] by default: 15 s, far above the acknowledgement delay of a
/// live peer (milliseconds) and a frame's transfer on a slow link, and a fraction of a
/// client's 30 s operation deadline, so a request caught on a stalled stream goes again in
/// time.
pub const DEFAULT_ACK_TIMEOUT_MS: u64 = 15_000;

/// [`Limits::max_connections`] by default: room for thousands of clients, far below the
/// process's file limit on any host that serves them.
pub const DEFAULT_MAX_CONNECTIONS: usize = 8192;

/// [`Limits::write_turn_bytes`] of [`Limits::single_worker`]: on one OSD serving 4 MiB reads
/// at 16 in flight (docs/results/2026-11-25-one-osd-4mib-read-gap.md), 512 KiB turns moved ~2.6-2.9 GB/s, 128 KiB, 256 KiB and
/// 1 MiB ones ~2.0, ~2.4-2.5 and ~2.3-2.4, whole writes ~1.8-1.9.
pub const SINGLE_WORKER_WRITE_TURN_BYTES: usize = 512 << 10;

impl Limits {
    /// The defaults, with writes handed to the socket in turns of
    /// [`SINGLE_WORKER_WRITE_TURN_BYTES`]: for the sessions a daemon whose runtime has one
    /// worker accepts.
    pub fn single_worker() -> Self {
        Limits {
            write_turn_bytes: SINGLE_WORKER_WRITE_TURN_BYTES,
            ..Limits::default()
        }
    }
}

/// The fixed part of a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameHeader {
    /// Flags (reserved, 0).
    pub flags: u8,
    /// Message type, meaningful to the layer above.
    pub msg_type: u16,
    /// Sequence number in its session direction (0 for unsequenced control frames).
    pub seq: u64,
    /// Highest sequence number received from the peer so far.
    pub ack: u64,
}

/// A checked frame header with its segment lengths, before the segments have arrived.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WireHeader {
    /// Header fields.
    pub header: FrameHeader,
    /// Payload bytes that follow.
    pub payload_len: usize,
    /// Data bytes after the payload and its checksum.
    pub data_len: usize,
}

/// One message: header fields, a payload and a data segment with its crc32c. Two frames are
/// equal when their header, payload and data are (block checksums are derived, not compared).
#[derive(Clone, Debug)]
pub struct Frame {
    /// Header fields.
    pub header: FrameHeader,
    /// Payload bytes (the message's own header).
    pub payload: Bytes,
    /// Data bytes (bulk data, possibly empty).
    data: Bytes,
    /// crc32c of `data`: computed when the frame was built, or verified when it was decoded.
    data_crc: u32,
    /// crc32c of each [`crate::blockcrc::CRC_BLOCK_BYTES`] block of `data`, when the reader computed them on
    /// arrival (large data segments): a store can keep them instead of reading the bytes again.
    data_block_crcs: Option<Arc<[u32]>>,
}

impl PartialEq for Frame {
    fn eq(&self, other: &Self) -> bool {
        self.header == other.header
            && self.payload == other.payload
            && self.data == other.data
            && self.data_crc == other.data_crc
    }
}

impl Eq for Frame {}

impl Frame {
    /// A frame of `msg_type` carrying `payload` and no data, unsequenced.
    pub fn new(msg_type: u16, payload: impl Into<Bytes>) -> Self {
        Self::with_data(msg_type, payload, Bytes::new())
    }

    /// A frame of `msg_type` carrying `payload` and `data` (whose crc32c is computed here).
    pub fn with_data(msg_type: u16, payload: impl Into<Bytes>, data: Bytes) -> Self {
        let crc = crc_fast::crc32_iscsi(&data);
        Self::with_checked_data(msg_type, payload, data, crc)
    }

    /// Like [`Frame::with_data`] with the data's crc32c already known (computed by the caller
    /// for its own use, or verified when the data arrived in another frame): the data is not
    /// read again. A wrong `data_crc` makes the receiver reject the frame; it never passes
    /// corrupt data.
    pub fn with_checked_data(
        msg_type: u16,
        payload: impl Into<Bytes>,
        data: Bytes,
        data_crc: u32,
    ) -> Self {
        Frame {
            header: FrameHeader {
                flags: 0,
                msg_type,
                seq: 0,
                ack: 0,
            },
            payload: payload.into(),
            data,
            data_crc,
            data_block_crcs: None,
        }
    }

    /// The data segment.
    pub fn data(&self) -> &Bytes {
        &self.data
    }

    /// The data segment's crc32c (verified against the bytes when the frame was decoded).
    pub fn data_crc(&self) -> u32 {
        self.data_crc
    }

    /// crc32c of each [`crate::blockcrc::CRC_BLOCK_BYTES`] block of the data segment (the last one may be
    /// short), when they were computed as it arrived; they were part of the segment's check.
    pub fn data_block_crcs(&self) -> Option<&Arc<[u32]>> {
        self.data_block_crcs.as_ref()
    }

    /// Payload plus data bytes: what the size limit and the in-flight window count.
    pub fn body_len(&self) -> u64 {
        self.payload.len() as u64 + self.data.len() as u64
    }

    /// Bytes on the wire.
    pub fn wire_len(&self) -> usize {
        HEADER_BYTES + self.payload.len() + self.data.len() + 2 * SEGMENT_CRC_BYTES
    }

    fn check_size(&self, limits: &Limits) -> Result<(), MsgrError> {
        let len = self.body_len();
        if len > u64::from(limits.max_payload_bytes) {
            return Err(MsgrError::TooLarge {
                len_bytes: len,
                limit_bytes: u64::from(limits.max_payload_bytes),
            });
        }
        Ok(())
    }

    /// Appends everything up to the data segment (header, payload, payload crc32c) to `out`;
    /// the caller sends [`Frame::data`] and then the data's crc32c (little-endian) after it.
    pub fn encode_head(&self, limits: &Limits, out: &mut BytesMut) -> Result<(), MsgrError> {
        self.check_size(limits)?;
        out.reserve(HEADER_BYTES + self.payload.len() + SEGMENT_CRC_BYTES);
        let start = out.len();
        out.put_u32_le(MAGIC);
        out.put_u8(PROTOCOL_VERSION);
        out.put_u8(self.header.flags);
        out.put_u16_le(self.header.msg_type);
        out.put_u64_le(self.header.seq);
        out.put_u64_le(self.header.ack);
        out.put_u32_le(len_field(self.payload.len(), "payload"));
        out.put_u32_le(len_field(self.data.len(), "data segment"));
        let crc = crc_fast::crc32_iscsi(&out[start..start + HEADER_BYTES - 4]);
        out.put_u32_le(crc);
        out.put_slice(&self.payload);
        out.put_u32_le(crc_fast::crc32_iscsi(&self.payload));
        Ok(())
    }

    /// Appends the whole encoded frame to `out` (copying the data segment).
    pub fn encode(&self, limits: &Limits, out: &mut BytesMut) -> Result<(), MsgrError> {
        self.encode_head(limits, out)?;
        out.reserve(self.data.len() + SEGMENT_CRC_BYTES);
        out.put_slice(&self.data);
        out.put_u32_le(self.data_crc);
        Ok(())
    }

    /// The header at the front of `buf` once all of it has arrived (`Ok(None)` before), checked:
    /// magic (as soon as 4 bytes are there), header checksum, version and size limit. Consumes
    /// nothing.
    pub fn peek_header(buf: &[u8], limits: &Limits) -> Result<Option<WireHeader>, MsgrError> {
        if buf.len() < HEADER_BYTES {
            // Reject garbage as early as the magic is readable.
            if buf.len() >= 4 {
                let magic = u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]);
                if magic != MAGIC {
                    return Err(MsgrError::BadMagic { found: magic });
                }
            }
            return Ok(None);
        }
        let mut h = &buf[..HEADER_BYTES];
        let magic = h.get_u32_le();
        if magic != MAGIC {
            return Err(MsgrError::BadMagic { found: magic });
        }
        let version = h.get_u8();
        let flags = h.get_u8();
        let msg_type = h.get_u16_le();
        let seq = h.get_u64_le();
        let ack = h.get_u64_le();
        let payload_len = h.get_u32_le();
        let data_len = h.get_u32_le();
        let crc = h.get_u32_le();
        if crc_fast::crc32_iscsi(&buf[..HEADER_BYTES - 4]) != crc {
            return Err(MsgrError::HeaderChecksum);
        }
        if version != PROTOCOL_VERSION {
            return Err(MsgrError::UnsupportedVersion {
                found: version,
                supported: PROTOCOL_VERSION,
            });
        }
        let body = u64::from(payload_len) + u64::from(data_len);
        if body > u64::from(limits.max_payload_bytes) {
            return Err(MsgrError::TooLarge {
                len_bytes: body,
                limit_bytes: u64::from(limits.max_payload_bytes),
            });
        }
        Ok(Some(WireHeader {
            header: FrameHeader {
                flags,
                msg_type,
                seq,
                ack,
            },
            payload_len: payload_len as usize,
            data_len: data_len as usize,
        }))
    }

    /// A frame from its decoded parts; `data_crc` must be the crc32c of `data` (the reader
    /// checked it against the wire) and `data_block_crcs`, when given, those of its blocks.
    pub(crate) fn from_wire(
        header: FrameHeader,
        payload: Bytes,
        data: Bytes,
        data_crc: u32,
        data_block_crcs: Option<Arc<[u32]>>,
    ) -> Frame {
        Frame {
            header,
            payload,
            data,
            data_crc,
            data_block_crcs,
        }
    }

    /// Decodes one frame from the front of `buf` if it is complete; `Ok(None)` asks for more
    /// bytes. Checks magic, version, header checksum and the size limit before waiting for (or
    /// allocating) the segments, then each segment's checksum.
    pub fn decode(buf: &mut BytesMut, limits: &Limits) -> Result<Option<Frame>, MsgrError> {
        let Some(WireHeader {
            header,
            payload_len,
            data_len,
        }) = Self::peek_header(buf, limits)?
        else {
            return Ok(None);
        };
        let seq = header.seq;
        let total = HEADER_BYTES + payload_len + data_len + 2 * SEGMENT_CRC_BYTES;
        if buf.len() < total {
            crate::conn::reserve_as_bytes_arrive(buf, total);
            return Ok(None);
        }
        let mut frame = buf.split_to(total);
        frame.advance(HEADER_BYTES);
        let payload = frame.split_to(payload_len).freeze();
        if crc_fast::crc32_iscsi(&payload) != frame.get_u32_le() {
            return Err(MsgrError::PayloadChecksum { seq });
        }
        let data = frame.split_to(data_len).freeze();
        let data_crc = crc_fast::crc32_iscsi(&data);
        if data_crc != frame.get_u32_le() {
            return Err(MsgrError::PayloadChecksum { seq });
        }
        Ok(Some(Frame {
            header,
            payload,
            data,
            data_crc,
            data_block_crcs: None,
        }))
    }
}

/// A segment's length as its 32-bit header field. Only frames that passed `check_size` are
/// encoded (payload and data together within the 32-bit `max_payload_bytes`), so a length
/// that does not fit is a bug, stopped here rather than written as a wrong length.
fn len_field(len: usize, segment: &str) -> u32 {
    u32::try_from(len).unwrap_or_else(|_| panic!("{segment} of {len} bytes passed the size check"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded(frame: &Frame) -> BytesMut {
        let mut b = BytesMut::new();
        frame.encode(&Limits::default(), &mut b).unwrap();
        b
    }

    #[test]
    fn a_header_announcing_a_large_frame_reserves_only_as_bytes_arrive() {
        let big = Frame::new(1, vec![7u8; 8 << 20]);
        let bytes = encoded(&big);
        let mut partial = BytesMut::from(&bytes[..HEADER_BYTES + 100]);
        assert!(Frame::decode(&mut partial, &Limits::default())
            .unwrap()
            .is_none());
        assert!(
            partial.capacity() < 1 << 20,
            "{} bytes reserved for {} received",
            partial.capacity(),
            partial.len()
        );
        let mut all = BytesMut::new();
        for piece in bytes.chunks(64 << 10) {
            all.extend_from_slice(piece);
            if let Some(f) = Frame::decode(&mut all, &Limits::default()).unwrap() {
                assert_eq!(f, big);
                return;
            }
        }
        panic!("the whole frame never decoded");
    }

    #[test]
    fn round_trip_and_partial_input() {
        let mut f = Frame::new(7, &b"hello"[..]);
        f.header.seq = 42;
        f.header.ack = 41;
        let bytes = encoded(&f);
        assert_eq!(bytes.len(), f.wire_len());
        for cut in 0..bytes.len() {
            let mut partial = BytesMut::from(&bytes[..cut]);
            assert!(Frame::decode(&mut partial, &Limits::default())
                .unwrap()
                .is_none());
        }
        let mut all = bytes.clone();
        all.extend_from_slice(&bytes);
        assert_eq!(
            Frame::decode(&mut all, &Limits::default())
                .unwrap()
                .unwrap(),
            f
        );
        assert_eq!(
            Frame::decode(&mut all, &Limits::default())
                .unwrap()
                .unwrap(),
            f
        );
        assert!(all.is_empty());
    }

    #[test]
    fn data_segments_round_trip_and_carry_their_checksum() {
        let data = Bytes::from(vec![7u8; 5000]);
        let mut f = Frame::with_data(3, &b"head"[..], data.clone());
        f.header.seq = 9;
        assert_eq!(f.data_crc(), crc_fast::crc32_iscsi(&data));
        let bytes = encoded(&f);
        assert_eq!(bytes.len(), f.wire_len());
        let mut split = BytesMut::new();
        f.encode_head(&Limits::default(), &mut split).unwrap();
        split.extend_from_slice(f.data());
        split.extend_from_slice(&f.data_crc().to_le_bytes());
        assert_eq!(split, bytes, "head + data + crc is the whole frame");
        for cut in [0, HEADER_BYTES, HEADER_BYTES + 6, bytes.len() - 1] {
            let mut partial = BytesMut::from(&bytes[..cut]);
            assert!(Frame::decode(&mut partial, &Limits::default())
                .unwrap()
                .is_none());
        }
        let mut all = bytes.clone();
        let back = Frame::decode(&mut all, &Limits::default())
            .unwrap()
            .unwrap();
        assert_eq!(back, f);
        assert_eq!(back.data(), &data);
        assert_eq!(back.data_crc(), crc_fast::crc32_iscsi(&data));
        let mut bad_data = bytes.clone();
        bad_data[HEADER_BYTES + 4 + 4 + 100] ^= 1;
        assert!(matches!(
            Frame::decode(&mut bad_data, &Limits::default()),
            Err(MsgrError::PayloadChecksum { seq: 9 })
        ));
    }

    #[test]
    fn a_wrong_caller_supplied_data_checksum_is_rejected_by_the_receiver() {
        let data = Bytes::from_static(b"forwarded bytes");
        let f = Frame::with_checked_data(
            3,
            Bytes::new(),
            data.clone(),
            crc_fast::crc32_iscsi(&data) ^ 1,
        );
        let mut bytes = encoded(&f);
        assert!(matches!(
            Frame::decode(&mut bytes, &Limits::default()),
            Err(MsgrError::PayloadChecksum { .. })
        ));
        let small = Limits {
            max_payload_bytes: 16,
            ..Limits::default()
        };
        let two = Frame::with_data(3, vec![0u8; 10], Bytes::from(vec![0u8; 10]));
        assert!(
            two.encode(&small, &mut BytesMut::new()).is_err(),
            "payload and data count together against the limit"
        );
    }

    #[test]
    fn corruption_is_detected_and_typed() {
        let bytes = encoded(&Frame::new(1, vec![9u8; 100]));
        let mut bad_magic = bytes.clone();
        bad_magic[0] ^= 1;
        assert!(matches!(
            Frame::decode(&mut bad_magic, &Limits::default()),
            Err(MsgrError::BadMagic { .. })
        ));
        let mut bad_header = bytes.clone();
        bad_header[10] ^= 1;
        assert!(matches!(
            Frame::decode(&mut bad_header, &Limits::default()),
            Err(MsgrError::HeaderChecksum)
        ));
        let mut bad_payload = bytes.clone();
        bad_payload[HEADER_BYTES + 5] ^= 1;
        assert!(matches!(
            Frame::decode(&mut bad_payload, &Limits::default()),
            Err(MsgrError::PayloadChecksum { .. })
        ));
    }

    #[test]
    fn wrong_version_and_oversize_are_rejected_before_the_payload_arrives() {
        let mut bytes = encoded(&Frame::new(1, vec![0u8; 10]));
        bytes[4] = PROTOCOL_VERSION + 1;
        let crc = crc_fast::crc32_iscsi(&bytes[..HEADER_BYTES - 4]);
        bytes[HEADER_BYTES - 4..HEADER_BYTES].copy_from_slice(&crc.to_le_bytes());
        let mut header_only = BytesMut::from(&bytes[..HEADER_BYTES]);
        assert!(matches!(
            Frame::decode(&mut header_only, &Limits::default()),
            Err(MsgrError::UnsupportedVersion { found: 3, .. })
        ));
        let small = Limits {
            max_payload_bytes: 4,
            ..Limits::default()
        };
        let mut header_only =
            BytesMut::from(&encoded(&Frame::new(1, vec![0u8; 10]))[..HEADER_BYTES]);
        assert!(matches!(
            Frame::decode(&mut header_only, &small),
            Err(MsgrError::TooLarge { len_bytes: 10, .. })
        ));
        let mut out = BytesMut::new();
        assert!(Frame::new(1, vec![0u8; 10])
            .encode(&small, &mut out)
            .is_err());
    }
}
