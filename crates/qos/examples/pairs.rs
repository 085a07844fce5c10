//! Steady-state enqueue+dequeue loop for profiling (`perf stat`), outside criterion.
//! Run: `cargo run --release -p cairn-qos --example pairs -- mclock 100000 10000000`.

use cairn_qos::config::{MClockConfig, PolicyConfig};
use cairn_qos::{build_policy, QosClass, Request};
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let name = args.next().unwrap_or_else(|| "mclock".into());
    let clients: u64 = args
        .next()
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(100_000);
    let pairs: u64 = args
        .next()
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(10_000_000);
    let cfg = match name.as_str() {
        "mclock" => PolicyConfig::Mclock(MClockConfig {
            per_client: clients > 3,
            ..MClockConfig::default()
        }),
        other => PolicyConfig::by_name(other)?,
    };
    let mut s = build_policy(&cfg)?;
    let class = |c: u64| {
        if clients <= 3 {
            [QosClass::Client, QosClass::Recovery, QosClass::BestEffort][c as usize]
        } else {
            QosClass::Client
        }
    };
    let mut id = 0u64;
    for _ in 0..2 {
        for c in 0..clients {
            let _ = s.enqueue(Request::new(id, class(c), c, 46_512), 0);
            id += 1;
        }
    }
    let mut now = 0u64;
    let t = Instant::now();
    for _ in 0..pairs {
        let c = id % clients;
        let _ = s.enqueue(Request::new(id, class(c), c, 46_512), now);
        id += 1;
        now += 46_512;
        std::hint::black_box(s.dequeue(now));
    }
    let el = t.elapsed();
    println!(
        "{name} clients={clients} pairs={pairs}: {:.1} ns/pair",
        el.as_nanos() as f64 / pairs.max(1) as f64
    );
    Ok(())
}
