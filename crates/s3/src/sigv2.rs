//! SigV2 (`AWS AKID:signature` in the Authorization header, or `AWSAccessKeyId`, `Expires`
//! and `Signature` in a presigned URL's query), as radosgw and MinIO accept it: older clients
//! and boto3's default `generate_presigned_url` sign this way. The signature is the base64
//! HMAC-SHA1 of the string to sign (method, Content-MD5, Content-Type, date or expiry, the
//! `x-amz-*` headers, the path with its sub-resources), compared in constant time. Once
//! verified, the request is stripped of its SigV2 parts ([`strip`]) before s3s sees it, so
//! s3s never compares a SigV2 signature itself. Pure: no I/O; the clock is passed in.

use hmac::{Hmac, KeyInit, Mac};
use hyper::http::{HeaderMap, Method, Uri};
use sha1::Sha1;

use crate::access::{MAX_PRESIGN_EXPIRES_S, MAX_SKEW_S};
use crate::sigv4::{percent_decode, query_pairs, signatures_match, AuthError};

/// Query parameters that are sub-resources: signed as part of the resource (botocore's list).
const SUB_RESOURCES: &[&str] = &[
    "accelerate",
    "acl",
    "analytics",
    "cors",
    "defaultObjectAcl",
    "delete",
    "inventory",
    "lifecycle",
    "location",
    "logging",
    "metrics",
    "notification",
    "object-lock",
    "partNumber",
    "policy",
    "replication",
    "requestPayment",
    "response-cache-control",
    "response-content-disposition",
    "response-content-encoding",
    "response-content-language",
    "response-content-type",
    "response-expires",
    "restore",
    "select",
    "select-type",
    "storageClass",
    "tagging",
    "torrent",
    "uploadId",
    "uploads",
    "versionId",
    "versioning",
    "versions",
    "website",
];

/// The query parameters of a presigned SigV2 URL.
const QUERY_PARAMS: [&str; 3] = ["AWSAccessKeyId", "Expires", "Signature"];

/// A parsed SigV2 signature.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct V2Signature {
    /// Access key id.
    pub access_key: String,
    /// The signature sent (base64).
    pub signature: String,
    /// Expiry (seconds since the Unix epoch) of a presigned URL; None for header auth.
    pub expires: Option<i64>,
}

/// Parses `AWS AKID:signature`.
pub fn parse_header(auth: &str) -> Result<V2Signature, AuthError> {
    let bad = |m: &str| AuthError::MalformedHeader(m.to_string());
    let rest = auth
        .strip_prefix("AWS ")
        .ok_or_else(|| bad("SigV2 headers are `AWS AKID:signature`"))?;
    let (ak, sig) = rest
        .trim()
        .rsplit_once(':')
        .ok_or_else(|| bad("SigV2 headers are `AWS AKID:signature`"))?;
    if ak.is_empty() || sig.is_empty() || ak.len() > 128 || sig.len() > 128 {
        return Err(bad("empty or oversized access key or signature"));
    }
    Ok(V2Signature {
        access_key: ak.to_string(),
        signature: sig.to_string(),
        expires: None,
    })
}

/// Parses the query of a presigned SigV2 URL (each of the three parameters exactly once).
pub fn parse_query(pairs: &[(Vec<u8>, Vec<u8>)]) -> Result<V2Signature, AuthError> {
    let bad = AuthError::MalformedQuery;
    let one = |name: &str| -> Result<String, AuthError> {
        let mut it = pairs.iter().filter(|(k, _)| k == name.as_bytes());
        match (it.next(), it.next()) {
            (Some((_, v)), None) if !v.is_empty() && v.len() <= 128 => {
                String::from_utf8(v.clone()).map_err(|_| bad(format!("{name} is not UTF-8")))
            }
            (None, _) => Err(bad(format!("missing {name}"))),
            _ => Err(bad(format!("{name} must be given once, 1..=128 bytes"))),
        }
    };
    let expires = one("Expires")?;
    let expires = expires
        .parse::<i64>()
        .ok()
        .filter(|e| *e >= 0)
        .ok_or_else(|| bad(format!("Expires `{expires}` is not a Unix time")))?;
    Ok(V2Signature {
        access_key: one("AWSAccessKeyId")?,
        signature: one("Signature")?,
        expires: Some(expires),
    })
}

