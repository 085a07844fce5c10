//! NRS policies in virtual time: CRR-N fairness (seed 001), ORR seek reduction, TBF rates.

use crate::common;

use cairn_qos::config::{
    BatchConfig, BucketKey, CrrnConfig, OffsetKind, OpFilter, PolicyConfig, TbfConfig,
    TbfRuleConfig,
};
use cairn_qos::sim::device::HddSeek;
use cairn_qos::sim::verdict::max_sliding;
use cairn_qos::sim::{run, PolicyChange, SimReport, SourceSpec};
use cairn_qos::{OpKind, QosClass};
use common::*;

const MIB: u64 = 1 << 20;

/// `clients` clients with `streams[i]` dd-like streams each (1 MiB writes, one outstanding per
/// stream), on a bandwidth-bound server.
fn dd(policy: PolicyConfig, streams: &[u32]) -> SimReport {
    let mut sources = Vec::new();
    for (c, &n) in streams.iter().enumerate() {
        for s in 0..n {
            sources.push(SourceSpec {
                sequential: true,
                object_base: (c as u64) << 20 | (s as u64) << 8,
                ..SourceSpec::closed(&format!("c{c}s{s}"), QosClass::Client, c as u64, 1, MIB)
            });
        }
    }
    let mut scn = scenario(policy, sources, 5.0, 20_000.0);
    scn.device.seq_bandwidth_bytes_per_s = 3.5e9;
    scn.record_dispatches = false;
    run(&scn).unwrap()
}

fn per_client_mb_s(r: &SimReport, clients: usize) -> Vec<f64> {
    let mut out = vec![0.0; clients];
    for s in &r.sources {
        out[s.client_id as usize] += s.completed_bytes as f64 / 5.0 / 1e6;
    }
    out
}

fn mean_stdev(v: &[f64]) -> (f64, f64) {
    let m = v.iter().sum::<f64>() / v.len() as f64;
    let var = v.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / v.len() as f64;
    (m, var.sqrt())
}

#[test]
fn crrn_evens_out_10_clients_by_10_streams() {
    let r = dd(PolicyConfig::Crrn(CrrnConfig { quantum: 1 }), &[10; 10]);
    let (m, sd) = mean_stdev(&per_client_mb_s(&r, 10));
    assert!(m > 100.0 && sd <= 0.05 * m, "mean {m} stdev {sd}");
}

#[test]
fn crrn_gives_the_lone_stream_a_full_client_share() {
    let mut streams = [11u32; 10];
    streams[4] = 1;
    let crrn = per_client_mb_s(
        &dd(PolicyConfig::Crrn(CrrnConfig { quantum: 1 }), &streams),
        10,
    );
    let (m, sd) = mean_stdev(&crrn);
    assert!(sd <= 0.05 * m, "crrn mean {m} stdev {sd}: {crrn:?}");
    let others: f64 = crrn
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 4)
        .map(|(_, v)| v)
        .sum::<f64>()
        / 9.0;
    assert!(
        crrn[4] >= 0.95 * others,
        "lone {} vs others {others}",
        crrn[4]
    );
    // FIFO serves streams, not clients: the lone client gets about 1/11 of a share.
    let fifo = per_client_mb_s(&dd(PolicyConfig::Fifo, &streams), 10);
    assert!(
        fifo[4] < 0.15 * fifo[0],
        "fifo lone {} vs {}",
        fifo[4],
        fifo[0]
    );
}

/// 128 reader streams (one outstanding read each) over 16 objects, interleaved so that arrival
/// order alternates between objects.
fn hdd_reads(policy: PolicyConfig) -> SimReport {
    let sources = (0..128u64)
        .map(|i| SourceSpec {
            op: OpKind::Read,
            object_base: (i % 16) * 7919,
            object_size_bytes: 64 * MIB,
            ..SourceSpec::closed(&format!("r{i}"), QosClass::Client, i, 1, 64 * 1024)
        })
        .collect();
    let mut scn = scenario(policy, sources, 20.0, 340.0);
    scn.device.seq_bandwidth_bytes_per_s = 120.0 * MIB as f64;
    scn.device.hdd = Some(HddSeek::SEVEN_K_1TB);
    scn.record_dispatches = false;
    run(&scn).unwrap()
}

