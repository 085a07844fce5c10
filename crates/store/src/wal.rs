//! The write-ahead log on the data device: a ring of blocks right after the superblock holding
//! one redo record per group commit, so that a group is durable after ONE device flush (its new
//! data blocks and its record written together) instead of a device flush followed by a KV sync.
//!
//! Owns the record format (versioned, little-endian, one crc32c over the whole record), the ring
//! (where the next record goes, when a checkpoint is due), the checkpoint marker kept in the KV,
//! and recovery: reading the records written since the last checkpoint in order and checking
//! that the data blocks of the last one reached the device. It must never write to the device or
//! the KV itself (the store does, in the order its module documents).
//!
//! Why only the last record needs its data checked: group commits are serialized, and a record is
//! written only after the flush of the previous group completed, so every record but the last was
//! followed by a completed flush. The last one may have landed while some of its data blocks did
//! not; its data blocks' checksums are in the extent values it carries.

// A narrowing cast in a byte format would silently write a wrong length: conversions here
// are checked (`try_from`).
#![deny(clippy::cast_possible_truncation)]

use crate::codec::field_len;
use crate::codec::{self, split_block_key, Extent};
use crate::error::{Result, StoreError};
use crate::logged::{Change, Touched};

/// Tables a redo record covers, in this order: meta, collections, onodes, extents, xattrs, omap,
/// deferred (the order of `stage::Tables`).
pub(crate) const REDO_TABLES: usize = 7;
/// Index of the onodes table in a redo record.
pub(crate) const REDO_ONODES: usize = 2;
/// Index of the extents table in a redo record.
pub(crate) const REDO_EXTENTS: usize = 3;
/// Index of the xattrs table in a redo record.
pub(crate) const REDO_XATTRS: usize = 4;
/// Tables whose keys are UTF-8 strings (meta, collections).
const STR_KEY_TABLES: [usize; 2] = [0, 1];
/// The table whose keys are little-endian u64 block numbers (deferred).
const U64_KEY_TABLE: usize = 6;

/// The KV changes of one group commit: the final state of every key it touched, by table.
#[derive(Debug, Default, Clone)]
pub(crate) struct Redo {
    /// One map per table, in [`REDO_TABLES`] order.
    pub(crate) tables: [Touched; REDO_TABLES],
}

/// Magic at the start of every record.
pub(crate) const WAL_MAGIC: &[u8; 8] = b"cairnwal";
/// Record format version.
pub(crate) const WAL_VERSION: u8 = 1;
/// Magic, version, store uuid, sequence number, length in blocks, payload length. The uuid ties
/// a record to its store: records a previous store left on the device are never replayed.
pub(crate) const HEADER_BYTES: usize = 8 + 1 + 8 + 8 + 4 + 4;

/// One decoded redo record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Record {
    /// Sequence number (consecutive from the checkpoint marker's).
    pub(crate) seq: u64,
    /// Length on the device, blocks.
    pub(crate) blocks: u64,
    /// Changes by table, in [`REDO_TABLES`] order.
    pub(crate) tables: Vec<Vec<Change>>,
    /// Copy-on-write runs `(first block, blocks)` written with this record.
    pub(crate) runs: Vec<(u64, u64)>,
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&field_len::<u32>(b.len(), "redo key or value").to_le_bytes());
    out.extend_from_slice(b);
}

/// Bytes [`encode`] produces before padding (used to decide whether a record fits).
pub(crate) fn encoded_len(redo: &Redo, runs: usize) -> usize {
    let entries: usize = redo
        .tables
        .iter()
        .map(|t| {
            4 + t
                .iter()
                .map(|(k, v)| 4 + k.len() + 1 + v.as_ref().map_or(0, |v| 4 + v.len()))
                .sum::<usize>()
        })
        .sum();
    HEADER_BYTES + entries + 4 + 16 * runs + 4
}

