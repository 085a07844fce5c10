//! The HTTP side: builds the s3s service (SigV4 via [`UsersAuth`], admission via
//! [`Admission`], explicit XML and header size limits) and serves it with hyper on a TCP
//! listener, over TLS when the gateway has a certificate, at most `max_connections`
//! connections at a time ([`Slots`]). Every signed request is first verified here in constant
//! time ([`authenticate`], `sigv4`, `sigv2`, `chunked`), marked with the signer's
//! [`Identity`], and only then handed to s3s.

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use hyper_util::rt::TokioIo;
use s3s::config::{S3Config, StaticConfigProvider};
use s3s::service::{S3Service, S3ServiceBuilder};
use s3s::{s3_error, HttpRequest, HttpResponse, S3Error};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use crate::access::Admission;
use crate::chunked::{CheckedBody, ChunkChecker, ChunkMode};
use crate::cors_ops;
use crate::gateway::Gateway;
use crate::identity::Identity;
use crate::metrics::S3Metrics;
use crate::sigv4::{self, AuthError, Signed};
use crate::slots::{Busy, Slot, Slots};
use crate::users::{Users, UsersAuth};

/// Largest XML request body (DeleteObjects with 1000 long keys fits).
pub const MAX_XML_BYTES: usize = 4 << 20;
/// Largest request head (request line plus headers) hyper buffers.
pub const MAX_HEADER_BYTES: usize = 64 << 10;
/// Idle time after which a connection's request head must have arrived.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(30);

/// The s3s service for a gateway.
pub fn service(gw: &Gateway) -> S3Service {
    let mut b = S3ServiceBuilder::new(gw.clone());
    b.set_auth(UsersAuth(gw.users.clone()));
    b.set_access(Admission { gw: gw.clone() });
    if !gw.cfg.domains.is_empty() {
        b.set_host(crate::vhost::Domains(gw.cfg.domains.clone()));
    }
    let mut cfg = S3Config::default();
    cfg.xml_max_body_size = MAX_XML_BYTES;
    cfg.post_object_max_file_size = gw.cfg.max_put_bytes;
    b.set_config(Arc::new(StaticConfigProvider::new(Arc::new(cfg))));
    b.build()
}

/// For a request asking for `100 Continue`: whether its body is empty. When hyper answers
/// such a request without `100 Continue` (empty body, or an error before the body is read),
/// botocore leaves its connection in a state that misreads the next response; the gateway
/// closes those connections after the response so clients stay correct.
pub fn expects_continue(h: &hyper::HeaderMap) -> Option<bool> {
    let expect = h
        .get(hyper::header::EXPECT)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    let empty = h
        .get(hyper::header::CONTENT_LENGTH)
        .is_none_or(|v| v.as_bytes() == b"0");
    expect.then_some(empty)
}

/// A message's body length as its headers declare it (the decoded length of an aws-chunked
/// body), 0 when they do not.
pub(crate) fn declared_len(h: &hyper::HeaderMap) -> u64 {
    ["x-amz-decoded-content-length", "content-length"]
        .iter()
        .find_map(|name| h.get(*name)?.to_str().ok()?.parse().ok())
        .unwrap_or(0)
}

/// Where a request's aws-chunked body records a failed chunk or trailer signature.
pub type ChunkFailure = Arc<OnceLock<AuthError>>;

