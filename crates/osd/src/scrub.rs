//! Scrub: the PG's primary compares every copy of its objects, a range of them at a time, and
//! (asked to repair) makes the copies that differ hold what most copies hold.
//!
//! For each range of at most [`SCRUB_CHUNK_OBJECTS`] of the primary's objects it raises the
//! PG's scrub fence over the range (`crate::fence`: writes to those objects wait, the PG's
//! other writes go on), reads its own scrub map and asks every
//! other copy of the acting set for theirs ([`PeerBody::ScrubMap`]): per object its version,
//! size and xattr digest, and in a deep scrub the crc32c of its data and omap (reading the
//! data verifies every block's checksum: a block that fails makes the copy unreadable).
//! `cairn_pg::scrub::compare` names the inconsistent objects and the authoritative state; a
//! repair pulls that state to the primary when its own copy differs (refused unless at the
//! authoritative version), then pushes it to (or removes the object from) every other copy
//! that differs. Each object read is one best-effort request through the scheduler, costed
//! by its size in a deep scrub (invariant 2); the maps and the answer never carry data.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

use bytes::Bytes;
use cairn_clustermap::MapFlag;
use cairn_clustermap::PgId;
use cairn_pg::scrub::{compare, CopyState, Inconsistency, ObjectDigest, ScrubMap};
use cairn_proto::peer::{PeerAnswer, PeerBody, Urgency};
use cairn_store::{Store, StoreError};

use crate::ask::ask;
use crate::error::OsdError;
use crate::fence::NameRange;
use crate::objects::{list_page, version_of};
use crate::pgs::{Pg, PgStatus};
use crate::shared::Shared;
use crate::transfer::{as_own_work, install_local, pull, push, Recovering};
use crate::work::{Purpose, Work};

/// Most of the primary's objects compared under one raise of the PG's scrub fence (Ceph's
/// `osd_scrub_chunk_max` is 25).
pub const SCRUB_CHUNK_OBJECTS: u32 = 16;
/// Most objects one copy may list in one range (the primary's chunk plus objects only that
/// copy has); a copy with more fails the scrub rather than answer without bound.
pub const MAX_SCRUB_MAP_OBJECTS: usize = 4096;
/// Bytes of an object's data read per store call while digesting it.
const DIGEST_READ_BYTES: u64 = 4 << 20;
/// Omap entries read per store call while digesting.
const DIGEST_OMAP_ENTRIES: usize = 256;
/// How often the scrub scheduler looks for a PG whose scrub is due.
const SCRUB_TICK: Duration = Duration::from_secs(1);
/// How long a scheduled scrub that failed (its PG changed interval, a copy did not answer)
/// waits before it is tried again.
const SCRUB_RETRY: Duration = Duration::from_secs(60);

/// What one scrub of a PG found, and repaired.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScrubReport {
    /// The PG.
    pub pg: PgId,
    /// Data and omap were compared too.
    pub deep: bool,
    /// Objects compared (every name any copy had).
    pub objects: u64,
    /// The objects whose copies disagreed, before any repair.
    pub inconsistent: Vec<Inconsistency>,
    /// Of those, the ones every copy now holds in the authoritative state.
    pub repaired: Vec<String>,
}

impl ScrubReport {
    /// Objects still inconsistent after this scrub.
    pub fn unrepaired(&self) -> usize {
        self.inconsistent.len() - self.repaired.len()
    }

    /// The report as text: a summary line, then one line per inconsistent object naming each
    /// copy that differed and what it held.
    pub fn render(&self) -> String {
        let mut out = format!(
            "pg {} {}scrub: {} objects, {} inconsistent, {} repaired\n",
            self.pg,
            if self.deep { "deep-" } else { "" },
            self.objects,
            self.inconsistent.len(),
            self.repaired.len()
        );
        for inc in &self.inconsistent {
            let copies: Vec<String> = inc
                .bad
                .iter()
                .map(|(osd, state)| format!("osd.{osd} {}", describe(state)))
                .collect();
            let auth = inc
                .authoritative
                .as_ref()
                .map_or("none readable".to_string(), describe);
            let fixed = if self.repaired.contains(&inc.object) {
                " (repaired)"
            } else {
                ""
            };
            let _ = writeln!(
                out,
                "  {}: should be {auth}; {}{fixed}",
                inc.object,
                copies.join("; ")
            );
        }
        out
    }
}

