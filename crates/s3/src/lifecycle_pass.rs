//! The gateway's lifecycle pass: every `lifecycle_interval_ms` it walks the buckets that have
//! enabled lifecycle rules and applies them: current versions past their expiration are
//! deleted (a delete marker in a versioned bucket), noncurrent versions past theirs removed
//! (the newest N kept), delete markers with no older version left removed, and incomplete
//! multipart uploads aborted, and versions due for a transition moved to their storage
//! class (`transition`). Each deletion goes through the same code as a DeleteObject (object
//! lock is honoured: a locked version stays). The whole pass runs inside
//! `cairn_client::in_background`, so the OSDs schedule its reads and writes in their
//! best-effort class, after clients.
//!
//! A current version is expired only if it is still the one the walk saw (same mtime and
//! ETag when re-read just before), so an object rewritten meanwhile stays.
//!
//! Gateways over one pool take turns: a gateway runs passes only while it holds the lease
//! on `s3.lifecycle` (`cairn_client::lease`, renewed in the background); the others try again
//! each interval and take over one lease after the holder stops (at once when it was a process
//! of their own host that exited).

use std::sync::Arc;
use std::time::Duration;

use cairn_client::lease::{died_here, Lease, LeaseError, LeasePlace, DEFAULT_LEASE};
use cairn_client::{Client, ClientError};

use s3s::S3Result;

use crate::buckets::{self, BucketInfo};
use crate::entry::Entry;
use crate::gateway::Gateway;
use crate::lifecycle::{Clock, Expiration, Rule};
use crate::multipart;
use crate::object_ops::delete_key;
use crate::pager::OmapPager;
use crate::tag_ops;
use crate::tagging::Tags;
use crate::transition::{current_spots, move_version, Moved, Spot};
use crate::versions;

/// Index entries read per omap request.
const PAGE: u32 = 1000;

/// What one pass did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PassReport {
    /// Buckets with enabled rules walked.
    pub buckets: u64,
    /// Current versions expired.
    pub expired: u64,
    /// Noncurrent versions removed.
    pub noncurrent_removed: u64,
    /// Expired delete markers removed.
    pub markers_removed: u64,
    /// Incomplete multipart uploads aborted.
    pub uploads_aborted: u64,
    /// Deletions refused (a locked version), left for a later pass.
    pub refused: u64,
    /// Versions moved to another storage class.
    pub transitioned: u64,
    /// Transitions left for a later pass (the version changed meanwhile, or a copy failed).
    pub transitions_left: u64,
}

/// The object whose lease a gateway holds while it runs the lifecycle passes of its pool.
pub const LEASE_OBJECT: &str = "s3.lifecycle";

/// Takes the pass's lease on `pool` for this gateway, or None while another gateway holds
/// it (after waiting one of its leases) or the cluster fails (logged).
async fn take_turn(client: &Arc<Client>, pool: &str) -> Option<Arc<Lease>> {
    match client.write_full_if(pool, LEASE_OBJECT, &[], 0).await {
        Ok(_) | Err(ClientError::VersionMismatch { .. }) => {}
        Err(e) => {
            tracing::warn!("lifecycle: creating {LEASE_OBJECT}: {e}");
            return None;
        }
    }
    let place = LeasePlace {
        pool: pool.to_string(),
        object: LEASE_OBJECT.to_string(),
        attr: "lease".to_string(),
    };
    let what = "the lifecycle pass";
    match Lease::acquire(
        client.clone(),
        place,
        what,
        DEFAULT_LEASE,
        &died_here,
        false,
    )
    .await
    {
        Ok(lease) => {
            tracing::info!("lifecycle: this gateway runs the passes");
            Some(lease)
        }
        Err(LeaseError::Held(who)) => {
            tracing::debug!("lifecycle: another gateway runs the passes: {who}");
            None
        }
        Err(e) => {
            tracing::warn!("lifecycle: taking the lease: {e}");
            None
        }
    }
}

/// Runs a pass every `lifecycle_interval_ms` until the task is dropped; over the cluster,
/// only while this gateway holds the pass's lease.
pub async fn run(gw: Gateway) {
    let every = Duration::from_millis(gw.cfg.lifecycle_interval_ms.max(1));
    let mut turn: Option<Arc<Lease>> = None;
    loop {
        tokio::time::sleep(every).await;
        if let Some(client) = &gw.cluster {
            if turn.as_ref().is_none_or(|l| l.is_lost()) {
                turn = take_turn(client, &gw.cfg.pool).await;
            }
            let Some(lease) = &turn else {
                continue;
            };
            if lease.check().await.is_err() {
                continue;
            }
        }
        let now = buckets::now_ms();
        match cairn_client::in_background(pass(&gw, now)).await {
            Ok(r) => {
                let lc = &gw.metrics.lifecycle;
                for (counter, n) in [
                    (&lc.passes, 1),
                    (&lc.expired, r.expired),
                    (&lc.noncurrent_removed, r.noncurrent_removed),
                    (&lc.markers_removed, r.markers_removed),
                    (&lc.uploads_aborted, r.uploads_aborted),
                    (&lc.transitioned, r.transitioned),
                ] {
                    counter.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
                }
                let acted = r.expired
                    + r.noncurrent_removed
                    + r.markers_removed
                    + r.uploads_aborted
                    + r.transitioned;
                if acted > 0 {
                    tracing::info!(?r, "lifecycle pass");
                }
            }
            Err(e) => tracing::warn!("lifecycle pass: {e}"),
        }
    }
}

