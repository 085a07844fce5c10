//! Lossless sessions: messages to a peer survive connection loss.
//!
//! Every data frame carries a per-direction sequence number and piggybacks the highest
//! sequence received from the peer. The sender keeps unacknowledged frames (bounded by
//! [`Limits::max_inflight_bytes`], which is the backpressure: `send` waits for room) and, after a
//! reconnect, resends those the peer has not seen; the receiver drops duplicates, so the layer
//! above sees each message exactly once and in order. A connection starts with a HELLO frame
//! naming the session, the last sequence received and the session's [`Policy`].
//!
//! Sessions between daemons are lossless. A client's are lossy, as Ceph's are: the accepting
//! daemon forgets the session (its queued replies included) as soon as its connection ends,
//! and a client that reconnects starts a new session and sends its pending requests again by
//! their ids, which the daemons deduplicate. A daemon therefore never holds state for a client
//! that is gone. Either end of a connection that hears nothing for [`Limits::idle_timeout_ms`]
//! closes it; each sends keepalives while it has nothing else to send. A connection whose
//! sent frames go unacknowledged for [`Limits::ack_timeout_ms`] is closed too and made again
//! (a stream stalled in one direction), its unacknowledged frames resent on the new one.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

use crate::transport::{Listener as NetListener, Stream};
use bytes::{Buf, BufMut, BytesMut};
use cairn_metrics::{DescriptorEncoder, Families, Written};
use tokio::sync::{mpsc, watch, Mutex, OwnedSemaphorePermit, Semaphore, TryAcquireError};

use crate::conn::{framed, Conn, FrameWriter};
use crate::error::MsgrError;
use crate::frame::{Frame, Limits};
use crate::handshake::{AuthPeer, Authorizer, CredentialSource, MSG_AUTH_REQUEST};
use cairn_auth::EntityName;

/// Reserved message type of the handshake frame.
pub const MSG_HELLO: u16 = 0xffff;
/// Reserved message type of a bare acknowledgement.
pub const MSG_ACK: u16 = 0xfffe;
/// Highest message type available to the layers above.
pub const MAX_USER_MSG_TYPE: u16 = 0xfff0;

/// Send one bare acknowledgement after this many frames received without sending any.
const ACK_EVERY_FRAMES: u64 = 32;

/// Longest a received frame waits for its acknowledgement to ride on an outgoing frame before a
/// bare one is sent (like TCP's delayed ACK: a request is usually answered sooner, and the
/// answer carries the acknowledgement, saving a frame and a system call per request).
const ACK_DELAY: std::time::Duration = std::time::Duration::from_millis(5);

/// A dialer whose connection lasted at least this long redials at once when it drops, instead
/// of after its retry delay.
const REDIAL_AT_ONCE_AFTER: Duration = Duration::from_secs(1);

/// Most queued frames handed to the writer before the session loop looks at its other work.
const MAX_FRAMES_PER_TURN: usize = 64;

/// Longest either end waits for each of the other's handshake frames on a new connection.
pub(crate) const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest an accepted lossless session waits, its connection lost, for its peer to connect
/// again; past it the session ends and drops what it queued, as if the peer had restarted.
pub const DETACHED_LIMIT: Duration = Duration::from_secs(600);
/// Largest frame a listener takes from a peer before its HELLO is accepted: an
/// authentication request (a ticket is at most 16 KiB) and a HELLO fit well within it.
pub const HANDSHAKE_FRAME_BYTES: u32 = 64 << 10;

/// Bit of the HELLO's flags saying the dialer's session is [`Policy::Lossy`].
const HELLO_LOSSY: u64 = 1;

/// What happens to a session when its connection ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// Daemon to daemon: both ends keep the session (and what the peer has not acknowledged)
    /// across reconnects, so nothing sent is lost or delivered twice.
    Lossless,
    /// Client to daemon (Ceph's lossy client policy): the accepting end ends the session when
    /// its connection ends, dropping what it had queued; the dialer reconnects as a new
    /// session (seen as [`SessionSender::peer_restarts`]) and its owner resends by request id.
    Lossy,
}

/// A frame's claim on its session's send window (see [`Limits::max_inflight_bytes`]), held
/// while it is queued or unacknowledged, and counted in its listener's [`ListenerStats`].
struct Held {
    permit: OwnedSemaphorePermit,
    stats: Option<Arc<ListenerStats>>,
}

impl Held {
    fn new(permit: OwnedSemaphorePermit, stats: Option<Arc<ListenerStats>>) -> Held {
        if let Some(st) = &stats {
            st.held_bytes
                .fetch_add(permit.num_permits() as u64 * 1024, Ordering::Relaxed);
        }
        Held { permit, stats }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some(st) = &self.stats {
            st.held_bytes
                .fetch_sub(self.permit.num_permits() as u64 * 1024, Ordering::Relaxed);
        }
    }
}

/// What a listener holds now and has done, for a daemon's Prometheus page: connections and
/// sessions open, and bytes its sessions keep queued or unacknowledged.
#[derive(Debug, Default)]
pub struct ListenerStats {
    connections: AtomicU64,
    connections_refused: AtomicU64,
    idle_closed: AtomicU64,
    sessions: AtomicU64,
    sessions_ended: AtomicU64,
    held_bytes: AtomicU64,
}

impl ListenerStats {
    /// Connections open now, handshakes included.
    pub fn connections(&self) -> u64 {
        self.connections.load(Ordering::Relaxed)
    }

    /// Sessions open now (a lossless one stays open while its peer may reconnect).
    pub fn sessions(&self) -> u64 {
        self.sessions.load(Ordering::Relaxed)
    }

