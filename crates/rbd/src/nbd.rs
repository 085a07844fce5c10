//! An NBD server exporting the images of one pool (the NBD protocol's fixed newstyle
//! negotiation, then transmission with simple replies): the export name is the image's name,
//! or `IMAGE@SNAPSHOT` for a snapshot, exported read-only. Reads, writes, flushes, trims and
//! write-zeroes; many requests in flight per connection, any number of connections (up to a
//! limit). Every write is durable on every copy before it is answered, so a flush has nothing
//! left to wait for, FUA is honoured by every write, and several connections may share an
//! image (`CAN_MULTI_CONN`): they share one handle, which holds the image's exclusive lock
//! from the first connection's start to the last one's end. An image another client holds
//! is refused in the handshake (`NBD_REP_ERR_POLICY`).
//!
//! Hostile or broken input never panics the server: a bad magic, an option or request past
//! its limit, or an unknown handshake flag closes that connection; a request out of the
//! image's range is answered with an error, as the protocol says.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use cairn_client::{Client, ClientError};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader, BufWriter};
use tokio::sync::{mpsc, Mutex, Semaphore};

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

/// One open export.
struct Opened {
    image: Arc<Image>,
    users: usize,
    requests: Option<tokio::task::JoinHandle<()>>,
}

/// The images one server exports, and the handles its connections share.
pub struct Exports {
    client: Arc<Client>,
    pool: String,
    lease: Duration,
    /// Open handles by export name, with the connections using each and, for a writer, the
    /// task answering other clients' requests of it (`requests`).
    open: Mutex<HashMap<String, Opened>>,
}

impl Exports {
    /// Exports of the images of `pool`; a writer's lock has `lease`.
    pub fn new(client: Arc<Client>, pool: String, lease: Duration) -> Arc<Exports> {
        Arc::new(Exports {
            client,
            pool,
            lease,
            open: Mutex::new(HashMap::new()),
        })
    }

    /// Opens export `name` for a connection: the shared handle, opened (and for an image,
    /// locked) by the first connection.
    async fn attach(&self, name: &str) -> Result<Arc<Image>, RbdError> {
        let mut open = self.open.lock().await;
        if let Some(o) = open.get_mut(name) {
            o.users += 1;
            return Ok(o.image.clone());
        }
        let client = self.client.clone();
        let (image, writer) = match name.split_once('@') {
            Some((image, snap)) => (
                Image::open_snapshot(client, &self.pool, image, snap).await?,
                false,
            ),
            None => (
                Image::open_exclusive(client, &self.pool, name, self.lease).await?,
                true,
            ),
        };
        let image = Arc::new(image);
        // A mapped image's writer takes snapshots asked of it (`cairn rbd snap create`).
        let requests = writer.then(|| tokio::spawn(image.clone().serve_requests()));
        open.insert(
            name.to_string(),
            Opened {
                image: image.clone(),
                users: 1,
                requests,
            },
        );
        Ok(image)
    }

