//! A client's link to its file system's metadata server: finds it through the `mds.addr`
//! object, keeps a lossy session to it, and sends each request until it is answered — again
//! after the session restarts or an attempt times out (a restarted or replacement MDS), with
//! the same request id, so that the MDS answers a mutation it already applied from its record.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cairn_client::{Client, ClientError};
use cairn_msgr::handshake::CredentialSource;
use cairn_msgr::session::{Policy, Session, SessionSender};
use cairn_msgr::Limits;
use cairn_proto::mds::{MdsAnswer, MdsOp, MdsReply, MdsRequest, MSG_MDS_REPLY, MSG_MDS_REQUEST};
use tokio::sync::oneshot;

use crate::mds::ADDR_OBJECT;

/// Longest one attempt waits for its answer before the address is read again and the
/// request resent.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest a request is tried before the caller gets EIO (an MDS that stays away).
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(300);
/// How long a granted lock waits for the cluster map its barrier names.
const MAP_BARRIER_TIMEOUT_MS: u64 = 30_000;

type Waiting = Arc<Mutex<HashMap<u64, oneshot::Sender<Result<MdsAnswer, i32>>>>>;

/// The session in use: where it goes, its sender and the task reading its replies.
struct Current {
    addr: SocketAddr,
    sender: SessionSender,
    reader: tokio::task::AbortHandle,
}

impl Drop for Current {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

/// The link.
pub struct MdsLink {
    rados: Arc<Client>,
    metadata_pool: String,
    client_id: u64,
    creds: Option<Arc<dyn CredentialSource>>,
    current: tokio::sync::Mutex<Option<Current>>,
    waiting: Waiting,
    next_tid: AtomicU64,
}

impl MdsLink {
    /// A link for the file system whose metadata is in `metadata_pool`, found and dialed with
    /// `rados`'s credentials.
    pub fn new(rados: Arc<Client>, metadata_pool: String) -> MdsLink {
        let creds = rados.service_credentials();
        MdsLink {
            // The instance its OSD ops carry: what the MDS fences if it evicts this mount.
            client_id: rados.instance(),
            rados,
            metadata_pool,
            creds,
            current: tokio::sync::Mutex::new(None),
            waiting: Arc::default(),
            next_tid: AtomicU64::new(1),
        }
    }

    /// Returns once this mount's cluster map is at least `epoch` (a lock's barrier: the map
    /// fences every client evicted before the lock was granted); EIO if it does not come.
    pub async fn wait_for_map(&self, epoch: u64) -> Result<(), i32> {
        if self.rados.epoch() >= epoch {
            return Ok(());
        }
        match self
            .rados
            .mon()
            .wait_for_epoch(epoch, MAP_BARRIER_TIMEOUT_MS)
            .await
        {
            Ok(_) => Ok(()),
            Err(e) => {
                tracing::warn!(epoch, error = %e, "waiting for a lock's map barrier");
                Err(libc::EIO)
            }
        }
    }

    /// Where the MDS says it serves.
    async fn address(&self) -> Result<SocketAddr, String> {
        let bytes = match self.rados.read(&self.metadata_pool, ADDR_OBJECT).await {
            Ok(b) => b,
            Err(ClientError::NotFound(_)) => return Err("no metadata server has started".into()),
            Err(e) => return Err(e.to_string()),
        };
        String::from_utf8_lossy(&bytes)
            .trim()
            .parse()
            .map_err(|e| format!("{ADDR_OBJECT} holds no address: {e}"))
    }

    /// The session's sender, dialing the MDS at its published address when there is no
    /// session, or when `redial` asks for the address to be read again.
    async fn sender(&self, redial: bool) -> Result<SessionSender, String> {
        let mut current = self.current.lock().await;
        if let Some(c) = current.as_ref().filter(|_| !redial) {
            return Ok(c.sender.clone());
        }
        let addr = self.address().await?;
        if let Some(c) = current.as_ref().filter(|c| c.addr == addr && redial) {
            if !c.sender.is_closed() {
                return Ok(c.sender.clone());
            }
        }
        let mut session = Session::connect_as(
            addr,
            self.client_id,
            Limits::default(),
            100,
            Policy::Lossy,
            self.creds.clone(),
        )
        .await;
        let sender = session.sender();
        let waiting = self.waiting.clone();
        let reader = tokio::spawn(async move {
            while let Some(frame) = session.recv().await {
                if frame.header.msg_type != MSG_MDS_REPLY {
                    continue;
                }
                let Ok((reply, _)) = cairn_proto::decode::<MdsReply>(&frame.payload) else {
                    tracing::warn!("a malformed reply from the metadata server");
                    continue;
                };
                let to = waiting
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&reply.tid);
                if let Some(to) = to {
                    let _ = to.send(reply.result);
                }
            }
        })
        .abort_handle();
        *current = Some(Current {
            addr,
            sender: sender.clone(),
            reader,
        });
        Ok(sender)
    }

    /// Runs `op` on the MDS: its answer or an errno (EIO when the MDS stays unreachable).
    pub async fn request(&self, op: MdsOp) -> Result<MdsAnswer, i32> {
        let tid = self.next_tid.fetch_add(1, Ordering::Relaxed);
        let req = MdsRequest {
            tid,
            client: self.client_id,
            op,
        };
        let payload = cairn_proto::encode(&req, &[]);
        let deadline = Instant::now() + REQUEST_DEADLINE;
        let mut redial = false;
        let mut last = String::new();
        while Instant::now() < deadline {
            let sender = match self.sender(redial).await {
                Ok(s) => s,
                Err(e) => {
                    last = e;
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    redial = true;
                    continue;
                }
            };
            let mut restarts = sender.peer_restarts();
            restarts.borrow_and_update();
            let (tx, rx) = oneshot::channel();
            self.waiting
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(tid, tx);
            if let Err(e) = sender.send(MSG_MDS_REQUEST, payload.clone()).await {
                last = e.to_string();
                redial = true;
                continue;
            }
            tokio::select! {
                got = rx => match got {
                    Ok(result) => return result,
                    Err(_) => last = "the reply channel closed".into(),
                },
                _ = restarts.changed() => last = "the metadata server restarted".into(),
                _ = tokio::time::sleep(ATTEMPT_TIMEOUT) => {
                    last = "no answer in time".into();
                    redial = true;
                }
            }
        }
        self.waiting
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&tid);
        tracing::warn!(%last, "a metadata request failed");
        Err(libc::EIO)
    }
}
