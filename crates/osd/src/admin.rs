//! Admin commands (`cairn tell osd.N ...`) and the metrics page. `config get|set KEY [VALUE]`
//! reads the OSD's settings and changes the scheduler live (`osd_op_queue`,
//! `osd_op_queue_config`, `osd_mclock_profile`); `pg stats` lists the PGs it leads by state;
//! `pg scrub|deep-scrub|repair PGID` scrubs a PG it leads.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Arc;

use bytes::Bytes;
use cairn_clustermap::PgId;
use cairn_metrics::{DescriptorEncoder, Families, Written};
use cairn_proto::admin::{AdminReply, AdminRequest};
use cairn_proto::{decode, encode};
use cairn_qos::{MClockConfig, PolicyConfig, Profile};

use crate::pgs::PgStatus;
use crate::shared::Shared;
use crate::work::PRIORITY_KEYS;

pub use cairn_proto::admin::{MSG_ADMIN, MSG_ADMIN_REPLY};

/// Settings `config get` can read (the first three, the priorities and the recovery
/// throttles can also be set).
pub const CONFIG_KEYS: [&str; 28] = [
    "osd_op_queue",
    "osd_op_queue_config",
    "osd_mclock_profile",
    "heartbeat_interval_ms",
    "heartbeat_grace_ms",
    "osd_fast_fail_on_connection_refused",
    "repop_timeout_ms",
    "max_log_entries",
    "max_inflight_ops",
    "max_inflight_cost_ms",
    "max_pending_ops",
    "osd_client_message_size_cap",
    "osd_op_num_shards",
    "osd_op_num_threads",
    "osd_recovery_max_chunk",
    "remap_min_objects",
    "osd_mclock_max_capacity_iops",
    "osd_mclock_max_sequential_bandwidth",
    "osd_client_op_priority",
    "osd_recovery_op_priority",
    "osd_scrub_priority",
    "osd_pg_delete_priority",
    "osd_cache_clean_priority",
    "osd_max_backfills",
    "osd_recovery_max_active",
    "osd_recovery_sleep_hdd",
    "osd_recovery_sleep_ssd",
    "osd_recovery_sleep_hybrid",
];

/// Answers one encoded [`AdminRequest`] with an encoded [`AdminReply`].
pub async fn handle(s: &Arc<Shared>, payload: &Bytes) -> Bytes {
    let (tid, result) = match decode::<AdminRequest>(payload) {
        Ok((req, _)) if req.args == ["df"] => (req.tid, Ok(df(s).await)),
        Ok((req, _)) if req.args == ["metadata"] => (req.tid, metadata(s)),
        Ok((req, _)) if req.args == ["pg", "usage"] => (req.tid, pg_usage(s).await),
        Ok((req, _)) if req.args == ["pg", "objects"] => (req.tid, pg_objects(s).await),
        Ok((req, _)) if req.args.first().is_some_and(|w| w == "inject") => {
            let words: Vec<&str> = req.args[1..].iter().map(String::as_str).collect();
            (req.tid, crate::failstop::inject(s, &words).await)
        }
        Ok((req, _)) if req.args.first().is_some_and(|w| w == "cache") => {
            let words: Vec<&str> = req.args[1..].iter().map(String::as_str).collect();
            (req.tid, cache_command(s, &words).await)
        }
        Ok((req, _)) if req.args.len() == 3 && req.args[0] == "pg" => {
            (req.tid, pg_command(s, &req.args[1], &req.args[2]).await)
        }
        Ok((req, _)) => (req.tid, run(s, &req.args)),
        Err(e) => (0, Err(e.to_string())),
    };
    encode(&AdminReply { tid, result }, &[])
}

