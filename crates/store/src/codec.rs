//! Encoding of every persisted record: keys and versioned, crc32c-checksummed little-endian values.
//!
//! Owns the byte layout of metadata (invariant 6: versioned, checksummed, explicit endianness).
//! Keys are big-endian where they must sort numerically. It must never panic on malformed input:
//! every decoder returns [`StoreError::Corrupt`].

// A narrowing cast in a byte format would silently write a wrong length: conversions here
// are checked (`try_from`).
#![deny(clippy::cast_possible_truncation)]

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

/// Longest attribute value kept inside its object's onode (explicit limit). Small attributes
/// live there, as BlueStore keeps them: setting one with a write rewrites the onode record the
/// write changes anyway instead of adding a record of its own to the KV and to every layer
/// above it (group record, overlay, checkpoint). Longer ones are records of the xattr table.
pub const INLINE_ATTR_MAX_BYTES: usize = 255;

/// Most bytes (names and values) of the attributes one onode holds (explicit limit): past it,
/// further attributes go to the xattr table, so an onode record stays small.
pub const INLINE_ATTRS_MAX_BYTES: usize = 2048;

/// Most bytes the extent records inside one onode take, encoded (explicit limit; see
/// [`Onode::extents`]): one extent of up to 123 blocks, or a few short ones. An object whose
/// extent map grows past it keeps its map in the extents table instead.
pub const INLINE_EXTENTS_MAX_BYTES: usize = 512;

/// Encoded bytes of one extent inside an onode: first logical block (u64), first physical
/// block (u64), block count (u16), and a crc32c per block.
fn inline_extent_bytes(e: &Extent) -> usize {
    18 + 4 * e.crcs.len()
}

/// Object metadata ("onode"): its size, its small attributes and, while it is small, its
/// extent map.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Onode {
    /// Logical size in bytes.
    pub size_bytes: u64,
    /// Small attributes (see [`INLINE_ATTR_MAX_BYTES`]), sorted by name, names unique.
    pub attrs: Vec<(String, Vec<u8>)>,
    /// Whether the object may have attributes in the xattr table: set when one is put there,
    /// so that an object without (the common case) never looks the table up.
    pub spilled: bool,
    /// The object's extent map while it fits in [`INLINE_EXTENTS_MAX_BYTES`] (empty when
    /// `extents_spilled`), in logical order, non-overlapping. As BlueStore keeps a small
    /// object's extent map in its onode: a small write rewrites the onode record anyway, so its
    /// extent costs no KV record of its own (in the group's record, the overlay, and the random
    /// B-tree leaf a checkpoint rewrites for it).
    pub extents: Vec<Extent>,
    /// Whether the extent map lives in the extents table instead (it outgrew the onode).
    pub extents_spilled: bool,
}

impl Onode {
    /// Bytes of the inline attributes' names and values.
    pub fn inline_bytes(&self) -> usize {
        self.attrs.iter().map(|(n, v)| n.len() + v.len()).sum()
    }

    /// The inline attribute `name`, if the onode holds one.
    pub fn attr(&self, name: &str) -> Option<&[u8]> {
        self.attrs
            .binary_search_by(|(n, _)| n.as_str().cmp(name))
            .ok()
            .map(|i| self.attrs[i].1.as_slice())
    }

    /// Whether `name` = `value` may be held inline, replacing an inline one of that name.
    pub fn fits_inline(&self, name: &str, value: &[u8]) -> bool {
        let replaced = self.attr(name).map_or(0, |v| name.len() + v.len());
        name.len() <= INLINE_ATTR_MAX_BYTES
            && value.len() <= INLINE_ATTR_MAX_BYTES
            && self.inline_bytes() - replaced + name.len() + value.len() <= INLINE_ATTRS_MAX_BYTES
    }

