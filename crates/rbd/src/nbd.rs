//! An NBD server exporting the images of one pool (the NBD protocol's fixed newstyle
//! negotiation, then transmission with simple replies): the export name is the image's name,
//! or `IMAGE@SNAPSHOT` for a snapshot, exported read-only. Reads, writes, flushes, trims and
//! write-zeroes; many requests in flight per connection, any number of connections (up to a
//! limit). Every write is durable on every copy before it is answered, so a flush has nothing
//! left to wait for, FUA is honoured by every write, and several connections may share an
//! image (`CAN_MULTI_CONN`): they share one handle, which holds the image's exclusive lock
//! from the first connection's start until the last one's requests have all ended, taken
//! through a client instance of the image's own (a new holder fences that instance alone).
//! An image another client holds is refused in the handshake (`NBD_REP_ERR_POLICY`).
//!
//! Hostile or broken input never panics the server, nor makes it hold unbounded memory: a
//! bad magic, a write or option past its limit, an unknown handshake flag, a handshake past
//! [`HANDSHAKE_TIMEOUT`] or a reply unread past [`REPLY_TIMEOUT`] closes that connection; a
//! request out of the image's range, a read past the limit or an unknown request flag is
//! answered with an error, as the protocol says; the bytes requests hold (payloads, and the
//! zeros a trim or write-zeroes writes) stay within [`MAX_CONNECTION_BYTES_IN_FLIGHT`] per
//! connection and [`MAX_BYTES_IN_FLIGHT`] over all of them, so one slow reader cannot take the
//! whole server's share; a name that is no image costs no writer's session with the monitor,
//! and a handshake may be refused an image only [`MAX_REFUSED_OPENS`] times.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use cairn_client::{Client, ClientError};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader, BufWriter};
use tokio::sync::{mpsc, Mutex, OwnedSemaphorePermit, Semaphore};

use crate::error::RbdError;
use crate::image::Image;

/// Largest read or write one request may carry (the size the protocol asks servers to take).
pub const MAX_REQUEST_BYTES: u32 = 32 << 20;
/// Requests one connection may have in flight; the next waits to be read.
pub const MAX_IN_FLIGHT: usize = 64;
/// Largest option payload in the handshake.
pub const MAX_OPTION_BYTES: u32 = 4096;
/// Connections served at once; more wait to be accepted.
pub const MAX_CONNECTIONS: usize = 64;
/// Bytes the whole server's requests hold at once, over every connection (read and write
/// payloads, the zeros trims and write-zeroes write): a request past it waits (before its
/// payload is read) for earlier replies to be sent.
pub const MAX_BYTES_IN_FLIGHT: u32 = 256 << 20;
/// Bytes one connection's requests hold at once (as [`MAX_BYTES_IN_FLIGHT`] counts them): a
/// connection whose client reads its replies slowly waits on its own share, not on every
/// other connection's.
pub const MAX_CONNECTION_BYTES_IN_FLIGHT: u32 = 64 << 20;
/// Times one handshake may be refused an image another client holds (each refusal costs a
/// writer's session with the monitor); past it, the connection is closed.
pub const MAX_REFUSED_OPENS: usize = 8;
// A request's bytes must fit its connection's share, and that share the server's, or the
// request would wait for them for ever.
const _: () = assert!(
    MAX_REQUEST_BYTES <= MAX_CONNECTION_BYTES_IN_FLIGHT
        && MAX_CONNECTION_BYTES_IN_FLIGHT <= MAX_BYTES_IN_FLIGHT
);
/// Longest a client may take over its whole handshake; past it, the connection is closed.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(60);
/// Longest one reply may wait for the client to read it; past it, the connection is closed
/// (a client that stops reading would otherwise hold its requests' memory for good).
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(60);
/// Pieces of a write-zeroes request without holes written at once.
const ZERO_WRITES_IN_FLIGHT: usize = 8;
/// Longest a write's payload may take to arrive once its header has; past it, the
/// connection is closed (the payload's share of the server's bytes is held meanwhile).
pub const PAYLOAD_TIMEOUT: Duration = Duration::from_secs(60);

/// How long a server waits on a stalled client before it closes the connection.
#[derive(Clone, Copy, Debug)]
pub struct Timeouts {
    /// The whole handshake ([`HANDSHAKE_TIMEOUT`]).
    pub handshake: Duration,
    /// A write's payload, once its header has arrived ([`PAYLOAD_TIMEOUT`]).
    pub payload: Duration,
    /// One reply, waiting for the client to read it ([`REPLY_TIMEOUT`]).
    pub reply: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            handshake: HANDSHAKE_TIMEOUT,
            payload: PAYLOAD_TIMEOUT,
            reply: REPLY_TIMEOUT,
        }
    }
}
/// Bytes of zeros written at once for a write-zeroes request that must leave no hole.
const ZERO_WRITE_BYTES: u64 = 1 << 20;