/// `cache stats | config | ioclass | load-ioclass CSV | set-param NAMESPACE KEY=VALUE... | set-mode MODE [flush] | flush` on a
/// cached OSD (casadm's `-P`, `-X`, `-Q`, `-F`).
async fn cache_command(s: &Shared, words: &[&str]) -> Result<String, String> {
    let Some(cache) = &s.cache else {
        return Err(format!("osd.{} runs without a cache", s.id));
    };
    match words {
        ["stats"] => Ok(cache.stats().to_string()),
        ["ioclass"] => Ok(cache.io_classes().csv().to_string()),
        ["load-ioclass", csv] => {
            let classes =
                cairn_cache::IoClassTable::parse_csv(csv).map_err(|e| e.to_string())?;
            cache
                .load_io_classes(classes)
                .await
                .map_err(|e| e.to_string())?;
            Ok("I/O classes loaded\n".into())
        }
        ["config"] => serde_json::to_string_pretty(&cache.config())
            .map(|j| j + "\n")
            .map_err(|e| e.to_string()),
        ["set-param", namespace, pairs @ ..] if !pairs.is_empty() => {
            for pair in pairs {
                let Some((key, value)) = pair.split_once('=') else {
                    return Err(format!("`{pair}`: give KEY=VALUE"));
                };
                cache
                    .set_param(namespace, key, value)
                    .await
                    .map_err(|e| e.to_string())?;
            }
            Ok(format!("cache {namespace}: {}\n", pairs.join(" ")))
        }
        ["set-mode", mode, rest @ ..] if rest.is_empty() || rest == ["flush"] => {
            let mode: cairn_cache::CacheMode = mode
                .parse()
                .map_err(|e: cairn_cache::CacheError| e.to_string())?;
            if rest.is_empty() {
                cache.set_mode(mode, false).await.map_err(|e| e.to_string())?;
                return Ok(format!("cache mode {}\n", mode.name()));
            }
            // Writing every dirty line to the HDD may take minutes: it runs on its own.
            let (cache, dirty) = (cache.clone(), cache.stats().dirty_lines);
            tokio::spawn(async move {
                if let Err(e) = cache.set_mode(mode, true).await {
                    tracing::error!(error = %e, "changing the cache's mode");
                }
            });
            Ok(format!(
                "cache mode {} once {dirty} dirty lines are written back (see `cache stats`)\n",
                mode.name()
            ))
        }
        ["flush"] => {
            let (cache, dirty) = (cache.clone(), cache.stats().dirty_lines);
            tokio::spawn(async move {
                if let Err(e) = cache.flush_dirty().await {
                    tracing::error!(error = %e, "flushing the cache");
                }
            });
            Ok(format!(
                "writing back {dirty} dirty lines (see `cache stats`)\n"
            ))
        }
        _ => Err(format!(
            "unknown cache command `{}` (try: cache stats | cache config | cache ioclass | cache load-ioclass CSV | cache set-param NAMESPACE KEY=VALUE... | cache set-mode wt|wb|wa|pt|wo [flush] | cache flush)",
            words.join(" ")
        )),
    }
}

/// The answer to an admin request refused because the OSD runs its most admin commands at
/// once (`max_admin_requests`): the client may ask again.
pub fn busy(payload: &Bytes) -> Bytes {
    let tid = decode::<AdminRequest>(payload).map_or(0, |(r, _)| r.tid);
    let result = Err("osd busy: too many admin commands running; try again".to_string());
    encode(&AdminReply { tid, result }, &[])
}

/// The reply refusing the admin command in `payload` for `why`.
pub fn refused(payload: &Bytes, why: String) -> Bytes {
    let tid = decode::<AdminRequest>(payload).map_or(0, |(r, _)| r.tid);
    encode(
        &AdminReply {
            tid,
            result: Err(why),
        },
        &[],
    )
}

