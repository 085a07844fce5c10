//! On-media layout of a cache device: two superblock slots, the line metadata area, the data
//! area; encoding and decoding of superblocks and line entries (little-endian, versioned,
//! crc32c-checksummed).
//!
//! Owns byte formats and geometry arithmetic only. It must never do I/O and never accept a
//! structure whose checksum, magic or version does not match: that is a typed error or an
//! explicit `Corrupt` decode result.

// A narrowing cast in a byte format would silently write a wrong length: conversions here
// are checked (`try_from`).
#![deny(clippy::cast_possible_truncation)]

use crate::error::{CacheError, Result};

/// Bytes of one superblock slot; there are two, written alternately.
pub const SB_SLOT_BYTES: u64 = 16 * 1024;

/// One superblock slot's size as a buffer length.
pub(crate) const SB_SLOT_LEN: usize = 16 * 1024;
const _: () = assert!(SB_SLOT_LEN as u64 == SB_SLOT_BYTES);
/// Bytes of one metadata page (the unit of metadata writes).
pub const META_PAGE_BYTES: u64 = 4096;
/// One metadata page's size as a buffer length.
pub(crate) const META_PAGE_LEN: usize = 4096;
const _: () = assert!(META_PAGE_LEN as u64 == META_PAGE_BYTES);
/// Bytes of one line entry; sector-aligned so a torn page write never tears an entry.
pub const ENTRY_BYTES: usize = 32;
/// Entries per metadata page.
pub const ENTRIES_PER_PAGE: u64 = META_PAGE_BYTES / ENTRY_BYTES as u64;
/// Bytes of one validity sector within a line.
pub const SECTOR_BYTES: u64 = 4096;
/// On-media format version.
pub const FORMAT_VERSION: u32 = 1;

/// The format version as the one byte line entries carry.
const FORMAT_VERSION_BYTE: u8 = 1;
const _: () = assert!(FORMAT_VERSION_BYTE as u32 == FORMAT_VERSION);
const SB_MAGIC: &[u8; 8] = b"CAIRNCSB";
const ENTRY_MAGIC: u8 = 0xCA;

/// Where things are on the cache device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    /// Cache line size in bytes.
    pub line_bytes: u64,
    /// Number of cache lines.
    pub lines: u32,
    /// Offset of the first metadata page.
    pub meta_offset_bytes: u64,
    /// Metadata pages.
    pub meta_pages: u64,
    /// Offset of cache line 0's data.
    pub data_offset_bytes: u64,
}

impl Geometry {
    /// The largest layout of `line_bytes` lines fitting in `cache_bytes`.
    pub fn compute(cache_bytes: u64, line_bytes: u64) -> Result<Self> {
        let meta_offset_bytes = 2 * SB_SLOT_BYTES;
        let avail = cache_bytes.saturating_sub(meta_offset_bytes);
        // Each line costs its data plus ENTRY_BYTES of metadata (rounded up per page below).
        let mut lines = avail / (line_bytes + ENTRY_BYTES as u64);
        loop {
            let meta_pages = lines.div_ceil(ENTRIES_PER_PAGE);
            let data_offset_bytes = meta_offset_bytes + meta_pages * META_PAGE_BYTES;
            if data_offset_bytes + lines * line_bytes <= cache_bytes || lines == 0 {
                break;
            }
            lines -= 1;
        }
        if lines == 0 {
            return Err(CacheError::Geometry(format!(
                "cache device of {cache_bytes} bytes holds no {line_bytes}-byte line"
            )));
        }
        let lines = u32::try_from(lines)
            .map_err(|_| CacheError::Geometry(format!("{lines} lines exceed u32")))?;
        let meta_pages = u64::from(lines).div_ceil(ENTRIES_PER_PAGE);
        Ok(Self {
            line_bytes,
            lines,
            meta_offset_bytes,
            meta_pages,
            data_offset_bytes: meta_offset_bytes + meta_pages * META_PAGE_BYTES,
        })
    }

    /// The layout of exactly `lines` lines of `line_bytes`: what [`Geometry::compute`] gave
    /// the device a cache was made on, whatever the device has grown to since.
    pub fn of_lines(lines: u32, line_bytes: u64) -> Self {
        let meta_offset_bytes = 2 * SB_SLOT_BYTES;
        let meta_pages = u64::from(lines).div_ceil(ENTRIES_PER_PAGE);
        Self {
            line_bytes,
            lines,
            meta_offset_bytes,
            meta_pages,
            data_offset_bytes: meta_offset_bytes + meta_pages * META_PAGE_BYTES,
        }
    }

    /// Bytes of the device the layout uses: its metadata and every line's data.
    pub fn used_bytes(&self) -> u64 {
        self.data_offset_bytes + u64::from(self.lines) * self.line_bytes
    }

    /// Byte offset of cache line `line`'s data.
    pub fn line_offset(&self, line: u32) -> u64 {
        self.data_offset_bytes + u64::from(line) * self.line_bytes
    }

    /// Sectors per line.
    pub fn sectors_per_line(&self) -> u64 {
        self.line_bytes / SECTOR_BYTES
    }

