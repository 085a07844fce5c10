//! Every path into a running OSD's scheduler describes its work in full (three OSDs, size 3,
//! read back from `tell osd.N sched history`):
//! - client writes and reads, on the primary and as replica writes, carry op kind, the
//!   object's hash, offset, length, the client's class and priority 63, and a read of an object
//!   the store has cached its physical offset;
//! - ops sent inside `cairn_client::in_background` run in the best-effort class at priority
//!   5, on the primary and as replica writes;
//! - scrub reads carry the object and Ceph's scrub priority 5 in the best-effort class;
//! - recovery of a returning OSD carries its objects at the recovery priority, including one
//!   set while the OSD runs (`config set osd_recovery_op_priority`);
//! - a TBF rule on one object's hash slows that object's reads on a running OSD, and no other
//!   object's.

use crate::common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use cairn_osd::history::ReleasedRequest;
use cairn_osd::work::{object_id, Purpose};
use cairn_qos::{OpKind, PolicyConfig, QosClass};
use common::{cluster_with_devices, placement_of};

const DEVICE_BYTES: u64 = 256 << 20;

async fn tell(c: &common::Cluster, osd: i32, words: &[&str]) -> Result<String, String> {
    let args: Vec<String> = words.iter().map(|w| w.to_string()).collect();
    c.client.tell(osd, &args).await.map_err(|e| e.to_string())
}

/// What `osd`'s scheduler released most recently.
async fn history(c: &common::Cluster, osd: i32) -> Vec<ReleasedRequest> {
    let text = tell(c, osd, &["sched", "history"]).await.unwrap();
    serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("history of osd.{osd}: {e}"))
}

