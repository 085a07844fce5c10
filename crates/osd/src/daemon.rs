//! The OSD process: mounts (or creates) its store, boots with the monitor, follows the map,
//! sends beacons, serves client ops as primary and replica writes as a replica.
//!
//! Write path (primary): check the map says we are primary -> queue in the scheduler (class
//! client) -> assign the PG's next version -> commit locally (durable) and forward to every
//! other acting OSD, whose replica write is queued in *its* scheduler and committed durably ->
//! reply to the client only when all have acknowledged (invariant 1). A replica that fails or
//! times out fails the op; the client retries. Reads are served by the primary from its store,
//! which verifies every block's crc32c (invariant 6).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use cairn_blockdev::{BlockDevice, FileDevice, FileDeviceOptions};
use cairn_clustermap::PgId;
use cairn_mon::client::MonClient;
use cairn_mon::monitor::Request;
use cairn_mon::ClusterMap;
use cairn_msgr::session::{Listener, Session, SessionSender};
use cairn_msgr::Limits;
use cairn_qos::{CostModel, DeviceCapacity, PolicyConfig, QosClass, QosQueue};
use cairn_store::{KvLocation, Store, StoreConfig, StoreError, Transaction};
use tokio::sync::{oneshot, watch};

use crate::error::OsdError;
use crate::sched::OpScheduler;
use cairn_proto::{
    decode, encode, OpHeader, OpKind, OpResult, ReplyHeader, MSG_OSD_OP, MSG_OSD_OP_REPLY,
    MSG_OSD_REPOP, MSG_OSD_REPOP_REPLY,
};

/// Object attribute holding the object's version.
const VERSION_ATTR: &str = "_v";

/// How to run one OSD.
#[derive(Clone, Debug)]
pub struct OsdConfig {
    /// Stable identity (keeps the OSD id across restarts).
    pub uuid: String,
    /// Host name (CRUSH failure domain).
    pub host: String,
    /// Address to serve on (port 0 = any free port).
    pub listen: SocketAddr,
    /// Monitor address.
    pub mon: SocketAddr,
    /// Directory holding `block` (the data device file) and `kv.redb` (metadata).
    pub data_dir: PathBuf,
    /// Size of the data device file when it is created.
    pub device_bytes: u64,
    /// CRUSH weight (16.16).
    pub crush_weight: u32,
    /// Scheduler policy.
    pub policy: PolicyConfig,
    /// Device capacity for the cost model.
    pub capacity: DeviceCapacity,
    /// Most ops running at once (explicit limit).
    pub max_inflight_ops: usize,
    /// Beacon period to the monitor.
    pub beacon_interval_ms: u64,
    /// How long the primary waits for a replica's acknowledgement.
    pub repop_timeout_ms: u64,
}

impl OsdConfig {
    /// Defaults for a test or laptop OSD in `data_dir` talking to `mon`.
    pub fn local(uuid: &str, host: &str, mon: SocketAddr, data_dir: PathBuf) -> Self {
        OsdConfig {
            uuid: uuid.into(),
            host: host.into(),
            listen: "127.0.0.1:0".parse().expect("literal address"),
            mon,
            data_dir,
            device_bytes: 1 << 30,
            crush_weight: 0x10000,
            policy: PolicyConfig::Mclock(Default::default()),
            capacity: DeviceCapacity {
                random_4k_iops: 21500.0,
                seq_bandwidth_bytes_per_s: 1.5e9,
            },
            max_inflight_ops: 64,
            beacon_interval_ms: 1000,
            repop_timeout_ms: 10_000,
        }
    }
}

struct Shared {
    id: i32,
    store: Store,
    sched: Arc<OpScheduler>,
    map: watch::Receiver<Option<ClusterMap>>,
    collections: Mutex<HashSet<String>>,
    versions: Mutex<HashMap<PgId, u64>>,
    peers: tokio::sync::Mutex<BTreeMap<i32, Peer>>,
    pending: Mutex<HashMap<u64, oneshot::Sender<ReplyHeader>>>,
    next_tid: AtomicU64,
    repop_timeout_ms: u64,
    tasks: Mutex<Vec<tokio::task::AbortHandle>>,
}

impl Shared {
    fn track(&self, handle: tokio::task::JoinHandle<()>) {
        self.tasks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(handle.abort_handle());
    }
}

struct Peer {
    addr: String,
    sender: SessionSender,
}

/// A running OSD. Dropping it stops every task it started and releases its store.
pub struct OsdDaemon {
    id: i32,
    addr: SocketAddr,
    shared: Arc<Shared>,
}