    /// Byte offset of the metadata page holding `line`'s entry.
    pub fn page_offset(&self, page: u64) -> u64 {
        self.meta_offset_bytes + page * META_PAGE_BYTES
    }
}

/// Whether the cache was left with dirty data possibly in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SbState {
    /// Attached and running (dirty lines may exist).
    Running = 1,
    /// Detached cleanly: every dirty line was written to core.
    Detached = 2,
}

/// The superblock: identity, geometry and configuration of a cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Superblock {
    /// Bumped on every superblock write; the slot with the higher valid sequence wins.
    pub seq: u64,
    /// Random id of this cache instance; line entries carry it, so entries left over from an
    /// earlier cache on the same device are never taken for this one's.
    pub instance_id: u64,
    /// Cache line size.
    pub line_bytes: u64,
    /// Number of lines.
    pub lines: u32,
    /// Size of the core device the cache was created for.
    pub core_size_bytes: u64,
    /// Running or detached.
    pub state: SbState,
    /// Configuration as TOML text ([`crate::CacheConfig`]).
    pub config_toml: String,
    /// I/O class table as casadm CSV text.
    pub ioclass_csv: String,
}

const SB_HEADER: usize = 8 + 4 + 8 + 8 + 8 + 4 + 8 + 1 + 4 + 4;

impl Superblock {
    /// Encodes into one slot; errors if the texts do not fit.
    pub fn encode(&self) -> Result<Vec<u8>> {
        let mut b = vec![0u8; SB_SLOT_LEN];
        let cfg = self.config_toml.as_bytes();
        let csv = self.ioclass_csv.as_bytes();
        if SB_HEADER + cfg.len() + csv.len() + 4 > b.len() {
            return Err(CacheError::param(
                "superblock",
                format!(
                    "configuration of {} bytes does not fit",
                    cfg.len() + csv.len()
                ),
            ));
        }
        let mut w = 0;
        let mut put = |bytes: &[u8]| {
            b[w..w + bytes.len()].copy_from_slice(bytes);
            w += bytes.len();
        };
        put(SB_MAGIC);
        put(&FORMAT_VERSION.to_le_bytes());
        put(&self.seq.to_le_bytes());
        put(&self.instance_id.to_le_bytes());
        put(&self.line_bytes.to_le_bytes());
        put(&self.lines.to_le_bytes());
        put(&self.core_size_bytes.to_le_bytes());
        put(&[self.state as u8]);
        // Both texts fit the slot (checked above), so their lengths fit 32 bits.
        let text_len = |t: &[u8]| u32::try_from(t.len()).expect("a text within one slot");
        put(&text_len(cfg).to_le_bytes());
        put(&text_len(csv).to_le_bytes());
        put(cfg);
        put(csv);
        let n = b.len();
        let crc = crc_fast::crc32_iscsi(&b[..n - 4]);
        b[n - 4..].copy_from_slice(&crc.to_le_bytes());
        Ok(b)
    }

    /// Decodes one slot.
    pub fn decode(b: &[u8]) -> Result<Self> {
        let bad = |why: &str| CacheError::Superblock(why.to_string());
        if b.len() != SB_SLOT_LEN {
            return Err(bad("wrong slot size"));
        }
        if &b[..8] != SB_MAGIC {
            return Err(bad("no cairn cache superblock (bad magic)"));
        }
        let n = b.len();
        let stored = u32::from_le_bytes([b[n - 4], b[n - 3], b[n - 2], b[n - 1]]);
        if crc_fast::crc32_iscsi(&b[..n - 4]) != stored {
            return Err(bad("checksum mismatch"));
        }
        let u32_at = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        let u64_at = |o: usize| {
            let mut x = [0u8; 8];
            x.copy_from_slice(&b[o..o + 8]);
            u64::from_le_bytes(x)
        };
        let version = u32_at(8);
        if version != FORMAT_VERSION {
            return Err(bad(&format!(
                "format version {version}, expected {FORMAT_VERSION}"
            )));
        }
        let state = match b[48] {
            1 => SbState::Running,
            2 => SbState::Detached,
            s => return Err(bad(&format!("unknown state {s}"))),
        };
        let cfg_len = u32_at(49) as usize;
        let csv_len = u32_at(53) as usize;
        if SB_HEADER + cfg_len + csv_len + 4 > n {
            return Err(bad("text lengths exceed the slot"));
        }
        let text = |from: usize, len: usize| {
            String::from_utf8(b[from..from + len].to_vec()).map_err(|_| bad("text is not UTF-8"))
        };
        Ok(Self {
            seq: u64_at(12),
            instance_id: u64_at(20),
            line_bytes: u64_at(28),
            lines: u32_at(36),
            core_size_bytes: u64_at(40),
            state,
            config_toml: text(SB_HEADER, cfg_len)?,
            ioclass_csv: text(SB_HEADER + cfg_len, csv_len)?,
        })
    }
}

/// One line's persisted metadata.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// Core line held.
    pub core_line: u64,
    /// Valid sectors.
    pub valid: u16,
    /// Dirty sectors (subset of valid).
    pub dirty: u16,
    /// I/O class id.
    pub class: u8,
}

