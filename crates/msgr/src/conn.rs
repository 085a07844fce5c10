//! One framed TCP connection: a stream of decoded frames and a writer task.
//!
//! Owns socket setup (no Nagle delay), the framing and the writing; reconnect and resend belong
//! to [`crate::session`]. Reading and writing run independently, so a connection whose peer is
//! busy writing to it still reads (two ends each writing a large batch can never wait on each
//! other forever). The writer gathers queued frames into one vectored write; a data segment of
//! at least [`ZERO_COPY_DATA_BYTES`] goes to the socket from its own buffer, uncopied.

use std::io::IoSlice;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::blockcrc::BlockCrcs;
use crate::bufs::data_pool;
use crate::error::MsgrError;
use crate::frame::{Frame, FrameHeader, Limits, HEADER_BYTES, SEGMENT_CRC_BYTES};
use crate::protect::{open_frame, seal_frame, FrameCrypt, FrameKeys, WireMode, TAG_BYTES};
use crate::transport::{ReadHalf, Stream, WriteHalf};
use bytes::{Buf, BufMut, Bytes, BytesMut};
use cairn_blockdev::AlignedBuf;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// Room the read buffer gets when it grows.
const READ_CHUNK_BYTES: usize = 64 << 10;
/// The read buffer grows when less room than this is left.
const MIN_READ_ROOM_BYTES: usize = 4 << 10;
pub use crate::bufs::DATA_ALIGN_BYTES;

/// The first buffer a large data segment is read into holds at most this much; it doubles as
/// bytes arrive, so a frame header announcing a large segment costs memory only once its bytes
/// come (a peer cannot make the reader hold more than twice what it has sent).
const FIRST_DATA_BUFFER_BYTES: usize = 1 << 20;

/// A large data segment being read straight into its own aligned buffer.
struct DataInFlight {
    header: FrameHeader,
    payload: Bytes,
    /// The buffer read into so far: at most `want` bytes long, grown as it fills.
    data: AlignedBuf,
    /// Length of the whole segment (from the frame header).
    want: usize,
    filled: usize,
    /// crc32c of each block of `data[..filled]`, extended as bytes arrive (while they are in
    /// cache): the segment's check, and the blocks' checksums for a store.
    crcs: BlockCrcs,
    /// The frame's MAC and cipher on a protected connection, fed the bytes as they arrive.
    crypt: Option<FrameCrypt>,
}

/// Read half of a framed connection: decodes frames in order. A data segment of at least
/// [`ZERO_COPY_DATA_BYTES`] is read from the socket into a buffer of its own aligned to
/// [`DATA_ALIGN_BYTES`] (from [`crate::bufs`]'s pool), so a store can write it with direct I/O
/// as it is; everything else is decoded from a read buffer. Reading is cancel-safe: whatever has
/// arrived is kept here, so a `next` dropped by a `select!` loses nothing.
pub struct FrameStream {
    sock: ReadHalf,
    buf: BytesMut,
    limits: Limits,
    in_flight: Option<DataInFlight>,
    /// The keys frames from the peer are checked (and opened) with, once the handshake
    /// installed them.
    opener: Option<FrameKeys>,
}

impl FrameStream {
    /// Sets the largest frame accepted from here on (a listener takes small frames only until
    /// the peer's HELLO is accepted).
    pub fn set_max_payload_bytes(&mut self, bytes: u32) {
        self.limits.max_payload_bytes = bytes;
    }

    /// From the next frame on, every frame must carry a valid tag under `keys` (and is
    /// decrypted in secure mode). Called by the handshake right after its last unprotected
    /// frame.
    pub fn protect(&mut self, keys: FrameKeys) {
        assert!(self.in_flight.is_none(), "protection starts between frames");
        self.opener = Some(keys);
    }

    /// The trailer bytes after each frame: a tag once protected.
    fn tag_len(&self) -> usize {
        if self.opener.is_some() {
            TAG_BYTES
        } else {
            0
        }
    }

    /// The next frame; `None` once the peer has closed the connection between frames.
    pub async fn next(&mut self) -> Option<Result<Frame, MsgrError>> {
        match self.next_frame().await {
            Ok(Some(f)) => Some(Ok(f)),
            Ok(None) => None,
            Err(e) => Some(Err(e)),
        }
    }

