//! Scrub comparison: given what every copy of a PG holds of a range of objects (its scrub
//! map: each object's version, size and digests, or that it could not be read), which objects
//! disagree, what the copies should hold (the authoritative state) and which copies differ
//! from it. The OSD reads the maps and repairs; this module only decides.
//!
//! The authoritative state of an object is the one most copies share among the copies that
//! could be read (absence counts as a state: an object most copies lack should not exist);
//! a tie goes to the primary's state when it is among the tied, else to the state of the
//! lowest-numbered OSD among them. A copy that could not be read (a block failing its
//! checksum) never votes. With no readable copy there is no authoritative state and the object
//! cannot be repaired.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::log::Eversion;

/// What one copy holds of one present object. Digests are crc32c; `data_crc` and `omap_crc`
/// are read only by a deep scrub (a shallow scrub compares metadata).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ObjectDigest {
    /// The version the object records (its last write's log entry).
    pub version: Eversion,
    /// Data size in bytes.
    pub size: u64,
    /// crc32c over its xattrs, names and values, in name order.
    pub attrs_crc: u32,
    /// crc32c of its data (deep scrub).
    pub data_crc: Option<u32>,
    /// crc32c over its omap entries in key order (deep scrub).
    pub omap_crc: Option<u32>,
}

/// One copy's state of one object.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum CopyState {
    /// The copy does not have the object.
    Absent,
    /// The copy has it, with these digests.
    Present(ObjectDigest),
    /// Reading it failed its checksum (the store returned no bytes): why.
    Unreadable(String),
}

/// One copy's scrub map of a range of objects: the objects it has (an object it lacks is not
/// listed and counts as [`CopyState::Absent`]).
pub type ScrubMap = BTreeMap<String, CopyState>;

/// An object whose copies disagree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inconsistency {
    /// The object.
    pub object: String,
    /// What every copy should hold (never [`CopyState::Unreadable`]); None when no copy could
    /// be read.
    pub authoritative: Option<CopyState>,
    /// The copies that differ from it, with what they hold.
    pub bad: BTreeMap<i32, CopyState>,
}

/// Compares the scrub maps of every copy (`maps`, by OSD) of one range of objects, `primary`
/// being the PG's primary; the objects whose copies disagree, in name order.
pub fn compare(maps: &BTreeMap<i32, ScrubMap>, primary: i32) -> Vec<Inconsistency> {
    let names: BTreeSet<&String> = maps.values().flat_map(|m| m.keys()).collect();
    let mut out = Vec::new();
    for name in names {
        let states: BTreeMap<i32, &CopyState> = maps
            .iter()
            .map(|(&osd, m)| (osd, m.get(name).unwrap_or(&CopyState::Absent)))
            .collect();
        let first = states.values().next().copied();
        let agree = states.values().all(|s| Some(*s) == first);
        if agree && !matches!(first, Some(CopyState::Unreadable(_))) {
            continue;
        }
        let authoritative = authoritative(&states, primary);
        let bad = states
            .iter()
            .filter(|(_, s)| authoritative.as_ref() != Some(**s))
            .map(|(&osd, s)| (osd, (*s).clone()))
            .collect();
        out.push(Inconsistency {
            object: name.clone(),
            authoritative,
            bad,
        });
    }
    out
}

