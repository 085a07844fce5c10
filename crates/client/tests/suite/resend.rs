//! A client resends a write when it gets no answer: the reply may have been lost after the
//! write was applied. Every write carries a request id, the same on each resend, and the PG log
//! records it, so a resend is answered from the log (on this primary or, after it fails, on the
//! next one) instead of being applied again: an append appends once.

use crate::common;

use std::time::{Duration, Instant};

use cairn_msgr::session::Session;
use cairn_proto::mon::Request;
use cairn_proto::{OpHeader, OpKind, OpResult, ReplyHeader, ReqId};
use common::{cluster, cluster_with_devices, placement_of, Cluster};

/// Sends one client op straight to `session`'s OSD and returns its reply.
async fn send_op(session: &mut Session, h: &OpHeader, data: &[u8]) -> ReplyHeader {
    let (msg, reply) = (cairn_proto::MSG_OSD_OP, cairn_proto::MSG_OSD_OP_REPLY);
    let payload = cairn_proto::encode(h, &[]);
    let answer = common::exchange(session, msg, payload, data, h.data_crc, reply).await;
    let (reply, _) = cairn_proto::decode::<ReplyHeader>(&answer).unwrap();
    assert_eq!(reply.tid, h.tid);
    reply
}

/// An append of `data` to `name` by request `reqid`, addressed with the client's current map.
fn append(c: &Cluster, tid: u64, name: &str, data: &[u8], reqid: ReqId) -> OpHeader {
    let (pg, _) = placement_of(c, name);
    OpHeader {
        tid,
        epoch: c.client.epoch(),
        pool: pg.pool,
        pg_seed: pg.seed,
        object: name.into(),
        kind: OpKind::Append,
        data_crc: crc_fast::crc32_iscsi(data),
        reqid: Some(reqid),
        assert_version: None,
        background: false,
        client: 0,
        instance: 0,
        full_force: false,
    }
}

/// Marks `osd` down at the monitor (as its peers' failure reports would).
async fn mark_down(c: &Cluster, osd: i32) {
    let admin = common::mon_client(c.mon.addr(), 94).await;
    admin
        .op(Request::MarkDown { id: osd }, 10_000)
        .await
        .unwrap();
}

/// Reads `name` until it equals `want` (the PG may be peering), or fails after 30 s.
async fn read_until(c: &Cluster, name: &str, want: &[u8]) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let got = c.client.read("data", name).await;
        if got.as_deref().ok() == Some(want) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{name}: {:?}, expected {:?}",
            got.map(|d| String::from_utf8_lossy(&d).into_owned()),
            String::from_utf8_lossy(want)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resent_append_is_applied_once_even_after_its_primary_fails() {
    let mut c = cluster("resend", 8, 128 << 20).await;
    let name = "appended";
    c.client.write_full("data", name, b"0123").await.unwrap();
    let primary = placement_of(&c, name).1[0];
    let ix = c.osds.iter().position(|o| o.id() == primary).unwrap();
    let mut session = common::dial_as_client(&c, c.osds[ix].addr(), 0x7e5e).await;
    let first_req = ReqId {
        client: 0xfeed,
        seq: 1,
    };
    let first = send_op(
        &mut session,
        &append(&c, 1, name, b"abc", first_req),
        b"abc",
    )
    .await;
    assert_eq!(first.result, OpResult::Ok);
    // Its reply "was lost": the same request again is answered with the same version.
    let again = send_op(
        &mut session,
        &append(&c, 2, name, b"abc", first_req),
        b"abc",
    )
    .await;
    assert_eq!(again.result, OpResult::Ok);
    assert_eq!(again.version, first.version);
    read_until(&c, name, b"0123abc").await;
    // Another request appends.
    let second_req = ReqId {
        client: 0xfeed,
        seq: 2,
    };
    let second = send_op(
        &mut session,
        &append(&c, 3, name, b"def", second_req),
        b"def",
    )
    .await;
    assert_eq!(second.result, OpResult::Ok);
    assert!(second.version > first.version);
    read_until(&c, name, b"0123abcdef").await;
    // The primary fails; the next one knows both requests from its copy of the log.
    drop(session);
    drop(c.osds.remove(ix));
    mark_down(&c, primary).await;
    read_until(&c, name, b"0123abcdef").await;
    let next = placement_of(&c, name).1[0];
    assert_ne!(next, primary);
    let addr = c.osds.iter().find(|o| o.id() == next).unwrap().addr();
    let mut session = common::dial_as_client(&c, addr, 0x7e5f).await;
    for (tid, (req, data, version)) in [
        (first_req, b"abc", first.version),
        (second_req, b"def", second.version),
    ]
    .into_iter()
    .enumerate()
    {
        let reply = send_op(
            &mut session,
            &append(&c, 10 + tid as u64, name, data, req),
            data,
        )
        .await;
        assert_eq!(reply.result, OpResult::Ok, "resend of {req} to osd.{next}");
        assert_eq!(reply.version, version, "resend of {req} to osd.{next}");
    }
    read_until(&c, name, b"0123abcdef").await;
    // A new request still appends.
    c.client.append("data", name, b"!").await.unwrap();
    read_until(&c, name, b"0123abcdef!").await;
}

