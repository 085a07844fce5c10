//! Seed 001's CRR-N experiment ("Network Request Scheduler Scale Testing Results"): groups of
//! dd streams per client, 10 clients x 10 streams and 9 clients x 11 streams + 1 client x 1
//! stream, writing and reading, under FIFO ("vanilla") and CRR-N; per-client throughput and
//! its standard deviation. The seed's figures are carried as data (they are its measurements
//! on a Lustre cluster of 2 OSS x 4 OSTs and cannot be derived); the `cairn` binary runs the
//! streams on a real cluster and hands this module what each client moved.

use std::fmt::Write as _;

/// One client's share of a run.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientResult {
    /// Its index.
    pub client: usize,
    /// Its concurrent streams.
    pub streams: usize,
    /// Throughput over the measured window, MiB/s.
    pub mib_s: f64,
}

/// One run: a policy, a case and an operation.
#[derive(Debug, Clone, PartialEq)]
pub struct NrsRun {
    /// Scheduler policy on every OSD (`fifo`, `crrn`, ...).
    pub policy: String,
    /// The case: `10x10` or `9x11+1x1`.
    pub case: String,
    /// `write` or `read`.
    pub op: String,
    /// Each client's throughput.
    pub clients: Vec<ClientResult>,
}

/// Mean, population standard deviation, and the single-stream client's throughput of a run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Summary {
    /// Mean per-client throughput of the many-stream clients, MiB/s.
    pub mean: f64,
    /// Their standard deviation, MiB/s.
    pub stdev: f64,
    /// Throughput of the client with fewer streams than the others (the 1 x 1 client).
    pub lone: Option<f64>,
    /// All clients together, MiB/s.
    pub total: f64,
}

impl NrsRun {
    /// The run's summary: the lone client (the one with the fewest streams, when the others
    /// have more) is left out of the mean and deviation, as the seed leaves it out.
    pub fn summary(&self) -> Summary {
        let most = self.clients.iter().map(|c| c.streams).max().unwrap_or(0);
        let lone = self.clients.iter().find(|c| c.streams < most);
        let many: Vec<f64> = self
            .clients
            .iter()
            .filter(|c| c.streams == most)
            .map(|c| c.mib_s)
            .collect();
        let (mean, stdev) = mean_stdev(&many);
        Summary {
            mean,
            stdev,
            lone: lone.map(|c| c.mib_s),
            total: self.clients.iter().map(|c| c.mib_s).sum(),
        }
    }
}

/// Mean and population standard deviation (0 and 0 for no values).
pub fn mean_stdev(values: &[f64]) -> (f64, f64) {
    if values.is_empty() {
        return (0.0, 0.0);
    }
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    let var = values.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n;
    (mean, var.sqrt())
}

/// The seed's figures for one run: stdev, the lone client and the total, MB/sec as dd reports.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SeedRow {
    /// Standard deviation of per-client throughput (lone client left out).
    pub stdev: f64,
    /// The lone client's throughput.
    pub lone: Option<f64>,
    /// Throughput of all clients.
    pub total: f64,
}

/// The seed's figures for `policy` (`fifo` stands for its "vanilla"), `case` and `op`.
pub fn seed(policy: &str, case: &str, op: &str) -> Option<SeedRow> {
    let row = |stdev, lone, total| Some(SeedRow { stdev, lone, total });
    match (policy, case, op) {
        ("fifo", "10x10", "write") => row(19.361, None, 3469.0),
        ("crrn", "10x10", "write") => row(0.425, None, 3537.5),
        ("fifo", "9x11+1x1", "write") => row(22.756, Some(49.2), 3473.9),
        ("crrn", "9x11+1x1", "write") => row(0.491, Some(167.0), 3444.0),
        ("fifo", "10x10", "read") => row(6.156, None, 2193.8),
        ("crrn", "10x10", "read") => row(7.976, None, 2054.6),
        ("fifo", "9x11+1x1", "read") => row(7.490, Some(161.0), 2229.2),
        ("crrn", "9x11+1x1", "read") => row(8.455, Some(169.0), 2106.6),
        _ => None,
    }
}

/// Streams per client of a case: `10x10` is ten clients of ten streams, `9x11+1x1` nine of
/// eleven and one of one; any `AxB[+CxD...]` is read the same way.
pub fn parse_case(case: &str) -> Result<Vec<usize>, String> {
    let mut out = Vec::new();
    for group in case.split('+') {
        let (clients, streams) = group
            .split_once('x')
            .ok_or_else(|| format!("`{group}` is not CLIENTSxSTREAMS"))?;
        let clients: usize = clients
            .parse()
            .map_err(|_| format!("`{clients}` is not a client count"))?;
        let streams: usize = streams
            .parse()
            .map_err(|_| format!("`{streams}` is not a stream count"))?;
        if clients == 0 || streams == 0 || clients > 64 || streams > 64 {
            return Err(format!("`{group}`: 1-64 clients of 1-64 streams"));
        }
        out.extend(std::iter::repeat_n(streams, clients));
    }
    if out.len() > 64 {
        return Err(format!("{case}: at most 64 clients in all"));
    }
    Ok(out)
}

