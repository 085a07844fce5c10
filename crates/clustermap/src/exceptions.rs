//! The exception table: per-PG overrides of CRUSH placement (Ceph's `pg_upmap_items` and
//! `pg_upmap_primary`), with a text format and the equivalent `ceph osd` commands.
//!
//! Owns the representation, parsing and printing, and the exact Ceph semantics of applying an
//! item list to a raw CRUSH result. It never decides placement itself (the balancer does).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::error::MapError;
use crate::pool::PgId;

/// Placement exceptions for one cluster map.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Exceptions {
    /// Per PG: pairs `(from, to)` replacing OSD `from` of the CRUSH result with `to`.
    pub upmap_items: BTreeMap<PgId, Vec<(i32, i32)>>,
    /// Per PG: the replica that acts as primary (moved to the front), without moving data.
    pub upmap_primary: BTreeMap<PgId, i32>,
}

impl Exceptions {
    /// Number of PGs carrying any exception.
    pub fn len(&self) -> usize {
        let mut pgs: Vec<&PgId> = self.upmap_items.keys().collect();
        pgs.extend(self.upmap_primary.keys());
        pgs.sort();
        pgs.dedup();
        pgs.len()
    }

    /// True when there is no exception at all.
    pub fn is_empty(&self) -> bool {
        self.upmap_items.is_empty() && self.upmap_primary.is_empty()
    }

    /// Applies `pg_upmap_items` to a raw CRUSH result exactly as Ceph's `_apply_upmap` does:
    /// pairs in order; a pair is skipped if its target is already present or is out
    /// (`is_out(osd)`), and replaces only the first occurrence of its source.
    pub fn apply_items(&self, pg: PgId, raw: &mut [i32], is_out: impl Fn(i32) -> bool) {
        let Some(items) = self.upmap_items.get(&pg) else {
            return;
        };
        for &(from, to) in items {
            if raw.contains(&to) || is_out(to) {
                continue;
            }
            if let Some(slot) = raw.iter_mut().find(|o| **o == from) {
                *slot = to;
            }
        }
    }

    /// Moves the chosen primary (if it is a member) to the front of an up set.
    pub fn apply_primary(&self, pg: PgId, up: &mut [i32]) {
        if let Some(&primary) = self.upmap_primary.get(&pg) {
            if let Some(pos) = up.iter().position(|&o| o == primary) {
                up[..=pos].rotate_right(1);
            }
        }
    }