fn header_value(headers: &HeaderMap, name: &str) -> String {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim().to_string())
        .unwrap_or_default()
}

/// The SigV2 string to sign of a request (`expires` replaces the date for presigned URLs).
pub fn string_to_sign(
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    expires: Option<i64>,
) -> String {
    string_to_sign_for(method, &canonical_resource(uri), headers, expires)
}

/// [`string_to_sign`] with the canonical resource given.
fn string_to_sign_for(
    method: &Method,
    resource: &str,
    headers: &HeaderMap,
    expires: Option<i64>,
) -> String {
    let date = match expires {
        Some(e) => e.to_string(),
        None if headers.contains_key("x-amz-date") => String::new(),
        None => header_value(headers, "date"),
    };
    let mut amz: Vec<(String, String)> = Vec::new();
    for name in headers.keys() {
        let n = name.as_str();
        if !n.starts_with("x-amz-") {
            continue;
        }
        let values: Vec<String> = headers
            .get_all(name)
            .iter()
            .map(|v| String::from_utf8_lossy(v.as_bytes()).trim().to_string())
            .collect();
        amz.push((n.to_string(), values.join(",")));
    }
    amz.sort();
    let mut s = format!(
        "{}\n{}\n{}\n{}\n",
        method.as_str(),
        header_value(headers, "content-md5"),
        header_value(headers, "content-type"),
        date
    );
    for (k, v) in amz {
        s.push_str(&format!("{k}:{v}\n"));
    }
    s.push_str(resource);
    s
}

/// The path as sent, then the sub-resources of the query sorted by name (`?acl`,
/// `?partNumber=2&uploadId=x`), values decoded.
pub fn canonical_resource(uri: &Uri) -> String {
    canonical_resource_of(uri.path(), uri)
}

/// The resources a client may have signed for `uri`: the canonical one and, for a request on
/// a bucket (`/bucket`), the same with the bucket's trailing slash (`/bucket/`), which botocore
/// signs for path-style bucket requests while sending the path without it.
pub fn candidate_resources(uri: &Uri) -> Vec<String> {
    let path = uri.path();
    let mut out = vec![canonical_resource(uri)];
    let bucket_only = path.len() > 1 && !path[1..].contains('/');
    if bucket_only {
        out.push(canonical_resource_of(&format!("{path}/"), uri));
    }
    out
}

fn canonical_resource_of(path: &str, uri: &Uri) -> String {
    let mut out = path.to_string();
    let mut subs: Vec<(String, Option<String>)> = uri
        .query()
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
        .filter_map(|p| {
            let (k, v) = match p.split_once('=') {
                Some((k, v)) => (k, Some(v)),
                None => (p, None),
            };
            let k = String::from_utf8_lossy(&percent_decode(k, true)).into_owned();
            SUB_RESOURCES.contains(&k.as_str()).then(|| {
                let v = v.map(|v| String::from_utf8_lossy(&percent_decode(v, true)).into_owned());
                (k, v)
            })
        })
        .collect();
    subs.sort_by(|a, b| a.0.cmp(&b.0));
    for (i, (k, v)) in subs.iter().enumerate() {
        out.push(if i == 0 { '?' } else { '&' });
        out.push_str(k);
        if let Some(v) = v {
            out.push('=');
            out.push_str(v);
        }
    }
    out
}

/// Base64 HMAC-SHA1 of `data` under `secret`.
pub fn sign(secret: &str, data: &str) -> String {
    let mut m = <Hmac<Sha1> as KeyInit>::new_from_slice(secret.as_bytes()).expect("any key");
    m.update(data.as_bytes());
    base64_simd::STANDARD.encode_to_string(m.finalize().into_bytes())
}

