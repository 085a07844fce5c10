//! The OSD process: mounts (or creates) its store, loads its PGs, boots with the monitor,
//! follows the map (peering on every interval change), heartbeats its peers, sends beacons,
//! serves client ops as primary, replica writes and recovery requests as a replica, and
//! Prometheus metrics over HTTP. Dropping the daemon stops every task it started.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

use bytes::Bytes;
use cairn_blockdev::{
    BlockDevError, BlockDevice, CrashSwitch, FaultDevice, FileDevice, FileDeviceOptions, IoEngine,
    Profile,
};
use cairn_client::mon::MonClient;
use cairn_clustermap::PgId;
use cairn_msgr::blockcrc::CRC_BLOCK_BYTES;
use cairn_msgr::handshake::AuthPeer;
use cairn_msgr::http::serve_metrics;
use cairn_msgr::session::{Listener, Session, SessionSender};
use cairn_msgr::Limits;
use cairn_proto::mon::Request;
use cairn_proto::peer::{PeerReply, PeerRequest};
use cairn_proto::{
    decode, decode_with_data, encode, OpHeader, OpResult, RepOpHeader, ReplyHeader, MSG_OSD_OP,
    MSG_OSD_OP_REPLY, MSG_OSD_REPOP, MSG_OSD_REPOP_REPLY, MSG_PEER_REPLY, MSG_PEER_REQUEST,
    MSG_PING, MSG_PING_REPLY,
};
use cairn_qos::{CostModel, DeviceCapacity};
use cairn_store::{DataCrcs, KvLocation, Store, StoreConfig, StoreError};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// In-place writes a checkpoint keeps in flight when the store runs on an SSD cache.
const CACHED_CHECKPOINT_IO_DEPTH: usize = 8;
/// In-place writes a checkpoint keeps in flight when the store's log is on a DB device: no
/// commit waits on the data device there, so the disk's command queue may reorder the
/// checkpoint's random writes (Ceph submits deferred writes to an HDD 64 at a time,
/// `bluestore_deferred_batch_ops_hdd`); one at a time, an HDD applies fewer small writes than
/// clients make (one random write per rotation), and commits end up waiting for checkpoints.
const DB_CHECKPOINT_IO_DEPTH: usize = 16;

use crate::error::OsdError;
use crate::payload::Payload;
use crate::sched::{InFlightLimits, OpScheduler};
use crate::shared::Shared;
use crate::{admin, peering, pgmeta, primary, replica};

pub use crate::config::{OsdAuth, OsdConfig};

/// A running OSD. Dropping it stops every task it started and releases its store.
pub struct OsdDaemon {
    id: i32,
    addr: SocketAddr,
    metrics_addr: Option<SocketAddr>,
    shared: Arc<Shared>,
    /// Ends when the OSD's state, its store with it, has been dropped.
    closed: Option<tokio::sync::oneshot::Receiver<()>>,
    /// Gets the cause when the OSD fail-stops (see [`crate::failstop`]).
    failed: Option<tokio::sync::oneshot::Receiver<String>>,
}

/// Size of each write of zeros when prefilling a device file.
const PREFILL_CHUNK_BYTES: u64 = 8 << 20;
/// How long an OSD waits, retrying every [`STORE_LOCK_RETRY`], for its store's lock held by
/// another process: an instance of the same OSD killed a moment before (a crash, `kill -9`,
/// a supervisor's restart) holds it until its last thread has exited.
const STORE_LOCK_WAIT: Duration = Duration::from_secs(15);
/// Pause between two tries to mount a locked store.
const STORE_LOCK_RETRY: Duration = Duration::from_millis(100);
/// How often the store's counters are copied for the metrics page.
const STORE_STATS_EVERY: Duration = Duration::from_secs(1);

/// What the store runs on besides its file: the fault device when `cfg.fault_injection`
/// asks for one, and the cache (with the slot its cleaner's scheduler goes in) when
/// `cfg.cache` does.
#[derive(Default)]
struct Under {
    faults: Option<Arc<FaultDevice>>,
    cache: Option<(Arc<cairn_cache::CacheDevice>, crate::cached::SchedulerSlot)>,
}

