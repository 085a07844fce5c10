//! Lossless sessions: messages to a peer survive connection loss.
//!
//! Every data frame carries a per-direction sequence number and piggybacks the highest
//! sequence received from the peer. The sender keeps unacknowledged frames (bounded by
//! [`Limits::max_inflight_bytes`], which is the backpressure: `send` waits for room) and, after a
//! reconnect, resends those the peer has not seen; the receiver drops duplicates, so the layer
//! above sees each message exactly once and in order. A connection starts with a HELLO frame
//! naming the session and the last sequence received.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Buf, BufMut, BytesMut};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch, Mutex, OwnedSemaphorePermit, Semaphore};

use crate::conn::{framed, Conn, FrameWriter};
use crate::error::MsgrError;
use crate::frame::{Frame, Limits};

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

/// One end of a lossless session. Cloneable senders come from [`Session::sender`].
pub struct Session {
    id: u64,
    outgoing: mpsc::Sender<(Frame, OwnedSemaphorePermit)>,
    incoming: mpsc::Receiver<Frame>,
    inflight: Arc<Semaphore>,
    limits: Limits,
    link: Arc<Link>,
}

/// A cloneable handle that sends on a session.
#[derive(Clone)]
pub struct SessionSender {
    outgoing: mpsc::Sender<(Frame, OwnedSemaphorePermit)>,
    inflight: Arc<Semaphore>,
    limits: Limits,
    link: Arc<Link>,
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
}

