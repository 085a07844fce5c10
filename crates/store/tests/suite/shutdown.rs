//! Dropping a store while a background checkpoint writes in place, on a runtime of one worker
//! (an OSD's default): the checkpoint thread's device I/O completes on that runtime (an
//! emulated device's timers here, AIO completions on files), so the drop must not hold the
//! worker while it waits for the thread.

use crate::common::cfg;

use cairn_blockdev::{CrashSwitch, EmulatedDevice, MemDevice, Profile};
use cairn_store::{CrashableKv, KvLocation, Store, StoreConfig, Transaction};
use std::sync::Arc;
use std::time::Duration;

/// Mounts a store on an emulated HDD with a checkpoint after every group, writes small
/// objects (deferred: the checkpoints write them in place at the HDD's pace) and drops it.
async fn write_then_drop() {
    let mem = Arc::new(MemDevice::new(64 << 20, 512).unwrap());
    let hdd = Profile::load("hdd-7200").unwrap();
    let dev = Arc::new(EmulatedDevice::new(mem, &hdd, 64).unwrap());
    let conf = StoreConfig {
        wal_checkpoint_records: 1,
        ..cfg()
    };
    let kv = CrashableKv::new(Vec::new(), CrashSwitch::new());
    Store::mkfs(
        dev.clone(),
        KvLocation::Backend(Box::new(kv.clone())),
        &conf,
    )
    .await
    .unwrap();
    let store = Store::mount(dev, KvLocation::Backend(Box::new(kv)), conf)
        .await
        .unwrap();
    let mut t = Transaction::new();
    t.create_collection("c");
    store.queue_transaction(&t).await.unwrap();
    for i in 0..16u8 {
        let mut t = Transaction::new();
        t.write("c", &format!("o{i}"), 0, &[i; 3000]);
        store.queue_transaction(&t).await.unwrap();
    }
    drop(store);
}

#[test]
fn a_store_dropped_on_a_one_worker_runtime_during_a_checkpoint_lets_go() {
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        // On the worker itself, as an OSD's tasks drop it.
        let on_worker = rt.block_on(async { tokio::spawn(write_then_drop()).await });
        // And on the thread that blocks on the runtime.
        rt.block_on(write_then_drop());
        done.send(on_worker.is_ok()).unwrap();
    });
    let outcome = finished.recv_timeout(Duration::from_secs(120));
    assert_eq!(
        outcome,
        Ok(true),
        "the store's drop waited for checkpoint I/O that only its own worker could complete"
    );
}
