//! A client-side model of objects for the thrash test: each object's data, extended
//! attributes and omap, and the operations that change them, with the OSD's semantics (writes,
//! truncates and omap sets create the object; removals of an absent object are NotFound).
//!
//! An operation that failed in the client may or may not have been applied, so the model
//! keeps, per object, every state it may be in; a read of the whole object narrows that to
//! what it saw, and must find one of them.

use std::collections::BTreeMap;

use cairn_client::{Client, ClientError};
use rand::Rng;

/// One object as a client sees it.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct ObjState {
    /// Its bytes.
    pub data: Vec<u8>,
    /// User extended attributes.
    pub xattrs: BTreeMap<String, Vec<u8>>,
    /// Omap entries.
    pub omap: BTreeMap<Vec<u8>, Vec<u8>>,
}

/// What an object may be: absent (`None`) or a state.
pub type Possible = Vec<Option<ObjState>>;

/// A mutation the writers send.
#[derive(Clone, Debug)]
pub enum Mutation {
    /// Replace the data.
    WriteFull(Vec<u8>),
    /// Write at an offset (zero-filling a gap).
    Write(u64, Vec<u8>),
    /// Write at the end.
    Append(Vec<u8>),
    /// Cut or zero-extend.
    Truncate(u64),
    /// Set one extended attribute (only on an object that exists).
    SetXattr(String, Vec<u8>),
    /// Set omap entries.
    OmapSet(Vec<(Vec<u8>, Vec<u8>)>),
    /// Remove omap keys (NotFound on an absent object).
    OmapRemove(Vec<Vec<u8>>),
    /// Remove the object (NotFound when absent).
    Remove,
}

/// Objects stay below this size, far under the OSD's object size limit.
const MAX_MODEL_BYTES: usize = 2 << 20;

impl Mutation {
    /// The kind's name, for tallies.
    pub fn name(&self) -> &'static str {
        match self {
            Mutation::WriteFull(_) => "write_full",
            Mutation::Write(..) => "write",
            Mutation::Append(_) => "append",
            Mutation::Truncate(_) => "truncate",
            Mutation::SetXattr(..) => "setxattr",
            Mutation::OmapSet(_) => "omap_set",
            Mutation::OmapRemove(_) => "omap_rm",
            Mutation::Remove => "remove",
        }
    }

    /// A random mutation that is well defined on every state in `possible` (no xattr on an
    /// object that may be absent) and keeps objects under [`MAX_MODEL_BYTES`].
    pub fn random(rng: &mut impl Rng, possible: &Possible) -> Mutation {
        let may_be_absent = possible.iter().any(Option::is_none);
        let largest = possible
            .iter()
            .flatten()
            .map(|s| s.data.len())
            .max()
            .unwrap_or(0);
        let bytes = |rng: &mut dyn rand::RngCore, n: usize| -> Vec<u8> {
            let mut v = vec![0u8; n];
            rng.fill_bytes(&mut v);
            v
        };
        let size = |rng: &mut dyn rand::RngCore| -> usize {
            [0, 1, 100, 4096, 10_000, 65_536, 300_000][rng.next_u32() as usize % 7]
        };
        match rng.random_range(0..100) {
            _ if largest > MAX_MODEL_BYTES => Mutation::Truncate(rng.random_range(0..200_000)),
            0..25 => {
                let n = size(rng);
                Mutation::WriteFull(bytes(rng, n))
            }
            25..40 => {
                let at = rng.random_range(0..(largest as u64 + 70_000));
                let n = 1 + size(rng) / 4;
                Mutation::Write(at, bytes(rng, n))
            }
            40..50 => {
                let n = 1 + size(rng) / 8;
                Mutation::Append(bytes(rng, n))
            }
            50..57 => Mutation::Truncate(rng.random_range(0..(largest as u64 + 10_000))),
            57..70 if !may_be_absent => {
                let k = format!("attr{}", rng.random_range(0..6));
                let n = rng.random_range(0..300);
                Mutation::SetXattr(k, bytes(rng, n))
            }
            57..85 => {
                let n = rng.random_range(1..20);
                Mutation::OmapSet(
                    (0..n)
                        .map(|_| {
                            let k = format!("key{:03}", rng.random_range(0..200)).into_bytes();
                            let n = rng.random_range(0..200);
                            (k, bytes(rng, n))
                        })
                        .collect(),
                )
            }
            85..94 => {
                let n = rng.random_range(1..10);
                Mutation::OmapRemove(
                    (0..n)
                        .map(|_| format!("key{:03}", rng.random_range(0..200)).into_bytes())
                        .collect(),
                )
            }
            _ => Mutation::Remove,
        }
    }

    /// The state after this mutation on `before`, or `None` when it is NotFound there.
    pub fn apply(&self, before: &Option<ObjState>) -> Option<Option<ObjState>> {
        let mut s = before.clone().unwrap_or_default();
        match self {
            Mutation::Remove => return before.as_ref().map(|_| None),
            Mutation::OmapRemove(keys) => {
                before.as_ref()?;
                for k in keys {
                    s.omap.remove(k);
                }
            }
            Mutation::SetXattr(k, v) => {
                before.as_ref()?;
                s.xattrs.insert(k.clone(), v.clone());
            }
            Mutation::WriteFull(d) => s.data = d.clone(),
            Mutation::Write(at, d) => {
                let at = *at as usize;
                if s.data.len() < at + d.len() {
                    s.data.resize(at + d.len(), 0);
                }
                s.data[at..at + d.len()].copy_from_slice(d);
            }
            Mutation::Append(d) => s.data.extend_from_slice(d),
            Mutation::Truncate(n) => s.data.resize(*n as usize, 0),
            Mutation::OmapSet(entries) => {
                for (k, v) in entries {
                    s.omap.insert(k.clone(), v.clone());
                }
            }
        }
        Some(Some(s))
    }

    /// Sends the mutation to object `name` of `pool`.
    pub async fn send(&self, client: &Client, pool: &str, name: &str) -> Result<(), ClientError> {
        match self {
            Mutation::WriteFull(d) => client.write_full(pool, name, d).await.map(drop),
            Mutation::Write(at, d) => client.write(pool, name, *at, d).await.map(drop),
            Mutation::Append(d) => client.append(pool, name, d).await.map(drop),
            Mutation::Truncate(n) => client.truncate(pool, name, *n).await.map(drop),
            Mutation::SetXattr(k, v) => client.set_xattr(pool, name, k, v).await,
            Mutation::OmapSet(e) => client.omap_set(pool, name, e).await.map(drop),
            Mutation::OmapRemove(k) => client.omap_remove(pool, name, k).await.map(drop),
            Mutation::Remove => client.remove(pool, name).await,
        }
    }
}

