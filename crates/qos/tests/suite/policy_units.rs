//! Direct checks of each policy's ordering rules (no simulator).

use cairn_qos::config::{BatchConfig, CrrnConfig, OffsetKind, OpFilter, PolicyConfig, WpqConfig};
use cairn_qos::{build_policy, Dequeued, OpKind, Phase, QosClass, Request, Scheduler};

fn drain(s: &mut dyn Scheduler, n: usize) -> Vec<Request> {
    let mut out = Vec::new();
    while out.len() < n {
        match s.dequeue(0) {
            Dequeued::Request(d) => out.push(d.req),
            _ => break,
        }
    }
    out
}

#[test]
fn wpq_serves_strict_first_then_in_proportion_to_priority() {
    let mut s = build_policy(&PolicyConfig::Wpq(WpqConfig::default())).unwrap();
    let mut id = 0;
    for _ in 0..1000 {
        for (client, prio) in [(1u64, 60u8), (2, 30), (3, 10)] {
            id += 1;
            s.enqueue(
                Request {
                    priority: prio,
                    ..Request::new(id, QosClass::Client, client, 100)
                },
                0,
            )
            .unwrap();
        }
    }
    s.enqueue(
        Request {
            priority: 200,
            ..Request::new(0, QosClass::Client, 9, 100)
        },
        0,
    )
    .unwrap();
    match s.dequeue(0) {
        Dequeued::Request(d) => assert_eq!((d.req.client_id, d.phase), (9, Phase::Reservation)),
        other => panic!("{other:?}"),
    }
    let got = drain(s.as_mut(), 1000);
    let count = |c| got.iter().filter(|r| r.client_id == c).count() as f64;
    assert!((count(1) / 1000.0 - 0.6).abs() < 0.02, "{}", count(1));
    assert!((count(2) / 1000.0 - 0.3).abs() < 0.02, "{}", count(2));
    assert!((count(3) / 1000.0 - 0.1).abs() < 0.02, "{}", count(3));
}

#[test]
fn wpq_cost_check_serves_expensive_heads_less_often() {
    let mut s = build_policy(&PolicyConfig::Wpq(WpqConfig::default())).unwrap();
    for i in 0..2000u64 {
        let (client, cost) = if i % 2 == 0 { (1, 100) } else { (2, 10_000) };
        s.enqueue(
            Request {
                priority: 10 + client as u8,
                ..Request::new(i, QosClass::Client, client, cost)
            },
            0,
        )
        .unwrap();
    }
    let got = drain(s.as_mut(), 500);
    let cheap = got.iter().filter(|r| r.client_id == 1).count();
    assert!(cheap > 400, "cheap {cheap} of 500");
}

#[test]
fn crrn_quantum_serves_runs_per_client() {
    let mut s = build_policy(&PolicyConfig::Crrn(CrrnConfig { quantum: 3 })).unwrap();
    for i in 0..12u64 {
        s.enqueue(Request::new(i, QosClass::Client, i % 2, 1), 0)
            .unwrap();
    }
    let order: Vec<u64> = drain(s.as_mut(), 12).iter().map(|r| r.client_id).collect();
    assert_eq!(order, vec![0, 0, 0, 1, 1, 1, 0, 0, 0, 1, 1, 1]);
    assert!(build_policy(&PolicyConfig::Crrn(CrrnConfig { quantum: 0 })).is_err());
}

#[test]
fn trr_batches_per_target_sorted_by_physical_offset() {
    let cfg = BatchConfig {
        quantum: 4,
        offset: OffsetKind::Physical,
        ops: OpFilter::Both,
    };
    let mut s = build_policy(&PolicyConfig::Trr(cfg)).unwrap();
    let offs = [40u64, 10, 30, 20, 5, 15];
    for (i, &o) in offs.iter().enumerate() {
        for t in 0..2u32 {
            let r = Request {
                target: t,
                physical_offset_bytes: Some(o),
                offset_bytes: 1000 - o,
                op: OpKind::Read,
                ..Request::new(i as u64 * 2 + t as u64, QosClass::Client, 1, 1)
            };
            s.enqueue(r, 0).unwrap();
        }
    }
    let got: Vec<(u32, u64)> = drain(s.as_mut(), 12)
        .iter()
        .map(|r| (r.target, r.physical_offset_bytes.unwrap()))
        .collect();
    assert_eq!(
        got,
        vec![
            (0, 10),
            (0, 20),
            (0, 30),
            (0, 40),
            (1, 10),
            (1, 20),
            (1, 30),
            (1, 40),
            (0, 5),
            (0, 15),
            (1, 5),
            (1, 15)
        ]
    );
    let other = Request {
        op: OpKind::Other,
        ..Request::new(99, QosClass::Client, 1, 1)
    };
    assert!(
        s.enqueue(other, 0).is_err(),
        "ops outside the filter are refused"
    );
}

#[test]
fn reconfigure_rejects_another_policys_config() {
    for name in ["fifo", "wpq", "mclock", "crrn", "orr", "trr", "tbf"] {
        let mut s = build_policy(&PolicyConfig::by_name(name).unwrap()).unwrap();
        assert_eq!(s.name(), name);
        let other = if name == "fifo" { "wpq" } else { "fifo" };
        assert!(s
            .reconfigure(&PolicyConfig::by_name(other).unwrap())
            .is_err());
        assert!(s.reconfigure(&PolicyConfig::by_name(name).unwrap()).is_ok());
    }
}