/// Seconds since the Unix epoch of an HTTP date (`Sun, 06 Nov 1994 08:49:37 GMT`, zone
/// `GMT`, `UTC`, `Z` or `+0000`).
pub fn parse_http_date(s: &str) -> Option<i64> {
    let parts: Vec<&str> = s.split_ascii_whitespace().collect();
    let [_, day, mon, year, hms, zone] = parts[..] else {
        return None;
    };
    if !matches!(zone, "GMT" | "UTC" | "Z" | "+0000") {
        return None;
    }
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let month = u8::try_from(MONTHS.iter().position(|m| *m == mon)? + 1).ok()?;
    let num = |t: &str| -> Option<i64> {
        (!t.is_empty() && t.len() <= 4 && t.bytes().all(|c| c.is_ascii_digit()))
            .then(|| t.parse().ok())
            .flatten()
    };
    let hms: Vec<&str> = hms.split(':').collect();
    let [h, m, sec] = hms[..] else {
        return None;
    };
    let date = time::Date::from_calendar_date(
        i32::try_from(num(year)?).ok()?,
        time::Month::try_from(month).ok()?,
        u8::try_from(num(day)?).ok()?,
    )
    .ok()?;
    let field = |t: &str| u8::try_from(num(t)?).ok();
    let t = time::Time::from_hms(field(h)?, field(m)?, field(sec)?).ok()?;
    Some(
        time::PrimitiveDateTime::new(date, t)
            .assume_utc()
            .unix_timestamp(),
    )
}

impl V2Signature {
    /// Verifies the signature of `method uri headers` with `secret`, in constant time: every
    /// candidate resource ([`candidate_resources`]) is compared, none skipped.
    pub fn verify(
        &self,
        method: &Method,
        uri: &Uri,
        headers: &HeaderMap,
        secret: &str,
    ) -> Result<(), AuthError> {
        let mut matched = false;
        for resource in candidate_resources(uri) {
            let sts = string_to_sign_for(method, &resource, headers, self.expires);
            matched |= signatures_match(&sign(secret, &sts), &self.signature);
        }
        if matched {
            Ok(())
        } else {
            Err(AuthError::SignatureMismatch)
        }
    }

    /// Checks the request's time at `now_s`: a presigned URL must not have expired nor
    /// expire more than 7 days ahead; a header-signed request must carry `x-amz-date` or
    /// `Date` within 15 minutes of the clock.
    pub fn check_time(&self, headers: &HeaderMap, now_s: i64) -> Result<(), s3s::S3Error> {
        if let Some(e) = self.expires {
            if now_s > e {
                return Err(s3s::s3_error!(AccessDenied, "Request has expired"));
            }
            if e - now_s > MAX_PRESIGN_EXPIRES_S as i64 + MAX_SKEW_S {
                return Err(s3s::s3_error!(
                    AuthorizationQueryParametersError,
                    "Expires must be within {MAX_PRESIGN_EXPIRES_S} seconds"
                ));
            }
            return Ok(());
        }
        let date = headers
            .get("x-amz-date")
            .or_else(|| headers.get("date"))
            .and_then(|v| v.to_str().ok())
            .ok_or_else(|| {
                s3s::s3_error!(
                    AccessDenied,
                    "a SigV2 request needs a Date or x-amz-date header"
                )
            })?;
        let t = parse_http_date(date)
            .or_else(|| crate::access::parse_amz_date(date))
            .ok_or_else(|| s3s::s3_error!(AccessDenied, "bad date `{}`", date))?;
        if (t - now_s).abs() > MAX_SKEW_S {
            return Err(s3s::s3_error!(RequestTimeTooSkewed));
        }
        Ok(())
    }
}

/// The URI without the presigned SigV2 parameters, and the headers without Authorization:
/// what s3s gets once the gateway has verified the signature.
pub fn strip(uri: &Uri, headers: &mut HeaderMap) -> Uri {
    headers.remove("authorization");
    let Some(query) = uri.query() else {
        return uri.clone();
    };
    let kept: Vec<&str> = query
        .split('&')
        .filter(|p| {
            let k = p.split_once('=').map_or(*p, |(k, _)| k);
            let k = percent_decode(k, true);
            !QUERY_PARAMS.iter().any(|q| q.as_bytes() == k.as_slice())
        })
        .collect();
    let path_and_query = if kept.is_empty() {
        uri.path().to_string()
    } else {
        format!("{}?{}", uri.path(), kept.join("&"))
    };
    let mut parts = uri.clone().into_parts();
    parts.path_and_query = path_and_query.parse().ok();
    Uri::from_parts(parts).unwrap_or_else(|_| uri.clone())
}

