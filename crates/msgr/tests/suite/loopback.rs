//! Sessions over real loopback sockets: ordering, exactly-once delivery across dropped
//! connections, backpressure, and rejection of garbage and wrong-version peers.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use cairn_msgr::session::{Listener, Session};
use cairn_msgr::{Frame, Limits, MsgrError};

use crate::proxy::{proxy, Up};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

fn loopback() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

fn payload(i: u32) -> Vec<u8> {
    let mut v = i.to_le_bytes().to_vec();
    v.resize(4 + (i as usize % 300), (i % 251) as u8);
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_arrive_in_order_both_ways() {
    let mut listener = Listener::bind(loopback(), Limits::default()).await.unwrap();
    let client = Session::connect(listener.local_addr(), 1, Limits::default(), 20).await;
    let mut server = tokio::time::timeout(Duration::from_secs(5), listener.accept())
        .await
        .unwrap()
        .unwrap();
    for i in 0..2000u32 {
        client.send(3, payload(i)).await.unwrap();
    }
    for i in 0..2000u32 {
        let f = server.recv_timeout(5000).await.unwrap();
        assert_eq!(f.header.msg_type, 3);
        assert_eq!(&f.payload[..], &payload(i)[..]);
        server.send(4, f.payload.clone()).await.unwrap();
    }
    let mut client = client;
    for i in 0..2000u32 {
        let f = client.recv_timeout(5000).await.unwrap();
        assert_eq!(&f.payload[..], &payload(i)[..]);
    }
}

/// Both ends send a large batch of big data segments before either reads: neither may wait on
/// the other forever (reading goes on while writing), and every data segment arrives intact
/// with its checksum.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn big_data_segments_cross_in_both_directions_at_once() {
    const FRAMES: usize = 48;
    const DATA_BYTES: usize = 1 << 20;
    let mut listener = Listener::bind(loopback(), Limits::default()).await.unwrap();
    let mut client = Session::connect(listener.local_addr(), 7, Limits::default(), 20).await;
    let mut server = tokio::time::timeout(Duration::from_secs(5), listener.accept())
        .await
        .unwrap()
        .unwrap();
    let data = |side: u8, i: usize| bytes::Bytes::from(vec![side ^ i as u8; DATA_BYTES]);
    let run = async {
        for i in 0..FRAMES {
            let (c, s) = (data(1, i), data(2, i));
            let crc = crc_fast::crc32_iscsi(&s);
            client.send_data(5, vec![i as u8], c, None).await.unwrap();
            server
                .send_data(6, vec![i as u8], s, Some(crc))
                .await
                .unwrap();
        }
        for i in 0..FRAMES {
            let at_server = server.recv_timeout(10_000).await.unwrap();
            assert_eq!(at_server.payload[0], i as u8);
            assert_eq!(at_server.data(), &data(1, i));
            assert_eq!(at_server.data_crc(), crc_fast::crc32_iscsi(&data(1, i)));
            assert_eq!(
                at_server.data().as_ptr() as usize % cairn_msgr::conn::DATA_ALIGN_BYTES,
                0,
                "large data segments land in aligned buffers"
            );
            let at_client = client.recv_timeout(10_000).await.unwrap();
            assert_eq!(at_client.data(), &data(2, i));
        }
    };
    tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .expect("both directions complete");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_connections_lose_and_duplicate_nothing() {
    let mut listener = Listener::bind(loopback(), Limits::default()).await.unwrap();
    let cutting = Arc::new(AtomicBool::new(true));
    let connections = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let cut = cutting.clone();
    // Every connection is cut once it has carried 20,000 bytes from the client.
    let proxy = proxy(
        listener.local_addr(),
        move |_, forwarded| match cut.load(Ordering::SeqCst) && forwarded > 20_000 {
            true => Up::PassThenCut,
            false => Up::Pass,
        },
        connections.clone(),
    )
    .await;
    let client = Session::connect(proxy, 7, Limits::default(), 10).await;
    let sender = client.sender();
    let writer = tokio::spawn(async move {
        for i in 0..3000u32 {
            sender.send(1, payload(i)).await.unwrap();
        }
    });
    let mut server = tokio::time::timeout(Duration::from_secs(5), listener.accept())
        .await
        .unwrap()
        .unwrap();
    for i in 0..3000u32 {
        let f = server
            .recv_timeout(10_000)
            .await
            .unwrap_or_else(|e| panic!("message {i}: {e}"));
        assert_eq!(
            &f.payload[..],
            &payload(i)[..],
            "message {i} out of order or duplicated"
        );
        if i == 2500 {
            cutting.store(false, Ordering::SeqCst);
        }
    }
    writer.await.unwrap();
    assert!(
        server.recv_timeout(200).await.is_err(),
        "no duplicates after the last message"
    );
    let n = connections.load(Ordering::SeqCst);
    assert!(
        n >= 10,
        "the proxy should have forced many reconnects, saw {n} connections"
    );
}

/// A receiver that never sends must still acknowledge (bare acks after a short delay), or a
/// one-way stream larger than the window would stall for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_receiver_still_acknowledges_a_one_way_stream() {
    let limits = Limits {
        max_payload_bytes: 64 << 10,
        max_inflight_bytes: 128 << 10,
        max_queued_frames: 4,
        write_turn_bytes: 0,
        ..Limits::default()
    };
    let mut listener = Listener::bind(loopback(), limits).await.unwrap();
    let client = Session::connect(listener.local_addr(), 11, limits, 20).await;
    let mut server = tokio::time::timeout(Duration::from_secs(5), listener.accept())
        .await
        .unwrap()
        .unwrap();
    let sender = client.sender();
    // 100 frames of 16 KiB through a 128 KiB window: 8 frames at a time, never answered.
    let task = tokio::spawn(async move {
        for i in 0..100u32 {
            let mut v = vec![(i % 251) as u8; 16 << 10];
            v[..4].copy_from_slice(&i.to_le_bytes());
            sender.send(5, v).await.unwrap();
        }
    });
    for i in 0..100u32 {
        let f = server.recv_timeout(5000).await.unwrap();
        assert_eq!(&f.payload[..4], &i.to_le_bytes());
    }
    tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("the sender stalled: its window was never acknowledged")
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_receiver_pushes_back_on_the_sender() {
    let limits = Limits {
        max_payload_bytes: 64 << 10,
        max_inflight_bytes: 256 << 10,
        max_queued_frames: 4,
        write_turn_bytes: 0,
        ..Limits::default()
    };
    let mut listener = Listener::bind(loopback(), limits).await.unwrap();
    let client = Session::connect(listener.local_addr(), 9, limits, 20).await;
    let _server = listener.accept().await.unwrap();
    let sender = client.sender();
    let sent = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = sent.clone();
    let task = tokio::spawn(async move {
        for _ in 0..1000 {
            sender.send(1, vec![0u8; 32 << 10]).await.unwrap();
            counter.fetch_add(1, Ordering::SeqCst);
        }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let n = sent.load(Ordering::SeqCst);
    assert!(
        n < 100,
        "sender was not held back: {n} x 32 KiB queued with a 256 KiB window"
    );
    task.abort();
    assert!(matches!(
        client.send(1, vec![0u8; 128 << 10]).await,
        Err(MsgrError::TooLarge { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_and_wrong_versions_are_rejected_and_the_listener_survives() {
    let mut listener = Listener::bind(loopback(), Limits::default()).await.unwrap();
    let addr = listener.local_addr();
    let mut junk = TcpStream::connect(addr).await.unwrap();
    junk.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 16];
    let n = tokio::time::timeout(Duration::from_secs(5), junk.read(&mut buf))
        .await
        .unwrap()
        .unwrap_or(0);
    assert_eq!(n, 0, "garbage peer must be disconnected");
    let mut old = TcpStream::connect(addr).await.unwrap();
    let mut frame = bytes::BytesMut::new();
    Frame::new(0xffff, vec![0u8; 16])
        .encode(&Limits::default(), &mut frame)
        .unwrap();
    frame[4] = 9;
    let crc = crc_fast::crc32_iscsi(&frame[..28]);
    frame[28..32].copy_from_slice(&crc.to_le_bytes());
    old.write_all(&frame).await.unwrap();
    let n = tokio::time::timeout(Duration::from_secs(5), old.read(&mut buf))
        .await
        .unwrap()
        .unwrap_or(0);
    assert_eq!(n, 0, "wrong-version peer must be disconnected");
    let client = Session::connect(addr, 11, Limits::default(), 20).await;
    client.send(2, &b"still alive"[..]).await.unwrap();
    let mut server = tokio::time::timeout(Duration::from_secs(5), listener.accept())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        &server.recv_timeout(5000).await.unwrap().payload[..],
        b"still alive"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_dialer_with_the_same_session_id_gets_a_fresh_session() {
    let mut listener = Listener::bind(loopback(), Limits::default()).await.unwrap();
    let first = Session::connect(listener.local_addr(), 77, Limits::default(), 20).await;
    for i in 0..10u32 {
        first.send(3, payload(i)).await.unwrap();
    }
    let mut old = tokio::time::timeout(Duration::from_secs(5), listener.accept())
        .await
        .unwrap()
        .unwrap();
    for _ in 0..10 {
        old.recv_timeout(5000).await.unwrap();
    }
    drop(first);
    // The same id from a new process (a new incarnation): its first frames carry sequence
    // numbers the old session already saw, and must not be dropped as duplicates.
    let mut second = Session::connect(listener.local_addr(), 77, Limits::default(), 20).await;
    second.send(3, payload(5)).await.unwrap();
    let mut fresh = tokio::time::timeout(Duration::from_secs(5), listener.accept())
        .await
        .unwrap()
        .unwrap();
    let f = fresh.recv_timeout(5000).await.unwrap();
    assert_eq!(&f.payload[..], &payload(5)[..]);
    fresh.send(4, f.payload.clone()).await.unwrap();
    let back = second.recv_timeout(5000).await.unwrap();
    assert_eq!(&back.payload[..], &payload(5)[..]);
    assert!(
        old.recv_timeout(2000).await.is_err(),
        "the replaced session is closed"
    );
}

/// Waits up to 5 s for `cond`.
async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while !cond() {
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dialer_tells_a_refused_peer_from_a_live_one() {
    // A port nothing listens on: the dialer's attempts are refused.
    let addr = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap()
    };
    let client = Session::connect(addr, 21, Limits::default(), 20).await;
    let sender = client.sender();
    let mut refusals = sender.refusals();
    // (The first refusal may come before the subscription: wait for the count, not a change.)
    tokio::time::timeout(Duration::from_secs(5), refusals.wait_for(|n| *n >= 1))
        .await
        .expect("the first refusal is signalled")
        .unwrap();
    assert!(sender.refused_at().is_some());
    // Retries refused again (every 20 ms) are the same episode: no new signal.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(*refusals.borrow_and_update(), 1);

    // A listener appears there: the session connects and is no longer refused.
    let mut listener = Listener::bind(addr, Limits::default()).await.unwrap();
    let mut server = tokio::time::timeout(Duration::from_secs(5), listener.accept())
        .await
        .unwrap()
        .unwrap();
    client.send(1, vec![7u8]).await.unwrap();
    let got = server.recv_timeout(5_000).await.unwrap();
    assert_eq!(&got.payload[..], &[7u8]);
    assert_eq!(sender.refused_at(), None, "connected, so not refused");
    assert_eq!(
        server.sender().refused_at(),
        None,
        "the accepting end never is"
    );

    // A peer that is only silent (accepted, never answering) is not refused.
    let silent = TcpListener::bind(loopback()).await.unwrap();
    let quiet = Session::connect(silent.local_addr().unwrap(), 22, Limits::default(), 20).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(quiet.sender().refused_at(), None);

    // The peer goes away as a dead process would: dropping its listener closes the address
    // and the sessions it accepted (the server end is still held here). The dialer's
    // reconnects are refused again, and the time is after the peer left.
    let gone_at = tokio::time::Instant::now();
    drop(listener);
    eventually("refused again once the peer is gone", || {
        sender.refused_at().is_some_and(|t| t >= gone_at)
    })
    .await;
    assert!(
        refusals.has_changed().unwrap(),
        "a new episode is signalled"
    );
    assert_eq!(*refusals.borrow_and_update(), 2);
    assert!(server.recv().await.is_none(), "the accepted session ended");
}
