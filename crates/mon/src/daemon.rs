//! The monitor daemon: the [`Monitor`] core served over messenger sessions.
//!
//! One task owns the monitor; every session forwards its requests to it and receives replies
//! and, once subscribed, every new epoch as incrementals (or a full map when it is too far
//! behind). A timer ticks the monitor once a second for failure and down -> out decisions.
//!
//! That task never waits on a peer: replies and map updates are queued without waiting
//! ([`SessionSender::try_send`]). A subscriber whose session holds more than
//! [`SUBSCRIBER_MAX_HELD_BYTES`] unacknowledged, or whose window is full, is dropped from the
//! subscribers (its client's renewal brings it back from the epoch it has); a subscriber whose
//! session ended is forgotten; a reply that finds its session full is dropped and counted (its
//! client times out and asks again).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

use cairn_msgr::http::serve_metrics;
use cairn_msgr::session::{Listener, Session, SessionSender};
use cairn_msgr::{Limits, MsgrError};
use tokio::sync::mpsc;

use crate::auth_db::{AuthDb, MonAuthorizer};
use crate::metrics::MonMetrics;
use crate::monitor::Monitor;
use crate::store::MapStore;
use cairn_auth::{EntityName, Keyring, MonAccess};
use cairn_msgr::handshake::AuthPeer;
use cairn_msgr::protect::WireMode;
use cairn_proto::mon::MonError;
use cairn_proto::mon::{
    from_payload, to_payload, MapRange, MapUpdate, MonReply, MonRequest, RequestBody, MSG_MON_MAP,
    MSG_MON_REPLY, MSG_MON_REQUEST,
};
use cairn_proto::mon::{AuthAnswer, AuthRequest};
use cairn_proto::mon::{Reply, Request};
use std::sync::RwLock;

/// Most bytes a subscriber's session may hold unacknowledged before the monitor stops pushing
/// maps to it: it has fallen behind (stalled or slow), and comes back through its renewal.
pub const SUBSCRIBER_MAX_HELD_BYTES: u64 = 8 << 20;

/// Where a request came from, so the reply and map updates can go back.
struct Inbound {
    session: u64,
    sender: SessionSender,
    request: MonRequest,
    /// Who sent it, when the monitor authenticates.
    asker: Option<EntityName>,
}

/// How the monitor authenticates (Ceph's cephx): the keyring its database is seeded from on
/// first start, and the weakest wire mode it accepts.
pub struct MonAuthConfig {
    /// Seeds the database when the store holds none (later starts use the stored one).
    pub seed: Keyring,
    /// The weakest wire mode accepted.
    pub min_mode: WireMode,
}

/// How a monitor is served beyond its address.
#[derive(Default)]
pub struct MonServing {
    /// Durable map store: every new epoch is saved before it is acknowledged or published.
    pub store: Option<MapStore>,
    /// Address of its Prometheus page (`/metrics`, see [`crate::metrics`]); port 0 picks a
    /// free port. None: no page.
    pub metrics_listen: Option<SocketAddr>,
    /// Authentication; None: anyone who reaches the port may do anything (`auth none`).
    pub auth: Option<MonAuthConfig>,
}

