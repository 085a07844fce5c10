//! Encoding of every persisted record: keys and versioned, crc32c-checksummed little-endian values.
//!
//! Owns the byte layout of metadata (invariant 5: versioned, checksummed, explicit endianness).
//! Keys are big-endian where they must sort numerically. It must never panic on malformed input:
//! every decoder returns [`StoreError::Corrupt`].

use crate::error::{Result, StoreError};

/// Version byte of every value written by this code. Version 2: extent records (version 1 had
/// one record per block).
pub const FORMAT_VERSION: u8 = 2;

/// Wraps `payload` as `[version][payload][crc32c(version ++ payload) LE]`.
pub fn seal(payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(payload.len() + 5);
    v.push(FORMAT_VERSION);
    v.extend_from_slice(payload);
    let crc = crc_fast::crc32_iscsi(&v);
    v.extend_from_slice(&crc.to_le_bytes());
    v
}

/// Checks and strips the envelope made by [`seal`]; `what` names the record in errors.
pub fn open<'a>(bytes: &'a [u8], what: &str) -> Result<&'a [u8]> {
    if bytes.len() < 5 {
        return Err(StoreError::Corrupt(format!(
            "{what}: record of {} bytes is too short",
            bytes.len()
        )));
    }
    let (body, crc) = bytes.split_at(bytes.len() - 4);
    let stored = u32::from_le_bytes([crc[0], crc[1], crc[2], crc[3]]);
    if crc_fast::crc32_iscsi(body) != stored {
        return Err(StoreError::Corrupt(format!(
            "{what}: record checksum mismatch"
        )));
    }
    if body[0] != FORMAT_VERSION {
        return Err(StoreError::Corrupt(format!(
            "{what}: unknown format version {}",
            body[0]
        )));
    }
    Ok(&body[1..])
}

/// Reads a little-endian u64 at `at`.
pub fn le_u64(b: &[u8], at: usize, what: &str) -> Result<u64> {
    b.get(at..at + 8)
        .and_then(|s| s.try_into().ok())
        .map(u64::from_le_bytes)
        .ok_or_else(|| StoreError::Corrupt(format!("{what}: truncated")))
}

/// Reads a little-endian u32 at `at`.
pub fn le_u32(b: &[u8], at: usize, what: &str) -> Result<u32> {
    b.get(at..at + 4)
        .and_then(|s| s.try_into().ok())
        .map(u32::from_le_bytes)
        .ok_or_else(|| StoreError::Corrupt(format!("{what}: truncated")))
}

/// Object metadata ("onode").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Onode {
    /// Logical size in bytes.
    pub size_bytes: u64,
}

impl Onode {
    /// Encodes the onode.
    pub fn encode(&self) -> Vec<u8> {
        seal(&self.size_bytes.to_le_bytes())
    }

    /// Decodes an onode.
    pub fn decode(b: &[u8]) -> Result<Self> {
        let p = open(b, "onode")?;
        Ok(Self {
            size_bytes: le_u64(p, 0, "onode")?,
        })
    }
}

/// Most blocks one extent record covers: bounds the record (its crc array) to about 1 KiB, so a
/// small overwrite that splits an extent rewrites little metadata.
pub const MAX_EXTENT_BLOCKS: u64 = 256;

/// A run of an object's logical blocks stored in physically contiguous device blocks, with the
/// crc32c of each block. Logical block `lblock + i` lives in physical block `pblock + i`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Extent {
    /// First logical block (the record's key carries it).
    pub lblock: u64,
    /// First physical block on the device.
    pub pblock: u64,
    /// crc32c of each block's full contents; its length is the extent's length in blocks.
    pub crcs: Vec<u32>,
}

impl Extent {
    /// Length in blocks.
    pub fn blocks(&self) -> u64 {
        self.crcs.len() as u64
    }

    /// One past the last logical block.
    pub fn lend(&self) -> u64 {
        self.lblock + self.blocks()
    }

    /// Encodes the value part (`pblock`, count, crcs); `lblock` lives in the key.
    pub fn encode(&self) -> Vec<u8> {
        let mut p = Vec::with_capacity(12 + 4 * self.crcs.len());
        p.extend_from_slice(&self.pblock.to_le_bytes());
        p.extend_from_slice(&(self.crcs.len() as u32).to_le_bytes());
        for c in &self.crcs {
            p.extend_from_slice(&c.to_le_bytes());
        }
        seal(&p)
    }

