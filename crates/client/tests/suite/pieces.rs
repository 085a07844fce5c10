//! Recovery moves an object in pieces of `recovery_chunk_bytes` (data, then the omap in key
//! order), so that an object whose omap is larger than a message may be still recovers. Pool of
//! size 2 (min_size 1), one PG on primary P and replica R, chunks of 64 KiB, an object of
//! 600 KiB with 3000 omap entries: R misses a version and P pushes it in pieces; then P misses
//! one and pulls it from R in pieces. Each copy is then read alone and must hold the whole
//! object: data (crc32c), xattr and every omap entry.

use crate::common;

use std::time::{Duration, Instant};

use cairn_client::Client;
use common::{index_of, osd_config, stop_osd, Cluster};

const TAG: &str = "pieces";
const CHUNK: u64 = 64 << 10;
const OMAP_ENTRIES: usize = 3000;

fn data_of(v: u8) -> Vec<u8> {
    (0..600 * 1024 + usize::from(v) * 4096 + 123)
        .map(|i| (i as u8).wrapping_mul(13).wrapping_add(v))
        .collect()
}

fn omap_of(v: u8) -> Vec<(Vec<u8>, Vec<u8>)> {
    (0..OMAP_ENTRIES)
        .map(|i| {
            let key = format!("entry-{i:06}").into_bytes();
            (key, vec![v.wrapping_add(i as u8); 96])
        })
        .collect()
}

/// Retries `op` until it succeeds (at most 30 s): the PG may be peering.
async fn until_ok<T, F: std::future::Future<Output = Result<T, cairn_client::ClientError>>>(
    what: &str,
    op: impl Fn() -> F,
) -> T {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match op().await {
            Ok(v) => return v,
            Err(e) => assert!(Instant::now() < deadline, "{what}: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Writes version `v` of "big": its data, an xattr, and every omap entry (in batches).
async fn write_version(c: &Client, v: u8) {
    let (data, version) = (data_of(v), [v]);
    until_ok("write_full", || c.write_full("two", "big", &data)).await;
    until_ok("set_xattr", || {
        c.set_xattr("two", "big", "version", &version)
    })
    .await;
    for batch in omap_of(v).chunks(500) {
        until_ok("omap_set", || c.omap_set("two", "big", batch)).await;
    }
}

/// Asserts the copy serving "big" holds version `v` whole.
async fn check_version(c: &Client, v: u8) {
    let data = until_ok("read", || c.read("two", "big")).await;
    assert_eq!(data.len(), data_of(v).len());
    assert_eq!(
        crc_fast::crc32_iscsi(&data),
        crc_fast::crc32_iscsi(&data_of(v))
    );
    assert_eq!(c.get_xattr("two", "big", "version").await.unwrap(), vec![v]);
    let mut omap = Vec::new();
    loop {
        let after = omap.last().map(|(k, _): &(Vec<u8>, Vec<u8>)| k.clone());
        let (page, more) = c
            .omap_list("two", "big", &after.unwrap_or_default(), b"", 1000)
            .await
            .unwrap();
        omap.extend(page);
        if !more {
            break;
        }
    }
    assert_eq!(omap, omap_of(v), "version {v}'s omap");
}

/// Starts the cluster's OSD number `i` again (id `osd`) with the small chunks and a metrics
/// page.
async fn restart(c: &mut Cluster, i: usize, osd: i32) {
    let mut cfg = osd_config(TAG, i, &c.mon, &c.dir, 256 << 20);
    cfg.recovery_chunk_bytes = Some(CHUNK);
    cfg.metrics_listen = Some("127.0.0.1:0".parse().unwrap());
    common::restart_up(c, cfg, osd).await;
}

/// Waits until every PG `osd` leads is active+clean (recovery finished).
async fn wait_clean(c: &Cluster, osd: i32) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let stats = c
            .client
            .tell(osd, &["pg".into(), "stats".into()])
            .await
            .unwrap_or_default();
        if !stats.is_empty() && stats.lines().all(|l| l.starts_with("active+clean ")) {
            return;
        }
        assert!(Instant::now() < deadline, "osd.{osd}'s PGs: {stats}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_larger_than_a_chunk_is_pushed_and_pulled_in_pieces() {
    let mut c = common::cluster_with_devices(TAG, 4, [256 << 20; 3], |cfg| {
        cfg.recovery_chunk_bytes = Some(CHUNK)
    })
    .await;
    c.client.op_timeout_ms = 3_000;
    let admin = common::mon_client(c.mon.addr(), 77).await;
    common::create_pool(&admin, "two", 2, 1).await;
    write_version(&c.client, 1).await;
    let up = common::placement_in(&c, "two", "big").1;
    assert_eq!(up.len(), 2, "{up:?}");
    let (p, r) = (up[0], up[1]);
    let (ip, ir) = (index_of(&c, p), index_of(&c, r));
    // R misses version 2: P pushes it when R returns.
    stop_osd(&mut c, &admin, r).await;
    write_version(&c.client, 2).await;
    restart(&mut c, ir, r).await;
    wait_clean(&c, p).await;
    // The PG activated with R lacking the object and recovered it in the background (no
    // client op touched it): R scheduled each piece P pushed as recovery, as P's requests
    // asked, not as client work.
    let page = common::metrics_page(&c, r);
    let received = common::metric_sum(&page, "cairn_osd_recovery_steps_total", "receive_push");
    let blocking = common::metric_sum(&page, "cairn_osd_recovery_blocking_steps_total", "");
    assert!(received >= 10, "{received} pieces received\n{page}");
    assert_eq!(blocking, 0, "no piece R received held a client op back");
    // R alone: it holds version 2 whole. Version 3 goes to R alone.
    stop_osd(&mut c, &admin, p).await;
    check_version(&c.client, 2).await;
    write_version(&c.client, 3).await;
    // P returns as primary and pulls version 3 from R.
    restart(&mut c, ip, p).await;
    wait_clean(&c, p).await;
    stop_osd(&mut c, &admin, r).await;
    check_version(&c.client, 3).await;
    common::stop(c).await;
}