fn describe(state: &CopyState) -> String {
    match state {
        CopyState::Absent => "absent".into(),
        CopyState::Unreadable(why) => format!("unreadable ({why})"),
        CopyState::Present(d) => {
            let mut s = format!("v{} size {} attrs {:08x}", d.version, d.size, d.attrs_crc);
            if let Some(c) = d.data_crc {
                let _ = write!(s, " data {c:08x}");
            }
            if let Some(c) = d.omap_crc {
                let _ = write!(s, " omap {c:08x}");
            }
            s
        }
    }
}

/// Scrubs `pg`, which this OSD leads: compares every copy of every object (`deep`: data and
/// omap too) and, with `repair`, makes the copies that differ hold the authoritative state.
/// A `scheduled` scrub stops before its next chunk once `noscrub` (`nodeep-scrub` for a deep
/// one) is set, with [`OsdError::Held`]; an operator's runs whatever the flags.
pub async fn scrub_pg(
    s: &Arc<Shared>,
    pg: &Arc<Pg>,
    deep: bool,
    repair: bool,
    scheduled: bool,
) -> Result<ScrubReport, OsdError> {
    let active = pg.active_epoch().ok_or_else(|| not_served(s, pg))?;
    if !pg.missing().is_empty() {
        // Its copies differ by design until they are recovered.
        return Err(OsdError::Peer {
            osd: s.id,
            reason: format!("pg {} is recovering: scrub it once it is clean", pg.id),
        });
    }
    let mut report = ScrubReport {
        pg: pg.id,
        deep,
        objects: 0,
        inconsistent: Vec::new(),
        repaired: Vec::new(),
    };
    let mut after = String::new();
    loop {
        if let Some(flag) = scheduled.then(|| held(s, deep)).flatten() {
            return Err(OsdError::Held(flag));
        }
        // The chunk's range comes from the primary's listing, read without the PG's lock: what
        // a write created before the fence rises is on every copy, and none is written in the
        // range after.
        let (names, more) = {
            let (s2, coll, from) = (s.clone(), pg.coll.clone(), after.clone());
            background(s, pg, scrub_work(s, None, 0), async move {
                Ok(list_page(&s2.store, &coll, &from, SCRUB_CHUNK_OBJECTS).await?)
            })
            .await?
        };
        let until = if more { names.last().cloned() } else { None };
        let (iv, raised) = {
            let _inner = pg.lock_unfenced(None).await.0;
            let iv = pg.interval();
            if pg.active_epoch() != Some(active) || iv.acting.first() != Some(&s.id) {
                return Err(not_served(s, pg));
            }
            let range = NameRange {
                after: after.clone(),
                until: until.clone(),
            };
            (iv, pg.fence.raise(range))
        };
        // The PG leaving its activation (a new interval, or peering again in this one, which
        // waits for the fence) ends the scrub at once: the fence comes down with it.
        let maps = tokio::select! {
            maps = gather_maps(s, pg, &iv, &after, until.as_deref(), deep) => maps?,
            _ = pg.wait_interval_change(active) => return Err(not_served(s, pg)),
        };
        let same_interval = || pg.active_epoch() == Some(active) && pg.interval().epoch == iv.epoch;
        if !same_interval() {
            return Err(not_served(s, pg));
        }
        report.objects += maps
            .values()
            .flat_map(|m| m.keys())
            .collect::<std::collections::BTreeSet<_>>()
            .len() as u64;
        let compared: Vec<i32> = maps.keys().copied().collect();
        let found = compare(&maps, s.id);
        if repair && !found.is_empty() {
            let mut inner = pg.lock().await;
            if !same_interval() {
                return Err(not_served(s, pg));
            }
            for inc in found {
                if repair_object(s, pg, iv.epoch, &inc, &compared, &mut inner.created).await {
                    report.repaired.push(inc.object.clone());
                }
                report.inconsistent.push(inc);
            }
        } else {
            report.inconsistent.extend(found);
        }
        drop(raised);
        match until {
            Some(u) => after = u,
            None => break,
        }
    }
    s.metrics.record_scrub(
        report.deep,
        report.objects,
        report.inconsistent.len(),
        report.repaired.len(),
    );
    let (every, every_deep) = intervals(s);
    let now = Instant::now();
    pg.update_scrub(|st| {
        st.inconsistent = report.unrepaired() as u64;
        st.next = every.map(|d| now + d);
        if deep {
            st.next_deep = every_deep.map(|d| now + d);
        }
    });
    if report.inconsistent.is_empty() {
        tracing::info!(osd = s.id, pg = %pg.id, deep, objects = report.objects, "scrub ok");
    } else {
        tracing::warn!(osd = s.id, pg = %pg.id, "{}", report.render().trim_end());
    }
    Ok(report)
}

