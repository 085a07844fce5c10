//! The shipped profiles reproduce their sources' figures within 10%, measured by the virtual-time
//! capacity function, and the real-time emulated device (run on tokio's paused clock) agrees with it.

use cairn_blockdev::capacity::{measure, Pattern, Workload};
use cairn_blockdev::{BlockDevice, EmulatedDevice, IoKind, MemDevice, Profile};
use std::sync::Arc;

const DEVICE_BYTES: u64 = 1 << 40;

fn within(measured: f64, expected: f64, tol: f64) -> bool {
    (measured - expected).abs() <= expected * tol
}

fn random_write(p: &Profile, ops: u64) -> f64 {
    let w = Workload {
        kind: IoKind::Write,
        block_bytes: 4096,
        pattern: Pattern::Random,
        queue_depth: p.expected.random_write_queue_depth,
        ops,
        seed: 7,
    };
    measure(p.model(DEVICE_BYTES), DEVICE_BYTES, w)
        .unwrap()
        .iops
}

fn sequential_write(p: &Profile) -> f64 {
    let w = Workload {
        kind: IoKind::Write,
        block_bytes: 4 << 20,
        pattern: Pattern::Sequential,
        queue_depth: 4,
        ops: 400,
        seed: 7,
    };
    measure(p.model(DEVICE_BYTES), DEVICE_BYTES, w)
        .unwrap()
        .bandwidth_mb_s
}

#[test]
fn profiles_reproduce_their_sources_within_10_percent() {
    for (name, _) in cairn_blockdev::profile::BUILTIN {
        let p = Profile::builtin(name).unwrap();
        let iops = random_write(&p, 20_000);
        let mb_s = sequential_write(&p);
        println!(
            "{name}: random 4k write {iops:.0} IOPS (expected {}), sequential {mb_s:.0} MB/s (expected {})",
            p.expected.random_write_4k_iops, p.expected.sequential_write_mb_s
        );
        assert!(
            within(iops, p.expected.random_write_4k_iops, 0.10),
            "{name}: {iops} IOPS"
        );
        assert!(
            within(mb_s, p.expected.sequential_write_mb_s, 0.10),
            "{name}: {mb_s} MB/s"
        );
    }
}

#[test]
fn hdd_queue_depth_one_is_much_slower_than_with_reordering() {
    let p = Profile::builtin("hdd-7200").unwrap();
    let w = Workload {
        kind: IoKind::Write,
        block_bytes: 4096,
        pattern: Pattern::Random,
        queue_depth: 1,
        ops: 3000,
        seed: 1,
    };
    let qd1 = measure(p.model(DEVICE_BYTES), DEVICE_BYTES, w)
        .unwrap()
        .iops;
    let qd64 = random_write(&p, 5000);
    println!("hdd qd1 {qd1:.0} IOPS, qd64 {qd64:.0} IOPS");
    assert!(qd1 > 50.0 && qd1 < 150.0, "qd1 {qd1}");
    assert!(qd64 > 2.0 * qd1);
}

#[test]
fn bad_workloads_are_rejected() {
    let p = Profile::builtin("optane").unwrap();
    let w = Workload {
        kind: IoKind::Flush,
        block_bytes: 4096,
        pattern: Pattern::Random,
        queue_depth: 1,
        ops: 10,
        seed: 1,
    };
    assert!(measure(p.model(DEVICE_BYTES), DEVICE_BYTES, w).is_err());
    let w = Workload {
        kind: IoKind::Write,
        queue_depth: 0,
        ..w
    };
    assert!(measure(p.model(DEVICE_BYTES), DEVICE_BYTES, w).is_err());
}

#[tokio::test(start_paused = true)]
async fn emulated_device_in_virtual_time_matches_the_capacity_function() {
    let p = Profile::builtin("nvme-p3700").unwrap();
    let size = 1u64 << 30;
    let inner: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(size, 512).unwrap());
    let dev = Arc::new(EmulatedDevice::new(inner, &p, 64).unwrap());
    let start = tokio::time::Instant::now();
    let per_worker = 100u64;
    let mut tasks = Vec::new();
    for w in 0..64u64 {
        let d = dev.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..per_worker {
                let block = (w * 7919 + i * 104_729) % (size / 4096);
                d.write(block * 4096, &[1u8; 4096]).await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let secs = start.elapsed().as_secs_f64();
    let iops = (64 * per_worker) as f64 / secs;
    println!("emulated p3700 in virtual time: {iops:.0} IOPS");
    assert!(
        within(iops, p.expected.random_write_4k_iops, 0.10),
        "{iops}"
    );
    let mut b = vec![0u8; 4096];
    dev.read(0, &mut b).await.unwrap();
    assert!(matches!(
        dev.write(1, &[0; 512]).await,
        Err(cairn_blockdev::BlockDevError::Misaligned { .. })
    ));
}

#[tokio::test(start_paused = true)]
async fn emulated_hdd_sequential_is_fast_and_random_is_slow() {
    let p = Profile::builtin("hdd-7200").unwrap();
    let size = 1u64 << 30;
    let inner: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(size, 512).unwrap());
    let dev = EmulatedDevice::new(inner, &p, 8).unwrap();
    assert!(dev.properties().rotational);
    let t0 = tokio::time::Instant::now();
    for i in 0..64u64 {
        dev.write(i * (1 << 20), &vec![0u8; 1 << 20]).await.unwrap();
    }
    let seq_mb_s = 64.0 * 1.048576 / t0.elapsed().as_secs_f64();
    let t1 = tokio::time::Instant::now();
    for i in 0..50u64 {
        dev.write((i * 7_777_777 % (size / 4096)) * 4096, &[0u8; 4096])
            .await
            .unwrap();
    }
    let rand_iops = 50.0 / t1.elapsed().as_secs_f64();
    println!("emulated hdd: sequential {seq_mb_s:.0} MB/s, random qd1 {rand_iops:.0} IOPS");
    assert!(seq_mb_s > 120.0, "{seq_mb_s}");
    assert!(rand_iops < 200.0, "{rand_iops}");
}

