//! The image header, as stored in `rbd_header.NAME`: its geometry (size, object size), its
//! snapshots and, for a clone, its parent. Layout: magic `CRBD`, format version (u16, little
//! endian), body length (u32), the body (MessagePack), crc32c of everything before it (u32).
//! Format 1 (geometry only, a fixed 19 bytes) is still read.

use serde::{Deserialize, Serialize};

/// Smallest object size (log2): 4 KiB.
pub const MIN_ORDER: u8 = 12;
/// Largest object size (log2): 32 MiB, the OSDs' default object limit.
pub const MAX_ORDER: u8 = 25;
/// Default object size (log2): 4 MiB, as RBD's.
pub const DEFAULT_ORDER: u8 = 22;
/// Largest image: 1 PiB (explicit limit: offsets and object indexes stay far from overflow).
pub const MAX_IMAGE_BYTES: u64 = 1 << 50;
/// Most snapshots one image keeps (RBD's default limit is 510; every write after a snapshot
/// probes the clone names of the snapshots above the one read, so fewer is kinder).
pub const MAX_SNAPSHOTS: usize = 256;
/// Largest stored header (names of 96 bytes for every snapshot fit far below it).
pub const MAX_HEADER_BYTES: usize = 64 << 10;

const MAGIC: &[u8; 4] = b"CRBD";
const VERSION: u16 = 2;
const V1_BYTES: usize = 4 + 2 + 1 + 8 + 4;

/// A snapshot: a point-in-time view of the image, read through its clones of data objects.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    /// Its id: the image's `snap_seq` when it was taken (ids only grow).
    pub id: u64,
    /// Its name, unique within the image.
    pub name: String,
    /// The image's size when it was taken.
    pub size: u64,
    /// Being removed: no longer readable, its clones still being handed down or deleted.
    pub removing: bool,
    /// In a clone: bytes of the image that read through to the parent when it was taken (a
    /// later shrink of the image shrinks only the head's overlap). None in a header written
    /// without it, or where the image had no parent.
    #[serde(default)]
    pub parent_overlap: Option<u64>,
}

/// The snapshot a clone reads what it has not written from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Parent {
    /// The parent image's pool.
    pub pool: String,
    /// The parent image.
    pub image: String,
    /// The parent's snapshot id.
    pub snap: u64,
    /// Bytes of the image that may still read through to the parent (shrinks with the image,
    /// never grows back).
    pub overlap: u64,
}

/// An image's header.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Header {
    /// Image size in bytes.
    pub size: u64,
    /// Object size as a power of two.
    pub order: u8,
    /// The newest snapshot id given (0: none ever): a data object written at a newer
    /// sequence than it last was is first copied for the snapshots that still see it.
    pub snap_seq: u64,
    /// Snapshots, oldest first.
    pub snaps: Vec<Snapshot>,
    /// For a clone: its parent snapshot.
    pub parent: Option<Parent>,
}

impl Header {
    /// A header without snapshots or parent, after checking its bounds.
    pub fn new(size: u64, order: u8) -> Result<Header, String> {
        let h = Header {
            size,
            order,
            snap_seq: 0,
            snaps: Vec::new(),
            parent: None,
        };
        h.check()?;
        Ok(h)
    }

