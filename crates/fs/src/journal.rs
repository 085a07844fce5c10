//! The metadata journal's records: each names one answered mutation (who asked, its request
//! id, the updates it made and the answer given), framed as a little-endian u32 length, the
//! crc32c of the payload, then the payload in MessagePack. The MDS appends a batch of records
//! to the journal object before it tells their clients they are durable; after a crash it
//! replays them in order (the updates are idempotent) and remembers the answers, so that a
//! client resending a request (or replaying one answered early) gets the same answer instead
//! of a second application.

use cairn_proto::mds::MdsAnswer;
use serde::{Deserialize, Serialize};

use crate::namespace::Update;

/// Bytes before each record's payload: its length and its crc32c.
const RECORD_PREFIX_BYTES: usize = 8;
/// Largest record accepted when reading a journal back (a longer length is damage).
pub const MAX_RECORD_BYTES: usize = 1 << 20;

/// One journaled mutation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// The client that asked.
    pub client: u64,
    /// Its request id.
    pub tid: u64,
    /// What the mutation changed.
    pub updates: Vec<Update>,
    /// What the client was answered.
    pub answer: Result<MdsAnswer, i32>,
}

/// Appends `record`'s framed bytes to `out`.
pub fn encode(record: &Record, out: &mut Vec<u8>) {
    let payload = rmp_serde::to_vec(record).unwrap_or_default();
    assert!(
        payload.len() <= MAX_RECORD_BYTES,
        "a journal record of {} bytes is past the limit its reader enforces",
        payload.len()
    );
    let len = u32::try_from(payload.len()).unwrap_or(u32::MAX);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&crc_fast::crc32_iscsi(&payload).to_le_bytes());
    out.extend_from_slice(&payload);
}

/// What a journal's bytes hold: the records up to the first that is incomplete or damaged,
/// and what stopped the reading there, if anything did.
#[derive(Debug, Default)]
pub struct Decoded {
    /// Whole records in order.
    pub records: Vec<Record>,
    /// Why reading stopped before the end, if it did.
    pub damage: Option<String>,
}

/// Reads back the records in `bytes`.
pub fn decode(bytes: &[u8]) -> Decoded {
    let mut out = Decoded::default();
    let mut at = 0;
    while at < bytes.len() {
        let Some(prefix) = bytes.get(at..at + RECORD_PREFIX_BYTES) else {
            out.damage = Some(format!("a record prefix cut short at byte {at}"));
            break;
        };
        let len = u32::from_le_bytes([prefix[0], prefix[1], prefix[2], prefix[3]]) as usize;
        let crc = u32::from_le_bytes([prefix[4], prefix[5], prefix[6], prefix[7]]);
        if len > MAX_RECORD_BYTES {
            out.damage = Some(format!("a record of {len} bytes at byte {at}"));
            break;
        }
        let start = at + RECORD_PREFIX_BYTES;
        let Some(payload) = bytes.get(start..start + len) else {
            out.damage = Some(format!("a record cut short at byte {at}"));
            break;
        };
        if crc_fast::crc32_iscsi(payload) != crc {
            out.damage = Some(format!("a record failing its checksum at byte {at}"));
            break;
        }
        match rmp_serde::from_slice::<Record>(payload) {
            Ok(r) => out.records.push(r),
            Err(e) => {
                out.damage = Some(format!("an undecodable record at byte {at}: {e}"));
                break;
            }
        }
        at = start + len;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(tid: u64) -> Record {
        Record {
            client: 7,
            tid,
            updates: vec![Update::NextIno(tid + 2), Update::DelInode(tid)],
            answer: if tid.is_multiple_of(2) {
                Ok(MdsAnswer::Done)
            } else {
                Err(libc::EEXIST)
            },
        }
    }

    #[test]
    fn records_read_back_in_order() {
        let mut bytes = Vec::new();
        for tid in 0..10 {
            encode(&record(tid), &mut bytes);
        }
        let d = decode(&bytes);
        assert_eq!(d.damage, None);
        assert_eq!(d.records, (0..10).map(record).collect::<Vec<_>>());
    }

    #[test]
    fn reading_stops_at_a_torn_or_damaged_record_and_says_why() {
        let mut bytes = Vec::new();
        for tid in 0..3 {
            encode(&record(tid), &mut bytes);
        }
        let whole = bytes.len();
        encode(&record(3), &mut bytes);
        for cut in [whole + 3, whole + 9, bytes.len() - 1] {
            let d = decode(&bytes[..cut]);
            assert_eq!(d.records.len(), 3);
            assert!(d.damage.unwrap().contains("cut short"));
        }
        let mut flipped = bytes.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 1;
        let d = decode(&flipped);
        assert_eq!(d.records.len(), 3);
        assert!(d.damage.unwrap().contains("checksum"));
        let mut huge = bytes[..whole].to_vec();
        huge.extend_from_slice(&u32::MAX.to_le_bytes());
        huge.extend_from_slice(&[0; 4]);
        assert!(decode(&huge).damage.unwrap().contains("bytes at byte"));
    }
}