const NBD_MAGIC: u64 = 0x4e42_444d_4147_4943;
const IHAVEOPT: u64 = 0x4948_4156_454f_5054;
const OPTION_REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;
const REQUEST_MAGIC: u32 = 0x2560_9513;
const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;

const FLAG_FIXED_NEWSTYLE: u16 = 1;
const FLAG_NO_ZEROES: u16 = 2;
const CLIENT_FLAGS_KNOWN: u32 = 3;

const OPT_EXPORT_NAME: u32 = 1;
const OPT_ABORT: u32 = 2;
const OPT_LIST: u32 = 3;
const OPT_INFO: u32 = 6;
const OPT_GO: u32 = 7;

const REP_ACK: u32 = 1;
const REP_SERVER: u32 = 2;
const REP_INFO: u32 = 3;
const REP_ERR_UNSUP: u32 = 0x8000_0001;
const REP_ERR_POLICY: u32 = 0x8000_0002;
const REP_ERR_INVALID: u32 = 0x8000_0003;
const REP_ERR_UNKNOWN: u32 = 0x8000_0006;

const INFO_EXPORT: u16 = 0;
const INFO_BLOCK_SIZE: u16 = 3;

const TFLAG_HAS_FLAGS: u16 = 1;
const TFLAG_READ_ONLY: u16 = 2;
const TFLAG_SEND_FLUSH: u16 = 4;
const TFLAG_SEND_FUA: u16 = 8;
const TFLAG_SEND_TRIM: u16 = 32;
const TFLAG_SEND_WRITE_ZEROES: u16 = 64;
const TFLAG_CAN_MULTI_CONN: u16 = 256;
/// What every export offers.
const TRANSMISSION_FLAGS: u16 = TFLAG_HAS_FLAGS
    | TFLAG_SEND_FLUSH
    | TFLAG_SEND_FUA
    | TFLAG_SEND_TRIM
    | TFLAG_SEND_WRITE_ZEROES
    | TFLAG_CAN_MULTI_CONN;

const CMD_READ: u16 = 0;
const CMD_WRITE: u16 = 1;
const CMD_DISC: u16 = 2;
const CMD_FLUSH: u16 = 3;
const CMD_TRIM: u16 = 4;
const CMD_WRITE_ZEROES: u16 = 6;

const CMD_FLAG_FUA: u16 = 1;
const CMD_FLAG_NO_HOLE: u16 = 2;

const EPERM: u32 = 1;
const EIO: u32 = 5;
const EINVAL: u32 = 22;
const ENOSPC: u32 = 28;