    /// Decodes a value made by [`Extent::encode`] for logical block `lblock`. An empty extent,
    /// one longer than [`MAX_EXTENT_BLOCKS`] or a length that disagrees with the record is
    /// corruption.
    pub fn decode(lblock: u64, b: &[u8]) -> Result<Self> {
        let p = open(b, "extent")?;
        let pblock = le_u64(p, 0, "extent")?;
        let n = le_u32(p, 8, "extent")? as usize;
        if n == 0 || n as u64 > MAX_EXTENT_BLOCKS || p.len() != 12 + 4 * n {
            return Err(StoreError::Corrupt(format!(
                "extent at block {lblock}: {n} blocks in a {}-byte record",
                p.len()
            )));
        }
        let crcs = p[12..]
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        Ok(Self {
            lblock,
            pblock,
            crcs,
        })
    }

    /// The part of this extent covering logical blocks `from..to` (clamped to the extent).
    pub fn slice(&self, from: u64, to: u64) -> Extent {
        let a = from.clamp(self.lblock, self.lend());
        let b = to.clamp(a, self.lend());
        Extent {
            lblock: a,
            pblock: self.pblock + (a - self.lblock),
            crcs: self.crcs[(a - self.lblock) as usize..(b - self.lblock) as usize].to_vec(),
        }
    }
}

/// The store's identity and geometry, kept both in the KV and in device block 0 so that a
/// device is never mounted with another store's metadata.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Superblock {
    /// Random identity chosen at mkfs.
    pub uuid: u64,
    /// Block (allocation and checksum) size.
    pub block_bytes: u64,
    /// Device size at mkfs.
    pub device_bytes: u64,
    /// Blocks of the write-ahead log ring, which starts at block 1 (0: no log).
    pub wal_blocks: u64,
}

/// Magic at the start of device block 0; its last character is the on-disk format generation
/// (`1`: per-block metadata, `2`: extent records, `3`: a write-ahead log ring on the device).
pub const SUPER_MAGIC: &[u8; 8] = b"cairnst3";

/// The magic without its generation character.
const SUPER_MAGIC_FAMILY: &[u8; 7] = b"cairnst";

impl Superblock {
    /// Bytes of [`Superblock::encode`]'s output: the magic and the sealed fields.
    pub const ENCODED_BYTES: usize = 8 + 32 + 5;

    /// First block of the write-ahead log ring (right after the superblock).
    pub const WAL_FIRST_BLOCK: u64 = 1;

    /// First block of the data area (after the superblock and the write-ahead log ring).
    pub fn first_data_block(&self) -> u64 {
        Self::WAL_FIRST_BLOCK + self.wal_blocks
    }

    /// Encodes the superblock (magic + sealed fields).
    pub fn encode(&self) -> Vec<u8> {
        let mut p = Vec::with_capacity(32);
        p.extend_from_slice(&self.uuid.to_le_bytes());
        p.extend_from_slice(&self.block_bytes.to_le_bytes());
        p.extend_from_slice(&self.device_bytes.to_le_bytes());
        p.extend_from_slice(&self.wal_blocks.to_le_bytes());
        let mut v = SUPER_MAGIC.to_vec();
        v.extend_from_slice(&seal(&p));
        v
    }

    /// Decodes a superblock from the start of `b` (trailing bytes ignored). A store of another
    /// format generation is [`StoreError::UnsupportedFormat`].
    pub fn decode(b: &[u8]) -> Result<Self> {
        if b.len() >= 8 && &b[..7] == SUPER_MAGIC_FAMILY && b[7] != SUPER_MAGIC[7] {
            return Err(StoreError::UnsupportedFormat {
                found: String::from_utf8_lossy(&b[..8]).into_owned(),
                supported: String::from_utf8_lossy(SUPER_MAGIC).into_owned(),
            });
        }
        if b.len() < Self::ENCODED_BYTES || &b[..8] != SUPER_MAGIC {
            return Err(StoreError::Corrupt("superblock: bad magic".into()));
        }
        let p = open(&b[8..Self::ENCODED_BYTES], "superblock")?;
        Ok(Self {
            uuid: le_u64(p, 0, "superblock")?,
            block_bytes: le_u64(p, 8, "superblock")?,
            device_bytes: le_u64(p, 16, "superblock")?,
            wal_blocks: le_u64(p, 24, "superblock")?,
        })
    }
}

/// Key of an object: collection id (BE) ++ name. Sorts objects of a collection by name.
pub fn onode_key(coll_id: u32, name: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(4 + name.len());
    k.extend_from_slice(&coll_id.to_be_bytes());
    k.extend_from_slice(name.as_bytes());
    k
}

/// Unambiguous prefix of everything owned by one object in the per-object tables:
/// collection id (BE) ++ name length (BE u16) ++ name.
pub fn object_prefix(coll_id: u32, name: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(6 + name.len());
    k.extend_from_slice(&coll_id.to_be_bytes());
    k.extend_from_slice(&(name.len() as u16).to_be_bytes());
    k.extend_from_slice(name.as_bytes());
    k
}

