//! A TCP proxy for tests of lost and stalled connections: it forwards each connection it
//! accepts to a target, passing the dialer's bytes through a filter that may forward them,
//! swallow them (a path that lost the connection's state one way) or cut the connection.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the proxy does with a chunk of the dialer's bytes.
pub enum Up {
    /// Forwards it.
    Pass,
    /// Drops it, the connection left open.
    Swallow,
    /// Forwards it, then closes the connection both ways.
    PassThenCut,
}

/// Starts a proxy to `target` on a loopback port, which it returns. `filter(connection,
/// forwarded)` decides each chunk read from a dialer, given the connection's index (from 0,
/// in accept order, counted in `connections`) and the bytes it carried so far, this chunk
/// included; the target's bytes always pass.
pub async fn proxy(
    target: SocketAddr,
    filter: impl Fn(usize, usize) -> Up + Send + Sync + 'static,
    connections: Arc<AtomicUsize>,
) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let filter = Arc::new(filter);
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            let index = connections.fetch_add(1, Ordering::SeqCst);
            let Ok(mut outbound) = TcpStream::connect(target).await else {
                continue;
            };
            let filter = filter.clone();
            tokio::spawn(async move {
                let (mut ri, mut wi) = inbound.split();
                let (mut ro, mut wo) = outbound.split();
                let up = async {
                    let mut buf = vec![0u8; 4096];
                    let mut forwarded = 0usize;
                    loop {
                        let n = match ri.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => n,
                        };
                        forwarded += n;
                        let verdict = filter(index, forwarded);
                        if matches!(verdict, Up::Swallow) {
                            continue;
                        }
                        if wo.write_all(&buf[..n]).await.is_err() {
                            return;
                        }
                        if matches!(verdict, Up::PassThenCut) {
                            return;
                        }
                    }
                };
                let down = async {
                    let _ = tokio::io::copy(&mut ro, &mut wi).await;
                };
                tokio::select! { _ = up => {}, _ = down => {} }
            });
        }
    });
    addr
}
