//! Conversions between S3 request/response fields and the index entry: content headers and
//! metadata (with the metadata size limit), timestamps, ETags, Content-MD5, conditional
//! requests and URL encoding of listed names. Pure: no I/O.

use s3s::dto::{ETag, ETagCondition, Metadata, Timestamp};
use s3s::{s3_error, S3Result};

use crate::entry::ContentHeaders;

/// Content headers and metadata of a PUT, CopyObject (REPLACE) or CreateMultipartUpload.
pub struct HeaderInput {
    /// `Content-Type`.
    pub content_type: Option<String>,
    /// `Content-Encoding`.
    pub content_encoding: Option<String>,
    /// `Content-Disposition`.
    pub content_disposition: Option<String>,
    /// `Content-Language`.
    pub content_language: Option<String>,
    /// `Cache-Control`.
    pub cache_control: Option<String>,
    /// `x-amz-meta-*`.
    pub metadata: Option<Metadata>,
}

/// Builds the stored headers, refusing metadata larger than `max_meta_bytes`
/// (MetadataTooLarge) before any body byte is read.
pub fn content_headers(h: HeaderInput, max_meta_bytes: usize) -> S3Result<ContentHeaders> {
    let out = ContentHeaders {
        content_type: h.content_type,
        content_encoding: h.content_encoding,
        content_disposition: h.content_disposition,
        content_language: h.content_language,
        cache_control: h.cache_control,
        meta: h
            .metadata
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k.to_ascii_lowercase(), v))
            .collect(),
    };
    if out.meta_bytes() > max_meta_bytes {
        return Err(s3_error!(
            MetadataTooLarge,
            "user metadata is {} bytes, limit {max_meta_bytes}",
            out.meta_bytes()
        ));
    }
    Ok(out)
}

/// User metadata for a response (None when empty).
pub fn metadata_out(h: &ContentHeaders) -> Option<Metadata> {
    (!h.meta.is_empty()).then(|| h.meta.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
}

/// A timestamp from ms since the Unix epoch.
pub fn timestamp(ms: i64) -> Timestamp {
    let t = time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    Timestamp::from(t)
}

fn unix_s(t: &Timestamp) -> i64 {
    time::OffsetDateTime::from(t.clone()).unix_timestamp()
}

/// A strong ETag.
pub fn etag(value: &str) -> ETag {
    ETag::Strong(value.to_string())
}

/// The expected MD5 from a `Content-MD5` header (InvalidDigest if malformed).
pub fn content_md5(header: Option<&str>) -> S3Result<Option<[u8; 16]>> {
    let Some(h) = header else {
        return Ok(None);
    };
    let bytes = base64_simd::STANDARD
        .decode_to_vec(h.trim())
        .map_err(|_| s3_error!(InvalidDigest, "Content-MD5 is not base64"))?;
    let md5: [u8; 16] = bytes
        .try_into()
        .map_err(|_| s3_error!(InvalidDigest, "Content-MD5 is not 16 bytes"))?;
    Ok(Some(md5))
}

fn matches(cond: &ETagCondition, current: &str) -> bool {
    match cond {
        ETagCondition::Any => true,
        ETagCondition::ETag(e) => e.value() == current,
    }
}

/// Conditional request headers.
#[derive(Default)]
pub struct Conditions<'a> {
    /// `If-Match`.
    pub if_match: Option<&'a ETagCondition>,
    /// `If-None-Match`.
    pub if_none_match: Option<&'a ETagCondition>,
    /// `If-Modified-Since`.
    pub if_modified_since: Option<&'a Timestamp>,
    /// `If-Unmodified-Since`.
    pub if_unmodified_since: Option<&'a Timestamp>,
}

/// Evaluates conditions against an object's ETag and mtime as RFC 9110 orders them:
/// If-Match (else If-Unmodified-Since) fails with 412 PreconditionFailed; then If-None-Match
/// (else If-Modified-Since) fails with 304 NotModified (`not_modified_is_412` for copies).
pub fn check_conditions(
    c: &Conditions<'_>,
    etag: &str,
    mtime_ms: i64,
    not_modified_is_412: bool,
) -> S3Result<()> {
    let mtime_s = mtime_ms.div_euclid(1000);
    if let Some(m) = c.if_match {
        if !matches(m, etag) {
            return Err(s3_error!(PreconditionFailed));
        }
    } else if let Some(t) = c.if_unmodified_since {
        if mtime_s > unix_s(t) {
            return Err(s3_error!(PreconditionFailed));
        }
    }
    let not_modified = if let Some(m) = c.if_none_match {
        matches(m, etag)
    } else if let Some(t) = c.if_modified_since {
        mtime_s <= unix_s(t)
    } else {
        false
    };
    if not_modified {
        return Err(if not_modified_is_412 {
            s3_error!(PreconditionFailed)
        } else {
            s3_error!(NotModified)
        });
    }
    Ok(())
}