fn run(s: &Shared, args: &[String]) -> Result<String, String> {
    let words: Vec<&str> = args.iter().map(String::as_str).collect();
    match words.as_slice() {
        ["config", "get", key] => config_get(s, key),
        ["config", "set", key, value @ ..] if !value.is_empty() => {
            config_set(s, key, &value.join(" "))
        }
        ["config", "show"] => Ok(CONFIG_KEYS
            .iter()
            .map(|k| format!("{k} = {}\n", config_get(s, k).unwrap_or_default()))
            .collect()),
        ["sched", "history"] => serde_json::to_string(&s.sched.history())
            .map(|j| j + "\n")
            .map_err(|e| e.to_string()),
        ["sched", "history", "clear"] => {
            s.sched.clear_history();
            Ok("scheduler history cleared\n".into())
        }
        ["pg", "stats"] => Ok(pg_stats(s)),
        ["pg", "dump"] => Ok(pg_dump(s)),
        ["io"] => Ok(format!("{} {}\n", s.metrics.total_ops(), s.metrics.total_bytes())),
        ["recovery"] => {
            let (objects, bytes) = s.metrics.recovered_as_primary();
            Ok(format!("{objects} {bytes}\n"))
        }
        ["recovery", "pacing"] => {
            let (allowance, primary_ms, replica_ms) = s.throttle.pacing();
            let level = |ms: Option<f64>| ms.map_or("unmeasured".to_string(), |ms| format!("{ms:.2} ms"));
            Ok(format!(
                "allowance {allowance:.3} of {} pushes; client level {} as primary, {} as replica; factor {}\n",
                s.throttle.max_active(),
                level(primary_ms),
                level(replica_ms),
                s.throttle.get("osd_recovery_pacing_factor").unwrap_or_default()
            ))
        }
        ["recovery", "reservations"] => {
            s.throttle
                .drop_stale(|pg, epoch| crate::replica::grant_lapsed(s, pg, epoch));
            let (local, remote) = s.throttle.reservations();
            let list = |pgs: Vec<PgId>| {
                pgs.iter()
                    .map(PgId::to_string)
                    .collect::<Vec<_>>()
                    .join(" ")
            };
            Ok(format!("local: {}\nremote: {}\n", list(local), list(remote)))
        }
        _ => Err(format!(
            "unknown command `{}` (try: config get KEY | config set KEY VALUE | config show | sched history [clear] | pg stats | pg dump | pg usage | pg objects | pg scrub|deep-scrub|repair PGID | io | recovery [reservations|pacing] | df | inject ...)",
            args.join(" ")
        )),
    }
}

/// `pg scrub|deep-scrub|repair PGID` on the PG's primary: the scrub's report (a repair is a
/// deep scrub that also repairs, as in Ceph).
async fn pg_command(s: &Arc<Shared>, verb: &str, pgid: &str) -> Result<String, String> {
    let (deep, repair) = match verb {
        "scrub" => (false, false),
        "deep-scrub" => (true, false),
        "repair" => (true, true),
        other => {
            return Err(format!(
                "unknown pg command `{other}` (try: scrub | deep-scrub | repair PGID)"
            ))
        }
    };
    let id: PgId = pgid
        .parse()
        .map_err(|e| format!("bad PG id `{pgid}`: {e}"))?;
    let pg = s
        .pgs
        .get(id)
        .ok_or_else(|| format!("pg {id} is not on osd.{}", s.id))?;
    crate::scrub::scrub_pg(s, &pg, deep, repair, false)
        .await
        .map(|report| report.render())
        .map_err(|e| e.to_string())
}

