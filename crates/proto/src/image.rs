//! The whole state of one object (data, extended attributes, omap) as recovery moves it between
//! OSDs: a little-endian u64 data length, the data, a u32 length and the [`crate::pairs`]
//! encoding of the xattrs, then the pairs encoding of the omap up to the end.

use bytes::{BufMut, Bytes, BytesMut};

use crate::pairs::{decode_pairs, encode_pairs};
use crate::ProtoError;

/// One object's full content.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ObjectImage {
    /// The object's bytes.
    pub data: Bytes,
    /// Extended attributes (including the OSD's own, such as the version).
    pub xattrs: Vec<(String, Vec<u8>)>,
    /// Omap entries in key order.
    pub omap: Vec<(Vec<u8>, Vec<u8>)>,
}

impl ObjectImage {
    /// Encodes the image.
    pub fn encode(&self) -> Bytes {
        let xattrs: Vec<(&[u8], &[u8])> = self
            .xattrs
            .iter()
            .map(|(k, v)| (k.as_bytes(), v.as_slice()))
            .collect();
        let x = encode_pairs(&xattrs);
        let o = encode_pairs(&self.omap);
        let mut out = BytesMut::with_capacity(12 + self.data.len() + x.len() + o.len());
        out.put_u64_le(self.data.len() as u64);
        out.put_slice(&self.data);
        out.put_u32_le(crate::length_field(x.len(), "xattr block"));
        out.put_slice(&x);
        out.put_slice(&o);
        out.freeze()
    }

    /// Decodes an image; `input`'s data part is shared, not copied.
    pub fn decode(input: &Bytes) -> Result<ObjectImage, ProtoError> {
        let short = || ProtoError("object image truncated".into());
        let head = input.get(..8).ok_or_else(short)?;
        let data_len = u64::from_le_bytes(head.try_into().map_err(|_| short())?);
        let data_end = usize::try_from(data_len)
            .ok()
            .and_then(|l| l.checked_add(8))
            .filter(|&e| e.checked_add(4).is_some_and(|x| x <= input.len()))
            .ok_or_else(short)?;
        let data = input.slice(8..data_end);
        let xl = &input[data_end..data_end + 4];
        let x_len = u32::from_le_bytes([xl[0], xl[1], xl[2], xl[3]]) as usize;
        let x_start = data_end + 4;
        let x_end = x_start
            .checked_add(x_len)
            .filter(|&e| e <= input.len())
            .ok_or_else(short)?;
        let xattrs = decode_pairs(&input[x_start..x_end])?
            .into_iter()
            .map(|(k, v)| {
                String::from_utf8(k)
                    .map(|k| (k, v))
                    .map_err(|_| ProtoError("xattr name is not UTF-8".into()))
            })
            .collect::<Result<_, _>>()?;
        let omap = decode_pairs(&input[x_end..])?;
        Ok(ObjectImage { data, xattrs, omap })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_truncation() {
        let img = ObjectImage {
            data: Bytes::from_static(b"hello"),
            xattrs: vec![("_v".into(), vec![1, 2])],
            omap: vec![(b"k".to_vec(), b"v".to_vec())],
        };
        let enc = img.encode();
        assert_eq!(ObjectImage::decode(&enc).unwrap(), img);
        for cut in 0..enc.len() {
            assert!(ObjectImage::decode(&enc.slice(..cut)).is_err(), "cut {cut}");
        }
        let mut bad = enc.to_vec();
        bad[0..8].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(ObjectImage::decode(&Bytes::from(bad)).is_err());
    }
}
