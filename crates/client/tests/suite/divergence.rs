//! One OSD's device is much smaller than the others'. With its full ratio, a write that would
//! fill it is refused before it reaches any copy, and its PGs stay active. Without it (ratio
//! 1.0), writes commit on some copies of a PG and fail on others: the primary must not reuse
//! the failed write's version, and a replica must not answer Ok to a different write at a
//! version it has used: either would lose an acknowledged write on the copies that skipped
//! it. The PG peers again instead. A metadata server's forced writes pass the full ratio, up
//! to the failsafe ratio.

use crate::common;

use std::future::Future;
use std::time::{Duration, Instant};

use cairn_proto::mon::Request;
use common::cluster_with_devices;

fn object(i: usize) -> Vec<u8> {
    let len = (1 << 20) + i * 4099;
    (0..len).map(|b| (b * 31 + i * 7) as u8).collect()
}

/// Writes `data` as `name`; true when acknowledged.
async fn write(c: &common::Cluster, name: &str, data: &[u8]) -> bool {
    let w = c.client.write_full("data", name, data);
    matches!(
        tokio::time::timeout(Duration::from_secs(8), w).await,
        Ok(Ok(_))
    )
}

/// Large objects until the small device refuses `refusals` of them; the acknowledged ones.
async fn fill(c: &common::Cluster, refusals: usize) -> (Vec<(String, Vec<u8>)>, usize) {
    let mut acked = Vec::new();
    let mut failed = 0;
    for i in 0..90 {
        let (name, data) = (format!("big{i}"), object(i));
        if write(c, &name, &data).await {
            acked.push((name, data));
        } else {
            failed += 1;
            if failed >= refusals {
                break;
            }
        }
    }
    (acked, failed)
}

/// The first `n` names starting with `prefix` whose PG's primary is (`led`) or is not `osd`.
fn names_led(c: &common::Cluster, osd: i32, led: bool, prefix: &str, n: usize) -> Vec<String> {
    (0..)
        .map(|i| format!("{prefix}{i}"))
        .filter(|n| (common::placement_of(c, n).1.first() == Some(&osd)) == led)
        .take(n)
        .collect()
}

