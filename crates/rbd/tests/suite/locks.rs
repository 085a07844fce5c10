//! The exclusive lock on a real cluster: a second writer is refused while the first renews;
//! a closed image is taken at once; a holder that died (its handle dropped, nothing
//! released) is taken over after one lease; a holder whose lock was broken writes nothing
//! more; readers and snapshots never take the lock and never write.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn_rbd::{lock, Image, RbdError};

use crate::common::cluster;

const LEASE: Duration = Duration::from_millis(1200);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_writer_at_a_time_and_the_lock_passes_cleanly_or_after_a_lease() {
    let c = cluster("rbd-locks", 8, 64 << 20).await;
    let client = Arc::new(crate::common::connect(c.mon.addr(), 501).await.unwrap());
    Image::create(&client, "data", "disk", 1 << 20, Some(16))
        .await
        .unwrap();

    let a = Image::open_exclusive(client.clone(), "data", "disk", LEASE)
        .await
        .unwrap();
    a.write(0, b"first writer").await.unwrap();
    // A second writer waits one lease, sees the holder renew, and is refused.
    let started = Instant::now();
    let refused = Image::open_exclusive(client.clone(), "data", "disk", LEASE).await;
    assert!(
        matches!(refused, Err(RbdError::Locked(_))),
        "{:?}",
        refused.err()
    );
    assert!(
        started.elapsed() >= LEASE,
        "a contender waits a whole lease first"
    );
    let (holder, _) = lock::holder(&client, "data", "disk").await.unwrap();
    assert_eq!(holder.unwrap().pid, std::process::id());
    // Readers need no lock and write nothing.
    let reader = Image::open_read_only(client.clone(), "data", "disk")
        .await
        .unwrap();
    assert_eq!(reader.read(0, 12).await.unwrap(), b"first writer");
    assert!(matches!(
        reader.write(0, b"x").await,
        Err(RbdError::ReadOnly(_))
    ));
    assert!(matches!(
        reader.discard(0, 1).await,
        Err(RbdError::ReadOnly(_))
    ));
    assert!(matches!(
        reader.snap_create("s").await,
        Err(RbdError::ReadOnly(_))
    ));

    // Closed: the next writer takes it at once.
    a.close().await.unwrap();
    assert!(
        a.write(0, b"late").await.is_err(),
        "a closed handle writes nothing"
    );
    let started = Instant::now();
    let b = Image::open_exclusive(client.clone(), "data", "disk", LEASE)
        .await
        .unwrap();
    assert!(started.elapsed() < LEASE, "a released lock is free at once");
    b.write(0, b"second").await.unwrap();

    // A holder that dies without releasing: taken over after its lease.
    drop(b);
    let c2 = Image::open_exclusive(client.clone(), "data", "disk", LEASE)
        .await
        .unwrap();
    assert_eq!(c2.read(0, 12).await.unwrap(), b"secondwriter");

    // A broken lock: its holder notices at its next renewal and writes nothing more.
    let broken = lock::break_lock(&client, "data", "disk").await.unwrap();
    assert!(broken.is_some());
    let d = Image::open_exclusive(client.clone(), "data", "disk", LEASE)
        .await
        .unwrap();
    d.write(0, b"the new one").await.unwrap();
    let deadline = Instant::now() + 10 * LEASE;
    loop {
        match c2.write(0, b"stale!!").await {
            Err(RbdError::LockLost(_)) => break,
            other => assert!(
                Instant::now() < deadline,
                "the old holder still writes: {other:?}"
            ),
        }
        tokio::time::sleep(LEASE / 6).await;
    }
    // Its writes before it noticed raced the new holder's; from here on the image is the
    // new holder's alone.
    d.write(0, b"the new one").await.unwrap();
    tokio::time::sleep(LEASE).await;
    assert_eq!(d.read(0, 11).await.unwrap(), b"the new one");
    d.close().await.unwrap();
    assert!(lock::holder(&client, "data", "disk")
        .await
        .unwrap()
        .0
        .is_none());

    assert!(matches!(
        Image::open_exclusive(client.clone(), "data", "disk", Duration::from_millis(1)).await,
        Err(RbdError::Invalid(_))
    ));
    assert!(matches!(
        Image::open_exclusive(client.clone(), "data", "absent", LEASE).await,
        Err(RbdError::NotFound(_))
    ));
    crate::common::stop(c).await;
}
