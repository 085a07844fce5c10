//! Read repair (invariant 7): a primary whose copy of an object fails its checksum serves the
//! read from a good copy and replaces its own; when no copy is good the client gets a typed
//! "damaged" error at once, never bad bytes, and a new write makes the object whole again.
//!
//! Three OSDs, size 3. Objects whose primary is P are written (one larger than the recovery
//! chunk, so the repair pulls it in pieces; one with xattrs and omap entries); with P stopped,
//! one byte of a data block of each is flipped in P's device file; one more object is damaged
//! on every copy, each OSD stopped in turn. Reads of the objects then return exactly what was
//! written (one of them by 8 reads at once, which repair it once), the object damaged
//! everywhere fails with `ClientError::Damaged`, and P's metrics count the repairs. At the end
//! every copy deep-fscks clean and holds the written bytes.

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use cairn_client::mon::MonClient;
use cairn_client::ClientError;
use cairn_clustermap::PgId;
use common::{mount_offline, osd_config, placement_of, stop_osd, Cluster};

/// Which of the cluster's first OSDs (its `osdN` directory and configuration) each id is: the
/// order of `Cluster::osds` changes as OSDs restart.
type Slots = BTreeMap<i32, usize>;

const TAG: &str = "repair";
const CHUNK: u64 = 1 << 20;
const DEVICE_BYTES: u64 = 256 << 20;
const PG_NUM: usize = 8;

fn data_for(name: &str, len: usize) -> Vec<u8> {
    let seed = crc_fast::crc32_iscsi(name.as_bytes());
    (0..len)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) as u8)
        .collect()
}

fn tweak(cfg: &mut cairn_osd::OsdConfig) {
    cfg.recovery_chunk_bytes = Some(CHUNK);
    cfg.metrics_listen = Some("127.0.0.1:0".parse().unwrap());
}

/// `count` object names (with prefix `prefix`) whose primary is `osd`.
fn led_by(c: &Cluster, osd: i32, prefix: &str, count: usize) -> Vec<String> {
    (0..)
        .map(|i| format!("{prefix}-{i}"))
        .filter(|n| placement_of(c, n).1[0] == osd)
        .take(count)
        .collect()
}

/// Flips one byte in the middle of `obj`'s data on the stopped OSD whose store is in `dir`;
/// where in the object.
async fn damage(dir: &Path, pg: PgId, obj: &str) -> u64 {
    let store = mount_offline(dir).await;
    let extents = store
        .extents(&cairn_osd::pgmeta::collection(pg), obj)
        .await
        .unwrap();
    let (index, block) = extents[extents.len() / 2];
    let (at, logical) = (
        block * store.block_bytes() + 777,
        index * store.block_bytes() + 777,
    );
    drop(store);
    common::flip_device_byte(dir, at);
    logical
}

/// Stops `osd`, damages `objects` in its store, starts it again and waits until the client's
/// map has it up and its PGs are active+clean; where each object was damaged.
async fn with_damage(
    c: &mut Cluster,
    slots: &Slots,
    admin: &MonClient,
    osd: i32,
    objects: &[&str],
) -> Vec<u64> {
    let i = slots[&osd];
    stop_osd(c, admin, osd).await;
    let dir = c.dir.0.join(format!("osd{i}"));
    let mut offsets = Vec::new();
    for obj in objects {
        offsets.push(damage(&dir, placement_of(c, obj).0, obj).await);
    }
    let mut cfg = osd_config(TAG, i, &c.mon, &c.dir, DEVICE_BYTES);
    tweak(&mut cfg);
    common::restart_up(c, cfg, osd).await;
    common::wait_all_clean(c, PG_NUM).await;
    offsets
}

/// `name`'s data, read through the client.
async fn read_back(c: &Cluster, name: &str) -> Vec<u8> {
    c.client.read("data", name).await.unwrap()
}

