//! Layered policies: a policy per class inside mClock (seed 001's "two policies at the same
//! time"), with refused requests falling back to FIFO.

use crate::common;

use cairn_qos::config::{
    BatchConfig, BucketKey, MClockConfig, OpFilter, PolicyConfig, TbfConfig, TbfRuleConfig,
};
use cairn_qos::sim::verdict::class_window_cost;
use cairn_qos::sim::{run, SourceSpec};
use cairn_qos::{OpKind, QosClass};
use common::*;

fn layered() -> PolicyConfig {
    let PolicyConfig::Mclock(base) = custom(p(0.3, 1.0, 0.0), p(0.2, 1.0, 0.5), p(0.0, 1.0, 0.0))
    else {
        unreachable!()
    };
    PolicyConfig::Mclock(MClockConfig {
        // Inside the client class: client 1 is capped at 500 req/s by TBF.
        client_policy: Some(Box::new(PolicyConfig::Tbf(TbfConfig {
            rules: vec![TbfRuleConfig {
                name: "cap1".into(),
                expr: "client=1".into(),
                rate_rps: Some(500.0),
                rate_bytes_per_s: None,
                key: BucketKey::Client,
            }],
            ..TbfConfig::default()
        }))),
        // Inside the recovery class: reads batched per object by ORR; writes are refused.
        recovery_policy: Some(Box::new(PolicyConfig::Orr(BatchConfig {
            quantum: 16,
            ops: OpFilter::Reads,
            ..BatchConfig::default()
        }))),
        ..base
    })
}

#[test]
fn tbf_inside_mclock_client_class_and_orr_inside_recovery() {
    let sources = vec![
        SourceSpec::closed("capped", QosClass::Client, 1, 16, 4096),
        SourceSpec::closed("free", QosClass::Client, 2, 16, 4096),
        SourceSpec {
            op: OpKind::Read,
            objects: 8,
            ..SourceSpec::closed("rec-reads", QosClass::Recovery, 3, 16, 4096)
        },
        SourceSpec::closed("rec-writes", QosClass::Recovery, 4, 16, 4096),
    ];
    let r = run(&scenario(layered(), sources, 6.0, 10_000.0)).unwrap();
    // TBF inside the class holds client 1 to 500/s while client 2 takes the rest of the class.
    let capped = &r.sources[0].window_ops;
    assert!(
        capped[1..].iter().all(|&o| (495..=505).contains(&o)),
        "{capped:?}"
    );
    assert!(r.sources[1].window_ops[3] > 1000);
    // mClock still gives the classes their reservations.
    let client = class_window_cost(&r, QosClass::Client);
    let recovery = class_window_cost(&r, QosClass::Recovery);
    assert!(
        client[1..].iter().all(|&c| c as f64 >= 0.98 * 0.3e9),
        "{client:?}"
    );
    assert!(
        recovery[1..].iter().all(|&c| c as f64 >= 0.98 * 0.2e9),
        "{recovery:?}"
    );
    // Recovery writes were refused by ORR and served by the class's FIFO fallback: still under
    // the recovery class's mClock tags, so its 50% limit holds for reads and writes together.
    assert!(r.sources[3].completed > 100);
    let cost = r.sources[3].dispatches[0].cost_ns;
    assert!(
        recovery
            .iter()
            .all(|&c| c as f64 <= 0.5e9 * 1.01 + cost as f64),
        "{recovery:?}"
    );
    assert!(
        recovery[1..].iter().all(|&c| c as f64 >= 0.49e9),
        "{recovery:?}"
    );
    let issued: u64 = r.sources.iter().map(|s| s.issued).sum();
    let done: u64 = r.sources.iter().map(|s| s.completed).sum();
    assert_eq!(issued - done, r.left_queued as u64);
}

#[test]
fn limit_break_never_breaks_a_sub_policy_throttle() {
    let PolicyConfig::Mclock(mut cfg) = layered() else {
        unreachable!()
    };
    cfg.limit_break = true;
    let sources = vec![SourceSpec::closed("capped", QosClass::Client, 1, 16, 4096)];
    let r = run(&scenario(PolicyConfig::Mclock(cfg), sources, 3.0, 10_000.0)).unwrap();
    // Alone on the device with limit-break on: mClock would let it run, TBF still caps it.
    let ops = &r.sources[0].window_ops;
    assert!(ops.iter().all(|&o| (495..=505).contains(&o)), "{ops:?}");
}
