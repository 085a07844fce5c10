//! A seed replays exactly: two processes that each run one seed (as a batch runs it, and as
//! `CAIRN_SIM_SEED` replays it) learn every write's outcome in the same order at the same
//! simulated time, and end at the same simulated time. The test runs itself twice per seed as
//! child processes; `CAIRN_SIM_REPLAY_SEEDS` sets how many seeds (from 0) it checks
//! (default 2).

use cairn_sim::child::{run_seed_in_child, ChildRun, SEED_VAR};
use cairn_sim::{run, Options};

/// This test's name, for its children.
const TEST: &str = "a_seed_replays_exactly";

fn in_child(seed: u64) -> String {
    match run_seed_in_child(TEST, seed, "run:") {
        ChildRun::Held(line) => line,
        ChildRun::Broke(why) => panic!("{why}"),
    }
}

#[test]
fn a_seed_replays_exactly() {
    if let Some(seed) = std::env::var(SEED_VAR).ok().and_then(|s| s.parse().ok()) {
        let o = run(seed, &Options::default()).unwrap_or_else(|f| panic!("{f}"));
        println!(
            "run: seed {seed}, trace {:016x}, {} acknowledged, {} uncertain, {:?} simulated",
            o.trace, o.acked, o.uncertain, o.simulated
        );
        return;
    }
    let seeds: u64 = std::env::var("CAIRN_SIM_REPLAY_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2);
    for seed in 0..seeds {
        let (first, second) = (in_child(seed), in_child(seed));
        assert_eq!(first, second, "seed {seed} ran two ways");
        println!("{first}: alike twice");
    }
}