/// The OSD's store, and what runs under it.
async fn open_store(cfg: &OsdConfig) -> Result<(Store, Under), OsdError> {
    std::fs::create_dir_all(&cfg.data_dir)
        .map_err(|e| OsdError::Protocol(format!("data dir {}: {e}", cfg.data_dir.display())))?;
    let block = cfg.data_dir.join("block");
    let kv = cfg.data_dir.join("kv.redb");
    let fresh = !kv.exists();
    let file = FileDevice::open(
        &block,
        &FileDeviceOptions {
            size_bytes: Some(cfg.device_bytes),
            // The daemon's workers serve the network too (see `cairn osd run --threads`): they
            // submit device I/O with AIO and never block in a system call; without O_DIRECT,
            // reads go to the blocking pool.
            engine: IoEngine::Aio,
            inline_reads: false,
            ..FileDeviceOptions::default()
        },
    )?;
    let backing = file.backing()?;
    if backing.short() {
        let why = format!(
            "{} has {} MiB not yet backed by its file system, which has {} MiB free",
            block.display(),
            backing.unbacked_bytes >> 20,
            backing.fs_free_bytes >> 20
        );
        if fresh && cfg.prefill {
            return Err(BlockDevError::Config(format!("cannot prefill: {why}")).into());
        }
        tracing::warn!("{why}: the store's writes will fail once the file system is full");
    }
    if fresh && cfg.prefill {
        let mib = file.properties().size_bytes >> 20;
        tracing::info!(mib, "prefilling the device file with zeros");
        file.prefill(PREFILL_CHUNK_BYTES).await?;
    }
    let mut dev = crate::side_device::emulate(Arc::new(file), cfg.device_profile.as_deref())?;
    let store_cfg = StoreConfig {
        max_groups_in_flight: cfg.store_groups_in_flight,
        // A cache takes the checkpoint's in-place writes several at a time without the
        // HDD's seeks, and behind a DB device no commit waits for the data device's queue
        // (`StoreConfig::checkpoint_io_depth`).
        checkpoint_io_depth: match (cfg.cache.is_some(), cfg.db.is_some()) {
            (true, _) => CACHED_CHECKPOINT_IO_DEPTH,
            (false, true) => DB_CHECKPOINT_IO_DEPTH,
            (false, false) => StoreConfig::default().checkpoint_io_depth,
        },
        commit_pacing: cfg.store_commit_pacing,
        ..StoreConfig::default()
    };
    crate::db_device::check_layout(&cfg.data_dir, cfg.db.is_some(), fresh)?;
    if let Some(db) = &cfg.db {
        if cfg.cache.is_some() {
            return Err(OsdError::Config(
                "an OSD has either a cache or a DB device in front of its data device, not both"
                    .into(),
            ));
        }
        dev = crate::db_device::open(&cfg.data_dir, db, dev, &store_cfg)?;
    }
    if fresh && cfg.cache.is_some() {
        // Formatted on the HDD itself, before its cache exists: the store's zeroed log ring
        // would otherwise fill the new cache with dirty lines, one metadata write each.
        Store::mkfs(dev.clone(), KvLocation::File(kv.clone()), &store_cfg).await?;
    }
    let mut under = Under::default();
    if let Some(cache) = &cfg.cache {
        let (device, slot) = crate::cached::open(&cfg.data_dir, cache, dev.clone(), fresh).await?;
        dev = device.clone();
        under.cache = Some((device, slot));
    }
    let faults = cfg
        .fault_injection
        .then(|| Arc::new(FaultDevice::new(dev.clone(), CrashSwitch::new())));
    if let Some(f) = &faults {
        dev = f.clone();
    }
    under.faults = faults;
    if fresh && cfg.cache.is_none() {
        Store::mkfs(dev.clone(), KvLocation::File(kv.clone()), &store_cfg).await?;
    }
    let locked_since = Instant::now();
    let mut warned = false;
    loop {
        match Store::mount(dev.clone(), KvLocation::File(kv.clone()), store_cfg.clone()).await {
            Err(StoreError::Locked(path)) if locked_since.elapsed() < STORE_LOCK_WAIT => {
                if !warned {
                    tracing::warn!(kv = %path, "store locked by another process (an instance of this OSD still exiting?): waiting up to {STORE_LOCK_WAIT:?}");
                    warned = true;
                }
                tokio::time::sleep(STORE_LOCK_RETRY).await;
            }
            mounted => return Ok((mounted?, under)),
        }
    }
}

/// Refuses a byte-size setting outside `[min, max.0]`; `max.1` says where the maximum comes from.
fn check_bytes_setting(name: &str, value: u64, min: u64, max: (u64, &str)) -> Result<(), OsdError> {
    if (min..=max.0).contains(&value) {
        return Ok(());
    }
    Err(OsdError::Config(format!(
        "{name} {value} must be in [{min}, {}] ({})",
        max.0, max.1
    )))
}

