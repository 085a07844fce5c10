//! SigV4 verification done by the gateway itself, before s3s sees a request, so that every
//! signature comparison is constant time (`subtle`). s3s 0.13 verifies with `!=` and offers
//! no hook to compare ourselves (docs/design/s3.md, "Constant-time signatures"); it still verifies
//! after us, but its comparisons then only ever see signatures that already matched, so their
//! timing tells an attacker nothing. This module owns parsing the Authorization header and
//! presigned query, the canonical request, the signing key and the chunk and trailer
//! signatures of aws-chunked bodies. Pure: no I/O and no clock (request dates are checked in
//! `access`); the secret is passed in. It must never compare a signature with `==`.

use hmac::{Hmac, KeyInit, Mac};
use hyper::http::{HeaderMap, Method, Uri};
use s3s::{s3_error, S3Error};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use thiserror::Error;

use crate::access::parse_amz_date;

/// The only signing algorithm accepted.
pub const ALGORITHM: &str = "AWS4-HMAC-SHA256";
/// SHA-256 of the empty string, hex.
pub const EMPTY_SHA256: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
/// Payload marker of presigned URLs and unsigned header-signed bodies.
pub const UNSIGNED_PAYLOAD: &str = "UNSIGNED-PAYLOAD";
/// aws-chunked body, every chunk signed.
pub const STREAMING_SIGNED: &str = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD";
/// aws-chunked body, every chunk and the trailer signed.
pub const STREAMING_SIGNED_TRAILER: &str = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER";
/// aws-chunked body with a trailer, chunks unsigned (only the request head is signed).
pub const STREAMING_UNSIGNED_TRAILER: &str = "STREAMING-UNSIGNED-PAYLOAD-TRAILER";

/// Why a request's authentication was refused.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum AuthError {
    /// A signature is not the one the access key's secret gives.
    #[error("the request signature does not match the signature calculated with your secret key")]
    SignatureMismatch,
    /// The Authorization header cannot be used.
    #[error("malformed Authorization header: {0}")]
    MalformedHeader(String),
    /// The presigned URL's query parameters cannot be used.
    #[error("malformed presigned URL: {0}")]
    MalformedQuery(String),
    /// A signing scheme the gateway does not accept (SigV2, POST forms, ECDSA).
    #[error("unsupported authorization: {0}")]
    Unsupported(&'static str),
    /// An aws-chunked body is malformed, too large in one chunk, or of the wrong length.
    #[error("aws-chunked body: {0}")]
    Chunked(String),
}

impl AuthError {
    /// The S3 error a client gets for this.
    pub fn to_s3(&self) -> S3Error {
        let msg = self.to_string();
        match self {
            AuthError::SignatureMismatch => s3_error!(SignatureDoesNotMatch, "{}", msg),
            AuthError::MalformedHeader(_) => s3_error!(AuthorizationHeaderMalformed, "{}", msg),
            AuthError::MalformedQuery(_) => {
                s3_error!(AuthorizationQueryParametersError, "{}", msg)
            }
            AuthError::Unsupported(_) | AuthError::Chunked(_) => {
                s3_error!(InvalidRequest, "{}", msg)
            }
        }
    }
}

/// HMAC-SHA256.
pub fn hmac_sha256(key: &[u8], data: &[u8]) -> [u8; 32] {
    let mut m = <Hmac<Sha256> as KeyInit>::new_from_slice(key).expect("HMAC takes any key");
    m.update(data);
    m.finalize().into_bytes().into()
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 15)] as char);
    }
    s
}

/// Lower-case hex SHA-256 of `data`.
pub fn sha256_hex(data: &[u8]) -> String {
    hex(&Sha256::digest(data))
}

/// Whether a computed signature equals a provided one, in time independent of where they
/// differ (only a length difference, which is public, ends the comparison early).
pub fn signatures_match(computed: &str, provided: &str) -> bool {
    computed.as_bytes().ct_eq(provided.as_bytes()).into()
}

