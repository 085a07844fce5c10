//! Criterion benches: enqueue+dequeue per request per policy with 3, 1,000 and 100,000 clients;
//! a deep queue (1,000,000 requests by default, 10,000,000 with CAIRN_QOS_BENCH_DEEP=10000000);
//! first-request cost of a new client with 100,000 active; bytes of memory per queued request.
//!
//! Run: `cargo bench -p cairn-qos --bench sched -- --warm-up-time 1 --measurement-time 3`
// A counting global allocator needs `unsafe impl GlobalAlloc`.
#![allow(unsafe_code)]

use cairn_qos::config::{CrrnConfig, MClockConfig, PolicyConfig, TbfConfig, WpqConfig};
use cairn_qos::{build_policy, Dequeued, QosClass, Request, Scheduler};
use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

struct Counting;
static LIVE_BYTES: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is passed on unchanged to the system allocator, which upholds the
// trait's contract; the counting touches no allocation.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        LIVE_BYTES.fetch_add(l.size(), Ordering::Relaxed);
        // SAFETY: the caller's layout, passed on as it came.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE_BYTES.fetch_sub(l.size(), Ordering::Relaxed);
        // SAFETY: `p` came from `System.alloc` with this layout (through `alloc` above).
        unsafe { System.dealloc(p, l) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const COST_NS: u64 = 46_512;

fn policies(clients: u64) -> Vec<(&'static str, PolicyConfig)> {
    let per_client = clients > 3;
    vec![
        ("fifo", PolicyConfig::Fifo),
        ("wpq", PolicyConfig::Wpq(WpqConfig::default())),
        (
            "mclock",
            PolicyConfig::Mclock(MClockConfig {
                per_client,
                ..MClockConfig::default()
            }),
        ),
        ("crrn", PolicyConfig::Crrn(CrrnConfig { quantum: 1 })),
        ("tbf", PolicyConfig::Tbf(TbfConfig::default())),
    ]
}

fn req(id: u64, clients: u64) -> Request {
    let c = id % clients;
    let class = if clients <= 3 {
        [QosClass::Client, QosClass::Recovery, QosClass::BestEffort][c as usize]
    } else {
        QosClass::Client
    };
    Request {
        object_id: Some(c),
        ..Request::new(id, class, c, COST_NS)
    }
}

/// A scheduler with `depth` requests per client queued.
fn filled(cfg: &PolicyConfig, clients: u64, depth: u64) -> (Box<dyn Scheduler>, u64) {
    let mut s = build_policy(cfg).expect("valid config");
    let mut id = 0;
    for _ in 0..depth {
        for _ in 0..clients {
            let _ = s.enqueue(req(id, clients), 0);
            id += 1;
        }
    }
    (s, id)
}

fn pair(s: &mut dyn Scheduler, id: &mut u64, now: &mut u64, clients: u64) {
    let _ = s.enqueue(req(*id, clients), *now);
    *id += 1;
    *now += COST_NS;
    match s.dequeue(*now) {
        Dequeued::Request(d) => {
            black_box(d);
        }
        other => {
            black_box(other);
        }
    }
}

fn bench_pairs(c: &mut Criterion) {
    let mut g = c.benchmark_group("enqueue_dequeue_pair");
    for clients in [3u64, 1_000, 100_000] {
        for (name, cfg) in policies(clients) {
            let (mut s, mut id) = filled(&cfg, clients, 2);
            let mut now = 0;
            g.bench_function(BenchmarkId::new(name, clients), |b| {
                b.iter(|| pair(s.as_mut(), &mut id, &mut now, clients))
            });
        }
    }
    g.finish();
}

fn bench_deep(c: &mut Criterion) {
    let deep: u64 = std::env::var("CAIRN_QOS_BENCH_DEEP")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let clients = 1_000u64;
    let mut g = c.benchmark_group(format!("deep_queue_{deep}"));
    for (name, cfg) in policies(clients) {
        let before = LIVE_BYTES.load(Ordering::Relaxed);
        let (mut s, mut id) = filled(&cfg, clients, deep / clients);
        let bytes = LIVE_BYTES.load(Ordering::Relaxed) - before;
        eprintln!(
            "memory: {name}: {:.1} bytes per queued request ({} queued, Request is {} bytes)",
            bytes as f64 / s.len() as f64,
            s.len(),
            std::mem::size_of::<Request>()
        );
        let mut now = 0;
        g.bench_function(name, |b| {
            b.iter(|| pair(s.as_mut(), &mut id, &mut now, clients))
        });
    }
    g.finish();
}

fn bench_activation(c: &mut Criterion) {
    let clients = 100_000u64;
    let mut g = c.benchmark_group("new_client_first_request_at_100k");
    for (name, cfg) in [
        (
            "mclock",
            PolicyConfig::Mclock(MClockConfig {
                per_client: true,
                ..MClockConfig::default()
            }),
        ),
        ("tbf", PolicyConfig::Tbf(TbfConfig::default())),
        ("crrn", PolicyConfig::Crrn(CrrnConfig { quantum: 1 })),
    ] {
        let (mut s, mut id) = filled(&cfg, clients, 2);
        let mut fresh = 1u64 << 40;
        g.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let r = Request::new(id, QosClass::Client, fresh, COST_NS);
                    fresh += 1;
                    id += 1;
                    let t = Instant::now();
                    let _ = s.enqueue(r, 0);
                    total += t.elapsed();
                    black_box(s.dequeue(u64::MAX / 2));
                }
                total
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench_pairs, bench_deep, bench_activation);
criterion_main!(benches);
