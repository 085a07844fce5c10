//! The monitor over real loopback sockets: OSDs boot, a pool is created, subscribers follow
//! every epoch through pushed incrementals, errors come back as errors.

use cairn_client::mon::MonClient;
use cairn_clustermap::ClusterMap;
use cairn_mon::daemon::MonDaemon;
use cairn_mon::{MonConfig, Monitor};
use cairn_proto::mon::Request;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn osds_boot_and_subscribers_follow_every_epoch() {
    let monitor = Monitor::new(ClusterMap::new("fsid").unwrap(), MonConfig::default());
    let daemon = MonDaemon::start(monitor, "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let watcher = MonClient::connect(daemon.addr(), 1000).await;
    watcher.subscribe(5000).await.unwrap();
    let mut ids = Vec::new();
    for i in 0..4 {
        let osd = MonClient::connect(daemon.addr(), 2000 + i).await;
        let reply = osd
            .op(
                Request::Boot {
                    uuid: format!("u{i}"),
                    host: format!("h{i}"),
                    addr: format!("127.0.0.1:{}", 9000 + i),
                    crush_weight: 0x10000,
                    want_id: None,
                },
                5000,
            )
            .await
            .unwrap();
        ids.push(reply.osd_id.unwrap());
    }
    assert_eq!(ids, vec![0, 1, 2, 3]);
    let admin = MonClient::connect(daemon.addr(), 3000).await;
    let created = admin
        .op(
            Request::CreatePool {
                name: "rbd".into(),
                size: 3,
                pg_num: 64,
            },
            5000,
        )
        .await
        .unwrap();
    let err = admin
        .op(
            Request::CreatePool {
                name: "rbd".into(),
                size: 3,
                pg_num: 64,
            },
            5000,
        )
        .await;
    assert!(err.is_err(), "duplicate pool must be refused");
    admin.op(Request::MarkOut { id: 2 }, 5000).await.unwrap();
    let last = admin
        .op(
            Request::Beacon {
                id: 0,
                full: false,
                nearfull: false,
            },
            5000,
        )
        .await
        .unwrap()
        .epoch;
    assert!(last > created.epoch);
    let seen = watcher.wait_for_epoch(last, 5000).await.unwrap();
    assert_eq!(seen.epoch, last);
    assert_eq!(seen.osds.len(), 4);
    assert_eq!(seen.osds[&2].reweight, 0);
    assert_eq!(seen.placement.pools[&1].name, "rbd");
    // A late subscriber gets the same map.
    let late = MonClient::connect(daemon.addr(), 4000).await;
    late.subscribe(5000).await.unwrap();
    let late_map = late.wait_for_epoch(last, 5000).await.unwrap();
    assert_eq!(late_map.encode(), seen.encode());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_map_survives_a_monitor_restart() {
    use cairn_mon::store::MapStore;
    let dir = std::env::temp_dir().join(format!("cairn-mon-restart-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let store = MapStore::open(&dir).await.unwrap();
    assert!(store.load().await.unwrap().is_none());
    let monitor = Monitor::new(ClusterMap::new("fsid").unwrap(), MonConfig::default());
    let daemon = MonDaemon::start_with_store(monitor, "127.0.0.1:0".parse().unwrap(), Some(store))
        .await
        .unwrap();
    let admin = MonClient::connect(daemon.addr(), 1).await;
    for i in 0..3 {
        admin
            .op(
                Request::Boot {
                    uuid: format!("u{i}"),
                    host: format!("h{i}"),
                    addr: format!("a{i}"),
                    crush_weight: 0x10000,
                    want_id: None,
                },
                5000,
            )
            .await
            .unwrap();
    }
    let last = admin
        .op(
            Request::CreatePool {
                name: "p".into(),
                size: 3,
                pg_num: 32,
            },
            5000,
        )
        .await
        .unwrap()
        .epoch;
    admin.subscribe(5000).await.unwrap();
    let before = admin.wait_for_epoch(last, 5000).await.unwrap();
    drop(admin);
    drop(daemon);
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;

    let store = MapStore::open(&dir).await.unwrap();
    let loaded = store.load().await.unwrap().expect("a saved map");
    assert_eq!(loaded.epoch, last);
    assert_eq!(
        loaded.encode(),
        before.encode(),
        "the restarted map is the acknowledged one"
    );
    let history = store.load_history(&loaded).await.unwrap();
    assert_eq!(history.oldest_epoch(), 1, "the whole history survives");
    let daemon = MonDaemon::start_with_store(
        Monitor::with_history(loaded, history, MonConfig::default()),
        "127.0.0.1:0".parse().unwrap(),
        Some(store),
    )
    .await
    .unwrap();
    let client = MonClient::connect(daemon.addr(), 2).await;
    client.subscribe(5000).await.unwrap();
    assert_eq!(
        client.wait_for_epoch(last, 5000).await.unwrap().encode(),
        before.encode()
    );
    // Every past epoch can be rebuilt from the restarted monitor's history.
    let maps = client.maps_since(2, 5000).await.unwrap();
    let epochs: Vec<u64> = maps.iter().map(|m| m.epoch).collect();
    assert_eq!(epochs, (2..=last).collect::<Vec<_>>());
    assert_eq!(maps.last().unwrap().encode(), before.encode());
    assert_eq!(maps[0].osds.len(), 1, "epoch 2 is the first boot's");
    // A known OSD keeps its id after the restart.
    let id = client
        .op(
            Request::Boot {
                uuid: "u1".into(),
                host: "h1".into(),
                addr: "b1".into(),
                crush_weight: 0x10000,
                want_id: None,
            },
            5000,
        )
        .await
        .unwrap()
        .osd_id;
    assert_eq!(id, Some(1));
    drop(daemon);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A dropped client closes its connection to the monitor (its session's reader task owned the
/// session and kept it connected). Seen through a TCP relay in front of a messenger listener:
/// the client's side of the relay reads end-of-stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_client_closes_its_connection() {
    use cairn_msgr::session::Listener;
    use cairn_msgr::Limits;
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut listener = Listener::bind("127.0.0.1:0".parse().unwrap(), Limits::default())
        .await
        .unwrap();
    let upstream = listener.local_addr();
    let relay = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let relay_addr = relay.local_addr().unwrap();
    // Relays one connection; ends when the client's side reaches end-of-stream.
    let relayed = tokio::spawn(async move {
        let (client_side, _) = relay.accept().await.unwrap();
        let server_side = tokio::net::TcpStream::connect(upstream).await.unwrap();
        let (mut cr, mut cw) = client_side.into_split();
        let (mut sr, mut sw) = server_side.into_split();
        tokio::spawn(async move {
            let mut buf = vec![0u8; 64 << 10];
            while let Ok(n @ 1..) = sr.read(&mut buf).await {
                if cw.write_all(&buf[..n]).await.is_err() {
                    break;
                }
            }
        });
        let mut buf = vec![0u8; 64 << 10];
        loop {
            match cr.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => sw.write_all(&buf[..n]).await.unwrap(),
            }
        }
    });
    let client = MonClient::connect(relay_addr, 3000).await;
    // A request makes the dialer connect; nothing answers it.
    let asked = client.op(Request::MarkOut { id: 0 }, 200).await;
    assert!(asked.is_err(), "no monitor answered: {asked:?}");
    let mut server = tokio::time::timeout(Duration::from_secs(5), listener.accept())
        .await
        .expect("the client connected")
        .unwrap();
    assert!(
        server.recv_timeout(5_000).await.is_ok(),
        "the request arrived"
    );
    drop(client);
    let closed = tokio::time::timeout(Duration::from_secs(5), relayed).await;
    assert!(closed.is_ok(), "the connection outlived its client");
}

/// A monitor that took a request and died before answering it (the session had it
/// acknowledged, so it is not resent by the messenger) is replaced by a new process at its
/// address: the client sends its pending request again to the new one, and the answer comes
/// within the request's own timeout (before, it waited the whole timeout out and failed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_a_dead_monitor_left_unanswered_is_answered_by_its_successor() {
    use cairn_msgr::session::Listener;
    use cairn_msgr::Limits;
    use std::time::Duration;

    // The stand-in for the first monitor runs on a runtime of its own: shutting it down
    // closes its sockets as a process's death would.
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    let (got_tx, got_rx) = std::sync::mpsc::channel();
    let dead = std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            let mut fake = Listener::bind("127.0.0.1:0".parse().unwrap(), Limits::default())
                .await
                .unwrap();
            addr_tx.send(fake.local_addr()).unwrap();
            let mut session = fake.accept().await.unwrap();
            let request = session.recv().await.unwrap();
            // Long enough for the messenger to acknowledge it (never answered).
            tokio::time::sleep(Duration::from_millis(200)).await;
            got_tx.send(request.header.msg_type).unwrap();
        });
        // The monitor dies: its runtime, every task and socket with it.
        drop(rt);
    });
    let addr = addr_rx.recv().unwrap();
    let client = MonClient::connect(addr, 4242).await;
    let asked = tokio::spawn(async move {
        client
            .op(
                Request::Boot {
                    uuid: "u-late".into(),
                    host: "h".into(),
                    addr: "127.0.0.1:9100".into(),
                    crush_weight: 0x10000,
                    want_id: None,
                },
                10_000,
            )
            .await
    });
    let msg_type = tokio::task::spawn_blocking(move || got_rx.recv().unwrap())
        .await
        .unwrap();
    assert_eq!(msg_type, cairn_proto::mon::MSG_MON_REQUEST);
    tokio::task::spawn_blocking(move || dead.join().unwrap())
        .await
        .unwrap();
    let daemon = loop {
        let monitor = Monitor::new(ClusterMap::new("fsid").unwrap(), MonConfig::default());
        match MonDaemon::start(monitor, addr).await {
            Ok(d) => break d,
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    };
    let reply = asked
        .await
        .unwrap()
        .expect("the new monitor answers within the request's timeout");
    assert_eq!(reply.osd_id, Some(0));
    drop(daemon);
}