/// Refuses settings out of their bounds, and takes a device profile's capacity.
fn check_config(cfg: &mut OsdConfig) -> Result<(), OsdError> {
    if !(cfg.full_ratio > 0.0 && cfg.full_ratio <= 1.0) {
        return Err(OsdError::Config(format!(
            "full_ratio {} must be in (0, 1]",
            cfg.full_ratio
        )));
    }
    let frame_limit = u64::from(cairn_msgr::Limits::default().max_payload_bytes);
    let half = (frame_limit / 2, "half the messenger's frame limit");
    let quarter = (frame_limit / 4, "a quarter of the messenger's frame limit");
    check_bytes_setting("max_object_bytes", cfg.max_object_bytes, 1, half)?;
    if let Some(chunk) = cfg.recovery_chunk_bytes {
        check_bytes_setting("recovery_chunk_bytes", chunk, 4096, quarter)?;
    }
    check_bytes_setting(
        "max_xattr_bytes_per_object",
        cfg.max_xattr_bytes_per_object,
        1,
        quarter,
    )?;
    crate::sched::check_shard_count(cfg.op_shards)?;
    if !(cfg.nearfull_ratio > 0.0 && cfg.nearfull_ratio <= cfg.full_ratio) {
        return Err(OsdError::Config(format!(
            "nearfull_ratio {} must be in (0, full_ratio {}]",
            cfg.nearfull_ratio, cfg.full_ratio
        )));
    }
    let backfill = cfg.backfillfull_ratio;
    if !(backfill >= cfg.nearfull_ratio && backfill <= cfg.full_ratio && backfill < 1.0) {
        return Err(OsdError::Config(format!(
            "backfillfull_ratio {backfill} must be in [nearfull_ratio {}, full_ratio {}] and under 1",
            cfg.nearfull_ratio, cfg.full_ratio
        )));
    }
    if let Some(name) = &cfg.device_profile {
        let p = Profile::load(name)?;
        cfg.capacity = DeviceCapacity {
            random_4k_iops: p.expected.random_write_4k_iops,
            seq_bandwidth_bytes_per_s: p.expected.sequential_write_mb_s * 1e6,
        };
    }
    Ok(())
}

impl OsdDaemon {
    /// Starts an OSD: store and PGs, monitor boot and subscription, listener, heartbeats,
    /// beacons, metrics.
    pub async fn start(mut cfg: OsdConfig) -> Result<OsdDaemon, OsdError> {
        check_config(&mut cfg)?;
        let (store, under) = open_store(&cfg).await?;
        Self::serve(cfg, store, under).await
    }

    /// Starts an OSD on a store its caller has mounted — a simulation's in-memory devices —
    /// instead of the device file under `cfg.data_dir`: no cache or DB device is put in front
    /// of it, and no capacity is measured or saved.
    pub async fn start_on_store(mut cfg: OsdConfig, store: Store) -> Result<OsdDaemon, OsdError> {
        check_config(&mut cfg)?;
        cfg.measure_capacity = false;
        Self::serve(cfg, store, Under::default()).await
    }

