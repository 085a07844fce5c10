//! Cluster-wide flags an operator sets in the map to hold back part of the cluster's
//! self-management for a while (Ceph's `ceph osd set FLAG`): maintenance without data
//! movement (`noout`, `noup`), recovery kept off peak hours (`norecover`, `nobackfill`,
//! `norebalance`), scrubs held (`noscrub`, `nodeep-scrub`), a flapping OSD kept up
//! (`nodown`), booting OSDs kept down (`noup`) or out (`noin`), client I/O held (`pauserd`,
//! `pausewr`).
//!
//! This module only names the flags and says what each holds back; the monitor, the OSDs and
//! the client each honour the ones that concern them.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// One cluster flag. The wire and text names are Ceph's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum MapFlag {
    /// The monitor marks no down OSD out (its data stays where it is while it is away).
    #[serde(rename = "noout")]
    NoOut,
    /// The monitor marks no booting OSD in: new OSDs join out, auto-out ones stay out.
    #[serde(rename = "noin")]
    NoIn,
    /// The monitor marks no booting OSD up: it is registered (a new one out, marked in when
    /// it boots after the flag is unset) and boots again once the flag is unset.
    #[serde(rename = "noup")]
    NoUp,
    /// The monitor marks no OSD down on failure reports or missing beacons (an operator's
    /// `osd down` still does).
    #[serde(rename = "nodown")]
    NoDown,
    /// OSDs recover no copy from the PG log in the background; a PG whose copies lag serves
    /// from its complete copies meanwhile (degraded), where it has min_size of them.
    #[serde(rename = "norecover")]
    NoRecover,
    /// OSDs backfill no copy (a copy beyond the PG log, or a new one).
    #[serde(rename = "nobackfill")]
    NoBackfill,
    /// OSDs fill no copy of a PG that is only misplaced (it has its pool's size of complete
    /// copies serving): data moved by a change of placement waits, degraded PGs recover.
    #[serde(rename = "norebalance")]
    NoRebalance,
    /// OSDs start no scheduled shallow scrub, and stop a scheduled one at its next chunk
    /// (an operator's `pg scrub` still runs).
    #[serde(rename = "noscrub")]
    NoScrub,
    /// OSDs start no scheduled deep scrub, and stop a scheduled one at its next chunk (an
    /// operator's `pg deep-scrub` still runs).
    #[serde(rename = "nodeep-scrub")]
    NoDeepScrub,
    /// Clients hold their reads until the flag is unset (or the operation times out).
    #[serde(rename = "pauserd")]
    PauseRd,
    /// Clients hold their writes until the flag is unset (or the operation times out).
    #[serde(rename = "pausewr")]
    PauseWr,
}

impl MapFlag {
    /// Every flag, in the order `status` lists them.
    pub const ALL: [MapFlag; 11] = [
        MapFlag::NoOut,
        MapFlag::NoIn,
        MapFlag::NoUp,
        MapFlag::NoDown,
        MapFlag::NoRecover,
        MapFlag::NoBackfill,
        MapFlag::NoRebalance,
        MapFlag::NoScrub,
        MapFlag::NoDeepScrub,
        MapFlag::PauseRd,
        MapFlag::PauseWr,
    ];

    /// The flags an operator may also set on single OSDs (Ceph's `osd add-noup`,
    /// `add-nodown`, `add-noin`, `add-noout`): each holds back, for those OSDs alone, what the
    /// cluster-wide flag holds back for all.
    pub const PER_OSD: [MapFlag; 4] = [
        MapFlag::NoUp,
        MapFlag::NoDown,
        MapFlag::NoIn,
        MapFlag::NoOut,
    ];

    /// Ceph's name of the flag (`noout`, `nodeep-scrub`, ...).
    pub fn name(self) -> &'static str {
        match self {
            MapFlag::NoOut => "noout",
            MapFlag::NoIn => "noin",
            MapFlag::NoUp => "noup",
            MapFlag::NoDown => "nodown",
            MapFlag::NoRecover => "norecover",
            MapFlag::NoBackfill => "nobackfill",
            MapFlag::NoRebalance => "norebalance",
            MapFlag::NoScrub => "noscrub",
            MapFlag::NoDeepScrub => "nodeep-scrub",
            MapFlag::PauseRd => "pauserd",
            MapFlag::PauseWr => "pausewr",
        }
    }

    /// What the flag holds back while it is set, in a few words (for `cairn health detail`).
    pub fn effect(self) -> &'static str {
        match self {
            MapFlag::NoOut => "down OSDs are not marked out",
            MapFlag::NoIn => "booting OSDs are not marked in",
            MapFlag::NoUp => "booting OSDs are not marked up",
            MapFlag::NoDown => "failed OSDs are not marked down",
            MapFlag::NoRecover => "copies within the PG log's reach are not recovered",
            MapFlag::NoBackfill => "copies beyond the PG log's reach are not backfilled",
            MapFlag::NoRebalance => "misplaced PGs are not moved",
            MapFlag::NoScrub => "scheduled scrubs do not run",
            MapFlag::NoDeepScrub => "scheduled deep scrubs do not run",
            MapFlag::PauseRd => "client reads are held",
            MapFlag::PauseWr => "client writes are held",
        }
    }

    /// The flags an operator's word names: a flag's own name, or `pause` for `pauserd` and
    /// `pausewr` together (as Ceph's `osd set pause`).
    pub fn parse_word(word: &str) -> Result<Vec<MapFlag>, UnknownFlag> {
        match word {
            "pause" => Ok(vec![MapFlag::PauseRd, MapFlag::PauseWr]),
            other => other.parse().map(|f| vec![f]),
        }
    }
}

impl fmt::Display for MapFlag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A word that names no cluster flag.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown flag `{0}` (known: pause, {names})", names = known_names())]
pub struct UnknownFlag(pub String);

fn known_names() -> String {
    MapFlag::ALL
        .iter()
        .map(|f| f.name())
        .collect::<Vec<_>>()
        .join(", ")
}

impl FromStr for MapFlag {
    type Err = UnknownFlag;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        MapFlag::ALL
            .into_iter()
            .find(|f| f.name() == s)
            .ok_or_else(|| UnknownFlag(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_flag_reads_back_from_its_name_and_its_wire_form() {
        for flag in MapFlag::ALL {
            assert_eq!(flag.name().parse::<MapFlag>(), Ok(flag));
            let wire = serde_json::to_string(&flag).unwrap();
            assert_eq!(wire, format!("\"{}\"", flag.name()));
            assert_eq!(serde_json::from_str::<MapFlag>(&wire).unwrap(), flag);
        }
    }

    #[test]
    fn pause_names_both_pause_flags_and_an_unknown_word_is_refused_with_the_known_ones() {
        assert_eq!(
            MapFlag::parse_word("pause"),
            Ok(vec![MapFlag::PauseRd, MapFlag::PauseWr])
        );
        let err = MapFlag::parse_word("noot").unwrap_err();
        assert_eq!(err, UnknownFlag("noot".into()));
        let text = err.to_string();
        assert!(
            text.contains("`noot`") && text.contains("nodeep-scrub"),
            "{text}"
        );
    }
}
