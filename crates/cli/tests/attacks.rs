//! Attacks on a running `cairn up` cluster (authentication on, its default), each against the
//! monitor and the OSDs: no key, a wrong key or a forged ticket, another entity's session id,
//! a tampered frame and a replayed one (through a proxy that alters the byte stream), and a
//! client with too few capabilities trying every kind of request — map changes, pool
//! deletion, monitor options, key management, object writes, writes forced past the full
//! ratio, replica writes, peering Activate, recovery Push and admin commands. Each is refused,
//! the daemons log it, and nothing changes: the map's epoch, the pools, the objects' bytes.

mod common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use cairn_auth::{EntityName, Keyring, SecretKey};
use cairn_client::mon::MonClient;
use cairn_client::tickets::{ClientAuth, TicketSource};
use cairn_client::Client;
use cairn_msgr::frame::{HEADER_BYTES, SEGMENT_CRC_BYTES};
use cairn_msgr::handshake::{CredentialSource, DialCredentials, StaticCredentials, MSG_AUTH_PROOF};
use cairn_msgr::protect::{WireMode, TAG_BYTES};
use cairn_msgr::session::{Policy, Session};
use cairn_msgr::{Frame, Limits};
use cairn_proto::mon::{AuthRequest, Request, RequestBody, MSG_MON_REQUEST};
use cairn_proto::peer::{PeerBody, PeerRequest, Urgency};
use cairn_proto::{MSG_OSD_OP, MSG_OSD_REPOP, MSG_PEER_REQUEST, MSG_PING};
use common::{free_port, Cluster};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Longest a refused request is waited for.
const SHORT_MS: u64 = 4_000;

/// What the proxy does to the byte stream from the client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    /// Flip one bit of the first monitor request of every connection.
    Tamper,
    /// Send the first monitor request of the first connection twice.
    Replay,
}

/// A loopback proxy to `target` that applies `fault`; returns its address and how many
/// connections the server closed after a fault.
async fn proxy(target: SocketAddr, fault: Fault) -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let dropped = Arc::new(AtomicUsize::new(0));
    let fired = Arc::new(AtomicBool::new(false));
    let counter = dropped.clone();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let Ok(server) = TcpStream::connect(target).await else {
                continue;
            };
            let active = match fault {
                Fault::Tamper => true,
                Fault::Replay => !fired.swap(true, Ordering::SeqCst),
            };
            tokio::spawn(relay(client, server, fault, active, counter.clone()));
        }
    });
    (addr, dropped)
}