    /// Bytes the sessions hold queued or unacknowledged now.
    pub fn held_bytes(&self) -> u64 {
        self.held_bytes.load(Ordering::Relaxed)
    }

    /// Connections closed at once because the listener held [`Limits::max_connections`].
    pub fn connections_refused(&self) -> u64 {
        self.connections_refused.load(Ordering::Relaxed)
    }

    /// Writes these counters on a metrics page, each labelled `daemon="{daemon}"`.
    pub fn encode(&self, e: &mut DescriptorEncoder<'_>, daemon: &str) -> Written {
        let at = [("daemon", daemon)];
        e.gauges(
            "cairn_msgr_connections",
            "Connections open, handshakes included.",
            [(at, self.connections())],
        )?;
        e.gauges(
            "cairn_msgr_sessions",
            "Sessions open.",
            [(at, self.sessions())],
        )?;
        e.gauges(
            "cairn_msgr_held_bytes",
            "Bytes queued or sent and not yet acknowledged on the sessions.",
            [(at, self.held_bytes())],
        )?;
        e.counters(
            "cairn_msgr_connections_refused_total",
            "Connections closed at once because the listener was at its limit.",
            [(at, self.connections_refused())],
        )?;
        e.counters(
            "cairn_msgr_idle_closed_total",
            "Connections closed after hearing nothing for the idle timeout.",
            [(at, self.idle_closed.load(Ordering::Relaxed))],
        )?;
        e.counters(
            "cairn_msgr_sessions_ended_total",
            "Sessions ended (a lossy one with its connection, a lossless one replaced).",
            [(at, self.sessions_ended.load(Ordering::Relaxed))],
        )
    }
}

/// One end of a lossless session. Cloneable senders come from [`Session::sender`].
pub struct Session {
    id: u64,
    incoming: mpsc::Receiver<Frame>,
    sender: SessionSender,
    /// On the accepting end of an authenticated connection: who the peer proved to be.
    peer: Option<Arc<AuthPeer>>,
}

/// A cloneable handle that sends on a session.
#[derive(Clone)]
pub struct SessionSender {
    outgoing: mpsc::Sender<(Frame, Held)>,
    inflight: Arc<Semaphore>,
    limits: Limits,
    link: Arc<Link>,
    stats: Option<Arc<ListenerStats>>,
}

/// What the dialing end of a session last learned about reaching its peer.
struct Link {
    /// When the latest attempt to connect was refused (nothing listens at the peer's address),
    /// if no connection has been made since.
    refused_at: std::sync::Mutex<Option<Instant>>,
    /// Counts refusals that followed a connection (or the first attempt): one per time the
    /// peer became unreachable this way, not one per retry.
    refusals: watch::Sender<u64>,
    /// Counts the times the dialer found the peer restarted (another incarnation answered):
    /// the frames the previous one had not acknowledged were dropped, never to be delivered.
    restarts: watch::Sender<u64>,
    /// Why the latest attempt to authenticate failed, until one succeeds.
    auth_error: std::sync::Mutex<Option<String>>,
}

impl Default for Link {
    fn default() -> Self {
        Link {
            refused_at: std::sync::Mutex::new(None),
            refusals: watch::channel(0).0,
            restarts: watch::channel(0).0,
            auth_error: std::sync::Mutex::new(None),
        }
    }
}

impl Link {
    fn set_refused(&self, at: Option<Instant>) {
        let was = std::mem::replace(
            &mut *self.refused_at.lock().unwrap_or_else(|p| p.into_inner()),
            at,
        );
        if was.is_none() && at.is_some() {
            self.refusals.send_modify(|n| *n += 1);
        }
    }

    fn refused_at(&self) -> Option<Instant> {
        *self.refused_at.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn set_auth_error(&self, why: Option<String>) {
        *self.auth_error.lock().unwrap_or_else(|p| p.into_inner()) = why;
    }
}

impl SessionSender {
    /// When the dialer's latest attempt to connect to the peer was refused, if it has not
    /// connected since: the peer's host answers but no process listens at its address, so
    /// the peer is gone (what Ceph's `osd_fast_fail_on_connection_refused` acts on). Always
    /// `None` on the accepting end, and while the peer is only slow or unreachable.
    pub fn refused_at(&self) -> Option<Instant> {
        self.link.refused_at()
    }

    /// Changes each time the peer starts refusing connections (after a connection, or on the
    /// first attempt), so a watcher can act on a refusal at once instead of polling
    /// [`SessionSender::refused_at`]; retries refused again do not change it.
    pub fn refusals(&self) -> watch::Receiver<u64> {
        self.link.refusals.subscribe()
    }

    /// Changes each time the dialer finds the peer restarted: requests sent before that and
    /// not answered will never be (the session started over without them), so a requester
    /// that needs its answers sends them again. Never changes on the accepting end.
    pub fn peer_restarts(&self) -> watch::Receiver<u64> {
        self.link.restarts.subscribe()
    }

