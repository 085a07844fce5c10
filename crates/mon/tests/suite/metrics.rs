//! The monitor's Prometheus page: gauges that follow the map (OSDs, pools, PG placement and
//! spread, PGs the map leaves short), counters of what it served, over real loopback sockets;
//! a page that parses, with every family's samples together.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;

use cairn_client::mon::MonClient;
use cairn_clustermap::ClusterMap;
use cairn_mon::daemon::{MonDaemon, MonServing};
use cairn_mon::metrics::render_map;
use cairn_mon::{MonConfig, Monitor};
use cairn_proto::mon::{Reply, Request};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn boot(mon: &mut Monitor, n: usize) {
    for i in 0..n {
        let r = mon
            .handle(
                0,
                Request::Boot {
                    uuid: format!("uuid-{i}"),
                    host: format!("host{i}"),
                    addr: format!("127.0.0.1:{}", 7000 + i),
                    crush_weight: 0x10000,
                    want_id: None,
                },
            )
            .unwrap();
        assert!(matches!(r, Reply::Booted { .. }), "{r:?}");
    }
}

/// Parses a page: sample name with labels -> value. Fails on a malformed line, a value that is
/// not a number, a sample without its family's TYPE line, or a family whose samples are split.
fn parse(page: &str) -> BTreeMap<String, f64> {
    let mut samples = BTreeMap::new();
    let mut typed = BTreeSet::new();
    let mut finished = BTreeSet::new();
    let mut current: Option<String> = None;
    for line in page.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let name = rest.split_whitespace().next().unwrap().to_string();
            assert!(typed.insert(name.clone()), "second TYPE for {name}");
            continue;
        }
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let (key, value) = line.rsplit_once(' ').expect(line);
        let name = key.split('{').next().unwrap().to_string();
        assert!(typed.contains(&name), "{name} has no TYPE line");
        if current.as_deref() != Some(name.as_str()) {
            assert!(!finished.contains(&name), "samples of {name} are split");
            if let Some(prev) = current.replace(name.clone()) {
                finished.insert(prev);
            }
        }
        let v: f64 = value
            .parse()
            .unwrap_or_else(|_| panic!("bad value in {line:?}"));
        assert!(samples.insert(key.to_string(), v).is_none(), "{key} twice");
    }
    samples
}

fn sum_of(samples: &BTreeMap<String, f64>, prefix: &str) -> f64 {
    samples
        .iter()
        .filter(|(k, _)| k.starts_with(prefix))
        .map(|(_, v)| v)
        .sum()
}

