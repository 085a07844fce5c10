//! Authenticated sessions over real loopback sockets: both ends prove the key, frames are
//! protected in either mode, and wrong keys, unknown entities, impostor daemons, mismatched
//! configurations and session takeovers are refused with a reason.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use cairn_auth::{Caps, EntityName, SecretKey};
use cairn_msgr::handshake::{Authorizer, DialCredentials, StaticCredentials};
use cairn_msgr::protect::WireMode;
use cairn_msgr::session::{Listener, Policy, Session};
use cairn_msgr::{Limits, MsgrError};

fn loopback() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

/// Knows each entity's key, as a monitor does.
struct Keys {
    keys: HashMap<EntityName, SecretKey>,
    min_mode: WireMode,
}

impl Authorizer for Keys {
    fn authorize(&self, entity: &EntityName, ticket: &[u8]) -> Result<(SecretKey, Caps), String> {
        if !ticket.is_empty() {
            return Err("no tickets here".into());
        }
        let key = self.keys.get(entity).ok_or("unknown entity")?;
        Ok((
            key.clone(),
            Caps::from_pairs(&[("mon", "allow r")]).unwrap(),
        ))
    }
    fn min_mode(&self) -> WireMode {
        self.min_mode
    }
}

async fn listener(keys: &[(&str, &SecretKey)], min_mode: WireMode) -> Listener {
    let authz = Keys {
        keys: keys
            .iter()
            .map(|(e, k)| (e.parse().unwrap(), (*k).clone()))
            .collect(),
        min_mode,
    };
    Listener::bind_with_auth(loopback(), Limits::default(), Some(Arc::new(authz)))
        .await
        .unwrap()
}

async fn dial(addr: SocketAddr, id: u64, entity: &str, key: &SecretKey, mode: WireMode) -> Session {
    dial_with(addr, id, entity, key, mode, Policy::Lossy).await
}

async fn dial_with(
    addr: SocketAddr,
    id: u64,
    entity: &str,
    key: &SecretKey,
    mode: WireMode,
    policy: Policy,
) -> Session {
    let creds = DialCredentials {
        entity: entity.parse().unwrap(),
        ticket: Vec::new(),
        key: key.clone(),
        mode,
    };
    Session::connect_as(
        addr,
        id,
        Limits::default(),
        20,
        policy,
        Some(Arc::new(StaticCredentials(creds))),
    )
    .await
}

async fn accepted(listener: &mut Listener) -> Option<Session> {
    tokio::time::timeout(Duration::from_secs(2), listener.accept())
        .await
        .ok()
        .flatten()
}

