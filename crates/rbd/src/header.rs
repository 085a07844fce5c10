//! The image header: its size and object size, as stored in `rbd_header.NAME`. Layout (little
//! endian): magic `CRBD`, format version (u16, 1), object size as a power of two (u8), image
//! size in bytes (u64), crc32c of everything before it (u32).

/// Smallest object size (log2): 4 KiB.
pub const MIN_ORDER: u8 = 12;
/// Largest object size (log2): 32 MiB, the OSDs' default object limit.
pub const MAX_ORDER: u8 = 25;
/// Default object size (log2): 4 MiB, as RBD's.
pub const DEFAULT_ORDER: u8 = 22;
/// Largest image: 1 PiB (explicit limit: offsets and object indexes stay far from overflow).
pub const MAX_IMAGE_BYTES: u64 = 1 << 50;

const MAGIC: &[u8; 4] = b"CRBD";
const VERSION: u16 = 1;
const ENCODED_BYTES: usize = 4 + 2 + 1 + 8 + 4;

/// An image's geometry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// Image size in bytes.
    pub size: u64,
    /// Object size as a power of two.
    pub order: u8,
}

impl Header {
    /// A header after checking its bounds.
    pub fn new(size: u64, order: u8) -> Result<Header, String> {
        if !(MIN_ORDER..=MAX_ORDER).contains(&order) {
            return Err(format!(
                "object size 2^{order} is outside 2^{MIN_ORDER}..=2^{MAX_ORDER} bytes"
            ));
        }
        if size > MAX_IMAGE_BYTES {
            return Err(format!(
                "size {size} is past the {MAX_IMAGE_BYTES} bytes an image may have"
            ));
        }
        Ok(Header { size, order })
    }

    /// Bytes per data object.
    pub fn object_bytes(&self) -> u64 {
        1 << self.order
    }

    /// Data objects the image spans.
    pub fn objects(&self) -> u64 {
        self.size.div_ceil(self.object_bytes())
    }

    /// The header's stored form.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(ENCODED_BYTES);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.push(self.order);
        out.extend_from_slice(&self.size.to_le_bytes());
        let crc = crc_fast::crc32_iscsi(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        debug_assert_eq!(out.len(), ENCODED_BYTES);
        out
    }

    /// Decodes a stored header, checking its magic, version, checksum and bounds.
    pub fn decode(bytes: &[u8]) -> Result<Header, String> {
        if bytes.len() != ENCODED_BYTES {
            return Err(format!("{} bytes, not {ENCODED_BYTES}", bytes.len()));
        }
        let (body, crc) = bytes.split_at(ENCODED_BYTES - 4);
        let stored = u32::from_le_bytes(crc.try_into().map_err(|_| "short checksum")?);
        if crc_fast::crc32_iscsi(body) != stored {
            return Err("checksum mismatch".into());
        }
        if &body[..4] != MAGIC {
            return Err("not an image header".into());
        }
        let version = u16::from_le_bytes([body[4], body[5]]);
        if version != VERSION {
            return Err(format!(
                "format version {version}, this build reads {VERSION}"
            ));
        }
        let order = body[6];
        let size = u64::from_le_bytes(body[7..15].try_into().map_err(|_| "short size")?);
        Header::new(size, order)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_damage_and_bounds() {
        let h = Header::new(10 << 30, DEFAULT_ORDER).unwrap();
        assert_eq!(h.object_bytes(), 4 << 20);
        assert_eq!(h.objects(), 2560);
        let bytes = h.encode();
        assert_eq!(Header::decode(&bytes), Ok(h));
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x40;
            assert!(Header::decode(&bad).is_err(), "byte {i} flipped");
        }
        assert!(Header::decode(&bytes[..10]).is_err());
        assert!(Header::decode(&[]).is_err());
        assert!(Header::new(1, MIN_ORDER - 1).is_err());
        assert!(Header::new(1, MAX_ORDER + 1).is_err());
        assert!(Header::new(MAX_IMAGE_BYTES + 1, DEFAULT_ORDER).is_err());
        assert_eq!(Header::new(0, MIN_ORDER).unwrap().objects(), 0);
        assert_eq!(Header::new(4097, MIN_ORDER).unwrap().objects(), 2);
    }
}
