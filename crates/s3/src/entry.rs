//! One object's index entry: its size, ETag, modification time, content headers, user
//! metadata and where its data lives. Encoded as a versioned, crc32c-sealed record (magic
//! `E`, version, little-endian JSON length, JSON, inline data, crc32c of everything before).
//! Pure: no I/O.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::acl::CannedAcl;
use crate::checksum::Checksum;

fn is_private(acl: &CannedAcl) -> bool {
    *acl == CannedAcl::Private
}

/// Encoding version written today.
pub const ENTRY_VERSION: u8 = 1;
const MAGIC: u8 = b'E';

/// A malformed entry.
#[derive(Debug, Error, PartialEq, Eq)]
#[error("bad index entry: {0}")]
pub struct EntryError(pub String);

/// A run of bytes striped over cluster objects `{id}.{n}`, each `stripe_bytes` long (the last
/// shorter).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Segment {
    /// Unique id (never derived from the key, so overwrites and deletes are safe).
    pub id: String,
    /// Length in bytes.
    pub size: u64,
}

impl Segment {
    /// Cluster object name of stripe `n`.
    pub fn stripe_name(&self, n: u64) -> String {
        stripe_name(&self.id, n)
    }

    /// Number of stripes of `stripe_bytes`.
    pub fn stripes(&self, stripe_bytes: u64) -> u64 {
        self.size.div_ceil(stripe_bytes.max(1))
    }
}

/// Cluster object name of stripe `n` of segment `id`.
pub fn stripe_name(id: &str, n: u64) -> String {
    format!("d.{id}.{n}")
}

/// Where an object's bytes are.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum DataLoc {
    /// In the entry itself (small objects): one omap read serves HEAD and GET.
    Inline,
    /// Segments in order (one for a PUT, one per part for a multipart upload).
    Striped {
        /// Stripe size used for every segment.
        stripe_bytes: u64,
        /// The segments, concatenated in order.
        segments: Vec<Segment>,
    },
}

/// Content headers stored and returned as given.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContentHeaders {
    /// `Content-Type`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_type: Option<String>,
    /// `Content-Encoding`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_encoding: Option<String>,
    /// `Content-Disposition`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_disposition: Option<String>,
    /// `Content-Language`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_language: Option<String>,
    /// `Cache-Control`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_control: Option<String>,
    /// User metadata (`x-amz-meta-*`, names lower-cased).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub meta: BTreeMap<String, String>,
}

impl ContentHeaders {
    /// Bytes the user metadata takes as AWS counts it (names + values).
    pub fn meta_bytes(&self) -> usize {
        self.meta.iter().map(|(k, v)| k.len() + v.len()).sum()
    }
}

/// An object's index entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// Size in bytes.
    pub size: u64,
    /// ETag without quotes (MD5 hex, or MD5-of-MD5s `-N` for multipart).
    pub etag: String,
    /// Last modification, milliseconds since the Unix epoch.
    pub mtime_ms: i64,
    /// Content headers and user metadata.
    pub headers: ContentHeaders,
    /// Where the data is.
    pub loc: DataLoc,
    /// Number of parts for a multipart object (0 otherwise).
    #[serde(default)]
    pub parts: u32,
    /// Canned ACL given when the object was written (PutObjectAcl records changes apart:
    /// `object_acl`).
    #[serde(default, skip_serializing_if = "is_private")]
    pub acl: CannedAcl,
    /// The `x-amz-checksum-*` value the client sent and the gateway verified, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checksum: Option<Checksum>,
    /// Its version id in a bucket that has had versioning enabled (`null` for the null
    /// version); None for an object written while versioning was never enabled, which is
    /// that bucket's null version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version_id: Option<String>,
    /// Whether this version is a delete marker (no data: a DELETE without a version id in a
    /// versioned bucket).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub delete_marker: bool,
    /// Tags given when the object was written (`x-amz-tagging`); later changes are recorded
    /// apart (`tag_ops`).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    /// Retention given when this version was written (headers or the bucket's default);
    /// later changes are recorded apart (`lock_ops`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention: Option<crate::object_lock::Retention>,
    /// Whether a legal hold was put on this version when it was written.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub legal_hold: bool,
    /// The null version's place among its key's versions (see `versions`), fixed when it
    /// was written; None for other versions and for an object older than versioning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub null_rank: Option<String>,
    /// The storage class whose pool holds the data (None: STANDARD, the gateway's pool);
    /// never set on an inline entry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_class: Option<String>,
    /// The data when `loc` is `Inline` (carried after the JSON, not in it).
    #[serde(skip)]
    pub inline: Vec<u8>,
}