/// One pass over every bucket at time `now_ms`; a bucket whose walk fails is logged and
/// the pass goes on with the next.
pub async fn pass(gw: &Gateway, now_ms: i64) -> S3Result<PassReport> {
    let clock = Clock::with_day_secs(gw.cfg.lifecycle_day_secs);
    let mut report = PassReport::default();
    for b in buckets::list_buckets(&gw.backend).await? {
        let rules: Vec<&Rule> = b.lifecycle.iter().filter(|r| r.enabled).collect();
        if rules.is_empty() {
            continue;
        }
        report.buckets += 1;
        if let Err(e) = bucket_pass(gw, &b, &rules, clock, now_ms, &mut report).await {
            tracing::warn!(bucket = %b.name, "lifecycle: {e}");
        }
    }
    Ok(report)
}

async fn bucket_pass(
    gw: &Gateway,
    b: &BucketInfo,
    rules: &[&Rule],
    clock: Clock,
    now_ms: i64,
    report: &mut PassReport,
) -> S3Result<()> {
    if rules
        .iter()
        .any(|r| r.expiration.is_some() || !r.transitions.is_empty())
    {
        walk_current(gw, b, rules, clock, now_ms, report).await?;
    }
    let versions_ruled = rules.iter().any(|r| {
        r.noncurrent_days.is_some()
            || r.expired_delete_marker
            || r.expiration.is_some()
            || !r.noncurrent_transitions.is_empty()
    });
    if b.versioning.versioned() && versions_ruled {
        for shard in versions::shard_names(b) {
            walk_versions(gw, b, &shard, rules, clock, now_ms, report).await?;
        }
    }
    if rules.iter().any(|r| r.abort_upload_days.is_some()) {
        report.uploads_aborted += multipart::abort_due(gw, b, |key, initiated| {
            rules
                .iter()
                .any(|r| r.upload_expired(clock, key, initiated, now_ms))
        })
        .await?;
    }
    Ok(())
}

/// The tags of `e` (version of `key`) if some rule's filter needs them.
async fn tags_if_needed(
    gw: &Gateway,
    b: &BucketInfo,
    rules: &[&Rule],
    key: &str,
    e: &Entry,
) -> S3Result<Tags> {
    if rules.iter().any(|r| r.filter.needs_tags()) {
        tag_ops::effective(&gw.backend, b, key, e).await
    } else {
        Ok(Tags::new())
    }
}

/// Counts a transition's outcome.
fn count_move(report: &mut PassReport, moved: S3Result<Moved>) {
    match moved {
        Ok(Moved::Done) => report.transitioned += 1,
        Ok(Moved::AlreadyThere) => {}
        Ok(Moved::LeftAlone) => report.transitions_left += 1,
        Err(e) => {
            tracing::warn!("lifecycle transition: {e}");
            report.transitions_left += 1;
        }
    }
}

/// The class the latest due transition of the rules matching a version names, if any.
fn due_class<'r>(
    rules: &[&'r Rule],
    key: &str,
    e: &Entry,
    tags: &Tags,
    class_of: impl Fn(&'r Rule) -> Option<(i64, &'r str)>,
) -> Option<&'r str> {
    if e.delete_marker {
        return None;
    }
    rules
        .iter()
        .filter(|r| r.filter.matches(key, e.size, tags))
        .filter_map(|r| class_of(r))
        .max_by_key(|(due, _)| *due)
        .map(|(_, class)| class)
        .filter(|class| e.storage_class.as_deref() != Some(*class))
}

