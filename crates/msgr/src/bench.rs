//! The network layer of the bottom-up benchmark (seed 003 measures "storage network" between
//! the back-end file system and the cluster): an echo service and a load generator that move
//! the same messages an OSD and a client move, over real sessions, with no storage behind them.
//!
//! A request carries its id and how many bytes the reply must carry; the server answers every
//! request from a task of its own, as an OSD answers each op. Replies of one length cycle
//! through 64 MiB of data written at start (an OSD's replies are distinct objects' bytes, not
//! one buffer hot in the CPU's cache), each slot checksummed once as a store read comes with its
//! block checksums. The load generator keeps a fixed number of requests in flight on one
//! session, as `cairn bench` keeps its ops on one OSD session, and records every round trip's
//! latency.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use tokio::sync::oneshot;

use crate::error::MsgrError;
use crate::frame::Limits;
use crate::handshake::{Authorizer, CredentialSource, DialCredentials, StaticCredentials};
use crate::protect::WireMode;
use crate::session::{Listener, Session, SessionSender};

/// Message type of a benchmark request.
pub const MSG_BENCH_REQUEST: u16 = 0x0b00;
/// Message type of a benchmark reply.
pub const MSG_BENCH_REPLY: u16 = 0x0b01;

/// Most requests one load generator keeps in flight (explicit limit).
pub const MAX_BENCH_IN_FLIGHT: usize = 1024;
/// Most latency samples kept per run (16 Mi x 4 bytes); later round trips are counted only.
pub const MAX_LATENCY_SAMPLES: usize = 16 << 20;

/// The request's payload: its id and the bytes its reply carries.
const REQUEST_PAYLOAD_BYTES: usize = 12;

/// What one load run does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoadSpec {
    /// Requests kept in flight.
    pub in_flight: usize,
    /// Data bytes each request carries (a write's object data).
    pub request_bytes: usize,
    /// Data bytes each reply carries (a read's object data).
    pub reply_bytes: usize,
    /// How long to keep sending.
    pub duration: Duration,
}

/// What one load run measured.
#[derive(Clone, Debug, Default)]
pub struct LoadReport {
    /// Round trips completed.
    pub ops: u64,
    /// Seconds from the first request to the last reply.
    pub seconds: f64,
    /// Data bytes moved (requests' and replies' data).
    pub data_bytes: u64,
    /// Round-trip latencies in microseconds, sorted (at most [`MAX_LATENCY_SAMPLES`]).
    pub latencies_us: Vec<u32>,
}

impl LoadReport {
    /// Round trips per second.
    pub fn ops_per_second(&self) -> f64 {
        self.ops as f64 / self.seconds.max(1e-9)
    }

    /// Data MiB per second (what rados bench prints as "MB/sec").
    pub fn mb_per_second(&self) -> f64 {
        self.data_bytes as f64 / (1u64 << 20) as f64 / self.seconds.max(1e-9)
    }

    /// The latency at quantile `q` (0..=1), in milliseconds; 0 with no samples.
    pub fn latency_ms(&self, q: f64) -> f64 {
        if self.latencies_us.is_empty() {
            return 0.0;
        }
        let last = self.latencies_us.len() - 1;
        // A rounded fraction of the last index: within 0..=last.
        #[allow(clippy::cast_possible_truncation)]
        let i = ((q.clamp(0.0, 1.0) * last as f64).round() as usize).min(last);
        f64::from(self.latencies_us[i]) / 1000.0
    }
}

fn request_payload(id: u64, reply_bytes: u32) -> Bytes {
    let mut p = BytesMut::with_capacity(REQUEST_PAYLOAD_BYTES);
    p.put_u64_le(id);
    p.put_u32_le(reply_bytes);
    p.freeze()
}

fn parse_request(payload: &[u8]) -> Result<(u64, u32), MsgrError> {
    if payload.len() != REQUEST_PAYLOAD_BYTES {
        return Err(malformed("benchmark request of the wrong length"));
    }
    let mut p = payload;
    Ok((p.get_u64_le(), p.get_u32_le()))
}

fn malformed(what: &str) -> MsgrError {
    MsgrError::Io(std::io::Error::new(std::io::ErrorKind::InvalidData, what))
}

