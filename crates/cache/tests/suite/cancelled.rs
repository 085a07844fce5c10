//! Requests whose futures are dropped midway (a caller's timeout, a closed connection): what
//! they started must not leave metadata claimed durable that never reached the cache device.

use crate::common::*;
use cairn_blockdev::BlockDevice;
use cairn_cache::{CacheDevice, CacheMode, IoClassTable};
use std::sync::Arc;
use std::time::Duration;

const LINES: u64 = 16;
const BOUND: Duration = Duration::from_secs(20);

/// Waits until `rigged` holds an operation, then aborts `task` and lets the device go.
async fn cancel_when_held<T: std::fmt::Debug>(rigged: &Rigged, task: tokio::task::JoinHandle<T>) {
    tokio::time::timeout(BOUND, rigged.blocked.acquire())
        .await
        .expect("the request reaches the held device")
        .unwrap()
        .forget();
    task.abort();
    assert!(
        task.await.unwrap_err().is_cancelled(),
        "the request was still waiting on the held device"
    );
    rigged.held.send_replace(false);
}

/// A client flush cancelled while its metadata pages are written: the next flush writes them
/// again, so dirty data written before it survives a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flush_cancelled_while_its_metadata_is_written_is_made_good_by_the_next() {
    let cache = mem(cache_bytes_for(64, 4096));
    let core = mem(8 << 20);
    let rigged_cache = Arc::new(Rigged::new(cache.clone(), Hold::Writes));
    let dev = Arc::new(
        CacheDevice::create(
            rigged_cache.clone(),
            core.clone(),
            cfg(CacheMode::Wb, 4096),
            IoClassTable::default(),
        )
        .await
        .unwrap(),
    );
    let data = pattern(0, (LINES * 4096) as usize, 7);
    dev.write(0, &data).await.unwrap();

    rigged_cache.held.send_replace(true);
    let flush = {
        let dev = dev.clone();
        tokio::spawn(async move { dev.flush().await })
    };
    cancel_when_held(&rigged_cache, flush).await;

    tokio::time::timeout(BOUND, dev.flush())
        .await
        .expect("the next flush completes")
        .unwrap();
    drop(dev);

    let dev = CacheDevice::attach(cache, core.clone()).await.unwrap();
    assert_eq!(
        dev.stats().dirty_lines,
        LINES,
        "the lines are dirty after the restart"
    );
    assert_eq!(read(&dev, 0, data.len()).await, data);
    assert!(
        read(core.as_ref(), 0, data.len())
            .await
            .iter()
            .all(|&b| b == 0),
        "the data lives in the cache alone, so the entries were what kept it"
    );
}

/// A flush of dirty data dropped while its cleaning write waits on the core: that write still
/// lands, and its round ends only then. The next flush neither writes the same lines beside it
/// (its newer data could be overtaken) nor waits for ever; the core ends with the newer data.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flush_dropped_while_cleaning_ends_its_round_after_its_writes_land() {
    let cache = mem(cache_bytes_for(64, 4096));
    let core = mem(8 << 20);
    let rigged_core = Arc::new(Rigged::new(core.clone(), Hold::Writes));
    let dev = Arc::new(
        CacheDevice::create(
            cache,
            rigged_core.clone(),
            cfg(CacheMode::Wb, 4096),
            IoClassTable::default(),
        )
        .await
        .unwrap(),
    );
    let older = pattern(0, (LINES * 4096) as usize, 1);
    dev.write(0, &older).await.unwrap();

    rigged_core.held.send_replace(true);
    let flush = {
        let dev = dev.clone();
        tokio::spawn(async move { dev.flush_dirty().await })
    };
    tokio::time::timeout(BOUND, rigged_core.blocked.acquire())
        .await
        .expect("the flush's cleaning reaches the held core")
        .unwrap()
        .forget();
    flush.abort();
    assert!(flush.await.unwrap_err().is_cancelled());
    let newer = pattern(0, older.len(), 2);
    tokio::time::timeout(BOUND, dev.write(0, &newer))
        .await
        .expect("writes go on while the dropped round's write waits")
        .unwrap();

    let next = {
        let dev = dev.clone();
        tokio::spawn(async move { dev.flush_dirty().await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        rigged_core.blocked.available_permits(),
        0,
        "no clean of the same lines reached the core beside the dropped round's write"
    );
    assert!(!next.is_finished(), "the next flush waits for that round");
    rigged_core.held.send_replace(false);

    tokio::time::timeout(BOUND, next)
        .await
        .expect("the next flush of dirty data completes once the round's write lands")
        .unwrap()
        .unwrap();
    assert_eq!(dev.stats().dirty_lines, 0);
    assert_eq!(
        read(core.as_ref(), 0, newer.len()).await,
        newer,
        "the core holds the newer data"
    );
    assert_eq!(read(dev.as_ref(), 0, newer.len()).await, newer);
}
