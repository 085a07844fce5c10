//! `cairn crush ...`: placement tooling over a crushtool text map (or a `crushtool --dump`
//! JSON file): test mappings like crushtool, build, compile/decompile; pool-level placement in
//! `placement`.

mod map_file;
mod placement;

use std::path::PathBuf;

use anyhow::{bail, Context};
use cairn_crush::build::{build, Layer};
use cairn_crush::hash::hash32_2;
use cairn_crush::{text, BucketAlg, Workspace};
use clap::{Args, Subcommand};

use map_file::load_map;

use crate::convert::sat_u32;

/// Arguments of `cairn crush`.
#[derive(Args)]
pub struct CrushArgs {
    #[command(subcommand)]
    command: CrushCommand,
}

#[derive(Subcommand)]
enum CrushCommand {
    /// Print mappings exactly as `crushtool --test --show-mappings` does.
    Test(TestArgs),
    /// Build a map like `crushtool --build --num_osds N type alg size ...` and print its text.
    Build {
        /// Number of devices.
        #[arg(long = "num-osds", alias = "num_osds")]
        num_osds: usize,
        /// Layers as triples: TYPE ALG SIZE (size 0 = one bucket holding everything).
        #[arg(required = true, num_args = 3..)]
        layers: Vec<String>,
        /// Write the map here instead of stdout.
        #[arg(short, long)]
        output: Option<PathBuf>,
    },
    /// Map an object name to its PG and OSDs, like `osdmaptool --test-map-object`.
    MapObject(placement::MapObjectArgs),
    /// Every PG's up set and primary, like `osdmaptool --test-map-pgs-dump`.
    PgDump(placement::PgDumpArgs),
    /// PG spread of a pool: per OSD, per failure domain, primaries (seed 002's columns).
    Analyze(placement::AnalyzeArgs),
    /// Plan an exception table bringing every OSD within one PG of its target.
    Balance(placement::BalanceArgs),
    /// Replicas moved between two maps, against the minimum any placement needs.
    Diff(placement::DiffArgs),
    /// Parse a map (text or JSON) and print it back as text.
    Decompile {
        /// Map file.
        #[arg(long)]
        map: PathBuf,
    },
}

#[derive(Args)]
struct TestArgs {
    /// Map file: crushtool text, or `crushtool --dump` JSON (by .json extension).
    #[arg(long)]
    map: PathBuf,
    /// Rule id.
    #[arg(long)]
    rule: i32,
    /// Number of replicas (result size).
    #[arg(long = "num-rep")]
    num_rep: usize,
    /// First input.
    #[arg(long = "min-x", default_value_t = 0)]
    min_x: i32,
    /// Last input (inclusive).
    #[arg(long = "max-x", default_value_t = 1023)]
    max_x: i32,
    /// Override a device's reweight: `--weight OSD W` with W in [0, 1].
    #[arg(long, num_args = 2, value_names = ["OSD", "W"], action = clap::ArgAction::Append)]
    weight: Vec<String>,
    /// Hash inputs with this pool id first, as crushtool --pool-id does.
    #[arg(long = "pool-id")]
    pool_id: Option<i64>,
    /// Print each mapping (the only output mode; accepted for crushtool compatibility).
    #[arg(long = "show-mappings")]
    show_mappings: bool,
    /// Apply the map's choose_args set with this index (-1 = default set). crushtool --test
    /// ignores choose_args, so by default this does too; OSDMap placement uses the pool's set.
    #[arg(long = "choose-args", allow_hyphen_values = true)]
    choose_args: Option<i64>,
}

