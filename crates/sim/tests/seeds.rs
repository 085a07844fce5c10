//! The cluster under seeded fault schedules: each seed is one run of the real monitor, OSDs
//! and client over the simulated network (see `cairn_sim`). `CAIRN_SIM_SEEDS` sets how many
//! seeds run (from `CAIRN_SIM_FIRST_SEED`, default 0); `CAIRN_SIM_SEED` replays one.

use std::time::Instant;

use cairn_sim::{run, Options};

fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    Some(
        v.parse()
            .unwrap_or_else(|_| panic!("{name}={v} is not a number")),
    )
}

#[test]
fn every_seeded_fault_schedule_keeps_the_invariants() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let seeds: Vec<u64> = match env_u64("CAIRN_SIM_SEED") {
        Some(seed) => vec![seed],
        None => {
            let first = env_u64("CAIRN_SIM_FIRST_SEED").unwrap_or(0);
            let count = env_u64("CAIRN_SIM_SEEDS").unwrap_or(8);
            (first..first + count).collect()
        }
    };
    let opts = Options::default();
    let began = Instant::now();
    for &seed in &seeds {
        let one = Instant::now();
        match run(seed, &opts) {
            Ok(o) => {
                let faults: Vec<String> = o.schedule.iter().map(|t| t.fault.to_string()).collect();
                println!(
                    "seed {seed}: {} acknowledged, {} uncertain, {} unflushed writes at power cuts, {:.0} s simulated in {:.1} s; {}",
                    o.acked,
                    o.uncertain,
                    o.unflushed_at_cuts,
                    o.simulated.as_secs_f64(),
                    one.elapsed().as_secs_f64(),
                    faults.join(", ")
                );
            }
            Err(f) => panic!("{f}"),
        }
    }
    println!(
        "{} seeds held every invariant in {:.1} s",
        seeds.len(),
        began.elapsed().as_secs_f64()
    );
}
