//! The file device's Linux AIO engine: many operations in flight from one task's thread, every
//! byte back as written, operations abandoned mid-flight harmless, and contexts released when a
//! device closes.

use cairn_blockdev::{AlignedBuf, BlockDevice, FileDevice, FileDeviceOptions, IoEngine};
use rand::{Rng, RngCore, SeedableRng};
use std::path::Path;
use std::sync::Arc;

const DEVICE_BYTES: u64 = 32 << 20;
const SLOT_BYTES: u64 = 256 << 10;

fn open(path: &Path) -> FileDevice {
    let opts = FileDeviceOptions {
        size_bytes: Some(DEVICE_BYTES),
        engine: IoEngine::Aio,
        ..FileDeviceOptions::default()
    };
    let dev = FileDevice::open(path, &opts).unwrap();
    if dev.is_direct() {
        assert_eq!(dev.engine(), IoEngine::Aio, "O_DIRECT files use AIO");
    } else {
        assert_eq!(dev.engine(), IoEngine::Threads, "AIO needs O_DIRECT");
    }
    dev
}

fn random_bytes(rng: &mut impl RngCore, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    rng.fill_bytes(&mut v);
    v
}

/// Writes one slot with one of the four write calls, chosen by `slot`.
async fn write_slot(dev: &FileDevice, slot: u64, data: &[u8]) {
    let at = slot * SLOT_BYTES;
    match slot % 4 {
        0 => dev.write(at, data).await.unwrap(),
        1 => {
            let buf = AlignedBuf::from_parts(&[data], 4096).unwrap();
            dev.write_owned(at, buf).await.unwrap();
        }
        2 => {
            let buf = AlignedBuf::from_parts(&[data], 4096).unwrap();
            dev.write_shared(at, bytes::Bytes::from_owner(buf))
                .await
                .unwrap()
        }
        _ => {
            let buf = AlignedBuf::from_parts(&[data], 4096).unwrap();
            dev.write_owned_durable(at, buf).await.unwrap();
        }
    }
}

async fn read_slot(dev: &FileDevice, slot: u64, len: usize) -> Vec<u8> {
    let at = slot * SLOT_BYTES;
    if slot.is_multiple_of(2) {
        let mut got = vec![0u8; len];
        dev.read(at, &mut got).await.unwrap();
        got
    } else {
        let buf = AlignedBuf::zeroed(len, 4096).unwrap();
        dev.read_owned(at, buf).await.unwrap().as_slice().to_vec()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn concurrent_mixed_operations_return_every_byte_and_survive_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dev");
    let dev = Arc::new(open(&path));
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
    let slots = DEVICE_BYTES / SLOT_BYTES;
    let contents: Vec<Vec<u8>> = (0..slots)
        .map(|_| {
            let blocks = rng.random_range(1..=SLOT_BYTES as usize / 4096);
            random_bytes(&mut rng, blocks * 4096)
        })
        .collect();
    let contents = Arc::new(contents);
    let mut tasks = Vec::new();
    for slot in 0..slots {
        let (dev, contents) = (dev.clone(), contents.clone());
        tasks.push(tokio::spawn(async move {
            write_slot(&dev, slot, &contents[slot as usize]).await;
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    dev.flush().await.unwrap();
    let mut tasks = Vec::new();
    for slot in 0..slots {
        let (dev, contents) = (dev.clone(), contents.clone());
        tasks.push(tokio::spawn(async move {
            let want = &contents[slot as usize];
            read_slot(&dev, slot, want.len()).await == *want
        }));
    }
    for (slot, t) in tasks.into_iter().enumerate() {
        assert!(t.await.unwrap(), "slot {slot} reads back as written");
    }
    drop(dev);
    let dev = open(&path);
    for slot in 0..slots {
        let want = &contents[slot as usize];
        assert_eq!(
            read_slot(&dev, slot, want.len()).await,
            *want,
            "slot {slot}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn operations_abandoned_in_flight_leave_the_rest_intact() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dev");
    let dev = Arc::new(open(&path));
    let keep = vec![0x5au8; SLOT_BYTES as usize];
    dev.write(0, &keep).await.unwrap();
    dev.flush().await.unwrap();
    for round in 0..20u64 {
        let mut tasks = Vec::new();
        for slot in 1..DEVICE_BYTES / SLOT_BYTES {
            let dev = dev.clone();
            tasks.push(tokio::spawn(async move {
                let data = vec![round as u8; SLOT_BYTES as usize];
                write_slot(&dev, slot, &data).await;
                read_slot(&dev, slot, data.len()).await
            }));
        }
        tokio::task::yield_now().await;
        for t in &tasks {
            t.abort();
        }
        for t in tasks {
            if let Ok(back) = t.await {
                assert!(
                    back.iter().all(|&b| b == round as u8),
                    "a finished task saw its write"
                );
            }
        }
    }
    drop(dev);
    let dev = open(&path);
    let mut got = vec![0u8; keep.len()];
    dev.read(0, &mut got).await.unwrap();
    assert_eq!(got, keep, "abandoned operations never touched other slots");
}

fn aio_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .map(|tasks| {
            tasks
                .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
                .filter(|comm| comm.trim() == "cairn-aio")
                .count()
        })
        .unwrap_or(0)
}

#[tokio::test(flavor = "current_thread")]
async fn closing_a_device_releases_its_context_and_completion_thread() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dev");
    // 400 contexts of 257 events each would exceed the kernel's default aio-max-nr (65536)
    // if closing leaked them, and AIO would silently fall back to threads: `open` asserts not.
    for i in 0..400u32 {
        let dev = open(&path);
        let data = vec![i as u8; 4096];
        dev.write(4096 * u64::from(i % 64), &data).await.unwrap();
        drop(dev);
    }
    // Each completion thread destroys its context (an RCU grace period) after its device is
    // gone: give the last ones a moment.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while aio_threads() > 4 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(
        aio_threads() <= 4,
        "{} completion threads left",
        aio_threads()
    );
}
