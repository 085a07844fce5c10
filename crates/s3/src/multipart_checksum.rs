//! Checksums of multipart objects, as S3 defines them: an upload declares an algorithm and a
//! type (CreateMultipartUpload's `x-amz-checksum-algorithm` and `x-amz-checksum-type`); each
//! part's checksum in that algorithm is kept with the part; at completion the object's
//! checksum is either COMPOSITE (the algorithm over the parts' raw digests, `-N` appended:
//! CRC32, CRC32C, SHA-1, SHA-256) or FULL_OBJECT (the CRC of the whole object, combined from
//! the parts' CRCs and lengths: CRC32, CRC32C, CRC64NVME). Pure: no I/O.

use crc_fast::CrcAlgorithm;
use s3s::dto::{ChecksumAlgorithm, ChecksumType};
use s3s::{s3_error, S3Result};
use serde::{Deserialize, Serialize};

use crate::checksum::{ChecksumAlgo, ChecksumHasher};

/// How an upload's parts' checksums make the object's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Kind {
    /// The algorithm over the concatenated part digests, `-N`.
    Composite,
    /// The CRC of the whole object.
    FullObject,
}

/// An upload's declared checksum.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UploadChecksum {
    /// Algorithm of every part and of the object.
    pub algo: ChecksumAlgo,
    /// How the object's checksum is made.
    pub kind: Kind,
}

/// The algorithm S3 names `name` (`CRC32`, `CRC32C`, `SHA1`, `SHA256`, `CRC64NVME`).
pub fn algo_named(name: &str) -> S3Result<ChecksumAlgo> {
    match name.to_ascii_uppercase().as_str() {
        "CRC32" => Ok(ChecksumAlgo::Crc32),
        "CRC32C" => Ok(ChecksumAlgo::Crc32c),
        "SHA1" => Ok(ChecksumAlgo::Sha1),
        "SHA256" => Ok(ChecksumAlgo::Sha256),
        "CRC64NVME" => Ok(ChecksumAlgo::Crc64Nvme),
        other => Err(s3_error!(
            InvalidRequest,
            "unknown checksum algorithm `{other}`"
        )),
    }
}

/// The checksum an upload declares (None: none). The type defaults as S3's does: FULL_OBJECT
/// for CRC64NVME, COMPOSITE otherwise; SHA algorithms have no FULL_OBJECT, CRC64NVME no
/// COMPOSITE (InvalidRequest).
pub fn declared(
    algo: Option<&ChecksumAlgorithm>,
    kind: Option<&ChecksumType>,
) -> S3Result<Option<UploadChecksum>> {
    let Some(algo) = algo.map(|a| algo_named(a.as_str())).transpose()? else {
        if kind.is_some() {
            return Err(s3_error!(
                InvalidRequest,
                "x-amz-checksum-type needs x-amz-checksum-algorithm"
            ));
        }
        return Ok(None);
    };
    let kind = match kind.map(ChecksumType::as_str) {
        None if algo == ChecksumAlgo::Crc64Nvme => Kind::FullObject,
        None | Some(ChecksumType::COMPOSITE) => Kind::Composite,
        Some(ChecksumType::FULL_OBJECT) => Kind::FullObject,
        Some(other) => return Err(s3_error!(InvalidRequest, "unknown checksum type `{other}`")),
    };
    let sha = matches!(algo, ChecksumAlgo::Sha1 | ChecksumAlgo::Sha256);
    if (sha && kind == Kind::FullObject)
        || (algo == ChecksumAlgo::Crc64Nvme && kind == Kind::Composite)
    {
        return Err(s3_error!(
            InvalidRequest,
            "the {kind:?} checksum type is not available for {algo:?}"
        ));
    }
    Ok(Some(UploadChecksum { algo, kind }))
}

fn crc_of(algo: ChecksumAlgo) -> Option<CrcAlgorithm> {
    match algo {
        ChecksumAlgo::Crc32 => Some(CrcAlgorithm::Crc32IsoHdlc),
        ChecksumAlgo::Crc32c => Some(CrcAlgorithm::Crc32Iscsi),
        ChecksumAlgo::Crc64Nvme => Some(CrcAlgorithm::Crc64Nvme),
        ChecksumAlgo::Sha1 | ChecksumAlgo::Sha256 => None,
    }
}

fn raw(algo: ChecksumAlgo, b64: &str) -> S3Result<Vec<u8>> {
    base64_simd::STANDARD
        .decode_to_vec(b64)
        .ok()
        .filter(|r| r.len() == algo.digest_len())
        .ok_or_else(|| {
            s3_error!(
                InvalidPart,
                "a part's stored checksum is not a {algo:?} digest"
            )
        })
}

