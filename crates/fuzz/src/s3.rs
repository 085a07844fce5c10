//! The S3 gateway's parsers of what clients send: a request's SigV4 signature (header or
//! presigned query), aws-chunked bodies, and the bucket index's entries.

use std::collections::BTreeMap;

use cairn_s3::chunked::{ChunkChecker, ChunkMode};
use cairn_s3::entry::{ContentHeaders, DataLoc, Entry, Segment};
use cairn_s3::sigv4::{self, ChunkSigner, Signed};
use hyper::header::{HeaderName, HeaderValue};
use hyper::{HeaderMap, Method, Uri};

/// AWS's documented example credentials (SigV4 examples for S3).
const ACCESS_KEY: &str = "AKIAIOSFODNN7EXAMPLE";
/// Their secret.
const SECRET: &str = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";

/// AWS's documented aws-chunked example request, as text.
fn example_request() -> String {
    format!(
        "PUT /examplebucket/chunkObject.txt\nhost: s3.amazonaws.com\n\
         x-amz-date: 20130524T000000Z\nx-amz-storage-class: REDUCED_REDUNDANCY\n\
         authorization: AWS4-HMAC-SHA256 Credential={ACCESS_KEY}/20130524/us-east-1/s3/\
         aws4_request,SignedHeaders=content-encoding;content-length;host;\
         x-amz-content-sha256;x-amz-date;x-amz-decoded-content-length;x-amz-storage-class,\
         Signature=4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9\n\
         x-amz-content-sha256: STREAMING-AWS4-HMAC-SHA256-PAYLOAD\n\
         content-encoding: aws-chunked\nx-amz-decoded-content-length: 66560\n\
         content-length: 66824\n"
    )
}

/// A request head as text: `METHOD URI` then `name: value` lines.
fn request(text: &str) -> Option<(Method, Uri, HeaderMap)> {
    let mut lines = text.split('\n');
    let (method, uri) = lines.next()?.split_once(' ')?;
    let method = Method::from_bytes(method.as_bytes()).ok()?;
    let uri: Uri = uri.parse().ok()?;
    let mut headers = HeaderMap::new();
    for line in lines.filter(|l| !l.is_empty()) {
        let (k, v) = line.split_once(':')?;
        let name = HeaderName::from_bytes(k.trim().as_bytes()).ok()?;
        headers.append(name, HeaderValue::from_str(v.trim()).ok()?);
    }
    Some((method, uri, headers))
}

/// The chunk signer of AWS's example request (derived once).
fn example_signer() -> ChunkSigner {
    static SIGNER: std::sync::OnceLock<ChunkSigner> = std::sync::OnceLock::new();
    SIGNER.get_or_init(derive_example_signer).clone()
}

fn derive_example_signer() -> ChunkSigner {
    let (m, u, h) = request(&example_request()).expect("the example parses");
    let Ok(Signed::V4(sig)) = sigv4::parse(&m, &u, &h) else {
        panic!("the example is signed");
    };
    sig.verify(&m, &u, &h, SECRET)
        .expect("the example verifies")
}

/// A request head: parsed for its signature, which is then verified with the example secret.
pub fn sigv4(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Some((m, u, h)) = request(text) else {
        return;
    };
    if let Ok(Signed::V4(sig)) = sigv4::parse(&m, &u, &h) {
        let _ = sig.verify(&m, &u, &h, SECRET);
    }
}

/// The example request, and a presigned GET.
pub fn sigv4_seeds() -> Vec<Vec<u8>> {
    vec![
        example_request().into_bytes(),
        format!(
            "GET /bucket/key?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential={ACCESS_KEY}%2F\
             20130524%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Date=20130524T000000Z&\
             X-Amz-Expires=86400&X-Amz-SignedHeaders=host&X-Amz-Signature=aeeed9bbccd4d02ee5c0\
             109b86d86835f995330da4c265957d157751f604d404\nhost: examplebucket.s3.amazonaws.com\n"
        )
        .into_bytes(),
    ]
}