    /// A connection to export `name` ended: the last one closes the handle (releasing its
    /// lock) before another may open it.
    async fn detach(&self, name: &str) {
        let mut open = self.open.lock().await;
        let last = match open.get_mut(name) {
            Some(o) => {
                o.users -= 1;
                o.users == 0
            }
            None => false,
        };
        if last {
            if let Some(o) = open.remove(name) {
                if let Some(task) = o.requests {
                    task.abort();
                    let _ = task.await;
                }
                if let Err(e) = o.image.close().await {
                    tracing::warn!(export = name, error = %e, "releasing an image's lock");
                }
            }
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

/// The transmission flags of an export: a snapshot is read-only.
fn flags_of(image: &Image) -> u16 {
    match image.read_only() {
        true => TRANSMISSION_FLAGS | TFLAG_READ_ONLY,
        false => TRANSMISSION_FLAGS,
    }
}

/// Serves `exports` to every connection `listener` accepts, until it fails.
pub async fn serve_tcp(
    listener: tokio::net::TcpListener,
    exports: Arc<Exports>,
) -> std::io::Result<()> {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let permit = slots
            .clone()
            .acquire_owned()
            .await
            .map_err(std::io::Error::other)?;
        let (stream, peer) = listener.accept().await?;
        // Small replies (flush, write acks) must not wait for Nagle.
        stream.set_nodelay(true)?;
        let exports = exports.clone();
        tokio::spawn(async move {
            match serve_connection(stream, exports).await {
                Ok(()) => tracing::debug!(%peer, "nbd client disconnected"),
                Err(e) => tracing::info!(%peer, error = %e, "nbd connection closed"),
            }
            drop(permit);
        });
    }
}

/// Serves one connection: the handshake, then requests until the client disconnects.
pub async fn serve_connection<S>(stream: S, exports: Arc<Exports>) -> Result<(), NbdError>
where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let (r, w) = tokio::io::split(stream);
    let (mut r, mut w) = (BufReader::new(r), BufWriter::new(w));
    let Some((name, image)) = negotiate(&mut r, &mut w, &exports).await? else {
        return Ok(());
    };
    let served = transmit(r, w, image).await;
    exports.detach(&name).await;
    served
}

/// The fixed newstyle handshake; the export the client chose (attached), or None when it
/// aborted.
async fn negotiate<R, W>(
    r: &mut R,
    w: &mut W,
    exports: &Exports,
) -> Result<Option<(String, Arc<Image>)>, NbdError>
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
                let image = exports.attach(&name).await?;
                let sent = async {
                    w.write_u64(image.size()).await?;
                    w.write_u16(flags_of(&image)).await?;
                    if !no_zeroes {
                        w.write_all(&[0u8; 124]).await?;
                    }
                    w.flush().await
                };
                if let Err(e) = sent.await {
                    exports.detach(&name).await;
                    return Err(e.into());
                }
                return Ok(Some((name, image)));
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
                        .map(|i| (i.size(), flags_of(&i), Some(i))),
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
                    (Some(image), Ok(())) => return Ok(Some((name, image))),
                    (Some(_), Err(e)) => {
                        exports.detach(&name).await;
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

/// One request's answer: its cookie, error (0: none) and, for a read, the data.
struct Reply {
    cookie: u64,
    error: u32,
    data: Vec<u8>,
}

/// Reads requests and runs each in a task of its own (at most [`MAX_IN_FLIGHT`] at once);
/// one writer sends the replies as they complete. Ends at the client's disconnect request,
/// once every request before it is answered.
async fn transmit<R, W>(mut r: R, mut w: W, image: Arc<Image>) -> Result<(), NbdError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (tx, mut rx) = mpsc::channel::<Reply>(MAX_IN_FLIGHT);
    let writer = tokio::spawn(async move {
        while let Some(reply) = rx.recv().await {
            w.write_u32(SIMPLE_REPLY_MAGIC).await?;
            w.write_u32(reply.error).await?;
            w.write_u64(reply.cookie).await?;
            w.write_all(&reply.data).await?;
            if rx.is_empty() {
                w.flush().await?;
            }
        }
        w.flush().await?;
        Ok::<(), std::io::Error>(())
    });
    let slots = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
    let outcome = loop {
        let request = match read_request(&mut r).await {
            Ok(Some(req)) => req,
            Ok(None) => break Ok(()),
            Err(e) => break Err(e),
        };
        let permit = slots
            .clone()
            .acquire_owned()
            .await
            .map_err(std::io::Error::other)?;
        let (tx, image) = (tx.clone(), image.clone());
        tokio::spawn(async move {
            let reply = run(&image, request).await;
            let _ = tx.send(reply).await;
            drop(permit);
        });
    };
    drop(tx);
    // Every request read is answered before the connection closes.
    writer.await.map_err(std::io::Error::other)??;
    outcome
}

/// One request as read.
struct Request {
    kind: u16,
    cookie: u64,
    offset: u64,
    len: u32,
    data: Vec<u8>,
}

/// The next request, or None at a disconnect request.
async fn read_request<R: AsyncRead + Unpin>(r: &mut R) -> Result<Option<Request>, NbdError> {
    let magic = r.read_u32().await?;
    if magic != REQUEST_MAGIC {
        return Err(NbdError::Protocol(format!("request magic {magic:#x}")));
    }
    let _flags = r.read_u16().await?;
    let kind = r.read_u16().await?;
    let cookie = r.read_u64().await?;
    let offset = r.read_u64().await?;
    let len = r.read_u32().await?;
    if kind == CMD_DISC {
        return Ok(None);
    }
    if len > MAX_REQUEST_BYTES {
        // A write's payload cannot be skipped safely: the connection ends.
        return Err(NbdError::Protocol(format!(
            "a request of {len} bytes, past {MAX_REQUEST_BYTES}"
        )));
    }
    let mut data = Vec::new();
    if kind == CMD_WRITE {
        data = vec![0u8; len as usize];
        r.read_exact(&mut data).await?;
    }
    Ok(Some(Request {
        kind,
        cookie,
        offset,
        len,
        data,
    }))
}

/// Runs one request against the image.
async fn run(image: &Image, req: Request) -> Reply {
    let len = u64::from(req.len);
    let in_range = req
        .offset
        .checked_add(len)
        .is_some_and(|end| end <= image.size());
    let outcome = match req.kind {
        CMD_READ if in_range => image.read(req.offset, len).await.map(Some),
        CMD_WRITE if in_range => image.write(req.offset, &req.data).await.map(|()| None),
        CMD_WRITE => {
            return Reply {
                cookie: req.cookie,
                error: ENOSPC,
                data: Vec::new(),
            }
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
        Ok(data) => Reply {
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
            Reply {
                cookie: req.cookie,
                error: errno_of(&e),
                data: Vec::new(),
            }
        }
    }
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