#[test]
fn orr_lowers_seek_distance_versus_fifo_on_hdd() {
    let fifo = hdd_reads(PolicyConfig::Fifo);
    let orr = hdd_reads(PolicyConfig::Orr(BatchConfig {
        quantum: 8,
        offset: OffsetKind::Physical,
        ops: OpFilter::Reads,
    }));
    let done = |r: &SimReport| r.sources.iter().map(|s| s.completed).sum::<u64>();
    let per_req = |r: &SimReport| r.seek_distance_bytes as f64 / done(r) as f64;
    assert!(
        per_req(&orr) < 0.5 * per_req(&fifo),
        "orr {} fifo {}",
        per_req(&orr),
        per_req(&fifo)
    );
    assert!(
        done(&orr) > done(&fifo),
        "orr {} fifo {}",
        done(&orr),
        done(&fifo)
    );
    assert_eq!(orr.queue.counters().refused_to_fifo, 0);
}

#[test]
fn orr_refuses_writes_and_objectless_requests_to_fifo() {
    let sources = vec![
        SourceSpec {
            op: OpKind::Read,
            ..SourceSpec::closed("reads", QosClass::Client, 1, 4, 4096)
        },
        SourceSpec::closed("writes", QosClass::Client, 2, 4, 4096),
        SourceSpec {
            op: OpKind::Read,
            no_object: true,
            ..SourceSpec::closed("no-object", QosClass::Client, 3, 4, 4096)
        },
    ];
    let r = run(&scenario(
        PolicyConfig::Orr(BatchConfig::default()),
        sources,
        2.0,
        10_000.0,
    ))
    .unwrap();
    assert!(r.queue.counters().refused_to_fifo > 1000);
    assert!(r.sources.iter().all(|s| s.completed > 1000));
}

fn rule(
    name: &str,
    expr: &str,
    rps: Option<f64>,
    bps: Option<f64>,
    key: BucketKey,
) -> TbfRuleConfig {
    TbfRuleConfig {
        name: name.into(),
        expr: expr.into(),
        rate_rps: rps,
        rate_bytes_per_s: bps,
        key,
    }
}

fn tbf(rules: Vec<TbfRuleConfig>) -> PolicyConfig {
    PolicyConfig::Tbf(TbfConfig {
        rules,
        ..TbfConfig::default()
    })
}

#[test]
fn tbf_rule_rates_hold_within_2pct_in_requests_and_bytes() {
    let rules = vec![
        rule("one", "client=1", Some(200.0), None, BucketKey::Client),
        rule(
            "twenties",
            "client=2? & op=write",
            Some(100.0),
            None,
            BucketKey::Client,
        ),
        rule("job7", "job=7", None, Some(2e6), BucketKey::Job),
        rule(
            "both",
            "client={40,41}",
            Some(300.0),
            Some(600e3),
            BucketKey::Rule,
        ),
    ];
    let mut sources = vec![
        SourceSpec::closed("c1", QosClass::Client, 1, 8, 4096),
        SourceSpec::closed("c20", QosClass::Client, 20, 8, 4096),
        SourceSpec::closed("c21", QosClass::Client, 21, 8, 4096),
        SourceSpec {
            job_id: Some(7),
            ..SourceSpec::closed("job7", QosClass::Client, 30, 8, 65536)
        },
        SourceSpec::closed("c40", QosClass::Client, 40, 8, 4096),
        SourceSpec::closed("c41", QosClass::Client, 41, 8, 4096),
        SourceSpec::open("default", QosClass::Client, 9, 1000.0, 4096),
    ];
    sources[2].op = OpKind::Write;
    let r = run(&scenario(tbf(rules), sources, 10.0, 100_000.0)).unwrap();
    let ops = |i: usize| r.sources[i].completed as f64 / 10.0;
    let within = |got: f64, want: f64| (got - want).abs() <= 0.02 * want;
    assert!(within(ops(0), 200.0), "client 1: {}", ops(0));
    assert!(
        within(ops(1), 100.0) && within(ops(2), 100.0),
        "{} {}",
        ops(1),
        ops(2)
    );
    let job_bps = r.sources[3].completed_bytes as f64 / 10.0;
    assert!(within(job_bps, 2e6), "job 7: {job_bps}");
    // Shared bucket: bytes (600 KB/s = 146 req/s of 4 KiB) bind before requests (300/s).
    let shared = (r.sources[4].completed_bytes + r.sources[5].completed_bytes) as f64 / 10.0;
    assert!(within(shared, 600e3), "shared: {shared}");
    assert!(within(ops(6), 1000.0), "default: {}", ops(6));
    let worst = max_sliding(&r.sources[0].dispatches, 1_000_000_000, |_| 1);
    assert!(
        worst as f64 <= 200.0 * 1.01 + 1.0,
        "client 1 worst window {worst}"
    );
}

