//! One framed TCP connection: a stream of decoded frames and a writer task.
//!
//! Owns socket setup (no Nagle delay), the framing and the writing; reconnect and resend belong
//! to [`crate::session`]. Reading and writing run independently, so a connection whose peer is
//! busy writing to it still reads (two ends each writing a large batch can never wait on each
//! other forever). The writer gathers queued frames into one vectored write; a data segment of
//! at least [`ZERO_COPY_DATA_BYTES`] goes to the socket from its own buffer, uncopied.

use std::io::IoSlice;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use tokio::io::AsyncWriteExt;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::codec::FramedRead;

use crate::codec::FrameCodec;
use crate::error::MsgrError;
use crate::frame::{Frame, Limits};

/// Read half of a framed connection.
pub type FrameStream = FramedRead<OwnedReadHalf, FrameCodec>;

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
    frames: mpsc::UnboundedSender<Frame>,
}

impl FrameWriter {
    /// Queues `frame` to be written after those queued before it; fails once the writer task
    /// has stopped (the connection failed).
    pub fn send(&self, frame: Frame) -> Result<(), MsgrError> {
        self.frames.send(frame).map_err(|_| MsgrError::Closed)
    }
}

/// The connection's writer task.
pub struct WriterTask {
    task: JoinHandle<Result<(), MsgrError>>,
}

impl WriterTask {
    /// Resolves when the writer stops: with its error, or `Closed`.
    pub async fn stopped(&mut self) -> MsgrError {
        match (&mut self.task).await {
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
pub fn framed(stream: TcpStream, limits: Limits) -> Conn {
    let _ = stream.set_nodelay(true);
    let (read, write) = stream.into_split();
    let (tx, rx) = mpsc::unbounded_channel();
    let task = tokio::spawn(write_loop(write, rx, limits));
    Conn {
        writer: FrameWriter { frames: tx },
        task: WriterTask { task },
        stream: FramedRead::new(read, FrameCodec { limits }),
    }
}

async fn write_loop(
    mut sock: OwnedWriteHalf,
    mut frames: mpsc::UnboundedReceiver<Frame>,
    limits: Limits,
) -> Result<(), MsgrError> {
    let mut batch = Vec::with_capacity(MAX_FRAMES_PER_WRITE);
    while let Some(first) = frames.recv().await {
        batch.push(first);
        while batch.len() < MAX_FRAMES_PER_WRITE {
            match frames.try_recv() {
                Ok(f) => batch.push(f),
                Err(_) => break,
            }
        }
        let mut pieces = encode_batch(&batch, &limits)?;
        batch.clear();
        write_all(&mut sock, &mut pieces).await?;
    }
    sock.shutdown().await?;
    Ok(())
}

/// The wire bytes of `frames` as buffers to write in order: headers, payloads, checksums and
/// small data segments copied together; large data segments by reference.
fn encode_batch(frames: &[Frame], limits: &Limits) -> Result<Vec<Bytes>, MsgrError> {
    let mut pieces = Vec::new();
    let mut small = BytesMut::new();
    for f in frames {
        f.encode_head(limits, &mut small)?;
        if f.data().len() >= ZERO_COPY_DATA_BYTES {
            pieces.push(small.split().freeze());
            pieces.push(f.data().clone());
        } else {
            small.put_slice(f.data());
        }
        small.put_u32_le(f.data_crc());
    }
    pieces.push(small.freeze());
    Ok(pieces)
}

/// Writes every byte of `pieces` with vectored writes.
async fn write_all(sock: &mut OwnedWriteHalf, pieces: &mut [Bytes]) -> Result<(), MsgrError> {
    let mut first = 0;
    loop {
        while first < pieces.len() && pieces[first].is_empty() {
            first += 1;
        }
        if first == pieces.len() {
            return Ok(());
        }
        let slices: Vec<IoSlice<'_>> = pieces[first..]
            .iter()
            .take(MAX_IOVECS)
            .map(|p| IoSlice::new(p))
            .collect();
        let mut written = sock.write_vectored(&slices).await?;
        if written == 0 {
            return Err(MsgrError::Io(std::io::ErrorKind::WriteZero.into()));
        }
        while written > 0 {
            let piece = &mut pieces[first];
            let step = written.min(piece.len());
            piece.advance(step);
            written -= step;
            if piece.is_empty() {
                first += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_is_the_concatenation_of_its_frames_and_big_data_is_not_copied() {
        let limits = Limits::default();
        let big = Bytes::from(vec![5u8; ZERO_COPY_DATA_BYTES]);
        let frames = vec![
            Frame::new(1, &b"a"[..]),
            Frame::with_data(2, &b"b"[..], big.clone()),
            Frame::with_data(3, &b"c"[..], Bytes::from_static(b"small data")),
        ];
        let pieces = encode_batch(&frames, &limits).unwrap();
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
}
