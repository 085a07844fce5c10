//! A real cluster in one process on loopback: a monitor and three OSDs on file-backed stores,
//! a pool of size 3. 2000 objects from 0 bytes to 16 MiB are written (16 at a time), read back
//! and verified; then
//! every OSD's store is mounted offline and each acknowledged object must be present, and
//! byte-identical, on all three copies (acknowledged = durable on the whole acting set).

use crate::common;

use std::collections::BTreeMap;
use std::sync::Arc;

use cairn_blockdev::{BlockDevice, FileDevice, FileDeviceOptions};
use cairn_client::ClientError;
use cairn_store::{KvLocation, Store, StoreConfig};

fn data_for(i: usize) -> Vec<u8> {
    let size = match i % 7 {
        0 => 0,
        1 => 1,
        2 => 4095,
        3 => 4096,
        4 => 65_537,
        5 => 300_000,
        _ => 1 << 20,
    };
    let size = match i {
        3 => 4 << 20,
        10 | 500 | 1500 => 16 << 20,
        _ => size,
    };
    (0..size)
        .map(|b| {
            (b as u32)
                .wrapping_mul(2_654_435_761)
                .wrapping_add(i as u32) as u8
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicated_writes_are_durable_on_every_copy() {
    let common::Cluster {
        mon,
        osds,
        client,
        dir: root,
    } = common::cluster("cluster", 16, 1 << 30).await;
    assert!(matches!(
        client.write_full("nope", "x", b"y").await,
        Err(ClientError::NoPool(_))
    ));
    let n = 2000;
    let in_flight = 16;
    let client = Arc::new(client);
    let mut written = BTreeMap::new();
    for lane_start in (0..n).step_by(in_flight) {
        let tasks: Vec<_> = (lane_start..(lane_start + in_flight).min(n))
            .map(|i| {
                let c = client.clone();
                tokio::spawn(async move {
                    let name = format!("obj-{i}");
                    let data = data_for(i);
                    let version = c.write_full("data", &name, &data).await.unwrap();
                    assert!(version > 0);
                    (name, crc_fast::crc32_iscsi(&data))
                })
            })
            .collect();
        for t in tasks {
            let (name, crc) = t.await.unwrap();
            written.insert(name, crc);
        }
    }
    for lane_start in (0..n).step_by(in_flight) {
        let tasks: Vec<_> = (lane_start..(lane_start + in_flight).min(n))
            .map(|i| {
                let c = client.clone();
                tokio::spawn(async move {
                    let name = format!("obj-{i}");
                    let got = c.read("data", &name).await.unwrap();
                    let want = data_for(i);
                    assert!(got == want, "{name}: read back differs");
                    let (size, _) = c.stat("data", &name).await.unwrap();
                    assert_eq!(size as usize, want.len());
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
    }
    client
        .write_full("data", "obj-5", b"overwritten")
        .await
        .unwrap();
    written.insert("obj-5".into(), crc_fast::crc32_iscsi(b"overwritten"));
    client.remove("data", "obj-6").await.unwrap();
    written.remove("obj-6");
    assert!(matches!(
        client.read("data", "obj-6").await,
        Err(ClientError::NotFound(_))
    ));
    drop(client);
    for osd in osds {
        let id = osd.id();
        osd.shutdown(std::time::Duration::from_secs(30))
            .await
            .unwrap_or_else(|e| panic!("osd.{id}: {e}"));
    }
    drop(mon);

    // Offline: every copy of every acknowledged object, straight from each OSD's store.
    let mut copies: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    for i in 0..3 {
        let dir = root.0.join(format!("osd{i}"));
        let dev: Arc<dyn BlockDevice> =
            Arc::new(FileDevice::open(&dir.join("block"), &FileDeviceOptions::default()).unwrap());
        let store = Store::mount(
            dev,
            KvLocation::File(dir.join("kv.redb")),
            StoreConfig::default(),
        )
        .await
        .unwrap();
        for coll in store.list_collections().await.unwrap() {
            for obj in store.list_objects(&coll, None, 1000).await.unwrap() {
                if obj == cairn_osd::pgmeta::META_OBJECT {
                    continue;
                }
                let data = store.read(&coll, &obj, 0, u64::MAX).await.unwrap();
                copies
                    .entry(obj)
                    .or_default()
                    .push(crc_fast::crc32_iscsi(&data));
            }
        }
        store.umount().await.unwrap();
    }
    assert_eq!(
        copies.keys().collect::<Vec<_>>(),
        written.keys().collect::<Vec<_>>()
    );
    for (name, crc) in &written {
        assert_eq!(
            copies[name],
            vec![*crc; 3],
            "{name}: every copy must hold the acknowledged data"
        );
    }
}
