//! A stopped OSD stops: its client ops, replica writes and peer requests end with it, so its
//! store is closed at once and can be mounted again, even while that work was waiting on a peer
//! that never answers (until a stopped OSD's tasks ran on for as long as their timeouts, and a
//! restart in the same process found its store still open).

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use cairn_proto::mon::Request;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_osd_lets_go_of_its_store_while_its_work_waits_on_a_silent_peer() {
    common::logs_from_env();
    // Work that waits does so for long: a PG's activation or a copy's answer, 60 s.
    let mut c = common::cluster_with_devices("stopheld", 16, [256 << 20; 3], |cfg| {
        cfg.op_wait_active_ms = 60_000;
        cfg.repop_timeout_ms = 60_000;
    })
    .await;
    // A fourth OSD that takes connections and never answers on them.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent_addr = silent.local_addr().unwrap();
    let holder = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((conn, _)) = silent.accept().await {
            held.push(conn);
        }
    });
    // It boots as the OSD the test plays (an OSD speaks only for its own id).
    let silent_osd = common::mon_client_as_played_osd(c.mon.addr(), 93).await;
    silent_osd
        .op(
            Request::Boot {
                uuid: "silent-osd".into(),
                host: "silent-host".into(),
                addr: silent_addr.to_string(),
                crush_weight: 0x10000,
                want_id: Some(common::PLAYED_OSD),
            },
            10_000,
        )
        .await
        .unwrap();
    // Writes to every PG: those whose acting set now holds the silent OSD wait on it.
    let writer = Arc::new(common::connect(c.mon.addr(), 94).await.unwrap());
    let mut writes = Vec::new();
    for i in 0..64 {
        let w = writer.clone();
        writes.push(tokio::spawn(async move {
            let _ = w.write_full("data", &format!("obj{i}"), &[7u8; 4096]).await;
        }));
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        writes.iter().any(|w| !w.is_finished()),
        "no write is waiting on the silent OSD"
    );
    for (i, osd) in std::mem::take(&mut c.osds).into_iter().enumerate() {
        let id = osd.id();
        osd.shutdown(Duration::from_secs(5))
            .await
            .unwrap_or_else(|e| panic!("osd.{id}: {e}"));
        // Its store mounts at once: nothing holds it any more.
        let store = common::mount_once(&c.dir.0.join(format!("osd{i}")))
            .await
            .unwrap_or_else(|e| panic!("osd.{id}'s store right after its stop: {e}"));
        drop(store);
    }
    holder.abort();
    for w in writes {
        w.abort();
    }
}