/// The read repairs `osd` counted, as (repaired, failed), from its metrics page.
fn repairs(c: &Cluster, osd: i32) -> (u64, u64) {
    let page = common::metrics_page(c, osd);
    let count = |result: &str| {
        let label = format!("result=\"{result}\"}} ");
        page.lines()
            .filter(|l| l.starts_with("cairn_osd_read_repairs_total{"))
            .find_map(|l| l.split(&label).nth(1)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("no read repair counter in {page}"))
    };
    (count("repaired"), count("failed"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_primary_copy_is_repaired_from_a_good_one_and_never_served() {
    common::logs_from_env();
    let mut c = common::cluster_with_devices(TAG, PG_NUM as u32, [DEVICE_BYTES; 3], tweak).await;
    c.client.op_timeout_ms = 20_000;
    let admin = common::mon_client(c.mon.addr(), 78).await;
    let slots: Slots = c
        .osds
        .iter()
        .enumerate()
        .map(|(i, o)| (o.id(), i))
        .collect();
    let p = c.osds[0].id();
    let names = led_by(&c, p, "obj", 5);
    let everywhere = led_by(&c, p, "lost", 1).remove(0);
    let sizes = [
        4 * CHUNK as usize + 12_345,
        256 << 10,
        100_000,
        64 << 10,
        128 << 10,
    ];
    let mut written = BTreeMap::new();
    for (name, len) in names.iter().zip(sizes).chain([(&everywhere, 96 << 10)]) {
        let data = data_for(name, len);
        c.client.write_full("data", name, &data).await.unwrap();
        written.insert(name.clone(), data);
    }
    let with_meta = &names[2];
    c.client
        .set_xattr("data", with_meta, "color", b"teal")
        .await
        .unwrap();
    let omap: Vec<(Vec<u8>, Vec<u8>)> = (0..50)
        .map(|i| (format!("k{i:03}").into_bytes(), vec![i as u8; 40]))
        .collect();
    c.client.omap_set("data", with_meta, &omap).await.unwrap();
    common::wait_all_clean(&c, PG_NUM).await;

    // P's copies of objects 0, 1, 2 and 4 are damaged, and the last object's on every copy.
    let patched = &names[4];
    let damaged_on_p: Vec<&str> = [0, 1, 2, 4]
        .iter()
        .map(|&i| names[i].as_str())
        .chain([everywhere.as_str()])
        .collect();
    let offsets = with_damage(&mut c, &slots, &admin, p, &damaged_on_p).await;
    for replica in placement_of(&c, &everywhere).1.into_iter().skip(1) {
        with_damage(&mut c, &slots, &admin, replica, &[everywhere.as_str()]).await;
    }
    assert_eq!(repairs(&c, p), (0, 0));

    // The damaged copies are repaired from good ones: the reads return what was written.
    assert_eq!(read_back(&c, &names[0]).await, written[&names[0]]);
    let eight = futures_util::future::join_all((0..8).map(|_| read_back(&c, &names[1]))).await;
    assert!(eight.iter().all(|d| *d == written[&names[1]]));
    assert_eq!(read_back(&c, with_meta).await, written[with_meta]);
    assert_eq!(
        c.client
            .get_xattr("data", with_meta, "color")
            .await
            .unwrap(),
        b"teal"
    );
    let (entries, more) = c
        .client
        .omap_list("data", with_meta, b"", b"", 1000)
        .await
        .unwrap();
    assert_eq!((entries, more), (omap.clone(), false));
    assert_eq!(read_back(&c, &names[3]).await, written[&names[3]]);
    assert_eq!(repairs(&c, p), (3, 0), "one repair per damaged object");
    // The client's reads waited on those pulls: they ran as client work, not as recovery.
    let page = common::metrics_page(&c, p);
    let blocking = common::metric_sum(&page, "cairn_osd_recovery_blocking_steps_total", "");
    assert!(blocking >= 3, "{blocking} blocking recovery steps on P");

    // A write into the damaged block fails its commit on P and commits on the replicas: the
    // PG peers again, P takes the object from them, and the client's resend is answered.
    let patch = b"written over the damaged byte";
    c.client
        .write("data", patched, offsets[3], patch)
        .await
        .unwrap();
    let mut want = written[patched].clone();
    want[offsets[3] as usize..][..patch.len()].copy_from_slice(patch);
    assert_eq!(read_back(&c, patched).await, want);
    written.insert(patched.clone(), want);
    assert_eq!(repairs(&c, p), (3, 0), "repaired by peering, not by a read");

    // No good copy: a typed error, at once, and no bytes.
    let started = Instant::now();
    match c.client.read("data", &everywhere).await {
        Err(ClientError::Damaged(why)) => {
            assert!(why.contains("checksum mismatch"), "{why}");
            for replica in placement_of(&c, &everywhere).1.into_iter().skip(1) {
                assert!(why.contains(&format!("osd.{replica}")), "{why}");
            }
        }
        other => panic!("a read of an object damaged everywhere gave {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(10), "not retried");
    assert_eq!(repairs(&c, p), (3, 1));
    // A new write makes it whole on every copy.
    let fresh = data_for("fresh", 80_000);
    c.client
        .write_full("data", &everywhere, &fresh)
        .await
        .unwrap();
    assert_eq!(read_back(&c, &everywhere).await, fresh);
    written.insert(everywhere.clone(), fresh);

    // Every copy: deep fsck clean, every object's bytes as written.
    let placements: Vec<(String, PgId, Vec<i32>)> = written
        .keys()
        .map(|n| {
            let (pg, up) = placement_of(&c, n);
            (n.clone(), pg, up)
        })
        .collect();
    let dirs: BTreeMap<i32, std::path::PathBuf> = slots
        .iter()
        .map(|(&osd, i)| (osd, c.dir.0.join(format!("osd{i}"))))
        .collect();
    let dir = common::stop(c).await;
    for (osd, path) in &dirs {
        let store = mount_offline(path).await;
        let report = store.fsck(true).await.unwrap();
        assert!(report.is_clean(), "osd.{osd}: {:?}", report.errors);
        for (name, pg, up) in &placements {
            if !up.contains(osd) {
                continue;
            }
            let coll = cairn_osd::pgmeta::collection(*pg);
            let data = store.read(&coll, name, 0, u64::MAX).await.unwrap();
            assert_eq!(
                crc_fast::crc32_iscsi(&data),
                crc_fast::crc32_iscsi(&written[name]),
                "osd.{osd}'s copy of {name}"
            );
        }
    }
    drop(dir);
}