fn config_get(s: &Shared, key: &str) -> Result<String, String> {
    let c = &s.cfg;
    Ok(match key {
        "osd_op_queue" => s.sched.policy().name().to_string(),
        "osd_op_queue_config" => {
            serde_json::to_string(&s.sched.policy()).map_err(|e| e.to_string())?
        }
        "osd_mclock_profile" => match s.sched.policy() {
            PolicyConfig::Mclock(m) => m.profile,
            other => format!("(policy is {})", other.name()),
        },
        "heartbeat_interval_ms" => c.heartbeat_interval_ms.to_string(),
        "heartbeat_grace_ms" => c.heartbeat_grace_ms.to_string(),
        "osd_fast_fail_on_connection_refused" => c.fast_fail_on_connection_refused.to_string(),
        "repop_timeout_ms" => c.repop_timeout_ms.to_string(),
        "max_log_entries" => c.max_log_entries.to_string(),
        "max_inflight_ops" => c.max_inflight_ops.to_string(),
        "max_inflight_cost_ms" => c.max_inflight_cost_ms.to_string(),
        "max_pending_ops" => c.max_pending_ops.to_string(),
        "osd_client_message_size_cap" => c.max_pending_op_bytes.to_string(),
        "osd_op_num_shards" => s.sched.shard_count().to_string(),
        // The worker threads of the runtime the daemon runs on (`cairn osd run --threads`).
        "osd_op_num_threads" => tokio::runtime::Handle::current()
            .metrics()
            .num_workers()
            .to_string(),
        "osd_recovery_max_chunk" => s.recovery_chunk_bytes.to_string(),
        "remap_min_objects" => c.remap_min_objects.to_string(),
        // The cost model's capacity in force: the profile's, measured at boot, or set live.
        "osd_mclock_max_capacity_iops" => format!("{:.0}", s.sched.capacity().random_4k_iops),
        "osd_mclock_max_sequential_bandwidth" => {
            format!("{:.0}", s.sched.capacity().seq_bandwidth_bytes_per_s)
        }
        k if PRIORITY_KEYS.contains(&k) => s.sched.priorities().get(k).unwrap_or(0).to_string(),
        k if crate::throttle::KEYS.contains(&k) => s.throttle.get(k).unwrap_or_default(),
        other => {
            return Err(format!(
                "unknown key `{other}` (known: {})",
                CONFIG_KEYS.join(", ")
            ))
        }
    })
}

fn config_set(s: &Shared, key: &str, value: &str) -> Result<String, String> {
    if PRIORITY_KEYS.contains(&key) {
        s.sched.priorities().set(key, value)?;
        tracing::info!(osd = s.id, key, value, "config set");
        return Ok(format!(
            "{key} set; requests queued from now on take priority {}\n",
            value.trim()
        ));
    }
    if crate::throttle::KEYS.contains(&key) {
        let done = s.throttle.set(key, value)?;
        tracing::info!(osd = s.id, key, value, "config set");
        return Ok(done);
    }
    if CAPACITY_KEYS.contains(&key) {
        return set_capacity(s, key, value);
    }
    let cfg = match key {
        "osd_op_queue" => PolicyConfig::by_name(value).map_err(|e| e.to_string())?,
        "osd_op_queue_config" => PolicyConfig::from_toml(value).map_err(|e| e.to_string())?,
        "osd_mclock_profile" => {
            let p = Profile::parse(value).map_err(|e| e.to_string())?;
            PolicyConfig::Mclock(MClockConfig::profile(p, s.sched.capacity().random_4k_iops))
        }
        k if CONFIG_KEYS.contains(&k) => {
            return Err(format!(
                "`{k}` is read-only at run time (set it in the OSD's config file)"
            ))
        }
        other => {
            return Err(format!(
                "unknown key `{other}` (known: {})",
                CONFIG_KEYS.join(", ")
            ))
        }
    };
    let name = cfg.name();
    s.throttle.follow_policy(&cfg);
    s.sched.set_policy(cfg).map_err(|e| e.to_string())?;
    tracing::info!(osd = s.id, key, value, "config set");
    Ok(format!("{key} set; scheduler policy is now {name}\n"))
}

/// The capacity keys, settable live as Ceph's `osd_mclock_max_capacity_iops_*` are.
const CAPACITY_KEYS: [&str; 2] = [
    "osd_mclock_max_capacity_iops",
    "osd_mclock_max_sequential_bandwidth",
];

/// Sets the scheduler's device capacity: 4 KiB IOPS or sequential bytes/s, the other kept.
fn set_capacity(s: &Shared, key: &str, value: &str) -> Result<String, String> {
    let v: f64 = value
        .trim()
        .parse()
        .map_err(|_| format!("{key}: `{value}` is not a number"))?;
    let mut capacity = s.sched.capacity();
    match key {
        "osd_mclock_max_capacity_iops" => capacity.random_4k_iops = v,
        _ => capacity.seq_bandwidth_bytes_per_s = v,
    }
    s.sched.set_capacity(capacity).map_err(|e| e.to_string())?;
    tracing::info!(osd = s.id, key, value, "config set");
    Ok(format!(
        "{key} set; requests queued from now on are charged against it\n"
    ))
}