/// Walks the current index: expires current versions past their expiration, and moves the
/// others due for a transition.
async fn walk_current(
    gw: &Gateway,
    b: &BucketInfo,
    rules: &[&Rule],
    clock: Clock,
    now_ms: i64,
    report: &mut PassReport,
) -> S3Result<()> {
    for shard in b.shard_names() {
        let mut pages = OmapPager::new(&gw.backend, &shard, &[], PAGE);
        while let Some(page) = pages.next_page().await? {
            for (k, v) in &page {
                let (Ok(key), Ok(e)) = (std::str::from_utf8(k), Entry::decode(v)) else {
                    continue;
                };
                let tags = tags_if_needed(gw, b, rules, key, &e).await?;
                let due = rules.iter().any(|r| {
                    r.filter.matches(key, e.size, &tags)
                        && r.current_expired(clock, e.mtime_ms, now_ms)
                });
                if !due {
                    let class = due_class(rules, key, &e, &tags, |r| {
                        r.current_class(clock, e.mtime_ms, now_ms)
                    });
                    if let Some(class) = class {
                        let spots = current_spots(b, key, &e);
                        count_move(report, move_version(gw, &e, class, &spots).await);
                    }
                    continue;
                }
                let still = buckets::get_entry(&gw.backend, b, key)
                    .await?
                    .is_some_and(|now| now.mtime_ms == e.mtime_ms && now.etag == e.etag);
                if still {
                    match delete_key(gw, b, key, None, false).await {
                        Ok(_) => report.expired += 1,
                        Err(_) => report.refused += 1,
                    }
                }
            }
        }
    }
    Ok(())
}

/// A key's versions with their version-index keys, newest first.
type IndexedVersions = Vec<(Vec<u8>, Entry)>;

/// Walks one version-index shard key by key (a key's versions are adjacent, newest first).
async fn walk_versions(
    gw: &Gateway,
    b: &BucketInfo,
    shard: &str,
    rules: &[&Rule],
    clock: Clock,
    now_ms: i64,
    report: &mut PassReport,
) -> S3Result<()> {
    let mut group: Option<(String, IndexedVersions)> = None;
    let mut pages = OmapPager::new(&gw.backend, shard, &[], PAGE);
    while let Some(page) = pages.next_page().await? {
        for (k, v) in &page {
            let Some((key, _)) = versions::split_index_key(k) else {
                continue;
            };
            let e = versions::decode_version(v)?;
            match &mut group {
                Some((g, list)) if g == key => list.push((k.clone(), e)),
                _ => {
                    if let Some((g, list)) = group.take() {
                        apply_to_versions(gw, b, &g, list, rules, clock, now_ms, report).await?;
                    }
                    group = Some((key.to_string(), vec![(k.clone(), e)]));
                }
            }
        }
    }
    if let Some((g, list)) = group {
        apply_to_versions(gw, b, &g, list, rules, clock, now_ms, report).await?;
    }
    Ok(())
}

/// Applies the noncurrent-version, noncurrent-transition and delete-marker rules to the
/// versions of `key` (with their index keys), newest first.
#[allow(clippy::too_many_arguments)]
async fn apply_to_versions(
    gw: &Gateway,
    b: &BucketInfo,
    key: &str,
    list: Vec<(Vec<u8>, Entry)>,
    rules: &[&Rule],
    clock: Clock,
    now_ms: i64,
    report: &mut PassReport,
) -> S3Result<()> {
    let mut left = list.len();
    for i in 1..list.len() {
        let (index_key, e) = &list[i];
        let since = list[i - 1].1.mtime_ms;
        let newer = u32::try_from(i - 1).unwrap_or(u32::MAX);
        let tags = tags_if_needed(gw, b, rules, key, e).await?;
        let due = rules.iter().any(|r| {
            r.filter.matches(key, e.size, &tags)
                && r.noncurrent_expired(clock, since, newer, now_ms)
        });
        if due {
            let id = e.version_id.as_deref().unwrap_or(versions::NULL_VERSION);
            match delete_key(gw, b, key, Some(id), false).await {
                Ok(_) => {
                    report.noncurrent_removed += 1;
                    left -= 1;
                }
                Err(_) => report.refused += 1,
            }
        } else if let Some(class) = due_class(rules, key, e, &tags, |r| {
            r.noncurrent_class(clock, since, newer, now_ms)
        }) {
            let spot = Spot {
                object: versions::shard_of(b, key),
                key: index_key.clone(),
            };
            count_move(report, move_version(gw, e, class, &[spot]).await);
        }
    }
    let newest = &list[0].1;
    if left == 1 && newest.delete_marker {
        let due = rules.iter().any(|r| {
            r.filter.matches(key, 0, &Tags::new())
                && (r.expired_delete_marker
                    || matches!(r.expiration, Some(Expiration::Days(_)))
                        && r.current_expired(clock, newest.mtime_ms, now_ms))
        });
        if due {
            let id = newest
                .version_id
                .as_deref()
                .unwrap_or(versions::NULL_VERSION);
            delete_key(gw, b, key, Some(id), false).await?;
            report.markers_removed += 1;
        }
    }
    Ok(())
}