/// A removal whose reply was lost is answered from the log when resent (the object is gone by
/// then, but the request succeeded once); a new request to remove the missing object is
/// refused as not found, as `rados rm` is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resent_remove_succeeds_and_a_new_remove_of_a_missing_object_is_not_found() {
    let c = cluster("resend-rm", 8, 128 << 20).await;
    let name = "removed";
    c.client.write_full("data", name, b"bytes").await.unwrap();
    let primary = placement_of(&c, name).1[0];
    let osd = c.osds.iter().find(|o| o.id() == primary).unwrap();
    let mut session = common::dial_as_client(&c, osd.addr(), 0x7e60).await;
    let remove = |tid, seq| OpHeader {
        kind: OpKind::Remove,
        data_crc: crc_fast::crc32_iscsi(b""),
        ..append(&c, tid, name, b"", ReqId { client: 0xd1e, seq })
    };
    let first = send_op(&mut session, &remove(1, 1), b"").await;
    assert_eq!(first.result, OpResult::Ok);
    let again = send_op(&mut session, &remove(2, 1), b"").await;
    assert_eq!(again.result, OpResult::Ok, "a resend of an applied remove");
    assert_eq!(again.version, first.version);
    let fresh = send_op(&mut session, &remove(3, 2), b"").await;
    assert_eq!(
        fresh.result,
        OpResult::NotFound,
        "a new remove of a missing object"
    );
    assert!(matches!(
        c.client.read("data", name).await,
        Err(cairn_client::ClientError::NotFound(_))
    ));
}

/// `name`'s bytes in PG `pg` of the store of the OSD that ran in `dir` (stopped), read offline.
async fn offline_copy(
    dir: &std::path::Path,
    pg: cairn_clustermap::PgId,
    name: &str,
) -> bytes::Bytes {
    let store = common::mount_offline(dir).await;
    let coll = cairn_osd::pgmeta::collection(pg);
    let data = store.read(&coll, name, 0, u64::MAX).await.unwrap();
    store.umount().await.unwrap();
    data
}

/// The first attempt reaches the primary and one replica; the other replica is gone but not yet
/// marked down. The client's resends are not answered Ok from the primary's log while a copy
/// may lack the write: the PG peers once the map drops that copy, and the write is then on
/// both remaining copies, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resend_is_answered_only_once_every_copy_has_the_write() {
    // Replica writes give up soon, so that the first attempt ends before the map changes; the
    // map changes only when the test says (no fast failure report of the stopped OSD).
    let mut c = cluster_with_devices("resend-peer", 8, [128 << 20; 3], |cfg| {
        cfg.repop_timeout_ms = 300;
        cfg.fast_fail_on_connection_refused = false;
    })
    .await;
    c.client.op_timeout_ms = 60_000;
    let name = "appended";
    c.client.write_full("data", name, b"0123").await.unwrap();
    let (pg, up) = placement_of(&c, name);
    let index_of = |c: &Cluster, id: i32| c.osds.iter().position(|o| o.id() == id).unwrap();
    let kept = [index_of(&c, up[0]), index_of(&c, up[1])];
    drop(c.osds.remove(index_of(&c, up[2])));
    let append = async {
        let r = c.client.append("data", name, b"abc").await;
        (r, Instant::now())
    };
    let later = async {
        tokio::time::sleep(Duration::from_millis(2000)).await;
        mark_down(&c, up[2]).await;
        Instant::now()
    };
    let ((appended, acked_at), marked_at) = tokio::join!(append, later);
    appended.unwrap();
    assert!(
        acked_at > marked_at,
        "acknowledged while osd.{} of the acting set lacked the write",
        up[2]
    );
    read_until(&c, name, b"0123abc").await;
    let dir = common::stop(c).await;
    for i in kept {
        let copy = offline_copy(&dir.0.join(format!("osd{i}")), pg, name).await;
        assert_eq!(
            String::from_utf8_lossy(&copy),
            "0123abc",
            "the copy of osd{i}'s directory"
        );
    }
    drop(dir);
}