/// The SigV4 signing key: HMAC chain over date, region, service and `aws4_request`.
pub fn signing_key(secret: &str, date: &str, region: &str, service: &str) -> [u8; 32] {
    let k = hmac_sha256(format!("AWS4{secret}").as_bytes(), date.as_bytes());
    let k = hmac_sha256(&k, region.as_bytes());
    let k = hmac_sha256(&k, service.as_bytes());
    hmac_sha256(&k, b"aws4_request")
}

/// Percent-decodes `s` (invalid escapes stay as they are); with `plus_is_space`, `+` is a
/// space (query strings are form-encoded).
pub fn percent_decode(s: &str, plus_is_space: bool) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hexval = |c: u8| (c as char).to_digit(16).and_then(|d| u8::try_from(d).ok());
        match b[i] {
            b'%' if i + 2 < b.len() => match (hexval(b[i + 1]), hexval(b[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push(h << 4 | l);
                    i += 3;
                    continue;
                }
                _ => out.push(b'%'),
            },
            b'+' if plus_is_space => out.push(b' '),
            c => out.push(c),
        }
        i += 1;
    }
    out
}

/// SigV4 URI encoding: unreserved characters (`A-Z a-z 0-9 - . _ ~`) as they are, `/` as is
/// unless `encode_slash`, every other byte `%XX` in upper case.
pub fn uri_encode(bytes: &[u8], encode_slash: bool) -> String {
    const DIGITS: &[u8; 16] = b"0123456789ABCDEF";
    let mut s = String::with_capacity(bytes.len() * 3);
    for &c in bytes {
        match c {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                s.push(c as char)
            }
            b'/' if !encode_slash => s.push('/'),
            _ => {
                s.push('%');
                s.push(DIGITS[usize::from(c >> 4)] as char);
                s.push(DIGITS[usize::from(c & 15)] as char);
            }
        }
    }
    s
}

/// The decoded `(name, value)` pairs of a raw query string, in order.
pub fn query_pairs(query: &str) -> Vec<(Vec<u8>, Vec<u8>)> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (percent_decode(k, true), percent_decode(v, true))
        })
        .collect()
}

/// The canonical URI of a raw request path: decoded, then SigV4-encoded with `/` kept.
pub fn canonical_uri(path: &str) -> String {
    if path.is_empty() {
        return "/".into();
    }
    uri_encode(&percent_decode(path, false), false)
}

/// The canonical query string: every pair (but `X-Amz-Signature` when `presigned`) encoded,
/// sorted by name then value, joined with `&`.
pub fn canonical_query(query: &str, presigned: bool) -> String {
    let mut pairs: Vec<(String, String)> = query_pairs(query)
        .into_iter()
        .filter(|(k, _)| !(presigned && k == b"X-Amz-Signature"))
        .map(|(k, v)| (uri_encode(&k, true), uri_encode(&v, true)))
        .collect();
    pairs.sort();
    pairs
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("&")
}

/// A header value as signed: trimmed, inner runs of whitespace reduced to one space.
fn normalize_value(v: &str) -> String {
    v.split_ascii_whitespace().collect::<Vec<_>>().join(" ")
}

/// The `Credential` of a SigV4 request: `AKID/yyyymmdd/region/service/aws4_request`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credential {
    /// Access key id.
    pub access_key: String,
    /// Date of the scope, `yyyymmdd`.
    pub date: String,
    /// Region of the scope.
    pub region: String,
    /// Service of the scope (only `s3` is accepted).
    pub service: String,
}

impl Credential {
    /// Parses a credential; `None` unless it has the five parts with an 8-digit date.
    pub fn parse(s: &str) -> Option<Credential> {
        let parts: Vec<&str> = s.split('/').collect();
        let [ak, date, region, service, term] = parts[..] else {
            return None;
        };
        let ok = !ak.is_empty()
            && date.len() == 8
            && date.bytes().all(|c| c.is_ascii_digit())
            && !region.is_empty()
            && term == "aws4_request";
        ok.then(|| Credential {
            access_key: ak.into(),
            date: date.into(),
            region: region.into(),
            service: service.into(),
        })
    }