/// `pg usage`: per active PG this OSD leads, its client objects and their logical bytes
/// (`PGID objects bytes`, a line each), as its store keeps them: what `cairn df` sums per pool.
async fn pg_usage(s: &Shared) -> Result<String, String> {
    let usage = crate::usage::led_pgs(s).await.map_err(|e| e.to_string())?;
    let mut out = String::new();
    for u in usage {
        let _ = writeln!(out, "{} {} {}", u.pg, u.objects, u.bytes);
    }
    Ok(out)
}

/// `pg objects`: per active PG this OSD leads, its objects, the copies its pool wants, and
/// how many of those are degraded and misplaced (`PGID objects copies degraded misplaced`, a
/// line each): what `cairn status` sums.
async fn pg_objects(s: &Shared) -> Result<String, String> {
    let counts = crate::misplaced::led(s).await.map_err(|e| e.to_string())?;
    let mut out = String::new();
    for (pg, c) in counts {
        let _ = writeln!(
            out,
            "{pg} {} {} {} {}",
            c.objects, c.copies, c.degraded, c.misplaced
        );
    }
    Ok(out)
}

/// Usage as `key=value` pairs: `pgs` (PG copies held, led or not), `primary` (PGs led),
/// `objects` (client objects), `internal` (PG meta and temporary objects; -1 when they could
/// not be listed), `stored`, `allocated` and `capacity` (bytes).
async fn df(s: &Shared) -> String {
    let st = s.store.stats().await;
    let pgs = s.pgs.all();
    let primary = pgs
        .iter()
        .filter(|p| p.status() != PgStatus::Replica)
        .count();
    let (objects, internal) = match crate::objects::count_internal(&s.store).await {
        Ok(n) => (st.objects.saturating_sub(n), n as i64),
        Err(_) => (st.objects, -1),
    };
    cairn_proto::admin::OsdUsage {
        pgs: pgs.len() as u64,
        primary: primary as u64,
        objects,
        stored: st.stored_bytes,
        allocated: st.allocated_bytes,
        capacity: st.capacity_bytes,
        full_ratio: s.cfg.full_ratio,
    }
    .render(internal)
}

/// What the OSD runs on, as JSON (after Ceph's `osd metadata`): the data device's profile and
/// rotation, the DB device (`dedicated_db`, its profile), the cache, and the device kind whose
/// recovery settings apply (`hdd`, `ssd`, `hybrid`).
fn metadata(s: &Shared) -> Result<String, String> {
    let db = s.cfg.db.as_ref();
    let value = serde_json::json!({
        "id": s.id,
        "rotational": s.store.device().properties().rotational,
        "device_profile": s.cfg.device_profile,
        "dedicated_db": db.is_some(),
        "db_profile": db.and_then(|d| d.profile.clone()),
        "cache": s.cache.is_some(),
        "recovery_device": s.throttle.device(),
    });
    serde_json::to_string_pretty(&value)
        .map(|j| j + "\n")
        .map_err(|e| e.to_string())
}

/// One line per PG this OSD leads: id, state, acting set (a copy left out of the interval as
/// too full for its recovery marked `(toofull)`; followed by `(up:[..])` when a temporary
/// acting set serves while the up set is filled), log head, last epoch started.
fn pg_dump(s: &Shared) -> String {
    let mut rows: Vec<(String, String)> = s
        .pgs
        .all()
        .into_iter()
        .filter(|pg| pg.status() != PgStatus::Replica)
        .map(|pg| {
            let iv = pg.interval();
            let (head, les, entries) = match pg.try_lock() {
                Some(inner) => (
                    inner.log.head().to_string(),
                    inner.last_epoch_started.to_string(),
                    inner.log.len().to_string(),
                ),
                None => ("busy".into(), "busy".into(), "busy".into()),
            };
            let acting: Vec<String> = iv
                .acting
                .iter()
                .map(|o| match iv.left_out.contains(o) {
                    true => format!("{o}(toofull)"),
                    false => o.to_string(),
                })
                .collect();
            let up = match iv.up == iv.acting {
                true => String::new(),
                false => {
                    let up: Vec<String> = iv.up.iter().map(i32::to_string).collect();
                    format!("(up:[{}])", up.join(","))
                }
            };
            (
                pg.id.to_string(),
                format!(
                    "{} {} [{}]{up} {head} {les} {entries}",
                    pg.id,
                    pg.state_name(),
                    acting.join(",")
                ),
            )
        })
        .collect();
    rows.sort();
    rows.into_iter().map(|(_, r)| r + "\n").collect()
}

