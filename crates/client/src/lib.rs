//! The client library: follows the cluster map from the monitor, computes each object's PG and
//! primary itself (no metadata server), sends the operation to the primary, and on a stale map,
//! a failed replica or a timeout waits for a newer map and resends, within a per-operation
//! deadline. Every read is checked against the crc32c the OSD computed.
#![warn(missing_docs)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use cairn_clustermap::PgId;
use cairn_mon::client::MonClient;
use cairn_mon::ClusterMap;
use cairn_msgr::session::{Session, SessionSender};
use cairn_msgr::Limits;
use cairn_proto::{
    decode, encode, OpHeader, OpKind, OpResult, ReplyHeader, MSG_OSD_OP, MSG_OSD_OP_REPLY,
};
use thiserror::Error;
use tokio::sync::{oneshot, watch};

/// Client errors.
#[derive(Debug, Error)]
pub enum ClientError {
    /// The pool does not exist.
    #[error("no pool `{0}`")]
    NoPool(String),
    /// The object does not exist.
    #[error("no object `{0}`")]
    NotFound(String),
    /// The operation did not complete before its deadline.
    #[error("operation on `{object}` timed out after {timeout_ms} ms (last error: {last})")]
    Timeout {
        /// Object.
        object: String,
        /// Deadline.
        timeout_ms: u64,
        /// The last failure seen.
        last: String,
    },
    /// Data failed its checksum: never returned to the caller.
    #[error("checksum mismatch reading `{0}`")]
    Checksum(String),
    /// The monitor failed.
    #[error(transparent)]
    Mon(#[from] cairn_mon::MonError),
}

type Pending = Arc<Mutex<HashMap<u64, oneshot::Sender<(ReplyHeader, Bytes)>>>>;

/// (map epoch, pool id, PG, primary id and address if one is up).
type Location = (u64, i64, PgId, Option<(i32, String)>);

/// A connection to a cairn cluster.
pub struct Client {
    _mon: MonClient,
    map: watch::Receiver<Option<ClusterMap>>,
    sessions: tokio::sync::Mutex<HashMap<i32, (String, SessionSender)>>,
    pending: Pending,
    next_tid: AtomicU64,
    id: u64,
    /// Deadline of one operation, including resends.
    pub op_timeout_ms: u64,
}

impl Client {
    /// Connects to the monitor at `mon` and waits for the first map.
    pub async fn connect(mon: SocketAddr, client_id: u64) -> Result<Client, ClientError> {
        let mon_client = MonClient::connect(mon, client_id).await;
        mon_client.subscribe(30_000).await?;
        mon_client.wait_for_epoch(1, 30_000).await?;
        Ok(Client {
            map: mon_client.watch(),
            _mon: mon_client,
            sessions: tokio::sync::Mutex::new(HashMap::new()),
            pending: Arc::default(),
            next_tid: AtomicU64::new(1),
            id: client_id,
            op_timeout_ms: 30_000,
        })
    }

    /// The current map epoch.
    pub fn epoch(&self) -> u64 {
        self.map.borrow().as_ref().map_or(0, |m| m.epoch)
    }

    /// Replaces an object's content; returns its new version once every replica has it durably.
    pub async fn write_full(
        &self,
        pool: &str,
        name: &str,
        data: &[u8],
    ) -> Result<u64, ClientError> {
        let (h, _) = self
            .submit(pool, name, OpKind::WriteFull, Bytes::copy_from_slice(data))
            .await?;
        Ok(h.version)
    }

    /// Reads a whole object, verified against its checksum.
    pub async fn read(&self, pool: &str, name: &str) -> Result<Vec<u8>, ClientError> {
        let (h, data) = self
            .submit(
                pool,
                name,
                OpKind::Read {
                    offset: 0,
                    len: u64::MAX,
                },
                Bytes::new(),
            )
            .await?;
        if crc32c::crc32c(&data) != h.data_crc {
            return Err(ClientError::Checksum(name.to_string()));
        }
        Ok(data.to_vec())
    }

    /// Size and version of an object.
    pub async fn stat(&self, pool: &str, name: &str) -> Result<(u64, u64), ClientError> {
        let (h, _) = self.submit(pool, name, OpKind::Stat, Bytes::new()).await?;
        Ok((h.size, h.version))
    }

