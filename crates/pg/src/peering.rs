//! Peering: from the logs of every OSD that may hold a PG, choose the authoritative history and
//! what each copy must do to match it.
//!
//! Authoritative: the log from the newest interval (`last_epoch_started`), then the newest head,
//! then the longest history (oldest tail), then the primary's, then the lowest OSD id — the
//! same preferences as Ceph's `find_best_info`. A copy whose history diverges keeps the common
//! prefix and rolls the rest back; a copy that fell behind the authoritative log's tail cannot
//! be recovered entry by entry and needs a backfill.

use std::cmp::Reverse;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::PgError;
use crate::log::{Eversion, LogEntry, ObjectId, OpKind, PgLog};

/// One OSD's copy as it reports itself during peering.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerLog {
    /// The OSD.
    pub osd: i32,
    /// Last map epoch in which this copy was part of an active acting set.
    pub last_epoch_started: u64,
    /// Its log.
    pub log: PgLog,
    /// Objects its log names that the copy does not hold yet (it was activated with them
    /// missing and their recovery has not reached it), with the version it needs (None: the
    /// object is deleted). A copy with missing objects is never clean, however new its log.
    #[serde(default)]
    pub missing: BTreeMap<ObjectId, Option<Eversion>>,
}

/// What one copy must do.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Recovery {
    /// Already matches the authoritative log.
    Clean,
    /// Recover these objects from the authoritative copy (None = delete it), after rolling
    /// back the divergent entries.
    Log {
        /// Object -> version to obtain (None: remove the object).
        missing: BTreeMap<ObjectId, Option<Eversion>>,
        /// Entries to roll back, newest first.
        divergent: Vec<LogEntry>,
    },
    /// Behind the authoritative log's tail: copy the whole PG.
    Backfill,
}

/// The result of peering.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeeringPlan {
    /// OSD whose log is authoritative.
    pub authoritative: i32,
    /// Its head: every copy ends at this version.
    pub head: Eversion,
    /// Per OSD, what it must do.
    pub recovery: BTreeMap<i32, Recovery>,
}

impl PeeringPlan {
    /// OSDs that need nothing.
    pub fn clean_osds(&self) -> Vec<i32> {
        self.recovery
            .iter()
            .filter(|(_, r)| **r == Recovery::Clean)
            .map(|(&o, _)| o)
            .collect()
    }
}

/// Plans peering for a PG whose primary is `primary`.
pub fn plan(peers: &[PeerLog], primary: i32) -> Result<PeeringPlan, PgError> {
    let auth = peers
        .iter()
        .max_by_key(|p| {
            (
                p.last_epoch_started,
                p.log.head(),
                Reverse(p.log.tail()),
                p.osd == primary,
                Reverse(p.osd),
            )
        })
        .ok_or(PgError::NoLogs)?;
    let mut recovery = BTreeMap::new();
    for peer in peers {
        let r = if peer.osd == auth.osd {
            Recovery::Clean
        } else if created_empty(peer, &auth.log) {
            Recovery::Backfill
        } else {
            recovery_for(&peer.log, &auth.log)
        };
        recovery.insert(peer.osd, with_own_missing(r, &peer.missing, &auth.log));
    }
    Ok(PeeringPlan {
        authoritative: auth.osd,
        head: auth.log.head(),
        recovery,
    })
}

/// `r` with the objects a copy reported `missing` added: each at the version the
/// authoritative log names for it now (a later write there supersedes the one the copy
/// missed), or at the copy's own record where that log no longer names the object. What the
/// log comparison found comes first (it knows the copy's divergent history); a backfill
/// copies everything anyway.
fn with_own_missing(
    r: Recovery,
    missing: &BTreeMap<ObjectId, Option<Eversion>>,
    auth: &PgLog,
) -> Recovery {
    if missing.is_empty() {
        return r;
    }
    let (mut all, divergent) = match r {
        Recovery::Backfill => return Recovery::Backfill,
        Recovery::Clean => (BTreeMap::new(), Vec::new()),
        Recovery::Log { missing, divergent } => (missing, divergent),
    };
    for (object, own) in missing {
        let want = match auth.newest_for(object) {
            Some(e) => (e.op == OpKind::Modify).then_some(e.version),
            None => *own,
        };
        all.entry(object.clone()).or_insert(want);
    }
    Recovery::Log {
        missing: all,
        divergent,
    }
}

/// Whether `copy` was created empty and never served (an OSD new to the PG, or one whose
/// stray copy was deleted: no history, never activated) while `auth` has writes. Such a copy
/// is backfilled, as Ceph backfills a copy created empty, even where `auth`'s log still
/// reaches back to the PG's first write: recovering it object by object after activation made
/// every client op on those objects wait for a whole-object transfer (a returning OSD's first
/// seconds). A copy that served empty (activated, never written) recovers by the log.
fn created_empty(copy: &PeerLog, auth: &PgLog) -> bool {
    copy.last_epoch_started == 0
        && copy.log.entries().next().is_none()
        && copy.log.head() == Eversion::default()
        && auth.head() > Eversion::default()
}

/// What `copy` must do to match `auth`.
fn recovery_for(copy: &PgLog, auth: &PgLog) -> Recovery {
    // The newest point both histories share: the copy's newest entry that auth also has, or
    // the copy's tail when the copy's head is itself part of auth's (trimmed or empty) past.
    let common = copy
        .entries()
        .rev()
        .find(|e| auth.contains(e.version, &e.object))
        .map(|e| e.version)
        .unwrap_or_else(|| {
            if copy.head() <= auth.tail() || copy.entries().next().is_none() {
                copy.head()
            } else {
                copy.tail()
            }
        });
    if common < auth.tail() {
        return Recovery::Backfill;
    }
    let divergent: Vec<LogEntry> = copy.entries_after(common).rev().cloned().collect();
    let mut missing: BTreeMap<ObjectId, Option<Eversion>> = auth
        .newest_after(common)
        .into_iter()
        .map(|(o, e)| (o, (e.op == OpKind::Modify).then_some(e.version)))
        .collect();
    for e in divergent.iter().rev() {
        // Objects only the divergent history touched go back to their state before it.
        missing
            .entry(e.object.clone())
            .or_insert_with(|| (e.prior != Eversion::default()).then_some(e.prior));
    }
    if missing.is_empty() && divergent.is_empty() {
        Recovery::Clean
    } else {
        Recovery::Log { missing, divergent }
    }
}