#[test]
fn tbf_rules_change_and_stop_at_run_time() {
    let start = tbf(vec![
        rule("one", "client=1", Some(200.0), None, BucketKey::Client),
        rule("two", "client=2", Some(50.0), None, BucketKey::Client),
    ]);
    let changed = tbf(vec![
        rule("one", "client=1", Some(100.0), None, BucketKey::Client),
        rule("two", "client=2", Some(50.0), None, BucketKey::Client),
    ]);
    let stopped = tbf(vec![rule(
        "one",
        "client=1",
        Some(100.0),
        None,
        BucketKey::Client,
    )]);
    let sources = vec![
        SourceSpec::closed("c1", QosClass::Client, 1, 8, 4096),
        SourceSpec::closed("c2", QosClass::Client, 2, 8, 4096),
    ];
    let mut scn = scenario(start, sources, 9.0, 10_000.0);
    scn.changes = vec![
        PolicyChange {
            at_s: 3.0,
            policy: changed,
        },
        PolicyChange {
            at_s: 6.0,
            policy: stopped,
        },
    ];
    let r = run(&scn).unwrap();
    let c1 = &r.sources[0].window_ops;
    let c2 = &r.sources[1].window_ops;
    assert!((198..=202).contains(&c1[1]), "{c1:?}");
    assert!(
        (99..=101).contains(&c1[4]) && (99..=101).contains(&c1[7]),
        "{c1:?}"
    );
    assert!((49..=51).contains(&c2[4]), "{c2:?}");
    // Rule stopped: client 2 falls to the unlimited default rule and takes the spare device.
    assert!(c2[7] > 5000, "{c2:?}");
}

#[test]
fn tbf_bad_rules_are_typed_errors() {
    use cairn_qos::policy::tbf::Tbf;
    use cairn_qos::QosError;
    let bad = TbfConfig {
        rules: vec![rule("x", "client=", Some(1.0), None, BucketKey::Client)],
        ..TbfConfig::default()
    };
    assert!(matches!(Tbf::new(bad), Err(QosError::BadRule { .. })));
    let mut t = Tbf::new(TbfConfig::default()).unwrap();
    t.start_rule(rule("a", "op=read", Some(5.0), None, BucketKey::Rule), None)
        .unwrap();
    assert!(matches!(
        t.start_rule(rule("a", "op=read", Some(5.0), None, BucketKey::Rule), None),
        Err(QosError::DuplicateRule(_))
    ));
    assert!(matches!(
        t.change_rule("zz", None, None, None),
        Err(QosError::NoSuchRule(_))
    ));
    assert!(matches!(t.stop_rule("zz", 0), Err(QosError::NoSuchRule(_))));
    assert!(t.change_rule("a", Some(-1.0), None, None).is_err());
    t.start_rule(
        rule("b", "op=write", None, Some(1e6), BucketKey::Rule),
        Some(0),
    )
    .unwrap();
    assert_eq!(t.rule_names(), vec!["b", "a"]);
}