    /// Checks every bound and invariant: geometry, snapshot count, names, ids rising and
    /// at most `snap_seq`, the parent's overlap within the size.
    pub fn check(&self) -> Result<(), String> {
        if !(MIN_ORDER..=MAX_ORDER).contains(&self.order) {
            return Err(format!(
                "object size 2^{} is outside 2^{MIN_ORDER}..=2^{MAX_ORDER} bytes",
                self.order
            ));
        }
        if self.size > MAX_IMAGE_BYTES {
            return Err(format!(
                "size {} is past the {MAX_IMAGE_BYTES} bytes an image may have",
                self.size
            ));
        }
        if self.snaps.len() > MAX_SNAPSHOTS {
            return Err(format!(
                "{} snapshots, past the {MAX_SNAPSHOTS} an image may keep",
                self.snaps.len()
            ));
        }
        let mut last = 0;
        for s in &self.snaps {
            if s.id <= last || s.id > self.snap_seq {
                return Err(format!("snapshot id {} out of order", s.id));
            }
            if s.size > MAX_IMAGE_BYTES {
                return Err(format!("snapshot {} of {} bytes", s.name, s.size));
            }
            if s.parent_overlap.is_some_and(|o| o > s.size) {
                return Err(format!(
                    "snapshot {}'s parent overlap past its size",
                    s.name
                ));
            }
            crate::image::check_name(&s.name).map_err(|e| e.to_string())?;
            last = s.id;
        }
        for (i, s) in self.snaps.iter().enumerate() {
            if self.snaps[..i].iter().any(|o| o.name == s.name) {
                return Err(format!("two snapshots named {}", s.name));
            }
        }
        if let Some(p) = &self.parent {
            if p.overlap > self.size {
                return Err(format!(
                    "parent overlap of {} bytes, past the image's {}",
                    p.overlap, self.size
                ));
            }
        }
        Ok(())
    }

    /// Bytes per data object.
    pub fn object_bytes(&self) -> u64 {
        1 << self.order
    }

    /// Data objects the image spans.
    pub fn objects(&self) -> u64 {
        self.size.div_ceil(self.object_bytes())
    }

    /// The snapshot named `name`, unless it is being removed.
    pub fn snap_named(&self, name: &str) -> Option<&Snapshot> {
        self.snaps.iter().find(|s| s.name == name && !s.removing)
    }