    /// Deletes an object (no error if it does not exist).
    pub async fn remove(&self, pool: &str, name: &str) -> Result<(), ClientError> {
        self.submit(pool, name, OpKind::Remove, Bytes::new())
            .await
            .map(|_| ())
    }

    /// Where an object lives now: (epoch, pool id, pg, primary id and address).
    fn locate(&self, pool: &str, name: &str) -> Result<Location, ClientError> {
        let guard = self.map.borrow();
        let map = guard
            .as_ref()
            .ok_or_else(|| ClientError::NoPool(pool.to_string()))?;
        let p = map
            .placement
            .pools
            .values()
            .find(|p| p.name == pool)
            .ok_or_else(|| ClientError::NoPool(pool.to_string()))?;
        let pg = p.object_pg(name, "", "");
        let primary = map
            .placement
            .mapper()
            .map_pg(pg)
            .ok()
            .and_then(|m| (m.primary >= 0).then_some(m.primary))
            .and_then(|o| map.osds.get(&o).map(|e| (o, e.addr.clone())));
        Ok((map.epoch, p.id, pg, primary))
    }

    async fn session(&self, osd: i32, addr: &str) -> Result<SessionSender, String> {
        let mut sessions = self.sessions.lock().await;
        if let Some((a, s)) = sessions.get(&osd) {
            if a == addr {
                return Ok(s.clone());
            }
        }
        let sock: SocketAddr = addr
            .parse()
            .map_err(|e| format!("osd.{osd} address {addr}: {e}"))?;
        let sid = (self.id << 20) ^ (osd as u64) ^ 0xc11e_0000_0000_0000;
        let mut session = Session::connect(sock, sid, Limits::default(), 100).await;
        let sender = session.sender();
        let pending = self.pending.clone();
        tokio::spawn(async move {
            while let Some(frame) = session.recv().await {
                if frame.header.msg_type != MSG_OSD_OP_REPLY {
                    continue;
                }
                if let Ok((h, data)) = decode::<ReplyHeader>(&frame.payload) {
                    let waiter = pending
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .remove(&h.tid);
                    if let Some(w) = waiter {
                        let _ = w.send((h, data));
                    }
                }
            }
        });
        sessions.insert(osd, (addr.to_string(), sender.clone()));
        Ok(sender)
    }

    async fn submit(
        &self,
        pool: &str,
        name: &str,
        kind: OpKind,
        data: Bytes,
    ) -> Result<(ReplyHeader, Bytes), ClientError> {
        let deadline = Instant::now() + Duration::from_millis(self.op_timeout_ms);
        let mut last = String::from("no attempt");
        let mut map_rx = self.map.clone();
        while Instant::now() < deadline {
            let (epoch, pool_id, pg, primary) = self.locate(pool, name)?;
            let attempt = async {
                let (osd, addr) = primary.ok_or_else(|| "no primary up".to_string())?;
                let sender = self.session(osd, &addr).await?;
                let tid = self.next_tid.fetch_add(1, Ordering::Relaxed);
                let (tx, rx) = oneshot::channel();
                self.pending
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(tid, tx);
                let header = OpHeader {
                    tid,
                    epoch,
                    pool: pool_id,
                    pg_seed: pg.seed,
                    object: name.to_string(),
                    kind: kind.clone(),
                    version: 0,
                    data_crc: crc32c::crc32c(&data),
                };
                sender
                    .send(MSG_OSD_OP, encode(&header, &data))
                    .await
                    .map_err(|e| e.to_string())?;
                let left = deadline
                    .saturating_duration_since(Instant::now())
                    .min(Duration::from_secs(5));
                let r = tokio::time::timeout(left, rx).await;
                self.pending
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&tid);
                match r {
                    Ok(Ok(reply)) => Ok(reply),
                    _ => Err(format!("osd.{osd} did not answer")),
                }
            };
            match attempt.await {
                Ok((h, d)) => match &h.result {
                    OpResult::Ok => return Ok((h, d)),
                    OpResult::NotFound => return Err(ClientError::NotFound(name.to_string())),
                    other => last = format!("{other:?} at epoch {}", h.epoch),
                },
                Err(e) => last = e,
            }
            // Wait for a newer map, or back off briefly, before resending.
            let _ = tokio::time::timeout(Duration::from_millis(200), map_rx.changed()).await;
        }
        Err(ClientError::Timeout {
            object: name.to_string(),
            timeout_ms: self.op_timeout_ms,
            last,
        })
    }
}