/// A running monitor.
pub struct MonDaemon {
    addr: SocketAddr,
    metrics_addr: Option<SocketAddr>,
    metrics_task: Option<tokio::task::JoinHandle<()>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl MonDaemon {
    /// Starts serving `monitor` on `addr` (port 0 picks a free port). With `store`, every new
    /// epoch is saved durably before it is acknowledged or published.
    pub async fn start(monitor: Monitor, addr: SocketAddr) -> Result<MonDaemon, MonError> {
        Self::start_with_store(monitor, addr, None).await
    }

    /// As [`MonDaemon::start`], persisting epochs to `store`.
    pub async fn start_with_store(
        monitor: Monitor,
        addr: SocketAddr,
        store: Option<MapStore>,
    ) -> Result<MonDaemon, MonError> {
        let serving = MonServing {
            store,
            metrics_listen: None,
            auth: None,
        };
        Self::serve(monitor, addr, serving).await
    }

    /// Starts serving `monitor` on `addr` as `serving` says.
    pub async fn serve(
        monitor: Monitor,
        addr: SocketAddr,
        serving: MonServing,
    ) -> Result<MonDaemon, MonError> {
        let auth = match serving.auth {
            Some(cfg) => Some((open_auth_db(&serving.store, &cfg.seed).await?, cfg.min_mode)),
            None => None,
        };
        let db = auth.as_ref().map(|(db, _)| db.clone());
        let authz = auth.map(|(db, min_mode)| {
            Arc::new(MonAuthorizer { db, min_mode }) as Arc<dyn cairn_msgr::handshake::Authorizer>
        });
        let mut listener = Listener::bind_with_auth(addr, Limits::default(), authz)
            .await
            .map_err(|e| MonError::Invalid(format!("bind {addr}: {e}")))?;
        let local = listener.local_addr();
        let metrics = Arc::new(MonMetrics::default());
        metrics.set_messenger(listener.stats());
        metrics.set_map(monitor.map());
        let (metrics_addr, metrics_task) = match serving.metrics_listen {
            Some(at) => {
                let m = metrics.clone();
                let (bound, task) = serve_metrics(at, move || m.render())
                    .await
                    .map_err(|e| MonError::Invalid(format!("metrics on {at}: {e}")))?;
                (Some(bound), Some(task))
            }
            None => (None, None),
        };
        let (tx, rx) = mpsc::channel::<Inbound>(1024);
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            while let Some(session) = listener.accept().await {
                tokio::spawn(serve_session(session, tx.clone()));
            }
        });
        tokio::spawn(run_core(monitor, rx, stop_rx, (serving.store, db), metrics));
        Ok(MonDaemon {
            addr: local,
            metrics_addr,
            metrics_task,
            stop: Some(stop_tx),
        })
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The address of its Prometheus page, when it serves one.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_addr
    }
}

impl Drop for MonDaemon {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.metrics_task.take() {
            task.abort();
        }
    }
}

/// The authentication database: the stored one, or (first start) one seeded from `seed` and
/// saved at once.
async fn open_auth_db(
    store: &Option<MapStore>,
    seed: &Keyring,
) -> Result<Arc<RwLock<AuthDb>>, MonError> {
    let stored = match store {
        Some(s) => s.load_auth().await?,
        None => None,
    };
    let db = match stored {
        Some(bytes) => AuthDb::decode(&bytes)?,
        None => {
            let db = AuthDb::seeded(seed);
            if let Some(s) = store {
                s.save_auth(&db.encode()).await?;
            }
            db
        }
    };
    Ok(Arc::new(RwLock::new(db)))
}

/// What a request needs of its sender's monitor capability, and, for what only an OSD sends,
/// the OSD id it speaks for (which must be the sender's own).
fn required(body: &RequestBody) -> (MonAccess, Option<i32>) {
    use Request as R;
    match body {
        RequestBody::Subscribe { .. } | RequestBody::History { .. } => (MonAccess::Read, None),
        RequestBody::Auth(a) => (AuthDb::required(a), None),
        RequestBody::Op(op) => match op {
            R::Boot { want_id, .. } => (MonAccess::Osd, Some(want_id.unwrap_or(-1))),
            R::FailureReport { reporter, .. } | R::RefusedReport { reporter, .. } => {
                (MonAccess::Osd, Some(*reporter))
            }
            R::Beacon { id, .. } | R::Alive { id, .. } | R::PgUsage { id, .. } => {
                (MonAccess::Osd, Some(*id))
            }
            R::PgTemp { .. } => (MonAccess::Osd, None),
            R::Blocklist { .. } => (MonAccess::Blocklist, None),
            R::RemovePool { .. }
            | R::SetMonOption { .. }
            | R::RemoveOsd { .. }
            | R::MarkLost { .. } => (MonAccess::Admin, None),
            _ => (MonAccess::Write, None),
        },
    }
}

/// Why `peer` may not send `body`, if it may not.
fn refusal(peer: &AuthPeer, body: &RequestBody) -> Option<String> {
    // An OSD whose store failed marks itself down (Ceph's MOSDMarkMeDown): an OSD's own
    // capability covers that, for its own id only.
    if let RequestBody::Op(Request::MarkDown { id }) = body {
        if peer.entity.osd_id() == Some(*id) && peer.caps.mon().allows(MonAccess::Osd) {
            return None;
        }
    }
    let (access, osd) = required(body);
    if !peer.caps.mon().allows(access) {
        return Some(format!(
            "permission denied: {} lacks mon caps for this ({access:?} access)",
            peer.entity
        ));
    }
    match osd {
        Some(id) if peer.entity.osd_id() != Some(id) => Some(format!(
            "permission denied: {} may not speak for osd.{id}",
            peer.entity
        )),
        _ => None,
    }
}