/// A name whose PG has `osd` as its primary.
fn name_led_by(c: &common::Cluster, osd: i32, prefix: &str) -> String {
    names_led(c, osd, true, prefix, 1).remove(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_full_ratio_refuses_a_write_before_any_copy_takes_it() {
    let c = cluster_with_devices("fullratio", 8, [40 << 20, 256 << 20, 256 << 20], |_| {}).await;
    let small = c.osds[0].id();
    let name = name_led_by(&c, small, "huge");
    let neighbour = name_led_by(&c, small, "small");
    c.client
        .write_full("data", &neighbour, b"before")
        .await
        .unwrap();
    // More than the small OSD holds under its full ratio, far less than the others hold.
    let refused = c
        .client
        .write_full("data", &name, &vec![7u8; 38 << 20])
        .await;
    assert!(
        matches!(refused, Err(cairn_client::ClientError::NoSpace(ref why)) if why.contains("full ratio")),
        "{refused:?}"
    );
    // No copy took it, and the PGs it leads stay active: writes and reads go on.
    assert!(matches!(
        c.client.read("data", &name).await,
        Err(cairn_client::ClientError::NotFound(_))
    ));
    c.client
        .write_full("data", &neighbour, b"after")
        .await
        .unwrap();
    assert_eq!(c.client.read("data", &neighbour).await.unwrap(), b"after");
}

/// A forced write (a metadata server's, `full_force`) passes the full ratio up to the
/// failsafe ratio: the small OSD, as a primary, refuses plain writes that would pass its full
/// ratio but takes forced ones past it, and refuses a forced one that would pass its failsafe
/// ratio (2 MiB above the full ratio on a 100 MiB device).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forced_write_passes_the_full_ratio_up_to_the_failsafe_ratio() {
    let c = cluster_with_devices("failsafe", 8, [100 << 20, 256 << 20, 256 << 20], |_| {}).await;
    let small = c.osds[0].id();
    let mut names = names_led(&c, small, true, "led", 200).into_iter();
    let mut refused = None;
    for i in 0..120 {
        let name = names.next().unwrap();
        if let Err(e) = c.client.write_full("data", &name, &object(i)).await {
            refused = Some(e);
            break;
        }
    }
    assert!(
        matches!(refused, Some(cairn_client::ClientError::NoSpace(ref why)) if why.contains("full ratio")),
        "{refused:?}"
    );
    let mut forcing = common::connect(c.mon.addr(), 0xf0ce).await.unwrap();
    forcing.full_force = true;
    let mut past_full = false;
    for _ in 0..8 {
        let name = names.next().unwrap();
        forcing
            .write_full("data", &name, &vec![4u8; 256 << 10])
            .await
            .unwrap();
        let plain = c
            .client
            .write_full("data", &names.next().unwrap(), &[1u8; 4096])
            .await;
        if matches!(plain, Err(cairn_client::ClientError::NoSpace(_))) {
            past_full = true;
            break;
        }
    }
    assert!(
        past_full,
        "2 MiB of forced writes never passed the full ratio"
    );
    let journal = names.next().unwrap();
    let small_write = vec![5u8; 64 << 10];
    forcing
        .write_full("data", &journal, &small_write)
        .await
        .unwrap();
    assert_eq!(c.client.read("data", &journal).await.unwrap(), small_write);
    let past = forcing
        .write_full("data", &names.next().unwrap(), &vec![6u8; 4 << 20])
        .await;
    assert!(
        matches!(past, Err(cairn_client::ClientError::NoSpace(ref why)) if why.contains("failsafe ratio")),
        "{past:?}"
    );
}

/// The small OSD only as a replica: past its nearfull ratio its beacon flags it nearfull (a
/// warning), past its full ratio full in the map,
/// and the primaries refuse writes to its PGs before any copy takes them; every PG keeps
/// serving reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_past_its_full_ratio_is_flagged_and_its_pgs_refuse_writes_first() {
    let c = cluster_with_devices("fullflag", 8, [40 << 20, 256 << 20, 256 << 20], |cfg| {
        cfg.beacon_interval_ms = 20
    })
    .await;
    let small = c.osds[0].id();
    let mut acked = Vec::new();
    let mut refused = None;
    let mut warned_first = false;
    for (i, name) in names_led(&c, small, false, "r", 80).into_iter().enumerate() {
        let entry = &c.client.map().unwrap().osds[&small];
        warned_first |= entry.nearfull && !entry.full;
        let data = object(i);
        match c.client.write_full("data", &name, &data).await {
            Ok(_) => acked.push((name, data)),
            Err(e) => {
                refused = Some(e);
                break;
            }
        }
        // Slower than the beacons, as a real device's 5% is to a second of writes.
        tokio::time::sleep(Duration::from_millis(80)).await;
    }
    assert!(
        matches!(refused, Some(cairn_client::ClientError::NoSpace(ref why)) if why.contains("is full")),
        "{refused:?} after {} writes",
        acked.len()
    );
    assert!(c.client.map().unwrap().osds[&small].full);
    assert!(
        warned_first,
        "osd.{small} was never flagged nearfull before full"
    );
    assert!(
        c.osds[1..]
            .iter()
            .all(|o| !c.client.map().unwrap().osds[&o.id()].nearfull),
        "the large devices were flagged nearfull"
    );
    for (name, data) in &acked {
        let got = c.client.read("data", name).await.unwrap();
        assert_eq!(
            crc_fast::crc32_iscsi(&got),
            crc_fast::crc32_iscsi(data),
            "{name}"
        );
    }
    // Removing objects brings it back under its ratio: writes go on.
    for (name, _) in &acked {
        c.client.remove("data", name).await.unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while c.client.map().unwrap().osds[&small].nearfull {
        assert!(
            Instant::now() < deadline,
            "osd.{small} stayed flagged nearfull"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    c.client
        .write_full("data", "again", &object(1))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_that_fails_on_one_copy_loses_no_acknowledged_write() {
    let mut c = cluster_with_devices("diverge", 8, [40 << 20, 256 << 20, 256 << 20], |cfg| {
        cfg.full_ratio = 1.0
    })
    .await;
    let small = c.osds[0].id();
    let t0 = Instant::now();
    // Large objects until the small device refuses some (on it; the others take them).
    let (mut acked, failed) = fill(&c, 4).await;
    assert!(failed > 0, "the small device never filled");
    // Small objects still fit on it: in a PG whose large write failed on the small OSD alone,
    // the next write must not reuse that write's version.
    // Written all at once: those of a PG that is peering again wait out their timeout together.
    let smalls: Vec<(String, Vec<u8>)> = (0..48)
        .map(|i| (format!("small{i}"), vec![i as u8; 4096 + i]))
        .collect();
    let mut pending: Vec<_> = smalls
        .iter()
        .map(|(name, data)| Box::pin(write(&c, name, data)))
        .collect();
    let mut done = vec![None; pending.len()];
    std::future::poll_fn(|cx| {
        for (i, w) in pending.iter_mut().enumerate() {
            if done[i].is_none() {
                if let std::task::Poll::Ready(ok) = w.as_mut().poll(cx) {
                    done[i] = Some(ok);
                }
            }
        }
        match done.iter().all(Option::is_some) {
            true => std::task::Poll::Ready(()),
            false => std::task::Poll::Pending,
        }
    })
    .await;
    drop(pending);
    for (w, ok) in smalls.into_iter().zip(done) {
        if ok == Some(true) {
            acked.push(w);
        }
    }
    eprintln!(
        "{} acknowledged, {failed} refused, in {:?}",
        acked.len(),
        t0.elapsed()
    );
    assert!(
        acked.len() > 20,
        "too few writes went through: {}",
        acked.len()
    );
    // The small OSD goes away; the two others serve every PG.
    let victim = c.osds.remove(0);
    drop(victim);
    let admin = common::mon_client(c.mon.addr(), 93).await;
    admin
        .op(Request::MarkDown { id: small }, 10_000)
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    for (name, data) in &acked {
        let want = crc_fast::crc32_iscsi(data);
        loop {
            match c.client.read("data", name).await {
                Ok(got) if crc_fast::crc32_iscsi(&got) == want => break,
                other => {
                    let seen = other.map(|d| (d.len(), crc_fast::crc32_iscsi(&d)));
                    assert!(
                        Instant::now() < deadline,
                        "acknowledged {name} lost on the surviving copies: {seen:?}"
                    );
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }
}