    /// Serves as an OSD on `store` (mounted), with what runs `under` it.
    async fn serve(mut cfg: OsdConfig, store: Store, under: Under) -> Result<OsdDaemon, OsdError> {
        if cfg.measure_capacity {
            cfg.capacity = crate::capacity::at_boot(&store, cfg.capacity, &cfg.data_dir).await?;
        }
        let limits = InFlightLimits {
            ops: cfg.max_inflight_ops,
            cost_ns: cfg.max_inflight_cost_ms.saturating_mul(1_000_000),
        };
        let sched = OpScheduler::new(
            cfg.policy.clone(),
            CostModel::from_capacity(cfg.capacity)?,
            limits,
            cfg.op_shards,
        )?;
        // Replies to clients go out in turns, so that one large read's reply does not hold up
        // a runtime worker (see `Limits::write_turn_bytes`); repops to peers go whole.
        let service = Arc::new(crate::auth::ServiceSecret::default());
        let authz = cfg.auth.as_ref().map(|a| {
            Arc::new(crate::auth::OsdAuthorizer {
                secret: service.clone(),
                min_mode: a.mode,
            }) as Arc<dyn cairn_msgr::handshake::Authorizer>
        });
        let mut listener =
            Listener::bind_with_auth(cfg.listen, Limits::single_worker(), authz).await?;
        let addr = listener.local_addr();
        let creds = cfg.auth.as_ref().map(|a| {
            Arc::new(cairn_msgr::handshake::StaticCredentials(
                cairn_msgr::handshake::DialCredentials {
                    entity: a.entity.clone(),
                    ticket: Vec::new(),
                    key: a.key.clone(),
                    mode: a.mode,
                },
            )) as Arc<dyn cairn_msgr::handshake::CredentialSource>
        });
        let want_id = match &cfg.auth {
            Some(a) => {
                let own = a.entity.osd_id().ok_or_else(|| {
                    OsdError::Protocol(format!("{} is not an OSD's entity", a.entity))
                })?;
                if cfg.want_id.is_some_and(|w| w != own) {
                    return Err(OsdError::Protocol(format!(
                        "asked to boot as osd.{} with the key of {}",
                        cfg.want_id.unwrap_or(own),
                        a.entity
                    )));
                }
                Some(own)
            }
            None => cfg.want_id,
        };
        let mon = Arc::new(MonClient::connect_as(cfg.mon, session_id(&cfg.uuid), creds).await);
        if let Some(a) = &cfg.auth {
            crate::auth::fetch_service_secret(&mon, a, &service).await?;
        }
        let peer_credentials = cfg.auth.as_ref().map(|a| {
            Arc::new(crate::auth::PeerCredentials {
                entity: a.entity.clone(),
                secret: service.clone(),
                mode: a.mode,
            }) as Arc<dyn cairn_msgr::handshake::CredentialSource>
        });
        let boot = mon
            .op(
                Request::Boot {
                    uuid: cfg.uuid.clone(),
                    host: cfg.host.clone(),
                    addr: addr.to_string(),
                    crush_weight: cfg.crush_weight,
                    want_id,
                },
                30_000,
            )
            .await?;
        let id = boot
            .osd_id
            .ok_or_else(|| OsdError::Protocol("boot reply without an id".into()))?;
        let (closed_tx, closed) = tokio::sync::oneshot::channel();
        let mut state = Shared::new(
            id,
            store,
            sched,
            mon.watch(),
            mon.clone(),
            cfg.clone(),
            closed_tx,
        );
        state.faults = under.faults;
        if let Some((device, slot)) = under.cache {
            // From here on the cleaner's write-back waits for best-effort slots.
            let _ = slot.set(state.sched.clone());
            state.cache = Some(device);
        }
        state.peers = crate::peers::Peers::new(id).with_credentials(peer_credentials);
        let shared = Arc::new(state);
        let (failed_tx, failed) = tokio::sync::oneshot::channel();
        tokio::spawn(crate::failstop::watch(Arc::downgrade(&shared), failed_tx));
        let _ = shared.messenger.set(listener.stats());
        let mut oldest_les = u64::MAX;
        for coll in shared.store.list_collections().await? {
            let Some(pg) = coll
                .strip_prefix("pg.")
                .and_then(|p| p.parse::<PgId>().ok())
            else {
                continue;
            };
            let loaded = pgmeta::load(&shared.store, &coll, cfg.max_log_entries).await?;
            let les = loaded.last_epoch_started;
            shared.pgs.insert_loaded(pg, loaded);
            oldest_les = oldest_les.min(les.max(1));
        }
        mon.subscribe(30_000).await?;
        mon.wait_for_epoch(boot.epoch, 30_000).await?;
        // The epochs since its PGs last activated, which it may not have seen: fetched once
        // here rather than by each PG's first peering.
        if oldest_les < boot.epoch {
            if let Err(e) = shared.past_maps.range(&mon, oldest_les, boot.epoch).await {
                tracing::warn!(osd = id, error = %e, "past maps not fetched at boot");
            }
        }
        let metrics_addr = match cfg.metrics_listen {
            Some(a) => {
                let s = shared.clone();
                let (bound, task) = serve_metrics(a, move || admin::render_metrics(&s)).await?;
                shared.track(task);
                Some(bound)
            }
            None => None,
        };
        let s = shared.clone();
        shared.track(tokio::spawn(async move {
            loop {
                let stats = s.store.stats().await;
                *s.store_stats.lock().unwrap_or_else(|p| p.into_inner()) = stats;
                tokio::time::sleep(STORE_STATS_EVERY).await;
            }
        }));
        let beacon_every = Duration::from_millis(cfg.beacon_interval_ms.max(10));
        let beacon_mon = mon.clone();
        let s = shared.clone();
        shared.track(tokio::spawn(async move {
            loop {
                tokio::time::sleep(beacon_every).await;
                let (nearfull, full) = crate::primary::past_ratios(&s);
                let beacon = Request::Beacon { id, full, nearfull };
                if let Err(e) = beacon_mon.op(beacon, 5_000).await {
                    tracing::warn!(osd = id, error = %e, "beacon failed");
                }
            }
        }));
        shared.track(tokio::spawn(crate::usage::report_forever(
            shared.clone(),
            Duration::from_millis(cfg.pg_usage_interval_ms.max(10)),
        )));
        let s = shared.clone();
        let reboot = Request::Boot {
            uuid: cfg.uuid.clone(),
            host: cfg.host.clone(),
            addr: addr.to_string(),
            crush_weight: cfg.crush_weight,
            // As at the first boot: an authenticated OSD names its own id.
            want_id,
        };
        shared.track(tokio::spawn(async move {
            let mut rx = s.map.clone();
            let mut applied: Option<u64> = None;
            let rebooter = crate::reboot::Rebooter::default();
            loop {
                let map = rx.borrow_and_update().clone();
                if let Some(map) = map {
                    if let Some(last) = applied.filter(|last| map.epoch > last + 1) {
                        peering::catch_up(&s, last, &map).await;
                    }
                    applied = Some(map.epoch);
                    s.past_maps.note(&map);
                    s.throttle.note_new_map(map.epoch, unsettled(&map));
                    peering::on_map(&s, &map);
                    if crate::reboot::must_boot(&map, s.id) {
                        // Wrongly marked down while alive (e.g. a partition healed), or booted
                        // while `noup` was set: boot again.
                        rebooter.boot_until_up(&s, reboot.clone(), map.epoch);
                    }
                }
                if rx.changed().await.is_err() {
                    return;
                }
            }
        }));
        shared.track(tokio::spawn(crate::heartbeat::run(shared.clone())));
        shared.track(tokio::spawn(crate::strays::run(shared.clone())));
        shared.track(tokio::spawn(crate::scrub::run(shared.clone())));
        let s = shared.clone();
        let pending = Arc::new(Pending::new(&cfg));
        shared.track(tokio::spawn(async move {
            while let Some(session) = listener.accept().await {
                let handle = tokio::spawn(serve(s.clone(), session, pending.clone()));
                s.track(handle);
            }
        }));
        tracing::info!(osd = id, %addr, "osd up");
        Ok(OsdDaemon {
            id,
            addr,
            metrics_addr,
            shared,
            closed: Some(closed),
            failed: Some(failed),
        })
    }