/// The cluster flag that holds back a scheduled scrub (`deep` or shallow), if set.
fn held(s: &Shared, deep: bool) -> Option<MapFlag> {
    let flag = match deep {
        true => MapFlag::NoDeepScrub,
        false => MapFlag::NoScrub,
    };
    s.flag_set(flag).then_some(flag)
}

/// Scrubs the PGs this OSD leads active+clean as they fall due (`scrub_interval_s`,
/// `deep_scrub_interval_s`), one at a time, for the daemon's life. A PG first seen here is
/// given a due time spread over one interval, so a starting OSD does not scrub every PG at
/// once. `noscrub` and `nodeep-scrub` hold back the scrubs they name (a deep scrub that is
/// due and held gives way to a shallow one that is due); what is due runs once they are unset.
pub async fn run(s: Arc<Shared>) {
    let (every, every_deep) = intervals(&s);
    if every.is_none() && every_deep.is_none() {
        return;
    }
    let nonce = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, crate::convert::nanos);
    loop {
        tokio::time::sleep(SCRUB_TICK).await;
        let now = Instant::now();
        let (shallow_held, deep_held) = (held(&s, false).is_some(), held(&s, true).is_some());
        let next = s.pgs.all().into_iter().find_map(|pg| {
            if pg.status() != PgStatus::ActiveClean {
                return None;
            }
            let spread = |d: Duration| now + jitter(d, pg.id, s.id, nonce);
            let deep = pg.update_scrub(|st| {
                st.next = st.next.or_else(|| every.map(spread));
                st.next_deep = st.next_deep.or_else(|| every_deep.map(spread));
                let due = |t: Option<Instant>| t.is_some_and(|t| t <= now);
                match (
                    due(st.next_deep) && !deep_held,
                    due(st.next) && !shallow_held,
                ) {
                    (true, _) => Some(true),
                    (false, true) => Some(false),
                    _ => None,
                }
            })?;
            Some((pg, deep))
        });
        if let Some((pg, deep)) = next {
            match scrub_pg(&s, &pg, deep, false, true).await {
                Ok(_) => {}
                Err(OsdError::Held(flag)) => {
                    tracing::info!(osd = s.id, pg = %pg.id, deep, %flag, "scheduled scrub stopped by a cluster flag");
                }
                Err(e) => {
                    tracing::warn!(osd = s.id, pg = %pg.id, deep, error = %e, "scheduled scrub failed");
                    let later = Some(Instant::now() + SCRUB_RETRY);
                    pg.update_scrub(|st| match deep {
                        true => st.next_deep = later,
                        false => st.next = later,
                    });
                }
            }
        }
    }
}

/// Every acting copy's scrub map of the chunk after `after` up to `until`, this OSD's first.
async fn gather_maps(
    s: &Arc<Shared>,
    pg: &Pg,
    iv: &crate::pgs::Interval,
    after: &str,
    until: Option<&str>,
    deep: bool,
) -> Result<BTreeMap<i32, ScrubMap>, OsdError> {
    let mut maps = BTreeMap::new();
    maps.insert(s.id, scrub_map(s, pg, after, until, deep).await?);
    for osd in iv.copies().filter(|&o| o != s.id) {
        let body = PeerBody::ScrubMap {
            after: after.to_string(),
            until: until.map(str::to_string),
            deep,
        };
        match ask(s, pg, iv.epoch, osd, body, Bytes::new()).await? {
            (PeerAnswer::ScrubMap { map }, _) => maps.insert(osd, map),
            _ => {
                return Err(OsdError::Peer {
                    osd,
                    reason: "unexpected answer to a scrub map request".into(),
                })
            }
        };
    }
    Ok(maps)
}

