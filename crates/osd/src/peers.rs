//! Connections from this OSD to the other OSDs, and request/answer over them: replica writes,
//! peering and recovery requests, heartbeats. Every request carries a tid unique in this OSD;
//! one receive task per connection routes answers back to the waiting caller. A call always has
//! a deadline (explicit), so a dead peer can delay, never hang, the caller.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

use bytes::Bytes;
use cairn_msgr::session::{Session, SessionSender};
use cairn_msgr::Limits;
use cairn_proto::peer::{PeerReply, Ping};
use cairn_proto::{decode, ReplyHeader, MSG_OSD_REPOP_REPLY, MSG_PEER_REPLY, MSG_PING_REPLY};
use tokio::sync::oneshot;

use crate::error::OsdError;

type Waiters = Arc<Mutex<HashMap<u64, oneshot::Sender<Bytes>>>>;

/// Outgoing connections to peer OSDs.
pub struct Peers {
    me: i32,
    conns: tokio::sync::Mutex<BTreeMap<i32, (String, SessionSender)>>,
    waiters: Waiters,
    next_tid: AtomicU64,
    /// Last heartbeat answer from each peer.
    pongs: Arc<Mutex<HashMap<i32, Instant>>>,
    /// Woken when a peer starts refusing connections (the heartbeat reports it at once).
    refused: Arc<tokio::sync::Notify>,
    tasks: Mutex<Vec<tokio::task::AbortHandle>>,
    /// What this OSD authenticates to its peers with; None where nothing authenticates.
    credentials: Option<Arc<dyn cairn_msgr::handshake::CredentialSource>>,
}

impl Peers {
    /// The same, authenticating to peers with `credentials`.
    pub fn with_credentials(
        mut self,
        credentials: Option<Arc<dyn cairn_msgr::handshake::CredentialSource>>,
    ) -> Self {
        self.credentials = credentials;
        self
    }

    /// Connections of OSD `me`.
    pub fn new(me: i32) -> Self {
        Peers {
            me,
            conns: tokio::sync::Mutex::new(BTreeMap::new()),
            waiters: Arc::default(),
            next_tid: AtomicU64::new(1),
            pongs: Arc::default(),
            refused: Arc::default(),
            tasks: Mutex::new(Vec::new()),
            credentials: None,
        }
    }

    /// A tid for a new request.
    pub fn tid(&self) -> u64 {
        self.next_tid.fetch_add(1, Ordering::Relaxed)
    }

    /// When `osd` last answered a heartbeat.
    pub fn last_pong(&self, osd: i32) -> Option<Instant> {
        self.pongs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&osd)
            .copied()
    }

    /// Waits until some peer's connection starts being refused (see
    /// `SessionSender::refusals`); a refusal since the last wait counts at once.
    pub async fn refusal(&self) {
        self.refused.notified().await
    }

    /// The sender to `osd` at `addr`, connecting (or reconnecting to a new address) as needed.
    pub async fn sender(&self, osd: i32, addr: &str) -> Result<SessionSender, OsdError> {
        let mut conns = self.conns.lock().await;
        if let Some((a, s)) = conns.get(&osd) {
            if a == addr {
                return Ok(s.clone());
            }
        }
        let sock: SocketAddr = addr.parse().map_err(|e| OsdError::Peer {
            osd,
            reason: format!("address {addr}: {e}"),
        })?;
        let id = (u64::from(self.me as u32) << 32) | u64::from(osd as u32);
        let mut session = Session::connect_as(
            sock,
            id ^ 0x5eed_0000_0000_0000,
            Limits::default(),
            100,
            cairn_msgr::session::Policy::Lossless,
            self.credentials.clone(),
        )
        .await;
        let sender = session.sender();
        let waiters = self.waiters.clone();
        let pongs = self.pongs.clone();
        let handle = tokio::spawn(async move {
            while let Some(frame) = session.recv().await {
                let tid = match frame.header.msg_type {
                    MSG_OSD_REPOP_REPLY => decode::<ReplyHeader>(&frame.payload).map(|h| h.0.tid),
                    MSG_PEER_REPLY => decode::<PeerReply>(&frame.payload).map(|h| h.0.tid),
                    MSG_PING_REPLY => {
                        if decode::<Ping>(&frame.payload).is_ok() {
                            pongs
                                .lock()
                                .unwrap_or_else(|p| p.into_inner())
                                .insert(osd, Instant::now());
                        }
                        continue;
                    }
                    other => {
                        tracing::warn!(osd, msg_type = other, "unexpected message from peer");
                        continue;
                    }
                };
                match tid {
                    Ok(tid) => {
                        let w = waiters
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .remove(&tid);
                        if let Some(w) = w {
                            let _ = w.send(frame.payload);
                        }
                    }
                    Err(e) => tracing::warn!(osd, error = %e, "malformed answer from peer"),
                }
            }
        });
        let mut refusals = sender.refusals();
        let refused = self.refused.clone();
        let watcher = tokio::spawn(async move {
            while refusals.changed().await.is_ok() {
                refused.notify_one();
            }
        });
        self.tasks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend([handle.abort_handle(), watcher.abort_handle()]);
        conns.insert(osd, (addr.to_string(), sender.clone()));
        Ok(sender)
    }

    /// Registers a waiter for the answer to `tid` (call before sending).
    pub fn expect(&self, tid: u64) -> oneshot::Receiver<Bytes> {
        let (tx, rx) = oneshot::channel();
        self.waiters
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(tid, tx);
        rx
    }

    /// Stops waiting for `tid`.
    pub fn forget(&self, tid: u64) {
        self.waiters
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&tid);
    }

    /// Sends `payload` (whose tid is `tid`) to `osd` and waits for the answer's raw payload.
    pub async fn call(
        &self,
        osd: i32,
        addr: &str,
        msg_type: u16,
        tid: u64,
        payload: Bytes,
        timeout: Duration,
    ) -> Result<Bytes, OsdError> {
        self.call_with_data(osd, addr, msg_type, tid, payload, Bytes::new(), 0, timeout)
            .await
    }

    /// Like [`Peers::call`] with `data` as the frame's data segment, sent from its buffer;
    /// `data_crc` is its crc32c, known from when it arrived (not computed again).
    #[allow(clippy::too_many_arguments)]
    pub async fn call_with_data(
        &self,
        osd: i32,
        addr: &str,
        msg_type: u16,
        tid: u64,
        payload: Bytes,
        data: Bytes,
        data_crc: u32,
        timeout: Duration,
    ) -> Result<Bytes, OsdError> {
        let rx = self.expect(tid);
        // Stops waiting for `tid` however this call ends, also when its caller drops it.
        let _forget = Forget { peers: self, tid };
        let sent = async {
            let sender = self.sender(osd, addr).await?;
            sender
                .send_data(msg_type, payload, data, Some(data_crc))
                .await
                .map_err(|e| OsdError::Peer {
                    osd,
                    reason: e.to_string(),
                })?;
            rx.await.map_err(|_| OsdError::Peer {
                osd,
                reason: "connection closed".into(),
            })
        };
        let r = tokio::time::timeout(timeout, sent).await;
        r.map_err(|_| OsdError::Peer {
            osd,
            reason: format!("no answer in {} ms", timeout.as_millis()),
        })?
    }
}

/// Removes a call's answer slot when the call ends or is dropped.
struct Forget<'a> {
    peers: &'a Peers,
    tid: u64,
}

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        self.peers.forget(self.tid);
    }
}

impl Drop for Peers {
    fn drop(&mut self) {
        for t in self
            .tasks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain(..)
        {
            t.abort();
        }
    }
}