    /// `date/region/service/aws4_request`.
    pub fn scope(&self) -> String {
        format!(
            "{}/{}/{}/aws4_request",
            self.date, self.region, self.service
        )
    }
}

/// A parsed SigV4 signature and what it covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signature {
    /// Who signed, and the scope.
    pub credential: Credential,
    /// Request time, ISO 8601 basic (`20130524T000000Z`).
    pub amz_date: String,
    /// Signed header names, lower case, sorted.
    pub signed_headers: Vec<String>,
    /// The signature the client sent (hex).
    pub signature: String,
    /// Last line of the canonical request: payload hash or marker.
    pub payload: String,
    /// Signed in the query string (presigned URL) rather than the Authorization header.
    pub presigned: bool,
}

/// How a request is authenticated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Signed {
    /// No signature anywhere (s3s compares nothing; admission denies it).
    Anonymous,
    /// A SigV4 signature in the Authorization header or the query.
    V4(Signature),
    /// A SigV2 signature in the Authorization header or the query (`sigv2`).
    V2(crate::sigv2::V2Signature),
    /// A browser POST form upload: its signature is over the form's policy document, in the
    /// body, which s3s parses and checks against the user's secret (`UsersAuth`) together
    /// with the policy's expiry and conditions. Nothing may sign it elsewhere.
    Form,
}

fn signed_header_list(
    s: &str,
    malformed: fn(String) -> AuthError,
) -> Result<Vec<String>, AuthError> {
    let mut names: Vec<String> = s.split(';').map(str::to_string).collect();
    if names
        .iter()
        .any(|n| n.is_empty() || n.bytes().any(|c| c.is_ascii_uppercase()))
    {
        return Err(malformed(format!("bad SignedHeaders `{s}`")));
    }
    names.sort();
    names.dedup();
    if !names.iter().any(|n| n == "host") {
        return Err(malformed("the host header must be signed".into()));
    }
    Ok(names)
}

fn check_date(
    amz_date: &str,
    cred: &Credential,
    malformed: fn(String) -> AuthError,
) -> Result<(), AuthError> {
    if parse_amz_date(amz_date).is_none() {
        return Err(malformed(format!("bad date `{amz_date}`")));
    }
    if !amz_date.starts_with(&cred.date) {
        return Err(malformed(format!(
            "credential date {} is not the request date {amz_date}",
            cred.date
        )));
    }
    if cred.service != "s3" {
        return Err(malformed(format!("service `{}` is not s3", cred.service)));
    }
    Ok(())
}

fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// Finds how `method uri headers` is signed. Refuses what the gateway does not verify itself
/// (several Authorization headers, several signatures, other schemes), so that s3s never
/// compares a header or query signature the gateway has not already matched; a POST form
/// upload is [`Signed::Form`] and may carry no other signature.
pub fn parse(method: &Method, uri: &Uri, headers: &HeaderMap) -> Result<Signed, AuthError> {
    let query = uri.query().unwrap_or("");
    let pairs = query_pairs(query);
    let count = |name: &[u8]| pairs.iter().filter(|(k, _)| k == name).count();
    let form = header_str(headers, "content-type").is_some_and(|t| {
        t.trim_start()
            .to_ascii_lowercase()
            .starts_with("multipart/form-data")
    });
    let auth_headers = headers.get_all("authorization").iter().count();
    if *method == Method::POST && form {
        let signed_elsewhere = auth_headers > 0
            || pairs
                .iter()
                .any(|(k, _)| k == b"Signature" || k == b"X-Amz-Signature");
        if signed_elsewhere {
            return Err(AuthError::Unsupported(
                "a POST form upload signed outside its form",
            ));
        }
        return Ok(Signed::Form);
    }
    if auth_headers > 1 {
        return Err(AuthError::MalformedHeader(
            "more than one Authorization header".into(),
        ));
    }
    let v2_query = count(b"Signature") > 0;
    let v4_query = count(b"X-Amz-Signature") > 0;
    if usize::from(v2_query) + usize::from(v4_query) + auth_headers > 1 {
        return Err(AuthError::MalformedQuery(
            "a request carries one signature (header or query)".into(),
        ));
    }
    if v2_query {
        return crate::sigv2::parse_query(&pairs).map(Signed::V2);
    }
    if let Some(a) = headers.get("authorization") {
        let a = a.to_str().unwrap_or("");
        if a.starts_with("AWS ") {
            return crate::sigv2::parse_header(a).map(Signed::V2);
        }
        if !a.starts_with(&format!("{ALGORITHM} ")) {
            return Err(AuthError::Unsupported(
                "only AWS4-HMAC-SHA256 and SigV2 signatures are accepted",
            ));
        }
    }
    if v4_query {
        return parse_presigned(&pairs).map(Signed::V4);
    }
    match headers.get("authorization") {
        Some(a) => parse_header(a.to_str().unwrap_or(""), headers).map(Signed::V4),
        None => Ok(Signed::Anonymous),
    }
}

