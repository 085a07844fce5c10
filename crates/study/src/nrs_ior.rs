//! Seed 001's ORR/TRR experiment: IOR sequential reads of 1 MB transfers by 14 clients of 1 or
//! 8 threads, file-per-process (FPP) and single-shared-file (SSF), under FIFO and under ORR and
//! TRR with logical or physical offsets at a quantum of 256; total throughput per run. The
//! seed's figures are carried as data (its measurements on Lustre, 2 OSS x 4 OSTs); the
//! `cairn` binary reads the files from a real cluster and hands this module the totals.
//!
//! A file is laid out as CephFS lays out files (object size, stripe unit, stripe count): FPP
//! files of one stripe, as Lustre's default of one OST object per file, so each thread reads
//! objects of its own; the shared file striped over several objects in 1 MiB units, as a
//! Lustre file striped over OSTs, so every object holds pieces of every thread's segment.

use std::fmt::Write as _;

/// Where a file's bytes live: CephFS's file layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// Bytes of one stripe unit.
    pub stripe_unit: u64,
    /// Objects a stripe spreads over.
    pub stripe_count: u64,
    /// Bytes of one object (a multiple of the stripe unit).
    pub object_size: u64,
}

impl Layout {
    /// Checks the layout's shape.
    pub fn check(&self) -> Result<(), String> {
        if self.stripe_unit == 0 || self.stripe_count == 0 || self.object_size == 0 {
            return Err("a layout's sizes and stripe count are positive".into());
        }
        if !self.object_size.is_multiple_of(self.stripe_unit) {
            return Err("the object size is a multiple of the stripe unit".into());
        }
        Ok(())
    }

    /// The object (its index in the file) and the offset in it of file byte `offset`. Panics
    /// on a layout that [`Layout::check`] refuses.
    pub fn locate(&self, offset: u64) -> (u64, u64) {
        assert!(self.check().is_ok(), "unchecked layout {self:?}");
        let block = offset / self.stripe_unit;
        let stripe = block / self.stripe_count;
        let position = block % self.stripe_count;
        let stripes_per_object = self.object_size / self.stripe_unit;
        let object_set = stripe / stripes_per_object;
        let object = object_set * self.stripe_count + position;
        let within = (stripe % stripes_per_object) * self.stripe_unit + offset % self.stripe_unit;
        (object, within)
    }

    /// Objects a file of `bytes` occupies.
    pub fn objects_for(&self, bytes: u64) -> u64 {
        if bytes == 0 {
            return 0;
        }
        let set_bytes = self.object_size * self.stripe_count;
        let full_sets = bytes / set_bytes;
        let rest = bytes % set_bytes;
        let rest_objects = rest.div_ceil(self.stripe_unit).min(self.stripe_count);
        full_sets * self.stripe_count + rest_objects
    }
}

/// How the threads of a case read: a file each, or segments of one shared file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sharing {
    /// File per process.
    Fpp,
    /// Single shared file.
    Ssf,
}

/// One case: `fpp-14x8` is 14 clients of 8 threads each reading files of their own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IorCase {
    /// FPP or SSF.
    pub sharing: Sharing,
    /// Clients (each a cluster client of its own).
    pub clients: usize,
    /// Threads per client.
    pub threads: usize,
}

impl IorCase {
    /// Parses `fpp-CxT` or `ssf-CxT` (1-64 clients of 1-64 threads).
    pub fn parse(text: &str) -> Result<IorCase, String> {
        let (kind, shape) = text
            .split_once('-')
            .ok_or_else(|| format!("`{text}` is not fpp-CxT or ssf-CxT"))?;
        let sharing = match kind {
            "fpp" => Sharing::Fpp,
            "ssf" => Sharing::Ssf,
            other => return Err(format!("`{other}` is neither fpp nor ssf")),
        };
        let (c, t) = shape
            .split_once('x')
            .ok_or_else(|| format!("`{shape}` is not CLIENTSxTHREADS"))?;
        let clients: usize = c.parse().map_err(|_| format!("`{c}` is not a count"))?;
        let threads: usize = t.parse().map_err(|_| format!("`{t}` is not a count"))?;
        if !(1..=64).contains(&clients) || !(1..=64).contains(&threads) {
            return Err(format!("`{text}`: 1-64 clients of 1-64 threads"));
        }
        Ok(IorCase {
            sharing,
            clients,
            threads,
        })
    }