fn data_for(i: usize, len: usize) -> Vec<u8> {
    (0..len).map(|j| (j as u32 * 31 + i as u32) as u8).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_replica_scrub_and_recovery_work_reach_the_scheduler_in_full() {
    common::logs_from_env();
    let mut c = cluster_with_devices("sched-detail", 8, [DEVICE_BYTES; 3], |cfg| {
        cfg.policy = PolicyConfig::by_name("wpq").unwrap();
        // Every returning copy is filled in the background, at the recovery priority.
        cfg.remap_min_objects = 1;
    })
    .await;
    for osd in 0..3 {
        tell(&c, osd, &["sched", "history", "clear"]).await.unwrap();
    }

    // Client ops: a whole write, a write at an offset, a read of one range.
    c.client
        .write_full("data", "w", &data_for(0, 64 << 10))
        .await
        .unwrap();
    c.client
        .write("data", "w", 8192, &data_for(1, 4096))
        .await
        .unwrap();
    // Twice: the first read brings the object's extents into the store's cache, so the second
    // is queued knowing where its bytes lie.
    for _ in 0..2 {
        let got = c.client.read_range("data", "w", 16384, 4096).await.unwrap();
        assert_eq!(&got[..], &data_for(0, 64 << 10)[16384..20480]);
    }
    let (pg, up) = placement_of(&c, "w");
    let w = object_id("w");
    let on_primary = history(&c, up[0]).await;
    let of_w: Vec<&ReleasedRequest> = on_primary
        .iter()
        .filter(|r| r.object_id == Some(w))
        .collect();
    let at_8192 = of_w
        .iter()
        .find(|r| r.op == OpKind::Write && r.offset_bytes == 8192)
        .expect("the write at 8192 on the primary");
    assert_eq!(
        (
            at_8192.purpose,
            at_8192.class,
            at_8192.priority,
            at_8192.length_bytes
        ),
        (Purpose::ClientOp, QosClass::Client, 63, 4096)
    );
    let read = of_w
        .iter()
        .rev()
        .find(|r| r.op == OpKind::Read)
        .expect("the reads on the primary");
    assert_eq!((read.offset_bytes, read.length_bytes), (16384, 4096));
    assert!(
        read.physical_offset_bytes.is_some(),
        "a read of a cached object knows where it lies: {read:?}"
    );
    for replica in &up[1..] {
        let h = history(&c, *replica).await;
        assert!(
            h.iter().any(|r| r.object_id == Some(w)
                && r.op == OpKind::Write
                && r.offset_bytes == 8192
                && r.priority == 63),
            "osd.{replica} (replica of {pg}) scheduled the write at 8192: {h:?}"
        );
    }

    // Background ops (a service's housekeeping): best effort on the primary and the replicas,
    // at osd_background_op_priority; a read in the same scope too, and nothing outside it.
    cairn_client::in_background(async {
        c.client
            .write_full("data", "bg", &data_for(2, 8192))
            .await
            .unwrap();
        assert_eq!(
            c.client.read("data", "bg").await.unwrap(),
            data_for(2, 8192)
        );
    })
    .await;
    assert!(!cairn_client::in_background_scope());
    let (_, bg_up) = placement_of(&c, "bg");
    let bg = object_id("bg");
    for (n, osd) in bg_up.iter().enumerate() {
        let background: Vec<ReleasedRequest> = history(&c, *osd)
            .await
            .into_iter()
            .filter(|r| r.object_id == Some(bg) && r.purpose == Purpose::BackgroundOp)
            .collect();
        assert!(
            background
                .iter()
                .any(|r| r.op == OpKind::Write && r.length_bytes == 8192),
            "osd.{osd} scheduled the background write: {background:?}"
        );
        if n == 0 {
            assert!(background.iter().any(|r| r.op == OpKind::Read));
        }
        assert!(background
            .iter()
            .all(|r| r.class == QosClass::BestEffort && r.priority == 5));
    }

    // Scrub: every object it digests is one best-effort read at Ceph's scrub priority.
    tell(&c, up[0], &["pg", "deep-scrub", &pg.to_string()])
        .await
        .unwrap();
    let scrubbed: Vec<ReleasedRequest> = history(&c, up[0])
        .await
        .into_iter()
        .filter(|r| r.purpose == Purpose::Scrub)
        .collect();
    assert!(
        scrubbed
            .iter()
            .any(|r| r.object_id == Some(w) && r.op == OpKind::Read && r.length_bytes == 64 << 10),
        "the deep scrub read w whole: {scrubbed:?}"
    );
    assert!(scrubbed
        .iter()
        .all(|r| r.class == QosClass::BestEffort && r.priority == 5));

    // Recovery: an OSD misses writes, comes back, and is filled at the priority set live.
    let admin = common::mon_client(c.mon.addr(), 93).await;
    let victim = 2;
    let cfg = common::osd_config("sched-detail", 2, &c.mon, &c.dir, DEVICE_BYTES);
    let cfg = cairn_osd::OsdConfig {
        policy: PolicyConfig::by_name("wpq").unwrap(),
        remap_min_objects: 1,
        ..cfg
    };
    common::stop_osd(&mut c, &admin, victim).await;
    let missed: Vec<String> = (0..24).map(|i| format!("m{i}")).collect();
    for (i, name) in missed.iter().enumerate() {
        c.client
            .write_full("data", name, &data_for(i, 32 << 10))
            .await
            .unwrap();
    }
    for osd in 0..2 {
        tell(&c, osd, &["config", "set", "osd_recovery_op_priority", "7"])
            .await
            .unwrap();
    }
    common::restart_up(&mut c, cfg, victim).await;
    common::wait_all_clean(&c, 8).await;
    for (i, name) in missed.iter().enumerate() {
        let got = c.client.read("data", name).await.unwrap();
        assert_eq!(got, data_for(i, 32 << 10), "{name}");
    }
    let wanted: BTreeSet<u64> = missed.iter().map(|n| object_id(n)).collect();
    let mut recovered = BTreeSet::new();
    for osd in 0..3 {
        for r in history(&c, osd).await {
            if r.purpose != Purpose::Recovery {
                continue;
            }
            assert_eq!(r.class, QosClass::Recovery, "{r:?}");
            let expected = if osd == victim { 3 } else { 7 };
            assert_eq!(r.priority, expected, "osd.{osd}: {r:?}");
            if let Some(o) = r.object_id.filter(|o| wanted.contains(o)) {
                if r.op != OpKind::Other {
                    recovered.insert(o);
                }
            }
        }
    }
    assert_eq!(
        recovered, wanted,
        "every missed object moved as recovery reads and writes naming it"
    );
    common::stop(c).await;
}

/// Reads `name` whole `n` times; how long they took.
async fn read_many(c: &common::Cluster, name: &str, n: usize) -> Duration {
    let t = Instant::now();
    for _ in 0..n {
        c.client.read("data", name).await.unwrap();
    }
    t.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tbf_rule_on_one_object_slows_that_object_alone() {
    common::logs_from_env();
    let rule_for = |name: &str| {
        format!(
            "rules = [{{ name = \"slow\", expr = \"object={} & op=read\", rate_rps = 10.0 }}]",
            object_id(name)
        )
    };
    let c = cluster_with_devices("sched-tbf", 8, [DEVICE_BYTES; 3], |_| {}).await;
    let primary = placement_of(&c, "slow").1[0];
    // Another object led by the same OSD.
    let fast = (0..)
        .map(|i| format!("fast{i}"))
        .find(|n| placement_of(&c, n).1[0] == primary)
        .unwrap();
    for name in ["slow", fast.as_str()] {
        c.client
            .write_full("data", name, &data_for(3, 4096))
            .await
            .unwrap();
    }
    let toml = format!("name = \"tbf\"\n{}", rule_for("slow"));
    let answer = tell(
        &c,
        primary,
        &["config", "set", "osd_op_queue_config", &toml],
    )
    .await;
    assert!(answer.is_ok(), "{answer:?}");
    tell(&c, primary, &["sched", "history", "clear"])
        .await
        .unwrap();
    // At 10 reads a second (a bucket holds about one second of them), 40 reads need at least
    // about three seconds, whatever the machine.
    let slow = read_many(&c, "slow", 40).await;
    assert!(
        slow >= Duration::from_millis(2500),
        "40 reads of the limited object took {slow:?}"
    );
    let h = history(&c, primary).await;
    let waited = |name: &str| -> Vec<u64> {
        h.iter()
            .filter(|r| r.object_id == Some(object_id(name)))
            .map(|r| r.waited_us)
            .collect()
    };
    let slow_waits = waited("slow");
    assert_eq!(slow_waits.len(), 40, "{h:?}");
    assert!(
        slow_waits.iter().filter(|&&w| w >= 50_000).count() >= 20,
        "reads of the limited object waited in the scheduler: {slow_waits:?}"
    );

    // The same rule does not touch another object: its reads are released at once.
    tell(&c, primary, &["sched", "history", "clear"])
        .await
        .unwrap();
    read_many(&c, &fast, 40).await;
    let h = history(&c, primary).await;
    let fast_waits: Vec<u64> = h
        .iter()
        .filter(|r| r.object_id == Some(object_id(&fast)))
        .map(|r| r.waited_us)
        .collect();
    assert_eq!(fast_waits.len(), 40, "{h:?}");
    assert!(
        fast_waits.iter().filter(|&&w| w >= 50_000).count() <= 4,
        "reads of another object were held: {fast_waits:?}"
    );
    common::stop(c).await;
}

/// In `h` (one OSD's history), pairs of a client op and a background recovery request of the
/// same shard where the one queued later was released sooner: (client ops that overtook
/// recovery, recovery that overtook client ops).
fn overtakes(h: &[ReleasedRequest]) -> (usize, usize) {
    let of = |p: Purpose| h.iter().filter(move |r| r.purpose == p);
    let (mut by_client, mut by_recovery) = (0, 0);
    for c in of(Purpose::ClientOp) {
        for r in of(Purpose::Recovery).filter(|r| r.shard == c.shard) {
            if r.queued_us < c.queued_us && r.seq > c.seq {
                by_client += 1;
            }
            if c.queued_us < r.queued_us && c.seq > r.seq {
                by_recovery += 1;
            }
        }
    }
    (by_client, by_recovery)
}

/// osd.2 of `c` misses `n` objects of 32 KiB while down and comes back under `policy` with
/// one shard and one request at a time in its store, so that its scheduler holds a backlog;
/// a client writes meanwhile (its replica writes queue there beside the pushes). osd.2's
/// scheduler history once every PG is clean.
async fn recovery_under_client_writes(
    c: &mut common::Cluster,
    policy: &str,
    round: usize,
) -> Vec<ReleasedRequest> {
    let admin = common::mon_client(c.mon.addr(), 94).await;
    let victim = 2;
    common::stop_osd(c, &admin, victim).await;
    for i in 0..96 {
        let name = format!("r{round}-m{i}");
        c.client
            .write_full("data", &name, &data_for(i, 32 << 10))
            .await
            .unwrap();
    }
    let cfg = common::osd_config("sched-order", 2, &c.mon, &c.dir, DEVICE_BYTES);
    let cfg = cairn_osd::OsdConfig {
        policy: PolicyConfig::by_name(policy).unwrap(),
        op_shards: 1,
        max_inflight_ops: 1,
        remap_min_objects: 1,
        ..cfg
    };
    common::restart_up(c, cfg, victim).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut i = 0;
    while !common::all_clean(c, 8).await {
        assert!(Instant::now() < deadline, "recovery never ended");
        let name = format!("r{round}-c{}", i % 16);
        c.client
            .write_full("data", &name, &data_for(i, 4096))
            .await
            .unwrap();
        i += 1;
    }
    history(c, victim).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wpq_releases_client_ops_ahead_of_a_recovery_backlog_and_fifo_in_arrival_order() {
    common::logs_from_env();
    let mut c = cluster_with_devices("sched-order", 8, [DEVICE_BYTES; 3], |cfg| {
        cfg.remap_min_objects = 1;
    })
    .await;
    for osd in 0..2 {
        for (key, value) in [("osd_op_queue", "wpq"), ("osd_recovery_max_active", "16")] {
            tell(&c, osd, &["config", "set", key, value]).await.unwrap();
        }
    }
    let h = recovery_under_client_writes(&mut c, "wpq", 0).await;
    let count = |p: Purpose| h.iter().filter(|r| r.purpose == p).count();
    assert!(
        count(Purpose::Recovery) > 0 && count(Purpose::ClientOp) > 0,
        "{h:?}"
    );
    let (by_client, by_recovery) = overtakes(&h);
    assert!(
        by_client > 0 && by_client > by_recovery,
        "WPQ: client ops overtook recovery {by_client} times, recovery overtook them {by_recovery} times"
    );

    // FIFO releases one shard's requests in the order they came, whatever their class.
    for osd in 0..2 {
        tell(&c, osd, &["config", "set", "osd_op_queue", "fifo"])
            .await
            .unwrap();
    }
    let h = recovery_under_client_writes(&mut c, "fifo", 1).await;
    assert!(h.iter().any(|r| r.purpose == Purpose::Recovery), "{h:?}");
    assert_eq!(overtakes(&h), (0, 0), "FIFO reordered requests");
    common::stop(c).await;
}
