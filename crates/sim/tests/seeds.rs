//! The cluster under seeded fault schedules: each seed is one run of the real monitor, OSDs
//! and client over the simulated network (see `cairn_sim`). `CAIRN_SIM_SEEDS` sets how many
//! seeds run (from `CAIRN_SIM_FIRST_SEED`, default 0) and `CAIRN_SIM_THREADS` how many side by
//! side (default: every CPU), each in a child process of its own; `CAIRN_SIM_SEED` runs one
//! in this process — the replay of a batch's run, exactly.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use cairn_sim::child::{run_seed_in_child, ChildRun, SEED_VAR};
use cairn_sim::{run, Options, Outcome};

/// This test's name, for its children.
const TEST: &str = "every_seeded_fault_schedule_keeps_the_invariants";

fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    Some(
        v.parse()
            .unwrap_or_else(|_| panic!("{name}={v} is not a number")),
    )
}

fn report(seed: u64, o: &Outcome, real_s: f64) {
    let faults: Vec<String> = o.schedule.iter().map(|t| t.fault.to_string()).collect();
    println!(
        "seed {seed}: {} acknowledged, {} uncertain, {} unflushed writes at power cuts, {} reads retried, {:.0} s simulated in {real_s:.1} s, trace {:016x}; {}",
        o.acked,
        o.uncertain,
        o.unflushed_at_cuts,
        o.reads_retried,
        o.simulated.as_secs_f64(),
        o.trace,
        faults.join(", ")
    );
}

#[test]
fn every_seeded_fault_schedule_keeps_the_invariants() {
    if let Some(seed) = env_u64(SEED_VAR) {
        if std::env::var_os("RUST_LOG").is_some() {
            let _ = tracing_subscriber::fmt()
                .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
                .with_test_writer()
                .try_init();
        }
        let one = Instant::now();
        let opts = Options {
            tear_down: false,
            ..Options::default()
        };
        match run(seed, &opts) {
            Ok(o) => report(seed, &o, one.elapsed().as_secs_f64()),
            Err(f) => panic!("{f}"),
        }
        return;
    }
    let first = env_u64("CAIRN_SIM_FIRST_SEED").unwrap_or(0);
    let count = env_u64("CAIRN_SIM_SEEDS").unwrap_or(8);
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads = env_u64("CAIRN_SIM_THREADS")
        .and_then(|t| usize::try_from(t).ok())
        .unwrap_or(cpus)
        .clamp(1, 64);
    let next = AtomicU64::new(0);
    let failures: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let began = Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= count || !failures.lock().expect("failures").is_empty() {
                    return;
                }
                let seed = first + n;
                match run_seed_in_child(TEST, seed, &format!("seed {seed}:")) {
                    ChildRun::Held(line) => println!("{line}"),
                    ChildRun::Broke(why) => failures.lock().expect("failures").push(why),
                }
            });
        }
    });
    if let Some(f) = failures.into_inner().expect("failures").into_iter().next() {
        panic!("{f}");
    }
    let secs = began.elapsed().as_secs_f64();
    println!(
        "{count} seeds held every invariant in {secs:.1} s on {threads} threads ({:.1} seeds per minute)",
        count as f64 * 60.0 / secs.max(f64::EPSILON)
    );
}
