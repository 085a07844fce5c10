//! `x-amz-checksum-*` values: which one a request sent (at most one of CRC32, CRC32C, SHA-1,
//! SHA-256, CRC64NVME, base64 of the big-endian digest), a hasher computing it over a body as it is
//! stored, and the stored form an index entry keeps so GET and HEAD can return it. Pure: no
//! I/O.

use crc_fast::{CrcAlgorithm, Digest as CrcDigest};
use s3s::{s3_error, S3Result};
use serde::{Deserialize, Serialize};
use sha1::Sha1;
use sha2::{Digest, Sha256};

/// A checksum algorithm S3 clients send.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChecksumAlgo {
    /// CRC-32 (ISO-HDLC, as zlib).
    Crc32,
    /// CRC-32C (Castagnoli).
    Crc32c,
    /// SHA-1.
    Sha1,
    /// SHA-256.
    Sha256,
    /// CRC-64/NVME.
    Crc64Nvme,
}

/// Every algorithm, in the order of [`Checksum::slots`].
pub const ALGOS: [ChecksumAlgo; 5] = [
    ChecksumAlgo::Crc32,
    ChecksumAlgo::Crc32c,
    ChecksumAlgo::Sha1,
    ChecksumAlgo::Sha256,
    ChecksumAlgo::Crc64Nvme,
];

impl ChecksumAlgo {
    /// Length of the raw digest in bytes.
    pub fn digest_len(self) -> usize {
        match self {
            ChecksumAlgo::Crc32 | ChecksumAlgo::Crc32c => 4,
            ChecksumAlgo::Crc64Nvme => 8,
            ChecksumAlgo::Sha1 => 20,
            ChecksumAlgo::Sha256 => 32,
        }
    }

    /// The header carrying it (`x-amz-checksum-crc32`).
    pub fn header(self) -> &'static str {
        match self {
            ChecksumAlgo::Crc32 => "x-amz-checksum-crc32",
            ChecksumAlgo::Crc32c => "x-amz-checksum-crc32c",
            ChecksumAlgo::Sha1 => "x-amz-checksum-sha1",
            ChecksumAlgo::Sha256 => "x-amz-checksum-sha256",
            ChecksumAlgo::Crc64Nvme => "x-amz-checksum-crc64nvme",
        }
    }
}

/// A checksum of a whole object: algorithm and base64 value.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checksum {
    /// Algorithm.
    pub algo: ChecksumAlgo,
    /// Base64 of the digest, as the client sent it.
    pub value: String,
}

impl Checksum {
    /// S3's checksum type of the value: `COMPOSITE` for a multipart object's checksum of
    /// part checksums (`...-N`), `FULL_OBJECT` otherwise.
    pub fn type_name(&self) -> &'static str {
        if self.value.contains('-') {
            "COMPOSITE"
        } else {
            "FULL_OBJECT"
        }
    }

    /// `value` (base64, of `algo`) in the slot of its algorithm, as [`Checksum::slots`].
    pub fn slots_of(algo: ChecksumAlgo, value: &str) -> [Option<String>; 5] {
        Checksum {
            algo,
            value: value.to_string(),
        }
        .slots()
    }

    /// The value in the slot of its algorithm among (CRC32, CRC32C, SHA-1, SHA-256,
    /// CRC64NVME): how the S3 outputs carry it.
    pub fn slots(&self) -> [Option<String>; 5] {
        let mut out: [Option<String>; 5] = Default::default();
        let i = ALGOS
            .iter()
            .position(|a| *a == self.algo)
            .expect("every algorithm has a slot");
        out[i] = Some(self.value.clone());
        out
    }
}

/// The checksum a request asks the gateway to verify, from the five optional header values
/// (in the order of [`ALGOS`]). More than one, or a value that is not the
/// base64 of a digest of the right length, is InvalidRequest.
pub fn requested(values: [Option<&str>; 5]) -> S3Result<Option<Checksum>> {
    let algos = ALGOS;
    let mut sent = algos
        .into_iter()
        .zip(values)
        .filter_map(|(a, v)| Some((a, v?)));
    let Some((algo, value)) = sent.next() else {
        return Ok(None);
    };
    if sent.next().is_some() {
        return Err(s3_error!(
            InvalidRequest,
            "at most one x-amz-checksum-* header may be sent"
        ));
    }
    let value = value.trim();
    let ok = base64_simd::STANDARD
        .decode_to_vec(value)
        .is_ok_and(|raw| raw.len() == algo.digest_len());
    if !ok {
        return Err(s3_error!(
            InvalidRequest,
            "{} is not the base64 of a {}-byte digest",
            algo.header(),
            algo.digest_len()
        ));
    }
    Ok(Some(Checksum {
        algo,
        value: value.to_string(),
    }))
}