/// Why a connection ended before its client disconnected cleanly.
#[derive(Debug, thiserror::Error)]
pub enum NbdError {
    /// The socket failed or closed.
    #[error("connection: {0}")]
    Io(#[from] std::io::Error),
    /// The client broke the protocol; the connection is closed.
    #[error("protocol: {0}")]
    Protocol(String),
    /// The image could not be opened.
    #[error(transparent)]
    Image(#[from] RbdError),
}

/// Makes a client instance of the cluster: each image an export locks for writing gets one
/// of its own, so that whoever takes that image's lock over fences that instance alone, never
/// the server's other exports.
pub type ClientMaker = Arc<
    dyn Fn() -> Pin<Box<dyn Future<Output = Result<Client, ClientError>> + Send>> + Send + Sync,
>;

/// A [`ClientMaker`] connecting to the monitor at `mon` as `auth` (none: the cluster does
/// not authenticate), each client with an id of its own.
pub fn client_maker(
    mon: std::net::SocketAddr,
    auth: Option<cairn_client::tickets::ClientAuth>,
) -> ClientMaker {
    Arc::new(move || {
        let auth = auth.clone();
        Box::pin(
            async move { Client::connect_as(mon, cairn_client::random_client_id(), auth).await },
        )
    })
}

/// One open export.
struct Opened {
    image: Arc<Image>,
    users: usize,
    requests: Option<tokio::task::JoinHandle<()>>,
    /// Which opening of the export this is: connections of an opening replaced (its lock
    /// lost) end without touching the one that replaced it.
    generation: u64,
}

/// The state of one export name: its open handle, if any. Its lock is held while the export
/// opens (which may wait a lease for another holder), so only that name's connections wait.
#[derive(Default)]
struct Slot {
    opened: Mutex<Option<Opened>>,
}

/// A connection's hold on an export.
pub struct Attached {
    image: Arc<Image>,
    generation: u64,
}

/// The images one server exports, and the handles its connections share.
pub struct Exports {
    client: Arc<Client>,
    writer_client: ClientMaker,
    pool: String,
    lease: Duration,
    /// Export names by their state; a name's slot is dropped once nothing uses it.
    open: std::sync::Mutex<HashMap<String, Arc<Slot>>>,
    next_generation: AtomicU64,
    /// Bytes of request and reply payloads held, over every connection.
    payload_bytes: Arc<Semaphore>,
    /// How long a stalled client is waited for.
    timeouts: Timeouts,
}

impl Exports {
    /// Exports of the images of `pool`, read through `client`; a writer locks its image, with
    /// `lease`, through a client `writer_client` makes for it.
    pub fn new(
        client: Arc<Client>,
        writer_client: ClientMaker,
        pool: String,
        lease: Duration,
    ) -> Arc<Exports> {
        Self::with_timeouts(client, writer_client, pool, lease, Timeouts::default())
    }

    /// [`Exports::new`] waiting on stalled clients as `timeouts` say.
    pub fn with_timeouts(
        client: Arc<Client>,
        writer_client: ClientMaker,
        pool: String,
        lease: Duration,
        timeouts: Timeouts,
    ) -> Arc<Exports> {
        Arc::new(Exports {
            client,
            writer_client,
            pool,
            lease,
            open: std::sync::Mutex::new(HashMap::new()),
            next_generation: AtomicU64::new(1),
            payload_bytes: Arc::new(Semaphore::new(MAX_BYTES_IN_FLIGHT as usize)),
            timeouts,
        })
    }

    fn slots(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Slot>>> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Opens export `name` for a connection: the shared handle, opened (and for an image,
    /// locked) by the first connection, or again when the lock of the one open was lost.
    async fn attach(&self, name: &str) -> Result<Attached, RbdError> {
        let slot = self.slots().entry(name.to_string()).or_default().clone();
        let attached = self.attach_to(&slot, name).await;
        if attached.is_err() {
            self.forget_if_unused(name, slot);
        }
        attached
    }

    async fn attach_to(&self, slot: &Slot, name: &str) -> Result<Attached, RbdError> {
        let mut opened = slot.opened.lock().await;
        if let Some(o) = opened.as_mut() {
            if !lock_lost(&o.image) {
                o.users += 1;
                return Ok(Attached {
                    image: o.image.clone(),
                    generation: o.generation,
                });
            }
            // Its lock was taken over: that handle only fails now. Its connections keep it
            // until they end; this one takes the lock again.
            if let Some(task) = opened.take().and_then(|o| o.requests) {
                task.abort();
            }
            tracing::warn!(export = name, "the export's lock was lost: taking it again");
        }
        let (image, writer) = match name.split_once('@') {
            Some((image, snap)) => (
                Image::open_snapshot(self.client.clone(), &self.pool, image, snap).await?,
                false,
            ),
            None => {
                // A name that is no image is refused through the shared client, before a
                // writer's client (a session of its own with the monitor) is made for it.
                Image::check_exists(&self.client, &self.pool, name).await?;
                let client = Arc::new((self.writer_client)().await?);
                let image = Image::open_exclusive(client, &self.pool, name, self.lease).await?;
                (image, true)
            }
        };
        let image = Arc::new(image);
        // A mapped image's writer takes snapshots asked of it (`cairn rbd snap create`).
        let requests = writer.then(|| tokio::spawn(image.clone().serve_requests()));
        let generation = self.next_generation.fetch_add(1, Ordering::Relaxed);
        *opened = Some(Opened {
            image: image.clone(),
            users: 1,
            requests,
            generation,
        });
        Ok(Attached { image, generation })
    }

    /// A connection to export `name` ended (every request it read answered or abandoned):
    /// the last one of the handle's opening closes it, releasing its lock.
    async fn detach(&self, name: &str, attached: &Attached) {
        let Some(slot) = self.slots().get(name).cloned() else {
            return;
        };
        {
            let mut opened = slot.opened.lock().await;
            let last = match opened.as_mut() {
                Some(o) if o.generation == attached.generation => {
                    o.users -= 1;
                    o.users == 0
                }
                _ => false,
            };
            if let Some(o) = last.then(|| opened.take()).flatten() {
                if let Some(task) = o.requests {
                    task.abort();
                    let _ = task.await;
                }
                if let Err(e) = o.image.close().await {
                    tracing::warn!(export = name, error = %e, "releasing an image's lock");
                }
            }
        }
        self.forget_if_unused(name, slot);
    }

    /// Lets go of the caller's hold on `name`'s slot, and drops the slot when no handle is
    /// open in it and nobody else holds it (holds are taken and let go of under the map's
    /// lock, so of two callers letting go at once the second sees the first's gone).
    fn forget_if_unused(&self, name: &str, slot: Arc<Slot>) {
        let mut slots = self.slots();
        drop(slot);
        let unused = slots.get(name).is_some_and(|s| {
            Arc::strong_count(s) == 1 && s.opened.try_lock().is_ok_and(|o| o.is_none())
        });
        if unused {
            slots.remove(name);
        }
    }

    /// Size and transmission flags of export `name`, without opening it for writing (an
    /// image's export, once attached, is its writer).
    async fn describe(&self, name: &str) -> Result<(u64, u16), RbdError> {
        let client = self.client.clone();
        match name.split_once('@') {
            Some((image, snap)) => {
                let snapshot = Image::open_snapshot(client, &self.pool, image, snap).await?;
                Ok((snapshot.size(), flags_of(&snapshot)))
            }
            None => {
                let image = Image::open_read_only(client, &self.pool, name).await?;
                Ok((image.size(), TRANSMISSION_FLAGS))
            }
        }
    }
}

/// Whether `image` is a writer whose lock was lost for good: its lease ended, or its client
/// was fenced by whoever took the lock over (its renewal has yet to find out).
fn lock_lost(image: &Image) -> bool {
    image.lock().is_ok_and(|lock| lock.is_lost())
        || (!image.read_only() && image.client.is_fenced())
}

/// The transmission flags of an export: a snapshot is read-only.
fn flags_of(image: &Image) -> u16 {
    match image.read_only() {
        true => TRANSMISSION_FLAGS | TFLAG_READ_ONLY,
        false => TRANSMISSION_FLAGS,
    }
}

/// Serves one connection: the handshake, then requests until the client disconnects.
pub async fn serve_connection<S>(stream: S, exports: Arc<Exports>) -> Result<(), NbdError>
where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let (r, w) = tokio::io::split(stream);
    let timeouts = exports.timeouts;
    let until = tokio::time::Instant::now() + timeouts.handshake;
    let mut r = Deadline::until(BufReader::new(r), until);
    let mut w = Deadline::until(BufWriter::new(w), until);
    let Some((name, attached)) = negotiate(&mut r, &mut w, &exports).await? else {
        return Ok(());
    };
    r.sleep = None;
    w.sleep = None;
    let budget = Budget {
        server_bytes: exports.payload_bytes.clone(),
        connection_bytes: Arc::new(Semaphore::new(MAX_CONNECTION_BYTES_IN_FLIGHT as usize)),
        timeouts,
    };
    let served = transmit(r, w, attached.image.clone(), budget).await;
    exports.detach(&name, &attached).await;
    served
}

/// A reader or writer whose reads and writes fail once its sleep has ended: the handshake's
/// deadline, whichever way the client stalls it (sending nothing, or reading no reply).
struct Deadline<T> {
    inner: T,
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<T> Deadline<T> {
    fn until(inner: T, until: tokio::time::Instant) -> Deadline<T> {
        Deadline {
            inner,
            sleep: Some(Box::pin(tokio::time::sleep_until(until))),
        }
    }

    /// The deadline's error once it has passed (and a wake-up registered for it otherwise).
    fn passed(&mut self, cx: &mut std::task::Context<'_>) -> Option<std::io::Error> {
        let sleep = self.sleep.as_mut()?;
        sleep.as_mut().poll(cx).is_ready().then(|| {
            std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the handshake took longer than its deadline",
            )
        })
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for Deadline<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        if let Some(e) = self.passed(cx) {
            return std::task::Poll::Ready(Err(e));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<W: AsyncWrite + Unpin> AsyncWrite for Deadline<W> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        if let Some(e) = self.passed(cx) {
            return std::task::Poll::Ready(Err(e));
        }
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        if let Some(e) = self.passed(cx) {
            return std::task::Poll::Ready(Err(e));
        }
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// The fixed newstyle handshake; the export the client chose (attached), or None when it
/// aborted.
async fn negotiate<R, W>(
    r: &mut R,
    w: &mut W,
    exports: &Exports,
) -> Result<Option<(String, Attached)>, NbdError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    w.write_u64(NBD_MAGIC).await?;
    w.write_u64(IHAVEOPT).await?;
    w.write_u16(FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES).await?;
    w.flush().await?;
    let flags = r.read_u32().await?;
    if flags & !CLIENT_FLAGS_KNOWN != 0 || flags & u32::from(FLAG_FIXED_NEWSTYLE) == 0 {
        return Err(NbdError::Protocol(format!("client flags {flags:#x}")));
    }
    let no_zeroes = flags & u32::from(FLAG_NO_ZEROES) != 0;
    let mut refused_opens = 0usize;
    loop {
        if r.read_u64().await? != IHAVEOPT {
            return Err(NbdError::Protocol("option without IHAVEOPT".into()));
        }
        let option = r.read_u32().await?;
        let len = r.read_u32().await?;
        if len > MAX_OPTION_BYTES {
            return Err(NbdError::Protocol(format!("option of {len} bytes")));
        }
        let mut data = vec![0u8; len as usize];
        r.read_exact(&mut data).await?;
        match option {
            OPT_EXPORT_NAME => {
                let name = String::from_utf8_lossy(&data).into_owned();
                // The protocol has no error reply here: closing is the answer.
                let attached = exports.attach(&name).await?;
                let sent = async {
                    w.write_u64(attached.image.size()).await?;
                    w.write_u16(flags_of(&attached.image)).await?;
                    if !no_zeroes {
                        w.write_all(&[0u8; 124]).await?;
                    }
                    w.flush().await
                };
                if let Err(e) = sent.await {
                    exports.detach(&name, &attached).await;
                    return Err(e.into());
                }
                return Ok(Some((name, attached)));
            }
            OPT_ABORT => {
                option_reply(w, option, REP_ACK, &[]).await?;
                return Ok(None);
            }
            OPT_LIST if !data.is_empty() => {
                option_reply(w, option, REP_ERR_INVALID, b"LIST takes no data").await?;
            }
            OPT_LIST => {
                let names = Image::list(&exports.client, &exports.pool).await?;
                for name in names {
                    let mut body = wire_len(name.len())?.to_be_bytes().to_vec();
                    body.extend_from_slice(name.as_bytes());
                    option_reply(w, option, REP_SERVER, &body).await?;
                }
                option_reply(w, option, REP_ACK, &[]).await?;
            }
            OPT_INFO | OPT_GO => {
                let Some(name) = info_request_name(&data) else {
                    option_reply(w, option, REP_ERR_INVALID, b"malformed INFO/GO").await?;
                    continue;
                };
                let described = match option {
                    OPT_GO => exports
                        .attach(&name)
                        .await
                        .map(|a| (a.image.size(), flags_of(&a.image), Some(a))),
                    _ => exports.describe(&name).await.map(|(sz, f)| (sz, f, None)),
                };
                let (size, flags, attached) = match described {
                    Ok(d) => d,
                    Err(RbdError::NotFound(_)) | Err(RbdError::Invalid(_)) => {
                        let why = format!("no image {name:?} in pool {}", exports.pool);
                        option_reply(w, option, REP_ERR_UNKNOWN, why.as_bytes()).await?;
                        continue;
                    }
                    Err(e @ RbdError::Locked(_)) => {
                        option_reply(w, option, REP_ERR_POLICY, e.to_string().as_bytes()).await?;
                        refused_opens += 1;
                        if refused_opens >= MAX_REFUSED_OPENS {
                            return Err(NbdError::Protocol(format!(
                                "{refused_opens} exports refused in one handshake"
                            )));
                        }
                        continue;
                    }
                    Err(e) => return Err(e.into()),
                };
                let replied = async {
                    let mut export = INFO_EXPORT.to_be_bytes().to_vec();
                    export.extend_from_slice(&size.to_be_bytes());
                    export.extend_from_slice(&flags.to_be_bytes());
                    option_reply(w, option, REP_INFO, &export).await?;
                    let mut sizes = INFO_BLOCK_SIZE.to_be_bytes().to_vec();
                    for v in [1u32, 4096, MAX_REQUEST_BYTES] {
                        sizes.extend_from_slice(&v.to_be_bytes());
                    }
                    option_reply(w, option, REP_INFO, &sizes).await?;
                    option_reply(w, option, REP_ACK, &[]).await
                };
                let replied = replied.await;
                match (attached, replied) {
                    (Some(attached), Ok(())) => return Ok(Some((name, attached))),
                    (Some(attached), Err(e)) => {
                        exports.detach(&name, &attached).await;
                        return Err(e);
                    }
                    (None, r) => r?,
                }
            }
            _ => option_reply(w, option, REP_ERR_UNSUP, b"not supported").await?,
        }
    }
}

/// The export name of an INFO or GO request (`u32` name length, name, `u16` count of
/// information requests, `u16` each), or None when it is malformed.
fn info_request_name(data: &[u8]) -> Option<String> {
    let name_len = u32::from_be_bytes(data.get(..4)?.try_into().ok()?) as usize;
    let name = data.get(4..4usize.checked_add(name_len)?)?;
    let rest = data.get(4 + name_len..)?;
    let count = u16::from_be_bytes(rest.get(..2)?.try_into().ok()?) as usize;
    (rest.len() == 2 + 2 * count).then(|| String::from_utf8_lossy(name).into_owned())
}

/// A length as NBD's 32-bit field; past it, the reply cannot be framed.
fn wire_len(len: usize) -> Result<u32, NbdError> {
    u32::try_from(len)
        .map_err(|_| NbdError::Protocol(format!("a {len}-byte reply cannot be framed")))
}

async fn option_reply<W: AsyncWrite + Unpin>(
    w: &mut W,
    option: u32,
    kind: u32,
    data: &[u8],
) -> Result<(), NbdError> {
    w.write_u64(OPTION_REPLY_MAGIC).await?;
    w.write_u32(option).await?;
    w.write_u32(kind).await?;
    w.write_u32(wire_len(data.len())?).await?;
    w.write_all(data).await?;
    w.flush().await?;
    Ok(())
}

/// One request's answer: its cookie, error (0: none) and, for a read, the data; with the
/// request's hold on its connection's slots and the server's payload bytes, released once
/// the reply is sent (or can no longer be).
struct Reply {
    cookie: u64,
    error: u32,
    data: Vec<u8>,
    _holds: Holds,
}

/// What a request holds until its reply is sent.
struct Holds {
    _slot: OwnedSemaphorePermit,
    _bytes: Option<BytesHeld>,
}

/// A request's bytes, held in its connection's share and in the server's.
struct BytesHeld {
    _connection: OwnedSemaphorePermit,
    _server: OwnedSemaphorePermit,
}

/// Reads requests and runs each in a task of its own (at most [`MAX_IN_FLIGHT`] at once, and
/// their payloads within the server's [`MAX_BYTES_IN_FLIGHT`]); one writer sends the replies
/// as they complete. Ends at the client's disconnect request, once every request before it is
/// answered, or when the connection fails — and then only once every request it started has
/// ended, so that none of them reaches the image after the connection lets go of it.
async fn transmit<R, W>(
    mut r: R,
    mut w: W,
    image: Arc<Image>,
    budget: Budget,
) -> Result<(), NbdError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (tx, mut rx) = mpsc::channel::<Reply>(MAX_IN_FLIGHT);
    let mut writer = tokio::spawn(async move {
        while let Some(reply) = rx.recv().await {
            let sent = async {
                w.write_u32(SIMPLE_REPLY_MAGIC).await?;
                w.write_u32(reply.error).await?;
                w.write_u64(reply.cookie).await?;
                w.write_all(&reply.data).await?;
                if rx.is_empty() {
                    w.flush().await?;
                }
                Ok::<(), std::io::Error>(())
            };
            match tokio::time::timeout(budget.timeouts.reply, sent).await {
                Ok(sent) => sent?,
                Err(_) => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!("the client read no reply for {:?}", budget.timeouts.reply),
                    ))
                }
            }
        }
        w.flush().await?;
        Ok::<(), std::io::Error>(())
    });
    let slots = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
    let mut written = None;
    let outcome = loop {
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => slot.map_err(std::io::Error::other)?,
            done = &mut writer => {
                written = Some(done);
                break Ok(());
            }
        };
        let request = tokio::select! {
            request = read_request(&mut r, &budget) => request,
            done = &mut writer => {
                written = Some(done);
                break Ok(());
            }
        };
        let (request, bytes) = match request {
            Ok(Some(req)) => req,
            Ok(None) => break Ok(()),
            Err(e) => break Err(e),
        };
        let (tx, image) = (tx.clone(), image.clone());
        tokio::spawn(async move {
            let reply = run(&image, request).await;
            let _ = tx
                .send(Reply {
                    cookie: reply.cookie,
                    error: reply.error,
                    data: reply.data,
                    _holds: Holds {
                        _slot: slot,
                        _bytes: bytes,
                    },
                })
                .await;
        });
    };
    drop(tx);
    let written = match written {
        Some(done) => done,
        None => writer.await,
    };
    // Every request started has ended (its reply sent, or dropped with the writer) once all
    // the slots are back.
    let every_slot = u32::try_from(MAX_IN_FLIGHT).expect("the in-flight limit fits a u32");
    let _all = slots.acquire_many(every_slot).await;
    let written = written.map_err(std::io::Error::other)?;
    outcome.and(written.map_err(NbdError::from))
}

