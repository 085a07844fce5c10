//! `cairn pg ls [STATE]`, `pg ls-by-osd N`, `pg ls-by-primary N`, `pg ls-by-pool NAME` (Ceph's):
//! the rows of `pg dump` that concern one state, one OSD or one pool. Only selects; the rows
//! come from the primaries as `pg dump` gathers them.

use anyhow::bail;
use cairn_clustermap::ClusterMap;

/// Which `pg dump` rows a listing keeps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PgSelect {
    /// Every PG, or those whose state has every `+`-separated word given (`degraded`,
    /// `active+clean`).
    State(Option<String>),
    /// PGs whose acting set holds the OSD.
    Osd(i32),
    /// PGs the OSD serves as acting primary.
    Primary(i32),
    /// PGs of the pool (by id).
    Pool(i64),
}

impl PgSelect {
    /// The selection `cairn pg WHAT [ARG]` asks for, checked against `map` (an unknown OSD or
    /// pool, or a missing argument, is an error naming it); `None` when `what` is no listing.
    pub fn parse(what: &str, arg: Option<&str>, map: &ClusterMap) -> anyhow::Result<Option<Self>> {
        let osd = |arg: Option<&str>| -> anyhow::Result<i32> {
            let Some(a) = arg else {
                bail!("`cairn pg {what}` needs an OSD id")
            };
            let id: i32 = a
                .trim_start_matches("osd.")
                .parse()
                .map_err(|_| anyhow::anyhow!("`{a}` is not an OSD id"))?;
            match map.osds.contains_key(&id) {
                true => Ok(id),
                false => bail!("no osd.{id} in the map"),
            }
        };
        Ok(Some(match what {
            "ls" => PgSelect::State(arg.map(str::to_string)),
            "ls-by-osd" => PgSelect::Osd(osd(arg)?),
            "ls-by-primary" => PgSelect::Primary(osd(arg)?),
            "ls-by-pool" => {
                let Some(name) = arg else {
                    bail!("`cairn pg ls-by-pool` needs a pool name")
                };
                match map.placement.pool_named(name) {
                    Some(p) => PgSelect::Pool(p.id),
                    None => bail!("no pool `{name}` (see `cairn pool ls`)"),
                }
            }
            _ => return Ok(None),
        }))
    }

    /// Whether the `pg dump` row `row` (`PGID STATE [ACTING](up:[UP]) HEAD LES LOG`, the
    /// acting set possibly split at its spaces) is kept.
    pub fn keeps(&self, row: &str) -> bool {
        let fields: Vec<&str> = row.split_whitespace().collect();
        let (Some(pgid), Some(state)) = (fields.first(), fields.get(1)) else {
            return false;
        };
        let acting = acting_of(&fields[2..]);
        match self {
            PgSelect::State(None) => true,
            PgSelect::State(Some(want)) => {
                let have: Vec<&str> = state.split('+').collect();
                want.split('+').all(|w| have.contains(&w))
            }
            PgSelect::Osd(o) => acting.contains(o),
            PgSelect::Primary(o) => acting.first() == Some(o),
            PgSelect::Pool(p) => {
                pgid.split_once('.')
                    .and_then(|(pool, _)| pool.parse::<i64>().ok())
                    == Some(*p)
            }
        }
    }
}

/// The acting set at the start of a row's remaining fields: the OSD ids inside the first
/// `[...]`, before any `(up:[...])`.
fn acting_of(rest: &[&str]) -> Vec<i32> {
    let joined = rest.join("");
    let Some(open) = joined.find('[') else {
        return Vec::new();
    };
    let Some(close) = joined[open..].find(']') else {
        return Vec::new();
    };
    joined[open + 1..open + close]
        .split(',')
        .filter_map(|o| o.trim().parse().ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROWS: [&str; 4] = [
        "1.0 active+clean [0, 1, 2] 5'10 5 10",
        "1.1 active+degraded [2, 1] 5'3 5 3",
        "2.0 active+remapped+backfill_wait [1, 0](up:[1, 3]) 7'2 7 2",
        "2.1 peering [3, 2] 0'0 0 0",
    ];

    fn kept(s: &PgSelect) -> Vec<&'static str> {
        ROWS.iter()
            .filter(|r| s.keeps(r))
            .map(|r| r.split(' ').next().unwrap())
            .collect()
    }

    #[test]
    fn rows_are_kept_by_state_words_osd_primary_and_pool() {
        assert_eq!(kept(&PgSelect::State(None)).len(), 4);
        assert_eq!(kept(&PgSelect::State(Some("degraded".into()))), ["1.1"]);
        assert_eq!(
            kept(&PgSelect::State(Some("active".into()))),
            ["1.0", "1.1", "2.0"]
        );
        assert_eq!(
            kept(&PgSelect::State(Some("backfill_wait+remapped".into()))),
            ["2.0"]
        );
        assert!(kept(&PgSelect::State(Some("clean+degraded".into()))).is_empty());
        assert_eq!(kept(&PgSelect::Osd(0)), ["1.0", "2.0"]);
        assert_eq!(
            kept(&PgSelect::Osd(3)),
            ["2.1"],
            "up-only OSDs are not acting"
        );
        assert_eq!(kept(&PgSelect::Primary(2)), ["1.1"]);
        assert_eq!(kept(&PgSelect::Pool(2)), ["2.0", "2.1"]);
        assert!(!PgSelect::State(None).keeps(""));
        assert!(!PgSelect::Osd(0).keeps("garbage"));
    }

    #[test]
    fn a_listing_names_what_it_cannot_find() {
        let map = crate::health::test_monitor(3, 8).map().clone();
        let parse = |what: &str, arg: Option<&str>| PgSelect::parse(what, arg, &map);
        assert_eq!(
            parse("ls-by-osd", Some("osd.1")).unwrap(),
            Some(PgSelect::Osd(1))
        );
        assert_eq!(
            parse("ls-by-primary", Some("2")).unwrap(),
            Some(PgSelect::Primary(2))
        );
        assert_eq!(
            parse("ls-by-pool", Some("data")).unwrap(),
            Some(PgSelect::Pool(1))
        );
        assert_eq!(parse("dump", None).unwrap(), None);
        let err = |what: &str, arg: Option<&str>| parse(what, arg).unwrap_err().to_string();
        assert_eq!(err("ls-by-osd", Some("9")), "no osd.9 in the map");
        assert_eq!(err("ls-by-osd", Some("x")), "`x` is not an OSD id");
        assert!(err("ls-by-osd", None).contains("needs an OSD id"));
        assert!(err("ls-by-pool", Some("nope")).contains("no pool `nope`"));
    }
}