    /// Resolves with the cause once the OSD has fail-stopped (its store failed; it reported
    /// itself down and serves nothing more). Pending for ever on an OSD that never fails, and
    /// after the cause was taken once.
    pub async fn failed(&mut self) -> String {
        match self.failed.as_mut() {
            Some(rx) => match rx.await {
                Ok(why) => {
                    self.failed = None;
                    why
                }
                Err(_) => {
                    self.failed = None;
                    std::future::pending().await
                }
            },
            None => std::future::pending().await,
        }
    }

    /// Stops the OSD and waits, at most `within`, until every one of its tasks has let go of
    /// its state: its store is then closed and can be mounted again at once (an OSD restarted
    /// in the same process). Dropping an `OsdDaemon` stops it the same way without waiting.
    pub async fn shutdown(mut self, within: Duration) -> Result<(), OsdError> {
        let state = Arc::downgrade(&self.shared);
        let closed = self.closed.take();
        drop(self);
        let Some(closed) = closed else {
            return Ok(());
        };
        match tokio::time::timeout(within, closed).await {
            Ok(_) => Ok(()),
            Err(_) => Err(OsdError::StillBusy {
                waited_ms: crate::convert::millis(within),
                holders: state.strong_count(),
            }),
        }
    }

    /// This OSD's id.
    pub fn id(&self) -> i32 {
        self.id
    }

    /// The address it serves on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The metrics page's address, if it serves one.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_addr
    }
}

impl Drop for OsdDaemon {
    fn drop(&mut self) {
        self.shared.sched.stop();
        self.shared.stop_tasks();
    }
}

/// Whether `map` leaves data to move somewhere in the cluster: a PG served from a temporary
/// acting set, or an OSD that is in but down (its PGs are degraded).
fn unsettled(map: &cairn_clustermap::ClusterMap) -> bool {
    let degraded = map
        .placement
        .osds
        .values()
        .any(|o| o.exists && o.reweight > 0 && !o.up);
    degraded || !map.placement.pg_temp.is_empty()
}