/// Encodes a record of store `uuid`: header, payload, crc32c of both, zeros up to a whole number
/// of blocks.
pub(crate) fn encode(
    uuid: u64,
    seq: u64,
    redo: &Redo,
    runs: &[(u64, u64)],
    block_bytes: u64,
) -> Vec<u8> {
    let raw = encoded_len(redo, runs.len());
    let block = usize::try_from(block_bytes).expect("a block size fits in memory");
    let blocks = raw.div_ceil(block).max(1);
    let mut out = Vec::with_capacity(blocks * block);
    out.extend_from_slice(WAL_MAGIC);
    out.push(WAL_VERSION);
    out.extend_from_slice(&uuid.to_le_bytes());
    out.extend_from_slice(&seq.to_le_bytes());
    out.extend_from_slice(&field_len::<u32>(blocks, "redo record blocks").to_le_bytes());
    out.extend_from_slice(&field_len::<u32>(raw - HEADER_BYTES - 4, "redo payload").to_le_bytes());
    for t in &redo.tables {
        out.extend_from_slice(&field_len::<u32>(t.len(), "redo table").to_le_bytes());
        for (k, v) in t {
            put_bytes(&mut out, k);
            match v {
                Some(v) => {
                    out.push(1);
                    put_bytes(&mut out, v);
                }
                None => out.push(0),
            }
        }
    }
    out.extend_from_slice(&field_len::<u32>(runs.len(), "redo runs").to_le_bytes());
    for &(start, n) in runs {
        out.extend_from_slice(&start.to_le_bytes());
        out.extend_from_slice(&n.to_le_bytes());
    }
    let crc = crc_fast::crc32_iscsi(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    assert_eq!(
        out.len(),
        raw,
        "a redo record's length as computed before encoding"
    );
    out.resize(blocks * block, 0);
    out
}

/// What a record's first block says about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    /// The store that wrote it.
    pub(crate) uuid: u64,
    /// Its sequence number.
    pub(crate) seq: u64,
    /// Its length in blocks.
    pub(crate) blocks: u64,
}

/// The header of a record from its first block, if the block starts like one.
pub(crate) fn peek_header(first: &[u8]) -> Option<Header> {
    if first.len() < HEADER_BYTES || &first[..8] != WAL_MAGIC || first[8] != WAL_VERSION {
        return None;
    }
    let word = |at: usize| first[at..at + 8].try_into().ok().map(u64::from_le_bytes);
    let blocks = u32::from_le_bytes(first[25..29].try_into().ok()?) as u64;
    (blocks > 0).then_some(Header {
        uuid: word(9)?,
        seq: word(17)?,
        blocks,
    })
}

/// A cursor over a record's payload that reports truncation as corruption.
struct Cursor<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let s = self
            .at
            .checked_add(n)
            .and_then(|end| self.b.get(self.at..end))
            .ok_or_else(|| StoreError::Corrupt("wal record: truncated".into()))?;
        self.at += n;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32> {
        let v = codec::le_u32(self.take(4)?, 0, "wal record")?;
        Ok(v)
    }
    fn u64(&mut self) -> Result<u64> {
        codec::le_u64(self.take(8)?, 0, "wal record")
    }
    fn bytes(&mut self) -> Result<Vec<u8>> {
        let n = self.u32()? as usize;
        Ok(self.take(n)?.to_vec())
    }
}

/// Decodes a whole record (all of its blocks). A bad checksum, bad lengths, or keys that are not
/// valid for their table are [`StoreError::Corrupt`]; never panics.
pub(crate) fn decode(bytes: &[u8]) -> Result<Record> {
    let bad = |m: &str| StoreError::Corrupt(format!("wal record: {m}"));
    let Header { seq, blocks, .. } = peek_header(bytes).ok_or_else(|| bad("bad header"))?;
    let payload_len = codec::le_u32(bytes, 29, "wal record")? as usize;
    let end = HEADER_BYTES
        .checked_add(payload_len)
        .filter(|&e| e + 4 <= bytes.len())
        .ok_or_else(|| bad("payload longer than the record"))?;
    let stored = codec::le_u32(bytes, end, "wal record")?;
    if crc_fast::crc32_iscsi(&bytes[..end]) != stored {
        return Err(bad("checksum mismatch"));
    }
    let mut c = Cursor {
        b: &bytes[..end],
        at: HEADER_BYTES,
    };
    let mut tables = Vec::with_capacity(REDO_TABLES);
    for table in 0..REDO_TABLES {
        let n = c.u32()? as usize;
        let mut entries = Vec::with_capacity(n.min(4096));
        for _ in 0..n {
            let k = c.bytes()?;
            if STR_KEY_TABLES.contains(&table) && std::str::from_utf8(&k).is_err() {
                return Err(bad("string key is not UTF-8"));
            }
            if table == U64_KEY_TABLE && k.len() != 8 {
                return Err(bad("block key is not 8 bytes"));
            }
            let v = match c.u8()? {
                0 => None,
                1 => Some(c.bytes()?),
                _ => return Err(bad("bad change flag")),
            };
            entries.push((k, v));
        }
        tables.push(entries);
    }
    let n = c.u32()? as usize;
    let mut runs = Vec::with_capacity(n.min(4096));
    for _ in 0..n {
        runs.push((c.u64()?, c.u64()?));
    }
    if c.at != end {
        return Err(bad("trailing bytes"));
    }
    Ok(Record {
        seq,
        blocks,
        tables,
        runs,
    })
}

