//! CORS: Put/Get/DeleteBucketCors (the rules live in the bucket's registry record), the
//! preflight `OPTIONS` a browser sends before a cross-origin request (answered here, before
//! signatures and s3s: a preflight is never signed), and the `Access-Control-*` headers added
//! to an actual request's response when it carries `Origin` and a rule allows it. Requests
//! without `Origin` cost nothing more.

use hyper::header::{HeaderName, HeaderValue};
use hyper::{HeaderMap, Method};
use s3s::dto::*;
use s3s::{s3_error, HttpResponse, S3Error, S3ErrorCode, S3Request, S3Response, S3Result};

use crate::buckets;
use crate::cors::{self, Ask};
use crate::gateway::Gateway;

/// PutBucketCors (replaces the rules).
pub async fn put(
    gw: &Gateway,
    req: S3Request<PutBucketCorsInput>,
) -> S3Result<S3Response<PutBucketCorsOutput>> {
    let i = req.input;
    let rules = cors::from_config(&i.cors_configuration.cors_rules)?;
    let mut b = buckets::get_bucket(&gw.backend, &i.bucket).await?;
    b.cors = rules;
    buckets::update_bucket(&gw.backend, &b).await?;
    gw.buckets.forget(&b.name);
    Ok(S3Response::new(PutBucketCorsOutput::default()))
}

/// GetBucketCors (NoSuchCORSConfiguration when the bucket has none).
pub async fn get(
    gw: &Gateway,
    req: S3Request<GetBucketCorsInput>,
) -> S3Result<S3Response<GetBucketCorsOutput>> {
    let b = gw.bucket(&req.extensions, &req.input.bucket).await?;
    if b.cors.is_empty() {
        return Err(s3_error!(NoSuchCORSConfiguration));
    }
    Ok(S3Response::new(GetBucketCorsOutput {
        cors_rules: Some(cors::to_config(&b.cors)),
    }))
}

/// DeleteBucketCors.
pub async fn delete(
    gw: &Gateway,
    req: S3Request<DeleteBucketCorsInput>,
) -> S3Result<S3Response<DeleteBucketCorsOutput>> {
    let mut b = buckets::get_bucket(&gw.backend, &req.input.bucket).await?;
    if !b.cors.is_empty() {
        b.cors.clear();
        buckets::update_bucket(&gw.backend, &b).await?;
        gw.buckets.forget(&b.name);
    }
    Ok(S3Response::new(DeleteBucketCorsOutput::default()))
}

/// The bucket a request with headers `h` to `path` addresses, if any (virtual-hosted or
/// path style).
pub fn bucket_of<'a>(gw: &Gateway, h: &'a HeaderMap, path: &'a str) -> Option<&'a str> {
    let host = h.get(hyper::header::HOST).and_then(|v| v.to_str().ok());
    crate::vhost::bucket_of(&gw.cfg.domains, host, path)
}

fn header<'h>(h: &'h HeaderMap, name: &str) -> Option<&'h str> {
    h.get(name).and_then(|v| v.to_str().ok())
}

fn forbidden(message: &str) -> S3Error {
    let mut e = S3Error::with_message(
        S3ErrorCode::Custom("AccessForbidden".into()),
        format!("CORSResponse: {message}"),
    );
    e.set_status_code(hyper::StatusCode::FORBIDDEN);
    e
}

fn set(h: &mut HeaderMap, name: &'static str, value: &str) {
    if let Ok(v) = HeaderValue::from_str(value) {
        h.insert(HeaderName::from_static(name), v);
    }
}

/// Sets the `Access-Control-*` headers `rule` answers `origin` with (`headers`: the request
/// headers a preflight named, echoed back).
fn allow(out: &mut HeaderMap, rule: &cors::Rule, origin: &str, headers: &[&str]) {
    set(
        out,
        "access-control-allow-origin",
        &rule.allow_origin(origin),
    );
    set(
        out,
        "access-control-allow-methods",
        &rule.methods.join(", "),
    );
    if !headers.is_empty() {
        set(out, "access-control-allow-headers", &headers.join(", "));
    }
    if !rule.expose.is_empty() {
        set(
            out,
            "access-control-expose-headers",
            &rule.expose.join(", "),
        );
    }
    if let Some(age) = rule.max_age_seconds {
        set(out, "access-control-max-age", &age.to_string());
    }
    set(
        out,
        "vary",
        "Origin, Access-Control-Request-Headers, Access-Control-Request-Method",
    );
}

/// Answers a preflight `OPTIONS` request for the bucket in `path`: 200 with the
/// `Access-Control-Allow-*` headers of the first rule allowing it, else 403 (400 without
/// `Origin` or `Access-Control-Request-Method`, as S3).
pub async fn preflight(gw: &Gateway, path: &str, h: &HeaderMap) -> Result<HttpResponse, S3Error> {
    let (Some(origin), Some(method)) = (
        header(h, "origin"),
        header(h, "access-control-request-method"),
    ) else {
        let mut e = S3Error::with_message(
            S3ErrorCode::Custom("BadRequest".into()),
            "Insufficient information. Origin request header needed.",
        );
        e.set_status_code(hyper::StatusCode::BAD_REQUEST);
        return Err(e);
    };
    let bucket =
        bucket_of(gw, h, path).ok_or_else(|| forbidden("CORS is not enabled for this bucket."))?;
    let b = gw.buckets.get(&gw.backend, bucket).await?;
    if b.cors.is_empty() {
        return Err(forbidden("CORS is not enabled for this bucket."));
    }
    let ask = Ask {
        origin,
        method,
        headers: cors::header_list(header(h, "access-control-request-headers").unwrap_or("")),
    };
    let rule = cors::find(&b.cors, &ask).ok_or_else(|| {
        forbidden("This CORS request is not allowed. This is usually because the evalution of Origin, request method / Access-Control-Request-Method or Access-Control-Request-Headers are not whitelisted by the resource's CORS spec.")
    })?;
    let mut resp = HttpResponse::new(s3s::Body::empty());
    allow(resp.headers_mut(), rule, origin, &ask.headers);
    Ok(resp)
}

/// Adds `Access-Control-Allow-Origin` (and the rule's exposed headers) to the response of a
/// request with `Origin` on a bucket whose rules allow it; leaves it unchanged otherwise.
pub async fn decorate(
    gw: &Gateway,
    bucket: &str,
    origin: &str,
    method: &Method,
    resp: &mut HttpResponse,
) {
    let Ok(b) = gw.buckets.get(&gw.backend, bucket).await else {
        return;
    };
    let ask = Ask {
        origin,
        method: method.as_str(),
        headers: Vec::new(),
    };
    let Some(rule) = cors::find(&b.cors, &ask) else {
        return;
    };
    allow(resp.headers_mut(), rule, origin, &[]);
}
