//! A minimal HTTP/1.1 endpoint for daemons' text pages (Prometheus metrics): `GET <path>` is
//! answered with whatever the page function returns for that path, or 404; anything else gets
//! 405. One request per connection; the request head is limited to 8 KiB and 5 s.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::MsgrError;

/// Largest request head read (explicit limit).
pub const MAX_REQUEST_HEAD_BYTES: usize = 8 << 10;

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
                let _ = tokio::time::timeout(Duration::from_secs(5), answer(sock, pages)).await;
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

async fn answer(mut sock: TcpStream, pages: PageFn) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(1024);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = sock.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        head.extend_from_slice(&buf[..n]);
        if head.len() > MAX_REQUEST_HEAD_BYTES {
            return respond(&mut sock, "431 Request Header Fields Too Large", "").await;
        }
    }
    let line = head.split(|&b| b == b'\r').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    if method != "GET" {
        return respond(&mut sock, "405 Method Not Allowed", "only GET\n").await;
    }
    match pages(path) {
        Some(body) => respond(&mut sock, "200 OK", &body).await,
        None => respond(&mut sock, "404 Not Found", "no such page\n").await,
    }
}

async fn respond(sock: &mut TcpStream, status: &str, body: &str) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    sock.write_all(head.as_bytes()).await?;
    sock.write_all(body.as_bytes()).await?;
    sock.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;

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