/// Computes one checksum over a body fed in order.
#[derive(Clone)]
pub enum ChecksumHasher {
    /// CRC-32 or CRC-32C.
    Crc(CrcDigest),
    /// CRC-64/NVME.
    Crc64(CrcDigest),
    /// SHA-1.
    Sha1(Sha1),
    /// SHA-256.
    Sha256(Sha256),
}

impl ChecksumHasher {
    /// A hasher for `algo`.
    pub fn new(algo: ChecksumAlgo) -> Self {
        match algo {
            ChecksumAlgo::Crc32 => ChecksumHasher::Crc(CrcDigest::new(CrcAlgorithm::Crc32IsoHdlc)),
            ChecksumAlgo::Crc32c => ChecksumHasher::Crc(CrcDigest::new(CrcAlgorithm::Crc32Iscsi)),
            ChecksumAlgo::Sha1 => ChecksumHasher::Sha1(Sha1::new()),
            ChecksumAlgo::Sha256 => ChecksumHasher::Sha256(Sha256::new()),
            ChecksumAlgo::Crc64Nvme => {
                ChecksumHasher::Crc64(CrcDigest::new(CrcAlgorithm::Crc64Nvme))
            }
        }
    }

    /// Feeds the next bytes.
    pub fn update(&mut self, data: &[u8]) {
        match self {
            ChecksumHasher::Crc(d) | ChecksumHasher::Crc64(d) => d.update(data),
            ChecksumHasher::Sha1(d) => Digest::update(d, data),
            ChecksumHasher::Sha256(d) => Digest::update(d, data),
        }
    }

    /// The base64 checksum of everything fed.
    pub fn finish(self) -> String {
        let raw: Vec<u8> = match self {
            ChecksumHasher::Crc(d) => {
                let v = u32::try_from(d.finalize()).expect("a 32-bit CRC");
                v.to_be_bytes().to_vec()
            }
            ChecksumHasher::Crc64(d) => d.finalize().to_be_bytes().to_vec(),
            ChecksumHasher::Sha1(d) => d.finalize().to_vec(),
            ChecksumHasher::Sha256(d) => d.finalize().to_vec(),
        };
        base64_simd::STANDARD.encode_to_string(raw)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(algo: ChecksumAlgo, parts: &[&[u8]]) -> String {
        let mut h = ChecksumHasher::new(algo);
        for p in parts {
            h.update(p);
        }
        h.finish()
    }

    /// Values botocore computes for b"hello world" (and the standard check values).
    #[test]
    fn known_values_in_any_split() {
        let hw: &[&[u8]] = &[b"hello", b" ", b"world"];
        assert_eq!(of(ChecksumAlgo::Crc32, hw), "DUoRhQ==");
        assert_eq!(of(ChecksumAlgo::Crc32c, hw), "yZRlqg==");
        assert_eq!(of(ChecksumAlgo::Sha1, hw), "Kq5sNclPz7QV2+lfQIuc6R7oRu0=");
        assert_eq!(
            of(ChecksumAlgo::Sha256, hw),
            "uU0nuZNNPgilLlLX2n2r+sSE7+N6U4DukIj3rOLvzek="
        );
        assert_eq!(
            of(ChecksumAlgo::Crc32, &[b"hello world"]),
            of(ChecksumAlgo::Crc32, hw)
        );
        assert_eq!(of(ChecksumAlgo::Crc32, &[]), "AAAAAA==");
        // CRC-64/NVME's check value: 0xAE8B14860A799888 for "123456789".
        let check = base64_simd::STANDARD.encode_to_string(0xAE8B_1486_0A79_9888u64.to_be_bytes());
        assert_eq!(of(ChecksumAlgo::Crc64Nvme, &[b"1234", b"56789"]), check);
    }

    #[test]
    fn one_well_formed_value_at_most() {
        assert_eq!(requested([None; 5]).unwrap(), None);
        let c = requested([None, Some("yZRlqg=="), None, None, None])
            .unwrap()
            .unwrap();
        assert_eq!(c.algo, ChecksumAlgo::Crc32c);
        for bad in [
            [Some("DUoRhQ=="), Some("yZRlqg=="), None, None, None],
            [Some("DUoRhQ"), None, None, None, None],
            [Some("not base64!"), None, None, None, None],
            [None, None, Some("DUoRhQ=="), None, None],
            [None, None, None, Some(""), None],
            [None, None, None, None, Some("DUoRhQ==")],
        ] {
            let e = requested(bad).unwrap_err();
            assert_eq!(e.code(), &s3s::S3ErrorCode::InvalidRequest, "{bad:?}");
        }
    }
}
