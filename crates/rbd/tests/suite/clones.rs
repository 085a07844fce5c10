//! Clones on a real cluster, against a model: a clone reads its parent's snapshot until it
//! writes; a partial write copies the parent's object up first; a discard inside the overlap
//! reads zeros, not the parent; the parent's later writes never show; a snapshot of the
//! clone reads through to the parent where the clone had not written, as far as it did when
//! taken, whatever the clone was shrunk to later, and a rollback to it reads the same; the
//! parent's snapshot
//! and the parent itself are not removed while the clone exists; a flattened clone reads the
//! same without its parent, whose snapshot may then go.

use std::sync::Arc;
use std::time::Duration;

use cairn_rbd::{clone, Image, RbdError};

use crate::common::cluster;
use crate::model::{assert_reads, churn, fill, Rng};

const OBJECT: u64 = 4096;
const SIZE: u64 = 16 * OBJECT;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clone_reads_its_parent_snapshot_until_it_writes_its_own() {
    let c = cluster("rbd-clones", 8, 64 << 20).await;
    let client = Arc::new(crate::common::connect(c.mon.addr(), 503).await.unwrap());
    let lease = Duration::from_secs(5);
    Image::create(&client, "data", "gold", SIZE, Some(12))
        .await
        .unwrap();
    let gold = Image::open_exclusive(client.clone(), "data", "gold", lease)
        .await
        .unwrap();
    let mut rng = Rng(0xc10e);
    let mut parent = vec![0u8; SIZE as usize];
    churn(&gold, &mut parent, &mut rng, 24).await;
    gold.write(0, &fill(SIZE as usize, 1)).await.unwrap();
    parent.copy_from_slice(&fill(SIZE as usize, 1));
    gold.discard(5 * OBJECT, 2 * OBJECT).await.unwrap();
    parent[(5 * OBJECT) as usize..(7 * OBJECT) as usize].fill(0);
    gold.snap_create("base").await.unwrap();
    let base = parent.clone();

    Image::clone_snapshot(client.clone(), ("data", "gold"), "base", ("data", "web"))
        .await
        .unwrap();
    assert!(matches!(
        Image::clone_snapshot(client.clone(), ("data", "gold"), "base", ("data", "web")).await,
        Err(RbdError::Exists(_))
    ));
    assert!(matches!(
        Image::clone_snapshot(client.clone(), ("data", "gold"), "none", ("data", "x")).await,
        Err(RbdError::NotFound(_))
    ));
    assert_eq!(
        clone::children(&client, "data", "gold").await.unwrap(),
        vec![("data/web".to_string(), 1)]
    );
    let web = Image::open_exclusive(client.clone(), "data", "web", lease)
        .await
        .unwrap();
    assert_reads(&web, &base, "a new clone").await;

    // The parent moves on; the clone does not see it.
    churn(&gold, &mut parent, &mut rng, 24).await;
    assert_reads(&web, &base, "the clone after its parent changed").await;

    // Partial writes copy the parent's object up; a discard inside the overlap reads zeros.
    let mut child = base.clone();
    web.write(OBJECT + 100, b"hello").await.unwrap();
    child[(OBJECT + 100) as usize..][..5].copy_from_slice(b"hello");
    web.discard(3 * OBJECT, OBJECT).await.unwrap();
    child[(3 * OBJECT) as usize..(4 * OBJECT) as usize].fill(0);
    web.discard(8 * OBJECT + 10, 20).await.unwrap();
    child[(8 * OBJECT + 10) as usize..][..20].fill(0);
    assert_reads(&web, &child, "the clone after its first writes").await;

    // A snapshot of the clone, then more writes: the snapshot reads through to the parent
    // where the clone had not written.
    web.snap_create("s1").await.unwrap();
    let s1 = child.clone();
    churn(&web, &mut child, &mut rng, 24).await;
    assert_reads(&web, &child, "the clone").await;
    let snap = Image::open_snapshot(client.clone(), "data", "web", "s1")
        .await
        .unwrap();
    assert_reads(&snap, &s1, "the clone's snapshot").await;

    // A shrink cuts the overlap for good: growing back reads zeros past it.
    web.resize(10 * OBJECT).await.unwrap();
    web.resize(SIZE).await.unwrap();
    child[(10 * OBJECT) as usize..].fill(0);
    assert_reads(&web, &child, "the clone grown back").await;
    assert_eq!(web.header().parent.unwrap().overlap, 10 * OBJECT);
    assert_reads(&snap, &s1, "the clone's snapshot after the shrink").await;
    let snap_again = Image::open_snapshot(client.clone(), "data", "web", "s1")
        .await
        .unwrap();
    assert_reads(
        &snap_again,
        &s1,
        "the clone's snapshot opened after the shrink",
    )
    .await;
    // A rollback brings back the overlap the snapshot had: the parent shows through again.
    web.snap_rollback("s1").await.unwrap();
    assert_eq!(web.header().parent.unwrap().overlap, SIZE);
    child.copy_from_slice(&s1);
    assert_reads(&web, &child, "the clone rolled back past its shrink").await;
    web.resize(10 * OBJECT).await.unwrap();
    web.resize(SIZE).await.unwrap();
    child[(10 * OBJECT) as usize..].fill(0);
    assert_reads(&web, &child, "the clone shrunk and grown again").await;

    // The parent's snapshot and the parent stay while the clone lives.
    assert!(matches!(
        gold.snap_remove("base").await,
        Err(RbdError::Busy(_))
    ));
    gold.close().await.unwrap();
    assert!(matches!(
        Image::remove(client.clone(), "data", "gold").await,
        Err(RbdError::Busy(_))
    ));

    // Flatten: refused while the clone has snapshots of its own; then every object still read
    // from the parent is copied in, the link is dropped, and the parent's snapshot may go.
    assert!(matches!(
        web.flatten(|_, _| {}).await,
        Err(RbdError::Busy(_))
    ));
    web.snap_remove("s1").await.unwrap();
    let reported = std::sync::atomic::AtomicU64::new(0);
    web.flatten(|done, total| {
        assert!(done <= total && total == 10, "{done}/{total}");
        reported.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    })
    .await
    .unwrap();
    assert_eq!(
        reported.into_inner(),
        10,
        "one report per object of the overlap"
    );
    assert!(web.header().parent.is_none());
    assert!(clone::children(&client, "data", "gold")
        .await
        .unwrap()
        .is_empty());
    assert_reads(&web, &child, "the flattened clone").await;
    assert!(matches!(
        web.flatten(|_, _| {}).await,
        Err(RbdError::Invalid(_))
    ));
    web.close().await.unwrap();
    let gold = Image::open_exclusive(client.clone(), "data", "gold", lease)
        .await
        .unwrap();
    gold.snap_remove("base").await.unwrap();
    let web = Image::open_read_only(client.clone(), "data", "web")
        .await
        .unwrap();
    assert!(
        web.header().parent.is_none(),
        "the detached header is stored"
    );
    assert_reads(
        &web,
        &child,
        "the flattened clone, its parent's snapshot gone",
    )
    .await;
    Image::remove(client.clone(), "data", "web").await.unwrap();
    assert_reads(&gold, &parent, "the parent").await;
    gold.close().await.unwrap();
    Image::remove(client.clone(), "data", "gold").await.unwrap();
    crate::common::stop(c).await;
}