/// The report: a row per run with the seed's figures beside, stdev also as a share of the
/// mean (the comparable figure across machines of different speed).
pub fn render_markdown(setup: &str, runs: &[NrsRun]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# Seed 001 on real OSDs: CRR-N against FIFO\n");
    let _ = writeln!(s, "{setup}\n");
    let _ = writeln!(
        s,
        "| op | case | policy | mean MiB/s | stdev MiB/s | stdev/mean | lone client MiB/s | total MiB/s | seed stdev MB/sec | seed stdev/mean | seed lone | seed total |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|---|---|---|");
    for r in runs {
        let m = r.summary();
        let pct = |stdev: f64, mean: f64| match mean > 0.0 {
            true => format!("{:.2}%", 100.0 * stdev / mean),
            false => "-".into(),
        };
        let seed = seed(&r.policy, &r.case, &r.op);
        let clients = parse_case(&r.case).map_or(1, |c| c.len()).max(1) as f64;
        let (seed_stdev, seed_pct, seed_lone, seed_total) = match seed {
            Some(x) => {
                let lone_n = f64::from(u8::from(x.lone.is_some()));
                let seed_mean = (x.total - x.lone.unwrap_or(0.0)) / (clients - lone_n).max(1.0);
                (
                    format!("{:.3}", x.stdev),
                    pct(x.stdev, seed_mean),
                    x.lone.map_or("-".into(), |l| format!("{l:.1}")),
                    format!("{:.1}", x.total),
                )
            }
            None => ("-".into(), "-".into(), "-".into(), "-".into()),
        };
        let _ = writeln!(
            s,
            "| {} | {} | {} | {:.1} | {:.2} | {} | {} | {:.1} | {} | {} | {} | {} |",
            r.op,
            r.case,
            r.policy,
            m.mean,
            m.stdev,
            pct(m.stdev, m.mean),
            m.lone.map_or("-".into(), |l| format!("{l:.1}")),
            m.total,
            seed_stdev,
            seed_pct,
            seed_lone,
            seed_total
        );
    }
    s
}

/// Every client of every run as CSV: `op,case,policy,client,streams,mib_s`.
pub fn csv(runs: &[NrsRun]) -> String {
    let mut s = String::from("op,case,policy,client,streams,mib_s\n");
    for r in runs {
        for c in &r.clients {
            let _ = writeln!(
                s,
                "{},{},{},{},{},{:.3}",
                r.op, r.case, r.policy, c.client, c.streams, c.mib_s
            );
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cases_parse_into_streams_per_client() {
        assert_eq!(parse_case("10x10").unwrap(), vec![10; 10]);
        let mixed = parse_case("9x11+1x1").unwrap();
        assert_eq!(mixed.len(), 10);
        assert_eq!(mixed[9], 1);
        assert!(mixed[..9].iter().all(|s| *s == 11));
        for bad in ["", "10", "x3", "0x1", "2x0", "65x1", "9x11+", "a x b"] {
            assert!(parse_case(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn the_lone_client_is_left_out_of_the_deviation() {
        let mut clients: Vec<ClientResult> = (0..9)
            .map(|i| ClientResult {
                client: i,
                streams: 11,
                mib_s: if i % 2 == 0 { 10.0 } else { 12.0 },
            })
            .collect();
        clients.push(ClientResult {
            client: 9,
            streams: 1,
            mib_s: 3.0,
        });
        let run = NrsRun {
            policy: "fifo".into(),
            case: "9x11+1x1".into(),
            op: "write".into(),
            clients,
        };
        let m = run.summary();
        assert_eq!(m.lone, Some(3.0));
        assert!((m.mean - 98.0 / 9.0).abs() < 1e-9);
        assert!(m.stdev > 0.9 && m.stdev < 1.0);
        assert!((m.total - 101.0).abs() < 1e-9);
        let table = render_markdown("setup", std::slice::from_ref(&run));
        assert!(table.contains("| write | 9x11+1x1 | fifo |"));
        assert!(
            table.contains("22.756"),
            "the seed's figure beside: {table}"
        );
        assert_eq!(csv(&[run]).lines().count(), 11);
        assert_eq!(mean_stdev(&[]), (0.0, 0.0));
        assert_eq!(mean_stdev(&[4.0, 4.0]), (4.0, 0.0));
    }
}
