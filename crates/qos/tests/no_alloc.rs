//! The hot path allocates nothing: steady-state enqueue+dequeue pairs of every policy.

use cairn_qos::config::{
    BatchConfig, CrrnConfig, MClockConfig, OpFilter, PolicyConfig, TbfConfig, WpqConfig,
};
use cairn_qos::{build_policy, QosClass, Request};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

struct Counting;
static ALLOCS: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        System.alloc(l)
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        System.dealloc(p, l)
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn steady_state_pairs_do_not_allocate() {
    let configs = [
        PolicyConfig::Fifo,
        PolicyConfig::Wpq(WpqConfig::default()),
        PolicyConfig::Mclock(MClockConfig::default()),
        PolicyConfig::Mclock(MClockConfig {
            per_client: true,
            ..MClockConfig::default()
        }),
        PolicyConfig::Crrn(CrrnConfig { quantum: 2 }),
        PolicyConfig::Orr(BatchConfig {
            ops: OpFilter::Both,
            ..BatchConfig::default()
        }),
        PolicyConfig::Tbf(TbfConfig::default()),
    ];
    let clients = 50u64;
    for cfg in configs {
        let mut s = build_policy(&cfg).unwrap();
        let mk = |id: u64| Request {
            object_id: Some(id % clients),
            ..Request::new(id, QosClass::Client, id % clients, 1000)
        };
        let mut id = 0;
        let mut now = 0;
        for _ in 0..8 * clients {
            s.enqueue(mk(id), now).unwrap();
            id += 1;
        }
        let mut pairs = |n: u64, id: &mut u64, now: &mut u64| {
            for _ in 0..n {
                s.enqueue(mk(*id), *now).unwrap();
                *id += 1;
                *now += 1000;
                s.dequeue(*now);
            }
        };
        pairs(10_000, &mut id, &mut now);
        let before = ALLOCS.load(Ordering::Relaxed);
        pairs(10_000, &mut id, &mut now);
        let n = ALLOCS.load(Ordering::Relaxed) - before;
        assert_eq!(n, 0, "{}: {n} allocations in 10,000 pairs", cfg.name());
    }
}
