//! The hot path allocates nothing: steady-state enqueue+dequeue pairs of every policy.
// A counting global allocator needs `unsafe impl GlobalAlloc`.
#![allow(unsafe_code)]

use cairn_qos::config::{
    BatchConfig, CrrnConfig, MClockConfig, OpFilter, PolicyConfig, TbfConfig, WpqConfig,
};
use cairn_qos::{build_policy, QosClass, Request};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

struct Counting;

thread_local! {
    /// Allocations made by this thread. Counting per thread keeps the test harness's own
    /// threads (printing other tests' results) out of the measurement.
    static ALLOCS: Cell<usize> = const { Cell::new(0) };
}

/// Allocations made so far by the calling thread.
fn allocs() -> usize {
    ALLOCS.with(Cell::get)
}

// SAFETY: every call is passed on unchanged to the system allocator, which upholds the
// trait's contract; the counting touches no allocation.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: the caller's layout, passed on as it came.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: `p` came from `System.alloc` with this layout (through `alloc` above).
        unsafe { System.dealloc(p, l) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// The allocation counter is global: tests in this file run one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn steady_state_pairs_do_not_allocate() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
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
        let before = allocs();
        pairs(10_000, &mut id, &mut now);
        let n = allocs() - before;
        assert_eq!(n, 0, "{}: {n} allocations in 10,000 pairs", cfg.name());
    }
}

#[test]
fn clients_that_go_idle_and_return_do_not_allocate() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
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
        let mut id = 0u64;
        let mut now = 0u64;
        // Each round every client sends one request and the queue drains completely, so every
        // client goes idle and comes back.
        let mut rounds = |n: u64, id: &mut u64, now: &mut u64| {
            for _ in 0..n {
                for c in 0..clients {
                    *id += 1;
                    let class = [QosClass::Client, QosClass::Recovery, QosClass::BestEffort]
                        [(c % 3) as usize];
                    let r = Request {
                        object_id: Some(c),
                        priority: if c % 2 == 0 { 63 } else { 3 },
                        ..Request::new(*id, class, c, 1000)
                    };
                    s.enqueue(r, *now).unwrap();
                }
                while !s.is_empty() {
                    *now += 1000;
                    s.dequeue(*now);
                }
            }
        };
        rounds(200, &mut id, &mut now);
        let before = allocs();
        rounds(200, &mut id, &mut now);
        let n = allocs() - before;
        assert_eq!(
            n,
            0,
            "{}: {n} allocations in 200 idle/return rounds",
            cfg.name()
        );
    }
}