/// Runs one `cairn crush` subcommand.
pub fn run(args: CrushArgs) -> anyhow::Result<()> {
    match args.command {
        CrushCommand::Test(t) => test(t),
        CrushCommand::MapObject(a) => placement::map_object(a),
        CrushCommand::PgDump(a) => placement::pg_dump(a),
        CrushCommand::Analyze(a) => placement::analyze_cmd(a),
        CrushCommand::Balance(a) => placement::balance_cmd(a),
        CrushCommand::Diff(a) => placement::diff_cmd(a),
        CrushCommand::Build {
            num_osds,
            layers,
            output,
        } => {
            if layers.len() % 3 != 0 {
                bail!("layers come in triples: TYPE ALG SIZE");
            }
            let mut parsed = Vec::new();
            for chunk in layers.chunks(3) {
                let alg = BucketAlg::from_name(&chunk[1])
                    .with_context(|| format!("unknown bucket algorithm `{}`", chunk[1]))?;
                let size = chunk[2]
                    .parse()
                    .with_context(|| format!("bad layer size `{}`", chunk[2]))?;
                parsed.push(Layer {
                    type_name: chunk[0].clone(),
                    alg,
                    size,
                });
            }
            let map = build(num_osds, &parsed)?;
            let out = text::write(&map);
            match output {
                Some(path) => std::fs::write(&path, out)
                    .with_context(|| format!("writing {}", path.display()))?,
                None => print!("{out}"),
            }
            Ok(())
        }
        CrushCommand::Decompile { map } => {
            print!("{}", text::write(&load_map(&map)?));
            Ok(())
        }
    }
}

fn test(t: TestArgs) -> anyhow::Result<()> {
    let map = load_map(&t.map)?;
    if !map.rules.contains_key(&t.rule) {
        bail!("rule {} does not exist in {}", t.rule, t.map.display());
    }
    if t.min_x > t.max_x {
        bail!("--min-x {} is greater than --max-x {}", t.min_x, t.max_x);
    }
    let mut reweights = map.default_reweights();
    for pair in t.weight.chunks(2) {
        let osd: usize = pair[0]
            .parse()
            .with_context(|| format!("bad device id `{}`", pair[0]))?;
        let w: f64 = pair[1]
            .parse()
            .with_context(|| format!("bad weight `{}`", pair[1]))?;
        if osd >= reweights.len() {
            bail!("device {osd} does not exist");
        }
        reweights[osd] = sat_u32((w * 65536.0).clamp(0.0, 65536.0));
    }
    let seed = t.pool_id.map(pool_seed).transpose()?;
    let choose_args = t.choose_args.and_then(|i| map.dense_choose_args(i));
    let mut ws = Workspace::new();
    let mut out = Vec::with_capacity(t.num_rep);
    let mut line = String::new();
    let stdout = std::io::stdout();
    let mut lock = std::io::BufWriter::new(stdout.lock());
    for x in t.min_x..=t.max_x {
        let real_x = match seed {
            Some(pool) => hash32_2(x as u32, pool) as i32,
            None => x,
        };
        map.do_rule(
            t.rule,
            real_x,
            t.num_rep,
            &reweights,
            choose_args.as_deref(),
            &mut ws,
            &mut out,
        );
        line.clear();
        use std::fmt::Write as _;
        let _ = write!(line, "CRUSH rule {} x {} [", t.rule, x);
        for (i, item) in out.iter().enumerate() {
            if i > 0 {
                line.push(',');
            }
            let _ = write!(line, "{item}");
        }
        line.push_str("]\n");
        use std::io::Write as _;
        lock.write_all(line.as_bytes())?;
    }
    let _ = t.show_mappings;
    Ok(())
}

/// The 32 bits crushtool hashes a `--pool-id` as (Ceph's `int`: a negative id stands for its
/// two's complement); an id that fits neither an i32 nor a u32 is refused, not truncated.
fn pool_seed(pool: i64) -> anyhow::Result<u32> {
    u32::try_from(pool)
        .or_else(|_| i32::try_from(pool).map(i32::cast_unsigned))
        .map_err(|_| anyhow::anyhow!("--pool-id {pool} does not fit in 32 bits"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_ids_hash_as_32_bits_and_wider_ones_are_refused() {
        assert_eq!(pool_seed(3).unwrap(), 3);
        assert_eq!(pool_seed(-1).unwrap(), u32::MAX);
        assert_eq!(pool_seed(i64::from(u32::MAX)).unwrap(), u32::MAX);
        // 2^32 + 3 once hashed as pool 3.
        assert!(pool_seed((1 << 32) + 3).is_err());
        assert!(pool_seed(i64::from(i32::MIN) - 1).is_err());
    }
}