/// What a connection's requests draw on: its share of bytes, the server's, and how long a
/// stalled client is waited for.
#[derive(Clone)]
struct Budget {
    server_bytes: Arc<Semaphore>,
    connection_bytes: Arc<Semaphore>,
    timeouts: Timeouts,
}

impl Budget {
    /// Holds `n` bytes, in the connection's share first and then in the server's: a
    /// connection waiting on its own share holds nothing of the server's meanwhile.
    async fn hold(&self, n: u32) -> Result<BytesHeld, NbdError> {
        let closed = |e: tokio::sync::AcquireError| NbdError::from(std::io::Error::other(e));
        let connection = self
            .connection_bytes
            .clone()
            .acquire_many_owned(n)
            .await
            .map_err(closed)?;
        let server = self
            .server_bytes
            .clone()
            .acquire_many_owned(n)
            .await
            .map_err(closed)?;
        Ok(BytesHeld {
            _connection: connection,
            _server: server,
        })
    }
}

/// Bytes the server holds for a request of `kind` over `len` bytes while it runs: a read's or
/// write's payload, or the zeros a trim or write-zeroes writes over part of an object (at most
/// one object, or [`ZERO_WRITES_IN_FLIGHT`] pieces of [`ZERO_WRITE_BYTES`] and their copies).
fn held_bytes(kind: u16, len: u32) -> u32 {
    match kind {
        CMD_READ | CMD_WRITE if len <= MAX_REQUEST_BYTES => len,
        CMD_TRIM | CMD_WRITE_ZEROES => len.min(MAX_REQUEST_BYTES),
        _ => 0,
    }
}

