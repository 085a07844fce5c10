//! Storage faults under a running cluster (three OSDs, size 3, each OSD's device wrapped in a
//! fault-injecting one driven by `tell osd.N inject ...`):
//! - a device that fails a write fails the store; the OSD stops serving, reports itself down
//!   and tells its owner why, and the PGs go on with the other two copies: every write
//!   acknowledged before and after reads back;
//! - a device that loses power drops what was not flushed; the OSD fail-stops, and started
//!   again on what survived it rejoins and catches up, and its store passes fsck;
//! - a read EIO on one object's data leaves the store serving: the primary repairs that copy
//!   from a replica, the client gets the object's bytes, and both are counted.

use crate::common;

use std::time::Duration;

use common::{cluster_with_devices, eventually, metric_sum, metrics_page, placement_of};

const DEVICE_BYTES: u64 = 256 << 20;

fn data_for(i: usize) -> Vec<u8> {
    let len = 1_000 + (i * 7_919) % 60_000;
    (0..len)
        .map(|j| (j as u32 ^ (i as u32) << 3) as u8)
        .collect()
}

async fn faulty_cluster(tag: &str) -> common::Cluster {
    cluster_with_devices(tag, 8, [DEVICE_BYTES; 3], |cfg| {
        cfg.fault_injection = true;
        cfg.metrics_listen = Some("127.0.0.1:0".parse().unwrap());
        cfg.heartbeat_grace_ms = 60_000;
    })
    .await
}

async fn tell(c: &common::Cluster, osd: i32, words: &[&str]) -> Result<String, String> {
    let args: Vec<String> = words.iter().map(|w| w.to_string()).collect();
    c.client.tell(osd, &args).await.map_err(|e| e.to_string())
}

async fn write_all(c: &common::Cluster, range: std::ops::Range<usize>) {
    for i in range {
        c.client
            .write_full("data", &format!("o{i}"), &data_for(i))
            .await
            .unwrap_or_else(|e| panic!("o{i}: {e}"));
    }
}

/// Waits until the client's map shows `osd` down.
async fn marked_down(c: &common::Cluster, osd: i32) {
    eventually(&format!("osd.{osd} marked down"), || async {
        c.client
            .map()
            .is_some_and(|m| m.osds.get(&osd).is_some_and(|o| !o.up))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_osd_whose_device_fails_a_write_stops_and_is_marked_down() {
    common::logs_from_env();
    let mut c = faulty_cluster("failstop-eio").await;
    write_all(&c, 0..20).await;
    let mut failing = c.osds.remove(1);
    let victim = failing.id();
    tell(&c, victim, &["inject", "eio", "write"]).await.unwrap();
    // Every PG has a copy on the victim (size 3 on three OSDs): the next writes reach it.
    let writes = async { write_all(&c, 20..40).await };
    let failed = async {
        tokio::time::timeout(Duration::from_secs(30), failing.failed())
            .await
            .expect("the OSD fail-stops")
    };
    let ((), why) = tokio::join!(writes, failed);
    assert!(why.contains("injected fault"), "cause: {why}");
    marked_down(&c, victim).await;
    common::reads_back(&c, "data", 40, data_for).await;
    assert!(
        tell(&c, victim, &["io"]).await.is_err(),
        "a fail-stopped OSD serves nothing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_osd_whose_device_loses_power_restarts_on_what_survived() {
    common::logs_from_env();
    let mut c = faulty_cluster("failstop-power").await;
    write_all(&c, 0..30).await;
    let victim = c.osds[2].id();
    let cfg = common::osd_config("failstop-power", 2, &c.mon, &c.dir, DEVICE_BYTES);
    tell(&c, victim, &["inject", "power-loss"]).await.unwrap();
    let why = tokio::time::timeout(Duration::from_secs(30), c.osds[2].failed())
        .await
        .expect("the OSD fail-stops");
    assert!(why.contains("power"), "cause: {why}");
    marked_down(&c, victim).await;
    write_all(&c, 30..45).await;
    drop(c.osds.remove(2));
    let mut cfg = cfg;
    cfg.fault_injection = true;
    cfg.metrics_listen = Some("127.0.0.1:0".parse().unwrap());
    c.osds.push(common::restart_osd(cfg).await);
    common::wait_all_clean(&c, 8).await;
    common::reads_back(&c, "data", 45, data_for).await;
    let dir = c.dir.0.join("osd2");
    let stopped = common::stop(c).await;
    let store = common::mount_offline(&dir).await;
    let report = store.fsck(true).await.unwrap();
    assert!(report.is_clean(), "{report:?}");
    drop(stopped);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_eio_of_one_object_is_repaired_from_a_replica() {
    common::logs_from_env();
    let mut c = faulty_cluster("failstop-read").await;
    write_all(&c, 0..10).await;
    let (_, up) = placement_of(&c, "o3");
    let primary = up[0];
    let said = tell(&c, primary, &["inject", "read-eio", "o3"])
        .await
        .unwrap();
    assert!(said.contains("data block"), "{said}");
    let got = c.client.read("data", "o3").await.unwrap();
    assert_eq!(
        crc_fast::crc32_iscsi(&got),
        crc_fast::crc32_iscsi(&data_for(3)),
        "the client gets the object's bytes"
    );
    // The store's counters reach the page once a second.
    eventually("the read error is counted", || async {
        metric_sum(
            &metrics_page(&c, primary),
            "cairn_osd_store_data_read_errors_total",
            "",
        ) >= 1
    })
    .await;
    assert_eq!(
        metric_sum(
            &metrics_page(&c, primary),
            "cairn_osd_read_repairs_total",
            "repaired"
        ),
        1,
        "and the repair"
    );
    let ix = common::index_of(&c, primary);
    assert!(
        tokio::time::timeout(Duration::from_millis(500), c.osds[ix].failed())
            .await
            .is_err(),
        "one object's read error does not stop the OSD"
    );
    common::reads_back(&c, "data", 10, data_for).await;
    write_all(&c, 10..15).await;
}