/// Relays one connection, applying `fault` once if `active`; counts the server closing the
/// connection after the fault in `dropped`.
async fn relay(
    client: TcpStream,
    server: TcpStream,
    fault: Fault,
    active: bool,
    dropped: Arc<AtomicUsize>,
) {
    let (mut from_client, mut to_client) = client.into_split();
    let (mut from_server, mut to_server) = server.into_split();
    let faulted = Arc::new(AtomicBool::new(false));
    let seen = faulted.clone();
    tokio::spawn(async move {
        let _ = tokio::io::copy(&mut from_server, &mut to_client).await;
        if seen.load(Ordering::SeqCst) {
            dropped.fetch_add(1, Ordering::SeqCst);
        }
    });
    let limits = Limits::default();
    let mut buf = BytesMut::new();
    let mut protected = false;
    let mut pending = active;
    loop {
        while let Ok(Some(head)) = Frame::peek_header(&buf, &limits) {
            let tag = if protected { TAG_BYTES } else { 0 };
            let len = HEADER_BYTES + head.payload_len + head.data_len + 2 * SEGMENT_CRC_BYTES + tag;
            if buf.len() < len {
                break;
            }
            let mut frame = buf.split_to(len);
            let msg_type = head.header.msg_type;
            let mut copies = 1;
            if pending && protected && msg_type == MSG_MON_REQUEST {
                pending = false;
                faulted.store(true, Ordering::SeqCst);
                match fault {
                    Fault::Tamper => frame[HEADER_BYTES] ^= 0x01,
                    Fault::Replay => copies = 2,
                }
            }
            for _ in 0..copies {
                if to_server.write_all(&frame).await.is_err() {
                    return;
                }
            }
            protected |= msg_type == MSG_AUTH_PROOF;
        }
        match from_client.read_buf(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

/// An entity's credentials for the monitor, with `key`.
fn mon_creds(entity: &str, key: SecretKey) -> Arc<dyn CredentialSource> {
    Arc::new(StaticCredentials(DialCredentials {
        entity: entity.parse().unwrap(),
        ticket: Vec::new(),
        key,
        mode: WireMode::Mac,
    }))
}

/// The client entity `name`'s identity, from `keyring`.
fn client_auth(keyring: &std::path::Path, name: &str) -> ClientAuth {
    let entity: EntityName = name.parse().unwrap();
    let ring = Keyring::load(keyring).unwrap();
    let key = ring.get(&entity).unwrap().key.clone();
    ClientAuth {
        entity,
        key,
        mode: WireMode::Mac,
    }
}

/// Whether the server closes a faulted connection within 10 s (the client's answer may
/// come before the server reads the faulted frame).
async fn dropped_soon(dropped: &AtomicUsize) -> bool {
    for _ in 0..100 {
        if dropped.load(Ordering::SeqCst) >= 1 {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

/// The reason the dialer of `session` was refused (waits up to 20 s for it).
async fn auth_error(session: &Session) -> String {
    for _ in 0..200 {
        if let Some(e) = session.sender().auth_error() {
            return e;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the dialer was never refused");
}

/// The error `request` from `client` ends in (it must fail).
async fn refusal(client: &MonClient, body: RequestBody) -> String {
    let err = client.request(body, SHORT_MS).await.unwrap_err();
    err.to_string()
}

/// A peering or recovery request about `object`'s PG, as the PG's primary would send it.
fn peer_request(map: &cairn_clustermap::ClusterMap, object: &str, body: PeerBody) -> Vec<u8> {
    let pool = map.placement.pool_named("data").unwrap();
    let pg = pool.object_pg(object, "", "");
    let primary = map.placement.mapper().map_pg(pg).unwrap().up[0];
    let request = PeerRequest {
        tid: 1,
        from: primary,
        epoch: map.epoch,
        pool: pool.id,
        pg_seed: pg.seed,
        body,
        urgency: Urgency::Blocking,
        fill: 0,
    };
    cairn_proto::encode(&request, &[]).to_vec()
}

/// A replica write removing `object`, as its PG's primary would send it.
fn replica_remove(map: &cairn_clustermap::ClusterMap, object: &str) -> Vec<u8> {
    let pool = map.placement.pool_named("data").unwrap();
    let pg = pool.object_pg(object, "", "");
    let header = cairn_proto::op::RepOpHeader {
        tid: 1,
        epoch: map.epoch,
        pool: pool.id,
        pg_seed: pg.seed,
        object: object.into(),
        kind: cairn_proto::op::OpKind::Remove,
        entry: cairn_pg::log::LogEntry {
            version: cairn_pg::log::Eversion::new(map.epoch, 1_000_000),
            object: object.into(),
            op: cairn_pg::log::OpKind::Delete,
            prior: cairn_pg::log::Eversion::default(),
            reqid: None,
        },
        data_crc: 0,
        background: false,
        client: 0,
        fill: 0,
    };
    cairn_proto::encode(&header, &[]).to_vec()
}

#[test]
fn every_attack_on_an_authenticated_cluster_is_refused_logged_and_changes_nothing() {
    let cluster = Cluster::new("attacks");
    let mon = format!("127.0.0.1:{}", free_port());
    let (ok, out) = cluster.up(&mon, &["--osds", "2", "--pg-num", "8"]);
    assert!(ok, "{out}");
    let reader_ring = cluster.dir.join("reader.keyring");
    let (ok, out) = cluster.cairn(&[
        "auth",
        "--mon",
        &mon,
        "get-or-create",
        "client.reader",
        "mon",
        "allow r",
        "osd",
        "allow r pool=data",
        "-o",
        &reader_ring.display().to_string(),
    ]);
    assert!(ok, "{out}");
    let writer_ring = cluster.dir.join("writer.keyring");
    let (ok, out) = cluster.cairn(&[
        "auth",
        "--mon",
        &mon,
        "get-or-create",
        "client.writer",
        "mon",
        "allow r",
        "osd",
        "allow rw pool=data",
        "-o",
        &writer_ring.display().to_string(),
    ]);
    assert!(ok, "{out}");
    let mon_addr: SocketAddr = mon.parse().unwrap();
    let victim: Vec<u8> = (0..100_000u32).map(|i| (i * 7 % 253) as u8).collect();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let admin = Client::connect_as(mon_addr, 501, Some(cluster.admin()))
            .await
            .unwrap();
        admin.write_full("data", "victim", &victim).await.unwrap();
        let map = admin.map().unwrap();
        let before = map.epoch;
        let osd_addrs: Vec<String> = map.osds.values().map(|o| o.addr.clone()).collect();
        assert_eq!(osd_addrs.len(), 2);

        // The monitor: no key, a wrong key, an unknown entity.
        let anonymous = MonClient::connect_as(mon_addr, 601, None).await;
        let e = refusal(&anonymous, RequestBody::Op(Request::MarkOut { id: 0 })).await;
        assert!(e.contains("requires authentication"), "{e}");
        let forged = MonClient::connect_as(
            mon_addr,
            602,
            Some(mon_creds("client.admin", SecretKey::generate())),
        )
        .await;
        let e = refusal(&forged, RequestBody::Op(Request::MarkOut { id: 0 })).await;
        assert!(e.contains("do not match"), "{e}");
        let stranger = MonClient::connect_as(
            mon_addr,
            603,
            Some(mon_creds("client.mallory", SecretKey::generate())),
        )
        .await;
        let e = refusal(&stranger, RequestBody::Op(Request::MarkOut { id: 0 })).await;
        assert!(e.contains("unknown entity"), "{e}");

        // Too few caps: a reader tries every kind of monitor request.
        let reader = client_auth(&reader_ring, "client.reader");
        let reader_mon = MonClient::connect_as(mon_addr, 604, Some(reader.mon_credentials())).await;
        for body in [
            RequestBody::Op(Request::MarkOut { id: 0 }),
            RequestBody::Op(Request::MarkLost { id: 1 }),
            RequestBody::Op(Request::RemoveOsd { id: 1 }),
            RequestBody::Op(Request::CreatePool {
                name: "evil".into(),
                size: 1,
                pg_num: 8,
            }),
            RequestBody::Op(Request::RemovePool {
                name: "data".into(),
                repeated: "data".into(),
                sure: true,
            }),
            RequestBody::Op(Request::SetMonOption {
                key: "mon_allow_pool_delete".into(),
                value: "true".into(),
            }),
            RequestBody::Op(Request::Beacon {
                id: 0,
                full: true,
                nearfull: true,
            }),
            RequestBody::Auth(AuthRequest::List),
            RequestBody::Auth(AuthRequest::ServiceSecret),
            RequestBody::Auth(AuthRequest::GetOrCreate {
                entity: "client.evil".into(),
                caps: [("mon".to_string(), "allow *".to_string())].into(),
            }),
        ] {
            let what = format!("{body:?}");
            let e = refusal(&reader_mon, body).await;
            assert!(e.contains("permission denied"), "{what}: {e}");
        }
        // An OSD's key speaks for that OSD only: it can neither bring up another OSD at its
        // own address nor take the id for another OSD's data.
        let osd0_ring = cluster.dir.join("osd0.keyring");
        let osd0_key = Keyring::load(&osd0_ring)
            .unwrap()
            .get(&EntityName::Osd(0))
            .unwrap()
            .key
            .clone();
        let osd0 = MonClient::connect_as(mon_addr, 608, Some(mon_creds("osd.0", osd0_key))).await;
        let other_uuid = map.osds.values().find(|o| o.id != 0).unwrap().uuid.clone();
        for (uuid, why) in [
            (other_uuid, "not osd.0"),
            ("a-new-osd".to_string(), "belongs to another OSD"),
        ] {
            let boot = Request::Boot {
                uuid,
                host: "evil".into(),
                addr: "127.0.0.1:9".into(),
                crush_weight: 0x10000,
                want_id: Some(0),
            };
            let e = refusal(&osd0, RequestBody::Op(boot)).await;
            assert!(e.contains(why), "{e}");
        }
        let e = refusal(&osd0, RequestBody::Op(Request::MarkOut { id: 1 })).await;
        assert!(e.contains("permission denied"), "{e}");

        // The administrator's own request to delete a pool is refused too, until the
        // monitor is told to allow it.
        let admin_mon =
            MonClient::connect_as(mon_addr, 605, Some(cluster.admin().mon_credentials())).await;
        let remove = Request::RemovePool {
            name: "data".into(),
            repeated: "data".into(),
            sure: true,
        };
        let e = refusal(&admin_mon, RequestBody::Op(remove)).await;
        assert!(e.contains("pool deletion is disabled"), "{e}");

        // Another entity cannot take over the administrator's session by its id.
        let list = || RequestBody::Auth(AuthRequest::List);
        admin_mon.request(list(), SHORT_MS).await.unwrap();
        let thief = MonClient::connect_as(mon_addr, 605, Some(reader.mon_credentials())).await;
        let e = refusal(&thief, list()).await;
        assert!(e.contains("another entity"), "{e}");
        admin_mon.request(list(), SHORT_MS).await.unwrap();

        // A tampered request never reaches the monitor: every try is dropped, nothing done.
        let (tampering, dropped) = proxy(mon_addr, Fault::Tamper).await;
        let victim_mon =
            MonClient::connect_as(tampering, 606, Some(cluster.admin().mon_credentials())).await;
        let out = victim_mon
            .request(RequestBody::Op(Request::MarkOut { id: 0 }), SHORT_MS)
            .await;
        assert!(out.is_err(), "a tampered request was answered: {out:?}");
        assert!(
            dropped_soon(&dropped).await,
            "the monitor kept the connection"
        );

        // A replayed request is dropped with its connection; the client's request, resent on
        // a new connection, is applied once.
        let (replaying, dropped) = proxy(mon_addr, Fault::Replay).await;
        let replayed =
            MonClient::connect_as(replaying, 607, Some(cluster.admin().mon_credentials())).await;
        let create = Request::CreatePool {
            name: "once".into(),
            size: 2,
            pg_num: 8,
        };
        // Its answer may be lost with the dropped connection: the pool is checked below.
        let _ = replayed.op(create, 10_000).await;
        assert!(
            dropped_soon(&dropped).await,
            "the monitor kept the connection the replay came on"
        );

        // The OSDs: no key, a forged ticket.
        for (i, addr) in osd_addrs.iter().enumerate() {
            let addr: SocketAddr = addr.parse().unwrap();
            let session = Session::connect_as(
                addr,
                700 + i as u64,
                Limits::default(),
                100,
                Policy::Lossy,
                None,
            )
            .await;
            let _ = session.send(MSG_OSD_OP, vec![0u8; 16]).await;
            let e = auth_error(&session).await;
            assert!(e.contains("requires authentication"), "osd {addr}: {e:?}");
            let impostor = Arc::new(StaticCredentials(DialCredentials {
                entity: EntityName::Osd(0),
                ticket: vec![7u8; 120],
                key: SecretKey::generate(),
                mode: WireMode::Mac,
            }));
            let session = Session::connect_as(
                addr,
                710 + i as u64,
                Limits::default(),
                100,
                Policy::Lossy,
                Some(impostor),
            )
            .await;
            let _ = session.send(MSG_PING, vec![0u8; 16]).await;
            let e = auth_error(&session).await;
            assert!(e.contains("refused"), "osd {addr}: {e}");
        }

        // An authenticated client, even the administrator, may not speak as an OSD: replica
        // writes, peering, recovery and heartbeats from it are refused; a reader may not write
        // nor run admin commands.
        let admin_mon = Arc::new(admin_mon);
        let tickets: Arc<dyn CredentialSource> =
            Arc::new(TicketSource::new(admin_mon.clone(), cluster.admin(), 0));
        let pg_log = Box::new(cairn_pg::log::PgLog::new(100));
        let attacks: Vec<(u16, Vec<u8>)> = vec![
            (MSG_OSD_REPOP, replica_remove(&map, "victim")),
            (
                MSG_PEER_REQUEST,
                peer_request(
                    &map,
                    "victim",
                    PeerBody::Activate {
                        log: pg_log,
                        keep: Some(Vec::new()),
                        missing: Default::default(),
                    },
                ),
            ),
            (
                MSG_PEER_REQUEST,
                peer_request(
                    &map,
                    "victim",
                    PeerBody::Push {
                        object: "victim".into(),
                        present: false,
                        data_offset: 0,
                        first: true,
                        last: true,
                    },
                ),
            ),
            (MSG_PING, vec![0u8; 8]),
        ];
        for (i, addr) in osd_addrs.iter().enumerate() {
            let addr: SocketAddr = addr.parse().unwrap();
            let mut session = Session::connect_as(
                addr,
                720 + i as u64,
                Limits::default(),
                100,
                Policy::Lossy,
                Some(tickets.clone()),
            )
            .await;
            for (msg_type, payload) in &attacks {
                session.send(*msg_type, payload.clone()).await.unwrap();
            }
            let answer = session.recv_timeout(2_000).await;
            assert!(
                answer.is_err(),
                "osd {addr} answered a client's peer message"
            );
            assert!(
                session.sender().auth_error().is_none(),
                "the client itself was accepted"
            );
        }
        let reader_client = Client::connect_as(mon_addr, 730, Some(reader.clone()))
            .await
            .unwrap();
        assert_eq!(reader_client.read("data", "victim").await.unwrap(), victim);
        let e = reader_client
            .write_full("data", "victim", b"overwritten")
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("permission denied"), "{e}");
        let e = reader_client
            .remove("data", "victim")
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("permission denied"), "{e}");
        let e = reader_client
            .tell(
                0,
                &[
                    "config".into(),
                    "set".into(),
                    "osd_op_queue".into(),
                    "fifo".into(),
                ],
            )
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("permission denied"), "{e}");

        // Writing past the full ratio is a metadata server's (or an admin's) privilege: a
        // client allowed to write the pool may not force its writes.
        let writer = client_auth(&writer_ring, "client.writer");
        let mut forcing = Client::connect_as(mon_addr, 731, Some(writer))
            .await
            .unwrap();
        forcing
            .write_full("data", "forced", b"plain")
            .await
            .unwrap();
        forcing.full_force = true;
        let e = forcing
            .write_full("data", "forced", b"forced")
            .await
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("permission denied") && e.contains("FullForce"),
            "{e}"
        );
        assert_eq!(forcing.read("data", "forced").await.unwrap(), b"plain");

        // A client id is its holder's: a ticket binding the reader's id to another entity is
        // refused, and an op naming an id other than the one its session's ticket binds is
        // refused by the OSD (it would share that client's CRR-N queue or TBF bucket).
        let taken = TicketSource::new(admin_mon.clone(), cluster.admin(), 730)
            .credentials()
            .await
            .unwrap_err();
        assert!(taken.contains("held by client.reader"), "{taken}");
        let bound: Arc<dyn CredentialSource> =
            Arc::new(TicketSource::new(admin_mon.clone(), cluster.admin(), 741));
        let pool = map.placement.pool_named("data").unwrap();
        let pg = pool.object_pg("victim", "", "");
        let primary = map.placement.mapper().map_pg(pg).unwrap().acting[0];
        let addr: SocketAddr = map.osds[&primary].addr.parse().unwrap();
        let mut session = Session::connect_as(
            addr,
            742,
            Limits::default(),
            100,
            Policy::Lossy,
            Some(bound),
        )
        .await;
        for (tid, named) in [(1u64, 999u64), (2, 741), (3, 0)] {
            let read = cairn_proto::op::OpHeader {
                tid,
                epoch: map.epoch,
                pool: pool.id,
                pg_seed: pg.seed,
                object: "victim".into(),
                kind: cairn_proto::op::OpKind::Read { offset: 0, len: 16 },
                data_crc: 0,
                reqid: None,
                assert_version: None,
                background: false,
                client: named,
                instance: 0,
                full_force: false,
            };
            session
                .send(MSG_OSD_OP, cairn_proto::encode(&read, &[]).to_vec())
                .await
                .unwrap();
            let frame = session.recv_timeout(SHORT_MS).await.unwrap();
            let (reply, _) =
                cairn_proto::decode::<cairn_proto::op::ReplyHeader>(&frame.payload).unwrap();
            assert_eq!(reply.tid, tid);
            match named {
                999 => assert!(
                    matches!(&reply.result, cairn_proto::op::OpResult::Invalid(why)
                        if why.contains("authenticated as client id 741")),
                    "{:?}",
                    reply.result
                ),
                _ => assert_eq!(
                    reply.result,
                    cairn_proto::op::OpResult::Ok,
                    "client id {named}"
                ),
            }
        }

        // Nothing changed: the OSDs are in, the pools are those made, the object is intact.
        let fresh = Client::connect_as(mon_addr, 740, Some(cluster.admin()))
            .await
            .unwrap();
        let now = fresh.map().unwrap();
        let mut pools: Vec<&str> = now
            .placement
            .pools
            .values()
            .map(|p| p.name.as_str())
            .collect();
        pools.sort_unstable();
        assert_eq!(pools, ["data", "once"]);
        assert!(now.osds.values().all(|o| o.up && o.reweight > 0), "{now:?}");
        for (id, o) in &now.osds {
            assert_eq!(o.addr, map.osds[id].addr, "osd.{id} moved");
        }
        assert!(
            now.epoch > before,
            "the pool made through the replaying proxy"
        );
        assert_eq!(fresh.read("data", "victim").await.unwrap(), victim);
        assert_eq!(
            crc_fast::crc32_iscsi(&fresh.read("data", "victim").await.unwrap()),
            crc_fast::crc32_iscsi(&victim)
        );
    });

    // Logged: the refusals and the forged frames are in the daemons' logs.
    let log = |name: &str| std::fs::read_to_string(cluster.dir.join(name)).unwrap();
    let mon_log = log("mon.log");
    assert!(
        mon_log.contains("integrity check"),
        "mon.log: no forged frame"
    );
    assert!(mon_log.contains("permission denied"), "mon.log: no refusal");
    let osd_logs = log("osd0.log") + &log("osd1.log");
    assert!(osd_logs.contains("message refused"), "osd logs: no refusal");
    assert!(
        osd_logs.contains("client op refused"),
        "osd logs: no op refusal"
    );
}
