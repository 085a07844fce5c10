//! OSDs under client churn: a thousand short-lived clients (as every operator script and
//! every short job is) connect, write and read, and vanish, a quarter of them with a write
//! still in flight, while thousands of map epochs pass (`CAIRN_CHURN_EPOCHS`, default 3,000).
//! The OSDs keep answering a steady client throughout (write latency printed), and at the end
//! hold no session and no byte for the clients that are gone; every acknowledged write reads
//! back.

use crate::common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use cairn_clustermap::flags::MapFlag;
use cairn_proto::mon::Request;
use common::{cluster_with_devices, metric_sum, metrics_page};

/// Sessions and held bytes of every OSD's messenger, summed.
fn osd_sessions_and_held(c: &common::Cluster) -> (u64, u64) {
    let mut sessions = 0;
    let mut held = 0;
    for osd in 0..3 {
        let page = metrics_page(c, osd);
        sessions += metric_sum(&page, "cairn_msgr_sessions", "daemon=\"osd.");
        held += metric_sum(&page, "cairn_msgr_held_bytes", "daemon=\"osd.");
    }
    (sessions, held)
}

fn bytes_of(i: u64) -> Vec<u8> {
    (0..(100 + i % 5_000))
        .map(|j| j.wrapping_mul(31).wrapping_add(i) as u8)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn osds_forget_a_thousand_vanished_clients_through_thousands_of_epochs() {
    let epochs: u64 = std::env::var("CAIRN_CHURN_EPOCHS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3_000);
    let c = cluster_with_devices("churn", 8, [256 << 20; 3], |cfg| {
        cfg.metrics_listen = Some("127.0.0.1:0".parse().unwrap());
    })
    .await;
    let mon = c.mon.addr();
    // The steady client's session with the primary of its object counts in the baseline.
    c.client
        .write_full("data", "steady", b"first")
        .await
        .unwrap();
    let baseline = osd_sessions_and_held(&c);
    let admin = common::mon_client(mon, 77).await;

    let churn = tokio::spawn(async move {
        let mut joined = tokio::task::JoinSet::new();
        let mut written = BTreeMap::new();
        for i in 0..1_000u64 {
            joined.spawn(async move {
                let client = common::connect(mon, 200_000 + i).await.ok()?;
                let name = format!("churn{i}");
                let data = bytes_of(i);
                if i.is_multiple_of(4) {
                    // Vanish with the write in flight: its reply finds the session gone.
                    let write = client.write_full("data", &name, &data);
                    let _ = tokio::time::timeout(Duration::from_micros(300), write).await;
                    return None;
                }
                client.write_full("data", &name, &data).await.ok()?;
                let back = client.read("data", &name).await.ok()?;
                assert_eq!(back, data, "{name} read back other bytes");
                Some((name, data))
            });
            if joined.len() >= 32 {
                if let Some(Ok(Some((n, d)))) = joined.join_next().await {
                    written.insert(n, d);
                }
            }
        }
        while let Some(r) = joined.join_next().await {
            if let Ok(Some((n, d))) = r {
                written.insert(n, d);
            }
        }
        written
    });

    let mut latencies = Vec::new();
    let mut epoch = 0;
    let started = Instant::now();
    for i in 0..epochs {
        epoch = admin
            .op(
                Request::SetFlags {
                    flags: vec![MapFlag::NoOut],
                    on: i.is_multiple_of(2),
                },
                10_000,
            )
            .await
            .unwrap_or_else(|e| panic!("request {i} at epoch {epoch}: {e}"))
            .epoch;
        if i.is_multiple_of(10) {
            let t = Instant::now();
            c.client
                .write_full("data", "steady", &i.to_le_bytes())
                .await
                .unwrap_or_else(|e| panic!("the steady client's write at epoch {epoch}: {e}"));
            latencies.push(t.elapsed());
        }
    }
    let written = churn.await.unwrap();
    latencies.sort();
    let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q) as usize];
    println!(
        "{epochs} epochs in {:.1} s with 1000 clients churning; steady writes p50 {:?} p99 {:?}; \
         {} churning clients wrote and read back",
        started.elapsed().as_secs_f64(),
        at(0.5),
        at(0.99),
        written.len()
    );
    assert!(
        written.len() >= 700,
        "only {} of 750 finished",
        written.len()
    );
    assert_eq!(
        c.client.read("data", "steady").await.unwrap(),
        (epochs - 1 - (epochs - 1) % 10).to_le_bytes()
    );

    // The OSDs caught up with every epoch, and forgot the clients that are gone.
    common::eventually("the OSDs reach the last epoch", || async {
        (0..3).all(|osd| metric_sum(&metrics_page(&c, osd), "cairn_osd_map_epoch", "") >= epoch)
    })
    .await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let now = osd_sessions_and_held(&c);
        if now.0 <= baseline.0 && now.1 <= baseline.1.max(64 << 10) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "OSD sessions/held bytes {now:?}, {baseline:?} before the churn"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for (name, data) in &written {
        assert_eq!(&c.client.read("data", name).await.unwrap(), data, "{name}");
    }
    common::stop(c).await;
}
