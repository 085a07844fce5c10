//! The monitor under client churn: short-lived clients that subscribe and vanish (as every
//! operator script's `cairn` command does), clients that stall without closing, and thousands
//! of epochs published meanwhile. The monitor keeps answering, and forgets who is gone.
//!
//! A test binary of its own: it checks the process's resident memory, which other tests
//! running beside it in one process would grow.

use std::time::{Duration, Instant};

use cairn_client::mon::MonClient;
use cairn_clustermap::flags::MapFlag;
use cairn_clustermap::ClusterMap;
use cairn_mon::daemon::MonDaemon;
use cairn_mon::{MonConfig, Monitor};
use cairn_proto::mon::Request;

/// One epoch a request: `noout` set, then unset.
fn flip(on: bool) -> Request {
    Request::SetFlags {
        flags: vec![MapFlag::NoOut],
        on,
    }
}

/// A monitor of an empty cluster on a free loopback port, with its metrics page.
async fn monitor_with_page() -> MonDaemon {
    let monitor = Monitor::new(ClusterMap::new("fsid").unwrap(), MonConfig::default());
    let serving = cairn_mon::daemon::MonServing {
        store: None,
        metrics_listen: Some("127.0.0.1:0".parse().unwrap()),
        auth: None,
    };
    MonDaemon::serve(monitor, "127.0.0.1:0".parse().unwrap(), serving)
        .await
        .unwrap()
}

/// Waits (bounded) until `page` shows `metric` at `want`.
async fn metric_reaches(addr: std::net::SocketAddr, metric: &str, want: u64) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut last = u64::MAX;
    while Instant::now() < deadline {
        let page = metrics_page(addr).await;
        last = page
            .lines()
            .find_map(|l| l.strip_prefix(metric)?.trim().parse::<u64>().ok())
            .unwrap_or(u64::MAX);
        if last == want {
            return last;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    last
}

/// GET /metrics over a plain TCP connection.
async fn metrics_page(addr: std::net::SocketAddr) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    out
}

/// Clients that subscribed and went away (dropped, so their connections closed) are forgotten;
/// 5,000 epochs later the monitor answers a new client at once and its subscriber and session
/// counts are back to what the live clients hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribers_that_vanish_never_wedge_the_monitor() {
    let daemon = monitor_with_page().await;
    let metrics = daemon.metrics_addr().unwrap();
    for i in 0..40u64 {
        let c = MonClient::connect(daemon.addr(), 10_000 + i).await;
        c.subscribe(5_000).await.unwrap();
        drop(c);
    }
    let admin = MonClient::connect(daemon.addr(), 1).await;
    admin.subscribe(5_000).await.unwrap();
    let started = Instant::now();
    let mut epoch = 0;
    for i in 0..5_000u64 {
        epoch = admin
            .op(flip(i.is_multiple_of(2)), 10_000)
            .await
            .unwrap_or_else(|e| panic!("request {i} after {:?}: {e}", started.elapsed()))
            .epoch;
    }
    let seen = admin.wait_for_epoch(epoch, 10_000).await.unwrap();
    assert_eq!(seen.epoch, epoch, "the live subscriber follows every epoch");
    let late = MonClient::connect(daemon.addr(), 2).await;
    late.subscribe(5_000).await.unwrap();
    assert_eq!(
        late.wait_for_epoch(epoch, 5_000).await.unwrap().epoch,
        epoch
    );
    assert_eq!(
        metric_reaches(metrics, "cairn_mon_subscribers ", 2).await,
        2,
        "only the two live clients stay subscribed"
    );
    assert_eq!(
        metric_reaches(metrics, "cairn_msgr_sessions{daemon=\"mon\"} ", 2).await,
        2,
        "only the two live clients keep sessions"
    );
}

/// A raw client that says HELLO (lossy), subscribes from epoch 0, and then neither reads nor
/// acknowledges anything: a frozen process whose socket stays open.
async fn stalled_subscriber(addr: std::net::SocketAddr, id: u64) -> tokio::net::TcpStream {
    use bytes::{BufMut, BytesMut};
    use cairn_msgr::{Frame, Limits};
    use cairn_proto::mon::{to_payload, MonRequest, RequestBody, MSG_MON_REQUEST};
    use tokio::io::AsyncWriteExt;
    let mut hello = BytesMut::new();
    for word in [id, 0, 0x5741_11ed, 1] {
        hello.put_u64_le(word);
    }
    let mut wire = BytesMut::new();
    let limits = Limits::default();
    Frame::new(cairn_msgr::session::MSG_HELLO, hello.freeze())
        .encode(&limits, &mut wire)
        .unwrap();
    let mut subscribe = Frame::new(
        MSG_MON_REQUEST,
        to_payload(&MonRequest {
            tid: 1,
            body: RequestBody::Subscribe { have_epoch: 0 },
        }),
    );
    subscribe.header.seq = 1;
    subscribe.encode(&limits, &mut wire).unwrap();
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(&wire).await.unwrap();
    s
}