impl Default for Link {
    fn default() -> Self {
        Link {
            refused_at: std::sync::Mutex::new(None),
            refusals: watch::channel(0).0,
            restarts: watch::channel(0).0,
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

    async fn send_frame(&self, frame: Frame) -> Result<(), MsgrError> {
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
        let permits = permits_for(len, &self.limits);
        let permit = self
            .inflight
            .clone()
            .acquire_many_owned(permits)
            .await
            .map_err(|_| MsgrError::Closed)?;
        self.outgoing
            .send((frame, permit))
            .await
            .map_err(|_| MsgrError::Closed)
    }
}

/// Permits (KiB units, at least one) a payload holds while unacknowledged.
fn permits_for(len_bytes: u64, limits: &Limits) -> u32 {
    let total = (limits.max_inflight_bytes / 1024).max(1);
    (len_bytes.div_ceil(1024).max(1)).min(total) as u32
}

impl Session {
    /// This session's id (shared by both ends).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// A handle for sending from other tasks.
    pub fn sender(&self) -> SessionSender {
        SessionSender {
            outgoing: self.outgoing.clone(),
            inflight: self.inflight.clone(),
            limits: self.limits,
            link: self.link.clone(),
        }
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

    /// Opens a session to `addr`, reconnecting (every `retry_ms`) whenever the connection drops.
    pub async fn connect(addr: SocketAddr, id: u64, limits: Limits, retry_ms: u64) -> Session {
        let (session, parts) = Session::new(id, limits);
        let link = session.link.clone();
        tokio::spawn(run_dialer(addr, id, limits, retry_ms, parts, link));
        session
    }

    fn new(id: u64, limits: Limits) -> (Session, SessionParts) {
        let (out_tx, out_rx) = mpsc::channel(limits.max_queued_frames.max(1));
        let (in_tx, in_rx) = mpsc::channel(limits.max_queued_frames.max(1));
        let total = (limits.max_inflight_bytes / 1024).max(1) as usize;
        let inflight = Arc::new(Semaphore::new(total));
        (
            Session {
                id,
                outgoing: out_tx,
                incoming: in_rx,
                inflight,
                limits,
                link: Arc::default(),
            },
            SessionParts {
                outgoing: out_rx,
                incoming: in_tx,
                state: SessionState::default(),
            },
        )
    }
}

/// Sequence bookkeeping that outlives connections.
#[derive(Default)]
struct SessionState {
    next_seq: u64,
    last_received: u64,
    unacked: VecDeque<(Frame, OwnedSemaphorePermit)>,
    received_since_ack: u64,
}

struct SessionParts {
    outgoing: mpsc::Receiver<(Frame, OwnedSemaphorePermit)>,
    incoming: mpsc::Sender<Frame>,
    state: SessionState,
}

fn hello(id: u64, last_received: u64, incarnation: u64) -> Frame {
    let mut payload = BytesMut::with_capacity(24);
    payload.put_u64_le(id);
    payload.put_u64_le(last_received);
    payload.put_u64_le(incarnation);
    Frame::new(MSG_HELLO, payload.freeze())
}

/// A fresh random value naming one end's session state: a peer that sees it change knows the
/// other end restarted and lost its sequence numbers, so both start over instead of discarding
/// the new incarnation's frames as duplicates.
fn new_incarnation() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.finish() | 1
}

/// (session id, frames received, incarnation) from a HELLO frame.
fn parse_hello(frame: &Frame) -> Result<(u64, u64, u64), MsgrError> {
    if frame.header.msg_type != MSG_HELLO || frame.payload.len() != 24 {
        return Err(MsgrError::Io(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "expected a HELLO frame",
        )));
    }
    let mut p = &frame.payload[..];
    Ok((p.get_u64_le(), p.get_u64_le(), p.get_u64_le()))
}

async fn run_dialer(
    addr: SocketAddr,
    id: u64,
    limits: Limits,
    retry_ms: u64,
    mut parts: SessionParts,
    link: Arc<Link>,
) {
    let me = new_incarnation();
    let mut peer_incarnation = None;
    loop {
        if parts.incoming.is_closed() {
            return;
        }
        let stream = match TcpStream::connect(addr).await {
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
            conn.writer.send(hello(id, parts.state.last_received, me))?;
            let reply = conn.stream.next().await.ok_or(MsgrError::Closed)??;
            parse_hello(&reply)
        };
        match handshake.await {
            Ok((_, peer_received, incarnation)) => {
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
                tracing::warn!(%addr, error = %e, "handshake failed")
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

type NewConn = (Conn, u64);

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
    let ended = drive_inner(parts, writer, &mut task, stream, peer_received, replace).await;
    match ended {
        Ok(Ended::SessionClosed) => Ended::SessionClosed,
        Ok(other) => {
            task.abort();
            other
        }
        Err(e) => {
            task.abort();
            Ended::Lost(e)
        }
    }
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
    loop {
        tokio::select! {
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
                    sink.send(frame)?;
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
            }
            inc = stream.next() => {
                let frame = inc.ok_or(MsgrError::Closed)??;
                let ack = frame.header.ack;
                while st.unacked.front().is_some_and(|(f, _)| f.header.seq <= ack) {
                    st.unacked.pop_front();
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
                }
            }
        }
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

/// Accepts sessions on a TCP address; reconnecting peers are reattached to their session.
/// Dropping it closes the address (later connections are refused) and ends every session it
/// accepted (their peers see the connection close), as when the process is gone.
pub struct Listener {
    local: SocketAddr,
    new_sessions: mpsc::Receiver<Session>,
    accept_loop: tokio::task::AbortHandle,
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.accept_loop.abort();
    }
}

type Reattach = mpsc::Sender<NewConn>;

impl Listener {
    /// Binds `addr` (use port 0 for an ephemeral loopback port in tests).
    pub async fn bind(addr: SocketAddr, limits: Limits) -> Result<Listener, MsgrError> {
        let listener = TcpListener::bind(addr).await?;
        let local = listener.local_addr()?;
        let (tx, rx) = mpsc::channel(64);
        let known: Arc<Mutex<HashMap<u64, (u64, Reattach)>>> = Arc::default();
        let accept_loop = tokio::spawn(async move {
            loop {
                let Ok((socket, peer)) = listener.accept().await else {
                    return;
                };
                let known = known.clone();
                let tx = tx.clone();
                tokio::spawn(async move {
                    if let Err(e) = accept_one(socket, limits, known, tx).await {
                        tracing::warn!(%peer, error = %e, "rejected connection");
                    }
                });
            }
        });
        Ok(Listener {
            local,
            new_sessions: rx,
            accept_loop: accept_loop.abort_handle(),
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The next new session.
    pub async fn accept(&mut self) -> Option<Session> {
        self.new_sessions.recv().await
    }
}

async fn accept_one(
    socket: TcpStream,
    limits: Limits,
    known: Arc<Mutex<HashMap<u64, (u64, Reattach)>>>,
    new_sessions: mpsc::Sender<Session>,
) -> Result<(), MsgrError> {
    let mut conn = framed(socket, limits);
    let first = tokio::time::timeout(Duration::from_secs(10), conn.stream.next())
        .await
        .map_err(|_| MsgrError::Timeout(10_000))?
        .ok_or(MsgrError::Closed)??;
    let (id, peer_received, incarnation) = parse_hello(&first)?;
    let mut known = known.lock().await;
    if let Some((inc, reattach)) = known.get(&id) {
        if *inc == incarnation {
            if reattach.send((conn, peer_received)).await.is_ok() {
                return Ok(());
            }
            return Err(MsgrError::Closed);
        }
        // Debug, not info: an admin client opens a session of the same id for every command
        // (`cairn tell`), and an OSD's restart shows in the map anyway.
        tracing::debug!(session = id, "peer restarted: replacing its session");
    }
    let (session, parts) = Session::new(id, limits);
    let (re_tx, re_rx) = mpsc::channel(4);
    known.insert(id, (incarnation, re_tx));
    drop(known);
    tokio::spawn(run_acceptor(parts, conn, peer_received, re_rx));
    new_sessions
        .send(session)
        .await
        .map_err(|_| MsgrError::Closed)
}

async fn run_acceptor(
    mut parts: SessionParts,
    conn: Conn,
    peer_received: u64,
    mut reattach: mpsc::Receiver<NewConn>,
) {
    let me = new_incarnation();
    let mut next = Some((conn, peer_received));
    loop {
        let (conn, peer_received) = match next.take() {
            Some(c) => c,
            None => match reattach.recv().await {
                Some(c) => c,
                None => return,
            },
        };
        if conn
            .writer
            .send(hello(0, parts.state.last_received, me))
            .is_err()
        {
            conn.task.abort();
            continue;
        }
        match drive(&mut parts, conn, peer_received, Some(&mut reattach)).await {
            Ended::SessionClosed => return,
            Ended::Lost(e) => {
                tracing::debug!(error = %e, "session connection lost; waiting for reconnect")
            }
            Ended::Replaced(newer) => next = Some(*newer),
        }
    }
}
