//! Recovery after activation on a running cluster: an OSD back from a stop rejoins its PGs'
//! acting sets at once, lacking what was written meanwhile. With `norecover` holding the
//! background recovery, its PGs serve `active+degraded+recovery_wait`; a write at an offset of
//! an object it lacks recovers that object on it first (otherwise its copy would be the write's
//! bytes alone), a read of an object its own primary copy lacks is recovered and served
//! whole, writes to objects every copy holds recover nothing; unset, the rest is recovered,
//! every PG is clean, and every copy on the returning OSD equals what was written.

use crate::common;

use std::collections::BTreeMap;

use cairn_clustermap::MapFlag;
use cairn_proto::mon::Request;
use common::{
    cluster_with_devices, df_value, eventually, metric_sum, metrics_page, mount_offline, pg_states,
    placement_of, reads_back, restart_up, stop_osd, wait_all_clean,
};

const DEVICE_BYTES: u64 = 256 << 20;
const PGS: u32 = 8;

fn object(i: usize) -> Vec<u8> {
    (0..5000 + i * 37).map(|b| (b * 11 + i * 5) as u8).collect()
}

/// Client ops that recovered the object they touched first, over every OSD.
fn op_recoveries(c: &common::Cluster) -> u64 {
    c.osds
        .iter()
        .map(|o| {
            metric_sum(
                &metrics_page(c, o.id()),
                "cairn_osd_op_recoveries_total",
                "",
            )
        })
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_returning_copy_serves_at_once_and_an_op_recovers_only_the_object_it_touches() {
    common::logs_from_env();
    let metrics = |cfg: &mut cairn_osd::OsdConfig| {
        cfg.metrics_listen = Some("127.0.0.1:0".parse().unwrap());
    };
    let mut c = cluster_with_devices("after-activation", PGS, [DEVICE_BYTES; 3], metrics).await;
    let admin = common::mon_client(c.mon.addr(), 81).await;
    let mut written: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    for i in 0..20 {
        let name = format!("o{i}");
        c.client
            .write_full("data", &name, &object(i))
            .await
            .unwrap();
        written.insert(name, object(i));
    }
    let flags = |on| Request::SetFlags {
        flags: vec![MapFlag::NoRecover],
        on,
    };
    admin.op(flags(true), 10_000).await.unwrap();
    let x = c.osds[2].id();
    let mut cfg = common::osd_config("after-activation", 2, &c.mon, &c.dir, DEVICE_BYTES);
    metrics(&mut cfg);
    stop_osd(&mut c, &admin, x).await;
    for i in 20..40 {
        let name = format!("o{i}");
        c.client
            .write_full("data", &name, &object(i))
            .await
            .unwrap();
        written.insert(name, object(i));
    }
    restart_up(&mut c, cfg, x).await;
    eventually(
        "every PG serves with osd.X back in its acting set",
        || async {
            let states = pg_states(&c).await;
            states.values().sum::<usize>() == PGS as usize
                && states
                    .keys()
                    .all(|s| s.starts_with("active") && !s.contains("remapped"))
                && states.keys().any(|s| s == "active+degraded+recovery_wait")
        },
    )
    .await;
    assert_eq!(
        df_value(&c, x, "objects").await,
        20,
        "osd.{x} has none of the 20 objects written while it was away"
    );
    let recovered_before = op_recoveries(&c);

    let held_by_x = df_value(&c, x, "objects").await;

    // Objects every copy holds: nothing to recover first.
    for i in [0, 7, 13] {
        let name = format!("o{i}");
        let data = object(100 + i);
        c.client.write_full("data", &name, &data).await.unwrap();
        written.insert(name, data);
    }
    assert_eq!(
        op_recoveries(&c),
        recovered_before,
        "no op recovered anything"
    );

    // A write inside an object osd.X lacks: the object reaches it whole, then the write.
    let patch = vec![0xa5u8; 300];
    c.client.write("data", "o25", 1000, &patch).await.unwrap();
    written.get_mut("o25").unwrap()[1000..1300].copy_from_slice(&patch);
    assert_eq!(op_recoveries(&c), recovered_before + 1);
    assert_eq!(
        df_value(&c, x, "objects").await,
        21,
        "o25 recovered on osd.{x}"
    );

    // A read of an object osd.X lacks where osd.X is the primary: recovered, then served.
    let led_by_x = (20..40)
        .map(|i| format!("o{i}"))
        .find(|name| name != "o25" && placement_of(&c, name).1.first() == Some(&x))
        .expect("osd.X leads a PG of an object written while it was away");
    {
        let name = led_by_x;
        let data = c.client.read("data", &name).await.unwrap();
        assert_eq!(
            crc_fast::crc32_iscsi(&data),
            crc_fast::crc32_iscsi(&written[&name]),
            "{name} read from osd.{x}, which lacked it"
        );
        assert_eq!(op_recoveries(&c), recovered_before + 2);
        assert_eq!(df_value(&c, x, "objects").await, held_by_x + 2);
    }
    // A listing names every object, also those osd.X leads and lacks (recovered first).
    let mut listed = c.client.list_objects("data").await.unwrap();
    listed.sort();
    let mut names: Vec<String> = written.keys().cloned().collect();
    names.sort();
    assert_eq!(listed, names);

    let states = pg_states(&c).await;
    assert!(
        states.keys().any(|s| s == "active+degraded+recovery_wait"),
        "the rest still waits for norecover: {states:?}"
    );

    admin.op(flags(false), 10_000).await.unwrap();
    wait_all_clean(&c, PGS as usize).await;
    assert_eq!(df_value(&c, x, "objects").await, 40);
    let colls: BTreeMap<String, String> = written
        .keys()
        .map(|name| {
            let coll = cairn_osd::pgmeta::collection(placement_of(&c, name).0);
            (name.clone(), coll)
        })
        .collect();
    let dir = common::stop(c).await;
    let store = mount_offline(&dir.0.join(format!("osd{x}"))).await;
    for (name, data) in &written {
        let bytes = store
            .read(&colls[name], name, 0, u64::MAX)
            .await
            .unwrap_or_else(|e| panic!("{name} on osd.{x}: {e}"));
        assert_eq!(
            crc_fast::crc32_iscsi(&bytes),
            crc_fast::crc32_iscsi(data),
            "{name} on osd.{x}"
        );
    }
    store.umount().await.unwrap();
}

/// Whether every PG serves and one's state has `want`.
async fn serving(c: &common::Cluster, want: &str) -> bool {
    let states = pg_states(c).await;
    states.values().sum::<usize>() == PGS as usize
        && states.keys().all(|s| s.starts_with("active"))
        && states.keys().any(|s| s.contains(want))
}

/// The returning OSD's missing set outlives a restart and a change of primary: osd.X comes
/// back lacking what was written while it was away (`norecover` holds its recovery), restarts
/// (its PGs peer again from what its store kept), and then another OSD stops, so that osd.X
/// leads PGs it lacks objects of. Every object still reads back whole through it (a copy that
/// took itself for clean would answer "not found"), and once `norecover` is unset it holds
/// every object as written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_copy_lacks_survives_its_restart_and_a_new_primary_recovers_it() {
    common::logs_from_env();
    let tag = "missing-kept";
    let mut c = cluster_with_devices(tag, PGS, [DEVICE_BYTES; 3], |_| {}).await;
    let admin = common::mon_client(c.mon.addr(), 82).await;
    for i in 0..20 {
        c.client
            .write_full("data", &format!("o{i}"), &object(i))
            .await
            .unwrap();
    }
    let flags = |on| Request::SetFlags {
        flags: vec![MapFlag::NoRecover],
        on,
    };
    admin.op(flags(true), 10_000).await.unwrap();
    let x = c.osds[2].id();
    let cfg = || common::osd_config(tag, 2, &c.mon, &c.dir, DEVICE_BYTES);
    let x_cfg = cfg();
    stop_osd(&mut c, &admin, x).await;
    for i in 20..40 {
        c.client
            .write_full("data", &format!("o{i}"), &object(i))
            .await
            .unwrap();
    }
    restart_up(&mut c, x_cfg.clone(), x).await;
    eventually("osd.X back, lacking objects", || {
        serving(&c, "recovery_wait")
    })
    .await;
    stop_osd(&mut c, &admin, x).await;
    restart_up(&mut c, x_cfg, x).await;
    eventually("osd.X back again, still lacking them", || {
        serving(&c, "recovery_wait")
    })
    .await;
    assert_eq!(
        df_value(&c, x, "objects").await,
        20,
        "nothing recovered yet"
    );

    let p = c.osds.iter().map(|o| o.id()).find(|&o| o != x).unwrap();
    stop_osd(&mut c, &admin, p).await;
    eventually("two copies serve every PG", || async {
        let states = pg_states(&c).await;
        states.values().sum::<usize>() == PGS as usize
            && states.keys().all(|s| s.starts_with("active"))
    })
    .await;
    assert!(
        (20..40).any(|i| placement_of(&c, &format!("o{i}")).1.first() == Some(&x)),
        "osd.X leads a PG of an object it lacks"
    );
    reads_back(&c, "data", 40, object).await;

    admin.op(flags(false), 10_000).await.unwrap();
    eventually("osd.X holds every object", || async {
        df_value(&c, x, "objects").await == 40
    })
    .await;
    let colls: BTreeMap<String, String> = (0..40)
        .map(|i| {
            let name = format!("o{i}");
            let coll = cairn_osd::pgmeta::collection(placement_of(&c, &name).0);
            (name, coll)
        })
        .collect();
    let dir = common::stop(c).await;
    let store = mount_offline(&dir.0.join(format!("osd{x}"))).await;
    for i in 0..40 {
        let name = format!("o{i}");
        let bytes = store
            .read(&colls[&name], &name, 0, u64::MAX)
            .await
            .unwrap_or_else(|e| panic!("{name} on osd.{x}: {e}"));
        assert_eq!(
            crc_fast::crc32_iscsi(&bytes),
            crc_fast::crc32_iscsi(&object(i)),
            "{name} on osd.{x}"
        );
    }
    store.umount().await.unwrap();
}