#[test]
fn the_map_gauges_count_osds_pgs_and_what_down_osds_leave_short() {
    let mut mon = Monitor::new(ClusterMap::new("fsid").unwrap(), MonConfig::default());
    boot(&mut mon, 4);
    mon.handle(
        0,
        Request::CreatePool {
            name: "rbd \"x\"".into(),
            size: 3,
            pg_num: 64,
        },
    )
    .unwrap();
    let m = parse(&render_map(mon.map()));
    assert_eq!(m["cairn_mon_epoch"], mon.map().epoch as f64);
    assert_eq!(m["cairn_mon_osds"], 4.0);
    assert_eq!(m["cairn_mon_osds_up"], 4.0);
    assert_eq!(m["cairn_mon_osds_in"], 4.0);
    assert_eq!(m["cairn_mon_pools"], 1.0);
    assert_eq!(m["cairn_mon_pgs"], 64.0);
    assert_eq!(m["cairn_mon_pgs_undersized"], 0.0);
    assert_eq!(m["cairn_mon_pgs_below_min_size"], 0.0);
    // The pool's name is escaped in its label.
    assert_eq!(m["cairn_mon_pool_size{pool=\"rbd \\\"x\\\"\"}"], 3.0);
    assert_eq!(m["cairn_mon_pool_pg_num{pool=\"rbd \\\"x\\\"\"}"], 64.0);
    assert!(m["cairn_mon_pool_pg_max_deviation{pool=\"rbd \\\"x\\\"\"}"] <= 1.0);
    // Every copy of every PG is counted on one OSD, every PG has one primary.
    assert_eq!(sum_of(&m, "cairn_mon_osd_pgs{"), 192.0);
    assert_eq!(sum_of(&m, "cairn_mon_osd_primary_pgs{"), 64.0);
    assert_eq!(m["cairn_mon_osd_up{osd=\"2\",host=\"host2\"}"], 1.0);

    // Two of four hosts down: every PG misses a copy; those that lost two of their three
    // cannot take writes.
    mon.handle(0, Request::MarkDown { id: 0 }).unwrap();
    mon.handle(0, Request::MarkDown { id: 1 }).unwrap();
    let m = parse(&render_map(mon.map()));
    assert_eq!(m["cairn_mon_osds_up"], 2.0);
    assert_eq!(m["cairn_mon_osds_in"], 4.0);
    assert_eq!(m["cairn_mon_osd_up{osd=\"0\",host=\"host0\"}"], 0.0);
    assert_eq!(m["cairn_mon_pgs_undersized"], 64.0);
    let below = m["cairn_mon_pgs_below_min_size"];
    assert!(below > 0.0 && below < 64.0, "{below}");
    assert_eq!(m["cairn_mon_osd_pgs{osd=\"0\"}"], 0.0);
    assert_eq!(m["cairn_mon_osd_primary_pgs{osd=\"1\"}"], 0.0);
    // Out: its reweight is 0 on the page.
    mon.handle(0, Request::MarkOut { id: 0 }).unwrap();
    let m = parse(&render_map(mon.map()));
    assert_eq!(m["cairn_mon_osds_in"], 3.0);
    assert_eq!(m["cairn_mon_osd_reweight{osd=\"0\"}"], 0.0);
    assert_eq!(m["cairn_mon_osd_reweight{osd=\"3\"}"], 1.0);
}

async fn get(addr: SocketAddr, request: &str) -> String {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(request.as_bytes()).await.unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    out
}

