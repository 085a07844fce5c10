//! Fencing on a real three-OSD cluster: a blocklisted client instance is refused by every
//! OSD (writes and reads) from the first op of the client that fenced it, a new instance of
//! the same client id is not, a lifted fence serves it again; a lease taken from a holder
//! that stopped renewing, or broken, fences that holder, whose lease is then lost; a holder
//! that asked not to be fenced is not.

use std::sync::Arc;
use std::time::Duration;

use crate::common;

use cairn_client::lease::{self, Lease, LeasePlace, LeaseRecord};
use cairn_client::{Client, ClientError};
use common::cluster;

fn fenced(r: &Result<impl std::fmt::Debug, ClientError>, who: &Client) -> bool {
    matches!(r, Err(ClientError::Blocklisted { instance, .. }) if *instance == who.instance())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_instance_is_refused_everywhere_until_its_fence_is_lifted() {
    let c = cluster("fence", 8, 64 << 20).await;
    let mon = c.mon.addr();
    let stale = common::connect(mon, 0xa1).await.unwrap();
    let taker = common::connect(mon, 0xb2).await.unwrap();
    let names: Vec<String> = (0..16).map(|i| format!("obj{i}")).collect();
    for n in &names {
        stale.write_full("data", n, b"old").await.unwrap();
    }
    let epoch = taker.blocklist(stale.instance(), Some(600)).await.unwrap();
    assert!(taker.epoch() >= epoch, "the fencer has the fence's map");
    for n in &names {
        taker.write_full("data", n, b"new").await.unwrap();
    }
    for n in &names {
        let w = stale.write_full("data", n, b"stale").await;
        assert!(fenced(&w, &stale), "{n}: {w:?}");
        let r = stale.read("data", n).await;
        assert!(fenced(&r, &stale), "{n}: {r:?}");
        assert_eq!(taker.read("data", n).await.unwrap(), b"new", "{n}");
    }
    // The fence names one instance, not the client id: the same id connected again is served.
    let again = common::connect(mon, 0xa1).await.unwrap();
    assert_ne!(again.instance(), stale.instance());
    again.write_full("data", "obj0", b"fresh").await.unwrap();
    // Bad requests are refused with the monitor's reason, and change nothing.
    assert!(taker.blocklist(0, Some(60)).await.is_err());
    assert!(
        taker.blocklist(0xdead, None).await.is_err(),
        "no such fence"
    );
    assert!(taker.blocklist(0xdead, Some(0)).await.is_err());
    // Lifted, the instance is served again once its OSDs have the map.
    taker.blocklist(stale.instance(), None).await.unwrap();
    common::eventually("the lifted instance is served", || async {
        stale.write_full("data", "obj1", b"back").await.is_ok()
    })
    .await;
    assert_eq!(taker.read("data", "obj1").await.unwrap(), b"back");
    common::stop(c).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_taken_over_or_broken_fences_its_previous_holder() {
    let c = cluster("fence-lease", 8, 64 << 20).await;
    let mon = c.mon.addr();
    let taker = Arc::new(common::connect(mon, 0xc3).await.unwrap());
    let place = |object: &str| LeasePlace {
        pool: "data".into(),
        object: object.into(),
        attr: "lease".into(),
    };
    let short = Duration::from_millis(600);

    // A holder that stopped renewing (its record written once, never renewed).
    let stalled = common::connect(mon, 0xa1).await.unwrap();
    stalled.write_full("data", "res-a", b"").await.unwrap();
    let record = LeaseRecord::mine(short, stalled.instance());
    stalled
        .set_xattr("data", "res-a", "lease", &record.encode())
        .await
        .unwrap();
    let a = Lease::acquire(
        taker.clone(),
        place("res-a"),
        "res-a",
        short,
        &|_| false,
        true,
    )
    .await
    .unwrap();
    let w = stalled.write_full("data", "res-a", b"late write").await;
    assert!(fenced(&w, &stalled), "{w:?}");
    a.write_data(b"the taker's").await.unwrap();
    assert_eq!(taker.read("data", "res-a").await.unwrap(), b"the taker's");
    let (mine, _) = lease::holder(&taker, &place("res-a")).await.unwrap();
    assert_eq!(mine.unwrap().instance, taker.instance());

    // A live holder whose lease is broken: fenced, its renewals refused, its lease lost.
    let live = Arc::new(common::connect(mon, 0xa2).await.unwrap());
    live.write_full("data", "res-b", b"").await.unwrap();
    let held = Lease::acquire(
        live.clone(),
        place("res-b"),
        "res-b",
        short,
        &|_| false,
        true,
    )
    .await
    .unwrap();
    held.write_data(b"live").await.unwrap();
    let broken = lease::break_lease(&taker, &place("res-b")).await.unwrap();
    assert_eq!(broken.unwrap().instance, live.instance());
    common::eventually("the broken holder's lease is lost", || async {
        held.is_lost()
    })
    .await;
    assert!(held.write_data(b"after").await.is_err());
    assert_eq!(taker.read("data", "res-b").await.unwrap(), b"live");

    // A holder that asked not to be fenced (its client serves other things) is not.
    let shared = common::connect(mon, 0xa3).await.unwrap();
    shared.write_full("data", "res-c", b"").await.unwrap();
    let unfenced = LeaseRecord::mine(short, 0);
    shared
        .set_xattr("data", "res-c", "lease", &unfenced.encode())
        .await
        .unwrap();
    let map_before = taker.epoch();
    let _c = Lease::acquire(
        taker.clone(),
        place("res-c"),
        "res-c",
        short,
        &|_| false,
        false,
    )
    .await
    .unwrap();
    assert_eq!(taker.epoch(), map_before, "no fence, no new epoch");
    shared
        .write_full("data", "res-c", b"still served")
        .await
        .unwrap();
    common::stop(c).await;
}
