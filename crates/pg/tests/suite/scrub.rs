//! Scrub comparison against its rules, on random copies: whatever the copies hold, an object
//! is reported exactly when its copies disagree or one is unreadable; the authoritative state
//! is never an unreadable one, is held by as many readable copies as any other state (and by
//! the primary when the primary ties for it), and the copies reported bad are exactly those
//! that differ from it. After a repair (every bad copy given the authoritative state) a second
//! comparison finds nothing left to repair.

use std::collections::BTreeMap;

use cairn_pg::scrub::{compare, CopyState, ObjectDigest, ScrubMap};
use cairn_pg::Eversion;
use proptest::prelude::*;

/// A copy's state drawn from a small alphabet, so that copies often agree: 0 absent, 1-3 a
/// present object of one of three contents, 4 unreadable.
fn state(code: u8) -> Option<CopyState> {
    match code {
        0 => None,
        1..=3 => Some(CopyState::Present(ObjectDigest {
            version: Eversion::new(1, u64::from(code)),
            size: 100 * u64::from(code),
            attrs_crc: u32::from(code),
            data_crc: Some(u32::from(code) * 7),
            omap_crc: Some(0),
        })),
        _ => Some(CopyState::Unreadable("checksum mismatch".into())),
    }
}

/// Copies (OSD ids 0..copies) holding objects o0..o5 with the drawn states.
fn maps(codes: &[Vec<u8>]) -> BTreeMap<i32, ScrubMap> {
    codes
        .iter()
        .enumerate()
        .map(|(osd, objects)| {
            let map = objects
                .iter()
                .enumerate()
                .filter_map(|(i, &c)| state(c).map(|s| (format!("o{i}"), s)))
                .collect();
            (osd as i32, map)
        })
        .collect()
}

fn state_of(maps: &BTreeMap<i32, ScrubMap>, osd: i32, obj: &str) -> CopyState {
    maps[&osd].get(obj).cloned().unwrap_or(CopyState::Absent)
}

proptest! {
    #[test]
    fn the_comparison_follows_its_rules(
        codes in prop::collection::vec(prop::collection::vec(0u8..5, 6), 1..5),
        primary_pick in 0usize..5,
    ) {
        let maps = maps(&codes);
        let primary = (primary_pick % codes.len()) as i32;
        let found = compare(&maps, primary);
        let names: Vec<String> = (0..6).map(|i| format!("o{i}")).collect();
        for name in &names {
            let states: BTreeMap<i32, CopyState> =
                maps.keys().map(|&o| (o, state_of(&maps, o, name))).collect();
            let unreadable = states.values().any(|s| matches!(s, CopyState::Unreadable(_)));
            let first = states.values().next().unwrap();
            let disagree = states.values().any(|s| s != first);
            let inc = found.iter().find(|i| &i.object == name);
            let present_anywhere = states.values().any(|s| *s != CopyState::Absent);
            prop_assert_eq!(
                inc.is_some(),
                present_anywhere && (unreadable || disagree),
                "{}: {:?}", name, states
            );
            let Some(inc) = inc else { continue };
            let votes = |want: &CopyState| states.values().filter(|s| *s == want).count();
            match &inc.authoritative {
                None => prop_assert!(states.values().all(|s| matches!(s, CopyState::Unreadable(_)))),
                Some(auth) => {
                    prop_assert!(!matches!(auth, CopyState::Unreadable(_)));
                    for s in states.values().filter(|s| !matches!(s, CopyState::Unreadable(_))) {
                        prop_assert!(votes(auth) >= votes(s), "{:?} outvoted by {:?}", auth, s);
                    }
                    if votes(&states[&primary]) == votes(auth)
                        && !matches!(states[&primary], CopyState::Unreadable(_))
                    {
                        prop_assert_eq!(auth, &states[&primary], "a tie goes to the primary");
                    }
                }
            }
            for (osd, s) in &states {
                prop_assert_eq!(
                    inc.bad.contains_key(osd),
                    inc.authoritative.as_ref() != Some(s),
                    "osd.{}", osd
                );
            }
        }
        // Repair: every bad copy takes the authoritative state (absent: removed).
        let mut repaired = maps.clone();
        for inc in &found {
            let Some(auth) = &inc.authoritative else { continue };
            for osd in inc.bad.keys() {
                let map = repaired.get_mut(osd).unwrap();
                match auth {
                    CopyState::Absent => { map.remove(&inc.object); }
                    s => { map.insert(inc.object.clone(), s.clone()); }
                }
            }
        }
        let left = compare(&repaired, primary);
        prop_assert!(left.iter().all(|i| i.authoritative.is_none()), "{:?}", left);
    }
}
