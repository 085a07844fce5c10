//! Randomized model check of `QosQueue`: any mix of enqueues, dequeues, reconfigurations and
//! hot swaps between every policy loses no request and serves none twice.

use cairn_qos::config::{
    BatchConfig, BucketKey, CrrnConfig, MClockConfig, OpFilter, PolicyConfig, TbfConfig,
    TbfRuleConfig, WpqConfig,
};
use cairn_qos::{Dequeued, OpKind, QosClass, QosQueue, Request};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::HashSet;

fn random_policy(rng: &mut ChaCha8Rng) -> PolicyConfig {
    match rng.random_range(0..8) {
        0 => PolicyConfig::Fifo,
        1 => PolicyConfig::Wpq(WpqConfig {
            cutoff_priority: rng.random_range(50..255),
        }),
        2 => PolicyConfig::Mclock(MClockConfig {
            per_client: rng.random(),
            limit_break: rng.random(),
            ..MClockConfig::default()
        }),
        3 => PolicyConfig::Crrn(CrrnConfig {
            quantum: rng.random_range(1..5),
        }),
        4 => PolicyConfig::Orr(BatchConfig {
            quantum: rng.random_range(1..9),
            ops: OpFilter::Reads,
            ..BatchConfig::default()
        }),
        5 => PolicyConfig::Trr(BatchConfig::default()),
        6 => PolicyConfig::Tbf(TbfConfig {
            rules: vec![TbfRuleConfig {
                name: "r".into(),
                expr: "client={1,2} | op=read".into(),
                rate_rps: Some(rng.random_range(100.0..5000.0)),
                rate_bytes_per_s: None,
                key: BucketKey::Client,
            }],
            default_rate_rps: Some(2000.0),
            ..TbfConfig::default()
        }),
        _ => PolicyConfig::Mclock(MClockConfig {
            client_policy: Some(Box::new(PolicyConfig::Tbf(TbfConfig {
                default_rate_rps: Some(3000.0),
                ..TbfConfig::default()
            }))),
            recovery_policy: Some(Box::new(PolicyConfig::Orr(BatchConfig::default()))),
            ..MClockConfig::default()
        }),
    }
}

#[test]
fn random_operations_lose_and_duplicate_nothing() {
    for seed in 0..12u64 {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut q = QosQueue::new(random_policy(&mut rng)).unwrap();
        let mut now = 0u64;
        let mut next_id = 0u64;
        let mut queued: HashSet<u64> = HashSet::new();
        let mut served: HashSet<u64> = HashSet::new();
        let mut take = |q: &mut QosQueue, now: u64, queued: &mut HashSet<u64>| -> Option<u64> {
            match q.dequeue(now) {
                Dequeued::Request(d) => {
                    assert!(
                        queued.remove(&d.req.id),
                        "seed {seed}: {} not queued",
                        d.req.id
                    );
                    assert!(served.insert(d.req.id), "seed {seed}: {} twice", d.req.id);
                    None
                }
                Dequeued::NothingBefore(t) => {
                    assert!(t > now, "seed {seed}: NothingBefore({t}) at {now}");
                    Some(t)
                }
                Dequeued::Empty => {
                    assert!(
                        queued.is_empty(),
                        "seed {seed}: empty with {} queued",
                        queued.len()
                    );
                    None
                }
            }
        };
        for _ in 0..3000 {
            now += rng.random_range(0..200_000);
            match rng.random_range(0..10) {
                0..=4 => {
                    next_id += 1;
                    let class = [
                        QosClass::Client,
                        QosClass::Recovery,
                        QosClass::BestEffort,
                        QosClass::Immediate,
                    ][rng.random_range(0..4)];
                    let r = Request {
                        op: if rng.random() {
                            OpKind::Read
                        } else {
                            OpKind::Write
                        },
                        object_id: if rng.random_bool(0.8) {
                            Some(rng.random_range(0..20))
                        } else {
                            None
                        },
                        offset_bytes: rng.random_range(0..1 << 20),
                        target: rng.random_range(0..3),
                        priority: rng.random_range(0..=255),
                        arrival_ns: now,
                        ..Request::new(
                            next_id,
                            class,
                            rng.random_range(0..6),
                            rng.random_range(1_000..3_000_000),
                        )
                    };
                    q.enqueue(r, now).unwrap();
                    queued.insert(next_id);
                }
                5..=8 => {
                    take(&mut q, now, &mut queued);
                }
                _ => {
                    let cfg = random_policy(&mut rng);
                    q.set_policy(cfg, now).unwrap();
                }
            }
            assert_eq!(q.len(), queued.len(), "seed {seed}");
        }
        // Drain: advance time whenever the scheduler asks to wait.
        let mut guard = 0;
        while !queued.is_empty() {
            if let Some(t) = take(&mut q, now, &mut queued) {
                now = t;
            }
            guard += 1;
            assert!(guard < 1_000_000, "seed {seed}: drain did not finish");
        }
        assert!(q.is_empty());
    }
}
