//! Snapshots of an image whose lock another client holds (a mapped image): asked of the
//! holder through `requests::ask`, taken by it between its writes (the snapshot reads what
//! the image held when it was taken), refused with the holder's reason (a taken name, a
//! missing snapshot), and a request nobody serves withdrawn after its deadline.

use std::sync::Arc;
use std::time::Duration;

use cairn_rbd::requests::{ask, requests_object, Request};
use cairn_rbd::{Image, RbdError};

use crate::common::cluster;
use crate::model::{assert_reads, churn, Rng};

const OBJECT: u64 = 4096;
const SIZE: u64 = 8 * OBJECT;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lock_holder_takes_and_removes_snapshots_asked_of_it() {
    let c = cluster("rbd-requests", 8, 64 << 20).await;
    let holder_client = Arc::new(crate::common::connect(c.mon.addr(), 504).await.unwrap());
    let asker = Arc::new(crate::common::connect(c.mon.addr(), 505).await.unwrap());
    Image::create(&holder_client, "data", "mapped", SIZE, Some(12))
        .await
        .unwrap();
    let image = Arc::new(
        Image::open_exclusive(
            holder_client.clone(),
            "data",
            "mapped",
            Duration::from_secs(5),
        )
        .await
        .unwrap(),
    );
    let mut rng = Rng(0x0e9e_57ed);
    let mut model = vec![0u8; SIZE as usize];
    churn(&image, &mut model, &mut rng, 16).await;
    let within = Duration::from_secs(20);

    // Nobody serves yet: the request is withdrawn after its deadline.
    let unserved = ask(
        &asker,
        "data",
        "mapped",
        &Request::SnapCreate("x".into()),
        Duration::from_secs(1),
    )
    .await;
    assert!(matches!(unserved, Err(RbdError::Busy(_))), "{unserved:?}");
    let (left, _) = asker
        .omap_list("data", &requests_object("mapped"), &[], b"", 16)
        .await
        .unwrap();
    assert!(
        left.is_empty(),
        "the unserved request was withdrawn: {left:?}"
    );

    let server = tokio::spawn(image.clone().serve_requests());
    let done = ask(
        &asker,
        "data",
        "mapped",
        &Request::SnapCreate("s1".into()),
        within,
    )
    .await
    .unwrap();
    assert!(done.contains("created data/mapped@s1"), "{done}");
    let at_s1 = model.clone();
    churn(&image, &mut model, &mut rng, 16).await;
    let snap = Image::open_snapshot(asker.clone(), "data", "mapped", "s1")
        .await
        .unwrap();
    assert_reads(&snap, &at_s1, "the snapshot taken by the holder").await;
    assert_reads(&image, &model, "the image after more writes").await;

    let again = ask(
        &asker,
        "data",
        "mapped",
        &Request::SnapCreate("s1".into()),
        within,
    )
    .await;
    assert!(
        matches!(&again, Err(RbdError::Busy(why)) if why.contains("exists")),
        "a taken name is refused with the holder's reason: {again:?}"
    );
    let missing = ask(
        &asker,
        "data",
        "mapped",
        &Request::SnapRemove("nope".into()),
        within,
    )
    .await;
    assert!(matches!(missing, Err(RbdError::Busy(_))), "{missing:?}");
    let removed = ask(
        &asker,
        "data",
        "mapped",
        &Request::SnapRemove("s1".into()),
        within,
    )
    .await
    .unwrap();
    assert!(removed.contains("removed"), "{removed}");
    assert!(image.snapshots().is_empty());
    let (left, _) = asker
        .omap_list("data", &requests_object("mapped"), &[], b"", 16)
        .await
        .unwrap();
    assert!(
        left.is_empty(),
        "every request and answer was cleared: {left:?}"
    );

    server.abort();
    let _ = server.await;
    image.close().await.unwrap();
    Image::remove(asker.clone(), "data", "mapped")
        .await
        .unwrap();
    assert!(
        matches!(
            asker.stat("data", &requests_object("mapped")).await,
            Err(cairn_client::ClientError::NotFound(_))
        ),
        "removing the image removes its requests object"
    );
    crate::common::stop(c).await;
}
