//! Cluster flags on a running cluster (Ceph's `osd set`): each holds back what it names until
//! it is unset, and then the cluster does what it held.
//!
//! - `norecover`: an OSD back from a stop gets none of the writes it missed while the flag is
//!   set; its PGs serve meanwhile with it in their acting sets (`+degraded+recovery_wait`), every object
//!   reads back by crc32c; unset, the copy is recovered and every PG is clean.
//! - `norebalance`: marking an OSD out leaves its PGs misplaced (served by a temporary acting
//!   set with it, `+backfill_wait`) and its objects where they are; unset, they move and it
//!   holds none.
//! - `noscrub` and `nodeep-scrub`: no scheduled scrub runs while they are set (scrubs are due
//!   every 1-2 s), an operator's deep scrub still does, and scheduled ones resume once unset.
//! - `noup`: an OSD restarted while it is set stays down (its PGs serve degraded without it)
//!   and comes up by itself once it is unset; the same with the OSD's own `noup`.
//! - `pausewr` and `pauserd`: a client's writes (reads) wait and fail at their deadline naming
//!   the flag; the other kind goes on; a held write completes once the flag is unset.

use crate::common;

use std::time::Duration;

use cairn_client::mon::MonClient;
use cairn_client::ClientError;
use cairn_clustermap::MapFlag;
use cairn_proto::mon::Request;
use common::{
    cluster_with_devices, create_pool, df_value, eventually, metric_sum, metrics_page, pg_states,
    reads_back, restart_osd, restart_up, stop_osd, wait_all_clean, Cluster,
};

const DEVICE_BYTES: u64 = 256 << 20;

fn object(i: usize) -> Vec<u8> {
    (0..3000 + i * 71).map(|b| (b * 7 + i * 13) as u8).collect()
}

async fn set(admin: &MonClient, flags: &[MapFlag], on: bool) {
    let body = Request::SetFlags {
        flags: flags.to_vec(),
        on,
    };
    admin.op(body, 10_000).await.unwrap();
}