/// Verifies the signature of a request against the user's secret in constant time: SigV4
/// (header or presigned; for signed aws-chunked bodies the body is wrapped so that every chunk
/// and the trailer are verified before s3s reads them) or SigV2 (header or presigned; the
/// request is then stripped of it, so s3s sees no signature it would compare itself). A
/// signed request gets the signer's [`Identity`] in its extensions. A POST form upload passes
/// to s3s, which checks its policy's signature; admission then names its signer. Anonymous
/// requests pass unchanged
/// (admission decides on them after s3s has routed them). Returns the request for s3s and,
/// for a checked body, the cell where a chunk failure is recorded.
pub async fn authenticate(
    req: hyper::Request<hyper::body::Incoming>,
    users: &Users,
) -> Result<(HttpRequest, Option<ChunkFailure>), S3Error> {
    let (mut parts, body) = req.into_parts();
    let sig = match sigv4::parse(&parts.method, &parts.uri, &parts.headers)
        .map_err(|e| e.to_s3())?
    {
        Signed::Anonymous | Signed::Form => {
            return Ok((HttpRequest::from_parts(parts, body.into()), None))
        }
        Signed::V2(sig) => {
            let chunked = parts
                .headers
                .get("x-amz-content-sha256")
                .is_some_and(|v| v.as_bytes().starts_with(b"STREAMING-"));
            if chunked {
                return Err(AuthError::Unsupported("aws-chunked bodies signed with SigV2").to_s3());
            }
            let (user, fresh) = users.lookup(&sig.access_key).await?;
            sig.verify(&parts.method, &parts.uri, &parts.headers, &user.secret_key)
                .map_err(|e| e.to_s3())?;
            sig.check_time(
                &parts.headers,
                time::OffsetDateTime::now_utc().unix_timestamp(),
            )?;
            parts.uri = crate::sigv2::strip(&parts.uri, &mut parts.headers);
            parts.extensions.insert(Identity {
                user: user.name,
                access_key: user.access_key,
                fresh,
            });
            return Ok((HttpRequest::from_parts(parts, body.into()), None));
        }
        Signed::V4(sig) => sig,
    };
    let (user, fresh) = users.lookup(&sig.credential.access_key).await?;
    let signer = sig
        .verify(&parts.method, &parts.uri, &parts.headers, &user.secret_key)
        .map_err(|e| e.to_s3())?;
    parts.extensions.insert(Identity {
        user: user.name,
        access_key: user.access_key,
        fresh,
    });
    let mode = match sig.payload.as_str() {
        sigv4::STREAMING_SIGNED => ChunkMode::Signed,
        sigv4::STREAMING_SIGNED_TRAILER => ChunkMode::SignedTrailer,
        sigv4::STREAMING_UNSIGNED_TRAILER => ChunkMode::UnsignedTrailer,
        p if p.starts_with("STREAMING-") => {
            return Err(AuthError::Unsupported("this aws-chunked signing method").to_s3())
        }
        _ => return Ok((HttpRequest::from_parts(parts, body.into()), None)),
    };
    let decoded_len = parts
        .headers
        .get("x-amz-decoded-content-length")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .ok_or_else(|| s3_error!(MissingContentLength, "missing x-amz-decoded-content-length"))?;
    let failure = ChunkFailure::default();
    let checked = CheckedBody::new(
        body,
        ChunkChecker::new(mode, signer, decoded_len),
        failure.clone(),
    );
    let stream: s3s::stream::DynByteStream = Box::pin(checked);
    Ok((HttpRequest::from_parts(parts, stream.into()), Some(failure)))
}

/// Authenticates `req` ([`authenticate`]) and serves it with s3s; a refused signature, or a
/// chunk signature that failed while s3s read the body, becomes the S3 error response.
/// A preflight `OPTIONS` is answered from the bucket's CORS rules, and a response to a
/// request with `Origin` gets the rules' `Access-Control-*` headers (`cors_ops`).
pub async fn handle(
    req: hyper::Request<hyper::body::Incoming>,
    gw: &Gateway,
    service: &S3Service,
) -> Result<HttpResponse, s3s::HttpError> {
    if req.method() == hyper::Method::OPTIONS {
        return Ok(cors_ops::preflight(gw, req.uri().path(), req.headers())
            .await
            .unwrap_or_else(error_response));
    }
    let cross_origin = req
        .headers()
        .get(hyper::header::ORIGIN)
        .and_then(|o| o.to_str().ok())
        .zip(cors_ops::bucket_of(gw, req.headers(), req.uri().path()))
        .map(|(o, b)| (o.to_string(), b.to_string(), req.method().clone()));
    let form = req.method() == hyper::Method::POST
        && req
            .headers()
            .get(hyper::header::CONTENT_TYPE)
            .is_some_and(|t| t.as_bytes().starts_with(b"multipart/form-data"));
    let (req, failure) = match authenticate(req, &gw.users).await {
        Ok(r) => r,
        Err(e) => return Ok(error_response(e)),
    };
    let mut resp = service.call(req).await?;
    if form && resp.status() == hyper::StatusCode::BAD_REQUEST {
        resp = policy_condition_denied(resp).await;
    }
    if let Some(e) = failure.as_ref().and_then(|f| f.get()) {
        resp = error_response(e.to_s3());
    }
    if let Some((origin, bucket, method)) = cross_origin {
        cors_ops::decorate(gw, &bucket, &origin, &method, &mut resp).await;
    }
    Ok(resp)
}