/// The configured scrub and deep scrub intervals (None: never).
fn intervals(s: &Shared) -> (Option<Duration>, Option<Duration>) {
    let every = |secs: u64| (secs > 0).then(|| Duration::from_secs(secs));
    (
        every(s.cfg.scrub_interval_s),
        every(s.cfg.deep_scrub_interval_s),
    )
}

/// A PG's first due time after `interval`'s start: a hash of the PG, the OSD and the
/// process's start, within the interval.
fn jitter(interval: Duration, pg: PgId, osd: i32, nonce: u64) -> Duration {
    use std::hash::{Hash, Hasher};
    let mut h = std::hash::DefaultHasher::new();
    (pg.pool, pg.seed, osd, nonce).hash(&mut h);
    let ms = crate::convert::millis(interval).max(1);
    Duration::from_millis(h.finish() % ms)
}

fn not_served(s: &Shared, pg: &Pg) -> OsdError {
    OsdError::Peer {
        osd: s.id,
        reason: format!(
            "pg {} is not served by this OSD as its active primary ({})",
            pg.id,
            pg.status().name()
        ),
    }
}

/// Makes every copy in `inc.bad` hold `inc.authoritative` (the primary's own first, pulled
/// from one of the other `compared` copies, which hold it); whether all of them do now.
/// Under the PG's lock.
async fn repair_object(
    s: &Arc<Shared>,
    pg: &Pg,
    epoch: u64,
    inc: &Inconsistency,
    compared: &[i32],
    created: &mut bool,
) -> bool {
    let Some(auth) = &inc.authoritative else {
        return false;
    };
    let obj = inc.object.as_str();
    let r = Recovering {
        s,
        pg,
        epoch,
        urgency: Urgency::Background,
        fill: 0,
    };
    let result: Result<(), OsdError> = async {
        if inc.bad.contains_key(&s.id) {
            match auth {
                CopyState::Present(d) => {
                    let good = compared.iter().find(|o| !inc.bad.contains_key(o));
                    let source = *good.ok_or_else(|| OsdError::Peer {
                        osd: s.id,
                        reason: format!("no other copy holds {obj} as it should be"),
                    })?;
                    pull(&r, source, obj, created, Some(d.version)).await?;
                }
                _ => install_local(&r, created, obj, None).await?,
            }
        }
        for &osd in inc.bad.keys().filter(|&&o| o != s.id) {
            push(&r, osd, obj).await?;
        }
        Ok(())
    }
    .await;
    match result {
        Ok(()) => true,
        Err(e) => {
            tracing::error!(osd = s.id, pg = %pg.id, object = obj, error = %e, "scrub repair failed");
            false
        }
    }
}

/// This OSD's scrub map of `pg`'s objects named after `after` up to `until` (inclusive; None:
/// to the last).
pub async fn scrub_map(
    s: &Arc<Shared>,
    pg: &Pg,
    after: &str,
    until: Option<&str>,
    deep: bool,
) -> Result<ScrubMap, OsdError> {
    let names = {
        let (s2, coll, from, to) = (
            s.clone(),
            pg.coll.clone(),
            after.to_string(),
            until.map(str::to_string),
        );
        background(s, pg, scrub_work(s, None, 0), async move {
            list_range(&s2.store, &coll, &from, to.as_deref()).await
        })
        .await?
    };
    let mut map = ScrubMap::new();
    for name in names {
        let size = match s.store.stat(&pg.coll, &name).await {
            Ok(st) => st.size_bytes,
            Err(StoreError::NoSuchObject { .. }) => continue,
            Err(e) => return Err(e.into()),
        };
        let cost = if deep { size } else { 0 };
        let (s2, coll, obj) = (s.clone(), pg.coll.clone(), name.clone());
        let work = scrub_work(s, Some(&name), cost);
        let state = background(s, pg, work, async move {
            digest(&s2.store, &coll, &obj, size, deep).await
        })
        .await?;
        map.insert(name, state);
    }
    Ok(map)
}

