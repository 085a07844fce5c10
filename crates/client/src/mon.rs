//! Talking to the monitor: requests with replies matched by id, and a local copy of the map
//! kept current from the updates the monitor pushes to subscribers.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cairn_msgr::handshake::CredentialSource;
use cairn_msgr::session::{Policy, Session, SessionSender};
use cairn_msgr::Limits;
use tokio::sync::{oneshot, watch};

use cairn_clustermap::ClusterMap;
use cairn_clustermap::Incremental;
use cairn_proto::mon::MonError;
use cairn_proto::mon::Request;
use cairn_proto::mon::{
    from_payload, to_payload, MapUpdate, MonReply, MonRequest, RequestBody, MSG_MON_MAP,
    MSG_MON_REPLY, MSG_MON_REQUEST,
};

/// A request waiting for its reply: where the reply goes, the request as sent (to send again
/// if the monitor restarts before answering), and the count of monitor restarts seen when it
/// was last sent.
struct Waiter {
    reply: oneshot::Sender<MonReply>,
    request: bytes::Bytes,
    sent_in: u64,
}

type Pending = Arc<Mutex<HashMap<u64, Waiter>>>;

/// A connection to the monitor.
pub struct MonClient {
    sender: SessionSender,
    pending: Pending,
    next_tid: AtomicU64,
    map: watch::Receiver<Option<ClusterMap>>,
    renew: std::sync::Mutex<Option<tokio::task::AbortHandle>>,
    /// The task that owns the session and takes in what the monitor sends: aborted on drop,
    /// which closes the session (it would otherwise stay connected, owned by its own reader).
    receiver: tokio::task::AbortHandle,
    /// Sends the pending requests again when the monitor restarted (see [`resend_on_restart`]).
    resender: tokio::task::AbortHandle,
}

/// How often a waiting request looks whether its session's authentication was refused.
const AUTH_CHECK_EVERY: Duration = Duration::from_millis(100);

/// How often a subscription is renewed, so that a restarted monitor (which forgot its
/// subscribers) resumes sending maps.
const RENEW_EVERY: Duration = Duration::from_secs(2);

impl Drop for MonClient {
    fn drop(&mut self) {
        if let Some(h) = self.renew.lock().ok().and_then(|mut r| r.take()) {
            h.abort();
        }
        self.receiver.abort();
        self.resender.abort();
    }
}

impl MonClient {
    /// Connects (and keeps reconnecting) to the monitor at `addr`. The session is lossy, as
    /// every monitor client's is in Ceph: a reconnect is a new session, in which the pending
    /// requests are sent again and the subscription renewed at once.
    pub async fn connect(addr: SocketAddr, session_id: u64) -> MonClient {
        Self::connect_as(addr, session_id, None).await
    }

    /// As [`MonClient::connect`], authenticating every connection with the credentials
    /// `creds` gives (none: the monitor must not require authentication).
    pub async fn connect_as(
        addr: SocketAddr,
        session_id: u64,
        creds: Option<Arc<dyn CredentialSource>>,
    ) -> MonClient {
        let session = Session::connect_as(
            addr,
            session_id,
            Limits::default(),
            100,
            Policy::Lossy,
            creds,
        )
        .await;
        let sender = session.sender();
        let pending: Pending = Arc::default();
        let (map_tx, map_rx) = watch::channel(None);
        let receiver = tokio::spawn(receive(session, pending.clone(), map_tx));
        let resender = tokio::spawn(resend_on_restart(sender.clone(), pending.clone()));
        MonClient {
            sender,
            pending,
            next_tid: AtomicU64::new(1),
            map: map_rx,
            renew: std::sync::Mutex::new(None),
            receiver: receiver.abort_handle(),
            resender: resender.abort_handle(),
        }
    }