/// Largest error body read back to find out why a POST form was refused.
const MAX_FORM_ERROR_BYTES: usize = 8 << 10;

/// A POST form refused because its policy's condition failed, answered as AWS does: 403
/// AccessDenied "Invalid according to Policy" (s3s answers 400 InvalidPolicyDocument, the code
/// AWS keeps for a policy it cannot parse). Any other response passes unchanged.
async fn policy_condition_denied(mut resp: HttpResponse) -> HttpResponse {
    let Ok(body) = resp
        .body_mut()
        .store_all_limited(MAX_FORM_ERROR_BYTES)
        .await
    else {
        return error_response(S3Error::with_message(
            s3s::S3ErrorCode::InvalidRequest,
            "the form was refused".to_string(),
        ));
    };
    let text = String::from_utf8_lossy(&body);
    let between = |open: &str, close: &str| {
        let start = text.find(open)? + open.len();
        let len = text[start..].find(close)?;
        Some(text[start..start + len].to_string())
    };
    let condition_failed = between("<Code>", "</Code>").as_deref() == Some("InvalidPolicyDocument")
        && between("<Message>", "</Message>").is_some_and(|m| m.starts_with("Policy condition"));
    if !condition_failed {
        *resp.body_mut() = s3s::Body::from(body);
        return resp;
    }
    let why = between("<Message>", "</Message>").unwrap_or_default();
    let why = why
        .replace("&apos;", "'")
        .replace("&quot;", "\"")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&");
    error_response(S3Error::with_message(
        s3s::S3ErrorCode::AccessDenied,
        format!("Invalid according to Policy: {why}"),
    ))
}

fn error_response(e: S3Error) -> HttpResponse {
    e.to_http_response().unwrap_or_else(|_| {
        let mut r = HttpResponse::new(s3s::Body::empty());
        *r.status_mut() = hyper::StatusCode::INTERNAL_SERVER_ERROR;
        r
    })
}

/// How long a new connection waits for an idle connection to give up its slot before it is
/// refused with 503 SlowDown.
pub const SLOT_WAIT: Duration = Duration::from_secs(1);
/// How long an idle connection told to give up its slot may take to close.
const EVICT_GRACE: Duration = Duration::from_secs(1);
/// How long writing a refusal (and draining what the client sent) may take.
const REFUSAL_TIME: Duration = Duration::from_secs(1);

/// Longest TLS handshake a new connection may take.
pub const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves `service` on `listener` until the task is dropped or aborted, over TLS when `tls`
/// is given; `gw`'s users verify the signatures first and its buckets' CORS rules answer
/// preflights ([`handle`]); every request is counted in `metrics`. At most `max_connections` connections are served; see [`Slots`] for what one
/// more gets.
pub async fn serve(
    listener: TcpListener,
    service: S3Service,
    gw: Gateway,
    metrics: Arc<S3Metrics>,
    max_connections: usize,
    tls: Option<TlsAcceptor>,
) {
    let slots = Slots::new(max_connections, metrics.clone());
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!("accept: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        // Responses go out as a head and then body frames; with Nagle's algorithm a small
        // body waits for the client's delayed ACK of the head (about 40 ms on Linux).
        let _ = stream.set_nodelay(true);
        let (service, gw, metrics, slots, tls) = (
            service.clone(),
            gw.clone(),
            metrics.clone(),
            slots.clone(),
            tls.clone(),
        );
        tokio::spawn(async move {
            let Some(tls) = tls else {
                let Some(slot) = slots.claim(SLOT_WAIT).await else {
                    refuse(stream).await;
                    return;
                };
                serve_connection(stream, peer, slot, service, gw, metrics).await;
                return;
            };
            let stream = match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, tls.accept(stream)).await
            {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    tracing::debug!("TLS handshake with {peer}: {e}");
                    return;
                }
                Err(_) => {
                    tracing::debug!("TLS handshake with {peer} timed out");
                    return;
                }
            };
            let Some(slot) = slots.claim(SLOT_WAIT).await else {
                refuse(stream).await;
                return;
            };
            serve_connection(stream, peer, slot, service, gw, metrics).await;
        });
    }
}

