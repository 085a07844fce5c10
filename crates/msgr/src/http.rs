//! Daemons' HTTP text pages (Prometheus metrics), served by hyper: `GET <path>` is answered
//! with whatever the page function returns for that path, or 404; any other method gets 405.
//! One request per connection; the request head is limited to 8 KiB (431 past it) and a
//! connection to 5 s.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;

use crate::MsgrError;

/// Largest request head read (explicit limit; hyper's smallest read buffer).
pub const MAX_REQUEST_HEAD_BYTES: usize = 8 << 10;

/// How long one connection may take, head and answer together.
const CONNECTION_DEADLINE: Duration = Duration::from_secs(5);

/// Renders the page at a path, or None for 404.
pub type PageFn = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// Serves `pages` on `addr`; returns the bound address and the accept task.
pub async fn serve_pages(
    addr: SocketAddr,
    pages: PageFn,
) -> Result<(SocketAddr, tokio::task::JoinHandle<()>), MsgrError> {
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    let task = tokio::spawn(async move {
        while let Ok((sock, _)) = listener.accept().await {
            let pages = pages.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |request| {
                    let page = answer(&request, &pages);
                    async move { Ok::<_, Infallible>(page) }
                });
                let connection = hyper::server::conn::http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(CONNECTION_DEADLINE)
                    .max_buf_size(MAX_REQUEST_HEAD_BYTES)
                    .keep_alive(false)
                    .serve_connection(TokioIo::new(sock), service);
                let _ = tokio::time::timeout(CONNECTION_DEADLINE, connection).await;
            });
        }
    });
    Ok((local, task))
}

/// Serves one Prometheus page, `render()` at `/metrics`, on `addr` (every daemon's metrics
/// endpoint); returns the bound address and the accept task.
pub async fn serve_metrics(
    addr: SocketAddr,
    render: impl Fn() -> String + Send + Sync + 'static,
) -> Result<(SocketAddr, tokio::task::JoinHandle<()>), MsgrError> {
    let pages: PageFn = Arc::new(move |path: &str| (path == "/metrics").then(&render));
    serve_pages(addr, pages).await
}

/// The answer to one request: the page, 404 or 405.
fn answer(request: &Request<Incoming>, pages: &PageFn) -> Response<String> {
    let (status, body) = match request.method() {
        &Method::GET => match pages(request.uri().path()) {
            Some(page) => (StatusCode::OK, page),
            None => (StatusCode::NOT_FOUND, "no such page\n".to_string()),
        },
        _ => (StatusCode::METHOD_NOT_ALLOWED, "only GET\n".to_string()),
    };
    let mut response = Response::new(body);
    *response.status_mut() = status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static(cairn_metrics::CONTENT_TYPE),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    async fn get(addr: SocketAddr, request: &[u8]) -> String {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(request).await.unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out
    }

    #[tokio::test]
    async fn serves_pages_and_refuses_the_rest() {
        let pages: PageFn =
            Arc::new(|p: &str| (p == "/metrics").then(|| "cairn_up 1\n".to_string()));
        let (addr, task) = serve_pages("127.0.0.1:0".parse().unwrap(), pages)
            .await
            .unwrap();
        let ok = get(addr, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").await;
        assert!(ok.starts_with("HTTP/1.1 200 OK"), "{ok}");
        assert!(ok.ends_with("cairn_up 1\n"));
        assert!(get(addr, b"GET /nope HTTP/1.1\r\n\r\n")
            .await
            .contains("404"));
        assert!(get(addr, b"POST /metrics HTTP/1.1\r\n\r\n")
            .await
            .contains("405"));
        let huge = vec![b'a'; MAX_REQUEST_HEAD_BYTES + 10];
        assert!(get(addr, &huge).await.contains("431"));
        task.abort();
    }
}