    async fn next_frame(&mut self) -> Result<Option<Frame>, MsgrError> {
        loop {
            if let Some(d) = self.in_flight.as_mut() {
                if d.filled < d.want {
                    if d.filled == d.data.len() {
                        d.data = grown(&d.data, d.filled, d.want)?;
                    }
                    let DataInFlight {
                        data,
                        filled,
                        crcs,
                        crypt,
                        ..
                    } = d;
                    let dst = &mut data.as_mut_slice()[*filled..];
                    let n = if self.buf.is_empty() {
                        match self.sock.read(dst).await? {
                            0 => return Err(MsgrError::Closed),
                            n => n,
                        }
                    } else {
                        let n = dst.len().min(self.buf.len());
                        dst[..n].copy_from_slice(&self.buf[..n]);
                        self.buf.advance(n);
                        n
                    };
                    if let Some(c) = crypt.as_mut() {
                        c.open(&mut dst[..n]);
                    }
                    crcs.append(&dst[..n]);
                    *filled += n;
                    continue;
                }
                let tag_len = self.tag_len();
                if self.buf.len() < SEGMENT_CRC_BYTES + tag_len {
                    self.fill_or_closed().await?;
                    continue;
                }
                let Some(mut d) = self.in_flight.take() else {
                    continue;
                };
                let mut crc_bytes = [0u8; SEGMENT_CRC_BYTES];
                self.buf.copy_to_slice(&mut crc_bytes);
                if let Some(c) = d.crypt.as_mut() {
                    c.open(&mut crc_bytes);
                    c.verify(&self.buf[..TAG_BYTES], d.header.seq)?;
                    self.buf.advance(TAG_BYTES);
                }
                let expected = u32::from_le_bytes(crc_bytes);
                let (crc, blocks) = d.crcs.finish();
                if crc != expected {
                    return Err(MsgrError::PayloadChecksum { seq: d.header.seq });
                }
                let data = data_pool().lend(d.data);
                return Ok(Some(Frame::from_wire(
                    d.header,
                    d.payload,
                    data,
                    crc,
                    Some(blocks),
                )));
            }
            match Frame::peek_header(&self.buf, &self.limits)? {
                Some(w) if w.data_len >= ZERO_COPY_DATA_BYTES => {
                    let head = HEADER_BYTES + w.payload_len + SEGMENT_CRC_BYTES;
                    if self.buf.len() < head {
                        reserve_as_bytes_arrive(&mut self.buf, head);
                        self.fill_or_closed().await?;
                        continue;
                    }
                    let mut front = self.buf.split_to(head);
                    let crypt = self.opener.as_mut().map(|keys| {
                        let mut c = keys.start();
                        let (header, body) = front.split_at_mut(HEADER_BYTES);
                        c.header(header);
                        c.open(body);
                        c
                    });
                    front.advance(HEADER_BYTES);
                    let payload = front.split_to(w.payload_len).freeze();
                    if crc_fast::crc32_iscsi(&payload) != front.get_u32_le() {
                        return Err(MsgrError::PayloadChecksum { seq: w.header.seq });
                    }
                    let data = take_data_buffer(w.data_len.min(FIRST_DATA_BUFFER_BYTES))?;
                    self.in_flight = Some(DataInFlight {
                        header: w.header,
                        payload,
                        data,
                        want: w.data_len,
                        filled: 0,
                        crcs: BlockCrcs::with_capacity(w.data_len),
                        crypt,
                    });
                }
                _ => match self.decode_buffered()? {
                    Some(f) => return Ok(Some(f)),
                    None => {
                        if !self.fill().await? {
                            return if self.buf.is_empty() {
                                Ok(None)
                            } else {
                                Err(MsgrError::Closed)
                            };
                        }
                    }
                },
            }
        }
    }

    /// Decodes the frame at the front of the read buffer once all of it (and its tag, on a
    /// protected connection) has arrived, checking the tag before anything else is read.
    fn decode_buffered(&mut self) -> Result<Option<Frame>, MsgrError> {
        let Some(keys) = self.opener.as_mut() else {
            return Frame::decode(&mut self.buf, &self.limits);
        };
        let Some(w) = Frame::peek_header(&self.buf, &self.limits)? else {
            return Ok(None);
        };
        let total = HEADER_BYTES + w.payload_len + w.data_len + 2 * SEGMENT_CRC_BYTES;
        if self.buf.len() < total + TAG_BYTES {
            reserve_as_bytes_arrive(&mut self.buf, total + TAG_BYTES);
            return Ok(None);
        }
        let (frame, rest) = self.buf.split_at_mut(total);
        open_frame(keys, frame, &rest[..TAG_BYTES], w.header.seq)?;
        let decoded = Frame::decode(&mut self.buf, &self.limits)?;
        assert!(decoded.is_some(), "a whole frame was buffered");
        self.buf.advance(TAG_BYTES);
        Ok(decoded)
    }