/// An aws-chunked body fed in pieces to a checker in the mode the first byte picks, with the
/// example's signer. What it passes on must be the body's own bytes, unchanged and in order
/// (a prefix of what was fed); the declared length bounds the chunks (the checker's own test).
pub fn chunked(data: &[u8]) {
    let (which, rest) = crate::selector(data);
    let mode = match which % 3 {
        0 => ChunkMode::Signed,
        1 => ChunkMode::SignedTrailer,
        _ => ChunkMode::UnsignedTrailer,
    };
    let step = usize::from(which / 3) + 1;
    let mut checker = ChunkChecker::new(mode, example_signer(), 66560);
    let mut passed: Vec<u8> = Vec::new();
    for piece in rest.chunks(step) {
        match checker.feed(piece) {
            Ok(out) => out.iter().for_each(|b| passed.extend_from_slice(b)),
            Err(_) => return,
        }
        assert!(
            rest.starts_with(&passed),
            "the checker passed on bytes that are not the body's"
        );
    }
    if checker.finish().is_ok() {
        assert_eq!(
            passed.len(),
            rest.len(),
            "a finished body passed on all of it"
        );
    }
}

/// AWS's example body (three signed chunks), for the signed mode.
pub fn chunked_seeds() -> Vec<Vec<u8>> {
    let mut b = vec![0u8];
    for (size, sig) in [
        (
            65536,
            "ad80c730a21e5b8d04586a2213dd63b9a0e99e0e2307b0ade35a65485a288648",
        ),
        (
            1024,
            "0055627c9e194cb4542bae2aa5492e3c1575bbb81b612b7d234b86a503ef5497",
        ),
        (
            0,
            "b6c6ea8a5354eaf15b3cb7646744f4275b71ea724fed81ceb9323e279d449df9",
        ),
    ] {
        b.extend_from_slice(format!("{size:x};chunk-signature={sig}\r\n").as_bytes());
        b.extend(std::iter::repeat_n(b'a', size));
        b.extend_from_slice(b"\r\n");
    }
    let mut unsigned = vec![2u8 + 3 * 7];
    unsigned.extend_from_slice(b"10000\r\n");
    unsigned.extend(std::iter::repeat_n(b'a', 65536));
    unsigned.extend_from_slice(b"\r\n400\r\n");
    unsigned.extend(std::iter::repeat_n(b'a', 1024));
    unsigned.extend_from_slice(b"\r\n0\r\nx-amz-checksum-crc32c:AAAAAA==\r\n\r\n");
    vec![b, unsigned]
}

/// An index entry: raw (first byte even) or with its checksum made right; one that decodes
/// must encode and decode to itself.
pub fn entry(data: &[u8]) {
    let (which, rest) = crate::selector(data);
    let mut b = rest.to_vec();
    if which % 2 == 1 {
        let crc = crc_fast::crc32_iscsi(&b);
        b.extend_from_slice(&crc.to_le_bytes());
    }
    if let Ok(e) = Entry::decode(&b) {
        assert_eq!(Entry::decode(&e.encode()).expect("re-encoded entry"), e);
    }
}

/// A striped entry with metadata, and an inline one.
pub fn entry_seeds() -> Vec<Vec<u8>> {
    let striped = Entry {
        size: 10 << 20,
        etag: "\"abc-2\"".into(),
        mtime_ms: 1_700_000_000_000,
        headers: ContentHeaders {
            content_type: Some("text/plain".into()),
            meta: BTreeMap::from([("k".into(), "v".into())]),
            ..ContentHeaders::default()
        },
        loc: DataLoc::Striped {
            stripe_bytes: 4 << 20,
            segments: vec![Segment {
                id: "seg1".into(),
                size: 10 << 20,
            }],
        },
        parts: 2,
        acl: cairn_s3::acl::CannedAcl::PublicRead,
        checksum: Some(cairn_s3::checksum::Checksum {
            algo: cairn_s3::checksum::ChecksumAlgo::Crc32,
            value: "DUoRhQ==".into(),
        }),
        version_id: Some("null".into()),
        delete_marker: false,
        tags: BTreeMap::from([("project".into(), "blue".into())]),
        retention: None,
        legal_hold: false,
        null_rank: Some("fffffffffffffffe".into()),
        storage_class: None,
        inline: Vec::new(),
    };
    let inline = Entry {
        size: 5,
        loc: DataLoc::Inline,
        parts: 0,
        inline: b"hello".to_vec(),
        ..striped.clone()
    };
    [striped, inline]
        .iter()
        .flat_map(|e| {
            let enc = e.encode();
            [
                [&[0u8][..], &enc[..]].concat(),
                [&[1u8][..], &enc[..enc.len() - 4]].concat(),
            ]
        })
        .collect()
}
