//! The simulation catches a real bug: built with the OSD's planted bugs (`--features
//! planted-bugs`: a copy that lacks an object records it recovered without pulling it), the
//! seeded schedules must find a run that breaks an invariant. Without the feature this test
//! is not compiled.
#![cfg(feature = "planted-bugs")]

use cairn_sim::{run, Options, Violation};

/// Seeds tried before the planted bug must have been caught.
const SEEDS: u64 = 24;

#[test]
fn the_planted_recovery_bug_is_caught() {
    let opts = Options::default();
    for seed in 0..SEEDS {
        match run(seed, &opts) {
            Ok(o) => println!("seed {seed}: passed ({} acknowledged)", o.acked),
            Err(f) => {
                println!("caught by {f}");
                assert!(
                    matches!(
                        f.violation,
                        Violation::Lost(_) | Violation::Unreadable { .. }
                    ),
                    "caught, but as {}",
                    f.violation
                );
                return;
            }
        }
    }
    panic!("{SEEDS} seeds ran with a planted recovery bug and none caught it");
}