impl Record {
    /// Expected crc32c of each block of this record's copy-on-write runs, from the extents it
    /// writes (extent records, and the extent maps inside the onodes it writes): `(physical
    /// block, crc)` in block order. Left out: blocks no extent covers, and
    /// blocks the record also carries a deferred write for (a run written early and then
    /// patched in the same group): their contents come from the record itself.
    pub(crate) fn expected_run_crcs(&self) -> Result<Vec<(u64, u32)>> {
        let mut out = Vec::new();
        let deferred: std::collections::HashSet<&[u8]> = self.tables[U64_KEY_TABLE]
            .iter()
            .filter(|(_, v)| v.is_some())
            .map(|(k, _)| k.as_slice())
            .collect();
        let mut extents = Vec::new();
        for (k, v) in &self.tables[REDO_EXTENTS] {
            let Some(v) = v else { continue };
            let (_, lblock) = split_block_key(k)?;
            extents.push(Extent::decode(lblock, v)?);
        }
        // Small objects' extents are inside their onodes.
        for v in self.tables[REDO_ONODES]
            .iter()
            .filter_map(|(_, v)| v.as_ref())
        {
            extents.extend(codec::Onode::decode(v)?.extents);
        }
        for e in extents {
            for (i, &crc) in e.crcs.iter().enumerate() {
                let p = e.pblock + i as u64;
                let patched = || deferred.contains(p.to_le_bytes().as_slice());
                if self.runs.iter().any(|&(s, n)| p >= s && p < s + n) && !patched() {
                    out.push((p, crc));
                }
            }
        }
        out.sort_unstable();
        Ok(out)
    }
}

/// The checkpoint marker (stored in the KV's meta table at every durable KV commit): replay starts
/// at ring position `head_block` with sequence number `next_seq`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Marker {
    /// Sequence number of the first record after the checkpoint.
    pub(crate) next_seq: u64,
    /// Ring position (blocks from the ring's start) where that record goes.
    pub(crate) head_block: u64,
}

/// Meta-table key of the checkpoint marker.
pub(crate) const MARKER_KEY: &str = "wal";

impl Marker {
    /// Sealed encoding.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut p = Vec::with_capacity(16);
        p.extend_from_slice(&self.next_seq.to_le_bytes());
        p.extend_from_slice(&self.head_block.to_le_bytes());
        codec::seal(&p)
    }

    /// Decodes a sealed marker.
    pub(crate) fn decode(b: &[u8]) -> Result<Self> {
        let p = codec::open(b, "wal marker")?;
        Ok(Self {
            next_seq: codec::le_u64(p, 0, "wal marker")?,
            head_block: codec::le_u64(p, 8, "wal marker")?,
        })
    }
}

/// How much of the ring was used at one moment since the last checkpoint (or by some records).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct RingFill {
    used: u64,
    records: u64,
}

impl std::ops::Add for RingFill {
    type Output = RingFill;

    fn add(self, other: RingFill) -> RingFill {
        RingFill {
            used: self.used + other.used,
            records: self.records + other.records,
        }
    }
}

/// The ring's position and fill since the last checkpoint.
#[derive(Debug, Clone)]
pub(crate) struct WalRing {
    /// Device block of ring position 0.
    pub(crate) first_block: u64,
    /// Ring length in blocks (0: no log; every group commits the KV durably).
    pub(crate) blocks: u64,
    /// Next write position.
    pub(crate) head: u64,
    /// Sequence number of the next record.
    pub(crate) next_seq: u64,
    /// Blocks consumed since the last checkpoint (records and the skipped tail at a wrap).
    used: u64,
    /// Records since the last checkpoint.
    records: u64,
}

impl WalRing {
    /// A ring starting at `marker` with nothing written since the checkpoint.
    pub(crate) fn new(first_block: u64, blocks: u64, marker: Marker) -> Self {
        Self {
            first_block,
            blocks,
            head: if marker.head_block < blocks {
                marker.head_block
            } else {
                0
            },
            next_seq: marker.next_seq,
            used: 0,
            records: 0,
        }
    }

