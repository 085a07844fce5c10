//! Hot swap under load: nothing lost, each client's order kept; fallback and queue limits.

use crate::common;

use cairn_qos::config::{
    BatchConfig, CrrnConfig, MClockConfig, PolicyConfig, TbfConfig, WpqConfig,
};
use cairn_qos::sim::{run, PolicyChange, SimReport, SourceSpec};
use cairn_qos::{Dequeued, QosClass, QosError, QosQueue, Request};
use common::*;
use std::collections::{HashMap, HashSet};

fn load(changes: Vec<PolicyChange>) -> SimReport {
    let mut sources: Vec<SourceSpec> = (0..4)
        .map(|c| SourceSpec {
            stop_s: Some(6.0),
            ..SourceSpec::closed(&format!("c{c}"), QosClass::Client, c, 8, 4096)
        })
        .collect();
    sources.push(SourceSpec {
        stop_s: Some(6.0),
        ..SourceSpec::open("open", QosClass::Client, 10, 3000.0, 4096)
    });
    sources.push(SourceSpec {
        stop_s: Some(6.0),
        ..SourceSpec::closed("recovery", QosClass::Recovery, 20, 16, 65536)
    });
    let mut scn = scenario(PolicyConfig::Fifo, sources, 8.0, 10_000.0);
    scn.changes = changes;
    run(&scn).unwrap()
}

fn at(at_s: f64, policy: PolicyConfig) -> PolicyChange {
    PolicyChange { at_s, policy }
}

fn assert_nothing_lost(r: &SimReport) {
    let issued: u64 = r.sources.iter().map(|s| s.issued).sum();
    let completed: u64 = r.sources.iter().map(|s| s.completed).sum();
    let ids: HashSet<u64> = r.dispatch_order.iter().map(|&(_, id)| id).collect();
    assert_eq!(
        ids.len(),
        r.dispatch_order.len(),
        "a request was dispatched twice"
    );
    assert_eq!(r.left_queued, 0);
    assert_eq!(issued, completed, "issued {issued} completed {completed}");
    assert_eq!(ids.len() as u64, issued);
}

#[test]
fn swapping_through_every_policy_loses_nothing_and_keeps_client_order() {
    let tbf = PolicyConfig::Tbf(TbfConfig {
        default_rate_rps: Some(2500.0),
        ..TbfConfig::default()
    });
    let r = load(vec![
        at(0.5, PolicyConfig::Mclock(MClockConfig::default())),
        at(1.5, tbf),
        at(2.5, PolicyConfig::Wpq(WpqConfig::default())),
        at(3.5, PolicyConfig::Crrn(CrrnConfig { quantum: 4 })),
        at(
            4.5,
            PolicyConfig::Mclock(MClockConfig {
                per_client: true,
                ..MClockConfig::default()
            }),
        ),
        at(5.5, PolicyConfig::Fifo),
    ]);
    assert_nothing_lost(&r);
    let mut last: HashMap<u64, u64> = HashMap::new();
    for &(client, id) in &r.dispatch_order {
        let prev = last.insert(client, id).unwrap_or(0);
        assert!(id > prev, "client {client}: {id} after {prev}");
    }
    assert_eq!(r.queue.policy_name(), "fifo");
    assert!(
        r.sources.iter().all(|s| s.window_ops[3] > 0),
        "every source served during swaps"
    );
}

#[test]
fn swapping_to_a_refusing_policy_loses_nothing() {
    let r = load(vec![
        at(1.0, PolicyConfig::Orr(BatchConfig::default())),
        at(2.0, PolicyConfig::Mclock(MClockConfig::default())),
        at(2.0, PolicyConfig::Orr(BatchConfig::default())),
        at(4.0, PolicyConfig::Fifo),
    ]);
    assert_nothing_lost(&r);
    assert!(r.queue.counters().refused_to_fifo > 0);
}

#[test]
fn old_policy_is_drained_before_new_requests_are_served() {
    let mut q = QosQueue::new(PolicyConfig::Fifo).unwrap();
    for id in 1..=3 {
        q.enqueue(Request::new(id, QosClass::Client, 1, 100), 0)
            .unwrap();
    }
    q.set_policy(PolicyConfig::Crrn(CrrnConfig::default()), 0)
        .unwrap();
    assert!(q.is_draining());
    q.enqueue(Request::new(4, QosClass::Client, 1, 100), 0)
        .unwrap();
    let mut got = Vec::new();
    while let Dequeued::Request(d) = q.dequeue(0) {
        got.push(d.req.id);
    }
    assert_eq!(got, vec![1, 2, 3, 4]);
    assert!(!q.is_draining());
}

#[test]
fn bad_config_leaves_running_policy_untouched_and_limits_are_checked() {
    let mut q = QosQueue::new(PolicyConfig::Fifo)
        .unwrap()
        .with_max_queued(2);
    let bad = PolicyConfig::Mclock(MClockConfig {
        profile: "turbo".into(),
        ..MClockConfig::default()
    });
    assert!(matches!(
        q.set_policy(bad, 0),
        Err(QosError::UnknownProfile(_))
    ));
    assert_eq!(q.policy_name(), "fifo");
    q.enqueue(Request::new(1, QosClass::Client, 1, 1), 0)
        .unwrap();
    q.enqueue(Request::new(2, QosClass::Client, 1, 1), 0)
        .unwrap();
    assert_eq!(
        q.enqueue(Request::new(3, QosClass::Client, 1, 1), 0),
        Err(QosError::QueueFull { limit: 2 })
    );
    let c = q.counters().class(QosClass::Client);
    assert_eq!((c.queued, c.enqueued), (2, 2));
}
