//! Pool quotas on a running cluster (Ceph's `osd pool set-quota`): the primaries report their
//! PGs' usage, the monitor marks the pool full once it reaches a limit, and then clients and
//! primaries refuse every write but removals; removals bring it back under and writes resume.
//! What is there stays readable, and the usage the OSDs report is exact.

use crate::common;

use cairn_client::mon::MonClient;
use cairn_client::ClientError;
use cairn_proto::mon::Request;
use cairn_proto::{OpHeader, OpKind, OpResult, ReplyHeader};
use common::{cluster_with_devices, eventually, placement_of, reads_back, Cluster};

const PGS: u32 = 8;

fn object(i: usize) -> Vec<u8> {
    (0..1000 + i * 37).map(|b| (b * 11 + i * 5) as u8).collect()
}

async fn set_quota(admin: &MonClient, objects: Option<u64>, bytes: Option<u64>) {
    let body = Request::SetPoolQuota {
        name: "data".into(),
        max_objects: objects,
        max_bytes: bytes,
    };
    admin.op(body, 10_000).await.unwrap();
}

fn full(c: &Cluster) -> bool {
    c.client.map().is_some_and(|m| {
        let id = m.placement.pool_named("data").unwrap().id;
        m.pool_full(id)
    })
}

/// Objects and bytes of pool `data` summed over every OSD's `pg usage` (each PG counted by
/// its primary alone).
async fn reported_usage(c: &Cluster) -> (u64, u64) {
    let (mut objects, mut bytes) = (0, 0);
    for o in &c.osds {
        let text = c
            .client
            .tell(o.id(), &["pg".into(), "usage".into()])
            .await
            .unwrap();
        for (_, (n, b)) in usage_lines(&text) {
            objects += n;
            bytes += b;
        }
    }
    (objects, bytes)
}

/// `PGID objects bytes` lines.
fn usage_lines(text: &str) -> Vec<(String, (u64, u64))> {
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            Some((
                f.first()?.to_string(),
                (f.get(1)?.parse().ok()?, f.get(2)?.parse().ok()?),
            ))
        })
        .collect()
}

/// A write of `name` sent straight to its primary, past the client's own check.
async fn raw_write(c: &Cluster, name: &str, data: &[u8]) -> OpResult {
    let (pg, acting) = placement_of(c, name);
    let addr = c.osds.iter().find(|o| o.id() == acting[0]).unwrap().addr();
    let mut session = common::dial_as_client(c, addr, 0x0a07a).await;
    let h = OpHeader {
        tid: 1,
        epoch: c.client.epoch(),
        pool: pg.pool,
        pg_seed: pg.seed,
        object: name.into(),
        kind: OpKind::WriteFull,
        data_crc: crc_fast::crc32_iscsi(data),
        reqid: None,
        assert_version: None,
        background: false,
        client: 0,
        instance: 0,
        full_force: false,
    };
    let (msg, reply) = (cairn_proto::MSG_OSD_OP, cairn_proto::MSG_OSD_OP_REPLY);
    let payload = cairn_proto::encode(&h, &[]);
    let answer = common::exchange(&mut session, msg, payload, data, h.data_crc, reply).await;
    cairn_proto::decode::<ReplyHeader>(&answer)
        .unwrap()
        .0
        .result
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_stop_at_a_pools_quota_and_resume_once_removals_bring_it_under() {
    common::logs_from_env();
    let c = cluster_with_devices("quota", PGS, [256 << 20; 3], |cfg| {
        cfg.pg_usage_interval_ms = 100
    })
    .await;
    let admin = common::mon_client(c.mon.addr(), 81).await;

    set_quota(&admin, Some(10), None).await;
    for i in 0..10 {
        c.client
            .write_full("data", &format!("o{i}"), &object(i))
            .await
            .unwrap();
    }
    let bytes: u64 = (0..10).map(|i| object(i).len() as u64).sum();
    eventually("the OSDs report every object and byte", || async {
        reported_usage(&c).await == (10, bytes)
    })
    .await;
    eventually("the pool is marked full", || async { full(&c) }).await;

    // Nothing that could add an object or a byte goes through, from the client or straight
    // to a primary.
    let refused = c.client.write_full("data", "o10", &object(10)).await;
    assert!(
        matches!(&refused, Err(ClientError::QuotaExceeded(why)) if why.contains("max_objects 10")),
        "{refused:?}"
    );
    let over = c.client.write_full("data", "o0", b"overwrite").await;
    assert!(
        matches!(over, Err(ClientError::QuotaExceeded(_))),
        "{over:?}"
    );
    let attr = c.client.set_xattr("data", "o1", "k", b"v").await;
    assert!(
        matches!(attr, Err(ClientError::QuotaExceeded(_))),
        "{attr:?}"
    );
    let raw = raw_write(&c, "o11", &object(11)).await;
    assert!(matches!(raw, OpResult::QuotaExceeded(_)), "{raw:?}");
    reads_back(&c, "data", 10, object).await;
    assert_eq!(reported_usage(&c).await, (10, bytes), "nothing was added");

    // Removals go through and bring the pool back under.
    for i in 0..4 {
        c.client.remove("data", &format!("o{i}")).await.unwrap();
    }
    eventually("the pool is under its quota again", || async { !full(&c) }).await;
    c.client
        .write_full("data", "o10", &object(10))
        .await
        .unwrap();

    // A byte quota: one large object reaches it.
    set_quota(&admin, Some(0), Some(64 << 10)).await;
    c.client
        .write_full("data", "big", &vec![7u8; 80 << 10])
        .await
        .unwrap();
    eventually("the byte quota is reached", || async { full(&c) }).await;
    let refused = c.client.write_full("data", "o12", &object(12)).await;
    assert!(
        matches!(&refused, Err(ClientError::QuotaExceeded(why)) if why.contains("max_bytes 65536")),
        "{refused:?}"
    );
    // Removing the quota lifts the refusal at once.
    set_quota(&admin, None, Some(0)).await;
    eventually("no quota, not full", || async { !full(&c) }).await;
    c.client
        .write_full("data", "o12", &object(12))
        .await
        .unwrap();
    common::stop(c).await;
}
