//! The gateway's connection and body limits seen from raw sockets: idle connections give
//! their slots to new ones, a connection finding every slot busy gets 503 SlowDown, a body
//! waiting too long for the body budget gets 503 SlowDown, a stalled body gets 400
//! RequestTimeout and gives its budget back, and the service answers normally afterwards.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use cairn_s3::backend::MemBackend;
use cairn_s3::gateway::Gateway;
use cairn_s3::sigv4::{hex, hmac_sha256, sha256_hex, signing_key};
use cairn_s3::users::{create_user, User};
use cairn_s3::GatewayConfig;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const REGION: &str = "us-east-1";

/// A SigV4-signed request head (UNSIGNED-PAYLOAD) for `method path` with a body of
/// `content_length` bytes.
fn signed_head(
    user: &User,
    addr: SocketAddr,
    method: &str,
    path: &str,
    content_length: usize,
) -> String {
    let now = time::OffsetDateTime::now_utc();
    let day = format!(
        "{:04}{:02}{:02}",
        now.year(),
        u8::from(now.month()),
        now.day()
    );
    let stamp = format!(
        "{day}T{:02}{:02}{:02}Z",
        now.hour(),
        now.minute(),
        now.second()
    );
    let host = addr.to_string();
    let signed = "host;x-amz-content-sha256;x-amz-date";
    let canonical = format!(
        "{method}\n{path}\n\nhost:{host}\nx-amz-content-sha256:UNSIGNED-PAYLOAD\n\
         x-amz-date:{stamp}\n\n{signed}\nUNSIGNED-PAYLOAD"
    );
    let scope = format!("{day}/{REGION}/s3/aws4_request");
    let to_sign = format!(
        "AWS4-HMAC-SHA256\n{stamp}\n{scope}\n{}",
        sha256_hex(canonical.as_bytes())
    );
    let key = signing_key(&user.secret_key, &day, REGION, "s3");
    let signature = hex(&hmac_sha256(&key, to_sign.as_bytes()));
    format!(
        "{method} {path} HTTP/1.1\r\nhost: {host}\r\nx-amz-content-sha256: UNSIGNED-PAYLOAD\r\n\
         x-amz-date: {stamp}\r\ncontent-length: {content_length}\r\nconnection: close\r\n\
         authorization: AWS4-HMAC-SHA256 Credential={}/{scope}, SignedHeaders={signed}, \
         Signature={signature}\r\n\r\n",
        user.access_key
    )
}

/// Reads a whole response (the server closes after it): status code and the raw text.
async fn response(mut s: TcpStream) -> (u16, Vec<u8>) {
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(20), s.read_to_end(&mut raw))
        .await
        .expect("the response arrives in time")
        .expect("read the response");
    let text = String::from_utf8_lossy(&raw);
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP response: {text:?}"));
    (status, raw)
}

/// Sends a whole request on a new connection and returns its response.
async fn request(addr: SocketAddr, head: String, body: &[u8]) -> (u16, Vec<u8>) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(head.as_bytes()).await.unwrap();
    s.write_all(body).await.unwrap();
    response(s).await
}

/// The body of a raw response (after the head).
fn body_of(raw: &[u8]) -> &[u8] {
    let at = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a complete head");
    &raw[at + 4..]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_yield_busy_ones_hold_and_stalled_bodies_time_out() {
    let cfg = GatewayConfig {
        max_connections: 3,
        stripe_bytes: 1 << 20,
        max_inflight_body_bytes: 2 << 20,
        body_idle_timeout_ms: 4_000,
        body_admit_timeout_ms: 2_000,
        ..GatewayConfig::default()
    };
    let backend = Arc::new(MemBackend::default());
    let user = create_user(backend.as_ref(), "alice").await.unwrap();
    let gw = Gateway::new(backend, cfg);
    let (addr, server) = cairn_s3::server::start(&gw, "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let limits = &gw.metrics.limits;
    let (status, raw) = request(addr, signed_head(&user, addr, "PUT", "/bkt", 0), b"").await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&raw));

    // Three idle connections hold every slot; a request still gets through.
    let mut idle = Vec::new();
    for _ in 0..3 {
        idle.push(TcpStream::connect(addr).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let small = vec![7u8; 1000];
    let head = signed_head(&user, addr, "PUT", "/bkt/small", small.len());
    assert_eq!(request(addr, head, &small).await.0, 200);
    assert!(limits.connections_evicted.load(Ordering::Relaxed) >= 1);
    drop(idle);
    tokio::time::sleep(Duration::from_millis(100)).await;

    // Two uploads that stall after a few bytes take the whole body budget.
    let mut stalled = Vec::new();
    for name in ["s1", "s2"] {
        let mut s = TcpStream::connect(addr).await.unwrap();
        let head = signed_head(&user, addr, "PUT", &format!("/bkt/{name}"), 1 << 20);
        s.write_all(head.as_bytes()).await.unwrap();
        s.write_all(&[1u8; 100]).await.unwrap();
        stalled.push(s);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;

    // A third upload waits for budget and is told to slow down; while it waits, every slot
    // holds a request in progress and a fourth connection is refused.
    let third = tokio::spawn({
        let head = signed_head(&user, addr, "PUT", "/bkt/third", 1000);
        async move { request(addr, head, &[3u8; 1000]).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let head = signed_head(&user, addr, "GET", "/bkt/small", 0);
    let (status, raw) = request(addr, head, b"").await;
    assert_eq!(status, 503);
    assert!(String::from_utf8_lossy(&raw).contains("<Code>SlowDown</Code>"));
    assert_eq!(limits.connections_refused.load(Ordering::Relaxed), 1);
    let (status, raw) = third.await.unwrap();
    assert_eq!(status, 503, "{}", String::from_utf8_lossy(&raw));
    assert!(String::from_utf8_lossy(&raw).contains("SlowDown"));
    assert_eq!(limits.bodies_refused.load(Ordering::Relaxed), 1);

    // The stalled uploads are cut short and leave nothing behind.
    for s in stalled {
        let (status, raw) = response(s).await;
        assert_eq!(status, 400);
        assert!(String::from_utf8_lossy(&raw).contains("RequestTimeout"));
    }
    assert_eq!(limits.body_timeouts.load(Ordering::Relaxed), 2);
    for name in ["s1", "s2"] {
        let head = signed_head(&user, addr, "GET", &format!("/bkt/{name}"), 0);
        assert_eq!(
            request(addr, head, b"").await.0,
            404,
            "{name} was not stored"
        );
    }

    // The budget and the slots are free again: a full upload and its read-back work.
    let data: Vec<u8> = (0..1_500_000u32).map(|i| (i % 251) as u8).collect();
    let head = signed_head(&user, addr, "PUT", "/bkt/after", data.len());
    assert_eq!(request(addr, head, &data).await.0, 200);
    let (status, raw) = request(addr, signed_head(&user, addr, "GET", "/bkt/after", 0), b"").await;
    assert_eq!(status, 200);
    assert_eq!(
        crc_fast::crc32_iscsi(body_of(&raw)),
        crc_fast::crc32_iscsi(&data)
    );
    let page = gw.metrics.render();
    assert!(
        page.contains("cairn_s3_connections_refused_total 1"),
        "{page}"
    );
    server.abort();
}
