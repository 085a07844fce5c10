//! A replica that cannot take its recovery (its device is too small for what was written while
//! it was away) does not keep its PGs from serving: peering leaves it out, and the map gives
//! the PGs a temporary acting set of the other copies (so no later peering can take the
//! left-out copy for one of an interval it never served), which serves while the copy waits in
//! the up set (Ceph's recovery_toofull / backfill_toofull); every acknowledged object stays
//! readable and writes go on. (A primary too full for its own recovery still keeps its PG
//! peering.)

use crate::common;

use std::time::{Duration, Instant};

use cairn_proto::mon::Request;
use common::{cluster_with_devices, osd_config};

fn object(i: usize) -> Vec<u8> {
    (0..(1 << 20) + i * 613)
        .map(|b| (b * 13 + i) as u8)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_too_full_for_its_recovery_is_left_out_and_its_pgs_serve_from_the_others() {
    const SMALL: u64 = 40 << 20;
    let no_ratio = |cfg: &mut cairn_osd::OsdConfig| cfg.full_ratio = 1.0;
    let mut c = cluster_with_devices("toofull", 8, [SMALL, 512 << 20, 512 << 20], no_ratio).await;
    c.client.op_timeout_ms = 20_000;
    let small = c.osds[0].id();
    // Names whose PGs the small OSD does not lead (with every OSD up).
    let not_led = |prefix: &str, n: usize| -> Vec<String> {
        (0..)
            .map(|i| format!("{prefix}{i}"))
            .filter(|name| common::placement_of(&c, name).1.first() != Some(&small))
            .take(n)
            .collect()
    };
    let (big, after) = (not_led("big", 60), not_led("after", 32));
    drop(c.osds.remove(0));
    let admin = common::mon_client(c.mon.addr(), 96).await;
    admin
        .op(Request::MarkDown { id: small }, 10_000)
        .await
        .unwrap();
    // Written while the small OSD is away: more than its device holds.
    let mut acked = Vec::new();
    for (i, name) in big.into_iter().enumerate() {
        let data = object(i);
        c.client.write_full("data", &name, &data).await.unwrap();
        acked.push((name, data));
    }
    let mut cfg = osd_config("toofull", 0, &c.mon, &c.dir, SMALL);
    no_ratio(&mut cfg);
    c.osds.insert(0, common::restart_osd(cfg).await);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !c.client.map().unwrap().osds[&small].up {
        assert!(
            Instant::now() < deadline,
            "osd.{small} did not come back up"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Their PGs take writes again (each of them has a copy on the small OSD).
    for (i, name) in after.iter().enumerate() {
        c.client
            .write_full("data", name, format!("written after {i}").as_bytes())
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    for (name, data) in &acked {
        let got = c.client.read("data", name).await.unwrap();
        assert_eq!(
            crc_fast::crc32_iscsi(&got),
            crc_fast::crc32_iscsi(data),
            "{name}"
        );
    }
    // Some of them are served by a temporary acting set without the small OSD, which their up
    // set still has: active+remapped.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let map = c.client.map().unwrap();
        let mut mapper = map.placement.mapper();
        let waiting: Vec<String> = map
            .placement
            .pg_temp
            .iter()
            .filter(|(pg, temp)| {
                !temp.contains(&small) && mapper.map_pg(**pg).unwrap().up.contains(&small)
            })
            .map(|(pg, _)| format!("{pg} active+remapped"))
            .collect();
        let mut dump = String::new();
        for osd in &c.osds[1..] {
            let args = ["pg".to_string(), "dump".to_string()];
            dump += &c.client.tell(osd.id(), &args).await.unwrap();
        }
        let seen = dump
            .lines()
            .any(|l| waiting.iter().any(|w| l.starts_with(w.as_str())));
        if seen {
            break;
        }
        assert!(Instant::now() < deadline, "{waiting:?}\n{dump}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