/// The object's checksum from its parts' (base64 checksum, length), in part order.
pub fn combine(c: UploadChecksum, parts: &[(&str, u64)]) -> S3Result<String> {
    assert!(
        !parts.is_empty(),
        "an upload completes with at least one part"
    );
    match c.kind {
        Kind::Composite => {
            let mut h = ChecksumHasher::new(c.algo);
            for (b64, _) in parts {
                h.update(&raw(c.algo, b64)?);
            }
            Ok(format!("{}-{}", h.finish(), parts.len()))
        }
        Kind::FullObject => {
            let crc = crc_of(c.algo)
                .ok_or_else(|| s3_error!(InvalidRequest, "FULL_OBJECT needs a CRC algorithm"))?;
            let mut acc: Option<u64> = None;
            for (b64, len) in parts {
                let bytes = raw(c.algo, b64)?;
                let v = bytes.iter().fold(0u64, |v, b| v << 8 | u64::from(*b));
                acc = Some(match acc {
                    None => v,
                    Some(a) => crc_fast::checksum_combine(crc, a, v, *len),
                });
            }
            let v = acc.expect("at least one part");
            let be = v.to_be_bytes();
            Ok(base64_simd::STANDARD.encode_to_string(&be[8 - c.algo.digest_len()..]))
        }
    }
}

/// Whether a stored object checksum value is a composite one (`...-N`).
pub fn is_composite(value: &str) -> bool {
    value.contains('-')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b64(algo: ChecksumAlgo, data: &[u8]) -> String {
        let mut h = ChecksumHasher::new(algo);
        h.update(data);
        h.finish()
    }

    /// FULL_OBJECT of parts equals the checksum of the whole; COMPOSITE is the checksum of
    /// the part digests with `-N`.
    #[test]
    fn parts_make_the_object_checksum() {
        let parts: [&[u8]; 3] = [b"hello ", b"multipart ", b"world"];
        let whole: Vec<u8> = parts.concat();
        for algo in [
            ChecksumAlgo::Crc32,
            ChecksumAlgo::Crc32c,
            ChecksumAlgo::Crc64Nvme,
        ] {
            let sums: Vec<String> = parts.iter().map(|p| b64(algo, p)).collect();
            let given: Vec<(&str, u64)> = sums
                .iter()
                .zip(parts)
                .map(|(s, p)| (s.as_str(), p.len() as u64))
                .collect();
            let full = UploadChecksum {
                algo,
                kind: Kind::FullObject,
            };
            assert_eq!(
                combine(full, &given).unwrap(),
                b64(algo, &whole),
                "{algo:?}"
            );
        }
        for algo in [ChecksumAlgo::Sha256, ChecksumAlgo::Crc32c] {
            let sums: Vec<String> = parts.iter().map(|p| b64(algo, p)).collect();
            let mut raws = Vec::new();
            for s in &sums {
                raws.extend(base64_simd::STANDARD.decode_to_vec(s).unwrap());
            }
            let given: Vec<(&str, u64)> = sums.iter().map(|s| (s.as_str(), 0)).collect();
            let comp = UploadChecksum {
                algo,
                kind: Kind::Composite,
            };
            let got = combine(comp, &given).unwrap();
            assert_eq!(got, format!("{}-3", b64(algo, &raws)));
            assert!(is_composite(&got));
        }
    }

    /// Declarations default and refuse as S3's.
    #[test]
    fn declarations_follow_s3() {
        let a = |s: &str| ChecksumAlgorithm::from(s.to_string());
        let t = |s: &str| ChecksumType::from(s.to_string());
        assert_eq!(declared(None, None).unwrap(), None);
        assert!(declared(None, Some(&t("COMPOSITE"))).is_err());
        assert_eq!(
            declared(Some(&a("CRC64NVME")), None).unwrap().unwrap().kind,
            Kind::FullObject
        );
        assert_eq!(
            declared(Some(&a("SHA256")), None).unwrap().unwrap().kind,
            Kind::Composite
        );
        assert!(declared(Some(&a("SHA1")), Some(&t("FULL_OBJECT"))).is_err());
        assert!(declared(Some(&a("CRC64NVME")), Some(&t("COMPOSITE"))).is_err());
        assert!(declared(Some(&a("MD5")), None).is_err());
        let crc = declared(Some(&a("CRC32")), Some(&t("FULL_OBJECT")))
            .unwrap()
            .unwrap();
        assert_eq!(
            (crc.algo, crc.kind),
            (ChecksumAlgo::Crc32, Kind::FullObject)
        );
    }
}
