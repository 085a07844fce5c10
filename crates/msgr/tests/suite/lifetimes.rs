//! How long an accepting daemon holds a session: a lossy (client) session ends with its
//! connection, silent connections are closed after the idle timeout, a full window refuses a
//! send that may not wait, a connection stalled in one direction is made again after the
//! acknowledgement timeout, and a listener at its connection limit closes new connections while
//! its sessions go on.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, BytesMut};
use cairn_msgr::session::{Listener, Policy, Session, MSG_HELLO};
use cairn_msgr::{Frame, Limits, MsgrError};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::proxy::{proxy, Up};

fn loopback() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

/// Waits up to 10 s for `cond`.
async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn accepted(listener: &mut Listener) -> Session {
    tokio::time::timeout(Duration::from_secs(5), listener.accept())
        .await
        .expect("a session was accepted")
        .expect("the listener is open")
}

/// A raw connection that says HELLO (lossy, session `id`) and then nothing at all: a client
/// frozen or gone without closing its socket.
async fn silent_client(addr: SocketAddr, id: u64) -> TcpStream {
    let mut payload = BytesMut::new();
    payload.put_u64_le(id);
    payload.put_u64_le(0);
    payload.put_u64_le(0x1234_5679);
    payload.put_u64_le(1);
    let mut wire = BytesMut::new();
    Frame::new(MSG_HELLO, payload.freeze())
        .encode(&Limits::default(), &mut wire)
        .unwrap();
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(&wire).await.unwrap();
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lossy_session_ends_with_its_connection_and_is_forgotten() {
    let mut listener = Listener::bind(loopback(), Limits::default()).await.unwrap();
    let stats = listener.stats();
    let mut kept = Vec::new();
    for id in 0..200u64 {
        let client = Session::connect_with(
            listener.local_addr(),
            id,
            Limits::default(),
            20,
            Policy::Lossy,
        )
        .await;
        client.send(3, b"hi".to_vec()).await.unwrap();
        let mut server = accepted(&mut listener).await;
        assert_eq!(
            &server.recv_timeout(5_000).await.unwrap().payload[..],
            b"hi"
        );
        drop(client);
        kept.push(server);
    }
    for server in &mut kept {
        assert!(
            matches!(server.recv_timeout(5_000).await, Err(MsgrError::Closed)),
            "the daemon's end of a vanished client's session ends"
        );
        assert!(server.sender().is_closed());
        assert!(matches!(
            server.sender().send(4, b"late".to_vec()).await,
            Err(MsgrError::Closed)
        ));
    }
    eventually("every session forgotten", || stats.sessions() == 0).await;
    eventually("every connection closed", || stats.connections() == 0).await;
    assert_eq!(stats.held_bytes(), 0, "nothing stays queued for the gone");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lossy_client_that_reconnects_starts_a_new_session() {
    let mut listener = Listener::bind(loopback(), Limits::default()).await.unwrap();
    let relay = tokio::net::TcpListener::bind(loopback()).await.unwrap();
    let relay_addr = relay.local_addr().unwrap();
    let upstream = listener.local_addr();
    // Relays each connection; the first is cut after its first exchange.
    let cut = std::sync::Arc::new(tokio::sync::Notify::new());
    let cutter = cut.clone();
    tokio::spawn(async move {
        let mut first = true;
        loop {
            let Ok((mut inbound, _)) = relay.accept().await else {
                return;
            };
            let mut outbound = TcpStream::connect(upstream).await.unwrap();
            let cutter = cutter.clone();
            let cuttable = std::mem::replace(&mut first, false);
            tokio::spawn(async move {
                let copy = tokio::io::copy_bidirectional(&mut inbound, &mut outbound);
                if cuttable {
                    tokio::select! { _ = copy => {}, () = cutter.notified() => {} }
                } else {
                    let _ = copy.await;
                }
            });
        }
    });
    let mut client =
        Session::connect_with(relay_addr, 9, Limits::default(), 20, Policy::Lossy).await;
    let mut restarts = client.sender().peer_restarts();
    client.send(3, b"one".to_vec()).await.unwrap();
    let mut first = accepted(&mut listener).await;
    assert_eq!(
        &first.recv_timeout(5_000).await.unwrap().payload[..],
        b"one"
    );
    cut.notify_one();
    assert!(
        matches!(first.recv_timeout(5_000).await, Err(MsgrError::Closed)),
        "the daemon forgets the session when its connection is cut"
    );
    tokio::time::timeout(Duration::from_secs(5), restarts.changed())
        .await
        .expect("the client learns its session started over")
        .unwrap();
    client.send(3, b"two".to_vec()).await.unwrap();
    let mut second = accepted(&mut listener).await;
    assert_eq!(second.id(), 9);
    assert_eq!(
        &second.recv_timeout(5_000).await.unwrap().payload[..],
        b"two"
    );
    second.send(4, b"back".to_vec()).await.unwrap();
    assert_eq!(
        &client.recv_timeout(5_000).await.unwrap().payload[..],
        b"back"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_connection_is_closed_after_the_idle_timeout() {
    let limits = Limits {
        idle_timeout_ms: 400,
        ..Limits::default()
    };
    let mut listener = Listener::bind(loopback(), limits).await.unwrap();
    let stats = listener.stats();
    let _frozen = silent_client(listener.local_addr(), 5).await;
    let mut server = accepted(&mut listener).await;
    // A live client on its own keepalives outlasts the timeout many times over.
    let live = Session::connect_with(listener.local_addr(), 6, limits, 20, Policy::Lossy).await;
    live.send(3, b"x".to_vec()).await.unwrap();
    let mut live_server = accepted(&mut listener).await;
    live_server.recv_timeout(5_000).await.unwrap();
    assert!(
        matches!(server.recv_timeout(5_000).await, Err(MsgrError::Closed)),
        "the frozen client's session ends"
    );
    tokio::time::sleep(Duration::from_millis(1_600)).await;
    live.send(3, b"y".to_vec()).await.unwrap();
    assert_eq!(
        &live_server.recv_timeout(5_000).await.unwrap().payload[..],
        b"y"
    );
    assert_eq!(stats.sessions(), 1, "only the live session stays");
    let page = cairn_metrics::render({
        let stats = stats.clone();
        move |e| stats.encode(e, "t")
    });
    assert!(page.contains("cairn_msgr_idle_closed_total{daemon=\"t\"} 1"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_stalled_one_way_is_made_again_after_the_ack_timeout() {
    let limits = Limits {
        ack_timeout_ms: 300,
        ..Limits::default()
    };
    let mut listener = Listener::bind(loopback(), limits).await.unwrap();
    let stall = Arc::new(AtomicBool::new(false));
    let connections = Arc::new(AtomicUsize::new(0));
    // Once `stall` is set, the first connection swallows every byte from the client while
    // still carrying the listener's keepalives back; later connections forward both ways.
    let swallow = stall.clone();
    let proxy = proxy(
        listener.local_addr(),
        move |connection, _| match connection == 0 && swallow.load(Ordering::SeqCst) {
            true => Up::Swallow,
            false => Up::Pass,
        },
        connections.clone(),
    )
    .await;
    let client = Session::connect_with(proxy, 11, limits, 20, Policy::Lossless).await;
    client.send(3, b"one".to_vec()).await.unwrap();
    let mut server = accepted(&mut listener).await;
    assert_eq!(
        &server.recv_timeout(5_000).await.unwrap().payload[..],
        b"one"
    );
    stall.store(true, Ordering::SeqCst);
    client.send(3, b"two".to_vec()).await.unwrap();
    client.send(3, b"three".to_vec()).await.unwrap();
    // Without the acknowledgement timeout these wait for the idle timeout, a minute.
    for want in [&b"two"[..], b"three"] {
        let got = server.recv_timeout(5_000).await.unwrap();
        assert_eq!(&got.payload[..], want, "resent once each, in order");
    }
    assert_eq!(connections.load(Ordering::SeqCst), 2, "made again once");
    assert!(
        server.recv_timeout(300).await.is_err(),
        "nothing delivered twice"
    );
    server.send(4, b"back".to_vec()).await.unwrap();
    let mut client = client;
    assert_eq!(
        &client.recv_timeout(5_000).await.unwrap().payload[..],
        b"back"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_window_refuses_a_send_that_may_not_wait() {
    let limits = Limits {
        max_inflight_bytes: 64 << 10,
        ..Limits::default()
    };
    let mut listener = Listener::bind(loopback(), limits).await.unwrap();
    let _frozen = silent_client(listener.local_addr(), 8).await;
    let server = accepted(&mut listener).await;
    let sender = server.sender();
    let mut sent = 0;
    let err = loop {
        match sender.try_send(4, vec![7u8; 4096]) {
            Ok(()) => sent += 1,
            Err(e) => break e,
        }
        assert!(sent < 1_000, "the window never filled");
    };
    assert!(
        matches!(err, MsgrError::Busy { held_bytes } if held_bytes >= 60 << 10),
        "{err}"
    );
    assert_eq!(sent, 16, "64 KiB of 4 KiB frames fit");
    assert_eq!(listener.stats().held_bytes(), 64 << 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listener_at_its_connection_limit_closes_new_ones_and_serves_its_own() {
    let limits = Limits {
        max_connections: 2,
        ..Limits::default()
    };
    let mut listener = Listener::bind(loopback(), limits).await.unwrap();
    let stats = listener.stats();
    let a = Session::connect_with(listener.local_addr(), 1, limits, 20, Policy::Lossy).await;
    a.send(3, b"a".to_vec()).await.unwrap();
    let mut sa = accepted(&mut listener).await;
    let _held = silent_client(listener.local_addr(), 2).await;
    let _sb = accepted(&mut listener).await;
    let c = Session::connect_with(listener.local_addr(), 3, limits, 20, Policy::Lossy).await;
    c.send(3, b"c".to_vec()).await.unwrap();
    eventually("the third connection is refused", || {
        stats.connections_refused() >= 1
    })
    .await;
    assert!(
        tokio::time::timeout(Duration::from_millis(300), listener.accept())
            .await
            .is_err(),
        "no third session"
    );
    assert_eq!(&sa.recv_timeout(5_000).await.unwrap().payload[..], b"a");
    drop(_held);
    let mut sc = accepted(&mut listener).await;
    assert_eq!(&sc.recv_timeout(5_000).await.unwrap().payload[..], b"c");
}

/// A peer that acknowledges everything (to release the daemon's send window) while it reads
/// nothing releases no more than its socket took: the daemon's sends find the window full
/// rather than queueing without bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledging_what_was_never_read_releases_no_more_than_the_socket_took() {
    let limits = Limits {
        max_inflight_bytes: 1 << 20,
        ..Limits::default()
    };
    let mut listener = Listener::bind(loopback(), limits).await.unwrap();
    let mut raw = silent_client(listener.local_addr(), 77).await;
    let ack_all = |seq: u64| {
        let mut frame = Frame::new(3, bytes::Bytes::from_static(b"ack everything"));
        frame.header.seq = seq;
        frame.header.ack = u64::MAX;
        let mut wire = BytesMut::new();
        frame.encode(&Limits::default(), &mut wire).unwrap();
        wire
    };
    raw.write_all(&ack_all(1)).await.unwrap();
    let mut server = accepted(&mut listener).await;
    assert_eq!(
        &server.recv_timeout(5_000).await.unwrap().payload[..],
        b"ack everything"
    );
    // Rounds of replies up to the window, each followed by an acknowledgement of everything,
    // while the peer reads nothing: what is taken stops at what the sockets between hold
    // (some MiB), far below the 100 MiB a window released by each acknowledgement would take.
    let reply = vec![9u8; 64 << 10];
    let mut taken = 0usize;
    for round in 0..100u64 {
        while server.sender().try_send(4, reply.clone()).is_ok() {
            taken += reply.len();
            assert!(
                taken <= 48 << 20,
                "round {round}: unread replies queue without bound"
            );
        }
        raw.write_all(&ack_all(2 + round)).await.unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(taken >= 1 << 20, "the window was used: {taken} bytes");
}

/// Before its HELLO is accepted a peer may send small frames only: a first frame larger than
/// the handshake's limit closes the connection, and the listener goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_frame_before_the_hello_closes_the_connection() {
    use tokio::io::AsyncReadExt;
    let mut listener = Listener::bind(loopback(), Limits::default()).await.unwrap();
    let stats = listener.stats();
    let big = vec![7u8; (cairn_msgr::session::HANDSHAKE_FRAME_BYTES as usize) + 1];
    let mut wire = BytesMut::new();
    Frame::new(MSG_HELLO, bytes::Bytes::from(big))
        .encode(&Limits::default(), &mut wire)
        .unwrap();
    let mut raw = TcpStream::connect(listener.local_addr()).await.unwrap();
    // The header alone is enough for the listener to refuse the frame.
    raw.write_all(&wire[..64]).await.unwrap();
    let mut rest = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), raw.read_to_end(&mut rest)).await;
    assert!(
        matches!(read, Ok(Ok(_)) | Ok(Err(_))),
        "the listener closed the connection"
    );
    eventually("the connection closed", || stats.connections() == 0).await;
    let client = Session::connect_with(
        listener.local_addr(),
        5,
        Limits::default(),
        20,
        Policy::Lossy,
    )
    .await;
    client.send(3, b"still serving".to_vec()).await.unwrap();
    let mut server = accepted(&mut listener).await;
    assert_eq!(
        &server.recv_timeout(5_000).await.unwrap().payload[..],
        b"still serving"
    );
}
