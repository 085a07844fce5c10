//! The NBD server on a real cluster, spoken to over an in-memory stream: requests the
//! protocol allows but the server does not carry (a read past the request limit, unknown
//! flags) are answered with an error and the connection goes on; trims and write-zeroes of
//! any length are served; write-zeroes without holes reads back zeros; a connection that
//! drops with writes in flight lets go of the image only once they have ended, so nothing it
//! sent lands after the next writer took the lock; an export whose lock was broken is locked
//! again by its next connection, through a client of its own, while the server's other
//! requests go on. A hostile or careless client costs only its share: names that are no
//! image cost no writer's session, refused opens are counted, a read-only export refuses
//! every change as such, and a connection that reads no reply holds only its own bytes.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn_rbd::nbd::{self, ClientMaker, Exports, MAX_REQUEST_BYTES};
use cairn_rbd::{lock, Image};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

use crate::common::cluster;
use crate::model::fill;

const LEASE: Duration = Duration::from_millis(1200);
const SIZE: u64 = 64 << 20;

const REQUEST_MAGIC: u32 = 0x2560_9513;
const REPLY_MAGIC: u32 = 0x6744_6698;
const READ: u16 = 0;
const WRITE: u16 = 1;
const DISC: u16 = 2;
const TRIM: u16 = 4;
const WRITE_ZEROES: u16 = 6;
const FLAG_FUA: u16 = 1;
const FLAG_NO_HOLE: u16 = 2;
const EPERM: u32 = 1;
const EINVAL: u32 = 22;
const OPTION_REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;
const OPT_GO: u32 = 7;
const REP_INFO: u32 = 3;
const REP_ERR_POLICY: u32 = 0x8000_0002;
const REP_ERR_UNKNOWN: u32 = 0x8000_0006;

/// A client end of one NBD connection, past its handshake.
struct Conn {
    io: DuplexStream,
    served: tokio::task::JoinHandle<Result<(), nbd::NbdError>>,
}

/// Connects to `exports`, asks for export `name` (the old-style EXPORT_NAME option) and
/// returns the connection with the export's size.
async fn open(exports: &Arc<Exports>, name: &str) -> (Conn, u64) {
    open_through(exports, name, 1 << 20).await
}

/// [`open`] through a pipe holding `pipe_bytes` each way.
async fn open_through(exports: &Arc<Exports>, name: &str, pipe_bytes: usize) -> (Conn, u64) {
    let (mut io, server) = tokio::io::duplex(pipe_bytes);
    let served = tokio::spawn(nbd::serve_connection(server, exports.clone()));
    let mut greeting = [0u8; 18];
    io.read_exact(&mut greeting).await.unwrap();
    assert_eq!(&greeting[..8], b"NBDMAGIC");
    io.write_u32(3).await.unwrap();
    io.write_all(b"IHAVEOPT").await.unwrap();
    io.write_u32(1).await.unwrap();
    io.write_u32(u32::try_from(name.len()).unwrap())
        .await
        .unwrap();
    io.write_all(name.as_bytes()).await.unwrap();
    let size = io.read_u64().await.unwrap();
    let _flags = io.read_u16().await.unwrap();
    (Conn { io, served }, size)
}

impl Conn {
    async fn send(&mut self, kind: u16, flags: u16, cookie: u64, offset: u64, len: u32) {
        self.io.write_u32(REQUEST_MAGIC).await.unwrap();
        self.io.write_u16(flags).await.unwrap();
        self.io.write_u16(kind).await.unwrap();
        self.io.write_u64(cookie).await.unwrap();
        self.io.write_u64(offset).await.unwrap();
        self.io.write_u32(len).await.unwrap();
    }

    /// The next reply's error and cookie; a successful read's data follows it.
    async fn reply(&mut self) -> (u32, u64) {
        assert_eq!(self.io.read_u32().await.unwrap(), REPLY_MAGIC);
        let error = self.io.read_u32().await.unwrap();
        (error, self.io.read_u64().await.unwrap())
    }

    async fn write(&mut self, cookie: u64, offset: u64, data: &[u8]) {
        let len = u32::try_from(data.len()).unwrap();
        self.send(WRITE, 0, cookie, offset, len).await;
        self.io.write_all(data).await.unwrap();
    }