    /// Threads in all.
    pub fn total_threads(&self) -> usize {
        self.clients * self.threads
    }

    /// Its name as parsed.
    pub fn name(&self) -> String {
        let kind = match self.sharing {
            Sharing::Fpp => "fpp",
            Sharing::Ssf => "ssf",
        };
        format!("{kind}-{}x{}", self.clients, self.threads)
    }
}

/// A scheduler policy of the study and the TOML that selects it on an OSD
/// (`osd_op_queue_config`): `fifo`, `crrn`, or `orr|trr-log|phys-QUANTUM`, e.g. `trr-phys-256`.
pub fn policy_toml(spec: &str) -> Result<String, String> {
    match spec {
        "fifo" => return Ok("name = \"fifo\"".into()),
        "crrn" => return Ok("name = \"crrn\"".into()),
        _ => {}
    }
    let parts: Vec<&str> = spec.split('-').collect();
    let [name, offset, quantum] = parts[..] else {
        return Err(format!(
            "`{spec}` is not fifo, crrn or orr|trr-log|phys-QUANTUM"
        ));
    };
    if name != "orr" && name != "trr" {
        return Err(format!("`{name}` is neither orr nor trr"));
    }
    let offset = match offset {
        "log" => "logical",
        "phys" => "physical",
        other => return Err(format!("`{other}` is neither log nor phys")),
    };
    let quantum: u32 = quantum
        .parse()
        .ok()
        .filter(|q| (1..=65_536).contains(q))
        .ok_or_else(|| format!("`{quantum}` is not a quantum of 1-65536"))?;
    Ok(format!(
        "name = \"{name}\"\nquantum = {quantum}\noffset = \"{offset}\"\nops = \"reads\""
    ))
}

/// The seed's total for a policy (`fifo` is its NRS FIFO; its "vanilla", no NRS, is shown in
/// its own column) and case, MB/sec as IOR reports; only the cases of 14 clients it ran.
pub fn seed_total(policy: &str, case: &IorCase) -> Option<f64> {
    if case.clients != 14 {
        return None;
    }
    let row: [f64; 6] = match (case.sharing, case.threads) {
        (Sharing::Fpp, 1) => [3092.91, 3102.17, 3146.97, 3150.86, 3164.66, 3268.98],
        (Sharing::Ssf, 1) => [2744.15, 2741.78, 2689.12, 2728.89, 2684.42, 2720.96],
        (Sharing::Fpp, 8) => [2274.55, 2248.62, 2432.78, 2424.69, 1540.82, 1778.56],
        (Sharing::Ssf, 8) => [2260.37, 2257.9, 1089.385, 1236.72, 1086.18, 1258.907],
        _ => return None,
    };
    let column = match policy {
        "vanilla" => 0,
        "fifo" => 1,
        "orr-log-256" => 2,
        "orr-phys-256" => 3,
        "trr-log-256" => 4,
        "trr-phys-256" => 5,
        _ => return None,
    };
    Some(row[column])
}

/// One run: a policy and a case, and what all threads read per second.
#[derive(Debug, Clone, PartialEq)]
pub struct IorRun {
    /// The policy spec.
    pub policy: String,
    /// The case.
    pub case: IorCase,
    /// Total throughput over the measured window, MiB/s.
    pub mib_s: f64,
    /// Each thread's throughput, MiB/s.
    pub threads_mib_s: Vec<f64>,
}

