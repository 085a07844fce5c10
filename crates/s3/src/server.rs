//! The HTTP side: builds the s3s service (SigV4 via [`UsersAuth`], admission via
//! [`Admission`], explicit XML and header size limits) and serves it with hyper on a TCP
//! listener, at most `max_connections` connections at a time.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use s3s::config::{S3Config, StaticConfigProvider};
use s3s::service::{S3Service, S3ServiceBuilder};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::access::Admission;
use crate::gateway::Gateway;
use crate::users::UsersAuth;

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
    b.set_access(Admission {
        users: gw.users.clone(),
        limiter: gw.limiter.clone(),
        epoch: gw.epoch,
    });
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

/// Serves `service` on `listener` until the task is dropped or aborted.
pub async fn serve(listener: TcpListener, service: S3Service, max_connections: usize) {
    let slots = Arc::new(Semaphore::new(max_connections));
    loop {
        let Ok(permit) = slots.clone().acquire_owned().await else {
            return;
        };
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
        let inner = service.clone();
        let svc = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
            let expect = expects_continue(req.headers());
            let inner = inner.clone();
            async move {
                let mut resp = hyper::service::Service::call(&inner, req).await?;
                if expect.is_some_and(|empty| empty || !resp.status().is_success()) {
                    resp.headers_mut().insert(
                        hyper::header::CONNECTION,
                        hyper::header::HeaderValue::from_static("close"),
                    );
                }
                Ok::<_, s3s::HttpError>(resp)
            }
        });
        tokio::spawn(async move {
            let mut http = hyper::server::conn::http1::Builder::new();
            http.max_buf_size(MAX_HEADER_BYTES.max(8192))
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT);
            if let Err(e) = http.serve_connection(TokioIo::new(stream), svc).await {
                tracing::debug!("connection from {peer}: {e}");
            }
            drop(permit);
        });
    }
}

/// Binds `addr` and serves the gateway on it; returns the bound address and the serving
/// task.
pub async fn start(
    gw: &Gateway,
    addr: SocketAddr,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    let task = tokio::spawn(serve(listener, service(gw), gw.cfg.max_connections));
    Ok((local, task))
}