    /// Sets the inline attribute `name` (the caller checked [`Onode::fits_inline`]).
    pub fn set_attr(&mut self, name: &str, value: &[u8]) {
        match self.attrs.binary_search_by(|(n, _)| n.as_str().cmp(name)) {
            Ok(i) => self.attrs[i].1 = value.to_vec(),
            Err(i) => self.attrs.insert(i, (name.to_string(), value.to_vec())),
        }
    }

    /// Removes the inline attribute `name`; whether there was one.
    pub fn remove_attr(&mut self, name: &str) -> bool {
        match self.attrs.binary_search_by(|(n, _)| n.as_str().cmp(name)) {
            Ok(i) => {
                self.attrs.remove(i);
                true
            }
            Err(_) => false,
        }
    }

    /// Encoded bytes of the inline extent map.
    pub fn inline_extents_bytes(&self) -> usize {
        self.extents.iter().map(inline_extent_bytes).sum()
    }

    /// Encodes the onode: size (u64), flags (u8: bit 0 = spilled, bit 1 = extents_spilled),
    /// attribute count (u16), then per attribute its name length (u8), name, value length (u8)
    /// and value; then the inline extent count (u16) and per extent its first logical block
    /// (u64), first physical block (u64), block count (u16) and crcs (u32 each).
    pub fn encode(&self) -> Vec<u8> {
        let mut p = Vec::with_capacity(
            13 + self.attrs.len() * 2 + self.inline_bytes() + self.inline_extents_bytes(),
        );
        p.extend_from_slice(&self.size_bytes.to_le_bytes());
        p.push(u8::from(self.spilled) | u8::from(self.extents_spilled) << 1);
        p.extend_from_slice(&field_len::<u16>(self.attrs.len(), "attribute count").to_le_bytes());
        for (name, value) in &self.attrs {
            p.push(field_len::<u8>(name.len(), "inline attribute name"));
            p.extend_from_slice(name.as_bytes());
            p.push(field_len::<u8>(value.len(), "inline attribute value"));
            p.extend_from_slice(value);
        }
        p.extend_from_slice(
            &field_len::<u16>(self.extents.len(), "inline extent count").to_le_bytes(),
        );
        for e in &self.extents {
            p.extend_from_slice(&e.lblock.to_le_bytes());
            p.extend_from_slice(&e.pblock.to_le_bytes());
            p.extend_from_slice(&field_len::<u16>(e.crcs.len(), "inline extent").to_le_bytes());
            for c in &e.crcs {
                p.extend_from_slice(&c.to_le_bytes());
            }
        }
        seal(&p)
    }

    /// Decodes an onode; anything but the layout of [`Onode::encode`] (truncated, trailing
    /// bytes, unknown flags, names not UTF-8 or not strictly sorted, more inline bytes than
    /// [`INLINE_ATTRS_MAX_BYTES`] or [`INLINE_EXTENTS_MAX_BYTES`], extents empty, too long,
    /// unsorted or overlapping, or inline with the map marked spilled) is
    /// [`StoreError::Corrupt`].
    pub fn decode(b: &[u8]) -> Result<Self> {
        let p = open(b, "onode")?;
        let bad = |why: &str| StoreError::Corrupt(format!("onode: {why}"));
        let size_bytes = le_u64(p, 0, "onode")?;
        let flags = *p.get(8).ok_or_else(|| bad("truncated"))?;
        if flags > 3 {
            return Err(bad("unknown flags"));
        }
        let count = p
            .get(9..11)
            .map(|c| u16::from_le_bytes([c[0], c[1]]))
            .ok_or_else(|| bad("truncated"))?;
        let mut at = 11;
        // A piece of at most 255 bytes preceded by its length byte.
        let mut take = || -> Result<&[u8]> {
            let len = *p.get(at).ok_or_else(|| bad("truncated"))? as usize;
            let piece = p
                .get(at + 1..at + 1 + len)
                .ok_or_else(|| bad("truncated"))?;
            at += 1 + len;
            Ok(piece)
        };
        let mut attrs: Vec<(String, Vec<u8>)> = Vec::with_capacity(count.into());
        for _ in 0..count {
            let name = std::str::from_utf8(take()?)
                .map_err(|_| bad("attribute name is not UTF-8"))?
                .to_string();
            let value = take()?.to_vec();
            if attrs.last().is_some_and(|(prev, _)| *prev >= name) {
                return Err(bad("attributes not sorted"));
            }
            attrs.push((name, value));
        }
        let extents = decode_inline_extents(p, &mut at)?;
        if at != p.len() {
            return Err(bad("trailing bytes"));
        }
        let node = Self {
            size_bytes,
            attrs,
            spilled: flags & 1 != 0,
            extents,
            extents_spilled: flags & 2 != 0,
        };
        if node.inline_bytes() > INLINE_ATTRS_MAX_BYTES {
            return Err(bad("inline attributes past their limit"));
        }
        if node.inline_extents_bytes() > INLINE_EXTENTS_MAX_BYTES {
            return Err(bad("inline extents past their limit"));
        }
        if node.extents_spilled && !node.extents.is_empty() {
            return Err(bad("inline extents in an onode whose map is in the table"));
        }
        Ok(node)
    }
}

