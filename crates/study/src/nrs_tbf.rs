//! TBF (Lustre's token bucket filter) on real OSDs: rules that cap what matches them, by client
//! and by operation, as an operator would use them to keep a few clients, or all writes, from
//! taking a cluster's whole bandwidth. Each case runs under FIFO and under the TBF rule; the
//! report puts each group of clients' mean throughput beside the limit the rule sets.
//!
//! An OSD enforces a rule's rate on its own (as each Lustre OST does), so a client whose
//! objects spread over N OSDs may move up to N times the rate: the limit reported is the
//! rate times the block size times the OSDs.

use std::fmt::Write as _;

/// What a case's rule matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TbfCase {
    /// Half of the clients (all writing) capped by a `client={...}` rule, each in a bucket of
    /// its own.
    ByClient,
    /// Every client's writes capped by an `op=write` rule, half of the clients writing and
    /// half reading.
    ByOp,
}

impl TbfCase {
    /// The case's name in reports.
    pub fn name(self) -> &'static str {
        match self {
            TbfCase::ByClient => "by-client",
            TbfCase::ByOp => "by-op",
        }
    }

    /// The names of the two groups of clients: the one the rule matches first.
    pub fn groups(self) -> [&'static str; 2] {
        match self {
            TbfCase::ByClient => ["capped writers", "free writers"],
            TbfCase::ByOp => ["writers (capped)", "readers"],
        }
    }
}

/// The `osd_op_queue_config` TOML of a TBF policy with one rule `expr` at `rate_rps` requests
/// a second per client.
pub fn rule_toml(expr: &str, rate_rps: f64) -> Result<String, String> {
    if !(rate_rps.is_finite() && rate_rps > 0.0) {
        return Err(format!(
            "a TBF rate of {rate_rps} requests a second is not positive"
        ));
    }
    if expr.contains('"') || expr.contains('\n') {
        return Err(format!("`{expr}` is no rule expression"));
    }
    Ok(format!(
        "name = \"tbf\"\nrules = [{{ name = \"study\", expr = \"{expr}\", rate_rps = {rate_rps:?}, key = \"client\" }}]"
    ))
}

/// The expression of `case`'s rule: the capped clients' ids, or writes.
pub fn rule_expr(case: TbfCase, capped_ids: &[u64]) -> String {
    match case {
        TbfCase::ByClient => {
            let ids: Vec<String> = capped_ids.iter().map(u64::to_string).collect();
            format!("client={{{}}}", ids.join(","))
        }
        TbfCase::ByOp => "op=write".to_string(),
    }
}

/// One group's result in one run.
#[derive(Debug, Clone, PartialEq)]
pub struct TbfRow {
    /// The case.
    pub case: TbfCase,
    /// `fifo` or `tbf`.
    pub policy: String,
    /// The group's name ([`TbfCase::groups`]).
    pub group: String,
    /// Each client's throughput, MiB/s.
    pub clients_mib_s: Vec<f64>,
    /// The most the rule lets one client of the group move, MiB/s (None: not limited).
    pub limit_mib_s: Option<f64>,
}

impl TbfRow {
    /// The group's mean throughput per client, MiB/s.
    pub fn mean(&self) -> f64 {
        crate::nrs::mean_stdev(&self.clients_mib_s).0
    }
}

/// The report: per case, each group's mean under FIFO and under TBF, the limit, and the
/// share of the limit used.
pub fn render_markdown(setup: &str, rows: &[TbfRow]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# TBF rules on real OSDs\n");
    let _ = writeln!(s, "{setup}\n");
    let _ = writeln!(
        s,
        "| case | group | clients | fifo MiB/s per client | tbf MiB/s per client | limit MiB/s | tbf / limit | tbf / fifo |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|");
    for tbf in rows.iter().filter(|r| r.policy == "tbf") {
        let fifo = rows
            .iter()
            .find(|r| r.policy == "fifo" && r.case == tbf.case && r.group == tbf.group)
            .map(TbfRow::mean);
        let cell =
            |v: Option<f64>, digits: usize| v.map_or("-".to_string(), |v| format!("{v:.digits$}"));
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {:.1} | {} | {} | {} |",
            tbf.case.name(),
            tbf.group,
            tbf.clients_mib_s.len(),
            cell(fifo, 1),
            tbf.mean(),
            cell(tbf.limit_mib_s, 1),
            cell(tbf.limit_mib_s.map(|l| tbf.mean() / l), 2),
            cell(fifo.filter(|f| *f > 0.0).map(|f| tbf.mean() / f), 2),
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_name_the_capped_clients_or_the_writes() {
        assert_eq!(rule_expr(TbfCase::ByClient, &[12, 7]), "client={12,7}");
        assert_eq!(rule_expr(TbfCase::ByOp, &[12]), "op=write");
        let toml = rule_toml("client={12,7}", 5.0).unwrap();
        assert!(toml.contains("name = \"tbf\""), "{toml}");
        assert!(toml.contains("expr = \"client={12,7}\""), "{toml}");
        assert!(toml.contains("rate_rps = 5.0"), "{toml}");
        assert!(rule_toml("op=write", 0.0).is_err());
        assert!(rule_toml("op=write", f64::NAN).is_err());
        assert!(rule_toml("op=\"x\"", 1.0).is_err());
    }

    #[test]
    fn the_report_sets_each_group_beside_its_limit_and_fifo() {
        let row = |policy: &str, group: &str, v: Vec<f64>, limit: Option<f64>| TbfRow {
            case: TbfCase::ByClient,
            policy: policy.into(),
            group: group.into(),
            clients_mib_s: v,
            limit_mib_s: limit,
        };
        let rows = vec![
            row("fifo", "capped writers", vec![10.0, 12.0], None),
            row("fifo", "free writers", vec![11.0, 11.0], None),
            row("tbf", "capped writers", vec![4.0, 4.0], Some(5.0)),
            row("tbf", "free writers", vec![18.0, 18.0], None),
        ];
        let md = render_markdown("setup", &rows);
        assert!(
            md.contains("| by-client | capped writers | 2 | 11.0 | 4.0 | 5.0 | 0.80 | 0.36 |"),
            "{md}"
        );
        assert!(
            md.contains("| by-client | free writers | 2 | 11.0 | 18.0 | - | - | 1.64 |"),
            "{md}"
        );
    }
}