#[tokio::test(start_paused = true)]
async fn emulated_device_enforces_its_queue_limit() {
    let p = Profile::builtin("hdd-7200").unwrap();
    let inner: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(1 << 20, 512).unwrap());
    let dev = Arc::new(EmulatedDevice::new(inner, &p, 1).unwrap());
    let d2 = dev.clone();
    let first = tokio::spawn(async move { d2.write(0, &[1u8; 4096]).await });
    tokio::task::yield_now().await;
    let second = dev.write(8192, &[2u8; 4096]).await;
    assert!(
        matches!(
            second,
            Err(cairn_blockdev::BlockDevError::QueueFull { limit: 1 })
        ),
        "{second:?}"
    );
    first.await.unwrap().unwrap();
    dev.write(8192, &[2u8; 4096]).await.unwrap();
    assert!(EmulatedDevice::new(Arc::new(MemDevice::new(1 << 20, 512).unwrap()), &p, 0).is_err());
}

#[test]
fn buffered_file_device_states_sector_alignment() {
    let dir = tempfile::tempdir().unwrap();
    let opts = cairn_blockdev::FileDeviceOptions {
        size_bytes: Some(1 << 20),
        direct: false,
        ..Default::default()
    };
    let dev = cairn_blockdev::FileDevice::open(&dir.path().join("f"), &opts).unwrap();
    assert!(!dev.is_direct());
    assert_eq!(dev.properties().alignment_bytes, 512);
    let zero_depth = cairn_blockdev::FileDeviceOptions {
        max_queue_depth: 0,
        ..opts
    };
    assert!(cairn_blockdev::FileDevice::open(&dir.path().join("g"), &zero_depth).is_err());
}

/// The offsets of a short run of dependent 4 KiB writes scattered over a device of `size`.
fn scattered_blocks(size: u64, n: u64) -> Vec<u64> {
    (0..n).map(|i| (i * 104_729 + 17) % (size / 4096)).collect()
}

/// Seconds `blocks` take written one after the other, each waiting for the previous.
async fn one_at_a_time(dev: &EmulatedDevice, blocks: &[u64], version: u8) -> f64 {
    let start = std::time::Instant::now();
    for &b in blocks {
        dev.write(b * 4096, &[version; 4096]).await.unwrap();
    }
    start.elapsed().as_secs_f64()
}

/// The driver on its own OS thread never completes an operation before its model does (the
/// same writes in virtual time are the lower bound), and the bytes pass through unchanged.
#[test]
fn the_real_time_driver_takes_at_least_the_modelled_time_and_keeps_the_bytes() {
    let p = Profile::builtin("hdd-7200").unwrap();
    let size = 1u64 << 30;
    let blocks = scattered_blocks(size, 24);
    let paused = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    let modelled = paused.block_on(async {
        let inner: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(size, 512).unwrap());
        let dev = EmulatedDevice::new(inner, &p, 8).unwrap();
        let start = tokio::time::Instant::now();
        for &b in &blocks {
            dev.write(b * 4096, &[1; 4096]).await.unwrap();
        }
        start.elapsed().as_secs_f64()
    });
    let real = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (took, read_back) = real.block_on(async {
        let inner: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(size, 512).unwrap());
        let dev = EmulatedDevice::real_time(inner, &p, 8).unwrap();
        let took = one_at_a_time(&dev, &blocks, 2).await;
        let mut buf = vec![0u8; 4096];
        dev.read(blocks[5] * 4096, &mut buf).await.unwrap();
        (took, buf)
    });
    println!(
        "{} dependent writes: modelled {modelled:.4} s, real time {took:.4} s",
        blocks.len()
    );
    assert!(modelled > 0.01, "the HDD model charges seeks: {modelled}");
    assert!(
        took >= modelled * 0.99,
        "the real-time driver completed early: {took} s against {modelled} s modelled"
    );
    assert_eq!(read_back, vec![2u8; 4096]);
}