fn session_id(uuid: &str) -> u64 {
    uuid.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

/// Serves one incoming session: client ops, replica writes, peering requests, heartbeats and
/// admin commands. A malformed message is logged and dropped; the session goes on.
/// What the OSD holds for requests accepted and not yet answered: client ops by count and by
/// data bytes (KiB permits), and admin commands by count. Each is an explicit limit; a
/// request past one is refused with a retryable error.
struct Pending {
    ops: Arc<Semaphore>,
    op_kib: Arc<Semaphore>,
    admin: Arc<Semaphore>,
    peer: Arc<Semaphore>,
}

impl Pending {
    fn new(cfg: &OsdConfig) -> Pending {
        let kib = usize::try_from(cfg.max_pending_op_bytes.div_ceil(1024))
            .unwrap_or(Semaphore::MAX_PERMITS)
            .clamp(1, Semaphore::MAX_PERMITS);
        Pending {
            ops: Arc::new(Semaphore::new(cfg.max_pending_ops.max(1))),
            op_kib: Arc::new(Semaphore::new(kib)),
            admin: Arc::new(Semaphore::new(cfg.max_admin_requests.max(1))),
            peer: Arc::new(Semaphore::new(cfg.max_peer_requests.max(1))),
        }
    }

    /// Room for one client op carrying `data_bytes`, or None when either limit is reached
    /// (an op larger than the whole byte limit is never admitted: the object size limit,
    /// far below it, refuses it anyway).
    fn admit_op(&self, data_bytes: usize) -> Option<(OwnedSemaphorePermit, OwnedSemaphorePermit)> {
        let kib = u32::try_from(data_bytes.div_ceil(1024).max(1)).ok()?;
        let count = self.ops.clone().try_acquire_owned().ok()?;
        let bytes = self.op_kib.clone().try_acquire_many_owned(kib).ok()?;
        Some((count, bytes))
    }
}

/// Why the authenticated `peer` may not send a message of type `msg_type` at all (what only
/// OSDs send, or admin commands), if it may not; client ops are checked per pool once decoded.
fn refused_by_type(peer: Option<&AuthPeer>, msg_type: u16) -> Option<String> {
    let need = match msg_type {
        MSG_OSD_REPOP | MSG_PEER_REQUEST | MSG_PING => crate::auth::Need::OsdPeer,
        admin::MSG_ADMIN => crate::auth::Need::Admin,
        _ => return None,
    };
    crate::auth::refusal(peer?, need)
}

/// Why the authenticated `peer` may not run client op `op`, if it may not: the op's pool
/// (by name, from the map) must be granted for reading, or writing when it writes, and a
/// forced write needs a metadata server's (or an admin's) monitor capability.
fn refused_op(s: &Shared, peer: Option<&AuthPeer>, op: &OpHeader) -> Option<String> {
    let peer = peer?;
    let pool = s
        .map
        .borrow()
        .as_ref()
        .and_then(|m| m.placement.pools.get(&op.pool).map(|p| p.name.clone()))
        .unwrap_or_default();
    let access = match op.kind.is_write() {
        true => cairn_auth::OsdAccess::Write,
        false => cairn_auth::OsdAccess::Read,
    };
    if op.full_force {
        if let Some(why) = crate::auth::refusal(peer, crate::auth::Need::FullForce) {
            return Some(why);
        }
    }
    crate::auth::refusal(peer, crate::auth::Need::Pool(&pool, access))
}

/// The client id an op is scheduled as. A client authenticated with a ticket that binds an
/// id is scheduled by that id alone, and an op naming another is refused; one whose ticket
/// binds none, by an id derived from its entity (a client cannot pass for another to share
/// its CRR-N queue or TBF bucket). Unauthenticated sessions and daemons: the id the op names,
/// or the session's where it names none.
fn scheduled_as(named: u64, session: u64, peer: Option<&AuthPeer>) -> Result<u64, String> {
    let claimed = |id: u64| match named {
        0 => Ok(id),
        n if n == id => Ok(id),
        n => Err(format!(
            "the op names client id {n}, but this session authenticated as client id {id}"
        )),
    };
    match peer {
        Some(p) if matches!(p.entity, cairn_auth::EntityName::Client(_)) => match p.client_id {
            Some(bound) => claimed(bound),
            None => claimed(entity_client_id(&p.entity)),
        },
        _ => Ok(named_or_session(named, session)),
    }
}

/// The id an op names, or its session's where it names none.
fn named_or_session(named: u64, session: u64) -> u64 {
    match named {
        0 => session,
        id => id,
    }
}

/// The client id of an authenticated client whose ticket binds none: a hash of its entity
/// name, the same on every OSD (the top bit set, apart from the small ids studies choose).
fn entity_client_id(entity: &cairn_auth::EntityName) -> u64 {
    let name = entity.to_string();
    let low = u64::from(crc_fast::crc32_iscsi(name.as_bytes()));
    let high = u64::from(crc_fast::crc32_iscsi(&[name.as_bytes(), b"#"].concat()));
    (1 << 63) | (high << 32) | low
}

/// Ping replies of one session waiting for room in its window at once; pings past them go
/// unanswered.
const PING_REPLIES_QUEUED: usize = 4;

/// Answers a refusal or a busy reply from a session's read loop without waiting for room in
/// the session's window. A peer that reads no replies fills the window; waiting for it here
/// would stop the loop, then the session's driver behind its full incoming queue, and with it
/// the acknowledgements and timeouts that end such a session, while the peer's ops keep their
/// pending-op budget. The answer is dropped instead: the peer's own op timeout takes over.
fn answer_now(s: &Shared, sender: &SessionSender, msg_type: u16, payload: impl Into<Bytes>) {
    if let Err(e) = sender.try_send(msg_type, payload) {
        tracing::debug!(osd = s.id, msg_type, error = %e, "answer dropped: the session has no room");
    }
}

async fn serve(s: Arc<Shared>, mut session: Session, pending: Arc<Pending>) {
    let sender = session.sender();
    let client = session.id();
    let peer = session.peer();
    let ping_slots = Arc::new(Semaphore::new(PING_REPLIES_QUEUED));
    while let Some(frame) = session.recv().await {
        let msg_type = frame.header.msg_type;
        if let Some(why) = refused_by_type(peer.as_deref(), msg_type) {
            tracing::warn!(osd = s.id, session = client, %why, "message refused");
            if msg_type == admin::MSG_ADMIN {
                let reply = admin::refused(&frame.payload, why);
                answer_now(&s, &sender, admin::MSG_ADMIN_REPLY, reply);
            }
            continue;
        }
        let (seg, seg_crc) = (frame.data().clone(), frame.data_crc());
        let block_crcs = frame.data_block_crcs().map(|crcs| DataCrcs {
            block_bytes: CRC_BLOCK_BYTES as u64,
            crcs: crcs.clone(),
        });
        let received = |bytes: Bytes, crc: u32| Payload {
            bytes,
            crc,
            block_crcs: block_crcs.clone(),
        };
        let payload = frame.payload;
        match msg_type {
            MSG_OSD_OP => {
                let (op, data, data_crc) =
                    match decode_with_data::<OpHeader>(&payload, &seg, seg_crc) {
                        Ok(x) => x,
                        Err(e) => {
                            tracing::warn!(osd = s.id, error = %e, "malformed client op");
                            continue;
                        }
                    };
                let who = scheduled_as(op.client, client, peer.as_deref());
                let refused = refused_op(&s, peer.as_deref(), &op).or(who.clone().err());
                if let Some(why) = refused {
                    tracing::warn!(osd = s.id, session = client, %why, "client op refused");
                    let h = ReplyHeader::bare(op.tid, s.epoch(), OpResult::Invalid(why));
                    answer_now(&s, &sender, MSG_OSD_OP_REPLY, encode(&h, &[]));
                    continue;
                }
                let Some(permit) = pending.admit_op(data.len()) else {
                    let h = ReplyHeader::bare(
                        op.tid,
                        s.epoch(),
                        OpResult::Failed("osd busy: too many pending ops".into()),
                    );
                    answer_now(&s, &sender, MSG_OSD_OP_REPLY, encode(&h, &[]));
                    continue;
                };
                let (s2, out) = (s.clone(), sender.clone());
                let data = received(data, data_crc);
                // Taken as the message is read: the write's place among its object's writes.
                let turn = op.kind.is_write().then(|| {
                    let pg = PgId {
                        pool: op.pool,
                        seed: op.pg_seed,
                    };
                    s.write_turns.take(pg, &op.object)
                });
                s.spawn(async move {
                    // Boxed: the op's future is large, and spawning moves the task by value.
                    let who = who.unwrap_or(client);
                    let (h, body) = Box::pin(primary::client_op(s2, who, op, data, turn)).await;
                    let crc = h.data_crc;
                    let _ = out
                        .send_data(MSG_OSD_OP_REPLY, encode(&h, &[]), body, Some(crc))
                        .await;
                    drop(permit);
                });
            }
            MSG_OSD_REPOP => {
                let (rep, data, data_crc) =
                    match decode_with_data::<RepOpHeader>(&payload, &seg, seg_crc) {
                        Ok(x) => x,
                        Err(e) => {
                            tracing::warn!(osd = s.id, error = %e, "malformed replica write");
                            continue;
                        }
                    };
                let (s2, out) = (s.clone(), sender.clone());
                let work = primary::client_work(
                    named_or_session(rep.client, client),
                    &rep.object,
                    &rep.kind,
                    data.len() as u64,
                    rep.background,
                );
                let paced = !rep.background && data.len() as u64 <= primary::PACED_OP_MAX_BYTES;
                let data = received(data, data_crc);
                // Scheduled inside `repop`, once it is this PG's next write.
                drop(s.spawn(async move {
                    let started = tokio::time::Instant::now();
                    let h = Box::pin(replica::repop(&s2, rep, data, work)).await;
                    if paced && h.result == cairn_proto::op::OpResult::Ok {
                        s2.throttle
                            .observe_client_op(crate::pacing::Stream::Replica, started.elapsed());
                    }
                    let _ = out.send(MSG_OSD_REPOP_REPLY, encode(&h, &[])).await;
                }));
            }
            MSG_PEER_REQUEST => {
                let (req, data) = match decode::<PeerRequest>(&payload) {
                    Ok(x) => x,
                    Err(e) => {
                        tracing::warn!(osd = s.id, error = %e, "malformed peer request");
                        continue;
                    }
                };
                let Ok(permit) = pending.peer.clone().try_acquire_owned() else {
                    let reply = PeerReply {
                        tid: req.tid,
                        answer: Err("osd busy: too many peer requests being served".into()),
                    };
                    answer_now(&s, &sender, MSG_PEER_REPLY, encode(&reply, &[]));
                    continue;
                };
                let (s2, out) = (s.clone(), sender.clone());
                s.spawn(async move {
                    let (reply, body) = replica::peer_request(&s2, req, data).await;
                    let _ = out.send(MSG_PEER_REPLY, encode(&reply, &body)).await;
                    drop(permit);
                });
            }
            MSG_PING => {
                // Queued from a task of its own rather than dropped when the window is full:
                // recovery's replies can fill a peer session's window for longer than the
                // heartbeat grace, and a dropped reply would get a live OSD reported down.
                // A few at most per session: one reply waiting already shows this OSD alive.
                let Ok(slot) = ping_slots.clone().try_acquire_owned() else {
                    continue;
                };
                let out = sender.clone();
                drop(s.spawn(async move {
                    let _ = out.send(MSG_PING_REPLY, payload).await;
                    drop(slot);
                }));
            }
            admin::MSG_ADMIN => {
                let Ok(permit) = pending.admin.clone().try_acquire_owned() else {
                    let reply = admin::busy(&payload);
                    answer_now(&s, &sender, admin::MSG_ADMIN_REPLY, reply);
                    continue;
                };
                let (s2, out) = (s.clone(), sender.clone());
                s.spawn(async move {
                    let reply: Bytes = admin::handle(&s2, &payload).await;
                    let _ = out.send(admin::MSG_ADMIN_REPLY, reply).await;
                    drop(permit);
                });
            }
            other => {
                let known = cairn_proto::registry::name_of(other).unwrap_or("unknown");
                tracing::warn!(
                    osd = s.id,
                    msg_type = other,
                    known,
                    "unexpected message type"
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_settings_outside_their_range_are_refused_by_name() {
        let max = (1024, "the test's bound");
        assert!(check_bytes_setting("x", 1, 1, max).is_ok());
        assert!(check_bytes_setting("x", 1024, 1, max).is_ok());
        for bad in [0, 1025] {
            match check_bytes_setting("max_xattr_bytes_per_object", bad, 1, max) {
                Err(OsdError::Config(why)) => assert_eq!(
                    why,
                    format!(
                        "max_xattr_bytes_per_object {bad} must be in [1, 1024] (the test's bound)"
                    )
                ),
                other => panic!("{bad} accepted: {other:?}"),
            }
        }
    }
}