/// One request as read.
struct Request {
    kind: u16,
    flags: u16,
    cookie: u64,
    offset: u64,
    len: u32,
    data: Vec<u8>,
}

/// One request's answer, before it is framed.
struct Answer {
    cookie: u64,
    error: u32,
    data: Vec<u8>,
}

/// The next request with its hold on the bytes it needs (taken before a write's payload is
/// read), or None at a disconnect request.
async fn read_request<R: AsyncRead + Unpin>(
    r: &mut R,
    budget: &Budget,
) -> Result<Option<(Request, Option<BytesHeld>)>, NbdError> {
    let magic = r.read_u32().await?;
    if magic != REQUEST_MAGIC {
        return Err(NbdError::Protocol(format!("request magic {magic:#x}")));
    }
    let flags = r.read_u16().await?;
    let kind = r.read_u16().await?;
    let cookie = r.read_u64().await?;
    let offset = r.read_u64().await?;
    let len = r.read_u32().await?;
    if kind == CMD_DISC {
        return Ok(None);
    }
    if kind == CMD_WRITE && len > MAX_REQUEST_BYTES {
        // A write's payload cannot be skipped safely: the connection ends. (A read that
        // large is refused with an error; trims and write-zeroes carry no payload.)
        return Err(NbdError::Protocol(format!(
            "a write of {len} bytes, past {MAX_REQUEST_BYTES}"
        )));
    }
    let bytes = match held_bytes(kind, len) {
        0 => None,
        n => Some(budget.hold(n).await?),
    };
    let mut data = Vec::new();
    if kind == CMD_WRITE {
        data = vec![0u8; len as usize];
        // Its share of the server's payload bytes is held meanwhile: bounded in time.
        tokio::time::timeout(budget.timeouts.payload, r.read_exact(&mut data))
            .await
            .map_err(|_| {
                std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!(
                        "a write's payload took longer than {:?} to arrive",
                        budget.timeouts.payload
                    ),
                )
            })??;
    }
    let request = Request {
        kind,
        flags,
        cookie,
        offset,
        len,
        data,
    };
    Ok(Some((request, bytes)))
}