/// Serves one connection holding `slot` until it closes, or until it is idle and told to
/// give its slot up.
async fn serve_connection<S: AsyncRead + AsyncWrite + Unpin + Send + 'static>(
    stream: S,
    peer: SocketAddr,
    slot: Slot,
    inner: S3Service,
    gw: Gateway,
    metrics: Arc<S3Metrics>,
) {
    let state = slot.state.clone();
    let svc = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
        let busy = state.request_started();
        let expect = expects_continue(req.headers());
        let inner = inner.clone();
        let gw = gw.clone();
        let metrics = metrics.clone();
        async move {
            let (t, method) = (Instant::now(), req.method().clone());
            let bytes_in = declared_len(req.headers());
            let in_flight = metrics.start();
            let answered = handle(req, &gw, &inner).await;
            drop(in_flight);
            let (status, bytes_out) = match &answered {
                Ok(r) => (r.status().as_u16(), declared_len(r.headers())),
                Err(_) => (500, 0),
            };
            metrics.record_http(method.as_str(), status, t.elapsed(), bytes_in, bytes_out);
            // The connection stays busy until the response body has been sent.
            let mut resp =
                answered?.map(|body| s3s::Body::http_body(BusyBody { body, _busy: busy }));
            if expect.is_some_and(|empty| empty || !resp.status().is_success()) {
                resp.headers_mut().insert(
                    hyper::header::CONNECTION,
                    hyper::header::HeaderValue::from_static("close"),
                );
            }
            Ok::<_, s3s::HttpError>(resp)
        }
    });
    let mut http = hyper::server::conn::http1::Builder::new();
    http.max_buf_size(MAX_HEADER_BYTES.max(8192))
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT);
    let conn = http.serve_connection(TokioIo::new(stream), svc);
    tokio::pin!(conn);
    let served = tokio::select! {
        r = conn.as_mut() => r,
        () = slot.state.evicted() => {
            conn.as_mut().graceful_shutdown();
            if slot.state.is_busy() {
                conn.await
            } else {
                tokio::time::timeout(EVICT_GRACE, conn).await.unwrap_or(Ok(()))
            }
        }
    };
    if let Err(e) = served {
        tracing::debug!("connection from {peer}: {e}");
    }
    drop(slot);
}

/// A response body that keeps its connection marked busy until it has been sent (or dropped).
struct BusyBody {
    body: s3s::Body,
    /// Held, not read: dropping the body marks the connection idle.
    _busy: Busy,
}

impl hyper::body::Body for BusyBody {
    type Data = bytes::Bytes;
    type Error = s3s::StdError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        std::pin::Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

/// The response a connection gets when every slot holds a request in progress.
const SLOW_DOWN_BODY: &str = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\
    <Error><Code>SlowDown</Code><Message>Too many connections with requests in progress; \
    retry later.</Message></Error>";

/// Answers a connection that found no slot with 503 SlowDown and closes it, reading what
/// the client sent meanwhile so the close does not reset the response away.
async fn refuse<S: AsyncRead + AsyncWrite + Unpin>(mut stream: S) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let head = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/xml\r\n\
         content-length: {}\r\nretry-after: 1\r\nconnection: close\r\n\r\n",
        SLOW_DOWN_BODY.len()
    );
    let _ = tokio::time::timeout(REFUSAL_TIME, async {
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(SLOW_DOWN_BODY.as_bytes()).await?;
        stream.shutdown().await?;
        let mut sink = [0u8; 4096];
        while stream.read(&mut sink).await? > 0 {}
        Ok::<_, std::io::Error>(())
    })
    .await;
}

/// Binds `addr` and serves the gateway on it, over TLS when the gateway's settings name a
/// certificate (`tls_cert`, `tls_key`); returns the bound address and the serving task.
pub async fn start(
    gw: &Gateway,
    addr: SocketAddr,
) -> Result<(SocketAddr, tokio::task::JoinHandle<()>), crate::GatewayError> {
    let tls = match (&gw.cfg.tls_cert, &gw.cfg.tls_key) {
        (Some(cert), Some(key)) => Some(TlsAcceptor::from(crate::tls::server_config(cert, key)?)),
        _ => None,
    };
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    let serving = serve(
        listener,
        service(gw),
        gw.clone(),
        gw.metrics.clone(),
        gw.cfg.max_connections,
        tls,
    );
    let lifecycle = crate::lifecycle_pass::run(gw.clone());
    // One task: the lifecycle pass stops with the gateway.
    let task = tokio::spawn(async move {
        tokio::select! {
            () = serving => {}
            () = lifecycle => {}
        }
    });
    Ok((local, task))
}
