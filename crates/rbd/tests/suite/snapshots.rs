//! Snapshots on a real cluster, against a model: random writes and discards (several in
//! flight) between three snapshots, each snapshot then read whole and compared with what
//! the image held when it was taken; a shrink that the snapshots survive; removal of the
//! oldest and of a middle snapshot handing their clones down; a rollback; and at the end no
//! clone object left behind.

use std::sync::Arc;
use std::time::Duration;

use cairn_rbd::{Image, RbdError};

use crate::common::cluster;
use crate::model::{assert_reads, churn, Rng};

const OBJECT: u64 = 4096;
const SIZE: u64 = 24 * OBJECT;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_snapshot_reads_what_the_image_held_when_it_was_taken() {
    let c = cluster("rbd-snaps", 8, 64 << 20).await;
    let client = Arc::new(crate::common::connect(c.mon.addr(), 502).await.unwrap());
    Image::create(&client, "data", "vm", SIZE, Some(12))
        .await
        .unwrap();
    let image = Image::open_exclusive(client.clone(), "data", "vm", Duration::from_secs(5))
        .await
        .unwrap();
    let mut rng = Rng(0x5eed_2026_1202);
    let mut model = vec![0u8; SIZE as usize];
    let mut taken: Vec<(String, Vec<u8>)> = Vec::new();
    for name in ["one", "two", "three"] {
        churn(&image, &mut model, &mut rng, 24).await;
        image.snap_create(name).await.unwrap();
        taken.push((name.to_string(), model.clone()));
    }
    churn(&image, &mut model, &mut rng, 24).await;
    assert_reads(&image, &model, "the image").await;
    let check_all = |taken: Vec<(String, Vec<u8>)>| {
        let client = client.clone();
        async move {
            for (name, bytes) in taken {
                let snap = Image::open_snapshot(client.clone(), "data", "vm", &name)
                    .await
                    .unwrap();
                assert_reads(&snap, &bytes, &format!("snapshot {name}")).await;
                assert!(matches!(
                    snap.write(0, b"x").await,
                    Err(RbdError::ReadOnly(_))
                ));
            }
        }
    };
    check_all(taken.clone()).await;
    assert!(matches!(
        image.snap_create("two").await,
        Err(RbdError::Exists(_))
    ));
    assert!(matches!(
        image.snap_create("bad/name").await,
        Err(RbdError::Invalid(_))
    ));
    assert!(matches!(
        Image::open_snapshot(client.clone(), "data", "vm", "nine").await,
        Err(RbdError::NotFound(_))
    ));

    // A shrink: the snapshots keep the bytes past the new end; growing back reads zeros.
    image.resize(SIZE - 5 * OBJECT - 100).await.unwrap();
    model.truncate((SIZE - 5 * OBJECT - 100) as usize);
    image.resize(SIZE).await.unwrap();
    model.resize(SIZE as usize, 0);
    assert_reads(&image, &model, "the image after a shrink and a grow").await;
    churn(&image, &mut model, &mut rng, 12).await;
    check_all(taken.clone()).await;

    // Removing the oldest and then a middle snapshot: the others read as before.
    image.snap_remove("one").await.unwrap();
    taken.remove(0);
    check_all(taken.clone()).await;
    churn(&image, &mut model, &mut rng, 12).await;
    image.snap_create("four").await.unwrap();
    taken.push(("four".into(), model.clone()));
    image.snap_remove("three").await.unwrap();
    taken.retain(|(n, _)| n != "three");
    check_all(taken.clone()).await;

    // A rollback: the image reads as the snapshot did; the snapshots are unchanged.
    churn(&image, &mut model, &mut rng, 12).await;
    image.snap_rollback("two").await.unwrap();
    let two = taken.iter().find(|(n, _)| n == "two").unwrap().1.clone();
    assert_reads(&image, &two, "the image rolled back to two").await;
    check_all(taken.clone()).await;
    let mut model = two;
    churn(&image, &mut model, &mut rng, 12).await;
    assert_reads(&image, &model, "the image written after its rollback").await;
    check_all(taken.clone()).await;

    // An image with snapshots is not removed; without them, no clone is left.
    image.close().await.unwrap();
    assert!(matches!(
        Image::remove(client.clone(), "data", "vm").await,
        Err(RbdError::Busy(_))
    ));
    let image = Image::open_exclusive(client.clone(), "data", "vm", Duration::from_secs(5))
        .await
        .unwrap();
    for (name, _) in &taken {
        image.snap_remove(name).await.unwrap();
    }
    assert_reads(&image, &model, "the image once its snapshots are gone").await;
    image.close().await.unwrap();
    let objects = client.list_objects("data").await.unwrap();
    assert!(
        !objects.iter().any(|o| o.contains('@')),
        "clones left behind: {objects:?}"
    );
    Image::remove(client.clone(), "data", "vm").await.unwrap();
    let objects = client.list_objects("data").await.unwrap();
    assert!(
        !objects.iter().any(|o| o.starts_with("rbd_data.vm")),
        "{objects:?}"
    );
    crate::common::stop(c).await;
}