/// Counts of the PGs this OSD leads, by state, as `state count` lines.
fn pg_stats(s: &Shared) -> String {
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for pg in s.pgs.all() {
        if pg.status() != PgStatus::Replica {
            *counts.entry(pg.state_name()).or_default() += 1;
        }
    }
    counts.iter().map(|(k, v)| format!("{k} {v}\n")).collect()
}

/// The scheduler's capacity in force as gauges (a profile's, or measured through the store at
/// boot with `measure_capacity`): what mClock's reservations and limits are shares of.
fn encode_capacity(
    e: &mut DescriptorEncoder<'_>,
    osd: &str,
    c: &cairn_qos::DeviceCapacity,
) -> Written {
    e.gauges(
        "cairn_osd_capacity_iops",
        "The scheduler's capacity in 4 KiB writes per second.",
        [([("osd", osd)], whole(c.random_4k_iops))],
    )?;
    e.gauges(
        "cairn_osd_capacity_bytes_per_second",
        "The scheduler's sequential write bandwidth.",
        [([("osd", osd)], whole(c.seq_bandwidth_bytes_per_s))],
    )
}

/// A measured rate as the whole number a page shows (negative or NaN rates show as 0).
fn whole(rate: f64) -> u64 {
    // `as` saturates a float to the integer range and maps NaN to 0: the intended rounding.
    crate::convert::sat_u64(rate.round().max(0.0))
}

/// The Prometheus page: op and recovery counters, PGs by state, scheduler and store counters,
/// the scheduler's capacity, the messenger's sessions.
pub fn render_metrics(s: &Arc<Shared>) -> String {
    let s = Arc::clone(s);
    cairn_metrics::render(move |e| encode_page(e, &s))
}

fn encode_page(e: &mut DescriptorEncoder<'_>, s: &Shared) -> Written {
    let osd = s.id.to_string();
    let osd = osd.as_str();
    s.metrics.encode(e, osd)?;
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    for pg in s.pgs.all() {
        *counts.entry(pg.state_name()).or_default() += 1;
    }
    e.gauges(
        "cairn_osd_pgs",
        "PGs this OSD leads (or holds as a replica), by state.",
        counts
            .iter()
            .map(|(state, &n)| ([("osd", osd), ("state", state.as_str())], n)),
    )?;
    e.gauges(
        "cairn_osd_map_epoch",
        "The newest cluster map epoch this OSD has.",
        [([("osd", osd)], s.epoch())],
    )?;
    s.sched.encode(e, osd)?;
    let (allowance, primary_ms, replica_ms) = s.throttle.pacing();
    e.gauges(
        "cairn_osd_recovery_pacing_allowance",
        "Background recovery pushes the pacer allows in flight (below 1: a duty cycle).",
        [([("osd", osd)], allowance)],
    )?;
    let levels = [("primary", primary_ms), ("replica", replica_ms)];
    e.gauges(
        "cairn_osd_recovery_pacing_client_level_seconds",
        "Mean small client op latency without recovery that the pacer compares with, of the ops served as primary and of the writes applied as a replica.",
        levels
            .into_iter()
            .filter_map(|(stream, ms)| Some(([("osd", osd), ("stream", stream)], ms? / 1000.0))),
    )?;
    encode_capacity(e, osd, &s.sched.capacity())?;
    let store = s
        .store_stats
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    crate::metrics::encode_store(e, osd, &store)?;
    if let Some(cache) = &s.cache {
        cache.stats().encode(e, &format!("osd.{osd}"))?;
    }
    match s.messenger.get() {
        Some(m) => m.encode(e, &format!("osd.{osd}")),
        None => Ok(()),
    }
}