    /// Sends a request and waits (at most `timeout_ms`) for its reply; a reply carrying an
    /// error becomes `Err`.
    pub async fn request(&self, body: RequestBody, timeout_ms: u64) -> Result<MonReply, MonError> {
        let tid = self.next_tid.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        let request = to_payload(&MonRequest { tid, body });
        let waiter = Waiter {
            reply: tx,
            request: request.clone(),
            sent_in: *self.sender.peer_restarts().borrow(),
        };
        self.pending
            .lock()
            .map_err(|_| MonError::Invalid("client state poisoned".into()))?
            .insert(tid, waiter);
        let sent = self.sender.send(MSG_MON_REQUEST, request).await;
        if let Err(e) = sent {
            if let Ok(mut p) = self.pending.lock() {
                p.remove(&tid);
            }
            return Err(MonError::Unreachable(format!("send: {e}")));
        }
        let reply = self.wait_reply(rx, timeout_ms).await;
        if let Ok(mut p) = self.pending.lock() {
            p.remove(&tid);
        }
        let reply = reply?;
        match &reply.error {
            Some(e) => Err(MonError::Refused(e.clone())),
            None => Ok(reply),
        }
    }

    /// Waits for a reply, giving up early once the session's authentication was refused
    /// (the reply will not come: the monitor does not accept this client's key).
    async fn wait_reply(
        &self,
        mut rx: oneshot::Receiver<MonReply>,
        timeout_ms: u64,
    ) -> Result<MonReply, MonError> {
        let deadline = tokio::time::Instant::now() + Duration::from_millis(timeout_ms);
        let mut check = tokio::time::interval(AUTH_CHECK_EVERY);
        loop {
            tokio::select! {
                r = tokio::time::timeout_at(deadline, &mut rx) => {
                    return match r {
                        Ok(Ok(reply)) => Ok(reply),
                        Ok(Err(_)) => Err(MonError::Unreachable("the connection closed".into())),
                        Err(_) => Err(self.auth_refusal().unwrap_or_else(|| {
                            MonError::Unreachable(format!("no reply within {timeout_ms} ms"))
                        })),
                    };
                }
                _ = check.tick() => {
                    if let Some(refused) = self.auth_refusal() {
                        return Err(refused);
                    }
                }
            }
        }
    }

    /// The session's authentication failure as an error, if its latest attempt failed.
    fn auth_refusal(&self) -> Option<MonError> {
        self.sender
            .auth_error()
            .map(|why| MonError::Refused(format!("cannot authenticate to the monitor: {why}")))
    }

    /// Sends a monitor operation and waits for its reply (see [`MonClient::request`]).
    pub async fn op(&self, request: Request, timeout_ms: u64) -> Result<MonReply, MonError> {
        self.request(RequestBody::Op(request), timeout_ms).await
    }

    /// The maps of every epoch from `from` (or from the oldest the monitor keeps, if newer) to
    /// the monitor's current one, rebuilt from its history, oldest first.
    pub async fn maps_since(
        &self,
        from: u64,
        timeout_ms: u64,
    ) -> Result<Vec<ClusterMap>, MonError> {
        let reply = self
            .request(RequestBody::History { from }, timeout_ms)
            .await?;
        let range = reply
            .maps
            .ok_or_else(|| MonError::Invalid("history reply without maps".into()))?;
        let mut map = ClusterMap::decode(&range.full)?;
        let mut out = Vec::with_capacity(range.incrementals.len() + 1);
        for bytes in &range.incrementals {
            let inc = Incremental::decode(bytes)?;
            out.push(map.clone());
            map.apply(&inc)?;
        }
        out.push(map);
        Ok(out)
    }

    /// Subscribes to map updates (full map first), and keeps the subscription renewed.
    pub async fn subscribe(&self, timeout_ms: u64) -> Result<(), MonError> {
        let have_epoch = self.map.borrow().as_ref().map_or(0, |m| m.epoch);
        self.request(RequestBody::Subscribe { have_epoch }, timeout_ms)
            .await?;
        let mut renew = self
            .renew
            .lock()
            .map_err(|_| MonError::Invalid("client state poisoned".into()))?;
        if renew.is_none() {
            let sender = self.sender.clone();
            let map = self.map.clone();
            let mut restarts = self.sender.peer_restarts();
            let task = tokio::spawn(async move {
                // Renewal tids count down from the top; their replies match no waiter.
                let mut tid = u64::MAX;
                loop {
                    // At once when the session starts over (a new monitor, or a lossy
                    // session's reconnect): the monitor knows no subscription on it.
                    tokio::select! {
                        () = tokio::time::sleep(RENEW_EVERY) => {}
                        changed = restarts.changed() => if changed.is_err() { return },
                    }
                    let have_epoch = map.borrow().as_ref().map_or(0, |m| m.epoch);
                    let body = RequestBody::Subscribe { have_epoch };
                    let _ = sender
                        .send(MSG_MON_REQUEST, to_payload(&MonRequest { tid, body }))
                        .await;
                    tid -= 1;
                }
            });
            *renew = Some(task.abort_handle());
        }
        Ok(())
    }