/// PGs the OSDs lead that serve I/O, and the states of all of them.
async fn serving(c: &Cluster) -> (usize, std::collections::BTreeMap<String, usize>) {
    let states = pg_states(c).await;
    let active = states
        .iter()
        .filter(|(s, _)| s.starts_with("active"))
        .map(|(_, n)| n)
        .sum();
    (active, states)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn norecover_keeps_a_returning_osd_behind_until_it_is_unset() {
    const PGS: u32 = 8;
    let mut c = cluster_with_devices("flags-recover", PGS, [DEVICE_BYTES; 3], |_| {}).await;
    let admin = common::mon_client(c.mon.addr(), 71).await;
    for i in 0..20 {
        let name = format!("o{i}");
        c.client
            .write_full("data", &name, &object(i))
            .await
            .unwrap();
    }
    set(&admin, &[MapFlag::NoRecover], true).await;
    let x = c.osds[2].id();
    let cfg = common::osd_config("flags-recover", 2, &c.mon, &c.dir, DEVICE_BYTES);
    stop_osd(&mut c, &admin, x).await;
    for i in 20..40 {
        let name = format!("o{i}");
        c.client
            .write_full("data", &name, &object(i))
            .await
            .unwrap();
    }
    restart_up(&mut c, cfg, x).await;
    eventually("every PG serves with osd.X back", || async {
        serving(&c).await.0 == PGS as usize
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (active, states) = serving(&c).await;
    assert_eq!(active, PGS as usize, "{states:?}");
    assert!(
        states.contains_key("active+degraded+recovery_wait"),
        "{states:?}"
    );
    assert_eq!(
        df_value(&c, x, "objects").await,
        20,
        "osd.{x} got none of the 20 objects written while it was away"
    );
    reads_back(&c, "data", 40, object).await;
    c.client
        .write_full("data", "o40", &object(40))
        .await
        .unwrap();

    set(&admin, &[MapFlag::NoRecover], false).await;
    wait_all_clean(&c, PGS as usize).await;
    eventually("osd.X holds every object", || async {
        df_value(&c, x, "objects").await == 41
    })
    .await;
    reads_back(&c, "data", 41, object).await;
    common::stop(c).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn norebalance_keeps_an_out_osds_objects_in_place_until_it_is_unset() {
    const PGS: u32 = 8;
    common::logs_from_env();
    let c = cluster_with_devices("flags-rebalance", PGS, [DEVICE_BYTES; 3], |cfg| {
        cfg.stray_check_ms = 200
    })
    .await;
    let admin = common::mon_client(c.mon.addr(), 72).await;
    create_pool(&admin, "two", 2, PGS).await;
    eventually("the client sees pool two", || async {
        c.client
            .map()
            .is_some_and(|m| m.placement.pool_named("two").is_some())
    })
    .await;
    for i in 0..30 {
        let name = format!("o{i}");
        c.client.write_full("two", &name, &object(i)).await.unwrap();
    }
    wait_all_clean(&c, 2 * PGS as usize).await;
    let x = c.osds[0].id();
    let before = df_value(&c, x, "objects").await;
    assert!(before > 0);
    set(&admin, &[MapFlag::NoRebalance], true).await;
    admin.op(Request::MarkOut { id: x }, 10_000).await.unwrap();
    eventually("every PG serves with osd.X out", || async {
        serving(&c).await.0 == 2 * PGS as usize
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (active, states) = serving(&c).await;
    assert_eq!(active, 2 * PGS as usize, "{states:?}");
    let waiting = states.get("active+remapped+backfill_wait");
    assert!(waiting.is_some_and(|n| *n > 0), "{states:?}");
    assert_eq!(
        df_value(&c, x, "objects").await,
        before,
        "nothing moved off the out OSD"
    );
    reads_back(&c, "two", 30, object).await;

    set(&admin, &[MapFlag::NoRebalance], false).await;
    eventually("osd.X is emptied", || async {
        df_value(&c, x, "objects").await == 0
    })
    .await;
    let (_, states) = serving(&c).await;
    assert!(!states.keys().any(|s| s.contains("remapped")), "{states:?}");
    reads_back(&c, "two", 30, object).await;
    common::stop(c).await;
}

/// Scrubs the cluster's OSDs finished (shallow, deep), from their metrics pages.
fn scrubs(c: &Cluster) -> (u64, u64) {
    c.osds.iter().fold((0, 0), |(s, d), o| {
        let page = metrics_page(c, o.id());
        (
            s + metric_sum(&page, "cairn_osd_scrubs_total", "kind=\"shallow\""),
            d + metric_sum(&page, "cairn_osd_scrubs_total", "kind=\"deep\""),
        )
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn noscrub_and_nodeep_scrub_hold_scheduled_scrubs_but_not_an_operators() {
    let tweak = |cfg: &mut cairn_osd::OsdConfig| {
        cfg.scrub_interval_s = 1;
        cfg.deep_scrub_interval_s = 2;
        cfg.metrics_listen = Some("127.0.0.1:0".parse().unwrap());
    };
    let c = cluster_with_devices("flags-scrub", 4, [DEVICE_BYTES; 3], tweak).await;
    let admin = common::mon_client(c.mon.addr(), 73).await;
    set(&admin, &[MapFlag::NoScrub, MapFlag::NoDeepScrub], true).await;
    for i in 0..10 {
        let name = format!("o{i}");
        c.client
            .write_full("data", &name, &object(i))
            .await
            .unwrap();
    }
    // A scrub under way when the flags came ends at its next chunk.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let held = scrubs(&c);
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(
        scrubs(&c),
        held,
        "no scheduled scrub while the flags are set"
    );

    let map = c.client.map().unwrap();
    let pg = cairn_clustermap::PgId {
        pool: map.placement.pool_named("data").unwrap().id,
        seed: 0,
    };
    let primary = map.placement.mapper().map_pg(pg).unwrap().acting[0];
    let args = ["pg".to_string(), "deep-scrub".into(), pg.to_string()];
    let report = c.client.tell(primary, &args).await.unwrap();
    assert!(report.contains("0 inconsistent"), "{report}");
    assert_eq!(scrubs(&c), (held.0, held.1 + 1), "the operator's ran");

    set(&admin, &[MapFlag::NoScrub, MapFlag::NoDeepScrub], false).await;
    eventually("scheduled scrubs resume", || async {
        let (s, d) = scrubs(&c);
        s > held.0 && d > held.1 + 1
    })
    .await;
    common::stop(c).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_flags_hold_client_writes_and_reads_until_unset() {
    let c = cluster_with_devices("flags-pause", 4, [DEVICE_BYTES; 3], |_| {}).await;
    let admin = common::mon_client(c.mon.addr(), 74).await;
    c.client.write_full("data", "o0", &object(0)).await.unwrap();
    let mut quick = common::connect(c.mon.addr(), 75).await.unwrap();
    quick.op_timeout_ms = 1_500;

    set(&admin, &[MapFlag::PauseWr], true).await;
    eventually("the client sees pausewr", || async {
        quick.map().is_some_and(|m| m.has(MapFlag::PauseWr))
    })
    .await;
    match quick.write_full("data", "o1", &object(1)).await {
        Err(ClientError::Timeout { last, .. }) => assert!(last.contains("pausewr"), "{last}"),
        other => panic!("a write went through pausewr: {other:?}"),
    }
    assert_eq!(quick.read("data", "o0").await.unwrap(), object(0));

    set(&admin, &[MapFlag::PauseRd], true).await;
    eventually("the client sees pauserd", || async {
        quick.map().is_some_and(|m| m.has(MapFlag::PauseRd))
    })
    .await;
    match quick.read("data", "o0").await {
        Err(ClientError::Timeout { last, .. }) => assert!(last.contains("pauserd"), "{last}"),
        other => panic!("a read went through pauserd: {other:?}"),
    }

    let held = tokio::spawn({
        let mon = c.mon.addr();
        async move {
            let client = common::connect(mon, 76).await.unwrap();
            client.write_full("data", "o2", &object(2)).await
        }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!held.is_finished(), "the write waits for the flag");
    set(&admin, &[MapFlag::PauseRd, MapFlag::PauseWr], false).await;
    held.await.unwrap().unwrap();
    let got = c.client.read("data", "o2").await.unwrap();
    assert_eq!(
        crc_fast::crc32_iscsi(&got),
        crc_fast::crc32_iscsi(&object(2))
    );
    assert!(
        quick.read("data", "o1").await.is_err(),
        "the write that timed out was never sent"
    );
    common::stop(c).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn noup_keeps_a_restarted_osd_down_until_it_is_unset() {
    let mut c = cluster_with_devices("flags-noup", NOUP_PGS, [DEVICE_BYTES; 3], |_| {}).await;
    let admin = common::mon_client(c.mon.addr(), 77).await;
    let x = c.osds[2].id();
    let cluster_wide = [Request::SetFlags {
        flags: vec![MapFlag::NoUp],
        on: true,
    }];
    let lift = [Request::SetFlags {
        flags: vec![MapFlag::NoUp],
        on: false,
    }];
    held_down_until_lifted(&mut c, &admin, x, &cluster_wide, &lift, 0).await;
    // The same with osd.X's own noup (Ceph's `osd add-noup`): only it is held.
    let own = |on| Request::SetOsdFlag {
        ids: vec![x],
        flag: MapFlag::NoUp,
        on,
    };
    held_down_until_lifted(&mut c, &admin, x, &[own(true)], &[own(false)], 1).await;
    common::stop(c).await;
}

/// PGs of the `noup` test's pool.
const NOUP_PGS: u32 = 4;

/// Stops osd `x`, sends `hold`, restarts it: for 2 s it stays down while the two others take
/// write `o{n}`; then `lift`, and it comes up by itself and gets that write (every object
/// `o0..=o{n}` read back).
async fn held_down_until_lifted(
    c: &mut Cluster,
    admin: &MonClient,
    x: i32,
    hold: &[Request],
    lift: &[Request],
    n: usize,
) {
    let cfg = common::osd_config("flags-noup", 2, &c.mon, &c.dir, DEVICE_BYTES);
    stop_osd(c, admin, x).await;
    for r in hold {
        admin.op(r.clone(), 10_000).await.unwrap();
    }
    c.osds.push(restart_osd(cfg).await);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let map = c.client.map().unwrap();
    assert!(!map.osds[&x].up, "osd.{x} booted held and stays down");
    assert_eq!(map.osds.values().filter(|o| o.up).count(), 2);
    let name = format!("o{n}");
    c.client
        .write_full("data", &name, &object(n))
        .await
        .unwrap();
    for r in lift {
        admin.op(r.clone(), 10_000).await.unwrap();
    }
    eventually("osd.X comes up by itself", || async {
        c.client.map().is_some_and(|m| m.osds[&x].up)
    })
    .await;
    wait_all_clean(c, NOUP_PGS as usize).await;
    eventually("osd.X got the write it missed", || async {
        df_value(c, x, "objects").await == n as u64 + 1
    })
    .await;
    reads_back(c, "data", n + 1, object).await;
}
