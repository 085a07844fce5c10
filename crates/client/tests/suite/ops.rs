//! Every client operation against a real three-OSD cluster in one process (loopback sockets,
//! file-backed stores): partial writes, append, truncate, ranged reads, xattrs, omap with
//! prefixes and paging, listing, admin commands — and the bad paths: invalid names, reserved
//! attributes, missing objects, unknown admin keys, malformed messages (logged and dropped, the
//! OSD keeps serving).

use crate::common;

use std::time::{Duration, Instant};

use cairn_client::ClientError;
use cairn_msgr::session::Session;
use cairn_proto::mon::Request;
use cairn_proto::OpResult;
use common::cluster;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_xattr_omap_list_and_admin_ops() {
    let c = cluster("ops", 8, 128 << 20).await;
    let cl = &c.client;

    // Partial writes, append, truncate, ranged reads.
    cl.write("data", "f", 4, b"world").await.unwrap();
    assert_eq!(cl.read("data", "f").await.unwrap(), b"\0\0\0\0world");
    cl.write("data", "f", 0, b"helo").await.unwrap();
    cl.append("data", "f", b"!!").await.unwrap();
    assert_eq!(cl.read("data", "f").await.unwrap(), b"heloworld!!");
    assert_eq!(cl.read_range("data", "f", 4, 5).await.unwrap(), b"world");
    assert_eq!(cl.read_range("data", "f", 9, 100).await.unwrap(), b"!!");
    cl.truncate("data", "f", 4).await.unwrap();
    assert_eq!(cl.read("data", "f").await.unwrap(), b"helo");
    let v1 = cl.stat("data", "f").await.unwrap().1;
    cl.append("data", "f", b"").await.unwrap();
    assert!(
        cl.stat("data", "f").await.unwrap().1 > v1,
        "every write bumps the version"
    );
    cl.append("data", "new", b"first").await.unwrap();
    assert_eq!(cl.read("data", "new").await.unwrap(), b"first");

    // Extended attributes.
    cl.set_xattr("data", "f", "color", b"blue").await.unwrap();
    cl.set_xattr("data", "f", "size", b"L").await.unwrap();
    assert_eq!(cl.get_xattr("data", "f", "color").await.unwrap(), b"blue");
    let all = cl.get_xattrs("data", "f").await.unwrap();
    assert_eq!(
        all,
        vec![
            ("color".to_string(), b"blue".to_vec()),
            ("size".to_string(), b"L".to_vec())
        ],
        "user attributes only (the OSD's own are hidden)"
    );
    cl.remove_xattr("data", "f", "size").await.unwrap();
    assert!(matches!(
        cl.get_xattr("data", "f", "size").await,
        Err(ClientError::NotFound(_))
    ));
    assert!(matches!(
        cl.set_xattr("data", "f", "_v", b"x").await,
        Err(ClientError::Invalid(_))
    ));
    assert!(matches!(
        cl.remove_xattr("data", "ghost", "a").await,
        Err(ClientError::NotFound(_))
    ));

    // Omap: ordered, prefix, paging, removal.
    let entries: Vec<(Vec<u8>, Vec<u8>)> = (0..250)
        .map(|i| {
            (
                format!("k{i:04}").into_bytes(),
                format!("v{i}").into_bytes(),
            )
        })
        .chain([(b"other".to_vec(), b"o".to_vec())])
        .collect();
    cl.omap_set("data", "idx", &entries).await.unwrap();
    let mut got = Vec::new();
    let mut after = Vec::new();
    loop {
        let (page, more) = cl
            .omap_list("data", "idx", &after, b"k", 100)
            .await
            .unwrap();
        assert!(page.len() <= 100);
        after = page.last().map(|(k, _)| k.clone()).unwrap_or_default();
        got.extend(page);
        if !more {
            break;
        }
    }
    assert_eq!(
        got,
        entries[..250].to_vec(),
        "all k* keys, in order, across pages"
    );
    cl.omap_remove("data", "idx", &[b"k0000".to_vec(), b"other".to_vec()])
        .await
        .unwrap();
    let (rest, more) = cl.omap_list("data", "idx", b"", b"", 1000).await.unwrap();
    assert!(!more);
    assert_eq!(rest.len(), 249);
    assert_eq!(rest[0].0, b"k0001");

    // Listing sees every object, and only objects.
    for i in 0..30 {
        cl.write_full("data", &format!("l{i}"), b"z").await.unwrap();
    }
    let mut names = cl.list_objects("data").await.unwrap();
    names.sort();
    let mut want: Vec<String> = (0..30).map(|i| format!("l{i}")).collect();
    want.extend(["f".into(), "idx".into(), "new".into()]);
    want.sort();
    assert_eq!(names, want);

    // Bad names and missing objects.
    for bad in ["", "a\0b"] {
        assert!(matches!(
            cl.write_full("data", bad, b"x").await,
            Err(ClientError::Invalid(_))
        ));
    }
    let long = "x".repeat(1001);
    assert!(matches!(
        cl.write_full("data", &long, b"x").await,
        Err(ClientError::Invalid(_))
    ));
    assert!(matches!(
        cl.read("data", "ghost").await,
        Err(ClientError::NotFound(_))
    ));
    assert!(matches!(
        cl.remove("data", "ghost").await,
        Err(ClientError::NotFound(_))
    ));

    // Admin: live scheduler swap, unknown keys refused, PG stats.
    let id = c.osds[0].id();
    let out = cl
        .tell(
            id,
            &[
                "config".into(),
                "set".into(),
                "osd_op_queue".into(),
                "wpq".into(),
            ],
        )
        .await
        .unwrap();
    assert!(out.contains("wpq"), "{out}");
    let got = cl
        .tell(id, &["config".into(), "get".into(), "osd_op_queue".into()])
        .await
        .unwrap();
    assert_eq!(got, "wpq");
    cl.write_full("data", "after-swap", b"still works")
        .await
        .unwrap();
    assert_eq!(cl.read("data", "after-swap").await.unwrap(), b"still works");
    for bad in [
        vec!["config", "set", "nope", "1"],
        vec!["config", "set", "heartbeat_grace_ms", "5"],
        vec!["config", "set", "osd_op_queue", "bogus"],
        vec!["frobnicate"],
    ] {
        let args: Vec<String> = bad.iter().map(|s| s.to_string()).collect();
        assert!(cl.tell(id, &args).await.is_err(), "{bad:?} must fail");
    }
    let mut leaders = 0;
    for o in &c.osds {
        let stats = cl
            .tell(o.id(), &["pg".into(), "stats".into()])
            .await
            .unwrap();
        for l in stats.lines() {
            let (state, n) = l.rsplit_once(' ').unwrap();
            assert_eq!(state, "active+clean");
            leaders += n.parse::<u32>().unwrap();
        }
    }
    assert_eq!(leaders, 8, "every PG has exactly one active primary");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_messages_are_dropped_and_the_osd_keeps_serving() {
    let c = cluster("garbage", 8, 128 << 20).await;
    let garbage: [&[u8]; 4] = [
        b"",
        b"\xff\xff\xff\xff{}",
        b"\x02\x00\x00\x00{}trailing",
        b"\x05\x00\x00\x00nojson",
    ];
    for o in &c.osds {
        let session = common::dial_as_peer(&c, o.addr(), 0xbad).await;
        for msg_type in [
            cairn_proto::MSG_OSD_OP,
            cairn_proto::MSG_OSD_REPOP,
            cairn_proto::MSG_PEER_REQUEST,
            cairn_proto::admin::MSG_ADMIN,
            0x7777,
        ] {
            for g in garbage {
                session.send(msg_type, g.to_vec()).await.unwrap();
            }
        }
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    for i in 0..20 {
        let name = format!("ok{i}");
        c.client
            .write_full("data", &name, name.as_bytes())
            .await
            .unwrap();
        assert_eq!(c.client.read("data", &name).await.unwrap(), name.as_bytes());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_osd_wrongly_marked_down_boots_again_and_io_goes_on() {
    let c = cluster("markdown", 8, 128 << 20).await;
    let victim = c.osds[1].id();
    let admin = common::mon_client(c.mon.addr(), 92).await;
    let marked = admin
        .op(Request::MarkDown { id: victim }, 10_000)
        .await
        .unwrap()
        .epoch;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let map = c.client.map().unwrap();
        if map.epoch > marked && map.osds[&victim].up {
            break;
        }
        assert!(Instant::now() < deadline, "osd.{victim} never came back up");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for i in 0..20 {
        let name = format!("back{i}");
        c.client
            .write_full("data", &name, name.as_bytes())
            .await
            .unwrap();
        assert_eq!(c.client.read("data", &name).await.unwrap(), name.as_bytes());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_device_is_reported_as_no_space_not_retried_and_loses_nothing() {
    let c = cluster("full", 8, 16 << 20).await;
    let blob: Vec<u8> = (0..6u32 << 20).map(|i| (i % 251) as u8).collect();
    let mut stored = Vec::new();
    let mut refused = None;
    for i in 0..6 {
        let name = format!("big{i}");
        match c.client.write_full("data", &name, &blob).await {
            Ok(_) => stored.push(name),
            Err(e) => {
                refused = Some(e);
                break;
            }
        }
    }
    assert!(
        matches!(refused, Some(ClientError::NoSpace(_))),
        "a full OSD must answer NoSpace, got {refused:?}"
    );
    assert!(!stored.is_empty());
    for name in &stored {
        assert_eq!(c.client.read("data", name).await.unwrap(), blob, "{name}");
    }
    c.client.remove("data", &stored[0]).await.unwrap();
    c.client
        .write_full("data", "after-free", b"space again")
        .await
        .unwrap();
}

/// Sends one replica write straight to `session`'s OSD and returns its answer.
async fn repop(session: &mut Session, h: &cairn_proto::RepOpHeader, data: &[u8]) -> OpResult {
    let (msg, reply) = (cairn_proto::MSG_OSD_REPOP, cairn_proto::MSG_OSD_REPOP_REPLY);
    let payload = cairn_proto::encode(h, &[]);
    let answer = common::exchange(session, msg, payload, data, h.data_crc, reply).await;
    let (reply, _) = cairn_proto::decode::<cairn_proto::ReplyHeader>(&answer).unwrap();
    assert_eq!(reply.tid, h.tid);
    reply.result
}

/// A replica write of `data` as `object` at `version` to `pg`, of interval 0 (tid 1), and
/// the interval the replica behind `session` is active in, which it names when it refuses
/// that write.
async fn repop_of_interval_zero(
    session: &mut Session,
    pg: cairn_clustermap::PgId,
    object: &str,
    version: cairn_pg::Eversion,
    data: &[u8],
) -> (cairn_proto::RepOpHeader, u64) {
    let h = cairn_proto::RepOpHeader {
        tid: 1,
        epoch: 0,
        pool: pg.pool,
        pg_seed: pg.seed,
        object: object.into(),
        kind: cairn_proto::OpKind::WriteFull,
        entry: cairn_pg::LogEntry {
            version,
            object: object.into(),
            op: cairn_pg::OpKind::Modify,
            prior: cairn_pg::Eversion::default(),
            reqid: None,
        },
        data_crc: crc_fast::crc32_iscsi(data),
        background: false,
        client: 0,
        fill: 0,
    };
    let les = match repop(session, &h, data).await {
        OpResult::Failed(why) => why.rsplit(' ').next().unwrap().parse().unwrap(),
        other => panic!("a write of interval 0 was not refused: {other:?}"),
    };
    (h, les)
}

/// A replica never answers Ok to a write at a version it already used for another write (the
/// primary reused it after failing to commit) nor to one that skips versions (it missed a
/// write): either would lose that write on this copy. It refuses both, and its copy is
/// unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_refuses_a_reused_or_skipped_version() {
    use cairn_pg::Eversion;
    let c = cluster("repop", 8, 128 << 20).await;
    let packed = c.client.write_full("data", "first", b"one").await.unwrap();
    let used = Eversion::new(packed >> 32, packed & 0xffff_ffff);
    let (pg, up) = common::placement_of(&c, "first");
    let replica = c.osds.iter().find(|o| o.id() == up[1]).unwrap();
    let mut session = common::dial_as_peer(&c, replica.addr(), 0x5e55).await;
    let data = b"other";
    // The replica names the interval it is active in when the write's is another.
    let (mut h, les) = repop_of_interval_zero(&mut session, pg, "other", used, data).await;
    h.epoch = les;
    h.tid = 2;
    match repop(&mut session, &h, data).await {
        OpResult::Failed(why) => assert!(why.contains("diverged"), "{why}"),
        other => panic!("a reused version was answered {other:?}"),
    }
    h.tid = 3;
    h.entry.version = Eversion::new(used.epoch, used.version + 2);
    match repop(&mut session, &h, data).await {
        OpResult::Failed(why) => assert!(why.contains("missed writes"), "{why}"),
        other => panic!("a skipped version was answered {other:?}"),
    }
    assert_eq!(c.client.read("data", "first").await.unwrap(), b"one");
    assert!(matches!(
        c.client.read("data", "other").await,
        Err(ClientError::NotFound(_))
    ));
    let next = c.client.write_full("data", "first", b"two").await.unwrap();
    assert!(next > packed, "the PG goes on writing after the refusals");
    assert_eq!(c.client.read("data", "first").await.unwrap(), b"two");
}

/// A replica that the peering of a later interval has queried refuses every replica write of
/// an earlier one: a primary frozen past its grace that wakes and sends one could otherwise
/// have it committed after the new interval read this copy's log, acknowledged, and then lost
/// when the new primary activates the copy with that log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_queried_by_a_later_intervals_peering_refuses_writes_of_earlier_ones() {
    use cairn_pg::Eversion;
    use cairn_proto::peer::{PeerAnswer, PeerBody, PeerReply, PeerRequest, Urgency};
    let c = cluster("fence", 8, 128 << 20).await;
    let packed = c.client.write_full("data", "first", b"one").await.unwrap();
    let used = Eversion::new(packed >> 32, packed & 0xffff_ffff);
    let (pg, up) = common::placement_of(&c, "first");
    let replica = c.osds.iter().find(|o| o.id() == up[1]).unwrap();
    let mut session = common::dial_as_peer(&c, replica.addr(), 0x5e56).await;
    let data = b"late";
    let next = Eversion::new(used.epoch, used.version + 1);
    let (mut h, les) = repop_of_interval_zero(&mut session, pg, "late", next, data).await;

    // The peering of the next interval reads the copy's log.
    let query = PeerRequest {
        tid: 7,
        from: up[0],
        epoch: les + 1,
        pool: pg.pool,
        pg_seed: pg.seed,
        body: PeerBody::Query,
        urgency: Urgency::Blocking,
        fill: 0,
    };
    let payload = cairn_proto::encode(&query, &[]);
    let (msg, reply) = (cairn_proto::MSG_PEER_REQUEST, cairn_proto::MSG_PEER_REPLY);
    let answer = common::exchange(&mut session, msg, payload, &[], 0, reply).await;
    let (answer, _) = cairn_proto::decode::<PeerReply>(&answer).unwrap();
    let Ok(PeerAnswer::Info { log, .. }) = answer.answer else {
        panic!("the query was not answered with the log: {answer:?}");
    };
    assert_eq!(log.head(), used);

    // The old interval's next write, valid a moment ago, is refused now.
    h.epoch = les;
    h.tid = 2;
    match repop(&mut session, &h, data).await {
        OpResult::Failed(why) => assert!(why.contains("peering of interval"), "{why}"),
        other => panic!("a write of the earlier interval was answered {other:?}"),
    }
    assert_eq!(c.client.read("data", "first").await.unwrap(), b"one");
    assert!(matches!(
        c.client.read("data", "late").await,
        Err(ClientError::NotFound(_))
    ));
}

/// A client's write_full carries the whole object in one message, so no write may grow an
/// object past `max_object_bytes`: a write, an append, a truncate or a write_full that would is refused
/// with a clear error before it reaches any copy, and the object is unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_past_the_object_size_limit_are_refused_and_change_nothing() {
    const LIMIT: u64 = 1 << 20;
    let c = common::cluster_with_devices("objsize", 8, [128 << 20; 3], |cfg| {
        cfg.max_object_bytes = LIMIT
    })
    .await;
    let full = vec![7u8; LIMIT as usize];
    c.client.write_full("data", "big", &full).await.unwrap();
    let refused = |r: Result<u64, ClientError>| match r {
        Err(ClientError::Invalid(why)) => assert!(why.contains("max_object_bytes"), "{why}"),
        other => panic!("not refused: {other:?}"),
    };
    refused(c.client.append("data", "big", b"x").await);
    refused(c.client.write("data", "big", LIMIT - 1, b"xy").await);
    refused(c.client.write("data", "big", u64::MAX - 1, b"xy").await);
    refused(c.client.truncate("data", "big", LIMIT + 1).await);
    match c
        .client
        .write_full("data", "bigger", &vec![1u8; LIMIT as usize + 1])
        .await
    {
        Err(ClientError::Invalid(why)) => assert!(why.contains("max_object_bytes"), "{why}"),
        other => panic!("not refused: {other:?}"),
    }
    assert_eq!(
        crc_fast::crc32_iscsi(&c.client.read("data", "big").await.unwrap()),
        crc_fast::crc32_iscsi(&full)
    );
    assert!(matches!(
        c.client.read("data", "bigger").await,
        Err(ClientError::NotFound(_))
    ));
    // Up to the limit is fine.
    c.client
        .write("data", "big", LIMIT - 1, b"z")
        .await
        .unwrap();
    c.client.truncate("data", "big", 10).await.unwrap();
    c.client.append("data", "big", b"tail").await.unwrap();
    assert_eq!(c.client.stat("data", "big").await.unwrap().0, 14);
}

/// Recovery carries an object's xattrs in its first piece, so their bytes together are bounded
/// (`max_xattr_bytes_per_object`): a setxattr past it is refused with a clear error and the
/// object's xattrs are unchanged; replacing a value counts the new one only, and removing one
/// makes room.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn xattrs_past_the_per_object_limit_are_refused_and_change_nothing() {
    const LIMIT: u64 = 64 << 10;
    let c = common::cluster_with_devices("xattrs", 8, [128 << 20; 3], |cfg| {
        cfg.max_xattr_bytes_per_object = LIMIT
    })
    .await;
    c.client.write_full("data", "o", b"body").await.unwrap();
    let value = vec![3u8; 20 << 10];
    for name in ["a", "b", "c"] {
        c.client.set_xattr("data", "o", name, &value).await.unwrap();
    }
    match c.client.set_xattr("data", "o", "d", &value).await {
        Err(ClientError::Invalid(why)) => {
            assert!(why.contains("max_xattr_bytes_per_object"), "{why}")
        }
        other => panic!("not refused: {other:?}"),
    }
    let names = |attrs: Vec<(String, Vec<u8>)>| -> Vec<String> {
        attrs
            .into_iter()
            .filter(|(k, _)| !k.starts_with('_'))
            .map(|(k, v)| {
                assert_eq!(crc_fast::crc32_iscsi(&v), crc_fast::crc32_iscsi(&value));
                k
            })
            .collect()
    };
    assert_eq!(
        names(c.client.get_xattrs("data", "o").await.unwrap()),
        ["a", "b", "c"]
    );
    // The same size again in place of an existing value fits; a larger one does not.
    c.client.set_xattr("data", "o", "b", &value).await.unwrap();
    assert!(matches!(
        c.client
            .set_xattr("data", "o", "b", &vec![4u8; 30 << 10])
            .await,
        Err(ClientError::Invalid(_))
    ));
    c.client.remove_xattr("data", "o", "a").await.unwrap();
    c.client.set_xattr("data", "o", "d", &value).await.unwrap();
    assert_eq!(
        names(c.client.get_xattrs("data", "o").await.unwrap()),
        ["b", "c", "d"]
    );
    assert_eq!(c.client.read("data", "o").await.unwrap(), b"body");
}