    /// A receiver that always holds the newest map received (for followers like OSDs).
    pub fn watch(&self) -> watch::Receiver<Option<ClusterMap>> {
        self.map.clone()
    }

    /// The newest map received, if any.
    pub fn map(&self) -> Option<ClusterMap> {
        self.map.borrow().clone()
    }

    /// Waits until the local map reaches `epoch`.
    pub async fn wait_for_epoch(
        &self,
        epoch: u64,
        timeout_ms: u64,
    ) -> Result<ClusterMap, MonError> {
        let mut rx = self.map.clone();
        let wait = async {
            loop {
                if let Some(m) = rx.borrow().as_ref() {
                    if m.epoch >= epoch {
                        return Ok(m.clone());
                    }
                }
                if rx.changed().await.is_err() {
                    return Err(MonError::Invalid("monitor connection closed".into()));
                }
            }
        };
        tokio::time::timeout(Duration::from_millis(timeout_ms), wait)
            .await
            .map_err(|_| {
                MonError::Invalid(format!("epoch {epoch} not seen within {timeout_ms} ms"))
            })?
    }
}

async fn receive(
    mut session: Session,
    pending: Pending,
    map_tx: watch::Sender<Option<ClusterMap>>,
) {
    while let Some(frame) = session.recv().await {
        match frame.header.msg_type {
            MSG_MON_REPLY => {
                if let Ok(reply) = from_payload::<MonReply>(&frame.payload) {
                    let waiter = pending.lock().ok().and_then(|mut p| p.remove(&reply.tid));
                    if let Some(w) = waiter {
                        let _ = w.reply.send(reply);
                    }
                }
            }
            MSG_MON_MAP => match from_payload::<MapUpdate>(&frame.payload) {
                Ok(update) => {
                    let current = map_tx.borrow().clone();
                    match apply_update(current, update) {
                        Ok(map) => {
                            let _ = map_tx.send(Some(map));
                        }
                        Err(e) => tracing::warn!(error = %e, "dropped a map update"),
                    }
                }
                Err(e) => tracing::warn!(error = %e, "malformed map update"),
            },
            other => tracing::warn!(msg_type = other, "unexpected message from the monitor"),
        }
    }
}

/// Sends every pending request again each time the session finds the monitor restarted: the
/// new process never received the requests the old one had not acknowledged (the session
/// dropped them), and whoever waits for an answer (an OSD's up_thru before its PG activates, a
/// boot, a pg_temp) would otherwise wait out its whole timeout. Only requests last sent before
/// that restart go again; one the old process had taken but not answered is then served
/// twice: up_thru, pg_temp, beacons, reports and marks are idempotent, a boot starts one more
/// epoch (the OSD's next up_from), and a pool creation is answered that the pool exists
/// (before, all of them timed out).
async fn resend_on_restart(sender: SessionSender, pending: Pending) {
    let mut restarts = sender.peer_restarts();
    while restarts.changed().await.is_ok() {
        let now = *restarts.borrow_and_update();
        let again: Vec<bytes::Bytes> = match pending.lock() {
            Ok(mut p) => p
                .values_mut()
                .filter(|w| w.sent_in < now)
                .map(|w| {
                    w.sent_in = now;
                    w.request.clone()
                })
                .collect(),
            Err(_) => return,
        };
        if !again.is_empty() {
            tracing::info!(
                requests = again.len(),
                "monitor restarted: pending requests sent again"
            );
        }
        for request in again {
            if sender.send(MSG_MON_REQUEST, request).await.is_err() {
                return;
            }
        }
    }
}

fn apply_update(current: Option<ClusterMap>, update: MapUpdate) -> Result<ClusterMap, MonError> {
    match update {
        MapUpdate::Full(bytes) => Ok(ClusterMap::decode(&bytes)?),
        MapUpdate::Incrementals(incs) => {
            let mut map = current
                .ok_or_else(|| MonError::Invalid("incremental before any full map".into()))?;
            for bytes in incs {
                let inc = Incremental::decode(&bytes)?;
                if inc.epoch > map.epoch {
                    map.apply(&inc)?;
                }
            }
            Ok(map)
        }
    }
}