    async fn read(&mut self, cookie: u64, offset: u64, len: u32) -> Vec<u8> {
        self.send(READ, 0, cookie, offset, len).await;
        assert_eq!(self.reply().await, (0, cookie));
        let mut data = vec![0u8; len as usize];
        self.io.read_exact(&mut data).await.unwrap();
        data
    }

    async fn disconnect(mut self) {
        self.send(DISC, 0, 0, 0, 0).await;
        self.served.await.unwrap().unwrap();
    }
}

/// Reads the server's greeting and sends the client's flags (fixed newstyle, no zeroes).
async fn greet(io: &mut DuplexStream) {
    let mut greeting = [0u8; 18];
    io.read_exact(&mut greeting).await.unwrap();
    assert_eq!(&greeting[..8], b"NBDMAGIC");
    io.write_u32(3).await.unwrap();
}

/// Asks for export `name` with NBD_OPT_GO and returns the type of the reply that ends the
/// option (an ACK, or an error).
async fn go(io: &mut DuplexStream, name: &str) -> u32 {
    let name_len = u32::try_from(name.len()).unwrap();
    io.write_all(b"IHAVEOPT").await.unwrap();
    io.write_u32(OPT_GO).await.unwrap();
    io.write_u32(4 + name_len + 2).await.unwrap();
    io.write_u32(name_len).await.unwrap();
    io.write_all(name.as_bytes()).await.unwrap();
    io.write_u16(0).await.unwrap();
    loop {
        assert_eq!(io.read_u64().await.unwrap(), OPTION_REPLY_MAGIC);
        assert_eq!(io.read_u32().await.unwrap(), OPT_GO);
        let kind = io.read_u32().await.unwrap();
        let mut data = vec![0u8; io.read_u32().await.unwrap() as usize];
        io.read_exact(&mut data).await.unwrap();
        if kind != REP_INFO {
            return kind;
        }
    }
}

/// [`writers`], counting the clients made.
fn counted_writers(mon: std::net::SocketAddr, made: Arc<AtomicUsize>) -> ClientMaker {
    let make = writers(mon);
    Arc::new(move || {
        made.fetch_add(1, Ordering::SeqCst);
        make()
    })
}