    /// Largest record, blocks: a quarter of the ring, so that half the ring always holds two.
    pub(crate) fn max_record_blocks(&self) -> u64 {
        self.blocks / 4
    }

    /// Where a record of `n` blocks goes, or `None` when the group must commit the KV durably
    /// instead (no log, record too large, or a checkpoint due after `max_records` records or once
    /// half the ring is used: records since the checkpoint are never overwritten).
    pub(crate) fn place(&self, n: u64, max_records: u64) -> Option<u64> {
        if n == 0 || n > self.max_record_blocks() || self.records >= max_records {
            return None;
        }
        let (pos, skipped) = if self.head + n <= self.blocks {
            (self.head, 0)
        } else {
            (0, self.blocks - self.head)
        };
        (self.used + skipped + n <= self.blocks / 2).then_some(pos)
    }

    /// Records that a record of `n` blocks was written at `pos` (from [`WalRing::place`]);
    /// returns the fill it added (its blocks and any tail it skipped, one record).
    pub(crate) fn advance(&mut self, pos: u64, n: u64) -> RingFill {
        let skipped = if pos < self.head {
            self.blocks - self.head
        } else {
            0
        };
        self.used += skipped + n;
        self.head = if pos + n >= self.blocks { 0 } else { pos + n };
        self.next_seq += 1;
        self.records += 1;
        RingFill {
            used: skipped + n,
            records: 1,
        }
    }

    /// Records since the last checkpoint.
    pub(crate) fn records_since_checkpoint(&self) -> u64 {
        self.records
    }

    /// How close the records since the last checkpoint are to the hard limits at which a
    /// group waits for a checkpoint (`2 * max_records` records, half the ring): 0 just after
    /// one, 1 at a limit.
    pub(crate) fn backlog(&self, max_records: u64) -> f64 {
        if self.blocks == 0 {
            return 0.0;
        }
        let records = self.records as f64 / (2 * max_records.max(1)) as f64;
        let used = self.used as f64 / (self.blocks / 2).max(1) as f64;
        records.max(used)
    }

    /// Whether a background checkpoint should start: `max_records` records or a quarter of the
    /// ring since the last checkpoint (half the ring is the hard limit of [`WalRing::place`], so
    /// the checkpoint has the other quarter's worth of commits to land in).
    pub(crate) fn checkpoint_due(&self, max_records: u64) -> bool {
        self.blocks > 0 && (self.records >= max_records || self.used >= self.blocks / 4)
    }

    /// The fill a checkpoint frees once durable when the records of fill `pending` (the last
    /// ones written, whose groups are not yet durable) stay after its marker; with none
    /// pending, what a checkpoint carrying [`WalRing::marker`] frees.
    pub(crate) fn fill_except(&self, pending: RingFill) -> RingFill {
        RingFill {
            used: self.used.saturating_sub(pending.used),
            records: self.records.saturating_sub(pending.records),
        }
    }

    /// Notes that a checkpoint started at `fill` (from [`WalRing::fill`]) is durable: what was
    /// written before it no longer counts; what came after it still does.
    pub(crate) fn checkpointed_at(&mut self, fill: RingFill) {
        self.used -= fill.used.min(self.used);
        self.records -= fill.records.min(self.records);
    }

    /// The marker a durable KV commit stores now.
    pub(crate) fn marker(&self) -> Marker {
        Marker {
            next_seq: self.next_seq,
            head_block: self.head,
        }
    }

    /// Notes that a KV commit carrying [`WalRing::marker`] is durable.
    pub(crate) fn checkpointed(&mut self) {
        self.checkpointed_except(RingFill::default());
    }

