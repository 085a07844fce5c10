//! OSDs whose stores keep their superblock and log on a DB/WAL device, with real processes:
//! `cairn up --osd-profile hdd-7200 --osd-db-profile nvme-p3700`, small and large objects
//! written, then `kill -9` of every OSD. Pass: each OSD's `block.db` holds its store's
//! superblock and log (the data device's first bytes stay unused), `cairn up` restarts them,
//! every object reads back by checksum, the OSD counts as a hybrid device (its recovery sleep
//! is `osd_recovery_sleep_hybrid`'s, `cairn tell osd.N metadata`), and an OSD started without the DB device its store was
//! made with is refused with a clear error.

mod common;

use std::io::Read;

use common::{
    admin_client, free_port, payload, runtime, signal, verify_objects, wait_exited, write_objects,
    Cluster,
};

/// Object `i`: 1 MiB for every fourth (written copy-on-write), else a few sectors
/// (deferred: logged on the DB device first).
fn object(i: usize) -> Vec<u8> {
    let len = if i.is_multiple_of(4) {
        1 << 20
    } else {
        512 * (1 + i % 9)
    };
    payload(i, len)
}

#[test]
fn osds_with_their_log_on_a_db_device_survive_kill_9() {
    let cluster = Cluster::new("db-device");
    let mon = format!("127.0.0.1:{}", free_port());
    let settings = [
        "--device-mib",
        "256",
        "--pg-num",
        "8",
        "--osd-profile",
        "hdd-7200",
        "--osd-db-profile",
        "nvme-p3700",
    ];
    let (ok, out) = cluster.up(&mon, &settings);
    assert!(ok, "{out}");
    let pids = cluster.pids();
    assert_eq!(pids.len(), 4, "mon + 3 OSDs");

    let rt = runtime();
    let client = admin_client(&rt, &cluster, &mon);
    write_objects(&rt, &client, 40, object);

    for pid in &pids[1..] {
        signal("-9", *pid);
        wait_exited(*pid);
    }
    let osd0 = cluster.dir.join("osd0");
    let db = std::fs::read(osd0.join("block.db")).unwrap();
    let store = cairn_store::StoreConfig::default();
    assert_eq!(
        db.len() as u64,
        store.block_bytes * (1 + store.wal_blocks_for(256 << 20)),
        "the DB device holds the superblock and the log ring"
    );
    assert!(
        db[..8].starts_with(b"cairnst"),
        "the superblock is on the DB device"
    );
    assert!(
        db[4096..].iter().any(|&b| b != 0),
        "log records on the DB device"
    );
    let mut head = vec![0u8; db.len()];
    std::fs::File::open(osd0.join("block"))
        .unwrap()
        .read_exact(&mut head)
        .unwrap();
    assert!(
        head.iter().all(|&b| b == 0),
        "the data device's bytes below the split stay unused"
    );

    // Started without its DB device, the store is refused at once.
    let keyring = cluster.dir.join("osd0.keyring").display().to_string();
    let data = osd0.display().to_string();
    let (ok, out) = cluster.cairn(&[
        "--keyring",
        &keyring,
        "osd",
        "run",
        "--mon",
        &mon,
        "--data",
        &data,
        "--id",
        "0",
        "--device-mib",
        "256",
    ]);
    assert!(
        !ok && out.contains("start it with its DB device"),
        "an OSD without its DB device is refused: {out}"
    );

    let (ok, out) = cluster.up(&mon, &settings);
    assert!(ok, "{out}");
    verify_objects(&rt, &client, 40, object, "after kill -9 and restart");
    let (ok, metadata) = cluster.cairn(&["tell", "--mon", &mon, "osd.1", "metadata"]);
    assert!(ok, "{metadata}");
    let metadata: serde_json::Value = serde_json::from_str(&metadata).unwrap();
    assert_eq!(metadata["dedicated_db"], true, "{metadata}");
    assert_eq!(metadata["db_profile"], "nvme-p3700", "{metadata}");
    assert_eq!(metadata["rotational"], true, "{metadata}");
    assert_eq!(
        metadata["recovery_device"], "hybrid",
        "an HDD with a DB device takes the hybrid recovery settings: {metadata}"
    );
}