fn writers(mon: std::net::SocketAddr) -> ClientMaker {
    Arc::new(move || {
        Box::pin(crate::common::connect(
            mon,
            cairn_client::random_client_id(),
        ))
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_nbd_server_answers_what_it_refuses_and_lets_go_of_an_image_last() {
    let c = cluster("rbd-nbd-server", 8, 256 << 20).await;
    let client = Arc::new(crate::common::connect(c.mon.addr(), 507).await.unwrap());
    Image::create(&client, "data", "disk", SIZE, Some(22))
        .await
        .unwrap();
    Image::create(&client, "data", "other", 1 << 20, Some(16))
        .await
        .unwrap();
    let exports = Exports::new(client.clone(), writers(c.mon.addr()), "data".into(), LEASE);

    let (mut conn, size) = open(&exports, "disk").await;
    assert_eq!(size, SIZE);
    let data = fill(8192, 7);
    conn.write(1, 4096, &data).await;
    assert_eq!(conn.reply().await, (0, 1));
    // A read past the request limit and a flag no request of its kind takes: refused, and
    // the connection goes on.
    conn.send(READ, 0, 2, 0, MAX_REQUEST_BYTES + 4096).await;
    assert_eq!(conn.reply().await, (EINVAL, 2));
    conn.send(READ, 1 << 7, 3, 0, 4096).await;
    assert_eq!(conn.reply().await, (EINVAL, 3));
    assert_eq!(conn.read(4, 4096, 8192).await, data);
    // Write-zeroes without holes, then a trim over the whole image, longer than any write.
    conn.send(WRITE_ZEROES, FLAG_NO_HOLE, 5, 4096, 4096).await;
    assert_eq!(conn.reply().await, (0, 5));
    let read = conn.read(6, 4096, 8192).await;
    assert!(read[..4096].iter().all(|&b| b == 0));
    assert_eq!(read[4096..], data[4096..]);
    conn.send(TRIM, 0, 7, 0, u32::try_from(SIZE).unwrap()).await;
    assert_eq!(conn.reply().await, (0, 7));
    assert!(conn.read(8, 0, 16384).await.iter().all(|&b| b == 0));
    conn.disconnect().await;

    // Writes in flight when the connection drops: the image is let go of only once every
    // one of them has ended, so the next writer finds the image as it will stay.
    let (mut conn, _) = open(&exports, "disk").await;
    for i in 0..32u64 {
        conn.write(100 + i, i << 20, &fill(1 << 20, i)).await;
    }
    let Conn { io, served } = conn;
    drop(io);
    let _ = served.await.unwrap();
    let next = Image::open_exclusive(client.clone(), "data", "disk", LEASE)
        .await
        .expect("the dropped connection released the lock");
    let first = next.read(0, 32 << 20).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        next.read(0, 32 << 20).await.unwrap() == first,
        "nothing landed after the lock passed on"
    );
    next.close().await.unwrap();

    // A broken lock: the export's next connection locks the image again, through a client
    // of its own; the server's client (other exports, listings) is not fenced.
    let (mut held, _) = open(&exports, "disk").await;
    held.write(200, 0, b"before the break").await;
    assert_eq!(held.reply().await, (0, 200));
    lock::break_lock(&client, "data", "disk").await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        held.write(201, 0, b"after the break!").await;
        if held.reply().await.0 != 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the broken lock's writes still succeed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (mut again, _) = open(&exports, "disk").await;
    again.write(300, 0, b"a new lock holds").await;
    assert_eq!(again.reply().await, (0, 300));
    assert_eq!(again.read(301, 0, 16).await, b"a new lock holds");
    let (mut other, _) = open(&exports, "other").await;
    other.write(400, 0, b"other").await;
    let answered = other.reply().await;
    assert_eq!(answered, (0, 400), "a write to another export");
    assert!(Image::list(&client, "data").await.unwrap().len() >= 2);
    held.disconnect().await;
    again.disconnect().await;
    other.disconnect().await;
    let reopened = Image::open_exclusive(client.clone(), "data", "disk", LEASE)
        .await
        .expect("the last connection released the new lock");
    assert_eq!(reopened.read(0, 16).await.unwrap(), b"a new lock holds");
    reopened.close().await.unwrap();
    crate::common::stop(c).await;
}

/// A client that stalls is waited for only so long: one that sends nothing in its handshake,
/// one that sends half a write's payload, and one that reads no reply each have their
/// connection closed, and the image's lock is let go of.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_clients_are_cut_off_and_let_go_of_their_images() {
    let c = cluster("rbd-nbd-stalls", 8, 64 << 20).await;
    let client = Arc::new(crate::common::connect(c.mon.addr(), 508).await.unwrap());
    Image::create(&client, "data", "disk", 8 << 20, Some(22))
        .await
        .unwrap();
    let timeouts = nbd::Timeouts {
        handshake: Duration::from_millis(500),
        payload: Duration::from_millis(500),
        reply: Duration::from_millis(500),
    };
    let exports = Exports::with_timeouts(
        client.clone(),
        writers(c.mon.addr()),
        "data".into(),
        LEASE,
        timeouts,
    );
    let bound = Duration::from_secs(10);

    // Silent in its handshake.
    let (_io, server) = tokio::io::duplex(1 << 20);
    let served = tokio::time::timeout(bound, nbd::serve_connection(server, exports.clone()))
        .await
        .expect("a silent handshake is cut off");
    assert!(served.is_err());

    // Half a write's payload.
    let (mut conn, _) = open(&exports, "disk").await;
    conn.send(WRITE, 0, 1, 0, 1 << 20).await;
    conn.io.write_all(&vec![5u8; 512 << 10]).await.unwrap();
    let served = tokio::time::timeout(bound, conn.served)
        .await
        .expect("a stalled payload is cut off")
        .unwrap();
    assert!(served.is_err());

    // Replies left unread: reads of 1 MiB into a pipe of 64 KiB.
    let (mut conn, _) = open_through(&exports, "disk", 64 << 10).await;
    for cookie in 0..4 {
        conn.send(READ, 0, cookie, 0, 1 << 20).await;
    }
    let served = tokio::time::timeout(bound, conn.served)
        .await
        .expect("a client reading no reply is cut off")
        .unwrap();
    assert!(served.is_err());

    // Every connection ended let go of the image: its lock is free.
    let image = Image::open_exclusive(client.clone(), "data", "disk", LEASE)
        .await
        .expect("the lock was released");
    image.close().await.unwrap();
    crate::common::stop(c).await;
}

/// What a hostile or careless client costs the server stays its own: names that are no
/// image are refused without a writer's client (a monitor session each), an image held
/// elsewhere is refused only so many times per handshake, a read-only export refuses every
/// change with EPERM (FUA taken on any request), and a connection that reads none of its
/// replies holds only its own share of the server's bytes while another is served (and its
/// write with FUA reads back).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_clients_cost_only_their_own_share() {
    let c = cluster("rbd-nbd-shares", 8, 256 << 20).await;
    let client = Arc::new(crate::common::connect(c.mon.addr(), 509).await.unwrap());
    Image::create(&client, "data", "disk", SIZE, Some(22))
        .await
        .unwrap();
    let image = Image::open_exclusive(client.clone(), "data", "disk", LEASE)
        .await
        .unwrap();
    image.snap_create("s1").await.unwrap();
    let made = Arc::new(AtomicUsize::new(0));
    let exports = Exports::new(
        client.clone(),
        counted_writers(c.mon.addr(), made.clone()),
        "data".into(),
        LEASE,
    );

    let (mut io, server) = tokio::io::duplex(1 << 20);
    let served = tokio::spawn(nbd::serve_connection(server, exports.clone()));
    greet(&mut io).await;
    for name in ["nope", "not-an-image", "disk@no-such-snap"] {
        assert_eq!(go(&mut io, name).await, REP_ERR_UNKNOWN, "{name}");
    }
    assert_eq!(
        made.load(Ordering::SeqCst),
        0,
        "no writer made for a missing name"
    );
    // `disk` is held by `image`: each ask is refused, and the handshake ends at the limit.
    for _ in 0..nbd::MAX_REFUSED_OPENS {
        assert_eq!(go(&mut io, "disk").await, REP_ERR_POLICY);
    }
    let ended = tokio::time::timeout(Duration::from_secs(10), served)
        .await
        .expect("the handshake is closed after its refusals")
        .unwrap();
    assert!(ended.is_err());
    assert_eq!(made.load(Ordering::SeqCst), nbd::MAX_REFUSED_OPENS);
    image.close().await.unwrap();

    let (mut snap, size) = open(&exports, "disk@s1").await;
    assert_eq!(size, SIZE);
    snap.write(1, SIZE, b"past the end").await;
    assert_eq!(snap.reply().await, (EPERM, 1));
    snap.write(2, 0, b"inside").await;
    assert_eq!(snap.reply().await, (EPERM, 2));
    snap.send(TRIM, 0, 3, 0, 4096).await;
    assert_eq!(snap.reply().await, (EPERM, 3));
    snap.send(READ, FLAG_FUA, 4, 0, 4096).await;
    assert_eq!(snap.reply().await, (0, 4), "FUA on a read is taken");
    let mut read = vec![0u8; 4096];
    snap.io.read_exact(&mut read).await.unwrap();
    assert!(read.iter().all(|&b| b == 0));
    snap.disconnect().await;

    // Nine reads of the request limit into a 64 KiB pipe nobody reads: past its own share
    // the connection waits, and the other connection is served at once.
    let (mut slow, _) = open_through(&exports, "disk", 64 << 10).await;
    for cookie in 0..9 {
        slow.send(READ, 0, cookie, 0, MAX_REQUEST_BYTES).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (mut other, _) = open(&exports, "disk").await;
    let data = fill(4096, 11);
    let read = tokio::time::timeout(Duration::from_secs(20), async {
        other.write(10, 8192, &data).await;
        assert_eq!(other.reply().await, (0, 10));
        other.read(11, 8192, 4096).await
    })
    .await
    .expect("a second connection is served while the first reads no reply");
    assert_eq!(read, data);
    // A write with FUA is answered once durable, and reads back.
    let forced = fill(4096, 12);
    other.send(WRITE, FLAG_FUA, 12, 16384, 4096).await;
    other.io.write_all(&forced).await.unwrap();
    assert_eq!(other.reply().await, (0, 12), "FUA on a write is taken");
    assert_eq!(other.read(13, 16384, 4096).await, forced);
    other.disconnect().await;
    let Conn { io, served } = slow;
    drop(io);
    let _ = tokio::time::timeout(Duration::from_secs(20), served)
        .await
        .expect("the slow connection ends once dropped");
    crate::common::stop(c).await;
}