impl OsdDaemon {
    /// Starts an OSD: store, monitor boot and subscription, listener, beacons.
    pub async fn start(cfg: OsdConfig) -> Result<OsdDaemon, OsdError> {
        std::fs::create_dir_all(&cfg.data_dir)
            .map_err(|e| OsdError::Protocol(format!("data dir {}: {e}", cfg.data_dir.display())))?;
        let block = cfg.data_dir.join("block");
        let kv = cfg.data_dir.join("kv.redb");
        let fresh = !kv.exists();
        let dev: Arc<dyn BlockDevice> = Arc::new(FileDevice::open(
            &block,
            &FileDeviceOptions {
                size_bytes: Some(cfg.device_bytes),
                ..FileDeviceOptions::default()
            },
        )?);
        if fresh {
            Store::mkfs(
                dev.clone(),
                KvLocation::File(kv.clone()),
                &StoreConfig::default(),
            )
            .await?;
        }
        let store = Store::mount(dev, KvLocation::File(kv), StoreConfig::default()).await?;
        let collections = store.list_collections().await?.into_iter().collect();
        let sched = OpScheduler::new(
            QosQueue::new(cfg.policy.clone())?,
            CostModel::from_capacity(cfg.capacity)?,
            cfg.max_inflight_ops,
        );
        let mut listener = Listener::bind(cfg.listen, Limits::default()).await?;
        let addr = listener.local_addr();
        let mon = MonClient::connect(cfg.mon, session_id(&cfg.uuid)).await;
        let boot = mon
            .op(
                Request::Boot {
                    uuid: cfg.uuid.clone(),
                    host: cfg.host.clone(),
                    addr: addr.to_string(),
                    crush_weight: cfg.crush_weight,
                },
                30_000,
            )
            .await?;
        let id = boot
            .osd_id
            .ok_or_else(|| OsdError::Protocol("boot reply without an id".into()))?;
        mon.subscribe(30_000).await?;
        mon.wait_for_epoch(boot.epoch, 30_000).await?;
        let shared = Arc::new(Shared {
            id,
            store,
            sched,
            map: mon.watch(),
            collections: Mutex::new(collections),
            versions: Mutex::new(HashMap::new()),
            peers: tokio::sync::Mutex::new(BTreeMap::new()),
            pending: Mutex::new(HashMap::new()),
            next_tid: AtomicU64::new(1),
            repop_timeout_ms: cfg.repop_timeout_ms,
            tasks: Mutex::new(Vec::new()),
        });
        let beacon_every = Duration::from_millis(cfg.beacon_interval_ms.max(10));
        shared.track(tokio::spawn(async move {
            loop {
                tokio::time::sleep(beacon_every).await;
                if let Err(e) = mon.op(Request::Beacon { id }, 5_000).await {
                    tracing::warn!(osd = id, error = %e, "beacon failed");
                }
            }
        }));
        let s = shared.clone();
        shared.track(tokio::spawn(async move {
            while let Some(session) = listener.accept().await {
                let handle = tokio::spawn(serve(s.clone(), session));
                s.track(handle);
            }
        }));
        tracing::info!(osd = id, %addr, "osd up");
        Ok(OsdDaemon { id, addr, shared })
    }

    /// This OSD's id.
    pub fn id(&self) -> i32 {
        self.id
    }

    /// The address it serves on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for OsdDaemon {
    fn drop(&mut self) {
        self.shared.sched.stop();
        for t in self
            .shared
            .tasks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain(..)
        {
            t.abort();
        }
    }
}