fn invalid_spec(what: String) -> MsgrError {
    MsgrError::Io(std::io::Error::new(std::io::ErrorKind::InvalidInput, what))
}

/// Bytes the replies of one length cycle through: [`REPLY_WORKING_SET_BYTES`] of them (at most
/// [`MAX_REPLY_SLOTS`] slots), as an OSD answers reads of distinct objects from memory the
/// device just wrote, not from one buffer hot in the CPU's cache.
const REPLY_WORKING_SET_BYTES: usize = 64 << 20;

/// Most slots of one [`MessageData`] (explicit limit: crcs kept per slot).
const MAX_REPLY_SLOTS: usize = 64;

/// Most reply lengths whose data the server keeps (explicit limit); a reply of yet another
/// length gets data of its own, one slot, built for it.
const MAX_REPLY_LENGTHS: usize = 16;

/// Data to send: a buffer written whole with a pattern (real memory, as an object's bytes are;
/// an allocation never written reads as the kernel's one shared page of zeros, always in cache)
/// cut into slots of one message length that messages take in turn, each with its crc32c
/// computed once (as a store read comes with its block checksums).
struct MessageData {
    buf: Bytes,
    len: usize,
    crcs: Vec<u32>,
    next: AtomicU64,
}

impl MessageData {
    /// `slots` slices of `len` bytes (at least one slot).
    fn new(len: usize, slots: usize) -> Self {
        let slots = slots.clamp(1, MAX_REPLY_SLOTS);
        let buf: Bytes = (0..len * slots)
            .map(|i| ((i as u64).wrapping_mul(2_654_435_761) >> 24).to_le_bytes()[0])
            .collect::<Vec<u8>>()
            .into();
        let crcs = (0..slots)
            .map(|k| crc_fast::crc32_iscsi(&buf[k * len..(k + 1) * len]))
            .collect();
        MessageData {
            buf,
            len,
            crcs,
            next: AtomicU64::new(0),
        }
    }

    /// Slots of `len` bytes filling the reply working set.
    fn for_replies(len: usize) -> Self {
        Self::new(len, REPLY_WORKING_SET_BYTES / len.max(1))
    }

    /// The next slot's bytes and their crc32c.
    fn next(&self) -> (Bytes, u32) {
        let turn = self.next.fetch_add(1, Ordering::Relaxed) % self.crcs.len() as u64;
        let k = usize::try_from(turn).expect("a slot index is below the slot count");
        (
            self.buf.slice(k * self.len..(k + 1) * self.len),
            self.crcs[k],
        )
    }
}

/// The server's reply data, by reply length (at most [`MAX_REPLY_LENGTHS`] kept).
#[derive(Default)]
struct ReplyData {
    by_len: Mutex<HashMap<usize, Arc<MessageData>>>,
}

impl ReplyData {
    /// Data for replies of `len` bytes, built on first use.
    fn for_len(&self, len: usize) -> Arc<MessageData> {
        let mut known = self.by_len.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(d) = known.get(&len) {
            return d.clone();
        }
        if known.len() >= MAX_REPLY_LENGTHS {
            return Arc::new(MessageData::new(len, 1));
        }
        let d = Arc::new(MessageData::for_replies(len));
        known.insert(len, d.clone());
        d
    }
}

/// Serves benchmark requests on every session `listener` accepts until it is dropped; a
/// malformed request is logged and dropped, a reply larger than the frame limit is refused.
pub async fn serve_echo(mut listener: Listener, limits: Limits) {
    let data = Arc::new(ReplyData::default());
    while let Some(session) = listener.accept().await {
        tokio::spawn(serve_session(session, data.clone(), limits));
    }
}

async fn serve_session(mut session: Session, data: Arc<ReplyData>, limits: Limits) {
    let sender = session.sender();
    while let Some(frame) = session.recv().await {
        if frame.header.msg_type != MSG_BENCH_REQUEST {
            tracing::warn!(msg_type = frame.header.msg_type, "not a benchmark request");
            continue;
        }
        let (id, reply_bytes) = match parse_request(&frame.payload) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, "malformed benchmark request");
                continue;
            }
        };
        let out = sender.clone();
        let data = data.clone();
        tokio::spawn(async move {
            let len = (reply_bytes as usize).min(limits.max_payload_bytes as usize);
            let (body, crc) = data.for_len(len).next();
            let id_payload = Bytes::copy_from_slice(&id.to_le_bytes());
            let _ = out
                .send_data(MSG_BENCH_REPLY, id_payload, body, Some(crc))
                .await;
        });
    }
}