    /// The header's stored form.
    pub fn encode(&self) -> Vec<u8> {
        let body = rmp_serde::to_vec_named(self).expect("a header always serializes");
        let body_len = u32::try_from(body.len()).expect("a checked header is far below 4 GiB");
        let mut out = Vec::with_capacity(body.len() + 14);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&body_len.to_le_bytes());
        out.extend_from_slice(&body);
        let crc = crc_fast::crc32_iscsi(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// Decodes a stored header (format 1 or 2), checking its magic, version, checksum and
    /// bounds.
    pub fn decode(bytes: &[u8]) -> Result<Header, String> {
        if bytes.len() < 10 || bytes.len() > MAX_HEADER_BYTES {
            return Err(format!("{} bytes is no image header", bytes.len()));
        }
        let (body, crc) = bytes.split_at(bytes.len() - 4);
        let stored = u32::from_le_bytes(crc.try_into().map_err(|_| "short checksum")?);
        if crc_fast::crc32_iscsi(body) != stored {
            return Err("checksum mismatch".into());
        }
        if &body[..4] != MAGIC {
            return Err("not an image header".into());
        }
        let header = match u16::from_le_bytes([body[4], body[5]]) {
            1 if bytes.len() == V1_BYTES => {
                let size = u64::from_le_bytes(body[7..15].try_into().map_err(|_| "short size")?);
                Header::new(size, body[6])?
            }
            VERSION => {
                let len = body
                    .get(6..10)
                    .and_then(|b| b.try_into().ok())
                    .map(u32::from_le_bytes)
                    .ok_or("short length")?;
                let rest = &body[10..];
                if usize::try_from(len).ok() != Some(rest.len()) {
                    return Err(format!("body of {} bytes, {len} announced", rest.len()));
                }
                rmp_serde::from_slice(rest).map_err(|e| format!("body: {e}"))?
            }
            v => {
                return Err(format!(
                    "format version {v}, this build reads 1 and {VERSION}"
                ))
            }
        };
        header.check()?;
        Ok(header)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v1(size: u64, order: u8) -> Vec<u8> {
        let mut out = MAGIC.to_vec();
        out.extend_from_slice(&1u16.to_le_bytes());
        out.push(order);
        out.extend_from_slice(&size.to_le_bytes());
        let crc = crc_fast::crc32_iscsi(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    fn with_snaps() -> Header {
        let mut h = Header::new(10 << 30, DEFAULT_ORDER).unwrap();
        h.snap_seq = 5;
        for (id, name) in [(2, "monday"), (5, "tuesday")] {
            h.snaps.push(Snapshot {
                id,
                name: name.into(),
                size: 1 << 30,
                removing: false,
                parent_overlap: Some(1 << 29),
            });
        }
        h.parent = Some(Parent {
            pool: "rbd".into(),
            image: "golden".into(),
            snap: 3,
            overlap: 1 << 30,
        });
        h
    }

    #[test]
    fn round_trips_and_refuses_damage_and_bounds() {
        let h = Header::new(10 << 30, DEFAULT_ORDER).unwrap();
        assert_eq!(h.object_bytes(), 4 << 20);
        assert_eq!(h.objects(), 2560);
        for h in [h, with_snaps()] {
            let bytes = h.encode();
            assert_eq!(Header::decode(&bytes), Ok(h.clone()));
            for i in 0..bytes.len() {
                let mut bad = bytes.clone();
                bad[i] ^= 0x40;
                assert!(Header::decode(&bad).is_err(), "byte {i} flipped");
            }
            assert!(Header::decode(&bytes[..10]).is_err());
        }
        // A checksummed format-2 header too short to hold its body length is refused, not
        // a panic.
        for len in 6..10 {
            let mut short = MAGIC.to_vec();
            short.extend_from_slice(&VERSION.to_le_bytes());
            short.resize(len, 0);
            let crc = crc_fast::crc32_iscsi(&short);
            short.extend_from_slice(&crc.to_le_bytes());
            assert!(Header::decode(&short).is_err(), "{len}-byte body");
        }
        assert!(Header::decode(&[]).is_err());
        assert!(Header::new(1, MIN_ORDER - 1).is_err());
        assert!(Header::new(1, MAX_ORDER + 1).is_err());
        assert!(Header::new(MAX_IMAGE_BYTES + 1, DEFAULT_ORDER).is_err());
        assert_eq!(Header::new(0, MIN_ORDER).unwrap().objects(), 0);
        assert_eq!(Header::new(4097, MIN_ORDER).unwrap().objects(), 2);
    }

    #[test]
    fn format_one_headers_still_read() {
        assert_eq!(
            Header::decode(&v1(1 << 30, 20)),
            Ok(Header::new(1 << 30, 20).unwrap())
        );
        assert!(Header::decode(&v1(1 << 30, 40)).is_err());
    }

    #[test]
    fn snapshot_invariants_are_checked() {
        assert!(with_snaps().check().is_ok());
        let mut h = with_snaps();
        h.snaps[1].id = 2;
        assert!(h.check().is_err(), "ids must rise");
        let mut h = with_snaps();
        h.snap_seq = 4;
        assert!(h.check().is_err(), "ids stay within snap_seq");
        let mut h = with_snaps();
        h.snaps[1].name = "monday".into();
        assert!(h.check().is_err(), "names are unique");
        let mut h = with_snaps();
        h.snaps[0].name = "a/b".into();
        assert!(h.check().is_err(), "names are checked");
        let mut h = with_snaps();
        h.snaps = (1..=MAX_SNAPSHOTS as u64 + 1)
            .map(|id| Snapshot {
                id,
                name: format!("s{id}"),
                size: 0,
                removing: false,
                parent_overlap: None,
            })
            .collect();
        h.snap_seq = MAX_SNAPSHOTS as u64 + 1;
        assert!(h.check().is_err(), "the snapshot limit holds");
        let mut h = with_snaps();
        h.snaps[0].parent_overlap = Some((1 << 30) + 1);
        assert!(
            h.check().is_err(),
            "a snapshot's overlap stays within its size"
        );
        let mut h = with_snaps();
        h.size = 1 << 20;
        assert!(h.check().is_err(), "the overlap stays within the size");
        assert_eq!(with_snaps().snap_named("tuesday").map(|s| s.id), Some(5));
        assert_eq!(with_snaps().snap_named("friday"), None);
    }
}
