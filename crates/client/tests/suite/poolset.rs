//! `pool set` on a running cluster: a pool grown from two copies to three backfills the new
//! copy of every PG, one shrunk to a single copy deletes the surplus copies, and PGs that went
//! inactive below min_size serve again once min_size is lowered (a new min_size starts a new
//! interval, so the PGs peer). Every object reads back by crc32c throughout.

use crate::common;

use cairn_client::mon::MonClient;
use cairn_proto::mon::Request;
use common::{
    cluster_with_devices, df_value, eventually, pg_states, reads_back, stop_osd, Cluster,
};

const PG_NUM: u32 = 8;

fn object(i: usize) -> Vec<u8> {
    (0..2000 + i * 53).map(|b| (b * 13 + i) as u8).collect()
}

async fn set_pool(admin: &MonClient, name: &str, size: Option<u32>, min_size: Option<u32>) {
    let set = Request::SetPool {
        name: name.into(),
        size,
        min_size,
    };
    admin.op(set, 10_000).await.unwrap();
}

/// Client objects over every running OSD, and on each.
async fn copies(c: &Cluster) -> (u64, Vec<u64>) {
    let mut each = Vec::new();
    for osd in c.osds.iter().map(|o| o.id()) {
        each.push(df_value(c, osd, "objects").await);
    }
    (each.iter().sum(), each)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_grown_to_three_copies_backfills_and_one_shrunk_to_one_deletes_the_rest() {
    let c = cluster_with_devices("poolset-size", PG_NUM, [256 << 20; 3], |cfg| {
        cfg.stray_check_ms = 200
    })
    .await;
    let admin = common::mon_client(c.mon.addr(), 96).await;
    set_pool(&admin, "data", Some(2), None).await;
    for i in 0..30 {
        c.client
            .write_full("data", &format!("o{i}"), &object(i))
            .await
            .unwrap();
    }
    // Writes may land before every OSD applied the new map: a third copy written then is
    // deleted as a stray once the PG is clean on two.
    let c = &c;
    eventually("two copies of each object", || async move {
        copies(c).await.0 == 60
    })
    .await;
    common::wait_all_clean(c, PG_NUM as usize).await;
    set_pool(&admin, "data", Some(3), None).await;
    eventually("every OSD to hold every object", || async move {
        copies(c).await == (90, vec![30, 30, 30])
    })
    .await;
    common::wait_all_clean(c, PG_NUM as usize).await;
    reads_back(c, "data", 30, object).await;
    set_pool(&admin, "data", Some(1), None).await;
    eventually("the surplus copies to be deleted", || async move {
        copies(c).await.0 == 30
    })
    .await;
    common::wait_all_clean(c, PG_NUM as usize).await;
    reads_back(c, "data", 30, object).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pgs_below_min_size_serve_again_once_it_is_lowered() {
    let mut c = cluster_with_devices("poolset-min", PG_NUM, [256 << 20; 3], |_| {}).await;
    let admin = common::mon_client(c.mon.addr(), 97).await;
    for i in 0..10 {
        c.client
            .write_full("data", &format!("o{i}"), &object(i))
            .await
            .unwrap();
    }
    let ids: Vec<i32> = c.osds.iter().map(|o| o.id()).collect();
    for &osd in &ids[1..] {
        stop_osd(&mut c, &admin, osd).await;
    }
    let c_ref = &c;
    eventually("the PGs to go inactive (1 copy, min_size 2)", || async move {
        pg_states(c_ref).await == [("inactive".to_string(), PG_NUM as usize)].into()
    })
    .await;
    set_pool(&admin, "data", None, Some(1)).await;
    eventually("the PGs to serve on one copy", || async move {
        pg_states(c_ref).await == [("active+degraded".to_string(), PG_NUM as usize)].into()
    })
    .await;
    reads_back(&c, "data", 10, object).await;
    c.client
        .write_full("data", "after", b"one copy")
        .await
        .unwrap();
    assert_eq!(c.client.read("data", "after").await.unwrap(), b"one copy");
}