/// Round trips awaiting their reply, by request id; the reply's data length is sent back.
type Waiting = Arc<Mutex<HashMap<u64, oneshot::Sender<usize>>>>;

/// Longest a round trip may take before the run fails (the service is gone or stuck).
const ROUND_TRIP_TIMEOUT: Duration = Duration::from_secs(10);

/// The entity a benchmark dials an authenticated echo service as.
pub fn bench_entity() -> cairn_auth::EntityName {
    cairn_auth::EntityName::Client("bench".into())
}

/// The benchmark's key, derived from a constant that both processes know: it protects
/// nothing but the echo service, and exists so that the wire modes' cost can be measured.
pub fn bench_key() -> cairn_auth::SecretKey {
    cairn_auth::SecretKey::from_bytes(blake3::derive_key(
        "cairn 2026-12 msgr bench key (public)",
        b"",
    ))
}

/// An echo service's authorizer: knows only [`bench_entity`] with [`bench_key`].
pub struct BenchAuthorizer {
    /// The weakest wire mode accepted.
    pub min_mode: WireMode,
}

impl Authorizer for BenchAuthorizer {
    fn authorize(
        &self,
        entity: &cairn_auth::EntityName,
        ticket: &[u8],
    ) -> Result<(cairn_auth::SecretKey, cairn_auth::Caps), String> {
        if *entity != bench_entity() || !ticket.is_empty() {
            return Err("only client.bench, with the bench key".into());
        }
        Ok((bench_key(), cairn_auth::Caps::default()))
    }

    fn min_mode(&self) -> WireMode {
        self.min_mode
    }
}

/// Runs `spec` against the echo service at `addr` and reports what it measured, dialing in
/// `mode` (None: unauthenticated). Fails when the spec is out of bounds or a round trip takes
/// longer than 10 s.
pub async fn run_load(
    addr: SocketAddr,
    limits: Limits,
    spec: LoadSpec,
    mode: Option<WireMode>,
) -> Result<LoadReport, MsgrError> {
    check_spec(&spec, &limits)?;
    let creds = mode.map(|mode| {
        Arc::new(StaticCredentials(DialCredentials {
            entity: bench_entity(),
            ticket: Vec::new(),
            key: bench_key(),
            mode,
        })) as Arc<dyn CredentialSource>
    });
    let mut session = Session::connect_as(
        addr,
        session_id(),
        limits,
        100,
        crate::session::Policy::Lossless,
        creds,
    )
    .await;
    let sender = session.sender();
    let waiting: Waiting = Arc::default();
    let dispatch = {
        let waiting = waiting.clone();
        tokio::spawn(async move {
            while let Some(frame) = session.recv().await {
                let Ok(id) = <[u8; 8]>::try_from(&frame.payload[..]).map(u64::from_le_bytes) else {
                    tracing::warn!("malformed benchmark reply");
                    continue;
                };
                let tx = waiting
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&id);
                if let Some(tx) = tx {
                    let _ = tx.send(frame.data().len());
                }
            }
        })
    };
    let result = drive_load(sender, waiting, spec).await;
    dispatch.abort();
    result
}

