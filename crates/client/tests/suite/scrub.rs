//! Scrub and repair: the primary of each PG compares every copy of its objects and repairs
//! the copies that differ from what most copies hold.
//!
//! Three OSDs, size 3, 4 PGs of about 20 objects each (more than one scrub chunk). A deep scrub
//! of the healthy cluster finds nothing. Then, with osd.X stopped, its store is changed behind
//! the cluster's back: in PGs X leads, one object's xattr is changed and a data block of
//! another flipped on disk; in PGs it does not lead, one object gets new bytes of the same
//! size (checksums intact: only a comparison with the other copies shows it), a data block of
//! another is flipped, one is removed and an object no other copy has is added. A shallow
//! scrub then finds exactly the metadata differences (xattr, missing, extra), a deep scrub all
//! six, and the PGs show `+inconsistent`; a repair makes them consistent (a deep scrub after
//! it finds nothing, the PGs are active+clean), every object reads back as written, the extra
//! one is gone, and offline every copy deep-fscks clean and holds the same bytes.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cairn_client::ClientError;
use cairn_clustermap::PgId;
use cairn_store::Transaction;
use common::{mount_offline, osd_config, placement_of, stop_osd, Cluster};

const TAG: &str = "scrub";
const PG_NUM: u32 = 4;
const OBJECTS: usize = 80;
const DEVICE_BYTES: u64 = 256 << 20;

fn data_for(name: &str) -> Vec<u8> {
    let seed = crc_fast::crc32_iscsi(name.as_bytes());
    let len = 20_000 + (seed % 200_000) as usize;
    (0..len)
        .map(|i| (i as u32).wrapping_mul(2_246_822_519).wrapping_add(seed) as u8)
        .collect()
}

/// The summary counts of every PG's scrub of `kind` and the names reported inconsistent.
async fn scrub_all(c: &Cluster, kind: &str) -> (u64, BTreeSet<String>, u64) {
    let map = c.client.map().unwrap();
    let pool = map
        .placement
        .pools
        .values()
        .find(|p| p.name == "data")
        .unwrap();
    let (mut objects, mut names, mut repaired) = (0, BTreeSet::new(), 0);
    for seed in 0..PG_NUM {
        let pg = PgId {
            pool: pool.id,
            seed,
        };
        let primary = map.placement.mapper().map_pg(pg).unwrap().acting[0];
        let report = c
            .client
            .tell(primary, &["pg".into(), kind.into(), pg.to_string()])
            .await
            .unwrap();
        let summary = report.lines().next().unwrap();
        let numbers: Vec<u64> = summary
            .split([' ', ','])
            .filter_map(|w| w.parse().ok())
            .collect();
        assert_eq!(numbers.len(), 3, "{summary}");
        objects += numbers[0];
        repaired += numbers[2];
        let found: Vec<String> = report
            .lines()
            .skip(1)
            .map(|l| l.trim().split(':').next().unwrap().to_string())
            .collect();
        assert_eq!(found.len() as u64, numbers[1], "{report}");
        names.extend(found);
    }
    (objects, names, repaired)
}

