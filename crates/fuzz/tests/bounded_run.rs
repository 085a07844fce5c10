//! Every fuzz target on stable, bounded: its seeds, the corpus libFuzzer grew for it
//! (`fuzz/corpus/NAME/`), then random mutations of those for `CAIRN_FUZZ_SECS` per target
//! (default 1; `CAIRN_FUZZ_SEED` replays a run). Not coverage-guided (the libFuzzer runs
//! are, see `fuzz/README.md`), but every decoder meets malformed input in every CI run. A
//! panic fails the test with the input that caused it, written under the target directory.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// The corpus directory of target `name`.
fn corpus_dir(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(name)
}

/// The inputs a target starts from: its seeds and its corpus files.
fn pool(name: &str) -> Vec<Vec<u8>> {
    let mut inputs = cairn_fuzz::seeds(name);
    if let Ok(dir) = std::fs::read_dir(corpus_dir(name)) {
        for entry in dir.flatten() {
            if let Ok(bytes) = std::fs::read(entry.path()) {
                inputs.push(bytes);
            }
        }
    }
    inputs
}

/// `base` changed one to four times: bits flipped, bytes set, inserted, removed or repeated,
/// cut short, or spliced with `other`.
fn mutate(rng: &mut ChaCha8Rng, base: &[u8], other: &[u8]) -> Vec<u8> {
    let mut v = base.to_vec();
    for _ in 0..rng.random_range(1..=4) {
        let len = v.len();
        match rng.random_range(0..7) {
            0 if len > 0 => {
                let at = rng.random_range(0..len);
                v[at] ^= 1 << rng.random_range(0..8);
            }
            1 if len > 0 => {
                let at = rng.random_range(0..len);
                v[at] = [0, 1, 0x7f, 0x80, 0xff, rng.random()][rng.random_range(0..6)];
            }
            2 => {
                let at = rng.random_range(0..=len);
                let mut extra = vec![0u8; rng.random_range(1..16)];
                rng.fill_bytes(&mut extra);
                v.splice(at..at, extra);
            }
            3 if len > 0 => {
                let a = rng.random_range(0..len);
                let b = rng.random_range(a..=len.min(a + 64));
                v.drain(a..b);
            }
            4 if len > 0 => {
                let a = rng.random_range(0..len);
                let b = rng.random_range(a..=len.min(a + 32));
                let piece = v[a..b].to_vec();
                let at = rng.random_range(0..=v.len());
                v.splice(at..at, piece);
            }
            5 if len > 0 => v.truncate(rng.random_range(0..len)),
            _ if !other.is_empty() => {
                let cut = rng.random_range(0..=v.len());
                let from = rng.random_range(0..other.len());
                v.truncate(cut);
                v.extend_from_slice(&other[from..]);
            }
            _ => {}
        }
    }
    v
}

/// Runs `target` on `input`; on a panic, saves the input and fails naming it.
fn run_one(name: &str, target: cairn_fuzz::Target, input: &[u8]) {
    if catch_unwind(AssertUnwindSafe(|| target(input))).is_err() {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("fuzz-crashes");
        let _ = std::fs::create_dir_all(&dir);
        let path = dir.join(format!("{name}-{:08x}", fingerprint(input)));
        let _ = std::fs::write(&path, input);
        panic!(
            "fuzz target {name} panicked on a {}-byte input, saved to {} (replay: cargo +nightly \
             fuzz run {name} {})",
            input.len(),
            path.display(),
            path.display()
        );
    }
}

/// A short name for an input (FNV-1a), for the file a crashing input is saved to.
fn fingerprint(b: &[u8]) -> u32 {
    b.iter().fold(0x811c_9dc5u32, |h, &x| {
        (h ^ u32::from(x)).wrapping_mul(0x0100_0193)
    })
}

#[test]
fn every_target_survives_its_corpus_and_a_bounded_mutation_run() {
    let secs: f64 = std::env::var("CAIRN_FUZZ_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1.0);
    let seed: u64 = std::env::var("CAIRN_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs() ^ u64::from(d.subsec_nanos()))
        });
    eprintln!("fuzz seed {seed} (CAIRN_FUZZ_SEED={seed} replays it), {secs} s per target");
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    for &(name, target) in cairn_fuzz::TARGETS {
        let inputs = pool(name);
        assert!(!inputs.is_empty(), "{name} has no seeds");
        for input in &inputs {
            run_one(name, target, input);
        }
        let until = Instant::now() + Duration::from_secs_f64(secs);
        let mut execs = 0u64;
        while Instant::now() < until {
            for _ in 0..64 {
                let base = &inputs[rng.random_range(0..inputs.len())];
                let other = &inputs[rng.random_range(0..inputs.len())];
                let input = mutate(&mut rng, base, other);
                run_one(name, target, &input);
                execs += 1;
            }
        }
        eprintln!(
            "{name:>18}: {} corpus inputs, {execs} mutated executions",
            inputs.len()
        );
    }
}

#[test]
fn seeds_of_every_target_exist_and_unknown_names_are_refused() {
    for &(name, _) in cairn_fuzz::TARGETS {
        assert!(!cairn_fuzz::seeds(name).is_empty(), "{name}");
        assert!(cairn_fuzz::run(name, &[]));
    }
    assert!(!cairn_fuzz::run("no_such_target", b"x"));
}

/// Writes every target's seeds into its corpus directory, where libFuzzer starts from them
/// (`cargo test -p cairn-fuzz -- --ignored write_seed_corpus`).
#[test]
#[ignore = "writes into fuzz/corpus; run by hand before a libFuzzer run"]
fn write_seed_corpus() {
    for &(name, _) in cairn_fuzz::TARGETS {
        let dir = corpus_dir(name);
        std::fs::create_dir_all(&dir).unwrap();
        for (i, seed) in cairn_fuzz::seeds(name).iter().enumerate() {
            std::fs::write(dir.join(format!("seed-{i}")), seed).unwrap();
        }
    }
}