/// Waits for the dialer's recorded authentication failure.
async fn auth_error(s: &Session) -> String {
    for _ in 0..200 {
        if let Some(e) = s.sender().auth_error() {
            return e;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("no authentication error recorded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_authenticated_session_carries_data_both_ways_in_either_mode() {
    let key = SecretKey::generate();
    for (asked, floor, chosen) in [
        (WireMode::Mac, WireMode::Mac, WireMode::Mac),
        (WireMode::Secure, WireMode::Mac, WireMode::Secure),
        (WireMode::Mac, WireMode::Secure, WireMode::Secure),
    ] {
        let mut l = listener(&[("client.bob", &key)], floor).await;
        let mut client = dial(l.local_addr(), 11, "client.bob", &key, asked).await;
        let mut server = accepted(&mut l).await.expect("session accepted");
        let peer = server.peer().expect("the peer is known");
        assert_eq!(peer.entity.to_string(), "client.bob");
        assert_eq!(peer.mode, chosen);
        let big = Bytes::from((0..300_000u32).map(|i| (i % 253) as u8).collect::<Vec<_>>());
        for i in 0..50u32 {
            client
                .send_data(
                    7,
                    i.to_le_bytes().to_vec(),
                    big.slice(..(i as usize * 6000)),
                    None,
                )
                .await
                .unwrap();
        }
        for i in 0..50u32 {
            let f = server.recv_timeout(5000).await.unwrap();
            assert_eq!(&f.payload[..], &i.to_le_bytes());
            assert_eq!(f.data(), &big.slice(..(i as usize * 6000)));
            server
                .send_data(8, f.payload.clone(), f.data().clone(), Some(f.data_crc()))
                .await
                .unwrap();
        }
        for i in 0..50u32 {
            let f = client.recv_timeout(5000).await.unwrap();
            assert_eq!(&f.payload[..], &i.to_le_bytes());
            assert_eq!(
                f.data_crc(),
                crc_fast::crc32_iscsi(&big[..i as usize * 6000])
            );
        }
        assert_eq!(client.sender().auth_error(), None);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_keys_unknown_entities_and_impostors_are_refused_with_a_reason() {
    let key = SecretKey::generate();
    let mut l = listener(&[("client.bob", &key)], WireMode::Mac).await;
    let addr = l.local_addr();

    let wrong = dial(addr, 1, "client.bob", &SecretKey::generate(), WireMode::Mac).await;
    let e = auth_error(&wrong).await;
    assert!(
        e.contains("client.bob") && e.contains("do not match"),
        "{e}"
    );

    let stranger = dial(addr, 2, "client.eve", &key, WireMode::Mac).await;
    let e = auth_error(&stranger).await;
    assert!(e.contains("unknown entity"), "{e}");

    let bare = Session::connect_with(addr, 3, Limits::default(), 20, Policy::Lossy).await;
    assert!(
        accepted(&mut l).await.is_none(),
        "nothing unauthenticated is accepted"
    );
    drop((wrong, stranger, bare));

    // A daemon that does not know bob's key cannot pass for one that does.
    let mut impostor = listener(&[("client.bob", &SecretKey::generate())], WireMode::Mac).await;
    let fooled = dial(impostor.local_addr(), 4, "client.bob", &key, WireMode::Mac).await;
    let e = auth_error(&fooled).await;
    assert!(e.contains("do not match"), "{e}");
    assert!(accepted(&mut impostor).await.is_none());

    // Credentials offered to a daemon that does not authenticate: refused, with the reason.
    let mut plain = Listener::bind(loopback(), Limits::default()).await.unwrap();
    let mismatched = dial(plain.local_addr(), 5, "client.bob", &key, WireMode::Mac).await;
    let e = auth_error(&mismatched).await;
    assert!(e.contains("does not authenticate"), "{e}");
    assert!(accepted(&mut plain).await.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_entity_cannot_take_over_a_session_by_its_id() {
    let (bob_key, eve_key) = (SecretKey::generate(), SecretKey::generate());
    let mut l = listener(
        &[("client.bob", &bob_key), ("client.eve", &eve_key)],
        WireMode::Mac,
    )
    .await;
    let bob = dial(l.local_addr(), 42, "client.bob", &bob_key, WireMode::Mac).await;
    let mut bob_server = accepted(&mut l).await.unwrap();
    let eve = dial(l.local_addr(), 42, "client.eve", &eve_key, WireMode::Mac).await;
    assert!(
        accepted(&mut l).await.is_none(),
        "eve's session with bob's id is refused"
    );
    let why = auth_error(&eve).await;
    assert!(why.contains("belongs to another entity"), "{why}");
    bob.send(5, &b"still mine"[..]).await.unwrap();
    let f = bob_server.recv_timeout(2000).await.unwrap();
    assert_eq!(&f.payload[..], b"still mine");
    assert_eq!(bob_server.peer().unwrap().entity.to_string(), "client.bob");
    drop(eve);
}

/// A client's session is lossy whatever its HELLO asks: it ends with its connection, while a
/// daemon's lossless session waits for its peer to come back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_daemons_keep_sessions_across_reconnects() {
    let key = SecretKey::generate();
    let mut l = listener(&[("client.bob", &key), ("osd.3", &key)], WireMode::Mac).await;
    let addr = l.local_addr();
    let mut ended = Vec::new();
    for (entity, id) in [("client.bob", 21), ("osd.3", 22)] {
        let client = dial_with(addr, id, entity, &key, WireMode::Mac, Policy::Lossless).await;
        client.send(3, b"hi".to_vec()).await.unwrap();
        let mut server = accepted(&mut l).await.expect("session accepted");
        assert_eq!(
            &server.recv_timeout(5_000).await.unwrap().payload[..],
            b"hi"
        );
        drop(client);
        let after = server.recv_timeout(2_000).await;
        ended.push(matches!(after, Err(MsgrError::Closed)));
    }
    assert_eq!(
        ended,
        [true, false],
        "the client's session ended with its connection; the daemon's waits"
    );
}