/// Flips one byte of `obj`'s data (collection `coll`) on the device file of the store in
/// `dir`, at a block `store` (that store, mounted) has for it.
async fn flip_byte_of(store: &cairn_store::Store, dir: &Path, coll: &str, obj: &str) {
    let extents = store.extents(coll, obj).await.unwrap();
    common::flip_device_byte(dir, extents[0].1 * store.block_bytes() + 99);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scrub_finds_every_kind_of_difference_and_repair_makes_the_copies_agree() {
    common::logs_from_env();
    let mut c = common::cluster_with_devices(TAG, PG_NUM, [DEVICE_BYTES; 3], |_| {}).await;
    let admin = common::mon_client(c.mon.addr(), 79).await;
    let x = c.osds[0].id();
    let mut written = BTreeMap::new();
    for i in 0..OBJECTS {
        let name = format!("obj-{i:03}");
        let data = data_for(&name);
        c.client.write_full("data", &name, &data).await.unwrap();
        written.insert(name, data);
    }
    let (led, not_led): (Vec<&String>, Vec<&String>) =
        written.keys().partition(|n| placement_of(&c, n).1[0] == x);
    assert!(led.len() >= 2 && not_led.len() >= 4, "{led:?} {not_led:?}");
    let (attr_changed, flipped_on_primary) = (led[0].clone(), led[1].clone());
    let (rewritten, flipped_on_replica, removed) =
        (not_led[0].clone(), not_led[1].clone(), not_led[2].clone());
    let extra = "not-written-by-anyone".to_string();
    for name in [&attr_changed, &rewritten] {
        c.client
            .set_xattr("data", name, "color", b"teal")
            .await
            .unwrap();
    }
    common::wait_all_clean(&c, PG_NUM as usize).await;
    let (objects, found, _) = scrub_all(&c, "deep-scrub").await;
    assert_eq!(objects, OBJECTS as u64);
    assert!(found.is_empty(), "a healthy cluster: {found:?}");

    // Osd.X's store changed behind the cluster's back.
    stop_osd(&mut c, &admin, x).await;
    let dir = c.dir.0.join("osd0");
    let store = mount_offline(&dir).await;
    let colls: BTreeMap<String, String> = written
        .keys()
        .map(|n| {
            (
                n.clone(),
                cairn_osd::pgmeta::collection(placement_of(&c, n).0),
            )
        })
        .collect();
    let coll_of = |name: &str| colls[name].clone();
    let mut t = Transaction::new();
    t.setattr(&coll_of(&attr_changed), &attr_changed, "color", b"rust");
    let same_size = vec![0x5a; written[&rewritten].len()];
    t.write(&coll_of(&rewritten), &rewritten, 0, &same_size);
    t.remove(&coll_of(&removed), &removed);
    // An object no copy should have, in the PG of one X does not lead.
    t.write(&coll_of(&removed), &extra, 0, b"stray bytes");
    store.queue_transaction(&t).await.unwrap();
    store.sync().await.unwrap();
    flip_byte_of(
        &store,
        &dir,
        &coll_of(&flipped_on_primary),
        &flipped_on_primary,
    )
    .await;
    flip_byte_of(
        &store,
        &dir,
        &coll_of(&flipped_on_replica),
        &flipped_on_replica,
    )
    .await;
    drop(store);
    let cfg = osd_config(TAG, 0, &c.mon, &c.dir, DEVICE_BYTES);
    common::restart_up(&mut c, cfg, x).await;
    common::wait_all_clean(&c, PG_NUM as usize).await;

    // A shallow scrub sees what metadata shows; a deep one everything.
    let metadata: BTreeSet<String> = [&attr_changed, &removed, &extra]
        .into_iter()
        .cloned()
        .collect();
    let (objects, found, _) = scrub_all(&c, "scrub").await;
    assert_eq!(
        objects,
        OBJECTS as u64 + 1,
        "the extra object is compared too"
    );
    assert_eq!(found, metadata);
    let mut all = metadata.clone();
    all.extend([
        rewritten.clone(),
        flipped_on_primary.clone(),
        flipped_on_replica.clone(),
    ]);
    let (_, found, repaired) = scrub_all(&c, "deep-scrub").await;
    assert_eq!(found, all);
    assert_eq!(repaired, 0, "a scrub repairs nothing");
    let st = common::pg_states(&c).await;
    assert!(
        st.keys().any(|k| k == "active+clean+inconsistent"),
        "PG states after finding inconsistencies: {st:?}"
    );

    // Repair, then nothing is left to find.
    let (_, found, repaired) = scrub_all(&c, "repair").await;
    assert_eq!(found, all);
    assert_eq!(repaired, all.len() as u64);
    let (_, found, _) = scrub_all(&c, "deep-scrub").await;
    assert!(found.is_empty(), "after repair: {found:?}");
    common::wait_all_clean(&c, PG_NUM as usize).await;
    for (name, data) in &written {
        assert_eq!(&c.client.read("data", name).await.unwrap(), data, "{name}");
    }
    assert_eq!(
        c.client
            .get_xattr("data", &attr_changed, "color")
            .await
            .unwrap(),
        b"teal"
    );
    assert!(matches!(
        c.client.stat("data", &extra).await,
        Err(ClientError::NotFound(_))
    ));

    // Offline: every copy deep-fscks clean and holds exactly the written objects.
    let placements: Vec<(String, String)> =
        written.keys().map(|n| (n.clone(), coll_of(n))).collect();
    let extra_coll = coll_of(&removed);
    let dir = common::stop(c).await;
    let mut crcs: BTreeMap<String, BTreeSet<u32>> = BTreeMap::new();
    for i in 0..3 {
        let store = mount_offline(&dir.0.join(format!("osd{i}"))).await;
        let report = store.fsck(true).await.unwrap();
        assert!(report.is_clean(), "osd{i}: {:?}", report.errors);
        assert!(!store.exists(&extra_coll, &extra).await.unwrap());
        for (name, coll) in &placements {
            let data = store.read(coll, name, 0, u64::MAX).await.unwrap();
            crcs.entry(name.clone())
                .or_default()
                .insert(crc_fast::crc32_iscsi(&data));
        }
    }
    for (name, set) in &crcs {
        let want = crc_fast::crc32_iscsi(&written[name]);
        assert_eq!(set, &BTreeSet::from([want]), "copies of {name}");
    }
}

/// Deep scrubs run by themselves as they fall due: a replica's damaged block is found and its
/// PG reported inconsistent with no command sent (deep-scrub interval 2 s), and the OSDs'
/// metrics count the scrubs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduled_deep_scrubs_find_damage_without_being_asked() {
    let tweak = |cfg: &mut cairn_osd::OsdConfig| {
        cfg.scrub_interval_s = 1;
        cfg.deep_scrub_interval_s = 2;
        cfg.metrics_listen = Some("127.0.0.1:0".parse().unwrap());
    };
    let mut c = common::cluster_with_devices("scrub-due", PG_NUM, [DEVICE_BYTES; 3], tweak).await;
    let admin = common::mon_client(c.mon.addr(), 80).await;
    let x = c.osds[0].id();
    let names: Vec<String> = (0..20).map(|i| format!("o{i}")).collect();
    for n in &names {
        c.client.write_full("data", n, &data_for(n)).await.unwrap();
    }
    let victim = names
        .iter()
        .find(|n| placement_of(&c, n).1[0] != x)
        .unwrap()
        .clone();
    let coll = cairn_osd::pgmeta::collection(placement_of(&c, &victim).0);
    stop_osd(&mut c, &admin, x).await;
    let dir = c.dir.0.join("osd0");
    let store = mount_offline(&dir).await;
    flip_byte_of(&store, &dir, &coll, &victim).await;
    drop(store);
    let mut cfg = osd_config("scrub-due", 0, &c.mon, &c.dir, DEVICE_BYTES);
    tweak(&mut cfg);
    common::restart_up(&mut c, cfg, x).await;

    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let st = common::pg_states(&c).await;
        if st.contains_key("active+clean+inconsistent") {
            break;
        }
        assert!(Instant::now() < deadline, "never found by itself: {st:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let deep_scrubs: u64 = c
        .osds
        .iter()
        .map(|o| common::metrics_page(&c, o.id()))
        .map(|page| common::metric_sum(&page, "cairn_osd_scrubs_total", "deep"))
        .sum();
    assert!(deep_scrubs >= 1, "scrubs counted: {deep_scrubs}");
    // A repair asked for then clears it.
    let (_, found, repaired) = scrub_all(&c, "repair").await;
    assert_eq!(found, BTreeSet::from([victim.clone()]));
    assert_eq!(repaired, 1);
    common::wait_all_clean(&c, PG_NUM as usize).await;
    common::stop(c).await;
}

/// Deep scrubs of one PG while four writers overwrite its objects without pause: the scrub
/// holds still only the chunk it compares (its fence), so the writers go on, and every copy
/// of a fenced object must still match. No scrub may report an inconsistency (one comparing
/// copies while a write reaches them one after the other would), writes to fenced objects
/// wait and then land (counted), and every acknowledged write reads back by crc32c.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deep_scrubs_under_writes_find_nothing_and_fenced_writes_land() {
    let tweak = |cfg: &mut cairn_osd::OsdConfig| {
        cfg.metrics_listen = Some("127.0.0.1:0".parse().unwrap());
    };
    let c = common::cluster_with_devices("scrub-live", 1, [DEVICE_BYTES; 3], tweak).await;
    let names: Vec<String> = (0..64).map(|i| format!("live{i:02}")).collect();
    let acked: Arc<Mutex<BTreeMap<String, u32>>> = Arc::default();
    for n in &names {
        let data = data_for(n);
        c.client.write_full("data", n, &data).await.unwrap();
        acked
            .lock()
            .unwrap()
            .insert(n.clone(), crc_fast::crc32_iscsi(&data));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let mon = c.mon.addr();
    let writers: Vec<_> = (0..4u32)
        .map(|w| {
            let (names, acked, stop) = (names.clone(), acked.clone(), stop.clone());
            tokio::spawn(async move {
                let client = common::connect(mon, 40 + u64::from(w)).await.unwrap();
                let mut round = 0u32;
                while !stop.load(Ordering::Relaxed) {
                    round += 1;
                    // Each writer its own 16 names: two never race on one object, so the
                    // last acknowledged write of a name is the one it holds.
                    let name = &names[(w * 16 + (round * 7) % 16) as usize];
                    let mut data = data_for(name);
                    data.truncate(4096 + (round as usize * 997) % 60_000);
                    data[0] = round as u8;
                    data[1] = w as u8;
                    let crc = crc_fast::crc32_iscsi(&data);
                    match client.write_full("data", name, &data).await {
                        Ok(_) => acked.lock().unwrap().insert(name.clone(), crc),
                        Err(e) => panic!("write of {name} failed: {e}"),
                    };
                }
                round
            })
        })
        .collect();
    let pg = placement_of(&c, &names[0]);
    let primary = pg.1[0];
    let fenced = || {
        common::metric_sum(
            &common::metrics_page(&c, primary),
            "cairn_osd_scrub_fenced_ops_total",
            "",
        )
    };
    let clean = format!("pg {} deep-scrub: 64 objects, 0 inconsistent", pg.0);
    let mut scrubs = 0;
    while scrubs < 4 || (fenced() == 0 && scrubs < 60) {
        let report = deep_scrub(&c, primary, pg.0).await;
        assert!(report.starts_with(&clean), "a scrub under writes: {report}");
        scrubs += 1;
    }
    stop.store(true, Ordering::Relaxed);
    let mut rounds = 0;
    for w in writers {
        rounds += w.await.unwrap();
    }
    assert!(fenced() > 0, "no write met a fence in {scrubs} deep scrubs");
    assert!(rounds > 0);
    let expected = acked.lock().unwrap().clone();
    for (name, crc) in &expected {
        let back = c.client.read("data", name).await.unwrap();
        assert_eq!(crc_fast::crc32_iscsi(&back), *crc, "{name}");
    }
    let report = deep_scrub(&c, primary, pg.0).await;
    assert!(report.starts_with(&clean), "after the writes: {report}");
    common::stop(c).await;
}

/// The report of one deep scrub of `pg`, asked of its primary.
async fn deep_scrub(c: &Cluster, primary: i32, pg: PgId) -> String {
    c.client
        .tell(primary, &["pg".into(), "deep-scrub".into(), pg.to_string()])
        .await
        .unwrap()
}