/// What the model concludes from a mutation's outcome.
pub enum Verdict {
    /// The object may now be any of these.
    Now(Possible),
    /// The outcome is impossible in every state the object may have been in.
    Impossible(String),
}

/// The states `possible` narrows or widens to after `m` answered `result`: an acknowledged
/// mutation was applied (to whichever state was real), NotFound means it was absent, and any
/// other failure may or may not have been applied.
pub fn after(possible: &Possible, m: &Mutation, result: &Result<(), ClientError>) -> Verdict {
    let mut next: Possible = Vec::new();
    let mut push = |s: Option<ObjState>| {
        if !next.contains(&s) {
            next.push(s);
        }
    };
    match result {
        Ok(()) => possible
            .iter()
            .filter_map(|s| m.apply(s))
            .for_each(&mut push),
        Err(ClientError::Invalid(why)) => {
            return Verdict::Impossible(format!("{} refused as invalid: {why}", m.name()))
        }
        Err(ClientError::NotFound(_)) => possible
            .iter()
            .filter(|s| m.apply(s).is_none())
            .cloned()
            .for_each(&mut push),
        Err(_) => {
            possible.iter().cloned().for_each(&mut push);
            possible
                .iter()
                .filter_map(|s| m.apply(s))
                .for_each(&mut push);
        }
    }
    if next.is_empty() {
        return Verdict::Impossible(format!(
            "{} answered {result:?}, impossible in all {} states the object may be in",
            m.name(),
            possible.len()
        ));
    }
    Verdict::Now(next)
}

/// Reads the whole object (data, extended attributes, every omap entry); `Ok(None)` when it
/// does not exist. Any other failure is returned.
pub async fn read_state(
    client: &Client,
    pool: &str,
    name: &str,
) -> Result<Option<ObjState>, ClientError> {
    let data = match client.read(pool, name).await {
        Ok(d) => d,
        Err(ClientError::NotFound(_)) => return Ok(None),
        Err(e) => return Err(e),
    };
    let xattrs = client.get_xattrs(pool, name).await?.into_iter().collect();
    let mut omap = BTreeMap::new();
    let mut after: Vec<u8> = Vec::new();
    loop {
        let (page, more) = client.omap_list(pool, name, &after, b"", 1000).await?;
        if let Some((k, _)) = page.last() {
            after = k.clone();
        }
        let empty = page.is_empty();
        omap.extend(page);
        if !more || empty {
            break;
        }
    }
    Ok(Some(ObjState { data, xattrs, omap }))
}

/// A short description of a state, for failure messages.
pub fn describe(s: &Option<ObjState>) -> String {
    match s {
        None => "absent".into(),
        Some(s) => format!(
            "{} bytes crc {:08x}, xattrs {:?}, {} omap entries",
            s.data.len(),
            crc_fast::crc32_iscsi(&s.data),
            s.xattrs.keys().collect::<Vec<_>>(),
            s.omap.len()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_model_follows_the_osd_semantics() {
        let w = Mutation::Write(3, vec![9, 9])
            .apply(&None)
            .unwrap()
            .unwrap();
        assert_eq!(w.data, vec![0, 0, 0, 9, 9]);
        assert!(Mutation::Remove.apply(&None).is_none());
        assert_eq!(Mutation::Remove.apply(&Some(w.clone())), Some(None));
        let cut = Mutation::Truncate(1).apply(&Some(w)).unwrap().unwrap();
        assert_eq!(cut.data, vec![0]);
        let failed = after(
            &vec![Some(cut)],
            &Mutation::Remove,
            &Err(ClientError::Timeout {
                object: "o".into(),
                timeout_ms: 1,
                last: String::new(),
            }),
        );
        let Verdict::Now(both) = failed else {
            panic!("a failed remove is possible");
        };
        assert_eq!(
            both.len(),
            2,
            "a failed remove may or may not have happened"
        );
        assert!(matches!(
            after(&vec![None], &Mutation::Remove, &Ok(())),
            Verdict::Impossible(_)
        ));
    }
}
