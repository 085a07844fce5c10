//! Sharded mClock: reservations and limits hold OSD-wide, within 2% of a single-queue oracle.

use cairn_qos::config::{ClassParams, MClockConfig, PolicyConfig};
use cairn_qos::shard::ShardedMClock;
use cairn_qos::{build_policy, Dequeued, QosClass, QosError, Request, Scheduler};

fn cfg() -> MClockConfig {
    let p = |reservation, weight, limit| ClassParams {
        reservation,
        weight,
        limit,
    };
    MClockConfig {
        profile: "custom".into(),
        // client: 20% reserved, weight 1; recovery: limited to 30%, weight 9; scrub: weight 1.
        custom: Some([p(0.2, 1.0, 0.0), p(0.0, 9.0, 0.3), p(0.0, 1.0, 0.0)]),
        ..MClockConfig::default()
    }
}

/// Drives a scheduler as a single device would for `secs` virtual seconds, keeping each class
/// backlogged; the client's requests all hit one object (one shard), the others are spread.
fn drive(s: &mut dyn Scheduler, secs: u64) -> [u64; 3] {
    const COST: u64 = 100_000;
    let mut id = 0;
    let mut now = 0;
    let mut served = [0u64; 3];
    let add = |s: &mut dyn Scheduler, class: QosClass, id: &mut u64, now: u64| {
        *id += 1;
        let object = if class == QosClass::Client { 7 } else { *id };
        let r = Request {
            object_id: Some(object),
            ..Request::new(*id, class, class as u64, COST)
        };
        s.enqueue(r, now).unwrap();
    };
    for class in [QosClass::Client, QosClass::Recovery, QosClass::BestEffort] {
        for _ in 0..64 {
            add(s, class, &mut id, 0);
        }
    }
    while now < secs * 1_000_000_000 {
        match s.dequeue(now) {
            Dequeued::Request(d) => {
                served[d.req.class.index()] += d.req.cost_ns;
                now += COST;
                add(s, d.req.class, &mut id, now);
            }
            Dequeued::NothingBefore(t) => now = t,
            Dequeued::Empty => panic!("backlogged queue empty"),
        }
    }
    served
}

#[test]
fn sharded_reservation_and_limit_match_single_queue_within_2pct() {
    let mut oracle = build_policy(&PolicyConfig::Mclock(cfg())).unwrap();
    let want = drive(oracle.as_mut(), 10);
    let mut sharded = ShardedMClock::new(cfg(), 8).unwrap();
    let got = drive(&mut sharded, 10);
    for c in 0..3 {
        let rel = (got[c] as f64 - want[c] as f64).abs() / want[c] as f64;
        assert!(
            rel <= 0.02,
            "class {c}: sharded {} vs oracle {}",
            got[c],
            want[c]
        );
    }
    // The OSD-wide numbers, not per-shard ones: client 20% reserved, recovery capped at 30%.
    let total: u64 = got.iter().sum();
    assert!(got[0] as f64 >= 0.196 * total as f64, "{got:?}");
    assert!(got[1] as f64 <= 0.303 * total as f64, "{got:?}");
    assert!(got[1] as f64 >= 0.29 * total as f64, "{got:?}");
    // The client's requests sat in one shard: per-shard division (r/8) would have given 2.5%.
    let client_shard = sharded.shard_of(&Request {
        object_id: Some(7),
        ..Request::new(0, QosClass::Client, 0, 1)
    });
    assert!(sharded.shard_len(client_shard).unwrap() >= 64);
}

#[test]
fn shard_bounds_are_typed_errors() {
    assert!(ShardedMClock::new(cfg(), 0).is_err());
    assert!(ShardedMClock::new(cfg(), 10_000).is_err());
    let s = ShardedMClock::new(cfg(), 2).unwrap();
    assert!(matches!(s.shard_len(5), Err(QosError::NoSuchShard { .. })));
}

#[test]
fn sharded_tbf_rate_holds_for_the_osd_not_per_shard() {
    use cairn_qos::config::{BucketKey, TbfConfig, TbfRuleConfig};
    use cairn_qos::shard::ShardedTbf;
    let cfg = TbfConfig {
        rules: vec![TbfRuleConfig {
            name: "cap".into(),
            expr: "client=1".into(),
            rate_rps: Some(200.0),
            rate_bytes_per_s: None,
            key: BucketKey::Client,
        }],
        ..TbfConfig::default()
    };
    let mut s = ShardedTbf::new(cfg, 4).unwrap();
    // Client 1's requests spread over all shards (by object); client 2 is unlimited.
    let mut id = 0u64;
    for c in [1u64, 2] {
        for _ in 0..64 {
            id += 1;
            let r = Request {
                object_id: Some(id),
                ..Request::new(id, QosClass::Client, c, 100_000)
            };
            s.enqueue(r, 0).unwrap();
        }
    }
    let (mut now, mut served) = (0u64, [0u64; 3]);
    while now < 10_000_000_000 {
        match s.dequeue(now) {
            Dequeued::Request(d) => {
                served[d.req.client_id as usize] += 1;
                now += 100_000;
                id += 1;
                let r = Request {
                    object_id: Some(id),
                    ..Request::new(id, QosClass::Client, d.req.client_id, 100_000)
                };
                s.enqueue(r, now).unwrap();
            }
            Dequeued::NothingBefore(t) => now = t,
            Dequeued::Empty => panic!("empty"),
        }
    }
    let rate = served[1] as f64 / 10.0;
    assert!(
        (rate - 200.0).abs() <= 4.0,
        "client 1: {rate}/s over 4 shards"
    );
    assert!(served[2] > 90_000, "client 2 takes the rest: {}", served[2]);
}
