//! A PG whose newest writes are only on OSDs that are down must not go active on an older
//! copy. Pool of size 2 (min_size 1), one PG on osd X and osd Y: Y stops; X alone takes a
//! write; X stops; Y comes back. Y's copy lacks the write, and Y never saw the epochs in which
//! X served alone (it was down): it learns them from the monitor's map history, finds an
//! interval that may have taken writes with no copy up, and keeps the PG down (no read, no
//! write) until X is back, or until the operator removes X and so accepts the loss.

use crate::common;

use std::time::{Duration, Instant};

use cairn_client::mon::MonClient;
use cairn_proto::mon::Request;
use common::{index_of, osd_config, stop_osd, Cluster};

const TAG: &str = "pgdown";

/// A cluster for `tag` whose client gives up on an operation after 3 s, and a monitor client
/// (`id`) for the operator's requests.
async fn start(tag: &str, id: u64) -> (Cluster, MonClient) {
    start_with(tag, id, |_| {}).await
}

/// As [`start`], with `tweak` applied to every OSD's configuration.
async fn start_with(
    tag: &str,
    id: u64,
    tweak: impl Fn(&mut cairn_osd::OsdConfig),
) -> (Cluster, MonClient) {
    let mut c = common::cluster_with_devices(tag, 4, [256 << 20; 3], tweak).await;
    c.client.op_timeout_ms = 3_000;
    let admin = common::mon_client(c.mon.addr(), id).await;
    (c, admin)
}

/// Creates pool `two`: size 2 (min_size 1), one PG.
async fn create_pool_two(admin: &MonClient) {
    common::create_pool(admin, "two", 2, 1).await;
}