fn session_id(uuid: &str) -> u64 {
    uuid.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

fn collection(pg: PgId) -> String {
    format!("pg.{pg}")
}

fn reply(tid: u64, epoch: u64, result: OpResult) -> ReplyHeader {
    ReplyHeader {
        tid,
        epoch,
        result,
        size: 0,
        version: 0,
        data_crc: 0,
    }
}

async fn serve(s: Arc<Shared>, mut session: Session) {
    let sender = session.sender();
    while let Some(frame) = session.recv().await {
        let msg_type = frame.header.msg_type;
        match decode::<OpHeader>(&frame.payload) {
            Ok((op, data)) if msg_type == MSG_OSD_OP || msg_type == MSG_OSD_REPOP => {
                let s2 = s.clone();
                let out = sender.clone();
                let client = session.id();
                let len = data.len() as u64;
                let replica = msg_type == MSG_OSD_REPOP;
                let tid = op.tid;
                let job = async move {
                    let (header, body, reply_type) = if replica {
                        (
                            apply_replica(&s2, op, data).await,
                            Bytes::new(),
                            MSG_OSD_REPOP_REPLY,
                        )
                    } else {
                        let (h, b) = primary_op(&s2, op, data).await;
                        (h, b, MSG_OSD_OP_REPLY)
                    };
                    let _ = out.send(reply_type, encode(&header, &body)).await;
                };
                if let Err(e) = s.sched.submit(QosClass::Client, client, len.max(4096), job) {
                    let epoch = map_epoch(&s);
                    let h = reply(tid, epoch, OpResult::Failed(e.to_string()));
                    let t = if replica {
                        MSG_OSD_REPOP_REPLY
                    } else {
                        MSG_OSD_OP_REPLY
                    };
                    let _ = sender.send(t, encode(&h, &[])).await;
                }
            }
            Ok(_) => tracing::warn!(msg_type, "unexpected message type"),
            Err(e) => tracing::warn!(error = %e, "malformed message"),
        }
    }
}

fn map_epoch(s: &Shared) -> u64 {
    s.map.borrow().as_ref().map_or(0, |m| m.epoch)
}

/// A PG's placement in one map: epoch, up set (primary first), and the members' addresses.
type Acting = (u64, Vec<i32>, Vec<(i32, String)>);

/// The PG's acting set in our current map, or None if the pool is unknown.
fn acting(s: &Shared, pg: PgId) -> Option<Acting> {
    let guard = s.map.borrow();
    let map = guard.as_ref()?;
    map.placement.pools.get(&pg.pool)?;
    let up = map.placement.mapper().map_pg(pg).ok()?.up;
    let addrs = up
        .iter()
        .filter_map(|o| map.osds.get(o).map(|e| (*o, e.addr.clone())))
        .collect();
    Some((map.epoch, up, addrs))
}

async fn primary_op(s: &Arc<Shared>, op: OpHeader, data: Bytes) -> (ReplyHeader, Bytes) {
    let pg = PgId {
        pool: op.pool,
        seed: op.pg_seed,
    };
    let Some((epoch, up, addrs)) = acting(s, pg) else {
        return (
            reply(op.tid, map_epoch(s), OpResult::NotFound),
            Bytes::new(),
        );
    };
    if up.first() != Some(&s.id) {
        return (reply(op.tid, epoch, OpResult::NotPrimary), Bytes::new());
    }
    let coll = collection(pg);
    match op.kind {
        OpKind::WriteFull | OpKind::Remove => {
            if op.kind == OpKind::WriteFull && crc32c(&data) != op.data_crc {
                return (
                    reply(
                        op.tid,
                        epoch,
                        OpResult::Failed("data checksum mismatch".into()),
                    ),
                    Bytes::new(),
                );
            }
            let version = {
                let mut v = s.versions.lock().unwrap_or_else(|p| p.into_inner());
                let e = v.entry(pg).or_insert(0);
                *e += 1;
                (epoch << 32) | *e
            };
            let mut rep = op.clone();
            rep.version = version;
            rep.epoch = epoch;
            let local = apply_local(s, &coll, &rep, &data);
            let remote = replicate(s, &rep, &data, &addrs[1.min(addrs.len())..]);
            let (l, r) = tokio::join!(local, remote);
            let result = match (l, r) {
                (Ok(()), Ok(())) => OpResult::Ok,
                (Err(e), _) | (_, Err(e)) => OpResult::Failed(e),
            };
            (
                ReplyHeader {
                    version,
                    ..reply(op.tid, epoch, result)
                },
                Bytes::new(),
            )
        }
        OpKind::Read { offset, len } => match s.store.read(&coll, &op.object, offset, len).await {
            Ok(bytes) => {
                let version = object_version(s, &coll, &op.object).await;
                let h = ReplyHeader {
                    size: bytes.len() as u64,
                    version,
                    data_crc: crc32c(&bytes),
                    ..reply(op.tid, epoch, OpResult::Ok)
                };
                (h, Bytes::from(bytes))
            }
            Err(e) => (reply(op.tid, epoch, store_result(e)), Bytes::new()),
        },
        OpKind::Stat => match s.store.stat(&coll, &op.object).await {
            Ok(st) => {
                let version = object_version(s, &coll, &op.object).await;
                (
                    ReplyHeader {
                        size: st.size_bytes,
                        version,
                        ..reply(op.tid, epoch, OpResult::Ok)
                    },
                    Bytes::new(),
                )
            }
            Err(e) => (reply(op.tid, epoch, store_result(e)), Bytes::new()),
        },
    }
}

fn store_result(e: StoreError) -> OpResult {
    match e {
        StoreError::NoSuchObject { .. } | StoreError::NoSuchCollection { .. } => OpResult::NotFound,
        other => OpResult::Failed(other.to_string()),
    }
}

async fn object_version(s: &Shared, coll: &str, obj: &str) -> u64 {
    s.store
        .getattr(coll, obj, VERSION_ATTR)
        .await
        .ok()
        .and_then(|v| v.try_into().ok().map(u64::from_le_bytes))
        .unwrap_or(0)
}

fn crc32c(data: &[u8]) -> u32 {
    crc32c::crc32c(data)
}

/// Commits a write or remove to the local store, durably.
async fn apply_local(s: &Shared, coll: &str, op: &OpHeader, data: &[u8]) -> Result<(), String> {
    let mut txn = Transaction::new();
    let need_coll = !s
        .collections
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .contains(coll);
    if need_coll {
        txn.create_collection(coll);
    }
    match op.kind {
        OpKind::WriteFull => {
            txn.truncate(coll, &op.object, 0)
                .write(coll, &op.object, 0, data)
                .setattr(coll, &op.object, VERSION_ATTR, &op.version.to_le_bytes());
        }
        OpKind::Remove => {
            let exists = !need_coll && s.store.exists(coll, &op.object).await.unwrap_or(false);
            if !exists {
                return Ok(());
            }
            txn.remove(coll, &op.object);
        }
        _ => return Err("not a write".into()),
    }
    s.store
        .queue_transaction_owned(txn)
        .await
        .map_err(|e| e.to_string())?;
    if need_coll {
        s.collections
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(coll.to_string());
    }
    Ok(())
}

async fn apply_replica(s: &Arc<Shared>, op: OpHeader, data: Bytes) -> ReplyHeader {
    let epoch = map_epoch(s);
    if op.kind == OpKind::WriteFull && crc32c(&data) != op.data_crc {
        return reply(
            op.tid,
            epoch,
            OpResult::Failed("data checksum mismatch".into()),
        );
    }
    let coll = collection(PgId {
        pool: op.pool,
        seed: op.pg_seed,
    });
    match apply_local(s, &coll, &op, &data).await {
        Ok(()) => ReplyHeader {
            version: op.version,
            ..reply(op.tid, epoch, OpResult::Ok)
        },
        Err(e) => reply(op.tid, epoch, OpResult::Failed(e)),
    }
}

async fn peer(s: &Arc<Shared>, osd: i32, addr: &str) -> Result<SessionSender, String> {
    let mut peers = s.peers.lock().await;
    if let Some(p) = peers.get(&osd) {
        if p.addr == addr {
            return Ok(p.sender.clone());
        }
    }
    let sock: SocketAddr = addr
        .parse()
        .map_err(|e| format!("osd.{osd} address {addr}: {e}"))?;
    let id = (u64::from(s.id as u32) << 32) | u64::from(osd as u32);
    let mut session =
        Session::connect(sock, id ^ 0x5eed_0000_0000_0000, Limits::default(), 100).await;
    let sender = session.sender();
    let s2 = s.clone();
    let handle = tokio::spawn(async move {
        while let Some(frame) = session.recv().await {
            if frame.header.msg_type != MSG_OSD_REPOP_REPLY {
                continue;
            }
            if let Ok((h, _)) = decode::<ReplyHeader>(&frame.payload) {
                let waiter = s2
                    .pending
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&h.tid);
                if let Some(w) = waiter {
                    let _ = w.send(h);
                }
            }
        }
    });
    s.track(handle);
    peers.insert(
        osd,
        Peer {
            addr: addr.to_string(),
            sender: sender.clone(),
        },
    );
    Ok(sender)
}

/// Sends the write to every replica and waits for all their durable acknowledgements.
async fn replicate(
    s: &Arc<Shared>,
    op: &OpHeader,
    data: &Bytes,
    replicas: &[(i32, String)],
) -> Result<(), String> {
    let mut waits = Vec::new();
    for (osd, addr) in replicas {
        let tid = s.next_tid.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        s.pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(tid, tx);
        let mut rep = op.clone();
        rep.tid = tid;
        let sender = peer(s, *osd, addr).await?;
        sender
            .send(MSG_OSD_REPOP, encode(&rep, data))
            .await
            .map_err(|e| format!("osd.{osd}: {e}"))?;
        waits.push((*osd, tid, rx));
    }
    let timeout = Duration::from_millis(s.repop_timeout_ms);
    for (osd, tid, rx) in waits {
        let r = tokio::time::timeout(timeout, rx).await;
        s.pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&tid);
        match r {
            Ok(Ok(h)) if h.result == OpResult::Ok => {}
            Ok(Ok(h)) => return Err(format!("osd.{osd}: {:?}", h.result)),
            _ => return Err(format!("osd.{osd} did not acknowledge in time")),
        }
    }
    Ok(())
}