/// A scrub step of this OSD's own, reading `length` bytes of `obj` (or listing, for `None`).
fn scrub_work(s: &Shared, obj: Option<&str>, length: u64) -> Work {
    let w = Work::new(
        Purpose::Scrub,
        u64::from(s.id as u32),
        cairn_qos::OpKind::Read,
    );
    match obj {
        Some(name) => w.on(name, 0, length),
        None => w.sized(length),
    }
}

/// Runs `task`, described by `work`, as one request through `pg`'s scheduler shard.
async fn background<T: Send + 'static>(
    s: &Arc<Shared>,
    pg: &Pg,
    work: Work,
    task: impl std::future::Future<Output = Result<T, OsdError>> + Send + 'static,
) -> Result<T, OsdError> {
    as_own_work(s, pg, work, task).await
}

/// The client-visible objects of `coll` named after `after` up to `until` (inclusive).
async fn list_range(
    store: &Store,
    coll: &str,
    after: &str,
    until: Option<&str>,
) -> Result<Vec<String>, OsdError> {
    let mut names = Vec::new();
    let mut from = after.to_string();
    loop {
        let (page, more) = list_page(store, coll, &from, 1000).await?;
        let next = page.last().cloned();
        let mut past_end = false;
        for name in page {
            if until.is_some_and(|u| name.as_str() > u) {
                past_end = true;
                break;
            }
            names.push(name);
        }
        if names.len() > MAX_SCRUB_MAP_OBJECTS {
            return Err(OsdError::Protocol(format!(
                "{coll} has more than {MAX_SCRUB_MAP_OBJECTS} objects in one scrub range"
            )));
        }
        match next {
            Some(last) if more && !past_end => from = last,
            _ => return Ok(names),
        }
    }
}

/// What this store holds of `obj` (`size` bytes of data): version, size and digests.
async fn digest(
    store: &Store,
    coll: &str,
    obj: &str,
    size: u64,
    deep: bool,
) -> Result<CopyState, OsdError> {
    let mut attrs = store.getattrs(coll, obj).await?;
    attrs.sort();
    let version = version_of(&attrs);
    let mut crc = crc32c();
    for (k, v) in &attrs {
        feed_pair(&mut crc, k.as_bytes(), v);
    }
    let mut d = ObjectDigest {
        version,
        size,
        attrs_crc: crate::convert::crc32(crc.finalize()),
        data_crc: None,
        omap_crc: None,
    };
    if deep {
        let mut data = crc32c();
        let mut at = 0;
        while at < size {
            let len = (size - at).min(DIGEST_READ_BYTES);
            match store.read(coll, obj, at, len).await {
                Ok(bytes) => data.update(&bytes),
                Err(e) if e.is_damaged_copy() => return Ok(CopyState::Unreadable(e.to_string())),
                Err(e) => return Err(e.into()),
            }
            at += len;
        }
        d.data_crc = Some(crate::convert::crc32(data.finalize()));
        let mut omap = crc32c();
        let mut after = Vec::new();
        loop {
            let page = store
                .omap_page(coll, obj, &after, b"", DIGEST_OMAP_ENTRIES)
                .await?;
            for (k, v) in &page.entries {
                feed_pair(&mut omap, k, v);
            }
            match page.entries.last() {
                Some((k, _)) if page.more => after.clone_from(k),
                _ => break,
            }
        }
        d.omap_crc = Some(crate::convert::crc32(omap.finalize()));
    }
    Ok(CopyState::Present(d))
}

fn crc32c() -> crc_fast::Digest {
    crc_fast::Digest::new(crc_fast::CrcAlgorithm::Crc32Iscsi)
}

/// Feeds a key and a value, each after its length (so ("ab", "c") and ("a", "bc") differ).
fn feed_pair(crc: &mut crc_fast::Digest, key: &[u8], value: &[u8]) {
    crc.update(&crate::convert::len_u32(key.len()).to_le_bytes());
    crc.update(key);
    crc.update(&crate::convert::len_u32(value.len()).to_le_bytes());
    crc.update(value);
}