/// The report: per case, every policy's total and its ratio to FIFO beside the seed's.
pub fn render_markdown(setup: &str, runs: &[IorRun]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# Seed 001 on real OSDs: ORR and TRR on IOR reads\n");
    let _ = writeln!(s, "{setup}\n");
    let _ = writeln!(
        s,
        "| case | policy | total MiB/s | vs fifo | slowest thread MiB/s | fastest thread MiB/s | seed MB/sec | seed vs FIFO | seed vanilla |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|");
    for r in runs {
        let fifo = runs
            .iter()
            .find(|f| f.case == r.case && f.policy == "fifo")
            .map(|f| f.mib_s);
        let ratio = |x: f64, base: Option<f64>| match base {
            Some(b) if b > 0.0 => format!("{:.2}", x / b),
            _ => "-".into(),
        };
        let seed = seed_total(&r.policy, &r.case);
        let seed_fifo = seed_total("fifo", &r.case);
        let min = r
            .threads_mib_s
            .iter()
            .copied()
            .fold(f64::INFINITY, f64::min);
        let max = r.threads_mib_s.iter().copied().fold(0.0, f64::max);
        let _ = writeln!(
            s,
            "| {} | {} | {:.1} | {} | {} | {:.1} | {} | {} | {} |",
            r.case.name(),
            r.policy,
            r.mib_s,
            ratio(r.mib_s, fifo),
            if min.is_finite() {
                format!("{min:.1}")
            } else {
                "-".into()
            },
            max,
            seed.map_or("-".into(), |v| format!("{v:.1}")),
            seed.map_or("-".into(), |v| ratio(v, seed_fifo)),
            seed_total("vanilla", &r.case).map_or("-".into(), |v| format!("{v:.1}")),
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn a_striped_layout_places_units_round_robin_in_object_sets() {
        let l = Layout {
            stripe_unit: MIB,
            stripe_count: 4,
            object_size: 2 * MIB,
        };
        assert_eq!(l.locate(0), (0, 0));
        assert_eq!(l.locate(MIB + 5), (1, 5));
        assert_eq!(l.locate(3 * MIB), (3, 0));
        assert_eq!(
            l.locate(4 * MIB),
            (0, MIB),
            "the second stripe of the first set"
        );
        assert_eq!(l.locate(8 * MIB), (4, 0), "the second object set");
        assert_eq!(l.objects_for(8 * MIB), 4);
        assert_eq!(l.objects_for(8 * MIB + 1), 5);
        assert_eq!(l.objects_for(10 * MIB), 6);
        assert_eq!(l.objects_for(0), 0);
        // Every byte of a file lands once: distinct (object, offset) pairs, inside objects.
        let mut seen = std::collections::BTreeSet::new();
        for unit in 0..32 {
            let (o, off) = l.locate(unit * MIB);
            assert!(off + MIB <= l.object_size);
            assert!(o < l.objects_for(32 * MIB));
            assert!(seen.insert((o, off)));
        }
        let plain = Layout {
            stripe_unit: 4 * MIB,
            stripe_count: 1,
            object_size: 4 * MIB,
        };
        assert_eq!(plain.locate(9 * MIB), (2, MIB));
        assert!(Layout {
            object_size: 3,
            ..plain
        }
        .check()
        .is_err());
    }

    #[test]
    fn cases_and_policies_parse_and_bad_ones_are_refused() {
        let c = IorCase::parse("ssf-14x8").unwrap();
        assert_eq!((c.sharing, c.clients, c.threads), (Sharing::Ssf, 14, 8));
        assert_eq!(c.name(), "ssf-14x8");
        assert_eq!(c.total_threads(), 112);
        for bad in ["14x8", "xyz-1x1", "fpp-0x1", "fpp-1x65", "fpp-ax1", "fpp-1"] {
            assert!(IorCase::parse(bad).is_err(), "{bad}");
        }
        let t = policy_toml("trr-phys-512").unwrap();
        let cfg = cairn_qos::config::PolicyConfig::from_toml(&t).unwrap();
        assert_eq!(cfg.name(), "trr");
        assert!(t.contains("quantum = 512") && t.contains("physical"));
        assert_eq!(
            cairn_qos::config::PolicyConfig::from_toml(&policy_toml("fifo").unwrap())
                .unwrap()
                .name(),
            "fifo"
        );
        for bad in [
            "orr",
            "orr-log",
            "orr-log-0",
            "xrr-log-8",
            "orr-up-8",
            "orr-log-8-9",
        ] {
            assert!(policy_toml(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_report_sets_each_policy_against_fifo_and_the_seed() {
        let case = IorCase::parse("ssf-14x8").unwrap();
        let runs = vec![
            IorRun {
                policy: "fifo".into(),
                case,
                mib_s: 200.0,
                threads_mib_s: vec![1.0, 3.0],
            },
            IorRun {
                policy: "orr-log-256".into(),
                case,
                mib_s: 100.0,
                threads_mib_s: vec![0.5, 1.5],
            },
        ];
        let md = render_markdown("setup", &runs);
        assert!(
            md.contains(
                "| ssf-14x8 | orr-log-256 | 100.0 | 0.50 | 0.5 | 1.5 | 1089.4 | 0.48 | 2260.4 |"
            ),
            "{md}"
        );
        assert!(md.contains("| ssf-14x8 | fifo | 200.0 | 1.00 |"), "{md}");
        assert_eq!(
            seed_total("fifo", &IorCase::parse("fpp-2x1").unwrap()),
            None
        );
    }
}