    /// Why the dialer's latest attempt to authenticate failed (the peer refused its key or
    /// ticket, or could not prove its own), until an attempt succeeds: a requester that timed
    /// out says this instead of "unreachable". Always `None` on the accepting end.
    pub fn auth_error(&self) -> Option<String> {
        self.link
            .auth_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Queues a message; waits while the peer has not acknowledged `max_inflight_bytes`.
    pub async fn send(
        &self,
        msg_type: u16,
        payload: impl Into<bytes::Bytes>,
    ) -> Result<(), MsgrError> {
        self.send_frame(Frame::new(msg_type, payload)).await
    }

    /// Queues a message with a data segment whose crc32c is `data_crc` when the caller knows it
    /// (see [`Frame::with_checked_data`]), computed here otherwise.
    pub async fn send_data(
        &self,
        msg_type: u16,
        payload: impl Into<bytes::Bytes>,
        data: bytes::Bytes,
        data_crc: Option<u32>,
    ) -> Result<(), MsgrError> {
        let frame = match data_crc {
            Some(crc) => Frame::with_checked_data(msg_type, payload, data, crc),
            None => Frame::with_data(msg_type, payload, data),
        };
        self.send_frame(frame).await
    }

    /// Queues a message if the session's window has room now, without waiting: a sender that
    /// must not be held up by one slow peer (a monitor publishing maps to every subscriber)
    /// gets [`MsgrError::Busy`] instead, and [`MsgrError::Closed`] once the session ended.
    pub fn try_send(
        &self,
        msg_type: u16,
        payload: impl Into<bytes::Bytes>,
    ) -> Result<(), MsgrError> {
        let frame = Frame::new(msg_type, payload);
        let permits = self.check(&frame)?;
        if self.outgoing.is_closed() {
            return Err(MsgrError::Closed);
        }
        let busy = || MsgrError::Busy {
            held_bytes: self.held_bytes(),
        };
        let permit = match self.inflight.clone().try_acquire_many_owned(permits) {
            Ok(p) => p,
            Err(TryAcquireError::NoPermits) => return Err(busy()),
            Err(TryAcquireError::Closed) => return Err(MsgrError::Closed),
        };
        self.outgoing
            .try_send((frame, Held::new(permit, self.stats.clone())))
            .map_err(|e| match e {
                mpsc::error::TrySendError::Full(_) => busy(),
                mpsc::error::TrySendError::Closed(_) => MsgrError::Closed,
            })
    }

    /// Bytes of this session's messages queued or sent and not yet acknowledged.
    pub fn held_bytes(&self) -> u64 {
        let total = (self.limits.max_inflight_bytes / 1024).max(1);
        total.saturating_sub(self.inflight.available_permits() as u64) * 1024
    }

    /// True once the session has ended (its owner dropped it, or a lossy session lost its
    /// connection): every send fails from then on.
    pub fn is_closed(&self) -> bool {
        self.outgoing.is_closed()
    }

    /// The permits `frame` needs, once its type and size are known to be allowed.
    fn check(&self, frame: &Frame) -> Result<u32, MsgrError> {
        let msg_type = frame.header.msg_type;
        if msg_type > MAX_USER_MSG_TYPE {
            return Err(MsgrError::Io(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("message type {msg_type:#x} is reserved"),
            )));
        }
        let len = frame.body_len();
        if len > u64::from(self.limits.max_payload_bytes) {
            return Err(MsgrError::TooLarge {
                len_bytes: len,
                limit_bytes: u64::from(self.limits.max_payload_bytes),
            });
        }
        Ok(permits_for(len, &self.limits))
    }

    async fn send_frame(&self, frame: Frame) -> Result<(), MsgrError> {
        let permits = self.check(&frame)?;
        let permit = self
            .inflight
            .clone()
            .acquire_many_owned(permits)
            .await
            .map_err(|_| MsgrError::Closed)?;
        self.outgoing
            .send((frame, Held::new(permit, self.stats.clone())))
            .await
            .map_err(|_| MsgrError::Closed)
    }
}

/// Permits (KiB units, at least one) a payload holds while unacknowledged.
fn permits_for(len_bytes: u64, limits: &Limits) -> u32 {
    let total = (limits.max_inflight_bytes / 1024).max(1);
    u32::try_from(len_bytes.div_ceil(1024).max(1).min(total)).unwrap_or(u32::MAX)
}

impl Session {
    /// This session's id (shared by both ends).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// A handle for sending from other tasks.
    pub fn sender(&self) -> SessionSender {
        self.sender.clone()
    }

    /// Who the peer is, on the accepting end of an authenticated listener; `None` where
    /// nothing is authenticated (and always on the dialing end, which chose its peer).
    pub fn peer(&self) -> Option<Arc<AuthPeer>> {
        self.peer.clone()
    }

    /// Sends one message (see [`SessionSender::send`]).
    pub async fn send(
        &self,
        msg_type: u16,
        payload: impl Into<bytes::Bytes>,
    ) -> Result<(), MsgrError> {
        self.sender().send(msg_type, payload).await
    }

    /// Sends one message with a data segment (see [`SessionSender::send_data`]).
    pub async fn send_data(
        &self,
        msg_type: u16,
        payload: impl Into<bytes::Bytes>,
        data: bytes::Bytes,
        data_crc: Option<u32>,
    ) -> Result<(), MsgrError> {
        self.sender()
            .send_data(msg_type, payload, data, data_crc)
            .await
    }

    /// Receives the next message, in order, exactly once; None when the session is closed.
    pub async fn recv(&mut self) -> Option<Frame> {
        self.incoming.recv().await
    }

    /// Receives with a deadline.
    pub async fn recv_timeout(&mut self, timeout_ms: u64) -> Result<Frame, MsgrError> {
        match tokio::time::timeout(Duration::from_millis(timeout_ms), self.incoming.recv()).await {
            Ok(Some(f)) => Ok(f),
            Ok(None) => Err(MsgrError::Closed),
            Err(_) => Err(MsgrError::Timeout(timeout_ms)),
        }
    }