async fn serve_session(mut session: Session, core: mpsc::Sender<Inbound>) {
    let sender = session.sender();
    let peer = session.peer();
    while let Some(frame) = session.recv().await {
        if frame.header.msg_type != MSG_MON_REQUEST {
            tracing::warn!(
                session = session.id(),
                msg_type = frame.header.msg_type,
                known = cairn_proto::registry::name_of(frame.header.msg_type).unwrap_or("unknown"),
                "unexpected message type"
            );
            continue;
        }
        match from_payload::<MonRequest>(&frame.payload) {
            Ok(request) => {
                if let Some(why) = peer.as_ref().and_then(|p| refusal(p, &request.body)) {
                    tracing::warn!(session = session.id(), %why, "request refused");
                    let reply = MonReply::refused(request.tid, 0, why);
                    let _ = sender.try_send(MSG_MON_REPLY, to_payload(&reply));
                    continue;
                }
                let inbound = Inbound {
                    session: session.id(),
                    sender: sender.clone(),
                    request,
                    asker: peer.as_ref().map(|p| p.entity.clone()),
                };
                if core.send(inbound).await.is_err() {
                    return;
                }
            }
            Err(e) => tracing::warn!(session = session.id(), error = %e, "malformed request"),
        }
    }
}

async fn run_core(
    mut monitor: Monitor,
    mut rx: mpsc::Receiver<Inbound>,
    mut stop: tokio::sync::oneshot::Receiver<()>,
    (store, auth): (Option<MapStore>, Option<Arc<RwLock<AuthDb>>>),
    metrics: Arc<MonMetrics>,
) {
    let started = Instant::now();
    let now_ms = || cairn_convert::millis(started.elapsed());
    monitor.set_unix_origin_ms(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, cairn_convert::millis),
    );
    let mut subscribers: BTreeMap<u64, (SessionSender, u64)> = BTreeMap::new();
    let mut ticker = tokio::time::interval(Duration::from_secs(1));
    loop {
        let before = monitor.map().epoch;
        tokio::select! {
            _ = &mut stop => {
                if let Some(store) = store {
                    let _ = store.close().await;
                }
                return;
            }
            _ = ticker.tick() => {
                if let Err(e) = monitor.tick(now_ms()) {
                    tracing::error!(error = %e, "tick failed");
                }
                if !persist(&store, &monitor, before, &metrics).await {
                    return;
                }
            }
            inbound = rx.recv() => {
                let Some(Inbound { session, sender, request, asker }) = inbound else { return };
                let (kind, reply) = match request.body {
                    RequestBody::Subscribe { have_epoch } => {
                        subscribers.insert(session, (sender.clone(), have_epoch));
                        metrics.set_subscribers(subscribers.len());
                        ("subscribe", MonReply::done(request.tid, monitor.map().epoch))
                    }
                    RequestBody::Auth(a) => {
                        let epoch = monitor.map().epoch;
                        ("auth", auth_reply(&auth, &store, asker, a, request.tid, epoch).await)
                    }
                    RequestBody::History { from } => ("history", history_reply(&monitor, request.tid, from)),
                    RequestBody::Op(req) => match boot_conflict(&monitor, asker.as_ref(), &req) {
                        Some(why) => {
                            tracing::warn!(session, %why, "boot refused");
                            (req.kind(), MonReply::refused(request.tid, monitor.map().epoch, why))
                        }
                        None => (req.kind(), answer(&mut monitor, now_ms(), request.tid, req)),
                    },
                };
                metrics.record_request(kind, reply.error.is_none());
                if kind == "pg_usage" {
                    let rows = monitor
                        .map()
                        .placement
                        .pools
                        .values()
                        .map(|p| (p.name.clone(), monitor.pool_usage(p.id)))
                        .collect();
                    metrics.set_pool_usage(rows);
                }
                if !persist(&store, &monitor, before, &metrics).await {
                    return;
                }
                // Before the reply: whoever reads the page after its request was answered
                // sees the epoch it made.
                metrics.set_map(monitor.map());
                if let Err(e) = sender.try_send(MSG_MON_REPLY, to_payload(&reply)) {
                    tracing::debug!(session, error = %e, "reply dropped");
                    metrics.record_reply_dropped();
                }
            }
        }
        if monitor.map().epoch != before
            || subscribers.values().any(|(_, e)| *e < monitor.map().epoch)
        {
            publish(&monitor, &mut subscribers, &metrics);
        }
        if monitor.map().epoch != before {
            metrics.set_map(monitor.map());
        }
    }
}