/// Resident memory of this process, bytes.
fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

/// The soak: 20,000 epochs while 1,000 short-lived clients connect, subscribe and vanish (a
/// quarter of them with a request still unanswered) and three subscribers stall with their
/// sockets open. The monitor answers an operator throughout (p50/p99 printed), and at the end
/// its sessions are back to the live ones and this process's memory near where it started.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_thousand_epochs_through_a_thousand_vanishing_clients() {
    let daemon = monitor_with_page().await;
    let (addr, metrics) = (daemon.addr(), daemon.metrics_addr().unwrap());
    let admin = MonClient::connect(addr, 1).await;
    admin.subscribe(5_000).await.unwrap();
    let baseline = rss_bytes();
    let mut stalled = Vec::new();
    for i in 0..3 {
        stalled.push(stalled_subscriber(addr, 900_000 + i).await);
    }
    let churn = tokio::spawn(async move {
        let mut joined = tokio::task::JoinSet::new();
        let mut ok = 0;
        for i in 0..1_000u64 {
            joined.spawn(async move {
                let c = MonClient::connect(addr, 100_000 + i).await;
                if c.subscribe(20_000).await.is_err() {
                    return false;
                }
                if i % 4 == 0 {
                    // Vanish with a request in flight: its reply finds the session gone.
                    let asked = c.op(flip(true), 1);
                    let _ = tokio::time::timeout(Duration::from_micros(200), asked).await;
                }
                true
            });
            if joined.len() >= 50 {
                if let Some(r) = joined.join_next().await {
                    ok += usize::from(r.unwrap_or(false));
                }
            }
        }
        while let Some(r) = joined.join_next().await {
            ok += usize::from(r.unwrap_or(false));
        }
        ok
    });
    let mut latencies = Vec::with_capacity(20_000);
    let mut epoch = 0;
    let mut i = 0u64;
    while epoch < 20_000 {
        let t = Instant::now();
        epoch = admin
            .op(flip(i.is_multiple_of(2)), 10_000)
            .await
            .unwrap_or_else(|e| panic!("request {i} at epoch {epoch}: {e}"))
            .epoch;
        latencies.push(t.elapsed());
        i += 1;
    }
    let subscribed = churn.await.unwrap();
    assert!(
        subscribed >= 990,
        "only {subscribed} of 1000 churning clients subscribed"
    );
    latencies.sort();
    let at = |per_mille: usize| latencies[(latencies.len() - 1) * per_mille / 1000];
    println!(
        "monitor requests through the churn: {} requests, p50 {:?}, p99 {:?}, max {:?}",
        latencies.len(),
        at(500),
        at(990),
        latencies[latencies.len() - 1]
    );
    assert_eq!(
        admin.wait_for_epoch(epoch, 10_000).await.unwrap().epoch,
        epoch
    );
    let late = MonClient::connect(addr, 2).await;
    late.subscribe(5_000).await.unwrap();
    assert_eq!(
        late.wait_for_epoch(epoch, 5_000).await.unwrap().epoch,
        epoch
    );
    // The stalled subscribers fell behind (each push holds at least 1 KiB of their window
    // until acknowledged) and were dropped from the subscribers; their sessions end with
    // their sockets.
    let page = metrics_page(metrics).await;
    let dropped: u64 = page
        .lines()
        .find_map(|l| {
            l.strip_prefix("cairn_mon_subscribers_dropped_total ")?
                .parse()
                .ok()
        })
        .unwrap();
    assert!(
        dropped >= 3,
        "the stalled subscribers were not dropped: {dropped}"
    );
    drop(stalled);
    assert_eq!(
        metric_reaches(metrics, "cairn_msgr_sessions{daemon=\"mon\"} ", 2).await,
        2,
        "only the two live clients keep sessions"
    );
    assert_eq!(
        metric_reaches(metrics, "cairn_mon_subscribers ", 2).await,
        2,
        "only the two live clients stay subscribed"
    );
    assert_eq!(
        metric_reaches(metrics, "cairn_msgr_held_bytes{daemon=\"mon\"} ", 0).await,
        0,
        "nothing stays queued for clients that are gone"
    );
    let grown = rss_bytes().saturating_sub(baseline);
    println!("resident memory grew by {} KiB", grown >> 10);
    assert!(
        grown < 64 << 20,
        "memory grew by {grown} bytes through the churn"
    );
}
