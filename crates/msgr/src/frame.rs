//! The wire format of one frame, and its limits. Pure: encode to and decode from bytes.
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
//! | 4 | crc32c of the 28 bytes above |
//! | n | payload |
//! | 4 | crc32c of the payload |
//!
//! It must never allocate more than the configured maximum for a frame it has not verified.

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::error::MsgrError;

/// Frame magic, "CRN1" read as a little-endian u32.
pub const MAGIC: u32 = 0x314e_5243;
/// The protocol version this build speaks.
pub const PROTOCOL_VERSION: u8 = 1;
/// Bytes before the payload.
pub const HEADER_BYTES: usize = 32;
/// Bytes after the payload.
pub const TRAILER_BYTES: usize = 4;

/// Explicit limits of a messenger endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest payload accepted or sent.
    pub max_payload_bytes: u32,
    /// Most payload bytes sent but not yet acknowledged per connection (backpressure).
    pub max_inflight_bytes: u64,
    /// Most frames queued for sending per connection.
    pub max_queued_frames: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_payload_bytes: 64 << 20,
            max_inflight_bytes: 256 << 20,
            max_queued_frames: 4096,
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

/// One message: header fields plus an opaque payload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    /// Header fields.
    pub header: FrameHeader,
    /// Payload bytes.
    pub payload: Bytes,
}

impl Frame {
    /// A frame of `msg_type` carrying `payload`, unsequenced.
    pub fn new(msg_type: u16, payload: impl Into<Bytes>) -> Self {
        Frame {
            header: FrameHeader {
                flags: 0,
                msg_type,
                seq: 0,
                ack: 0,
            },
            payload: payload.into(),
        }
    }

    /// Bytes on the wire.
    pub fn wire_len(&self) -> usize {
        HEADER_BYTES + self.payload.len() + TRAILER_BYTES
    }

    /// Appends the encoded frame to `out`.
    pub fn encode(&self, limits: &Limits, out: &mut BytesMut) -> Result<(), MsgrError> {
        let len = self.payload.len() as u64;
        if len > u64::from(limits.max_payload_bytes) {
            return Err(MsgrError::TooLarge {
                len_bytes: len,
                limit_bytes: u64::from(limits.max_payload_bytes),
            });
        }
        out.reserve(self.wire_len());
        let start = out.len();
        out.put_u32_le(MAGIC);
        out.put_u8(PROTOCOL_VERSION);
        out.put_u8(self.header.flags);
        out.put_u16_le(self.header.msg_type);
        out.put_u64_le(self.header.seq);
        out.put_u64_le(self.header.ack);
        out.put_u32_le(len as u32);
        let crc = crc32c::crc32c(&out[start..start + HEADER_BYTES - 4]);
        out.put_u32_le(crc);
        out.put_slice(&self.payload);
        out.put_u32_le(crc32c::crc32c(&self.payload));
        Ok(())
    }

    /// Decodes one frame from the front of `buf` if it is complete; `Ok(None)` asks for more
    /// bytes. Checks magic, version, header checksum and the size limit before waiting for (or
    /// allocating) the payload, then the payload checksum.
    pub fn decode(buf: &mut BytesMut, limits: &Limits) -> Result<Option<Frame>, MsgrError> {
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
        let len = h.get_u32_le();
        let crc = h.get_u32_le();
        if crc32c::crc32c(&buf[..HEADER_BYTES - 4]) != crc {
            return Err(MsgrError::HeaderChecksum);
        }
        if version != PROTOCOL_VERSION {
            return Err(MsgrError::UnsupportedVersion {
                found: version,
                supported: PROTOCOL_VERSION,
            });
        }
        if len > limits.max_payload_bytes {
            return Err(MsgrError::TooLarge {
                len_bytes: u64::from(len),
                limit_bytes: u64::from(limits.max_payload_bytes),
            });
        }
        let total = HEADER_BYTES + len as usize + TRAILER_BYTES;
        if buf.len() < total {
            buf.reserve(total - buf.len());
            return Ok(None);
        }
        let mut frame = buf.split_to(total);
        frame.advance(HEADER_BYTES);
        let payload = frame.split_to(len as usize).freeze();
        let payload_crc = frame.get_u32_le();
        if crc32c::crc32c(&payload) != payload_crc {
            return Err(MsgrError::PayloadChecksum { seq });
        }
        Ok(Some(Frame {
            header: FrameHeader {
                flags,
                msg_type,
                seq,
                ack,
            },
            payload,
        }))
    }
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
        let crc = crc32c::crc32c(&bytes[..HEADER_BYTES - 4]);
        bytes[HEADER_BYTES - 4..HEADER_BYTES].copy_from_slice(&crc.to_le_bytes());
        let mut header_only = BytesMut::from(&bytes[..HEADER_BYTES]);
        assert!(matches!(
            Frame::decode(&mut header_only, &Limits::default()),
            Err(MsgrError::UnsupportedVersion { found: 2, .. })
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