async fn drive_load(
    sender: SessionSender,
    waiting: Waiting,
    spec: LoadSpec,
) -> Result<LoadReport, MsgrError> {
    // One request buffer for every request, as `cairn bench` (and rados bench) writes one.
    let (data, crc) = MessageData::new(spec.request_bytes, 1).next();
    let next_id = Arc::new(AtomicU64::new(1));
    let started = Instant::now();
    let deadline = started + spec.duration;
    let per_worker_samples = MAX_LATENCY_SAMPLES / spec.in_flight;
    // `check_spec` bounds it by a frame's payload, whose limit is a u32.
    let reply_bytes = u32::try_from(spec.reply_bytes)
        .map_err(|_| invalid_spec(format!("a reply of {} bytes", spec.reply_bytes)))?;
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..spec.in_flight {
        let (sender, waiting, next_id, data) = (
            sender.clone(),
            waiting.clone(),
            next_id.clone(),
            data.clone(),
        );
        workers.spawn(async move {
            let mut ops = 0u64;
            let mut samples = Vec::new();
            while Instant::now() < deadline {
                let id = next_id.fetch_add(1, Ordering::Relaxed);
                let (tx, rx) = oneshot::channel();
                waiting
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(id, tx);
                let sent = Instant::now();
                let payload = request_payload(id, reply_bytes);
                sender
                    .send_data(MSG_BENCH_REQUEST, payload, data.clone(), Some(crc))
                    .await?;
                let reply_len = match tokio::time::timeout(ROUND_TRIP_TIMEOUT, rx).await {
                    Ok(Ok(len)) => len,
                    Ok(Err(_)) => return Err(MsgrError::Closed),
                    Err(_) => return Err(MsgrError::timed_out(ROUND_TRIP_TIMEOUT)),
                };
                if reply_len != spec.reply_bytes {
                    return Err(malformed(
                        "a benchmark reply carried the wrong number of bytes",
                    ));
                }
                ops += 1;
                if samples.len() < per_worker_samples {
                    let us = u32::try_from(sent.elapsed().as_micros()).unwrap_or(u32::MAX);
                    samples.push(us);
                }
            }
            Ok::<_, MsgrError>((ops, samples))
        });
    }
    let mut report = LoadReport::default();
    while let Some(done) = workers.join_next().await {
        let (ops, samples) = done.map_err(|e| MsgrError::Io(std::io::Error::other(e)))??;
        report.ops += ops;
        report.latencies_us.extend(samples);
    }
    report.seconds = started.elapsed().as_secs_f64();
    report.data_bytes = report.ops * (spec.request_bytes + spec.reply_bytes) as u64;
    report.latencies_us.sort_unstable();
    Ok(report)
}

fn check_spec(spec: &LoadSpec, limits: &Limits) -> Result<(), MsgrError> {
    let frame_room = (limits.max_payload_bytes as usize).saturating_sub(REQUEST_PAYLOAD_BYTES);
    if spec.in_flight == 0 || spec.in_flight > MAX_BENCH_IN_FLIGHT {
        return Err(invalid_spec(format!(
            "requests in flight must be 1 to {MAX_BENCH_IN_FLIGHT}, not {}",
            spec.in_flight
        )));
    }
    if spec.request_bytes > frame_room || spec.reply_bytes > frame_room {
        return Err(MsgrError::TooLarge {
            len_bytes: spec.request_bytes.max(spec.reply_bytes) as u64,
            limit_bytes: frame_room as u64,
        });
    }
    Ok(())
}