fn parse_header(auth: &str, headers: &HeaderMap) -> Result<Signature, AuthError> {
    let bad = AuthError::MalformedHeader;
    let rest = &auth[ALGORITHM.len()..];
    let (mut cred, mut signed, mut sig) = (None, None, None);
    for field in rest.split(',') {
        let field = field.trim();
        let (k, v) = field
            .split_once('=')
            .ok_or_else(|| bad(format!("field `{field}` has no value")))?;
        let slot = match k {
            "Credential" => &mut cred,
            "SignedHeaders" => &mut signed,
            "Signature" => &mut sig,
            _ => return Err(bad(format!("unknown field `{k}`"))),
        };
        if slot.replace(v.to_string()).is_some() {
            return Err(bad(format!("field `{k}` given twice")));
        }
    }
    let (Some(cred), Some(signed), Some(sig)) = (cred, signed, sig) else {
        return Err(bad(
            "Credential, SignedHeaders and Signature are required".into()
        ));
    };
    let credential =
        Credential::parse(&cred).ok_or_else(|| bad(format!("bad Credential `{cred}`")))?;
    let amz_date = header_str(headers, "x-amz-date")
        .ok_or_else(|| bad("missing x-amz-date".into()))?
        .to_string();
    check_date(&amz_date, &credential, bad)?;
    let payload = header_str(headers, "x-amz-content-sha256")
        .ok_or_else(|| bad("missing x-amz-content-sha256".into()))?
        .to_string();
    Ok(Signature {
        credential,
        amz_date,
        signed_headers: signed_header_list(&signed, bad)?,
        signature: sig,
        payload,
        presigned: false,
    })
}

fn parse_presigned(pairs: &[(Vec<u8>, Vec<u8>)]) -> Result<Signature, AuthError> {
    let bad = AuthError::MalformedQuery;
    let one = |name: &str| -> Result<String, AuthError> {
        let mut it = pairs.iter().filter(|(k, _)| k == name.as_bytes());
        match (it.next(), it.next()) {
            (Some((_, v)), None) => {
                String::from_utf8(v.clone()).map_err(|_| bad(format!("{name} is not UTF-8")))
            }
            (None, _) => Err(bad(format!("missing {name}"))),
            (Some(_), Some(_)) => Err(bad(format!("{name} given twice"))),
        }
    };
    if one("X-Amz-Algorithm")? != ALGORITHM {
        return Err(AuthError::Unsupported(
            "only AWS4-HMAC-SHA256 signatures are accepted",
        ));
    }
    one("X-Amz-Expires")?;
    let cred = one("X-Amz-Credential")?;
    let credential =
        Credential::parse(&cred).ok_or_else(|| bad(format!("bad X-Amz-Credential `{cred}`")))?;
    let amz_date = one("X-Amz-Date")?;
    check_date(&amz_date, &credential, bad)?;
    Ok(Signature {
        credential,
        amz_date,
        signed_headers: signed_header_list(&one("X-Amz-SignedHeaders")?, bad)?,
        signature: one("X-Amz-Signature")?,
        payload: UNSIGNED_PAYLOAD.into(),
        presigned: true,
    })
}