/// The log keeps 8 entries (and 8 dups) here: the append's entry is trimmed by 12 later writes,
/// and its request id lives on as a dup, persisted with the log. After every OSD restarts from its store, a
/// resend of the append is still answered with its first version and appends nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resend_is_recognised_after_its_entry_left_the_log_and_the_osds_restarted() {
    const TAG: &str = "resend-dups";
    let short_log = |cfg: &mut cairn_osd::OsdConfig| cfg.max_log_entries = 8;
    let mut c = cluster_with_devices(TAG, 1, [128 << 20; 3], short_log).await;
    let name = "appended";
    c.client.write_full("data", name, b"0123").await.unwrap();
    let primary = placement_of(&c, name).1[0];
    let addr = c.osds.iter().find(|o| o.id() == primary).unwrap().addr();
    let mut session = common::dial_as_client(&c, addr, 0x7e60).await;
    let req = ReqId {
        client: 0xd0d0,
        seq: 7,
    };
    let first = send_op(&mut session, &append(&c, 1, name, b"abc", req), b"abc").await;
    assert_eq!(first.result, OpResult::Ok);
    drop(session);
    // The one PG's log moves 12 entries past it: out of the log, still among the dups.
    for i in 0..12 {
        let other = format!("other{i}");
        c.client.write_full("data", &other, b"x").await.unwrap();
    }
    let mut restarted = Vec::new();
    for (i, osd) in std::mem::take(&mut c.osds).into_iter().enumerate() {
        drop(osd);
        let mut cfg = common::osd_config(TAG, i, &c.mon, &c.dir, 128 << 20);
        short_log(&mut cfg);
        restarted.push(cfg);
    }
    for cfg in restarted {
        c.osds.push(common::restart_osd(cfg).await);
    }
    read_until(&c, name, b"0123abc").await;
    let primary = placement_of(&c, name).1[0];
    let addr = c.osds.iter().find(|o| o.id() == primary).unwrap().addr();
    let mut session = common::dial_as_client(&c, addr, 0x7e61).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    let again = loop {
        let reply = send_op(&mut session, &append(&c, 2, name, b"abc", req), b"abc").await;
        if reply.result == OpResult::Ok || Instant::now() > deadline {
            break reply;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(again.result, OpResult::Ok);
    assert_eq!(again.version, first.version, "answered from the dups");
    read_until(&c, name, b"0123abc").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_waiting_on_a_failed_primary_is_resent_as_soon_as_the_map_marks_it_down() {
    // The map changes only when the test says (no fast failure report of the stopped OSD).
    let mut c = cluster_with_devices("remap", 8, [128 << 20; 3], |cfg| {
        cfg.fast_fail_on_connection_refused = false
    })
    .await;
    let name = "moved";
    c.client.write_full("data", name, b"old").await.unwrap();
    let primary = placement_of(&c, name).1[0];
    let ix = c.osds.iter().position(|o| o.id() == primary).unwrap();
    // The primary stops before the map knows it: the write goes to it and gets no answer.
    drop(c.osds.remove(ix));
    let write = async {
        let r = c.client.write_full("data", name, b"new").await;
        (r, Instant::now())
    };
    let operator = async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        mark_down(&c, primary).await;
        Instant::now()
    };
    let ((written, done_at), marked_at) = tokio::join!(write, operator);
    written.unwrap();
    // Waiting out the attempt's 5 s timeout would end ~4.5 s after the mark-down.
    let after = done_at.saturating_duration_since(marked_at);
    assert!(
        after < Duration::from_secs(3),
        "the write was resent {after:?} after the map marked its primary down"
    );
    read_until(&c, name, b"new").await;
}