    /// Reads more bytes into the read buffer; the end of the stream in the middle of a frame is
    /// `Closed`.
    async fn fill_or_closed(&mut self) -> Result<(), MsgrError> {
        if self.fill().await? {
            Ok(())
        } else {
            Err(MsgrError::Closed)
        }
    }

    /// Reads more bytes into the read buffer; false at end of stream. The buffer grows only
    /// when little room is left: decoded frames keep slices of it alive, so asking for a full
    /// chunk every time would allocate (and copy into) a new buffer on almost every read.
    async fn fill(&mut self) -> Result<bool, MsgrError> {
        if self.buf.capacity() - self.buf.len() < MIN_READ_ROOM_BYTES {
            self.buf.reserve(READ_CHUNK_BYTES);
        }
        Ok(self.sock.read_buf(&mut self.buf).await? > 0)
    }
}

/// An aligned buffer of `len` bytes from the pool.
fn take_data_buffer(len: usize) -> Result<AlignedBuf, MsgrError> {
    data_pool().take(len).ok_or_else(|| {
        MsgrError::Io(std::io::Error::new(
            std::io::ErrorKind::OutOfMemory,
            format!("cannot allocate a {len}-byte data segment buffer"),
        ))
    })
}

/// A buffer twice as long as `full` (at most `want` bytes) holding its first `filled` bytes.
fn grown(full: &AlignedBuf, filled: usize, want: usize) -> Result<AlignedBuf, MsgrError> {
    assert!(
        filled <= full.len() && full.len() < want,
        "a segment buffer grows only when full"
    );
    let mut next = take_data_buffer(want.min(full.len().saturating_mul(2)))?;
    next.as_mut_slice()[..filled].copy_from_slice(&full.as_slice()[..filled]);
    Ok(next)
}

/// Makes room in `buf` towards `total` bytes, at most doubling what has arrived: a header that
/// announces a large frame reserves memory only as its bytes come.
pub(crate) fn reserve_as_bytes_arrive(buf: &mut BytesMut, total: usize) {
    let missing = total.saturating_sub(buf.len());
    buf.reserve(missing.min(buf.len().max(READ_CHUNK_BYTES)));
}

/// Data segments at least this long are written from their own buffer; shorter ones are copied
/// into the batch buffer with the headers around them (one system call for many small frames).
pub const ZERO_COPY_DATA_BYTES: usize = 64 << 10;
/// Most frames gathered into one vectored write.
const MAX_FRAMES_PER_WRITE: usize = 64;
/// Most buffers passed to one `writev` (Linux's IOV_MAX is 1024).
const MAX_IOVECS: usize = 512;

/// The sending side of a connection: frames handed to [`FrameWriter::send`] are written in
/// order by the connection's writer task. Dropping every `FrameWriter` lets the task write what
/// is queued and then close its half of the socket.
pub struct FrameWriter {
    frames: mpsc::UnboundedSender<Outgoing>,
    /// The highest sequence number of a frame the writer task has taken to write (set before
    /// its bytes go to the socket, so that a peer's acknowledgement never outruns it).
    written: Arc<AtomicU64>,
}

/// What the writer task is handed, in order.
enum Outgoing {
    /// A frame to write.
    Frame(Frame),
    /// Protect every frame after this point with these keys.
    Protect(FrameKeys),
}

impl FrameWriter {
    /// Queues `frame` to be written after those queued before it; fails once the writer task
    /// has stopped (the connection failed).
    pub fn send(&self, frame: Frame) -> Result<(), MsgrError> {
        self.frames
            .send(Outgoing::Frame(frame))
            .map_err(|_| MsgrError::Closed)
    }

    /// The highest sequence number of a frame taken to be written to the socket: a peer can
    /// acknowledge no later one.
    pub fn written_seq(&self) -> u64 {
        self.written.load(Ordering::Acquire)
    }

    /// What [`FrameWriter::written_seq`] reads, to be read after the writer is gone.
    pub fn written_handle(&self) -> Arc<AtomicU64> {
        self.written.clone()
    }

