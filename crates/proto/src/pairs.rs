//! Binary encoding of (key, value) lists for xattrs, omap entries and listings: a little-endian
//! u32 count, then per pair a u32 key length, the key, a u32 value length, the value. Decoding
//! checks every length against the input and never panics.

use bytes::{BufMut, BytesMut};

use crate::ProtoError;

/// A list of (key, value) byte pairs.
pub type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

/// Most pairs in one message (explicit limit).
pub const MAX_PAIRS: usize = 1 << 20;

/// Encodes pairs.
pub fn encode_pairs<K: AsRef<[u8]>, V: AsRef<[u8]>>(pairs: &[(K, V)]) -> Vec<u8> {
    let size: usize = pairs
        .iter()
        .map(|(k, v)| 8 + k.as_ref().len() + v.as_ref().len())
        .sum();
    let mut out = BytesMut::with_capacity(4 + size);
    out.put_u32_le(crate::length_field(pairs.len(), "pair count"));
    for (k, v) in pairs {
        out.put_u32_le(crate::length_field(k.as_ref().len(), "key"));
        out.put_slice(k.as_ref());
        out.put_u32_le(crate::length_field(v.as_ref().len(), "value"));
        out.put_slice(v.as_ref());
    }
    out.to_vec()
}

/// Encodes keys alone (values empty).
pub fn encode_keys<K: AsRef<[u8]>>(keys: &[K]) -> Vec<u8> {
    let pairs: Vec<(&[u8], &[u8])> = keys.iter().map(|k| (k.as_ref(), &[][..])).collect();
    encode_pairs(&pairs)
}

/// Decodes pairs; the whole input must be consumed.
pub fn decode_pairs(input: &[u8]) -> Result<Pairs, ProtoError> {
    let mut cur = Cursor { buf: input, at: 0 };
    let n = cur.u32()? as usize;
    if n > MAX_PAIRS {
        return Err(ProtoError(format!("{n} pairs > limit {MAX_PAIRS}")));
    }
    let mut out = Vec::with_capacity(n.min(input.len() / 8));
    for _ in 0..n {
        let k = cur.bytes()?;
        let v = cur.bytes()?;
        out.push((k.to_vec(), v.to_vec()));
    }
    if cur.at != input.len() {
        return Err(ProtoError(format!(
            "{} trailing bytes after pairs",
            input.len() - cur.at
        )));
    }
    Ok(out)
}

struct Cursor<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], ProtoError> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&e| e <= self.buf.len())
            .ok_or_else(|| ProtoError(format!("pairs truncated at byte {}", self.at)))?;
        let s = &self.buf[self.at..end];
        self.at = end;
        Ok(s)
    }

    fn u32(&mut self) -> Result<u32, ProtoError> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn bytes(&mut self) -> Result<&'a [u8], ProtoError> {
        let n = self.u32()? as usize;
        self.take(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_garbage() {
        let pairs = vec![(b"a".to_vec(), b"1".to_vec()), (vec![], vec![0u8; 300])];
        let enc = encode_pairs(&pairs);
        assert_eq!(decode_pairs(&enc).unwrap(), pairs);
        for cut in 0..enc.len() {
            assert!(decode_pairs(&enc[..cut]).is_err(), "cut at {cut}");
        }
        let mut long = enc.clone();
        long.push(0);
        assert!(decode_pairs(&long).is_err());
        assert!(decode_pairs(&[0xff, 0xff, 0xff, 0xff]).is_err());
        assert_eq!(decode_pairs(&encode_keys(&["x", "y"])).unwrap().len(), 2);
    }
}