/// State for verifying the chunk and trailer signatures of an aws-chunked body: each chunk's
/// signature chains from the previous one, starting at the request's signature.
#[derive(Clone)]
pub struct ChunkSigner {
    key: [u8; 32],
    amz_date: String,
    scope: String,
    prev: String,
}

impl std::fmt::Debug for ChunkSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChunkSigner")
            .field("scope", &self.scope)
            .field("prev", &self.prev)
            .finish_non_exhaustive()
    }
}

impl ChunkSigner {
    fn check(&mut self, kind: &str, hashes: &str, provided: &str) -> Result<(), AuthError> {
        let sts = format!(
            "{kind}\n{}\n{}\n{}\n{hashes}",
            self.amz_date, self.scope, self.prev
        );
        let computed = hex(&hmac_sha256(&self.key, sts.as_bytes()));
        if !signatures_match(&computed, provided) {
            return Err(AuthError::SignatureMismatch);
        }
        self.prev = computed;
        Ok(())
    }

    /// Verifies the signature of the next chunk, whose payload is `data`.
    pub fn verify_chunk(&mut self, data: &[u8], provided: &str) -> Result<(), AuthError> {
        let hashes = format!("{EMPTY_SHA256}\n{}", sha256_hex(data));
        self.check("AWS4-HMAC-SHA256-PAYLOAD", &hashes, provided)
    }

    /// Verifies the trailer signature over the canonical trailers (`name:value\n` each).
    pub fn verify_trailer(&mut self, canonical: &[u8], provided: &str) -> Result<(), AuthError> {
        self.check("AWS4-HMAC-SHA256-TRAILER", &sha256_hex(canonical), provided)
    }
}

impl Signature {
    /// The canonical request of `method uri headers` under this signature.
    pub fn canonical_request(
        &self,
        method: &Method,
        uri: &Uri,
        headers: &HeaderMap,
    ) -> Result<String, AuthError> {
        let bad = |m: String| {
            if self.presigned {
                AuthError::MalformedQuery(m)
            } else {
                AuthError::MalformedHeader(m)
            }
        };
        let mut lines = String::new();
        for name in &self.signed_headers {
            let mut values = Vec::new();
            for v in headers.get_all(name.as_str()) {
                let v = v
                    .to_str()
                    .map_err(|_| bad(format!("header {name} is not ASCII")))?;
                values.push(normalize_value(v));
            }
            if values.is_empty() {
                return Err(bad(format!("signed header {name} is missing")));
            }
            lines.push_str(&format!("{name}:{}\n", values.join(",")));
        }
        Ok(format!(
            "{}\n{}\n{}\n{}\n{}\n{}",
            method.as_str(),
            canonical_uri(uri.path()),
            canonical_query(uri.query().unwrap_or(""), self.presigned),
            lines,
            self.signed_headers.join(";"),
            self.payload
        ))
    }

    /// The string to sign for a canonical request.
    pub fn string_to_sign(&self, canonical_request: &str) -> String {
        format!(
            "{ALGORITHM}\n{}\n{}\n{}",
            self.amz_date,
            self.credential.scope(),
            sha256_hex(canonical_request.as_bytes())
        )
    }