/// Why an authenticated OSD's boot is refused, if it is (see [`Monitor::boot_conflict`]).
fn boot_conflict(monitor: &Monitor, asker: Option<&EntityName>, req: &Request) -> Option<String> {
    let (Request::Boot { uuid, .. }, Some(id)) = (req, asker.and_then(EntityName::osd_id)) else {
        return None;
    };
    monitor.boot_conflict(uuid, id)
}

/// Saves a new epoch before anyone hears of it; false (stop serving) if it cannot be saved.
async fn persist(
    store: &Option<MapStore>,
    monitor: &Monitor,
    before: u64,
    metrics: &MonMetrics,
) -> bool {
    let Some(store) = store else { return true };
    if monitor.map().epoch == before {
        return true;
    }
    let t = Instant::now();
    match store.save(monitor.map(), monitor.history()).await {
        Ok(()) => {
            metrics.record_save(t.elapsed());
            true
        }
        Err(e) => {
            tracing::error!(error = %e, "cannot persist the map: the monitor stops");
            false
        }
    }
}

/// Serves an authentication request, saving the database before answering when it changed.
async fn auth_reply(
    auth: &Option<Arc<RwLock<AuthDb>>>,
    store: &Option<MapStore>,
    asker: Option<EntityName>,
    request: AuthRequest,
    tid: u64,
    epoch: u64,
) -> MonReply {
    let (Some(db), Some(asker)) = (auth, asker) else {
        return MonReply::refused(
            tid,
            epoch,
            "this monitor does not authenticate (auth none)".into(),
        );
    };
    let now_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let outcome = match request {
        // Tickets, the service secret and reads change no key: served on the live database
        // (a ticket binds its client id there, in memory).
        AuthRequest::Ticket { .. }
        | AuthRequest::ServiceSecret
        | AuthRequest::Get { .. }
        | AuthRequest::List => db
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .handle(&asker, request, now_s)
            .map(|(answer, changed)| {
                debug_assert!(
                    !changed,
                    "tickets, the service secret and reads change no key"
                );
                answer
            }),
        // A change is made on a copy, saved, and only then put in place: one that cannot be
        // saved never takes effect, nor comes back after a restart. The monitor serves one
        // request at a time, so no other change comes between the copy and its adoption.
        request => {
            let mut copy = db.read().unwrap_or_else(|p| p.into_inner()).keys_copy();
            match copy.handle(&asker, request, now_s) {
                Ok((answer, true)) => {
                    if let Some(s) = store {
                        if let Err(e) = s.save_auth(&copy.encode()).await {
                            tracing::error!(%asker, error = %e, "an authentication change could not be saved; nothing changed");
                            return MonReply::refused(
                                tid,
                                epoch,
                                format!("cannot save the change (nothing changed): {e}"),
                            );
                        }
                    }
                    db.write()
                        .unwrap_or_else(|p| p.into_inner())
                        .adopt_keys(copy);
                    Ok(answer)
                }
                Ok((answer, false)) => Ok(answer),
                Err(e) => Err(e),
            }
        }
    };
    match outcome {
        Ok(answer) => {
            if !matches!(
                answer,
                AuthAnswer::Ticket { .. } | AuthAnswer::ServiceSecret { .. }
            ) {
                tracing::info!(%asker, "authentication database read or changed");
            }
            MonReply {
                auth: Some(answer),
                ..MonReply::done(tid, epoch)
            }
        }
        Err(e) => MonReply::refused(tid, epoch, e.to_string()),
    }
}

fn history_reply(monitor: &Monitor, tid: u64, from: u64) -> MonReply {
    let epoch = monitor.map().epoch;
    match monitor.history().range_from(from) {
        Ok((full, incs)) => MonReply {
            tid,
            epoch,
            osd_id: None,
            error: None,
            maps: Some(MapRange {
                full: full.encode(),
                incrementals: incs.iter().map(|i| i.encode()).collect(),
            }),
            auth: None,
        },
        Err(e) => MonReply {
            tid,
            epoch,
            osd_id: None,
            error: Some(e.to_string()),
            maps: None,
            auth: None,
        },
    }
}

fn answer(monitor: &mut Monitor, now_ms: u64, tid: u64, request: Request) -> MonReply {
    match monitor.handle(now_ms, request) {
        Ok(Reply::Booted { id, epoch }) => MonReply {
            tid,
            epoch,
            osd_id: Some(id),
            error: None,
            maps: None,
            auth: None,
        },
        Ok(Reply::Done { epoch }) => MonReply {
            tid,
            epoch,
            osd_id: None,
            error: None,
            maps: None,
            auth: None,
        },
        Err(e) => MonReply {
            tid,
            epoch: monitor.map().epoch,
            osd_id: None,
            error: Some(e.to_string()),
            maps: None,
            auth: None,
        },
    }
}