/// Key of an extent: object prefix ++ its first logical block (BE).
pub fn block_key(prefix: &[u8], block_index: u64) -> Vec<u8> {
    let mut k = prefix.to_vec();
    k.extend_from_slice(&block_index.to_be_bytes());
    k
}

/// Key of an xattr or omap entry: object prefix ++ user key.
pub fn sub_key(prefix: &[u8], user_key: &[u8]) -> Vec<u8> {
    let mut k = prefix.to_vec();
    k.extend_from_slice(user_key);
    k
}

/// The smallest key greater than every key starting with `prefix` (None if there is none).
pub fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

/// Splits an extent key into (object prefix, first logical block).
pub fn split_block_key(key: &[u8]) -> Result<(&[u8], u64)> {
    if key.len() < 6 + 8 {
        return Err(StoreError::Corrupt("block key too short".into()));
    }
    let (prefix, idx) = key.split_at(key.len() - 8);
    let idx = u64::from_be_bytes(
        idx.try_into()
            .map_err(|_| StoreError::Corrupt("block key".into()))?,
    );
    Ok((prefix, idx))
}

/// Splits an object prefix (or a key starting with one) into (collection id, name, rest).
pub fn split_prefix(key: &[u8]) -> Result<(u32, &str, &[u8])> {
    let bad = || StoreError::Corrupt("object key malformed".into());
    let coll = u32::from_be_bytes(
        key.get(..4)
            .ok_or_else(bad)?
            .try_into()
            .map_err(|_| bad())?,
    );
    let len = u16::from_be_bytes(
        key.get(4..6)
            .ok_or_else(bad)?
            .try_into()
            .map_err(|_| bad())?,
    ) as usize;
    let name = key.get(6..6 + len).ok_or_else(bad)?;
    let name = std::str::from_utf8(name).map_err(|_| bad())?;
    Ok((coll, name, &key[6 + len..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_detect_damage() {
        let o = Onode { size_bytes: 12345 };
        assert_eq!(Onode::decode(&o.encode()).unwrap(), o);
        let e = Extent {
            lblock: 5,
            pblock: 77,
            crcs: vec![0xdead_beef, 1, 2],
        };
        let mut enc = e.encode();
        assert_eq!(Extent::decode(5, &enc).unwrap(), e);
        enc[3] ^= 1;
        assert!(matches!(
            Extent::decode(5, &enc),
            Err(StoreError::Corrupt(_))
        ));
        assert!(Extent::decode(0, &[]).is_err());
        let empty = Extent {
            lblock: 0,
            pblock: 1,
            crcs: vec![],
        };
        assert!(Extent::decode(0, &empty.encode()).is_err());
        let huge = Extent {
            lblock: 0,
            pblock: 1,
            crcs: vec![0; MAX_EXTENT_BLOCKS as usize + 1],
        };
        assert!(Extent::decode(0, &huge.encode()).is_err());
        let mid = e.slice(6, 100);
        assert_eq!((mid.lblock, mid.pblock, mid.crcs), (6, 78, vec![1, 2]));
        assert_eq!(e.slice(0, 5).blocks(), 0);
        assert!(Onode::decode(&seal(&[1, 2])).is_err());
        let s = Superblock {
            uuid: 9,
            block_bytes: 4096,
            device_bytes: 1 << 20,
            wal_blocks: 16,
        };
        let mut blk = s.encode();
        blk.resize(4096, 0);
        assert_eq!(Superblock::decode(&blk).unwrap(), s);
        assert!(Superblock::decode(&[0u8; 4096]).is_err());
        let mut old = blk.clone();
        old[7] = b'1';
        assert!(matches!(
            Superblock::decode(&old),
            Err(StoreError::UnsupportedFormat { .. })
        ));
    }

    #[test]
    fn keys_sort_and_split() {
        assert!(onode_key(1, "a") < onode_key(1, "b"));
        assert!(onode_key(1, "zz") < onode_key(2, "a"));
        let p = object_prefix(3, "obj");
        let k = block_key(&p, 5);
        let (pp, idx) = split_block_key(&k).unwrap();
        assert_eq!((pp, idx), (&p[..], 5));
        let sk = sub_key(&p, b"attr");
        let (c, n, rest) = split_prefix(&sk).unwrap();
        assert_eq!((c, n, rest), (3, "obj", &b"attr"[..]));
        assert_eq!(prefix_end(&[1, 0xff]), Some(vec![2]));
        assert_eq!(prefix_end(&[0xff]), None);
        assert!(split_prefix(&[0, 0]).is_err());
        assert!(split_block_key(&[0; 3]).is_err());
    }
}