    /// Protects every frame queued after this call with `keys` (a MAC, and encryption in
    /// secure mode). Called by the handshake right after its last unprotected frame.
    pub fn protect(&self, keys: FrameKeys) -> Result<(), MsgrError> {
        self.frames
            .send(Outgoing::Protect(keys))
            .map_err(|_| MsgrError::Closed)
    }
}

/// The connection's writer task.
pub struct WriterTask {
    task: JoinHandle<Result<(), MsgrError>>,
    /// Set once `stopped` saw the task end (its outcome can be taken only once).
    ended: bool,
}

impl WriterTask {
    /// Resolves when the writer stops: with its error, or `Closed` (also at once for a
    /// writer already seen to stop).
    pub async fn stopped(&mut self) -> MsgrError {
        if self.ended {
            return MsgrError::Closed;
        }
        let outcome = (&mut self.task).await;
        self.ended = true;
        match outcome {
            Ok(Ok(())) => MsgrError::Closed,
            Ok(Err(e)) => e,
            Err(_) => MsgrError::Closed,
        }
    }

    /// Stops writing at once (the connection is being abandoned).
    pub fn abort(&self) {
        self.task.abort();
    }
}

/// A connected, framed socket.
pub struct Conn {
    /// Queues frames for writing.
    pub writer: FrameWriter,
    /// The task writing them.
    pub task: WriterTask,
    /// The frames read.
    pub stream: FrameStream,
}

/// Frames a connected socket: starts its writer task.
pub fn framed(stream: impl Into<Stream>, limits: Limits) -> Conn {
    let (read, write) = stream.into().into_split();
    let (tx, rx) = mpsc::unbounded_channel();
    let written = Arc::new(AtomicU64::new(0));
    let task = tokio::spawn(write_loop(write, rx, limits, written.clone()));
    Conn {
        writer: FrameWriter {
            frames: tx,
            written,
        },
        task: WriterTask { task, ended: false },
        stream: FrameStream {
            sock: read,
            buf: BytesMut::with_capacity(READ_CHUNK_BYTES),
            limits,
            in_flight: None,
            opener: None,
        },
    }
}

async fn write_loop(
    mut sock: WriteHalf,
    mut frames: mpsc::UnboundedReceiver<Outgoing>,
    limits: Limits,
    written: Arc<AtomicU64>,
) -> Result<(), MsgrError> {
    let mut batch = Vec::with_capacity(MAX_FRAMES_PER_WRITE);
    let mut sealer = None;
    while let Some(first) = frames.recv().await {
        batch.push(first);
        // Let the tasks that are ready now (other operations finishing in the same turn of the
        // runtime) queue their frames first: one `writev`, and one wake-up of the peer, for all.
        tokio::task::yield_now().await;
        while batch.len() < MAX_FRAMES_PER_WRITE {
            match frames.try_recv() {
                Ok(f) => batch.push(f),
                Err(_) => break,
            }
        }
        let mut pieces = encode_batch(&batch, &limits, &mut sealer)?;
        let highest = batch.iter().filter_map(|item| match item {
            Outgoing::Frame(f) => Some(f.header.seq),
            Outgoing::Protect(_) => None,
        });
        if let Some(highest) = highest.max() {
            written.fetch_max(highest, Ordering::AcqRel);
        }
        batch.clear();
        write_all(&mut sock, &mut pieces, limits.write_turn_bytes).await?;
    }
    sock.shutdown().await?;
    Ok(())
}

