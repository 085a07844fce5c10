//! Internal decoders exposed to the fuzz targets (`crates/fuzz`), behind the `fuzzing` feature.

use crate::error::Result;
use crate::wal;

/// Wraps `body` as a WAL record would carry it: a valid header (magic, version, `blocks`, the
/// payload length) and the record's crc32c, so a fuzzer's bytes reach the record's parser.
pub fn seal_wal_record(seq: u64, blocks: u32, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(wal::HEADER_BYTES + body.len() + 4);
    out.extend_from_slice(wal::WAL_MAGIC);
    out.push(wal::WAL_VERSION);
    out.extend_from_slice(&0x5eed_u64.to_le_bytes());
    out.extend_from_slice(&seq.to_le_bytes());
    out.extend_from_slice(&blocks.max(1).to_le_bytes());
    // A fuzzer's body longer than a record holds is cut to what the length field says.
    let len = u32::try_from(body.len()).unwrap_or(u32::MAX);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&body[..body.len().min(len as usize)]);
    let crc = crc_fast::crc32_iscsi(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// Decodes a WAL record as replay does, then computes what replay checks of it (the block
/// checksums its extents promise); returns how many KV changes and runs it carries.
pub fn decode_wal_record(bytes: &[u8]) -> Result<(usize, usize)> {
    let record = wal::decode(bytes)?;
    record.expected_run_crcs()?;
    let changes = record.tables.iter().map(Vec::len).sum();
    Ok((changes, record.runs.len()))
}

/// Decodes the WAL's checkpoint marker (kept in the KV).
pub fn decode_wal_marker(bytes: &[u8]) -> Result<(u64, u64)> {
    wal::Marker::decode(bytes).map(|m| (m.next_seq, m.head_block))
}