/// Writes `data` to `obj` of pool `two`, retrying while the PG peers (at most 30 s).
async fn write_until_acked(c: &Cluster, data: &[u8]) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while c.client.write_full("two", "obj", data).await.is_err() {
        assert!(Instant::now() < deadline, "write never acknowledged");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Starts osd `osd` again on its store (it was OSD number `i` of the cluster tagged `tag`) and
/// waits until the client's map shows it up.
async fn restart(c: &mut Cluster, tag: &str, i: usize, osd: i32) {
    let cfg = osd_config(tag, i, &c.mon, &c.dir, 256 << 20);
    common::restart_up(c, cfg, osd).await;
}

/// The PG states `osd` reports in its pg dump.
async fn pg_dump(c: &Cluster, osd: i32) -> String {
    let args = ["pg".to_string(), "dump".to_string()];
    c.client.tell(osd, &args).await.unwrap_or_default()
}

/// Up to the point where Y is back alone: returns (X, Y, X's OSD number in the cluster).
async fn only_the_stale_copy_up(
    c: &mut Cluster,
    tag: &str,
    admin: &MonClient,
) -> (i32, i32, usize) {
    create_pool_two(admin).await;
    write_until_acked(c, b"version one").await;
    let up = common::placement_in(c, "two", "obj").1;
    assert_eq!(up.len(), 2, "{up:?}");
    let (x, y) = (up[0], up[1]);
    let (ix, iy) = (index_of(c, x), index_of(c, y));
    // The cluster's OSD number i has id i (they booted in order).
    assert_eq!((ix as i32, iy as i32), (x, y));
    stop_osd(c, admin, y).await;
    write_until_acked(c, b"version two, on x alone").await;
    stop_osd(c, admin, x).await;
    restart(c, tag, iy, y).await;
    (x, y, ix)
}

/// Asserts the PG neither serves the stale copy nor takes a write for 5 s, and that Y says so.
/// Returns once the write it tried can no longer land: the client gave it up after 2 s, but
/// Y holds it while waiting for the PG to go active (`op_wait_active_ms`, 3 s), and would
/// apply it if the PG went active meanwhile (its outcome is unknown to the client, as any
/// timed-out write's).
async fn assert_down(c: &Cluster, y: i32) {
    let read = tokio::time::timeout(Duration::from_secs(5), c.client.read("two", "obj")).await;
    assert!(
        !matches!(read, Ok(Ok(_))),
        "the stale copy was served: {read:?}"
    );
    let sent = Instant::now();
    let write = tokio::time::timeout(
        Duration::from_secs(2),
        c.client.write_full("two", "obj", b"on the stale copy"),
    )
    .await;
    assert!(
        !matches!(write, Ok(Ok(_))),
        "a write went to the stale copy"
    );
    let dump = pg_dump(c, y).await;
    assert!(
        dump.lines().any(|l| l.contains("down")),
        "osd.{y} does not report the pg down:\n{dump}"
    );
    let held = Duration::from_millis(osd_config("any", 0, &c.mon, &c.dir, 0).op_wait_active_ms);
    tokio::time::sleep_until((sent + held + Duration::from_millis(500)).into()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pg_whose_newest_writes_are_on_down_osds_stays_down_until_one_returns() {
    let (mut c, admin) = start(TAG, 97).await;
    let (x, y, ix) = only_the_stale_copy_up(&mut c, TAG, &admin).await;
    assert_down(&c, y).await;
    restart(&mut c, TAG, ix, x).await;
    c.client.op_timeout_ms = 30_000;
    let got = c.client.read("two", "obj").await.unwrap();
    assert_eq!(
        crc_fast::crc32_iscsi(&got),
        crc_fast::crc32_iscsi(b"version two, on x alone"),
        "{:?}",
        String::from_utf8_lossy(&got)
    );
    common::stop(c).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removing_the_down_osds_accepts_the_loss_and_the_pg_serves_again() {
    let tag = format!("{TAG}-rm");
    let (mut c, admin) = start(&tag, 98).await;
    let (x, y, _) = only_the_stale_copy_up(&mut c, &tag, &admin).await;
    assert_down(&c, y).await;
    admin
        .op(Request::RemoveOsd { id: x }, 10_000)
        .await
        .unwrap();
    c.client.op_timeout_ms = 30_000;
    let got = c.client.read("two", "obj").await.unwrap();
    assert_eq!(got, b"version one", "the older copy is all that is left");
    common::stop(c).await;
}

/// An interval whose primary died before it could go active took no writes, so it does not
/// hold the PG down (up_thru). Pool of size 2, one PG on X and Y, both hold "version one". X
/// stops without the monitor knowing; Y stops and is marked down: the map's next interval has
/// X alone, which never activates (it cannot ask for its up_thru). X is marked down, Y comes
/// back alone: Y serves its copy, which is all there is. (Fast failure detection is off: Y
/// would otherwise report X the moment X's address refuses it.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interval_whose_primary_never_went_active_does_not_hold_the_pg_down() {
    let tag = format!("{TAG}-upthru");
    let (mut c, admin) =
        start_with(&tag, 99, |cfg| cfg.fast_fail_on_connection_refused = false).await;
    create_pool_two(&admin).await;
    write_until_acked(&c, b"version one").await;
    let up = common::placement_in(&c, "two", "obj").1;
    let (x, y) = (up[0], up[1]);
    let iy = index_of(&c, y);
    drop(c.osds.remove(index_of(&c, x)));
    stop_osd(&mut c, &admin, y).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let map = c.client.map().unwrap();
        if !map.osds[&y].up {
            assert!(
                map.osds[&x].up,
                "x must still be up in the map for this test"
            );
            assert_eq!(common::placement_in(&c, "two", "obj").1, vec![x]);
            assert!(
                map.osds[&x].up_thru.unwrap() < map.epoch,
                "x cannot have asked for its up_thru in its interval alone"
            );
            break;
        }
        assert!(Instant::now() < deadline, "y never marked down");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    admin.op(Request::MarkDown { id: x }, 10_000).await.unwrap();
    restart(&mut c, &tag, iy, y).await;
    c.client.op_timeout_ms = 30_000;
    let got = c.client.read("two", "obj").await.unwrap();
    assert_eq!(
        crc_fast::crc32_iscsi(&got),
        crc_fast::crc32_iscsi(b"version one")
    );
    let dump = pg_dump(&c, y).await;
    assert!(
        dump.lines().any(|l| l.contains("active")),
        "osd.{y} does not report the pg active:\n{dump}"
    );
    common::stop(c).await;
}

/// `osd lost` instead of removal: X stays in the map (down, declared lost), the PG goes active
/// on Y's older copy, and when X boots again its newer write, which only it held, is not
/// brought back: the PG keeps serving what it served since the declaration.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn declaring_the_down_osd_lost_accepts_the_loss_and_it_may_boot_again() {
    let tag = format!("{TAG}-lost");
    let (mut c, admin) = start(&tag, 96).await;
    let (x, y, ix) = only_the_stale_copy_up(&mut c, &tag, &admin).await;
    assert_down(&c, y).await;
    assert!(
        admin.op(Request::MarkLost { id: y }, 10_000).await.is_err(),
        "an up OSD cannot be declared lost"
    );
    admin.op(Request::MarkLost { id: x }, 10_000).await.unwrap();
    c.client.op_timeout_ms = 30_000;
    let got = c.client.read("two", "obj").await.unwrap();
    assert_eq!(got, b"version one", "the older copy is all that is left");
    let map = c.client.map().unwrap();
    assert!(map.osds[&x].lost_at.is_some() && !map.osds[&x].up);
    restart(&mut c, &tag, ix, x).await;
    c.client
        .write_full("two", "obj2", b"after the return")
        .await
        .unwrap();
    let got = c.client.read("two", "obj").await.unwrap();
    assert_eq!(got, b"version one", "x's lost write is not brought back");
    common::stop(c).await;
}

/// An OSD stopped while the map still shows it up, and marked out at once (as an operator
/// taking a disk away does): the PGs that leave it peer on the other OSDs and ask it, a copy of
/// their previous interval, for its log. Its going down ends none of their intervals, so they
/// must give the question up when the map shows it down, not wait out the 10 s peer timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peering_gives_up_on_a_past_copy_the_map_shows_down() {
    let (mut c, admin) = start("pastdown", 97).await;
    let cfg = osd_config("pastdown", 3, &c.mon, &c.dir, 256 << 20);
    c.osds.push(cairn_osd::OsdDaemon::start(cfg).await.unwrap());
    let fourth = c.osds[3].id();
    let names: Vec<String> = (0..24).map(|i| format!("past-{i}")).collect();
    common::wait_all_clean(&c, 4).await;
    for name in &names {
        c.client
            .write_full("data", name, name.as_bytes())
            .await
            .unwrap();
    }
    let moved: Vec<_> = names
        .iter()
        .filter(|n| common::placement_of(&c, n).1.contains(&fourth))
        .collect();
    assert!(!moved.is_empty(), "no object placed on osd.{fourth}");

    drop(c.osds.remove(index_of(&c, fourth)));
    admin
        .op(Request::MarkOut { id: fourth }, 10_000)
        .await
        .unwrap();
    let started = Instant::now();
    common::wait_all_clean(&c, 4).await;
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(8),
        "PGs took {took:?} to be clean again: peering waited for the stopped OSD's answer"
    );
    for name in &names {
        assert_eq!(c.client.read("data", name).await.unwrap(), name.as_bytes());
    }
    common::stop(c).await;
}

/// An operation on a PG with fewer copies up than min_size waits (the OSDs hold it, as
/// Ceph's do) and, when the client gives up, its error says why from the client's map
/// instead of only that the primary did not answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operation_below_min_size_times_out_saying_why() {
    let mut c = common::cluster("belowmin", 4, 128 << 20).await;
    let admin = common::mon_client(c.mon.addr(), 96).await;
    c.client
        .write_full("data", "obj", b"three copies")
        .await
        .unwrap();
    let up = common::placement_of(&c, "obj").1;
    for osd in &up[1..] {
        stop_osd(&mut c, &admin, *osd).await;
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while up[1..].iter().any(|o| c.client.map().unwrap().osds[o].up) {
        assert!(
            Instant::now() < deadline,
            "the stopped OSDs never went down"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    c.client.op_timeout_ms = 2_000;
    match c.client.write_full("data", "obj", b"one copy").await {
        Err(cairn_client::ClientError::Timeout { last, .. }) => {
            assert!(last.contains("has 1 of min_size 2 copies up"), "{last}")
        }
        other => panic!("a write below min_size must time out: {other:?}"),
    }
}