/// Pushes the epochs each subscriber lacks, without waiting on any of them: one whose session
/// ended is forgotten, one that fell behind (see [`SUBSCRIBER_MAX_HELD_BYTES`]) is dropped
/// until its client renews the subscription.
fn publish(
    monitor: &Monitor,
    subscribers: &mut BTreeMap<u64, (SessionSender, u64)>,
    metrics: &MonMetrics,
) {
    let epoch = monitor.map().epoch;
    let mut gone = Vec::new();
    for (&session, (sender, have)) in subscribers.iter_mut() {
        if *have >= epoch {
            continue;
        }
        if sender.is_closed() {
            gone.push(session);
            continue;
        }
        if sender.held_bytes() > SUBSCRIBER_MAX_HELD_BYTES {
            tracing::debug!(
                session,
                held = sender.held_bytes(),
                "subscriber fell behind: dropped"
            );
            metrics.record_subscriber_dropped();
            gone.push(session);
            continue;
        }
        let update = match (*have, monitor.incrementals_since(*have)) {
            (0, _) | (_, None) => MapUpdate::Full(monitor.map().encode()),
            (_, Some(incs)) => MapUpdate::Incrementals(incs.iter().map(|i| i.encode()).collect()),
        };
        let full = matches!(update, MapUpdate::Full(_));
        match sender.try_send(MSG_MON_MAP, to_payload(&update)) {
            Ok(()) => {
                *have = epoch;
                metrics.record_push(full);
            }
            Err(MsgrError::Busy { .. }) => {
                metrics.record_subscriber_dropped();
                gone.push(session);
            }
            Err(_) => gone.push(session),
        }
    }
    for s in gone {
        subscribers.remove(&s);
    }
    metrics.set_subscribers(subscribers.len());
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_auth::Caps;

    fn peer(entity: &str, caps: Caps) -> AuthPeer {
        AuthPeer {
            entity: entity.parse().unwrap(),
            caps,
            mode: WireMode::Mac,
            client_id: None,
        }
    }

    fn op(request: Request) -> RequestBody {
        RequestBody::Op(request)
    }

    #[test]
    fn an_osd_marks_only_itself_down_and_speaks_only_for_itself() {
        let osd3 = peer("osd.3", Caps::osd_daemon());
        assert_eq!(refusal(&osd3, &op(Request::MarkDown { id: 3 })), None);
        assert!(refusal(&osd3, &op(Request::MarkDown { id: 4 })).is_some());
        assert!(refusal(&osd3, &op(Request::MarkOut { id: 3 })).is_some());
        let beacon = |id| Request::Beacon {
            id,
            full: false,
            nearfull: false,
        };
        assert_eq!(refusal(&osd3, &op(beacon(3))), None);
        assert!(refusal(&osd3, &op(beacon(2))).is_some());
        let reader = peer("client.r", Caps::from_pairs(&[("mon", "allow r")]).unwrap());
        assert!(refusal(&reader, &op(Request::MarkDown { id: 3 })).is_some());
        assert!(refusal(&reader, &op(beacon(3))).is_some());
        let admin = peer("client.admin", Caps::everything());
        assert_eq!(refusal(&admin, &op(Request::MarkDown { id: 3 })), None);
        assert!(
            refusal(&admin, &op(beacon(3))).is_some(),
            "only an OSD sends beacons"
        );
    }

    #[test]
    fn fencing_a_client_needs_a_capability_that_allows_it() {
        let fence = op(Request::Blocklist {
            instance: 9,
            expire_s: Some(60),
        });
        let mds = peer(
            "client.mds-a",
            Caps::from_pairs(&[("mon", "profile mds")]).unwrap(),
        );
        let rbd = peer(
            "client.nbd",
            Caps::from_pairs(&[("mon", "profile rbd")]).unwrap(),
        );
        assert_eq!(refusal(&mds, &fence), None);
        assert_eq!(refusal(&rbd, &fence), None);
        assert_eq!(
            refusal(&peer("client.admin", Caps::everything()), &fence),
            None
        );
        let reader = peer("client.r", Caps::from_pairs(&[("mon", "allow r")]).unwrap());
        assert!(refusal(&reader, &fence).is_some());
        assert!(refusal(&peer("osd.1", Caps::osd_daemon()), &fence).is_some());
    }
}
