//! Sealed JSON records for the gateway's small persisted structures (bucket registry, upload
//! and part records, users): magic byte, version byte, JSON, little-endian crc32c of all
//! before it. Pure: no I/O.

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::entry::EntryError;

/// Record encoding version written today.
pub const RECORD_VERSION: u8 = 1;
const MAGIC: u8 = b'R';

/// Encodes `value` as a sealed record.
pub fn seal<T: Serialize>(value: &T) -> Vec<u8> {
    let mut out = vec![MAGIC, RECORD_VERSION];
    serde_json::to_writer(&mut out, value).expect("record serializes");
    let crc = crc_fast::crc32_iscsi(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// Decodes a sealed record, checking magic, version and checksum.
pub fn unseal<T: DeserializeOwned>(buf: &[u8]) -> Result<T, EntryError> {
    if buf.len() < 6 {
        return Err(EntryError("record too short".into()));
    }
    let (body, crc) = buf.split_at(buf.len() - 4);
    if crc_fast::crc32_iscsi(body).to_le_bytes() != crc {
        return Err(EntryError("record checksum mismatch".into()));
    }
    if body[0] != MAGIC || body[1] != RECORD_VERSION {
        return Err(EntryError("bad record magic or version".into()));
    }
    serde_json::from_slice(&body[2..]).map_err(|e| EntryError(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_corruption() {
        let v = vec!["a".to_string(), "b".to_string()];
        let enc = seal(&v);
        assert_eq!(unseal::<Vec<String>>(&enc).unwrap(), v);
        for i in 0..enc.len() {
            let mut bad = enc.clone();
            bad[i] ^= 1;
            assert!(unseal::<Vec<String>>(&bad).is_err());
        }
    }
}