    /// Opens a lossless session to `addr` (daemon to daemon), reconnecting (every `retry_ms`)
    /// whenever the connection drops.
    pub async fn connect(addr: SocketAddr, id: u64, limits: Limits, retry_ms: u64) -> Session {
        Self::connect_with(addr, id, limits, retry_ms, Policy::Lossless).await
    }

    /// Opens a session to `addr` under `policy`, reconnecting (every `retry_ms`) whenever the
    /// connection drops; a client's sessions are [`Policy::Lossy`].
    pub async fn connect_with(
        addr: SocketAddr,
        id: u64,
        limits: Limits,
        retry_ms: u64,
        policy: Policy,
    ) -> Session {
        Self::connect_as(addr, id, limits, retry_ms, policy, None).await
    }

    /// As [`Session::connect_with`], authenticating every connection with the credentials
    /// `creds` gives (none: the peer must not require authentication).
    pub async fn connect_as(
        addr: SocketAddr,
        id: u64,
        limits: Limits,
        retry_ms: u64,
        policy: Policy,
        creds: Option<Arc<dyn CredentialSource>>,
    ) -> Session {
        let (session, parts) = Session::new(id, limits, None, None);
        let link = session.sender.link.clone();
        let dial = Dial {
            addr,
            id,
            retry_ms,
            policy,
            creds,
        };
        tokio::spawn(run_dialer(dial, parts, link));
        session
    }

    fn new(
        id: u64,
        limits: Limits,
        stats: Option<Arc<ListenerStats>>,
        peer: Option<Arc<AuthPeer>>,
    ) -> (Session, SessionParts) {
        let (out_tx, out_rx) = mpsc::channel(limits.max_queued_frames.max(1));
        let (in_tx, in_rx) = mpsc::channel(limits.max_queued_frames.max(1));
        let total = (limits.max_inflight_bytes / 1024).max(1) as usize;
        let inflight = Arc::new(Semaphore::new(total));
        (
            Session {
                id,
                incoming: in_rx,
                sender: SessionSender {
                    outgoing: out_tx,
                    inflight,
                    limits,
                    link: Arc::default(),
                    stats: stats.clone(),
                },
                peer,
            },
            SessionParts {
                outgoing: out_rx,
                incoming: in_tx,
                state: SessionState::default(),
                limits,
                stats,
            },
        )
    }
}

/// Sequence bookkeeping that outlives connections.
#[derive(Default)]
struct SessionState {
    next_seq: u64,
    last_received: u64,
    /// The highest sequence number written on an earlier connection of the session.
    written_before: u64,
    unacked: VecDeque<(Frame, Held)>,
    received_since_ack: u64,
}

struct SessionParts {
    outgoing: mpsc::Receiver<(Frame, Held)>,
    incoming: mpsc::Sender<Frame>,
    state: SessionState,
    limits: Limits,
    /// The accepting listener's counters; None on a dialer.
    stats: Option<Arc<ListenerStats>>,
}

/// What a HELLO frame says.
pub(crate) struct Hello {
    pub(crate) id: u64,
    pub(crate) last_received: u64,
    pub(crate) incarnation: u64,
    pub(crate) policy: Policy,
}

/// Bytes of a HELLO frame's payload.
const HELLO_BYTES: usize = 32;

fn hello(id: u64, last_received: u64, incarnation: u64, policy: Policy) -> Frame {
    let mut payload = BytesMut::with_capacity(HELLO_BYTES);
    payload.put_u64_le(id);
    payload.put_u64_le(last_received);
    payload.put_u64_le(incarnation);
    payload.put_u64_le(match policy {
        Policy::Lossy => HELLO_LOSSY,
        Policy::Lossless => 0,
    });
    Frame::new(MSG_HELLO, payload.freeze())
}

/// A fresh random value naming one end's session state: a peer that sees it change knows the
/// other end restarted and lost its sequence numbers, so both start over instead of discarding
/// the new incarnation's frames as duplicates.
fn new_incarnation() -> u64 {
    cairn_auth::key::random_u64() | 1
}

/// What a HELLO frame says; anything else (or a HELLO with unknown flags) is refused.
pub(crate) fn parse_hello(frame: &Frame) -> Result<Hello, MsgrError> {
    let invalid = |why: &str| {
        MsgrError::Io(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            why.to_string(),
        ))
    };
    if frame.header.msg_type != MSG_HELLO || frame.payload.len() != HELLO_BYTES {
        return Err(invalid("expected a HELLO frame"));
    }
    let mut p = &frame.payload[..];
    let (id, last_received, incarnation, flags) = (
        p.get_u64_le(),
        p.get_u64_le(),
        p.get_u64_le(),
        p.get_u64_le(),
    );
    let policy = match flags {
        0 => Policy::Lossless,
        HELLO_LOSSY => Policy::Lossy,
        _ => return Err(invalid("HELLO with unknown flags")),
    };
    Ok(Hello {
        id,
        last_received,
        incarnation,
        policy,
    })
}

/// Where and how a dialer connects.
struct Dial {
    addr: SocketAddr,
    id: u64,
    retry_ms: u64,
    policy: Policy,
    creds: Option<Arc<dyn CredentialSource>>,
}

/// Longest a dialer whose authentication failed waits before it tries again: a refused key
/// stays refused until an operator acts, so retrying faster only adds noise.
const AUTH_RETRY: Duration = Duration::from_secs(1);