/// Percent-encodes a name for `encoding-type=url` (everything but unreserved characters and
/// `/`).
pub fn url_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~' | b'/') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: i64) -> Timestamp {
        timestamp(s * 1000)
    }

    #[test]
    fn conditions_follow_rfc_order() {
        let tag = ETagCondition::ETag(etag("abc"));
        let other = ETagCondition::ETag(etag("zzz"));
        let any = ETagCondition::Any;
        let ok = |c: Conditions<'_>| check_conditions(&c, "abc", 100_500, false);
        let code = |r: S3Result<()>| r.unwrap_err().code().clone();
        ok(Conditions::default()).unwrap();
        ok(Conditions {
            if_match: Some(&tag),
            ..Default::default()
        })
        .unwrap();
        ok(Conditions {
            if_match: Some(&any),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(
            code(ok(Conditions {
                if_match: Some(&other),
                ..Default::default()
            })),
            s3s::S3ErrorCode::PreconditionFailed
        );
        assert_eq!(
            code(ok(Conditions {
                if_none_match: Some(&tag),
                ..Default::default()
            })),
            s3s::S3ErrorCode::NotModified
        );
        ok(Conditions {
            if_none_match: Some(&other),
            ..Default::default()
        })
        .unwrap();
        let (t99, t100, t101) = (ts(99), ts(100), ts(101));
        assert_eq!(
            code(ok(Conditions {
                if_unmodified_since: Some(&t99),
                ..Default::default()
            })),
            s3s::S3ErrorCode::PreconditionFailed
        );
        ok(Conditions {
            if_unmodified_since: Some(&t100),
            ..Default::default()
        })
        .unwrap();
        // If-Match takes precedence over If-Unmodified-Since.
        ok(Conditions {
            if_match: Some(&tag),
            if_unmodified_since: Some(&t99),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(
            code(ok(Conditions {
                if_modified_since: Some(&t100),
                ..Default::default()
            })),
            s3s::S3ErrorCode::NotModified
        );
        ok(Conditions {
            if_modified_since: Some(&t99),
            ..Default::default()
        })
        .unwrap();
        // If-None-Match takes precedence over If-Modified-Since.
        ok(Conditions {
            if_none_match: Some(&other),
            if_modified_since: Some(&t101),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(
            code(check_conditions(
                &Conditions {
                    if_none_match: Some(&tag),
                    ..Default::default()
                },
                "abc",
                0,
                true
            )),
            s3s::S3ErrorCode::PreconditionFailed
        );
    }

    #[test]
    fn md5_header_and_metadata_limits() {
        assert_eq!(content_md5(None).unwrap(), None);
        assert_eq!(
            content_md5(Some("1B2M2Y8AsgTpgAmY7PhCfg=="))
                .unwrap()
                .unwrap()[0],
            0xd4
        );
        for bad in ["!!!", "AAAA"] {
            assert_eq!(
                content_md5(Some(bad)).unwrap_err().code(),
                &s3s::S3ErrorCode::InvalidDigest
            );
        }
        let mut meta = Metadata::default();
        meta.insert("k".into(), "v".repeat(2047));
        let h = |m: Metadata| HeaderInput {
            content_type: None,
            content_encoding: None,
            content_disposition: None,
            content_language: None,
            cache_control: None,
            metadata: Some(m),
        };
        content_headers(h(meta.clone()), 2048).unwrap();
        meta.insert("k2".into(), "v".into());
        assert_eq!(
            content_headers(h(meta), 2048).unwrap_err().code(),
            &s3s::S3ErrorCode::MetadataTooLarge
        );
    }

    #[test]
    fn url_encoding() {
        assert_eq!(url_encode("a b/c+d%é"), "a%20b/c%2Bd%25%C3%A9");
    }
}
