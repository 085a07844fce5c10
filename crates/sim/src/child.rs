//! Runs of one seed in a process of their own. A process replays a seed exactly only when
//! it runs that seed alone (tokio counts the runtimes a process builds into their schedulers'
//! seeds; see [`crate::entropy`]), so a batch runs each seed as a child process of the test
//! binary — the very run a replay with `CAIRN_SIM_SEED` repeats.

use std::process::Command;

/// The environment variable that makes a test run one seed, in this process.
pub const SEED_VAR: &str = "CAIRN_SIM_SEED";

/// How a child's run of one seed ended.
#[derive(Debug)]
pub enum ChildRun {
    /// Every invariant held: the line the child printed of its run.
    Held(String),
    /// It broke one (or the child failed): what the child said.
    Broke(String),
}

/// Runs test `test` of this test binary in a child process with [`SEED_VAR`] set to `seed`;
/// a child that held prints a line starting with `report_prefix`, which is returned.
pub fn run_seed_in_child(test: &str, seed: u64, report_prefix: &str) -> ChildRun {
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => return ChildRun::Broke(format!("the test binary's path: {e}")),
    };
    let out = Command::new(exe)
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(SEED_VAR, seed.to_string())
        .output();
    let out = match out {
        Ok(out) => out,
        Err(e) => return ChildRun::Broke(format!("seed {seed}: the child did not start: {e}")),
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        return ChildRun::Broke(failure_text(seed, &stderr, &stdout));
    }
    match stdout
        .lines()
        .find_map(|l| l.find(report_prefix).map(|at| l[at..].to_string()))
    {
        Some(line) => ChildRun::Held(line),
        None => ChildRun::Broke(format!(
            "seed {seed}: the child printed no report: {stdout}"
        )),
    }
}

/// The part of a failed child's output that says what broke: its panic message, from the
/// line naming the seed to the replay line; everything it printed when that is not there.
fn failure_text(seed: u64, stderr: &str, stdout: &str) -> String {
    let lines: Vec<&str> = stderr.lines().collect();
    let start = lines
        .iter()
        .position(|l| l.starts_with(&format!("seed {seed}")));
    let end = lines.iter().position(|l| l.starts_with("replay:"));
    match (start, end) {
        (Some(s), Some(e)) if s <= e => lines[s..=e].join("\n"),
        _ => format!("seed {seed}: the child failed:\n{stdout}{stderr}"),
    }
}