/// The flags request `kind` may carry: FUA on any request (the protocol has a server that
/// advertises it accept it everywhere; every write is durable when answered), NO_HOLE on
/// write-zeroes.
fn known_flags(kind: u16) -> u16 {
    match kind {
        CMD_WRITE_ZEROES => CMD_FLAG_FUA | CMD_FLAG_NO_HOLE,
        _ => CMD_FLAG_FUA,
    }
}

/// Runs one request against the image.
async fn run(image: &Image, req: Request) -> Answer {
    let len = u64::from(req.len);
    let in_range = req
        .offset
        .checked_add(len)
        .is_some_and(|end| end <= image.size());
    let outcome = match req.kind {
        _ if req.flags & !known_flags(req.kind) != 0 => Err(RbdError::Invalid(format!(
            "request {} with flags {:#x}",
            req.kind, req.flags
        ))),
        CMD_READ if req.len > MAX_REQUEST_BYTES => Err(RbdError::Invalid(format!(
            "a read of {len} bytes, past {MAX_REQUEST_BYTES}"
        ))),
        CMD_READ if in_range => image.read(req.offset, len).await.map(Some),
        // A read-only export refuses any change as such, wherever it falls.
        CMD_WRITE | CMD_TRIM | CMD_WRITE_ZEROES if image.read_only() => Err(RbdError::ReadOnly(
            format!("{} is exported read-only", image.name()),
        )),
        CMD_WRITE if in_range => image.write(req.offset, &req.data).await.map(|()| None),
        CMD_WRITE => {
            return Answer {
                cookie: req.cookie,
                error: ENOSPC,
                data: Vec::new(),
            }
        }
        CMD_WRITE_ZEROES if in_range && req.flags & CMD_FLAG_NO_HOLE != 0 => {
            write_zeroes(image, req.offset, len).await.map(|()| None)
        }
        CMD_TRIM | CMD_WRITE_ZEROES if in_range => {
            image.discard(req.offset, len).await.map(|()| None)
        }
        // Every answered write is durable already.
        CMD_FLUSH => Ok(None),
        _ => Err(RbdError::Invalid(format!(
            "request {} of {len} bytes at {}",
            req.kind, req.offset
        ))),
    };
    match outcome {
        Ok(data) => Answer {
            cookie: req.cookie,
            error: 0,
            data: data.unwrap_or_default(),
        },
        Err(e) => {
            // The client sees only an errno: the cause goes to the log, at warning level for
            // an I/O error (what an operator must look into), debug for a refused request.
            match errno_of(&e) {
                EIO => tracing::warn!(image = image.name(), error = %e, "nbd request failed: EIO"),
                _ => tracing::debug!(image = image.name(), error = %e, "nbd request refused"),
            }
            Answer {
                cookie: req.cookie,
                error: errno_of(&e),
                data: Vec::new(),
            }
        }
    }
}