    /// The table as text, one PG per line: `pg_upmap_items 1.7 3 15 8 22` and
    /// `pg_upmap_primary 1.7 15`.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        for (pg, items) in &self.upmap_items {
            let _ = write!(out, "pg_upmap_items {pg}");
            for (a, b) in items {
                let _ = write!(out, " {a} {b}");
            }
            out.push('\n');
        }
        for (pg, osd) in &self.upmap_primary {
            let _ = writeln!(out, "pg_upmap_primary {pg} {osd}");
        }
        out
    }

    /// The table as `ceph osd pg-upmap-items` / `ceph osd pg-upmap-primary` commands.
    pub fn to_ceph_commands(&self) -> String {
        let mut out = String::new();
        for (pg, items) in &self.upmap_items {
            let _ = write!(out, "ceph osd pg-upmap-items {pg}");
            for (a, b) in items {
                let _ = write!(out, " {a} {b}");
            }
            out.push('\n');
        }
        for (pg, osd) in &self.upmap_primary {
            let _ = writeln!(out, "ceph osd pg-upmap-primary {pg} {osd}");
        }
        out
    }

    /// Parses the text form; also accepts the `ceph osd pg-upmap-*` command form (as written by
    /// `osdmaptool --upmap`), blank lines and `#` comments.
    pub fn parse(text: &str) -> Result<Self, MapError> {
        let mut table = Exceptions::default();
        for (i, raw_line) in text.lines().enumerate() {
            let line_no = i + 1;
            let bad = |message: String| MapError::BadExceptions {
                line: line_no,
                message,
            };
            let line = raw_line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let mut words: Vec<&str> = line.split_whitespace().collect();
            if words.len() >= 2 && words[0] == "ceph" && words[1] == "osd" {
                words.drain(..2);
            }
            let kind = words[0];
            let pg: PgId = words
                .get(1)
                .ok_or_else(|| bad("missing PG id".into()))?
                .parse()
                .map_err(bad)?;
            let nums: Result<Vec<i32>, _> = words[2..].iter().map(|w| w.parse::<i32>()).collect();
            let nums = nums.map_err(|_| bad("OSD ids must be integers".into()))?;
            if nums.iter().any(|&o| o < 0) {
                return Err(bad("OSD ids must be non-negative".into()));
            }
            match kind {
                "pg_upmap_items" | "pg-upmap-items" => {
                    if nums.is_empty() || nums.len() % 2 != 0 {
                        return Err(bad("pg_upmap_items needs FROM TO pairs".into()));
                    }
                    let pairs = nums.chunks(2).map(|p| (p[0], p[1])).collect();
                    if table.upmap_items.insert(pg, pairs).is_some() {
                        return Err(bad(format!("PG {pg} listed twice")));
                    }
                }
                "pg_upmap_primary" | "pg-upmap-primary" => {
                    if nums.len() != 1 {
                        return Err(bad("pg_upmap_primary needs exactly one OSD".into()));
                    }
                    if table.upmap_primary.insert(pg, nums[0]).is_some() {
                        return Err(bad(format!("PG {pg} listed twice")));
                    }
                }
                other => return Err(bad(format!("unknown exception kind `{other}`"))),
            }
        }
        Ok(table)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pg(seed: u32) -> PgId {
        PgId { pool: 1, seed }
    }

    #[test]
    fn items_apply_like_ceph_including_skips() {
        let mut t = Exceptions::default();
        t.upmap_items.insert(pg(0), vec![(1, 5), (2, 3), (9, 7)]);
        let mut raw = vec![1, 2, 3];
        t.apply_items(pg(0), &mut raw, |_| false);
        // (1,5) applies; (2,3) skipped because 3 is present; (9,7) has no source.
        assert_eq!(raw, vec![5, 2, 3]);
        let mut raw = vec![1, 2, 3];
        t.apply_items(pg(0), &mut raw, |o| o == 5);
        assert_eq!(raw, vec![1, 2, 3], "an out target is ignored");
    }

    #[test]
    fn text_round_trips_and_accepts_ceph_commands() {
        let mut t = Exceptions::default();
        t.upmap_items.insert(pg(0x1a), vec![(1, 5), (2, 6)]);
        t.upmap_primary.insert(pg(3), 7);
        assert_eq!(Exceptions::parse(&t.to_text()).unwrap(), t);
        assert_eq!(Exceptions::parse(&t.to_ceph_commands()).unwrap(), t);
        assert_eq!(t.len(), 2);
    }

    #[test]
    fn malformed_tables_name_the_line() {
        for bad in [
            "pg_upmap_items 1.0 1",
            "pg_upmap_items 1.0 a b",
            "pg_upmap_items x 1 2",
            "pg_upmap_primary 1.0 1 2",
            "bogus 1.0 1 2",
            "pg_upmap_items 1.0 1 2\npg_upmap_items 1.0 3 4",
            "pg_upmap_items 1.0 -1 2",
        ] {
            match Exceptions::parse(bad) {
                Err(MapError::BadExceptions { line, .. }) => assert!(line >= 1),
                other => panic!("{bad:?} gave {other:?}"),
            }
        }
    }

    #[test]
    fn primary_is_rotated_to_front() {
        let mut t = Exceptions::default();
        t.upmap_primary.insert(pg(0), 3);
        let mut up = vec![1, 2, 3];
        t.apply_primary(pg(0), &mut up);
        assert_eq!(up, vec![3, 1, 2]);
    }
}