/// The state most readable copies share (ties: the primary's, else the lowest OSD's).
fn authoritative(states: &BTreeMap<i32, &CopyState>, primary: i32) -> Option<CopyState> {
    let mut votes: BTreeMap<&CopyState, usize> = BTreeMap::new();
    for s in states.values() {
        if !matches!(s, CopyState::Unreadable(_)) {
            *votes.entry(*s).or_default() += 1;
        }
    }
    let most = *votes.values().max()?;
    let tied = |s: &CopyState| votes.get(s) == Some(&most);
    if let Some(&p) = states.get(&primary).filter(|s| tied(s)) {
        return Some(p.clone());
    }
    states.values().find(|s| tied(s)).map(|s| (*s).clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn present(version: u32, data_crc: u32) -> CopyState {
        CopyState::Present(ObjectDigest {
            version: Eversion::new(3, version.into()),
            size: 4096,
            attrs_crc: 7,
            data_crc: Some(data_crc),
            omap_crc: Some(0),
        })
    }

    fn maps(copies: &[(i32, &[(&str, CopyState)])]) -> BTreeMap<i32, ScrubMap> {
        copies
            .iter()
            .map(|(osd, objs)| {
                let m = objs
                    .iter()
                    .map(|(n, s)| (n.to_string(), s.clone()))
                    .collect();
                (*osd, m)
            })
            .collect()
    }

    #[test]
    fn copies_that_agree_are_not_reported() {
        let a = present(1, 10);
        let m = maps(&[
            (0, &[("x", a.clone()), ("y", present(2, 11))]),
            (1, &[("x", a.clone()), ("y", present(2, 11))]),
            (2, &[("x", a), ("y", present(2, 11))]),
        ]);
        assert!(compare(&m, 0).is_empty());
        assert!(compare(&BTreeMap::new(), 0).is_empty());
    }

    #[test]
    fn the_majority_wins_and_every_other_copy_is_bad() {
        // The primary's data differs from both replicas': the replicas win.
        let m = maps(&[
            (0, &[("x", present(1, 99))]),
            (1, &[("x", present(1, 10))]),
            (2, &[("x", present(1, 10))]),
        ]);
        let got = compare(&m, 0);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].authoritative, Some(present(1, 10)));
        assert_eq!(
            got[0].bad,
            BTreeMap::from([(0, present(1, 99))]),
            "only the primary is bad"
        );
    }

    #[test]
    fn absence_is_a_state_an_object_most_copies_lack_should_not_exist() {
        let extra = maps(&[(0, &[]), (1, &[("x", present(1, 10))]), (2, &[])]);
        let got = compare(&extra, 0);
        assert_eq!(got[0].authoritative, Some(CopyState::Absent));
        assert_eq!(got[0].bad.keys().copied().collect::<Vec<_>>(), vec![1]);
        let missing = maps(&[
            (0, &[("x", present(1, 10))]),
            (1, &[]),
            (2, &[("x", present(1, 10))]),
        ]);
        let got = compare(&missing, 0);
        assert_eq!(got[0].authoritative, Some(present(1, 10)));
        assert_eq!(got[0].bad, BTreeMap::from([(1, CopyState::Absent)]));
    }

    #[test]
    fn unreadable_copies_never_vote_and_are_always_bad() {
        let broken = CopyState::Unreadable("checksum mismatch".into());
        // One readable copy against two unreadable ones: it wins.
        let m = maps(&[
            (0, &[("x", broken.clone())]),
            (1, &[("x", broken.clone())]),
            (2, &[("x", present(1, 10))]),
        ]);
        let got = compare(&m, 0);
        assert_eq!(got[0].authoritative, Some(present(1, 10)));
        assert_eq!(got[0].bad.len(), 2);
        // Every copy unreadable, even when they agree: reported, with no authoritative state.
        let all = maps(&[(0, &[("x", broken.clone())]), (1, &[("x", broken.clone())])]);
        let got = compare(&all, 0);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].authoritative, None);
        assert_eq!(got[0].bad.len(), 2);
    }

    #[test]
    fn a_tie_goes_to_the_primary_else_to_the_lowest_osd() {
        let m = maps(&[(4, &[("x", present(1, 10))]), (2, &[("x", present(1, 20))])]);
        assert_eq!(compare(&m, 4)[0].authoritative, Some(present(1, 10)));
        assert_eq!(compare(&m, 2)[0].authoritative, Some(present(1, 20)));
        // The primary unreadable: the lowest readable OSD's state.
        let broken = CopyState::Unreadable("bad".into());
        let m = maps(&[
            (0, &[("x", broken)]),
            (5, &[("x", present(1, 10))]),
            (3, &[("x", present(1, 20))]),
        ]);
        assert_eq!(compare(&m, 0)[0].authoritative, Some(present(1, 20)));
    }

    #[test]
    fn every_name_of_any_copy_is_compared_in_order() {
        let m = maps(&[
            (0, &[("b", present(1, 1))]),
            (1, &[("a", present(1, 1)), ("b", present(1, 1))]),
            (2, &[("c", present(1, 1)), ("b", present(1, 1))]),
        ]);
        let names: Vec<String> = compare(&m, 0).into_iter().map(|i| i.object).collect();
        assert_eq!(names, vec!["a", "c"]);
    }
}