impl Entry {
    /// Encodes the entry.
    pub fn encode(&self) -> Vec<u8> {
        let json = serde_json::to_vec(self).expect("entry serializes");
        let mut out = Vec::with_capacity(json.len() + self.inline.len() + 10);
        out.push(MAGIC);
        out.push(ENTRY_VERSION);
        // An entry's fields are bounded by the request limits (metadata, tags, parts), so its
        // JSON is far below the 4 GiB its u32 length can say.
        let len = u32::try_from(json.len()).expect("an entry's JSON is far below 4 GiB");
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&json);
        out.extend_from_slice(&self.inline);
        let crc = crc_fast::crc32_iscsi(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// Decodes an entry, checking magic, version, lengths and checksum.
    pub fn decode(buf: &[u8]) -> Result<Entry, EntryError> {
        let bad = |m: &str| EntryError(m.to_string());
        if buf.len() < 10 {
            return Err(bad("too short"));
        }
        let (body, crc) = buf.split_at(buf.len() - 4);
        let crc = u32::from_le_bytes(crc.try_into().expect("4 bytes"));
        if crc_fast::crc32_iscsi(body) != crc {
            return Err(bad("checksum mismatch"));
        }
        if body[0] != MAGIC {
            return Err(bad("bad magic"));
        }
        if body[1] != ENTRY_VERSION {
            return Err(EntryError(format!("unknown version {}", body[1])));
        }
        let len = u32::from_le_bytes(body[2..6].try_into().expect("4 bytes")) as usize;
        let json = body
            .get(6..6usize.saturating_add(len))
            .ok_or_else(|| bad("JSON length past the end"))?;
        let mut entry: Entry =
            serde_json::from_slice(json).map_err(|e| EntryError(e.to_string()))?;
        entry.inline = body[6 + len..].to_vec();
        if matches!(entry.loc, DataLoc::Inline) && entry.inline.len() as u64 != entry.size {
            return Err(bad("inline data length differs from size"));
        }
        Ok(entry)
    }

    /// Every segment of the object's data (none when inline).
    pub fn segments(&self) -> &[Segment] {
        match &self.loc {
            DataLoc::Inline => &[],
            DataLoc::Striped { segments, .. } => segments,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(inline: bool) -> Entry {
        let mut headers = ContentHeaders {
            content_type: Some("text/plain".into()),
            ..Default::default()
        };
        headers.meta.insert("color".into(), "blue".into());
        Entry {
            size: 3,
            etag: "abc".into(),
            mtime_ms: 1_700_000_000_000,
            headers,
            loc: if inline {
                DataLoc::Inline
            } else {
                DataLoc::Striped {
                    stripe_bytes: 4 << 20,
                    segments: vec![Segment {
                        id: "x".into(),
                        size: 3,
                    }],
                }
            },
            parts: 0,
            acl: Default::default(),
            checksum: None,
            version_id: None,
            delete_marker: false,
            null_rank: None,
            storage_class: None,
            tags: Default::default(),
            retention: None,
            legal_hold: false,
            inline: if inline { b"hey".to_vec() } else { Vec::new() },
        }
    }

    #[test]
    fn round_trips() {
        for inline in [true, false] {
            let e = sample(inline);
            assert_eq!(Entry::decode(&e.encode()).unwrap(), e);
        }
    }

    #[test]
    fn every_single_byte_corruption_is_rejected() {
        let enc = sample(true).encode();
        for i in 0..enc.len() {
            let mut bad = enc.clone();
            bad[i] ^= 0x40;
            assert!(Entry::decode(&bad).is_err(), "flip at {i} accepted");
        }
        for n in 0..enc.len() {
            assert!(Entry::decode(&enc[..n]).is_err());
        }
    }

    #[test]
    fn stripe_count() {
        let s = Segment {
            id: "a".into(),
            size: 9,
        };
        assert_eq!(s.stripes(4), 3);
        assert_eq!(s.stripes(9), 1);
        assert_eq!(
            Segment {
                id: "a".into(),
                size: 0
            }
            .stripes(4),
            0
        );
    }
}