async fn page(addr: SocketAddr) -> BTreeMap<String, f64> {
    let reply = get(addr, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").await;
    let (head, body) = reply.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    parse(body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_serves_its_page_and_counts_what_it_served() {
    let monitor = Monitor::new(ClusterMap::new("fsid").unwrap(), MonConfig::default());
    let serving = MonServing {
        store: None,
        metrics_listen: Some("127.0.0.1:0".parse().unwrap()),
        auth: None,
    };
    let daemon = MonDaemon::serve(monitor, "127.0.0.1:0".parse().unwrap(), serving)
        .await
        .unwrap();
    let at = daemon.metrics_addr().expect("metrics address");
    let m = page(at).await;
    assert_eq!(m["cairn_mon_epoch"], 1.0);
    assert_eq!(m["cairn_mon_osds"], 0.0);

    let watcher = MonClient::connect(daemon.addr(), 1).await;
    watcher.subscribe(5000).await.unwrap();
    for i in 0..3 {
        let osd = MonClient::connect(daemon.addr(), 10 + i).await;
        osd.op(
            Request::Boot {
                uuid: format!("u{i}"),
                host: format!("h{i}"),
                addr: format!("127.0.0.1:{}", 9000 + i),
                crush_weight: 0x10000,
                want_id: None,
            },
            5000,
        )
        .await
        .unwrap();
    }
    let admin = MonClient::connect(daemon.addr(), 99).await;
    let create = || Request::CreatePool {
        name: "data".into(),
        size: 3,
        pg_num: 32,
    };
    let created = admin.op(create(), 5000).await.unwrap();
    assert!(admin.op(create(), 5000).await.is_err(), "duplicate pool");
    watcher.wait_for_epoch(created.epoch, 5000).await.unwrap();

    let m = page(at).await;
    assert_eq!(m["cairn_mon_epoch"], created.epoch as f64);
    assert_eq!(m["cairn_mon_osds_up"], 3.0);
    assert_eq!(m["cairn_mon_pgs"], 32.0);
    assert_eq!(sum_of(&m, "cairn_mon_osd_pgs{"), 96.0);
    let req = |kind: &str, outcome: &str| {
        m[&format!("cairn_mon_requests_total{{kind=\"{kind}\",outcome=\"{outcome}\"}}")]
    };
    assert_eq!(req("boot", "accepted"), 3.0);
    assert_eq!(req("create_pool", "accepted"), 1.0);
    assert_eq!(req("create_pool", "refused"), 1.0);
    assert_eq!(req("subscribe", "accepted"), 1.0);
    assert!(m["cairn_mon_subscribers"] >= 1.0);
    // The watcher got the first map whole, then each epoch as an incremental.
    assert_eq!(m["cairn_mon_map_pushes_full_total"], 1.0);
    assert!(m["cairn_mon_map_pushes_incremental_total"] >= 1.0);
    // No store: nothing saved.
    assert_eq!(m["cairn_mon_map_saves_total"], 0.0);

    // Other paths and methods are refused; garbage is answered, not fatal.
    let other = get(at, "GET /nope HTTP/1.1\r\n\r\n").await;
    assert!(other.starts_with("HTTP/1.1 404"), "{other}");
    let post = get(at, "POST /metrics HTTP/1.1\r\n\r\n").await;
    assert!(post.starts_with("HTTP/1.1 405"), "{post}");
    let _ = get(at, "\u{1}\u{2}garbage\r\n\r\n").await;
    assert_eq!(page(at).await["cairn_mon_osds_up"], 3.0);

    // Each primary reports its PGs' usage (2 objects of 100 bytes each): the pool's objects
    // and bytes show, and a quota the pool reaches marks it full on the page.
    let map = watcher.wait_for_epoch(created.epoch, 5000).await.unwrap();
    let mut mapper = map.placement.mapper();
    let mut led: BTreeMap<i32, Vec<cairn_clustermap::PgUsage>> = BTreeMap::new();
    for seed in 0..32 {
        let pg = cairn_clustermap::PgId { pool: 1, seed };
        let primary = mapper.map_pg(pg).unwrap().acting_primary().unwrap();
        led.entry(primary)
            .or_default()
            .push(cairn_clustermap::PgUsage {
                pg,
                objects: 2,
                bytes: 200,
            });
    }
    for (id, usage) in led {
        admin
            .op(Request::PgUsage { id, usage }, 5000)
            .await
            .unwrap();
    }
    let quota = Request::SetPoolQuota {
        name: "data".into(),
        max_objects: Some(64),
        max_bytes: None,
    };
    admin.op(quota, 5000).await.unwrap();
    let m = page(at).await;
    assert_eq!(m["cairn_mon_pool_objects{pool=\"data\"}"], 64.0);
    assert_eq!(m["cairn_mon_pool_stored_bytes{pool=\"data\"}"], 6400.0);
    assert_eq!(m["cairn_mon_pool_pgs_reported{pool=\"data\"}"], 32.0);
    assert_eq!(m["cairn_mon_pool_quota_full{pool=\"data\"}"], 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_monitor_with_a_store_counts_its_durable_saves() {
    let dir = tempfile::tempdir().unwrap();
    let store = cairn_mon::store::MapStore::open(dir.path()).await.unwrap();
    let monitor = Monitor::new(ClusterMap::new("fsid").unwrap(), MonConfig::default());
    let serving = MonServing {
        store: Some(store),
        metrics_listen: Some("127.0.0.1:0".parse().unwrap()),
        auth: None,
    };
    let daemon = MonDaemon::serve(monitor, "127.0.0.1:0".parse().unwrap(), serving)
        .await
        .unwrap();
    let admin = MonClient::connect(daemon.addr(), 1).await;
    admin
        .op(
            Request::Boot {
                uuid: "u".into(),
                host: "h".into(),
                addr: "127.0.0.1:9100".into(),
                crush_weight: 0x10000,
                want_id: None,
            },
            5000,
        )
        .await
        .unwrap();
    let m = page(daemon.metrics_addr().unwrap()).await;
    assert_eq!(m["cairn_mon_map_saves_total"], 1.0);
    assert!(m["cairn_mon_map_save_seconds_total"] > 0.0);
}