fn session_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    (u64::from(std::process::id()) << 32) | NEXT.fetch_add(1, Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn echo_server() -> (SocketAddr, tokio::task::JoinHandle<()>) {
        let limits = Limits::default();
        let listener = Listener::bind("127.0.0.1:0".parse().unwrap(), limits)
            .await
            .unwrap();
        let addr = listener.local_addr();
        (addr, tokio::spawn(serve_echo(listener, limits)))
    }

    fn spec(request_bytes: usize, reply_bytes: usize) -> LoadSpec {
        LoadSpec {
            in_flight: 4,
            request_bytes,
            reply_bytes,
            duration: Duration::from_millis(200),
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn replies_carry_the_bytes_asked_for_and_every_round_trip_is_timed() {
        let (addr, server) = echo_server().await;
        for (req, rep) in [(0, 4096), (65536, 0), (1 << 20, 1 << 20)] {
            let r = run_load(addr, Limits::default(), spec(req, rep), None)
                .await
                .unwrap();
            assert!(r.ops > 0);
            assert_eq!(r.data_bytes, r.ops * (req + rep) as u64);
            assert_eq!(r.latencies_us.len() as u64, r.ops);
            assert!(r.latencies_us.windows(2).all(|w| w[0] <= w[1]));
            assert!(r.latency_ms(0.5) <= r.latency_ms(0.99));
            assert!(r.ops_per_second() > 0.0);
        }
        server.abort();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn reply_data_cycles_through_distinct_slots_each_with_the_checksum_of_its_bytes() {
        // Computed once per slot and reused: a wrong one would make every reply from that slot
        // fail the client's checksum check.
        let data = MessageData::new(4096, 3);
        let mut seen = Vec::new();
        for _ in 0..6 {
            let (bytes, crc) = data.next();
            assert_eq!(bytes.len(), 4096);
            assert_eq!(crc, crc_fast::crc32_iscsi(&bytes));
            seen.push(bytes.as_ptr() as usize);
        }
        assert_eq!(seen[..3], seen[3..], "slots are taken in turn");
        assert_eq!(
            seen.iter().collect::<std::collections::HashSet<_>>().len(),
            3
        );
        assert!(data.next().0.iter().any(|&b| b != 0), "written, not zeros");
        let replies = ReplyData::default();
        assert_eq!(
            replies.for_len(1 << 20).crcs.len(),
            REPLY_WORKING_SET_BYTES >> 20
        );
        assert_eq!(replies.for_len(4096).crcs.len(), MAX_REPLY_SLOTS);
        assert_eq!(replies.for_len(0).next().1, crc_fast::crc32_iscsi(&[]));
        for len in 1..=MAX_REPLY_LENGTHS {
            replies.for_len(len);
        }
        assert_eq!(replies.by_len.lock().unwrap().len(), MAX_REPLY_LENGTHS);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn specs_out_of_bounds_are_refused_before_connecting() {
        // Nothing listens here: a refused spec must fail before any connection is tried.
        let nowhere: SocketAddr = "127.0.0.1:9".parse().unwrap();
        let limits = Limits::default();
        let mut none = spec(0, 0);
        none.in_flight = 0;
        assert!(run_load(nowhere, limits, none, None).await.is_err());
        let mut many = spec(0, 0);
        many.in_flight = MAX_BENCH_IN_FLIGHT + 1;
        assert!(run_load(nowhere, limits, many, None).await.is_err());
        let big = limits.max_payload_bytes as usize;
        assert!(matches!(
            run_load(nowhere, limits, spec(big, 0), None).await,
            Err(MsgrError::TooLarge { .. })
        ));
        // Limits too small for even the request's own payload refuse any data, never panic.
        let tiny = Limits {
            max_payload_bytes: 4,
            ..limits
        };
        assert!(matches!(
            run_load(nowhere, tiny, spec(1, 0), None).await,
            Err(MsgrError::TooLarge { .. })
        ));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn malformed_requests_are_dropped_and_the_server_keeps_serving() {
        let (addr, server) = echo_server().await;
        let limits = Limits::default();
        let mut s = Session::connect(addr, 77, limits, 50).await;
        s.send(MSG_BENCH_REQUEST, Bytes::from_static(b"short"))
            .await
            .unwrap();
        s.send(0x0123, request_payload(1, 16)).await.unwrap();
        s.send(MSG_BENCH_REQUEST, request_payload(2, 16))
            .await
            .unwrap();
        let reply = s.recv_timeout(5000).await.unwrap();
        assert_eq!(reply.header.msg_type, MSG_BENCH_REPLY);
        assert_eq!(&reply.payload[..], &2u64.to_le_bytes());
        assert_eq!(reply.data().len(), 16);
        let r = run_load(addr, limits, spec(0, 512), None).await.unwrap();
        assert!(r.ops > 0);
        server.abort();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_authenticated_echo_service_serves_each_wire_mode_and_refuses_none() {
        for floor in [WireMode::Mac, WireMode::Secure] {
            let authz = Arc::new(BenchAuthorizer { min_mode: floor });
            let listener = Listener::bind_with_auth(
                "127.0.0.1:0".parse().unwrap(),
                Limits::default(),
                Some(authz),
            )
            .await
            .unwrap();
            let addr = listener.local_addr();
            let server = tokio::spawn(serve_echo(listener, Limits::default()));
            for mode in [WireMode::Mac, WireMode::Secure] {
                let r = run_load(addr, Limits::default(), spec(70_000, 70_000), Some(mode))
                    .await
                    .unwrap();
                assert!(r.ops > 0, "{floor} {mode}");
            }
            let unauthenticated = run_load(addr, Limits::default(), spec(16, 16), None).await;
            assert!(
                unauthenticated.is_err(),
                "an unauthenticated dialer is refused"
            );
            server.abort();
        }
    }
}
