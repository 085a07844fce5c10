//! What the up OSDs report of themselves through their admin channel: usage (`df`), the PGs
//! they lead (`pg dump`, `pg stats`, `pg objects`) and I/O counters. Gathered here for
//! `status`, `health`, `df`, the OSD maintenance checks and the recovery study.

use cairn_client::Client;

use crate::mon_link::up_osds;

/// A PG as its primary reports it in `pg dump`: id, state and acting set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PgRow {
    /// `POOL.SEED`.
    pub pgid: String,
    /// `active+clean`, `active+degraded`, `down`, ...
    pub state: String,
    /// The acting set as printed (`[0,2,1]`, with `(up:[...])` when it differs).
    pub acting: String,
}

impl PgRow {
    /// Parses one `pg dump` line (`PGID STATE [ACTING] HEAD LES ENTRIES`); `None` otherwise.
    pub fn parse(line: &str) -> Option<PgRow> {
        let mut f = line.split_whitespace();
        let (pgid, state, acting) = (f.next()?, f.next()?, f.next()?);
        acting.starts_with('[').then(|| PgRow {
            pgid: pgid.to_string(),
            state: state.to_string(),
            acting: acting.to_string(),
        })
    }
}

pub use cairn_proto::admin::OsdUsage;

/// PGs by state, as the up OSDs report the PGs they lead.
pub type PgStates = std::collections::BTreeMap<String, u64>;

/// Every PG the up OSDs lead, as their `pg dump` rows; an OSD that does not answer is named on
/// stderr.
pub async fn pg_rows(client: &Client) -> Vec<PgRow> {
    let mut rows = Vec::new();
    for osd in up_osds(client) {
        match client.tell(osd, &["pg".into(), "dump".into()]).await {
            Ok(text) => rows.extend(text.lines().filter_map(PgRow::parse)),
            Err(e) => eprintln!("osd.{osd}: {e}"),
        }
    }
    rows
}

/// The up OSDs' `df` replies, by OSD (one that does not answer is left out).
pub async fn usage_of(client: &Client) -> std::collections::BTreeMap<i32, OsdUsage> {
    let mut usage = std::collections::BTreeMap::new();
    for osd in up_osds(client) {
        let reply = client.tell(osd, &["df".into()]).await;
        if let Some(u) = reply.ok().as_deref().and_then(OsdUsage::parse) {
            usage.insert(osd, u);
        }
    }
    usage
}

/// Asks every up OSD for the states of the PGs it leads and sums them.
pub async fn pg_states_of(client: &Client) -> PgStates {
    let mut states = PgStates::new();
    for osd in up_osds(client) {
        if let Ok(text) = client.tell(osd, &["pg".into(), "stats".into()]).await {
            for l in text.lines() {
                if let Some((state, n)) = l.rsplit_once(' ') {
                    *states.entry(state.to_string()).or_default() += n.parse::<u64>().unwrap_or(0);
                }
            }
        }
    }
    states
}

/// PGs in `states` that are not active+clean.
pub fn unclean(states: &PgStates) -> u64 {
    states
        .iter()
        .filter(|(s, _)| s.as_str() != "active+clean")
        .map(|(_, n)| n)
        .sum()
}

/// Object copies summed over the primaries' `pg objects` replies (Ceph's degraded and
/// misplaced counts in `ceph status`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ObjectCopies {
    /// Objects of the PGs.
    pub objects: u64,
    /// Copies their pools want.
    pub copies: u64,
    /// Copies missing.
    pub degraded: u64,
    /// Copies serving away from their up set.
    pub misplaced: u64,
}

impl ObjectCopies {
    /// Adds every well-formed `PGID objects copies degraded misplaced` line of `text`.
    pub fn add_lines(&mut self, text: &str) {
        for line in text.lines() {
            let n: Vec<u64> = line
                .split_whitespace()
                .skip(1)
                .filter_map(|w| w.parse().ok())
                .collect();
            if let [objects, copies, degraded, misplaced] = n[..] {
                self.objects += objects;
                self.copies += copies;
                self.degraded += degraded;
                self.misplaced += misplaced;
            }
        }
    }

    /// The status lines: the objects, then the degraded and misplaced copies as shares of
    /// the copies wanted, when there are any.
    pub fn lines(&self) -> Vec<String> {
        let share = |n: u64| 100.0 * n as f64 / self.copies.max(1) as f64;
        let mut out = vec![format!("objects: {}", self.objects)];
        if self.degraded > 0 {
            out.push(format!(
                "{}/{} objects degraded ({:.3}%)",
                self.degraded,
                self.copies,
                share(self.degraded)
            ));
        }
        if self.misplaced > 0 {
            out.push(format!(
                "{}/{} objects misplaced ({:.3}%)",
                self.misplaced,
                self.copies,
                share(self.misplaced)
            ));
        }
        out
    }
}

/// Degraded and misplaced object copies summed over the PGs of `osds` (what `cairn status`
/// reports); an OSD that does not answer counts nothing.
pub async fn object_copies_of(client: &Client, osds: &[i32]) -> ObjectCopies {
    let mut copies = ObjectCopies::default();
    for &osd in osds {
        if let Ok(text) = client.tell(osd, &["pg".into(), "objects".into()]).await {
            copies.add_lines(&text);
        }
    }
    copies
}

/// Sums over `osds` the two counters that the admin command `command` (`io`: client ops and
/// bytes served; `recovery`: objects and bytes recovered as primary) answers; an OSD that does
/// not answer counts nothing.
pub(crate) async fn counter_pair_totals(
    client: &Client,
    osds: &[i32],
    command: &str,
) -> (u64, u64) {
    let mut total = (0u64, 0u64);
    for &osd in osds {
        if let Ok(t) = client.tell(osd, &[command.to_string()]).await {
            let v: Vec<u64> = t
                .split_whitespace()
                .filter_map(|x| x.parse().ok())
                .collect();
            if let [a, b] = v[..] {
                total.0 += a;
                total.1 += b;
            }
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_copies_sum_the_primaries_lines_and_read_as_cephs() {
        let mut c = ObjectCopies::default();
        c.add_lines("1.0 10 30 0 0\n1.1 20 60 20 5\n");
        c.add_lines("2.0 5 10 0 10\nnot a line\n2.1 1 2 3\n");
        assert_eq!(
            c,
            ObjectCopies {
                objects: 35,
                copies: 100,
                degraded: 20,
                misplaced: 15
            }
        );
        assert_eq!(
            c.lines(),
            [
                "objects: 35",
                "20/100 objects degraded (20.000%)",
                "15/100 objects misplaced (15.000%)"
            ]
        );
        let clean = ObjectCopies {
            objects: 3,
            copies: 9,
            ..Default::default()
        };
        assert_eq!(clean.lines(), ["objects: 3"]);
    }
}