/// Writes zeros over `len` bytes at `offset`, allocated (write-zeroes with NO_HOLE), in
/// bounded pieces, [`ZERO_WRITES_IN_FLIGHT`] at a time.
async fn write_zeroes(image: &Image, offset: u64, len: u64) -> Result<(), RbdError> {
    use futures_util::{StreamExt, TryStreamExt};
    let zeros = vec![0u8; cairn_convert::usize_of(len.min(ZERO_WRITE_BYTES))];
    let pieces = (0..len.div_ceil(ZERO_WRITE_BYTES)).map(|i| {
        let at = i * ZERO_WRITE_BYTES;
        let n = (len - at).min(ZERO_WRITE_BYTES);
        image.write(offset + at, &zeros[..cairn_convert::usize_of(n)])
    });
    futures_util::stream::iter(pieces)
        .buffer_unordered(ZERO_WRITES_IN_FLIGHT)
        .try_collect::<()>()
        .await
}

/// The NBD error for an image error.
fn errno_of(e: &RbdError) -> u32 {
    match e {
        RbdError::Invalid(_) => EINVAL,
        RbdError::ReadOnly(_) => EPERM,
        RbdError::Client(ClientError::NoSpace(_)) => ENOSPC,
        _ => EIO,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_request_holds_the_bytes_it_buffers() {
        assert_eq!(held_bytes(CMD_READ, 4096), 4096);
        assert_eq!(held_bytes(CMD_WRITE, MAX_REQUEST_BYTES), MAX_REQUEST_BYTES);
        // A read past the limit is refused unread; a write past it ends the connection.
        assert_eq!(held_bytes(CMD_READ, MAX_REQUEST_BYTES + 1), 0);
        // Trims and write-zeroes carry no payload but write zeros over part of an object.
        assert_eq!(held_bytes(CMD_TRIM, 3 << 20), 3 << 20);
        assert_eq!(held_bytes(CMD_TRIM, u32::MAX), MAX_REQUEST_BYTES);
        assert_eq!(held_bytes(CMD_WRITE_ZEROES, u32::MAX), MAX_REQUEST_BYTES);
        assert_eq!(held_bytes(CMD_FLUSH, 0), 0);
        assert_eq!(held_bytes(CMD_DISC, u32::MAX), 0);
    }

    #[test]
    fn info_requests_are_parsed_and_malformed_ones_refused() {
        let mut ok = 4u32.to_be_bytes().to_vec();
        ok.extend_from_slice(b"disk");
        ok.extend_from_slice(&1u16.to_be_bytes());
        ok.extend_from_slice(&3u16.to_be_bytes());
        assert_eq!(info_request_name(&ok).as_deref(), Some("disk"));
        assert_eq!(info_request_name(&ok[..ok.len() - 1]), None);
        assert_eq!(info_request_name(&[]), None);
        let mut huge = u32::MAX.to_be_bytes().to_vec();
        huge.extend_from_slice(b"x");
        assert_eq!(info_request_name(&huge), None);
        let mut extra = ok.clone();
        extra.push(0);
        assert_eq!(info_request_name(&extra), None);
    }
}