    /// Verifies the signature against `secret` in constant time; on success returns the
    /// state that verifies the chunks of an aws-chunked body.
    pub fn verify(
        &self,
        method: &Method,
        uri: &Uri,
        headers: &HeaderMap,
        secret: &str,
    ) -> Result<ChunkSigner, AuthError> {
        let canonical = self.canonical_request(method, uri, headers)?;
        let c = &self.credential;
        let key = signing_key(secret, &c.date, &c.region, &c.service);
        let computed = hex(&hmac_sha256(
            &key,
            self.string_to_sign(&canonical).as_bytes(),
        ));
        if !signatures_match(&computed, &self.signature) {
            return Err(AuthError::SignatureMismatch);
        }
        Ok(ChunkSigner {
            key,
            amz_date: self.amz_date.clone(),
            scope: c.scope(),
            prev: computed,
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// AWS's documented example credentials (SigV4 examples for S3).
    pub const AK: &str = "AKIAIOSFODNN7EXAMPLE";
    pub const SECRET: &str = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";

    pub fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                hyper::header::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        h
    }

    fn get_example(signature: &str) -> (Method, Uri, HeaderMap) {
        let auth = format!(
            "AWS4-HMAC-SHA256 Credential={AK}/20130524/us-east-1/s3/aws4_request,\
             SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,Signature={signature}"
        );
        let h = headers(&[
            ("host", "examplebucket.s3.amazonaws.com"),
            ("authorization", &auth),
            ("range", "bytes=0-9"),
            ("x-amz-content-sha256", EMPTY_SHA256),
            ("x-amz-date", "20130524T000000Z"),
        ]);
        (Method::GET, "/test.txt".parse().unwrap(), h)
    }

    fn verify(m: &Method, u: &Uri, h: &HeaderMap) -> Result<ChunkSigner, AuthError> {
        match parse(m, u, h)? {
            Signed::V4(sig) => sig.verify(m, u, h, SECRET),
            other => panic!("not SigV4: {other:?}"),
        }
    }

    const GET_SIG: &str = "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41";

    #[test]
    fn aws_header_example_verifies() {
        let (m, u, h) = get_example(GET_SIG);
        verify(&m, &u, &h).unwrap();
    }

    #[test]
    fn wrong_signature_of_the_right_length_is_rejected() {
        let flipped_last = format!("{}0", &GET_SIG[..63]);
        let flipped_first = format!("0{}", &GET_SIG[1..]);
        let upper = GET_SIG.to_ascii_uppercase();
        for bad in [flipped_last, flipped_first, "0".repeat(64), upper] {
            assert_eq!(bad.len(), GET_SIG.len());
            assert_ne!(bad, GET_SIG);
            let (m, u, h) = get_example(&bad);
            assert_eq!(
                verify(&m, &u, &h).unwrap_err(),
                AuthError::SignatureMismatch,
                "{bad}"
            );
        }
        let (m, u, h) = get_example(&GET_SIG[..63]);
        assert_eq!(
            verify(&m, &u, &h).unwrap_err(),
            AuthError::SignatureMismatch
        );
        // The right signature for another request is wrong for this one.
        let (m, _, h) = get_example(GET_SIG);
        let other: Uri = "/test.txu".parse().unwrap();
        assert_eq!(
            verify(&m, &other, &h).unwrap_err(),
            AuthError::SignatureMismatch
        );
        assert_eq!(
            verify(&Method::DELETE, &"/test.txt".parse().unwrap(), &h).unwrap_err(),
            AuthError::SignatureMismatch
        );
    }

    #[test]
    fn constant_time_comparison_semantics() {
        assert!(signatures_match(GET_SIG, GET_SIG));
        assert!(!signatures_match(GET_SIG, &format!("{}0", &GET_SIG[..63])));
        assert!(!signatures_match(GET_SIG, &GET_SIG[..63]));
        assert!(!signatures_match(GET_SIG, ""));
    }

    #[test]
    fn aws_presigned_example_verifies_and_rejects_tampering() {
        let good = "aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404";
        let url = |sig: &str, expires: &str| -> Uri {
            format!(
                "/test.txt?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential={AK}%2F20130524%2F\
                 us-east-1%2Fs3%2Faws4_request&X-Amz-Date=20130524T000000Z&X-Amz-Expires={expires}\
                 &X-Amz-SignedHeaders=host&X-Amz-Signature={sig}"
            )
            .parse()
            .unwrap()
        };
        let h = headers(&[("host", "examplebucket.s3.amazonaws.com")]);
        verify(&Method::GET, &url(good, "86400"), &h).unwrap();
        let flipped = format!("{}5", &good[..63]);
        assert_eq!(
            verify(&Method::GET, &url(&flipped, "86400"), &h).unwrap_err(),
            AuthError::SignatureMismatch
        );
        assert_eq!(
            verify(&Method::GET, &url(good, "86401"), &h).unwrap_err(),
            AuthError::SignatureMismatch
        );
    }

    #[test]
    fn refuses_what_it_does_not_verify() {
        let u: Uri = "/b/k".parse().unwrap();
        let v2 = headers(&[("host", "h"), ("authorization", "AWS AKID:c2lnbmF0dXJl")]);
        assert!(matches!(
            parse(&Method::GET, &u, &v2),
            Ok(Signed::V2(s)) if s.access_key == "AKID" && s.expires.is_none()
        ));
        let q: Uri = "/b/k?AWSAccessKeyId=A&Expires=1&Signature=x"
            .parse()
            .unwrap();
        let h = headers(&[("host", "h")]);
        assert!(matches!(
            parse(&Method::GET, &q, &h),
            Ok(Signed::V2(s)) if s.expires == Some(1)
        ));
        // Two signatures at once are refused, whichever kinds.
        assert!(matches!(
            parse(&Method::GET, &q, &v2),
            Err(AuthError::MalformedQuery(_))
        ));
        let both: Uri = "/b/k?AWSAccessKeyId=A&Expires=1&Signature=x&X-Amz-Signature=y"
            .parse()
            .unwrap();
        assert!(matches!(
            parse(&Method::GET, &both, &h),
            Err(AuthError::MalformedQuery(_))
        ));
        let other = headers(&[("host", "h"), ("authorization", "Bearer x")]);
        assert!(matches!(
            parse(&Method::GET, &u, &other),
            Err(AuthError::Unsupported(_))
        ));
        let form = headers(&[
            ("host", "h"),
            ("content-type", "multipart/form-data; boundary=x"),
        ]);
        assert_eq!(parse(&Method::POST, &u, &form).unwrap(), Signed::Form);
        let mut form_and_header = form.clone();
        form_and_header.insert("authorization", "AWS4-HMAC-SHA256 x".parse().unwrap());
        assert!(matches!(
            parse(&Method::POST, &u, &form_and_header),
            Err(AuthError::Unsupported(_))
        ));
        let (m, u2, mut two) = get_example(GET_SIG);
        two.append("authorization", "AWS4-HMAC-SHA256 x".parse().unwrap());
        assert!(matches!(
            parse(&m, &u2, &two),
            Err(AuthError::MalformedHeader(_))
        ));
        assert_eq!(parse(&Method::GET, &u, &h).unwrap(), Signed::Anonymous);
        // host unsigned, credential dated another day, another service: malformed.
        for (from, to) in [
            ("SignedHeaders=host;", "SignedHeaders="),
            ("/20130524/", "/20130525/"),
            ("/s3/", "/sts/"),
        ] {
            let (m, u, mut h) = get_example(GET_SIG);
            let a = h["authorization"].to_str().unwrap().replace(from, to);
            h.insert("authorization", a.parse().unwrap());
            assert!(
                matches!(parse(&m, &u, &h), Err(AuthError::MalformedHeader(_))),
                "{to}"
            );
        }
    }

    #[test]
    fn canonical_forms() {
        assert_eq!(canonical_uri(""), "/");
        assert_eq!(canonical_uri("/b/a%20b+c~d%2fe"), "/b/a%20b%2Bc~d/e");
        assert_eq!(canonical_uri("/b/%E2%82%AC"), "/b/%E2%82%AC");
        assert_eq!(
            canonical_query("b=2&a=1&a=0&x&list-type=2", false),
            "a=0&a=1&b=2&list-type=2&x="
        );
        assert_eq!(
            canonical_query("p=a+b%2Fc&X-Amz-Signature=s", true),
            "p=a%20b%2Fc"
        );
        assert_eq!(normalize_value("  a   b\tc  "), "a b c");
        assert_eq!(percent_decode("%4", false), b"%4");
        assert_eq!(percent_decode("%zz%41", false), b"%zzA");
    }
}