async fn run_dialer(dial: Dial, mut parts: SessionParts, link: Arc<Link>) {
    let Dial {
        addr,
        id,
        retry_ms,
        policy,
        creds,
    } = dial;
    let limits = parts.limits;
    let me = new_incarnation();
    let mut peer_incarnation = None;
    loop {
        if parts.incoming.is_closed() {
            return;
        }
        let stream = match Stream::connect(addr).await {
            Ok(s) => {
                link.set_refused(None);
                s
            }
            Err(e) => {
                if e.kind() == std::io::ErrorKind::ConnectionRefused {
                    link.set_refused(Some(Instant::now()));
                }
                tracing::debug!(%addr, error = %e, "connect failed; retrying");
                tokio::time::sleep(Duration::from_millis(retry_ms)).await;
                continue;
            }
        };
        let mut conn = framed(stream, limits);
        let handshake = async {
            if let Some(source) = &creds {
                let c = source.credentials().await.map_err(MsgrError::Auth)?;
                crate::handshake::dial(&mut conn, &c).await?;
            }
            conn.writer
                .send(hello(id, parts.state.last_received, me, policy))?;
            let reply = tokio::time::timeout(HANDSHAKE_TIMEOUT, conn.stream.next())
                .await
                .map_err(|_| MsgrError::timed_out(HANDSHAKE_TIMEOUT))?
                .ok_or(MsgrError::Closed)??;
            if reply.header.msg_type == crate::handshake::MSG_AUTH_REFUSED {
                return Err(MsgrError::Auth(format!(
                    "refused by the peer: {}",
                    String::from_utf8_lossy(&reply.payload[..reply.payload.len().min(512)])
                )));
            }
            parse_hello(&reply)
        };
        let outcome = handshake.await;
        match &outcome {
            Err(MsgrError::Auth(why)) => link.set_auth_error(Some(why.clone())),
            Ok(_) => link.set_auth_error(None),
            Err(_) => {}
        }
        match outcome {
            Ok(Hello {
                last_received: peer_received,
                incarnation,
                ..
            }) => {
                if peer_incarnation.is_some_and(|p| p != incarnation) {
                    tracing::info!(%addr, "peer restarted: session starts over");
                    parts.state.last_received = 0;
                    parts.state.unacked.clear();
                    link.restarts.send_modify(|n| *n += 1);
                }
                peer_incarnation = Some(incarnation);
                let since = Instant::now();
                match drive(&mut parts, conn, peer_received, None).await {
                    Ended::SessionClosed => return,
                    Ended::Lost(e) if e.is_integrity_failure() => {
                        tracing::warn!(%addr, error = %e, "frame failed its integrity check: connection dropped")
                    }
                    Ended::Lost(e) => tracing::debug!(%addr, error = %e, "session connection lost"),
                    Ended::Replaced(_) => {}
                }
                // A connection that lasted redials at once (a peer that died is then seen
                // refusing without the retry delay); a short-lived one waits, so neither a peer
                // that accepts and closes nor another dialer taking over the same session id
                // (each connection replaces the other's) can make the dialer spin or starve
                // the other.
                if since.elapsed() >= REDIAL_AT_ONCE_AFTER.max(Duration::from_millis(retry_ms)) {
                    continue;
                }
            }
            Err(e) => {
                conn.task.abort();
                tracing::warn!(%addr, error = %e, "handshake failed");
                if matches!(e, MsgrError::Auth(_)) {
                    tokio::time::sleep(AUTH_RETRY.saturating_sub(Duration::from_millis(retry_ms)))
                        .await;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(retry_ms)).await;
    }
}

/// How one connection of a session ended.
enum Ended {
    /// The session was dropped by its owner.
    SessionClosed,
    /// The connection failed; wait for (or make) another.
    Lost(MsgrError),
    /// The peer reconnected: continue on the new connection.
    Replaced(Box<NewConn>),
}

/// A connection taking over a session, with what the peer said it has received, and (on the
/// accepting end) its place in the listener's connection count.
type NewConn = (Conn, u64, Option<OpenConn>);

/// One connection counted open in its listener's [`ListenerStats`] while this lives.
struct OpenConn(Arc<ListenerStats>);

impl OpenConn {
    fn new(stats: &Arc<ListenerStats>) -> OpenConn {
        stats.connections.fetch_add(1, Ordering::Relaxed);
        OpenConn(stats.clone())
    }
}

impl Drop for OpenConn {
    fn drop(&mut self) {
        self.0.connections.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Runs one connection of a session until it ends; `replace` delivers newer connections of the
/// same session (acceptor side), which take over at once. When the session closes, the writer
/// still sends what was queued; otherwise it stops at once.
async fn drive(
    parts: &mut SessionParts,
    conn: Conn,
    peer_received: u64,
    replace: Option<&mut mpsc::Receiver<NewConn>>,
) -> Ended {
    let Conn {
        writer,
        mut task,
        stream,
    } = conn;
    let written = writer.written_handle();
    let ended = drive_inner(parts, writer, &mut task, stream, peer_received, replace).await;
    let ended = match ended {
        Ok(Ended::SessionClosed) => Ended::SessionClosed,
        Ok(other) => {
            task.abort();
            other
        }
        Err(e) => {
            task.abort();
            Ended::Lost(e)
        }
    };
    if !matches!(ended, Ended::SessionClosed) {
        // Stopped for good before its count is read: a writer caught mid-poll on another
        // thread could otherwise still hand the socket frames the peer then acknowledges.
        task.stopped().await;
    }
    let st = &mut parts.state;
    st.written_before = st.written_before.max(written.load(Ordering::Acquire));
    ended
}

async fn drive_inner(
    parts: &mut SessionParts,
    sink: FrameWriter,
    task: &mut crate::conn::WriterTask,
    mut stream: crate::conn::FrameStream,
    peer_received: u64,
    mut replace: Option<&mut mpsc::Receiver<NewConn>>,
) -> Result<Ended, MsgrError> {
    let st = &mut parts.state;
    // What the peer says it received counts only as far as was written to it (a peer that
    // has not yet seen this session start anew still speaks of its old numbering).
    let peer_received = peer_received.min(st.written_before);
    while st
        .unacked
        .front()
        .is_some_and(|(f, _)| f.header.seq <= peer_received)
    {
        st.unacked.pop_front();
    }
    for (frame, _) in &st.unacked {
        let mut f = frame.clone();
        f.header.ack = st.last_received;
        sink.send(f)?;
    }
    let ack_timer = tokio::time::sleep(ACK_DELAY);
    tokio::pin!(ack_timer);
    let idle_timeout = Duration::from_millis(parts.limits.idle_timeout_ms);
    let ack_timeout = Duration::from_millis(parts.limits.ack_timeout_ms);
    let keepalive_every = (idle_timeout / 4).max(Duration::from_millis(1));
    let check_every = [idle_timeout / 4, ack_timeout / 4]
        .into_iter()
        .filter(|d| !d.is_zero())
        .min()
        .unwrap_or(Duration::ZERO)
        .max(Duration::from_millis(1));
    let mut checks = tokio::time::interval(check_every);
    checks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let (mut last_in, mut last_out) = (Instant::now(), Instant::now());
    // Since when the oldest frame not yet acknowledged has waited with no acknowledgement
    // arriving: from now for those resent on this connection, from its sending for others.
    let mut ack_wait = AckWait::new(!st.unacked.is_empty());
    loop {
        tokio::select! {
            _ = checks.tick(), if !idle_timeout.is_zero() || !ack_timeout.is_zero() => {
                if !idle_timeout.is_zero() && last_in.elapsed() >= idle_timeout {
                    if let Some(stats) = &parts.stats {
                        stats.idle_closed.fetch_add(1, Ordering::Relaxed);
                    }
                    return Err(MsgrError::Timeout(parts.limits.idle_timeout_ms));
                }
                if !ack_timeout.is_zero() && ack_wait.waited() >= Some(ack_timeout) {
                    tracing::warn!(
                        unacknowledged = st.unacked.len(),
                        ack_timeout_ms = parts.limits.ack_timeout_ms,
                        "the peer acknowledged nothing for the acknowledgement timeout: connection made again"
                    );
                    return Err(MsgrError::Timeout(parts.limits.ack_timeout_ms));
                }
                if idle_timeout.is_zero() {
                    continue;
                }
                if last_out.elapsed() >= keepalive_every {
                    send_ack(&sink, st)?;
                    last_out = Instant::now();
                }
            }
            newer = async {
                match replace.as_deref_mut() {
                    Some(r) => r.recv().await,
                    None => std::future::pending().await,
                }
            } => {
                return Ok(match newer {
                    Some(conn) => Ended::Replaced(Box::new(conn)),
                    None => Ended::SessionClosed,
                });
            }
            e = task.stopped() => return Err(e),
            out = parts.outgoing.recv() => {
                let Some(first) = out else { return Ok(Ended::SessionClosed) };
                let mut next = Some(first);
                let mut batched = 0;
                while let Some((mut frame, permit)) = next {
                    st.next_seq += 1;
                    frame.header.seq = st.next_seq;
                    frame.header.ack = st.last_received;
                    st.unacked.push_back((frame.clone(), permit));
                    ack_wait.sent();
                    sink.send(frame)?;
                    last_out = Instant::now();
                    batched += 1;
                    next = if batched < MAX_FRAMES_PER_TURN {
                        parts.outgoing.try_recv().ok()
                    } else {
                        None
                    };
                }
                st.received_since_ack = 0;
            }
            () = &mut ack_timer, if st.received_since_ack > 0 => {
                send_ack(&sink, st)?;
                last_out = Instant::now();
            }
            inc = stream.next() => {
                let frame = inc.ok_or(MsgrError::Closed)??;
                last_in = Instant::now();
                // An acknowledgement counts only as far as was handed to the socket: a peer
                // acknowledging what it has not read (or, after a reset, another numbering)
                // releases no more of the window than its socket took.
                let ack = frame.header.ack.min(st.written_before.max(sink.written_seq()));
                let mut acked = false;
                while st.unacked.front().is_some_and(|(f, _)| f.header.seq <= ack) {
                    st.unacked.pop_front();
                    acked = true;
                }
                if acked {
                    ack_wait.acked(st.unacked.is_empty());
                }
                if frame.header.msg_type == MSG_ACK || frame.header.seq == 0 {
                    continue;
                }
                if frame.header.seq <= st.last_received {
                    continue;
                }
                st.last_received = frame.header.seq;
                if parts.incoming.send(frame).await.is_err() {
                    return Ok(Ended::SessionClosed);
                }
                st.received_since_ack += 1;
                if st.received_since_ack == 1 {
                    ack_timer
                        .as_mut()
                        .reset(tokio::time::Instant::now() + ACK_DELAY);
                }
                if st.received_since_ack >= ACK_EVERY_FRAMES {
                    send_ack(&sink, st)?;
                    last_out = Instant::now();
                }
            }
        }
    }
}

/// How long a connection's oldest unacknowledged frame has waited without any acknowledgement
/// arriving: what [`Limits::ack_timeout_ms`] bounds.
struct AckWait {
    since: Option<Instant>,
}

impl AckWait {
    /// Starts a connection: frames already waiting (resent on it) wait from now.
    fn new(waiting: bool) -> AckWait {
        AckWait {
            since: waiting.then(Instant::now),
        }
    }

    /// A frame was sent: if none was waiting, the wait starts now.
    fn sent(&mut self) {
        self.since.get_or_insert_with(Instant::now);
    }

    /// An acknowledgement arrived: the wait starts over, or ends when nothing is left.
    fn acked(&mut self, nothing_left: bool) {
        self.since = (!nothing_left).then(Instant::now);
    }

    /// How long the wait has lasted; None when nothing waits.
    fn waited(&self) -> Option<Duration> {
        self.since.map(|s| s.elapsed())
    }
}

/// Sends a bare acknowledgement of everything received so far.
fn send_ack(sink: &FrameWriter, st: &mut SessionState) -> Result<(), MsgrError> {
    let mut ack_frame = Frame::new(MSG_ACK, bytes::Bytes::new());
    ack_frame.header.ack = st.last_received;
    sink.send(ack_frame)?;
    st.received_since_ack = 0;
    Ok(())
}

/// Accepts sessions on a TCP address; reconnecting peers of lossless sessions are reattached
/// to their session, lossy ones start anew. Dropping it closes the address (later connections
/// are refused) and ends every session it accepted (their peers see the connection close), as
/// when the process is gone.
pub struct Listener {
    local: SocketAddr,
    new_sessions: mpsc::Receiver<Session>,
    accept_loop: tokio::task::AbortHandle,
    stats: Arc<ListenerStats>,
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.accept_loop.abort();
    }
}

/// A session the listener can reattach a reconnecting peer to: the peer's incarnation, where
/// its new connections go, and the accepting end's own incarnation (which tells this entry
/// from a newer one of the same id when the session ends).
struct Known {
    incarnation: u64,
    reattach: mpsc::Sender<NewConn>,
    mine: u64,
    /// The entity that opened it, on an authenticated listener: no other may take it over.
    entity: Option<EntityName>,
}

/// The sessions a listener keeps, by id.
type KnownSessions = Arc<Mutex<HashMap<u64, Known>>>;

impl Listener {
    /// Binds `addr` (use port 0 for an ephemeral loopback port in tests); connections are
    /// not authenticated.
    pub async fn bind(addr: SocketAddr, limits: Limits) -> Result<Listener, MsgrError> {
        Self::bind_with_auth(addr, limits, None).await
    }

    /// Binds `addr`; with `authz`, every connection must authenticate before its session
    /// starts (see [`crate::handshake`]), and its session knows its [`Session::peer`].
    pub async fn bind_with_auth(
        addr: SocketAddr,
        limits: Limits,
        authz: Option<Arc<dyn Authorizer>>,
    ) -> Result<Listener, MsgrError> {
        let listener = NetListener::bind(addr).await?;
        let local = listener.local_addr()?;
        let (tx, rx) = mpsc::channel(64);
        let known: KnownSessions = Arc::default();
        let stats = Arc::new(ListenerStats::default());
        let counted = stats.clone();
        let accept_loop = tokio::spawn(async move {
            loop {
                let Ok((socket, peer)) = listener.accept().await else {
                    return;
                };
                if counted.connections() >= limits.max_connections as u64 {
                    counted.connections_refused.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(%peer, limit = limits.max_connections, "connection refused: at the limit");
                    drop(socket);
                    continue;
                }
                let open = OpenConn::new(&counted);
                let known = known.clone();
                let tx = tx.clone();
                let stats = counted.clone();
                let authz = authz.clone();
                tokio::spawn(async move {
                    let accepting = Accepting {
                        limits,
                        known,
                        new_sessions: tx,
                        open,
                        stats,
                        authz,
                    };
                    if let Err(e) = accept_one(socket, accepting).await {
                        tracing::warn!(%peer, error = %e, "rejected connection");
                    }
                });
            }
        });
        Ok(Listener {
            local,
            new_sessions: rx,
            accept_loop: accept_loop.abort_handle(),
            stats,
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Its counters, live (for a daemon's metrics page).
    pub fn stats(&self) -> Arc<ListenerStats> {
        self.stats.clone()
    }

    /// The next new session.
    pub async fn accept(&mut self) -> Option<Session> {
        self.new_sessions.recv().await
    }
}

/// What accepting one connection needs from its listener.
struct Accepting {
    limits: Limits,
    known: KnownSessions,
    new_sessions: mpsc::Sender<Session>,
    open: OpenConn,
    stats: Arc<ListenerStats>,
    authz: Option<Arc<dyn Authorizer>>,
}

async fn next_handshake_frame(conn: &mut Conn) -> Result<Frame, MsgrError> {
    tokio::time::timeout(HANDSHAKE_TIMEOUT, conn.stream.next())
        .await
        .map_err(|_| MsgrError::timed_out(HANDSHAKE_TIMEOUT))?
        .ok_or(MsgrError::Closed)?
}

async fn accept_one(socket: Stream, accepting: Accepting) -> Result<(), MsgrError> {
    let Accepting {
        limits,
        known,
        new_sessions,
        open,
        stats,
        authz,
    } = accepting;
    let mut conn = framed(socket, limits);
    // Until its HELLO is accepted, a peer (unauthenticated yet) may send small frames only:
    // a flood of half-sent frames of the full size would otherwise hold memory.
    conn.stream
        .set_max_payload_bytes(limits.max_payload_bytes.min(HANDSHAKE_FRAME_BYTES));
    let mut first = next_handshake_frame(&mut conn).await?;
    let peer = match &authz {
        Some(authz) => {
            let peer = crate::handshake::accept(&mut conn, first, authz).await?;
            first = next_handshake_frame(&mut conn).await?;
            Some(Arc::new(peer))
        }
        None if first.header.msg_type == MSG_AUTH_REQUEST => {
            crate::handshake::refuse(&conn, "this daemon does not authenticate (auth none)");
            return Err(MsgrError::Auth(
                "a dialer authenticates to a daemon that does not".into(),
            ));
        }
        None => None,
    };
    let entity = peer.as_ref().map(|p| p.entity.clone());
    let hello = parse_hello(&first)?;
    conn.stream.set_max_payload_bytes(limits.max_payload_bytes);
    // A client's session is lossy whatever its HELLO asks: only daemons keep sessions across
    // reconnects (a client asking otherwise could leave sessions holding replies behind).
    let policy = match &entity {
        Some(cairn_auth::EntityName::Client(_)) => Policy::Lossy,
        _ => hello.policy,
    };
    let mut sessions = known.lock().await;
    if let Some(k) = sessions.get(&hello.id) {
        if k.entity != entity {
            let why = format!(
                "session {} belongs to another entity: {} may not take it over",
                hello.id,
                entity.map_or("an unauthenticated peer".into(), |e| e.to_string())
            );
            crate::handshake::refuse(&conn, &why);
            return Err(MsgrError::Auth(why));
        }
        if policy == Policy::Lossless && k.incarnation == hello.incarnation {
            // Never waited for under the listener's lock: a session whose reattaches pile up
            // (its driver stuck) refuses one more, and its dialer tries again.
            return match k.reattach.try_send((conn, hello.last_received, Some(open))) {
                Ok(()) => Ok(()),
                Err(mpsc::error::TrySendError::Full(_)) => {
                    tracing::debug!(session = hello.id, "a session's reattaches pile up");
                    Err(MsgrError::Closed)
                }
                Err(mpsc::error::TrySendError::Closed(_)) => Err(MsgrError::Closed),
            };
        }
        // Debug, not info: a lossy client reconnecting starts a new session by design, and an
        // OSD's restart shows in the map anyway.
        tracing::debug!(session = hello.id, "replacing a session");
    }
    let mine = new_incarnation();
    let (session, parts) = Session::new(hello.id, limits, Some(stats.clone()), peer);
    let (re_tx, re_rx) = mpsc::channel(4);
    // Replacing an entry drops its reattach sender, which ends the session it led to.
    sessions.insert(
        hello.id,
        Known {
            incarnation: hello.incarnation,
            reattach: re_tx,
            mine,
            entity,
        },
    );
    drop(sessions);
    stats.sessions.fetch_add(1, Ordering::Relaxed);
    let ending = SessionEnd {
        known: Arc::downgrade(&known),
        id: hello.id,
        mine,
        stats,
    };
    tokio::spawn(run_acceptor(
        parts,
        (conn, hello.last_received, Some(open)),
        re_rx,
        mine,
        policy,
        ending,
    ));
    new_sessions
        .send(session)
        .await
        .map_err(|_| MsgrError::Closed)
}

/// Forgets an accepted session when it ends (unless a newer one of its id took its place),
/// so a listener keeps no entry for a client that is gone. Holds the listener's table weakly:
/// a dropped listener's table goes at once, and with it every session it accepted.
struct SessionEnd {
    known: std::sync::Weak<Mutex<HashMap<u64, Known>>>,
    id: u64,
    mine: u64,
    stats: Arc<ListenerStats>,
}

impl SessionEnd {
    async fn forget(self) {
        if let Some(known) = self.known.upgrade() {
            let mut sessions = known.lock().await;
            if sessions.get(&self.id).is_some_and(|k| k.mine == self.mine) {
                sessions.remove(&self.id);
            }
        }
        self.stats.sessions.fetch_sub(1, Ordering::Relaxed);
        self.stats.sessions_ended.fetch_add(1, Ordering::Relaxed);
    }
}

async fn run_acceptor(
    mut parts: SessionParts,
    first: NewConn,
    mut reattach: mpsc::Receiver<NewConn>,
    me: u64,
    policy: Policy,
    ending: SessionEnd,
) {
    let mut next = Some(first);
    loop {
        let (conn, peer_received, open) = match next.take() {
            Some(c) => c,
            // A lossless session waits for its peer to come back, but not for ever.
            None => match tokio::time::timeout(DETACHED_LIMIT, reattach.recv()).await {
                Ok(Some(c)) => c,
                Ok(None) => break,
                Err(_) => {
                    tracing::info!(
                        session = me,
                        "no reconnect within {DETACHED_LIMIT:?}: session ends"
                    );
                    break;
                }
            },
        };
        if conn
            .writer
            .send(hello(0, parts.state.last_received, me, policy))
            .is_err()
        {
            conn.task.abort();
            if policy == Policy::Lossy {
                break;
            }
            continue;
        }
        let ended = drive(&mut parts, conn, peer_received, Some(&mut reattach)).await;
        drop(open);
        match ended {
            Ended::SessionClosed => break,
            Ended::Lost(e) if e.is_integrity_failure() => {
                tracing::warn!(session = me, error = %e, "frame failed its integrity check: connection dropped");
                if policy == Policy::Lossy {
                    break;
                }
            }
            Ended::Lost(e) if policy == Policy::Lossy => {
                tracing::debug!(error = %e, "lossy session's connection lost: session ends");
                break;
            }
            Ended::Lost(e) => {
                tracing::debug!(error = %e, "session connection lost; waiting for reconnect")
            }
            Ended::Replaced(newer) => next = Some(*newer),
        }
    }
    // Frames queued for a peer that is gone are dropped with the session, freeing its window.
    drop(parts);
    ending.forget().await;
}
