//! Mount-time recovery from the write-ahead log: read the records written since the last
//! checkpoint in order, discard the last one if its data blocks did not all reach the device
//! (it was never acknowledged), apply the rest to the KV, and checkpoint. Only the last record
//! can be in that state: a group writes its record only once the previous group's flush has
//! completed, even with two groups in flight (module `inflight`).
//!
//! It must never apply a record out of sequence, one whose checksum fails, or one after a gap.

use crate::codec::Superblock;
use crate::error::{kv, Result};
use crate::kv::META;
use crate::logged::replay_tables;
use crate::store::Counters;
use crate::wal::{self, Record, WalRing};
use cairn_blockdev::BlockDevice;
use cairn_convert::usize_of;
use redb::Database;
use std::collections::HashMap;
use std::sync::atomic::Ordering;

/// Where and what to look for in the log.
struct Scan<'a> {
    dev: &'a dyn BlockDevice,
    block_bytes: u64,
    uuid: u64,
}

/// The record of this store with sequence number `seq` at ring position `pos`, if one is there
/// whole.
async fn read_record(
    scan: &Scan<'_>,
    ring: &WalRing,
    pos: u64,
    seq: u64,
) -> Result<Option<Record>> {
    let (dev, block_bytes) = (scan.dev, scan.block_bytes);
    let mut first = vec![0u8; usize_of(block_bytes)];
    dev.read((ring.first_block + pos) * block_bytes, &mut first)
        .await?;
    let Some(h) = wal::peek_header(&first) else {
        return Ok(None);
    };
    let blocks = h.blocks;
    if h.uuid != scan.uuid || h.seq != seq || pos + blocks > ring.blocks {
        return Ok(None);
    }
    let mut whole = vec![0u8; usize_of(blocks * block_bytes)];
    whole[..usize_of(block_bytes)].copy_from_slice(&first);
    if blocks > 1 {
        dev.read(
            (ring.first_block + pos + 1) * block_bytes,
            &mut whole[usize_of(block_bytes)..],
        )
        .await?;
    }
    // A torn or stale record is where the log ends, not an error.
    Ok(wal::decode(&whole).ok())
}

/// Whether every block of `rec`'s copy-on-write runs holds the contents its extents expect.
async fn data_landed(dev: &dyn BlockDevice, block_bytes: u64, rec: &Record) -> Result<bool> {
    let expected: HashMap<u64, u32> = rec.expected_run_crcs()?.into_iter().collect();
    let bs = usize_of(block_bytes);
    for &(start, n) in &rec.runs {
        let mut buf = vec![0u8; usize_of(n) * bs];
        dev.read(start * block_bytes, &mut buf).await?;
        for (i, block) in buf.chunks_exact(bs).enumerate() {
            if let Some(&want) = expected.get(&(start + i as u64)) {
                if crc_fast::crc32_iscsi(block) != want {
                    return Ok(false);
                }
            }
        }
    }
    Ok(true)
}

/// Replays the log after `ring`'s marker into `db` and checkpoints (always, so that the next
/// record gets a sequence number no torn record on the device carries), leaving `ring` at the new
/// head with nothing to replay.
pub(crate) async fn replay_log(
    dev: &dyn BlockDevice,
    db: &Database,
    sb: &Superblock,
    ring: &mut WalRing,
    counters: &Counters,
) -> Result<()> {
    if ring.blocks == 0 {
        return Ok(());
    }
    let block_bytes = sb.block_bytes;
    let scan = Scan {
        dev,
        block_bytes,
        uuid: sb.uuid,
    };
    let mut records: Vec<(u64, Record)> = Vec::new();
    let (mut pos, mut seq, mut consumed) = (ring.head, ring.next_seq, 0u64);
    loop {
        let mut found = read_record(&scan, ring, pos, seq).await?.map(|r| (pos, r));
        if found.is_none() && pos != 0 {
            found = read_record(&scan, ring, 0, seq).await?.map(|r| (0, r));
        }
        let Some((at, rec)) = found else { break };
        consumed += rec.blocks + if at < pos { ring.blocks - pos } else { 0 };
        if consumed > ring.blocks {
            break;
        }
        pos = if at + rec.blocks >= ring.blocks {
            0
        } else {
            at + rec.blocks
        };
        seq += 1;
        records.push((at, rec));
    }
    if let Some((at, last)) = records.last() {
        if !data_landed(dev, block_bytes, last).await? {
            pos = *at;
            records.pop();
            counters.wal_discarded.fetch_add(1, Ordering::Relaxed);
        }
    }
    let mut wtx = db.begin_write().map_err(kv)?;
    wtx.set_durability(redb::Durability::Immediate);
    for (_, rec) in &records {
        replay_tables(
            &wtx,
            std::array::from_fn(|i| rec.tables[i].iter().map(|(k, v)| (k, v))),
            |_| true,
        )?;
    }
    ring.head = pos;
    ring.next_seq = seq + 1;
    ring.checkpointed();
    wtx.open_table(META)
        .map_err(kv)?
        .insert(wal::MARKER_KEY, ring.marker().encode().as_slice())
        .map_err(kv)?;
    wtx.commit().map_err(kv)?;
    counters
        .wal_replayed
        .fetch_add(records.len() as u64, Ordering::Relaxed);
    Ok(())
}