impl Entry {
    /// The entry of a line holding nothing.
    pub const INVALID: Entry = Entry {
        core_line: u64::MAX,
        valid: 0,
        dirty: 0,
        class: 0,
    };
}

/// What a stored entry decodes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decoded {
    /// Never written for this cache instance (or holds nothing).
    Empty,
    /// A valid entry.
    Line(Entry),
    /// Magic matches but the checksum does not: media corruption.
    Corrupt,
}

/// Encodes an entry: magic, version, class, valid, dirty, core line, instance id, write
/// sequence, crc32c over the rest.
pub fn encode_entry(e: &Entry, instance_id: u64, seq: u32) -> [u8; ENTRY_BYTES] {
    let mut b = [0u8; ENTRY_BYTES];
    b[0] = ENTRY_MAGIC;
    b[1] = FORMAT_VERSION_BYTE;
    b[2] = e.class;
    b[4..6].copy_from_slice(&e.valid.to_le_bytes());
    b[6..8].copy_from_slice(&e.dirty.to_le_bytes());
    b[8..16].copy_from_slice(&e.core_line.to_le_bytes());
    b[16..24].copy_from_slice(&instance_id.to_le_bytes());
    b[24..28].copy_from_slice(&seq.to_le_bytes());
    let crc = crc_fast::crc32_iscsi(&b[..28]);
    b[28..32].copy_from_slice(&crc.to_le_bytes());
    b
}

/// Decodes an entry written for `instance_id`.
pub fn decode_entry(b: &[u8], instance_id: u64) -> Decoded {
    if b.len() != ENTRY_BYTES || b[0] != ENTRY_MAGIC {
        return Decoded::Empty;
    }
    let crc = u32::from_le_bytes([b[28], b[29], b[30], b[31]]);
    if crc_fast::crc32_iscsi(&b[..28]) != crc || b[1] != FORMAT_VERSION_BYTE {
        return Decoded::Corrupt;
    }
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[16..24]);
    if u64::from_le_bytes(x) != instance_id {
        return Decoded::Empty;
    }
    x.copy_from_slice(&b[8..16]);
    let e = Entry {
        core_line: u64::from_le_bytes(x),
        valid: u16::from_le_bytes([b[4], b[5]]),
        dirty: u16::from_le_bytes([b[6], b[7]]),
        class: b[2],
    };
    if e.valid == 0 {
        Decoded::Empty
    } else {
        Decoded::Line(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn geometry_fits_and_rejects_tiny_devices() {
        for line in [4096u64, 65536] {
            let g = Geometry::compute(64 << 20, line).unwrap();
            assert!(g.line_offset(g.lines - 1) + line <= 64 << 20);
            assert!(g.meta_pages * ENTRIES_PER_PAGE >= u64::from(g.lines));
            assert!(g.data_offset_bytes >= g.page_offset(g.meta_pages));
            assert_eq!(
                Geometry::of_lines(g.lines, line),
                g,
                "the layout follows the lines"
            );
            assert!(g.used_bytes() <= 64 << 20);
            assert!(
                Geometry::compute((64 << 20) + line + 4096, line)
                    .unwrap()
                    .lines
                    >= g.lines
            );
        }
        assert!(matches!(
            Geometry::compute(40 * 1024, 65536),
            Err(CacheError::Geometry(_))
        ));
    }

    #[test]
    fn superblock_round_trip_and_corruption() {
        let sb = Superblock {
            seq: 7,
            instance_id: 0xfeed,
            line_bytes: 8192,
            lines: 1000,
            core_size_bytes: 1 << 30,
            state: SbState::Running,
            config_toml: "mode = \"wb\"".into(),
            ioclass_csv: "IO class id,...".into(),
        };
        let mut b = sb.encode().unwrap();
        assert_eq!(Superblock::decode(&b).unwrap(), sb);
        b[100] ^= 1;
        assert!(matches!(
            Superblock::decode(&b),
            Err(CacheError::Superblock(_))
        ));
        assert!(Superblock::decode(&vec![0; SB_SLOT_LEN]).is_err());
        let big = Superblock {
            config_toml: "x".repeat(SB_SLOT_LEN),
            ..sb
        };
        assert!(big.encode().is_err());
    }

    #[test]
    fn entries_round_trip_and_reject_other_instances_and_corruption() {
        let e = Entry {
            core_line: 123_456,
            valid: 0b1011,
            dirty: 0b0010,
            class: 3,
        };
        let mut b = encode_entry(&e, 42, 9);
        assert_eq!(decode_entry(&b, 42), Decoded::Line(e));
        assert_eq!(decode_entry(&b, 43), Decoded::Empty);
        assert_eq!(decode_entry(&[0; ENTRY_BYTES], 42), Decoded::Empty);
        assert_eq!(
            decode_entry(&encode_entry(&Entry::INVALID, 42, 1), 42),
            Decoded::Empty
        );
        b[9] ^= 4;
        assert_eq!(decode_entry(&b, 42), Decoded::Corrupt);
    }
}