/// Whether a query carries a presigned SigV2 signature.
pub fn is_presigned(query: &str) -> bool {
    query_pairs(query).iter().any(|(k, _)| k == b"Signature")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sigv4::tests::headers;

    #[test]
    fn http_dates_with_out_of_range_fields_are_refused_not_wrapped() {
        // Cast to u8, a day of 257 would read as 1 and an hour of 275 as 19 (modulo 256).
        for bad in [
            "Tue, 257 Mar 2007 19:36:42 GMT",
            "Tue, 27 Mar 2007 275:36:42 GMT",
            "Tue, 27 Mar 2007 19:292:42 GMT",
            "Tue, 27 Mar 2007 19:36:298 GMT",
        ] {
            assert_eq!(parse_http_date(bad), None, "{bad}");
        }
    }

    /// AWS's published SigV2 examples (Signing and Authenticating REST Requests).
    #[test]
    fn aws_examples_verify() {
        let secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
        let h = headers(&[
            ("host", "awsexamplebucket1.us-west-1.s3.amazonaws.com"),
            ("date", "Tue, 27 Mar 2007 19:36:42 +0000"),
        ]);
        let uri: Uri = "/awsexamplebucket1/photos/puppy.jpg".parse().unwrap();
        let sts = string_to_sign(&Method::GET, &uri, &h, None);
        assert_eq!(
            sts,
            "GET\n\n\nTue, 27 Mar 2007 19:36:42 +0000\n/awsexamplebucket1/photos/puppy.jpg"
        );
        assert_eq!(sign(secret, &sts), "qgk2+6Sv9/oM7G3qLEjTH1a1l1g=");
        // PUT with content type and length.
        let h = headers(&[
            ("content-type", "image/jpeg"),
            ("date", "Tue, 27 Mar 2007 21:15:45 +0000"),
        ]);
        let sts = string_to_sign(&Method::PUT, &uri, &h, None);
        assert_eq!(sign(secret, &sts), "iqRzw+ileNPu1fhspnRs8nOjjIA=");
        // ?acl is part of the resource; other query parameters are not.
        let uri: Uri = "/awsexamplebucket1/?acl&max-keys=5".parse().unwrap();
        assert_eq!(canonical_resource(&uri), "/awsexamplebucket1/?acl");
        // A bucket request may be signed with or without the bucket's trailing slash.
        let uri: Uri = "/b?acl&prefix=x".parse().unwrap();
        assert_eq!(candidate_resources(&uri), vec!["/b?acl", "/b/?acl"]);
        let uri: Uri = "/b/k".parse().unwrap();
        assert_eq!(candidate_resources(&uri), vec!["/b/k"]);
        let root: Uri = "/".parse().unwrap();
        assert_eq!(candidate_resources(&root), vec!["/"]);
        // A presigned URL signs the expiry instead of a date (the older example's bucket).
        let sig = V2Signature {
            access_key: "AKIAIOSFODNN7EXAMPLE".into(),
            signature: "NpgCjnDzrM+WFzoENXmpNDUsSn8=".into(),
            expires: Some(1_175_139_620),
        };
        let uri: Uri = "/johnsmith/photos/puppy.jpg?AWSAccessKeyId=AKIAIOSFODNN7EXAMPLE&Signature=NpgCjnDzrM%2BWFzoENXmpNDUsSn8%3D&Expires=1175139620".parse().unwrap();
        let h = headers(&[("host", "johnsmith.s3.amazonaws.com")]);
        sig.verify(&Method::GET, &uri, &h, secret).unwrap();
        // The same URL for another key, method or expiry, or with a flipped character,
        // fails.
        let other: Uri = "/johnsmith/photos/kitten.jpg".parse().unwrap();
        assert_eq!(
            sig.verify(&Method::GET, &other, &h, secret),
            Err(AuthError::SignatureMismatch)
        );
        assert!(sig.verify(&Method::DELETE, &uri, &h, secret).is_err());
        let later = V2Signature {
            expires: Some(1_175_139_621),
            ..sig.clone()
        };
        assert!(later.verify(&Method::GET, &uri, &h, secret).is_err());
        let flipped = V2Signature {
            signature: "npgCjnDzrM+WFzoENXmpNDUsSn8=".into(),
            ..sig.clone()
        };
        assert!(flipped.verify(&Method::GET, &uri, &h, secret).is_err());
        assert!(sig.verify(&Method::GET, &uri, &h, "wrong secret").is_err());
    }

    #[test]
    fn parsing_and_times() {
        assert_eq!(
            parse_header("AWS AKID:c2ln").unwrap(),
            V2Signature {
                access_key: "AKID".into(),
                signature: "c2ln".into(),
                expires: None
            }
        );
        for bad in ["AWS ", "AWS AKID", "AWS :sig", "AWS AKID:", "AWSAKID:sig"] {
            assert!(parse_header(bad).is_err(), "{bad}");
        }
        let pairs = |q: &str| query_pairs(q);
        assert!(parse_query(&pairs("AWSAccessKeyId=a&Expires=5&Signature=s")).is_ok());
        for bad in [
            "AWSAccessKeyId=a&Signature=s",
            "AWSAccessKeyId=a&Expires=x&Signature=s",
            "AWSAccessKeyId=a&Expires=-1&Signature=s",
            "AWSAccessKeyId=a&Expires=5&Signature=s&Signature=t",
            "AWSAccessKeyId=&Expires=5&Signature=s",
        ] {
            assert!(parse_query(&pairs(bad)).is_err(), "{bad}");
        }
        assert_eq!(parse_http_date("Thu, 01 Jan 1970 00:00:00 GMT"), Some(0));
        assert_eq!(
            parse_http_date("Tue, 27 Mar 2007 19:36:42 +0000"),
            Some(1_175_024_202)
        );
        for bad in [
            "",
            "Tue, 27 Foo 2007 19:36:42 GMT",
            "Tue, 27 Mar 2007 19:36:42 +0100",
            "Tue, 27 Mar 2007 25:00:00 GMT",
        ] {
            assert_eq!(parse_http_date(bad), None, "{bad}");
        }
        let now = 1_175_024_202;
        let presigned = |e| V2Signature {
            access_key: "a".into(),
            signature: "s".into(),
            expires: Some(e),
        };
        let none = HeaderMap::new();
        presigned(now + 10).check_time(&none, now).unwrap();
        assert_eq!(
            presigned(now - 1)
                .check_time(&none, now)
                .unwrap_err()
                .code(),
            &s3s::S3ErrorCode::AccessDenied
        );
        assert!(presigned(now + 8 * 24 * 3600)
            .check_time(&none, now)
            .is_err());
        let header_signed = parse_header("AWS a:s").unwrap();
        assert!(header_signed.check_time(&none, now).is_err(), "no date");
        let dated = headers(&[("date", "Tue, 27 Mar 2007 19:36:42 GMT")]);
        header_signed.check_time(&dated, now + 60).unwrap();
        assert_eq!(
            header_signed
                .check_time(&dated, now + 3600)
                .unwrap_err()
                .code(),
            &s3s::S3ErrorCode::RequestTimeTooSkewed
        );
    }

    #[test]
    fn strip_removes_only_the_signature() {
        let mut h = headers(&[("authorization", "AWS a:b"), ("x-amz-acl", "private")]);
        let uri: Uri = "/b/k?uploadId=u&AWSAccessKeyId=a&Expires=5&Signature=s%2B"
            .parse()
            .unwrap();
        assert!(is_presigned(uri.query().unwrap()));
        let clean = strip(&uri, &mut h);
        assert_eq!(clean.to_string(), "/b/k?uploadId=u");
        assert!(!h.contains_key("authorization"));
        assert!(h.contains_key("x-amz-acl"));
        let bare: Uri = "/b/k?Signature=s".parse().unwrap();
        assert_eq!(strip(&bare, &mut h).to_string(), "/b/k");
    }
}