/// Decodes the inline extent map of an onode payload `p` from byte `at` (advanced past it).
fn decode_inline_extents(p: &[u8], at: &mut usize) -> Result<Vec<Extent>> {
    let bad = |why: &str| StoreError::Corrupt(format!("onode: {why}"));
    let mut take = |n: usize| -> Result<&[u8]> {
        let piece = p.get(*at..*at + n).ok_or_else(|| bad("truncated"))?;
        *at += n;
        Ok(piece)
    };
    let le = |b: &[u8]| b.iter().rev().fold(0u64, |v, &x| v << 8 | u64::from(x));
    let count = usize::from(u16::try_from(le(take(2)?)).map_err(|_| bad("extent count"))?);
    let mut extents: Vec<Extent> = Vec::with_capacity(count.min(64));
    for _ in 0..count {
        let lblock = le(take(8)?);
        let pblock = le(take(8)?);
        let n = le(take(2)?);
        if n == 0 || n > MAX_EXTENT_BLOCKS {
            return Err(bad("inline extent of a bad length"));
        }
        let crcs = take(4 * usize::from(u16::try_from(n).map_err(|_| bad("extent length"))?))?
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        let e = Extent {
            lblock,
            pblock,
            crcs,
        };
        if e.lblock.checked_add(n).is_none() || e.pblock.checked_add(n).is_none() {
            return Err(bad("inline extent past the block range"));
        }
        if extents.last().is_some_and(|prev| prev.lend() > e.lblock) {
            return Err(bad("inline extents unsorted or overlapping"));
        }
        extents.push(e);
    }
    Ok(extents)
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
        p.extend_from_slice(&field_len::<u32>(self.crcs.len(), "extent").to_le_bytes());
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

    /// Index in `crcs` of logical block `block`, which lies within the extent (or at its end).
    fn crc_index(&self, block: u64) -> usize {
        let offset = block - self.lblock;
        assert!(
            offset <= self.crcs.len() as u64,
            "block {block} outside extent at {}",
            self.lblock
        );
        // An extent's blocks number at most MAX_EXTENT_BLOCKS, so the offset fits a usize.
        usize::try_from(offset).expect("an offset within the extent")
    }

    /// The part of this extent covering logical blocks `from..to` (clamped to the extent).
    pub fn slice(&self, from: u64, to: u64) -> Extent {
        let a = from.clamp(self.lblock, self.lend());
        let b = to.clamp(a, self.lend());
        Extent {
            lblock: a,
            pblock: self.pblock + (a - self.lblock),
            crcs: self.crcs[self.crc_index(a)..self.crc_index(b)].to_vec(),
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
/// (`1`: per-block metadata, `2`: extent records, `3`: a write-ahead log ring on the device,
/// `4`: small attributes inside the onode, `5`: small extent maps inside the onode).
pub const SUPER_MAGIC: &[u8; 8] = b"cairnst5";

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

/// The collection id an onode key ([`onode_key`]) begins with.
pub fn onode_coll(key: &[u8]) -> Result<u32> {
    key.get(..4)
        .and_then(|b| b.try_into().ok())
        .map(u32::from_be_bytes)
        .ok_or_else(|| StoreError::Corrupt("onode key shorter than a collection id".into()))
}

/// `n` as the integer type of the field that encodes it. The store's limits (name, value,
/// attribute and extent bounds checked when a transaction is admitted) keep every length in
/// range; a length that did not fit would corrupt the encoding silently, so it is an
/// assertion, not a truncation.
pub(crate) fn field_len<T: TryFrom<usize>>(n: usize, field: &str) -> T {
    T::try_from(n).unwrap_or_else(|_| panic!("{field} length {n} does not fit its encoded field"))
}

/// Unambiguous prefix of everything owned by one object in the per-object tables:
/// collection id (BE) ++ name length (BE u16) ++ name.
pub fn object_prefix(coll_id: u32, name: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(6 + name.len());
    k.extend_from_slice(&coll_id.to_be_bytes());
    k.extend_from_slice(&field_len::<u16>(name.len(), "object name").to_be_bytes());
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

    #[test]
    fn a_length_fits_its_field_or_the_encoder_stops() {
        assert_eq!(field_len::<u8>(255, "x"), 255u8);
        assert_eq!(field_len::<u16>(65_535, "x"), 65_535u16);
        let overflow = std::panic::catch_unwind(|| field_len::<u8>(256, "inline attribute name"));
        let message = *overflow.unwrap_err().downcast::<String>().unwrap();
        assert!(
            message.contains("inline attribute name length 256"),
            "{message}"
        );
    }
    use super::*;

    #[test]
    fn onodes_hold_small_attributes_sorted_and_refuse_malformed_ones() {
        let mut o = Onode {
            size_bytes: 7,
            ..Onode::default()
        };
        for (name, value) in [("b", &b"2"[..]), ("a", b"1"), ("c", b""), ("a", b"one")] {
            assert!(o.fits_inline(name, value));
            o.set_attr(name, value);
        }
        assert_eq!(o.attr("a"), Some(&b"one"[..]));
        assert_eq!(o.attr("zz"), None);
        let names: Vec<&str> = o.attrs.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["a", "b", "c"]);
        o.spilled = true;
        assert_eq!(Onode::decode(&o.encode()).unwrap(), o);
        assert!(o.remove_attr("b") && !o.remove_attr("b"));
        assert_eq!(Onode::decode(&o.encode()).unwrap(), o);

        let long = vec![0u8; INLINE_ATTR_MAX_BYTES + 1];
        assert!(
            !o.fits_inline("x", &long),
            "a value past the per-attribute limit"
        );
        assert!(!o.fits_inline(&"n".repeat(INLINE_ATTR_MAX_BYTES + 1), b"v"));
        let mut full = Onode::default();
        let value = vec![1u8; 200];
        let mut i = 0;
        while full.fits_inline(&format!("k{i:02}"), &value) {
            full.set_attr(&format!("k{i:02}"), &value);
            i += 1;
        }
        assert!(full.inline_bytes() <= INLINE_ATTRS_MAX_BYTES);
        assert!(
            full.inline_bytes() + 204 > INLINE_ATTRS_MAX_BYTES,
            "stops only when full"
        );
        assert!(full.fits_inline("k00", &value), "replacing one still fits");

        // Hand-made payloads: size, flags, count, then (len, name, len, value) pairs, then no
        // inline extents.
        let payload = |flags: u8, count: u16, rest: &[u8]| {
            let mut p = 5u64.to_le_bytes().to_vec();
            p.push(flags);
            p.extend_from_slice(&count.to_le_bytes());
            p.extend_from_slice(rest);
            p.extend_from_slice(&0u16.to_le_bytes());
            seal(&p)
        };
        let trailing = {
            let mut p = 5u64.to_le_bytes().to_vec();
            p.extend_from_slice(&[0, 0, 0, 0, 0, 9]);
            seal(&p)
        };
        let ok = Onode::decode(&payload(0, 1, &[1, b'a', 1, b'x'])).unwrap();
        assert_eq!(ok.attr("a"), Some(&b"x"[..]));
        for (bad, why) in [
            (payload(4, 0, &[]), "unknown flags"),
            (payload(0, 1, &[1, b'a']), "truncated"),
            (payload(0, 1, &[5, b'a', 1, b'x']), "truncated"),
            (trailing, "trailing bytes"),
            (payload(0, 1, &[1, 0xff, 0]), "not UTF-8"),
            (payload(0, 2, &[1, b'b', 0, 1, b'a', 0]), "not sorted"),
            (payload(0, 2, &[1, b'a', 0, 1, b'a', 0]), "not sorted"),
            (seal(&5u64.to_le_bytes()), "truncated"),
        ] {
            let err = Onode::decode(&bad).unwrap_err().to_string();
            assert!(err.contains(why), "{why}: {err}");
        }
        let mut big = Vec::new();
        for i in 0..9u8 {
            big.extend_from_slice(&[1, b'a' + i, 255]);
            big.extend_from_slice(&[0u8; 255]);
        }
        let err = Onode::decode(&payload(0, 9, &big)).unwrap_err().to_string();
        assert!(err.contains("past their limit"), "{err}");
    }

    #[test]
    fn onodes_hold_small_extent_maps_and_refuse_malformed_ones() {
        let ext = |lblock: u64, n: usize| Extent {
            lblock,
            pblock: 100 + lblock,
            crcs: (0..u32::try_from(n).unwrap()).collect(),
        };
        let mut o = Onode {
            size_bytes: 1 << 20,
            extents: vec![ext(0, 1), ext(3, 10)],
            ..Onode::default()
        };
        o.set_attr("_v", b"12");
        assert_eq!(o.inline_extents_bytes(), 18 + 4 + 18 + 40);
        assert_eq!(Onode::decode(&o.encode()).unwrap(), o);
        let spilled = Onode {
            extents_spilled: true,
            extents: Vec::new(),
            ..o.clone()
        };
        assert_eq!(Onode::decode(&spilled.encode()).unwrap(), spilled);
        let largest = Onode {
            extents: vec![ext(0, (INLINE_EXTENTS_MAX_BYTES - 18) / 4)],
            ..Onode::default()
        };
        assert_eq!(Onode::decode(&largest.encode()).unwrap(), largest);

        // Each layout the encoder never makes is refused, with its reason.
        let bad = |node: Onode, why: &str| {
            let err = Onode::decode(&node.encode()).unwrap_err().to_string();
            assert!(err.contains(why), "{why}: {err}");
        };
        bad(
            Onode {
                extents_spilled: true,
                ..o.clone()
            },
            "map is in the table",
        );
        bad(
            Onode {
                extents: vec![ext(3, 1), ext(0, 1)],
                ..Onode::default()
            },
            "unsorted or overlapping",
        );
        bad(
            Onode {
                extents: vec![ext(0, 4), ext(3, 1)],
                ..Onode::default()
            },
            "unsorted or overlapping",
        );
        bad(
            Onode {
                extents: vec![ext(0, 0)],
                ..Onode::default()
            },
            "bad length",
        );
        bad(
            Onode {
                extents: vec![ext(0, 100), ext(200, 100)],
                ..Onode::default()
            },
            "past their limit",
        );
        let mut cut = o.encode();
        cut.truncate(cut.len() - 8);
        assert!(Onode::decode(&cut).is_err(), "truncated inside an extent");
    }

    #[test]
    fn records_round_trip_and_detect_damage() {
        let o = Onode {
            size_bytes: 12345,
            ..Onode::default()
        };
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
            crcs: vec![0; usize::try_from(MAX_EXTENT_BLOCKS).unwrap() + 1],
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