    /// Notes that a KV commit is durable whose marker leaves the records of fill `pending` (the
    /// last ones written) after it: only they still count.
    pub(crate) fn checkpointed_except(&mut self, pending: RingFill) {
        self.used = pending.used.min(self.used);
        self.records = pending.records.min(self.records);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn redo() -> Redo {
        let mut r = Redo::default();
        r.tables[0].insert(b"k".to_vec(), Some(b"v".to_vec()));
        r.tables[2].insert(b"\0\0\0\x01obj".to_vec(), None);
        r.tables[6].insert(9u64.to_le_bytes().to_vec(), Some(vec![7; 100]));
        let prefix = codec::object_prefix(1, "obj");
        let e = Extent {
            lblock: 0,
            pblock: 40,
            crcs: vec![1, 2, 3],
        };
        r.tables[REDO_EXTENTS].insert(codec::block_key(&prefix, 0), Some(e.encode()));
        r
    }

    #[test]
    fn records_round_trip_and_pad_to_blocks() {
        let r = redo();
        let bytes = encode(9, 42, &r, &[(40, 2), (50, 1)], 512);
        assert_eq!(bytes.len() % 512, 0);
        assert_eq!(
            peek_header(&bytes),
            Some(Header {
                uuid: 9,
                seq: 42,
                blocks: (bytes.len() / 512) as u64
            })
        );
        let d = decode(&bytes).unwrap();
        assert_eq!(d.seq, 42);
        assert_eq!(d.runs, vec![(40, 2), (50, 1)]);
        for (i, t) in r.tables.iter().enumerate() {
            let want: Vec<_> = t.clone().into_iter().collect();
            assert_eq!(d.tables[i], want);
        }
        assert_eq!(d.expected_run_crcs().unwrap(), vec![(40, 1), (41, 2)]);
    }

    #[test]
    fn every_flipped_byte_and_every_truncation_is_refused_without_panic() {
        let bytes = encode(9, 7, &redo(), &[(40, 3)], 512);
        let used = encoded_len(&redo(), 1);
        for i in 0..used {
            let mut b = bytes.clone();
            b[i] ^= 0x5a;
            assert!(decode(&b).is_err(), "flip at {i} accepted");
        }
        for n in 0..used {
            assert!(decode(&bytes[..n]).is_err(), "truncation to {n} accepted");
        }
    }

    #[test]
    fn a_background_checkpoint_frees_only_what_came_before_it() {
        let mut ring = WalRing::new(
            1,
            64,
            Marker {
                next_seq: 1,
                head_block: 0,
            },
        );
        for i in 0..3 {
            assert!(!ring.checkpoint_due(3), "after {i} records");
            ring.advance(ring.place(2, 100).unwrap(), 2);
        }
        assert!(ring.checkpoint_due(3), "record count reached");
        let at_freeze = ring.fill_except(RingFill::default());
        let marker = ring.marker();
        // Commits go on while the checkpoint is in flight: 4 records of 4 blocks.
        for _ in 0..4 {
            ring.advance(ring.place(4, 100).unwrap(), 4);
        }
        assert_eq!(
            ring.place(12, 100),
            None,
            "22 + 12 blocks: more than half the ring since the durable marker"
        );
        ring.checkpointed_at(at_freeze);
        assert_eq!(ring.records_since_checkpoint(), 4);
        assert!(ring.checkpoint_due(100), "16 blocks: a quarter of the ring");
        assert_eq!(
            ring.place(12, 100),
            Some(22),
            "the 6 blocks before the marker are free"
        );
        assert_eq!(marker.next_seq, 4);
    }

    #[test]
    fn ring_places_records_wraps_and_asks_for_checkpoints() {
        let mut ring = WalRing::new(
            1,
            32,
            Marker {
                next_seq: 5,
                head_block: 28,
            },
        );
        assert_eq!(ring.max_record_blocks(), 8);
        assert_eq!(
            ring.place(9, 100),
            None,
            "larger than a quarter of the ring"
        );
        assert_eq!(ring.place(4, 100), Some(28));
        ring.advance(28, 4);
        assert_eq!((ring.head, ring.next_seq), (0, 6));
        assert_eq!(ring.place(8, 100), Some(0));
        ring.advance(0, 8);
        assert_eq!(ring.place(3, 100), Some(8));
        ring.advance(8, 3);
        assert_eq!(
            ring.place(2, 100),
            None,
            "half the ring used since the checkpoint"
        );
        ring.checkpointed();
        assert_eq!(
            ring.marker(),
            Marker {
                next_seq: 8,
                head_block: 11
            }
        );
        assert_eq!(ring.place(2, 100), Some(11));
        assert_eq!(ring.place(2, 0), None, "record-count checkpoint");
        // A record that does not fit before the end skips the tail, which counts as used.
        ring.advance(11, 2);
        ring.head = 30;
        assert_eq!(ring.place(4, 100), Some(0));
        ring.advance(0, 4);
        assert_eq!(ring.head, 4);
        let off = WalRing::new(1, 0, ring.marker());
        assert_eq!(
            off.place(1, 100),
            None,
            "no log: always a durable KV commit"
        );
    }
}
