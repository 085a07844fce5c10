//! Conditional writes (RADOS's assert_version) on a real three-OSD cluster: an exclusive create
//! that exactly one of many racing writers wins, a compare-and-swap that refuses a stale
//! version and applies nothing, and an assertion on an absent object that creates nothing.

use crate::common;

use cairn_client::ClientError;
use common::cluster;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conditional_writes_create_exclusively_and_swap_only_the_version_they_read() {
    let c = cluster("conditional", 8, 64 << 20).await;
    let cl = &c.client;

    // Eight writers race to create one object: one wins, the others see its version.
    let racers = (0..8u8).map(|i| async move {
        cl.write_full_if("data", "lock", &[i; 16], 0)
            .await
            .map(|v| (i, v))
    });
    let outcomes = futures_util::future::join_all(racers).await;
    let winners: Vec<(u8, u64)> = outcomes
        .iter()
        .filter_map(|o| o.as_ref().ok())
        .copied()
        .collect();
    assert_eq!(
        winners.len(),
        1,
        "exactly one exclusive create wins: {outcomes:?}"
    );
    let (winner, created) = winners[0];
    for o in &outcomes {
        if let Err(e) = o {
            assert!(
                matches!(e, ClientError::VersionMismatch { current, .. } if *current == created),
                "a loser sees the winner's version: {e}"
            );
        }
    }
    assert_eq!(cl.read("data", "lock").await.unwrap(), [winner; 16]);
    assert_eq!(cl.stat("data", "lock").await.unwrap().1, created);

    // Compare-and-swap on an attribute: the version read wins once; the stale one is refused
    // and changes nothing.
    let swapped = cl
        .set_xattr_if("data", "lock", "owner", b"a", created)
        .await
        .unwrap();
    assert!(swapped > created);
    let stale = cl
        .set_xattr_if("data", "lock", "owner", b"b", created)
        .await;
    assert!(
        matches!(stale, Err(ClientError::VersionMismatch { current, .. }) if current == swapped),
        "{stale:?}"
    );
    assert_eq!(cl.get_xattr("data", "lock", "owner").await.unwrap(), b"a");
    assert_eq!(cl.stat("data", "lock").await.unwrap().1, swapped);

    // An existing object refuses an exclusive create; a removed one takes it again.
    assert!(matches!(
        cl.write_full_if("data", "lock", b"again", 0).await,
        Err(ClientError::VersionMismatch { .. })
    ));
    cl.remove("data", "lock").await.unwrap();
    cl.write_full_if("data", "lock", b"again", 0).await.unwrap();
    assert_eq!(cl.read("data", "lock").await.unwrap(), b"again");

    // Asserting a version on an object that does not exist is a mismatch at 0, not a create.
    assert!(matches!(
        cl.set_xattr_if("data", "absent", "k", b"v", 7).await,
        Err(ClientError::VersionMismatch { current: 0, .. })
    ));
    assert!(matches!(
        cl.stat("data", "absent").await,
        Err(ClientError::NotFound(_))
    ));
    common::stop(c).await;
}
