//! Space comes back: the copies of a removed pool's PGs are deleted on every OSD, and a PG
//! copy left on an OSD outside the PG's acting set (a stray, after `osd out`) is deleted once
//! the PG is active+clean without it — and not while the PG still needs it.

use crate::common;

use std::time::{Duration, Instant};

use cairn_client::mon::MonClient;
use cairn_proto::mon::Request;
use common::{cluster_with_devices, eventually, objects_on, Cluster};

fn object(i: usize) -> Vec<u8> {
    (0..1000 + i * 37).map(|b| (b * 7 + i) as u8).collect()
}

/// Creates pool `name` of `size` and waits until its PGs serve (it lists); its object names.
async fn create_pool(c: &Cluster, admin: &MonClient, name: &str, size: u32) -> Vec<String> {
    let create = Request::CreatePool {
        name: name.into(),
        size,
        pg_num: 8,
    };
    admin.op(create, 10_000).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match c.client.list_objects(name).await {
            Ok(names) => return names,
            Err(e) => assert!(Instant::now() < deadline, "pool {name} never served: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn cluster(tag: &str) -> (Cluster, MonClient) {
    let c = cluster_with_devices(tag, 8, [256 << 20; 3], |cfg| cfg.stray_check_ms = 200).await;
    let admin = common::mon_client(c.mon.addr(), 95).await;
    (c, admin)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removing_a_pool_deletes_its_objects_on_every_osd() {
    let (c, admin) = cluster("strays-pool").await;
    for i in 0..5 {
        c.client
            .write_full("data", &format!("kept{i}"), &object(i))
            .await
            .unwrap();
    }
    // Every PG of pool data is active (a listing waits for each), so its log objects exist.
    c.client.list_objects("data").await.unwrap();
    let ids: Vec<i32> = c.osds.iter().map(|o| o.id()).collect();
    let mut before = Vec::new();
    for &id in &ids {
        before.push(objects_on(&c, id).await);
    }
    create_pool(&c, &admin, "tmp", 3).await;
    for i in 0..40 {
        c.client
            .write_full("tmp", &format!("gone{i}"), &object(i))
            .await
            .unwrap();
    }
    for (&id, &b) in ids.iter().zip(&before) {
        assert!(objects_on(&c, id).await >= b + 40, "osd.{id} holds tmp");
    }
    let allow = Request::SetMonOption {
        key: "mon_allow_pool_delete".into(),
        value: "true".into(),
    };
    admin.op(allow, 10_000).await.unwrap();
    let remove = Request::RemovePool {
        name: "tmp".into(),
        repeated: "tmp".into(),
        sure: true,
    };
    admin.op(remove, 10_000).await.unwrap();
    let c = &c;
    for (&id, &b) in ids.iter().zip(&before) {
        eventually(&format!("osd.{id} kept tmp's objects"), || async move {
            objects_on(c, id).await == b
        })
        .await;
    }
    for i in 0..5 {
        let got = c.client.read("data", &format!("kept{i}")).await.unwrap();
        assert_eq!(
            crc_fast::crc32_iscsi(&got),
            crc_fast::crc32_iscsi(&object(i))
        );
    }
    // A pool created next gets a new id: nothing of tmp shows up in it.
    let names = create_pool(c, &admin, "tmp", 3).await;
    assert!(names.is_empty(), "the new pool shows {names:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pg_copy_left_on_an_out_osd_is_deleted_once_the_pg_is_clean_without_it() {
    let (c, admin) = cluster("strays-out").await;
    // What the out OSD holds of pool data alone (one log object per PG, written when the PG
    // activates: a listing waits for every PG).
    c.client.list_objects("data").await.unwrap();
    let out = c.osds[0].id();
    let data_only = objects_on(&c, out).await;
    create_pool(&c, &admin, "two", 2).await;
    let two = c
        .client
        .map()
        .unwrap()
        .placement
        .pools
        .values()
        .find(|p| p.name == "two")
        .unwrap()
        .id;
    for i in 0..30 {
        c.client
            .write_full("two", &format!("moved{i}"), &object(i))
            .await
            .unwrap();
    }
    assert!(
        objects_on(&c, out).await > data_only,
        "osd.{out} holds none of pool two"
    );
    admin
        .op(Request::MarkOut { id: out }, 10_000)
        .await
        .unwrap();
    // Pool two's PGs move to the two other OSDs and go clean; pool data (size 3) cannot, so
    // its PGs stay degraded and keep their copies on the out OSD.
    eventually("the out osd kept pool two's copies", || async {
        objects_on(&c, out).await == data_only
    })
    .await;
    for i in 0..30 {
        let got = c.client.read("two", &format!("moved{i}")).await.unwrap();
        assert_eq!(
            crc_fast::crc32_iscsi(&got),
            crc_fast::crc32_iscsi(&object(i)),
            "moved{i}"
        );
    }
    drop(admin);
    let dir = common::stop(c).await;
    let store = common::mount_offline(&dir.0.join("osd0")).await;
    let colls = store.list_collections().await.unwrap();
    store.umount().await.unwrap();
    let of_two: Vec<&String> = colls
        .iter()
        .filter(|c| c.starts_with(&format!("pg.{two}.")))
        .collect();
    assert!(of_two.is_empty(), "left on the out osd: {of_two:?}");
    assert!(
        colls.iter().any(|c| c.starts_with("pg.1.")),
        "the degraded pool's copies were deleted: {colls:?}"
    );
    drop(dir);
}

/// Asks `osd` as a stray holder `from` would whether PG `pg` is clean without it.
async fn is_clean(c: &Cluster, osd: i32, pg: cairn_clustermap::PgId, from: i32, les: u64) -> bool {
    use cairn_proto::peer::{PeerAnswer, PeerBody, PeerReply, PeerRequest};
    let addr = c.osds.iter().find(|o| o.id() == osd).unwrap().addr();
    let mut session = common::dial_as_peer(c, addr, 0x57a7 + les).await;
    let req = PeerRequest {
        tid: 7,
        from,
        epoch: c.client.epoch(),
        pool: pg.pool,
        pg_seed: pg.seed,
        body: PeerBody::IsClean {
            last_epoch_started: les,
        },
        urgency: Default::default(),
        fill: 0,
    };
    let (msg, reply) = (cairn_proto::MSG_PEER_REQUEST, cairn_proto::MSG_PEER_REPLY);
    let payload = cairn_proto::encode(&req, &[]);
    let answer = common::exchange(&mut session, msg, payload, &[], 0, reply).await;
    match cairn_proto::decode::<PeerReply>(&answer).unwrap().0.answer {
        Ok(PeerAnswer::Clean { clean }) => clean,
        other => panic!("{other:?}"),
    }
}

/// A copy activated in an interval the primary's peering never heard of (its OSDs were down
/// then) may hold acknowledged writes the PG lacks: the primary never calls the PG clean to it,
/// so it is kept. An older copy is deleted as usual.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_from_an_interval_the_primary_never_saw_is_never_called_clean() {
    let (c, _admin) = cluster("strays-history").await;
    let (pg, up) = common::placement_of(&c, "probe-history");
    c.client
        .write_full("data", "probe-history", b"x")
        .await
        .unwrap();
    let outsider = 77;
    assert!(is_clean(&c, up[0], pg, outsider, 0).await);
    assert!(!is_clean(&c, up[0], pg, outsider, c.client.epoch() + 1000).await);
    // An OSD of the acting set is never told its copy is not needed.
    assert!(!is_clean(&c, up[0], pg, up[1], 0).await);
}
