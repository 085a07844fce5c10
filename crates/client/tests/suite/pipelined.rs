//! Writes of one PG pipelined: a pool of one PG takes 24 writers at once, on objects of their
//! own and appends to one object they share. Every acknowledged write is read back by
//! checksum, the primary reports writes queued while others of the PG were committing, each
//! append lands once, and offline every copy holds the same objects and the same gap-free log.

use crate::common;

use std::collections::BTreeMap;
use std::sync::Arc;

use cairn_client::Client;

const WRITERS: usize = 24;
const ROUNDS: usize = 12;
const RECORD: usize = 100;

fn data_for(writer: usize, round: usize) -> Vec<u8> {
    let len = 512 + (writer * 997 + round * 131) % 8192;
    (0..len)
        .map(|b| {
            (b as u32)
                .wrapping_mul(2_654_435_761)
                .wrapping_add((writer * 31 + round) as u32) as u8
        })
        .collect()
}

/// One append's record: the writer and round, padded to `RECORD` bytes.
fn record(writer: usize, round: usize) -> Vec<u8> {
    let mut r = format!("w{writer:03}r{round:03}").into_bytes();
    r.resize(RECORD, b'.');
    r
}

async fn writer(c: Arc<Client>, w: usize) -> Vec<(String, u32)> {
    let mut out = Vec::new();
    for round in 0..ROUNDS {
        let name = format!("w{w}-{round}");
        let data = data_for(w, round);
        c.write_full("data", &name, &data).await.unwrap();
        out.push((name, crc_fast::crc32_iscsi(&data)));
        c.append("data", "shared", &record(w, round)).await.unwrap();
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_pgs_writes_pipeline_and_every_copy_agrees() {
    let c = common::cluster_with_devices("pipelined", 1, [1 << 30; 3], |cfg| {
        cfg.metrics_listen = Some("127.0.0.1:0".parse().unwrap());
    })
    .await;
    let client = Arc::new(common::connect(c.mon.addr(), 5).await.unwrap());
    let tasks: Vec<_> = (0..WRITERS)
        .map(|w| tokio::spawn(writer(client.clone(), w)))
        .collect();
    let mut written = BTreeMap::new();
    for t in tasks {
        written.extend(t.await.unwrap());
    }
    for (name, crc) in &written {
        let got = client.read("data", name).await.unwrap();
        assert_eq!(
            crc_fast::crc32_iscsi(&got),
            *crc,
            "{name} read back differs"
        );
    }
    // Each append applied once, whole, at a record boundary.
    let shared = client.read("data", "shared").await.unwrap();
    assert_eq!(shared.len(), WRITERS * ROUNDS * RECORD);
    let mut records: Vec<&[u8]> = shared.chunks(RECORD).collect();
    records.sort();
    let mut expected: Vec<Vec<u8>> = (0..WRITERS)
        .flat_map(|w| (0..ROUNDS).map(move |r| record(w, r)))
        .collect();
    expected.sort();
    assert!(
        records
            .iter()
            .zip(&expected)
            .all(|(a, b)| *a == b.as_slice()),
        "the shared object's appends differ from those acknowledged"
    );
    let (_, acting) = common::placement_of(&c, "shared");
    let page = common::metrics_page(&c, acting[0]);
    let pipelined = common::metric_sum(&page, "cairn_osd_pipelined_writes_total", "");
    assert!(
        pipelined > 0,
        "no write of the PG was queued while another was committing"
    );
    written.insert("shared".into(), crc_fast::crc32_iscsi(&shared));
    drop(client);
    let dir = common::stop(c).await;

    // Offline: the same objects and the same log on every copy, the log without holes.
    let mut heads = Vec::new();
    for i in 0..3 {
        let store = common::mount_offline(&dir.0.join(format!("osd{i}"))).await;
        let colls = store.list_collections().await.unwrap();
        assert_eq!(colls.len(), 1, "osd{i}: one PG");
        let coll = &colls[0];
        let mut names = Vec::new();
        let mut after = None;
        loop {
            let page = store
                .list_objects(coll, after.as_deref(), 1000)
                .await
                .unwrap();
            if page.is_empty() {
                break;
            }
            after = page.last().cloned();
            names.extend(page);
        }
        names.retain(|n| n != cairn_osd::pgmeta::META_OBJECT);
        assert_eq!(names.len(), written.len(), "osd{i}: objects");
        for name in &names {
            let data = store.read(coll, name, 0, u64::MAX).await.unwrap();
            assert_eq!(
                Some(&crc_fast::crc32_iscsi(&data)),
                written.get(name),
                "osd{i}: {name} differs from what was acknowledged"
            );
        }
        let loaded = cairn_osd::pgmeta::load(&store, coll, 10_000).await.unwrap();
        let versions: Vec<u64> = loaded.log.entries().map(|e| e.version.version).collect();
        assert!(
            versions.windows(2).all(|w| w[1] == w[0] + 1),
            "osd{i}: the log has a hole"
        );
        heads.push(loaded.log.head());
        store.umount().await.unwrap();
    }
    assert!(
        heads.iter().all(|h| *h == heads[0]),
        "copies' heads differ: {heads:?}"
    );
}
