//! Access control through the whole gateway (HTTP server, signature check, admission,
//! operations) over a memory backend: another user and anonymous requests are refused on a
//! private bucket, a public-read object is readable anonymously and nothing more, a SigV2
//! presigned URL identifies its signer, and a key revoked in the user store is refused on the
//! very next request.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use cairn_s3::backend::{Backend, MemBackend};
use cairn_s3::gateway::Gateway;
use cairn_s3::sigv4::{hex, hmac_sha256, sha256_hex, signing_key};
use cairn_s3::users::{create_user, remove_key, User};
use cairn_s3::GatewayConfig;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A SigV4-signed request head (UNSIGNED-PAYLOAD; `query` sent as is and signed as `k=v`,
/// `extra` headers signed too).
fn signed(
    user: &User,
    addr: SocketAddr,
    method: &str,
    path: &str,
    query: &str,
    extra: &[(&str, &str)],
    len: usize,
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
    let mut headers = vec![
        ("host".to_string(), addr.to_string()),
        ("x-amz-content-sha256".into(), "UNSIGNED-PAYLOAD".into()),
        ("x-amz-date".into(), stamp.clone()),
    ];
    headers.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    headers.sort();
    let names: Vec<&str> = headers.iter().map(|(k, _)| k.as_str()).collect();
    let signed_names = names.join(";");
    let canon_headers: String = headers.iter().map(|(k, v)| format!("{k}:{v}\n")).collect();
    let canon_query = if query.is_empty() || query.contains('=') {
        query.to_string()
    } else {
        format!("{query}=")
    };
    let canonical = format!(
        "{method}\n{path}\n{canon_query}\n{canon_headers}\n{signed_names}\nUNSIGNED-PAYLOAD"
    );
    let scope = format!("{day}/us-east-1/s3/aws4_request");
    let to_sign = format!(
        "AWS4-HMAC-SHA256\n{stamp}\n{scope}\n{}",
        sha256_hex(canonical.as_bytes())
    );
    let key = signing_key(&user.secret_key, &day, "us-east-1", "s3");
    let signature = hex(&hmac_sha256(&key, to_sign.as_bytes()));
    let lines: String = headers
        .iter()
        .map(|(k, v)| format!("{k}: {v}\r\n"))
        .collect();
    let target = if query.is_empty() {
        path.to_string()
    } else {
        format!("{path}?{query}")
    };
    format!(
        "{method} {target} HTTP/1.1\r\n{lines}content-length: {len}\r\nconnection: close\r\n\
         authorization: AWS4-HMAC-SHA256 Credential={}/{scope}, SignedHeaders={signed_names}, \
         Signature={signature}\r\n\r\n",
        user.access_key
    )
}

/// An unsigned request head.
fn anonymous(addr: SocketAddr, method: &str, target: &str, len: usize) -> String {
    format!(
        "{method} {target} HTTP/1.1\r\nhost: {addr}\r\ncontent-length: {len}\r\nconnection: close\r\n\r\n"
    )
}

/// Sends a request on a new connection: status and the response's text.
async fn send(addr: SocketAddr, head: String, body: &[u8]) -> (u16, String) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(head.as_bytes()).await.unwrap();
    s.write_all(body).await.unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(20), s.read_to_end(&mut raw))
        .await
        .expect("response in time")
        .expect("read");
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owners_acls_sigv2_and_revocation_through_the_gateway() {
    let backend = Arc::new(MemBackend::default());
    let alice = create_user(backend.as_ref(), "alice").await.unwrap();
    let bob = create_user(backend.as_ref(), "bob").await.unwrap();
    let store: Arc<dyn Backend> = backend.clone();
    let gw = Gateway::new(store.clone(), GatewayConfig::default());
    let (addr, server) = cairn_s3::server::start(&gw, "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let ok = |r: (u16, String), want: u16, what: &str| {
        assert_eq!(r.0, want, "{what}: {}", r.1);
        r.1
    };
    ok(
        send(addr, signed(&alice, addr, "PUT", "/abc", "", &[], 0), b"").await,
        200,
        "create",
    );
    let put = signed(&alice, addr, "PUT", "/abc/secret", "", &[], 6);
    ok(send(addr, put, b"secret").await, 200, "put");
    let put = signed(
        &alice,
        addr,
        "PUT",
        "/abc/pub",
        "",
        &[("x-amz-acl", "public-read")],
        6,
    );
    ok(send(addr, put, b"public").await, 200, "put public-read");

    // Bob and anonymous requests: every method on the private bucket and object is denied.
    for (method, path, query) in [
        ("GET", "/abc/secret", ""),
        ("HEAD", "/abc/secret", ""),
        ("PUT", "/abc/secret", ""),
        ("DELETE", "/abc/secret", ""),
        ("GET", "/abc", ""),
        ("HEAD", "/abc", ""),
        ("DELETE", "/abc", ""),
        ("GET", "/abc", "acl"),
        ("PUT", "/abc", "acl"),
        ("GET", "/abc", "policy"),
        ("POST", "/abc/m", "uploads"),
    ] {
        let acl = [("x-amz-acl", "public-read-write")];
        let extra: &[(&str, &str)] = if query == "acl" { &acl } else { &[] };
        let (status, text) =
            send(addr, signed(&bob, addr, method, path, query, extra, 0), b"").await;
        assert_eq!(status, 403, "bob {method} {path}?{query}: {text}");
        let target = if query.is_empty() {
            path.to_string()
        } else {
            format!("{path}?{query}")
        };
        let (status, text) = send(addr, anonymous(addr, method, &target, 0), b"").await;
        assert_eq!(status, 403, "anonymous {method} {target}: {text}");
    }
    let list = ok(
        send(addr, signed(&bob, addr, "GET", "/", "", &[], 0), b"").await,
        200,
        "bob lists",
    );
    assert!(
        !list.contains("<Name>abc</Name>"),
        "bob does not see alice's bucket: {list}"
    );
    let list = ok(
        send(addr, signed(&alice, addr, "GET", "/", "", &[], 0), b"").await,
        200,
        "alice lists",
    );
    assert!(list.contains("<Name>abc</Name>"), "{list}");

    // public-read on the object: anonymous GET and HEAD only.
    let got = ok(
        send(addr, anonymous(addr, "GET", "/abc/pub", 0), b"").await,
        200,
        "anonymous GET",
    );
    assert!(got.ends_with("public"), "{got}");
    ok(
        send(addr, anonymous(addr, "HEAD", "/abc/pub", 0), b"").await,
        200,
        "anonymous HEAD",
    );
    ok(
        send(addr, anonymous(addr, "PUT", "/abc/pub", 1), b"x").await,
        403,
        "anonymous PUT",
    );
    ok(
        send(addr, anonymous(addr, "DELETE", "/abc/pub", 0), b"").await,
        403,
        "anonymous DELETE",
    );
    let got = ok(
        send(
            addr,
            signed(&alice, addr, "GET", "/abc/secret", "", &[], 0),
            b"",
        )
        .await,
        200,
        "intact",
    );
    assert!(got.ends_with("secret"), "{got}");

    // A SigV2 presigned GET: alice's works, bob's for the same object is alice's object
    // refused, a tampered one is refused.
    let expires = time::OffsetDateTime::now_utc().unix_timestamp() + 300;
    let presign = |u: &User| {
        let uri: hyper::Uri = "/abc/secret".parse().unwrap();
        let sts = cairn_s3::sigv2::string_to_sign(
            &hyper::Method::GET,
            &uri,
            &hyper::HeaderMap::new(),
            Some(expires),
        );
        let sig = cairn_s3::sigv2::sign(&u.secret_key, &sts)
            .replace('+', "%2B")
            .replace('/', "%2F")
            .replace('=', "%3D");
        format!(
            "/abc/secret?AWSAccessKeyId={}&Expires={expires}&Signature={sig}",
            u.access_key
        )
    };
    let got = ok(
        send(addr, anonymous(addr, "GET", &presign(&alice), 0), b"").await,
        200,
        "v2 url",
    );
    assert!(got.ends_with("secret"), "{got}");
    ok(
        send(addr, anonymous(addr, "GET", &presign(&bob), 0), b"").await,
        403,
        "bob's v2 url",
    );
    let tampered = presign(&alice).replace(
        &format!("Expires={expires}"),
        &format!("Expires={}", expires + 1),
    );
    ok(
        send(addr, anonymous(addr, "GET", &tampered, 0), b"").await,
        403,
        "tampered v2 url",
    );

    // Revoked in the store (as `cairn s3 user key rm` does): the cached key is refused on the
    // very next request.
    ok(
        send(addr, signed(&bob, addr, "GET", "/", "", &[], 0), b"").await,
        200,
        "bob before",
    );
    remove_key(store.as_ref(), "bob", &bob.access_key)
        .await
        .unwrap();
    let (status, text) = send(addr, signed(&bob, addr, "GET", "/", "", &[], 0), b"").await;
    assert!(
        status == 403 && text.contains("InvalidAccessKeyId"),
        "revoked: {text}"
    );
    server.abort();
}