/// The wire bytes of `items` as buffers to write in order: headers, payloads, checksums and
/// small data segments copied together; large data segments by reference (unless encrypted).
/// A `Protect` item installs the keys every later frame is protected with.
fn encode_batch(
    items: &[Outgoing],
    limits: &Limits,
    sealer: &mut Option<FrameKeys>,
) -> Result<Vec<Bytes>, MsgrError> {
    let mut pieces = Vec::new();
    let mut small = BytesMut::new();
    for item in items {
        let f = match item {
            Outgoing::Protect(keys) => {
                *sealer = Some(keys.clone());
                continue;
            }
            Outgoing::Frame(f) => f,
        };
        let start = small.len();
        f.encode_head(limits, &mut small)?;
        let crc = f.data_crc().to_le_bytes();
        match sealer.as_mut() {
            Some(keys) if keys.mode() == WireMode::Secure => {
                small.put_slice(f.data());
                small.put_slice(&crc);
                let tag = seal_frame(keys, &mut small[start..]);
                small.put_slice(&tag);
            }
            mac => {
                let mut crypt = mac.map(|keys| {
                    let mut c = keys.start();
                    c.header(&small[start..start + HEADER_BYTES]);
                    c.seal_plain(&small[start + HEADER_BYTES..]);
                    c.seal_plain(f.data());
                    c.seal_plain(&crc);
                    c
                });
                if f.data().len() >= ZERO_COPY_DATA_BYTES {
                    pieces.push(small.split().freeze());
                    pieces.push(f.data().clone());
                } else {
                    small.put_slice(f.data());
                }
                small.put_slice(&crc);
                if let Some(c) = crypt.take() {
                    small.put_slice(&c.tag());
                }
            }
        }
    }
    pieces.push(small.freeze());
    Ok(pieces)
}

/// Writes every byte of `pieces` with vectored writes of at most `turn_bytes` each (0: no
/// bound), letting the runtime's other tasks run after each write that used its whole turn.
async fn write_all(
    sock: &mut WriteHalf,
    pieces: &mut [Bytes],
    turn_bytes: usize,
) -> Result<(), MsgrError> {
    let turn = match turn_bytes {
        0 => usize::MAX,
        n => n,
    };
    let mut first = 0;
    loop {
        while first < pieces.len() && pieces[first].is_empty() {
            first += 1;
        }
        if first == pieces.len() {
            return Ok(());
        }
        let mut room = turn;
        let slices: Vec<IoSlice<'_>> = pieces[first..]
            .iter()
            .take(MAX_IOVECS)
            .map_while(|p| {
                if room == 0 {
                    return None;
                }
                let n = p.len().min(room);
                room -= n;
                Some(IoSlice::new(&p[..n]))
            })
            .collect();
        let mut written = sock.write_vectored(&slices).await?;
        if written == 0 {
            return Err(MsgrError::Io(std::io::ErrorKind::WriteZero.into()));
        }
        let whole_turn = written >= turn;
        while written > 0 {
            let piece = &mut pieces[first];
            let step = written.min(piece.len());
            piece.advance(step);
            written -= step;
            if piece.is_empty() {
                first += 1;
            }
        }
        if whole_turn {
            tokio::task::yield_now().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::SINGLE_WORKER_WRITE_TURN_BYTES as SINGLE_WORKER_TURN;
    use std::time::Duration;
    use tokio::net::{TcpListener, TcpStream};

    /// A connected pair: the raw socket of one end and the framed other end.
    async fn pair() -> (TcpStream, Conn) {
        pair_with(Limits::default()).await
    }

    /// A connected pair whose framed end has `limits`.
    async fn pair_with(limits: Limits) -> (TcpStream, Conn) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let raw = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (accepted, _) = listener.accept().await.unwrap();
        (raw, framed(accepted, limits))
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_trickled_large_frame_survives_reads_cancelled_midway_and_lands_aligned() {
        let (mut raw, mut conn) = pair().await;
        // Three times the first buffer: the segment's buffer grows twice on the way.
        let data = Bytes::from(
            (0..3 * FIRST_DATA_BUFFER_BYTES + 17)
                .map(|i| i.to_le_bytes()[0])
                .collect::<Vec<u8>>(),
        );
        let frames = [
            Frame::new(1, &b"small first"[..]),
            Frame::with_data(2, &b"big"[..], data.clone()),
            Frame::with_data(3, &b"tail"[..], Bytes::from_static(b"little data")),
        ];
        let mut wire = BytesMut::new();
        for f in &frames {
            f.encode(&Limits::default(), &mut wire).unwrap();
        }
        let writer = tokio::spawn(async move {
            for piece in wire.chunks(7919) {
                raw.write_all(piece).await.unwrap();
                tokio::time::sleep(Duration::from_micros(300)).await;
            }
            raw
        });
        let mut got = Vec::new();
        let mut cancelled = 0;
        while got.len() < frames.len() {
            match tokio::time::timeout(Duration::from_millis(1), conn.stream.next()).await {
                Ok(f) => got.push(f.unwrap().unwrap()),
                Err(_) => cancelled += 1,
            }
        }
        assert!(cancelled > 10, "reads were cancelled midway ({cancelled})");
        assert_eq!(got, frames);
        assert_eq!(got[1].data().as_ptr() as usize % DATA_ALIGN_BYTES, 0);
        assert_eq!(got[1].data_crc(), crc_fast::crc32_iscsi(&data));
        let blocks = got[1].data_block_crcs().expect("computed on arrival");
        let expected: Vec<u32> = data
            .chunks(crate::blockcrc::CRC_BLOCK_BYTES)
            .map(crc_fast::crc32_iscsi)
            .collect();
        assert_eq!(&blocks[..], &expected[..]);
        drop(writer.await.unwrap());
        assert!(
            conn.stream.next().await.is_none(),
            "clean end between frames"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn senders_never_wait_on_a_full_socket_and_order_holds() {
        // Unbounded writes, the single-worker turns, and turns that cut headers and data
        // segments mid-way: the same bytes in the same order every time.
        for turn in [0, SINGLE_WORKER_TURN, 1000] {
            let (mut raw, conn) = pair_with(Limits {
                write_turn_bytes: turn,
                ..Limits::default()
            })
            .await;
            let big = Bytes::from(
                (0..16u32 << 20)
                    .map(|i| (i % 251) as u8)
                    .collect::<Vec<_>>(),
            );
            // `send` is not async: it cannot wait for the peer, which reads nothing until the end.
            let mut sent = vec![Frame::with_data(1, &b"big"[..], big.clone())];
            conn.writer.send(sent[0].clone()).unwrap();
            for i in 0..200u32 {
                let f = match i % 50 {
                    0 => Frame::with_data(3, i.to_le_bytes().to_vec(), big.slice(..1 << 20)),
                    _ => Frame::new(2, i.to_le_bytes().to_vec()),
                };
                conn.writer.send(f.clone()).unwrap();
                sent.push(f);
            }
            drop(conn.writer);
            let mut wire = Vec::new();
            tokio::io::AsyncReadExt::read_to_end(&mut raw, &mut wire)
                .await
                .unwrap();
            let mut buf = BytesMut::from(&wire[..]);
            let mut got = Vec::new();
            while let Some(f) = Frame::decode(&mut buf, &Limits::default()).unwrap() {
                got.push(f);
            }
            assert!(buf.is_empty());
            assert_eq!(
                got, sent,
                "turns of {turn} bytes: everything, in order, then the writer closed the socket"
            );
        }
    }

    #[tokio::test]
    async fn a_large_frame_cut_short_or_corrupted_is_an_error() {
        let data = Bytes::from(vec![4u8; ZERO_COPY_DATA_BYTES * 2]);
        let mut wire = BytesMut::new();
        Frame::with_data(2, &b"p"[..], data)
            .encode(&Limits::default(), &mut wire)
            .unwrap();
        // Cut in the payload, in the data, in the data's checksum.
        for cut in [HEADER_BYTES + 1, wire.len() - 100, wire.len() - 2] {
            let (mut raw, mut conn) = pair().await;
            raw.write_all(&wire[..cut]).await.unwrap();
            drop(raw);
            let next = tokio::time::timeout(Duration::from_secs(5), conn.stream.next())
                .await
                .expect("an answer, not a spin");
            assert!(matches!(next, Some(Err(MsgrError::Closed))), "cut at {cut}");
        }
        let (mut raw, mut conn) = pair().await;
        let mut bad = wire.clone();
        let at = bad.len() - 50;
        bad[at] ^= 1;
        raw.write_all(&bad).await.unwrap();
        assert!(matches!(
            conn.stream.next().await,
            Some(Err(MsgrError::PayloadChecksum { .. }))
        ));
    }

    #[test]
    fn a_batch_is_the_concatenation_of_its_frames_and_big_data_is_not_copied() {
        let limits = Limits::default();
        let big = Bytes::from(vec![5u8; ZERO_COPY_DATA_BYTES]);
        let frames = vec![
            Frame::new(1, &b"a"[..]),
            Frame::with_data(2, &b"b"[..], big.clone()),
            Frame::with_data(3, &b"c"[..], Bytes::from_static(b"small data")),
        ];
        let items: Vec<Outgoing> = frames.iter().cloned().map(Outgoing::Frame).collect();
        let pieces = encode_batch(&items, &limits, &mut None).unwrap();
        assert!(
            pieces.iter().any(|p| p.as_ptr() == big.as_ptr()),
            "the large data segment is sent from its own buffer"
        );
        let joined: Vec<u8> = pieces.iter().flat_map(|p| p.iter().copied()).collect();
        let mut expected = BytesMut::new();
        for f in &frames {
            f.encode(&limits, &mut expected).unwrap();
        }
        assert_eq!(joined, &expected[..]);
    }

    fn direction_keys(mode: WireMode) -> FrameKeys {
        FrameKeys::new(
            mode,
            &cairn_auth::handshake::DirectionKeys {
                mac: [3; 32],
                cipher: [4; 32],
            },
        )
    }

    /// Frames of every path (small, large read into its own buffer) through the encoder of
    /// a protected writer, as the wire bytes it sends.
    fn protected_wire(mode: WireMode, frames: &[Frame]) -> Vec<u8> {
        let mut items = vec![Outgoing::Protect(direction_keys(mode))];
        items.extend(frames.iter().cloned().map(Outgoing::Frame));
        let pieces = encode_batch(&items, &Limits::default(), &mut None).unwrap();
        pieces.iter().flat_map(|p| p.iter().copied()).collect()
    }

    fn mixed_frames() -> Vec<Frame> {
        let big = Bytes::from(
            (0..200_000u32)
                .map(|i| (i % 251) as u8)
                .collect::<Vec<u8>>(),
        );
        vec![
            Frame::new(1, &b"small"[..]),
            Frame::with_data(2, &b"big"[..], big),
            Frame::with_data(3, &b"c"[..], Bytes::from_static(b"small data")),
        ]
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn protected_frames_arrive_intact_and_secure_mode_hides_their_contents() {
        for mode in [WireMode::Mac, WireMode::Secure] {
            let frames = mixed_frames();
            let wire = protected_wire(mode, &frames);
            let needle = &frames[1].data()[1000..1064];
            let visible = wire.windows(needle.len()).any(|w| w == needle);
            assert_eq!(
                visible,
                mode == WireMode::Mac,
                "{mode}: plaintext on the wire"
            );
            let (mut raw, mut conn) = pair().await;
            conn.stream.protect(direction_keys(mode));
            for piece in wire.chunks(7000) {
                raw.write_all(piece).await.unwrap();
            }
            for want in &frames {
                let got = conn.stream.next().await.unwrap().unwrap();
                assert_eq!(&got, want, "{mode}");
                assert_eq!(got.data_crc(), crc_fast::crc32_iscsi(want.data()));
            }
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_changed_dropped_or_replayed_protected_frame_is_refused() {
        for mode in [WireMode::Mac, WireMode::Secure] {
            let frames = mixed_frames();
            let wire = protected_wire(mode, &frames);
            let first_len = frames[0].wire_len() + TAG_BYTES;
            let second_len = frames[1].wire_len() + TAG_BYTES;
            // A flipped bit anywhere in the big frame's body or tag.
            for at in [
                first_len + 40,
                first_len + 100_000,
                first_len + second_len - 1,
            ] {
                let mut bad = wire.clone();
                bad[at] ^= 0x10;
                let (mut raw, mut conn) = pair().await;
                conn.stream.protect(direction_keys(mode));
                raw.write_all(&bad).await.unwrap();
                assert!(
                    conn.stream.next().await.unwrap().is_ok(),
                    "first frame intact"
                );
                let e = conn.stream.next().await.unwrap().unwrap_err();
                assert!(
                    matches!(
                        e,
                        MsgrError::BadTag { .. } | MsgrError::PayloadChecksum { .. }
                    ),
                    "{mode} byte {at}: {e}"
                );
            }
            // The first frame dropped, or sent twice: the counter no longer matches.
            for tampered in [
                wire[first_len..].to_vec(),
                [&wire[..first_len], &wire[..first_len]].concat(),
            ] {
                let (mut raw, mut conn) = pair().await;
                conn.stream.protect(direction_keys(mode));
                raw.write_all(&tampered).await.unwrap();
                let mut outcome = Ok(());
                for _ in 0..2 {
                    if let Some(Err(e)) = conn.stream.next().await {
                        outcome = Err(e);
                        break;
                    }
                }
                // Secure mode may notice first that the payload, deciphered with the wrong
                // counter, fails its crc32c: refused either way, before anything is handed up.
                assert!(
                    matches!(
                        outcome,
                        Err(MsgrError::BadTag { .. } | MsgrError::PayloadChecksum { .. })
                    ),
                    "{mode}"
                );
            }
        }
    }
}
